/*
 * kvtier.h - client library of the kvtier daemon (libkvtier). The only installed header.
 *
 * An engine rank opens one kvt_client_t per (endpoint, namespace, rank) and calls lookup, save,
 * load and tally on it. Calls are synchronous request/reply over a ZeroMQ DEALER socket with a
 * per-call timeout: a call never hangs longer than the timeout given at connect. A client is
 * not thread-safe: use it from one thread at a time (one client per rank thread is the model).
 *
 * Every call returns 0 or a negative KVT_E* code; kvt_strerror() names it. Outputs go through
 * out-parameters and are valid only when the call returned 0. Borrowed inputs are const and are
 * not retained after the call returns.
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVT_API __attribute__((visibility("default")))
#else
#define KVT_API
#endif

/* The version of libkvtier and kvtierd: written only here (CMakeLists.txt reads it). */
#define KVT_VERSION_MAJOR 0
#define KVT_VERSION_MINOR 1
#define KVT_VERSION_PATCH 0

/* Error codes. -1..-99 are the daemon's wire codes, -100 and below are local to the client. */
enum {
    KVT_OK = 0,
    KVT_EPROTO = -1,      /* malformed message (either side) */
    KVT_EVERSION = -2,    /* protocol version mismatch */
    KVT_ENONS = -3,       /* namespace unknown or not declared */
    KVT_ETOOBIG = -4,     /* payload or list larger than the daemon accepts */
    KVT_EINVAL = -5,      /* invalid argument */
    KVT_ECONFLICT = -6,   /* namespace already declared with another world size / replication */
    KVT_EBUSY = -7,       /* daemon busy or shutting down */
    KVT_EUNSUPP = -8,     /* request type not supported by the daemon */
    KVT_ETIMEDOUT = -100, /* no reply within the timeout */
    KVT_ENOMEM = -101,    /* allocation failed */
    KVT_ECONNECT = -102,  /* could not create or connect the socket */
    KVT_EBUFSIZE = -103,  /* a load buffer is too small for the stored chunk */
    KVT_ESYS = -104,      /* a system call failed (see errno) */
};

/* A 16-byte chunk hash. */
typedef struct {
    uint8_t b[16];
} kvt_hash_t;

/* Describes a namespace: one KV layout of one model. Chunks of different namespaces never
 * meet. All fields but model feed the layout fingerprint; two clients share chunks only if every
 * field is equal. Unused numeric fields may be 0 and unused strings NULL. */
typedef struct {
    const char *model;     /* required, 1..255 bytes, e.g. "Llama-3.1-8B" */
    const char *dtype;     /* e.g. "bf16" */
    uint32_t chunk_tokens; /* tokens per chunk, required (> 0) */
    uint32_t num_layers;
    uint32_t num_kv_heads;
    uint32_t head_dim;
    uint32_t world_size; /* tensor-parallel ranks, required (1..1024) */
    int mla;             /* non-zero: replicated namespace, one copy serves all ranks */
    uint64_t hash_seed;
    const char *tenant; /* optional salt isolating tenants */
} kvt_ns_desc_t;

typedef struct kvt_client kvt_client_t;

/* How chunk bytes travel. AUTO: through the daemon's shared-memory arena when the endpoint is
 * ipc:// (same host) and the arena file can be mapped, else in ZeroMQ frames. */
enum {
    KVT_DATA_PATH_AUTO = 0,
    KVT_DATA_PATH_FRAMES = 1, /* always bytes in frames */
    KVT_DATA_PATH_SHM = 2,    /* require the shared arena: connect fails if it cannot be mapped */
};

typedef struct {
    int timeout_ms; /* per-request timeout; 0 means the default, 5000 */
    int data_path;  /* KVT_DATA_PATH_*; 0 = AUTO */
} kvt_connect_opts_t;

/* Connects to endpoint ("ipc://path" or "tcp://127.0.0.1:port") and declares the namespace for
 * rank (< ns->world_size). opts may be NULL. On success *out is owned by the caller and must be
 * closed with kvt_close(). */
KVT_API int kvt_connect(const char *endpoint, const kvt_ns_desc_t *ns, uint32_t rank,
                        const kvt_connect_opts_t *opts, kvt_client_t **out);

/* The data path in use: KVT_DATA_PATH_SHM or KVT_DATA_PATH_FRAMES. */
KVT_API int kvt_data_path(const kvt_client_t *c);

/* Closes the client and sets *c to NULL. NULL and *c == NULL are accepted. */
KVT_API void kvt_close(kvt_client_t **c);

/* The layout fingerprint this descriptor declares (xxh3-64 of its canonical encoding). */
KVT_API uint64_t kvt_ns_fingerprint(const kvt_ns_desc_t *ns);

/* Limits the daemon announced at connect. */
typedef struct {
    uint32_t lease_ms;
    uint64_t max_chunk_bytes;
    uint32_t max_chunks; /* most hashes per call */
    uint32_t daemon_version;
} kvt_server_info_t;
KVT_API int kvt_server_info(const kvt_client_t *c, kvt_server_info_t *info);

/* Lookup options; NULL means: this client's rank, no lease, no prompt info. */
typedef struct {
    int all_ranks;  /* answer for every rank of the namespace (min in .hit) */
    int lease;      /* pin the hits so that a following load cannot miss them */
    int has_prompt; /* prompt_tokens / hbm_tokens are set (lookup-skip gate) */
    uint64_t prompt_tokens;
    uint64_t hbm_tokens;
} kvt_lookup_opts_t;

typedef struct {
    uint32_t hit; /* contiguous prefix hit in chunks */
    int skipped;  /* the lookup-skip gate answered without looking (hit is 0) */
    int leased;   /* the hits are pinned for lease_ms */
    uint32_t lease_ms;
    uint32_t nranks;     /* entries filled in rank_hits (all_ranks only) */
    uint32_t *rank_hits; /* caller's array of rank_hits_cap entries, or NULL */
    uint32_t rank_hits_cap;
} kvt_lookup_result_t;

/* Looks up the chained hashes (n >= 1). res->rank_hits/rank_hits_cap are inputs. */
KVT_API int kvt_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                       const kvt_lookup_opts_t *opts, kvt_lookup_result_t *res);

/* Per-chunk save outcomes. */
typedef enum {
    KVT_SAVE_STORED = 1,
    KVT_SAVE_EXISTS = 2,
    KVT_SAVE_NOSPACE = 3,
    KVT_SAVE_DECLINED = 4,
} kvt_save_outcome_t;

typedef struct {
    const kvt_hash_t *parent; /* hash of the chunk before hashes[0], or NULL at chunk 0 */
    int has_op_id;
    uint64_t op_id; /* identifies one save operation across ranks (admission gate) */
} kvt_save_opts_t;

/* Saves n chunks forming a chain (hashes[i] follows hashes[i-1]). bufs[i] holds lens[i] bytes
 * (lens[i] > 0). Asks the daemon first and sends only the chunks it wants. outcomes (n entries,
 * may be NULL) receives kvt_save_outcome_t per chunk. opts may be NULL. */
KVT_API int kvt_save(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const void *const *bufs,
                     const size_t *lens, const kvt_save_opts_t *opts, uint8_t *outcomes);

/* Loads n chunks into bufs[i] (caps[i] bytes each). lens[i] receives the stored size, or 0 on a
 * miss. *nhit receives the contiguous prefix of chunks loaded. Returns KVT_EBUFSIZE if a stored
 * chunk does not fit its buffer (nothing is written for that chunk and its lens[i] says the size
 * needed). */
KVT_API int kvt_load(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, void *const *bufs,
                     const size_t *caps, size_t *lens, size_t *nhit);

/* Gate state answered to a tally. The fields after load_bearing are the admission gate's value
 * evidence, answered by a protocol 2 daemon (0 otherwise). */
typedef struct {
    double payoff;
    double share;
    double act_ema;
    uint64_t probes;
    uint64_t lookups;
    int admission_enabled;
    int skip_enabled;
    int load_bearing;
    int policy;               /* KVT_ADMISSION_ATOM or KVT_ADMISSION_VALUE */
    double density;           /* tokens served (and regretted) per token offered */
    uint64_t served_tokens;   /* tokens the engines loaded from the tier (token tallies) */
    uint64_t regret_tokens;   /* tokens declined saves would have served */
    uint64_t written_tokens;  /* tokens of admitted save operations */
    uint64_t declined_tokens; /* tokens of declined save operations */
} kvt_gate_state_t;

#define KVT_ADMISSION_ATOM 0  /* kvt_gate_state_t.policy: the verdict-payoff gate */
#define KVT_ADMISSION_VALUE 1 /* tokens served per token written, at the daemon's cost ratio */

typedef struct {
    const char *name;
    uint64_t count;
} kvt_reason_t;

/* Pushes an engine instance's cumulative verdict totals; state (may be NULL) receives the
 * namespace's gate state after the fold. reasons may be NULL when nreasons is 0. */
KVT_API int kvt_tally(kvt_client_t *c, uint64_t engine_id, uint64_t paid_total,
                      uint64_t probes_total, const kvt_reason_t *reasons, size_t nreasons,
                      kvt_gate_state_t *state);

/* An engine instance's cumulative token totals, since it started (docs/GATES.md section 6). */
typedef struct {
    uint64_t served_tokens_total; /* tokens loaded from the tier and used, on paid verdicts */
    uint64_t lookup_tokens_total; /* prompt tokens of the requests that got a verdict */
} kvt_tally_tokens_t;

/* kvt_tally with the token totals too (tokens may be NULL: then exactly kvt_tally). */
KVT_API int kvt_tally2(kvt_client_t *c, uint64_t engine_id, uint64_t paid_total,
                       uint64_t probes_total, const kvt_tally_tokens_t *tokens,
                       const kvt_reason_t *reasons, size_t nreasons, kvt_gate_state_t *state);

/* The message the daemon sent with the last error reply on this client, or "". */
KVT_API const char *kvt_last_error(const kvt_client_t *c);

/* A static description of an error code. */
KVT_API const char *kvt_strerror(int err);

/* Chained chunk hashes: out[i] = xxh3-128(seed = 0) over prev (16 bytes: out[i-1], or *parent,
 * or 16 zero bytes for the first chunk of a prompt) followed by the little-endian u32 token ids
 * of chunk i. Only whole chunks are hashed: returns the number of hashes written,
 * min(ntokens / chunk_tokens, out_cap). */
KVT_API size_t kvt_hash_chain(const uint32_t *tokens, size_t ntokens, uint32_t chunk_tokens,
                              const kvt_hash_t *parent, kvt_hash_t *out, size_t out_cap);

/* Parses 32 hex digits into h; returns 0 or KVT_EINVAL. Formats h as 32 lowercase hex digits
 * plus NUL into buf (33 bytes). */
KVT_API int kvt_hash_parse(const char *hex, kvt_hash_t *h);
KVT_API void kvt_hash_format(const kvt_hash_t *h, char buf[33]);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_H */
