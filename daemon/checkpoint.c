/*
 * checkpoint.c - the disk tier's index checkpoint (see checkpoint.h): the builder, the pure
 * decoder, the atomic write.
 *
 * Design: tag-length items so that the decoder can bound every read by the item's own length
 * before it looks inside (the fuzzer's contract: any bytes in, "valid" or an error out, no read
 * past the end); one checksum over the whole file, checked first, so a torn or foreign file is
 * refused before anything of it is used. Namespaces are written once each (a linear search of
 * the few written so far) and records refer to them by number, so a record costs 89 bytes of
 * body however long its model's name.
 *
 * Threads: none of its own (see checkpoint.h).
 */
#include "checkpoint.h"

#include "fsutil.h"
#include "kvt_csum.h"
#include "kvt_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_MAGIC "KVTCKPT1"
#define CKPT_HDR 32u
#define CKPT_ITEM 5u /* tag u8, len u32 */
#define CKPT_SEG 1u
#define CKPT_NS 2u
#define CKPT_REC 3u
#define CKPT_END 0xffu
#define CKPT_SEG_BODY 17u
#define CKPT_REC_BODY 89u

static uint8_t *grow(ckpt_buf_t *c, size_t n)
{
    return fsutil_buf_add(&c->buf, n);
}

static uint8_t *item(ckpt_buf_t *c, uint8_t tag, size_t body)
{
    uint8_t *p = grow(c, CKPT_ITEM + body);

    if (p == NULL)
        return NULL;
    p[0] = tag;
    kvt_put_u32(p + 1, (uint32_t)body);
    return p + CKPT_ITEM;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int ckpt_begin(ckpt_buf_t *c, uint64_t written_ms)
{
    uint8_t *p;

    memset(c, 0, sizeof *c);
    p = grow(c, CKPT_HDR);
    if (p == NULL)
        return -ENOMEM;
    memset(p, 0, CKPT_HDR);
    memcpy(p, CKPT_MAGIC, 8);
    kvt_put_u32(p + 8, CKPT_VERSION);
    kvt_put_u64(p + 16, written_ms);
    return 0;
}

void ckpt_put_seg(ckpt_buf_t *c, uint64_t id, uint64_t size, uint8_t version)
{
    uint8_t *p = item(c, CKPT_SEG, CKPT_SEG_BODY);

    if (p == NULL)
        return;
    kvt_put_u64(p, id);
    kvt_put_u64(p + 8, size);
    p[16] = version;
}

/* The number of m's namespace, written now if it was not; UINT32_MAX when out of memory. */
static uint32_t ns_index(ckpt_buf_t *c, const record_meta_t *m)
{
    uint8_t flags = m->flags & RECORD_F_REPLICATED;
    struct ckpt_ns *n;
    uint8_t *p;

    for (uint32_t i = c->nns; i-- > 0;) {
        n = &c->ns[i];
        if (n->fingerprint == m->fingerprint && n->world == m->world &&
            n->chunk_tokens == m->chunk_tokens && n->flags == flags &&
            strcmp(n->model, m->model) == 0 && strcmp(n->revision, m->revision) == 0)
            return i;
    }
    if (c->nns == c->nscap) {
        uint32_t nc = c->nscap ? 2 * c->nscap : 16;
        struct ckpt_ns *nn = realloc(c->ns, nc * sizeof *nn);
        if (nn == NULL) {
            c->buf.oom = true;
            return UINT32_MAX;
        }
        c->ns = nn;
        c->nscap = nc;
    }
    n = &c->ns[c->nns];
    *n = (struct ckpt_ns){.fingerprint = m->fingerprint,
                          .chunk_tokens = m->chunk_tokens,
                          .world = m->world,
                          .flags = flags};
    memcpy(n->model, m->model, m->model_len);
    n->model[m->model_len] = '\0';
    memcpy(n->revision, m->revision, m->revision_len);
    n->revision[m->revision_len] = '\0';
    p = item(c, CKPT_NS, 2u + m->model_len + m->revision_len + 15u);
    if (p == NULL)
        return UINT32_MAX;
    *p++ = m->model_len;
    memcpy(p, m->model, m->model_len);
    p += m->model_len;
    *p++ = m->revision_len;
    memcpy(p, m->revision, m->revision_len);
    p += m->revision_len;
    kvt_put_u64(p, m->fingerprint);
    put16(p + 8, m->world);
    p[10] = flags;
    kvt_put_u32(p + 11, m->chunk_tokens);
    return c->nns++;
}

void ckpt_put_rec(ckpt_buf_t *c, const record_meta_t *m, const ckpt_loc_t *loc)
{
    uint32_t ns = ns_index(c, m);
    uint8_t *p;

    if (ns == UINT32_MAX || (p = item(c, CKPT_REC, CKPT_REC_BODY)) == NULL)
        return;
    kvt_put_u32(p, ns);
    kvt_put_u64(p + 4, loc->seg);
    kvt_put_u64(p + 12, loc->off);
    put16(p + 20, loc->hdr_len);
    kvt_put_u32(p + 22, loc->stored);
    p[26] = loc->version;
    put16(p + 27, m->rank);
    p[29] = m->flags & RECORD_F_PARENT;
    memcpy(p + 30, m->hash, 16);
    memcpy(p + 46, m->parent, 16);
    kvt_put_u64(p + 62, m->raw_len);
    kvt_put_u64(p + 70, m->csum);
    p[78] = (uint8_t)m->version;
    memset(p + 79, 0, CKPT_REC_BODY - 79);
}

int ckpt_finish(ckpt_buf_t *c)
{
    uint8_t *p = item(c, CKPT_END, 8);

    if (p == NULL || c->buf.oom)
        return -ENOMEM;
    kvt_put_u64(p, kvt_csum(c->buf.b, c->buf.len - 8));
    return 0;
}

void ckpt_free(ckpt_buf_t *c)
{
    free(c->buf.b);
    free(c->ns);
    memset(c, 0, sizeof *c);
}

/* --- decoding --- */

/* A namespace item as decoded: pointers into the buffer. */
typedef struct {
    const uint8_t *model, *revision;
    uint8_t model_len, revision_len, flags;
    uint16_t world;
    uint32_t chunk_tokens;
    uint64_t fingerprint;
} dns_t;

int ckpt_decode(const uint8_t *buf, size_t n, const ckpt_visit_t *v, void *arg,
                uint64_t *written_ms)
{
    size_t pos = CKPT_HDR;
    dns_t *ns = NULL;
    size_t nns = 0, nscap = 0;
    uint64_t last_seg = 0, last_off = 0;
    bool any_rec = false;
    int rc = -EBADMSG;

    if (n < CKPT_HDR + CKPT_ITEM + 8 || memcmp(buf, CKPT_MAGIC, 8) != 0)
        return -EBADMSG;
    if (buf[n - 8 - CKPT_ITEM] != CKPT_END || kvt_get_u32(buf + n - 8 - 4) != 8 ||
        kvt_get_u64(buf + n - 8) != kvt_csum(buf, n - 8))
        return -EBADMSG;
    if (kvt_get_u32(buf + 8) != CKPT_VERSION)
        return -EPROTO;
    if (written_ms != NULL)
        *written_ms = kvt_get_u64(buf + 16);
    while (pos < n - 8 - CKPT_ITEM) {
        uint8_t tag = buf[pos];
        size_t len = kvt_get_u32(buf + pos + 1);
        const uint8_t *p = buf + pos + CKPT_ITEM;

        if (len > n - 8 - CKPT_ITEM - pos - CKPT_ITEM)
            goto out;
        pos += CKPT_ITEM + len;
        if (tag == CKPT_SEG) {
            if (len != CKPT_SEG_BODY || any_rec)
                goto out;
            if (v->seg != NULL && (rc = v->seg(arg, kvt_get_u64(p), kvt_get_u64(p + 8), p[16])))
                goto out;
            rc = -EBADMSG;
        } else if (tag == CKPT_NS) {
            dns_t d;
            if (len < 2 + 15 || len < 2u + p[0] + 15)
                goto out;
            d.model_len = p[0];
            d.model = p + 1;
            d.revision_len = p[1 + d.model_len];
            d.revision = p + 2 + d.model_len;
            if (len != 2u + d.model_len + d.revision_len + 15 || d.model_len == 0 ||
                memchr(d.model, 0, d.model_len) != NULL ||
                memchr(d.revision, 0, d.revision_len) != NULL)
                goto out; /* names hold no NUL */
            p += 2 + d.model_len + d.revision_len;
            d.fingerprint = kvt_get_u64(p);
            d.world = get16(p + 8);
            d.flags = p[10];
            d.chunk_tokens = kvt_get_u32(p + 11);
            if (nns == nscap) {
                size_t nc = nscap ? 2 * nscap : 16;
                dns_t *nn = realloc(ns, nc * sizeof *nn);
                if (nn == NULL) {
                    rc = -ENOMEM;
                    goto out;
                }
                ns = nn;
                nscap = nc;
            }
            ns[nns++] = d;
        } else if (tag == CKPT_REC) {
            record_meta_t m;
            ckpt_loc_t loc;
            uint32_t k;
            const dns_t *d;
            if (len != CKPT_REC_BODY || (k = kvt_get_u32(p)) >= nns)
                goto out;
            d = &ns[k];
            loc = (ckpt_loc_t){.seg = kvt_get_u64(p + 4),
                               .off = kvt_get_u64(p + 12),
                               .hdr_len = get16(p + 20),
                               .stored = kvt_get_u32(p + 22),
                               .version = p[26]};
            if (any_rec && (loc.seg < last_seg || (loc.seg == last_seg && loc.off <= last_off)))
                goto out; /* out of order */
            any_rec = true;
            last_seg = loc.seg;
            last_off = loc.off;
            memset(&m, 0, sizeof m);
            m.version = p[78];
            m.flags = (uint8_t)((p[29] & RECORD_F_PARENT) | (d->flags & RECORD_F_REPLICATED));
            m.model_len = d->model_len;
            memcpy(m.model, d->model, d->model_len);
            m.revision_len = d->revision_len;
            memcpy(m.revision, d->revision, d->revision_len);
            m.fingerprint = d->fingerprint;
            m.world = d->world;
            m.chunk_tokens = d->chunk_tokens;
            m.rank = get16(p + 27);
            memcpy(m.hash, p + 30, 16);
            memcpy(m.parent, p + 46, 16);
            m.raw_len = kvt_get_u64(p + 62);
            m.stored_len = loc.stored;
            m.csum = kvt_get_u64(p + 70);
            if (v->rec != NULL && (rc = v->rec(arg, &m, &loc)) != 0)
                goto out;
            rc = -EBADMSG;
        } else {
            goto out;
        }
    }
    rc = pos == n - 8 - CKPT_ITEM ? 0 : -EBADMSG;
out:
    free(ns);
    return rc;
}

int ckpt_write(const char *dir, const ckpt_buf_t *c)
{
    return fsutil_write_atomic(dir, CKPT_FILE, c->buf.b, c->buf.len);
}
