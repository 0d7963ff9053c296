/*
 * zcref.c - loans of loop-owned bytes to ZeroMQ (see zcref.h).
 *
 * Design: every loan is a small node allocated on the loop. ZeroMQ's free function pushes the
 * node on a Treiber stack (an atomic head pointer; pushes come from any thread, the only pop is
 * the loop's exchange of the whole list, so there is no ABA problem). The loop counts loans out
 * and back in plain integers of its own. A uv_check drains after every poll; a 1 ms timer runs
 * only while loans are out, so a loan that comes back while the loop sleeps is noticed promptly.
 * Threads: loop thread, except free_fn (ZeroMQ's I/O or reaper thread).
 */
#include "zcref.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct node {
    struct node *next;
    zcref_t *owner;
    void *obj;
} node_t;

struct zcref {
    _Atomic(node_t *) back; /* returned loans, pushed by ZeroMQ threads */
    uv_check_t check;
    uv_timer_t timer;
    uint64_t out; /* loans lent and not yet drained (loop-owned) */
    int open_handles;
    int closing;
    zcref_release_cb release_cb;
    void *arg;
    void (*done)(void *arg);
    void *done_arg;
};

static void free_fn(void *data, void *hint)
{
    node_t *n = hint;
    zcref_t *z = n->owner;
    node_t *head = atomic_load_explicit(&z->back, memory_order_relaxed);

    (void)data;
    do {
        n->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&z->back, &head, n, memory_order_release,
                                                    memory_order_relaxed));
}

static void close_cb(uv_handle_t *h)
{
    zcref_t *z = h->data;

    if (--z->open_handles == 0) {
        void (*done)(void *) = z->done;
        void *arg = z->done_arg;
        free(z);
        if (done != NULL)
            done(arg);
    }
}

static void drain(zcref_t *z)
{
    node_t *n = atomic_exchange_explicit(&z->back, NULL, memory_order_acquire);

    while (n != NULL) {
        node_t *next = n->next;
        z->release_cb(z->arg, n->obj);
        z->out--;
        free(n);
        n = next;
    }
    if (z->out == 0) {
        uv_timer_stop(&z->timer);
        if (z->closing && z->open_handles == 2) {
            uv_close((uv_handle_t *)&z->check, close_cb);
            uv_close((uv_handle_t *)&z->timer, close_cb);
        }
    }
}

static void check_cb(uv_check_t *h)
{
    drain(h->data);
}

static void timer_cb(uv_timer_t *h)
{
    drain(h->data);
}

zcref_t *zcref_new(uv_loop_t *loop, zcref_release_cb release_cb, void *arg)
{
    zcref_t *z = calloc(1, sizeof *z);

    if (z == NULL)
        return NULL;
    atomic_init(&z->back, NULL);
    z->release_cb = release_cb;
    z->arg = arg;
    uv_check_init(loop, &z->check);
    uv_timer_init(loop, &z->timer);
    z->check.data = z->timer.data = z;
    z->open_handles = 2;
    uv_check_start(&z->check, check_cb);
    /* The check handle alone must not keep the loop alive once everything else is closed. */
    uv_unref((uv_handle_t *)&z->check);
    return z;
}

int zcref_msg_init(zcref_t *z, zmq_msg_t *msg, void *data, size_t len, void *obj)
{
    node_t *n = malloc(sizeof *n);

    if (n == NULL)
        return -ENOMEM;
    n->owner = z;
    n->obj = obj;
    if (zmq_msg_init_data(msg, data, len, free_fn, n) != 0) {
        free(n);
        return -ENOMEM;
    }
    if (z->out++ == 0)
        uv_timer_start(&z->timer, timer_cb, 1, 1);
    return 0;
}

void zcref_drain(zcref_t *z)
{
    if (!z->closing)
        drain(z);
}

uint64_t zcref_outstanding(const zcref_t *z)
{
    return z->out;
}

void zcref_close(zcref_t **pz, void (*done)(void *arg), void *arg)
{
    zcref_t *z = *pz;

    *pz = NULL;
    z->closing = 1;
    z->done = done;
    z->done_arg = arg;
    uv_ref((uv_handle_t *)&z->check);
    if (z->out > 0)
        uv_timer_start(&z->timer, timer_cb, 1, 1);
    drain(z);
}
