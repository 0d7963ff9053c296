/*
 * server_internal.h - what server.c (intake, dispatch, replies, lifecycle) and requests.c (the
 * request handlers and the operation table) share. Internal to those two files: nothing else
 * includes it.
 *
 * Named the way libuv names its internals (src/unix/internal.h beside the public uv.h, and a
 * double underscore, uv__io_start, for what only the library itself calls): server.h is the
 * server's public face, this header its inside, and every function here is server__verb.
 *
 * Adding a request type: one row in server__ops[] (requests.c) and its handler. Intake decodes
 * the message, finds the row by type, finds the session and, when the row says so, the
 * namespace the session declared, then calls the handler with a server_req_t; the handler
 * replies once, at once (server__reply_*) or later (server__defer). The latency histogram of
 * the row records the service time when the reply is sent.
 *
 * Threads: loop thread only.
 */
#ifndef KVT_SERVER_INTERNAL_H
#define KVT_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <zmq.h>

#include "kvt_proto.h"
#include "loopmon.h"
#include "server.h"
#include "zcref.h"
#include "zsock.h"

struct server {
    uv_loop_t *loop;
    const config_t *cfg;
    char state_path[4200]; /* where the gate state and leases are kept (state.h), or "" */
    zsock_t *zs;
    zcref_t *zc;   /* chunks lent to ZeroMQ by load replies (pinned until returned) */
    loopmon_t *lm; /* the loop's busy share and turn durations (status "loop") */
    uv_timer_t sweep;
    ns_table_t *nst;
    store_t *store;
    admission_t *admission;
    sessions_t *sessions;
    kvt_limits_t lim;
    uint64_t start_ms;
    uint64_t sweep_ms;

    /* per-request scratch, sized by server.max_chunks_per_request */
    zmq_msg_t *out;      /* reply parts: max_chunks + 3 */
    kvt_frame_t *frames; /* request frame views: max_chunks + 2 */
    uint8_t *status;     /* per-chunk status */
    uint32_t *rank_hits; /* KVT_WORLD_MAX */
    uint64_t *offs;      /* per-chunk extents: max_chunks */
    uint64_t *lens;

    server_counters_t counters;
    server_config_state_t config_state;
    /* graceful stop (server_drain) */
    bool draining;
    uv_timer_t drain_timer;
    uint64_t drain_deadline;
    void (*drain_done)(void *arg);
    void *drain_arg;
    int close_waits;           /* zcref, store and drain timer closings still running */
    bool deferred;             /* the request being handled replies later */
    uint64_t replies_deferred; /* deferred replies alive */

    /* Contract C3 (session.h): every reply to a session is charged to it until ZeroMQ is done
     * with it. The last part of each reply is lent to ZeroMQ through `tickets`, whose return
     * (on the loop) gives the charge back. */
    zcref_t *tickets;
    session_t *cur;           /* the session of the request being handled, or NULL */
    bool in_handler;          /* recv_cb is running a handler for cur */
    int cur_lost;             /* a reply to cur failed: 0, -EAGAIN (stall) or -EHOSTUNREACH */
    session_charge_t pending; /* what server__admit() accepted, for the next server__defer() */
};

typedef struct server_op server_op_t;

/* The request being handled: valid for the handler's call only. */
typedef struct {
    zmq_msg_t *rid;   /* the client's routing id (borrowed from intake) */
    zmq_msg_t *parts; /* every part received, rid first (borrowed: a handler that replies
                         later may zmq_msg_move them out to keep their bytes) */
    size_t nparts;
    session_t *session;    /* found or created for rid */
    ns_t *ns;              /* the namespace of m->hdr.ns_id, when op->needs_ns; else NULL */
    const kvt_msg_t *m;    /* the decoded request (borrows the received frames) */
    const server_op_t *op; /* its row */
    size_t op_index;       /* its row's index (the latency histogram) */
    uint64_t t0;           /* uv_hrtime() at intake */
} server_req_t;

typedef void (*server__handler_fn)(server_t *sv, const server_req_t *r);

/* One row per request type. */
struct server_op {
    uint8_t type;               /* kvt_msg_type_t of the request */
    const char *name;           /* its name in status ("ops") and metrics ({op="..."}) */
    server__handler_fn handler; /* replies exactly once */
    bool needs_ns;              /* refused with ENONS unless the session declared hdr.ns_id */
    bool ns_timed;              /* its service time is also counted per namespace */
};

extern const server_op_t server__ops[];
extern const size_t server__nops;

/* Protocol 2 feature bits (KVT_FEAT_*) this daemon implements; HELLO_OK answers the subset a
 * client offers. Checksums, token tallies and arena generation checks each add their bit when
 * they are in place. CHECKSUMS: every LOAD_OK carries the commit checksum of each chunk; the
 * gates fold token tallies (TOKENS); shared-memory requests of another arena generation are
 * ESTALE (ARENA_GEN, server.c). */
#define SERVER_FEATURES                                                                            \
    (KVT_FEAT_CHECKSUMS | KVT_FEAT_TOKENS | KVT_FEAT_ARENA_GEN | KVT_FEAT_CLIENT_CSUMS)

/* The arena generation HELLO_OK and ARENA_OK announce: 0 without a shared arena; otherwise the
 * arena header's, one more at every start (re-attached or created anew: ram.h). */
uint32_t server__arena_gen(const server_t *sv);

/* --- bounds of contract C3 (server.c) ---
 *
 * server__admit: whether request r may take c (reply bytes, lent bytes and disk reads of a
 * deferred reply; c->requests is ignored: intake counted the request already) plus held_extra
 * new held bytes (shared-memory pins or reservations) within its session's and the daemon's
 * bounds. When not, the request is answered EBUSY with a text naming the bound and its figures,
 * counted (server.refused), and false is returned: the handler returns at once. When it may,
 * c is remembered and the next server__defer() of this request carries it.
 *
 * server__lease: leases the prefix h[0..hit) of rank (or KVT_RANK_ALL) for r's session when its
 * cost stays within the held bounds, and charges it; returns false (nothing leased, counted in
 * server.leases_capped) otherwise. A prefix that is leased already costs nothing.
 *
 * server__may_read: whether n more disk reads stay within disk.max_reads_queued (for reads no
 * reply waits for: background promotions). */
bool server__admit(server_t *sv, const server_req_t *r, const session_charge_t *c,
                   uint64_t held_extra);
bool server__lease(server_t *sv, const server_req_t *r, uint16_t rank, const kvt_wire_hash_t *h,
                   uint32_t hit, uint64_t now_ms);
bool server__may_read(const server_t *sv, uint32_t n);

/* --- replies (server.c) --- */

/* A reply of type to the request whose header is req: the same req_id and ns_id, and the same
 * protocol version (every request is answered in the version it came in; PROTOCOL.md). A request
 * of a version the daemon does not speak is answered in protocol 1, which every client decodes. */
static inline kvt_msg_t server__reply_to(const kvt_hdr_t *req, int type)
{
    kvt_msg_t m = {.hdr = {.type = (uint8_t)type, .req_id = req->req_id, .ns_id = req->ns_id}};

    m.hdr.version = req->version >= KVT_PROTO_VERSION_MIN && req->version <= KVT_PROTO_VERSION
                        ? req->version
                        : KVT_PROTO_VERSION_MIN;
    return m;
}

/* Starts a reply in sv->out: part 0 = routing id, part 1 = the head of m (in m->hdr.version).
 * Returns 2. */
size_t server__reply_head(server_t *sv, zmq_msg_t *rid, const kvt_msg_t *m);

/* Initialises p with a copy of len bytes. */
void server__part_bytes(zmq_msg_t *p, const void *data, size_t len);

/* Sends sv->out[0..n) as one reply and counts its bytes; the reply is charged to the session of
 * the request being handled (sv->cur) until ZeroMQ is done with it. A reply ZeroMQ refuses is
 * counted in replies_dropped: a full queue stalls the session, a peer that is gone forgets it
 * (after the handler returns). */
void server__send(server_t *sv, size_t n);

/* ERROR with code and a printf text, counted by class and logged at debug. */
void server__reply_error(server_t *sv, const server_req_t *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A reply of type carrying one status frame (SAVE_BEGIN_OK, SAVE_OK). */
void server__reply_status(server_t *sv, const server_req_t *r, int type, const uint8_t *status,
                          size_t n);

/* --- deferred replies (server.c) ---
 *
 * A reply sent after the handler returned: a load waiting for disk reads today, a commit
 * waiting for an off-loop checksum tomorrow. The handler takes it with server__defer() while it
 * runs and fills parts[] (the reply's frames after the head) as its work completes, from any
 * loop callback; server__deferred_reply() then sends the head and the parts, records the
 * request's latency and frees everything, and may be called before the handler returned.
 * server__deferred_drop() gives it up while the handler still runs (the handler then replies at
 * once). A reply completed while the server closes is dropped (the socket is gone): its parts
 * are closed, returning their loans. */
typedef struct {
    server_t *sv;
    zmq_msg_t rid;
    kvt_hdr_t hdr;
    size_t op_index;
    uint64_t t0;
    session_t *session;      /* charged with `charge` until the reply is sent or dropped */
    session_charge_t charge; /* a request in flight plus what server__admit() accepted */
    size_t nparts;
    zmq_msg_t parts[]; /* initialised empty (zmq_msg_init) */
} server_deferred_t;

/* NULL on allocation failure (nothing changed: reply at once). */
server_deferred_t *server__defer(server_t *sv, const server_req_t *r, size_t nparts);

/* Sends m (its req_id and ns_id are the request's) and the parts; frees d. A reply whose session
 * was forgotten or stalled meanwhile is dropped instead (counted in replies_dropped). */
void server__deferred_reply(server_deferred_t *d, kvt_msg_t *m);

void server__deferred_drop(server_deferred_t *d);

#endif /* KVT_SERVER_INTERNAL_H */
