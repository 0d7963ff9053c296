/*
 * tool.c - the code the programs and the test harness share (see tool.h).
 *
 * Design: the HTTP client is the smallest that the daemon's status server needs: HTTP/1.0, one
 * request per connection, the response read until the server closes. The socket is non-blocking
 * and every wait is a poll() bounded by one deadline taken at the call, so a daemon that accepts
 * and never answers costs at most timeout_ms. Not curl (libcurl would do it, but one GET on a
 * local socket is fifty lines, and the harness must not depend on more than the daemon does).
 *
 * The config reader reads only the two keys a client needs; the daemon's config.c validates the
 * rest. Missing keys are reported as NULL so that each program keeps its own rule (kvtierctl
 * falls back to the daemon's defaults, kvtier-bench and kvtier-replay ask for the option).
 *
 * Threads: the program name and usage text are written once by tool_init() before other threads
 * exist and only read afterwards; nothing else is shared.
 */
#include "tool.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *tool_prog = "kvtier";
static const char *tool_usage = "";

void tool_init(const char *name, const char *usage)
{
    tool_prog = name;
    tool_usage = usage;
}

static void tool_verror(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static void tool_verror(const char *fmt, va_list ap)
{
    fprintf(stderr, "%s: ", tool_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void tool_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tool_verror(fmt, ap);
    va_end(ap);
}

int tool_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tool_verror(fmt, ap);
    va_end(ap);
    fputs(tool_usage, stderr);
    return TOOL_EXIT_USAGE;
}

void tool_kvt_error(const char *what, const char *obj, const kvt_client_t *c, int err)
{
    const char *text = c != NULL ? kvt_last_error(c) : "";

    tool_error("%s%s%s: %s%s%s%s", what, obj ? " " : "", obj ? obj : "", kvt_strerror(err),
               text[0] ? " (" : "", text, text[0] ? ")" : "");
}

/* --- numbers and words --- */

int tool_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;
    int base = 10;

    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        if (*s == '\0' || *s == '-' || *s == '+')
            return -1;
    }
    errno = 0;
    v = strtoull(s, &end, base);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int tool_opt_u64(const char *name, const char *val, uint64_t min, uint64_t max, uint64_t *out)
{
    if (val == NULL)
        return tool_usage_error("%s needs a value", name);
    if (tool_parse_u64(val, max, out) != 0 || *out < min)
        return tool_usage_error("%s: expected an integer in %" PRIu64 "..%" PRIu64 ", got '%s'",
                                name, min, max, val);
    return 0;
}

static const struct {
    const char *name;
    int value;
} tool_data_paths[] = {
    {"auto", KVT_DATA_PATH_AUTO},
    {"frames", KVT_DATA_PATH_FRAMES},
    {"shm", KVT_DATA_PATH_SHM},
};

int tool_data_path_parse(const char *word)
{
    for (size_t i = 0; i < sizeof tool_data_paths / sizeof tool_data_paths[0]; i++)
        if (strcmp(word, tool_data_paths[i].name) == 0)
            return tool_data_paths[i].value;
    return -1;
}

const char *tool_data_path_name(int data_path)
{
    for (size_t i = 0; i < sizeof tool_data_paths / sizeof tool_data_paths[0]; i++)
        if (tool_data_paths[i].value == data_path)
            return tool_data_paths[i].name;
    return "?";
}

/* --- the daemon's config file --- */

/* *out = a copy of v's string, or NULL when v is absent; 0 or -ENOMEM. */
static int dup_member(const json_t *v, char **out)
{
    if (out == NULL)
        return 0;
    *out = NULL;
    if (v == NULL)
        return 0;
    *out = strdup(json_string_value(v));
    return *out != NULL ? 0 : -ENOMEM;
}

int tool_config_endpoints(const char *path, char **endpoint, char **status_socket)
{
    json_error_t jerr;
    json_t *root, *server, *ep, *ss;
    int rc = -1;

    if (endpoint != NULL)
        *endpoint = NULL;
    if (status_socket != NULL)
        *status_socket = NULL;
    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        if (jerr.line > 0)
            tool_error("config %s: line %d: %s", path, jerr.line, jerr.text);
        else
            tool_error("config %s: %s", path, jerr.text);
        return -1;
    }
    server = json_object_get(root, "server");
    ep = json_object_get(server, "endpoint");
    ss = json_object_get(server, "status_socket");
    if ((ep != NULL && !json_is_string(ep)) || (ss != NULL && !json_is_string(ss))) {
        tool_error("config %s: server.%s: not a string", path,
                   ep != NULL && !json_is_string(ep) ? "endpoint" : "status_socket");
        goto out;
    }
    if (dup_member(ep, endpoint) != 0 || dup_member(ss, status_socket) != 0) {
        tool_error("config %s: %s", path, strerror(ENOMEM));
        if (endpoint != NULL) {
            free(*endpoint);
            *endpoint = NULL;
        }
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* --- HTTP on a Unix socket --- */

int64_t tool_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline; returns 0, or an errno value (ETIMEDOUT). */
static int wait_fd(int fd, short events, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = events};

    for (;;) {
        int64_t left = deadline - tool_now_ms();
        int r;
        if (left <= 0)
            return ETIMEDOUT;
        r = poll(&p, 1, (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return errno;
    }
}

/* Copies the Content-Type of the header block head (NUL-terminated, status line first). */
static void header_content_type(const char *head, char *out, size_t cap)
{
    out[0] = '\0';
    for (const char *h = strstr(head, "\r\n"); h != NULL; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "Content-Type:", 13) == 0) {
            const char *v = h + 2 + 13;
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)strcspn(v, "\r\n"), v);
            return;
        }
    }
}

int tool_http_request(const char *sock_path, const char *method, const char *url, int timeout_ms,
                      tool_http_reply_t *reply)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int64_t deadline = tool_now_ms() + timeout_ms;
    char req[2048], *buf = NULL, *sep; /* a URL of two percent-encoded 255-byte names fits */
    size_t cap = 1 << 14, n = 0, sent = 0;
    int fd, len, code, err = 0;

    if (strlen(sock_path) >= sizeof sa.sun_path)
        return ENAMETOOLONG;
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    len = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, url);
    if (len < 0 || (size_t)len >= sizeof req)
        return EINVAL;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS && errno != EAGAIN) {
            err = errno;
            goto out;
        }
        if ((err = wait_fd(fd, POLLOUT, deadline)) != 0)
            goto out;
    }
    while (sent < (size_t)len) {
        ssize_t w = send(fd, req + sent, (size_t)len - sent, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if ((err = wait_fd(fd, POLLOUT, deadline)) != 0)
                goto out;
            continue;
        }
        if (w < 0) {
            err = errno;
            goto out;
        }
        sent += (size_t)w;
    }
    buf = malloc(cap);
    if (buf == NULL) {
        err = ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t r;
        if (n + 1 == cap) {
            char *nb = cap >= TOOL_HTTP_MAX ? NULL : realloc(buf, cap * 2);
            if (nb == NULL) {
                err = cap >= TOOL_HTTP_MAX ? EFBIG : ENOMEM;
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if ((err = wait_fd(fd, POLLIN, deadline)) != 0)
                goto out;
            continue;
        }
        if (r < 0) {
            err = errno;
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (sscanf(buf, "HTTP/%*d.%*d %d", &code) != 1 || (sep = strstr(buf, "\r\n\r\n")) == NULL) {
        err = EBADMSG;
        goto out;
    }
    *sep = '\0';
    reply->code = code;
    header_content_type(buf, reply->content_type, sizeof reply->content_type);
    sep += 4;
    reply->body_len = n - (size_t)(sep - buf);
    memmove(buf, sep, reply->body_len + 1);
    reply->body = buf;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}

void tool_http_reply_free(tool_http_reply_t *reply)
{
    free(reply->body);
    reply->body = NULL;
    reply->body_len = 0;
}

int tool_status_get(const char *sock_path, int timeout_ms, json_t **doc, char **body)
{
    tool_http_reply_t r;
    json_error_t jerr;
    int err = tool_http_request(sock_path, "GET", "/status", timeout_ms, &r);

    if (err != 0) {
        tool_error("status %s: %s", sock_path, strerror(err));
        return -1;
    }
    if (r.code != 200) {
        tool_error("status %s: HTTP status %d", sock_path, r.code);
        tool_http_reply_free(&r);
        return -1;
    }
    *doc = json_loads(r.body, 0, &jerr);
    if (*doc == NULL) {
        tool_error("status %s: invalid JSON: %s", sock_path, jerr.text);
        tool_http_reply_free(&r);
        return -1;
    }
    if (body != NULL)
        *body = r.body;
    else
        tool_http_reply_free(&r);
    return 0;
}

json_t *tool_json_path(const json_t *obj, const char *dotted)
{
    char key[128];
    const char *p = dotted;

    while (obj != NULL && *p != '\0') {
        size_t k = strcspn(p, ".");
        if (k >= sizeof key)
            return NULL;
        memcpy(key, p, k);
        key[k] = '\0';
        obj = json_object_get(obj, key);
        p += k;
        if (*p == '.')
            p++;
    }
    return (json_t *)obj;
}

const char *tool_human_bytes(double b, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;

    if (b < 0)
        return "?";
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}
