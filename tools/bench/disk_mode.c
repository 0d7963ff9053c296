/*
 * disk_mode.c - kvtier-bench --disk-dir: the daemon's disk tier measured beside raw file I/O and
 * lz4 of the same chunks, in one run.
 *
 * Design: the chunks (more than ram.capacity_bytes, read from the status socket) are saved as
 * chains of --chain-chunks (RAM eviction takes chain tails, so one long chain could not demote)
 * through the primary backend, and GB/s is the status delta of disk.raw_bytes_written over the
 * wall time from the first save to the drained write buffer; then the oldest chunks, disk-only by
 * then, are loaded back cold: before each half of the read phase the daemon's segment files
 * (disk.dir/ *.seg) are flushed and dropped from the page cache (fdatasync, then
 * posix_fadvise(DONTNEED); mincore says how much stayed resident), the first half is loaded
 * through the frames path and the second through the primary path (the shared-memory path, on
 * which the daemon promotes a disk-only chunk into the arena and answers with its location),
 * each verified, GB/s = disk.hits delta x chunk size over the load time. With --zero-copy the
 * primary half is two quarters: copying loads, then pins with no copy out (the engine's DMA path,
 * b->zc_no_copy), reloaded untimed by copying loads and verified. With --paced the saves wait
 * between chains until the write buffer holds at most one chain (workload.c, pace_wait), so
 * that every chunk demotes and the read phase reads them all. Beside them in the same
 * run: a raw sequential pwrite+fdatasync / pread of the same bytes in one file under DIR (read
 * from the page cache, after posix_fadvise(DONTNEED), and with O_DIRECT), lookups from a lookup
 * thread while the daemon is idle and while it writes (with the daemon's own ops.lookup p99,
 * cumulative since it started, and, 0.2.14, the p99 of the lookups it served in the phase alone:
 * the difference of ops.lookup.buckets_us at the phase's start and end, snap_window_pct), and
 * shuffle+lz4 and plain lz4 of the same chunks.
 *
 * Threads: main thread (steps, status snapshots, raw baseline, codec, report), the rank threads
 * (STEP_DISK_*), one lookup thread during the idle and the write phase (it owns its client and
 * its latencies until the join). The results live in this file (one run per process).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lz4.h>
#include <math.h>
#include <pthread.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define BENCH_DISK_LOOKUP_GAP_US 1000 /* disk mode: pause between two lookups */
#define BENCH_DISK_LOOKUP_CAP 1000000 /* disk mode: latencies kept while writing */
#define BENCH_DRAIN_POLL_US 5000      /* disk mode: status poll while the buffer drains */
#define BENCH_DRAIN_MAX_MS 300000     /* disk mode: longest wait for the drained buffer */
#define BENCH_STATUS_TIMEOUT_MS 5000
#define BENCH_SAMPLE_US 10000 /* disk mode: the write phase's status samples, this far apart */
#define BENCH_SAMPLE_CAP 65536
#define BENCH_HIST_MAX 512 /* buckets of a status histogram kept (the daemon has 465) */

/* The disk.* counters of status the report takes deltas of. */
typedef enum {
    SN_RAW,
    SN_STORED,
    SN_WRITTEN,
    SN_READ,
    SN_DEMOTED,
    SN_CLEAN,
    SN_REFUSED,
    SN_LOST,
    SN_HITS,
    SN_MISSES,
    SN_PROMOTED,
    SN_EVICTED,
    SN_RECORDS,
    SN_COMPRESSED,
    SN_WERR,
    SN_RERR,
    SN_CSUM,
    SN_WBUF,
    SN_FLUSHES, /* 0.2.13 (0 from an older daemon) */
    SN_STAGED,
    SN_N,
} snap_key_t;

static const char *const snap_keys[SN_N] = {
    [SN_RAW] = "raw_bytes_written",
    [SN_STORED] = "stored_bytes_written",
    [SN_WRITTEN] = "bytes_written",
    [SN_READ] = "bytes_read",
    [SN_DEMOTED] = "demotions",
    [SN_CLEAN] = "demotions_clean",
    [SN_REFUSED] = "demotions_refused",
    [SN_LOST] = "writes_lost",
    [SN_HITS] = "hits",
    [SN_MISSES] = "misses",
    [SN_PROMOTED] = "promotions",
    [SN_EVICTED] = "evictions",
    [SN_RECORDS] = "records_written",
    [SN_COMPRESSED] = "records_compressed",
    [SN_WERR] = "write_errors",
    [SN_RERR] = "read_errors",
    [SN_CSUM] = "checksum_drops",
    [SN_WBUF] = "write_buffer_chunks",
    [SN_FLUSHES] = "flushes",
    [SN_STAGED] = "flushes_staged",
};

/* What one status document says about the disk tier. */
typedef struct {
    uint64_t v[SN_N];
    uint64_t ram_capacity, disk_capacity, segment_bytes;
    double ratio;      /* disk.compression_ratio: cumulative since the daemon started */
    double write_s;    /* disk.write_seconds: the flushes' pwritev + fdatasync time */
    double lookup_p99; /* ops.lookup.p99_us: cumulative since the daemon started */
    /* ops.lookup.buckets_us (0.2.14; nlk 0 from an older daemon): [lo, hi, count] */
    uint64_t lk[BENCH_HIST_MAX][3];
    size_t nlk;
    uint64_t turns, turns_2ms, turns_5ms; /* loop.turns, and those of at most 2 / 5 ms (wall) */
    uint64_t cpu_2ms, cpu_5ms; /* turns of at most 2 / 5 ms of the loop thread's CPU time */
    int has_cpu;               /* the daemon reports loop.turn_cpu_us.buckets (0.2.2) */
    int enabled;
    char state[32], compression[16], last_error[128], dir[PATH_MAX];
} snap_t;

static void copy_str(char *dst, size_t cap, const json_t *v)
{
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static int snap_take(const bench_t *b, snap_t *sn)
{
    json_t *root = NULL;
    if (tool_status_get(b->o.status_sock, BENCH_STATUS_TIMEOUT_MS, &root, NULL))
        return -1;
    const json_t *disk = json_object_get(root, "disk"), *ram = json_object_get(root, "ram");
    if (!json_is_object(disk) || !json_is_object(ram)) {
        tool_error("status %s: no ram and disk objects", b->o.status_sock);
        json_decref(root);
        return -1;
    }
    memset(sn, 0, sizeof *sn);
    for (int k = 0; k < SN_N; k++)
        sn->v[k] = (uint64_t)json_integer_value(json_object_get(disk, snap_keys[k]));
    sn->ram_capacity = (uint64_t)json_integer_value(json_object_get(ram, "capacity_bytes"));
    sn->disk_capacity = (uint64_t)json_integer_value(json_object_get(disk, "capacity_bytes"));
    sn->segment_bytes = (uint64_t)json_integer_value(json_object_get(disk, "segment_bytes"));
    sn->ratio = json_number_value(json_object_get(disk, "compression_ratio"));
    sn->write_s = json_number_value(json_object_get(disk, "write_seconds"));
    sn->lookup_p99 = json_number_value(tool_json_path(root, "ops.lookup.p99_us"));
    const json_t *bk = tool_json_path(root, "ops.lookup.buckets_us");
    for (size_t i = 0; json_is_array(bk) && i < json_array_size(bk) && sn->nlk < BENCH_HIST_MAX;
         i++) {
        const json_t *e = json_array_get(bk, i);
        for (int j = 0; j < 3; j++)
            sn->lk[sn->nlk][j] = (uint64_t)json_integer_value(json_array_get(e, (size_t)j));
        sn->nlk++;
    }
    sn->turns = (uint64_t)json_integer_value(tool_json_path(root, "loop.turns"));
    sn->turns_2ms = (uint64_t)json_integer_value(tool_json_path(root, "loop.turn_us.buckets.2000"));
    sn->turns_5ms = (uint64_t)json_integer_value(tool_json_path(root, "loop.turn_us.buckets.5000"));
    sn->has_cpu = json_is_integer(tool_json_path(root, "loop.turn_cpu_us.buckets.2000"));
    sn->cpu_2ms =
        (uint64_t)json_integer_value(tool_json_path(root, "loop.turn_cpu_us.buckets.2000"));
    sn->cpu_5ms =
        (uint64_t)json_integer_value(tool_json_path(root, "loop.turn_cpu_us.buckets.5000"));
    sn->enabled = json_is_true(json_object_get(disk, "enabled"));
    copy_str(sn->state, sizeof sn->state, json_object_get(disk, "state"));
    copy_str(sn->compression, sizeof sn->compression, json_object_get(disk, "compression"));
    copy_str(sn->last_error, sizeof sn->last_error, json_object_get(disk, "last_error"));
    copy_str(sn->dir, sizeof sn->dir, json_object_get(disk, "dir"));
    json_decref(root);
    return 0;
}

static uint64_t snap_delta(const snap_t *from, const snap_t *to, snap_key_t k)
{
    return to->v[k] >= from->v[k] ? to->v[k] - from->v[k] : 0;
}

/* The p-th percentile (nearest rank, the bucket's upper bound, as the daemon reports its own) of
 * the lookups the daemon served between two snapshots: to's buckets minus from's of the same lower
 * bound. NAN when either daemon had no buckets (older than 0.2.14) or none were served between. */
static double snap_window_pct(const snap_t *from, const snap_t *to, double p)
{
    uint64_t n[BENCH_HIST_MAX], total = 0, seen = 0, rank;
    size_t j = 0;

    if (to->nlk == 0 || (from->nlk == 0 && from->lookup_p99 > 0))
        return NAN;
    for (size_t i = 0; i < to->nlk; i++) {
        while (j < from->nlk && from->lk[j][0] < to->lk[i][0])
            j++;
        uint64_t was = j < from->nlk && from->lk[j][0] == to->lk[i][0] ? from->lk[j][2] : 0;
        n[i] = to->lk[i][2] > was ? to->lk[i][2] - was : 0;
        total += n[i];
    }
    if (total == 0)
        return NAN;
    rank = (uint64_t)ceil(p * (double)total / 100.0);
    rank = rank < 1 ? 1 : rank;
    for (size_t i = 0; i < to->nlk; i++) {
        seen += n[i];
        if (seen >= rank)
            return (double)to->lk[i][1];
    }
    return NAN;
}

static const char *fs_name(const char *dir)
{
    static const struct {
        unsigned long magic;
        const char *name;
    } fs[] = {{0xEF53, "ext2/3/4"},      {0x58465342, "xfs"},
              {0x01021994, "tmpfs"},     {0x9123683E, "btrfs"},
              {0x794c7630, "overlayfs"}, {0x2FC12FC1, "zfs"},
              {0xF2F52010, "f2fs"},      {0x6969, "nfs"}};
    struct statfs st;
    if (statfs(dir, &st) != 0)
        return "unknown";
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if ((unsigned long)st.f_type == fs[i].magic)
            return fs[i].name;
    return "other";
}

/* 1 when both paths are on one filesystem, 0 when not, -1 when either cannot be looked at. */
static int same_fs(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return -1;
    return sa.st_dev == sb.st_dev;
}

/* Refuses a run that could not measure the disk tier; sets how many chunks per rank are loaded
 * back: all but the ones that may still be in RAM (capacity / chunk) and one chain more (the
 * oldest resident chain may be resident only in part: eviction eats chains from their tails). */
static int disk_plan(bench_t *b, const snap_t *sn)
{
    const bench_opts_t *o = &b->o;
    uint64_t total = (uint64_t)o->ranks * o->chunks * o->chunk_bytes;
    uint64_t in_ram = (sn->ram_capacity + o->chunk_bytes - 1) / o->chunk_bytes;
    if (!sn->enabled || strcmp(sn->state, "ok") != 0) {
        tool_error("the daemon's disk tier is %s (status disk.enabled %s, disk.state "
                   "\"%s\"%s%s): --disk-dir measures the disk tier, start kvtierd with "
                   "disk.enabled true and a working disk.dir",
                   sn->enabled ? "not usable" : "off", sn->enabled ? "true" : "false", sn->state,
                   sn->last_error[0] ? ", last_error " : "", sn->last_error);
        return -1;
    }
    if (total <= sn->ram_capacity) {
        tool_error("ranks x chunks x chunk-bytes = %.1f MiB must exceed the daemon's "
                   "ram.capacity_bytes (%.1f MiB) so that chunks demote to disk: raise --chunks",
                   (double)total / (1 << 20), (double)sn->ram_capacity / (1 << 20));
        return -1;
    }
    if (total + 2 * sn->segment_bytes > sn->disk_capacity) {
        tool_error("%.1f MiB of chunks do not fit in disk.capacity_bytes (%.1f MiB) "
                   "less two segments: reclaim would drop the oldest chunks before they are read",
                   (double)total / (1 << 20), (double)sn->disk_capacity / (1 << 20));
        return -1;
    }
    if (o->chunks <= in_ram + b->chain_len) {
        tool_error("--chunks %u leaves no chunk that is surely disk-only after the "
                   "fill (up to %" PRIu64 " may stay in RAM, plus one chain of %u): use more than "
                   "%" PRIu64 "",
                   o->chunks, in_ram, b->chain_len, in_ram + b->chain_len);
        return -1;
    }
    b->disk_load_n = (uint32_t)(o->chunks - in_ram - b->chain_len);
    b->pace_limit = b->chain_len; /* one chain pending keeps the writer busy meanwhile */
    return 0;
}

/* Polls status until the write buffer is empty; *secs is the wait, *sn the last document. */
static int drain(const bench_t *b, double *secs, snap_t *sn)
{
    struct timespec poll = {.tv_nsec = BENCH_DRAIN_POLL_US * 1000};
    uint64_t t0 = now_ns();
    for (;;) {
        if (snap_take(b, sn))
            return -1;
        if (sn->v[SN_WBUF] == 0)
            break;
        if (now_ns() - t0 > BENCH_DRAIN_MAX_MS * 1000000ull) {
            tool_error("the daemon's write buffer still holds %" PRIu64
                       " chunks after %u s (disk.state %s)",
                       sn->v[SN_WBUF], BENCH_DRAIN_MAX_MS / 1000, sn->state);
            return -1;
        }
        nanosleep(&poll, NULL);
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    return 0;
}

typedef struct {
    uint64_t bytes;
    double pwrite_s; /* the pwrite calls alone, before fdatasync (into the page cache) */
    double write_s, cached_s, cold_s;
    double resident; /* share of the file's pages resident after DONTNEED; < 0 unknown */
    double direct_s; /* the O_DIRECT read; < 0 when it could not run (direct_why) */
    char direct_why[96];
    double direct_d_s; /* the O_DIRECT read into distinct buffers; < 0 when it could not run */
    double direct_w_s; /* the O_DIRECT write + one fdatasync; < 0 when it could not run */
    char direct_w_why[96];
    double direct_wd_s; /* the same from distinct buffers; < 0 when it could not run */
} raw_t;

static int io_full(int fd, int write, uint8_t *p, size_t n, off_t off)
{
    while (n) {
        ssize_t k = write ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* Reads the file back chunk by chunk into every rank's dst (timed), then compares with src. */
static int raw_read(const bench_t *b, int fd, double *secs)
{
    size_t chunk = b->o.chunk_bytes, per = chunk * b->o.chunks;
    uint64_t t0 = now_ns();
    for (uint32_t r = 0; r < b->o.ranks; r++)
        for (size_t i = 0; i < b->o.chunks; i++)
            if (io_full(fd, 0, b->ranks[r].dst + i * chunk, chunk, (off_t)(r * per + i * chunk)))
                return -1;
    *secs = (double)(now_ns() - t0) / 1e9;
    for (uint32_t r = 0; r < b->o.ranks; r++) {
        if (memcmp(b->ranks[r].src, b->ranks[r].dst, per) != 0) {
            tool_error("raw baseline: the file read back other bytes");
            errno = EIO;
            return -1;
        }
    }
    return 0;
}

static double resident_share(int fd, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = (len + (size_t)page - 1) / (size_t)page, in = 0;
    unsigned char *vec = malloc(pages);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    double share = -1;
    if (vec && m != MAP_FAILED && mincore(m, len, vec) == 0) {
        for (size_t i = 0; i < pages; i++)
            in += vec[i] & 1;
        share = (double)in / (double)pages;
    }
    if (m != MAP_FAILED)
        munmap(m, len);
    free(vec);
    return share;
}

/* The file read back with O_DIRECT, chunk by chunk, into one aligned buffer (the device's speed,
 * no page cache), each chunk compared with the rank's source outside the timing. */
static int raw_read_direct(const bench_t *b, const char *path, raw_t *out)
{
    size_t chunk = b->o.chunk_bytes, per = chunk * b->o.chunks;
    void *buf = NULL;
    int fd, rc = -1;

    out->direct_s = -1;
    if (chunk % 4096 != 0) {
        snprintf(out->direct_why, sizeof out->direct_why, "chunk bytes not a multiple of 4 KiB");
        return 0;
    }
    fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0 || posix_memalign(&buf, 4096, chunk) != 0) {
        snprintf(out->direct_why, sizeof out->direct_why, "O_DIRECT: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    double secs = 0;
    for (uint32_t r = 0; r < b->o.ranks; r++) {
        for (size_t i = 0; i < b->o.chunks; i++) {
            uint64_t t0 = now_ns();
            if (io_full(fd, 0, buf, chunk, (off_t)(r * per + i * chunk))) {
                snprintf(out->direct_why, sizeof out->direct_why, "O_DIRECT read: %s",
                         strerror(errno));
                rc = 0; /* a filesystem without O_DIRECT: reported, not fatal */
                goto out;
            }
            secs += (double)(now_ns() - t0) / 1e9;
            if (memcmp(buf, b->ranks[r].src + i * chunk, chunk) != 0) {
                tool_error("raw baseline: the O_DIRECT read returned other bytes");
                goto out;
            }
        }
    }
    out->direct_s = secs;
    rc = 0;
    /* Again, each chunk into memory of its own (touched before, outside the timing), as a tier
     * must place what it reads (kvtierd: an arena extent per chunk), beside the one buffer
     * reused above: whether landing in other memory each time costs the device anything here.
     * On the development VM a tight loop of reads into fresh buffers was 20-35 % slower than
     * into one reused buffer, but within one bench run the two differ either way by as much:
     * its virtual disk's speed swings 1.2-2.9 GB/s from one run to the next. */
    out->direct_d_s = -1;
    {
        size_t all = per * b->o.ranks;
        uint8_t *many = NULL;
        if (posix_memalign((void **)&many, 4096, all) == 0) {
            memset(many, 0, all);
            secs = 0;
            for (uint32_t r = 0; r < b->o.ranks && secs >= 0; r++) {
                for (size_t i = 0; i < b->o.chunks; i++) {
                    uint8_t *at = many + r * per + i * chunk;
                    uint64_t t0 = now_ns();
                    if (io_full(fd, 0, at, chunk, (off_t)(r * per + i * chunk))) {
                        secs = -1;
                        break;
                    }
                    secs += (double)(now_ns() - t0) / 1e9;
                    if (memcmp(at, b->ranks[r].src + i * chunk, chunk) != 0) {
                        secs = -1; /* not the device's bytes: no figure */
                        break;
                    }
                }
            }
            out->direct_d_s = secs;
            free(many);
        }
    }
out:
    free(buf);
    close(fd);
    return rc;
}

/* Every rank's chunks written with O_DIRECT into a new file at path, then one fdatasync, the
 * file removed after: from one aligned buffer the chunks are copied into outside the timing
 * (many NULL), or each from its own place in many (every rank's chunks, aligned). Seconds of
 * the calls plus the fdatasync, or < 0 with why (why_len bytes) saying which call failed. */
static double direct_write_file(const bench_t *b, const char *path, const uint8_t *many, char *why,
                                size_t why_len)
{
    size_t chunk = b->o.chunk_bytes, per = chunk * b->o.chunks;
    void *buf = NULL;
    double secs = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);

    if (fd < 0 || (many == NULL && posix_memalign(&buf, 4096, chunk) != 0)) {
        snprintf(why, why_len, "O_DIRECT: %s", strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        return -1;
    }
    for (uint32_t r = 0; r < b->o.ranks && secs >= 0; r++) {
        for (size_t i = 0; i < b->o.chunks; i++) {
            size_t off = r * per + i * chunk;
            const uint8_t *p = many != NULL ? many + off : buf;
            uint64_t t0;
            if (many == NULL)
                memcpy(buf, b->ranks[r].src + i * chunk, chunk);
            t0 = now_ns();
            if (io_full(fd, 1, (uint8_t *)p, chunk, (off_t)off)) {
                snprintf(why, why_len, "O_DIRECT write: %s", strerror(errno));
                secs = -1;
                break;
            }
            secs += (double)(now_ns() - t0) / 1e9;
        }
    }
    if (secs >= 0) {
        uint64_t t0 = now_ns();
        if (fdatasync(fd) == 0) {
            secs += (double)(now_ns() - t0) / 1e9;
        } else {
            snprintf(why, why_len, "fdatasync: %s", strerror(errno));
            secs = -1;
        }
    }
    free(buf);
    close(fd);
    unlink(path);
    return secs;
}

/* The same bytes written with O_DIRECT, chunk by chunk from one aligned buffer (the copy into it
 * is not timed), then one fdatasync: the device's sequential write speed with the durability of
 * the daemon's default (disk.direct_io with disk.fsync "segment": the records are on the device
 * when their write returns and the device's cache is flushed at segment ends; this 1 GiB file
 * fits within one 256 MiB-segment's worth of flushes or four, one flush at its end is the same
 * order). Into a second file of --disk-dir, removed after. */
static int raw_write_direct(const bench_t *b, const char *path, raw_t *out)
{
    size_t all = b->o.chunk_bytes * b->o.chunks * b->o.ranks;
    uint8_t *many = NULL;
    char why[96];

    out->direct_w_s = out->direct_wd_s = -1;
    if (b->o.chunk_bytes % 4096 != 0) {
        snprintf(out->direct_w_why, sizeof out->direct_w_why,
                 "chunk bytes not a multiple of 4 KiB");
        return 0;
    }
    out->direct_w_s = direct_write_file(b, path, NULL, out->direct_w_why, sizeof out->direct_w_why);
    /* Again, each chunk from memory of its own (the sources copied into one aligned area first,
     * outside the timing), as the daemon writes each record from its chunk's arena extent: one
     * reused buffer is the device's best case (the same physical pages every time), distinct
     * buffers are what a tier has to write from. On the development VM the two differ by 0-30 %
     * and by as much from one run to the next (its virtual disk's speed swings 1.2-2.6 GB/s). */
    if (out->direct_w_s > 0 && posix_memalign((void **)&many, 4096, all) == 0) {
        for (uint32_t r = 0; r < b->o.ranks; r++)
            memcpy(many + (size_t)r * b->o.chunk_bytes * b->o.chunks, b->ranks[r].src,
                   b->o.chunk_bytes * b->o.chunks);
        out->direct_wd_s = direct_write_file(b, path, many, why, sizeof why);
        free(many);
    }
    return 0; /* a filesystem without O_DIRECT: reported, not fatal */
}

/* The raw baseline: every rank's chunks written with pwrite into one new file in --disk-dir,
 * fdatasync'ed (timed together), read back from the page cache, dropped with
 * posix_fadvise(DONTNEED) (mincore then says how much stayed resident: a page that did is read
 * from memory) and read back again; the file is removed and dst cleared. */
static int raw_baseline(bench_t *b, raw_t *out)
{
    const bench_opts_t *o = &b->o;
    size_t chunk = o->chunk_bytes, per = chunk * o->chunks;
    char path[sizeof o->disk_dir + 64];
    snprintf(path, sizeof path, "%s/kvtier-bench-%016" PRIx64 ".raw", o->disk_dir, b->seed);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        tool_error("raw baseline %s: %s", path, strerror(errno));
        return -1;
    }
    const char *what = "write";
    int rc = -1;
    out->bytes = (uint64_t)per * o->ranks;
    uint64_t t0 = now_ns();
    for (uint32_t r = 0; r < o->ranks; r++)
        for (size_t i = 0; i < o->chunks; i++)
            if (io_full(fd, 1, b->ranks[r].src + i * chunk, chunk, (off_t)(r * per + i * chunk)))
                goto out;
    out->pwrite_s = (double)(now_ns() - t0) / 1e9;
    what = "fdatasync";
    if (fdatasync(fd) != 0)
        goto out;
    out->write_s = (double)(now_ns() - t0) / 1e9;
    what = "read";
    if (raw_read(b, fd, &out->cached_s))
        goto out;
    what = "posix_fadvise";
    int err = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (err) {
        errno = err;
        goto out;
    }
    out->resident = resident_share(fd, out->bytes);
    what = "read";
    if (raw_read(b, fd, &out->cold_s))
        goto out;
    what = "O_DIRECT read";
    if (raw_read_direct(b, path, out))
        goto out;
    {
        char wpath[sizeof path + 8];
        snprintf(wpath, sizeof wpath, "%s.direct", path);
        raw_write_direct(b, wpath, out);
    }
    rc = 0;
out:
    if (rc)
        tool_error("raw baseline %s %s: %s", what, path, strerror(errno));
    close(fd);
    unlink(path);
    for (uint32_t r = 0; r < o->ranks; r++)
        memset(b->ranks[r].dst, BENCH_FILL_BYTE, per);
    return rc;
}

/* The daemon's segment files dropped from the page cache: what a read after a restart or after
 * long enough finds. */
typedef struct {
    int files;
    uint64_t bytes;
    double resident; /* share of their pages still resident afterwards; < 0 unknown */
} dropped_t;

/* Whether a directory entry is one of the daemon's segment files (<16 hex digits>.seg). */
static int is_segment(const char *name)
{
    size_t n = strlen(name);

    return n >= 5 && strcmp(name + n - 4, ".seg") == 0;
}

/* fdatasync (DONTNEED drops clean pages only) and posix_fadvise(DONTNEED) on every *.seg file of
 * dir. 0, or -1 when dir cannot be read (reported, not fatal). */
static int drop_segments(const char *dir, dropped_t *out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    double resident_pages = 0;

    memset(out, 0, sizeof *out);
    out->resident = -1;
    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        int fd;
        if (!is_segment(e->d_name))
            continue;
        fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && st.st_size > 0) {
            (void)fdatasync(fd);
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            double share = resident_share(fd, (size_t)st.st_size);
            out->files++;
            out->bytes += (uint64_t)st.st_size;
            if (share >= 0)
                resident_pages += share * (double)st.st_size;
        }
        close(fd);
    }
    closedir(d);
    out->resident = out->bytes ? resident_pages / (double)out->bytes : 0;
    return 0;
}

/* The daemon's own segment files read back with O_DIRECT after the read phase, in pieces of
 * chunk bytes into one aligned buffer, oldest file first: the device's speed for these very
 * files, measured right beside the loads. The raw baseline file above is read right after it was
 * written, which a virtualised disk's host may still hold in its cache (on the development VM it
 * read 1.1-2.6 GB/s while these files, read the same way a moment after the loads, gave
 * 0.8-1.5). After the loads, not before, so that any cache this warms can only favour the raw
 * figure. *secs < 0 when it could not run (no O_DIRECT, no files).
 *
 * huge (0.2.4): the buffer is in transparent huge pages (2 MiB aligned, MADV_HUGEPAGE, a second
 * pass right after the first): the device's best here, since a request costs more the more
 * physically discontiguous pieces its memory has (512 for 2 MiB of 4 KiB pages, one in a huge
 * page; daemon/stage.h). kvtierd stages its reads through such memory (disk.staging), so this
 * is the baseline its restores are held to; the 4 KiB one above stays for comparison.
 *
 * SEG_HUGE_COPY (0.2.8): the same, and each piece then copied into a buffer of 4 KiB pages (as the
 * arena's, on /dev/shm), timed together: the device plus the one copy any consumer of a staged
 * read pays. On a virtual disk the "device" is the host copying from its cache into the guest, so
 * a copy in the guest competes with it for memory bandwidth (0.2.8 README, "Reads one at a
 * time": 2.09 against 2.99 GB/s); a kvtier restore through staging pays such a copy and the
 * client's, so this is what it can be held to on such a machine, shown beside the device's best,
 * which stays the figure the restores are compared with first. */
#define SEG_HUGE (2u << 20)

typedef enum { SEG_SMALL, SEG_HUGE_PAGE, SEG_HUGE_COPY, SEG_MODES } seg_mode_t;

/* One read of the segment files: seconds (< 0: not measured) and bytes. */
typedef struct {
    double s;
    uint64_t bytes;
} seg_read_t;

/* Per mode: its JSON key under disk.raw, its ratio's key under read and read_shm, its row and
 * the row's note, and its part of the ratio line. */
static const struct {
    const char *key, *ratio, *row, *note, *line;
} seg_modes[SEG_MODES] = {
    {"read_direct_segments", "ratio_vs_segments_direct", "raw pread O_DIRECT, segments",
     "the daemon's segment files, after the loads", "read vs the segment files' O_DIRECT read"},
    {"read_direct_segments_huge", "ratio_vs_segments_direct_huge",
     "raw pread O_DIRECT, segments huge", "the same into a 2 MiB huge page: the device's best",
     "into huge pages"},
    {"read_direct_segments_huge_copy", "ratio_vs_segments_direct_huge_copy",
     "raw pread O_DIRECT, huge + copy", "and each piece copied into 4 KiB pages, timed with it",
     "huge + copy"},
};

static int seg_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void raw_read_segments(const bench_t *b, const char *dir, seg_mode_t mode, seg_read_t *out)
{
    int huge = mode != SEG_SMALL;
    double *secs = &out->s;
    uint64_t *bytes = &out->bytes;
    size_t chunk = b->o.chunk_bytes, n = 0, cap = 0;
    size_t map_len = (chunk + SEG_HUGE - 1) / SEG_HUGE * SEG_HUGE + SEG_HUGE;
    char **names = NULL;
    void *buf = NULL, *map = MAP_FAILED, *copy = NULL;
    DIR *d = opendir(dir);
    struct dirent *e;
    double t = 0;

    *secs = -1;
    *bytes = 0;
    if (huge && d != NULL && chunk % 4096 == 0) {
        map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map != MAP_FAILED) {
            buf = (void *)(((uintptr_t)map + SEG_HUGE - 1) & ~(uintptr_t)(SEG_HUGE - 1));
            (void)madvise(buf, map_len - SEG_HUGE, MADV_HUGEPAGE);
            memset(buf, 0, chunk);
        }
    }
    if (mode == SEG_HUGE_COPY && buf != NULL && posix_memalign(&copy, 4096, chunk) == 0)
        memset(copy, 0, chunk); /* resident before the timing, as the arena is (ram.prefault) */
    if (d == NULL || chunk % 4096 != 0 ||
        (huge ? buf == NULL || (mode == SEG_HUGE_COPY && copy == NULL)
              : posix_memalign(&buf, 4096, chunk) != 0)) {
        if (map != MAP_FAILED)
            munmap(map, map_len);
        if (d != NULL)
            closedir(d);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (!is_segment(e->d_name))
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            if (nn == NULL)
                break;
            names = nn;
        }
        if ((names[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    qsort(names, n, sizeof *names, seg_name_cmp);
    for (size_t i = 0; i < n; i++) {
        int fd = openat(dirfd(d), names[i], O_RDONLY | O_DIRECT | O_CLOEXEC);
        for (off_t off = 0; fd >= 0;) {
            uint64_t t0 = now_ns();
            ssize_t k = pread(fd, buf, chunk, off);
            if (k <= 0)
                break;
            if (copy != NULL)
                memcpy(copy, buf, (size_t)k);
            t += (double)(now_ns() - t0) / 1e9;
            *bytes += (uint64_t)k;
            off += k;
        }
        if (fd >= 0)
            close(fd);
        free(names[i]);
    }
    free(names);
    if (map != MAP_FAILED)
        munmap(map, map_len);
    else
        free(buf);
    free(copy);
    closedir(d);
    if (*bytes > 0)
        *secs = t;
}

/* A lookup thread: the lookups of the lookup workload, BENCH_DISK_LOOKUP_GAP_US apart, either
 * `count` of them or until `stop`. It owns its client; main reads the rest after the join. */
typedef struct {
    const bench_t *b;
    kvt_client_t *c;
    pthread_t thread;
    series_t lat;
    size_t cap;
    uint32_t count; /* lookups to do; 0: until stop */
    atomic_int stop;
    uint64_t short_hits, skipped;
    int rc; /* a failed lookup's code */
} lookuper_t;

static void *lookuper_main(void *arg)
{
    lookuper_t *l = arg;
    const bench_t *b = l->b;
    uint32_t world = b->o.world;
    uint32_t rank_hits[world];
    uint32_t expect = b->o.prompt_chunks; /* every rank of the world holds them (fill) */
    kvt_lookup_opts_t lo = {.all_ranks = b->o.all_ranks};
    struct timespec gap = {.tv_nsec = BENCH_DISK_LOOKUP_GAP_US * 1000};
    for (uint32_t i = 0; l->lat.n < l->cap && (l->count ? i < l->count : !atomic_load(&l->stop));
         i++) {
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = world};
        uint64_t t0 = now_ns();
        int rc = kvt_lookup(l->c, b->lookup_hashes, b->o.prompt_chunks, &lo, &res);
        uint64_t t1 = now_ns();
        if (rc) {
            l->rc = rc;
            break;
        }
        l->lat.v[l->lat.n++] = t1 - t0;
        l->short_hits += res.hit < expect;
        l->skipped += res.skipped != 0;
        nanosleep(&gap, NULL);
    }
    return NULL;
}

static int lookuper_start(const bench_t *b, lookuper_t *l, uint32_t count, size_t cap)
{
    kvt_connect_opts_t co = {.timeout_ms = BENCH_TIMEOUT_MS, .data_path = KVT_DATA_PATH_FRAMES};
    *l = (lookuper_t){.b = b, .count = count, .cap = cap};
    l->lat.v = calloc(cap, sizeof(uint64_t));
    if (!l->lat.v) {
        tool_error("out of memory");
        return -1;
    }
    int rc = kvt_connect(b->o.endpoint, &b->lookup_ns, 0, &co, &l->c);
    if (rc) {
        tool_error("connect %s: %s", b->o.endpoint, kvt_strerror(rc));
        goto fail_connect;
    }
    if (pthread_create(&l->thread, NULL, lookuper_main, l) != 0) {
        tool_error("cannot start the lookup thread");
        goto fail_thread;
    }
    return 0;
fail_thread:
    kvt_close(&l->c);
fail_connect:
    free(l->lat.v);
    l->lat.v = NULL;
    return -1;
}

/* Stops and joins the lookup thread; *p gets its latencies. */
typedef struct {
    pct_t lat;
    uint64_t short_hits, skipped;
} lookups_t;

static int lookuper_finish(lookuper_t *l, lookups_t *out)
{
    atomic_store(&l->stop, 1);
    pthread_join(l->thread, NULL);
    int rc = 0;
    if (l->rc) {
        tool_error("lookup: %s: %s", kvt_strerror(l->rc), kvt_last_error(l->c));
        rc = -1;
    }
    out->lat = percentiles(l->lat.v, l->lat.n);
    out->short_hits = l->short_hits;
    out->skipped = l->skipped;
    kvt_close(&l->c);
    free(l->lat.v);
    l->lat.v = NULL;
    return rc;
}

/*
 * The write phase sampled: a thread reads status every BENCH_SAMPLE_US from before the first
 * save until the write buffer is drained, keeping disk.raw_bytes_written, demotions_refused and
 * write_seconds with the time. From them, the disk writer's speed while demotions are being
 * refused (issue 11: "the disk writer runs at >= 0.8x the raw write bandwidth whenever
 * demotions are being dropped"): the window runs from the last sample before the first refusal
 * to the first sample that counts the last one, so it is at most two intervals longer than the
 * refusing itself and the speed in it errs low. A status request costs the loop about 0.1 ms,
 * about 1 % of the write phase's loop time at this interval.
 */
typedef struct {
    uint64_t t_ns, raw, refused;
    double write_s;
} wsample_t;

typedef struct {
    const bench_t *b;
    pthread_t thread;
    atomic_int stop;
    wsample_t *v;
    size_t n;
    int rc; /* a failed status read */
} sampler_t;

/* The window of refusals and what the writer did in it; refused == 0: none was refused. */
typedef struct {
    uint64_t refused, bytes;
    double secs, busy; /* busy: write_seconds' share of the window (a flush counts when it
                        * commits: the share can pass 1 by one flush) */
    size_t samples;
} refusing_t;

static int sample_take(const bench_t *b, wsample_t *w)
{
    snap_t sn;
    if (snap_take(b, &sn))
        return -1;
    *w = (wsample_t){
        .t_ns = now_ns(), .raw = sn.v[SN_RAW], .refused = sn.v[SN_REFUSED], .write_s = sn.write_s};
    return 0;
}

static void *sampler_main(void *arg)
{
    sampler_t *sp = arg;
    struct timespec gap = {.tv_nsec = BENCH_SAMPLE_US * 1000};
    while (sp->n < BENCH_SAMPLE_CAP && !atomic_load(&sp->stop)) {
        if (sample_take(sp->b, &sp->v[sp->n])) {
            sp->rc = -1;
            break;
        }
        sp->n++;
        nanosleep(&gap, NULL);
    }
    return NULL;
}

/* Starts the sampler with its first sample taken (the baseline of the window). */
static int sampler_start(const bench_t *b, sampler_t *sp)
{
    *sp = (sampler_t){.b = b};
    sp->v = calloc(BENCH_SAMPLE_CAP, sizeof *sp->v);
    if (sp->v == NULL || sample_take(b, &sp->v[0])) {
        free(sp->v);
        sp->v = NULL;
        return -1;
    }
    sp->n = 1;
    if (pthread_create(&sp->thread, NULL, sampler_main, sp) != 0) {
        tool_error("cannot start the status sampler");
        free(sp->v);
        sp->v = NULL;
        return -1;
    }
    return 0;
}

/* Stops the sampler, takes a last sample (the drained buffer) and computes the window. */
static int sampler_finish(sampler_t *sp, refusing_t *out)
{
    size_t a = 0, z;
    atomic_store(&sp->stop, 1);
    pthread_join(sp->thread, NULL);
    *out = (refusing_t){0};
    if (sp->rc == 0 && sp->n < BENCH_SAMPLE_CAP && sample_take(sp->b, &sp->v[sp->n]) == 0)
        sp->n++;
    z = sp->n - 1;
    if (sp->v[z].refused > sp->v[0].refused) {
        while (a + 1 < sp->n && sp->v[a + 1].refused == sp->v[0].refused)
            a++;
        while (z > a + 1 && sp->v[z - 1].refused == sp->v[sp->n - 1].refused)
            z--;
        out->refused = sp->v[z].refused - sp->v[a].refused;
        out->bytes = sp->v[z].raw - sp->v[a].raw;
        out->secs = (double)(sp->v[z].t_ns - sp->v[a].t_ns) / 1e9;
        out->busy = out->secs > 0 ? (sp->v[z].write_s - sp->v[a].write_s) / out->secs : 0;
        out->samples = z - a + 1;
    }
    free(sp->v);
    sp->v = NULL;
    return sp->rc;
}

/* 2-byte byte-shuffle: the low bytes of every element, then the high bytes. */
static void shuffle2(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t h = n / 2;
    for (size_t i = 0; i < h; i++) {
        dst[i] = src[2 * i];
        dst[h + i] = src[2 * i + 1];
    }
    if (n % 2)
        dst[n - 1] = src[n - 1];
}

static void unshuffle2(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t h = n / 2;
    for (size_t i = 0; i < h; i++) {
        dst[2 * i] = src[i];
        dst[2 * i + 1] = src[h + i];
    }
    if (n % 2)
        dst[n - 1] = src[n - 1];
}

typedef struct {
    uint64_t raw, stored;
    double enc_s, dec_s;
} comp_t;

/* lz4 (default acceleration, one block per chunk like the daemon's records) of every chunk of
 * every rank, after shuffle2 when shuffle is set; each chunk decoded back and compared. */
static int measure_codec(const bench_t *b, int shuffle, comp_t *out)
{
    size_t chunk = b->o.chunk_bytes;
    int bound = LZ4_compressBound((int)chunk);
    uint8_t *tmp = malloc(chunk), *enc = bound > 0 ? malloc((size_t)bound) : NULL;
    uint8_t *dec = malloc(chunk);
    int rc = -1;
    if (!tmp || !enc || !dec)
        goto out;
    for (uint32_t r = 0; r < b->o.ranks; r++) {
        for (size_t i = 0; i < b->o.chunks; i++) {
            const uint8_t *src = b->ranks[r].src + i * chunk, *in = src;
            uint64_t t0 = now_ns();
            if (shuffle) {
                shuffle2(tmp, src, chunk);
                in = tmp;
            }
            int c = LZ4_compress_default((const char *)in, (char *)enc, (int)chunk, bound);
            uint64_t t1 = now_ns();
            if (c <= 0)
                goto out;
            int d = LZ4_decompress_safe((const char *)enc, (char *)(shuffle ? tmp : dec), c,
                                        (int)chunk);
            if (shuffle && d == (int)chunk)
                unshuffle2(dec, tmp, chunk);
            uint64_t t2 = now_ns();
            if (d != (int)chunk || memcmp(dec, src, chunk) != 0)
                goto out;
            out->raw += chunk;
            out->stored += (uint64_t)c;
            out->enc_s += (double)(t1 - t0) / 1e9;
            out->dec_s += (double)(t2 - t1) / 1e9;
        }
    }
    rc = 0;
out:
    if (rc)
        tool_error("%s: the round trip failed", shuffle ? "shuffle+lz4" : "lz4");
    free(tmp);
    free(enc);
    free(dec);
    return rc;
}

typedef struct {
    snap_t s0, s1, s2, s3; /* before the saves, drained, before and after the frames loads */
    snap_t si;             /* before the idle lookups (their window ends at s0) */
    snap_t s4, s5;         /* before and after the loads through the primary path */
    snap_t s6, s7;         /* before and after the pinned quarter (--zero-copy) */
    raw_t raw;
    double save_s, drain_s, load_s, load_shm_s, load_zc_s;
    counts_t n;     /* save outcomes and verified loads (frames half) of every rank */
    counts_t n_shm; /* verified loads of the primary path's half */
    counts_t n_zc;  /* verified reloads of the pinned quarter */
    pct_t save, load, load_shm, load_zc; /* per call */
    uint64_t pace_waits;                 /* --paced: status polls that found the writer behind */
    long pid;                            /* the daemon's (status "pid"; <= 0: unknown) */
    double cpu[4]; /* daemon CPU seconds (/proc, 10 ms ticks) of the write phase and the three
                      read parts (DCPU_*); < 0: unknown */
    lookups_t idle, busy;
    refusing_t refusing; /* the write phase while demotions were refused */
    comp_t shuf, lz4;
    dropped_t drop, drop_shm, drop_zc; /* the segments dropped before each part */
    seg_read_t seg[SEG_MODES];         /* the raw O_DIRECT reads of the segment files (seg_modes) */
    int shm_half;                      /* the second half went through the shared-memory path */
    uint32_t half;                     /* chunks per rank in the frames half */
    uint32_t shm_n;                    /* chunks per rank the copying shared-memory loads read */
    uint32_t zc_n;                     /* chunks per rank the pins read (--zero-copy; else 0) */
    uint64_t zc_pinned;                /* chunks the pins found (all ranks), before the reload */
    const char *fs;
    int same_fs;
} disk_res_t;

static disk_res_t dres; /* the run's results: large (four status snapshots), one run per process */

enum { DCPU_WRITE, DCPU_FRAMES, DCPU_SHM, DCPU_ZC };

/* The daemon's CPU seconds since *mark into d->cpu[k] (added), and *mark moved on. */
static void cpu_mark(disk_res_t *d, int k, double *mark)
{
    double now = daemon_cpu_s(d->pid);
    if (now < 0 || *mark < 0 || d->cpu[k] < 0)
        d->cpu[k] = -1;
    else
        d->cpu[k] += now - *mark;
    *mark = now;
}

/* One timed part of the read phase: chunks [from, from + count) of every rank through backend
 * bk, cold (the segments dropped first, into *drop), between status snapshots *before and
 * *after, its wall time in *secs and the daemon's CPU time in d->cpu[cpu_k]. 0 or -1. */
static int read_part(bench_t *b, disk_res_t *d, bk_t bk, uint32_t from, uint32_t count,
                     dropped_t *drop, snap_t *before, snap_t *after, double *secs, int cpu_k)
{
    double mark;

    b->cur = bk;
    b->disk_load_from = from;
    b->disk_load_count = count;
    drop_segments(d->s1.dir, drop);
    if (snap_take(b, before))
        return -1;
    mark = daemon_cpu_s(d->pid);
    if (run_step(b, STEP_DISK_LOAD, 0, secs))
        return -1;
    cpu_mark(d, cpu_k, &mark);
    return snap_take(b, after);
}

/* The disk-mode steps; returns an exit status. The lookups alone come first (the daemon idle),
 * then the raw baseline, then the saves with the lookup thread running until the write buffer
 * is drained, then the loads of the oldest chunks, then the codec figures. */
int bench_disk_steps(bench_t *b)
{
    const bench_opts_t *o = &b->o;
    disk_res_t *d = &dres;
    lookuper_t l;
    if (snap_take(b, &d->s0))
        return EXIT_FAIL;
    if (disk_plan(b, &d->s0))
        return EXIT_USAGE;
    if (run_step(b, STEP_SETUP, 0, NULL))
        return EXIT_FAIL;
    if (check_limits(b))
        return EXIT_USAGE;
    resolve_backends(b);
    d->fs = fs_name(o->disk_dir);
    d->same_fs = same_fs(o->disk_dir, d->s0.dir);
    if (run_step(b, STEP_FILL_LOOKUP, 0, NULL) || run_step(b, STEP_LOOKUP_WARM, 0, NULL) ||
        snap_take(b, &d->si))
        return EXIT_FAIL;
    if (lookuper_start(b, &l, o->lookups, o->lookups) || lookuper_finish(&l, &d->idle))
        return EXIT_FAIL;
    if (raw_baseline(b, &d->raw) || snap_take(b, &d->s0))
        return EXIT_FAIL;
    d->pid = daemon_pid(b);
    double mark = daemon_cpu_s(d->pid);
    if (lookuper_start(b, &l, 0, BENCH_DISK_LOOKUP_CAP))
        return EXIT_FAIL;
    sampler_t sp;
    if (sampler_start(b, &sp)) {
        lookuper_finish(&l, &d->busy);
        return EXIT_FAIL;
    }
    int rc = run_step(b, STEP_DISK_SAVE, 0, &d->save_s) ? EXIT_FAIL : EXIT_OK;
    if (rc == EXIT_OK && drain(b, &d->drain_s, &d->s1))
        rc = EXIT_FAIL;
    cpu_mark(d, DCPU_WRITE, &mark);
    if (sampler_finish(&sp, &d->refusing))
        rc = EXIT_FAIL;
    if (lookuper_finish(&l, &d->busy) || rc)
        return EXIT_FAIL;
    /* the read phase, cold: frames for the first half, the primary path for the second */
    d->shm_half = b->primary == BK_SHM;
    d->half = d->shm_half ? b->disk_load_n / 2 / b->chain_len * b->chain_len : b->disk_load_n;
    if (read_part(b, d, BK_FRAMES, 0, d->half, &d->drop, &d->s2, &d->s3, &d->load_s, DCPU_FRAMES) ||
        run_step(b, STEP_DISK_VERIFY, 0, NULL))
        return EXIT_FAIL;
    d->s4 = d->s5 = d->s6 = d->s7 = d->s3;
    if (d->shm_half) {
        uint32_t rest = b->disk_load_n - d->half;
        /* split on a chain boundary: a chain across the two would have its pinned part read
         * ahead (into RAM) during the copying quarter; the pins take the partial tail */
        uint32_t chains = rest / b->chain_len;
        d->shm_n = b->bk_state[BK_ZC] == BK_ON && chains >= 2 ? (chains - chains / 2) * b->chain_len
                                                              : rest;
        d->zc_n = rest - d->shm_n;
        if (read_part(b, d, b->primary, d->half, d->shm_n, &d->drop_shm, &d->s4, &d->s5,
                      &d->load_shm_s, DCPU_SHM) ||
            run_step(b, STEP_DISK_VERIFY, 0, NULL))
            return EXIT_FAIL;
        d->s6 = d->s7 = d->s5;
    }
    if (d->zc_n > 0) { /* pins, no copy out; then reloaded by copying loads and verified */
        b->zc_no_copy = 1;
        rc = read_part(b, d, BK_ZC, d->half + d->shm_n, d->zc_n, &d->drop_zc, &d->s6, &d->s7,
                       &d->load_zc_s, DCPU_ZC);
        b->zc_no_copy = 0;
        for (uint32_t i = 0; i < b->o.ranks; i++) /* what the pins found, before the reload */
            for (uint32_t k = 0; k < d->zc_n; k++)
                d->zc_pinned += b->ranks[i].lens[b->disk_load_from + k] > 0;
        b->disk_reload = 1;
        rc = rc || run_step(b, STEP_DISK_LOAD, 0, NULL);
        b->disk_reload = 0;
        if (rc || run_step(b, STEP_DISK_VERIFY, 0, NULL))
            return EXIT_FAIL;
    }
    for (seg_mode_t m = 0; m < SEG_MODES; m++)
        raw_read_segments(b, d->s1.dir, m, &d->seg[m]);
    if (measure_codec(b, 1, &d->shuf) || measure_codec(b, 0, &d->lz4))
        return EXIT_FAIL;
    return EXIT_OK;
}

/* Daemon CPU seconds per GB (10^9 bytes) moved; NAN when unknown or nothing moved. */
static double cpu_per_gb(double cpu_s, uint64_t bytes)
{
    return cpu_s < 0 || bytes == 0 ? NAN : cpu_s / ((double)bytes / 1e9);
}

/* Figures the table and the JSON share. */
typedef struct {
    uint64_t raw_w, stored_w, written, hits, misses, load_bytes;
    uint64_t hits_shm, misses_shm, load_bytes_shm;
    double write_s, w_raw, w_stored, w_written, w_client, r_disk, r_client, r_disk_shm;
    double r_client_shm;
    uint64_t hits_zc, misses_zc, load_bytes_zc;
    double r_disk_zc; /* the pinned quarter: disk.hits x chunk over its time; NAN: not measured */
    double cpu_gb[4]; /* daemon CPU s per GB: raw bytes written, then disk.hits x chunk (DCPU_*) */
    double raw_w_gbps, raw_pw_gbps, raw_cached_gbps, raw_cold_gbps, raw_direct_gbps;
    double raw_direct_w_gbps, raw_direct_d_gbps, ratio_run;
    double raw_direct_wd_gbps; /* the O_DIRECT write from distinct buffers */
    double w_calls;            /* raw bytes over the flushes' write_seconds */
    double w_refusing;         /* raw bytes over the window of refusals; NAN: none refused */
} disk_fig_t;

static void disk_figures(const bench_t *b, const disk_res_t *d, disk_fig_t *f)
{
    f->raw_w = snap_delta(&d->s0, &d->s1, SN_RAW);
    f->stored_w = snap_delta(&d->s0, &d->s1, SN_STORED);
    f->written = snap_delta(&d->s0, &d->s1, SN_WRITTEN);
    f->hits = snap_delta(&d->s2, &d->s3, SN_HITS);
    f->misses = snap_delta(&d->s2, &d->s3, SN_MISSES);
    f->load_bytes = f->hits * b->o.chunk_bytes;
    f->write_s = d->save_s + d->drain_s;
    f->w_raw = gbps(f->raw_w, f->write_s);
    f->w_stored = gbps(f->stored_w, f->write_s);
    f->w_written = gbps(f->written, f->write_s);
    f->w_client = gbps(d->n.stored_bytes, d->save_s);
    f->r_disk = gbps(f->load_bytes, d->load_s);
    f->r_client = gbps(d->n.loaded_bytes, d->load_s);
    f->raw_w_gbps = gbps(d->raw.bytes, d->raw.write_s);
    f->raw_pw_gbps = gbps(d->raw.bytes, d->raw.pwrite_s);
    f->raw_cached_gbps = gbps(d->raw.bytes, d->raw.cached_s);
    f->raw_cold_gbps = gbps(d->raw.bytes, d->raw.cold_s);
    f->raw_direct_gbps = d->raw.direct_s > 0 ? gbps(d->raw.bytes, d->raw.direct_s) : NAN;
    f->raw_direct_w_gbps = d->raw.direct_w_s > 0 ? gbps(d->raw.bytes, d->raw.direct_w_s) : NAN;
    f->raw_direct_d_gbps = d->raw.direct_d_s > 0 ? gbps(d->raw.bytes, d->raw.direct_d_s) : NAN;
    f->raw_direct_wd_gbps = d->raw.direct_wd_s > 0 ? gbps(d->raw.bytes, d->raw.direct_wd_s) : NAN;
    f->w_calls =
        d->s1.write_s > d->s0.write_s ? gbps(f->raw_w, d->s1.write_s - d->s0.write_s) : NAN;
    f->w_refusing = d->refusing.refused > 0 && d->refusing.secs > 0
                        ? gbps(d->refusing.bytes, d->refusing.secs)
                        : NAN;
    f->ratio_run = f->raw_w ? (double)f->stored_w / (double)f->raw_w : NAN;
    f->hits_shm = snap_delta(&d->s4, &d->s5, SN_HITS);
    f->misses_shm = snap_delta(&d->s4, &d->s5, SN_MISSES);
    f->load_bytes_shm = f->hits_shm * b->o.chunk_bytes;
    f->r_disk_shm = d->shm_half ? gbps(f->load_bytes_shm, d->load_shm_s) : NAN;
    f->r_client_shm = d->shm_half ? gbps(d->n_shm.loaded_bytes, d->load_shm_s) : NAN;
    f->hits_zc = snap_delta(&d->s6, &d->s7, SN_HITS);
    f->misses_zc = snap_delta(&d->s6, &d->s7, SN_MISSES);
    f->load_bytes_zc = f->hits_zc * b->o.chunk_bytes;
    f->r_disk_zc = d->zc_n > 0 ? gbps(f->load_bytes_zc, d->load_zc_s) : NAN;
    f->cpu_gb[DCPU_WRITE] = cpu_per_gb(d->cpu[DCPU_WRITE], f->raw_w);
    f->cpu_gb[DCPU_FRAMES] = cpu_per_gb(d->cpu[DCPU_FRAMES], f->load_bytes);
    f->cpu_gb[DCPU_SHM] = d->shm_half ? cpu_per_gb(d->cpu[DCPU_SHM], f->load_bytes_shm) : NAN;
    f->cpu_gb[DCPU_ZC] = d->zc_n > 0 ? cpu_per_gb(d->cpu[DCPU_ZC], f->load_bytes_zc) : NAN;
}

static void disk_warnings(const bench_t *b, const disk_res_t *d, warnings_t *w)
{
    const counts_t *n = &d->n;
    uint64_t refused = snap_delta(&d->s0, &d->s1, SN_REFUSED);
    uint64_t asked = (uint64_t)b->o.ranks * d->half;
    uint64_t asked_shm = (uint64_t)b->o.ranks * d->shm_n;
    uint64_t asked_zc = (uint64_t)b->o.ranks * d->zc_n;
    if (b->o.zero_copy && d->zc_n == 0)
        warn_add(w, "--zero-copy: no pinned restore was measured (%s)",
                 !d->shm_half ? "the shared-memory path is not available"
                              : "the shared-memory part of the read phase is shorter than two "
                                "chains: raise --chunks");
    if (d->zc_n > 0 && (d->zc_pinned < asked_zc || d->n_zc.hits < asked_zc))
        warn_add(w,
                 "pinned restore: the pins found %" PRIu64 " and the reload %" PRIu64
                 " of the %" PRIu64 " chunks of its quarter (chunks whose demotion was "
                 "refused are gone)",
                 d->zc_pinned, d->n_zc.hits, asked_zc);
    if (d->shm_half && d->n_shm.hits < asked_shm)
        warn_add(w,
                 "shared-memory path: %" PRIu64 " of the %" PRIu64
                 " oldest chunks of its part were "
                 "not loaded back (chunks whose demotion was refused are gone; a daemon older "
                 "than protocol 2 also misses disk-only chunks on this path)",
                 asked_shm - d->n_shm.hits, asked_shm);
    if (d->drop.resident < 0)
        warn_add(w,
                 "cannot read the daemon's disk.dir %s: its segments were not dropped from the "
                 "page cache before the read phase",
                 d->s1.dir);
    if (refused)
        warn_add(w,
                 "%" PRIu64 " demotions were refused during the write phase (disk.demotions_"
                 "refused): the disk tier dropped those chunks under backpressure",
                 refused);
    if (n->nospace || n->declined || n->exists)
        warn_add(w,
                 "saves: %" PRIu64 " nospace, %" PRIu64 " declined, %" PRIu64
                 " exists: not every chunk reached the daemon",
                 n->nospace, n->declined, n->exists);
    if (n->hits < asked)
        warn_add(w,
                 "%" PRIu64 " of the %" PRIu64 " oldest chunks were not loaded back (%" PRIu64
                 " of them had been stored)",
                 asked - n->hits, asked, n->lost);
    if (snap_delta(&d->s0, &d->s7, SN_WERR) || snap_delta(&d->s0, &d->s7, SN_RERR) ||
        snap_delta(&d->s0, &d->s7, SN_CSUM))
        warn_add(w, "the disk tier counted write errors, read errors or checksum drops");
    if (d->same_fs == 0)
        warn_add(w, "--disk-dir %s is not on the filesystem of the daemon's disk.dir %s",
                 b->o.disk_dir, d->s0.dir);
    if (d->idle.short_hits || d->busy.short_hits)
        warn_add(w, "%" PRIu64 " lookups hit fewer than the expected chunks",
                 d->idle.short_hits + d->busy.short_hits);
    if (d->idle.skipped || d->busy.skipped)
        warn_add(w, "%" PRIu64 " lookups were skipped by the lookup-skip gate",
                 d->idle.skipped + d->busy.skipped);
}

static json_t *gbps_json(double gbps_v, uint64_t bytes, double secs)
{
    return json_pack("{s:f,s:I,s:f}", "gbps", gbps_v, "bytes", (json_int_t)bytes, "seconds", secs);
}

static json_t *comp_json(const comp_t *c)
{
    return json_pack("{s:f,s:f,s:f,s:I,s:I}", "ratio", ratio((double)c->stored, (double)c->raw),
                     "compress_mbps", ratio((double)c->raw / 1e6, c->enc_s), "decompress_mbps",
                     ratio((double)c->raw / 1e6, c->dec_s), "raw_bytes", (json_int_t)c->raw,
                     "stored_bytes", (json_int_t)c->stored);
}

static json_t *lookups_json(const lookups_t *l)
{
    json_t *o = pct_json(&l->lat);
    if (o) {
        json_object_set_new(o, "short_hits", json_integer((json_int_t)l->short_hits));
        json_object_set_new(o, "skipped", json_integer((json_int_t)l->skipped));
    }
    return o;
}

static json_t *dropped_json(const dropped_t *x)
{
    return json_pack("{s:i,s:I,s:o}", "files", x->files, "bytes", (json_int_t)x->bytes,
                     "resident_after", x->resident < 0 ? json_null() : json_real(x->resident));
}

/* What the issue-11 benchmark adds to disk mode's "disk" object: the O_DIRECT raw read, the
 * segments dropped before the reads, the primary path's half, the daemon's lookup p99. */
static void disk_json_extras(const bench_t *b, const disk_res_t *d, const disk_fig_t *f,
                             json_t *disk)
{
    json_t *raw = json_object_get(disk, "raw"), *read = json_object_get(disk, "read");
    json_t *lk = json_object_get(disk, "lookup");

    json_object_set_new(raw, "read_direct",
                        d->raw.direct_s > 0
                            ? gbps_json(f->raw_direct_gbps, d->raw.bytes, d->raw.direct_s)
                            : json_pack("{s:n,s:s}", "gbps", "not_measured", d->raw.direct_why));
    json_object_set_new(read, "segments_dropped", dropped_json(&d->drop));
    json_object_set_new(read, "ratio_vs_raw_direct",
                        real_or_null(ratio(f->r_disk, f->raw_direct_gbps)));
    if (d->shm_half)
        json_object_set_new(
            disk, "read_shm",
            json_pack(
                "{s:f,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:f,s:o,s:o,s:o,s:o}", "gbps", f->r_disk_shm,
                "bytes", (json_int_t)f->load_bytes_shm, "seconds", d->load_shm_s, "chunks",
                (json_int_t)((uint64_t)b->o.ranks * d->shm_n), "disk_hits", (json_int_t)f->hits_shm,
                "disk_misses", (json_int_t)f->misses_shm, "verified", (json_int_t)d->n_shm.hits,
                "misses", (json_int_t)d->n_shm.misses, "client_gbps", f->r_client_shm,
                "ratio_vs_raw_direct", real_or_null(ratio(f->r_disk_shm, f->raw_direct_gbps)),
                "ratio_vs_raw", real_or_null(ratio(f->r_disk_shm, f->raw_cold_gbps)),
                "segments_dropped", dropped_json(&d->drop_shm), "latency", pct_json(&d->load_shm)));
    if (d->zc_n > 0)
        json_object_set_new(
            disk, "read_zc",
            json_pack("{s:f,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o}", "gbps", f->r_disk_zc,
                      "bytes", (json_int_t)f->load_bytes_zc, "seconds", d->load_zc_s, "chunks",
                      (json_int_t)((uint64_t)b->o.ranks * d->zc_n), "disk_hits",
                      (json_int_t)f->hits_zc, "disk_misses", (json_int_t)f->misses_zc, "verified",
                      (json_int_t)d->n_zc.hits, "misses", (json_int_t)d->n_zc.misses,
                      "ratio_vs_raw_direct", real_or_null(ratio(f->r_disk_zc, f->raw_direct_gbps)),
                      "ratio_vs_raw_direct_distinct",
                      real_or_null(ratio(f->r_disk_zc, f->raw_direct_d_gbps)), "segments_dropped",
                      dropped_json(&d->drop_zc), "latency", pct_json(&d->load_zc)));
    if (d->zc_n > 0)
        json_object_set_new(json_object_get(disk, "read_zc"), "pinned",
                            json_integer((json_int_t)d->zc_pinned));
    json_object_set_new(raw, "read_direct_distinct",
                        d->raw.direct_d_s > 0
                            ? gbps_json(f->raw_direct_d_gbps, d->raw.bytes, d->raw.direct_d_s)
                            : json_pack("{s:n}", "gbps"));
    json_object_set_new(read, "ratio_vs_raw_direct_distinct",
                        real_or_null(ratio(f->r_disk, f->raw_direct_d_gbps)));
    if (d->shm_half)
        json_object_set_new(json_object_get(disk, "read_shm"), "ratio_vs_raw_direct_distinct",
                            real_or_null(ratio(f->r_disk_shm, f->raw_direct_d_gbps)));
    for (seg_mode_t m = 0; m < SEG_MODES; m++) {
        const seg_read_t *r = &d->seg[m];
        double g = r->s > 0 ? gbps(r->bytes, r->s) : NAN;
        json_object_set_new(raw, seg_modes[m].key,
                            r->s > 0 ? gbps_json(g, r->bytes, r->s) : json_pack("{s:n}", "gbps"));
        json_object_set_new(read, seg_modes[m].ratio, real_or_null(ratio(f->r_disk, g)));
        if (d->shm_half)
            json_object_set_new(json_object_get(disk, "read_shm"), seg_modes[m].ratio,
                                real_or_null(ratio(f->r_disk_shm, g)));
        if (d->zc_n > 0)
            json_object_set_new(json_object_get(disk, "read_zc"), seg_modes[m].ratio,
                                real_or_null(ratio(f->r_disk_zc, g)));
    }
    json_object_set_new(raw, "write_direct",
                        d->raw.direct_w_s > 0
                            ? gbps_json(f->raw_direct_w_gbps, d->raw.bytes, d->raw.direct_w_s)
                            : json_pack("{s:n,s:s}", "gbps", "not_measured", d->raw.direct_w_why));
    json_object_set_new(json_object_get(disk, "write"), "ratio_vs_raw_direct",
                        real_or_null(ratio(f->w_raw, f->raw_direct_w_gbps)));
    json_object_set_new(raw, "write_direct_distinct",
                        d->raw.direct_wd_s > 0
                            ? gbps_json(f->raw_direct_wd_gbps, d->raw.bytes, d->raw.direct_wd_s)
                            : json_pack("{s:n}", "gbps"));
    json_object_set_new(json_object_get(disk, "write"), "ratio_vs_raw_direct_distinct",
                        real_or_null(ratio(f->w_raw, f->raw_direct_wd_gbps)));
    json_object_set_new(json_object_get(disk, "write"), "calls",
                        json_pack("{s:o,s:I,s:f}", "gbps", real_or_null(f->w_calls), "bytes",
                                  (json_int_t)f->raw_w, "seconds", d->s1.write_s - d->s0.write_s));
    json_object_set_new(
        json_object_get(disk, "write"), "while_refusing",
        json_pack("{s:o,s:I,s:f,s:I,s:f,s:I,s:I,s:o,s:o}", "gbps", real_or_null(f->w_refusing),
                  "bytes", (json_int_t)d->refusing.bytes, "seconds", d->refusing.secs, "refused",
                  (json_int_t)d->refusing.refused, "write_busy_share", d->refusing.busy, "samples",
                  (json_int_t)d->refusing.samples, "sample_interval_us",
                  (json_int_t)BENCH_SAMPLE_US, "ratio_vs_raw_direct",
                  real_or_null(ratio(f->w_refusing, f->raw_direct_w_gbps)),
                  "ratio_vs_raw_direct_distinct",
                  real_or_null(ratio(f->w_refusing, f->raw_direct_wd_gbps))));
    json_object_set_new(
        json_object_get(disk, "write"), "loop_turns",
        json_pack("{s:I,s:I,s:I}", "turns", (json_int_t)(d->s1.turns - d->s0.turns), "over_2ms",
                  (json_int_t)((d->s1.turns - d->s0.turns) - (d->s1.turns_2ms - d->s0.turns_2ms)),
                  "over_5ms",
                  (json_int_t)((d->s1.turns - d->s0.turns) - (d->s1.turns_5ms - d->s0.turns_5ms))));
    {
        json_t *lt = json_object_get(json_object_get(disk, "write"), "loop_turns");
        uint64_t n = d->s1.turns - d->s0.turns;
        json_object_set_new(lt, "cpu_over_2ms",
                            d->s1.has_cpu
                                ? json_integer((json_int_t)(n - (d->s1.cpu_2ms - d->s0.cpu_2ms)))
                                : json_null());
        json_object_set_new(lt, "cpu_over_5ms",
                            d->s1.has_cpu
                                ? json_integer((json_int_t)(n - (d->s1.cpu_5ms - d->s0.cpu_5ms)))
                                : json_null());
    }
    {
        static const char *const where[4] = {"write", "read", "read_shm", "read_zc"};
        for (int k = 0; k < 4; k++) {
            json_t *o = json_object_get(disk, where[k]);
            if (o != NULL)
                json_object_set_new(o, "daemon_cpu_s_per_gb", real_or_null(f->cpu_gb[k]));
        }
    }
    json_object_set_new(json_object_get(disk, "write"), "paced",
                        b->o.paced ? json_pack("{s:I,s:I}", "pace_waits", (json_int_t)d->pace_waits,
                                               "pending_limit_chunks", (json_int_t)b->pace_limit)
                                   : json_null());
    json_object_set_new(json_object_get(lk, "idle"), "daemon_p99_us",
                        real_or_null(d->s0.lookup_p99));
    json_object_set_new(json_object_get(lk, "writing"), "daemon_p99_us",
                        real_or_null(d->s1.lookup_p99));
    json_object_set_new(json_object_get(lk, "idle"), "daemon_window_p99_us",
                        real_or_null(snap_window_pct(&d->si, &d->s0, 99.0)));
    json_object_set_new(json_object_get(lk, "writing"), "daemon_window_p99_us",
                        real_or_null(snap_window_pct(&d->s0, &d->s1, 99.0)));
}

/* The whole report as one JSON object (NULL when out of memory). */
static json_t *disk_json(const bench_t *b, const disk_res_t *d, const warnings_t *w)
{
    const bench_opts_t *o = &b->o;
    disk_fig_t f;
    disk_figures(b, d, &f);
    json_t *raw = json_pack("{s:I,s:o,s:o,s:o,s:o}", "bytes", (json_int_t)d->raw.bytes, "write",
                            gbps_json(f.raw_w_gbps, d->raw.bytes, d->raw.write_s), "write_no_sync",
                            gbps_json(f.raw_pw_gbps, d->raw.bytes, d->raw.pwrite_s), "read_cached",
                            gbps_json(f.raw_cached_gbps, d->raw.bytes, d->raw.cached_s), "read",
                            gbps_json(f.raw_cold_gbps, d->raw.bytes, d->raw.cold_s));
    json_t *cold = json_object_get(raw, "read");
    json_object_set_new(cold, "resident_after_fadvise",
                        d->raw.resident < 0 ? json_null() : json_real(d->raw.resident));
    json_object_set_new(cold, "page_cache_may_have_served", json_boolean(d->raw.resident != 0));
    json_t *write = json_pack(
        "{s:f,s:f,s:f,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,"
        "s:{s:I,s:I,s:I,s:I}}",
        "gbps_raw", f.w_raw, "gbps_stored", f.w_stored, "gbps_written", f.w_written, "raw_bytes",
        (json_int_t)f.raw_w, "stored_bytes", (json_int_t)f.stored_w, "bytes_written",
        (json_int_t)f.written, "seconds", f.write_s, "save_seconds", d->save_s, "drain_seconds",
        d->drain_s, "client_save_gbps", f.w_client, "ratio_vs_raw", ratio(f.w_raw, f.raw_w_gbps),
        "ratio_vs_raw_no_sync", ratio(f.w_raw, f.raw_pw_gbps), "demotions",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_DEMOTED), "demotions_clean",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_CLEAN), "demotions_refused",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_REFUSED), "writes_lost",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_LOST), "records_written",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_RECORDS), "records_compressed",
        (json_int_t)snap_delta(&d->s0, &d->s1, SN_COMPRESSED), "compression_ratio",
        real_or_null(f.ratio_run), "latency", pct_json(&d->save), "outcomes", "stored",
        (json_int_t)d->n.stored, "exists", (json_int_t)d->n.exists, "nospace",
        (json_int_t)d->n.nospace, "declined", (json_int_t)d->n.declined);
    json_object_set_new(write, "flushes",
                        json_integer((json_int_t)snap_delta(&d->s0, &d->s1, SN_FLUSHES)));
    json_object_set_new(write, "flushes_staged",
                        json_integer((json_int_t)snap_delta(&d->s0, &d->s1, SN_STAGED)));
    json_t *read =
        json_pack("{s:f,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:o}", "gbps", f.r_disk,
                  "bytes", (json_int_t)f.load_bytes, "seconds", d->load_s, "chunks",
                  (json_int_t)((uint64_t)o->ranks * d->half), "disk_hits", (json_int_t)f.hits,
                  "disk_misses", (json_int_t)f.misses, "verified", (json_int_t)d->n.hits, "misses",
                  (json_int_t)d->n.misses, "lost", (json_int_t)d->n.lost, "promotions",
                  (json_int_t)snap_delta(&d->s2, &d->s3, SN_PROMOTED), "demotions",
                  (json_int_t)snap_delta(&d->s2, &d->s3, SN_DEMOTED), "client_gbps", f.r_client,
                  "ratio_vs_raw", ratio(f.r_disk, f.raw_cold_gbps), "ratio_vs_raw_cached",
                  ratio(f.r_disk, f.raw_cached_gbps), "latency", pct_json(&d->load));
    json_t *comp =
        json_pack("{s:o,s:f,s:s,s:o,s:o}", "daemon_ratio", real_or_null(f.ratio_run),
                  "daemon_ratio_cumulative", d->s3.ratio, "daemon_mode", d->s0.compression,
                  "shuffle_lz4", comp_json(&d->shuf), "lz4", comp_json(&d->lz4));
    json_t *lk = json_pack(
        "{s:I,s:I,s:o,s:o,s:f,s:f}", "prompt_chunks", (json_int_t)o->prompt_chunks, "gap_us",
        (json_int_t)BENCH_DISK_LOOKUP_GAP_US, "idle", lookups_json(&d->idle), "writing",
        lookups_json(&d->busy), "ratio_p50", ratio(d->busy.lat.p50, d->idle.lat.p50), "ratio_p99",
        ratio(d->busy.lat.p99, d->idle.lat.p99));
    json_t *root = json_pack(
        "{s:s,s:s,s:s,s:{s:s,s:I},s:{s:I,s:I,s:I,s:I,s:o,s:I,s:I,s:I},"
        "s:{s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:o,s:o},s:o}",
        "mode", "disk", "endpoint", o->endpoint, "data", data_names[o->data], "namespace", "model",
        o->model, "world", (json_int_t)o->world, "params", "chunk_bytes",
        (json_int_t)o->chunk_bytes, "chunks", (json_int_t)o->chunks, "ranks", (json_int_t)o->ranks,
        "batch", (json_int_t)o->batch, "lookup_first", o->lookup_first ? json_true() : json_false(),
        "chain_chunks", (json_int_t)b->chain_len, "prompt_chunks", (json_int_t)o->prompt_chunks,
        "lookups", (json_int_t)o->lookups, "disk", "dir", o->disk_dir, "filesystem", d->fs,
        "daemon_dir", d->s0.dir, "same_filesystem",
        d->same_fs < 0 ? json_null() : json_boolean(d->same_fs), "ram_capacity_bytes",
        (json_int_t)d->s0.ram_capacity, "disk_capacity_bytes", (json_int_t)d->s0.disk_capacity,
        "segment_bytes", (json_int_t)d->s0.segment_bytes, "save_path",
        tool_data_path_name(data_path_of(b->primary)), "load_path", "frames", "raw", raw, "write",
        write, "read", read, "compression", comp, "lookup", lk, "warnings", warnings_json(w));
    disk_json_extras(b, d, &f, json_object_get(root, "disk"));
    json_object_set_new(json_object_get(root, "params"), "paced", json_boolean(o->paced));
    json_object_set_new(json_object_get(root, "params"), "zero_copy", json_boolean(o->zero_copy));
    return root;
}

static void disk_print_table(const bench_t *b, const disk_res_t *d)
{
    const bench_opts_t *o = &b->o;
    const double mib = 1 << 20;
    disk_fig_t f;
    disk_figures(b, d, &f);
    printf("kvtier-bench --disk-dir: %s  namespace %s  data %s  saves %s path, loads frames path\n",
           o->endpoint, o->model, data_names[o->data],
           tool_data_path_name(data_path_of(b->primary)));
    printf("  %u rank(s) x %u chunks x %.2f MiB = %.1f MiB in chains of %u, %u chunk(s) per call; "
           "ram.capacity %.1f MiB, disk.capacity %.1f MiB, compression %s\n",
           o->ranks, o->chunks, (double)o->chunk_bytes / mib, (double)d->raw.bytes / mib,
           b->chain_len, o->batch, (double)d->s0.ram_capacity / mib,
           (double)d->s0.disk_capacity / mib, d->s0.compression);
    if (o->lookup_first)
        printf("  --lookup-first: each chain's loads follow a lookup of the chain (the daemon "
               "reads ahead what it finds only on disk)\n");
    if (o->paced)
        printf("  --paced: the saves waited between chains until at most %u chunks were pending "
               "in the write buffer (%" PRIu64 " polls found more)\n",
               b->pace_limit, d->pace_waits);
    printf("  --disk-dir %s (%s; %s the daemon's disk.dir %s)\n\n", o->disk_dir, d->fs,
           d->same_fs == 1   ? "same filesystem as"
           : d->same_fs == 0 ? "NOT the filesystem of"
                             : "cannot compare with",
           d->s0.dir);
    printf("%-34s %8s %10s %9s\n", "write", "GB/s", "MiB", "seconds");
    printf("%-34s %8.3f %10.1f %9.3f\n", "raw pwrite + fdatasync", f.raw_w_gbps,
           (double)d->raw.bytes / mib, d->raw.write_s);
    printf("%-34s %8.3f %10.1f %9.3f  (before fdatasync: into the page cache)\n",
           "raw pwrite alone", f.raw_pw_gbps, (double)d->raw.bytes / mib, d->raw.pwrite_s);
    if (d->raw.direct_w_s > 0)
        printf("%-34s %8.3f %10.1f %9.3f  (the durability of disk.direct_io + fsync segment)\n",
               "raw pwrite O_DIRECT + fdatasync", f.raw_direct_w_gbps, (double)d->raw.bytes / mib,
               d->raw.direct_w_s);
    else
        printf("%-34s %8s  (%s)\n", "raw pwrite O_DIRECT + fdatasync", "-", d->raw.direct_w_why);
    if (d->raw.direct_wd_s > 0)
        printf("%-34s %8.3f %10.1f %9.3f  (each chunk from memory of its own)\n",
               "raw pwrite O_DIRECT, distinct bufs", f.raw_direct_wd_gbps,
               (double)d->raw.bytes / mib, d->raw.direct_wd_s);
    printf("%-34s %8.3f %10.1f %9.3f  saves %.3f s + drain %.3f s\n", "kvtier disk, raw bytes",
           f.w_raw, (double)f.raw_w / mib, f.write_s, d->save_s, d->drain_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier disk, stored bytes", f.w_stored,
           (double)f.stored_w / mib, f.write_s);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier disk, bytes_written", f.w_written,
           (double)f.written / mib, f.write_s);
    if (!isnan(f.w_calls))
        printf("%-34s %8.3f %10.1f %9.3f  (disk.write_seconds: the flushes' pwritev + fdatasync)\n",
               "kvtier disk, write calls", f.w_calls, (double)f.raw_w / mib,
               d->s1.write_s - d->s0.write_s);
    if (!isnan(f.w_refusing))
        printf("%-34s %8.3f %10.1f %9.3f  (%" PRIu64 " demotions refused in it; write calls "
               "%.0f %% of it)\n",
               "kvtier disk, while refusing", f.w_refusing, (double)d->refusing.bytes / mib,
               d->refusing.secs, d->refusing.refused, 100.0 * d->refusing.busy);
    else
        printf("%-34s %8s  (no demotion was refused)\n", "kvtier disk, while refusing", "-");
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier save calls (client)", f.w_client,
           (double)d->n.stored_bytes / mib, d->save_s);
    printf("%-34s %8s %10s %9s\n", "read", "", "", "");
    printf("%-34s %8.3f %10.1f %9.3f\n", "raw pread, page cache", f.raw_cached_gbps,
           (double)d->raw.bytes / mib, d->raw.cached_s);
    printf("%-34s %8.3f %10.1f %9.3f  ", "raw pread after fadvise(DONTNEED)", f.raw_cold_gbps,
           (double)d->raw.bytes / mib, d->raw.cold_s);
    if (d->raw.resident < 0)
        printf("(mincore failed: the page cache may have served it)\n");
    else if (d->raw.resident > 0)
        printf("(%.1f %% still resident: the page cache served that part)\n",
               100.0 * d->raw.resident);
    else
        printf("(0 %% resident: read from the device)\n");
    if (d->raw.direct_s > 0)
        printf("%-34s %8.3f %10.1f %9.3f\n", "raw pread O_DIRECT", f.raw_direct_gbps,
               (double)d->raw.bytes / mib, d->raw.direct_s);
    else
        printf("%-34s %8s  (%s)\n", "raw pread O_DIRECT", "-", d->raw.direct_why);
    if (d->raw.direct_d_s > 0)
        printf("%-34s %8.3f %10.1f %9.3f  (each chunk into memory of its own)\n",
               "raw pread O_DIRECT, distinct bufs", f.raw_direct_d_gbps, (double)d->raw.bytes / mib,
               d->raw.direct_d_s);
    printf("%-34s %8.3f %10.1f %9.3f  (%d segment files dropped first, %.1f %% resident after)\n",
           "kvtier disk frames, disk.hits x chunk", f.r_disk, (double)f.load_bytes / mib, d->load_s,
           d->drop.files, d->drop.resident < 0 ? 0 : 100.0 * d->drop.resident);
    printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier load calls (client)", f.r_client,
           (double)d->n.loaded_bytes / mib, d->load_s);
    if (d->shm_half) {
        printf("%-34s %8.3f %10.1f %9.3f  (dropped again first, %.1f %% resident after)\n",
               "kvtier disk shm, disk.hits x chunk", f.r_disk_shm, (double)f.load_bytes_shm / mib,
               d->load_shm_s, d->drop_shm.resident < 0 ? 0 : 100.0 * d->drop_shm.resident);
        printf("%-34s %8.3f %10.1f %9.3f\n", "kvtier shm load calls (client)", f.r_client_shm,
               (double)d->n_shm.loaded_bytes / mib, d->load_shm_s);
    }
    if (d->zc_n > 0)
        printf("%-34s %8.3f %10.1f %9.3f  (pins, no copy out: the engine's DMA path; dropped "
               "again first)\n",
               "kvtier disk pinned, disk.hits x chunk", f.r_disk_zc, (double)f.load_bytes_zc / mib,
               d->load_zc_s);
    for (seg_mode_t m = 0; m < SEG_MODES; m++)
        if (d->seg[m].s > 0)
            printf("%-34s %8.3f %10.1f %9.3f  (%s)\n", seg_modes[m].row,
                   gbps(d->seg[m].bytes, d->seg[m].s), (double)d->seg[m].bytes / mib, d->seg[m].s,
                   seg_modes[m].note);
    printf("ratio kvtier/raw: write %.3f (with fdatasync), %.3f (pwrite alone); read frames %.3f "
           "(after DONTNEED), %.3f (O_DIRECT), %.3f (page cache)",
           ratio(f.w_raw, f.raw_w_gbps), ratio(f.w_raw, f.raw_pw_gbps),
           ratio(f.r_disk, f.raw_cold_gbps), ratio(f.r_disk, f.raw_direct_gbps),
           ratio(f.r_disk, f.raw_cached_gbps));
    if (d->shm_half)
        printf("; read shm %.3f (O_DIRECT), %.3f (O_DIRECT distinct)",
               ratio(f.r_disk_shm, f.raw_direct_gbps), ratio(f.r_disk_shm, f.raw_direct_d_gbps));
    printf("; write %.3f (O_DIRECT + fdatasync)", ratio(f.w_raw, f.raw_direct_w_gbps));
    for (seg_mode_t m = 0; m < SEG_MODES; m++) {
        double g;
        if (d->seg[m].s <= 0)
            continue;
        g = gbps(d->seg[m].bytes, d->seg[m].s);
        printf("; %s: frames %.3f", seg_modes[m].line, ratio(f.r_disk, g));
        if (d->shm_half)
            printf(", shm %.3f", ratio(f.r_disk_shm, g));
        if (d->zc_n > 0)
            printf(", pinned %.3f", ratio(f.r_disk_zc, g));
    }
    printf("\n");
    if (!isnan(f.w_refusing))
        printf("ratio kvtier/raw while demotions were refused: write %.3f (O_DIRECT + fdatasync), "
               "%.3f (O_DIRECT distinct)\n",
               ratio(f.w_refusing, f.raw_direct_w_gbps), ratio(f.w_refusing, f.raw_direct_wd_gbps));
    printf("daemon CPU seconds per GB: write %.3f, restore frames %.3f", f.cpu_gb[DCPU_WRITE],
           f.cpu_gb[DCPU_FRAMES]);
    if (d->shm_half)
        printf(", shm %.3f", f.cpu_gb[DCPU_SHM]);
    if (d->zc_n > 0)
        printf(", pinned %.3f", f.cpu_gb[DCPU_ZC]);
    printf(" (/proc/PID/stat, 10 ms ticks; write: the whole phase, its lookups too)\n");
    printf("\n");
    printf("write phase: demotions %" PRIu64 ", demotions_clean %" PRIu64
           ", demotions_refused %" PRIu64 ", writes_lost %" PRIu64 ", records_written %" PRIu64
           " (%" PRIu64 " compressed)\n",
           snap_delta(&d->s0, &d->s1, SN_DEMOTED), snap_delta(&d->s0, &d->s1, SN_CLEAN),
           snap_delta(&d->s0, &d->s1, SN_REFUSED), snap_delta(&d->s0, &d->s1, SN_LOST),
           snap_delta(&d->s0, &d->s1, SN_RECORDS), snap_delta(&d->s0, &d->s1, SN_COMPRESSED));
    printf("write phase flushes: %" PRIu64 ", of them staged %" PRIu64
           " (disk.flushes, disk.flushes_staged; disk.staging \"auto\" chooses by measurement)\n",
           snap_delta(&d->s0, &d->s1, SN_FLUSHES), snap_delta(&d->s0, &d->s1, SN_STAGED));
    printf("saves: %" PRIu64 " stored, %" PRIu64 " exists, %" PRIu64 " nospace, %" PRIu64
           " declined\n",
           d->n.stored, d->n.exists, d->n.nospace, d->n.declined);
    printf("read phase, frames: %" PRIu64 " oldest chunks loaded: %" PRIu64
           " verified byte-exact, %" PRIu64 " misses (%" PRIu64 " of them had been stored); "
           "disk.hits %" PRIu64 ", disk.misses %" PRIu64 ", promotions %" PRIu64
           ", demotions %" PRIu64 "\n",
           (uint64_t)o->ranks * d->half, d->n.hits, d->n.misses, d->n.lost, f.hits, f.misses,
           snap_delta(&d->s2, &d->s3, SN_PROMOTED), snap_delta(&d->s2, &d->s3, SN_DEMOTED));
    if (d->shm_half)
        printf("read phase, shm: %" PRIu64 " next oldest chunks loaded: %" PRIu64
               " verified byte-exact, %" PRIu64 " misses; disk.hits %" PRIu64
               ", promotions %" PRIu64 "\n",
               (uint64_t)o->ranks * d->shm_n, d->n_shm.hits, d->n_shm.misses, f.hits_shm,
               snap_delta(&d->s4, &d->s5, SN_PROMOTED));
    if (d->zc_n > 0)
        printf("read phase, pinned: %" PRIu64 " next oldest chunks pinned: %" PRIu64
               " found, %" PRIu64 " reloaded and verified byte-exact, %" PRIu64
               " misses; disk.hits %" PRIu64 ", promotions %" PRIu64 "\n",
               (uint64_t)o->ranks * d->zc_n, d->zc_pinned, d->n_zc.hits, d->n_zc.misses, f.hits_zc,
               snap_delta(&d->s6, &d->s7, SN_PROMOTED));
    printf("\n");
    printf("compression of the chunks (%s)       ratio  compress MB/s  decompress MB/s\n",
           data_names[o->data]);
    printf("%-34s %7.4f %14s %16s\n", "daemon, write phase (stored/raw)",
           isnan(f.ratio_run) ? 0.0 : f.ratio_run, "-", "-");
    const comp_t *cs[2] = {&d->shuf, &d->lz4};
    const char *cn[2] = {"bench shuffle+lz4 (2-byte)", "bench plain lz4"};
    for (int i = 0; i < 2; i++)
        printf("%-34s %7.4f %14.0f %16.0f\n", cn[i],
               ratio((double)cs[i]->stored, (double)cs[i]->raw),
               ratio((double)cs[i]->raw / 1e6, cs[i]->enc_s),
               ratio((double)cs[i]->raw / 1e6, cs[i]->dec_s));
    printf("\nlookups of %u hashes, %u us apart      calls    p50 us    p99 us    max us  "
           "daemon p99 us  in the phase\n",
           o->prompt_chunks, (unsigned)BENCH_DISK_LOOKUP_GAP_US);
    const lookups_t *ls[2] = {&d->idle, &d->busy};
    const char *ln[2] = {"daemon idle", "while the disk is written"};
    const double dp[2] = {d->s0.lookup_p99, d->s1.lookup_p99};
    const double wp[2] = {snap_window_pct(&d->si, &d->s0, 99.0),
                          snap_window_pct(&d->s0, &d->s1, 99.0)};
    for (int i = 0; i < 2; i++)
        printf("%-34s %8zu %9.1f %9.1f %9.1f %14.1f %13.1f\n", ln[i], ls[i]->lat.n, ls[i]->lat.p50,
               ls[i]->lat.p99, ls[i]->lat.max, dp[i], wp[i]);
    printf("(daemon p99: status ops.lookup.p99_us, cumulative since the daemon started; in the "
           "phase: of the lookups the daemon served during the phase alone, from the difference "
           "of ops.lookup.buckets_us at its start and end; nan from a daemon before 0.2.14)\n");
    printf("loop turns during the write phase: %" PRIu64 ", longer than 2 ms: %" PRIu64
           ", longer than 5 ms: %" PRIu64 " (status loop.turn_us, wall time)\n",
           d->s1.turns - d->s0.turns,
           (d->s1.turns - d->s0.turns) - (d->s1.turns_2ms - d->s0.turns_2ms),
           (d->s1.turns - d->s0.turns) - (d->s1.turns_5ms - d->s0.turns_5ms));
    if (d->s1.has_cpu)
        printf("  of the loop thread's CPU time: over 2 ms %" PRIu64 ", over 5 ms %" PRIu64
               " (loop.turn_cpu_us: a turn's wall time also holds the scheduler's wait)\n",
               (d->s1.turns - d->s0.turns) - (d->s1.cpu_2ms - d->s0.cpu_2ms),
               (d->s1.turns - d->s0.turns) - (d->s1.cpu_5ms - d->s0.cpu_5ms));
}

int bench_disk_report(const bench_t *b)
{
    disk_res_t *d = &dres;
    for (uint32_t i = 0; i < b->o.ranks; i++) {
        counts_add(&d->n, &b->ranks[i].dn);
        counts_add(&d->n_shm, &b->ranks[i].dn_shm);
        counts_add(&d->n_zc, &b->ranks[i].dn_zc);
        d->pace_waits += b->ranks[i].pace_waits;
    }
    if (merge_pct(b, offsetof(rank_t, dsave), &d->save) ||
        merge_pct(b, offsetof(rank_t, dload), &d->load) ||
        merge_pct(b, offsetof(rank_t, dload_shm), &d->load_shm) ||
        merge_pct(b, offsetof(rank_t, dload_zc), &d->load_zc)) {
        tool_error("out of memory");
        return EXIT_FAIL;
    }
    warnings_t w = {0};
    disk_warnings(b, d, &w);
    warnings_print(&w);
    if (!b->o.json) {
        disk_print_table(b, d);
        return EXIT_OK;
    }
    return json_print(disk_json(b, d, &w)) ? EXIT_FAIL : EXIT_OK;
}
