/*
 * zmq_baseline.c - the raw ZeroMQ baseline of kvtier-bench: an in-process ROUTER echo thread on
 * an ipc:// endpoint in a temp dir, with one DEALER per rank. "save-like" sends a chunk batch and
 * receives an 8-byte ack, "load-like" sends a small request and receives the chunk batch (plain
 * zmq_send, which copies into the message, and zmq_msg_recv, which does not copy out),
 * "lookup-like" sends prompt_chunks x 16 bytes and receives 32, "rtt-like" sends and receives
 * what one zero-copy step carries for --batch chunks (a head and 24 bytes per chunk out, a head
 * and 25 bytes per chunk back). Save-like, load-like and rtt-like keep --depth requests in
 * flight (the echo thread answers in order). The echo thread's socket lives in a ZeroMQ context
 * of its own, so each end has its own ZeroMQ I/O thread moving the bytes through the socket, as
 * between a client and the daemon (one shared I/O thread would read what it just wrote without
 * a wake-up in between). The frames path of kvtier is compared with it: same transport, so the
 * ratio is what the protocol and the daemon cost.
 *
 * Threads: the echo thread (its own socket), the rank threads (their DEALERs, from
 * STEP_Z_CONNECT on), the main thread (start before the steps, stop after the rank threads left).
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define BENCH_ACK_BYTES 8
#define BENCH_LOOKUP_REPLY_BYTES 32
#define BENCH_OP_BYTES 8
#define BENCH_RTT_HEAD 56 /* a protocol 2 head, about */
#define BENCH_RTT_OUT 24  /* per chunk out: a hash and a length or location */
#define BENCH_RTT_BACK 25 /* per chunk back: a status, a location, a checksum */
#define BENCH_RTT_MAX (BENCH_RTT_HEAD + 25 * 4096)

static void *echo_main(void *arg)
{
    bench_t *b = arg;
    size_t chunk = b->o.chunk_bytes;
    void *sock = zmq_socket(b->zectx, ZMQ_ROUTER);
    uint8_t *payload = malloc(chunk);
    static uint8_t reply[BENCH_RTT_MAX];
    if (!sock || !payload)
        goto out;
    fill_random(payload, chunk, b->seed ^ 0x5eed);
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock, b->zendpoint) != 0)
        goto out;
    for (;;) {
        zmq_msg_t id, op;
        zmq_msg_init(&id);
        zmq_msg_init(&op);
        if (zmq_msg_recv(&id, sock, 0) < 0 || zmq_msg_recv(&op, sock, 0) < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&op);
            break; /* ETERM: the context is shutting down */
        }
        uint8_t code = 0;
        uint32_t count = 0;
        if (zmq_msg_size(&op) == BENCH_OP_BYTES) {
            const uint8_t *p = zmq_msg_data(&op);
            code = p[0];
            memcpy(&count, p + 4, sizeof count);
        }
        int more = zmq_msg_more(&op);
        zmq_msg_close(&op);
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, sock, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        zmq_msg_send(&id, sock, ZMQ_SNDMORE);
        zmq_msg_close(&id);
        if (code == 'L') {
            zmq_send(sock, reply, BENCH_ACK_BYTES, count ? ZMQ_SNDMORE : 0);
            for (uint32_t i = 0; i < count; i++)
                zmq_send(sock, payload, chunk, i + 1 < count ? ZMQ_SNDMORE : 0);
        } else if (code == 'Q') {
            zmq_send(sock, reply, BENCH_LOOKUP_REPLY_BYTES, 0);
        } else if (code == 'R') {
            zmq_send(sock, reply, count < BENCH_RTT_MAX ? count : BENCH_RTT_MAX, 0);
        } else {
            zmq_send(sock, reply, BENCH_ACK_BYTES, 0);
        }
    }
out:
    if (sock)
        zmq_close(sock);
    free(payload);
    return NULL;
}

static int z_send_op(void *s, char code, uint32_t count, int more)
{
    uint8_t op[BENCH_OP_BYTES] = {(uint8_t)code};
    memcpy(op + 4, &count, sizeof count);
    return zmq_send(s, op, sizeof op, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/* Receives one whole reply; returns its payload bytes beyond the first frame, or -1. */
static int64_t z_recv_reply(void *s, size_t *nframes)
{
    int64_t bytes = 0;
    size_t frames = 0;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        if (frames++)
            bytes += (int64_t)zmq_msg_size(&m);
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    *nframes = frames;
    return bytes;
}

static void z_fail(rank_t *r, const char *what)
{
    rank_fail(r, 1, "zmq baseline %s: %s", what, zmq_strerror(zmq_errno()));
}

static uint32_t z_depth(const bench_t *b)
{
    return b->o.depth ? b->o.depth : 1;
}

/* Sends one save-like batch of k chunks from chunk i. */
static int z_send_save(rank_t *r, uint32_t i, uint32_t k)
{
    size_t chunk = r->b->o.chunk_bytes;
    if (z_send_op(r->zsock, 'S', k, 1) < 0)
        return -1;
    for (uint32_t j = 0; j < k; j++)
        if (zmq_send(r->zsock, r->src + (size_t)(i + j) * chunk, chunk,
                     j + 1 < k ? ZMQ_SNDMORE : 0) < 0)
            return -1;
    return 0;
}

void z_save_like(rank_t *r, uint32_t nchunks)
{
    const bench_t *b = r->b;
    uint32_t depth = z_depth(b), inflight = 0, batch = b->o.batch;
    uint32_t ks[depth]; /* the batch size of each request in flight, in order */
    uint32_t head = 0;
    for (uint32_t i = 0; i < nchunks || inflight;) {
        size_t nframes = 0;
        if (i < nchunks && inflight < depth) {
            uint32_t k = nchunks - i < batch ? nchunks - i : batch;
            if (z_send_save(r, i, k) < 0)
                return z_fail(r, "send");
            ks[(head + inflight++) % depth] = k;
            i += k;
            continue;
        }
        if (z_recv_reply(r->zsock, &nframes) < 0)
            return z_fail(r, "receive");
        r->zbytes_save += (uint64_t)ks[head] * b->o.chunk_bytes;
        head = (head + 1) % depth;
        inflight--;
    }
}

void z_load_like(rank_t *r, uint32_t nchunks)
{
    const bench_t *b = r->b;
    uint32_t depth = z_depth(b), inflight = 0, batch = b->o.batch;
    uint32_t ks[depth];
    uint32_t head = 0;
    for (uint32_t i = 0; i < nchunks || inflight;) {
        size_t nframes = 0;
        if (i < nchunks && inflight < depth) {
            uint32_t k = nchunks - i < batch ? nchunks - i : batch;
            if (z_send_op(r->zsock, 'L', k, 0) < 0)
                return z_fail(r, "send");
            ks[(head + inflight++) % depth] = k;
            i += k;
            continue;
        }
        int64_t got = z_recv_reply(r->zsock, &nframes);
        uint32_t k = ks[head];
        if (got < 0)
            return z_fail(r, "receive");
        if ((uint64_t)got != (uint64_t)k * b->o.chunk_bytes || nframes != k + 1u) {
            rank_fail(r, 1, "zmq baseline: load-like reply of %" PRId64 " bytes", got);
            return;
        }
        r->zbytes_load += (uint64_t)got;
        head = (head + 1) % depth;
        inflight--;
    }
}

void z_rtt_like(rank_t *r, uint32_t count, series_t *lat)
{
    const bench_t *b = r->b;
    static const uint8_t req[BENCH_RTT_MAX];
    uint32_t depth = z_depth(b), inflight = 0, k = b->o.batch < 4096 ? b->o.batch : 4096;
    size_t out = BENCH_RTT_HEAD + (size_t)BENCH_RTT_OUT * k;
    uint32_t back = BENCH_RTT_HEAD + BENCH_RTT_BACK * k;
    uint64_t t0[depth];
    uint32_t head = 0;
    for (uint32_t i = 0; i < count || inflight;) {
        size_t nframes = 0;
        if (i < count && inflight < depth) {
            t0[(head + inflight++) % depth] = now_ns();
            if (z_send_op(r->zsock, 'R', back, 1) < 0 || zmq_send(r->zsock, req, out, 0) < 0)
                return z_fail(r, "send");
            i++;
            continue;
        }
        if (z_recv_reply(r->zsock, &nframes) < 0)
            return z_fail(r, "receive");
        if (lat && lat->v)
            lat->v[lat->n++] = now_ns() - t0[head];
        head = (head + 1) % depth;
        inflight--;
    }
}

void z_lookup_like(rank_t *r, uint32_t count, series_t *lat)
{
    const bench_t *b = r->b;
    const void *req = b->lookup_hashes;
    size_t req_len = (size_t)b->o.prompt_chunks * sizeof(kvt_hash_t);
    for (uint32_t i = 0; i < count; i++) {
        size_t nframes = 0;
        uint64_t t0 = now_ns();
        if (z_send_op(r->zsock, 'Q', 0, 1) < 0 || zmq_send(r->zsock, req, req_len, 0) < 0)
            return z_fail(r, "send");
        if (z_recv_reply(r->zsock, &nframes) < 0)
            return z_fail(r, "receive");
        uint64_t t1 = now_ns();
        if (lat)
            lat->v[lat->n++] = t1 - t0;
    }
}

void step_z_connect(rank_t *r)
{
    int linger = 0, tmo = BENCH_TIMEOUT_MS;
    r->zsock = zmq_socket(r->b->zctx, ZMQ_DEALER);
    if (!r->zsock)
        return z_fail(r, "socket");
    zmq_setsockopt(r->zsock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(r->zsock, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(r->zsock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    if (zmq_connect(r->zsock, r->b->zendpoint) != 0)
        return z_fail(r, "connect");
}

/* Starts the echo thread and connects every rank's DEALER to it. */
int zmq_baseline_start(bench_t *b)
{
    strcpy(b->zdir, "/tmp/kvtier-bench.XXXXXX");
    if (!mkdtemp(b->zdir)) {
        tool_error("mkdtemp: %s", strerror(errno));
        b->zdir[0] = '\0';
        return -1;
    }
    snprintf(b->zendpoint, sizeof b->zendpoint, "ipc://%s/echo.zmq", b->zdir);
    b->zctx = zmq_ctx_new();
    b->zectx = zmq_ctx_new();
    if (!b->zctx || !b->zectx || pthread_create(&b->echo, NULL, echo_main, b) != 0) {
        tool_error("cannot start the zmq baseline");
        return -1;
    }
    b->echo_started = 1;
    return run_step(b, STEP_Z_CONNECT, 0, NULL) ? -1 : 0;
}

/* After the rank threads have closed their sockets: stop the echo thread, remove the temp dir. */
void zmq_baseline_stop(bench_t *b)
{
    if (b->zectx) {
        zmq_ctx_shutdown(b->zectx);
        if (b->echo_started)
            pthread_join(b->echo, NULL);
        zmq_ctx_term(b->zectx);
        b->zectx = NULL;
    }
    if (b->zctx) {
        zmq_ctx_term(b->zctx);
        b->zctx = NULL;
    }
    if (b->zdir[0]) {
        unlink(b->zendpoint + strlen("ipc://"));
        rmdir(b->zdir);
    }
}
