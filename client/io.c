/*
 * io.c - libkvtier's I/O thread: the one thread that owns a client's DEALER socket (see
 * internal.h for the request and client structures, kvtier.h for what callers see).
 *
 * Design: a loop of turns. Each turn takes what submitters queued (under c->mu, briefly),
 * expires requests whose deadline passed, sends what the window allows, hands finished requests
 * to their takers (under c->mu, once per turn), then waits in zmq_poll on the socket and on a
 * wake eventfd (submitters write it only when the thread sleeps) until a reply arrives, a
 * submitter wakes it, or the earliest deadline or release is due, and handles up to
 * KVT_RECV_BATCH replies. zmq_poll reads ZMQ_EVENTS itself, so ZeroMQ's edge-triggered fd never
 * leaks out: callers see only the completion eventfd.
 *
 * Requests: one request holds one place in the window from its first message to its completion
 * and has at most one message on the wire; its steps follow one another inside the reply
 * handler (requests.c: the message of every step, the handler of every reply, the copies), so
 * the steps of different requests interleave freely. Replies are matched by req_id; one whose
 * request is gone (timed out) is dropped. Payload frames are copied into buffers of the
 * client's send pool (pool.c) lent to ZeroMQ, never the caller's own: a frame can still sit in
 * ZeroMQ's queue after its request timed out and its buffer went back to the caller.
 *
 * The window: at most c->window messages are on the wire (HELLO_OK max_in_flight, or the
 * connect option when smaller); the rest wait in submission order. A RELEASE and a request that
 * timed out keep their place until their reply comes (or a timeout later), since the daemon
 * still counts them. Releases (a pin freed, a copied shared-memory load, a checksum mismatch)
 * are batched: one RELEASE message carries every release queued, and goes out just before the
 * next request, or KVT_RELEASE_DELAY_MS after the first was queued; nobody waits for its reply.
 *
 * Recovery: ENONS (the daemon forgot the session: a restart, idle expiry) or ESTALE (another
 * arena generation) puts the request on the waiting list and starts one recovery for all: HELLO
 * again, then, on the shared-memory path, ARENA, mapping the arena anew when the daemon's file
 * or generation differs from ours (a restarted daemon recreates its file: writing into the old
 * mapping would reach nobody). Meanwhile no new request starts. When it completes the waiting
 * requests start again from their first step (their one retry); a request that was sent before
 * the last recovery completed and is answered ENONS restarts without another HELLO. The connect
 * HELLO (and ARENA) is handled the same way, for a waiting kvt_connect.
 *
 * Timeouts: every request has its deadline from its submit; past it, it completes with
 * KVT_ETIMEDOUT wherever it is (pending, waiting, on the wire), and the others go on.
 *
 * Parking and synchronous calls: when nothing is in progress (messages answered by nobody may
 * remain) the I/O thread parks: it leaves the socket alone and waits on the wake eventfd only.
 * A synchronous call that finds it parked runs the I/O itself, on its own thread, with the same
 * functions (kvt__io_inline): its request costs one thread hand-off less each way, as in a
 * library without an I/O thread. Whoever runs the I/O owns every "io" field; the hand-over is
 * under c->mu (c->parked, c->inline_active), which orders the memory accesses (ZeroMQ allows a
 * socket to move between threads across a full barrier). A submit meanwhile wakes the parked
 * thread, which asks for the I/O back (c->yield_req, the yield eventfd) and waits for it; the
 * synchronous call then gives it back at once and waits for its request like any other.
 *
 * Threads: this file runs on the I/O thread only, except where a function says otherwise.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- queues --- */

static void q_push(req_t **head, req_t **tail, req_t *r)
{
    r->next = NULL;
    if (*tail != NULL)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static void q_push_front(req_t **head, req_t **tail, req_t *r)
{
    r->next = *head;
    *head = r;
    if (*tail == NULL)
        *tail = r;
}

static req_t *q_pop(req_t **head, req_t **tail)
{
    req_t *r = *head;

    if (r != NULL) {
        *head = r->next;
        if (*head == NULL)
            *tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* Whether the window has room for one more message: those on the wire, and the saves between
 * their reservation and their commit (copier.c), which keep their place while they copy. */
static bool window_free(const kvt_client_t *c)
{
    return c->nwires + c->cp_saves < c->window;
}

/* Whether requests fail fast now: the link is down and the down wait is not -1 ("the link"). */
static bool link_held(const kvt_client_t *c)
{
    return c->link_down && atomic_load_explicit(&c->down_wait_ms, memory_order_relaxed) >= 0;
}

static void note_deadline(kvt_client_t *c, int64_t t)
{
    if (t < c->next_expiry)
        c->next_expiry = t;
}

static void pend_push(kvt_client_t *c, req_t *r)
{
    q_push(&c->pend_head, &c->pend_tail, r);
    atomic_fetch_add_explicit(&c->n_pending, 1, memory_order_relaxed);
    note_deadline(c, r->deadline_ms);
}

static void pend_push_front(kvt_client_t *c, req_t *r)
{
    q_push_front(&c->pend_head, &c->pend_tail, r);
    atomic_fetch_add_explicit(&c->n_pending, 1, memory_order_relaxed);
    note_deadline(c, r->deadline_ms);
}

static req_t *pend_pop(kvt_client_t *c)
{
    req_t *r = q_pop(&c->pend_head, &c->pend_tail);

    if (r != NULL)
        atomic_fetch_sub_explicit(&c->n_pending, 1, memory_order_relaxed);
    return r;
}

/* --- the window: messages on the wire --- */

static int wire_add(kvt_client_t *c, uint64_t id, req_t *r, int64_t expire_ms)
{
    if (c->nwires == c->wires_cap) {
        size_t cap = c->wires_cap ? c->wires_cap * 2 : 64;
        wire_t *w = realloc(c->wires, cap * sizeof *w);
        if (w == NULL)
            return KVT_ENOMEM;
        c->wires = w;
        c->wires_cap = cap;
    }
    c->wires[c->nwires++] = (wire_t){.id = id, .req = r, .expire_ms = expire_ms};
    if (r != NULL)
        atomic_fetch_add_explicit(&c->n_inflight, 1, memory_order_relaxed);
    /* a request's deadline too: one that was off every list meanwhile (its copies, copier.c)
     * may have been left out when expire() last rebuilt next_expiry */
    note_deadline(c, r != NULL ? r->deadline_ms : expire_ms);
    return 0;
}

static void wire_remove(kvt_client_t *c, size_t i)
{
    if (c->wires[i].req != NULL)
        atomic_fetch_sub_explicit(&c->n_inflight, 1, memory_order_relaxed);
    c->wires[i] = c->wires[--c->nwires];
}

/* Wire entry i's request completes without its reply: the entry stays, answered by nobody, until
 * its reply comes or expire_ms. */
static void wire_forget(kvt_client_t *c, size_t i, int64_t expire_ms)
{
    if (c->wires[i].req != NULL)
        atomic_fetch_sub_explicit(&c->n_inflight, 1, memory_order_relaxed);
    c->wires[i].req = NULL;
    c->wires[i].expire_ms = expire_ms;
    note_deadline(c, expire_ms);
}

static long wire_find(const kvt_client_t *c, uint64_t id)
{
    for (size_t i = 0; i < c->nwires; i++)
        if (c->wires[i].id == id)
            return (long)i;
    return -1;
}

/* --- sending --- */

#define KVT_POOL_MIN (64u << 10) /* smaller payloads are copied by zmq_send */

/* Sends one frame of len bytes: copied into a pool buffer lent to ZeroMQ when pooled and large
 * (pool.c), else by zmq_send. */
static int send_one(kvt_client_t *c, const void *p, size_t len, int flags, bool pooled)
{
    void *buf = pooled && len >= KVT_POOL_MIN ? kvt__pool_take(&c->pool, len) : NULL;
    int rc;

    if (buf != NULL) {
        zmq_msg_t msg;
        memcpy(buf, p, len);
        zmq_msg_init_data(&msg, buf, len, kvt__pool_release, NULL);
        do {
            rc = zmq_msg_send(&msg, c->sock, flags);
        } while (rc < 0 && errno == EINTR);
        if (rc < 0)
            zmq_msg_close(&msg); /* returns the buffer */
        return rc;
    }
    do {
        rc = zmq_send(c->sock, p, len, flags);
    } while (rc < 0 && errno == EINTR);
    return rc;
}

/* Sends the message m (head) with its variable frames, copying them into ZeroMQ (frames from
 * pool_from on through the send pool). 0 or KVT_ESYS (the socket refused: nothing or
 * everything of the message was queued, ZeroMQ sends multipart messages whole). */
static int send_frames(kvt_client_t *c, const kvt_msg_t *m, const kvt_frame_t *f, size_t nf,
                       size_t pool_from)
{
    static const uint8_t empty;
    uint8_t head[KVT_HDR_BYTES + 96];
    size_t hl = kvt_head_encode(head, sizeof head, m);

    if (hl == 0)
        return KVT_EPROTO;
    for (size_t i = 0; i <= nf; i++) {
        const void *p = i == 0 ? head : f[i - 1].data;
        size_t len = i == 0 ? hl : f[i - 1].len;
        int flags = ZMQ_DONTWAIT | (i < nf ? ZMQ_SNDMORE : 0);

        if (len == 0 || p == NULL)
            p = &empty;
        if (send_one(c, p, len, flags, i > pool_from) < 0)
            return KVT_ESYS;
    }
    return 0;
}

/* A head for a request of this client: protocol 2, this namespace, the arena generation of
 * map on shared-memory requests. */
kvt_msg_t kvt__head_of(const kvt_client_t *c, int type, const arena_map_t *map)
{
    kvt_msg_t m;

    memset(&m, 0, sizeof m);
    m.hdr.version = 2;
    m.hdr.type = (uint8_t)type;
    m.hdr.ns_id = type == KVT_MSG_HELLO ? 0 : c->ns_id;
    m.hdr.gen = map != NULL ? map->gen : 0;
    return m;
}

/* Sends step m of request r (r NULL: a message nobody waits for) and takes its place on the
 * wire. 0, or an error (r is then not on the wire). SAVE_DATA payloads go through the pool. */
int kvt__send_step(kvt_client_t *c, req_t *r, kvt_msg_t *m, const kvt_frame_t *f, size_t nf)
{
    int64_t now = kvt__now_ms();
    int rc;

    if (r != NULL && link_held(c))
        return KVT_EUNAVAIL; /* a later step of a request begun before the link went down */
    m->hdr.req_id = ++c->next_wire_id;
    rc = send_frames(c, m, f, nf, m->hdr.type == KVT_MSG_SAVE_DATA ? 1 : SIZE_MAX);
    if (rc == 0)
        rc = wire_add(c, m->hdr.req_id, r, r == NULL ? now + c->timeout_ms : 0);
    if (rc != 0)
        return rc;
    if (r != NULL) {
        r->step = m->hdr.type;
        r->sent_ms = now;
        r->sent_epoch = c->epoch;
    }
    return 0;
}

/* --- releases --- */

void kvt__relq_add(relq_t *q, const kvt_hash_t *h, int64_t now_ms)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        kvt_hash_t *p = realloc(q->h, cap * sizeof *p);
        if (p == NULL)
            return; /* the daemon reclaims the pin at its hold deadline */
        q->h = p;
        q->cap = cap;
    }
    if (q->n == 0)
        q->first_ms = now_ms;
    q->h[q->n++] = *h;
}

void kvt__relq_free(relq_t *q)
{
    free(q->h);
    *q = (relq_t){0};
}

/* Moves the callers' releases (c->rel, under c->mu) behind the I/O thread's own. */
static void relq_take(relq_t *to, relq_t *from)
{
    for (size_t i = 0; i < from->n; i++)
        kvt__relq_add(to, &from->h[i], from->first_ms);
    from->n = 0;
}

/* Sends the queued releases of kind k (0 plain, 1 corrupt) when due, as many RELEASE messages of
 * at most max_chunks hashes as the window allows; force: whatever is queued. */
static void flush_releases(kvt_client_t *c, int k, bool ride, bool force, int64_t now)
{
    relq_t *q = &c->orel[k];
    size_t sent = 0;

    if (q->n == 0 || c->epoch == 0)
        return;
    if (!force && !ride && q->n < c->info.max_chunks && now - q->first_ms < KVT_RELEASE_DELAY_MS)
        return;
    while (sent < q->n && (force || window_free(c))) {
        size_t m = q->n - sent < c->info.max_chunks ? q->n - sent : c->info.max_chunks;
        kvt_msg_t msg = kvt__head_of(c, KVT_MSG_RELEASE, c->map);
        kvt_frame_t f = {.data = q->h + sent, .len = m * sizeof(kvt_hash_t)};

        msg.u.release.rank = c->rank;
        msg.hdr.flags = k == 1 ? KVT_RELEASE_CORRUPT : 0;
        if (kvt__send_step(c, NULL, &msg, &f, 1) != 0)
            break; /* the daemon reclaims these pins at their hold deadline */
        atomic_fetch_add_explicit(&c->n_releases, 1, memory_order_relaxed);
        sent += m;
    }
    if (sent >= q->n || force) {
        q->n = 0;
    } else if (sent > 0) {
        memmove(q->h, q->h + sent, (q->n - sent) * sizeof *q->h);
        q->n -= sent;
    }
}

/* --- completion --- */

/* r is done with status: off the wire, counted, queued for delivery at the end of the turn (an
 * internal request is freed instead, after releasing whoever waited on it). */
void kvt__finish(kvt_client_t *c, req_t *r, int status)
{
    r->comp.status = status;
    if (r->map != NULL && (r->kind == KVT_OP_SAVE || r->kind == KVT_OP_LOAD)) {
        kvt__map_unref(r->map); /* copies done: a copying request no longer points into it */
        r->map = NULL;
    }
    if (r->resv != NULL) {
        kvt__req_free(c, r->resv); /* a commit ends its reservation */
        r->resv = NULL;
    }
    if (r->internal) {
        free(r);
        return;
    }
    if (r->kind == RK_HELLO) { /* the connect: counted by nobody */
        q_push(&c->done_head, &c->done_tail, r);
        return;
    }
    atomic_fetch_add_explicit(&c->n_completed, 1, memory_order_relaxed);
    if (status != 0)
        atomic_fetch_add_explicit(&c->n_failed, 1, memory_order_relaxed);
    if (status == KVT_ETIMEDOUT)
        atomic_fetch_add_explicit(&c->n_timeouts, 1, memory_order_relaxed);
    if (status == KVT_EUNAVAIL)
        atomic_fetch_add_explicit(&c->n_unavailable, 1, memory_order_relaxed);
    q_push(&c->done_head, &c->done_tail, r);
}

/* Delivers the requests finished this turn: synchronous callers are woken, the others queued
 * for kvt_next_completion (the completion eventfd becomes readable when the queue stops being
 * empty). */
static void deliver(kvt_client_t *c)
{
    bool wake_sync = false, signal = false;
    req_t *r;

    if (c->done_head == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    while ((r = q_pop(&c->done_head, &c->done_tail)) != NULL) {
        if (r->sync) {
            r->done = true;
            wake_sync = true;
            continue;
        }
        signal |= c->compq_head == NULL;
        q_push(&c->compq_head, &c->compq_tail, r);
    }
    if (signal) { /* under the lock: a taker emptying the queue reads it back under it too */
        uint64_t one = 1;
        (void)!write(c->comp_fd, &one, sizeof one);
    }
    pthread_mutex_unlock(&c->mu);
    if (wake_sync)
        pthread_cond_broadcast(&c->sync_cv);
}

/* --- recovery --- */

static void recovery_start(kvt_client_t *c)
{
    req_t *h;

    if (c->recovery != NULL)
        return;
    h = calloc(1, sizeof *h);
    if (h == NULL) {
        req_t *w; /* nothing can recover: the waiting requests fail */
        while ((w = q_pop(&c->wait_head, &c->wait_tail)) != NULL)
            kvt__finish(c, w, KVT_ENOMEM);
        return;
    }
    h->c = c;
    h->kind = RK_HELLO;
    h->internal = true;
    h->want_arena = c->shm;
    h->arena_optional = c->auto_path; /* no arena: the frames path from here on (requests.c) */
    h->deadline_ms = kvt__now_ms() + c->timeout_ms;
    h->comp.error = h->err;
    c->recovery = h;
    atomic_fetch_add_explicit(&c->n_recoveries, 1, memory_order_relaxed);
    pend_push_front(c, h);
}

/* The recovery (or the connect) r ended with status. */
void kvt__recovery_end(kvt_client_t *c, req_t *r, int status)
{
    req_t *w, *head = NULL, *tail = NULL, *back_h = NULL, *back_t = NULL;

    c->recovery = NULL;
    if (status == 0) {
        c->epoch++;
        for (size_t i = 0; i < c->nwires;) { /* a new session: nothing old will be answered */
            if (c->wires[i].req == NULL)
                wire_remove(c, i);
            else
                i++;
        }
    }
    while ((w = q_pop(&c->wait_head, &c->wait_tail)) != NULL) {
        if (status != 0) {
            memcpy(w->err, r->err, sizeof w->err);
            kvt__finish(c, w, status);
        } else {
            q_push(&head, &tail, w);
            atomic_fetch_add_explicit(&c->n_pending, 1, memory_order_relaxed);
        }
    }
    while ((w = q_pop(&head, &tail)) != NULL) /* ahead of the requests never sent, in order */
        q_push(&back_h, &back_t, w);
    while ((w = q_pop(&c->pend_head, &c->pend_tail)) != NULL)
        q_push(&back_h, &back_t, w);
    c->pend_head = back_h;
    c->pend_tail = back_t;
    kvt__finish(c, r, status);
}

/* r ends with status: a HELLO ends its recovery (or the connect), any other request completes. */
void kvt__end(kvt_client_t *c, req_t *r, int status)
{
    if (r->kind == RK_HELLO)
        kvt__recovery_end(c, r, status);
    else
        kvt__finish(c, r, status);
}

/* Every request of the list ends with status. */
static void fail_list(kvt_client_t *c, req_t **head, req_t **tail, int status)
{
    req_t *r;

    while ((r = q_pop(head, tail)) != NULL)
        kvt__end(c, r, status);
}

/* r was answered ENONS, ESTALE or ETOOBIG. */
void kvt__recover(kvt_client_t *c, req_t *r, int code)
{
    if (r->kind == RK_HELLO || r->retried) {
        kvt__finish(c, r, code);
        return;
    }
    r->retried = true;
    if (r->sent_epoch != c->epoch && c->recovery == NULL) {
        kvt__begin(c, r); /* sent before the last recovery completed: the session is new already */
        return;
    }
    q_push(&c->wait_head, &c->wait_tail, r);
    note_deadline(c, r->deadline_ms);
    recovery_start(c);
}

/* --- receiving --- */

static void rx_reset(kvt_client_t *c)
{
    for (size_t i = 0; i < c->nrx; i++)
        zmq_msg_close(&c->rx[i]);
    c->nrx = 0;
}

/* Room for want frames in c->rx; frames held are moved (a small frame's bytes live inside its
 * zmq_msg_t, so c->fv is filled only once the message is whole). */
static int rx_reserve(kvt_client_t *c, size_t want)
{
    size_t cap = c->rx_cap ? c->rx_cap : 8;
    zmq_msg_t *rx;
    kvt_frame_t *fv;

    if (want <= c->rx_cap)
        return 0;
    while (cap < want)
        cap *= 2;
    rx = malloc(cap * sizeof *rx);
    fv = malloc(cap * sizeof *fv);
    if (rx == NULL || fv == NULL) {
        free(rx);
        free(fv);
        return KVT_ENOMEM;
    }
    for (size_t i = 0; i < c->nrx; i++) {
        zmq_msg_init(&rx[i]);
        zmq_msg_move(&rx[i], &c->rx[i]);
        zmq_msg_close(&c->rx[i]);
    }
    free(c->rx);
    free(c->fv);
    c->rx = rx;
    c->fv = fv;
    c->rx_cap = cap;
    return 0;
}

/* Receives one whole message without waiting: 1, 0 when none is there, or an error (the
 * message, if any, is dropped). Frames beyond KVT_RX_FRAMES_MAX are drained and the message
 * dropped. */
static int recv_one(kvt_client_t *c)
{
    zmq_msg_t sink;
    int more = 1, too_many = 0;
    bool first = true;

    rx_reset(c);
    while (more) {
        zmq_msg_t *m = &sink;
        int rc;

        if (c->nrx < KVT_RX_FRAMES_MAX && rx_reserve(c, c->nrx + 1) == 0)
            m = &c->rx[c->nrx];
        else
            too_many = 1;
        zmq_msg_init(m);
        /* the first frame may not be there; the others are (messages arrive whole) */
        rc = zmq_msg_recv(m, c->sock, first ? ZMQ_DONTWAIT : 0);
        if (rc < 0) {
            int err = errno;
            zmq_msg_close(m);
            if (err == EINTR)
                continue;
            return err == EAGAIN && first ? 0 : KVT_ESYS;
        }
        first = false;
        more = zmq_msg_more(m);
        if (m == &sink)
            zmq_msg_close(m);
        else
            c->nrx++;
    }
    if (too_many)
        return KVT_EPROTO;
    for (size_t i = 0; i < c->nrx; i++) {
        c->fv[i].data = zmq_msg_data(&c->rx[i]);
        c->fv[i].len = zmq_msg_size(&c->rx[i]);
    }
    return 1;
}

static bool intake(kvt_client_t *c);
static void start(kvt_client_t *c, int64_t now);

/* Handles up to KVT_RECV_BATCH replies waiting on the socket. */
static void recv_replies(kvt_client_t *c)
{
    const kvt_limits_t lim = {.max_hashes = SIZE_MAX, .max_payload_bytes = SIZE_MAX};

    for (int k = 0; k < KVT_RECV_BATCH; k++) {
        kvt_msg_t rep;
        long w;
        req_t *r;
        int rc = recv_one(c), dec;

        if (rc <= 0)
            break;
        dec = kvt_msg_decode(c->fv, c->nrx, &lim, &rep);
        w = wire_find(c, rep.hdr.req_id);
        if (w < 0 || rep.hdr.req_id == 0)
            continue; /* a late reply of a request given up, or noise */
        r = c->wires[w].req;
        wire_remove(c, (size_t)w);
        if (r == NULL)
            continue; /* a RELEASE, or a request that timed out */
        if (dec == 0 && rep.hdr.version != KVT_PROTO_VERSION && rep.hdr.type != KVT_MSG_ERROR) {
            /* every request of this library is protocol 2: an answer in another version lacks
             * what the session relies on (a protocol 1 LOAD_OK has no checksums frame: its HITs
             * would be delivered unverified). An ERROR of any version keeps its code. */
            snprintf(r->err, sizeof r->err, "the daemon answered %s in protocol %u, not %d",
                     kvt_msg_type_name(rep.hdr.type), rep.hdr.version, KVT_PROTO_VERSION);
            dec = KVT_WIRE_EVERSION;
        }
        if (dec != 0) {
            int code = dec == KVT_WIRE_EVERSION ? KVT_EVERSION : KVT_EPROTO;
            kvt__end(c, r, code);
            continue;
        }
        kvt__on_reply(c, r, &rep);
        /* between two replies (a reply may have cost a copy of MiBs): hand out what completed
         * and send what was submitted meanwhile, so that the pipeline never runs dry */
        deliver(c);
        intake(c);
        start(c, kvt__now_ms());
    }
    rx_reset(c);
}

/* --- timeouts --- */

static void expire_list(kvt_client_t *c, req_t **head, req_t **tail, bool pending, int64_t now)
{
    req_t *keep_h = NULL, *keep_t = NULL, *r;

    while ((r = q_pop(head, tail)) != NULL) {
        if (r->deadline_ms > now) {
            q_push(&keep_h, &keep_t, r);
            note_deadline(c, r->deadline_ms);
            continue;
        }
        if (pending)
            atomic_fetch_sub_explicit(&c->n_pending, 1, memory_order_relaxed);
        kvt__end(c, r, KVT_ETIMEDOUT);
    }
    *head = keep_h;
    *tail = keep_t;
}

/* Completes every request past its deadline with KVT_ETIMEDOUT, drops answered-by-nobody
 * messages past theirs, and finds the next deadline. */
static void expire(kvt_client_t *c, int64_t now)
{
    if (now < c->next_expiry)
        return;
    c->next_expiry = INT64_MAX;
    for (size_t i = 0; i < c->nwires;) {
        wire_t *w = &c->wires[i];
        if (w->req == NULL && w->expire_ms <= now) {
            wire_remove(c, i);
            continue;
        }
        if (w->req != NULL && w->req->deadline_ms <= now) {
            req_t *r = w->req;
            wire_forget(c, i, now + c->timeout_ms);
            kvt__end(c, r, KVT_ETIMEDOUT);
        } else {
            note_deadline(c, w->req != NULL ? w->req->deadline_ms : w->expire_ms);
        }
        i++;
    }
    expire_list(c, &c->pend_head, &c->pend_tail, true, now);
    expire_list(c, &c->wait_head, &c->wait_tail, false, now);
}

/* --- the link ---
 *
 * kvtier.h "The link". The DEALER's monitor (c->mon) says when the connection drops
 * (ZMQ_EVENT_DISCONNECTED: the daemon's end closed, or no traffic within the heartbeat timeout)
 * and when a connection is usable again (ZMQ_EVENT_HANDSHAKE_SUCCEEDED, not CONNECTED: a
 * stopped daemon's socket still accepts connections into its backlog). Whoever runs the I/O
 * reads the events at the start of each turn, in order; a parked thread reads the ones that
 * came meanwhile when it is woken. While the link is down nothing is sent but releases stay
 * queued: a pending request waits until max(down_ms, born_ms) + the down wait and then
 * completes KVT_EUNAVAIL (kvt__send_step refuses a later step of one already begun).
 * Decision: a request on the wire when the link drops completes KVT_EUNAVAIL at once: its
 * reply cannot come (the daemon's ROUTER drops replies to a peer that is gone, and a restarted
 * daemon never saw it). Its message may still sit in ZeroMQ's queue and reach a restarted
 * daemon, which answers it ENONS to nobody. A daemon that was only frozen and is still there
 * counts those messages in its window until it has answered them to nobody. */

static void fail_wires(kvt_client_t *c);

/* The link dropped: replies that came before the connection's end are handled, then every
 * request on the wire completes KVT_EUNAVAIL. */
static void link_lost(kvt_client_t *c, int64_t now)
{
    int events = 0;
    size_t len = sizeof events;

    c->link_down = true;
    c->down_ms = now;
    atomic_store_explicit(&c->down_since_pub, now > 0 ? now : 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->n_disconnects, 1, memory_order_relaxed);
    if (atomic_load_explicit(&c->down_wait_ms, memory_order_relaxed) < 0)
        return; /* no fast failure: everything waits for its own deadline, as before 0.2.12 */
    c->link_draining = true; /* start_down, called between replies, leaves the wires alone */
    while (zmq_getsockopt(c->sock, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN))
        recv_replies(c);
    c->link_draining = false;
    fail_wires(c);
}

/* Every request on the wire while the link is down completes KVT_EUNAVAIL (sent before the
 * drop: nothing is sent while it is down, unless the down wait was -1 then). */
static void fail_wires(kvt_client_t *c)
{
    while (c->nwires > 0) {
        req_t *r = c->wires[c->nwires - 1].req;
        wire_remove(c, c->nwires - 1);
        if (r == NULL)
            continue;
        snprintf(r->err, sizeof r->err, "the connection closed before the reply");
        kvt__end(c, r, KVT_EUNAVAIL);
    }
}

/* Takes the next monitor event that waits into *ev: 1, or 0 when none waits. */
static int mon_recv(kvt_client_t *c, uint16_t *ev)
{
    zmq_msg_t m;
    int more;

    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    *ev = 0;
    if (zmq_msg_size(&m) >= sizeof *ev)
        memcpy(ev, zmq_msg_data(&m), sizeof *ev);
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) { /* the endpoint's address: the rest of a message that came whole */
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->mon, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return 1;
}

/* Reads the monitor's events that wait, in order. */
static void link_events(kvt_client_t *c, int64_t now)
{
    uint16_t ev;

    while (mon_recv(c, &ev)) {
        if (ev == ZMQ_EVENT_DISCONNECTED && !c->link_down) {
            link_lost(c, now);
        } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && c->link_down) {
            c->link_down = false;
            atomic_store_explicit(&c->down_since_pub, 0, memory_order_relaxed);
        }
    }
}

/* start() while the link is down: the pending requests whose down wait ended complete
 * KVT_EUNAVAIL, the others wait (their end is a deadline of the loop). */
static void start_down(kvt_client_t *c, int64_t now)
{
    int wait = atomic_load_explicit(&c->down_wait_ms, memory_order_relaxed);
    req_t *keep_h = NULL, *keep_t = NULL, *fail_h = NULL, *fail_t = NULL, *r;

    if (!c->link_draining)
        fail_wires(c); /* none, unless the down wait was -1 when the link dropped */
    while ((r = pend_pop(c)) != NULL) {
        int64_t from = r->born_ms > c->down_ms ? r->born_ms : c->down_ms, end = from + wait;
        if (end <= now) {
            snprintf(r->err, sizeof r->err, "no connection for %lld ms (waited %d ms)",
                     (long long)(now - c->down_ms), wait);
            q_push(&fail_h, &fail_t, r);
        } else {
            q_push(&keep_h, &keep_t, r);
            atomic_fetch_add_explicit(&c->n_pending, 1, memory_order_relaxed);
            note_deadline(c, end);
        }
    }
    c->pend_head = keep_h;
    c->pend_tail = keep_t;
    fail_list(c, &fail_h, &fail_t, KVT_EUNAVAIL);
}

/* --- the loop --- */

/* Takes the submitters' requests and releases; returns whether kvt_shutdown began. */
static bool intake(kvt_client_t *c)
{
    req_t *r;
    bool closing;

    pthread_mutex_lock(&c->mu);
    while ((r = q_pop(&c->subq_head, &c->subq_tail)) != NULL) {
        c->nsub--;
        pend_push(c, r);
    }
    relq_take(&c->orel[0], &c->rel[0]);
    relq_take(&c->orel[1], &c->rel[1]);
    closing = c->closing;
    pthread_mutex_unlock(&c->mu);
    return closing;
}

/* Sends what the window allows: due releases first, then pending requests in order (only the
 * recovery while one runs). */
static void start(kvt_client_t *c, int64_t now)
{
    bool ride = c->pend_head != NULL && c->recovery == NULL;

    if (link_held(c)) {
        start_down(c, now);
        return;
    }
    flush_releases(c, 1, ride, false, now);
    flush_releases(c, 0, ride, false, now);
    while (c->pend_head != NULL && window_free(c)) {
        req_t *r = c->pend_head;
        if (c->recovery != NULL && r != c->recovery)
            break;
        pend_pop(c);
        kvt__begin(c, r);
    }
}

/* Milliseconds until the next deadline or due release, -1 for none. */
static int wait_ms(const kvt_client_t *c, int64_t now)
{
    int64_t t = c->next_expiry;
    /* releases wait while the link is down (start_down sends nothing): their timer is no
     * reason to wake, or the loop would spin until the daemon is back */
    bool held = link_held(c);

    for (int k = 0; k < 2 && !held; k++)
        if (c->orel[k].n > 0 && window_free(c) && c->orel[k].first_ms + KVT_RELEASE_DELAY_MS < t)
            t = c->orel[k].first_ms + KVT_RELEASE_DELAY_MS;
    if (t == INT64_MAX)
        return -1;
    if (t <= now)
        return 0;
    return t - now > INT_MAX ? INT_MAX : (int)(t - now);
}

/* Waits for a reply, a wake-up or the next timer. */
static void wait_events(kvt_client_t *c, int tmo)
{
    zmq_pollitem_t items[4] = {{.socket = c->sock, .events = ZMQ_POLLIN},
                               {.fd = c->wake_fd, .events = ZMQ_POLLIN},
                               {.fd = c->copy_fd, .events = ZMQ_POLLIN},
                               {.socket = c->mon, .events = ZMQ_POLLIN}};
    bool sleep;

    pthread_mutex_lock(&c->mu);
    sleep = c->subq_head == NULL && !c->closing && c->rel[0].n == 0 && c->rel[1].n == 0;
    c->io_sleeping = sleep;
    pthread_mutex_unlock(&c->mu);
    /* copy_fd is read by kvt__copier_back */
    if (zmq_poll(items, 4, sleep ? tmo : 0) > 0 && (items[1].revents & ZMQ_POLLIN)) {
        uint64_t v;
        (void)!read(c->wake_fd, &v, sizeof v);
    }
    if (sleep) {
        pthread_mutex_lock(&c->mu);
        c->io_sleeping = false;
        pthread_mutex_unlock(&c->mu);
    }
}

/* kvt_shutdown: every request completes with KVT_ECLOSED; releases go out as a courtesy (the
 * daemon reclaims the pins at their deadline anyway); the socket is closed. */
static void close_all(kvt_client_t *c)
{
    int64_t now;

    kvt__copier_drain(c); /* requests being copied end as they would have (a commit is sent) */
    kvt__copier_stop(c);
    now = kvt__now_ms();
    for (size_t i = 0; i < c->nwires; i++) {
        req_t *r = c->wires[i].req;
        wire_forget(c, i, now);
        if (r == NULL)
            continue;
        kvt__end(c, r, KVT_ECLOSED);
    }
    c->nwires = 0;
    atomic_store_explicit(&c->n_inflight, 0, memory_order_relaxed);
    fail_list(c, &c->wait_head, &c->wait_tail, KVT_ECLOSED);
    while (c->pend_head != NULL) {
        req_t *r = pend_pop(c);
        kvt__end(c, r, KVT_ECLOSED);
    }
    intake(c);
    fail_list(c, &c->pend_head, &c->pend_tail, KVT_ECLOSED);
    atomic_store_explicit(&c->n_pending, 0, memory_order_relaxed);
    flush_releases(c, 1, true, true, now);
    flush_releases(c, 0, true, true, now);
    deliver(c);
    rx_reset(c);
    {
        uint16_t ev; /* libzmq blocks on a full monitor queue, and so would the next call */
        while (mon_recv(c, &ev))
            ;
    }
    zmq_socket_monitor(c->sock, NULL, 0);
    zmq_close(c->sock);
    c->sock = NULL;
    zmq_close(c->mon);
    c->mon = NULL;
}

/* Whether nothing is in progress: no request waits, none is on the wire (messages answered by
 * nobody may remain: their replies wait in the socket for whoever runs the I/O next). */
static bool io_idle(const kvt_client_t *c)
{
    if (c->pend_head != NULL || c->wait_head != NULL || c->recovery != NULL ||
        c->done_head != NULL || c->orel[0].n > 0 || c->orel[1].n > 0 || c->cp_outstanding > 0)
        return false;
    for (size_t i = 0; i < c->nwires; i++)
        if (c->wires[i].req != NULL)
            return false;
    return true;
}

/* Parks the idle I/O thread on the wake eventfd, away from the socket; returns once woken and
 * holding the I/O again (taken back from a synchronous call if one runs it). */
static void park(kvt_client_t *c)
{
    struct pollfd p = {.fd = c->wake_fd, .events = POLLIN};
    uint64_t v;

    pthread_mutex_lock(&c->mu);
    if (c->subq_head != NULL || c->closing || c->rel[0].n > 0 || c->rel[1].n > 0) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->parked = true;
    c->io_sleeping = true;
    pthread_mutex_unlock(&c->mu);
    /* woken by a submit, or after KVT_PARK_MS to read the link's events (the monitor's queue
     * is bounded, and libzmq blocks on a full one) */
    while (poll(&p, 1, KVT_PARK_MS) < 0 && errno == EINTR)
        ;
    (void)!read(c->wake_fd, &v, sizeof v);
    pthread_mutex_lock(&c->mu);
    c->io_sleeping = false;
    while (c->inline_active) {
        if (!c->yield_req) {
            uint64_t one = 1;
            c->yield_req = true;
            (void)!write(c->yield_fd, &one, sizeof one);
        }
        pthread_cond_wait(&c->token_cv, &c->mu);
    }
    c->parked = false;
    pthread_mutex_unlock(&c->mu);
}

void kvt__io_inline(kvt_client_t *c, req_t *r)
{
    zmq_pollitem_t items[4] = {{.socket = c->sock, .events = ZMQ_POLLIN},
                               {.fd = c->yield_fd, .events = ZMQ_POLLIN},
                               {.fd = c->copy_fd, .events = ZMQ_POLLIN},
                               {.socket = c->mon, .events = ZMQ_POLLIN}};
    bool done = false, yield = false, wake;
    uint64_t v;

    (void)!read(c->yield_fd, &v, sizeof v); /* a stale wake-up of an earlier call */
    pend_push(c, r);
    for (;;) {
        int64_t now = kvt__now_ms();
        link_events(c, now);
        expire(c, now);
        start(c, now);
        deliver(c);
        pthread_mutex_lock(&c->mu);
        done = r->done;
        yield = c->yield_req;
        pthread_mutex_unlock(&c->mu);
        if (done || yield)
            break;
        if (zmq_poll(items, 4, kvt__copier_help(c) ? 0 : wait_ms(c, kvt__now_ms())) > 0 &&
            (items[1].revents & ZMQ_POLLIN))
            (void)!read(c->yield_fd, &v, sizeof v);
        link_events(c, kvt__now_ms());
        recv_replies(c);
        kvt__copier_back(c);
        deliver(c);
    }
    if (done) { /* the releases of a copied load go now: nobody else runs the I/O */
        flush_releases(c, 1, true, true, kvt__now_ms());
        flush_releases(c, 0, true, true, kvt__now_ms());
    }
    pthread_mutex_lock(&c->mu);
    wake = !io_idle(c) || c->subq_head != NULL || c->rel[0].n > 0 || c->rel[1].n > 0;
    c->inline_active = false;
    c->yield_req = false;
    pthread_cond_broadcast(&c->token_cv);
    pthread_mutex_unlock(&c->mu);
    if (wake) { /* what is left is the I/O thread's (parked, or waiting for the hand-back) */
        uint64_t one = 1;
        (void)!write(c->wake_fd, &one, sizeof one);
    }
}

void *kvt__io_main(void *arg)
{
    kvt_client_t *c = arg;

    c->next_expiry = INT64_MAX;
    for (;;) {
        int64_t now;

        if (intake(c))
            break;
        now = kvt__now_ms();
        link_events(c, now);
        expire(c, now);
        start(c, now);
        deliver(c);
        if (io_idle(c)) {
            park(c);
            continue;
        }
        /* a chunk of the copies queued, between two looks at the socket */
        wait_events(c, kvt__copier_help(c) ? 0 : wait_ms(c, kvt__now_ms()));
        link_events(c, kvt__now_ms()); /* before the replies: a drop seen late fails nothing new */
        recv_replies(c);
        kvt__copier_back(c);
        deliver(c);
    }
    close_all(c);
    return NULL;
}
