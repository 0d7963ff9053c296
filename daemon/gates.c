/*
 * gates.c - save admission and lookup skip of one namespace (see gates.h, docs/GATES.md).
 *
 * What admission is for. Writing a prefix into the tier costs the engine time on every prefill;
 * it pays only through the loads that come back for it. Per namespace and in tokens, the tier
 * is worth net = served - c * written, c (cost_ratio) being the cost of writing a token over
 * that of recomputing it. The gate must maximise net: admit everything while what the tier
 * serves per token written is above c, almost nothing while it is far below.
 *
 * Policy value (GATES.md 6, the default). It estimates the value density D, tokens served per
 * token offered had every save been admitted, over an exponential window in *offered tokens*
 * (the gate has no clock): a new offer of x tokens ages the window by keep = exp(-x/H) and
 * enters it spread over the step (xw = xw * keep - H * expm1(-x/H), so the window depends on the
 * total offered only, not on how it was cut into operations); value adds at face value; D =
 * vw / xw. In steady state only the rates matter, whatever the delay between a write and the
 * loads it serves. The value is what the engines tallied as served (token tallies; the lookups'
 * own estimate by the verdict rule while no token tally came) plus *regret*: when a lookup's hit
 * stops at a chunk the gate declined, the prefix would have reached on through every ghosted or
 * stored chunk, and what that longer hit would have loaded by the verdict rule, beyond what the
 * real one loads, is what the declines cost. The declined chunks are remembered in a fixed-size
 * ghost table (ghost.h); a chunk offered again after a decline is no new offer (under full
 * admission it was written the first time). So the gate's own declines do not lower its
 * estimate, the circularity that made atom keep a cold tier shut, and its floor can be small.
 *
 * It starts optimistic: the window holds a prior of X0 offered tokens that served as many
 * (density 1), X0 = c * E(B) / (1 - c) with E(X) = H * expm1(X / H), so that without evidence D
 * reaches c after exactly B = learn_tokens offered tokens; evidence, or its absence, takes over
 * from there (warmup ends on evidence, not on a count of events). The window starts moving only
 * once the namespace has shown reuse (an engine's verdict, or reused prefixes adding up to
 * min_load_tokens): a workload that has reused nothing has said nothing about the tier; or once
 * reuse_wait_tokens (8M) were offered while its lookups showed no reuse at all (window_moves):
 * then it has said that it reuses nothing. The
 * share is 1 at D >= c, value_floor at D <= c / 2, linear between (near c the net hardly depends
 * on the choice and the estimate is least certain), and atom's credit accumulator turns it into
 * decisions. An operation whose declared parent was declined is declined without credit: stored,
 * it could not be hit before its predecessor is saved again.
 *
 * Why these defaults (GATES.md 6.7 explains each): c 0.05 (a 70B-class GQA model writing over
 * PCIe; from the KV bytes per token against the prefill FLOPs per token of the deployment),
 * learn_tokens = window_tokens = 4M tokens (about one or two HBM prefix caches of a large engine:
 * the tier cannot show its worth before the engine has written more than its HBM holds; the best
 * sum of net over the tuning traces), value_floor 0.02, 262144 ghost fingerprints (2 MiB). With
 * no value the gate writes 5.1M tokens and then 2% of what it is offered.
 *
 * Policy atom (GATES.md 2), kept bit for bit: `payoff` is an exponential moving average of
 * verdict payoffs, folded one at a time (gates_fold_one) or as a uniform batch
 * (gates_fold_batch), turned into a share against `target` with a floor. Lookup skip (GATES.md
 * 3): `act_ema` is an exponential moving average of "this answered lookup could have produced a
 * load"; gates_lookup_decide skips lookups whose answer cannot matter, unless the tier is
 * measurably load-bearing, and forces one probe every probe_every. Every formula is written
 * exactly as GATES.md writes it, in double and in the same order: the tests compare exact
 * sequences. This file is compiled with -ffp-contract=off so that no multiply-add is fused
 * behind our back.
 *
 * Shadow mode. Every estimator runs whether its gate is enabled or not. The configured policy
 * decides while admission is enabled; the other one (and both while it is disabled) decides on
 * a shadow credit of its own, so that status shows atom.would_decline / value.would_decline
 * (and would_decline / would_skip for the disabled gates) without a shadow ever touching real
 * state. Declines feed the ghost table whichever policy made them.
 *
 * Engine tallies. Engines push cumulative totals; the last totals per engine instance are kept
 * in a fixed table of GATES_ENGINE_MAX slots (least recently seen slot reused), each with the
 * last cumulative count of every reason name the namespace knows (up to GATES_REASON_MAX names;
 * further names are ignored) and the last token totals. A tally scans the table linearly: at
 * most 256 slots, once per engine step.
 *
 * Threads: loop thread only; no locks, no I/O, no allocation after gates_new.
 *
 * Invariants: paid <= probes; saved + skipped = decisions; written + declined = the WANTED
 * tokens of decided operations; offered <= written + declined; skips + forced_probes =
 * skip_counter (skippable lookups met while enabled and not load-bearing); the shadow state
 * (shadow_credit, value_shadow_credit, shadow_skip_counter) only ever feeds the would_* counts;
 * xw > 0 once anything was offered after the window started.
 */
#include "gates.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool used;
    uint64_t id;
    uint64_t seen_paid, seen_probes;
    uint64_t seen_served, seen_lookup; /* token totals (TALLY flag TOKENS) */
    uint64_t last_tick; /* value of gates_t.tick when last seen: smallest = least recent */
    uint64_t reason_seen[GATES_REASON_MAX]; /* indexed like gates_t.reasons */
} gates_engine_t;

struct gates {
    gates_cfg_t cfg;

    /* admission: atom */
    double payoff, credit, shadow_credit;
    uint64_t probes, paid, saved, skipped, would_decline, atom_would_decline;

    /* admission: value */
    double vw, xw; /* the value window: value tokens and offered tokens, aged by offers */
    double value_credit, value_shadow_credit;
    uint64_t value_would_decline;
    uint64_t served, lookup_tokens, est_served, regret, written, declined, offered;
    uint64_t token_tallies, orphans_declined;
    uint64_t reuse_tokens; /* prompt tokens answered lookups found reused (in HBM or the tier) */
    uint64_t window_on;    /* 1 once offers age the value window (sticky; window_started) */
    ghost_t *ghost;

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

const char *const gates_policy_words[] = {"atom", "value", NULL};

/* The learned state is struct gates but for its settings and the ghost table's pointer: the two
 * runs of fields either side of the pointer, copied as they are (gates_export). The tag names
 * the layout, so that a file of another build is refused rather than misread. */
#define GATES_RUN1_OFF offsetof(struct gates, payoff)
#define GATES_RUN1_LEN (offsetof(struct gates, ghost) - GATES_RUN1_OFF)
#define GATES_RUN2_OFF offsetof(struct gates, act_ema)
#define GATES_RUN2_LEN (sizeof(struct gates) - GATES_RUN2_OFF)
#define GATES_LAYOUT_TAG                                                                           \
    ((uint64_t)sizeof(struct gates) << 32 ^ (uint64_t)GATES_RUN1_OFF << 16 ^                       \
     (uint64_t)GATES_RUN2_OFF ^ (uint64_t)GATES_ENGINE_MAX << 48 ^                                 \
     (uint64_t)GATES_REASON_MAX << 56)

/* E(X) of GATES.md 6: the offered tokens a window that ages by exp(-x / H) holds after X offered
 * tokens, counted from the start (H * (e^(X/H) - 1)). */
static double window_equivalent(double x, double h)
{
    return h * expm1(x / h);
}

/* The prior of the value window (GATES.md 6): X0 offered tokens that served X0 tokens (density
 * 1.0), sized so that without any evidence the density reaches cost_ratio after exactly
 * learn_tokens offered tokens. */
static double value_prior(const gates_admission_cfg_t *a)
{
    double h = (double)(a->window_tokens > 0 ? a->window_tokens : 1);
    double c = a->cost_ratio;

    if (a->learn_tokens == 0 || c <= 0.0 || c >= 1.0)
        return 0.0;
    return c * window_equivalent((double)a->learn_tokens, h) / (1.0 - c);
}

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
    g->xw = value_prior(&cfg->admission);
    g->vw = g->xw;
    g->value_credit = 0.0;
    g->value_shadow_credit = 0.0;
    g->ghost = ghost_new(cfg->admission.ghost_entries);
    if (g->ghost == NULL) {
        free(g);
        return NULL;
    }
    return g;
}

void gates_destroy(gates_t **g)
{
    if (g == NULL || *g == NULL)
        return;
    ghost_destroy(&(*g)->ghost);
    free(*g);
    *g = NULL;
}

const gates_cfg_t *gates_cfg(const gates_t *g)
{
    return &g->cfg;
}

void gates_set_cfg(gates_t *g, const gates_cfg_t *cfg)
{
    uint64_t learn = g->cfg.admission.learn_tokens, ghosts = g->cfg.admission.ghost_entries;

    g->cfg = *cfg;
    g->cfg.admission.learn_tokens = learn;   /* sized the prior at creation */
    g->cfg.admission.ghost_entries = ghosts; /* sized the ghost table at creation */
}

/* A modulus of 0 would be undefined; config validation rejects it, this keeps the state machine
 * defined even if a caller skipped validation. */
static uint64_t at_least_one(uint64_t v)
{
    return v == 0 ? 1 : v;
}

/* *a += b, stopping at UINT64_MAX. The counters that sum figures an engine sends (tallies'
 * totals, prompt and HBM tokens) saturate rather than wrap: a hostile or broken engine's totals
 * near 2^64 would otherwise send a cumulative counter (a Prometheus counter) backwards. */
static void sat_add(uint64_t *a, uint64_t b)
{
    *a = b > UINT64_MAX - *a ? UINT64_MAX : *a + b;
}

/* --- admission estimator --- */

void gates_fold_one(gates_t *g, bool paid)
{
    double alpha = g->cfg.admission.alpha;
    double x = paid ? 1.0 : 0.0;

    sat_add(&g->probes, 1); /* a tally may have saturated it (sat_add) */
    if (paid)
        sat_add(&g->paid, 1);
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
    sat_add(&g->probes, n);
    sat_add(&g->paid, h);
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

/* Atom's answer for one operation (GATES.md 2). While it decides, its warmup admits without
 * touching the credit; while it does not, its shadow credit counts what it would have declined
 * (past the warmup only). */
static bool atom_decide(gates_t *g, bool deciding)
{
    const gates_admission_cfg_t *a = &g->cfg.admission;
    double share;

    if (g->probes < a->warmup)
        return true;
    share = admission_share(g);
    if (!deciding) {
        g->shadow_credit += share;
        if (g->shadow_credit >= 1.0) {
            g->shadow_credit -= 1.0;
            return true;
        }
        g->atom_would_decline += 1;
        return false;
    }
    g->credit += share;
    if (g->credit >= 1.0) {
        g->credit -= 1.0;
        return true;
    }
    return false;
}

/* --- admission: value (GATES.md 6) --- */

/* Below GATES_VALUE_RAMP x cost_ratio the value share is its floor; between that and
 * cost_ratio it rises linearly to 1. */
#define GATES_VALUE_RAMP 0.5

static double value_density(const gates_t *g)
{
    return g->xw > 0.0 ? g->vw / g->xw : 1.0;
}

static double value_share(const gates_t *g)
{
    const gates_admission_cfg_t *a = &g->cfg.admission;
    double r = value_density(g) / a->cost_ratio;
    double share;

    if (r >= 1.0)
        return 1.0;
    share = r <= GATES_VALUE_RAMP ? 0.0 : (r - GATES_VALUE_RAMP) / (1.0 - GATES_VALUE_RAMP);
    return fmax(a->value_floor, share);
}

/* Value's answer for one operation. An orphan (its parent was declined) is declined without
 * spending credit. */
static bool value_decide(gates_t *g, bool deciding, bool orphan)
{
    double *credit = deciding ? &g->value_credit : &g->value_shadow_credit;

    if (orphan) {
        if (!deciding)
            g->value_would_decline += 1;
        return false;
    }
    *credit += value_share(g);
    if (*credit >= 1.0) {
        *credit -= 1.0;
        return true;
    }
    if (!deciding)
        g->value_would_decline += 1;
    return false;
}

/* An offer of x new tokens ages the window: everything in it by exp(-x / H), and x enters it
 * spread over the step (H * (1 - exp(-x / H))), so that the window depends on the total offered
 * only, not on how it was cut into operations. */
static void value_offer(gates_t *g, uint64_t x)
{
    double h = (double)(g->cfg.admission.window_tokens > 0 ? g->cfg.admission.window_tokens : 1);
    double t = (double)x / h;
    double keep = exp(-t);

    g->vw = g->vw * keep;
    g->xw = g->xw * keep - h * expm1(-t);
}

static void value_evidence(gates_t *g, uint64_t tokens)
{
    g->vw += (double)tokens;
}

/* Both policies' answers; the configured one is enforced while the gate is enabled. */
static bool admit_decide(gates_t *g, bool orphan)
{
    const gates_admission_cfg_t *a = &g->cfg.admission;
    bool atom_decides = a->enabled && a->policy == GATES_POLICY_ATOM;
    bool value_decides = a->enabled && a->policy == GATES_POLICY_VALUE;
    bool atom = atom_decide(g, atom_decides);
    bool value = value_decide(g, value_decides, orphan);
    bool admit = atom_decides ? atom : value_decides ? value : true;

    if (!a->enabled && !(a->policy == GATES_POLICY_ATOM ? atom : value))
        g->would_decline += 1;
    if (admit)
        g->saved += 1;
    else
        g->skipped += 1;
    if (value_decides && orphan)
        g->orphans_declined += 1;
    return admit;
}

bool gates_admit(gates_t *g)
{
    return admit_decide(g, false);
}

/* The ghost fingerprint of hashes[i] (the hashes may be unaligned). */
static uint64_t hash_fp(const kvt_wire_hash_t *hashes, size_t i)
{
    kvt_wire_hash_t h;

    memcpy(&h, &hashes[i], sizeof h);
    return ghost_fp(&h);
}

/* Whether the namespace has shown any reuse: an engine's verdict (the tier held a prefix of a
 * lookup; the verdicts of skipped lookups do not count), or answered lookups whose reused
 * prefixes add up to min_load_tokens. Before that the workload has shown nothing about what the
 * tier is worth, and offers do not age the value window. */
static bool reuse_seen(const gates_t *g)
{
    return g->probes > g->skips || g->reuse_tokens >= g->cfg.lookup_skip.min_load_tokens;
}

/* Whether offers age the value window: once the namespace has shown reuse, or (0.2.7) once
 * reuse_wait_tokens were offered while its engines looked prompts up (lookups with prompt info)
 * and none showed any reuse, in HBM or in the tier: that workload has shown that it reuses
 * nothing, and the prior's optimism must not hold for ever (a trace of prompts that never
 * repeat wrote everything it offered). Engines that send no prompt info give no such evidence,
 * and their namespaces keep waiting for reuse, as before. */
static bool window_moves(const gates_t *g)
{
    uint64_t wait = g->cfg.admission.reuse_wait_tokens;

    return reuse_seen(g) || (wait > 0 && g->lookups > 0 && g->offered >= wait);
}

/* Whether the window has started: sticky (window_on, kept across restarts with the state), so
 * that a reload that raises reuse_wait_tokens or sets it to 0 does not stop a window that
 * started, and a window that starts late (the first lookup with prompt info came after the wait,
 * or a reload lowered it) is aged by everything offered until then, once. */
static bool window_started(const gates_t *g)
{
    return g->window_on != 0;
}

bool gates_admit_op(gates_t *g, const gates_op_t *op)
{
    uint64_t wanted = 0, fresh = 0, ct = op->chunk_tokens;
    bool orphan = false, admit, started;

    for (size_t i = 0; i < op->n; i++) {
        uint64_t fp;

        if (op->status[i] != KVT_CHUNK_WANTED)
            continue;
        fp = hash_fp(op->hashes, i);
        wanted++;
        fresh += !ghost_has(g->ghost, fp);
    }
    if (op->n > 0 && op->status[0] == KVT_CHUNK_WANTED && op->parent != NULL)
        orphan = ghost_has(g->ghost, hash_fp(op->parent, 0));
    admit = admit_decide(g, orphan);
    for (size_t i = 0; i < op->n; i++) {
        if (op->status[i] != KVT_CHUNK_WANTED)
            continue;
        if (admit)
            ghost_remove(g->ghost, hash_fp(op->hashes, i));
        else
            ghost_add(g->ghost, hash_fp(op->hashes, i));
    }
    if (admit)
        sat_add(&g->written, wanted * ct);
    else
        sat_add(&g->declined, wanted * ct);
    started = window_started(g);
    sat_add(&g->offered, fresh * ct);
    if (started || reuse_seen(g)) {
        value_offer(g, fresh * ct);
        g->window_on = 1;
    } else if (window_moves(g)) {
        value_offer(g, g->offered); /* started without reuse: as if it had moved from the start */
        g->window_on = 1;
    }
    return admit;
}

bool gates_value_report_due(const gates_t *g)
{
    uint64_t decided = g->saved + g->skipped;

    return decided > 0 && decided % at_least_one(g->cfg.admission.report_every) == 0;
}

/* The tokens a load would take for a loadable hit lmc by the verdict rule (GATES.md 1), 0 when
 * the verdict would not be paid. */
static uint64_t paid_load(const gates_t *g, uint64_t lmc, uint64_t hbm, uint32_t chunk_tokens)
{
    if (lmc <= hbm || (chunk_tokens > 0 && hbm % chunk_tokens != 0) ||
        lmc - hbm < g->cfg.lookup_skip.min_load_tokens)
        return 0;
    return lmc - hbm;
}

/* How far the prefix of hashes[0..n) would have reached had the declined saves been admitted. */
static size_t lookup_reach(const gates_t *g, const kvt_wire_hash_t *hashes, size_t n, size_t hit,
                           gates_stored_fn stored, void *arg)
{
    ghost_stats_t st;
    size_t k = hit;

    ghost_stats(g->ghost, &st);
    if (st.entries == 0 || hit >= n || !ghost_has(g->ghost, hash_fp(hashes, hit)))
        return hit;
    for (k = hit + 1; k < n; k++) {
        kvt_wire_hash_t h;

        memcpy(&h, &hashes[k], sizeof h);
        if (!ghost_has(g->ghost, ghost_fp(&h)) && (stored == NULL || !stored(arg, &h)))
            break;
    }
    return k;
}

void gates_lookup_value(gates_t *g, const kvt_wire_hash_t *hashes, size_t n, uint32_t hit_chunks,
                        uint64_t prompt_tokens, uint64_t hbm_tokens, uint32_t chunk_tokens,
                        gates_stored_fn stored, void *arg)
{
    uint64_t ct = chunk_tokens, hit = hit_chunks < n ? hit_chunks : n;
    uint64_t reused = hit * ct > hbm_tokens ? hit * ct : hbm_tokens;
    uint64_t served = paid_load(g, gates_loadable(hit * ct, prompt_tokens, chunk_tokens),
                                hbm_tokens, chunk_tokens);
    size_t reach = lookup_reach(g, hashes, n, (size_t)hit, stored, arg);
    uint64_t regret = 0;

    sat_add(&g->reuse_tokens, reused < prompt_tokens ? reused : prompt_tokens);
    sat_add(&g->est_served, served);
    if (g->token_tallies == 0)
        value_evidence(g, served);
    if (reach > hit) {
        uint64_t would =
            paid_load(g, gates_loadable((uint64_t)reach * ct, prompt_tokens, chunk_tokens),
                      hbm_tokens, chunk_tokens);
        regret = would > served ? would - served : 0;
    }
    sat_add(&g->regret, regret);
    value_evidence(g, regret);
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
            sat_add(&g->reasons[k].count, now - e->reason_seen[k]);
        e->reason_seen[k] = now;
    }
}

bool gates_tally_fold(gates_t *g, const gates_tally_t *t)
{
    gates_engine_t *e = engine_slot(g, t->engine_id);
    bool report = false;
    bool reset = t->probes_total < e->seen_probes || t->paid_total < e->seen_paid ||
                 (t->has_tokens && (t->served_tokens_total < e->seen_served ||
                                    t->lookup_tokens_total < e->seen_lookup));

    e->last_tick = ++g->tick;
    if (reset) {
        e->seen_paid = t->paid_total;
        e->seen_probes = t->probes_total;
    } else if (t->probes_total > e->seen_probes) {
        report =
            gates_fold_batch(g, t->paid_total - e->seen_paid, t->probes_total - e->seen_probes);
        e->seen_paid = t->paid_total;
        e->seen_probes = t->probes_total;
    }
    if (t->has_tokens) {
        if (!reset) {
            uint64_t served = t->served_tokens_total - e->seen_served;
            sat_add(&g->served, served);
            sat_add(&g->lookup_tokens, t->lookup_tokens_total - e->seen_lookup);
            value_evidence(g, served);
        }
        e->seen_served = t->served_tokens_total;
        e->seen_lookup = t->lookup_tokens_total;
        g->token_tallies += 1;
    }
    tally_reasons(g, e, t->reasons, t->nreasons, reset);
    return report;
}

bool gates_tally(gates_t *g, uint64_t engine_id, uint64_t paid_total, uint64_t probes_total,
                 const gates_reason_t *reasons, int nreasons)
{
    gates_tally_t t = {.engine_id = engine_id,
                       .paid_total = paid_total,
                       .probes_total = probes_total,
                       .reasons = reasons,
                       .nreasons = nreasons};

    return gates_tally_fold(g, &t);
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
    sat_add(&g->reuse_tokens, hbm_tokens < prompt_tokens ? hbm_tokens : prompt_tokens);
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
    st->policy = g->cfg.admission.policy;
    st->atom_share = admission_share(g);
    st->value_share = value_share(g);
    st->share = st->policy == GATES_POLICY_ATOM ? st->atom_share : st->value_share;
    st->save_share = decided == 0 ? 1.0 : (double)g->saved / (double)decided;
    st->atom_would_decline = g->atom_would_decline;
    st->value_would_decline = g->value_would_decline;
    st->density = value_density(g);
    st->served_tokens = g->served;
    st->regret_tokens = g->regret;
    st->written_tokens = g->written;
    st->declined_tokens = g->declined;
    st->offered_tokens = g->offered;
    st->lookup_tokens = g->lookup_tokens;
    st->estimated_served_tokens = g->est_served;
    st->token_tallies = g->token_tallies;
    st->orphans_declined = g->orphans_declined;
    st->reuse_tokens = g->reuse_tokens;
    st->net_tokens = (double)(g->token_tallies > 0 ? g->served : g->est_served) -
                     g->cfg.admission.cost_ratio * (double)g->written;
    ghost_stats(g->ghost, &st->ghost);
    st->lookups = g->lookups;
    st->skips = g->skips;
    st->forced_probes = g->forced_probes;
    st->would_skip = g->would_skip;
    st->act_ema = g->act_ema;
    st->load_bearing = lookup_load_bearing(g);
    st->nreasons = g->nreasons;
    memcpy(st->reasons, g->reasons, sizeof st->reasons);
}

size_t gates_export_bytes(const gates_t *g)
{
    return 8 + GATES_RUN1_LEN + GATES_RUN2_LEN +
           (g->ghost != NULL ? ghost_export_bytes(g->ghost) : 0);
}

void gates_export(const gates_t *g, void *buf)
{
    uint8_t *p = buf;
    uint64_t tag = GATES_LAYOUT_TAG;

    memcpy(p, &tag, 8);
    memcpy(p + 8, (const uint8_t *)g + GATES_RUN1_OFF, GATES_RUN1_LEN);
    memcpy(p + 8 + GATES_RUN1_LEN, (const uint8_t *)g + GATES_RUN2_OFF, GATES_RUN2_LEN);
    if (g->ghost != NULL)
        ghost_export(g->ghost, p + 8 + GATES_RUN1_LEN + GATES_RUN2_LEN);
}

int gates_import(gates_t *g, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    size_t fixed = 8 + GATES_RUN1_LEN + GATES_RUN2_LEN;
    uint64_t tag;
    int rc = 0;

    if (len < fixed)
        return -EBADMSG;
    memcpy(&tag, p, 8);
    if (tag != GATES_LAYOUT_TAG)
        return -EPROTO;
    if (g->ghost == NULL || ghost_import(g->ghost, p + fixed, len - fixed) != 0)
        rc = 1; /* the table (another ghost_entries, or none) starts empty */
    memcpy((uint8_t *)g + GATES_RUN1_OFF, p + 8, GATES_RUN1_LEN);
    memcpy((uint8_t *)g + GATES_RUN2_OFF, p + 8 + GATES_RUN1_LEN, GATES_RUN2_LEN);
    return rc;
}
