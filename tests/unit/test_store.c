/*
 * test_store.c - unit tests of the chunk index (index.c) and the store's prefix semantics,
 * eviction order and capacity (store.c over a real memfd arena).
 *
 * Hashes are built as (chain, position) so a test can tell from any stored entry which chain
 * and position it belongs to and check that no stored chunk ever lacks its predecessor.
 */
#include "check_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "config.h"
#include "index.h"
#include "ns.h"
#include "ram.h"
#include "store.h"

static kvt_wire_hash_t H(uint32_t chain, uint32_t pos)
{
    kvt_wire_hash_t h;

    memset(&h, 0, sizeof h);
    memcpy(h.b, &chain, 4);
    memcpy(h.b + 4, &pos, 4);
    h.b[15] = 0xa5;
    return h;
}

static uint32_t chain_of(const kvt_wire_hash_t *h)
{
    uint32_t c;
    memcpy(&c, h->b, 4);
    return c;
}

static uint32_t pos_of(const kvt_wire_hash_t *h)
{
    uint32_t p;
    memcpy(&p, h->b + 4, 4);
    return p;
}

/* Adds chain c of n entries to ix; returns the last entry. */
static index_entry_t *add_chain(index_t *ix, uint32_t c, uint32_t n)
{
    index_entry_t *prev = NULL;

    for (uint32_t i = 0; i < n; i++) {
        kvt_wire_hash_t h = H(c, i);
        prev = index_add(ix, 1, 0, &h, prev, false, (uint64_t)c * 100 + i, 10);
        ck_assert_ptr_nonnull(prev);
    }
    return prev;
}

START_TEST(index_add_find_remove)
{
    index_t *ix = index_new();
    kvt_wire_hash_t h0 = H(1, 0), h1 = H(1, 1);
    index_entry_t *e0, *e1;

    add_chain(ix, 1, 2);
    ck_assert_uint_eq(index_count(ix), 2);
    e0 = index_find(ix, 1, 0, &h0);
    e1 = index_find(ix, 1, 0, &h1);
    ck_assert_ptr_nonnull(e0);
    ck_assert_ptr_eq(e1->parent, e0);
    ck_assert_uint_eq(e0->nchildren, 1);
    ck_assert_ptr_null(index_find(ix, 2, 0, &h0)); /* other namespace */
    ck_assert_ptr_null(index_find(ix, 1, 1, &h0)); /* other rank */
    ck_assert_int_eq(index_check(ix), 0);
    /* only the tail is a victim */
    ck_assert_ptr_eq(index_victim(ix, 0, 16), e1);
    index_remove(ix, e1);
    ck_assert_uint_eq(e0->nchildren, 0);
    ck_assert_ptr_eq(index_victim(ix, 0, 16), e0);
    ck_assert_int_eq(index_check(ix), 0);
    index_remove(ix, e0);
    ck_assert_uint_eq(index_count(ix), 0);
    ck_assert_ptr_null(index_victim(ix, 0, 16));
    index_destroy(&ix);
    ck_assert_ptr_null(ix);
}
END_TEST

START_TEST(index_grows)
{
    index_t *ix = index_new();

    for (uint32_t c = 0; c < 5000; c++)
        add_chain(ix, c, 1);
    ck_assert_uint_eq(index_count(ix), 5000);
    for (uint32_t c = 0; c < 5000; c++) {
        kvt_wire_hash_t h = H(c, 0);
        ck_assert_ptr_nonnull(index_find(ix, 1, 0, &h));
    }
    index_destroy(&ix);
}
END_TEST

/* The group keeps a copy of each rank's flags (an all-ranks walk reads it instead of the
 * entries): the setters keep it, also across a group's growth, and index_check catches a flag
 * written past them. */
START_TEST(index_group_keeps_the_flags)
{
    index_t *ix = index_new();
    kvt_wire_hash_t h = H(5, 0);
    index_entry_t *e0 = index_add(ix, 1, 0, &h, NULL, false, 0, 10), *e3;
    const index_group_t *g;

    index_flags_set(e0, INDEX_F_DISK);
    e3 = index_add(ix, 1, 3, &h, NULL, false, 1, 10); /* the group grows from 1 slot to 4 */
    ck_assert_ptr_nonnull(e3);
    index_flags_set(e3, INDEX_F_DIRTY);
    g = index_find_group(ix, 1, &h);
    ck_assert_uint_eq(g->nslots, 4);
    ck_assert_uint_eq(index_group_flags(g)[0], e0->flags);
    ck_assert_uint_eq(index_group_flags(g)[1], 0);
    ck_assert_uint_eq(index_group_flags(g)[3], e3->flags);
    ck_assert_int_eq(index_check(ix), 0);
    index_flags_clear(e0, INDEX_F_DISK);
    ck_assert_int_eq(index_check(ix), 0);
    e0->flags |= INDEX_F_BAD; /* past the setters */
    ck_assert_int_eq(index_check(ix), -1);
    index_flags_clear(e0, INDEX_F_BAD);
    index_remove(ix, e0);
    ck_assert_uint_eq(index_group_flags(index_find_group(ix, 1, &h))[0], 0);
    ck_assert_int_eq(index_check(ix), 0);
    index_destroy(&ix);
}
END_TEST

/* Chains A (1) and B (2) of 3 chunks; B touched last: evictions eat A from its tail, then B. */
START_TEST(eviction_order_tails_of_lru_chain)
{
    index_t *ix = index_new();
    uint32_t expect[][2] = {{1, 2}, {1, 1}, {1, 0}, {2, 2}, {2, 1}, {2, 0}};

    add_chain(ix, 1, 3);
    add_chain(ix, 2, 3);
    for (uint32_t i = 0; i < 3; i++) { /* a lookup of B walks B from its head */
        kvt_wire_hash_t h = H(2, i);
        index_touch(ix, index_find(ix, 1, 0, &h));
    }
    for (size_t k = 0; k < 6; k++) {
        index_entry_t *v = index_victim(ix, 0, 64);
        ck_assert_ptr_nonnull(v);
        ck_assert_uint_eq(chain_of(&v->hash), expect[k][0]);
        ck_assert_uint_eq(pos_of(&v->hash), expect[k][1]);
        index_remove(ix, v);
        ck_assert_int_eq(index_check(ix), 0);
    }
    index_destroy(&ix);
}
END_TEST

/* A shared prefix stays while any branch needs it; an exposed parent keeps its recency. */
START_TEST(eviction_shared_prefix)
{
    index_t *ix = index_new();
    kvt_wire_hash_t p = H(1, 0), b1 = H(1, 1), c1 = H(3, 1), x = H(9, 0);
    index_entry_t *root, *a, *b, *other;

    root = index_add(ix, 1, 0, &p, NULL, false, 0, 10);
    a = index_add(ix, 1, 0, &b1, root, false, 1, 10);
    b = index_add(ix, 1, 0, &c1, root, false, 2, 10);
    other = index_add(ix, 1, 0, &x, NULL, false, 3, 10);
    ck_assert_uint_eq(root->nchildren, 2);
    /* touch root and branch b (a lookup through b) after `other` */
    index_touch(ix, root);
    index_touch(ix, b);
    ck_assert_ptr_eq(index_victim(ix, 0, 64), a);
    index_remove(ix, a);
    ck_assert_ptr_eq(index_victim(ix, 0, 64), other); /* root is not a leaf yet */
    index_remove(ix, other);
    ck_assert_ptr_eq(index_victim(ix, 0, 64), b);
    index_remove(ix, b);
    ck_assert_ptr_eq(index_victim(ix, 0, 64), root);
    ck_assert_int_eq(index_check(ix), 0);
    index_destroy(&ix);
}
END_TEST

START_TEST(lease_blocks_eviction_and_expires)
{
    index_t *ix = index_new();
    index_entry_t *a = add_chain(ix, 1, 1), *b = add_chain(ix, 2, 1);

    index_lease(ix, a, 1000, 500);
    ck_assert_uint_eq(a->lease_until_ms, 1500);
    index_lease(ix, a, 1400, 500); /* a repeated lease does not extend */
    ck_assert_uint_eq(a->lease_until_ms, 1500);
    ck_assert_uint_eq(index_leased_count(ix, 1400), 1);
    ck_assert_ptr_eq(index_victim(ix, 1200, 64), b);
    ck_assert_ptr_eq(index_victim(ix, 1500, 64), a); /* expired at 1500 */
    ck_assert_uint_eq(index_leased_count(ix, 1500), 0);
    index_lease(ix, a, 1600, 500); /* after expiry a new lease starts */
    ck_assert_uint_eq(a->lease_until_ms, 2100);
    a->lease_until_ms = 0;
    a->pins = 1;
    ck_assert_ptr_eq(index_victim(ix, 1200, 64), b);
    a->pins = 0;
    /* the lease FIFO counts in O(1): grant order is expiry order */
    index_lease(ix, a, 1600, 500);
    index_lease(ix, b, 1700, 500);
    ck_assert_uint_eq(index_leased_count(ix, 1700), 2);
    ck_assert_uint_eq(index_leased_count(ix, 2150), 1); /* a expired, b not */
    index_prune_leases(ix, 2150);
    ck_assert_int_eq(index_check(ix), 0);
    ck_assert_uint_eq(index_leased_count(ix, 2150), 1);
    ck_assert_uint_eq(index_leased_count(ix, 2200), 0);
    index_destroy(&ix);
}
END_TEST

START_TEST(orphan_goes_first)
{
    index_t *ix = index_new();
    kvt_wire_hash_t o = H(5, 3);
    index_entry_t *e;

    add_chain(ix, 1, 2);
    e = index_add(ix, 1, 0, &o, NULL, true, 0, 10);
    ck_assert_uint_eq(e->flags & INDEX_F_ORPHAN, INDEX_F_ORPHAN);
    ck_assert_ptr_eq(index_victim(ix, 0, 64), e);
    index_destroy(&ix);
}
END_TEST

/* --- store --- */

typedef struct {
    config_t cfg;
    uv_loop_t loop;
    ns_table_t *nst;
    store_t *st;
    ns_t *ns;
} fixture_t;

static void fixture_init(fixture_t *f, uint64_t capacity, uint16_t world, bool replicated)
{
    gates_cfg_t g;

    config_defaults(&f->cfg);
    f->cfg.ram.capacity_bytes = capacity;
    f->cfg.ram.arena_path[0] = '\0';
    f->cfg.ram.max_chunk_bytes = capacity;
    f->cfg.ram.lease_ms = 1000;
    g = f->cfg.gates;
    f->nst = ns_table_new(NS_MAX);
    ck_assert_ptr_nonnull(f->nst);
    ck_assert_int_eq(ns_declare(f->nst,
                                &(ns_ident_t){.model = "m",
                                              .model_len = 1,
                                              .fingerprint = 42,
                                              .world = world,
                                              .replicated = replicated,
                                              .chunk_tokens = 16},
                                &g, &f->ns),
                     0);
    ck_assert_int_eq(store_new(&f->cfg, f->nst, &f->st), 0);
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    ck_assert_int_eq(store_attach_disk(f->st, &f->loop), 0); /* the loop; no disk tier */
}

static void closed_cb(void *arg)
{
    *(int *)arg = 1;
}

static void fixture_fini(fixture_t *f)
{
    int closed = 0;

    store_close(f->st, closed_cb, &closed);
    while (!closed)
        uv_run(&f->loop, UV_RUN_ONCE);
    store_destroy(&f->st);
    ns_table_destroy(&f->nst);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* a tombstone write in flight frees the drops (drops.h) */
    ck_assert_int_eq(uv_loop_close(&f->loop), 0);
}

static void saved_cb(void *arg)
{
    *(int *)arg = 1;
}

/* store_save, run until its chunks are published. */
static void save_wait(fixture_t *f, uint16_t rank, const kvt_wire_hash_t *parent,
                      const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *pl, uint64_t now,
                      uint8_t *status)
{
    int done = 0;

    ck_assert_int_eq(
        store_save(f->st, f->ns, rank, parent, h, n, pl, now, status, saved_cb, &done, NULL), 0);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
}

/* Saves positions [from, from+n) of chain c with payload bytes derived from (c, pos, rank). */
static void save_chain(fixture_t *f, uint16_t rank, uint32_t c, uint32_t from, uint32_t n,
                       size_t len, uint64_t now, uint8_t *status)
{
    kvt_wire_hash_t h[64], parent = H(c, from - 1);
    kvt_frame_t pl[64];
    uint8_t *buf = malloc(len * n);

    ck_assert_uint_le(n, 64);
    for (uint32_t i = 0; i < n; i++) {
        h[i] = H(c, from + i);
        memset(buf + i * len, (int)(c * 31 + (from + i) * 7 + rank), len);
        pl[i].data = buf + i * len;
        pl[i].len = len;
    }
    save_wait(f, rank, from > 0 ? &parent : NULL, h, n, pl, now, status);
    free(buf);
}

static uint32_t lookup_chain(fixture_t *f, uint16_t rank, uint32_t c, uint32_t n)
{
    kvt_wire_hash_t h[64];

    for (uint32_t i = 0; i < n; i++)
        h[i] = H(c, i);
    return store_lookup(f->st, f->ns, rank, h, n, false, 0, 0);
}

START_TEST(store_prefix_semantics)
{
    fixture_t f;
    uint8_t st[4];
    kvt_wire_hash_t h2 = H(1, 2);
    uint64_t len;

    fixture_init(&f, 1 << 20, 1, false);
    save_chain(&f, 0, 1, 0, 2, 100, 0, st); /* chunks 0, 1 */
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    save_chain(&f, 0, 1, 3, 1, 100, 0, st); /* chunk 3 with parent 2 (absent) */
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 4), 2);
    ck_assert_ptr_null(store_load(f.st, f.ns, 0, &h2, &len));
    save_chain(&f, 0, 1, 0, 2, 100, 0, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_EXISTS);
    ck_assert_int_eq(st[1], KVT_CHUNK_EXISTS);
    ck_assert_int_eq(store_check(f.st), 0);
    ck_assert_uint_eq(f.ns->chunks, 3);
    ck_assert_uint_eq(f.ns->bytes, 300);
    fixture_fini(&f);
}
END_TEST

START_TEST(store_ranks_and_all_ranks_min)
{
    fixture_t f;
    uint8_t st[8];
    kvt_wire_hash_t h[8];
    uint32_t hits[4];

    fixture_init(&f, 1 << 20, 4, false);
    for (uint16_t r = 0; r < 4; r++)
        save_chain(&f, r, 7, 0, (uint32_t)(2 + r), 64, 0, st);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(7, i);
    ck_assert_uint_eq(store_lookup_all(f.st, f.ns, h, 8, false, 0, 0, hits), 2);
    for (uint16_t r = 0; r < 4; r++) {
        ck_assert_uint_eq(hits[r], 2u + r);
        ck_assert_uint_eq(lookup_chain(&f, r, 7, 8), 2u + r);
    }
    /* byte-exact per rank */
    for (uint16_t r = 0; r < 4; r++) {
        uint64_t len = 0;
        const uint8_t *p = store_load(f.st, f.ns, r, &h[1], &len);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(len, 64);
        ck_assert_uint_eq(p[0], (uint8_t)(7 * 31 + 1 * 7 + r));
        ck_assert_uint_eq(p[63], (uint8_t)(7 * 31 + 1 * 7 + r));
    }
    fixture_fini(&f);
}
END_TEST

/* How many of the first n chunks of chain c rank r holds, without touching them. */
static uint32_t held(fixture_t *f, uint16_t rank, uint32_t c, uint32_t n)
{
    kvt_wire_hash_t h[64];
    uint8_t st[64];

    for (uint32_t i = 0; i < n; i++)
        h[i] = H(c, i);
    return (uint32_t)(n - store_save_query(f->st, f->ns, rank, h, n, st));
}

/*
 * An all-ranks lookup touches a chain's interior through the group's clock (index_touch_group),
 * not its entries: that clock must still order the chain when its tail goes and an interior
 * chunk becomes a leaf. A (8 chunks, 2 ranks) is saved, then X, then an all-ranks lookup of
 * A's first 4; fills then evict A's untouched tail 7..4 (older than X) and then X, never A's
 * looked-up 0..3 before X: with entry clocks alone, A's exposed chunk 3 would be older than X.
 */
START_TEST(store_all_ranks_lookup_orders_the_chain_it_walked)
{
    fixture_t f;
    uint8_t st[8];
    kvt_wire_hash_t h[4];
    uint32_t hits[2], fills = 0;

    fixture_init(&f, 1 << 20, 2, false);
    for (uint16_t r = 0; r < 2; r++)
        save_chain(&f, r, 1, 0, 8, 4096, 0, st); /* A */
    for (uint16_t r = 0; r < 2; r++)
        save_chain(&f, r, 2, 0, 8, 4096, 0, st); /* X */
    for (uint32_t i = 0; i < 4; i++)
        h[i] = H(1, i);
    ck_assert_uint_eq(store_lookup_all(f.st, f.ns, h, 4, false, 0, 0, hits), 4);
    ck_assert_int_eq(store_check(f.st), 0);
    /* fill until X loses its first chunk */
    while (held(&f, 0, 2, 8) == 8 && held(&f, 1, 2, 8) == 8) {
        save_chain(&f, 0, 1000 + fills, 0, 1, 4096, 0, st);
        ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
        ck_assert_uint_lt(++fills, 10000);
    }
    for (uint16_t r = 0; r < 2; r++)
        ck_assert_uint_eq(held(&f, r, 1, 8), 4); /* A's tail went first, its head stays */
    ck_assert_int_eq(store_check(f.st), 0);
    fixture_fini(&f);
}
END_TEST

/* A save still being copied and hashed when an operator drops its namespace (server_drop_ns:
 * store_drop_ns, then ns->drops++) is not stored: what it carries was written before the drop. */
START_TEST(store_save_in_flight_at_a_drop_is_not_stored)
{
    fixture_t f;
    uint8_t st[2];
    kvt_wire_hash_t h[2] = {H(9, 0), H(9, 1)};
    kvt_frame_t pl[2];
    static uint8_t buf[2][4096];
    store_drop_t d;
    int done = 0;

    fixture_init(&f, 1 << 20, 1, false);
    for (int i = 0; i < 2; i++)
        pl[i] = (kvt_frame_t){.data = buf[i], .len = sizeof buf[i]};
    ck_assert_int_eq(store_save(f.st, f.ns, 0, NULL, h, 2, pl, 0, st, saved_cb, &done, NULL), 0);
    ck_assert_int_eq(done, 0); /* the copies run on the thread pool */
    ck_assert_int_eq(store_drop_ns(f.st, f.ns, &d), 0);
    f.ns->drops++;
    while (!done)
        uv_run(&f.loop, UV_RUN_ONCE);
    ck_assert_int_eq(st[0], KVT_CHUNK_SKIPPED);
    ck_assert_int_eq(st[1], KVT_CHUNK_SKIPPED);
    ck_assert_uint_eq(lookup_chain(&f, 0, 9, 2), 0);
    ck_assert_uint_eq(f.ns->chunks, 0);
    ck_assert_int_eq(store_check(f.st), 0);
    save_chain(&f, 0, 9, 0, 2, 4096, 0, st); /* after the drop: stored */
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    ck_assert_uint_eq(lookup_chain(&f, 0, 9, 2), 2);
    fixture_fini(&f);
}
END_TEST

START_TEST(store_replicated_one_copy)
{
    fixture_t f;
    uint8_t st[4];
    kvt_wire_hash_t h0 = H(3, 0);
    uint32_t hits[2];
    uint64_t len;

    fixture_init(&f, 1 << 20, 2, true);
    save_chain(&f, 0, 3, 0, 2, 50, 0, st);
    save_chain(&f, 1, 3, 0, 2, 50, 0, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_EXISTS);
    ck_assert_uint_eq(f.ns->chunks, 2);
    ck_assert_ptr_nonnull(store_load(f.st, f.ns, 1, &h0, &len));
    ck_assert_uint_eq(lookup_chain(&f, 1, 3, 2), 2);
    kvt_wire_hash_t h[2] = {H(3, 0), H(3, 1)};
    ck_assert_uint_eq(store_lookup_all(f.st, f.ns, h, 2, false, 0, 0, hits), 2);
    ck_assert_uint_eq(hits[1], 2);
    fixture_fini(&f);
}
END_TEST

/* Random chained saves at 3x capacity: used never exceeds capacity, and every stored chunk at
 * position p > 0 has its predecessor stored (no orphaned suffix ever). */
static void check_no_orphan(const index_entry_t *e, void *arg)
{
    (void)arg;
    if (pos_of(&e->hash) > 0) {
        ck_assert_ptr_nonnull(e->parent);
        ck_assert_uint_eq(pos_of(&e->parent->hash), pos_of(&e->hash) - 1);
        ck_assert_uint_eq(chain_of(&e->parent->hash), chain_of(&e->hash));
    }
}

START_TEST(store_fill_3x_no_orphans)
{
    fixture_t f;
    uint8_t st[64];
    uint64_t saved = 0, cap = 1 << 20;
    uint32_t seed = 12345;

    fixture_init(&f, cap, 1, false);
    for (uint32_t c = 1; saved < 3 * cap; c++) {
        uint32_t n = 1 + (seed = seed * 1103515245u + 12345u) % 8;
        size_t len = 4096 + (seed >> 8) % 20000;
        save_chain(&f, 0, c, 0, n, len, 0, st);
        for (uint32_t i = 0; i < n; i++)
            ck_assert_int_eq(st[i], KVT_CHUNK_STORED);
        saved += n * len;
        if (c % 3 == 0) /* re-read an older chain sometimes */
            lookup_chain(&f, 0, c / 2, 8);
        ck_assert_uint_le(store_stats(f.st)->evictions + f.ns->chunks, 100000);
        ck_assert_int_eq(store_check(f.st), 0);
    }
    ck_assert_uint_gt(store_stats(f.st)->evictions, 0);
    {
        store_ram_stats_t rs;
        store_ram_stats(f.st, 0, &rs);
        ck_assert_uint_le(rs.used_bytes, cap);
        ck_assert_uint_le(rs.resident_bytes, cap + RAM_HDR_BYTES); /* and the header page */
    }
    store_foreach(f.st, check_no_orphan, NULL);
    fixture_fini(&f);
}
END_TEST

START_TEST(store_leased_chain_survives_pressure)
{
    fixture_t f;
    uint8_t st[64];
    kvt_wire_hash_t h[4];

    fixture_init(&f, 1 << 20, 1, false);
    save_chain(&f, 0, 1, 0, 4, 100000, 0, st);
    for (uint32_t i = 0; i < 4; i++)
        h[i] = H(1, i);
    ck_assert_uint_eq(store_lookup(f.st, f.ns, 0, h, 4, true, 100, 0), 4);
    for (uint32_t c = 2; c < 40; c++)
        save_chain(&f, 0, c, 0, 2, 100000, 200, st);
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 4), 4); /* leased until 1100 */
    for (uint32_t c = 40; c < 80; c++)
        save_chain(&f, 0, c, 0, 2, 100000, 1200, st); /* lease expired */
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 4), 0);
    ck_assert_int_eq(store_check(f.st), 0);
    fixture_fini(&f);
}
END_TEST

START_TEST(store_nospace_when_all_leased)
{
    fixture_t f;
    uint8_t st[64];
    kvt_wire_hash_t h[8];

    fixture_init(&f, 1 << 20, 1, false);
    save_chain(&f, 0, 1, 0, 8, 131072, 0, st); /* exactly fills 1 MiB */
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(1, i);
    ck_assert_uint_eq(store_lookup(f.st, f.ns, 0, h, 8, true, 0, 0), 8);
    save_chain(&f, 0, 2, 0, 1, 4096, 10, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_NOSPACE);
    ck_assert_uint_eq(store_stats(f.st)->nospace, 1);
    save_chain(&f, 0, 3, 0, 1, (1 << 20) + 1, 10, st); /* larger than the arena */
    ck_assert_int_eq(st[0], KVT_CHUNK_NOSPACE);
    ck_assert_int_eq(store_check(f.st), 0);
    fixture_fini(&f);
}
END_TEST

/* A save longer than the arena: chunk i-1 is pinned while i is placed, so the saved chain is
 * never cut into orphans by its own evictions; earlier chunks of the same chain go first. */
START_TEST(store_long_save_keeps_chain)
{
    fixture_t f;
    uint8_t st[64];

    fixture_init(&f, 1 << 20, 1, false);
    save_chain(&f, 0, 1, 0, 12, 131072, 0, st);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_int_eq(st[i], KVT_CHUNK_STORED);
    /* chunk 8 needs room: only the leaf (chunk 7) is evictable, and it is pinned; the rest of
     * the save is refused rather than stored as orphans */
    for (uint32_t i = 8; i < 12; i++)
        ck_assert_int_eq(st[i], KVT_CHUNK_NOSPACE);
    ck_assert_int_eq(store_check(f.st), 0);
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 12), 8);
    fixture_fini(&f);
}
END_TEST

/* --- with a disk tier: demotion by reference --- */

typedef struct {
    fixture_t f;
    char dir[64];
} dfixture_t;

/* 1 MiB of RAM (16 chunks of 64 KiB) over a disk tier in a temp directory; the cleaner keeps
 * clean_target bytes free or clean (0: automatic, half the RAM: 8 chunks). */
static void dfixture_init(dfixture_t *d, uint64_t clean_target)
{
    gates_cfg_t g;
    fixture_t *f = &d->f;

    snprintf(d->dir, sizeof d->dir, "/tmp/kvt-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->dir));
    config_defaults(&f->cfg);
    f->cfg.ram.capacity_bytes = 1 << 20;
    f->cfg.ram.arena_path[0] = '\0';
    f->cfg.ram.max_chunk_bytes = 1 << 20;
    f->cfg.disk.enabled = true;
    snprintf(f->cfg.disk.dir, sizeof f->cfg.disk.dir, "%s", d->dir);
    f->cfg.disk.capacity_bytes = 8 << 20;
    f->cfg.disk.segment_bytes = 2 << 20;
    f->cfg.disk.write_buffer_bytes = 1 << 20; /* 8 records of 64 KiB in one batch */
    f->cfg.disk.compression = CODEC_MODE_OFF;
    f->cfg.disk.fsync = CONFIG_FSYNC_NONE;
    f->cfg.ram.clean_target_bytes = clean_target;
    g = f->cfg.gates;
    f->nst = ns_table_new(NS_MAX);
    ck_assert_int_eq(
        ns_declare(
            f->nst,
            &(ns_ident_t){
                .model = "m", .model_len = 1, .fingerprint = 42, .world = 1, .chunk_tokens = 16},
            &g, &f->ns),
        0);
    ck_assert_int_eq(store_new(&f->cfg, f->nst, &f->st), 0);
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    ck_assert_int_eq(store_attach_disk(f->st, &f->loop), 0);
}

static void dfixture_fini(dfixture_t *d)
{
    char cmd[128];

    fixture_fini(&d->f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void run_until_flushed(fixture_t *f)
{
    store_disk_stats_t ds;

    for (;;) {
        store_disk_stats(f->st, &ds);
        if (ds.counts.wbuf == 0 && ds.tier.write_buffer_bytes == 0)
            return;
        uv_run(&f->loop, UV_RUN_ONCE);
    }
}

/* A disk fixture with chains 1-4 (8 chunks of 64 KiB each) saved through its 1 MiB of RAM, each
 * save's write-back flushed before the next: chains 1 and 2 end up only on disk. */
static void dfixture_paced(dfixture_t *d, uint64_t clean_target, uint8_t *st)
{
    dfixture_init(d, clean_target);
    for (uint32_t c = 1; c <= 4; c++) {
        save_chain(&d->f, 0, c, 0, 8, 65536, 0, st);
        run_until_flushed(&d->f);
    }
}

typedef struct {
    store_loaded_t got[8];
    int n, done;
} loads_t;

static void loaded_cb(void *arg, size_t i, const store_loaded_t *c)
{
    loads_t *l = arg;

    l->got[i] = *c;
    l->n++;
}

static void loads_done_cb(void *arg)
{
    ((loads_t *)arg)->done = 1;
}

/* Bytes of a chunk in RAM, writable: the test scribbles over them as a client
 * mapping the arena could. */
static uint8_t *arena_bytes(fixture_t *f, uint32_t c, uint32_t pos)
{
    kvt_wire_hash_t h = H(c, pos);
    uint64_t len;

    return (uint8_t *)store_load(f->st, f->ns, 0, &h, &len);
}

/*
 * Write-back: once more than half the RAM is dirty, the cleaner writes the oldest saves by
 * reference while they stay in RAM; a chunk lent while its write is in flight is unaffected;
 * a chunk whose bytes changed after they were committed is never written and is removed; a
 * chunk reported corrupt while its write is in flight goes once both are done. Evicting a clean
 * chunk costs nothing and drops nothing. store_check() (index, dirty FIFO and arena accounting)
 * holds at every step.
 */
START_TEST(store_write_back_lifecycle)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h7 = H(1, 7), h6 = H(1, 6), h5 = H(1, 5);
    store_ram_stats_t rs;
    store_disk_stats_t ds;

    dfixture_init(&d, 0);
    save_chain(f, 0, 1, 0, 8, 65536, 0, st); /* half the arena dirty: nothing to write yet */
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(rs.clean_target_bytes, 512 << 10);
    ck_assert_uint_eq(rs.dirty_bytes, 8 * 65536);
    ck_assert_uint_eq(ds.counts.wbuf, 0);
    /* the second half makes the arena all dirty: when it is published the cleaner hands the
     * oldest half (chain 1) to the disk, before any flush starts (the kick is deferred) */
    save_chain(f, 0, 2, 0, 8, 65536, 0, st);
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(rs.dirty_bytes, 8 * 65536);
    ck_assert_uint_eq(ds.counts.wbuf, 8);
    ck_assert_uint_eq(rs.chunks, 16); /* still in RAM */
    ck_assert_int_eq(store_check(f->st), 0);
    /* a chunk being written is lent like any RAM chunk */
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h7, 1, false, loaded_cb, loads_done_cb, &l, NULL), 0);
    ck_assert_int_eq(l.done, 1);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_LENT);
    ck_assert_uint_eq(((uint8_t *)l.got[0].data)[100], (uint8_t)(1 * 31 + 7 * 7));
    /* chunk 6 changes under the daemon (a client scribbling the arena): never written */
    arena_bytes(f, 1, 6)[1000] ^= 0xff;
    /* chunk 5 changes too and a client reports it while its write is in flight */
    arena_bytes(f, 1, 5)[2000] ^= 0xff;
    store_verify(f->st, f->ns, 0, &h5);
    run_until_flushed(f);
    for (int k = 0; k < 50; k++) /* the verification may finish after the flush */
        uv_run(&f->loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(store_check(f->st), 0);
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(rs.verify_drops, 2);
    ck_assert_uint_eq(rs.verifies, 1);
    ck_assert_uint_eq(ds.tier.verify_drops, 2);
    ck_assert_uint_eq(ds.counts.demoted, 6);
    ck_assert_uint_eq(ds.counts.chunks, 6);
    ck_assert_ptr_null(store_find(f->st, f->ns, 0, &h6));
    ck_assert_ptr_null(store_find(f->st, f->ns, 0, &h5));
    /* chunk 7, lent throughout, is clean now and still holds its bytes */
    {
        store_chunk_t *c = store_find(f->st, f->ns, 0, &h7);
        uint64_t len;
        const uint8_t *p;
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_eq(c, l.got[0].chunk);
        store_unpin(f->st, c);
        p = store_load(f->st, f->ns, 0, &h7, &len);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(p[65535], (uint8_t)(1 * 31 + 7 * 7));
    }
    /* chunks 5 and 6 are gone, so chain 1 is a prefix of 5 (0..4 stored) */
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 5);
    /* a third chain fills the arena again: it evicts clean chunks only, dropping nothing */
    save_chain(f, 0, 3, 0, 8, 65536, 0, st);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_int_eq(st[i], KVT_CHUNK_STORED);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_gt(ds.counts.demoted_clean, 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 5); /* from disk now, in part */
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* A chain the cleaner has written up to its middle (its head clean, its tail dirty) in a full
 * RAM tier: a save that needs room releases the RAM copy of the nearest clean ancestor (still on
 * disk, chunk 7: the head stays in RAM) rather than drop the dirty tail, which has no other copy;
 * but a prefix used after the tail is not taken: then the cold tail goes, as before. */
START_TEST(store_eviction_spares_a_dirty_tail)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    store_disk_stats_t ds;

    dfixture_init(&d, 0);                     /* 1 MiB of RAM, the cleaner keeps half of it clean */
    save_chain(f, 0, 1, 0, 16, 65536, 0, st); /* fills the RAM */
    run_until_flushed(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.demoted, 8); /* chunks 0-7 clean, 8-15 dirty */
    save_chain(f, 0, 2, 0, 1, 65536, 0, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_eq(ds.counts.demoted_clean, 1);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 16), 16); /* chunk 7 on disk, nothing lost */
    ck_assert_ptr_nonnull(arena_bytes(f, 1, 0));      /* the head still in RAM */
    ck_assert_ptr_null(arena_bytes(f, 1, 7));
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);

    /* the same, but chunks 0-7 are used after the tail (a lookup of that prefix alone) */
    dfixture_init(&d, 0);
    save_chain(f, 0, 1, 0, 16, 65536, 0, st);
    run_until_flushed(f);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    save_chain(f, 0, 2, 0, 1, 65536, 0, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.refused, 1); /* the cold tail, chunk 15 */
    ck_assert_uint_eq(ds.counts.demoted_clean, 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 16), 15);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/*
 * A burst faster than the disk: when the RAM tier is full and the coldest chunks are still being
 * written, they are spilled (out of the RAM tier, into the arena's write headroom, still
 * readable) instead of dropping a chunk; each leaves RAM when its write commits, or when the
 * reader that holds it then lets it go. store_check() holds at every step.
 */
START_TEST(store_burst_spills_writes_in_flight)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h[8], h7 = H(1, 7);
    kvt_frame_t pl[8];
    uint8_t *buf = malloc(8 * 65536);
    store_ram_stats_t rs;
    store_disk_stats_t ds;
    int done = 0;

    dfixture_init(&d, 0);
    save_chain(f, 0, 1, 0, 8, 65536, 0, st);
    save_chain(f, 0, 2, 0, 8, 65536, 0, st); /* the cleaner hands chain 1 to the disk */
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.wbuf, 8);
    /* chain 3 arrives before the flush starts: the RAM tier is full, chain 1 is in flight */
    for (uint32_t i = 0; i < 8; i++) {
        h[i] = H(3, i);
        memset(buf + i * 65536, (int)(3 * 31 + i * 7), 65536);
        pl[i] = (kvt_frame_t){.data = buf + i * 65536, .len = 65536};
    }
    ck_assert_int_eq(store_save(f->st, f->ns, 0, NULL, h, 8, pl, 0, st, saved_cb, &done, NULL), 0);
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(rs.arena_bytes, (3u << 20) + RAM_HDR_BYTES); /* 1 MiB + 2 batches of 1 MiB */
    ck_assert_uint_eq(rs.demoting_bytes, 8 * 65536);
    ck_assert_uint_le(rs.used_bytes, rs.capacity_bytes);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_int_eq(store_check(f->st), 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8); /* spilled chunks are still there */
    /* a reader takes spilled chunk 7 of chain 1 before its write commits */
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h7, 1, false, loaded_cb, loads_done_cb, &l, NULL), 0);
    ck_assert_int_eq(l.done, 1);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_LENT);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
    for (uint32_t i = 0; i < 8; i++)
        ck_assert_int_eq(st[i], KVT_CHUNK_STORED);
    run_until_flushed(f);
    ck_assert_int_eq(store_check(f->st), 0);
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(rs.demoting_bytes, 65536); /* the chunk the reader holds */
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_eq(ds.counts.chunks, 16); /* chain 1, and chain 2 once chain 3 came */
    ck_assert_uint_eq(rs.chunks, 17);        /* chains 2 and 3, and the chunk the reader holds */
    ck_assert_uint_le(rs.used_bytes, rs.capacity_bytes);
    ck_assert_uint_eq(((uint8_t *)l.got[0].data)[65535], (uint8_t)(1 * 31 + 7 * 7));
    store_unpin(f->st, l.got[0].chunk); /* written and let go: it leaves RAM */
    store_ram_stats(f->st, 0, &rs);
    ck_assert_uint_eq(rs.demoting_bytes, 0);
    ck_assert_uint_eq(rs.chunks, 16);
    ck_assert_int_eq(store_check(f->st), 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8); /* from disk */
    /* the next save evicts the clean chunk first: nothing is dropped */
    save_chain(f, 0, 4, 0, 1, 65536, 0, st);
    store_ram_stats(f->st, 0, &rs);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_le(rs.used_bytes, rs.capacity_bytes);
    ck_assert_int_eq(store_check(f->st), 0);
    free(buf);
    dfixture_fini(&d);
}
END_TEST

/* A disk-only chunk is read straight into a new arena extent: the load lends it from there. */
START_TEST(store_disk_read_lands_in_arena)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h[8];
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(1, i);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, h, 8, false, loaded_cb, loads_done_cb, &l, NULL), 0);
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    ck_assert_int_eq(l.n, 8);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_gt(ds.counts.promoted, 0);
    ck_assert_uint_eq(ds.counts.refused, 0);
    for (uint32_t i = 0; i < 8; i++) {
        ck_assert_int_eq(l.got[i].kind, STORE_LOADED_LENT);
        ck_assert_uint_eq(((uint8_t *)l.got[i].data)[4097], (uint8_t)(1 * 31 + i * 7));
        ck_assert_uint_eq(l.got[i].csum, store_chunk_csum(l.got[i].chunk));
        store_unpin(f->st, l.got[i].chunk);
    }
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

static void run_until_read(fixture_t *f)
{
    while (store_disk_reads(f->st) > 0)
        uv_run(&f->loop, UV_RUN_ONCE);
}

/*
 * Read-ahead (store.h): a lookup whose hit prefix is only on disk reads it into RAM, in chain
 * order and within disk.prefetch_bytes; the load that follows reads nothing more (every chunk
 * is lent at once) and counts as served by the disk. A second lookup of the same chain starts
 * nothing. Over the budget the rest is skipped and its load reads it as before.
 */
START_TEST(store_lookup_reads_ahead)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h[8];
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 0);
    ck_assert_uint_eq(ds.counts.promoted, 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_gt(ds.counts.prefetches, 0); /* started by the lookup itself */
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 8);
    ck_assert_uint_eq(ds.counts.promoted, 8);
    ck_assert_uint_eq(ds.counts.prefetch_skipped, 0);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8); /* in RAM now: nothing to read */
    ck_assert_uint_eq(store_disk_reads(f->st), 0);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(1, i);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, h, 8, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    ck_assert_int_eq(l.done, 1); /* answered in the call: no disk read */
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 8);
    ck_assert_uint_eq(ds.counts.hits, 8);
    for (uint32_t i = 0; i < 8; i++) {
        ck_assert_int_eq(l.got[i].kind, STORE_LOADED_LENT);
        ck_assert_uint_eq(((uint8_t *)l.got[i].data)[4097], (uint8_t)(1 * 31 + i * 7));
        store_unpin(f->st, l.got[i].chunk);
    }
    /* a budget of two chunks: the rest is skipped, and its load reads it */
    f->cfg.disk.prefetch_bytes = 2 * 65536;
    ck_assert_uint_eq(lookup_chain(f, 0, 2, 8), 8);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_skipped, 6);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 10);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(2, i);
    l = (loads_t){0};
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, h, 8, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 10);
    ck_assert_uint_eq(ds.counts.hits, 16);
    ck_assert_uint_eq(ds.counts.promoted, 16);
    for (uint32_t i = 0; i < 8; i++) {
        ck_assert_int_eq(l.got[i].kind, STORE_LOADED_LENT);
        ck_assert_uint_eq(((uint8_t *)l.got[i].data)[4097], (uint8_t)(2 * 31 + i * 7));
        store_unpin(f->st, l.got[i].chunk);
    }
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

static void load_one(fixture_t *f, uint32_t c, uint32_t pos, bool *from_ram)
{
    kvt_wire_hash_t h = H(c, pos);
    loads_t l = {0};

    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h, 1, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    *from_ram = l.done == 1;
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_LENT);
    ck_assert_uint_eq(((uint8_t *)l.got[0].data)[4097], (uint8_t)(c * 31 + pos * 7));
    store_unpin(f->st, l.got[0].chunk);
}

/* Chain read-ahead: a load that reads a chunk from disk queues the records after it in its
 * segment that continue its chain (not the next chain's first chunk), so a client loading a
 * chain chunk by chunk finds the next one in RAM. */
START_TEST(store_load_reads_the_chain_ahead)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    store_disk_stats_t ds;
    bool ram;

    dfixture_paced(&d, 512 << 10, st);
    load_one(f, 1, 7, &ram); /* the chain's last: the next record starts chain 2 */
    ck_assert(!ram);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 0);
    load_one(f, 1, 0, &ram); /* chunks 1-6 follow it (7 is in RAM) */
    ck_assert(!ram);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 6);
    for (uint32_t i = 1; i <= 6; i++) {
        load_one(f, 1, i, &ram);
        ck_assert_msg(ram, "chunk %u was not read ahead", i);
    }
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 6);
    ck_assert_uint_eq(ds.counts.hits, 8);
    ck_assert_uint_eq(ds.counts.promoted, 8);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* A read-ahead in flight when its namespace is dropped, or when its chunk is loaded and
 * released: the extent it lands in is freed once, never reused while the worker writes into it
 * (ASan), and store_check() holds. */
START_TEST(store_read_ahead_races)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h = H(2, 0);
    store_drop_t out;
    store_ram_stats_t rs;
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    /* chain 2: a load joins the read-ahead of its first chunk in flight */
    ck_assert_uint_eq(lookup_chain(f, 0, 2, 8), 8);
    ck_assert_uint_gt(store_disk_reads(f->st), 0);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h, 1, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    ck_assert_int_eq(l.done, 0);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.read_joins, 1);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 0); /* counted when the read serves it */
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 1);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_LENT);
    ck_assert_uint_eq(((uint8_t *)l.got[0].data)[4097], (uint8_t)(2 * 31));
    store_unpin(f->st, l.got[0].chunk);
    run_until_read(f);
    /* chain 1: dropped with its read-aheads in flight */
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    ck_assert_uint_gt(store_disk_reads(f->st), 0);
    ck_assert_int_eq(store_drop_ns(f->st, f->ns, &out), 0);
    ck_assert_uint_eq(out.chunks, 32);
    run_until_read(f);
    run_until_flushed(f); /* writes in flight keep their dropped chunks until they commit */
    ck_assert_int_eq(store_check(f->st), 0);
    store_ram_stats(f->st, 0, &rs);
    ck_assert_uint_eq(rs.chunks, 0);
    ck_assert_uint_eq(rs.promoting_bytes, 0);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 0);
    dfixture_fini(&d);
}
END_TEST

/* A prompt lookup's chunks the engine holds in GPU memory (ahead_from) are not read ahead. */
START_TEST(store_read_ahead_skips_what_hbm_holds)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    kvt_wire_hash_t h[8];
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(1, i);
    ck_assert_uint_eq(store_lookup(f->st, f->ns, 0, h, 8, false, 0, 5), 8);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 3); /* chunks 5, 6, 7 */
    ck_assert_uint_eq(store_lookup(f->st, f->ns, 0, h, 8, false, 0, UINT32_MAX), 8);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 3);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* Read-aheads leave a read slot free: a load's own read starts at once, never queued behind
 * them. */
START_TEST(store_read_ahead_leaves_a_slot)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h = H(2, 0);
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    f->cfg.disk.max_reads_in_flight = 4; /* a live key */
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    ck_assert_uint_eq(store_disk_reads(f->st), 3);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h, 1, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.tier.reads_queued, 0);
    ck_assert_uint_eq(ds.tier.reads_in_flight, 4);
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_LENT);
    store_unpin(f->st, l.got[0].chunk);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    /* chain 1 three at a time, and the rest of chain 2 after the load's read (chain read-ahead) */
    ck_assert_uint_eq(ds.counts.prefetches, 8 + 7);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* A load that joined a read-ahead and then missed (its namespace dropped meanwhile) is no
 * prefetch hit: prefetch_hits never exceeds hits. */
START_TEST(store_read_ahead_joined_then_dropped)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h = H(1, 0);
    store_drop_t out;
    store_disk_stats_t ds;

    dfixture_paced(&d, 512 << 10, st);
    ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, &h, 1, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    ck_assert_int_eq(store_drop_ns(f->st, f->ns, &out), 0);
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    run_until_read(f);
    ck_assert_int_eq(l.got[0].kind, STORE_LOADED_MISS);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetch_hits, 0);
    ck_assert_uint_le(ds.counts.prefetch_hits, ds.counts.hits);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* RAM pinned by clients is no room for a read-ahead: with chain 3 held by a reader and chain 4
 * clean, a lookup of disk-only chain 1 must leave a save its room (the save is stored as it is
 * without the lookup). */
static void pinned_room_save(bool with_lookup, uint8_t *out)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    uint8_t st[16];
    loads_t l = {0};
    kvt_wire_hash_t h[8];

    dfixture_paced(&d, 1 << 20, st);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(3, i);
    ck_assert_int_eq(
        store_load_batch(f->st, f->ns, 0, h, 8, true, loaded_cb, loads_done_cb, &l, NULL), 0);
    while (!l.done)
        uv_run(&f->loop, UV_RUN_ONCE);
    run_until_read(f);
    if (with_lookup)
        ck_assert_uint_eq(lookup_chain(f, 0, 1, 8), 8);
    save_chain(f, 0, 9, 0, 4, 65536, 0, out);
    run_until_read(f);
    for (uint32_t i = 0; i < 8; i++)
        if (l.got[i].kind == STORE_LOADED_LENT)
            store_unpin(f->st, l.got[i].chunk);
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}

START_TEST(store_read_ahead_leaves_pinned_room)
{
    uint8_t a[4], b[4];

    pinned_room_save(false, a);
    pinned_room_save(true, b);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(a[i], KVT_CHUNK_STORED);
        ck_assert_int_eq(b[i], KVT_CHUNK_STORED);
    }
}
END_TEST

/* Saves chunks [0, n) of chain c for rank r of namespace ns (64 KiB each), then flushes. */
static void save_ns_chain(fixture_t *f, ns_t *ns, uint16_t r, uint32_t c, uint32_t n)
{
    kvt_wire_hash_t h[8];
    kvt_frame_t pl[8];
    uint8_t st[8], *buf = malloc(8 * 65536);
    int done = 0;

    for (uint32_t i = 0; i < n; i++) {
        h[i] = H(c, i);
        memset(buf + i * 65536, (int)(c * 31 + i * 7 + r), 65536);
        pl[i] = (kvt_frame_t){.data = buf + i * 65536, .len = 65536};
    }
    ck_assert_int_eq(store_save(f->st, ns, r, NULL, h, n, pl, 0, st, saved_cb, &done, NULL), 0);
    while (!done)
        uv_run(&f->loop, UV_RUN_ONCE);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_int_eq(st[i], KVT_CHUNK_STORED);
    free(buf);
    run_until_flushed(f);
}

/* An all-ranks lookup reads ahead within the prefix it answers (the minimum over ranks): rank
 * 0 holds 8 chunks of the chain, rank 1 only 4, all on disk; the lookup reads 4 of each rank
 * ahead, not rank 0's other 4 that no rank will load. */
START_TEST(store_all_ranks_read_ahead_within_the_answer)
{
    dfixture_t d;
    fixture_t *f = &d.f;
    gates_cfg_t g;
    ns_t *tp;
    kvt_wire_hash_t h[8];
    uint32_t hits[2];
    store_disk_stats_t ds;

    dfixture_init(&d, 512 << 10);
    g = f->cfg.gates;
    ck_assert_int_eq(
        ns_declare(
            f->nst,
            &(ns_ident_t){
                .model = "tp", .model_len = 2, .fingerprint = 44, .world = 2, .chunk_tokens = 16},
            &g, &tp),
        0);
    save_ns_chain(f, tp, 0, 9, 8);
    save_ns_chain(f, tp, 1, 9, 4);
    save_ns_chain(f, tp, 1, 10, 4);   /* 8 per save keeps the cleaner's pace: nothing dropped */
    for (uint32_t c = 1; c <= 3; c++) /* 24 chunks more through 16: chain 9 only on disk */
        save_ns_chain(f, f->ns, 0, c, 8);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.refused, 0);
    ck_assert_uint_eq(ds.counts.prefetches, 0);
    for (uint32_t i = 0; i < 8; i++)
        h[i] = H(9, i);
    for (uint16_t r = 0; r < 2; r++) /* the premise: nothing of chain 9 is in RAM */
        for (uint32_t i = 0; i < (r == 0 ? 8u : 4u); i++)
            ck_assert(!(store_find(f->st, tp, r, &h[i])->flags & INDEX_F_RAM));
    ck_assert_uint_eq(store_lookup_all(f->st, tp, h, 8, false, 0, 0, hits), 4);
    ck_assert_uint_eq(hits[0], 8);
    ck_assert_uint_eq(hits[1], 4);
    run_until_read(f);
    store_disk_stats(f->st, &ds);
    ck_assert_uint_eq(ds.counts.prefetches, 8); /* 4 of each rank */
    for (uint16_t r = 0; r < 2; r++)
        for (uint32_t i = 0; i < 4; i++)
            ck_assert(store_find(f->st, tp, r, &h[i])->flags & INDEX_F_RAM);
    for (uint32_t i = 4; i < 8; i++)
        ck_assert(!(store_find(f->st, tp, 0, &h[i])->flags & INDEX_F_RAM));
    ck_assert_int_eq(store_check(f->st), 0);
    dfixture_fini(&d);
}
END_TEST

/* A chain saved in two requests pipelined (the second declares the first's last chunk as its
 * parent while the first is still being hashed, and needs no hashing itself: a commit with the
 * writer's checksums) publishes in chain order: the second waits, and its chunk is linked to
 * its parent, not stored as an orphan (which eviction would take first). */
START_TEST(store_pipelined_put_waits_for_its_parent)
{
    fixture_t f;
    uint8_t st1[1], st2[1], csum[8] = {0};
    int done1 = 0, done2 = 0;
    kvt_wire_hash_t a = H(7, 0), b = H(7, 1);
    uint8_t *buf = malloc(1 << 20);
    kvt_frame_t pl = {.data = buf, .len = 1 << 20};
    uint64_t off, len = 65536;
    index_entry_t *ea, *eb;

    fixture_init(&f, 4 << 20, 1, false);
    memset(buf, 7, 1 << 20);
    ck_assert_int_eq(store_save(f.st, f.ns, 0, NULL, &a, 1, &pl, 0, st1, saved_cb, &done1, NULL),
                     0);
    ck_assert_int_eq(done1, 0); /* on the thread pool */
    ck_assert_int_eq(store_reserve(f.st, len, NULL, 0, &off), 0);
    ck_assert_int_eq(
        store_commit(f.st, f.ns, 0, &a, &b, 1, &off, &len, csum, st2, saved_cb, &done2, NULL), 0);
    ck_assert_int_eq(done2, 0); /* nothing to hash, but its parent is not published yet */
    while (!done1 || !done2)
        uv_run(&f.loop, UV_RUN_ONCE);
    ck_assert_int_eq(st1[0], KVT_CHUNK_STORED);
    ck_assert_int_eq(st2[0], KVT_CHUNK_STORED);
    ea = store_find(f.st, f.ns, 0, &a);
    eb = store_find(f.st, f.ns, 0, &b);
    ck_assert_ptr_nonnull(ea);
    ck_assert_ptr_nonnull(eb);
    ck_assert_ptr_eq(eb->parent, ea);
    ck_assert(!(eb->flags & INDEX_F_ORPHAN));
    ck_assert_int_eq(store_check(f.st), 0);
    free(buf);
    fixture_fini(&f);
}
END_TEST

/* A drop takes every chunk of the namespace; a pinned one leaves the index at once and keeps
 * its RAM until its last unpin; another namespace and later saves are untouched. */
START_TEST(store_drop_ns_pinned_and_others)
{
    fixture_t f;
    uint8_t st[8];
    kvt_wire_hash_t h1 = H(1, 1);
    store_drop_t d;
    store_chunk_t *pinned;
    ns_t *other;
    gates_cfg_t g;
    uint64_t len, used;

    fixture_init(&f, 1 << 20, 1, false);
    g = f.cfg.gates;
    ck_assert_int_eq(
        ns_declare(
            f.nst,
            &(ns_ident_t){
                .model = "o", .model_len = 1, .fingerprint = 43, .world = 1, .chunk_tokens = 16},
            &g, &other),
        0);
    save_chain(&f, 0, 1, 0, 4, 4096, 0, st);
    {
        static const uint8_t zeros[4096];
        kvt_frame_t pl = {.data = zeros, .len = sizeof zeros};
        int done = 0;
        ck_assert_int_eq(
            store_save(f.st, other, 0, NULL, &h1, 1, &pl, 0, st, saved_cb, &done, NULL), 0);
        while (!done)
            uv_run(&f.loop, UV_RUN_ONCE);
    }
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    pinned = store_find(f.st, f.ns, 0, &h1);
    ck_assert_ptr_nonnull(pinned);
    store_pin(f.st, pinned);
    used = store_stats(f.st)->stored;

    ck_assert_int_eq(store_drop_ns(f.st, f.ns, &d), 0);
    ck_assert_uint_eq(d.chunks, 4);
    ck_assert_uint_eq(d.bytes, 4 * 4096);
    ck_assert_uint_eq(d.ram_chunks, 4);
    ck_assert_uint_eq(d.pinned, 1);
    ck_assert_uint_eq(d.disk_chunks, 0);
    ck_assert_uint_eq(f.ns->chunks, 0);
    ck_assert_uint_eq(f.ns->bytes, 0);
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 4), 0);
    ck_assert_ptr_null(store_find(f.st, f.ns, 0, &h1));
    ck_assert_ptr_nonnull(store_load(f.st, other, 0, &h1, &len));
    ck_assert_int_eq(store_check(f.st), 0);
    /* the pinned chunk's bytes are still there for its holder */
    ck_assert_uint_eq(store_chunk_len(pinned), 4096);
    {
        store_ram_stats_t rs;
        store_ram_stats(f.st, 0, &rs);
        ck_assert_uint_eq(rs.chunks, 2); /* other's chunk and the pinned one */
        ck_assert_uint_eq(rs.index_chunks, 1);
        store_unpin(f.st, pinned);
        store_ram_stats(f.st, 0, &rs);
        ck_assert_uint_eq(rs.chunks, 1);
        ck_assert_uint_eq(rs.stored_bytes, 4096);
    }
    ck_assert_int_eq(store_check(f.st), 0);
    /* the namespace takes new saves */
    save_chain(&f, 0, 1, 0, 2, 4096, 0, st);
    ck_assert_int_eq(st[0], KVT_CHUNK_STORED);
    ck_assert_uint_eq(lookup_chain(&f, 0, 1, 4), 2);
    ck_assert_uint_eq(used, store_stats(f.st)->stored - 2);
    ck_assert_int_eq(store_check(f.st), 0);
    fixture_fini(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("store");
    TCase *ti = tcase_create("index");
    TCase *ts = tcase_create("store");

    tcase_add_test(ti, index_add_find_remove);
    tcase_add_test(ti, index_grows);
    tcase_add_test(ti, index_group_keeps_the_flags);
    tcase_add_test(ti, eviction_order_tails_of_lru_chain);
    tcase_add_test(ti, eviction_shared_prefix);
    tcase_add_test(ti, lease_blocks_eviction_and_expires);
    tcase_add_test(ti, orphan_goes_first);
    tcase_add_test(ts, store_prefix_semantics);
    tcase_add_test(ts, store_ranks_and_all_ranks_min);
    tcase_add_test(ts, store_save_in_flight_at_a_drop_is_not_stored);
    tcase_add_test(ts, store_all_ranks_lookup_orders_the_chain_it_walked);
    tcase_add_test(ts, store_replicated_one_copy);
    tcase_add_test(ts, store_fill_3x_no_orphans);
    tcase_add_test(ts, store_leased_chain_survives_pressure);
    tcase_add_test(ts, store_nospace_when_all_leased);
    tcase_add_test(ts, store_long_save_keeps_chain);
    tcase_add_test(ts, store_write_back_lifecycle);
    tcase_add_test(ts, store_burst_spills_writes_in_flight);
    tcase_add_test(ts, store_eviction_spares_a_dirty_tail);
    tcase_add_test(ts, store_lookup_reads_ahead);
    tcase_add_test(ts, store_read_ahead_races);
    tcase_add_test(ts, store_load_reads_the_chain_ahead);
    tcase_add_test(ts, store_read_ahead_leaves_a_slot);
    tcase_add_test(ts, store_read_ahead_skips_what_hbm_holds);
    tcase_add_test(ts, store_read_ahead_joined_then_dropped);
    tcase_add_test(ts, store_read_ahead_leaves_pinned_room);
    tcase_add_test(ts, store_pipelined_put_waits_for_its_parent);
    tcase_add_test(ts, store_all_ranks_read_ahead_within_the_answer);
    tcase_add_test(ts, store_disk_read_lands_in_arena);
    tcase_add_test(ts, store_drop_ns_pinned_and_others);
    suite_add_tcase(s, ti);
    suite_add_tcase(s, ts);
    return s;
}

const check_program_t check_program = {.suite = suite};
