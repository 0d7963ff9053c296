/*
 * http.c - the operators' HTTP/1.0 server on a Unix socket (see http.h).
 *
 * Design: one request per connection. A connection reads into a fixed HTTP_HEAD_MAX buffer
 * inside its own struct and re-runs the pure head parser (http_parse_request) over the whole
 * buffer after every read; the head is small, so this costs less than keeping parser state.
 * When the head is complete (or known bad, or too large) the connection stops reading, builds
 * the answer (the handler's body for GET/HEAD, a short text otherwise), writes header and body
 * in one uv_write and closes itself in the write callback. A per-connection timer bounds the
 * whole exchange, so a silent or slow peer cannot hold a slot.
 *
 * The listening socket is created with socket/bind/chmod/listen before it is handed to libuv
 * (uv_pipe_open), so that every failure in http_server_new before the libuv handle exists is
 * undone at once, without a loop iteration; the path length is checked instead of being
 * truncated. A socket file left at the path is removed only after a connect to it is refused.
 *
 * Bounds: at most HTTP_CONN_MAX connections are open (and as many more closing). When all are
 * open, an idle or slow one is closed to make room (http.h): the oldest of the peer that holds
 * the most of them (by user, then by process, from SO_PEERCRED), so that a local process
 * hogging the slots loses its own and an operator's one connection is not the one taken (0.2.4:
 * before, the oldest of all was, and a process reopening connections as fast as they were
 * closed could evict an operator's before the daemon had read its request). The list of
 * connections is kept newest first, so the oldest is the last one found. A connection whose peer
 * sent bytes the loop has not read yet (FIONREAD) is not idle, however long the loop took to get to
 * it. When none is, or when calloc fails, the pending connection is accepted into the server's one
 * spare handle and closed at once. While the spare is still closing, the connection waits in the
 * listener (libuv stops polling it until uv_accept) and is taken when the spare's close callback
 * runs.
 *
 * POST is served on one registered path only (the operators' admin action, POST /admin/drop):
 * its parameters are in the query string and the handler's answer, whatever its code, carries
 * the handler's body. The request size limit is the head buffer's, as for GET.
 *
 * Log events keep the names they had when this file was status.c ("status_accept_failed", ...):
 * operators grep for them.
 *
 * Threads: the loop thread only. Invariants: handles are freed only in their close callbacks; a
 * connection is freed after both its pipe and its timer have closed; the server is freed when it
 * is closing and its listener, spare and every connection have closed.
 */
#include "http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fsutil.h"
#include "log.h"

#define HTTP_BACKLOG 128
#define HTTP_CTYPE_MAX 128 /* longest content type a handler may return */

typedef struct http_conn http_conn_t;

/* The token of a deferred POST answer: its connection, NULL once that closed. Owned by the
 * handler that deferred, freed by http_answer(). */
struct http_answer {
    http_conn_t *c;
};

struct http_conn {
    uv_pipe_t pipe;
    uv_timer_t timer;
    uv_write_t wreq;
    http_server_t *srv;
    http_conn_t *prev, *next; /* the server's list of connections */
    int open_handles;         /* handles not yet through their close callback */
    int closing;
    int responding;       /* the answer is being written */
    uint64_t accepted_ms; /* the loop's time at accept */
    uid_t uid;            /* the peer (SO_PEERCRED at accept; -1 unknown) */
    pid_t pid;
    char *body;           /* owned response body from the handler, or NULL */
    http_answer_t *later; /* a POST answered later (HTTP_DEFER), or NULL */
    size_t len;           /* bytes in head */
    char hdr[HTTP_CTYPE_MAX + 160];
    char head[HTTP_HEAD_MAX];
};

struct http_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    uv_pipe_t spare; /* accepts a connection only to close it */
    http_handler_cb cb;
    void *arg;
    char *post_path; /* the one path POST is served on, or NULL */
    http_post_cb post_cb;
    void *post_arg;
    char *path;
    unsigned timeout_ms;
    http_conn_t *conns; /* newest first */
    unsigned nconns;    /* connection structs alive, open or closing */
    unsigned nopen;     /* of those, not closing */
    int listener_open;
    int spare_busy;     /* spare is closing */
    int accept_pending; /* a connection waits in the listener for uv_accept */
    int closing;
};

static void http_accept(http_server_t *s);

/* ---- request head parser ---- */

static int http_is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* A line end (CRLF or LF) at *i: advances *i past it. */
static http_parse_result_t http_parse_eol(const char *buf, size_t len, size_t *i)
{
    if (*i < len && buf[*i] == '\r')
        (*i)++;
    if (*i == len)
        return HTTP_PARSE_MORE;
    if (buf[*i] != '\n')
        return HTTP_PARSE_BAD;
    (*i)++;
    return HTTP_PARSE_DONE;
}

http_parse_result_t http_parse_request(const char *buf, size_t len, http_request_t *req)
{
    static const char proto[] = "HTTP/1.";
    http_parse_result_t r;
    const char *query = NULL, *nl;
    size_t i = 0, k;

    memset(req, 0, sizeof *req);
    req->method = buf;
    while (i < len && http_is_tchar((unsigned char)buf[i]))
        i++;
    if (i == len)
        return HTTP_PARSE_MORE;
    if (i == 0 || buf[i] != ' ')
        return HTTP_PARSE_BAD;
    req->method_len = i++;

    if (i == len)
        return HTTP_PARSE_MORE;
    if (buf[i] != '/')
        return HTTP_PARSE_BAD;
    req->path = buf + i;
    for (; i < len && (unsigned char)buf[i] > ' ' && (unsigned char)buf[i] < 0x7f; i++)
        if (buf[i] == '?' && query == NULL)
            query = buf + i;
    if (i == len)
        return HTTP_PARSE_MORE;
    if (buf[i] != ' ')
        return HTTP_PARSE_BAD;
    req->path_len = (size_t)((query != NULL ? query : buf + i) - req->path);
    if (query != NULL) {
        req->query = query + 1;
        req->query_len = (size_t)(buf + i - req->query);
    }
    i++;

    for (k = 0; k < sizeof proto - 1; k++, i++) {
        if (i == len)
            return HTTP_PARSE_MORE;
        if (buf[i] != proto[k])
            return HTTP_PARSE_BAD;
    }
    if (i == len)
        return HTTP_PARSE_MORE;
    if (buf[i] < '0' || buf[i] > '9')
        return HTTP_PARSE_BAD;
    req->version_minor = buf[i++] - '0';
    r = http_parse_eol(buf, len, &i);
    if (r != HTTP_PARSE_DONE)
        return r;

    /* Header lines are skipped unread up to the empty line. */
    for (;;) {
        if (i == len)
            return HTTP_PARSE_MORE;
        if (buf[i] == '\r' || buf[i] == '\n') {
            r = http_parse_eol(buf, len, &i);
            if (r == HTTP_PARSE_DONE)
                req->head_len = i;
            return r;
        }
        nl = memchr(buf + i, '\n', len - i);
        if (nl == NULL)
            return HTTP_PARSE_MORE;
        i = (size_t)(nl - buf) + 1;
    }
}

/* ---- lifetime ---- */

static void http_maybe_free(http_server_t *s)
{
    if (!s->closing || s->listener_open || s->spare_busy || s->nconns > 0)
        return;
    free(s->post_path);
    free(s->path);
    free(s);
}

static void http_listener_close_cb(uv_handle_t *h)
{
    http_server_t *s = h->data;

    s->listener_open = 0;
    http_maybe_free(s);
}

static void http_spare_close_cb(uv_handle_t *h)
{
    http_server_t *s = h->data;

    s->spare_busy = 0;
    if (s->closing) {
        http_maybe_free(s);
        return;
    }
    if (s->accept_pending) {
        s->accept_pending = 0;
        http_accept(s);
    }
}

static void http_conn_close_cb(uv_handle_t *h)
{
    http_conn_t *c = h->data;
    http_server_t *s = c->srv;

    if (--c->open_handles > 0)
        return;
    if (c->later != NULL)
        c->later->c = NULL; /* its answer comes to nobody */
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->nconns--;
    free(c->body);
    free(c);
    http_maybe_free(s);
}

static void http_conn_close(http_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->srv->nopen--;
    uv_close((uv_handle_t *)&c->pipe, http_conn_close_cb);
    uv_close((uv_handle_t *)&c->timer, http_conn_close_cb);
}

/* ---- responses ---- */

static const char *http_reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 431:
        return "Request Header Fields Too Large";
    default:
        return "Internal Server Error";
    }
}

static void http_write_cb(uv_write_t *req, int status)
{
    http_conn_close(req->data);
}

/* Writes the response (the body only when send_body) and closes the connection once written.
 * body is borrowed: it is a literal or c->body. */
static void http_respond(http_conn_t *c, int code, const char *ctype, const char *body, size_t len,
                         int send_body)
{
    uv_buf_t bufs[2];
    unsigned nbufs = 1;
    int n, err;

    uv_read_stop((uv_stream_t *)&c->pipe);
    c->responding = 1;
    n = snprintf(c->hdr, sizeof c->hdr,
                 "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                 "Connection: close\r\n\r\n",
                 code, http_reason(code), ctype, len, code == 405 ? "Allow: GET, HEAD\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof c->hdr) {
        http_conn_close(c); /* unreachable: ctype is at most HTTP_CTYPE_MAX long */
        return;
    }
    bufs[0] = uv_buf_init(c->hdr, (unsigned)n);
    if (send_body && len > 0)
        bufs[nbufs++] = uv_buf_init((char *)body, (unsigned)len);
    c->wreq.data = c;
    err = uv_write(&c->wreq, (uv_stream_t *)&c->pipe, bufs, nbufs, http_write_cb);
    if (err < 0) {
        log_warn("status_write_failed", "error=%s", uv_strerror(err));
        http_conn_close(c);
    }
}

static void http_respond_text(http_conn_t *c, int code, int send_body)
{
    const char *text;

    switch (code) {
    case 400:
        text = "bad request\n";
        break;
    case 404:
        text = "not found\n";
        break;
    case 405:
        text = "method not allowed\n";
        break;
    case 431:
        text = "request head too large\n";
        break;
    default:
        code = 500;
        text = "internal error\n";
        break;
    }
    http_respond(c, code, "text/plain", text, strlen(text), send_body);
}

/* A POST handler's answer, body and all (taken: freed with the connection), for any code. */
static void post_answer(http_conn_t *c, int code, char *body, size_t len, const char *ctype)
{
    c->body = body;
    if (body == NULL)
        len = 0;
    if (code != 200 && code != 400 && code != 404 && code != 409)
        code = 500;
    if (code == 500 || ctype == NULL || strlen(ctype) > HTTP_CTYPE_MAX || len > UINT32_MAX) {
        http_respond_text(c, 500, 1);
        return;
    }
    http_respond(c, code, ctype, body, len, 1);
}

/* POST on the registered path: the handler's answer, now or later (HTTP_DEFER). */
static void http_serve_post(http_conn_t *c, const http_request_t *req)
{
    http_server_t *s = c->srv;
    const char *ctype = NULL;
    char query[HTTP_HEAD_MAX];
    char *body = NULL;
    size_t len = 0;
    int code;

    if (s->post_path == NULL || strlen(s->post_path) != req->path_len ||
        memcmp(s->post_path, req->path, req->path_len) != 0) {
        http_respond_text(c, 405, 1);
        return;
    }
    memcpy(query, req->query != NULL ? req->query : "", req->query_len);
    query[req->query_len] = '\0';
    c->later = malloc(sizeof *c->later);
    if (c->later == NULL) {
        http_respond_text(c, 500, 1);
        return;
    }
    c->later->c = c;
    code = s->post_cb(s->post_arg, query, &body, &len, &ctype, c->later);
    if (code == HTTP_DEFER) {
        free(body);                            /* none by the contract */
        uv_read_stop((uv_stream_t *)&c->pipe); /* nothing more is read: the answer is all */
        return;
    }
    free(c->later);
    c->later = NULL;
    post_answer(c, code, body, len, ctype);
}

void http_answer(http_answer_t *later, int code, char *body, size_t len, const char *content_type)
{
    http_conn_t *c = later->c;

    free(later);
    if (c != NULL)
        c->later = NULL; /* also when closing: its close callback must not touch the token */
    if (c == NULL || c->closing) {
        free(body);
        return;
    }
    post_answer(c, code, body, len, content_type);
}

static void http_serve(http_conn_t *c, const http_request_t *req)
{
    http_server_t *s = c->srv;
    const char *ctype = NULL;
    char *body = NULL, *path, *query = NULL;
    size_t len = 0;
    int head, code;

    if (req->method_len == 4 && memcmp(req->method, "POST", 4) == 0) {
        http_serve_post(c, req);
        return;
    }
    head = req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0;
    if (!head && !(req->method_len == 3 && memcmp(req->method, "GET", 3) == 0)) {
        http_respond_text(c, 405, 1);
        return;
    }
    /* The bytes after the path and the query (' ' or '?') are in c->head and already parsed:
     * terminate there. */
    path = c->head + (req->path - c->head);
    path[req->path_len] = '\0';
    if (req->query != NULL) {
        query = c->head + (req->query - c->head);
        query[req->query_len] = '\0';
    }
    code = s->cb(s->arg, path, query != NULL ? query : "", &body, &len, &ctype);
    c->body = body;
    if (body == NULL)
        len = 0;
    if (code == 200 && ctype == NULL)
        ctype = "application/octet-stream";
    if (code == 200 && (strlen(ctype) > HTTP_CTYPE_MAX || len > UINT32_MAX)) {
        log_error("status_handler_bad_response", "path=%s ctype_len=%zu len=%zu", path,
                  strlen(ctype), len);
        code = 500;
    }
    if (code == 200)
        http_respond(c, 200, ctype, body, len, !head);
    else
        http_respond_text(c, code == 404 ? 404 : 500, !head);
}

/* ---- connections ---- */

static void http_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    http_conn_t *c = h->data;

    /* Reading stops before the head buffer is full, so this is never empty. */
    *buf = uv_buf_init(c->head + c->len, (unsigned)(HTTP_HEAD_MAX - c->len));
}

static void http_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    http_conn_t *c = st->data;
    http_request_t req;

    if (nread == 0)
        return;
    if (nread < 0) { /* EOF or error before a whole head: nobody to answer */
        http_conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    switch (http_parse_request(c->head, c->len, &req)) {
    case HTTP_PARSE_DONE:
        http_serve(c, &req);
        break;
    case HTTP_PARSE_BAD:
        http_respond_text(c, 400, 1);
        break;
    case HTTP_PARSE_MORE:
        if (c->len == HTTP_HEAD_MAX)
            http_respond_text(c, 431, 1);
        break;
    }
}

static void http_timeout_cb(uv_timer_t *t)
{
    http_conn_close(t->data);
}

/* Accepts the pending connection into the spare handle and closes it. */
static void http_refuse(http_server_t *s)
{
    int err;

    if (s->spare_busy) {
        s->accept_pending = 1; /* taken in http_spare_close_cb */
        return;
    }
    uv_pipe_init(s->loop, &s->spare, 0);
    s->spare.data = s;
    s->spare_busy = 1;
    err = uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&s->spare);
    if (err < 0)
        log_warn("status_accept_failed", "error=%s", uv_strerror(err));
    else
        log_debug("status_refused", "connections=%u", s->nconns);
    uv_close((uv_handle_t *)&s->spare, http_spare_close_cb);
}

/* Whether c may be closed for a new connection at now: it is idle (still reading its head, and
 * nothing it sent waits to be read: an operator's request that the loop has not read yet is not
 * idle, however long the loop took to get to it) or slow (its answer has waited HTTP_SLOW_MS to be
 * read). */
static int http_evictable(const http_conn_t *c, uint64_t now)
{
    uv_os_fd_t fd;
    int pending = 0;

    if (c->closing || c->later != NULL)
        return 0; /* a deferred POST waits for its answer (its timeout still runs) */
    if (c->responding)
        return now - c->accepted_ms >= HTTP_SLOW_MS;
    if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) == 0 && ioctl(fd, FIONREAD, &pending) == 0 &&
        pending > 0)
        return 0;
    return 1;
}

/* All slots are taken: closes an idle or slow connection, if any: the oldest of the user
 * holding the most evictable ones and, within that user, of its process holding the most. One
 * pass looks at each connection once (FIONREAD is a system call); the counting is over that
 * snapshot, at most HTTP_CONN_MAX entries. */
static void http_evict(http_server_t *s)
{
    uint64_t now = uv_now(s->loop);
    http_conn_t *cand[HTTP_CONN_MAX * 2], *victim = NULL;
    unsigned n = 0, best_u = 0, best_p = 0;

    for (http_conn_t *c = s->conns; c != NULL && n < HTTP_CONN_MAX * 2; c = c->next)
        if (http_evictable(c, now))
            cand[n++] = c; /* newest first */
    for (unsigned i = 0; i < n; i++) {
        unsigned nu = 0, np = 0;
        for (unsigned k = 0; k < n; k++) {
            nu += cand[k]->uid == cand[i]->uid;
            np += cand[k]->uid == cand[i]->uid && cand[k]->pid == cand[i]->pid;
        }
        /* on a tie the later one found is older */
        if (nu > best_u || (nu == best_u && np >= best_p)) {
            victim = cand[i];
            best_u = nu;
            best_p = np;
        }
    }
    if (victim == NULL)
        return;
    log_debug("status_evicted", "age_ms=%" PRIu64 " bytes_read=%zu", now - victim->accepted_ms,
              victim->len);
    http_conn_close(victim);
}

static void http_accept(http_server_t *s)
{
    http_conn_t *c = NULL;
    unsigned timeout;
    int err;

    if (s->nopen >= HTTP_CONN_MAX)
        http_evict(s);
    if (s->nopen < HTTP_CONN_MAX && s->nconns < 2 * HTTP_CONN_MAX)
        c = calloc(1, sizeof *c);
    if (c == NULL) {
        http_refuse(s);
        return;
    }
    c->srv = s;
    uv_pipe_init(s->loop, &c->pipe, 0);
    uv_timer_init(s->loop, &c->timer);
    c->pipe.data = c;
    c->timer.data = c;
    c->open_handles = 2;
    c->accepted_ms = uv_now(s->loop);
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    s->nopen++;

    /* slots short: this one gets less time to finish */
    timeout = s->timeout_ms;
    if (s->nopen > HTTP_CONN_MAX * 3 / 4 && timeout > HTTP_SHORT_TIMEOUT_MS)
        timeout = HTTP_SHORT_TIMEOUT_MS;
    err = uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->pipe);
    c->uid = (uid_t)-1;
    c->pid = -1;
    if (err == 0) {
        struct ucred cr;
        socklen_t crlen = sizeof cr;
        uv_os_fd_t fd;
        if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0) {
            c->uid = cr.uid;
            c->pid = cr.pid;
        }
        err = uv_timer_start(&c->timer, http_timeout_cb, timeout, 0);
    }
    if (err == 0)
        err = uv_read_start((uv_stream_t *)&c->pipe, http_alloc_cb, http_read_cb);
    if (err < 0) {
        log_warn("status_accept_failed", "error=%s", uv_strerror(err));
        http_conn_close(c);
    }
}

static void http_connection_cb(uv_stream_t *listener, int status)
{
    http_server_t *s = listener->data;

    if (status < 0) {
        log_warn("status_accept_failed", "error=%s", uv_strerror(status));
        return;
    }
    http_accept(s);
}

/* ---- server ---- */

/* Removes a socket file at sa's path that nobody listens on. */
static int http_clear_stale(const struct sockaddr_un *sa)
{
    int alive = fsutil_unix_listener_alive(sa->sun_path);
    struct stat st;

    if (alive != 0)
        return alive > 0 ? -EADDRINUSE : alive; /* a live server (or its backlog is full) */
    if (lstat(sa->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
        return 0; /* gone, or not ours to remove: bind reports EADDRINUSE */
    if (unlink(sa->sun_path) < 0 && errno != ENOENT)
        return -errno;
    log_info("status_stale_socket_removed", "path=%s", sa->sun_path);
    return 0;
}

int http_server_new(uv_loop_t *loop, const char *path, unsigned mode, http_handler_cb cb, void *arg,
                    http_server_t **out)
{
    struct sockaddr_un sa;
    http_server_t *s;
    int fd, err;

    *out = NULL;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (path[0] == '\0')
        return -EINVAL;
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);

    s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    s->path = strdup(path);
    if (s->path == NULL) {
        err = -ENOMEM;
        goto fail_path;
    }
    s->loop = loop;
    s->cb = cb;
    s->arg = arg;
    s->timeout_ms = HTTP_TIMEOUT_MS;

    err = http_clear_stale(&sa);
    if (err < 0)
        goto fail_stale;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = -errno;
        goto fail_socket;
    }
    if (bind(fd, (const struct sockaddr *)&sa, sizeof sa) < 0) {
        err = -errno;
        goto fail_bind;
    }
    /* Before listen: nobody can connect while the mode is still the umask's. */
    if (chmod(path, mode) < 0 || listen(fd, HTTP_BACKLOG) < 0) {
        err = -errno;
        goto fail_listen;
    }

    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    s->listener_open = 1;
    err = uv_pipe_open(&s->listener, fd);
    if (err < 0)
        close(fd);
    if (err == 0)
        err = uv_listen((uv_stream_t *)&s->listener, HTTP_BACKLOG, http_connection_cb);
    if (err < 0) {
        /* The handle exists: its memory goes in the close callback (see http.h). */
        unlink(path);
        s->closing = 1;
        uv_close((uv_handle_t *)&s->listener, http_listener_close_cb);
        return err;
    }
    *out = s;
    return 0;

fail_listen:
    unlink(path);
fail_bind:
    close(fd);
fail_socket:
fail_stale:
    free(s->path);
fail_path:
    free(s);
    return err;
}

int http_server_set_post(http_server_t *s, const char *path, http_post_cb cb, void *arg)
{
    char *p = strdup(path);

    if (p == NULL)
        return -ENOMEM;
    free(s->post_path);
    s->post_path = p;
    s->post_cb = cb;
    s->post_arg = arg;
    return 0;
}

void http_server_set_timeout(http_server_t *s, unsigned ms)
{
    s->timeout_ms = ms > 0 ? ms : HTTP_TIMEOUT_MS;
}

void http_server_close(http_server_t **sp)
{
    http_server_t *s = sp != NULL ? *sp : NULL;
    http_conn_t *c;

    if (s == NULL)
        return;
    *sp = NULL;
    s->closing = 1;
    uv_close((uv_handle_t *)&s->listener, http_listener_close_cb);
    for (c = s->conns; c != NULL; c = c->next)
        http_conn_close(c);
    if (unlink(s->path) < 0 && errno != ENOENT)
        log_warn("status_unlink_failed", "path=%s error=%s", s->path, strerror(errno));
}
