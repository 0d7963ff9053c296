/*
 * gates.c - save admission and lookup skip of one namespace (see gates.h, docs/GATES.md).
 *
 * Design. Two small estimators and two decisions, all counting events (never time):
 *   - admission: `payoff` is an exponential moving average of verdict payoffs, folded one at a
 *     time (gates_fold_one) or as a uniform batch (gates_fold_batch). gates_admit turns the
 *     share derived from it into admissions with a deterministic credit accumulator.
 *   - lookup skip: `act_ema` is an exponential moving average of "this answered lookup could
 *     have produced a load". gates_lookup_decide skips lookups whose answer cannot matter,
 *     unless the tier is measurably load-bearing, and forces one probe every probe_every.
 * Every formula is written exactly as GATES.md writes it, in double and in the same order: the
 * tests compare exact sequences. This file is compiled with -ffp-contract=off so that no
 * multiply-add is fused behind our back.
 *
 * Shadow mode. While a gate is disabled its estimators still run and the decision it would have
 * taken is computed on separate shadow state (shadow credit, shadow skip counter) so that the
 * status can show would_decline / would_skip without the shadow ever touching real state.
 *
 * Engine tallies. Engines push cumulative totals; the last totals per engine instance are kept
 * in a fixed table of GATES_ENGINE_MAX slots (least recently seen slot reused), each with the
 * last cumulative count of every reason name the namespace knows (up to GATES_REASON_MAX names;
 * further names are ignored). A tally scans the table linearly: at most 256 slots, once per
 * engine step.
 *
 * Threads: loop thread only; no locks, no I/O, no allocation after gates_new.
 *
 * Invariants: paid <= probes; saved + skipped = gates_admit calls; skips + forced_probes =
 * skip_counter (skippable lookups met while enabled and not load-bearing); the shadow state
 * (shadow_credit, shadow_skip_counter) only ever feeds would_decline / would_skip.
 */
#include "gates.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool used;
    uint64_t id;
    uint64_t seen_paid, seen_probes;
    uint64_t last_tick; /* value of gates_t.tick when last seen: smallest = least recent */
    uint64_t reason_seen[GATES_REASON_MAX]; /* indexed like gates_t.reasons */
} gates_engine_t;

struct gates {
    gates_cfg_t cfg;

    /* admission */
    double payoff, credit, shadow_credit;
    uint64_t probes, paid, saved, skipped, would_decline;

    /* lookup skip */
    double act_ema;
    uint64_t lookups, skip_counter, shadow_skip_counter;
    uint64_t skips, forced_probes, would_skip;

    /* tallies */
    int nreasons;
    gates_reason_t reasons[GATES_REASON_MAX];
    uint64_t tick;
    gates_engine_t engines[GATES_ENGINE_MAX];
};

gates_t *gates_new(const gates_cfg_t *cfg)
{
    gates_t *g = calloc(1, sizeof *g);

    if (g == NULL)
        return NULL;
    g->cfg = *cfg;
    g->payoff = 1.0;
    g->credit = 0.0;
    g->shadow_credit = 0.0;
    g->act_ema = 0.0;
    return g;
}

void gates_destroy(gates_t **g)
{
    if (g == NULL || *g == NULL)
        return;
    free(*g);
    *g = NULL;
}

const gates_cfg_t *gates_cfg(const gates_t *g)
{
    return &g->cfg;
}

void gates_set_cfg(gates_t *g, const gates_cfg_t *cfg)
{
    g->cfg = *cfg;
}

/* A modulus of 0 would be undefined; config validation rejects it, this keeps the state machine
 * defined even if a caller skipped validation. */
static uint64_t at_least_one(uint64_t v)
{
    return v == 0 ? 1 : v;
}

/* --- admission estimator --- */

void gates_fold_one(gates_t *g, bool paid)
{
    double alpha = g->cfg.admission.alpha;
    double x = paid ? 1.0 : 0.0;

    g->probes += 1;
    if (paid)
        g->paid += 1;
    g->payoff = g->payoff + alpha * (x - g->payoff);
}

bool gates_fold_batch(gates_t *g, uint64_t h, uint64_t n)
{
    double alpha = g->cfg.admission.alpha;
    double keep;

    if (n == 0)
        return false;
    if (h > n)
        h = n;
    g->probes += n;
    g->paid += h;
    keep = pow(1.0 - alpha, (double)n);
    g->payoff = g->payoff * keep + ((double)h / (double)n) * (1.0 - keep);
    return g->probes % at_least_one(g->cfg.admission.report_every) < n;
}

/* The share the gate computes from the current payoff (GATES.md section 2). */
static double admission_share(const gates_t *g)
{
    const gates_admission_cfg_t *a = &g->cfg.admission;
    double share = a->target <= 0 ? 1.0 : g->payoff / a->target;

    share = fmin(1.0, fmax(a->floor, share));
    return share;
}

bool gates_admit(gates_t *g)
{
    const gates_admission_cfg_t *a = &g->cfg.admission;
    double share;

    if (!a->enabled || g->probes < a->warmup) {
        g->saved += 1;
        if (!a->enabled && g->probes >= a->warmup) {
            g->shadow_credit += admission_share(g);
            if (g->shadow_credit >= 1.0)
                g->shadow_credit -= 1.0;
            else
                g->would_decline += 1;
        }
        return true;
    }
    share = admission_share(g);
    g->credit += share;
    if (g->credit >= 1.0) {
        g->credit -= 1.0;
        g->saved += 1;
        return true;
    }
    g->skipped += 1;
    return false;
}

/* --- engine tallies --- */

static gates_engine_t *engine_slot(gates_t *g, uint64_t engine_id)
{
    gates_engine_t *free_slot = NULL, *lru = NULL;

    for (int i = 0; i < GATES_ENGINE_MAX; i++) {
        gates_engine_t *e = &g->engines[i];

        if (!e->used) {
            if (free_slot == NULL)
                free_slot = e;
            continue;
        }
        if (e->id == engine_id)
            return e;
        if (lru == NULL || e->last_tick < lru->last_tick)
            lru = e;
    }
    if (free_slot == NULL)
        free_slot = lru;
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->used = true;
    free_slot->id = engine_id;
    return free_slot;
}

/* Index of a reason name in the namespace table, adding it if there is room; -1 otherwise. */
static int reason_index(gates_t *g, const char *name)
{
    size_t len = strnlen(name, GATES_REASON_NAME_MAX);

    if (len == 0)
        return -1;
    for (int i = 0; i < g->nreasons; i++) {
        if (strlen(g->reasons[i].name) == len && memcmp(g->reasons[i].name, name, len) == 0)
            return i;
    }
    if (g->nreasons == GATES_REASON_MAX)
        return -1;
    memcpy(g->reasons[g->nreasons].name, name, len);
    g->reasons[g->nreasons].name[len] = '\0';
    g->reasons[g->nreasons].count = 0;
    return g->nreasons++;
}

static void tally_reasons(gates_t *g, gates_engine_t *e, const gates_reason_t *reasons,
                          int nreasons, bool rebaseline)
{
    if (rebaseline)
        memset(e->reason_seen, 0, sizeof e->reason_seen);
    if (reasons == NULL)
        return;
    for (int i = 0; i < nreasons; i++) {
        int k = reason_index(g, reasons[i].name);
        uint64_t now = reasons[i].count;

        if (k < 0)
            continue;
        if (!rebaseline && now > e->reason_seen[k])
            g->reasons[k].count += now - e->reason_seen[k];
        e->reason_seen[k] = now;
    }
}

bool gates_tally(gates_t *g, uint64_t engine_id, uint64_t paid_total, uint64_t probes_total,
                 const gates_reason_t *reasons, int nreasons)
{
    gates_engine_t *e = engine_slot(g, engine_id);
    bool report = false;
    bool reset = probes_total < e->seen_probes || paid_total < e->seen_paid;

    e->last_tick = ++g->tick;
    if (reset) {
        e->seen_paid = paid_total;
        e->seen_probes = probes_total;
    } else if (probes_total > e->seen_probes) {
        report = gates_fold_batch(g, paid_total - e->seen_paid, probes_total - e->seen_probes);
        e->seen_paid = paid_total;
        e->seen_probes = probes_total;
    }
    tally_reasons(g, e, reasons, nreasons, reset);
    return report;
}

/* --- lookup skip --- */

/* (prompt_tokens - 1 - hbm_tokens) < min_load_tokens, in signed arithmetic without overflow. */
static bool lookup_skippable(uint64_t prompt_tokens, uint64_t hbm_tokens, uint64_t min_load)
{
    if (prompt_tokens == 0 || hbm_tokens > prompt_tokens - 1)
        return true; /* the left side is negative */
    return prompt_tokens - 1 - hbm_tokens < min_load;
}

static bool lookup_load_bearing(const gates_t *g)
{
    const gates_skip_cfg_t *s = &g->cfg.lookup_skip;

    return g->lookups >= s->min_lookups && g->act_ema >= s->cut;
}

gates_lookup_decision_t gates_lookup_decide(gates_t *g, uint64_t prompt_tokens, uint64_t hbm_tokens)
{
    const gates_skip_cfg_t *s = &g->cfg.lookup_skip;
    uint64_t every = at_least_one(s->probe_every);

    if (!lookup_skippable(prompt_tokens, hbm_tokens, s->min_load_tokens))
        return GATES_LOOKUP_ANSWER;
    if (lookup_load_bearing(g))
        return GATES_LOOKUP_ANSWER;
    if (!s->enabled) {
        g->shadow_skip_counter += 1;
        if (g->shadow_skip_counter % every != 0)
            g->would_skip += 1;
        return GATES_LOOKUP_ANSWER;
    }
    g->skip_counter += 1;
    if (g->skip_counter % every == 0) {
        g->forced_probes += 1;
        return GATES_LOOKUP_ANSWER;
    }
    g->skips += 1;
    gates_fold_one(g, false);
    return GATES_LOOKUP_SKIP;
}

bool gates_lookup_observe(gates_t *g, uint64_t loadable_hit_tokens, uint64_t hbm_tokens)
{
    double alpha = g->cfg.lookup_skip.alpha;
    bool actionable = loadable_hit_tokens > hbm_tokens &&
                      loadable_hit_tokens - hbm_tokens >= g->cfg.lookup_skip.min_load_tokens;
    double a = actionable ? 1.0 : 0.0;

    g->act_ema = g->act_ema + alpha * (a - g->act_ema);
    g->lookups += 1;
    return g->lookups % at_least_one(g->cfg.lookup_skip.report_every) == 0;
}

bool gates_admission_report_due(const gates_t *g)
{
    return g->probes > 0 && g->probes % at_least_one(g->cfg.admission.report_every) == 0;
}

uint64_t gates_loadable(uint64_t hit_tokens, uint64_t prompt_tokens, uint64_t chunk_tokens)
{
    uint64_t lmc = hit_tokens;

    if (lmc > 0 && lmc >= prompt_tokens)
        lmc -= 1;
    if (chunk_tokens > 0)
        lmc -= lmc % chunk_tokens;
    return lmc;
}

/* --- state --- */

void gates_state(const gates_t *g, gates_state_t *st)
{
    uint64_t decided = g->saved + g->skipped;

    memset(st, 0, sizeof *st);
    st->probes = g->probes;
    st->paid = g->paid;
    st->saved = g->saved;
    st->skipped = g->skipped;
    st->would_decline = g->would_decline;
    st->payoff = g->payoff;
    st->credit = g->credit;
    st->share = admission_share(g);
    st->save_share = decided == 0 ? 1.0 : (double)g->saved / (double)decided;
    st->lookups = g->lookups;
    st->skips = g->skips;
    st->forced_probes = g->forced_probes;
    st->would_skip = g->would_skip;
    st->act_ema = g->act_ema;
    st->load_bearing = lookup_load_bearing(g);
    st->nreasons = g->nreasons;
    memcpy(st->reasons, g->reasons, sizeof st->reasons);
}
