/*
 * store.h - chunk storage semantics: lookup, save, load and eviction over the index and the
 * RAM arena, and the disk tier below them. The request handlers (requests.c) call these; the
 * store never sees a socket. It owns every chunk's lifetime: other modules hold chunks as
 * opaque handles (store_chunk_t) and pin them only through store_pin().
 *
 * Prefix semantics: a lookup counts leading hashes present, contiguous from the first. Saves
 * link each chunk to its predecessor (the previous hash of the same save, or the declared
 * parent) so that eviction only ever removes chain tails (index.h). Allocation under pressure
 * evicts least recently used tails that are neither leased nor pinned until the chunk fits, or
 * answers NOSPACE. Replicated namespaces store every chunk once, under rank 0.
 *
 * Integrity (the commit checksum, csum): the store computes every chunk's XXH3-64 itself, off
 * the loop (ingest.h), before the chunk is published: a save copies its frames into arena
 * extents and hashes them in one pass on the thread pool, a shared-memory commit hashes the
 * extents the client wrote; the chunk becomes visible to lookups and loads, and the save is
 * answered, only then (store_save and store_commit complete through a callback). Loads report
 * the csum of every chunk; the disk writes (write-back and the shutdown persist) write a chunk
 * only if its bytes still match it; store_verify() re-checks a chunk a client found corrupt.
 *
 * Tiers (with the disk tier attached, store_attach_disk): an entry may be RAM-resident (dirty:
 * without a disk copy; clean: with one), being written (RAM-resident, its disk write pending,
 * pinned for it; spilled when it was evicted meanwhile), or only on disk. A chunk leaves the
 * index only when it is in no tier. A reclaimed disk segment drops the disk-only entries it
 * held; their stored successors become orphans (kept, since a later save of the missing chunk
 * makes them reachable again; cascading would throw away data that is still valid). Lookups
 * count chunks in any tier, and leases cover disk-resident chunks: a segment holding a leased
 * disk-only chunk is not reclaimed until the lease expires (the reclaim takes the next oldest
 * segment instead), while the segments so kept stay within a quarter of the disk's capacity and
 * another can go (disk.h, disk_reclaim_t; 0.2.10).
 *
 * Saves never wait on the disk (the policy; README "Disk tier"):
 *   - write-back ahead of eviction: a cleaner writes the dirty chunks to disk, least recently
 *     saved or used first, by reference (the disk reads the arena extent, the chunk stays in RAM
 *     and readable), whenever more than ram.capacity_bytes - ram.clean_target_bytes (default:
 *     half the RAM) of RAM is dirty, bounded per loop turn and by the disk's write budget
 *     (disk.write_buffer_bytes per batch, two batches). A written chunk is clean: evicting it
 *     only releases its RAM copy;
 *   - the arena is the RAM tier's capacity plus a write headroom of those two batches: a chunk
 *     evicted while its write is in flight is spilled (out of the RAM tier, into the headroom,
 *     still readable) and leaves RAM when the write commits. The headroom takes a burst the
 *     disk is behind on, as the copying write buffers of a disk tier would, without a copy;
 *   - a save (or a promotion) takes free RAM; when there is none it evicts the coldest tails:
 *     a clean one is released and one being written is spilled at once (or a clean ancestor
 *     of it, older, is released instead); when the coldest is dirty, a chunk being written
 *     (tail or not) or a clean tail is taken in its place; only when there is neither is the
 *     dirty tail dropped (the disk could not take it in time), counted in
 *     disk.demotions_refused, chain tails first - a save never waits for a disk write. Under a
 *     load the disk sustains, the cold half of RAM is clean and nothing is dropped; under a
 *     burst faster than the disk the cleaner writes at the disk's speed, the headroom fills,
 *     and the excess is dropped. What a save waits on is its own copy and checksum on the
 *     thread pool.
 * A load that finds a chunk only on disk reads it straight into a new arena extent (promotion,
 * no copy on the loop), or, when no extent can be had without dropping a chunk (frames path
 * only), into a heap buffer; the shared-memory path answers the promoted chunk by location.
 *
 * Threads: loop thread only. The store owns the index, the arena and the disk tier; namespaces
 * are borrowed from the ns table given at creation, which must outlive the store, and so must
 * the config.
 */
#ifndef KVT_STORE_H
#define KVT_STORE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "disk.h"
#include "kvt_proto.h"
#include "ns.h"

typedef struct store store_t;

/*
 * A stored chunk as every module but index.c and store.c sees it: an opaque handle (the index
 * entry, whose layout is private to index.c and store.c). Only the store pins and frees chunks:
 * a handle returned by a store call is borrowed until the next store call that can evict or
 * drop (save, reserve, commit, load completion, unpin), unless the caller pins it with
 * store_pin(); a pinned chunk is never evicted, reclaimed from disk nor freed, and its bytes
 * never move, until the matching store_unpin().
 */
typedef struct index_entry store_chunk_t;

typedef struct {
    uint64_t hits;         /* chunks found by lookups and loads (in any tier) */
    uint64_t misses;       /* chunks asked by lookups and loads and not found */
    uint64_t evictions;    /* chunks evicted from RAM to make room */
    uint64_t nospace;      /* chunks refused for lack of evictable space */
    uint64_t nospace_held; /* of those, refused because leases, pins or reservations held the
                              room (a chunk larger than the arena is the other cause) */
    uint64_t stored;       /* chunks stored */
} store_stats_t;

/* What the start found in the arena ("ram.recovery"; README "Restarts"). */
typedef struct {
    const char *path;         /* "reattach" (the arena was kept) or "cold" (created anew) */
    const char *reason;       /* why cold (ram.h's words: "disabled", "size", ...), or "attached" */
    uint64_t ms;              /* the RAM tier's recovery: journal replay, checksums, index */
    uint64_t chunks;          /* chunks re-attached */
    uint64_t bytes;           /* their payload bytes */
    uint64_t discarded;       /* journal entries not re-attached: outside the arena, overlapping,
                                 a namespace that cannot be declared, a key held by another copy,
                                 or the whole journal when it belongs to another arena */
    uint64_t checksum_drops;  /* entries whose bytes in the arena no longer match their csum */
    uint64_t journal_records; /* records the replay read */
    int journal_error;        /* 0, or the negative errno that keeps the journal off */
    /* the chains of both tiers, relinked at start (relink.c) */
    uint64_t relinks;         /* chunks linked under the predecessor their record names */
    uint64_t relink_steps;    /* the work of the loop checks (relink.c) */
    uint64_t relinks_refused; /* left orphans: the link would have closed a loop */
} store_ram_recovery_t;

/* The RAM tier as status shows it ("ram", beside the sessions' holds). */
typedef struct {
    uint64_t capacity_bytes;  /* the RAM tier's capacity (ram.capacity_bytes) */
    uint64_t arena_bytes;     /* the arena's size: the capacity + the write headroom */
    uint64_t huge_page_bytes; /* the arena's huge page size (ram_huge_page); else 0 */
    uint64_t used_bytes;      /* allocated to the RAM tier, rounded to allocation units */
    uint64_t demoting_bytes;  /* evicted chunks whose disk write is in flight (the headroom) */
    uint64_t resident_bytes;  /* backed by memory: the arena file's allocated blocks */
    uint64_t stored_bytes;    /* payload bytes of the RAM-resident chunks */
    uint64_t chunks;          /* RAM-resident chunks */
    uint64_t index_chunks;    /* chunks in the index, any tier */
    store_stats_t counts;
    uint64_t leased_chunks;      /* chunks under an unexpired lookup lease */
    uint64_t free_runs;          /* free extents of the arena */
    uint64_t largest_free_bytes; /* the largest of them */
    const char *arena_path;      /* borrowed from the store; "" for a memfd */
    uint64_t dirty_bytes;        /* RAM chunks without a disk copy (with the disk tier) */
    uint64_t ingest_bytes;       /* extents of saves being copied and checksummed */
    uint64_t promoting_bytes;    /* extents disk reads are landing in */
    uint64_t clean_target_bytes; /* RAM the cleaner keeps free or clean (0: no disk tier) */
    uint64_t verifies;           /* re-verifications clients asked for (RELEASE CORRUPT) */
    uint64_t verify_drops;       /* chunks removed: their bytes no longer matched their csum */
    uint32_t arena_gen;          /* the arena's generation (ram.h) */
    uint64_t journal_bytes;      /* the journal's size (0: no journal) */
    const char *journal_path;    /* borrowed; "" without a journal */
    store_ram_recovery_t recovery;
} store_ram_stats_t;

/* The store's counts of the disk tier. */
typedef struct {
    uint64_t chunks;           /* entries with a disk copy */
    uint64_t wbuf;             /* entries whose disk write is pending */
    uint64_t hits;             /* load chunks served by a disk read */
    uint64_t misses;           /* loads that missed RAM and that the disk could not serve */
    uint64_t evictions;        /* entries dropped by segment reclaim */
    uint64_t demoted;          /* RAM chunks written to disk (the cleaner, the persist) */
    uint64_t demoted_clean;    /* RAM evictions whose disk copy already existed */
    uint64_t refused;          /* RAM evictions of chunks not written yet (dropped) */
    uint64_t write_lost;       /* kept for status: a failed write no longer loses a chunk */
    uint64_t promoted;         /* chunks read back into RAM */
    uint64_t read_joins;       /* loads that joined a read of the same chunk in flight */
    uint64_t prefetches;       /* read-aheads started by lookups (store.h, "Read-ahead") */
    uint64_t prefetch_hits;    /* loads a read-ahead served (joined it, or found its promotion) */
    uint64_t prefetch_skipped; /* disk-only hits not read ahead: over disk.prefetch_bytes, no
                                  RAM without dropping a chunk, or the store was closing */
    uint64_t read_stalls;      /* times the disk finished no read for disk.read_stall_ms */
    uint64_t stall_misses;     /* load chunks answered as misses because of a stall */
    bool read_stalled;         /* now: reads are stalled (until one finishes) */
    uint64_t orphaned;         /* successors detached from a dropped chunk */
    uint64_t recover_skipped;  /* recovered records of conflicting namespaces */
    uint64_t recover_dropped;  /* recovered records of a dropped namespace (drops.h) */
    uint64_t records_lost;     /* disk copies forgotten: past the end of a truncated segment */

    /* the index checkpoint (checkpoint.h) */
    uint64_t checkpoints;        /* written */
    uint64_t checkpoint_fails;   /* that could not be written */
    uint64_t checkpoint_bytes;   /* the size of the last one written */
    uint64_t checkpoint_records; /* the records it holds */
} store_disk_counts_t;

typedef enum {
    STORE_DISK_OFF = 0,     /* disk.enabled is false */
    STORE_DISK_UNAVAILABLE, /* enabled, but the directory could not be opened or locked */
    STORE_DISK_OK,
    STORE_DISK_DEGRADED, /* a write failed: demotions are refused until the retry */
} store_disk_state_t;

/* The disk tier as status shows it ("disk"). */
typedef struct {
    bool enabled; /* disk.enabled */
    store_disk_state_t state;
    int error;         /* UNAVAILABLE: the negative errno of the attach, else 0 */
    disk_stats_t tier; /* OK, DEGRADED: the disk tier's figures; else zero */
    store_disk_counts_t counts;
} store_disk_stats_t;

/*
 * What one request holds until its callback, for the per-session bounds (robust stream, C3):
 * filled by store_save, store_commit and store_load_batch when spent is not NULL (the fields
 * are added to, so one store_spent_t can gather several calls).
 */
typedef struct {
    uint32_t disk_reads;      /* disk reads this request started (a joined read counts 0) */
    uint64_t disk_read_bytes; /* their stored bytes */
    uint64_t ingest_bytes;    /* arena bytes reserved for its copies and checksums */
} store_spent_t;

/*
 * Read-ahead (disk.prefetch_bytes, default 64 MiB; 0: off). A lookup is how an engine announces
 * a load (vLLM's scheduler looks a prompt up a step before its workers load it; SGLang's
 * batch_exists precedes its batch_get), so the chunks of a lookup's hit prefix that are only on
 * disk are read into RAM from the lookup on, in prefix order, instead of one disk read after
 * another as the loads come: from the first chunk past what the engine holds in GPU memory (a
 * prompt lookup's hbm_tokens), and for an all-ranks lookup only within the common prefix it
 * answers. A load finding one of them reads nothing more: it joins the read in flight or finds
 * the chunk promoted (and counts as disk.hits, disk.prefetch_hits). Bounds:
 *   - the footprints queued or being read stay within disk.prefetch_bytes (beyond: skipped, and
 *     the load reads the chunk as before);
 *   - read-aheads leave one of the disk.max_reads_in_flight read slots free, so a load's own
 *     read starts at once (several loads' reads may queue behind each other as before); its
 *     system calls then wait, in the order the reads were started, for those of the reads
 *     already in I/O (the I/O gate, disk.read_io_bytes, disk.c: with the defaults, at most two
 *     2 MiB reads started before it);
 *   - they start only while the reads landing in the arena hold less than
 *     disk.prefetch_depth_bytes (default 4 MiB; one read at least): one or two large reads
 *     deep, not eight. A 2 MiB read is split by the block layer into many device requests
 *     already, so two of them keep a device's queue busy across read boundaries; eight at once
 *     only share the device, and the first chunk, the one the engine loads first, arrives when
 *     all eight do (on the development VM's virtual disk, 8 deep: 0.70-0.77 GB/s restored
 *     against 1.0-1.3 raw; 2 deep: 1.72 against 1.95);
 *   - a read-ahead takes RAM only where that drops no chunk (it may release clean chunks: they
 *     are on disk), and only while the RAM that is free or clean after it (not dirty, not pinned
 *     by a reader or a save, not reserved by a shared-memory save, not held by reads and saves
 *     in flight) stays above half the cleaner's target (ram.clean_target_bytes), so that saves
 *     meeting read-aheads in flight still find that much to evict without a drop or a NOSPACE
 *     (a burst beyond it drops at most the read-aheads' disk.prefetch_depth_bytes more than it
 *     would have: they hold their extents until they land); when that cannot be had the queue
 *     is dropped.
 * Every lookup that is not skipped by the lookup-skip gate reads ahead, whoever sends it. A chunk
 * read ahead joins RAM as recently used (a save arriving before its load must not evict it
 * first) and clean: never loaded, it ages out like any clean chunk and costs no write. What a
 * client can do with lookups alone is therefore: keep the disk reading at its speed, within one
 * slot less than max_reads_in_flight and disk.prefetch_depth_bytes deep, and turn the clean part
 * of RAM over; never hold a save back. The margin counts bytes (store_io.c, prefetch_room: clean
 * bytes that are no chain tail count, since an eviction that would drop a dirty tail releases
 * a clean ancestor of it first).
 *
 * A load that reads from disk reads the chain ahead too, within the same bounds: the records
 * written right after its last disk chunk in that chunk's segment that continue the chain (each
 * one's stored predecessor is the one before it: the cleaner writes a chain's chunks in the
 * order they were saved), as far as disk.prefetch_depth_bytes reaches, and four times as far once
 * the client loads a chunk it brought in (0.2.8: the reads started at once stay within
 * disk.prefetch_depth_bytes, the rest waits in the queue). That is the page cache's
 * sequential read-ahead along a chain, for a client that loads a prefix a chunk at a time
 * without a lookup; a chain's end (the next record has another parent) stops it.
 */

/* Threads the libuv pool needs (UV_THREADPOOL_SIZE, set before the loop queues work): the copy
 * and checksum workers (server.cpu_workers, or one per CPU) plus, with the disk tier, one per
 * disk.max_reads_in_flight and one each for the flush, the checkpoint and the drops file's
 * writer, so disk jobs (each of which may hang with its disk) can never occupy every thread and
 * a save's checksum never queues behind the disk. */
unsigned store_pool_threads(const config_t *cfg);

/* Creates the RAM arena per cfg->ram: with ram.reattach, a matching arena file is kept as it is
 * (ram.h) and its chunks come back at store_attach_disk(). Returns 0 or a negative errno. */
int store_new(const config_t *cfg, ns_table_t *nst, store_t **out);
void store_destroy(store_t **s);

/*
 * Gives the store its loop (saves, commits and verifications need it for their thread-pool
 * jobs, with or without a disk tier) and opens the disk tier when cfg->disk.enabled: recovers
 * the segments found in cfg->disk.dir (namespaces are re-declared in the ns table from the
 * records, with their revision; chains relinked by parent hash) before returning. Then the RAM
 * tier: a re-attached arena's chunks that its journal vouches for (journal.h) join the index
 * (a chunk also found on disk gets its RAM copy back), and a new journal is started (with a file
 * arena and ram.reattach); the arena's header then takes the new generation. Returns 0 (also
 * when the tier is disabled) or a negative errno of the disk tier; on error the store keeps
 * working without a disk tier and its status says "unavailable".
 */
int store_attach_disk(store_t *s, uv_loop_t *loop);

/* The error that kept the disk tier from attaching (negative errno), or 0. */
int store_disk_error(const store_t *s);

/* Periodic upkeep (the server's sweep timer): drops expired leases from the lease FIFO, and
 * compacts the RAM journal once it has grown past JOURNAL_COMPACT_FACTOR x the RAM chunks. */
void store_tick(store_t *s, uint64_t now_ms);

/* Stops the store: waits for the saves, commits and verifications in flight (they complete and
 * call back), writes the chunks only in RAM to the disk tier, then stops the disk tier (cancels
 * queued reads, lets running jobs finish, flushes), compacts the RAM journal to the chunks RAM
 * holds and fsyncs it, then calls done(arg) on the loop (at once when nothing is in flight and
 * there is no disk tier). Then store_destroy(), which keeps the arena file for the next start
 * with ram.reattach. */
void store_close(store_t *s, void (*done)(void *arg), void *arg);

/*
 * Loads. store_load_batch() looks up n chunks of one rank and reports each exactly once, in any
 * order, through chunk_cb, then calls done_cb once: chunks in RAM during the
 * call, chunks only on disk when their thread-pool read finished (verified, and promoted into
 * RAM), misses as soon as they are known. Every callback runs on the loop thread, and done_cb
 * may run before store_load_batch returns (no chunk on disk). A hit carries bytes the callee
 * owns from then on, and the chunk's csum:
 *   - STORE_LOADED_LENT: data is the chunk's arena bytes and chunk is pinned for the callee,
 *     which may lend the bytes (to ZeroMQ) or answer their location (store_chunk_off) and must
 *     store_unpin(chunk) once nothing reads them;
 *   - STORE_LOADED_OWNED: data is a heap buffer (a chunk read from disk when no arena extent
 *     could be had without dropping another chunk) that the callee frees with free().
 * arena (the shared-memory path) asks for LENT hits only: a disk chunk is promoted with the
 * saves' eviction policy (it may drop cold tails) or it is a miss. A MISS carries nothing: not
 * stored, a record that failed its checksum, a read cancelled by store_close(), or a chunk whose
 * read had not finished when the disk's reads stalled (disk.read_stall_ms: store_io.c,
 * "stalled reads"; the load is answered then, without waiting for the hung read). Hits and
 * misses are counted as loads (ram.hits/misses, disk.hits/misses).
 */
typedef enum { STORE_LOADED_MISS = 0, STORE_LOADED_LENT, STORE_LOADED_OWNED } store_loaded_kind_t;

typedef struct {
    store_loaded_kind_t kind;
    void *data; /* LENT: arena bytes; OWNED: malloc'd; MISS: NULL */
    uint64_t len;
    uint64_t csum;        /* hits: XXH3-64 (seed 0) of the bytes, as committed */
    store_chunk_t *chunk; /* LENT: the pinned chunk; else NULL */
} store_loaded_t;

typedef void (*store_chunk_cb)(void *arg, size_t i, const store_loaded_t *c);
typedef void (*store_batch_cb)(void *arg);

/* Returns 0 (the callbacks will run as above) or -ENOMEM (nothing was and nothing will be
 * reported). h (borrowed for the call) may be unaligned. */
int store_load_batch(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                     bool arena, store_chunk_cb chunk_cb, store_batch_cb done_cb, void *arg,
                     store_spent_t *spent);

/*
 * Costs for the bounds of contract C3 (session.h): what a request would cost before it runs, so
 * the server can charge it to a session or refuse it.
 *
 * store_load_cost: for a LOAD of n chunks of one rank, the bytes its RAM hits would lend or pin
 * (arena bytes held until the reply is sent or released), of which the bytes of chunks that a
 * lease does not hold already (one leased at now_ms without a disk copy: pinning it holds nothing
 * more), the bytes of
 * the copies it would make (chunks in the disk write buffer, and chunks read from disk), and the
 * disk reads it would queue. The load itself must follow in the same loop callback for the
 * figures to hold.
 */
typedef struct {
    uint64_t ram_bytes;     /* RAM-resident hits (lent, or pinned for a shared-memory load) */
    uint64_t ram_new_bytes; /* of those, the bytes of chunks no lease holds */
    uint64_t copy_bytes;    /* write-buffer hits and disk reads (malloc'd copies) */
    uint32_t disk_reads;    /* chunks only on disk */
} store_cost_t;

void store_load_cost(const store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                     size_t n, uint64_t now_ms, store_cost_t *out);

/* Leases (separate from store_lookup, so a lease can be refused over a bound): the payload bytes
 * that leasing the prefix h[0..hit) would hold in RAM: its chunks that are not leased now (a lease
 * is never extended) and are in RAM only (a chunk with a disk copy may leave RAM while leased:
 * index.h), of rank, or of every rank with KVT_RANK_ALL (then the prefix of every rank), each
 * counted once however often h names it (0.2.9: a hash repeated 256 times was charged 256 times,
 * and one client's leases filled every session's bound); and the lease of the prefix's chunks
 * until now_ms + ram.lease_ms. h may be unaligned. */
uint64_t store_lease_cost(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                          uint32_t hit, uint64_t now_ms);
void store_lease(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, uint32_t hit,
                 uint64_t now_ms);

/* The file what a clean restart keeps beside the chunks goes to (state.h): <disk.dir>/
 * gates.state with the disk tier enabled, else <the RAM journal>.gates when there is a journal.
 * false: nowhere (no tier outlives the process, so there is nothing for that state to serve). */
bool store_state_path(const store_t *s, char *buf, size_t cap);

/* The unexpired leases at now_ms (a clean stop keeps them: state.h): fn is called for each with
 * its namespace, rank, hash and the milliseconds it has left. fn must not modify the store. */
typedef void (*store_lease_fn)(void *arg, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                               uint64_t remaining_ms);
void store_leases(const store_t *s, uint64_t now_ms, store_lease_fn fn, void *arg);

/* Leases chunk h of (ns, rank) until now_ms + remaining_ms (a lease kept across a restart).
 * Leases must be restored in expiry order, before any new one is granted (the lease FIFO,
 * index.h). 0, or -ENOENT (no such chunk, or it holds a lease already). */
int store_lease_restore(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        uint64_t now_ms, uint32_t remaining_ms);

/* Looks for segment files truncated or deleted under the daemon (disk_check_files): a fault
 * that status reports. Without a disk tier, does nothing. Called once a second (the sweep). */
void store_disk_check(store_t *s);

/* Disk reads queued or running on the thread pool (0 without a disk tier). */
uint32_t store_disk_reads(const store_t *s);

/* Prefix hit of one rank; leases the hit chunks when lease is true. The hit chunks from
 * ahead_from on that are only on disk are read ahead ("Read-ahead" above; the ones before it the
 * engine holds in GPU memory already: UINT32_MAX reads nothing ahead). */
uint32_t store_lookup(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h, size_t n,
                      bool lease, uint64_t now_ms, uint32_t ahead_from);

/* Prefix hit of every rank of ns into rank_hits[ns->world]; returns the minimum. One index
 * probe per chunk serves every rank (index.h, rank groups). With lease, the chunks of the common
 * prefix [0, min) are leased for every rank; read-ahead covers [ahead_from, min) of every rank
 * (nobody loads past the common prefix). */
uint32_t store_lookup_all(store_t *s, const ns_t *ns, const kvt_wire_hash_t *h, size_t n,
                          bool lease, uint64_t now_ms, uint32_t ahead_from, uint32_t *rank_hits);

/* Marks each chunk KVT_CHUNK_EXISTS or KVT_CHUNK_WANTED. Returns the number of WANTED. */
size_t store_save_query(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                        size_t n, uint8_t *status);

/* A save or commit finished: its status array is filled. */
typedef void (*store_done_cb)(void *arg);

/*
 * Stores the chunks whose payload is not empty. parent (may be NULL) is the declared
 * predecessor of h[0]. At the call the store reserves an arena extent for each chunk (evicting
 * as described above; NOSPACE when it cannot) and pins the stored predecessors of the chain;
 * the thread pool then copies each payload into its extent and computes its csum; the chunks
 * are published in chain order (and after a save or commit still in flight whose last chunk is
 * parent: a chain pipelined across requests is published as one), status[i] receives STORED,
 * EXISTS (stored by someone else
 * meanwhile), NOSPACE or SKIPPED, and done(arg) is called on the loop - possibly before
 * store_save returns (nothing to copy). Once a chunk gets NOSPACE the rest of the save gets
 * NOSPACE too: stored, they could never be hit. The payload bytes (payloads[i].data) and status
 * are borrowed until done; h, parent and the payloads array itself only for the call. Returns 0,
 * or -ENOMEM (nothing was stored, done is not called).
 */
int store_save(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
               const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *payloads, uint64_t now_ms,
               uint8_t *status, store_done_cb done, void *arg, store_spent_t *spent);

/* The stored bytes of one chunk in RAM (borrowed, valid until the next
 * store call), or NULL (not stored, or only on disk: see store_load_batch). Counts a hit or a
 * miss and touches the chunk. */
const void *store_load(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                       uint64_t *len);

/* The stored chunk, in any tier, or NULL; no statistics, no touch. */
store_chunk_t *store_find(const store_t *s, const ns_t *ns, uint16_t rank,
                          const kvt_wire_hash_t *h);

/* Where a RAM-resident chunk's bytes are in the arena, its payload bytes (any
 * tier), and its csum. */
uint64_t store_chunk_off(const store_chunk_t *c);
uint64_t store_chunk_len(const store_chunk_t *c);
uint64_t store_chunk_csum(const store_chunk_t *c);

/*
 * Shared-memory saves. store_reserve allocates len bytes of the arena (evicting as a save
 * does; keep, when not NULL, is protected from that eviction) and returns its offset: the
 * client writes the bytes there. store_commit then takes the reserved extents (they belong to
 * the store from the call), hashes them on the thread pool and publishes them in chain order,
 * as store_save; csums, when not NULL (n little-endian u64: the writer's checksums, SAVE_COMMIT
 * with CLIENT_CSUMS), are taken as they are instead and nothing is hashed: the writer is the
 * author of the bytes, so its word on their checksum is worth what the bytes are (a wrong one
 * makes its own chunks fail their readers' verification and be removed: PROTOCOL.md). With
 * nothing to hash the chain is published before store_commit returns. off[i] == UINT64_MAX marks a
 * chunk that was not reserved (SKIPPED: a gap in the chain). A chunk stored meanwhile by someone
 * else is EXISTS and its extent is freed. Returns 0 (done will be called) or -ENOMEM (the extents
 * were freed, nothing was stored, done is not called). store_unreserve frees an extent that will
 * never be committed.
 */
int store_reserve(store_t *s, uint64_t len, store_chunk_t *keep, uint64_t now_ms, uint64_t *off);
void store_unreserve(store_t *s, uint64_t off, uint64_t len);
/* The arena bytes an extent of len bytes takes (len rounded up to the allocation unit): what a
 * reservation of len holds, and what it is charged to its session (contract C3). */
uint64_t store_footprint(const store_t *s, uint64_t len);
int store_commit(store_t *s, ns_t *ns, uint16_t rank, const kvt_wire_hash_t *parent,
                 const kvt_wire_hash_t *h, size_t n, const uint64_t *off, const uint64_t *len,
                 const uint8_t *csums, uint8_t *status, store_done_cb done, void *arg,
                 store_spent_t *spent);

/* A client found chunk h's bytes corrupt (RELEASE CORRUPT): re-hash its RAM
 * bytes on the thread pool and remove it when they do not match its csum (ram.verify_drops); a
 * client's word alone never removes another client's chunk. A chunk only on disk is verified by
 * every read anyway: nothing is done. At most STORE_VERIFY_BYTES of chunks (or one chunk) are
 * being re-hashed at once; a report beyond is not acted on (the chunk stays; a client that
 * verifies finds it a miss and reports it again): accusations cost no client anything, and
 * without the bound one RELEASE naming every stored chunk, repeated, kept the thread pool that
 * saves share re-hashing the whole arena. */
#define STORE_VERIFY_BYTES (64ull << 20)
void store_verify(store_t *s, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h);

/*
 * Invalidation (kvtierctl drop, POST /admin/drop): removes every chunk of ns, in every tier and
 * every rank, whatever its leases. A chunk that is pinned (lent to ZeroMQ, held by a
 * shared-memory load or as the predecessor of a reservation) leaves the index at once but keeps
 * its RAM bytes until its last store_unpin(), which frees them; until then it still counts in
 * the RAM figures. Disk copies leave the index; their records stay in their segments until
 * segment reclaim, and a tombstone (drops.h) keeps recovery from bringing them back. The
 * namespace itself stays declared (sessions hold its id); chunks saved after the call are kept.
 * Returns 0 with the counts in *out, or -ENOMEM (nothing dropped).
 */
typedef struct {
    uint64_t chunks;      /* chunks removed from the index */
    uint64_t bytes;       /* their payload bytes */
    uint64_t ram_chunks;  /* with a RAM copy */
    uint64_t disk_chunks; /* with a disk copy or waiting in the write buffer */
    uint64_t pinned;      /* pinned at the call: their RAM goes at the last unpin */
    int tombstone_error;  /* 0, or the negative errno of writing the tombstone file */
} store_drop_t;

int store_drop_ns(store_t *s, ns_t *ns, store_drop_t *out);

/* cb(arg, rc) on the loop once the tombstones of every drop so far are on file (drops.h,
 * drops_when_written: rc 0, or the write's negative errno). 0: registered; 1: nothing to wait
 * for (cb is not called); -ENODEV without a disk tier (no tombstones); -EBUSY or -ENOMEM. */
int store_drops_written(store_t *s, void (*cb)(void *arg, int rc), void *arg);

/* The same without a tombstone: a namespace evicted to make room for another (ns.h). Its disk
 * records may come back at a restart, as a namespace nobody declares, evictable in its turn; a
 * tombstone would cost a synchronous file write per eviction, which a flood of new namespaces
 * could make the loop pay at the rate of its HELLOs. */
int store_evict_ns(store_t *s, ns_t *ns, store_drop_t *out);

/* Pins c (see store_chunk_t): the only way to hold a chunk across other store calls. Pins
 * count; each store_pin() needs one store_unpin(). */
void store_pin(store_t *s, store_chunk_t *c);

/* Drops one pin of c. A chunk whose every copy went while it was pinned (a failed checksum, a
 * failed disk write, a failed verification) leaves the index with its last pin: c may be freed
 * by this call. */
void store_unpin(store_t *s, store_chunk_t *c);

/* The arena: its file path ("" for a memfd), its size (the file's: what a client maps) and its
 * generation (ram.h). */
const char *store_arena_path(const store_t *s);
uint64_t store_arena_bytes(const store_t *s);
uint32_t store_arena_gen(const store_t *s);

const store_stats_t *store_stats(const store_t *s);

/* Calls fn for every stored chunk (any order); fn must not modify the store. For tests. */
void store_foreach(const store_t *s, void (*fn)(const store_chunk_t *c, void *arg), void *arg);

/* The RAM tier's figures at now_ms (leases expire by time). */
void store_ram_stats(const store_t *s, uint64_t now_ms, store_ram_stats_t *out);

/* The disk tier's figures (state OFF without a disk tier). */
void store_disk_stats(const store_t *s, store_disk_stats_t *out);

/* Structural self-check of index and accounting, for tests. Returns 0 or -1. */
int store_check(const store_t *s);

#endif /* KVT_STORE_H */
