/*
 * ghost.h - the ghost table of one namespace: fingerprints of chunks whose save the admission
 * gate declined, so that later lookups can tell what admitting them would have served
 * (docs/GATES.md section 6, "regret").
 *
 * A fixed-size set of 64-bit fingerprints, made of buckets of GHOST_WAYS slots. A fingerprint
 * belongs to one bucket (its low bits); a bucket holds its fingerprints in the order they were
 * last declined, newest first. Replacement rule: adding a fingerprint to a full bucket forgets
 * the one declined longest ago in that bucket; adding one already present moves it to the front.
 * Lookups do not reorder. Nothing is ever allocated after ghost_new, and the slots are one
 * calloc'd array, so the pages of a table that is never written stay unbacked (a namespace that
 * never declines costs no resident memory).
 *
 * Fingerprints are XXH3-64 of the 16 hash bytes (ghost_fp): the hashes themselves need not be
 * well mixed (a test or a replay may number its chunks). 0 marks an empty slot, so a fingerprint
 * of 0 is stored as 1. Two hashes of one fingerprint are one entry: a false positive is a chance
 * of about entries / 2^64 per lookup.
 *
 * Threads: loop thread only (one table per namespace, owned by its gates_t).
 */
#ifndef KVT_GHOST_H
#define KVT_GHOST_H

#include <stdbool.h>
#include <stdint.h>

#include "kvt_proto.h"

#define GHOST_WAYS 8u                   /* slots per bucket: one 64-byte cache line */
#define GHOST_ENTRIES_MAX (1ull << 26u) /* largest table (512 MiB of fingerprints) */

typedef struct ghost ghost_t;

typedef struct {
    uint64_t capacity;  /* slots: buckets x GHOST_WAYS (0: no table) */
    uint64_t entries;   /* slots in use */
    uint64_t inserts;   /* fingerprints added that were not present */
    uint64_t refreshes; /* fingerprints added again (moved to the front of their bucket) */
    uint64_t evictions; /* fingerprints forgotten by the replacement rule */
    uint64_t removals;  /* fingerprints removed because their chunk was admitted */
} ghost_stats_t;

/* The capacity a table of `entries` requested slots gets: the largest power of two of buckets
 * whose slots do not exceed max(entries, GHOST_WAYS), capped at GHOST_ENTRIES_MAX; 0 for 0. */
uint64_t ghost_capacity_for(uint64_t entries);

/* A table of ghost_capacity_for(entries) slots. entries 0 gives a table that holds nothing
 * (every call is a no-op, ghost_has answers false). NULL on allocation failure. */
ghost_t *ghost_new(uint64_t entries);
void ghost_destroy(ghost_t **g);

/* The fingerprint of a chunk hash (never 0). */
uint64_t ghost_fp(const kvt_wire_hash_t *h);

bool ghost_has(const ghost_t *g, uint64_t fp);

/* Adds fp at the front of its bucket (see the replacement rule above). */
void ghost_add(ghost_t *g, uint64_t fp);

/* Removes fp if present (its chunk is being written); returns whether it was. */
bool ghost_remove(ghost_t *g, uint64_t fp);

void ghost_stats(const ghost_t *g, ghost_stats_t *out);

#endif /* KVT_GHOST_H */
