/*
 * gates.h - the save-admission and lookup-skip gates of one namespace (docs/GATES.md).
 *
 * Pure state machines: no I/O, no clock, no allocation after gates_new. The formulas are
 * evaluated exactly as GATES.md writes them, in IEEE-754 double, because tests compare exact
 * sequences. Both estimators always run; `enabled` only decides whether a decision is enforced
 * (otherwise "shadow mode": would_decline / would_skip count what the gate would have done).
 *
 * Threads: loop thread only (the daemon keeps one gates_t per namespace).
 */
#ifndef KVT_GATES_H
#define KVT_GATES_H

#include <stdbool.h>
#include <stdint.h>

#include "kvt_proto.h" /* the tally's limits: a namespace counts the reasons a tally can carry */

#define GATES_REASON_MAX KVT_REASON_MAX           /* reason names a namespace counts */
#define GATES_REASON_NAME_MAX KVT_REASON_NAME_MAX /* bytes of a reason name */
#define GATES_ENGINE_MAX 256 /* engine instances remembered per namespace (LRU beyond) */

/* The settings of the gates (docs/GATES.md names them). Their defaults and ranges are the
 * "gates.*" rows of config.c, the one table of the configuration (config_gates_defaults()). */
typedef struct {
    bool enabled;          /* the gate declines operations (else shadow mode) */
    double target;         /* payoff at which every operation is admitted */
    double floor;          /* the least share of operations admitted */
    double alpha;          /* weight of one verdict in the payoff average */
    uint64_t warmup;       /* verdicts folded before the gate decides */
    uint64_t report_every; /* verdicts between two "admission" log lines */
} gates_admission_cfg_t;

typedef struct {
    bool enabled;             /* the gate skips lookups (else shadow mode) */
    uint64_t min_load_tokens; /* a load shorter than this cannot pay off */
    double cut;               /* actionable rate above which the tier is load-bearing */
    uint64_t min_lookups;     /* lookups observed before load-bearing is judged */
    uint64_t probe_every;     /* one skippable lookup in this many is answered */
    double alpha;             /* weight of one lookup in the actionable-rate average */
    uint64_t report_every;    /* lookups between two "lookup_skip" log lines */
} gates_skip_cfg_t;

typedef struct {
    gates_admission_cfg_t admission;
    gates_skip_cfg_t lookup_skip;
} gates_cfg_t;

typedef struct {
    char name[GATES_REASON_NAME_MAX + 1];
    uint64_t count;
} gates_reason_t;

typedef struct gates gates_t;

/* Creates the gate state of one namespace with a copy of cfg. Returns NULL on allocation
 * failure. cfg is borrowed (validated by config.c); report_every or probe_every 0 acts as 1. */
gates_t *gates_new(const gates_cfg_t *cfg);
void gates_destroy(gates_t **g);
const gates_cfg_t *gates_cfg(const gates_t *g);

/* Replaces the settings (a configuration reload): the estimators, credits, counters and tallies
 * keep their state, and the next event is folded and decided with the new settings (a gate
 * enabled by the reload enforces at once, past its warmup). cfg is copied. */
void gates_set_cfg(gates_t *g, const gates_cfg_t *cfg);

/* --- admission estimator --- */

/* Folds one verdict (paid or not). */
void gates_fold_one(gates_t *g, bool paid);
/* Folds a batch of n verdicts of which h paid (h is clamped to n); n == 0 does nothing. Returns
 * true when probes crossed a multiple of report_every (the caller logs the admission line). */
bool gates_fold_batch(gates_t *g, uint64_t h, uint64_t n);

/* Applies an engine instance's cumulative totals per GATES.md section 1 (fold the difference,
 * re-baseline on a counter reset). reasons (nreasons entries, may be NULL) are cumulative per
 * reason for this engine; the namespace's reason totals are the sums over engines. Returns true
 * when the admission line is due.
 * - First sighting of an engine (or again after it was dropped from the table of
 *   GATES_ENGINE_MAX, least recently seen first): its seen totals start at (0, 0), so its first
 *   totals fold entirely ((2, 10) folds batch(2, 10)); likewise its reason counts.
 * - Totals with probes unchanged fold nothing and do not move the baseline.
 * - On a re-baseline (probes or paid went down) the engine's reason baselines are reset to the
 *   counts of this message (absent reasons to 0) and nothing is added; otherwise a reason whose
 *   count went down re-baselines alone.
 * - Reason names beyond GATES_REASON_MAX distinct names, and empty names, are ignored. */
bool gates_tally(gates_t *g, uint64_t engine_id, uint64_t paid_total, uint64_t probes_total,
                 const gates_reason_t *reasons, int nreasons);

/* Decides one save operation: true = admit. Updates credit, saved/skipped and, while the gate
 * is disabled and past warmup, would_decline (computed as if enabled, with a shadow credit). */
bool gates_admit(gates_t *g);

/* --- lookup skip --- */

typedef enum {
    GATES_LOOKUP_ANSWER = 0, /* answer normally */
    GATES_LOOKUP_SKIP = 1,   /* answer hit 0 with the skipped flag, no leases */
} gates_lookup_decision_t;

/* Called before a lookup that carries prompt info is answered. On SKIP the gate has already
 * recorded the skip's non-paid verdict into the admission estimator (gates_fold_one). A forced
 * probe is counted in forced_probes and answered. While disabled, a lookup the enabled gate
 * would have skipped (skippable, not load-bearing, not a forced probe of a separate shadow skip
 * counter) is counted in would_skip and answered. */
gates_lookup_decision_t gates_lookup_decide(gates_t *g, uint64_t prompt_tokens,
                                            uint64_t hbm_tokens);

/* Feeds the actionable-rate estimator with a lookup that was answered (skip or not enabled):
 * loadable_hit_tokens is the loadable hit in tokens as GATES.md defines it. Returns true when
 * lookups reached a multiple of lookup_skip.report_every (the caller logs the skip line). */
bool gates_lookup_observe(gates_t *g, uint64_t loadable_hit_tokens, uint64_t hbm_tokens);

/* Whether probes stands at a multiple of admission.report_every (after a skip's verdict: the
 * caller logs the admission line). */
bool gates_admission_report_due(const gates_t *g);

/* The loadable hit of GATES.md: hit_tokens, minus 1 if it covers the whole prompt, floored to a
 * multiple of chunk_tokens. A hit of 0 gives 0; chunk_tokens 0 means no flooring. */
uint64_t gates_loadable(uint64_t hit_tokens, uint64_t prompt_tokens, uint64_t chunk_tokens);

/* --- state for status and replies --- */

/* credit is the enforcing gate's credit (0 while disabled); share is the share computed from the
 * current payoff, enabled or not; save_share is 1.0 before any decision. */
typedef struct {
    /* admission */
    uint64_t probes, paid, saved, skipped, would_decline;
    double payoff, credit, share, save_share;
    /* lookup skip */
    uint64_t lookups, skips, forced_probes, would_skip;
    double act_ema;
    bool load_bearing;
    int nreasons;
    gates_reason_t reasons[GATES_REASON_MAX];
} gates_state_t;

void gates_state(const gates_t *g, gates_state_t *st);

#endif /* KVT_GATES_H */
