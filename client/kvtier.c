/*
 * kvtier.c - libkvtier's public calls (kvtier.h): connect, shutdown and close, every submit, the
 * synchronous wrappers, the completion queue, stats and error texts. The I/O thread that sends
 * and receives is io.c; what the files share is internal.h.
 *
 * Design: a submit checks its arguments against the limits the daemon announced, allocates one
 * block holding the request and every array it needs (the caller's small arrays are copied into
 * it; chunk buffers are only pointed to), and appends it to the submission queue under c->mu,
 * writing the I/O thread's wake eventfd only when that thread sleeps. Completions come back on
 * a queue under the same mutex; the completion eventfd is written when the queue stops being
 * empty and read when it becomes empty again, so it is readable exactly while a completion
 * waits (level-triggered, whatever the caller polls with). A synchronous call is a submit whose
 * request is flagged sync: the I/O thread marks it done and broadcasts c->sync_cv instead of
 * queueing it, and the caller copies the results out and frees it. When the client is idle (the
 * I/O thread parked) a synchronous call runs the I/O on its own thread instead (io.c), saving
 * the two hand-offs; the asynchronous calls never do.
 *
 * Lifetimes: every request a caller can see is on c->all until freed, so kvt_close frees
 * whatever the caller never took or never freed. kvt_shutdown joins the I/O thread, after
 * which nothing touches a caller buffer and submits fail with KVT_ECLOSED.
 *
 * Errors for people: the daemon's text travels in each completion (comp.error); a synchronous
 * call leaves it in thread-local storage for kvt_last_error(c) on the calling thread, and a
 * failed kvt_connect under c == NULL (there is no client to ask).
 *
 * Threads: see kvtier.h; everything here may run on any thread unless it says otherwise.
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)KVT_EPROTO == (int)KVT_WIRE_EPROTO, "wire code");
_Static_assert((int)KVT_EVERSION == (int)KVT_WIRE_EVERSION, "wire code");
_Static_assert((int)KVT_ENONS == (int)KVT_WIRE_ENONS, "wire code");
_Static_assert((int)KVT_ETOOBIG == (int)KVT_WIRE_ETOOBIG, "wire code");
_Static_assert((int)KVT_EINVAL == (int)KVT_WIRE_EINVAL, "wire code");
_Static_assert((int)KVT_ECONFLICT == (int)KVT_WIRE_ECONFLICT, "wire code");
_Static_assert((int)KVT_EBUSY == (int)KVT_WIRE_EBUSY, "wire code");
_Static_assert((int)KVT_EUNSUPP == (int)KVT_WIRE_EUNSUPP, "wire code");
_Static_assert((int)KVT_ESTALE == (int)KVT_WIRE_ESTALE, "wire code");
_Static_assert((int)KVT_SAVE_STORED == (int)KVT_CHUNK_STORED, "save outcome");
_Static_assert((int)KVT_SAVE_EXISTS == (int)KVT_CHUNK_EXISTS, "save outcome");
_Static_assert((int)KVT_SAVE_NOSPACE == (int)KVT_CHUNK_NOSPACE, "save outcome");
_Static_assert((int)KVT_SAVE_DECLINED == (int)KVT_CHUNK_DECLINED, "save outcome");
_Static_assert((int)KVT_SAVE_RESERVED > (int)KVT_CHUNK_DECLINED, "reserve outcome");
_Static_assert(sizeof(kvt_hash_t) == KVT_HASH_BYTES, "hash size");
_Static_assert(KVT_FEATURE_CHECKSUMS == KVT_FEAT_CHECKSUMS &&
                   KVT_FEATURE_TOKENS == KVT_FEAT_TOKENS &&
                   KVT_FEATURE_ARENA_GEN == KVT_FEAT_ARENA_GEN &&
                   KVT_FEATURE_CLIENT_CSUMS == KVT_FEAT_CLIENT_CSUMS,
               "feature bits");

static const char old_daemon_text[] = "kvtierd speaks protocol 1; libkvtier 0.2 needs protocol 2";

/* The calling thread's last failed synchronous call: on which client, and the daemon's text. */
static _Thread_local struct {
    const kvt_client_t *c;
    char text[KVT_ERRTEXT_MAX + 1];
} last_err;

static void keep_error(const kvt_client_t *c, int rc, const char *text)
{
    if (rc == 0)
        return;
    last_err.c = c;
    snprintf(last_err.text, sizeof last_err.text, "%s", text != NULL ? text : "");
}

const char *kvt_last_error(const kvt_client_t *c)
{
    return last_err.c == c ? last_err.text : "";
}

/*
 * fork() (0.2.13). A child gets a copy of every client without its threads (the I/O thread,
 * the copy helpers, ZeroMQ's), with its mutexes as they were at the fork (maybe held by a thread
 * it does not have), and shares its eventfds and ZeroMQ socket with the parent. Using it there
 * spun for ever inside ZeroMQ (no timeout fired), kvt_close hung in pthread_cond_destroy, and a
 * read of the shared completion eventfd could take the parent's readiness. So a child fork
 * handler counts forks, every client remembers the count at its connect, and in a forked child
 * each call fails KVT_ECLOSED (kvt_last_error says why) before it takes a lock or touches the
 * socket; kvt_shutdown and kvt_close there release nothing (the resources are the parent's; the
 * descriptors are close-on-exec) and return. A child connects its own client.
 */
static atomic_uint fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed);
}

static void fork_hook(void)
{
    (void)pthread_atfork(NULL, NULL, fork_child);
}

bool kvt__forked(const kvt_client_t *c)
{
    return c->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed);
}

/* KVT_ECLOSED for a call on a client of the parent process, with the reason for
 * kvt_last_error on this thread. */
int kvt__fork_refused(const kvt_client_t *c)
{
    char text[KVT_ERRTEXT_MAX + 1];

    snprintf(text, sizeof text,
             "this client was connected by process %ld before a fork(); a forked child must "
             "connect its own",
             (long)c->pid);
    keep_error(c, KVT_ECLOSED, text);
    return KVT_ECLOSED;
}

int64_t kvt__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- requests --- */

/* What a request of kind needs besides the struct, per chunk and in all. */
typedef struct {
    bool hashes, src, dst, sizes, out, lens, ptrs, csums, locs, cpidx;
    size_t rank_hits; /* entries */
    size_t tally;     /* bytes of encoded reasons */
} layout_t;

static layout_t layout_of(const kvt_client_t *c, int kind)
{
    layout_t l = {.hashes = true, .out = true};

    switch (kind) {
    case KVT_OP_LOOKUP:
        l.out = false;
        l.rank_hits = c->world;
        break;
    case KVT_OP_SAVE:
        l.src = l.sizes = l.locs = l.csums = l.cpidx = true;
        break;
    case KVT_OP_LOAD:
        l.dst = l.sizes = l.lens = l.csums = l.locs = l.cpidx = true;
        break;
    case KVT_OP_RESERVE:
        l.sizes = l.ptrs = l.locs = true;
        break;
    case KVT_OP_COMMIT:
        l.hashes = false; /* the reservation's */
        l.locs = true;
        break;
    case KVT_OP_PIN:
        l.lens = l.ptrs = l.csums = true;
        break;
    case KVT_OP_TALLY:
        l.hashes = l.out = false;
        l.tally = KVT_REASON_MAX * (1 + KVT_REASON_NAME_MAX + 8);
        break;
    default:
        l.hashes = l.out = false;
        break;
    }
    return l;
}

/* One allocation: the struct, then the 8-byte arrays, then the rest. */
static req_t *req_new(kvt_client_t *c, int kind, size_t n)
{
    layout_t l = layout_of(c, kind);
    size_t words = (size_t)l.src + l.dst + l.sizes + l.lens + l.ptrs + l.csums + l.cpidx;
    size_t size = sizeof(req_t) +
                  n * (8 * words + (l.hashes ? KVT_HASH_BYTES : 0) + (l.locs ? KVT_LOC_BYTES : 0) +
                       (l.out ? 1 : 0)) +
                  4 * l.rank_hits + l.tally;
    uint8_t *p;
    req_t *r = calloc(1, size);

    if (r == NULL)
        return NULL;
    p = (uint8_t *)(r + 1);
#define TAKE(field, type, count)                                                                   \
    do {                                                                                           \
        r->field = (type)(void *)p;                                                                \
        p += (count);                                                                              \
    } while (0)
    if (l.src)
        TAKE(src, const void **, 8 * n);
    if (l.dst)
        TAKE(dst, void **, 8 * n);
    if (l.sizes)
        TAKE(sizes, size_t *, 8 * n);
    if (l.lens)
        TAKE(lens, size_t *, 8 * n);
    if (l.ptrs)
        TAKE(ptrs, void **, 8 * n);
    if (l.csums)
        TAKE(csums, uint64_t *, 8 * n);
    if (l.cpidx)
        TAKE(cpidx, size_t *, 8 * n);
    if (l.rank_hits)
        TAKE(rank_hits, uint32_t *, 4 * l.rank_hits);
    if (l.hashes)
        TAKE(hashes, kvt_hash_t *, KVT_HASH_BYTES * n);
    if (l.locs)
        TAKE(locs, uint8_t *, KVT_LOC_BYTES * n);
    if (l.out)
        TAKE(out, uint8_t *, n);
    if (l.tally)
        TAKE(tally_buf, uint8_t *, l.tally);
#undef TAKE
    r->c = c;
    r->kind = (uint8_t)kind;
    r->n = n;
    r->comp.op = kind;
    r->comp.n = kind == KVT_OP_TALLY ? 0 : n;
    r->comp.outcomes = r->out;
    r->comp.lens = r->lens;
    r->comp.ptrs = r->ptrs;
    r->comp.checksums = kind == KVT_OP_PIN ? r->csums : NULL;
    r->comp.error = r->err;
    return r;
}

void kvt__req_free(kvt_client_t *c, req_t *r)
{
    pthread_mutex_lock(&c->mu);
    if (r->all_prev != NULL)
        r->all_prev->all_next = r->all_next;
    else if (c->all == r)
        c->all = r->all_next;
    if (r->all_next != NULL)
        r->all_next->all_prev = r->all_prev;
    pthread_mutex_unlock(&c->mu);
    if (r->resv != NULL)
        kvt__req_free(c, r->resv);
    kvt__map_unref(r->map);
    free(r);
}

/* Gives r its deadline (from now), its handle and its place on c->all; with c->mu held. */
static void register_locked(kvt_client_t *c, req_t *r, const kvt_submit_opts_t *so)
{
    int timeout = so != NULL && so->timeout_ms > 0 ? so->timeout_ms : c->timeout_ms;

    r->comp.user = so != NULL ? so->user : NULL;
    r->born_ms = kvt__now_ms();
    r->deadline_ms = r->born_ms + timeout;
    r->comp.handle = ++c->next_handle;
    r->all_next = c->all;
    if (c->all != NULL)
        c->all->all_prev = r;
    c->all = r;
    if (r->kind != RK_HELLO) /* the connect's own HELLO is no request of the caller's */
        atomic_fetch_add_explicit(&c->n_submitted, 1, memory_order_relaxed);
}

/* Whether the I/O thread waits and must be woken (with c->mu held; it then counts as woken). */
static bool wake_locked(kvt_client_t *c)
{
    bool sleeping = c->io_sleeping;

    c->io_sleeping = false;
    return sleeping;
}

/* Wakes the I/O thread (after wake_locked said so, without c->mu). */
static void wake_io(kvt_client_t *c)
{
    uint64_t one = 1;

    (void)!write(c->wake_fd, &one, sizeof one);
}

/* Queues r for the I/O thread. KVT_ECLOSED after kvt_shutdown (r is then the caller's to free). */
static int submit(kvt_client_t *c, req_t *r, const kvt_submit_opts_t *so)
{
    bool wake;

    pthread_mutex_lock(&c->mu);
    if (c->closing) {
        pthread_mutex_unlock(&c->mu);
        return KVT_ECLOSED;
    }
    register_locked(c, r, so);
    r->next = NULL;
    if (c->subq_tail != NULL)
        c->subq_tail->next = r;
    else
        c->subq_head = r;
    c->subq_tail = r;
    c->nsub++;
    wake = wake_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (wake)
        wake_io(c);
    return 0;
}

/* Submits r and returns its handle in *out; r is freed when the submit fails. */
static int submit_async(kvt_client_t *c, req_t *r, const kvt_submit_opts_t *so, kvt_handle_t *out)
{
    int rc = submit(c, r, so);

    if (rc != 0) {
        free(r);
        return rc;
    }
    if (out != NULL)
        *out = r->comp.handle;
    return 0;
}

/* Runs r flagged sync until it completed: on this thread when the I/O thread is parked (the
 * client idle: io.c), else through the I/O thread. Returns its status; r stays the caller's to
 * read and free (also when the submit failed). */
static int run_sync(kvt_client_t *c, req_t *r)
{
    bool run_here;
    int rc;

    r->sync = true;
    pthread_mutex_lock(&c->mu);
    run_here = c->parked && !c->inline_active && !c->closing && c->subq_head == NULL;
    if (run_here) {
        register_locked(c, r, NULL);
        c->inline_active = true;
    }
    pthread_mutex_unlock(&c->mu);
    if (run_here) {
        atomic_fetch_add_explicit(&c->n_inline, 1, memory_order_relaxed);
        kvt__io_inline(c, r);
    } else {
        rc = submit(c, r, NULL);
        if (rc != 0) {
            r->comp.status = rc;
            return rc;
        }
    }
    pthread_mutex_lock(&c->mu);
    while (!r->done)
        pthread_cond_wait(&c->sync_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    keep_error(c, r->comp.status, r->err);
    return r->comp.status;
}

/* Frees a synchronous request whether or not it was ever queued. */
static void sync_free(kvt_client_t *c, req_t *r)
{
    if (r->comp.handle != 0)
        kvt__req_free(c, r);
    else
        free(r);
}

/* --- argument checks --- */

static kvt_server_info_t info_of(const kvt_client_t *c)
{
    kvt_client_t *mc = (kvt_client_t *)c;
    kvt_server_info_t in;

    pthread_mutex_lock(&mc->mu);
    in = c->info;
    pthread_mutex_unlock(&mc->mu);
    return in;
}

/* A hash list argument: non-empty, within the daemon's per-request limit. */
/* The argument checks say what was wrong (kvt_last_error), with the daemon's limit. */
static int refuse(const kvt_client_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(const kvt_client_t *c, int rc, const char *fmt, ...)
{
    char text[KVT_ERRTEXT_MAX + 1];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    keep_error(c, rc, text);
    return rc;
}

static int check_hashes(const kvt_client_t *c, const kvt_hash_t *hashes, size_t n)
{
    uint32_t max = info_of(c).max_chunks;

    if (hashes == NULL || n == 0)
        return refuse(c, KVT_EINVAL, "no hashes (a request names 1 to %u chunks)", max);
    if (n > max)
        return refuse(c, KVT_ETOOBIG,
                      "%zu chunks in one request; the daemon takes at most %u "
                      "(server.max_chunks_per_request)",
                      n, max);
    return 0;
}

static int check_lens(const kvt_client_t *c, const size_t *lens, size_t n)
{
    uint64_t max = info_of(c).max_chunk_bytes;

    if (lens == NULL)
        return KVT_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0)
            return refuse(c, KVT_EINVAL, "chunk %zu is empty (a chunk has 1 byte or more)", i);
        if (lens[i] > max)
            return refuse(c, KVT_ETOOBIG,
                          "chunk %zu is %zu bytes; the daemon takes at most %" PRIu64
                          " (ram.max_chunk_bytes)",
                          i, lens[i], max);
    }
    return 0;
}

/* --- building requests --- */

static int make_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                       const kvt_lookup_opts_t *opts, req_t **out)
{
    int rc;
    req_t *r;

    if (c == NULL)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    rc = check_hashes(c, hashes, n);
    if (rc != 0)
        return rc;
    r = req_new(c, KVT_OP_LOOKUP, n);
    if (r == NULL)
        return KVT_ENOMEM;
    memcpy(r->hashes, hashes, n * sizeof *hashes);
    if (opts != NULL)
        r->lookup = *opts;
    *out = r;
    return 0;
}

static void set_save_opts(req_t *r, const kvt_save_opts_t *opts)
{
    if (opts == NULL)
        return;
    if (opts->parent != NULL) {
        r->has_parent = true;
        r->parent = *opts->parent;
    }
    r->has_op_id = opts->has_op_id != 0;
    r->op_id = opts->op_id;
}

static int make_save(kvt_client_t *c, int kind, const kvt_hash_t *hashes, size_t n,
                     const void *const *bufs, const size_t *lens, const kvt_save_opts_t *opts,
                     req_t **out)
{
    req_t *r;
    int rc;

    if (c == NULL || (kind == KVT_OP_SAVE && bufs == NULL))
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    if (kind == KVT_OP_RESERVE && !c->shm)
        return KVT_EUNSUPP;
    rc = check_hashes(c, hashes, n);
    if (rc == 0)
        rc = check_lens(c, lens, n);
    if (rc != 0)
        return rc;
    for (size_t i = 0; kind == KVT_OP_SAVE && i < n; i++)
        if (bufs[i] == NULL)
            return KVT_EINVAL;
    r = req_new(c, kind, n);
    if (r == NULL)
        return KVT_ENOMEM;
    memcpy(r->hashes, hashes, n * sizeof *hashes);
    memcpy(r->sizes, lens, n * sizeof *lens);
    if (kind == KVT_OP_SAVE)
        memcpy(r->src, bufs, n * sizeof *bufs);
    set_save_opts(r, opts);
    *out = r;
    return 0;
}

static int make_load(kvt_client_t *c, int kind, const kvt_hash_t *hashes, size_t n,
                     void *const *bufs, const size_t *caps, req_t **out)
{
    req_t *r;
    int rc;

    if (c == NULL || (kind == KVT_OP_LOAD && (bufs == NULL || caps == NULL)))
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    if (kind == KVT_OP_PIN && !c->shm)
        return KVT_EUNSUPP;
    rc = check_hashes(c, hashes, n);
    if (rc != 0)
        return rc;
    for (size_t i = 0; kind == KVT_OP_LOAD && i < n; i++)
        if (caps[i] > 0 && bufs[i] == NULL)
            return KVT_EINVAL;
    r = req_new(c, kind, n);
    if (r == NULL)
        return KVT_ENOMEM;
    memcpy(r->hashes, hashes, n * sizeof *hashes);
    if (kind == KVT_OP_LOAD) {
        memcpy(r->dst, bufs, n * sizeof *bufs);
        memcpy(r->sizes, caps, n * sizeof *caps);
    }
    *out = r;
    return 0;
}

static int make_tally(kvt_client_t *c, const kvt_tally_req_t *t, req_t **out)
{
    req_t *r;

    if (c == NULL || t == NULL || (t->reasons == NULL && t->nreasons > 0))
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    if (t->nreasons > KVT_REASON_MAX)
        return KVT_ETOOBIG;
    r = req_new(c, KVT_OP_TALLY, 0);
    if (r == NULL)
        return KVT_ENOMEM;
    for (size_t i = 0; i < t->nreasons; i++) {
        size_t w = 0;
        if (t->reasons[i].name != NULL)
            w = kvt_reason_encode(r->tally_buf + r->tally_len,
                                  KVT_REASON_MAX * (1 + KVT_REASON_NAME_MAX + 8) - r->tally_len,
                                  t->reasons[i].name, strlen(t->reasons[i].name),
                                  t->reasons[i].count);
        if (w == 0) {
            free(r);
            return KVT_EINVAL;
        }
        r->tally_len += w;
    }
    r->tally = *t;
    r->tally.reasons = NULL; /* encoded above: the caller's array is not kept */
    *out = r;
    return 0;
}

/* --- submits --- */

int kvt_submit_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n,
                      const kvt_lookup_opts_t *opts, const kvt_submit_opts_t *so, kvt_handle_t *out)
{
    req_t *r;
    int rc = make_lookup(c, hashes, n, opts, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

int kvt_submit_save(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const void *const *bufs,
                    const size_t *lens, const kvt_save_opts_t *opts, const kvt_submit_opts_t *so,
                    kvt_handle_t *out)
{
    req_t *r;
    int rc = make_save(c, KVT_OP_SAVE, hashes, n, bufs, lens, opts, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

int kvt_submit_load(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, void *const *bufs,
                    const size_t *caps, const kvt_submit_opts_t *so, kvt_handle_t *out)
{
    req_t *r;
    int rc = make_load(c, KVT_OP_LOAD, hashes, n, bufs, caps, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

int kvt_submit_tally(kvt_client_t *c, const kvt_tally_req_t *t, const kvt_submit_opts_t *so,
                     kvt_handle_t *out)
{
    req_t *r;
    int rc = make_tally(c, t, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

int kvt_submit_reserve(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const size_t *lens,
                       const kvt_save_opts_t *opts, const kvt_submit_opts_t *so, kvt_handle_t *out)
{
    req_t *r;
    int rc = make_save(c, KVT_OP_RESERVE, hashes, n, NULL, lens, opts, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

int kvt_submit_pin(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const kvt_submit_opts_t *so,
                   kvt_handle_t *out)
{
    req_t *r;
    int rc = make_load(c, KVT_OP_PIN, hashes, n, NULL, NULL, &r);

    return rc != 0 ? rc : submit_async(c, r, so, out);
}

/* The commit of reservation (not yet submitted): it consumes the reservation. */
static int make_commit(kvt_client_t *c, kvt_completion_t *reservation, size_t nwritten, req_t **out)
{
    req_t *v = (req_t *)reservation, *r;

    if (c != NULL && kvt__forked(c))
        return kvt__fork_refused(c);
    if (c == NULL || v == NULL || v->c != c || v->kind != KVT_OP_RESERVE || v->comp.status != 0 ||
        v->consumed || nwritten > v->n)
        return KVT_EINVAL;
    r = req_new(c, KVT_OP_COMMIT, v->n);
    if (r == NULL)
        return KVT_ENOMEM;
    r->hashes = v->hashes;
    r->nwritten = nwritten;
    v->consumed = true;
    r->resv = v;
    *out = r;
    return 0;
}

/* A commit that never went out: the reservation is the caller's again. */
static void unmake_commit(req_t *r)
{
    r->resv->consumed = false;
    r->resv = NULL;
    free(r);
}

int kvt_submit_commit(kvt_client_t *c, kvt_completion_t *reservation, size_t nwritten,
                      const kvt_submit_opts_t *so, kvt_handle_t *out)
{
    req_t *r;
    int rc = make_commit(c, reservation, nwritten, &r);

    if (rc != 0)
        return rc;
    rc = submit(c, r, so);
    if (rc != 0) {
        unmake_commit(r);
        return rc;
    }
    if (out != NULL)
        *out = r->comp.handle;
    return 0;
}

/* Runs zero-copy request r synchronously and hands its completion to the caller (*out), or
 * frees it when it never ran (the submit was refused: *out NULL). */
static int run_sync_zc(kvt_client_t *c, req_t *r, kvt_completion_t **out)
{
    int rc = run_sync(c, r);

    if (r->comp.handle == 0) { /* never registered: nothing was sent */
        if (r->kind == KVT_OP_COMMIT)
            unmake_commit(r);
        else
            free(r);
        return rc;
    }
    r->sync = false; /* an ordinary completion from here: the caller's */
    *out = &r->comp;
    return rc;
}

int kvt_reserve(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const size_t *lens,
                const kvt_save_opts_t *opts, kvt_completion_t **out)
{
    req_t *r;
    int rc;

    if (out == NULL)
        return KVT_EINVAL;
    *out = NULL;
    rc = make_save(c, KVT_OP_RESERVE, hashes, n, NULL, lens, opts, &r);
    return rc != 0 ? rc : run_sync_zc(c, r, out);
}

int kvt_commit(kvt_client_t *c, kvt_completion_t *reservation, size_t nwritten,
               kvt_completion_t **out)
{
    req_t *r;
    int rc;

    if (out == NULL)
        return KVT_EINVAL;
    *out = NULL;
    rc = make_commit(c, reservation, nwritten, &r);
    return rc != 0 ? rc : run_sync_zc(c, r, out);
}

int kvt_pin(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, kvt_completion_t **out)
{
    req_t *r;
    int rc;

    if (out == NULL)
        return KVT_EINVAL;
    *out = NULL;
    rc = make_load(c, KVT_OP_PIN, hashes, n, NULL, NULL, &r);
    return rc != 0 ? rc : run_sync_zc(c, r, out);
}

/* --- completions --- */

int kvt_fd(const kvt_client_t *c)
{
    return c != NULL && !kvt__forked(c) ? c->comp_fd : -1;
}

int kvt_poll(kvt_client_t *c, int timeout_ms)
{
    struct pollfd p;
    int rc;

    if (c == NULL)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    p.fd = c->comp_fd;
    p.events = POLLIN;
    do {
        rc = poll(&p, 1, timeout_ms < 0 ? -1 : timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return KVT_ESYS;
    return rc > 0 ? 1 : 0;
}

int kvt_next_completion(kvt_client_t *c, kvt_completion_t **out)
{
    req_t *r;

    if (c == NULL || out == NULL)
        return KVT_EINVAL;
    *out = NULL;
    if (kvt__forked(c)) /* 0, not an error: a while (kvt_next_completion(...)) loop ends */
        return 0;
    pthread_mutex_lock(&c->mu);
    r = c->compq_head;
    if (r != NULL) {
        c->compq_head = r->next;
        if (c->compq_head == NULL) {
            uint64_t v;
            c->compq_tail = NULL;
            (void)!read(c->comp_fd, &v, sizeof v); /* empty now: not readable any more */
        }
        r->next = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    *out = r != NULL ? &r->comp : NULL;
    return r != NULL;
}

/* Queues releases of kind k for the I/O thread, waking it when they are the first. */
static void queue_releases(kvt_client_t *c, int k, const kvt_hash_t *const *hs, size_t n)
{
    int64_t now = kvt__now_ms();
    bool wake;

    if (n == 0)
        return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++)
        kvt__relq_add(&c->rel[k], hs[i], now);
    wake = wake_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (wake)
        wake_io(c);
}

/* Releases the HIT chunks of a pin (or, with only, chunk only). */
static void release_pins(kvt_client_t *c, req_t *r, int k, size_t only)
{
    const kvt_hash_t *one[1];
    const kvt_hash_t **hs = one;
    size_t n = 0;

    if (only != SIZE_MAX) {
        one[n++] = &r->hashes[only];
    } else {
        hs = malloc(r->n * sizeof *hs);
        if (hs == NULL)
            return; /* the daemon reclaims them at their hold deadline */
        for (size_t i = 0; i < r->n; i++)
            if (r->out[i] == KVT_LOAD_HIT)
                hs[n++] = &r->hashes[i];
    }
    queue_releases(c, k, hs, n);
    if (hs != one)
        free(hs);
}

void kvt_completion_free(kvt_client_t *c, kvt_completion_t *comp)
{
    req_t *r = (req_t *)comp;

    if (c == NULL || r == NULL || kvt__forked(c)) /* a child's copy: the parent releases */
        return;
    if (r->kind == KVT_OP_PIN && r->comp.status == 0 && kvt__now_ms() < r->comp.hold_until_ms)
        release_pins(c, r, 0, SIZE_MAX);
    kvt__req_free(c, r);
}

int kvt_pin_verify(kvt_client_t *c, kvt_completion_t *pin)
{
    req_t *r = (req_t *)pin;
    int bad = 0;

    if (c == NULL || r == NULL || r->kind != KVT_OP_PIN || r->comp.status != 0)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    if (r->comp.checksums == NULL)
        return KVT_EUNSUPP;
    if (kvt__now_ms() >= r->comp.hold_until_ms)
        return KVT_ETIMEDOUT;
    for (size_t i = 0; i < r->n; i++) {
        if (r->out[i] != KVT_LOAD_HIT)
            continue;
        atomic_fetch_add_explicit(&c->n_verified, 1, memory_order_relaxed);
        if (kvt_checksum(r->ptrs[i], r->lens[i]) == r->csums[i])
            continue;
        atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
        r->out[i] = KVT_LOAD_CORRUPT;
        r->ptrs[i] = NULL;
        r->lens[i] = 0;
        release_pins(c, r, 1, i);
        bad++;
    }
    r->comp.nhit = 0;
    while (r->comp.nhit < r->n && r->out[r->comp.nhit] == KVT_LOAD_HIT)
        r->comp.nhit++;
    return bad;
}

/* --- synchronous calls --- */

int kvt_lookup(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const kvt_lookup_opts_t *opts,
               kvt_lookup_result_t *res)
{
    req_t *r;
    int rc;

    if (res == NULL)
        return KVT_EINVAL;
    rc = make_lookup(c, hashes, n, opts, &r);
    if (rc != 0)
        return rc;
    rc = run_sync(c, r);
    if (rc == 0) {
        const kvt_lookup_result_t *got = &r->comp.lookup;
        uint32_t *rh = res->rank_hits, cap = res->rank_hits_cap;
        res->hit = got->hit;
        res->skipped = got->skipped;
        res->leased = got->leased;
        res->lease_ms = got->lease_ms;
        res->lease_capped = got->lease_capped;
        res->nranks = 0;
        for (uint32_t i = 0; i < got->nranks && rh != NULL && i < cap; i++)
            rh[res->nranks++] = got->rank_hits[i];
    }
    sync_free(c, r);
    return rc;
}

int kvt_save(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, const void *const *bufs,
             const size_t *lens, const kvt_save_opts_t *opts, uint8_t *outcomes)
{
    req_t *r;
    int rc = make_save(c, KVT_OP_SAVE, hashes, n, bufs, lens, opts, &r);

    if (rc != 0)
        return rc;
    rc = run_sync(c, r);
    if (rc == 0 && outcomes != NULL)
        memcpy(outcomes, r->out, n);
    sync_free(c, r);
    return rc;
}

int kvt_load(kvt_client_t *c, const kvt_hash_t *hashes, size_t n, void *const *bufs,
             const size_t *caps, size_t *lens, size_t *nhit)
{
    req_t *r;
    int rc;

    if (lens == NULL || nhit == NULL)
        return KVT_EINVAL;
    rc = make_load(c, KVT_OP_LOAD, hashes, n, bufs, caps, &r);
    if (rc != 0)
        return rc;
    rc = run_sync(c, r);
    if (rc == 0 || rc == KVT_EBUFSIZE) {
        memcpy(lens, r->lens, n * sizeof *lens);
        *nhit = r->comp.nhit;
    }
    sync_free(c, r);
    return rc;
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
    kvt_tally_req_t t = {.engine_id = engine_id,
                         .paid_total = paid_total,
                         .probes_total = probes_total,
                         .reasons = reasons,
                         .nreasons = nreasons};
    req_t *r;
    int rc;

    if (tokens != NULL) {
        t.has_tokens = 1;
        t.served_tokens_total = tokens->served_tokens_total;
        t.lookup_tokens_total = tokens->lookup_tokens_total;
    }
    rc = make_tally(c, &t, &r);
    if (rc != 0)
        return rc;
    rc = run_sync(c, r);
    if (rc == 0 && state != NULL)
        *state = r->comp.gates;
    sync_free(c, r);
    return rc;
}

/* --- the client --- */

int kvt_data_path(const kvt_client_t *c)
{
    return c != NULL && c->shm ? KVT_DATA_PATH_SHM : KVT_DATA_PATH_FRAMES;
}

int kvt_server_info(const kvt_client_t *c, kvt_server_info_t *info)
{
    if (c == NULL || info == NULL)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    *info = info_of(c);
    return 0;
}

int kvt_stats(const kvt_client_t *c, kvt_stats_t *out)
{
    kvt_client_t *mc = (kvt_client_t *)c;
    size_t nsub;

    if (c == NULL || out == NULL)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    pthread_mutex_lock(&mc->mu);
    nsub = c->nsub;
    out->max_in_flight = c->info.max_in_flight;
    pthread_mutex_unlock(&mc->mu);
#define LOAD(x) atomic_load_explicit(&mc->x, memory_order_relaxed)
    out->submitted = LOAD(n_submitted);
    out->completed = LOAD(n_completed);
    out->failed = LOAD(n_failed);
    out->timeouts = LOAD(n_timeouts);
    out->recoveries = LOAD(n_recoveries);
    out->remaps = LOAD(n_remaps);
    out->chunks_verified = LOAD(n_verified);
    out->checksum_mismatches = LOAD(n_mismatches);
    out->releases_sent = LOAD(n_releases);
    out->bytes_copied = LOAD(n_copied);
    out->inline_calls = LOAD(n_inline);
    out->in_flight = LOAD(n_inflight);
    out->queued = LOAD(n_pending) + (uint32_t)nsub;
#undef LOAD
    return 0;
}

int kvt_link(const kvt_client_t *c, kvt_link_t *out)
{
    kvt_client_t *mc = (kvt_client_t *)c;
    int64_t since;

    if (c == NULL || out == NULL)
        return KVT_EINVAL;
    since = atomic_load_explicit(&mc->down_since_pub, memory_order_relaxed);
    out->down = since != 0;
    out->down_wait_ms = atomic_load_explicit(&mc->down_wait_ms, memory_order_relaxed);
    out->down_for_ms = since != 0 ? kvt__now_ms() - since : 0;
    out->disconnects = atomic_load_explicit(&mc->n_disconnects, memory_order_relaxed);
    out->unavailable = atomic_load_explicit(&mc->n_unavailable, memory_order_relaxed);
    return 0;
}

int kvt_set_down_wait(kvt_client_t *c, int ms)
{
    if (c == NULL || ms < -1)
        return KVT_EINVAL;
    atomic_store_explicit(&c->down_wait_ms, ms, memory_order_relaxed);
    return 0;
}

static int copy_str(char *dst, size_t cap, size_t *len, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n >= cap)
        return KVT_EINVAL;
    memcpy(dst, s != NULL ? s : "", n + 1);
    *len = n;
    return 0;
}

/* Frees what kvt_connect built, the I/O thread joined (or never started). Every live request
 * is on c->all, a commit's reservation too: each is freed once, by this walk. */
static void client_free(kvt_client_t *c)
{
    req_t *r, *next;

    for (r = c->all; r != NULL; r = next) {
        next = r->all_next;
        kvt__map_unref(r->map);
        free(r);
    }
    c->all = NULL;
    kvt__map_unref(c->map);
    for (int k = 0; k < 2; k++) {
        kvt__relq_free(&c->rel[k]);
        kvt__relq_free(&c->orel[k]);
    }
    if (c->sock != NULL)
        zmq_close(c->sock);
    if (c->mon != NULL)
        zmq_close(c->mon);
    if (c->ctx != NULL)
        zmq_ctx_term(c->ctx); /* every lent send buffer is back when it returns */
    kvt__pool_destroy(&c->pool);
    if (c->comp_fd >= 0)
        close(c->comp_fd);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    if (c->yield_fd >= 0)
        close(c->yield_fd);
    free(c->wires);
    for (size_t i = 0; i < c->nrx; i++)
        zmq_msg_close(&c->rx[i]);
    free(c->rx);
    free(c->fv);
    pthread_cond_destroy(&c->sync_cv);
    pthread_cond_destroy(&c->token_cv);
    pthread_mutex_destroy(&c->mu);
    kvt__copier_destroy(c);
    free(c);
}

/* The integer in environment variable name: dflt when unset, not a number or below min; max
 * when above it. */
long kvt__env_long(const char *name, long min, long max, long dflt)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (v == NULL || *v == '\0')
        return dflt;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < min)
        return dflt;
    return n > max ? max : n;
}

/* Creates the socket, the eventfds and the I/O thread. */
static int client_start(kvt_client_t *c, const char *endpoint)
{
    int zero = 0, reconnect = KVT_RECONNECT_IVL_MS, hb_ivl = KVT_HEARTBEAT_IVL_MS,
        hb_tmo = KVT_HEARTBEAT_TMO_MS, conn_tmo = KVT_CONNECT_TMO_MS;
    char mon[64];

    c->comp_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->yield_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->copy_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->comp_fd < 0 || c->wake_fd < 0 || c->yield_fd < 0 || c->copy_fd < 0)
        return KVT_ESYS;
    c->ctx = zmq_ctx_new();
    if (c->ctx == NULL)
        return KVT_ECONNECT;
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (c->sock == NULL)
        return KVT_ECONNECT;
    /* linger 0: closing never waits for frames the daemon did not take; no high-water marks:
     * the window bounds what is queued, and a send must never block the I/O thread */
    if (zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_SNDHWM, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_RCVHWM, &zero, sizeof zero) != 0)
        return KVT_ECONNECT;
    /* the link (kvtier.h; io.c): reconnect soon, heartbeats, and the events that say it */
    if (zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_tmo, sizeof hb_tmo) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_CONNECT_TIMEOUT, &conn_tmo, sizeof conn_tmo) != 0)
        return KVT_ECONNECT;
    snprintf(mon, sizeof mon, "inproc://kvtier-link-%p", (void *)c);
    if (zmq_socket_monitor(c->sock, mon, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) !=
        0)
        return KVT_ECONNECT;
    c->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (c->mon == NULL || zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_connect(c->mon, mon) != 0 || zmq_connect(c->sock, endpoint) != 0)
        return KVT_ECONNECT;
    if (pthread_create(&c->io, NULL, kvt__io_main, c) != 0)
        return KVT_ESYS;
    c->io_started = true;
    return 0;
}

/* Declares the namespace (the connect's HELLO, and ARENA when the shared-memory path may be
 * used), waiting for the answer. */
static int client_hello(kvt_client_t *c, int want)
{
    req_t *r = req_new(c, RK_HELLO, 0);
    int rc;

    if (r == NULL)
        return KVT_ENOMEM;
    r->want_arena = want != KVT_DATA_PATH_FRAMES;
    r->arena_optional = want == KVT_DATA_PATH_AUTO;
    rc = run_sync(c, r);
    if (rc == KVT_EVERSION)
        snprintf(r->err, sizeof r->err, "%s", old_daemon_text);
    if (rc == 0 && r->want_arena) {
        pthread_mutex_lock(&c->mu);
        c->shm = c->map != NULL;
        pthread_mutex_unlock(&c->mu);
        if (!c->shm && want == KVT_DATA_PATH_SHM)
            rc = r->arena_rc != 0 ? r->arena_rc : KVT_EUNSUPP;
    }
    keep_error(NULL, rc, r->err);
    sync_free(c, r);
    return rc;
}

int kvt_connect(const char *endpoint, const kvt_ns_desc_t *ns, uint32_t rank,
                const kvt_connect_opts_t *opts, kvt_client_t **out)
{
    kvt_client_t *c;
    size_t len;
    int rc, want;

    if (out != NULL)
        *out = NULL;
    if (endpoint == NULL || ns == NULL || out == NULL || ns->model == NULL)
        return KVT_EINVAL;
    len = strlen(ns->model);
    if (len == 0 || len > KVT_MODEL_MAX || ns->chunk_tokens == 0 || ns->world_size == 0 ||
        ns->world_size > KVT_WORLD_MAX || rank >= ns->world_size)
        return KVT_EINVAL;
    if (opts != NULL && (opts->timeout_ms < 0 || opts->data_path < KVT_DATA_PATH_AUTO ||
                         opts->data_path > KVT_DATA_PATH_SHM || opts->verify < KVT_VERIFY_DEFAULT ||
                         opts->verify > KVT_VERIFY_NONE))
        return KVT_EINVAL;
    (void)pthread_once(&fork_once, fork_hook);
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return KVT_ENOMEM;
    c->pid = getpid();
    c->fork_gen = atomic_load_explicit(&fork_gen, memory_order_relaxed);
    c->comp_fd = c->wake_fd = c->yield_fd = -1;
    kvt__pool_init(&c->pool);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->sync_cv, NULL);
    pthread_cond_init(&c->token_cv, NULL);
    kvt__copier_init(c);
    if (copy_str(c->model, sizeof c->model, &c->model_len, ns->model) != 0 ||
        copy_str(c->revision, sizeof c->revision, &c->revision_len, ns->revision) != 0) {
        client_free(c);
        return KVT_EINVAL;
    }
    c->timeout_ms =
        opts != NULL && opts->timeout_ms > 0 ? opts->timeout_ms : KVT_DEFAULT_TIMEOUT_MS;
    c->verify = opts != NULL ? opts->verify : KVT_VERIFY_DEFAULT;
    c->down_wait_ms = (int)kvt__env_long("KVTIER_DOWN_WAIT_MS", -1, INT_MAX, KVT_DOWN_WAIT_MS);
    c->opt_window = opts != NULL ? opts->max_in_flight : 0;
    c->layout_fp = kvt_ns_fingerprint(ns);
    c->chunk_tokens = ns->chunk_tokens;
    c->rank = (uint16_t)rank;
    c->world = (uint16_t)ns->world_size;
    c->mla = ns->mla != 0;
    c->window = 1;          /* until HELLO_OK says more */
    c->info.max_chunks = 1; /* idem: nothing but the connect is submitted before */
    want = opts != NULL ? opts->data_path : KVT_DATA_PATH_AUTO;
    c->auto_path = want == KVT_DATA_PATH_AUTO;
    if (want != KVT_DATA_PATH_FRAMES && strncmp(endpoint, "ipc://", 6) != 0) {
        if (want == KVT_DATA_PATH_SHM) {
            client_free(c);
            return KVT_EUNSUPP;
        }
        want = KVT_DATA_PATH_FRAMES;
    }
    rc = client_start(c, endpoint);
    if (rc == 0)
        rc = client_hello(c, want);
    if (rc == 0 && c->shm)
        (void)kvt__copier_start(c); /* without helpers the I/O thread copies alone */
    if (rc != 0) {
        kvt_close(&c);
        return rc;
    }
    *out = c;
    return 0;
}

void kvt_shutdown(kvt_client_t *c)
{
    bool join;

    if (c == NULL || kvt__forked(c))
        return;
    pthread_mutex_lock(&c->mu);
    c->closing = true;
    join = c->io_started && !c->joined;
    c->joined = true;
    pthread_mutex_unlock(&c->mu);
    if (!join)
        return;
    {
        uint64_t one = 1;
        (void)!write(c->wake_fd, &one, sizeof one);
    }
    pthread_join(c->io, NULL);
}

void kvt_close(kvt_client_t **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    if (kvt__forked(*cp)) { /* the parent's: nothing of it is freed here (fork above) */
        *cp = NULL;
        return;
    }
    kvt_shutdown(*cp);
    client_free(*cp);
    *cp = NULL;
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
    case KVT_ESTALE:
        return "the daemon's arena changed during the request";
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
    case KVT_ECLOSED:
        return "the client was shut down";
    case KVT_EUNAVAIL:
        return "the connection to the daemon is down";
    default:
        return "unknown error";
    }
}
