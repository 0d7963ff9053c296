/*
 * steady.c - the steady state of kvtier-bench (the default; --cold skips it) and the daemon's
 * own figures.
 *
 * A production tier is always full: every save evicts, and with the disk tier on every eviction
 * demotes. So before the measured rounds the main thread fills the tier: chunks of a namespace
 * of the bench's own (dtype "bench-fill", so no measured chunk is ever one of them), in chains of
 * FILL_CHAIN, 8 saves in flight through the asynchronous calls on the primary data path, until
 * status shows the RAM tier evicting (ram.evictions moved) and, when the disk tier is enabled,
 * the disk tier reclaiming (disk.reclaimed_segments moved: it is full). Once RAM is full the
 * fill waits for the write buffer to drain every quarter of the RAM capacity, so that demotions
 * flow at the disk's speed rather than being refused. It gives up (and the report says so)
 * after FILL_MAX_MS or 2 x (RAM + disk capacity) of chunks, and drains the write buffer before
 * the measured rounds start.
 *
 * The daemon's figures: its pid comes from status (`pid`), its CPU time from /proc/<pid>/stat
 * (utime + stime, every thread, in clock ticks: 10 ms resolution, summed over the steps), the
 * loop thread's busy share and loop-turn p99 from status `loop.busy_share` and
 * `loop.turn_us.p99_us` when the daemon has them (NAN otherwise: the report prints "-").
 *
 * Threads: main thread only, with the rank threads parked.
 */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILL_CHAIN 8
#define FILL_DEPTH 8
#define FILL_MAX_MS 300000
#define FILL_POLL_MS 5
#define STATUS_TIMEOUT_MS 5000

static json_t *status_doc(const bench_t *b)
{
    json_t *root = NULL;

    if (!b->o.status_sock[0] || tool_status_get(b->o.status_sock, STATUS_TIMEOUT_MS, &root, NULL))
        return NULL;
    return root;
}

static uint64_t jint(const json_t *root, const char *path)
{
    const json_t *v = tool_json_path(root, path);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

long daemon_pid(const bench_t *b)
{
    json_t *root = status_doc(b);
    long pid = root != NULL ? (long)jint(root, "pid") : 0;

    json_decref(root);
    return pid;
}

double daemon_cpu_s(long pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    long tick = sysconf(_SC_CLK_TCK);
    FILE *f;
    char *p;
    size_t n;

    if (pid <= 0 || tick <= 0)
        return -1;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the command name "(...)": state is field 3, utime 14, stime 15 */
    p = strrchr(buf, ')');
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)tick;
}

void daemon_figures(const bench_t *b, daemon_figs_t *out)
{
    json_t *root = status_doc(b);
    const json_t *busy = root ? tool_json_path(root, "loop.busy_share") : NULL;
    const json_t *p99 = root ? tool_json_path(root, "loop.turn_us.p99_us") : NULL;

    out->pid = root != NULL ? (long)jint(root, "pid") : 0;
    out->busy_share = json_is_number(busy) ? json_number_value(busy) : NAN;
    out->turn_p99_us = json_is_number(p99) ? json_number_value(p99) : NAN;
    json_decref(root);
}

typedef struct {
    uint64_t ram_used, ram_cap, evictions, disk_used, disk_cap, reclaimed, wbuf;
    int disk;
} tier_t;

static int tier_read(const bench_t *b, tier_t *t)
{
    json_t *root = status_doc(b);

    if (root == NULL)
        return -1;
    t->ram_used = jint(root, "ram.used_bytes");
    t->ram_cap = jint(root, "ram.capacity_bytes");
    t->evictions = jint(root, "ram.evictions");
    t->disk = json_is_true(tool_json_path(root, "disk.enabled"));
    t->disk_used = jint(root, "disk.used_bytes");
    t->disk_cap = jint(root, "disk.capacity_bytes");
    t->reclaimed = jint(root, "disk.reclaimed_segments");
    t->wbuf = jint(root, "disk.write_buffer_chunks");
    json_decref(root);
    return 0;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded) until the daemon's write buffer is empty. */
static int drain(const bench_t *b, uint64_t until_ns)
{
    tier_t t;

    for (;;) {
        if (tier_read(b, &t))
            return -1;
        if (!t.disk || t.wbuf == 0 || now_ns() > until_ns)
            return 0;
        pause_ms(FILL_POLL_MS);
    }
}

/* Takes one completion of the fill client (waiting for it). */
static int fill_reap(kvt_client_t *c, uint64_t *chunks, uint64_t *bytes, size_t len)
{
    kvt_completion_t *comp;

    while (kvt_next_completion(c, &comp) == 0)
        if (kvt_poll(c, BENCH_TIMEOUT_MS * 2) <= 0) {
            tool_error("fill: no completion within %d ms", BENCH_TIMEOUT_MS * 2);
            return -1;
        }
    if (comp->status != 0) {
        tool_error("fill: save: %s %s", kvt_strerror(comp->status), comp->error);
        kvt_completion_free(c, comp);
        return -1;
    }
    for (size_t i = 0; i < comp->n; i++)
        if (comp->outcomes[i] == KVT_SAVE_STORED) {
            (*chunks)++;
            *bytes += len;
        }
    kvt_completion_free(c, comp);
    return 0;
}

int bench_fill(bench_t *b, fill_t *out)
{
    const bench_opts_t *o = &b->o;
    kvt_ns_desc_t ns = b->bulk_ns;
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = data_path_of(b->primary)};
    kvt_client_t *c = NULL;
    uint64_t t0 = now_ns(), deadline = t0 + FILL_MAX_MS * 1000000ull, next_drain = 0, cap;
    size_t len = o->chunk_bytes, inflight = 0;
    kvt_hash_t chain[FILL_CHAIN];
    uint8_t *buf;
    tier_t t0s, t;
    int rc = -1, ram_full = 0, disk_full = 0;

    memset(out, 0, sizeof *out);
    if (o->cold) {
        snprintf(out->why, sizeof out->why, "--cold: the tier was not filled first");
        return 0;
    }
    if (tier_read(b, &t0s)) {
        snprintf(out->why, sizeof out->why,
                 "no status socket (--status or -c CONFIG): the tier was not filled first");
        return 0;
    }
    out->ran = 1;
    out->disk_enabled = t0s.disk;
    cap = 2 * (t0s.ram_cap + (t0s.disk ? t0s.disk_cap : 0)) + len;
    ns.dtype = "bench-fill";
    buf = malloc(len);
    if (buf == NULL) {
        tool_error("out of memory");
        return -1;
    }
    if (o->data == DATA_BF16)
        fill_bf16(buf, len, 0xf111);
    else
        fill_random(buf, len, b->seed ^ 0xf111);
    rc = kvt_connect(o->endpoint, &ns, 0, &co, &c);
    if (rc) {
        tool_error("fill: connect %s: %s", o->endpoint, kvt_strerror(rc));
        rc = -1;
        goto out;
    }
    rc = -1;
    t = t0s;
    for (uint64_t set = 0; out->bytes < cap && now_ns() < deadline; set++) {
        if (make_hashes(b->seed, (3ull << 32) + set, chain, FILL_CHAIN))
            goto out;
        for (size_t i = 0; i < FILL_CHAIN; i++) {
            kvt_save_opts_t so = {.parent = i ? &chain[i - 1] : NULL};
            const void *src = buf;
            while (inflight >= FILL_DEPTH) {
                if (fill_reap(c, &out->chunks, &out->bytes, len))
                    goto out;
                inflight--;
            }
            if (kvt_submit_save(c, &chain[i], 1, &src, &len, &so, NULL, NULL) != 0) {
                tool_error("fill: submit failed");
                goto out;
            }
            inflight++;
        }
        if (tier_read(b, &t)) /* once per chain */
            goto out;
        ram_full = t.evictions > t0s.evictions || t.ram_used + len > t.ram_cap;
        disk_full = !t.disk || t.reclaimed > t0s.reclaimed || t.disk_used + len > t.disk_cap;
        if (ram_full && disk_full)
            break;
        if (ram_full && t.disk && out->bytes >= next_drain) { /* let demotions reach the disk */
            next_drain = out->bytes + t.ram_cap / 4;
            if (drain(b, deadline))
                goto out;
        }
    }
    while (inflight > 0) {
        if (fill_reap(c, &out->chunks, &out->bytes, len))
            goto out;
        inflight--;
    }
    if (drain(b, deadline) || tier_read(b, &t))
        goto out;
    out->reached = ram_full && disk_full;
    out->seconds = (double)(now_ns() - t0) / 1e9;
    out->ram_used = t.ram_used;
    out->ram_capacity = t.ram_cap;
    out->disk_used = t.disk_used;
    out->disk_capacity = t.disk_cap;
    if (!out->reached)
        snprintf(out->why, sizeof out->why,
                 "the fill stopped before the tier was full (%.0f s, %" PRIu64 " MiB saved)",
                 out->seconds, out->bytes >> 20);
    rc = 0;
out:
    kvt_close(&c);
    free(buf);
    return rc;
}
