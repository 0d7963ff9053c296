/*
 * stats.c - GET /status and GET /metrics from one table of fields (see stats.h).
 *
 * Design. A request takes one snapshot (stats_doc_t) of every figure through server_view() and
 * the engines' getters: store_ram_stats, store_disk_stats, sessions_info, gates_state, the
 * server's counters. The documents are then pure functions of the snapshot, driven by the
 * tables below: a row names a JSON key and the place of its value (an offset into the struct
 * being rendered), its type, counter or gauge, unit and help; objects nest rows, arrays and maps
 * take their elements from a small accessor and render each with an element row. The JSON
 * walk builds the jansson tree in table order (the document's key order); the metrics walk
 * prints the rows that name a Prometheus family, in the same order, with the labels of the
 * elements they are in (op="...", ns="...",id="...") and their own fixed labels.
 *
 * This module sits above every engine it reads (server, store, sessions, namespaces) and below
 * main.c only; it changes nothing it reads. The status words of enumerations (disk state,
 * session data path) are here, beside the keys; the compression words are codec.h's (the same
 * list parses the configuration).
 *
 * Behaviour kept from the documents as they were: a namespace whose model name is not valid
 * UTF-8 is left out of "namespaces" (jansson refuses the string), a reason name that is not is
 * left out of "reasons", and label values are written unescaped.
 *
 * Threads: loop thread only.
 */
#include "stats.h"

#include "codec.h"
#include "gates.h"
#include "hist.h"
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

#define STATS_SESSIONS_MAX 256 /* sessions listed in status, most recently active first */
#define STATS_LABELS_MAX 512   /* bytes of the labels of one metric line */

/* --- the snapshot --- */

typedef struct {
    const char *name;
    uint64_t count, p50_us, p99_us, max_us;
} stats_op_t;

typedef struct {
    ns_t ns;
    gates_cfg_t cfg;
    gates_state_t gates;
    double mean_lookup_us;
} stats_ns_t;

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
    server_counters_t server; /* a copy; its op_latency pointer is not followed */
    session_info_t *sessions;
    size_t nsessions;
    stats_op_t *ops;
    size_t nops;
    stats_ns_t *namespaces;
    size_t nnamespaces;
} stats_doc_t;

static void doc_free(stats_doc_t *d)
{
    if (d == NULL)
        return;
    free(d->sessions);
    free(d->ops);
    free(d->namespaces);
    free(d);
}

static stats_doc_t *doc_take(const server_t *sv)
{
    stats_doc_t *d = calloc(1, sizeof *d);
    server_view_t v;
    uint32_t nns;

    if (d == NULL)
        return NULL;
    server_view(sv, &v);
    nns = ns_count(v.namespaces);
    d->sessions = calloc(STATS_SESSIONS_MAX, sizeof *d->sessions);
    d->ops = calloc(server_op_count(), sizeof *d->ops);
    d->namespaces = calloc(nns > 0 ? nns : 1, sizeof *d->namespaces);
    if (d->sessions == NULL || d->ops == NULL || d->namespaces == NULL) {
        doc_free(d);
        return NULL;
    }
    d->version = KVT_VERSION_STRING;
    d->uptime_s = (double)(v.now_ms - v.start_ms) / 1000.0;
    d->pid = getpid();
    d->endpoint = v.cfg->server.endpoint;
    store_ram_stats(v.store, v.now_ms, &d->ram);
    d->reserved_bytes = sessions_reserved_bytes(v.sessions);
    d->pinned_bytes = sessions_pinned_bytes(v.sessions);
    store_disk_stats(v.store, &d->disk);
    d->clients = sessions_count(v.sessions);
    d->save_ops_remembered = admission_remembered(v.admission);
    d->server = *v.counters;
    d->nsessions = sessions_info(v.sessions, v.now_ms, d->sessions, STATS_SESSIONS_MAX);
    d->nops = server_op_count();
    for (size_t i = 0; i < d->nops; i++) {
        const hist_t *h = &v.counters->op_latency[i];
        d->ops[i] = (stats_op_t){.name = server_op_name(i),
                                 .count = hist_count(h),
                                 .p50_us = hist_percentile(h, 50.0),
                                 .p99_us = hist_percentile(h, 99.0),
                                 .max_us = hist_max(h)};
    }
    for (uint32_t id = 1; id <= nns; id++) {
        const ns_t *ns = ns_get(v.namespaces, id);
        const server_timing_t *lt = &v.counters->ns_lookup[id];
        stats_ns_t *o = &d->namespaces[d->nnamespaces++];

        o->ns = *ns;
        o->cfg = *gates_cfg(ns->gates);
        gates_state(ns->gates, &o->gates);
        o->mean_lookup_us = lt->count ? (double)lt->sum_us / (double)lt->count : 0.0;
    }
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
    T_STR,    /* const char * */
    T_CHARS,  /* a NUL-terminated char array */
    T_HEX64,  /* a uint64_t written as 16 lowercase hex digits */
    T_ERRNO,  /* an int: "" for 0, else strerror of its negation */
    T_WORD,   /* an int-sized enum written as words[value] */
    T_OBJECT, /* fields[], offsets relative to base + off */
    T_ARRAY,  /* items(): each element rendered by elem */
    T_MAP,    /* items(): each element rendered by elem under the key elem_key() */
} stats_type_t;

typedef enum {
    GAUGE,   /* a value that goes up and down */
    COUNTER, /* only goes up while the daemon runs */
    INFO,    /* not a number: exported as a label if at all */
} stats_kind_t;

typedef struct stats_field stats_field_t;

struct stats_field {
    const char *key; /* NULL for an element row */
    stats_type_t type;
    size_t off;
    stats_kind_t kind;
    const char *unit; /* a base unit ("bytes", "seconds", ...), or NULL for a count */
    const char *help;
    const char *metric; /* the Prometheus family that carries this row today, or NULL */
    const char *labels; /* that family's fixed labels for this row, or NULL */
    const char *const *words;
    const stats_field_t *fields;
    size_t nfields;
    const stats_field_t *elem;
    size_t (*items)(const void *base, const void **first);
    size_t elem_size;
    const char *(*elem_key)(const void *elem);
    void (*elem_labels)(const void *elem, char *buf, size_t cap);
    bool (*when)(const void *base);
};

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* A numeric row of struct st: key, type, member, kind, unit, help. */
#define NUM(st, k, t, m, kd, u, h)                                                                 \
    {                                                                                              \
        .key = k, .type = t, .off = offsetof(st, m), .kind = kd, .unit = u, .help = h              \
    }
/* The same with the Prometheus family (and fixed labels) it has today. */
#define NUMM(st, k, t, m, kd, u, h, fam, lab)                                                      \
    {                                                                                              \
        .key = k, .type = t, .off = offsetof(st, m), .kind = kd, .unit = u, .help = h,             \
        .metric = fam, .labels = lab                                                               \
    }
/* A non-numeric row. */
#define TXT(st, k, t, m, h)                                                                        \
    {                                                                                              \
        .key = k, .type = t, .off = offsetof(st, m), .kind = INFO, .help = h                       \
    }
#define WORD(st, k, m, list, h)                                                                    \
    {                                                                                              \
        .key = k, .type = T_WORD, .off = offsetof(st, m), .kind = INFO, .help = h, .words = list   \
    }
#define OBJ(k, list, h)                                                                            \
    {                                                                                              \
        .key = k, .type = T_OBJECT, .kind = INFO, .help = h, .fields = list,                       \
        .nfields = NFIELDS(list)                                                                   \
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

static bool tier_open(const void *base)
{
    const stats_doc_t *d = base;

    return d->disk.state == STORE_DISK_OK || d->disk.state == STORE_DISK_DEGRADED;
}

static bool tier_closed(const void *base)
{
    return !tier_open(base);
}

#define D stats_doc_t
#define RAMM(k, m, kd, u, h) NUMM(D, k, T_U64, ram.m, kd, u, h, "kvtier_ram_" k, NULL)

static const stats_field_t ram_fields[] = {
    RAMM("capacity_bytes", capacity_bytes, GAUGE, "bytes", "Size of the RAM arena."),
    RAMM("used_bytes", used_bytes, GAUGE, "bytes",
         "Arena bytes allocated, rounded to allocation units (at most the capacity)."),
    RAMM("resident_bytes", resident_bytes, GAUGE, "bytes",
         "Arena bytes backed by memory (the arena file's allocated blocks)."),
    RAMM("stored_bytes", stored_bytes, GAUGE, "bytes", "Payload bytes of the chunks in RAM."),
    RAMM("chunks", chunks, GAUGE, NULL, "Chunks in RAM."),
    RAMM("index_chunks", index_chunks, GAUGE, NULL, "Chunks in the index, in any tier."),
    RAMM("hits", counts.hits, COUNTER, NULL,
         "Chunks asked by lookups (per rank) and loads and found, in any tier."),
    RAMM("misses", counts.misses, COUNTER, NULL,
         "Chunks asked by lookups (per rank) and loads and not found."),
    RAMM("evictions", counts.evictions, COUNTER, NULL, "Chunks evicted from RAM to make room."),
    RAMM("nospace", counts.nospace, COUNTER, NULL,
         "Chunks refused for lack of evictable space (everything evictable was pinned)."),
    RAMM("leased_chunks", leased_chunks, GAUGE, NULL, "Chunks under an unexpired lookup lease."),
    RAMM("free_runs", free_runs, GAUGE, NULL, "Free extents of the arena."),
    RAMM("largest_free_bytes", largest_free_bytes, GAUGE, "bytes",
         "The largest free extent of the arena."),
    TXT(D, "arena_path", T_STR, ram.arena_path, "The arena file (\"\" for an anonymous memfd)."),
    NUM(D, "reserved_bytes", T_U64, reserved_bytes, GAUGE, "bytes",
        "Arena bytes reserved by shared-memory saves not committed yet."),
    NUM(D, "pinned_bytes", T_U64, pinned_bytes, GAUGE, "bytes",
        "Bytes of chunks pinned by shared-memory loads not released yet."),
};

static const stats_field_t recovery_fields[] = {
    NUM(D, "ms", T_U64, disk.tier.recovery.ms, GAUGE, "milliseconds",
        "Time the recovery at start took."),
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
};

/* With the tier open, the disk module's figures; without, state, error and zero sizes. */
#define DISK(k, m, kd, u, h)                                                                       \
    {                                                                                              \
        .key = k, .type = T_U64, .off = offsetof(D, disk.tier.m), .kind = kd, .unit = u,           \
        .help = h, .when = tier_open                                                               \
    }

static const stats_field_t disk_fields[] = {
    NUM(D, "enabled", T_BOOL, disk.enabled, GAUGE, NULL, "Whether disk.enabled is set."),
    WORD(D, "state", disk.state, disk_state_words,
         "\"off\", \"unavailable\" (the directory could not be used), \"ok\" or \"degraded\" "
         "(a write failed: demotions are refused until the retry)."),
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
     .help = "The error of the last failed flush.",
     .when = tier_open},
    DISK("reclaimed_segments", reclaimed_segments, COUNTER, NULL,
         "Segments reclaimed (oldest first) to make room."),
    DISK("reclaims_deferred_by_leases", busy_reclaims, COUNTER, NULL,
         "Reclaims that took a later segment because the oldest held leased chunks."),
    DISK("reads_in_flight", reads_in_flight, GAUGE, NULL, "Reads running on the thread pool."),
    DISK("reads_queued", reads_queued, GAUGE, NULL, "Reads waiting for a slot."),
    DISK("write_buffer_bytes", write_buffer_bytes, GAUGE, "bytes",
         "Bytes in the filling and the flushing write buffer."),
    {.key = "recovery",
     .type = T_OBJECT,
     .kind = INFO,
     .help = "What the recovery found at start.",
     .fields = recovery_fields,
     .nfields = NFIELDS(recovery_fields),
     .when = tier_open},
    NUM(D, "chunks", T_U64, disk.counts.chunks, GAUGE, NULL, "Chunks with a disk copy."),
    NUM(D, "write_buffer_chunks", T_U64, disk.counts.wbuf, GAUGE, NULL,
        "Chunks waiting in the write buffer."),
    NUM(D, "hits", T_U64, disk.counts.hits, COUNTER, NULL,
        "Load chunks served by the disk tier (write buffer or a verified read)."),
    NUM(D, "misses", T_U64, disk.counts.misses, COUNTER, NULL,
        "Load chunks that missed RAM and that the disk tier could not serve."),
    NUM(D, "evictions", T_U64, disk.counts.evictions, COUNTER, NULL,
        "Chunks dropped with a reclaimed segment."),
    NUM(D, "demotions", T_U64, disk.counts.demoted, COUNTER, NULL,
        "RAM evictions written to the disk tier."),
    NUM(D, "demotions_clean", T_U64, disk.counts.demoted_clean, COUNTER, NULL,
        "RAM evictions whose disk copy existed already."),
    NUM(D, "demotions_refused", T_U64, disk.counts.refused, COUNTER, NULL,
        "RAM evictions dropped: the write buffer was full while a flush ran, or degraded."),
    NUM(D, "writes_lost", T_U64, disk.counts.write_lost, COUNTER, NULL,
        "Demoted chunks dropped because their flush failed."),
    NUM(D, "promotions", T_U64, disk.counts.promoted, COUNTER, NULL, "Chunks read back into RAM."),
    NUM(D, "orphaned", T_U64, disk.counts.orphaned, COUNTER, NULL,
        "Successors detached from a dropped chunk (kept, as orphans)."),
    NUM(D, "recovery_skipped", T_U64, disk.counts.recover_skipped, GAUGE, NULL,
        "Records found at start whose namespace conflicts with one declared before."),
};

#define ERR(k, e)                                                                                  \
    NUMM(D, k, T_U64, server.errors[e], COUNTER, NULL, "ERROR replies of class " k ".",            \
         "kvtier_errors_total", "class=\"" k "\"")

static const stats_field_t error_fields[] = {
    ERR("malformed", SERVER_ERR_MALFORMED),     ERR("version", SERVER_ERR_VERSION),
    ERR("unknown_ns", SERVER_ERR_UNKNOWN_NS),   ERR("too_big", SERVER_ERR_TOO_BIG),
    ERR("invalid", SERVER_ERR_INVALID),         ERR("conflict", SERVER_ERR_CONFLICT),
    ERR("unsupported", SERVER_ERR_UNSUPPORTED), ERR("busy", SERVER_ERR_BUSY),
};

ITEMS(session_namespaces, session_info_t, namespaces, nnamespaces)

static const stats_field_t session_ns_elem = {
    .type = T_U32, .kind = INFO, .help = "A namespace id the session declared."};

static const stats_field_t session_fields[] = {
    TXT(session_info_t, "id", T_CHARS, id, "The session's ZeroMQ routing id, in hex."),
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
        "Time since its last request."),
    NUM(session_info_t, "age_ms", T_U64, age_ms, GAUGE, "milliseconds",
        "Time since its first request."),
    NUM(session_info_t, "reserved_bytes", T_U64, reserved_bytes, GAUGE, "bytes",
        "Arena bytes its shared-memory saves reserved."),
    NUM(session_info_t, "pinned_bytes", T_U64, pinned_bytes, GAUGE, "bytes",
        "Bytes of chunks its shared-memory loads pinned."),
};

static const stats_field_t session_elem = ELEM(session_fields, "One session.");

ITEMS(doc_sessions, stats_doc_t, sessions, nsessions)

static const stats_field_t server_fields[] = {
    NUMM(D, "clients", T_U32, clients, GAUGE, NULL, "Sessions remembered.", "kvtier_clients", NULL),
    NUMM(D, "requests", T_U64, server.requests, COUNTER, NULL,
         "Requests received, well-formed or not.", "kvtier_requests_total", NULL),
    NUMM(D, "bytes_received", T_U64, server.bytes_received, COUNTER, "bytes",
         "SAVE_DATA payload bytes received.", "kvtier_bytes_received_total", NULL),
    NUMM(D, "bytes_sent", T_U64, server.bytes_sent, COUNTER, "bytes",
         "Reply bytes sent (every part after the routing id).", "kvtier_bytes_sent_total", NULL),
    NUM(D, "bytes_committed", T_U64, server.bytes_committed, COUNTER, "bytes",
        "Payload bytes published through the shared arena."),
    NUM(D, "replies_dropped", T_U64, server.replies_dropped, COUNTER, NULL,
        "Replies ZeroMQ refused because the client's queue was full."),
    NUM(D, "save_ops_remembered", T_U32, save_ops_remembered, GAUGE, NULL,
        "Save operations whose admission decision is remembered for their other ranks."),
    OBJ("errors", error_fields, "ERROR replies by class."),
    {.key = "sessions",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The most recently active sessions (at most 256).",
     .elem = &session_elem,
     .items = doc_sessions,
     .elem_size = sizeof(session_info_t)},
};

#define OPM(k, m, kd, u, h, fam, lab) NUMM(stats_op_t, k, T_U64, m, kd, u, h, fam, lab)

static const stats_field_t op_fields[] = {
    OPM("count", count, COUNTER, NULL, "Requests of this type served.", "kvtier_op_total", NULL),
    OPM("p50_us", p50_us, GAUGE, "microseconds", "Median service time.", "kvtier_op_latency_us",
        "quantile=\"0.5\""),
    OPM("p99_us", p99_us, GAUGE, "microseconds", "99th percentile of the service time.",
        "kvtier_op_latency_us", "quantile=\"0.99\""),
    NUM(stats_op_t, "max_us", T_U64, max_us, GAUGE, "microseconds", "Longest service time."),
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
    snprintf(buf, cap, "op=\"%s\"", ((const stats_op_t *)elem)->name);
}

#define N stats_ns_t

ITEMS(ns_reasons, stats_ns_t, gates.reasons, gates.nreasons)

static const char *reason_key(const void *elem)
{
    return ((const gates_reason_t *)elem)->name;
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
    NUMM(N, "entries", T_U64, gates.ghost.entries, GAUGE, NULL, "Fingerprints held now.",
         "kvtier_gate_ghost_entries", NULL),
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
    NUMM(N, "payoff", T_DOUBLE, gates.payoff, GAUGE, "ratio",
         "Moving average of the verdicts' payoff.", "kvtier_gate_payoff", NULL),
    NUM(N, "share", T_DOUBLE, gates.share, GAUGE, "ratio",
        "Share of save operations the configured policy admits now."),
    NUM(N, "saved", T_U64, gates.saved, COUNTER, NULL, "Save operations admitted."),
    NUMM(N, "skipped", T_U64, gates.skipped, COUNTER, NULL, "Save operations declined.",
         "kvtier_gate_saves_skipped_total", NULL),
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
    NUMM(N, "density", T_DOUBLE, gates.density, GAUGE, "ratio",
         "Value policy: tokens served (and regretted) per token offered, over the window.",
         "kvtier_gate_density", NULL),
    NUMM(N, "served_tokens", T_U64, gates.served_tokens, COUNTER, NULL,
         "Tokens the engines loaded from the tier and used (token tallies).",
         "kvtier_gate_served_tokens_total", NULL),
    NUMM(N, "regret_tokens", T_U64, gates.regret_tokens, COUNTER, NULL,
         "Tokens lookups through declined chunks would have loaded (ghost table).",
         "kvtier_gate_regret_tokens_total", NULL),
    NUMM(N, "written_tokens", T_U64, gates.written_tokens, COUNTER, NULL,
         "Tokens of the wanted chunks of admitted save operations.",
         "kvtier_gate_written_tokens_total", NULL),
    NUMM(N, "declined_tokens", T_U64, gates.declined_tokens, COUNTER, NULL,
         "Tokens of the wanted chunks of declined save operations.",
         "kvtier_gate_declined_tokens_total", NULL),
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
    NUMM(N, "net_tokens", T_DOUBLE, gates.net_tokens, GAUGE, NULL,
         "Served tokens minus cost_ratio x written tokens.", "kvtier_gate_net_tokens", NULL),
    OBJ("atom", atom_fields, "Policy atom: its share and the declines it would have made."),
    OBJ("value", value_fields, "Policy value: its share and the declines it would have made."),
    OBJ("ghost", ghost_fields, "The ghost table of declined chunks (docs/GATES.md)."),
    {.key = "reasons",
     .type = T_MAP,
     .kind = INFO,
     .help = "Verdict counts by reason name, summed over engines.",
     .elem = &reason_elem,
     .items = ns_reasons,
     .elem_size = sizeof(gates_reason_t),
     .elem_key = reason_key},
};

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
    NUMM(N, "skips", T_U64, gates.skips, COUNTER, NULL, "Lookups answered without looking.",
         "kvtier_gate_lookups_skipped_total", NULL),
    NUM(N, "forced_probes", T_U64, gates.forced_probes, COUNTER, NULL,
        "Skippable lookups answered as probes."),
    NUM(N, "would_skip", T_U64, gates.would_skip, COUNTER, NULL,
        "Shadow mode: lookups the enabled gate would have skipped."),
    NUM(N, "mean_lookup_us", T_DOUBLE, mean_lookup_us, GAUGE, "microseconds",
        "Mean service time of this namespace's lookups."),
};

static const stats_field_t gates_fields[] = {
    OBJ("admission", admission_fields, "The save-admission gate (docs/GATES.md)."),
    OBJ("lookup_skip", lookup_skip_fields, "The lookup-skip gate (docs/GATES.md)."),
};

#define NSM(k, m, fam) NUMM(N, k, T_U64, m, GAUGE, NULL, "Stored " k " (all ranks).", fam, NULL)

static const stats_field_t ns_fields[] = {
    NUM(N, "id", T_U32, ns.id, INFO, NULL, "The namespace id clients name."),
    TXT(N, "model", T_CHARS, ns.model, "The model name."),
    TXT(N, "revision", T_CHARS, ns.revision, "The model revision (\"\": none named)."),
    TXT(N, "fingerprint", T_HEX64, ns.fingerprint, "The layout fingerprint, in hex."),
    NUM(N, "world", T_U16, ns.world, GAUGE, NULL, "Tensor-parallel ranks."),
    NUM(N, "replicated", T_BOOL, ns.replicated, GAUGE, NULL,
        "MLA: one copy of every chunk serves all ranks."),
    NUM(N, "chunk_tokens", T_U32, ns.chunk_tokens, GAUGE, NULL, "Tokens per chunk."),
    NSM("chunks", ns.chunks, "kvtier_ns_chunks"),
    NUMM(N, "bytes", T_U64, ns.bytes, GAUGE, "bytes", "Stored payload bytes (all ranks).",
         "kvtier_ns_bytes", NULL),
    OBJ("gates", gates_fields, "The namespace's gates."),
};

static const stats_field_t ns_elem = ELEM(ns_fields, "One namespace.");

ITEMS(doc_namespaces, stats_doc_t, namespaces, nnamespaces)

static void ns_labels(const void *elem, char *buf, size_t cap)
{
    const stats_ns_t *n = elem;

    snprintf(buf, cap, "ns=\"%s\",id=\"%u\"", n->ns.model, n->ns.id);
}

static const stats_field_t doc_fields[] = {
    TXT(D, "version", T_STR, version, "kvtierd's version."),
    NUM(D, "uptime_s", T_DOUBLE, uptime_s, GAUGE, "seconds", "Time since the daemon started."),
    NUM(D, "pid", T_I64, pid, INFO, NULL, "The daemon's process id."),
    TXT(D, "endpoint", T_STR, endpoint, "The ZeroMQ endpoint it serves."),
    OBJ("ram", ram_fields, "The RAM tier."),
    OBJ("disk", disk_fields, "The disk tier."),
    OBJ("server", server_fields, "Requests, replies and sessions."),
    {.key = "ops",
     .type = T_MAP,
     .kind = INFO,
     .help = "Per request type.",
     .elem = &op_elem,
     .items = doc_ops,
     .elem_size = sizeof(stats_op_t),
     .elem_key = op_key,
     .elem_labels = op_labels},
    {.key = "namespaces",
     .type = T_ARRAY,
     .kind = INFO,
     .help = "The declared namespaces, by id.",
     .elem = &ns_elem,
     .items = doc_namespaces,
     .elem_size = sizeof(stats_ns_t),
     .elem_labels = ns_labels},
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

/* --- JSON --- */

static json_t *json_fields(const stats_field_t *fields, size_t n, const char *base);

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
    case T_U64:
        return json_integer((json_int_t)num_u64(f, base));
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

        if (f->when != NULL && !f->when(base))
            continue;
        v = json_value(f, base);
        if (v == NULL || json_object_set_new(o, f->key, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

int stats_status_json(const server_t *sv, char **body, size_t *len)
{
    stats_doc_t *d = doc_take(sv);
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
        size_t ncap = (tb->cap + (size_t)n + 1) * 2;
        char *nb = realloc(tb->buf, ncap);
        if (nb == NULL) {
            tb->failed = true;
            return;
        }
        tb->buf = nb;
        tb->cap = ncap;
    }
}

static void metric_line(textbuf_t *tb, const stats_field_t *f, const char *base, const char *ctx)
{
    char labels[STATS_LABELS_MAX];

    snprintf(labels, sizeof labels, "%s%s%s", ctx, ctx[0] && f->labels ? "," : "",
             f->labels ? f->labels : "");
    tb_printf(tb, "%s%s%s%s ", f->metric, labels[0] ? "{" : "", labels, labels[0] ? "}" : "");
    if (f->type == T_DOUBLE)
        tb_printf(tb, "%.6f\n", *(const double *)(base + f->off));
    else
        tb_printf(tb, "%" PRIu64 "\n", num_u64(f, base));
}

static void metrics_fields(textbuf_t *tb, const stats_field_t *fields, size_t n, const char *base,
                           const char *ctx);

static void metrics_value(textbuf_t *tb, const stats_field_t *f, const char *base, const char *ctx)
{
    const char *first;
    size_t n;

    switch (f->type) {
    case T_OBJECT:
        metrics_fields(tb, f->fields, f->nfields, base + f->off, ctx);
        return;
    case T_ARRAY:
    case T_MAP:
        n = f->items(base, (const void **)&first);
        for (size_t i = 0; i < n; i++) {
            const char *elem = first + i * f->elem_size;
            char sub[STATS_LABELS_MAX], own[STATS_LABELS_MAX] = "";
            if (f->elem_labels != NULL)
                f->elem_labels(elem, own, sizeof own);
            snprintf(sub, sizeof sub, "%s%s%s", ctx, ctx[0] && own[0] ? "," : "", own);
            metrics_value(tb, f->elem, elem, sub);
        }
        return;
    default:
        if (f->metric != NULL)
            metric_line(tb, f, base, ctx);
        return;
    }
}

static void metrics_fields(textbuf_t *tb, const stats_field_t *fields, size_t n, const char *base,
                           const char *ctx)
{
    for (size_t i = 0; i < n; i++)
        if (fields[i].when == NULL || fields[i].when(base))
            metrics_value(tb, &fields[i], base, ctx);
}

int stats_metrics_text(const server_t *sv, char **body, size_t *len)
{
    stats_doc_t *d = doc_take(sv);
    textbuf_t tb = {.cap = 4096};

    tb.buf = malloc(tb.cap);
    if (d == NULL || tb.buf == NULL) {
        doc_free(d);
        free(tb.buf);
        return -ENOMEM;
    }
    tb.buf[0] = '\0';
    metrics_fields(&tb, doc_fields, NFIELDS(doc_fields), (const char *)d, "");
    doc_free(d);
    if (tb.failed) {
        free(tb.buf);
        return -ENOMEM;
    }
    *body = tb.buf;
    *len = tb.len;
    return 0;
}
