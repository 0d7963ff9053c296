/*
 * hist.h - fixed-size log-linear latency histogram (values in microseconds).
 *
 * Values 0..15 each have their own bucket. Above that, every power-of-two range [2^k, 2^(k+1))
 * is split into HIST_SUB equal sub-buckets, so a bucket's width is at most 1/16 of the values
 * it holds: any percentile is reported with a relative error of at most 1/16. Ranges cover
 * values below 2^HIST_MAX_EXP us (about 71 minutes); larger values share one overflow bucket
 * whose upper bound is the largest value recorded.
 *
 * hist_t is a plain struct meant to be embedded (e.g. one per operation in the stats). It never
 * allocates; recording is O(1).
 *
 * Threads: none of its own; the caller serialises access (the daemon's loop thread owns its
 * histograms).
 */
#ifndef KVT_HIST_H
#define KVT_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS) /* sub-buckets per power of two */
#define HIST_MAX_EXP 32                /* values below 2^32 us are bucketed precisely */
/* HIST_SUB exact buckets for 0..15, HIST_SUB per range 2^4..2^31, one overflow bucket. */
#define HIST_BUCKETS (HIST_SUB + (HIST_MAX_EXP - HIST_SUB_BITS) * HIST_SUB + 1)

typedef struct hist {
    uint64_t count; /* values recorded */
    uint64_t sum;   /* their sum, saturating at UINT64_MAX */
    uint64_t max;   /* the largest value recorded (0 when empty) */
    uint64_t buckets[HIST_BUCKETS];
} hist_t;

/* Empties h. A zero-filled hist_t is also a valid empty histogram. */
void hist_init(hist_t *h);

/* Records one value in microseconds. */
void hist_record(hist_t *h, uint64_t us);

uint64_t hist_count(const hist_t *h);

/* The largest value recorded, exactly; 0 when empty. */
uint64_t hist_max(const hist_t *h);

/* The arithmetic mean of the values recorded (exact up to double rounding, unless the sum
 * saturated); 0 when empty. */
double hist_mean(const hist_t *h);

/* The p-th percentile, p in percent (0..100; values outside are clamped, NaN counts as 0),
 * using the nearest-rank definition: the value of rank ceil(p/100 * count), at least rank 1.
 * Returns the upper bound of the bucket holding that value, clamped to the maximum recorded,
 * so the result is never below the true value and exceeds it by at most 1/16 of it.
 * Returns 0 for an empty histogram. */
uint64_t hist_percentile(const hist_t *h, double p);

/* The number of values recorded below v. Exact when v is the lower edge of a bucket (any v up to
 * 16, and every 2^k or (16 + s) * 2^(k-4) above: the Prometheus boundaries of stats.c are powers
 * of two); otherwise the values of the bucket holding v are not counted. Saturates at the top
 * range: v at or above 2^HIST_MAX_EXP counts everything but the overflow bucket. */
uint64_t hist_count_below(const hist_t *h, uint64_t v);

/* The sum of the values recorded (saturating at UINT64_MAX). */
uint64_t hist_sum(const hist_t *h);

/* The smallest value bucket i (0 <= i < HIST_BUCKETS) holds. Bucket i holds the values from
 * hist_bucket_lo(i) up to hist_bucket_lo(i + 1) - 1; the overflow bucket (the last) everything
 * from 2^HIST_MAX_EXP on. The boundaries are fixed: two histograms' buckets i hold the same
 * values, so a later copy minus an earlier one is the histogram of what came between. */
uint64_t hist_bucket_lo(unsigned i);

#endif /* KVT_HIST_H */
