/*
 * fsutil.h - small file-system helpers shared by the daemon's modules.
 *
 * Threads: any (no shared state).
 */
#ifndef KVT_FSUTIL_H
#define KVT_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mkdir -p: creates every missing directory of path with mode 0750, the last component too
 * when last is true (otherwise only the directories leading to it). Relative paths are
 * relative to the working directory. Returns 0 or a negative errno. */
int fsutil_mkdirs(const char *path, bool last);

/* Makes sure path is a directory that only this process's user can reach: creates it with mode
 * 0700 when it is missing, then checks (lstat: not followed through a symlink) that it is a
 * directory owned by the effective user with no group or other permission bits. 0; -EPERM when
 * it exists but is not such a directory (someone else made it, or made it reachable); or
 * another negative errno. The parent must exist. */
int fsutil_private_dir(const char *path);

/* Whether a process listens on the Unix stream socket at path: 1 when a connect(2) to it
 * succeeds (or finds its backlog full: EAGAIN), 0 when path does not exist, is not a socket or
 * nobody listens (ECONNREFUSED: a stale file left by a process that died), or a negative errno
 * when it cannot tell (path too long for sockaddr_un, no socket, permission). Used before
 * binding a socket file that the bind would otherwise replace (the status socket, the ipc
 * endpoint: libzmq unlinks a live one and takes over its address without an error). */
int fsutil_unix_listener_alive(const char *path);

/* Replaces dir/name with len bytes of data atomically: writes dir/.name.tmp (mode 0600), fsyncs
 * it, renames it over dir/name and fsyncs dir, so that a crash leaves the old file or the new
 * one, never a torn one. Returns 0 or a negative errno (the temporary file is removed). */
int fsutil_write_atomic(const char *dir, const char *name, const void *data, size_t len);

/* A growing byte buffer for building a small file (a checkpoint, the gate state). fsutil_buf_add
 * appends n bytes and returns where they go (the caller writes them), or NULL once an allocation
 * failed (oom is set then and stays set). Free b with free(). */
typedef struct {
    uint8_t *b;
    size_t len, cap;
    bool oom;
} fsutil_buf_t;

uint8_t *fsutil_buf_add(fsutil_buf_t *b, size_t n);

/* Whether the selected (bracketed) word of a sysfs mode file, such as
 * /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never"), is one of words
 * (NULL-terminated). false when the file cannot be read. */
bool fsutil_sysfs_mode_is(const char *path, const char *const *words);

/* Reads the whole file at path into a malloc'd buffer (*buf, *len; the caller frees it). 0, or
 * a negative errno (-ENOENT: no such file). */
int fsutil_read_file(const char *path, uint8_t **buf, size_t *len);

#endif /* KVT_FSUTIL_H */
