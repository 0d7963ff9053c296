/*
 * hist.c - log-linear latency histogram (see hist.h).
 *
 * Design: bucket index of a value v:
 *   v < 16:                 index v (exact);
 *   16 <= v < 2^HIST_MAX_EXP: with k = floor(log2 v) (4 <= k < HIST_MAX_EXP) and
 *                           s = (v >> (k - 4)) & 15 (the 4 bits after the leading one),
 *                           index 16 + (k - 4) * 16 + s;
 *   larger:                 the overflow bucket HIST_BUCKETS - 1.
 * The bucket of (k, s) holds [(16 + s) << (k - 4), (17 + s) << (k - 4)): its width 2^(k-4) is
 * at most 1/16 of any value in it. Percentiles walk the buckets in order (at most 465 steps).
 *
 * Invariants: count == sum of buckets[]; max is the largest value recorded; every recorded value
 * lies in its bucket's range. Threads: the caller serialises access.
 */
#include "hist.h"

#include <math.h>
#include <string.h>

static unsigned hist_index(uint64_t v)
{
    unsigned k;

    if (v < HIST_SUB)
        return (unsigned)v;
    k = 63u - (unsigned)__builtin_clzll(v);
    if (k >= HIST_MAX_EXP)
        return HIST_BUCKETS - 1;
    return HIST_SUB + (k - HIST_SUB_BITS) * HIST_SUB +
           (unsigned)((v >> (k - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* The largest value that falls into bucket i (UINT64_MAX for the overflow bucket). */
static uint64_t hist_upper(unsigned i)
{
    unsigned k, s;

    if (i < HIST_SUB)
        return i;
    if (i == HIST_BUCKETS - 1)
        return UINT64_MAX;
    k = (i - HIST_SUB) / HIST_SUB + HIST_SUB_BITS;
    s = (i - HIST_SUB) % HIST_SUB;
    return (((uint64_t)HIST_SUB + s + 1) << (k - HIST_SUB_BITS)) - 1;
}

void hist_init(hist_t *h)
{
    memset(h, 0, sizeof *h);
}

void hist_record(hist_t *h, uint64_t us)
{
    h->buckets[hist_index(us)]++;
    h->count++;
    h->sum = us > UINT64_MAX - h->sum ? UINT64_MAX : h->sum + us;
    if (us > h->max)
        h->max = us;
}

uint64_t hist_count(const hist_t *h)
{
    return h->count;
}

uint64_t hist_max(const hist_t *h)
{
    return h->max;
}

double hist_mean(const hist_t *h)
{
    if (h->count == 0)
        return 0.0;
    return (double)h->sum / (double)h->count;
}

uint64_t hist_percentile(const hist_t *h, double p)
{
    uint64_t rank, seen = 0;
    double r;
    unsigned i;

    if (h->count == 0)
        return 0;
    if (!(p > 0.0))
        p = 0.0;
    if (p > 100.0)
        p = 100.0;
    /* p * count first: exact for integral p and counts below 2^46, so p = 99 over 100 values
     * gives rank 99, not 100 through 0.99's rounding. */
    r = ceil(p * (double)h->count / 100.0);
    rank = r < 1.0 ? 1 : (r >= (double)h->count ? h->count : (uint64_t)r);
    for (i = 0; i < HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank)
            break;
    }
    if (i == HIST_BUCKETS)
        return h->max; /* unreachable while count == sum of buckets */
    return hist_upper(i) < h->max ? hist_upper(i) : h->max;
}

uint64_t hist_count_below(const hist_t *h, uint64_t v)
{
    unsigned end = hist_index(v);
    uint64_t n = 0;

    for (unsigned i = 0; i < end; i++)
        n += h->buckets[i];
    return n;
}

uint64_t hist_sum(const hist_t *h)
{
    return h->sum;
}

uint64_t hist_bucket_lo(unsigned i)
{
    if (i == 0)
        return 0;
    if (i >= HIST_BUCKETS)
        i = HIST_BUCKETS - 1;
    return hist_upper(i - 1) + 1;
}
