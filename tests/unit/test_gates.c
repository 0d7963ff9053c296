/*
 * test_gates.c - unit tests of daemon/gates.c against docs/GATES.md.
 *
 * Every scenario of GATES.md section 4 is here with its exact expected result (admission 1-12,
 * lookup skip 1-7), plus the edges the contract pins: report_every crossings, tally re-baseline,
 * reason totals across engines, engine table overflow, signed skip arithmetic and shadow mode.
 * Admission scenario 13 (two ranks, one save operation) is a daemon-level property and is tested
 * with the daemon, not here.
 *
 * Where an expected payoff is not a short literal, it is recomputed below with the formula of
 * GATES.md written out independently (ref_one / ref_batch) and compared with ==.
 */
#include "check_main.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gates.h"

/* --- helpers --- */

static double ref_one(double payoff, double alpha, bool paid)
{
    double x = paid ? 1.0 : 0.0;
    return payoff + alpha * (x - payoff);
}

static double ref_batch(double payoff, double alpha, uint64_t h, uint64_t n)
{
    double keep = pow(1.0 - alpha, (double)n);
    return payoff * keep + ((double)h / (double)n) * (1.0 - keep);
}

/* The settings of the atom scenarios (GATES.md section 4): policy atom, which is no longer the
 * default (value is), decides while enabled and is what would_decline shadows while disabled. */
static gates_cfg_t admission_cfg(bool enabled, uint64_t warmup, double floor_, double target,
                                 double alpha)
{
    gates_cfg_t c;

    config_gates_defaults(&c);
    c.admission.policy = GATES_POLICY_ATOM;
    c.admission.enabled = enabled;
    c.admission.warmup = warmup;
    c.admission.floor = floor_;
    c.admission.target = target;
    c.admission.alpha = alpha;
    return c;
}

static gates_t *new_gates(const gates_cfg_t *c)
{
    gates_t *g = gates_new(c);
    ck_assert_ptr_nonnull(g);
    return g;
}

static void feed(gates_t *g, bool paid, int n)
{
    for (int i = 0; i < n; i++)
        gates_fold_one(g, paid);
}

static int decide(gates_t *g, int n)
{
    int admitted = 0;
    for (int i = 0; i < n; i++)
        admitted += gates_admit(g) ? 1 : 0;
    return admitted;
}

static gates_state_t state_of(const gates_t *g)
{
    gates_state_t st;
    gates_state(g, &st);
    return st;
}

static gates_reason_t reason(const char *name, uint64_t count)
{
    gates_reason_t r;

    memset(&r, 0, sizeof r);
    strncpy(r.name, name, GATES_REASON_NAME_MAX);
    r.count = count;
    return r;
}

static uint64_t reason_count(const gates_state_t *st, const char *name)
{
    for (int i = 0; i < st->nreasons; i++) {
        if (strcmp(st->reasons[i].name, name) == 0)
            return st->reasons[i].count;
    }
    return UINT64_MAX; /* absent */
}

/* --- defaults and fresh state --- */

START_TEST(test_defaults)
{
    gates_cfg_t c;

    memset(&c, 0xa5, sizeof c);
    config_gates_defaults(&c);
    ck_assert(!c.admission.enabled);
    ck_assert(c.admission.target == 0.10);
    ck_assert(c.admission.floor == 0.25);
    ck_assert(c.admission.alpha == 0.0625);
    ck_assert_uint_eq(c.admission.warmup, 64);
    ck_assert_uint_eq(c.admission.report_every, 256);
    ck_assert_int_eq(c.admission.policy, GATES_POLICY_VALUE);
    ck_assert(c.admission.cost_ratio == 0.05);
    ck_assert(c.admission.value_floor == 0.02);
    ck_assert_uint_eq(c.admission.window_tokens, 4194304);
    ck_assert_uint_eq(c.admission.learn_tokens, 4194304);
    ck_assert_uint_eq(c.admission.ghost_entries, 262144);
    ck_assert(!c.lookup_skip.enabled);
    ck_assert_uint_eq(c.lookup_skip.min_load_tokens, 8192);
    ck_assert(c.lookup_skip.cut == 0.01);
    ck_assert_uint_eq(c.lookup_skip.min_lookups, 64);
    ck_assert_uint_eq(c.lookup_skip.probe_every, 32);
    ck_assert(c.lookup_skip.alpha == 0.015625);
    ck_assert_uint_eq(c.lookup_skip.report_every, 256);
}
END_TEST

/* Admission scenario 8, and every other field of a fresh state. */
START_TEST(test_adm8_fresh)
{
    gates_cfg_t c;
    gates_t *g;
    gates_state_t st;

    config_gates_defaults(&c);
    c.admission.warmup = 7;
    g = new_gates(&c);
    ck_assert_uint_eq(gates_cfg(g)->admission.warmup, 7);
    st = state_of(g);
    ck_assert(st.payoff == 1.0);
    ck_assert(st.share == 1.0); /* min(1, max(0.25, 1.0 / 0.10)) */
    ck_assert(st.credit == 0.0);
    ck_assert(st.save_share == 1.0);
    ck_assert_uint_eq(st.probes, 0);
    ck_assert_uint_eq(st.paid, 0);
    ck_assert_uint_eq(st.saved, 0);
    ck_assert_uint_eq(st.skipped, 0);
    ck_assert_uint_eq(st.would_decline, 0);
    ck_assert_uint_eq(st.lookups, 0);
    ck_assert(st.act_ema == 0.0);
    ck_assert(!st.load_bearing);
    ck_assert_uint_eq(st.skips, 0);
    ck_assert_uint_eq(st.forced_probes, 0);
    ck_assert_uint_eq(st.would_skip, 0);
    ck_assert_int_eq(st.nreasons, 0);
    gates_destroy(&g);
    ck_assert_ptr_null(g);
    gates_destroy(&g); /* destroying a NULL handle is harmless */
}
END_TEST

/* --- admission scenarios --- */

START_TEST(test_adm1_disabled_admits_all)
{
    gates_cfg_t c = admission_cfg(false, 0, 0.0, 0.10, 0.0625);
    gates_t *g = new_gates(&c);
    gates_state_t st;
    double p = 1.0;

    feed(g, false, 500);
    for (int i = 0; i < 500; i++)
        p = ref_one(p, 0.0625, false);
    ck_assert_int_eq(decide(g, 200), 200);
    st = state_of(g);
    ck_assert(st.payoff == p);
    ck_assert_uint_eq(st.probes, 500);
    ck_assert_uint_eq(st.saved, 200);
    ck_assert_uint_eq(st.skipped, 0);
    ck_assert(st.save_share == 1.0);
    ck_assert(st.credit == 0.0); /* the real credit is untouched while disabled */
    /* Shadow mode: share is payoff / 0.10 ~ 1.0e-13, so the gate would have declined all 200. */
    ck_assert_uint_eq(st.would_decline, 200);
    ck_assert(st.share == p / 0.10);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm2_warmup)
{
    gates_cfg_t c = admission_cfg(true, 100, 0.0, 0.10, 1.0);
    gates_t *g = new_gates(&c);
    gates_state_t st;

    feed(g, false, 99);
    ck_assert_int_eq(decide(g, 50), 50);
    st = state_of(g);
    ck_assert(st.payoff == 0.0);
    ck_assert(st.credit == 0.0); /* credit untouched during warmup */
    ck_assert_uint_eq(st.would_decline, 0);
    /* One more verdict ends the warmup: payoff 0, floor 0 -> share 0 -> nothing admitted. */
    feed(g, false, 1);
    ck_assert_int_eq(decide(g, 50), 0);
    ck_assert_uint_eq(state_of(g).skipped, 50);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm3_floor)
{
    gates_cfg_t c = admission_cfg(true, 10, 0.25, 0.10, 1.0);
    gates_t *g = new_gates(&c);
    gates_state_t st;

    feed(g, false, 200);
    ck_assert(state_of(g).share == 0.25);
    /* The credit reaches exactly 1.0 on every fourth decision. */
    ck_assert(gates_admit(g) == false);
    ck_assert(gates_admit(g) == false);
    ck_assert(gates_admit(g) == false);
    ck_assert(gates_admit(g) == true);
    ck_assert_int_eq(decide(g, 396), 99);
    st = state_of(g);
    ck_assert_uint_eq(st.saved, 100);
    ck_assert_uint_eq(st.skipped, 300);
    ck_assert(st.save_share == 0.25);
    ck_assert(st.credit == 0.0);
    ck_assert_uint_eq(st.would_decline, 0); /* enabled: no shadow */
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm4_paying)
{
    gates_cfg_t c = admission_cfg(true, 10, 0.25, 0.10, 1.0);
    gates_t *g = new_gates(&c);

    feed(g, true, 200);
    ck_assert(state_of(g).payoff == 1.0);
    ck_assert_int_eq(decide(g, 300), 300);
    ck_assert_uint_eq(state_of(g).paid, 200);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm5_rounds)
{
    gates_cfg_t c = admission_cfg(true, 0, 0.2, 1.0, 1.0);
    gates_t *g = new_gates(&c);

    for (int round = 0; round < 20; round++) {
        feed(g, false, 50);
        ck_assert_int_eq(decide(g, 100), 20);
    }
    ck_assert_uint_eq(state_of(g).saved, 400);
    ck_assert_uint_eq(state_of(g).skipped, 1600);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm6_tenths)
{
    gates_cfg_t c = admission_cfg(true, 0, 0.1, 0.5, 0.5);
    gates_t *g = new_gates(&c);
    double sum = 0.0;

    for (int i = 0; i < 10; i++)
        sum += 0.1;
    ck_assert(sum < 1.0); /* the premise of the scenario */

    feed(g, false, 200);
    ck_assert(state_of(g).payoff == ldexp(1.0, -200));
    ck_assert(state_of(g).share == 0.1);
    /* The tenth addition leaves the credit just under 1.0: no admission before the eleventh. */
    ck_assert_int_eq(decide(g, 10), 0);
    ck_assert(gates_admit(g) == true);
    ck_assert_int_eq(decide(g, 89), 8);
    ck_assert_uint_eq(state_of(g).saved, 9);
    ck_assert_uint_eq(state_of(g).skipped, 91);

    feed(g, true, 200);
    ck_assert(state_of(g).share == 1.0);
    ck_assert_int_eq(decide(g, 100), 100);
    gates_destroy(&g);
}
END_TEST

/* Verdicts arrive through engine tallies carrying cumulative per-reason counts. */
START_TEST(test_adm7_reasons)
{
    gates_cfg_t c = admission_cfg(true, 0, 0.5, 0.10, 1.0);
    gates_t *g = new_gates(&c);
    const char *order[6] = {"hbm_satisfies_after_alloc",
                            "hbm_satisfies_after_alloc",
                            "hbm_satisfies_after_alloc",
                            "too_small",
                            "too_small",
                            "aligned_large_hit"};
    uint64_t hbm = 0, small = 0, large = 0, paid = 0;
    gates_state_t st;

    for (int i = 0; i < 6; i++) {
        gates_reason_t r[3];

        if (strcmp(order[i], "aligned_large_hit") == 0) {
            large++;
            paid++;
        } else if (strcmp(order[i], "too_small") == 0) {
            small++;
        } else {
            hbm++;
        }
        r[0] = reason("hbm_satisfies_after_alloc", hbm);
        r[1] = reason("too_small", small);
        r[2] = reason("aligned_large_hit", large);
        ck_assert(!gates_tally(g, 42, paid, (uint64_t)i + 1, r, 3));
        /* After the fifth (non-paid) verdict the payoff is 0: the floor decides. */
        if (i == 4) {
            ck_assert(state_of(g).payoff == 0.0);
            ck_assert(state_of(g).share == 0.5);
        }
    }
    st = state_of(g);
    ck_assert_uint_eq(st.probes, 6);
    ck_assert_uint_eq(st.paid, 1);
    ck_assert(st.payoff == 1.0);
    ck_assert_int_eq(st.nreasons, 3);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 3);
    ck_assert_uint_eq(reason_count(&st, "too_small"), 2);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 1);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm9_batch_floor)
{
    gates_cfg_t c = admission_cfg(true, 10, 0.25, 0.10, 0.5);
    gates_t *g = new_gates(&c);

    gates_fold_batch(g, 0, 400);
    ck_assert_uint_eq(state_of(g).probes, 400);
    ck_assert(state_of(g).payoff == ldexp(1.0, -400)); /* 1.0 * 0.5^400 + 0 */
    ck_assert_int_eq(decide(g, 400), 100);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm10_empty_batch)
{
    gates_cfg_t c = admission_cfg(true, 64, 0.25, 0.10, 0.5);
    gates_t *g = new_gates(&c);
    gates_state_t a, b;

    gates_fold_batch(g, 0, 400);
    a = state_of(g);
    ck_assert(!gates_fold_batch(g, 0, 0));
    ck_assert(!gates_fold_batch(g, 5, 0));
    b = state_of(g);
    ck_assert(a.payoff == b.payoff);
    ck_assert_uint_eq(a.probes, b.probes);
    ck_assert_uint_eq(b.probes, 400);
    ck_assert_uint_eq(b.paid, 0);
    gates_destroy(&g);
}
END_TEST

/* The batch formula in GATES.md's operation order: (h / n) * (1 - keep), not h * (1 - keep) / n,
 * which differs in the last bit for batch(5, 6). */
START_TEST(test_batch_operation_order)
{
    gates_cfg_t c;
    gates_t *g;

    config_gates_defaults(&c);
    g = new_gates(&c);
    gates_fold_batch(g, 5, 6);
    ck_assert(state_of(g).payoff == ref_batch(1.0, 0.0625, 5, 6));
    ck_assert(state_of(g).payoff == 0x1.e49a35aaaaaabp-1);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm11_clamped_batch)
{
    gates_cfg_t c = admission_cfg(true, 64, 0.25, 0.10, 1.0);
    gates_t *g = new_gates(&c);

    gates_fold_batch(g, 99, 10);
    ck_assert_uint_eq(state_of(g).paid, 10);
    ck_assert_uint_eq(state_of(g).probes, 10);
    ck_assert(state_of(g).payoff == 1.0);
    /* Same from a payoff of 0, so that 1.0 is the batch's doing. */
    gates_fold_batch(g, 0, 3);
    ck_assert(state_of(g).payoff == 0.0);
    gates_fold_batch(g, 99, 10);
    ck_assert(state_of(g).payoff == 1.0);
    ck_assert_uint_eq(state_of(g).paid, 20);
    ck_assert_uint_eq(state_of(g).probes, 23);
    gates_destroy(&g);
}
END_TEST

/* Totals near 2^64 from two engines: the namespace's sums saturate instead of wrapping (before
 * 0.2.14 probes went 5 -> 4 and served tokens 10 -> 9: a Prometheus counter going backwards). */
START_TEST(test_tally_totals_saturate)
{
    gates_cfg_t c;
    gates_t *g;
    gates_reason_t r = {.name = "hbm_covered", .count = UINT64_MAX};
    gates_tally_t t = {.engine_id = 1,
                       .paid_total = 0,
                       .probes_total = 5,
                       .has_tokens = true,
                       .served_tokens_total = 10,
                       .lookup_tokens_total = 10};

    config_gates_defaults(&c);
    g = new_gates(&c);
    gates_tally_fold(g, &t);
    ck_assert_uint_eq(state_of(g).probes, 5);
    ck_assert_uint_eq(state_of(g).served_tokens, 10);
    t = (gates_tally_t){.engine_id = 2,
                        .paid_total = 3,
                        .probes_total = UINT64_MAX,
                        .has_tokens = true,
                        .served_tokens_total = UINT64_MAX,
                        .lookup_tokens_total = UINT64_MAX,
                        .reasons = &r,
                        .nreasons = 1};
    gates_tally_fold(g, &t);
    ck_assert_uint_eq(state_of(g).probes, UINT64_MAX);
    ck_assert_uint_eq(state_of(g).paid, 3);
    ck_assert_uint_eq(state_of(g).served_tokens, UINT64_MAX);
    ck_assert_uint_eq(state_of(g).lookup_tokens, UINT64_MAX);
    t.engine_id = 3;
    gates_tally_fold(g, &t);
    ck_assert_uint_eq(state_of(g).probes, UINT64_MAX);
    ck_assert_uint_eq(state_of(g).paid, 6);
    ck_assert_uint_eq(state_of(g).served_tokens, UINT64_MAX);
    /* and the single folds of skipped lookups on top (the session-16 probe: probes went 2^64-1
     * -> 2 after three) */
    for (int i = 0; i < 3; i++)
        gates_fold_one(g, i == 0);
    ck_assert_uint_eq(state_of(g).probes, UINT64_MAX);
    ck_assert_uint_eq(state_of(g).paid, 7);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_adm12_tallies)
{
    gates_cfg_t c;
    gates_t *g, *ref;
    double p = 1.0;

    config_gates_defaults(&c);
    g = new_gates(&c);
    ref = new_gates(&c);

    /* First sighting: the engine's seen totals start at (0, 0), so (2, 10) folds batch(2, 10). */
    gates_tally(g, 7, 2, 10, NULL, 0);
    p = ref_batch(p, 0.0625, 2, 10);
    gates_fold_batch(ref, 2, 10);
    ck_assert_uint_eq(state_of(g).probes, 10);
    ck_assert_uint_eq(state_of(g).paid, 2);
    ck_assert(state_of(g).payoff == p);
    ck_assert(state_of(ref).payoff == p);
    ck_assert(p == 0x1.3d381113ce666p-1); /* 0.6195683800389815 */

    /* (5, 30) folds batch(3, 20). */
    gates_tally(g, 7, 5, 30, NULL, 0);
    p = ref_batch(p, 0.0625, 3, 20);
    gates_fold_batch(ref, 3, 20);
    ck_assert_uint_eq(state_of(g).probes, 30);
    ck_assert_uint_eq(state_of(g).paid, 5);
    ck_assert(state_of(g).payoff == p);
    ck_assert(state_of(ref).payoff == p);
    ck_assert(p == 0x1.1ddbd559ef14bp-2); /* 0.27915891038334867 */

    /* (0, 4): the engine restarted; fold nothing, re-baseline. */
    gates_tally(g, 7, 0, 4, NULL, 0);
    ck_assert_uint_eq(state_of(g).probes, 30);
    ck_assert_uint_eq(state_of(g).paid, 5);
    ck_assert(state_of(g).payoff == p);

    /* (1, 6) folds batch(1, 2) from the new baseline. */
    gates_tally(g, 7, 1, 6, NULL, 0);
    p = ref_batch(p, 0.0625, 1, 2);
    ck_assert_uint_eq(state_of(g).probes, 32);
    ck_assert_uint_eq(state_of(g).paid, 6);
    ck_assert(state_of(g).payoff == p);
    ck_assert(p == 0x1.393e36840b213p-2); /* 0.30590138607911505 */

    /* Repeating the same totals folds nothing (a repeated message is harmless). */
    gates_tally(g, 7, 1, 6, NULL, 0);
    gates_tally(g, 7, 1, 6, NULL, 0);
    ck_assert_uint_eq(state_of(g).probes, 32);
    ck_assert_uint_eq(state_of(g).paid, 6);
    ck_assert(state_of(g).payoff == p);
    gates_destroy(&g);
    gates_destroy(&ref);
}
END_TEST

/* Only paid going down is a restart too; probes unchanged with more paid folds nothing. */
START_TEST(test_tally_rebaseline_paid)
{
    gates_cfg_t c;
    gates_t *g;
    double p = 1.0;

    config_gates_defaults(&c);
    g = new_gates(&c);
    gates_tally(g, 1, 5, 30, NULL, 0);
    p = ref_batch(p, 0.0625, 5, 30);
    gates_tally(g, 1, 3, 40, NULL, 0); /* dh < 0: re-baseline at (3, 40) */
    ck_assert_uint_eq(state_of(g).probes, 30);
    ck_assert_uint_eq(state_of(g).paid, 5);
    gates_tally(g, 1, 4, 40, NULL, 0); /* dp == 0: nothing */
    ck_assert_uint_eq(state_of(g).probes, 30);
    gates_tally(g, 1, 9, 44, NULL, 0); /* batch(6, 4) clamps to batch(4, 4) */
    p = ref_batch(p, 0.0625, 4, 4);
    ck_assert_uint_eq(state_of(g).probes, 34);
    ck_assert_uint_eq(state_of(g).paid, 9);
    ck_assert(state_of(g).payoff == p);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_report_every)
{
    gates_cfg_t c;
    gates_t *g;

    config_gates_defaults(&c);
    g = new_gates(&c);
    ck_assert(!gates_fold_batch(g, 0, 255)); /* 255 */
    ck_assert(gates_fold_batch(g, 0, 1));    /* 256 */
    ck_assert(!gates_fold_batch(g, 0, 1));   /* 257 */
    ck_assert(gates_fold_batch(g, 0, 300));  /* 557: crossed 512 */
    ck_assert(!gates_fold_batch(g, 0, 10));  /* 567 */
    ck_assert(!gates_fold_batch(g, 0, 200)); /* 767 */
    ck_assert(gates_fold_batch(g, 0, 1));    /* 768 */
    ck_assert(gates_fold_batch(g, 0, 600));  /* 1368: more than one multiple */
    feed(g, false, 167);                     /* 1535 */
    ck_assert(!gates_tally(g, 3, 0, 0, NULL, 0));
    ck_assert(gates_tally(g, 3, 0, 1, NULL, 0));  /* 1536 */
    ck_assert(!gates_tally(g, 3, 0, 1, NULL, 0)); /* nothing folded */
    ck_assert(!gates_tally(g, 3, 0, 2, NULL, 0)); /* 1537 */
    ck_assert_uint_eq(state_of(g).probes, 1537);

    c.admission.report_every = 1;
    gates_destroy(&g);
    g = new_gates(&c);
    ck_assert(gates_fold_batch(g, 0, 1));
    ck_assert(gates_fold_batch(g, 0, 7));
    gates_destroy(&g);
}
END_TEST

START_TEST(test_reasons_two_engines)
{
    gates_cfg_t c;
    gates_t *g;
    gates_reason_t a[2], b[2];
    gates_state_t st;

    config_gates_defaults(&c);
    g = new_gates(&c);
    a[0] = reason("hbm_satisfies_after_alloc", 3);
    a[1] = reason("too_small", 1);
    gates_tally(g, 100, 0, 4, a, 2);
    b[0] = reason("hbm_satisfies_after_alloc", 2);
    b[1] = reason("aligned_large_hit", 4);
    gates_tally(g, 200, 4, 6, b, 2);
    st = state_of(g);
    ck_assert_int_eq(st.nreasons, 3);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 5);
    ck_assert_uint_eq(reason_count(&st, "too_small"), 1);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 4);
    ck_assert_uint_eq(st.probes, 10);
    ck_assert_uint_eq(st.paid, 4);

    /* Engine 100 moves on: only its differences are added. */
    a[0] = reason("hbm_satisfies_after_alloc", 5);
    a[1] = reason("too_small", 1);
    gates_tally(g, 100, 0, 6, a, 2);
    st = state_of(g);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 7);
    ck_assert_uint_eq(reason_count(&st, "too_small"), 1);

    /* A reason going down on its own re-baselines that reason only. */
    b[0] = reason("hbm_satisfies_after_alloc", 1);
    b[1] = reason("aligned_large_hit", 5);
    gates_tally(g, 200, 5, 7, b, 2);
    st = state_of(g);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 7);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 5);
    b[0] = reason("hbm_satisfies_after_alloc", 3);
    gates_tally(g, 200, 5, 9, b, 2);
    st = state_of(g);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 9);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 5);

    /* A restart seen in the totals re-baselines every reason of that engine: nothing added,
     * then counting resumes from the restarted engine's values. */
    a[0] = reason("hbm_satisfies_after_alloc", 2);
    a[1] = reason("too_small", 2);
    gates_tally(g, 100, 0, 4, a, 2);
    st = state_of(g);
    ck_assert_uint_eq(st.probes, 15);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 9);
    ck_assert_uint_eq(reason_count(&st, "too_small"), 1);
    a[0] = reason("hbm_satisfies_after_alloc", 3);
    a[1] = reason("too_small", 4);
    gates_tally(g, 100, 0, 7, a, 2);
    st = state_of(g);
    ck_assert_uint_eq(st.probes, 18);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 10);
    ck_assert_uint_eq(reason_count(&st, "too_small"), 3);
    ck_assert_int_eq(st.nreasons, 3);

    /* Engine 200 restarts and does not mention aligned_large_hit: that reason's baseline is 0
     * in the new life, so its next count adds entirely. */
    b[0] = reason("hbm_satisfies_after_alloc", 1);
    gates_tally(g, 200, 0, 1, b, 1);
    st = state_of(g);
    ck_assert_uint_eq(st.probes, 18);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 5);
    b[0] = reason("hbm_satisfies_after_alloc", 1);
    b[1] = reason("aligned_large_hit", 2);
    gates_tally(g, 200, 2, 3, b, 2);
    st = state_of(g);
    ck_assert_uint_eq(st.probes, 20);
    ck_assert_uint_eq(reason_count(&st, "hbm_satisfies_after_alloc"), 10);
    ck_assert_uint_eq(reason_count(&st, "aligned_large_hit"), 7);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_reasons_table_full)
{
    gates_cfg_t c;
    gates_t *g;
    gates_reason_t r[GATES_REASON_MAX + 2];
    gates_state_t st;
    char name[32];

    config_gates_defaults(&c);
    g = new_gates(&c);
    for (int i = 0; i < GATES_REASON_MAX + 1; i++) {
        snprintf(name, sizeof name, "reason_%d", i);
        r[i] = reason(name, (uint64_t)i + 1);
    }
    r[GATES_REASON_MAX + 1] = reason("", 9); /* an empty name is ignored */
    gates_tally(g, 1, 0, 1, r, GATES_REASON_MAX + 2);
    st = state_of(g);
    ck_assert_int_eq(st.nreasons, GATES_REASON_MAX);
    ck_assert_uint_eq(reason_count(&st, "reason_0"), 1);
    ck_assert_uint_eq(reason_count(&st, "reason_15"), 16);
    ck_assert_uint_eq(reason_count(&st, "reason_16"), UINT64_MAX); /* dropped */
    gates_destroy(&g);
}
END_TEST

START_TEST(test_engine_table_overflow)
{
    gates_cfg_t c;
    gates_t *g;
    gates_reason_t r = reason("too_small", 1);

    config_gates_defaults(&c);
    g = new_gates(&c);
    for (uint64_t id = 1; id <= GATES_ENGINE_MAX; id++)
        gates_tally(g, id, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX);
    /* Engine 1 is seen again (same totals): it is now the most recent; engine 2 the least. */
    gates_tally(g, 1, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX);
    /* A 257th engine takes engine 2's slot. */
    gates_tally(g, 9999, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 1);
    /* Engine 1 is still remembered: only its difference folds. */
    gates_tally(g, 1, 0, 2, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 2);
    /* Engine 3 too. */
    gates_tally(g, 3, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 2);
    /* Engine 2 was forgotten: it is a first sighting again and its totals fold entirely
     * (engine 4, the least recent now, is dropped for it). */
    gates_tally(g, 2, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 3);
    gates_tally(g, 2, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 3);
    gates_tally(g, 4, 0, 1, &r, 1);
    ck_assert_uint_eq(state_of(g).probes, GATES_ENGINE_MAX + 4);
    {
        gates_state_t st = state_of(g);
        /* 256 first sightings + 9999 + engine 2 again + engine 4 again */
        ck_assert_uint_eq(reason_count(&st, "too_small"), GATES_ENGINE_MAX + 3);
    }
    gates_destroy(&g);
}
END_TEST

START_TEST(test_target_zero_and_state_share)
{
    gates_cfg_t c = admission_cfg(true, 0, 0.25, 0.0, 0.0625);
    gates_t *g = new_gates(&c);
    double p = 1.0;

    feed(g, false, 100);
    ck_assert(state_of(g).share == 1.0); /* target 0: share 1.0 */
    ck_assert_int_eq(decide(g, 10), 10);
    gates_destroy(&g);

    /* The state's share follows the payoff, enabled or not, with floor and cap applied. */
    c = admission_cfg(false, 0, 0.25, 0.10, 0.0625);
    g = new_gates(&c);
    for (int i = 0; i < 45; i++) {
        gates_fold_one(g, false);
        p = ref_one(p, 0.0625, false);
    }
    ck_assert(state_of(g).payoff == p);
    ck_assert(state_of(g).share == fmin(1.0, fmax(0.25, p / 0.10)));
    ck_assert(state_of(g).share > 0.25 && state_of(g).share < 1.0);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_save_share_and_shadow_warmup)
{
    gates_cfg_t c = admission_cfg(false, 10, 0.25, 0.10, 1.0);
    gates_t *g = new_gates(&c);
    gates_state_t st;

    feed(g, false, 9);
    decide(g, 8); /* disabled and still warming: the shadow does not decline either */
    ck_assert_uint_eq(state_of(g).would_decline, 0);
    feed(g, false, 1);
    decide(g, 8); /* shadow share 0.25: declines 3 of every 4 */
    st = state_of(g);
    ck_assert_uint_eq(st.would_decline, 6);
    ck_assert_uint_eq(st.saved, 16);
    ck_assert(st.save_share == 1.0);
    gates_destroy(&g);

    c.admission.enabled = true;
    g = new_gates(&c);
    feed(g, false, 10);
    decide(g, 8);
    st = state_of(g);
    ck_assert_uint_eq(st.saved, 2);
    ck_assert_uint_eq(st.skipped, 6);
    ck_assert(st.save_share == 0.25);
    ck_assert_uint_eq(st.would_decline, 0);
    gates_destroy(&g);
}
END_TEST

/* --- lookup skip scenarios (chunk 8, min_load 8192, a stored prefix of 20000 tokens) --- */

static gates_t *skip_gates(bool enabled)
{
    gates_cfg_t c;

    config_gates_defaults(&c);
    c.lookup_skip.enabled = enabled;
    return new_gates(&c);
}

START_TEST(test_loadable)
{
    ck_assert_uint_eq(gates_loadable(20000, 20000, 8), 19992);
    ck_assert_uint_eq(gates_loadable(20000, 30000, 8), 20000);
    ck_assert_uint_eq(gates_loadable(28192, 30000, 8), 28192);
    ck_assert_uint_eq(gates_loadable(20001, 20001, 8), 20000);
    ck_assert_uint_eq(gates_loadable(19999, 30000, 8), 19992);
    ck_assert_uint_eq(gates_loadable(7, 30000, 8), 0);
    ck_assert_uint_eq(gates_loadable(0, 0, 8), 0);
    ck_assert_uint_eq(gates_loadable(0, 100, 8), 0);
    ck_assert_uint_eq(gates_loadable(256, 256, 256), 0);
    ck_assert_uint_eq(gates_loadable(100, 100, 0), 99); /* chunk 0: no flooring */
}
END_TEST

START_TEST(test_skip1_skipped)
{
    gates_t *g = skip_gates(true);
    gates_state_t st;

    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    st = state_of(g);
    ck_assert_uint_eq(st.skips, 1);
    ck_assert_uint_eq(st.forced_probes, 0);
    ck_assert_uint_eq(st.would_skip, 0);
    ck_assert_uint_eq(st.lookups, 0); /* a skipped lookup is not an answered one */
    /* One non-paid verdict, folded as a single verdict. */
    ck_assert_uint_eq(st.probes, 1);
    ck_assert_uint_eq(st.paid, 0);
    ck_assert(st.payoff == 0.9375);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip2_answered)
{
    gates_t *g = skip_gates(true);
    uint64_t lmc = gates_loadable(20000, 20000, 8);
    gates_state_t st;

    ck_assert_int_eq(gates_lookup_decide(g, 20000, 0), GATES_LOOKUP_ANSWER);
    ck_assert_uint_eq(lmc, 19992);
    gates_lookup_observe(g, lmc, 0);
    st = state_of(g);
    ck_assert_uint_eq(st.lookups, 1);
    ck_assert(st.act_ema == 0.015625); /* actionable: 0 + 1/64 * (1 - 0) */
    ck_assert_uint_eq(st.skips, 0);
    ck_assert_uint_eq(st.probes, 0);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip3_disabled_would_skip)
{
    gates_t *g = skip_gates(false);
    gates_state_t st;

    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    gates_lookup_observe(g, gates_loadable(20000, 20000, 8), 16000);
    st = state_of(g);
    ck_assert_uint_eq(st.would_skip, 1);
    ck_assert_uint_eq(st.skips, 0);
    ck_assert_uint_eq(st.probes, 0); /* the shadow records no verdict */
    ck_assert_uint_eq(st.lookups, 1);
    ck_assert(st.act_ema == 0.0); /* 19992 - 16000 < 8192 */
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip4_load_bearing)
{
    gates_t *g = skip_gates(true);
    uint64_t lmc = gates_loadable(28192, 30000, 8);
    double e = 0.0;
    gates_state_t st;

    ck_assert_uint_eq(lmc, 28192);
    for (int i = 0; i < 64; i++) {
        ck_assert_int_eq(gates_lookup_decide(g, 30000, 20000), GATES_LOOKUP_ANSWER);
        gates_lookup_observe(g, lmc, 20000); /* 28192 - 20000 = 8192: actionable */
        e = e + 0.015625 * (1.0 - e);
        if (i == 62)
            ck_assert(!state_of(g).load_bearing); /* 63 lookups: still unmeasured */
    }
    st = state_of(g);
    ck_assert_uint_eq(st.lookups, 64);
    ck_assert(st.act_ema == e);
    ck_assert(st.load_bearing);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    st = state_of(g);
    ck_assert_uint_eq(st.skips, 0);
    ck_assert_uint_eq(st.forced_probes, 0);
    ck_assert_uint_eq(st.probes, 0);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip5_not_actionable)
{
    gates_t *g = skip_gates(true);
    uint64_t lmc = gates_loadable(20000, 20000, 8);

    for (int i = 0; i < 64; i++)
        gates_lookup_observe(g, lmc, 20000); /* 19992 <= 20000: not actionable */
    ck_assert_uint_eq(state_of(g).lookups, 64);
    ck_assert(state_of(g).act_ema == 0.0);
    ck_assert(!state_of(g).load_bearing);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    ck_assert_uint_eq(state_of(g).skips, 1);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip6_unmeasured)
{
    gates_t *g = skip_gates(true);

    for (int i = 0; i < 8; i++)
        gates_lookup_observe(g, 28192, 20000);
    ck_assert(state_of(g).act_ema >= 0.01);
    ck_assert(!state_of(g).load_bearing);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    gates_destroy(&g);
}
END_TEST

START_TEST(test_skip7_forced_probe)
{
    gates_t *g = skip_gates(true);
    gates_state_t st;
    double p = 1.0;

    for (int i = 0; i < 31; i++) {
        ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
        p = ref_one(p, 0.0625, false);
    }
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    st = state_of(g);
    ck_assert_uint_eq(st.skips, 31);
    ck_assert_uint_eq(st.forced_probes, 1);
    ck_assert_uint_eq(st.probes, 31);
    ck_assert(st.payoff == p);
    /* Non-skippable lookups do not advance the probe counter. */
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 0), GATES_LOOKUP_ANSWER);
    for (int i = 0; i < 31; i++)
        ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    st = state_of(g);
    ck_assert_uint_eq(st.skips, 62);
    ck_assert_uint_eq(st.forced_probes, 2);
    gates_destroy(&g);
}
END_TEST

/* The shadow counts the skips the gate would have made, not its forced probes, and nothing
 * while the tier is load-bearing. */
START_TEST(test_skip_shadow_counter)
{
    gates_t *g = skip_gates(false);

    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    ck_assert_uint_eq(state_of(g).would_skip, 62);
    ck_assert_uint_eq(state_of(g).skips, 0);
    ck_assert_uint_eq(state_of(g).forced_probes, 0);
    for (int i = 0; i < 64; i++)
        gates_lookup_observe(g, 28192, 20000);
    ck_assert(state_of(g).load_bearing);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    ck_assert_uint_eq(state_of(g).would_skip, 62);
    gates_destroy(&g);
}
END_TEST

/* skippable uses signed arithmetic: hbm at or past the prompt does not wrap around. */
START_TEST(test_skip_signed)
{
    gates_cfg_t c;
    gates_t *g;

    config_gates_defaults(&c);
    c.lookup_skip.enabled = true;
    c.lookup_skip.probe_every = 1000;
    g = new_gates(&c);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 30000), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 20000), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 0, 0), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 8193, 0), GATES_LOOKUP_ANSWER); /* 8192 */
    ck_assert_int_eq(gates_lookup_decide(g, 8192, 0), GATES_LOOKUP_SKIP);   /* 8191 */
    gates_destroy(&g);

    c.lookup_skip.min_load_tokens = 0;
    g = new_gates(&c);
    ck_assert_int_eq(gates_lookup_decide(g, 1, 0), GATES_LOOKUP_ANSWER); /* 0 < 0 is false */
    ck_assert_int_eq(gates_lookup_decide(g, 1, 1), GATES_LOOKUP_SKIP);   /* -1 < 0 */
    /* actionable needs loadable > hbm even when min_load is 0 */
    gates_lookup_observe(g, 200, 200);
    gates_lookup_observe(g, 100, 200);
    ck_assert(state_of(g).act_ema == 0.0);
    gates_lookup_observe(g, 201, 200);
    ck_assert(state_of(g).act_ema == 0.015625);
    gates_destroy(&g);
}
END_TEST

/* The configured cut, min_lookups and probe_every are the ones used. */
START_TEST(test_skip_settings)
{
    gates_cfg_t c;
    gates_t *g;

    config_gates_defaults(&c);
    c.lookup_skip.enabled = true;
    c.lookup_skip.min_lookups = 2;
    c.lookup_skip.cut = 0.5;
    c.lookup_skip.probe_every = 3;
    c.lookup_skip.alpha = 0.5;
    g = new_gates(&c);
    gates_lookup_observe(g, 28192, 20000);
    ck_assert(state_of(g).act_ema == 0.5);
    ck_assert(!state_of(g).load_bearing); /* 1 lookup < 2 */
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_SKIP);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    gates_lookup_observe(g, 0, 16000); /* a miss: act_ema 0.25 */
    ck_assert(state_of(g).act_ema == 0.25);
    ck_assert(!state_of(g).load_bearing);  /* 0.25 < cut 0.5 */
    gates_lookup_observe(g, 28192, 20000); /* 0.625 */
    ck_assert(state_of(g).load_bearing);
    ck_assert_int_eq(gates_lookup_decide(g, 20000, 16000), GATES_LOOKUP_ANSWER);
    ck_assert_uint_eq(state_of(g).skips, 2);
    ck_assert_uint_eq(state_of(g).forced_probes, 1);
    gates_destroy(&g);
}
END_TEST

static Suite *gates_suite(void)
{
    Suite *s = suite_create("gates");
    TCase *adm = tcase_create("admission");
    TCase *tally = tcase_create("tally");
    TCase *skip = tcase_create("lookup_skip");

    tcase_add_test(adm, test_defaults);
    tcase_add_test(adm, test_adm8_fresh);
    tcase_add_test(adm, test_adm1_disabled_admits_all);
    tcase_add_test(adm, test_adm2_warmup);
    tcase_add_test(adm, test_adm3_floor);
    tcase_add_test(adm, test_adm4_paying);
    tcase_add_test(adm, test_adm5_rounds);
    tcase_add_test(adm, test_adm6_tenths);
    tcase_add_test(adm, test_adm9_batch_floor);
    tcase_add_test(adm, test_adm10_empty_batch);
    tcase_add_test(adm, test_adm11_clamped_batch);
    tcase_add_test(adm, test_batch_operation_order);
    tcase_add_test(adm, test_report_every);
    tcase_add_test(adm, test_target_zero_and_state_share);
    tcase_add_test(adm, test_save_share_and_shadow_warmup);
    suite_add_tcase(s, adm);

    tcase_add_test(tally, test_adm7_reasons);
    tcase_add_test(tally, test_adm12_tallies);
    tcase_add_test(tally, test_tally_totals_saturate);
    tcase_add_test(tally, test_tally_rebaseline_paid);
    tcase_add_test(tally, test_reasons_two_engines);
    tcase_add_test(tally, test_reasons_table_full);
    tcase_add_test(tally, test_engine_table_overflow);
    suite_add_tcase(s, tally);

    tcase_add_test(skip, test_loadable);
    tcase_add_test(skip, test_skip1_skipped);
    tcase_add_test(skip, test_skip2_answered);
    tcase_add_test(skip, test_skip3_disabled_would_skip);
    tcase_add_test(skip, test_skip4_load_bearing);
    tcase_add_test(skip, test_skip5_not_actionable);
    tcase_add_test(skip, test_skip6_unmeasured);
    tcase_add_test(skip, test_skip7_forced_probe);
    tcase_add_test(skip, test_skip_shadow_counter);
    tcase_add_test(skip, test_skip_signed);
    tcase_add_test(skip, test_skip_settings);
    suite_add_tcase(s, skip);
    return s;
}

const check_program_t check_program = {.suite = gates_suite};
