/*
 * steps.c - the main thread of kvtier-bench's side-by-side mode (the default): the tier is filled
 * to capacity first (steady.c; not with --cold), then each round runs every backend, then the
 * ZeroMQ baselines, then memcpy and copy+checksum over the same chunks, and lookups (all-ranks
 * and single-rank with --all-ranks) alternate with their baseline in slices, so that slow drift
 * of the machine (page cache, frequency, neighbours) hits both sides of a ratio alike. The
 * daemon's CPU time is read around every save and load step. Also the step machinery every mode
 * uses (run_step, the daemon's limits, which backends can run) and the gathering of per-rank
 * results.
 *
 * Threads: main thread only; the rank threads are parked at a barrier whenever it reads them.
 */
#include "bench.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Runs one step on every rank; *secs (may be NULL) receives its wall time. Returns the worst
 * failure kind over ranks (0 none), after printing every rank's message. */
int run_step(bench_t *b, step_t step, uint32_t round, double *secs)
{
    b->step = step;
    b->round = round;
    pthread_barrier_wait(&b->start);
    uint64_t t0 = now_ns();
    pthread_barrier_wait(&b->end);
    uint64_t t1 = now_ns();
    if (secs)
        *secs += (double)(t1 - t0) / 1e9;
    int worst = 0;
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        rank_t *r = &b->ranks[i];
        if (r->failed) {
            tool_error("%s", r->msg);
            worst = r->failed > worst ? r->failed : worst;
            r->msg[0] = '\0';
        }
    }
    return worst;
}

/* One pass of memcpy (csum: kvt_copy_checksum, the copy a verifying load does) over rank 0's
 * chunks (main thread, ranks parked); adds to *bytes, *ns. */
static void memcpy_pass(const bench_t *b, int csum, uint64_t *bytes, uint64_t *ns)
{
    const rank_t *r = &b->ranks[0];
    size_t chunk = b->o.chunk_bytes, n = b->o.chunks;
    volatile uint64_t sink = 0;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        if (csum)
            sink ^= kvt_copy_checksum(r->dst + i * chunk, r->src + i * chunk, chunk);
        else
            memcpy(r->dst + i * chunk, r->src + i * chunk, chunk);
        __asm__ __volatile__("" ::: "memory");
    }
    (void)sink;
    if (ns)
        *ns += now_ns() - t0;
    if (bytes)
        *bytes += (uint64_t)n * chunk;
}

/* Where a rank_t holds the series at offset f of a rank_bk_t of backend k. */
static size_t series_off(int k, size_t f)
{
    return offsetof(rank_t, bk) + (size_t)k * sizeof(rank_bk_t) + f;
}

/* Concatenates the latency series at offset off of every rank and returns its percentiles. */
int merge_pct(const bench_t *b, size_t off, pct_t *out)
{
    size_t total = 0;
    for (uint32_t i = 0; i < b->o.ranks; i++)
        total += ((const series_t *)((const char *)&b->ranks[i] + off))->n;
    uint64_t *all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return -1;
    size_t k = 0;
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        const series_t *s = (const series_t *)((const char *)&b->ranks[i] + off);
        if (s->n)
            memcpy(all + k, s->v, s->n * sizeof *s->v);
        k += s->n;
    }
    *out = percentiles(all, total);
    free(all);
    return 0;
}

void counts_add(counts_t *to, const counts_t *c)
{
    to->stored += c->stored;
    to->exists += c->exists;
    to->nospace += c->nospace;
    to->declined += c->declined;
    to->stored_bytes += c->stored_bytes;
    to->hits += c->hits;
    to->misses += c->misses;
    to->lost += c->lost;
    to->loaded_bytes += c->loaded_bytes;
}

int collect(const bench_t *b, results_t *res)
{
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        const rank_t *r = &b->ranks[i];
        for (int k = 0; k < BK_N; k++)
            counts_add(&res->bk[k].n, &r->bk[k].n);
        res->fill_stored += r->fill_stored;
        res->fill_other += r->fill_other;
        res->lookup_short += r->lookup_short;
        res->lookup_skipped += r->lookup_skipped;
        res->zbytes_save += r->zbytes_save;
        res->zbytes_load += r->zbytes_load;
    }
    for (int k = 0; k < BK_N; k++) {
        bk_result_t *x = &res->bk[k];
        if (merge_pct(b, series_off(k, offsetof(rank_bk_t, save)), &x->save) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, load)), &x->load) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, submit_save)), &x->submit_save) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, submit_load)), &x->submit_load) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, reserve)), &x->reserve) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, commit)), &x->commit) ||
            merge_pct(b, series_off(k, offsetof(rank_bk_t, pin)), &x->pin))
            return -1;
    }
    if (merge_pct(b, offsetof(rank_t, lookup), &res->lookup) ||
        merge_pct(b, offsetof(rank_t, zlookup), &res->zlookup) ||
        merge_pct(b, offsetof(rank_t, lookup_single), &res->lookup_single) ||
        merge_pct(b, offsetof(rank_t, zrtt), &res->zrtt))
        return -1;
    return 0;
}

/* Checks the sizes against the limits the daemon announced at connect. */
int check_limits(const bench_t *b)
{
    const kvt_server_info_t *in = &b->info;
    const bench_opts_t *o = &b->o;
    if (o->chunk_bytes > in->max_chunk_bytes) {
        tool_error("--chunk-bytes %" PRIu64 " exceeds the daemon's "
                   "ram.max_chunk_bytes %" PRIu64 "",
                   o->chunk_bytes, in->max_chunk_bytes);
        return -1;
    }
    uint32_t most = o->batch > o->prompt_chunks ? o->batch : o->prompt_chunks;
    if (most > in->max_chunks) {
        tool_error("--batch/--prompt-chunks %u exceeds the daemon's "
                   "server.max_chunks_per_request %u",
                   most, in->max_chunks);
        return -1;
    }
    return 0;
}

#define BENCH_LOOKUP_SLICES 4

/* After setup: the shared-memory backend is unavailable when any rank could not map the arena
 * (only under --data-path auto; otherwise setup failed), and the kvtier-vs-zmq table reports
 * the shared-memory path when it is measured. */
void resolve_backends(bench_t *b)
{
    for (uint32_t i = 0; i < b->o.ranks && b->bk_state[BK_SHM] == BK_ON; i++) {
        int rc = b->ranks[i].shm_rc;
        if (rc == 0)
            continue;
        b->bk_state[BK_SHM] = BK_UNAVAIL;
        snprintf(b->bk_why[BK_SHM], sizeof b->bk_why[0], "%s",
                 strncmp(b->o.endpoint, "ipc://", 6) != 0
                     ? "the arena is shared only with clients of an ipc:// endpoint"
                 : rc == KVT_EUNSUPP
                     ? "the daemon has no arena file (ram.arena_path \"\": anonymous memfd)"
                     : "cannot open or map the daemon's arena file (group permission?)");
    }
    if (b->bk_state[BK_ZC] == BK_ON && b->bk_state[BK_SHM] != BK_ON) {
        b->bk_state[BK_ZC] = BK_UNAVAIL;
        snprintf(b->bk_why[BK_ZC], sizeof b->bk_why[0], "%s",
                 "the zero-copy calls need the shared-memory path (see kvtier-shm)");
    }
    b->primary = b->bk_state[BK_SHM] == BK_ON ? BK_SHM : BK_FRAMES;
}

/* A step with the daemon's CPU seconds during it added to *cpu (left < 0 when unknown). */
static int timed_step(bench_t *b, step_t step, uint32_t round, double *secs, long pid, double *cpu)
{
    double c0 = daemon_cpu_s(pid), c1;
    int rc = run_step(b, step, round, secs);
    c1 = daemon_cpu_s(pid);
    if (c0 < 0 || c1 < 0)
        *cpu = -1;
    else if (*cpu >= 0)
        *cpu += c1 - c0;
    return rc;
}

/* One round of the workload through backend k: prepare, save, load, verify. */
static int backend_round(bench_t *b, bk_t k, uint32_t round, long pid, bk_result_t *res)
{
    b->cur = k;
    return run_step(b, STEP_PREPARE, round, NULL) ||
           timed_step(b, STEP_SAVE, round, &res->save_s, pid, &res->save_cpu_s) ||
           timed_step(b, STEP_LOAD, round, &res->load_s, pid, &res->load_cpu_s) ||
           run_step(b, STEP_VERIFY, round, NULL);
}

/* The measured part: every step in order; returns an exit status. Each round runs every
 * backend, then the ZeroMQ baseline, then memcpy over the same chunks, and lookups alternate
 * with their baseline in slices, so slow drift of the machine (page cache, frequency,
 * neighbours) hits both sides of a ratio alike. The ZeroMQ context and its temp dir are torn
 * down by zmq_baseline_stop once the rank threads have left. */
int bench_steps(bench_t *b, results_t *res)
{
    const bench_opts_t *o = &b->o;
    if (run_step(b, STEP_SETUP, 0, NULL))
        return EXIT_FAIL;
    if (check_limits(b))
        return EXIT_USAGE;
    resolve_backends(b);
    if (zmq_baseline_start(b))
        return EXIT_FAIL;
    memcpy_pass(b, 0, NULL, NULL);
    memcpy_pass(b, 1, NULL, NULL);
    for (int k = 0; k < BK_N; k++) {
        b->cur = k;
        if (b->bk_state[k] == BK_ON && run_step(b, STEP_WARMUP, 0, NULL))
            return EXIT_FAIL;
    }
    if (run_step(b, STEP_Z_WARM, 0, NULL))
        return EXIT_FAIL;
    if (bench_fill(b, &res->fill))
        return EXIT_FAIL;
    long pid = daemon_pid(b);
    for (int k = 0; k < BK_N; k++)
        res->bk[k].save_cpu_s = res->bk[k].load_cpu_s = pid > 0 ? 0 : -1;
    for (uint32_t i = 0; i < o->rounds; i++) {
        for (int k = 0; k < BK_N; k++)
            if (b->bk_state[k] == BK_ON && backend_round(b, k, i, pid, &res->bk[k]))
                return EXIT_FAIL;
        if (run_step(b, STEP_Z_SAVE, i, &res->zsave_s) ||
            run_step(b, STEP_Z_LOAD, i, &res->zload_s))
            return EXIT_FAIL;
        if (b->bk_state[BK_ZC] == BK_ON && run_step(b, STEP_Z_RTT, i, NULL))
            return EXIT_FAIL;
        memcpy_pass(b, 0, &res->memcpy_bytes, &res->memcpy_ns);
        memcpy_pass(b, 1, &res->csum_bytes, &res->csum_ns);
    }
    res->memcpy_gbps = res->memcpy_ns ? (double)res->memcpy_bytes / (double)res->memcpy_ns : 0;
    res->csum_gbps = res->csum_ns ? (double)res->csum_bytes / (double)res->csum_ns : 0;
    daemon_figures(b, &res->daemon);
    if (run_step(b, STEP_FILL_LOOKUP, 0, NULL) || run_step(b, STEP_LOOKUP_WARM, 0, NULL))
        return EXIT_FAIL;
    for (uint32_t i = 0; i < BENCH_LOOKUP_SLICES; i++) {
        b->slice = o->lookups / BENCH_LOOKUP_SLICES;
        if (i + 1 == BENCH_LOOKUP_SLICES)
            b->slice += o->lookups % BENCH_LOOKUP_SLICES;
        b->lookup_single = 0;
        if (run_step(b, STEP_LOOKUP, 0, NULL) || run_step(b, STEP_Z_LOOKUP, 0, NULL))
            return EXIT_FAIL;
        b->lookup_single = o->all_ranks; /* the same chunks, one rank: beside the all-ranks */
        if (o->all_ranks && run_step(b, STEP_LOOKUP, 0, NULL))
            return EXIT_FAIL;
        b->lookup_single = 0;
    }
    return EXIT_OK;
}
