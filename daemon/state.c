/*
 * state.c - the gate state and leases a clean restart keeps (see state.h).
 *
 * Design: the file is built in one heap buffer (namespaces are few, leases at most one per
 * chunk: tens of thousands of 26-byte records) and written with fsutil_write_atomic at the stop,
 * when the loop serves nobody any more, so the fsync there costs no request anything. The
 * decoder is a pure function that checks the whole file's checksum before it visits anything,
 * so a torn or foreign file changes nothing. Leases are written in expiry order (sorted here) and
 * restored in that order, which the index's lease FIFO needs; one out of order is skipped.
 *
 * Threads: loop thread only.
 */
#include "state.h"

#include "fsutil.h"
#include "gates.h"
#include "kvt_csum.h"
#include "kvt_proto.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATE_MAGIC "KVTSTAT1"
#define STATE_HDR 32u
#define STATE_LEASE 26u

static uint64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* --- decoding --- */

typedef struct {
    const uint8_t *p, *end;
} cursor_t;

static bool take(cursor_t *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    *out = c->p;
    c->p += n;
    return true;
}

int state_decode(const uint8_t *buf, size_t n, const state_visit_t *v, void *arg,
                 uint64_t *saved_ms)
{
    cursor_t c;
    uint32_t nns, nleases;
    const uint8_t *q;
    int rc;

    if (n < STATE_HDR + 8 || memcmp(buf, STATE_MAGIC, 8) != 0)
        return -EBADMSG;
    if (kvt_get_u64(buf + n - 8) != kvt_csum(buf, n - 8))
        return -EBADMSG;
    if (kvt_get_u32(buf + 8) != STATE_VERSION)
        return -EPROTO;
    nns = kvt_get_u32(buf + 12);
    nleases = kvt_get_u32(buf + 16);
    *saved_ms = kvt_get_u64(buf + 24);
    c = (cursor_t){.p = buf + STATE_HDR, .end = buf + n - 8};
    for (uint32_t i = 0; i < nns; i++) {
        state_ns_t ns = {0};
        const uint8_t *model, *rev;
        if (!take(&c, 1, &q) || q[0] == 0 || !take(&c, q[0], &model) ||
            memchr(model, 0, q[0]) != NULL)
            return -EBADMSG;
        ns.id.model = (const char *)model;
        ns.id.model_len = q[0];
        if (!take(&c, 1, &q) || !take(&c, q[0], &rev))
            return -EBADMSG;
        ns.id.revision = (const char *)rev;
        ns.id.revision_len = q[0];
        if (!take(&c, 19, &q))
            return -EBADMSG;
        ns.id.fingerprint = kvt_get_u64(q);
        ns.id.world = (uint16_t)(q[8] | q[9] << 8);
        ns.id.replicated = (q[10] & 1u) != 0;
        ns.id.chunk_tokens = kvt_get_u32(q + 11);
        ns.blob_len = kvt_get_u32(q + 15);
        if (!take(&c, ns.blob_len, &ns.blob))
            return -EBADMSG;
        if (v->ns != NULL && (rc = v->ns(arg, i, &ns)) != 0)
            return rc;
    }
    for (uint32_t i = 0; i < nleases; i++) {
        state_lease_t l;
        if (!take(&c, STATE_LEASE, &q))
            return -EBADMSG;
        l.ns = kvt_get_u32(q);
        if (l.ns >= nns)
            return -EBADMSG;
        l.rank = (uint16_t)(q[4] | q[5] << 8);
        memcpy(l.hash, q + 6, 16);
        l.remaining_ms = kvt_get_u32(q + 22);
        if (v->lease != NULL && (rc = v->lease(arg, &l)) != 0)
            return rc;
    }
    return c.p == c.end ? 0 : -EBADMSG;
}

/* --- saving --- */

typedef struct {
    uint32_t ns_id; /* the live namespace's id */
    uint16_t rank;
    uint8_t hash[16];
    uint64_t remaining_ms;
} lease_rec_t;

typedef struct {
    const ns_table_t *nst;
    uint32_t *ids; /* file index -> ns id, in slot order */
    uint32_t nids;
    lease_rec_t *l;
    size_t nl, lcap;
    bool oom;
} save_ctx_t;

static void lease_cb(void *arg, const ns_t *ns, uint16_t rank, const kvt_wire_hash_t *h,
                     uint64_t remaining_ms)
{
    save_ctx_t *c = arg;

    if (c->nl == c->lcap) {
        size_t nc = c->lcap ? 2 * c->lcap : 256;
        lease_rec_t *nl = realloc(c->l, nc * sizeof *nl);
        if (nl == NULL) {
            c->oom = true;
            return;
        }
        c->l = nl;
        c->lcap = nc;
    }
    c->l[c->nl] =
        (lease_rec_t){.ns_id = ns->id,
                      .rank = rank,
                      .remaining_ms = remaining_ms > UINT32_MAX ? UINT32_MAX : remaining_ms};
    memcpy(c->l[c->nl].hash, h->b, 16);
    c->nl++;
}

static int lease_cmp(const void *a, const void *b)
{
    const lease_rec_t *x = a, *y = b;

    return x->remaining_ms < y->remaining_ms ? -1 : x->remaining_ms > y->remaining_ms;
}

static int64_t file_index(const save_ctx_t *c, uint32_t ns_id)
{
    for (uint32_t i = 0; i < c->nids; i++)
        if (c->ids[i] == ns_id)
            return i;
    return -1;
}

static void put_ns(fsutil_buf_t *b, const ns_t *ns)
{
    size_t ml = strlen(ns->model), rl = strlen(ns->revision), bl = gates_export_bytes(ns->gates);
    uint8_t *p = fsutil_buf_add(b, 2 + ml + rl + 19 + bl);

    if (p == NULL)
        return;
    *p++ = (uint8_t)ml;
    memcpy(p, ns->model, ml);
    p += ml;
    *p++ = (uint8_t)rl;
    memcpy(p, ns->revision, rl);
    p += rl;
    kvt_put_u64(p, ns->fingerprint);
    p[8] = (uint8_t)ns->world;
    p[9] = (uint8_t)(ns->world >> 8);
    p[10] = ns->replicated ? 1 : 0;
    kvt_put_u32(p + 11, ns->chunk_tokens);
    kvt_put_u32(p + 15, (uint32_t)bl);
    gates_export(ns->gates, p + 19);
}

void state_save(const char *path, const ns_table_t *nst, const store_t *st, uint64_t now_ms)
{
    save_ctx_t c = {.nst = nst};
    fsutil_buf_t b = {0};
    uint32_t nleases = 0;
    uint8_t *p;
    int rc = -ENOMEM;

    c.ids = calloc(ns_max(nst) + 1, sizeof *c.ids);
    if (c.ids == NULL || fsutil_buf_add(&b, STATE_HDR) == NULL)
        goto out;
    for (uint32_t slot = 0; slot < ns_max(nst); slot++) {
        const ns_t *ns = ns_at(nst, slot);
        if (ns == NULL || ns->gates == NULL)
            continue;
        c.ids[c.nids++] = ns->id;
        put_ns(&b, ns);
    }
    store_leases(st, now_ms, lease_cb, &c);
    if (c.oom)
        goto out;
    if (c.nl > 0)
        qsort(c.l, c.nl, sizeof *c.l, lease_cmp);
    for (size_t i = 0; i < c.nl; i++) {
        int64_t at = file_index(&c, c.l[i].ns_id);
        if (at < 0 || (p = fsutil_buf_add(&b, STATE_LEASE)) == NULL)
            continue;
        kvt_put_u32(p, (uint32_t)at);
        p[4] = (uint8_t)c.l[i].rank;
        p[5] = (uint8_t)(c.l[i].rank >> 8);
        memcpy(p + 6, c.l[i].hash, 16);
        kvt_put_u32(p + 22, (uint32_t)c.l[i].remaining_ms);
        nleases++;
    }
    if ((p = fsutil_buf_add(&b, 8)) == NULL)
        goto out;
    memcpy(b.b, STATE_MAGIC, 8);
    kvt_put_u32(b.b + 8, STATE_VERSION);
    kvt_put_u32(b.b + 12, c.nids);
    kvt_put_u32(b.b + 16, nleases);
    kvt_put_u32(b.b + 20, 0);
    kvt_put_u64(b.b + 24, wall_ms());
    kvt_put_u64(p, kvt_csum(b.b, b.len - 8));
    {
        const char *slash = strrchr(path, '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash != NULL ? (int)(slash - path) : 1,
                 slash != NULL ? path : ".");
        rc = fsutil_mkdirs(path, false);
        if (rc == 0)
            rc = fsutil_write_atomic(dir, slash != NULL ? slash + 1 : path, b.b, b.len);
    }
out:
    if (rc == 0)
        log_info("state_saved", "path=%s namespaces=%u leases=%u bytes=%zu", path, c.nids, nleases,
                 b.len);
    else
        log_warn("state_saved", "path=%s error=\"%s\"", path, strerror(-rc));
    free(c.ids);
    free(c.l);
    free(b.b);
}

/* --- loading --- */

typedef struct {
    ns_table_t *nst;
    store_t *st;
    const config_t *cfg;
    uint64_t now_ms, elapsed_ms;
    ns_t **ns; /* file index -> namespace (NULL: not restored) */
    uint32_t nns;
    uint64_t restored_ns, leases, last_remaining;
    uint64_t ghost_reset;
} load_ctx_t;

static int load_ns_cb(void *arg, uint32_t index, const state_ns_t *s)
{
    load_ctx_t *c = arg;
    char model[256];
    ns_t *ns = NULL;
    int rc;

    if (index >= c->nns)
        return -EBADMSG;
    memcpy(model, s->id.model, s->id.model_len);
    model[s->id.model_len] = '\0';
    if (s->id.world == 0 || s->id.chunk_tokens == 0 ||
        ns_declare(c->nst, &s->id, config_gates_for(c->cfg, model), &ns) != 0)
        return 0; /* not declarable any more (conflict, table full): its state goes */
    rc = gates_import(ns->gates, s->blob, s->blob_len);
    if (rc < 0) {
        char q[2 * KVT_MODEL_MAX];
        log_warn("state_load_ns", "model=%s error=\"%s\" action=priors",
                 log_value(q, sizeof q, model), strerror(-rc));
        return 0;
    }
    c->ghost_reset += rc == 1;
    c->ns[index] = ns;
    c->restored_ns++;
    return 0;
}

static int load_lease_cb(void *arg, const state_lease_t *l)
{
    load_ctx_t *c = arg;
    kvt_wire_hash_t h;

    if (c->ns[l->ns] == NULL || l->remaining_ms <= c->elapsed_ms ||
        l->remaining_ms < c->last_remaining)
        return 0;
    c->last_remaining = l->remaining_ms;
    memcpy(h.b, l->hash, 16);
    if (store_lease_restore(c->st, c->ns[l->ns], l->rank, &h, c->now_ms,
                            (uint32_t)(l->remaining_ms - c->elapsed_ms)) == 0)
        c->leases++;
    return 0;
}

static int count_ns_cb(void *arg, uint32_t index, const state_ns_t *s)
{
    (void)s;
    *(uint32_t *)arg = index + 1;
    return 0;
}

void state_load(const char *path, ns_table_t *nst, store_t *st, const config_t *cfg,
                uint64_t now_ms, uint64_t *nns, uint64_t *nleases)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    uint64_t saved = 0, wall = wall_ms();
    load_ctx_t c = {.nst = nst, .st = st, .cfg = cfg, .now_ms = now_ms};
    state_visit_t count = {.ns = count_ns_cb}, visit = {.ns = load_ns_cb, .lease = load_lease_cb};
    int rc;

    rc = fsutil_read_file(path, &buf, &len);
    if (rc != 0) {
        if (rc != -ENOENT)
            log_warn("state_load", "path=%s error=\"%s\" action=priors", path, strerror(-rc));
        return;
    }
    rc = state_decode(buf, len, &count, &c.nns, &saved);
    if (rc == 0) {
        c.ns = calloc(c.nns + 1, sizeof *c.ns);
        c.elapsed_ms = wall > saved ? wall - saved : 0;
        rc = c.ns != NULL ? state_decode(buf, len, &visit, &c, &saved) : -ENOMEM;
    }
    if (rc != 0) {
        log_warn("state_load", "path=%s error=\"%s\" action=priors", path,
                 rc == -EPROTO    ? "another version"
                 : rc == -EBADMSG ? "corrupted"
                                  : strerror(-rc));
        goto out;
    }
    *nns = c.restored_ns;
    *nleases = c.leases;
    log_info("state_load",
             "path=%s namespaces=%" PRIu64 " leases=%" PRIu64 " ghost_tables_reset=%" PRIu64
             " down_ms=%" PRIu64,
             path, c.restored_ns, c.leases, c.ghost_reset, c.elapsed_ms);
out:
    free(buf);
    free(c.ns);
    /* consumed: a later crash must not bring back a state older than what it stops with */
    unlink(path);
}
