/*
 * requests.c - the request handlers and the operation table (see server_internal.h).
 *
 * Each handler executes one decoded request against the store, the sessions and the
 * namespace's gates, synchronously on the loop thread (everything here is memory work), and
 * replies exactly once. Adding a request type is one row of server__ops[] at the end of this
 * file and its handler.
 *
 * Gates (docs/GATES.md): save requests (SAVE_BEGIN, SAVE_DATA of a client that skipped
 * SAVE_BEGIN, SAVE_RESERVE) ask admission_decide(), which decides each save operation once for
 * all its ranks; an operation whose chunks all exist gets no decision and consumes no credit,
 * and SAVE_DATA of a declined operation stores nothing. Lookups that carry prompt info go
 * through the lookup-skip gate and feed its estimator; answered ones of rank 0 or of every rank
 * also give the value policy its evidence (served estimate, regret through the ghost table, the
 * reuse they show), once per engine request however many ranks look up. Tallies fold their
 * token totals when a protocol 2 TALLY carries KVT_TALLY_TOKENS. The gates' report lines are
 * logged here (the value policy's in admission.c).
 *
 * Saves (SAVE_DATA, SAVE_COMMIT) are answered later: the store copies and checksums the chunks on
 * the thread pool and publishes them, and the SAVE_OK is a deferred reply sent from its
 * callback. A frames save keeps its request's ZeroMQ parts (moved out of intake) until then, so
 * the workers copy straight from the received frames; the status array lives in the save's own
 * context, since the server's scratch serves the next request meanwhile.
 *
 * Loads (frames path): store_load_batch() reports every chunk once; RAM chunks (and chunks read
 * from disk, which land in the arena) arrive pinned and their arena bytes are lent to ZeroMQ
 * instead of copied (zcref.h: the chunk stays pinned until ZeroMQ has sent the frame and handed
 * it back, so no eviction can change bytes a queued reply still references); a chunk read into
 * a heap buffer becomes its frame without a copy. The reply is deferred (server__defer) until
 * the last chunk is in, at once when none had to be read from disk. Protocol 2 replies carry
 * each chunk's commit checksum. Shared-memory clients (ARENA, SAVE_RESERVE / SAVE_COMMIT, LOAD
 * with KVT_LOAD_SHM, RELEASE) move no chunk bytes through the socket at all; a shared-memory load
 * of a chunk only on disk is answered by location once the chunk is promoted into the arena; what
 * they hold in the arena is tracked per session (session.h), pinned through the store. A RELEASE
 * with CORRUPT (protocol 2) has the store re-verify the chunks named.
 *
 * Threads: loop thread only.
 */
#include "server_internal.h"

#include "admission.h"
#include "gates.h"
#include "kvt_proto.h"
#include "log.h"
#include "ns.h"
#include "session.h"
#include "store.h"
#include "zcref.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Finds or creates the namespace of a HELLO. A full table makes room by evicting the namespace
 * no session declares that was declared least recently, with its chunks (ns.h); a namespace
 * whose chunks are pinned stays, and the table stays full. */
static int hello_declare(server_t *sv, const ns_ident_t *id, const char *model, ns_t **out)
{
    int rc = ns_declare(sv->nst, id, config_gates_for(sv->cfg, model), out);
    store_drop_t d;
    ns_t *victim;

    if (rc != -ENOSPC || (victim = ns_victim(sv->nst)) == NULL)
        return rc;
    if (store_evict_ns(sv->store, victim, &d) != 0)
        return -ENOSPC;
    {
        char qv[2 * KVT_MODEL_MAX], qm[2 * KVT_MODEL_MAX];
        log_info("namespace_evicted",
                 "ns=\"%s\" id=%u chunks=%" PRIu64 " pinned=%" PRIu64 " for=\"%s\"",
                 log_quote(qv, sizeof qv, victim->model), victim->id, d.chunks, d.pinned,
                 log_quote(qm, sizeof qm, model));
    }
    sv->counters.namespaces_evicted++;
    ns_remove(sv->nst, victim);
    return ns_declare(sv->nst, id, config_gates_for(sv->cfg, model), out);
}

static void do_hello(server_t *sv, const server_req_t *r)
{
    session_t *s = r->session;
    const kvt_msg_t *req = r->m;
    const kvt_hello_t *h = &req->u.hello;
    bool replicated = (req->hdr.flags & KVT_HELLO_REPLICATED) != 0;
    char model[KVT_MODEL_MAX + 1];
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_HELLO_OK);
    const ns_ident_t id = {.model = h->model,
                           .model_len = h->model_len,
                           .revision = h->revision,
                           .revision_len = h->revision_len,
                           .fingerprint = h->layout_fp,
                           .world = h->world,
                           .replicated = replicated,
                           .chunk_tokens = h->chunk_tokens};
    ns_t *ns;
    int rc;

    if (h->world == 0 || h->world > KVT_WORLD_MAX || h->rank >= h->world || h->chunk_tokens == 0) {
        server__reply_error(
            sv, r, KVT_WIRE_EINVAL,
            "hello: need 1 <= world <= %d, rank < world, chunk_tokens > 0 (got world %u "
            "rank %u chunk_tokens %u)",
            KVT_WORLD_MAX, h->world, h->rank, h->chunk_tokens);
        return;
    }
    memcpy(model, h->model, h->model_len);
    model[h->model_len] = '\0';
    /* the connection's own bound first: it is the more specific answer */
    ns = ns_find(sv->nst, &id);
    if ((ns == NULL || !session_has(s, ns->id)) &&
        session_usage(s)->namespaces >= sessions_limits(sv->sessions)->namespaces) {
        session_refused(sv->sessions, s, SESSION_BOUND_NAMESPACES);
        server__reply_error(sv, r, KVT_WIRE_EBUSY,
                            "hello: over server.session_max_namespaces (%u): this connection "
                            "declared %u namespaces; use one connection per namespace",
                            sessions_limits(sv->sessions)->namespaces,
                            session_usage(s)->namespaces);
        return;
    }
    rc = hello_declare(sv, &id, model, &ns);
    if (rc == -EEXIST) {
        server__reply_error(sv, r, KVT_WIRE_ECONFLICT,
                            "namespace %s/%016" PRIx64 " exists with another world, replication or "
                            "chunk size",
                            model, h->layout_fp);
        return;
    }
    if (rc == -ENOSPC) {
        session_refused(sv->sessions, s, SESSION_BOUND_MAX_NAMESPACES);
        server__reply_error(sv, r, KVT_WIRE_EBUSY,
                            "hello: namespace table full: server.max_namespaces (%u) namespaces "
                            "are declared by sessions (a client that closed keeps its session "
                            "until server.client_idle_ms, %u ms, passes); raise the bound, or "
                            "stop the clients holding them (kvtierctl status lists them)",
                            ns_max(sv->nst), (unsigned)sv->cfg->server.client_idle_ms);
        return;
    }
    if (rc != 0) {
        server__reply_error(sv, r, KVT_WIRE_EBUSY, "hello: out of memory for a namespace");
        return;
    }
    if (session_declare(sv->sessions, s, ns) != 0) { /* checked above: not reached */
        server__reply_error(sv, r, KVT_WIRE_EBUSY, "hello: too many namespaces");
        return;
    }
    if (ns->chunks == 0 && ns->bytes == 0 && log_enabled(LOG_DEBUG)) {
        char q[2 * KVT_MODEL_MAX];
        log_debug("hello", "ns=%s fp=%016" PRIx64 " id=%u world=%u rank=%u",
                  log_value(q, sizeof q, model), h->layout_fp, ns->id, h->world, h->rank);
    }
    m.u.hello_ok.ns_id = ns->id;
    m.u.hello_ok.lease_ms = sv->cfg->ram.lease_ms;
    m.u.hello_ok.max_chunk_bytes = sv->cfg->ram.max_chunk_bytes;
    m.u.hello_ok.max_chunks = sv->cfg->server.max_chunks_per_request;
    m.u.hello_ok.daemon_version =
        (uint32_t)(KVT_VERSION_MAJOR_D << 16 | KVT_VERSION_MINOR_D << 8 | KVT_VERSION_PATCH_D);
    /* protocol 2 (not encoded in a protocol 1 reply) */
    m.u.hello_ok.features = h->features & SERVER_FEATURES;
    m.u.hello_ok.max_in_flight = sv->cfg->server.max_in_flight;
    m.u.hello_ok.arena_gen = server__arena_gen(sv);
    server__send(sv, server__reply_head(sv, r->rid, &m));
}

static void log_skip_report(const ns_t *ns)
{
    gates_state_t st;
    char q[2 * KVT_MODEL_MAX];

    gates_state(ns->gates, &st);
    log_info("lookup_skip",
             "ns=%s lookups=%" PRIu64 " act_ema=%.6f load_bearing=%d skips=%" PRIu64
             " forced_probes=%" PRIu64 " would_skip=%" PRIu64,
             log_value(q, sizeof q, ns->model), st.lookups, st.act_ema, st.load_bearing, st.skips,
             st.forced_probes, st.would_skip);
}

static void log_admission_report(const ns_t *ns)
{
    gates_state_t st;

    char q[2 * KVT_MODEL_MAX];

    gates_state(ns->gates, &st);
    log_info("admission", "ns=%s probes=%" PRIu64 " payoff=%.6f saved=%" PRIu64 " skipped=%" PRIu64,
             log_value(q, sizeof q, ns->model), st.probes, st.payoff, st.saved, st.skipped);
}

/* The store's answer to "is this chunk stored" for the value policy's walk through the ghost
 * table (gates_lookup_value). */
typedef struct {
    store_t *store;
    const ns_t *ns;
    uint16_t rank;
} lookup_stored_t;

static bool lookup_stored_cb(void *arg, const kvt_wire_hash_t *h)
{
    const lookup_stored_t *ls = arg;

    return store_find(ls->store, ls->ns, ls->rank, h) != NULL;
}

static void do_lookup(server_t *sv, const server_req_t *r)
{
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_lookup_t *l = &req->u.lookup;
    bool all = l->rank == KVT_RANK_ALL;
    bool lease = (req->hdr.flags & KVT_LOOKUP_LEASE) != 0;
    bool prompt = (req->hdr.flags & KVT_LOOKUP_PROMPT) != 0;
    uint64_t now = uv_now(sv->loop);
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_LOOKUP_OK);
    size_t k, nranks = 0;
    bool leased = false;
    uint32_t hit;
    /* read-ahead skips the chunks the engine holds in GPU memory: it will not load them */
    uint64_t in_hbm = prompt && ns->chunk_tokens > 0 ? l->hbm_tokens / ns->chunk_tokens : 0;
    uint32_t ahead_from = in_hbm < UINT32_MAX ? (uint32_t)in_hbm : UINT32_MAX;

    if (!all && l->rank >= ns->world) {
        server__reply_error(sv, r, KVT_WIRE_EINVAL, "rank %u >= world %u", l->rank, ns->world);
        return;
    }
    if (prompt &&
        gates_lookup_decide(ns->gates, l->prompt_tokens, l->hbm_tokens) == GATES_LOOKUP_SKIP) {
        if (gates_admission_report_due(ns->gates))
            log_admission_report(ns);
        /* hit 0 without looking, no lease; an all-ranks answer still has one hit per rank */
        m.hdr.flags = KVT_LOOKUPR_SKIPPED;
        hit = 0;
        if (all) {
            nranks = ns->world;
            memset(sv->rank_hits, 0, nranks * sizeof *sv->rank_hits);
        }
    } else if (all) {
        hit = store_lookup_all(sv->store, ns, l->hashes, l->nhashes, false, now, ahead_from,
                               sv->rank_hits);
        nranks = ns->world;
    } else {
        hit = store_lookup(sv->store, ns, l->rank, l->hashes, l->nhashes, false, now, ahead_from);
    }
    /* a lease within the held bounds (contract C3), or the hits without one */
    if (lease && hit > 0 && !(m.hdr.flags & KVT_LOOKUPR_SKIPPED))
        leased = server__lease(sv, r, l->rank, l->hashes, hit, now);
    if (prompt && !(m.hdr.flags & KVT_LOOKUPR_SKIPPED)) {
        uint64_t tokens = (uint64_t)hit * ns->chunk_tokens;
        if (gates_lookup_observe(ns->gates,
                                 gates_loadable(tokens, l->prompt_tokens, ns->chunk_tokens),
                                 l->hbm_tokens))
            log_skip_report(ns);
        if (all || l->rank == 0) {
            lookup_stored_t ls = {.store = sv->store, .ns = ns, .rank = 0};
            gates_lookup_value(ns->gates, l->hashes, l->nhashes, hit, l->prompt_tokens,
                               l->hbm_tokens, ns->chunk_tokens, lookup_stored_cb, &ls);
        }
    }
    m.u.lookup_ok.hit = hit;
    if (leased) {
        m.hdr.flags |= KVT_LOOKUPR_LEASED;
        m.u.lookup_ok.lease_ms = sv->cfg->ram.lease_ms;
    } else if (lease && hit > 0 && !(m.hdr.flags & KVT_LOOKUPR_SKIPPED) && m.hdr.version >= 2) {
        m.hdr.flags |= KVT_LOOKUPR_LEASE_CAPPED; /* protocol 2 only */
    }
    k = server__reply_head(sv, r->rid, &m);
    zmq_msg_init_size(&sv->out[k], nranks * 4);
    for (size_t i = 0; i < nranks; i++)
        kvt_put_u32((uint8_t *)zmq_msg_data(&sv->out[k]) + 4 * i, sv->rank_hits[i]);
    server__send(sv, k + 1);
}

static bool save_args_ok(server_t *sv, const server_req_t *r)
{
    const ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    if (req->u.save.rank >= ns->world) {
        server__reply_error(sv, r, KVT_WIRE_EINVAL, "rank %u >= world %u", req->u.save.rank,
                            ns->world);
        return false;
    }
    return true;
}

static void do_save_begin(server_t *sv, const server_req_t *r)
{
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_save_t *s = &req->u.save;
    size_t wanted;

    if (!save_args_ok(sv, r))
        return;
    wanted = store_save_query(sv->store, ns, s->rank, s->hashes, s->nhashes, sv->status);
    admission_decide(sv->admission, ns, req, uv_now(sv->loop), wanted, sv->status);
    server__reply_status(sv, r, KVT_MSG_SAVE_BEGIN_OK, sv->status, s->nhashes);
}

/* A save or commit in flight: its deferred reply, its status array and, for a frames save, the
 * request's parts holding the payload bytes the workers copy. */
typedef struct {
    uv_work_t release; /* closes the kept parts on the thread pool */
    server_deferred_t *d;
    server_t *sv;
    zmq_msg_t *keep; /* the request's parts after the routing id (frames save), or NULL */
    size_t nkeep;
    uint64_t *lens; /* commit: the extents' lengths (bytes_committed), or NULL */
    size_t n;
    uint8_t status[];
} put_ctx_t;

static put_ctx_t *put_ctx_new(server_t *sv, const server_req_t *r, size_t n, bool commit)
{
    put_ctx_t *x = calloc(1, sizeof *x + n);

    if (x == NULL)
        return NULL;
    x->sv = sv;
    x->n = n;
    if (commit && (x->lens = malloc(n * sizeof *x->lens)) == NULL) {
        free(x);
        return NULL;
    }
    x->d = server__defer(sv, r, 1);
    if (x->d == NULL) {
        free(x->lens);
        free(x);
        return NULL;
    }
    return x;
}

static void put_ctx_free(put_ctx_t *x)
{
    for (size_t i = 0; i < x->nkeep; i++)
        zmq_msg_close(&x->keep[i]);
    free(x->keep);
    free(x->lens);
    free(x);
}

static void keep_close_work(uv_work_t *req)
{
    put_ctx_t *x = req->data;

    for (size_t i = 0; i < x->nkeep; i++)
        zmq_msg_close(&x->keep[i]);
    x->nkeep = 0;
}

static void keep_close_after(uv_work_t *req, int status)
{
    (void)status;
    put_ctx_free(req->data);
}

/* Frees x once its reply went. The received frames of a frames save were allocated by ZeroMQ's
 * I/O thread: freeing megabytes of them makes glibc trim that thread's heap (madvise), which
 * took a quarter of the loop's busy time, so they are closed on the thread pool (the content of
 * a zmq_msg_t is reference-counted atomically; these parts belong to this context alone). */
static void put_ctx_release(put_ctx_t *x)
{
    x->release.data = x;
    if (x->nkeep == 0 ||
        uv_queue_work(x->sv->loop, &x->release, keep_close_work, keep_close_after) != 0)
        put_ctx_free(x);
}

/* The save is published: SAVE_OK with its status frame. */
static void put_done_cb(void *arg)
{
    put_ctx_t *x = arg;
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_SAVE_OK}};

    if (x->lens != NULL)
        for (size_t i = 0; i < x->n; i++)
            if (x->status[i] == KVT_CHUNK_STORED)
                x->sv->counters.bytes_committed += x->lens[i];
    zmq_msg_close(&x->d->parts[0]);
    server__part_bytes(&x->d->parts[0], x->status, x->n);
    server__deferred_reply(x->d, &m);
    put_ctx_release(x);
}

/* A put that could not start: its deferred reply is given up and the request answered now. */
static void put_ctx_fail(server_t *sv, const server_req_t *r, put_ctx_t *x)
{
    if (x != NULL) {
        server__deferred_drop(x->d);
        put_ctx_free(x);
    }
    server__reply_error(sv, r, KVT_WIRE_EBUSY, "%s: out of memory",
                        kvt_msg_type_name(r->m->hdr.type));
}

/* Keeps the request's parts (after the routing id) in x and returns the payload frames as seen
 * in the kept parts: a small part's bytes live inside its zmq_msg_t, so the views decoded from
 * intake's parts do not survive the move. SAVE_DATA is [head, hashes, payload_0, ...]. */
static kvt_frame_t *put_keep(put_ctx_t *x, const server_req_t *r, const kvt_wire_hash_t **hashes)
{
    size_t n = x->n;
    kvt_frame_t *pl = malloc((n > 0 ? n : 1) * sizeof *pl);

    x->keep = calloc(r->nparts - 1, sizeof *x->keep);
    if (pl == NULL || x->keep == NULL || r->nparts != n + 3) {
        free(pl);
        return NULL;
    }
    x->nkeep = r->nparts - 1;
    for (size_t i = 0; i < x->nkeep; i++) {
        zmq_msg_init(&x->keep[i]);
        zmq_msg_move(&x->keep[i], &r->parts[1 + i]);
    }
    *hashes = zmq_msg_data(&x->keep[1]);
    for (size_t i = 0; i < n; i++) {
        pl[i].data = zmq_msg_data(&x->keep[2 + i]);
        pl[i].len = zmq_msg_size(&x->keep[2 + i]);
    }
    return pl;
}

static void do_save(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_save_t *s = &req->u.save;
    uint64_t now = uv_now(sv->loop);
    const kvt_wire_hash_t *hashes = NULL;
    kvt_wire_hash_t parent = s->parent;
    kvt_frame_t *pl;
    put_ctx_t *x;
    size_t sent = 0;
    bool admit = true;
    int rc;

    if (!save_args_ok(sv, r))
        return;
    session_set_path(ss, SESSION_PATH_FRAMES);
    for (size_t i = 0; i < s->nhashes; i++) {
        sv->counters.bytes_received += s->payloads[i].len;
        sent += s->payloads[i].len > 0;
    }
    /* A client that skipped SAVE_BEGIN is decided here; a declined operation stores nothing. */
    if (sent > 0) {
        size_t wanted = store_save_query(sv->store, ns, s->rank, s->hashes, s->nhashes, sv->status);
        admit = admission_decide(sv->admission, ns, req, now, wanted, sv->status);
    }
    if (!admit) {
        server__reply_status(sv, r, KVT_MSG_SAVE_OK, sv->status, s->nhashes);
        return;
    }
    x = put_ctx_new(sv, r, s->nhashes, false);
    pl = x != NULL ? put_keep(x, r, &hashes) : NULL;
    if (pl == NULL) {
        put_ctx_fail(sv, r, x);
        return;
    }
    rc = store_save(sv->store, ns, s->rank, (req->hdr.flags & KVT_SAVE_PARENT) ? &parent : NULL,
                    hashes, s->nhashes, pl, now, x->status, put_done_cb, x, NULL);
    free(pl);
    if (rc != 0)
        put_ctx_fail(sv, r, x);
}

static bool shm_ok(server_t *sv, const server_req_t *r)
{
    const kvt_msg_t *req = r->m;
    if (store_arena_path(sv->store)[0] != '\0')
        return true;
    server__reply_error(sv, r, KVT_WIRE_EUNSUPP,
                        "%s: the arena is not shared (ram.arena_path is empty)",
                        kvt_msg_type_name(req->hdr.type));
    return false;
}

/* A shared-memory load in flight: the chunks the store reported (pinned by it) until the last,
 * when they become the session's load pins and the reply's locations. */
typedef struct {
    server_deferred_t *d;
    server_t *sv;
    uint32_t ns;
    uint16_t rank;
    size_t n;
    kvt_wire_hash_t *hashes;
    store_chunk_t **chunks; /* LENT, pinned by the store for this load; NULL: a miss */
} shm_load_t;

static void shm_chunk_cb(void *arg, size_t i, const store_loaded_t *c)
{
    shm_load_t *x = arg;

    if (c->kind == STORE_LOADED_LENT)
        x->chunks[i] = c->chunk;
    else if (c->kind == STORE_LOADED_OWNED)
        free(c->data); /* not asked for (arena); never in the arena, so a miss */
}

/* Every chunk is in the arena or missed: pins for the session (the reply's charge holds a
 * reference to it; a session forgotten meanwhile gets no pins and the reply is dropped),
 * locations, checksums. */
static void shm_done_cb(void *arg)
{
    shm_load_t *x = arg;
    server_t *sv = x->sv;
    server_deferred_t *d = x->d;
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOAD_OK, .flags = KVT_LOADR_SHM}};
    session_t *ss = d->session != NULL && !session_dead(d->session) ? d->session : NULL;
    uint64_t deadline = uv_now(sv->loop) + sv->cfg->ram.shm_hold_ms;
    uint8_t *status = zmq_msg_data(&d->parts[0]);
    uint8_t *locs = zmq_msg_data(&d->parts[1]);
    uint8_t *csums = d->nparts > 2 ? zmq_msg_data(&d->parts[2]) : NULL;

    for (size_t i = 0; i < x->n; i++) {
        store_chunk_t *c = x->chunks[i];
        status[i] = KVT_CHUNK_MISS;
        if (c == NULL)
            continue;
        if (ss != NULL &&
            session_pin(sv->sessions, ss, x->ns, x->rank, &x->hashes[i], c, deadline) == 0) {
            status[i] = KVT_CHUNK_HIT;
            kvt_put_u64(locs + i * KVT_LOC_BYTES, store_chunk_off(c));
            kvt_put_u64(locs + i * KVT_LOC_BYTES + 8, store_chunk_len(c));
            if (csums != NULL)
                kvt_put_u64(csums + i * KVT_CSUM_BYTES, store_chunk_csum(c));
        }
        store_unpin(sv->store, c); /* the session's pin holds it now */
    }
    m.u.chunks_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    server__deferred_reply(d, &m);
    free(x->hashes);
    free(x->chunks);
    free(x);
}

/* Zeroed parts of a deferred reply: parts[i] gets lens[i] bytes. 0 or -ENOMEM. */
static int zero_parts(server_deferred_t *d, const size_t *lens, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        zmq_msg_close(&d->parts[i]);
        if (zmq_msg_init_size(&d->parts[i], lens[i]) != 0) {
            zmq_msg_init(&d->parts[i]);
            return -ENOMEM;
        }
        memset(zmq_msg_data(&d->parts[i]), 0, lens[i]);
    }
    return 0;
}

/* A shared-memory load: chunks in RAM (also while being written or spilled) are answered by
 * location under a load pin; a chunk only on disk is promoted into the arena first (the reply
 * waits for its read). Protocol 2 frames: [head, status, locations, checksums]. */
static void do_load_shm(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_load_t *l = &req->u.load;
    size_t n = l->nhashes, nparts = req->hdr.version >= 2 ? 3 : 2;
    size_t lens[3] = {n, n * KVT_LOC_BYTES, n * KVT_CSUM_BYTES};
    shm_load_t *x;
    store_cost_t cost;

    if (!shm_ok(sv, r))
        return;
    /* its load pins (the chunks read from disk are pinned once promoted) and its disk reads
     * within the bounds (contract C3) */
    store_load_cost(sv->store, ns, l->rank, l->hashes, l->nhashes, uv_now(sv->loop), &cost);
    if (!server__admit(sv, r, &(session_charge_t){.disk_reads = cost.disk_reads},
                       cost.ram_new_bytes + cost.copy_bytes))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    x = calloc(1, sizeof *x);
    if (x != NULL) {
        *x = (shm_load_t){.sv = sv, .ns = ns->id, .rank = l->rank, .n = n};
        x->hashes = malloc(n * sizeof *x->hashes);
        x->chunks = calloc(n, sizeof *x->chunks);
        x->d = server__defer(sv, r, nparts);
    }
    if (x == NULL || x->hashes == NULL || x->chunks == NULL || x->d == NULL ||
        zero_parts(x->d, lens, nparts) != 0) {
        if (x != NULL && x->d != NULL)
            server__deferred_drop(x->d);
        if (x != NULL) {
            free(x->hashes);
            free(x->chunks);
        }
        free(x);
        server__reply_error(sv, r, KVT_WIRE_EBUSY, "out of memory for a load");
        return;
    }
    memcpy(x->hashes, l->hashes, n * sizeof *x->hashes);
    if (store_load_batch(sv->store, ns, l->rank, l->hashes, n, true, shm_chunk_cb, shm_done_cb, x,
                         NULL) != 0) {
        server__deferred_drop(x->d);
        free(x->hashes);
        free(x->chunks);
        free(x);
        server__reply_error(sv, r, KVT_WIRE_EBUSY, "out of memory for a load");
    }
}

static void free_buffer_cb(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* The reply part of a load's first payload: part 0 is the status frame; protocol 2 puts the
 * checksums frame at part 1 (PROTOCOL.md). */
static size_t load_first_payload(const server_deferred_t *d)
{
    return d->hdr.version >= 2 ? 2 : 1;
}

/* Chunk i of a load becomes payload part first + i of the reply. Arena bytes are lent to ZeroMQ
 * under the store's pin (zcref.h), returned when the frame was sent; an owned buffer becomes the
 * frame without a copy. */
static void load_chunk_cb(void *arg, size_t i, const store_loaded_t *c)
{
    server_deferred_t *d = arg;
    server_t *sv = d->sv;
    uint8_t *status = zmq_msg_data(&d->parts[0]);
    zmq_msg_t *p = &d->parts[load_first_payload(d) + i];

    zmq_msg_close(p); /* empty since server__defer(): initialised again below */
    status[i] = KVT_CHUNK_HIT;
    if (c->kind != STORE_LOADED_MISS && load_first_payload(d) > 1)
        kvt_put_u64((uint8_t *)zmq_msg_data(&d->parts[1]) + i * KVT_CSUM_BYTES, c->csum);
    switch (c->kind) {
    case STORE_LOADED_LENT:
        if (sv->zc == NULL || zcref_msg_init(sv->zc, p, c->data, c->len, c->chunk) != 0) {
            server__part_bytes(p, c->data, c->len);
            store_unpin(sv->store, c->chunk);
        }
        break;
    case STORE_LOADED_OWNED:
        if (zmq_msg_init_data(p, c->data, c->len, free_buffer_cb, NULL) != 0) {
            free(c->data);
            zmq_msg_init(p);
            status[i] = KVT_CHUNK_MISS;
            if (load_first_payload(d) > 1)
                kvt_put_u64((uint8_t *)zmq_msg_data(&d->parts[1]) + i * KVT_CSUM_BYTES, 0);
        }
        break;
    case STORE_LOADED_MISS:
        zmq_msg_init(p);
        status[i] = KVT_CHUNK_MISS;
        break;
    }
}

/* The status frame (part 0) and, in protocol 2, the checksums frame (part 1: zero until each
 * chunk is reported) of a deferred load. 0 or -ENOMEM. */
static int load_init_parts(server_deferred_t *d, size_t n)
{
    size_t lens[2] = {n, n * KVT_CSUM_BYTES};

    return zero_parts(d, lens, load_first_payload(d));
}

static void load_done_cb(void *arg)
{
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOAD_OK}};

    server__deferred_reply(arg, &m);
}

/* Loads reply when their last chunk is in: at once when every chunk was in RAM or the write
 * buffer, after the last disk read otherwise (the reply is deferred either way). */
static void do_load(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_load_t *l = &req->u.load;
    server_deferred_t *d;
    store_cost_t cost;

    if (l->rank >= ns->world) {
        server__reply_error(sv, r, KVT_WIRE_EINVAL, "rank %u >= world %u", l->rank, ns->world);
        return;
    }
    if (req->hdr.flags & KVT_LOAD_SHM) {
        do_load_shm(sv, r);
        return;
    }
    session_set_path(ss, SESSION_PATH_FRAMES);
    /* its reply bytes, lent arena bytes and disk reads within the bounds (contract C3) */
    store_load_cost(sv->store, ns, l->rank, l->hashes, l->nhashes, uv_now(sv->loop), &cost);
    if (!server__admit(sv, r,
                       &(session_charge_t){.reply_bytes = cost.ram_bytes + cost.copy_bytes,
                                           .lent_bytes = cost.ram_new_bytes,
                                           .disk_reads = cost.disk_reads},
                       0))
        return;
    d = server__defer(sv, r, (req->hdr.version >= 2 ? 2 : 1) + l->nhashes);
    if (d != NULL && load_init_parts(d, l->nhashes) != 0) {
        server__deferred_drop(d);
        d = NULL;
    }
    if (d == NULL || store_load_batch(sv->store, ns, l->rank, l->hashes, l->nhashes, false,
                                      load_chunk_cb, load_done_cb, d, NULL) != 0) {
        if (d != NULL)
            server__deferred_drop(d);
        server__reply_error(sv, r, KVT_WIRE_EBUSY, "out of memory for a load");
    }
}

static void do_arena(server_t *sv, const server_req_t *r)
{
    const kvt_msg_t *req = r->m;
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_ARENA_OK);
    const char *path = store_arena_path(sv->store);
    size_t k;

    m.hdr.flags = sv->cfg->ram.prefault ? KVT_ARENA_PREFAULTED : 0;
    m.u.arena_ok.arena_bytes = store_arena_bytes(sv->store);
    m.u.arena_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    m.u.arena_ok.arena_gen = server__arena_gen(sv);
    k = server__reply_head(sv, r->rid, &m);
    server__part_bytes(&sv->out[k++], path, strlen(path));
    server__send(sv, k);
}

/*
 * Shared-memory save, step 1: like SAVE_BEGIN, and each wanted chunk gets an arena extent held
 * by the session until committed or hold_ms passes. The stored predecessor of each reserved
 * chunk is pinned with it, so the chain the client is writing cannot lose its head meanwhile.
 */
static void do_reserve(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_save_t *s = &req->u.save;
    uint64_t now = uv_now(sv->loop), deadline = now + sv->cfg->ram.shm_hold_ms;
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_SAVE_RESERVE_OK);
    store_chunk_t *prev;
    uint8_t *locs;
    bool full = false;
    size_t k, wanted;
    uint64_t want_bytes = 0;

    if (!save_args_ok(sv, r) || !shm_ok(sv, r))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    wanted = store_save_query(sv->store, ns, s->rank, s->hashes, s->nhashes, sv->status);
    admission_decide(sv->admission, ns, req, now, wanted, sv->status);
    /* the reservations within the held bounds (contract C3), each charged the arena bytes it
     * takes: a 1-byte reservation holds a whole allocation unit */
    for (size_t i = 0; i < s->nhashes; i++)
        if (sv->status[i] == KVT_CHUNK_WANTED)
            want_bytes += store_footprint(sv->store, kvt_get_u64(s->lengths + 8 * i));
    if (!server__admit(sv, r, &(session_charge_t){0}, want_bytes))
        return;
    m.u.chunks_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    k = server__reply_head(sv, r->rid, &m);
    zmq_msg_init_size(&sv->out[k + 1], s->nhashes * KVT_LOC_BYTES);
    locs = zmq_msg_data(&sv->out[k + 1]);
    memset(locs, 0, s->nhashes * KVT_LOC_BYTES);
    prev =
        (req->hdr.flags & KVT_SAVE_PARENT) ? store_find(sv->store, ns, s->rank, &s->parent) : NULL;
    for (size_t i = 0; i < s->nhashes; i++) {
        uint64_t len = kvt_get_u64(s->lengths + 8 * i), off;
        kvt_wire_hash_t h;

        memcpy(&h, &s->hashes[i], sizeof h);
        if (sv->status[i] != KVT_CHUNK_WANTED) {
            prev =
                sv->status[i] == KVT_CHUNK_EXISTS ? store_find(sv->store, ns, s->rank, &h) : NULL;
            continue;
        }
        if (full || store_reserve(sv->store, len, prev, now, &off) != 0) {
            sv->status[i] = KVT_CHUNK_NOSPACE;
            full = true;
            continue;
        }
        if (session_reserve(sv->sessions, ss, ns->id, s->rank, &h, off, len, prev, deadline,
                            ns->drops) != 0) {
            store_unreserve(sv->store, off, len);
            sv->status[i] = KVT_CHUNK_NOSPACE;
            full = true;
            continue;
        }
        kvt_put_u64(locs + i * KVT_LOC_BYTES, off);
        kvt_put_u64(locs + i * KVT_LOC_BYTES + 8, len);
        prev = NULL; /* its predecessor is this reservation, not a stored chunk */
    }
    server__part_bytes(&sv->out[k], sv->status, s->nhashes);
    server__send(sv, k + 2);
}

/*
 * Shared-memory save, step 2: the client wrote its reserved extents; publish them in chain
 * order. Every location the client names must be exactly one of this session's reservations
 * for that chunk: anything else is refused (EINVAL) and the named reservations are reclaimed,
 * so nothing outside a reserved range is ever published. A chunk whose reservation expired
 * is SKIPPED (not stored).
 */
static void do_commit(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_save_t *s = &req->u.save;
    kvt_wire_hash_t parent = s->parent;
    size_t bad = SIZE_MAX;
    put_ctx_t *x;

    if (!save_args_ok(sv, r))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    for (size_t i = 0; i < s->nhashes; i++) {
        uint64_t off = kvt_get_u64(s->locs + i * KVT_LOC_BYTES);
        uint64_t len = kvt_get_u64(s->locs + i * KVT_LOC_BYTES + 8);
        kvt_wire_hash_t h;
        uint64_t drops;

        sv->offs[i] = UINT64_MAX;
        if (len == 0)
            continue; /* not written by the client (exists, declined, nospace) */
        memcpy(&h, &s->hashes[i], sizeof h);
        sv->offs[i] = off; /* the extent named: the reservation taken, if s holds it */
        sv->lens[i] = len;
        if (session_take_reservation(sv->sessions, ss, ns->id, s->rank, &h, &sv->offs[i],
                                     &sv->lens[i], &drops) != 0) {
            sv->offs[i] = UINT64_MAX; /* expired and reclaimed: not stored */
            continue;
        }
        if ((sv->offs[i] != off || sv->lens[i] != len) && bad == SIZE_MAX)
            bad = i;
        if (drops != ns->drops && bad == SIZE_MAX) {
            /* reserved before an operator's drop of the namespace: its bytes were written for
             * what the drop removed, so it is not stored (SKIPPED, as an expired one) */
            store_unreserve(sv->store, sv->offs[i], sv->lens[i]);
            sv->offs[i] = UINT64_MAX;
        }
    }
    if (bad != SIZE_MAX) {
        for (size_t i = 0; i < s->nhashes; i++)
            if (sv->offs[i] != UINT64_MAX)
                store_unreserve(sv->store, sv->offs[i], sv->lens[i]);
        server__reply_error(sv, r, KVT_WIRE_EINVAL,
                            "commit of chunk %zu names a range that was not reserved for it", bad);
        return;
    }
    x = put_ctx_new(sv, r, s->nhashes, true);
    if (x == NULL) {
        for (size_t i = 0; i < s->nhashes; i++)
            if (sv->offs[i] != UINT64_MAX)
                store_unreserve(sv->store, sv->offs[i], sv->lens[i]);
        put_ctx_fail(sv, r, NULL);
        return;
    }
    for (size_t i = 0; i < s->nhashes; i++)
        x->lens[i] = sv->offs[i] != UINT64_MAX ? sv->lens[i] : 0;
    /* the extents belong to the store from here, published once their checksums are known */
    if (store_commit(sv->store, ns, s->rank, (req->hdr.flags & KVT_SAVE_PARENT) ? &parent : NULL,
                     s->hashes, s->nhashes, sv->offs, sv->lens, s->csums, x->status, put_done_cb, x,
                     NULL) != 0)
        put_ctx_fail(sv, r, x);
}

static void do_release(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_release_t *rel = &req->u.release;
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_RELEASE_OK);

    bool corrupt = req->hdr.version >= 2 && (req->hdr.flags & KVT_RELEASE_CORRUPT);

    for (size_t i = 0; i < rel->nhashes; i++) {
        kvt_wire_hash_t h;
        memcpy(&h, &rel->hashes[i], sizeof h);
        m.u.release_ok.released += (uint32_t)session_unpin(sv->sessions, ss, ns->id, rel->rank, &h);
        /* a client's mismatch is checked, never believed: the store re-hashes the chunk */
        if (corrupt && rel->rank < ns->world)
            store_verify(sv->store, ns, rel->rank, &h);
    }
    server__send(sv, server__reply_head(sv, r->rid, &m));
}

static void do_tally(server_t *sv, const server_req_t *r)
{
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_tally_t *t = &req->u.tally;
    gates_reason_t reasons[GATES_REASON_MAX];
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_TALLY_OK);
    const gates_cfg_t *gc = gates_cfg(ns->gates);
    gates_state_t st;
    size_t off = 0, nl;
    const char *name;
    uint64_t count;
    int nr = 0;

    while (kvt_reason_next(t->reasons, t->reasons_len, &off, &name, &nl, &count) > 0 &&
           nr < GATES_REASON_MAX) {
        memcpy(reasons[nr].name, name, nl);
        reasons[nr].name[nl] = '\0';
        reasons[nr].count = count;
        nr++;
    }
    if (gates_tally_fold(ns->gates,
                         &(gates_tally_t){.engine_id = t->engine_id,
                                          .paid_total = t->paid_total,
                                          .probes_total = t->probes_total,
                                          .has_tokens = req->hdr.version >= 2 &&
                                                        (req->hdr.flags & KVT_TALLY_TOKENS) != 0,
                                          .served_tokens_total = t->served_tokens_total,
                                          .lookup_tokens_total = t->lookup_tokens_total,
                                          .reasons = reasons,
                                          .nreasons = nr}))
        log_admission_report(ns);
    gates_state(ns->gates, &st);
    m.u.tally_ok.payoff = st.payoff;
    m.u.tally_ok.share = st.share;
    m.u.tally_ok.act_ema = st.act_ema;
    m.u.tally_ok.probes = st.probes;
    m.u.tally_ok.lookups = st.lookups;
    m.u.tally_ok.gate_flags = (uint16_t)((gc->admission.enabled ? KVT_GATE_ADMISSION_ON : 0) |
                                         (gc->lookup_skip.enabled ? KVT_GATE_SKIP_ON : 0) |
                                         (st.load_bearing ? KVT_GATE_LOAD_BEARING : 0));
    /* protocol 2 (not encoded in a protocol 1 reply) */
    m.u.tally_ok.policy = (uint8_t)st.policy;
    m.u.tally_ok.density = st.density;
    m.u.tally_ok.served_tokens = st.served_tokens;
    m.u.tally_ok.regret_tokens = st.regret_tokens;
    m.u.tally_ok.written_tokens = st.written_tokens;
    m.u.tally_ok.declined_tokens = st.declined_tokens;
    server__send(sv, server__reply_head(sv, r->rid, &m));
}

/* --- the operation table --- */

/* In the order of status "ops" and of the metrics. */
const server_op_t server__ops[] = {
    {.type = KVT_MSG_HELLO, .name = "hello", .handler = do_hello},
    {.type = KVT_MSG_LOOKUP,
     .name = "lookup",
     .handler = do_lookup,
     .needs_ns = true,
     .ns_timed = true},
    {.type = KVT_MSG_SAVE_BEGIN, .name = "save_begin", .handler = do_save_begin, .needs_ns = true},
    {.type = KVT_MSG_SAVE_DATA, .name = "save", .handler = do_save, .needs_ns = true},
    {.type = KVT_MSG_LOAD, .name = "load", .handler = do_load, .needs_ns = true},
    {.type = KVT_MSG_TALLY, .name = "tally", .handler = do_tally, .needs_ns = true},
    {.type = KVT_MSG_ARENA, .name = "arena", .handler = do_arena},
    {.type = KVT_MSG_SAVE_RESERVE, .name = "reserve", .handler = do_reserve, .needs_ns = true},
    {.type = KVT_MSG_SAVE_COMMIT, .name = "commit", .handler = do_commit, .needs_ns = true},
    {.type = KVT_MSG_RELEASE, .name = "release", .handler = do_release, .needs_ns = true},
};

const size_t server__nops = sizeof server__ops / sizeof server__ops[0];
