/*
 * test_gates_value.c - unit tests of the value admission policy of daemon/gates.c against
 * docs/GATES.md section 6: the scenarios of section 6.6 with their exact expected results, and
 * the rules around them (the prior, the window, the share ramp, token tallies, the served
 * estimate and regret of a lookup, orphans, the reuse that starts the window, shadow decisions).
 *
 * The scenario settings are S (GATES.md 6.6): chunk_tokens 1000, min_load_tokens 2000,
 * cost_ratio 0.05, value_floor 0.02, window_tokens 100000, learn_tokens 50000, ghost_entries
 * 16384, admission enabled with policy value. Densities and decision sequences are recomputed
 * here with the formulas of GATES.md written out independently (ref_*) and compared with ==;
 * this file is compiled with -ffp-contract=off, like gates.c.
 */
#include "check_main.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "gates.h"

#define CT 1000u /* chunk_tokens of the scenarios */

/* --- reference formulas (GATES.md 6, independently of gates.c) --- */

typedef struct {
    double c, floor_, h, b;
    double vw, xw, credit;
} ref_t;

static ref_t ref_new(double c, double floor_, double h, double b)
{
    ref_t r = {.c = c, .floor_ = floor_, .h = h, .b = b};
    double x0 = b > 0 ? c * (h * expm1(b / h)) / (1.0 - c) : 0.0;

    r.vw = x0;
    r.xw = x0;
    return r;
}

static double ref_density(const ref_t *r)
{
    return r->xw > 0.0 ? r->vw / r->xw : 1.0;
}

static double ref_share(const ref_t *r)
{
    double q = ref_density(r) / r->c;

    if (q >= 1.0)
        return 1.0;
    return fmax(r->floor_, q <= 0.5 ? 0.0 : (q - 0.5) / (1.0 - 0.5));
}

/* One decision (credit accumulator), then the offer of x new tokens. Returns admit. */
static int ref_op(ref_t *r, double x)
{
    int admit;

    r->credit += ref_share(r);
    admit = r->credit >= 1.0;
    if (admit)
        r->credit -= 1.0;
    r->vw = r->vw * exp(-x / r->h);
    r->xw = r->xw * exp(-x / r->h) - r->h * expm1(-x / r->h);
    return admit;
}

/* --- helpers --- */

static gates_cfg_t cfg_s(void)
{
    gates_cfg_t c;

    config_gates_defaults(&c);
    c.admission.enabled = true;
    c.admission.policy = GATES_POLICY_VALUE;
    c.admission.cost_ratio = 0.05;
    c.admission.value_floor = 0.02;
    c.admission.window_tokens = 100000;
    c.admission.learn_tokens = 50000;
    c.admission.ghost_entries = 16384;
    c.lookup_skip.min_load_tokens = 2000;
    return c;
}

static gates_t *new_gates(const gates_cfg_t *c)
{
    gates_t *g = gates_new(c);

    ck_assert_ptr_nonnull(g);
    return g;
}

static gates_state_t state_of(const gates_t *g)
{
    gates_state_t st;

    gates_state(g, &st);
    return st;
}

static kvt_wire_hash_t chunk(uint32_t tag, uint32_t op, uint32_t i)
{
    kvt_wire_hash_t h;
    uint32_t w[4] = {0x76616c75u, tag, op, i};

    memcpy(h.b, w, sizeof h.b);
    return h;
}

/* Save operation `op` of tag: n chunks, all WANTED, with a parent or not. Returns admit. */
static int save_op(gates_t *g, uint32_t tag, uint32_t op, uint32_t n, const kvt_wire_hash_t *parent)
{
    kvt_wire_hash_t hs[8];
    uint8_t st[8];

    ck_assert_uint_le(n, 8);
    for (uint32_t i = 0; i < n; i++) {
        hs[i] = chunk(tag, op, i);
        st[i] = KVT_CHUNK_WANTED;
    }
    return gates_admit_op(
        g, &(gates_op_t){.hashes = hs, .status = st, .n = n, .parent = parent, .chunk_tokens = CT});
}

/* A lookup of operation op's 4 chunks, prompt 4001 tokens, nothing in HBM, nothing stored: the
 * loadable reach of 4 chunks is 4000 tokens (>= min_load 2000). */
static void lookup_op(gates_t *g, uint32_t tag, uint32_t op)
{
    kvt_wire_hash_t hs[4];

    for (uint32_t i = 0; i < 4; i++)
        hs[i] = chunk(tag, op, i);
    gates_lookup_value(g, hs, 4, 0, 4001, 0, CT, NULL, NULL);
}

/* A lookup that shows reuse (8000-token prompt, 4000 of them in HBM; min_load 2000): it starts
 * the value window (GATES.md 6.3). */
static void show_reuse(gates_t *g)
{
    kvt_wire_hash_t h = chunk(999, 0, 0);

    gates_lookup_value(g, &h, 1, 0, 8000, 4000, CT, NULL, NULL);
}

/* A lookup with prompt info (8000 tokens) in which nothing was reused, in HBM or the tier: the
 * evidence reuse_wait_tokens counts on (V7). */
static void show_no_reuse(gates_t *g)
{
    kvt_wire_hash_t h = chunk(998, 0, 0);

    (void)gates_lookup_observe(g, 0, 0);
    gates_lookup_value(g, &h, 1, 0, 8000, 0, CT, NULL, NULL);
}

static void tally_served(gates_t *g, uint64_t paid, uint64_t served_total)
{
    gates_tally_t t = {.engine_id = 1,
                       .paid_total = paid,
                       .probes_total = paid,
                       .has_tokens = true,
                       .served_tokens_total = served_total,
                       .lookup_tokens_total = 8 * served_total};

    gates_tally_fold(g, &t);
}

/* --- the prior and the defaults --- */

START_TEST(test_fresh_and_prior)
{
    gates_cfg_t c;
    gates_t *g;
    gates_state_t st;
    ref_t r;

    config_gates_defaults(&c);
    g = new_gates(&c);
    st = state_of(g);
    ck_assert_int_eq(st.policy, GATES_POLICY_VALUE);
    ck_assert(st.density == 1.0);
    ck_assert(st.value_share == 1.0);
    ck_assert(st.share == 1.0);
    ck_assert(st.atom_share == 1.0);
    ck_assert_uint_eq(st.ghost.capacity, 262144);
    ck_assert_uint_eq(st.ghost.entries, 0);
    ck_assert_uint_eq(st.served_tokens + st.regret_tokens + st.written_tokens, 0);
    ck_assert(st.net_tokens == 0.0);
    gates_destroy(&g);

    /* Without evidence the density reaches cost_ratio after learn_tokens offered tokens: with S,
     * 50 offers of 1000 tokens land within rounding of 0.05 and one more goes below it. */
    c = cfg_s();
    g = new_gates(&c);
    r = ref_new(0.05, 0.02, 100000, 50000);
    show_reuse(g);
    for (uint32_t k = 0; k < 51; k++) {
        ck_assert_int_eq(save_op(g, 7, k, 1, NULL), ref_op(&r, 1000));
        ck_assert(state_of(g).density == ref_density(&r));
    }
    ck_assert(fabs(ref_new(0.05, 0.02, 100000, 50000).vw /
                       (ref_new(0.05, 0.02, 100000, 50000).xw + 100000 * expm1(0.5)) -
                   0.05) < 1e-15);
    ck_assert(state_of(g).density < 0.05);
    gates_destroy(&g);
}
END_TEST

/* --- the scenarios of GATES.md 6.6 --- */

/* V1, cold start with later reuse: 30 operations of 4 new chunks while nothing was reused yet
 * leave the window untouched (density 1.0, all admitted); a lookup showing reuse starts it; 13
 * more operations are admitted (the 14th, at 52000 offered tokens, would see density 0.0477 and
 * share 0.907); a tally of a 20000-token load lifts the density to 0.517, and 17 more operations
 * are admitted: 60 of 60. */
START_TEST(test_v1_cold_start_later_reuse)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    gates_state_t st;
    int admitted = 0;

    for (uint32_t k = 0; k < 30; k++)
        admitted += save_op(g, 1, k, 4, NULL);
    st = state_of(g);
    ck_assert_int_eq(admitted, 30);
    ck_assert(st.density == 1.0);
    ck_assert_uint_eq(st.offered_tokens, 120000);
    ck_assert_uint_eq(st.written_tokens, 120000);

    show_reuse(g);
    ck_assert_uint_eq(state_of(g).reuse_tokens, 4000);
    for (uint32_t k = 30; k < 43; k++) {
        int want = ref_op(&r, 4000);
        ck_assert_int_eq(save_op(g, 1, k, 4, NULL), want);
        admitted += want;
    }
    st = state_of(g);
    ck_assert_int_eq(admitted, 43);
    ck_assert(st.density == ref_density(&r));
    ck_assert(st.value_share == ref_share(&r));
    ck_assert(st.value_share < 1.0 && st.value_share > 0.906 && st.value_share < 0.908);

    tally_served(g, 1, 20000);
    r.vw += 20000;
    st = state_of(g);
    ck_assert(st.density == ref_density(&r));
    ck_assert(st.density > 0.517 && st.density < 0.518);
    ck_assert_uint_eq(st.served_tokens, 20000);
    for (uint32_t k = 43; k < 60; k++) {
        int want = ref_op(&r, 4000);
        ck_assert_int_eq(want, 1);
        ck_assert_int_eq(save_op(g, 1, k, 4, NULL), want);
        admitted += want;
    }
    st = state_of(g);
    ck_assert_int_eq(admitted, 60);
    ck_assert_uint_eq(st.skipped, 0);
    ck_assert(st.density == ref_density(&r));
    ck_assert(st.net_tokens == 20000 - 0.05 * 240000);
    gates_destroy(&g);
}
END_TEST

/* V2, steady useless: reuse shown, then 100 operations of 4 new chunks and no value at all. The
 * first 13 are admitted, the ramp admits 14-18 as 0 1 1 0 1, then the floor (0.02) one in 50:
 * 18 of 100 admitted, 328 chunks declined and remembered in the ghost table. */
START_TEST(test_v2_steady_useless)
{
    static const char want[] = "1111111111111011010000000000000000000000001000000000000000000000"
                               "000000000000000000000000000010000000";
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    gates_state_t st;

    show_reuse(g);
    for (uint32_t k = 0; k < 100; k++) {
        int a = save_op(g, 2, k, 4, NULL);
        ck_assert_int_eq(a, ref_op(&r, 4000));
        ck_assert_msg(a == want[k] - '0', "operation %u: %d", k, a);
    }
    st = state_of(g);
    ck_assert_uint_eq(st.saved, 18);
    ck_assert_uint_eq(st.skipped, 82);
    ck_assert_uint_eq(st.written_tokens, 72000);
    ck_assert_uint_eq(st.declined_tokens, 328000);
    ck_assert_uint_eq(st.offered_tokens, 400000);
    ck_assert_uint_eq(st.ghost.entries, 328);
    ck_assert_uint_eq(st.ghost.evictions, 0);
    ck_assert(st.density == ref_density(&r));
    ck_assert(st.value_share == 0.02);
    ck_assert(st.net_tokens == -0.05 * 72000);
    gates_destroy(&g);
}
END_TEST

/* V7, no reuse at all (0.2.7): lookups with prompt info that never find a reused prefix (not in
 * HBM, not in the tier), then 100 operations. With reuse_wait_tokens 40000 the window starts at
 * the 10th operation (40000 offered), aged by all of it at once, and follows the reference from
 * there: the prior spent, the ramp, then the floor. With reuse_wait_tokens 0 (and, whatever it
 * is, without any lookup with prompt info: no evidence either way) it waits for reuse and
 * admits all 100, as 0.2.6 did with any setting. */
START_TEST(test_v7_no_reuse_at_all)
{
    gates_cfg_t c = cfg_s();
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    gates_state_t st;
    uint32_t admitted = 0;
    gates_t *g;

    c.admission.reuse_wait_tokens = 40000;
    g = new_gates(&c);
    show_no_reuse(g);
    for (uint32_t k = 0; k < 100; k++) {
        int a = save_op(g, 7, k, 4, NULL);
        if (k < 9)
            ck_assert_int_eq(a, 1); /* the window waits: the prior's density 1.0 */
        else
            ck_assert_int_eq(a, ref_op(&r, k == 9 ? 40000 : 4000));
        admitted += (uint32_t)a;
    }
    st = state_of(g);
    ck_assert(st.density == ref_density(&r));
    ck_assert(st.value_share == 0.02);
    ck_assert_uint_lt(admitted, 30);
    printf("V7: %u of 100 operations admitted without reuse (reuse_wait_tokens 40000)\n", admitted);
    gates_destroy(&g);

    for (int variant = 0; variant < 2; variant++) {
        c.admission.reuse_wait_tokens = variant == 0 ? 0 : 40000;
        g = new_gates(&c);
        if (variant == 0) {
            show_no_reuse(g);
        }
        for (uint32_t k = 0; k < 100; k++)
            ck_assert_int_eq(save_op(g, 7, k, 4, NULL), 1);
        st = state_of(g);
        ck_assert(st.density == 1.0);
        gates_destroy(&g);
    }
}
END_TEST

/* V7 continued (the review of 0.2.7): the window starts once, and stays started. Lookups with
 * prompt info arrive only after 48000 tokens were offered (past the wait of 40000): the next
 * operation starts the window, aged by all 52000 tokens offered by then. A reload that sets
 * reuse_wait_tokens to 0 afterwards does not stop it: every later offer ages it, as the
 * reference's. */
START_TEST(test_v7_window_starts_once)
{
    gates_cfg_t c = cfg_s();
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    gates_state_t st;
    gates_t *g;

    c.admission.reuse_wait_tokens = 40000;
    g = new_gates(&c);
    for (uint32_t k = 0; k < 12; k++) /* no lookup with prompt info yet: no evidence */
        ck_assert_int_eq(save_op(g, 8, k, 4, NULL), 1);
    show_no_reuse(g);
    ck_assert_int_eq(save_op(g, 8, 12, 4, NULL), ref_op(&r, 52000));
    c.admission.reuse_wait_tokens = 0; /* a reload */
    gates_set_cfg(g, &c);
    for (uint32_t k = 13; k < 60; k++)
        ck_assert_int_eq(save_op(g, 8, k, 4, NULL), ref_op(&r, 4000));
    st = state_of(g);
    ck_assert(st.density == ref_density(&r));
    gates_destroy(&g);
}
END_TEST

/* V3, steady useful with rare large hits: 200 operations of 4 new chunks, a 20000-token load
 * tallied before operations 10, 35, 60, ... (20000 served per 100000 offered: density 0.2, four
 * times the cost): every operation is admitted, the density never below 0.0730 (just before the
 * first hit, the prior all but gone). */
START_TEST(test_v3_useful_rare_large_hits)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    uint64_t served = 0;
    double lowest = 1.0;

    show_reuse(g);
    for (uint32_t k = 0; k < 200; k++) {
        if (k % 25 == 10) {
            served += 20000;
            tally_served(g, k, served);
            r.vw += 20000;
        }
        ck_assert(state_of(g).density == ref_density(&r));
        lowest = fmin(lowest, ref_density(&r));
        ck_assert_int_eq(ref_op(&r, 4000), 1);
        ck_assert_int_eq(save_op(g, 3, k, 4, NULL), 1);
    }
    ck_assert(lowest > 0.0730 && lowest < 0.0731);
    ck_assert_uint_eq(state_of(g).saved, 200);
    ck_assert_uint_eq(state_of(g).served_tokens, 160000);
    gates_destroy(&g);
}
END_TEST

/* V4, a switch from useless to useful mid-run: V2's 100 operations, then 20 rounds of a lookup
 * through the chunks of the last declined operations (4000 tokens of regret each) and a new
 * operation: the first is declined (its lookup's regret alone leaves the density below the
 * cost), the other 19 are admitted; regret 80000 tokens. */
START_TEST(test_v4_useless_to_useful)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    ref_t r = ref_new(0.05, 0.02, 100000, 50000);
    uint32_t declined[100], nd = 0;
    int admitted = 0;

    show_reuse(g);
    for (uint32_t k = 0; k < 100; k++) {
        ref_op(&r, 4000);
        if (!save_op(g, 2, k, 4, NULL))
            declined[nd++] = k;
    }
    ck_assert_uint_eq(nd, 82);
    for (uint32_t round = 0; round < 20; round++) {
        int a;
        lookup_op(g, 2, declined[nd - 1 - round]);
        r.vw += 4000;
        ck_assert(state_of(g).density == ref_density(&r));
        a = save_op(g, 4, round, 4, NULL);
        ck_assert_int_eq(a, ref_op(&r, 4000));
        ck_assert_int_eq(a, round > 0);
        admitted += a;
    }
    ck_assert_int_eq(admitted, 19);
    ck_assert_uint_eq(state_of(g).regret_tokens, 80000);
    ck_assert_uint_eq(state_of(g).estimated_served_tokens, 0);
    gates_destroy(&g);
}
END_TEST

/* V5, the ghost table under pressure: 8 slots (one bucket), learn_tokens 0, value_floor 0. The
 * first operation is admitted (no offer yet: density 1.0), the next three declined (density 0):
 * 12 declined chunks, the 4 of the oldest decline forgotten. A lookup through them finds no
 * regret; through the second and third, 4000 tokens each. Offering the third's chunks again
 * (admitted now: density 8000 / 16000 per offered token) removes their 4 fingerprints and is no
 * new offer. */
START_TEST(test_v5_ghost_pressure)
{
    gates_cfg_t c = cfg_s();
    gates_t *g;
    gates_state_t st;

    c.admission.ghost_entries = 8;
    c.admission.learn_tokens = 0;
    c.admission.value_floor = 0.0;
    g = new_gates(&c);
    show_reuse(g);
    ck_assert_int_eq(save_op(g, 5, 0, 4, NULL), 1);
    for (uint32_t k = 1; k < 4; k++)
        ck_assert_int_eq(save_op(g, 5, k, 4, NULL), 0);
    st = state_of(g);
    ck_assert_uint_eq(st.ghost.capacity, 8);
    ck_assert_uint_eq(st.ghost.entries, 8);
    ck_assert_uint_eq(st.ghost.inserts, 12);
    ck_assert_uint_eq(st.ghost.evictions, 4);
    ck_assert(st.density == 0.0);

    lookup_op(g, 5, 1);
    ck_assert_uint_eq(state_of(g).regret_tokens, 0);
    lookup_op(g, 5, 2);
    ck_assert_uint_eq(state_of(g).regret_tokens, 4000);
    lookup_op(g, 5, 3);
    st = state_of(g);
    ck_assert_uint_eq(st.regret_tokens, 8000);
    ck_assert(st.density == 8000.0 / (100000 * -expm1(-16000.0 / 100000)));
    ck_assert(st.value_share == 1.0);

    ck_assert_int_eq(save_op(g, 5, 3, 4, NULL), 1);
    st = state_of(g);
    ck_assert_uint_eq(st.ghost.removals, 4);
    ck_assert_uint_eq(st.ghost.entries, 4);
    ck_assert_uint_eq(st.offered_tokens, 16000); /* a ghost offered again is no new offer */
    ck_assert_uint_eq(st.written_tokens, 8000);
    ck_assert_uint_eq(st.declined_tokens, 12000);
    gates_destroy(&g);
}
END_TEST

/* --- rules around the scenarios --- */

/* An operation whose parent was declined is declined without credit, whatever the share; the
 * extension of a stored chunk is decided as usual. */
START_TEST(test_orphans)
{
    gates_cfg_t c = cfg_s();
    gates_t *g;
    kvt_wire_hash_t p_declined = chunk(6, 1, 3), p_stored = chunk(6, 0, 3);
    gates_state_t st;

    c.admission.learn_tokens = 0;
    c.admission.value_floor = 0.0;
    g = new_gates(&c);
    show_reuse(g);
    ck_assert_int_eq(save_op(g, 6, 0, 4, NULL), 1);
    ck_assert_int_eq(save_op(g, 6, 1, 4, NULL), 0);
    tally_served(g, 1, 100000);
    ck_assert(state_of(g).value_share == 1.0);
    ck_assert_int_eq(save_op(g, 6, 2, 4, &p_declined), 0);
    ck_assert_int_eq(save_op(g, 6, 3, 4, &p_stored), 1);
    st = state_of(g);
    ck_assert_uint_eq(st.orphans_declined, 1);
    ck_assert_uint_eq(st.skipped, 2);
    ck_assert_uint_eq(st.ghost.entries, 8); /* the orphan's chunks are remembered too */
    /* atom decides the same operations without the rule */
    c.admission.policy = GATES_POLICY_ATOM;
    c.admission.warmup = 0;
    c.admission.floor = 1.0;
    gates_destroy(&g);
    g = new_gates(&c);
    ck_assert_int_eq(save_op(g, 6, 1, 4, NULL), 1);
    ck_assert_int_eq(save_op(g, 6, 2, 4, &p_declined), 1);
    ck_assert_uint_eq(state_of(g).orphans_declined, 0);
    gates_destroy(&g);
}
END_TEST

/* The served estimate and the regret of one lookup (GATES.md 6.2). */
START_TEST(test_lookup_value)
{
    gates_cfg_t c = cfg_s();
    gates_t *g;
    kvt_wire_hash_t hs[8];
    gates_state_t st;

    c.admission.learn_tokens = 0;
    c.admission.value_floor = 0.0;
    g = new_gates(&c);
    for (uint32_t i = 0; i < 8; i++)
        hs[i] = chunk(8, 0, i);
    /* hit 6 of a 6500-token prompt, hbm 2000: a load of [2000, 6000) = 4000 tokens */
    gates_lookup_value(g, hs, 8, 6, 6500, 2000, CT, NULL, NULL);
    st = state_of(g);
    ck_assert_uint_eq(st.estimated_served_tokens, 4000);
    ck_assert_uint_eq(st.reuse_tokens, 6000);
    ck_assert_uint_eq(st.regret_tokens, 0);
    /* too small (1000 < 2000), unaligned hbm, and hbm past the hit: no served estimate */
    gates_lookup_value(g, hs, 8, 3, 6500, 2000, CT, NULL, NULL);
    gates_lookup_value(g, hs, 8, 6, 6500, 1500, CT, NULL, NULL);
    gates_lookup_value(g, hs, 8, 2, 6500, 4000, CT, NULL, NULL);
    ck_assert_uint_eq(state_of(g).estimated_served_tokens, 4000);
    /* the tokens a load would take stop one short of the whole prompt: hit 8 of 8000 -> 7000 */
    gates_lookup_value(g, hs, 8, 8, 8000, 0, CT, NULL, NULL);
    ck_assert_uint_eq(state_of(g).estimated_served_tokens, 11000);
    /* while token tallies come the estimate no longer feeds the window */
    tally_served(g, 1, 0);
    ck_assert(state_of(g).density == state_of(g).density); /* defined */
    {
        double before = state_of(g).density;
        gates_lookup_value(g, hs, 8, 8, 8000, 0, CT, NULL, NULL);
        ck_assert(state_of(g).density == before);
        ck_assert_uint_eq(state_of(g).estimated_served_tokens, 18000);
    }
    gates_destroy(&g);
}
END_TEST

typedef struct {
    const kvt_wire_hash_t *stored;
    size_t n;
} stored_set_t;

static bool in_set(void *arg, const kvt_wire_hash_t *h)
{
    const stored_set_t *s = arg;

    for (size_t i = 0; i < s->n; i++)
        if (memcmp(&s->stored[i], h, sizeof *h) == 0)
            return true;
    return false;
}

/* Regret walks on through stored chunks after a ghost (an orphan stored after a declined
 * predecessor), and counts only beyond what the hit would load. */
START_TEST(test_regret_walk)
{
    gates_cfg_t c = cfg_s();
    gates_t *g;
    kvt_wire_hash_t hs[8], declined[2];
    uint8_t st[2] = {KVT_CHUNK_WANTED, KVT_CHUNK_WANTED};
    stored_set_t set = {.stored = hs + 4, .n = 4};

    c.admission.learn_tokens = 0;
    c.admission.value_floor = 0.0;
    g = new_gates(&c);
    show_reuse(g);
    for (uint32_t i = 0; i < 8; i++)
        hs[i] = chunk(9, 0, i);
    declined[0] = hs[2];
    declined[1] = hs[3];
    ck_assert_int_eq(save_op(g, 90, 0, 1, NULL), 1); /* the first offer is admitted */
    ck_assert_int_eq(gates_admit_op(g, &(gates_op_t){.hashes = declined,
                                                     .status = st,
                                                     .n = 2,
                                                     .parent = NULL,
                                                     .chunk_tokens = CT}),
                     0);
    /* chunks 0-1 stored (the hit), 2-3 ghosts, 4-7 stored: reach 8 of a 9000-token prompt, hbm
     * 0. The hit (2000 tokens) would load 2000, the reach 8000: regret 6000. */
    gates_lookup_value(g, hs, 8, 2, 9000, 0, CT, in_set, &set);
    ck_assert_uint_eq(state_of(g).regret_tokens, 6000);
    ck_assert_uint_eq(state_of(g).estimated_served_tokens, 2000);
    /* without the store's answer the walk stops after the ghosts: reach 4, regret 2000 more */
    gates_lookup_value(g, hs, 8, 2, 9000, 0, CT, NULL, NULL);
    ck_assert_uint_eq(state_of(g).regret_tokens, 8000);
    /* a hit that does not stop at a ghost has no regret, whatever follows */
    gates_lookup_value(g, hs, 8, 1, 9000, 0, CT, in_set, &set);
    ck_assert_uint_eq(state_of(g).regret_tokens, 8000);
    gates_destroy(&g);
}
END_TEST

/* Token totals fold like the verdict totals: first sighting whole, differences, a decrease of
 * either re-baselines the engine (verdicts too), a tally without tokens moves no token baseline. */
START_TEST(test_token_tallies)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    gates_tally_t t = {.engine_id = 3,
                       .paid_total = 1,
                       .probes_total = 4,
                       .has_tokens = true,
                       .served_tokens_total = 5000,
                       .lookup_tokens_total = 20000};
    gates_state_t st;

    gates_tally_fold(g, &t);
    st = state_of(g);
    ck_assert_uint_eq(st.served_tokens, 5000);
    ck_assert_uint_eq(st.lookup_tokens, 20000);
    ck_assert_uint_eq(st.token_tallies, 1);
    ck_assert_uint_eq(st.probes, 4);
    t.served_tokens_total = 8000;
    t.lookup_tokens_total = 30000;
    t.probes_total = 6;
    gates_tally_fold(g, &t);
    ck_assert_uint_eq(state_of(g).served_tokens, 8000);
    ck_assert_uint_eq(state_of(g).lookup_tokens, 30000);
    ck_assert_uint_eq(state_of(g).probes, 6);
    /* without tokens: verdicts fold, the token baselines stay */
    ck_assert(!gates_tally(g, 3, 1, 7, NULL, 0));
    t.probes_total = 8;
    t.served_tokens_total = 9000;
    gates_tally_fold(g, &t);
    ck_assert_uint_eq(state_of(g).served_tokens, 9000);
    ck_assert_uint_eq(state_of(g).probes, 8);
    /* served went down: the engine restarted, nothing folds, not even its verdicts */
    t.probes_total = 20;
    t.served_tokens_total = 100;
    t.lookup_tokens_total = 100;
    gates_tally_fold(g, &t);
    st = state_of(g);
    ck_assert_uint_eq(st.served_tokens, 9000);
    ck_assert_uint_eq(st.probes, 8);
    t.probes_total = 21;
    t.served_tokens_total = 600;
    t.lookup_tokens_total = 200;
    gates_tally_fold(g, &t);
    st = state_of(g);
    ck_assert_uint_eq(st.served_tokens, 9500);
    ck_assert_uint_eq(st.lookup_tokens, 30100);
    ck_assert_uint_eq(st.probes, 9);
    ck_assert_uint_eq(st.token_tallies, 5);
    gates_destroy(&g);
}
END_TEST

/* The window starts at the first reuse: a verdict of an engine, or lookups whose reused prefixes
 * add up to min_load_tokens (a skipped lookup's HBM prefix counts; its verdict does not). */
START_TEST(test_reuse_starts_the_window)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    kvt_wire_hash_t h = chunk(10, 0, 0);

    c.lookup_skip.enabled = true;
    c.lookup_skip.min_lookups = 1000;
    gates_destroy(&g);
    g = new_gates(&c);
    save_op(g, 10, 0, 4, NULL);
    gates_lookup_value(g, &h, 1, 0, 9000, 1999, CT, NULL, NULL); /* reuse 1999 < 2000 */
    save_op(g, 10, 1, 4, NULL);
    ck_assert(state_of(g).density == 1.0);
    /* skipped (8000 - 1 - 7000 < 2000): 7000 tokens of HBM reuse; its verdict is the daemon's */
    ck_assert_int_eq(gates_lookup_decide(g, 8000, 7000), GATES_LOOKUP_SKIP);
    ck_assert_uint_eq(state_of(g).probes, 1);
    ck_assert_uint_eq(state_of(g).reuse_tokens, 8999);
    save_op(g, 10, 2, 4, NULL);
    ck_assert(state_of(g).density < 1.0);
    gates_destroy(&g);

    /* an engine's verdict starts it too, a skipped lookup's verdict alone does not */
    c.lookup_skip.min_load_tokens = UINT32_MAX;
    g = new_gates(&c);
    ck_assert_int_eq(gates_lookup_decide(g, 8000, 7000), GATES_LOOKUP_SKIP);
    ck_assert_uint_eq(state_of(g).probes, 1);
    save_op(g, 10, 3, 4, NULL);
    ck_assert(state_of(g).density == 1.0);
    gates_tally(g, 1, 0, 1, NULL, 0);
    save_op(g, 10, 4, 4, NULL);
    ck_assert(state_of(g).density < 1.0);
    gates_destroy(&g);
}
END_TEST

/* Each policy decides in the other's shadow: value deciding, atom's would-be declines past its
 * warmup; atom deciding, value's; disabled, would_decline follows the configured policy. */
START_TEST(test_shadows)
{
    gates_cfg_t c = cfg_s();
    gates_t *g;
    gates_state_t st;

    c.admission.warmup = 0;
    c.admission.alpha = 1.0;
    c.admission.learn_tokens = 0;
    g = new_gates(&c);
    gates_tally(g, 1, 0, 10, NULL, 0); /* atom: payoff 0, share 0.25 */
    for (uint32_t k = 0; k < 8; k++)
        save_op(g, 11, k, 1, NULL);
    st = state_of(g);
    ck_assert_uint_eq(st.atom_would_decline, 6);
    ck_assert_uint_eq(st.value_would_decline, 0);
    ck_assert_uint_eq(st.would_decline, 0);
    ck_assert(st.share == st.value_share);
    gates_destroy(&g);

    c.admission.policy = GATES_POLICY_ATOM;
    g = new_gates(&c);
    gates_tally(g, 1, 10, 10, NULL, 0); /* atom: payoff 1, share 1 */
    for (uint32_t k = 0; k < 8; k++)
        ck_assert_int_eq(save_op(g, 12, k, 1, NULL), 1);
    st = state_of(g);
    ck_assert_uint_eq(st.atom_would_decline, 0);
    ck_assert_uint_eq(st.value_would_decline, 7); /* density 0 after the first offer, floor 0.02 */
    ck_assert(st.share == st.atom_share);
    ck_assert_uint_eq(st.ghost.entries, 0); /* nothing was declined */
    gates_destroy(&g);

    c.admission.enabled = false;
    c.admission.policy = GATES_POLICY_VALUE;
    g = new_gates(&c);
    show_reuse(g);
    for (uint32_t k = 0; k < 8; k++)
        ck_assert_int_eq(save_op(g, 13, k, 1, NULL), 1);
    st = state_of(g);
    ck_assert_uint_eq(st.would_decline, 7);
    ck_assert_uint_eq(st.value_would_decline, 7);
    ck_assert_uint_eq(st.skipped, 0);
    gates_destroy(&g);
}
END_TEST

/* Operations with existing chunks: only the WANTED ones count, and a re-offer of a ghost does not
 * age the window. */
START_TEST(test_op_accounting)
{
    gates_cfg_t c = cfg_s();
    gates_t *g = new_gates(&c);
    kvt_wire_hash_t hs[4] = {chunk(14, 0, 0), chunk(14, 0, 1), chunk(14, 0, 2), chunk(14, 0, 3)};
    uint8_t st[4] = {KVT_CHUNK_EXISTS, KVT_CHUNK_WANTED, KVT_CHUNK_EXISTS, KVT_CHUNK_WANTED};

    show_reuse(g);
    ck_assert(gates_admit_op(
        g, &(gates_op_t){.hashes = hs, .status = st, .n = 4, .parent = NULL, .chunk_tokens = CT}));
    ck_assert_uint_eq(state_of(g).written_tokens, 2000);
    ck_assert_uint_eq(state_of(g).offered_tokens, 2000);
    ck_assert(gates_value_report_due(g) == false);
    gates_destroy(&g);

    c.admission.report_every = 2;
    g = new_gates(&c);
    save_op(g, 15, 0, 1, NULL);
    ck_assert(!gates_value_report_due(g));
    save_op(g, 15, 1, 1, NULL);
    ck_assert(gates_value_report_due(g));
    gates_destroy(&g);
}
END_TEST

/* A reload (gates_set_cfg) applies the policy and the value settings at once, state kept, but
 * not learn_tokens and ghost_entries, which sized the prior and the ghost table. */
START_TEST(test_reload_keeps_what_was_sized)
{
    gates_cfg_t c = cfg_s(), next;
    gates_t *g = new_gates(&c);
    gates_state_t st;

    show_reuse(g);
    save_op(g, 16, 0, 4, NULL);
    next = c;
    next.admission.policy = GATES_POLICY_ATOM;
    next.admission.cost_ratio = 0.1;
    next.admission.learn_tokens = 7;
    next.admission.ghost_entries = 8;
    gates_set_cfg(g, &next);
    st = state_of(g);
    ck_assert_int_eq(st.policy, GATES_POLICY_ATOM);
    ck_assert(gates_cfg(g)->admission.cost_ratio == 0.1);
    ck_assert_uint_eq(gates_cfg(g)->admission.learn_tokens, 50000);
    ck_assert_uint_eq(gates_cfg(g)->admission.ghost_entries, 16384);
    ck_assert_uint_eq(st.ghost.capacity, 16384);
    ck_assert_uint_eq(st.written_tokens, 4000);
    gates_destroy(&g);
}
END_TEST

static Suite *gates_value_suite(void)
{
    Suite *s = suite_create("gates_value");
    TCase *tc = tcase_create("value");

    tcase_add_test(tc, test_fresh_and_prior);
    tcase_add_test(tc, test_v1_cold_start_later_reuse);
    tcase_add_test(tc, test_v2_steady_useless);
    tcase_add_test(tc, test_v3_useful_rare_large_hits);
    tcase_add_test(tc, test_v4_useless_to_useful);
    tcase_add_test(tc, test_v5_ghost_pressure);
    tcase_add_test(tc, test_v7_no_reuse_at_all);
    tcase_add_test(tc, test_v7_window_starts_once);
    tcase_add_test(tc, test_orphans);
    tcase_add_test(tc, test_lookup_value);
    tcase_add_test(tc, test_regret_walk);
    tcase_add_test(tc, test_token_tallies);
    tcase_add_test(tc, test_reuse_starts_the_window);
    tcase_add_test(tc, test_shadows);
    tcase_add_test(tc, test_op_accounting);
    tcase_add_test(tc, test_reload_keeps_what_was_sized);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = gates_value_suite};
