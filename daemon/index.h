/*
 * index.h - the chunk index: (namespace, rank, chunk hash) -> where the chunk's bytes are, plus
 * the chain structure that makes eviction prefix-aware.
 *
 * Every entry knows its predecessor in the prompt chain (parent) and how many stored entries
 * follow it (nchildren). Only entries with no stored successor ("leaves", the tails of chains)
 * are ever evicted, so a chunk whose predecessor is gone cannot arise from eviction. Leaves are
 * kept in one LRU list; when the last child of an entry goes, the entry becomes a leaf and joins
 * the list near its own recency (a bounded sorted insert from the cold end), so the tail of a
 * cold chain is eaten from its end.
 *
 * An entry saved with a declared predecessor that is not stored is an "orphan": it has no parent
 * link, can only be hit once its predecessor is saved again, and joins the LRU at the cold end.
 *
 * Tiers: an entry is RAM-resident (INDEX_F_RAM: off/len in the arena), and/or has a verified
 * copy on disk (INDEX_F_DISK: dseg/doff/dstored/dhdr/dver), and may have a disk write pending
 * (INDEX_F_WBUF: wseq; its bytes are the RAM copy, pinned until the write commits). The leaf LRU
 * holds the *RAM leaves*: RAM-resident entries none of whose children is RAM-resident
 * (ram_kids == 0); RAM eviction takes them in LRU order, so RAM is emptied from chain tails
 * while the chain itself stays in the index. nchildren counts children in any tier: an entry
 * leaves the index only when it has none (the no-orphan rule holds for the index as a whole),
 * or after index_detach_children() turned its children into orphans (the disk tier's reclaim
 * of a whole segment does that; see store.c). With the disk tier off every entry is
 * RAM-resident and ram_kids == nchildren, the single-tier behaviour. Children are kept in a
 * list per parent so that detaching costs O(children).
 *
 * Rank groups: the hash table is keyed by (namespace, chunk hash); each key holds a group with
 * one slot per rank, pointing at that rank's entry. A single-rank probe finds the group and reads
 * its rank's slot; an all-ranks lookup reads every rank of a chunk from one probe (one hash, one
 * bucket walk, one key comparison), so it costs about one rank's lookup plus the reply. A group
 * grows its slots to the highest rank stored and goes with its last entry.
 *
 * The table is chained with a power-of-two bucket array that doubles when the groups outnumber
 * the buckets (a full rehash: the number of entries is bounded by capacity / chunk size, tens of
 * thousands on a large node, so the pause is short: docs/ARCHITECTURE.md).
 *
 * Leases: granted leases sit in one FIFO in grant order, which is expiry order since every lease
 * lasts the same lease_ms; index_prune_leases() drops the expired ones from its head, so
 * counting the leased chunks costs O(1) instead of a walk of every entry.
 *
 * Integrity: every entry keeps the XXH3-64 of its payload (csum), computed off the loop when the
 * chunk was committed, or taken from its disk record at recovery (computed from the verified
 * bytes of a version 1 record). INDEX_F_BAD marks an entry whose bytes failed a verification
 * while it was pinned: it counts as absent and leaves the index with its last pin.
 *
 * The layout of index_entry_t is private to index.c and store.c, the only files (with the
 * index's unit tests) that include this header: every other module holds a chunk as the store's
 * opaque handle, store_chunk_t (store.h), and pins it through the store.
 *
 * Threads: loop thread only. Ownership: the index owns its entries; callers hold borrowed
 * pointers valid until the entry is removed.
 */
#ifndef KVT_INDEX_H
#define KVT_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "kvt_proto.h"

typedef struct index_entry index_entry_t;
typedef struct index_group index_group_t;
struct index_entry {
    index_group_t *group;    /* the group of its (ns, hash): its slot is group->slot[rank] */
    index_entry_t *parent;   /* stored predecessor, or NULL */
    index_entry_t *lru_prev; /* leaf LRU links (valid while nchildren == 0) */
    index_entry_t *lru_next;
    uint64_t clock; /* access clock: larger = more recent */
    /* flags beside clock: a lookup reads the one and writes the other, and at malloc's 16-byte
     * alignment the two then share a cache line (an all-ranks lookup walks 8 entries a chunk) */
    uint16_t flags; /* INDEX_F_* */
    uint16_t rank;
    uint32_t ns;
    uint64_t lease_until_ms; /* pinned by a lookup lease until this time */
    uint64_t off;            /* location in the RAM arena */
    uint64_t len;            /* payload bytes */
    uint32_t nchildren;
    uint32_t pins; /* short-lived pins of the loop (a save in progress) */
    kvt_wire_hash_t hash;
    /* children list (index.c) */
    index_entry_t *first_child;
    index_entry_t *sib_prev;
    index_entry_t *sib_next;
    uint32_t ram_kids; /* RAM-resident children */
    /* disk tier (store.c): the verified copy, and the list of entries of its segment */
    uint16_t dhdr;    /* record header bytes */
    uint32_t dstored; /* record payload bytes */
    uint64_t dseg;    /* segment id (generation), 0 = no disk copy */
    uint64_t doff;    /* record offset in the segment */
    index_entry_t *seg_prev;
    index_entry_t *seg_next;
    uint64_t wseq; /* write-buffer ticket while INDEX_F_WBUF */
    uint64_t csum; /* XXH3-64 (seed 0) of the payload */
    uint8_t dver;  /* the disk record's format version (record.h) */
    /* lease FIFO (index.c): linked while the entry holds a lease granted by index_lease */
    index_entry_t *lease_prev;
    index_entry_t *lease_next;
    void *reading; /* store.c: the disk read in flight for this entry, or NULL */
    /* store.c: the FIFO of dirty RAM chunks (INDEX_F_DIRTY), least recent first, or while the
     * disk write is in flight (INDEX_F_WBUF) the FIFO of chunks being written */
    index_entry_t *dirty_prev;
    index_entry_t *dirty_next;
};

/*
 * The entries of one (ns, hash), by rank: slot[r] for r < nslots (NULL when absent). After the
 * nslots pointers the group keeps a copy of each rank's flags (index_group_flags; 0 for an
 * empty slot), so that an all-ranks lookup reads one group per chunk instead of every rank's
 * entry: on 8 ranks those 8 entries' cache misses were most of its cost. Entry flags are
 * therefore written only through index_flags_set / index_flags_clear, which keep the copy (a
 * direct write is caught by index_check and, in debug builds, by the all-ranks walk).
 * clock is the last all-ranks touch of every entry of the group (index_touch_group): an entry's
 * access clock is the later of its own and its group's (index_clock).
 */
struct index_group {
    index_group_t *hnext; /* hash chain */
    uint64_t clock;       /* index_touch_group */
    uint32_t ns;
    uint16_t nslots;
    uint16_t count; /* entries present */
    kvt_wire_hash_t hash;
    index_entry_t *slot[];
};

/* The copy of slot r's flags is index_group_flags(g)[r], r < g->nslots. */
static inline uint16_t *index_group_flags(const index_group_t *g)
{
    return (uint16_t *)(uintptr_t)&g->slot[g->nslots];
}

/* The only writers of e->flags: the entry and its group's copy together. */
static inline void index_flags_store(index_entry_t *e, uint16_t flags)
{
    e->flags = flags;
    if (e->group != NULL) /* in the index; an unlinked (limbo) entry has no group */
        index_group_flags(e->group)[e->rank] = flags;
}

static inline void index_flags_set(index_entry_t *e, unsigned bits)
{
    index_flags_store(e, (uint16_t)(e->flags | bits));
}

static inline void index_flags_clear(index_entry_t *e, unsigned bits)
{
    index_flags_store(e, (uint16_t)(e->flags & ~bits));
}

/* The entry's access clock: the later of its own touch and its group's all-ranks touch. */
static inline uint64_t index_clock(const index_entry_t *e)
{
    return e->group != NULL && e->group->clock > e->clock ? e->group->clock : e->clock;
}

#define INDEX_F_ORPHAN 0x1u
#define INDEX_F_RAM 0x2u     /* bytes in the arena at off */
#define INDEX_F_DISK 0x4u    /* verified copy on disk at dseg/doff */
#define INDEX_F_WBUF 0x8u    /* the disk write of ticket wseq is pending (RAM copy pinned for it) */
#define INDEX_F_LRU 0x10u    /* in the leaf LRU (internal) */
#define INDEX_F_LIMBO 0x20u  /* unlinked (index_unlink) and kept by the store until unpinned */
#define INDEX_F_LEASE 0x40u  /* in the lease FIFO (internal) */
#define INDEX_F_BAD 0x80u    /* failed a verification while pinned: absent, dropped at last unpin */
#define INDEX_F_DIRTY 0x100u /* store.c: RAM-resident, no disk copy: in the dirty FIFO */
/* Evicted while its disk write is in flight (index_spill): still RAM-resident and readable,
 * but out of the leaf LRU and out of the RAM tier's capacity until the write commits. */
#define INDEX_F_SPILL 0x200u
/* store.c: touched since it joined the dirty FIFO; the cleaner gives it a second chance (moves it
 * to the tail) instead of every touch moving it there. */
#define INDEX_F_REF 0x400u
/* store_io.c: queued for read-ahead (a lookup found it only on disk) */
#define INDEX_F_PFQ 0x800u
/* store_io.c: promoted by a read-ahead and not loaded since: its first load counts as served
 * by the disk (disk.hits, disk.prefetch_hits) */
#define INDEX_F_PREFETCHED 0x1000u
/* store.c: pinned while in the arena: its footprint is in the store's pinned_foot */
#define INDEX_F_PINRAM 0x2000u
/* store_io.c: with INDEX_F_PREFETCHED, read ahead along its chain (chain_read_ahead), not for a
 * lookup: its first load slides the chain's window on */
#define INDEX_F_PF_CHAIN 0x4000u
/* store_io.c: a re-verification (RELEASE CORRUPT) of its arena bytes is queued or running: a
 * second one is not queued (one job per chunk, whatever clients ask) */
#define INDEX_F_VERIFYING 0x8000u

typedef struct index index_t;

/* Returns NULL on allocation failure. */
index_t *index_new(void);
/* Frees every entry (their RAM is the caller's to free first) and sets *ix to NULL. */
void index_destroy(index_t **ix);

uint64_t index_count(const index_t *ix);

index_entry_t *index_find(const index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h);

/* The group of (ns, h), or NULL when no rank holds that chunk: one probe for every rank. */
index_group_t *index_find_group(const index_t *ix, uint32_t ns, const kvt_wire_hash_t *h);

/*
 * Adds an entry that must not exist yet. parent, when not NULL, is the stored predecessor
 * (same ns and rank); orphan says a predecessor was declared but is not stored. The entry
 * becomes the most recent leaf (an orphan: the least recent). Returns the entry or NULL on
 * allocation failure.
 */
index_entry_t *index_add(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         index_entry_t *parent, bool orphan, uint64_t off, uint64_t len);

/* Same for an entry that is not RAM-resident (recovered from disk). */
index_entry_t *index_add_cold(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                              index_entry_t *parent, bool orphan, uint64_t len);

/* e becomes RAM-resident at off (a promotion) and the most recent entry. */
void index_ram_set(index_t *ix, index_entry_t *e, uint64_t off);

/* e stops being RAM-resident (a demotion); its parent may become a RAM leaf. The caller frees
 * the RAM first. */
void index_ram_clear(index_t *ix, index_entry_t *e);

/* Links e (which has no parent) under parent (same ns and rank) and clears its orphan flag. */
void index_set_parent(index_t *ix, index_entry_t *e, index_entry_t *parent);

/* Turns every child of e into an orphan (no parent link); e then has no children. */
void index_detach_children(index_t *ix, index_entry_t *e);

/* RAM leaf e leaves the LRU but stays RAM-resident (INDEX_F_SPILL): it is no longer a victim,
 * and losing its last RAM child does not bring it back; index_unspill() (or index_ram_clear())
 * ends that. */
void index_spill(index_t *ix, index_entry_t *e);
void index_unspill(index_t *ix, index_entry_t *e);

/* Marks an access: the entry becomes the most recent (a leaf moves to the hot end). */
void index_touch(index_t *ix, index_entry_t *e);

/* Marks an access of every entry of g at once without touching the entries (their clock is
 * index_clock); the caller still index_touch()es the ones in the LRU (INDEX_F_LRU in the group's
 * copy of their flags), whose place in the list is the order. */
void index_touch_group(index_t *ix, index_group_t *g);

/* Pins e until now_ms + lease_ms unless it already holds an unexpired lease (a lease is never
 * extended by a repeated lookup). */
void index_lease(index_t *ix, index_entry_t *e, uint64_t now_ms, uint32_t lease_ms);

/* Unlinks the expired leases from the head of the lease FIFO. O(expired). */
void index_prune_leases(index_t *ix, uint64_t now_ms);

/* Entries under an unexpired lease at now_ms: the FIFO's length less its expired head (prune
 * regularly to keep that head short). */
uint64_t index_leased_count(const index_t *ix, uint64_t now_ms);

static inline bool index_leased(const index_entry_t *e, uint64_t now_ms)
{
    return e->lease_until_ms > now_ms;
}

/* The least recent RAM leaf that is not pinned, and not leased unless it has a disk copy (a
 * lease guarantees that a load finds the chunk, not that RAM holds it: evicting the RAM copy of a
 * chunk that is on disk loses nothing, and a lease on it holds no RAM), scanning at most max_scan
 * leaves from the cold end; NULL when none qualifies. The one pin of a chunk's disk write in
 * flight (INDEX_F_WBUF) does not count: such a leaf can be spilled. */
index_entry_t *index_victim(const index_t *ix, uint64_t now_ms, unsigned max_scan);

/* Same, among the leaves that have every one of flags (INDEX_F_*). */
index_entry_t *index_victim_with(const index_t *ix, uint64_t now_ms, unsigned max_scan,
                                 uint16_t flags);

/* Removes a leaf (nchildren must be 0) and frees it; its parent may become a leaf. The caller
 * frees the entry's RAM first (copy off/len before calling). */
void index_remove(index_t *ix, index_entry_t *e);

/* Takes a leaf (nchildren must be 0) out of the index without freeing it: it is no longer found,
 * in the LRU nor its parent's child list, and belongs to the caller, who frees it with
 * index_entry_free() (the store keeps a dropped chunk that is still pinned this way until its
 * last pin goes). Its RAM flag and bytes are left as they were. */
void index_unlink(index_t *ix, index_entry_t *e);
void index_entry_free(index_entry_t *e);

/* Calls fn for every entry (any order); fn must not modify the index. */
void index_foreach(const index_t *ix, void (*fn)(const index_entry_t *e, void *arg), void *arg);

/* Checks the structure: hash membership, parent/child counts, leaves exactly in the LRU, no
 * entry whose parent is missing. Returns 0 or -1. O(entries): for tests. */
int index_check(const index_t *ix);

#endif /* KVT_INDEX_H */
