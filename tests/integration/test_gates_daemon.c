/*
 * test_gates_daemon.c - the two gates of docs/GATES.md end to end: the real kvtierd (started by the
 * harness with gate settings in its config), driven through libkvtier, observed through GET
 * /status (namespaces[].gates, server.bytes_received / bytes_committed, ram.leased_chunks) and
 * the daemon's log.
 *
 * Covered: tallies from two engine instances of one namespace, a counter reset, admission
 * scenarios 1-13 (the estimator fed by tallies, the decisions by real save operations, the
 * declined ones proven payload-free by the received-bytes counter, and on the shared-memory
 * path by the committed-bytes counter), lookup-skip scenarios 1-7 in a namespace of
 * chunk_tokens 8 exactly as GATES.md states them, and namespaces with different settings
 * leaving each other alone. Expected payoffs and act_ema values are recomputed here with the
 * formulas of GATES.md (this file is compiled with -ffp-contract=off) and compared with ==:
 * jansson writes reals with 17 significant digits, so status round-trips every double.
 *
 * Mapping of a GATES.md "feed(x, n)" to the daemon: engines never send single verdicts, they
 * send cumulative totals; a tally whose totals grow by (h paid, n probes) folds batch(h, n).
 * With alpha 1 (scenarios 2-5) a batch of n non-paid verdicts leaves payoff exactly where n
 * single folds leave it (0.0; 1.0 for paid ones), and with alpha 0.5 (scenario 6) both give
 * 0.5^200 exactly, then 1.0; so each scenario's decisions are the ones GATES.md states.
 *
 * Every configuration here names policy atom (value is the default since issue 12): these are
 * atom's scenarios, unchanged; tests/integration/test_value_daemon.c covers policy value.
 *
 * Threads: one per test (Check forks each test). Every test starts its own daemon.
 * Invariants: a save operation here is one kvt_save call; its chunks' hashes are unique per
 * (test, operation), so operations never collide in the daemon's table of decisions.
 */
#include "check_main.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvtier.h"

#define MIB (1024u * 1024u)
#define OP_BYTES 1000u /* payload of every chunk of a save operation */

/* --- reference formulas (GATES.md, written out independently of daemon/gates.c) --- */

static double ref_one(double payoff, double alpha, int paid)
{
    double x = paid ? 1.0 : 0.0;
    return payoff + alpha * (x - payoff);
}

static double ref_batch(double payoff, double alpha, uint64_t h, uint64_t n)
{
    double keep = pow(1.0 - alpha, (double)n);
    if (h > n)
        h = n;
    return payoff * keep + ((double)h / (double)n) * (1.0 - keep);
}

static double ref_act(double act, double alpha, int actionable, int times)
{
    for (int i = 0; i < times; i++)
        act = act + alpha * ((actionable ? 1.0 : 0.0) - act);
    return act;
}

/* --- status access --- */

/* The gates object of the namespace with this model (borrowed from st); fails if absent. */
static json_t *ns_gates(json_t *st, const char *model)
{
    json_t *arr = json_object_get(st, "namespaces"), *e;
    size_t i;

    ck_assert_msg(json_is_array(arr), "status.namespaces is not an array");
    json_array_foreach(arr, i, e)
    {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m != NULL && strcmp(m, model) == 0)
            return json_object_get(e, "gates");
    }
    ck_abort_msg("namespace %s is not in status", model);
    return NULL;
}

/* A snapshot of one namespace's gates plus the server counters. */
typedef struct {
    int64_t probes, saved, skipped, would_decline;
    double payoff, share, save_share, target, floor_, alpha;
    int64_t lookups, skips, forced_probes, would_skip, min_load_tokens;
    double act_ema;
    int adm_enabled, skip_enabled, load_bearing;
    int64_t bytes_received, bytes_committed, leased_chunks, ram_hits, ram_misses;
    int64_t reason_hbm, reason_small, reason_large, nreasons;
} gsnap_t;

static double jdbl(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    ck_assert_msg(json_is_real(v), "gates field %s is missing or not a real", key);
    return json_real_value(v);
}

static int jbool(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    ck_assert_msg(json_is_boolean(v), "gates field %s is missing or not a boolean", key);
    return json_is_true(v);
}

static int64_t jreason(json_t *reasons, const char *name)
{
    json_t *v = json_object_get(reasons, name);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

static gsnap_t snap(const harness_t *h, const char *model)
{
    json_t *st = harness_status(h), *g, *a, *s;
    gsnap_t r;

    ck_assert_msg(st != NULL, "GET /status did not answer");
    g = ns_gates(st, model);
    a = json_object_get(g, "admission");
    s = json_object_get(g, "lookup_skip");
    ck_assert(json_is_object(a) && json_is_object(s));
    r.probes = harness_jint(a, "probes");
    r.saved = harness_jint(a, "saved");
    r.skipped = harness_jint(a, "skipped");
    r.would_decline = harness_jint(a, "would_decline");
    r.payoff = jdbl(a, "payoff");
    r.share = jdbl(a, "share");
    r.save_share = jdbl(a, "save_share");
    r.target = jdbl(a, "target");
    r.floor_ = jdbl(a, "floor");
    r.alpha = jdbl(a, "alpha");
    r.adm_enabled = jbool(a, "enabled");
    r.reason_hbm = jreason(json_object_get(a, "reasons"), "hbm_satisfies_after_alloc");
    r.reason_small = jreason(json_object_get(a, "reasons"), "too_small");
    r.reason_large = jreason(json_object_get(a, "reasons"), "aligned_large_hit");
    r.nreasons = (int64_t)json_object_size(json_object_get(a, "reasons"));
    r.lookups = harness_jint(s, "lookups");
    r.skips = harness_jint(s, "skips");
    r.forced_probes = harness_jint(s, "forced_probes");
    r.would_skip = harness_jint(s, "would_skip");
    r.min_load_tokens = harness_jint(s, "min_load_tokens");
    r.act_ema = jdbl(s, "act_ema");
    r.skip_enabled = jbool(s, "enabled");
    r.load_bearing = jbool(s, "load_bearing");
    r.bytes_received = harness_jint(st, "server.bytes_received");
    r.bytes_committed = harness_jint(st, "server.bytes_committed");
    r.leased_chunks = harness_jint(st, "ram.leased_chunks");
    r.ram_hits = harness_jint(st, "ram.hits");
    r.ram_misses = harness_jint(st, "ram.misses");
    json_decref(st);
    return r;
}

/* --- client helpers --- */

static kvt_gate_state_t tally(kvt_client_t *c, uint64_t engine, uint64_t paid, uint64_t probes)
{
    kvt_gate_state_t gs;
    int rc = kvt_tally(c, engine, paid, probes, NULL, 0, &gs);

    ck_assert_msg(rc == 0, "kvt_tally: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    return gs;
}

/* The hash of chunk i of save operation op under tag: unique per (tag, op, i). */
static kvt_hash_t op_hash(uint32_t tag, uint32_t op, uint32_t i)
{
    kvt_hash_t h;
    uint32_t w[4] = {0x6761u, tag, op, i};

    memcpy(h.b, w, sizeof h.b);
    return h;
}

/* One save operation of n chunks (OP_BYTES each, pattern of (rank, op)); returns the outcome of
 * its first chunk after checking that every chunk got the same one. */
static int save_op(kvt_client_t *c, uint32_t rank, uint32_t tag, uint32_t op, size_t n,
                   const uint64_t *op_id)
{
    kvt_hash_t hs[8];
    uint8_t bufs[8][OP_BYTES], out[8];
    const void *ptrs[8];
    size_t lens[8];
    kvt_save_opts_t so = {.has_op_id = op_id != NULL, .op_id = op_id ? *op_id : 0};
    int rc;

    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        hs[i] = op_hash(tag, op, (uint32_t)i);
        harness_fill(bufs[i], OP_BYTES, rank, (uint64_t)tag << 32 | op);
        ptrs[i] = bufs[i];
        lens[i] = OP_BYTES;
    }
    rc = kvt_save(c, hs, n, ptrs, lens, &so, out);
    ck_assert_msg(rc == 0, "kvt_save(op %u): %s (%s)", op, kvt_strerror(rc), kvt_last_error(c));
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(out[i] == out[0], "op %u: chunk %zu outcome %d, chunk 0 %d", op, i, out[i],
                      out[0]);
    return out[0];
}

/* ops save operations of one chunk (tag, first..first+ops-1); returns how many were stored and
 * asserts every other one was declined. admitted_out (may be NULL) gets 1/0 per operation. */
static int save_ops(kvt_client_t *c, uint32_t tag, uint32_t first, int ops, uint8_t *admitted_out)
{
    int stored = 0;

    for (int k = 0; k < ops; k++) {
        int o = save_op(c, 0, tag, first + (uint32_t)k, 1, NULL);
        ck_assert_msg(o == KVT_SAVE_STORED || o == KVT_SAVE_DECLINED,
                      "op %d: outcome %d, want stored or declined", k, o);
        stored += o == KVT_SAVE_STORED;
        if (admitted_out != NULL)
            admitted_out[k] = o == KVT_SAVE_STORED;
    }
    return stored;
}

/* ---------------------------------------------------------------------------------------------
 * Tallies: two engine instances, a counter reset, scenarios 7, 8, 10, 11, 12, the log line
 */

static const char tally_cfg[] = "{\"gates\": {\"admission\": {\"policy\": \"atom\"}},"
                                " \"namespaces\": {"
                                " \"tally\": {\"gates\": {\"admission\": {\"report_every\": 16}}},"
                                " \"clamp\": {\"gates\": {\"admission\": {\"alpha\": 1}}},"
                                " \"half\": {\"gates\": {\"admission\": {\"alpha\": 0.5}}}"
                                "}}";

START_TEST(test_tallies)
{
    harness_opts_t ho = {.extra_json = tally_cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *e1 = harness_client(h, "tally", 1, 0, 0);
    kvt_client_t *e2 = harness_client(h, "tally", 1, 0, 0);
    const double a = 0.0625;
    double p = 1.0;
    kvt_gate_state_t gs;
    gsnap_t s;
    char line[160];

    /* Scenario 8: a fresh namespace. */
    s = snap(h, "tally");
    ck_assert(s.payoff == 1.0 && s.share == 1.0 && s.save_share == 1.0 && s.act_ema == 0.0);
    ck_assert_int_eq(s.probes, 0);
    ck_assert_int_eq(s.adm_enabled, 0);
    ck_assert(s.alpha == a && s.target == 0.10 && s.floor_ == 0.25);

    /* Scenario 12 with engine 1; its first totals fold whole (seen starts at 0, 0). */
    gs = tally(e1, 1, 2, 10);
    p = ref_batch(p, a, 2, 10);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 10);
    ck_assert_int_eq(gs.admission_enabled, 0);
    gs = tally(e1, 1, 5, 30); /* folds batch(3, 20) */
    p = ref_batch(p, a, 3, 20);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 30);

    /* A second engine instance of the namespace (its own connection, its own totals). */
    gs = tally(e2, 2, 3, 20);
    p = ref_batch(p, a, 3, 20);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 50);

    /* Engine 1 restarts: (0, 4) folds nothing and re-baselines; (1, 6) folds batch(1, 2). */
    gs = tally(e1, 1, 0, 4);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 50);
    gs = tally(e1, 1, 1, 6);
    p = ref_batch(p, a, 1, 2);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 52);
    /* Repeated totals fold nothing, for either engine. */
    gs = tally(e1, 1, 1, 6);
    ck_assert(gs.payoff == p);
    gs = tally(e2, 2, 3, 20);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 52);
    /* Engine 2 was not reset by engine 1's restart: its difference folds. */
    gs = tally(e2, 2, 4, 25);
    p = ref_batch(p, a, 1, 5);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 57);
    /* An engine whose paid total went down alone also re-baselines. */
    gs = tally(e2, 2, 3, 30);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 57);
    gs = tally(e2, 2, 3, 31);
    p = ref_batch(p, a, 0, 1);
    ck_assert(gs.payoff == p);
    ck_assert_uint_eq(gs.probes, 58);

    s = snap(h, "tally");
    ck_assert(s.payoff == p);
    ck_assert(s.share == fmin(1.0, fmax(0.25, p / 0.10)));
    ck_assert_int_eq(s.probes, 58);
    ck_assert_int_eq(s.saved + s.skipped, 0);

    /* report_every 16: probes 10, 30 (crosses 16), 50 (crosses 32 and 48: one line), 52, 57, 58.
     */
    ck_assert_int_eq(harness_log_count(h, "event=admission ns=tally "), 2);
    snprintf(line, sizeof line, "event=admission ns=tally probes=30 payoff=%.6f saved=0 skipped=0",
             ref_batch(ref_batch(1.0, a, 2, 10), a, 3, 20));
    ck_assert_int_eq(harness_log_count(h, line), 1);
    snprintf(line, sizeof line, "event=admission ns=tally probes=50 payoff=%.6f saved=0 skipped=0",
             ref_batch(ref_batch(ref_batch(1.0, a, 2, 10), a, 3, 20), a, 3, 20));
    ck_assert_int_eq(harness_log_count(h, line), 1);

    kvt_close(&e1);
    kvt_close(&e2);

    /* Scenario 7: reason counts, summed over engines. */
    {
        kvt_client_t *c = harness_client(h, "reasons", 1, 0, 0);
        kvt_reason_t r1[] = {
            {"hbm_satisfies_after_alloc", 3}, {"too_small", 2}, {"aligned_large_hit", 1}};
        kvt_reason_t r2[] = {{"too_small", 2}};
        ck_assert_int_eq(kvt_tally(c, 7, 1, 6, r1, 3, &gs), 0);
        s = snap(h, "reasons");
        ck_assert_int_eq(s.probes, 6);
        ck_assert_int_eq(s.nreasons, 3);
        ck_assert_int_eq(s.reason_hbm, 3);
        ck_assert_int_eq(s.reason_small, 2);
        ck_assert_int_eq(s.reason_large, 1);
        ck_assert_int_eq(kvt_tally(c, 8, 0, 2, r2, 1, &gs), 0);
        s = snap(h, "reasons");
        ck_assert_int_eq(s.probes, 8);
        ck_assert_int_eq(s.reason_small, 4);
        ck_assert_int_eq(s.reason_hbm, 3);
        kvt_close(&c);
    }

    /* Scenario 11 (alpha 1): paid 99 over 10 probes counts 10 paid; payoff 0 -> 1.0 -> 0. */
    {
        kvt_client_t *c = harness_client(h, "clamp", 1, 0, 0);
        ck_assert(tally(c, 1, 0, 10).payoff == 0.0);
        gs = tally(c, 1, 99, 20);
        ck_assert(gs.payoff == 1.0);
        ck_assert_uint_eq(gs.probes, 20);
        ck_assert(tally(c, 1, 99, 30).payoff == 0.0);
        kvt_close(&c);
    }

    /* Scenario 10 (alpha 0.5): batch(0, 400), then the same totals fold batch(0, 0): nothing. */
    {
        kvt_client_t *c = harness_client(h, "half", 1, 0, 0);
        double want = ref_batch(1.0, 0.5, 0, 400);
        gs = tally(c, 1, 0, 400);
        ck_assert(gs.payoff == want);
        gs = tally(c, 1, 0, 400);
        ck_assert(gs.payoff == want);
        ck_assert_uint_eq(gs.probes, 400);
        s = snap(h, "half");
        ck_assert(s.payoff == want);
        ck_assert_int_eq(s.probes, 400);
        kvt_close(&c);
    }
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Admission decisions on real save operations
 */

static const char adm_cfg[] =
    "{\"gates\": {\"admission\": {\"policy\": \"atom\"}}, \"namespaces\": {"
    " \"adm1\": {\"gates\": {\"admission\": {\"warmup\": 0, \"floor\": 0}}},"
    " \"adm2\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 100, \"floor\": 0,"
    "   \"alpha\": 1}}},"
    " \"adm3\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 10, \"floor\": 0.25,"
    "   \"alpha\": 1, \"report_every\": 100}}},"
    " \"adm4\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 10, \"floor\": 0.25,"
    "   \"target\": 0.10, \"alpha\": 1}}},"
    " \"adm5\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 0, \"floor\": 0.2,"
    "   \"target\": 1.0, \"alpha\": 1}}},"
    " \"adm6\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 0, \"floor\": 0.1,"
    "   \"target\": 0.5, \"alpha\": 0.5}}},"
    " \"adm9\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 10, \"floor\": 0.25,"
    "   \"alpha\": 0.5}}},"
    " \"ranks\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 0, \"floor\": 0.5,"
    "   \"alpha\": 1}}}"
    "}}";

/* Scenario 3: a zero-payoff tally; 400 operations, exactly every fourth admitted; the declined
 * ones moved no byte. Then an operation whose chunk exists consumes no credit. */
START_TEST(test_adm3_zero_payoff)
{
    harness_opts_t ho = {.extra_json = adm_cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c = harness_client(h, "adm3", 1, 0, 0);
    uint8_t admitted[400];
    int64_t rx0;
    gsnap_t s;

    tally(c, 1, 0, 200); /* alpha 1: payoff 0.0 */
    s = snap(h, "adm3");
    ck_assert(s.payoff == 0.0 && s.share == 0.25);
    ck_assert_int_eq(s.probes, 200);
    ck_assert_int_eq(s.adm_enabled, 1);
    /* probes 0 -> 200 crossed 100 and 200: one line for the one tally */
    ck_assert_int_eq(harness_log_count(h, "event=admission ns=adm3 "), 1);
    ck_assert_int_eq(harness_log_count(
                         h, "event=admission ns=adm3 probes=200 payoff=0.000000 saved=0 skipped=0"),
                     1);
    rx0 = s.bytes_received;

    ck_assert_int_eq(save_ops(c, 3, 0, 400, admitted), 100);
    for (int k = 0; k < 400; k++)
        ck_assert_msg(admitted[k] == (k % 4 == 3), "op %d admitted %d", k, admitted[k]);
    s = snap(h, "adm3");
    ck_assert_int_eq(s.saved, 100);
    ck_assert_int_eq(s.skipped, 300);
    ck_assert(s.save_share == 0.25);
    ck_assert_int_eq(s.would_decline, 0);
    ck_assert_int_eq(s.bytes_received - rx0, 100 * OP_BYTES);

    /* An operation whose chunks all exist: `exists`, no decision, no credit (credit is 0 now,
     * so the fourth new operation after it is the next one admitted). */
    ck_assert_int_eq(save_op(c, 0, 3, 3, 1, NULL), KVT_SAVE_EXISTS);
    ck_assert_int_eq(save_ops(c, 3, 1000, 3, NULL), 0);
    ck_assert_int_eq(save_ops(c, 3, 1003, 1, NULL), 1);
    s = snap(h, "adm3");
    ck_assert_int_eq(s.saved, 101);
    ck_assert_int_eq(s.skipped, 303);
    ck_assert_int_eq(s.bytes_received - rx0, 101 * OP_BYTES);

    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Scenarios 2 (warming: all admitted), 9 (batch(0, 400) at alpha 0.5: the floor) and 4 (a paying
 * tally: everything admitted, every byte received). */
START_TEST(test_adm_2_9_4)
{
    harness_opts_t ho = {.extra_json = adm_cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c2 = harness_client(h, "adm2", 1, 0, 0);
    kvt_client_t *c9 = harness_client(h, "adm9", 1, 0, 0);
    kvt_client_t *c4 = harness_client(h, "adm4", 1, 0, 0);
    int64_t rx;
    gsnap_t s;

    tally(c2, 1, 0, 99);
    rx = snap(h, "adm2").bytes_received;
    ck_assert_int_eq(save_ops(c2, 2, 0, 50, NULL), 50);
    s = snap(h, "adm2");
    ck_assert(s.payoff == 0.0);
    ck_assert_int_eq(s.probes, 99);
    ck_assert_int_eq(s.saved, 50);
    ck_assert_int_eq(s.skipped, 0);
    ck_assert_int_eq(s.bytes_received - rx, 50 * OP_BYTES);

    ck_assert(tally(c9, 1, 0, 400).payoff == ref_batch(1.0, 0.5, 0, 400));
    rx = snap(h, "adm9").bytes_received;
    ck_assert_int_eq(save_ops(c9, 9, 0, 400, NULL), 100);
    s = snap(h, "adm9");
    ck_assert_int_eq(s.saved, 100);
    ck_assert_int_eq(s.skipped, 300);
    ck_assert(s.share == 0.25);
    ck_assert_int_eq(s.bytes_received - rx, 100 * OP_BYTES);

    ck_assert(tally(c4, 1, 200, 200).payoff == 1.0);
    rx = snap(h, "adm4").bytes_received;
    ck_assert_int_eq(save_ops(c4, 4, 0, 300, NULL), 300);
    s = snap(h, "adm4");
    ck_assert_int_eq(s.saved, 300);
    ck_assert_int_eq(s.skipped, 0);
    ck_assert(s.share == 1.0 && s.save_share == 1.0);
    ck_assert_int_eq(s.bytes_received - rx, 300 * OP_BYTES);

    kvt_close(&c2);
    kvt_close(&c9);
    kvt_close(&c4);
    harness_stop(&h);
}
END_TEST

/* Scenarios 6 (ten additions of 0.1 stay under 1.0: 9 of 100; then a paying tally: 100 of 100),
 * 1 (disabled: everything admitted, would_decline counts the shadow's declines) and 5 (20 rounds
 * of 50 non-paid verdicts and 100 operations: 20 each). */
START_TEST(test_adm_6_1_5)
{
    harness_opts_t ho = {.extra_json = adm_cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c6 = harness_client(h, "adm6", 1, 0, 0);
    kvt_client_t *c1 = harness_client(h, "adm1", 1, 0, 0);
    kvt_client_t *c5 = harness_client(h, "adm5", 1, 0, 0);
    int64_t rx;
    gsnap_t s;

    ck_assert(tally(c6, 1, 0, 200).payoff == ref_batch(1.0, 0.5, 0, 200));
    rx = snap(h, "adm6").bytes_received;
    ck_assert_int_eq(save_ops(c6, 6, 0, 100, NULL), 9);
    ck_assert(tally(c6, 1, 200, 400).payoff == 1.0);
    ck_assert_int_eq(save_ops(c6, 6, 100, 100, NULL), 100);
    s = snap(h, "adm6");
    ck_assert_int_eq(s.saved, 109);
    ck_assert_int_eq(s.skipped, 91);
    ck_assert_int_eq(s.bytes_received - rx, 109 * OP_BYTES);

    tally(c1, 1, 0, 500);
    rx = snap(h, "adm1").bytes_received;
    ck_assert_int_eq(save_ops(c1, 1, 0, 200, NULL), 200);
    s = snap(h, "adm1");
    ck_assert_int_eq(s.adm_enabled, 0);
    ck_assert(s.payoff == ref_batch(1.0, 0.0625, 0, 500));
    ck_assert_int_eq(s.saved, 200);
    ck_assert_int_eq(s.skipped, 0);
    ck_assert_int_eq(s.would_decline, 200);
    ck_assert(s.save_share == 1.0);
    ck_assert_int_eq(s.bytes_received - rx, 200 * OP_BYTES);

    for (int r = 0; r < 20; r++) {
        tally(c5, 1, 0, 50 * (uint64_t)(r + 1));
        ck_assert_int_eq(save_ops(c5, 5, 100 * (uint32_t)r, 100, NULL), 20);
    }
    s = snap(h, "adm5");
    ck_assert_int_eq(s.probes, 1000);
    ck_assert_int_eq(s.saved, 400);
    ck_assert_int_eq(s.skipped, 1600);

    kvt_close(&c6);
    kvt_close(&c1);
    kvt_close(&c5);
    harness_stop(&h);
}
END_TEST

/* Scenario 13: two ranks presenting one save operation get one decision, identified by (first
 * hash, chunk count) and by an explicit op id (then even with different hashes per rank). */
START_TEST(test_adm13_two_ranks)
{
    enum { OPS = 40, N = 3 };
    harness_opts_t ho = {.extra_json = adm_cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *r0 = harness_client(h, "ranks", 2, 0, 0);
    kvt_client_t *r1 = harness_client(h, "ranks", 2, 0, 1);
    int64_t rx;
    gsnap_t s;

    tally(r0, 1, 0, 1); /* alpha 1: payoff 0, share = floor 0.5 */
    rx = snap(h, "ranks").bytes_received;
    for (uint32_t k = 0; k < OPS; k++) {
        int want = k % 2 == 1 ? KVT_SAVE_STORED : KVT_SAVE_DECLINED;
        int first, second;
        /* the same chunks from both ranks; which rank comes first alternates */
        if (k % 4 < 2) {
            first = save_op(r0, 0, 13, k, N, NULL);
            second = save_op(r1, 1, 13, k, N, NULL);
        } else {
            first = save_op(r1, 1, 13, k, N, NULL);
            second = save_op(r0, 0, 13, k, N, NULL);
        }
        ck_assert_msg(first == want && second == want, "op %u: outcomes %d and %d, want %d", k,
                      first, second, want);
    }
    s = snap(h, "ranks");
    ck_assert_int_eq(s.saved, OPS / 2);
    ck_assert_int_eq(s.skipped, OPS / 2);
    ck_assert_int_eq(s.bytes_received - rx, (OPS / 2) * 2 * N * OP_BYTES);

    /* With an op id, the ranks' hashes need not match: the id is the operation. */
    for (uint32_t k = 0; k < OPS; k++) {
        uint64_t id = 5000 + k;
        int want = k % 2 == 1 ? KVT_SAVE_STORED : KVT_SAVE_DECLINED;
        int a, b;
        if (k % 4 < 2) {
            a = save_op(r0, 0, 1300, k, N, &id);
            b = save_op(r1, 1, 1301, k, N, &id);
        } else {
            b = save_op(r1, 1, 1301, k, N, &id);
            a = save_op(r0, 0, 1300, k, N, &id);
        }
        ck_assert_msg(a == want && b == want, "op id %llu: outcomes %d and %d, want %d",
                      (unsigned long long)id, a, b, want);
    }
    s = snap(h, "ranks");
    ck_assert_int_eq(s.saved, OPS);
    ck_assert_int_eq(s.skipped, OPS);
    ck_assert_int_eq(s.bytes_received - rx, OPS * 2 * N * OP_BYTES);

    kvt_close(&r0);
    kvt_close(&r1);
    harness_stop(&h);
}
END_TEST

/* The shared-memory path: SAVE_RESERVE is gated like SAVE_BEGIN; a declined operation gets no
 * arena extent and commits no byte (server.bytes_committed), and no frame carries payload. */
START_TEST(test_adm_shm_reserve)
{
    char extra[512];
    harness_opts_t ho = {.extra_json = extra};
    harness_t *h;
    kvt_client_t *c;
    uint8_t admitted[40];
    gsnap_t s;

    snprintf(extra, sizeof extra,
             "{\"gates\": {\"admission\": {\"policy\": \"atom\"}},"
             " \"ram\": {\"arena_path\": \"%s/shm-%d.arena\"}, \"namespaces\": {\"shm\": "
             "{\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 0, \"floor\": 0.25, "
             "\"alpha\": 1}}}}}",
             check_scratch_dir(), (int)getpid());
    h = harness_start(&ho);
    c = harness_client_with(h, "shm", 1, 0, 16, KVT_DATA_PATH_SHM);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_SHM);
    tally(c, 1, 0, 5);
    ck_assert_int_eq(save_ops(c, 77, 0, 40, admitted), 10);
    for (int k = 0; k < 40; k++)
        ck_assert_int_eq(admitted[k], k % 4 == 3);
    s = snap(h, "shm");
    ck_assert_int_eq(s.saved, 10);
    ck_assert_int_eq(s.skipped, 30);
    ck_assert_int_eq(s.bytes_committed, 10 * OP_BYTES);
    ck_assert_int_eq(s.bytes_received, 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Namespaces with different settings do not influence each other
 */

START_TEST(test_namespaces_independent)
{
    static const char cfg[] =
        "{\"gates\": {\"admission\": {\"policy\": \"atom\", \"enabled\": true, \"warmup\": 0,"
        "   \"floor\": 0.25, \"alpha\": 1}},"
        " \"namespaces\": {\"m2\": {\"gates\": {\"admission\": {\"enabled\": true, \"warmup\": 0,"
        "   \"floor\": 0.5, \"alpha\": 1}, \"lookup_skip\": {\"enabled\": true,"
        "   \"min_load_tokens\": 64}}}}}";
    harness_opts_t ho = {.extra_json = cfg};
    harness_t *h = harness_start(&ho);
    kvt_client_t *m1 = harness_client(h, "m1", 1, 0, 0);
    kvt_client_t *m2 = harness_client(h, "m2", 1, 0, 0);
    kvt_lookup_opts_t lo = {.has_prompt = 1};
    kvt_lookup_result_t res = {0};
    kvt_hash_t hs[4];
    gsnap_t s1, s2;

    /* Zero payoff in m1 (engine 1) leaves m2's estimator untouched. */
    tally(m1, 1, 0, 10);
    s2 = snap(h, "m2");
    ck_assert(s2.payoff == 1.0 && s2.share == 1.0 && s2.floor_ == 0.5);
    ck_assert_int_eq(s2.probes, 0);
    ck_assert_int_eq(save_ops(m1, 21, 0, 8, NULL), 2);
    ck_assert_int_eq(save_ops(m2, 22, 0, 8, NULL), 8);
    /* The same engine id in m2 is another (namespace, engine): its first totals fold whole. */
    ck_assert_uint_eq(tally(m2, 1, 0, 10).probes, 10);
    ck_assert_int_eq(save_ops(m2, 22, 100, 8, NULL), 4);
    s1 = snap(h, "m1");
    s2 = snap(h, "m2");
    ck_assert_int_eq(s1.probes, 10);
    ck_assert_int_eq(s1.saved, 2);
    ck_assert_int_eq(s1.skipped, 6);
    ck_assert(s1.floor_ == 0.25 && s1.share == 0.25);
    ck_assert_int_eq(s2.probes, 10);
    ck_assert_int_eq(s2.saved, 12);
    ck_assert_int_eq(s2.skipped, 4);
    ck_assert(s2.share == 0.5);

    /* Lookup skip: enabled with min_load 64 in m2, disabled with 8192 in m1. */
    harness_chain(9, hs, 4);
    lo.prompt_tokens = 100; /* 99 >= 64: answered in m2; < 8192: m1 would skip */
    ck_assert_int_eq(kvt_lookup(m2, hs, 4, &lo, &res), 0);
    ck_assert_int_eq(res.skipped, 0);
    ck_assert_int_eq(kvt_lookup(m1, hs, 4, &lo, &res), 0);
    ck_assert_int_eq(res.skipped, 0);
    lo.prompt_tokens = 50; /* 49 < 64: skipped in m2 */
    ck_assert_int_eq(kvt_lookup(m2, hs, 4, &lo, &res), 0);
    ck_assert_int_eq(res.skipped, 1);
    s1 = snap(h, "m1");
    s2 = snap(h, "m2");
    ck_assert_int_eq(s1.skip_enabled, 0);
    ck_assert_int_eq(s1.min_load_tokens, 8192);
    ck_assert_int_eq(s1.would_skip, 1);
    ck_assert_int_eq(s1.skips, 0);
    ck_assert_int_eq(s1.lookups, 1);
    ck_assert_int_eq(s1.probes, 10);
    ck_assert_int_eq(s2.skip_enabled, 1);
    ck_assert_int_eq(s2.min_load_tokens, 64);
    ck_assert_int_eq(s2.would_skip, 0);
    ck_assert_int_eq(s2.skips, 1);
    ck_assert_int_eq(s2.lookups, 1);
    ck_assert_int_eq(s2.probes, 11); /* the skip's non-paid verdict, in m2 only */

    kvt_close(&m1);
    kvt_close(&m2);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Lookup skip, scenarios 1-7, exactly as GATES.md states them: chunk_tokens 8, min_load 8192.
 *
 * Chain P (seed 1) has 3525 chunks = a 28200-token prompt; its first 2500 chunks (20000 tokens)
 * are stored: "a stored prefix of 20000 tokens". Chain Q (seed 2) has 3525 chunks of which 3524
 * (28192 tokens) are stored. Lookups:
 *   short  = P[0, 2500), prompt 20000: hit 2500 chunks = the whole prompt, loadable 19999
 *            floored to 8 = 19992; with hbm 16000 skippable (19999 - 16000 < 8192) and not
 *            actionable (3992 < 8192); with hbm 0 not skippable and actionable.
 *   act    = Q[0, 3525), prompt 28200, hbm 20000: hit 28192 (< prompt: loadable 28192),
 *            28192 - 20000 = 8192 >= 8192 actionable; 28199 - 20000 >= 8192 not skippable,
 *            so the lookup is answered (the "answered actionable lookups" of scenario 4).
 *   nonact = P[0, 3525), prompt 28200, hbm 20000: hit 20000, loadable 20000, not actionable,
 *            not skippable (scenario 5's "hit 20000, hbm 20000").
 * ---------------------------------------------------------------------------------------------
 */

#define PLEN 3525

static const char skip_cfg[] =
    "{\"gates\": {\"admission\": {\"policy\": \"atom\"}, \"lookup_skip\": {\"enabled\": true}},"
    " \"namespaces\": {"
    "  \"skip-off\": {\"gates\": {\"lookup_skip\": {\"enabled\": false}}},"
    "  \"skip-19992\": {\"gates\": {\"lookup_skip\": {\"min_load_tokens\": 19992}}},"
    "  \"skip-19993\": {\"gates\": {\"lookup_skip\": {\"min_load_tokens\": 19993}}},"
    "  \"skip7\": {\"gates\": {\"admission\": {\"report_every\": 16},"
    "              \"lookup_skip\": {\"report_every\": 1}}}"
    "}}";

typedef struct {
    harness_t *h;
    kvt_hash_t p[PLEN], q[PLEN];
} skip_env_t;

static skip_env_t *skip_start(void)
{
    harness_opts_t ho = {
        .capacity_bytes = 96 * MIB, .max_chunk_bytes = 4096, .extra_json = skip_cfg};
    skip_env_t *e = calloc(1, sizeof *e);
    uint32_t *tok = malloc(PLEN * 8 * sizeof *tok);

    ck_assert(e != NULL && tok != NULL);
    for (uint32_t i = 0; i < PLEN * 8; i++)
        tok[i] = (1u << 20) + i;
    ck_assert_uint_eq(kvt_hash_chain(tok, PLEN * 8, 8, NULL, e->p, PLEN), PLEN);
    for (uint32_t i = 0; i < PLEN * 8; i++)
        tok[i] = (2u << 20) + i;
    ck_assert_uint_eq(kvt_hash_chain(tok, PLEN * 8, 8, NULL, e->q, PLEN), PLEN);
    free(tok);
    e->h = harness_start(&ho);
    return e;
}

static void skip_stop(skip_env_t **e)
{
    harness_stop(&(*e)->h);
    free(*e);
    *e = NULL;
}

/* Stores the first n chunks of chain (64 bytes each) in the client's namespace. */
static void store_prefix(kvt_client_t *c, const kvt_hash_t *chain, size_t n)
{
    static uint8_t buf[64];
    const void **ptrs = malloc(n * sizeof *ptrs);
    size_t *lens = malloc(n * sizeof *lens);
    uint8_t *out = malloc(n);
    int rc;

    ck_assert(ptrs != NULL && lens != NULL && out != NULL);
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = buf;
        lens[i] = sizeof buf;
    }
    rc = kvt_save(c, chain, n, ptrs, lens, NULL, out);
    ck_assert_msg(rc == 0, "store_prefix: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(out[i], KVT_SAVE_STORED);
    free(ptrs);
    free(lens);
    free(out);
}

static kvt_client_t *skip_client(skip_env_t *e, const char *model, int store_p, int store_q)
{
    kvt_client_t *c = harness_client_with(e->h, model, 1, 0, 8, KVT_DATA_PATH_AUTO);
    if (store_p)
        store_prefix(c, e->p, 2500);
    if (store_q)
        store_prefix(c, e->q, 3524);
    return c;
}

static kvt_lookup_result_t plookup(kvt_client_t *c, const kvt_hash_t *hs, size_t n, uint64_t prompt,
                                   uint64_t hbm, int lease)
{
    kvt_lookup_opts_t lo = {
        .lease = lease, .has_prompt = 1, .prompt_tokens = prompt, .hbm_tokens = hbm};
    kvt_lookup_result_t res = {0};
    int rc = kvt_lookup(c, hs, n, &lo, &res);

    ck_assert_msg(rc == 0, "kvt_lookup: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    return res;
}

/* The three lookups of the mapping above; each asserts its answer. */
static void lookup_short_skipped(skip_env_t *e, kvt_client_t *c, int lease)
{
    kvt_lookup_result_t r = plookup(c, e->p, 2500, 20000, 16000, lease);
    ck_assert_int_eq(r.skipped, 1);
    ck_assert_uint_eq(r.hit, 0);
    ck_assert_int_eq(r.leased, 0);
}

static void lookup_short_answered(skip_env_t *e, kvt_client_t *c, uint64_t hbm)
{
    kvt_lookup_result_t r = plookup(c, e->p, 2500, 20000, hbm, 0);
    ck_assert_int_eq(r.skipped, 0);
    ck_assert_uint_eq(r.hit, 2500);
}

static void lookup_act(skip_env_t *e, kvt_client_t *c)
{
    kvt_lookup_result_t r = plookup(c, e->q, PLEN, 28200, 20000, 0);
    ck_assert_int_eq(r.skipped, 0);
    ck_assert_uint_eq(r.hit, 3524);
}

static void lookup_nonact(skip_env_t *e, kvt_client_t *c)
{
    kvt_lookup_result_t r = plookup(c, e->p, PLEN, 28200, 20000, 0);
    ck_assert_int_eq(r.skipped, 0);
    ck_assert_uint_eq(r.hit, 2500);
}

/* 1: skipped, hit 0, no lease, one non-paid verdict; 2: answered, loadable 19992 (proven by the
 * two namespaces whose min_load_tokens are 19992 and 19993); 3: disabled, would_skip. */
START_TEST(test_skip_1_2_3)
{
    skip_env_t *e = skip_start();
    kvt_client_t *c = skip_client(e, "skip1", 1, 0);
    kvt_client_t *lo = skip_client(e, "skip-19992", 1, 0);
    kvt_client_t *hi = skip_client(e, "skip-19993", 1, 0);
    kvt_client_t *off = skip_client(e, "skip-off", 1, 0);
    kvt_lookup_result_t r;
    gsnap_t s0, s;

    /* 1 */
    s0 = snap(e->h, "skip1");
    ck_assert_int_eq(s0.skip_enabled, 1);
    ck_assert_int_eq(s0.min_load_tokens, 8192);
    lookup_short_skipped(e, c, 1);
    s = snap(e->h, "skip1");
    ck_assert_int_eq(s.skips, 1);
    ck_assert_int_eq(s.forced_probes, 0);
    ck_assert_int_eq(s.lookups, 0);
    ck_assert_int_eq(s.probes, 1);
    ck_assert(s.payoff == ref_one(1.0, 0.0625, 0));
    ck_assert_int_eq(s.leased_chunks, 0);
    ck_assert_int_eq(s.ram_hits, s0.ram_hits); /* the store was not even looked at */
    ck_assert_int_eq(s.ram_misses, s0.ram_misses);
    /* the same lookup without prompt info is answered and takes its lease */
    {
        kvt_lookup_opts_t plain = {.lease = 1};
        ck_assert_int_eq(kvt_lookup(c, e->p, 2500, &plain, &r), 0);
        ck_assert_uint_eq(r.hit, 2500);
        ck_assert_int_eq(r.leased, 1);
        ck_assert_int_eq(snap(e->h, "skip1").leased_chunks, 2500);
        ck_assert_int_eq(snap(e->h, "skip1").skips, 1);
    }

    /* 2 */
    lookup_short_answered(e, lo, 0);
    lookup_short_answered(e, hi, 0);
    s = snap(e->h, "skip-19992");
    ck_assert_int_eq(s.lookups, 1);
    ck_assert(s.act_ema == 0.015625); /* 19992 - 0 >= 19992: actionable */
    ck_assert_int_eq(s.skips, 0);
    s = snap(e->h, "skip-19993");
    ck_assert_int_eq(s.lookups, 1);
    ck_assert(s.act_ema == 0.0); /* 19992 < 19993 */
    ck_assert_int_eq(s.skips, 0);

    /* 3 */
    lookup_short_answered(e, off, 16000);
    s = snap(e->h, "skip-off");
    ck_assert_int_eq(s.skip_enabled, 0);
    ck_assert_int_eq(s.would_skip, 1);
    ck_assert_int_eq(s.skips, 0);
    ck_assert_int_eq(s.lookups, 1);
    ck_assert(s.act_ema == 0.0);
    ck_assert_int_eq(s.probes, 0);

    kvt_close(&c);
    kvt_close(&lo);
    kvt_close(&hi);
    kvt_close(&off);
    skip_stop(&e);
}
END_TEST

/* 4: after 64 answered actionable lookups the gate stands down (also for 40 more skippable
 * lookups, past probe_every). */
START_TEST(test_skip_4)
{
    skip_env_t *e = skip_start();
    kvt_client_t *c = skip_client(e, "skip4", 1, 1);
    double act;
    gsnap_t s;

    for (int i = 0; i < 64; i++)
        lookup_act(e, c);
    act = ref_act(0.0, 0.015625, 1, 64);
    s = snap(e->h, "skip4");
    ck_assert_int_eq(s.lookups, 64);
    ck_assert(s.act_ema == act);
    ck_assert_int_eq(s.load_bearing, 1);
    for (int i = 0; i < 40; i++)
        lookup_short_answered(e, c, 16000);
    act = ref_act(act, 0.015625, 0, 40);
    s = snap(e->h, "skip4");
    ck_assert_int_eq(s.lookups, 104);
    ck_assert(s.act_ema == act);
    ck_assert_int_eq(s.load_bearing, 1);
    ck_assert_int_eq(s.skips, 0);
    ck_assert_int_eq(s.forced_probes, 0);
    ck_assert_int_eq(s.probes, 0);
    kvt_close(&c);
    skip_stop(&e);
}
END_TEST

/* 5: after 64 answered non-actionable lookups the gate skips; 6: after only 8 actionable ones
 * (unmeasured) it skips. */
START_TEST(test_skip_5_6)
{
    skip_env_t *e = skip_start();
    kvt_client_t *c5 = skip_client(e, "skip5", 1, 0);
    kvt_client_t *c6 = skip_client(e, "skip6", 1, 1);
    gsnap_t s;

    for (int i = 0; i < 64; i++)
        lookup_nonact(e, c5);
    s = snap(e->h, "skip5");
    ck_assert_int_eq(s.lookups, 64);
    ck_assert(s.act_ema == 0.0);
    ck_assert_int_eq(s.load_bearing, 0);
    lookup_short_skipped(e, c5, 0);
    s = snap(e->h, "skip5");
    ck_assert_int_eq(s.skips, 1);
    ck_assert_int_eq(s.lookups, 64);
    ck_assert_int_eq(s.probes, 1);

    for (int i = 0; i < 8; i++)
        lookup_act(e, c6);
    s = snap(e->h, "skip6");
    ck_assert_int_eq(s.lookups, 8);
    ck_assert(s.act_ema == ref_act(0.0, 0.015625, 1, 8));
    ck_assert(s.act_ema >= 0.01); /* above the cut: only the count keeps it unmeasured */
    ck_assert_int_eq(s.load_bearing, 0);
    lookup_short_skipped(e, c6, 0);
    s = snap(e->h, "skip6");
    ck_assert_int_eq(s.skips, 1);
    ck_assert_int_eq(s.probes, 1);

    kvt_close(&c5);
    kvt_close(&c6);
    skip_stop(&e);
}
END_TEST

/* 7: with the gate open, 31 skippable lookups are skipped and the 32nd is answered (a forced
 * probe that feeds the estimator); the skips' verdicts reach the admission log line. */
START_TEST(test_skip_7)
{
    skip_env_t *e = skip_start();
    kvt_client_t *c = skip_client(e, "skip7", 1, 0);
    double p = 1.0;
    char line[160];
    gsnap_t s;

    for (int i = 0; i < 31; i++) {
        lookup_short_skipped(e, c, 1);
        p = ref_one(p, 0.0625, 0);
    }
    lookup_short_answered(e, c, 16000);
    s = snap(e->h, "skip7");
    ck_assert_int_eq(s.skips, 31);
    ck_assert_int_eq(s.forced_probes, 1);
    ck_assert_int_eq(s.lookups, 1);
    ck_assert(s.act_ema == 0.0);
    ck_assert_int_eq(s.probes, 31);
    ck_assert(s.payoff == p);
    ck_assert_int_eq(s.leased_chunks, 0);
    /* the 33rd starts the next round: skipped */
    lookup_short_skipped(e, c, 0);
    ck_assert_int_eq(snap(e->h, "skip7").skips, 32);

    /* admission report_every 16: lines at probes 16 and 32 (the skips' verdicts; saved=1 is the
     * save that stored the prefix, admitted by the disabled gate); lookup_skip report_every 1:
     * one line per answered lookup (only the forced probe here). */
    ck_assert_int_eq(harness_log_count(e->h, "event=admission ns=skip7 "), 2);
    p = 1.0;
    for (int i = 1; i <= 32; i++) {
        p = ref_one(p, 0.0625, 0);
        if (i % 16 != 0)
            continue;
        snprintf(line, sizeof line,
                 "event=admission ns=skip7 probes=%d payoff=%.6f saved=1 skipped=0", i, p);
        ck_assert_msg(harness_log_count(e->h, line) == 1, "no log line '%s'", line);
    }
    ck_assert_int_eq(harness_log_count(e->h, "event=lookup_skip ns=skip7 "), 1);
    ck_assert_int_eq(harness_log_count(e->h,
                                       "event=lookup_skip ns=skip7 lookups=1 act_ema=0.000000 "
                                       "load_bearing=0 skips=31 forced_probes=1 would_skip=0"),
                     1);
    kvt_close(&c);
    skip_stop(&e);
}
END_TEST

/* A skipped all-ranks lookup still answers one (zero) hit per rank, as PROTOCOL.md states. */
START_TEST(test_skip_all_ranks)
{
    harness_opts_t ho = {.extra_json = "{\"gates\": {\"admission\": {\"policy\": \"atom\"},"
                                       " \"lookup_skip\": {\"enabled\": true}}}"};
    harness_t *h = harness_start(&ho);
    kvt_client_t *c = harness_client(h, "skip-all", 3, 0, 1);
    kvt_lookup_opts_t lo = {.all_ranks = 1, .lease = 1, .has_prompt = 1, .prompt_tokens = 100};
    uint32_t rank_hits[3] = {7, 7, 7};
    kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = 3};
    kvt_hash_t hs[2];
    int rc;

    harness_chain(5, hs, 2);
    rc = kvt_lookup(c, hs, 2, &lo, &res);
    ck_assert_msg(rc == 0, "kvt_lookup(all ranks, skipped): %s", kvt_strerror(rc));
    ck_assert_int_eq(res.skipped, 1);
    ck_assert_uint_eq(res.hit, 0);
    ck_assert_int_eq(res.leased, 0);
    ck_assert_uint_eq(res.nranks, 3);
    for (int r = 0; r < 3; r++)
        ck_assert_uint_eq(rank_hits[r], 0);
    ck_assert_int_eq(snap(h, "skip-all").skips, 1);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static Suite *gates_daemon_suite(void)
{
    Suite *s = suite_create("gates_daemon");
    TCase *tc;

    tc = tcase_create("admission");
    tcase_add_test(tc, test_tallies);
    tcase_add_test(tc, test_adm3_zero_payoff);
    tcase_add_test(tc, test_adm_2_9_4);
    tcase_add_test(tc, test_adm_6_1_5);
    tcase_add_test(tc, test_adm13_two_ranks);
    tcase_add_test(tc, test_adm_shm_reserve);
    tcase_add_test(tc, test_namespaces_independent);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("lookup_skip");
    tcase_add_test(tc, test_skip_1_2_3);
    tcase_add_test(tc, test_skip_4);
    tcase_add_test(tc, test_skip_5_6);
    tcase_add_test(tc, test_skip_7);
    tcase_add_test(tc, test_skip_all_ranks);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = gates_daemon_suite, .scratch = "kvtgd"};
