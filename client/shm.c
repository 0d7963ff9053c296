/*
 * shm.c - the daemon's arena as this process maps it, and the chunk checksum helpers (see
 * internal.h and kvtier.h).
 *
 * Design: a mapping is an arena_map_t with a reference count. The client holds its current
 * mapping; every shared-memory request holds the mapping its locations refer to until it is
 * freed. When the daemon's arena changes (another generation, or another file at the same path
 * after a restart) the client maps the new one and drops its reference on the old one, which is
 * unmapped when the last completion pointing into it is freed: a pointer handed to the caller
 * never dangles while its completion lives. The file's device and inode identify it (a daemon
 * that restarts creates its arena anew; a mapping of the unlinked old file would silently miss
 * every byte written).
 *
 * Checksums: kvt_checksum and kvt_copy_checksum are proto/kvt_csum.h's, the definitions the
 * daemon uses too (PROTOCOL.md): the design of the fused copy and its figures are written there.
 *
 * Threads: every function may be called from any thread; reference counts are atomic.
 */
#include "internal.h"
#include "kvt_csum.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int kvt__map_open(const char *path, uint64_t arena_bytes, bool prefaulted, uint32_t gen,
                  uint32_t hold_ms, arena_map_t **out, char *err, size_t errcap)
{
    long page = sysconf(_SC_PAGESIZE);
    arena_map_t *m;
    struct stat st;
    void *p;
    int fd;

    if (arena_bytes == 0 || arena_bytes > SIZE_MAX - (size_t)page)
        return KVT_EUNSUPP;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return KVT_ENOMEM;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, errcap, "arena %s: open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(err, errcap, "arena %s: fstat: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < arena_bytes) {
        /* a FIFO, a device or a directory is no arena (a daemon could name any file) */
        if (!S_ISREG(st.st_mode))
            snprintf(err, errcap, "arena %s: not a regular file", path);
        else
            snprintf(err, errcap, "arena %s: %" PRIu64 " bytes, the daemon said %" PRIu64, path,
                     (uint64_t)st.st_size, arena_bytes);
        close(fd);
        goto fail;
    }
    m->bytes = (size_t)arena_bytes;
    m->map_bytes = (m->bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    /* When the daemon allocated every page, MAP_POPULATE fills this process's page tables now:
     * copies into and out of the arena then run at memcpy speed instead of taking a fault every
     * 4 KiB. (On a sparse arena it would allocate the whole capacity: not done then.) */
    p = mmap(NULL, m->map_bytes, PROT_READ | PROT_WRITE,
             MAP_SHARED | (prefaulted ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED)
        snprintf(err, errcap, "arena %s: mmap of %zu bytes: %s", path, m->map_bytes,
                 strerror(errno));
    close(fd);
    if (p == MAP_FAILED)
        goto fail;
    m->base = p;
    m->gen = gen;
    m->hold_ms = hold_ms;
    m->dev = st.st_dev;
    m->ino = st.st_ino;
    atomic_init(&m->refs, 1);
    *out = m;
    return 0;

fail:
    free(m);
    return KVT_ESYS;
}

bool kvt__map_same(const arena_map_t *m, const char *path, uint64_t arena_bytes, uint32_t gen)
{
    struct stat st;

    return m != NULL && stat(path, &st) == 0 && st.st_dev == m->dev && st.st_ino == m->ino &&
           arena_bytes == m->bytes && gen == m->gen;
}

arena_map_t *kvt__map_ref(arena_map_t *m)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void kvt__map_unref(arena_map_t *m)
{
    if (m == NULL || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    munmap(m->base, m->map_bytes);
    free(m);
}

uint8_t *kvt__map_at(const arena_map_t *m, const uint8_t *loc, uint64_t *len)
{
    uint64_t off = kvt_get_u64(loc);

    *len = kvt_get_u64(loc + 8);
    if (*len == 0 || off > m->bytes || *len > m->bytes - off)
        return NULL;
    return m->base + off;
}

uint64_t kvt_checksum(const void *p, size_t n)
{
    return kvt_csum(p, n);
}

uint64_t kvt_copy_checksum(void *dst, const void *src, size_t n)
{
    return kvt_csum_copy(dst, src, n);
}

int kvt_arena(const kvt_client_t *c, kvt_arena_t *out)
{
    kvt_client_t *mc = (kvt_client_t *)c; /* the mutex; nothing else is written */
    int rc = KVT_EUNSUPP;

    if (c == NULL || out == NULL)
        return KVT_EINVAL;
    if (kvt__forked(c))
        return kvt__fork_refused(c);
    pthread_mutex_lock(&mc->mu);
    if (c->map != NULL) {
        *out = (kvt_arena_t){.base = c->map->base,
                             .bytes = c->map->map_bytes,
                             .gen = c->map->gen,
                             .maps = c->map->seq};
        rc = 0;
    }
    pthread_mutex_unlock(&mc->mu);
    return rc;
}
