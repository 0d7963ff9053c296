/*
 * fsutil.c - file-system helpers (see fsutil.h).
 */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

int fsutil_private_dir(const char *path)
{
    struct stat st;

    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -errno;
    if (lstat(path, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
        return -EPERM;
    return 0;
}

int fsutil_write_atomic(const char *dir, const char *name, const void *data, size_t len)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    const char *p = data;
    int fd, dfd, rc = 0;

    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= sizeof tmp ||
        (size_t)snprintf(dst, sizeof dst, "%s/%s", dir, name) >= sizeof dst)
        return -ENAMETOOLONG;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -errno;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    if (fsync(dfd) != 0)
        rc = -errno;
    close(dfd);
    return rc;
}

int fsutil_read_file(const char *path, uint8_t **buf, size_t *len)
{
    struct stat st;
    uint8_t *b;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    b = malloc((size_t)st.st_size + 1);
    if (b == NULL) {
        close(fd);
        return -ENOMEM;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = got;
    return 0;
}

uint8_t *fsutil_buf_add(fsutil_buf_t *b, size_t n)
{
    if (b->oom)
        return NULL;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        uint8_t *nb;
        while (nc < b->len + n)
            nc *= 2;
        nb = realloc(b->b, nc);
        if (nb == NULL) {
            b->oom = true;
            return NULL;
        }
        b->b = nb;
        b->cap = nc;
    }
    b->len += n;
    return b->b + b->len - n;
}

bool fsutil_sysfs_mode_is(const char *path, const char *const *words)
{
    char buf[160] = "", want[40];
    FILE *f = fopen(path, "re");
    bool yes = false;

    if (f == NULL)
        return false;
    if (fgets(buf, sizeof buf, f) != NULL)
        for (; *words != NULL && !yes; words++) {
            snprintf(want, sizeof want, "[%s]", *words);
            yes = strstr(buf, want) != NULL;
        }
    fclose(f);
    return yes;
}

int fsutil_unix_listener_alive(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd, rc, err;

    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return 0;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    rc = connect(fd, (const struct sockaddr *)&sa, sizeof sa);
    err = rc == 0 ? 0 : errno;
    close(fd);
    if (rc == 0 || err == EAGAIN || err == EINPROGRESS)
        return 1;
    if (err == ENOENT || err == ECONNREFUSED)
        return 0;
    return -err;
}
