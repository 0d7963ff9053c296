/*
 * kvt_proto.c - encode and decode of kvtier protocol heads (see kvt_proto.h, PROTOCOL.md).
 *
 * Design: one table gives, per message type, its name and the size of frame 0 (the frame count
 * rule is in the decoder, per type);
 * encode and decode are straight-line field copies through explicit little-endian helpers, so
 * the code is independent of host byte order and alignment. Every length read from the wire is
 * checked against the frame it describes before it is used. No allocation, no I/O, no state.
 */
#include "kvt_proto.h"

#include <stdbool.h>
#include <string.h>

static uint16_t get_u16(const uint8_t *b)
{
    return (uint16_t)(b[0] | b[1] << 8);
}

static uint64_t get_u64(const uint8_t *b)
{
    return kvt_get_u64(b);
}

static void put_u16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static void put_u64(uint8_t *b, uint64_t v)
{
    kvt_put_u64(b, v);
}

static double get_f64(const uint8_t *b)
{
    uint64_t u = get_u64(b);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static void put_f64(uint8_t *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    put_u64(b, u);
}

/* Per message type: its name (for logs; NULL for a value that is no type) and the bytes of the
 * type-specific body that follows the common header in frame 0, in protocol 1 and protocol 2
 * (0 in the second column: the same as in protocol 1). */
static const struct {
    const char *name;
    int body;
    int body_v2;
} msg_types[KVT_MSG_ERROR + 1] = {
    [KVT_MSG_HELLO] = {.name = "hello", .body = 16, .body_v2 = 32},
    [KVT_MSG_HELLO_OK] = {.name = "hello_ok", .body = 24, .body_v2 = 48},
    [KVT_MSG_LOOKUP] = {.name = "lookup", .body = 24},
    [KVT_MSG_LOOKUP_OK] = {.name = "lookup_ok", .body = 8},
    [KVT_MSG_SAVE_BEGIN] = {.name = "save_begin", .body = 32},
    [KVT_MSG_SAVE_BEGIN_OK] = {.name = "save_begin_ok", .body = 0},
    [KVT_MSG_SAVE_DATA] = {.name = "save_data", .body = 32},
    [KVT_MSG_SAVE_OK] = {.name = "save_ok", .body = 0},
    [KVT_MSG_LOAD] = {.name = "load", .body = 8},
    [KVT_MSG_LOAD_OK] = {.name = "load_ok", .body = 8},
    [KVT_MSG_TALLY] = {.name = "tally", .body = 24, .body_v2 = 56},
    [KVT_MSG_TALLY_OK] = {.name = "tally_ok", .body = 48, .body_v2 = 96},
    [KVT_MSG_ARENA] = {.name = "arena", .body = 0},
    [KVT_MSG_ARENA_OK] = {.name = "arena_ok", .body = 16},
    [KVT_MSG_SAVE_RESERVE] = {.name = "save_reserve", .body = 32},
    [KVT_MSG_SAVE_RESERVE_OK] = {.name = "save_reserve_ok", .body = 8},
    [KVT_MSG_SAVE_COMMIT] = {.name = "save_commit", .body = 32},
    [KVT_MSG_RELEASE] = {.name = "release", .body = 8},
    [KVT_MSG_RELEASE_OK] = {.name = "release_ok", .body = 8},
    [KVT_MSG_ERROR] = {.name = "error", .body = 8},
};

static bool msg_type_known(int type)
{
    return type >= 0 && type <= KVT_MSG_ERROR && msg_types[type].name != NULL;
}

/* Bytes of the type-specific body that follows the common header in frame 0 in protocol v, or
 * -1. */
static int body_size(int type, int v)
{
    if (!msg_type_known(type))
        return -1;
    return v >= 2 && msg_types[type].body_v2 != 0 ? msg_types[type].body_v2 : msg_types[type].body;
}

static int version_of(int version)
{
    return version == 0 ? KVT_PROTO_VERSION : version;
}

static int version_known(int v)
{
    return v >= KVT_PROTO_VERSION_MIN && v <= KVT_PROTO_VERSION;
}

size_t kvt_head_size_v(int type, int version)
{
    int v = version_of(version), b;

    if (!version_known(v))
        return 0;
    b = body_size(type, v);
    return b < 0 ? 0 : (size_t)(KVT_HDR_BYTES + b);
}

size_t kvt_head_size(int type)
{
    return kvt_head_size_v(type, KVT_PROTO_VERSION);
}

size_t kvt_head_encode(void *buf, size_t cap, const kvt_msg_t *m)
{
    int v = version_of(m->hdr.version);
    size_t n = kvt_head_size_v(m->hdr.type, v);
    uint8_t *b = buf;

    if (n == 0 || cap < n)
        return 0;
    memset(b, 0, n);
    kvt_put_u32(b, KVT_PROTO_MAGIC);
    b[4] = (uint8_t)v;
    b[5] = m->hdr.type;
    put_u16(b + 6, m->hdr.flags);
    put_u64(b + 8, m->hdr.req_id);
    kvt_put_u32(b + 16, m->hdr.ns_id);
    if (v >= 2)
        kvt_put_u32(b + 20, m->hdr.gen);
    b += KVT_HDR_BYTES;

    switch (m->hdr.type) {
    case KVT_MSG_HELLO:
        put_u64(b, m->u.hello.layout_fp);
        kvt_put_u32(b + 8, m->u.hello.chunk_tokens);
        put_u16(b + 12, m->u.hello.rank);
        put_u16(b + 14, m->u.hello.world);
        if (v >= 2)
            put_u64(b + 16, m->u.hello.features);
        break;
    case KVT_MSG_HELLO_OK:
        kvt_put_u32(b, m->u.hello_ok.ns_id);
        kvt_put_u32(b + 4, m->u.hello_ok.lease_ms);
        put_u64(b + 8, m->u.hello_ok.max_chunk_bytes);
        kvt_put_u32(b + 16, m->u.hello_ok.max_chunks);
        kvt_put_u32(b + 20, m->u.hello_ok.daemon_version);
        if (v >= 2) {
            put_u64(b + 24, m->u.hello_ok.features);
            kvt_put_u32(b + 32, m->u.hello_ok.max_in_flight);
            kvt_put_u32(b + 36, m->u.hello_ok.arena_gen);
        }
        break;
    case KVT_MSG_LOOKUP:
        put_u16(b, m->u.lookup.rank);
        put_u64(b + 8, m->u.lookup.prompt_tokens);
        put_u64(b + 16, m->u.lookup.hbm_tokens);
        break;
    case KVT_MSG_LOOKUP_OK:
        kvt_put_u32(b, m->u.lookup_ok.hit);
        kvt_put_u32(b + 4, m->u.lookup_ok.lease_ms);
        break;
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
        put_u16(b, m->u.save.rank);
        put_u64(b + 8, m->u.save.op_id);
        memcpy(b + 16, m->u.save.parent.b, KVT_HASH_BYTES);
        break;
    case KVT_MSG_ARENA_OK:
        put_u64(b, m->u.arena_ok.arena_bytes);
        kvt_put_u32(b + 8, m->u.arena_ok.hold_ms);
        if (v >= 2)
            kvt_put_u32(b + 12, m->u.arena_ok.arena_gen);
        break;
    case KVT_MSG_SAVE_RESERVE_OK:
    case KVT_MSG_LOAD_OK:
        kvt_put_u32(b, m->u.chunks_ok.hold_ms);
        break;
    case KVT_MSG_RELEASE:
        put_u16(b, m->u.release.rank);
        break;
    case KVT_MSG_RELEASE_OK:
        kvt_put_u32(b, m->u.release_ok.released);
        break;
    case KVT_MSG_LOAD:
        put_u16(b, m->u.load.rank);
        break;
    case KVT_MSG_TALLY:
        put_u64(b, m->u.tally.engine_id);
        put_u64(b + 8, m->u.tally.paid_total);
        put_u64(b + 16, m->u.tally.probes_total);
        if (v >= 2) {
            put_u64(b + 24, m->u.tally.served_tokens_total);
            put_u64(b + 32, m->u.tally.lookup_tokens_total);
        }
        break;
    case KVT_MSG_TALLY_OK:
        put_f64(b, m->u.tally_ok.payoff);
        put_f64(b + 8, m->u.tally_ok.share);
        put_f64(b + 16, m->u.tally_ok.act_ema);
        put_u64(b + 24, m->u.tally_ok.probes);
        put_u64(b + 32, m->u.tally_ok.lookups);
        put_u16(b + 40, m->u.tally_ok.gate_flags);
        if (v >= 2) {
            b[48] = m->u.tally_ok.policy;
            put_f64(b + 56, m->u.tally_ok.density);
            put_u64(b + 64, m->u.tally_ok.served_tokens);
            put_u64(b + 72, m->u.tally_ok.regret_tokens);
            put_u64(b + 80, m->u.tally_ok.written_tokens);
            put_u64(b + 88, m->u.tally_ok.declined_tokens);
        }
        break;
    case KVT_MSG_ERROR:
        kvt_put_u32(b, (uint32_t)m->u.error.code);
        break;
    default:
        break;
    }
    return n;
}

/* A hash-list frame: a non-zero multiple of 16 bytes holding at most lim->max_hashes. */
static int decode_hashes(const kvt_frame_t *f, const kvt_limits_t *lim, const kvt_wire_hash_t **out,
                         size_t *n)
{
    if (f->len == 0 || f->len % KVT_HASH_BYTES != 0)
        return KVT_WIRE_EPROTO;
    if (f->len / KVT_HASH_BYTES > lim->max_hashes)
        return KVT_WIRE_ETOOBIG;
    *out = f->data;
    *n = f->len / KVT_HASH_BYTES;
    return 0;
}

/* Chunk-status frames: non-empty, at most max_hashes bytes, every byte a known status. */
static int decode_status(const kvt_frame_t *f, const kvt_limits_t *lim, kvt_chunks_ok_t *out)
{
    const uint8_t *s = f->data;

    if (f->len == 0)
        return KVT_WIRE_EPROTO;
    if (f->len > lim->max_hashes)
        return KVT_WIRE_ETOOBIG;
    for (size_t i = 0; i < f->len; i++)
        if (s[i] > KVT_CHUNK_MISS)
            return KVT_WIRE_EPROTO;
    out->status = s;
    out->n = f->len;
    out->payloads = NULL;
    return 0;
}

static int check_payloads(const kvt_frame_t *p, size_t n, const kvt_limits_t *lim)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].len > lim->max_payload_bytes)
            return KVT_WIRE_ETOOBIG;
    return 0;
}

int kvt_msg_decode(const kvt_frame_t *frames, size_t nframes, const kvt_limits_t *lim,
                   kvt_msg_t *out)
{
    const uint8_t *b;
    size_t want;
    int rc, v;

    memset(out, 0, sizeof *out);
    if (nframes == 0 || frames[0].len < KVT_HDR_BYTES)
        return KVT_WIRE_EPROTO;
    b = frames[0].data;
    if (kvt_get_u32(b) != KVT_PROTO_MAGIC)
        return KVT_WIRE_EPROTO;
    out->hdr.version = b[4];
    out->hdr.type = b[5];
    out->hdr.flags = get_u16(b + 6);
    out->hdr.req_id = get_u64(b + 8);
    out->hdr.ns_id = kvt_get_u32(b + 16);
    if (!version_known(b[4]))
        return KVT_WIRE_EVERSION;
    v = b[4];
    if (v >= 2)
        out->hdr.gen = kvt_get_u32(b + 20);
    want = kvt_head_size_v(out->hdr.type, v);
    if (want == 0)
        return KVT_WIRE_EUNSUPP;
    if (frames[0].len != want)
        return KVT_WIRE_EPROTO;
    b += KVT_HDR_BYTES;

    switch (out->hdr.type) {
    case KVT_MSG_HELLO: {
        kvt_hello_t *h = &out->u.hello;
        if (nframes != (v >= 2 ? 3u : 2u))
            return KVT_WIRE_EPROTO;
        h->layout_fp = get_u64(b);
        h->chunk_tokens = kvt_get_u32(b + 8);
        h->rank = get_u16(b + 12);
        h->world = get_u16(b + 14);
        h->model = frames[1].data;
        h->model_len = frames[1].len;
        if (h->model_len == 0 || h->model_len > KVT_MODEL_MAX)
            return KVT_WIRE_EPROTO;
        if (memchr(h->model, '\0', h->model_len) != NULL)
            return KVT_WIRE_EPROTO;
        if (v < 2)
            return 0;
        h->features = get_u64(b + 16);
        h->revision = frames[2].data;
        h->revision_len = frames[2].len;
        if (h->revision_len > KVT_REVISION_MAX)
            return KVT_WIRE_EPROTO;
        /* An empty revision may come as {NULL, 0}: memchr must not see NULL. */
        if (h->revision_len > 0 && memchr(h->revision, '\0', h->revision_len) != NULL)
            return KVT_WIRE_EPROTO;
        return 0;
    }
    case KVT_MSG_HELLO_OK:
        if (nframes != 1)
            return KVT_WIRE_EPROTO;
        out->u.hello_ok.ns_id = kvt_get_u32(b);
        out->u.hello_ok.lease_ms = kvt_get_u32(b + 4);
        out->u.hello_ok.max_chunk_bytes = get_u64(b + 8);
        out->u.hello_ok.max_chunks = kvt_get_u32(b + 16);
        out->u.hello_ok.daemon_version = kvt_get_u32(b + 20);
        if (v >= 2) {
            out->u.hello_ok.features = get_u64(b + 24);
            out->u.hello_ok.max_in_flight = kvt_get_u32(b + 32);
            out->u.hello_ok.arena_gen = kvt_get_u32(b + 36);
        }
        return 0;
    case KVT_MSG_LOOKUP:
        if (nframes != 2)
            return KVT_WIRE_EPROTO;
        out->u.lookup.rank = get_u16(b);
        out->u.lookup.prompt_tokens = get_u64(b + 8);
        out->u.lookup.hbm_tokens = get_u64(b + 16);
        return decode_hashes(&frames[1], lim, &out->u.lookup.hashes, &out->u.lookup.nhashes);
    case KVT_MSG_LOOKUP_OK:
        if (nframes != 2 || frames[1].len % 4 != 0 || frames[1].len / 4 > KVT_WORLD_MAX)
            return KVT_WIRE_EPROTO;
        out->u.lookup_ok.hit = kvt_get_u32(b);
        out->u.lookup_ok.lease_ms = kvt_get_u32(b + 4);
        out->u.lookup_ok.rank_hits = frames[1].data;
        out->u.lookup_ok.nranks = frames[1].len / 4;
        return 0;
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT: {
        kvt_save_t *s = &out->u.save;
        if (nframes < 2)
            return KVT_WIRE_EPROTO;
        s->rank = get_u16(b);
        s->op_id = get_u64(b + 8);
        memcpy(s->parent.b, b + 16, KVT_HASH_BYTES);
        rc = decode_hashes(&frames[1], lim, &s->hashes, &s->nhashes);
        if (rc != 0)
            return rc;
        switch (out->hdr.type) {
        case KVT_MSG_SAVE_BEGIN:
            return nframes == 2 ? 0 : KVT_WIRE_EPROTO;
        case KVT_MSG_SAVE_RESERVE:
            if (nframes != 3 || frames[2].len != s->nhashes * 8)
                return KVT_WIRE_EPROTO;
            s->lengths = frames[2].data;
            for (size_t i = 0; i < s->nhashes; i++) {
                uint64_t len = get_u64(s->lengths + 8 * i);
                if (len == 0)
                    return KVT_WIRE_EPROTO;
                if (len > lim->max_payload_bytes)
                    return KVT_WIRE_ETOOBIG;
            }
            return 0;
        case KVT_MSG_SAVE_COMMIT:
            if ((nframes != 3 && (nframes != 4 || out->hdr.version < 2)) ||
                frames[2].len != s->nhashes * KVT_LOC_BYTES)
                return KVT_WIRE_EPROTO;
            s->locs = frames[2].data;
            if (nframes == 4) {
                if (frames[3].len != s->nhashes * 8)
                    return KVT_WIRE_EPROTO;
                s->csums = frames[3].data;
            }
            return 0;
        default:
            break;
        }
        if (nframes != 2 + s->nhashes)
            return KVT_WIRE_EPROTO;
        s->payloads = &frames[2];
        return check_payloads(s->payloads, s->nhashes, lim);
    }
    case KVT_MSG_SAVE_BEGIN_OK:
    case KVT_MSG_SAVE_OK:
        if (nframes != 2)
            return KVT_WIRE_EPROTO;
        return decode_status(&frames[1], lim, &out->u.chunks_ok);
    case KVT_MSG_SAVE_RESERVE_OK:
        if (nframes != 3)
            return KVT_WIRE_EPROTO;
        rc = decode_status(&frames[1], lim, &out->u.chunks_ok);
        if (rc != 0)
            return rc;
        if (frames[2].len != out->u.chunks_ok.n * KVT_LOC_BYTES)
            return KVT_WIRE_EPROTO;
        out->u.chunks_ok.locs = frames[2].data;
        out->u.chunks_ok.hold_ms = kvt_get_u32(b);
        return 0;
    case KVT_MSG_LOAD_OK: {
        kvt_chunks_ok_t *c = &out->u.chunks_ok;
        size_t first; /* frame of the first payload (non-shm form) */
        if (nframes < 2)
            return KVT_WIRE_EPROTO;
        rc = decode_status(&frames[1], lim, c);
        if (rc != 0)
            return rc;
        c->hold_ms = kvt_get_u32(b);
        if (out->hdr.flags & KVT_LOADR_SHM) {
            if (nframes != (v >= 2 ? 4u : 3u) || frames[2].len != c->n * KVT_LOC_BYTES)
                return KVT_WIRE_EPROTO;
            c->locs = frames[2].data;
            if (v >= 2) {
                if (frames[3].len != c->n * KVT_CSUM_BYTES)
                    return KVT_WIRE_EPROTO;
                c->checksums = frames[3].data;
            }
            return 0;
        }
        first = 2;
        if (v >= 2) {
            if (nframes < 3 || frames[2].len != c->n * KVT_CSUM_BYTES)
                return KVT_WIRE_EPROTO;
            c->checksums = frames[2].data;
            first = 3;
        }
        if (nframes != first + c->n)
            return KVT_WIRE_EPROTO;
        c->payloads = &frames[first];
        for (size_t i = 0; i < out->u.chunks_ok.n; i++) {
            int hit = out->u.chunks_ok.status[i] == KVT_CHUNK_HIT;
            if (!hit && out->u.chunks_ok.payloads[i].len != 0)
                return KVT_WIRE_EPROTO;
        }
        return check_payloads(out->u.chunks_ok.payloads, out->u.chunks_ok.n, lim);
    }
    case KVT_MSG_LOAD:
        if (nframes != 2)
            return KVT_WIRE_EPROTO;
        out->u.load.rank = get_u16(b);
        return decode_hashes(&frames[1], lim, &out->u.load.hashes, &out->u.load.nhashes);
    case KVT_MSG_ARENA:
        return nframes == 1 ? 0 : KVT_WIRE_EPROTO;
    case KVT_MSG_ARENA_OK:
        if (nframes != 2 || frames[1].len > KVT_PATH_MAX)
            return KVT_WIRE_EPROTO;
        out->u.arena_ok.arena_bytes = get_u64(b);
        out->u.arena_ok.hold_ms = kvt_get_u32(b + 8);
        if (v >= 2)
            out->u.arena_ok.arena_gen = kvt_get_u32(b + 12);
        out->u.arena_ok.path = frames[1].data;
        out->u.arena_ok.path_len = frames[1].len;
        /* An empty path may come as {NULL, 0}: memchr must not see NULL, even for 0 bytes. */
        if (frames[1].len > 0 && memchr(frames[1].data, '\0', frames[1].len) != NULL)
            return KVT_WIRE_EPROTO;
        return 0;
    case KVT_MSG_RELEASE:
        if (nframes != 2)
            return KVT_WIRE_EPROTO;
        out->u.release.rank = get_u16(b);
        return decode_hashes(&frames[1], lim, &out->u.release.hashes, &out->u.release.nhashes);
    case KVT_MSG_RELEASE_OK:
        if (nframes != 1)
            return KVT_WIRE_EPROTO;
        out->u.release_ok.released = kvt_get_u32(b);
        return 0;
    case KVT_MSG_TALLY: {
        size_t off = 0;
        const char *name;
        size_t nl;
        uint64_t cnt;
        int nreasons = 0;
        if (nframes != 2)
            return KVT_WIRE_EPROTO;
        out->u.tally.engine_id = get_u64(b);
        out->u.tally.paid_total = get_u64(b + 8);
        out->u.tally.probes_total = get_u64(b + 16);
        if (v >= 2) {
            out->u.tally.served_tokens_total = get_u64(b + 24);
            out->u.tally.lookup_tokens_total = get_u64(b + 32);
        }
        out->u.tally.reasons = frames[1].data;
        out->u.tally.reasons_len = frames[1].len;
        while ((rc = kvt_reason_next(frames[1].data, frames[1].len, &off, &name, &nl, &cnt)) > 0)
            if (++nreasons > KVT_REASON_MAX)
                return KVT_WIRE_ETOOBIG;
        return rc;
    }
    case KVT_MSG_TALLY_OK:
        if (nframes != 1)
            return KVT_WIRE_EPROTO;
        out->u.tally_ok.payoff = get_f64(b);
        out->u.tally_ok.share = get_f64(b + 8);
        out->u.tally_ok.act_ema = get_f64(b + 16);
        out->u.tally_ok.probes = get_u64(b + 24);
        out->u.tally_ok.lookups = get_u64(b + 32);
        out->u.tally_ok.gate_flags = get_u16(b + 40);
        if (v >= 2) {
            out->u.tally_ok.policy = b[48];
            out->u.tally_ok.density = get_f64(b + 56);
            out->u.tally_ok.served_tokens = get_u64(b + 64);
            out->u.tally_ok.regret_tokens = get_u64(b + 72);
            out->u.tally_ok.written_tokens = get_u64(b + 80);
            out->u.tally_ok.declined_tokens = get_u64(b + 88);
        }
        return 0;
    case KVT_MSG_ERROR:
        if (nframes != 2 || frames[1].len > KVT_ERRTEXT_MAX)
            return KVT_WIRE_EPROTO;
        out->u.error.code = (int32_t)kvt_get_u32(b);
        out->u.error.text = frames[1].data;
        out->u.error.text_len = frames[1].len;
        return 0;
    default:
        return KVT_WIRE_EUNSUPP;
    }
}

_Static_assert(KVT_HDR_BYTES == 24, "kvt_decode_why names the common head's size");

/* kvt_decode_why of the requests with a hash list in frame 1 (0.2.14): their frames' count and
 * sizes, as kvt_msg_decode checks them; "" for the other types and what it does not name. */
static const char *decode_why_request(const kvt_frame_t *frames, size_t nframes, int type, int v)
{
    size_t n;

    switch (type) {
    case KVT_MSG_LOOKUP:
    case KVT_MSG_LOAD:
        if (nframes != 2)
            return "wrong frame count: head, hashes";
        break;
    case KVT_MSG_SAVE_BEGIN:
        if (nframes != 2)
            return "wrong frame count: head, hashes";
        break;
    case KVT_MSG_SAVE_RESERVE:
        if (nframes != 3)
            return "wrong frame count: head, hashes, lengths";
        break;
    case KVT_MSG_SAVE_COMMIT:
        if (nframes != 3 && (nframes != 4 || v < 2))
            return v >= 2 ? "wrong frame count: head, hashes, locations[, checksums]"
                          : "wrong frame count: head, hashes, locations";
        break;
    case KVT_MSG_SAVE_DATA:
        if (nframes < 2)
            return "wrong frame count: head, hashes, one payload per hash";
        break;
    default:
        return "";
    }
    if (frames[1].len == 0)
        return "an empty hash list (frame 1)";
    if (frames[1].len % KVT_HASH_BYTES != 0)
        return "the hash list (frame 1) is not a whole number of 16-byte hashes";
    n = frames[1].len / KVT_HASH_BYTES;
    switch (type) {
    case KVT_MSG_SAVE_RESERVE:
        if (frames[2].len != n * 8)
            return "the lengths (frame 2) are not 8 bytes per hash";
        for (size_t i = 0; i < n; i++)
            if (get_u64((const uint8_t *)frames[2].data + 8 * i) == 0)
                return "a length of 0";
        break;
    case KVT_MSG_SAVE_COMMIT:
        if (frames[2].len != n * KVT_LOC_BYTES)
            return "the locations (frame 2) are not 16 bytes per hash";
        if (nframes == 4 && frames[3].len != n * 8)
            return "the checksums (frame 3) are not 8 bytes per hash";
        break;
    case KVT_MSG_SAVE_DATA:
        if (nframes != 2 + n)
            return "not one payload frame per hash";
        break;
    default:
        break;
    }
    return "";
}

const char *kvt_decode_why(const kvt_frame_t *frames, size_t nframes)
{
    const uint8_t *b;
    int v;

    if (nframes == 0 || frames[0].len < KVT_HDR_BYTES)
        return "a head shorter than 24 bytes"; /* KVT_HDR_BYTES */
    b = frames[0].data;
    if (kvt_get_u32(b) != KVT_PROTO_MAGIC)
        return "not the kvtier magic";
    v = b[4];
    if (!version_known(b[4]) || kvt_head_size_v(b[5], v) == 0)
        return "";
    if (frames[0].len != kvt_head_size_v(b[5], v))
        return "the head's size is not its type's";
    if (b[5] != KVT_MSG_HELLO)
        return decode_why_request(frames, nframes, b[5], v);
    if (nframes != (v >= 2 ? 3u : 2u))
        return v >= 2 ? "a protocol 2 hello has 3 frames: head, model, revision"
                      : "a protocol 1 hello has 2 frames: head, model";
    if (frames[1].len == 0)
        return "empty model name";
    if (frames[1].len > KVT_MODEL_MAX)
        return "model name longer than 255 bytes";
    if (memchr(frames[1].data, '\0', frames[1].len) != NULL)
        return "model name holds a NUL byte";
    if (v >= 2 && frames[2].len > KVT_REVISION_MAX)
        return "revision longer than 255 bytes";
    if (v >= 2 && frames[2].len > 0 && memchr(frames[2].data, '\0', frames[2].len) != NULL)
        return "revision holds a NUL byte";
    return "";
}

size_t kvt_reason_encode(void *buf, size_t cap, const char *name, size_t name_len, uint64_t count)
{
    uint8_t *b = buf;
    size_t n = 1 + name_len + 8;

    if (name_len == 0 || name_len > KVT_REASON_NAME_MAX || cap < n)
        return 0;
    b[0] = (uint8_t)name_len;
    memcpy(b + 1, name, name_len);
    put_u64(b + 1 + name_len, count);
    return n;
}

int kvt_reason_next(const uint8_t *buf, size_t len, size_t *off, const char **name,
                    size_t *name_len, uint64_t *count)
{
    size_t o = *off, nl;

    if (o >= len)
        return 0;
    nl = buf[o];
    if (nl == 0 || nl > KVT_REASON_NAME_MAX || len - o < 1 + nl + 8)
        return KVT_WIRE_EPROTO;
    if (memchr(buf + o + 1, '\0', nl) != NULL)
        return KVT_WIRE_EPROTO;
    *name = (const char *)buf + o + 1;
    *name_len = nl;
    *count = get_u64(buf + o + 1 + nl);
    *off = o + 1 + nl + 8;
    return 1;
}

const char *kvt_msg_type_name(int type)
{
    return msg_type_known(type) ? msg_types[type].name : "unknown";
}

const char *kvt_chunk_status_name(int status)
{
    static const char *const names[] = {
        [KVT_CHUNK_WANTED] = "wanted",     [KVT_CHUNK_STORED] = "stored",
        [KVT_CHUNK_EXISTS] = "exists",     [KVT_CHUNK_NOSPACE] = "nospace",
        [KVT_CHUNK_DECLINED] = "declined", [KVT_CHUNK_SKIPPED] = "skipped",
        [KVT_CHUNK_HIT] = "hit",           [KVT_CHUNK_MISS] = "miss",
    };

    return status >= 0 && (size_t)status < sizeof names / sizeof names[0] ? names[status]
                                                                          : "unknown";
}

const char *kvt_wire_strerror(int code)
{
    /* indexed by -code */
    static const char *const texts[] = {
        [-KVT_WIRE_OK] = "ok",
        [-KVT_WIRE_EPROTO] = "malformed message",
        [-KVT_WIRE_EVERSION] = "unsupported protocol version",
        [-KVT_WIRE_ENONS] = "namespace not declared by this client",
        [-KVT_WIRE_ETOOBIG] = "payload or list exceeds the daemon's limits",
        [-KVT_WIRE_EINVAL] = "invalid argument",
        [-KVT_WIRE_ECONFLICT] = "namespace declared with a different layout",
        [-KVT_WIRE_EBUSY] = "daemon busy or shutting down",
        [-KVT_WIRE_EUNSUPP] = "unknown message type",
        [-KVT_WIRE_ESTALE] = "shared-memory request of another arena generation",
    };

    return code <= 0 && code > -(int)(sizeof texts / sizeof texts[0]) ? texts[-code]
                                                                      : "unknown error";
}
