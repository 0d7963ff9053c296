/*
 * util.c - the small pieces every part of kvtier-bench uses: the monotonic clock, synthetic chunk
 * data (random, or bf16 values of N(0, 1)) and chained hashes from per-run token sets, the
 * nearest-rank percentiles, a rank's first failure, and the names of the table's columns.
 *
 * Threads: any; nothing here keeps state (rank_fail writes only the rank_t it is given).
 */
#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const data_names[] = {[DATA_RANDOM] = "random", [DATA_BF16] = "bf16"};
const char *const op_names[2] = {"save", "load"};
const col_name_t cols[COL_N] = {
    {"kvtier-shm", "kvtier_shm"},
    {"kvtier-frames", "kvtier_frames"},
    {"kvtier-zc", "kvtier_zc"},
    {"redis", "redis"},
    {"zmq", "zmq"},
    {"memcpy", "memcpy"},
    {"copy+csum", "copy_csum"},
};

uint64_t now_ns(void)
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
void fill_bf16(uint8_t *p, size_t n, uint64_t seed)
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

void fill_random(uint8_t *p, size_t n, uint64_t seed)
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
int make_hashes(uint64_t seed, uint64_t set, kvt_hash_t *out, size_t n)
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

void stamp(uint8_t *chunk, size_t len, const kvt_hash_t *h)
{
    memcpy(chunk, h->b, len < sizeof h->b ? len : sizeof h->b);
}

__attribute__((format(printf, 3, 4))) void rank_fail(rank_t *r, int kind, const char *fmt, ...)
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

void rank_fail_kvt(rank_t *r, const char *what, int rc, const kvt_client_t *c)
{
    const char *detail = c ? kvt_last_error(c) : "";
    rank_fail(r, 1, "%s: %s%s%s", what, kvt_strerror(rc), *detail ? ": " : "", detail);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles of v (sorted in place). */
pct_t percentiles(uint64_t *v, size_t n)
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
