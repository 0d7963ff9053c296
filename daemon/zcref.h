/*
 * zcref.h - zero-copy frames: lend loop-owned bytes to ZeroMQ and get them back on the loop.
 *
 * A load reply can send a chunk straight from the arena (zmq_msg_init_data) instead of copying
 * it into a new frame. ZeroMQ then reads the bytes from its own I/O thread whenever it gets to
 * them and calls the frame's free function there. The lender must keep the bytes unchanged until
 * then: the chunk comes pinned from the store (store_load_batch), and the server unpins it when
 * zcref hands the object back.
 *
 * The free function runs on a ZeroMQ thread, which must touch nothing the loop owns: it only
 * pushes the lent object on a lock-free list (C11 atomics). The loop drains that list after
 * every poll (uv_check) and, while loans are outstanding, on a 1 ms timer, calling release_cb
 * for each object on the loop thread. No libuv call is ever made from another thread.
 *
 * Shutdown: zcref_close() waits (on the loop) until every loan came back - ZeroMQ drops the
 * unsent frames of a closed socket with linger 0 and frees them - then closes its handles and
 * calls done. Only then may the lent memory go away.
 *
 * Threads: every function on the loop thread; the free function (internal) on ZeroMQ's.
 */
#ifndef KVT_ZCREF_H
#define KVT_ZCREF_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <zmq.h>

typedef struct zcref zcref_t;

typedef void (*zcref_release_cb)(void *arg, void *obj);

/* Returns NULL on allocation failure. release_cb(arg, obj) runs on the loop for each loan. */
zcref_t *zcref_new(uv_loop_t *loop, zcref_release_cb release_cb, void *arg);

/* Initialises msg to send len bytes at data without copying; obj comes back through
 * release_cb once ZeroMQ is done with the frame. Returns 0, or -ENOMEM (msg is then not
 * initialised and obj is not lent). */
int zcref_msg_init(zcref_t *z, zmq_msg_t *msg, void *data, size_t len, void *obj);

/* Loans not yet returned. */
uint64_t zcref_outstanding(const zcref_t *z);

/* Hands the loans ZeroMQ has returned so far to release_cb now, instead of at the next check or
 * timer (for a count that must be current: a bound checked on the request path). */
void zcref_drain(zcref_t *z);

/* Waits until every loan is back (returned objects still go through release_cb), then frees
 * everything and calls done(arg). Sets *z to NULL. */
void zcref_close(zcref_t **z, void (*done)(void *arg), void *arg);

#endif /* KVT_ZCREF_H */
