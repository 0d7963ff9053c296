/*
 * bench.h - the inside of kvtier-bench: the state every file shares (bench_t, rank_t), the step
 * list, the results, and what each file offers. Not installed; nothing outside tools/bench/
 * includes it.
 *
 * The files, one concern each (main.c opens with the design of the whole program):
 *   main.c          the program: options in, the run's hashes and threads, one mode, the report
 *   options.c       the command line (getopt_long), the daemon config (-c), usage
 *   util.c          clock, synthetic chunk data and hashes, percentiles, rank failures
 *   workload.c      the rank threads: the measured workload over every backend, step by step
 *   async.c         the workload through the asynchronous and zero-copy calls (--depth,
 * --zero-copy) redis.c         the Redis backend of the workload (hiredis, pipelined per call)
 *   zmq_baseline.c  the raw ZeroMQ baseline: an in-process echo thread and its DEALERs
 *   steps.c         the main thread of the side-by-side mode: steps, memcpy baselines, results
 *   steady.c        the steady state: the tier filled to capacity first; the daemon's own figures
 *                   (CPU seconds from /proc, loop fields of status)
 *   report.c        the side-by-side report (table and --json), and report helpers
 *   disk_mode.c     --disk-dir: the disk tier beside raw file I/O and lz4, with its report
 * A new backend of the workload is a BK_/COL_ entry, a file like redis.c and a case in
 * workload.c's bk_call; a new benchmark mode is a file like disk_mode.c with a steps and a report
 * function, chosen in main.c (and its own STEP_ values when its rank threads do new work).
 *
 * Threads: the main thread and one thread per rank (workload.c) share bench_t and the rank_t
 * array; the barriers of run_step() order every access (see main.c). Functions below say which
 * thread calls them.
 */
#ifndef KVT_BENCH_H
#define KVT_BENCH_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "kvtier.h"
#include "tool.h"

#define BENCH_MODEL "kvtier-bench"
#define BENCH_CHUNK_TOKENS 256
#define BENCH_LOOKUP_CHUNK_BYTES 4096
#define BENCH_TIMEOUT_MS 10000
#define BENCH_FILL_BYTE 0xa5
#define BENCH_PACE_POLL_US 2000 /* --paced: status poll while the write buffer is behind */
#define BENCH_PACE_MAX_MS 60000 /* --paced: longest wait before one chain */

enum { DATA_RANDOM, DATA_BF16 };

extern const char *const data_names[]; /* by DATA_*: "random", "bf16" */

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* The steps the main thread runs on every rank thread (workload.c: rank_run_step). */
typedef enum {
    STEP_SETUP,
    STEP_WARMUP,
    STEP_PREPARE,
    STEP_SAVE,
    STEP_LOAD,
    STEP_VERIFY,
    STEP_FILL_LOOKUP,
    STEP_LOOKUP_WARM,
    STEP_LOOKUP,
    STEP_Z_CONNECT,
    STEP_Z_WARM,
    STEP_Z_SAVE,
    STEP_Z_LOAD,
    STEP_Z_LOOKUP,
    STEP_Z_RTT,
    STEP_DISK_SAVE,
    STEP_DISK_LOAD,
    STEP_DISK_VERIFY,
    STEP_EXIT,
} step_t;

/* Columns of the side-by-side table. The first BK_N are the backends the workload runs
 * through (the kvtier paths and Redis); zmq and memcpy are the baselines. */
typedef enum {
    COL_SHM,
    COL_FRAMES,
    COL_ZC, /* kvtier-zc: the zero-copy calls on the shared-memory path (--zero-copy) */
    COL_REDIS,
    COL_ZMQ,
    COL_MEMCPY,
    COL_CSUM, /* copy+csum: kvt_copy_checksum, the copy a verifying load does */
    COL_N,
} col_t;

typedef col_t bk_t;

#define BK_SHM COL_SHM
#define BK_FRAMES COL_FRAMES
#define BK_ZC COL_ZC
#define BK_REDIS COL_REDIS
#define BK_N COL_ZMQ

/* Every column's table heading and JSON key (util.c). */
typedef struct {
    const char *name;
    const char *key;
} col_name_t;
extern const col_name_t cols[COL_N];

typedef enum {
    BK_OFF,     /* not asked for (reason in bench_t.bk_why) */
    BK_ON,      /* measured */
    BK_UNAVAIL, /* asked for, but cannot be used against this daemon (reason in bk_why) */
} bk_state_t;

typedef struct {
    char endpoint[512];
    uint64_t chunk_bytes;
    uint32_t chunks;
    uint32_t ranks;
    uint32_t prompt_chunks;
    uint32_t lookups;
    uint32_t rounds;
    uint32_t world;
    uint32_t batch;
    int all_ranks;
    int json;
    int data_path; /* KVT_DATA_PATH_*: AUTO measures both paths, FRAMES only frames */
    char model[256];
    char redis_addr[80]; /* --vs-redis as given; "" without it */
    char redis_host[64]; /* loopback address to connect to */
    int redis_port;
    int data;                /* DATA_RANDOM or DATA_BF16 */
    char disk_dir[PATH_MAX]; /* --disk-dir: disk mode; "" otherwise */
    char status_sock[108];   /* --status or server.status_socket of -c; "" if neither */
    uint32_t chain_chunks;   /* chunks per saved chain (disk mode; otherwise --chunks) */
    uint32_t depth;          /* --depth: requests in flight per rank (async API); 0: synchronous */
    int zero_copy;           /* --zero-copy: measure the kvtier-zc backend too */
    int cold;                /* --cold: no fill to capacity before measuring */
    int lookup_first;        /* --lookup-first: disk mode's loads look each chain up first */
    int paced; /* --paced: disk mode's saves wait for the disk writer between chains */
} bench_opts_t;

typedef struct bench bench_t;

/* Per-call latencies (ns) and how many are filled. */
typedef struct {
    uint64_t *v;
    size_t n;
} series_t;

/* Chunk counts of one backend: per rank, then summed over ranks. */
typedef struct {
    uint64_t stored, exists, nospace, declined, stored_bytes;
    uint64_t hits, misses, lost, loaded_bytes;
} counts_t;

/* One backend on one rank. */
typedef struct {
    kvt_client_t *kv;                  /* kvtier backends: the bulk client, its data path forced */
    series_t save, load;               /* rounds x calls_per_round */
    series_t submit_save, submit_load; /* --depth: time inside each kvt_submit_* call */
    series_t reserve, commit, pin;     /* kvtier-zc: each round trip, submit to completion */
    counts_t n;
} rank_bk_t;

/* Per-rank state; written by its thread during a step, read by main between steps. */
typedef struct {
    bench_t *b;
    uint32_t rank;
    pthread_t thread;
    rank_bk_t bk[BK_N];
    kvt_client_t *lk; /* lookup namespace, frames path (lookups carry no chunk bytes) */
    redisContext *redis;
    const kvt_hash_t *rkeys; /* chunks saved to Redis and not unlinked yet */
    size_t nrkeys;
    int shm_rc; /* setup: why the shared-memory client could not connect, 0 if it did */
    void *zsock;
    uint8_t *src;             /* chunks x chunk_bytes, random, stamped per round */
    uint8_t *dst;             /* chunks x chunk_bytes, load destination */
    uint8_t *small;           /* prompt_chunks x 4 KiB, lookup namespace chunks */
    uint8_t *outcomes;        /* chunks: save outcome of the current round */
    size_t *lens;             /* chunks: loaded sizes of the current round */
    series_t lookup, zlookup; /* lookups */
    series_t lookup_single;   /* --all-ranks: single-rank lookups of the same chunks */
    series_t zrtt;            /* --zero-copy: raw ZeroMQ round trips of a zero-copy step's size */
    uint64_t fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped;
    uint64_t zbytes_save, zbytes_load;
    series_t dsave, dload; /* disk mode: per-call latencies of the save and the load step */
    series_t dload_shm;    /* disk mode: of the load step's shared-memory half */
    series_t dload_zc;     /* disk mode --zero-copy: of the pinned quarter (pins, no copy out) */
    counts_t dn;           /* disk mode: outcomes and verified loads (frames half) */
    counts_t dn_shm;       /* disk mode: verified loads of the shared-memory half */
    counts_t dn_zc;        /* disk mode --zero-copy: verified reloads of the pinned quarter */
    uint64_t pace_waits;   /* disk mode --paced: status polls that found the writer behind */
    int failed;            /* 1 error, 2 usage-class error (limits) */
    char msg[512];
} rank_t;

struct bench {
    bench_opts_t o;
    kvt_ns_desc_t bulk_ns;
    kvt_ns_desc_t lookup_ns;
    uint64_t seed;
    kvt_hash_t *round_hashes;  /* rounds x BK_N x chunks: each backend its own chains */
    kvt_hash_t *warm_hashes;   /* BK_N x nwarm */
    kvt_hash_t *lookup_hashes; /* prompt_chunks */
    uint32_t nwarm;
    uint32_t calls_per_round;
    uint32_t chain_len;      /* chunks per chain: --chunks, or --chain-chunks in disk mode */
    kvt_hash_t *disk_hashes; /* disk mode: chunks hashes, chains of chain_len */
    uint32_t disk_load_n;    /* disk mode: the oldest chunks loaded back (disk-only by then) */
    uint32_t disk_load_from, disk_load_count; /* disk mode: the chunks of this load step */
    int disk_reload;     /* disk mode: this load step only refills dst for the verification */
    int zc_no_copy;      /* kvtier-zc loads leave the bytes in the arena (no memcpy out) */
    uint32_t pace_limit; /* --paced: most chunks pending in the write buffer between chains */
    kvt_server_info_t info;
    bk_state_t bk_state[BK_N];
    char bk_why[BK_N][160];
    bk_t primary; /* the kvtier backend of the kvtier-vs-zmq table: shm when measured */
    void *zctx;   /* the rank threads' DEALERs */
    void *zectx; /* the echo thread's ROUTER: a context (an I/O thread) of its own, as a daemon's */
    pthread_t echo;
    int echo_started;
    char zdir[64];
    char zendpoint[300];
    pthread_mutex_t gate_mu; /* launch gate: rank threads wait here until all are created */
    pthread_cond_t gate_cv;
    int launched, abort;
    pthread_barrier_t start, end;
    step_t step;
    bk_t cur; /* backend of the warm-up / prepare / save / load / verify step */
    uint32_t round;
    uint32_t slice;    /* lookups per thread in this lookup step */
    int lookup_single; /* STEP_LOOKUP: single-rank lookups even with --all-ranks */
    rank_t *ranks;
};

/* Percentiles of a latency series (util.c: percentiles). */
typedef struct {
    size_t n;
    double p50, p90, p99, max; /* microseconds */
} pct_t;

typedef enum { OP_SAVE, OP_LOAD } op_t;
extern const char *const op_names[2]; /* by op_t: "save", "load" */

/* One backend's results over all ranks and rounds. */
typedef struct {
    double save_s, load_s; /* wall time of the save and load steps */
    counts_t n;
    pct_t save, load;               /* per-call latencies */
    pct_t submit_save, submit_load; /* --depth: inside the submit calls */
    pct_t reserve, commit, pin;     /* kvtier-zc round trips */
    double save_cpu_s, load_cpu_s;  /* daemon CPU seconds during the steps; < 0: unknown */
} bk_result_t;

/* The steady state's fill (steady.c). */
typedef struct {
    int ran; /* 0: --cold, or no status socket (why says which) */
    char why[160];
    int reached; /* RAM (and the disk tier when enabled) reached capacity */
    uint64_t chunks, bytes;
    double seconds;
    uint64_t ram_used, ram_capacity;
    int disk_enabled;
    uint64_t disk_used, disk_capacity;
} fill_t;

/* The daemon's own figures (steady.c); NAN where not known. */
typedef struct {
    long pid;           /* from status, 0 when unknown */
    double busy_share;  /* status loop.busy_share */
    double turn_p99_us; /* status loop.turn_us.p99 */
} daemon_figs_t;

/* Everything the side-by-side mode measured (steps.c fills it, report.c prints it). */
typedef struct {
    bk_result_t bk[BK_N];
    double zsave_s, zload_s, memcpy_gbps, csum_gbps;
    uint64_t memcpy_bytes, memcpy_ns, csum_bytes, csum_ns;
    uint64_t fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped, zbytes_save, zbytes_load;
    pct_t lookup, zlookup, lookup_single, zrtt;
    fill_t fill;
    daemon_figs_t daemon;
} results_t;

/* Warnings of a report: printed to stderr and listed in the JSON. */
#define WARN_MAX 16
typedef struct {
    int n;
    char text[WARN_MAX][256];
} warnings_t;

/* --- util.c (any thread) --- */

uint64_t now_ns(void);
void fill_bf16(uint8_t *p, size_t n, uint64_t seed);
void fill_random(uint8_t *p, size_t n, uint64_t seed);
int make_hashes(uint64_t seed, uint64_t set, kvt_hash_t *out, size_t n);
void stamp(uint8_t *chunk, size_t len, const kvt_hash_t *h);
/* Records the first failure of rank r (kind 1 error, 2 usage-class); later ones are dropped. */
/* --lookup-first: before the load call that starts chunk i of h (the first of the run, or of a
 * chain), the lookup an engine sends before it loads a prompt: the chain's chunks from i to its
 * end (within end), on client c. 0, or -1 after rank_fail. */
int chain_lookup(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t from, size_t i,
                 size_t end);
void rank_fail(rank_t *r, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rank_fail_kvt(rank_t *r, const char *what, int rc, const kvt_client_t *c);
pct_t percentiles(uint64_t *v, size_t n);

/* --- options.c (main thread) --- */

/* Returns 0 to run, 1 after --help, -1 on a usage error (message printed). */
int parse_args(int argc, char **argv, bench_opts_t *o);
int check_endpoint(const char *ep);

/* --- workload.c (rank threads) --- */

kvt_hash_t *chain_of(const bench_t *b, bk_t bk, uint32_t round, int warm);
void *rank_main(void *arg);

/* --- redis.c (rank threads) --- */

void redis_setup(rank_t *r);
/* One call of the workload on Redis: chunks [i, i + k) of chain h, SET or GET pipelined. */
int redis_call(rank_t *r, op_t op, const kvt_hash_t *h, size_t i, size_t k);
int redis_drop(rank_t *r);
void redis_close(rank_t *r);

/* --- async.c (rank threads; the main thread for the fill) --- */

/* The workload's calls for chunks [from, from + n) of chains h through backend bk with --depth
 * calls in flight (at least one): like run_chain, outcomes into r->outcomes, sizes into r->lens;
 * per-call latencies (submit to completion) into lat, submit times and zero-copy round trips into
 * the backend's series when lat is set. 0, or -1 after rank_fail. */
int async_chain(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t from, size_t n,
                series_t *lat);

/* --- steady.c (main thread) --- */

/* Fills the tier to capacity with chunks of a namespace of its own (unless --cold). */
int bench_fill(bench_t *b, fill_t *out);
/* The daemon's pid from status (0 when unknown) and its CPU seconds so far (-1: unknown). */
long daemon_pid(const bench_t *b);
double daemon_cpu_s(long pid);
/* The loop.* figures of status (NAN when absent). */
void daemon_figures(const bench_t *b, daemon_figs_t *out);

/* --- zmq_baseline.c --- */

int zmq_baseline_start(bench_t *b); /* main thread */
void zmq_baseline_stop(bench_t *b); /* main thread, after the rank threads have left */
void step_z_connect(rank_t *r);     /* rank threads, from here on */
/* --depth requests in flight (at least one) */
void z_save_like(rank_t *r, uint32_t nchunks);
void z_load_like(rank_t *r, uint32_t nchunks);
void z_lookup_like(rank_t *r, uint32_t count, series_t *lat);
/* count round trips of a zero-copy step's size (--batch hashes' worth each way) */
void z_rtt_like(rank_t *r, uint32_t count, series_t *lat);

/* --- steps.c (main thread) --- */

int run_step(bench_t *b, step_t step, uint32_t round, double *secs);
int check_limits(const bench_t *b);
void resolve_backends(bench_t *b);
int merge_pct(const bench_t *b, size_t off, pct_t *out);
void counts_add(counts_t *to, const counts_t *c);
int collect(const bench_t *b, results_t *res);
/* The side-by-side mode: every step in order; returns an exit status. */
int bench_steps(bench_t *b, results_t *res);

/* --- report.c (main thread) --- */

double gbps(uint64_t bytes, double secs);
double ratio(double a, double base); /* 0 when base <= 0 */
void warn_add(warnings_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
json_t *pct_json(const pct_t *p);
json_t *real_or_null(double v);
int data_path_of(bk_t bk);
/* The warnings as a JSON array (a new reference, never NULL). */
json_t *warnings_json(const warnings_t *w);
/* Prints each warning to stderr as "kvtier-bench: warning: ...". */
void warnings_print(const warnings_t *w);
/* Prints root (stolen) indented on stdout; 0, or -1 after a message. */
int json_print(json_t *root);
/* The side-by-side mode's report; returns an exit status. */
int bench_report(const bench_t *b, results_t *res);

/* --- disk_mode.c (main thread, one lookup thread of its own) --- */

int bench_disk_steps(bench_t *b);
int bench_disk_report(const bench_t *b);

#endif /* KVT_BENCH_H */
