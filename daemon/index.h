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
 * The hash table is chained with a power-of-two bucket array that doubles when the load factor
 * passes 1 (a full rehash: the number of entries is bounded by capacity / chunk size, tens of
 * thousands on a large node, so the pause is short; see the closing note of the issue).
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
    uint32_t pins;           /* short-lived pins of the loop (a save in progress) */
    uint16_t rank;
    uint16_t flags;          /* INDEX_F_* */
    kvt_wire_hash_t hash;
};

#define INDEX_F_ORPHAN 0x1u

typedef struct index index_t;

/* Returns NULL on allocation failure. */
index_t *index_new(void);
/* Frees every entry (their RAM is the caller's to free first) and sets *ix to NULL. */
void index_destroy(index_t **ix);

uint64_t index_count(const index_t *ix);

index_entry_t *index_find(const index_t *ix, uint32_t ns, uint16_t rank,
                          const kvt_wire_hash_t *h);

/*
 * Adds an entry that must not exist yet. parent, when not NULL, is the stored predecessor
 * (same ns and rank); orphan says a predecessor was declared but is not stored. The entry
 * becomes the most recent leaf (an orphan: the least recent). Returns the entry or NULL on
 * allocation failure.
 */
index_entry_t *index_add(index_t *ix, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         index_entry_t *parent, bool orphan, uint64_t off, uint64_t len);

/* Marks an access: the entry becomes the most recent (a leaf moves to the hot end). */
void index_touch(index_t *ix, index_entry_t *e);

/* Pins e until now_ms + lease_ms unless it already holds an unexpired lease (a lease is never
 * extended by a repeated lookup). */
void index_lease(index_entry_t *e, uint64_t now_ms, uint32_t lease_ms);

static inline bool index_leased(const index_entry_t *e, uint64_t now_ms)
{
    return e->lease_until_ms > now_ms;
}

/* The least recent leaf that is neither leased nor pinned, scanning at most max_scan leaves
 * from the cold end; NULL when none qualifies. */
index_entry_t *index_victim(const index_t *ix, uint64_t now_ms, unsigned max_scan);

/* Removes a leaf (nchildren must be 0) and frees it; its parent may become a leaf. The caller
 * frees the entry's RAM first (copy off/len before calling). */
void index_remove(index_t *ix, index_entry_t *e);

/* Calls fn for every entry (any order); fn must not modify the index. */
void index_foreach(const index_t *ix, void (*fn)(const index_entry_t *e, void *arg), void *arg);

/* Checks the structure: hash membership, parent/child counts, leaves exactly in the LRU, no
 * entry whose parent is missing. Returns 0 or -1. O(entries): for tests. */
int index_check(const index_t *ix);

#endif /* KVT_INDEX_H */
