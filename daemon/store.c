/*
 * store.c - chunk storage semantics over index.c and ram.c (see store.h).
 *
 * Design notes:
 *   - A chunk's bytes are copied once, from the received ZeroMQ frame into the arena; a load
 *     hands out a pointer into the arena that the server copies into its reply frame.
 *   - During a save the predecessor of the chunk being placed is pinned, so eviction made for
 *     chunk i can never take chunk i-1 and turn chunk i into an orphan.
 *   - Eviction scans at most STORE_VICTIM_SCAN leaves from the cold end per victim, so a large
 *     crowd of leased leaves costs bounded work; past it the chunk is NOSPACE.
 * Threads: loop thread only.
 */
#include "store.h"

#include "index.h"
#include "ram.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STORE_VICTIM_SCAN 4096u

struct store {
    ns_table_t *nst;
    index_t *ix;
    ram_t *ram;
    uint32_t lease_ms;
    uint64_t stored_bytes;
    store_stats_t st;
};

int store_new(const config_t *cfg, ns_table_t *nst, store_t **out)
{
    store_t *s = calloc(1, sizeof *s);
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->nst = nst;
    s->lease_ms = cfg->ram.lease_ms;
    s->ix = index_new();
    if (s->ix == NULL) {
        rc = -ENOMEM;
        goto fail_index;
    }
    rc = ram_new(cfg->ram.arena_path, cfg->ram.arena_group, cfg->ram.capacity_bytes,
                 cfg->ram.prefault, &s->ram);
    if (rc != 0)
        goto fail_ram;
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
    index_destroy(&s->ix);
    ram_destroy(&s->ram);
    free(s);
    *ps = NULL;
}

static uint32_t prefix(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       size_t n, bool touch)
{
    uint16_t r = ns_store_rank(ns, rank);
    uint32_t hit = 0;

    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;
        index_entry_t *e;
        memcpy(&k, &h[i], sizeof k); /* the hash list may be unaligned in the frame */
        e = index_find(s->ix, ns->id, r, &k);
        if (e == NULL)
            break;
        if (touch)
            index_touch(s->ix, e);
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
        memcpy(&k, &h[i], sizeof k);
        index_lease(index_find(s->ix, ns->id, r, &k), now_ms, s->lease_ms);
    }
}

uint32_t store_lookup(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                      size_t n, bool lease, uint64_t now_ms)
{
    uint32_t hit = prefix(s, ns, rank, h, n, true);

    if (lease)
        lease_prefix(s, ns, rank, h, hit, now_ms);
    s->st.hits += hit;
    s->st.misses += n - hit;
    return hit;
}

uint32_t store_lookup_all(store_t *s, const ns_t *ns, const kvt_wire_hash_t *h, size_t n,
                          bool lease, uint64_t now_ms, uint32_t *rank_hits)
{
    uint16_t ranks = ns->replicated ? 1 : ns->world;
    uint32_t min = UINT32_MAX;

    for (uint16_t r = 0; r < ranks; r++) {
        rank_hits[r] = prefix(s, ns, r, h, n, true);
        if (rank_hits[r] < min)
            min = rank_hits[r];
    }
    for (uint16_t r = ranks; r < ns->world; r++)
        rank_hits[r] = rank_hits[0];
    if (lease)
        for (uint16_t r = 0; r < ranks; r++)
            lease_prefix(s, ns, r, h, min, now_ms);
    s->st.hits += (uint64_t)min * ranks;
    s->st.misses += (uint64_t)(n - min) * ranks;
    return min;
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

static void evict(store_t *s, index_entry_t *v)
{
    ns_t *vns = ns_get(s->nst, v->ns);

    ram_free(s->ram, v->off, v->len);
    if (vns != NULL) {
        vns->chunks--;
        vns->bytes -= v->len;
    }
    s->stored_bytes -= v->len;
    s->st.evictions++;
    index_remove(s->ix, v);
}

/* Allocates len bytes, evicting chain tails while the arena is full. */
static int alloc_evicting(store_t *s, uint64_t len, uint64_t now_ms, uint64_t *off)
{
    for (;;) {
        index_entry_t *v;
        int rc = ram_alloc(s->ram, len, off);
        if (rc != -ENOSPC)
            return rc;
        v = index_victim(s->ix, now_ms, STORE_VICTIM_SCAN);
        if (v == NULL)
            return -ENOSPC;
        evict(s, v);
    }
}

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

/* Publishes the extent (off, len), already holding the chunk's bytes, as chunk k. Returns
 * STORED, or NOSPACE when the index cannot grow (the extent is then freed). */
static uint8_t place(store_t *s, ns_t *ns, uint16_t r, const kvt_wire_hash_t *k, uint64_t off,
                     uint64_t len, chain_t *c)
{
    index_entry_t *e =
        index_add(s->ix, ns->id, r, k, c->prev, c->prev == NULL && c->declared, off, len);

    if (e == NULL) {
        ram_free(s->ram, off, len);
        s->st.nospace++;
        c->full = true;
        return KVT_CHUNK_NOSPACE;
    }
    ns->chunks++;
    ns->bytes += len;
    s->stored_bytes += len;
    s->st.stored++;
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
        index_touch(s->ix, e);
        c->prev = e;
        c->declared = true;
    }
    return e;
}

void store_save(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *payloads,
                uint64_t now_ms, uint8_t *status)
{
    uint16_t r = ns_store_rank(ns, rank);
    chain_t c;

    chain_start(s, ns, r, parent, &c);
    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;
        uint64_t off;
        int rc;

        memcpy(&k, &h[i], sizeof k);
        if (chain_existing(s, ns, r, &k, &c) != NULL) {
            status[i] = KVT_CHUNK_EXISTS;
            continue;
        }
        if (payloads[i].len == 0) {
            status[i] = KVT_CHUNK_SKIPPED;
            chain_gap(&c);
            continue;
        }
        rc = c.full ? -ENOSPC : store_reserve(s, payloads[i].len, c.prev, now_ms, &off);
        if (rc != 0) {
            status[i] = KVT_CHUNK_NOSPACE;
            s->st.nospace++;
            c.full = true;
            continue;
        }
        memcpy(ram_ptr(s->ram, off), payloads[i].data, payloads[i].len);
        status[i] = place(s, ns, r, &k, off, payloads[i].len, &c);
    }
}

int store_reserve(store_t *s, uint64_t len, index_entry_t *keep, uint64_t now_ms, uint64_t *off)
{
    int rc;

    if (keep != NULL)
        keep->pins++;
    rc = alloc_evicting(s, len, now_ms, off);
    if (keep != NULL)
        keep->pins--;
    return rc == 0 ? 0 : -ENOSPC;
}

void store_unreserve(store_t *s, uint64_t off, uint64_t len)
{
    ram_free(s->ram, off, len);
}

void store_commit(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                  const kvt_wire_hash_t *h, size_t n, const uint64_t *off, const uint64_t *len,
                  uint8_t *status)
{
    uint16_t r = ns_store_rank(ns, rank);
    chain_t c;

    chain_start(s, ns, r, parent, &c);
    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;

        memcpy(&k, &h[i], sizeof k);
        if (chain_existing(s, ns, r, &k, &c) != NULL) {
            /* another client stored it meanwhile: the reservation is not needed */
            if (off[i] != UINT64_MAX)
                ram_free(s->ram, off[i], len[i]);
            status[i] = KVT_CHUNK_EXISTS;
            continue;
        }
        if (off[i] == UINT64_MAX) {
            status[i] = KVT_CHUNK_SKIPPED;
            chain_gap(&c);
            continue;
        }
        status[i] = place(s, ns, r, &k, off[i], len[i], &c);
    }
}

index_entry_t *store_find(const store_t *s, const ns_t *ns, uint16_t rank,
                          const kvt_wire_hash_t *h)
{
    kvt_wire_hash_t k;

    memcpy(&k, h, sizeof k);
    return index_find(s->ix, ns->id, ns_store_rank(ns, rank), &k);
}

index_entry_t *store_load_entry(store_t *s, const ns_t *ns, uint16_t rank,
                                const kvt_wire_hash_t *h)
{
    index_entry_t *e = store_find(s, ns, rank, h);

    if (e == NULL) {
        s->st.misses++;
        return NULL;
    }
    index_touch(s->ix, e);
    s->st.hits++;
    return e;
}

const void *store_load(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       uint64_t *len)
{
    index_entry_t *e = store_load_entry(s, ns, rank, h);

    if (e == NULL)
        return NULL;
    *len = e->len;
    return ram_ptr(s->ram, e->off);
}

void *store_ptr(const store_t *s, uint64_t off)
{
    return ram_ptr(s->ram, off);
}

const char *store_arena_path(const store_t *s)
{
    return ram_path(s->ram);
}

uint64_t store_arena_bytes(const store_t *s)
{
    return ram_capacity(s->ram);
}

void store_foreach(const store_t *s, void (*fn)(const index_entry_t *e, void *arg), void *arg)
{
    index_foreach(s->ix, fn, arg);
}

const store_stats_t *store_stats(const store_t *s)
{
    return &s->st;
}

struct lease_count {
    uint64_t now_ms;
    uint64_t leased;
};

static void count_leased(const index_entry_t *e, void *arg)
{
    struct lease_count *lc = arg;

    lc->leased += index_leased(e, lc->now_ms);
}

void store_status_ram(const store_t *s, uint64_t now_ms, json_t *o)
{
    struct lease_count lc = {.now_ms = now_ms};

    index_foreach(s->ix, count_leased, &lc);
    json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)ram_capacity(s->ram)));
    json_object_set_new(o, "used_bytes", json_integer((json_int_t)ram_used(s->ram)));
    json_object_set_new(o, "resident_bytes", json_integer((json_int_t)ram_resident(s->ram)));
    json_object_set_new(o, "stored_bytes", json_integer((json_int_t)s->stored_bytes));
    json_object_set_new(o, "chunks", json_integer((json_int_t)index_count(s->ix)));
    json_object_set_new(o, "hits", json_integer((json_int_t)s->st.hits));
    json_object_set_new(o, "misses", json_integer((json_int_t)s->st.misses));
    json_object_set_new(o, "evictions", json_integer((json_int_t)s->st.evictions));
    json_object_set_new(o, "nospace", json_integer((json_int_t)s->st.nospace));
    json_object_set_new(o, "leased_chunks", json_integer((json_int_t)lc.leased));
    json_object_set_new(o, "free_runs", json_integer((json_int_t)ram_free_runs(s->ram)));
    json_object_set_new(o, "largest_free_bytes",
                        json_integer((json_int_t)ram_largest_free(s->ram)));
    json_object_set_new(o, "arena_path", json_string(ram_path(s->ram)));
}

struct check_acc {
    uint64_t bytes;
    uint64_t footprint;
    const ram_t *ram;
};

static void check_sum(const index_entry_t *e, void *arg)
{
    struct check_acc *a = arg;

    a->bytes += e->len;
    a->footprint += ram_footprint(a->ram, e->len);
}

int store_check(const store_t *s)
{
    struct check_acc a = {.ram = s->ram};

    if (index_check(s->ix) != 0)
        return -1;
    index_foreach(s->ix, check_sum, &a);
    if (a.bytes != s->stored_bytes || a.footprint != ram_used(s->ram))
        return -1;
    return ram_used(s->ram) <= ram_capacity(s->ram) ? 0 : -1;
}
