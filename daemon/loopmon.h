/*
 * loopmon.h - how busy the loop thread is: its busy share and a histogram of loop-turn
 * durations, for status ("loop") and the benchmark.
 *
 * A loop turn is one iteration of uv_run: from the end of one poll for I/O to the start of the
 * next, i.e. every callback the iteration ran (timers, I/O, after-work callbacks, idle, check,
 * close). Its duration is measured in a uv_prepare callback (which runs just before the poll)
 * as the time since the previous prepare minus the time libuv spent idle in the poll between
 * them (uv_metrics_idle_time, enabled with UV_METRICS_IDLE_TIME). A long turn is what delays a
 * lookup that arrives during it; the bound is 2 ms while flushing.
 *
 * A turn's wall time includes any time the loop thread was runnable but not running (on a
 * loaded machine the scheduler preempts it mid-turn); the loop thread's CPU time per turn
 * (CLOCK_THREAD_CPUTIME_ID) is recorded beside it, so that the work a turn does can be told
 * from the time the machine made it wait.
 *
 * busy_share is the busy fraction of the last complete LOOPMON_WINDOW_MS window (a timer
 * samples it); busy_seconds and turns are totals since start, for rates over any interval.
 *
 * Threads: loop thread only. Ownership: loopmon owns its handles; loopmon_close() frees it in
 * their close callbacks (the loop must run afterwards).
 */
#ifndef KVT_LOOPMON_H
#define KVT_LOOPMON_H

#include <stdint.h>
#include <uv.h>

#include "hist.h"

#define LOOPMON_WINDOW_MS 1000u
#define LOOPMON_BUCKETS 10 /* status buckets of loop.turn_us, upper bounds in loopmon_bounds_us */

typedef struct loopmon loopmon_t;

/* The figures status shows. */
typedef struct {
    double busy_share;   /* busy fraction of the last window, 0..1 */
    double busy_seconds; /* loop time outside the poll, since start */
    uint64_t turns;      /* loop turns measured */
    uint64_t p50_us, p99_us, max_us;
    uint64_t buckets[LOOPMON_BUCKETS]; /* turns of at most loopmon_bounds_us[i] us (cumulative) */
    uint64_t cpu_p50_us, cpu_p99_us, cpu_max_us; /* the loop thread's CPU time per turn */
    uint64_t cpu_buckets[LOOPMON_BUCKETS];       /* turns of at most that much CPU time */
    const hist_t *turns_hist, *cpu_hist; /* the histograms themselves (borrowed, microseconds) */
} loopmon_stats_t;

/* The bucket bounds (us): 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000, and UINT64_MAX. */
extern const uint64_t loopmon_bounds_us[LOOPMON_BUCKETS];

/* Starts measuring loop (configures UV_METRICS_IDLE_TIME on it). NULL on failure. */
loopmon_t *loopmon_new(uv_loop_t *loop);

/* Stops and frees (in close callbacks); *m becomes NULL. */
void loopmon_close(loopmon_t **m);

void loopmon_stats(const loopmon_t *m, loopmon_stats_t *out);

#endif /* KVT_LOOPMON_H */
