/*
 * kvtier.h - client library of the kvtier daemon (libkvtier). The only installed header.
 *
 * An engine rank opens one kvt_client_t per (endpoint, namespace, rank). Every request (lookup,
 * save, load, tally, and the zero-copy reserve, commit and pin) can be submitted asynchronously:
 * the submit returns a handle at once, many requests are in flight per client, and completions
 * are taken from a queue whose file descriptor (kvt_fd) is readable while a completion waits.
 * The synchronous calls (kvt_lookup, kvt_save, kvt_load, kvt_tally) are thin wrappers: submit,
 * then wait for that request; on an idle client (nothing in flight) a synchronous call runs the
 * request's I/O and copies on the calling thread itself, saving two thread hand-offs.
 *
 * Each client owns one I/O thread, started by kvt_connect and ended by kvt_shutdown/kvt_close.
 * It owns the ZeroMQ DEALER socket, sends the requests, matches the replies, enforces the
 * per-request timeouts, and does (or shares with the copy helpers below) every copy of payload
 * bytes (caller buffer to arena, arena or reply frame to caller buffer, with checksum
 * verification fused into the copy). A submit never
 * copies payload bytes and never waits for the daemon: it validates its arguments, copies the
 * small arrays it is given (hashes, buffer pointers, lengths) and queues the request. At most
 * the daemon's in-flight window (HELLO_OK max_in_flight; kvt_server_info) is on the wire at
 * once: further requests wait in the library, in submission order.
 *
 * Copy helpers (0.2.1, shared-memory path): KVTIER_COPY_THREADS in the environment at
 * kvt_connect, 0..16, default 1, threads that copy the chunks of requests in flight beside the
 * I/O thread, which copies too (one thread copying reaches about one memcpy; memory bandwidth
 * grows with the threads copying). 0 leaves every copy to the I/O thread. Saves still reach the
 * daemon in the order their reservations were answered, whatever order their copies end in.
 *
 * Threads:
 *   - kvt_connect and kvt_close: one thread, with no other call on the same client running or
 *     following (kvt_shutdown first, to complete and wake everything).
 *   - every kvt_submit_*, kvt_poll, kvt_next_completion, kvt_fd, kvt_completion_free,
 *     kvt_pin_verify, kvt_stats, kvt_arena, kvt_server_info, kvt_data_path, kvt_shutdown and the
 *     synchronous calls may run on any thread, concurrently: a scheduler thread submitting while
 *     a worker thread polls is the intended pattern. Each completion is delivered exactly once,
 *     to whichever thread takes it; completions of synchronous calls are never delivered to the
 *     queue (the calling thread receives them).
 *   - a completion taken belongs to the thread that took it until it is freed (or handed to
 *     kvt_submit_commit); the library does not touch it meanwhile.
 *   - fork() (0.2.13): a client belongs to the process that connected it. In a forked child
 *     (which has none of its threads and shares its sockets with the parent) every call on it
 *     fails KVT_ECLOSED at once, kvt_last_error naming the fork, kvt_next_completion gives
 *     nothing, kvt_fd is -1, and kvt_completion_free, kvt_shutdown and kvt_close release
 *     nothing (the parent's client is untouched) and return; the child connects its own.
 *
 * The link (0.2.12): the client watches its connection to the daemon (ZeroMQ's socket monitor)
 * and sends ZMTP heartbeats (a PING a second; a daemon whose process answers nothing for 3 s,
 * stopped or frozen, counts as gone). When the connection drops (the daemon died, was killed,
 * restarts), the requests on the wire cannot be answered any more and complete KVT_EUNAVAIL at
 * once; a request that finds the connection down waits the down wait (kvt_set_down_wait,
 * default 100 ms) from when it is submitted or the connection dropped, whichever is later, for the
 * daemon to be back (the client reconnects every 20 ms), and otherwise completes KVT_EUNAVAIL.
 * So during an outage every call fails within the down wait instead of waiting its whole
 * timeout, which would hold an engine's scheduler or its prefetch thread for seconds per call;
 * once the daemon is back the first request is answered ENONS and the client recovers its
 * session transparently, as after any restart. A request failed KVT_EUNAVAIL may have reached the
 * daemon (as one that timed out may have): a save may be stored, a pin or reservation is held
 * until its hold deadline. kvt_link says whether the link is down, as the client last saw it (an
 * idle client reads what happened meanwhile within a second). Releases (pins freed, copied
 * loads) wait while the link is down and go out when it is back. A daemon that never
 * answered (kvt_connect to a daemon not started) is not "down": its requests time out.
 *
 * Errors: every call returns 0 (or a count) or a negative KVT_E* code; kvt_strerror() names it.
 * Outputs go through out-parameters and are valid only when the call returned 0. A completion's
 * status is 0 or a negative KVT_E* code for the request as a whole; per-chunk outcomes say the
 * rest.
 *
 * Versions and ABI: 0.x releases carry major.minor in the SONAME (libkvtier.so.0.2): every 0.x
 * minor may change the ABI (0.2 grew kvt_ns_desc_t, kvt_connect_opts_t, kvt_server_info_t and
 * kvt_gate_state_t), so a program built against 0.1 never loads 0.2 by accident. From 1.0 on the
 * SONAME will carry the major only and structs will only grow at their end.
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
#define KVT_VERSION_MINOR 2
#define KVT_VERSION_PATCH 14

/* Error codes. -1..-99 are the daemon's wire codes, -100 and below are local to the client. */
enum {
    KVT_OK = 0,
    KVT_EPROTO = -1,      /* malformed message (either side) */
    KVT_EVERSION = -2,    /* protocol version mismatch (e.g. a protocol 1 daemon) */
    KVT_ENONS = -3,       /* namespace unknown or not declared (after one transparent retry) */
    KVT_ETOOBIG = -4,     /* payload or list larger than the daemon accepts */
    KVT_EINVAL = -5,      /* invalid argument */
    KVT_ECONFLICT = -6,   /* namespace already declared with another world size / replication */
    KVT_EBUSY = -7,       /* daemon busy, over a bound, or shutting down */
    KVT_EUNSUPP = -8,     /* not supported by the daemon or by this client's data path */
    KVT_ESTALE = -9,      /* arena generation changed twice during one request */
    KVT_ETIMEDOUT = -100, /* no reply within the request's timeout */
    KVT_ENOMEM = -101,    /* allocation failed */
    KVT_ECONNECT = -102,  /* could not create or connect the socket */
    KVT_EBUFSIZE = -103,  /* a load buffer is too small for the stored chunk */
    KVT_ESYS = -104,      /* a system call failed (see errno) */
    KVT_ECLOSED = -105,   /* the client was shut down before the request completed */
    KVT_EUNAVAIL = -106,  /* the daemon's connection is down (0.2.12: "The link" above) */
};

/* A 16-byte chunk hash. */
typedef struct {
    uint8_t b[16];
} kvt_hash_t;

/* Describes a namespace: one KV layout of one model at one revision. Chunks of different
 * namespaces never meet. All fields but model feed the layout fingerprint; two clients share
 * chunks only if every field is equal. Unused numeric fields may be 0 and unused strings NULL. */
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
    const char *tenant; /* optional salt isolating tenants' keys (not their bytes: see README) */
    /* 0.2: the model's weights revision (e.g. a commit hash), 0..255 bytes, NULL or "" for none.
     * Weights change the KV: chunks saved under one revision never serve another. Sent in HELLO
     * and folded into the fingerprint (an empty revision leaves the 0.1 fingerprint unchanged). */
    const char *revision;
} kvt_ns_desc_t;

typedef struct kvt_client kvt_client_t;

/* How chunk bytes travel. AUTO: through the daemon's shared-memory arena when the endpoint is
 * ipc:// (same host) and the arena file can be mapped, else in ZeroMQ frames. */
enum {
    KVT_DATA_PATH_AUTO = 0,
    KVT_DATA_PATH_FRAMES = 1, /* always bytes in frames */
    KVT_DATA_PATH_SHM = 2,    /* require the shared arena: connect fails if it cannot be mapped */
};

/* Checksum verification of loaded chunks (PROTOCOL.md, protocol 2 LOAD_OK checksums). Nothing is
 * verified while the daemon does not answer the CHECKSUMS feature (its checksums are 0 then). */
enum {
    KVT_VERIFY_DEFAULT = 0, /* copying loads verify (fused with the copy); pins do not */
    KVT_VERIFY_ALL = 1,     /* pins are verified too, by the I/O thread, before delivery */
    KVT_VERIFY_NONE = 2,    /* nothing is verified (kvt_pin_verify still works) */
};

typedef struct {
    int timeout_ms; /* default per-request timeout; 0 means 5000 */
    int data_path;  /* KVT_DATA_PATH_*; 0 = AUTO */
    /* 0.2 */
    uint32_t max_in_flight; /* 0: the daemon's window; else at most this many on the wire */
    int verify;             /* KVT_VERIFY_*; 0 = DEFAULT */
} kvt_connect_opts_t;

/* Connects to endpoint ("ipc://path" or "tcp://127.0.0.1:port"), starts the client's I/O thread
 * and declares the namespace for rank (< ns->world_size), waiting for the daemon's answer (the
 * timeout of opts). opts may be NULL. On success *out is owned by the caller and must be closed
 * with kvt_close(). A daemon that speaks only protocol 1 fails with KVT_EVERSION; the message
 * (kvt_last_error(NULL) on the calling thread) says so. */
KVT_API int kvt_connect(const char *endpoint, const kvt_ns_desc_t *ns, uint32_t rank,
                        const kvt_connect_opts_t *opts, kvt_client_t **out);

/* The data path in use: KVT_DATA_PATH_SHM or KVT_DATA_PATH_FRAMES. */
KVT_API int kvt_data_path(const kvt_client_t *c);

/* Completes every request not yet completed with KVT_ECLOSED (delivered like any completion),
 * stops the I/O thread and returns once the library no longer touches any caller buffer. Later
 * submits fail with KVT_ECLOSED; completions already queued can still be taken. Idempotent. */
KVT_API void kvt_shutdown(kvt_client_t *c);

/* kvt_shutdown, then frees the client and everything it allocated, including completions not
 * yet taken or not yet freed (pointers into them and into the arena become invalid), and sets
 * *c to NULL. NULL and *c == NULL are accepted. */
KVT_API void kvt_close(kvt_client_t **c);

/* The layout fingerprint this descriptor declares (xxh3-64 of its canonical encoding). */
KVT_API uint64_t kvt_ns_fingerprint(const kvt_ns_desc_t *ns);

/* What the daemon announced at connect (or at the last transparent re-HELLO). */
typedef struct {
    uint32_t lease_ms;
    uint64_t max_chunk_bytes;
    uint32_t max_chunks; /* most hashes per request */
    uint32_t daemon_version;
    /* 0.2 */
    uint64_t features;      /* protocol 2 feature bits the daemon answered (KVT_FEATURE_*) */
    uint32_t max_in_flight; /* the window this client keeps (the daemon's, capped by opts) */
    uint32_t arena_gen;     /* generation of the mapped arena (0: frames path) */
} kvt_server_info_t;
#define KVT_FEATURE_CHECKSUMS 0x1ull /* LOAD_OK checksums are real: loads can be verified */
#define KVT_FEATURE_TOKENS 0x2ull    /* the gates fold tally token totals */
#define KVT_FEATURE_ARENA_GEN 0x4ull /* shared-memory requests are checked for the generation */
#define KVT_FEATURE_CLIENT_CSUMS                                                                   \
    0x8ull /* 0.2.1: a copying shm save sends the checksums it computed                            \
              while copying; the daemon does not hash the chunks */
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
    uint32_t *rank_hits; /* kvt_lookup: caller's array of rank_hits_cap entries, or NULL; in a
                            completion: the library's array of nranks entries */
    uint32_t rank_hits_cap;
    int lease_capped; /* 0.2: a lease was asked but a lease bound refused it (hits answered) */
} kvt_lookup_result_t;

/* Looks up the chained hashes (n >= 1). res->rank_hits/rank_hits_cap are inputs. */
KVT_API int kvt_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                       const kvt_lookup_opts_t *opts, kvt_lookup_result_t *res);

/* Per-chunk save outcomes (and reserve outcomes: RESERVED, EXISTS, NOSPACE, DECLINED). */
typedef enum {
    KVT_SAVE_STORED = 1,
    KVT_SAVE_EXISTS = 2,
    KVT_SAVE_NOSPACE = 3,
    KVT_SAVE_DECLINED = 4,
    KVT_SAVE_RESERVED = 5, /* reserve: space at ptrs[i]; write the chunk there, then commit */
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
 * needed). A chunk whose checksum does not verify is a miss (kvt_stats counts it). */
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

/* A tally with every protocol 2 field, for kvt_submit_tally (kvt_tally2 is its synchronous form).
 */
typedef struct {
    uint64_t engine_id;
    uint64_t paid_total;
    uint64_t probes_total;
    const kvt_reason_t *reasons; /* nreasons entries (at most 16), may be NULL when 0 */
    size_t nreasons;
    int has_tokens; /* the two token totals below are meaningful (TALLY flag TOKENS) */
    uint64_t served_tokens_total;
    uint64_t lookup_tokens_total;
} kvt_tally_req_t;

/* The daemon's message for the calling thread's last failed synchronous call on c (or, with c
 * NULL, its last failed kvt_connect), or "" when that call failed without one. The text lives in
 * the calling thread's storage until its next failed call. */
KVT_API const char *kvt_last_error(const kvt_client_t *c);

/* A static description of an error code. */
KVT_API const char *kvt_strerror(int err);

/* ---------------------------------------------------------------------------------------------
 * Asynchronous calls
 *
 * Every kvt_submit_* validates its arguments, queues the request and returns at once with a
 * handle in *out (never 0): 0 on success, or a negative code and no request. Only the chunk
 * buffers (bufs[i]) are borrowed: they must stay valid, and must not be written (saves) or read
 * (loads), until the request's completion has been taken; the arrays themselves (hashes, bufs,
 * lens, caps, reasons) are copied. Each submitted request completes exactly once, with success,
 * a daemon error, KVT_ETIMEDOUT (its own timeout: others are not affected) or KVT_ECLOSED.
 *
 * A daemon that forgot this client (restart, idle expiry: ENONS) or whose arena changed
 * (ESTALE) is handled inside the library: HELLO again, map the arena anew when it changed, and
 * retry the request once from its first step.
 * ------------------------------------------------------------------------------------------- */

typedef uint64_t kvt_handle_t;

enum {
    KVT_OP_LOOKUP = 1,
    KVT_OP_SAVE = 2,
    KVT_OP_LOAD = 3,
    KVT_OP_TALLY = 4,
    KVT_OP_RESERVE = 5, /* zero-copy save, step 1 */
    KVT_OP_COMMIT = 6,  /* zero-copy save, step 2 */
    KVT_OP_PIN = 7,     /* zero-copy load */
};

/* Per-chunk load and pin outcomes. */
enum {
    KVT_LOAD_HIT = 1,     /* loaded (pin: ptrs[i] holds lens[i] bytes until released) */
    KVT_LOAD_MISS = 2,    /* not stored, or its hold ended before it could be copied */
    KVT_LOAD_CORRUPT = 3, /* its checksum did not verify: a miss, reported to the daemon */
    KVT_LOAD_BUFSIZE = 4, /* stored, larger than the buffer (lens[i] is its size): not copied */
};

/* Per-request options of a submit; NULL means none. */
typedef struct {
    void *user;     /* returned in the completion */
    int timeout_ms; /* 0: the client's timeout (kvt_connect_opts_t) */
} kvt_submit_opts_t;

/* A completed request. Owned by the library and read-only for the caller; arrays have n entries
 * and live as long as the completion. */
typedef struct kvt_completion {
    kvt_handle_t handle;
    void *user;
    int op;                  /* KVT_OP_* */
    int status;              /* 0 or a negative KVT_E* code for the request as a whole */
    const char *error;       /* the daemon's message when status came from its error reply, or "" */
    size_t n;                /* chunks of the request (0 for a tally) */
    const uint8_t *outcomes; /* save, reserve, commit: kvt_save_outcome_t; load, pin: KVT_LOAD_* */
    const size_t *lens;      /* load, pin: stored size per chunk (0 on a miss) */
    void *const *ptrs;       /* reserve: where to write each RESERVED chunk; pin: each HIT
                                chunk's bytes; NULL elsewhere. Valid until hold_until_ms. */
    const uint64_t *checksums;  /* pin: the daemon's XXH3-64 of each HIT chunk (kvt_checksum);
                                   NULL when the daemon does not answer CHECKSUMS */
    size_t nhit;                /* load, pin: contiguous prefix of HIT chunks */
    int64_t hold_until_ms;      /* reserve, pin: CLOCK_MONOTONIC milliseconds after which ptrs
                                   must not be touched (the daemon reclaims the space) */
    kvt_lookup_result_t lookup; /* lookup */
    kvt_gate_state_t gates;     /* tally */
} kvt_completion_t;

KVT_API int kvt_submit_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                              const kvt_lookup_opts_t *opts, const kvt_submit_opts_t *so,
                              kvt_handle_t *out);

/* As kvt_save: outcomes in the completion. On the shared-memory path the I/O thread copies each
 * wanted chunk into the arena; on the frames path it sends the bytes (ZeroMQ copies them). */
KVT_API int kvt_submit_save(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                            const void *const *bufs, const size_t *lens,
                            const kvt_save_opts_t *opts, const kvt_submit_opts_t *so,
                            kvt_handle_t *out);

/* As kvt_load: the I/O thread copies each hit into bufs[i] (caps[i] bytes), verifying its
 * checksum in the same pass; completion status KVT_EBUFSIZE when a chunk did not fit. */
KVT_API int kvt_submit_load(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, void *const *bufs,
                            const size_t *caps, const kvt_submit_opts_t *so, kvt_handle_t *out);

KVT_API int kvt_submit_tally(kvt_client_t *c, const kvt_tally_req_t *t, const kvt_submit_opts_t *so,
                             kvt_handle_t *out);

/*
 * Zero-copy calls (shared-memory path only: KVT_EUNSUPP otherwise).
 *
 * Save: kvt_submit_reserve asks for arena space for the wanted chunks of a chain. Its
 * completion says per chunk RESERVED (ptrs[i]: lens[i] bytes to fill by any means, memcpy or a
 * GPU DMA), EXISTS or DECLINED (nothing to write) or NOSPACE. Fill the reserved chunks before
 * hold_until_ms, then hand the completion to kvt_submit_commit, which publishes them in chain
 * order; its completion has the final outcomes. A reservation freed without a commit is
 * abandoned: the daemon reclaims it at its hold deadline. Cost: two round trips.
 *
 * Load: kvt_submit_pin answers with pointers to the chunks in the arena, pinned (never evicted
 * nor moved) until the completion is freed or hold_until_ms passes. Chunks the daemon holds only
 * on disk are promoted into the arena first (the reply waits for them). kvt_completion_free
 * releases the pins without a round trip: releases are batched into RELEASE messages that go out
 * with the next request or within a millisecond. Cost: one round trip.
 *
 * The GPU path: map once, register once. kvt_arena() gives the mapping's base and size (the base
 * is page-aligned and the size a multiple of the page size, as cudaHostRegister needs), so an
 * engine calls cudaHostRegister(base, bytes, cudaHostRegisterDefault) once per client and then
 * moves chunks with cudaMemcpyAsync between HBM and ptrs[i], commits (or frees the pin) when its
 * stream event has fired. If the arena is mapped anew (kvt_arena_t.maps changed, after a daemon
 * restart), register the new range; pointers of completions taken before stay valid (the old
 * mapping lives until they are freed).
 */
KVT_API int kvt_submit_reserve(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                               const size_t *lens, const kvt_save_opts_t *opts,
                               const kvt_submit_opts_t *so, kvt_handle_t *out);

/* Commits the reserved chunks among the first nwritten of reservation (nwritten <=
 * reservation->n; the others are abandoned). Takes ownership of reservation on success (do not
 * free it or read it again); on failure it stays the caller's. */
KVT_API int kvt_submit_commit(kvt_client_t *c, kvt_completion_t *reservation, size_t nwritten,
                              const kvt_submit_opts_t *so, kvt_handle_t *out);

KVT_API int kvt_submit_pin(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                           const kvt_submit_opts_t *so, kvt_handle_t *out);

/* Synchronous zero-copy calls (0.2.1): kvt_submit_reserve, kvt_submit_commit and kvt_submit_pin,
 * then a wait for that request, which runs on the calling thread when the client is idle (as
 * the other synchronous calls: a round trip without the two thread hand-offs). They return the
 * request's status; *out is then its completion, the caller's as if taken from the queue (read
 * it, free it with kvt_completion_free, or hand a reservation to kvt_commit/kvt_submit_commit),
 * or NULL when nothing was sent (invalid arguments, no memory, the client shut down; a refused
 * kvt_commit leaves the reservation the caller's). Never delivered to the completion queue. */
KVT_API int kvt_reserve(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const size_t *lens,
                        const kvt_save_opts_t *opts, kvt_completion_t **out);
KVT_API int kvt_commit(kvt_client_t *c, kvt_completion_t *reservation, size_t nwritten,
                       kvt_completion_t **out);
KVT_API int kvt_pin(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, kvt_completion_t **out);

/* Verifies the HIT chunks of a pin completion against the daemon's checksums on the calling
 * thread (one read pass); a mismatch becomes KVT_LOAD_CORRUPT (ptrs[i] NULL, nhit shortened),
 * is counted and reported to the daemon. Returns the number of mismatches, or KVT_EUNSUPP when
 * the daemon answers no checksums, KVT_EINVAL for another kind of completion. */
KVT_API int kvt_pin_verify(kvt_client_t *c, kvt_completion_t *pin);

/* A file descriptor that is readable (level-triggered: poll/epoll/select) while at least one
 * completion waits. Owned by the client; do not read or close it. */
KVT_API int kvt_fd(const kvt_client_t *c);

/* Waits up to timeout_ms (-1: no limit, 0: do not wait) until a completion waits: 1, 0 on
 * timeout, KVT_ESYS. Does not take the completion. */
KVT_API int kvt_poll(kvt_client_t *c, int timeout_ms);

/* Takes the oldest completion waiting: 1 and *out set, 0 when none waits. */
KVT_API int kvt_next_completion(kvt_client_t *c, kvt_completion_t **out);

/* Gives a completion back: a pin's chunks are released (batched, no round trip), a reservation
 * is abandoned; then its memory is freed. NULL is accepted. */
KVT_API void kvt_completion_free(kvt_client_t *c, kvt_completion_t *comp);

/* What this client did (counters since connect) and holds now. */
typedef struct {
    uint64_t submitted;           /* requests submitted, synchronous calls included */
    uint64_t completed;           /* requests completed (delivered or returned) */
    uint64_t failed;              /* of them, with a non-zero status */
    uint64_t timeouts;            /* of them, KVT_ETIMEDOUT */
    uint64_t recoveries;          /* transparent re-HELLOs after ENONS or ESTALE */
    uint64_t remaps;              /* times the arena was mapped anew */
    uint64_t chunks_verified;     /* chunk checksums compared */
    uint64_t checksum_mismatches; /* of them, mismatches (each a miss and a RELEASE CORRUPT) */
    uint64_t releases_sent;       /* RELEASE messages (each may carry many chunks) */
    uint64_t bytes_copied;        /* payload bytes the I/O thread copied (in and out) */
    uint64_t inline_calls;        /* synchronous calls that ran the I/O on their own thread */
    uint32_t in_flight;           /* requests on the wire now (RELEASE messages not counted) */
    uint32_t queued;              /* requests waiting for a place in the window */
    uint32_t max_in_flight;       /* the window */
} kvt_stats_t;
KVT_API int kvt_stats(const kvt_client_t *c, kvt_stats_t *out);

/* The link to the daemon (0.2.12; "The link" above). New functions rather than new fields of
 * kvt_connect_opts_t or kvt_stats_t: a program built against an earlier 0.2 header passes the
 * smaller structs, and the SONAME (libkvtier.so.0.2) lets it load this library. */
typedef struct {
    uint32_t down;        /* 1 while the connection is down */
    int down_wait_ms;     /* the wait in force (-1: no fast failure) */
    int64_t down_for_ms;  /* how long it has been down (0 while up) */
    uint64_t disconnects; /* times the connection was lost */
    uint64_t unavailable; /* requests completed KVT_EUNAVAIL */
} kvt_link_t;
KVT_API int kvt_link(const kvt_client_t *c, kvt_link_t *out);

/* Sets how long a request waits for a lost connection to come back before it completes
 * KVT_EUNAVAIL: ms >= 0, or -1 for no fast failure (requests wait for their own timeout, as
 * before 0.2.12). The default is 100, or KVTIER_DOWN_WAIT_MS in the environment at kvt_connect.
 * Any thread; applies from then on, to the requests already waiting too. KVT_EINVAL below -1. */
KVT_API int kvt_set_down_wait(kvt_client_t *c, int ms);

/* The arena as this client maps it (shared-memory path only: KVT_EUNSUPP otherwise). */
typedef struct {
    void *base;    /* page-aligned */
    size_t bytes;  /* a multiple of the page size */
    uint32_t gen;  /* the daemon's arena generation */
    uint32_t maps; /* 1 after connect, +1 each time the arena is mapped anew */
} kvt_arena_t;
KVT_API int kvt_arena(const kvt_client_t *c, kvt_arena_t *out);

/* The chunk checksum of PROTOCOL.md: XXH3-64 (seed 0) of n bytes. */
KVT_API uint64_t kvt_checksum(const void *p, size_t n);

/* Copies n bytes from src to dst and returns the checksum of the bytes copied, in one pass (a
 * block is hashed while it is in cache): what copying loads do. The ranges must not overlap. */
KVT_API uint64_t kvt_copy_checksum(void *dst, const void *src, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Chunk hashes
 * ------------------------------------------------------------------------------------------- */

/* Chained chunk hashes: out[i] = xxh3-128(seed = 0) over prev (16 bytes: out[i-1], or *parent,
 * or 16 zero bytes for the first chunk of a prompt) followed by the little-endian u32 token ids
 * of chunk i. Only whole chunks are hashed: returns the number of hashes written,
 * min(ntokens / chunk_tokens, out_cap). */
KVT_API size_t kvt_hash_chain(const uint32_t *tokens, size_t ntokens, uint32_t chunk_tokens,
                              const kvt_hash_t *parent, kvt_hash_t *out, size_t out_cap);

/*
 * Engine-native keys: the chunk hash of an engine's own block key, so that an engine never
 * hashes tokens twice. *out = xxh3-128 (seed 0, canonical byte order as kvt_hash_chain) over the
 * 16-byte domain tag "kvtier-key-v1\0\0\0", the salt length as a little-endian u32, the salt,
 * then the key. Engines' keys already chain over the prompt, so the hashes of a save are its
 * keys' hashes in prompt order (the chain is given by that order, as for kvt_hash_chain).
 *   - vLLM: key = the block hash (32-byte SHA-256, or 16-byte xxhash) followed by the 4-byte
 *     group index (its OffloadKey bytes); salt = "" (or a tenant).
 *   - SGLang: key = the page's SHA-256 hex string (64 ASCII bytes); salt = "". The TP rank needs
 *     no salt: each client saves under its own rank (MLA namespaces share one copy).
 *   - salt: whatever else must keep equal keys apart (a tenant id, a KV group); NULL with 0.
 */
KVT_API void kvt_hash_key(const void *key, size_t key_len, const void *salt, size_t salt_len,
                          kvt_hash_t *out);

/* kvt_hash_key of n keys of key_len bytes each, stored back to back in keys. */
KVT_API void kvt_hash_keys(const void *keys, size_t key_len, size_t n, const void *salt,
                           size_t salt_len, kvt_hash_t *out);

/* Parses 32 hex digits into h; returns 0 or KVT_EINVAL. Formats h as 32 lowercase hex digits
 * plus NUL into buf (33 bytes). */
KVT_API int kvt_hash_parse(const char *hex, kvt_hash_t *h);
KVT_API void kvt_hash_format(const kvt_hash_t *h, char buf[33]);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_H */
