/*
 * loopmon.c - the loop thread's busy share and turn durations (see loopmon.h).
 *
 * Design: a uv_prepare handle timestamps each turn just before the poll; the busy part of the
 * turn that ended is (now - previous prepare) - (idle time accumulated in between). The first
 * prepare only sets the baseline. The prepare handle is unref'd so that measuring never keeps the
 * loop alive; the window timer is unref'd too. Percentiles come from a hist.h histogram (1/16
 * relative error); the status buckets are counted exactly as turns are recorded.
 * Threads: loop thread only.
 */
#include "loopmon.h"

#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

const uint64_t loopmon_bounds_us[LOOPMON_BUCKETS] = {50,   100,  200,   500,   1000,
                                                     2000, 5000, 10000, 50000, UINT64_MAX};

struct loopmon {
    uv_loop_t *loop;
    uv_prepare_t prepare;
    uv_timer_t window;
    int open_handles;
    bool started;
    uint64_t last_ns, last_idle_ns, last_cpu_ns; /* at the previous prepare */
    uint64_t win_start_ns, win_start_idle_ns;    /* at the start of the window */
    uint64_t busy_ns;                            /* since start */
    double busy_share;
    hist_t turns;
    hist_t cpu; /* CPU time per turn */
    uint64_t buckets[LOOPMON_BUCKETS];
    uint64_t cpu_buckets[LOOPMON_BUCKETS];
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void prepare_cb(uv_prepare_t *h)
{
    loopmon_t *m = h->data;
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(m->loop), cpu = thread_cpu_ns(), busy;

    if (m->started) {
        uint64_t span = now - m->last_ns, slept = idle - m->last_idle_ns;
        busy = span > slept ? span - slept : 0;
        m->busy_ns += busy;
        hist_record(&m->turns, busy / 1000);
        hist_record(&m->cpu, (cpu - m->last_cpu_ns) / 1000);
        for (int i = 0; i < LOOPMON_BUCKETS; i++) {
            m->buckets[i] += busy / 1000 <= loopmon_bounds_us[i];
            m->cpu_buckets[i] += (cpu - m->last_cpu_ns) / 1000 <= loopmon_bounds_us[i];
        }
    }
    m->started = true;
    m->last_ns = now;
    m->last_idle_ns = idle;
    m->last_cpu_ns = cpu;
}

static void window_cb(uv_timer_t *t)
{
    loopmon_t *m = t->data;
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(m->loop);
    uint64_t span = now - m->win_start_ns, slept = idle - m->win_start_idle_ns;

    m->busy_share = span > 0 && span > slept ? (double)(span - slept) / (double)span : 0.0;
    m->win_start_ns = now;
    m->win_start_idle_ns = idle;
}

loopmon_t *loopmon_new(uv_loop_t *loop)
{
    loopmon_t *m = calloc(1, sizeof *m);

    if (m == NULL)
        return NULL;
    m->loop = loop;
    uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
    uv_prepare_init(loop, &m->prepare);
    uv_timer_init(loop, &m->window);
    m->prepare.data = m->window.data = m;
    m->open_handles = 2;
    m->win_start_ns = uv_hrtime();
    m->win_start_idle_ns = uv_metrics_idle_time(loop);
    uv_prepare_start(&m->prepare, prepare_cb);
    uv_timer_start(&m->window, window_cb, LOOPMON_WINDOW_MS, LOOPMON_WINDOW_MS);
    uv_unref((uv_handle_t *)&m->prepare);
    uv_unref((uv_handle_t *)&m->window);
    return m;
}

static void closed_cb(uv_handle_t *h)
{
    loopmon_t *m = h->data;

    if (--m->open_handles == 0)
        free(m);
}

void loopmon_close(loopmon_t **pm)
{
    loopmon_t *m = *pm;

    if (m == NULL)
        return;
    uv_close((uv_handle_t *)&m->prepare, closed_cb);
    uv_close((uv_handle_t *)&m->window, closed_cb);
    *pm = NULL;
}

void loopmon_stats(const loopmon_t *m, loopmon_stats_t *out)
{
    *out = (loopmon_stats_t){.busy_share = m->busy_share,
                             .busy_seconds = (double)m->busy_ns / 1e9,
                             .turns = hist_count(&m->turns),
                             .p50_us = hist_percentile(&m->turns, 50.0),
                             .p99_us = hist_percentile(&m->turns, 99.0),
                             .max_us = hist_max(&m->turns),
                             .cpu_p50_us = hist_percentile(&m->cpu, 50.0),
                             .cpu_p99_us = hist_percentile(&m->cpu, 99.0),
                             .cpu_max_us = hist_max(&m->cpu),
                             .turns_hist = &m->turns,
                             .cpu_hist = &m->cpu};
    for (int i = 0; i < LOOPMON_BUCKETS; i++) {
        out->buckets[i] = m->buckets[i];
        out->cpu_buckets[i] = m->cpu_buckets[i];
    }
}
