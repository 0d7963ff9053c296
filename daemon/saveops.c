/*
 * saveops.c - bounded, expiring table of save-operation decisions (see saveops.h).
 *
 * Design: a ring of `capacity` slots in insertion order plus an open-addressing index of slot
 * numbers (twice the capacity, linear probing, rebuilt lazily: a lookup verifies the slot's
 * key, so stale index entries are harmless). Inserting overwrites the oldest slot. Everything is
 * allocated once at creation.
 * Threads: loop thread only.
 */
#include "saveops.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    saveops_key_t key;
    uint64_t expires_ms;
    bool used;
    bool admit;
} slot_t;

struct saveops {
    slot_t *slots;
    uint32_t *idx; /* slot number + 1, 0 = empty */
    uint32_t cap;
    uint32_t idx_cap; /* power of two >= 2 * cap */
    uint32_t next;    /* ring position of the oldest slot */
    uint32_t count;
    uint32_t ttl_ms;
};

static uint64_t key_hash(const saveops_key_t *k)
{
    uint64_t x;

    /* Only what key_eq compares: with an op id, ranks may present different first hashes. */
    if (k->has_op_id) {
        x = k->op_id * 0x9e3779b97f4a7c15ull;
    } else {
        memcpy(&x, k->first.b, sizeof x);
        x ^= (uint64_t)k->count << 7;
    }
    x ^= (uint64_t)k->ns * 0xc2b2ae3d27d4eb4full;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x;
}

static bool key_eq(const saveops_key_t *a, const saveops_key_t *b)
{
    if (a->ns != b->ns || a->has_op_id != b->has_op_id)
        return false;
    if (a->has_op_id)
        return a->op_id == b->op_id;
    return a->count == b->count && memcmp(a->first.b, b->first.b, KVT_HASH_BYTES) == 0;
}

saveops_t *saveops_new(uint32_t capacity, uint32_t ttl_ms)
{
    saveops_t *t = calloc(1, sizeof *t);

    if (t == NULL || capacity == 0)
        goto fail;
    t->cap = capacity;
    t->idx_cap = 1;
    while (t->idx_cap < 2 * capacity)
        t->idx_cap <<= 1;
    t->slots = calloc(capacity, sizeof *t->slots);
    t->idx = calloc(t->idx_cap, sizeof *t->idx);
    if (t->slots == NULL || t->idx == NULL)
        goto fail;
    t->ttl_ms = ttl_ms;
    return t;
fail:
    if (t != NULL) {
        free(t->slots);
        free(t->idx);
        free(t);
    }
    return NULL;
}

void saveops_destroy(saveops_t **pt)
{
    saveops_t *t = *pt;

    if (t == NULL)
        return;
    free(t->slots);
    free(t->idx);
    free(t);
    *pt = NULL;
}

/* The index position holding k's slot, or -1; then *free_pos is the empty position ending the
 * probe (or an occupied one when the index is full of stale positions: the caller reindexes). */
static long find(const saveops_t *t, const saveops_key_t *k, uint32_t *free_pos)
{
    uint32_t mask = t->idx_cap - 1, i = (uint32_t)key_hash(k) & mask;

    for (uint32_t n = 0; n < t->idx_cap; n++, i = (i + 1) & mask) {
        uint32_t s = t->idx[i];
        if (s == 0)
            break;
        if (t->slots[s - 1].used && key_eq(&t->slots[s - 1].key, k))
            return (long)i;
    }
    *free_pos = i;
    return -1;
}

int saveops_get(saveops_t *t, const saveops_key_t *k, uint64_t now_ms, bool *admit)
{
    uint32_t fp;
    long i = find(t, k, &fp);
    const slot_t *s;

    if (i < 0)
        return 0;
    s = &t->slots[t->idx[i] - 1];
    if (s->expires_ms <= now_ms)
        return 0;
    *admit = s->admit;
    return 1;
}

/* Rebuilds the index from the live slots (when probing found no empty position). */
static void reindex(saveops_t *t)
{
    uint32_t mask = t->idx_cap - 1;

    memset(t->idx, 0, t->idx_cap * sizeof *t->idx);
    for (uint32_t s = 0; s < t->cap; s++) {
        uint32_t i;
        if (!t->slots[s].used)
            continue;
        i = (uint32_t)key_hash(&t->slots[s].key) & mask;
        while (t->idx[i] != 0)
            i = (i + 1) & mask;
        t->idx[i] = s + 1;
    }
}

void saveops_put(saveops_t *t, const saveops_key_t *k, bool admit, uint64_t now_ms)
{
    uint32_t fp = 0, slot;
    long i = find(t, k, &fp);
    slot_t *s;

    if (i >= 0) {
        s = &t->slots[t->idx[i] - 1];
        s->admit = admit;
        s->expires_ms = now_ms + t->ttl_ms;
        return;
    }
    slot = t->next;
    t->next = (t->next + 1) % t->cap;
    s = &t->slots[slot];
    if (!s->used)
        t->count++;
    s->used = true;
    s->key = *k;
    s->admit = admit;
    s->expires_ms = now_ms + t->ttl_ms;
    /* Stale index positions pointing at a reused slot fail key_eq; rebuild when crowded. */
    if (t->idx[fp] != 0) {
        reindex(t);
        return;
    }
    t->idx[fp] = slot + 1;
    if (slot == t->cap - 1)
        reindex(t); /* one full ring turn: drop stale positions */
}

uint32_t saveops_count(const saveops_t *t)
{
    return t->count;
}
