/*
 * store.c - chunk storage semantics over index.c and ram.c (see store.h): lookups, saves and
 * commits, eviction, pins, status. The loads, the disk tier's side and the verifications are in
 * store_io.c; what both share is store_internal.h.
 *
 * Design notes:
 *   - A chunk's bytes are copied once, from the received ZeroMQ frame into the arena, on the
 *     thread pool together with their checksum (or written there by a shared-memory client and
 *     only hashed there); the loop moves no payload bytes. A save is two steps on the loop with
 *     the thread pool between them: at intake every chunk to be stored gets its extent (the
 *     eviction happens here, with the chain's stored predecessors pinned so that it can never
 *     take them), then, once every csum is known, the chain is published in order exactly as a
 *     synchronous save would have placed it - a chunk stored by someone else meanwhile is
 *     EXISTS and its extent is freed, the NOSPACE rule holds, a declared parent that appeared
 *     meanwhile is linked. A chunk is invisible until it is published.
 *   - Lifetime: only this file and store_io.c pin and free entries (store_pin/store_unpin). A
 *     pinned entry is never evicted, reclaimed from disk nor removed; one whose every copy is
 *     lost while it is pinned (a failed checksum, a failed flush, a failed verification) stays
 *     in the index as absent and leaves it with its last pin.
 *   - Eviction scans at most STORE_VICTIM_SCAN leaves from the cold end per victim, so a large
 *     crowd of leased leaves costs bounded work; past it the chunk is NOSPACE. With the disk
 *     tier, a tail that is only in RAM is dropped rather than waited for (store.h, the policy);
 *     the cleaner (store_io.c) keeps that rare: the dirty FIFO here lists what it may write,
 *     and a chunk it is writing can be spilled into the arena's write headroom (any chunk of
 *     the list of writes in flight, tail or not: it stays readable until it is on disk). The
 *     RAM tier's bytes are the arena's less the spilled ones (tier_used).
 *   - All-ranks lookups walk the index's rank groups: one probe per chunk for every rank.
 *   - Counting: ram.hits/misses keep their meaning (chunks asked by lookups and loads, found in
 *     the index - any tier - or not); disk.hits counts load chunks served from the disk tier
 *     (a verified read), disk.misses loads that missed RAM and that the disk
 *     could not serve (absent, failed checksum, cancelled).
 *   - Status: plain structs (store_ram_stats, store_disk_stats); stats.c renders them. The
 *     leased count is O(1) (the index's lease FIFO, pruned by store_tick).
 * Threads: loop thread only; the copies and checksums run in ingest.c's jobs over extents that
 *     belong to the save until it is published.
 */
#include "store_internal.h"

#include "ingest.h"
#include "log.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static unsigned cpu_workers(const config_t *cfg)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (cfg->server.cpu_workers > 0)
        return cfg->server.cpu_workers;
    return n > 0 ? (unsigned)n : 1;
}

unsigned store_pool_threads(const config_t *cfg)
{
    unsigned n = cpu_workers(cfg);

    /* the disk tier's long jobs besides its reads: the flush, and (0.2.9) the periodic
     * checkpoint and the drops file's writer; each may hang with its disk */
    if (cfg->disk.enabled)
        n += cfg->disk.max_reads_in_flight + 3;
    return n;
}

int store_new(const config_t *cfg, ns_table_t *nst, store_t **out)
{
    store_t *s = calloc(1, sizeof *s);
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->nst = nst;
    s->cfg = cfg;
    s->rec = (store_ram_recovery_t){.path = "cold", .reason = "disabled"};
    s->workers = cpu_workers(cfg);
    s->ix = index_new();
    if (s->ix == NULL) {
        rc = -ENOMEM;
        goto fail_index;
    }
    /* With the disk tier the arena holds, beyond the RAM tier, the chunks evicted while their
     * write is in flight: at most the disk's two batches of write_buffer_bytes. */
    s->ram_cap = cfg->ram.capacity_bytes;
    rc = ram_open(
        &(ram_opts_t){.path = cfg->ram.arena_path,
                      .group = cfg->ram.arena_group,
                      .capacity =
                          s->ram_cap + (cfg->disk.enabled ? 2 * cfg->disk.write_buffer_bytes : 0),
                      .prefault = cfg->ram.prefault,
                      .reattach = cfg->ram.reattach && !cfg->cold_start},
        &s->ram, &s->ram_why);
    if (rc != 0)
        goto fail_ram;
    if (ram_replace_error(s->ram) != 0)
        log_warn("ram_arena",
                 "path=%s error=\"%s\" action=truncate_in_place (no new arena file could be "
                 "made: clients still mapping the previous arena may read zeros or fault)",
                 ram_path(s->ram), strerror(-ram_replace_error(s->ram)));
    /* with ram.reattach the file outlives the daemon, whichever way it stops */
    if (cfg->ram.reattach)
        ram_keep(s->ram);
    *out = s;
    return 0;

fail_ram:
    index_destroy(&s->ix);
fail_index:
    free(s);
    return rc;
}

void store_destroy(store_t **ps)
{
    store_t *s = *ps;

    if (s == NULL)
        return;
    disk_destroy(&s->disk);
    drops_destroy(&s->drops);
    journal_close(&s->journal, true);
    while (s->limbo != NULL) { /* every holder returned its pins before (server_free) */
        index_entry_t *e = s->limbo;
        s->limbo = e->lru_next;
        index_entry_free(e);
    }
    index_destroy(&s->ix);
    ram_destroy(&s->ram);
    free(s->relink);
    free(s->pf);
    free(s->pf_seen);
    free(s->seen);
    free(s);
    *ps = NULL;
}

void store_tick(store_t *s, uint64_t now_ms)
{
    index_prune_leases(s->ix, now_ms);
    store__read_stall_check(s);
    if (!s->closing)
        store__ram_trim(s, now_ms); /* what a re-attach brought beyond ram_cap, once written */
    if (s->journal != NULL && !s->closing &&
        journal_records(s->journal) >
            JOURNAL_COMPACT_FACTOR * s->ram_chunks + JOURNAL_COMPACT_FLOOR)
        store__journal_compact(s, false);
}

/* --- lookups --- */

/* The hit prefix of h; its chunks from ahead_from on that are only on disk are read ahead. */
static uint32_t prefix(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       size_t n, bool touch, uint32_t ahead_from)
{
    uint16_t r = ns_store_rank(ns, rank);
    uint32_t hit = 0;

    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;
        index_entry_t *e;
        memcpy(&k, &h[i], sizeof k); /* the hash list may be unaligned in the frame */
        e = index_find(s->ix, ns->id, r, &k);
        if (e == NULL || store__absent(e))
            break;
        if (touch)
            store__touch(s, e);
        if (i >= ahead_from && store__prefetchable(s, e))
            store__prefetch(s, e, false);
        hit++;
    }
    return hit;
}

static void lease_prefix(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                         uint32_t hit, uint64_t now_ms)
{
    uint16_t r = ns_store_rank(ns, rank);

    for (uint32_t i = 0; i < hit; i++) {
        kvt_wire_hash_t k;
        index_entry_t *e;
        memcpy(&k, &h[i], sizeof k);
        e = index_find(s->ix, ns->id, r, &k);
        if (e != NULL) /* (gone since the walk: nothing to lease) */
            index_lease(s->ix, e, now_ms, s->cfg->ram.lease_ms);
    }
}

uint32_t store_lookup(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                      bool lease, uint64_t now_ms, uint32_t ahead_from)
{
    uint32_t hit = prefix(s, ns, rank, h, n, true, ahead_from);

    store__prefetch_pump(s);
    if (lease)
        lease_prefix(s, ns, rank, h, hit, now_ms);
    s->st.hits += hit;
    s->st.misses += n - hit;
    return hit;
}

/* The entry of rank r in group g, when it is present. */
static index_entry_t *group_rank(const index_group_t *g, uint16_t r)
{
    index_entry_t *e = g != NULL && r < g->nslots ? g->slot[r] : NULL;

    return e != NULL && !store__absent(e) ? e : NULL;
}

/* Whether a present entry needs more of an all-ranks walk than its group's clock: a leaf (its
 * place in the LRU), dirty and not yet touched since (the cleaner's second chance, INDEX_F_REF),
 * or not in the arena (read-ahead). */
static bool walk_looks(unsigned f)
{
    return (f & INDEX_F_LRU) || (f & (INDEX_F_DIRTY | INDEX_F_REF)) == INDEX_F_DIRTY ||
           !(f & (INDEX_F_RAM | INDEX_F_WBUF));
}

/*
 * One index probe per chunk serves every rank, and the walk reads the group, not the entries:
 * the group's copy of each rank's flags says which are present (index.h, struct index_group),
 * and one group clock touches them all (index_touch_group). Only the entries that need more than
 * their clock are read and written: the leaves, which move in the LRU (one per rank at the end
 * of a chain), the dirty ones (INDEX_F_REF) and those only on disk (read-ahead). Before 0.2.13
 * the walk touched every rank's entry, and the 8 ranks' cache misses (the first read of each
 * entry's flags, perf annotate) were most of its cost: about 20 us of 25 for 400 chunks x 8 ranks,
 * against 5 us for one rank. Tried and not kept (README, "Staged reads, and all-ranks lookups"):
 * prefetching the entries of the chunks ahead (at distance 1, 0.2.4, and 4, 0.2.13: no gain) and
 * entries laid out in one 64-byte-aligned line.
 */
uint32_t store_lookup_all(store_t *s, const ns_t *ns, const kvt_wire_hash_t *h, size_t n,
                          bool lease, uint64_t now_ms, uint32_t ahead_from, uint32_t *rank_hits)
{
    uint16_t ranks = ns->replicated ? 1 : ns->world, alive = ranks;
    uint32_t min = UINT32_MAX, nseen = 0;

    for (uint16_t r = 0; r < ranks; r++)
        rank_hits[r] = UINT32_MAX; /* still walking */
    for (size_t i = 0; i < n && alive > 0; i++) {
        kvt_wire_hash_t k;
        index_group_t *g;
        const uint16_t *gf;
        memcpy(&k, &h[i], sizeof k);
        g = index_find_group(s->ix, ns->id, &k);
        gf = g != NULL ? index_group_flags(g) : NULL;
        if (g != NULL)
            index_touch_group(s->ix, g);
        for (uint16_t r = 0; r < ranks; r++) {
            uint16_t f = g != NULL && r < g->nslots ? gf[r] : 0;
            index_entry_t *e;
            if (rank_hits[r] != UINT32_MAX)
                continue;
            if (store__absent_flags(f)) {
                rank_hits[r] = (uint32_t)i;
                alive--;
                continue;
            }
            if (!walk_looks(f))
                continue; /* the group's clock is its touch */
            e = g->slot[r];
            assert(e->flags == f);
            store__touch(s, e);
            if (nseen < s->pf_cap && store__prefetchable(s, e))
                s->pf_seen[nseen++] = (prefetch_seen_t){.e = e, .i = (uint32_t)i};
        }
    }
    for (uint16_t r = 0; r < ranks; r++) {
        if (rank_hits[r] == UINT32_MAX)
            rank_hits[r] = (uint32_t)n;
        if (rank_hits[r] < min)
            min = rank_hits[r];
    }
    for (uint16_t r = ranks; r < ns->world; r++)
        rank_hits[r] = rank_hits[0];
    /* read ahead within the answer (the common prefix): no rank loads past it */
    for (size_t k = 0; k < nseen; k++)
        if (s->pf_seen[k].i >= ahead_from && s->pf_seen[k].i < min)
            store__prefetch(s, s->pf_seen[k].e, false);
    store__prefetch_pump(s);
    for (uint32_t i = 0; lease && i < min; i++) {
        kvt_wire_hash_t k;
        const index_group_t *g;
        memcpy(&k, &h[i], sizeof k);
        g = index_find_group(s->ix, ns->id, &k);
        for (uint16_t r = 0; r < ranks; r++) {
            index_entry_t *e = group_rank(g, r);
            if (e != NULL) /* (gone since the walk: nothing to lease) */
                index_lease(s->ix, e, now_ms, s->cfg->ram.lease_ms);
        }
    }
    s->st.hits += (uint64_t)min * ranks;
    s->st.misses += (uint64_t)(n - min) * ranks;
    return min;
}

void store_load_cost(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                     size_t n, uint64_t now_ms, store_cost_t *out)
{
    *out = (store_cost_t){0};
    for (size_t i = 0; i < n; i++) {
        const index_entry_t *e = store_find(s, ns, rank, &h[i]);
        if (e == NULL || store__absent(e))
            continue;
        if (e->flags & INDEX_F_RAM) { /* also while its write is in flight, or spilled */
            out->ram_bytes += e->len;
            /* held already: leased without a disk copy (eviction cannot take it anyway) */
            if (!index_leased(e, now_ms) || (e->flags & INDEX_F_DISK))
                out->ram_new_bytes += e->len;
        } else if ((e->flags & INDEX_F_DISK) && s->disk != NULL && !s->closing) {
            out->copy_bytes += e->len;
            out->disk_reads++;
        }
    }
}

/* Calls fn for the chunks of the prefix h[0..hit) of rank (or of every rank: KVT_RANK_ALL, one
 * probe per chunk for all of them: the index's rank group). */
static void prefix_each(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        uint32_t hit, void (*fn)(index_entry_t *e, void *arg), void *arg)
{
    uint16_t ranks = ns->replicated ? 1 : ns->world;

    for (uint32_t i = 0; i < hit; i++) {
        kvt_wire_hash_t k;
        memcpy(&k, &h[i], sizeof k);
        if (rank == KVT_RANK_ALL) {
            const index_group_t *g = index_find_group(s->ix, ns->id, &k);
            for (uint16_t r = 0; g != NULL && r < ranks && r < g->nslots; r++)
                if (g->slot[r] != NULL)
                    fn(g->slot[r], arg);
        } else {
            index_entry_t *e = index_find(s->ix, ns->id, ns_store_rank(ns, rank), &k);
            if (e != NULL)
                fn(e, arg);
        }
    }
}

/* The hashes one request has counted (store_lease_cost): a client may name a chunk more than
 * once in a request (a prefix of chained hashes never does), and each must be charged once. At
 * most server.max_chunks_per_request (65536) hashes: 3 MiB of table at the most, kept. */
struct store_seen {
    kvt_wire_hash_t h;
    uint32_t gen;
};

/* Starts a request of n hashes: false when the table cannot be had (then every repeat counts
 * again: the charge errs high, for this client only). */
static bool seen_begin(store_t *s, size_t n)
{
    uint64_t cap = s->seen_cap ? s->seen_cap : 64;

    while (cap < 2 * (uint64_t)n)
        cap <<= 1;
    if (cap > (1u << 18))
        return false;
    if (cap != s->seen_cap) {
        struct store_seen *t = calloc(cap, sizeof *t);
        if (t == NULL)
            return false;
        free(s->seen);
        s->seen = t;
        s->seen_cap = (uint32_t)cap;
        s->seen_gen = 0;
    }
    if (++s->seen_gen == 0) { /* wrapped: stamps of 2^32 requests ago would look current */
        memset(s->seen, 0, s->seen_cap * sizeof *s->seen);
        s->seen_gen = 1;
    }
    return true;
}

/* Adds k to the request's set: true when it was not in it. The hashes are a client's, so the
 * slot comes from a hash of them keyed by the table's address (random under ASLR), not from
 * their bytes alone: a client cannot aim its hashes at one probe run. */
static bool seen_add(store_t *s, const kvt_wire_hash_t *k)
{
    uint32_t mask = s->seen_cap - 1;
    uint32_t j = (uint32_t)XXH3_64bits_withSeed(k, sizeof *k, (uint64_t)(uintptr_t)s->seen) & mask;

    for (; s->seen[j].gen == s->seen_gen; j = (j + 1) & mask)
        if (memcmp(&s->seen[j].h, k, sizeof *k) == 0)
            return false;
    s->seen[j].h = *k;
    s->seen[j].gen = s->seen_gen;
    return true;
}

struct lease_acc {
    index_t *ix;
    uint64_t now_ms;
    uint64_t bytes;
    uint32_t lease_ms;
};

static void lease_cost_cb(index_entry_t *e, void *arg)
{
    struct lease_acc *a = arg;

    /* a lease holds RAM only for a chunk that is in RAM and nowhere else (index_victim) */
    if (!index_leased(e, a->now_ms) && (e->flags & INDEX_F_RAM) && !(e->flags & INDEX_F_DISK))
        a->bytes += e->len;
}

static void lease_cb(index_entry_t *e, void *arg)
{
    struct lease_acc *a = arg;

    index_lease(a->ix, e, a->now_ms, a->lease_ms);
}

uint64_t store_lease_cost(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                          uint32_t hit, uint64_t now_ms)
{
    struct lease_acc a = {.now_ms = now_ms};
    bool dedup = hit > 1 && seen_begin(s, hit);

    for (uint32_t i = 0; i < hit; i++) {
        kvt_wire_hash_t k;
        memcpy(&k, &h[i], sizeof k);
        if (!dedup || seen_add(s, &k))
            prefix_each(s, ns, rank, &k, 1, lease_cost_cb, &a);
    }
    return a.bytes;
}

void store_lease(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, uint32_t hit,
                 uint64_t now_ms)
{
    struct lease_acc a = {.ix = s->ix, .now_ms = now_ms, .lease_ms = s->cfg->ram.lease_ms};

    prefix_each(s, ns, rank, h, hit, lease_cb, &a);
}

size_t store_save_query(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        size_t n, uint8_t *status)
{
    uint16_t r = ns_store_rank(ns, rank);
    size_t wanted = 0;

    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;
        memcpy(&k, &h[i], sizeof k);
        if (index_find(s->ix, ns->id, r, &k) != NULL) {
            status[i] = KVT_CHUNK_EXISTS;
        } else {
            status[i] = KVT_CHUNK_WANTED;
            wanted++;
        }
    }
    return wanted;
}

/* --- tiers and eviction --- */

/* The dirty FIFO and the list of writes in flight share an entry's dirty_prev/dirty_next (an
 * entry is on one of them at most): a list is its head and tail. */
static void link_append(index_entry_t **head, index_entry_t **tail, index_entry_t *e)
{
    e->dirty_next = NULL;
    e->dirty_prev = *tail;
    if (*tail != NULL)
        (*tail)->dirty_next = e;
    else
        *head = e;
    *tail = e;
}

static void link_remove(index_entry_t **head, index_entry_t **tail, index_entry_t *e)
{
    if (e->dirty_prev != NULL)
        e->dirty_prev->dirty_next = e->dirty_next;
    else
        *head = e->dirty_next;
    if (e->dirty_next != NULL)
        e->dirty_next->dirty_prev = e->dirty_prev;
    else
        *tail = e->dirty_prev;
    e->dirty_prev = e->dirty_next = NULL;
}

void store__dirty_add(store_t *s, index_entry_t *e)
{
    if (s->disk == NULL || !(e->flags & INDEX_F_RAM) ||
        (e->flags & (INDEX_F_DIRTY | INDEX_F_DISK | INDEX_F_WBUF | INDEX_F_BAD | INDEX_F_LIMBO)))
        return;
    index_flags_set(e, INDEX_F_DIRTY);
    link_append(&s->dirty_head, &s->dirty_tail, e);
    s->dirty_bytes += e->len;
}

void store__dirty_del(store_t *s, index_entry_t *e)
{
    if (!(e->flags & INDEX_F_DIRTY))
        return;
    link_remove(&s->dirty_head, &s->dirty_tail, e);
    index_flags_clear(e, INDEX_F_DIRTY | INDEX_F_REF);
    s->dirty_bytes -= e->len;
}

void store__dirty_requeue(store_t *s, index_entry_t *e)
{
    link_remove(&s->dirty_head, &s->dirty_tail, e);
    link_append(&s->dirty_head, &s->dirty_tail, e);
    index_flags_clear(e, INDEX_F_REF);
}

/* A touched dirty chunk is marked, not moved: the cleaner moves it to the tail when it reaches
 * it (second chance, store__clean_ahead), so a lookup of 400 chunks x 8 ranks writes 3,200 flags
 * instead of relinking 3,200 list nodes and their neighbours. */
void store__touch(store_t *s, index_entry_t *e)
{
    index_touch(s->ix, e);
    if (e->flags & INDEX_F_DIRTY)
        index_flags_set(e, INDEX_F_REF);
}

void store__ram_release(store_t *s, index_entry_t *e)
{
    store__dirty_del(s, e);
    store__journal_del(s, e);
    ram_free(s->ram, e->off, e->len);
    s->stored_bytes -= e->len;
    s->ram_chunks--;
    index_ram_clear(s->ix, e);
    index_flags_clear(e, INDEX_F_PREFETCHED | INDEX_F_PF_CHAIN); /* read ahead, never loaded */
}

static void seg_unlink(store_t *s, index_entry_t *e)
{
    if (e->seg_prev != NULL) {
        e->seg_prev->seg_next = e->seg_next;
    } else {
        void **head = disk_seg_user(s->disk, e->dseg);
        if (head != NULL)
            *head = e->seg_next;
    }
    if (e->seg_next != NULL)
        e->seg_next->seg_prev = e->seg_prev;
    e->seg_prev = e->seg_next = NULL;
}

void store__disk_forget(store_t *s, index_entry_t *e)
{
    seg_unlink(s, e);
    index_flags_clear(e, INDEX_F_DISK);
    e->dseg = 0;
    s->dk.chunks--;
    store__dirty_add(s, e); /* a RAM copy is dirty again */
}

void store__drop(store_t *s, index_entry_t *e)
{
    ns_t *ns = ns_get(s->nst, e->ns);

    if (e->flags & INDEX_F_RAM)
        store__ram_release(s, e);
    if (e->flags & INDEX_F_DISK)
        store__disk_forget(s, e);
    if (e->flags & INDEX_F_WBUF)
        s->dk.wbuf--; /* its extent stays lent; the write's commit frees it */
    if (e->nchildren > 0) {
        s->dk.orphaned += e->nchildren;
        index_detach_children(s->ix, e);
    }
    if (ns != NULL) {
        ns->chunks--;
        ns->bytes -= e->len;
    }
    index_remove(s->ix, e);
}

/* The bytes the RAM tier holds: the arena's less the spilled chunks'. */
static uint64_t tier_used(const store_t *s)
{
    return ram_used(s->ram) - s->spill_foot;
}

static void spill(store_t *s, index_entry_t *e)
{
    index_spill(s->ix, e);
    s->spill_bytes += e->len;
    s->spill_foot += ram_footprint(s->ram, e->len);
    s->st.evictions++;
}

void store__spill_done(store_t *s, index_entry_t *e)
{
    store__spill_end(s, e);
    if ((e->flags & INDEX_F_DISK) && e->pins == 0) /* a lease keeps its disk copy (index.h) */
        store__ram_release(s, e);
}

void store__spill_end(store_t *s, index_entry_t *e)
{
    if (!(e->flags & INDEX_F_SPILL))
        return;
    s->spill_bytes -= e->len;
    s->spill_foot -= ram_footprint(s->ram, e->len);
    index_unspill(s->ix, e);
}

void store__wb_add(store_t *s, index_entry_t *e)
{
    link_append(&s->wb_head, &s->wb_tail, e);
}

void store__wb_del(store_t *s, index_entry_t *e)
{
    link_remove(&s->wb_head, &s->wb_tail, e);
}

/* The oldest chunk being written that can be spilled (no holder but its write, no lease, not
 * spilled yet), looking at most STORE_SPILL_SCAN of them; NULL when there is none. It need not
 * be a tail: until its write commits it stays readable, and then it is on disk. */
static index_entry_t *spill_candidate(const store_t *s, uint64_t now_ms)
{
    unsigned n = 0;

    for (index_entry_t *e = s->wb_head; e != NULL && n < STORE_SPILL_SCAN; e = e->dirty_next, n++)
        if (!(e->flags & (INDEX_F_SPILL | INDEX_F_LIMBO | INDEX_F_BAD)) && e->pins == 1 &&
            !index_leased(e, now_ms))
            return e;
    return NULL;
}

/* The nearest clean ancestor of c still in RAM that nobody pins (a lease does not hold a chunk
 * with a disk copy in RAM: index.h) and that was used no later than clock_max, looking at most
 * STORE_SPILL_SCAN ancestors up; NULL when none. Releasing it costs nothing and frees its RAM at
 * once. */
static index_entry_t *clean_ancestor(const index_entry_t *c, uint64_t clock_max)
{
    unsigned n = 0;

    for (index_entry_t *p = c->parent; p != NULL && n < STORE_SPILL_SCAN; p = p->parent, n++)
        if ((p->flags & (INDEX_F_RAM | INDEX_F_DISK | INDEX_F_SPILL)) ==
                (INDEX_F_RAM | INDEX_F_DISK) &&
            p->pins == 0 && index_clock(p) <= clock_max)
            return p;
    return NULL;
}

/*
 * An allocation of len bytes failed with nothing left to evict. A chunk that fits the RAM tier
 * finds no room only because what is left is held: leased or pinned chunks (and their ancestors,
 * which wait for those tails), or reservations. That is reported as such (ram.nospace_held and a
 * log line at most once a second), apart from a chunk larger than the RAM tier. Returns -ENOSPC.
 */
static int nospace(store_t *s, uint64_t len, uint64_t now_ms)
{
    s->nospace_held = len <= s->ram_cap;
    if (s->nospace_held && (s->nospace_log_ms == 0 || now_ms >= s->nospace_log_ms + 1000)) {
        s->nospace_log_ms = now_ms;
        log_warn("ram_nospace",
                 "cause=held bytes=%" PRIu64 " used_bytes=%" PRIu64 " capacity_bytes=%" PRIu64
                 " chunks=%" PRIu64 " nospace_held=%" PRIu64
                 " hint=\"leases, pins and reservations hold the arena (status server.sessions, "
                 "ram.session_held_share, ram.max_held_share)\"",
                 len, tier_used(s), s->ram_cap, s->ram_chunks, s->st.nospace_held + 1);
    }
    return -ENOSPC;
}

int store__alloc(store_t *s, uint64_t len, uint64_t now_ms, bool allow_drop, uint64_t *off)
{
    uint64_t foot = ram_footprint(s->ram, len);

    s->nospace_held = false;

    for (;;) {
        index_entry_t *v;
        bool tier_full = tier_used(s) + foot > s->ram_cap;

        if (!tier_full) {
            int rc = ram_alloc(s->ram, len, off);
            if (rc != -ENOSPC) {
                store__journal_flush(s); /* the extents given up, before one is reused */
                return rc;
            }
        }
        v = index_victim(s->ix, now_ms, STORE_VICTIM_SCAN);
        if (s->disk != NULL && (v == NULL || !(v->flags & (INDEX_F_DISK | INDEX_F_WBUF)))) {
            /* the coldest tail would be dropped: a chunk being written (while the RAM tier is
             * what is full) or a tail with a disk copy costs nothing, prefer them */
            index_entry_t *c = tier_full ? spill_candidate(s, now_ms) : NULL;
            if (c == NULL)
                c = index_victim_with(s->ix, now_ms, STORE_VICTIM_SCAN, INDEX_F_DISK);
            if (c != NULL)
                v = c;
        }
        if (v != NULL && s->disk != NULL && !(v->flags & INDEX_F_DISK)) {
            /* v would be spilled (its write is in flight) or dropped (no clean tail within the
             * scan): a clean ancestor of it used no more recently gives its RAM instead, at once
             * and with nothing lost (the cleaner writes a chain from its head, so a chain cut by
             * the cleaner is clean bytes that are no tail); a prefix used since (shared, hot) is
             * not taken. The nearest one: its disk copy is the newest of them (segments are
             * reclaimed oldest first, and a disk-only chunk reclaimed cuts its chain), and the
             * chain's head stays in RAM */
            index_entry_t *a = clean_ancestor(v, index_clock(v));
            if (a != NULL)
                v = a;
        }
        if (v == NULL)
            return nospace(s, len, now_ms);
        if (v->flags & INDEX_F_DISK) {
            s->st.evictions++;
            s->dk.demoted_clean++;
            store__ram_release(s, v);
            continue;
        }
        if (v->flags & INDEX_F_WBUF) {
            if (!tier_full)
                return -ENOSPC; /* the arena is full of writes in flight (fragmented) */
            spill(s, v);        /* its commit frees it */
            continue;
        }
        if (s->disk != NULL && !allow_drop)
            return -ENOSPC;
        s->st.evictions++;
        if (s->disk != NULL)
            s->dk.refused++; /* the disk could not take it in time: saves never wait */
        store__drop(s, v);
    }
}

bool store__ram_over(const store_t *s)
{
    return tier_used(s) > s->ram_cap;
}

void store__ram_trim(store_t *s, uint64_t now_ms)
{
    bool released = false;

    while (s->disk != NULL && tier_used(s) > s->ram_cap) {
        index_entry_t *v = index_victim_with(s->ix, now_ms, STORE_VICTIM_SCAN, INDEX_F_DISK);

        if (v == NULL) {
            /* the tails are dirty: a clean ancestor of the coldest (store__alloc) */
            v = index_victim(s->ix, now_ms, STORE_VICTIM_SCAN);
            v = v != NULL ? clean_ancestor(v, index_clock(v)) : NULL;
        }
        if (v == NULL || !(v->flags & INDEX_F_RAM) || (v->flags & INDEX_F_WBUF))
            break;
        s->st.evictions++;
        s->dk.demoted_clean++;
        store__ram_release(s, v);
        released = true;
    }
    if (released)
        store__journal_flush(s); /* the extents given up, before one is reused */
}

/* --- invalidation --- */

void store__limbo_free(store_t *s, index_entry_t *e)
{
    store__dirty_del(s, e); /* never on it (limbo_add), and a freed entry must never be */
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        s->limbo = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    if (e->flags & INDEX_F_RAM) {
        store__journal_del(s, e); /* written at the drop already: harmless, and in order */
        ram_free(s->ram, e->off, e->len);
        s->stored_bytes -= e->len;
        s->ram_chunks--;
    }
    index_entry_free(e);
}

/* Takes pinned e out of the index and every tier but RAM, and keeps it in the limbo list (its
 * LRU links, free once it is unlinked). A chunk being written keeps INDEX_F_WBUF: its write
 * holds a pin, and its commit (store_io.c) only drops that pin. */
static void limbo_add(store_t *s, index_entry_t *e)
{
    ns_t *ns = ns_get(s->nst, e->ns);

    store__spill_end(s, e);
    /* out of the index now: a restart must not bring it back, even before its last unpin */
    if (e->flags & INDEX_F_RAM)
        store__journal_del(s, e);
    if (e->flags & INDEX_F_DISK)
        store__disk_forget(s, e); /* which makes a RAM copy dirty again: */
    store__dirty_del(s, e);       /* only now off the dirty list: the limbo is never written */
    if (e->flags & INDEX_F_WBUF)
        s->dk.wbuf--;
    if (ns != NULL) {
        ns->chunks--;
        ns->bytes -= e->len;
    }
    index_unlink(s->ix, e);
    index_flags_set(e, INDEX_F_LIMBO);
    e->lru_prev = NULL;
    e->lru_next = s->limbo;
    if (s->limbo != NULL)
        s->limbo->lru_prev = e;
    s->limbo = e;
}

struct ns_collect {
    uint32_t ns;
    persist_key_t *keys;
    size_t n;
};

static void collect_ns(const index_entry_t *e, void *arg)
{
    struct ns_collect *c = arg;

    if (e->ns == c->ns)
        c->keys[c->n++] = (persist_key_t){.ns = e->ns, .rank = e->rank, .hash = e->hash};
}

/* Removes every chunk of ns from the index (pinned ones into the limbo), counting in *out.
 * 0 or -ENOMEM (nothing removed). */
static int drop_ns_chunks(store_t *s, ns_t *ns, store_drop_t *out)
{
    struct ns_collect c = {.ns = ns->id};

    *out = (store_drop_t){0};
    c.keys = malloc((index_count(s->ix) + 1) * sizeof *c.keys);
    if (c.keys == NULL)
        return -ENOMEM;
    index_foreach(s->ix, collect_ns, &c);
    for (size_t i = 0; i < c.n; i++) {
        index_entry_t *e = index_find(s->ix, c.keys[i].ns, c.keys[i].rank, &c.keys[i].hash);

        if (e == NULL)
            continue;
        out->chunks++;
        out->bytes += e->len;
        out->ram_chunks += (e->flags & INDEX_F_RAM) != 0;
        out->disk_chunks += (e->flags & (INDEX_F_DISK | INDEX_F_WBUF)) != 0;
        /* its successors are chunks of ns too, dropped in turn: no orphans to count */
        index_detach_children(s->ix, e);
        if (e->pins > 0) {
            out->pinned++;
            limbo_add(s, e);
        } else {
            store__drop(s, e);
        }
    }
    free(c.keys);
    store__journal_flush(s);
    return 0;
}

int store_evict_ns(store_t *s, ns_t *ns, store_drop_t *out)
{
    return drop_ns_chunks(s, ns, out);
}

int store_drop_ns(store_t *s, ns_t *ns, store_drop_t *out)
{
    if (drop_ns_chunks(s, ns, out) != 0)
        return -ENOMEM;
    if (s->disk != NULL) {
        uint64_t seg, off;
        disk_log_end(s->disk, &seg, &off);
        out->tombstone_error = drops_add(s->drops, ns->model, ns->revision, ns->fingerprint, seg,
                                         off, s->last_seq > s->done_seq ? s->last_seq : 0);
    }
    return 0;
}

int store_drops_written(store_t *s, void (*cb)(void *arg, int rc), void *arg)
{
    return s->drops != NULL ? drops_when_written(s->drops, cb, arg) : -ENODEV;
}

/* --- saves and commits --- */

/* Chain state while chunks of one save are placed in order. */
typedef struct {
    index_entry_t *prev; /* stored predecessor of the next chunk, or NULL */
    bool declared;       /* the next chunk has a known predecessor hash */
    bool full;           /* a chunk got NOSPACE: the rest could only be orphans */
} chain_t;

static void chain_start(store_t *s, const ns_t *ns, uint16_t r, const kvt_wire_hash_t *parent,
                        chain_t *c)
{
    c->prev = parent != NULL ? index_find(s->ix, ns->id, r, parent) : NULL;
    c->declared = parent != NULL;
    c->full = false;
}

/* A chunk of the chain is not stored (skipped or refused): its successors are orphans. */
static void chain_gap(chain_t *c)
{
    c->prev = NULL;
    c->declared = true;
}

/* Publishes the extent (off, len), already holding the chunk's bytes, as chunk k with its
 * csum. Returns STORED, or NOSPACE when the index cannot grow (the extent is then freed). */
static uint8_t place(store_t *s, ns_t *ns, uint16_t r, const kvt_wire_hash_t *k, uint64_t off,
                     uint64_t len, uint64_t csum, chain_t *c)
{
    index_entry_t *e =
        index_add(s->ix, ns->id, r, k, c->prev, c->prev == NULL && c->declared, off, len);

    if (e == NULL) {
        ram_free(s->ram, off, len);
        s->st.nospace++;
        c->full = true;
        return KVT_CHUNK_NOSPACE;
    }
    e->csum = csum;
    ns->chunks++;
    ns->bytes += len;
    s->stored_bytes += len;
    s->ram_chunks++;
    s->st.stored++;
    store__dirty_add(s, e);
    store__journal_add(s, ns, e);
    c->prev = e;
    c->declared = true;
    return KVT_CHUNK_STORED;
}

/* An existing chunk k: touch it and continue the chain from it. NULL when not stored. */
static index_entry_t *chain_existing(store_t *s, const ns_t *ns, uint16_t r,
                                     const kvt_wire_hash_t *k, chain_t *c)
{
    index_entry_t *e = index_find(s->ix, ns->id, r, k);

    if (e != NULL) {
        store__touch(s, e);
        c->prev = e;
        c->declared = true;
    }
    return e;
}

/* The first step of placing chunk h of a chain: a chunk stored already is EXISTS (touched; the
 * chain continues from it), one without bytes is SKIPPED (a gap: its successors are orphans).
 * Returns true when the chunk is to be placed; false with *status set otherwise. */
static bool chain_next(store_t *s, const ns_t *ns, uint16_t r, const kvt_wire_hash_t *k,
                       bool has_bytes, chain_t *c, uint8_t *status)
{
    if (chain_existing(s, ns, r, k, c) != NULL) {
        *status = KVT_CHUNK_EXISTS;
        return false;
    }
    if (!has_bytes) {
        *status = KVT_CHUNK_SKIPPED;
        chain_gap(c);
        return false;
    }
    return true;
}

#define PUT_NOSPACE 1u /* refused at intake: no room */

/* One chunk of a save or commit in flight. */
typedef struct {
    uint64_t off; /* its extent, UINT64_MAX when none */
    uint64_t len;
    uint64_t csum;
    uint8_t pre; /* 0, or PUT_NOSPACE */
} put_chunk_t;

/* A save or commit in flight: from intake to publication. */
typedef struct put put_t;
struct put {
    store_t *s;
    put_t *prev, *next; /* the puts in flight, in start order (the newest: s->puts_tail) */
    put_t *after;       /* the put in flight whose last chunk is this one's declared parent */
    put_t *waiters;     /* the puts waiting for this one to publish (their after) */
    put_t *next_waiter;
    bool ready;   /* its checksums are known: it publishes once after has */
    bool has_job; /* counted in s->jobs */
    uint32_t ns;
    uint64_t drops; /* the namespace's operator drops when it began (ns_t.drops) */
    uint16_t rank;  /* the store rank */
    bool has_parent;
    kvt_wire_hash_t parent;
    size_t n;
    uint8_t *status; /* the caller's */
    store_done_cb done;
    void *arg;
    uint64_t held; /* footprints counted in ingest_bytes */
    index_entry_t **pins;
    size_t npins;
    ingest_item_t *items;
    size_t nitems;
    size_t *item_of; /* chunk -> its item */
    kvt_wire_hash_t *hashes;
    put_chunk_t c[];
};

static put_t *put_new(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                      const kvt_wire_hash_t *h, size_t n, uint8_t *status, store_done_cb done,
                      void *arg)
{
    size_t sz = sizeof(put_t) + n * sizeof(put_chunk_t);
    put_t *p = malloc(sz);

    if (p == NULL)
        return NULL;
    *p = (put_t){.s = s,
                 .ns = ns->id,
                 .drops = ns->drops,
                 .rank = ns_store_rank(ns, rank),
                 .has_parent = parent != NULL,
                 .n = n,
                 .status = status,
                 .done = done,
                 .arg = arg};
    p->pins = malloc((n + 1) * sizeof *p->pins);
    p->items = malloc(n * sizeof *p->items);
    p->item_of = malloc(n * sizeof *p->item_of);
    p->hashes = malloc(n * sizeof *p->hashes);
    if (p->pins == NULL || p->items == NULL || p->item_of == NULL || p->hashes == NULL) {
        free(p->pins);
        free(p->items);
        free(p->item_of);
        free(p->hashes);
        free(p);
        return NULL;
    }
    if (parent != NULL)
        memcpy(&p->parent, parent, sizeof p->parent);
    memcpy(p->hashes, h, n * sizeof *h); /* the hash list may be unaligned in the frame */
    return p;
}

static void put_free(put_t *p)
{
    free(p->pins);
    free(p->items);
    free(p->item_of);
    free(p->hashes);
    free(p);
}

/* Pins e (a predecessor the chain may continue from) until the put is published. */
static void put_pin(put_t *p, index_entry_t *e)
{
    if (e == NULL)
        return;
    store_pin(p->s, e);
    p->pins[p->npins++] = e;
}

/* Chunk i's extent (off, len) is to be checksummed (src: copied from there first). */
static void put_item(put_t *p, size_t i, uint64_t off, uint64_t len, const void *src)
{
    store_t *s = p->s;

    p->c[i].off = off;
    p->item_of[i] = p->nitems;
    p->items[p->nitems++] =
        (ingest_item_t){.dst = ram_ptr(s->ram, off), .src = src, .len = len, .csum = 0};
    p->held += ram_footprint(s->ram, len);
}

/* Chunk i at off is published with the checksum its writer gave: nothing to hash. */
static void put_known(put_t *p, size_t i, uint64_t off, uint64_t len, uint64_t csum)
{
    p->c[i].off = off;
    p->c[i].csum = csum;
    p->item_of[i] = SIZE_MAX;
    p->held += ram_footprint(p->s->ram, len);
}

/* The chain is published in order once every csum is known (or at once with nothing to hash). */
static void put_publish_one(put_t *p)
{
    store_t *s = p->s;
    ns_t *ns = ns_get(s->nst, p->ns);
    chain_t c;

    if (ns == NULL) { /* the namespace went meanwhile: nothing of it is stored */
        for (size_t i = 0; i < p->n; i++) {
            if (p->c[i].off != UINT64_MAX)
                ram_free(s->ram, p->c[i].off, p->c[i].len);
            p->c[i].off = UINT64_MAX;
            p->c[i].pre = PUT_NOSPACE;
        }
        p->has_parent = false;
    } else if (ns->drops != p->drops) {
        /* an operator dropped the namespace while this was in flight: what it carries was
         * written before the drop, which is to remove it, so it is not stored (SKIPPED, or
         * EXISTS for a chunk saved again since) */
        for (size_t i = 0; i < p->n; i++) {
            if (p->c[i].off != UINT64_MAX)
                ram_free(s->ram, p->c[i].off, p->c[i].len);
            p->c[i].off = UINT64_MAX;
        }
    }
    chain_start(s, ns, p->rank, p->has_parent ? &p->parent : NULL, &c);
    for (size_t i = 0; i < p->n; i++) {
        put_chunk_t *pc = &p->c[i];
        bool has = pc->off != UINT64_MAX;

        if (has && p->item_of[i] != SIZE_MAX)
            pc->csum = p->items[p->item_of[i]].csum;
        if (pc->pre == PUT_NOSPACE && chain_existing(s, ns, p->rank, &p->hashes[i], &c) == NULL) {
            p->status[i] = KVT_CHUNK_NOSPACE; /* counted at intake */
            c.full = true;
            continue;
        }
        if (pc->pre == PUT_NOSPACE) {
            p->status[i] = KVT_CHUNK_EXISTS;
            continue;
        }
        if (!chain_next(s, ns, p->rank, &p->hashes[i], has, &c, &p->status[i])) {
            /* stored by another client meanwhile: the extent is not needed */
            if (has)
                ram_free(s->ram, pc->off, pc->len);
            continue;
        }
        if (c.full) {
            ram_free(s->ram, pc->off, pc->len);
            p->status[i] = KVT_CHUNK_NOSPACE;
            s->st.nospace++;
            continue;
        }
        p->status[i] = place(s, ns, p->rank, &p->hashes[i], pc->off, pc->len, pc->csum, &c);
    }
    s->ingest_bytes -= p->held;
    for (size_t i = 0; i < p->npins; i++)
        store_unpin(s, p->pins[i]);
    store__journal_flush(s); /* on file before the client is told STORED */
    p->done(p->arg);
    put_free(p);
    store__clean_ahead(s);
}

/*
 * Publication order across puts. A chain saved in several requests pipelined at depth (a
 * zero-copy engine committing chunk i+1 while chunk i is being hashed, a frames client with
 * saves in flight) declares as parent the last chunk of a put still in flight. Hashed on the
 * thread pool in parallel, the later put could finish first: its chunk would find no parent and
 * be stored as an orphan, the first chunk eviction takes. So a put whose declared parent is the
 * last chunk of a put in flight (of the same namespace and rank: the newest such, among the
 * last PUT_AFTER_SCAN puts) publishes after that one, whenever its own checksums are known.
 */
#define PUT_AFTER_SCAN 64u

static void put_link(put_t *p)
{
    store_t *s = p->s;
    unsigned n = 0;

    for (put_t *q = s->puts_tail; q != NULL && n < PUT_AFTER_SCAN && p->has_parent;
         q = q->prev, n++) {
        if (q->ns == p->ns && q->rank == p->rank && q->n > 0 &&
            memcmp(&q->hashes[q->n - 1], &p->parent, sizeof p->parent) == 0) {
            p->after = q;
            p->next_waiter = q->waiters;
            q->waiters = p;
            break;
        }
    }
    p->prev = s->puts_tail;
    if (s->puts_tail != NULL)
        s->puts_tail->next = p;
    s->puts_tail = p;
}

static void put_unlink(put_t *p)
{
    store_t *s = p->s;

    if (p->prev != NULL)
        p->prev->next = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        s->puts_tail = p->prev;
}

/* p's checksums are known: it publishes now unless it waits for its after; then the puts
 * that waited for it and are ready, in turn (a work list, not a recursion). */
static void put_publish(put_t *p)
{
    store_t *s = p->s;
    put_t *todo = p;

    p->ready = true;
    if (p->after != NULL)
        return; /* published when its after is */
    p->next_waiter = NULL;
    while (todo != NULL) {
        put_t *x = todo, *w = x->waiters;
        bool job = x->has_job;
        todo = x->next_waiter;
        put_unlink(x);
        put_publish_one(x); /* frees x */
        while (w != NULL) {
            put_t *nw = w->next_waiter;
            w->after = NULL;
            if (w->ready) {
                w->next_waiter = todo;
                todo = w;
            } else {
                w->next_waiter = NULL;
            }
            w = nw;
        }
        if (job)
            store__job_done(s);
    }
}

static void put_ingested(void *arg)
{
    put_publish(arg);
}

/* Hands the put's items to the thread pool, or publishes at once when there are none. */
static void put_start(put_t *p)
{
    store_t *s = p->s;

    s->ingest_bytes += p->held;
    put_link(p);
    if (p->nitems == 0) { /* nothing to hash: every csum is known (or nothing is stored) */
        put_publish(p);
        return;
    }
    if (ingest_run(s->loop, p->items, p->nitems, s->workers, put_ingested, p) == 0) {
        s->jobs++;
        p->has_job = true;
        return;
    }
    /* no memory for the jobs: the chunks are refused, never hashed here */
    for (size_t i = 0; i < p->n; i++) {
        if (p->c[i].off == UINT64_MAX)
            continue;
        ram_free(s->ram, p->c[i].off, p->c[i].len);
        p->c[i].off = UINT64_MAX;
        p->c[i].pre = PUT_NOSPACE;
        s->st.nospace++;
    }
    put_publish(p);
}

int store_save(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
               const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *payloads, uint64_t now_ms,
               uint8_t *status, store_done_cb done, void *arg, store_spent_t *spent)
{
    put_t *p = put_new(s, ns, rank, parent, h, n, status, done, arg);
    bool full = false;

    if (p == NULL)
        return -ENOMEM;
    if (parent != NULL)
        put_pin(p, index_find(s->ix, ns->id, p->rank, &p->parent));
    for (size_t i = 0; i < n; i++) {
        index_entry_t *e = index_find(s->ix, ns->id, p->rank, &p->hashes[i]);
        uint64_t off;

        p->c[i] = (put_chunk_t){.off = UINT64_MAX, .len = payloads[i].len};
        if (e != NULL) { /* EXISTS: the chain continues from it, so it must stay */
            store__touch(s, e);
            put_pin(p, e);
            continue;
        }
        if (payloads[i].len == 0)
            continue; /* SKIPPED */
        if (full || store__alloc(s, payloads[i].len, now_ms, true, &off) != 0) {
            p->c[i].pre = PUT_NOSPACE;
            s->st.nospace++;
            s->st.nospace_held += s->nospace_held; /* the cause of the first refusal */
            full = true;
            continue;
        }
        put_item(p, i, off, payloads[i].len, payloads[i].data);
    }
    if (spent != NULL)
        spent->ingest_bytes += p->held;
    put_start(p);
    return 0;
}

int store_commit(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                 const kvt_wire_hash_t *h, size_t n, const uint64_t *off, const uint64_t *len,
                 const uint8_t *csums, uint8_t *status, store_done_cb done, void *arg,
                 store_spent_t *spent)
{
    put_t *p = put_new(s, ns, rank, parent, h, n, status, done, arg);

    for (size_t i = 0; i < n; i++)
        if (off[i] != UINT64_MAX)
            s->resv_foot -= ram_footprint(s->ram, len[i]); /* the store's from here */
    if (p == NULL) {
        for (size_t i = 0; i < n; i++)
            if (off[i] != UINT64_MAX)
                ram_free(s->ram, off[i], len[i]);
        return -ENOMEM;
    }
    if (parent != NULL)
        put_pin(p, index_find(s->ix, ns->id, p->rank, &p->parent));
    for (size_t i = 0; i < n; i++) {
        p->c[i] = (put_chunk_t){.off = UINT64_MAX, .len = len[i]};
        if (off[i] != UINT64_MAX && csums != NULL)
            put_known(p, i, off[i], len[i], kvt_get_u64(csums + 8 * i));
        else if (off[i] != UINT64_MAX)
            put_item(p, i, off[i], len[i], NULL);
        else
            put_pin(p, index_find(s->ix, ns->id, p->rank, &p->hashes[i]));
    }
    if (spent != NULL)
        spent->ingest_bytes += p->held;
    put_start(p);
    return 0;
}

void store_pin(store_t *s, index_entry_t *e)
{
    e->pins++;
    if (!(e->flags & INDEX_F_PINRAM) && store__in_arena(e)) {
        index_flags_set(e,
                        INDEX_F_PINRAM); /* held bytes no eviction can take (read-ahead's room) */
        s->pinned_foot += ram_footprint(s->ram, e->len);
    }
}

void store_unpin(store_t *s, index_entry_t *e)
{
    if (--e->pins > 0)
        return;
    if (e->flags & INDEX_F_PINRAM) {
        index_flags_clear(e, INDEX_F_PINRAM);
        s->pinned_foot -= ram_footprint(s->ram, e->len);
    }
    if ((e->flags & (INDEX_F_SPILL | INDEX_F_WBUF)) == INDEX_F_SPILL)
        store__spill_done(s, e); /* written while someone held it */
    if (e->flags & INDEX_F_LIMBO)
        store__limbo_free(s, e);
    else if (store__absent(e))
        store__drop(s, e);
}

int store_reserve(store_t *s, uint64_t len, index_entry_t *keep, uint64_t now_ms, uint64_t *off)
{
    int rc;

    if (keep != NULL)
        store_pin(s, keep);
    rc = store__alloc(s, len, now_ms, true, off);
    if (keep != NULL)
        store_unpin(s, keep);
    if (rc == 0)
        s->resv_foot += ram_footprint(s->ram, len);
    if (rc != 0) {
        s->st.nospace++;
        s->st.nospace_held += s->nospace_held;
    }
    return rc == 0 ? 0 : -ENOSPC;
}

uint64_t store_footprint(const store_t *s, uint64_t len)
{
    return ram_footprint(s->ram, len);
}

void store_unreserve(store_t *s, uint64_t off, uint64_t len)
{
    s->resv_foot -= ram_footprint(s->ram, len);
    ram_free(s->ram, off, len);
}

index_entry_t *store_find(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    kvt_wire_hash_t k;

    memcpy(&k, h, sizeof k);
    return index_find(s->ix, ns->id, ns_store_rank(ns, rank), &k);
}

uint64_t store_chunk_off(const store_chunk_t *c)
{
    return c->off;
}

uint64_t store_chunk_len(const store_chunk_t *c)
{
    return c->len;
}

uint64_t store_chunk_csum(const store_chunk_t *c)
{
    return c->csum;
}

const void *store_load(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       uint64_t *len)
{
    index_entry_t *e = store_find(s, ns, rank, h);

    if (e == NULL || !store__in_arena(e)) {
        s->st.misses++;
        return NULL;
    }
    store__touch(s, e);
    s->st.hits++;
    if (!(e->flags & INDEX_F_RAM))
        s->dk.hits++;
    *len = e->len;
    return ram_ptr(s->ram, e->off);
}

struct lease_walk {
    const store_t *s;
    uint64_t now_ms;
    store_lease_fn fn;
    void *arg;
};

static void lease_walk_cb(const index_entry_t *e, void *arg)
{
    struct lease_walk *w = arg;
    const ns_t *ns;

    if (!index_leased(e, w->now_ms) || (ns = ns_get(w->s->nst, e->ns)) == NULL)
        return;
    w->fn(w->arg, ns, e->rank, &e->hash, e->lease_until_ms - w->now_ms);
}

void store_leases(const store_t *s, uint64_t now_ms, store_lease_fn fn, void *arg)
{
    struct lease_walk w = {.s = s, .now_ms = now_ms, .fn = fn, .arg = arg};

    index_foreach(s->ix, lease_walk_cb, &w);
}

int store_lease_restore(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        uint64_t now_ms, uint32_t remaining_ms)
{
    index_entry_t *e = store_find(s, ns, rank, h);

    if (e == NULL || store__absent(e) || index_leased(e, now_ms) || remaining_ms == 0)
        return -ENOENT;
    index_lease(s->ix, e, now_ms, remaining_ms);
    return 0;
}

const char *store_arena_path(const store_t *s)
{
    return ram_path(s->ram);
}

uint64_t store_arena_bytes(const store_t *s)
{
    return ram_file_bytes(s->ram);
}

uint32_t store_arena_gen(const store_t *s)
{
    return ram_gen(s->ram);
}

void store_foreach(const store_t *s, void (*fn)(const index_entry_t *e, void *arg), void *arg)
{
    index_foreach(s->ix, fn, arg);
}

const store_stats_t *store_stats(const store_t *s)
{
    return &s->st;
}

void store_ram_stats(const store_t *s, uint64_t now_ms, store_ram_stats_t *out)
{
    *out = (store_ram_stats_t){.capacity_bytes = s->ram_cap,
                               .arena_bytes = ram_file_bytes(s->ram),
                               .huge_page_bytes = ram_huge_page(s->ram),
                               .demoting_bytes = s->spill_bytes,
                               .used_bytes = tier_used(s),
                               .resident_bytes = ram_resident(s->ram),
                               .stored_bytes = s->stored_bytes,
                               .chunks = s->ram_chunks,
                               .index_chunks = index_count(s->ix),
                               .counts = s->st,
                               .leased_chunks = index_leased_count(s->ix, now_ms),
                               .free_runs = ram_free_runs(s->ram),
                               .largest_free_bytes = ram_largest_free(s->ram),
                               .arena_path = ram_path(s->ram),
                               .dirty_bytes = s->dirty_bytes,
                               .ingest_bytes = s->ingest_bytes,
                               .promoting_bytes = s->promo_bytes,
                               .clean_target_bytes = store__clean_target(s),
                               .verifies = s->verifies,
                               .verify_drops = s->verify_drops,
                               .arena_gen = ram_gen(s->ram),
                               .journal_bytes = s->journal ? journal_bytes(s->journal) : 0,
                               .journal_path = s->journal ? journal_path(s->journal) : "",
                               .recovery = s->rec};
}

void store_disk_stats(const store_t *s, store_disk_stats_t *out)
{
    *out = (store_disk_stats_t){.enabled = s->cfg->disk.enabled, .counts = s->dk};
    if (s->disk == NULL) {
        out->state = s->cfg->disk.enabled ? STORE_DISK_UNAVAILABLE : STORE_DISK_OFF;
        out->error = s->disk_error;
        return;
    }
    disk_stats(s->disk, &out->tier);
    out->state = out->tier.degraded ? STORE_DISK_DEGRADED : STORE_DISK_OK;
}

struct check_acc {
    uint64_t pinned; /* footprint of the INDEX_F_PINRAM entries */
    uint64_t bytes;
    uint64_t footprint;
    uint64_t spill; /* footprint of the spilled chunks */
    uint64_t dirty; /* RAM, no disk copy, no write pending: what the dirty FIFO must hold */
    const ram_t *ram;
};

static void check_sum(const index_entry_t *e, void *arg)
{
    struct check_acc *a = arg;

    if (e->flags & INDEX_F_PINRAM)
        a->pinned += ram_footprint(a->ram, e->len);
    if (!(e->flags & INDEX_F_RAM))
        return;
    if (!(e->flags & (INDEX_F_DISK | INDEX_F_WBUF | INDEX_F_BAD | INDEX_F_LIMBO)))
        a->dirty += e->len;
    a->bytes += e->len;
    a->footprint += ram_footprint(a->ram, e->len);
    if (e->flags & INDEX_F_SPILL)
        a->spill += ram_footprint(a->ram, e->len);
}

int store_check(const store_t *s)
{
    struct check_acc a = {.ram = s->ram};

    if (index_check(s->ix) != 0)
        return -1;
    index_foreach(s->ix, check_sum, &a);
    for (const index_entry_t *e = s->limbo; e != NULL; e = e->lru_next)
        check_sum(e, &a);
    if (a.bytes != s->stored_bytes ||
        a.footprint + s->ingest_bytes + s->promo_bytes != ram_used(s->ram))
        return -1;
    if (s->disk != NULL && a.dirty != s->dirty_bytes)
        return -1;
    if (a.spill != s->spill_foot || a.pinned != s->pinned_foot)
        return -1;
    for (const index_entry_t *e = s->wb_head; e != NULL; e = e->dirty_next)
        if (!(e->flags & INDEX_F_WBUF) || (e->dirty_next == NULL && s->wb_tail != e))
            return -1;
    {
        uint64_t listed = 0;
        for (const index_entry_t *e = s->dirty_head; e != NULL; e = e->dirty_next)
            listed += e->len;
        if (listed != s->dirty_bytes)
            return -1;
    }
    if (s->disk != NULL && disk_check(s->disk) != 0)
        return -1;
    return ram_used(s->ram) <= ram_capacity(s->ram) ? 0 : -1;
}
