/*
 * server.c - request intake and dispatch (see server.h).
 *
 * Flow: zsock delivers one multipart message [routing id, head, frames...]; the head is decoded
 * by the pure protocol module; the session of the routing id is found or created; the request
 * is executed against the store and the namespace's gates, synchronously on the loop thread
 * (everything here is memory work); one reply is sent. Decode errors are answered with ERROR
 * carrying the request id whenever the head got that far, and counted by class.
 *
 * Gates (GATES.md): the admission decision is taken once per save operation at SAVE_BEGIN (or
 * at SAVE_DATA for a client that skipped SAVE_BEGIN) and remembered in saveops so every rank of
 * the operation gets the same answer; an operation whose chunks all exist gets no decision and
 * consumes no credit. SAVE_DATA of a declined operation stores nothing. Lookups that carry
 * prompt info go through the lookup-skip gate and feed its estimator.
 *
 * Load replies lend the arena bytes of RAM-resident chunks to ZeroMQ instead of copying them
 * (zcref.h): the chunk is pinned until ZeroMQ has sent the frame and handed it back, so no
 * eviction can change bytes a queued reply still references. Shared-memory clients (ARENA,
 * SAVE_RESERVE / SAVE_COMMIT, LOAD with KVT_LOAD_SHM, RELEASE) move no chunk bytes through the
 * socket at all; what they hold in the arena is tracked per session (session.h).
 *
 * Loads with a disk tier (do_load_tiered): chunks in RAM are lent as above, chunks in the disk
 * write buffer are copied into their frames at once; chunks only on disk are read on the thread
 * pool, and the request waits in a pending-load context (routing id, head, per-chunk frames and
 * status) until its last read completed; the read's buffer becomes the frame without a copy. The
 * load's latency is recorded when the reply is sent. While the server closes, completed contexts
 * are freed without a reply (the socket is gone).
 *
 * Threads: loop thread only.
 */
#include "server.h"

#include "admission.h"
#include "gates.h"
#include "hist.h"
#include "kvt_proto.h"
#include "log.h"
#include "ns.h"
#include "session.h"
#include "store.h"
#include "zcref.h"
#include "zsock.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define SWEEP_MS 1000u
#define STATUS_SESSIONS_MAX 256 /* sessions listed in status, most recently active first */

typedef enum {
    OP_HELLO,
    OP_LOOKUP,
    OP_SAVE_BEGIN,
    OP_SAVE,
    OP_LOAD,
    OP_TALLY,
    OP_ARENA,
    OP_RESERVE,
    OP_COMMIT,
    OP_RELEASE,
    OP_COUNT
} op_t;

static const char *const op_names[OP_COUNT] = {"hello",  "lookup", "save_begin", "save",
                                               "load",   "tally",  "arena",      "reserve",
                                               "commit", "release"};

typedef enum {
    ERR_MALFORMED,
    ERR_VERSION,
    ERR_UNKNOWN_NS,
    ERR_TOO_BIG,
    ERR_INVALID,
    ERR_CONFLICT,
    ERR_UNSUPPORTED,
    ERR_BUSY,
    ERR_COUNT
} err_class_t;

static const char *const err_names[ERR_COUNT] = {"malformed", "version",  "unknown_ns",  "too_big",
                                                 "invalid",   "conflict", "unsupported", "busy"};

typedef struct {
    uint64_t sum_us;
    uint64_t count;
} ns_timing_t;

struct server {
    uv_loop_t *loop;
    const config_t *cfg;
    zsock_t *zs;
    zcref_t *zc; /* chunks lent to ZeroMQ by load replies (pinned until returned) */
    uv_timer_t sweep;
    ns_table_t *nst;
    store_t *store;
    admission_t *admission;
    kvt_limits_t lim;
    uint64_t start_ms;

    sessions_t *sessions;

    zmq_msg_t *out;      /* reply parts scratch: max_chunks + 3 */
    kvt_frame_t *frames; /* request frame views: max_chunks + 2 */
    uint8_t *status;     /* per-chunk status scratch */
    uint32_t *rank_hits; /* KVT_WORLD_MAX */
    uint64_t *offs;      /* per-chunk extent scratch: max_chunks */
    uint64_t *lens;
    uint64_t sweep_ms;

    hist_t op_hist[OP_COUNT];
    uint64_t errors[ERR_COUNT];
    uint64_t requests;
    uint64_t bytes_received;
    uint64_t bytes_sent;
    uint64_t bytes_committed; /* payload bytes published through the shared arena */
    uint64_t replies_dropped;
    ns_timing_t ns_lookup_time[NS_MAX + 1];
    int close_waits;           /* zcref and store closings still running */
    bool deferred;             /* the request being handled replies later */
    uint64_t replies_deferred; /* deferred replies alive */
};

static void sweep_cb(uv_timer_t *t)
{
    server_t *sv = t->data;

    sessions_expire(sv->sessions, uv_now(sv->loop), sv->cfg->server.client_idle_ms);
}

/* --- replies --- */

static err_class_t err_class(int code)
{
    switch (code) {
    case KVT_WIRE_EVERSION:
        return ERR_VERSION;
    case KVT_WIRE_ENONS:
        return ERR_UNKNOWN_NS;
    case KVT_WIRE_ETOOBIG:
        return ERR_TOO_BIG;
    case KVT_WIRE_EINVAL:
        return ERR_INVALID;
    case KVT_WIRE_ECONFLICT:
        return ERR_CONFLICT;
    case KVT_WIRE_EUNSUPP:
        return ERR_UNSUPPORTED;
    case KVT_WIRE_EBUSY:
        return ERR_BUSY;
    default:
        return ERR_MALFORMED;
    }
}

static void send_parts(server_t *sv, size_t n)
{
    for (size_t i = 1; i < n; i++)
        sv->bytes_sent += zmq_msg_size(&sv->out[i]);
    if (zsock_send(sv->zs, sv->out, n) != 0)
        sv->replies_dropped++;
}

/* Starts a reply: part 0 = routing id, part 1 = the head of m. Returns 2 (parts used). */
static size_t reply_head(server_t *sv, zmq_msg_t *rid, const kvt_msg_t *m)
{
    size_t hn = kvt_head_size(m->hdr.type);

    zmq_msg_init(&sv->out[0]);
    zmq_msg_copy(&sv->out[0], rid);
    zmq_msg_init_size(&sv->out[1], hn);
    kvt_head_encode(zmq_msg_data(&sv->out[1]), hn, m);
    return 2;
}

static void part_bytes(zmq_msg_t *p, const void *data, size_t len)
{
    zmq_msg_init_size(p, len);
    if (len > 0)
        memcpy(zmq_msg_data(p), data, len);
}

static void reply_error(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void reply_error(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int code,
                        const char *fmt, ...)
{
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_ERROR, .req_id = req->req_id, .ns_id = req->ns_id}};
    char text[KVT_ERRTEXT_MAX + 1];
    va_list ap;
    int n;
    size_t k;

    va_start(ap, fmt);
    n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof text)
        n = sizeof text - 1;
    sv->errors[err_class(code)]++;
    log_debug("request_error", "type=%s req=%" PRIu64 " code=%d text=\"%s\"",
              kvt_msg_type_name(req->type), req->req_id, code, text);
    m.u.error.code = code;
    k = reply_head(sv, rid, &m);
    part_bytes(&sv->out[k++], text, (size_t)n);
    send_parts(sv, k);
}

static void reply_status(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *req, int type,
                         const uint8_t *status, size_t n)
{
    kvt_msg_t m = {.hdr = {.type = (uint8_t)type, .req_id = req->req_id, .ns_id = req->ns_id}};
    size_t k = reply_head(sv, rid, &m);

    part_bytes(&sv->out[k++], status, n);
    send_parts(sv, k);
}

/* --- requests --- */

static void do_hello(server_t *sv, zmq_msg_t *rid, session_t *s, const kvt_msg_t *req)
{
    const kvt_hello_t *h = &req->u.hello;
    bool replicated = (req->hdr.flags & KVT_HELLO_REPLICATED) != 0;
    char model[KVT_MODEL_MAX + 1];
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_HELLO_OK, .req_id = req->hdr.req_id}};
    ns_t *ns;
    int rc;

    if (h->world == 0 || h->world > KVT_WORLD_MAX || h->rank >= h->world || h->chunk_tokens == 0) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EINVAL,
                    "hello: need 1 <= world <= %d, rank < world, chunk_tokens > 0 (got world %u "
                    "rank %u chunk_tokens %u)",
                    KVT_WORLD_MAX, h->world, h->rank, h->chunk_tokens);
        return;
    }
    memcpy(model, h->model, h->model_len);
    model[h->model_len] = '\0';
    rc = ns_declare(sv->nst, h->model, h->model_len, h->layout_fp, h->world, replicated,
                    h->chunk_tokens, config_gates_for(sv->cfg, model), &ns);
    if (rc == -EEXIST) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_ECONFLICT,
                    "namespace %s/%016" PRIx64 " exists with another world, replication or "
                    "chunk size",
                    model, h->layout_fp);
        return;
    }
    if (rc != 0 || session_declare(s, ns->id) != 0) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EBUSY, "too many namespaces");
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
    send_parts(sv, reply_head(sv, rid, &m));
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

static void do_lookup(server_t *sv, zmq_msg_t *rid, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_lookup_t *l = &req->u.lookup;
    bool all = l->rank == KVT_RANK_ALL;
    bool lease = (req->hdr.flags & KVT_LOOKUP_LEASE) != 0;
    bool prompt = (req->hdr.flags & KVT_LOOKUP_PROMPT) != 0;
    uint64_t now = uv_now(sv->loop);
    kvt_msg_t m = {
        .hdr = {.type = KVT_MSG_LOOKUP_OK, .req_id = req->hdr.req_id, .ns_id = req->hdr.ns_id}};
    size_t k, nranks = 0;
    uint32_t hit;

    if (!all && l->rank >= ns->world) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EINVAL, "rank %u >= world %u", l->rank, ns->world);
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
        hit = store_lookup_all(sv->store, ns, l->hashes, l->nhashes, lease, now, sv->rank_hits);
        nranks = ns->world;
    } else {
        hit = store_lookup(sv->store, ns, l->rank, l->hashes, l->nhashes, lease, now);
    }
    if (prompt && !(m.hdr.flags & KVT_LOOKUPR_SKIPPED)) {
        uint64_t tokens = (uint64_t)hit * ns->chunk_tokens;
        if (gates_lookup_observe(ns->gates,
                                 gates_loadable(tokens, l->prompt_tokens, ns->chunk_tokens),
                                 l->hbm_tokens))
            log_skip_report(ns);
    }
    m.u.lookup_ok.hit = hit;
    if (lease && hit > 0) {
        m.hdr.flags |= KVT_LOOKUPR_LEASED;
        m.u.lookup_ok.lease_ms = sv->cfg->ram.lease_ms;
    }
    k = reply_head(sv, rid, &m);
    zmq_msg_init_size(&sv->out[k], nranks * 4);
    for (size_t r = 0; r < nranks; r++)
        kvt_put_u32((uint8_t *)zmq_msg_data(&sv->out[k]) + 4 * r, sv->rank_hits[r]);
    send_parts(sv, k + 1);
}

static bool save_args_ok(server_t *sv, zmq_msg_t *rid, const ns_t *ns, const kvt_msg_t *req)
{
    if (req->u.save.rank >= ns->world) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EINVAL, "rank %u >= world %u", req->u.save.rank,
                    ns->world);
        return false;
    }
    return true;
}

static void do_save_begin(server_t *sv, zmq_msg_t *rid, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_save_t *s = &req->u.save;
    size_t wanted;

    if (!save_args_ok(sv, rid, ns, req))
        return;
    wanted = store_save_query(sv->store, ns, s->rank, s->hashes, s->nhashes, sv->status);
    admission_decide(sv->admission, ns, req, uv_now(sv->loop), wanted, sv->status);
    reply_status(sv, rid, &req->hdr, KVT_MSG_SAVE_BEGIN_OK, sv->status, s->nhashes);
}

static void do_save(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_save_t *s = &req->u.save;
    uint64_t now = uv_now(sv->loop);
    size_t sent = 0;
    bool admit = true;

    if (!save_args_ok(sv, rid, ns, req))
        return;
    session_set_path(ss, SESSION_PATH_FRAMES);
    for (size_t i = 0; i < s->nhashes; i++) {
        sv->bytes_received += s->payloads[i].len;
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
    reply_status(sv, rid, &req->hdr, KVT_MSG_SAVE_OK, sv->status, s->nhashes);
}

static bool shm_ok(server_t *sv, zmq_msg_t *rid, const kvt_msg_t *req)
{
    if (store_arena_path(sv->store)[0] != '\0')
        return true;
    reply_error(sv, rid, &req->hdr, KVT_WIRE_EUNSUPP,
                "%s: the arena is not shared (ram.arena_path is empty)",
                kvt_msg_type_name(req->hdr.type));
    return false;
}

/* --- deferred replies --- */

/*
 * A reply that is sent after the handler returned (a load waiting for disk reads). The handler
 * takes it with defer() while it runs, fills parts (the reply's frames after the head) as its
 * work completes, and ends it with deferred_reply(), which sends the head and the parts,
 * records the request's latency and frees everything; deferred_drop() gives it up while the
 * handler still runs (the handler then replies at once). While the server closes, a reply that
 * completes is dropped (the socket is gone) and its parts are closed, returning their loans.
 */
typedef struct {
    server_t *sv;
    zmq_msg_t rid;
    kvt_hdr_t hdr;
    op_t op;
    uint64_t t0;
    size_t nparts;
    zmq_msg_t parts[];
} deferred_t;

static deferred_t *defer(server_t *sv, zmq_msg_t *rid, const kvt_hdr_t *hdr, op_t op, uint64_t t0,
                         size_t nparts)
{
    deferred_t *d = malloc(sizeof *d + nparts * sizeof d->parts[0]);

    if (d == NULL)
        return NULL;
    d->sv = sv;
    zmq_msg_init(&d->rid);
    zmq_msg_copy(&d->rid, rid);
    d->hdr = *hdr;
    d->op = op;
    d->t0 = t0;
    d->nparts = nparts;
    for (size_t i = 0; i < nparts; i++)
        zmq_msg_init(&d->parts[i]);
    sv->deferred = true;
    sv->replies_deferred++;
    return d;
}

static void deferred_free(deferred_t *d)
{
    for (size_t i = 0; i < d->nparts; i++)
        zmq_msg_close(&d->parts[i]);
    zmq_msg_close(&d->rid);
    d->sv->replies_deferred--;
    free(d);
}

/* Sends m (its req_id and ns_id are the request's) followed by the parts. */
static void deferred_reply(deferred_t *d, kvt_msg_t *m)
{
    server_t *sv = d->sv;

    if (sv->zs != NULL) {
        size_t k;
        m->hdr.req_id = d->hdr.req_id;
        m->hdr.ns_id = d->hdr.ns_id;
        k = reply_head(sv, &d->rid, m);
        for (size_t i = 0; i < d->nparts; i++) {
            zmq_msg_init(&sv->out[k + i]);
            zmq_msg_move(&sv->out[k + i], &d->parts[i]);
        }
        send_parts(sv, k + d->nparts);
        hist_record(&sv->op_hist[d->op], (uv_hrtime() - d->t0) / 1000);
    }
    deferred_free(d);
}

/* Gives up a reply taken by defer() in the running handler. */
static void deferred_drop(deferred_t *d)
{
    d->sv->deferred = false;
    deferred_free(d);
}

/* --- loads --- */

/* A shared-memory load answers from RAM only: a chunk found only on disk (or in the disk
 * write buffer) is a miss now, and a disk read promotes it into RAM for the next load. */
static void do_load_shm(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_load_t *l = &req->u.load;
    uint64_t deadline = uv_now(sv->loop) + sv->cfg->ram.shm_hold_ms;
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOAD_OK,
                           .flags = KVT_LOADR_SHM,
                           .req_id = req->hdr.req_id,
                           .ns_id = req->hdr.ns_id}};
    uint8_t *locs;
    size_t k;

    if (!shm_ok(sv, rid, req))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    m.u.chunks_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    k = reply_head(sv, rid, &m);
    zmq_msg_init_size(&sv->out[k + 1], l->nhashes * KVT_LOC_BYTES);
    locs = zmq_msg_data(&sv->out[k + 1]);
    memset(locs, 0, l->nhashes * KVT_LOC_BYTES);
    for (size_t i = 0; i < l->nhashes; i++) {
        store_chunk_t *c = store_load_ram(sv->store, ns, l->rank, &l->hashes[i]);
        kvt_wire_hash_t h;
        memcpy(&h, &l->hashes[i], sizeof h);
        if (c == NULL)
            store_promote(sv->store, ns, l->rank, &l->hashes[i]);
        if (c == NULL || session_pin(sv->sessions, ss, ns->id, l->rank, &h, c, deadline) != 0) {
            sv->status[i] = KVT_CHUNK_MISS;
            continue;
        }
        sv->status[i] = KVT_CHUNK_HIT;
        kvt_put_u64(locs + i * KVT_LOC_BYTES, store_chunk_off(c));
        kvt_put_u64(locs + i * KVT_LOC_BYTES + 8, store_chunk_len(c));
    }
    part_bytes(&sv->out[k], sv->status, l->nhashes);
    send_parts(sv, k + 2);
}

static void free_buffer_cb(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Chunk i of a load becomes payload part 1 + i of the reply (part 0 is the status frame). Arena
 * bytes are lent to ZeroMQ under the store's pin (zcref.h), returned when the frame was sent;
 * an owned buffer becomes the frame without a copy. */
static void load_chunk_cb(void *arg, size_t i, const store_loaded_t *c)
{
    deferred_t *d = arg;
    server_t *sv = d->sv;
    uint8_t *status = zmq_msg_data(&d->parts[0]);
    zmq_msg_t *p = &d->parts[1 + i];

    status[i] = KVT_CHUNK_HIT;
    switch (c->kind) {
    case STORE_LOADED_LENT:
        if (sv->zc == NULL || zcref_msg_init(sv->zc, p, c->data, c->len, c->chunk) != 0) {
            part_bytes(p, c->data, c->len);
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
        status[i] = KVT_CHUNK_MISS;
        break;
    }
}

static void load_done_cb(void *arg)
{
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOAD_OK}};

    deferred_reply(arg, &m);
}

/* Loads reply when their last chunk is in: at once when every chunk was in RAM or the write
 * buffer, after the last disk read otherwise (the reply is deferred either way). */
static void do_load(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req,
                    uint64_t t0)
{
    const kvt_load_t *l = &req->u.load;
    deferred_t *d;

    if (l->rank >= ns->world) {
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EINVAL, "rank %u >= world %u", l->rank, ns->world);
        return;
    }
    if (req->hdr.flags & KVT_LOAD_SHM) {
        do_load_shm(sv, rid, ss, ns, req);
        return;
    }
    session_set_path(ss, SESSION_PATH_FRAMES);
    d = defer(sv, rid, &req->hdr, OP_LOAD, t0, 1 + l->nhashes);
    if (d != NULL) {
        zmq_msg_close(&d->parts[0]); /* becomes the status frame */
        if (zmq_msg_init_size(&d->parts[0], l->nhashes) != 0) {
            zmq_msg_init(&d->parts[0]);
            deferred_drop(d);
            d = NULL;
        }
    }
    if (d == NULL || store_load_batch(sv->store, ns, l->rank, l->hashes, l->nhashes, load_chunk_cb,
                                      load_done_cb, d) != 0) {
        if (d != NULL)
            deferred_drop(d);
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EBUSY, "out of memory for a load");
    }
}

static void do_arena(server_t *sv, zmq_msg_t *rid, const kvt_msg_t *req)
{
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_ARENA_OK, .req_id = req->hdr.req_id}};
    const char *path = store_arena_path(sv->store);
    size_t k;

    m.hdr.flags = sv->cfg->ram.prefault ? KVT_ARENA_PREFAULTED : 0;
    m.u.arena_ok.arena_bytes = store_arena_bytes(sv->store);
    m.u.arena_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    k = reply_head(sv, rid, &m);
    part_bytes(&sv->out[k++], path, strlen(path));
    send_parts(sv, k);
}

/*
 * Shared-memory save, step 1: like SAVE_BEGIN, and each wanted chunk gets an arena extent held
 * by the session until committed or hold_ms passes. The stored predecessor of each reserved
 * chunk is pinned with it, so the chain the client is writing cannot lose its head meanwhile.
 */
static void do_reserve(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_save_t *s = &req->u.save;
    uint64_t now = uv_now(sv->loop), deadline = now + sv->cfg->ram.shm_hold_ms;
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_SAVE_RESERVE_OK,
                           .req_id = req->hdr.req_id,
                           .ns_id = req->hdr.ns_id}};
    store_chunk_t *prev;
    uint8_t *locs;
    bool full = false;
    size_t k, wanted;

    if (!save_args_ok(sv, rid, ns, req) || !shm_ok(sv, rid, req))
        return;
    session_set_path(ss, SESSION_PATH_SHM);
    wanted = store_save_query(sv->store, ns, s->rank, s->hashes, s->nhashes, sv->status);
    admission_decide(sv->admission, ns, req, now, wanted, sv->status);
    m.u.chunks_ok.hold_ms = sv->cfg->ram.shm_hold_ms;
    k = reply_head(sv, rid, &m);
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
    part_bytes(&sv->out[k], sv->status, s->nhashes);
    send_parts(sv, k + 2);
}

/*
 * Shared-memory save, step 2: the client wrote its reserved extents; publish them in chain
 * order. Every location the client names must be exactly one of this session's reservations
 * for that chunk: anything else is refused (EINVAL) and the named reservations are reclaimed,
 * so nothing outside a reserved range is ever published. A chunk whose reservation expired
 * is SKIPPED (not stored).
 */
static void do_commit(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_save_t *s = &req->u.save;
    size_t bad = SIZE_MAX;

    if (!save_args_ok(sv, rid, ns, req))
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
        reply_error(sv, rid, &req->hdr, KVT_WIRE_EINVAL,
                    "commit of chunk %zu names a range that was not reserved for it", bad);
        return;
    }
    store_commit(sv->store, ns, s->rank, (req->hdr.flags & KVT_SAVE_PARENT) ? &s->parent : NULL,
                 s->hashes, s->nhashes, sv->offs, sv->lens, sv->status);
    for (size_t i = 0; i < s->nhashes; i++)
        if (sv->status[i] == KVT_CHUNK_STORED)
            sv->bytes_committed += sv->lens[i];
    reply_status(sv, rid, &req->hdr, KVT_MSG_SAVE_OK, sv->status, s->nhashes);
}

static void do_release(server_t *sv, zmq_msg_t *rid, session_t *ss, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_release_t *r = &req->u.release;
    kvt_msg_t m = {
        .hdr = {.type = KVT_MSG_RELEASE_OK, .req_id = req->hdr.req_id, .ns_id = req->hdr.ns_id}};

    for (size_t i = 0; i < r->nhashes; i++) {
        kvt_wire_hash_t h;
        memcpy(&h, &r->hashes[i], sizeof h);
        m.u.release_ok.released += (uint32_t)session_unpin(sv->sessions, ss, ns->id, r->rank, &h);
    }
    send_parts(sv, reply_head(sv, rid, &m));
}

static void do_tally(server_t *sv, zmq_msg_t *rid, ns_t *ns, const kvt_msg_t *req)
{
    const kvt_tally_t *t = &req->u.tally;
    gates_reason_t reasons[GATES_REASON_MAX];
    kvt_msg_t m = {
        .hdr = {.type = KVT_MSG_TALLY_OK, .req_id = req->hdr.req_id, .ns_id = req->hdr.ns_id}};
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
    if (gates_tally(ns->gates, t->engine_id, t->paid_total, t->probes_total, reasons, nr))
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
    send_parts(sv, reply_head(sv, rid, &m));
}

static op_t op_of(int type)
{
    switch (type) {
    case KVT_MSG_HELLO:
        return OP_HELLO;
    case KVT_MSG_LOOKUP:
        return OP_LOOKUP;
    case KVT_MSG_SAVE_BEGIN:
        return OP_SAVE_BEGIN;
    case KVT_MSG_SAVE_DATA:
        return OP_SAVE;
    case KVT_MSG_LOAD:
        return OP_LOAD;
    case KVT_MSG_TALLY:
        return OP_TALLY;
    case KVT_MSG_ARENA:
        return OP_ARENA;
    case KVT_MSG_SAVE_RESERVE:
        return OP_RESERVE;
    case KVT_MSG_SAVE_COMMIT:
        return OP_COMMIT;
    case KVT_MSG_RELEASE:
        return OP_RELEASE;
    default:
        return OP_COUNT;
    }
}

static void recv_cb(void *arg, zmq_msg_t *parts, size_t nparts, bool truncated)
{
    server_t *sv = arg;
    zmq_msg_t *rid = &parts[0];
    uint64_t t0 = uv_hrtime(), now = uv_now(sv->loop);
    kvt_msg_t req;
    session_t *s;
    ns_t *ns;
    op_t op;
    int rc;

    sv->requests++;
    sv->deferred = false;
    for (size_t i = 1; i < nparts; i++) {
        sv->frames[i - 1].data = zmq_msg_data(&parts[i]);
        sv->frames[i - 1].len = zmq_msg_size(&parts[i]);
    }
    rc = kvt_msg_decode(sv->frames, nparts - 1, &sv->lim, &req);
    if (rc == 0 && truncated)
        rc = KVT_WIRE_ETOOBIG;
    if (rc != 0) {
        reply_error(sv, rid, &req.hdr, rc, "%s: %s%s", kvt_msg_type_name(req.hdr.type),
                    kvt_wire_strerror(rc), truncated ? " (too many frames)" : "");
        return;
    }
    op = op_of(req.hdr.type);
    if (op == OP_COUNT) {
        reply_error(sv, rid, &req.hdr, KVT_WIRE_EUNSUPP, "%s is not a request",
                    kvt_msg_type_name(req.hdr.type));
        return;
    }
    s = sessions_get(sv->sessions, zmq_msg_data(rid), zmq_msg_size(rid), now);
    if (s == NULL) {
        reply_error(sv, rid, &req.hdr, KVT_WIRE_EBUSY, "out of memory for sessions");
        return;
    }
    if (op == OP_HELLO) {
        do_hello(sv, rid, s, &req);
    } else if (op == OP_ARENA) {
        do_arena(sv, rid, &req);
    } else {
        ns = session_has(s, req.hdr.ns_id) ? ns_get(sv->nst, req.hdr.ns_id) : NULL;
        if (ns == NULL) {
            reply_error(sv, rid, &req.hdr, KVT_WIRE_ENONS,
                        "namespace %u was not declared by this client (send hello first)",
                        req.hdr.ns_id);
            return;
        }
        switch (op) {
        case OP_LOOKUP:
            do_lookup(sv, rid, ns, &req);
            break;
        case OP_SAVE_BEGIN:
            do_save_begin(sv, rid, ns, &req);
            break;
        case OP_SAVE:
            do_save(sv, rid, s, ns, &req);
            break;
        case OP_LOAD:
            do_load(sv, rid, s, ns, &req, t0);
            break;
        case OP_RESERVE:
            do_reserve(sv, rid, s, ns, &req);
            break;
        case OP_COMMIT:
            do_commit(sv, rid, s, ns, &req);
            break;
        case OP_RELEASE:
            do_release(sv, rid, s, ns, &req);
            break;
        default:
            do_tally(sv, rid, ns, &req);
            break;
        }
        if (op == OP_LOOKUP) {
            sv->ns_lookup_time[ns->id].sum_us += (uv_hrtime() - t0) / 1000;
            sv->ns_lookup_time[ns->id].count++;
        }
    }
    if (!sv->deferred)
        hist_record(&sv->op_hist[op], (uv_hrtime() - t0) / 1000);
}

/* --- lifecycle --- */

static void zc_release_cb(void *arg, void *obj)
{
    server_t *sv = arg;

    store_unpin(sv->store, obj);
}

/* Frees what server_new made (any part may be missing). The ZeroMQ socket and the timer are
 * closed already. */
static void server_free(server_t *sv)
{
    assert(sv->replies_deferred == 0); /* store_close completed every pending load */
    sessions_destroy(&sv->sessions);   /* reclaims holds: before the store goes */
    store_destroy(&sv->store);
    admission_destroy(&sv->admission);
    ns_table_destroy(&sv->nst);
    free(sv->rank_hits);
    free(sv->offs);
    free(sv->lens);
    free(sv->status);
    free(sv->frames);
    free(sv->out);
    free(sv);
}

int server_new(uv_loop_t *loop, void *zctx, const config_t *cfg, server_t **out)
{
    server_t *sv = calloc(1, sizeof *sv);
    size_t maxc = cfg->server.max_chunks_per_request;
    int rc = -ENOMEM;

    if (sv == NULL)
        return -ENOMEM;
    sv->loop = loop;
    sv->cfg = cfg;
    sv->start_ms = uv_now(loop);
    sv->lim.max_hashes = maxc;
    sv->lim.max_payload_bytes = cfg->ram.max_chunk_bytes;
    for (int i = 0; i < OP_COUNT; i++)
        hist_init(&sv->op_hist[i]);
    sv->out = calloc(maxc + 3, sizeof *sv->out);
    sv->frames = calloc(maxc + 2, sizeof *sv->frames);
    sv->status = calloc(maxc, 1);
    sv->rank_hits = calloc(KVT_WORLD_MAX, sizeof *sv->rank_hits);
    sv->offs = calloc(maxc, sizeof *sv->offs);
    sv->lens = calloc(maxc, sizeof *sv->lens);
    sv->nst = ns_table_new();
    sv->admission = admission_new();
    if (sv->out == NULL || sv->frames == NULL || sv->status == NULL || sv->rank_hits == NULL ||
        sv->offs == NULL || sv->lens == NULL || sv->nst == NULL || sv->admission == NULL)
        goto fail;
    rc = store_new(cfg, sv->nst, &sv->store);
    if (rc != 0) {
        log_error("ram_arena", "path=\"%s\" capacity_bytes=%" PRIu64 " error=\"%s\"",
                  cfg->ram.arena_path, cfg->ram.capacity_bytes, strerror(-rc));
        goto fail;
    }
    sv->sessions = sessions_new(cfg->server.max_clients, sv->store);
    if (sv->sessions == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = zsock_new(loop, zctx, cfg->server.endpoint, maxc + 3,
                   (int64_t)(cfg->ram.max_chunk_bytes + 65536), recv_cb, sv, &sv->zs);
    if (rc != 0) {
        log_error("bind", "endpoint=%s error=\"%s\"", cfg->server.endpoint, zmq_strerror(-rc));
        goto fail;
    }
    sv->zc = zcref_new(loop, zc_release_cb, sv);
    if (sv->zc == NULL) {
        rc = -ENOMEM;
        zsock_close(&sv->zs); /* its handles close when the caller runs the loop */
        goto fail;
    }
    /* After the bind: a daemon that cannot bind never touches the disk directory. Recovery runs
     * here, before the loop serves the first request. */
    if (store_attach_disk(sv->store, loop) != 0)
        log_error("disk", "dir=%s error=\"%s\" action=running_without_disk_tier", cfg->disk.dir,
                  strerror(-store_disk_error(sv->store)));
    uv_timer_init(loop, &sv->sweep);
    sv->sweep.data = sv;
    /* Holds expire within a quarter of their time after their deadline. */
    sv->sweep_ms = cfg->ram.shm_hold_ms / 4 < SWEEP_MS ? cfg->ram.shm_hold_ms / 4 : SWEEP_MS;
    uv_timer_start(&sv->sweep, sweep_cb, sv->sweep_ms, sv->sweep_ms);
    *out = sv;
    return 0;

fail:
    server_free(sv);
    return rc;
}

static void server_free_cb(uv_handle_t *h)
{
    server_free(h->data);
}

/* Shutdown waits for two things before the arena and the index go: every chunk lent to ZeroMQ
 * is back (zcref), and the disk tier drained (store_close: queued reads cancelled, running jobs
 * and the last flush finished; pending loads completed on the way, returning their loans). */
static void close_step(server_t *sv)
{
    if (--sv->close_waits == 0)
        uv_close((uv_handle_t *)&sv->sweep, server_free_cb);
}

static void zc_closed_cb(void *arg)
{
    close_step(arg);
}

static void store_closed_cb(void *arg)
{
    close_step(arg);
}

void server_close(server_t **psv)
{
    server_t *sv = *psv;

    if (sv == NULL)
        return;
    zsock_close(&sv->zs); /* linger 0: ZeroMQ drops unsent replies and returns their loans */
    sv->close_waits = 2;
    store_close(sv->store, store_closed_cb, sv);
    zcref_close(&sv->zc, zc_closed_cb, sv);
    *psv = NULL;
}

/* --- status --- */

static json_t *jint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *gates_json(const ns_t *ns, const server_t *sv)
{
    const gates_cfg_t *c = gates_cfg(ns->gates);
    const ns_timing_t *lt = &sv->ns_lookup_time[ns->id];
    gates_state_t st;
    json_t *adm, *skip, *reasons = json_object();

    gates_state(ns->gates, &st);
    for (int i = 0; i < st.nreasons; i++)
        json_object_set_new(reasons, st.reasons[i].name, jint(st.reasons[i].count));
    adm =
        json_pack("{s:b, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:I, s:I, s:f, s:I, s:o}", "enabled",
                  c->admission.enabled, "target", c->admission.target, "floor", c->admission.floor,
                  "alpha", c->admission.alpha, "warmup", (json_int_t)c->admission.warmup, "probes",
                  (json_int_t)st.probes, "payoff", st.payoff, "share", st.share, "saved",
                  (json_int_t)st.saved, "skipped", (json_int_t)st.skipped, "save_share",
                  st.save_share, "would_decline", (json_int_t)st.would_decline, "reasons", reasons);
    skip = json_pack("{s:b, s:I, s:I, s:f, s:b, s:I, s:I, s:I, s:f}", "enabled",
                     c->lookup_skip.enabled, "min_load_tokens",
                     (json_int_t)c->lookup_skip.min_load_tokens, "lookups", (json_int_t)st.lookups,
                     "act_ema", st.act_ema, "load_bearing", st.load_bearing, "skips",
                     (json_int_t)st.skips, "forced_probes", (json_int_t)st.forced_probes,
                     "would_skip", (json_int_t)st.would_skip, "mean_lookup_us",
                     lt->count ? (double)lt->sum_us / (double)lt->count : 0.0);
    return json_pack("{s:o, s:o}", "admission", adm, "lookup_skip", skip);
}

int server_status_json(server_t *sv, char **body, size_t *len)
{
    uint64_t now = uv_now(sv->loop);
    json_t *root = json_object(), *ram = json_object(), *ops = json_object();
    json_t *errs = json_object(), *nss = json_array(), *server, *disk;

    store_status_ram(sv->store, now, ram);
    json_object_set_new(ram, "reserved_bytes", jint(sessions_reserved_bytes(sv->sessions)));
    json_object_set_new(ram, "pinned_bytes", jint(sessions_pinned_bytes(sv->sessions)));
    disk = json_object();
    store_status_disk(sv->store, disk);
    for (int i = 0; i < ERR_COUNT; i++)
        json_object_set_new(errs, err_names[i], jint(sv->errors[i]));
    server =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "clients",
                  (json_int_t)sessions_count(sv->sessions), "requests", (json_int_t)sv->requests,
                  "bytes_received", (json_int_t)sv->bytes_received, "bytes_sent",
                  (json_int_t)sv->bytes_sent, "bytes_committed", (json_int_t)sv->bytes_committed,
                  "replies_dropped", (json_int_t)sv->replies_dropped, "save_ops_remembered",
                  (json_int_t)admission_remembered(sv->admission), "errors", errs, "sessions",
                  sessions_status(sv->sessions, now, STATUS_SESSIONS_MAX));
    for (int i = 0; i < OP_COUNT; i++) {
        const hist_t *h = &sv->op_hist[i];
        json_object_set_new(ops, op_names[i],
                            json_pack("{s:I, s:I, s:I, s:I}", "count", (json_int_t)hist_count(h),
                                      "p50_us", (json_int_t)hist_percentile(h, 50.0), "p99_us",
                                      (json_int_t)hist_percentile(h, 99.0), "max_us",
                                      (json_int_t)hist_max(h)));
    }
    for (uint32_t id = 1; id <= ns_count(sv->nst); id++) {
        const ns_t *ns = ns_get(sv->nst, id);
        char fp[17];
        snprintf(fp, sizeof fp, "%016" PRIx64, ns->fingerprint);
        json_array_append_new(nss, json_pack("{s:i, s:s, s:s, s:i, s:b, s:I, s:I, s:I, s:o}", "id",
                                             (int)ns->id, "model", ns->model, "fingerprint", fp,
                                             "world", (int)ns->world, "replicated", ns->replicated,
                                             "chunk_tokens", (json_int_t)ns->chunk_tokens, "chunks",
                                             (json_int_t)ns->chunks, "bytes", (json_int_t)ns->bytes,
                                             "gates", gates_json(ns, sv)));
    }
    json_object_set_new(root, "version", json_string(KVT_VERSION_STRING));
    json_object_set_new(root, "uptime_s", json_real((double)(now - sv->start_ms) / 1000.0));
    json_object_set_new(root, "pid", json_integer(getpid()));
    json_object_set_new(root, "endpoint", json_string(sv->cfg->server.endpoint));
    json_object_set_new(root, "ram", ram);
    json_object_set_new(root, "disk", disk);
    json_object_set_new(root, "server", server);
    json_object_set_new(root, "ops", ops);
    json_object_set_new(root, "namespaces", nss);
    /* 17 significant digits: every double (payoff, act_ema, ...) reads back exactly */
    *body = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (*body == NULL)
        return -ENOMEM;
    *len = strlen(*body);
    return 0;
}

/* Appends to a growing buffer; on allocation failure the document is dropped at the end. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool failed;
} textbuf_t;

static void tb_printf(textbuf_t *tb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void tb_printf(textbuf_t *tb, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (tb->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(tb->buf + tb->len, tb->cap - tb->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            tb->failed = true;
            return;
        }
        if ((size_t)n < tb->cap - tb->len) {
            tb->len += (size_t)n;
            return;
        }
        size_t ncap = (tb->cap + (size_t)n + 1) * 2;
        char *nb = realloc(tb->buf, ncap);
        if (nb == NULL) {
            tb->failed = true;
            return;
        }
        tb->buf = nb;
        tb->cap = ncap;
    }
}

int server_metrics_text(server_t *sv, char **body, size_t *len)
{
    textbuf_t tb = {0};
    json_t *ram = json_object();
    const char *key;
    json_t *v;

    tb.cap = 4096;
    tb.buf = malloc(tb.cap);
    if (tb.buf == NULL || ram == NULL) {
        free(tb.buf);
        json_decref(ram);
        return -ENOMEM;
    }
    tb.buf[0] = '\0';
    store_status_ram(sv->store, uv_now(sv->loop), ram);
    json_object_foreach(ram, key, v)
    {
        if (json_is_integer(v))
            tb_printf(&tb, "kvtier_ram_%s %" JSON_INTEGER_FORMAT "\n", key, json_integer_value(v));
    }
    json_decref(ram);
    tb_printf(&tb,
              "kvtier_clients %u\nkvtier_requests_total %" PRIu64
              "\nkvtier_bytes_received_total %" PRIu64 "\nkvtier_bytes_sent_total %" PRIu64 "\n",
              sessions_count(sv->sessions), sv->requests, sv->bytes_received, sv->bytes_sent);
    for (int i = 0; i < ERR_COUNT; i++)
        tb_printf(&tb, "kvtier_errors_total{class=\"%s\"} %" PRIu64 "\n", err_names[i],
                  sv->errors[i]);
    for (int i = 0; i < OP_COUNT; i++) {
        const hist_t *h = &sv->op_hist[i];
        tb_printf(&tb, "kvtier_op_total{op=\"%s\"} %" PRIu64 "\n", op_names[i], hist_count(h));
        tb_printf(&tb, "kvtier_op_latency_us{op=\"%s\",quantile=\"0.5\"} %" PRIu64 "\n",
                  op_names[i], hist_percentile(h, 50.0));
        tb_printf(&tb, "kvtier_op_latency_us{op=\"%s\",quantile=\"0.99\"} %" PRIu64 "\n",
                  op_names[i], hist_percentile(h, 99.0));
    }
    for (uint32_t id = 1; id <= ns_count(sv->nst); id++) {
        const ns_t *ns = ns_get(sv->nst, id);
        gates_state_t st;
        gates_state(ns->gates, &st);
        tb_printf(&tb, "kvtier_ns_chunks{ns=\"%s\",id=\"%u\"} %" PRIu64 "\n", ns->model, ns->id,
                  ns->chunks);
        tb_printf(&tb, "kvtier_ns_bytes{ns=\"%s\",id=\"%u\"} %" PRIu64 "\n", ns->model, ns->id,
                  ns->bytes);
        tb_printf(&tb, "kvtier_gate_payoff{ns=\"%s\",id=\"%u\"} %.6f\n", ns->model, ns->id,
                  st.payoff);
        tb_printf(&tb, "kvtier_gate_saves_skipped_total{ns=\"%s\",id=\"%u\"} %" PRIu64 "\n",
                  ns->model, ns->id, st.skipped);
        tb_printf(&tb, "kvtier_gate_lookups_skipped_total{ns=\"%s\",id=\"%u\"} %" PRIu64 "\n",
                  ns->model, ns->id, st.skips);
    }
    if (tb.failed) {
        free(tb.buf);
        return -ENOMEM;
    }
    *body = tb.buf;
    *len = tb.len;
    return 0;
}
