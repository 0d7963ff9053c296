/*
 * test_value_daemon.c - the value admission policy of docs/GATES.md section 6 end to end: the real
 * kvtierd (started by the harness with gate settings in its config), driven through libkvtier
 * (kvt_tally2, kvt_lookup with prompt info, kvt_save) and a raw protocol 2 peer, observed
 * through TALLY_OK, GET /status (namespaces[].gates.admission, server.bytes_received /
 * bytes_committed) and the daemon's log.
 *
 * Covered: token tallies (TALLY_OK's protocol 2 fields, status, the TOKENS feature), regret
 * counted from lookups through ghosted chunks (and not from a lookup of another rank), two
 * ranks presenting one operation get one decision and count its tokens once, declined saves
 * move no bytes on the frames and the shared-memory path, policy selection per namespace with
 * each policy's shadow counting, and the value report line.
 *
 * Settings (VALUE_JSON): policy value, enabled, learn_tokens 0 and value_floor 0, so that the
 * gate admits the first operation (no offer yet: density 1.0), and, once a lookup showed reuse
 * and an offer aged the window without value, declines everything (density 0, share 0) until
 * value comes; chunk_tokens 16, min_load_tokens 32 (two chunks).
 *
 * Threads: one per test (Check forks each test). Every test starts its own daemon.
 */
#include "check_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "kvtier.h"

#define OP_BYTES 1000u /* payload of every chunk */
#define CT 16u         /* chunk_tokens */

#define VALUE_ADMISSION                                                                            \
    "\"admission\": {\"enabled\": true, \"policy\": \"value\", \"learn_tokens\": 0,"               \
    " \"value_floor\": 0, \"window_tokens\": 100000, \"report_every\": 4}"
#define VALUE_JSON "{\"gates\": {" VALUE_ADMISSION ", \"lookup_skip\": {\"min_load_tokens\": 32}}}"

/* --- status --- */

static json_t *ns_admission(json_t *st, const char *model)
{
    json_t *arr = json_object_get(st, "namespaces"), *e;
    size_t i;

    json_array_foreach(arr, i, e)
    {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m != NULL && strcmp(m, model) == 0)
            return json_object_get(json_object_get(e, "gates"), "admission");
    }
    ck_abort_msg("namespace %s is not in status", model);
    return NULL;
}

typedef struct {
    int64_t saved, skipped, served, regret, written, declined, offered, reuse, ghosts, removals;
    int64_t orphans, atom_would_decline, value_would_decline, token_tallies, lookup_tokens;
    int64_t bytes_received, bytes_committed;
    double density, share;
    char policy[8];
} vsnap_t;

static vsnap_t snap(const harness_t *h, const char *model)
{
    json_t *st = harness_status(h), *a;
    vsnap_t v;

    ck_assert_ptr_nonnull(st);
    a = ns_admission(st, model);
    v.saved = harness_jint(a, "saved");
    v.skipped = harness_jint(a, "skipped");
    v.served = harness_jint(a, "served_tokens");
    v.regret = harness_jint(a, "regret_tokens");
    v.written = harness_jint(a, "written_tokens");
    v.declined = harness_jint(a, "declined_tokens");
    v.offered = harness_jint(a, "offered_tokens");
    v.reuse = harness_jint(a, "reuse_tokens");
    v.ghosts = harness_jint(a, "ghost.entries");
    v.removals = harness_jint(a, "ghost.removals");
    v.orphans = harness_jint(a, "orphans_declined");
    v.atom_would_decline = harness_jint(a, "atom.would_decline");
    v.value_would_decline = harness_jint(a, "value.would_decline");
    v.token_tallies = harness_jint(a, "token_tallies");
    v.lookup_tokens = harness_jint(a, "lookup_tokens");
    v.density = json_real_value(json_object_get(a, "density"));
    v.share = json_real_value(json_object_get(a, "share"));
    snprintf(v.policy, sizeof v.policy, "%s", json_string_value(json_object_get(a, "policy")));
    v.bytes_received = harness_jint(st, "server.bytes_received");
    v.bytes_committed = harness_jint(st, "server.bytes_committed");
    json_decref(st);
    return v;
}

/* --- client helpers --- */

static kvt_client_t *client(const harness_t *h, const char *model, uint32_t world, uint32_t rank,
                            int data_path)
{
    return harness_client_with(h, model, world, rank, CT, data_path);
}

static kvt_hash_t op_hash(uint32_t tag, uint32_t op, uint32_t i)
{
    kvt_hash_t h;
    uint32_t w[4] = {0x76647465u, tag, op, i};

    memcpy(h.b, w, sizeof h.b);
    return h;
}

/* Save operation op of tag: 4 chunks of OP_BYTES (the same hashes from every rank) under op id
 * id (the daemon remembers a decision per op id); returns the outcome of its first chunk after
 * checking all four got the same one. */
static int save_op_id(kvt_client_t *c, uint32_t rank, uint32_t tag, uint32_t op, uint64_t id)
{
    kvt_hash_t hs[4];
    uint8_t bufs[4][OP_BYTES], out[4];
    const void *ptrs[4];
    size_t lens[4];
    kvt_save_opts_t so = {.has_op_id = 1, .op_id = id};
    int rc;

    for (uint32_t i = 0; i < 4; i++) {
        hs[i] = op_hash(tag, op, i);
        harness_fill(bufs[i], OP_BYTES, rank, (uint64_t)tag << 32 | op);
        ptrs[i] = bufs[i];
        lens[i] = OP_BYTES;
    }
    rc = kvt_save(c, hs, 4, ptrs, lens, &so, out);
    ck_assert_msg(rc == 0, "kvt_save: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    for (uint32_t i = 1; i < 4; i++)
        ck_assert_int_eq(out[i], out[0]);
    return out[0];
}

static int save_op(kvt_client_t *c, uint32_t rank, uint32_t tag, uint32_t op)
{
    return save_op_id(c, rank, tag, op, (uint64_t)tag << 32 | op);
}

/* A lookup of operation op's 4 chunks with prompt info (prompt 65 tokens, hbm as given). */
static kvt_lookup_result_t lookup_op(kvt_client_t *c, uint32_t tag, uint32_t op, uint64_t hbm,
                                     int all_ranks)
{
    kvt_hash_t hs[4];
    uint32_t rank_hits[4];
    kvt_lookup_opts_t lo = {
        .all_ranks = all_ranks, .has_prompt = 1, .prompt_tokens = 65, .hbm_tokens = hbm};
    kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = 4};
    int rc;

    for (uint32_t i = 0; i < 4; i++)
        hs[i] = op_hash(tag, op, i);
    rc = kvt_lookup(c, hs, 4, &lo, &res);
    ck_assert_msg(rc == 0, "kvt_lookup: %s", kvt_strerror(rc));
    return res;
}

/* Admits operation 0 (density 1.0 before any offer), shows reuse with a lookup of it whose HBM
 * prefix covers the hit (64 tokens reused, nothing to load), admits operation 1 (whose offer
 * starts the window with no value): from then on the gate declines. */
static void decline_from_now(kvt_client_t *c, uint32_t tag)
{
    ck_assert_int_eq(save_op(c, 0, tag, 0), KVT_SAVE_STORED);
    ck_assert_uint_eq(lookup_op(c, tag, 0, 64, 0).hit, 4);
    ck_assert_int_eq(save_op(c, 0, tag, 1), KVT_SAVE_STORED);
}

/* ---------------------------------------------------------------------------------------------
 */

/* Token tallies: kvt_tally2's totals fold (first whole, then differences, a decrease
 * re-baselines), TALLY_OK answers policy, density and the token figures, kvt_submit_tally's
 * too, a protocol 2 HELLO offering TOKENS gets it answered. */
START_TEST(test_token_tallies)
{
    harness_opts_t ho = {.extra_json = VALUE_JSON};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c = client(h, "tokens", 1, 0, KVT_DATA_PATH_AUTO);
    kvt_gate_state_t gs;
    vsnap_t v;

    ck_assert_int_eq(kvt_tally2(c, 5, 1, 3, &(kvt_tally_tokens_t){4096, 30000}, NULL, 0, &gs), 0);
    ck_assert_int_eq(gs.policy, KVT_ADMISSION_VALUE);
    ck_assert_uint_eq(gs.served_tokens, 4096);
    ck_assert_uint_eq(gs.probes, 3);
    ck_assert(gs.density == 1.0); /* no offer yet: the window is empty (GATES.md 6.1) */
    ck_assert_int_eq(kvt_tally2(c, 5, 2, 5, &(kvt_tally_tokens_t){6000, 40000}, NULL, 0, &gs), 0);
    ck_assert_uint_eq(gs.served_tokens, 6000);
    /* an engine restart (served went down) folds nothing; then differences again */
    ck_assert_int_eq(kvt_tally2(c, 5, 0, 1, &(kvt_tally_tokens_t){100, 1000}, NULL, 0, &gs), 0);
    ck_assert_uint_eq(gs.served_tokens, 6000);
    ck_assert_int_eq(kvt_tally2(c, 5, 1, 2, &(kvt_tally_tokens_t){400, 5000}, NULL, 0, &gs), 0);
    ck_assert_uint_eq(gs.served_tokens, 6300);
    ck_assert_uint_eq(gs.probes, 6);
    /* plain kvt_tally: verdicts only */
    ck_assert_int_eq(kvt_tally(c, 5, 1, 3, NULL, 0, &gs), 0);
    ck_assert_uint_eq(gs.served_tokens, 6300);
    ck_assert_uint_eq(gs.probes, 7);
    v = snap(h, "tokens");
    ck_assert_int_eq(v.served, 6300);
    ck_assert_int_eq(v.lookup_tokens, 44000);
    ck_assert_int_eq(v.token_tallies, 4);
    ck_assert_str_eq(v.policy, "value");
    ck_assert_int_eq(gs.written_tokens, 0);
    ck_assert_int_eq(gs.declined_tokens, 0);
    /* the asynchronous tally carries the token totals the same way (TALLY flag TOKENS) */
    {
        kvt_tally_req_t t = {.engine_id = 5,
                             .paid_total = 2,
                             .probes_total = 4,
                             .has_tokens = 1,
                             .served_tokens_total = 800,
                             .lookup_tokens_total = 6000};
        kvt_completion_t *comp;
        kvt_handle_t hd;
        ck_assert_int_eq(kvt_submit_tally(c, &t, NULL, &hd), 0);
        comp = harness_next_completion(c, 10000);
        ck_assert_uint_eq(comp->handle, hd);
        ck_assert_int_eq(comp->status, 0);
        ck_assert_int_eq(comp->gates.policy, KVT_ADMISSION_VALUE);
        ck_assert_uint_eq(comp->gates.served_tokens, 6700);
        ck_assert_uint_eq(comp->gates.probes, 8);
        kvt_completion_free(c, comp);
        v = snap(h, "tokens");
        ck_assert_int_eq(v.served, 6700);
        ck_assert_int_eq(v.lookup_tokens, 45000);
        ck_assert_int_eq(v.token_tallies, 5);
    }

    /* a protocol 2 HELLO offering TOKENS: answered */
    {
        void *ctx = zmq_ctx_new();
        void *s = harness_raw_open(ctx, h->endpoint, 5000);
        kvt_msg_t m = {.hdr = {.version = 2, .type = KVT_MSG_HELLO, .req_id = 1}}, rep;
        uint8_t head[128];
        kvt_frame_t f[3] = {{head, 0}, {"raw", 3}, {"", 0}};
        harness_raw_msg_t r;

        m.u.hello.layout_fp = 0x70c;
        m.u.hello.chunk_tokens = CT;
        m.u.hello.world = 1;
        m.u.hello.features = KVT_FEAT_TOKENS;
        f[0].len = kvt_head_encode(head, sizeof head, &m);
        ck_assert_int_eq(harness_raw_send(s, f, 3), 0);
        ck_assert_int_eq(harness_raw_recv(s, &r), 0);
        harness_raw_decode(&r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_HELLO_OK);
        ck_assert_uint_eq(rep.u.hello_ok.features & KVT_FEAT_TOKENS, KVT_FEAT_TOKENS);
        harness_raw_msg_close(&r);
        zmq_close(s);
        zmq_ctx_term(ctx);
    }
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Regret: declined operations' chunks enter the ghost table; a lookup through them (nothing
 * stored, nothing in HBM, prompt 65 tokens: a load of 64 would pay) counts 64 tokens of regret,
 * which lifts the density above the cost: the next operation is admitted again, and offering
 * the declined chunks again removes their ghosts. The declined operations moved no byte. */
START_TEST(test_regret_from_ghosts)
{
    harness_opts_t ho = {.extra_json = VALUE_JSON};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c = client(h, "regret", 1, 0, KVT_DATA_PATH_FRAMES);
    vsnap_t v0, v;

    decline_from_now(c, 1);
    v0 = snap(h, "regret");
    ck_assert_int_eq(v0.reuse, 64);
    ck_assert(v0.density == 0.0);
    ck_assert_int_eq(save_op(c, 0, 1, 2), KVT_SAVE_DECLINED);
    ck_assert_int_eq(save_op(c, 0, 1, 3), KVT_SAVE_DECLINED);
    v = snap(h, "regret");
    ck_assert_int_eq(v.saved, 2);
    ck_assert_int_eq(v.skipped, 2);
    ck_assert_int_eq(v.written, 2 * 4 * CT);
    ck_assert_int_eq(v.declined, 2 * 4 * CT);
    ck_assert_int_eq(v.ghosts, 8);
    ck_assert_int_eq(v.bytes_received - v0.bytes_received, 0); /* declined: no payload */

    ck_assert_uint_eq(lookup_op(c, 1, 2, 0, 0).hit, 0);
    v = snap(h, "regret");
    ck_assert_int_eq(v.regret, 64);
    ck_assert(v.density > 0.05);
    ck_assert(v.share == 1.0);
    /* a lookup whose HBM prefix covers the ghosts: nothing it could load, no regret */
    ck_assert_uint_eq(lookup_op(c, 1, 3, 64, 0).hit, 0);
    ck_assert_int_eq(snap(h, "regret").regret, 64);

    /* the same chunks in a new operation (the declined one's decision is remembered for 60 s) */
    ck_assert_int_eq(save_op_id(c, 0, 1, 3, 0x1003), KVT_SAVE_STORED);
    v = snap(h, "regret");
    ck_assert_int_eq(v.removals, 4);
    ck_assert_int_eq(v.ghosts, 4);
    ck_assert_int_eq(v.offered, 4 * 4 * CT); /* offered again: not a new offer */
    ck_assert_int_eq(v.bytes_received - v0.bytes_received, 4 * OP_BYTES);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Two ranks present one operation: one decision, the same answer, its tokens counted once; a
 * lookup of rank 1 gives no value evidence (rank 0 and all-ranks lookups do, once per engine
 * request), an all-ranks lookup does. */
START_TEST(test_two_ranks)
{
    harness_opts_t ho = {.extra_json = VALUE_JSON};
    harness_t *h = harness_start(&ho);
    kvt_client_t *r0 = client(h, "ranks", 2, 0, KVT_DATA_PATH_FRAMES);
    kvt_client_t *r1 = client(h, "ranks", 2, 1, KVT_DATA_PATH_FRAMES);
    vsnap_t v0, v;

    ck_assert_int_eq(save_op(r0, 0, 2, 0), KVT_SAVE_STORED);
    ck_assert_int_eq(save_op(r1, 1, 2, 0), KVT_SAVE_STORED);
    ck_assert_uint_eq(lookup_op(r1, 2, 0, 64, 0).hit, 4);
    ck_assert_int_eq(snap(h, "ranks").reuse, 0); /* rank 1's lookup: no evidence */
    ck_assert_uint_eq(lookup_op(r0, 2, 0, 64, 0).hit, 4);
    ck_assert_int_eq(snap(h, "ranks").reuse, 64);
    ck_assert_int_eq(save_op(r1, 1, 2, 1), KVT_SAVE_STORED); /* rank 1 first this time */
    ck_assert_int_eq(save_op(r0, 0, 2, 1), KVT_SAVE_STORED);
    v0 = snap(h, "ranks");
    for (uint32_t k = 2; k < 6; k++) {
        ck_assert_int_eq(save_op(k % 2 ? r1 : r0, k % 2, 2, k), KVT_SAVE_DECLINED);
        ck_assert_int_eq(save_op(k % 2 ? r0 : r1, (k + 1) % 2, 2, k), KVT_SAVE_DECLINED);
    }
    v = snap(h, "ranks");
    ck_assert_int_eq(v.saved, 2);
    ck_assert_int_eq(v.skipped, 4);
    ck_assert_int_eq(v.written, 2 * 4 * CT);
    ck_assert_int_eq(v.declined, 4 * 4 * CT);
    ck_assert_int_eq(v.ghosts, 16);
    ck_assert_int_eq(v.bytes_received - v0.bytes_received, 0);
    /* rank 1 looks through the ghosts: nothing; all ranks: 64 tokens of regret, once */
    lookup_op(r1, 2, 5, 0, 0);
    ck_assert_int_eq(snap(h, "ranks").regret, 0);
    ck_assert_uint_eq(lookup_op(r1, 2, 5, 0, 1).hit, 0);
    ck_assert_int_eq(snap(h, "ranks").regret, 64);
    kvt_close(&r0);
    kvt_close(&r1);
    harness_stop(&h);
}
END_TEST

/* The shared-memory path: a declined SAVE_RESERVE reserves no extent and commits no byte. */
START_TEST(test_shm_declined)
{
    char extra[512];
    harness_opts_t ho = {.extra_json = extra};
    harness_t *h;
    kvt_client_t *c;
    vsnap_t v0, v;

    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"%s/value-%d.arena\"}, \"gates\": {" VALUE_ADMISSION
             ", \"lookup_skip\": {\"min_load_tokens\": 32}}}",
             check_scratch_dir(), (int)getpid());
    h = harness_start(&ho);
    c = client(h, "shm", 1, 0, KVT_DATA_PATH_SHM);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_SHM);
    decline_from_now(c, 3);
    v0 = snap(h, "shm");
    ck_assert_int_eq(v0.bytes_committed, 2 * 4 * OP_BYTES);
    for (uint32_t k = 2; k < 6; k++)
        ck_assert_int_eq(save_op(c, 0, 3, k), KVT_SAVE_DECLINED);
    v = snap(h, "shm");
    ck_assert_int_eq(v.bytes_committed, v0.bytes_committed);
    ck_assert_int_eq(v.bytes_received, 0);
    ck_assert_int_eq(v.declined, 4 * 4 * CT);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Policy per namespace: "value" by default when enabled, "atom" by an override; each counts the
 * other's would-be declines. The value report line comes every report_every (4) decisions: after
 * the fourth of "new", two admitted and two declined. */
START_TEST(test_policy_per_namespace)
{
    harness_opts_t ho = {
        .extra_json =
            "{\"gates\": {" VALUE_ADMISSION ", \"lookup_skip\": {\"min_load_tokens\": 32}},"
            " \"namespaces\": {\"old\": {\"gates\": {\"admission\": {\"policy\": \"atom\","
            " \"warmup\": 0, \"alpha\": 1, \"floor\": 1}}}}}"};
    harness_t *h = harness_start(&ho);
    kvt_client_t *nv = client(h, "new", 1, 0, KVT_DATA_PATH_AUTO);
    kvt_client_t *na = client(h, "old", 1, 0, KVT_DATA_PATH_AUTO);
    kvt_gate_state_t gs;
    vsnap_t v;

    decline_from_now(na, 4);
    ck_assert_int_eq(kvt_tally(na, 1, 0, 10, NULL, 0, &gs), 0);
    ck_assert_int_eq(gs.policy, KVT_ADMISSION_ATOM);
    for (uint32_t k = 2; k < 6; k++)
        ck_assert_int_eq(save_op(na, 0, 4, k), KVT_SAVE_STORED); /* atom: floor 1 */
    v = snap(h, "old");
    ck_assert_str_eq(v.policy, "atom");
    ck_assert_int_eq(v.skipped, 0);
    ck_assert_int_eq(v.value_would_decline, 4);
    ck_assert_int_eq(v.atom_would_decline, 0);
    ck_assert_int_eq(v.ghosts, 0);

    decline_from_now(nv, 5);
    ck_assert_int_eq(kvt_tally(nv, 1, 0, 10, NULL, 0, &gs), 0); /* atom's payoff 0 in "new" */
    for (uint32_t k = 2; k < 6; k++)
        ck_assert_int_eq(save_op(nv, 0, 5, k), KVT_SAVE_DECLINED);
    v = snap(h, "new");
    ck_assert_str_eq(v.policy, "value");
    ck_assert_int_eq(v.skipped, 4);
    ck_assert_int_eq(v.atom_would_decline, 0); /* atom's warmup (64 verdicts) runs still */
    ck_assert_int_eq(harness_log_count(h, "event=admission_value ns=new policy=value "), 1);
    ck_assert_int_eq(harness_log_count(h, "event=admission_value ns=old policy=atom "), 1);
    ck_assert_int_eq(
        harness_log_count(
            h, "event=admission_value ns=new policy=value density=0.000000 share=0.000000 "
               "served=0 regret=0 written=128 declined=128 ghosts=8 saved=2 skipped=2"),
        1);
    kvt_close(&nv);
    kvt_close(&na);
    harness_stop(&h);
}
END_TEST

static Suite *value_daemon_suite(void)
{
    Suite *s = suite_create("value_daemon");
    TCase *tc = tcase_create("value");

    tcase_add_test(tc, test_token_tallies);
    tcase_add_test(tc, test_regret_from_ghosts);
    tcase_add_test(tc, test_two_ranks);
    tcase_add_test(tc, test_shm_declined);
    tcase_add_test(tc, test_policy_per_namespace);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = value_daemon_suite, .scratch = "kvtvd"};
