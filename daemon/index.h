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
 * copy on disk (INDEX_F_DISK: dseg/doff/dstored/dhdr), or waits in the disk tier's write buffer
 * (INDEX_F_WBUF: wseq). The leaf LRU holds the *RAM leaves*: RAM-resident entries none of whose
 * children is RAM-resident (ram_kids == 0); RAM eviction takes them in LRU order and demotes
 * them, so RAM is emptied from chain tails while the chain itself stays in the index. nchildren
 * counts children in any tier: an entry leaves the index only when it has none (the no-orphan
 * rule holds for the index as a whole), or after index_detach_children() turned its children
 * into orphans (the disk tier's reclaim of a whole segment does that; see store.c). With the disk
 * tier off every entry is RAM-resident and ram_kids == nchildren, the single-tier behaviour.
 * Children are kept in a list per parent so that detaching costs O(children).
 *
 * The hash table is chained with a power-of-two bucket array that doubles when the load factor
 * passes 1 (a full rehash: the number of entries is bounded by capacity / chunk size, tens of
 * thousands on a large node, so the pause is short: docs/ARCHITECTURE.md).
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
struct index_entry {
    index_entry_t *hnext;    /* hash chain */
    index_entry_t *parent;   /* stored predecessor, or NULL */
    index_entry_t *lru_prev; /* leaf LRU links (valid while nchildren == 0) */
    index_entry_t *lru_next;
    uint64_t clock;          /* access clock: larger = more recent */
    uint64_t lease_until_ms; /* pinned by a lookup lease until this time */
    uint64_t off;            /* location in the RAM arena */
    uint64_t len;            /* payload bytes */
    uint32_t ns;
    uint32_t nchildren;
    uint32_t pins; /* short-lived pins of the loop (a save in progress) */
    uint16_t rank;
    uint16_t flags; /* INDEX_F_* */
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
};

#define INDEX_F_ORPHAN 0x1u
#define INDEX_F_RAM 0x2u    /* bytes in the arena at off */
#define INDEX_F_DISK 0x4u   /* verified copy on disk at dseg/doff */
#define INDEX_F_WBUF 0x8u   /* bytes in the disk tier's write buffer (ticket wseq) */
#define INDEX_F_LRU 0x10u   /* in the leaf LRU (internal) */
#define INDEX_F_LIMBO 0x20u /* unlinked (index_unlink) and kept by the store until unpinned */

typedef struct index index_t;

/* Returns NULL on allocation failure. */
index_t *index_new(void);
/* Frees every entry (their RAM is the caller's to free first) and sets *ix to NULL. */
void index_destroy(index_t **ix);

uint64_t index_count(const index_t *ix);

index_entry_t *index_find(const index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h);

/*
 * Adds an entry that must not exist yet. parent, when not NULL, is the stored predecessor
 * (same ns and rank); orphan says a predecessor was declared but is not stored. The entry
 * becomes the most recent leaf (an orphan: the least recent). Returns the entry or NULL on
 * allocation failure.
 */
index_entry_t *index_add(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         index_entry_t *parent, bool orphan, uint64_t off, uint64_t len);

/* Same for an entry that is not RAM-resident (recovered from disk or demoted). */
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

/* Marks an access: the entry becomes the most recent (a leaf moves to the hot end). */
void index_touch(index_t *ix, index_entry_t *e);

/* Pins e until now_ms + lease_ms unless it already holds an unexpired lease (a lease is never
 * extended by a repeated lookup). */
void index_lease(index_entry_t *e, uint64_t now_ms, uint32_t lease_ms);

static inline bool index_leased(const index_entry_t *e, uint64_t now_ms)
{
    return e->lease_until_ms > now_ms;
}

/* The least recent RAM leaf that is not pinned, and not leased unless it has a disk copy (a
 * lease guarantees that a load finds the chunk, not that RAM holds it: evicting the RAM copy of a
 * chunk that is on disk loses nothing, and a lease on it holds no RAM), scanning at most max_scan
 * leaves from the cold end; NULL when none qualifies. */
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
