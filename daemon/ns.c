/*
 * ns.c - namespace table (see ns.h).
 *
 * A flat array indexed by id - 1: declarations are rare (one per client connect) and the
 * number of namespaces is small, so a linear search by (model, revision, fingerprint) is the
 * simplest thing that is fast enough; lookups by id on the request path are O(1). Threads: loop
 * thread only.
 */
#include "ns.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ns_table {
    ns_t *ns[NS_MAX];
    uint32_t n;
};

ns_table_t *ns_table_new(void)
{
    return calloc(1, sizeof(ns_table_t));
}

void ns_table_destroy(ns_table_t **pt)
{
    ns_table_t *t = *pt;

    if (t == NULL)
        return;
    for (uint32_t i = 0; i < t->n; i++) {
        gates_destroy(&t->ns[i]->gates);
        free(t->ns[i]);
    }
    free(t);
    *pt = NULL;
}

static bool same_name(const char *have, const char *name, size_t len)
{
    return strlen(have) == len && (len == 0 || memcmp(have, name, len) == 0);
}

int ns_declare(ns_table_t *t, const ns_ident_t *id, const gates_cfg_t *gates_cfg, ns_t **out)
{
    ns_t *ns;

    if (id->model_len == 0 || id->model_len >= sizeof ns->model ||
        id->revision_len >= sizeof ns->revision)
        return -EINVAL;
    for (uint32_t i = 0; i < t->n; i++) {
        ns = t->ns[i];
        if (ns->fingerprint != id->fingerprint || !same_name(ns->model, id->model, id->model_len) ||
            !same_name(ns->revision, id->revision, id->revision_len))
            continue;
        if (ns->world != id->world || ns->replicated != id->replicated ||
            ns->chunk_tokens != id->chunk_tokens)
            return -EEXIST;
        *out = ns;
        return 0;
    }
    if (t->n == NS_MAX)
        return -ENOSPC;
    ns = calloc(1, sizeof *ns);
    if (ns == NULL)
        return -ENOMEM;
    ns->gates = gates_new(gates_cfg);
    if (ns->gates == NULL) {
        free(ns);
        return -ENOMEM;
    }
    memcpy(ns->model, id->model, id->model_len);
    if (id->revision_len > 0)
        memcpy(ns->revision, id->revision, id->revision_len);
    ns->fingerprint = id->fingerprint;
    ns->world = id->world;
    ns->replicated = id->replicated;
    ns->chunk_tokens = id->chunk_tokens;
    ns->id = t->n + 1;
    t->ns[t->n++] = ns;
    *out = ns;
    return 0;
}

ns_t *ns_get(const ns_table_t *t, uint32_t id)
{
    return id >= 1 && id <= t->n ? t->ns[id - 1] : NULL;
}

uint32_t ns_count(const ns_table_t *t)
{
    return t->n;
}
