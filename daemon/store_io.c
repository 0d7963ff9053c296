/*
 * store_io.c - the store's work that leaves the loop thread (see store.h): loads and the disk
 * reads behind them, the cleaner that writes RAM chunks to disk ahead of their eviction, the
 * disk tier's callbacks (recovered, committed, reclaim), the shutdown persist, and
 * re-verifications.
 *
 * Design notes:
 *   - Write-back by reference (the cleaner): the store keeps its RAM chunks that have no disk
 *     copy in a FIFO, least recently saved or used first (the dirty list, store.c; a use marks a
 *     chunk and the cleaner moves a marked one to the tail when it reaches it, a second chance
 *     instead of a relink per use). Whenever more
 * than ram.capacity_bytes - clean_target of them are dirty, the cleaner hands the oldest to the
 *     disk: disk_append() lends the chunk's own arena extent (no copy), the chunk stays
 *     RAM-resident and readable, pinned while its write is in flight (INDEX_F_WBUF), and becomes
 *     clean (RAM + disk copy) when the write commits. An eviction then only releases a clean
 *     chunk's RAM copy, at once: a save never waits for the disk. A chunk evicted while its
 *     write is in flight is spilled (store.c): the commit then releases its RAM copy, or the last
 *     unpin of a reader that holds it then (store__spill_done). At most STORE_CLEAN_BUDGET
 *     chunks per loop turn, continuing on a zero timer; it stops while the disk's budget is
 *     spent and runs again when a flush commits. The write's cookie is the entry's address: the
 *     pin keeps it valid even when the chunk is dropped meanwhile (the limbo), and nothing a
 *     holder reads is ever freed under it.
 *   - Reads land in arena extents allocated before the read (promotion without a copy) and pin
 *     their entry until they finish, so the entry, its segment and its extent stay valid; a
 *     second load of a chunk whose read is in flight joins it (ranks of a replicated namespace
 *     all load rank 0's chunk) instead of reading again. A frames load that cannot get an extent
 *     without dropping a chunk reads into a heap buffer that becomes its reply frame; that read
 *     is not joined (a heap buffer serves one reply).
 *   - Bounded work per turn: the disk reports commits DISK_COMMIT_SLICE at a time, reclaim
 *     detaches STORE_RECLAIM_SLICE entries of a segment per call, the persist appends
 *     STORE_PERSIST_SLICE chunks per turn, the cleaner STORE_CLEAN_BUDGET.
 *   - Generation checks: a read that finishes for an entry whose disk copy moved or failed does
 *     not publish.
 * Threads: loop thread only; the bytes of chunks being written and of reads in flight belong to
 *     the disk's workers until their callbacks (readers may share them: nobody writes them),
 *     those of verifications to ingest.c's jobs.
 */
#include "store_internal.h"

#include "array.h"
#include "ingest.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define STORE_PERSIST_MS 20000u /* shutdown: how long RAM-only chunks may take to reach disk */
#define STORE_PERSIST_RETRY_MS 5u
/* A degraded tier at shutdown: the persist waits for the disk's own retry (DISK_RETRY_MS after
 * the failed flush, the next flush is the probe) and gives up after this many failed flushes
 * since it began (or at STORE_PERSIST_MS): one write error shortly before a stop no longer costs
 * every RAM-only chunk, and a dead disk delays the stop by a few retries, not the deadline. */
#define STORE_PERSIST_PROBES 3u
#define STORE_PERSIST_PROBE_WAIT_MS 50u
#define STORE_PERSIST_SLICE 512u
#define STORE_CHAIN_GROWTH 4u /* a confirmed chain read-ahead's window, in prefetch depths */
#define STORE_CLEAN_BUDGET 64u
#define STORE_RECLAIM_SLICE 1024u

static void ckpt_timer_cb(uv_timer_t *t);

/* --- the cleaner --- */

/* The record of entry e of namespace ns (the chunk's csum, its chain link for recovery). */
static void record_of(const ns_t *ns, const index_entry_t *e, record_meta_t *m)
{
    memset(m, 0, sizeof *m);
    m->version = RECORD_VERSION;
    m->model_len = (uint8_t)strlen(ns->model);
    memcpy(m->model, ns->model, m->model_len);
    m->revision_len = (uint8_t)strlen(ns->revision);
    memcpy(m->revision, ns->revision, m->revision_len);
    m->fingerprint = ns->fingerprint;
    m->world = ns->world;
    m->chunk_tokens = ns->chunk_tokens;
    m->rank = e->rank;
    m->flags = ns->replicated ? RECORD_F_REPLICATED : 0;
    memcpy(m->hash, e->hash.b, 16);
    if (e->parent != NULL) {
        m->flags |= RECORD_F_PARENT;
        memcpy(m->parent, e->parent->hash.b, 16);
    }
    m->raw_len = e->len;
    m->stored_len = e->len;
    m->shuffle = 1;
    m->csum = e->csum;
}

/* Writes RAM chunk e to the disk by reference: its extent is lent to the flush, it stays in
 * RAM, pinned until the write commits (committed_cb). 0 or disk_append's error. */
int store__write_back(store_t *s, const ns_t *ns, index_entry_t *e)
{
    record_meta_t m;
    uint64_t seq;
    int rc;

    record_of(ns, e, &m);
    rc = disk_append(s->disk, e->ns, &m, ram_ptr(s->ram, e->off), (uint64_t)(uintptr_t)e, &seq);
    if (rc != 0)
        return rc;
    store__dirty_del(s, e);
    store_pin(s, e);
    index_flags_set(e, INDEX_F_WBUF);
    store__wb_add(s, e);
    e->wseq = seq;
    s->dk.wbuf++;
    s->last_seq = seq;
    return 0;
}

static void clean_timer_cb(uv_timer_t *t)
{
    store_t *s = t->data;

    s->clean_pending = false;
    store__clean_ahead(s);
}

/* Runs the cleaner again in delay_ms (0: on the next loop turn), unless a run is pending. */
static void clean_later(store_t *s, uint64_t delay_ms)
{
    if (s->clean_pending)
        return;
    s->clean_pending = true;
    uv_timer_start(&s->clean_timer, clean_timer_cb, delay_ms, 0);
}

/* Bounded by what the disk holds (0.2.7): every chunk the cleaner keeps clean in RAM has a disk
 * copy, so a target above what the disk holds now (its capacity in force, lowered while the
 * filesystem is full, less a segment and a write batch, what a reclaim needs free; or half of it,
 * when that is more) cannot be met. It was not bounded, and each write reclaimed the oldest
 * segment, whose chunks were still in RAM and so dirty again, and the cleaner wrote them again,
 * for ever (8 MiB of RAM over a 4 MiB disk: 20,758 demotions for 190 saves, the disk written all
 * the time; bounded: 94 demotions, none refused). */
uint64_t store__clean_target(const store_t *s)
{
    uint64_t cap, slack, room;

    if (s->disk == NULL)
        return s->clean_target;
    cap = disk_capacity(s->disk);
    slack = s->cfg->disk.segment_bytes + s->cfg->disk.write_buffer_bytes;
    room = cap > slack && cap - slack > cap / 2 ? cap - slack : cap / 2;
    return s->clean_target < room ? s->clean_target : room;
}

void store__clean_ahead(store_t *s)
{
    uint64_t cap, target;
    int rc;

    if (s->disk == NULL || s->closing || s->clean_target == 0)
        return;
    cap = s->ram_cap;
    target = store__clean_target(s);
    for (unsigned budget = STORE_CLEAN_BUDGET;; budget--) {
        index_entry_t *e = s->dirty_head;
        const ns_t *ns;

        /* the extents disk reads land in are neither free nor clean either: while read-aheads
         * and promotions hold them, the cleaner writes that much more (the saves' room) */
        if (e == NULL || (s->dirty_bytes + s->promo_bytes + target <= cap && !store__ram_over(s)))
            return;
        if (budget == 0)
            break;
        if (e->flags & INDEX_F_REF) { /* used since it was queued: its second chance */
            store__dirty_requeue(s, e);
            continue;
        }
        ns = ns_get(s->nst, e->ns);
        if (ns == NULL) {
            store__dirty_del(s, e);
            continue;
        }
        if (!disk_admits(s->disk, e->len)) {
            /* a degraded tier refuses until its retry: no flush is in flight to restart the
             * cleaner, so a timer does (else only the next save would, however late) */
            uint64_t wait = disk_retry_in_ms(s->disk);
            if (wait > 0)
                clean_later(s, wait + 1);
            return; /* the disk's budget is spent: again when a flush commits */
        }
        rc = store__write_back(s, ns, e);
        if (rc == -E2BIG) {
            store__dirty_del(s, e); /* can never fit a write batch: it stays RAM-only */
            continue;
        }
        if (rc != 0)
            return; /* the full batch waits to go: again when it commits */
    }
    clean_later(s, 0);
}

/* --- the disk tier's callbacks --- */

static void set_disk_loc(store_t *s, index_entry_t *e, const disk_loc_t *loc)
{
    index_flags_set(e, INDEX_F_DISK);
    e->dseg = loc->seg;
    e->doff = loc->off;
    e->dhdr = loc->hdr_len;
    e->dstored = loc->stored;
    e->dver = loc->version;
    {
        void **head = disk_seg_user(s->disk, e->dseg);
        index_entry_t *first = *head;
        e->seg_prev = NULL;
        e->seg_next = first;
        if (first != NULL)
            first->seg_prev = e;
        *head = e;
    }
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
                     .revision = m->revision,
                     .revision_len = m->revision_len,
                     .fingerprint = m->fingerprint,
                     .world = m->world,
                     .replicated = (m->flags & RECORD_F_REPLICATED) != 0,
                     .chunk_tokens = m->chunk_tokens};

    /* a version 1 record carries no revision: NULL, matched by model and layout (drops.h) */
    if (drops_covers(s->drops, m->model, m->model_len,
                     m->version == RECORD_VERSION_V1 ? NULL : m->revision, m->fingerprint, loc->seg,
                     loc->off)) {
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
        if ((e->flags & INDEX_F_DISK) &&
            (e->dseg > loc->seg || (e->dseg == loc->seg && e->doff > loc->off)))
            return; /* an older copy: a tail scanned after the checkpoint's newer records */
        /* a newer copy of the same chunk (the older segment was written first) */
        store__disk_forget(s, e);
        ns->bytes -= e->len;
        e->len = m->raw_len;
        ns->bytes += e->len;
        e->csum = m->csum;
        set_disk_loc(s, e, loc);
        return;
    }
    e = index_add_cold(s->ix, ns->id, m->rank, &h, NULL, false, m->raw_len);
    if (e == NULL) {
        s->dk.recover_skipped++;
        return;
    }
    e->csum = m->csum;
    ns->chunks++;
    ns->bytes += m->raw_len;
    set_disk_loc(s, e, loc);
    if ((m->flags & RECORD_F_PARENT) != 0)
        store__relink_queue(s, ns->id, m->rank, &h, m->parent);
}

static void verify_dropped(store_t *s, const index_entry_t *e, const char *where)
{
    s->verify_drops++;
    log_warn("chunk_verify_drop", "ns=%u rank=%u where=%s action=removed", e->ns, e->rank, where);
}

/* A flush finished the ticket seq: tombstones pending on it move past its record (loc), or to
 * the log end when it was not written (the batch was truncated away, or the record refused). */
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

/* The write of chunk e (the cookie: pinned for it) finished: rc as committed(). */
static void committed_cb(void *arg, uint32_t ns_id, const record_meta_t *m, uint64_t seq,
                         uint64_t cookie, int rc, const disk_loc_t *loc)
{
    store_t *s = arg;
    index_entry_t *e = (index_entry_t *)(uintptr_t)cookie;

    (void)ns_id;
    (void)m;
    if (seq > s->done_seq)
        s->done_seq = seq;
    if (drops_pending(s->drops))
        drops_settle_at(s, seq, rc == 0 ? loc : NULL);
    index_flags_clear(e, INDEX_F_WBUF);
    store__wb_del(s, e);
    if (!(e->flags & INDEX_F_LIMBO)) { /* a dropped chunk's write is dead bytes */
        s->dk.wbuf--;
        if (rc == 0) {
            set_disk_loc(s, e, loc); /* clean now: its eviction costs nothing */
            s->dk.demoted++;
            s->persisted += s->closing;
            /* a chunk evicted meanwhile leaves RAM with the write's pin (store_unpin), or
             * with the last pin of whoever still reads it */
        } else if (rc == -EBADMSG) {
            store__spill_end(s, e);
            if (!(e->flags & INDEX_F_BAD)) {
                index_flags_set(e, INDEX_F_BAD); /* dropped with its last pin, just below */
                verify_dropped(s, e, s->closing ? "persist" : "write_back");
            }
        } else {
            store__spill_end(s, e);
            store__dirty_add(s, e); /* the write failed: still in RAM, tried again later */
        }
    }
    store_unpin(s, e);
    store__clean_ahead(s);
}

static int reclaim_cb(void *arg, uint64_t seg, void **user, disk_reclaim_t how)
{
    bool force = how == DISK_RECLAIM_FORCE, past_leases = how != DISK_RECLAIM_NORMAL;
    store_t *s = arg;
    uint64_t now = s->loop != NULL ? uv_now(s->loop) : 0;
    index_entry_t *e, *next;
    unsigned n = 0;

    /* A chunk that lives only here is kept while pinned (someone holds its entry: a read, the
     * predecessor of a chunk being placed, a client's hold), even when forced: pins are short
     * and the disk refuses the write instead, so capacity still holds. Leases keep a segment
     * too, unless asked past them (disk.h) or closing: once the store closes no request can use a
     * lease (their sessions went with the socket; gates.state restores a lease only for a chunk
     * that came back), and the persist's reclaims must not wait for leases that outlive its
     * deadline. The check is made when a segment's reclaim starts; a slice that continues it
     * detaches what is left (a chunk pinned since then stays absent until its last pin: a read in
     * flight of it still finishes from the open file and revives it). */
    if (s->reclaim_seg != seg) {
        for (e = *user; e != NULL; e = e->seg_next)
            if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF)) &&
                (e->pins > 0 || (!past_leases && !s->closing && index_leased(e, now))))
                return -EBUSY;
    }
    for (e = *user; e != NULL; e = next) {
        if (!force && n++ == STORE_RECLAIM_SLICE) {
            e->seg_prev = NULL;
            *user = e;
            s->reclaim_seg = seg;
            return -EAGAIN;
        }
        next = e->seg_next;
        e->seg_prev = e->seg_next = NULL;
        index_flags_clear(e, INDEX_F_DISK);
        e->dseg = 0;
        s->dk.chunks--;
        if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF))) {
            s->dk.evictions++;
            if (e->pins == 0)
                store__drop(s, e);
        } else if (!s->closing) {
            store__dirty_add(s, e); /* its RAM copy is the only one again */
        } /* closing: not written again by the persist (store__persist_begin) */
    }
    *user = NULL;
    s->reclaim_seg = 0;
    return 0;
}

/* The bytes of the segment file that e's record needs: its header block and its payload, in
 * whole blocks for a version 2 record (an O_DIRECT read of a cut block fails). */
static uint64_t record_end(const index_entry_t *e)
{
    uint64_t payload = e->dver == RECORD_VERSION_V1 ? e->dstored : record_block(e->dstored);

    return e->doff + e->dhdr + payload;
}

/* A segment found cut short (disk.h, truncated): its records past the cut lose their disk copy,
 * as a read of them that failed would make them (store_io's read completion); one with no RAM
 * copy is dropped unless pinned (with its last pin, then). One with a read in flight loses it
 * too (the read pins it): the read's completion finds the copy gone, and promotes what it read
 * if that succeeded before the cut, as after a reclaim, or answers a miss. The RAM copies made
 * dirty again wake the cleaner on the next turn, not from here: a write-back can reclaim
 * segments, and disk_check_files is walking them. */
static void truncated_cb(void *arg, uint64_t seg, uint64_t size)
{
    store_t *s = arg;
    void **head = disk_seg_user(s->disk, seg);
    index_entry_t *e, *next;
    uint64_t lost = 0;

    for (e = head != NULL ? *head : NULL; e != NULL; e = next) {
        next = e->seg_next;
        if (record_end(e) <= size)
            continue;
        lost++;
        store__disk_forget(s, e);
        if (!(e->flags & (INDEX_F_RAM | INDEX_F_WBUF)) && e->pins == 0)
            store__drop(s, e);
    }
    s->dk.records_lost += lost;
    if (lost > 0)
        clean_later(s, 0);
    log_warn("disk_records_lost", "segment=%016" PRIx64 " size=%" PRIu64 " records=%" PRIu64, seg,
             size, lost);
}

const disk_ops_t store__disk_ops = {.recovered = recovered_cb,
                                    .committed = committed_cb,
                                    .reclaim = reclaim_cb,
                                    .truncated = truncated_cb};

/* --- the index checkpoint (checkpoint.h) --- */

static int entry_loc_cmp(const void *a, const void *b)
{
    const index_entry_t *x = *(const index_entry_t *const *)a,
                        *y = *(const index_entry_t *const *)b;

    if (x->dseg != y->dseg)
        return x->dseg < y->dseg ? -1 : 1;
    return x->doff < y->doff ? -1 : x->doff > y->doff;
}

struct ckpt_collect {
    const index_entry_t **e;
    size_t n;
};

static void ckpt_collect_cb(const index_entry_t *e, void *arg)
{
    struct ckpt_collect *c = arg;

    if (e->flags & INDEX_F_DISK)
        c->e[c->n++] = e;
}

/* The checkpoint of the disk tier as it is now: its segments, and the record of every entry
 * with a disk copy (committed: its flush finished), in segment and offset order. */
static int ckpt_build(store_t *s, ckpt_buf_t *c)
{
    struct ckpt_collect col;
    int rc = ckpt_begin(c, 0);

    if (rc != 0)
        return rc;
    col.e = malloc((index_count(s->ix) + 1) * sizeof *col.e);
    col.n = 0;
    if (col.e == NULL) {
        ckpt_free(c);
        return -ENOMEM;
    }
    disk_checkpoint_segments(s->disk, c);
    index_foreach(s->ix, ckpt_collect_cb, &col);
    qsort(col.e, col.n, sizeof *col.e, entry_loc_cmp);
    for (size_t i = 0; i < col.n; i++) {
        const index_entry_t *e = col.e[i];
        const ns_t *ns = ns_get(s->nst, e->ns);
        record_meta_t m;
        ckpt_loc_t loc = {.seg = e->dseg,
                          .off = e->doff,
                          .hdr_len = e->dhdr,
                          .stored = e->dstored,
                          .version = e->dver};
        if (ns == NULL)
            continue;
        record_of(ns, e, &m);
        m.version = e->dver;
        m.stored_len = e->dstored;
        ckpt_put_rec(c, &m, &loc);
    }
    s->dk.checkpoint_records = col.n;
    free(col.e);
    rc = ckpt_finish(c);
    if (rc != 0)
        ckpt_free(c);
    return rc;
}

static void ckpt_done(store_t *s, const ckpt_buf_t *c, int rc)
{
    if (rc == 0) {
        s->dk.checkpoints++;
        s->dk.checkpoint_bytes = c->buf.len;
        log_debug("disk_checkpoint_written", "records=%" PRIu64 " bytes=%zu",
                  s->dk.checkpoint_records, c->buf.len);
    } else {
        s->dk.checkpoint_fails++;
        log_warn("disk_checkpoint_write", "dir=%s error=\"%s\"", s->cfg->disk.dir, strerror(-rc));
    }
}

typedef struct {
    uv_work_t req;
    store_t *s;
    ckpt_buf_t c;
    char dir[CONFIG_PATH_MAX];
    int rc;
} ckpt_job_t;

static void ckpt_work(uv_work_t *req)
{
    ckpt_job_t *j = req->data;

    j->rc = ckpt_write(j->dir, &j->c);
}

static void ckpt_after(uv_work_t *req, int status)
{
    ckpt_job_t *j = req->data;
    store_t *s = j->s;

    ckpt_done(s, &j->c, status != 0 ? status : j->rc);
    ckpt_free(&j->c);
    free(j);
    s->ckpt_busy = false;
    if (s->ckpt_close_waiting) {
        s->ckpt_close_waiting = false;
        store__close_finish(s);
    }
}

/* Every disk.checkpoint_interval_s: built on the loop (O(entries with a disk copy)), written
 * (with its fsyncs) on the thread pool. */
static void ckpt_timer_cb(uv_timer_t *t)
{
    store_t *s = t->data;
    ckpt_job_t *j;

    if (s->closing || s->ckpt_busy || (j = calloc(1, sizeof *j)) == NULL)
        return;
    if (ckpt_build(s, &j->c) != 0) {
        free(j);
        s->dk.checkpoint_fails++;
        return;
    }
    j->s = s;
    j->req.data = j;
    snprintf(j->dir, sizeof j->dir, "%s", s->cfg->disk.dir);
    if (uv_queue_work(s->loop, &j->req, ckpt_work, ckpt_after) != 0) {
        ckpt_free(&j->c);
        free(j);
        return;
    }
    s->ckpt_busy = true;
}

/* The stop's checkpoint, after the last flush: written here, on the loop (nobody is served any
 * more). false when a periodic one is still being written: the stop waits for it. */
bool store__checkpoint_at_stop(store_t *s)
{
    ckpt_buf_t c;
    int rc;

    if (s->disk == NULL)
        return true;
    if (s->ckpt_busy) {
        s->ckpt_close_waiting = true;
        return false;
    }
    rc = ckpt_build(s, &c);
    if (rc == 0) {
        rc = ckpt_write(s->cfg->disk.dir, &c);
        ckpt_done(s, &c, rc);
        ckpt_free(&c);
    } else {
        ckpt_done(s, &c, rc);
    }
    return true;
}

int store_attach_disk(store_t *s, uv_loop_t *loop)
{
    int rc;

    s->loop = loop;
    if (!s->cfg->disk.enabled) {
        store__ram_recover(s);
        store__relink(s);
        return 0;
    }
    rc = drops_open(s->cfg->disk.dir, &s->drops);
    if (rc == 0)
        rc = disk_open(loop, s->cfg, &store__disk_ops, s, &s->disk);
    if (rc != 0) {
        drops_destroy(&s->drops);
        s->disk_error = rc;
        s->disk = NULL;
        free(s->relink);
        s->relink = NULL;
        s->nrelink = s->relinkcap = 0;
        s->dk = (store_disk_counts_t){0};
        store__ram_recover(s);
        store__relink(s);
        return rc;
    }
    disk_set_arena_page(s->disk, ram_huge_page(s->ram));
    /* the RAM tier after the disk's: a chunk in both gets its RAM copy back, and the chains of
     * both tiers are relinked together */
    store__ram_recover(s);
    store__relink(s);
    store__ram_trim(s, uv_now(loop)); /* the chunks a spill had put beyond ram_cap */
    drops_prune(s->drops, disk_first_segment(s->disk));
    drops_attach(s->drops, loop); /* serving from here on: its writes go to the thread pool */
    s->clean_target = s->cfg->ram.clean_target_bytes;
    if (s->clean_target == 0 || s->clean_target > s->ram_cap)
        s->clean_target = s->ram_cap / 2;
    if (store__clean_target(s) < s->clean_target)
        log_warn("clean_target",
                 "bytes=%" PRIu64 " bound=%" PRIu64
                 " reason=\"the disk tier holds less than the cleaner would keep clean\"",
                 s->clean_target, store__clean_target(s));
    if (s->cfg->disk.prefetch_bytes > 0) {
        s->pf = calloc(STORE_PREFETCH_QUEUE, sizeof *s->pf);
        s->pf_seen = calloc(STORE_PREFETCH_QUEUE, sizeof *s->pf_seen);
        /* without them: no read-ahead */
        s->pf_cap = s->pf != NULL && s->pf_seen != NULL ? STORE_PREFETCH_QUEUE : 0;
    }
    uv_timer_init(loop, &s->persist_timer);
    uv_timer_init(loop, &s->clean_timer);
    uv_timer_init(loop, &s->ckpt_timer);
    s->persist_timer.data = s->clean_timer.data = s->ckpt_timer.data = s;
    if (s->cfg->disk.checkpoint_interval_s > 0) {
        uint64_t ms = (uint64_t)s->cfg->disk.checkpoint_interval_s * 1000u;
        uv_timer_start(&s->ckpt_timer, ckpt_timer_cb, ms, ms);
        uv_unref((uv_handle_t *)&s->ckpt_timer);
    }
    /* A re-attached arena can hold more dirty chunks than the cleaner leaves (a stop that
     * could not write them, a crash): the cleaner starts now, so that they are written before
     * loads and saves need their room, rather than at the first save. */
    store__clean_ahead(s);
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

/* --- shutdown --- */

static void persist_step_cb(uv_timer_t *t);

static void close_handle_cb(uv_handle_t *h)
{
    store_t *s = h->data;

    if (--s->close_handles == 0)
        disk_close(s->disk, store__close_finish, s);
}

/* Whether the persist may wait for the disk: while it is healthy, or degraded by fewer than
 * STORE_PERSIST_PROBES failed flushes since the persist began. */
static bool persist_may_wait(const store_t *s)
{
    return !disk_degraded(s->disk) ||
           disk_write_errors(s->disk) - s->persist_errors < STORE_PERSIST_PROBES;
}

/* Writes the dirty chunks, oldest first (a slice per turn); waits (a short timer) while the
 * write budget is spent or a degraded tier waits for its retry (persist_may_wait), and, once
 * every chunk was appended, for the writes in flight; gives up at the deadline. A write that
 * fails puts its chunk back in the dirty FIFO (committed_cb), so the retry writes it again. Every
 * write is verified against the chunk's checksum first (disk.c), so a chunk whose bytes were
 * changed in the arena is never persisted as valid. */
static void persist_step(store_t *s)
{
    uint64_t now = uv_now(s->loop);
    unsigned slice = 0;

    while (s->dirty_head != NULL) {
        index_entry_t *e = s->dirty_head;
        const ns_t *ns = ns_get(s->nst, e->ns);
        int rc;

        if (ns == NULL) {
            store__dirty_del(s, e);
            continue;
        }
        if (slice++ == STORE_PERSIST_SLICE) {
            uv_timer_start(&s->persist_timer, persist_step_cb, 0, 0);
            return;
        }
        if (s->journal != NULL && !disk_fits_unreclaimed(s->disk, e->len)) {
            s->persist_full = true;
            break; /* no room without a reclaim: the rest stays RAM-only (store__persist_begin) */
        }
        rc = store__write_back(s, ns, e);
        if (rc == -EAGAIN && now < s->persist_deadline && persist_may_wait(s)) {
            uv_timer_start(
                &s->persist_timer, persist_step_cb,
                disk_degraded(s->disk) ? STORE_PERSIST_PROBE_WAIT_MS : STORE_PERSIST_RETRY_MS, 0);
            return;
        }
        if (rc == -EAGAIN)
            break; /* the disk kept failing, or out of time: the rest stays RAM-only */
        if (rc != 0)
            store__dirty_del(s, e); /* can never fit a write batch */
        else
            s->persist_appended++;
    }
    if (s->dk.wbuf > 0 && now < s->persist_deadline) {
        /* the last writes are in flight: one that fails puts its chunks back in the dirty FIFO
         * (committed_cb), and the next step writes them again (persist_may_wait) */
        uv_timer_start(&s->persist_timer, persist_step_cb, STORE_PERSIST_RETRY_MS, 0);
        return;
    }
    log_info("disk_persist",
             "chunks=%" PRIu64 " dirty_bytes=%" PRIu64 " left_bytes=%" PRIu64 " ms=%" PRIu64 "%s",
             s->persist_appended, s->persist_dirty, s->dirty_bytes, now - s->persist_start,
             s->persist_full ? " stopped=disk_full (the rest stays in the arena)" : "");
    s->close_handles = 3;
    uv_close((uv_handle_t *)&s->persist_timer, close_handle_cb);
    uv_close((uv_handle_t *)&s->clean_timer, close_handle_cb);
    uv_close((uv_handle_t *)&s->ckpt_timer, close_handle_cb);
}

static void persist_step_cb(uv_timer_t *t)
{
    persist_step(t->data);
}

/* Shutdown, once nothing is in flight: the chunks that are only in RAM (the dirty FIFO) are
 * written to the disk tier first (bounded by STORE_PERSIST_MS), so that a clean restart finds
 * every chunk; then the tier drains.
 *
 * Each chunk is written once (0.2.7): a chunk still in RAM whose disk copy a reclaim removes is
 * not put back in the dirty FIFO while closing. It was, and with RAM larger than the disk the
 * persist wrote the same chunks again and again until its deadline (75,000 writes of 200 chunks
 * in 20 s, every disk-only chunk reclaimed, and a stop_timeout_ms below 20 s ended the stop as if
 * the disk hung). And while the arena will be re-attached (a RAM journal is kept), only into the
 * room the disk has (disk_fits_unreclaimed): making room would drop chunks only the disk holds to
 * write copies of chunks the arena and its journal keep across a restart anyway. The chunks left
 * are RAM-only: a restart re-attaches them, a reboot loses them rather than older ones. Without
 * a journal (a memfd, ram.reattach false) RAM dies with the process, and the persist reclaims
 * the oldest segments for the newer chunks, as before. */
void store__persist_begin(store_t *s)
{
    if (s->disk == NULL) {
        store__close_finish(s);
        return;
    }
    uv_timer_stop(&s->clean_timer);
    s->persist_start = uv_now(s->loop);
    s->persist_deadline = s->persist_start + STORE_PERSIST_MS;
    s->persist_dirty = s->dirty_bytes;
    s->persist_errors = disk_write_errors(s->disk);
    if (s->journal != NULL)
        disk_keep_segments(s->disk); /* also for the batches filled before a later ENOSPC */
    persist_step(s);
}

void store__job_done(store_t *s)
{
    if (--s->jobs == 0 && s->close_waiting) {
        s->close_waiting = false;
        store__persist_begin(s);
    }
}

void store_close(store_t *s, void (*done)(void *arg), void *arg)
{
    s->closing = true;
    s->close_done = done;
    s->close_arg = arg;
    if (s->jobs > 0) {
        s->close_waiting = true; /* saves and verifications in flight publish first */
        return;
    }
    store__persist_begin(s);
}

/* --- loads --- */

typedef struct load_batch load_batch_t;
typedef struct store_read store_read_t;

typedef struct batch_slot {
    load_batch_t *b;
    size_t i;
    store_read_t *read;      /* the read this chunk waits for, or NULL */
    struct batch_slot *next; /* the other loads waiting for the same read */
} batch_slot_t;

struct load_batch {
    store_chunk_cb chunk_cb;
    store_batch_cb done_cb;
    void *arg;
    size_t outstanding;
    size_t n;                    /* chunks (slots) */
    bool waiting;                /* on the store's list of loads waiting on reads */
    load_batch_t *wprev, *wnext; /* that list */
    batch_slot_t slots[];        /* one per chunk: the argument of its disk read */
};

/* A disk read in flight: its entry is pinned, its bytes land in an extent or a heap buffer. */
struct store_read {
    store_t *s;
    index_entry_t *e;
    uint64_t off;  /* the extent, or UINT64_MAX */
    uint8_t *heap; /* the heap buffer when there is no extent */
    uint64_t len;
    disk_loc_t loc;
    batch_slot_t *waiters; /* the first is the load that started it; none for a read-ahead */
    bool prefetch;         /* started by store__prefetch_pump (its footprint is in pf_bytes) */
    bool chain;            /* that read-ahead was a chain's (chain_read_ahead), not a lookup's */
};

/* How a read gets its memory: a shared-memory load's (an extent, evicting as a save does: it
 * may drop cold tails), a frames load's (an extent when one can be had without dropping a
 * chunk, else a heap buffer), a read-ahead's (an extent without dropping a chunk, or nothing). */
typedef enum { READ_ARENA, READ_FRAMES, READ_AHEAD, READ_AHEAD_CHAIN } read_mode_t;

static void waiting_del(store_t *s, load_batch_t *b)
{
    if (!b->waiting)
        return;
    if (b->wprev != NULL)
        b->wprev->wnext = b->wnext;
    else
        s->waiting_head = b->wnext;
    if (b->wnext != NULL)
        b->wnext->wprev = b->wprev;
    else
        s->waiting_tail = b->wprev;
    b->waiting = false;
}

static void waiting_add(store_t *s, load_batch_t *b)
{
    b->wprev = s->waiting_tail;
    b->wnext = NULL;
    if (s->waiting_tail != NULL)
        s->waiting_tail->wnext = b;
    else
        s->waiting_head = b;
    s->waiting_tail = b;
    b->waiting = true;
}

static void batch_release(store_t *s, load_batch_t *b)
{
    if (--b->outstanding > 0)
        return;
    waiting_del(s, b);
    b->done_cb(b->arg);
    free(b);
}

static void batch_report(batch_slot_t *slot, store_loaded_kind_t kind, void *data, uint64_t len,
                         uint64_t csum, store_chunk_t *chunk)
{
    store_loaded_t c = {.kind = kind, .data = data, .len = len, .csum = csum, .chunk = chunk};

    slot->b->chunk_cb(slot->b->arg, slot->i, &c);
}

static void batch_miss(batch_slot_t *slot)
{
    batch_report(slot, STORE_LOADED_MISS, NULL, 0, 0, NULL);
}

/* Lends e's arena bytes to the load of slot, pinned for it. */
static void batch_lend(store_t *s, batch_slot_t *slot, index_entry_t *e)
{
    store_pin(s, e);
    batch_report(slot, STORE_LOADED_LENT, ram_ptr(s->ram, e->off), e->len, e->csum, e);
}

static void read_done_cb(void *arg, int rc)
{
    store_read_t *r = arg;
    store_t *s = r->s;
    index_entry_t *e = r->e;
    bool same = (e->flags & INDEX_F_DISK) && e->dseg == r->loc.seg && e->doff == r->loc.off;
    batch_slot_t *w = r->waiters, *next;

    if (e->reading == r)
        e->reading = NULL;
    if (s->dk.read_stalled) {
        s->dk.read_stalled = false;
        log_info("disk_read_resumed", "reads_pending=%u", disk_reads_pending(s->disk));
    }
    if (r->prefetch)
        s->pf_bytes -= ram_footprint(s->ram, r->len);
    if (r->off != UINT64_MAX) {
        s->promo_bytes -= ram_footprint(s->ram, r->len);
        if (rc == 0 && !store__in_arena(e) && !(e->flags & (INDEX_F_BAD | INDEX_F_LIMBO))) {
            index_ram_set(s->ix, e, r->off); /* promoted: the read landed in its extent */
            s->stored_bytes += e->len;
            s->ram_chunks++;
            s->dk.promoted++;
            if (r->prefetch && w == NULL) /* its first load is the disk's hit */
                index_flags_set(e, INDEX_F_PREFETCHED | (r->chain ? INDEX_F_PF_CHAIN : 0));
            /* a segment reclaim took its disk copy while it was read: RAM-only now, dirty */
            store__dirty_add(s, e);
            store__journal_add(s, ns_get(s->nst, e->ns), e);
        } else {
            ram_free(s->ram, r->off, r->len);
        }
    }
    /* a record that failed its check, or that cannot be read (a truncated segment, an I/O
     * error), is gone: the next load must not try it again */
    if ((rc == -EBADMSG || rc == -EIO) && same) {
        log_warn("disk_record_dropped", "ns=%u rank=%u segment=%016" PRIx64 " offset=%" PRIu64,
                 e->ns, e->rank, r->loc.seg, r->loc.off);
        store__disk_forget(s, e); /* absent now unless in RAM; dropped with its last pin */
    }
    for (; w != NULL; w = next) {
        next = w->next;
        w->read = NULL;
        if (rc == 0 && !(e->flags & INDEX_F_LIMBO) && (store__in_arena(e) || r->heap != NULL)) {
            s->st.hits++;
            s->dk.hits++;
            if (r->prefetch)
                s->dk.prefetch_hits++; /* it joined a read-ahead */
            if (store__in_arena(e)) {
                batch_lend(s, w, e);
            } else {
                batch_report(w, STORE_LOADED_OWNED, r->heap, r->len, e->csum, NULL);
                r->heap = NULL;
            }
        } else {
            s->st.misses++;
            s->dk.misses++;
            batch_miss(w);
        }
        batch_release(s, w->b);
    }
    free(r->heap);
    store_unpin(s, e); /* may drop an entry that failed its checksum */
    free(r);
    store__prefetch_pump(s); /* a read slot is idle now */
}

/* Starts the read of disk-only entry e for slot (or joins the one in flight; slot is NULL for a
 * read-ahead, which nobody waits for). 0, or a negative errno when it cannot be read (a miss):
 * -ENOSPC when no memory could be had for it (mode's rules), -ENOMEM, or disk_read's error. */
static int read_start(store_t *s, index_entry_t *e, read_mode_t mode, batch_slot_t *slot,
                      store_spent_t *spent)
{
    store_read_t *r = e->reading;
    uint64_t now = uv_now(s->loop);
    int rc = -ENOSPC;

    if (r != NULL && r->off != UINT64_MAX) {
        if (slot == NULL)
            return 0;
        /* joins: the extent serves every waiter */
        slot->next = r->waiters != NULL ? r->waiters->next : NULL;
        if (r->waiters != NULL)
            r->waiters->next = slot;
        else
            r->waiters = slot;
        slot->read = r;
        s->dk.read_joins++;
        return 0;
    }
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    *r = (store_read_t){.s = s,
                        .e = e,
                        .off = UINT64_MAX,
                        .len = e->len,
                        .waiters = slot,
                        .prefetch = mode == READ_AHEAD || mode == READ_AHEAD_CHAIN,
                        .chain = mode == READ_AHEAD_CHAIN};
    r->loc = (disk_loc_t){.seg = e->dseg,
                          .off = e->doff,
                          .hdr_len = e->dhdr,
                          .stored = e->dstored,
                          .version = e->dver};
    if (slot != NULL)
        slot->next = NULL;
    store_pin(s, e);
    if (store__alloc(s, e->len, now, mode == READ_ARENA, &r->off) != 0) {
        r->off = UINT64_MAX;
        if (mode == READ_FRAMES &&
            posix_memalign((void **)&r->heap, RECORD_BLOCK, (size_t)record_block(e->len)) != 0)
            r->heap = NULL;
    }
    if (r->off == UINT64_MAX && r->heap == NULL)
        goto fail;
    if (disk_reads_pending(s->disk) == 0) /* the stall clock starts with the first read */
        s->read_progress_ms = uv_hrtime() / 1000000u;
    rc = disk_read(s->disk, &r->loc, e->hash.b, e->rank, e->len, e->csum,
                   r->off != UINT64_MAX ? ram_ptr(s->ram, r->off) : r->heap, read_done_cb, r);
    if (rc != 0) /* -ESTALE or -ENOMEM (never -ENOSPC, which means: no memory for it) */
        goto fail;
    if (r->off != UINT64_MAX) {
        s->promo_bytes += ram_footprint(s->ram, e->len);
        if (e->reading == NULL)
            e->reading = r;
    }
    if (r->prefetch)
        s->pf_bytes += ram_footprint(s->ram, e->len);
    if (slot != NULL)
        slot->read = r;
    if (spent != NULL) {
        spent->disk_reads++;
        spent->disk_read_bytes += e->dstored;
    }
    return 0;

fail:
    if (r->off != UINT64_MAX)
        ram_free(s->ram, r->off, e->len);
    free(r->heap);
    free(r);
    store_unpin(s, e);
    return rc;
}

/* Chain read-ahead: a load read e from disk, or found it in RAM as the first load of a chunk
 * read ahead; the records written right after e in its segment that continue e's chain (each the
 * stored successor of the one before: the cleaner writes a chain's chunks in the order they were
 * saved) are queued for read-ahead, as far as the window reaches (below): a client
 * loading a prefix chunk by chunk without a lookup finds the next chunk read (the page cache's
 * sequential read-ahead, along a chain). The second trigger is the page cache's read-ahead
 * marker (0.2.6): the first load of a chunk this read-ahead brought in (INDEX_F_PF_CHAIN) slides
 * the window on; without it every third 2 MiB chunk of a chain loaded one by one by a client
 * slower than the disk waited for a read of its own with nothing in flight behind it. Chunks of
 * the window already in RAM, queued or being read count towards the depth and are not read
 * again. A lookup's read-ahead is not a trigger, neither joined nor loaded: the lookup read what
 * it answered, and a load of a prompt that is a prefix of a longer stored chain reads no further
 * (a load's own read still triggers, as it did before 0.2.6). The window grows as the page
 * cache's does once its read-ahead is used (0.2.8): a load's own read looks prefetch_depth_bytes
 * ahead, a load of a chunk this read-ahead brought in (confirmed: the client walks the chain)
 * four times as far. Only the window is deeper: the reads started at once stay within
 * prefetch_depth_bytes (store__prefetch_pump), the rest waits in the queue, so the device always
 * has the next read of the chain while the client takes the last one, instead of waiting for the
 * client's next load to ask for it (0.2.8 measurements in README, "Reads one at a time"). */
static void chain_read_ahead(store_t *s, const index_entry_t *e, bool confirmed)
{
    uint64_t ahead = 0,
             window = s->cfg->disk.prefetch_depth_bytes * (confirmed ? STORE_CHAIN_GROWTH : 1u);

    for (index_entry_t *y = e->seg_prev; y != NULL && y->parent == e; e = y, y = y->seg_prev) {
        ahead += ram_footprint(s->ram, y->len);
        if (ahead > window)
            break;
        if (store__prefetchable(s, y))
            store__prefetch(s, y, true);
    }
}

int store_load_batch(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                     bool arena, store_chunk_cb chunk_cb, store_batch_cb done_cb, void *arg,
                     store_spent_t *spent)
{
    index_entry_t *last_read = NULL;       /* the last chunk read (pinned by its read) */
    size_t read_i = 0, slide_i = SIZE_MAX; /* its slot; the last chain read-ahead's first load */
    load_batch_t *b = malloc(sizeof *b + n * sizeof b->slots[0]);

    if (b == NULL)
        return -ENOMEM;
    b->chunk_cb = chunk_cb;
    b->done_cb = done_cb;
    b->arg = arg;
    b->outstanding = 1; /* held until every chunk was started */
    b->n = n;
    b->waiting = false;
    for (size_t i = 0; i < n; i++) {
        index_entry_t *e = store_find(s, ns, rank, &h[i]);
        batch_slot_t *slot = &b->slots[i];

        *slot = (batch_slot_t){.b = b, .i = i};
        if (e != NULL && store__in_arena(e)) {
            /* in RAM: the arena bytes themselves, pinned for the callee */
            store__touch(s, e);
            s->st.hits++;
            if (!(e->flags & INDEX_F_RAM) || (e->flags & INDEX_F_PREFETCHED))
                s->dk.hits++; /* spilled, or promoted by a read-ahead for this load */
            if (e->flags & INDEX_F_PREFETCHED) {
                if (e->flags & INDEX_F_PF_CHAIN)
                    slide_i = i; /* the chain's window slides on (chain_read_ahead) */
                index_flags_clear(e, INDEX_F_PREFETCHED | INDEX_F_PF_CHAIN);
                s->dk.prefetch_hits++;
            }
            batch_lend(s, slot, e);
            continue;
        }
        if (e != NULL && !store__absent(e) && (e->flags & INDEX_F_DISK) && s->disk != NULL &&
            !s->closing) {
            store__touch(s, e);
            if (s->dk.read_stalled)
                s->dk.stall_misses++; /* a read now would only wait: a miss at once */
            else if (read_start(s, e, arena ? READ_ARENA : READ_FRAMES, slot, spent) == 0) {
                b->outstanding++;
                /* its own read, or a chain read-ahead's it joined; a lookup's read-ahead covers
                 * what that lookup answered, and no chain read-ahead reads past it */
                if (!slot->read->prefetch || slot->read->chain) {
                    last_read = e;
                    read_i = i;
                }
                continue;
            }
        }
        s->st.misses++;
        if (s->disk != NULL)
            s->dk.misses++;
        batch_miss(slot);
    }
    if (slide_i != SIZE_MAX && (last_read == NULL || slide_i > read_i) && s->pf_cap > 0) {
        /* found again: its loan may have ended in the callback and an allocation since may have
         * released its RAM copy (its entry stays while it is on disk) */
        index_entry_t *e = store_find(s, ns, rank, &h[slide_i]);
        if (e != NULL && (e->flags & INDEX_F_DISK))
            chain_read_ahead(s, e, true);
        store__prefetch_pump(s);
    } else if (last_read != NULL && s->pf_cap > 0) {
        chain_read_ahead(s, last_read, false); /* pinned by its read: still there */
        store__prefetch_pump(s);
    }
    if (b->outstanding > 1)
        waiting_add(s, b); /* waits on reads: answered early if the disk stalls */
    batch_release(s, b);
    return 0;
}

/* --- stalled reads ---
 *
 * A disk that stops answering (a dead device, a hung network filesystem) must not hold the
 * loads that wait on it until the client gives up, nor each of them one slot of its session's
 * window. When reads are in flight and none has finished for disk.read_stall_ms, the reads are
 * stalled (status disk.read_stalled, log disk_read_stall): every load waiting on one is answered
 * at once, its chunks not read yet as misses (status disk.stall_misses), and until a read
 * finishes, loads do not start reads (the chunks they would read are misses at once) nor do
 * read-aheads. The reads themselves stay in flight (a worker blocked in the kernel cannot be
 * called back): when one finishes, the stall ends and its chunk is promoted as usual, with
 * nobody waiting for it. Progress, not a per-load deadline, is the rule: a large load from a slow
 * but working disk finishes reads all along and is never cut short. Progress is when a read last
 * finished its system calls, stamped by the worker itself (disk_read_done_ms), or when the loop
 * started the first read after none was in flight, on the monotonic clock
 * (uv_hrtime, not the loop's cached time): a loop busy for a while, whose completions wait to be
 * run, does not make a working disk look stalled. Checked from store_tick (the server's sweep,
 * once a second), so a load waits at most read_stall_ms plus a second. Lookups still report
 * disk-only chunks meanwhile (their loads miss). */

/* Answers load b now: its chunks still waiting on reads are misses. */
static void answer_waiting(store_t *s, load_batch_t *b)
{
    b->outstanding++; /* held while its slots are answered */
    for (size_t i = 0; i < b->n; i++) {
        batch_slot_t *slot = &b->slots[i], **pp;
        if (slot->read == NULL)
            continue;
        for (pp = &slot->read->waiters; *pp != NULL && *pp != slot; pp = &(*pp)->next)
            ;
        if (*pp == slot)
            *pp = slot->next;
        slot->read = NULL;
        s->st.misses++;
        s->dk.misses++;
        s->dk.stall_misses++;
        batch_miss(slot);
        b->outstanding--;
    }
    waiting_del(s, b);
    batch_release(s, b);
}

void store__read_stall_check(store_t *s)
{
    uint32_t stall_ms = s->cfg->disk.read_stall_ms, pending;
    uint64_t now_ms = uv_hrtime() / 1000000u, progress;

    if (s->disk == NULL)
        return;
    if (stall_ms == 0) {
        s->dk.read_stalled = false; /* set to 0 (live) while stalled: loads read again */
        return;
    }
    pending = disk_reads_pending(s->disk);
    progress = disk_read_done_ms(s->disk);
    if (s->read_progress_ms > progress)
        progress = s->read_progress_ms;
    if (pending == 0 || (!s->dk.read_stalled && now_ms - progress < stall_ms))
        return;
    if (!s->dk.read_stalled) {
        s->dk.read_stalled = true;
        s->dk.read_stalls++;
        log_warn("disk_read_stall", "reads_pending=%u since_ms=%" PRIu64 " action=miss", pending,
                 now_ms - progress);
    }
    while (s->waiting_head != NULL)
        answer_waiting(s, s->waiting_head);
}

/* --- read-ahead --- */

void store__prefetch(store_t *s, index_entry_t *e, bool chain)
{
    uint64_t foot = ram_footprint(s->ram, e->len);
    prefetch_key_t *k;

    if (s->disk == NULL || s->closing || s->pf_n == s->pf_cap ||
        s->pf_bytes + foot > s->cfg->disk.prefetch_bytes) {
        s->dk.prefetch_skipped++;
        return;
    }
    k = &s->pf[(s->pf_head + s->pf_n) % s->pf_cap];
    *k = (prefetch_key_t){
        .ns = e->ns, .rank = e->rank, .hash = e->hash, .foot = foot, .chain = chain};
    s->pf_n++;
    s->pf_bytes += foot;
    index_flags_set(e, INDEX_F_PFQ);
}

/* Takes the oldest key off the queue: its entry, unmarked, when it is still there; *chain: the
 * key was a chain read-ahead's (may be NULL). */
static index_entry_t *prefetch_pop(store_t *s, bool *chain)
{
    prefetch_key_t k = s->pf[s->pf_head];
    index_entry_t *e;

    s->pf_head = (s->pf_head + 1) % s->pf_cap;
    s->pf_n--;
    s->pf_bytes -= k.foot;
    if (chain != NULL)
        *chain = k.chain;
    e = index_find(s->ix, k.ns, k.rank, &k.hash);
    if (e != NULL)
        index_flags_clear(e, INDEX_F_PFQ);
    return e;
}

/* Whether a read-ahead of footprint foot leaves the saves their room: the RAM that is free or
 * clean (neither dirty, nor pinned by a client or a save, nor reserved by a shared-memory save,
 * nor held by reads and saves in flight) stays above half the cleaner's target after it; while
 * read-aheads hold extents the cleaner counts them as not clean and writes that much more
 * (store__clean_ahead). A bound in bytes: the clean bytes of a chain the cleaner has written up
 * to its middle are no tail, but an eviction that would drop a dirty tail releases them first
 * (store.c, store__alloc: a clean ancestor of the tail), so they count (test_hostile's lookup
 * storm, 16 MiB of 8 MiB chains, refused demotions before that and none since). */
static bool prefetch_room(const store_t *s, uint64_t foot)
{
    uint64_t held =
        s->dirty_bytes + s->promo_bytes + s->ingest_bytes + s->pinned_foot + s->resv_foot;

    return held + foot + store__clean_target(s) / 2 <= s->ram_cap;
}

void store__prefetch_pump(store_t *s)
{
    /* one read slot stays free for a load's own read (with a single slot, none can) */
    uint32_t max = s->cfg->disk.max_reads_in_flight, slots = max > 1 ? max - 1 : 1;
    bool started = false;

    while (s->pf_n > 0) {
        int rc;
        uint64_t foot = s->pf[s->pf_head].foot;
        bool chain = false;
        index_entry_t *e;
        if (s->disk == NULL)
            return;
        if (!s->closing) {
            if (s->dk.read_stalled || disk_reads_pending(s->disk) >= slots ||
                (s->promo_bytes > 0 && s->promo_bytes + foot > s->cfg->disk.prefetch_depth_bytes))
                break; /* the running reads call again when they finish */
            if (!prefetch_room(s, foot) && s->promo_bytes > 0)
                break; /* nor is there room yet: the reads landing give theirs back */
        }
        e = prefetch_pop(s, &chain);
        if (s->closing) {
            s->dk.prefetch_skipped++;
            continue;
        }
        if (e == NULL || store__absent(e) || store__in_arena(e) || !(e->flags & INDEX_F_DISK) ||
            e->reading != NULL)
            continue; /* gone, loaded or being read meanwhile */
        rc = prefetch_room(s, foot)
                 ? read_start(s, e, chain ? READ_AHEAD_CHAIN : READ_AHEAD, NULL, NULL)
                 : -ENOSPC;
        if (rc == -ENOSPC) {
            /* no RAM without dropping a chunk: what is queued would not find any either */
            s->dk.prefetch_skipped += 1 + s->pf_n;
            while (s->pf_n > 0)
                (void)prefetch_pop(s, NULL);
            break;
        }
        if (rc != 0) {
            s->dk.prefetch_skipped++; /* this record cannot be read now: the next may */
            continue;
        }
        s->dk.prefetches++;
        started = true;
    }
    if (started)
        store__clean_ahead(s); /* the room it holds was the saves': the cleaner makes it again */
}

/* --- verification --- */

typedef struct {
    store_t *s;
    index_entry_t *e;
    ingest_item_t item;
} verify_t;

static void verified_cb(void *arg)
{
    verify_t *v = arg;
    store_t *s = v->s;
    index_entry_t *e = v->e;

    index_flags_clear(e, INDEX_F_VERIFYING);
    s->verify_bytes -= v->item.len;
    if (v->item.csum != e->csum && !(e->flags & INDEX_F_BAD)) {
        store__dirty_del(s, e);
        index_flags_set(e, INDEX_F_BAD); /* absent from now on; dropped with its last pin */
        verify_dropped(s, e, "release_corrupt");
    }
    store_unpin(s, e);
    free(v);
    store__job_done(s);
}

void store_verify(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    index_entry_t *e = store_find(s, ns, rank, h);
    verify_t *v;

    if (e == NULL || !store__in_arena(e) || s->loop == NULL)
        return; /* not stored, or only on disk: every read verifies it */
    if (e->flags & (INDEX_F_VERIFYING | INDEX_F_BAD))
        return; /* one verification at a time: a RELEASE naming it again (or 4096 times) queues
                   no more work on the pool nor more pins */
    if (s->verify_bytes > 0 && s->verify_bytes + e->len > STORE_VERIFY_BYTES)
        return; /* nor one naming every chunk (store.h) */
    v = malloc(sizeof *v);
    if (v == NULL)
        return;
    s->verifies++;
    *v = (verify_t){
        .s = s, .e = e, .item = {.dst = ram_ptr(s->ram, e->off), .src = NULL, .len = e->len}};
    store_pin(s, e); /* the extent cannot move or be freed while the worker reads it */
    index_flags_set(e, INDEX_F_VERIFYING);
    s->verify_bytes += v->item.len;
    if (ingest_run(s->loop, &v->item, 1, 1, verified_cb, v) != 0) {
        index_flags_clear(e, INDEX_F_VERIFYING);
        s->verify_bytes -= v->item.len;
        store_unpin(s, e);
        free(v);
        return;
    }
    s->jobs++;
}
