/*
 * journal.c - the RAM tier's journal (see journal.h): its record format, a pure decoder, and the
 * appending file.
 *
 * Design: fixed little-endian layouts written byte by byte (kvt_proto.h's helpers, as the
 * wire codec does), every record checksummed on its own so that a torn tail
 * is recognised without a length field at the front of the file. Appends are gathered in a
 * JOURNAL_BUF_BYTES buffer and written with one write(2) per flush: the store flushes once per
 * save or commit it publishes (one syscall per request, not per chunk) and after the evictions
 * of an allocation. Namespace records are written once per namespace per file; the set of ids
 * written is a sorted array (namespaces are few; the common case, the same namespace as the
 * last record, is checked first).
 *
 * Threads: loop thread only (the decoders: any).
 */
#include "journal.h"

#include "fsutil.h"
#include "kvt_csum.h"
#include "kvt_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_MAGIC "KVTJRNL1"
#define JOURNAL_BUF_BYTES (64u * 1024u)
#define JOURNAL_FRAME 4u /* len u16, type u8, reserved u8 */
#define JOURNAL_ADD_BODY 64u
#define JOURNAL_DEL_BODY 8u
#define JOURNAL_NS_BODY_MIN 20u

/* Little-endian fields: kvt_proto.h's helpers, and a 16-bit pair of them. */
static void put16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *b)
{
    return (uint16_t)(b[0] | b[1] << 8);
}

#define put32 kvt_put_u32
#define put64 kvt_put_u64
#define get32 kvt_get_u32
#define get64 kvt_get_u64

size_t journal_encode_hdr(const journal_hdr_t *h, uint8_t *b)
{
    memset(b, 0, JOURNAL_HDR_BYTES);
    memcpy(b, JOURNAL_MAGIC, 8);
    put32(b + 8, JOURNAL_VERSION);
    put32(b + 12, h->unit);
    put64(b + 16, h->arena_id);
    put64(b + 24, h->capacity);
    put64(b + 32, h->chunk_off);
    put32(b + 40, h->gen);
    put64(b + 48, kvt_csum(b, 48));
    return JOURNAL_HDR_BYTES;
}

int journal_decode_hdr(const uint8_t *b, size_t n, journal_hdr_t *out)
{
    if (n < JOURNAL_HDR_BYTES || memcmp(b, JOURNAL_MAGIC, 8) != 0 ||
        get32(b + 8) != JOURNAL_VERSION || get64(b + 48) != kvt_csum(b, 48))
        return -EBADMSG;
    *out = (journal_hdr_t){.unit = get32(b + 12),
                           .arena_id = get64(b + 16),
                           .capacity = get64(b + 24),
                           .chunk_off = get64(b + 32),
                           .gen = get32(b + 40)};
    return 0;
}

size_t journal_encode(const journal_rec_t *r, uint8_t *b)
{
    uint8_t *p = b + JOURNAL_FRAME;
    size_t len;

    switch (r->type) {
    case JOURNAL_NS: {
        const journal_ns_t *ns = &r->u.ns;
        size_t ml = strnlen(ns->model, 255), rl = strnlen(ns->revision, 255);
        put32(p, ns->ns);
        put16(p + 4, ns->world);
        p[6] = ns->flags;
        p[7] = (uint8_t)ml;
        put32(p + 8, ns->chunk_tokens);
        put64(p + 12, ns->fingerprint);
        memcpy(p + 20, ns->model, ml);
        p[20 + ml] = (uint8_t)rl;
        memcpy(p + 21 + ml, ns->revision, rl);
        p += JOURNAL_NS_BODY_MIN + 1 + ml + rl;
        break;
    }
    case JOURNAL_ADD: {
        const journal_add_t *a = &r->u.add;
        put32(p, a->ns);
        put16(p + 4, a->rank);
        p[6] = a->flags;
        p[7] = 0;
        memcpy(p + 8, a->hash, 16);
        memcpy(p + 24, a->parent, 16);
        put64(p + 40, a->off);
        put64(p + 48, a->len);
        put64(p + 56, a->csum);
        p += JOURNAL_ADD_BODY;
        break;
    }
    case JOURNAL_DEL:
        put64(p, r->u.del_off);
        p += JOURNAL_DEL_BODY;
        break;
    }
    len = (size_t)(p - b) + 8;
    put16(b, (uint16_t)len);
    b[2] = (uint8_t)r->type;
    b[3] = 0;
    put64(p, kvt_csum(b, len - 8));
    return len;
}

int journal_decode(const uint8_t *b, size_t n, journal_rec_t *out)
{
    size_t len, body;
    const uint8_t *p = b + JOURNAL_FRAME;

    if (n < JOURNAL_FRAME)
        return 0;
    len = get16(b);
    if (len < JOURNAL_FRAME + 8 || len > JOURNAL_REC_MAX)
        return -EBADMSG;
    if (n < len)
        return 0;
    if (get64(b + len - 8) != kvt_csum(b, len - 8) || b[3] != 0)
        return -EBADMSG; /* reserved bytes are 0: one encoding per record */
    body = len - JOURNAL_FRAME - 8;
    memset(out, 0, sizeof *out);
    out->type = (journal_type_t)b[2];
    switch (b[2]) {
    case JOURNAL_NS: {
        journal_ns_t *ns = &out->u.ns;
        size_t ml, rl;
        if (body < JOURNAL_NS_BODY_MIN + 1)
            return -EBADMSG;
        ml = p[7];
        if (body < JOURNAL_NS_BODY_MIN + 1 + ml)
            return -EBADMSG;
        rl = p[20 + ml];
        if (body != JOURNAL_NS_BODY_MIN + 1 + ml + rl || memchr(p + 20, 0, ml) != NULL ||
            memchr(p + 21 + ml, 0, rl) != NULL)
            return -EBADMSG; /* names hold no NUL */
        ns->ns = get32(p);
        ns->world = get16(p + 4);
        ns->flags = p[6];
        ns->model_len = (uint8_t)ml;
        ns->chunk_tokens = get32(p + 8);
        ns->fingerprint = get64(p + 12);
        memcpy(ns->model, p + 20, ml);
        ns->model[ml] = '\0';
        ns->revision_len = (uint8_t)rl;
        memcpy(ns->revision, p + 21 + ml, rl);
        ns->revision[rl] = '\0';
        return (int)len;
    }
    case JOURNAL_ADD: {
        journal_add_t *a = &out->u.add;
        if (body != JOURNAL_ADD_BODY || p[7] != 0)
            return -EBADMSG;
        a->ns = get32(p);
        a->rank = get16(p + 4);
        a->flags = p[6];
        memcpy(a->hash, p + 8, 16);
        memcpy(a->parent, p + 24, 16);
        a->off = get64(p + 40);
        a->len = get64(p + 48);
        a->csum = get64(p + 56);
        return (int)len;
    }
    case JOURNAL_DEL:
        if (body != JOURNAL_DEL_BODY)
            return -EBADMSG;
        out->u.del_off = get64(p);
        return (int)len;
    default:
        return -EBADMSG;
    }
}

/* --- the file --- */

struct journal {
    int fd;
    bool failed;
    uint64_t records;
    uint64_t bytes;
    uint32_t last_ns; /* the namespace of the last ADD (its record is on file or buffered) */
    bool have_last;
    uint32_t *ns_ids; /* sorted: namespaces whose record was written */
    size_t nns, nscap;
    size_t used;
    char path[4096];
    char tmp[4104];
    uint8_t buf[JOURNAL_BUF_BYTES];
};

int journal_create(const char *path, const journal_hdr_t *h, journal_t **out)
{
    journal_t *j;
    int rc;

    if (strlen(path) >= sizeof j->path)
        return -ENAMETOOLONG;
    j = calloc(1, sizeof *j);
    if (j == NULL)
        return -ENOMEM;
    strcpy(j->path, path);
    snprintf(j->tmp, sizeof j->tmp, "%s.tmp", path);
    j->fd = open(j->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND | O_NOFOLLOW, 0600);
    if (j->fd < 0) {
        rc = -errno;
        free(j);
        return rc;
    }
    (void)fchmod(j->fd, 0600); /* an old temporary file keeps its mode otherwise */
    j->used = journal_encode_hdr(h, j->buf);
    *out = j;
    return 0;
}

static void fail(journal_t *j)
{
    j->failed = true;
    j->used = 0;
    (void)ftruncate(j->fd, 0);
}

int journal_flush(journal_t *j)
{
    size_t done = 0;

    if (j->failed)
        return -EIO;
    while (done < j->used) {
        ssize_t w = write(j->fd, j->buf + done, j->used - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int rc = w < 0 ? -errno : -EIO;
            fail(j);
            return rc;
        }
        done += (size_t)w;
    }
    j->bytes += j->used;
    j->used = 0;
    return 0;
}

int journal_install(journal_t *j, bool sync)
{
    int rc = journal_flush(j);

    if (rc == 0 && sync && fsync(j->fd) != 0)
        rc = -errno;
    if (rc == 0 && rename(j->tmp, j->path) != 0)
        rc = -errno;
    if (rc != 0 && !j->failed)
        fail(j);
    return rc;
}

void journal_close(journal_t **pj, bool sync)
{
    journal_t *j = *pj;

    if (j == NULL)
        return;
    if (journal_flush(j) == 0 && sync)
        (void)fsync(j->fd);
    close(j->fd);
    free(j->ns_ids);
    free(j);
    *pj = NULL;
}

static void append(journal_t *j, const journal_rec_t *r)
{
    if (j->failed)
        return;
    if (j->used + JOURNAL_REC_MAX > sizeof j->buf && journal_flush(j) != 0)
        return;
    j->used += journal_encode(r, j->buf + j->used);
    j->records++;
}

bool journal_ns_known(journal_t *j, uint32_t ns)
{
    size_t lo = 0, hi = j->nns;

    if (j->have_last && j->last_ns == ns)
        return true;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (j->ns_ids[mid] == ns)
            goto seen;
        if (j->ns_ids[mid] < ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (j->nns == j->nscap) {
        size_t nc = j->nscap ? 2 * j->nscap : 16;
        uint32_t *n = realloc(j->ns_ids, nc * sizeof *n);
        if (n == NULL)
            return false; /* written again next time: harmless */
        j->ns_ids = n;
        j->nscap = nc;
    }
    memmove(j->ns_ids + lo + 1, j->ns_ids + lo, (j->nns - lo) * sizeof *j->ns_ids);
    j->ns_ids[lo] = ns;
    j->nns++;
    j->last_ns = ns;
    j->have_last = true;
    return false;
seen:
    j->last_ns = ns;
    j->have_last = true;
    return true;
}

void journal_put_ns(journal_t *j, const journal_ns_t *ns)
{
    journal_rec_t r = {.type = JOURNAL_NS, .u.ns = *ns};

    append(j, &r);
}

void journal_add(journal_t *j, const journal_add_t *a)
{
    journal_rec_t r = {.type = JOURNAL_ADD, .u.add = *a};

    append(j, &r);
}

void journal_del(journal_t *j, uint64_t off)
{
    journal_rec_t r = {.type = JOURNAL_DEL, .u.del_off = off};

    append(j, &r);
}

bool journal_failed(const journal_t *j)
{
    return j->failed;
}

uint64_t journal_records(const journal_t *j)
{
    return j->records;
}

uint64_t journal_bytes(const journal_t *j)
{
    return j->bytes + j->used;
}

const char *journal_path(const journal_t *j)
{
    return j->path;
}

int journal_read(const char *path, uint8_t **buf, size_t *len)
{
    return fsutil_read_file(path, buf, len);
}
