/*
 * test_status.c - the status HTTP server (daemon/http.c) and its request-head parser.
 *
 * Server tests run a real libuv loop in the test's thread with a status server on a socket in a
 * fresh temporary directory, and a client thread that connects with plain AF_UNIX sockets,
 * sends raw bytes and reads the answer to EOF. The client stores what it saw; assertions run
 * in the test's thread after the loop has finished. The client ends a test by waking the loop
 * (uv_async), whose callback closes the server; every test then checks that uv_loop_close()
 * returns 0 and that the socket file is gone (the directory can be removed).
 *
 * Client sockets have a 30 s receive timeout only so that a broken server fails a test instead
 * of hanging it; no assertion depends on timing.
 */
#include "check_main.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http.h"

#define STATUS_JSON "{\"ok\":true}\n"
#define BIG_LEN (1u << 20)
#define MAX_REPLIES 8

typedef struct {
    char *data; /* NUL-terminated copy of what was read */
    size_t len;
} reply_t;

typedef struct harness harness_t;

struct harness {
    uv_loop_t loop;
    uv_async_t done;
    http_server_t *srv;
    char dir[64];
    char path[96];
    pthread_t thread;
    void (*client)(harness_t *h);
    int signaled; /* the client woke the loop itself */
    /* Loop thread (the test's thread). */
    int calls;
    char last_path[256];
    char queries[4][64]; /* the query of the first 4 handler calls */
    int post_calls;
    char last_query[256];
    http_answer_t *later[2]; /* deferred POST answers (test_post_deferred) */
    uv_timer_t answer_timer;
    int answer_at_soon; /* the "soon" POST starts answer_timer with answer_cb */
    int close_at_soon;  /* ... or with close_then_answer_cb */
    /* Client thread; read after the join. */
    reply_t rep[MAX_REPLIES];
    int n[8];
};

/* ---- handler (loop thread) ---- */

static int test_handler(void *arg, const char *path, const char *query, char **body, size_t *len,
                        const char **content_type)
{
    harness_t *h = arg;

    if (h->calls < 4)
        snprintf(h->queries[h->calls], sizeof h->queries[0], "%s", query);
    h->calls++;
    snprintf(h->last_path, sizeof h->last_path, "%s", path);
    if (strcmp(path, "/status") == 0) {
        *body = strdup(STATUS_JSON);
        if (*body == NULL)
            return 500;
        *len = strlen(STATUS_JSON);
        *content_type = "application/json";
        return 200;
    }
    if (strcmp(path, "/big") == 0) {
        size_t i;

        *body = malloc(BIG_LEN);
        if (*body == NULL)
            return 500;
        for (i = 0; i < BIG_LEN; i++)
            (*body)[i] = (char)('a' + i % 23);
        *len = BIG_LEN;
        *content_type = "text/plain";
        return 200;
    }
    if (strcmp(path, "/empty") == 0) {
        *content_type = "text/plain";
        return 200;
    }
    if (strcmp(path, "/fail") == 0)
        return -EIO;
    return 404;
}

/* ---- client side (client thread) ---- */

static int client_connect(const char *path)
{
    struct sockaddr_un sa;
    struct timeval tv = {.tv_sec = 30};
    int fd;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends all of buf, ignoring a peer that closed early (its answer is still readable). */
static void client_send(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t n;

    while (len > 0) {
        n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* Reads until EOF or error. */
static reply_t client_read_all(int fd)
{
    reply_t r = {NULL, 0};
    size_t cap = 0;
    ssize_t n;

    for (;;) {
        if (cap - r.len < 4096) {
            cap = cap ? 2 * cap : 8192;
            r.data = realloc(r.data, cap + 1);
            if (r.data == NULL)
                abort();
        }
        n = recv(fd, r.data + r.len, cap - r.len, 0);
        if (n <= 0)
            break;
        r.len += (size_t)n;
    }
    r.data[r.len] = '\0';
    return r;
}

static reply_t client_exchange(const char *path, const void *req, size_t len)
{
    reply_t r = {NULL, 0};
    int fd = client_connect(path);

    if (fd < 0) {
        r.data = strdup("connect failed");
        r.len = strlen(r.data);
        return r;
    }
    client_send(fd, req, len);
    r = client_read_all(fd);
    close(fd);
    return r;
}

static reply_t client_request(harness_t *h, const char *req)
{
    return client_exchange(h->path, req, strlen(req));
}

static void *client_main(void *arg)
{
    harness_t *h = arg;

    h->client(h);
    if (!h->signaled)
        uv_async_send(&h->done);
    return NULL;
}

/* Wakes the loop so that it closes the server; the client may go on reading afterwards. */
static void client_finish(harness_t *h)
{
    h->signaled = 1;
    uv_async_send(&h->done);
}

/* ---- harness (test thread) ---- */

static void done_cb(uv_async_t *a)
{
    harness_t *h = a->data;

    http_server_close(&h->srv);
    ck_assert_ptr_null(h->srv);
    uv_close((uv_handle_t *)&h->done, NULL);
}

static void harness_init(harness_t *h)
{
    memset(h, 0, sizeof *h);
    snprintf(h->dir, sizeof h->dir, "/tmp/kvt_status_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(h->dir));
    snprintf(h->path, sizeof h->path, "%s/status.sock", h->dir);
    ck_assert_int_eq(uv_loop_init(&h->loop), 0);
}

static void harness_start(harness_t *h, void (*client)(harness_t *))
{
    if (h->srv == NULL)
        ck_assert_int_eq(http_server_new(&h->loop, h->path, 0660, test_handler, h, &h->srv), 0);
    ck_assert_ptr_nonnull(h->srv);
    ck_assert_int_eq(uv_async_init(&h->loop, &h->done, done_cb), 0);
    h->done.data = h;
    h->client = client;
    ck_assert_int_eq(pthread_create(&h->thread, NULL, client_main, h), 0);
}

/* Runs the loop until the server is closed, then checks that nothing is left. */
static void harness_finish(harness_t *h)
{
    struct stat st;

    ck_assert_int_eq(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(pthread_join(h->thread, NULL), 0);
    ck_assert_int_eq(uv_loop_close(&h->loop), 0);
    ck_assert_int_eq(lstat(h->path, &st), -1);
    ck_assert_int_eq(errno, ENOENT);
    ck_assert_int_eq(rmdir(h->dir), 0);
}

static void harness_free(harness_t *h)
{
    int i;

    for (i = 0; i < MAX_REPLIES; i++)
        free(h->rep[i].data);
}

/* ---- parser ---- */

static const char full_head[] = "GET /status?verbose=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";

START_TEST(test_parse_complete)
{
    static const char lf_head[] = "HEAD /metrics HTTP/1.0\nUser-Agent: t\n\nBODY";
    static const char mixed[] = "PUT /a%20b HTTP/1.9\r\nX: y\n\r\n";
    static const char bare[] = "GET / HTTP/1.0\r\n\r\n";
    http_request_t req;

    ck_assert_int_eq(http_parse_request(full_head, strlen(full_head), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.head_len, strlen(full_head));
    ck_assert_uint_eq(req.method_len, 3);
    ck_assert_int_eq(memcmp(req.method, "GET", 3), 0);
    ck_assert_ptr_eq(req.path, full_head + 4);
    ck_assert_uint_eq(req.path_len, 7); /* "/status" */
    ck_assert_ptr_eq(req.query, full_head + 12);
    ck_assert_uint_eq(req.query_len, 9); /* "verbose=1" */
    ck_assert_int_eq(req.version_minor, 1);

    ck_assert_int_eq(http_parse_request(lf_head, strlen(lf_head), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.head_len, strlen(lf_head) - 4); /* "BODY" is not part of the head */
    ck_assert_uint_eq(req.method_len, 4);
    ck_assert_int_eq(memcmp(req.path, "/metrics", 8), 0);
    ck_assert_uint_eq(req.path_len, 8);
    ck_assert_int_eq(req.version_minor, 0);

    ck_assert_int_eq(http_parse_request(mixed, strlen(mixed), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.head_len, strlen(mixed));
    ck_assert_uint_eq(req.method_len, 3);
    ck_assert_uint_eq(req.path_len, 6); /* "/a%20b": no decoding */
    ck_assert_int_eq(req.version_minor, 9);

    ck_assert_int_eq(http_parse_request(bare, strlen(bare), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.head_len, strlen(bare));
    ck_assert_uint_eq(req.path_len, 1);
    ck_assert_ptr_null(req.query);
    ck_assert_uint_eq(req.query_len, 0);
}
END_TEST

START_TEST(test_parse_need_more)
{
    static const char lf_head[] = "GET /x HTTP/1.0\nA: b\n\n";
    http_request_t req;
    size_t i;

    /* Every proper prefix of a valid head, including the empty one, asks for more. */
    for (i = 0; i < strlen(full_head); i++)
        ck_assert_int_eq(http_parse_request(full_head, i, &req), HTTP_PARSE_MORE);
    for (i = 0; i < strlen(lf_head); i++)
        ck_assert_int_eq(http_parse_request(lf_head, i, &req), HTTP_PARSE_MORE);
    ck_assert_int_eq(http_parse_request(lf_head, strlen(lf_head), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.head_len, strlen(lf_head));
}
END_TEST

START_TEST(test_parse_invalid)
{
    static const char *const bad[] = {
        "GARBAGE\r\n",
        " GET / HTTP/1.0\r\n\r\n",
        "\r\nGET / HTTP/1.0\r\n\r\n",
        "GET  / HTTP/1.0\r\n\r\n",
        "GET status HTTP/1.0\r\n\r\n",
        "GET http://x/status HTTP/1.0\r\n\r\n",
        "GET /a\tb HTTP/1.0\r\n\r\n",
        "GET /a\x7f HTTP/1.0\r\n\r\n",
        "GET /\xc3\xa9 HTTP/1.0\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "GET / HTTP/1.x\r\n\r\n",
        "GET / HTTP/1.10\r\n\r\n",
        "GET / http/1.0\r\n\r\n",
        "GET / HTTP/1.0 \r\n\r\n",
        "GET / HTTP/1.0\rX\n\r\n",
        "GET /\r\n\r\n",
        "G(T / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.0\r\nA: b\r\n\rX",
    };
    static const char nul[] = "GE\0T / HTTP/1.0\r\n\r\n";
    http_request_t req;
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(http_parse_request(bad[i], strlen(bad[i]), &req) == HTTP_PARSE_BAD,
                      "not rejected: case %zu", i);
    ck_assert_int_eq(http_parse_request(nul, sizeof nul - 1, &req), HTTP_PARSE_BAD);
    /* Known bad before the line ends: no need to wait for more bytes. */
    ck_assert_int_eq(http_parse_request("GET x", 5, &req), HTTP_PARSE_BAD);
    ck_assert_int_eq(http_parse_request("GET / HTTX", 10, &req), HTTP_PARSE_BAD);
}
END_TEST

/* ---- server ---- */

#define RESP_STATUS                                                                                \
    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"                  \
    "Connection: close\r\n\r\n" STATUS_JSON

static void client_basic(harness_t *h)
{
    h->rep[0] = client_request(h, "GET /status HTTP/1.1\r\nHost: x\r\nUser-Agent: curl\r\n"
                                  "Accept: */*\r\n\r\n");
    h->rep[1] = client_request(h, "GET /status?verbose=1 HTTP/1.0\n\n");
    h->rep[2] = client_request(h, "HEAD /status HTTP/1.0\r\n\r\n");
    h->rep[3] = client_request(h, "GET /empty HTTP/1.0\r\n\r\n");
}

START_TEST(test_get)
{
    harness_t h;

    harness_init(&h);
    harness_start(&h, client_basic);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    ck_assert_str_eq(h.rep[1].data, RESP_STATUS);
    ck_assert_str_eq(h.rep[2].data, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 12\r\nConnection: close\r\n\r\n");
    ck_assert_str_eq(h.rep[3].data, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
                                    "Content-Length: 0\r\nConnection: close\r\n\r\n");
    ck_assert_int_eq(h.calls, 4);
    ck_assert_str_eq(h.last_path, "/empty");
    /* the query reaches the handler apart from the path */
    ck_assert_str_eq(h.queries[0], "");
    ck_assert_str_eq(h.queries[1], "verbose=1");
    ck_assert_str_eq(h.queries[2], "");
    harness_free(&h);
}
END_TEST

static void client_errors(harness_t *h)
{
    h->rep[0] = client_request(h, "GET /nope HTTP/1.0\r\n\r\n");
    h->rep[1] = client_request(h, "POST /status HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi");
    h->rep[2] = client_request(h, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n");
    h->rep[3] = client_request(h, "GET /fail HTTP/1.0\r\n\r\n");
    h->rep[4] = client_request(h, "HEAD /nope HTTP/1.0\r\n\r\n");
    h->rep[5] = client_request(h, "GET /status?x HTTP/1.0\r\n\r\n");
}

START_TEST(test_error_codes)
{
    harness_t h;

    harness_init(&h);
    harness_start(&h, client_errors);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                                    "Content-Length: 10\r\nConnection: close\r\n\r\nnot found\n");
    ck_assert_str_eq(h.rep[1].data,
                     "HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain\r\n"
                     "Content-Length: 19\r\nAllow: GET, HEAD\r\nConnection: close\r\n\r\n"
                     "method not allowed\n");
    ck_assert_str_eq(h.rep[2].data, "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n"
                                    "Content-Length: 12\r\nConnection: close\r\n\r\nbad request\n");
    ck_assert_str_eq(h.rep[3].data,
                     "HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                     "Content-Length: 15\r\nConnection: close\r\n\r\ninternal error\n");
    ck_assert_str_eq(h.rep[4].data, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                                    "Content-Length: 10\r\nConnection: close\r\n\r\n");
    ck_assert_str_eq(h.rep[5].data, RESP_STATUS);
    /* POST and garbage never reach the handler. */
    ck_assert_int_eq(h.calls, 4);
    ck_assert_str_eq(h.last_path, "/status");
    harness_free(&h);
}
END_TEST

/* POST on the registered path only: the handler gets the raw query and its answer, with its
 * code and body, goes out as it is; POST elsewhere is 405 and reaches no handler. */
static int test_post(void *arg, const char *query, char **body, size_t *len,
                     const char **content_type, http_answer_t *later)
{
    harness_t *h = arg;

    (void)later;
    h->post_calls++;
    snprintf(h->last_query, sizeof h->last_query, "%s", query);
    *body = strdup(query[0] != '\0' ? "{\"done\":1}" : "{\"error\":\"ns\"}");
    if (*body == NULL)
        return 500;
    *len = strlen(*body);
    *content_type = "application/json";
    return query[0] != '\0' ? 200 : 400;
}

/* A server whose POST handler on /admin/drop is cb. */
static void post_server(harness_t *h, http_post_cb cb)
{
    harness_init(h);
    ck_assert_int_eq(http_server_new(&h->loop, h->path, 0660, test_handler, h, &h->srv), 0);
    ck_assert_int_eq(http_server_set_post(h->srv, "/admin/drop", cb, h), 0);
}

static void client_post(harness_t *h)
{
    h->rep[0] = client_request(h, "POST /admin/drop?ns=a%20b&revision=r HTTP/1.0\r\n\r\n");
    h->rep[1] = client_request(h, "POST /admin/drop HTTP/1.0\r\n\r\n");
    h->rep[2] = client_request(h, "POST /admin/other?ns=x HTTP/1.0\r\n\r\n");
    h->rep[3] = client_request(h, "GET /admin/drop?ns=x HTTP/1.0\r\n\r\n");
}

START_TEST(test_post_one_path)
{
    harness_t h;

    post_server(&h, test_post);
    harness_start(&h, client_post);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 10\r\nConnection: close\r\n\r\n{\"done\":1}");
    ck_assert_str_eq(h.rep[1].data, "HTTP/1.0 400 Bad Request\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 14\r\nConnection: close\r\n\r\n"
                                    "{\"error\":\"ns\"}");
    ck_assert_ptr_nonnull(strstr(h.rep[2].data, "HTTP/1.0 405 Method Not Allowed\r\n"));
    ck_assert_ptr_nonnull(strstr(h.rep[3].data, "HTTP/1.0 404 Not Found\r\n"));
    ck_assert_int_eq(h.post_calls, 2);
    ck_assert_str_eq(h.last_query, "");
    ck_assert_int_eq(h.calls, 1); /* the GET */
    harness_free(&h);
}
END_TEST

/* A POST answered later (HTTP_DEFER): the answer reaches the client when http_answer() is
 * called; an answer whose connection the timeout closed first is dropped (ASan: nothing leaks
 * and nothing is touched after the close). */
static void answer_cb(uv_timer_t *t);
static void close_then_answer_cb(uv_timer_t *t);

static int deferring_post(void *arg, const char *query, char **body, size_t *len,
                          const char **content_type, http_answer_t *later)
{
    harness_t *h = arg;

    (void)body;
    (void)len;
    (void)content_type;
    h->later[strcmp(query, "late") == 0 ? 1 : 0] = later;
    h->post_calls++;
    if (strcmp(query, "soon") == 0 && h->answer_at_soon) /* answer both 50 ms from now */
        uv_timer_start(&h->answer_timer, answer_cb, 50, 0);
    if (strcmp(query, "soon") == 0 && h->close_at_soon) /* in the next loop turn */
        uv_timer_start(&h->answer_timer, close_then_answer_cb, 0, 0);
    return HTTP_DEFER;
}

static void answer_cb(uv_timer_t *t)
{
    harness_t *h = t->data;

    for (int i = 0; i < 2; i++) {
        char *b = strdup(i == 0 ? "{\"later\":1}" : "{\"never\":1}");
        ck_assert_ptr_nonnull(h->later[i]);
        http_answer(h->later[i], 200, b, strlen(b), "application/json");
        h->later[i] = NULL;
    }
    uv_close((uv_handle_t *)t, NULL);
}

static void client_deferred(harness_t *h)
{
    h->rep[0] = client_request(h, "POST /admin/drop?late HTTP/1.0\r\n\r\n");
    h->rep[1] = client_request(h, "POST /admin/drop?soon HTTP/1.0\r\n\r\n");
}

START_TEST(test_post_deferred)
{
    harness_t h;

    post_server(&h, deferring_post);
    /* the first request's connection times out unanswered; the client then sends the second,
     * which is answered 50 ms after it arrived (well within its own 300 ms) */
    http_server_set_timeout(h.srv, 300);
    uv_timer_init(&h.loop, &h.answer_timer);
    h.answer_timer.data = &h;
    h.answer_at_soon = 1;
    harness_start(&h, client_deferred);
    harness_finish(&h);
    ck_assert_int_eq(h.post_calls, 2);
    /* the first connection was closed by its timeout: no answer at all */
    ck_assert_uint_eq(h.rep[0].len, 0);
    ck_assert_str_eq(h.rep[1].data, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 11\r\nConnection: close\r\n\r\n"
                                    "{\"later\":1}");
    harness_free(&h);
}
END_TEST

/* An answer given in the same loop turn as its connection's close, before the close callbacks
 * ran (the server closed at a stop, then the drop's write completes): dropped, and the token is
 * not touched again (ASan: the use-after-free the review of 0.2.6 found). */
static void close_then_answer_cb(uv_timer_t *t)
{
    harness_t *h = t->data;
    char *b = strdup("{}");

    ck_assert_ptr_nonnull(h->later[0]);
    http_server_close(&h->srv);
    http_answer(h->later[0], 200, b, strlen(b), "application/json");
    h->later[0] = NULL;
    uv_close((uv_handle_t *)t, NULL);
}

static void client_one_deferred(harness_t *h)
{
    h->rep[0] = client_request(h, "POST /admin/drop?soon HTTP/1.0\r\n\r\n");
}

START_TEST(test_post_answer_as_it_closes)
{
    harness_t h;

    post_server(&h, deferring_post);
    uv_timer_init(&h.loop, &h.answer_timer);
    h.answer_timer.data = &h;
    h.close_at_soon = 1; /* the request's arrival starts it, not the clock */
    harness_start(&h, client_one_deferred);
    harness_finish(&h);
    ck_assert_int_eq(h.post_calls, 1);
    ck_assert_uint_eq(h.rep[0].len, 0); /* closed, never answered */
    harness_free(&h);
}
END_TEST

START_TEST(test_parse_query)
{
    http_request_t req;
    static const char head[] = "POST /admin/drop?ns=m&revision=r HTTP/1.0\r\n\r\n";

    ck_assert_int_eq(http_parse_request(head, strlen(head), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.path_len, strlen("/admin/drop"));
    ck_assert_uint_eq(req.query_len, strlen("ns=m&revision=r"));
    ck_assert_int_eq(memcmp(req.query, "ns=m&revision=r", req.query_len), 0);
    ck_assert_int_eq(http_parse_request(full_head, strlen(full_head), &req), HTTP_PARSE_DONE);
    ck_assert_uint_eq(req.query_len, strlen("verbose=1"));
    ck_assert_int_eq(http_parse_request("GET / HTTP/1.0\r\n\r\n", 18, &req), HTTP_PARSE_DONE);
    ck_assert_ptr_null(req.query);
}
END_TEST

/* A head of exactly `total` bytes: a request line, one long header, the blank line. */
static char *make_head(size_t total)
{
    static const char start[] = "GET /status HTTP/1.0\r\nX-Fill: ";
    char *p = malloc(total + 1);

    if (p == NULL)
        abort();
    memcpy(p, start, strlen(start));
    memset(p + strlen(start), 'f', total - strlen(start) - 4);
    memcpy(p + total - 4, "\r\n\r\n", 5);
    return p;
}

static void client_sizes(harness_t *h)
{
    char *head;

    head = make_head(HTTP_HEAD_MAX);
    h->rep[0] = client_request(h, head);
    free(head);
    head = make_head(HTTP_HEAD_MAX + 1);
    h->rep[1] = client_request(h, head);
    free(head);
    head = make_head(3 * HTTP_HEAD_MAX);
    h->rep[2] = client_request(h, head);
    free(head);
}

START_TEST(test_head_size_limit)
{
    static const char resp431[] =
        "HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
        "Content-Length: 23\r\nConnection: close\r\n\r\nrequest head too large\n";
    harness_t h;

    harness_init(&h);
    harness_start(&h, client_sizes);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    ck_assert_str_eq(h.rep[1].data, resp431);
    ck_assert_str_eq(h.rep[2].data, resp431);
    ck_assert_int_eq(h.calls, 1);
    harness_free(&h);
}
END_TEST

static void client_big_and_pieces(harness_t *h)
{
    static const char req[] = "GET /status HTTP/1.0\r\nHost: x\r\n\r\n";
    size_t i;
    int fd;

    h->rep[0] = client_request(h, "GET /big HTTP/1.0\r\n\r\n");
    /* One byte per send: the server parses a growing head. */
    fd = client_connect(h->path);
    if (fd >= 0) {
        for (i = 0; i < strlen(req); i++)
            client_send(fd, req + i, 1);
        h->rep[1] = client_read_all(fd);
        close(fd);
    }
}

START_TEST(test_big_body_and_split_request)
{
    static const char hdr[] = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
                              "Content-Length: 1048576\r\nConnection: close\r\n\r\n";
    harness_t h;
    size_t i, hl = strlen(hdr);

    harness_init(&h);
    harness_start(&h, client_big_and_pieces);
    harness_finish(&h);
    ck_assert_uint_eq(h.rep[0].len, hl + BIG_LEN);
    ck_assert_int_eq(memcmp(h.rep[0].data, hdr, hl), 0);
    for (i = 0; i < BIG_LEN; i++)
        if (h.rep[0].data[hl + i] != (char)('a' + i % 23))
            break;
    ck_assert_uint_eq(i, BIG_LEN);
    ck_assert_ptr_nonnull(h.rep[1].data);
    ck_assert_str_eq(h.rep[1].data, RESP_STATUS);
    harness_free(&h);
}
END_TEST

START_TEST(test_socket_mode)
{
    harness_t h;
    struct stat st;

    harness_init(&h);
    umask(022);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &h.srv), 0);
    ck_assert_int_eq(lstat(h.path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 07777, 0660);
    harness_start(&h, client_basic);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    harness_free(&h);
}
END_TEST

static void client_one(harness_t *h)
{
    h->rep[0] = client_request(h, "GET /status HTTP/1.0\r\n\r\n");
}

START_TEST(test_second_server_addrinuse)
{
    harness_t h;
    http_server_t *second = (http_server_t *)&h;

    harness_init(&h);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &h.srv), 0);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &second),
                     -EADDRINUSE);
    ck_assert_ptr_null(second);
    /* The first server still owns the path and answers (the probe's connection included). */
    harness_start(&h, client_one);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    harness_free(&h);
}
END_TEST

START_TEST(test_stale_socket_replaced)
{
    harness_t h;
    struct sockaddr_un sa;
    struct stat st;
    int fd;

    harness_init(&h);
    /* A socket file nobody listens on, as a crashed daemon leaves it. */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", h.path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(lstat(h.path, &st), 0);

    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0600, test_handler, &h, &h.srv), 0);
    ck_assert_int_eq(lstat(h.path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    harness_start(&h, client_one);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    harness_free(&h);
}
END_TEST

START_TEST(test_other_file_left_alone)
{
    harness_t h;
    http_server_t *s = (http_server_t *)&h;
    char longpath[200], buf[8];
    int fd;

    harness_init(&h);
    fd = open(h.path, O_CREAT | O_WRONLY | O_EXCL, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "keep", 4), 4);
    ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &s), -EADDRINUSE);
    ck_assert_ptr_null(s);
    fd = open(h.path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, buf, sizeof buf), 4);
    ck_assert_int_eq(memcmp(buf, "keep", 4), 0);
    ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(unlink(h.path), 0);

    memset(longpath, 'p', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    ck_assert_int_eq(http_server_new(&h.loop, longpath, 0660, test_handler, &h, &s), -ENAMETOOLONG);
    ck_assert_int_eq(http_server_new(&h.loop, "", 0660, test_handler, &h, &s), -EINVAL);
    /* No handle was left behind by the failures. */
    ck_assert_int_eq(uv_loop_close(&h.loop), 0);
    ck_assert_int_eq(rmdir(h.dir), 0);
}
END_TEST

static void client_timeout(harness_t *h)
{
    static const char partial[] = "GET /status HTTP/1.0\r\nHost: x\r\n";
    int fd = client_connect(h->path);

    if (fd >= 0) {
        client_send(fd, partial, strlen(partial));
        h->rep[0] = client_read_all(fd); /* the server gives up and closes */
        close(fd);
    }
    fd = client_connect(h->path);
    if (fd >= 0) {
        h->rep[1] = client_read_all(fd); /* silent from the start */
        close(fd);
    }
    h->rep[2] = client_request(h, "GET /status HTTP/1.0\r\n\r\n");
}

START_TEST(test_idle_timeout)
{
    harness_t h;

    harness_init(&h);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &h.srv), 0);
    http_server_set_timeout(h.srv, 50);
    harness_start(&h, client_timeout);
    harness_finish(&h);
    ck_assert_ptr_nonnull(h.rep[0].data);
    ck_assert_uint_eq(h.rep[0].len, 0);
    ck_assert_ptr_nonnull(h.rep[1].data);
    ck_assert_uint_eq(h.rep[1].len, 0);
    ck_assert_str_eq(h.rep[2].data, RESP_STATUS);
    ck_assert_int_eq(h.calls, 1);
    harness_free(&h);
}
END_TEST

static void client_vanishing(harness_t *h)
{
    static const char partial[] = "GET /status HTTP/1.0\r\n";
    static const char big[] = "GET /big HTTP/1.0\r\n\r\n";
    int fd;

    fd = client_connect(h->path); /* connect and go */
    if (fd >= 0)
        close(fd);
    fd = client_connect(h->path); /* half a head and go */
    if (fd >= 0) {
        client_send(fd, partial, strlen(partial));
        close(fd);
    }
    fd = client_connect(h->path); /* ask for 1 MiB, read 1 byte and go: the write fails */
    if (fd >= 0) {
        char c;

        client_send(fd, big, strlen(big));
        h->n[0] = (int)recv(fd, &c, 1, 0);
        close(fd);
    }
    h->rep[0] = client_request(h, "GET /status HTTP/1.0\r\n\r\n");
}

START_TEST(test_client_vanishes)
{
    harness_t h;

    harness_init(&h);
    harness_start(&h, client_vanishing);
    harness_finish(&h);
    ck_assert_int_eq(h.n[0], 1);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    ck_assert_int_eq(h.calls, 2);
    harness_free(&h);
}
END_TEST

static void client_limit(harness_t *h)
{
    static const char partial[] = "GET /status HTTP/1.0\r\n";
    static const char full[] = "GET /status HTTP/1.0\r\n\r\n";
    int held[HTTP_CONN_MAX];
    unsigned i;

    /* Silent connections: idle whenever the server looks (nothing of theirs waits unread). */
    for (i = 0; i < HTTP_CONN_MAX; i++) {
        held[i] = client_connect(h->path);
        h->n[0] += held[i] >= 0;
    }
    /* Over the limit, every slot held by an idle connection: a new request closes the oldest
     * idle one (accepted first) and is answered; the next ones take the slot it leaves (it is
     * closed before its answer is read to the end). */
    for (i = 0; i < 3; i++) {
        reply_t r = client_request(h, full);
        h->n[1] += r.len > 0 && strcmp(r.data, RESP_STATUS) == 0;
        free(r.data);
    }
    /* the oldest was closed without an answer */
    if (held[0] >= 0) {
        reply_t r = client_read_all(held[0]);
        h->n[2] += r.len == 0;
        free(r.data);
    }
    /* the next one still holds its slot: a request on it gets the answer */
    if (held[1] >= 0) {
        client_send(held[1], partial, strlen(partial));
        client_send(held[1], "\r\n", 2);
        h->rep[0] = client_read_all(held[1]);
    }
    for (i = 0; i < HTTP_CONN_MAX; i++)
        if (held[i] >= 0)
            close(held[i]);
}

START_TEST(test_connection_limit)
{
    harness_t h;

    harness_init(&h);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &h.srv), 0);
    http_server_set_timeout(h.srv, 600000);
    harness_start(&h, client_limit);
    harness_finish(&h);
    ck_assert_int_eq(h.n[0], HTTP_CONN_MAX);
    ck_assert_int_eq(h.n[1], 3);
    ck_assert_int_eq(h.n[2], 1);
    ck_assert_ptr_nonnull(h.rep[0].data);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    ck_assert_int_eq(h.calls, 4);
    harness_free(&h);
}
END_TEST

static void client_close_while_open(harness_t *h)
{
    static const char partial[] = "GET /status HTTP/1.0\r\n";
    int fds[3];
    int i;

    for (i = 0; i < 3; i++) {
        fds[i] = client_connect(h->path);
        if (fds[i] >= 0)
            client_send(fds[i], partial, strlen(partial));
    }
    /* Accepted in order: once this is answered, the three above are open connections. */
    h->rep[0] = client_request(h, "GET /status HTTP/1.0\r\n\r\n");
    client_finish(h);
    for (i = 0; i < 3; i++) {
        if (fds[i] >= 0) {
            reply_t r = client_read_all(fds[i]);

            h->n[0] += r.len == 0;
            free(r.data);
            close(fds[i]);
        }
    }
}

START_TEST(test_close_with_open_connections)
{
    harness_t h;

    harness_init(&h);
    ck_assert_int_eq(http_server_new(&h.loop, h.path, 0660, test_handler, &h, &h.srv), 0);
    http_server_set_timeout(h.srv, 600000);
    harness_start(&h, client_close_while_open);
    harness_finish(&h);
    ck_assert_str_eq(h.rep[0].data, RESP_STATUS);
    ck_assert_int_eq(h.n[0], 3);
    harness_free(&h);
}
END_TEST

static Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *parse = tcase_create("parse");
    TCase *server = tcase_create("server");

    signal(SIGPIPE, SIG_IGN); /* as the daemon does; writes to vanished peers fail with EPIPE */
    tcase_add_test(parse, test_parse_complete);
    tcase_add_test(parse, test_parse_need_more);
    tcase_add_test(parse, test_parse_invalid);
    tcase_add_test(server, test_get);
    tcase_add_test(server, test_error_codes);
    tcase_add_test(server, test_post_one_path);
    tcase_add_test(server, test_post_deferred);
    tcase_add_test(server, test_post_answer_as_it_closes);
    tcase_add_test(server, test_parse_query);
    tcase_add_test(server, test_head_size_limit);
    tcase_add_test(server, test_big_body_and_split_request);
    tcase_add_test(server, test_socket_mode);
    tcase_add_test(server, test_second_server_addrinuse);
    tcase_add_test(server, test_stale_socket_replaced);
    tcase_add_test(server, test_other_file_left_alone);
    tcase_add_test(server, test_idle_timeout);
    tcase_add_test(server, test_client_vanishes);
    tcase_add_test(server, test_connection_limit);
    tcase_add_test(server, test_close_with_open_connections);
    suite_add_tcase(s, parse);
    suite_add_tcase(s, server);
    return s;
}

const check_program_t check_program = {.suite = status_suite};
