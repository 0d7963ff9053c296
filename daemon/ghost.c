/*
 * ghost.c - the ghost table: a bounded set of declined chunks' fingerprints (see ghost.h).
 *
 * Design. buckets x GHOST_WAYS uint64_t slots in one array. A bucket is kept packed from its
 * first slot, newest first, so a lookup stops at the first empty slot and an add is one memmove
 * of at most seven slots: the table never rehashes, never probes into a neighbour and never
 * allocates. A set-associative table rather than an exact LRU over the whole table: the memory
 * is one array of fingerprints (no list links), the cost of every call is one cache line, and
 * the replacement rule is still easy to state and to test (per bucket, oldest decline first).
 *
 * Threads: loop thread only. Invariants: in every bucket the used slots come first and are
 * distinct and non-zero; entries = used slots of all buckets <= capacity.
 */
#include "ghost.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct ghost {
    uint64_t *slot; /* nbuckets * GHOST_WAYS, 0 = empty */
    uint64_t mask;  /* nbuckets - 1 */
    ghost_stats_t st;
};

uint64_t ghost_capacity_for(uint64_t entries)
{
    uint64_t buckets = 1;

    if (entries == 0)
        return 0;
    if (entries > GHOST_ENTRIES_MAX)
        entries = GHOST_ENTRIES_MAX;
    while (buckets * 2 * GHOST_WAYS <= entries)
        buckets *= 2;
    return buckets * GHOST_WAYS;
}

ghost_t *ghost_new(uint64_t entries)
{
    ghost_t *g = calloc(1, sizeof *g);
    uint64_t cap = ghost_capacity_for(entries);

    if (g == NULL)
        return NULL;
    if (cap > 0) {
        g->slot = calloc(cap, sizeof *g->slot);
        if (g->slot == NULL) {
            free(g);
            return NULL;
        }
        g->mask = cap / GHOST_WAYS - 1;
    }
    g->st.capacity = cap;
    return g;
}

void ghost_destroy(ghost_t **pg)
{
    ghost_t *g = *pg;

    if (g == NULL)
        return;
    free(g->slot);
    free(g);
    *pg = NULL;
}

uint64_t ghost_fp(const kvt_wire_hash_t *h)
{
    uint64_t fp = XXH3_64bits(h->b, sizeof h->b);

    return fp == 0 ? 1 : fp;
}

static uint64_t *bucket_of(const ghost_t *g, uint64_t fp)
{
    return g->slot + (fp & g->mask) * GHOST_WAYS;
}

/* The slot index of fp in bucket b, or -1; *used receives the bucket's used slots. */
static int bucket_find(const uint64_t *b, uint64_t fp, unsigned *used)
{
    unsigned i;
    int at = -1;

    for (i = 0; i < GHOST_WAYS && b[i] != 0; i++)
        if (b[i] == fp)
            at = (int)i;
    *used = i;
    return at;
}

bool ghost_has(const ghost_t *g, uint64_t fp)
{
    unsigned used;

    return g->slot != NULL && bucket_find(bucket_of(g, fp), fp, &used) >= 0;
}

void ghost_add(ghost_t *g, uint64_t fp)
{
    uint64_t *b;
    unsigned used;
    int at;

    if (g->slot == NULL)
        return;
    b = bucket_of(g, fp);
    at = bucket_find(b, fp, &used);
    if (at >= 0) {
        memmove(b + 1, b, (size_t)at * sizeof *b);
        g->st.refreshes++;
    } else {
        if (used == GHOST_WAYS) {
            g->st.evictions++;
            used--; /* the oldest, in the last slot, is overwritten by the shift */
        } else {
            g->st.entries++;
        }
        memmove(b + 1, b, (size_t)used * sizeof *b);
        g->st.inserts++;
    }
    b[0] = fp;
}

bool ghost_remove(ghost_t *g, uint64_t fp)
{
    uint64_t *b;
    unsigned used;
    int at;

    if (g->slot == NULL)
        return false;
    b = bucket_of(g, fp);
    at = bucket_find(b, fp, &used);
    if (at < 0)
        return false;
    memmove(b + at, b + at + 1, (size_t)(used - (unsigned)at - 1) * sizeof *b);
    b[used - 1] = 0;
    g->st.entries--;
    g->st.removals++;
    return true;
}

void ghost_stats(const ghost_t *g, ghost_stats_t *out)
{
    *out = g->st;
}
