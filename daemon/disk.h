/*
 * disk.h - the disk tier: append-only segment files of self-describing records (record.h),
 * writes straight from the chunks' arena extents, reads straight into them, on the libuv thread
 * pool, FIFO reclaim of whole segments, recovery at start, and a degraded state on write errors.
 *
 * The disk module knows segments, records and bytes; it does not know the index. The store
 * (store.c) owns the index and talks to the disk through disk_ops_t callbacks, all called on
 * the loop thread:
 *   - recovered: once per valid record found at start (oldest segment first, then by offset);
 *   - committed: once per record handed to disk_append(), after its flush finished (written,
 *     refused because its bytes no longer matched their checksum, or failed);
 *   - reclaim: before a segment is deleted, so the store drops (or keeps, -EBUSY: leased) the
 *     entries that point into it, a bounded number per call (-EAGAIN: call again). Each segment
 *     carries one opaque pointer (disk_seg_user) that the store uses as the head of its list of
 *     entries in that segment.
 *
 * Demotion by reference: disk_append() does not copy. The record's raw bytes stay where the
 * caller keeps them (an arena extent) and are lent to the flush worker until committed() is
 * called for the ticket; the worker verifies them against the record's csum, compresses them
 * into a staging buffer when that pays, and writes them with pwritev. The bytes lent must be
 * RECORD_BLOCK aligned and RECORD_BLOCK-rounded (an arena extent is), since with O_DIRECT the
 * payload is written from them as whole blocks; the worker zeroes the block's tail past raw_len.
 * The write buffer is therefore a budget, not a copy: disk.write_buffer_bytes bounds the bytes
 * lent to the filling batch and to the batch in flight, each.
 *
 * Generations: a segment id is never reused (ids grow; a restart continues after the largest id
 * found), so (segment id, offset) names one record for the daemon's lifetime and a reader that
 * finishes after its segment was reclaimed sees a dead id and its after-work callback knows.
 *
 * Threads: every function here is loop-thread only. Workers (uv_queue_work) only read, write,
 * compress, decompress and checksum buffers that belong to their job; results are applied on the
 * loop in the after-work callbacks. Ownership: disk owns its files, buffers and jobs; it borrows
 * the loop, the config and the ops argument, which must outlive it.
 */
#ifndef KVT_DISK_H
#define KVT_DISK_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "checkpoint.h"
#include "codec.h"
#include "config.h"
#include "record.h"

typedef struct disk disk_t;

/* Where a record lives on disk. */
typedef struct {
    uint64_t seg;     /* segment id */
    uint64_t off;     /* record offset in the segment */
    uint16_t hdr_len; /* bytes from the record's start to its payload */
    uint32_t stored;  /* payload bytes */
    uint8_t version;  /* the record's format version */
} disk_loc_t;

/* How hard a reclaim may try (disk_ops_t.reclaim). */
typedef enum {
    DISK_RECLAIM_NORMAL = 0,  /* leases and pins keep a segment; the work may be sliced */
    DISK_RECLAIM_PAST_LEASES, /* leases do not keep it (0.2.10: leases kept too much) */
    DISK_RECLAIM_FORCE,       /* shutdown, start-up over capacity: neither -EBUSY nor -EAGAIN */
} disk_reclaim_t;

typedef struct {
    /* A valid record found by recovery. m->model and m->revision are NUL terminated; m->csum is
     * the chunk's checksum (computed from the verified bytes for a version 1 record). */
    void (*recovered)(void *arg, const record_meta_t *m, const disk_loc_t *loc);
    /* The flush of ticket seq (from disk_append, with its cookie; m as appended) finished: rc 0
     * and loc, -EBADMSG (the bytes no longer matched m->csum: not written), or another negative
     * errno (the write failed). The lent bytes are the caller's again. */
    void (*committed)(void *arg, uint32_t ns_id, const record_meta_t *m, uint64_t seq,
                      uint64_t cookie, int rc, const disk_loc_t *loc);
    /* Segment seg is to be deleted; *user is its entry list. Return 0 once every entry that
     * pointed into it was dropped or detached, -EBUSY to keep the segment for now (it holds
     * leased or pinned entries; with DISK_RECLAIM_PAST_LEASES pinned ones only), or -EAGAIN
     * after a bounded share of the work (the list holds what is left; the disk calls again on
     * a later loop turn). DISK_RECLAIM_FORCE allows neither -EBUSY nor -EAGAIN. The disk asks
     * past leases once the segments kept add up to a quarter of its capacity, or every segment
     * it could reclaim was kept: a lease of a chunk on disk costs its client none of its held
     * bytes, so leases alone must not keep the oldest data while newer segments go, nor stop
     * the writes (disk.c, reclaim_for). */
    int (*reclaim)(void *arg, uint64_t seg, void **user, disk_reclaim_t how);
    /* Segment seg's file was found truncated to size bytes under the daemon (disk_check_files,
     * 0.2.10): the records of it that end past size cannot be read any more. The store forgets
     * their disk copies now, so that a lookup no longer reports a chunk whose load could only
     * fail. */
    void (*truncated)(void *arg, uint64_t seg, uint64_t size);
} disk_ops_t;

/*
 * Opens (creates) cfg->disk.dir, locks it (-EBUSY when another daemon holds it) and recovers
 * every segment found there, calling ops->recovered for each valid record; bad files and torn
 * tails are logged, counted and skipped, never fatal. Progress is reported as it goes (log
 * event disk_recovery_progress and a systemd STATUS= line, notify.h). Recovery runs before the loop
 * serves (it is the start-up of the daemon). *out is set before the first callback, so callbacks
 * may use disk_seg_user(); on failure it is reset to NULL. Returns 0 or a negative errno (directory
 * unusable).
 */
int disk_open(uv_loop_t *loop, const config_t *cfg, const disk_ops_t *ops, void *arg, disk_t **out);

/*
 * Stops intake, cancels queued reads (their callbacks get -ECANCELED), lets running jobs
 * finish, flushes the write buffer, syncs per the fsync policy, closes the files and handles,
 * then calls done(arg) on the loop. Free with disk_destroy() from done or after it.
 */
void disk_close(disk_t *d, void (*done)(void *arg), void *arg);
void disk_destroy(disk_t **d);

/*
 * Queues a chunk for writing (the store's cleaner, or the shutdown persist), by reference: data (at
 * least record_block(m->raw_len) bytes, RECORD_BLOCK aligned) is lent until committed() is
 * called for the returned ticket *seq, with cookie. m describes the record: m->csum is the
 * XXH3-64 of the raw bytes, which the worker verifies before writing; codec, lengths and the
 * header checksum are filled by the worker. Returns 0, or -EAGAIN (the budget of the filling
 * batch is spent while a flush is in flight, degraded, closing) or -E2BIG (the record can
 * never fit the write buffer).
 */
int disk_append(disk_t *d, uint32_t ns_id, const record_meta_t *m, void *data, uint64_t cookie,
                uint64_t *seq);

/*
 * Staging (disk.staging, stage.h). With O_DIRECT the device reads and writes the memory given
 * by DMA, and a request costs more the more physically discontiguous pieces it has: 512 for a
 * 2 MiB chunk in 4 KiB pages, one in a 2 MiB huge page. A staged read takes an extent of the
 * reads' staging memory (disk.read_staging_bytes; when none is free it reads straight into its
 * destination, as without staging), reads the record into it and copies it into the
 * destination while it verifies it. A staged flush copies each raw payload into huge-page
 * staging memory (disk.write_buffer_bytes of address space, of which DISK_STAGE_PIECE, 8 MiB,
 * plus one record is ever resident: it writes a piece at a time) and verifies and writes the
 * copy, so bytes changed in the arena after the copy cannot reach the disk.
 *
 * "auto" (the default) stages reads of O_DIRECT segments when the kernel gives madvised memory
 * huge pages (stage_thp_available) and the arena's own pages are small; "on" stages reads and
 * flushes regardless; "off" neither. Flushes under "auto" (0.2.13) are staged or not by
 * measurement, flush by flush (disk.c, flush_staged): each way's work per byte is averaged and
 * one flush in 16 goes the way that lost. Why not a fixed choice: on the 0.2.4 VM staged
 * flushes wrote 10-30 % slower end to end (the copy cost the single flush worker more than the
 * huge-page DMA saved, README "Staged reads"), on the 0.2.13 VM 1.3-1.7x faster (README, "One
 * probe for all ranks ..."); reads, 8 in flight, spent about 20 % less time in their read calls
 * on both.
 *
 * disk_set_arena_page tells the tier the arena's page size: with "auto" and huge pages
 * (hugetlbfs, tmpfs mounted huge=), reads and flushes are not staged and DMA goes straight into
 * and out of the arena. Call it before the loop runs.
 */
void disk_set_arena_page(disk_t *d, uint64_t page_bytes);

/* The capacity in force: disk.capacity_bytes, lowered while the filesystem is full (disk.c). */
uint64_t disk_capacity(const disk_t *d);
/* Whether disk_append() of len bytes would be accepted now. */
bool disk_admits(const disk_t *d, uint64_t len);
/* Whether a record of len bytes, appended now, would fit beside everything the tier holds and
 * the batch filling, with no segment reclaimed for it (the shutdown persist writes only so). */
bool disk_fits_unreclaimed(const disk_t *d, uint64_t len);
/* From now on no flush reclaims a segment: a batch that does not fit the room the tier has is
 * failed instead (committed() with -ENOSPC for its records). For the shutdown persist of a
 * re-attached arena, whose chunks stay in the arena anyway: disk_fits_unreclaimed() checks each
 * append, but a filesystem that fills lowers the capacity in force (an ENOSPC) under a batch
 * already filled, and its flush would reclaim chunks only the disk holds for its room. */
void disk_keep_segments(disk_t *d);

/* A finished read: rc 0 (dst holds the raw_len verified bytes), or rc < 0 (-EBADMSG checksum
 * or header mismatch, -EIO, -ECANCELED). A read that fails with EIO or a mismatch is done once
 * more before it is reported (disk_stats_t.read_retries): a transient fault costs a read, not
 * the chunk. */
typedef void (*disk_read_cb)(void *arg, int rc);

/*
 * Reads the record at loc into dst on the thread pool, verifies it (header fields, hash, rank,
 * lengths, and the raw bytes after decompression against csum, the chunk's checksum) and
 * decodes it, then calls cb on the loop. dst (RECORD_BLOCK aligned, at least
 * record_block(raw_len) bytes: an arena extent or an aligned heap buffer) belongs to the job
 * until cb. At most disk.max_reads_in_flight run at once; the rest queue in order. Returns 0 (cb
 * will be called exactly once), -ESTALE (no such segment: cb is not called) or -ENOMEM.
 */
int disk_read(disk_t *d, const disk_loc_t *loc, const uint8_t hash[16], uint16_t rank,
              uint64_t raw_len, uint64_t csum, void *dst, disk_read_cb cb, void *arg);

/* Reads queued or running. */
uint32_t disk_reads_pending(const disk_t *d);

/* The store's list head of segment seg, or NULL when the segment does not exist. */
void **disk_seg_user(disk_t *d, uint64_t seg);

/* Whether the write path is degraded (a flush failed and the retry time has not passed):
 * demotions are refused. Status's "degraded" also covers read faults (disk_stats_t). */
bool disk_degraded(const disk_t *d);

/* While the write path is degraded: the milliseconds until its retry (appends are refused until
 * then), else 0. */
uint64_t disk_retry_in_ms(const disk_t *d);

/* Flushes that failed since the tier opened (status disk.write_errors). */
uint64_t disk_write_errors(const disk_t *d);

/* When a read job last finished its system calls (CLOCK_MONOTONIC milliseconds, uv_hrtime's
 * clock; 0: none yet), stamped on the worker: a completion the loop has not run yet counts. */
uint64_t disk_read_done_ms(const disk_t *d);

/* Looks at every segment file (fstat): one found deleted or shorter than what was written to it
 * is a fault (disk.h "degraded"), reported once per segment; when it is the active segment, the
 * next flush starts a new file. */
void disk_check_files(disk_t *d);

/* What disk_stats_t.last_error is of. */
typedef enum {
    DISK_FAULT_NONE = 0,
    DISK_FAULT_WRITE,   /* a flush */
    DISK_FAULT_READ,    /* a read (I/O error, short read, checksum or header mismatch) */
    DISK_FAULT_SEGMENT, /* a segment file found truncated or deleted */
    DISK_FAULT_SYNC,    /* the fsync of a sealed segment (0.2.10) */
} disk_fault_op_t;

/* The log position just past the last record written: records are written in ticket order, so
 * every record written so far is at a (segment id, offset) below it (lexicographically) and
 * every later one at or above it. With a flush in flight, the records of that flush may land
 * either side. */
void disk_log_end(const disk_t *d, uint64_t *seg, uint64_t *off);

/* The id of the oldest segment, or the next id when there is none. */
uint64_t disk_first_segment(const disk_t *d);

/* Starts checkpoint c (checkpoint.h) with the segments as they are now: every live segment
 * file with its committed size. The caller adds the records of those segments (the committed
 * ones: their flush finished), seals it and writes it with ckpt_write(disk_dir(d), c). */
void disk_checkpoint_segments(const disk_t *d, ckpt_buf_t *c);
const char *disk_dir(const disk_t *d);

/* What recovery found at start (disk_open). */
typedef struct {
    uint64_t ms;             /* time it took */
    uint64_t segments;       /* segment files scanned */
    uint64_t records;        /* valid records found */
    uint64_t records_v1;     /* of which in the old format (version 1) */
    uint64_t checksum_drops; /* records dropped for a failed checksum */
    uint64_t bad_headers;    /* scans ended by a header that does not decode */
    uint64_t torn_bytes;     /* bytes truncated off segment tails */
    uint64_t bad_files;      /* files that could not be opened or read */

    /* the index checkpoint (checkpoint.h) */
    const char *path;            /* "checkpoint" or "scan" */
    const char *reason;          /* the scan's: why the checkpoint was not used ("" on its path) */
    uint64_t checkpoint_records; /* records taken from the checkpoint (not read) */
    uint64_t scanned_bytes;      /* segment bytes read: the tails and segments after it */
} disk_recovery_stats_t;

/* The disk tier's own figures (status "disk", with the store's counters beside them). */
typedef struct {
    bool degraded;            /* a write failed and the retry time has not passed, or a read
                                 failed or a segment was found truncated or deleted and no read
                                 and flush succeeded since */
    bool direct_io;           /* segments are written and read with O_DIRECT */
    const char *dir;          /* the segment directory (borrowed from the disk tier) */
    codec_mode_t compression; /* disk.compression */
    double auto_max_ratio;    /* auto mode: the largest ratio at which compression pays now */
    uint64_t capacity_bytes;
    uint64_t used_bytes; /* segment files rounded to 4 KiB plus the flush in flight */
    uint64_t segments;
    uint64_t segment_bytes;
    uint64_t bytes_written; /* headers and payloads */
    uint64_t bytes_read;
    uint64_t raw_bytes_written;    /* chunk bytes before compression */
    uint64_t stored_bytes_written; /* the same after compression */
    double compression_ratio;      /* stored / raw, 1.0 before any write */
    uint64_t records_written;
    uint64_t records_compressed;
    uint64_t flushes_raw; /* auto mode: batches written raw to keep up */
    uint64_t records_read;
    uint64_t checksum_drops;
    uint64_t verify_drops; /* records not written: their bytes no longer matched their csum */
    uint64_t read_errors;
    uint64_t write_errors;
    int last_error; /* negative errno of the last fault (write, read or segment), or 0 */
    disk_fault_op_t last_error_op;
    uint64_t segment_faults; /* segment files found truncated or deleted */
    uint64_t reclaimed_segments;
    uint64_t busy_reclaims;        /* reclaims that took a later segment: the oldest held leases */
    uint64_t reclaims_past_leases; /* segments reclaimed past leases: no other could go */
    uint64_t reads_in_flight;
    uint64_t reads_queued;
    uint64_t write_buffer_bytes;     /* bytes lent to the filling and the flushing batch */
    uint64_t flush_running_ms;       /* how long the flush in flight has run (0: none): a disk
                                        that hangs shows here, since its flush never returns */
    bool staging_reads;              /* reads go through staging memory (disk_set_arena_page) */
    bool staging_writes;             /* flushes may be staged ("on"; "auto": flush_staged) */
    uint64_t flushes;                /* flushes written (batches) */
    uint64_t flushes_staged;         /* of which copied their payloads into staging memory */
    uint64_t staging_bytes;          /* the staging mappings (flush and reads) */
    uint64_t staging_resident_bytes; /* of which backed by memory now (mincore) */
    uint64_t reads_staged;           /* reads that went through the reads' staging memory */
    uint64_t read_retries; /* reads that failed (EIO or a mismatch) and were done once more */
    uint64_t flush_ns;     /* time the write system calls of the flushes took */
    uint64_t read_ns;      /* time the read system calls took */
    uint64_t seals;        /* sealed segments fsynced (disk.fsync "segment" or "record") */
    uint64_t seal_errors;  /* seal fsyncs that failed */
    uint64_t seal_ns;      /* time the seal fsyncs took (the flushes', not in flush_ns) */
    disk_recovery_stats_t recovery;
} disk_stats_t;

void disk_stats(const disk_t *d, disk_stats_t *out);

/* Structural check for tests: used bytes == sum of segment sizes <= capacity. 0 or -1. */
int disk_check(const disk_t *d);

#endif /* KVT_DISK_H */
