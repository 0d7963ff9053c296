/*
 * fsutil.c - file-system helpers (see fsutil.h).
 */
#include "fsutil.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

int fsutil_mkdirs(const char *path, bool last)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);

    if (n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0750) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (last && mkdir(buf, 0750) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}
