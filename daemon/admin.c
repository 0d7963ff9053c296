/*
 * admin.c - POST /admin/drop (see admin.h).
 *
 * Design: the query string is split on '&' and '=' and percent-decoded into bounded buffers
 * (a model name is at most 255 bytes, a revision KVT_REVISION_MAX); the drop itself is
 * server_drop_ns(). The answer is built with jansson; a name that is not UTF-8 is written as
 * null (jansson refuses it) rather than refusing the drop.
 *
 * Threads: loop thread only.
 */
#include "admin.h"

#include "kvt_proto.h"
#include "ns.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMIN_NAME_MAX 255

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes in[0..n) into out (cap bytes with the NUL). 0, or -1 when malformed, too long
 * or holding a NUL. */
static int decode(const char *in, size_t n, char *out, size_t cap)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)in[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            int hi, lo;
            if (i + 2 >= n)
                return -1;
            hi = hexval(in[i + 1]);
            lo = hexval(in[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi << 4 | lo;
            i += 2;
        }
        if (c == 0 || k + 1 >= cap)
            return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return 0;
}

static json_t *str_or_null(const char *s)
{
    json_t *v = json_string(s);

    return v != NULL ? v : json_null();
}

static int answer(json_t *doc, int code, char **body, size_t *len, const char **content_type)
{
    *content_type = "application/json";
    *body = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (*body == NULL)
        return 500;
    *len = strlen(*body);
    return code;
}

static int bad(const char *why, char **body, size_t *len, const char **content_type)
{
    return answer(json_pack("{s:s}", "error", why), 400, body, len, content_type);
}

/* A drop's answer, waiting for its tombstones to be on file. */
typedef struct {
    http_answer_t *later;
    json_t *doc;
    int terr; /* a tombstone that could not even be kept (drops_add) */
} drop_wait_t;

static void tombstone_field(json_t *doc, int rc)
{
    json_object_set_new(doc, "tombstone", json_string(rc == 0 ? "written" : "failed"));
    if (rc != 0)
        json_object_set_new(doc, "tombstone_error", json_string(strerror(-rc)));
}

static void drop_written(void *arg, int rc)
{
    drop_wait_t *w = arg;
    const char *ctype = NULL;
    char *body = NULL;
    size_t len = 0;
    int code;

    tombstone_field(w->doc, rc == 0 ? w->terr : rc);
    code = answer(w->doc, 200, &body, &len, &ctype);
    http_answer(w->later, code, body, len, ctype);
    free(w);
}

int admin_drop(void *arg, const char *query, char **body, size_t *len, const char **content_type,
               http_answer_t *later)
{
    server_t *sv = arg;
    drop_wait_t *w;
    int terr = 0, rc;
    char model[ADMIN_NAME_MAX + 1] = "", revision[KVT_REVISION_MAX + 1] = "";
    bool have_ns = false, have_rev = false;
    server_drop_t *drops;
    server_view_t v;
    uint64_t chunks = 0, bytes = 0;
    json_t *doc, *list;
    const char *p = query;
    int n;

    while (*p != '\0') {
        size_t plen = strcspn(p, "&"), klen = strcspn(p, "=&");
        const char *val = p + klen + 1;
        size_t vlen = klen < plen ? plen - klen - 1 : 0;

        if (plen == 0) {
            p++;
            continue;
        }
        if (klen == 2 && memcmp(p, "ns", 2) == 0 && !have_ns) {
            if (klen == plen || decode(val, vlen, model, sizeof model) != 0)
                return bad("ns: expected a model name of 1 to 255 bytes", body, len, content_type);
            have_ns = true;
        } else if (klen == 8 && memcmp(p, "revision", 8) == 0 && !have_rev) {
            if (decode(klen == plen ? "" : val, vlen, revision, sizeof revision) != 0)
                return bad("revision: expected at most 255 bytes", body, len, content_type);
            have_rev = true;
        } else {
            return bad("expected the parameters ns=NAME and optionally revision=R, each once", body,
                       len, content_type);
        }
        p += plen;
        if (*p == '&')
            p++;
    }
    if (!have_ns || model[0] == '\0')
        return bad("ns: expected a model name of 1 to 255 bytes", body, len, content_type);
    drops = malloc(NS_MAX * sizeof *drops);
    if (drops == NULL)
        return 500;
    n = server_drop_ns(sv, model, have_rev ? revision : NULL, drops, NS_MAX);
    if (n < 0) {
        free(drops);
        return 500;
    }
    server_view(sv, &v);
    list = json_array();
    for (int i = 0; i < n; i++) {
        const store_drop_t *d = &drops[i].dropped;
        const ns_t *ns = ns_get(v.namespaces, drops[i].ns_id);
        chunks += d->chunks;
        bytes += d->bytes;
        if (terr == 0)
            terr = d->tombstone_error;
        json_array_append_new(
            list, json_pack("{s:I, s:o, s:o, s:I, s:I, s:I, s:I, s:I}", "id", (json_int_t)ns->id,
                            "model", str_or_null(ns->model), "revision", str_or_null(ns->revision),
                            "chunks", (json_int_t)d->chunks, "bytes", (json_int_t)d->bytes,
                            "ram_chunks", (json_int_t)d->ram_chunks, "disk_chunks",
                            (json_int_t)d->disk_chunks, "pinned", (json_int_t)d->pinned));
    }
    free(drops);
    doc = json_pack("{s:o, s:o, s:I, s:I, s:o}", "ns", str_or_null(model), "revision",
                    have_rev ? str_or_null(revision) : json_null(), "chunks", (json_int_t)chunks,
                    "bytes", (json_int_t)bytes, "namespaces", list);
    if (doc != NULL && n == 0)
        json_object_set_new(doc, "error",
                            json_string("no namespace with this name (and revision)"));
    if (doc == NULL || n == 0)
        return answer(doc, n == 0 ? 404 : 200, body, len, content_type);
    /* answered once the tombstones are on file (written on the thread pool) */
    w = malloc(sizeof *w);
    if (w != NULL)
        *w = (drop_wait_t){.later = later, .doc = doc, .terr = terr};
    rc = w != NULL ? server_drops_written(sv, drop_written, w) : -ENOMEM;
    if (rc == 0)
        return HTTP_DEFER; /* drop_written answers */
    free(w);
    if (rc == 1 || (terr != 0 && rc != -ENODEV))
        tombstone_field(doc, terr);
    else if (rc != -ENODEV)
        json_object_set_new(doc, "tombstone", json_string("pending"));
    return answer(doc, 200, body, len, content_type);
}
