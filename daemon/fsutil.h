/*
 * fsutil.h - small file-system helpers shared by the daemon's modules.
 *
 * Threads: any (no shared state).
 */
#ifndef KVT_FSUTIL_H
#define KVT_FSUTIL_H

#include <stdbool.h>

/* mkdir -p: creates every missing directory of path with mode 0750, the last component too
 * when last is true (otherwise only the directories leading to it). Relative paths are
 * relative to the working directory. Returns 0 or a negative errno. */
int fsutil_mkdirs(const char *path, bool last);

#endif /* KVT_FSUTIL_H */
