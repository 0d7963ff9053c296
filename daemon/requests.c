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
 * Loads (frames path): store_load_batch() reports every chunk once; RAM chunks arrive pinned and
 * their arena bytes are lent to ZeroMQ instead of copied (zcref.h: the chunk stays pinned until
 * ZeroMQ has sent the frame and handed it back, so no eviction can change bytes a queued reply
 * still references); chunks from the disk or its write buffer arrive as owned buffers that
 * become their frames without a copy. The reply is deferred (server__defer) until the last chunk
 * is in, at once when none had to be read from disk. Shared-memory clients (ARENA, SAVE_RESERVE
 * / SAVE_COMMIT, LOAD with KVT_LOAD_SHM, RELEASE) move no chunk bytes through the socket at all;
 * what they hold in the arena is tracked per session (session.h), pinned through the store.
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
    log_info("namespace_evicted",
             "ns=\"%s\" id=%u chunks=%" PRIu64 " pinned=%" PRIu64 " for=\"%s\"", victim->model,
             victim->id, d.chunks, d.pinned, model);
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
                            "are declared by connected clients; raise it, or stop the clients "
                            "holding them (kvtierctl status lists them)",
                            ns_max(sv->nst));
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
    if (ns->chunks == 0 && ns->bytes == 0)
        log_debug("hello", "ns=%s fp=%016" PRIx64 " id=%u world=%u rank=%u", model, h->layout_fp,
                  ns->id, h->world, h->rank);
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

    gates_state(ns->gates, &st);
    log_info("lookup_skip",
             "ns=%s lookups=%" PRIu64 " act_ema=%.6f load_bearing=%d skips=%" PRIu64
             " forced_probes=%" PRIu64 " would_skip=%" PRIu64,
             ns->model, st.lookups, st.act_ema, st.load_bearing, st.skips, st.forced_probes,
             st.would_skip);
}

static void log_admission_report(const ns_t *ns)
{
    gates_state_t st;

    gates_state(ns->gates, &st);
    log_info("admission", "ns=%s probes=%" PRIu64 " payoff=%.6f saved=%" PRIu64 " skipped=%" PRIu64,
             ns->model, st.probes, st.payoff, st.saved, st.skipped);
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
        hit = store_lookup_all(sv->store, ns, l->hashes, l->nhashes, false, now, sv->rank_hits);
        nranks = ns->world;
    } else {
        hit = store_lookup(sv->store, ns, l->rank, l->hashes, l->nhashes, false, now);
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

static void do_save(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_save_t *s = &req->u.save;
    uint64_t now = uv_now(sv->loop);
    size_t sent = 0;
    bool admit = true;

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
    if (admit)
        store_save(sv->store, ns, s->rank, (req->hdr.flags & KVT_SAVE_PARENT) ? &s->parent : NULL,
                   s->hashes, s->nhashes, s->payloads, now, sv->status);
    server__reply_status(sv, r, KVT_MSG_SAVE_OK, sv->status, s->nhashes);
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

/* A shared-memory load answers from RAM only: a chunk found only on disk (or in the disk
 * write buffer) is a miss now, and a disk read promotes it into RAM for the next load. */
static void do_load_shm(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_load_t *l = &req->u.load;
    uint64_t deadline = uv_now(sv->loop) + sv->cfg->ram.shm_hold_ms;
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_LOAD_OK);
    store_cost_t cost;
    uint8_t *locs;
    size_t k, nparts;

    if (!shm_ok(sv, r))
        return;
    /* its load pins within the held bounds (contract C3) */
    store_load_cost(sv->store, ns, l->rank, l->hashes, l->nhashes, uv_now(sv->loop), &cost);
    if (!server__admit(sv, r, &(session_charge_t){0}, cost.ram_new_bytes))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    m.hdr.flags = KVT_LOADR_SHM;
    m.u.chunks_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    k = server__reply_head(sv, r->rid, &m);
    nparts = 2; /* status, locations; protocol 2 adds checksums */
    if (m.hdr.version >= 2) {
        zmq_msg_init_size(&sv->out[k + 2], l->nhashes * KVT_CSUM_BYTES);
        memset(zmq_msg_data(&sv->out[k + 2]), 0, l->nhashes * KVT_CSUM_BYTES);
        nparts = 3;
    }
    zmq_msg_init_size(&sv->out[k + 1], l->nhashes * KVT_LOC_BYTES);
    locs = zmq_msg_data(&sv->out[k + 1]);
    memset(locs, 0, l->nhashes * KVT_LOC_BYTES);
    for (size_t i = 0; i < l->nhashes; i++) {
        store_chunk_t *c = store_load_ram(sv->store, ns, l->rank, &l->hashes[i]);
        kvt_wire_hash_t h;
        memcpy(&h, &l->hashes[i], sizeof h);
        if (c == NULL && server__may_read(sv, 1))
            store_promote(sv->store, ns, l->rank, &l->hashes[i]);
        if (c == NULL || session_pin(sv->sessions, ss, ns->id, l->rank, &h, c, deadline) != 0) {
            sv->status[i] = KVT_CHUNK_MISS;
            continue;
        }
        sv->status[i] = KVT_CHUNK_HIT;
        kvt_put_u64(locs + i * KVT_LOC_BYTES, store_chunk_off(c));
        kvt_put_u64(locs + i * KVT_LOC_BYTES + 8, store_chunk_len(c));
    }
    server__part_bytes(&sv->out[k], sv->status, l->nhashes);
    server__send(sv, k + nparts);
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
        }
        break;
    case STORE_LOADED_MISS:
        zmq_msg_init(p);
        status[i] = KVT_CHUNK_MISS;
        break;
    }
}

/* The status frame (part 0) and, in protocol 2, the checksums frame (part 1: zero, the chunks'
 * checksums are not known yet) of a deferred load. 0 or -ENOMEM. */
static int load_init_parts(server_deferred_t *d, size_t n)
{
    for (size_t i = 0; i < load_first_payload(d); i++) {
        size_t len = i == 0 ? n : n * KVT_CSUM_BYTES;
        zmq_msg_close(&d->parts[i]);
        if (zmq_msg_init_size(&d->parts[i], len) != 0) {
            zmq_msg_init(&d->parts[i]);
            return -ENOMEM;
        }
        memset(zmq_msg_data(&d->parts[i]), 0, len);
    }
    return 0;
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
    if (d == NULL || store_load_batch(sv->store, ns, l->rank, l->hashes, l->nhashes, load_chunk_cb,
                                      load_done_cb, d) != 0) {
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
    /* the reservations within the held bounds (contract C3) */
    for (size_t i = 0; i < s->nhashes; i++)
        if (sv->status[i] == KVT_CHUNK_WANTED)
            want_bytes += kvt_get_u64(s->lengths + 8 * i);
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
        if (session_reserve(sv->sessions, ss, ns->id, s->rank, &h, off, len, prev, deadline) != 0) {
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
    size_t bad = SIZE_MAX;

    if (!save_args_ok(sv, r))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    for (size_t i = 0; i < s->nhashes; i++) {
        uint64_t off = kvt_get_u64(s->locs + i * KVT_LOC_BYTES);
        uint64_t len = kvt_get_u64(s->locs + i * KVT_LOC_BYTES + 8);
        kvt_wire_hash_t h;

        sv->offs[i] = UINT64_MAX;
        if (len == 0)
            continue; /* not written by the client (exists, declined, nospace) */
        memcpy(&h, &s->hashes[i], sizeof h);
        if (session_take_reservation(sv->sessions, ss, ns->id, s->rank, &h, &sv->offs[i],
                                     &sv->lens[i]) != 0)
            continue; /* expired and reclaimed: not stored */
        if ((sv->offs[i] != off || sv->lens[i] != len) && bad == SIZE_MAX)
            bad = i;
    }
    if (bad != SIZE_MAX) {
        for (size_t i = 0; i < s->nhashes; i++)
            if (sv->offs[i] != UINT64_MAX)
                store_unreserve(sv->store, sv->offs[i], sv->lens[i]);
        server__reply_error(sv, r, KVT_WIRE_EINVAL,
                            "commit of chunk %zu names a range that was not reserved for it", bad);
        return;
    }
    store_commit(sv->store, ns, s->rank, (req->hdr.flags & KVT_SAVE_PARENT) ? &s->parent : NULL,
                 s->hashes, s->nhashes, sv->offs, sv->lens, sv->status);
    for (size_t i = 0; i < s->nhashes; i++)
        if (sv->status[i] == KVT_CHUNK_STORED)
            sv->counters.bytes_committed += sv->lens[i];
    server__reply_status(sv, r, KVT_MSG_SAVE_OK, sv->status, s->nhashes);
}

static void do_release(server_t *sv, const server_req_t *r)
{
    session_t *ss = r->session;
    ns_t *ns = r->ns;
    const kvt_msg_t *req = r->m;
    const kvt_release_t *rel = &req->u.release;
    kvt_msg_t m = server__reply_to(&req->hdr, KVT_MSG_RELEASE_OK);

    for (size_t i = 0; i < rel->nhashes; i++) {
        kvt_wire_hash_t h;
        memcpy(&h, &rel->hashes[i], sizeof h);
        m.u.release_ok.released += (uint32_t)session_unpin(sv->sessions, ss, ns->id, rel->rank, &h);
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
