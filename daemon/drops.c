/*
 * drops.c - tombstones of dropped namespaces (see drops.h).
 *
 * Design: a small array, searched linearly (an operator drops a handful of times; recovery asks
 * once per record and the array is usually empty). Strings are kept as bytes with their length;
 * the file spells them in hex, so the parser is sscanf and a hex decoder. The whole file is
 * rewritten through fsutil_write_atomic() on every change: synchronously before drops_attach()
 * (the start-up), on the thread pool after it (0.2.6): the file's write, fsync, rename and the
 * directory's fsync block as long as the disk does, and an operator's drop or a flush's settle
 * on a hung disk must not stop the loop. One write at a time: the text is rendered on the loop
 * (the worker reads only that buffer and dir); a change while a write runs renders the set again
 * once it finished, so the file ends at the last state. Every change counts a version; a waiter
 * (drops_when_written) is called back when a write of its version or a later one completed. A
 * destroy while a write runs leaves the object to that write's completion (orphan), which first
 * writes the last state synchronously if it changed since.
 *
 * Threads: loop thread only, but for write_work (a worker: the rendered buffer and dir only).
 * Invariants: n <= DROPS_MAX; an entry with pending_seq 0 is settled; writing <=> work queued;
 * wver <= ver; every waiter's version > done_ver.
 */
#include "drops.h"

#include "array.h"
#include "fsutil.h"
#include "kvt_proto.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define DROPS_FILE "drops"
#define DROPS_MAGIC "kvtier-drops 1"
#define DROPS_MODEL_MAX 255
#define DROPS_LINE_MAX (64 + 2 * (DROPS_MODEL_MAX + KVT_REVISION_MAX) + 8)

typedef struct {
    uint64_t seg, off;
    uint64_t fingerprint;
    uint64_t pending_seq; /* 0: settled */
    size_t model_len, revision_len;
    char model[DROPS_MODEL_MAX + 1];
    char revision[KVT_REVISION_MAX + 1];
} tomb_t;

typedef struct waiter {
    struct waiter *next;
    uint64_t ver; /* called back once a write of this version or a later one completed */
    drops_written_cb cb;
    void *arg;
} waiter_t;

struct drops {
    char dir[PATH_MAX];
    tomb_t *t;
    size_t n, cap;
    uv_loop_t *loop; /* NULL: writes are synchronous */
    uv_work_t work;
    bool writing;      /* a write is queued or running */
    bool orphan;       /* drops_destroy() ran while writing: the completion frees it */
    uint64_t ver;      /* changes to write so far */
    uint64_t wver;     /* the version of the text being written */
    uint64_t done_ver; /* the version of the last write that completed */
    char *wbuf;        /* the text being written */
    size_t wlen;
    int wrc;
    waiter_t *waiters; /* oldest first */
    unsigned nwaiters;
};

static bool before(uint64_t seg, uint64_t off, const tomb_t *t)
{
    return seg < t->seg || (seg == t->seg && off < t->off);
}

static void hex_put(char *out, const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[(unsigned char)s[i] >> 4];
        out[2 * i + 1] = digits[(unsigned char)s[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes hex text (or "-" for empty) into out (cap bytes); the length, or -1. */
static int hex_get(const char *text, char *out, size_t cap)
{
    size_t n = strlen(text);

    if (strcmp(text, "-") == 0) {
        out[0] = '\0';
        return 0;
    }
    if (n % 2 != 0 || n / 2 >= cap)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_val(text[2 * i]), lo = hex_val(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (char)(hi << 4 | lo);
    }
    out[n / 2] = '\0';
    return (int)(n / 2);
}

/* The file's text for the set as it is (malloc'd, *lenp bytes), or NULL. */
static char *drops_render(const drops_t *d, size_t *lenp)
{
    size_t cap = sizeof DROPS_MAGIC + 1 + d->n * DROPS_LINE_MAX, len = 0;
    char *buf = malloc(cap);

    if (buf == NULL)
        return NULL;
    len += (size_t)snprintf(buf, cap, "%s\n", DROPS_MAGIC);
    for (size_t i = 0; i < d->n; i++) {
        const tomb_t *t = &d->t[i];
        char model[2 * DROPS_MODEL_MAX + 1], rev[2 * KVT_REVISION_MAX + 1];

        hex_put(model, t->model, t->model_len);
        hex_put(rev, t->revision, t->revision_len);
        len += (size_t)snprintf(buf + len, cap - len,
                                "%" PRIu64 " %" PRIu64 " %016" PRIx64 " %s %s\n", t->seg, t->off,
                                t->fingerprint, model, t->revision_len > 0 ? rev : "-");
    }
    *lenp = len;
    return buf;
}

/* Calls back, in order, the waiters whose version a write of version ver covers, with rc; while
 * a tombstone is pending (0.2.7) a successful write wakes none: what it wrote would still let a
 * crash bring back the records of the write buffer at the drop (see drops.h, Limits), and its
 * settle writes again. */
static void wake(drops_t *d, uint64_t ver, int rc)
{
    d->done_ver = ver;
    if (rc == 0 && drops_pending(d))
        return;
    while (d->waiters != NULL && d->waiters->ver <= ver) {
        waiter_t *w = d->waiters;
        d->waiters = w->next;
        d->nwaiters--;
        w->cb(w->arg, rc);
        free(w);
    }
}

static void drops_free(drops_t *d)
{
    free(d->wbuf);
    free(d->t);
    free(d);
}

static void write_work(uv_work_t *w)
{
    drops_t *d = w->data;

    d->wrc = fsutil_write_atomic(d->dir, DROPS_FILE, d->wbuf, d->wlen);
}

static int write_start(drops_t *d);

static void write_done(uv_work_t *w, int status)
{
    drops_t *d = w->data;
    int rc = status != 0 ? status : d->wrc;

    free(d->wbuf);
    d->wbuf = NULL;
    d->writing = false;
    if (rc != 0)
        log_warn("drops_write_failed",
                 "dir=%s error=\"%s\" (a restart may bring dropped disk copies back)", d->dir,
                 strerror(-rc));
    wake(d, d->wver, rc);
    if (d->ver > d->wver) { /* changed meanwhile */
        if (d->orphan)
            d->loop = NULL; /* the stop: the last state now, on the loop */
        (void)write_start(d);
    }
    if (d->orphan) {
        wake(d, UINT64_MAX, -ECANCELED); /* none is left: a synchronous write wakes them */
        drops_free(d);
    }
}

/* Renders the set (version d->ver) and writes it now (no loop) or queues the write. */
static int write_start(drops_t *d)
{
    char *buf;
    size_t len = 0;
    int rc;

    buf = drops_render(d, &len);
    if (buf == NULL) {
        wake(d, d->ver, -ENOMEM);
        return -ENOMEM;
    }
    if (d->loop != NULL) {
        d->wbuf = buf;
        d->wlen = len;
        d->wver = d->ver;
        d->work.data = d;
        if (uv_queue_work(d->loop, &d->work, write_work, write_done) == 0) {
            d->writing = true;
            return 0;
        }
        d->wbuf = NULL; /* cannot be queued: written now */
    }
    rc = fsutil_write_atomic(d->dir, DROPS_FILE, buf, len);
    free(buf);
    wake(d, d->ver, rc);
    return rc;
}

/* The set changed: writes it now (no loop), or queues the write (after the one in flight). 0, or
 * a negative errno of a synchronous write or of rendering the text; a queued write's failure is
 * logged (drops_write_failed) and given to its waiters. */
static int drops_write(drops_t *d)
{
    d->ver++;
    return d->writing ? 0 : write_start(d); /* write_done starts the next */
}

int drops_when_written(drops_t *d, drops_written_cb cb, void *arg)
{
    waiter_t *w, **at;

    if (d->done_ver == d->ver && !drops_pending(d))
        return 1;
    if (d->nwaiters >= DROPS_WAITERS_MAX)
        return -EBUSY;
    w = malloc(sizeof *w);
    if (w == NULL)
        return -ENOMEM;
    *w = (waiter_t){.ver = d->ver, .cb = cb, .arg = arg};
    for (at = &d->waiters; *at != NULL; at = &(*at)->next)
        ;
    *at = w;
    d->nwaiters++;
    return 0;
}

static int tomb_push(drops_t *d, const tomb_t *t)
{
    if (d->n == DROPS_MAX) {
        size_t i = 0;
        while (i < d->n && d->t[i].pending_seq != 0)
            i++;
        if (i == d->n)
            i = 0;
        memmove(&d->t[i], &d->t[i + 1], (d->n - i - 1) * sizeof *d->t);
        d->n--;
    }
    if (ARRAY_RESERVE(d->t, d->n, d->cap, 8) != 0)
        return -ENOMEM;
    d->t[d->n++] = *t;
    return 0;
}

/* Parses the file; on a bad line the whole set is dropped (logged). */
static void drops_read(drops_t *d)
{
    char path[PATH_MAX + 16], line[DROPS_LINE_MAX + 2];
    unsigned lineno = 1;
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", d->dir, DROPS_FILE);
    f = fopen(path, "re");
    if (f == NULL) {
        if (errno != ENOENT)
            log_warn("drops_unreadable", "path=%s error=\"%s\"", path, strerror(errno));
        return;
    }
    if (fgets(line, sizeof line, f) == NULL || strcmp(line, DROPS_MAGIC "\n") != 0)
        goto bad;
    while (fgets(line, sizeof line, f) != NULL) {
        char model[2 * DROPS_MODEL_MAX + 2], rev[2 * KVT_REVISION_MAX + 2];
        tomb_t t = {0};
        int ml, rl;

        lineno++;
        if (sscanf(line, "%" SCNu64 " %" SCNu64 " %" SCNx64 " %511s %511s", &t.seg, &t.off,
                   &t.fingerprint, model, rev) != 5)
            goto bad;
        ml = hex_get(model, t.model, sizeof t.model);
        rl = hex_get(rev, t.revision, sizeof t.revision);
        if (ml <= 0 || rl < 0)
            goto bad;
        t.model_len = (size_t)ml;
        t.revision_len = (size_t)rl;
        if (tomb_push(d, &t) != 0)
            goto bad;
    }
    fclose(f);
    return;
bad:
    log_warn("drops_bad_file", "path=%s line=%u action=ignored", path, lineno);
    d->n = 0;
    fclose(f);
}

int drops_open(const char *dir, drops_t **out)
{
    drops_t *d = calloc(1, sizeof *d);

    *out = NULL;
    if (d == NULL)
        return -ENOMEM;
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    drops_read(d);
    *out = d;
    return 0;
}

void drops_attach(drops_t *d, uv_loop_t *loop)
{
    if (d != NULL)
        d->loop = loop;
}

void drops_destroy(drops_t **pd)
{
    drops_t *d = *pd;

    if (d == NULL)
        return;
    *pd = NULL;
    if (d->writing) {
        d->orphan = true; /* write_done frees it */
        return;
    }
    wake(d, UINT64_MAX, -ECANCELED);
    drops_free(d);
}

bool drops_covers(const drops_t *d, const char *model, size_t model_len, const char *revision,
                  uint64_t fingerprint, uint64_t seg, uint64_t off)
{
    size_t rl = revision != NULL ? strlen(revision) : 0;

    for (size_t i = 0; d != NULL && i < d->n; i++) {
        const tomb_t *t = &d->t[i];
        if (t->fingerprint != fingerprint || t->model_len != model_len ||
            memcmp(t->model, model, model_len) != 0 || !before(seg, off, t))
            continue;
        if (revision == NULL || (t->revision_len == rl && memcmp(t->revision, revision, rl) == 0))
            return true;
    }
    return false;
}

int drops_add(drops_t *d, const char *model, const char *revision, uint64_t fingerprint,
              uint64_t seg, uint64_t off, uint64_t pending_seq)
{
    tomb_t t = {.seg = seg, .off = off, .fingerprint = fingerprint, .pending_seq = pending_seq};
    int rc;

    t.model_len = strnlen(model, DROPS_MODEL_MAX);
    t.revision_len = strnlen(revision, KVT_REVISION_MAX);
    memcpy(t.model, model, t.model_len);
    memcpy(t.revision, revision, t.revision_len);
    /* a tombstone of the same namespace is replaced: the new one covers everything it did */
    for (size_t i = 0; i < d->n; i++) {
        tomb_t *o = &d->t[i];
        if (o->fingerprint == fingerprint && o->model_len == t.model_len &&
            memcmp(o->model, t.model, t.model_len) == 0 && o->revision_len == t.revision_len &&
            memcmp(o->revision, t.revision, t.revision_len) == 0) {
            *o = t;
            return drops_write(d);
        }
    }
    rc = tomb_push(d, &t);
    return rc != 0 ? rc : drops_write(d);
}

bool drops_pending(const drops_t *d)
{
    for (size_t i = 0; d != NULL && i < d->n; i++)
        if (d->t[i].pending_seq != 0)
            return true;
    return false;
}

int drops_settle(drops_t *d, uint64_t seq, uint64_t seg, uint64_t off)
{
    bool moved = false;

    for (size_t i = 0; i < d->n; i++) {
        tomb_t *t = &d->t[i];
        if (t->pending_seq == 0 || t->pending_seq > seq)
            continue;
        t->pending_seq = 0;
        if (before(t->seg, t->off, &(tomb_t){.seg = seg, .off = off})) {
            t->seg = seg;
            t->off = off;
        }
        moved = true;
    }
    return moved ? drops_write(d) : 0;
}

void drops_prune(drops_t *d, uint64_t first_seg)
{
    size_t k = 0, n = d->n;

    for (size_t i = 0; i < d->n; i++) {
        const tomb_t *t = &d->t[i];
        /* it covers records below (seg, off): none is left when they all precede first_seg */
        if (t->pending_seq == 0 && !before(first_seg, 0, t))
            continue;
        d->t[k++] = *t;
    }
    d->n = k;
    if (k != n) {
        int rc = drops_write(d);
        log_info("drops_pruned", "removed=%zu kept=%zu%s", n - k, k,
                 rc != 0 ? " write=failed" : "");
    }
}
