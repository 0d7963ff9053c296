/*
 * fuzz_http.c - libFuzzer target for http_parse_request, the status socket's request-head parser
 * (daemon/http.h): a pure function of the bytes.
 *
 * The input is the bytes a peer sent, copied into an allocation of exactly their length, so
 * AddressSanitizer sees a read past them. Beyond "no sanitizer report", the target checks the
 * parser's contract and aborts (a libFuzzer crash) when it does not hold:
 *  - DONE: the head is inside the input; the method is a non-empty token followed by one space;
 *    the path starts right after it with '/', holds visible ASCII and no '?'; a query, when
 *    there is one, starts right after the '?' that ends the path and ends at the space before
 *    the version; the minor version is a digit; parsing the head alone (without the bytes after
 *    it) gives the same result, and the head less its last byte asks for more;
 *  - MORE: no prefix of the input is a complete head: the input less its last byte asks for more
 *    too;
 *  - BAD: no continuation makes it valid: the input followed by a complete ending stays BAD.
 * Every byte of every view is read, so ASan checks the bounds.
 * Threads: single-threaded. Invariants: no state survives an input; everything is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

#define FUZZ_NAME "fuzz_http"
#include "fuzz_check.h"

static volatile unsigned sink;

static void touch(const char *p, size_t n)
{
    unsigned s = 0;

    for (size_t i = 0; i < n; i++)
        s += (unsigned char)p[i];
    sink += s;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static http_parse_result_t parse_copy(const char *data, size_t len, http_request_t *req,
                                      char **copy)
{
    *copy = malloc(len > 0 ? len : 1);
    if (*copy == NULL)
        abort();
    if (len > 0)
        memcpy(*copy, data, len);
    return http_parse_request(*copy, len, req);
}

static void check_done(const char *buf, size_t len, const http_request_t *r)
{
    const char *end;

    FUZZ_CHECK(r->head_len > 0 && r->head_len <= len);
    FUZZ_CHECK(r->method == buf && r->method_len > 0 && r->method_len < r->head_len);
    for (size_t i = 0; i < r->method_len; i++)
        FUZZ_CHECK(is_tchar((unsigned char)r->method[i]));
    FUZZ_CHECK(buf[r->method_len] == ' ');
    FUZZ_CHECK(r->path == buf + r->method_len + 1 && r->path_len >= 1 && r->path[0] == '/');
    for (size_t i = 0; i < r->path_len; i++)
        FUZZ_CHECK(r->path[i] > ' ' && r->path[i] < 0x7f && r->path[i] != '?');
    end = r->path + r->path_len;
    if (r->query != NULL) {
        FUZZ_CHECK(*end == '?' && r->query == end + 1);
        for (size_t i = 0; i < r->query_len; i++)
            FUZZ_CHECK(r->query[i] > ' ' && r->query[i] < 0x7f);
        end = r->query + r->query_len;
    } else {
        FUZZ_CHECK(r->query_len == 0);
    }
    FUZZ_CHECK(end < buf + r->head_len && *end == ' ');
    FUZZ_CHECK(r->version_minor >= 0 && r->version_minor <= 9);
    touch(r->method, r->method_len);
    touch(r->path, r->path_len);
    if (r->query != NULL)
        touch(r->query, r->query_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char ending[] = "x\r\n\r\n";
    const char *in = (const char *)data;
    http_request_t req, again;
    http_parse_result_t rc;
    char *buf, *b2;

    if (size > 2 * HTTP_HEAD_MAX)
        return 0; /* the server never parses more than HTTP_HEAD_MAX bytes */
    rc = parse_copy(in, size, &req, &buf);
    switch (rc) {
    case HTTP_PARSE_DONE:
        check_done(buf, size, &req);
        /* the bytes after the head are not looked at */
        FUZZ_CHECK(parse_copy(in, req.head_len, &again, &b2) == HTTP_PARSE_DONE);
        FUZZ_CHECK(again.head_len == req.head_len && again.method_len == req.method_len &&
                   again.path_len == req.path_len && again.query_len == req.query_len &&
                   (again.query == NULL) == (req.query == NULL) &&
                   again.version_minor == req.version_minor);
        free(b2);
        FUZZ_CHECK(parse_copy(in, req.head_len - 1, &again, &b2) == HTTP_PARSE_MORE);
        free(b2);
        break;
    case HTTP_PARSE_MORE:
        if (size > 0) {
            FUZZ_CHECK(parse_copy(in, size - 1, &again, &b2) == HTTP_PARSE_MORE);
            free(b2);
        }
        break;
    case HTTP_PARSE_BAD: {
        char *ext = malloc(size + sizeof ending - 1);
        if (ext == NULL)
            abort();
        memcpy(ext, in, size);
        memcpy(ext + size, ending, sizeof ending - 1);
        FUZZ_CHECK(http_parse_request(ext, size + sizeof ending - 1, &again) == HTTP_PARSE_BAD);
        free(ext);
        break;
    }
    default:
        FUZZ_CHECK(!"unknown result");
    }
    free(buf);
    return 0;
}
