/*
 * pool.c - the send buffers of the frames path (see internal.h).
 *
 * A chunk sent in a SAVE_DATA frame is copied once, on the I/O thread, into a buffer of this
 * pool, and the buffer is lent to ZeroMQ (zmq_msg_init_data) instead of letting zmq_send
 * allocate and copy: ZeroMQ hands it back from its own I/O thread (pool_release, the message's
 * free function) once the bytes are in the socket. The caller's buffer is never referenced by
 * ZeroMQ, so a request can time out and complete while its frame is still queued. Reusing
 * buffers matters: a fresh multi-MiB allocation is served by the kernel page by page, and
 * zeroing those pages cost more than the copy itself.
 *
 * Design: a free list of buffers, each remembering its capacity; a take picks the first buffer
 * of at least len and at most twice len (chunks of one namespace have one size, so this is
 * nearly always the head), else allocates len rounded up to KVT_POOL_ALIGN. A release keeps the
 * buffer while the pool holds less than KVT_POOL_MAX bytes (64 MiB), else frees it. A buffer is
 * preceded by its header (capacity, free-list link, owner) so the free function needs no lookup.
 *
 * Threads: pool_take on the I/O thread, pool_release on ZeroMQ's I/O thread (or any thread
 * closing a message); the free list is under its own mutex. The pool outlives the ZeroMQ context
 * (kvt_close terminates the context, which returns every buffer, before pool_destroy).
 */
#include "internal.h"

#include <stdlib.h>

#define KVT_POOL_ALIGN (64u << 10)
#define KVT_POOL_MAX (64u << 20) /* per client: a few windows of 2 MiB chunks */

typedef struct pool_buf {
    struct pool_buf *next;
    kvt_pool_t *pool;
    size_t cap;
    _Alignas(64) uint8_t data[];
} pool_buf_t;

void kvt__pool_init(kvt_pool_t *p)
{
    pthread_mutex_init(&p->mu, NULL);
    p->free = NULL;
    p->held = 0;
}

void kvt__pool_destroy(kvt_pool_t *p)
{
    pool_buf_t *b = p->free;

    while (b != NULL) {
        pool_buf_t *next = b->next;
        free(b);
        b = next;
    }
    p->free = NULL;
    pthread_mutex_destroy(&p->mu);
}

void *kvt__pool_take(kvt_pool_t *p, size_t len)
{
    pool_buf_t **pp, *b = NULL;
    size_t cap;

    pthread_mutex_lock(&p->mu);
    for (pp = (pool_buf_t **)&p->free; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->cap >= len && (*pp)->cap / 2 <= len) {
            b = *pp;
            *pp = b->next;
            p->held -= b->cap;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (b != NULL)
        return b->data;
    cap = (len + KVT_POOL_ALIGN - 1) / KVT_POOL_ALIGN * KVT_POOL_ALIGN;
    if (cap < len || cap > SIZE_MAX - sizeof *b)
        return NULL;
    b = malloc(sizeof *b + cap);
    if (b == NULL)
        return NULL;
    b->pool = p;
    b->cap = cap;
    return b->data;
}

void kvt__pool_release(void *data, void *hint)
{
    pool_buf_t *b = (pool_buf_t *)((uint8_t *)data - offsetof(pool_buf_t, data));
    kvt_pool_t *p = b->pool;

    (void)hint;
    pthread_mutex_lock(&p->mu);
    if (p->held + b->cap <= KVT_POOL_MAX) {
        b->next = p->free;
        p->free = b;
        p->held += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    free(b);
}
