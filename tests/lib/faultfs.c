/*
 * faultfs.c - a faulty disk for the tests: an LD_PRELOAD library that makes the daemon's file
 * I/O under one directory fail with EIO, fail now and then, or hang, as a test directs it while
 * the daemon runs (test_disk_io.c).
 *
 * Why a preload: the disk faults that matter in production (a device returning EIO, a device or
 * a network filesystem that stops answering) cannot be made on a CI machine without root-only
 * kernel targets (dm-error, dm-delay, dm-flakey) that a firecracker VM or a container often
 * lacks. The daemon does every segment read and write with libc's pread/preadv/pwritev and
 * fdatasync/fsync on its thread pool (disk.c), and the RAM journal's appends and the files it
 * writes atomically (gates.state) with write (0.2.5: intercepted too), so failing those calls
 * where the daemon makes them is what a failing device looks like to it: the same errno from the
 * same call on the same thread, the same blocked worker for a device that hangs. Nothing else of
 * the daemon is replaced; the calls that pass go to libc.
 *
 * Environment (read once, at the first intercepted call):
 *   KVT_FAULTFS_DIR  only descriptors whose path (/proc/self/fd) starts with this directory
 *                    are touched; unset: the library passes everything through;
 *   KVT_FAULTFS_CTL  the control file, re-read whenever its modification time or size changes.
 *
 * Control file: whitespace-separated words, applied together; an empty file is a healthy disk.
 *   stall        reads, writes and syncs block (re-checking the file every 2 ms) until the word
 *                is gone;
 *   stall-read=S reads of the files whose path holds S block the same way (0.2.8: one stuck
 *                file, a bad sector's retries, while the rest of the disk answers);
 *   stall-sync   fsync/fdatasync block the same way (0.2.9: a device slow to flush its cache);
 *   bad=S@OFF    reads of the files whose path holds S that cover byte OFF fail with EIO, every
 *                time (0.2.11: a bad sector; the rest of the file and of the disk answer);
 *   eio-read     reads fail with EIO;       eio-write   writes fail with EIO;
 *   eio-sync     fdatasync/fsync fail with EIO;
 *   flaky=N      one read or write in N fails with EIO (a fixed pseudo-random sequence);
 *   fail-writes=N  the next N writes fail with EIO, then writes pass (counted from when the
 *                word appears; the same word again after a change of the file starts anew);
 *   fail-reads=N the same for reads (a transient read error);
 *   delay=MS     every read and write takes MS milliseconds longer (a slow device);
 *   full=BYTES   a filesystem of BYTES (0.2.7): a pwrite/pwritev that would grow the regular
 *                files directly in the directory past BYTES in all fails with ENOSPC, and
 *                statvfs of the directory reports BYTES as its size and what is left of them
 *                as free (0.2.14: the size too; the check
 *                and the write are not atomic: two writers at once may pass BYTES by one
 *                write, which the tests' single flush worker does not do).
 * Each injected fault is counted; the counts are written to KVT_FAULTFS_CTL.count ("reads N
 * writes N syncs N stalls N") after each one, so a test can tell that its faults happened.
 *
 * Threads: any; the state is under one mutex (the daemon's workers call in concurrently).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef enum { OP_READ, OP_WRITE, OP_SYNC } op_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char dir[512], ctl[512];
static size_t dir_len;
static struct timespec ctl_mtime;
static off_t ctl_size = -1;
static ino_t ctl_ino;
static bool stall, stall_sync, eio_read, eio_write, eio_sync;
static char stall_read[128]; /* stall-read=: "" none */
static char bad_path[128];   /* bad=S@OFF: "" none */
static uint64_t bad_off;
static uint32_t flaky, delay_ms, fail_writes, fail_reads;
static uint64_t full_bytes; /* full=: the filesystem's size, 0 unlimited */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t n_reads, n_writes, n_syncs, n_stalls;

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static int (*real_statvfs)(const char *, struct statvfs *);

static void init_once(void)
{
    const char *d = getenv("KVT_FAULTFS_DIR"), *c = getenv("KVT_FAULTFS_CTL");

    real_pread = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_preadv = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "preadv");
    real_pwritev = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_statvfs = (int (*)(const char *, struct statvfs *))dlsym(RTLD_NEXT, "statvfs");
    if (d != NULL && c != NULL && strlen(d) < sizeof dir && strlen(c) < sizeof ctl) {
        strcpy(dir, d);
        strcpy(ctl, c);
        dir_len = strlen(dir);
    }
}

/* Re-reads the control file when it changed (mu held). */
static void reload_locked(void)
{
    struct stat st;
    char buf[256], *save = NULL;
    ssize_t n;
    int fd;

    if (stat(ctl, &st) != 0) {
        stall = stall_sync = eio_read = eio_write = eio_sync = false;
        flaky = delay_ms = fail_writes = fail_reads = 0;
        full_bytes = 0;
        stall_read[0] = bad_path[0] = '\0';
        ctl_size = -1;
        return;
    }
    if (st.st_ino == ctl_ino && st.st_size == ctl_size && st.st_mtim.tv_sec == ctl_mtime.tv_sec &&
        st.st_mtim.tv_nsec == ctl_mtime.tv_nsec)
        return;
    fd = open(ctl, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = real_pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    if (n < 0)
        return;
    buf[n] = '\0';
    ctl_size = st.st_size;
    ctl_mtime = st.st_mtim;
    ctl_ino = st.st_ino;
    stall = stall_sync = eio_read = eio_write = eio_sync = false;
    flaky = delay_ms = fail_writes = fail_reads = 0;
    full_bytes = 0;
    stall_read[0] = bad_path[0] = '\0';
    for (char *w = strtok_r(buf, " \t\r\n", &save); w != NULL;
         w = strtok_r(NULL, " \t\r\n", &save)) {
        if (strcmp(w, "stall") == 0)
            stall = true;
        else if (strcmp(w, "stall-sync") == 0)
            stall_sync = true;
        else if (strcmp(w, "eio-read") == 0)
            eio_read = true;
        else if (strcmp(w, "eio-write") == 0)
            eio_write = true;
        else if (strcmp(w, "eio-sync") == 0)
            eio_sync = true;
        else if (strncmp(w, "flaky=", 6) == 0)
            flaky = (uint32_t)strtoul(w + 6, NULL, 10);
        else if (strncmp(w, "delay=", 6) == 0)
            delay_ms = (uint32_t)strtoul(w + 6, NULL, 10);
        else if (strncmp(w, "fail-writes=", 12) == 0)
            fail_writes = (uint32_t)strtoul(w + 12, NULL, 10);
        else if (strncmp(w, "fail-reads=", 11) == 0)
            fail_reads = (uint32_t)strtoul(w + 11, NULL, 10);
        else if (strncmp(w, "full=", 5) == 0)
            full_bytes = strtoull(w + 5, NULL, 10);
        else if (strncmp(w, "stall-read=", 11) == 0)
            snprintf(stall_read, sizeof stall_read, "%s", w + 11);
        else if (strncmp(w, "bad=", 4) == 0 && strchr(w, '@') != NULL &&
                 (size_t)(strchr(w, '@') - (w + 4)) < sizeof bad_path) {
            snprintf(bad_path, sizeof bad_path, "%.*s", (int)(strchr(w, '@') - (w + 4)), w + 4);
            bad_off = strtoull(strchr(w, '@') + 1, NULL, 10);
        }
    }
}

static void write_counts_locked(void)
{
    char path[600], tmp[600], buf[160];
    int fd, len;

    /* a new file renamed over the old one: a reader never sees it empty */
    snprintf(tmp, sizeof tmp, "%s.count.tmp", ctl);
    snprintf(path, sizeof path, "%s.count", ctl);
    len = snprintf(buf, sizeof buf, "reads %llu writes %llu syncs %llu stalls %llu\n",
                   (unsigned long long)n_reads, (unsigned long long)n_writes,
                   (unsigned long long)n_syncs, (unsigned long long)n_stalls);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (real_pwrite(fd, buf, (size_t)len, 0) == len)
        (void)rename(tmp, path);
    close(fd);
}

#define FAULTFS_PATH_MAX 600

/* Is fd a file under the faulty directory? Its path into path[FAULTFS_PATH_MAX]. */
static bool watched(int fd, char *path)
{
    char link[64];
    ssize_t n;

    if (dir_len == 0)
        return false;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, FAULTFS_PATH_MAX - 1);
    if (n <= 0)
        return false;
    path[n] = '\0';
    return strncmp(path, dir, dir_len) == 0 && (path[dir_len] == '/' || path[dir_len] == '\0');
}

static void pause_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};

    nanosleep(&ts, NULL);
}

/* What to do with one call of len bytes at off (off -1: write(2)): 0 pass, or the errno to fail
 * it with (after any stall). */
static int decide(int fd, op_t op, off_t off, size_t len)
{
    int err = 0;
    bool stalled = false;
    uint32_t delay;
    char path[FAULTFS_PATH_MAX];

    pthread_once(&once, init_once);
    if (!watched(fd, path))
        return 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        reload_locked();
        if (!stall && !(op == OP_SYNC && stall_sync) &&
            !(op == OP_READ && stall_read[0] != '\0' && strstr(path, stall_read) != NULL))
            break;
        if (!stalled) {
            stalled = true;
            n_stalls++;
            write_counts_locked();
        }
        pthread_mutex_unlock(&mu);
        pause_ms(2);
        pthread_mutex_lock(&mu);
    }
    if ((op == OP_READ && eio_read) || (op == OP_WRITE && eio_write) || (op == OP_SYNC && eio_sync))
        err = EIO;
    if (op == OP_READ && bad_path[0] != '\0' && strstr(path, bad_path) != NULL && off >= 0 &&
        (uint64_t)off <= bad_off && bad_off - (uint64_t)off < len)
        err = EIO;
    if (err == 0 && op == OP_WRITE && fail_writes > 0) {
        fail_writes--;
        err = EIO;
    }
    if (err == 0 && op == OP_READ && fail_reads > 0) {
        fail_reads--;
        err = EIO;
    }
    if (err == 0 && flaky > 0 && op != OP_SYNC) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if (rng % flaky == 0)
            err = EIO;
    }
    if (err != 0) {
        if (op == OP_READ)
            n_reads++;
        else if (op == OP_WRITE)
            n_writes++;
        else
            n_syncs++;
        write_counts_locked();
    }
    delay = op != OP_SYNC ? delay_ms : 0;
    pthread_mutex_unlock(&mu);
    if (delay > 0)
        pause_ms(delay); /* outside the lock: concurrent calls are slow side by side */
    return err;
}

/* The bytes of the regular files directly in the directory (full=). */
static uint64_t dir_bytes(void)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0;

    if (dp == NULL)
        return 0;
    while ((de = readdir(dp)) != NULL) {
        struct stat st;
        if (fstatat(dirfd(dp), de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_size;
    }
    closedir(dp);
    return sum;
}

/* full=: ENOSPC for a write of len bytes at off into fd when it would grow the files past the
 * filesystem's size, else 0. */
static int space_for(int fd, off_t off, size_t len)
{
    struct stat st;
    char path[FAULTFS_PATH_MAX];
    uint64_t limit, end = (uint64_t)off + len, grow;

    pthread_once(&once, init_once);
    pthread_mutex_lock(&mu);
    reload_locked();
    limit = full_bytes;
    pthread_mutex_unlock(&mu);
    if (limit == 0 || !watched(fd, path) || fstat(fd, &st) != 0)
        return 0;
    grow = end > (uint64_t)st.st_size ? end - (uint64_t)st.st_size : 0;
    if (grow == 0 || dir_bytes() + grow <= limit)
        return 0;
    pthread_mutex_lock(&mu);
    n_writes++;
    write_counts_locked();
    pthread_mutex_unlock(&mu);
    return ENOSPC;
}

static size_t iov_len(const struct iovec *iov, int cnt)
{
    size_t n = 0;

    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

#define SPACE_OR_FAIL(fd, off, len)                                                                \
    do {                                                                                           \
        int s_ = space_for(fd, off, len);                                                          \
        if (s_ != 0) {                                                                             \
            errno = s_;                                                                            \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

#define FAIL_OR(call, op, fd, off, len)                                                            \
    do {                                                                                           \
        int e_ = decide(fd, op, off, len);                                                         \
        if (e_ != 0) {                                                                             \
            errno = e_;                                                                            \
            return -1;                                                                             \
        }                                                                                          \
        return call;                                                                               \
    } while (0)

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    FAIL_OR(real_pread(fd, buf, n, off), OP_READ, fd, off, n);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    FAIL_OR(real_pread(fd, buf, n, off), OP_READ, fd, off, n);
}

/* _FORTIFY_SOURCE builds call these instead of pread for buffers of known size */
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    (void)buflen;
    FAIL_OR(real_pread(fd, buf, n, off), OP_READ, fd, off, n);
}

ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    (void)buflen;
    FAIL_OR(real_pread(fd, buf, n, off), OP_READ, fd, off, n);
}

/* write(2) too (0.2.5): the RAM journal and the files written atomically (gates.state) use it,
 * so a stalled disk stalls them as a hung device would. */
ssize_t write(int fd, const void *buf, size_t n)
{
    FAIL_OR(real_write(fd, buf, n), OP_WRITE, fd, -1, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    SPACE_OR_FAIL(fd, off, n);
    FAIL_OR(real_pwrite(fd, buf, n, off), OP_WRITE, fd, off, n);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    SPACE_OR_FAIL(fd, off, n);
    FAIL_OR(real_pwrite(fd, buf, n, off), OP_WRITE, fd, off, n);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    FAIL_OR(real_preadv(fd, iov, cnt, off), OP_READ, fd, off, iov_len(iov, cnt));
}

ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    FAIL_OR(real_preadv(fd, iov, cnt, off), OP_READ, fd, off, iov_len(iov, cnt));
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    SPACE_OR_FAIL(fd, off, iov_len(iov, cnt));
    FAIL_OR(real_pwritev(fd, iov, cnt, off), OP_WRITE, fd, off, iov_len(iov, cnt));
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    SPACE_OR_FAIL(fd, off, iov_len(iov, cnt));
    FAIL_OR(real_pwritev(fd, iov, cnt, off), OP_WRITE, fd, off, iov_len(iov, cnt));
}

int fdatasync(int fd)
{
    FAIL_OR(real_fdatasync(fd), OP_SYNC, fd, -1, 0);
}

int fsync(int fd)
{
    FAIL_OR(real_fsync(fd), OP_SYNC, fd, -1, 0);
}

/* full=: the directory's filesystem has what is left of full_bytes free. */
int statvfs(const char *path, struct statvfs *out)
{
    int rc;
    uint64_t limit;

    pthread_once(&once, init_once);
    rc = real_statvfs(path, out);
    if (rc != 0 || dir_len == 0 || strncmp(path, dir, dir_len) != 0 ||
        (path[dir_len] != '/' && path[dir_len] != '\0'))
        return rc;
    pthread_mutex_lock(&mu);
    reload_locked();
    limit = full_bytes;
    pthread_mutex_unlock(&mu);
    if (limit > 0 && out->f_frsize > 0) {
        uint64_t used = dir_bytes(), left = used < limit ? limit - used : 0;
        out->f_bavail = out->f_bfree = (fsblkcnt_t)(left / out->f_frsize);
        out->f_blocks = (fsblkcnt_t)(limit / out->f_frsize);
    }
    return rc;
}
