/*
 * kvtier-bench.c - measures save, load and lookup against a running kvtierd, next to baselines
 * and an optional Redis server measured in the same run with the same sizes.
 *
 * Design: one thread per rank, driven in lock step by the main thread through a list of steps
 * (setup, warm-up, then per round and per backend prepare / save / load / verify, then the
 * baselines, then the lookup-namespace fill and lookup slices). Every step is bracketed by two
 * barriers: the main thread reads CLOCK_MONOTONIC when the start barrier opens and when the end
 * barrier closes, so throughput is payload bytes over the wall time of all ranks together;
 * per-call latencies are taken inside the threads. Chunk data is random, pre-faulted, and
 * stamped with the chunk's hash before every round so a load that returned another chunk's
 * bytes cannot pass the memcmp check. Token ids come from a per-run random seed, so two runs
 * never share a hash even when --ns names the same model.
 *
 * Backends: one workload (run_chain: the chain saved, then loaded, in calls of --batch chunks,
 * then verified byte-exact) runs through each backend in turn: kvtier on the shared-memory path
 * and kvtier on the frames path (two clients per rank, each with its data path forced, every
 * backend on its own hashes so that no save finds its chunks already stored), and with
 * --vs-redis a Redis server through hiredis (SET pipelined per batch, GET pipelined per batch,
 * keys "kvtier-bench:<seed>:<rank>:<hash>" unlinked after each round and on exit). When the
 * arena cannot be mapped (tcp endpoint, memfd arena, no permission) the shared-memory backend
 * is reported unavailable, never replaced by frames.
 *
 * Baselines: (a) memcpy of the same chunks, one thread; (b) an in-process ROUTER echo thread on
 * an ipc:// endpoint in a temp dir, with one DEALER per rank: "save-like" sends a chunk batch
 * and receives an 8-byte ack, "load-like" sends a small request and receives the chunk batch
 * (plain zmq_send, which copies into the message, and zmq_msg_recv, which does not copy out);
 * (c) a lookup-sized round trip (prompt_chunks x 16 bytes out, 32 bytes back). Each round runs
 * every backend, then the ZeroMQ baseline, then memcpy, and lookups alternate with their
 * baseline in slices, so drift of the machine hits both sides of a ratio alike. The frames path
 * is compared with raw ZeroMQ (same transport, what the protocol costs) and the shared-memory
 * path with memcpy (its one copy is the ceiling) and with Redis.
 *
 * Disk mode (--disk-dir DIR): the same workload, run once, measures the daemon's disk tier. The
 * chunks (more than ram.capacity_bytes, read from the status socket) are saved as chains of
 * --chain-chunks (RAM eviction takes chain tails, so one long chain could not demote) through the
 * default backend, and GB/s is the status delta of disk.raw_bytes_written over the wall time
 * from the first save to the drained write buffer; then the oldest chunks, disk-only by then,
 * are loaded through the frames path (shared-memory loads answer from RAM only) and verified,
 * GB/s = disk.hits delta x chunk size over the load time. Beside them in the same run: a raw
 * sequential pwrite+fdatasync / pread of the same bytes in one file under DIR (read once from
 * the page cache and once after posix_fadvise(DONTNEED), with mincore saying how much stayed
 * resident), lookups from a lookup thread while the daemon is idle and while it writes, and
 * shuffle+lz4 and plain lz4 of the same chunks measured in the bench (--data bf16 gives
 * normally distributed bf16 values, deterministic per chunk).
 *
 * Threads: main (steps, memcpy baseline, report), one per rank, one echo thread (disk mode: no
 * echo thread, a lookup thread during the idle and the write phase). Between the
 * end barrier of a step and the start barrier of the next only the main thread touches the
 * shared state (the barriers order the memory accesses); during a step each rank thread writes
 * only its own rank_t.
 *
 * Exit status: 0 success, 1 data mismatch or daemon/Redis/transport error, 2 usage error
 * (including sizes the daemon announces it cannot accept and a non-loopback Redis address).
 */
#include "kvtier.h"
#include "tool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <lz4.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define BENCH_MODEL "kvtier-bench"
#define BENCH_CHUNK_TOKENS 256
#define BENCH_LOOKUP_CHUNK_BYTES 4096
#define BENCH_TIMEOUT_MS 10000
#define BENCH_MAX_RANKS 256
#define BENCH_ACK_BYTES 8
#define BENCH_LOOKUP_REPLY_BYTES 32
#define BENCH_OP_BYTES 8
#define BENCH_FILL_BYTE 0xa5
#define BENCH_REDIS_KEY_MAX 96
#define BENCH_REDIS_UNLINK_BLOCK 1024
#define BENCH_CHAIN_CHUNKS 8          /* disk mode: chunks per saved chain */
#define BENCH_DISK_LOOKUP_GAP_US 1000 /* disk mode: pause between two lookups */
#define BENCH_DISK_LOOKUP_CAP 1000000 /* disk mode: latencies kept while writing */
#define BENCH_DRAIN_POLL_US 5000      /* disk mode: status poll while the buffer drains */
#define BENCH_DRAIN_MAX_MS 300000     /* disk mode: longest wait for the drained buffer */
#define BENCH_STATUS_TIMEOUT_MS 5000

enum { DATA_RANDOM, DATA_BF16 };
static const char *const data_names[] = {[DATA_RANDOM] = "random", [DATA_BF16] = "bf16"};

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

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
    COL_REDIS,
    COL_ZMQ,
    COL_MEMCPY,
    COL_N,
} col_t;

typedef col_t bk_t;
#define BK_SHM COL_SHM
#define BK_FRAMES COL_FRAMES
#define BK_REDIS COL_REDIS
#define BK_N COL_ZMQ

static const struct {
    const char *name; /* table heading */
    const char *key;  /* JSON key */
} cols[COL_N] = {
    {"kvtier-shm", "kvtier_shm"}, {"kvtier-frames", "kvtier_frames"},
    {"redis", "redis"},           {"zmq", "zmq"},
    {"memcpy", "memcpy"},
};

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
    kvt_client_t *kv;    /* kvtier backends: the bulk client, its data path forced */
    series_t save, load; /* rounds x calls_per_round */
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
    uint64_t fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped;
    uint64_t zbytes_save, zbytes_load;
    series_t dsave, dload; /* disk mode: per-call latencies of the save and the load step */
    counts_t dn;           /* disk mode: outcomes and verified loads */
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
    kvt_server_info_t info;
    bk_state_t bk_state[BK_N];
    char bk_why[BK_N][160];
    bk_t primary; /* the kvtier backend of the kvtier-vs-zmq table: shm when measured */
    void *zctx;
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
    uint32_t slice; /* lookups per thread in this lookup step */
    rank_t *ranks;
};

/* ---- small utilities ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* One standard normal value per call (Box-Muller; the second value of a pair is kept). */
static float normal01(uint64_t *s, float *spare, int *have)
{
    if (*have) {
        *have = 0;
        return *spare;
    }
    float u1 = ((float)(splitmix64(s) >> 40) + 1.0f) * 0x1p-24f; /* (0, 1] */
    float u2 = (float)(splitmix64(s) >> 40) * 0x1p-24f;
    float rad = sqrtf(-2.0f * logf(u1)), ang = 6.2831853f * u2;
    *spare = rad * sinf(ang);
    *have = 1;
    return rad * cosf(ang);
}

/* n bytes of bf16 values drawn from N(0, 1): float32 rounded to nearest even, little endian. */
static void fill_bf16(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    float spare = 0;
    int have = 0;
    for (size_t i = 0; i + 2 <= n; i += 2) {
        float f = normal01(&s, &spare, &have);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u += 0x7fffu + ((u >> 16) & 1u);
        p[i] = (uint8_t)(u >> 16);
        p[i + 1] = (uint8_t)(u >> 24);
    }
    if (n % 2)
        p[n - 1] = 0;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = splitmix64(&s);
        memcpy(p + i, &v, 8);
    }
    if (i < n) {
        uint64_t v = splitmix64(&s);
        memcpy(p + i, &v, n - i);
    }
}

/* Chained hashes of n synthetic chunks drawn from token set `set` of this run. */
static int make_hashes(uint64_t seed, uint64_t set, kvt_hash_t *out, size_t n)
{
    size_t ntok = n * BENCH_CHUNK_TOKENS;
    uint32_t *tok = malloc(ntok * sizeof *tok);
    if (!tok)
        return -1;
    uint64_t s = seed ^ (set * 0xd6e8feb86659fd93u);
    for (size_t i = 0; i < ntok; i++)
        tok[i] = (uint32_t)splitmix64(&s);
    size_t got = kvt_hash_chain(tok, ntok, BENCH_CHUNK_TOKENS, NULL, out, n);
    free(tok);
    return got == n ? 0 : -1;
}

static void stamp(uint8_t *chunk, size_t len, const kvt_hash_t *h)
{
    memcpy(chunk, h->b, len < sizeof h->b ? len : sizeof h->b);
}

__attribute__((format(printf, 3, 4))) static void rank_fail(rank_t *r, int kind, const char *fmt,
                                                            ...)
{
    if (r->failed)
        return;
    r->failed = kind;
    int off = snprintf(r->msg, sizeof r->msg, "rank %u: ", r->rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + off, sizeof r->msg - (size_t)off, fmt, ap);
    va_end(ap);
}

static void rank_fail_kvt(rank_t *r, const char *what, int rc, const kvt_client_t *c)
{
    const char *detail = c ? kvt_last_error(c) : "";
    rank_fail(r, 1, "%s: %s%s%s", what, kvt_strerror(rc), *detail ? ": " : "", detail);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    size_t n;
    double p50, p90, p99, max; /* microseconds */
} pct_t;

/* Nearest-rank percentiles of v (sorted in place). */
static pct_t percentiles(uint64_t *v, size_t n)
{
    pct_t p = {.n = n};
    if (n == 0)
        return p;
    qsort(v, n, sizeof *v, cmp_u64);
    double q[3] = {50, 90, 99};
    double *out[3] = {&p.p50, &p.p90, &p.p99};
    for (int i = 0; i < 3; i++) {
        size_t k = (size_t)((q[i] / 100.0) * (double)n + 0.999999);
        k = k == 0 ? 0 : k - 1;
        *out[i] = (double)v[k < n ? k : n - 1] / 1000.0;
    }
    p.max = (double)v[n - 1] / 1000.0;
    return p;
}

/* ---- the measured workload, one function over every backend (rank threads) ---- */

typedef enum { OP_SAVE, OP_LOAD } op_t;

/* The chains of backend bk: round `round`, or the warm-up chain when warm is set. */
static kvt_hash_t *chain_of(const bench_t *b, bk_t bk, uint32_t round, int warm)
{
    if (warm)
        return b->warm_hashes + (size_t)bk * b->nwarm;
    return b->round_hashes + ((size_t)round * BK_N + bk) * b->o.chunks;
}

static int kv_save(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes;
    const void *bufs[k];
    size_t lens[k];
    for (size_t j = 0; j < k; j++) {
        bufs[j] = r->src + (i + j) * chunk;
        lens[j] = chunk;
    }
    kvt_save_opts_t so = {.parent = i % r->b->chain_len ? &h[i - 1] : NULL};
    int rc = kvt_save(c, h + i, k, bufs, lens, &so, r->outcomes + i);
    if (rc)
        rank_fail_kvt(r, "save", rc, c);
    return rc ? -1 : 0;
}

static int kv_load(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes, nhit = 0;
    void *bufs[k];
    size_t caps[k];
    for (size_t j = 0; j < k; j++) {
        bufs[j] = r->dst + (i + j) * chunk;
        caps[j] = chunk;
    }
    int rc = kvt_load(c, h + i, k, bufs, caps, r->lens + i, &nhit);
    if (rc)
        rank_fail_kvt(r, "load", rc, c);
    return rc ? -1 : 0;
}

/* The Redis key of chunk h on this rank; returns its length. */
static size_t redis_key(const rank_t *r, const kvt_hash_t *h, char key[BENCH_REDIS_KEY_MAX])
{
    char hex[33];
    kvt_hash_format(h, hex);
    int n = snprintf(key, BENCH_REDIS_KEY_MAX, "%s:%016" PRIx64 ":%u:%s", BENCH_MODEL, r->b->seed,
                     r->rank, hex);
    return (size_t)n;
}

/* Reads the next pipelined reply; NULL after recording the failure. An error reply fails. */
static redisReply *redis_reply(rank_t *r, const char *what)
{
    void *p = NULL;
    if (redisGetReply(r->redis, &p) != REDIS_OK || !p) {
        rank_fail(r, 1, "redis %s: %s", what, r->redis->errstr);
        return NULL;
    }
    redisReply *x = p;
    if (x->type == REDIS_REPLY_ERROR) {
        rank_fail(r, 1, "redis %s: %s", what, x->str);
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

typedef enum { REDIS_SET, REDIS_GET, REDIS_UNLINK } redis_cmd_t;
static const char *const redis_cmds[] = {"SET", "GET", "UNLINK"};

/* Takes the reply to command cmd on chunk `at`: SET must answer OK (the chunk is then stored),
 * GET copies its value into dst (nil is a miss: lens 0), UNLINK's count is not looked at. */
static int redis_take(rank_t *r, redis_cmd_t cmd, const redisReply *x, size_t at)
{
    size_t chunk = r->b->o.chunk_bytes;
    size_t len = x->type == REDIS_REPLY_STRING ? (size_t)x->len : 0;
    switch (cmd) {
    case REDIS_SET:
        if (x->type != REDIS_REPLY_STATUS || strcmp(x->str, "OK") != 0) {
            rank_fail(r, 1, "redis SET: the reply is not OK");
            return -1;
        }
        r->outcomes[at] = KVT_SAVE_STORED;
        return 0;
    case REDIS_GET:
        if (x->type != REDIS_REPLY_NIL && (x->type != REDIS_REPLY_STRING || len > chunk)) {
            rank_fail(r, 1, "redis GET: reply of type %d, %zu bytes (chunks are %zu)", x->type, len,
                      chunk);
            return -1;
        }
        if (len)
            memcpy(r->dst + at * chunk, x->str, len);
        r->lens[at] = len;
        return 0;
    case REDIS_UNLINK:
        return 0;
    }
    return -1;
}

/* One pipeline: cmd on the keys of chunks [i, i + k) of chain h (SET with the chunk in src as
 * value, binary safe), every command appended before the first reply is read, so a call costs
 * one round trip like a kvtier call of k chunks. */
static int redis_pipeline(rank_t *r, redis_cmd_t cmd, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes;
    const char *name = redis_cmds[cmd];
    char key[BENCH_REDIS_KEY_MAX];
    for (size_t j = 0; j < k; j++) {
        size_t klen = redis_key(r, &h[i + j], key);
        const char *val = (const char *)(r->src + (i + j) * chunk);
        int rc = cmd == REDIS_SET ? redisAppendCommand(r->redis, "SET %b %b", key, klen, val, chunk)
                                  : redisAppendCommand(r->redis, "%s %b", name, key, klen);
        if (rc != REDIS_OK) {
            rank_fail(r, 1, "redis %s: %s", name, r->redis->errstr);
            return -1;
        }
    }
    for (size_t j = 0; j < k; j++) {
        redisReply *x = redis_reply(r, name);
        if (!x)
            return -1;
        int rc = redis_take(r, cmd, x, i + j);
        freeReplyObject(x);
        if (rc)
            return -1;
    }
    return 0;
}

/* Unlinks the chunks saved to Redis since the last call (the chain of the current step). */
static int redis_drop(rank_t *r)
{
    for (size_t i = 0; i < r->nrkeys; i += BENCH_REDIS_UNLINK_BLOCK) {
        size_t left = r->nrkeys - i;
        size_t k = left < BENCH_REDIS_UNLINK_BLOCK ? left : BENCH_REDIS_UNLINK_BLOCK;
        if (redis_pipeline(r, REDIS_UNLINK, r->rkeys, i, k))
            return -1;
    }
    r->rkeys = NULL;
    r->nrkeys = 0;
    return 0;
}

/* One call of the workload: chunks [i, i + k) of chain h through backend bk. */
static int bk_call(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t i, size_t k)
{
    if (bk == BK_REDIS)
        return redis_pipeline(r, op == OP_SAVE ? REDIS_SET : REDIS_GET, h, i, k);
    kvt_client_t *c = r->bk[bk].kv;
    return op == OP_SAVE ? kv_save(r, c, h, i, k) : kv_load(r, c, h, i, k);
}

/* The measured workload: chains h of n chunks (chain_len each, the last may be shorter) saved
 * from src (outcomes) or loaded into dst (lens) through backend bk in calls of --batch chunks
 * that never cross a chain; lat (may be NULL) gets each call's latency. */
static int run_chain(rank_t *r, bk_t bk, op_t op, const kvt_hash_t *h, size_t n, series_t *lat)
{
    size_t batch = r->b->o.batch, chain = r->b->chain_len;
    if (bk == BK_REDIS && op == OP_SAVE) {
        r->rkeys = h; /* before the first SET: a failed save is unlinked too */
        r->nrkeys = n;
    }
    for (size_t i = 0, k; i < n; i += k) {
        size_t left = chain - i % chain;
        k = n - i < batch ? n - i : batch;
        k = k < left ? k : left;
        uint64_t t0 = now_ns();
        int rc = bk_call(r, bk, op, h, i, k);
        uint64_t t1 = now_ns();
        if (rc)
            return -1;
        if (lat)
            lat->v[lat->n++] = t1 - t0;
    }
    return 0;
}

/* Checks the loaded chunks against the saved ones; with count, counts hits, misses and lost
 * chunks into c. */
static void verify_chain(rank_t *r, const kvt_hash_t *h, size_t n, counts_t *c)
{
    size_t chunk = r->b->o.chunk_bytes;
    for (size_t i = 0; i < n; i++) {
        char hex[33];
        if (r->lens[i] == 0) {
            int kept = r->outcomes[i] == KVT_SAVE_STORED || r->outcomes[i] == KVT_SAVE_EXISTS;
            if (c) {
                c->misses++;
                c->lost += (uint64_t)kept;
            }
            continue;
        }
        const uint8_t *want = r->src + i * chunk, *got = r->dst + i * chunk;
        if (r->lens[i] != chunk || memcmp(want, got, chunk) != 0) {
            size_t off = 0;
            while (off < chunk && off < r->lens[i] && want[off] == got[off])
                off++;
            kvt_hash_format(&h[i], hex);
            char where[32] = "warm-up";
            if (c)
                snprintf(where, sizeof where, "round %u", r->b->round);
            rank_fail(r, 1,
                      "DATA MISMATCH %s %s chunk %zu (hash %s): loaded %zu bytes, saved %zu, "
                      "first difference at offset %zu",
                      cols[r->b->cur].name, where, i, hex, r->lens[i], chunk, off);
            return;
        }
        if (c) {
            c->hits++;
            c->loaded_bytes += chunk;
        }
    }
}

static void count_outcomes(const rank_t *r, size_t n, counts_t *c)
{
    for (size_t i = 0; i < n; i++) {
        switch (r->outcomes[i]) {
        case KVT_SAVE_STORED:
            c->stored++;
            c->stored_bytes += r->b->o.chunk_bytes;
            break;
        case KVT_SAVE_EXISTS:
            c->exists++;
            break;
        case KVT_SAVE_NOSPACE:
            c->nospace++;
            break;
        default:
            c->declined++;
            break;
        }
    }
}

/* Stamps chain h into src and clears the load side, so that nothing of the previous backend
 * or round can pass the check. */
static void prepare_chain(rank_t *r, const kvt_hash_t *h, size_t n)
{
    size_t chunk = r->b->o.chunk_bytes;
    for (size_t i = 0; i < n; i++)
        stamp(r->src + i * chunk, chunk, &h[i]);
    memset(r->dst, BENCH_FILL_BYTE, n * chunk);
    memset(r->lens, 0, n * sizeof *r->lens);
    memset(r->outcomes, 0, n);
}

static int connect_ns(rank_t *r, const kvt_ns_desc_t *ns, int data_path, kvt_client_t **out)
{
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = data_path};
    return kvt_connect(r->b->o.endpoint, ns, r->rank, &co, out);
}

/* Connects the kvtier backends and the lookup client. The shared-memory client may fail with
 * EUNSUPP or ESYS under --data-path auto: the backend is then unavailable, not an error. */
static void setup_kvtier(rank_t *r)
{
    const bench_t *b = r->b;
    int rc;
    if (b->bk_state[BK_SHM] == BK_ON) {
        rc = connect_ns(r, &b->bulk_ns, KVT_DATA_PATH_SHM, &r->bk[BK_SHM].kv);
        if ((rc == KVT_EUNSUPP || rc == KVT_ESYS) && b->o.data_path == KVT_DATA_PATH_AUTO) {
            r->shm_rc = rc;
        } else if (rc) {
            rank_fail(r, 1,
                      "connect %s (shm path): %s (the shared-memory path needs an ipc:// "
                      "endpoint and an arena file this user can map)",
                      b->o.endpoint, kvt_strerror(rc));
            return;
        }
    }
    rc = connect_ns(r, &b->bulk_ns, KVT_DATA_PATH_FRAMES, &r->bk[BK_FRAMES].kv);
    if (rc == 0)
        rc = connect_ns(r, &b->lookup_ns, KVT_DATA_PATH_FRAMES, &r->lk);
    if (rc) {
        rank_fail(r, 1, "connect %s: %s", b->o.endpoint, kvt_strerror(rc));
        return;
    }
    if (r->rank == 0) {
        rc = kvt_server_info(r->bk[BK_FRAMES].kv, &r->b->info);
        if (rc)
            rank_fail_kvt(r, "server info", rc, r->bk[BK_FRAMES].kv);
    }
}

static void setup_redis(rank_t *r)
{
    const bench_opts_t *o = &r->b->o;
    struct timeval tv = {.tv_sec = BENCH_TIMEOUT_MS / 1000,
                         .tv_usec = BENCH_TIMEOUT_MS % 1000 * 1000};
    r->redis = redisConnectWithTimeout(o->redis_host, o->redis_port, tv);
    if (!r->redis)
        rank_fail(r, 1, "redis %s: out of memory", o->redis_addr);
    else if (r->redis->err)
        rank_fail(r, 1, "redis %s: %s", o->redis_addr, r->redis->errstr);
    else if (redisSetTimeout(r->redis, tv) != REDIS_OK)
        rank_fail(r, 1, "redis %s: cannot set the timeout", o->redis_addr);
}

static void step_setup(rank_t *r)
{
    const bench_t *b = r->b;
    const bench_opts_t *o = &b->o;
    size_t bytes = (size_t)o->chunks * o->chunk_bytes;
    size_t calls = (size_t)o->rounds * b->calls_per_round;
    int nomem = 0;
    r->src = malloc(bytes);
    r->dst = malloc(bytes);
    r->small = malloc((size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES);
    r->outcomes = calloc(o->chunks, 1);
    r->lens = calloc(o->chunks, sizeof *r->lens);
    r->lookup.v = calloc(o->lookups, sizeof(uint64_t));
    r->zlookup.v = calloc(o->lookups, sizeof(uint64_t));
    if (o->disk_dir[0]) {
        r->dsave.v = calloc(b->calls_per_round, sizeof(uint64_t));
        r->dload.v = calloc(b->calls_per_round, sizeof(uint64_t));
        nomem |= !r->dsave.v || !r->dload.v;
    }
    for (int k = 0; k < BK_N; k++) {
        if (b->bk_state[k] == BK_OFF)
            continue;
        r->bk[k].save.v = calloc(calls, sizeof(uint64_t));
        r->bk[k].load.v = calloc(calls, sizeof(uint64_t));
        nomem |= !r->bk[k].save.v || !r->bk[k].load.v;
    }
    if (nomem || !r->src || !r->dst || !r->small || !r->outcomes || !r->lens || !r->lookup.v ||
        !r->zlookup.v) {
        rank_fail(r, 1, "out of memory (%zu bytes of chunk buffers)", 2 * bytes);
        return;
    }
    if (o->data == DATA_BF16) /* the same values in every run: chunk i of rank r, seed r:i */
        for (size_t i = 0; i < o->chunks; i++)
            fill_bf16(r->src + i * o->chunk_bytes, o->chunk_bytes,
                      0xbf16bf1600000000u ^ ((uint64_t)r->rank << 32 | i));
    else
        fill_random(r->src, bytes, b->seed + r->rank);
    memset(r->dst, BENCH_FILL_BYTE, bytes);
    if (o->disk_dir[0])
        prepare_chain(r, b->disk_hashes, o->chunks);
    fill_random(r->small, (size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES, ~b->seed + r->rank);
    setup_kvtier(r);
    if (!r->failed && b->bk_state[BK_REDIS] == BK_ON)
        setup_redis(r);
}

/* The workload once, unmeasured and unverified counts, on the backend's warm-up chain. */
static void step_warmup(rank_t *r)
{
    bench_t *b = r->b;
    const kvt_hash_t *h = chain_of(b, b->cur, 0, 1);
    prepare_chain(r, h, b->nwarm);
    if (run_chain(r, b->cur, OP_SAVE, h, b->nwarm, NULL) ||
        run_chain(r, b->cur, OP_LOAD, h, b->nwarm, NULL))
        return;
    verify_chain(r, h, b->nwarm, NULL);
    if (!r->failed && b->cur == BK_REDIS)
        redis_drop(r);
}

static int is_lookup_thread(const rank_t *r)
{
    return !r->b->o.all_ranks || r->rank == 0;
}

static void do_lookups(rank_t *r, uint32_t count, series_t *lat)
{
    const bench_t *b = r->b;
    uint32_t world = b->o.world;
    uint32_t rank_hits[world];
    uint32_t expect = b->o.prompt_chunks;
    if (b->o.all_ranks && b->o.ranks < world)
        expect = 0; /* ranks that no thread fills hit 0 */
    kvt_lookup_opts_t lo = {.all_ranks = b->o.all_ranks};
    for (uint32_t i = 0; i < count; i++) {
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = world};
        uint64_t t0 = now_ns();
        int rc = kvt_lookup(r->lk, b->lookup_hashes, b->o.prompt_chunks, &lo, &res);
        uint64_t t1 = now_ns();
        if (rc) {
            rank_fail_kvt(r, "lookup", rc, r->lk);
            return;
        }
        if (lat) {
            lat->v[lat->n++] = t1 - t0;
            r->lookup_short += res.hit < expect;
            r->lookup_skipped += res.skipped != 0;
        }
    }
}

static void step_fill_lookup(rank_t *r)
{
    const bench_t *b = r->b;
    uint32_t n = b->o.prompt_chunks;
    uint8_t *oc = malloc(n);
    if (!oc) {
        rank_fail(r, 1, "out of memory");
        return;
    }
    const void **bufs = malloc(n * sizeof *bufs);
    size_t *lens = malloc(n * sizeof *lens);
    if (!bufs || !lens) {
        rank_fail(r, 1, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        bufs[i] = r->small + (size_t)i * BENCH_LOOKUP_CHUNK_BYTES;
        lens[i] = BENCH_LOOKUP_CHUNK_BYTES;
    }
    int rc = kvt_save(r->lk, b->lookup_hashes, n, bufs, lens, NULL, oc);
    if (rc) {
        rank_fail_kvt(r, "save (lookup namespace)", rc, r->lk);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (oc[i] == KVT_SAVE_STORED || oc[i] == KVT_SAVE_EXISTS)
            r->fill_stored++;
        else
            r->fill_other++;
    }
out:
    free(lens);
    free(bufs);
    free(oc);
}

/* ---- ZeroMQ baseline (rank threads and the echo thread) ---- */

static void *echo_main(void *arg)
{
    bench_t *b = arg;
    size_t chunk = b->o.chunk_bytes;
    void *sock = zmq_socket(b->zctx, ZMQ_ROUTER);
    uint8_t *payload = malloc(chunk);
    uint8_t reply[BENCH_LOOKUP_REPLY_BYTES] = {0};
    if (!sock || !payload)
        goto out;
    fill_random(payload, chunk, b->seed ^ 0x5eed);
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock, b->zendpoint) != 0)
        goto out;
    for (;;) {
        zmq_msg_t id, op;
        zmq_msg_init(&id);
        zmq_msg_init(&op);
        if (zmq_msg_recv(&id, sock, 0) < 0 || zmq_msg_recv(&op, sock, 0) < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&op);
            break; /* ETERM: the context is shutting down */
        }
        uint8_t code = 0;
        uint32_t count = 0;
        if (zmq_msg_size(&op) == BENCH_OP_BYTES) {
            const uint8_t *p = zmq_msg_data(&op);
            code = p[0];
            memcpy(&count, p + 4, sizeof count);
        }
        int more = zmq_msg_more(&op);
        zmq_msg_close(&op);
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, sock, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        zmq_msg_send(&id, sock, ZMQ_SNDMORE);
        zmq_msg_close(&id);
        if (code == 'L') {
            zmq_send(sock, reply, BENCH_ACK_BYTES, count ? ZMQ_SNDMORE : 0);
            for (uint32_t i = 0; i < count; i++)
                zmq_send(sock, payload, chunk, i + 1 < count ? ZMQ_SNDMORE : 0);
        } else if (code == 'Q') {
            zmq_send(sock, reply, BENCH_LOOKUP_REPLY_BYTES, 0);
        } else {
            zmq_send(sock, reply, BENCH_ACK_BYTES, 0);
        }
    }
out:
    if (sock)
        zmq_close(sock);
    free(payload);
    return NULL;
}

static int z_send_op(void *s, char code, uint32_t count, int more)
{
    uint8_t op[BENCH_OP_BYTES] = {(uint8_t)code};
    memcpy(op + 4, &count, sizeof count);
    return zmq_send(s, op, sizeof op, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/* Receives one whole reply; returns its payload bytes beyond the first frame, or -1. */
static int64_t z_recv_reply(void *s, size_t *nframes)
{
    int64_t bytes = 0;
    size_t frames = 0;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        if (frames++)
            bytes += (int64_t)zmq_msg_size(&m);
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    *nframes = frames;
    return bytes;
}

static void z_fail(rank_t *r, const char *what)
{
    rank_fail(r, 1, "zmq baseline %s: %s", what, zmq_strerror(zmq_errno()));
}

static void z_save_like(rank_t *r, uint32_t nchunks)
{
    const bench_t *b = r->b;
    size_t chunk = b->o.chunk_bytes;
    for (uint32_t i = 0; i < nchunks; i += b->o.batch) {
        uint32_t k = nchunks - i < b->o.batch ? nchunks - i : b->o.batch;
        size_t nframes = 0;
        if (z_send_op(r->zsock, 'S', k, 1) < 0)
            return z_fail(r, "send");
        for (uint32_t j = 0; j < k; j++) {
            if (zmq_send(r->zsock, r->src + (size_t)(i + j) * chunk, chunk,
                         j + 1 < k ? ZMQ_SNDMORE : 0) < 0)
                return z_fail(r, "send");
        }
        if (z_recv_reply(r->zsock, &nframes) < 0)
            return z_fail(r, "receive");
        r->zbytes_save += (uint64_t)k * chunk;
    }
}

static void z_load_like(rank_t *r, uint32_t nchunks)
{
    const bench_t *b = r->b;
    for (uint32_t i = 0; i < nchunks; i += b->o.batch) {
        uint32_t k = nchunks - i < b->o.batch ? nchunks - i : b->o.batch;
        size_t nframes = 0;
        if (z_send_op(r->zsock, 'L', k, 0) < 0)
            return z_fail(r, "send");
        int64_t got = z_recv_reply(r->zsock, &nframes);
        if (got < 0)
            return z_fail(r, "receive");
        if ((uint64_t)got != (uint64_t)k * b->o.chunk_bytes || nframes != k + 1u) {
            rank_fail(r, 1, "zmq baseline: load-like reply of %" PRId64 " bytes", got);
            return;
        }
        r->zbytes_load += (uint64_t)got;
    }
}

static void z_lookup_like(rank_t *r, uint32_t count, series_t *lat)
{
    const bench_t *b = r->b;
    const void *req = b->lookup_hashes;
    size_t req_len = (size_t)b->o.prompt_chunks * sizeof(kvt_hash_t);
    for (uint32_t i = 0; i < count; i++) {
        size_t nframes = 0;
        uint64_t t0 = now_ns();
        if (z_send_op(r->zsock, 'Q', 0, 1) < 0 || zmq_send(r->zsock, req, req_len, 0) < 0)
            return z_fail(r, "send");
        if (z_recv_reply(r->zsock, &nframes) < 0)
            return z_fail(r, "receive");
        uint64_t t1 = now_ns();
        if (lat)
            lat->v[lat->n++] = t1 - t0;
    }
}

static void step_z_connect(rank_t *r)
{
    int linger = 0, tmo = BENCH_TIMEOUT_MS;
    r->zsock = zmq_socket(r->b->zctx, ZMQ_DEALER);
    if (!r->zsock)
        return z_fail(r, "socket");
    zmq_setsockopt(r->zsock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(r->zsock, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(r->zsock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    if (zmq_connect(r->zsock, r->b->zendpoint) != 0)
        return z_fail(r, "connect");
}

/* Unlinks what this rank left in Redis (a round cut short by a failure) and disconnects. After
 * a failure the pipeline may hold unread replies: a fresh connection does the cleanup. */
static void redis_close(rank_t *r)
{
    if (!r->redis)
        return;
    if (r->nrkeys && ((r->failed && redisReconnect(r->redis) != REDIS_OK) || redis_drop(r)))
        tool_error("rank %u: %zu Redis keys %s:%016" PRIx64 ":%u:* may be left: %s", r->rank,
                   r->nrkeys, BENCH_MODEL, r->b->seed, r->rank, r->redis->errstr);
    redisFree(r->redis);
    r->redis = NULL;
}

static void step_exit(rank_t *r)
{
    for (int k = 0; k < BK_N; k++)
        kvt_close(&r->bk[k].kv);
    kvt_close(&r->lk);
    redis_close(r);
    if (r->zsock)
        zmq_close(r->zsock);
    r->zsock = NULL;
}

static void rank_run_step(rank_t *r)
{
    bench_t *b = r->b;
    const kvt_hash_t *h = chain_of(b, b->cur, b->round, 0);
    rank_bk_t *rb = &r->bk[b->cur];
    size_t n = b->o.chunks;
    uint32_t zwarm = b->nwarm;
    switch (b->step) {
    case STEP_SETUP:
        step_setup(r);
        break;
    case STEP_WARMUP:
        step_warmup(r);
        break;
    case STEP_PREPARE:
        prepare_chain(r, h, n);
        break;
    case STEP_SAVE:
        if (run_chain(r, b->cur, OP_SAVE, h, n, &rb->save) == 0)
            count_outcomes(r, n, &rb->n);
        break;
    case STEP_LOAD:
        run_chain(r, b->cur, OP_LOAD, h, n, &rb->load);
        break;
    case STEP_VERIFY:
        verify_chain(r, h, n, &rb->n);
        if (!r->failed && b->cur == BK_REDIS)
            redis_drop(r);
        break;
    case STEP_FILL_LOOKUP:
        step_fill_lookup(r);
        break;
    case STEP_LOOKUP_WARM:
        if (is_lookup_thread(r))
            do_lookups(r, b->o.lookups / 20 + 1, NULL);
        break;
    case STEP_LOOKUP:
        if (is_lookup_thread(r))
            do_lookups(r, b->slice, &r->lookup);
        break;
    case STEP_Z_CONNECT:
        step_z_connect(r);
        break;
    case STEP_Z_WARM:
        z_save_like(r, zwarm);
        if (!r->failed)
            z_load_like(r, zwarm);
        if (!r->failed && is_lookup_thread(r))
            z_lookup_like(r, b->o.lookups / 20 + 1, NULL);
        r->zbytes_save = r->zbytes_load = 0;
        break;
    case STEP_Z_SAVE:
        z_save_like(r, b->o.chunks);
        break;
    case STEP_Z_LOAD:
        z_load_like(r, b->o.chunks);
        break;
    case STEP_Z_LOOKUP:
        if (is_lookup_thread(r))
            z_lookup_like(r, b->slice, &r->zlookup);
        break;
    case STEP_DISK_SAVE:
        if (run_chain(r, b->primary, OP_SAVE, b->disk_hashes, n, &r->dsave) == 0)
            count_outcomes(r, n, &r->dn);
        break;
    case STEP_DISK_LOAD:
        run_chain(r, BK_FRAMES, OP_LOAD, b->disk_hashes, b->disk_load_n, &r->dload);
        break;
    case STEP_DISK_VERIFY:
        verify_chain(r, b->disk_hashes, b->disk_load_n, &r->dn);
        break;
    case STEP_EXIT:
        break;
    }
}

static void *rank_main(void *arg)
{
    rank_t *r = arg;
    bench_t *b = r->b;
    pthread_mutex_lock(&b->gate_mu);
    while (!b->launched)
        pthread_cond_wait(&b->gate_cv, &b->gate_mu);
    int abort_run = b->abort;
    pthread_mutex_unlock(&b->gate_mu);
    if (abort_run)
        return NULL;
    for (;;) {
        pthread_barrier_wait(&b->start);
        if (b->step == STEP_EXIT)
            break;
        if (!r->failed)
            rank_run_step(r);
        pthread_barrier_wait(&b->end);
    }
    step_exit(r);
    return NULL;
}

/* ---- main thread: steps and baselines ---- */

/* Runs one step on every rank; *secs (may be NULL) receives its wall time. Returns the worst
 * failure kind over ranks (0 none), after printing every rank's message. */
static int run_step(bench_t *b, step_t step, uint32_t round, double *secs)
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

/* One pass of memcpy over rank 0's chunks (main thread, ranks parked); adds to *bytes, *ns. */
static void memcpy_pass(const bench_t *b, uint64_t *bytes, uint64_t *ns)
{
    const rank_t *r = &b->ranks[0];
    size_t chunk = b->o.chunk_bytes, n = b->o.chunks;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        memcpy(r->dst + i * chunk, r->src + i * chunk, chunk);
        __asm__ __volatile__("" ::: "memory");
    }
    if (ns)
        *ns += now_ns() - t0;
    if (bytes)
        *bytes += (uint64_t)n * chunk;
}

/* One backend's results over all ranks and rounds. */
typedef struct {
    double save_s, load_s; /* wall time of the save and load steps */
    counts_t n;
    pct_t save, load; /* per-call latencies */
} bk_result_t;

typedef struct {
    bk_result_t bk[BK_N];
    double zsave_s, zload_s, memcpy_gbps;
    uint64_t memcpy_bytes, memcpy_ns;
    uint64_t fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped, zbytes_save, zbytes_load;
    pct_t lookup, zlookup;
} results_t;

/* Where a rank_t holds the save or load latencies of backend k. */
static size_t series_off(int k, op_t op)
{
    size_t f = op == OP_SAVE ? offsetof(rank_bk_t, save) : offsetof(rank_bk_t, load);
    return offsetof(rank_t, bk) + (size_t)k * sizeof(rank_bk_t) + f;
}

/* Concatenates the latency series at offset off of every rank and returns its percentiles. */
static int merge_pct(const bench_t *b, size_t off, pct_t *out)
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

static void counts_add(counts_t *to, const counts_t *c)
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

static int collect(const bench_t *b, results_t *res)
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
    for (int k = 0; k < BK_N; k++)
        if (merge_pct(b, series_off(k, OP_SAVE), &res->bk[k].save) ||
            merge_pct(b, series_off(k, OP_LOAD), &res->bk[k].load))
            return -1;
    if (merge_pct(b, offsetof(rank_t, lookup), &res->lookup) ||
        merge_pct(b, offsetof(rank_t, zlookup), &res->zlookup))
        return -1;
    return 0;
}

/* ---- report ---- */

static double gbps(uint64_t bytes, double secs)
{
    return secs > 0 ? (double)bytes / secs / 1e9 : 0.0;
}

static double ratio(double a, double base)
{
    return base > 0 ? a / base : 0.0;
}

static const char *const op_names[2] = {"save", "load"}; /* by op_t */

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
}

/* Ratio i of the table for op; NAN when either side was not measured or is zero. */
static double compare_ratio(const compare_t *c, op_t op, size_t i)
{
    double num = c->gbps[op][ratios[i].num], den = c->gbps[op][ratios[i].den];
    return isnan(num) || isnan(den) || den <= 0 ? NAN : num / den;
}

#define WARN_MAX 16
typedef struct {
    int n;
    char text[WARN_MAX][256];
} warnings_t;

__attribute__((format(printf, 2, 3))) static void warn_add(warnings_t *w, const char *fmt, ...)
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
                     "%s: %" PRIu64 " chunk saves answered NOSPACE: the daemon's "
                     "ram.capacity_bytes is too small for this run (raise it or lower "
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
    if (r->fill_other)
        warn_add(w, "%" PRIu64 " lookup-namespace chunks were not stored", r->fill_other);
    if (r->lookup_skipped)
        warn_add(w, "%" PRIu64 " lookups were skipped by the lookup-skip gate", r->lookup_skipped);
    if (r->lookup_short)
        warn_add(w, "%" PRIu64 " lookups hit fewer than the expected chunks", r->lookup_short);
}

static json_t *pct_json(const pct_t *p)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f}", "calls", (json_int_t)p->n, "p50_us", p->p50, "p90_us",
                     p->p90, "p99_us", p->p99, "max_us", p->max);
}

static json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
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

static int data_path_of(bk_t bk)
{
    return bk == BK_SHM ? KVT_DATA_PATH_SHM : KVT_DATA_PATH_FRAMES;
}

static int print_json(const bench_t *b, const results_t *r, const warnings_t *w)
{
    const bench_opts_t *o = &b->o;
    const bk_result_t *p = &r->bk[b->primary];
    double save = gbps(p->n.stored_bytes, p->save_s), load = gbps(p->n.loaded_bytes, p->load_s);
    double zsave = gbps(r->zbytes_save, r->zsave_s), zload = gbps(r->zbytes_load, r->zload_s);
    json_t *warns = json_array();
    for (int i = 0; warns && i < w->n; i++)
        json_array_append_new(warns, json_string(w->text[i]));
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
        warns ? warns : json_array());
    if (!root)
        return -1;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(root);
    if (!s)
        return -1;
    puts(s);
    free(s);
    return 0;
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
    printf("  %u rank(s) x %u chunks x %.2f MiB per round, %u round(s), %u chunk(s) per call; "
           "%u lookups x %u chunks of 4 KiB\n\n",
           o->ranks, o->chunks, (double)o->chunk_bytes / (1 << 20), o->rounds, o->batch, o->lookups,
           o->prompt_chunks);
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
    printf("%-8s %-18s %.3f GB/s (one thread, same chunks)\n\n", "memcpy", "-", r->memcpy_gbps);
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
    printf("%-26s %8zu %10.1f %10.1f %10.1f %10.1f\n\n", "kvtier lookup", r->lookup.n,
           r->lookup.p50, r->lookup.p90, r->lookup.p99, r->lookup.max);
    for (int i = 0; i < BK_N; i++) {
        const counts_t *n = &r->bk[i].n;
        if (b->bk_state[i] == BK_ON)
            printf("%s: save %" PRIu64 " stored, %" PRIu64 " exists, %" PRIu64 " nospace, %" PRIu64
                   " declined; load %" PRIu64 " hits verified byte-exact, %" PRIu64 " misses\n",
                   cols[i].name, n->stored, n->exists, n->nospace, n->declined, n->hits, n->misses);
    }
}

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier-bench (-e ENDPOINT | -c CONFIG) [options]\n"
            "\n"
            "Saves, loads (verified byte-exact) and looks up synthetic chunks against a running\n"
            "kvtierd on its shared-memory and its frames data path, and measures the same\n"
            "workload over raw ZeroMQ, memcpy and optionally Redis in the same run.\n"
            "\n"
            "  -e, --endpoint ENDPOINT  daemon endpoint (ipc://PATH or tcp://HOST:PORT)\n"
            "  -c, --config FILE        read server.endpoint from the daemon's JSON config\n"
            "      --chunk-bytes SIZE   bytes per chunk, e.g. 2MiB (default 2MiB)\n"
            "      --chunks N           chunks per rank per round (default 64)\n"
            "      --ranks N            ranks, one client and thread each (default 1)\n"
            "      --world N            namespace world size (default: --ranks)\n"
            "      --rounds N           save+load rounds (default 5)\n"
            "      --batch N            chunks per save/load call (default 1)\n"
            "      --prompt-chunks N    hashes per lookup (default 400; 4 KiB chunks)\n"
            "      --lookups N          lookups per lookup thread (default 2000)\n"
            "      --all-ranks          lookups ask for all ranks (one thread asks)\n"
            "      --ns NAME            namespace model name (default kvtier-bench-<random>)\n"
            "      --data-path PATH     auto (default): measure both data paths, the shm one\n"
            "                           shown unavailable when the arena cannot be mapped;\n"
            "                           shm: the same, but fail then; frames: frames only\n"
            "      --vs-redis HOST:PORT also run the workload against this Redis server (a\n"
            "                           loopback address: 127.0.0.1, [::1] or localhost);\n"
            "                           its keys kvtier-bench:<seed>:* are deleted at the end\n"
            "      --data KIND          chunk bytes: random (default) or bf16 (N(0,1) values\n"
            "                           rounded to bf16, the same for every run)\n"
            "      --disk-dir DIR       disk mode: measure the daemon's disk tier instead (DIR:\n"
            "                           its disk.dir, where the raw baseline file is written\n"
            "                           and removed); needs more chunks than ram.capacity_bytes\n"
            "      --status SOCKET      the daemon's status socket (default: server.status_socket\n"
            "                           of -c CONFIG); disk mode reads capacities and counters\n"
            "      --chain-chunks N     disk mode: chunks per saved chain (default 8)\n"
            "      --json               print one JSON object instead of the table\n"
            "  -h, --help               this text\n"
            "\n"
            "GB/s = 10^9 bytes/s of payload over the wall time of all ranks. The daemon needs\n"
            "about ranks x chunks x chunk-bytes of RAM capacity per round and path.\n"
            "Exit status: 0 ok, 1 data mismatch or daemon error, 2 usage error.\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1ull << 10},
                 {"MiB", 1ull << 20},
                 {"GiB", 1ull << 30},
                 {"KB", 1000},
                 {"MB", 1000000},
                 {"GB", 1000000000},
                 {"K", 1ull << 10},
                 {"M", 1ull << 20},
                 {"G", 1ull << 30}};
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mult)
                return -1;
            *out = v * units[i].mult;
            return 0;
        }
    }
    return -1;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Parses HOST:PORT ([HOST]:PORT for IPv6) into o. Returns 0, -1 when malformed, -2 when HOST
 * is not a loopback address (the benchmark never sends its load to another machine). */
static int parse_redis_addr(const char *s, bench_opts_t *o)
{
    const char *host = s, *colon;
    size_t hlen;
    uint32_t port;
    if (*s == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':')
            return -1;
        host = s + 1;
        hlen = (size_t)(end - host);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hlen = (size_t)(colon - s);
    }
    if (hlen == 0 || hlen >= sizeof o->redis_host || strlen(s) >= sizeof o->redis_addr ||
        parse_u32(colon + 1, 1, 65535, &port))
        return -1;
    memcpy(o->redis_host, host, hlen);
    o->redis_host[hlen] = '\0';
    if (strcmp(o->redis_host, "localhost") == 0)
        strcpy(o->redis_host, "127.0.0.1");
    struct in_addr a4;
    struct in6_addr a6;
    int loopback = 0;
    if (inet_pton(AF_INET, o->redis_host, &a4) == 1)
        loopback = (ntohl(a4.s_addr) >> 24) == 127;
    else if (inet_pton(AF_INET6, o->redis_host, &a6) == 1)
        loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    if (!loopback)
        return -2;
    strcpy(o->redis_addr, s);
    o->redis_port = (int)port;
    return 0;
}

/* Reads server.endpoint (required) into out and server.status_socket (when present, shorter
 * than status_cap and status is still "") into status. */
static int endpoint_from_config(const char *path, char *out, size_t cap, char *status,
                                size_t status_cap)
{
    char *ep = NULL, *st = NULL;
    int rc = -1;

    if (tool_config_endpoints(path, &ep, &st) != 0)
        return -1;
    if (st && !status[0] && strlen(st) < status_cap)
        memcpy(status, st, strlen(st) + 1);
    if (!ep || !*ep)
        tool_error("%s: no server.endpoint string (use --endpoint)", path);
    else if (strlen(ep) >= cap)
        tool_error("%s: server.endpoint too long", path);
    else {
        memcpy(out, ep, strlen(ep) + 1);
        rc = 0;
    }
    free(ep);
    free(st);
    return rc;
}

enum {
    OPT_CHUNK_BYTES = 256,
    OPT_CHUNKS,
    OPT_RANKS,
    OPT_WORLD,
    OPT_ROUNDS,
    OPT_BATCH,
    OPT_PROMPT_CHUNKS,
    OPT_LOOKUPS,
    OPT_ALL_RANKS,
    OPT_NS,
    OPT_JSON,
    OPT_DATA_PATH,
    OPT_VS_REDIS,
    OPT_DISK_DIR,
    OPT_STATUS,
    OPT_DATA,
    OPT_CHAIN_CHUNKS,
};

/* Returns 0 to run, 1 after --help, -1 on a usage error (message printed). */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    static const struct option longopts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"config", required_argument, NULL, 'c'},
        {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
        {"chunks", required_argument, NULL, OPT_CHUNKS},
        {"ranks", required_argument, NULL, OPT_RANKS},
        {"world", required_argument, NULL, OPT_WORLD},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"prompt-chunks", required_argument, NULL, OPT_PROMPT_CHUNKS},
        {"lookups", required_argument, NULL, OPT_LOOKUPS},
        {"all-ranks", no_argument, NULL, OPT_ALL_RANKS},
        {"ns", required_argument, NULL, OPT_NS},
        {"json", no_argument, NULL, OPT_JSON},
        {"data-path", required_argument, NULL, OPT_DATA_PATH},
        {"vs-redis", required_argument, NULL, OPT_VS_REDIS},
        {"disk-dir", required_argument, NULL, OPT_DISK_DIR},
        {"status", required_argument, NULL, OPT_STATUS},
        {"data", required_argument, NULL, OPT_DATA},
        {"chain-chunks", required_argument, NULL, OPT_CHAIN_CHUNKS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *endpoint = NULL, *config = NULL, *ns = NULL;
    const char *bad = NULL;
    int c, rc, rounds_given = 0;
    *o = (bench_opts_t){.chunk_bytes = 2u << 20,
                        .chunks = 64,
                        .ranks = 1,
                        .prompt_chunks = 400,
                        .lookups = 2000,
                        .rounds = 5,
                        .batch = 1};
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":e:c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'e':
            endpoint = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case OPT_CHUNK_BYTES:
            if (parse_size(optarg, &o->chunk_bytes) || o->chunk_bytes == 0 ||
                o->chunk_bytes > (1ull << 30))
                bad = "--chunk-bytes must be a size from 1 byte to 1GiB";
            break;
        case OPT_CHUNKS:
            if (parse_u32(optarg, 1, 1u << 20, &o->chunks))
                bad = "--chunks must be 1..1048576";
            break;
        case OPT_RANKS:
            if (parse_u32(optarg, 1, BENCH_MAX_RANKS, &o->ranks))
                bad = "--ranks must be 1..256";
            break;
        case OPT_WORLD:
            if (parse_u32(optarg, 1, 1024, &o->world))
                bad = "--world must be 1..1024";
            break;
        case OPT_ROUNDS:
            if (parse_u32(optarg, 1, 1000, &o->rounds))
                bad = "--rounds must be 1..1000";
            rounds_given = 1;
            break;
        case OPT_BATCH:
            if (parse_u32(optarg, 1, 4096, &o->batch))
                bad = "--batch must be 1..4096";
            break;
        case OPT_PROMPT_CHUNKS:
            if (parse_u32(optarg, 1, 65536, &o->prompt_chunks))
                bad = "--prompt-chunks must be 1..65536";
            break;
        case OPT_LOOKUPS:
            if (parse_u32(optarg, 1, 10000000, &o->lookups))
                bad = "--lookups must be 1..10000000";
            break;
        case OPT_ALL_RANKS:
            o->all_ranks = 1;
            break;
        case OPT_NS:
            ns = optarg;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_DATA_PATH:
            o->data_path = tool_data_path_parse(optarg);
            if (o->data_path < 0)
                bad = "--data-path must be auto, frames or shm";
            break;
        case OPT_VS_REDIS:
            rc = parse_redis_addr(optarg, o);
            if (rc == -2)
                bad = "--vs-redis: HOST must be a loopback address (127.0.0.0/8, ::1, localhost)";
            else if (rc)
                bad = "--vs-redis must be HOST:PORT with a port from 1 to 65535";
            break;
        case OPT_DISK_DIR:
            if (!*optarg || strlen(optarg) >= sizeof o->disk_dir)
                bad = "--disk-dir must be a directory path";
            else
                strcpy(o->disk_dir, optarg);
            break;
        case OPT_STATUS:
            if (!*optarg || strlen(optarg) >= sizeof o->status_sock)
                bad = "--status must be a Unix socket path shorter than 108 bytes";
            else
                strcpy(o->status_sock, optarg);
            break;
        case OPT_DATA:
            if (strcmp(optarg, "random") == 0)
                o->data = DATA_RANDOM;
            else if (strcmp(optarg, "bf16") == 0)
                o->data = DATA_BF16;
            else
                bad = "--data must be random or bf16";
            break;
        case OPT_CHAIN_CHUNKS:
            if (parse_u32(optarg, 1, 1u << 20, &o->chain_chunks))
                bad = "--chain-chunks must be 1..1048576";
            break;
        case ':':
            tool_error("%s needs a value", argv[optind - 1]);
            return -1;
        default:
            tool_error("unknown option %s (see --help)", argv[optind - 1]);
            return -1;
        }
        if (bad) {
            tool_error("%s, got '%s'", bad, optarg);
            return -1;
        }
    }
    if (optind < argc) {
        tool_error("unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    if (!endpoint == !config) {
        tool_error("give exactly one of --endpoint and -c CONFIG");
        return -1;
    }
    if (endpoint) {
        if (strlen(endpoint) >= sizeof o->endpoint) {
            tool_error("endpoint too long");
            return -1;
        }
        strcpy(o->endpoint, endpoint);
    } else if (endpoint_from_config(config, o->endpoint, sizeof o->endpoint, o->status_sock,
                                    sizeof o->status_sock)) {
        return -1;
    }
    if (o->disk_dir[0]) {
        if (rounds_given || o->redis_addr[0]) {
            tool_error("--rounds and --vs-redis do not apply to --disk-dir");
            return -1;
        }
        if (!o->status_sock[0]) {
            tool_error("--disk-dir needs the daemon's status socket: --status "
                       "SOCKET, or -c CONFIG with server.status_socket");
            return -1;
        }
        o->rounds = 1;
        if (o->chain_chunks == 0)
            o->chain_chunks = BENCH_CHAIN_CHUNKS;
    } else if (o->chain_chunks) {
        tool_error("--chain-chunks applies to --disk-dir only");
        return -1;
    }
    if (o->world == 0)
        o->world = o->ranks;
    if (o->world < o->ranks) {
        tool_error("--world %u is smaller than --ranks %u", o->world, o->ranks);
        return -1;
    }
    if (ns && (!*ns || strlen(ns) >= sizeof o->model)) {
        tool_error("--ns must be 1..255 bytes");
        return -1;
    }
    if (ns)
        strcpy(o->model, ns);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * o->ranks * o->chunks * (double)o->chunk_bytes;
    if (pages > 0 && psize > 0 && need > 0.5 * (double)pages * (double)psize) {
        tool_error("the run needs %.0f MiB of client buffers (2 x ranks x chunks x "
                   "chunk-bytes), more than half of this machine's memory",
                   need / (1 << 20));
        return -1;
    }
    return 0;
}

/* An ipc:// endpoint whose socket file is missing means no daemon: fail fast, not on timeout. */
static int check_endpoint(const char *ep)
{
    struct stat st;
    if (strncmp(ep, "ipc://", 6) == 0 && stat(ep + 6, &st) != 0) {
        tool_error("no daemon at %s (%s)", ep, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- setup and teardown ---- */

static int bench_prepare(bench_t *b)
{
    const bench_opts_t *o = &b->o;
    if (getrandom(&b->seed, sizeof b->seed, 0) != sizeof b->seed)
        b->seed = now_ns() ^ ((uint64_t)getpid() << 32);
    if (!o->model[0])
        snprintf(b->o.model, sizeof b->o.model, "%s-%016" PRIx64, BENCH_MODEL, b->seed);
    b->bulk_ns = (kvt_ns_desc_t){
        .model = b->o.model,
        .dtype = "bench-bulk",
        .chunk_tokens = BENCH_CHUNK_TOKENS,
        .num_layers = 1,
        .num_kv_heads = 1,
        .head_dim = (uint32_t)(o->chunk_bytes < UINT32_MAX ? o->chunk_bytes : UINT32_MAX),
        .world_size = o->world};
    b->lookup_ns = b->bulk_ns;
    b->lookup_ns.dtype = "bench-lookup";
    b->lookup_ns.head_dim = BENCH_LOOKUP_CHUNK_BYTES;
    b->nwarm = o->chunks < 4 ? o->chunks : 4;
    if (b->nwarm < o->batch && o->batch <= o->chunks)
        b->nwarm = o->batch;
    b->chain_len = o->disk_dir[0] ? o->chain_chunks : o->chunks;
    uint32_t per_chain = (b->chain_len + o->batch - 1) / o->batch, tail = o->chunks % b->chain_len;
    b->calls_per_round = o->chunks / b->chain_len * per_chain + (tail + o->batch - 1) / o->batch;
    b->round_hashes = calloc((size_t)o->rounds * BK_N * o->chunks, sizeof(kvt_hash_t));
    b->warm_hashes = calloc((size_t)BK_N * b->nwarm, sizeof(kvt_hash_t));
    b->lookup_hashes = calloc(o->prompt_chunks, sizeof(kvt_hash_t));
    b->ranks = calloc(o->ranks, sizeof(rank_t));
    if (!b->round_hashes || !b->warm_hashes || !b->lookup_hashes || !b->ranks)
        return -1;
    if (o->disk_dir[0]) { /* token sets from 2^32 on: one per chain */
        b->disk_hashes = calloc(o->chunks, sizeof(kvt_hash_t));
        if (!b->disk_hashes)
            return -1;
        for (uint32_t i = 0; i < o->chunks; i += b->chain_len) {
            uint32_t k = o->chunks - i < b->chain_len ? o->chunks - i : b->chain_len;
            if (make_hashes(b->seed, (1ull << 32) + i, b->disk_hashes + i, k))
                return -1;
        }
    }
    b->bk_state[BK_SHM] = o->data_path == KVT_DATA_PATH_FRAMES ? BK_OFF : BK_ON;
    b->bk_state[BK_FRAMES] = BK_ON;
    b->bk_state[BK_REDIS] = o->redis_addr[0] ? BK_ON : BK_OFF;
    snprintf(b->bk_why[BK_SHM], sizeof b->bk_why[0], "not measured (--data-path frames)");
    snprintf(b->bk_why[BK_REDIS], sizeof b->bk_why[0], "not measured (no --vs-redis HOST:PORT)");
    /* Token sets: 1 lookups, 2 + k warm-up of backend k, then round i of backend k. */
    if (make_hashes(b->seed, 1, b->lookup_hashes, o->prompt_chunks))
        return -1;
    for (int k = 0; k < BK_N; k++) {
        if (b->bk_state[k] == BK_OFF)
            continue;
        if (make_hashes(b->seed, 2 + (uint64_t)k, chain_of(b, k, 0, 1), b->nwarm))
            return -1;
        for (uint32_t i = 0; i < o->rounds; i++)
            if (make_hashes(b->seed, 2 + BK_N + (uint64_t)i * BK_N + (uint64_t)k,
                            chain_of(b, k, i, 0), o->chunks))
                return -1;
    }
    return 0;
}

static void bench_free(bench_t *b)
{
    for (uint32_t i = 0; b->ranks && i < b->o.ranks; i++) {
        rank_t *r = &b->ranks[i];
        free(r->src);
        free(r->dst);
        free(r->small);
        free(r->outcomes);
        free(r->lens);
        for (int k = 0; k < BK_N; k++) {
            free(r->bk[k].save.v);
            free(r->bk[k].load.v);
        }
        free(r->lookup.v);
        free(r->zlookup.v);
        free(r->dsave.v);
        free(r->dload.v);
    }
    free(b->disk_hashes);
    free(b->ranks);
    free(b->round_hashes);
    free(b->warm_hashes);
    free(b->lookup_hashes);
}

/* Checks the sizes against the limits the daemon announced at connect. */
static int check_limits(const bench_t *b)
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

/* Starts the echo thread and connects every rank's DEALER to it. */
static int zmq_baseline_start(bench_t *b)
{
    strcpy(b->zdir, "/tmp/kvtier-bench.XXXXXX");
    if (!mkdtemp(b->zdir)) {
        tool_error("mkdtemp: %s", strerror(errno));
        b->zdir[0] = '\0';
        return -1;
    }
    snprintf(b->zendpoint, sizeof b->zendpoint, "ipc://%s/echo.zmq", b->zdir);
    b->zctx = zmq_ctx_new();
    if (!b->zctx || pthread_create(&b->echo, NULL, echo_main, b) != 0) {
        tool_error("cannot start the zmq baseline");
        return -1;
    }
    b->echo_started = 1;
    return run_step(b, STEP_Z_CONNECT, 0, NULL) ? -1 : 0;
}

/* After setup: the shared-memory backend is unavailable when any rank could not map the arena
 * (only under --data-path auto; otherwise setup failed), and the kvtier-vs-zmq table reports
 * the shared-memory path when it is measured. */
static void resolve_backends(bench_t *b)
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
    b->primary = b->bk_state[BK_SHM] == BK_ON ? BK_SHM : BK_FRAMES;
}

/* One round of the workload through backend k: prepare, save, load, verify. */
static int backend_round(bench_t *b, bk_t k, uint32_t round, bk_result_t *res)
{
    b->cur = k;
    return run_step(b, STEP_PREPARE, round, NULL) || run_step(b, STEP_SAVE, round, &res->save_s) ||
           run_step(b, STEP_LOAD, round, &res->load_s) || run_step(b, STEP_VERIFY, round, NULL);
}

/* The measured part: every step in order; returns an exit status. Each round runs every
 * backend, then the ZeroMQ baseline, then memcpy over the same chunks, and lookups alternate
 * with their baseline in slices, so slow drift of the machine (page cache, frequency,
 * neighbours) hits both sides of a ratio alike. The ZeroMQ context and its temp dir are torn
 * down by bench_teardown once the rank threads have left. */
static int bench_steps(bench_t *b, results_t *res)
{
    const bench_opts_t *o = &b->o;
    if (run_step(b, STEP_SETUP, 0, NULL))
        return EXIT_FAIL;
    if (check_limits(b))
        return EXIT_USAGE;
    resolve_backends(b);
    if (zmq_baseline_start(b))
        return EXIT_FAIL;
    memcpy_pass(b, NULL, NULL);
    for (int k = 0; k < BK_N; k++) {
        b->cur = k;
        if (b->bk_state[k] == BK_ON && run_step(b, STEP_WARMUP, 0, NULL))
            return EXIT_FAIL;
    }
    if (run_step(b, STEP_Z_WARM, 0, NULL))
        return EXIT_FAIL;
    for (uint32_t i = 0; i < o->rounds; i++) {
        for (int k = 0; k < BK_N; k++)
            if (b->bk_state[k] == BK_ON && backend_round(b, k, i, &res->bk[k]))
                return EXIT_FAIL;
        if (run_step(b, STEP_Z_SAVE, i, &res->zsave_s) ||
            run_step(b, STEP_Z_LOAD, i, &res->zload_s))
            return EXIT_FAIL;
        memcpy_pass(b, &res->memcpy_bytes, &res->memcpy_ns);
    }
    res->memcpy_gbps = res->memcpy_ns ? (double)res->memcpy_bytes / (double)res->memcpy_ns : 0;
    if (run_step(b, STEP_FILL_LOOKUP, 0, NULL) || run_step(b, STEP_LOOKUP_WARM, 0, NULL))
        return EXIT_FAIL;
    for (uint32_t i = 0; i < BENCH_LOOKUP_SLICES; i++) {
        b->slice = o->lookups / BENCH_LOOKUP_SLICES;
        if (i + 1 == BENCH_LOOKUP_SLICES)
            b->slice += o->lookups % BENCH_LOOKUP_SLICES;
        if (run_step(b, STEP_LOOKUP, 0, NULL) || run_step(b, STEP_Z_LOOKUP, 0, NULL))
            return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* After the rank threads have closed their sockets: stop the echo thread, remove the temp dir. */
static void bench_teardown(bench_t *b)
{
    if (b->zctx) {
        zmq_ctx_shutdown(b->zctx);
        if (b->echo_started)
            pthread_join(b->echo, NULL);
        zmq_ctx_term(b->zctx);
        b->zctx = NULL;
    }
    if (b->zdir[0]) {
        unlink(b->zendpoint + strlen("ipc://"));
        rmdir(b->zdir);
    }
}

/* ---- disk mode (main thread, one lookup thread) ---- */

/* The disk.* counters of status the report takes deltas of. */
typedef enum {
    SN_RAW,
    SN_STORED,
    SN_WRITTEN,
    SN_READ,
    SN_DEMOTED,
    SN_CLEAN,
    SN_REFUSED,
    SN_LOST,
    SN_HITS,
    SN_MISSES,
    SN_PROMOTED,
    SN_EVICTED,
    SN_RECORDS,
    SN_COMPRESSED,
    SN_WERR,
    SN_RERR,
    SN_CSUM,
    SN_WBUF,
    SN_N,
} snap_key_t;

static const char *const snap_keys[SN_N] = {
    [SN_RAW] = "raw_bytes_written",
    [SN_STORED] = "stored_bytes_written",
    [SN_WRITTEN] = "bytes_written",
    [SN_READ] = "bytes_read",
    [SN_DEMOTED] = "demotions",
    [SN_CLEAN] = "demotions_clean",
    [SN_REFUSED] = "demotions_refused",
    [SN_LOST] = "writes_lost",
    [SN_HITS] = "hits",
    [SN_MISSES] = "misses",
    [SN_PROMOTED] = "promotions",
    [SN_EVICTED] = "evictions",
    [SN_RECORDS] = "records_written",
    [SN_COMPRESSED] = "records_compressed",
    [SN_WERR] = "write_errors",
    [SN_RERR] = "read_errors",
    [SN_CSUM] = "checksum_drops",
    [SN_WBUF] = "write_buffer_chunks",
};

/* What one status document says about the disk tier. */
typedef struct {
    uint64_t v[SN_N];
    uint64_t ram_capacity, disk_capacity, segment_bytes;
    double ratio; /* disk.compression_ratio: cumulative since the daemon started */
    int enabled;
    char state[32], compression[16], last_error[128], dir[PATH_MAX];
} snap_t;

static void copy_str(char *dst, size_t cap, const json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static int snap_take(const bench_t *b, snap_t *sn)
{
    json_t *root = NULL;
    if (tool_status_get(b->o.status_sock, BENCH_STATUS_TIMEOUT_MS, &root, NULL))
        return -1;
    const json_t *disk = json_object_get(root, "disk"), *ram = json_object_get(root, "ram");
    if (!json_is_object(disk) || !json_is_object(ram)) {
        tool_error("status %s: no ram and disk objects", b->o.status_sock);
        json_decref(root);
        return -1;
    }
    memset(sn, 0, sizeof *sn);
    for (int k = 0; k < SN_N; k++)
        sn->v[k] = (uint64_t)json_integer_value(json_object_get(disk, snap_keys[k]));
    sn->ram_capacity = (uint64_t)json_integer_value(json_object_get(ram, "capacity_bytes"));
    sn->disk_capacity = (uint64_t)json_integer_value(json_object_get(disk, "capacity_bytes"));
    sn->segment_bytes = (uint64_t)json_integer_value(json_object_get(disk, "segment_bytes"));
    sn->ratio = json_number_value(json_object_get(disk, "compression_ratio"));
    sn->enabled = json_is_true(json_object_get(disk, "enabled"));
    copy_str(sn->state, sizeof sn->state, json_object_get(disk, "state"));
    copy_str(sn->compression, sizeof sn->compression, json_object_get(disk, "compression"));
    copy_str(sn->last_error, sizeof sn->last_error, json_object_get(disk, "last_error"));
    copy_str(sn->dir, sizeof sn->dir, json_object_get(disk, "dir"));
    json_decref(root);
    return 0;
}

static uint64_t snap_delta(const snap_t *from, const snap_t *to, snap_key_t k)
{
    return to->v[k] >= from->v[k] ? to->v[k] - from->v[k] : 0;
}

static const char *fs_name(const char *dir)
{
    static const struct {
        unsigned long magic;
        const char *name;
    } fs[] = {{0xEF53, "ext2/3/4"},      {0x58465342, "xfs"},
              {0x01021994, "tmpfs"},     {0x9123683E, "btrfs"},
              {0x794c7630, "overlayfs"}, {0x2FC12FC1, "zfs"},
              {0xF2F52010, "f2fs"},      {0x6969, "nfs"}};
    struct statfs st;
    if (statfs(dir, &st) != 0)
        return "unknown";
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if ((unsigned long)st.f_type == fs[i].magic)
            return fs[i].name;
    return "other";
}

/* 1 when both paths are on one filesystem, 0 when not, -1 when either cannot be looked at. */
static int same_fs(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return -1;
    return sa.st_dev == sb.st_dev;
}

/* Refuses a run that could not measure the disk tier; sets how many chunks per rank are loaded
 * back: all but the ones that may still be in RAM (capacity / chunk) and one chain more (the
 * oldest resident chain may be resident only in part: eviction eats chains from their tails). */
static int disk_plan(bench_t *b, const snap_t *sn)
{
    const bench_opts_t *o = &b->o;
    uint64_t total = (uint64_t)o->ranks * o->chunks * o->chunk_bytes;
    uint64_t in_ram = (sn->ram_capacity + o->chunk_bytes - 1) / o->chunk_bytes;
    if (!sn->enabled || strcmp(sn->state, "ok") != 0) {
        tool_error("the daemon's disk tier is %s (status disk.enabled %s, disk.state "
                   "\"%s\"%s%s): --disk-dir measures the disk tier, start kvtierd with "
                   "disk.enabled true and a working disk.dir",
                   sn->enabled ? "not usable" : "off", sn->enabled ? "true" : "false", sn->state,
                   sn->last_error[0] ? ", last_error " : "", sn->last_error);
        return -1;
    }
    if (total <= sn->ram_capacity) {
        tool_error("ranks x chunks x chunk-bytes = %.1f MiB must exceed the daemon's "
                   "ram.capacity_bytes (%.1f MiB) so that chunks demote to disk: raise --chunks",
                   (double)total / (1 << 20), (double)sn->ram_capacity / (1 << 20));
        return -1;
    }
    if (total + 2 * sn->segment_bytes > sn->disk_capacity) {
        tool_error("%.1f MiB of chunks do not fit in disk.capacity_bytes (%.1f MiB) "
                   "less two segments: reclaim would drop the oldest chunks before they are read",
                   (double)total / (1 << 20), (double)sn->disk_capacity / (1 << 20));
        return -1;
    }
    if (o->chunks <= in_ram + b->chain_len) {
        tool_error("--chunks %u leaves no chunk that is surely disk-only after the "
                   "fill (up to %" PRIu64 " may stay in RAM, plus one chain of %u): use more than "
                   "%" PRIu64 "",
                   o->chunks, in_ram, b->chain_len, in_ram + b->chain_len);
        return -1;
    }
    b->disk_load_n = (uint32_t)(o->chunks - in_ram - b->chain_len);
    return 0;
}

/* Polls status until the write buffer is empty; *secs is the wait, *sn the last document. */
static int drain(const bench_t *b, double *secs, snap_t *sn)
{
    struct timespec poll = {.tv_nsec = BENCH_DRAIN_POLL_US * 1000};
    uint64_t t0 = now_ns();
    for (;;) {
        if (snap_take(b, sn))
            return -1;
        if (sn->v[SN_WBUF] == 0)
            break;
        if (now_ns() - t0 > BENCH_DRAIN_MAX_MS * 1000000ull) {
            tool_error("the daemon's write buffer still holds %" PRIu64
                       " chunks after %u s (disk.state %s)",
                       sn->v[SN_WBUF], BENCH_DRAIN_MAX_MS / 1000, sn->state);
            return -1;
        }
        nanosleep(&poll, NULL);
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    return 0;
}

typedef struct {
    uint64_t bytes;
    double pwrite_s; /* the pwrite calls alone, before fdatasync (into the page cache) */
    double write_s, cached_s, cold_s;
    double resident; /* share of the file's pages resident after DONTNEED; < 0 unknown */
} raw_t;

static int io_full(int fd, int write, uint8_t *p, size_t n, off_t off)
{
    while (n) {
        ssize_t k = write ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* Reads the file back chunk by chunk into every rank's dst (timed), then compares with src. */
static int raw_read(const bench_t *b, int fd, double *secs)
{
    size_t chunk = b->o.chunk_bytes, per = chunk * b->o.chunks;
    uint64_t t0 = now_ns();
    for (uint32_t r = 0; r < b->o.ranks; r++)
        for (size_t i = 0; i < b->o.chunks; i++)
            if (io_full(fd, 0, b->ranks[r].dst + i * chunk, chunk, (off_t)(r * per + i * chunk)))
                return -1;
    *secs = (double)(now_ns() - t0) / 1e9;
    for (uint32_t r = 0; r < b->o.ranks; r++) {
        if (memcmp(b->ranks[r].src, b->ranks[r].dst, per) != 0) {
            tool_error("raw baseline: the file read back other bytes");
            errno = EIO;
            return -1;
        }
    }
    return 0;
}

static double resident_share(int fd, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (len + (size_t)page - 1) / (size_t)page, in = 0;
    unsigned char *vec = malloc(pages);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    double share = -1;
    if (vec && m != MAP_FAILED && mincore(m, len, vec) == 0) {
        for (size_t i = 0; i < pages; i++)
            in += vec[i] & 1;
        share = (double)in / (double)pages;
    }
    if (m != MAP_FAILED)
        munmap(m, len);
    free(vec);
    return share;
}

/* The raw baseline: every rank's chunks written with pwrite into one new file in --disk-dir,
 * fdatasync'ed (timed together), read back from the page cache, dropped with
 * posix_fadvise(DONTNEED) (mincore then says how much stayed resident: a page that did is read
 * from memory) and read back again; the file is removed and dst cleared. */
static int raw_baseline(bench_t *b, raw_t *out)
{
    const bench_opts_t *o = &b->o;
    size_t chunk = o->chunk_bytes, per = chunk * o->chunks;
    char path[sizeof o->disk_dir + 64];
    snprintf(path, sizeof path, "%s/kvtier-bench-%016" PRIx64 ".raw", o->disk_dir, b->seed);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        tool_error("raw baseline %s: %s", path, strerror(errno));
        return -1;
    }
    const char *what = "write";
    int rc = -1;
    out->bytes = (uint64_t)per * o->ranks;
    uint64_t t0 = now_ns();
    for (uint32_t r = 0; r < o->ranks; r++)
        for (size_t i = 0; i < o->chunks; i++)
            if (io_full(fd, 1, b->ranks[r].src + i * chunk, chunk, (off_t)(r * per + i * chunk)))
                goto out;
    out->pwrite_s = (double)(now_ns() - t0) / 1e9;
    what = "fdatasync";
    if (fdatasync(fd) != 0)
        goto out;
    out->write_s = (double)(now_ns() - t0) / 1e9;
    what = "read";
    if (raw_read(b, fd, &out->cached_s))
        goto out;
    what = "posix_fadvise";
    int err = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (err) {
        errno = err;
        goto out;
    }
    out->resident = resident_share(fd, out->bytes);
    what = "read";
    if (raw_read(b, fd, &out->cold_s))
        goto out;
    rc = 0;
out:
    if (rc)
        tool_error("raw baseline %s %s: %s", what, path, strerror(errno));
    close(fd);
    unlink(path);
    for (uint32_t r = 0; r < o->ranks; r++)
        memset(b->ranks[r].dst, BENCH_FILL_BYTE, per);
    return rc;
}

/* A lookup thread: the lookups of the lookup workload, BENCH_DISK_LOOKUP_GAP_US apart, either
 * `count` of them or until `stop`. It owns its client; main reads the rest after the join. */
typedef struct {
    const bench_t *b;
    kvt_client_t *c;
    pthread_t thread;
    series_t lat;
    size_t cap;
    uint32_t count; /* lookups to do; 0: until stop */
    atomic_int stop;
    uint64_t short_hits, skipped;
    int rc; /* a failed lookup's code */
} lookuper_t;

static void *lookuper_main(void *arg)
{
    lookuper_t *l = arg;
    const bench_t *b = l->b;
    uint32_t world = b->o.world;
    uint32_t rank_hits[world];
    uint32_t expect = b->o.all_ranks && b->o.ranks < world ? 0 : b->o.prompt_chunks;
    kvt_lookup_opts_t lo = {.all_ranks = b->o.all_ranks};
    struct timespec gap = {.tv_nsec = BENCH_DISK_LOOKUP_GAP_US * 1000};
    for (uint32_t i = 0; l->lat.n < l->cap && (l->count ? i < l->count : !atomic_load(&l->stop));
         i++) {
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = world};
        uint64_t t0 = now_ns();
        int rc = kvt_lookup(l->c, b->lookup_hashes, b->o.prompt_chunks, &lo, &res);
        uint64_t t1 = now_ns();
        if (rc) {
            l->rc = rc;
            break;
        }
        l->lat.v[l->lat.n++] = t1 - t0;
        l->short_hits += res.hit < expect;
        l->skipped += res.skipped != 0;
        nanosleep(&gap, NULL);
    }
    return NULL;
}

static int lookuper_start(const bench_t *b, lookuper_t *l, uint32_t count, size_t cap)
{
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = KVT_DATA_PATH_FRAMES};
    *l = (lookuper_t){.b = b, .count = count, .cap = cap};
    l->lat.v = calloc(cap, sizeof(uint64_t));
    if (!l->lat.v) {
        tool_error("out of memory");
        return -1;
    }
    int rc = kvt_connect(b->o.endpoint, &b->lookup_ns, 0, &co, &l->c);
    if (rc) {
        tool_error("connect %s: %s", b->o.endpoint, kvt_strerror(rc));
        goto fail_connect;
    }
    if (pthread_create(&l->thread, NULL, lookuper_main, l) != 0) {
        tool_error("cannot start the lookup thread");
        goto fail_thread;
    }
    return 0;
fail_thread:
    kvt_close(&l->c);
fail_connect:
    free(l->lat.v);
    l->lat.v = NULL;
    return -1;
}

/* Stops and joins the lookup thread; *p gets its latencies. */
typedef struct {
    pct_t lat;
    uint64_t short_hits, skipped;
} lookups_t;

static int lookuper_finish(lookuper_t *l, lookups_t *out)
{
    atomic_store(&l->stop, 1);
    pthread_join(l->thread, NULL);
    int rc = 0;
    if (l->rc) {
        tool_error("lookup: %s: %s", kvt_strerror(l->rc), kvt_last_error(l->c));
        rc = -1;
    }
    out->lat = percentiles(l->lat.v, l->lat.n);
    out->short_hits = l->short_hits;
    out->skipped = l->skipped;
    kvt_close(&l->c);
    free(l->lat.v);
    l->lat.v = NULL;
    return rc;
}

/* 2-byte byte-shuffle: the low bytes of every element, then the high bytes. */
static void shuffle2(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t h = n / 2;
    for (size_t i = 0; i < h; i++) {
        dst[i] = src[2 * i];
        dst[h + i] = src[2 * i + 1];
    }
    if (n % 2)
        dst[n - 1] = src[n - 1];
}

static void unshuffle2(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t h = n / 2;
    for (size_t i = 0; i < h; i++) {
        dst[2 * i] = src[i];
        dst[2 * i + 1] = src[h + i];
    }
    if (n % 2)
        dst[n - 1] = src[n - 1];
}

typedef struct {
    uint64_t raw, stored;
    double enc_s, dec_s;
} comp_t;

/* lz4 (default acceleration, one block per chunk like the daemon's records) of every chunk of
 * every rank, after shuffle2 when shuffle is set; each chunk decoded back and compared. */
static int measure_codec(const bench_t *b, int shuffle, comp_t *out)
{
    size_t chunk = b->o.chunk_bytes;
    int bound = LZ4_compressBound((int)chunk);
    uint8_t *tmp = malloc(chunk), *enc = bound > 0 ? malloc((size_t)bound) : NULL;
    uint8_t *dec = malloc(chunk);
    int rc = -1;
    if (!tmp || !enc || !dec)
        goto out;
    for (uint32_t r = 0; r < b->o.ranks; r++) {
        for (size_t i = 0; i < b->o.chunks; i++) {
            const uint8_t *src = b->ranks[r].src + i * chunk, *in = src;
            uint64_t t0 = now_ns();
            if (shuffle) {
                shuffle2(tmp, src, chunk);
                in = tmp;
            }
            int c = LZ4_compress_default((const char *)in, (char *)enc, (int)chunk, bound);
            uint64_t t1 = now_ns();
            if (c <= 0)
                goto out;
            int d = LZ4_decompress_safe((const char *)enc, (char *)(shuffle ? tmp : dec), c,
                                        (int)chunk);
            if (shuffle && d == (int)chunk)
                unshuffle2(dec, tmp, chunk);
            uint64_t t2 = now_ns();
            if (d != (int)chunk || memcmp(dec, src, chunk) != 0)
                goto out;
            out->raw += chunk;
            out->stored += (uint64_t)c;
            out->enc_s += (double)(t1 - t0) / 1e9;
            out->dec_s += (double)(t2 - t1) / 1e9;
        }
    }
    rc = 0;
out:
    if (rc)
        tool_error("%s: the round trip failed", shuffle ? "shuffle+lz4" : "lz4");
    free(tmp);
    free(enc);
    free(dec);
    return rc;
}

typedef struct {
    snap_t s0, s1, s2, s3; /* before the saves, drained, before the loads, after the loads */
    raw_t raw;
    double save_s, drain_s, load_s;
    counts_t n;       /* save outcomes and verified loads of every rank */
    pct_t save, load; /* per call */
    lookups_t idle, busy;
    comp_t shuf, lz4;
    const char *fs;
    int same_fs;
} disk_res_t;

/* The disk-mode steps; returns an exit status. The lookups alone come first (the daemon idle),
 * then the raw baseline, then the saves with the lookup thread running until the write buffer
 * is drained, then the loads of the oldest chunks, then the codec figures. */
static int bench_disk_steps(bench_t *b, disk_res_t *d)
{
    const bench_opts_t *o = &b->o;
    lookuper_t l;
    if (snap_take(b, &d->s0))
        return EXIT_FAIL;
    if (disk_plan(b, &d->s0))
        return EXIT_USAGE;
    if (run_step(b, STEP_SETUP, 0, NULL))
        return EXIT_FAIL;
    if (check_limits(b))
        return EXIT_USAGE;
    resolve_backends(b);
    d->fs = fs_name(o->disk_dir);
    d->same_fs = same_fs(o->disk_dir, d->s0.dir);
    if (run_step(b, STEP_FILL_LOOKUP, 0, NULL) || run_step(b, STEP_LOOKUP_WARM, 0, NULL))
        return EXIT_FAIL;
    if (lookuper_start(b, &l, o->lookups, o->lookups) || lookuper_finish(&l, &d->idle))
        return EXIT_FAIL;
    if (raw_baseline(b, &d->raw) || snap_take(b, &d->s0))
        return EXIT_FAIL;
    if (lookuper_start(b, &l, 0, BENCH_DISK_LOOKUP_CAP))
        return EXIT_FAIL;
    int rc = run_step(b, STEP_DISK_SAVE, 0, &d->save_s) ? EXIT_FAIL : EXIT_OK;
    if (rc == EXIT_OK && drain(b, &d->drain_s, &d->s1))
        rc = EXIT_FAIL;
    if (lookuper_finish(&l, &d->busy) || rc)
        return EXIT_FAIL;
    b->cur = BK_FRAMES;
    if (snap_take(b, &d->s2) || run_step(b, STEP_DISK_LOAD, 0, &d->load_s) ||
        snap_take(b, &d->s3) || run_step(b, STEP_DISK_VERIFY, 0, NULL))
        return EXIT_FAIL;
    if (measure_codec(b, 1, &d->shuf) || measure_codec(b, 0, &d->lz4))
        return EXIT_FAIL;
    return EXIT_OK;
}

static double safe_div(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

/* Figures the table and the JSON share. */
typedef struct {
    uint64_t raw_w, stored_w, written, hits, misses, load_bytes;
    double write_s, w_raw, w_stored, w_written, w_client, r_disk, r_client;
    double raw_w_gbps, raw_pw_gbps, raw_cached_gbps, raw_cold_gbps, ratio_run;
} disk_fig_t;

static void disk_figures(const bench_t *b, const disk_res_t *d, disk_fig_t *f)
{
    f->raw_w = snap_delta(&d->s0, &d->s1, SN_RAW);
    f->stored_w = snap_delta(&d->s0, &d->s1, SN_STORED);
    f->written = snap_delta(&d->s0, &d->s1, SN_WRITTEN);
    f->hits = snap_delta(&d->s2, &d->s3, SN_HITS);
    f->misses = snap_delta(&d->s2, &d->s3, SN_MISSES);
    f->load_bytes = f->hits * b->o.chunk_bytes;
    f->write_s = d->save_s + d->drain_s;
    f->w_raw = gbps(f->raw_w, f->write_s);
    f->w_stored = gbps(f->stored_w, f->write_s);
    f->w_written = gbps(f->written, f->write_s);
    f->w_client = gbps(d->n.stored_bytes, d->save_s);
    f->r_disk = gbps(f->load_bytes, d->load_s);
    f->r_client = gbps(d->n.loaded_bytes, d->load_s);
    f->raw_w_gbps = gbps(d->raw.bytes, d->raw.write_s);
    f->raw_pw_gbps = gbps(d->raw.bytes, d->raw.pwrite_s);
    f->raw_cached_gbps = gbps(d->raw.bytes, d->raw.cached_s);
    f->raw_cold_gbps = gbps(d->raw.bytes, d->raw.cold_s);
    f->ratio_run = f->raw_w ? (double)f->stored_w / (double)f->raw_w : NAN;
}

static void disk_warnings(const bench_t *b, const disk_res_t *d, warnings_t *w)
{
    const counts_t *n = &d->n;
    uint64_t refused = snap_delta(&d->s0, &d->s1, SN_REFUSED);
    uint64_t asked = (uint64_t)b->o.ranks * b->disk_load_n;
    if (refused)
        warn_add(w,
                 "%" PRIu64 " demotions were refused during the write phase (disk.demotions_"
                 "refused): the disk tier dropped those chunks under backpressure",
                 refused);
    if (n->nospace || n->declined || n->exists)
        warn_add(w,
                 "saves: %" PRIu64 " nospace, %" PRIu64 " declined, %" PRIu64
                 " exists: not every chunk reached the daemon",
                 n->nospace, n->declined, n->exists);
    if (n->hits < asked)
        warn_add(w,
                 "%" PRIu64 " of the %" PRIu64 " oldest chunks were not loaded back (%" PRIu64
                 " of them had been stored)",
                 asked - n->hits, asked, n->lost);
    if (snap_delta(&d->s0, &d->s3, SN_WERR) || snap_delta(&d->s0, &d->s3, SN_RERR) ||
        snap_delta(&d->s0, &d->s3, SN_CSUM))
        warn_add(w, "the disk tier counted write errors, read errors or checksum drops");
    if (d->same_fs == 0)
        warn_add(w, "--disk-dir %s is not on the filesystem of the daemon's disk.dir %s",
                 b->o.disk_dir, d->s0.dir);
    if (d->idle.short_hits || d->busy.short_hits)
        warn_add(w, "%" PRIu64 " lookups hit fewer than the expected chunks",
                 d->idle.short_hits + d->busy.short_hits);
    if (d->idle.skipped || d->busy.skipped)
        warn_add(w, "%" PRIu64 " lookups were skipped by the lookup-skip gate",
                 d->idle.skipped + d->busy.skipped);
}

static json_t *gbps_json(double gbps_v, uint64_t bytes, double secs)
{
    return json_pack("{s:f,s:I,s:f}", "gbps", gbps_v, "bytes", (json_int_t)bytes, "seconds", secs);
}

static json_t *comp_json(const comp_t *c)
{
    return json_pack("{s:f,s:f,s:f,s:I,s:I}", "ratio", safe_div((double)c->stored, (double)c->raw),
                     "compress_mbps", safe_div((double)c->raw / 1e6, c->enc_s), "decompress_mbps",
                     safe_div((double)c->raw / 1e6, c->dec_s), "raw_bytes", (json_int_t)c->raw,
                     "stored_bytes", (json_int_t)c->stored);
}

static json_t *lookups_json(const lookups_t *l)
{
    json_t *o = pct_json(&l->lat);
    if (o) {
        json_object_set_new(o, "short_hits", json_integer((json_int_t)l->short_hits));
        json_object_set_new(o, "skipped", json_integer((json_int_t)l->skipped));
    }
    return o;
}

static int disk_print_json(const bench_t *b, const disk_res_t *d, const warnings_t *w)
{
    const bench_opts_t *o = &b->o;
    disk_fig_t f;
    disk_figures(b, d, &f);
    json_t *warns = json_array();
    for (int i = 0; warns && i < w->n; i++)
        json_array_append_new(warns, json_string(w->text[i]));
    json_t *raw = json_pack("{s:I,s:o,s:o,s:o,s:o}", "bytes", (json_int_t)d->raw.bytes, "write",
                            gbps_json(f.raw_w_gbps, d->raw.bytes, d->raw.write_s), "write_no_sync",
                            gbps_json(f.raw_pw_gbps, d->raw.bytes, d->raw.pwrite_s), "read_cached",
                            gbps_json(f.raw_cached_gbps, d->raw.bytes, d->raw.cached_s), "read",
                            gbps_json(f.raw_cold_gbps, d->raw.bytes, d->raw.cold_s));
    json_t *cold = json_object_get(raw, "read");
    json_object_set_new(cold, "resident_after_fadvise",
                        d->raw.resident < 0 ? json_null() : json_real(d->raw.resident));
    json_object_set_new(cold, "page_cache_may_have_served", json_boolean(d->raw.resident != 0));
    json_t *write = json_pack(
        "{s:f,s:f,s:f,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,"
        "s:{s:I,s:I,s:I,s:I}}",
        "gbps_raw", f.w_raw, "gbps_stored", f.w_stored, "gbps_written", f.w_written, "raw_bytes",
        (json_int_t)f.raw_w, "stored_bytes", (json_int_t)f.stored_w, "bytes_written",
        (json_int_t)f.written, "seconds", f.write_s, "save_seconds", d->save_s, "drain_seconds",
        d->drain_s, "client_save_gbps", f.w_client, "ratio_vs_raw", safe_div(f.w_raw, f.raw_w_gbps),
        "ratio_vs_raw_no_sync", safe_div(f.w_raw, f.raw_pw_gbps), "demotions",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_DEMOTED), "demotions_clean",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_CLEAN), "demotions_refused",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_REFUSED), "writes_lost",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_LOST), "records_written",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_RECORDS), "records_compressed",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_COMPRESSED), "compression_ratio",
        real_or_null(f.ratio_run), "latency", pct_json(&d->save), "outcomes", "stored",
        (json_int_t)d->n.stored, "exists", (json_int_t)d->n.exists, "nospace",
        (json_int_t)d->n.nospace, "declined", (json_int_t)d->n.declined);
    json_t *read = json_pack(
        "{s:f,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:o}", "gbps", f.r_disk, "bytes",
        (json_int_t)f.load_bytes, "seconds", d->load_s, "chunks",
        (json_int_t)((uint64_t)o->ranks * b->disk_load_n), "disk_hits", (json_int_t)f.hits,
        "disk_misses", (json_int_t)f.misses, "verified", (json_int_t)d->n.hits, "misses",
        (json_int_t)d->n.misses, "lost", (json_int_t)d->n.lost, "promotions",
        (json_int_t)snap_delta(&d->s2, &d->s3, SN_PROMOTED), "demotions",
        (json_int_t)snap_delta(&d->s2, &d->s3, SN_DEMOTED), "client_gbps", f.r_client,
        "ratio_vs_raw", safe_div(f.r_disk, f.raw_cold_gbps), "ratio_vs_raw_cached",
        safe_div(f.r_disk, f.raw_cached_gbps), "latency", pct_json(&d->load));
    json_t *comp =
        json_pack("{s:o,s:f,s:s,s:o,s:o}", "daemon_ratio", real_or_null(f.ratio_run),
                  "daemon_ratio_cumulative", d->s3.ratio, "daemon_mode", d->s0.compression,
                  "shuffle_lz4", comp_json(&d->shuf), "lz4", comp_json(&d->lz4));
    json_t *lk = json_pack(
        "{s:I,s:I,s:o,s:o,s:f,s:f}", "prompt_chunks", (json_int_t)o->prompt_chunks, "gap_us",
        (json_int_t)BENCH_DISK_LOOKUP_GAP_US, "idle", lookups_json(&d->idle), "writing",
        lookups_json(&d->busy), "ratio_p50", safe_div(d->busy.lat.p50, d->idle.lat.p50),
        "ratio_p99", safe_div(d->busy.lat.p99, d->idle.lat.p99));
    json_t *root = json_pack(
        "{s:s,s:s,s:s,s:{s:s,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I},"
        "s:{s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:o,s:o},s:o}",
        "mode", "disk", "endpoint", o->endpoint, "data", data_names[o->data], "namespace", "model",
        o->model, "world", (json_int_t)o->world, "params", "chunk_bytes",
        (json_int_t)o->chunk_bytes, "chunks", (json_int_t)o->chunks, "ranks", (json_int_t)o->ranks,
        "batch", (json_int_t)o->batch, "chain_chunks", (json_int_t)b->chain_len, "prompt_chunks",
        (json_int_t)o->prompt_chunks, "lookups", (json_int_t)o->lookups, "disk", "dir", o->disk_dir,
        "filesystem", d->fs, "daemon_dir", d->s0.dir, "same_filesystem",
        d->same_fs < 0 ? json_null() : json_boolean(d->same_fs), "ram_capacity_bytes",
        (json_int_t)d->s0.ram_capacity, "disk_capacity_bytes", (json_int_t)d->s0.disk_capacity,
        "segment_bytes", (json_int_t)d->s0.segment_bytes, "save_path",
        tool_data_path_name(data_path_of(b->primary)), "load_path", "frames", "raw", raw, "write",
        write, "read", read, "compression", comp, "lookup", lk, "warnings",
        warns ? warns : json_array());
    if (!root)
        return -1;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(root);
    if (!s)
        return -1;
    puts(s);
    free(s);
    return 0;
}

static void disk_print_table(const bench_t *b, const disk_res_t *d)
{
    const bench_opts_t *o = &b->o;
    const double mib = 1 << 20;
    disk_fig_t f;
    disk_figures(b, d, &f);
    printf("kvtier-bench --disk-dir: %s  namespace %s  data %s  saves %s path, loads frames path\n",
           o->endpoint, o->model, data_names[o->data],
           tool_data_path_name(data_path_of(b->primary)));
    printf("  %u rank(s) x %u chunks x %.2f MiB = %.1f MiB in chains of %u, %u chunk(s) per call; "
           "ram.capacity %.1f MiB, disk.capacity %.1f MiB, compression %s\n",
           o->ranks, o->chunks, (double)o->chunk_bytes / mib, (double)d->raw.bytes / mib,
           b->chain_len, o->batch, (double)d->s0.ram_capacity / mib,
           (double)d->s0.disk_capacity / mib, d->s0.compression);
    printf("  --disk-dir %s (%s; %s the daemon's disk.dir %s)\n\n", o->disk_dir, d->fs,
           d->same_fs == 1   ? "same filesystem as"
           : d->same_fs == 0 ? "NOT the filesystem of"
                             : "cannot compare with",
           d->s0.dir);
    printf("%-34s %8s %10s %9s\n", "write", "GB/s", "MiB", "seconds");
    printf("%-34s %8.3f %10.1f %9.3f\n", "raw pwrite + fdatasync", f.raw_w_gbps,
           (double)d->raw.bytes / mib, d->raw.write_s);
    printf("%-34s %8.3f %10.1f %9.3f  (before fdatasync: into the page cache)\n",
           "raw pwrite alone", f.raw_pw_gbps, (double)d->raw.bytes / mib, d->raw.pwrite_s);
    printf("%-34s %8.3f %10.1f %9.3f  saves %.3f s + drain %.3f s\n", "kvtier disk, raw bytes",
           f.w_raw, (double)f.raw_w / mib, f.write_s, d->save_s, d->drain_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier disk, stored bytes", f.w_stored,
           (double)f.stored_w / mib, f.write_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier disk, bytes_written", f.w_written,
           (double)f.written / mib, f.write_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier save calls (client)", f.w_client,
           (double)d->n.stored_bytes / mib, d->save_s);
    printf("%-34s %8s %10s %9s\n", "read", "", "", "");
    printf("%-34s %8.3f %10.1f %9.3f\n", "raw pread, page cache", f.raw_cached_gbps,
           (double)d->raw.bytes / mib, d->raw.cached_s);
    printf("%-34s %8.3f %10.1f %9.3f  ", "raw pread after fadvise(DONTNEED)", f.raw_cold_gbps,
           (double)d->raw.bytes / mib, d->raw.cold_s);
    if (d->raw.resident < 0)
        printf("(mincore failed: the page cache may have served it)\n");
    else if (d->raw.resident > 0)
        printf("(%.1f %% still resident: the page cache served that part)\n",
               100.0 * d->raw.resident);
    else
        printf("(0 %% resident: read from the device)\n");
    printf("%-34s %8.3f %10.1f %9.3f  (the segments were not dropped from the page cache)\n",
           "kvtier disk, disk.hits x chunk", f.r_disk, (double)f.load_bytes / mib, d->load_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier load calls (client)", f.r_client,
           (double)d->n.loaded_bytes / mib, d->load_s);
    printf("ratio kvtier/raw: write %.3f (with fdatasync), %.3f (pwrite alone); read %.3f (after "
           "DONTNEED), %.3f (page cache)\n\n",
           safe_div(f.w_raw, f.raw_w_gbps), safe_div(f.w_raw, f.raw_pw_gbps),
           safe_div(f.r_disk, f.raw_cold_gbps), safe_div(f.r_disk, f.raw_cached_gbps));
    printf("write phase: demotions %" PRIu64 ", demotions_clean %" PRIu64
           ", demotions_refused %" PRIu64 ", writes_lost %" PRIu64 ", records_written %" PRIu64
           " (%" PRIu64 " compressed)\n",
           snap_delta(&d->s0, &d->s1, SN_DEMOTED), snap_delta(&d->s0, &d->s1, SN_CLEAN),
           snap_delta(&d->s0, &d->s1, SN_REFUSED), snap_delta(&d->s0, &d->s1, SN_LOST),
           snap_delta(&d->s0, &d->s1, SN_RECORDS), snap_delta(&d->s0, &d->s1, SN_COMPRESSED));
    printf("saves: %" PRIu64 " stored, %" PRIu64 " exists, %" PRIu64 " nospace, %" PRIu64
           " declined\n",
           d->n.stored, d->n.exists, d->n.nospace, d->n.declined);
    printf("read phase: %" PRIu64 " oldest chunks loaded: %" PRIu64 " verified byte-exact, %" PRIu64
           " misses (%" PRIu64 " of them had been stored); disk.hits %" PRIu64
           ", disk.misses %" PRIu64 ", promotions %" PRIu64 ", demotions %" PRIu64 "\n\n",
           (uint64_t)o->ranks * b->disk_load_n, d->n.hits, d->n.misses, d->n.lost, f.hits, f.misses,
           snap_delta(&d->s2, &d->s3, SN_PROMOTED), snap_delta(&d->s2, &d->s3, SN_DEMOTED));
    printf("compression of the chunks (%s)       ratio  compress MB/s  decompress MB/s\n",
           data_names[o->data]);
    printf("%-34s %7.4f %14s %16s\n", "daemon, write phase (stored/raw)",
           isnan(f.ratio_run) ? 0.0 : f.ratio_run, "-", "-");
    const comp_t *cs[2] = {&d->shuf, &d->lz4};
    const char *cn[2] = {"bench shuffle+lz4 (2-byte)", "bench plain lz4"};
    for (int i = 0; i < 2; i++)
        printf("%-34s %7.4f %14.0f %16.0f\n", cn[i],
               safe_div((double)cs[i]->stored, (double)cs[i]->raw),
               safe_div((double)cs[i]->raw / 1e6, cs[i]->enc_s),
               safe_div((double)cs[i]->raw / 1e6, cs[i]->dec_s));
    printf("\nlookups of %u hashes, %u us apart      calls    p50 us    p99 us    max us\n",
           o->prompt_chunks, (unsigned)BENCH_DISK_LOOKUP_GAP_US);
    const lookups_t *ls[2] = {&d->idle, &d->busy};
    const char *ln[2] = {"daemon idle", "while the disk is written"};
    for (int i = 0; i < 2; i++)
        printf("%-34s %8zu %9.1f %9.1f %9.1f\n", ln[i], ls[i]->lat.n, ls[i]->lat.p50,
               ls[i]->lat.p99, ls[i]->lat.max);
}

static int disk_report(const bench_t *b, disk_res_t *d)
{
    for (uint32_t i = 0; i < b->o.ranks; i++)
        counts_add(&d->n, &b->ranks[i].dn);
    if (merge_pct(b, offsetof(rank_t, dsave), &d->save) ||
        merge_pct(b, offsetof(rank_t, dload), &d->load)) {
        tool_error("out of memory");
        return EXIT_FAIL;
    }
    warnings_t w = {0};
    disk_warnings(b, d, &w);
    for (int i = 0; i < w.n; i++)
        tool_error("warning: %s", w.text[i]);
    if (b->o.json) {
        if (disk_print_json(b, d, &w)) {
            tool_error("cannot format the JSON report");
            return EXIT_FAIL;
        }
    } else {
        disk_print_table(b, d);
    }
    return EXIT_OK;
}

/* Starts the rank threads. They wait at the launch gate until all exist, so a failed
 * pthread_create never leaves a thread blocked on a barrier that cannot fill. */
static uint32_t start_ranks(bench_t *b)
{
    uint32_t started = 0;
    for (; started < b->o.ranks; started++) {
        rank_t *r = &b->ranks[started];
        r->b = b;
        r->rank = started;
        if (pthread_create(&r->thread, NULL, rank_main, r) != 0)
            break;
    }
    pthread_mutex_lock(&b->gate_mu);
    b->launched = 1;
    b->abort = started < b->o.ranks;
    pthread_cond_broadcast(&b->gate_cv);
    pthread_mutex_unlock(&b->gate_mu);
    return started;
}

static void stop_ranks(bench_t *b, uint32_t started)
{
    if (started == b->o.ranks) {
        b->step = STEP_EXIT;
        pthread_barrier_wait(&b->start);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(b->ranks[i].thread, NULL);
}

static int report(const bench_t *b, results_t *res)
{
    if (collect(b, res) != 0) {
        tool_error("out of memory");
        return EXIT_FAIL;
    }
    warnings_t w = {0};
    make_warnings(b, res, &w);
    for (int i = 0; i < w.n; i++)
        tool_error("warning: %s", w.text[i]);
    if (b->o.json) {
        if (print_json(b, res, &w)) {
            tool_error("cannot format the JSON report");
            return EXIT_FAIL;
        }
    } else {
        print_table(b, res);
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    static bench_t bench = {.gate_mu = PTHREAD_MUTEX_INITIALIZER,
                            .gate_cv = PTHREAD_COND_INITIALIZER};
    bench_t *b = &bench;
    results_t res = {0};
    static disk_res_t dres;
    tool_init("kvtier-bench", ""); /* the usage text is usage()'s, printed only on --help */
    int rc = parse_args(argc, argv, &b->o);
    if (rc)
        return rc > 0 ? EXIT_OK : EXIT_USAGE;
    if (check_endpoint(b->o.endpoint))
        return EXIT_FAIL;
    rc = EXIT_FAIL;
    if (bench_prepare(b)) {
        tool_error("out of memory");
        goto fail_prepare;
    }
    if (pthread_barrier_init(&b->start, NULL, b->o.ranks + 1))
        goto fail_prepare;
    if (pthread_barrier_init(&b->end, NULL, b->o.ranks + 1))
        goto fail_barrier_end;
    uint32_t started = start_ranks(b);
    if (started < b->o.ranks)
        tool_error("cannot start %u rank threads", b->o.ranks);
    else if (b->o.disk_dir[0])
        rc = bench_disk_steps(b, &dres);
    else
        rc = bench_steps(b, &res);
    stop_ranks(b, started);
    bench_teardown(b);
    if (rc == EXIT_OK)
        rc = b->o.disk_dir[0] ? disk_report(b, &dres) : report(b, &res);
    pthread_barrier_destroy(&b->end);
fail_barrier_end:
    pthread_barrier_destroy(&b->start);
fail_prepare:
    bench_free(b);
    return rc;
}
