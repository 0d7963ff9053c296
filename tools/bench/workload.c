/*
 * workload.c - the rank threads of kvtier-bench: the measured workload, one function over every
 * backend (run_chain: a chain saved, then loaded, in calls of --batch chunks that never cross a
 * chain, then verified byte-exact), and the step dispatcher each rank thread runs between the
 * two barriers of run_step().
 *
 * Backends: kvtier on the shared-memory path and on the frames path (one client each, its data
 * path forced), kvtier's zero-copy calls (--zero-copy, async.c) and Redis (redis.c); bk_call()
 * is the one place that tells the synchronous ones apart, and with --depth every kvtier backend
 * runs through async.c instead. The lookup workload runs on a separate namespace of 4 KiB chunks
 * (lookups carry no chunk bytes); with --all-ranks every rank of the world holds them, so that
 * all-ranks lookups and single-rank lookups of the same chunks can be compared.
 *
 * Threads: one per rank; during a step each thread writes only its own rank_t and reads bench_t,
 * which the main thread does not change until the end barrier.
 */
#include "bench.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

/* The chains of backend bk: round `round`, or the warm-up chain when warm is set. */
kvt_hash_t *chain_of(const bench_t *b, bk_t bk, uint32_t round, int warm)
{
    if (warm)
        return b->warm_hashes + (size_t)bk * b->nwarm;
    return b->round_hashes + ((size_t)round * BK_N + bk) * b->o.chunks;
}

static int kv_save(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes;
    const void *bufs[k];
    size_t lens[k];
    for (size_t j = 0; j < k; j++) {
        bufs[j] = r->src + (i + j) * chunk;
        lens[j] = chunk;
    }
    kvt_save_opts_t so = {.parent = i % r->b->chain_len ? &h[i - 1] : NULL};
    int rc = kvt_save(c, h + i, k, bufs, lens, &so, r->outcomes + i);
    if (rc)
        rank_fail_kvt(r, "save", rc, c);
    return rc ? -1 : 0;
}

static int kv_load(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes, nhit = 0;
    void *bufs[k];
    size_t caps[k];
    for (size_t j = 0; j < k; j++) {
        bufs[j] = r->dst + (i + j) * chunk;
        caps[j] = chunk;
    }
    int rc = kvt_load(c, h + i, k, bufs, caps, r->lens + i, &nhit);
    if (rc)
        rank_fail_kvt(r, "load", rc, c);
    return rc ? -1 : 0;
}

/* One call of the workload: chunks [i, i + k) of chain h through backend bk. */
static int bk_call(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t i, size_t k)
{
    if (bk == BK_REDIS)
        return redis_call(r, op, h, i, k);
    kvt_client_t *c = r->bk[bk].kv;
    return op == OP_SAVE ? kv_save(r, c, h, i, k) : kv_load(r, c, h, i, k);
}

int chain_lookup(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t from, size_t i, size_t end)
{
    size_t chain = r->b->chain_len, n = chain - i % chain;
    kvt_lookup_result_t res = {0};
    int rc;

    if (i != from && i % chain != 0)
        return 0;
    n = n < end - i ? n : end - i;
    rc = kvt_lookup(c, h + i, n, NULL, &res);
    if (rc != 0) {
        rank_fail_kvt(r, "lookup", rc, c);
        return -1;
    }
    return 0;
}

/* The measured workload: chunks [from, from + n) of chains h (chain_len each, the last may be
 * shorter) saved from src (outcomes) or loaded into dst (lens) through backend bk in calls of
 * --batch chunks that never cross a chain; lat (may be NULL) gets each call's latency. */
static int run_chain(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t from, size_t n,
                     series_t *lat)
{
    size_t batch = r->b->o.batch, chain = r->b->chain_len, end = from + n;
    if (bk != BK_REDIS && (r->b->o.depth > 0 || bk == BK_ZC))
        return async_chain(r, bk, op, h, from, n, lat);
    if (bk == BK_REDIS && op == OP_SAVE) {
        r->rkeys = h; /* before the first SET: a failed save is unlinked too */
        r->nrkeys = end;
    }
    for (size_t i = from, k; i < end; i += k) {
        size_t left = chain - i % chain;
        k = end - i < batch ? end - i : batch;
        k = k < left ? k : left;
        uint64_t t0 = now_ns();
        if (op == OP_LOAD && r->b->o.lookup_first && bk != BK_REDIS &&
            chain_lookup(r, r->bk[bk].kv, h, from, i, end))
            return -1;
        int rc = bk_call(r, bk, op, h, i, k);
        uint64_t t1 = now_ns();
        if (rc)
            return -1;
        if (lat)
            lat->v[lat->n++] = t1 - t0;
    }
    return 0;
}

/* Checks the loaded chunks [from, from + n) against the saved ones; with count, counts hits,
 * misses and lost chunks into c. */
static void verify_chain(rank_t *r, const kvt_hash_t *h, size_t from, size_t n, counts_t *c)
{
    size_t chunk = r->b->o.chunk_bytes;
    for (size_t i = from; i < from + n; i++) {
        char hex[33];
        if (r->lens[i] == 0) {
            int kept = r->outcomes[i] == KVT_SAVE_STORED || r->outcomes[i] == KVT_SAVE_EXISTS;
            if (c) {
                c->misses++;
                c->lost += (uint64_t)kept;
            }
            continue;
        }
        const uint8_t *want = r->src + i * chunk, *got = r->dst + i * chunk;
        if (r->lens[i] != chunk || memcmp(want, got, chunk) != 0) {
            size_t off = 0;
            while (off < chunk && off < r->lens[i] && want[off] == got[off])
                off++;
            kvt_hash_format(&h[i], hex);
            char where[32] = "warm-up";
            if (c)
                snprintf(where, sizeof where, "round %u", r->b->round);
            rank_fail(r, 1,
                      "DATA MISMATCH %s %s chunk %zu (hash %s): loaded %zu bytes, saved %zu, "
                      "first difference at offset %zu",
                      cols[r->b->cur].name, where, i, hex, r->lens[i], chunk, off);
            return;
        }
        if (c) {
            c->hits++;
            c->loaded_bytes += chunk;
        }
    }
}

static void count_outcomes(const rank_t *r, size_t n, counts_t *c)
{
    for (size_t i = 0; i < n; i++) {
        switch (r->outcomes[i]) {
        case KVT_SAVE_STORED:
            c->stored++;
            c->stored_bytes += r->b->o.chunk_bytes;
            break;
        case KVT_SAVE_EXISTS:
            c->exists++;
            break;
        case KVT_SAVE_NOSPACE:
            c->nospace++;
            break;
        default:
            c->declined++;
            break;
        }
    }
}

/* Stamps chain h into src and clears the load side, so that nothing of the previous backend
 * or round can pass the check. */
static void prepare_chain(rank_t *r, const kvt_hash_t *h, size_t n)
{
    size_t chunk = r->b->o.chunk_bytes;
    for (size_t i = 0; i < n; i++)
        stamp(r->src + i * chunk, chunk, &h[i]);
    memset(r->dst, BENCH_FILL_BYTE, n * chunk);
    memset(r->lens, 0, n * sizeof *r->lens);
    memset(r->outcomes, 0, n);
}

static int connect_ns(rank_t *r, const kvt_ns_desc_t *ns, int data_path, kvt_client_t **out)
{
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = data_path};
    return kvt_connect(r->b->o.endpoint, ns, r->rank, &co, out);
}

/* Connects the kvtier backends and the lookup client. The shared-memory client may fail with
 * EUNSUPP or ESYS under --data-path auto: the backend is then unavailable, not an error. */
static void setup_kvtier(rank_t *r)
{
    const bench_t *b = r->b;
    int rc;
    if (b->bk_state[BK_SHM] == BK_ON) {
        rc = connect_ns(r, &b->bulk_ns, KVT_DATA_PATH_SHM, &r->bk[BK_SHM].kv);
        if ((rc == KVT_EUNSUPP || rc == KVT_ESYS) && b->o.data_path == KVT_DATA_PATH_AUTO) {
            r->shm_rc = rc;
        } else if (rc) {
            rank_fail(r, 1,
                      "connect %s (shm path): %s (the shared-memory path needs an ipc:// "
                      "endpoint and an arena file this user can map)",
                      b->o.endpoint, kvt_strerror(rc));
            return;
        }
    }
    if (!r->shm_rc && b->bk_state[BK_ZC] == BK_ON) {
        rc = connect_ns(r, &b->bulk_ns, KVT_DATA_PATH_SHM, &r->bk[BK_ZC].kv);
        if (rc) {
            rank_fail(r, 1, "connect %s (zero-copy client): %s", b->o.endpoint, kvt_strerror(rc));
            return;
        }
    }
    rc = connect_ns(r, &b->bulk_ns, KVT_DATA_PATH_FRAMES, &r->bk[BK_FRAMES].kv);
    if (rc == 0)
        rc = connect_ns(r, &b->lookup_ns, KVT_DATA_PATH_FRAMES, &r->lk);
    if (rc) {
        rank_fail(r, 1, "connect %s: %s", b->o.endpoint, kvt_strerror(rc));
        return;
    }
    if (r->rank == 0) {
        rc = kvt_server_info(r->bk[BK_FRAMES].kv, &r->b->info);
        if (rc)
            rank_fail_kvt(r, "server info", rc, r->bk[BK_FRAMES].kv);
    }
}

static void step_setup(rank_t *r)
{
    const bench_t *b = r->b;
    const bench_opts_t *o = &b->o;
    size_t bytes = (size_t)o->chunks * o->chunk_bytes;
    size_t calls = (size_t)o->rounds * b->calls_per_round;
    int nomem = 0;
    r->src = malloc(bytes);
    r->dst = malloc(bytes);
    r->small = malloc((size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES);
    r->outcomes = calloc(o->chunks, 1);
    r->lens = calloc(o->chunks, sizeof *r->lens);
    r->lookup.v = calloc(o->lookups, sizeof(uint64_t));
    r->zlookup.v = calloc(o->lookups, sizeof(uint64_t));
    r->lookup_single.v = calloc(o->lookups, sizeof(uint64_t));
    r->zrtt.v = calloc(calls, sizeof(uint64_t));
    nomem |= !r->lookup_single.v || !r->zrtt.v;
    if (o->disk_dir[0]) {
        r->dsave.v = calloc(b->calls_per_round, sizeof(uint64_t));
        r->dload.v = calloc(b->calls_per_round, sizeof(uint64_t));
        r->dload_shm.v = calloc(b->calls_per_round, sizeof(uint64_t));
        r->dload_zc.v = calloc(b->calls_per_round, sizeof(uint64_t));
        nomem |= !r->dsave.v || !r->dload.v || !r->dload_shm.v || !r->dload_zc.v;
    }
    for (int k = 0; k < BK_N; k++) {
        rank_bk_t *rb = &r->bk[k];
        if (b->bk_state[k] == BK_OFF)
            continue;
        rb->save.v = calloc(calls, sizeof(uint64_t));
        rb->load.v = calloc(calls, sizeof(uint64_t));
        nomem |= !rb->save.v || !rb->load.v;
        if (k == BK_REDIS || (o->depth == 0 && k != BK_ZC))
            continue;
        rb->submit_save.v = calloc(calls, sizeof(uint64_t));
        rb->submit_load.v = calloc(calls, sizeof(uint64_t));
        nomem |= !rb->submit_save.v || !rb->submit_load.v;
        if (k != BK_ZC)
            continue;
        rb->reserve.v = calloc(calls, sizeof(uint64_t));
        rb->commit.v = calloc(calls, sizeof(uint64_t));
        rb->pin.v = calloc(calls, sizeof(uint64_t));
        nomem |= !rb->reserve.v || !rb->commit.v || !rb->pin.v;
    }
    if (nomem || !r->src || !r->dst || !r->small || !r->outcomes || !r->lens || !r->lookup.v ||
        !r->zlookup.v) {
        rank_fail(r, 1, "out of memory (%zu bytes of chunk buffers)", 2 * bytes);
        return;
    }
    if (o->data == DATA_BF16) /* the same values in every run: chunk i of rank r, seed r:i */
        for (size_t i = 0; i < o->chunks; i++)
            fill_bf16(r->src + i * o->chunk_bytes, o->chunk_bytes,
                      0xbf16bf1600000000u ^ ((uint64_t)r->rank << 32 | i));
    else
        fill_random(r->src, bytes, b->seed + r->rank);
    memset(r->dst, BENCH_FILL_BYTE, bytes);
    if (o->disk_dir[0])
        prepare_chain(r, b->disk_hashes, o->chunks);
    fill_random(r->small, (size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES, ~b->seed + r->rank);
    setup_kvtier(r);
    if (!r->failed && b->bk_state[BK_REDIS] == BK_ON)
        redis_setup(r);
}

/* The workload once, unmeasured and unverified counts, on the backend's warm-up chain. */
static void step_warmup(rank_t *r)
{
    bench_t *b = r->b;
    const kvt_hash_t *h = chain_of(b, b->cur, 0, 1);
    prepare_chain(r, h, b->nwarm);
    if (run_chain(r, b->cur, OP_SAVE, h, 0, b->nwarm, NULL) ||
        run_chain(r, b->cur, OP_LOAD, h, 0, b->nwarm, NULL))
        return;
    verify_chain(r, h, 0, b->nwarm, NULL);
    if (!r->failed && b->cur == BK_REDIS)
        redis_drop(r);
}

static int is_lookup_thread(const rank_t *r)
{
    return !r->b->o.all_ranks || r->rank == 0;
}

static void do_lookups(rank_t *r, uint32_t count, series_t *lat)
{
    const bench_t *b = r->b;
    uint32_t world = b->o.world;
    uint32_t rank_hits[world];
    uint32_t expect = b->o.prompt_chunks; /* every rank of the world holds them (fill) */
    kvt_lookup_opts_t lo = {.all_ranks = b->o.all_ranks && !b->lookup_single};
    for (uint32_t i = 0; i < count; i++) {
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = world};
        uint64_t t0 = now_ns();
        int rc = kvt_lookup(r->lk, b->lookup_hashes, b->o.prompt_chunks, &lo, &res);
        uint64_t t1 = now_ns();
        if (rc) {
            rank_fail_kvt(r, "lookup", rc, r->lk);
            return;
        }
        if (lat) {
            lat->v[lat->n++] = t1 - t0;
            r->lookup_short += res.hit < expect;
            r->lookup_skipped += res.skipped != 0;
        }
    }
}

/* Saves the lookup chunks for rank `rank` of the world through c. */
static int fill_lookup_rank(rank_t *r, kvt_client_t *c, const void **bufs, const size_t *lens,
                            uint8_t *oc)
{
    const bench_t *b = r->b;
    uint32_t n = b->o.prompt_chunks;
    int rc = kvt_save(c, b->lookup_hashes, n, bufs, lens, NULL, oc);
    if (rc) {
        rank_fail_kvt(r, "save (lookup namespace)", rc, c);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (oc[i] == KVT_SAVE_STORED || oc[i] == KVT_SAVE_EXISTS)
            r->fill_stored++;
        else
            r->fill_other++;
    }
    return 0;
}

static void step_fill_lookup(rank_t *r)
{
    const bench_t *b = r->b;
    uint32_t n = b->o.prompt_chunks;
    uint8_t *oc = malloc(n);
    if (!oc) {
        rank_fail(r, 1, "out of memory");
        return;
    }
    const void **bufs = malloc(n * sizeof *bufs);
    size_t *lens = malloc(n * sizeof *lens);
    if (!bufs || !lens) {
        rank_fail(r, 1, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        bufs[i] = r->small + (size_t)i * BENCH_LOOKUP_CHUNK_BYTES;
        lens[i] = BENCH_LOOKUP_CHUNK_BYTES;
    }
    if (fill_lookup_rank(r, r->lk, bufs, lens, oc))
        goto out;
    /* the ranks of the world no thread runs: filled by the threads in turn, so that every rank
     * holds the chunks (an all-ranks lookup answers the minimum over ranks) */
    for (uint32_t rank = r->rank + b->o.ranks; rank < b->o.world; rank += b->o.ranks) {
        kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = KVT_DATA_PATH_FRAMES};
        kvt_client_t *c = NULL;
        int rc = kvt_connect(b->o.endpoint, &b->lookup_ns, rank, &co, &c);
        if (rc) {
            rank_fail(r, 1, "connect %s (rank %u): %s", b->o.endpoint, rank, kvt_strerror(rc));
            goto out;
        }
        rc = fill_lookup_rank(r, c, bufs, lens, oc);
        kvt_close(&c);
        if (rc)
            goto out;
    }
out:
    free(lens);
    free(bufs);
    free(oc);
}

/* --paced: waits until the daemon's write buffer holds at most b->pace_limit chunks (status
 * disk.write_buffer_chunks, polled every BENCH_PACE_POLL_US), so that the next chain's demotions
 * find room; fails after BENCH_PACE_MAX_MS. */
static int pace_wait(rank_t *r)
{
    const bench_t *b = r->b;
    for (uint64_t waited_us = 0;; waited_us += BENCH_PACE_POLL_US) {
        json_t *root = NULL;
        if (tool_status_get(b->o.status_sock, BENCH_TIMEOUT_MS, &root, NULL)) {
            rank_fail(r, 1, "--paced: status socket %s did not answer", b->o.status_sock);
            return -1;
        }
        json_t *v = json_object_get(json_object_get(root, "disk"), "write_buffer_chunks");
        json_int_t pending = json_is_integer(v) ? json_integer_value(v) : -1;
        json_decref(root);
        if (pending < 0) {
            rank_fail(r, 1, "--paced: status has no disk.write_buffer_chunks");
            return -1;
        }
        if ((uint64_t)pending <= b->pace_limit)
            return 0;
        if (waited_us >= BENCH_PACE_MAX_MS * 1000ull) {
            rank_fail(r, 1, "--paced: %" PRId64 " chunks still pending after %d ms",
                      (int64_t)pending, BENCH_PACE_MAX_MS);
            return -1;
        }
        r->pace_waits++;
        usleep(BENCH_PACE_POLL_US);
    }
}

/* Disk mode's saves: the n chunks through the primary backend, a chain at a time with --paced
 * (the wait for the writer before each chain is part of the save step's time). */
static int disk_save(rank_t *r, size_t n)
{
    const bench_t *b = r->b;
    if (!b->o.paced)
        return run_chain(r, b->primary, OP_SAVE, b->disk_hashes, 0, n, &r->dsave);
    for (size_t i = 0; i < n; i += b->chain_len) {
        size_t k = n - i < b->chain_len ? n - i : b->chain_len;
        if ((i > 0 && pace_wait(r)) ||
            run_chain(r, b->primary, OP_SAVE, b->disk_hashes, i, k, &r->dsave))
            return -1;
    }
    return 0;
}

static void step_exit(rank_t *r)
{
    for (int k = 0; k < BK_N; k++)
        kvt_close(&r->bk[k].kv);
    kvt_close(&r->lk);
    redis_close(r);
    if (r->zsock)
        zmq_close(r->zsock);
    r->zsock = NULL;
}

static void rank_run_step(rank_t *r)
{
    bench_t *b = r->b;
    const kvt_hash_t *h = chain_of(b, b->cur, b->round, 0);
    rank_bk_t *rb = &r->bk[b->cur];
    size_t n = b->o.chunks;
    uint32_t zwarm = b->nwarm;
    switch (b->step) {
    case STEP_SETUP:
        step_setup(r);
        break;
    case STEP_WARMUP:
        step_warmup(r);
        break;
    case STEP_PREPARE:
        prepare_chain(r, h, n);
        break;
    case STEP_SAVE:
        if (run_chain(r, b->cur, OP_SAVE, h, 0, n, &rb->save) == 0)
            count_outcomes(r, n, &rb->n);
        break;
    case STEP_LOAD:
        run_chain(r, b->cur, OP_LOAD, h, 0, n, &rb->load);
        break;
    case STEP_VERIFY:
        verify_chain(r, h, 0, n, &rb->n);
        if (!r->failed && b->cur == BK_REDIS)
            redis_drop(r);
        break;
    case STEP_FILL_LOOKUP:
        step_fill_lookup(r);
        break;
    case STEP_LOOKUP_WARM:
        if (is_lookup_thread(r))
            do_lookups(r, b->o.lookups / 20 + 1, NULL);
        break;
    case STEP_LOOKUP:
        if (is_lookup_thread(r))
            do_lookups(r, b->slice, b->lookup_single ? &r->lookup_single : &r->lookup);
        break;
    case STEP_Z_CONNECT:
        step_z_connect(r);
        break;
    case STEP_Z_WARM:
        z_save_like(r, zwarm);
        if (!r->failed)
            z_load_like(r, zwarm);
        if (!r->failed && is_lookup_thread(r))
            z_lookup_like(r, b->o.lookups / 20 + 1, NULL);
        r->zbytes_save = r->zbytes_load = 0;
        break;
    case STEP_Z_SAVE:
        z_save_like(r, b->o.chunks);
        break;
    case STEP_Z_LOAD:
        z_load_like(r, b->o.chunks);
        break;
    case STEP_Z_LOOKUP:
        if (is_lookup_thread(r))
            z_lookup_like(r, b->slice, &r->zlookup);
        break;
    case STEP_Z_RTT:
        z_rtt_like(r, b->calls_per_round, &r->zrtt);
        break;
    case STEP_DISK_SAVE:
        if (disk_save(r, n) == 0)
            count_outcomes(r, n, &r->dn);
        break;
    case STEP_DISK_LOAD:
        run_chain(r, b->disk_reload ? BK_SHM : b->cur, OP_LOAD, b->disk_hashes, b->disk_load_from,
                  b->disk_load_count,
                  b->disk_reload        ? NULL
                  : b->cur == BK_FRAMES ? &r->dload
                  : b->cur == BK_ZC     ? &r->dload_zc
                                        : &r->dload_shm);
        break;
    case STEP_DISK_VERIFY:
        verify_chain(r, b->disk_hashes, b->disk_load_from, b->disk_load_count,
                     b->cur == BK_FRAMES ? &r->dn
                     : b->cur == BK_ZC   ? &r->dn_zc
                                         : &r->dn_shm);
        break;
    case STEP_EXIT:
        break;
    }
}

void *rank_main(void *arg)
{
    rank_t *r = arg;
    bench_t *b = r->b;
    pthread_mutex_lock(&b->gate_mu);
    while (!b->launched)
        pthread_cond_wait(&b->gate_cv, &b->gate_mu);
    int abort_run = b->abort;
    pthread_mutex_unlock(&b->gate_mu);
    if (abort_run)
        return NULL;
    for (;;) {
        pthread_barrier_wait(&b->start);
        if (b->step == STEP_EXIT)
            break;
        if (!r->failed)
            rank_run_step(r);
        pthread_barrier_wait(&b->end);
    }
    step_exit(r);
    return NULL;
}
