/*
 * test_alloc.c - unit tests for the arena extent allocator (daemon/alloc.c).
 *
 * Exact outcomes on small arenas (rounding, filling to capacity, coalescing, fragmentation,
 * the bounded first-fit scan), then a seeded random stress against a shadow model that owns
 * every unit: no two live runs may overlap, the used counter must equal the shadow's, and the
 * allocator must succeed whenever its guarantee says it must.
 */
#include "alloc.h"

#include "check_main.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024u
#define UNIT ALLOC_UNIT_DEFAULT

static uint64_t rng_state;

/* splitmix64: deterministic for a given seed. */
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static uint64_t rng_range(uint64_t lo, uint64_t hi)
{
    return lo + rng_next() % (hi - lo + 1);
}

static void get_ok(alloc_t *a, uint64_t len, uint64_t want_off)
{
    uint64_t off = UINT64_MAX;

    ck_assert_int_eq(alloc_get(a, len, &off), 0);
    ck_assert_uint_eq(off, want_off);
}

START_TEST(test_footprint)
{
    alloc_t *a = alloc_new(1024 * KIB + 100, UNIT);
    alloc_t *small = alloc_new(10 * 64, 64);

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(small);
    ck_assert_uint_eq(alloc_capacity(a), 1024 * KIB);
    ck_assert_uint_eq(alloc_footprint(a, 0), 0);
    ck_assert_uint_eq(alloc_footprint(a, 1), 4096);
    ck_assert_uint_eq(alloc_footprint(a, 4096), 4096);
    ck_assert_uint_eq(alloc_footprint(a, 4097), 8192);
    ck_assert_uint_eq(alloc_footprint(a, 3 * 4096 - 1), 3 * 4096);
    ck_assert_uint_eq(alloc_footprint(a, UINT64_MAX), UINT64_MAX);
    ck_assert_uint_eq(alloc_footprint(small, 65), 128);
    ck_assert_uint_eq(alloc_capacity(small), 640);

    /* The rounded footprint is what an allocation occupies. */
    get_ok(a, 4097, 0);
    ck_assert_uint_eq(alloc_used(a), 8192);
    get_ok(a, 1, 8192);
    ck_assert_uint_eq(alloc_used(a), 12288);
    ck_assert_uint_eq(alloc_largest_free(a), 1024 * KIB - 12288);
    alloc_put(a, 0, 4097);
    ck_assert_uint_eq(alloc_used(a), 4096);
    ck_assert_uint_eq(alloc_free_runs(a), 2);
    ck_assert_int_eq(alloc_check(a), 0);

    alloc_destroy(&a);
    alloc_destroy(&small);
    ck_assert_ptr_null(a);
    ck_assert_ptr_null(small);
}
END_TEST

/* Allocates varied lengths (partial units included) until the arena is exactly full. Records
 * each (off, len) in offs/lens and returns the count. */
static size_t fill(alloc_t *a, uint64_t *offs, uint64_t *lens, size_t max)
{
    static const uint64_t sizes[] = {3 * UNIT - 17, UNIT,     7 * UNIT,     1,
                                     2 * UNIT + 1,  5 * UNIT, 13 * UNIT - 1};
    uint64_t cap = alloc_capacity(a), expect = 0, len;
    size_t i;

    for (i = 0; expect < cap; i++) {
        ck_assert_uint_lt(i, max);
        len = sizes[i % (sizeof sizes / sizeof sizes[0])];
        if (alloc_footprint(a, len) > cap - expect)
            len = cap - expect;
        /* Carving one free run from the front: offsets are consecutive. */
        get_ok(a, len, expect);
        offs[i] = expect;
        lens[i] = len;
        expect += alloc_footprint(a, len);
        ck_assert_uint_eq(alloc_used(a), expect);
    }
    return i;
}

START_TEST(test_fill_exact)
{
    alloc_t *a = alloc_new(256 * UNIT, UNIT);
    uint64_t offs[256], lens[256], off = 7;

    ck_assert_ptr_nonnull(a);
    fill(a, offs, lens, 256);
    ck_assert_uint_eq(alloc_used(a), 256 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 0);
    ck_assert_uint_eq(alloc_largest_free(a), 0);
    ck_assert_int_eq(alloc_get(a, 1, &off), -ENOSPC);
    ck_assert_uint_eq(off, 7);
    ck_assert_uint_eq(alloc_used(a), 256 * UNIT);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
}
END_TEST

START_TEST(test_free_random_coalesces)
{
    alloc_t *a = alloc_new(1000 * UNIT, UNIT);
    uint64_t offs[1000], lens[1000], t;
    size_t n, i, j;

    ck_assert_ptr_nonnull(a);
    n = fill(a, offs, lens, 1000);
    ck_assert_uint_gt(n, 100);
    rng_state = 42;
    for (i = n - 1; i > 0; i--) {
        j = (size_t)rng_range(0, i);
        t = offs[i], offs[i] = offs[j], offs[j] = t;
        t = lens[i], lens[i] = lens[j], lens[j] = t;
    }
    for (i = 0; i < n; i++) {
        alloc_put(a, offs[i], lens[i]);
        ck_assert_int_eq(alloc_check(a), 0);
    }
    ck_assert_uint_eq(alloc_used(a), 0);
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), alloc_capacity(a));
    get_ok(a, alloc_capacity(a), 0);
    ck_assert_uint_eq(alloc_free_runs(a), 0);
    alloc_destroy(&a);
}
END_TEST

START_TEST(test_coalesce_neighbours)
{
    alloc_t *a = alloc_new(20 * UNIT, UNIT);

    ck_assert_ptr_nonnull(a);
    get_ok(a, 2 * UNIT, 0);         /* A: units 0-1 */
    get_ok(a, 3 * UNIT, 2 * UNIT);  /* B: 2-4 */
    get_ok(a, 4 * UNIT, 5 * UNIT);  /* C: 5-8 */
    get_ok(a, 11 * UNIT, 9 * UNIT); /* D: 9-19 */
    alloc_put(a, 0, 2 * UNIT);
    alloc_put(a, 5 * UNIT, 4 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 2);
    ck_assert_uint_eq(alloc_largest_free(a), 4 * UNIT);
    alloc_put(a, 2 * UNIT, 3 * UNIT); /* merges left and right */
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), 9 * UNIT);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_put(a, 9 * UNIT, 11 * UNIT); /* merges left, at the arena's end */
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), 20 * UNIT);
    ck_assert_uint_eq(alloc_used(a), 0);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
}
END_TEST

START_TEST(test_fragmentation)
{
    alloc_t *a = alloc_new(16 * UNIT, UNIT);
    uint64_t off = 0;

    ck_assert_ptr_nonnull(a);
    get_ok(a, 4 * UNIT, 0);         /* A */
    get_ok(a, 6 * UNIT, 4 * UNIT);  /* B */
    get_ok(a, 6 * UNIT, 10 * UNIT); /* C */
    alloc_put(a, 4 * UNIT, 6 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), 6 * UNIT);
    ck_assert_int_eq(alloc_get(a, 6 * UNIT + 1, &off), -ENOSPC);
    ck_assert_int_eq(alloc_get(a, 7 * UNIT, &off), -ENOSPC);
    get_ok(a, 5 * UNIT, 4 * UNIT); /* into B's place */
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), UNIT);
    get_ok(a, 1, 9 * UNIT);
    ck_assert_int_eq(alloc_get(a, 1, &off), -ENOSPC);
    ck_assert_uint_eq(alloc_used(a), 16 * UNIT);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
}
END_TEST

/* Bin 2 (runs of 4..7 units) holds 64 runs of 5 units, most recently freed first, then one of
 * 7. A 6-unit request finds no run in bin 3 and scans bin 2 first-fit, at most 64 entries
 * (ALLOC_SCAN_MAX in alloc.c): it misses the 7-run behind 64 entries and finds it behind 63. */
START_TEST(test_bounded_scan)
{
    alloc_t *a = alloc_new(392 * UNIT, UNIT);
    uint64_t off = 0, seven = 64 * 6 * UNIT;
    int i;

    ck_assert_ptr_nonnull(a);
    for (i = 0; i < 64; i++) {
        get_ok(a, 5 * UNIT, (uint64_t)i * 6 * UNIT);
        get_ok(a, UNIT, ((uint64_t)i * 6 + 5) * UNIT);
    }
    get_ok(a, 7 * UNIT, seven);
    get_ok(a, UNIT, seven + 7 * UNIT);
    ck_assert_int_eq(alloc_get(a, 1, &off), -ENOSPC);

    alloc_put(a, seven, 7 * UNIT);
    for (i = 0; i < 64; i++)
        alloc_put(a, (uint64_t)i * 6 * UNIT, 5 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 65);
    ck_assert_uint_eq(alloc_largest_free(a), 7 * UNIT);
    ck_assert_int_eq(alloc_check(a), 0);

    /* A 4-unit request fits any run of bin 2: it takes the head, the last run freed. */
    get_ok(a, 4 * UNIT, 63 * 6 * UNIT);
    alloc_put(a, 63 * 6 * UNIT, 4 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 65);

    ck_assert_int_eq(alloc_get(a, 6 * UNIT, &off), -ENOSPC);
    get_ok(a, 5 * UNIT, 63 * 6 * UNIT); /* first fit: the head */
    get_ok(a, 6 * UNIT, seven);         /* now 63 entries before the 7-run */
    ck_assert_uint_eq(alloc_free_runs(a), 64);
    ck_assert_uint_eq(alloc_largest_free(a), 5 * UNIT);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
}
END_TEST

START_TEST(test_invalid_args)
{
    alloc_t *a, *none = NULL;
    uint64_t off = 3;

    ck_assert_ptr_null(alloc_new(1024 * KIB, 0));
    ck_assert_ptr_null(alloc_new(1024 * KIB, 32));
    ck_assert_ptr_null(alloc_new(1024 * KIB, 100));
    ck_assert_ptr_null(alloc_new(1024 * KIB, 4095));
    ck_assert_ptr_null(alloc_new(1024 * KIB, 3 * KIB));
    ck_assert_ptr_null(alloc_new(0, UNIT));
    ck_assert_ptr_null(alloc_new(UNIT - 1, UNIT));
    ck_assert_ptr_null(alloc_new(((UINT64_C(1) << 31) + 1) * 64, 64));
    ck_assert_ptr_null(alloc_new(UINT64_MAX, UNIT));

    a = alloc_new(UNIT, UNIT); /* one unit is enough */
    ck_assert_ptr_nonnull(a);
    alloc_destroy(&a);
    ck_assert_ptr_null(a);
    alloc_destroy(&none);
    alloc_destroy(NULL);

    a = alloc_new(8 * UNIT, 64);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(alloc_get(a, 0, &off), -EINVAL);
    ck_assert_int_eq(alloc_get(a, 8 * UNIT + 1, &off), -EINVAL);
    ck_assert_int_eq(alloc_get(a, UINT64_MAX, &off), -EINVAL);
    ck_assert_uint_eq(off, 3);
    ck_assert_uint_eq(alloc_used(a), 0);
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    get_ok(a, 8 * UNIT, 0); /* exactly capacity is valid */
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
}
END_TEST

/* Freeing a run that is not allocated (double free, wrong length, unaligned offset) asserts;
 * with NDEBUG it is ignored and leaves the allocator intact. */
START_TEST(test_bad_put)
{
    alloc_t *a = alloc_new(16 * UNIT, UNIT);

    ck_assert_ptr_nonnull(a);
    get_ok(a, 2 * UNIT, 0);
    get_ok(a, 3 * UNIT, 2 * UNIT);
    alloc_put(a, 0, 2 * UNIT);
#ifdef NDEBUG
    alloc_put(a, 0, 2 * UNIT);        /* double free */
    alloc_put(a, 2 * UNIT, 2 * UNIT); /* wrong length */
    alloc_put(a, 2 * UNIT + 1, 3 * UNIT);
    alloc_put(a, 16 * UNIT, UNIT);
    ck_assert_uint_eq(alloc_used(a), 3 * UNIT);
    ck_assert_uint_eq(alloc_free_runs(a), 2);
    ck_assert_int_eq(alloc_check(a), 0);
    alloc_destroy(&a);
#else
    alloc_put(a, 0, 2 * UNIT); /* double free: raises SIGABRT */
#endif
}
END_TEST

#define STRESS_UNITS 4096u
#define STRESS_OPS 200000
#define STRESS_LIVE_MAX 2048

struct live {
    uint64_t off;
    uint64_t len;
};

static uint64_t stress_len(void)
{
    uint64_t r = rng_range(0, 99);

    if (r < 60)
        return rng_range(1, 4 * UNIT);
    if (r < 90)
        return rng_range(1, 64 * UNIT);
    if (r < 99)
        return rng_range(1, 512 * UNIT);
    return rng_range(1, STRESS_UNITS * UNIT); /* rarely, up to the whole arena */
}

static uint32_t ceil_pow2(uint64_t n)
{
    uint32_t p = 1;

    while (p < n)
        p <<= 1;
    return p;
}

/* Per-operation checks of the stress: Check records a location on every passing ck_assert
 * (a write to its pipe), far too slow for millions of checks; this one only acts on failure. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg("op %d: %s", op, #cond);                                                  \
    } while (0)

START_TEST(test_stress)
{
    alloc_t *a = alloc_new((uint64_t)STRESS_UNITS * UNIT, UNIT);
    static struct live live[STRESS_LIVE_MAX];
    static uint8_t owned[STRESS_UNITS];
    uint64_t len, off, fp, largest, shadow_used = 0;
    size_t nlive = 0, k, u, first, units;
    unsigned alloc_pct = 60, successes = 0, failures = 0;
    int op, rc;

    ck_assert_ptr_nonnull(a);
    memset(owned, 0, sizeof owned);
    rng_state = 20240611;
    for (op = 0; op < STRESS_OPS; op++) {
        if (op % 25000 == 0)
            alloc_pct = alloc_pct == 60 ? 40 : 60; /* alternate filling and draining phases */
        if (nlive == 0 || (nlive < STRESS_LIVE_MAX && rng_range(0, 99) < alloc_pct)) {
            len = stress_len();
            fp = alloc_footprint(a, len);
            units = fp / UNIT;
            largest = alloc_largest_free(a);
            off = UINT64_MAX;
            rc = alloc_get(a, len, &off);
            if (rc == 0) {
                successes++;
                REQUIRE(fp <= largest);
                REQUIRE(off % UNIT == 0);
                REQUIRE(off + fp <= alloc_capacity(a));
                first = off / UNIT;
                for (u = first; u < first + units; u++) {
                    REQUIRE(!owned[u]); /* no unit handed out twice */
                    owned[u] = 1;
                }
                live[nlive].off = off;
                live[nlive].len = len;
                nlive++;
                shadow_used += fp;
            } else {
                failures++;
                REQUIRE(rc == -ENOSPC);
                REQUIRE(off == UINT64_MAX);
                /* Guaranteed fit: a run of >= 2^ceil(log2 n) units must be found. */
                REQUIRE(largest < (uint64_t)ceil_pow2(units) * UNIT);
            }
        } else {
            k = (size_t)rng_range(0, nlive - 1);
            fp = alloc_footprint(a, live[k].len);
            first = live[k].off / UNIT;
            for (u = first; u < first + fp / UNIT; u++)
                owned[u] = 0;
            alloc_put(a, live[k].off, live[k].len);
            shadow_used -= fp;
            live[k] = live[--nlive];
        }
        REQUIRE(alloc_used(a) == shadow_used);
        REQUIRE(alloc_used(a) <= alloc_capacity(a));
        if (op % 1000 == 0)
            REQUIRE(alloc_check(a) == 0);
    }
    ck_assert_int_eq(alloc_check(a), 0);
    /* Both outcomes were exercised many times with this seed. */
    ck_assert_uint_gt(successes, 10000);
    ck_assert_uint_gt(failures, 1000);

    while (nlive > 0) {
        nlive--;
        alloc_put(a, live[nlive].off, live[nlive].len);
    }
    ck_assert_int_eq(alloc_check(a), 0);
    ck_assert_uint_eq(alloc_used(a), 0);
    ck_assert_uint_eq(alloc_free_runs(a), 1);
    ck_assert_uint_eq(alloc_largest_free(a), alloc_capacity(a));
    alloc_destroy(&a);
}
END_TEST

static Suite *alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_footprint);
    tcase_add_test(tc, test_fill_exact);
    tcase_add_test(tc, test_free_random_coalesces);
    tcase_add_test(tc, test_coalesce_neighbours);
    tcase_add_test(tc, test_fragmentation);
    tcase_add_test(tc, test_bounded_scan);
    tcase_add_test(tc, test_invalid_args);
#ifdef NDEBUG
    tcase_add_test(tc, test_bad_put);
#else
    tcase_add_test_raise_signal(tc, test_bad_put, SIGABRT);
#endif
    tcase_add_test(tc, test_stress);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = alloc_suite};
