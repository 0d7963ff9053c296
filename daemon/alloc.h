/*
 * alloc.h - extent allocator for the RAM arena (offsets only; it never touches the arena bytes).
 *
 * The arena is divided into fixed units (4 KiB by default). An allocation is a run of whole
 * units. Free runs are kept in segregated size-class bins (one bin per power of two of the run
 * length, TLSF style), with boundary tags held out of band in per-unit arrays so that freeing
 * coalesces with both neighbours in O(1) and the arena's pages are never touched by the
 * allocator (untouched pages stay unallocated in the memfd/shm file).
 *
 * Why not memcached's fixed slab classes: KV chunks are 0.5-16 MiB and uniform within a
 * namespace but differ between namespaces; fixed per-class pages would need a page rebalancer,
 * and prefix-aware eviction picks victims by chain position, not by size class. A size-class
 * binned extent allocator gives the slab allocator's O(1) behaviour without either.
 *
 * Capacity is hard by construction: the allocator never hands out more than capacity bytes.
 * Threads: single-threaded; the daemon calls it from the loop thread only.
 */
#ifndef KVT_ALLOC_H
#define KVT_ALLOC_H

#include <stdint.h>

typedef struct alloc alloc_t;

#define ALLOC_UNIT_DEFAULT 4096u

/* Creates an allocator over capacity bytes in units of unit bytes (a power of two >= 64).
 * capacity is rounded down to whole units and must hold at least one unit and at most 2^31
 * units. Returns NULL on invalid arguments or allocation failure. */
alloc_t *alloc_new(uint64_t capacity, uint32_t unit);

/* Frees the allocator and sets *a to NULL; NULL and *a == NULL are accepted. */
void alloc_destroy(alloc_t **a);

/* Allocates len bytes (> 0), rounded up to whole units. Returns 0 and the offset in *off, or
 * -ENOSPC when no free run is large enough, or -EINVAL for len 0 or len > capacity. */
int alloc_get(alloc_t *a, uint64_t len, uint64_t *off);

/* Returns the run allocated at off with length len (the same len passed to alloc_get). Freeing
 * a run that is not allocated is a programmer error (assert). */
void alloc_put(alloc_t *a, uint64_t off, uint64_t len);

/* Marks the run (off, len) allocated, for rebuilding an allocator's state (the arena's
 * re-attach): the run must lie inside the last free run of the arena, so that a caller claiming
 * runs in increasing offset order on a fresh allocator (no alloc_get between) always succeeds.
 * Returns 0, or -EINVAL (unaligned, outside the arena, overlapping a claimed run or out of
 * order). */
int alloc_claim(alloc_t *a, uint64_t off, uint64_t len);

/* Bytes an allocation of len occupies (len rounded up to whole units). */
uint64_t alloc_footprint(const alloc_t *a, uint64_t len);

uint64_t alloc_capacity(const alloc_t *a);     /* usable bytes (whole units) */
uint64_t alloc_used(const alloc_t *a);         /* bytes in allocated runs */
uint64_t alloc_largest_free(const alloc_t *a); /* the longest free run in bytes */
uint32_t alloc_free_runs(const alloc_t *a);    /* number of free runs (fragmentation) */

/* Walks every run and checks the tags, bins and counters. Returns 0 when consistent, or -1.
 * O(units): for tests. */
int alloc_check(const alloc_t *a);

#endif /* KVT_ALLOC_H */
