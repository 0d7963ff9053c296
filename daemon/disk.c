/*
 * disk.c - the disk tier: segments, by-reference write batches, thread-pool jobs, reclaim,
 * recovery, degraded state (see disk.h).
 *
 * Files: <dir>/<16 hex digits>.seg, one per segment id, plus <dir>/lock (flock'ed for the
 * daemon's life so a second daemon cannot write into the same segments). Segment ids grow and
 * are never reused; they are the generation numbers of the records. Segments hold one record
 * version: new segments are written in version 2 (record.h); a segment found at start is never
 * appended to (the first flush after a start opens a new one), so version 1 segments written by
 * an older daemon stay readable until they are reclaimed.
 *
 * Write path: a chunk written is not copied (the store writes back by reference). disk_append()
 * extent (the loop's whole cost: a few stores) in the filling batch; the batch's budget is
 * disk.write_buffer_bytes of record spans. One flush is in flight at a time (one stream): when
 * none is, the filling batch becomes the flushing one and the other starts filling, so flushes
 * batch by themselves under load. The kick that starts a flush runs on the next loop turn (an
 * idle handle), so a burst of appends in one turn becomes one batch. Before a flush the loop
 * reserves an upper bound of the batch in the active segment, rolling to a new segment when the
 * bound does not fit and reclaiming the oldest segments (FIFO; a segment holding leased entries
 * is skipped for now) until used + bound <= capacity. The worker then unlinks the reclaimed
 * files, fsyncs the segment just sealed (fsync "segment"), creates the new segment file, and for
 * every record verifies the lent bytes against the record's csum (a mismatch - the bytes changed
 * since they were committed - is not written: committed() gets -EBADMSG), compresses them into
 * the staging buffer when that pays, encodes the header into its 4 KiB block there, and writes
 * the whole batch with pwritev from the staging blocks and the arena extents themselves (with
 * staged flushes, disk.staging "on" or chosen by "auto", flush_staged, each raw payload is
 * copied into the staging area first and the copy is verified and written, DISK_STAGE_PIECE at
 * a time), then fdatasyncs (fsync
 * "record"). The after-work callback shrinks the reservation to the bytes
 * written and reports each record to the store (committed), DISK_COMMIT_SLICE records per loop
 * turn, so that a batch of many small records never holds the loop. A failed write (ENOSPC,
 * EIO) truncates the segment back to where the flush started, fails the batch and puts the tier
 * in the degraded state: appends are refused until DISK_RETRY_MS has passed, then the next
 * flush is the probe; its success returns the tier to "ok".
 *
 * O_DIRECT (disk.direct_io, default on): segment files are written and read without the page
 * cache when the filesystem allows it (a new segment that cannot be opened O_DIRECT falls back
 * to buffered I/O, logged once, and later segments do not try again). Version 2 records are
 * laid out in 4 KiB blocks for it, and the arena's extents are 4 KiB aligned, so payloads go
 * from and into the arena by DMA with no copy at all. The page-cache effect: chunk bytes never
 * occupy the kernel's cache (the daemon's memory is its arena plus its buffers, nothing hidden),
 * the kernel's write-back throttling does not apply (on the development VM buffered writes
 * sustain ~0.4 GB/s against ~2 GB/s direct), and a read always comes from the device: a record
 * written a moment ago is not served from a warm cache (the chunk usually still is in RAM then).
 * Recovery scans through the page cache (buffered), then drops those pages (posix_fadvise).
 *
 * Compression. "auto" compresses a record only when that makes neither writing nor reading
 * slower than storing it raw:
 *   - writes: a batch that filled at least half of its budget while the previous flush ran is
 *     written raw (status flushes_raw), since compressing it on one worker would fall further
 *     behind and demotions would be dropped;
 *   - reads: a compressed read costs ratio x (device time per byte) + (decode time per byte)
 *     against (device time per byte) raw, so compression pays only below
 *     1 - decode/device - DISK_AUTO_MARGIN. Both times are measured by the read jobs (moving
 *     averages; the device time is seeded from the flushes' write time, the decode time by
 *     decoding one record of the first compressed flush), and the largest ratio that pays is the
 *     effective threshold (status auto_max_ratio, at most disk.compression_threshold); at or
 *     below 0 auto writes raw without even sampling. "lz4" compresses whenever smaller.
 *
 * Read path: a read job holds a reference on its segment (a reclaimed segment's file is
 * unlinked but its descriptor stays open until the last reader finishes), preadv's the header
 * block and the payload (into the job's extent of the reads' staging memory, disk.h "Staging",
 * then copied into the caller's extent while verified; without one, into the caller's extent
 * for a raw record, into a buffer of the job for a compressed one), checks every header field
 * against what the index expects (hash, rank, lengths, csum), decompresses into the extent and
 * verifies the raw bytes against the csum. At most max_reads_in_flight jobs run; the rest wait in a
 * FIFO. The thread pool is sized so that these jobs and the flush can never occupy every thread
 * (store.h, store_pool_threads): checksum and copy jobs of saves never queue behind the disk.
 *
 * Capacity: used_bytes = the sum of the segments' sizes rounded up to 4 KiB (the filesystem's
 * block) plus the in-flight reservation; it never exceeds capacity_bytes.
 *
 * Faults: besides a failed flush (above), a failed read and a segment file found truncated or
 * deleted under the running daemon (disk_check_files, once a second from the server's sweep: an
 * fstat per segment) put the tier in the degraded state that status reports, with last_error and
 * what it was of; they do not refuse demotions, and the state returns to ok once a read and a
 * flush succeeded after the fault. The active segment found faulty gets no further record: the
 * next flush starts a new file (0.2.11; before, one found while a flush was writing into it
 * stayed active, and the records of every later flush went into the deleted or truncated file).
 *
 * Recovery (disk_open, before the loop serves): segments are scanned oldest first, record by
 * record, each fully read and verified (a version 2 header against its own checksum, its raw
 * bytes against csum; a version 1 record against its checksum, and its csum computed). A record
 * whose payload fails is skipped (counted); a header that does not decode, or a record running
 * past the end of the file (a torn tail after a crash), ends the scan of that segment and the
 * file is truncated there (not stepped over to the next header that decodes: a raw payload holds
 * client bytes, and a v2 header's checksum is not keyed, so a chunk could carry a record that a
 * resync would take for the tier's; that needs a record format that ties a header to its tier
 * and segment). A file that cannot be opened or read is logged and left alone.
 * Recovery is synchronous; with a current index checkpoint (checkpoint.h) it reads only what
 * the checkpoint does not cover (the tails of its segments and the segments after it), else
 * every byte.
 *
 * Threads: the loop thread owns everything here; a job's buffers belong to its worker between
 * uv_queue_work and the after-work callback. The lent arena bytes are read (and their padding
 * tail zeroed) by the flush worker; the store guarantees nobody frees or reuses them before
 * committed() returns them.
 */
#include "disk.h"

#include "array.h"
#include "codec.h"
#include "checkpoint.h"
#include "fsutil.h"
#include "kvt_proto.h"
#include "log.h"
#include "notify.h"
#include "stage.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define DISK_BLOCK RECORD_BLOCK
#define DISK_WB_MAX_RECS 4096u
#define DISK_RETRY_MS 1000u
#define DISK_BUSY_RETRY_MS 50u
#define DISK_LEASE_KEEP_DIV 4u /* leased segments a reclaim steps over: a quarter of capacity */
#define DISK_PROGRESS_MS 1000u /* recovery progress lines at most this often */
#define DISK_SHUFFLE_ELEM 2u
#define DISK_PATH_MAX (CONFIG_PATH_MAX + 32)
#define DISK_COMMIT_SLICE 256u      /* committed() calls per loop turn */
#define DISK_IOV_MAX 1024           /* iovecs per pwritev/preadv (IOV_MAX on Linux) */
#define DISK_AUTO_MARGIN 0.05       /* auto compresses only when reads get at least this faster */
#define DISK_EMA_WEIGHT 0.125       /* weight of one job in the moving averages of byte times */
#define DISK_STAGE_PIECE (8u << 20) /* staged flushes write this much per system call */
#define DISK_STAGE_PROBE 16u        /* "auto": one flush in this many goes the other way */

typedef enum { DISK_OK = 0, DISK_DEGRADED } disk_state_t;
/* What a read fault still waits for (disk_t.fault_need) */
#define FAULT_NEED_READ 1u  /* a read that succeeded */
#define FAULT_NEED_WRITE 2u /* a flush that succeeded */
#define FAULT_NEED_SYNC 4u  /* a sync that succeeded (after a failed one) */
/* (disk_fault_op_t, disk.h: what last_error is of) */

typedef struct seg seg_t;
struct seg {
    uint64_t id;
    int fd;          /* -1 until its first flush created the file */
    bool direct;     /* fd was opened with O_DIRECT */
    uint8_t version; /* of its records: RECORD_VERSION for the segments this daemon writes */
    uint64_t size;   /* committed bytes */
    uint32_t refs;   /* reads holding the descriptor */
    bool dead;       /* reclaimed; freed when refs reaches 0 */
    bool faulted;    /* found truncated or deleted (disk_check_files): reported once */
    bool partial;    /* recovery's scan stopped at a read error (or out of memory) at scanned:
                        the file is kept whole and counted whole, checkpoints name only its
                        scanned prefix, so that the next start scans the rest again */
    uint64_t scanned;
    void *user;   /* the store's entry list */
    seg_t *dnext; /* dead list */
};

typedef struct {
    record_meta_t m;
    uint32_t ns_id;
    uint8_t *data;   /* the lent raw bytes */
    uint64_t cookie; /* the caller's, handed back by committed() */
    int rc;          /* worker: 0, or -EBADMSG (bytes changed: not written) */
    disk_loc_t loc;  /* filled by the worker */
} wrec_t;

typedef struct {
    uint64_t used;  /* raw bytes lent */
    uint64_t bound; /* sum of header blocks + block-rounded raw lengths: an upper bound */
    wrec_t *recs;
    uint32_t n;
    uint64_t first_seq;
} wbuf_t;

typedef struct {
    uint64_t id;
    int fd; /* -1: closed later by the last reader */
} drop_t;

typedef struct {
    uv_work_t req;
    disk_t *d;
    wbuf_t *wb;
    seg_t *seg;
    uint64_t start;
    int fd;
    bool create;
    bool try_direct;  /* create: open the new file with O_DIRECT */
    int sync_fd;      /* the segment the roll sealed, fsynced before the writes */
    uint64_t sync_id; /* its id */
    drop_t *drops;
    size_t ndrops;
    bool raw_only;    /* auto mode behind the writes, or compression cannot pay: raw */
    double max_ratio; /* auto: the effective threshold */
    bool calibrate;   /* time the decoding of one compressed record */
    bool staged;      /* the raw payloads are copied into the staging memory (flush_staged) */
    bool stage_probe; /* "auto": staged or not against the measured choice, to measure again */
    /* results */
    int rc;
    int new_fd;
    bool new_direct;
    int direct_errno; /* create: why O_DIRECT was refused, or 0 */
    uint64_t written, raw, stored;
    uint32_t compressed;
    uint64_t write_ns;
    uint64_t work_ns;           /* the records' copies or checksums and the writes (flush_staged) */
    uint64_t codec_ns;          /* the compression attempts, not in work_ns */
    uint64_t seal_ns;           /* the fsync of sync_fd */
    int seal_rc;                /* and its result (0 or -errno) */
    uint64_t dec_ns, dec_bytes; /* calibration */
    /* loop: commits reported so far */
    uint32_t next_commit;
} flush_job_t;

typedef struct read_job read_job_t;
struct read_job {
    uv_work_t req;
    disk_t *d;
    seg_t *seg;
    int fd;
    disk_loc_t loc;
    uint8_t hash[16];
    uint16_t rank;
    uint64_t raw_len;
    uint64_t csum;
    uint8_t *dst;
    uint8_t *stage; /* staging extent of stage_len bytes (read_start), or NULL: into dst */
    uint64_t stage_len;
    bool retried;    /* the first attempt failed (EIO or a mismatch) and the read was done again */
    uint64_t ticket; /* its place in the I/O gate's order (read_start) */
    bool in_io;      /* it passed the gate and has not left it (linked in io_head) */
    uint64_t io_t0;  /* when it passed (CLOCK_MONOTONIC ns) */
    uint64_t io_len; /* the bytes it counts for in the gate */
    read_job_t *io_prev, *io_next;
    disk_read_cb cb;
    void *arg;
    int rc;
    uint64_t io_ns, dec_ns;
    read_job_t *next;
};

struct disk {
    uv_loop_t *loop;
    const config_t *cfg;
    disk_ops_t ops;
    void *arg;
    char dir[CONFIG_PATH_MAX];
    int lock_fd;
    codec_mode_t mode;
    config_fsync_t fsync;
    bool direct;           /* disk.direct_io, until a filesystem refused O_DIRECT */
    uint64_t capacity;     /* in force: disk.capacity_bytes, lowered while the filesystem is full */
    uint64_t capacity_cfg; /* disk.capacity_bytes */
    uint64_t seg_bytes;
    uint64_t wb_bytes;

    seg_t **segs; /* live segments, oldest first */
    size_t nsegs, segcap;
    seg_t *active;
    seg_t *dead;
    uint64_t next_id;
    uint64_t used;     /* sum of rounded segment sizes */
    uint64_t reserved; /* rounded growth reserved by the flush in flight */
    drop_t *drops;     /* reclaimed, to unlink by the next flush job (or at close) */
    size_t ndrops, dropcap;

    wbuf_t wb[2];
    wbuf_t *fill;
    wbuf_t *flushing;
    flush_job_t *committing; /* its commits are being reported, a slice per turn */
    uint8_t *out;            /* staging of the flush in flight: header blocks, lz4 payloads,
                                and with staging the raw payloads too (stage_base(wstage)) */
    stage_t *wstage;         /* flushes that may be staged: theirs (out), disk.write_buffer_bytes;
                                NULL: flushes are not staged */
    bool stage_choose;       /* "auto": each flush staged or not by flush_staged() */
    double stage_ns_pb[2];   /* "auto": flush work ns per raw byte, unstaged [0] / staged [1] */
    uint64_t stage_acc_ns[2], stage_acc_bytes[2]; /* the flushes not averaged yet (< 1 MiB) */
    bool stage_warm[2];                           /* the first MiB of each way was left out */
    uint32_t stage_turns; /* "auto": flushes since the start, for the probes of the other way */
    bool arena_huge;      /* "auto": the arena is in huge pages: nothing to stage */
    uint64_t flushes, flushes_staged;
    stage_t *rstage;       /* with staged reads: theirs, disk.read_staging_bytes (or NULL) */
    uint64_t reads_staged; /* reads that went through rstage */
    uint64_t next_seq;

    read_job_t *qhead, *qtail;
    uint32_t reads_running;
    /* The reads' I/O gate (read_io_enter): workers take it in the order the loop started their
     * jobs (tickets), and a read's system calls start when they fit in disk.read_io_bytes with
     * those of the reads in I/O (not counting one in I/O for over DISK_IO_GATE_MS), or none is. */
    pthread_mutex_t io_mu;
    pthread_cond_t io_cv;
    bool io_gate;       /* disk.read_io_bytes > 0, and the mutex and condition were made */
    uint64_t io_budget; /* disk.read_io_bytes */
    uint64_t io_issued; /* tickets handed out (loop) */
    uint64_t io_turn;   /* the next ticket to enter (under io_mu) */
    read_job_t *io_head, *io_tail; /* the jobs in I/O, oldest first (under io_mu) */
    _Atomic uint64_t read_done_ms; /* set by the read workers: when a read last finished */
    uint32_t reads_queued;

    uv_timer_t timer;
    uv_idle_t idle; /* the next turn: a deferred kick, the next slice of commits or reclaim */
    bool kick_pending;
    bool busy_wait; /* a kick could not start the flush: it retries after DISK_BUSY_RETRY_MS */
    int open_handles;
    disk_state_t state; /* of the write path: DEGRADED refuses appends until retry_at */
    uint64_t retry_at;
    int last_error;
    disk_fault_op_t last_error_op;
    uint64_t flush_started; /* loop time the flush in flight was queued */
    /* A failed read, a segment found truncated or deleted, or a seal's fsync that failed
     * degrades the tier too (it is what status reports), without refusing demotions; it clears
     * once what it still needs (fault_need: FAULT_NEED_*) succeeded after it: a read and a flush,
     * and after a failed fsync also a sync (a later seal's fsync, or with fsync "record" a
     * flush's fdatasync). */
    bool read_fault;
    unsigned fault_need;
    uint64_t segment_faults;
    bool closing;
    bool closed;
    bool keep_segments; /* disk_keep_segments: no flush reclaims from here on */
    void (*done)(void *);
    void *done_arg;

    /* measured byte times (moving averages, ns per byte): device reads, device writes, decode */
    double rd_ns_pb, wr_ns_pb, dec_ns_pb;

    /* counters */
    uint64_t bytes_written, bytes_read, raw_written, stored_written;
    uint64_t records_written, records_compressed, records_read;
    uint64_t flushes_raw; /* auto mode: batches written uncompressed to keep up */
    uint64_t checksum_drops, verify_drops, read_errors, write_errors, reclaimed_segments,
        busy_reclaims, reclaims_past_leases;
    uint64_t read_retries; /* reads that failed once and were done again */
    uint64_t flush_ns, read_ns;
    uint64_t seals, seal_errors, seal_ns; /* the seals' fsyncs: count, failed, time */
    disk_recovery_stats_t rec;
    uint64_t rec_report; /* when recovery last reported its progress (uv_hrtime) */
};

static void kick(disk_t *d);
static void maybe_done(disk_t *d);

static uint64_t round_block(uint64_t n)
{
    return (n + DISK_BLOCK - 1) / DISK_BLOCK * DISK_BLOCK;
}

static void seg_path(const char *dir, uint64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%016" PRIx64 ".seg", dir, id);
}

static void ema(double *x, double v)
{
    *x = *x == 0 ? v : (1 - DISK_EMA_WEIGHT) * *x + DISK_EMA_WEIGHT * v;
}

/* Reads or writes every byte of iov[0..n) at off, resuming after short transfers (the array is
 * consumed). 0 or a negative errno (-EIO for an unexpected end of file). */
static int iov_full(int fd, struct iovec *iov, size_t n, uint64_t off, bool write)
{
    while (n > 0) {
        int cnt = n > DISK_IOV_MAX ? DISK_IOV_MAX : (int)n;
        ssize_t r = write ? pwritev(fd, iov, cnt, (off_t)off) : preadv(fd, iov, cnt, (off_t)off);
        size_t got;

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        off += (uint64_t)r;
        got = (size_t)r;
        while (n > 0 && got >= iov->iov_len) {
            got -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + got;
            iov->iov_len -= got;
        }
    }
    return 0;
}

static void *block_alloc(uint64_t n)
{
    void *p = NULL;

    return posix_memalign(&p, DISK_BLOCK, n > 0 ? (size_t)round_block(n) : DISK_BLOCK) == 0 ? p
                                                                                            : NULL;
}

/* --- segments --- */

static seg_t *seg_add(disk_t *d, uint64_t id, int fd, uint64_t size)
{
    seg_t *s;

    if (ARRAY_RESERVE(d->segs, d->nsegs, d->segcap, 64) != 0)
        return NULL;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->id = id;
    s->fd = fd;
    s->size = size;
    d->segs[d->nsegs++] = s;
    d->used += round_block(size);
    return s;
}

static seg_t *seg_find(const disk_t *d, uint64_t id)
{
    size_t lo = 0, hi = d->nsegs;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->segs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->nsegs && d->segs[lo]->id == id ? d->segs[lo] : NULL;
}

static void seg_set_size(disk_t *d, seg_t *s, uint64_t size)
{
    d->used -= round_block(s->size);
    s->size = size;
    d->used += round_block(size);
}

static int push_drop(disk_t *d, uint64_t id, int fd)
{
    if (ARRAY_RESERVE(d->drops, d->ndrops, d->dropcap, 16) != 0)
        return -ENOMEM;
    d->drops[d->ndrops++] = (drop_t){.id = id, .fd = fd};
    return 0;
}

/* Removes live segment i: its file goes to the drop list (unlinked by the next flush job), its
 * descriptor too unless reads still hold it. */
static int seg_remove(disk_t *d, size_t i)
{
    seg_t *s = d->segs[i];

    if (push_drop(d, s->id, s->refs == 0 ? s->fd : -1) != 0)
        return -ENOMEM;
    d->used -= round_block(s->size);
    memmove(&d->segs[i], &d->segs[i + 1], (d->nsegs - i - 1) * sizeof *d->segs);
    d->nsegs--;
    if (d->active == s)
        d->active = NULL;
    d->reclaimed_segments++;
    if (s->refs == 0) {
        free(s);
    } else {
        s->dead = true;
        s->dnext = d->dead;
        d->dead = s;
    }
    return 0;
}

static void seg_unref(disk_t *d, seg_t *s)
{
    if (--s->refs > 0 || !s->dead)
        return;
    for (seg_t **pp = &d->dead; *pp != NULL; pp = &(*pp)->dnext) {
        if (*pp == s) {
            *pp = s->dnext;
            break;
        }
    }
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

/* Reclaims the oldest segments (never the active one) until used + need <= capacity. -EAGAIN:
 * the store took its bounded share of a segment's entries this turn; call again next turn.
 * Segments kept (-EBUSY: leased or pinned entries) are stepped over, up to a quarter of the
 * capacity (DISK_LEASE_KEEP_DIV) and while a later one can go; beyond, it goes through them once
 * more from the oldest past the leases (0.2.10, disk.h; status reclaims_past_leases): the oldest
 * segment without pinned entries and without reads in flight goes, and the leases of its
 * disk-only chunks are broken (their loads miss). Without the bound a client's leases, which cost
 * it nothing for chunks on disk, kept the oldest data while every newer segment churned (the probe
 * of 0.2.10: one leasing lookup per chain, renewed as they expire, held 12 of 16 MiB; reclaims took
 * the newest chains), or refused every demotion once every segment was leased. */
static int reclaim_for(disk_t *d, uint64_t need, bool force)
{
    disk_reclaim_t how = force ? DISK_RECLAIM_FORCE : DISK_RECLAIM_NORMAL;
    uint64_t kept = 0;
    size_t i = 0;

    while (d->used + need > d->capacity) {
        seg_t *s;
        int rc;
        while (i < d->nsegs && d->segs[i] == d->active)
            i++;
        if (i >= d->nsegs) {
            if (how != DISK_RECLAIM_NORMAL)
                return -EBUSY;
            how = DISK_RECLAIM_PAST_LEASES;
            i = 0;
            continue;
        }
        s = d->segs[i];
        if (how == DISK_RECLAIM_PAST_LEASES && s->refs > 0) {
            i++; /* being read: its leases are being used, and its descriptor would outlive it */
            continue;
        }
        rc = d->ops.reclaim(d->arg, s->id, &s->user, how);
        if (how == DISK_RECLAIM_PAST_LEASES && (rc == 0 || rc == -EAGAIN)) {
            /* counted when it starts (a continuation on a later turn is a plain one), and one at
             * a time: the next goes past leases only if the kept ones still pass the bound */
            d->reclaims_past_leases++;
            log_info("disk_reclaim_past_leases", "segment=%016" PRIx64, s->id);
            how = DISK_RECLAIM_NORMAL;
            kept = 0;
        }
        if (rc == -EAGAIN && !force)
            return -EAGAIN;
        if (rc != 0) {
            if (how == DISK_RECLAIM_NORMAL) {
                d->busy_reclaims++;
                kept += round_block(s->size);
                if (kept > d->capacity / DISK_LEASE_KEEP_DIV) {
                    how = DISK_RECLAIM_PAST_LEASES;
                    i = 0;
                    continue;
                }
            }
            i++;
            continue;
        }
        log_debug("disk_reclaim", "segment=%016" PRIx64 " bytes=%" PRIu64, s->id, s->size);
        if (seg_remove(d, i) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* --- write path --- */

static void wbuf_reset(wbuf_t *wb)
{
    wb->used = 0;
    wb->bound = 0;
    wb->n = 0;
}

/* The upper bound of a record's span: its header block and its raw length in blocks. */
static uint64_t rec_need(const record_meta_t *m)
{
    return record_payload_off(m) + round_block(m->raw_len);
}

/*
 * The seal's fsync (disk.fsync "segment" or "record"). The segment a roll seals is fsynced by
 * the next flush, on its worker, before it writes (sync_fd). On the development VM each such
 * fsync of a 64 MiB segment written O_DIRECT took 85-105 ms (strace), about as long as writing
 * the segment, and it is not in write_seconds: status seal_syncs / seal_sync_seconds count it,
 * and a failed one is counted (seal_sync_errors) and logged (0.2.9; its result was ignored
 * before). 0.2.9 tried the fsync on a job of its own beside the next flush's writes: on that VM
 * the writes slowed more than the wait was saved (write calls 0.29-0.38 GB/s against 0.79-1.47
 * inline, the burst's disk write 0.27-0.35 against 0.36-0.48 in three pairs), so it stays here
 * (README, Decisions, "Seals in the flush").
 *
 * A seal's fsync that fails (0.2.10) is a fault like a failed read (fault(), op "sync"): status
 * reports the tier degraded with last_error_op "sync" until a later sync, a read and a flush have
 * succeeded. It refuses no demotion and drops no record: the segment's records were written, and
 * every read verifies its record, so a record the device lost is a miss, never wrong bytes; what
 * the failure says is that the device may not keep them across a power loss, which is the
 * operator's to know. The fsync is not retried: one that succeeds after a failure proves nothing
 * about the writes before it (Linux reports a write-back error once).
 */
static void fault(disk_t *d, int rc, disk_fault_op_t op, uint64_t seg);
static void fault_clear(disk_t *d, unsigned ok);

static void seal_done(disk_t *d, uint64_t id, int rc, uint64_t ns)
{
    d->seals++;
    d->seal_ns += ns;
    if (rc == 0) {
        fault_clear(d, FAULT_NEED_SYNC);
        return;
    }
    d->seal_errors++;
    log_warn("disk_seal_fsync", "segment=%016" PRIx64 " error=\"%s\"", id, strerror(-rc));
    fault(d, rc, DISK_FAULT_SYNC, id);
}

/* Opens the new segment file of j (O_DIRECT when asked and allowed). */
static int flush_create(flush_job_t *j)
{
    char path[DISK_PATH_MAX];
    int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, fd = -1;

    seg_path(j->d->dir, j->seg->id, path, sizeof path);
    if (j->try_direct) {
        fd = open(path, flags | O_DIRECT, 0640);
        if (fd >= 0)
            j->new_direct = true;
        else if (errno == EINVAL)
            j->direct_errno = EINVAL;
        else
            return -errno;
    }
    if (fd < 0)
        fd = open(path, flags, 0640);
    if (fd < 0)
        return -errno;
    j->new_fd = fd;
    return 0;
}

/* Appends (base, len) to iov, extending the last entry when it ends where base starts. */
static void iov_add(struct iovec *iov, size_t *niov, void *base, uint64_t len)
{
    struct iovec *last = *niov > 0 ? &iov[*niov - 1] : NULL;

    if (last != NULL && (uint8_t *)last->iov_base + last->iov_len == (uint8_t *)base)
        last->iov_len += (size_t)len;
    else
        iov[(*niov)++] = (struct iovec){base, (size_t)len};
}

/* Encodes record r of the batch: verifies its bytes, compresses them into the staging area at
 * *sp when that pays, and appends its header block and payload to iov. With staging the raw
 * bytes are copied into the staging area first, and the copy is what is verified, compressed
 * and written: bytes changed in the arena after the copy cannot reach the disk, and the worker
 * never writes into the shared arena. cbuf (staging and compression only) takes lz4's output. */
static void flush_record(flush_job_t *j, wrec_t *r, uint8_t *scratch, uint8_t *cbuf, uint8_t *cal,
                         struct iovec *iov, size_t *niov, uint64_t *sp, uint64_t *fpos)
{
    disk_t *d = j->d;
    uint64_t raw = r->m.raw_len, hb = record_payload_off(&r->m), stored = raw;
    uint8_t *hdr = d->out + *sp, *pay = hdr + hb, *src = r->data, codec = RECORD_CODEC_RAW;
    bool staged = j->staged;
    uint64_t sum;
    int hl;

    if (staged) {
        sum = record_copy_csum(pay, r->data, raw);
        src = pay;
    } else {
        sum = record_csum(r->data, raw);
    }
    if (sum != r->m.csum) {
        r->rc = -EBADMSG; /* changed since it was committed: never written as valid */
        return;
    }
    memset(src + raw, 0, round_block(raw) - raw);
    if (scratch != NULL) {
        uint64_t t0 = uv_hrtime();
        stored = codec_encode(d->mode, j->max_ratio, DISK_SHUFFLE_ELEM, src, raw,
                              staged ? cbuf : pay, raw, scratch, &codec);
        if (codec != RECORD_CODEC_RAW && staged)
            memcpy(pay, cbuf, stored);
        j->codec_ns += uv_hrtime() - t0;
    }
    if (codec != RECORD_CODEC_RAW && cal != NULL && j->dec_bytes == 0) {
        uint64_t t0 = uv_hrtime();
        if (codec_decode(codec, DISK_SHUFFLE_ELEM, pay, stored, cal, raw, scratch) == 0) {
            j->dec_ns = uv_hrtime() - t0;
            j->dec_bytes = raw;
        }
    }
    r->m.codec = codec;
    r->m.shuffle = codec == RECORD_CODEC_RAW ? 1 : DISK_SHUFFLE_ELEM;
    r->m.stored_len = stored;
    hl = record_encode_header(hdr, hb, &r->m, NULL);
    if (hl < 0) {
        r->rc = -EINVAL;
        return;
    }
    memset(hdr + hl, 0, hb - (uint64_t)hl);
    iov_add(iov, niov, hdr, hb);
    if (codec == RECORD_CODEC_RAW && !staged) {
        iov_add(iov, niov, r->data, round_block(raw));
        *sp += hb;
    } else {
        memset(pay + stored, 0, round_block(stored) - stored);
        iov_add(iov, niov, pay, round_block(stored));
        *sp += hb + round_block(stored);
        j->compressed += codec != RECORD_CODEC_RAW;
    }
    r->loc = (disk_loc_t){.seg = j->seg->id,
                          .off = j->start + *fpos,
                          .hdr_len = (uint16_t)hb,
                          .stored = (uint32_t)stored,
                          .version = RECORD_VERSION};
    *fpos += hb + round_block(stored);
    j->raw += raw;
    j->stored += stored;
}

/* Writes what iov holds at the flush's file position *done (advanced), timing the calls. */
static int flush_write(flush_job_t *j, int fd, struct iovec *iov, size_t *niov, uint64_t *done)
{
    uint64_t bytes = 0, t0 = uv_hrtime();
    int rc;

    for (size_t i = 0; i < *niov; i++)
        bytes += iov[i].iov_len;
    rc = iov_full(fd, iov, *niov, j->start + *done, true);
    j->write_ns += uv_hrtime() - t0;
    *done += bytes;
    *niov = 0;
    return rc;
}

static void flush_work(uv_work_t *req)
{
    flush_job_t *j = req->data;
    disk_t *d = j->d;
    wbuf_t *wb = j->wb;
    char path[DISK_PATH_MAX];
    uint64_t sp = 0, fpos = 0, done = 0, maxraw = 0, t0, work_t0;
    uint64_t piece = d->wb_bytes < DISK_STAGE_PIECE ? d->wb_bytes : DISK_STAGE_PIECE;
    uint8_t *scratch = NULL, *cbuf = NULL, *cal = NULL;
    bool compress = !j->raw_only && d->mode != CODEC_MODE_OFF, staged = j->staged;
    struct iovec *iov;
    size_t niov = 0;
    int fd = j->fd;

    for (size_t i = 0; i < j->ndrops; i++) {
        seg_path(d->dir, j->drops[i].id, path, sizeof path);
        unlink(path);
        if (j->drops[i].fd >= 0)
            close(j->drops[i].fd);
    }
    if (j->sync_fd >= 0) {
        t0 = uv_hrtime();
        j->seal_rc = fsync(j->sync_fd) == 0 ? 0 : -errno;
        j->seal_ns = uv_hrtime() - t0;
    }
    if (j->create) {
        j->rc = flush_create(j);
        if (j->rc != 0)
            return;
        fd = j->new_fd;
    }
    iov = malloc(2 * (size_t)wb->n * sizeof *iov);
    for (uint32_t i = 0; i < wb->n; i++)
        if (wb->recs[i].m.raw_len > maxraw)
            maxraw = wb->recs[i].m.raw_len;
    if (compress) {
        scratch = malloc(maxraw);
        cbuf = staged ? malloc(maxraw) : NULL;
        if (j->calibrate)
            cal = malloc(maxraw);
    }
    if (iov == NULL || (compress && (scratch == NULL || (staged && cbuf == NULL)))) {
        j->rc = -ENOMEM;
        goto out;
    }
    /* Without staging the batch goes out in one pwritev (its payloads are the arena extents);
     * with it, the staging area is refilled from its start once a piece of it is written, so
     * that only a piece (plus one record) of it is ever resident. */
    work_t0 = uv_hrtime();
    for (uint32_t i = 0; i < wb->n && j->rc == 0; i++) {
        wrec_t *r = &wb->recs[i];
        uint64_t need = record_payload_off(&r->m) + round_block(r->m.raw_len);
        if (staged && sp > 0 && sp + need > piece) {
            j->rc = flush_write(j, fd, iov, &niov, &done);
            sp = 0;
        }
        if (j->rc == 0)
            flush_record(j, r, scratch, cbuf, cal, iov, &niov, &sp, &fpos);
    }
    if (j->rc == 0)
        j->rc = flush_write(j, fd, iov, &niov, &done);
    t0 = uv_hrtime();
    if (j->rc == 0 && d->fsync == CONFIG_FSYNC_RECORD && fdatasync(fd) != 0)
        j->rc = -errno;
    j->write_ns += uv_hrtime() - t0;
    j->work_ns = uv_hrtime() - work_t0 - j->codec_ns - j->dec_ns;
    if (j->rc != 0) {
        if (ftruncate(fd, (off_t)j->start) != 0)
            log_debug("disk_truncate", "error=\"%s\"", strerror(errno));
        goto out;
    }
    j->written = fpos;
out:
    free(iov);
    free(scratch);
    free(cbuf);
    free(cal);
}

/*
 * A full filesystem (0.2.7). disk.capacity_bytes is a bound, not a reservation: the filesystem
 * may fill first (other files, a smaller disk than configured). A flush that fails with ENOSPC
 * lowers the capacity in force to what the tier holds now (at least a segment and a write
 * batch), so that the next flush reclaims the oldest segment to make its room, as at capacity,
 * instead of the tier staying degraded for as long as the filesystem is full of its own segments.
 * After each flush that succeeds while it is lowered, statvfs(2) of the directory raises it again
 * by the space the filesystem has free beyond two write batches, up to disk.capacity_bytes (log
 * disk_capacity). At open (capacity_fit), a filesystem with less room than disk.capacity_bytes
 * starts it lowered, and one that cannot hold a segment and a batch is logged.
 *
 * The floor is one segment and one batch (0.2.14; it was two segments and a batch): what the
 * active segment and the batch being flushed take, which a reclaim of every other segment always
 * leaves room for. With two segments, a filesystem smaller than the floor (64 MiB under 32 MiB
 * segments and an 8 MiB batch) filled up with 63 MiB of the tier's own segments, the capacity
 * could not be lowered to what the tier held, no flush ever reclaimed, and the tier stayed
 * degraded for good (the session-15 fault probe).
 */
static uint64_t capacity_floor(const disk_t *d)
{
    return d->seg_bytes + d->wb_bytes;
}

static void capacity_lower(disk_t *d)
{
    /* the floor lets a flush always make its room by reclaiming: the active segment and a
     * whole batch fit (a lower capacity would make the flush wait for room no reclaim frees) */
    uint64_t floor_ = capacity_floor(d), cap = d->used > floor_ ? d->used : floor_;

    if (cap >= d->capacity)
        return;
    d->capacity = cap;
    log_warn("disk_capacity",
             "dir=%s error=\"%s\" capacity_bytes=%" PRIu64 " configured_bytes=%" PRIu64
             " action=lowered",
             d->dir, strerror(ENOSPC), d->capacity, d->capacity_cfg);
}

static void capacity_raise(disk_t *d)
{
    struct statvfs sv;
    uint64_t avail, cap;

    if (d->capacity >= d->capacity_cfg || statvfs(d->dir, &sv) != 0)
        return;
    avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    if (avail <= 2 * d->wb_bytes)
        return;
    cap = d->used + avail - 2 * d->wb_bytes;
    if (cap > d->capacity_cfg)
        cap = d->capacity_cfg;
    if (cap <= d->capacity)
        return;
    d->capacity = cap;
    log_info("disk_capacity",
             "dir=%s capacity_bytes=%" PRIu64 " configured_bytes=%" PRIu64 " action=raised", d->dir,
             d->capacity, d->capacity_cfg);
}

/* At open, after the recovery: the capacity in force lowered when the filesystem has less room
 * (what the tier holds plus what is free, less two batches) than disk.capacity_bytes, never below
 * what the tier holds (a restart reclaims nothing for it) nor the floor. A filesystem smaller than
 * the floor is logged (disk_too_small): the tier runs, its flushes fail with ENOSPC and it stays
 * degraded until the filesystem grows (a tmpfs remounted larger), as before 0.2.14. */
static void capacity_fit(disk_t *d)
{
    struct statvfs sv;
    uint64_t total, room;

    if (statvfs(d->dir, &sv) != 0)
        return; /* cannot tell: ENOSPC lowers it, if it comes */
    total = (uint64_t)sv.f_blocks * (uint64_t)sv.f_frsize;
    if (total < capacity_floor(d))
        log_warn("disk_too_small",
                 "dir=%s filesystem_bytes=%" PRIu64 " needed_bytes=%" PRIu64
                 " reason=\"the filesystem cannot hold a segment and a write batch "
                 "(disk.segment_bytes + disk.write_buffer_bytes): flushes will fail until it "
                 "grows; lower them or use another disk.dir\"",
                 d->dir, total, capacity_floor(d));
    room = d->used + (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    room = room > 2 * d->wb_bytes ? room - 2 * d->wb_bytes : 0;
    if (room < capacity_floor(d))
        room = capacity_floor(d);
    if (room < d->used)
        room = d->used;
    if (room >= d->capacity)
        return;
    d->capacity = room;
    log_warn("disk_capacity",
             "dir=%s capacity_bytes=%" PRIu64 " configured_bytes=%" PRIu64
             " filesystem_bytes=%" PRIu64 " action=lowered reason=\"less room on the filesystem\"",
             d->dir, d->capacity, d->capacity_cfg, total);
}

static void degrade(disk_t *d, int rc, const char *what)
{
    uint64_t now = uv_now(d->loop);

    d->last_error = rc;
    d->last_error_op = DISK_FAULT_WRITE;
    d->retry_at = now + DISK_RETRY_MS;
    if (d->state != DISK_DEGRADED && !d->read_fault)
        log_warn("disk_degraded", "op=%s error=\"%s\" retry_ms=%u", what, strerror(-rc),
                 DISK_RETRY_MS);
    d->state = DISK_DEGRADED;
}

static void idle_cb(uv_idle_t *h);

static void next_turn(disk_t *d)
{
    if (!d->closed)
        uv_idle_start(&d->idle, idle_cb);
}

/* Reports the next slice of the committing batch's records; the batch ends with its last. */
static void commit_step(disk_t *d)
{
    flush_job_t *j = d->committing;
    wbuf_t *wb = j->wb;
    uint32_t end =
        j->next_commit + DISK_COMMIT_SLICE < wb->n ? j->next_commit + DISK_COMMIT_SLICE : wb->n;

    for (uint32_t i = j->next_commit; i < end; i++) {
        wrec_t *r = &wb->recs[i];
        int rc = r->rc != 0 ? r->rc : j->rc;
        if (r->rc == -EBADMSG) {
            d->verify_drops++;
            log_warn("disk_verify_drop", "ns=%u rank=%u action=not_written", r->ns_id, r->m.rank);
        }
        d->ops.committed(d->arg, r->ns_id, &r->m, wb->first_seq + i, r->cookie, rc, &r->loc);
    }
    j->next_commit = end;
    if (end < wb->n) {
        next_turn(d);
        return;
    }
    d->committing = NULL;
    wbuf_reset(wb);
    d->flushing = NULL;
    free(j->drops);
    free(j);
    kick(d);
    maybe_done(d);
}

/* A read failed, or a segment file was found truncated or deleted (op): the tier is degraded
 * until a read and a flush succeed again. */
static void fault(disk_t *d, int rc, disk_fault_op_t op, uint64_t seg)
{
    d->last_error = rc;
    d->last_error_op = op;
    if (d->state != DISK_DEGRADED && !d->read_fault)
        log_warn("disk_degraded", "op=%s segment=%016" PRIx64 " error=\"%s\"",
                 op == DISK_FAULT_READ   ? "read"
                 : op == DISK_FAULT_SYNC ? "sync"
                                         : "segment",
                 seg, strerror(-rc));
    d->read_fault = true;
    d->fault_need |=
        FAULT_NEED_READ | FAULT_NEED_WRITE | (op == DISK_FAULT_SYNC ? FAULT_NEED_SYNC : 0);
}

/* What succeeded (FAULT_NEED_* bits): the end of a read fault once everything it needs did. */
static void fault_clear(disk_t *d, unsigned ok)
{
    if (!d->read_fault)
        return;
    d->fault_need &= ~ok;
    if (d->fault_need == 0 && d->state == DISK_OK) {
        d->read_fault = false;
        log_info("disk_resumed", "after=read_fault");
    }
}

/* A flush's work per raw byte, into its way's average: flushes of less than 1 MiB in all are
 * summed first (noise), the first of each way is not counted (the staging memory's first
 * touch, the segment's first blocks), and a probe of the way that lost counts half, so that
 * the rare probes can turn the choice within a few of them. */
static void stage_measured(disk_t *d, const flush_job_t *j)
{
    int w = j->staged;
    double v, *x = &d->stage_ns_pb[w];

    d->stage_acc_ns[w] += j->work_ns;
    d->stage_acc_bytes[w] += j->raw;
    if (d->stage_acc_bytes[w] < (1u << 20))
        return;
    v = (double)d->stage_acc_ns[w] / (double)d->stage_acc_bytes[w];
    d->stage_acc_ns[w] = d->stage_acc_bytes[w] = 0;
    if (!d->stage_warm[w])
        d->stage_warm[w] = true;
    else if (*x == 0)
        *x = v;
    else if (j->stage_probe)
        *x = (*x + v) / 2;
    else
        ema(x, v);
}

static void flush_after(uv_work_t *req, int status)
{
    flush_job_t *j = req->data;
    disk_t *d = j->d;
    wbuf_t *wb = j->wb;
    seg_t *s = j->seg;
    bool ok;

    if (j->rc == 0 && status != 0)
        j->rc = status;
    ok = j->rc == 0;
    if (j->sync_fd >= 0)
        seal_done(d, j->sync_id, j->seal_rc, j->seal_ns);
    if (j->create && j->new_fd >= 0) {
        s->fd = j->new_fd;
        s->direct = j->new_direct;
    }
    if (j->direct_errno != 0 && d->direct) {
        d->direct = false;
        log_warn("disk_direct_io", "dir=%s error=\"%s\" action=buffered", d->dir,
                 strerror(j->direct_errno));
    }
    d->used -= d->reserved;
    d->reserved = 0;
    if (ok) {
        seg_set_size(d, s, j->start + j->written);
        d->bytes_written += j->written;
        d->raw_written += j->raw;
        d->stored_written += j->stored;
        for (uint32_t i = 0; i < wb->n; i++)
            d->records_written += wb->recs[i].rc == 0;
        d->records_compressed += j->compressed;
        d->flush_ns += j->write_ns;
        if (j->written >= (1u << 20))
            ema(&d->wr_ns_pb, (double)j->write_ns / (double)j->written);
        if (d->stage_choose)
            stage_measured(d, j);
        d->flushes++;
        d->flushes_staged += j->staged;
        if (j->dec_bytes > 0 && d->dec_ns_pb == 0)
            d->dec_ns_pb = (double)j->dec_ns / (double)j->dec_bytes;
        if (d->state == DISK_DEGRADED)
            log_info("disk_resumed", "segment=%016" PRIx64, s->id);
        d->state = DISK_OK;
        /* with fsync "record" the flush's fdatasync is a sync that succeeded */
        fault_clear(d, FAULT_NEED_WRITE | (d->fsync == CONFIG_FSYNC_RECORD ? FAULT_NEED_SYNC : 0));
        capacity_raise(d);
    } else {
        d->write_errors++;
        degrade(d, j->rc, "write");
        if (j->rc == -ENOSPC)
            capacity_lower(d);
        if (j->create && j->new_fd < 0 && s->size == 0) {
            /* the file was never created: forget the segment */
            for (size_t i = 0; i < d->nsegs; i++)
                if (d->segs[i] == s) {
                    memmove(&d->segs[i], &d->segs[i + 1], (d->nsegs - i - 1) * sizeof *d->segs);
                    d->nsegs--;
                    break;
                }
            if (d->active == s)
                d->active = NULL;
            free(s);
        }
    }
    d->committing = j;
    j->next_commit = 0;
    commit_step(d);
}

/* Fails every record of the filling batch (shutdown with nowhere to write). */
static void fail_fill(disk_t *d, int rc)
{
    wbuf_t *wb = d->fill;

    for (uint32_t i = 0; i < wb->n; i++)
        d->ops.committed(d->arg, wb->recs[i].ns_id, &wb->recs[i].m, wb->first_seq + i,
                         wb->recs[i].cookie, rc, &wb->recs[i].loc);
    wbuf_reset(wb);
}

static void timer_cb(uv_timer_t *t)
{
    kick(t->data);
}

static void idle_cb(uv_idle_t *h)
{
    disk_t *d = h->data;

    uv_idle_stop(&d->idle);
    if (d->committing != NULL)
        commit_step(d); /* its last slice kicks */
    else
        kick(d);
}

/* The largest ratio at which compressing a record makes reading it no slower than raw (auto),
 * capped by disk.compression_threshold. */
static double auto_max_ratio(const disk_t *d)
{
    double r = d->cfg->disk.compression_threshold;
    double dev = d->rd_ns_pb > 0 ? d->rd_ns_pb : d->wr_ns_pb;

    if (d->dec_ns_pb > 0 && dev > 0) {
        double pays = 1.0 - d->dec_ns_pb / dev - DISK_AUTO_MARGIN;
        if (pays < r)
            r = pays;
    }
    return r;
}

/* Whether any flush may be staged: not without staging memory, and under "auto" not with DMA
 * straight out of huge pages or with buffered writes (a copy for nothing). */
static bool flushes_stageable(const disk_t *d)
{
    return d->wstage != NULL && !(d->stage_choose && (d->arena_huge || !d->direct));
}

/*
 * Staged flushes (disk.h "Staging"): whether the next flush copies its raw payloads into the
 * staging memory. "on" always; "auto" (with staging memory, direct I/O and an arena in small
 * pages) by measurement: the flush's work per raw byte (the copies or checksums and the write
 * calls; compression and the decoding calibration left out) is averaged for each way over
 * flushes of at least 1 MiB in all, each way is tried first until it has an average, and then one
 * flush in DISK_STAGE_PROBE goes the way that lost, so that a change of the device or the load
 * turns the choice. Why measured: on one VM staged flushes wrote 10-30 % slower (the copy cost the
 * single flush worker more than the DMA saved), on another 1.3-1.7x faster (a 2 MiB request
 * out of 512 small pages cost the device more than the copy).
 */
static bool flush_staged(disk_t *d, bool *probe)
{
    bool best;

    *probe = false;
    if (!flushes_stageable(d))
        return false;
    if (!d->stage_choose)
        return true;
    if (d->stage_ns_pb[1] == 0)
        return true;
    if (d->stage_ns_pb[0] == 0)
        return false;
    best = d->stage_ns_pb[1] < d->stage_ns_pb[0];
    *probe = ++d->stage_turns % DISK_STAGE_PROBE == 0;
    return *probe ? !best : best;
}

/* Starts a flush of the filling batch when none is in flight. */
static void kick(disk_t *d)
{
    uint64_t now = uv_now(d->loop), start, need;
    flush_job_t *j;
    bool roll;
    int rc;

    d->kick_pending = false;
    d->busy_wait = false;
    if (d->closed || d->flushing != NULL || d->fill->n == 0)
        return;
    if (d->state == DISK_DEGRADED && now < d->retry_at && !d->closing) {
        uv_timer_start(&d->timer, timer_cb, d->retry_at - now, 0);
        return;
    }
    /* a faulted active segment (disk_check_files found it while a flush was writing into it)
     * gets no further record */
    roll =
        d->active == NULL || d->active->faulted || d->active->size + d->fill->bound > d->seg_bytes;
    start = roll ? 0 : d->active->size;
    need = round_block(start + d->fill->bound) - (roll ? 0 : round_block(start));
    if (d->keep_segments && d->used + need > d->capacity) {
        /* no room without a reclaim (the capacity lowered by an ENOSPC since the batch was
         * filled): its chunks stay RAM-only, in the arena that is re-attached (disk.h) */
        fail_fill(d, -ENOSPC);
        if (d->closing)
            maybe_done(d);
        return;
    }
    rc = reclaim_for(d, need, d->closing);
    if (rc == -EAGAIN) {
        next_turn(d); /* a large segment is being reclaimed a slice per turn */
        return;
    }
    if (rc != 0)
        goto busy;
    j = calloc(1, sizeof *j);
    if (j == NULL)
        goto busy;
    j->sync_fd = -1;
    j->new_fd = -1;
    if (roll) {
        seg_t *old = d->active, *s;
        s = seg_add(d, d->next_id, -1, 0);
        if (s == NULL) {
            free(j);
            goto busy;
        }
        if (old != NULL && d->fsync != CONFIG_FSYNC_NONE) {
            j->sync_fd = old->fd;
            j->sync_id = old->id;
        }
        s->version = RECORD_VERSION;
        d->next_id++;
        d->active = s;
        j->create = true;
        j->try_direct = d->direct;
    }
    d->reserved = need;
    d->used += need;
    /* Compression is worth it only while the disk keeps up with demotions: a batch that filled
     * half its budget while the previous flush was still running says it does not, and in auto
     * mode it is written raw (the next, smaller batch is compressed again). It is worth it for
     * reads only below auto_max_ratio(). */
    j->max_ratio =
        d->mode == CODEC_MODE_AUTO ? auto_max_ratio(d) : d->cfg->disk.compression_threshold;
    j->raw_only =
        d->mode == CODEC_MODE_AUTO && (d->fill->bound * 2 >= d->wb_bytes || j->max_ratio <= 0);
    j->calibrate = d->dec_ns_pb == 0;
    j->staged = flush_staged(d, &j->stage_probe);
    d->flushes_raw += d->mode == CODEC_MODE_AUTO && d->fill->bound * 2 >= d->wb_bytes;
    j->req.data = j;
    j->d = d;
    j->seg = d->active;
    j->fd = d->active->fd;
    j->start = start;
    j->wb = d->fill;
    j->drops = d->drops;
    j->ndrops = d->ndrops;
    d->drops = NULL;
    d->ndrops = d->dropcap = 0;
    d->flushing = d->fill;
    d->fill = d->fill == &d->wb[0] ? &d->wb[1] : &d->wb[0];
    d->fill->first_seq = d->next_seq;
    d->flush_started = uv_now(d->loop);
    uv_queue_work(d->loop, &j->req, flush_work, flush_after);
    return;

busy:
    if (d->closing) {
        fail_fill(d, -EIO);
        maybe_done(d);
        return;
    }
    d->busy_wait = true; /* the filling batch cannot go yet: no append beyond it meanwhile */
    uv_timer_start(&d->timer, timer_cb, DISK_BUSY_RETRY_MS, 0);
}

/* The span bound of a chunk of len bytes with the longest names. */
static uint64_t worst_need(uint64_t len)
{
    return round_block(RECORD_HEADER_MAX) + round_block(len);
}

bool disk_admits(const disk_t *d, uint64_t len)
{
    if (d->closing || len == 0 || len > RECORD_RAW_MAX || worst_need(len) > d->wb_bytes)
        return false;
    if (d->state == DISK_DEGRADED && uv_now(d->loop) < d->retry_at)
        return false;
    if (d->fill->bound + worst_need(len) <= d->wb_bytes && d->fill->n < DISK_WB_MAX_RECS)
        return true;
    /* the filling batch goes now and the other one is empty (unless its start is waiting for
     * room: reclaim refused every segment, or no file could be made) */
    return d->flushing == NULL && !d->busy_wait;
}

uint64_t disk_capacity(const disk_t *d)
{
    return d->capacity;
}

void disk_keep_segments(disk_t *d)
{
    d->keep_segments = true;
}

bool disk_fits_unreclaimed(const disk_t *d, uint64_t len)
{
    uint64_t need = d->used + (d->fill != NULL ? d->fill->bound : 0) + worst_need(len);

    return need <= d->capacity;
}

int disk_append(disk_t *d, uint32_t ns_id, const record_meta_t *m, void *data, uint64_t cookie,
                uint64_t *seq)
{
    uint64_t need = rec_need(m);
    wbuf_t *wb;
    wrec_t *r;

    if (d->closing)
        return -EAGAIN;
    if (need > d->wb_bytes)
        return -E2BIG;
    if (d->state == DISK_DEGRADED && uv_now(d->loop) < d->retry_at)
        return -EAGAIN;
    if (d->fill->bound + need > d->wb_bytes || d->fill->n == DISK_WB_MAX_RECS) {
        kick(d);
        if (d->fill->n > 0)
            return -EAGAIN;
    }
    wb = d->fill;
    if (wb->n == 0)
        wb->first_seq = d->next_seq;
    r = &wb->recs[wb->n++];
    r->m = *m;
    r->ns_id = ns_id;
    r->data = data;
    r->cookie = cookie;
    r->rc = 0;
    memset(&r->loc, 0, sizeof r->loc);
    wb->used += m->raw_len;
    wb->bound += need;
    *seq = d->next_seq++;
    if (!d->kick_pending) {
        d->kick_pending = true;
        next_turn(d);
    }
    return 0;
}

/* --- read path --- */

/*
 * The I/O gate (0.2.8, disk.read_io_bytes). Reads used to enter the device as soon as their
 * jobs ran, so a load's read and the read-ahead started with it shared the device and both
 * finished late. On the development VM two 2 MiB O_DIRECT reads at once took ~3 ms each (1.4
 * GB/s together) where one alone took 0.7-1.0 ms; a 2 MiB read is split into many device
 * requests by the block layer already, so one keeps the device's queue busy. So a job waits,
 * before its system calls, until it is the oldest job not yet in I/O (its ticket: the order the
 * loop started them, which is the order loads and read-aheads asked) and its bytes fit in
 * read_io_bytes with those of the reads in I/O, or none is in I/O; it leaves as soon as its
 * system calls return, so its copy into the arena, its checksum and its decoding overlap the next
 * read's I/O. Small reads (64 KiB chunks) still go many at once, up to max_reads_in_flight.
 *
 * A read in I/O for longer than DISK_IO_GATE_MS no longer counts (a device retrying a bad
 * sector, a network filesystem that stopped answering for one file): the reads behind it enter
 * beside it, as they did before 0.2.8, so one stuck read holds nobody but its own load, and the
 * other reads go on finishing (the stall rule, disk.read_stall_ms, sees progress). A healthy read
 * of a chunk of up to 16 MiB takes a few ms; a device that slow for every read only loses the
 * gate's ordering, not its reads. Every job passes the gate once, at the start of its work
 * (read_work), whatever happens after: a ticket never taken would hold every later read (no read
 * job is ever handed to uv_cancel: one would have to give its ticket back). A retry after a failed
 * read does not wait (rare).
 */
#define DISK_IO_GATE_MS 50u

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The bytes of the reads in I/O that still count at now, and in *until when the first of them
 * stops counting (UINT64_MAX: none counts). mu held. */
static uint64_t io_counted(const disk_t *d, uint64_t now, uint64_t *until)
{
    uint64_t n = 0, limit = (uint64_t)DISK_IO_GATE_MS * 1000000u;

    *until = UINT64_MAX;
    for (const read_job_t *q = d->io_head; q != NULL; q = q->io_next)
        if (now - q->io_t0 < limit) {
            n += q->io_len;
            if (q->io_t0 + limit < *until)
                *until = q->io_t0 + limit;
        }
    return n;
}

static void read_io_enter(read_job_t *j)
{
    disk_t *d = j->d;

    if (!d->io_gate || j->retried)
        return; /* the first attempt took the ticket */
    j->io_len = j->loc.hdr_len + j->loc.stored;
    pthread_mutex_lock(&d->io_mu);
    for (;;) {
        uint64_t until, busy;
        struct timespec ts;
        if (j->ticket != d->io_turn) {
            pthread_cond_wait(&d->io_cv, &d->io_mu); /* the one before it enters first */
            continue;
        }
        busy = io_counted(d, mono_ns(), &until);
        if (busy == 0 || busy + j->io_len <= d->io_budget)
            break;
        /* a read counts (until is set): wait for one to leave, or to stop counting */
        ts.tv_sec = (time_t)(until / 1000000000u);
        ts.tv_nsec = (long)(until % 1000000000u);
        (void)pthread_cond_timedwait(&d->io_cv, &d->io_mu, &ts);
    }
    d->io_turn++;
    j->io_t0 = mono_ns();
    j->io_prev = d->io_tail;
    j->io_next = NULL;
    if (d->io_tail != NULL)
        d->io_tail->io_next = j;
    else
        d->io_head = j;
    d->io_tail = j;
    j->in_io = true;
    pthread_cond_broadcast(&d->io_cv); /* the next ticket may enter beside it */
    pthread_mutex_unlock(&d->io_mu);
}

/* Right after the system calls, and again (a no-op then) when the job ends: a job that failed
 * before its I/O (no memory) still passed the gate, so every ticket is taken once. */
static void read_io_leave(read_job_t *j)
{
    disk_t *d = j->d;

    if (!j->in_io)
        return;
    j->in_io = false;
    pthread_mutex_lock(&d->io_mu);
    if (j->io_prev != NULL)
        j->io_prev->io_next = j->io_next;
    else
        d->io_head = j->io_next;
    if (j->io_next != NULL)
        j->io_next->io_prev = j->io_prev;
    else
        d->io_tail = j->io_prev;
    pthread_cond_broadcast(&d->io_cv);
    pthread_mutex_unlock(&d->io_mu);
}

/* A version 2 record: header block and payload in one read, into the job's staging extent
 * (then copied into dst), or without one the payload straight into dst when it is stored raw;
 * then the checks, the decoding and the csum over the raw bytes. */
static void read_v2(read_job_t *j)
{
    uint64_t hb = j->loc.hdr_len, stored = j->loc.stored, raw = j->raw_len, t0;
    bool packed = stored != raw, staged = j->stage != NULL;
    uint8_t *hdr = staged ? j->stage : block_alloc(hb), *scratch = NULL;
    uint8_t *pay = staged ? j->stage + hb : packed ? block_alloc(stored) : j->dst;
    struct iovec iov[2];
    record_meta_t m;
    size_t hl;

    if (hdr == NULL || pay == NULL) {
        j->rc = -ENOMEM;
        goto out;
    }
    iov[0] = (struct iovec){hdr, hb};
    iov[1] = (struct iovec){pay, round_block(stored)};
    t0 = uv_hrtime();
    j->rc = iov_full(j->fd, iov, 2, j->loc.off, false);
    j->io_ns = uv_hrtime() - t0;
    read_io_leave(j);
    if (j->rc != 0)
        goto out;
    if (record_decode_header(hdr, hb, &m, &hl) != RECORD_OK || m.version != RECORD_VERSION ||
        record_payload_off(&m) != hb || m.stored_len != stored || m.raw_len != raw ||
        m.rank != j->rank || memcmp(m.hash, j->hash, 16) != 0 || m.csum != j->csum ||
        (m.codec == RECORD_CODEC_RAW) == packed) {
        j->rc = -EBADMSG;
        goto out;
    }
    if (packed) {
        scratch = malloc(raw);
        if (scratch == NULL) {
            j->rc = -ENOMEM;
            goto out;
        }
        t0 = uv_hrtime();
        if (codec_decode(m.codec, m.shuffle, pay, stored, j->dst, raw, scratch) != 0) {
            j->rc = -EBADMSG;
            goto out;
        }
        j->dec_ns = uv_hrtime() - t0;
    }
    if ((staged && !packed ? record_copy_csum(j->dst, pay, raw) : record_csum(j->dst, raw)) !=
        j->csum)
        j->rc = -EBADMSG;
out:
    if (!staged) {
        free(hdr);
        if (packed)
            free(pay);
    }
    free(scratch);
}

/* A version 1 record (a segment of an older daemon, buffered): header and payload into
 * buffers of the job, the record's checksum, the decoding into dst, then the csum. */
static void read_v1(read_job_t *j)
{
    uint8_t hdr[RECORD_HEADER_MAX], *payload = malloc(j->loc.stored ? j->loc.stored : 1);
    uint8_t *scratch = NULL;
    struct iovec iov[2] = {{hdr, j->loc.hdr_len}, {payload, j->loc.stored}};
    record_meta_t m;
    uint64_t t0;
    size_t hl;

    if (payload == NULL || j->loc.hdr_len > sizeof hdr) {
        j->rc = payload == NULL ? -ENOMEM : -EBADMSG;
        goto out;
    }
    t0 = uv_hrtime();
    j->rc = iov_full(j->fd, iov, 2, j->loc.off, false);
    j->io_ns = uv_hrtime() - t0;
    read_io_leave(j);
    if (j->rc != 0)
        goto out;
    if (record_decode_header(hdr, j->loc.hdr_len, &m, &hl) != RECORD_OK ||
        m.version != RECORD_VERSION_V1 || hl != j->loc.hdr_len || m.stored_len != j->loc.stored ||
        m.raw_len != j->raw_len || m.rank != j->rank || memcmp(m.hash, j->hash, 16) != 0 ||
        record_verify_v1(hdr, hl, payload, m.stored_len) != RECORD_OK) {
        j->rc = -EBADMSG;
        goto out;
    }
    scratch = malloc(m.raw_len);
    if (scratch == NULL) {
        j->rc = -ENOMEM;
        goto out;
    }
    if (codec_decode(m.codec, m.shuffle, payload, m.stored_len, j->dst, m.raw_len, scratch) != 0 ||
        record_csum(j->dst, m.raw_len) != j->csum)
        j->rc = -EBADMSG;
out:
    free(scratch);
    free(payload);
}

static void read_work(uv_work_t *req)
{
    read_job_t *j = req->data;

    for (;;) {
        j->rc = 0;
        read_io_enter(j);
        if (j->loc.version == RECORD_VERSION_V1)
            read_v1(j);
        else
            read_v2(j);
        read_io_leave(j);
        /* a transient fault (a device's EIO, bytes damaged on their way) passes on a second
         * read; a lasting one fails it too and the chunk is a miss */
        if ((j->rc != -EIO && j->rc != -EBADMSG) || j->retried)
            break;
        j->retried = true;
    }
    /* when the device answered, whenever the loop gets to the callback */
    atomic_store_explicit(&j->d->read_done_ms, uv_hrtime() / 1000000u, memory_order_relaxed);
}

static void read_start(disk_t *d, read_job_t *j);

static void read_after(uv_work_t *req, int status)
{
    read_job_t *j = req->data;
    disk_t *d = j->d;

    if (j->rc == 0 && status != 0)
        j->rc = status;
    d->reads_running--;
    d->read_ns += j->io_ns;
    if (j->retried) {
        d->read_retries++;
        if (j->rc == 0)
            log_warn("disk_read_retry", "segment=%016" PRIx64 " offset=%" PRIu64 " action=served",
                     j->loc.seg, j->loc.off);
    }
    if (j->rc == 0) {
        d->bytes_read += (uint64_t)j->loc.hdr_len + j->loc.stored;
        d->records_read++;
        if (j->loc.stored >= (64u << 10))
            ema(&d->rd_ns_pb, (double)j->io_ns / (double)(j->loc.hdr_len + j->loc.stored));
        if (j->dec_ns > 0)
            ema(&d->dec_ns_pb, (double)j->dec_ns / (double)j->raw_len);
        fault_clear(d, FAULT_NEED_READ);
    } else if (j->rc == -EBADMSG) {
        d->checksum_drops++;
        log_warn("disk_checksum", "segment=%016" PRIx64 " offset=%" PRIu64 " action=miss",
                 j->loc.seg, j->loc.off);
        fault(d, j->rc, DISK_FAULT_READ, j->loc.seg);
    } else {
        d->read_errors++;
        if (j->rc != -ECANCELED && j->rc != -ENOMEM) {
            log_warn("disk_read_error",
                     "segment=%016" PRIx64 " offset=%" PRIu64 " error=\"%s\" action=miss",
                     j->loc.seg, j->loc.off, strerror(-j->rc));
            fault(d, j->rc, DISK_FAULT_READ, j->loc.seg);
        }
    }
    seg_unref(d, j->seg);
    if (j->stage != NULL)
        stage_put(d->rstage, j->stage, j->stage_len);
    j->cb(j->arg, j->rc);
    free(j);
    while (d->qhead != NULL && d->reads_running < d->cfg->disk.max_reads_in_flight) {
        read_job_t *q = d->qhead;
        d->qhead = q->next;
        if (d->qhead == NULL)
            d->qtail = NULL;
        d->reads_queued--;
        read_start(d, q);
    }
    maybe_done(d);
}

static void read_start(disk_t *d, read_job_t *j)
{
    if (d->rstage != NULL && j->loc.version == RECORD_VERSION && j->seg->direct) {
        j->stage_len = j->loc.hdr_len + round_block(j->loc.stored);
        j->stage = stage_get(d->rstage, j->stage_len); /* NULL (full): straight into dst */
        d->reads_staged += j->stage != NULL;
    }
    d->reads_running++;
    j->ticket = d->io_issued++;
    j->req.data = j;
    /* cannot fail (libuv checks only that the callbacks are given) */
    uv_queue_work(d->loop, &j->req, read_work, read_after);
}

int disk_read(disk_t *d, const disk_loc_t *loc, const uint8_t hash[16], uint16_t rank,
              uint64_t raw_len, uint64_t csum, void *dst, disk_read_cb cb, void *arg)
{
    seg_t *s = seg_find(d, loc->seg);
    read_job_t *j;

    if (s == NULL || s->fd < 0 || d->closing)
        return -ESTALE;
    j = calloc(1, sizeof *j);
    if (j == NULL)
        return -ENOMEM;
    j->d = d;
    j->seg = s;
    j->fd = s->fd;
    j->loc = *loc;
    memcpy(j->hash, hash, 16);
    j->rank = rank;
    j->raw_len = raw_len;
    j->csum = csum;
    j->dst = dst;
    j->cb = cb;
    j->arg = arg;
    s->refs++;
    if (d->reads_running < d->cfg->disk.max_reads_in_flight) {
        read_start(d, j);
    } else {
        if (d->qtail != NULL)
            d->qtail->next = j;
        else
            d->qhead = j;
        d->qtail = j;
        d->reads_queued++;
    }
    return 0;
}

void disk_check_files(disk_t *d)
{
    for (size_t i = 0; i < d->nsegs; i++) {
        seg_t *s = d->segs[i];
        struct stat st;
        int rc = 0;

        if (s->fd < 0 || s->faulted)
            continue;
        if (fstat(s->fd, &st) != 0)
            rc = -errno;
        else if (st.st_nlink == 0)
            rc = -ENOENT; /* readable through the descriptor now, gone at the next start */
        else if ((uint64_t)st.st_size < s->size)
            rc = -EIO; /* records past the end are lost: the store forgets them (truncated) */
        if (rc == 0)
            continue;
        s->faulted = true;
        d->segment_faults++;
        log_warn("disk_segment_fault",
                 "segment=%016" PRIx64 " reason=%s size=%" PRIu64 " expected=%" PRIu64 " action=%s",
                 s->id,
                 rc == -ENOENT ? "deleted"
                 : rc == -EIO  ? "truncated"
                               : "fstat",
                 rc == -ENOENT || rc == -EIO ? (uint64_t)st.st_size : 0, s->size,
                 s == d->active ? "new_segment" : "none");
        fault(d, rc, DISK_FAULT_SEGMENT, s->id); /* the next flush rolls past it (kick) */
        if (rc == -EIO && d->ops.truncated != NULL)
            d->ops.truncated(d->arg, s->id, (uint64_t)st.st_size);
    }
}

uint32_t disk_reads_pending(const disk_t *d)
{
    return d->reads_running + d->reads_queued;
}

void **disk_seg_user(disk_t *d, uint64_t seg)
{
    seg_t *s = seg_find(d, seg);

    return s != NULL ? &s->user : NULL;
}

bool disk_degraded(const disk_t *d)
{
    return d->state == DISK_DEGRADED;
}

uint64_t disk_retry_in_ms(const disk_t *d)
{
    uint64_t now = uv_now(d->loop);

    return d->state == DISK_DEGRADED && now < d->retry_at ? d->retry_at - now : 0;
}

uint64_t disk_write_errors(const disk_t *d)
{
    return d->write_errors;
}

uint64_t disk_read_done_ms(const disk_t *d)
{
    return atomic_load_explicit(&d->read_done_ms, memory_order_relaxed);
}

void disk_log_end(const disk_t *d, uint64_t *seg, uint64_t *off)
{
    if (d->active != NULL) {
        *seg = d->active->id;
        *off = d->active->size;
    } else {
        *seg = d->next_id;
        *off = 0;
    }
}

uint64_t disk_first_segment(const disk_t *d)
{
    return d->nsegs > 0 ? d->segs[0]->id : d->next_id;
}

/* --- recovery --- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static bool seg_name(const char *name, uint64_t *id)
{
    char *end;

    if (strlen(name) != 20 || strcmp(name + 16, ".seg") != 0)
        return false;
    for (int i = 0; i < 16; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    *id = strtoull(name, &end, 16);
    return end == name + 16 && *id != 0;
}

static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Recovery's buffers: the stored payload and the raw bytes decoded from it. */
typedef struct {
    uint8_t *buf, *raw, *scratch;
    size_t cap, rawcap, scratchcap;
} recover_bufs_t;

static int grow(uint8_t **p, size_t *cap, uint64_t n)
{
    uint8_t *np;

    if (n <= *cap)
        return 0;
    np = realloc(*p, (size_t)n);
    if (np == NULL)
        return -1;
    *p = np;
    *cap = (size_t)n;
    return 0;
}

/* Verifies the payload of a decoded record (buf, stored_len bytes) and sets m->csum for a
 * version 1 record. 1 valid, 0 not, -1 out of memory. */
static int recover_verify(const uint8_t *hdr, size_t hl, record_meta_t *m, recover_bufs_t *b)
{
    const uint8_t *raw = b->buf;

    if (m->version == RECORD_VERSION_V1 && record_verify_v1(hdr, hl, b->buf, m->stored_len) != 0)
        return 0;
    if (m->codec != RECORD_CODEC_RAW) {
        if (grow(&b->raw, &b->rawcap, m->raw_len) != 0 ||
            grow(&b->scratch, &b->scratchcap, m->raw_len) != 0)
            return -1;
        if (codec_decode(m->codec, m->shuffle, b->buf, m->stored_len, b->raw, m->raw_len,
                         b->scratch) != 0)
            return 0;
        raw = b->raw;
    }
    if (m->version == RECORD_VERSION_V1) {
        m->csum = record_csum(raw, m->raw_len);
        return 1;
    }
    return record_csum(raw, m->raw_len) == m->csum;
}

/* Scans one segment from offset from (0, or the end a checkpoint covers); *end receives the
 * length of its valid prefix as far as it could be read. Returns 0, or -1 when a read failed (or
 * memory ran out) at *end: what follows is unknown, not torn. */
static int recover_segment(disk_t *d, seg_t *s, uint64_t from, uint64_t size, recover_bufs_t *b,
                           uint64_t *end)
{
    uint8_t hdr[RECORD_HEADER_MAX];
    uint64_t off = from;

    *end = from;

    while (off < size) {
        size_t avail = size - off < sizeof hdr ? (size_t)(size - off) : sizeof hdr, hl;
        ssize_t n = pread_full(s->fd, hdr, avail, off);
        record_meta_t m;
        uint64_t total, poff;
        int rc;

        if (n < 0)
            return -1;
        rc = record_decode_header(hdr, (size_t)n, &m, &hl);
        if (rc == RECORD_OK && s->version != 0 && m.version != s->version)
            rc = RECORD_EVERSION; /* segments never mix versions */
        if (rc != RECORD_OK) {
            if (rc != RECORD_NEED_MORE) {
                d->rec.bad_headers++;
                log_warn("disk_recovery_bad_header",
                         "segment=%016" PRIx64 " offset=%" PRIu64 " error=\"%s\"", s->id, off,
                         record_strerror(rc));
            }
            break;
        }
        s->version = (uint8_t)m.version;
        total = record_span(&m);
        poff = record_payload_off(&m);
        if (off + total > size)
            break;
        if (grow(&b->buf, &b->cap, m.stored_len) != 0)
            return -1;
        n = pread_full(s->fd, b->buf, m.stored_len, off + poff);
        if (n < 0)
            return -1;
        if ((uint64_t)n < m.stored_len)
            break;
        rc = recover_verify(hdr, hl, &m, b);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            d->rec.checksum_drops++;
            d->checksum_drops++;
            log_warn("disk_checksum",
                     "segment=%016" PRIx64 " offset=%" PRIu64 " action=dropped_at_recovery", s->id,
                     off);
        } else {
            disk_loc_t loc = {.seg = s->id,
                              .off = off,
                              .hdr_len = (uint16_t)poff,
                              .stored = (uint32_t)m.stored_len,
                              .version = (uint8_t)m.version};
            d->ops.recovered(d->arg, &m, &loc);
            d->rec.records++;
            d->rec.records_v1 += m.version == RECORD_VERSION_V1;
        }
        off += total;
        *end = off;
    }
    return 0;
}

/* A scanned segment of version 2 records is read with O_DIRECT from now on (disk.direct_io);
 * the pages its scan brought into the page cache are dropped either way. */
static void recover_reopen(disk_t *d, seg_t *s, const char *path)
{
    int fd;

    posix_fadvise(s->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (!d->direct || s->version != RECORD_VERSION)
        return;
    fd = open(path, O_RDWR | O_CLOEXEC | O_DIRECT | O_NOFOLLOW);
    if (fd < 0)
        return; /* stays buffered */
    close(s->fd);
    s->fd = fd;
    s->direct = true;
}

/* Start-up progress (a log line and a STATUS= line for systemd, which also extends the start
 * timeout): when the scan starts, after a segment when DISK_PROGRESS_MS passed since the last
 * report, and after the last segment. */
static void recover_progress(const disk_t *d, size_t done, size_t total, uint64_t bytes)
{
    log_info("disk_recovery_progress",
             "segments=%zu/%zu records=%" PRIu64 " bytes=%" PRIu64 " checksum_drops=%" PRIu64, done,
             total, d->rec.records, bytes, d->rec.checksum_drops);
    notify_progress("Recovering the disk tier: %zu of %zu segments, %" PRIu64 " records, %" PRIu64
                    " MiB",
                    done, total, d->rec.records, bytes >> 20);
}

/* Opens segment id (in d->dir) into *fd and its size; false (logged, counted) when it cannot be
 * used. */
static bool recover_open(disk_t *d, uint64_t id, int *fd, uint64_t *size)
{
    char path[DISK_PATH_MAX];
    struct stat st;

    seg_path(d->dir, id, path, sizeof path);
    *fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW); /* a link is not a segment: ELOOP */
    if (*fd < 0 || fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        log_warn("disk_recovery_bad_file", "path=%s error=\"%s\"", path,
                 *fd < 0 ? strerror(errno) : "not a regular file");
        d->rec.bad_files++;
        if (*fd >= 0)
            close(*fd);
        return false;
    }
    *size = (uint64_t)st.st_size;
    return true;
}

/* Scans segment s (its file of size bytes) from offset from, truncates a torn tail, and makes
 * it ready (its size, O_DIRECT). Adds the bytes scanned to *bytes. */
static void recover_scan(disk_t *d, seg_t *s, uint64_t from, uint64_t size, recover_bufs_t *b,
                         uint64_t *bytes)
{
    char path[DISK_PATH_MAX];
    uint64_t good;

    seg_path(d->dir, s->id, path, sizeof path);
    if (recover_segment(d, s, from, size, b, &good) != 0) {
        /* Not a torn tail: the records past good may be intact (a transient EIO). Truncating
         * there would destroy them; the file stays as it is, counted whole (s->partial). */
        log_warn("disk_recovery_bad_file",
                 "path=%s offset=%" PRIu64 " error=\"%s\" action=kept_for_the_next_start", path,
                 good, strerror(errno));
        d->rec.bad_files++;
        s->partial = true;
        s->scanned = good;
        d->rec.scanned_bytes += good - from;
        seg_set_size(d, s, size);
        recover_reopen(d, s, path);
        d->rec.segments++;
        *bytes += size;
        return;
    }
    if (good < size) {
        d->rec.torn_bytes += size - (uint64_t)good;
        log_info("disk_recovery_truncate", "segment=%016" PRIx64 " from=%" PRIu64 " to=%" PRIu64,
                 s->id, size, good);
        if (ftruncate(s->fd, (off_t)good) != 0)
            log_warn("disk_recovery_truncate", "path=%s error=\"%s\"", path, strerror(errno));
    }
    seg_set_size(d, s, good);
    recover_reopen(d, s, path);
    d->rec.segments++;
    d->rec.scanned_bytes += good - from;
    *bytes += good;
}

/* --- the checkpoint (checkpoint.h) --- */

typedef struct {
    uint64_t id, size;
    uint8_t version;
} ckseg_t;

typedef struct {
    disk_t *d;
    ckseg_t *segs;
    size_t nsegs, cap;
    const uint64_t *ids; /* the segment files found, sorted */
    size_t nids;
    const char *why; /* why the checkpoint cannot be used */
} ckplan_t;

static const ckseg_t *plan_seg(const ckplan_t *p, uint64_t id)
{
    size_t lo = 0, hi = p->nsegs;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->segs[mid].id == id)
            return &p->segs[mid];
        if (p->segs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int plan_seg_cb(void *arg, uint64_t id, uint64_t size, uint8_t version)
{
    ckplan_t *p = arg;

    if (p->nsegs > 0 && id <= p->segs[p->nsegs - 1].id)
        return -EBADMSG;
    if (p->nsegs == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        ckseg_t *ns = realloc(p->segs, nc * sizeof *ns);
        if (ns == NULL)
            return -ENOMEM;
        p->segs = ns;
        p->cap = nc;
    }
    p->segs[p->nsegs++] = (ckseg_t){.id = id, .size = size, .version = version};
    return 0;
}

static int plan_rec_cb(void *arg, const record_meta_t *m, const ckpt_loc_t *loc)
{
    const ckseg_t *s = plan_seg(arg, loc->seg);

    (void)m;
    if (s == NULL || loc->off + loc->hdr_len + loc->stored > s->size)
        return -EBADMSG; /* a record outside what the checkpoint covers */
    return 0;
}

static int replay_rec_cb(void *arg, const record_meta_t *m, const ckpt_loc_t *loc)
{
    disk_t *d = arg;
    disk_loc_t l = {.seg = loc->seg,
                    .off = loc->off,
                    .hdr_len = loc->hdr_len,
                    .stored = loc->stored,
                    .version = loc->version};

    d->ops.recovered(d->arg, m, &l);
    d->rec.records++;
    d->rec.records_v1 += m->version == RECORD_VERSION_V1;
    d->rec.checkpoint_records++;
    return 0;
}

/* Whether the checkpoint in buf[n] is intact and current for the segment files ids[nids]
 * (checkpoint.h); p->why says why not. */
static bool ckpt_usable(disk_t *d, const uint8_t *buf, size_t n, ckplan_t *p)
{
    ckpt_visit_t v = {.seg = plan_seg_cb, .rec = plan_rec_cb};
    int rc = ckpt_decode(buf, n, &v, p, NULL);

    if (rc != 0) {
        p->why = rc == -EPROTO ? "another version" : "corrupted";
        return false;
    }
    for (size_t i = 0; i < p->nsegs; i++) {
        const ckseg_t *s = &p->segs[i];
        char path[DISK_PATH_MAX];
        struct stat st;
        seg_path(d->dir, s->id, path, sizeof path);
        if (stat(path, &st) != 0) {
            p->why = "stale: a segment it covers is missing";
            return false;
        }
        /* larger: a tail the checkpoint does not cover, scanned (the newest segment's, or a
         * segment's past a read error of the scan that wrote it, s->partial) */
        if ((uint64_t)st.st_size < s->size) {
            p->why = "stale: a segment it covers changed size";
            return false;
        }
    }
    for (size_t i = 0; i < p->nids && p->nsegs > 0; i++)
        if (p->ids[i] < p->segs[p->nsegs - 1].id && plan_seg(p, p->ids[i]) == NULL) {
            p->why = "stale: a segment older than its newest is not covered";
            return false;
        }
    return true;
}

/* Recovers from the checkpoint: the segments it covers come back with the sizes it recorded
 * and their records from it (a tail past that size is scanned: the newest segment's, or one
 * past a read error, 0.2.11), then the newer segments are scanned. A tail scanned after the
 * checkpoint's records of newer segments is no trouble: a record never replaces a newer copy
 * (store_io.c, recovered_cb). 0, or -ENOMEM. */
static int recover_from_ckpt(disk_t *d, const uint8_t *buf, size_t n, const ckplan_t *p,
                             recover_bufs_t *b, uint64_t *bytes)
{
    ckpt_visit_t v = {.rec = replay_rec_cb};
    uint64_t *file_size = calloc(p->nsegs > 0 ? p->nsegs : 1, sizeof *file_size);

    if (file_size == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < p->nsegs; i++) {
        int fd;
        seg_t *s;
        if (!recover_open(d, p->segs[i].id, &fd, &file_size[i])) {
            free(file_size);
            return -EIO; /* it was there a moment ago: the scan path decides */
        }
        s = seg_add(d, p->segs[i].id, fd, 0);
        if (s == NULL) {
            close(fd);
            free(file_size);
            return -ENOMEM;
        }
        s->version = p->segs[i].version;
        seg_set_size(d, s, p->segs[i].size);
    }
    ckpt_decode(buf, n, &v, d, NULL); /* validated already */
    for (size_t i = 0; i < p->nsegs; i++) {
        seg_t *s = d->segs[i];
        char path[DISK_PATH_MAX];
        if (file_size[i] > s->size) {
            recover_scan(d, s, s->size, file_size[i], b, bytes);
            continue;
        }
        seg_path(d->dir, s->id, path, sizeof path);
        recover_reopen(d, s, path);
        d->rec.segments++;
        *bytes += s->size;
    }
    free(file_size);
    for (size_t i = 0; i < p->nids; i++) {
        uint64_t size;
        int fd;
        seg_t *s;
        if (p->nsegs > 0 && p->ids[i] <= p->segs[p->nsegs - 1].id)
            continue;
        if (!recover_open(d, p->ids[i], &fd, &size))
            continue;
        s = seg_add(d, p->ids[i], fd, 0);
        if (s == NULL) {
            close(fd);
            return -ENOMEM;
        }
        recover_scan(d, s, 0, size, b, bytes);
    }
    return 0;
}

/* The checkpoint path when its file is usable, else the full scan (a log line says why). */
static int recover_segments(disk_t *d, const uint64_t *ids, size_t nids, recover_bufs_t *b,
                            uint64_t *bytes)
{
    char path[DISK_PATH_MAX];
    ckplan_t p = {.d = d, .ids = ids, .nids = nids, .why = "no checkpoint"};
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc;

    snprintf(path, sizeof path, "%s/%s", d->dir, CKPT_FILE);
    if (fsutil_read_file(path, &buf, &n) == 0 && ckpt_usable(d, buf, n, &p)) {
        rc = recover_from_ckpt(d, buf, n, &p, b, bytes);
        free(buf);
        free(p.segs);
        if (rc != -EIO) {
            d->rec.path = "checkpoint";
            d->rec.reason = "";
            recover_progress(d, d->nsegs, d->nsegs, *bytes);
            return rc;
        }
        /* undo what was set up, then scan */
        while (d->nsegs > 0) {
            seg_t *s = d->segs[--d->nsegs];
            close(s->fd);
            free(s);
        }
        d->used = 0;
        p.why = "stale: a segment it covers could not be opened";
        *bytes = 0;
        d->rec = (disk_recovery_stats_t){0};
        buf = NULL;
    }
    free(buf);
    free(p.segs);
    d->rec.path = "scan";
    d->rec.reason = p.why;
    if (strcmp(p.why, "no checkpoint") != 0)
        log_warn("disk_checkpoint", "dir=%s reason=\"%s\" action=full_scan", d->dir, p.why);
    for (size_t i = 0; i < nids; i++) {
        uint64_t size;
        int fd;
        seg_t *s;
        if (!recover_open(d, ids[i], &fd, &size))
            continue;
        s = seg_add(d, ids[i], fd, 0);
        if (s == NULL) {
            close(fd);
            return -ENOMEM;
        }
        recover_scan(d, s, 0, size, b, bytes);
        if (i + 1 == nids || uv_hrtime() - d->rec_report >= DISK_PROGRESS_MS * 1000000ull) {
            recover_progress(d, i + 1, nids, *bytes);
            d->rec_report = uv_hrtime();
        }
    }
    return 0;
}

static int recover(disk_t *d)
{
    uint64_t t0 = uv_hrtime(), *ids = NULL, bytes = 0;
    size_t nids = 0, idcap = 0;
    recover_bufs_t b = {0};
    struct dirent *de;
    DIR *dir = opendir(d->dir);
    int rc;

    if (dir == NULL)
        return -errno;
    while ((de = readdir(dir)) != NULL) {
        uint64_t id;
        if (!seg_name(de->d_name, &id))
            continue;
        if (ARRAY_RESERVE(ids, nids, idcap, 64) != 0) {
            closedir(dir);
            free(ids);
            return -ENOMEM;
        }
        ids[nids++] = id;
    }
    closedir(dir);
    if (nids > 0)
        qsort(ids, nids, sizeof *ids, cmp_u64);
    d->next_id = nids > 0 ? ids[nids - 1] + 1 : 1;
    recover_progress(d, 0, nids, 0);
    d->rec_report = uv_hrtime();
    rc = recover_segments(d, ids, nids, &b, &bytes);
    free(ids);
    free(b.buf);
    free(b.raw);
    free(b.scratch);
    if (rc != 0)
        return rc;
    d->rec.ms = (uv_hrtime() - t0) / 1000000;
    log_info("disk_recovery",
             "dir=%s path=%s segments=%" PRIu64 " records=%" PRIu64 " checkpoint_records=%" PRIu64
             " scanned_bytes=%" PRIu64 " records_v1=%" PRIu64 " checksum_drops=%" PRIu64
             " bad_headers=%" PRIu64 " torn_bytes=%" PRIu64 " bad_files=%" PRIu64
             " used_bytes=%" PRIu64 " ms=%" PRIu64,
             d->dir, d->rec.path, d->rec.segments, d->rec.records, d->rec.checkpoint_records,
             d->rec.scanned_bytes, d->rec.records_v1, d->rec.checksum_drops, d->rec.bad_headers,
             d->rec.torn_bytes, d->rec.bad_files, d->used, d->rec.ms);
    return 0;
}

/* Unlinks the reclaimed files right away (start-up and shutdown only). */
static void drops_now(disk_t *d)
{
    char path[DISK_PATH_MAX];

    for (size_t i = 0; i < d->ndrops; i++) {
        seg_path(d->dir, d->drops[i].id, path, sizeof path);
        unlink(path);
        if (d->drops[i].fd >= 0)
            close(d->drops[i].fd);
    }
    d->ndrops = 0;
}

/* --- lifecycle --- */

int disk_open(uv_loop_t *loop, const config_t *cfg, const disk_ops_t *ops, void *arg, disk_t **out)
{
    disk_t *d = calloc(1, sizeof *d);
    char path[DISK_PATH_MAX];
    int rc = -ENOMEM;

    *out = NULL;
    if (d == NULL)
        return -ENOMEM;
    d->loop = loop;
    d->cfg = cfg;
    d->ops = *ops;
    d->arg = arg;
    d->lock_fd = -1;
    snprintf(d->dir, sizeof d->dir, "%s", cfg->disk.dir);
    d->capacity = d->capacity_cfg = cfg->disk.capacity_bytes;
    d->seg_bytes = cfg->disk.segment_bytes;
    d->wb_bytes = cfg->disk.write_buffer_bytes;
    d->next_seq = 1;
    d->mode = cfg->disk.compression;
    d->fsync = cfg->disk.fsync;
    d->direct = cfg->disk.direct_io;
    d->io_budget = cfg->disk.read_io_bytes;
    if (d->io_budget > 0) {
        if (pthread_mutex_init(&d->io_mu, NULL) != 0)
            goto fail;
        pthread_condattr_t ca;
        bool made = false;
        /* the timed waits (read_io_enter) are on the monotonic clock */
        if (pthread_condattr_init(&ca) == 0) {
            made = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
                   pthread_cond_init(&d->io_cv, &ca) == 0;
            pthread_condattr_destroy(&ca);
        }
        if (!made) {
            pthread_mutex_destroy(&d->io_mu);
            goto fail;
        }
        d->io_gate = true;
    }
    for (int i = 0; i < 2; i++) {
        d->wb[i].recs = calloc(DISK_WB_MAX_RECS, sizeof *d->wb[i].recs);
        if (d->wb[i].recs == NULL)
            goto fail;
    }
    /* staging (disk.h): reads and flushes with "auto" (when huge pages can be had, with direct
     * I/O; flushes then by measurement, flush_staged) and "on". Staging memory that cannot be
     * had is not fatal: the tier works without it, as with "off" (logged; status
     * disk.staging_reads/_writes say so). */
    bool stage_auto =
        cfg->disk.staging == CONFIG_STAGING_AUTO && cfg->disk.direct_io && stage_thp_available();
    if (cfg->disk.read_staging_bytes > 0 &&
        (cfg->disk.staging == CONFIG_STAGING_ON || stage_auto)) {
        d->rstage = stage_new(cfg->disk.read_staging_bytes);
        if (d->rstage == NULL)
            log_warn("disk_staging", "what=reads bytes=%" PRIu64 " error=\"%s\" action=unstaged",
                     cfg->disk.read_staging_bytes, strerror(errno));
    }
    if (cfg->disk.staging == CONFIG_STAGING_ON || stage_auto) {
        d->wstage = stage_new(d->wb_bytes);
        d->stage_choose = cfg->disk.staging != CONFIG_STAGING_ON;
        if (d->wstage == NULL)
            log_warn("disk_staging", "what=flushes bytes=%" PRIu64 " error=\"%s\" action=unstaged",
                     d->wb_bytes, strerror(errno));
    }
    d->out = d->wstage != NULL ? stage_base(d->wstage) : block_alloc(d->wb_bytes);
    if (d->out == NULL)
        goto fail;
    d->fill = &d->wb[0];
    rc = fsutil_mkdirs(d->dir, true);
    if (rc != 0)
        goto fail;
    snprintf(path, sizeof path, "%s/lock", d->dir);
    d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (d->lock_fd < 0) {
        rc = -errno;
        goto fail;
    }
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        goto fail;
    }
    *out = d;
    rc = recover(d);
    if (rc != 0)
        goto fail;
    capacity_fit(d);
    if (reclaim_for(d, 0, true) != 0)
        log_warn("disk_over_capacity", "used_bytes=%" PRIu64 " capacity_bytes=%" PRIu64, d->used,
                 d->capacity);
    drops_now(d);
    uv_timer_init(loop, &d->timer);
    uv_idle_init(loop, &d->idle);
    d->timer.data = d->idle.data = d;
    d->open_handles = 2;
    return 0;

fail:
    *out = NULL;
    disk_destroy(&d); /* what was made so far: no handle was started yet */
    return rc;
}

static void handle_closed_cb(uv_handle_t *h)
{
    disk_t *d = h->data;

    if (--d->open_handles == 0 && d->done != NULL)
        d->done(d->done_arg);
}

static void maybe_done(disk_t *d)
{
    if (!d->closing || d->closed || d->flushing != NULL || d->reads_running > 0 || d->fill->n > 0)
        return;
    d->closed = true;
    drops_now(d);
    for (size_t i = 0; i < d->nsegs; i++) {
        seg_t *s = d->segs[i];
        if (s->fd >= 0 && d->fsync != CONFIG_FSYNC_NONE && fsync(s->fd) != 0) {
            d->seal_errors++;
            log_warn("disk_seal_fsync", "segment=%016" PRIx64 " error=\"%s\" at=close", s->id,
                     strerror(errno));
        }
    }
    log_info("disk_closed", "segments=%zu used_bytes=%" PRIu64 " records_written=%" PRIu64,
             d->nsegs, d->used, d->records_written);
    uv_close((uv_handle_t *)&d->timer, handle_closed_cb);
    uv_close((uv_handle_t *)&d->idle, handle_closed_cb);
}

void disk_close(disk_t *d, void (*done)(void *arg), void *arg)
{
    d->closing = true;
    d->done = done;
    d->done_arg = arg;
    uv_timer_stop(&d->timer);
    while (d->qhead != NULL) {
        read_job_t *q = d->qhead;
        d->qhead = q->next;
        d->reads_queued--;
        seg_unref(d, q->seg);
        q->cb(q->arg, -ECANCELED);
        free(q);
    }
    d->qtail = NULL;
    kick(d);
    maybe_done(d);
}

void disk_destroy(disk_t **pd)
{
    disk_t *d = *pd;

    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nsegs; i++) {
        if (d->segs[i]->fd >= 0)
            close(d->segs[i]->fd);
        free(d->segs[i]);
    }
    while (d->dead != NULL) {
        seg_t *s = d->dead;
        d->dead = s->dnext;
        if (s->fd >= 0)
            close(s->fd);
        free(s);
    }
    free(d->segs);
    free(d->drops);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    for (int i = 0; i < 2; i++)
        free(d->wb[i].recs);
    if (d->wstage != NULL)
        stage_destroy(&d->wstage);
    else
        free(d->out);
    stage_destroy(&d->rstage);
    if (d->io_gate) {
        pthread_cond_destroy(&d->io_cv);
        pthread_mutex_destroy(&d->io_mu);
    }
    free(d);
    *pd = NULL;
}

/* --- status --- */

void disk_set_arena_page(disk_t *d, uint64_t page_bytes)
{
    if (d->cfg->disk.staging == CONFIG_STAGING_AUTO && page_bytes > 4096) {
        stage_destroy(&d->rstage); /* DMA straight into the arena's huge pages */
        if (d->wstage != NULL && d->flushing == NULL) {
            /* and out of them: the flush's buffer (headers, lz4) need not be staging memory */
            uint8_t *out = block_alloc(d->wb_bytes);
            if (out != NULL) {
                stage_destroy(&d->wstage);
                d->out = out;
            }
        }
        d->arena_huge = true; /* and no flush is staged (if the buffer could not be swapped) */
    }
}

void disk_stats(const disk_t *d, disk_stats_t *out)
{
    *out = (disk_stats_t){
        .degraded = d->state == DISK_DEGRADED || d->read_fault,
        .direct_io = d->direct,
        .dir = d->dir,
        .compression = d->mode,
        .auto_max_ratio = d->mode == CODEC_MODE_AUTO ? auto_max_ratio(d) : 0.0,
        .capacity_bytes = d->capacity,
        .used_bytes = d->used,
        .segments = d->nsegs,
        .segment_bytes = d->seg_bytes,
        .bytes_written = d->bytes_written,
        .bytes_read = d->bytes_read,
        .raw_bytes_written = d->raw_written,
        .stored_bytes_written = d->stored_written,
        .compression_ratio =
            d->raw_written ? (double)d->stored_written / (double)d->raw_written : 1.0,
        .records_written = d->records_written,
        .records_compressed = d->records_compressed,
        .flushes_raw = d->flushes_raw,
        .records_read = d->records_read,
        .checksum_drops = d->checksum_drops,
        .verify_drops = d->verify_drops,
        .read_errors = d->read_errors,
        .write_errors = d->write_errors,
        .last_error = d->last_error,
        .last_error_op = d->last_error_op,
        .segment_faults = d->segment_faults,
        .reclaimed_segments = d->reclaimed_segments,
        .busy_reclaims = d->busy_reclaims,
        .reclaims_past_leases = d->reclaims_past_leases,
        .reads_in_flight = d->reads_running,
        .reads_queued = d->reads_queued,
        .write_buffer_bytes = (d->fill ? d->fill->used : 0) + (d->flushing ? d->flushing->used : 0),
        .flush_running_ms = d->flushing != NULL ? uv_now(d->loop) - d->flush_started : 0,
        .staging_reads = d->rstage != NULL,
        .staging_writes = flushes_stageable(d),
        .flushes = d->flushes,
        .flushes_staged = d->flushes_staged,
        .staging_bytes = stage_bytes(d->wstage) + stage_bytes(d->rstage),
        .staging_resident_bytes = stage_resident(d->wstage) + stage_resident(d->rstage),
        .reads_staged = d->reads_staged,
        .read_retries = d->read_retries,
        .flush_ns = d->flush_ns,
        .read_ns = d->read_ns,
        .seals = d->seals,
        .seal_errors = d->seal_errors,
        .seal_ns = d->seal_ns,
        .recovery = d->rec,
    };
}

int disk_check(const disk_t *d)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < d->nsegs; i++) {
        sum += round_block(d->segs[i]->size);
        if (i > 0 && d->segs[i - 1]->id >= d->segs[i]->id)
            return -1;
    }
    if (sum + d->reserved != d->used)
        return -1;
    return d->used <= d->capacity ? 0 : -1;
}

void disk_checkpoint_segments(const disk_t *d, ckpt_buf_t *c)
{
    for (size_t i = 0; i < d->nsegs; i++) {
        const seg_t *s = d->segs[i];
        if (s->fd < 0 || s->dead)
            continue;
        /* a partial one by the prefix scanned: a segment of another size is scanned again (a
         * partial one that is not the newest makes the checkpoint stale: a full scan at the next
         * start); one whose version no header told (a read failed at its first) is left out, so
         * that the next start scans it whole rather than take it for this daemon's version and
         * truncate it at its first older record */
        if (s->partial && s->version == 0)
            continue;
        ckpt_put_seg(c, s->id, s->partial ? s->scanned : s->size,
                     s->version != 0 ? s->version : RECORD_VERSION);
    }
}

const char *disk_dir(const disk_t *d)
{
    return d->dir;
}
