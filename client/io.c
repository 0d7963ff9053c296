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
 * handler (a save: SAVE_BEGIN, then SAVE_DATA; on the shared-memory path SAVE_RESERVE, the copy
 * into the arena, then SAVE_COMMIT), so the steps of different requests interleave freely.
 * Replies are matched by req_id; one whose request is gone (timed out) is dropped. Every payload
 * copy happens here, never on a submitting thread: into the arena before a commit, out of the
 * arena or of a reply frame into the caller's buffer with its checksum verified in the same
 * pass. Payload frames are copied into buffers of the client's send pool (pool.c) lent to
 * ZeroMQ, never the caller's own: a frame can still sit in ZeroMQ's queue after its request
 * timed out and its buffer went back to the caller.
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
 * itself is the first recovery, run for a waiting kvt_connect.
 *
 * Timeouts: every request has its deadline from its submit; past it, it completes with
 * KVT_ETIMEDOUT wherever it is (pending, waiting, on the wire), and the others go on.
 *
 * Threads: this file runs on the I/O thread only, except where a function says otherwise.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void finish(kvt_client_t *c, req_t *r, int status);
static void begin(kvt_client_t *c, req_t *r);

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
    if (r == NULL)
        note_deadline(c, expire_ms);
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
static kvt_msg_t head_of(const kvt_client_t *c, int type, const arena_map_t *map)
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
static int send_step(kvt_client_t *c, req_t *r, kvt_msg_t *m, const kvt_frame_t *f, size_t nf)
{
    int64_t now = kvt__now_ms();
    int rc;

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

static void save_head(const kvt_client_t *c, kvt_msg_t *m, const kvt_hash_t *parent,
                      bool has_parent, bool has_op, uint64_t op_id)
{
    m->u.save.rank = c->rank;
    if (has_parent) {
        m->hdr.flags |= KVT_SAVE_PARENT;
        memcpy(m->u.save.parent.b, parent->b, KVT_HASH_BYTES);
    }
    if (has_op) {
        m->hdr.flags |= KVT_SAVE_OPID;
        m->u.save.op_id = op_id;
    }
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
    while (sent < q->n && (force || c->nwires < c->window)) {
        size_t m = q->n - sent < c->info.max_chunks ? q->n - sent : c->info.max_chunks;
        kvt_msg_t msg = head_of(c, KVT_MSG_RELEASE, c->map);
        kvt_frame_t f = {.data = q->h + sent, .len = m * sizeof(kvt_hash_t)};

        msg.u.release.rank = c->rank;
        msg.hdr.flags = k == 1 ? KVT_RELEASE_CORRUPT : 0;
        if (send_step(c, NULL, &msg, &f, 1) != 0)
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
static void finish(kvt_client_t *c, req_t *r, int status)
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
    pthread_mutex_unlock(&c->mu);
    if (signal) {
        uint64_t one = 1;
        (void)!write(c->comp_fd, &one, sizeof one);
    }
    if (wake_sync)
        pthread_cond_broadcast(&c->sync_cv);
}

static void set_error(req_t *r, const kvt_error_t *e)
{
    size_t n = e->text_len < sizeof r->err - 1 ? e->text_len : sizeof r->err - 1;

    if (n > 0)
        memcpy(r->err, e->text, n);
    r->err[n] = '\0';
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
            finish(c, w, KVT_ENOMEM);
        return;
    }
    h->c = c;
    h->kind = RK_HELLO;
    h->internal = true;
    h->want_arena = c->shm;
    h->deadline_ms = kvt__now_ms() + c->timeout_ms;
    h->comp.error = h->err;
    c->recovery = h;
    atomic_fetch_add_explicit(&c->n_recoveries, 1, memory_order_relaxed);
    pend_push_front(c, h);
}

/* The recovery (or the connect) r ended with status. */
static void recovery_end(kvt_client_t *c, req_t *r, int status)
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
            finish(c, w, status);
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
    finish(c, r, status);
}

/* r was answered ENONS or ESTALE. */
static void recover(kvt_client_t *c, req_t *r, int code)
{
    if (r->kind == RK_HELLO || r->retried) {
        finish(c, r, code);
        return;
    }
    r->retried = true;
    if (r->sent_epoch != c->epoch && c->recovery == NULL) {
        begin(c, r); /* sent before the last recovery completed: the session is new already */
        return;
    }
    q_push(&c->wait_head, &c->wait_tail, r);
    note_deadline(c, r->deadline_ms);
    recovery_start(c);
}

static int map_arena(kvt_client_t *c, const kvt_msg_t *rep)
{
    const kvt_arena_ok_t *a = &rep->u.arena_ok;
    char path[KVT_PATH_MAX + 1];
    arena_map_t *m, *old;
    int rc;

    if (a->path_len == 0 || a->arena_bytes == 0 || a->arena_bytes > SIZE_MAX)
        return KVT_EUNSUPP;
    memcpy(path, a->path, a->path_len);
    path[a->path_len] = '\0';
    if (kvt__map_same(c->map, path, a->arena_bytes, a->arena_gen))
        return 0;
    rc = kvt__map_open(path, a->arena_bytes, (rep->hdr.flags & KVT_ARENA_PREFAULTED) != 0,
                       a->arena_gen, a->hold_ms, &m);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&c->mu);
    old = c->map;
    m->seq = old != NULL ? old->seq + 1 : 1;
    c->map = m;
    c->info.arena_gen = m->gen;
    pthread_mutex_unlock(&c->mu);
    if (old != NULL) {
        atomic_fetch_add_explicit(&c->n_remaps, 1, memory_order_relaxed);
        kvt__map_unref(old);
    }
    return 0;
}

static void hello_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = head_of(c, KVT_MSG_HELLO, NULL);
    kvt_frame_t f[2] = {{.data = c->model, .len = c->model_len},
                        {.data = c->revision, .len = c->revision_len}};
    int rc;

    m.hdr.flags = c->mla ? KVT_HELLO_REPLICATED : 0;
    m.u.hello.layout_fp = c->layout_fp;
    m.u.hello.chunk_tokens = c->chunk_tokens;
    m.u.hello.rank = c->rank;
    m.u.hello.world = c->world;
    m.u.hello.features = KVT_FEAT_CHECKSUMS | KVT_FEAT_TOKENS | KVT_FEAT_ARENA_GEN;
    rc = send_step(c, r, &m, f, 2);
    if (rc != 0)
        recovery_end(c, r, rc);
}

static void on_hello(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_hello_ok_t *h = &rep->u.hello_ok;

    if (r->step == KVT_MSG_HELLO) {
        uint32_t win;
        if (rep->hdr.type != KVT_MSG_HELLO_OK || h->max_chunks == 0 || h->max_chunk_bytes == 0) {
            recovery_end(c, r, KVT_EPROTO);
            return;
        }
        win = h->max_in_flight != 0 ? h->max_in_flight : KVT_DEFAULT_WINDOW;
        if (c->opt_window != 0 && c->opt_window < win)
            win = c->opt_window;
        c->ns_id = h->ns_id;
        c->features = h->features;
        c->window = win;
        pthread_mutex_lock(&c->mu);
        c->info.lease_ms = h->lease_ms;
        c->info.max_chunk_bytes = h->max_chunk_bytes;
        c->info.max_chunks = h->max_chunks;
        c->info.daemon_version = h->daemon_version;
        c->info.features = h->features;
        c->info.max_in_flight = win;
        pthread_mutex_unlock(&c->mu);
        if (r->want_arena) {
            kvt_msg_t m = head_of(c, KVT_MSG_ARENA, NULL);
            int rc = send_step(c, r, &m, NULL, 0);
            if (rc != 0)
                recovery_end(c, r, rc);
            return;
        }
        recovery_end(c, r, 0);
        return;
    }
    r->arena_rc = rep->hdr.type == KVT_MSG_ARENA_OK ? map_arena(c, rep) : KVT_EPROTO;
    recovery_end(c, r, r->arena_rc != 0 && !r->arena_optional ? r->arena_rc : 0);
}

/* --- request steps --- */

static void lookup_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = head_of(c, KVT_MSG_LOOKUP, NULL);
    kvt_frame_t f = {.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};
    int rc;

    if (r->lookup.lease)
        m.hdr.flags |= KVT_LOOKUP_LEASE;
    if (r->lookup.has_prompt) {
        m.hdr.flags |= KVT_LOOKUP_PROMPT;
        m.u.lookup.prompt_tokens = r->lookup.prompt_tokens;
        m.u.lookup.hbm_tokens = r->lookup.hbm_tokens;
    }
    m.u.lookup.rank = r->lookup.all_ranks ? KVT_RANK_ALL : c->rank;
    rc = send_step(c, r, &m, &f, 1);
    if (rc != 0)
        finish(c, r, rc);
}

static void on_lookup(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_lookup_ok_t *l = &rep->u.lookup_ok;
    kvt_lookup_result_t *res = &r->comp.lookup;
    size_t want = r->lookup.all_ranks ? c->world : 0;

    if (rep->hdr.type != KVT_MSG_LOOKUP_OK || l->hit > r->n || l->nranks != want) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < l->nranks; i++) {
        r->rank_hits[i] = kvt_get_u32(l->rank_hits + 4 * i);
        if (r->rank_hits[i] > r->n) {
            finish(c, r, KVT_EPROTO);
            return;
        }
    }
    res->hit = l->hit;
    res->skipped = (rep->hdr.flags & KVT_LOOKUPR_SKIPPED) != 0;
    res->leased = (rep->hdr.flags & KVT_LOOKUPR_LEASED) != 0;
    res->lease_ms = res->leased ? l->lease_ms : 0;
    res->lease_capped = (rep->hdr.flags & KVT_LOOKUPR_LEASE_CAPPED) != 0;
    res->nranks = (uint32_t)l->nranks;
    res->rank_hits = r->rank_hits;
    res->rank_hits_cap = (uint32_t)want;
    finish(c, r, 0);
}

static int save_status_ok(uint8_t s)
{
    return s == KVT_CHUNK_WANTED || s == KVT_CHUNK_EXISTS || s == KVT_CHUNK_DECLINED ||
           s == KVT_CHUNK_NOSPACE;
}

/* Folds SAVE_OK into r->out: chunks still WANTED (sent) take the daemon's answer, SKIPPED
 * meaning their reservation expired: not stored. */
static int merge_save_ok(const kvt_msg_t *rep, req_t *r)
{
    if (rep->hdr.type != KVT_MSG_SAVE_OK || rep->u.chunks_ok.n != r->n)
        return KVT_EPROTO;
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = rep->u.chunks_ok.status[i];
        if (r->out[i] != KVT_CHUNK_WANTED)
            continue;
        if (s == KVT_CHUNK_SKIPPED)
            s = KVT_CHUNK_NOSPACE;
        if (s != KVT_CHUNK_STORED && s != KVT_CHUNK_EXISTS && s != KVT_CHUNK_NOSPACE &&
            s != KVT_CHUNK_DECLINED)
            return KVT_EPROTO;
        r->out[i] = s;
    }
    return 0;
}

static void save_send(kvt_client_t *c, req_t *r, int type, const kvt_frame_t *f, size_t nf)
{
    kvt_msg_t m =
        head_of(c, type, type == KVT_MSG_SAVE_BEGIN || type == KVT_MSG_SAVE_DATA ? NULL : r->map);
    int rc;

    save_head(c, &m, &r->parent, r->has_parent, r->has_op_id, r->op_id);
    rc = send_step(c, r, &m, f, nf);
    if (rc != 0)
        finish(c, r, rc);
}

static void save_begin(kvt_client_t *c, req_t *r)
{
    kvt_frame_t f[2] = {{.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)}, {0}};

    if (r->map == NULL) {
        save_send(c, r, KVT_MSG_SAVE_BEGIN, f, 1);
        return;
    }
    for (size_t i = 0; i < r->n; i++)
        kvt_put_u64(r->locs + 8 * i, r->sizes[i]); /* the lengths frame, before the locations */
    f[1] = (kvt_frame_t){.data = r->locs, .len = 8 * r->n};
    save_send(c, r, KVT_MSG_SAVE_RESERVE, f, 2);
}

/* SAVE_BEGIN_OK (frames): send the wanted chunks' bytes. */
static void on_save_begin_ok(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    kvt_frame_t *f;
    size_t nwanted = 0;

    if (rep->hdr.type != KVT_MSG_SAVE_BEGIN_OK || rep->u.chunks_ok.n != r->n) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = rep->u.chunks_ok.status[i];
        if (!save_status_ok(s)) {
            finish(c, r, KVT_EPROTO);
            return;
        }
        r->out[i] = s;
        nwanted += s == KVT_CHUNK_WANTED;
    }
    if (nwanted == 0) {
        finish(c, r, 0);
        return;
    }
    f = malloc((r->n + 1) * sizeof *f);
    if (f == NULL) {
        finish(c, r, KVT_ENOMEM);
        return;
    }
    f[0] = (kvt_frame_t){.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};
    for (size_t i = 0; i < r->n; i++) {
        bool w = r->out[i] == KVT_CHUNK_WANTED;
        f[1 + i] = (kvt_frame_t){.data = w ? r->src[i] : NULL, .len = w ? r->sizes[i] : 0};
        if (w)
            atomic_fetch_add_explicit(&c->n_copied, r->sizes[i], memory_order_relaxed);
    }
    save_send(c, r, KVT_MSG_SAVE_DATA, f, r->n + 1);
    free(f);
}

/* The hold deadline of a shared-memory answer: from when its request was sent. */
static int64_t hold_until(const req_t *r, uint32_t hold_ms)
{
    return r->sent_ms + (hold_ms != 0 ? hold_ms : r->map->hold_ms);
}

/* SAVE_RESERVE_OK of a copying save: copy the reserved chunks into the arena, commit them. */
static void on_reserve_copy(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    int64_t until;
    size_t nwanted = 0;

    if (rep->hdr.type != KVT_MSG_SAVE_RESERVE_OK || k->n != r->n) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    until = hold_until(r, k->hold_ms);
    memset(r->locs, 0, r->n * KVT_LOC_BYTES);
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len;
        uint8_t *dst;

        r->out[i] = s;
        if (!save_status_ok(s)) {
            finish(c, r, KVT_EPROTO);
            return;
        }
        if (s != KVT_CHUNK_WANTED)
            continue;
        dst = kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len);
        if (dst == NULL || len != r->sizes[i]) {
            finish(c, r, KVT_EPROTO);
            return;
        }
        if (kvt__now_ms() >= until) {
            r->out[i] = KVT_CHUNK_NOSPACE; /* reclaimed by now: never touch it */
            continue;
        }
        memcpy(dst, r->src[i], len);
        atomic_fetch_add_explicit(&c->n_copied, len, memory_order_relaxed);
        memcpy(r->locs + i * KVT_LOC_BYTES, k->locs + i * KVT_LOC_BYTES, KVT_LOC_BYTES);
        nwanted++;
    }
    if (nwanted == 0) {
        finish(c, r, 0);
        return;
    }
    {
        kvt_frame_t f[2] = {{.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)},
                            {.data = r->locs, .len = r->n * KVT_LOC_BYTES}};
        save_send(c, r, KVT_MSG_SAVE_COMMIT, f, 2);
    }
}

static void on_save_ok(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    finish(c, r, merge_save_ok(rep, r));
}

static void load_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = head_of(c, KVT_MSG_LOAD, r->map);
    kvt_frame_t f = {.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};
    int rc;

    m.u.load.rank = c->rank;
    if (r->map != NULL)
        m.hdr.flags |= KVT_LOAD_SHM;
    rc = send_step(c, r, &m, &f, 1);
    if (rc != 0)
        finish(c, r, rc);
}

static bool verifying(const kvt_client_t *c, bool copying)
{
    if (!(c->features & KVT_FEAT_CHECKSUMS))
        return false;
    return copying ? c->verify != KVT_VERIFY_NONE : c->verify == KVT_VERIFY_ALL;
}

/* Copies one loaded chunk (len bytes at src) into the caller's buffer i, verifying csum when
 * asked. Returns its outcome; a mismatch queues a RELEASE CORRUPT. */
static uint8_t copy_out(kvt_client_t *c, req_t *r, size_t i, const void *src, size_t len,
                        bool verify, uint64_t csum, int64_t now)
{
    atomic_fetch_add_explicit(&c->n_copied, len, memory_order_relaxed);
    if (!verify) {
        memcpy(r->dst[i], src, len);
        return KVT_LOAD_HIT;
    }
    atomic_fetch_add_explicit(&c->n_verified, 1, memory_order_relaxed);
    if (kvt_copy_checksum(r->dst[i], src, len) == csum)
        return KVT_LOAD_HIT;
    atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
    kvt__relq_add(&c->orel[1], &r->hashes[i], now);
    return KVT_LOAD_CORRUPT;
}

static void set_nhit(req_t *r)
{
    size_t p = 0;

    while (p < r->n && r->out[p] == KVT_LOAD_HIT)
        p++;
    r->comp.nhit = p;
}

/* LOAD_OK, frames path: copy the payloads out. */
static void on_load_frames(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    bool verify = verifying(c, true) && k->checksums != NULL;
    int64_t now = kvt__now_ms();
    int status = 0;

    if (rep->hdr.type != KVT_MSG_LOAD_OK || k->n != r->n || (rep->hdr.flags & KVT_LOADR_SHM)) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        const kvt_frame_t *p = &k->payloads[i];
        uint8_t s = k->status[i];
        if ((s != KVT_CHUNK_HIT && s != KVT_CHUNK_MISS) || (s == KVT_CHUNK_HIT && p->len == 0)) {
            finish(c, r, KVT_EPROTO);
            return;
        }
    }
    for (size_t i = 0; i < r->n; i++) {
        const kvt_frame_t *p = &k->payloads[i];
        r->lens[i] = p->len;
        if (p->len == 0) {
            r->out[i] = KVT_LOAD_MISS;
        } else if (p->len > r->sizes[i]) {
            r->out[i] = KVT_LOAD_BUFSIZE;
            status = KVT_EBUFSIZE;
        } else {
            r->out[i] = copy_out(c, r, i, p->data, p->len, verify,
                                 verify ? kvt_get_u64(k->checksums + 8 * i) : 0, now);
            if (r->out[i] != KVT_LOAD_HIT)
                r->lens[i] = 0;
        }
    }
    set_nhit(r);
    finish(c, r, status);
}

/* LOAD_OK with SHM, for a copying load (copy out, then release) or a pin (hand out). */
static void on_load_shm(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    bool pin = r->kind == KVT_OP_PIN;
    bool verify = verifying(c, !pin) && k->checksums != NULL;
    int64_t now = kvt__now_ms(), until;
    int status = 0;

    if (rep->hdr.type != KVT_MSG_LOAD_OK || k->n != r->n || !(rep->hdr.flags & KVT_LOADR_SHM)) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    until = hold_until(r, k->hold_ms);
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len = 0, csum = k->checksums != NULL ? kvt_get_u64(k->checksums + 8 * i) : 0;
        const uint8_t *src =
            s == KVT_CHUNK_HIT ? kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len) : NULL;
        r->out[i] = KVT_LOAD_MISS;
        r->lens[i] = 0;
        if (s != KVT_CHUNK_HIT) {
            if (s != KVT_CHUNK_MISS)
                status = KVT_EPROTO;
            continue;
        }
        if (src == NULL || kvt__now_ms() >= until) {
            if (src == NULL)
                status = KVT_EPROTO; /* the pin is the daemon's either way: release it */
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
            continue;
        }
        if (pin) {
            r->lens[i] = len;
            r->ptrs[i] = (void *)src;
            if (r->csums != NULL)
                r->csums[i] = csum;
            r->out[i] = KVT_LOAD_HIT;
            if (verify) {
                atomic_fetch_add_explicit(&c->n_verified, 1, memory_order_relaxed);
                if (kvt_checksum(src, len) != csum) {
                    atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
                    kvt__relq_add(&c->orel[1], &r->hashes[i], now);
                    r->out[i] = KVT_LOAD_CORRUPT;
                    r->ptrs[i] = NULL;
                    r->lens[i] = 0;
                }
            }
            continue;
        }
        if (len > r->sizes[i]) {
            r->lens[i] = len;
            r->out[i] = KVT_LOAD_BUFSIZE;
            status = status != 0 ? status : KVT_EBUFSIZE;
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
            continue;
        }
        r->out[i] = copy_out(c, r, i, src, len, verify, csum, now);
        r->lens[i] = r->out[i] == KVT_LOAD_HIT ? len : 0;
        if (r->out[i] == KVT_LOAD_HIT)
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
    }
    if (pin) {
        r->comp.hold_until_ms = until;
        if (!(c->features & KVT_FEAT_CHECKSUMS))
            r->comp.checksums = NULL;
    }
    set_nhit(r);
    finish(c, r, status);
}

/* SAVE_RESERVE_OK of a zero-copy reserve: hand the extents out. */
static void on_reserve_zc(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;

    if (rep->hdr.type != KVT_MSG_SAVE_RESERVE_OK || k->n != r->n) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    memcpy(r->locs, k->locs, r->n * KVT_LOC_BYTES);
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len;

        if (!save_status_ok(s)) {
            finish(c, r, KVT_EPROTO);
            return;
        }
        r->out[i] = s == KVT_CHUNK_WANTED ? KVT_SAVE_RESERVED : s;
        if (s != KVT_CHUNK_WANTED) {
            memset(r->locs + i * KVT_LOC_BYTES, 0, KVT_LOC_BYTES);
            continue;
        }
        r->ptrs[i] = kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len);
        if (r->ptrs[i] == NULL || len != r->sizes[i]) {
            finish(c, r, KVT_EPROTO);
            return;
        }
    }
    r->comp.hold_until_ms = hold_until(r, k->hold_ms);
    finish(c, r, 0);
}

static void commit_send(kvt_client_t *c, req_t *r)
{
    req_t *v = r->resv;
    kvt_frame_t f[2] = {{.data = v->hashes, .len = v->n * sizeof(kvt_hash_t)},
                        {.data = r->locs, .len = v->n * KVT_LOC_BYTES}};
    kvt_msg_t m = head_of(c, KVT_MSG_SAVE_COMMIT, v->map);
    size_t nwanted = 0;
    int rc;

    memset(r->locs, 0, v->n * KVT_LOC_BYTES);
    for (size_t i = 0; i < v->n; i++) {
        bool w = v->out[i] == KVT_SAVE_RESERVED && i < r->nwritten;
        r->out[i] = w                                ? KVT_CHUNK_WANTED
                    : v->out[i] == KVT_SAVE_RESERVED ? KVT_CHUNK_NOSPACE
                                                     : v->out[i];
        if (w) {
            memcpy(r->locs + i * KVT_LOC_BYTES, v->locs + i * KVT_LOC_BYTES, KVT_LOC_BYTES);
            nwanted++;
        }
    }
    if (nwanted == 0) {
        finish(c, r, 0);
        return;
    }
    save_head(c, &m, &v->parent, v->has_parent, v->has_op_id, v->op_id);
    rc = send_step(c, r, &m, f, 2);
    if (rc != 0)
        finish(c, r, rc);
}

static void tally_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = head_of(c, KVT_MSG_TALLY, NULL);
    kvt_frame_t f = {.data = r->tally_buf, .len = r->tally_len};
    int rc;

    m.u.tally.engine_id = r->tally.engine_id;
    m.u.tally.paid_total = r->tally.paid_total;
    m.u.tally.probes_total = r->tally.probes_total;
    if (r->tally.has_tokens) {
        m.hdr.flags |= KVT_TALLY_TOKENS;
        m.u.tally.served_tokens_total = r->tally.served_tokens_total;
        m.u.tally.lookup_tokens_total = r->tally.lookup_tokens_total;
    }
    rc = send_step(c, r, &m, &f, 1);
    if (rc != 0)
        finish(c, r, rc);
}

static void on_tally(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_tally_ok_t *t = &rep->u.tally_ok;
    kvt_gate_state_t *g = &r->comp.gates;

    if (rep->hdr.type != KVT_MSG_TALLY_OK) {
        finish(c, r, KVT_EPROTO);
        return;
    }
    *g = (kvt_gate_state_t){
        .payoff = t->payoff,
        .share = t->share,
        .act_ema = t->act_ema,
        .probes = t->probes,
        .lookups = t->lookups,
        .admission_enabled = (t->gate_flags & KVT_GATE_ADMISSION_ON) != 0,
        .skip_enabled = (t->gate_flags & KVT_GATE_SKIP_ON) != 0,
        .load_bearing = (t->gate_flags & KVT_GATE_LOAD_BEARING) != 0,
        .policy = t->policy,
        .density = t->density,
        .served_tokens = t->served_tokens,
        .regret_tokens = t->regret_tokens,
        .written_tokens = t->written_tokens,
        .declined_tokens = t->declined_tokens,
    };
    finish(c, r, 0);
}

/* Starts r from its first step (again, after a recovery). A shared-memory request takes the
 * current mapping. */
static void begin(kvt_client_t *c, req_t *r)
{
    bool shm = r->kind == KVT_OP_RESERVE || r->kind == KVT_OP_PIN ||
               (c->shm && (r->kind == KVT_OP_SAVE || r->kind == KVT_OP_LOAD));

    if (shm && r->kind != KVT_OP_COMMIT) {
        arena_map_t *m = c->map; /* only this thread replaces c->map */
        if (r->map != m) {
            kvt__map_unref(r->map);
            r->map = kvt__map_ref(m);
        }
        if (r->map == NULL) {
            finish(c, r, KVT_EUNSUPP);
            return;
        }
    }
    switch (r->kind) {
    case RK_HELLO:
        hello_send(c, r);
        break;
    case KVT_OP_LOOKUP:
        lookup_send(c, r);
        break;
    case KVT_OP_SAVE:
    case KVT_OP_RESERVE:
        save_begin(c, r);
        break;
    case KVT_OP_LOAD:
    case KVT_OP_PIN:
        load_send(c, r);
        break;
    case KVT_OP_TALLY:
        tally_send(c, r);
        break;
    case KVT_OP_COMMIT:
        commit_send(c, r);
        break;
    default:
        finish(c, r, KVT_EINVAL);
        break;
    }
}

/* A reply for r (already off the wire). */
static void on_reply(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    if (rep->hdr.type == KVT_MSG_ERROR) {
        int code = rep->u.error.code;
        set_error(r, &rep->u.error);
        if ((code == KVT_WIRE_ENONS || code == KVT_WIRE_ESTALE) && r->kind != RK_HELLO) {
            recover(c, r, code);
            return;
        }
        code = code < 0 && code > -100 ? code : KVT_EPROTO;
        if (r->kind == RK_HELLO)
            recovery_end(c, r, code);
        else
            finish(c, r, code);
        return;
    }
    switch (r->kind) {
    case RK_HELLO:
        on_hello(c, r, rep);
        break;
    case KVT_OP_LOOKUP:
        on_lookup(c, r, rep);
        break;
    case KVT_OP_SAVE:
        if (r->step == KVT_MSG_SAVE_BEGIN)
            on_save_begin_ok(c, r, rep);
        else if (r->step == KVT_MSG_SAVE_RESERVE)
            on_reserve_copy(c, r, rep);
        else
            on_save_ok(c, r, rep);
        break;
    case KVT_OP_RESERVE:
        on_reserve_zc(c, r, rep);
        break;
    case KVT_OP_COMMIT:
        on_save_ok(c, r, rep);
        break;
    case KVT_OP_LOAD:
    case KVT_OP_PIN:
        if (r->map != NULL)
            on_load_shm(c, r, rep);
        else
            on_load_frames(c, r, rep);
        break;
    case KVT_OP_TALLY:
        on_tally(c, r, rep);
        break;
    default:
        finish(c, r, KVT_EPROTO);
        break;
    }
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
        if (dec != 0) {
            int code = dec == KVT_WIRE_EVERSION ? KVT_EVERSION : KVT_EPROTO;
            if (r->kind == RK_HELLO)
                recovery_end(c, r, code);
            else
                finish(c, r, code);
            continue;
        }
        on_reply(c, r, &rep);
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
        if (r->kind == RK_HELLO)
            recovery_end(c, r, KVT_ETIMEDOUT);
        else
            finish(c, r, KVT_ETIMEDOUT);
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
            if (r->kind == RK_HELLO)
                recovery_end(c, r, KVT_ETIMEDOUT);
            else
                finish(c, r, KVT_ETIMEDOUT);
        } else {
            note_deadline(c, w->req != NULL ? w->req->deadline_ms : w->expire_ms);
        }
        i++;
    }
    expire_list(c, &c->pend_head, &c->pend_tail, true, now);
    expire_list(c, &c->wait_head, &c->wait_tail, false, now);
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

    flush_releases(c, 1, ride, false, now);
    flush_releases(c, 0, ride, false, now);
    while (c->pend_head != NULL && c->nwires < c->window) {
        req_t *r = c->pend_head;
        if (c->recovery != NULL && r != c->recovery)
            break;
        pend_pop(c);
        begin(c, r);
    }
}

/* Milliseconds until the next deadline or due release, -1 for none. */
static int wait_ms(const kvt_client_t *c, int64_t now)
{
    int64_t t = c->next_expiry;

    for (int k = 0; k < 2; k++)
        if (c->orel[k].n > 0 && c->nwires < c->window &&
            c->orel[k].first_ms + KVT_RELEASE_DELAY_MS < t)
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
    zmq_pollitem_t items[2] = {{.socket = c->sock, .events = ZMQ_POLLIN},
                               {.fd = c->wake_fd, .events = ZMQ_POLLIN}};
    bool sleep;

    pthread_mutex_lock(&c->mu);
    sleep = c->subq_head == NULL && !c->closing && c->rel[0].n == 0 && c->rel[1].n == 0;
    c->io_sleeping = sleep;
    pthread_mutex_unlock(&c->mu);
    if (zmq_poll(items, 2, sleep ? tmo : 0) > 0 && (items[1].revents & ZMQ_POLLIN)) {
        uint64_t v;
        (void)!read(c->wake_fd, &v, sizeof v);
    }
    if (sleep) {
        pthread_mutex_lock(&c->mu);
        c->io_sleeping = false;
        pthread_mutex_unlock(&c->mu);
    }
}

static void fail_list(kvt_client_t *c, req_t **head, req_t **tail, int status)
{
    req_t *r;

    while ((r = q_pop(head, tail)) != NULL) {
        if (r->kind == RK_HELLO)
            recovery_end(c, r, status);
        else
            finish(c, r, status);
    }
}

/* kvt_shutdown: every request completes with KVT_ECLOSED; releases go out as a courtesy (the
 * daemon reclaims the pins at their deadline anyway); the socket is closed. */
static void close_all(kvt_client_t *c)
{
    int64_t now = kvt__now_ms();

    for (size_t i = 0; i < c->nwires; i++) {
        req_t *r = c->wires[i].req;
        wire_forget(c, i, now);
        if (r == NULL)
            continue;
        if (r->kind == RK_HELLO)
            recovery_end(c, r, KVT_ECLOSED);
        else
            finish(c, r, KVT_ECLOSED);
    }
    c->nwires = 0;
    atomic_store_explicit(&c->n_inflight, 0, memory_order_relaxed);
    fail_list(c, &c->wait_head, &c->wait_tail, KVT_ECLOSED);
    while (c->pend_head != NULL) {
        req_t *r = pend_pop(c);
        if (r->kind == RK_HELLO)
            recovery_end(c, r, KVT_ECLOSED);
        else
            finish(c, r, KVT_ECLOSED);
    }
    intake(c);
    fail_list(c, &c->pend_head, &c->pend_tail, KVT_ECLOSED);
    atomic_store_explicit(&c->n_pending, 0, memory_order_relaxed);
    flush_releases(c, 1, true, true, now);
    flush_releases(c, 0, true, true, now);
    deliver(c);
    rx_reset(c);
    zmq_close(c->sock);
    c->sock = NULL;
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
        expire(c, now);
        start(c, now);
        deliver(c);
        wait_events(c, wait_ms(c, kvt__now_ms()));
        recv_replies(c);
        deliver(c);
    }
    close_all(c);
    return NULL;
}
