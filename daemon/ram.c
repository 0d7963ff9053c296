/*
 * ram.c - the RAM arena (see ram.h).
 *
 * Design: the backing file is sized with ftruncate and, with ram.prefault (the default), its
 * pages are allocated at once with fallocate and mapped populated: the capacity is committed
 * and measured from the start, a /dev/shm too small for it fails the start instead of a later
 * write (SIGBUS), and no save pays for page allocation. Without prefault the file is sparse
 * and pages are allocated on first write. The arena is mapped once for the life of the daemon;
 * allocation state lives in alloc_t, out of band, so the daemon never touches a page it has not
 * written chunk bytes to (but the header page). Freed runs keep their pages: resident memory is
 * bounded by the capacity, and reusing a page costs no fault.
 *
 * The header page is the first page of the file; the allocator works in chunk-area offsets and
 * this file adds RAM_HDR_BYTES, so every offset outside is a file offset. A re-attach keeps the
 * file only when its size and header match this configuration exactly; the header is written
 * (the generation bumped) before the first chunk is served. Clients map the header read-write
 * too (they map the whole file): a scribbled header makes the next start a cold one (its
 * checksum fails), never a wrong chunk - the store accepts only chunks its private journal
 * vouches for, byte for byte (journal.h).
 *
 * A cold start over an existing file (0.2.7) makes a new file and renames it over the old one
 * instead of truncating the old one: clients of the previous run may still map it (a pin whose
 * hold has not ended, a reservation being filled, the library's copy threads), and truncating a
 * mapped file makes their next access a SIGBUS (shrunk) or zeros (regrown), in the engine's
 * process. The old inode lives on, unlinked, while they map it; they map the new file at their
 * next request (a new generation). Until then its pages are counted against the clients, not the
 * daemon. A daemon that opened the path takes its lock and then checks that the path still names
 * the file it locked (a cold start may have replaced it meanwhile), else opens it again. When no
 * new file can be made (no room for two arenas in /dev/shm while clients map the old one, a
 * directory the daemon may not write, as a root-owned hugetlbfs mount with the file pre-made),
 * the old one is truncated in place as before, with a warning: the daemon starts either way.
 *
 * Threads: loop thread only.
 */
#include "ram.h"

#include "alloc.h"
#include "fsutil.h"
#include "kvt_csum.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#define RAM_MAGIC "KVTARENA"

/* The header page's fields (little-endian, as the host: the arena never leaves the machine). */
typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t unit;
    uint64_t chunk_off;
    uint64_t capacity;
    uint64_t arena_id;
    uint32_t gen;
    uint32_t reserved;
    uint64_t csum; /* XXH3-64 of the bytes above */
} ram_hdr_t;

struct ram {
    int fd;
    uint8_t *base;
    uint64_t capacity;  /* of the chunk area (whole units) */
    uint64_t map_bytes; /* RAM_HDR_BYTES + capacity */
    alloc_t *alloc;
    uint32_t gen;
    uint64_t arena_id;
    bool keep;
    uint64_t huge_page; /* the file is on hugetlbfs: its page size (the mapping is whole pages) */
    uint64_t thp_page;  /* the file is on a tmpfs that allocates huge pages: their size */
    int replace_error;  /* a cold start truncated the old file in place: why no new one was made */
    bool tmpfs;         /* a file (not a memfd) on a tmpfs */
    char path[256];
};

static const char *const cold_names[RAM_COLD_COUNT] = {
    [RAM_ATTACHED] = "attached",    [RAM_COLD_DISABLED] = "disabled", [RAM_COLD_MEMFD] = "memfd",
    [RAM_COLD_NO_FILE] = "no_file", [RAM_COLD_SIZE] = "size",         [RAM_COLD_HEADER] = "header",
    [RAM_COLD_VERSION] = "version", [RAM_COLD_LAYOUT] = "layout"};

const char *ram_cold_reason_name(ram_cold_reason_t r)
{
    return r < RAM_COLD_COUNT ? cold_names[r] : "unknown";
}

static uint64_t hdr_csum(const ram_hdr_t *h)
{
    return kvt_csum(h, offsetof(ram_hdr_t, csum));
}

/* Reads the header of an existing file of st_size bytes and decides whether it can be kept.
 * *prev_gen receives the generation of any header that decodes (0 when none does). */
static ram_cold_reason_t hdr_judge(int fd, uint64_t st_size, const ram_t *r, uint64_t unit,
                                   uint32_t *prev_gen, uint64_t *arena_id)
{
    ram_hdr_t h;

    *prev_gen = 0;
    if (st_size == 0)
        return RAM_COLD_NO_FILE;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.magic, RAM_MAGIC, 8) != 0 ||
        h.csum != hdr_csum(&h))
        return RAM_COLD_HEADER;
    *prev_gen = h.gen;
    if (h.version != RAM_FORMAT_VERSION)
        return RAM_COLD_VERSION;
    if (h.unit != unit || h.chunk_off != RAM_HDR_BYTES || h.capacity != r->capacity)
        return RAM_COLD_LAYOUT;
    if (st_size != r->map_bytes)
        return RAM_COLD_SIZE;
    *arena_id = h.arena_id;
    return RAM_ATTACHED;
}

void ram_write_header(ram_t *r)
{
    ram_hdr_t h = {.version = RAM_FORMAT_VERSION,
                   .unit = ALLOC_UNIT_DEFAULT,
                   .chunk_off = RAM_HDR_BYTES,
                   .capacity = r->capacity,
                   .arena_id = r->arena_id,
                   .gen = r->gen};

    memcpy(h.magic, RAM_MAGIC, 8);
    h.csum = hdr_csum(&h);
    memcpy(r->base, &h, sizeof h);
}

static uint64_t random_id(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return v != 0 ? v : 1;
}

/* The huge page size of an arena file on hugetlbfs (fs_type: its fstatfs f_type; the page size
 * is its st_blksize there), or 0. */
static uint64_t huge_page_of(unsigned long fs_type, const struct stat *st)
{
    if (fs_type != HUGETLBFS_MAGIC || st->st_blksize <= 4096)
        return 0;
    return (uint64_t)st->st_blksize;
}

#define THP_DIR "/sys/kernel/mm/transparent_hugepage"

/*
 * The huge page size of an arena file on a tmpfs that backs files with transparent huge pages,
 * or 0. A mounted tmpfs does so when mounted with huge=always or huge=within_size (found in
 * /proc/self/mountinfo by the file's device number); the kernel's own mount (memfd: an arena
 * without a path) when shmem_enabled says always or within_size; shmem_enabled "force" makes
 * every tmpfs huge and "deny" none. /dev/shm is mounted without huge=: 0 there, as for a mount
 * not found.
 */
static uint64_t thp_page_of(unsigned long fs_type, const struct stat *st, bool memfd)
{
    static const char *const force[] = {"force", NULL}, *const deny[] = {"deny", NULL};
    static const char *const huge[] = {"always", "within_size", "force", NULL};
    char *line = NULL, dev[32];
    size_t cap = 0;
    unsigned long long pmd = 0;
    bool found = false, on = false;
    FILE *f;

    if (fs_type != TMPFS_MAGIC || fsutil_sysfs_mode_is(THP_DIR "/shmem_enabled", deny))
        return 0;
    if (fsutil_sysfs_mode_is(THP_DIR "/shmem_enabled", force)) {
        on = true;
    } else if (memfd) {
        on = fsutil_sysfs_mode_is(THP_DIR "/shmem_enabled", huge);
    } else {
        snprintf(dev, sizeof dev, " %u:%u ", major(st->st_dev), minor(st->st_dev));
        f = fopen("/proc/self/mountinfo", "re");
        while (f != NULL && !found && getline(&line, &cap, f) > 0) {
            const char *at = strstr(line, dev), *sep = strstr(line, " - ");
            found = at != NULL && sep != NULL && at < sep;
            on = found && (strstr(sep, "huge=always") != NULL || strstr(sep, "huge=within_size"));
        }
        free(line);
        if (f != NULL)
            fclose(f);
    }
    if (!on)
        return 0;
    f = fopen(THP_DIR "/hpage_pmd_size", "re");
    if (f == NULL || fscanf(f, "%llu", &pmd) != 1)
        pmd = 0;
    if (f != NULL)
        fclose(f);
    return pmd > 4096 ? (uint64_t)pmd : 0;
}

/* Opens (creates) path and takes its lock, then checks that path still names the file locked:
 * a cold start of another daemon may have renamed a new file over it after this open (it then
 * holds the new file's lock). 0 and *fd, or -EBUSY (a live daemon holds it), or -errno. */
static int open_locked(const char *path, int *fd)
{
    for (int tries = 0; tries < 8; tries++) {
        struct stat a, b;
        int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
        if (f < 0)
            return -errno;
        /* A live daemon holds the lock on its arena: never touch another daemon's arena. */
        if (flock(f, LOCK_EX | LOCK_NB) != 0) {
            int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
            close(f);
            return rc;
        }
        if (fstat(f, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            *fd = f;
            return 0;
        }
        close(f); /* replaced meanwhile: the file at path now is the one to lock */
    }
    return -EBUSY;
}

/* The arena file's mode and group (ram.arena_group). 0 or -errno. */
static int file_modes(int fd, const ram_opts_t *o)
{
    if (fchmod(fd, 0660) != 0)
        return -errno;
    if (o->group != NULL && o->group[0] != '\0') {
        struct group *gr = getgrnam(o->group);
        if (gr == NULL)
            return -ENOENT;
        if (fchown(fd, (uid_t)-1, gr->gr_gid) != 0)
            return -errno;
    }
    return 0;
}

/* A cold start over a file with bytes in it: a new file of r->map_bytes (allocated when
 * prefault), locked, with the old one's group unless ram.arena_group names one, renamed over the
 * file the path names (through symlinks: the new file is made beside the target, on its
 * filesystem); the old one is closed (its lock dropped with it) and stays for whoever maps it.
 * 0 with r->fd the new file, or -errno with r->fd still the old one, nothing left behind. */
static int replace_file(ram_t *r, const ram_opts_t *o, const struct stat *old)
{
    char target[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 32], proc[64];
    struct stat now;
    char *slash;
    int fd, rc;

    if (realpath(r->path, target) == NULL)
        return -errno;
    /* the file the path names now must be the one this daemon locked (a link re-pointed since
     * would make the rename replace a file it never locked) */
    if (stat(target, &now) != 0)
        return -errno;
    if (now.st_dev != old->st_dev || now.st_ino != old->st_ino)
        return -ESTALE;
    snprintf(dir, sizeof dir, "%s", target);
    slash = strrchr(dir, '/'); /* realpath's answer is absolute: there is one */
    if (slash == NULL)
        return -EINVAL;
    slash[slash == dir] = '\0'; /* "/a/b.arena" -> "/a"; "/b.arena" -> "/" */
    /* An unnamed file until it is complete (O_TMPFILE): a daemon killed while it allocates a
     * large arena leaves nothing behind. It gets a random name (another user of /dev/shm
     * cannot plant it: linkat does not replace) just before the rename. */
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0660);
    if (fd < 0)
        return -errno; /* no O_TMPFILE here (an old kernel, some filesystems): in place */
    rc = flock(fd, LOCK_EX | LOCK_NB) != 0 ? -errno : file_modes(fd, o);
    if (rc == 0 && (o->group == NULL || o->group[0] == '\0') &&
        fchown(fd, (uid_t)-1, old->st_gid) != 0)
        rc = -errno; /* the group an operator gave the file carries over */
    if (rc == 0 && ftruncate(fd, (off_t)r->map_bytes) != 0)
        rc = -errno;
    if (rc == 0 && o->prefault && fallocate(fd, 0, 0, (off_t)r->map_bytes) != 0)
        rc = -errno; /* no room for a second arena while the old one is mapped */
    tmp[0] = '\0';
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    for (int tries = 0; rc == 0 && tmp[0] == '\0' && tries < 8; tries++) {
        if (snprintf(tmp, sizeof tmp, "%s.%016" PRIx64 ".new", target, random_id()) >=
            (int)sizeof tmp)
            rc = -ENAMETOOLONG;
        else if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0)
            rc = errno == EEXIST ? (tmp[0] = '\0', 0) : -errno;
    }
    if (rc == 0 && tmp[0] == '\0')
        rc = -EEXIST;
    if (rc == 0 && rename(tmp, target) != 0) {
        rc = -errno;
        (void)unlink(tmp);
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    close(r->fd);
    r->fd = fd;
    return 0;
}

/* Removes the arena file this daemon holds (r->fd), through a symlink if the path is one: the
 * link stays, the file it names goes, only if it is still this one. Called with the lock held. */
static void unlink_arena(const ram_t *r)
{
    char target[PATH_MAX];
    struct stat a, b;

    if (realpath(r->path, target) == NULL || fstat(r->fd, &a) != 0 || stat(target, &b) != 0 ||
        a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return; /* gone already, or replaced: not ours */
    (void)unlink(target);
}

int ram_open(const ram_opts_t *o, ram_t **out, ram_cold_reason_t *why)
{
    const char *path = o->path != NULL ? o->path : "";
    ram_cold_reason_t reason = RAM_COLD_DISABLED;
    uint32_t prev_gen = 0;
    struct stat st;
    struct statfs sf;
    ram_t *r;
    int rc;

    if (o->capacity == 0 || strlen(path) >= sizeof r->path)
        return -EINVAL;
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->fd = -1;
    strcpy(r->path, path);
    r->alloc = alloc_new(o->capacity, ALLOC_UNIT_DEFAULT);
    if (r->alloc == NULL) {
        rc = -ENOMEM;
        goto fail_alloc;
    }
    r->capacity = alloc_capacity(r->alloc);
    r->map_bytes = RAM_HDR_BYTES + r->capacity;
    if (r->path[0] == '\0') {
        r->fd = memfd_create("kvtier-arena", MFD_CLOEXEC);
        rc = r->fd < 0 ? -errno : 0;
    } else {
        rc = open_locked(r->path, &r->fd);
    }
    if (rc != 0)
        goto fail_open;
    if (r->path[0] != '\0' && (rc = file_modes(r->fd, o)) != 0)
        goto fail_size;
    if (fstat(r->fd, &st) != 0) {
        rc = -errno;
        goto fail_size;
    }
    if (fstatfs(r->fd, &sf) != 0)
        sf.f_type = 0; /* unknown: small pages */
    r->tmpfs = r->path[0] != '\0' && (unsigned long)sf.f_type == TMPFS_MAGIC;
    r->huge_page = huge_page_of((unsigned long)sf.f_type, &st);
    if (r->huge_page > 0) /* the file's size and every mapping are whole huge pages */
        r->map_bytes = (r->map_bytes + r->huge_page - 1) / r->huge_page * r->huge_page;
    else
        r->thp_page = thp_page_of((unsigned long)sf.f_type, &st, r->path[0] == '\0');
    if (r->path[0] == '\0') {
        reason = RAM_COLD_MEMFD;
    } else {
        ram_cold_reason_t judged =
            hdr_judge(r->fd, (uint64_t)st.st_size, r, ALLOC_UNIT_DEFAULT, &prev_gen, &r->arena_id);
        reason = o->reattach ? judged : RAM_COLD_DISABLED;
    }
    if (reason != RAM_ATTACHED) {
        /* Drop whatever a previous run left, then size the (sparse) arena: a file with bytes
         * in it is replaced, never truncated (header comment), a new one sized. */
        r->arena_id = random_id();
        bool replace = r->path[0] != '\0' && st.st_size > 0;
        rc = replace ? replace_file(r, o, &st) : 0;
        if (rc != 0)
            /* no new file could be made (no room for two arenas while clients map the old
             * one, a directory the daemon cannot write, a long name): the old one is
             * truncated, as before 0.2.7, rather than not starting (ram_replace_error) */
            r->replace_error = rc;
        if ((!replace || rc != 0) &&
            (ftruncate(r->fd, 0) != 0 || ftruncate(r->fd, (off_t)r->map_bytes) != 0)) {
            rc = -errno;
            goto fail_size;
        }
    }
    /* Allocating every page now turns "not enough room in /dev/shm" into a start-up error
     * instead of a SIGBUS on some later write, and spares every writer the page allocation. */
    if (o->prefault && fallocate(r->fd, 0, 0, (off_t)r->map_bytes) != 0) {
        rc = -errno;
        goto fail_size;
    }
    r->base = mmap(NULL, r->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (o->prefault ? MAP_POPULATE : 0), r->fd, 0);
    if (r->base == MAP_FAILED) {
        rc = -errno;
        goto fail_size;
    }
    r->gen = prev_gen + 1 != 0 ? prev_gen + 1 : 1;
    *why = reason;
    *out = r;
    return 0;

fail_size:
    /* a file kept for a re-attach is left as it was found (only a cold start changed it);
     * unlinked while the lock is held */
    if (r->path[0] != '\0' && reason != RAM_ATTACHED)
        unlink_arena(r);
    close(r->fd);
fail_open:
    alloc_destroy(&r->alloc);
fail_alloc:
    free(r);
    return rc;
}

void ram_gen_above(ram_t *r, uint32_t seen)
{
    if (seen >= r->gen && seen != UINT32_MAX)
        r->gen = seen + 1;
}

void ram_keep(ram_t *r)
{
    r->keep = r->path[0] != '\0';
}

void ram_destroy(ram_t **pr)
{
    ram_t *r = *pr;

    if (r == NULL)
        return;
    munmap(r->base, r->map_bytes);
    if (r->path[0] != '\0' && !r->keep)
        unlink_arena(r); /* while the lock is held: no other daemon can have locked it since */
    close(r->fd);
    alloc_destroy(&r->alloc);
    free(r);
    *pr = NULL;
}

int ram_alloc(ram_t *r, uint64_t len, uint64_t *off)
{
    int rc = alloc_get(r->alloc, len, off);

    if (rc == 0)
        *off += RAM_HDR_BYTES;
    return rc;
}

void ram_free(ram_t *r, uint64_t off, uint64_t len)
{
    alloc_put(r->alloc, off - RAM_HDR_BYTES, len);
}

int ram_claim(ram_t *r, uint64_t off, uint64_t len)
{
    if (!ram_extent_ok(r, off, len))
        return -EINVAL;
    return alloc_claim(r->alloc, off - RAM_HDR_BYTES, len);
}

bool ram_extent_ok(const ram_t *r, uint64_t off, uint64_t len)
{
    return off >= RAM_HDR_BYTES && len > 0 && len <= r->capacity &&
           off - RAM_HDR_BYTES <= r->capacity - len && (off % ALLOC_UNIT_DEFAULT) == 0;
}

void *ram_ptr(const ram_t *r, uint64_t off)
{
    return r->base + off;
}

int ram_fd(const ram_t *r)
{
    return r->fd;
}

int ram_replace_error(const ram_t *r)
{
    return r->replace_error;
}

uint64_t ram_capacity(const ram_t *r)
{
    return r->capacity;
}

uint64_t ram_file_bytes(const ram_t *r)
{
    return r->map_bytes;
}

bool ram_on_tmpfs(const ram_t *r)
{
    return r->tmpfs;
}

uint64_t ram_huge_page(const ram_t *r)
{
    return r->huge_page > 0 ? r->huge_page : r->thp_page;
}

uint32_t ram_gen(const ram_t *r)
{
    return r->gen;
}

uint64_t ram_arena_id(const ram_t *r)
{
    return r->arena_id;
}

uint64_t ram_used(const ram_t *r)
{
    return alloc_used(r->alloc);
}

uint64_t ram_footprint(const ram_t *r, uint64_t len)
{
    return alloc_footprint(r->alloc, len);
}

uint64_t ram_resident(const ram_t *r)
{
    struct stat st;

    if (fstat(r->fd, &st) != 0)
        return 0;
    return (uint64_t)st.st_blocks * 512u;
}

uint64_t ram_largest_free(const ram_t *r)
{
    return alloc_largest_free(r->alloc);
}

uint32_t ram_free_runs(const ram_t *r)
{
    return alloc_free_runs(r->alloc);
}

const char *ram_path(const ram_t *r)
{
    return r->path;
}
