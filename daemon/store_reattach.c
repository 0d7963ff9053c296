/*
 * store_reattach.c - the RAM tier across restarts: the journal the store keeps of what the
 * arena holds, and the re-attach that rebuilds the RAM tier from it (see store.h, journal.h,
 * ram.h; README "Restarts").
 *
 * Design notes:
 *   - Metadata lives outside the arena, in the journal: clients map the arena read-write, so
 *     nothing in it could vouch for a chunk (per-extent headers in the arena could be forged by
 *     any client). The arena keeps only its header page (ram.h).
 *   - Cost per save: one 80-byte ADD record per chunk published (plus a namespace record the
 *     first time a namespace is journaled in a file), gathered in the journal's buffer and written
 *     with one write(2) into the page cache per save or commit, before its SAVE_OK; one 20-byte
 *     DEL record per extent given up, written (with the other records gathered) before the
 *     allocation that evicted returns; no fsync. Compaction (a rewrite from the index, O(RAM
 *     chunks), on the loop) runs when the journal passes JOURNAL_COMPACT_FACTOR x the RAM chunks
 *     plus JOURNAL_COMPACT_FLOOR records, and at a clean stop (fsync'd).
 *   - Replay: every record is read in order; for each arena offset the last record decides (an
 *     ADD is live, a DEL is not), so an extent reused by later chunks carries only its last
 *     chunk. Live entries that overlap (possible only if records were lost) keep the later one.
 *     Each live entry is accepted only when it lies inside the chunk area, its namespace can be
 *     declared, and the XXH3-64 of the bytes now at its location equals its checksum; then its
 *     extent is claimed (in offset order) and it joins the index: a chunk the disk tier
 *     recovered too gets its RAM copy back (clean), any other is a dirty RAM chunk the cleaner
 *     will write. Chain links are queued with the disk tier's (store__relink). Reservations are
 *     never journaled, so an uncommitted reservation simply does not come back; neither does a
 *     pin or a lease (a generation later, every location a client held is ESTALE).
 *   - The hashing at re-attach runs on the loop thread before the daemon serves (recovery runs
 *     before READY): ~0.1 s per GiB at XXH3's speed, measured in status ram.recovery.ms.
 *   - Which journal belongs to which arena: the journal's header names the arena id (random,
 *     new at each cold start) and the generation of the run that wrote it; it is used only when
 *     both match the arena's header (the generation is the previous run's, or this one's when a
 *     start stopped between installing its journal and writing the arena's header). Anything
 *     else is discarded whole, and counted.
 * Threads: loop thread only.
 */
#include "store_internal.h"

#include "alloc.h"
#include "fsutil.h"
#include "kvt_csum.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* --- appending --- */

static void ns_record(const ns_t *ns, journal_ns_t *out)
{
    memset(out, 0, sizeof *out);
    out->ns = ns->id;
    out->world = ns->world;
    out->flags = ns->replicated ? JOURNAL_NS_REPLICATED : 0;
    out->chunk_tokens = ns->chunk_tokens;
    out->fingerprint = ns->fingerprint;
    snprintf(out->model, sizeof out->model, "%s", ns->model);
    snprintf(out->revision, sizeof out->revision, "%s", ns->revision);
    out->model_len = (uint8_t)strlen(out->model);
    out->revision_len = (uint8_t)strlen(out->revision);
}

static void add_to(journal_t *j, const ns_t *ns, const index_entry_t *e)
{
    journal_add_t a = {.ns = e->ns, .rank = e->rank, .off = e->off, .len = e->len, .csum = e->csum};

    if (!journal_ns_known(j, e->ns)) {
        journal_ns_t r;
        ns_record(ns, &r);
        journal_put_ns(j, &r);
    }
    memcpy(a.hash, e->hash.b, 16);
    if (e->parent != NULL) {
        a.flags |= JOURNAL_ADD_PARENT;
        memcpy(a.parent, e->parent->hash.b, 16);
    } else if (e->flags & INDEX_F_ORPHAN) {
        a.flags |= JOURNAL_ADD_ORPHAN; /* its predecessor's hash is not kept: it stays one */
    }
    journal_add(j, &a);
}

void store__journal_add(store_t *s, const ns_t *ns, const index_entry_t *e)
{
    if (s->journal != NULL && ns != NULL)
        add_to(s->journal, ns, e);
}

void store__journal_del(store_t *s, const index_entry_t *e)
{
    if (s->journal != NULL)
        journal_del(s->journal, e->off);
}

void store__journal_flush(store_t *s)
{
    int rc;

    if (s->journal == NULL || journal_failed(s->journal))
        return;
    rc = journal_flush(s->journal);
    if (rc != 0)
        log_error("ram_journal", "path=%s error=\"%s\" action=journal_off (the next start is cold)",
                  s->journal_path, strerror(-rc));
}

struct compact_ctx {
    store_t *s;
    journal_t *j;
};

static void compact_cb(const index_entry_t *e, void *arg)
{
    struct compact_ctx *c = arg;

    if ((e->flags & INDEX_F_RAM) && !(e->flags & INDEX_F_BAD))
        add_to(c->j, ns_get(c->s->nst, e->ns), e);
}

static journal_hdr_t journal_hdr_of(const store_t *s)
{
    return (journal_hdr_t){.arena_id = ram_arena_id(s->ram),
                           .capacity = ram_capacity(s->ram),
                           .chunk_off = RAM_HDR_BYTES,
                           .unit = ALLOC_UNIT_DEFAULT,
                           .gen = ram_gen(s->ram)};
}

/* A new journal holding exactly the RAM chunks, installed over the old one. 0 or an errno (the
 * old journal, if any, stays in use). */
static int journal_rewrite(store_t *s, bool sync)
{
    journal_hdr_t h = journal_hdr_of(s);
    struct compact_ctx c = {.s = s};
    int rc = journal_create(s->journal_path, &h, &c.j);

    if (rc != 0)
        return rc;
    index_foreach(s->ix, compact_cb, &c);
    rc = journal_install(c.j, sync);
    if (rc != 0) {
        journal_close(&c.j, false);
        return rc;
    }
    journal_close(&s->journal, false);
    s->journal = c.j;
    return 0;
}

void store__journal_compact(store_t *s, bool sync)
{
    uint64_t before = journal_records(s->journal);
    int rc;

    if (journal_failed(s->journal))
        return;
    rc = journal_rewrite(s, sync);
    if (rc != 0)
        log_warn("ram_journal_compact", "path=%s error=\"%s\"", s->journal_path, strerror(-rc));
    else
        log_debug("ram_journal_compact", "records_before=%" PRIu64 " chunks=%" PRIu64, before,
                  s->ram_chunks);
}

void store__close_finish(void *arg)
{
    store_t *s = arg;

    if (!store__checkpoint_at_stop(s))
        return; /* called again when the periodic checkpoint in flight is written */
    if (s->journal != NULL)
        store__journal_compact(s, true);
    s->close_done(s->close_arg);
}

/* --- replay --- */

/* An ADD (add >= 0, into adds) or a DEL at off, seq-th record of the journal. */
typedef struct {
    uint64_t off;
    uint64_t seq;
    int64_t add;
} jevent_t;

typedef struct {
    journal_ns_t *ns; /* sorted by ns once read */
    ns_t **declared;  /* per ns[]: declared at the first chunk that needs it */
    bool *refused;    /* per ns[]: ns_declare refused it */
    size_t nns, nscap;
    journal_add_t *adds;
    size_t nadds, addcap;
    jevent_t *ev;
    size_t nev, evcap;
} replay_t;

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    void *np;
    size_t nc;

    if (n < *cap)
        return 0;
    nc = *cap ? 2 * *cap : 256;
    np = realloc(*p, nc * size);
    if (np == NULL)
        return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

static void replay_free(replay_t *r)
{
    free(r->ns);
    free(r->declared);
    free(r->refused);
    free(r->adds);
    free(r->ev);
}

static int event_cmp(const void *a, const void *b)
{
    const jevent_t *x = a, *y = b;

    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int ns_cmp(const void *a, const void *b)
{
    const journal_ns_t *x = a, *y = b;

    return x->ns < y->ns ? -1 : x->ns > y->ns;
}

/* Reads the records after the header into r; stops at a torn tail. 0 or -ENOMEM. */
static int replay_read(const uint8_t *buf, size_t n, replay_t *r, uint64_t *records)
{
    size_t pos = JOURNAL_HDR_BYTES;
    journal_rec_t rec;
    int len;

    while (pos < n && (len = journal_decode(buf + pos, n - pos, &rec)) > 0) {
        pos += (size_t)len;
        (*records)++;
        if (rec.type == JOURNAL_NS) {
            size_t i;
            for (i = 0; i < r->nns && r->ns[i].ns != rec.u.ns.ns; i++)
                ;
            if (i == r->nns) {
                if (grow((void **)&r->ns, &r->nscap, r->nns, sizeof *r->ns) != 0)
                    return -ENOMEM;
                r->nns++;
            }
            r->ns[i] = rec.u.ns;
            continue;
        }
        if (grow((void **)&r->ev, &r->evcap, r->nev, sizeof *r->ev) != 0)
            return -ENOMEM;
        if (rec.type == JOURNAL_ADD) {
            if (grow((void **)&r->adds, &r->addcap, r->nadds, sizeof *r->adds) != 0)
                return -ENOMEM;
            r->adds[r->nadds] = rec.u.add;
            r->ev[r->nev++] =
                (jevent_t){.off = rec.u.add.off, .seq = *records, .add = (int64_t)r->nadds++};
        } else {
            r->ev[r->nev++] = (jevent_t){.off = rec.u.del_off, .seq = *records, .add = -1};
        }
    }
    if (r->nns > 0)
        qsort(r->ns, r->nns, sizeof *r->ns, ns_cmp);
    r->declared = calloc(r->nns + 1, sizeof *r->declared);
    r->refused = calloc(r->nns + 1, sizeof *r->refused);
    if (r->declared == NULL || r->refused == NULL)
        return -ENOMEM;
    if (r->nev > 0)
        qsort(r->ev, r->nev, sizeof *r->ev, event_cmp);
    return 0;
}

/* The namespace of journal id jns, declared now if need be; NULL when unknown or refused. */
static ns_t *replay_ns(store_t *s, replay_t *r, uint32_t jns)
{
    journal_ns_t key = {.ns = jns};
    journal_ns_t *j = r->nns > 0 ? bsearch(&key, r->ns, r->nns, sizeof *r->ns, ns_cmp) : NULL;
    size_t i;
    ns_ident_t id;

    if (j == NULL)
        return NULL;
    i = (size_t)(j - r->ns);
    if (r->declared[i] != NULL || r->refused[i])
        return r->declared[i];
    id = (ns_ident_t){.model = j->model,
                      .model_len = j->model_len,
                      .revision = j->revision,
                      .revision_len = j->revision_len,
                      .fingerprint = j->fingerprint,
                      .world = j->world,
                      .replicated = (j->flags & JOURNAL_NS_REPLICATED) != 0,
                      .chunk_tokens = j->chunk_tokens};
    if (j->model_len == 0 || j->world == 0 || j->chunk_tokens == 0 ||
        ns_declare(s->nst, &id, config_gates_for(s->cfg, j->model), &r->declared[i]) != 0) {
        r->refused[i] = true;
        r->declared[i] = NULL;
    }
    return r->declared[i];
}

/* Live entry a (its extent claimed) joins the index. false: discarded (the caller frees). */
static bool replay_place(store_t *s, replay_t *r, const journal_add_t *a)
{
    ns_t *ns = replay_ns(s, r, a->ns);
    kvt_wire_hash_t h;
    index_entry_t *e;

    if (ns == NULL || a->rank >= ns->world || (ns->replicated && a->rank != 0))
        return false;
    memcpy(h.b, a->hash, 16);
    e = index_find(s->ix, ns->id, a->rank, &h);
    if (e != NULL) {
        /* recovered from disk too: the same bytes get their RAM copy back (clean) */
        if ((e->flags & INDEX_F_RAM) || e->csum != a->csum || e->len != a->len)
            return false;
        index_ram_set(s->ix, e, a->off);
    } else {
        e = index_add(s->ix, ns->id, a->rank, &h, NULL, (a->flags & JOURNAL_ADD_ORPHAN) != 0,
                      a->off, a->len);
        if (e == NULL)
            return false;
        e->csum = a->csum;
        ns->chunks++;
        ns->bytes += a->len;
        if (a->flags & JOURNAL_ADD_PARENT)
            store__relink_queue(s, ns->id, a->rank, &h, a->parent);
    }
    s->stored_bytes += a->len;
    s->ram_chunks++;
    store__dirty_add(s, e); /* without a disk copy: the cleaner writes it */
    return true;
}

/* The live entries of r, in offset order, their overlaps resolved (the later record wins). */
static size_t replay_live(replay_t *r, const journal_add_t **live, uint64_t *discarded)
{
    size_t n = 0;
    uint64_t *seq = malloc((r->nev + 1) * sizeof *seq);

    if (seq == NULL)
        return 0;
    for (size_t i = 0; i < r->nev; i++) {
        const journal_add_t *a;
        if (i + 1 < r->nev && r->ev[i + 1].off == r->ev[i].off)
            continue; /* a later record at this offset decides */
        if (r->ev[i].add < 0)
            continue;
        a = &r->adds[r->ev[i].add];
        while (n > 0 && live[n - 1]->off + live[n - 1]->len > a->off) {
            if (seq[n - 1] > r->ev[i].seq)
                break;
            n--; /* the older of two overlapping entries goes */
            (*discarded)++;
        }
        if (n > 0 && live[n - 1]->off + live[n - 1]->len > a->off) {
            (*discarded)++;
            continue;
        }
        live[n] = a;
        seq[n++] = r->ev[i].seq;
    }
    free(seq);
    return n;
}

/* Replays the journal in buf over the re-attached arena. */
static void replay(store_t *s, const uint8_t *buf, size_t len)
{
    replay_t r = {0};
    const journal_add_t **live = NULL;
    size_t n;

    if (replay_read(buf, len, &r, &s->rec.journal_records) != 0 ||
        (live = malloc((r.nev + 1) * sizeof *live)) == NULL) {
        log_error("ram_recovery", "error=\"%s\" action=cold", strerror(ENOMEM));
        s->rec.discarded += r.nadds;
        goto out;
    }
    n = replay_live(&r, live, &s->rec.discarded);
    for (size_t i = 0; i < n; i++) {
        const journal_add_t *a = live[i];

        if (!ram_extent_ok(s->ram, a->off, a->len) || a->len > s->cfg->ram.max_chunk_bytes) {
            s->rec.discarded++;
            continue;
        }
        if (kvt_csum(ram_ptr(s->ram, a->off), a->len) != a->csum) {
            s->rec.checksum_drops++;
            log_warn("ram_recovery_checksum",
                     "offset=%" PRIu64 " bytes=%" PRIu64 " action=discarded", a->off, a->len);
            continue;
        }
        if (ram_claim(s->ram, a->off, a->len) != 0) {
            s->rec.discarded++;
            continue;
        }
        if (!replay_place(s, &r, a)) {
            ram_free(s->ram, a->off, a->len);
            s->rec.discarded++;
            continue;
        }
        s->rec.chunks++;
        s->rec.bytes += a->len;
    }
out:
    free(live);
    replay_free(&r);
}

/* Why a cold start, for people. */
static const char *cold_text(ram_cold_reason_t why)
{
    switch (why) {
    case RAM_COLD_DISABLED:
        return "ram.reattach is false or --cold-start was given";
    case RAM_COLD_MEMFD:
        return "the arena is an anonymous memfd (ram.arena_path is empty)";
    case RAM_COLD_NO_FILE:
        return "no arena file was found";
    case RAM_COLD_SIZE:
        return "the arena file's size is not this configuration's (ram.capacity_bytes, or with "
               "the disk tier disk.write_buffer_bytes, changed)";
    case RAM_COLD_HEADER:
        return "the arena's header page does not decode (not an arena, or overwritten)";
    case RAM_COLD_VERSION:
        return "the arena was written in another format version";
    case RAM_COLD_LAYOUT:
        return "the arena's capacity or layout is not this configuration's (ram.capacity_bytes, "
               "or with the disk tier disk.write_buffer_bytes, changed)";
    default:
        return "re-attached";
    }
}

/* Reads the journal at path (s->journal_path, or the legacy one it is migrated from) and, when
 * it belongs to this arena, replays it: true then. next: another place is tried after this one
 * (a missing file is no warning then, and a rejected one says so). A rejected journal's
 * generation raises *seen (the caller raises the arena's generation above it once every place
 * was tried: raised here, it would fail the next place's check of the previous generation). */
static bool recover_from_journal(store_t *s, const char *path, bool next, uint32_t *seen)
{
    const char *action = next ? "next_place" : "no_chunks";
    uint8_t *buf = NULL;
    size_t len = 0;
    journal_hdr_t h;
    bool replayed = false;
    int rc = journal_read(path, &buf, &len);

    if (rc != 0) {
        if (!next || rc != -ENOENT)
            log_warn("ram_recovery", "journal=%s error=\"%s\" action=%s", path, strerror(-rc),
                     action);
        return false;
    }
    if (journal_decode_hdr(buf, len, &h) != 0) {
        log_warn("ram_recovery", "journal=%s error=\"header does not decode\" action=%s", path,
                 action);
    } else if (h.arena_id != ram_arena_id(s->ram) || h.capacity != ram_capacity(s->ram) ||
               h.chunk_off != RAM_HDR_BYTES || h.unit != ALLOC_UNIT_DEFAULT ||
               (h.gen + 1 != ram_gen(s->ram) && h.gen != ram_gen(s->ram))) {
        s->rec.discarded++;
        log_warn("ram_recovery",
                 "journal=%s journal_gen=%u arena_gen=%u error=\"the journal describes another "
                 "arena or generation\" action=%s",
                 path, h.gen, ram_gen(s->ram) - 1, action);
        if (h.gen > *seen)
            *seen = h.gen;
    } else {
        ram_gen_above(s->ram, h.gen);
        replay(s, buf, len);
        replayed = true;
    }
    free(buf);
    return replayed;
}

/*
 * The journal's default place (ram.journal_path ""): for an arena file on a tmpfs (the default,
 * /dev/shm), <arena path>.d/journal, in a directory of the daemon's own beside the arena; for
 * any other arena <disk.dir>/<arena file name>.journal, the default of 0.2.5 and before (legacy,
 * set either way: this arena's journal found there is migrated, store__ram_recover).
 *
 * Why beside the arena (0.2.6): the journal describes the arena and is worth exactly as long as
 * the arena file lives. On the arena's tmpfs the two share their fate (a reboot empties both),
 * and no device backs the file, so a disk.dir whose device hangs cannot stop the loop in the
 * journal's write(2) (README, "A disk that hangs"). A directory rather than a file beside the
 * arena: /dev/shm is writable by every user, and a journal another user planted or linked there
 * would be replayed; a directory that must be this user's own, mode 0700 (fsutil_private_dir),
 * is checked once and everything in it is safe. A directory that fails the check is not used
 * (log ram_journal action=legacy_path): the journal goes to the legacy path. hugetlbfs takes no
 * write(2), so an arena there keeps the legacy path too.
 */
static void journal_default_path(store_t *s, char *legacy, size_t cap)
{
    const char *base = strrchr(ram_path(s->ram), '/');
    char dir[sizeof s->journal_path - 16];
    int rc;

    snprintf(legacy, cap, "%s/%s.journal", s->cfg->disk.dir,
             base != NULL ? base + 1 : ram_path(s->ram));
    snprintf(s->journal_path, sizeof s->journal_path, "%s", legacy);
    if (!ram_on_tmpfs(s->ram))
        return;
    snprintf(dir, sizeof dir, "%s.d", ram_path(s->ram));
    rc = fsutil_private_dir(dir);
    if (rc != 0) {
        log_warn("ram_journal", "dir=%s error=\"%s\" action=legacy_path path=%s", dir,
                 rc == -EPERM ? "not a directory of this user's own with mode 0700" : strerror(-rc),
                 legacy);
        return;
    }
    snprintf(s->journal_path, sizeof s->journal_path, "%s/journal", dir);
}

void store__ram_recover(store_t *s)
{
    uint64_t t0 = uv_hrtime();
    const config_t *cfg = s->cfg;
    char legacy[sizeof s->journal_path] = "";
    const char *from; /* the journal replayed: s->journal_path, or legacy when migrated */
    int rc;

    s->rec.path = s->ram_why == RAM_ATTACHED ? "reattach" : "cold";
    s->rec.reason = ram_cold_reason_name(s->ram_why);
    if (ram_path(s->ram)[0] == '\0' || !cfg->ram.reattach) {
        /* nothing to keep: no journal, no cost per save */
        s->journal_path[0] = '\0';
        ram_write_header(s->ram);
        return;
    }
    if (cfg->ram.journal_path[0] != '\0')
        snprintf(s->journal_path, sizeof s->journal_path, "%s", cfg->ram.journal_path);
    else
        journal_default_path(s, legacy, sizeof legacy);
    if (strcmp(legacy, s->journal_path) == 0)
        legacy[0] = '\0'; /* no other place to migrate from */
    if (s->ram_why != RAM_ATTACHED)
        log_info("ram_cold_start", "arena=%s reason=%s why=\"%s\"", ram_path(s->ram), s->rec.reason,
                 cold_text(s->ram_why));
    /* This arena's journal may be at the legacy place: after an upgrade from 0.2.5, a downgrade
     * and back, or a run that could not use the directory. The one whose header names this arena
     * and the previous generation is replayed (recover_from_journal), the new place first. */
    from = s->journal_path;
    if (s->ram_why == RAM_ATTACHED) {
        bool other = legacy[0] != '\0' && access(legacy, F_OK) == 0;
        uint32_t seen = 0;
        if (!recover_from_journal(s, s->journal_path, other, &seen) && other &&
            recover_from_journal(s, legacy, false, &seen)) {
            from = legacy;
            log_info("ram_journal", "path=%s from=%s action=migrate", s->journal_path, legacy);
        }
        ram_gen_above(s->ram, seen); /* above every journal seen */
    }
    rc = fsutil_mkdirs(s->journal_path, false);
    if (rc == 0)
        rc = journal_rewrite(s, false);
    if (rc != 0) {
        /* without a journal the next start must not trust an old one */
        s->rec.journal_error = rc;
        (void)unlink(s->journal_path);
        log_error("ram_journal", "path=%s error=\"%s\" action=journal_off (the next start is cold)",
                  s->journal_path, strerror(-rc));
    }
    if (from == legacy && rc == 0)
        (void)unlink(legacy); /* migrated: its chunks are in the new journal now */
    ram_write_header(s->ram);
    s->rec.ms = (uv_hrtime() - t0) / 1000000u;
    if (s->ram_why == RAM_ATTACHED)
        log_info("ram_recovery",
                 "path=reattach arena=%s journal=%s gen=%u chunks=%" PRIu64 " bytes=%" PRIu64
                 " discarded=%" PRIu64 " checksum_drops=%" PRIu64 " records=%" PRIu64
                 " ms=%" PRIu64,
                 ram_path(s->ram), from, ram_gen(s->ram), s->rec.chunks, s->rec.bytes,
                 s->rec.discarded, s->rec.checksum_drops, s->rec.journal_records, s->rec.ms);
}

bool store_state_path(const store_t *s, char *buf, size_t cap)
{
    if (s->cfg->disk.enabled)
        snprintf(buf, cap, "%s/gates.state", s->cfg->disk.dir);
    else if (s->journal != NULL)
        snprintf(buf, cap, "%s.gates", s->journal_path);
    else
        return false;
    return true;
}
