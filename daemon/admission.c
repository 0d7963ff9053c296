/*
 * admission.c - once-per-operation save admission over the namespace's gate (see admission.h).
 *
 * Design: the decisions live in a saveops table of SAVEOPS_CAPACITY entries that expire after
 * SAVEOPS_TTL_MS: the ranks of one operation arrive within milliseconds of each other, so a
 * minute covers a stalled rank, and the table bounds the memory whatever the clients send. An
 * operation forgotten (expired or pushed out) and presented again is decided again.
 *
 * The first rank's request is the operation the gate sees (gates_admit_op): its WANTED chunks
 * are what the engine would write, so they are the tokens the value policy counts as written or
 * declined, and the ones the ghost table remembers when it declines (the other ranks save shards
 * of the same chunks under the same hashes). A recalled decision counts nothing again. The value
 * policy's report line is written here, every report_every decisions.
 *
 * Threads: loop thread only.
 */
#include "admission.h"

#include "gates.h"
#include "log.h"
#include "saveops.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SAVEOPS_CAPACITY 65536u
#define SAVEOPS_TTL_MS 60000u

struct admission {
    saveops_t *ops;
};

admission_t *admission_new(void)
{
    admission_t *a = calloc(1, sizeof *a);

    if (a == NULL)
        return NULL;
    a->ops = saveops_new(SAVEOPS_CAPACITY, SAVEOPS_TTL_MS);
    if (a->ops == NULL) {
        free(a);
        return NULL;
    }
    return a;
}

void admission_destroy(admission_t **pa)
{
    admission_t *a = *pa;

    if (a == NULL)
        return;
    saveops_destroy(&a->ops);
    free(a);
    *pa = NULL;
}

static void log_value_report(const ns_t *ns)
{
    gates_state_t st;
    char q[2 * KVT_MODEL_MAX];

    gates_state(ns->gates, &st);
    log_info("admission_value",
             "ns=%s policy=%s density=%.6f share=%.6f served=%" PRIu64 " regret=%" PRIu64
             " written=%" PRIu64 " declined=%" PRIu64 " ghosts=%" PRIu64 " saved=%" PRIu64
             " skipped=%" PRIu64 " atom_would_decline=%" PRIu64 " value_would_decline=%" PRIu64,
             log_value(q, sizeof q, ns->model), gates_policy_words[st.policy], st.density,
             st.value_share, st.token_tallies > 0 ? st.served_tokens : st.estimated_served_tokens,
             st.regret_tokens, st.written_tokens, st.declined_tokens, st.ghost.entries, st.saved,
             st.skipped, st.atom_would_decline, st.value_would_decline);
}

/* The decision of the operation, taken once and remembered for every rank. */
static bool operation_admitted(admission_t *a, ns_t *ns, const kvt_msg_t *req, uint64_t now_ms,
                               const uint8_t *status)
{
    const kvt_save_t *s = &req->u.save;
    saveops_key_t key = {.ns = ns->id, .count = (uint32_t)s->nhashes};
    bool admit;

    if (req->hdr.flags & KVT_SAVE_OPID) {
        key.has_op_id = true;
        key.op_id = s->op_id;
    }
    memcpy(&key.first, &s->hashes[0], sizeof key.first);
    if (saveops_get(a->ops, &key, now_ms, &admit))
        return admit;
    admit = gates_admit_op(
        ns->gates, &(gates_op_t){.hashes = s->hashes,
                                 .status = status,
                                 .n = s->nhashes,
                                 .parent = (req->hdr.flags & KVT_SAVE_PARENT) ? &s->parent : NULL,
                                 .chunk_tokens = ns->chunk_tokens});
    saveops_put(a->ops, &key, admit, now_ms);
    if (gates_value_report_due(ns->gates))
        log_value_report(ns);
    return admit;
}

bool admission_decide(admission_t *a, ns_t *ns, const kvt_msg_t *req, uint64_t now_ms,
                      size_t wanted, uint8_t *status)
{
    if (wanted == 0 || operation_admitted(a, ns, req, now_ms, status))
        return true;
    for (size_t i = 0; i < req->u.save.nhashes; i++)
        if (status[i] == KVT_CHUNK_WANTED)
            status[i] = KVT_CHUNK_DECLINED;
    return false;
}

uint32_t admission_remembered(const admission_t *a)
{
    return saveops_count(a->ops);
}
