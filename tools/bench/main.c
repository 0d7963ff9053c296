/*
 * main.c - kvtier-bench: measures save, load and lookup against a running kvtierd, next to
 * baselines and an optional Redis server measured in the same run with the same sizes. This file
 * is the program (options, the run's hashes, the threads, one mode, its report); bench.h maps the
 * other files.
 *
 * Design: one thread per rank, driven in lock step by the main thread through a list of steps
 * (setup, warm-up, then per round and per backend prepare / save / load / verify, then the
 * baselines, then the lookup-namespace fill and lookup slices). Every step is bracketed by two
 * barriers: the main thread reads CLOCK_MONOTONIC when the start barrier opens and when the end
 * barrier closes, so throughput is payload bytes over the wall time of all ranks together;
 * per-call latencies are taken inside the threads. Chunk data is random, pre-faulted, and
 * stamped with the chunk's hash before every round so a load that returned another chunk's
 * bytes cannot pass the memcmp check. Token ids come from a per-run random seed, so two runs
 * never share a hash even when --ns names the same model.
 *
 * Backends: one workload (run_chain: the chain saved, then loaded, in calls of --batch chunks,
 * then verified byte-exact) runs through each backend in turn: kvtier on the shared-memory path
 * and kvtier on the frames path (two clients per rank, each with its data path forced, every
 * backend on its own hashes so that no save finds its chunks already stored), and with
 * --vs-redis a Redis server through hiredis (SET pipelined per batch, GET pipelined per batch,
 * keys "kvtier-bench:<seed>:<rank>:<hash>" unlinked after each round and on exit). When the
 * arena cannot be mapped (tcp endpoint, memfd arena, no permission) the shared-memory backend
 * is reported unavailable, never replaced by frames.
 *
 * Baselines: (a) memcpy of the same chunks, one thread; (b) an in-process ROUTER echo thread on
 * an ipc:// endpoint in a temp dir, with one DEALER per rank: "save-like" sends a chunk batch
 * and receives an 8-byte ack, "load-like" sends a small request and receives the chunk batch
 * (plain zmq_send, which copies into the message, and zmq_msg_recv, which does not copy out);
 * (c) a lookup-sized round trip (prompt_chunks x 16 bytes out, 32 bytes back). Each round runs
 * every backend, then the ZeroMQ baseline, then memcpy, and lookups alternate with their
 * baseline in slices, so drift of the machine hits both sides of a ratio alike. The frames path
 * is compared with raw ZeroMQ (same transport, what the protocol costs) and the shared-memory
 * path with memcpy (its one copy is the ceiling) and with Redis.
 *
 * Disk mode (--disk-dir DIR, disk_mode.c): the same workload, run once, measures the daemon's
 * disk tier beside raw file I/O and lz4 of the same chunks (--data bf16 gives normally
 * distributed bf16 values, deterministic per chunk).
 *
 * Threads: main (steps, memcpy baseline, report), one per rank, one echo thread (disk mode: no
 * echo thread, a lookup thread during the idle and the write phase). Between the
 * end barrier of a step and the start barrier of the next only the main thread touches the
 * shared state (the barriers order the memory accesses); during a step each rank thread writes
 * only its own rank_t.
 *
 * Exit status: 0 success, 1 data mismatch or daemon/Redis/transport error, 2 usage error
 * (including sizes the daemon announces it cannot accept and a non-loopback Redis address).
 */
#include "bench.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static int bench_prepare(bench_t *b)
{
    const bench_opts_t *o = &b->o;
    if (getrandom(&b->seed, sizeof b->seed, 0) != sizeof b->seed)
        b->seed = now_ns() ^ ((uint64_t)getpid() << 32);
    if (!o->model[0])
        snprintf(b->o.model, sizeof b->o.model, "%s-%016" PRIx64, BENCH_MODEL, b->seed);
    b->bulk_ns = (kvt_ns_desc_t){
        .model = b->o.model,
        .dtype = "bench-bulk",
        .chunk_tokens = BENCH_CHUNK_TOKENS,
        .num_layers = 1,
        .num_kv_heads = 1,
        .head_dim = (uint32_t)(o->chunk_bytes < UINT32_MAX ? o->chunk_bytes : UINT32_MAX),
        .world_size = o->world};
    b->lookup_ns = b->bulk_ns;
    b->lookup_ns.dtype = "bench-lookup";
    b->lookup_ns.head_dim = BENCH_LOOKUP_CHUNK_BYTES;
    b->nwarm = o->chunks < 4 ? o->chunks : 4;
    if (b->nwarm < o->batch && o->batch <= o->chunks)
        b->nwarm = o->batch;
    b->chain_len = o->disk_dir[0] ? o->chain_chunks : o->chunks;
    uint32_t per_chain = (b->chain_len + o->batch - 1) / o->batch, tail = o->chunks % b->chain_len;
    b->calls_per_round = o->chunks / b->chain_len * per_chain + (tail + o->batch - 1) / o->batch;
    b->round_hashes = calloc((size_t)o->rounds * BK_N * o->chunks, sizeof(kvt_hash_t));
    b->warm_hashes = calloc((size_t)BK_N * b->nwarm, sizeof(kvt_hash_t));
    b->lookup_hashes = calloc(o->prompt_chunks, sizeof(kvt_hash_t));
    b->ranks = calloc(o->ranks, sizeof(rank_t));
    if (!b->round_hashes || !b->warm_hashes || !b->lookup_hashes || !b->ranks)
        return -1;
    if (o->disk_dir[0]) { /* token sets from 2^32 on: one per chain */
        b->disk_hashes = calloc(o->chunks, sizeof(kvt_hash_t));
        if (!b->disk_hashes)
            return -1;
        for (uint32_t i = 0; i < o->chunks; i += b->chain_len) {
            uint32_t k = o->chunks - i < b->chain_len ? o->chunks - i : b->chain_len;
            if (make_hashes(b->seed, (1ull << 32) + i, b->disk_hashes + i, k))
                return -1;
        }
    }
    b->bk_state[BK_SHM] = o->data_path == KVT_DATA_PATH_FRAMES ? BK_OFF : BK_ON;
    b->bk_state[BK_FRAMES] = BK_ON;
    b->bk_state[BK_REDIS] = o->redis_addr[0] ? BK_ON : BK_OFF;
    b->bk_state[BK_ZC] = o->zero_copy ? BK_ON : BK_OFF;
    snprintf(b->bk_why[BK_SHM], sizeof b->bk_why[0], "not measured (--data-path frames)");
    snprintf(b->bk_why[BK_ZC], sizeof b->bk_why[0], "not measured (no --zero-copy)");
    snprintf(b->bk_why[BK_REDIS], sizeof b->bk_why[0], "not measured (no --vs-redis HOST:PORT)");
    /* Token sets: 1 lookups, 2 + k warm-up of backend k, then round i of backend k. */
    if (make_hashes(b->seed, 1, b->lookup_hashes, o->prompt_chunks))
        return -1;
    for (int k = 0; k < BK_N; k++) {
        if (b->bk_state[k] == BK_OFF)
            continue;
        if (make_hashes(b->seed, 2 + (uint64_t)k, chain_of(b, k, 0, 1), b->nwarm))
            return -1;
        for (uint32_t i = 0; i < o->rounds; i++)
            if (make_hashes(b->seed, 2 + BK_N + (uint64_t)i * BK_N + (uint64_t)k,
                            chain_of(b, k, i, 0), o->chunks))
                return -1;
    }
    return 0;
}

static void bench_free(bench_t *b)
{
    for (uint32_t i = 0; b->ranks && i < b->o.ranks; i++) {
        rank_t *r = &b->ranks[i];
        free(r->src);
        free(r->dst);
        free(r->small);
        free(r->outcomes);
        free(r->lens);
        for (int k = 0; k < BK_N; k++) {
            rank_bk_t *rb = &r->bk[k];
            free(rb->save.v);
            free(rb->load.v);
            free(rb->submit_save.v);
            free(rb->submit_load.v);
            free(rb->reserve.v);
            free(rb->commit.v);
            free(rb->pin.v);
        }
        free(r->lookup.v);
        free(r->zlookup.v);
        free(r->lookup_single.v);
        free(r->zrtt.v);
        free(r->dsave.v);
        free(r->dload.v);
        free(r->dload_shm.v);
        free(r->dload_zc.v);
    }
    free(b->disk_hashes);
    free(b->ranks);
    free(b->round_hashes);
    free(b->warm_hashes);
    free(b->lookup_hashes);
}

/* Starts the rank threads. They wait at the launch gate until all exist, so a failed
 * pthread_create never leaves a thread blocked on a barrier that cannot fill. */
static uint32_t start_ranks(bench_t *b)
{
    uint32_t started = 0;
    for (; started < b->o.ranks; started++) {
        rank_t *r = &b->ranks[started];
        r->b = b;
        r->rank = started;
        if (pthread_create(&r->thread, NULL, rank_main, r) != 0)
            break;
    }
    pthread_mutex_lock(&b->gate_mu);
    b->launched = 1;
    b->abort = started < b->o.ranks;
    pthread_cond_broadcast(&b->gate_cv);
    pthread_mutex_unlock(&b->gate_mu);
    return started;
}

static void stop_ranks(bench_t *b, uint32_t started)
{
    if (started == b->o.ranks) {
        b->step = STEP_EXIT;
        pthread_barrier_wait(&b->start);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(b->ranks[i].thread, NULL);
}

int main(int argc, char **argv)
{
    static bench_t bench = {.gate_mu = PTHREAD_MUTEX_INITIALIZER,
                            .gate_cv = PTHREAD_COND_INITIALIZER};
    bench_t *b = &bench;
    results_t res = {0};
    tool_init("kvtier-bench", ""); /* the usage text is usage()'s, printed only on --help */
    int rc = parse_args(argc, argv, &b->o);
    if (rc)
        return rc > 0 ? EXIT_OK : EXIT_USAGE;
    if (check_endpoint(b->o.endpoint))
        return EXIT_FAIL;
    rc = EXIT_FAIL;
    if (bench_prepare(b)) {
        tool_error("out of memory");
        goto fail_prepare;
    }
    if (pthread_barrier_init(&b->start, NULL, b->o.ranks + 1))
        goto fail_prepare;
    if (pthread_barrier_init(&b->end, NULL, b->o.ranks + 1))
        goto fail_barrier_end;
    uint32_t started = start_ranks(b);
    if (started < b->o.ranks)
        tool_error("cannot start %u rank threads", b->o.ranks);
    else if (b->o.disk_dir[0])
        rc = bench_disk_steps(b);
    else
        rc = bench_steps(b, &res);
    stop_ranks(b, started);
    zmq_baseline_stop(b);
    if (rc == EXIT_OK)
        rc = b->o.disk_dir[0] ? bench_disk_report(b) : bench_report(b, &res);
    pthread_barrier_destroy(&b->end);
fail_barrier_end:
    pthread_barrier_destroy(&b->start);
fail_prepare:
    bench_free(b);
    return rc;
}
