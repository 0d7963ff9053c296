/*
 * store_internal.h - what store.c (lookups, saves, eviction, pins, status) and store_io.c (loads
 * and disk reads, demotion, the disk tier's callbacks, the shutdown persist, verifications)
 * share. Internal to those two files (and the store's unit tests): nothing else includes it.
 * Functions here are store__verb, as libuv names its internals.
 *
 * Threads: loop thread only.
 */
#ifndef KVT_STORE_INTERNAL_H
#define KVT_STORE_INTERNAL_H

#include "store.h"

#include "disk.h"
#include "drops.h"
#include "index.h"
#include "journal.h"
#include "ram.h"

#define STORE_VICTIM_SCAN 4096u
#define STORE_SPILL_SCAN 64u       /* chunks being written looked at per spill */
#define STORE_PREFETCH_QUEUE 1024u /* read-ahead keys queued at most (32 KiB) */

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

/* A disk-only chunk of a looked-up prefix waiting for an idle read slot (store__prefetch). The
 * key, not the entry: the chunk may be evicted, dropped or promoted meanwhile. */
typedef struct {
    uint32_t ns;
    uint16_t rank;
    kvt_wire_hash_t hash;
    uint64_t foot; /* its arena footprint, counted in pf_bytes */
    bool chain;    /* queued by a chain read-ahead (store_io.c), not by a lookup */
} prefetch_key_t;

/* A read-ahead candidate an all-ranks lookup met at position i (queued once the answer is known:
 * only those within it are read ahead). */
typedef struct {
    index_entry_t *e;
    uint32_t i;
} prefetch_seen_t;

struct store {
    ns_table_t *nst;
    index_t *ix;
    ram_t *ram;            /* the arena: ram_cap + the write headroom (store_new) */
    uint64_t ram_cap;      /* ram.capacity_bytes: the RAM tier's share of the arena */
    uint64_t spill_bytes;  /* payload of INDEX_F_SPILL chunks (in the headroom) */
    uint64_t spill_foot;   /* their arena footprint */
    unsigned workers;      /* thread-pool jobs one save's checksums may spread over */
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
    uint64_t last_seq;       /* the last write ticket issued */
    uint64_t done_seq;       /* the last one whose flush finished */
    index_entry_t *limbo;    /* dropped while pinned: unindexed, freed at the last unpin */
    /* arena bytes (footprints) held outside the RAM tier's chunks */
    uint64_t ingest_bytes; /* saves and commits being checksummed */
    uint64_t promo_bytes;  /* disk reads landing in the arena */
    /* the cleaner: RAM chunks without a disk copy, least recent first (INDEX_F_DIRTY) */
    index_entry_t *dirty_head, *dirty_tail;
    index_entry_t *wb_head, *wb_tail; /* chunks being written (INDEX_F_WBUF), oldest first */
    uint64_t dirty_bytes;             /* their payload bytes */
    uint64_t clean_target;            /* free or clean RAM the cleaner keeps (0: no cleaner) */
    uint64_t verifies, verify_drops;
    uint64_t verify_bytes;  /* being re-hashed for store_verify (STORE_VERIFY_BYTES at most) */
    uint64_t jobs;          /* saves, commits and verifications in flight (store_close waits) */
    uv_timer_t clean_timer; /* the cleaner's next turn (initialised with the disk tier) */
    bool clean_pending;
    relink_t *relink; /* recovery only */
    size_t nrelink, relinkcap;
    /* shutdown: the dirty chunks are written (the dirty FIFO is what is left to write) */
    uv_timer_t persist_timer; /* initialised when the disk tier is attached */
    uint64_t persist_deadline, persist_start, persisted, persist_appended, persist_dirty;
    bool persist_full;       /* the persist stopped where the disk had no room left unreclaimed */
    uint64_t persist_errors; /* the disk's write errors when the persist began */
    uint64_t reclaim_seg;    /* the segment whose reclaim continues a slice per turn, or 0 */
    bool close_waiting;      /* store_close waits for jobs before persisting */
    int close_handles;
    void (*close_done)(void *arg);
    void *close_arg;
    /* the RAM tier across restarts (store_reattach.c) */
    ram_cold_reason_t ram_why; /* RAM_ATTACHED: the arena was kept */
    journal_t *journal;        /* NULL: no journal (a memfd, ram.reattach false, or it failed) */
    char journal_path[4096];
    store_ram_recovery_t rec;
    /* the disk index checkpoint (store_io.c; checkpoint.h) */
    uv_timer_t ckpt_timer;   /* every disk.checkpoint_interval_s (initialised with the disk) */
    bool ckpt_busy;          /* a periodic checkpoint is being written on the thread pool */
    bool ckpt_close_waiting; /* the stop waits for it before writing its own */
    /* read-ahead of looked-up prefixes (store_io.c, store__prefetch): a ring of the chunks
     * waiting for an idle read slot, oldest first, and the footprints queued or being read */
    prefetch_key_t *pf;
    uint32_t pf_head, pf_n, pf_cap;
    uint64_t pf_bytes;
    struct put *puts_tail;    /* store.c: the newest save or commit in flight (a list by prev) */
    uint64_t pinned_foot;     /* footprints of pinned arena chunks (INDEX_F_PINRAM) */
    uint64_t resv_foot;       /* footprints of shared-memory reservations not committed yet */
    prefetch_seen_t *pf_seen; /* store_lookup_all: the read-ahead candidates of one lookup */
    /* store_lease_cost: the entries one request counted already (open addressing over entry
     * pointers, stamped with the request's generation so that no request clears it) */
    struct store_seen *seen;
    uint32_t seen_cap, seen_gen;
    /* a stalled disk (store_io.c, "Stalled reads"): the loads waiting on reads, oldest first,
     * and when the first read started with none in flight (uv_hrtime ms; the workers stamp
     * when a read finished: disk_read_done_ms) */
    struct load_batch *waiting_head, *waiting_tail;
    uint64_t read_progress_ms; /* (dk.read_stalled says whether they are stalled now) */
};

/* An entry none of whose copies exists any more (pinned while its disk record failed its
 * checksum or its write failed), or whose bytes failed a verification: it counts as absent and
 * leaves the index with its last pin. */
static inline bool store__absent_flags(unsigned flags)
{
    return (flags & INDEX_F_BAD) || !(flags & (INDEX_F_RAM | INDEX_F_WBUF | INDEX_F_DISK));
}

static inline bool store__absent(const index_entry_t *e)
{
    return store__absent_flags(e->flags);
}

/* Whether e's bytes are in the arena at e->off (RAM-resident, and not found bad). */
static inline bool store__in_arena(const index_entry_t *e)
{
    return (e->flags & (INDEX_F_RAM | INDEX_F_WBUF)) != 0 && !(e->flags & INDEX_F_BAD);
}

/* Whether a lookup's hit e is a chunk to read ahead: only on disk, not being read, not queued. */
static inline bool store__prefetchable(const store_t *s, const index_entry_t *e)
{
    return s->pf_cap > 0 && !store__in_arena(e) && (e->flags & INDEX_F_DISK) &&
           !(e->flags & (INDEX_F_BAD | INDEX_F_LIMBO | INDEX_F_PFQ)) && e->reading == NULL;
}

/* Read-ahead (store.h, "Read-ahead"): prefetchable e joins the queue while it
 * stays within disk.prefetch_bytes (else it is counted skipped); store__prefetch_pump starts
 * queued reads while the disk has idle read slots (one of disk.max_reads_in_flight kept free
 * for loads, and reads landing in the arena under disk.prefetch_depth_bytes) and the room holds,
 * and drops the queue when a read cannot get RAM without dropping a chunk or the store is
 * closing. */
void store__prefetch(store_t *s, index_entry_t *e, bool chain);
void store__prefetch_pump(store_t *s);

/* Stalled reads (store_io.c): from store_tick, answers the loads waiting on a disk that has
 * finished no read for disk.read_stall_ms. */
void store__read_stall_check(store_t *s);

/* Frees the RAM copy of e (the entry stays). */
void store__ram_release(store_t *s, index_entry_t *e);

/* Removes e from the index and every tier; its successors become orphans. */
void store__drop(store_t *s, index_entry_t *e);

/* The dirty FIFO (least recent first): e (RAM-resident, no disk copy, no write pending, not bad
 * nor dropped) joins at the tail / leaves it; each is a no-op when e is not eligible / not listed.
 */
void store__dirty_add(store_t *s, index_entry_t *e);
void store__dirty_del(store_t *s, index_entry_t *e);
/* Moves dirty e to the tail of the FIFO and clears its mark (INDEX_F_REF). */
void store__dirty_requeue(store_t *s, index_entry_t *e);

/* An access to e (index_touch): a dirty e is marked (INDEX_F_REF) and moves to the dirty FIFO's
 * tail when the cleaner reaches it (second chance). */
void store__touch(store_t *s, index_entry_t *e);

/* Allocates len bytes, evicting chain tails while the RAM tier (ram_cap) or the arena is full
 * (store.h, the policy): a tail with a disk copy is released, one whose write is in flight is
 * spilled (while the RAM tier is what is full), one without either is dropped when allow_drop
 * (counted as a demotion refused), else the allocation fails. 0 or -ENOSPC / -EINVAL. */
int store__alloc(store_t *s, uint64_t len, uint64_t now_ms, bool allow_drop, uint64_t *off);
/* Releases the RAM copies of clean chain tails, coldest first, while the RAM tier holds more
 * than ram_cap (a re-attached arena: chunks that were spilled into the write headroom come back
 * as RAM chunks); the dirty ones wait for the cleaner, and store_tick trims again. */
void store__ram_trim(store_t *s, uint64_t now_ms);
/* Whether the RAM tier holds more than ram_cap (the cleaner then writes every dirty chunk, so
 * that store__ram_trim can release them). */
bool store__ram_over(const store_t *s);

/* Writes RAM chunk e of namespace ns to the disk by reference: its extent is lent to the flush,
 * it stays in RAM, pinned until the write commits. 0 or disk_append's error. */
int store__write_back(store_t *s, const ns_t *ns, index_entry_t *e);

/* Runs the cleaner now (bounded), and again on later turns while it is short of its target. */
void store__clean_ahead(store_t *s);

/* Ends e's spill (INDEX_F_SPILL): its bytes count in the RAM tier again. */
void store__spill_end(store_t *s, index_entry_t *e);
/* Spilled e's write is over and nobody pins it: it leaves RAM when it is on disk, else it
 * rejoins the RAM tier. */
void store__spill_done(store_t *s, index_entry_t *e);

/* The list of chunks being written: e joins when its write starts, leaves when it commits. */
void store__wb_add(store_t *s, index_entry_t *e);
void store__wb_del(store_t *s, index_entry_t *e);

/* Forgets e's disk copy (the entry stays). */
void store__disk_forget(store_t *s, index_entry_t *e);

/* The disk tier's callbacks (store_io.c), and the store's part of close. */
extern const disk_ops_t store__disk_ops;
void store__persist_begin(store_t *s);

/* A dropped chunk's last pin went (store.c): its RAM bytes and the entry go now. */
void store__limbo_free(store_t *s, index_entry_t *e);

/* A save, commit or verification in flight finished (store_close may go on). */
void store__job_done(store_t *s);

/* The RAM journal (store_reattach.c; journal.h). store__journal_add: RAM-resident e of ns (just
 * published or promoted) is journaled; store__journal_del: e's extent is about to be given up
 * (before its ram_free); store__journal_flush: what is gathered reaches the file (before a save
 * is answered, and before an extent given up can be handed out again). No-ops without a
 * journal. */
/* The cleaner's target in force: clean_target bounded by what the disk holds now (store_io.c). */
uint64_t store__clean_target(const store_t *s);
void store__journal_add(store_t *s, const ns_t *ns, const index_entry_t *e);
void store__journal_del(store_t *s, const index_entry_t *e);
void store__journal_flush(store_t *s);

/* Re-attach (store_attach_disk, after the disk tier's recovery and before the chains are
 * relinked): the journal's chunks whose bytes match join the index (their parent links queued
 * in s->relink), a new journal is started and the arena's header written. */
void store__ram_recover(store_t *s);

/* Recovery: chunk h of (ns, rank) had the predecessor parent; store__relink links it (or marks
 * it an orphan: its predecessor absent, or the link would close a loop, which records written at
 * different times can describe) once every tier is recovered, and frees the queue. */
void store__relink_queue(store_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         const uint8_t parent[16]);
void store__relink(store_t *s);

/* Rewrites the journal to the chunks RAM holds now (sync: fsync'd, at a clean stop). */
void store__journal_compact(store_t *s, bool sync);

/* The end of store_close: the disk index checkpoint is written (store__checkpoint_at_stop; it
 * returns false when a periodic one is still being written, and calls store__close_finish again
 * once it is), the journal is compacted, then the caller's done. */
void store__close_finish(void *arg);
bool store__checkpoint_at_stop(store_t *s);

#endif /* KVT_STORE_INTERNAL_H */
