/*
 * ram.c - the RAM arena (see ram.h).
 *
 * Design: the backing file is sized with ftruncate and, with ram.prefault (the default), its
 * pages are allocated at once with fallocate and mapped populated: the capacity is committed
 * and measured from the start, a /dev/shm too small for it fails the start instead of a later
 * write (SIGBUS), and no save pays for page allocation. Without prefault the file is sparse
 * and pages are allocated on first write. The arena is mapped once for the life of the daemon;
 * allocation state lives in alloc_t, out of band, so the daemon never touches a page it has not
 * written chunk bytes to. Freed runs keep their pages: resident memory is bounded by the capacity,
 * and reusing a page costs no fault. Threads: loop thread only.
 */
#include "ram.h"

#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct ram {
    int fd;
    uint8_t *base;
    uint64_t capacity;
    alloc_t *alloc;
    char path[256];
};

int ram_new(const char *path, const char *group, uint64_t capacity, bool prefault, ram_t **out)
{
    ram_t *r;
    int rc;

    if (capacity == 0 || (path != NULL && strlen(path) >= sizeof r->path))
        return -EINVAL;
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return -ENOMEM;
    r->fd = -1;
    r->capacity = capacity;
    if (path != NULL)
        strcpy(r->path, path);
    r->alloc = alloc_new(capacity, ALLOC_UNIT_DEFAULT);
    if (r->alloc == NULL) {
        rc = -ENOMEM;
        goto fail_alloc;
    }
    if (r->path[0] == '\0')
        r->fd = memfd_create("kvtier-arena", MFD_CLOEXEC);
    else
        r->fd = open(r->path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
    if (r->fd < 0) {
        rc = -errno;
        goto fail_open;
    }
    /* A live daemon holds the lock on its arena: never truncate another daemon's arena. */
    if (r->path[0] != '\0' && flock(r->fd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        close(r->fd);
        goto fail_open;
    }
    if (r->path[0] != '\0' && fchmod(r->fd, 0660) != 0) {
        rc = -errno;
        goto fail_size;
    }
    if (r->path[0] != '\0' && group != NULL && group[0] != '\0') {
        struct group *gr = getgrnam(group);
        if (gr == NULL) {
            rc = -ENOENT;
            goto fail_size;
        }
        if (fchown(r->fd, (uid_t)-1, gr->gr_gid) != 0) {
            rc = -errno;
            goto fail_size;
        }
    }
    /* Drop whatever a previous run left, then size the (sparse) arena. */
    if (ftruncate(r->fd, 0) != 0 || ftruncate(r->fd, (off_t)capacity) != 0) {
        rc = -errno;
        goto fail_size;
    }
    /* Allocating every page now turns "not enough room in /dev/shm" into a start-up error
     * instead of a SIGBUS on some later write, and spares every writer the page allocation. */
    if (prefault && fallocate(r->fd, 0, 0, (off_t)capacity) != 0) {
        rc = -errno;
        goto fail_size;
    }
    r->base = mmap(NULL, capacity, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (prefault ? MAP_POPULATE : 0), r->fd, 0);
    if (r->base == MAP_FAILED) {
        rc = -errno;
        goto fail_size;
    }
    *out = r;
    return 0;

fail_size:
    close(r->fd);
    if (r->path[0] != '\0')
        unlink(r->path);
fail_open:
    alloc_destroy(&r->alloc);
fail_alloc:
    free(r);
    return rc;
}

void ram_destroy(ram_t **pr)
{
    ram_t *r = *pr;

    if (r == NULL)
        return;
    munmap(r->base, r->capacity);
    close(r->fd);
    if (r->path[0] != '\0')
        unlink(r->path);
    alloc_destroy(&r->alloc);
    free(r);
    *pr = NULL;
}

int ram_alloc(ram_t *r, uint64_t len, uint64_t *off)
{
    return alloc_get(r->alloc, len, off);
}

void ram_free(ram_t *r, uint64_t off, uint64_t len)
{
    alloc_put(r->alloc, off, len);
}

void *ram_ptr(const ram_t *r, uint64_t off)
{
    return r->base + off;
}

int ram_fd(const ram_t *r)
{
    return r->fd;
}

uint64_t ram_capacity(const ram_t *r)
{
    return alloc_capacity(r->alloc);
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
