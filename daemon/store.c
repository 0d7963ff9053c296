/*
 * store.c - chunk storage semantics over index.c and ram.c (see store.h).
 *
 * Design notes:
 *   - A chunk's bytes are copied once, from the received ZeroMQ frame into the arena (or written
 *     there by a shared-memory client); a load (store_load_batch) hands out the arena bytes of
 *     a RAM chunk pinned, for the caller to lend to its reply frame, and chunks read from disk
 *     as buffers the caller owns.
 *   - Lifetime: only this file pins and frees entries (store_pin/store_unpin). A pinned entry
 *     is never evicted, reclaimed from disk nor removed; one whose every copy is lost while it
 *     is pinned (a failed checksum, a failed flush) stays "tierless" (absent for lookups) and
 *     leaves the index with its last pin.
 *   - During a save the predecessor of the chunk being placed is pinned, so eviction made for
 *     chunk i can never take chunk i-1 and turn chunk i into an orphan.
 *   - Eviction scans at most STORE_VICTIM_SCAN leaves from the cold end per victim, so a large
 *     crowd of leased leaves costs bounded work; past it the chunk is NOSPACE.
 *   - Disk tier (store.h): the store keeps, per disk segment, a list of the entries whose disk
 *     copy is in it (the segment's user pointer, disk.h), so reclaiming a segment costs
 *     O(its records). A demoted chunk carries a write-buffer ticket (wseq); the commit of a flush
 *     applies only to the entry that still holds that ticket, and a finished read is promoted
 *     only if the entry still points at the same (segment, offset): the generation checks.
 *   - Counting: ram.hits/misses keep their meaning (chunks asked by lookups and loads, found in
 *     the index - any tier - or not); disk.hits counts load chunks served from the disk tier
 *     (write buffer or a verified read), disk.misses loads that missed RAM and that the disk
 *     could not serve (absent, failed checksum, cancelled).
 *   - Status: plain structs (store_ram_stats, store_disk_stats); stats.c renders them.
 * Threads: loop thread only.
 */
#include "store.h"

#include "disk.h"
#include "drops.h"
#include "index.h"
#include "log.h"
#include "ram.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define STORE_VICTIM_SCAN 4096u
#define STORE_PERSIST_MS 20000u /* shutdown: how long RAM-only chunks may take to reach disk */
#define STORE_PERSIST_RETRY_MS 5u

typedef struct {
    uint32_t ns;
    uint16_t rank;
    kvt_wire_hash_t hash;
} persist_key_t;

typedef struct {
    uint32_t ns;
    uint16_t rank;
    kvt_wire_hash_t hash;
    kvt_wire_hash_t parent;
} relink_t;

struct store {
    ns_table_t *nst;
    index_t *ix;
    ram_t *ram;
    uint64_t stored_bytes; /* payload bytes resident in RAM */
    uint64_t ram_chunks;
    store_stats_t st;
    const config_t *cfg;
    uv_loop_t *loop;
    disk_t *disk;
    int disk_error;
    bool closing;
    store_disk_counts_t dk;
    bool nospace_held;       /* the last allocation that failed did so because of holds */
    uint64_t nospace_log_ms; /* when ram_nospace was last logged (once a second at most) */
    drops_t *drops;          /* tombstones of dropped namespaces (with the disk tier) */
    uint64_t last_seq;       /* the last write-buffer ticket issued */
    uint64_t done_seq;       /* the last one whose flush finished */
    index_entry_t *limbo;    /* dropped while pinned: unindexed, freed at the last unpin */
    relink_t *relink;        /* recovery only */
    size_t nrelink, relinkcap;
    /* shutdown: RAM-only chunks still to be written (keys: entries may go meanwhile) */
    uv_timer_t persist_timer; /* initialised when the disk tier is attached */
    persist_key_t *persist;
    size_t npersist, persist_next;
    uint64_t persist_deadline, persist_start, persisted;
    void (*close_done)(void *arg);
    void *close_arg;
};

int store_new(const config_t *cfg, ns_table_t *nst, store_t **out)
{
    store_t *s = calloc(1, sizeof *s);
    int rc;

    if (s == NULL)
        return -ENOMEM;
    s->nst = nst;
    s->cfg = cfg;
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
    disk_destroy(&s->disk);
    drops_destroy(&s->drops);
    while (s->limbo != NULL) { /* every holder returned its pins before (server_free) */
        index_entry_t *e = s->limbo;
        s->limbo = e->lru_next;
        index_entry_free(e);
    }
    index_destroy(&s->ix);
    ram_destroy(&s->ram);
    free(s->relink);
    free(s);
    *ps = NULL;
}

/* An entry none of whose copies exists any more (pinned while its disk record failed its
 * checksum): it counts as absent and leaves the index with its last pin. */
static bool tierless(const index_entry_t *e)
{
    return !(e->flags & (INDEX_F_RAM | INDEX_F_WBUF | INDEX_F_DISK));
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
        if (e == NULL || tierless(e))
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
        index_lease(index_find(s->ix, ns->id, r, &k), now_ms, s->cfg->ram.lease_ms);
    }
}

uint32_t store_lookup(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                      bool lease, uint64_t now_ms)
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

void store_load_cost(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                     size_t n, uint64_t now_ms, store_cost_t *out)
{
    *out = (store_cost_t){0};
    for (size_t i = 0; i < n; i++) {
        const index_entry_t *e = store_find(s, ns, rank, &h[i]);
        if (e == NULL || tierless(e))
            continue;
        if (e->flags & INDEX_F_RAM) {
            out->ram_bytes += e->len;
            /* held already: leased without a disk copy (eviction cannot take it anyway) */
            if (!index_leased(e, now_ms) || (e->flags & INDEX_F_DISK))
                out->ram_new_bytes += e->len;
        } else if (e->flags & INDEX_F_WBUF) {
            out->copy_bytes += e->len;
        } else if ((e->flags & INDEX_F_DISK) && s->disk != NULL && !s->closing) {
            out->copy_bytes += e->len;
            out->disk_reads++;
        }
    }
}

/* Calls fn for the chunks of the prefix h[0..hit) of rank (or of every rank: KVT_RANK_ALL). */
static void prefix_each(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        uint32_t hit, void (*fn)(index_entry_t *e, void *arg), void *arg)
{
    uint16_t first = rank, last = rank;

    if (rank == KVT_RANK_ALL) {
        first = 0;
        last = ns->replicated ? 0 : (uint16_t)(ns->world - 1);
    } else {
        first = last = ns_store_rank(ns, rank);
    }
    for (uint32_t r = first; r <= last; r++) {
        for (uint32_t i = 0; i < hit; i++) {
            kvt_wire_hash_t k;
            index_entry_t *e;
            memcpy(&k, &h[i], sizeof k);
            e = index_find(s->ix, ns->id, (uint16_t)r, &k);
            if (e != NULL)
                fn(e, arg);
        }
    }
}

struct lease_acc {
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

    index_lease(e, a->now_ms, a->lease_ms);
}

uint64_t store_lease_cost(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                          uint32_t hit, uint64_t now_ms)
{
    struct lease_acc a = {.now_ms = now_ms};

    prefix_each(s, ns, rank, h, hit, lease_cost_cb, &a);
    return a.bytes;
}

void store_lease(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, uint32_t hit,
                 uint64_t now_ms)
{
    struct lease_acc a = {.now_ms = now_ms, .lease_ms = s->cfg->ram.lease_ms};

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

/* Frees the RAM copy of e (the entry stays). */
static void ram_release(store_t *s, index_entry_t *e)
{
    ram_free(s->ram, e->off, e->len);
    s->stored_bytes -= e->len;
    s->ram_chunks--;
    index_ram_clear(s->ix, e);
}

static void seg_link(store_t *s, index_entry_t *e)
{
    void **head = disk_seg_user(s->disk, e->dseg);
    index_entry_t *first = *head;

    e->seg_prev = NULL;
    e->seg_next = first;
    if (first != NULL)
        first->seg_prev = e;
    *head = e;
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

/* Forgets e's disk copy (the entry stays). */
static void disk_forget(store_t *s, index_entry_t *e)
{
    seg_unlink(s, e);
    e->flags &= (uint16_t)~INDEX_F_DISK;
    e->dseg = 0;
    s->dk.chunks--;
}

/* Removes e from the index and every tier; its successors become orphans. */
static void drop(store_t *s, index_entry_t *e)
{
    ns_t *ns = ns_get(s->nst, e->ns);

    if (e->flags & INDEX_F_RAM)
        ram_release(s, e);
    if (e->flags & INDEX_F_DISK)
        disk_forget(s, e);
    if (e->flags & INDEX_F_WBUF)
        s->dk.wbuf--;
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

/* --- invalidation --- */

/* A dropped chunk's last pin went: its RAM bytes and the entry go now. */
static void limbo_free(store_t *s, index_entry_t *e)
{
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else
        s->limbo = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    if (e->flags & INDEX_F_RAM)
        ram_release(s, e);
    index_entry_free(e);
}

/* Takes pinned e out of the index and every tier but RAM, and keeps it in the limbo list. */
static void limbo_add(store_t *s, index_entry_t *e)
{
    ns_t *ns = ns_get(s->nst, e->ns);

    if (e->flags & INDEX_F_DISK)
        disk_forget(s, e);
    if (e->flags & INDEX_F_WBUF) {
        e->flags &= (uint16_t)~INDEX_F_WBUF;
        s->dk.wbuf--;
    }
    if (ns != NULL) {
        ns->chunks--;
        ns->bytes -= e->len;
    }
    index_unlink(s->ix, e);
    e->flags |= INDEX_F_LIMBO;
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
            drop(s, e);
        }
    }
    free(c.keys);
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

/* Queues v's RAM bytes for the disk as a self-describing record (namespace identity, rank,
 * hash, parent hash for relinking at recovery); v waits in the write buffer (INDEX_F_WBUF)
 * until its flush commits. Returns 0 or disk_append's error. */
static int write_record(store_t *s, const ns_t *ns, index_entry_t *v)
{
    record_meta_t m;
    uint64_t seq;
    int rc;

    memset(&m, 0, sizeof m);
    m.model_len = (uint8_t)strlen(ns->model);
    memcpy(m.model, ns->model, m.model_len);
    m.fingerprint = ns->fingerprint;
    m.world = ns->world;
    m.chunk_tokens = ns->chunk_tokens;
    m.rank = v->rank;
    m.flags = ns->replicated ? RECORD_F_REPLICATED : 0;
    memcpy(m.hash, v->hash.b, 16);
    if (v->parent != NULL) {
        m.flags |= RECORD_F_PARENT;
        memcpy(m.parent, v->parent->hash.b, 16);
    }
    m.raw_len = v->len;
    m.stored_len = v->len;
    m.shuffle = 1;
    rc = disk_append(s->disk, v->ns, &m, ram_ptr(s->ram, v->off), &seq);
    if (rc != 0)
        return rc;
    v->flags |= INDEX_F_WBUF;
    v->wseq = seq;
    s->last_seq = seq;
    s->dk.wbuf++;
    return 0;
}

/* Moves a RAM victim to the disk tier. Returns 0, or -1 when the disk tier refuses. */
static int demote(store_t *s, index_entry_t *v)
{
    const ns_t *ns = ns_get(s->nst, v->ns);

    if (v->flags & INDEX_F_DISK) {
        ram_release(s, v);
        s->dk.demoted_clean++;
        return 0;
    }
    if (ns == NULL || s->closing || !disk_admits(s->disk, v->len))
        return -1;
    if (write_record(s, ns, v) != 0)
        return -1;
    s->dk.demoted++;
    ram_release(s, v);
    return 0;
}

static void evict(store_t *s, index_entry_t *v)
{
    s->st.evictions++;
    if (s->disk != NULL) {
        if (demote(s, v) == 0)
            return;
        s->dk.refused++;
    }
    drop(s, v);
}

/* Whether demoting v now would be refused only because the write buffer is full while a
 * flush is in flight (a transient state, unlike a degraded disk). */
static bool write_backlogged(const store_t *s, const index_entry_t *v)
{
    return s->disk != NULL && !s->closing && !(v->flags & INDEX_F_DISK) &&
           !disk_degraded(s->disk) && !disk_admits(s->disk, v->len);
}

/*
 * An allocation of len bytes failed with nothing left to evict. A chunk that fits the arena finds
 * no room only because what is left is held: leased or pinned chunks (and their ancestors, which
 * wait for those tails), or reservations. That is reported as such (ram.nospace_held and a log
 * line at most once a second), apart from a chunk larger than the arena. Returns -ENOSPC.
 */
static int nospace(store_t *s, uint64_t len, uint64_t now_ms)
{
    s->nospace_held = len <= ram_capacity(s->ram);
    if (s->nospace_held && (s->nospace_log_ms == 0 || now_ms >= s->nospace_log_ms + 1000)) {
        s->nospace_log_ms = now_ms;
        log_warn("ram_nospace",
                 "cause=held bytes=%" PRIu64 " used_bytes=%" PRIu64 " capacity_bytes=%" PRIu64
                 " chunks=%" PRIu64 " nospace_held=%" PRIu64
                 " hint=\"leases, pins and reservations hold the arena (status server.sessions, "
                 "ram.session_held_share, ram.max_held_share)\"",
                 len, ram_used(s->ram), ram_capacity(s->ram), s->ram_chunks,
                 s->st.nospace_held + 1);
    }
    return -ENOSPC;
}

/*
 * Allocates len bytes, evicting chain tails while the arena is full. When the least recent
 * tail would have to be written but the write buffer is backlogged, a tail whose disk copy
 * already exists is evicted instead (dropping its RAM copy loses nothing); only when there is
 * none is the tail dropped (counted in disk.demotions_refused).
 */
static int alloc_evicting(store_t *s, uint64_t len, uint64_t now_ms, uint64_t *off)
{
    for (;;) {
        index_entry_t *v;
        int rc = ram_alloc(s->ram, len, off);
        if (rc != -ENOSPC)
            return rc;
        v = index_victim(s->ix, now_ms, STORE_VICTIM_SCAN);
        if (v == NULL)
            return nospace(s, len, now_ms);
        if (write_backlogged(s, v)) {
            index_entry_t *clean =
                index_victim_with(s->ix, now_ms, STORE_VICTIM_SCAN, INDEX_F_DISK);
            if (clean != NULL)
                v = clean;
        }
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
    s->ram_chunks++;
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

/* The first step of placing chunk h of a chain (save and commit): a chunk stored already is
 * EXISTS (touched; the chain continues from it), one without bytes is SKIPPED (a gap: its
 * successors are orphans). Returns true, with its hash in *k, when the chunk is to be placed;
 * false with *status set otherwise. */
static bool chain_next(store_t *s, const ns_t *ns, uint16_t r, const kvt_wire_hash_t *h,
                       bool has_bytes, chain_t *c, kvt_wire_hash_t *k, uint8_t *status)
{
    memcpy(k, h, sizeof *k); /* the hash list may be unaligned in the frame */
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

void store_save(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *payloads, uint64_t now_ms,
                uint8_t *status)
{
    uint16_t r = ns_store_rank(ns, rank);
    chain_t c;

    chain_start(s, ns, r, parent, &c);
    for (size_t i = 0; i < n; i++) {
        kvt_wire_hash_t k;
        uint64_t off;
        int rc;

        if (!chain_next(s, ns, r, &h[i], payloads[i].len > 0, &c, &k, &status[i]))
            continue;
        rc = c.full ? -ENOSPC : store_reserve(s, payloads[i].len, c.prev, now_ms, &off);
        if (rc != 0) {
            status[i] = KVT_CHUNK_NOSPACE;
            if (c.full) { /* store_reserve counted the first one */
                s->st.nospace++;
                s->st.nospace_held += s->nospace_held;
            }
            c.full = true;
            continue;
        }
        memcpy(ram_ptr(s->ram, off), payloads[i].data, payloads[i].len);
        status[i] = place(s, ns, r, &k, off, payloads[i].len, &c);
    }
}

void store_pin(store_t *s, index_entry_t *e)
{
    (void)s;
    e->pins++;
}

static void limbo_free(store_t *s, index_entry_t *e);

void store_unpin(store_t *s, index_entry_t *e)
{
    if (--e->pins > 0)
        return;
    if (e->flags & INDEX_F_LIMBO)
        limbo_free(s, e);
    else if (tierless(e))
        drop(s, e);
}

int store_reserve(store_t *s, uint64_t len, index_entry_t *keep, uint64_t now_ms, uint64_t *off)
{
    int rc;

    if (keep != NULL)
        store_pin(s, keep);
    s->nospace_held = false;
    rc = alloc_evicting(s, len, now_ms, off);
    if (keep != NULL)
        store_unpin(s, keep);
    if (rc != 0) {
        s->st.nospace++;
        s->st.nospace_held += s->nospace_held;
    }
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

        if (!chain_next(s, ns, r, &h[i], off[i] != UINT64_MAX, &c, &k, &status[i])) {
            /* stored by another client meanwhile: the reservation is not needed */
            if (status[i] == KVT_CHUNK_EXISTS && off[i] != UINT64_MAX)
                ram_free(s->ram, off[i], len[i]);
            continue;
        }
        status[i] = place(s, ns, r, &k, off[i], len[i], &c);
    }
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

index_entry_t *store_load_ram(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    index_entry_t *e = store_find(s, ns, rank, h);

    if (e == NULL) {
        s->st.misses++;
        return NULL;
    }
    if (!(e->flags & INDEX_F_RAM))
        return NULL; /* in the write buffer or on disk: load_start() counts it */
    index_touch(s->ix, e);
    s->st.hits++;
    return e;
}

const void *store_load(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       uint64_t *len)
{
    index_entry_t *e = store_load_ram(s, ns, rank, h);

    if (e != NULL) {
        *len = e->len;
        return ram_ptr(s->ram, e->off);
    }
    e = store_find(s, ns, rank, h);
    if (e != NULL && (e->flags & INDEX_F_WBUF)) {
        s->st.hits++;
        s->dk.hits++;
        *len = e->len;
        return disk_wbuf_get(s->disk, e->wseq);
    }
    if (e != NULL)
        s->st.misses++;
    return NULL;
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

void store_ram_stats(const store_t *s, uint64_t now_ms, store_ram_stats_t *out)
{
    struct lease_count lc = {.now_ms = now_ms};

    index_foreach(s->ix, count_leased, &lc);
    *out = (store_ram_stats_t){.capacity_bytes = ram_capacity(s->ram),
                               .used_bytes = ram_used(s->ram),
                               .resident_bytes = ram_resident(s->ram),
                               .stored_bytes = s->stored_bytes,
                               .chunks = s->ram_chunks,
                               .index_chunks = index_count(s->ix),
                               .counts = s->st,
                               .leased_chunks = lc.leased,
                               .free_runs = ram_free_runs(s->ram),
                               .largest_free_bytes = ram_largest_free(s->ram),
                               .arena_path = ram_path(s->ram)};
}

struct check_acc {
    uint64_t bytes;
    uint64_t footprint;
    const ram_t *ram;
};

static void check_sum(const index_entry_t *e, void *arg)
{
    struct check_acc *a = arg;

    if (!(e->flags & INDEX_F_RAM))
        return;
    a->bytes += e->len;
    a->footprint += ram_footprint(a->ram, e->len);
}

int store_check(const store_t *s)
{
    struct check_acc a = {.ram = s->ram};

    if (index_check(s->ix) != 0)
        return -1;
    index_foreach(s->ix, check_sum, &a);
    for (const index_entry_t *e = s->limbo; e != NULL; e = e->lru_next)
        check_sum(e, &a);
    if (a.bytes != s->stored_bytes || a.footprint != ram_used(s->ram))
        return -1;
    if (s->disk != NULL && disk_check(s->disk) != 0)
        return -1;
    return ram_used(s->ram) <= ram_capacity(s->ram) ? 0 : -1;
}

/* --- disk tier --- */

static void set_disk_loc(store_t *s, index_entry_t *e, const disk_loc_t *loc)
{
    e->flags |= INDEX_F_DISK;
    e->dseg = loc->seg;
    e->doff = loc->off;
    e->dhdr = loc->hdr_len;
    e->dstored = loc->stored;
    seg_link(s, e);
    s->dk.chunks++;
}

static void recovered_cb(void *arg, const record_meta_t *m, const disk_loc_t *loc)
{
    store_t *s = arg;
    kvt_wire_hash_t h;
    index_entry_t *e;
    ns_t *ns;
    ns_ident_t id = {.model = m->model,
                     .model_len = m->model_len,
                     .fingerprint = m->fingerprint,
                     .world = m->world,
                     .replicated = (m->flags & RECORD_F_REPLICATED) != 0,
                     .chunk_tokens = m->chunk_tokens};

    /* records carry no revision yet (contract C4): NULL, matched by model and layout */
    if (drops_covers(s->drops, m->model, m->model_len, NULL, m->fingerprint, loc->seg, loc->off)) {
        s->dk.recover_dropped++;
        return;
    }
    if (ns_declare(s->nst, &id, config_gates_for(s->cfg, m->model), &ns) != 0 ||
        (ns->replicated && m->rank != 0)) {
        s->dk.recover_skipped++;
        return;
    }
    memcpy(h.b, m->hash, 16);
    e = index_find(s->ix, ns->id, m->rank, &h);
    if (e != NULL) {
        /* a newer copy of the same chunk (the older segment was written first) */
        disk_forget(s, e);
        ns->bytes -= e->len;
        e->len = m->raw_len;
        ns->bytes += e->len;
        set_disk_loc(s, e, loc);
        return;
    }
    e = index_add_cold(s->ix, ns->id, m->rank, &h, NULL, false, m->raw_len);
    if (e == NULL) {
        s->dk.recover_skipped++;
        return;
    }
    ns->chunks++;
    ns->bytes += m->raw_len;
    set_disk_loc(s, e, loc);
    if ((m->flags & RECORD_F_PARENT) != 0) {
        if (s->nrelink == s->relinkcap) {
            size_t nc = s->relinkcap ? s->relinkcap * 2 : 1024;
            relink_t *nr = realloc(s->relink, nc * sizeof *nr);
            if (nr == NULL)
                return; /* the chunk stays, without its chain link */
            s->relink = nr;
            s->relinkcap = nc;
        }
        s->relink[s->nrelink].ns = ns->id;
        s->relink[s->nrelink].rank = m->rank;
        s->relink[s->nrelink].hash = h;
        memcpy(s->relink[s->nrelink].parent.b, m->parent, 16);
        s->nrelink++;
    }
}

/* A flush finished the ticket seq: tombstones pending on it move past its record (loc), or to
 * the log end when it failed (the batch was truncated away). */
static void drops_settle_at(store_t *s, uint64_t seq, const disk_loc_t *loc)
{
    uint64_t seg, off;
    int rc;

    if (loc != NULL) {
        seg = loc->seg;
        off = loc->off + 1;
    } else {
        disk_log_end(s->disk, &seg, &off);
    }
    rc = drops_settle(s->drops, seq, seg, off);
    if (rc != 0)
        log_warn("drops_write_failed", "dir=%s error=\"%s\"", s->cfg->disk.dir, strerror(-rc));
}

static void committed_cb(void *arg, uint32_t ns_id, uint16_t rank, const uint8_t hash[16],
                         uint64_t seq, bool ok, const disk_loc_t *loc)
{
    store_t *s = arg;
    kvt_wire_hash_t h;
    index_entry_t *e;

    if (seq > s->done_seq)
        s->done_seq = seq;
    if (drops_pending(s->drops))
        drops_settle_at(s, seq, ok ? loc : NULL);
    memcpy(h.b, hash, 16);
    e = index_find(s->ix, ns_id, rank, &h);
    if (e == NULL || !(e->flags & INDEX_F_WBUF) || e->wseq != seq)
        return; /* dropped or replaced meanwhile: the record is dead bytes */
    e->flags &= (uint16_t)~INDEX_F_WBUF;
    s->dk.wbuf--;
    if (ok) {
        set_disk_loc(s, e, loc);
    } else if (!(e->flags & INDEX_F_RAM)) {
        s->dk.write_lost++;
        /* tierless now; a pinned entry (the predecessor held by a reservation) goes when its
         * last pin does (store_unpin), as after a failed checksum */
        if (e->pins == 0)
            drop(s, e);
    }
}

static int reclaim_cb(void *arg, uint64_t seg, void **user, bool force)
{
    store_t *s = arg;
    uint64_t now = s->loop != NULL ? uv_now(s->loop) : 0;
    index_entry_t *e, *next;

    /* A chunk that lives only here is kept while pinned (someone holds its entry: a promotion,
     * the predecessor of a chunk being placed, a client's hold), even when forced: pins are
     * short and the disk refuses the write instead, so capacity still holds. Leases keep a
     * segment too, unless forced. */
    for (e = *user; e != NULL; e = e->seg_next)
        if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF)) &&
            (e->pins > 0 || (!force && index_leased(e, now))))
            return -EBUSY;
    for (e = *user; e != NULL; e = next) {
        next = e->seg_next;
        e->seg_prev = e->seg_next = NULL;
        e->flags &= (uint16_t)~INDEX_F_DISK;
        e->dseg = 0;
        s->dk.chunks--;
        if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF))) {
            s->dk.evictions++;
            drop(s, e);
        }
    }
    *user = NULL;
    (void)seg;
    return 0;
}

int store_attach_disk(store_t *s, uv_loop_t *loop)
{
    static const disk_ops_t ops = {
        .recovered = recovered_cb, .committed = committed_cb, .reclaim = reclaim_cb};
    int rc;

    s->loop = loop;
    if (!s->cfg->disk.enabled)
        return 0;
    rc = drops_open(s->cfg->disk.dir, &s->drops);
    if (rc == 0)
        rc = disk_open(loop, s->cfg, &ops, s, &s->disk);
    if (rc != 0) {
        drops_destroy(&s->drops);
        s->disk_error = rc;
        s->disk = NULL;
        free(s->relink);
        s->relink = NULL;
        s->nrelink = s->relinkcap = 0;
        s->dk = (store_disk_counts_t){0};
        return rc;
    }
    for (size_t i = 0; i < s->nrelink; i++) {
        const relink_t *r = &s->relink[i];
        index_entry_t *e = index_find(s->ix, r->ns, r->rank, &r->hash);
        index_entry_t *p = index_find(s->ix, r->ns, r->rank, &r->parent);
        if (e != NULL && p != NULL && e != p && e->parent == NULL)
            index_set_parent(s->ix, e, p);
        else if (e != NULL && p == NULL)
            e->flags |= INDEX_F_ORPHAN;
    }
    free(s->relink);
    s->relink = NULL;
    s->nrelink = s->relinkcap = 0;
    drops_prune(s->drops, disk_first_segment(s->disk));
    uv_timer_init(loop, &s->persist_timer);
    s->persist_timer.data = s;
    return 0;
}

void store_disk_check(store_t *s)
{
    if (s->disk != NULL && !s->closing)
        disk_check_files(s->disk);
}

uint32_t store_disk_reads(const store_t *s)
{
    return s->disk != NULL ? disk_reads_pending(s->disk) : 0;
}

int store_disk_error(const store_t *s)
{
    return s->disk_error;
}

static void persist_step_cb(uv_timer_t *t);

static void persist_closed_cb(uv_handle_t *h)
{
    store_t *s = h->data;

    disk_close(s->disk, s->close_done, s->close_arg);
}

/* Writes the next RAM-only chunks; waits (a short timer) while the write buffer is full, and
 * gives up at the deadline or when the tier is degraded. */
static void persist_step(store_t *s)
{
    uint64_t now = uv_now(s->loop);

    while (s->persist_next < s->npersist) {
        const persist_key_t *k = &s->persist[s->persist_next];
        index_entry_t *e = index_find(s->ix, k->ns, k->rank, &k->hash);
        const ns_t *ns = e != NULL ? ns_get(s->nst, e->ns) : NULL;
        int rc;

        if (ns == NULL || !(e->flags & INDEX_F_RAM) || (e->flags & (INDEX_F_DISK | INDEX_F_WBUF))) {
            s->persist_next++;
            continue;
        }
        rc = write_record(s, ns, e);
        if (rc == -EAGAIN && !disk_degraded(s->disk) && now < s->persist_deadline) {
            uv_timer_start(&s->persist_timer, persist_step_cb, STORE_PERSIST_RETRY_MS, 0);
            return;
        }
        if (rc == 0)
            s->persisted++;
        else if (rc == -EAGAIN)
            break; /* degraded or out of time: the rest stays RAM-only */
        s->persist_next++;
    }
    log_info("disk_persist", "chunks=%zu written=%" PRIu64 " skipped=%zu ms=%" PRIu64, s->npersist,
             s->persisted, s->npersist - s->persist_next, now - s->persist_start);
    free(s->persist);
    s->persist = NULL;
    uv_close((uv_handle_t *)&s->persist_timer, persist_closed_cb);
}

static void persist_step_cb(uv_timer_t *t)
{
    persist_step(t->data);
}

struct persist_collect {
    persist_key_t *keys;
    size_t n;
};

static void collect_ram_only(const index_entry_t *e, void *arg)
{
    struct persist_collect *c = arg;

    if ((e->flags & INDEX_F_RAM) && !(e->flags & (INDEX_F_DISK | INDEX_F_WBUF)))
        c->keys[c->n++] = (persist_key_t){.ns = e->ns, .rank = e->rank, .hash = e->hash};
}

/* Shutdown: chunks that are only in RAM are written to the disk tier first (bounded by
 * STORE_PERSIST_MS), so that a clean restart finds every chunk; then the tier drains. */
void store_close(store_t *s, void (*done)(void *arg), void *arg)
{
    struct persist_collect c = {0};

    s->closing = true;
    if (s->disk == NULL) {
        done(arg);
        return;
    }
    s->close_done = done;
    s->close_arg = arg;
    s->persist_start = uv_now(s->loop);
    s->persist_deadline = s->persist_start + STORE_PERSIST_MS;
    c.keys = malloc((index_count(s->ix) + 1) * sizeof *c.keys);
    if (c.keys != NULL)
        index_foreach(s->ix, collect_ram_only, &c);
    s->persist = c.keys;
    s->npersist = c.n;
    s->persist_next = 0;
    persist_step(s);
}

/* --- loads --- */

/* A disk read finished: data (len bytes, owned by the callee: free() it) or NULL (miss). */
typedef void (*store_read_cb)(void *arg, void *data, uint64_t len);

typedef struct {
    store_t *s;
    store_read_cb cb;
    void *arg;
    uint32_t ns;
    uint16_t rank;
    kvt_wire_hash_t hash;
    disk_loc_t loc;
} load_ctx_t;

static void load_read_cb(void *arg, int rc, void *data, uint64_t len)
{
    load_ctx_t *c = arg;
    store_t *s = c->s;
    index_entry_t *e = index_find(s->ix, c->ns, c->rank, &c->hash);
    bool same =
        e != NULL && (e->flags & INDEX_F_DISK) && e->dseg == c->loc.seg && e->doff == c->loc.off;

    if (rc == 0) {
        s->st.hits++;
        s->dk.hits++;
        if (same && !(e->flags & INDEX_F_RAM) && !s->closing && e->len == len) {
            uint64_t off;
            store_pin(s, e);
            if (alloc_evicting(s, len, uv_now(s->loop), &off) == 0) {
                memcpy(ram_ptr(s->ram, off), data, len);
                s->stored_bytes += len;
                s->ram_chunks++;
                index_ram_set(s->ix, e, off);
                s->dk.promoted++;
            }
            store_unpin(s, e);
        }
    } else {
        s->st.misses++;
        s->dk.misses++;
        /* a record that failed its check, or that cannot be read (a truncated segment, an I/O
         * error), is gone: the next load must not try it again */
        if ((rc == -EBADMSG || rc == -EIO) && same) {
            log_warn("disk_record_dropped", "ns=%u rank=%u segment=%016" PRIx64 " offset=%" PRIu64,
                     c->ns, c->rank, c->loc.seg, c->loc.off);
            disk_forget(s, e);
            /* tierless now; a pinned entry goes when its last pin does (store_unpin) */
            if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF)) && e->pins == 0)
                drop(s, e);
        }
    }
    c->cb(c->arg, rc == 0 ? data : NULL, rc == 0 ? len : 0);
    free(c);
}

typedef enum { LOAD_MISS = 0, LOAD_HIT, LOAD_PENDING } load_rc_t;

/*
 * One chunk of a load. HIT: *data (borrowed, valid until the next store call) and *len, from
 * RAM or the disk write buffer. PENDING: the chunk is on disk; cb(arg, ...) is called exactly
 * once later on the loop (after it was verified and promoted into RAM, or with a miss when the
 * record fails its checksum, vanished, or the store is closing). MISS: not stored.
 */
static load_rc_t load_start(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                            const void **data, uint64_t *len, store_read_cb cb, void *arg)
{
    uint16_t r = ns_store_rank(ns, rank);
    kvt_wire_hash_t k;
    index_entry_t *e;
    load_ctx_t *c;

    memcpy(&k, h, sizeof k);
    e = index_find(s->ix, ns->id, r, &k);
    if (e != NULL && (e->flags & (INDEX_F_RAM | INDEX_F_WBUF))) {
        *data = store_load(s, ns, rank, h, len);
        return LOAD_HIT;
    }
    if (e == NULL || !(e->flags & INDEX_F_DISK) || s->disk == NULL || s->closing)
        goto miss;
    c = malloc(sizeof *c);
    if (c == NULL)
        goto miss;
    *c = (load_ctx_t){
        .s = s,
        .cb = cb,
        .arg = arg,
        .ns = ns->id,
        .rank = r,
        .hash = k,
        .loc = {.seg = e->dseg, .off = e->doff, .hdr_len = e->dhdr, .stored = e->dstored}};
    index_touch(s->ix, e);
    if (disk_read(s->disk, &c->loc, k.b, r, e->len, load_read_cb, c) != 0) {
        free(c);
        goto miss;
    }
    return LOAD_PENDING;

miss:
    s->st.misses++;
    if (s->disk != NULL)
        s->dk.misses++;
    return LOAD_MISS;
}

/* A batch of store_load_batch: held until every chunk was reported (one count for the start
 * loop, one per pending read). */
typedef struct load_batch load_batch_t;

typedef struct {
    load_batch_t *b;
    size_t i;
} batch_slot_t;

struct load_batch {
    store_chunk_cb chunk_cb;
    store_batch_cb done_cb;
    void *arg;
    size_t outstanding;
    batch_slot_t slots[]; /* one per chunk: the argument of its disk read */
};

static void batch_release(load_batch_t *b)
{
    if (--b->outstanding > 0)
        return;
    b->done_cb(b->arg);
    free(b);
}

static void batch_report(load_batch_t *b, size_t i, store_loaded_kind_t kind, void *data,
                         uint64_t len, store_chunk_t *chunk)
{
    store_loaded_t c = {.kind = kind, .data = data, .len = len, .chunk = chunk};

    b->chunk_cb(b->arg, i, &c);
}

static void batch_read_cb(void *arg, void *data, uint64_t len)
{
    batch_slot_t *slot = arg;

    if (data != NULL)
        batch_report(slot->b, slot->i, STORE_LOADED_OWNED, data, len, NULL);
    else
        batch_report(slot->b, slot->i, STORE_LOADED_MISS, NULL, 0, NULL);
    batch_release(slot->b);
}

int store_load_batch(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                     store_chunk_cb chunk_cb, store_batch_cb done_cb, void *arg)
{
    load_batch_t *b = malloc(sizeof *b + n * sizeof b->slots[0]);

    if (b == NULL)
        return -ENOMEM;
    b->chunk_cb = chunk_cb;
    b->done_cb = done_cb;
    b->arg = arg;
    b->outstanding = 1; /* held until every chunk was started */
    for (size_t i = 0; i < n; i++) {
        const void *p = NULL;
        uint64_t len = 0;
        index_entry_t *e = store_find(s, ns, rank, &h[i]);
        void *copy;

        b->slots[i] = (batch_slot_t){.b = b, .i = i};
        if (e != NULL && (e->flags & INDEX_F_RAM)) {
            /* RAM: the arena bytes themselves, pinned for the callee */
            e = store_load_ram(s, ns, rank, &h[i]);
            store_pin(s, e);
            batch_report(b, i, STORE_LOADED_LENT, ram_ptr(s->ram, e->off), e->len, e);
            continue;
        }
        switch (load_start(s, ns, rank, &h[i], &p, &len, batch_read_cb, &b->slots[i])) {
        case LOAD_PENDING:
            b->outstanding++;
            break;
        case LOAD_HIT: /* the write buffer: borrowed until the next store call, so copied */
            copy = malloc(len > 0 ? len : 1);
            if (copy != NULL) {
                memcpy(copy, p, len);
                batch_report(b, i, STORE_LOADED_OWNED, copy, len, NULL);
            } else {
                batch_report(b, i, STORE_LOADED_MISS, NULL, 0, NULL);
            }
            break;
        case LOAD_MISS:
            batch_report(b, i, STORE_LOADED_MISS, NULL, 0, NULL);
            break;
        }
    }
    batch_release(b);
    return 0;
}

static void promoted_cb(void *arg, void *data, uint64_t len)
{
    (void)arg;
    (void)len;
    free(data);
}

void store_promote(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    const void *p;
    uint64_t len;

    if (s->disk != NULL)
        load_start(s, ns, rank, h, &p, &len, promoted_cb, NULL);
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
