/*
 * async.c - the workload through libkvtier's asynchronous calls (--depth) and its zero-copy calls
 * (the kvtier-zc backend, --zero-copy): the same calls as workload.c's run_chain (chunks
 * [i, i + k) of --batch, never across a chain), but up to --depth of them in flight.
 *
 * Design: a window of slots, one per call in flight. The rank thread submits while a slot is
 * free (timing each kvt_submit_* call: the submit latency), else waits on the client's
 * completion fd (kvt_poll) and handles what completed. A copying save or load is one request;
 * a zero-copy save is a reserve, then (in the completion handler, on this thread) the bench's
 * memcpy into the reserved extents standing in for the engine's DMA, then a commit in the same
 * slot; a zero-copy load is a pin, the memcpy out of the arena (none when b->zc_no_copy: disk
 * mode's pinned restore, where the engine's DMA would read the arena), and kvt_completion_free,
 * which releases the pins without a round trip. A call's latency runs from its first submit to its
 * last completion; each zero-copy round trip is timed from its submit to its completion.
 * Without --depth the zero-copy calls are the synchronous ones (kvt_reserve, kvt_commit, kvt_pin:
 * on an idle client the calling thread runs the round trip, as kvt_save and kvt_load do for the
 * other backends), each round trip timed around its call.
 *
 * Threads: the rank thread that owns r (and its clients' completions).
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t i, k; /* the call: chunks [i, i + k) */
    uint64_t t0; /* its first submit */
    uint64_t ts; /* the submit of its current round trip */
    int busy;
} slot_t;

typedef struct {
    rank_t *r;
    bk_t bk;
    op_t op;
    const kvt_hash_t *h;
    kvt_client_t *c;
    rank_bk_t *rb;
    int measured;
    series_t *lat;
    slot_t *slots;
    size_t depth, inflight;
} pipe_t;

static void add(series_t *s, uint64_t v, int measured)
{
    if (measured && s->v != NULL)
        s->v[s->n++] = v;
}

/* Submits the first request of call (i, k) into slot s. */
static int start_call(pipe_t *p, size_t s, size_t i, size_t k)
{
    rank_t *r = p->r;
    size_t chunk = r->b->o.chunk_bytes;
    kvt_submit_opts_t so = {.user = (void *)(uintptr_t)s};
    kvt_save_opts_t sv = {.parent = i % r->b->chain_len ? &p->h[i - 1] : NULL};
    const void *src[k];
    void *dst[k];
    size_t lens[k];
    uint64_t t0;
    int rc;

    for (size_t j = 0; j < k; j++) {
        src[j] = r->src + (i + j) * chunk;
        dst[j] = r->dst + (i + j) * chunk;
        lens[j] = chunk;
    }
    t0 = now_ns();
    if (p->bk == BK_ZC)
        rc = p->op == OP_SAVE ? kvt_submit_reserve(p->c, p->h + i, k, lens, &sv, &so, NULL)
                              : kvt_submit_pin(p->c, p->h + i, k, &so, NULL);
    else
        rc = p->op == OP_SAVE ? kvt_submit_save(p->c, p->h + i, k, src, lens, &sv, &so, NULL)
                              : kvt_submit_load(p->c, p->h + i, k, dst, lens, &so, NULL);
    add(p->op == OP_SAVE ? &p->rb->submit_save : &p->rb->submit_load, now_ns() - t0, p->measured);
    if (rc) {
        rank_fail_kvt(r, p->op == OP_SAVE ? "submit save" : "submit load", rc, p->c);
        return -1;
    }
    p->slots[s] = (slot_t){.i = i, .k = k, .t0 = t0, .ts = t0, .busy = 1};
    p->inflight++;
    return 0;
}

static void end_call(pipe_t *p, slot_t *sl)
{
    add(p->lat, now_ns() - sl->t0, p->lat != NULL);
    sl->busy = 0;
    p->inflight--;
}

/* A zero-copy reserve completed: the bench's memcpy into the arena, then the commit. */
static int on_reserved(pipe_t *p, slot_t *sl, size_t s, kvt_completion_t *comp)
{
    rank_t *r = p->r;
    size_t chunk = r->b->o.chunk_bytes;
    kvt_submit_opts_t so = {.user = (void *)(uintptr_t)s};
    uint64_t now = now_ns();
    int rc;

    add(&p->rb->reserve, now - sl->ts, p->measured);
    for (size_t j = 0; j < sl->k; j++) {
        r->outcomes[sl->i + j] = comp->outcomes[j];
        if (comp->outcomes[j] == KVT_SAVE_RESERVED)
            memcpy(comp->ptrs[j], r->src + (sl->i + j) * chunk, chunk); /* the "DMA" */
    }
    sl->ts = now_ns();
    rc = kvt_submit_commit(p->c, comp, sl->k, &so, NULL);
    if (rc) {
        kvt_completion_free(p->c, comp);
        end_call(p, sl);
        rank_fail_kvt(r, "submit commit", rc, p->c);
        return -1;
    }
    return 0;
}

/* A zero-copy pin completed: the bench's memcpy out of the arena, then the release. */
static void on_pinned(pipe_t *p, slot_t *sl, kvt_completion_t *comp)
{
    rank_t *r = p->r;
    size_t chunk = r->b->o.chunk_bytes;

    add(&p->rb->pin, now_ns() - sl->ts, p->measured);
    for (size_t j = 0; j < sl->k; j++) {
        size_t len = comp->outcomes[j] == KVT_LOAD_HIT ? comp->lens[j] : 0;
        if (len > chunk)
            len = 0; /* cannot be this run's chunk: counted as a miss */
        if (len > 0 && !r->b->zc_no_copy)
            memcpy(r->dst + (sl->i + j) * chunk, comp->ptrs[j], len);
        r->lens[sl->i + j] = len;
    }
    kvt_completion_free(p->c, comp); /* releases the pins: batched, no round trip */
}

/* Handles one completion. */
static int on_completion(pipe_t *p, kvt_completion_t *comp)
{
    size_t s = (uintptr_t)comp->user;
    slot_t *sl = &p->slots[s];
    rank_t *r = p->r;

    if (comp->status != 0 && !(comp->op == KVT_OP_LOAD && comp->status == KVT_EBUFSIZE)) {
        rank_fail(r, 1, "%s: %s%s%s", p->op == OP_SAVE ? "save" : "load",
                  kvt_strerror(comp->status), comp->error[0] ? ": " : "", comp->error);
        kvt_completion_free(p->c, comp);
        return -1;
    }
    switch (comp->op) {
    case KVT_OP_RESERVE:
        return on_reserved(p, sl, s, comp); /* the slot stays busy: the commit follows */
    case KVT_OP_COMMIT:
        add(&p->rb->commit, now_ns() - sl->ts, p->measured);
        memcpy(r->outcomes + sl->i, comp->outcomes, sl->k);
        break;
    case KVT_OP_PIN:
        on_pinned(p, sl, comp);
        end_call(p, sl);
        return 0;
    case KVT_OP_SAVE:
        memcpy(r->outcomes + sl->i, comp->outcomes, sl->k);
        break;
    case KVT_OP_LOAD:
        for (size_t j = 0; j < sl->k; j++)
            r->lens[sl->i + j] = comp->outcomes[j] == KVT_LOAD_HIT ? comp->lens[j] : 0;
        break;
    default:
        break;
    }
    kvt_completion_free(p->c, comp);
    end_call(p, sl);
    return 0;
}

/* Waits for the next completion and handles it. */
static int reap(pipe_t *p)
{
    kvt_completion_t *comp;

    while (kvt_next_completion(p->c, &comp) == 0) {
        int rc = kvt_poll(p->c, BENCH_TIMEOUT_MS * 2);
        if (rc <= 0) {
            rank_fail(p->r, 1, "no completion within %d ms (%d in flight)", BENCH_TIMEOUT_MS * 2,
                      (int)p->inflight);
            return -1;
        }
    }
    return on_completion(p, comp);
}

/* The zero-copy workload through the synchronous calls, one call of up to --batch chunks at a
 * time. */
static int sync_zc_chain(rank_t *r, op_t op, const kvt_hash_t *h, size_t from, size_t n,
                         series_t *lat)
{
    const bench_t *b = r->b;
    size_t chunk = b->o.chunk_bytes, batch = b->o.batch, chain = b->chain_len, end = from + n;
    kvt_client_t *c = r->bk[BK_ZC].kv;
    rank_bk_t *rb = &r->bk[BK_ZC];
    int measured = lat != NULL;

    for (size_t i = from, k; i < end; i += k) {
        size_t left = chain - i % chain, lens[batch];
        kvt_save_opts_t sv = {.parent = i % chain ? &h[i - 1] : NULL};
        kvt_completion_t *comp = NULL, *done = NULL;
        uint64_t t0, t1;
        int rc;

        k = end - i < batch ? end - i : batch;
        k = k < left ? k : left;
        for (size_t j = 0; j < k; j++)
            lens[j] = chunk;
        t0 = now_ns();
        if (op == OP_LOAD && b->o.lookup_first && chain_lookup(r, c, h, from, i, end))
            return -1;
        if (op == OP_LOAD) {
            rc = kvt_pin(c, h + i, k, &comp);
            t1 = now_ns();
            add(&rb->pin, t1 - t0, measured);
            if (rc != 0 && rc != KVT_EBUFSIZE) {
                kvt_completion_free(c, comp);
                rank_fail_kvt(r, "pin", rc, c);
                return -1;
            }
            for (size_t j = 0; j < k; j++) {
                size_t len = comp->outcomes[j] == KVT_LOAD_HIT ? comp->lens[j] : 0;
                if (len > chunk)
                    len = 0;
                if (len > 0 && !b->zc_no_copy)
                    memcpy(r->dst + (i + j) * chunk, comp->ptrs[j], len);
                r->lens[i + j] = len;
            }
            kvt_completion_free(c, comp);
        } else {
            rc = kvt_reserve(c, h + i, k, lens, &sv, &comp);
            t1 = now_ns();
            add(&rb->reserve, t1 - t0, measured);
            if (rc != 0) {
                kvt_completion_free(c, comp);
                rank_fail_kvt(r, "reserve", rc, c);
                return -1;
            }
            for (size_t j = 0; j < k; j++) {
                r->outcomes[i + j] = comp->outcomes[j];
                if (comp->outcomes[j] == KVT_SAVE_RESERVED)
                    memcpy(comp->ptrs[j], r->src + (i + j) * chunk, chunk); /* the "DMA" */
            }
            t1 = now_ns();
            rc = kvt_commit(c, comp, k, &done);
            add(&rb->commit, now_ns() - t1, measured);
            if (rc != 0) {
                if (done == NULL)
                    kvt_completion_free(c, comp);
                kvt_completion_free(c, done);
                rank_fail_kvt(r, "commit", rc, c);
                return -1;
            }
            memcpy(r->outcomes + i, done->outcomes, k);
            kvt_completion_free(c, done);
        }
        if (lat)
            lat->v[lat->n++] = now_ns() - t0;
    }
    return 0;
}

int async_chain(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t from, size_t n,
                series_t *lat)
{
    const bench_t *b = r->b;
    size_t batch = b->o.batch, chain = b->chain_len, depth = b->o.depth ? b->o.depth : 1;
    pipe_t p = {.r = r,
                .bk = bk,
                .op = op,
                .h = h,
                .c = r->bk[bk].kv,
                .rb = &r->bk[bk],
                .measured = lat != NULL,
                .lat = lat,
                .depth = depth};
    size_t i = from, end = from + n, free_slot = 0;
    int rc = 0;

    if (bk == BK_ZC && b->o.depth == 0)
        return sync_zc_chain(r, op, h, from, n, lat);
    p.slots = calloc(depth, sizeof *p.slots);
    if (p.slots == NULL) {
        rank_fail(r, 1, "out of memory");
        return -1;
    }
    while (rc == 0 && (i < end || p.inflight > 0)) {
        if (i < end && p.inflight < depth) {
            size_t left = chain - i % chain, k = end - i < batch ? end - i : batch;
            k = k < left ? k : left;
            while (p.slots[free_slot].busy)
                free_slot = (free_slot + 1) % depth;
            if (op == OP_LOAD && b->o.lookup_first && chain_lookup(r, p.c, h, from, i, end)) {
                rc = -1;
                break;
            }
            rc = start_call(&p, free_slot, i, k);
            i += k;
            continue;
        }
        rc = reap(&p);
    }
    while (p.inflight > 0 && reap(&p) == 0) /* after a failure: nothing left in flight */
        ;
    free(p.slots);
    return rc;
}
