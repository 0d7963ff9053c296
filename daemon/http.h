/*
 * http.h - a tiny HTTP/1.0 server on a Unix socket for operators. It knows HTTP, not the
 * documents: main.c hands it the handler that answers GET /status and /metrics.
 *
 * The server runs on the daemon's libuv loop. It reads one request head per connection (at
 * most HTTP_HEAD_MAX bytes), answers it and closes the connection ("Connection: close").
 * GET and HEAD go to the handler; POST goes to the POST handler when its path is the one
 * registered with http_server_set_post() (an operator action: the parameters are in the query
 * string, a request body is not read); other methods and paths get 405, a malformed head 400, a
 * head larger than HTTP_HEAD_MAX 431. A connection that has not completed its exchange within the
 * timeout (HTTP_TIMEOUT_MS by default; HTTP_SHORT_TIMEOUT_MS for one accepted while three
 * quarters of the slots are taken) is closed.
 *
 * At most HTTP_CONN_MAX connections are served at once. When all slots are taken, a new
 * connection closes an idle one (its head not complete and nothing it sent waiting to be read) or
 * slow one (its answer unread for HTTP_SLOW_MS) and takes its slot: the oldest of the peer
 * holding the most (by user, then process: SO_PEERCRED); only when none is idle or slow is the
 * new one accepted and closed at once. So idle connections cannot lock operators out: an
 * operator's request is in the socket before the daemon gets to it, and a process that keeps
 * reopening slots evicts its own.
 *
 * Writes to a peer that has gone away raise SIGPIPE: the process must ignore SIGPIPE (the
 * daemon does at start-up).
 *
 * Threads: every function and the handler run on the loop thread.
 */
#ifndef KVT_HTTP_H
#define KVT_HTTP_H

#include <stddef.h>

#include <uv.h>

#define HTTP_HEAD_MAX 8192u        /* bytes of request head read at most */
#define HTTP_CONN_MAX 64u          /* connections served at once */
#define HTTP_TIMEOUT_MS 5000       /* a connection's time to send its request and get the answer */
#define HTTP_SHORT_TIMEOUT_MS 1000 /* the same when slots are short */
#define HTTP_SLOW_MS 500           /* an answer not read for this long may be dropped for another */

typedef struct http_server http_server_t;

/* Builds a response for path (NUL-terminated, without the query string) and query (the bytes
 * after '?', NUL-terminated, "" without one; both borrowed for the call). Returns 200 with *body
 * an owned malloc'd buffer of *len bytes (the server frees it; NULL with *len 0 is an empty body)
 * and *content_type a string that outlives the response (a literal), or 404. *body is NULL on
 * entry and whatever it points to on return is freed by the server; any other return value is
 * answered 500. Called on the loop thread for GET and HEAD (the body of a HEAD response is
 * dropped); the handler must not close the server. */
typedef int (*http_handler_cb)(void *arg, const char *path, const char *query, char **body,
                               size_t *len, const char **content_type);

/* A POST answered later (HTTP_DEFER): the handler's token for http_answer(). */
typedef struct http_answer http_answer_t;

#define HTTP_DEFER 1 /* a POST handler's return: it answers later, through http_answer() */

/* Answers POST on the registered path. query is the text after '?' (NUL-terminated, "" without
 * one; not decoded), borrowed for the call. Returns an HTTP status (200, 400, 404 or 409; any
 * other value is answered 500) with *body an owned malloc'd buffer (freed by the server, sent
 * with any of those codes) and *content_type a literal. Or HTTP_DEFER (0.2.6): the handler keeps
 * `later` and answers with http_answer() exactly once (the connection's timeout still runs; an
 * answer after the connection closed is dropped; while it waits the connection is never taken
 * for a newcomer, and nothing more is read from it); *body must stay NULL then. Without
 * HTTP_DEFER, `later` is the server's again when the handler returns. Called on the loop
 * thread. */
typedef int (*http_post_cb)(void *arg, const char *query, char **body, size_t *len,
                            const char **content_type, http_answer_t *later);

/* The deferred answer of a POST: as a handler's return (code, body owned and freed by the
 * server, content_type a literal). Frees later; when its connection has gone (closed by its
 * timeout, by the peer, or by http_server_close), only frees body. Any time after the handler
 * returned, also after http_server_close: later does not refer to the server. */
void http_answer(http_answer_t *later, int code, char *body, size_t len, const char *content_type);

/* Creates the server listening on the Unix socket at path with file mode `mode` (e.g. 0660).
 * A socket file already at path is removed first only when nothing accepts connections on it
 * (a leftover of a dead process); when a live server answers, returns -EADDRINUSE and leaves it
 * alone. Any other kind of file at path is left alone and gives -EADDRINUSE from bind. Returns
 * 0 and *out, or a negative errno / libuv error code (-ENAMETOOLONG for a path that does not
 * fit sockaddr_un, -ENOMEM). The loop is borrowed and must outlive the server; cb and arg are
 * borrowed until http_server_close. Failures up to and including bind/chmod/listen leave
 * nothing behind; a failure of uv_pipe_open or uv_listen after that (not expected on Linux)
 * frees the server in a close callback, so run the loop before uv_loop_close(). */
int http_server_new(uv_loop_t *loop, const char *path, unsigned mode, http_handler_cb cb, void *arg,
                    http_server_t **out);

/* Serves POST on path (copied; one path per server, a second call replaces it) with cb and arg
 * (borrowed until http_server_close). Returns 0 or -ENOMEM. */
int http_server_set_post(http_server_t *s, const char *path, http_post_cb cb, void *arg);

/* Sets the timeout for connections accepted from now on (0 = HTTP_TIMEOUT_MS). For tests. */
void http_server_set_timeout(http_server_t *s, unsigned ms);

/* Stops listening, closes every connection (responses not yet written are dropped), unlinks
 * the socket path and sets *s to NULL; NULL and *s == NULL are accepted. The handles and the
 * server's memory are freed in their close callbacks: the loop must run afterwards (after which
 * nothing of the server remains and uv_loop_close() can return 0). */
void http_server_close(http_server_t **s);

/* Request-head parsing: a pure function (no I/O, no allocation), exposed for tests and fuzzing. */

typedef enum {
    HTTP_PARSE_DONE, /* a complete head: *req is filled */
    HTTP_PARSE_MORE, /* a valid prefix of a head: read more bytes */
    HTTP_PARSE_BAD,  /* no continuation can make it a valid head */
} http_parse_result_t;

typedef struct http_request {
    const char *method; /* points into the parsed buffer; not NUL-terminated */
    size_t method_len;
    const char *path; /* the request target up to '?' (the query is not part of it) */
    size_t path_len;
    const char *query; /* the target after the first '?' (excluded), or NULL without one; not
                          NUL-terminated */
    size_t query_len;
    int version_minor; /* x in HTTP/1.x */
    size_t head_len;   /* bytes up to and including the blank line that ends the head */
} http_request_t;

/* Parses an HTTP/1.x request head in buf[0..len): the request line
 * `METHOD SP /target SP HTTP/1.x` ending with CRLF or LF, then header lines that are skipped
 * unread, up to an empty line (CRLF or LF). METHOD is an RFC 9110 token; the target starts with
 * '/' and holds visible ASCII only. Bytes after the head are not looked at. Borrows buf;
 * req may be written partly when the result is not HTTP_PARSE_DONE. */
http_parse_result_t http_parse_request(const char *buf, size_t len, http_request_t *req);

#endif /* KVT_HTTP_H */
