/*
 * gates.h - the save-admission and lookup-skip gates of one namespace (docs/GATES.md).
 *
 * Pure state machines: no I/O, no clock, no allocation after gates_new. The formulas are
 * evaluated exactly as GATES.md writes them, in IEEE-754 double, because tests compare exact
 * sequences. Every estimator always runs; `enabled` only decides whether a decision is enforced
 * (otherwise "shadow mode": would_decline / would_skip count what the gate would have done).
 *
 * Save admission has two policies (GATES.md sections 2 and 6): `atom`, the verdict-payoff gate
 * ported first, and `value`, which weighs tokens served against tokens written at the
 * namespace's cost ratio and sees what its own declines cost through a ghost table of declined
 * chunks (ghost.h). One of them decides (the configured policy, while the gate is enabled); the
 * other one decides in its shadow, so status always shows what each would do.
 *
 * Threads: loop thread only (the daemon keeps one gates_t per namespace).
 */
#ifndef KVT_GATES_H
#define KVT_GATES_H

#include <stdbool.h>
#include <stdint.h>

#include "ghost.h"
#include "kvt_proto.h" /* the tally's limits: a namespace counts the reasons a tally can carry */

#define GATES_REASON_MAX KVT_REASON_MAX           /* reason names a namespace counts */
#define GATES_REASON_NAME_MAX KVT_REASON_NAME_MAX /* bytes of a reason name */
#define GATES_ENGINE_MAX 256 /* engine instances remembered per namespace (LRU beyond) */

/* The admission policies; the values are the wire's KVT_POLICY_* (TALLY_OK, protocol 2). */
typedef enum {
    GATES_POLICY_ATOM = KVT_POLICY_ATOM,   /* verdict payoff against a target (GATES.md 2) */
    GATES_POLICY_VALUE = KVT_POLICY_VALUE, /* tokens served per token written (GATES.md 6) */
} gates_policy_t;

/* The words of gates.admission.policy, indexed by gates_policy_t, NULL-terminated. */
extern const char *const gates_policy_words[];

/* The settings of the gates (docs/GATES.md names them). Their defaults and ranges are the
 * "gates.*" rows of config.c, the one table of the configuration (config_gates_defaults()). */
typedef struct {
    bool enabled;               /* the gate declines operations (else shadow mode) */
    double target;              /* atom: payoff at which every operation is admitted */
    double floor;               /* atom: the least share of operations admitted */
    double alpha;               /* atom: weight of one verdict in the payoff average */
    uint64_t warmup;            /* atom: verdicts folded before the gate decides */
    uint64_t report_every;      /* verdicts (atom) and decisions (value) between two log lines */
    gates_policy_t policy;      /* the policy that decides while enabled */
    double cost_ratio;          /* value: cost of writing a token over recomputing it */
    double value_floor;         /* value: the least share of operations admitted */
    uint64_t window_tokens;     /* value: offered tokens over which evidence fades by 1/e */
    uint64_t learn_tokens;      /* value: offered tokens without evidence until density = cost */
    uint64_t reuse_wait_tokens; /* value: offered tokens after which the window starts without
                                   reuse when lookups showed none (0: waits for reuse) */
    uint64_t ghost_entries;     /* value: fingerprints of declined chunks remembered (ghost.h) */
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
 * enabled by the reload enforces at once, past its warmup; a policy named by the reload decides
 * at once with the state its shadow kept). cfg is copied, except admission.learn_tokens and
 * admission.ghost_entries, which sized the value window's prior and the ghost table when the
 * gate was made: those stay as they were (they apply to namespaces made after a restart). */
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

/* One tally with its optional token totals (protocol 2 TALLY, flag TOKENS). */
typedef struct {
    uint64_t engine_id;
    uint64_t paid_total, probes_total;
    bool has_tokens;              /* the two token totals below are meaningful */
    uint64_t served_tokens_total; /* tokens loaded and used on paid verdicts, cumulative */
    uint64_t lookup_tokens_total; /* prompt tokens of the requests that got a verdict */
    const gates_reason_t *reasons;
    int nreasons;
} gates_tally_t;

/* gates_tally with token totals: the verdict totals and reasons fold exactly as gates_tally
 * folds them; the token totals fold the same way (their differences; a decrease of either
 * re-baselines the engine, verdict totals included), the served difference into the value
 * window. An engine's first token totals fold whole. Returns true when the admission line is
 * due. */
bool gates_tally_fold(gates_t *g, const gates_tally_t *t);

/* Decides one save operation without token information: true = admit. Both policies decide
 * (GATES.md 2 and 6); the configured one is enforced while the gate is enabled, the other one
 * (and both while disabled) counts its would-be declines on a shadow credit of its own. Updates
 * saved/skipped and would_decline (the configured policy's shadow declines while disabled;
 * atom's only past its warmup, as GATES.md 2 says). Nothing is added to the token figures. */
bool gates_admit(gates_t *g);

/* A save operation as the daemon presents it to the gate: the chunks of its first request,
 * status[i] == KVT_CHUNK_WANTED marking the chunks it would write (others exist already). */
typedef struct {
    const kvt_wire_hash_t *hashes; /* n, borrowed; may be unaligned */
    const uint8_t *status;         /* n, borrowed */
    size_t n;
    const kvt_wire_hash_t *parent; /* the declared predecessor of hashes[0], or NULL */
    uint32_t chunk_tokens;
} gates_op_t;

/*
 * Decides one save operation whose chunks hold at least one WANTED chunk (GATES.md 6): as
 * gates_admit, except that the value policy declines, without spending credit, an operation
 * whose first chunk is WANTED and whose parent is in the ghost table (an orphan: stored, its
 * chunks could not be hit before their declined predecessor is saved again); then the token
 * accounting of the value policy. The wanted chunks' tokens
 * count as written (admitted) or declined; the ones not in the ghost table are the operation's
 * new offer, which ages the value window and enters its denominator; a declined operation's
 * wanted chunks enter the ghost table, an admitted one's leave it. Returns true = admit.
 */
bool gates_admit_op(gates_t *g, const gates_op_t *op);

/* Whether a value report line is due: the decisions (saved + skipped) stand at a multiple of
 * admission.report_every. */
bool gates_value_report_due(const gates_t *g);

/* Whether a chunk is stored (in any tier) for the lookup being valued: the store answers it
 * (requests.c), synchronously, on the loop thread. */
typedef bool (*gates_stored_fn)(void *arg, const kvt_wire_hash_t *h);

/*
 * The value evidence of one answered lookup with prompt info (GATES.md 6). hashes[0..n) are the
 * lookup's chunks and hit_chunks the tier's prefix hit. The reach is how far the prefix would
 * have gone had the declined saves been admitted: when hashes[hit] is in the ghost table, on
 * through every chunk that is ghosted or stored (stored(arg, h)). The tokens a load would take
 * by the verdict rule of GATES.md 1 (min_load_tokens of the lookup-skip settings) at the hit are
 * the lookup's served estimate and what the reach adds is regret. The served estimate feeds the
 * value window only while the namespace has had no token tally. The lookup's reused prefix (the
 * larger of the hit and hbm_tokens) counts towards the reuse that starts the value window (GATES.md
 * 6).
 */
void gates_lookup_value(gates_t *g, const kvt_wire_hash_t *hashes, size_t n, uint32_t hit_chunks,
                        uint64_t prompt_tokens, uint64_t hbm_tokens, uint32_t chunk_tokens,
                        gates_stored_fn stored, void *arg);

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

/* credit is the enforcing atom gate's credit (0 while disabled); share is the configured
 * policy's share now, enabled or not; atom_share and value_share are each policy's; save_share
 * is 1.0 before any decision. */
typedef struct {
    /* admission */
    uint64_t probes, paid, saved, skipped, would_decline;
    double payoff, credit, share, save_share;
    /* policies: each one's share and the declines it would have made while not deciding */
    gates_policy_t policy;
    double atom_share, value_share;
    uint64_t atom_would_decline, value_would_decline;
    /* value evidence, in tokens */
    double density;    /* the value window: (served + regret) per offered token */
    double net_tokens; /* served - cost_ratio x written */
    uint64_t served_tokens, regret_tokens, written_tokens, declined_tokens, offered_tokens;
    uint64_t lookup_tokens, estimated_served_tokens, token_tallies;
    uint64_t orphans_declined; /* operations declined because their parent was declined */
    uint64_t reuse_tokens;     /* reused prompt tokens lookups showed (in HBM or the tier) */
    ghost_stats_t ghost;
    /* lookup skip */
    uint64_t lookups, skips, forced_probes, would_skip;
    double act_ema;
    bool load_bearing;
    int nreasons;
    gates_reason_t reasons[GATES_REASON_MAX];
} gates_state_t;

void gates_state(const gates_t *g, gates_state_t *st);

/* The learned state (the estimators, counters, shadows, tally baselines and the ghost table;
 * not the settings) as bytes, for a clean restart (state.h). gates_export writes
 * gates_export_bytes(g) bytes in the host layout of this build; gates_import restores them into
 * g when they carry this build's layout tag (another build's: -EPROTO) and, for the ghost table,
 * g's capacity (else the table starts empty and the rest is restored: returns 1). 0, 1, or
 * -EPROTO / -EBADMSG (g unchanged). */
size_t gates_export_bytes(const gates_t *g);
void gates_export(const gates_t *g, void *buf);
int gates_import(gates_t *g, const void *buf, size_t len);

#endif /* KVT_GATES_H */
