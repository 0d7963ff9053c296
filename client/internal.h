/*
 * internal.h - what the files of libkvtier share (not installed; kvtier.h is the public face).
 *
 *   kvtier.c  the public calls: connect, shutdown/close, every submit, the synchronous wrappers,
 *             the completion queue, stats, errors
 *   io.c      the I/O thread: the DEALER socket, the in-flight window, timeouts, release
 *             batching, namespace and arena recovery
 *   requests.c every request kind's wire steps, reply handlers and copies
 *   copier.c  the copy helpers: chunk copies of shared-memory requests beside the I/O thread
 *   shm.c     the arena mapping (reference counted) and the checksum helpers
 *   pool.c    the send buffers of the frames path, lent to ZeroMQ
 *   hash.c    chunk hashes, engine keys, fingerprints, hash text
 *
 * Ownership: a req_t is one request from submit to kvt_completion_free. Until its completion
 * is delivered it belongs to the I/O thread (the submitter only reads its handle); after, to
 * whoever took it. Every req_t that a caller can see is on the client's list of live requests
 * (c->all, under c->mu), so kvt_close frees what was never freed. Internal requests (a recovery
 * HELLO) are the I/O thread's alone and never delivered.
 *
 * Locking: c->mu guards the fields marked "mu" below; the I/O thread holds it only to move
 * requests between queues, never while it copies, sends or waits. Fields marked "io" are the
 * I/O thread's alone; fields marked "fixed" are written before the I/O thread starts.
 */
#ifndef KVT_CLIENT_INTERNAL_H
#define KVT_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <zmq.h>

#include "kvt_proto.h"
#include "kvtier.h"

#define KVT_DEFAULT_TIMEOUT_MS 5000
#define KVT_DEFAULT_WINDOW 16  /* window for a daemon that announces none (max_in_flight 0) */
#define KVT_RELEASE_DELAY_MS 1 /* a release waits at most this long for a request to ride on */
#define KVT_RECV_BATCH 32      /* replies handled per turn of the I/O loop */
/* The link (kvtier.h "The link"; io.c): */
#define KVT_DOWN_WAIT_MS 100      /* kvt_set_down_wait's default */
#define KVT_RECONNECT_IVL_MS 20   /* ZMQ_RECONNECT_IVL: a restarted daemon is found this soon */
#define KVT_HEARTBEAT_IVL_MS 1000 /* ZMQ_HEARTBEAT_IVL: a PING when nothing else was sent */
#define KVT_HEARTBEAT_TMO_MS 3000 /* ZMQ_HEARTBEAT_TIMEOUT: no traffic for this long: gone */
#define KVT_CONNECT_TMO_MS 1000   /* ZMQ_CONNECT_TIMEOUT (tcp): a SYN unanswered is retried */
#define KVT_PARK_MS 1000          /* a parked I/O thread reads the link's events this often */
#define KVT_RX_FRAMES_MAX                                                                          \
    (65536 + 3) /* frames of the largest reply (LOAD_OK, max_chunks 65536)                         \
                 */

/* Request kinds: the public KVT_OP_* and the library's own. */
enum {
    RK_HELLO = 16, /* connect, or a recovery after ENONS / ESTALE: HELLO, then ARENA */
};

/* The arena as mapped by this process. Reference counted: the client holds its current
 * mapping, every shared-memory request the mapping it used; the last reference unmaps it, so a
 * mapping replaced after a daemon restart lives as long as a completion can point into it. */
typedef struct arena_map {
    uint8_t *base;
    size_t bytes;     /* the daemon's arena_bytes */
    size_t map_bytes; /* bytes mapped: arena_bytes rounded up to the page size */
    uint32_t gen;
    uint32_t hold_ms;
    uint32_t seq; /* 1 for the first mapping of a client, +1 per remap */
    dev_t dev;
    ino_t ino;
    atomic_int refs;
} arena_map_t;

/* Send buffers lent to ZeroMQ (pool.c). */
struct pool_buf;
typedef struct kvt_pool {
    pthread_mutex_t mu;
    struct pool_buf *free;
    size_t held; /* bytes on the free list */
} kvt_pool_t;

typedef struct req req_t;

struct req {
    kvt_completion_t comp; /* first: a kvt_completion_t * is a req_t * */
    kvt_client_t *c;
    req_t *next;                /* the queue it is on (submission, pending, waiting, delivery) */
    req_t *all_prev, *all_next; /* c->all */
    uint8_t kind;               /* KVT_OP_* or RK_* */
    uint8_t step;               /* the message type in flight (0: none yet) */
    bool retried;               /* the one transparent recovery was spent */
    bool sync;                  /* a synchronous call waits for it (never queued for delivery) */
    bool done;                  /* sync: completed (mu) */
    bool internal;              /* the I/O thread's own: freed at completion, never delivered */
    bool consumed;              /* a reservation handed to kvt_submit_commit */
    bool arena_optional;        /* RK_HELLO at connect under AUTO: a failed ARENA is no failure */
    bool want_arena;            /* RK_HELLO: map the arena (ARENA step) */
    int arena_rc;               /* RK_HELLO: the ARENA step's result */
    uint32_t sent_epoch;        /* c->epoch when its message was sent */
    int64_t deadline_ms;
    int64_t born_ms;  /* when it was submitted */
    int64_t sent_ms;  /* when the current step was sent */
    arena_map_t *map; /* shared-memory requests: the mapping used (a reference) */

    /* inputs (copied at submit; bufs only are the caller's) */
    size_t n;
    kvt_hash_t *hashes; /* commit: the reservation's */
    const void **src;   /* save: the caller's buffers */
    void **dst;         /* load: the caller's buffers */
    size_t *sizes;      /* save, reserve: lens; load: caps */
    bool has_parent, has_op_id;
    kvt_hash_t parent;
    uint64_t op_id;
    kvt_lookup_opts_t lookup;
    kvt_tally_req_t tally; /* reasons encoded in tally_buf */
    uint8_t *tally_buf;
    size_t tally_len;
    req_t *resv;     /* commit: the reservation it consumes (freed with it) */
    size_t nwritten; /* commit */

    /* outputs (comp points at them) */
    uint8_t *out;        /* per-chunk outcome (0 = WANTED while a save is in progress) */
    size_t *lens;        /* load, pin */
    void **ptrs;         /* reserve, pin */
    uint64_t *csums;     /* pin: the daemon's checksums; shm save: the ones computed copying */
    uint8_t *locs;       /* shm save, reserve, commit: wire locations (KVT_LOC_BYTES each) */
    uint32_t *rank_hits; /* lookup: world entries */
    char err[KVT_ERRTEXT_MAX + 1];

    /* copies (requests.c plans them, copier.c runs them) */
    size_t *cpidx;           /* shm save, copying shm load: the chunks to copy */
    size_t ncp;              /* entries of cpidx */
    size_t cp_next, cp_left; /* cp.mu: next entry to take, entries not yet copied */
    int64_t cp_until;        /* hold deadline: a copy not begun by then is not done */
    bool cp_csums;           /* save: compute the checksums (CLIENT_CSUMS) */
    bool cp_ready;           /* save: copied; commits when every earlier save has (io) */
    req_t *cp_order;         /* save: the next save in c->commit_head's order (io) */
    bool cp_verify;          /* load: verify against csums[i] */
    int cp_status;           /* load: the request's status once copied */
};

/* Pending releases: hashes of pinned chunks to put into RELEASE messages. */
typedef struct {
    kvt_hash_t *h;
    size_t n, cap;
    int64_t first_ms; /* when the oldest was queued */
} relq_t;

/* One message on the wire: a request's current step, or (req NULL) one whose reply nobody
 * waits for (a RELEASE, a request that timed out) kept until its reply or expire_ms, so that
 * the window counts what the daemon still holds. */
typedef struct {
    uint64_t id;
    req_t *req;
    int64_t expire_ms;
} wire_t;

struct kvt_client {
    /* fixed */
    void *ctx;
    char model[KVT_MODEL_MAX + 1];
    size_t model_len;
    char revision[KVT_REVISION_MAX + 1];
    size_t revision_len;
    uint64_t layout_fp;
    uint32_t chunk_tokens;
    uint16_t rank;
    uint16_t world;
    bool mla;
    pid_t pid;         /* the process that connected (fork: kvtier.c) */
    unsigned fork_gen; /* the fork generation at connect: another one is a forked child */
    /* The shared-memory path is in use: set by kvt_connect before any submit; cleared by the I/O
     * thread when a recovery under KVT_DATA_PATH_AUTO finds no arena it can map (a daemon
     * restarted on a memfd arena, or on a file this process cannot open): later requests take
     * the frames path instead of failing for good. Read by any thread, hence atomic. */
    _Atomic bool shm;
    bool auto_path; /* kvt_connect's data path was KVT_DATA_PATH_AUTO */
    int timeout_ms;
    int verify;
    uint32_t opt_window; /* kvt_connect_opts_t.max_in_flight (0: none) */
    int comp_fd;         /* eventfd: readable while completions wait */
    int wake_fd;         /* eventfd: wakes the I/O thread */
    int yield_fd;        /* eventfd: asks a synchronous call running the I/O to hand it back */
    pthread_t io;
    bool io_started;
    kvt_pool_t pool; /* send buffers: lives until the ZeroMQ context is terminated */

    /* mu */
    pthread_mutex_t mu;
    pthread_cond_t sync_cv;
    req_t *subq_head, *subq_tail; /* submitted, not yet taken by the I/O thread */
    size_t nsub;
    req_t *compq_head, *compq_tail; /* completions waiting to be taken */
    req_t *all;                     /* every live request a caller can see */
    relq_t rel[2];                  /* releases queued by callers: plain, corrupt */
    bool io_sleeping;               /* the I/O thread waits: a submit must wake it */
    bool parked;                    /* the I/O thread left the socket alone (client idle) */
    bool inline_active;             /* a synchronous call runs the I/O meanwhile (io.c) */
    bool yield_req;                 /* the I/O thread wants it back from that call */
    pthread_cond_t token_cv;        /* signalled when a synchronous call hands the I/O back */
    bool closing;                   /* kvt_shutdown began: no new submits */
    bool joined;                    /* the I/O thread has been joined */
    kvt_server_info_t info;
    arena_map_t *map; /* current mapping, NULL on the frames path (readers take a ref) */
    uint64_t next_handle;

    /* copy helpers (copier.c): under cp.mu but nthreads (atomic) and th (start and stop only) */
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;            /* tasks queued, or stop */
        req_t *q_head, *q_tail;       /* requests with chunks not yet taken */
        req_t *done_head, *done_tail; /* requests copied, for the I/O thread */
        bool stop;
        atomic_bool abort; /* shutdown: a copy not begun is not done (kvt__copy_chunk) */
        pthread_t *th;
        atomic_uint nthreads;
    } cp;
    int copy_fd; /* eventfd: readable while cp.done_head is not NULL (fixed) */

    /* counters (any thread, relaxed) */
    atomic_uint_fast64_t n_submitted, n_completed, n_failed, n_timeouts, n_recoveries, n_remaps,
        n_verified, n_mismatches, n_releases, n_copied, n_inline, n_disconnects, n_unavailable;
    atomic_int down_wait_ms;            /* kvt_set_down_wait; -1: no fast failure */
    atomic_int_fast64_t down_since_pub; /* down_ms while the link is down, else 0 (kvt_link) */
    atomic_uint n_inflight, n_pending;

    /* io */
    void *sock;
    void *mon;          /* PAIR socket receiving sock's monitor events (io.c "the link") */
    bool link_down;     /* the connection dropped and no handshake succeeded since */
    int64_t down_ms;    /* when link_down was seen */
    bool link_draining; /* link_lost is handling the replies that came before the drop */
    uint64_t next_wire_id;
    uint32_t epoch; /* +1 at every completed HELLO */
    uint32_t ns_id;
    uint64_t features;
    uint32_t window;
    wire_t *wires;
    size_t nwires, wires_cap;
    req_t *pend_head, *pend_tail; /* taken, waiting for the window (internal ones first) */
    req_t *wait_head, *wait_tail; /* waiting for the recovery to finish */
    req_t *recovery;              /* the HELLO in progress, or NULL */
    req_t *done_head, *done_tail; /* completed this turn, delivered under one lock */
    relq_t orel[2];               /* releases the I/O thread itself queued, and callers' */
    int64_t next_expiry;          /* no deadline passes before this */
    zmq_msg_t *rx;
    kvt_frame_t *fv;
    size_t nrx, rx_cap;
    size_t cp_outstanding; /* requests handed to the copier, not yet back (whoever runs the I/O) */
    req_t *commit_head, *commit_tail; /* saves being copied, in the order of their reserves */
    size_t cp_saves;                  /* of them, not yet committed: their places in the window */
    bool cp_closing;                  /* shutdown: copies not begun are skipped, and end ECLOSED */
};

/* --- kvtier.c --- */
int64_t kvt__now_ms(void);
long kvt__env_long(const char *name, long min, long max, long dflt); /* kvtier.c */
/* kvtier.c (fork): c was connected by the parent of this process; then KVT_ECLOSED with the
 * reason kept for kvt_last_error. */
bool kvt__forked(const kvt_client_t *c);
int kvt__fork_refused(const kvt_client_t *c);
/* Frees r (its arrays, its mapping reference, its reservation); unlinks it from c->all first. */
void kvt__req_free(kvt_client_t *c, req_t *r);

/* --- io.c (the I/O thread) --- */
void *kvt__io_main(void *arg);
/* Runs synchronous request r on the calling thread, which holds the I/O (c->inline_active, set
 * under c->mu by the caller while the I/O thread was parked), until r completes or the I/O thread
 * asks for the I/O back; then hands it back. r completes (r->done) here, or later on the I/O
 * thread. */
void kvt__io_inline(kvt_client_t *c, req_t *r);
/* A head of type for a request of this client (protocol 2, its namespace, map's generation). */
kvt_msg_t kvt__head_of(const kvt_client_t *c, int type, const arena_map_t *map);
/* Sends step m of r (r NULL: a message nobody waits for) and takes its place on the wire. 0, or
 * an error (r is then not on the wire). */
int kvt__send_step(kvt_client_t *c, req_t *r, kvt_msg_t *m, const kvt_frame_t *f, size_t nf);
/* r is done with status (queued for delivery at the end of the turn). */
void kvt__finish(kvt_client_t *c, req_t *r, int status);
/* The recovery (or the connect) HELLO r ended with status. */
void kvt__recovery_end(kvt_client_t *c, req_t *r, int status);
void kvt__end(kvt_client_t *c, req_t *r, int status); /* recovery_end for a HELLO, else finish */
/* r was answered ENONS, ESTALE or ETOOBIG (code): retried after a recovery, or finished. */
void kvt__recover(kvt_client_t *c, req_t *r, int code);

/* --- requests.c (the I/O thread) --- */
/* Starts r from its first step (again, after a recovery). */
void kvt__begin(kvt_client_t *c, req_t *r);
/* A reply for r, already off the wire. */
void kvt__on_reply(kvt_client_t *c, req_t *r, const kvt_msg_t *rep);

/* The copy of chunk i of r, as planned (any thread: a helper or the I/O thread). */
void kvt__copy_chunk(kvt_client_t *c, req_t *r, size_t i);
/* What follows r's copies: a save's commit, a load's releases and completion (I/O thread). */
void kvt__copies_done(kvt_client_t *c, req_t *r);

/* --- copier.c --- */
void kvt__copier_init(kvt_client_t *c);
void kvt__copier_destroy(kvt_client_t *c);
/* Starts the helpers (KVTIER_COPY_THREADS); 0 or KVT_ENOMEM. kvt_connect, shared-memory path. */
int kvt__copier_start(kvt_client_t *c);
/* Copies r->cpidx[0..ncp) (bytes in all), then kvt__copies_done: at once on this thread, or on
 * the helpers and r back through kvt__copier_back. I/O thread. */
void kvt__copies_start(kvt_client_t *c, req_t *r, uint64_t bytes);
/* Copies one queued chunk on the I/O thread; whether there was one. */
bool kvt__copier_help(kvt_client_t *c);
/* Runs kvt__copies_done for every request whose copies are done. I/O thread. */
void kvt__copier_back(kvt_client_t *c);
/* Until every request handed out is back and done (kvt_shutdown). I/O thread. */
void kvt__copier_drain(kvt_client_t *c);
/* Stops and joins the helpers (after kvt__copier_drain). */
void kvt__copier_stop(kvt_client_t *c);

/* --- shm.c --- */
/* Maps the arena file at path (arena_bytes, from ARENA_OK). 0, KVT_ESYS or KVT_ENOMEM; on
 * failure err (errcap bytes) says why, with the path (0.2.7: it said nothing). */
int kvt__map_open(const char *path, uint64_t arena_bytes, bool prefaulted, uint32_t gen,
                  uint32_t hold_ms, arena_map_t **out, char *err, size_t errcap);
/* Whether path names the file m maps (same device and inode) of arena_bytes. */
bool kvt__map_same(const arena_map_t *m, const char *path, uint64_t arena_bytes, uint32_t gen);
arena_map_t *kvt__map_ref(arena_map_t *m);
void kvt__map_unref(arena_map_t *m);
/* The extent a 16-byte wire location names inside m, or NULL when it is not inside. */
uint8_t *kvt__map_at(const arena_map_t *m, const uint8_t *loc, uint64_t *len);

/* --- pool.c --- */
void kvt__pool_init(kvt_pool_t *p);
/* Frees the buffers on the free list; every lent buffer must be back (context terminated). */
void kvt__pool_destroy(kvt_pool_t *p);
/* A buffer of at least len bytes, or NULL. I/O thread. */
void *kvt__pool_take(kvt_pool_t *p, size_t len);
/* The zmq_free_fn of a pool buffer: back to its pool (any thread). */
void kvt__pool_release(void *data, void *hint);

/* --- queues (kvtier.c) --- */
void kvt__relq_add(relq_t *q, const kvt_hash_t *h, int64_t now_ms);
void kvt__relq_free(relq_t *q);

#endif /* KVT_CLIENT_INTERNAL_H */
