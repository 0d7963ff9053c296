/*
 * saveops.h - remembers the admission decision of recent save operations, so that every rank
 * presenting the same operation gets the answer the first rank got (docs/GATES.md section 2).
 * The table of admission.c, which names the operations and decides them.
 *
 * An operation is keyed by (namespace, client op id) when the client names it, else by
 * (namespace, first chunk hash, chunk count). Entries live for a bounded time (ttl_ms) in a
 * bounded table (capacity entries); the oldest is forgotten first. A forgotten operation that
 * is presented again is simply decided again.
 *
 * Threads: loop thread only.
 */
#ifndef KVT_SAVEOPS_H
#define KVT_SAVEOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kvt_proto.h"

typedef struct saveops saveops_t;

typedef struct {
    uint32_t ns;
    bool has_op_id;
    uint64_t op_id;
    kvt_wire_hash_t first;
    uint32_t count;
} saveops_key_t;

saveops_t *saveops_new(uint32_t capacity, uint32_t ttl_ms);
void saveops_destroy(saveops_t **t);

/* Returns 1 and *admit when the operation is remembered and not expired, else 0. */
int saveops_get(saveops_t *t, const saveops_key_t *k, uint64_t now_ms, bool *admit);

/* Remembers a decision (replacing an older one for the same key). */
void saveops_put(saveops_t *t, const saveops_key_t *k, bool admit, uint64_t now_ms);

uint32_t saveops_count(const saveops_t *t);

#endif /* KVT_SAVEOPS_H */
