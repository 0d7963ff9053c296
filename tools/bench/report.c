/*
 * report.c - the side-by-side mode's report: the kvtier-vs-zmq table of the primary kvtier path,
 * the GB/s of every column with the ratios against each path's own ceiling (frames/zmq,
 * shm/memcpy, shm/copy+csum, shm/redis, zc/memcpy), the daemon's CPU seconds per GB moved and
 * its loop figures, per-call and per-submit latencies, the zero-copy round trips beside raw
 * ZeroMQ ones of their size, the steady state's fill, outcome counts and warnings; or the same
 * as one JSON object (--json, whose field names scripts read: add, never rename). Also the
 * helpers the disk mode's report shares (GB/s, percentiles and warnings as JSON, printing).
 *
 * Threads: main thread, after the rank threads have left.
 */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double gbps(uint64_t bytes, double secs)
{
    return secs > 0 ? (double)bytes / secs / 1e9 : 0.0;
}

double ratio(double a, double base)
{
    return base > 0 ? a / base : 0.0;
}

/* GB/s of every column for save and load; NAN where a backend was not measured. */
typedef struct {
    double gbps[2][COL_N];
} compare_t;

/* The ratios the side-by-side table reports: each kvtier path against its own ceiling. */
static const struct {
    const char *name, *key;
    col_t num, den;
} ratios[] = {
    {"shm/memcpy", "shm_memcpy", COL_SHM, COL_MEMCPY},
    {"shm/redis", "shm_redis", COL_SHM, COL_REDIS},
    {"frames/zmq", "frames_zmq", COL_FRAMES, COL_ZMQ},
    {"shm/copy+csum", "shm_copy_csum", COL_SHM, COL_CSUM},
    {"zc/memcpy", "zc_memcpy", COL_ZC, COL_MEMCPY},
};

#define NRATIOS (sizeof ratios / sizeof ratios[0])

static void compare(const bench_t *b, const results_t *r, compare_t *c)
{
    for (int k = 0; k < BK_N; k++) {
        int on = b->bk_state[k] == BK_ON;
        c->gbps[OP_SAVE][k] = on ? gbps(r->bk[k].n.stored_bytes, r->bk[k].save_s) : NAN;
        c->gbps[OP_LOAD][k] = on ? gbps(r->bk[k].n.loaded_bytes, r->bk[k].load_s) : NAN;
    }
    c->gbps[OP_SAVE][COL_ZMQ] = gbps(r->zbytes_save, r->zsave_s);
    c->gbps[OP_LOAD][COL_ZMQ] = gbps(r->zbytes_load, r->zload_s);
    c->gbps[OP_SAVE][COL_MEMCPY] = c->gbps[OP_LOAD][COL_MEMCPY] = r->memcpy_gbps;
    c->gbps[OP_SAVE][COL_CSUM] = c->gbps[OP_LOAD][COL_CSUM] = r->csum_gbps;
}

/* The daemon's CPU seconds per GB of backend k's op; NAN when not known. */
static double cpu_per_gb(const bk_result_t *x, op_t op)
{
    double cpu = op == OP_SAVE ? x->save_cpu_s : x->load_cpu_s;
    uint64_t bytes = op == OP_SAVE ? x->n.stored_bytes : x->n.loaded_bytes;
    return cpu < 0 || bytes == 0 ? NAN : cpu / ((double)bytes / 1e9);
}

/* Ratio i of the table for op; NAN when either side was not measured or is zero. */
static double compare_ratio(const compare_t *c, op_t op, size_t i)
{
    double num = c->gbps[op][ratios[i].num], den = c->gbps[op][ratios[i].den];
    return isnan(num) || isnan(den) || den <= 0 ? NAN : num / den;
}

__attribute__((format(printf, 2, 3))) void warn_add(warnings_t *w, const char *fmt, ...)
{
    if (w->n >= WARN_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->text[w->n++], sizeof w->text[0], fmt, ap);
    va_end(ap);
}

static void make_warnings(const bench_t *b, const results_t *r, warnings_t *w)
{
    for (int k = 0; k < BK_N; k++) {
        const counts_t *n = &r->bk[k].n;
        const char *name = cols[k].name;
        if (b->bk_state[k] == BK_UNAVAIL)
            warn_add(w, "%s unavailable: %s", name, b->bk_why[k]);
        if (n->nospace)
            warn_add(w,
                     "%s: %" PRIu64 " chunk saves answered NOSPACE: leases, pins or "
                     "reservations held the RAM tier (status ram.nospace_held counts those), "
                     "else ram.capacity_bytes is too small for this run (raise it or lower "
                     "--chunks/--ranks/--chunk-bytes)",
                     name, n->nospace);
        if (n->declined)
            warn_add(w,
                     "%s: %" PRIu64 " chunk saves were DECLINED by the admission gate: disable "
                     "it for namespace %s to measure raw throughput",
                     name, n->declined, b->o.model);
        if (n->exists)
            warn_add(w, "%s: %" PRIu64 " chunk saves answered EXISTS (no bytes moved)", name,
                     n->exists);
        if (n->lost)
            warn_add(w,
                     "%s: %" PRIu64 " chunks stored in a round were evicted before they were "
                     "loaded back: the capacity is smaller than one round",
                     name, n->lost);
    }
    if (r->fill.ran && !r->fill.reached)
        warn_add(w, "steady state: %s", r->fill.why);
    if (!r->fill.ran && !b->o.cold)
        warn_add(w, "%s (the figures are of an empty tier)", r->fill.why);
    if (r->fill_other)
        warn_add(w, "%" PRIu64 " lookup-namespace chunks were not stored", r->fill_other);
    if (r->lookup_skipped)
        warn_add(w, "%" PRIu64 " lookups were skipped by the lookup-skip gate", r->lookup_skipped);
    if (r->lookup_short)
        warn_add(w, "%" PRIu64 " lookups hit fewer than the expected chunks", r->lookup_short);
}

json_t *pct_json(const pct_t *p)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f}", "calls", (json_int_t)p->n, "p50_us", p->p50, "p90_us",
                     p->p90, "p99_us", p->p99, "max_us", p->max);
}

json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

/* p as JSON, or null for an empty series. */
static json_t *pct_or_null(const pct_t *p)
{
    return p->n ? pct_json(p) : json_null();
}

/* Additions to a measured backend's save and load objects: submit latencies, the daemon's CPU
 * per GB, and for kvtier-zc its round trips beside raw ZeroMQ ones of their size. */
static void backend_extras(const results_t *r, int k, json_t *o)
{
    const bk_result_t *x = &r->bk[k];
    json_t *save = json_object_get(o, "save"), *load = json_object_get(o, "load");

    json_object_set_new(save, "submit_latency", pct_or_null(&x->submit_save));
    json_object_set_new(load, "submit_latency", pct_or_null(&x->submit_load));
    json_object_set_new(save, "daemon_cpu_s_per_gb", real_or_null(cpu_per_gb(x, OP_SAVE)));
    json_object_set_new(load, "daemon_cpu_s_per_gb", real_or_null(cpu_per_gb(x, OP_LOAD)));
    if (k != BK_ZC)
        return;
    json_object_set_new(
        o, "round_trips",
        json_pack("{s:o,s:o,s:o,s:o,s:{s:o,s:o,s:o}}", "reserve", pct_or_null(&x->reserve),
                  "commit", pct_or_null(&x->commit), "pin", pct_or_null(&x->pin), "zmq",
                  pct_or_null(&r->zrtt), "ratio_p50", "reserve",
                  real_or_null(r->zrtt.n ? ratio(x->reserve.p50, r->zrtt.p50) : NAN), "commit",
                  real_or_null(r->zrtt.n ? ratio(x->commit.p50, r->zrtt.p50) : NAN), "pin",
                  real_or_null(r->zrtt.n ? ratio(x->pin.p50, r->zrtt.p50) : NAN)));
}

/* "backends": every backend's state and, when measured, its save and load details. */
static json_t *backends_json(const bench_t *b, const results_t *r)
{
    static const char *const states[] = {
        [BK_OFF] = "off", [BK_ON] = "measured", [BK_UNAVAIL] = "unavailable"};
    json_t *all = json_object();
    for (int k = 0; all && k < BK_N; k++) {
        const bk_result_t *x = &r->bk[k];
        const counts_t *n = &x->n;
        json_t *o;
        if (b->bk_state[k] == BK_ON)
            o = json_pack("{s:s,s:{s:f,s:I,s:f,s:o,s:{s:I,s:I,s:I,s:I}},"
                          "s:{s:f,s:I,s:f,s:o,s:{s:I,s:I,s:I}}}",
                          "state", states[BK_ON], "save", "gbps", gbps(n->stored_bytes, x->save_s),
                          "bytes", (json_int_t)n->stored_bytes, "seconds", x->save_s, "latency",
                          pct_json(&x->save), "outcomes", "stored", (json_int_t)n->stored, "exists",
                          (json_int_t)n->exists, "nospace", (json_int_t)n->nospace, "declined",
                          (json_int_t)n->declined, "load", "gbps", gbps(n->loaded_bytes, x->load_s),
                          "bytes", (json_int_t)n->loaded_bytes, "seconds", x->load_s, "latency",
                          pct_json(&x->load), "chunks", "hits", (json_int_t)n->hits, "misses",
                          (json_int_t)n->misses, "evicted", (json_int_t)n->lost);
        else
            o = json_pack("{s:s,s:s}", "state", states[b->bk_state[k]], "reason", b->bk_why[k]);
        if (o && k == BK_REDIS && b->o.redis_addr[0])
            json_object_set_new(o, "server", json_string(b->o.redis_addr));
        if (o && k != BK_REDIS && b->bk_state[k] == BK_ON)
            backend_extras(r, k, o);
        if (json_object_set_new(all, cols[k].key, o)) {
            json_decref(all);
            return NULL;
        }
    }
    return all;
}

/* "compare": the side-by-side GB/s (null: not measured) and the ratios, per operation. */
static json_t *compare_json(const bench_t *b, const results_t *r)
{
    compare_t c;
    compare(b, r, &c);
    json_t *root = json_object(), *rat = json_object();
    if (!root || !rat || json_object_set_new(root, "ratios", rat)) {
        json_decref(root);
        return NULL;
    }
    for (int op = OP_SAVE; op <= OP_LOAD; op++) {
        json_t *row = json_object(), *rr = json_object();
        json_object_set_new(root, op_names[op], row);
        json_object_set_new(rat, op_names[op], rr);
        for (int k = 0; row && k < COL_N; k++)
            json_object_set_new(row, cols[k].key, real_or_null(c.gbps[op][k]));
        for (size_t i = 0; rr && i < NRATIOS; i++)
            json_object_set_new(rr, ratios[i].key, real_or_null(compare_ratio(&c, op, i)));
        if (!row || !rr) {
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

int data_path_of(bk_t bk)
{
    return bk == BK_SHM ? KVT_DATA_PATH_SHM : KVT_DATA_PATH_FRAMES;
}

json_t *warnings_json(const warnings_t *w)
{
    json_t *warns = json_array();
    for (int i = 0; warns && i < w->n; i++)
        json_array_append_new(warns, json_string(w->text[i]));
    return warns ? warns : json_array();
}

void warnings_print(const warnings_t *w)
{
    for (int i = 0; i < w->n; i++)
        tool_error("warning: %s", w->text[i]);
}

int json_print(json_t *root)
{
    char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(root);
    if (!s) {
        tool_error("cannot format the JSON report");
        return -1;
    }
    puts(s);
    free(s);
    return 0;
}

/* What 0.2's benchmark adds at the top level: parameters, the steady state, the daemon's own
 * figures, the copy+checksum baseline, the single-rank lookups beside all-ranks ones. */
static void report_extras(const bench_t *b, const results_t *r, json_t *root)
{
    const bench_opts_t *o = &b->o;
    const fill_t *f = &r->fill;
    json_t *params = json_object_get(root, "params");

    json_object_set_new(params, "depth", json_integer(o->depth));
    json_object_set_new(params, "zero_copy", json_boolean(o->zero_copy));
    json_object_set_new(params, "cold", json_boolean(o->cold));
    json_object_set_new(root, "steady",
                        json_pack("{s:b,s:b,s:s,s:I,s:I,s:f,s:I,s:I,s:b,s:I,s:I}", "filled", f->ran,
                                  "reached", f->reached, "note", f->why, "chunks",
                                  (json_int_t)f->chunks, "bytes", (json_int_t)f->bytes, "seconds",
                                  f->seconds, "ram_used_bytes", (json_int_t)f->ram_used,
                                  "ram_capacity_bytes", (json_int_t)f->ram_capacity, "disk_enabled",
                                  f->disk_enabled, "disk_used_bytes", (json_int_t)f->disk_used,
                                  "disk_capacity_bytes", (json_int_t)f->disk_capacity));
    json_object_set_new(root, "daemon",
                        json_pack("{s:I,s:o,s:o}", "pid", (json_int_t)r->daemon.pid,
                                  "loop_busy_share", real_or_null(r->daemon.busy_share),
                                  "loop_turn_p99_us", real_or_null(r->daemon.turn_p99_us)));
    json_object_set_new(root, "copy_checksum", json_pack("{s:f}", "gbps", r->csum_gbps));
    if (o->all_ranks)
        json_object_set_new(
            root, "lookup_single",
            json_pack("{s:o,s:o,s:o}", "latency", pct_json(&r->lookup_single), "ratio_all_p50",
                      real_or_null(ratio(r->lookup.p50, r->lookup_single.p50)), "ratio_all_p99",
                      real_or_null(ratio(r->lookup.p99, r->lookup_single.p99))));
}

/* The whole report as one JSON object (NULL when out of memory). */
static json_t *report_json(const bench_t *b, const results_t *r, const warnings_t *w)
{
    const bench_opts_t *o = &b->o;
    const bk_result_t *p = &r->bk[b->primary];
    double save = gbps(p->n.stored_bytes, p->save_s), load = gbps(p->n.loaded_bytes, p->load_s);
    double zsave = gbps(r->zbytes_save, r->zsave_s), zload = gbps(r->zbytes_load, r->zload_s);
    json_t *root = json_pack(
        "{s:s,s:s,s:{s:s,s:I,s:b},"
        "s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I},"
        "s:{s:f,s:f,s:f,s:I,s:f,s:o,s:{s:I,s:I,s:I,s:I}},"
        "s:{s:f,s:f,s:f,s:I,s:f,s:o,s:{s:I,s:I,s:I}},"
        "s:{s:o,s:{s:f,s:f},s:f,s:f,s:I,s:I},"
        "s:{s:f},s:o,s:o,s:o}",
        "endpoint", o->endpoint, "data_path", tool_data_path_name(data_path_of(b->primary)),
        "namespace", "model", o->model, "world", (json_int_t)o->world, "all_ranks", o->all_ranks,
        "params", "chunk_bytes", (json_int_t)o->chunk_bytes, "chunks", (json_int_t)o->chunks,
        "ranks", (json_int_t)o->ranks, "rounds", (json_int_t)o->rounds, "batch",
        (json_int_t)o->batch, "prompt_chunks", (json_int_t)o->prompt_chunks, "lookups",
        (json_int_t)o->lookups, "lookup_chunk_bytes", (json_int_t)BENCH_LOOKUP_CHUNK_BYTES, "save",
        "kvtier_gbps", save, "baseline_gbps", zsave, "ratio", ratio(save, zsave), "bytes",
        (json_int_t)p->n.stored_bytes, "seconds", p->save_s, "latency", pct_json(&p->save),
        "outcomes", "stored", (json_int_t)p->n.stored, "exists", (json_int_t)p->n.exists, "nospace",
        (json_int_t)p->n.nospace, "declined", (json_int_t)p->n.declined, "load", "kvtier_gbps",
        load, "baseline_gbps", zload, "ratio", ratio(load, zload), "bytes",
        (json_int_t)p->n.loaded_bytes, "seconds", p->load_s, "latency", pct_json(&p->load),
        "chunks", "hits", (json_int_t)p->n.hits, "misses", (json_int_t)p->n.misses, "evicted",
        (json_int_t)p->n.lost, "lookup", "latency", pct_json(&r->lookup), "baseline", "p50_us",
        r->zlookup.p50, "p99_us", r->zlookup.p99, "ratio_p50", ratio(r->lookup.p50, r->zlookup.p50),
        "ratio_p99", ratio(r->lookup.p99, r->zlookup.p99), "short_hits",
        (json_int_t)r->lookup_short, "skipped", (json_int_t)r->lookup_skipped, "memcpy", "gbps",
        r->memcpy_gbps, "backends", backends_json(b, r), "compare", compare_json(b, r), "warnings",
        warnings_json(w));
    if (root != NULL)
        report_extras(b, r, root);
    return root;
}

/* Prints a heading row of n columns, then a save and a load row; NAN prints as blank[k]. */
static void print_grid(const char *corner, const char *const *heads, double v[2][COL_N],
                       const char *const *blank, size_t n)
{
    printf("%-8s", corner);
    for (size_t k = 0; k < n; k++)
        printf(" %14s", heads[k]);
    printf("\n");
    for (int op = OP_SAVE; op <= OP_LOAD; op++) {
        printf("%-8s", op_names[op]);
        for (size_t k = 0; k < n; k++) {
            if (isnan(v[op][k]))
                printf(" %14s", blank[k]);
            else
                printf(" %14.3f", v[op][k]);
        }
        printf("\n");
    }
}

/* The side-by-side table: GB/s of every column for save and load, then the ratios. */
static void print_compare(const bench_t *b, const results_t *r)
{
    compare_t c;
    compare(b, r, &c);
    const char *heads[COL_N], *blank[COL_N];
    double rv[2][COL_N];
    for (int k = 0; k < COL_N; k++) {
        heads[k] = cols[k].name;
        blank[k] = k < BK_N && b->bk_state[k] == BK_UNAVAIL ? "unavailable" : "-";
    }
    print_grid("GB/s", heads, c.gbps, blank, COL_N);
    for (size_t i = 0; i < NRATIOS; i++) {
        heads[i] = ratios[i].name;
        blank[i] = "-";
        rv[OP_SAVE][i] = compare_ratio(&c, OP_SAVE, i);
        rv[OP_LOAD][i] = compare_ratio(&c, OP_LOAD, i);
    }
    print_grid("ratio", heads, rv, blank, NRATIOS);
    /* the daemon's CPU per GB of each kvtier backend (the loop's own figures follow) */
    size_t nk = 0;
    for (int k = 0; k < BK_N; k++) {
        if (k == BK_REDIS)
            continue;
        heads[nk] = cols[k].name;
        blank[nk] = "-";
        rv[OP_SAVE][nk] = b->bk_state[k] == BK_ON ? cpu_per_gb(&r->bk[k], OP_SAVE) : NAN;
        rv[OP_LOAD][nk] = b->bk_state[k] == BK_ON ? cpu_per_gb(&r->bk[k], OP_LOAD) : NAN;
        nk++;
    }
    print_grid("cpu s/GB", heads, rv, blank, nk);
    char busy[32] = "-", turn[32] = "-";
    if (!isnan(r->daemon.busy_share))
        snprintf(busy, sizeof busy, "%.3f", r->daemon.busy_share);
    if (!isnan(r->daemon.turn_p99_us))
        snprintf(turn, sizeof turn, "%.0f us", r->daemon.turn_p99_us);
    printf("daemon (pid %ld): CPU seconds per GB moved (utime+stime, /proc); loop busy share %s, "
           "loop turn p99 %s (status loop.*)\n",
           r->daemon.pid, busy, turn);
    for (int k = 0; k < BK_N; k++)
        if (b->bk_state[k] != BK_ON)
            printf("%s: %s\n", cols[k].name, b->bk_why[k]);
    if (b->o.redis_addr[0])
        printf("redis: %s through hiredis, SET/GET pipelined per call\n", b->o.redis_addr);
}

static void print_table(const bench_t *b, const results_t *r)
{
    const bench_opts_t *o = &b->o;
    const bk_result_t *p = &r->bk[b->primary];
    double save = gbps(p->n.stored_bytes, p->save_s), load = gbps(p->n.loaded_bytes, p->load_s);
    double zsave = gbps(r->zbytes_save, r->zsave_s), zload = gbps(r->zbytes_load, r->zload_s);
    printf("kvtier-bench: %s  namespace %s  world %u  data path %s%s\n", o->endpoint, o->model,
           o->world, tool_data_path_name(data_path_of(b->primary)),
           o->all_ranks ? "  lookups all-ranks" : "");
    printf("  %u rank(s) x %u chunks x %.2f MiB per round, %u round(s), %u chunk(s) per call, %s; "
           "%u lookups x %u chunks of 4 KiB\n",
           o->ranks, o->chunks, (double)o->chunk_bytes / (1 << 20), o->rounds, o->batch,
           o->depth ? "asynchronous" : "synchronous calls", o->lookups, o->prompt_chunks);
    if (o->depth)
        printf("  %u request(s) in flight per rank\n", o->depth);
    if (r->fill.ran) {
        printf("  steady state: %" PRIu64 " chunks (%.0f MiB) saved first in %.1f s%s; RAM %.0f of "
               "%.0f MiB used",
               r->fill.chunks, (double)r->fill.bytes / (1 << 20), r->fill.seconds,
               r->fill.reached ? "" : " (capacity not reached)",
               (double)r->fill.ram_used / (1 << 20), (double)r->fill.ram_capacity / (1 << 20));
        if (r->fill.disk_enabled)
            printf(", disk %.0f of %.0f MiB", (double)r->fill.disk_used / (1 << 20),
                   (double)r->fill.disk_capacity / (1 << 20));
        printf("\n");
    } else
        printf("  %s\n", r->fill.why);
    printf("\n");
    char k[4][32], z[4][32];
    snprintf(k[0], sizeof k[0], "%.3f GB/s", save);
    snprintf(z[0], sizeof z[0], "%.3f GB/s", zsave);
    snprintf(k[1], sizeof k[1], "%.3f GB/s", load);
    snprintf(z[1], sizeof z[1], "%.3f GB/s", zload);
    snprintf(k[2], sizeof k[2], "p50 %.1f us", r->lookup.p50);
    snprintf(z[2], sizeof z[2], "p50 %.1f us", r->zlookup.p50);
    snprintf(k[3], sizeof k[3], "p99 %.1f us", r->lookup.p99);
    snprintf(z[3], sizeof z[3], "p99 %.1f us", r->zlookup.p99);
    const char *ops[4] = {"save", "load", "lookup", ""};
    double ratios4[4] = {ratio(save, zsave), ratio(load, zload),
                         ratio(r->lookup.p50, r->zlookup.p50),
                         ratio(r->lookup.p99, r->zlookup.p99)};
    printf("%-8s %-18s %-18s %s\n", "op", "kvtier", "baseline (zmq)", "ratio kvtier/baseline");
    for (int i = 0; i < 4; i++)
        printf("%-8s %-18s %-18s %.3f\n", ops[i], k[i], z[i], ratios4[i]);
    printf("%-8s %-18s %.3f GB/s (one thread, same chunks)\n", "memcpy", "-", r->memcpy_gbps);
    printf("%-8s %-18s %.3f GB/s (kvt_copy_checksum: the copy of a verifying load)\n\n",
           "copy+csum", "-", r->csum_gbps);
    print_compare(b, r);
    printf("\n%-26s %8s %10s %10s %10s %10s\n", "latency per call (us)", "calls", "p50", "p90",
           "p99", "max");
    for (int i = 0; i < BK_N; i++) {
        if (b->bk_state[i] != BK_ON)
            continue;
        for (int op = OP_SAVE; op <= OP_LOAD; op++) {
            const pct_t *q = op == OP_SAVE ? &r->bk[i].save : &r->bk[i].load;
            char name[32];
            snprintf(name, sizeof name, "%s %s", cols[i].name, op_names[op]);
            printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f\n", name, q->n, q->p50, q->p90, q->p99,
                   q->max);
        }
    }
    for (int i = 0; i < BK_N; i++) {
        const bk_result_t *x = &r->bk[i];
        const pct_t *q[5] = {&x->submit_save, &x->submit_load, &x->reserve, &x->commit, &x->pin};
        const char *what[5] = {"submit save", "submit load", "reserve", "commit", "pin"};
        if (b->bk_state[i] != BK_ON)
            continue;
        for (int j = 0; j < 5; j++) {
            char name[40];
            if (q[j]->n == 0)
                continue;
            snprintf(name, sizeof name, "%s %s", cols[i].name, what[j]);
            printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f\n", name, q[j]->n, q[j]->p50, q[j]->p90,
                   q[j]->p99, q[j]->max);
        }
    }
    if (r->zrtt.n)
        printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f\n", "zmq round trip (zc size)", r->zrtt.n,
               r->zrtt.p50, r->zrtt.p90, r->zrtt.p99, r->zrtt.max);
    printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f\n", "kvtier lookup", r->lookup.n, r->lookup.p50,
           r->lookup.p90, r->lookup.p99, r->lookup.max);
    if (o->all_ranks)
        printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f  (all-ranks / single p50 %.3f)\n",
               "kvtier lookup single rank", r->lookup_single.n, r->lookup_single.p50,
               r->lookup_single.p90, r->lookup_single.p99, r->lookup_single.max,
               ratio(r->lookup.p50, r->lookup_single.p50));
    if (b->bk_state[BK_ZC] == BK_ON && r->zrtt.n)
        printf("kvtier-zc round trips / zmq round trip of their size (p50): reserve %.3f, commit "
               "%.3f, pin %.3f\n",
               ratio(r->bk[BK_ZC].reserve.p50, r->zrtt.p50),
               ratio(r->bk[BK_ZC].commit.p50, r->zrtt.p50),
               ratio(r->bk[BK_ZC].pin.p50, r->zrtt.p50));
    printf("\n");
    for (int i = 0; i < BK_N; i++) {
        const counts_t *n = &r->bk[i].n;
        if (b->bk_state[i] == BK_ON)
            printf("%s: save %" PRIu64 " stored, %" PRIu64 " exists, %" PRIu64 " nospace, %" PRIu64
                   " declined; load %" PRIu64 " hits verified byte-exact, %" PRIu64 " misses\n",
                   cols[i].name, n->stored, n->exists, n->nospace, n->declined, n->hits, n->misses);
    }
}

int bench_report(const bench_t *b, results_t *res)
{
    if (collect(b, res) != 0) {
        tool_error("out of memory");
        return EXIT_FAIL;
    }
    warnings_t w = {0};
    make_warnings(b, res, &w);
    warnings_print(&w);
    if (!b->o.json) {
        print_table(b, res);
        return EXIT_OK;
    }
    return json_print(report_json(b, res, &w)) ? EXIT_FAIL : EXIT_OK;
}
