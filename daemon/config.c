/*
 * config.c - kvtierd configuration: defaults, JSON loading, validation and dump (see config.h).
 *
 * Design: config_keys[] is the only list of keys. Each row names a leaf by its dotted path
 * ("ram.capacity_bytes"), its type, where it lives (offsetof into config_t, or into a
 * gates_cfg_t for the "gates.*" rows), its range and its default. config_defaults() writes the
 * defaults from the rows, the loader walks the JSON objects and resolves every key against the
 * rows (a path that is neither a row nor the prefix of one is an unknown key), and config_dump()
 * rebuilds the JSON tree from the rows. Adding a key means adding one row. A key that takes one
 * of a few words (log.level, disk.compression, disk.fsync, gates.admission.policy) is a KEY_WORD
 * row pointing at the one word list of its enum (log_level_words in log.h, codec_mode_words in
 * codec.h, gates_policy_words in gates.h, config_fsync_words here): that list parses, validates,
 * names the choices in the error message and dumps, and the field holds the enum, so the disk tier
 * never parses a word again.
 *
 * Gate rows are stored relative to a gates_cfg_t so the same rows serve the global "gates"
 * object (applied to cfg->gates) and each "namespaces": {"<model>": {"gates": ...}} entry
 * (applied to a copy of the final global gates). The top-level "namespaces" object is handled
 * after every other key, so a namespace inherits the globals whatever the key order in the file.
 *
 * Loading works on a private copy: on error the caller's config_t is left untouched. The parser
 * runs without JSON_ALLOW_NUL, so every string and key is a plain C string, and with
 * JSON_REJECT_DUPLICATES, so a key given twice is a syntax error rather than a silent override.
 *
 * Reload: a row's live flag says whether a SIGHUP applies a new value while the daemon runs
 * (config.h lists them). config_merge_live() compares the two configs row by row, copies the
 * live fields, counts the others (they need a restart) and takes the namespace overrides whole
 * (every gate key is live). A key a later stream adds is live only when it is read where it is
 * used, on the loop thread (a timeout, a bound, a level): mark it `.live = true` then.
 *
 * Threads: any one thread at a time; no global mutable state.
 * Invariants: every value in a config_t that came out of config_defaults() or a successful load
 * is inside its row's range, and ram.max_chunk_bytes <= ram.capacity_bytes.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#define KIB (1ULL << 10)
#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define TIB (1ULL << 40)

/* Upper bound of the integer keys without a maximum: the largest JSON integer jansson reads. */
#define CONFIG_UNBOUNDED ((uint64_t)INT64_MAX)

#define CONFIG_KEY_PATH_MAX 320
#define CONFIG_SHOWN_MAX (sizeof "namespaces." + 256 + 1)
#define CONFIG_SUN_PATH_MAX 108 /* sizeof(struct sockaddr_un.sun_path) on Linux */
/* The largest configuration file read: every key with 64 namespace overrides of every gate key,
 * indented, is about 60 KiB; a reload reads and parses on the loop, so this bounds that time. */
#define CONFIG_FILE_MAX (1 << 20)

typedef enum {
    KEY_STRING,
    KEY_BOOL,
    KEY_U32,
    KEY_U64,
    KEY_SIZE,
    KEY_DOUBLE,
    KEY_WORD, /* one of a word list; the field is an enum holding the word's index */
} config_key_type_t;

/* Extra check of a string value: 0, or -1 with the reason (without the key path) in why. */
typedef int (*config_check_fn)(const char *s, char *why, size_t whylen);

typedef struct {
    const char *path;
    config_key_type_t type;
    bool gate;     /* off is relative to a gates_cfg_t, else to a config_t */
    size_t off;    /* offsetof the field */
    size_t len;    /* KEY_STRING: size of the buffer, terminating NUL included */
    uint64_t umin; /* KEY_U32, KEY_U64, KEY_SIZE: inclusive range */
    uint64_t umax;
    double dmin; /* KEY_DOUBLE: range, dmax inclusive */
    double dmax;
    bool dmin_open;   /* KEY_DOUBLE: dmin itself is excluded */
    uint64_t udef;    /* default of KEY_BOOL, KEY_U32, KEY_U64, KEY_SIZE, KEY_WORD */
    double ddef;      /* default of KEY_DOUBLE */
    const char *sdef; /* default of KEY_STRING */
    config_check_fn check;
    const char *const *words; /* KEY_WORD: the accepted words (NULL-terminated), by enum value */
    bool live;                /* a reload (SIGHUP) applies a new value at once (config.h) */
} config_key_t;

static int check_endpoint(const char *s, char *why, size_t whylen);
static int check_status_socket(const char *s, char *why, size_t whylen);
static int check_nonempty(const char *s, char *why, size_t whylen);

#define CFG_FIELD(m) .off = offsetof(config_t, m)
#define GATE_FIELD(m) .gate = true, .off = offsetof(gates_cfg_t, m)

#define ROW_STR(p, m, def, chk, ...)                                                               \
    {                                                                                              \
        .path = p, .type = KEY_STRING, CFG_FIELD(m), .len = sizeof(((config_t *)0)->m),            \
        .sdef = def, .check = chk, __VA_ARGS__                                                     \
    }
#define ROW_U32(p, m, lo, hi, def, ...)                                                            \
    {                                                                                              \
        .path = p, .type = KEY_U32, CFG_FIELD(m), .umin = lo, .umax = hi, .udef = def, __VA_ARGS__ \
    }
#define ROW_SIZE(p, m, lo, hi, def, ...)                                                           \
    {                                                                                              \
        .path = p, .type = KEY_SIZE, CFG_FIELD(m), .umin = lo, .umax = hi, .udef = def,            \
        __VA_ARGS__                                                                                \
    }
#define ROW_BOOL(p, m, def, ...)                                                                   \
    {                                                                                              \
        .path = p, .type = KEY_BOOL, CFG_FIELD(m), .udef = def, __VA_ARGS__                        \
    }
#define ROW_DBL(p, m, open, lo, hi, def, ...)                                                      \
    {                                                                                              \
        .path = p, .type = KEY_DOUBLE, CFG_FIELD(m), .dmin = lo, .dmax = hi, .dmin_open = open,    \
        .ddef = def, __VA_ARGS__                                                                   \
    }
#define ROW_WORD(p, m, list, def, ...)                                                             \
    {                                                                                              \
        .path = p, .type = KEY_WORD, CFG_FIELD(m), .words = list, .udef = def, __VA_ARGS__         \
    }
#define ROW_GBOOL(p, m, def)                                                                       \
    {                                                                                              \
        .path = p, .type = KEY_BOOL, GATE_FIELD(m), .udef = def, .live = true                      \
    }
#define ROW_GU64(p, m, lo, def)                                                                    \
    {                                                                                              \
        .path = p, .type = KEY_U64, GATE_FIELD(m), .umin = lo, .umax = CONFIG_UNBOUNDED,           \
        .udef = def, .live = true                                                                  \
    }
#define ROW_GDBL(p, m, open, lo, hi, def)                                                          \
    {                                                                                              \
        .path = p, .type = KEY_DOUBLE, GATE_FIELD(m), .dmin = lo, .dmax = hi, .dmin_open = open,   \
        .ddef = def, .live = true                                                                  \
    }
#define ROW_GU64R(p, m, lo, hi, def, ...)                                                          \
    {                                                                                              \
        .path = p, .type = KEY_U64, GATE_FIELD(m), .umin = lo, .umax = hi, .udef = def,            \
        __VA_ARGS__                                                                                \
    }
#define ROW_GWORD(p, m, list, def)                                                                 \
    {                                                                                              \
        .path = p, .type = KEY_WORD, GATE_FIELD(m), .words = list, .udef = def, .live = true       \
    }

/* Every key, in the order config_dump() writes them. The gate rows are the only place the gate
 * defaults are written (docs/GATES.md explains them; gates.c takes its settings from here). */
static const config_key_t config_keys[] = {
    ROW_STR("server.endpoint", server.endpoint, "ipc:///run/kvtier/kvtier.zmq", check_endpoint),
    ROW_STR("server.status_socket", server.status_socket, "/run/kvtier/status.sock",
            check_status_socket),
    ROW_U32("server.max_chunks_per_request", server.max_chunks_per_request, 1, 65536, 4096),
    ROW_U32("server.max_clients", server.max_clients, 1, 1000000, 4096),
    ROW_U32("server.client_idle_ms", server.client_idle_ms, 1000, 86400000, 600000, .live = true),
    ROW_U32("server.stop_drain_ms", server.stop_drain_ms, 0, 10000, 2000, .live = true),
    ROW_U32("server.stop_timeout_ms", server.stop_timeout_ms, 0, 600000, 25000, .live = true),
    ROW_U32("server.max_in_flight", server.max_in_flight, 1, 65536, 256),
    ROW_U32("server.cpu_workers", server.cpu_workers, 0, 256, 0),
    ROW_U32("server.session_max_namespaces", server.session_max_namespaces, 1, 16, 16),
    ROW_U32("server.max_namespaces", server.max_namespaces, 1, 1024, 1024),
    ROW_SIZE("server.session_reply_bytes", server.session_reply_bytes, MIB, 16 * TIB, GIB),
    ROW_SIZE("server.max_reply_bytes", server.max_reply_bytes, MIB, 16 * TIB, 4 * GIB),
    ROW_SIZE("ram.capacity_bytes", ram.capacity_bytes, MIB, 16 * TIB, 8 * GIB),
    ROW_STR("ram.arena_path", ram.arena_path, "/dev/shm/kvtier.arena", NULL),
    ROW_SIZE("ram.max_chunk_bytes", ram.max_chunk_bytes, 1, GIB, 64 * MIB),
    ROW_U32("ram.lease_ms", ram.lease_ms, 1, 600000, 30000, .live = true),
    ROW_STR("ram.arena_group", ram.arena_group, "", NULL),
    ROW_BOOL("ram.prefault", ram.prefault, true),
    ROW_U32("ram.shm_hold_ms", ram.shm_hold_ms, 100, 600000, 10000, .live = true),
    ROW_SIZE("ram.clean_target_bytes", ram.clean_target_bytes, 0, 16 * TIB, 0),
    ROW_DBL("ram.session_held_share", ram.session_held_share, true, 0.0, 1.0, 0.5),
    ROW_DBL("ram.max_held_share", ram.max_held_share, true, 0.0, 1.0, 0.75),
    ROW_BOOL("ram.reattach", ram.reattach, true),
    ROW_STR("ram.journal_path", ram.journal_path, "", NULL),
    ROW_BOOL("disk.enabled", disk.enabled, false),
    ROW_STR("disk.dir", disk.dir, "/var/lib/kvtier/disk", check_nonempty),
    ROW_SIZE("disk.capacity_bytes", disk.capacity_bytes, 2 * MIB, 1024 * TIB, 64 * GIB),
    ROW_SIZE("disk.segment_bytes", disk.segment_bytes, MIB, 4 * GIB, 256 * MIB),
    ROW_WORD("disk.compression", disk.compression, codec_mode_words, CODEC_MODE_AUTO),
    ROW_DBL("disk.compression_threshold", disk.compression_threshold, true, 0.0, 1.0, 0.9),
    ROW_WORD("disk.fsync", disk.fsync, config_fsync_words, CONFIG_FSYNC_SEGMENT),
    ROW_U32("disk.max_reads_in_flight", disk.max_reads_in_flight, 1, 1024, 8, .live = true),
    ROW_U32("disk.session_max_reads", disk.session_max_reads, 1, 1048576, 1024),
    ROW_U32("disk.max_reads_queued", disk.max_reads_queued, 1, 1048576, 16384),
    ROW_SIZE("disk.prefetch_bytes", disk.prefetch_bytes, 0, 64 * GIB, 64 * MIB),
    ROW_SIZE("disk.prefetch_depth_bytes", disk.prefetch_depth_bytes, 4 * KIB, 64 * GIB, 4 * MIB),
    ROW_SIZE("disk.read_io_bytes", disk.read_io_bytes, 0, 64 * GIB, 2 * MIB),
    ROW_U32("disk.read_stall_ms", disk.read_stall_ms, 0, 600000, 2000, .live = true),
    ROW_SIZE("disk.write_buffer_bytes", disk.write_buffer_bytes, 64 * KIB, 4 * GIB, 80 * MIB),
    ROW_BOOL("disk.direct_io", disk.direct_io, true),
    ROW_WORD("disk.staging", disk.staging, config_staging_words, CONFIG_STAGING_AUTO),
    ROW_SIZE("disk.read_staging_bytes", disk.read_staging_bytes, 0, 4 * GIB, 32 * MIB),
    ROW_U32("disk.checkpoint_interval_s", disk.checkpoint_interval_s, 0, 86400, 300),
    ROW_WORD("log.level", log.level, log_level_words, LOG_INFO, .live = true),
    ROW_GBOOL("gates.admission.enabled", admission.enabled, false),
    ROW_GDBL("gates.admission.target", admission.target, false, 0.0, 1.0, 0.10),
    ROW_GDBL("gates.admission.floor", admission.floor, false, 0.0, 1.0, 0.25),
    ROW_GDBL("gates.admission.alpha", admission.alpha, true, 0.0, 1.0, 1.0 / 16),
    ROW_GU64("gates.admission.warmup", admission.warmup, 0, 64),
    ROW_GU64("gates.admission.report_every", admission.report_every, 1, 256),
    ROW_GWORD("gates.admission.policy", admission.policy, gates_policy_words, GATES_POLICY_VALUE),
    ROW_GDBL("gates.admission.cost_ratio", admission.cost_ratio, true, 0.0, 0.5, 0.05),
    ROW_GDBL("gates.admission.value_floor", admission.value_floor, false, 0.0, 1.0, 0.02),
    ROW_GU64R("gates.admission.window_tokens", admission.window_tokens, 1024, 1ull << 40, 4194304,
              .live = true),
    /* these two size what a namespace's gate makes when it is created (its prior, its ghost
     * table): a reload changes neither for an existing namespace (gates_set_cfg keeps them) */
    ROW_GU64R("gates.admission.learn_tokens", admission.learn_tokens, 0, 1ull << 40, 4194304),
    ROW_GU64R("gates.admission.reuse_wait_tokens", admission.reuse_wait_tokens, 0, 1ull << 40,
              8388608, .live = true),
    ROW_GU64R("gates.admission.ghost_entries", admission.ghost_entries, 0, GHOST_ENTRIES_MAX,
              262144),
    ROW_GBOOL("gates.lookup_skip.enabled", lookup_skip.enabled, false),
    ROW_GU64("gates.lookup_skip.min_load_tokens", lookup_skip.min_load_tokens, 0, 8192),
    ROW_GDBL("gates.lookup_skip.cut", lookup_skip.cut, false, 0.0, 1.0, 0.01),
    ROW_GU64("gates.lookup_skip.min_lookups", lookup_skip.min_lookups, 0, 64),
    ROW_GU64("gates.lookup_skip.probe_every", lookup_skip.probe_every, 1, 32),
    ROW_GDBL("gates.lookup_skip.alpha", lookup_skip.alpha, true, 0.0, 1.0, 1.0 / 64),
    ROW_GU64("gates.lookup_skip.report_every", lookup_skip.report_every, 1, 256),
};

#define CONFIG_NKEYS (sizeof config_keys / sizeof config_keys[0])

const char *const config_fsync_words[] = {"none", "segment", "record", NULL};
const char *const config_staging_words[] = {"auto", "on", "off", NULL};

/* KEY_WORD fields are enums stored as int. */
_Static_assert(sizeof(log_level_t) == sizeof(int), "log_level_t is an int-sized enum");
_Static_assert(sizeof(codec_mode_t) == sizeof(int), "codec_mode_t is an int-sized enum");
_Static_assert(sizeof(config_fsync_t) == sizeof(int), "config_fsync_t is an int-sized enum");
_Static_assert(sizeof(config_staging_t) == sizeof(int), "config_staging_t is an int-sized enum");
_Static_assert(sizeof(gates_policy_t) == sizeof(int), "gates_policy_t is an int-sized enum");

/* Where a walk writes: a whole config_t (global keys) or one namespace's gates_cfg_t. */
typedef struct {
    char *cfg_base;    /* NULL while walking a namespace entry: only gate rows apply */
    char *gates_base;  /* the gates_cfg_t the gate rows write to */
    const char *shown; /* prefix of the paths in messages: "" or "namespaces.<model>." */
    char *err;
    size_t errlen;
} config_walk_t;

static int errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats a message; control characters (a key or a value from the file may hold a newline)
 * become '?', so that the message stays one line (fuzz_config found a key "\n..."). */
static int errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        if (vsnprintf(err, errlen, fmt, ap) < 0)
            err[0] = '\0';
        va_end(ap);
        for (char *p = err; *p != '\0'; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
    }
    return -1;
}

static int check_endpoint(const char *s, char *why, size_t whylen)
{
    if ((strncmp(s, "ipc://", 6) == 0 || strncmp(s, "tcp://", 6) == 0) && s[6] != '\0')
        return 0;
    return errf(why, whylen,
                "must start with \"ipc://\" or \"tcp://\" and name an address, got \"%s\"", s);
}

static int check_status_socket(const char *s, char *why, size_t whylen)
{
    if (s[0] == '\0')
        return errf(why, whylen, "must not be empty");
    if (strlen(s) >= CONFIG_SUN_PATH_MAX)
        return errf(why, whylen, "must be shorter than %d bytes, got %zu", CONFIG_SUN_PATH_MAX,
                    strlen(s));
    return 0;
}

static int check_nonempty(const char *s, char *why, size_t whylen)
{
    return s[0] == '\0' ? errf(why, whylen, "must not be empty") : 0;
}

int config_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mul;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"KiB", KIB},
        {"MiB", MIB},
        {"GiB", GIB},
        {"TiB", TIB},
        {"KB", 1000ULL},
        {"MB", 1000000ULL},
        {"GB", 1000000000ULL},
        {"TB", 1000000000000ULL},
    };
    uint64_t v = 0;
    const char *p = s;
    size_t i;

    if (s == NULL || out == NULL || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    for (i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mul)
                return -1;
            *out = v * units[i].mul;
            return 0;
        }
    }
    return -1;
}

/* A byte bound for messages: "16 TiB" when it is an exact multiple of a binary unit. */
static void size_text(uint64_t v, char *buf, size_t len)
{
    static const struct {
        const char *name;
        uint64_t mul;
    } units[] = {{"TiB", TIB}, {"GiB", GIB}, {"MiB", MIB}, {"KiB", KIB}};
    size_t i;

    for (i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (v >= units[i].mul && v % units[i].mul == 0) {
            snprintf(buf, len, "%" PRIu64 " %s", v / units[i].mul, units[i].name);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, v);
}

static void *key_field(const config_key_t *k, const config_walk_t *w)
{
    return (k->gate ? w->gates_base : w->cfg_base) + k->off;
}

static const config_key_t *key_find(const char *path, bool gates_only)
{
    size_t i;

    for (i = 0; i < CONFIG_NKEYS; i++) {
        if (gates_only && !config_keys[i].gate)
            continue;
        if (strcmp(config_keys[i].path, path) == 0)
            return &config_keys[i];
    }
    return NULL;
}

/* Whether path names an object that holds keys ("ram", "gates.admission"). */
static bool section_exists(const char *path, bool gates_only)
{
    size_t n = strlen(path), i;

    for (i = 0; i < CONFIG_NKEYS; i++) {
        if (gates_only && !config_keys[i].gate)
            continue;
        if (strncmp(config_keys[i].path, path, n) == 0 && config_keys[i].path[n] == '.')
            return true;
    }
    return false;
}

/* Range check of an integer-valued key; got is the value as written (may be negative). */
static int key_check_range(const config_key_t *k, const config_walk_t *w, const char *path,
                           int64_t got_signed, uint64_t got)
{
    char lo[32], hi[32], v[32];

    if (got_signed >= 0 && got >= k->umin && got <= k->umax)
        return 0;
    if (k->type == KEY_SIZE) {
        size_text(k->umin, lo, sizeof lo);
        size_text(k->umax, hi, sizeof hi);
    } else {
        snprintf(lo, sizeof lo, "%" PRIu64, k->umin);
        snprintf(hi, sizeof hi, "%" PRIu64, k->umax);
    }
    if (got_signed < 0)
        snprintf(v, sizeof v, "%" PRId64, got_signed);
    else
        snprintf(v, sizeof v, "%" PRIu64, got);
    if (k->umax == CONFIG_UNBOUNDED)
        return errf(w->err, w->errlen, "%s%s: must be at least %s, got %s", w->shown, path, lo, v);
    return errf(w->err, w->errlen, "%s%s: must be between %s and %s, got %s", w->shown, path, lo,
                hi, v);
}

static int key_apply_string(const config_key_t *k, const config_walk_t *w, const char *path,
                            json_t *val)
{
    char why[CONFIG_PATH_MAX + 128];
    const char *s;
    size_t n;

    if (!json_is_string(val))
        return errf(w->err, w->errlen, "%s%s: expected string", w->shown, path);
    s = json_string_value(val);
    n = json_string_length(val);
    if (n >= k->len)
        return errf(w->err, w->errlen, "%s%s: longer than %zu bytes", w->shown, path, k->len - 1);
    if (k->check != NULL && k->check(s, why, sizeof why) != 0)
        return errf(w->err, w->errlen, "%s%s: %s", w->shown, path, why);
    memcpy(key_field(k, w), s, n + 1);
    return 0;
}

static int key_apply_word(const config_key_t *k, const config_walk_t *w, const char *path,
                          json_t *val)
{
    char list[128];
    size_t n = 0;
    const char *s;

    if (!json_is_string(val))
        return errf(w->err, w->errlen, "%s%s: expected string", w->shown, path);
    s = json_string_value(val);
    for (int i = 0; k->words[i] != NULL; i++) {
        if (strcmp(s, k->words[i]) == 0) {
            memcpy(key_field(k, w), &i, sizeof i);
            return 0;
        }
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s",
                              i > 0 ? ", " : "", k->words[i]);
    }
    return errf(w->err, w->errlen, "%s%s: must be one of %s, got \"%s\"", w->shown, path, list, s);
}

static int key_apply_double(const config_key_t *k, const config_walk_t *w, const char *path,
                            json_t *val)
{
    double d;

    if (!json_is_number(val))
        return errf(w->err, w->errlen, "%s%s: expected number", w->shown, path);
    d = json_number_value(val);
    if (k->dmin_open && !(d > k->dmin && d <= k->dmax))
        return errf(w->err, w->errlen, "%s%s: must be greater than %g and at most %g, got %g",
                    w->shown, path, k->dmin, k->dmax, d);
    if (!k->dmin_open && !(d >= k->dmin && d <= k->dmax))
        return errf(w->err, w->errlen, "%s%s: must be between %g and %g, got %g", w->shown, path,
                    k->dmin, k->dmax, d);
    *(double *)key_field(k, w) = d;
    return 0;
}

static int key_apply_uint(const config_key_t *k, const config_walk_t *w, const char *path,
                          json_t *val)
{
    int64_t sv = 0;
    uint64_t v = 0;

    if (json_is_integer(val)) {
        sv = (int64_t)json_integer_value(val);
        v = sv < 0 ? 0 : (uint64_t)sv;
    } else if (k->type == KEY_SIZE && json_is_string(val)) {
        if (config_parse_size(json_string_value(val), &v) != 0)
            return errf(w->err, w->errlen,
                        "%s%s: invalid size \"%s\" (bytes, or a whole number with one of KiB "
                        "MiB GiB TiB KB MB GB TB)",
                        w->shown, path, json_string_value(val));
    } else if (k->type == KEY_SIZE) {
        return errf(w->err, w->errlen,
                    "%s%s: expected size (integer bytes or a string such as \"512MiB\")", w->shown,
                    path);
    } else {
        return errf(w->err, w->errlen, "%s%s: expected integer", w->shown, path);
    }
    if (key_check_range(k, w, path, sv, v) != 0)
        return -1;
    if (k->type == KEY_U32)
        *(uint32_t *)key_field(k, w) = (uint32_t)v;
    else
        *(uint64_t *)key_field(k, w) = v;
    return 0;
}

static int key_apply(const config_key_t *k, const config_walk_t *w, const char *path, json_t *val)
{
    switch (k->type) {
    case KEY_STRING:
        return key_apply_string(k, w, path, val);
    case KEY_BOOL:
        if (!json_is_boolean(val))
            return errf(w->err, w->errlen, "%s%s: expected boolean", w->shown, path);
        *(bool *)key_field(k, w) = json_is_true(val);
        return 0;
    case KEY_U32:
    case KEY_U64:
    case KEY_SIZE:
        return key_apply_uint(k, w, path, val);
    case KEY_DOUBLE:
        return key_apply_double(k, w, path, val);
    case KEY_WORD:
        return key_apply_word(k, w, path, val);
    }
    return errf(w->err, w->errlen, "%s%s: internal error: bad key type", w->shown, path);
}

/* Applies every key of obj, whose own path is prefix ("" or "ram." ...). The top-level
 * "namespaces" key is skipped here; config_apply() handles it once the globals are final. */
static int walk_object(const config_walk_t *w, json_t *obj, const char *prefix)
{
    bool gates_only = w->cfg_base == NULL;
    const config_key_t *k;
    const char *key;
    json_t *val;

    json_object_foreach(obj, key, val)
    {
        char path[CONFIG_KEY_PATH_MAX];
        int n = snprintf(path, sizeof path, "%s%s", prefix, key);

        if (!gates_only && prefix[0] == '\0' && strcmp(key, "namespaces") == 0)
            continue;
        /* A key containing '.' could alias a dotted path: it is never a valid key. */
        if (n < 0 || (size_t)n >= sizeof path || key[0] == '\0' || strchr(key, '.') != NULL)
            return errf(w->err, w->errlen, "%s%s: unknown key", w->shown, path);
        k = key_find(path, gates_only);
        if (k != NULL) {
            if (key_apply(k, w, path, val) != 0)
                return -1;
            continue;
        }
        if (!section_exists(path, gates_only))
            return errf(w->err, w->errlen, "%s%s: unknown key", w->shown, path);
        if (!json_is_object(val))
            return errf(w->err, w->errlen, "%s%s: expected object", w->shown, path);
        if ((size_t)n + 1 >= sizeof path)
            return errf(w->err, w->errlen, "%s%s: unknown key", w->shown, path);
        path[n] = '.';
        path[n + 1] = '\0';
        if (walk_object(w, val, path) != 0)
            return -1;
    }
    return 0;
}

static int apply_namespaces(config_t *cfg, json_t *nss, char *err, size_t errlen)
{
    const char *model;
    size_t model_len;
    json_t *val;

    if (!json_is_object(nss))
        return errf(err, errlen, "namespaces: expected object");
    if (json_object_size(nss) > CONFIG_NS_OVERRIDES_MAX)
        return errf(err, errlen, "namespaces: at most %d entries, got %zu", CONFIG_NS_OVERRIDES_MAX,
                    json_object_size(nss));
    json_object_keylen_foreach(nss, model, model_len, val)
    {
        config_ns_override_t *o = &cfg->ns[cfg->n_ns];
        char shown[CONFIG_SHOWN_MAX];
        config_walk_t w;

        if (model_len == 0 || model_len >= sizeof o->name)
            return errf(err, errlen, "namespaces: model name must be 1 to %zu bytes, got %zu",
                        sizeof o->name - 1, model_len);
        snprintf(shown, sizeof shown, "namespaces.%s.", model);
        if (!json_is_object(val))
            return errf(err, errlen, "namespaces.%s: expected object", model);
        memcpy(o->name, model, model_len + 1);
        o->gates = cfg->gates;
        w = (config_walk_t){.cfg_base = NULL,
                            .gates_base = (char *)&o->gates,
                            .shown = shown,
                            .err = err,
                            .errlen = errlen};
        if (walk_object(&w, val, "") != 0)
            return -1;
        cfg->n_ns++;
    }
    return 0;
}

/* The disk keys that depend on each other, checked when the tier is enabled (a RAM-only config
 * with large chunks need not size a write buffer it does not use): a record of the largest
 * chunk fits one write buffer (plus a header), a write buffer fits a segment, and the capacity
 * holds two segments (one being written, one to reclaim). */
static int disk_cross_check(const config_t *cfg, char *err, size_t errlen)
{
    const uint64_t hdr = 64 * KIB;
    char a[32];

    if (!cfg->disk.enabled)
        return 0;
    if (cfg->disk.write_buffer_bytes < cfg->ram.max_chunk_bytes + hdr) {
        size_text(cfg->ram.max_chunk_bytes + hdr, a, sizeof a);
        return errf(err, errlen,
                    "disk.write_buffer_bytes: must be at least ram.max_chunk_bytes + 64 KiB "
                    "(%s), got %" PRIu64,
                    a, cfg->disk.write_buffer_bytes);
    }
    if (cfg->disk.write_buffer_bytes > cfg->disk.segment_bytes) {
        size_text(cfg->disk.segment_bytes, a, sizeof a);
        return errf(
            err, errlen,
            "disk.write_buffer_bytes: must not exceed disk.segment_bytes (%s), got %" PRIu64, a,
            cfg->disk.write_buffer_bytes);
    }
    if (cfg->disk.capacity_bytes < 2 * cfg->disk.segment_bytes) {
        size_text(2 * cfg->disk.segment_bytes, a, sizeof a);
        return errf(err, errlen,
                    "disk.capacity_bytes: must be at least two segments (%s), got %" PRIu64, a,
                    cfg->disk.capacity_bytes);
    }
    return 0;
}

/* Applies root over cfg (already holding the defaults) and checks the cross-key rules. */
static int config_apply(config_t *cfg, json_t *root, char *err, size_t errlen)
{
    config_walk_t w = {.cfg_base = (char *)cfg,
                       .gates_base = (char *)&cfg->gates,
                       .shown = "",
                       .err = err,
                       .errlen = errlen};
    json_t *nss;
    char cap[32];

    if (!json_is_object(root))
        return errf(err, errlen, "configuration: expected a JSON object at the top level");
    if (walk_object(&w, root, "") != 0)
        return -1;
    nss = json_object_get(root, "namespaces");
    if (nss != NULL && apply_namespaces(cfg, nss, err, errlen) != 0)
        return -1;
    if (cfg->ram.max_chunk_bytes > cfg->ram.capacity_bytes) {
        size_text(cfg->ram.capacity_bytes, cap, sizeof cap);
        return errf(err, errlen,
                    "ram.max_chunk_bytes: must not exceed ram.capacity_bytes (%s), got %" PRIu64,
                    cap, cfg->ram.max_chunk_bytes);
    }
    return disk_cross_check(cfg, err, errlen);
}

static int config_load_json(json_t *root, const json_error_t *jerr, config_t *cfg, char *err,
                            size_t errlen)
{
    config_t *tmp;
    int rc;

    if (root == NULL) {
        if (jerr->line > 0)
            return errf(err, errlen, "%s:%d:%d: %s", jerr->source, jerr->line, jerr->column,
                        jerr->text);
        return errf(err, errlen, "%s: %s", jerr->source, jerr->text);
    }
    tmp = malloc(sizeof *tmp);
    if (tmp == NULL) {
        json_decref(root);
        return errf(err, errlen, "configuration: out of memory");
    }
    config_defaults(tmp);
    rc = config_apply(tmp, root, err, errlen);
    if (rc == 0)
        *cfg = *tmp;
    free(tmp);
    json_decref(root);
    return rc;
}

/* Reads the file at path (a regular file of at most CONFIG_FILE_MAX bytes) into a new buffer.
 * The open does not block (O_NONBLOCK): a reload runs on the loop, and a FIFO or a device left
 * at the path must be an error, not a loop that waits for a writer or reads /dev/zero. */
static char *config_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    size_t n = 0;
    char *buf;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

    if (fd < 0) {
        errf(err, errlen, "%s: unable to open %s: %s", path, path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0) {
        errf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        errf(err, errlen, "%s: not a regular file (%s)", path,
             S_ISDIR(st.st_mode)    ? "a directory"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
             : S_ISCHR(st.st_mode)  ? "a character device"
                                    : "a special file");
        close(fd);
        return NULL;
    }
    if (st.st_size > CONFIG_FILE_MAX) {
        errf(err, errlen, "%s: %lld bytes, more than the %d a configuration may have", path,
             (long long)st.st_size, CONFIG_FILE_MAX);
        close(fd);
        return NULL;
    }
    buf = malloc(CONFIG_FILE_MAX + 1);
    if (buf == NULL) {
        errf(err, errlen, "%s: out of memory", path);
        close(fd);
        return NULL;
    }
    for (;;) { /* up to one byte more than the bound: the file may have grown since fstat */
        ssize_t r = read(fd, buf + n, CONFIG_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            errf(err, errlen, "%s: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0 || (n += (size_t)r) > CONFIG_FILE_MAX)
            break;
    }
    close(fd);
    if (n > CONFIG_FILE_MAX) {
        errf(err, errlen, "%s: more than the %d bytes a configuration may have", path,
             CONFIG_FILE_MAX);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int config_load(const char *path, config_t *cfg, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    size_t len = 0;
    char *buf = config_read_file(path, &len, err, errlen);

    if (buf == NULL)
        return -1;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (root == NULL) /* jansson names the buffer "<buffer>": name the file */
        snprintf(jerr.source, sizeof jerr.source, "%s", path);
    return config_load_json(root, &jerr, cfg, err, errlen);
}

int config_load_string(const char *json, config_t *cfg, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);

    return config_load_json(root, &jerr, cfg, err, errlen);
}

/* Writes the default of every row the walk has a base for (only the gate rows without a
 * cfg_base). */
static void write_defaults(const config_walk_t *w)
{
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const config_key_t *k = &config_keys[i];
        void *f;

        if (!k->gate && w->cfg_base == NULL)
            continue;
        f = key_field(k, w);
        switch (k->type) {
        case KEY_STRING:
            snprintf(f, k->len, "%s", k->sdef);
            break;
        case KEY_BOOL:
            *(bool *)f = k->udef != 0;
            break;
        case KEY_U32:
            *(uint32_t *)f = (uint32_t)k->udef;
            break;
        case KEY_U64:
        case KEY_SIZE:
            *(uint64_t *)f = k->udef;
            break;
        case KEY_DOUBLE:
            *(double *)f = k->ddef;
            break;
        case KEY_WORD: {
            int v = (int)k->udef;
            memcpy(f, &v, sizeof v);
            break;
        }
        }
    }
}

void config_defaults(config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    write_defaults(&(config_walk_t){.cfg_base = (char *)cfg, .gates_base = (char *)&cfg->gates});
    cfg->n_ns = 0;
}

void config_gates_defaults(gates_cfg_t *gates)
{
    memset(gates, 0, sizeof *gates);
    write_defaults(&(config_walk_t){.cfg_base = NULL, .gates_base = (char *)gates});
}

const gates_cfg_t *config_gates_for(const config_t *cfg, const char *model)
{
    int i;

    if (model != NULL) {
        for (i = 0; i < cfg->n_ns; i++) {
            if (strcmp(cfg->ns[i].name, model) == 0)
                return &cfg->ns[i].gates;
        }
    }
    return &cfg->gates;
}

/* The JSON value of one key, read from the field the walk points at. */
static json_t *dump_value(const config_key_t *k, const config_walk_t *w)
{
    const void *f = key_field(k, w);

    switch (k->type) {
    case KEY_STRING:
        return json_stringn(f, strnlen(f, k->len));
    case KEY_BOOL:
        return json_boolean(*(const bool *)f);
    case KEY_U32:
        return json_integer((json_int_t) * (const uint32_t *)f);
    case KEY_U64:
    case KEY_SIZE:
        return json_integer((json_int_t) * (const uint64_t *)f);
    case KEY_DOUBLE:
        return json_real(*(const double *)f);
    case KEY_WORD: {
        int v;
        memcpy(&v, f, sizeof v);
        return json_string(k->words[v]);
    }
    }
    return NULL;
}

/* Sets obj[a][b]...[leaf] = value along the dotted path k->path. Takes value's reference. */
static int dump_set(json_t *obj, const char *path, json_t *value)
{
    char part[CONFIG_KEY_PATH_MAX];
    const char *dot;
    json_t *child;

    if (value == NULL)
        return -1;
    while ((dot = strchr(path, '.')) != NULL) {
        size_t n = (size_t)(dot - path);

        if (n >= sizeof part)
            goto fail;
        memcpy(part, path, n);
        part[n] = '\0';
        child = json_object_get(obj, part);
        if (child == NULL) {
            child = json_object();
            if (json_object_set_new(obj, part, child) != 0)
                goto fail;
        }
        obj = child;
        path = dot + 1;
    }
    return json_object_set_new(obj, path, value);
fail:
    json_decref(value);
    return -1;
}

/* Writes the keys into obj and raises *digits to the significant digits its doubles need to
 * read back exactly. jansson applies one precision to a whole dump: the largest one needed, so
 * the defaults print 0.1, not 0.10000000000000001, and every value still round-trips. */
static int dump_keys(json_t *obj, const config_walk_t *w, bool gates_only, int *digits)
{
    char buf[40];
    size_t i;
    int p;

    for (i = 0; i < CONFIG_NKEYS; i++) {
        const config_key_t *k = &config_keys[i];

        if (gates_only && !k->gate)
            continue;
        if (dump_set(obj, k->path, dump_value(k, w)) != 0)
            return -1;
        if (k->type != KEY_DOUBLE)
            continue;
        for (p = *digits; p < 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, *(const double *)key_field(k, w));
            if (strtod(buf, NULL) == *(const double *)key_field(k, w))
                break;
        }
        *digits = p;
    }
    return 0;
}

char *config_dump(const config_t *cfg)
{
    config_walk_t w = {.cfg_base = (char *)cfg, .gates_base = (char *)&cfg->gates};
    json_t *root, *nss, *entry;
    char *out = NULL;
    int i, digits = 1;

    root = json_object();
    if (root == NULL)
        return NULL;
    if (dump_keys(root, &w, false, &digits) != 0)
        goto done;
    nss = json_object();
    if (json_object_set_new(root, "namespaces", nss) != 0)
        goto done;
    for (i = 0; i < cfg->n_ns; i++) {
        config_walk_t nw = {.gates_base = (char *)&cfg->ns[i].gates};

        entry = json_object();
        if (json_object_set_new(nss, cfg->ns[i].name, entry) != 0)
            goto done;
        if (dump_keys(entry, &nw, true, &digits) != 0)
            goto done;
    }
    out = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(digits));
done:
    json_decref(root);
    return out;
}

/* --- reload --- */

bool config_key_live(const char *path)
{
    const config_key_t *k = key_find(path, false);

    if (strncmp(path, "namespaces.", 11) == 0)
        return true;
    return k != NULL && k->live;
}

/* The bytes a row's field occupies, for comparing and copying it. */
static size_t key_size(const config_key_t *k)
{
    switch (k->type) {
    case KEY_STRING:
        return k->len;
    case KEY_BOOL:
        return sizeof(bool);
    case KEY_U32:
        return sizeof(uint32_t);
    case KEY_U64:
    case KEY_SIZE:
        return sizeof(uint64_t);
    case KEY_DOUBLE:
        return sizeof(double);
    case KEY_WORD:
        return sizeof(int);
    }
    return 0;
}

static bool key_equal(const config_key_t *k, const void *a, const void *b)
{
    if (k->type == KEY_STRING)
        return strncmp(a, b, k->len) == 0;
    return memcmp(a, b, key_size(k)) == 0;
}

static const config_ns_override_t *override_find(const config_t *cfg, const char *name)
{
    for (int i = 0; i < cfg->n_ns; i++)
        if (strcmp(cfg->ns[i].name, name) == 0)
            return &cfg->ns[i];
    return NULL;
}

/* Reports the overrides added, removed or changed between cur and next. */
static void overrides_diff(const config_t *cur, const config_t *next, config_change_fn changed,
                           void *arg)
{
    char path[CONFIG_KEY_PATH_MAX];

    for (int i = 0; i < next->n_ns; i++) {
        const config_ns_override_t *o = override_find(cur, next->ns[i].name);
        if (o == NULL || memcmp(&o->gates, &next->ns[i].gates, sizeof o->gates) != 0) {
            snprintf(path, sizeof path, "namespaces.%s", next->ns[i].name);
            changed(arg, path, true);
        }
    }
    for (int i = 0; i < cur->n_ns; i++) {
        if (override_find(next, cur->ns[i].name) == NULL) {
            snprintf(path, sizeof path, "namespaces.%s", cur->ns[i].name);
            changed(arg, path, true);
        }
    }
}

int config_merge_live(config_t *cur, const config_t *next, config_change_fn changed, void *arg)
{
    config_walk_t wc = {.cfg_base = (char *)cur, .gates_base = (char *)&cur->gates};
    config_walk_t wn = {.cfg_base = (char *)next, .gates_base = (char *)&next->gates};
    int restart = 0;

    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const config_key_t *k = &config_keys[i];
        void *fc = key_field(k, &wc);
        const void *fn = key_field(k, &wn);

        if (key_equal(k, fc, fn))
            continue;
        if (changed != NULL)
            changed(arg, k->path, k->live);
        if (k->live)
            memcpy(fc, fn, key_size(k));
        else
            restart++;
    }
    if (changed != NULL)
        overrides_diff(cur, next, changed, arg);
    /* every gate key is live, so the overrides (globals with a namespace's keys applied) are
     * taken whole */
    cur->n_ns = next->n_ns;
    memcpy(cur->ns, next->ns, sizeof cur->ns);
    return restart;
}
