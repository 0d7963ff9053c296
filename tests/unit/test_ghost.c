/*
 * test_ghost.c - unit tests of daemon/ghost.c, the table of declined chunks' fingerprints.
 *
 * The sizes and the replacement rule of ghost.h exactly: capacity rounding, membership, the
 * newest-first order of a bucket (the oldest decline of a full bucket is forgotten, a decline
 * again moves a fingerprint to the front, a lookup moves nothing), removal, and the counters.
 * A table of one bucket (8 slots) makes every fingerprint collide, so the order is observable.
 */
#include "check_main.h"

#include <stdint.h>
#include <string.h>

#include "ghost.h"

static kvt_wire_hash_t hash_of(uint32_t tag, uint32_t i)
{
    kvt_wire_hash_t h;
    uint32_t w[4] = {0x67686f73u, tag, i, ~i};

    memcpy(h.b, w, sizeof h.b);
    return h;
}

static uint64_t fp_of(uint32_t tag, uint32_t i)
{
    kvt_wire_hash_t h = hash_of(tag, i);
    return ghost_fp(&h);
}

static ghost_stats_t stats_of(const ghost_t *g)
{
    ghost_stats_t st;
    ghost_stats(g, &st);
    return st;
}

START_TEST(test_capacity)
{
    ck_assert_uint_eq(ghost_capacity_for(0), 0);
    ck_assert_uint_eq(ghost_capacity_for(1), 8);  /* at least one bucket */
    ck_assert_uint_eq(ghost_capacity_for(15), 8); /* rounded down to a power of two of buckets */
    ck_assert_uint_eq(ghost_capacity_for(16), 16);
    ck_assert_uint_eq(ghost_capacity_for(262144), 262144);
    ck_assert_uint_eq(ghost_capacity_for(262145), 262144);
    ck_assert_uint_eq(ghost_capacity_for(UINT64_MAX), GHOST_ENTRIES_MAX);
}
END_TEST

START_TEST(test_empty_table)
{
    ghost_t *g = ghost_new(0);

    ck_assert_ptr_nonnull(g);
    ghost_add(g, fp_of(1, 1));
    ck_assert(!ghost_has(g, fp_of(1, 1)));
    ck_assert(!ghost_remove(g, fp_of(1, 1)));
    ck_assert_uint_eq(stats_of(g).capacity, 0);
    ck_assert_uint_eq(stats_of(g).entries, 0);
    ck_assert_uint_eq(stats_of(g).inserts, 0);
    ghost_destroy(&g);
    ck_assert_ptr_null(g);
    ghost_destroy(&g);
}
END_TEST

START_TEST(test_fingerprints)
{
    kvt_wire_hash_t a = hash_of(1, 1), b = a;

    ck_assert_uint_eq(ghost_fp(&a), ghost_fp(&b));
    b.b[15] ^= 1;
    ck_assert_uint_ne(ghost_fp(&a), ghost_fp(&b));
    for (uint32_t i = 0; i < 1000; i++)
        ck_assert_uint_ne(fp_of(2, i), 0);
}
END_TEST

/* One bucket: the newest 8 declines are remembered, newest first. */
START_TEST(test_bucket_replacement)
{
    ghost_t *g = ghost_new(8);
    ghost_stats_t st;

    for (uint32_t i = 0; i < 12; i++)
        ghost_add(g, fp_of(3, i));
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_msg(!ghost_has(g, fp_of(3, i)), "the 4 oldest are forgotten (%u)", i);
    for (uint32_t i = 4; i < 12; i++)
        ck_assert(ghost_has(g, fp_of(3, i)));
    st = stats_of(g);
    ck_assert_uint_eq(st.capacity, 8);
    ck_assert_uint_eq(st.entries, 8);
    ck_assert_uint_eq(st.inserts, 12);
    ck_assert_uint_eq(st.evictions, 4);

    /* Declined again, 4 moves to the front: the next new one pushes out 5, the oldest now. */
    ghost_add(g, fp_of(3, 4));
    ck_assert_uint_eq(stats_of(g).refreshes, 1);
    ck_assert_uint_eq(stats_of(g).inserts, 12);
    ghost_add(g, fp_of(3, 12));
    ck_assert(ghost_has(g, fp_of(3, 4)));
    ck_assert(!ghost_has(g, fp_of(3, 5)));
    ck_assert(ghost_has(g, fp_of(3, 6)));

    /* A lookup does not reorder: 6 is the oldest still, and goes next. */
    ck_assert(ghost_has(g, fp_of(3, 6)));
    ghost_add(g, fp_of(3, 13));
    ck_assert(!ghost_has(g, fp_of(3, 6)));
    ck_assert_uint_eq(stats_of(g).evictions, 6);
    ck_assert_uint_eq(stats_of(g).entries, 8);
    ghost_destroy(&g);
}
END_TEST

START_TEST(test_remove)
{
    ghost_t *g = ghost_new(8);
    ghost_stats_t st;

    for (uint32_t i = 0; i < 5; i++)
        ghost_add(g, fp_of(4, i));
    ck_assert(ghost_remove(g, fp_of(4, 2)));
    ck_assert(!ghost_remove(g, fp_of(4, 2)));
    ck_assert(!ghost_has(g, fp_of(4, 2)));
    for (uint32_t i = 0; i < 5; i++)
        ck_assert(i == 2 || ghost_has(g, fp_of(4, i)));
    st = stats_of(g);
    ck_assert_uint_eq(st.entries, 4);
    ck_assert_uint_eq(st.removals, 1);
    /* The bucket stays packed: four more fit before anything is forgotten. */
    for (uint32_t i = 5; i < 9; i++)
        ghost_add(g, fp_of(4, i));
    ck_assert_uint_eq(stats_of(g).entries, 8);
    ck_assert_uint_eq(stats_of(g).evictions, 0);
    ck_assert(ghost_has(g, fp_of(4, 0)));
    ghost_add(g, fp_of(4, 9));
    ck_assert(!ghost_has(g, fp_of(4, 0)));
    ghost_destroy(&g);
}
END_TEST

/* A large table keeps far more than one bucket's worth: 10000 fingerprints in 2^18 slots. */
START_TEST(test_large_table)
{
    ghost_t *g = ghost_new(262144);
    uint64_t kept = 0;

    for (uint32_t i = 0; i < 10000; i++)
        ghost_add(g, fp_of(5, i));
    for (uint32_t i = 0; i < 10000; i++)
        kept += ghost_has(g, fp_of(5, i));
    ck_assert_uint_eq(kept, 10000 - stats_of(g).evictions);
    ck_assert_uint_eq(stats_of(g).entries, kept);
    ck_assert_uint_lt(stats_of(g).evictions, 10); /* 10000 in 32768 buckets of 8 */
    ghost_destroy(&g);
}
END_TEST

static Suite *ghost_suite(void)
{
    Suite *s = suite_create("ghost");
    TCase *tc = tcase_create("ghost");

    tcase_add_test(tc, test_capacity);
    tcase_add_test(tc, test_empty_table);
    tcase_add_test(tc, test_fingerprints);
    tcase_add_test(tc, test_bucket_replacement);
    tcase_add_test(tc, test_remove);
    tcase_add_test(tc, test_large_table);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = ghost_suite};
