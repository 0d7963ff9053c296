/*
 * config.h - kvtierd configuration: defaults, JSON loading and validation.
 *
 * One table (config.c) lists every key: its dotted path, type, place in config_t, default and
 * range. The same table drives loading, validation and the defaults printed by
 * `kvtierd --print-defaults`, so a key cannot exist in one and be missing from another.
 * Unknown keys, wrong types and out-of-range values are errors naming the key path
 * ("ram.capacity_bytes: must be between 1 MiB and 16 TiB, got 12").
 *
 * Byte sizes accept an integer or a string with a binary suffix ("512MiB", "8GiB", "4096").
 * Per-namespace gate overrides live under "namespaces": {"<model name>": {"gates": {...}}}; a
 * namespace not listed uses the global "gates" defaults.
 *
 * Reload (SIGHUP): a row marked live in the table applies a new value while the daemon runs;
 * the others need a restart. config_merge_live() writes the live values of a newly loaded
 * config_t into the one the daemon runs on and reports every key that differs. The live keys
 * are read where they are used (never cached at start-up), on the loop thread only: log.level,
 * server.client_idle_ms, server.stop_drain_ms, server.stop_timeout_ms, ram.lease_ms,
 * ram.shm_hold_ms,
 * disk.max_reads_in_flight, every gates.* key and the per-namespace overrides (applied to the
 * declared namespaces by server_reconfigure()).
 *
 * Threads: loading and validation run on any one thread. The daemon's config_t is written only
 * by config_merge_live() on the loop thread, and only its live fields, which no other thread
 * reads; every other field is read-only after start-up (disk workers read some of them).
 */
#ifndef KVT_CONFIG_H
#define KVT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "gates.h"
#include "log.h"

#define CONFIG_PATH_MAX 256
#define CONFIG_NS_OVERRIDES_MAX 64

/* disk.fsync: when segment files are synced. */
typedef enum { CONFIG_FSYNC_NONE = 0, CONFIG_FSYNC_SEGMENT, CONFIG_FSYNC_RECORD } config_fsync_t;

/* The words of disk.fsync, indexed by config_fsync_t, NULL-terminated. */
extern const char *const config_fsync_words[];

/* disk.staging: whether the disk tier's direct I/O goes through huge-page staging memory
 * (stage.h, disk.h): auto = reads, when the kernel gives madvised memory huge pages and the
 * arena's own pages are small; on = reads and flushes; off = neither. */
typedef enum { CONFIG_STAGING_AUTO = 0, CONFIG_STAGING_ON, CONFIG_STAGING_OFF } config_staging_t;

/* The words of disk.staging, indexed by config_staging_t, NULL-terminated. */
extern const char *const config_staging_words[];

typedef struct {
    char name[256];    /* namespace model name */
    gates_cfg_t gates; /* global defaults with this namespace's keys applied */
} config_ns_override_t;

typedef struct {
    struct {
        char endpoint[CONFIG_PATH_MAX];      /* ZeroMQ endpoint the daemon binds */
        char status_socket[CONFIG_PATH_MAX]; /* Unix socket for GET /status and /metrics */
        uint32_t max_chunks_per_request;     /* hashes per request, 1..65536 (4096) */
        uint32_t max_clients;                /* sessions remembered, 1..1000000 (4096) */
        uint32_t client_idle_ms;             /* a silent session is forgotten after (600000) */
        uint32_t max_in_flight;              /* requests a connection may have outstanding,
                                                1..65536 (256), announced in HELLO_OK */
        uint32_t session_max_namespaces;     /* namespaces one connection may declare (16) */
        uint32_t max_namespaces;             /* namespaces alive at once, 1..1024 (1024) */
        uint64_t session_reply_bytes;        /* reply bytes one connection may have queued */
        uint64_t max_reply_bytes;            /* the same for all connections together */
        uint32_t stop_drain_ms;              /* graceful stop: how long in-flight requests and
                                                reservations may take to finish, 0..10000
                                                (2000) */
        uint32_t stop_timeout_ms;            /* the whole stop at most this long, then exit 1
                                                as after a crash (25000; 0: no limit) */
        uint32_t cpu_workers;                /* thread-pool threads for checksums and copies
                                                beside the disk's, 0..256 (0: one per CPU) */
    } server;
    struct {
        uint64_t capacity_bytes;          /* the RAM tier's capacity (with the disk tier the
                                             arena adds 2 x disk.write_buffer_bytes) */
        char arena_path[CONFIG_PATH_MAX]; /* file under /dev/shm, or "" for an anonymous memfd */
        uint64_t max_chunk_bytes;         /* largest chunk payload accepted */
        uint32_t lease_ms;                /* lookup lease time, 1..600000 (30000) */
        bool prefault;                    /* allocate every arena page at start (true) */
        char arena_group[64];             /* group owning the arena file ("" = the daemon's) */
        uint32_t shm_hold_ms;             /* shared-memory reservations and load pins are
                                             reclaimed after this, 100..600000 (10000) */
        uint64_t clean_target_bytes;      /* with the disk tier: RAM the cleaner keeps free or
                                             clean (written to disk, evictable at once); 0: half
                                             the capacity */
        double session_held_share;        /* leased + pinned + lent + reserved bytes one
                                             connection may hold, share of capacity (0.5) */
        double max_held_share;            /* the same for all connections together (0.75) */

        /* across restarts (README "Restarts") */
        bool reattach; /* keep a matching arena file at start and rebuild the RAM tier from it and
                          the journal (true) */
        char journal_path[CONFIG_PATH_MAX]; /* the RAM tier's journal; "": <arena_path>.d/
                                               journal on a tmpfs, else <disk.dir>/<arena
                                               name>.journal (store_reattach.c) */
    } ram;
    struct {
        bool enabled;                  /* the disk tier is on (production: true) */
        char dir[CONFIG_PATH_MAX];     /* segment directory, created if missing */
        uint64_t capacity_bytes;       /* hard limit of the segment files, >= 2 segments */
        uint64_t segment_bytes;        /* size of one segment file */
        codec_mode_t compression;      /* "auto" | "lz4" | "off" (codec_mode_words) */
        double compression_threshold;  /* auto keeps lz4 when stored/raw <= this (0.9) */
        config_fsync_t fsync;          /* "none" | "segment" | "record" */
        uint32_t max_reads_in_flight;  /* disk reads on the thread pool at once (8) */
        uint32_t session_max_reads;    /* disk reads queued or running for one connection */
        uint32_t max_reads_queued;     /* disk reads queued or running in all (16384) */
        uint64_t prefetch_bytes;       /* read-ahead of looked-up prefixes in flight (64 MiB; 0:
                                          off; store.h, "Read-ahead") */
        uint64_t prefetch_depth_bytes; /* read-aheads start while reads landing in the arena
                                          hold less (4 MiB) */
        uint64_t read_io_bytes;        /* a read's system calls start when they fit in this
                                          with those in progress, or none is (0: no gate;
                                          disk.c, "The I/O gate") (2 MiB) */
        uint32_t read_stall_ms;        /* reads in flight, none finished for this long: the
                                          loads waiting are answered (2000; 0: never) */
        uint64_t write_buffer_bytes;   /* the budget of one of the two write batches */
        bool direct_io;                /* O_DIRECT segment I/O where the filesystem allows it */
        config_staging_t staging;      /* "auto" | "on" | "off" (stage.h) */
        uint64_t read_staging_bytes;   /* the staging memory of reads in flight (with staging) */

        /* the index checkpoint (checkpoint.h): every this many seconds while running, and at a
           clean stop; 0..86400 (300; 0: at the stop only) */
        uint32_t checkpoint_interval_s;
    } disk;
    struct {
        log_level_t level;
    } log;
    gates_cfg_t gates; /* global gate defaults */
    int n_ns;
    config_ns_override_t ns[CONFIG_NS_OVERRIDES_MAX];
    bool cold_start; /* not a key: kvtierd --cold-start (this start ignores the arena's contents;
                        with ram.reattach the journal is still kept for the next start) */
} config_t;

/* Fills cfg with every default. */
void config_defaults(config_t *cfg);

/* Fills gates with the defaults of the gate keys (the "gates.*" rows), for a gates_t made
 * without a configuration file (tests, tools). */
void config_gates_defaults(gates_cfg_t *gates);

/* Loads and validates the JSON file at path over the defaults. Returns 0, or -1 with a one-line
 * message naming the key (or the file and line for a JSON syntax error) in err. */
int config_load(const char *path, config_t *cfg, char *err, size_t errlen);

/* Same, from a string (used by tests). */
int config_load_string(const char *json, config_t *cfg, char *err, size_t errlen);

/* The gate settings in force for a namespace model name. */
const gates_cfg_t *config_gates_for(const config_t *cfg, const char *model);

/* Writes the effective configuration as JSON (every key) to a newly allocated string; the
 * caller frees it with free(). NULL on allocation failure. */
char *config_dump(const config_t *cfg);

/* Whether a reload applies the key at path ("log.level", "gates.admission.enabled") live. Keys
 * under "namespaces.<model>." are gate keys: live. Unknown paths are not. */
bool config_key_live(const char *path);

/* Called by config_merge_live() for every key whose value differs between the two configs:
 * path ("ram.capacity_bytes", or "namespaces.<model>" for an override added, removed or
 * changed) and whether it was applied (live) or needs a restart. */
typedef void (*config_change_fn)(void *arg, const char *path, bool live);

/* Writes into cur the value of every live key of next (a config loaded and validated after cur)
 * and the namespace overrides of next, calls changed (may be NULL) for every key that differs,
 * and returns the number of differing keys that are not live (cur keeps their old values until
 * a restart). */
int config_merge_live(config_t *cur, const config_t *next, config_change_fn changed, void *arg);

/* Parses a byte size ("4096", "512MiB", "8GiB", "1TiB", also KB/MB/GB as powers of 1000).
 * Returns 0 or -1. */
int config_parse_size(const char *s, uint64_t *out);

#endif /* KVT_CONFIG_H */
