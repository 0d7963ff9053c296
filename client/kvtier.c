/*
 * kvtier.c - libkvtier: the synchronous client of kvtierd (see kvtier.h and proto/kvt_proto.h).
 *
 * Design: one ZeroMQ context and one DEALER socket per client, ZMQ_LINGER 0 so that closing
 * never waits for frames the daemon did not take. Every request gets a fresh req_id; the call
 * then waits for the reply with zmq_poll until its deadline and drops every reply whose req_id
 * differs: those are late answers to requests that timed out before. The only exception is an
 * ERROR with req_id 0, which the daemon sends when it could not decode a head; it is taken as
 * the answer to the request in flight (this client never sends anything else undecodable).
 *
 * Sending copies (zmq_send), it is not zero-copy (zmq_msg_init_data): ZeroMQ sends a zero-copy
 * frame whenever its I/O thread gets to it, so a frame could still sit in the socket's queue
 * when a call times out and returns; the caller would then free or reuse its buffer while
 * ZeroMQ still reads it. A call owns nothing after it returns, at the price of one memcpy per
 * chunk on the client side. Received frames are zmq_msg_t (no copy) until kvt_load copies the
 * payloads into the caller's buffers.
 *
 * Shared-memory data path: on an ipc:// endpoint the client asks the daemon where its arena is
 * (ARENA) and maps the file. A save then reserves extents (SAVE_RESERVE), copies the chunks into
 * them and publishes them (SAVE_COMMIT); a load receives locations of pinned chunks, copies
 * them out and releases the pins (RELEASE, sent without waiting for its answer: the reply is
 * dropped as a late reply by the next call). The daemon reclaims reservations and pins after
 * hold_ms, so this client never copies into or out of an extent once that time, measured from
 * before its request was sent, has passed: such chunks count as not stored / not loaded.
 * Locations are checked against the mapped size before any copy.
 *
 * Deadlines: timeout_ms bounds a whole public call, every request it makes included (a save is
 * two requests; a namespace recovery adds a HELLO and a retry).
 *
 * Namespace recovery: a daemon that restarted forgets this connection's namespaces and answers
 * KVT_ENONS; the call then sends HELLO again (once) and retries the request (once).
 *
 * Threads: a client is used by one thread at a time (kvtier.h). There is no global state.
 *
 * Invariants: c->rx[0..c->nrx) are the frames of the last message received, and c->fv views
 * them; a decoded reply borrows them until the next request of the same client.
 */
#include "kvtier.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "kvt_proto.h"

#define KVT_DEFAULT_TIMEOUT_MS 5000
/* Frames of the largest reply (LOAD_OK for the daemon's largest max_chunks_per_request). */
#define KVT_RX_FRAMES_MAX (65536 + 2)

_Static_assert((int)KVT_EPROTO == (int)KVT_WIRE_EPROTO, "wire code");
_Static_assert((int)KVT_EVERSION == (int)KVT_WIRE_EVERSION, "wire code");
_Static_assert((int)KVT_ENONS == (int)KVT_WIRE_ENONS, "wire code");
_Static_assert((int)KVT_ETOOBIG == (int)KVT_WIRE_ETOOBIG, "wire code");
_Static_assert((int)KVT_EINVAL == (int)KVT_WIRE_EINVAL, "wire code");
_Static_assert((int)KVT_ECONFLICT == (int)KVT_WIRE_ECONFLICT, "wire code");
_Static_assert((int)KVT_EBUSY == (int)KVT_WIRE_EBUSY, "wire code");
_Static_assert((int)KVT_EUNSUPP == (int)KVT_WIRE_EUNSUPP, "wire code");
_Static_assert((int)KVT_SAVE_STORED == (int)KVT_CHUNK_STORED, "save outcome");
_Static_assert((int)KVT_SAVE_EXISTS == (int)KVT_CHUNK_EXISTS, "save outcome");
_Static_assert((int)KVT_SAVE_NOSPACE == (int)KVT_CHUNK_NOSPACE, "save outcome");
_Static_assert((int)KVT_SAVE_DECLINED == (int)KVT_CHUNK_DECLINED, "save outcome");
_Static_assert(sizeof(kvt_hash_t) == KVT_HASH_BYTES, "hash size");

struct kvt_client {
    void *ctx;
    void *sock;
    int timeout_ms;
    uint64_t next_req_id;
    /* what HELLO declares, kept to declare it again after a daemon restart */
    char model[KVT_MODEL_MAX + 1];
    size_t model_len;
    uint64_t layout_fp;
    uint32_t chunk_tokens;
    uint16_t rank;
    uint16_t world;
    int mla;
    /* what HELLO_OK answered */
    uint32_t ns_id;
    kvt_server_info_t info;
    char last_error[KVT_ERRTEXT_MAX + 1];
    /* the daemon's arena, when the shared-memory path is in use */
    uint8_t *arena;
    size_t arena_bytes;
    uint32_t hold_ms;
    /* frames of the last message received */
    zmq_msg_t *rx;
    kvt_frame_t *fv;
    size_t nrx;
    size_t rx_cap;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t call_deadline(const kvt_client_t *c)
{
    return now_ms() + c->timeout_ms;
}

/* Milliseconds left before deadline, clamped to [0, INT_MAX]. */
static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - now_ms();

    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

static void rx_reset(kvt_client_t *c)
{
    for (size_t i = 0; i < c->nrx; i++)
        zmq_msg_close(&c->rx[i]);
    c->nrx = 0;
}

/* Room for want frames in c->rx. Frames already held are moved with zmq_msg_move (a small
 * frame's bytes live inside its zmq_msg_t, so c->fv is filled only once the message is whole). */
static int rx_reserve(kvt_client_t *c, size_t want)
{
    zmq_msg_t *rx;
    kvt_frame_t *fv;
    size_t cap = c->rx_cap ? c->rx_cap : 8;

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

/* Sends the head of req and its variable frames, copying them. */
static int send_msg(kvt_client_t *c, const kvt_msg_t *req, const kvt_frame_t *frames,
                    size_t nframes, int64_t deadline)
{
    uint8_t head[KVT_HDR_BYTES + 64];
    static const uint8_t empty;
    size_t hlen = kvt_head_encode(head, sizeof head, req);
    int tmo = remaining_ms(deadline);

    if (hlen == 0)
        return KVT_EPROTO;
    if (tmo == 0)
        return KVT_ETIMEDOUT;
    /* A DEALER blocks on send when its queue is full (high-water mark): bound that wait too. */
    if (zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &tmo, sizeof tmo) != 0)
        return KVT_ESYS;
    for (size_t i = 0; i <= nframes; i++) {
        const void *p = i == 0 ? head : frames[i - 1].data;
        size_t len = i == 0 ? hlen : frames[i - 1].len;
        int flags = i < nframes ? ZMQ_SNDMORE : 0;
        int rc;

        if (len == 0 || p == NULL)
            p = &empty;
        do {
            rc = zmq_send(c->sock, p, len, flags);
        } while (rc < 0 && errno == EINTR);
        if (rc < 0)
            return errno == EAGAIN ? KVT_ETIMEDOUT : KVT_ESYS;
    }
    return 0;
}

/* Waits until the socket has a message to read or deadline passes. */
static int wait_readable(kvt_client_t *c, int64_t deadline)
{
    zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};

    for (;;) {
        int tmo = remaining_ms(deadline), rc;
        if (tmo == 0)
            return KVT_ETIMEDOUT;
        rc = zmq_poll(&item, 1, tmo);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return KVT_ESYS;
    }
}

/* Receives one whole multipart message into c->rx and c->fv, waiting until deadline. A message
 * of more than KVT_RX_FRAMES_MAX frames is drained; only its first frames are kept, and the
 * result is KVT_EPROTO. */
static int recv_msg(kvt_client_t *c, int64_t deadline)
{
    zmq_msg_t sink;
    int more = 1, too_many = 0, rc;

    rx_reset(c);
    rc = wait_readable(c, deadline);
    if (rc != 0)
        return rc;
    /* Multipart messages arrive whole: once the first frame is readable, all of them are. */
    while (more) {
        zmq_msg_t *m = &sink;
        if (c->nrx < KVT_RX_FRAMES_MAX) {
            if (rx_reserve(c, c->nrx + 1) != 0)
                return KVT_ENOMEM;
            m = &c->rx[c->nrx];
        } else {
            too_many = 1;
        }
        zmq_msg_init(m);
        rc = zmq_msg_recv(m, c->sock, ZMQ_DONTWAIT);
        if (rc < 0) {
            int err = errno;
            zmq_msg_close(m);
            if (err == EINTR || (err == EAGAIN && c->nrx == 0)) {
                rc = err == EAGAIN ? wait_readable(c, deadline) : 0;
                if (rc != 0)
                    return rc;
                continue;
            }
            return KVT_ESYS;
        }
        more = zmq_msg_more(m);
        if (m == &sink)
            zmq_msg_close(m);
        else
            c->nrx++;
    }
    for (size_t i = 0; i < c->nrx; i++) {
        c->fv[i].data = zmq_msg_data(&c->rx[i]);
        c->fv[i].len = zmq_msg_size(&c->rx[i]);
    }
    return too_many ? KVT_EPROTO : 0;
}

static void keep_error_text(kvt_client_t *c, const kvt_error_t *e)
{
    size_t n = e->text_len < sizeof c->last_error - 1 ? e->text_len : sizeof c->last_error - 1;

    if (n > 0)
        memcpy(c->last_error, e->text, n);
    c->last_error[n] = '\0';
}

/*
 * One request/reply: sends req (head + frames) with a new req_id and this client's ns_id, and
 * waits for the reply of type reply_type. On success rep borrows c->rx. ERROR replies return
 * their code and keep their text for kvt_last_error().
 */
static int call_once(kvt_client_t *c, kvt_msg_t *req, const kvt_frame_t *frames, size_t nframes,
                     int reply_type, int64_t deadline, kvt_msg_t *rep)
{
    const kvt_limits_t lim = {.max_hashes = SIZE_MAX, .max_payload_bytes = SIZE_MAX};
    uint64_t id = ++c->next_req_id;
    int rc;

    req->hdr.req_id = id;
    req->hdr.ns_id = req->hdr.type == KVT_MSG_HELLO ? 0 : c->ns_id;
    rc = send_msg(c, req, frames, nframes, deadline);
    if (rc != 0)
        return rc;
    for (;;) {
        int dec;
        rc = recv_msg(c, deadline);
        if (rc == KVT_ETIMEDOUT || rc == KVT_ESYS || rc == KVT_ENOMEM)
            return rc;
        if (c->nrx == 0)
            continue;
        dec = kvt_msg_decode(c->fv, c->nrx, &lim, rep);
        if (rc == 0)
            rc = dec;
        if (rep->hdr.req_id != id) {
            int undecodable = rep->hdr.type == KVT_MSG_ERROR && rep->hdr.req_id == 0 && rc == 0;
            if (!undecodable)
                continue; /* late reply of an earlier request, or noise */
        }
        if (rc != 0)
            return rc == KVT_WIRE_EVERSION ? KVT_EVERSION : KVT_EPROTO;
        if (rep->hdr.type == KVT_MSG_ERROR) {
            keep_error_text(c, &rep->u.error);
            rc = rep->u.error.code;
            return rc < 0 && rc > -100 ? rc : KVT_EPROTO;
        }
        return rep->hdr.type == reply_type ? 0 : KVT_EPROTO;
    }
}

/* Protocol 2 HELLO: frames [head, model, revision]. A daemon that speaks only protocol 1 answers
 * EVERSION; the message then says what to do. */
static int hello(kvt_client_t *c, int64_t deadline)
{
    static const char old_daemon[] =
        "kvtierd speaks protocol 1; this libkvtier needs protocol 2 (upgrade kvtierd)";
    kvt_msg_t req = {0}, rep;
    kvt_frame_t frames[2] = {{.data = c->model, .len = c->model_len}, {.data = NULL, .len = 0}};
    int rc;

    req.hdr.version = 2;
    req.hdr.type = KVT_MSG_HELLO;
    req.hdr.flags = c->mla ? KVT_HELLO_REPLICATED : 0;
    req.u.hello.layout_fp = c->layout_fp;
    req.u.hello.chunk_tokens = c->chunk_tokens;
    req.u.hello.rank = c->rank;
    req.u.hello.world = c->world;
    req.u.hello.features = KVT_FEAT_TOKENS;
    rc = call_once(c, &req, frames, 2, KVT_MSG_HELLO_OK, deadline, &rep);
    if (rc == KVT_EVERSION) {
        memcpy(c->last_error, old_daemon, sizeof old_daemon);
        return rc;
    }
    if (rc != 0)
        return rc;
    if (rep.u.hello_ok.max_chunks == 0 || rep.u.hello_ok.max_chunk_bytes == 0)
        return KVT_EPROTO;
    c->ns_id = rep.u.hello_ok.ns_id;
    c->info.lease_ms = rep.u.hello_ok.lease_ms;
    c->info.max_chunk_bytes = rep.u.hello_ok.max_chunk_bytes;
    c->info.max_chunks = rep.u.hello_ok.max_chunks;
    c->info.daemon_version = rep.u.hello_ok.daemon_version;
    return 0;
}

/* call_once, plus namespace recovery: on KVT_ENONS, HELLO again and retry, once per public call
 * (*recovered says whether that was spent). */
static int call(kvt_client_t *c, kvt_msg_t *req, const kvt_frame_t *frames, size_t nframes,
                int reply_type, int64_t deadline, int *recovered, kvt_msg_t *rep)
{
    int rc = call_once(c, req, frames, nframes, reply_type, deadline, rep);

    if (rc != KVT_ENONS || *recovered)
        return rc;
    *recovered = 1;
    rc = hello(c, deadline);
    if (rc != 0)
        return rc;
    return call_once(c, req, frames, nframes, reply_type, deadline, rep);
}

/* Asks for the daemon's arena and maps it. 0 when the shared-memory path is usable. */
static int map_arena(kvt_client_t *c)
{
    kvt_msg_t req = {0}, rep;
    char path[KVT_PATH_MAX + 1];
    struct stat st;
    void *p;
    int fd, recovered = 0, rc, populate;

    req.hdr.type = KVT_MSG_ARENA;
    rc = call(c, &req, NULL, 0, KVT_MSG_ARENA_OK, call_deadline(c), &recovered, &rep);
    if (rc != 0)
        return rc;
    if (rep.u.arena_ok.path_len == 0 || rep.u.arena_ok.arena_bytes == 0 ||
        rep.u.arena_ok.arena_bytes > SIZE_MAX)
        return KVT_EUNSUPP;
    memcpy(path, rep.u.arena_ok.path, rep.u.arena_ok.path_len);
    path[rep.u.arena_ok.path_len] = '\0';
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return KVT_ESYS;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < rep.u.arena_ok.arena_bytes) {
        close(fd);
        return KVT_ESYS;
    }
    /* When the daemon allocated every page, MAP_POPULATE fills this process's page tables now:
     * copies into and out of the arena then run at memcpy speed instead of taking a fault every
     * 4 KiB. (On a sparse arena it would allocate the whole capacity: not done then.) */
    populate = (rep.hdr.flags & KVT_ARENA_PREFAULTED) ? MAP_POPULATE : 0;
    p = mmap(NULL, (size_t)rep.u.arena_ok.arena_bytes, PROT_READ | PROT_WRITE,
             MAP_SHARED | populate, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return KVT_ESYS;
    c->arena = p;
    c->arena_bytes = (size_t)rep.u.arena_ok.arena_bytes;
    c->hold_ms = rep.u.arena_ok.hold_ms;
    return 0;
}

int kvt_data_path(const kvt_client_t *c)
{
    return c != NULL && c->arena != NULL ? KVT_DATA_PATH_SHM : KVT_DATA_PATH_FRAMES;
}

int kvt_connect(const char *endpoint, const kvt_ns_desc_t *ns, uint32_t rank,
                const kvt_connect_opts_t *opts, kvt_client_t **out)
{
    kvt_client_t *c;
    size_t model_len;
    int linger = 0, rc, want;

    if (out != NULL)
        *out = NULL;
    if (endpoint == NULL || ns == NULL || out == NULL || ns->model == NULL)
        return KVT_EINVAL;
    model_len = strlen(ns->model);
    if (model_len == 0 || model_len > KVT_MODEL_MAX || ns->chunk_tokens == 0 ||
        ns->world_size == 0 || ns->world_size > KVT_WORLD_MAX || rank >= ns->world_size)
        return KVT_EINVAL;
    if (opts != NULL && (opts->timeout_ms < 0 || opts->data_path < KVT_DATA_PATH_AUTO ||
                         opts->data_path > KVT_DATA_PATH_SHM))
        return KVT_EINVAL;

    c = calloc(1, sizeof *c);
    if (c == NULL)
        return KVT_ENOMEM;
    c->timeout_ms =
        opts != NULL && opts->timeout_ms > 0 ? opts->timeout_ms : KVT_DEFAULT_TIMEOUT_MS;
    memcpy(c->model, ns->model, model_len);
    c->model_len = model_len;
    c->layout_fp = kvt_ns_fingerprint(ns);
    c->chunk_tokens = ns->chunk_tokens;
    c->rank = (uint16_t)rank;
    c->world = (uint16_t)ns->world_size;
    c->mla = ns->mla != 0;

    rc = KVT_ECONNECT;
    c->ctx = zmq_ctx_new();
    if (c->ctx == NULL)
        goto fail_ctx;
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (c->sock == NULL)
        goto fail_sock;
    if (zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger) != 0)
        goto fail_connect;
    if (zmq_connect(c->sock, endpoint) != 0)
        goto fail_connect;
    rc = hello(c, call_deadline(c));
    if (rc != 0)
        goto fail_connect;
    want = opts != NULL ? opts->data_path : KVT_DATA_PATH_AUTO;
    if (want != KVT_DATA_PATH_FRAMES && strncmp(endpoint, "ipc://", 6) == 0)
        rc = map_arena(c);
    else
        rc = KVT_EUNSUPP;
    if (rc != 0 && want == KVT_DATA_PATH_SHM)
        goto fail_connect;
    *out = c;
    return 0;

fail_connect:
    if (c->arena != NULL)
        munmap(c->arena, c->arena_bytes);
    rx_reset(c);
    zmq_close(c->sock);
fail_sock:
    zmq_ctx_term(c->ctx);
fail_ctx:
    free(c->rx);
    free(c->fv);
    free(c);
    return rc;
}

void kvt_close(kvt_client_t **cp)
{
    kvt_client_t *c;

    if (cp == NULL || *cp == NULL)
        return;
    c = *cp;
    if (c->arena != NULL)
        munmap(c->arena, c->arena_bytes);
    rx_reset(c);
    zmq_close(c->sock);
    zmq_ctx_term(c->ctx);
    free(c->rx);
    free(c->fv);
    free(c);
    *cp = NULL;
}

int kvt_server_info(const kvt_client_t *c, kvt_server_info_t *info)
{
    if (c == NULL || info == NULL)
        return KVT_EINVAL;
    *info = c->info;
    return 0;
}

/* A hash list argument: non-empty, within the daemon's per-request limit. */
static int check_hashes(const kvt_client_t *c, const kvt_hash_t *hashes, size_t n)
{
    if (hashes == NULL || n == 0)
        return KVT_EINVAL;
    return n > c->info.max_chunks ? KVT_ETOOBIG : 0;
}

int kvt_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const kvt_lookup_opts_t *opts,
               kvt_lookup_result_t *res)
{
    kvt_msg_t req = {0}, rep;
    kvt_frame_t hf;
    int all = opts != NULL && opts->all_ranks, recovered = 0, rc;
    size_t nranks;

    if (c == NULL || res == NULL)
        return KVT_EINVAL;
    rc = check_hashes(c, hashes, n);
    if (rc != 0)
        return rc;
    req.hdr.type = KVT_MSG_LOOKUP;
    if (opts != NULL && opts->lease)
        req.hdr.flags |= KVT_LOOKUP_LEASE;
    if (opts != NULL && opts->has_prompt) {
        req.hdr.flags |= KVT_LOOKUP_PROMPT;
        req.u.lookup.prompt_tokens = opts->prompt_tokens;
        req.u.lookup.hbm_tokens = opts->hbm_tokens;
    }
    req.u.lookup.rank = all ? KVT_RANK_ALL : c->rank;
    hf.data = hashes;
    hf.len = n * sizeof *hashes;
    rc = call(c, &req, &hf, 1, KVT_MSG_LOOKUP_OK, call_deadline(c), &recovered, &rep);
    if (rc != 0)
        return rc;

    nranks = rep.u.lookup_ok.nranks;
    if (rep.u.lookup_ok.hit > n || nranks != (all ? c->world : 0u))
        return KVT_EPROTO;
    for (size_t r = 0; r < nranks; r++)
        if (kvt_get_u32(rep.u.lookup_ok.rank_hits + 4 * r) > n)
            return KVT_EPROTO;
    res->hit = rep.u.lookup_ok.hit;
    res->skipped = (rep.hdr.flags & KVT_LOOKUPR_SKIPPED) != 0;
    res->leased = (rep.hdr.flags & KVT_LOOKUPR_LEASED) != 0;
    res->lease_ms = res->leased ? rep.u.lookup_ok.lease_ms : 0;
    res->nranks = 0;
    for (size_t r = 0; r < nranks && res->rank_hits != NULL && r < res->rank_hits_cap; r++) {
        res->rank_hits[r] = kvt_get_u32(rep.u.lookup_ok.rank_hits + 4 * r);
        res->nranks++;
    }
    return 0;
}

/* Folds SAVE_OK into st: chunks sent (st[i] WANTED) take the daemon's answer; the others keep
 * the first answer. SKIPPED for a sent chunk means its reservation expired: not stored. */
static int merge_save_ok(const kvt_msg_t *rep, size_t n, uint8_t *st)
{
    if (rep->u.chunks_ok.n != n)
        return KVT_EPROTO;
    for (size_t i = 0; i < n; i++) {
        uint8_t s = rep->u.chunks_ok.status[i];
        if (st[i] != KVT_CHUNK_WANTED)
            continue;
        if (s == KVT_CHUNK_SKIPPED)
            s = KVT_CHUNK_NOSPACE;
        if (s != KVT_CHUNK_STORED && s != KVT_CHUNK_EXISTS && s != KVT_CHUNK_NOSPACE &&
            s != KVT_CHUNK_DECLINED)
            return KVT_EPROTO;
        st[i] = s;
    }
    return 0;
}

/* A location from the daemon, checked against the mapped arena: the extent, or NULL. */
static uint8_t *arena_at(const kvt_client_t *c, const uint8_t *loc, uint64_t *len)
{
    uint64_t off = kvt_get_u64(loc);

    *len = kvt_get_u64(loc + 8);
    if (*len == 0 || off > c->arena_bytes || *len > c->arena_bytes - off)
        return NULL;
    return c->arena + off;
}

/* Shared-memory save: reserve, copy into the arena, commit. */
static int save_shm(kvt_client_t *c, kvt_msg_t *req, const kvt_hash_t *hashes, size_t n,
                    const void *const *bufs, const size_t *lens, int64_t deadline, uint8_t *st)
{
    kvt_msg_t rep;
    kvt_frame_t fr[2];
    uint8_t *buf = malloc(n * (8 + KVT_LOC_BYTES)), *lenbuf, *locs;
    size_t nwanted = 0;
    int64_t hold_end;
    int recovered = 0, rc;

    if (buf == NULL)
        return KVT_ENOMEM;
    lenbuf = buf;
    locs = buf + 8 * n;
    for (size_t i = 0; i < n; i++)
        kvt_put_u64(lenbuf + 8 * i, lens[i]);
    fr[0].data = hashes;
    fr[0].len = n * sizeof *hashes;
    fr[1].data = lenbuf;
    fr[1].len = 8 * n;
    req->hdr.type = KVT_MSG_SAVE_RESERVE;
    hold_end = now_ms() + c->hold_ms; /* the daemon's hold starts after this */
    rc = call(c, req, fr, 2, KVT_MSG_SAVE_RESERVE_OK, deadline, &recovered, &rep);
    if (rc != 0)
        goto out;
    rc = KVT_EPROTO;
    if (rep.u.chunks_ok.n != n)
        goto out;
    memset(locs, 0, n * KVT_LOC_BYTES);
    for (size_t i = 0; i < n; i++) {
        uint8_t s = rep.u.chunks_ok.status[i];
        st[i] = s;
        if (s == KVT_CHUNK_WANTED) {
            uint64_t len;
            uint8_t *dst = arena_at(c, rep.u.chunks_ok.locs + i * KVT_LOC_BYTES, &len);
            if (dst == NULL || len != lens[i])
                goto out;
            if (now_ms() >= hold_end) {
                st[i] = KVT_CHUNK_NOSPACE; /* reclaimed by now: never touch it */
                continue;
            }
            memcpy(dst, bufs[i], lens[i]);
            memcpy(locs + i * KVT_LOC_BYTES, rep.u.chunks_ok.locs + i * KVT_LOC_BYTES,
                   KVT_LOC_BYTES);
            nwanted++;
        } else if (s != KVT_CHUNK_EXISTS && s != KVT_CHUNK_DECLINED && s != KVT_CHUNK_NOSPACE) {
            goto out;
        }
    }
    if (nwanted > 0) {
        req->hdr.type = KVT_MSG_SAVE_COMMIT;
        fr[1].data = locs;
        fr[1].len = n * KVT_LOC_BYTES;
        rc = call_once(c, req, fr, 2, KVT_MSG_SAVE_OK, deadline, &rep);
        if (rc != 0)
            goto out;
        rc = merge_save_ok(&rep, n, st);
        if (rc != 0)
            goto out;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* Shared-memory load: locations of pinned chunks, copy out, release the pins. */
static int load_shm(kvt_client_t *c, kvt_msg_t *req, const kvt_hash_t *hashes, size_t n,
                    void *const *bufs, const size_t *caps, size_t *lens, size_t *nhit,
                    int64_t deadline)
{
    kvt_msg_t rep, rel = {0};
    kvt_frame_t hf = {.data = hashes, .len = n * sizeof *hashes};
    kvt_hash_t *held;
    size_t prefix = 0, nheld = 0;
    int64_t hold_end;
    int recovered = 0, rc, short_buf = 0;

    req->hdr.flags |= KVT_LOAD_SHM;
    hold_end = now_ms() + c->hold_ms;
    rc = call(c, req, &hf, 1, KVT_MSG_LOAD_OK, deadline, &recovered, &rep);
    if (rc != 0)
        return rc;
    if (rep.u.chunks_ok.n != n || !(rep.hdr.flags & KVT_LOADR_SHM))
        return KVT_EPROTO;
    held = malloc(n * sizeof *held);
    if (held == NULL)
        return KVT_ENOMEM; /* the daemon reclaims the pins after hold_ms */
    rc = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t s = rep.u.chunks_ok.status[i];
        const uint8_t *src;
        uint64_t len;
        int loaded = 0;

        lens[i] = 0;
        if (s == KVT_CHUNK_MISS)
            continue;
        src =
            s == KVT_CHUNK_HIT ? arena_at(c, rep.u.chunks_ok.locs + i * KVT_LOC_BYTES, &len) : NULL;
        if (src == NULL) {
            rc = KVT_EPROTO;
            continue;
        }
        held[nheld++] = hashes[i];
        lens[i] = len;
        if (len > caps[i]) {
            short_buf = 1;
        } else if (now_ms() < hold_end) {
            memcpy(bufs[i], src, len);
            loaded = 1;
        } else {
            lens[i] = 0; /* the pin may be gone: what is there may no longer be this chunk */
        }
        if (loaded && prefix == i)
            prefix++;
    }
    if (nheld > 0) {
        kvt_frame_t rf = {.data = held, .len = nheld * sizeof *held};
        rel.hdr.type = KVT_MSG_RELEASE;
        rel.hdr.req_id = ++c->next_req_id;
        rel.hdr.ns_id = c->ns_id;
        rel.u.release.rank = c->rank;
        send_msg(c, &rel, &rf, 1, deadline); /* not awaited: a late reply is dropped */
    }
    free(held);
    *nhit = prefix;
    if (rc != 0)
        return rc;
    return short_buf ? KVT_EBUFSIZE : 0;
}

int kvt_save(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const void *const *bufs,
             const size_t *lens, const kvt_save_opts_t *opts, uint8_t *outcomes)
{
    kvt_msg_t req = {0}, rep;
    kvt_frame_t *frames;
    uint8_t *st;
    size_t nwanted = 0;
    int64_t deadline;
    int recovered = 0, rc;

    if (c == NULL || bufs == NULL || lens == NULL)
        return KVT_EINVAL;
    rc = check_hashes(c, hashes, n);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0 || bufs[i] == NULL)
            return KVT_EINVAL;
        if (lens[i] > c->info.max_chunk_bytes)
            return KVT_ETOOBIG;
    }
    /* frames[0] = the hashes, frames[1 + i] = chunk i's payload or nothing; st = outcomes */
    frames = malloc((n + 1) * sizeof *frames + n);
    if (frames == NULL)
        return KVT_ENOMEM;
    st = (uint8_t *)(frames + n + 1);

    req.hdr.type = KVT_MSG_SAVE_BEGIN;
    if (opts != NULL && opts->parent != NULL) {
        req.hdr.flags |= KVT_SAVE_PARENT;
        memcpy(req.u.save.parent.b, opts->parent->b, KVT_HASH_BYTES);
    }
    if (opts != NULL && opts->has_op_id) {
        req.hdr.flags |= KVT_SAVE_OPID;
        req.u.save.op_id = opts->op_id;
    }
    req.u.save.rank = c->rank;
    frames[0].data = hashes;
    frames[0].len = n * sizeof *hashes;
    deadline = call_deadline(c);
    if (c->arena != NULL) {
        rc = save_shm(c, &req, hashes, n, bufs, lens, deadline, st);
        if (rc == 0 && outcomes != NULL)
            memcpy(outcomes, st, n);
        goto out;
    }
    rc = call(c, &req, frames, 1, KVT_MSG_SAVE_BEGIN_OK, deadline, &recovered, &rep);
    if (rc != 0)
        goto out;
    rc = KVT_EPROTO;
    if (rep.u.chunks_ok.n != n)
        goto out;
    for (size_t i = 0; i < n; i++) {
        uint8_t s = rep.u.chunks_ok.status[i];
        if (s != KVT_CHUNK_WANTED && s != KVT_CHUNK_EXISTS && s != KVT_CHUNK_DECLINED &&
            s != KVT_CHUNK_NOSPACE)
            goto out;
        st[i] = s;
        frames[1 + i].data = s == KVT_CHUNK_WANTED ? bufs[i] : NULL;
        frames[1 + i].len = s == KVT_CHUNK_WANTED ? lens[i] : 0;
        nwanted += s == KVT_CHUNK_WANTED;
    }

    if (nwanted > 0) {
        req.hdr.type = KVT_MSG_SAVE_DATA;
        rc = call(c, &req, frames, n + 1, KVT_MSG_SAVE_OK, deadline, &recovered, &rep);
        if (rc == 0)
            rc = merge_save_ok(&rep, n, st);
        if (rc != 0)
            goto out;
    }
    if (outcomes != NULL)
        memcpy(outcomes, st, n);
    rc = 0;
out:
    free(frames);
    return rc;
}

int kvt_load(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, void *const *bufs,
             const size_t *caps, size_t *lens, size_t *nhit)
{
    kvt_msg_t req = {0}, rep;
    kvt_frame_t hf;
    size_t prefix = 0;
    int recovered = 0, rc, short_buf = 0;

    if (c == NULL || bufs == NULL || caps == NULL || lens == NULL || nhit == NULL)
        return KVT_EINVAL;
    rc = check_hashes(c, hashes, n);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (caps[i] > 0 && bufs[i] == NULL)
            return KVT_EINVAL;
    req.hdr.type = KVT_MSG_LOAD;
    req.u.load.rank = c->rank;
    if (c->arena != NULL)
        return load_shm(c, &req, hashes, n, bufs, caps, lens, nhit, call_deadline(c));
    hf.data = hashes;
    hf.len = n * sizeof *hashes;
    rc = call(c, &req, &hf, 1, KVT_MSG_LOAD_OK, call_deadline(c), &recovered, &rep);
    if (rc != 0)
        return rc;
    if (rep.u.chunks_ok.n != n)
        return KVT_EPROTO;
    for (size_t i = 0; i < n; i++) {
        uint8_t s = rep.u.chunks_ok.status[i];
        if (s != KVT_CHUNK_HIT && s != KVT_CHUNK_MISS)
            return KVT_EPROTO;
        if (s == KVT_CHUNK_HIT && rep.u.chunks_ok.payloads[i].len == 0)
            return KVT_EPROTO;
    }
    /* Only whole, fitting chunks are copied; lens says every stored size. */
    for (size_t i = 0; i < n; i++) {
        const kvt_frame_t *p = &rep.u.chunks_ok.payloads[i];
        int loaded = 0;
        lens[i] = p->len;
        if (p->len > 0 && p->len > caps[i]) {
            short_buf = 1;
        } else if (p->len > 0) {
            memcpy(bufs[i], p->data, p->len);
            loaded = 1;
        }
        if (loaded && prefix == i)
            prefix++;
    }
    *nhit = prefix;
    return short_buf ? KVT_EBUFSIZE : 0;
}

int kvt_tally(kvt_client_t *c, uint64_t engine_id, uint64_t paid_total, uint64_t probes_total,
              const kvt_reason_t *reasons, size_t nreasons, kvt_gate_state_t *state)
{
    return kvt_tally2(c, engine_id, paid_total, probes_total, NULL, reasons, nreasons, state);
}

int kvt_tally2(kvt_client_t *c, uint64_t engine_id, uint64_t paid_total, uint64_t probes_total,
               const kvt_tally_tokens_t *tokens, const kvt_reason_t *reasons, size_t nreasons,
               kvt_gate_state_t *state)
{
    uint8_t buf[KVT_REASON_MAX * (1 + KVT_REASON_NAME_MAX + 8)];
    kvt_msg_t req = {0}, rep;
    kvt_frame_t rf = {.data = buf, .len = 0};
    int recovered = 0, rc;

    if (c == NULL || (reasons == NULL && nreasons > 0))
        return KVT_EINVAL;
    if (nreasons > KVT_REASON_MAX)
        return KVT_ETOOBIG;
    for (size_t i = 0; i < nreasons; i++) {
        size_t w;
        if (reasons[i].name == NULL)
            return KVT_EINVAL;
        w = kvt_reason_encode(buf + rf.len, sizeof buf - rf.len, reasons[i].name,
                              strlen(reasons[i].name), reasons[i].count);
        if (w == 0)
            return KVT_EINVAL;
        rf.len += w;
    }
    req.hdr.type = KVT_MSG_TALLY;
    req.u.tally.engine_id = engine_id;
    req.u.tally.paid_total = paid_total;
    req.u.tally.probes_total = probes_total;
    if (tokens != NULL) {
        req.hdr.flags = KVT_TALLY_TOKENS;
        req.u.tally.served_tokens_total = tokens->served_tokens_total;
        req.u.tally.lookup_tokens_total = tokens->lookup_tokens_total;
    }
    rc = call(c, &req, &rf, 1, KVT_MSG_TALLY_OK, call_deadline(c), &recovered, &rep);
    if (rc != 0 || state == NULL)
        return rc;
    state->payoff = rep.u.tally_ok.payoff;
    state->share = rep.u.tally_ok.share;
    state->act_ema = rep.u.tally_ok.act_ema;
    state->probes = rep.u.tally_ok.probes;
    state->lookups = rep.u.tally_ok.lookups;
    state->admission_enabled = (rep.u.tally_ok.gate_flags & KVT_GATE_ADMISSION_ON) != 0;
    state->skip_enabled = (rep.u.tally_ok.gate_flags & KVT_GATE_SKIP_ON) != 0;
    state->load_bearing = (rep.u.tally_ok.gate_flags & KVT_GATE_LOAD_BEARING) != 0;
    state->policy = rep.u.tally_ok.policy;
    state->density = rep.u.tally_ok.density;
    state->served_tokens = rep.u.tally_ok.served_tokens;
    state->regret_tokens = rep.u.tally_ok.regret_tokens;
    state->written_tokens = rep.u.tally_ok.written_tokens;
    state->declined_tokens = rep.u.tally_ok.declined_tokens;
    return 0;
}

const char *kvt_last_error(const kvt_client_t *c)
{
    return c != NULL ? c->last_error : "";
}

const char *kvt_strerror(int err)
{
    switch (err) {
    case KVT_OK:
        return "success";
    case KVT_EPROTO:
        return "malformed message";
    case KVT_EVERSION:
        return "protocol version mismatch";
    case KVT_ENONS:
        return "namespace unknown or not declared";
    case KVT_ETOOBIG:
        return "payload or list larger than the daemon accepts";
    case KVT_EINVAL:
        return "invalid argument";
    case KVT_ECONFLICT:
        return "namespace already declared with another world size or replication";
    case KVT_EBUSY:
        return "daemon busy or shutting down";
    case KVT_EUNSUPP:
        return "request not supported by the daemon";
    case KVT_ETIMEDOUT:
        return "no reply from the daemon within the timeout";
    case KVT_ENOMEM:
        return "out of memory";
    case KVT_ECONNECT:
        return "could not create or connect the socket";
    case KVT_EBUFSIZE:
        return "buffer too small for the stored chunk";
    case KVT_ESYS:
        return "system call failed";
    default:
        return "unknown error";
    }
}
