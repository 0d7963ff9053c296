/*
 * requests.c - libkvtier's requests on the wire: for every kind (lookup, save, load, tally,
 * reserve, commit, pin, and the HELLO/ARENA of a connect or a recovery) the message of each step
 * and the handler of its reply (see io.c for the loop that sends them and matches the replies,
 * internal.h for the structures).
 *
 * Steps: a lookup, a tally, a reserve, a commit and a pin are one round trip each. A save on the
 * frames path asks first (SAVE_BEGIN) and sends the wanted chunks' bytes (SAVE_DATA); on the
 * shared-memory path it reserves (SAVE_RESERVE), copies the caller's chunks into the arena
 * extents it got (here, on the I/O thread: no copy ever happens on a submitting thread) and
 * commits (SAVE_COMMIT), with the checksums computed in the same pass as the copy when the
 * daemon answers CLIENT_CSUMS (the daemon then never reads the extents to hash them). A copying
 * load copies each hit out of its reply frame or out of the arena into the caller's buffer,
 * verifying the chunk's checksum in the same pass when the daemon answers CHECKSUMS (a mismatch is
 * KVT_LOAD_CORRUPT: a miss, a counter and a RELEASE CORRUPT), and queues the release of the arena
 * pins it copied out. A pin hands the arena pointers out, and a reserve its extents, with the hold
 * deadline measured from when the request was sent: the daemon's hold starts after that, so the
 * deadline is never late.
 *
 * Every location the daemon answers is checked against the mapping before it is used; a reply
 * that does not fit its request is KVT_EPROTO. A request answered ENONS or ESTALE goes to
 * kvt__recover (io.c); kvt__begin starts it again from its first step afterwards.
 *
 * Threads: the I/O thread only.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Sends step m of r; a request that cannot be sent ends with the error (a HELLO ends its
 * recovery). */
static void send_or_end(kvt_client_t *c, req_t *r, kvt_msg_t *m, const kvt_frame_t *f, size_t nf)
{
    int rc = kvt__send_step(c, r, m, f, nf);

    if (rc != 0)
        kvt__end(c, r, rc);
}

static void save_head(const kvt_client_t *c, kvt_msg_t *m, const kvt_hash_t *parent,
                      bool has_parent, bool has_op, uint64_t op_id)
{
    m->u.save.rank = c->rank;
    if (has_parent) {
        m->hdr.flags |= KVT_SAVE_PARENT;
        memcpy(m->u.save.parent.b, parent->b, KVT_HASH_BYTES);
    }
    if (has_op) {
        m->hdr.flags |= KVT_SAVE_OPID;
        m->u.save.op_id = op_id;
    }
}

static void set_error(req_t *r, const kvt_error_t *e)
{
    size_t n = e->text_len < sizeof r->err - 1 ? e->text_len : sizeof r->err - 1;

    if (n > 0)
        memcpy(r->err, e->text, n);
    r->err[n] = '\0';
}

static int map_arena(kvt_client_t *c, const kvt_msg_t *rep, char *err, size_t errcap)
{
    const kvt_arena_ok_t *a = &rep->u.arena_ok;
    char path[KVT_PATH_MAX + 1];
    arena_map_t *m, *old;
    int rc;

    if (a->path_len == 0 || a->arena_bytes == 0 || a->arena_bytes > SIZE_MAX)
        return KVT_EUNSUPP;
    memcpy(path, a->path, a->path_len);
    path[a->path_len] = '\0';
    if (kvt__map_same(c->map, path, a->arena_bytes, a->arena_gen))
        return 0;
    rc = kvt__map_open(path, a->arena_bytes, (rep->hdr.flags & KVT_ARENA_PREFAULTED) != 0,
                       a->arena_gen, a->hold_ms, &m, err, errcap);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&c->mu);
    old = c->map;
    m->seq = old != NULL ? old->seq + 1 : 1;
    c->map = m;
    c->info.arena_gen = m->gen;
    pthread_mutex_unlock(&c->mu);
    if (old != NULL) {
        atomic_fetch_add_explicit(&c->n_remaps, 1, memory_order_relaxed);
        kvt__map_unref(old);
    }
    return 0;
}

/* A recovery under KVT_DATA_PATH_AUTO found no arena to map: the client goes on the frames path
 * (a connect under AUTO does the same). Its mapping is dropped (requests holding it keep it until
 * they end); the waiting requests start again from their first step on frames, and zero-copy
 * calls answer KVT_EUNSUPP from here on, as on a frames client. The client does not return to the
 * shared-memory path by itself: a new connect does. */
static void frames_from_now(kvt_client_t *c)
{
    arena_map_t *old;

    pthread_mutex_lock(&c->mu);
    c->shm = false;
    old = c->map;
    c->map = NULL;
    pthread_mutex_unlock(&c->mu);
    kvt__map_unref(old);
}

static void hello_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = kvt__head_of(c, KVT_MSG_HELLO, NULL);
    kvt_frame_t f[2] = {{.data = c->model, .len = c->model_len},
                        {.data = c->revision, .len = c->revision_len}};

    m.hdr.flags = c->mla ? KVT_HELLO_REPLICATED : 0;
    m.u.hello.layout_fp = c->layout_fp;
    m.u.hello.chunk_tokens = c->chunk_tokens;
    m.u.hello.rank = c->rank;
    m.u.hello.world = c->world;
    m.u.hello.features =
        KVT_FEAT_CHECKSUMS | KVT_FEAT_TOKENS | KVT_FEAT_ARENA_GEN | KVT_FEAT_CLIENT_CSUMS;
    send_or_end(c, r, &m, f, 2);
}

static void on_hello(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_hello_ok_t *h = &rep->u.hello_ok;

    if (r->step == KVT_MSG_HELLO) {
        uint32_t win;
        if (rep->hdr.type != KVT_MSG_HELLO_OK || h->max_chunks == 0 || h->max_chunk_bytes == 0) {
            kvt__recovery_end(c, r, KVT_EPROTO);
            return;
        }
        win = h->max_in_flight != 0 ? h->max_in_flight : KVT_DEFAULT_WINDOW;
        if (c->opt_window != 0 && c->opt_window < win)
            win = c->opt_window;
        c->ns_id = h->ns_id;
        c->features = h->features;
        c->window = win;
        pthread_mutex_lock(&c->mu);
        c->info.lease_ms = h->lease_ms;
        c->info.max_chunk_bytes = h->max_chunk_bytes;
        /* what a reply can carry (KVT_RX_FRAMES_MAX): a daemon announcing more (kvtierd caps
         * server.max_chunks_per_request at 65536) would make larger requests time out */
        c->info.max_chunks = h->max_chunks < 65536 ? h->max_chunks : 65536;
        c->info.daemon_version = h->daemon_version;
        c->info.features = h->features;
        c->info.max_in_flight = win;
        pthread_mutex_unlock(&c->mu);
        if (r->want_arena) {
            kvt_msg_t m = kvt__head_of(c, KVT_MSG_ARENA, NULL);
            send_or_end(c, r, &m, NULL, 0);
            return;
        }
        kvt__recovery_end(c, r, 0);
        return;
    }
    r->arena_rc =
        rep->hdr.type == KVT_MSG_ARENA_OK ? map_arena(c, rep, r->err, sizeof r->err) : KVT_EPROTO;
    if (r->arena_rc != 0 && r->arena_optional && c->recovery == r && c->shm)
        frames_from_now(c);
    kvt__recovery_end(c, r, r->arena_rc != 0 && !r->arena_optional ? r->arena_rc : 0);
}

/* --- request steps --- */

static void lookup_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = kvt__head_of(c, KVT_MSG_LOOKUP, NULL);
    kvt_frame_t f = {.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};

    if (r->lookup.lease)
        m.hdr.flags |= KVT_LOOKUP_LEASE;
    if (r->lookup.has_prompt) {
        m.hdr.flags |= KVT_LOOKUP_PROMPT;
        m.u.lookup.prompt_tokens = r->lookup.prompt_tokens;
        m.u.lookup.hbm_tokens = r->lookup.hbm_tokens;
    }
    m.u.lookup.rank = r->lookup.all_ranks ? KVT_RANK_ALL : c->rank;
    send_or_end(c, r, &m, &f, 1);
}

static void on_lookup(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_lookup_ok_t *l = &rep->u.lookup_ok;
    kvt_lookup_result_t *res = &r->comp.lookup;
    size_t want = r->lookup.all_ranks ? c->world : 0;

    if (rep->hdr.type != KVT_MSG_LOOKUP_OK || l->hit > r->n || l->nranks != want) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < l->nranks; i++) {
        r->rank_hits[i] = kvt_get_u32(l->rank_hits + 4 * i);
        if (r->rank_hits[i] > r->n) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
    }
    res->hit = l->hit;
    res->skipped = (rep->hdr.flags & KVT_LOOKUPR_SKIPPED) != 0;
    res->leased = (rep->hdr.flags & KVT_LOOKUPR_LEASED) != 0;
    res->lease_ms = res->leased ? l->lease_ms : 0;
    res->lease_capped = (rep->hdr.flags & KVT_LOOKUPR_LEASE_CAPPED) != 0;
    res->nranks = (uint32_t)l->nranks;
    res->rank_hits = r->rank_hits;
    res->rank_hits_cap = (uint32_t)want;
    kvt__finish(c, r, 0);
}

static int save_status_ok(uint8_t s)
{
    return s == KVT_CHUNK_WANTED || s == KVT_CHUNK_EXISTS || s == KVT_CHUNK_DECLINED ||
           s == KVT_CHUNK_NOSPACE;
}

/* Folds SAVE_OK into r->out: chunks still WANTED (sent) take the daemon's answer, SKIPPED
 * meaning their reservation expired: not stored. */
static int merge_save_ok(const kvt_msg_t *rep, req_t *r)
{
    if (rep->hdr.type != KVT_MSG_SAVE_OK || rep->u.chunks_ok.n != r->n)
        return KVT_EPROTO;
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = rep->u.chunks_ok.status[i];
        if (r->out[i] != KVT_CHUNK_WANTED)
            continue;
        if (s == KVT_CHUNK_SKIPPED)
            s = KVT_CHUNK_NOSPACE;
        if (s != KVT_CHUNK_STORED && s != KVT_CHUNK_EXISTS && s != KVT_CHUNK_NOSPACE &&
            s != KVT_CHUNK_DECLINED)
            return KVT_EPROTO;
        r->out[i] = s;
    }
    return 0;
}

static void save_send(kvt_client_t *c, req_t *r, int type, const kvt_frame_t *f, size_t nf)
{
    kvt_msg_t m = kvt__head_of(
        c, type, type == KVT_MSG_SAVE_BEGIN || type == KVT_MSG_SAVE_DATA ? NULL : r->map);

    save_head(c, &m, &r->parent, r->has_parent, r->has_op_id, r->op_id);
    send_or_end(c, r, &m, f, nf);
}

static void save_begin(kvt_client_t *c, req_t *r)
{
    kvt_frame_t f[2] = {{.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)}, {0}};

    if (r->map == NULL) {
        save_send(c, r, KVT_MSG_SAVE_BEGIN, f, 1);
        return;
    }
    for (size_t i = 0; i < r->n; i++)
        kvt_put_u64(r->locs + 8 * i, r->sizes[i]); /* the lengths frame, before the locations */
    f[1] = (kvt_frame_t){.data = r->locs, .len = 8 * r->n};
    save_send(c, r, KVT_MSG_SAVE_RESERVE, f, 2);
}

/* SAVE_BEGIN_OK (frames): send the wanted chunks' bytes. */
static void on_save_begin_ok(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    kvt_frame_t *f;
    size_t nwanted = 0;

    if (rep->hdr.type != KVT_MSG_SAVE_BEGIN_OK || rep->u.chunks_ok.n != r->n) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = rep->u.chunks_ok.status[i];
        if (!save_status_ok(s)) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
        r->out[i] = s;
        nwanted += s == KVT_CHUNK_WANTED;
    }
    if (nwanted == 0) {
        kvt__finish(c, r, 0);
        return;
    }
    f = malloc((r->n + 1) * sizeof *f);
    if (f == NULL) {
        kvt__finish(c, r, KVT_ENOMEM);
        return;
    }
    f[0] = (kvt_frame_t){.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};
    for (size_t i = 0; i < r->n; i++) {
        bool w = r->out[i] == KVT_CHUNK_WANTED;
        f[1 + i] = (kvt_frame_t){.data = w ? r->src[i] : NULL, .len = w ? r->sizes[i] : 0};
        if (w)
            atomic_fetch_add_explicit(&c->n_copied, r->sizes[i], memory_order_relaxed);
    }
    save_send(c, r, KVT_MSG_SAVE_DATA, f, r->n + 1);
    free(f);
}

/* The hold deadline of a shared-memory answer: from when its request was sent. */
static int64_t hold_until(const req_t *r, uint32_t hold_ms)
{
    return r->sent_ms + (hold_ms != 0 ? hold_ms : r->map->hold_ms);
}

/* SAVE_RESERVE_OK of a copying save: plan the copies of the reserved chunks into the arena
 * (copier.c runs them), then save_copied commits them. With CLIENT_CSUMS each copy is
 * kvt_copy_checksum's and the commit carries the checksums (the daemon then hashes nothing);
 * else the copy is a plain one and the daemon hashes the extents. */
static void on_reserve_copy(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    uint64_t bytes = 0;
    int64_t until;

    if (rep->hdr.type != KVT_MSG_SAVE_RESERVE_OK || k->n != r->n) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    until = hold_until(r, k->hold_ms);
    memset(r->locs, 0, r->n * KVT_LOC_BYTES);
    memset(r->csums, 0, r->n * 8);
    r->ncp = 0;
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len;

        r->out[i] = s;
        if (!save_status_ok(s)) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
        if (s != KVT_CHUNK_WANTED)
            continue;
        if (kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len) == NULL || len != r->sizes[i]) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
        memcpy(r->locs + i * KVT_LOC_BYTES, k->locs + i * KVT_LOC_BYTES, KVT_LOC_BYTES);
        r->cpidx[r->ncp++] = i;
        bytes += len;
    }
    r->cp_until = until;
    r->cp_csums = (c->features & KVT_FEAT_CLIENT_CSUMS) != 0;
    kvt__copies_start(c, r, bytes);
}

/* A copying save's chunks are in the arena (those whose copy began in time): commit them. */
static void save_copied(kvt_client_t *c, req_t *r)
{
    size_t nwanted = 0;

    if (c->cp_closing) { /* the reservations are reclaimed at their hold deadline */
        kvt__finish(c, r, KVT_ECLOSED);
        return;
    }
    for (size_t j = 0; j < r->ncp; j++)
        nwanted += r->out[r->cpidx[j]] == KVT_CHUNK_WANTED;
    if (nwanted == 0) {
        kvt__finish(c, r, 0);
        return;
    }
    {
        kvt_frame_t f[3] = {{.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)},
                            {.data = r->locs, .len = r->n * KVT_LOC_BYTES},
                            {.data = r->csums, .len = r->n * 8}};
        save_send(c, r, KVT_MSG_SAVE_COMMIT, f, r->cp_csums ? 3 : 2);
    }
}

static void on_save_ok(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    kvt__finish(c, r, merge_save_ok(rep, r));
}

static void load_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = kvt__head_of(c, KVT_MSG_LOAD, r->map);
    kvt_frame_t f = {.data = r->hashes, .len = r->n * sizeof(kvt_hash_t)};

    m.u.load.rank = c->rank;
    if (r->map != NULL)
        m.hdr.flags |= KVT_LOAD_SHM;
    send_or_end(c, r, &m, &f, 1);
}

static bool verifying(const kvt_client_t *c, bool copying)
{
    if (!(c->features & KVT_FEAT_CHECKSUMS))
        return false;
    return copying ? c->verify != KVT_VERIFY_NONE : c->verify == KVT_VERIFY_ALL;
}

/* Copies one loaded chunk (len bytes at src) into the caller's buffer i, verifying csum when
 * asked: KVT_LOAD_HIT or KVT_LOAD_CORRUPT. Any thread (the I/O thread or a copy helper). */
static uint8_t copy_in(kvt_client_t *c, req_t *r, size_t i, const void *src, size_t len,
                       bool verify, uint64_t csum)
{
    atomic_fetch_add_explicit(&c->n_copied, len, memory_order_relaxed);
    if (!verify) {
        memcpy(r->dst[i], src, len);
        return KVT_LOAD_HIT;
    }
    atomic_fetch_add_explicit(&c->n_verified, 1, memory_order_relaxed);
    return kvt_copy_checksum(r->dst[i], src, len) == csum ? KVT_LOAD_HIT : KVT_LOAD_CORRUPT;
}

/* copy_in on the I/O thread; a mismatch is counted and queues a RELEASE CORRUPT. */
static uint8_t copy_out(kvt_client_t *c, req_t *r, size_t i, const void *src, size_t len,
                        bool verify, uint64_t csum, int64_t now)
{
    uint8_t o = copy_in(c, r, i, src, len, verify, csum);

    if (o == KVT_LOAD_CORRUPT) {
        atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
        kvt__relq_add(&c->orel[1], &r->hashes[i], now);
    }
    return o;
}

static void set_nhit(req_t *r)
{
    size_t p = 0;

    while (p < r->n && r->out[p] == KVT_LOAD_HIT)
        p++;
    r->comp.nhit = p;
}

/* LOAD_OK, frames path: copy the payloads out. */
static void on_load_frames(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    bool verify = verifying(c, true) && k->checksums != NULL;
    int64_t now = kvt__now_ms();
    int status = 0;

    if (rep->hdr.type != KVT_MSG_LOAD_OK || k->n != r->n || (rep->hdr.flags & KVT_LOADR_SHM)) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        const kvt_frame_t *p = &k->payloads[i];
        uint8_t s = k->status[i];
        if ((s != KVT_CHUNK_HIT && s != KVT_CHUNK_MISS) || (s == KVT_CHUNK_HIT && p->len == 0)) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
    }
    for (size_t i = 0; i < r->n; i++) {
        const kvt_frame_t *p = &k->payloads[i];
        r->lens[i] = p->len;
        if (p->len == 0) {
            r->out[i] = KVT_LOAD_MISS;
        } else if (p->len > r->sizes[i]) {
            r->out[i] = KVT_LOAD_BUFSIZE;
            status = KVT_EBUFSIZE;
        } else {
            r->out[i] = copy_out(c, r, i, p->data, p->len, verify,
                                 verify ? kvt_get_u64(k->checksums + 8 * i) : 0, now);
            if (r->out[i] != KVT_LOAD_HIT)
                r->lens[i] = 0;
        }
    }
    set_nhit(r);
    kvt__finish(c, r, status);
}

/* LOAD_OK with SHM, for a copying load (copy out, then release) or a pin (hand out). */
static void on_load_shm(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;
    bool pin = r->kind == KVT_OP_PIN;
    bool verify = verifying(c, !pin) && k->checksums != NULL;
    int64_t now = kvt__now_ms(), until;
    uint64_t bytes = 0;
    size_t ncp = 0;
    int status = 0;

    if (rep->hdr.type != KVT_MSG_LOAD_OK || k->n != r->n || !(rep->hdr.flags & KVT_LOADR_SHM)) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    until = hold_until(r, k->hold_ms);
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len = 0, csum = k->checksums != NULL ? kvt_get_u64(k->checksums + 8 * i) : 0;
        const uint8_t *src =
            s == KVT_CHUNK_HIT ? kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len) : NULL;
        r->out[i] = KVT_LOAD_MISS;
        r->lens[i] = 0;
        if (s != KVT_CHUNK_HIT) {
            if (s != KVT_CHUNK_MISS)
                status = KVT_EPROTO;
            continue;
        }
        if (src == NULL || kvt__now_ms() >= until) {
            if (src == NULL)
                status = KVT_EPROTO; /* the pin is the daemon's either way: release it */
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
            continue;
        }
        if (pin) {
            r->lens[i] = len;
            r->ptrs[i] = (void *)src;
            if (r->csums != NULL)
                r->csums[i] = csum;
            r->out[i] = KVT_LOAD_HIT;
            if (verify) {
                atomic_fetch_add_explicit(&c->n_verified, 1, memory_order_relaxed);
                if (kvt_checksum(src, len) != csum) {
                    atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
                    kvt__relq_add(&c->orel[1], &r->hashes[i], now);
                    r->out[i] = KVT_LOAD_CORRUPT;
                    r->ptrs[i] = NULL;
                    r->lens[i] = 0;
                }
            }
            continue;
        }
        if (len > r->sizes[i]) {
            r->lens[i] = len;
            r->out[i] = KVT_LOAD_BUFSIZE;
            status = status != 0 ? status : KVT_EBUFSIZE;
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
            continue;
        }
        /* a copy, planned: copier.c runs it, load_copied follows */
        r->lens[i] = len;
        r->csums[i] = csum;
        memcpy(r->locs + i * KVT_LOC_BYTES, k->locs + i * KVT_LOC_BYTES, KVT_LOC_BYTES);
        r->cpidx[ncp++] = i;
        bytes += len;
    }
    if (pin) {
        r->comp.hold_until_ms = until;
        if (!(c->features & KVT_FEAT_CHECKSUMS))
            r->comp.checksums = NULL;
        set_nhit(r);
        kvt__finish(c, r, status);
        return;
    }
    r->ncp = ncp;
    r->cp_until = until;
    r->cp_verify = verify;
    r->cp_status = status;
    kvt__copies_start(c, r, bytes);
}

/* A copying load's chunks are copied (and verified): release their pins, complete it. */
static void load_copied(kvt_client_t *c, req_t *r)
{
    int64_t now = kvt__now_ms();

    for (size_t j = 0; j < r->ncp; j++) {
        size_t i = r->cpidx[j];
        if (r->out[i] == KVT_LOAD_CORRUPT) {
            atomic_fetch_add_explicit(&c->n_mismatches, 1, memory_order_relaxed);
            kvt__relq_add(&c->orel[1], &r->hashes[i], now);
        } else {
            kvt__relq_add(&c->orel[0], &r->hashes[i], now);
        }
        if (r->out[i] != KVT_LOAD_HIT)
            r->lens[i] = 0;
    }
    set_nhit(r);
    kvt__finish(c, r, c->cp_closing ? KVT_ECLOSED : r->cp_status);
}

void kvt__copy_chunk(kvt_client_t *c, req_t *r, size_t i)
{
    uint64_t len;
    uint8_t *at = kvt__map_at(r->map, r->locs + i * KVT_LOC_BYTES, &len); /* checked: not NULL */

    if (kvt__now_ms() >= r->cp_until || atomic_load_explicit(&c->cp.abort, memory_order_relaxed)) {
        /* reclaimed by now (never touch it), or shutting down */
        if (r->kind == KVT_OP_SAVE) {
            r->out[i] = KVT_CHUNK_NOSPACE;
            memset(r->locs + i * KVT_LOC_BYTES, 0, KVT_LOC_BYTES);
        } else {
            r->out[i] = KVT_LOAD_MISS;
        }
        return;
    }
    if (r->kind != KVT_OP_SAVE) {
        r->out[i] = copy_in(c, r, i, at, len, r->cp_verify, r->csums[i]);
        return;
    }
    atomic_fetch_add_explicit(&c->n_copied, len, memory_order_relaxed);
    if (r->cp_csums)
        kvt_put_u64((uint8_t *)&r->csums[i], kvt_copy_checksum(at, r->src[i], len));
    else
        memcpy(at, r->src[i], len);
}

void kvt__copies_done(kvt_client_t *c, req_t *r)
{
    if (r->kind == KVT_OP_SAVE)
        save_copied(c, r);
    else
        load_copied(c, r);
}

/* SAVE_RESERVE_OK of a zero-copy reserve: hand the extents out. */
static void on_reserve_zc(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_chunks_ok_t *k = &rep->u.chunks_ok;

    if (rep->hdr.type != KVT_MSG_SAVE_RESERVE_OK || k->n != r->n) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    memcpy(r->locs, k->locs, r->n * KVT_LOC_BYTES);
    for (size_t i = 0; i < r->n; i++) {
        uint8_t s = k->status[i];
        uint64_t len;

        if (!save_status_ok(s)) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
        r->out[i] = s == KVT_CHUNK_WANTED ? KVT_SAVE_RESERVED : s;
        if (s != KVT_CHUNK_WANTED) {
            memset(r->locs + i * KVT_LOC_BYTES, 0, KVT_LOC_BYTES);
            continue;
        }
        r->ptrs[i] = kvt__map_at(r->map, k->locs + i * KVT_LOC_BYTES, &len);
        if (r->ptrs[i] == NULL || len != r->sizes[i]) {
            kvt__finish(c, r, KVT_EPROTO);
            return;
        }
    }
    r->comp.hold_until_ms = hold_until(r, k->hold_ms);
    kvt__finish(c, r, 0);
}

static void commit_send(kvt_client_t *c, req_t *r)
{
    req_t *v = r->resv;
    kvt_frame_t f[2] = {{.data = v->hashes, .len = v->n * sizeof(kvt_hash_t)},
                        {.data = r->locs, .len = v->n * KVT_LOC_BYTES}};
    kvt_msg_t m = kvt__head_of(c, KVT_MSG_SAVE_COMMIT, v->map);
    size_t nwanted = 0;

    memset(r->locs, 0, v->n * KVT_LOC_BYTES);
    for (size_t i = 0; i < v->n; i++) {
        bool w = v->out[i] == KVT_SAVE_RESERVED && i < r->nwritten;
        r->out[i] = w                                ? KVT_CHUNK_WANTED
                    : v->out[i] == KVT_SAVE_RESERVED ? KVT_CHUNK_NOSPACE
                                                     : v->out[i];
        if (w) {
            memcpy(r->locs + i * KVT_LOC_BYTES, v->locs + i * KVT_LOC_BYTES, KVT_LOC_BYTES);
            nwanted++;
        }
    }
    if (nwanted == 0) {
        kvt__finish(c, r, 0);
        return;
    }
    save_head(c, &m, &v->parent, v->has_parent, v->has_op_id, v->op_id);
    send_or_end(c, r, &m, f, 2);
}

static void tally_send(kvt_client_t *c, req_t *r)
{
    kvt_msg_t m = kvt__head_of(c, KVT_MSG_TALLY, NULL);
    kvt_frame_t f = {.data = r->tally_buf, .len = r->tally_len};

    m.u.tally.engine_id = r->tally.engine_id;
    m.u.tally.paid_total = r->tally.paid_total;
    m.u.tally.probes_total = r->tally.probes_total;
    if (r->tally.has_tokens) {
        m.hdr.flags |= KVT_TALLY_TOKENS;
        m.u.tally.served_tokens_total = r->tally.served_tokens_total;
        m.u.tally.lookup_tokens_total = r->tally.lookup_tokens_total;
    }
    send_or_end(c, r, &m, &f, 1);
}

static void on_tally(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    const kvt_tally_ok_t *t = &rep->u.tally_ok;
    kvt_gate_state_t *g = &r->comp.gates;

    if (rep->hdr.type != KVT_MSG_TALLY_OK) {
        kvt__finish(c, r, KVT_EPROTO);
        return;
    }
    *g = (kvt_gate_state_t){
        .payoff = t->payoff,
        .share = t->share,
        .act_ema = t->act_ema,
        .probes = t->probes,
        .lookups = t->lookups,
        .admission_enabled = (t->gate_flags & KVT_GATE_ADMISSION_ON) != 0,
        .skip_enabled = (t->gate_flags & KVT_GATE_SKIP_ON) != 0,
        .load_bearing = (t->gate_flags & KVT_GATE_LOAD_BEARING) != 0,
        .policy = t->policy,
        .density = t->density,
        .served_tokens = t->served_tokens,
        .regret_tokens = t->regret_tokens,
        .written_tokens = t->written_tokens,
        .declined_tokens = t->declined_tokens,
    };
    kvt__finish(c, r, 0);
}

/* Starts r from its first step (again, after a recovery). A shared-memory request takes the
 * current mapping. */
void kvt__begin(kvt_client_t *c, req_t *r)
{
    bool shm = r->kind == KVT_OP_RESERVE || r->kind == KVT_OP_PIN ||
               (c->shm && (r->kind == KVT_OP_SAVE || r->kind == KVT_OP_LOAD));

    if (shm && r->kind != KVT_OP_COMMIT) {
        arena_map_t *m = c->map; /* only this thread replaces c->map */
        if (r->map != m) {
            kvt__map_unref(r->map);
            r->map = kvt__map_ref(m);
        }
        if (r->map == NULL) {
            kvt__finish(c, r, KVT_EUNSUPP);
            return;
        }
    } else if (!shm && r->map != NULL && r->kind != KVT_OP_COMMIT) {
        kvt__map_unref(r->map); /* begun on the arena, again after the client went on frames */
        r->map = NULL;
    }
    switch (r->kind) {
    case RK_HELLO:
        hello_send(c, r);
        break;
    case KVT_OP_LOOKUP:
        lookup_send(c, r);
        break;
    case KVT_OP_SAVE:
    case KVT_OP_RESERVE:
        save_begin(c, r);
        break;
    case KVT_OP_LOAD:
    case KVT_OP_PIN:
        load_send(c, r);
        break;
    case KVT_OP_TALLY:
        tally_send(c, r);
        break;
    case KVT_OP_COMMIT:
        commit_send(c, r);
        break;
    default:
        kvt__finish(c, r, KVT_EINVAL);
        break;
    }
}

/* A reply for r (already off the wire). */
void kvt__on_reply(kvt_client_t *c, req_t *r, const kvt_msg_t *rep)
{
    if (rep->hdr.type == KVT_MSG_ERROR) {
        int code = rep->u.error.code;
        set_error(r, &rep->u.error);
        /* ETOOBIG: every list and payload was checked against the limits of the last
         * HELLO_OK, so they changed (a daemon restarted on smaller ones refuses before it looks
         * at the session, no ENONS): one HELLO learns them, and the request is answered after
         * it, so that what follows is checked against them (else every request above them
         * failed for good) */
        if ((code == KVT_WIRE_ENONS || code == KVT_WIRE_ESTALE || code == KVT_WIRE_ETOOBIG) &&
            r->kind != RK_HELLO) {
            kvt__recover(c, r, code);
            return;
        }
        code = code < 0 && code > -100 ? code : KVT_EPROTO;
        kvt__end(c, r, code);
        return;
    }
    switch (r->kind) {
    case RK_HELLO:
        on_hello(c, r, rep);
        break;
    case KVT_OP_LOOKUP:
        on_lookup(c, r, rep);
        break;
    case KVT_OP_SAVE:
        if (r->step == KVT_MSG_SAVE_BEGIN)
            on_save_begin_ok(c, r, rep);
        else if (r->step == KVT_MSG_SAVE_RESERVE)
            on_reserve_copy(c, r, rep);
        else
            on_save_ok(c, r, rep);
        break;
    case KVT_OP_RESERVE:
        on_reserve_zc(c, r, rep);
        break;
    case KVT_OP_COMMIT:
        on_save_ok(c, r, rep);
        break;
    case KVT_OP_LOAD:
    case KVT_OP_PIN:
        if (r->map != NULL)
            on_load_shm(c, r, rep);
        else
            on_load_frames(c, r, rep);
        break;
    case KVT_OP_TALLY:
        on_tally(c, r, rep);
        break;
    default:
        kvt__finish(c, r, KVT_EPROTO);
        break;
    }
}
