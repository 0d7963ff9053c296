/*
 * server.h - the request side of kvtierd: ZeroMQ intake, sessions, dispatch of the protocol's
 * requests through one operation table (requests.c) to the store and the gates, and the
 * server's counters.
 *
 * Every request gets exactly one reply: its *_OK, or ERROR with a wire code and a text, unless
 * the client cannot take it (its queue is full: the session is stalled, session.h). A session is
 * one client connection (one ROUTER routing id), made by its first HELLO; it remembers the
 * namespaces the client declared, and requests naming any other namespace are refused (ENONS).
 * Sessions idle for server.client_idle_ms are forgotten; at most server.max_clients are kept
 * (a HELLO beyond them is refused with EBUSY). Every session's resources are bounded (contract
 * C3, session.h): a request over a bound is refused with EBUSY naming it.
 *
 * The status documents are not built here: stats.c reads the server's counters and the engines
 * it owns through server_view() and renders them.
 *
 * Threads: loop thread only. Ownership: the server owns the store, the namespace table, the
 * sessions, the admission state and its ZeroMQ socket; it borrows the loop, the ZeroMQ context
 * and the config, which must outlive it.
 */
#ifndef KVT_SERVER_H
#define KVT_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "admission.h"
#include "config.h"
#include "hist.h"
#include "loopmon.h"
#include "ns.h"
#include "session.h"
#include "store.h"

typedef struct server server_t;

/* Creates the store (RAM arena) and binds the endpoint. Returns 0 or a negative errno, with a
 * log line saying what failed. */
int server_new(uv_loop_t *loop, void *zctx, const config_t *cfg, server_t **out);

/* Stops intake and closes the server's handles; memory is released in the close callbacks, so
 * the loop must run afterwards. Sets *sv to NULL. */
void server_close(server_t **sv);

/*
 * The first step of a graceful stop: from now on SAVE_BEGIN, SAVE_DATA and SAVE_RESERVE are
 * answered EBUSY ("the daemon is stopping"), everything else is still served (lookups, loads,
 * the commits and releases of shared-memory work already under way); done(arg) is called on
 * the loop once no reply is deferred and no reservation is held any more, or after timeout_ms
 * (0: at the next loop iteration), whichever comes first. Then server_close(). Called once.
 */
void server_drain(server_t *sv, uint32_t timeout_ms, void (*done)(void *arg), void *arg);

/* Applies the live keys of the config (config.h) that the server's parts hold rather than read
 * where they are used: every declared namespace's gate settings (config_gates_for its model)
 * and the interval of the hold sweep (ram.shm_hold_ms). Called after config_merge_live(). */
void server_reconfigure(server_t *sv);

/* What status shows of the configuration and its reloads ("config"). The server keeps it for
 * main.c (which reloads) and stats.c (which renders it). */
typedef struct {
    const char *path;         /* the file given with -c (borrowed: argv) */
    uint64_t reloads;         /* reloads applied */
    uint64_t reload_errors;   /* reloads refused (invalid file): the old config kept running */
    uint32_t restart_pending; /* keys of the last file applied that need a restart */
    char last_error[512];     /* why the last refused reload was refused ("" none) */
} server_config_state_t;

/* The server's config state, for main.c to update (loop thread). */
server_config_state_t *server_config_state(server_t *sv);

/* Invalidation (POST /admin/drop): every namespace whose model is model and, when revision is
 * not NULL, whose revision is revision (NUL-terminated) loses its chunks (store_drop_ns). Fills
 * up to max entries of out (one per namespace dropped) and returns how many namespaces matched,
 * or -ENOMEM. Counted per namespace (status namespaces[].drops, dropped_chunks, dropped_bytes)
 * and logged (event drop). */
typedef struct {
    uint32_t ns_id;
    store_drop_t dropped;
} server_drop_t;

/* store_drops_written() of the server's store: when the drops' tombstones are on file. */
int server_drops_written(server_t *sv, void (*cb)(void *arg, int rc), void *arg);

int server_drop_ns(server_t *sv, const char *model, const char *revision, server_drop_t *out,
                   size_t max);

/* Classes of ERROR replies, by wire code (SERVER_ERR_MALFORMED for any other code). */
typedef enum {
    SERVER_ERR_MALFORMED,   /* KVT_WIRE_EPROTO and unknown codes */
    SERVER_ERR_VERSION,     /* KVT_WIRE_EVERSION */
    SERVER_ERR_UNKNOWN_NS,  /* KVT_WIRE_ENONS */
    SERVER_ERR_TOO_BIG,     /* KVT_WIRE_ETOOBIG */
    SERVER_ERR_INVALID,     /* KVT_WIRE_EINVAL */
    SERVER_ERR_CONFLICT,    /* KVT_WIRE_ECONFLICT */
    SERVER_ERR_UNSUPPORTED, /* KVT_WIRE_EUNSUPP */
    SERVER_ERR_BUSY,        /* KVT_WIRE_EBUSY */
    SERVER_ERR_STALE,       /* KVT_WIRE_ESTALE */
    SERVER_ERR_COUNT
} server_err_t;

/* A sum and a count of microseconds (the LOOKUP service time of a namespace, ns_t keeps it). */
typedef struct {
    uint64_t sum_us;
    uint64_t count;
} server_timing_t;

/* Drops of one namespace (server_drop_ns), as status shows them (ns_t keeps them). */
typedef struct {
    uint64_t drops;  /* drop requests that matched it */
    uint64_t chunks; /* chunks they removed */
    uint64_t bytes;  /* payload bytes they removed */
} server_drops_t;

/* The server's own counters. */
typedef struct {
    uint64_t requests;                 /* messages received, well-formed or not */
    uint64_t bytes_received;           /* SAVE_DATA payload bytes */
    uint64_t bytes_sent;               /* reply bytes (every part after the routing id) */
    uint64_t bytes_committed;          /* payload bytes published through the shared arena */
    uint64_t replies_dropped;          /* replies not delivered: ZeroMQ refused them (the peer's
                                          queue was full, or the peer was gone), or the session
                                          was stalled or forgotten before they were sent */
    uint64_t errors[SERVER_ERR_COUNT]; /* ERROR replies by class */
    hist_t *op_latency;                /* service time per request type: server_op_count() */
    uint64_t leases_capped;            /* lookups answered without the lease they asked for */
    uint64_t namespaces_evicted;       /* namespaces dropped with their chunks to make room */
    uint64_t state_namespaces;         /* gate states restored at start (state.h) */
    uint64_t state_leases;             /* leases restored at start */
    uint64_t fd_limit;                 /* the descriptor limit in force (RLIMIT_NOFILE) */
    uint64_t fd_guard;                 /* connections from this descriptor on are shut (0: none) */
    uint64_t connections_shed;         /* connections the descriptor guard shut down */
} server_counters_t;

/* The request types of the operation table, in its order (the order of status "ops"). */
size_t server_op_count(void);
const char *server_op_name(size_t i);

/* What the server owns, read-only, for the status documents (stats.h). The pointers are
 * borrowed until the next loop iteration. */
typedef struct {
    uint64_t now_ms;   /* the loop's time */
    uint64_t start_ms; /* the loop's time when the server was created */
    const config_t *cfg;
    const store_t *store;
    const sessions_t *sessions;
    const ns_table_t *namespaces;
    const admission_t *admission;
    const server_counters_t *counters;
    const loopmon_t *loop; /* NULL when it could not be created */
    const server_config_state_t *config;
    bool draining; /* a stop has begun (server_drain) */
} server_view_t;

void server_view(const server_t *sv, server_view_t *out);

#endif /* KVT_SERVER_H */
