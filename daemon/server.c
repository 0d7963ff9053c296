/*
 * server.c - request intake, dispatch, replies and lifecycle (see server.h; the handlers are in
 * requests.c, what both share in server_internal.h).
 *
 * Flow: zsock delivers one multipart message [routing id, head, frames...]; the head is decoded
 * by the pure protocol module; the row of its type is found in the operation table
 * (server__ops); the session of the routing id is found or created and, for the rows that need
 * one, the namespace the session declared; the row's handler runs and replies once, at once or
 * through a deferred reply. Decode errors are answered with ERROR carrying the request id
 * whenever the head got that far, and counted by class. The service time of every request is
 * recorded per row when its reply is sent.
 *
 * Replies are built in one scratch array of parts (sv->out) and sent as one multipart message;
 * a deferred reply keeps its own parts until it is sent, or dropped while the server closes.
 *
 * Bounds (contract C3, session.h). Only HELLO creates a session, and not beyond
 * server.max_clients. A session's requests in flight are its deferred replies plus its replies
 * still in ZeroMQ: the last part of every reply is wrapped in a ticket lent through a second
 * zcref, whose return gives the reply's charge (a request, its bytes, the arena bytes it lent)
 * back to the session. A request beyond server.max_in_flight, or whose cost (server__admit)
 * would pass another bound, is answered EBUSY naming the bound. The ROUTER is
 * ZMQ_ROUTER_MANDATORY, so a reply that cannot be queued is seen: a full queue (EAGAIN) stalls
 * the session (its holds released, its requests dropped until its queued replies have left), a
 * peer that is gone (EHOSTUNREACH) forgets it; both count in replies_dropped. The ROUTER's send
 * high-water mark is server.max_in_flight + SERVER_HWM_SLACK, so a client within its window never
 * meets it.
 * Shutdown stops intake (the ROUTER closes with linger 0, returning the loans of unsent
 * replies), then waits for the zero-copy loans (zcref) and for the store to drain before the
 * store, the sessions and the rest are freed.
 *
 * Threads: loop thread only.
 */
#include "server_internal.h"

#include "gates.h"
#include "log.h"
#include "state.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define SWEEP_MS 1000u
#define SERVER_HWM_SLACK 64  /* replies beyond max_in_flight a queue takes (the EBUSY answers) */
#define SERVER_FD_RESERVE 64 /* burst headroom above the guard and own, at least (fd_guard_start)  \
                              */
#define SERVER_FD_SPARE 1024 /* connections the guard takes beyond server.max_clients */
#define SERVER_FD_OWN 256    /* the daemon's own descriptors beside its segments, at most */

static void sweep_cb(uv_timer_t *t)
{
    server_t *sv = t->data;
    uint32_t gone;

    sessions_expire(sv->sessions, uv_now(sv->loop), sv->cfg->server.client_idle_ms);
    store_tick(sv->store, uv_now(sv->loop));
    store_disk_check(sv->store);
    gone = ns_expire(sv->nst);
    if (gone > 0)
        log_debug("namespaces_expired", "count=%u left=%u", gone, ns_count(sv->nst));
}

/* --- replies --- */

static server_err_t err_class(int code)
{
    switch (code) {
    case KVT_WIRE_EVERSION:
        return SERVER_ERR_VERSION;
    case KVT_WIRE_ENONS:
        return SERVER_ERR_UNKNOWN_NS;
    case KVT_WIRE_ETOOBIG:
        return SERVER_ERR_TOO_BIG;
    case KVT_WIRE_EINVAL:
        return SERVER_ERR_INVALID;
    case KVT_WIRE_ECONFLICT:
        return SERVER_ERR_CONFLICT;
    case KVT_WIRE_EUNSUPP:
        return SERVER_ERR_UNSUPPORTED;
    case KVT_WIRE_EBUSY:
        return SERVER_ERR_BUSY;
    case KVT_WIRE_ESTALE:
        return SERVER_ERR_STALE;
    default:
        return SERVER_ERR_MALFORMED;
    }
}

uint32_t server__arena_gen(const server_t *sv)
{
    return store_arena_path(sv->store)[0] != '\0' ? store_arena_gen(sv->store) : 0;
}

/* A request that names arena locations (or pins in the arena): its generation is checked. */
static bool names_arena(const kvt_msg_t *m)
{
    switch (m->hdr.type) {
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
    case KVT_MSG_RELEASE:
        return true;
    case KVT_MSG_LOAD:
        return (m->hdr.flags & KVT_LOAD_SHM) != 0;
    default:
        return false;
    }
}

/* Protocol 2 shared-memory requests carry the generation of the arena the client mapped; one of
 * another generation (a daemon restarted since: its locations, reservations and pins mean
 * nothing now) is ESTALE. Generation 0 is "not checked" (PROTOCOL.md), and protocol 1 requests
 * carry none: they are served as they are (README, "Restarts"). */
static bool arena_stale(const server_t *sv, const kvt_msg_t *m)
{
    return m->hdr.version >= 2 && m->hdr.gen != 0 && names_arena(m) &&
           m->hdr.gen != server__arena_gen(sv);
}

/* A reply's charge, riding on its last part (see the opening comment). */
typedef struct {
    session_t *session;
    session_charge_t charge;
    zmq_msg_t inner; /* the part ZeroMQ sends (its bytes stay here until the ticket returns) */
} ticket_t;

static void ticket_release_cb(void *arg, void *obj)
{
    server_t *sv = arg;
    ticket_t *t = obj;

    zmq_msg_close(&t->inner); /* may return a chunk loan of its own (zcref) */
    session_uncharge(sv->sessions, t->session, &t->charge);
    free(t);
}

/* Wraps *last in a ticket charged to s with c. Without memory the reply goes uncharged. */
static void ticket_attach(server_t *sv, session_t *s, const session_charge_t *c, zmq_msg_t *last)
{
    ticket_t *t = malloc(sizeof *t);

    if (t == NULL)
        return;
    zmq_msg_init(&t->inner);
    zmq_msg_move(&t->inner, last);
    if (zcref_msg_init(sv->tickets, last, zmq_msg_data(&t->inner), zmq_msg_size(&t->inner), t) !=
        0) {
        zmq_msg_move(last, &t->inner);
        zmq_msg_close(&t->inner);
        free(t);
        return;
    }
    t->session = s;
    t->charge = *c;
    session_charge(sv->sessions, s, c);
}

/* What a reply ZeroMQ refused means for its session: a queue that is full stalls it, a peer
 * that is gone forgets it. */
static void session_lost(server_t *sv, session_t *s, int rc)
{
    if (session_dead(s))
        return;
    if (rc == -EHOSTUNREACH) {
        log_debug("client_gone", "in_flight=%u", session_usage(s)->in_flight);
        sessions_forget(sv->sessions, s);
    } else {
        const session_usage_t *u = session_usage(s);
        log_warn("client_stalled",
                 "in_flight=%u reply_bytes=%" PRIu64 " action=dropping_requests_until_it_reads",
                 u->in_flight, u->reply_bytes);
        session_stall(sv->sessions, s);
    }
}

/* Sends sv->out[0..n) charged to s (may be NULL) with lent arena bytes. */
static void send_as(server_t *sv, session_t *s, uint64_t lent, size_t n)
{
    session_charge_t c = {.requests = 1, .lent_bytes = lent};
    int rc;

    for (size_t i = 1; i < n; i++)
        c.reply_bytes += zmq_msg_size(&sv->out[i]);
    sv->counters.bytes_sent += c.reply_bytes;
    if (s != NULL && !session_dead(s))
        ticket_attach(sv, s, &c, &sv->out[n - 1]);
    rc = zsock_send(sv->zs, sv->out, n);
    if (rc == 0)
        return;
    sv->counters.replies_dropped++;
    if (s == NULL)
        return;
    session_reply_dropped(s);
    if (rc != -EAGAIN && rc != -EHOSTUNREACH)
        return;
    if (sv->in_handler && s == sv->cur) {
        if (sv->cur_lost != -EHOSTUNREACH)
            sv->cur_lost = rc; /* acted on when the handler returns */
    } else {
        session_lost(sv, s, rc);
    }
}

void server__send(server_t *sv, size_t n)
{
    send_as(sv, sv->cur, 0, n);
}

size_t server__reply_head(server_t *sv, zmq_msg_t *rid, const kvt_msg_t *m)
{
    size_t hn = kvt_head_size_v(m->hdr.type, m->hdr.version);

    zmq_msg_init(&sv->out[0]);
    zmq_msg_copy(&sv->out[0], rid);
    zmq_msg_init_size(&sv->out[1], hn);
    kvt_head_encode(zmq_msg_data(&sv->out[1]), hn, m);
    return 2;
}

void server__part_bytes(zmq_msg_t *p, const void *data, size_t len)
{
    zmq_msg_init_size(p, len);
    if (len > 0)
        memcpy(zmq_msg_data(p), data, len);
}

static void reply_verror(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                         const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static void reply_verror(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                         const char *fmt, va_list ap)
{
    kvt_msg_t m = server__reply_to(req, KVT_MSG_ERROR);
    char text[KVT_ERRTEXT_MAX + 1];
    int n = vsnprintf(text, sizeof text, fmt, ap);
    size_t k;

    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof text)
        n = sizeof text - 1;
    sv->counters.errors[err_class(code)]++;
    log_debug("request_error", "type=%s req=%" PRIu64 " code=%d text=\"%s\"",
              kvt_msg_type_name(req->type), req->req_id, code, text);
    m.u.error.code = code;
    k = server__reply_head(sv, rid, &m);
    server__part_bytes(&sv->out[k++], text, (size_t)n);
    server__send(sv, k);
}

/* An error of intake, before a handler runs. */
static void reply_error(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void reply_error(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                        const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    reply_verror(sv, rid, req, code, fmt, ap);
    va_end(ap);
}

void server__reply_error(server_t *sv, const server_req_t *r, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    reply_verror(sv, r->rid, &r->m->hdr, code, fmt, ap);
    va_end(ap);
}

void server__reply_status(server_t *sv, const server_req_t *r, int type, const uint8_t *status,
                          size_t n)
{
    kvt_msg_t m = server__reply_to(&r->m->hdr, type);
    size_t k = server__reply_head(sv, r->rid, &m);

    server__part_bytes(&sv->out[k++], status, n);
    server__send(sv, k);
}

/* --- deferred replies --- */

static void record_latency(server_t *sv, size_t op_index, uint64_t t0)
{
    hist_record(&sv->counters.op_latency[op_index], (uv_hrtime() - t0) / 1000);
}

server_deferred_t *server__defer(server_t *sv, const server_req_t *r, size_t nparts)
{
    server_deferred_t *d = malloc(sizeof *d + nparts * sizeof d->parts[0]);

    if (d == NULL)
        return NULL;
    d->sv = sv;
    zmq_msg_init(&d->rid);
    zmq_msg_copy(&d->rid, r->rid);
    d->hdr = r->m->hdr;
    d->op_index = r->op_index;
    d->t0 = r->t0;
    d->session = r->session;
    d->charge = sv->pending;
    d->charge.requests = 1;
    sv->pending = (session_charge_t){0};
    if (d->session != NULL)
        session_charge(sv->sessions, d->session, &d->charge);
    d->nparts = nparts;
    for (size_t i = 0; i < nparts; i++)
        zmq_msg_init(&d->parts[i]);
    sv->deferred = true;
    sv->replies_deferred++;
    return d;
}

static void deferred_free(server_deferred_t *d)
{
    for (size_t i = 0; i < d->nparts; i++)
        zmq_msg_close(&d->parts[i]);
    zmq_msg_close(&d->rid);
    if (d->session != NULL)
        session_uncharge(d->sv->sessions, d->session, &d->charge);
    d->sv->replies_deferred--;
    free(d);
}

void server__deferred_reply(server_deferred_t *d, kvt_msg_t *m)
{
    server_t *sv = d->sv;
    session_t *s = d->session;

    if (sv->zs != NULL && s != NULL && (session_dead(s) || session_stalled(s))) {
        /* nobody to take it: its parts (loans, buffers) go now */
        sv->counters.replies_dropped++;
        session_reply_dropped(s);
    } else if (sv->zs != NULL) {
        size_t k;
        m->hdr.version = d->hdr.version;
        m->hdr.req_id = d->hdr.req_id;
        m->hdr.ns_id = d->hdr.ns_id;
        k = server__reply_head(sv, &d->rid, m);
        for (size_t i = 0; i < d->nparts; i++) {
            zmq_msg_init(&sv->out[k + i]);
            zmq_msg_move(&sv->out[k + i], &d->parts[i]);
        }
        send_as(sv, s, d->charge.lent_bytes, k + d->nparts);
        record_latency(sv, d->op_index, d->t0);
    }
    deferred_free(d);
}

void server__deferred_drop(server_deferred_t *d)
{
    d->sv->deferred = false;
    deferred_free(d);
}

/* --- bounds (contract C3) --- */

/* The figures of bound b for the message of an EBUSY answer. */
static void bound_figures(const server_t *sv, const session_t *s, session_bound_t b,
                          const session_charge_t *c, uint64_t held_extra, uint64_t *limit,
                          uint64_t *have, uint64_t *want)
{
    const session_limits_t *l = sessions_limits(sv->sessions);
    const session_usage_t *u = s != NULL ? session_usage(s) : NULL;
    session_usage_t all;

    sessions_usage(sv->sessions, uv_now(sv->loop), &all);
    *want = 0;
    switch (b) {
    case SESSION_BOUND_IN_FLIGHT:
        *limit = l->in_flight, *have = u ? u->in_flight : 0, *want = 1;
        break;
    case SESSION_BOUND_REPLY_BYTES:
        *limit = l->reply_bytes, *have = u ? u->reply_bytes : 0, *want = c->reply_bytes;
        break;
    case SESSION_BOUND_MAX_REPLY_BYTES:
        *limit = l->max_reply_bytes, *have = all.reply_bytes, *want = c->reply_bytes;
        break;
    case SESSION_BOUND_HELD:
        *limit = l->held_bytes, *have = u ? session_usage_held(u) : 0;
        *want = c->lent_bytes + held_extra;
        break;
    case SESSION_BOUND_MAX_HELD:
        *limit = l->max_held_bytes, *have = session_usage_held(&all);
        *want = c->lent_bytes + held_extra;
        break;
    case SESSION_BOUND_DISK_READS:
        *limit = l->disk_reads, *have = u ? u->disk_reads : 0, *want = c->disk_reads;
        break;
    case SESSION_BOUND_MAX_DISK_READS:
        *limit = sv->cfg->disk.max_reads_queued, *have = store_disk_reads(sv->store);
        *want = c->disk_reads;
        break;
    case SESSION_BOUND_NAMESPACES:
        *limit = l->namespaces, *have = u ? u->namespaces : 0, *want = 1;
        break;
    case SESSION_BOUND_CLIENTS:
        *limit = l->max_sessions, *have = sessions_count(sv->sessions), *want = 1;
        break;
    default:
        *limit = *have = 0;
        break;
    }
}

/* EBUSY for request r over bound b, counted. */
static void refuse(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, session_t *s,
                   session_bound_t b, const session_charge_t *c, uint64_t held_extra)
{
    static const session_charge_t none = {0};
    uint64_t limit, have, want;

    if (c == NULL)
        c = &none;
    bound_figures(sv, s, b, c, held_extra, &limit, &have, &want);
    session_refused(sv->sessions, s, b);
    reply_error(sv, rid, req, KVT_WIRE_EBUSY,
                "%s: over %s (%" PRIu64 "): %s %" PRIu64 ", the request needs %" PRIu64,
                kvt_msg_type_name(req->type), session_bound_key(b), limit,
                b == SESSION_BOUND_MAX_REPLY_BYTES || b == SESSION_BOUND_MAX_HELD ||
                        b == SESSION_BOUND_MAX_DISK_READS || b == SESSION_BOUND_CLIENTS
                    ? "the daemon has"
                    : "this client has",
                have, want);
}

bool server__admit(server_t *sv, const server_req_t *r, const session_charge_t *c,
                   uint64_t held_extra)
{
    session_charge_t cc = *c;
    session_bound_t b = SESSION_BOUND_NONE;

    cc.requests = 0;
    if (r->session != NULL)
        b = sessions_check(sv->sessions, r->session, uv_now(sv->loop), &cc, held_extra);
    if (b != SESSION_BOUND_NONE) { /* count back what ZeroMQ is done with, and look again */
        zcref_drain(sv->tickets);
        zcref_drain(sv->zc);
        b = sessions_check(sv->sessions, r->session, uv_now(sv->loop), &cc, held_extra);
    }
    if (b == SESSION_BOUND_NONE && !server__may_read(sv, cc.disk_reads))
        b = SESSION_BOUND_MAX_DISK_READS;
    if (b != SESSION_BOUND_NONE) {
        refuse(sv, r->rid, &r->m->hdr, r->session, b, &cc, held_extra);
        return false;
    }
    sv->pending = cc;
    return true;
}

bool server__may_read(const server_t *sv, uint32_t n)
{
    uint32_t max = sv->cfg->disk.max_reads_queued;
    uint32_t have = store_disk_reads(sv->store);

    return n == 0 || (n <= max && have <= max - n);
}

bool server__lease(server_t *sv, const server_req_t *r, uint16_t rank, const kvt_wire_hash_t *h,
                   uint32_t hit, uint64_t now_ms)
{
    static const session_charge_t none = {0};
    uint64_t cost = store_lease_cost(sv->store, r->ns, rank, h, hit, now_ms);

    if (cost > 0 && r->session != NULL &&
        sessions_check(sv->sessions, r->session, now_ms, &none, cost) != SESSION_BOUND_NONE) {
        zcref_drain(sv->tickets);
        if (sessions_check(sv->sessions, r->session, now_ms, &none, cost) != SESSION_BOUND_NONE) {
            sv->counters.leases_capped++;
            return false;
        }
    }
    store_lease(sv->store, r->ns, rank, h, hit, now_ms);
    if (r->session != NULL)
        session_lease(sv->sessions, r->session, cost, now_ms + sv->cfg->ram.lease_ms);
    return true;
}

/* --- intake --- */

static const server_op_t *op_find(int type, size_t *index)
{
    for (size_t i = 0; i < server__nops; i++) {
        if (server__ops[i].type == type) {
            *index = i;
            return &server__ops[i];
        }
    }
    return NULL;
}

/* The requests a stopping daemon refuses: those that start storing bytes. Commits and releases
 * of shared-memory work under way are still taken (they finish what is in flight). */
static bool starts_save(int type)
{
    return type == KVT_MSG_SAVE_BEGIN || type == KVT_MSG_SAVE_DATA || type == KVT_MSG_SAVE_RESERVE;
}

static void recv_cb(void *arg, zmq_msg_t *parts, size_t nparts, bool truncated)
{
    server_t *sv = arg;
    zmq_msg_t *rid = &parts[0];
    uint64_t now = uv_now(sv->loop);
    server_req_t r = {.rid = rid, .parts = parts, .nparts = nparts, .t0 = uv_hrtime()};
    session_t *s = NULL;
    kvt_msg_t req;
    int rc;

    sv->counters.requests++;
    sv->deferred = false;
    for (size_t i = 1; i < nparts; i++) {
        sv->frames[i - 1].data = zmq_msg_data(&parts[i]);
        sv->frames[i - 1].len = zmq_msg_size(&parts[i]);
    }
    rc = kvt_msg_decode(sv->frames, nparts - 1, &sv->lim, &req);
    if (rc == 0 && truncated)
        rc = KVT_WIRE_ETOOBIG;
    if (rc == 0) {
        /* Only HELLO makes a session; other requests of an unknown client go on without one. */
        bool hello = req.hdr.type == KVT_MSG_HELLO;
        int g = sessions_get(sv->sessions, zmq_msg_data(rid), zmq_msg_size(rid), now, hello, &s);
        if (g == -EBUSY) {
            refuse(sv, rid, &req.hdr, NULL, SESSION_BOUND_CLIENTS, NULL, 0);
            return;
        }
        if (hello && s == NULL) {
            reply_error(sv, rid, &req.hdr, KVT_WIRE_EBUSY, "hello: out of memory for sessions");
            return;
        }
    }
    sv->cur = s; /* replies from here on are charged to s */
    if (rc != 0) {
        char vwhy[64];
        const char *why =
            rc == KVT_WIRE_EPROTO && !truncated ? kvt_decode_why(sv->frames, nparts - 1) : "";
        if (rc == KVT_WIRE_EVERSION) { /* say what would be understood */
            snprintf(vwhy, sizeof vwhy, "version %u; this daemon speaks %d to %d",
                     (unsigned)req.hdr.version, KVT_PROTO_VERSION_MIN, KVT_PROTO_VERSION);
            why = vwhy;
        }
        reply_error(sv, rid, &req.hdr, rc, "%s: %s%s%s%s", kvt_msg_type_name(req.hdr.type),
                    kvt_wire_strerror(rc), truncated ? " (too many frames)" : "",
                    why[0] != '\0' ? ": " : "", why);
        goto out;
    }
    if (s != NULL && session_stalled(s)) {
        /* it does not read its replies: this one would only queue behind them */
        sv->counters.replies_dropped++;
        session_reply_dropped(s);
        goto out;
    }
    r.m = &req;
    r.op = op_find(req.hdr.type, &r.op_index);
    if (r.op == NULL) {
        reply_error(sv, rid, &req.hdr, KVT_WIRE_EUNSUPP, "%s is not a request",
                    kvt_msg_type_name(req.hdr.type));
        goto out;
    }
    if (arena_stale(sv, &req)) {
        reply_error(sv, rid, &req.hdr, KVT_WIRE_ESTALE,
                    "%s: arena generation %u is not the daemon's (%u): say HELLO again and map "
                    "the arena anew",
                    kvt_msg_type_name(req.hdr.type), req.hdr.gen, server__arena_gen(sv));
        goto out;
    }
    if (sv->draining && starts_save(req.hdr.type)) {
        reply_error(sv, rid, &req.hdr, KVT_WIRE_EBUSY,
                    "%s: the daemon is stopping and takes no new saves",
                    kvt_msg_type_name(req.hdr.type));
        goto out;
    }
    if (s != NULL && session_usage(s)->in_flight >= sessions_limits(sv->sessions)->in_flight)
        zcref_drain(sv->tickets); /* replies ZeroMQ is done with may not be counted back yet */
    if (s != NULL && session_usage(s)->in_flight >= sessions_limits(sv->sessions)->in_flight) {
        refuse(sv, rid, &req.hdr, s, SESSION_BOUND_IN_FLIGHT, NULL, 0);
        goto out;
    }
    r.session = s;
    if (r.op->needs_ns) {
        r.ns = s != NULL && session_has(s, req.hdr.ns_id) ? ns_get(sv->nst, req.hdr.ns_id) : NULL;
        if (r.ns == NULL) {
            reply_error(sv, rid, &req.hdr, KVT_WIRE_ENONS,
                        "namespace %u was not declared by this client (send hello first)",
                        req.hdr.ns_id);
            goto out;
        }
    }
    if (s != NULL)
        session_ref(s); /* the handler may forget it (a reply to a peer that is gone) */
    sv->in_handler = true;
    sv->cur_lost = 0;
    r.op->handler(sv, &r);
    sv->in_handler = false;
    sv->pending = (session_charge_t){0};
    if (r.op->ns_timed) {
        r.ns->lookup_us += (uv_hrtime() - r.t0) / 1000;
        r.ns->lookups++;
    }
    if (!sv->deferred)
        record_latency(sv, r.op_index, r.t0);
    if (s != NULL) {
        if (sv->cur_lost != 0)
            session_lost(sv, s, sv->cur_lost);
        session_unref(sv->sessions, s);
    }
out:
    sv->cur = NULL;
}

/* --- lifecycle --- */

static void zc_release_cb(void *arg, void *obj)
{
    server_t *sv = arg;

    store_unpin(sv->store, obj);
}

/* The bounds of contract C3 from the config (session.h). */
static void session_limits(const config_t *cfg, session_limits_t *l)
{
    double cap = (double)cfg->ram.capacity_bytes;

    *l = (session_limits_t){.max_sessions = cfg->server.max_clients,
                            .in_flight = cfg->server.max_in_flight,
                            .namespaces = cfg->server.session_max_namespaces,
                            .reply_bytes = cfg->server.session_reply_bytes,
                            .max_reply_bytes = cfg->server.max_reply_bytes,
                            .held_bytes = (uint64_t)(cap * cfg->ram.session_held_share),
                            .max_held_bytes = (uint64_t)(cap * cfg->ram.max_held_share),
                            .disk_reads = cfg->disk.session_max_reads};
}

/* Frees what server_new made (any part may be missing). The ZeroMQ socket and the timer are
 * closed already. */
static void server_free(server_t *sv)
{
    assert(sv->replies_deferred == 0); /* store_close completed every pending load */
    sessions_destroy(&sv->sessions);   /* reclaims holds: before the store goes */
    store_destroy(&sv->store);
    admission_destroy(&sv->admission);
    ns_table_destroy(&sv->nst);
    free(sv->rank_hits);
    free(sv->offs);
    free(sv->lens);
    free(sv->status);
    free(sv->frames);
    free(sv->out);
    free(sv->counters.op_latency);
    free(sv);
}

/*
 * The descriptor limit and its guard (0.2.14; zsock.h, zsock_guard_fds). The soft limit of
 * RLIMIT_NOFILE is raised to the hard one first (a shell's 1024 under a hard limit of a million;
 * the unit sets both to 65536, and its seccomp filter refuses setrlimit: then nothing changes).
 *
 * The guard is a descriptor number. Let own be what the daemon holds when the server starts (the
 * lowest free number then), plus a descriptor per segment at disk.capacity_bytes, plus
 * SERVER_FD_OWN more of its own (status connections, the checkpoint, the journal). The guard is
 * own + server.max_clients + SERVER_FD_SPARE (kvtierctl runs, reconnections whose old connection
 * has not closed yet), and at most the limit less own less a burst headroom (an eighth of the
 * limit, at least SERVER_FD_RESERVE). Connections take numbers below the guard; the daemon's own
 * descriptors opened later (segments, status connections) may land above it when connections
 * hold the low numbers, so the limit must leave room for them above the guard, and for the
 * burst: the accepts ZeroMQ's I/O thread makes before the loop reads their events. At the
 * defaults and the unit's LimitNOFILE=65536 that burst is about 57,000 connections; with a limit
 * of 1024 (a guard of 896 in a first version, which left 128) a burst of 4000 silent
 * connections still aborted the daemon, and 64 status connections held on top of silent
 * connections up to the guard took the rest (the session-16 probe). So the connections open at
 * once are bounded by the clients the daemon takes, not by the descriptor limit, and so is what
 * ZeroMQ holds for them. Without a limit to read, or with one too small for own and a headroom,
 * there is no guard (logged).
 */
static void fd_guard_start(server_t *sv, void *zctx)
{
    const config_t *cfg = sv->cfg;
    struct rlimit rl;
    uint64_t reserve, guard, own;
    int rc, lowest;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl.rlim_cur = rl.rlim_max;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT_MAX)
        rl.rlim_cur = INT_MAX;
    sv->counters.fd_limit = (uint64_t)rl.rlim_cur;
    reserve = rl.rlim_cur / 8 > SERVER_FD_RESERVE ? rl.rlim_cur / 8 : SERVER_FD_RESERVE;
    lowest = fcntl(0, F_DUPFD_CLOEXEC, 0);
    if (lowest >= 0)
        close(lowest);
    own = (uint64_t)(lowest > 0 ? lowest : 0) + SERVER_FD_OWN;
    if (cfg->disk.enabled && cfg->disk.segment_bytes > 0)
        own += cfg->disk.capacity_bytes / cfg->disk.segment_bytes + 2;
    guard = own + cfg->server.max_clients + SERVER_FD_SPARE;
    if (guard + own + reserve > rl.rlim_cur)
        guard = rl.rlim_cur > own + reserve ? rl.rlim_cur - own - reserve : 0;
    if (guard <= own) {
        log_warn("fd_guard",
                 "fd_limit=%" PRIu64 " own_fds=%" PRIu64 " reason=\"too few descriptors for the "
                 "daemon's own and a reserve of %" PRIu64 ": connections are not guarded, and at "
                 "the limit ZeroMQ aborts the daemon; raise the limit (LimitNOFILE=)\"",
                 sv->counters.fd_limit, own, reserve);
        return;
    }
    rc = zsock_guard_fds(sv->zs, sv->loop, zctx, cfg->server.endpoint, (int)guard,
                         &sv->counters.connections_shed);
    if (rc != 0) {
        log_warn("fd_guard", "endpoint=%s error=\"%s\" action=unguarded", cfg->server.endpoint,
                 zmq_strerror(-rc));
        return;
    }
    sv->counters.fd_guard = guard;
    log_info("fd_guard", "fd_limit=%" PRIu64 " guard=%" PRIu64 " own_fds=%" PRIu64,
             sv->counters.fd_limit, sv->counters.fd_guard, own);
}

int server_new(uv_loop_t *loop, void *zctx, const config_t *cfg, server_t **out)
{
    server_t *sv = calloc(1, sizeof *sv);
    size_t maxc = cfg->server.max_chunks_per_request;
    session_limits_t limits;
    int rc = -ENOMEM;

    if (sv == NULL)
        return -ENOMEM;
    sv->loop = loop;
    sv->cfg = cfg;
    sv->start_ms = uv_now(loop);
    sv->lim.max_hashes = maxc;
    sv->lim.max_payload_bytes = cfg->ram.max_chunk_bytes;
    sv->counters.op_latency = calloc(server__nops, sizeof *sv->counters.op_latency);
    sv->out = calloc(maxc + 3, sizeof *sv->out);
    sv->frames = calloc(maxc + 2, sizeof *sv->frames);
    sv->status = calloc(maxc, 1);
    sv->rank_hits = calloc(KVT_WORLD_MAX, sizeof *sv->rank_hits);
    sv->offs = calloc(maxc, sizeof *sv->offs);
    sv->lens = calloc(maxc, sizeof *sv->lens);
    sv->nst = ns_table_new(cfg->server.max_namespaces);
    sv->admission = admission_new();
    if (sv->counters.op_latency == NULL || sv->out == NULL || sv->frames == NULL ||
        sv->status == NULL || sv->rank_hits == NULL || sv->offs == NULL || sv->lens == NULL ||
        sv->nst == NULL || sv->admission == NULL)
        goto fail;
    rc = store_new(cfg, sv->nst, &sv->store);
    if (rc != 0) {
        log_error("ram_arena", "path=\"%s\" capacity_bytes=%" PRIu64 " error=\"%s\"%s",
                  cfg->ram.arena_path, cfg->ram.capacity_bytes, strerror(-rc),
                  rc == -ENOSPC  ? " hint=\"the arena's filesystem has less room than the arena "
                                   "(ram.capacity_bytes + 2 x disk.write_buffer_bytes with the "
                                   "disk tier + 4 KiB): a /dev/shm too small, or on hugetlbfs too "
                                   "few free vm.nr_hugepages\""
                  : rc == -EBUSY ? " hint=\"another kvtierd holds this arena's lock "
                                   "(ram.arena_path): two daemons cannot share an arena\""
                                 : "");
        goto fail;
    }
    session_limits(cfg, &limits);
    sv->sessions = sessions_new(&limits, sv->store, sv->nst);
    if (sv->sessions == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = zsock_new(loop, zctx, cfg->server.endpoint, maxc + 3,
                   (int64_t)(cfg->ram.max_chunk_bytes + 65536),
                   (int)cfg->server.max_in_flight + SERVER_HWM_SLACK, recv_cb, sv, &sv->zs);
    if (rc != 0) {
        log_error("bind", "endpoint=%s error=\"%s%s\"", cfg->server.endpoint, zmq_strerror(-rc),
                  rc == -EADDRINUSE ? ": a process listens on it (another kvtierd?)"
                  : rc == -EEXIST   ? ": a file that is not a socket is there (binding would "
                                      "delete it)"
                                    : "");
        goto fail;
    }
    fd_guard_start(sv, zctx);
    sv->zc = zcref_new(loop, zc_release_cb, sv);
    sv->tickets = sv->zc != NULL ? zcref_new(loop, ticket_release_cb, sv) : NULL;
    if (sv->tickets == NULL) {
        rc = -ENOMEM;
        zsock_close(&sv->zs); /* its handles close when the caller runs the loop */
        if (sv->zc != NULL)   /* frees itself in its close callbacks (no loan is out) */
            zcref_close(&sv->zc, NULL, NULL);
        goto fail;
    }
    /* After the bind: a daemon that cannot bind never touches the disk directory. Recovery runs
     * here, before the loop serves the first request. */
    if (store_attach_disk(sv->store, loop) != 0)
        log_error("disk", "dir=%s error=\"%s\" action=running_without_disk_tier%s", cfg->disk.dir,
                  strerror(-store_disk_error(sv->store)),
                  store_disk_error(sv->store) == -EBUSY
                      ? " hint=\"another kvtierd holds this directory's lock (disk.dir/lock): two "
                        "daemons cannot share a disk directory\""
                      : "");
    /* the gates' learned state and the leases of the last clean stop, over the recovered tiers */
    if (store_state_path(sv->store, sv->state_path, sizeof sv->state_path))
        state_load(sv->state_path, sv->nst, sv->store, cfg, uv_now(loop),
                   &sv->counters.state_namespaces, &sv->counters.state_leases);
    sv->lm = loopmon_new(loop); /* status without it shows zeros: not a reason to fail */
    uv_timer_init(loop, &sv->sweep);
    sv->sweep.data = sv;
    uv_timer_init(loop, &sv->drain_timer);
    sv->drain_timer.data = sv;
    /* Holds expire within a quarter of their time after their deadline. */
    sv->sweep_ms = cfg->ram.shm_hold_ms / 4 < SWEEP_MS ? cfg->ram.shm_hold_ms / 4 : SWEEP_MS;
    uv_timer_start(&sv->sweep, sweep_cb, sv->sweep_ms, sv->sweep_ms);
    *out = sv;
    return 0;

fail:
    server_free(sv);
    return rc;
}

static void server_free_cb(uv_handle_t *h)
{
    server_free(h->data);
}

/* Shutdown waits for two things before the arena and the index go: every chunk lent to ZeroMQ
 * is back (zcref), and the disk tier drained (store_close: queued reads cancelled, running jobs
 * and the last flush finished; pending loads completed on the way, returning their loans). */
static void close_step(server_t *sv)
{
    if (--sv->close_waits == 0)
        uv_close((uv_handle_t *)&sv->sweep, server_free_cb);
}

static void zc_closed_cb(void *arg)
{
    close_step(arg);
}

static void store_closed_cb(void *arg)
{
    close_step(arg);
}

static void drain_closed_cb(uv_handle_t *h)
{
    close_step(h->data);
}

void server_close(server_t **psv)
{
    server_t *sv = *psv;

    if (sv == NULL)
        return;
    zsock_close(&sv->zs); /* linger 0: ZeroMQ drops unsent replies and returns their loans */
    if (sv->state_path[0] != '\0') /* no request runs any more: the gates' state is final */
        state_save(sv->state_path, sv->nst, sv->store, uv_now(sv->loop));
    loopmon_close(&sv->lm);
    sv->close_waits = 4;
    uv_close((uv_handle_t *)&sv->drain_timer, drain_closed_cb);
    store_close(sv->store, store_closed_cb, sv);
    zcref_close(&sv->zc, zc_closed_cb, sv);
    zcref_close(&sv->tickets, zc_closed_cb, sv);
    *psv = NULL;
}

/* --- what stats.c reads --- */

size_t server_op_count(void)
{
    return server__nops;
}

const char *server_op_name(size_t i)
{
    return i < server__nops ? server__ops[i].name : NULL;
}

void server_view(const server_t *sv, server_view_t *out)
{
    *out = (server_view_t){.now_ms = uv_now(sv->loop),
                           .start_ms = sv->start_ms,
                           .cfg = sv->cfg,
                           .store = sv->store,
                           .sessions = sv->sessions,
                           .namespaces = sv->nst,
                           .admission = sv->admission,
                           .counters = &sv->counters,
                           .loop = sv->lm,
                           .config = &sv->config_state,
                           .draining = sv->draining};
}

server_config_state_t *server_config_state(server_t *sv)
{
    return &sv->config_state;
}

/* --- graceful stop, reload, invalidation --- */

#define DRAIN_POLL_MS 10u

static void drain_cb(uv_timer_t *t)
{
    server_t *sv = t->data;
    uint64_t now = uv_now(sv->loop), reserved = sessions_reserved_bytes(sv->sessions);

    if ((sv->replies_deferred > 0 || reserved > 0) && now < sv->drain_deadline)
        return;
    uv_timer_stop(t);
    log_info("stop_drained", "deferred_replies=%" PRIu64 " reserved_bytes=%" PRIu64 " timed_out=%d",
             sv->replies_deferred, reserved, sv->replies_deferred > 0 || reserved > 0);
    sv->drain_done(sv->drain_arg);
}

void server_drain(server_t *sv, uint32_t timeout_ms, void (*done)(void *arg), void *arg)
{
    sv->draining = true;
    sv->drain_done = done;
    sv->drain_arg = arg;
    sv->drain_deadline = uv_now(sv->loop) + timeout_ms;
    log_info("stop_draining",
             "deferred_replies=%" PRIu64 " reserved_bytes=%" PRIu64 " timeout_ms=%u",
             sv->replies_deferred, sessions_reserved_bytes(sv->sessions), timeout_ms);
    uv_timer_start(&sv->drain_timer, drain_cb, 0, DRAIN_POLL_MS);
}

void server_reconfigure(server_t *sv)
{
    uint64_t sweep_ms;

    for (uint32_t slot = 0; slot < NS_MAX; slot++) {
        ns_t *ns = ns_at(sv->nst, slot);
        if (ns != NULL)
            gates_set_cfg(ns->gates, config_gates_for(sv->cfg, ns->model));
    }
    sweep_ms = sv->cfg->ram.shm_hold_ms / 4 < SWEEP_MS ? sv->cfg->ram.shm_hold_ms / 4 : SWEEP_MS;
    if (sweep_ms != sv->sweep_ms) {
        sv->sweep_ms = sweep_ms;
        uv_timer_start(&sv->sweep, sweep_cb, sweep_ms, sweep_ms);
    }
}

int server_drops_written(server_t *sv, void (*cb)(void *arg, int rc), void *arg)
{
    return store_drops_written(sv->store, cb, arg);
}

int server_drop_ns(server_t *sv, const char *model, const char *revision, server_drop_t *out,
                   size_t max)
{
    int matched = 0;

    for (uint32_t slot = 0; slot < NS_MAX; slot++) {
        ns_t *ns = ns_at(sv->nst, slot);
        uint32_t id;
        store_drop_t d;
        char qm[2 * KVT_MODEL_MAX], qr[2 * KVT_REVISION_MAX];

        if (ns == NULL || strcmp(ns->model, model) != 0 ||
            (revision != NULL && strcmp(ns->revision, revision) != 0))
            continue;
        id = ns->id;
        if (store_drop_ns(sv->store, ns, &d) != 0)
            return -ENOMEM;
        ns->drops++;
        ns->drop_chunks += d.chunks;
        ns->drop_bytes += d.bytes;
        log_info("drop",
                 "ns=\"%s\" revision=\"%s\" id=%u chunks=%" PRIu64 " bytes=%" PRIu64
                 " ram_chunks=%" PRIu64 " disk_chunks=%" PRIu64 " pinned=%" PRIu64,
                 log_quote(qm, sizeof qm, ns->model), log_quote(qr, sizeof qr, ns->revision), id,
                 d.chunks, d.bytes, d.ram_chunks, d.disk_chunks, d.pinned);
        if (d.tombstone_error != 0)
            log_warn("drops_write_failed",
                     "ns=\"%s\" error=\"%s\" (a restart may bring the disk "
                     "copies back)",
                     qm, strerror(-d.tombstone_error));
        if ((size_t)matched < max)
            out[matched] = (server_drop_t){.ns_id = id, .dropped = d};
        matched++;
    }
    return matched;
}
