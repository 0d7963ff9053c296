/*
 * test_stage.c - unit tests of the disk tier's staging memory (stage.c): the bound is the
 * configured size (not the huge-page-rounded address space), extents are aligned and never
 * overlap, a request that does not fit gets NULL until an extent comes back, resident memory is
 * measured and stays within the bound, and whole huge pages inside it are huge when the
 * kernel's THP mode allows.
 */
#include "check_main.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stage.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

START_TEST(test_bound_and_extents)
{
    stage_t *s = stage_new(136 * KIB + 1); /* rounds to 140 KiB, not to 2 MiB */
    uint8_t *a, *b, *c;

    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(stage_bytes(s), 140 * KIB);
    ck_assert_uint_eq((uintptr_t)stage_base(s) % STAGE_ALIGN, 0);
    a = stage_get(s, 64 * KIB);
    b = stage_get(s, 64 * KIB);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert(a + 64 * KIB <= b || b + 64 * KIB <= a); /* disjoint */
    ck_assert_uint_eq((uintptr_t)a % 4096, 0);
    ck_assert_uint_eq(stage_used(s), 128 * KIB);
    ck_assert_ptr_null(stage_get(s, 64 * KIB)); /* 12 KiB left */
    c = stage_get(s, 12 * KIB);
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_null(stage_get(s, 1));
    memset(a, 1, 64 * KIB);
    memset(b, 2, 64 * KIB);
    memset(c, 3, 12 * KIB);
    ck_assert_uint_eq(stage_resident(s), 140 * KIB); /* every page written, none past it */
    stage_put(s, a, 64 * KIB);
    ck_assert_uint_eq(stage_used(s), 76 * KIB);
    a = stage_get(s, 60 * KIB); /* the freed run serves again */
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(b[0], 2); /* the others untouched */
    ck_assert_uint_eq(c[12 * KIB - 1], 3);
    stage_put(s, a, 60 * KIB);
    stage_put(s, b, 64 * KIB);
    stage_put(s, c, 12 * KIB);
    ck_assert_uint_eq(stage_used(s), 0);
    ck_assert_ptr_null(stage_get(s, 0));
    ck_assert_ptr_null(stage_get(s, 141 * KIB));
    stage_destroy(&s);
    ck_assert_ptr_null(s);
    stage_destroy(&s); /* NULL is fine */
    ck_assert_uint_eq(stage_bytes(NULL), 0);
    ck_assert_uint_eq(stage_resident(NULL), 0);
}
END_TEST

/* AnonHugePages of the mapping that holds p, from /proc/self/smaps, in bytes (-1: not found). */
static long long anon_huge_of(const void *p)
{
    char line[256];
    FILE *f = fopen("/proc/self/smaps", "r");
    bool in = false;
    long long v = -1;

    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %lld kB", &kb) == 1)
            v = kb * 1024;
    }
    fclose(f);
    return v;
}

START_TEST(test_huge_pages_when_the_kernel_allows)
{
    stage_t *s = stage_new(4 * MIB + 8 * KIB);
    uint8_t *p = stage_get(s, 4 * MIB);
    long long huge;

    ck_assert_ptr_nonnull(p);
    memset(p, 7, 4 * MIB);
    huge = anon_huge_of(p);
    ck_assert_int_ge(huge, 0);
    ck_assert_int_le(stage_resident(s), 4 * MIB + 8 * KIB);
    ck_assert_uint_ge(stage_resident(s), 4 * MIB);
    printf("stage: THP %s, 4 MiB written, %lld bytes in huge pages\n",
           stage_thp_available() ? "available" : "not available", huge);
    if (!stage_thp_available())
        ck_assert_int_eq(huge, 0);
    /* with THP the kernel may still fall back to small pages (fragmented memory): what is
     * huge is whole pages, and no more than was advised */
    ck_assert_int_eq(huge % (2 * MIB), 0);
    ck_assert_int_le(huge, 4 * MIB);
    stage_put(s, p, 4 * MIB);
    stage_destroy(&s);
}
END_TEST

static Suite *stage_suite(void)
{
    Suite *s = suite_create("stage");
    TCase *tc = tcase_create("stage");

    tcase_add_test(tc, test_bound_and_extents);
    tcase_add_test(tc, test_huge_pages_when_the_kernel_allows);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = stage_suite};
