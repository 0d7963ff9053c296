/*
 * alloc.c - extent allocator for the RAM arena (see alloc.h).
 *
 * Design. The arena is nunits units of 2^shift bytes. Every unit belongs to exactly one run,
 * free or used, and the runs tile [0, nunits). The metadata lives out of band in three arrays
 * of nunits uint32 each (12 bytes per unit), so the allocator never touches the arena:
 *   tag[u]   at the first and the last unit of every run: ALLOC_TAG_FREE | (length - 1).
 *            Interior units hold stale values that are never read.
 *   next[u], prev[u]   at the first unit of a free run: its neighbours in its bin's list.
 * A free run of L units lives in bin floor(log2 L); 32 bins cover 1 .. 2^31 units. Bit b of
 * `nonempty` is set iff bin b holds a run. The arrays come from calloc, so the pages of a large
 * allocator are only touched where runs begin and end.
 *
 * alloc_get(n units): every run in bin ceil(log2 n) or above fits, so one count-trailing-zeros
 * on the bitmap finds the lowest such bin and its head is taken: O(1). If there is none, bin
 * floor(log2 n) holds runs of [2^floor, 2^ceil) units that may or may not fit; up to
 * ALLOC_SCAN_MAX of them are scanned first-fit. The allocation takes the front of the run and
 * the remainder goes back to its bin. Because the scan is bounded, a request of n units (n not
 * a power of two) can fail with -ENOSPC while a fitting run sits deeper in its floor bin; a
 * request always succeeds when the largest free run is >= 2^ceil(log2 n) units.
 *
 * alloc_put: the tags at u - 1 and u + n give the neighbours' state and length in O(1); free
 * neighbours are unlinked and merged, and the merged run is linked into its bin (at the head:
 * recently freed runs are scanned first).
 *
 * Invariants (alloc_check verifies them): the runs tile the arena with matching first and last
 * tags; no two free runs are adjacent; every free run is in exactly its bin's list and no other
 * entry is; bit b of nonempty == (head[b] != ALLOC_NIL); used_units and free_runs match a walk.
 * A used tag exists only at the first and last unit of a live run (alloc_put overwrites both
 * before merging), so the validity test in alloc_put is exact: it accepts (off, len) iff that
 * run is allocated. A bad alloc_put asserts; with NDEBUG it is ignored (a leak, never a
 * corruption). alloc.c is a leaf: it logs nothing and links against nothing but libc.
 *
 * Threads: none of its own; single caller at a time (the daemon's loop thread).
 */
#include "alloc.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#define ALLOC_NIL UINT32_MAX
#define ALLOC_TAG_FREE 0x80000000u
#define ALLOC_BINS 32
#define ALLOC_SCAN_MAX 64
#define ALLOC_UNIT_MIN 64u
#define ALLOC_UNITS_MAX (UINT64_C(1) << 31)

struct alloc {
    uint32_t *tag;  /* boundary tags, per unit */
    uint32_t *next; /* bin list links, at the first unit of a free run */
    uint32_t *prev;
    uint64_t used_units;
    uint32_t nunits;
    uint32_t shift; /* unit == 1 << shift */
    uint32_t free_runs;
    uint32_t nonempty; /* bit b: head[b] != ALLOC_NIL */
    uint32_t head[ALLOC_BINS];
};

static uint32_t floor_log2(uint32_t x)
{
    return 31u - (uint32_t)__builtin_clz(x);
}

static uint32_t ceil_log2(uint32_t x)
{
    return x <= 1 ? 0 : 32u - (uint32_t)__builtin_clz(x - 1);
}

static uint32_t tag_make(uint32_t len, int is_free)
{
    return (len - 1) | (is_free ? ALLOC_TAG_FREE : 0);
}

static uint32_t tag_len(uint32_t t)
{
    return (t & ~ALLOC_TAG_FREE) + 1;
}

static int tag_is_free(uint32_t t)
{
    return (t & ALLOC_TAG_FREE) != 0;
}

static void run_mark(alloc_t *a, uint32_t start, uint32_t len, int is_free)
{
    uint32_t t = tag_make(len, is_free);

    a->tag[start] = t;
    a->tag[start + len - 1] = t;
}

static void bin_insert(alloc_t *a, uint32_t start, uint32_t len)
{
    uint32_t b = floor_log2(len);
    uint32_t h = a->head[b];

    a->next[start] = h;
    a->prev[start] = ALLOC_NIL;
    if (h != ALLOC_NIL)
        a->prev[h] = start;
    a->head[b] = start;
    a->nonempty |= 1u << b;
    a->free_runs++;
}

static void bin_remove(alloc_t *a, uint32_t start, uint32_t len)
{
    uint32_t b = floor_log2(len);
    uint32_t n = a->next[start];
    uint32_t p = a->prev[start];

    if (p != ALLOC_NIL)
        a->next[p] = n;
    else
        a->head[b] = n;
    if (n != ALLOC_NIL)
        a->prev[n] = p;
    if (a->head[b] == ALLOC_NIL)
        a->nonempty &= ~(1u << b);
    a->free_runs--;
}

/* Units covered by len bytes; len must be <= capacity (no overflow then). */
static uint32_t len_units(const alloc_t *a, uint64_t len)
{
    return (uint32_t)((len + ((UINT64_C(1) << a->shift) - 1)) >> a->shift);
}

alloc_t *alloc_new(uint64_t capacity, uint32_t unit)
{
    alloc_t *a;
    uint64_t n;
    uint32_t b;

    if (unit < ALLOC_UNIT_MIN || (unit & (unit - 1)) != 0)
        return NULL;
    n = capacity >> __builtin_ctz(unit);
    if (n == 0 || n > ALLOC_UNITS_MAX)
        return NULL;

    a = calloc(1, sizeof *a);
    if (a == NULL)
        goto fail_self;
    a->tag = calloc((size_t)n, sizeof *a->tag);
    if (a->tag == NULL)
        goto fail_tag;
    a->next = calloc((size_t)n, sizeof *a->next);
    if (a->next == NULL)
        goto fail_next;
    a->prev = calloc((size_t)n, sizeof *a->prev);
    if (a->prev == NULL)
        goto fail_prev;

    a->nunits = (uint32_t)n;
    a->shift = (uint32_t)__builtin_ctz(unit);
    for (b = 0; b < ALLOC_BINS; b++)
        a->head[b] = ALLOC_NIL;
    run_mark(a, 0, a->nunits, 1);
    bin_insert(a, 0, a->nunits);
    return a;

fail_prev:
    free(a->next);
fail_next:
    free(a->tag);
fail_tag:
    free(a);
fail_self:
    return NULL;
}

void alloc_destroy(alloc_t **a)
{
    if (a == NULL || *a == NULL)
        return;
    free((*a)->prev);
    free((*a)->next);
    free((*a)->tag);
    free(*a);
    *a = NULL;
}

/* First run of >= n units among the first ALLOC_SCAN_MAX entries of bin b, or ALLOC_NIL. */
static uint32_t bin_scan(const alloc_t *a, uint32_t b, uint32_t n)
{
    uint32_t u = a->head[b];
    int i;

    for (i = 0; i < ALLOC_SCAN_MAX && u != ALLOC_NIL; i++, u = a->next[u])
        if (tag_len(a->tag[u]) >= n)
            return u;
    return ALLOC_NIL;
}

int alloc_get(alloc_t *a, uint64_t len, uint64_t *off)
{
    uint32_t n, c, f, bins, start, run;

    assert(a != NULL && off != NULL);
    if (len == 0 || len > alloc_capacity(a))
        return -EINVAL;
    n = len_units(a, len);
    c = ceil_log2(n);
    f = floor_log2(n);

    bins = a->nonempty & (~0u << c);
    if (bins != 0)
        start = a->head[__builtin_ctz(bins)];
    else if (f != c)
        start = bin_scan(a, f, n);
    else
        start = ALLOC_NIL;
    if (start == ALLOC_NIL)
        return -ENOSPC;

    run = tag_len(a->tag[start]);
    assert(tag_is_free(a->tag[start]) && run >= n);
    bin_remove(a, start, run);
    run_mark(a, start, n, 0);
    if (run > n) {
        run_mark(a, start + n, run - n, 1);
        bin_insert(a, start + n, run - n);
    }
    a->used_units += n;
    *off = (uint64_t)start << a->shift;
    return 0;
}

void alloc_put(alloc_t *a, uint64_t off, uint64_t len)
{
    uint32_t u, n, start, run, t;

    assert(a != NULL);
    if (len == 0 || len > alloc_capacity(a) || (off & ((UINT64_C(1) << a->shift) - 1)) != 0 ||
        (off >> a->shift) >= a->nunits)
        goto bad;
    u = (uint32_t)(off >> a->shift);
    n = len_units(a, len);
    if (n > a->nunits - u || a->tag[u] != tag_make(n, 0) || a->tag[u + n - 1] != tag_make(n, 0))
        goto bad;

    a->used_units -= n;
    run_mark(a, u, n, 1);
    start = u;
    run = n;
    if (u > 0 && tag_is_free(a->tag[u - 1])) {
        t = tag_len(a->tag[u - 1]);
        start = u - t;
        bin_remove(a, start, t);
        run += t;
    }
    if (u + n < a->nunits && tag_is_free(a->tag[u + n])) {
        t = tag_len(a->tag[u + n]);
        bin_remove(a, u + n, t);
        run += t;
    }
    run_mark(a, start, run, 1);
    bin_insert(a, start, run);
    return;

bad:
    assert(!"alloc_put: run not allocated");
}

/* The last free run is found from the tag of the arena's last unit in O(1); the claimed run
 * splits it into a free head (when the run does not start it), the run, and a free tail. */
int alloc_claim(alloc_t *a, uint64_t off, uint64_t len)
{
    uint32_t u, n, last, start, run;

    if (len == 0 || len > alloc_capacity(a) || (off & ((UINT64_C(1) << a->shift) - 1)) != 0 ||
        (off >> a->shift) >= a->nunits)
        return -EINVAL;
    u = (uint32_t)(off >> a->shift);
    n = len_units(a, len);
    last = a->tag[a->nunits - 1];
    if (!tag_is_free(last) || n > a->nunits - u)
        return -EINVAL;
    run = tag_len(last);
    start = a->nunits - run;
    if (u < start)
        return -EINVAL;
    bin_remove(a, start, run);
    if (u > start) {
        run_mark(a, start, u - start, 1);
        bin_insert(a, start, u - start);
    }
    run_mark(a, u, n, 0);
    if (u + n < a->nunits) {
        run_mark(a, u + n, a->nunits - u - n, 1);
        bin_insert(a, u + n, a->nunits - u - n);
    }
    a->used_units += n;
    return 0;
}

uint64_t alloc_footprint(const alloc_t *a, uint64_t len)
{
    uint64_t mask = (UINT64_C(1) << a->shift) - 1;

    if (len > UINT64_MAX - mask)
        return UINT64_MAX; /* not representable: saturate */
    return (len + mask) & ~mask;
}

uint64_t alloc_capacity(const alloc_t *a)
{
    return (uint64_t)a->nunits << a->shift;
}

uint64_t alloc_used(const alloc_t *a)
{
    return a->used_units << a->shift;
}

/* O(runs in the highest non-empty bin): only that bin can hold the longest run. */
uint64_t alloc_largest_free(const alloc_t *a)
{
    uint32_t u, len, best = 0;

    if (a->nonempty == 0)
        return 0;
    for (u = a->head[floor_log2(a->nonempty)]; u != ALLOC_NIL; u = a->next[u]) {
        len = tag_len(a->tag[u]);
        if (len > best)
            best = len;
    }
    return (uint64_t)best << a->shift;
}

uint32_t alloc_free_runs(const alloc_t *a)
{
    return a->free_runs;
}

int alloc_check(const alloc_t *a)
{
    uint64_t *starts, used = 0;
    uint32_t u, len, b, e, p, t, nfree = 0, listed = 0;
    int prev_free = 0, rc = -1;

    starts = calloc(((size_t)a->nunits + 63) / 64, sizeof *starts);
    if (starts == NULL)
        return -1;

    /* Walk the runs by their tags; remember where the free ones start. */
    for (u = 0; u < a->nunits; u += len) {
        t = a->tag[u];
        len = tag_len(t);
        if (len > a->nunits - u || a->tag[u + len - 1] != t)
            goto out;
        if (tag_is_free(t)) {
            if (prev_free)
                goto out; /* not coalesced */
            starts[u / 64] |= UINT64_C(1) << (u % 64);
            nfree++;
        } else {
            used += len;
        }
        prev_free = tag_is_free(t);
    }
    if (used != a->used_units || nfree != a->free_runs)
        goto out;

    /* Every list entry must be a distinct free run of its bin's size class. */
    for (b = 0; b < ALLOC_BINS; b++) {
        if (((a->nonempty >> b) & 1u) != (a->head[b] != ALLOC_NIL))
            goto out;
        for (p = ALLOC_NIL, e = a->head[b]; e != ALLOC_NIL; p = e, e = a->next[e]) {
            if (e >= a->nunits || (starts[e / 64] & (UINT64_C(1) << (e % 64))) == 0)
                goto out; /* not a free run start, or listed twice */
            starts[e / 64] &= ~(UINT64_C(1) << (e % 64));
            if (a->prev[e] != p || floor_log2(tag_len(a->tag[e])) != b)
                goto out;
            listed++;
        }
    }
    if (listed != nfree)
        goto out;
    rc = 0;
out:
    free(starts);
    return rc;
}
