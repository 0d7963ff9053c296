/*
 * index.c - chunk index with chain links and a leaf LRU (see index.h).
 *
 * Design: a chained hash table of rank groups keyed by (ns, 16-byte hash); a group holds its
 * ranks' entries by rank. The bucket is chosen from the chunk hash itself (already a strong
 * hash) mixed with ns. Leaves sit in one doubly linked LRU list, head = cold end, tail = hot end.
 * The access clock is a counter, not a time, so ordering is exact and independent of the clock's
 * resolution. Granted leases sit in a FIFO (lease_head = oldest grant = first to expire).
 *
 * Invariants (checked by index_check):
 *   - e->nchildren == number of stored entries whose parent is e == length of e's child list;
 *   - e->ram_kids == number of those children that are RAM-resident;
 *   - e is in the LRU list iff e is RAM-resident and e->ram_kids == 0 (a RAM leaf);
 *   - e->parent, when set, is stored (entries with children are never removed; reclaim first
 *     detaches them with index_detach_children);
 *   - e->group->slot[e->rank] == e, and a group's count is its non-NULL slots (> 0);
 *   - e is in the lease FIFO iff INDEX_F_LEASE, and nleased is the FIFO's length.
 * Threads: loop thread only.
 */
#include "index.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_MIN_BUCKETS 1024u
#define INDEX_SORTED_INSERT_SCAN 64u

struct index {
    index_group_t **buckets;
    uint64_t nbuckets; /* power of two */
    uint64_t count;    /* entries */
    uint64_t ngroups;
    uint64_t clock;
    index_entry_t *lru_head;   /* cold */
    index_entry_t *lru_tail;   /* hot */
    index_entry_t *lease_head; /* oldest grant */
    index_entry_t *lease_tail;
    uint64_t nleased; /* entries in the lease FIFO */
};

static uint64_t key_hash(uint32_t ns, const kvt_wire_hash_t *h)
{
    uint64_t x;

    memcpy(&x, h->b, sizeof x);
    x ^= (uint64_t)ns * 0x9e3779b97f4a7c15ull;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static bool key_eq(const index_group_t *g, uint32_t ns, const kvt_wire_hash_t *h)
{
    return g->ns == ns && memcmp(g->hash.b, h->b, KVT_HASH_BYTES) == 0;
}

static index_group_t **bucket_of(const index_t *ix, uint32_t ns, const kvt_wire_hash_t *h)
{
    return &ix->buckets[key_hash(ns, h) & (ix->nbuckets - 1)];
}

index_t *index_new(void)
{
    index_t *ix = calloc(1, sizeof *ix);

    if (ix == NULL)
        return NULL;
    ix->nbuckets = INDEX_MIN_BUCKETS;
    ix->buckets = calloc(ix->nbuckets, sizeof *ix->buckets);
    if (ix->buckets == NULL) {
        free(ix);
        return NULL;
    }
    return ix;
}

void index_destroy(index_t **pix)
{
    index_t *ix = *pix;

    if (ix == NULL)
        return;
    for (uint64_t b = 0; b < ix->nbuckets; b++) {
        index_group_t *g = ix->buckets[b];
        while (g != NULL) {
            index_group_t *next = g->hnext;
            for (uint16_t r = 0; r < g->nslots; r++)
                free(g->slot[r]);
            free(g);
            g = next;
        }
    }
    free(ix->buckets);
    free(ix);
    *pix = NULL;
}

uint64_t index_count(const index_t *ix)
{
    return ix->count;
}

index_group_t *index_find_group(const index_t *ix, uint32_t ns, const kvt_wire_hash_t *h)
{
    index_group_t *g = *bucket_of(ix, ns, h);

    while (g != NULL && !key_eq(g, ns, h))
        g = g->hnext;
    return g;
}

index_entry_t *index_find(const index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    const index_group_t *g = index_find_group(ix, ns, h);

    return g != NULL && rank < g->nslots ? g->slot[rank] : NULL;
}

/* --- leaf LRU --- */

static void lru_unlink(index_t *ix, index_entry_t *e)
{
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        ix->lru_head = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    else
        ix->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
    index_flags_clear(e, INDEX_F_LRU);
}

/* Inserts e before `at` (NULL = at the hot end). */
static void lru_insert_before(index_t *ix, index_entry_t *e, index_entry_t *at)
{
    index_flags_set(e, INDEX_F_LRU);
    if (at == NULL) {
        e->lru_prev = ix->lru_tail;
        e->lru_next = NULL;
        if (ix->lru_tail != NULL)
            ix->lru_tail->lru_next = e;
        else
            ix->lru_head = e;
        ix->lru_tail = e;
        return;
    }
    e->lru_next = at;
    e->lru_prev = at->lru_prev;
    if (at->lru_prev != NULL)
        at->lru_prev->lru_next = e;
    else
        ix->lru_head = e;
    at->lru_prev = e;
}

/* A new leaf that was not just accessed (an exposed parent): place it by its clock, scanning a
 * bounded number of leaves from the cold end; past the bound it lands there (approximate). */
static void lru_insert_sorted(index_t *ix, index_entry_t *e)
{
    index_entry_t *at = ix->lru_head;
    unsigned n = 0;

    uint64_t clock = index_clock(e);

    while (at != NULL && index_clock(at) < clock && n++ < INDEX_SORTED_INSERT_SCAN)
        at = at->lru_next;
    lru_insert_before(ix, e, at);
}

/* --- table --- */

static void table_grow(index_t *ix)
{
    uint64_t nb = ix->nbuckets * 2;
    index_group_t **nbk = calloc(nb, sizeof *nbk);

    if (nbk == NULL)
        return; /* keep the longer chains; correctness does not depend on the load factor */
    for (uint64_t b = 0; b < ix->nbuckets; b++) {
        index_group_t *g = ix->buckets[b];
        while (g != NULL) {
            index_group_t *next = g->hnext;
            uint64_t i = key_hash(g->ns, &g->hash) & (nb - 1);
            g->hnext = nbk[i];
            nbk[i] = g;
            g = next;
        }
    }
    free(ix->buckets);
    ix->buckets = nbk;
    ix->nbuckets = nb;
}

/* The group of (ns, h) with a slot for rank, created or grown; NULL on allocation failure. */
static index_group_t *group_for(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    index_group_t **pp, *g, *ng;
    uint16_t n;

    if (ix->ngroups >= ix->nbuckets)
        table_grow(ix);
    pp = bucket_of(ix, ns, h);
    while (*pp != NULL && !key_eq(*pp, ns, h))
        pp = &(*pp)->hnext;
    g = *pp;
    if (g != NULL && rank < g->nslots)
        return g;
    n = (uint16_t)(rank + 1);
    ng = realloc(g, sizeof *ng + n * (sizeof ng->slot[0] + sizeof(uint16_t)));
    if (ng == NULL)
        return NULL;
    if (g == NULL) {
        ng->hnext = NULL;
        ng->clock = 0;
        ng->ns = ns;
        ng->hash = *h;
        ng->nslots = 0;
        ng->count = 0;
        ix->ngroups++;
    }
    /* the flags' copies follow the slots: move them behind the new slots first */
    memmove(&ng->slot[n], &ng->slot[ng->nslots], ng->nslots * sizeof(uint16_t));
    for (uint16_t r = ng->nslots; r < n; r++) {
        ng->slot[r] = NULL;
        ((uint16_t *)(uintptr_t)&ng->slot[n])[r] = 0;
    }
    for (uint16_t r = 0; r < ng->nslots; r++)
        if (ng->slot[r] != NULL)
            ng->slot[r]->group = ng; /* the group moved */
    ng->nslots = n;
    *pp = ng;
    return ng;
}

/* Empties e's slot; the group goes with its last entry. */
static void group_leave(index_t *ix, index_entry_t *e)
{
    index_group_t *g = e->group, **pp;

    g->slot[e->rank] = NULL;
    index_group_flags(g)[e->rank] = 0;
    if (--g->count > 0)
        return;
    pp = bucket_of(ix, g->ns, &g->hash);
    while (*pp != g)
        pp = &(*pp)->hnext;
    *pp = g->hnext;
    ix->ngroups--;
    free(g);
}

static bool in_lru(const index_entry_t *e)
{
    return (e->flags & INDEX_F_LRU) != 0;
}

static bool is_ram(const index_entry_t *e)
{
    return (e->flags & INDEX_F_RAM) != 0;
}

/* A RAM-resident entry that lost its last RAM-resident child rejoins the LRU by its clock. */
static void maybe_leaf(index_t *ix, index_entry_t *p)
{
    if (p != NULL && is_ram(p) && p->ram_kids == 0 && !in_lru(p) && !(p->flags & INDEX_F_SPILL))
        lru_insert_sorted(ix, p);
}

static void child_link(index_t *ix, index_entry_t *parent, index_entry_t *e)
{
    e->parent = parent;
    e->sib_prev = NULL;
    e->sib_next = parent->first_child;
    if (parent->first_child != NULL)
        parent->first_child->sib_prev = e;
    parent->first_child = e;
    parent->nchildren++;
    if (is_ram(e) && parent->ram_kids++ == 0 && in_lru(parent))
        lru_unlink(ix, parent);
}

/* Unlinks e from its parent's child list; the parent may become a RAM leaf. */
static void child_unlink(index_t *ix, index_entry_t *e)
{
    index_entry_t *p = e->parent;

    if (p == NULL)
        return;
    if (e->sib_prev != NULL)
        e->sib_prev->sib_next = e->sib_next;
    else
        p->first_child = e->sib_next;
    if (e->sib_next != NULL)
        e->sib_next->sib_prev = e->sib_prev;
    e->sib_prev = e->sib_next = NULL;
    e->parent = NULL;
    p->nchildren--;
    if (is_ram(e))
        p->ram_kids--;
    maybe_leaf(ix, p);
}

static index_entry_t *add(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                          index_entry_t *parent, bool orphan, bool ram, uint64_t off, uint64_t len)
{
    index_group_t *g;
    index_entry_t *e;

    assert(index_find(ix, ns, rank, h) == NULL);
    assert(parent == NULL || (parent->ns == ns && parent->rank == rank));
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    g = group_for(ix, ns, rank, h);
    if (g == NULL) {
        free(e);
        return NULL;
    }
    g->slot[rank] = e;
    g->count++;
    e->group = g;
    e->ns = ns;
    e->rank = rank;
    e->hash = *h;
    e->off = off;
    e->len = len;
    index_flags_store(e, (uint16_t)((orphan ? INDEX_F_ORPHAN : 0) | (ram ? INDEX_F_RAM : 0)));
    e->clock = ++ix->clock;
    ix->count++;

    if (parent != NULL)
        child_link(ix, parent, e);
    if (!ram)
        return e;
    if (orphan) {
        e->clock = 0;
        lru_insert_before(ix, e, ix->lru_head);
    } else {
        lru_insert_before(ix, e, NULL);
    }
    return e;
}

index_entry_t *index_add(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         index_entry_t *parent, bool orphan, uint64_t off, uint64_t len)
{
    return add(ix, ns, rank, h, parent, orphan, true, off, len);
}

index_entry_t *index_add_cold(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                              index_entry_t *parent, bool orphan, uint64_t len)
{
    return add(ix, ns, rank, h, parent, orphan, false, 0, len);
}

void index_ram_set(index_t *ix, index_entry_t *e, uint64_t off)
{
    assert(!is_ram(e));
    index_flags_set(e, INDEX_F_RAM);
    e->off = off;
    e->clock = ++ix->clock;
    if (e->ram_kids == 0)
        lru_insert_before(ix, e, NULL);
    if (e->parent != NULL && e->parent->ram_kids++ == 0 && in_lru(e->parent))
        lru_unlink(ix, e->parent);
}

void index_ram_clear(index_t *ix, index_entry_t *e)
{
    assert(is_ram(e));
    if (in_lru(e))
        lru_unlink(ix, e);
    index_flags_clear(e, INDEX_F_RAM | INDEX_F_SPILL);
    if (e->parent != NULL) {
        e->parent->ram_kids--;
        maybe_leaf(ix, e->parent);
    }
}

void index_set_parent(index_t *ix, index_entry_t *e, index_entry_t *parent)
{
    assert(e->parent == NULL && parent != e);
    child_link(ix, parent, e);
    index_flags_clear(e, INDEX_F_ORPHAN);
}

void index_detach_children(index_t *ix, index_entry_t *e)
{
    while (e->first_child != NULL) {
        index_entry_t *c = e->first_child;
        child_unlink(ix, c);
        index_flags_set(c, INDEX_F_ORPHAN);
    }
}

void index_spill(index_t *ix, index_entry_t *e)
{
    assert(is_ram(e));
    if (in_lru(e))
        lru_unlink(ix, e);
    index_flags_set(e, INDEX_F_SPILL);
}

void index_unspill(index_t *ix, index_entry_t *e)
{
    index_flags_clear(e, INDEX_F_SPILL);
    maybe_leaf(ix, e);
}

void index_touch(index_t *ix, index_entry_t *e)
{
    e->clock = ++ix->clock;
    if (in_lru(e) && ix->lru_tail != e) {
        lru_unlink(ix, e);
        lru_insert_before(ix, e, NULL);
    }
}

void index_touch_group(index_t *ix, index_group_t *g)
{
    g->clock = ++ix->clock;
}

static void lease_unlink(index_t *ix, index_entry_t *e)
{
    if (!(e->flags & INDEX_F_LEASE))
        return;
    if (e->lease_prev != NULL)
        e->lease_prev->lease_next = e->lease_next;
    else
        ix->lease_head = e->lease_next;
    if (e->lease_next != NULL)
        e->lease_next->lease_prev = e->lease_prev;
    else
        ix->lease_tail = e->lease_prev;
    e->lease_prev = e->lease_next = NULL;
    index_flags_clear(e, INDEX_F_LEASE);
    ix->nleased--;
}

void index_lease(index_t *ix, index_entry_t *e, uint64_t now_ms, uint32_t lease_ms)
{
    if (e->lease_until_ms > now_ms)
        return;
    e->lease_until_ms = now_ms + lease_ms;
    lease_unlink(ix, e); /* an expired lease still in the FIFO */
    index_flags_set(e, INDEX_F_LEASE);
    e->lease_next = NULL;
    e->lease_prev = ix->lease_tail;
    if (ix->lease_tail != NULL)
        ix->lease_tail->lease_next = e;
    else
        ix->lease_head = e;
    ix->lease_tail = e;
    ix->nleased++;
}

void index_prune_leases(index_t *ix, uint64_t now_ms)
{
    while (ix->lease_head != NULL && !index_leased(ix->lease_head, now_ms))
        lease_unlink(ix, ix->lease_head);
}

uint64_t index_leased_count(const index_t *ix, uint64_t now_ms)
{
    uint64_t expired = 0;

    for (const index_entry_t *e = ix->lease_head; e != NULL && !index_leased(e, now_ms);
         e = e->lease_next)
        expired++;
    return ix->nleased - expired;
}

index_entry_t *index_victim_with(const index_t *ix, uint64_t now_ms, unsigned max_scan,
                                 uint16_t flags)
{
    index_entry_t *e = ix->lru_head;

    /* a leased chunk with a disk copy may leave RAM: its lease keeps the disk copy */
    for (unsigned n = 0; e != NULL && n < max_scan; n++, e = e->lru_next)
        if (e->pins == ((e->flags & INDEX_F_WBUF) ? 1u : 0u) &&
            (!index_leased(e, now_ms) || (e->flags & INDEX_F_DISK)) && (e->flags & flags) == flags)
            return e;
    return NULL;
}

index_entry_t *index_victim(const index_t *ix, uint64_t now_ms, unsigned max_scan)
{
    return index_victim_with(ix, now_ms, max_scan, 0);
}

void index_unlink(index_t *ix, index_entry_t *e)
{
    assert(e->nchildren == 0);
    if (in_lru(e))
        lru_unlink(ix, e);
    lease_unlink(ix, e);
    ix->count--;
    child_unlink(ix, e);
    group_leave(ix, e);
    e->group = NULL;
}

void index_entry_free(index_entry_t *e)
{
    free(e);
}

void index_remove(index_t *ix, index_entry_t *e)
{
    index_unlink(ix, e);
    index_entry_free(e);
}

void index_foreach(const index_t *ix, void (*fn)(const index_entry_t *e, void *arg), void *arg)
{
    for (uint64_t b = 0; b < ix->nbuckets; b++)
        for (const index_group_t *g = ix->buckets[b]; g != NULL; g = g->hnext)
            for (uint16_t r = 0; r < g->nslots; r++)
                if (g->slot[r] != NULL)
                    fn(g->slot[r], arg);
}

/* Checks one entry against the whole index (O(entries): test-sized indexes only). */
static int check_entry(const index_t *ix, const index_entry_t *e, uint64_t *leaves)
{
    uint32_t kids = 0, rkids = 0, listed = 0;

    if (e->parent != NULL &&
        index_find(ix, e->parent->ns, e->parent->rank, &e->parent->hash) != e->parent)
        return -1;
    for (uint64_t c = 0; c < ix->nbuckets; c++)
        for (const index_group_t *g = ix->buckets[c]; g != NULL; g = g->hnext)
            for (uint16_t r = 0; r < g->nslots; r++) {
                const index_entry_t *f = g->slot[r];
                kids += f != NULL && f->parent == e;
                rkids += f != NULL && f->parent == e && is_ram(f);
            }
    for (const index_entry_t *f = e->first_child; f != NULL; f = f->sib_next) {
        if (f->parent != e || (f->sib_next != NULL && f->sib_next->sib_prev != f))
            return -1;
        listed++;
    }
    if (kids != e->nchildren || rkids != e->ram_kids || listed != kids)
        return -1;
    if (in_lru(e) != (is_ram(e) && e->ram_kids == 0 && !(e->flags & INDEX_F_SPILL)))
        return -1;
    *leaves += in_lru(e);
    return 0;
}

int index_check(const index_t *ix)
{
    uint64_t n = 0, groups = 0, leaves = 0, lru_len = 0, leased = 0;

    for (uint64_t b = 0; b < ix->nbuckets; b++) {
        for (const index_group_t *g = ix->buckets[b]; g != NULL; g = g->hnext) {
            uint16_t present = 0;
            groups++;
            if ((key_hash(g->ns, &g->hash) & (ix->nbuckets - 1)) != b)
                return -1;
            for (uint16_t r = 0; r < g->nslots; r++) {
                const index_entry_t *e = g->slot[r];
                if (index_group_flags(g)[r] != (e != NULL ? e->flags : 0))
                    return -1; /* a flag written past index_flags_store */
                if (e == NULL)
                    continue;
                present++;
                n++;
                if (e->group != g || e->rank != r || e->ns != g->ns ||
                    memcmp(e->hash.b, g->hash.b, KVT_HASH_BYTES) != 0)
                    return -1;
                if (check_entry(ix, e, &leaves) != 0)
                    return -1;
            }
            if (present == 0 || present != g->count)
                return -1;
        }
    }
    for (const index_entry_t *e = ix->lru_head; e != NULL; e = e->lru_next) {
        if (!in_lru(e) || !is_ram(e) || e->ram_kids != 0)
            return -1;
        if (e->lru_next == NULL && ix->lru_tail != e)
            return -1;
        lru_len++;
    }
    for (const index_entry_t *e = ix->lease_head; e != NULL; e = e->lease_next) {
        if (!(e->flags & INDEX_F_LEASE) || (e->lease_next == NULL && ix->lease_tail != e))
            return -1;
        leased++;
    }
    return n == ix->count && groups == ix->ngroups && leaves == lru_len && leased == ix->nleased
               ? 0
               : -1;
}
