/*
 * test_hist.c - unit tests of the log-linear latency histogram (daemon/hist.c).
 *
 * Expected values are computed by hand from the bucket layout (see hist.c), and a seeded
 * pseudo-random distribution is checked against exact nearest-rank percentiles of the sorted
 * values.
 */
#include "check_main.h"

#include <math.h>
#include <stdlib.h>

#include "hist.h"

START_TEST(test_empty)
{
    hist_t h;

    hist_init(&h);
    ck_assert_uint_eq(hist_count(&h), 0);
    ck_assert_uint_eq(hist_max(&h), 0);
    ck_assert(hist_mean(&h) == 0.0);
    ck_assert_uint_eq(hist_percentile(&h, 0.0), 0);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 0);
    ck_assert_uint_eq(hist_percentile(&h, 100.0), 0);
}
END_TEST

START_TEST(test_single_value)
{
    hist_t h;

    hist_init(&h);
    hist_record(&h, 1000);
    ck_assert_uint_eq(hist_count(&h), 1);
    ck_assert_uint_eq(hist_max(&h), 1000);
    ck_assert(hist_mean(&h) == 1000.0);
    /* 1000 lies in [992, 1023]; the upper bound is clamped to the maximum. */
    ck_assert_uint_eq(hist_percentile(&h, 0.0), 1000);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 1000);
    ck_assert_uint_eq(hist_percentile(&h, 100.0), 1000);
}
END_TEST

START_TEST(test_small_values_exact)
{
    hist_t h;
    uint64_t v;

    hist_init(&h);
    for (v = 0; v < 16; v++)
        hist_record(&h, v);
    ck_assert_uint_eq(hist_count(&h), 16);
    ck_assert_uint_eq(hist_max(&h), 15);
    ck_assert(hist_mean(&h) == 7.5);
    ck_assert_uint_eq(hist_percentile(&h, 0.0), 0);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 7);  /* rank 8 */
    ck_assert_uint_eq(hist_percentile(&h, 75.0), 11); /* rank 12 */
    ck_assert_uint_eq(hist_percentile(&h, 100.0), 15);
}
END_TEST

START_TEST(test_uniform_1_to_1000)
{
    hist_t h;
    uint64_t v;

    hist_init(&h);
    for (v = 1; v <= 1000; v++)
        hist_record(&h, v);
    ck_assert_uint_eq(hist_count(&h), 1000);
    ck_assert_uint_eq(hist_max(&h), 1000);
    ck_assert(hist_mean(&h) == 500.5);
    ck_assert_uint_eq(hist_percentile(&h, 0.0), 1);     /* rank 1: value 1, exact bucket */
    ck_assert_uint_eq(hist_percentile(&h, 1.0), 10);    /* rank 10: value 10, exact bucket */
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 511);  /* rank 500: 500 in [496, 511] */
    ck_assert_uint_eq(hist_percentile(&h, 90.0), 927);  /* rank 900: 900 in [896, 927] */
    ck_assert_uint_eq(hist_percentile(&h, 99.0), 991);  /* rank 990: 990 in [960, 991] */
    ck_assert_uint_eq(hist_percentile(&h, 99.9), 1000); /* 999 in [992, 1023] -> max */
    ck_assert_uint_eq(hist_percentile(&h, 100.0), 1000);
    /* Out-of-range p is clamped. */
    ck_assert_uint_eq(hist_percentile(&h, -5.0), 1);
    ck_assert_uint_eq(hist_percentile(&h, 250.0), 1000);
}
END_TEST

/* The bucket upper bound of v, written independently of hist.c: width 2^(k-4) above 15. */
static uint64_t upper_of(uint64_t v)
{
    uint64_t w = 1;

    while (v >= 32 * w)
        w *= 2;
    return v < 16 ? v : (v / w + 1) * w - 1;
}

START_TEST(test_integral_percentiles_exact_rank)
{
    /* With 100 values 1..100, percentile p is rank p exactly, for every integral p (no
     * rounding of p / 100, which would give rank 8 for p = 7). */
    hist_t h;
    uint64_t v;
    int p;

    hist_init(&h);
    for (v = 1; v <= 100; v++)
        hist_record(&h, v);
    for (p = 1; p <= 100; p++) {
        uint64_t want = upper_of((uint64_t)p) < 100 ? upper_of((uint64_t)p) : 100;

        ck_assert_uint_eq(hist_percentile(&h, p), want);
    }
    ck_assert_uint_eq(hist_percentile(&h, 7.0), 7);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 51); /* 50 in [48, 51] */
}
END_TEST

START_TEST(test_bucket_bounds)
{
    /* With a much larger second value, p = 1 (rank 1) reports the bucket upper bound of v. */
    static const uint64_t big = 1ull << 31;
    hist_t h;
    unsigned k;

    for (k = 4; k < 31; k++) {
        uint64_t lo = 1ull << k, w = 1ull << (k - 4);

        hist_init(&h);
        hist_record(&h, lo);
        hist_record(&h, big);
        ck_assert_uint_eq(hist_percentile(&h, 1.0), lo + w - 1);

        hist_init(&h);
        hist_record(&h, lo - 1);
        hist_record(&h, big);
        ck_assert_uint_eq(hist_percentile(&h, 1.0), lo - 1); /* top of the previous range */

        hist_init(&h);
        hist_record(&h, 2 * lo - 1);
        hist_record(&h, big);
        ck_assert_uint_eq(hist_percentile(&h, 1.0), 2 * lo - 1);
    }
    /* The top of the precise range: 2^32 - 1 lies in [2^32 - 2^27, 2^32 - 1]. */
    hist_init(&h);
    hist_record(&h, (1ull << 32) - (1ull << 27));
    hist_record(&h, 1ull << 40);
    ck_assert_uint_eq(hist_percentile(&h, 1.0), (1ull << 32) - 1);
}
END_TEST

/* hist_bucket_lo: the buckets tile the values without gaps, each lower bound lands in its own
 * bucket and the value below it in the previous one, and a later copy minus an earlier one
 * counts what was recorded between (what status ops.*.buckets_us is read for). */
START_TEST(test_bucket_lo_tiles_the_values)
{
    hist_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(hist_bucket_lo(0), 0);
    ck_assert_uint_eq(hist_bucket_lo(16), 16);
    ck_assert_uint_eq(hist_bucket_lo(17), 17);
    ck_assert_uint_eq(hist_bucket_lo(32), 32);
    ck_assert_uint_eq(hist_bucket_lo(33), 34);
    ck_assert_uint_eq(hist_bucket_lo(HIST_BUCKETS - 1), 1ull << HIST_MAX_EXP);
    for (unsigned i = 1; i < HIST_BUCKETS; i++) {
        uint64_t lo = hist_bucket_lo(i);

        ck_assert_uint_gt(lo, hist_bucket_lo(i - 1));
        hist_init(a);
        hist_record(a, lo);
        hist_record(a, lo - 1);
        ck_assert_uint_eq(a->buckets[i], 1);
        ck_assert_uint_eq(a->buckets[i - 1], 1);
    }
    hist_init(a);
    for (uint64_t v = 1; v < 5000; v += 7)
        hist_record(a, v);
    *b = *a;
    for (uint64_t v = 3000; v < 3100; v++)
        hist_record(b, v);
    uint64_t between = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        uint64_t d = b->buckets[i] - a->buckets[i];
        between += d;
        if (d != 0) {
            ck_assert_uint_ge(hist_bucket_lo(i + 1) - 1, 3000);
            ck_assert_uint_le(hist_bucket_lo(i), 3099);
        }
    }
    ck_assert_uint_eq(between, 100);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_overflow_clamps_to_max)
{
    hist_t h;

    hist_init(&h);
    hist_record(&h, 1ull << 40);
    hist_record(&h, (1ull << 41) + 7);
    ck_assert_uint_eq(hist_max(&h), (1ull << 41) + 7);
    /* Both share the overflow bucket, whose bound is the maximum: never below the true value. */
    ck_assert_uint_eq(hist_percentile(&h, 50.0), (1ull << 41) + 7);
    ck_assert_uint_eq(hist_percentile(&h, 100.0), (1ull << 41) + 7);

    /* Just above the precise range (2^32 + 2^31) also goes to the overflow bucket. */
    hist_init(&h);
    hist_record(&h, 3ull << 31);
    hist_record(&h, 1ull << 40);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), 1ull << 40);

    hist_init(&h);
    hist_record(&h, UINT64_MAX);
    hist_record(&h, UINT64_MAX);
    ck_assert_uint_eq(hist_max(&h), UINT64_MAX);
    ck_assert_uint_eq(hist_percentile(&h, 50.0), UINT64_MAX);
    ck_assert(hist_mean(&h) == (double)UINT64_MAX / 2.0); /* sum saturates */
}
END_TEST

START_TEST(test_init_resets)
{
    hist_t h;

    hist_init(&h);
    hist_record(&h, 123456);
    hist_init(&h);
    ck_assert_uint_eq(hist_count(&h), 0);
    ck_assert_uint_eq(hist_max(&h), 0);
    ck_assert_uint_eq(hist_percentile(&h, 99.0), 0);
    hist_record(&h, 3);
    ck_assert_uint_eq(hist_percentile(&h, 99.0), 3);
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

START_TEST(test_random_within_error)
{
    enum { N = 10007 };
    static const double ps[] = {0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 100.0};
    static uint64_t vals[N];
    uint64_t x = 0x9e3779b97f4a7c15ull, sum = 0;
    hist_t h;
    size_t i;

    hist_init(&h);
    for (i = 0; i < N; i++) {
        /* xorshift64; a log-spread value of up to 2^32 us. */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        vals[i] = (x >> 32) >> (x % 32);
        sum += vals[i];
        hist_record(&h, vals[i]);
    }
    qsort(vals, N, sizeof vals[0], cmp_u64);
    ck_assert_uint_eq(hist_count(&h), N);
    ck_assert_uint_eq(hist_max(&h), vals[N - 1]);
    ck_assert(hist_mean(&h) == (double)sum / N);
    for (i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        /* Nearest rank: ceil(p * N / 100), at least 1. */
        uint64_t rank = (uint64_t)ceil(ps[i] * N / 100.0);
        uint64_t truth, got;

        if (rank < 1)
            rank = 1;
        truth = vals[rank - 1];
        got = hist_percentile(&h, ps[i]);
        ck_assert_uint_ge(got, truth);
        ck_assert_uint_le(got, truth + truth / 16);
        ck_assert_uint_le(got, vals[N - 1]);
    }
}
END_TEST

static Suite *hist_suite(void)
{
    Suite *s = suite_create("hist");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_single_value);
    tcase_add_test(tc, test_small_values_exact);
    tcase_add_test(tc, test_uniform_1_to_1000);
    tcase_add_test(tc, test_integral_percentiles_exact_rank);
    tcase_add_test(tc, test_bucket_bounds);
    tcase_add_test(tc, test_bucket_lo_tiles_the_values);
    tcase_add_test(tc, test_overflow_clamps_to_max);
    tcase_add_test(tc, test_init_resets);
    tcase_add_test(tc, test_random_within_error);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = hist_suite};
