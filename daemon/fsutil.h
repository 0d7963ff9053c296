/*
 * fsutil.h - small file-system helpers shared by the daemon's modules.
 *
 * Threads: any (no shared state).
 */
#ifndef KVT_FSUTIL_H
#define KVT_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>

/* mkdir -p: creates every missing directory of path with mode 0750, the last component too
 * when last is true (otherwise only the directories leading to it). Relative paths are
 * relative to the working directory. Returns 0 or a negative errno. */
int fsutil_mkdirs(const char *path, bool last);

/* Replaces dir/name with len bytes of data atomically: writes dir/.name.tmp (mode 0600), fsyncs
 * it, renames it over dir/name and fsyncs dir, so that a crash leaves the old file or the new
 * one, never a torn one. Returns 0 or a negative errno (the temporary file is removed). */
int fsutil_write_atomic(const char *dir, const char *name, const void *data, size_t len);

#endif /* KVT_FSUTIL_H */
