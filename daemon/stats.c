/*
 * stats.c - GET /status and GET /metrics from one table of fields (see stats.h).
 *
 * Design. A request takes one snapshot (stats_doc_t) of every figure through server_view() and
 * the engines' getters: store_ram_stats, store_disk_stats, sessions_info, gates_state, the
 * server's counters. The documents are then pure functions of the snapshot, driven by the
 * tables below: a row names a JSON key and the place of its value (an offset into the struct
 * being rendered), its type, counter or gauge, unit and help; objects nest rows, arrays and maps
 * take their elements from a small accessor and render each with an element row.
 *
 * JSON walks the data: the jansson tree is built in table order (the document's key order).
 *
 * Prometheus walks the schema: for every numeric row, in table order, it visits every instance
 * of that row (every element of the collections around it) and prints one family, HELP and
 * TYPE first, then its samples, so the lines of a family are contiguous as the text format
 * requires. A row's family name is derived from its JSON path unless the row names one:
 * "kvtier_" + the path's keys joined by '_' (a collection or object may give a shorter part,
 * metric_prefix: "namespace", "op"), with the unit made a base unit (a row in milliseconds or
 * microseconds is exported in seconds, its "_ms"/"_us" suffix becoming "_seconds"; "_s" becomes
 * "_seconds"; a bytes row ends in "_bytes", "bytes_written" becoming "written_bytes") and
 * "_total" after a counter. So `disk.recovery.ms` is kvtier_disk_recovery_seconds and
 * `ram.hits` kvtier_ram_hits_total: a new status row is a new family with no further code.
 * Elements add their labels (op="...", ns="...",revision="...",id="..."; reason="..."), rows
 * their fixed labels (class="..."), label values escaped (\\, \", \n). Special rows:
 *   - T_HIST: a latency histogram (hist.h) as _bucket/_sum/_count in seconds, boundaries at
 *     the powers of two from 16 us to 2^25 us (33.6 s), where hist.c's buckets are exact (a
 *     bucket le=L counts the requests whose service time, in whole microseconds, is below L);
 *     it carries the JSON rows count, p50_us and p99_us of its element (no_metric), so
 *     percentiles are computed by the scraper (histogram_quantile) instead of exported as
 *     quantile gauges;
 *   - T_TIMING: a sum and a count of microseconds as a summary without quantiles (the mean
 *     lookup time of a namespace);
 *   - a WORD row with a family: a state set (one sample per word, 1 for the current one);
 *   - a string row with a family: an info metric (value 1, the string as a label).
 * Collections can be exported whole (sessions: aggregate, one sample per parent, the sum of the
 * elements or, with agg_max, the largest) instead of per element; namespaces are capped: the
 * STATS_METRICS_NS_MAX namespaces with the most stored bytes (ties: the lower id) are exported,
 * the others only counted (server.namespaces_declared / namespaces_exported), so a daemon
 * with many namespaces keeps a bounded number of series.
 *
 * This module sits above every engine it reads (server, store, sessions, namespaces) and below
 * main.c only; it changes nothing it reads. The status words of enumerations (disk state,
 * session data path) are here, beside the keys; the compression words are codec.h's (the same
 * list parses the configuration).
 *
 * Behaviour kept from the documents as they were: a namespace whose model name is not valid
 * UTF-8 is left out of "namespaces" (jansson refuses the string), and out of the metrics too;
 * a reason name that is not is left out of "reasons" and of the metrics.
 *
 * Threads: loop thread only.
 */
#include "stats.h"

#include "array.h"
#include "codec.h"
#include "gates.h"
#include "hist.h"
#include "log.h"
#include "loopmon.h"
#include "ns.h"
#include "session.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATS_SESSIONS_MAX 256  /* sessions listed in status, most recently active first */
#define STATS_TOP_SESSIONS 8    /* the largest consumers, listed apart */
#define STATS_NS_PAGE 64        /* namespaces per status document (?namespaces=OFFSET pages) */
#define STATS_METRICS_NS_MAX 32 /* namespaces exported in /metrics (the largest by bytes) */
#define STATS_LABELS_MAX 1024   /* bytes of the labels of one metric line */
#define STATS_NAME_MAX 160      /* bytes of a family name */
#define STATS_HIST_LO_EXP 4     /* histogram boundaries: 2^4 us ... */
#define STATS_HIST_HI_EXP 25    /* ... 2^25 us */

/* --- the snapshot --- */

typedef struct {
    const char *name;
    uint64_t count, p50_us, p99_us, max_us;
    const hist_t *hist; /* the server's histogram (borrowed for the rendering) */
} stats_op_t;

typedef struct {
    ns_t ns;
    gates_cfg_t cfg;
    gates_state_t gates;
    double mean_lookup_us;
    server_timing_t lookup;
    server_drops_t drops;
} stats_ns_t;

typedef struct {
    const char *path;
    int log_level; /* log_level_t */
    server_config_state_t st;
} stats_config_t;

/* One bucket of loop.turn_us in JSON: its key (the bound in microseconds) and count. */
typedef struct {
    const char *key;
    uint64_t count;
} stats_bucket_t;
/* The configured bounds of contract C3 (session.h), as status shows them. */
typedef struct {
    uint32_t max_clients, max_in_flight, session_max_namespaces, max_namespaces;
    uint64_t session_reply_bytes, max_reply_bytes, session_held_bytes, max_held_bytes;
    uint32_t session_max_reads, max_reads_queued;
} stats_limits_t;

/* Which namespaces a status document lists (slot order). */
typedef struct {
    uint32_t total;  /* namespaces that exist */
    uint32_t offset; /* of the first one listed */
    uint32_t shown;
    uint32_t next; /* the offset of the next page, 0 when this is the last */
} stats_page_t;

typedef struct {
    const char *version;
    double uptime_s;
    int64_t pid;
    const char *endpoint;
    store_ram_stats_t ram;
    uint64_t reserved_bytes, pinned_bytes; /* the sessions' holds */
    store_disk_stats_t disk;
    uint32_t clients;
    uint32_t save_ops_remembered;
    bool draining;
    uint32_t namespaces_declared, namespaces_exported;
    server_counters_t server; /* a copy; its op_latency pointer is not followed */
    stats_config_t config;
    session_usage_t usage; /* every session's holds and charges */
    uint64_t held_bytes;
    sessions_counters_t scount;
    stats_limits_t limits;
    uint64_t namespaces_removed;
    session_info_t *sessions; /* every session, most recently active first */
    size_t nsessions, nsessions_listed;
    session_info_t *top; /* the largest consumers */
    size_t ntop;
    stats_op_t *ops;
    size_t nops;
    stats_ns_t *namespaces;
    size_t nnamespaces;
    stats_ns_t *ns_metrics; /* the exported namespaces, most bytes first */
    size_t nns_metrics;
    loopmon_stats_t loop;
    stats_bucket_t turn_buckets[LOOPMON_BUCKETS];
    size_t nturn_buckets;
    stats_bucket_t cpu_buckets[LOOPMON_BUCKETS];
    size_t ncpu_buckets;
    double disk_write_seconds, disk_read_seconds, disk_flush_running_seconds;
    double disk_seal_seconds;
    stats_page_t page;
    struct {
        uint64_t rss_anon, rss_shmem, peak_rss; /* bytes, from /proc/self/status (0: unknown) */
    } mem;
} stats_doc_t;

static const char *const bucket_keys[LOOPMON_BUCKETS] = {"50",   "100",  "200",   "500",   "1000",
                                                         "2000", "5000", "10000", "50000", "+Inf"};

static void doc_free(stats_doc_t *d)
{
    if (d == NULL)
        return;
    free(d->sessions);
    free(d->top);
    free(d->ops);
    free(d->namespaces);
    free(d->ns_metrics);
    free(d);
}

/* Labels and JSON strings must be UTF-8: jansson's check decides for both documents. */
static bool utf8(const char *s)
{
    json_t *j = json_string(s);

    json_decref(j);
    return j != NULL;
}

static int ns_by_bytes(const void *a, const void *b)
{
    const stats_ns_t *x = a, *y = b;

    if (x->ns.bytes != y->ns.bytes)
        return x->ns.bytes > y->ns.bytes ? -1 : 1;
    return x->ns.id < y->ns.id ? -1 : x->ns.id > y->ns.id;
}

/* The daemon's own memory, measured (0.2.7): RssAnon (its heap: the index, the ghost tables, the
 * sessions, ZeroMQ's queues), RssShmem (the arena pages it has touched) and VmHWM (the peak
 * resident set), from /proc/self/status; 0 where the kernel gives none. */
static void mem_read(stats_doc_t *d)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[128];

    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
            d->mem.rss_anon = kb * 1024;
        else if (sscanf(line, "RssShmem: %llu kB", &kb) == 1)
            d->mem.rss_shmem = kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            d->mem.peak_rss = kb * 1024;
    }
    fclose(f);
}

/* A snapshot; "namespaces" lists at most max of them from offset on (slot order). */
static stats_doc_t *doc_take(const server_t *sv, uint32_t offset, uint32_t max)
{
    stats_doc_t *d = calloc(1, sizeof *d);
    const session_limits_t *lim;
    server_view_t v;
    uint32_t nns, nsess, seen = 0;

    if (d == NULL)
        return NULL;
    server_view(sv, &v);
    nns = ns_count(v.namespaces);
    nsess = sessions_count(v.sessions);
    d->sessions = calloc(nsess > 0 ? nsess : 1, sizeof *d->sessions);
    d->ops = calloc(server_op_count(), sizeof *d->ops);
    d->top = calloc(STATS_TOP_SESSIONS, sizeof *d->top);
    d->namespaces =
        calloc(max < nns ? (max > 0 ? max : 1) : (nns > 0 ? nns : 1), sizeof *d->namespaces);
    d->ns_metrics = calloc(nns > 0 ? nns : 1, sizeof *d->ns_metrics);
    if (d->sessions == NULL || d->top == NULL || d->ops == NULL || d->namespaces == NULL ||
        d->ns_metrics == NULL) {
        doc_free(d);
        return NULL;
    }
    d->version = KVT_VERSION_STRING;
    d->uptime_s = (double)(v.now_ms - v.start_ms) / 1000.0;
    d->pid = getpid();
    mem_read(d);
    d->endpoint = v.cfg->server.endpoint;
    store_ram_stats(v.store, v.now_ms, &d->ram);
    d->reserved_bytes = sessions_reserved_bytes(v.sessions);
    d->pinned_bytes = sessions_pinned_bytes(v.sessions);
    store_disk_stats(v.store, &d->disk);
    d->disk_write_seconds = (double)d->disk.tier.flush_ns / 1e9;
    d->disk_read_seconds = (double)d->disk.tier.read_ns / 1e9;
    d->disk_flush_running_seconds = (double)d->disk.tier.flush_running_ms / 1e3;
    d->disk_seal_seconds = (double)d->disk.tier.seal_ns / 1e9;
    if (v.loop != NULL) {
        loopmon_stats(v.loop, &d->loop);
    } else {
        static const hist_t none; /* no monitor: empty histograms */
        d->loop.turns_hist = d->loop.cpu_hist = &none;
    }
    d->nturn_buckets = LOOPMON_BUCKETS;
    d->ncpu_buckets = LOOPMON_BUCKETS;
    for (size_t i = 0; i < LOOPMON_BUCKETS; i++) {
        d->turn_buckets[i] = (stats_bucket_t){.key = bucket_keys[i], .count = d->loop.buckets[i]};
        d->cpu_buckets[i] =
            (stats_bucket_t){.key = bucket_keys[i], .count = d->loop.cpu_buckets[i]};
    }
    d->clients = nsess;
    d->save_ops_remembered = admission_remembered(v.admission);
    d->draining = v.draining;
    d->server = *v.counters;
    d->config = (stats_config_t){
        .path = v.config->path, .log_level = (int)v.cfg->log.level, .st = *v.config};
    d->nsessions = sessions_info(v.sessions, v.now_ms, d->sessions, nsess);
    d->nsessions_listed = d->nsessions < STATS_SESSIONS_MAX ? d->nsessions : STATS_SESSIONS_MAX;
    d->ntop = sessions_top(v.sessions, v.now_ms, d->top, STATS_TOP_SESSIONS);
    sessions_usage(v.sessions, v.now_ms, &d->usage);
    d->held_bytes = session_usage_held(&d->usage);
    d->scount = *sessions_counters(v.sessions);
    lim = sessions_limits(v.sessions);
    d->limits = (stats_limits_t){.max_clients = lim->max_sessions,
                                 .max_in_flight = lim->in_flight,
                                 .session_max_namespaces = lim->namespaces,
                                 .max_namespaces = ns_max(v.namespaces),
                                 .session_reply_bytes = lim->reply_bytes,
                                 .max_reply_bytes = lim->max_reply_bytes,
                                 .session_held_bytes = lim->held_bytes,
                                 .max_held_bytes = lim->max_held_bytes,
                                 .session_max_reads = lim->disk_reads,
                                 .max_reads_queued = v.cfg->disk.max_reads_queued};
    d->namespaces_removed = ns_removed(v.namespaces);
    d->nops = server_op_count();
    for (size_t i = 0; i < d->nops; i++) {
        const hist_t *h = &v.counters->op_latency[i];
        d->ops[i] = (stats_op_t){.name = server_op_name(i),
                                 .count = hist_count(h),
                                 .p50_us = hist_percentile(h, 50.0),
                                 .p99_us = hist_percentile(h, 99.0),
                                 .max_us = hist_max(h),
                                 .hist = h};
    }
    d->page = (stats_page_t){.total = nns, .offset = offset};
    for (uint32_t slot = 0; slot < NS_MAX; slot++) {
        const ns_t *ns = ns_at(v.namespaces, slot);
        stats_ns_t o;

        if (ns == NULL)
            continue;
        o = (stats_ns_t){
            .ns = *ns,
            .cfg = *gates_cfg(ns->gates),
            .mean_lookup_us = ns->lookups ? (double)ns->lookup_us / (double)ns->lookups : 0.0,
            .lookup = {.sum_us = ns->lookup_us, .count = ns->lookups},
            .drops = {.drops = ns->drops, .chunks = ns->drop_chunks, .bytes = ns->drop_bytes}};
        gates_state(ns->gates, &o.gates);
        if (!utf8(ns->model) || !utf8(ns->revision))
            continue; /* jansson refuses the name: not listed, nor counted as shown (0.2.7) */
        d->ns_metrics[d->nns_metrics++] = o;
        if (seen++ < offset)
            continue;
        if (d->nnamespaces < max)
            d->namespaces[d->nnamespaces++] = o;
        else if (d->page.next == 0)
            d->page.next = offset + (uint32_t)d->nnamespaces;
    }
    d->page.shown = (uint32_t)d->nnamespaces;
    d->page.total = seen; /* what the pages list (0.2.7): namespaces_declared counts them all */
    qsort(d->ns_metrics, d->nns_metrics, sizeof *d->ns_metrics, ns_by_bytes);
    if (d->nns_metrics > STATS_METRICS_NS_MAX)
        d->nns_metrics = STATS_METRICS_NS_MAX;
    d->namespaces_declared = nns;
    d->namespaces_exported = (uint32_t)d->nns_metrics;
    return d;
}

/* --- the field tables --- */

typedef enum {
    T_U16,
    T_U32,
    T_U64,
    T_I64,
    T_DOUBLE,
    T_BOOL,
    T_STR,     /* const char * */
    T_CHARS,   /* a NUL-terminated char array */
    T_HEX64,   /* a uint64_t written as 16 lowercase hex digits */
    T_ERRNO,   /* an int: "" for 0, else strerror of its negation */
    T_WORD,    /* an int-sized enum written as words[value] */
    T_OBJECT,  /* fields[], offsets relative to base + off */
    T_ARRAY,   /* items(): each element rendered by elem */
    T_MAP,     /* items(): each element rendered by elem under the key elem_key() */
    T_HIST,    /* metrics only: a const hist_t * of microseconds, exported as a histogram */
    T_TIMING,  /* metrics only: a server_timing_t, exported as a summary (sum and count) */
    T_BUCKETS, /* JSON only: a const hist_t *, its non-empty buckets as [lo, hi, count] */
} stats_type_t;

typedef enum {
    GAUGE,   /* a value that goes up and down */
    COUNTER, /* only goes up while the daemon runs */
    INFO,    /* not a measurement: not exported, unless the row names a family (a state set or
                an info metric) */
} stats_kind_t;

typedef struct stats_field stats_field_t;

struct stats_field {
    const char *key; /* NULL for an element row */
    stats_type_t type;
    size_t off;
    stats_kind_t kind;
    const char *unit; /* "bytes", "seconds", "milliseconds", "microseconds", "ratio" or NULL */
    const char *help;
    const char *metric; /* the family's name when the derived one does not fit, or NULL */
    const char *labels; /* fixed labels of the row's samples; for a state set or an info
                           metric: the name of the label holding the word or the string */
    bool no_metric;     /* a numeric row that another family carries (the comment says which) */
    bool agg_max;       /* in an aggregated collection: the largest element, not the sum */
    const char *const *words;
    const stats_field_t *fields;
    size_t nfields;
    const stats_field_t *elem;
    size_t (*items)(const void *base, const void **first);
    size_t (*metric_items)(const void *base, const void **first); /* metrics' elements if not
                                                                      items' */
    size_t elem_size;
    const char *(*elem_key)(const void *elem);
    void (*elem_labels)(const void *elem, char *buf, size_t cap);
    const char *metric_prefix; /* objects and collections: their part of a family name */
    bool aggregate;            /* a collection exported as one sample per parent */
    bool (*when)(const void *base);
};

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* A numeric row of struct st: key, type, member, kind, unit, help; more designators may follow
 * (.metric, .labels, .no_metric, ...). */
#define NUM(st, k, t, m, kd, u, h, ...)                                                            \
    {                                                                                              \
        .key = k, .type = t, .off = offsetof(st, m), .kind = kd, .unit = u, .help = h, __VA_ARGS__ \
    }
/* A non-numeric row. */
#define TXT(st, k, t, m, h, ...)                                                                   \
    {                                                                                              \
        .key = k, .type = t, .off = offsetof(st, m), .kind = INFO, .help = h, __VA_ARGS__          \
    }
#define WORD(st, k, m, list, h, ...)                                                               \
    {                                                                                              \
        .key = k, .type = T_WORD, .off = offsetof(st, m), .kind = INFO, .help = h, .words = list,  \
        __VA_ARGS__                                                                                \
    }
#define OBJ(k, list, h, ...)                                                                       \
    {                                                                                              \
        .key = k, .type = T_OBJECT, .kind = INFO, .help = h, .fields = list,                       \
        .nfields = NFIELDS(list), __VA_ARGS__                                                      \
    }

/* The row of one array or map element that is an object of the rows in list. */
#define ELEM(list, h)                                                                              \
    {                                                                                              \
        .type = T_OBJECT, .kind = INFO, .help = h, .fields = list, .nfields = NFIELDS(list)        \
    }
/* The accessor of a collection: the count member cnt and the first element arr of struct st. */
#define ITEMS(name, st, arr, cnt)                                                                  \
    static size_t name(const void *base, const void **first)                                       \
    {                                                                                              \
        const st *x = base;                                                                        \
        *first = x->arr;                                                                           \
        return (size_t)x->cnt;                                                                     \
    }

static const char *const disk_state_words[] = {"off", "unavailable", "ok", "degraded", NULL};
static const char *const data_path_words[] = {"none", "frames", "shm", NULL};
static const char *const fault_op_words[] = {"", "write", "read", "segment", "sync", NULL};

static bool tier_open(const void *base)
{
    const stats_doc_t *d = base;

    return d->disk.state == STORE_DISK_OK || d->disk.state == STORE_DISK_DEGRADED;
}

static bool tier_closed(const void *base)
{
    return !tier_open(base);
}

/* Labels: name="value" with the value escaped for the text format. */
static void label_append(char *buf, size_t cap, const char *name, const char *value)
{
    size_t n = strlen(buf);

    if (n + 4 + strlen(name) >= cap)
        return;
    n += (size_t)snprintf(buf + n, cap - n, "%s%s=\"", n > 0 ? "," : "", name);
    for (const char *p = value; *p != '\0' && n + 3 < cap; p++) {
        if (*p == '\\' || *p == '"') {
            buf[n++] = '\\';
            buf[n++] = *p;
        } else if (*p == '\n') {
            buf[n++] = '\\';
            buf[n++] = 'n';
        } else {
            buf[n++] = *p;
        }
    }
    if (n + 1 < cap)
        buf[n++] = '"';
    buf[n] = '\0';
}

#define D stats_doc_t
#define RAMV(k, m, kd, u, h) NUM(D, k, T_U64, ram.m, kd, u, h)

static const stats_field_t ram_recovery_fields[] = {
    TXT(D, "path", T_STR, ram.recovery.path,
        "\"reattach\" (the arena file was kept and its journal replayed) or \"cold\"."),
    TXT(D, "reason", T_STR, ram.recovery.reason,
        "Why a cold start (\"disabled\", \"memfd\", \"no_file\", \"size\", \"header\", "
        "\"version\", \"layout\"), or \"attached\"."),
    NUM(D, "ms", T_U64, ram.recovery.ms, GAUGE, "milliseconds",
        "Time the RAM tier's recovery at start took (journal replay, checksums, index).",
        .metric = "kvtier_ram_recovery_duration_seconds"),
    NUM(D, "chunks", T_U64, ram.recovery.chunks, GAUGE, NULL,
        "Chunks re-attached from the arena at start."),
    NUM(D, "bytes", T_U64, ram.recovery.bytes, GAUGE, "bytes",
        "Payload bytes of the chunks re-attached at start."),
    NUM(D, "discarded", T_U64, ram.recovery.discarded, GAUGE, NULL,
        "Journal entries not re-attached at start: outside the arena, overlapping, of a namespace "
        "that could not be declared, of a key recovered otherwise (1 for a journal of another "
        "arena)."),
    NUM(D, "checksum_drops", T_U64, ram.recovery.checksum_drops, GAUGE, NULL,
        "Journal entries discarded at start because the arena's bytes no longer match."),
    NUM(D, "relinks", T_U64, ram.recovery.relinks, GAUGE, NULL,
        "Chunks linked at start under the predecessor their record names (both tiers' chains)."),
    NUM(D, "relink_steps", T_U64, ram.recovery.relink_steps, GAUGE, NULL,
        "The work of the start's checks that no relink closes a chain loop (set lookups; about "
        "one per relink)."),
    NUM(D, "relinks_refused", T_U64, ram.recovery.relinks_refused, GAUGE, NULL,
        "Chunks left orphans at start because linking them would have closed a chain loop."),
    NUM(D, "journal_records", T_U64, ram.recovery.journal_records, GAUGE, NULL,
        "Journal records read at start."),
};

static const stats_field_t ram_fields[] = {
    RAMV("capacity_bytes", capacity_bytes, GAUGE, "bytes",
         "Capacity of the RAM tier (ram.capacity_bytes)."),
    RAMV("arena_bytes", arena_bytes, GAUGE, "bytes",
         "Size of the RAM arena file: a 4 KiB header page, the capacity, plus with the disk tier "
         "a write headroom of 2 x disk.write_buffer_bytes for chunks evicted while their disk "
         "write is in flight (rounded up to whole huge pages on hugetlbfs)."),
    RAMV("huge_page_bytes", huge_page_bytes, GAUGE, "bytes",
         "The arena's pages are huge (ram.arena_path on hugetlbfs, or on a tmpfs mounted "
         "huge=always or huge=within_size): their size; 0 for 4 KiB pages. Disk reads and writes "
         "of chunks then move one or two physically contiguous pages each instead of 512, and "
         "disk.staging \"auto\" does not stage reads."),
    RAMV("used_bytes", used_bytes, GAUGE, "bytes",
         "Arena bytes allocated to the RAM tier, rounded to allocation units (at most the "
         "capacity, but for moments after a write commits under a reader)."),
    RAMV("demoting_bytes", demoting_bytes, GAUGE, "bytes",
         "Payload bytes of chunks evicted from the RAM tier while their disk write is in flight: "
         "still readable, held in the write headroom until the write commits."),
    RAMV("resident_bytes", resident_bytes, GAUGE, "bytes",
         "Arena bytes backed by memory (the arena file's allocated blocks)."),
    RAMV("stored_bytes", stored_bytes, GAUGE, "bytes", "Payload bytes of the chunks in RAM."),
    RAMV("chunks", chunks, GAUGE, NULL, "Chunks in RAM."),
    RAMV("index_chunks", index_chunks, GAUGE, NULL, "Chunks in the index, in any tier."),
    RAMV("hits", counts.hits, COUNTER, NULL,
         "Chunks asked by lookups (per rank) and loads and found, in any tier."),
    RAMV("misses", counts.misses, COUNTER, NULL,
         "Chunks asked by lookups (per rank) and loads and not found."),
    RAMV("evictions", counts.evictions, COUNTER, NULL, "Chunks evicted from RAM to make room."),
    RAMV("nospace", counts.nospace, COUNTER, NULL,
         "Chunks refused for lack of evictable space (everything evictable was pinned)."),
    RAMV("leased_chunks", leased_chunks, GAUGE, NULL, "Chunks under an unexpired lookup lease."),
    RAMV("free_runs", free_runs, GAUGE, NULL, "Free extents of the arena."),
    RAMV("largest_free_bytes", largest_free_bytes, GAUGE, "bytes",
         "The largest free extent of the arena."),
    TXT(D, "arena_path", T_STR, ram.arena_path, "The arena file (\"\" for an anonymous memfd)."),
    NUM(D, "reserved_bytes", T_U64, reserved_bytes, GAUGE, "bytes",
        "Arena bytes reserved by shared-memory saves not committed yet."),
    NUM(D, "pinned_bytes", T_U64, pinned_bytes, GAUGE, "bytes",
        "Bytes of chunks pinned by shared-memory loads not released yet (a chunk one session "
        "pins more than once counts once: the RAM it holds)."),
    RAMV("dirty_bytes", dirty_bytes, GAUGE, "bytes",
         "Payload bytes of RAM chunks without a disk copy yet (with the disk tier)."),
    RAMV("ingest_bytes", ingest_bytes, GAUGE, "bytes",
         "Arena bytes of saves being copied and checksummed off the loop."),
    RAMV("promoting_bytes", promoting_bytes, GAUGE, "bytes",
         "Arena bytes that disk reads in flight are landing in."),
    RAMV("clean_target_bytes", clean_target_bytes, GAUGE, "bytes",
         "RAM the cleaner keeps free or clean, evictable at once (0 without a disk tier)."),
    RAMV("verifies", verifies, COUNTER, NULL,
         "Chunk re-verifications clients asked for (RELEASE CORRUPT)."),
    RAMV("verify_drops", verify_drops, COUNTER, NULL,
         "Chunks removed because their bytes no longer matched their checksum (re-verification, "
         "demotion, shutdown persist)."),
    RAMV("nospace_held", counts.nospace_held, COUNTER, NULL,
         "Chunks refused for lack of room because leases, pins or reservations held it."),
    NUM(D, "arena_gen", T_U32, ram.arena_gen, GAUGE, NULL,
        "The arena's generation: one more at every start (HELLO_OK and ARENA_OK answer it)."),
    RAMV("journal_bytes", journal_bytes, GAUGE, "bytes",
         "Size of the RAM tier's journal (0 without one: a memfd arena or ram.reattach false)."),
    TXT(D, "journal_path", T_STR, ram.journal_path, "The RAM tier's journal (\"\" without one)."),
    OBJ("recovery", ram_recovery_fields, "What the start found in the arena."),
    NUM(D, "leased_bytes", T_U64, usage.leased_bytes, GAUGE, "bytes",
        "Bytes leased by lookups, until the leases expire (in 100 ms steps)."),
    NUM(D, "lent_bytes", T_U64, usage.lent_bytes, GAUGE, "bytes",
        "Arena bytes of load replies lent to ZeroMQ (pinned until sent)."),
    NUM(D, "held_bytes", T_U64, held_bytes, GAUGE, "bytes",
        "Leased, pinned, lent and reserved bytes: what eviction cannot take."),
};

static const stats_field_t recovery_fields[] = {
    NUM(D, "ms", T_U64, disk.tier.recovery.ms, GAUGE, "milliseconds",
        "Time the recovery at start took.", .metric = "kvtier_disk_recovery_duration_seconds"),
    NUM(D, "segments", T_U64, disk.tier.recovery.segments, GAUGE, NULL,
        "Segment files scanned at start."),
    NUM(D, "records", T_U64, disk.tier.recovery.records, GAUGE, NULL,
        "Valid records found at start."),
    NUM(D, "checksum_drops", T_U64, disk.tier.recovery.checksum_drops, GAUGE, NULL,
        "Records dropped at start for a failed checksum."),
    NUM(D, "bad_headers", T_U64, disk.tier.recovery.bad_headers, GAUGE, NULL,
        "Segment scans ended by a header that does not decode."),
    NUM(D, "torn_bytes", T_U64, disk.tier.recovery.torn_bytes, GAUGE, "bytes",
        "Bytes truncated off segment tails at start."),
    NUM(D, "bad_files", T_U64, disk.tier.recovery.bad_files, GAUGE, NULL,
        "Segment files that could not be opened or read at start."),
    NUM(D, "records_v1", T_U64, disk.tier.recovery.records_v1, GAUGE, NULL,
        "Valid records found at start in the old format (version 1)."),
    TXT(D, "path", T_STR, disk.tier.recovery.path,
        "\"checkpoint\" (the index checkpoint, then the segments after it) or \"scan\" (every "
        "record read)."),
    TXT(D, "reason", T_STR, disk.tier.recovery.reason,
        "On the scan path: why the checkpoint was not used (\"no checkpoint\", \"corrupted\", "
        "\"stale: ...\")."),
    NUM(D, "checkpoint_records", T_U64, disk.tier.recovery.checkpoint_records, GAUGE, NULL,
        "Records taken from the checkpoint at start, without reading them."),
    NUM(D, "scanned_bytes", T_U64, disk.tier.recovery.scanned_bytes, GAUGE, "bytes",
        "Segment bytes read at start (every segment on the scan path; a tail and the segments "
        "after the checkpoint on its path)."),
};

/* With the tier open, the disk module's figures; without, state, error and zero sizes. */
#define DISK(k, m, kd, u, h)                                                                       \
    {                                                                                              \
        .key = k, .type = T_U64, .off = offsetof(D, disk.tier.m), .kind = kd, .unit = u,           \
        .help = h, .when = tier_open                                                               \
    }

/* A time of the open tier in seconds (a double derived from the disk's nanoseconds or ms). */
#define DISK_SECS(k, field, kd, h)                                                                 \
    {                                                                                              \
        .key = k, .type = T_DOUBLE, .off = offsetof(D, field), .kind = kd, .unit = "seconds",      \
        .help = h, .when = tier_open                                                               \
    }

static const stats_field_t disk_fields[] = {
    NUM(D, "enabled", T_BOOL, disk.enabled, GAUGE, NULL, "Whether disk.enabled is set."),
    WORD(D, "state", disk.state, disk_state_words,
         "\"off\", \"unavailable\" (the directory could not be used), \"ok\" or \"degraded\" "
         "(a write failed: demotions are refused until the retry).",
         .metric = "kvtier_disk_state", .labels = "state"),
    {.key = "last_error",
     .type = T_ERRNO,
     .off = offsetof(D, disk.error),
     .kind = INFO,
     .help = "Why the directory could not be used.",
     .when = tier_closed},
    {.key = "dir",
     .type = T_STR,
     .off = offsetof(D, disk.tier.dir),
     .kind = INFO,
     .help = "The segment directory.",
     .when = tier_open},
    NUM(D, "capacity_bytes", T_U64, disk.tier.capacity_bytes, GAUGE, "bytes",
        "Capacity of the segment files (0 without a tier)."),
    NUM(D, "used_bytes", T_U64, disk.tier.used_bytes, GAUGE, "bytes",
        "Segment files rounded to 4 KiB plus the flush in flight (at most the capacity)."),
    DISK("segments", segments, GAUGE, NULL, "Segment files."),
    DISK("segment_bytes", segment_bytes, GAUGE, "bytes", "Size of one segment file."),
    DISK("bytes_written", bytes_written, COUNTER, "bytes", "Record bytes written."),
    DISK("bytes_read", bytes_read, COUNTER, "bytes", "Record bytes read."),
    DISK("raw_bytes_written", raw_bytes_written, COUNTER, "bytes",
         "Chunk bytes written, before compression."),
    DISK("stored_bytes_written", stored_bytes_written, COUNTER, "bytes",
         "Chunk bytes written, after compression."),
    {.key = "compression",
     .type = T_WORD,
     .off = offsetof(D, disk.tier.compression),
     .kind = INFO,
     .help = "disk.compression: \"auto\", \"lz4\" or \"off\".",
     .words = codec_mode_words,
     .when = tier_open},
    {.key = "compression_ratio",
     .type = T_DOUBLE,
     .off = offsetof(D, disk.tier.compression_ratio),
     .kind = GAUGE,
     .unit = "ratio",
     .help = "Stored over raw bytes written (1 before any write).",
     .when = tier_open},
    DISK("records_written", records_written, COUNTER, NULL, "Records written."),
    DISK("records_compressed", records_compressed, COUNTER, NULL, "Records written compressed."),
    DISK("flushes_raw", flushes_raw, COUNTER, NULL,
         "Write batches stored raw in auto mode to keep up with demotions."),
    DISK("records_read", records_read, COUNTER, NULL, "Records read back."),
    DISK("checksum_drops", checksum_drops, COUNTER, NULL,
         "Records whose checksum failed (a miss, never bad bytes)."),
    DISK("read_errors", read_errors, COUNTER, NULL, "Reads that failed for another reason."),
    DISK("write_errors", write_errors, COUNTER, NULL, "Flushes that failed."),
    {.key = "last_error",
     .type = T_ERRNO,
     .off = offsetof(D, disk.tier.last_error),
     .kind = INFO,
     .help = "The error of the last fault: a failed flush or read, a segment truncated or deleted.",
     .when = tier_open},
    {.key = "last_error_op",
     .type = T_WORD,
     .off = offsetof(D, disk.tier.last_error_op),
     .kind = INFO,
     .help = "What last_error is of: \"\", \"write\", \"read\", \"segment\" or \"sync\".",
     .words = fault_op_words,
     .when = tier_open},
    DISK("segment_faults", segment_faults, COUNTER, NULL,
         "Segment files found truncated or deleted under the daemon."),
    DISK("reclaimed_segments", reclaimed_segments, COUNTER, NULL,
         "Segments reclaimed (oldest first) to make room."),
    DISK("reclaims_deferred_by_leases", busy_reclaims, COUNTER, NULL,
         "Reclaims that took a later segment because the oldest held leased chunks."),
    DISK("reclaims_past_leases", reclaims_past_leases, COUNTER, NULL,
         "Segments reclaimed although leased chunks were on them: the leased segments stepped over "
         "reached a quarter of the capacity, or none other could go (0.2.10)."),
    DISK("reads_in_flight", reads_in_flight, GAUGE, NULL, "Reads running on the thread pool."),
    DISK("reads_queued", reads_queued, GAUGE, NULL, "Reads waiting for a slot."),
    DISK("write_buffer_bytes", write_buffer_bytes, GAUGE, "bytes",
         "Chunk bytes lent to the filling and the flushing write batch."),
    {.key = "direct_io",
     .type = T_BOOL,
     .off = offsetof(D, disk.tier.direct_io),
     .kind = GAUGE,
     .help = "Segments are written and read with O_DIRECT (disk.direct_io, if the filesystem "
             "allows it).",
     .when = tier_open},
    {.key = "auto_max_ratio",
     .type = T_DOUBLE,
     .off = offsetof(D, disk.tier.auto_max_ratio),
     .kind = GAUGE,
     .unit = "ratio",
     .help = "Auto compression: the largest stored/raw ratio at which compressing makes neither "
             "writes nor reads slower than raw (at most 0: it does not pay).",
     .when = tier_open},
    DISK("verify_drops", verify_drops, COUNTER, NULL,
         "Records not written because their bytes no longer matched their checksum."),
    DISK_SECS("write_seconds", disk_write_seconds, COUNTER,
              "Time the flushes spent in their write system calls (bytes_written over it is the "
              "writer's bandwidth)."),
    DISK_SECS("read_seconds", disk_read_seconds, COUNTER,
              "Time the reads spent in their read system calls, summed over parallel reads."),
    DISK("seal_syncs", seals, COUNTER, NULL,
         "Sealed segments fsynced (disk.fsync segment or record), each by the flush after the "
         "roll, before it writes."),
    DISK("seal_sync_errors", seal_errors, COUNTER, NULL, "Seal fsyncs that failed (logged)."),
    DISK_SECS("seal_sync_seconds", disk_seal_seconds, COUNTER,
              "Time the seal fsyncs took: the flushes' time not in write_seconds."),
    DISK_SECS("flush_running_seconds", disk_flush_running_seconds, GAUGE,
              "How long the flush in flight has been running (0: none). A disk that hangs keeps "
              "its flush running: alert when this stays above a few seconds."),
    {.key = "staging_reads",
     .type = T_BOOL,
     .off = offsetof(D, disk.tier.staging_reads),
     .kind = GAUGE,
     .help = "Reads go through huge-page staging memory (disk.staging: \"auto\" stages them "
             "when the kernel gives madvised memory huge pages and the arena's pages are small).",
     .when = tier_open},
    {.key = "staging_writes",
     .type = T_BOOL,
     .off = offsetof(D, disk.tier.staging_writes),
     .kind = GAUGE,
     .help = "Flushes may go through huge-page staging memory (disk.staging \"on\"; \"auto\" "
             "with the reads' conditions, flush by flush by measurement: flushes_staged).",
     .when = tier_open},
    DISK("staging_bytes", staging_bytes, GAUGE, "bytes",
         "Address space of the staging memory (the flush's and the reads')."),
    DISK("staging_resident_bytes", staging_resident_bytes, GAUGE, "bytes",
         "Staging memory backed by pages now (not part of the arena: count it beside it)."),
    DISK("read_retries", read_retries, COUNTER, NULL,
         "Reads that failed (an I/O error, a checksum or header mismatch) and were done once "
         "more: a transient fault then costs a read, not the chunk (read_errors and "
         "checksum_drops count the reads that failed again)."),
    DISK("flushes", flushes, COUNTER, NULL,
         "Flushes written: batches of records, one pwritev (or, staged, a few) each."),
    DISK("flushes_staged", flushes_staged, COUNTER, NULL,
         "Flushes that copied their raw payloads into the staging memory before writing them "
         "(disk.staging \"auto\" stages a flush when staged flushes have written faster)."),
    DISK("reads_staged", reads_staged, COUNTER, NULL,
         "Reads that went through the staging memory (the others went straight into the "
         "arena: none free, staging off, or an old record)."),
    {.key = "recovery",
     .type = T_OBJECT,
     .kind = INFO,
     .help = "What the recovery found at start.",
     .fields = recovery_fields,
     .nfields = NFIELDS(recovery_fields),
     .when = tier_open},
    NUM(D, "chunks", T_U64, disk.counts.chunks, GAUGE, NULL, "Chunks with a disk copy."),
    NUM(D, "write_buffer_chunks", T_U64, disk.counts.wbuf, GAUGE, NULL,
        "Chunks whose disk write is pending (write-back, the shutdown persist)."),
    NUM(D, "hits", T_U64, disk.counts.hits, COUNTER, NULL,
        "Load chunks served by the disk tier (a verified read)."),
    NUM(D, "misses", T_U64, disk.counts.misses, COUNTER, NULL,
        "Load chunks that missed RAM and that the disk tier could not serve."),
    NUM(D, "evictions", T_U64, disk.counts.evictions, COUNTER, NULL,
        "Chunks dropped with a reclaimed segment."),
    NUM(D, "demotions", T_U64, disk.counts.demoted, COUNTER, NULL,
        "RAM chunks written to the disk tier (by the cleaner, ahead of their eviction, and by "
        "the shutdown persist)."),
    NUM(D, "demotions_clean", T_U64, disk.counts.demoted_clean, COUNTER, NULL,
        "RAM evictions whose disk copy existed already."),
    NUM(D, "demotions_refused", T_U64, disk.counts.refused, COUNTER, NULL,
        "RAM evictions of chunks not written yet: dropped, because saves never wait for the disk "
        "(the cleaner was behind, or the tier degraded)."),
    NUM(D, "writes_lost", T_U64, disk.counts.write_lost, COUNTER, NULL,
        "Chunks dropped because their disk write failed (a failed write-back leaves the chunk in "
        "RAM for a later try: stays 0)."),
    NUM(D, "records_lost", T_U64, disk.counts.records_lost, COUNTER, NULL,
        "Disk copies forgotten because their segment file was found cut short under the daemon "
        "(0.2.10)."),
    NUM(D, "promotions", T_U64, disk.counts.promoted, COUNTER, NULL, "Chunks read back into RAM."),
    NUM(D, "read_joins", T_U64, disk.counts.read_joins, COUNTER, NULL,
        "Loads that joined a read of the same chunk already in flight."),
    NUM(D, "prefetches", T_U64, disk.counts.prefetches, COUNTER, NULL,
        "Read-aheads started by lookups: chunks of a looked-up prefix that were only on disk, read "
        "into RAM before their load (disk.prefetch_bytes)."),
    NUM(D, "prefetch_hits", T_U64, disk.counts.prefetch_hits, COUNTER, NULL,
        "Loads a read-ahead served: they joined its read or found its promotion (also counted in "
        "hits)."),
    NUM(D, "prefetch_skipped", T_U64, disk.counts.prefetch_skipped, COUNTER, NULL,
        "Disk-only chunks of looked-up prefixes not read ahead: over disk.prefetch_bytes, no RAM "
        "without dropping a chunk, or the daemon stopping (their loads read them)."),
    NUM(D, "read_stalls", T_U64, disk.counts.read_stalls, COUNTER, NULL,
        "Times reads were in flight and none finished for disk.read_stall_ms: the loads waiting "
        "on them were answered, their unread chunks as misses."),
    NUM(D, "stall_misses", T_U64, disk.counts.stall_misses, COUNTER, NULL,
        "Load chunks answered as misses because the disk's reads were stalled."),
    NUM(D, "read_stalled", T_BOOL, disk.counts.read_stalled, GAUGE, NULL,
        "Whether the disk's reads are stalled now (until a read finishes)."),
    NUM(D, "orphaned", T_U64, disk.counts.orphaned, COUNTER, NULL,
        "Successors detached from a dropped chunk (kept, as orphans)."),
    NUM(D, "recovery_skipped", T_U64, disk.counts.recover_skipped, GAUGE, NULL,
        "Records found at start whose namespace conflicts with one declared before."),
    NUM(D, "recovery_dropped", T_U64, disk.counts.recover_dropped, GAUGE, NULL,
        "Records found at start that belong to a dropped namespace (left unindexed)."),
    NUM(D, "checkpoints", T_U64, disk.counts.checkpoints, COUNTER, NULL,
        "Index checkpoints written (every disk.checkpoint_interval_s and at a clean stop)."),
    NUM(D, "checkpoint_failures", T_U64, disk.counts.checkpoint_fails, COUNTER, NULL,
        "Index checkpoints that could not be written (the log says why)."),
    NUM(D, "checkpoint_bytes", T_U64, disk.counts.checkpoint_bytes, GAUGE, "bytes",
        "Size of the last index checkpoint written."),
    NUM(D, "checkpoint_records", T_U64, disk.counts.checkpoint_records, GAUGE, NULL,
        "Records in the last index checkpoint built."),
};

#define ERR(k, e)                                                                                  \
    NUM(D, k, T_U64, server.errors[e], COUNTER, NULL, "ERROR replies by class.",                   \
        .metric = "kvtier_server_errors_total", .labels = "class=\"" k "\"")

static const stats_field_t error_fields[] = {
    ERR("malformed", SERVER_ERR_MALFORMED),
    ERR("version", SERVER_ERR_VERSION),
    ERR("unknown_ns", SERVER_ERR_UNKNOWN_NS),
    ERR("too_big", SERVER_ERR_TOO_BIG),
    ERR("invalid", SERVER_ERR_INVALID),
    ERR("conflict", SERVER_ERR_CONFLICT),
    ERR("unsupported", SERVER_ERR_UNSUPPORTED),
    ERR("busy", SERVER_ERR_BUSY),
    ERR("stale", SERVER_ERR_STALE),
};

ITEMS(session_namespaces, session_info_t, namespaces, nnamespaces)

static const stats_field_t session_ns_elem = {
    .type = T_U32, .kind = INFO, .help = "A namespace id the session declared."};

/* Exported as aggregates over every session (server.sessions is aggregate): sums, or the
 * largest value for the times. */
static const stats_field_t session_fields[] = {
    TXT(session_info_t, "id", T_CHARS, id,
        "The session's id: a hash of its ZeroMQ routing id keyed per daemon run, 16 hex digits."),
    WORD(session_info_t, "data_path", data_path, data_path_words,
         "How its chunk bytes travel: \"frames\", \"shm\" or \"none\" yet."),
    {.key = "namespaces",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The namespace ids it declared.",
     .elem = &session_ns_elem,
     .items = session_namespaces,
     .elem_size = sizeof(uint32_t)},
    NUM(session_info_t, "idle_ms", T_U64, idle_ms, GAUGE, "milliseconds",
        "Time since its last request.", .agg_max = true,
        .metric = "kvtier_server_sessions_max_idle_seconds"),
    NUM(session_info_t, "age_ms", T_U64, age_ms, GAUGE, "milliseconds",
        "Time since its first request.", .agg_max = true,
        .metric = "kvtier_server_sessions_max_age_seconds"),
    NUM(session_info_t, "reserved_bytes", T_U64, reserved_bytes, GAUGE, "bytes",
        "Arena bytes its shared-memory saves reserved."),
    NUM(session_info_t, "pinned_bytes", T_U64, pinned_bytes, GAUGE, "bytes",
        "Bytes of chunks its shared-memory loads pinned."),
    /* the metrics carry these as server.usage (which counts forgotten sessions' charges too) */
    NUM(session_info_t, "in_flight", T_U32, use.in_flight, GAUGE, NULL,
        "Its requests in flight: deferred replies and replies queued in ZeroMQ.",
        .no_metric = true),
    NUM(session_info_t, "reply_bytes", T_U64, use.reply_bytes, GAUGE, "bytes",
        "Bytes of those replies (heap copies and lent arena bytes).", .no_metric = true),
    NUM(session_info_t, "lent_bytes", T_U64, use.lent_bytes, GAUGE, "bytes",
        "Arena bytes of its load replies lent to ZeroMQ.", .no_metric = true),
    NUM(session_info_t, "disk_reads", T_U32, use.disk_reads, GAUGE, NULL,
        "Disk reads its loads wait for.", .no_metric = true),
    NUM(session_info_t, "leased_bytes", T_U64, use.leased_bytes, GAUGE, "bytes",
        "Bytes its lookups leased, until the leases expire.", .no_metric = true),
    NUM(session_info_t, "held_bytes", T_U64, held_bytes, GAUGE, "bytes",
        "Leased, pinned, lent and reserved bytes (ram.session_held_share bounds them).",
        .no_metric = true),
    NUM(session_info_t, "stalled", T_BOOL, stalled, GAUGE, NULL,
        "Its queue was full: its requests are dropped until its queued replies left.",
        .metric = "kvtier_server_sessions_stalled"),
    NUM(session_info_t, "refused", T_U64, refused, COUNTER, NULL,
        "Its requests refused with EBUSY over a bound.", .no_metric = true),
    NUM(session_info_t, "replies_dropped", T_U64, replies_dropped, COUNTER, NULL,
        "Replies to it that were not delivered.", .no_metric = true),
};

static const stats_field_t session_elem = ELEM(session_fields, "One session.");

ITEMS(doc_sessions, stats_doc_t, sessions, nsessions_listed)
ITEMS(doc_sessions_all, stats_doc_t, sessions, nsessions)
ITEMS(doc_top, stats_doc_t, top, ntop)

/* No elements: a collection that status lists and the metrics leave out. */
static size_t no_items(const void *base, const void **first)
{
    (void)base;
    *first = NULL;
    return 0;
}

#define USE(k, t, m, kd, u, h, ...) NUM(D, k, t, usage.m, kd, u, h, __VA_ARGS__)

/* The held bytes are in the metrics as ram.* (kvtier_ram_leased_bytes, ...). */
static const stats_field_t usage_fields[] = {
    USE("in_flight", T_U32, in_flight, GAUGE, NULL,
        "Requests in flight: deferred replies and replies queued in ZeroMQ."),
    USE("reply_bytes", T_U64, reply_bytes, GAUGE, "bytes",
        "Bytes of those replies (server.max_reply_bytes bounds them)."),
    USE("lent_bytes", T_U64, lent_bytes, GAUGE, "bytes", "Arena bytes of them lent to ZeroMQ.",
        .no_metric = true),
    USE("disk_reads", T_U32, disk_reads, GAUGE, NULL, "Disk reads that load replies wait for."),
    USE("leased_bytes", T_U64, leased_bytes, GAUGE, "bytes", "Bytes under lookup leases.",
        .no_metric = true),
    USE("pinned_bytes", T_U64, pinned_bytes, GAUGE, "bytes", "Shared-memory load pins.",
        .no_metric = true),
    USE("reserved_bytes", T_U64, reserved_bytes, GAUGE, "bytes", "Shared-memory reservations.",
        .no_metric = true),
    NUM(D, "held_bytes", T_U64, held_bytes, GAUGE, "bytes",
        "Leased, pinned, lent and reserved bytes (ram.max_held_share bounds them).",
        .no_metric = true),
    USE("namespaces", T_U32, namespaces, GAUGE, NULL, "Namespace declarations of sessions."),
};

#define LIM(k, t, m, u, h) NUM(D, k, t, limits.m, GAUGE, u, h)

static const stats_field_t limits_fields[] = {
    LIM("max_clients", T_U32, max_clients, NULL, "server.max_clients."),
    LIM("max_in_flight", T_U32, max_in_flight, NULL, "server.max_in_flight (per session)."),
    LIM("session_max_namespaces", T_U32, session_max_namespaces, NULL,
        "server.session_max_namespaces."),
    LIM("max_namespaces", T_U32, max_namespaces, NULL, "server.max_namespaces."),
    LIM("session_reply_bytes", T_U64, session_reply_bytes, "bytes", "server.session_reply_bytes."),
    LIM("max_reply_bytes", T_U64, max_reply_bytes, "bytes", "server.max_reply_bytes."),
    LIM("session_held_bytes", T_U64, session_held_bytes, "bytes",
        "ram.session_held_share x ram.capacity_bytes."),
    LIM("max_held_bytes", T_U64, max_held_bytes, "bytes",
        "ram.max_held_share x ram.capacity_bytes."),
    LIM("session_max_reads", T_U32, session_max_reads, NULL, "disk.session_max_reads."),
    LIM("max_reads_queued", T_U32, max_reads_queued, NULL, "disk.max_reads_queued."),
};

#define REF(k, b)                                                                                  \
    NUM(D, k, T_U64, scount.refused[b], COUNTER, NULL,                                             \
        "Requests refused with EBUSY over this bound.", .metric = "kvtier_server_refused_total",   \
        .labels = "bound=\"" k "\"")

static const stats_field_t refused_fields[] = {
    REF("clients", SESSION_BOUND_CLIENTS),
    REF("in_flight", SESSION_BOUND_IN_FLIGHT),
    REF("namespaces", SESSION_BOUND_NAMESPACES),
    REF("max_namespaces", SESSION_BOUND_MAX_NAMESPACES),
    REF("reply_bytes", SESSION_BOUND_REPLY_BYTES),
    REF("max_reply_bytes", SESSION_BOUND_MAX_REPLY_BYTES),
    REF("held_bytes", SESSION_BOUND_HELD),
    REF("max_held_bytes", SESSION_BOUND_MAX_HELD),
    REF("disk_reads", SESSION_BOUND_DISK_READS),
    REF("max_disk_reads", SESSION_BOUND_MAX_DISK_READS),
};

static const stats_field_t server_fields[] = {
    NUM(D, "clients", T_U32, clients, GAUGE, NULL, "Sessions remembered."),
    NUM(D, "requests", T_U64, server.requests, COUNTER, NULL,
        "Requests received, well-formed or not."),
    NUM(D, "bytes_received", T_U64, server.bytes_received, COUNTER, "bytes",
        "SAVE_DATA payload bytes received."),
    NUM(D, "bytes_sent", T_U64, server.bytes_sent, COUNTER, "bytes",
        "Reply bytes sent (every part after the routing id)."),
    NUM(D, "bytes_committed", T_U64, server.bytes_committed, COUNTER, "bytes",
        "Payload bytes published through the shared arena."),
    NUM(D, "replies_dropped", T_U64, server.replies_dropped, COUNTER, NULL,
        "Replies not delivered: the client's queue was full or it was gone, or its session was "
        "stalled or forgotten first."),
    NUM(D, "fd_limit", T_U64, server.fd_limit, GAUGE, NULL,
        "The daemon's descriptor limit (RLIMIT_NOFILE, its soft limit raised to the hard one)."),
    NUM(D, "fd_guard", T_U64, server.fd_guard, GAUGE, NULL,
        "Connections accepted on a descriptor numbered this or higher are shut down at once, "
        "keeping the rest for the daemon (0: no guard)."),
    NUM(D, "connections_shed", T_U64, server.connections_shed, COUNTER, NULL,
        "Connections the descriptor guard shut down (too many connections open)."),
    NUM(D, "save_ops_remembered", T_U32, save_ops_remembered, GAUGE, NULL,
        "Save operations whose admission decision is remembered for their other ranks."),
    NUM(D, "draining", T_BOOL, draining, GAUGE, NULL,
        "A stop has begun: saves are refused while the requests in flight finish."),
    NUM(D, "namespaces_declared", T_U32, namespaces_declared, GAUGE, NULL,
        "Namespaces that exist (status lists 64 per page: namespaces_page)."),
    NUM(D, "namespaces_exported", T_U32, namespaces_exported, GAUGE, NULL,
        "Namespaces with series in /metrics (at most 32: the most stored bytes first)."),
    OBJ("errors", error_fields, "ERROR replies by class."),
    {.key = "sessions",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The most recently active sessions (at most 256); in the metrics, aggregates over "
             "every session.",
     .elem = &session_elem,
     .items = doc_sessions,
     .metric_items = doc_sessions_all,
     .aggregate = true,
     .elem_size = sizeof(session_info_t)},
    {.key = "top_sessions",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The sessions holding the most (held + reply bytes), at most 8, largest first; not "
             "in the metrics (server.usage sums them).",
     .elem = &session_elem,
     .items = doc_top,
     .metric_items = no_items,
     .elem_size = sizeof(session_info_t)},
    OBJ("usage", usage_fields, "What all sessions hold and have in flight."),
    OBJ("limits", limits_fields, "The bounds on sessions (configuration)."),
    OBJ("refused", refused_fields, "Requests refused with EBUSY, by bound."),
    NUM(D, "leases_capped", T_U64, server.leases_capped, COUNTER, NULL,
        "Lookups answered without the lease they asked for (a held bound)."),
    NUM(D, "stalls", T_U64, scount.stalls, COUNTER, NULL,
        "Sessions stalled because their queue was full (they did not read their replies)."),
    NUM(D, "peers_gone", T_U64, scount.peers_gone, COUNTER, NULL,
        "Sessions forgotten because a reply found their peer gone."),
    NUM(D, "sessions_expired", T_U64, scount.expired, COUNTER, NULL,
        "Sessions forgotten after server.client_idle_ms of silence."),
    NUM(D, "namespaces_removed", T_U64, namespaces_removed, COUNTER, NULL,
        "Namespaces removed: expired (no session, no chunk) or evicted."),
    NUM(D, "state_namespaces", T_U64, server.state_namespaces, GAUGE, NULL,
        "Namespaces whose gate state (estimators, ghost table) the start restored from the last "
        "clean stop."),
    NUM(D, "state_leases", T_U64, server.state_leases, GAUGE, NULL,
        "Lookup leases the start restored from the last clean stop."),
    NUM(D, "namespaces_evicted", T_U64, server.namespaces_evicted, COUNTER, NULL,
        "Namespaces dropped with their chunks to make room for a new one."),
};

static const stats_field_t config_fields[] = {
    TXT(D, "path", T_STR, config.path, "The configuration file (-c)."),
    WORD(D, "log_level", config.log_level, log_level_words,
         "log.level in force: \"debug\", \"info\", \"warn\" or \"error\".",
         .metric = "kvtier_config_log_level", .labels = "level"),
    NUM(D, "reloads", T_U64, config.st.reloads, COUNTER, NULL,
        "Reloads applied (SIGHUP, systemctl reload)."),
    NUM(D, "reload_errors", T_U64, config.st.reload_errors, COUNTER, NULL,
        "Reloads refused: the file was invalid and the running configuration was kept."),
    NUM(D, "restart_pending", T_U32, config.st.restart_pending, GAUGE, NULL,
        "Keys of the last file applied whose new value needs a restart."),
    TXT(D, "last_error", T_CHARS, config.st.last_error,
        "Why the last refused reload was refused (\"\" none)."),
};

/* count, p50_us and p99_us are carried by kvtier_op_duration_seconds (its _count, and
 * histogram_quantile() of its buckets). */
static const stats_field_t op_fields[] = {
    NUM(stats_op_t, "count", T_U64, count, COUNTER, NULL, "Requests of this type served.",
        .no_metric = true),
    NUM(stats_op_t, "p50_us", T_U64, p50_us, GAUGE, "microseconds", "Median service time.",
        .no_metric = true),
    NUM(stats_op_t, "p99_us", T_U64, p99_us, GAUGE, "microseconds",
        "99th percentile of the service time.", .no_metric = true),
    NUM(stats_op_t, "max_us", T_U64, max_us, GAUGE, "microseconds", "Longest service time.",
        .metric = "kvtier_op_max_duration_seconds"),
    NUM(stats_op_t, "duration", T_HIST, hist, GAUGE, "seconds",
        "Daemon service time per request, from intake to reply.",
        .metric = "kvtier_op_duration_seconds"),
    NUM(stats_op_t, "buckets_us", T_BUCKETS, hist, INFO, "microseconds",
        "The service-time histogram's non-empty buckets, [lo, hi, count] (cumulative since the "
        "start; two documents' difference is the histogram of the interval between them)."),
};

static const stats_field_t op_elem =
    ELEM(op_fields, "One request type: daemon service time per request.");

ITEMS(doc_ops, stats_doc_t, ops, nops)

static const char *op_key(const void *elem)
{
    return ((const stats_op_t *)elem)->name;
}

static void op_labels(const void *elem, char *buf, size_t cap)
{
    label_append(buf, cap, "op", ((const stats_op_t *)elem)->name);
}

#define N stats_ns_t

ITEMS(ns_reasons, stats_ns_t, gates.reasons, gates.nreasons)

static const char *reason_key(const void *elem)
{
    return ((const gates_reason_t *)elem)->name;
}

static void reason_labels(const void *elem, char *buf, size_t cap)
{
    const char *name = ((const gates_reason_t *)elem)->name;

    if (utf8(name))
        label_append(buf, cap, "reason", name);
    else
        buf[0] = '\0'; /* left out, as in the JSON document */
}

static const stats_field_t reason_elem = NUM(gates_reason_t, NULL, T_U64, count, COUNTER, NULL,
                                             "Verdicts of this reason, summed over engines.");

static const stats_field_t atom_fields[] = {
    NUM(N, "share", T_DOUBLE, gates.atom_share, GAUGE, "ratio",
        "The share policy atom computes from the payoff now."),
    NUM(N, "would_decline", T_U64, gates.atom_would_decline, COUNTER, NULL,
        "Operations atom would have declined while it did not decide (past its warmup)."),
};

static const stats_field_t value_fields[] = {
    NUM(N, "share", T_DOUBLE, gates.value_share, GAUGE, "ratio",
        "The share policy value computes from the density now."),
    NUM(N, "would_decline", T_U64, gates.value_would_decline, COUNTER, NULL,
        "Operations value would have declined while it did not decide."),
};

static const stats_field_t ghost_fields[] = {
    NUM(N, "capacity", T_U64, gates.ghost.capacity, GAUGE, NULL,
        "Fingerprints the table holds (gates.admission.ghost_entries, rounded down)."),
    NUM(N, "entries", T_U64, gates.ghost.entries, GAUGE, NULL, "Fingerprints held now."),
    NUM(N, "inserts", T_U64, gates.ghost.inserts, COUNTER, NULL, "Fingerprints added."),
    NUM(N, "refreshes", T_U64, gates.ghost.refreshes, COUNTER, NULL,
        "Fingerprints declined again (moved to the front of their bucket)."),
    NUM(N, "evictions", T_U64, gates.ghost.evictions, COUNTER, NULL,
        "Fingerprints forgotten by the replacement rule (full bucket, oldest decline first)."),
    NUM(N, "removals", T_U64, gates.ghost.removals, COUNTER, NULL,
        "Fingerprints removed because their chunk was admitted."),
};

static const stats_field_t admission_fields[] = {
    NUM(N, "enabled", T_BOOL, cfg.admission.enabled, GAUGE, NULL,
        "gates.admission.enabled: the gate declines operations (else shadow mode)."),
    NUM(N, "target", T_DOUBLE, cfg.admission.target, GAUGE, "ratio",
        "gates.admission.target: payoff at which every operation is admitted."),
    NUM(N, "floor", T_DOUBLE, cfg.admission.floor, GAUGE, "ratio",
        "gates.admission.floor: the least share of operations admitted."),
    NUM(N, "alpha", T_DOUBLE, cfg.admission.alpha, GAUGE, "ratio",
        "gates.admission.alpha: weight of one verdict in the payoff average."),
    NUM(N, "warmup", T_U64, cfg.admission.warmup, GAUGE, NULL,
        "gates.admission.warmup: verdicts folded before the gate decides."),
    NUM(N, "probes", T_U64, gates.probes, COUNTER, NULL, "Verdicts folded."),
    NUM(N, "payoff", T_DOUBLE, gates.payoff, GAUGE, "ratio",
        "Moving average of the verdicts' payoff."),
    NUM(N, "share", T_DOUBLE, gates.share, GAUGE, "ratio",
        "Share of save operations the configured policy admits now."),
    NUM(N, "saved", T_U64, gates.saved, COUNTER, NULL, "Save operations admitted."),
    NUM(N, "skipped", T_U64, gates.skipped, COUNTER, NULL, "Save operations declined."),
    NUM(N, "save_share", T_DOUBLE, gates.save_share, GAUGE, "ratio",
        "Admitted over decided operations (1 before any decision)."),
    NUM(N, "would_decline", T_U64, gates.would_decline, COUNTER, NULL,
        "Shadow mode: operations the enabled gate would have declined."),
    WORD(N, "policy", cfg.admission.policy, gates_policy_words,
         "gates.admission.policy: the policy that decides while enabled, \"value\" or \"atom\"."),
    NUM(N, "cost_ratio", T_DOUBLE, cfg.admission.cost_ratio, GAUGE, "ratio",
        "gates.admission.cost_ratio: cost of writing a token over recomputing it."),
    NUM(N, "value_floor", T_DOUBLE, cfg.admission.value_floor, GAUGE, "ratio",
        "gates.admission.value_floor: the least share the value policy admits."),
    NUM(N, "window_tokens", T_U64, cfg.admission.window_tokens, GAUGE, NULL,
        "gates.admission.window_tokens: offered tokens over which value evidence fades by 1/e."),
    NUM(N, "learn_tokens", T_U64, cfg.admission.learn_tokens, GAUGE, NULL,
        "gates.admission.learn_tokens: offered tokens admitted on trust after the first reuse."),
    NUM(N, "reuse_wait_tokens", T_U64, cfg.admission.reuse_wait_tokens, GAUGE, NULL,
        "gates.admission.reuse_wait_tokens: offered tokens after which the value window starts "
        "although lookups showed no reuse (0: never)."),
    NUM(N, "density", T_DOUBLE, gates.density, GAUGE, "ratio",
        "Value policy: tokens served (and regretted) per token offered, over the window."),
    NUM(N, "served_tokens", T_U64, gates.served_tokens, COUNTER, NULL,
        "Tokens the engines loaded from the tier and used (token tallies)."),
    NUM(N, "regret_tokens", T_U64, gates.regret_tokens, COUNTER, NULL,
        "Tokens lookups through declined chunks would have loaded (ghost table)."),
    NUM(N, "written_tokens", T_U64, gates.written_tokens, COUNTER, NULL,
        "Tokens of the wanted chunks of admitted save operations."),
    NUM(N, "declined_tokens", T_U64, gates.declined_tokens, COUNTER, NULL,
        "Tokens of the wanted chunks of declined save operations."),
    NUM(N, "offered_tokens", T_U64, gates.offered_tokens, COUNTER, NULL,
        "Tokens of wanted chunks not in the ghost table: new offers, the value window's clock."),
    NUM(N, "lookup_tokens", T_U64, gates.lookup_tokens, COUNTER, NULL,
        "Prompt tokens of the requests that got a verdict (token tallies)."),
    NUM(N, "estimated_served_tokens", T_U64, gates.estimated_served_tokens, COUNTER, NULL,
        "Tokens answered lookups would load by the verdict rule (the value evidence while no "
        "token tally came)."),
    NUM(N, "reuse_tokens", T_U64, gates.reuse_tokens, COUNTER, NULL,
        "Prompt tokens lookups found reused, in HBM or in the tier."),
    NUM(N, "token_tallies", T_U64, gates.token_tallies, COUNTER, NULL,
        "Tallies that carried token totals."),
    NUM(N, "orphans_declined", T_U64, gates.orphans_declined, COUNTER, NULL,
        "Value policy: operations declined because their parent chunk was declined."),
    NUM(N, "net_tokens", T_DOUBLE, gates.net_tokens, GAUGE, NULL,
        "Served tokens minus cost_ratio x written tokens."),
    OBJ("atom", atom_fields, "Policy atom: its share and the declines it would have made."),
    OBJ("value", value_fields, "Policy value: its share and the declines it would have made."),
    OBJ("ghost", ghost_fields, "The ghost table of declined chunks (docs/GATES.md)."),
    {.key = "reasons",
     .type = T_MAP,
     .kind = INFO,
     .help = "Verdict counts by reason name, summed over engines.",
     .metric = "kvtier_namespace_verdicts_total",
     .elem = &reason_elem,
     .items = ns_reasons,
     .elem_size = sizeof(gates_reason_t),
     .elem_key = reason_key,
     .elem_labels = reason_labels},
};

/* mean_lookup_us is carried by kvtier_namespace_lookup_duration_seconds (_sum / _count). */
static const stats_field_t lookup_skip_fields[] = {
    NUM(N, "enabled", T_BOOL, cfg.lookup_skip.enabled, GAUGE, NULL,
        "gates.lookup_skip.enabled: the gate skips lookups (else shadow mode)."),
    NUM(N, "min_load_tokens", T_U64, cfg.lookup_skip.min_load_tokens, GAUGE, NULL,
        "gates.lookup_skip.min_load_tokens: a load shorter than this cannot pay off (tokens)."),
    NUM(N, "lookups", T_U64, gates.lookups, COUNTER, NULL,
        "Lookups with prompt info fed into the estimator."),
    NUM(N, "act_ema", T_DOUBLE, gates.act_ema, GAUGE, "ratio",
        "Moving average of lookups that could have produced a load."),
    NUM(N, "load_bearing", T_BOOL, gates.load_bearing, GAUGE, NULL,
        "Whether the tier is measurably load-bearing (no lookup is skipped)."),
    NUM(N, "skips", T_U64, gates.skips, COUNTER, NULL, "Lookups answered without looking."),
    NUM(N, "forced_probes", T_U64, gates.forced_probes, COUNTER, NULL,
        "Skippable lookups answered as probes."),
    NUM(N, "would_skip", T_U64, gates.would_skip, COUNTER, NULL,
        "Shadow mode: lookups the enabled gate would have skipped."),
    NUM(N, "mean_lookup_us", T_DOUBLE, mean_lookup_us, GAUGE, "microseconds",
        "Mean service time of this namespace's lookups.", .no_metric = true),
};

static const stats_field_t gates_fields[] = {
    OBJ("admission", admission_fields, "The save-admission gate (docs/GATES.md)."),
    OBJ("lookup_skip", lookup_skip_fields, "The lookup-skip gate (docs/GATES.md)."),
};

static const stats_field_t ns_fields[] = {
    NUM(N, "id", T_U32, ns.id, INFO, NULL, "The namespace id clients name."),
    TXT(N, "model", T_CHARS, ns.model, "The model name."),
    TXT(N, "revision", T_CHARS, ns.revision, "The model revision (\"\": none named)."),
    TXT(N, "fingerprint", T_HEX64, ns.fingerprint, "The layout fingerprint, in hex."),
    NUM(N, "world", T_U16, ns.world, GAUGE, NULL, "Tensor-parallel ranks."),
    NUM(N, "replicated", T_BOOL, ns.replicated, GAUGE, NULL,
        "MLA: one copy of every chunk serves all ranks."),
    NUM(N, "chunk_tokens", T_U32, ns.chunk_tokens, GAUGE, NULL, "Tokens per chunk."),
    NUM(N, "chunks", T_U64, ns.chunks, GAUGE, NULL, "Stored chunks (all ranks)."),
    NUM(N, "bytes", T_U64, ns.bytes, GAUGE, "bytes", "Stored payload bytes (all ranks)."),
    NUM(N, "drops", T_U64, drops.drops, COUNTER, NULL,
        "Drops (kvtierctl drop, POST /admin/drop) that matched this namespace."),
    NUM(N, "dropped_chunks", T_U64, drops.chunks, COUNTER, NULL, "Chunks those drops removed."),
    NUM(N, "dropped_bytes", T_U64, drops.bytes, COUNTER, "bytes",
        "Payload bytes those drops removed."),
    OBJ("gates", gates_fields, "The namespace's gates.", .metric_prefix = ""),
    NUM(N, "lookup_duration", T_TIMING, lookup, GAUGE, "seconds",
        "Service time of this namespace's lookups.",
        .metric = "kvtier_namespace_lookup_duration_seconds"),
};

static const stats_field_t ns_elem = ELEM(ns_fields, "One namespace.");

ITEMS(doc_namespaces, stats_doc_t, namespaces, nnamespaces)
ITEMS(doc_ns_metrics, stats_doc_t, ns_metrics, nns_metrics)

static void ns_labels(const void *elem, char *buf, size_t cap)
{
    const stats_ns_t *n = elem;
    char id[16];

    snprintf(id, sizeof id, "%u", n->ns.id);
    label_append(buf, cap, "ns", n->ns.model);
    label_append(buf, cap, "revision", n->ns.revision);
    label_append(buf, cap, "id", id);
}

/* p50/p99 of the turns are carried by kvtier_loop_turn_duration_seconds (histogram_quantile() of
 * its buckets), like the service times of the ops; the JSON buckets by its _bucket series. */
static const stats_field_t bucket_elem =
    NUM(stats_bucket_t, NULL, T_U64, count, INFO, NULL,
        "Loop turns that took at most this many microseconds (cumulative).");

ITEMS(doc_turn_buckets, stats_doc_t, turn_buckets, nturn_buckets)
ITEMS(doc_cpu_buckets, stats_doc_t, cpu_buckets, ncpu_buckets)

static const char *bucket_key(const void *elem)
{
    return ((const stats_bucket_t *)elem)->key;
}

static const stats_field_t turn_fields[] = {
    NUM(D, "p50_us", T_U64, loop.p50_us, GAUGE, "microseconds", "Median loop turn.",
        .no_metric = true),
    NUM(D, "p99_us", T_U64, loop.p99_us, GAUGE, "microseconds", "99th percentile of loop turns.",
        .no_metric = true),
    NUM(D, "max_us", T_U64, loop.max_us, GAUGE, "microseconds", "Longest loop turn.",
        .metric = "kvtier_loop_turn_max_duration_seconds"),
    {.key = "buckets",
     .type = T_MAP,
     .kind = INFO,
     .help = "Loop turns by duration: at most the key's microseconds (cumulative).",
     .elem = &bucket_elem,
     .items = doc_turn_buckets,
     .elem_size = sizeof(stats_bucket_t),
     .elem_key = bucket_key},
    NUM(D, "duration", T_HIST, loop.turns_hist, GAUGE, "seconds",
        "Loop-turn durations: every callback between two polls.",
        .metric = "kvtier_loop_turn_duration_seconds"),
};

static const stats_field_t turn_cpu_fields[] = {
    NUM(D, "p50_us", T_U64, loop.cpu_p50_us, GAUGE, "microseconds", "Median CPU time of a turn.",
        .no_metric = true),
    NUM(D, "p99_us", T_U64, loop.cpu_p99_us, GAUGE, "microseconds",
        "99th percentile of the CPU time of a turn.", .no_metric = true),
    NUM(D, "max_us", T_U64, loop.cpu_max_us, GAUGE, "microseconds", "Most CPU time of a turn.",
        .metric = "kvtier_loop_turn_cpu_max_seconds"),
    {.key = "buckets",
     .type = T_MAP,
     .kind = INFO,
     .help = "Loop turns by the loop thread's CPU time: at most the key's microseconds "
             "(cumulative; beside turn_us.buckets, what a turn did rather than how long the "
             "machine made it wait).",
     .elem = &bucket_elem,
     .items = doc_cpu_buckets,
     .elem_size = sizeof(stats_bucket_t),
     .elem_key = bucket_key},
    NUM(D, "duration", T_HIST, loop.cpu_hist, GAUGE, "seconds",
        "The loop thread's CPU time per turn.", .metric = "kvtier_loop_turn_cpu_seconds"),
};

static const stats_field_t loop_fields[] = {
    NUM(D, "busy_share", T_DOUBLE, loop.busy_share, GAUGE, "ratio",
        "Share of the last second the loop thread spent outside its poll (1: saturated).",
        .metric = "kvtier_loop_busy_ratio"),
    NUM(D, "busy_seconds", T_DOUBLE, loop.busy_seconds, COUNTER, "seconds",
        "Time the loop thread spent outside its poll since start (the turns' sum)."),
    NUM(D, "turns", T_U64, loop.turns, COUNTER, NULL, "Loop turns measured.", .no_metric = true),
    OBJ("turn_us", turn_fields, "Loop-turn durations: every callback between two polls.",
        .metric_prefix = "turn"),
    OBJ("turn_cpu_us", turn_cpu_fields,
        "The loop thread's CPU time per turn (a turn's wall time also holds the time the "
        "scheduler made it wait).",
        .metric_prefix = "turn_cpu"),
};

static const stats_field_t memory_fields[] = {
    NUM(D, "rss_anon_bytes", T_U64, mem.rss_anon, GAUGE, "bytes",
        "The daemon's anonymous resident memory (its heap: the index, about 400 bytes a chunk, "
        "ghost tables, sessions, ZeroMQ's queues), measured (/proc/self/status RssAnon)."),
    NUM(D, "rss_shmem_bytes", T_U64, mem.rss_shmem, GAUGE, "bytes",
        "Shared memory resident in the daemon (the arena pages it has touched: RssShmem)."),
    NUM(D, "peak_rss_bytes", T_U64, mem.peak_rss, GAUGE, "bytes",
        "The largest resident set the daemon has had (VmHWM)."),
};

/* Not in the metrics: server.namespaces_declared is the total. */
static const stats_field_t page_fields[] = {
    NUM(D, "total", T_U32, page.total, GAUGE, NULL, "Namespaces that exist.", .no_metric = true),
    NUM(D, "offset", T_U32, page.offset, INFO, NULL, "The offset of the first one listed."),
    NUM(D, "shown", T_U32, page.shown, INFO, NULL, "How many are listed."),
    NUM(D, "next", T_U32, page.next, INFO, NULL,
        "The offset of the next page (?namespaces=NEXT), 0 when this is the last."),
};

static const stats_field_t doc_fields[] = {
    TXT(D, "version", T_STR, version, "kvtierd's version (the label of kvtier_build_info).",
        .metric = "kvtier_build_info", .labels = "version"),
    NUM(D, "uptime_s", T_DOUBLE, uptime_s, GAUGE, "seconds", "Time since the daemon started."),
    NUM(D, "pid", T_I64, pid, INFO, NULL, "The daemon's process id."),
    TXT(D, "endpoint", T_STR, endpoint, "The ZeroMQ endpoint it serves."),
    OBJ("ram", ram_fields, "The RAM tier."),
    OBJ("disk", disk_fields, "The disk tier."),
    OBJ("loop", loop_fields, "The loop thread: how busy it is and how long its turns take."),
    OBJ("memory", memory_fields, "The daemon's own memory, measured (0.2.7)."),
    OBJ("server", server_fields, "Requests, replies and sessions."),
    OBJ("config", config_fields, "The configuration file and its reloads."),
    {.key = "ops",
     .type = T_MAP,
     .kind = INFO,
     .help = "Per request type.",
     .elem = &op_elem,
     .items = doc_ops,
     .elem_size = sizeof(stats_op_t),
     .elem_key = op_key,
     .elem_labels = op_labels,
     .metric_prefix = "op"},
    {.key = "namespaces",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The namespaces, in table order: at most 64 per document (namespaces_page).",
     .elem = &ns_elem,
     .items = doc_namespaces,
     .metric_items = doc_ns_metrics,
     .elem_size = sizeof(stats_ns_t),
     .elem_labels = ns_labels,
     .metric_prefix = "namespace"},
    OBJ("namespaces_page", page_fields,
        "Which namespaces this document lists: GET /status?namespaces=OFFSET for the others."),
};

#undef N
#undef D

/* --- values --- */

static uint64_t num_u64(const stats_field_t *f, const char *base)
{
    const void *p = base + f->off;

    switch (f->type) {
    case T_U16:
        return *(const uint16_t *)p;
    case T_U32:
        return *(const uint32_t *)p;
    case T_U64:
        return *(const uint64_t *)p;
    case T_I64:
        return (uint64_t) * (const int64_t *)p;
    case T_BOOL:
        return *(const bool *)p;
    default:
        return 0;
    }
}

static int word_of(const stats_field_t *f, const char *base)
{
    int v;

    memcpy(&v, base + f->off, sizeof v);
    return v;
}

static bool is_metrics_only(const stats_field_t *f)
{
    return f->type == T_HIST || f->type == T_TIMING;
}

/* --- JSON --- */

static json_t *json_fields(const stats_field_t *fields, size_t n, const char *base);

/* A histogram's non-empty buckets, in order, as [lo, hi, count]: count values from lo to hi
 * (microseconds, both included; the overflow bucket's hi is the largest value recorded). The
 * boundaries are hist.c's, fixed, so two documents' counts of the same lo subtract into the
 * histogram of the requests served between them (kvtier-bench's windowed percentiles). */
static json_t *json_buckets(const hist_t *h)
{
    json_t *a = json_array();

    for (unsigned i = 0; a != NULL && i < HIST_BUCKETS; i++) {
        uint64_t lo, hi;

        if (h->buckets[i] == 0)
            continue;
        lo = hist_bucket_lo(i);
        hi = i + 1 < HIST_BUCKETS ? hist_bucket_lo(i + 1) - 1 : (h->max > lo ? h->max : lo);
        json_array_append_new(
            a, json_pack("[I,I,I]", (json_int_t)lo, (json_int_t)hi, (json_int_t)h->buckets[i]));
    }
    return a;
}

static json_t *json_value(const stats_field_t *f, const char *base)
{
    const void *p = base + f->off;
    const char *first;
    char hex[17];
    json_t *c;
    size_t n;
    int e;

    switch (f->type) {
    case T_U16:
    case T_U32:
    case T_U64: {
        /* JSON integers are signed 64-bit here (jansson): a counter past 2^63 (a saturated gate
         * sum, UINT64_MAX) reads as the largest one rather than as a negative number */
        uint64_t u = num_u64(f, base);
        return json_integer(u > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)u);
    }
    case T_I64:
        return json_integer((json_int_t) * (const int64_t *)p);
    case T_DOUBLE:
        return json_real(*(const double *)p);
    case T_BOOL:
        return json_boolean(*(const bool *)p);
    case T_STR:
        return json_string(*(const char *const *)p != NULL ? *(const char *const *)p : "");
    case T_CHARS:
        return json_string(p);
    case T_HEX64:
        snprintf(hex, sizeof hex, "%016" PRIx64, *(const uint64_t *)p);
        return json_string(hex);
    case T_ERRNO:
        e = *(const int *)p;
        return json_string(e != 0 ? strerror(-e) : "");
    case T_WORD:
        return json_string(f->words[word_of(f, base)]);
    case T_OBJECT:
        return json_fields(f->fields, f->nfields, base + f->off);
    case T_ARRAY:
        c = json_array();
        n = f->items(base, (const void **)&first);
        for (size_t i = 0; c != NULL && i < n; i++) {
            json_t *v = json_value(f->elem, first + i * f->elem_size);
            if (v != NULL) /* an element that cannot be written is left out */
                json_array_append_new(c, v);
        }
        return c;
    case T_MAP:
        c = json_object();
        n = f->items(base, (const void **)&first);
        for (size_t i = 0; c != NULL && i < n; i++) {
            const char *elem = first + i * f->elem_size;
            /* a key that is not UTF-8 is refused by jansson: that entry is left out */
            json_object_set_new(c, f->elem_key(elem), json_value(f->elem, elem));
        }
        return c;
    case T_BUCKETS:
        return json_buckets(*(const hist_t *const *)p);
    case T_HIST:
    case T_TIMING:
        break;
    }
    return NULL;
}

/* An object of the rows present at base; NULL when a member cannot be written (then its
 * element is left out of its array, as json_pack did). */
static json_t *json_fields(const stats_field_t *fields, size_t n, const char *base)
{
    json_t *o = json_object();

    for (size_t i = 0; o != NULL && i < n; i++) {
        const stats_field_t *f = &fields[i];
        json_t *v;

        if ((f->when != NULL && !f->when(base)) || is_metrics_only(f))
            continue;
        v = json_value(f, base);
        if (v == NULL || json_object_set_new(o, f->key, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* The offset of a query "namespaces=N" (other keys and malformed values are ignored). */
static uint32_t query_offset(const char *query)
{
    const char *p = query;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, "namespaces=", 11) == 0) {
            char *end;
            unsigned long v = strtoul(p + 11, &end, 10);
            if (end != p + 11 && (*end == '\0' || *end == '&') && v <= NS_MAX)
                return (uint32_t)v;
        }
        p = strchr(p, '&');
        if (p != NULL)
            p++;
    }
    return 0;
}

int stats_status_json_query(const server_t *sv, const char *query, char **body, size_t *len)
{
    stats_doc_t *d = doc_take(sv, query_offset(query), STATS_NS_PAGE);
    json_t *root = d != NULL ? json_fields(doc_fields, NFIELDS(doc_fields), (const char *)d) : NULL;

    doc_free(d);
    if (root == NULL)
        return -ENOMEM;
    /* 17 significant digits: every double (payoff, act_ema, ...) reads back exactly */
    *body = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (*body == NULL)
        return -ENOMEM;
    *len = strlen(*body);
    return 0;
}

/* --- Prometheus text --- */

/* Appends to a growing buffer; on allocation failure the document is dropped at the end. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool failed;
} textbuf_t;

/* Grows the buffer to hold n more bytes and a NUL; false (and failed) when out of memory. */
static bool tb_room(textbuf_t *tb, size_t n)
{
    size_t ncap = (tb->cap + n + 1) * 2;
    char *nb = realloc(tb->buf, ncap);

    if (nb == NULL) {
        tb->failed = true;
        return false;
    }
    tb->buf = nb;
    tb->cap = ncap;
    return true;
}

static void tb_printf(textbuf_t *tb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void tb_printf(textbuf_t *tb, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (tb->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(tb->buf + tb->len, tb->cap - tb->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            tb->failed = true;
            return;
        }
        if ((size_t)n < tb->cap - tb->len) {
            tb->len += (size_t)n;
            return;
        }
        if (!tb_room(tb, (size_t)n))
            return;
    }
}

/* Appends n bytes of s as they are (no formatting). */
static void tb_put(textbuf_t *tb, const char *s, size_t n)
{
    if (tb->failed || n == 0 || (n >= tb->cap - tb->len && !tb_room(tb, n)))
        return;
    memcpy(tb->buf + tb->len, s, n);
    tb->len += n;
    tb->buf[tb->len] = '\0';
}

/* One place of a row: the struct it is read from (NULL: an aggregate parent without elements,
 * which contributes 0) and the labels of the collections around it. */
typedef struct {
    const char *base;
    char labels[STATS_LABELS_MAX];
} inst_t;

typedef struct {
    inst_t *v;
    size_t n, cap;
    bool failed;
} insts_t;

static inst_t *insts_add(insts_t *s)
{
    if (ARRAY_RESERVE(s->v, s->n, s->cap, 16) != 0) {
        s->failed = true;
        return NULL;
    }
    return &s->v[s->n++];
}

typedef struct {
    textbuf_t tb;
    char last_family[STATS_NAME_MAX]; /* rows sharing a family are adjacent: one header */
} mwalk_t;

/* The shortest text that reads back as v. */
static void fmt_double(char *buf, size_t cap, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The family name of row f at prefix (see the design note at the top). */
static void family_name(const stats_field_t *f, const char *key, const char *prefix, char *out,
                        size_t cap)
{
    char leaf[STATS_NAME_MAX];
    size_t n;

    if (f->metric != NULL) {
        snprintf(out, cap, "%s", f->metric);
        return;
    }
    snprintf(leaf, sizeof leaf, "%s", key);
    n = strlen(leaf);
    if (f->unit != NULL &&
        (strcmp(f->unit, "milliseconds") == 0 || strcmp(f->unit, "microseconds") == 0)) {
        if (strcmp(leaf, "ms") == 0 || strcmp(leaf, "us") == 0)
            leaf[0] = '\0';
        else if (ends_with(leaf, "_ms") || ends_with(leaf, "_us"))
            leaf[n - 3] = '\0';
        snprintf(leaf + strlen(leaf), sizeof leaf - strlen(leaf), "%sseconds", leaf[0] ? "_" : "");
    } else if (f->unit != NULL && strcmp(f->unit, "seconds") == 0) {
        if (ends_with(leaf, "_s"))
            leaf[n - 2] = '\0';
        if (!ends_with(leaf, "seconds"))
            snprintf(leaf + strlen(leaf), sizeof leaf - strlen(leaf), "_seconds");
    } else if (f->unit != NULL && strcmp(f->unit, "bytes") == 0 && !ends_with(leaf, "bytes")) {
        char *b = strstr(leaf, "bytes_");
        if (b != NULL)
            memmove(b, b + 6, strlen(b + 6) + 1);
        snprintf(leaf + strlen(leaf), sizeof leaf - strlen(leaf), "_bytes");
    }
    snprintf(out, cap, "kvtier%s%s_%s%s", prefix[0] ? "_" : "", prefix, leaf,
             f->kind == COUNTER ? "_total" : "");
}

/* What a row's values are divided by to be in base units (a division, not a multiplication by
 * 1e-6, so that 33 us prints as 3.3e-05). */
static double unit_divisor(const stats_field_t *f)
{
    if (f->unit != NULL && strcmp(f->unit, "milliseconds") == 0)
        return 1e3;
    if (f->unit != NULL && strcmp(f->unit, "microseconds") == 0)
        return 1e6;
    return 1.0;
}

static void header(mwalk_t *w, const char *name, const char *help, const char *type)
{
    if (strcmp(w->last_family, name) == 0)
        return;
    snprintf(w->last_family, sizeof w->last_family, "%s", name);
    tb_printf(&w->tb, "# HELP %s ", name);
    /* the help text in runs between the characters Prometheus wants escaped (one printf per
     * character made /metrics a millisecond of loop time) */
    for (const char *p = help; *p != '\0';) {
        size_t run = strcspn(p, "\\\n");
        tb_put(&w->tb, p, run);
        p += run;
        if (*p == '\\')
            tb_put(&w->tb, "\\\\", 2);
        else if (*p == '\n')
            tb_put(&w->tb, "\\n", 2);
        if (*p != '\0')
            p++;
    }
    tb_printf(&w->tb, "\n# TYPE %s %s\n", name, type);
}

static void sample(mwalk_t *w, const char *name, const char *suffix, const char *l1, const char *l2,
                   const char *value)
{
    bool any = l1[0] != '\0' || l2[0] != '\0';

    tb_printf(&w->tb, "%s%s%s%s%s%s%s %s\n", name, suffix, any ? "{" : "", l1,
              l1[0] && l2[0] ? "," : "", l2, any ? "}" : "", value);
}

/* The value of numeric row f in inst (0 for an empty aggregate parent). */
static double num_value(const stats_field_t *f, const char *base)
{
    if (base == NULL)
        return 0.0;
    if (f->type == T_DOUBLE)
        return *(const double *)(base + f->off);
    return (double)num_u64(f, base);
}

static void emit_number(mwalk_t *w, const stats_field_t *f, const char *name, const insts_t *in,
                        bool agg)
{
    double div = unit_divisor(f);
    bool exact = f->type != T_DOUBLE && div == 1.0;
    char val[40];

    header(w, name, f->help, f->kind == COUNTER ? "counter" : "gauge");
    for (size_t i = 0; i < in->n;) {
        const inst_t *it = &in->v[i];
        uint64_t u = 0;
        double v = 0.0;
        size_t j = i;

        /* an aggregate: every consecutive instance with the same labels folds into one */
        do {
            const char *b = in->v[j].base;
            uint64_t x = b != NULL && exact ? num_u64(f, b) : 0;
            double y = num_value(f, b);
            if (f->agg_max) {
                u = x > u ? x : u;
                v = y > v ? y : v;
            } else {
                u += x;
                v += y;
            }
            j++;
        } while (agg && j < in->n && strcmp(in->v[j].labels, it->labels) == 0);
        i = j;
        if (exact)
            snprintf(val, sizeof val, "%" PRIu64, u);
        else
            fmt_double(val, sizeof val, v / div);
        sample(w, name, "", it->labels, f->labels != NULL ? f->labels : "", val);
    }
}

static void emit_hist(mwalk_t *w, const stats_field_t *f, const char *name, const insts_t *in)
{
    char val[40], le[48];

    header(w, name, f->help, "histogram");
    for (size_t i = 0; i < in->n; i++) {
        const hist_t *h =
            in->v[i].base != NULL ? *(const hist_t *const *)(in->v[i].base + f->off) : NULL;
        uint64_t count = h != NULL ? hist_count(h) : 0;

        for (int k = STATS_HIST_LO_EXP; k <= STATS_HIST_HI_EXP; k++) {
            uint64_t edge = 1ull << k;
            snprintf(le, sizeof le, "le=\"%.6f\"", (double)edge / 1e6);
            snprintf(val, sizeof val, "%" PRIu64, h != NULL ? hist_count_below(h, edge) : 0);
            sample(w, name, "_bucket", in->v[i].labels, le, val);
        }
        snprintf(val, sizeof val, "%" PRIu64, count);
        sample(w, name, "_bucket", in->v[i].labels, "le=\"+Inf\"", val);
        fmt_double(val, sizeof val, h != NULL ? (double)hist_sum(h) / 1e6 : 0.0);
        sample(w, name, "_sum", in->v[i].labels, "", val);
        snprintf(val, sizeof val, "%" PRIu64, count);
        sample(w, name, "_count", in->v[i].labels, "", val);
    }
}

static void emit_timing(mwalk_t *w, const stats_field_t *f, const char *name, const insts_t *in)
{
    char val[40];

    header(w, name, f->help, "summary");
    for (size_t i = 0; i < in->n; i++) {
        const server_timing_t *t =
            in->v[i].base != NULL ? (const server_timing_t *)(in->v[i].base + f->off) : NULL;
        fmt_double(val, sizeof val, t != NULL ? (double)t->sum_us / 1e6 : 0.0);
        sample(w, name, "_sum", in->v[i].labels, "", val);
        snprintf(val, sizeof val, "%" PRIu64, t != NULL ? t->count : 0);
        sample(w, name, "_count", in->v[i].labels, "", val);
    }
}

/* A WORD row with a family: one sample per word; a string row: an info metric. */
static void emit_labelled(mwalk_t *w, const stats_field_t *f, const insts_t *in)
{
    char lab[STATS_LABELS_MAX];

    header(w, f->metric, f->help, "gauge");
    for (size_t i = 0; i < in->n; i++) {
        const char *b = in->v[i].base;
        if (b == NULL)
            continue;
        if (f->type == T_WORD) {
            for (int k = 0; f->words[k] != NULL; k++) {
                lab[0] = '\0';
                label_append(lab, sizeof lab, f->labels, f->words[k]);
                sample(w, f->metric, "", in->v[i].labels, lab, k == word_of(f, b) ? "1" : "0");
            }
        } else {
            const char *s = f->type == T_STR ? *(const char *const *)(b + f->off) : b + f->off;
            lab[0] = '\0';
            label_append(lab, sizeof lab, f->labels, s != NULL ? s : "");
            sample(w, f->metric, "", in->v[i].labels, lab, "1");
        }
    }
}

static void metrics_rows(mwalk_t *w, const stats_field_t *fields, size_t n, const insts_t *in,
                         const char *prefix, bool agg);

/* out = a "," b (either may be empty), truncated to cap. */
static void labels_join(char *out, size_t cap, const char *a, const char *b)
{
    size_t n = strnlen(a, cap - 1), m;

    memcpy(out, a, n);
    if (n > 0 && b[0] != '\0' && n + 1 < cap)
        out[n++] = ',';
    m = strnlen(b, cap - 1 - n);
    memcpy(out + n, b, m);
    out[n + m] = '\0';
}

/* Row f, read at every instance of in where it is present. */
static void metrics_row(mwalk_t *w, const stats_field_t *f, const insts_t *in, const char *prefix,
                        bool agg)
{
    insts_t sub = {0};
    char name[STATS_NAME_MAX], path[STATS_NAME_MAX];
    const char *part = f->metric_prefix != NULL ? f->metric_prefix : f->key;

    snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] && part[0] ? "_" : "", part);
    for (size_t i = 0; i < in->n; i++) {
        const inst_t *it = &in->v[i];
        if (it->base != NULL && f->when != NULL && !f->when(it->base))
            continue;
        if (f->type == T_ARRAY || f->type == T_MAP) {
            const char *first;
            size_t ne = 0;
            bool added = false;

            if (it->base != NULL)
                ne = (f->metric_items != NULL ? f->metric_items : f->items)(it->base,
                                                                            (const void **)&first);
            for (size_t e = 0; e < ne; e++) {
                const char *elem = first + e * f->elem_size;
                char own[STATS_LABELS_MAX] = "";
                inst_t *s;

                if (!f->aggregate && f->elem_labels != NULL) {
                    f->elem_labels(elem, own, sizeof own);
                    if (own[0] == '\0')
                        continue; /* an element that cannot be labelled is left out */
                }
                if ((s = insts_add(&sub)) == NULL)
                    break;
                s->base = elem;
                labels_join(s->labels, sizeof s->labels, it->labels, own);
                added = true;
            }
            if (f->aggregate && !added) {
                inst_t *s = insts_add(&sub);
                if (s != NULL) {
                    s->base = NULL;
                    snprintf(s->labels, sizeof s->labels, "%s", it->labels);
                }
            }
        } else {
            inst_t *s = insts_add(&sub);
            if (s == NULL)
                break;
            s->base = it->base != NULL ? it->base + (f->type == T_OBJECT ? f->off : 0) : NULL;
            memcpy(s->labels, it->labels, sizeof s->labels);
        }
    }
    if (sub.failed) {
        w->tb.failed = true;
    } else if (f->type == T_OBJECT) {
        metrics_rows(w, f->fields, f->nfields, &sub, path, agg);
    } else if (f->type == T_ARRAY || f->type == T_MAP) {
        if (f->elem->type == T_OBJECT)
            metrics_rows(w, f->elem->fields, f->elem->nfields, &sub, path, agg || f->aggregate);
        else if (f->elem->kind != INFO && sub.n > 0) {
            stats_field_t leaf = *f->elem;
            leaf.metric = f->metric;
            family_name(&leaf, f->key, prefix, name, sizeof name);
            emit_number(w, &leaf, name, &sub, agg || f->aggregate);
        }
    } else if (sub.n == 0) {
        /* not present anywhere: no family */
    } else if (f->type == T_HIST) {
        family_name(f, f->key, prefix, name, sizeof name);
        emit_hist(w, f, name, &sub);
    } else if (f->type == T_TIMING) {
        family_name(f, f->key, prefix, name, sizeof name);
        emit_timing(w, f, name, &sub);
    } else if (f->kind == INFO) {
        if (f->metric != NULL && (f->type == T_WORD || f->type == T_STR || f->type == T_CHARS))
            emit_labelled(w, f, &sub);
    } else if (!f->no_metric) {
        family_name(f, f->key, prefix, name, sizeof name);
        emit_number(w, f, name, &sub, agg);
    }
    free(sub.v);
}

static void metrics_rows(mwalk_t *w, const stats_field_t *fields, size_t n, const insts_t *in,
                         const char *prefix, bool agg)
{
    for (size_t i = 0; i < n && !w->tb.failed; i++)
        metrics_row(w, &fields[i], in, prefix, agg);
}

int stats_metrics_text(const server_t *sv, char **body, size_t *len)
{
    stats_doc_t *d = doc_take(sv, 0, 0);
    mwalk_t w = {.tb = {.cap = 16384}};
    inst_t root = {.base = (const char *)d};
    insts_t in = {.v = &root, .n = 1, .cap = 1};

    w.tb.buf = malloc(w.tb.cap);
    if (d == NULL || w.tb.buf == NULL) {
        doc_free(d);
        free(w.tb.buf);
        return -ENOMEM;
    }
    w.tb.buf[0] = '\0';
    metrics_rows(&w, doc_fields, NFIELDS(doc_fields), &in, "", false);
    doc_free(d);
    if (w.tb.failed) {
        free(w.tb.buf);
        return -ENOMEM;
    }
    *body = w.tb.buf;
    *len = w.tb.len;
    return 0;
}

/* --- the one-line summary --- */

void stats_summary_line(const server_t *sv, char *buf, size_t cap)
{
    stats_doc_t *d = doc_take(sv, 0, 0);
    uint64_t asked;
    size_t n;

    if (d == NULL) {
        snprintf(buf, cap, "Serving");
        return;
    }
    asked = d->ram.counts.hits + d->ram.counts.misses;
    /* MiB throughout: one unit keeps the line short and comparable from refresh to refresh */
    snprintf(buf, cap, "Serving: RAM %" PRIu64 " of %" PRIu64 " MiB (%" PRIu64 " chunks), disk %s",
             d->ram.used_bytes >> 20, d->ram.capacity_bytes >> 20, d->ram.chunks,
             disk_state_words[d->disk.state]);
    n = strlen(buf);
    if (tier_open(d))
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, " %" PRIu64 " of %" PRIu64 " MiB",
                              d->disk.tier.used_bytes >> 20, d->disk.tier.capacity_bytes >> 20);
    if (n < cap)
        snprintf(buf + n, cap - n, ", %u clients, %zu namespaces, hit rate %.1f%%", d->clients,
                 d->nnamespaces,
                 asked > 0 ? 100.0 * (double)d->ram.counts.hits / (double)asked : 0.0);
    doc_free(d);
}
