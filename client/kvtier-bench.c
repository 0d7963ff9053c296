/*
 * kvtier-bench.c - measures save, load and lookup against a running kvtierd, next to baselines
 * measured in the same run with the same sizes.
 *
 * Design: one thread per rank, each with its own clients (one for the bulk namespace, one for
 * the lookup namespace of 4 KiB chunks), driven in lock step by the main thread through a list
 * of steps (setup, warm-up, then per round prepare / save / load / verify and the baselines,
 * then the lookup-namespace fill and lookup slices). Every step is bracketed by two barriers: the
 * main thread reads CLOCK_MONOTONIC when the start barrier opens and when the end barrier closes,
 * so throughput is payload bytes over the wall time of all ranks together; per-call latencies are
 * taken inside the threads. Chunk data is random, pre-faulted, and stamped with the chunk's hash
 * before every round so a load that returned another chunk's bytes cannot pass the memcmp check.
 * Token ids come from a per-run random seed, so two runs never share a hash even when --ns names
 * the same model.
 *
 * Baselines: (a) memcpy of the same chunks, one thread; (b) an in-process ROUTER echo thread on
 * an ipc:// endpoint in a temp dir, with one DEALER per rank: "save-like" sends a chunk batch
 * and receives an 8-byte ack, "load-like" sends a small request and receives the chunk batch
 * (plain zmq_send, which copies into the message, and zmq_msg_recv, which does not copy out);
 * (c) a lookup-sized round trip (prompt_chunks x 16 bytes out, 32 bytes back). Each round runs
 * kvtier, then the ZeroMQ baseline, then memcpy, and lookups alternate with their baseline in
 * slices, so drift of the machine hits both sides of a ratio alike. With the shared-memory data
 * path (--data-path, reported in the output) kvtier moves no bytes through ZeroMQ, so the
 * ZeroMQ ratio then says how much the arena saves and memcpy is the ceiling to compare with.
 *
 * Threads: main (steps, memcpy baseline, report), one per rank, one echo thread. Between the
 * end barrier of a step and the start barrier of the next only the main thread touches the
 * shared state (the barriers order the memory accesses); during a step each rank thread writes
 * only its own rank_t.
 *
 * Exit status: 0 success, 1 data mismatch or daemon/transport error, 2 usage error (including
 * sizes the daemon announces it cannot accept).
 */
#include "kvtier.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
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
    STEP_EXIT,
} step_t;

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
    int data_path; /* KVT_DATA_PATH_* */
    char model[256];
} bench_opts_t;

typedef struct bench bench_t;

/* Per-rank state; written by its thread during a step, read by main between steps. */
typedef struct {
    bench_t *b;
    uint32_t rank;
    pthread_t thread;
    kvt_client_t *bulk;
    kvt_client_t *lk;
    void *zsock;
    uint8_t *src;         /* chunks x chunk_bytes, random, stamped per round */
    uint8_t *dst;         /* chunks x chunk_bytes, load destination */
    uint8_t *small;       /* prompt_chunks x 4 KiB, lookup namespace chunks */
    uint8_t *outcomes;    /* chunks: save outcome of the current round */
    size_t *lens;         /* chunks: loaded sizes of the current round */
    uint64_t *save_ns;    /* rounds x calls_per_round */
    uint64_t *load_ns;    /* rounds x calls_per_round */
    uint64_t *lookup_ns;  /* lookups */
    uint64_t *zlookup_ns; /* lookups */
    size_t nsave, nload, nlookup, nzlookup;
    uint64_t stored, exists, nospace, declined, stored_bytes;
    uint64_t hits, misses, lost, loaded_bytes;
    uint64_t fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped;
    uint64_t zbytes_save, zbytes_load;
    int failed; /* 1 error, 2 usage-class error (limits) */
    char msg[512];
} rank_t;

struct bench {
    bench_opts_t o;
    kvt_ns_desc_t bulk_ns;
    kvt_ns_desc_t lookup_ns;
    uint64_t seed;
    kvt_hash_t *round_hashes;  /* rounds x chunks */
    kvt_hash_t *warm_hashes;   /* nwarm */
    kvt_hash_t *lookup_hashes; /* prompt_chunks */
    uint32_t nwarm;
    uint32_t calls_per_round;
    kvt_server_info_t info;
    int data_path_used; /* kvt_data_path() of rank 0's bulk client */
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
    uint32_t round;
    uint32_t slice; /* lookups per thread in this lookup step */
    rank_t *ranks;
};

/* ---- small utilities ---- */

static const struct {
    const char *name;
    int value;
} data_paths[] = {
    {"auto", KVT_DATA_PATH_AUTO},
    {"frames", KVT_DATA_PATH_FRAMES},
    {"shm", KVT_DATA_PATH_SHM},
};

static int data_path_parse(const char *s)
{
    for (size_t i = 0; i < sizeof data_paths / sizeof data_paths[0]; i++)
        if (strcmp(s, data_paths[i].name) == 0)
            return data_paths[i].value;
    return -1;
}

static const char *data_path_name(int p)
{
    for (size_t i = 0; i < sizeof data_paths / sizeof data_paths[0]; i++)
        if (data_paths[i].value == p)
            return data_paths[i].name;
    return "?";
}

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

/* ---- kvtier steps (rank threads) ---- */

static int save_chain(rank_t *r, kvt_client_t *c, const kvt_hash_t *h, size_t n, uint8_t *base,
                      size_t chunk, uint8_t *outcomes, uint64_t *lat, size_t *nlat)
{
    const bench_t *b = r->b;
    size_t batch = b->o.batch;
    const void *bufs[batch];
    size_t lens[batch];
    for (size_t i = 0; i < n; i += batch) {
        size_t k = n - i < batch ? n - i : batch;
        for (size_t j = 0; j < k; j++) {
            bufs[j] = base + (i + j) * chunk;
            lens[j] = chunk;
        }
        kvt_save_opts_t so = {.parent = i ? &h[i - 1] : NULL};
        uint64_t t0 = now_ns();
        int rc = kvt_save(c, h + i, k, bufs, lens, &so, outcomes + i);
        uint64_t t1 = now_ns();
        if (rc) {
            rank_fail_kvt(r, "save", rc, c);
            return -1;
        }
        if (lat)
            lat[(*nlat)++] = t1 - t0;
    }
    return 0;
}

static int load_chain(rank_t *r, const kvt_hash_t *h, size_t n, uint64_t *lat, size_t *nlat)
{
    const bench_t *b = r->b;
    size_t batch = b->o.batch, chunk = b->o.chunk_bytes;
    void *bufs[batch];
    size_t caps[batch];
    for (size_t i = 0; i < n; i += batch) {
        size_t k = n - i < batch ? n - i : batch, nhit = 0;
        for (size_t j = 0; j < k; j++) {
            bufs[j] = r->dst + (i + j) * chunk;
            caps[j] = chunk;
        }
        uint64_t t0 = now_ns();
        int rc = kvt_load(r->bulk, h + i, k, bufs, caps, r->lens + i, &nhit);
        uint64_t t1 = now_ns();
        if (rc) {
            rank_fail_kvt(r, "load", rc, r->bulk);
            return -1;
        }
        if (lat)
            lat[(*nlat)++] = t1 - t0;
    }
    return 0;
}

/* Checks the loaded chunks against the saved ones; counts hits, misses and lost chunks. */
static void verify_chain(rank_t *r, const kvt_hash_t *h, size_t n, int count)
{
    size_t chunk = r->b->o.chunk_bytes;
    for (size_t i = 0; i < n; i++) {
        char hex[33];
        if (r->lens[i] == 0) {
            int kept = r->outcomes[i] == KVT_SAVE_STORED || r->outcomes[i] == KVT_SAVE_EXISTS;
            if (count) {
                r->misses++;
                r->lost += (uint64_t)kept;
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
            if (count)
                snprintf(where, sizeof where, "round %u", r->b->round);
            rank_fail(r, 1,
                      "DATA MISMATCH %s chunk %zu (hash %s): loaded %zu bytes, saved %zu, "
                      "first difference at offset %zu",
                      where, i, hex, r->lens[i], chunk, off);
            return;
        }
        if (count) {
            r->hits++;
            r->loaded_bytes += chunk;
        }
    }
}

static void count_outcomes(rank_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (r->outcomes[i]) {
        case KVT_SAVE_STORED:
            r->stored++;
            r->stored_bytes += r->b->o.chunk_bytes;
            break;
        case KVT_SAVE_EXISTS:
            r->exists++;
            break;
        case KVT_SAVE_NOSPACE:
            r->nospace++;
            break;
        default:
            r->declined++;
            break;
        }
    }
}

static int connect_ns(rank_t *r, const kvt_ns_desc_t *ns, kvt_client_t **out)
{
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = r->b->o.data_path};
    int rc = kvt_connect(r->b->o.endpoint, ns, r->rank, &co, out);
    if (rc)
        rank_fail(r, 1, "connect %s: %s", r->b->o.endpoint, kvt_strerror(rc));
    return rc;
}

static void step_setup(rank_t *r)
{
    const bench_opts_t *o = &r->b->o;
    size_t bytes = (size_t)o->chunks * o->chunk_bytes;
    size_t calls = (size_t)o->rounds * r->b->calls_per_round;
    r->src = malloc(bytes);
    r->dst = malloc(bytes);
    r->small = malloc((size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES);
    r->outcomes = calloc(o->chunks, 1);
    r->lens = calloc(o->chunks, sizeof *r->lens);
    r->save_ns = calloc(calls, sizeof(uint64_t));
    r->load_ns = calloc(calls, sizeof(uint64_t));
    r->lookup_ns = calloc(o->lookups, sizeof(uint64_t));
    r->zlookup_ns = calloc(o->lookups, sizeof(uint64_t));
    if (!r->src || !r->dst || !r->small || !r->outcomes || !r->lens || !r->save_ns || !r->load_ns ||
        !r->lookup_ns || !r->zlookup_ns) {
        rank_fail(r, 1, "out of memory (%zu bytes of chunk buffers)", 2 * bytes);
        return;
    }
    fill_random(r->src, bytes, r->b->seed + r->rank);
    memset(r->dst, BENCH_FILL_BYTE, bytes);
    fill_random(r->small, (size_t)o->prompt_chunks * BENCH_LOOKUP_CHUNK_BYTES,
                ~r->b->seed + r->rank);
    if (connect_ns(r, &r->b->bulk_ns, &r->bulk) || connect_ns(r, &r->b->lookup_ns, &r->lk))
        return;
    if (r->rank == 0) {
        int rc = kvt_server_info(r->bulk, &r->b->info);
        if (rc)
            rank_fail_kvt(r, "server info", rc, r->bulk);
        r->b->data_path_used = kvt_data_path(r->bulk);
    }
}

static void step_warmup(rank_t *r)
{
    bench_t *b = r->b;
    size_t chunk = b->o.chunk_bytes;
    for (uint32_t i = 0; i < b->nwarm; i++)
        stamp(r->src + i * chunk, chunk, &b->warm_hashes[i]);
    if (save_chain(r, r->bulk, b->warm_hashes, b->nwarm, r->src, chunk, r->outcomes, NULL, NULL))
        return;
    if (load_chain(r, b->warm_hashes, b->nwarm, NULL, NULL))
        return;
    verify_chain(r, b->warm_hashes, b->nwarm, 0);
}

static int is_lookup_thread(const rank_t *r)
{
    return !r->b->o.all_ranks || r->rank == 0;
}

static void do_lookups(rank_t *r, uint32_t count, uint64_t *lat, size_t *nlat)
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
            lat[(*nlat)++] = t1 - t0;
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

static void z_lookup_like(rank_t *r, uint32_t count, uint64_t *lat, size_t *nlat)
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
            lat[(*nlat)++] = t1 - t0;
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

static void step_exit(rank_t *r)
{
    kvt_close(&r->bulk);
    kvt_close(&r->lk);
    if (r->zsock)
        zmq_close(r->zsock);
    r->zsock = NULL;
}

static void rank_run_step(rank_t *r)
{
    bench_t *b = r->b;
    const kvt_hash_t *h = b->round_hashes + (size_t)b->round * b->o.chunks;
    size_t chunk = b->o.chunk_bytes, n = b->o.chunks;
    uint32_t zwarm = b->nwarm;
    switch (b->step) {
    case STEP_SETUP:
        step_setup(r);
        break;
    case STEP_WARMUP:
        step_warmup(r);
        break;
    case STEP_PREPARE:
        for (size_t i = 0; i < n; i++)
            stamp(r->src + i * chunk, chunk, &h[i]);
        memset(r->dst, BENCH_FILL_BYTE, n * chunk);
        memset(r->lens, 0, n * sizeof *r->lens);
        memset(r->outcomes, 0, n);
        break;
    case STEP_SAVE:
        if (save_chain(r, r->bulk, h, n, r->src, chunk, r->outcomes, r->save_ns, &r->nsave) == 0)
            count_outcomes(r, n);
        break;
    case STEP_LOAD:
        load_chain(r, h, n, r->load_ns, &r->nload);
        break;
    case STEP_VERIFY:
        verify_chain(r, h, n, 1);
        break;
    case STEP_FILL_LOOKUP:
        step_fill_lookup(r);
        break;
    case STEP_LOOKUP_WARM:
        if (is_lookup_thread(r))
            do_lookups(r, b->o.lookups / 20 + 1, NULL, NULL);
        break;
    case STEP_LOOKUP:
        if (is_lookup_thread(r))
            do_lookups(r, b->slice, r->lookup_ns, &r->nlookup);
        break;
    case STEP_Z_CONNECT:
        step_z_connect(r);
        break;
    case STEP_Z_WARM:
        z_save_like(r, zwarm);
        if (!r->failed)
            z_load_like(r, zwarm);
        if (!r->failed && is_lookup_thread(r))
            z_lookup_like(r, b->o.lookups / 20 + 1, NULL, NULL);
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
            z_lookup_like(r, b->slice, r->zlookup_ns, &r->nzlookup);
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
            fprintf(stderr, "kvtier-bench: %s\n", r->msg);
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

typedef struct {
    double save_s, load_s, zsave_s, zload_s, memcpy_gbps;
    uint64_t memcpy_bytes, memcpy_ns;
    uint64_t stored, exists, nospace, declined, stored_bytes;
    uint64_t hits, misses, lost, loaded_bytes, fill_stored, fill_other;
    uint64_t lookup_short, lookup_skipped, zbytes_save, zbytes_load;
    pct_t save, load, lookup, zlookup;
} results_t;

/* Concatenates one latency array over ranks and returns its percentiles. */
static int merge_pct(const bench_t *b, size_t field_off, size_t count_off, pct_t *out)
{
    size_t total = 0;
    for (uint32_t i = 0; i < b->o.ranks; i++)
        total += *(const size_t *)((const char *)&b->ranks[i] + count_off);
    uint64_t *all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return -1;
    size_t k = 0;
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        const rank_t *r = &b->ranks[i];
        size_t n = *(const size_t *)((const char *)r + count_off);
        const uint64_t *v = *(uint64_t *const *)((const char *)r + field_off);
        memcpy(all + k, v, n * sizeof *v);
        k += n;
    }
    *out = percentiles(all, total);
    free(all);
    return 0;
}

static int collect(const bench_t *b, results_t *res)
{
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        const rank_t *r = &b->ranks[i];
        res->stored += r->stored;
        res->exists += r->exists;
        res->nospace += r->nospace;
        res->declined += r->declined;
        res->stored_bytes += r->stored_bytes;
        res->hits += r->hits;
        res->misses += r->misses;
        res->lost += r->lost;
        res->loaded_bytes += r->loaded_bytes;
        res->fill_stored += r->fill_stored;
        res->fill_other += r->fill_other;
        res->lookup_short += r->lookup_short;
        res->lookup_skipped += r->lookup_skipped;
        res->zbytes_save += r->zbytes_save;
        res->zbytes_load += r->zbytes_load;
    }
#define MERGE(f, c, out) merge_pct(b, offsetof(rank_t, f), offsetof(rank_t, c), out)
    if (MERGE(save_ns, nsave, &res->save) || MERGE(load_ns, nload, &res->load) ||
        MERGE(lookup_ns, nlookup, &res->lookup) || MERGE(zlookup_ns, nzlookup, &res->zlookup))
        return -1;
#undef MERGE
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

#define WARN_MAX 8
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
    if (r->nospace)
        warn_add(w,
                 "%" PRIu64 " chunk saves answered NOSPACE: the daemon's ram.capacity_bytes is "
                 "too small for this run (raise it or lower --chunks/--ranks/--chunk-bytes)",
                 r->nospace);
    if (r->declined)
        warn_add(w,
                 "%" PRIu64 " chunk saves were DECLINED by the admission gate: disable it for "
                 "namespace %s to measure raw throughput",
                 r->declined, b->o.model);
    if (r->exists)
        warn_add(w, "%" PRIu64 " chunk saves answered EXISTS (no bytes moved)", r->exists);
    if (r->lost)
        warn_add(w,
                 "%" PRIu64 " chunks stored in a round were evicted before they were loaded "
                 "back: the capacity is smaller than one round",
                 r->lost);
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

static int print_json(const bench_t *b, const results_t *r, const warnings_t *w)
{
    const bench_opts_t *o = &b->o;
    double save = gbps(r->stored_bytes, r->save_s), load = gbps(r->loaded_bytes, r->load_s);
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
        "s:{s:f},s:o}",
        "endpoint", o->endpoint, "data_path", data_path_name(b->data_path_used), "namespace",
        "model", o->model, "world", (json_int_t)o->world, "all_ranks", o->all_ranks, "params",
        "chunk_bytes", (json_int_t)o->chunk_bytes, "chunks", (json_int_t)o->chunks, "ranks",
        (json_int_t)o->ranks, "rounds", (json_int_t)o->rounds, "batch", (json_int_t)o->batch,
        "prompt_chunks", (json_int_t)o->prompt_chunks, "lookups", (json_int_t)o->lookups,
        "lookup_chunk_bytes", (json_int_t)BENCH_LOOKUP_CHUNK_BYTES, "save", "kvtier_gbps", save,
        "baseline_gbps", zsave, "ratio", ratio(save, zsave), "bytes", (json_int_t)r->stored_bytes,
        "seconds", r->save_s, "latency", pct_json(&r->save), "outcomes", "stored",
        (json_int_t)r->stored, "exists", (json_int_t)r->exists, "nospace", (json_int_t)r->nospace,
        "declined", (json_int_t)r->declined, "load", "kvtier_gbps", load, "baseline_gbps", zload,
        "ratio", ratio(load, zload), "bytes", (json_int_t)r->loaded_bytes, "seconds", r->load_s,
        "latency", pct_json(&r->load), "chunks", "hits", (json_int_t)r->hits, "misses",
        (json_int_t)r->misses, "evicted", (json_int_t)r->lost, "lookup", "latency",
        pct_json(&r->lookup), "baseline", "p50_us", r->zlookup.p50, "p99_us", r->zlookup.p99,
        "ratio_p50", ratio(r->lookup.p50, r->zlookup.p50), "ratio_p99",
        ratio(r->lookup.p99, r->zlookup.p99), "short_hits", (json_int_t)r->lookup_short, "skipped",
        (json_int_t)r->lookup_skipped, "memcpy", "gbps", r->memcpy_gbps, "warnings",
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

static void print_table(const bench_t *b, const results_t *r)
{
    const bench_opts_t *o = &b->o;
    double save = gbps(r->stored_bytes, r->save_s), load = gbps(r->loaded_bytes, r->load_s);
    double zsave = gbps(r->zbytes_save, r->zsave_s), zload = gbps(r->zbytes_load, r->zload_s);
    printf("kvtier-bench: %s  namespace %s  world %u  data path %s%s\n", o->endpoint, o->model,
           o->world, data_path_name(b->data_path_used), o->all_ranks ? "  lookups all-ranks" : "");
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
    double ratios[4] = {ratio(save, zsave), ratio(load, zload),
                        ratio(r->lookup.p50, r->zlookup.p50), ratio(r->lookup.p99, r->zlookup.p99)};
    printf("%-8s %-18s %-18s %s\n", "op", "kvtier", "baseline (zmq)", "ratio kvtier/baseline");
    for (int i = 0; i < 4; i++)
        printf("%-8s %-18s %-18s %.3f\n", ops[i], k[i], z[i], ratios[i]);
    printf("%-8s %-18s %.3f GB/s (one thread, same chunks)\n\n", "memcpy", "-", r->memcpy_gbps);
    printf("%-22s %8s %10s %10s %10s %10s\n", "kvtier latency (us)", "calls", "p50", "p90", "p99",
           "max");
    const char *names[3] = {"save (per call)", "load (per call)", "lookup"};
    const pct_t *p[3] = {&r->save, &r->load, &r->lookup};
    for (int i = 0; i < 3; i++)
        printf("%-22s %8zu %10.1f %10.1f %10.1f %10.1f\n", names[i], p[i]->n, p[i]->p50, p[i]->p90,
               p[i]->p99, p[i]->max);
    printf("\nsave: %" PRIu64 " stored, %" PRIu64 " exists, %" PRIu64 " nospace, %" PRIu64
           " declined; load: %" PRIu64 " hits verified byte-exact, %" PRIu64 " misses\n",
           r->stored, r->exists, r->nospace, r->declined, r->hits, r->misses);
}

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier-bench (-e ENDPOINT | -c CONFIG) [options]\n"
            "\n"
            "Saves, loads (verified byte-exact) and looks up synthetic chunks against a running\n"
            "kvtierd, and measures the same sizes over raw ZeroMQ and memcpy in the same run.\n"
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
            "      --data-path PATH     auto, frames or shm: how chunk bytes travel (default\n"
            "                           auto: the daemon's shared arena on ipc://, else frames)\n"
            "      --json               print one JSON object instead of the table\n"
            "  -h, --help               this text\n"
            "\n"
            "GB/s = 10^9 bytes/s of payload over the wall time of all ranks. The daemon needs\n"
            "about ranks x chunks x chunk-bytes of RAM capacity per round.\n"
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

static int endpoint_from_config(const char *path, char *out, size_t cap)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        if (err.line > 0)
            fprintf(stderr, "kvtier-bench: %s:%d: %s\n", path, err.line, err.text);
        else
            fprintf(stderr, "kvtier-bench: %s\n", err.text);
        return -1;
    }
    const char *ep =
        json_string_value(json_object_get(json_object_get(root, "server"), "endpoint"));
    int rc = -1;
    if (!ep || !*ep)
        fprintf(stderr, "kvtier-bench: %s: no server.endpoint string (use --endpoint)\n", path);
    else if (strlen(ep) >= cap)
        fprintf(stderr, "kvtier-bench: %s: server.endpoint too long\n", path);
    else {
        memcpy(out, ep, strlen(ep) + 1);
        rc = 0;
    }
    json_decref(root);
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
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *endpoint = NULL, *config = NULL, *ns = NULL;
    const char *bad = NULL;
    int c;
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
            o->data_path = data_path_parse(optarg);
            if (o->data_path < 0)
                bad = "--data-path must be auto, frames or shm";
            break;
        case ':':
            fprintf(stderr, "kvtier-bench: %s needs a value\n", argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "kvtier-bench: unknown option %s (see --help)\n", argv[optind - 1]);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "kvtier-bench: %s, got '%s'\n", bad, optarg);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvtier-bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    if (!endpoint == !config) {
        fprintf(stderr, "kvtier-bench: give exactly one of --endpoint and -c CONFIG\n");
        return -1;
    }
    if (endpoint) {
        if (strlen(endpoint) >= sizeof o->endpoint) {
            fprintf(stderr, "kvtier-bench: endpoint too long\n");
            return -1;
        }
        strcpy(o->endpoint, endpoint);
    } else if (endpoint_from_config(config, o->endpoint, sizeof o->endpoint)) {
        return -1;
    }
    if (o->world == 0)
        o->world = o->ranks;
    if (o->world < o->ranks) {
        fprintf(stderr, "kvtier-bench: --world %u is smaller than --ranks %u\n", o->world,
                o->ranks);
        return -1;
    }
    if (ns && (!*ns || strlen(ns) >= sizeof o->model)) {
        fprintf(stderr, "kvtier-bench: --ns must be 1..255 bytes\n");
        return -1;
    }
    if (ns)
        strcpy(o->model, ns);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * o->ranks * o->chunks * (double)o->chunk_bytes;
    if (pages > 0 && psize > 0 && need > 0.5 * (double)pages * (double)psize) {
        fprintf(stderr,
                "kvtier-bench: the run needs %.0f MiB of client buffers (2 x ranks x chunks x "
                "chunk-bytes), more than half of this machine's memory\n",
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
        fprintf(stderr, "kvtier-bench: no daemon at %s (%s)\n", ep, strerror(errno));
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
    b->calls_per_round = (o->chunks + o->batch - 1) / o->batch;
    b->round_hashes = calloc((size_t)o->rounds * o->chunks, sizeof(kvt_hash_t));
    b->warm_hashes = calloc(b->nwarm, sizeof(kvt_hash_t));
    b->lookup_hashes = calloc(o->prompt_chunks, sizeof(kvt_hash_t));
    b->ranks = calloc(o->ranks, sizeof(rank_t));
    if (!b->round_hashes || !b->warm_hashes || !b->lookup_hashes || !b->ranks)
        return -1;
    for (uint32_t i = 0; i < o->rounds; i++)
        if (make_hashes(b->seed, 3 + i, b->round_hashes + (size_t)i * o->chunks, o->chunks))
            return -1;
    if (make_hashes(b->seed, 1, b->warm_hashes, b->nwarm) ||
        make_hashes(b->seed, 2, b->lookup_hashes, o->prompt_chunks))
        return -1;
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
        free(r->save_ns);
        free(r->load_ns);
        free(r->lookup_ns);
        free(r->zlookup_ns);
    }
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
        fprintf(stderr,
                "kvtier-bench: --chunk-bytes %" PRIu64 " exceeds the daemon's "
                "ram.max_chunk_bytes %" PRIu64 "\n",
                o->chunk_bytes, in->max_chunk_bytes);
        return -1;
    }
    uint32_t most = o->batch > o->prompt_chunks ? o->batch : o->prompt_chunks;
    if (most > in->max_chunks) {
        fprintf(stderr,
                "kvtier-bench: --batch/--prompt-chunks %u exceeds the daemon's "
                "server.max_chunks_per_request %u\n",
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
        fprintf(stderr, "kvtier-bench: mkdtemp: %s\n", strerror(errno));
        b->zdir[0] = '\0';
        return -1;
    }
    snprintf(b->zendpoint, sizeof b->zendpoint, "ipc://%s/echo.zmq", b->zdir);
    b->zctx = zmq_ctx_new();
    if (!b->zctx || pthread_create(&b->echo, NULL, echo_main, b) != 0) {
        fprintf(stderr, "kvtier-bench: cannot start the zmq baseline\n");
        return -1;
    }
    b->echo_started = 1;
    return run_step(b, STEP_Z_CONNECT, 0, NULL) ? -1 : 0;
}

/* The measured part: every step in order; returns an exit status. Each round runs kvtier, then
 * the ZeroMQ baseline, then memcpy over the same chunks, and lookups alternate with their
 * baseline in slices, so slow drift of the machine (page cache, frequency, neighbours) hits
 * both sides of a ratio alike. The ZeroMQ context and its temp dir are torn down by
 * bench_teardown once the rank threads have left. */
static int bench_steps(bench_t *b, results_t *res)
{
    const bench_opts_t *o = &b->o;
    if (run_step(b, STEP_SETUP, 0, NULL))
        return EXIT_FAIL;
    if (check_limits(b))
        return EXIT_USAGE;
    if (zmq_baseline_start(b))
        return EXIT_FAIL;
    memcpy_pass(b, NULL, NULL);
    if (run_step(b, STEP_WARMUP, 0, NULL) || run_step(b, STEP_Z_WARM, 0, NULL))
        return EXIT_FAIL;
    for (uint32_t i = 0; i < o->rounds; i++) {
        if (run_step(b, STEP_PREPARE, i, NULL) || run_step(b, STEP_SAVE, i, &res->save_s) ||
            run_step(b, STEP_LOAD, i, &res->load_s) || run_step(b, STEP_VERIFY, i, NULL) ||
            run_step(b, STEP_Z_SAVE, i, &res->zsave_s) ||
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
        fprintf(stderr, "kvtier-bench: out of memory\n");
        return EXIT_FAIL;
    }
    warnings_t w = {0};
    make_warnings(b, res, &w);
    for (int i = 0; i < w.n; i++)
        fprintf(stderr, "kvtier-bench: warning: %s\n", w.text[i]);
    if (b->o.json) {
        if (print_json(b, res, &w)) {
            fprintf(stderr, "kvtier-bench: cannot format the JSON report\n");
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
    int rc = parse_args(argc, argv, &b->o);
    if (rc)
        return rc > 0 ? EXIT_OK : EXIT_USAGE;
    if (check_endpoint(b->o.endpoint))
        return EXIT_FAIL;
    rc = EXIT_FAIL;
    if (bench_prepare(b)) {
        fprintf(stderr, "kvtier-bench: out of memory\n");
        goto fail_prepare;
    }
    if (pthread_barrier_init(&b->start, NULL, b->o.ranks + 1))
        goto fail_prepare;
    if (pthread_barrier_init(&b->end, NULL, b->o.ranks + 1))
        goto fail_barrier_end;
    uint32_t started = start_ranks(b);
    if (started < b->o.ranks)
        fprintf(stderr, "kvtier-bench: cannot start %u rank threads\n", b->o.ranks);
    else
        rc = bench_steps(b, &res);
    stop_ranks(b, started);
    bench_teardown(b);
    if (rc == EXIT_OK)
        rc = report(b, &res);
    pthread_barrier_destroy(&b->end);
fail_barrier_end:
    pthread_barrier_destroy(&b->start);
fail_prepare:
    bench_free(b);
    return rc;
}
