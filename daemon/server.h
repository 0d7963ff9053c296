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
    SERVER_ERR_COUNT
} server_err_t;

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
} server_view_t;

void server_view(const server_t *sv, server_view_t *out);

#endif /* KVT_SERVER_H */
