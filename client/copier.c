/*
 * copier.c - the copy helpers of a shared-memory client: threads that copy chunks between the
 * caller's buffers and the arena beside the I/O thread (see internal.h for the structures,
 * requests.c for what is copied and what follows the copies).
 *
 * Why: one thread copying 2 MiB chunks reaches about the speed of one memcpy (the fused
 * copy+checksum, proto/kvt_csum.h), and with many requests in flight the I/O thread was that one
 * thread: its copies were the whole cost of a pipelined save or load. Memory bandwidth grows with
 * the threads copying (development VM: one copier 12-15 GB/s, two at once 12-15 GB/s each), so
 * the copies of a request are spread over the helpers and the I/O thread itself, one chunk per
 * task, and the I/O thread goes on with the socket meanwhile.
 *
 * Design: the I/O thread plans a request's copies (requests.c fills r->cpidx[0..ncp) with the
 * chunks to copy and everything a copy needs) and calls kvt__copies_start. Small requests (under
 * KVT_OFFLOAD_MIN bytes), a one-chunk request with nothing else in flight (a hand-off would only
 * add two thread wake-ups) and clients without helpers copy at once, on the thread running the
 * I/O.
 * Otherwise the request joins the task queue; a helper, or the thread running the I/O (the I/O
 * thread, or a synchronous call that runs it on its own thread: io.c) between two turns of its
 * loop (kvt__copier_help), takes the next chunk of the
 * request at the head; whoever finishes a request's last chunk puts it on the done list and makes
 * copy_fd readable; the I/O thread takes it back (kvt__copier_back) and runs what follows
 * (kvt__copies_done: the commit of a save, the releases and the completion of a load). Saves
 * commit in the order their reservations were answered, whatever order their copies end in: the
 * chunks of a chain pipelined at depth (chunk i + 1 reserved before chunk i is committed) reach
 * the daemon in chain order, as they did when one thread copied, since a chunk published before
 * its predecessor is an orphan to the daemon (no parent link, first to be evicted). A request
 * being copied is on no other list: it cannot time out meanwhile (its copies are bounded; the
 * caller's buffers are borrowed until its completion), and kvt_shutdown waits for it
 * (kvt__copier_drain: the copies not begun are skipped, the requests end KVT_ECLOSED) before the
 * helpers stop. A save keeps its place in the in-flight window from its reservation's answer to
 * its commit (c->cp_saves, io.c's window_free): the commit never goes beyond the window.
 *
 * Helpers: KVTIER_COPY_THREADS in the environment at kvt_connect (0..KVT_COPY_THREADS_MAX; default
 * KVT_COPY_THREADS_DEFAULT), started only on the shared-memory path.
 *
 * Threads: kvt__copier_init/destroy with the client; start from kvt_connect; everything else on
 * whichever thread runs the I/O ("io" fields, handed over under c->mu: io.c), except helper_main
 * and kvt__copy_chunk (requests.c), which run on the helpers too.
 * The queues and the per-request counters are under cp.mu; each chunk's outputs belong to the
 * thread copying it until the request is back on the I/O thread (cp.mu orders the accesses).
 */
#include "internal.h"

#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#define KVT_COPY_THREADS_DEFAULT 1
#define KVT_COPY_THREADS_MAX 16
#define KVT_OFFLOAD_MIN (256u << 10)

void kvt__copier_init(kvt_client_t *c)
{
    pthread_mutex_init(&c->cp.mu, NULL);
    pthread_cond_init(&c->cp.cv, NULL);
    c->copy_fd = -1; /* created with the client's other eventfds (kvtier.c, client_start) */
}

void kvt__copier_destroy(kvt_client_t *c)
{
    pthread_cond_destroy(&c->cp.cv);
    pthread_mutex_destroy(&c->cp.mu);
    if (c->copy_fd >= 0)
        close(c->copy_fd);
}

/* Takes the next chunk of the request at the head of the queue (cp.mu held): its request and
 * index, or NULL. */
static req_t *take_task(kvt_client_t *c, size_t *i)
{
    req_t *r = c->cp.q_head;

    if (r == NULL)
        return NULL;
    *i = r->cpidx[r->cp_next++];
    if (r->cp_next == r->ncp) {
        c->cp.q_head = r->next;
        if (c->cp.q_head == NULL)
            c->cp.q_tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* One chunk of r was copied (cp.mu held): the last one puts r on the done list. */
static void task_done(kvt_client_t *c, req_t *r)
{
    if (--r->cp_left > 0)
        return;
    r->next = NULL;
    if (c->cp.done_tail != NULL) {
        c->cp.done_tail->next = r;
    } else {
        uint64_t one = 1;
        c->cp.done_head = r;
        (void)!write(c->copy_fd, &one, sizeof one);
    }
    c->cp.done_tail = r;
}

static void *helper_main(void *arg)
{
    kvt_client_t *c = arg;
    size_t i;
    req_t *r;

    pthread_mutex_lock(&c->cp.mu);
    for (;;) {
        while (!c->cp.stop && c->cp.q_head == NULL)
            pthread_cond_wait(&c->cp.cv, &c->cp.mu);
        if ((r = take_task(c, &i)) == NULL)
            break; /* stopping, and nothing left */
        pthread_mutex_unlock(&c->cp.mu);
        kvt__copy_chunk(c, r, i);
        pthread_mutex_lock(&c->cp.mu);
        task_done(c, r);
    }
    pthread_mutex_unlock(&c->cp.mu);
    return NULL;
}

int kvt__copier_start(kvt_client_t *c)
{
    unsigned n = 0, want = (unsigned)kvt__env_long("KVTIER_COPY_THREADS", 0, KVT_COPY_THREADS_MAX,
                                                   KVT_COPY_THREADS_DEFAULT);

    if (want == 0)
        return 0;
    c->cp.th = calloc(want, sizeof *c->cp.th);
    if (c->cp.th == NULL)
        return KVT_ENOMEM;
    while (n < want && pthread_create(&c->cp.th[n], NULL, helper_main, c) == 0)
        n++;
    /* fewer helpers than asked is slower, not wrong; the I/O thread copies too */
    atomic_store_explicit(&c->cp.nthreads, n, memory_order_release);
    return 0;
}

/* r's copies are done: a load goes on at once, a save when every earlier save has committed. */
static void copied(kvt_client_t *c, req_t *r)
{
    if (r->kind != KVT_OP_SAVE) {
        kvt__copies_done(c, r);
        return;
    }
    r->cp_ready = true;
    while (c->commit_head != NULL && c->commit_head->cp_ready) {
        req_t *h = c->commit_head;
        c->commit_head = h->cp_order;
        if (c->commit_head == NULL)
            c->commit_tail = NULL;
        h->cp_order = NULL;
        c->cp_saves--; /* its commit takes the place now, or it ends */
        kvt__copies_done(c, h);
    }
}

void kvt__copies_start(kvt_client_t *c, req_t *r, uint64_t bytes)
{
    if (r->kind == KVT_OP_SAVE) { /* its place in the commit order */
        r->cp_ready = false;
        r->cp_order = NULL;
        if (c->commit_tail != NULL)
            c->commit_tail->cp_order = r;
        else
            c->commit_head = r;
        c->commit_tail = r;
        c->cp_saves++;
    }
    /* a hand-off pays when something runs beside it: another chunk of r, another request */
    bool beside = r->ncp > 1 || c->nwires > 0 || c->pend_head != NULL || c->cp_outstanding > 0;

    if (r->ncp == 0 || bytes < KVT_OFFLOAD_MIN || !beside ||
        atomic_load_explicit(&c->cp.nthreads, memory_order_acquire) == 0) {
        for (size_t j = 0; j < r->ncp; j++)
            kvt__copy_chunk(c, r, r->cpidx[j]);
        copied(c, r);
        return;
    }
    r->cp_next = 0;
    r->cp_left = r->ncp;
    r->next = NULL;
    c->cp_outstanding++;
    pthread_mutex_lock(&c->cp.mu);
    if (c->cp.q_tail != NULL)
        c->cp.q_tail->next = r;
    else
        c->cp.q_head = r;
    c->cp.q_tail = r;
    pthread_mutex_unlock(&c->cp.mu);
    if (r->ncp > 1)
        pthread_cond_broadcast(&c->cp.cv);
    else
        pthread_cond_signal(&c->cp.cv);
}

bool kvt__copier_help(kvt_client_t *c)
{
    size_t i;
    req_t *r;

    if (c->cp_outstanding == 0)
        return false;
    pthread_mutex_lock(&c->cp.mu);
    r = take_task(c, &i);
    pthread_mutex_unlock(&c->cp.mu);
    if (r == NULL)
        return false;
    kvt__copy_chunk(c, r, i);
    pthread_mutex_lock(&c->cp.mu);
    task_done(c, r);
    pthread_mutex_unlock(&c->cp.mu);
    return true;
}

void kvt__copier_back(kvt_client_t *c)
{
    req_t *r, *next;
    uint64_t v;

    if (c->cp_outstanding == 0)
        return;
    pthread_mutex_lock(&c->cp.mu);
    r = c->cp.done_head;
    if (r == NULL) { /* copy_fd is readable only while the list is not empty: nothing to read */
        pthread_mutex_unlock(&c->cp.mu);
        return;
    }
    (void)!read(c->copy_fd, &v, sizeof v); /* before taking: a later push makes it readable */
    c->cp.done_head = c->cp.done_tail = NULL;
    pthread_mutex_unlock(&c->cp.mu);
    for (; r != NULL; r = next) {
        next = r->next;
        r->next = NULL;
        c->cp_outstanding--;
        copied(c, r);
    }
}

void kvt__copier_drain(kvt_client_t *c)
{
    struct pollfd p = {.fd = c->copy_fd, .events = POLLIN};

    /* the copies not begun are skipped; the requests end KVT_ECLOSED (requests.c) */
    c->cp_closing = true;
    atomic_store_explicit(&c->cp.abort, true, memory_order_relaxed);
    while (c->cp_outstanding > 0) {
        if (!kvt__copier_help(c))
            (void)poll(&p, 1, 100);
        kvt__copier_back(c);
    }
}

void kvt__copier_stop(kvt_client_t *c)
{
    unsigned n = atomic_load_explicit(&c->cp.nthreads, memory_order_acquire);

    pthread_mutex_lock(&c->cp.mu);
    c->cp.stop = true;
    pthread_mutex_unlock(&c->cp.mu);
    pthread_cond_broadcast(&c->cp.cv);
    for (unsigned i = 0; i < n; i++)
        pthread_join(c->cp.th[i], NULL);
    atomic_store_explicit(&c->cp.nthreads, 0, memory_order_release);
    free(c->cp.th);
    c->cp.th = NULL;
}
