/*
 * test_proto.c - unit tests of the pure wire protocol module proto/kvt_proto.c against
 * kvt_proto.h and proto/PROTOCOL.md.
 *
 * Design: sample_make() builds one valid message of every type in two variants (variant 0:
 * distinct byte patterns in every field, so a swapped or misplaced field shows; variant 1: every
 * integer at its maximum, every list at its limit, NaN/inf doubles). Round trips decode the
 * sample, compare every field and view with what was encoded, and re-encode the decoded message
 * byte for byte. The layout test reads the encoded head at the PROTOCOL.md offsets with readers
 * written here, so a bug shared by encoder and decoder cannot hide behind a round trip. The
 * malformed-input tests start from a valid sample and break exactly one thing, then assert the
 * exact error code (and that the common header was still decoded where the contract says so).
 *
 * Heads are placed at an odd address on purpose: UBSan flags any unaligned wide load.
 * Buffers whose bounds matter (encode with a small cap) are malloc'd at the exact size so that
 * ASan catches a write past them.
 */
#include "check_main.h"

#include <limits.h>
#include <math.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_proto.h"

#define LIM_HASHES 8
#define LIM_PAYLOAD 64
#define MAX_FRAMES (LIM_HASHES + 8)
#define REC_MAX (1 + KVT_REASON_NAME_MAX + 8)

static const kvt_limits_t lim = {LIM_HASHES, LIM_PAYLOAD};

static const int all_types[] = {
    KVT_MSG_HELLO,       KVT_MSG_HELLO_OK,      KVT_MSG_LOOKUP,       KVT_MSG_LOOKUP_OK,
    KVT_MSG_SAVE_BEGIN,  KVT_MSG_SAVE_BEGIN_OK, KVT_MSG_SAVE_DATA,    KVT_MSG_SAVE_OK,
    KVT_MSG_LOAD,        KVT_MSG_LOAD_OK,       KVT_MSG_TALLY,        KVT_MSG_TALLY_OK,
    KVT_MSG_ARENA,       KVT_MSG_ARENA_OK,      KVT_MSG_SAVE_RESERVE, KVT_MSG_SAVE_RESERVE_OK,
    KVT_MSG_SAVE_COMMIT, KVT_MSG_RELEASE,       KVT_MSG_RELEASE_OK,   KVT_MSG_ERROR,
};
#define NTYPES ((int)(sizeof all_types / sizeof all_types[0]))

/* Head sizes from PROTOCOL.md: 24 + body. */
static size_t expected_head_size(int type)
{
    switch (type) {
    case KVT_MSG_HELLO:
        return 24 + 16;
    case KVT_MSG_HELLO_OK:
        return 24 + 24;
    case KVT_MSG_LOOKUP:
        return 24 + 24;
    case KVT_MSG_LOOKUP_OK:
        return 24 + 8;
    case KVT_MSG_SAVE_BEGIN:
        return 24 + 32;
    case KVT_MSG_SAVE_BEGIN_OK:
        return 24;
    case KVT_MSG_SAVE_DATA:
        return 24 + 32;
    case KVT_MSG_SAVE_OK:
        return 24;
    case KVT_MSG_LOAD:
        return 24 + 8;
    case KVT_MSG_LOAD_OK:
        return 24 + 8;
    case KVT_MSG_ARENA:
        return 24;
    case KVT_MSG_ARENA_OK:
        return 24 + 16;
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
        return 24 + 32;
    case KVT_MSG_SAVE_RESERVE_OK:
    case KVT_MSG_RELEASE:
    case KVT_MSG_RELEASE_OK:
        return 24 + 8;
    case KVT_MSG_TALLY:
        return 24 + 24;
    case KVT_MSG_TALLY_OK:
        return 24 + 48;
    case KVT_MSG_ERROR:
        return 24 + 8;
    default:
        return 0;
    }
}

/*
 * Reserved byte ranges of frame 0 (absolute offsets) per PROTOCOL.md, besides 20..23.
 * SAVE_BEGIN_OK and SAVE_OK carry an 8-byte body that PROTOCOL.md does not describe; the module
 * encodes it as zeros and never reads it, so it is treated as reserved.
 */
static void reserved_range(int type, size_t *from, size_t *to)
{
    *from = *to = 0;
    switch (type) {
    case KVT_MSG_LOOKUP:
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
    case KVT_MSG_LOAD:
    case KVT_MSG_RELEASE:
        *from = 24 + 2;
        *to = 24 + 8;
        break;
    case KVT_MSG_LOAD_OK:
    case KVT_MSG_SAVE_RESERVE_OK:
    case KVT_MSG_RELEASE_OK:
        *from = 24 + 4;
        *to = 24 + 8;
        break;
    case KVT_MSG_ARENA_OK:
        *from = 24 + 12;
        *to = 24 + 16;
        break;
    case KVT_MSG_TALLY_OK:
        *from = 24 + 42;
        *to = 24 + 48;
        break;
    case KVT_MSG_ERROR:
        *from = 24 + 4;
        *to = 24 + 8;
        break;
    default:
        break;
    }
}

/* Little-endian readers written independently of the module's own helpers. */
static uint64_t le(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* One hand-built reason record; returns its size. */
static size_t put_reason(uint8_t *p, const char *name, size_t nl, uint64_t count)
{
    p[0] = (uint8_t)nl;
    memcpy(p + 1, name, nl);
    put_le(p + 1 + nl, count, 8);
    return 1 + nl + 8;
}

/* A message: what was encoded (m), its head at an odd address, its frames and their bytes. */
typedef struct {
    kvt_msg_t m;
    uint8_t buf[1 + 128 + 1];
    uint8_t *head;
    size_t head_len;
    kvt_frame_t f[MAX_FRAMES];
    size_t n;
    uint8_t hashes[(LIM_HASHES + 1) * KVT_HASH_BYTES];
    uint8_t status[LIM_HASHES + 1];
    uint8_t ranks[4 * (KVT_WORLD_MAX + 1)];
    uint8_t reasons[(KVT_REASON_MAX + 1) * REC_MAX];
    char text[KVT_MODEL_MAX + 2];
    uint8_t payload[LIM_HASHES + 1][LIM_PAYLOAD + 1];
    uint8_t lens8[(LIM_HASHES + 1) * 8];            /* SAVE_RESERVE lengths */
    uint8_t locs[(LIM_HASHES + 1) * KVT_LOC_BYTES]; /* arena locations */
    /* expected reasons of a TALLY sample */
    char rname[KVT_REASON_MAX][KVT_REASON_NAME_MAX];
    size_t rlen[KVT_REASON_MAX];
    uint64_t rcount[KVT_REASON_MAX];
    size_t nreasons;
    int variant;
} wire_t;

static void fill_hashes(wire_t *w, size_t n)
{
    for (size_t i = 0; i < n * KVT_HASH_BYTES; i++)
        w->hashes[i] = (uint8_t)(i * 37 + 11);
    w->f[1].data = w->hashes;
    w->f[1].len = n * KVT_HASH_BYTES;
}

static void fill_payloads(wire_t *w, size_t first_frame, const size_t *lens, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < lens[i]; j++)
            w->payload[i][j] = (uint8_t)(i * 29 + j);
        w->f[first_frame + i].data = w->payload[i];
        w->f[first_frame + i].len = lens[i];
    }
}

static void fill_text(wire_t *w, size_t n, const char *src)
{
    for (size_t i = 0; i < n; i++)
        w->text[i] = src[i % strlen(src)];
    w->f[1].data = w->text;
    w->f[1].len = n;
}

static void fill_status(wire_t *w, const uint8_t *st, size_t n)
{
    memcpy(w->status, st, n);
    w->f[1].data = w->status;
    w->f[1].len = n;
}

/* n arena locations in frame 2: distinct patterns, or all ones (variant 1). */
static void fill_locs(wire_t *w, size_t n, int mx)
{
    for (size_t i = 0; i < n; i++) {
        put_le(w->locs + KVT_LOC_BYTES * i, mx ? UINT64_MAX : 0x1000ull * (i + 1), 8);
        put_le(w->locs + KVT_LOC_BYTES * i + 8, mx ? UINT64_MAX : 100 + i, 8);
    }
    w->f[2].data = w->locs;
    w->f[2].len = n * KVT_LOC_BYTES;
    w->n = 3;
}

static void sample_make(int type, int variant, wire_t *w)
{
    kvt_msg_t *m = &w->m;
    const int mx = variant == 1;
    size_t lens[LIM_HASHES];

    memset(w, 0, sizeof *w);
    w->head = w->buf + 1;
    w->variant = variant;
    m->hdr.version = 1; /* this file pins protocol 1; test_proto_v2.c pins protocol 2 */
    m->hdr.type = (uint8_t)type;
    m->hdr.flags = mx ? 0xffffu : (uint16_t)(0x8100u | (unsigned)type);
    m->hdr.req_id = mx ? UINT64_MAX : 0x0123456789abcdefull + (uint64_t)type;
    m->hdr.ns_id = mx ? UINT32_MAX : 0x89abcdefu - (uint32_t)type;
    w->n = 2;

    switch (type) {
    case KVT_MSG_HELLO:
        if (!mx) {
            m->hdr.flags = KVT_HELLO_REPLICATED;
            m->hdr.ns_id = 0;
        }
        m->u.hello.layout_fp = mx ? UINT64_MAX : 0xfedcba9876543210ull;
        m->u.hello.chunk_tokens = mx ? UINT32_MAX : 0x00010203u;
        m->u.hello.rank = mx ? UINT16_MAX : 0x0302;
        m->u.hello.world = mx ? UINT16_MAX : KVT_WORLD_MAX;
        fill_text(w, mx ? KVT_MODEL_MAX : 24, "meta-llama/Llama-3.1-70B-Instruct");
        m->u.hello.model = w->text;
        m->u.hello.model_len = w->f[1].len;
        break;
    case KVT_MSG_HELLO_OK:
        w->n = 1;
        m->u.hello_ok.ns_id = mx ? UINT32_MAX : 0x11223344u;
        m->u.hello_ok.lease_ms = mx ? UINT32_MAX : 0x55667788u;
        m->u.hello_ok.max_chunk_bytes = mx ? UINT64_MAX : 0x99aabbccddeeff01ull;
        m->u.hello_ok.max_chunks = mx ? UINT32_MAX : 0x02030405u;
        m->u.hello_ok.daemon_version = mx ? UINT32_MAX : (1u << 16 | 2u << 8 | 3u);
        break;
    case KVT_MSG_LOOKUP:
        if (!mx)
            m->hdr.flags = KVT_LOOKUP_LEASE | KVT_LOOKUP_PROMPT;
        m->u.lookup.rank = mx ? KVT_RANK_ALL : 0x0506;
        m->u.lookup.prompt_tokens = mx ? UINT64_MAX : 0x0102030405060708ull;
        m->u.lookup.hbm_tokens = mx ? UINT64_MAX : 0x1112131415161718ull;
        fill_hashes(w, mx ? LIM_HASHES : 3);
        m->u.lookup.hashes = (const kvt_wire_hash_t *)w->hashes;
        m->u.lookup.nhashes = mx ? LIM_HASHES : 3;
        break;
    case KVT_MSG_LOOKUP_OK:
        if (!mx)
            m->hdr.flags = KVT_LOOKUPR_LEASED;
        m->u.lookup_ok.hit = mx ? UINT32_MAX : 0x21222324u;
        m->u.lookup_ok.lease_ms = mx ? UINT32_MAX : 0x31323334u;
        m->u.lookup_ok.nranks = mx ? KVT_WORLD_MAX : 3;
        for (size_t i = 0; i < m->u.lookup_ok.nranks; i++)
            put_le(w->ranks + 4 * i, mx ? UINT32_MAX - i : 0x40414243u + i, 4);
        m->u.lookup_ok.rank_hits = w->ranks;
        w->f[1].data = w->ranks;
        w->f[1].len = 4 * m->u.lookup_ok.nranks;
        break;
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
        if (!mx)
            m->hdr.flags = KVT_SAVE_PARENT | KVT_SAVE_OPID;
        m->u.save.rank = mx ? UINT16_MAX : 0x0708;
        m->u.save.op_id = mx ? UINT64_MAX : 0xa1a2a3a4a5a6a7a8ull;
        for (int i = 0; i < KVT_HASH_BYTES; i++)
            m->u.save.parent.b[i] = mx ? 0xff : (uint8_t)(0xc0 + i);
        fill_hashes(w, mx ? LIM_HASHES : 3);
        m->u.save.hashes = (const kvt_wire_hash_t *)w->hashes;
        m->u.save.nhashes = mx ? LIM_HASHES : 3;
        if (type == KVT_MSG_SAVE_DATA) {
            lens[0] = 5;
            lens[1] = 0;
            lens[2] = LIM_PAYLOAD;
            for (size_t i = 0; i < LIM_HASHES; i++)
                if (mx)
                    lens[i] = LIM_PAYLOAD;
            fill_payloads(w, 2, lens, m->u.save.nhashes);
            w->n = 2 + m->u.save.nhashes;
            m->u.save.payloads = &w->f[2];
        }
        if (type == KVT_MSG_SAVE_RESERVE) {
            for (size_t i = 0; i < m->u.save.nhashes; i++)
                put_le(w->lens8 + 8 * i, mx || i == 2 ? LIM_PAYLOAD : 1 + i, 8);
            w->f[2].data = w->lens8;
            w->f[2].len = 8 * m->u.save.nhashes;
            w->n = 3;
            m->u.save.lengths = w->lens8;
        }
        if (type == KVT_MSG_SAVE_COMMIT) {
            fill_locs(w, m->u.save.nhashes, mx);
            m->u.save.locs = w->locs;
        }
        break;
    case KVT_MSG_SAVE_RESERVE_OK: {
        static const uint8_t st[] = {KVT_CHUNK_WANTED, KVT_CHUNK_EXISTS, KVT_CHUNK_DECLINED,
                                     KVT_CHUNK_NOSPACE};
        static const uint8_t all[] = {0, 1, 2, 3, 4, 5, 6, 7};
        fill_status(w, mx ? all : st, mx ? sizeof all : sizeof st);
        fill_locs(w, w->f[1].len, mx);
        m->u.chunks_ok.status = w->status;
        m->u.chunks_ok.n = w->f[1].len;
        m->u.chunks_ok.locs = w->locs;
        m->u.chunks_ok.hold_ms = mx ? UINT32_MAX : 0x61626364u;
        break;
    }
    case KVT_MSG_ARENA:
        w->n = 1;
        break;
    case KVT_MSG_ARENA_OK:
        m->u.arena_ok.arena_bytes = mx ? UINT64_MAX : 0x7172737475767778ull;
        m->u.arena_ok.hold_ms = mx ? UINT32_MAX : 0x81828384u;
        fill_text(w, mx ? KVT_PATH_MAX : 22, "/dev/shm/kvtierd.arena");
        m->u.arena_ok.path = w->text;
        m->u.arena_ok.path_len = w->f[1].len;
        break;
    case KVT_MSG_RELEASE:
        m->u.release.rank = mx ? UINT16_MAX : 0x0b0c;
        fill_hashes(w, mx ? LIM_HASHES : 3);
        m->u.release.hashes = (const kvt_wire_hash_t *)w->hashes;
        m->u.release.nhashes = mx ? LIM_HASHES : 3;
        break;
    case KVT_MSG_RELEASE_OK:
        w->n = 1;
        m->u.release_ok.released = mx ? UINT32_MAX : 0x91929394u;
        break;
    case KVT_MSG_SAVE_BEGIN_OK: {
        static const uint8_t st[] = {KVT_CHUNK_WANTED, KVT_CHUNK_EXISTS, KVT_CHUNK_DECLINED};
        static const uint8_t all[] = {0, 1, 2, 3, 4, 5, 6, 7};
        fill_status(w, mx ? all : st, mx ? sizeof all : sizeof st);
        m->u.chunks_ok.status = w->status;
        m->u.chunks_ok.n = w->f[1].len;
        break;
    }
    case KVT_MSG_SAVE_OK: {
        static const uint8_t st[] = {KVT_CHUNK_STORED, KVT_CHUNK_EXISTS, KVT_CHUNK_NOSPACE,
                                     KVT_CHUNK_DECLINED, KVT_CHUNK_SKIPPED};
        static const uint8_t all[] = {7, 6, 5, 4, 3, 2, 1, 0};
        fill_status(w, mx ? all : st, mx ? sizeof all : sizeof st);
        m->u.chunks_ok.status = w->status;
        m->u.chunks_ok.n = w->f[1].len;
        break;
    }
    case KVT_MSG_LOAD:
        m->u.load.rank = mx ? UINT16_MAX : 0x090a;
        fill_hashes(w, mx ? LIM_HASHES : 3);
        m->u.load.hashes = (const kvt_wire_hash_t *)w->hashes;
        m->u.load.nhashes = mx ? LIM_HASHES : 3;
        break;
    case KVT_MSG_LOAD_OK: {
        /* variant 0: payload frames; variant 1: flags 0xffff include KVT_LOADR_SHM, so the
         * shared-memory form with one locations frame */
        static const uint8_t st[] = {KVT_CHUNK_HIT, KVT_CHUNK_MISS, KVT_CHUNK_HIT};
        uint8_t hits[LIM_HASHES];
        memset(hits, KVT_CHUNK_HIT, sizeof hits);
        hits[1] = KVT_CHUNK_MISS;
        fill_status(w, mx ? hits : st, mx ? LIM_HASHES : sizeof st);
        m->u.chunks_ok.status = w->status;
        m->u.chunks_ok.n = w->f[1].len;
        m->u.chunks_ok.hold_ms = mx ? UINT32_MAX : 0x51525354u;
        if (mx) {
            fill_locs(w, LIM_HASHES, 1);
            m->u.chunks_ok.locs = w->locs;
            break;
        }
        lens[0] = 10;
        lens[1] = 0;
        lens[2] = LIM_PAYLOAD;
        fill_payloads(w, 2, lens, w->f[1].len);
        w->n = 2 + w->f[1].len;
        m->u.chunks_ok.payloads = &w->f[2];
        break;
    }
    case KVT_MSG_TALLY: {
        static const char *names[] = {"paid", "not_reused", "evicted_before_reuse"};
        static const uint64_t counts[] = {41, 0, UINT64_MAX};
        size_t off = 0;
        m->u.tally.engine_id = mx ? UINT64_MAX : 0xb1b2b3b4b5b6b7b8ull;
        m->u.tally.paid_total = mx ? UINT64_MAX : 0xc1c2c3c4c5c6c7c8ull;
        m->u.tally.probes_total = mx ? UINT64_MAX : 0xd1d2d3d4d5d6d7d8ull;
        w->nreasons = mx ? KVT_REASON_MAX : 3;
        for (size_t i = 0; i < w->nreasons; i++) {
            if (mx) {
                memset(w->rname[i], 'A' + (int)i, KVT_REASON_NAME_MAX);
                w->rlen[i] = KVT_REASON_NAME_MAX;
                w->rcount[i] = UINT64_MAX - i;
            } else {
                w->rlen[i] = strlen(names[i]);
                memcpy(w->rname[i], names[i], w->rlen[i]);
                w->rcount[i] = counts[i];
            }
            off += put_reason(w->reasons + off, w->rname[i], w->rlen[i], w->rcount[i]);
        }
        m->u.tally.reasons = w->reasons;
        m->u.tally.reasons_len = off;
        w->f[1].data = w->reasons;
        w->f[1].len = off;
        break;
    }
    case KVT_MSG_TALLY_OK:
        w->n = 1;
        if (!mx)
            m->hdr.flags = 0;
        m->u.tally_ok.payoff = mx ? from_bits(0x7ff80000deadbeefull) : 0.1;
        m->u.tally_ok.share = mx ? -INFINITY : -0.0;
        m->u.tally_ok.act_ema = mx ? DBL_MAX : DBL_MIN / 4; /* subnormal */
        m->u.tally_ok.probes = mx ? UINT64_MAX : 0xe1e2e3e4e5e6e7e8ull;
        m->u.tally_ok.lookups = mx ? UINT64_MAX : 0xf1f2f3f4f5f6f7f8ull;
        m->u.tally_ok.gate_flags = mx ? UINT16_MAX : KVT_GATE_ADMISSION_ON | KVT_GATE_LOAD_BEARING;
        break;
    case KVT_MSG_ERROR:
        m->u.error.code = mx ? INT32_MIN : KVT_WIRE_ETOOBIG;
        fill_text(w, mx ? KVT_ERRTEXT_MAX : 19, "lookup: too many hashes; ");
        m->u.error.text = w->text;
        m->u.error.text_len = w->f[1].len;
        break;
    default:
        ck_abort_msg("no sample for type %d", type);
    }
    w->head_len = kvt_head_encode(w->head, 128, m);
    ck_assert_uint_eq(w->head_len, expected_head_size(type));
    w->f[0].data = w->head;
    w->f[0].len = w->head_len;
}

static int decode(const wire_t *w, kvt_msg_t *out)
{
    return kvt_msg_decode(w->f, w->n, &lim, out);
}

/* The common header fields of out match what w encoded. */
static void check_hdr(const wire_t *w, const kvt_msg_t *d)
{
    ck_assert_uint_eq(d->hdr.type, w->m.hdr.type);
    ck_assert_uint_eq(d->hdr.flags, w->m.hdr.flags);
    ck_assert_uint_eq(d->hdr.req_id, w->m.hdr.req_id);
    ck_assert_uint_eq(d->hdr.ns_id, w->m.hdr.ns_id);
}

static void check_reasons(const wire_t *w, const uint8_t *buf, size_t len)
{
    size_t off = 0, nl = 0, i;
    const char *name = NULL;
    uint64_t count = 0;

    for (i = 0; i < w->nreasons; i++) {
        ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), 1);
        ck_assert_uint_eq(nl, w->rlen[i]);
        ck_assert_mem_eq(name, w->rname[i], nl);
        ck_assert_uint_eq(count, w->rcount[i]);
    }
    ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), 0);
    ck_assert_uint_eq(off, len);
}

/* Every body field and view of d matches the sample w. */
static void check_body(const wire_t *w, const kvt_msg_t *d)
{
    const kvt_msg_t *e = &w->m;

    switch (e->hdr.type) {
    case KVT_MSG_HELLO:
        ck_assert_uint_eq(d->u.hello.layout_fp, e->u.hello.layout_fp);
        ck_assert_uint_eq(d->u.hello.chunk_tokens, e->u.hello.chunk_tokens);
        ck_assert_uint_eq(d->u.hello.rank, e->u.hello.rank);
        ck_assert_uint_eq(d->u.hello.world, e->u.hello.world);
        ck_assert_ptr_eq(d->u.hello.model, e->u.hello.model);
        ck_assert_uint_eq(d->u.hello.model_len, e->u.hello.model_len);
        break;
    case KVT_MSG_HELLO_OK:
        ck_assert_uint_eq(d->u.hello_ok.ns_id, e->u.hello_ok.ns_id);
        ck_assert_uint_eq(d->u.hello_ok.lease_ms, e->u.hello_ok.lease_ms);
        ck_assert_uint_eq(d->u.hello_ok.max_chunk_bytes, e->u.hello_ok.max_chunk_bytes);
        ck_assert_uint_eq(d->u.hello_ok.max_chunks, e->u.hello_ok.max_chunks);
        ck_assert_uint_eq(d->u.hello_ok.daemon_version, e->u.hello_ok.daemon_version);
        break;
    case KVT_MSG_LOOKUP:
        ck_assert_uint_eq(d->u.lookup.rank, e->u.lookup.rank);
        ck_assert_uint_eq(d->u.lookup.prompt_tokens, e->u.lookup.prompt_tokens);
        ck_assert_uint_eq(d->u.lookup.hbm_tokens, e->u.lookup.hbm_tokens);
        ck_assert_ptr_eq(d->u.lookup.hashes, e->u.lookup.hashes);
        ck_assert_uint_eq(d->u.lookup.nhashes, e->u.lookup.nhashes);
        break;
    case KVT_MSG_LOOKUP_OK:
        ck_assert_uint_eq(d->u.lookup_ok.hit, e->u.lookup_ok.hit);
        ck_assert_uint_eq(d->u.lookup_ok.lease_ms, e->u.lookup_ok.lease_ms);
        ck_assert_ptr_eq(d->u.lookup_ok.rank_hits, e->u.lookup_ok.rank_hits);
        ck_assert_uint_eq(d->u.lookup_ok.nranks, e->u.lookup_ok.nranks);
        for (size_t i = 0; i < d->u.lookup_ok.nranks; i++)
            ck_assert_uint_eq(kvt_get_u32(d->u.lookup_ok.rank_hits + 4 * i),
                              w->variant == 1 ? UINT32_MAX - i : 0x40414243u + i);
        break;
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
        ck_assert_uint_eq(d->u.save.rank, e->u.save.rank);
        ck_assert_uint_eq(d->u.save.op_id, e->u.save.op_id);
        ck_assert_mem_eq(d->u.save.parent.b, e->u.save.parent.b, KVT_HASH_BYTES);
        ck_assert_ptr_eq(d->u.save.hashes, e->u.save.hashes);
        ck_assert_uint_eq(d->u.save.nhashes, e->u.save.nhashes);
        ck_assert_ptr_eq(d->u.save.payloads, e->u.save.payloads);
        if (e->hdr.type == KVT_MSG_SAVE_DATA)
            ck_assert_ptr_eq(d->u.save.payloads, &w->f[2]);
        else
            ck_assert_ptr_null(d->u.save.payloads);
        ck_assert_ptr_eq(d->u.save.lengths, e->u.save.lengths);
        ck_assert_ptr_eq(d->u.save.locs, e->u.save.locs);
        if (e->hdr.type == KVT_MSG_SAVE_RESERVE)
            for (size_t i = 0; i < d->u.save.nhashes; i++)
                ck_assert_uint_eq(kvt_get_u64(d->u.save.lengths + 8 * i),
                                  w->variant == 1 || i == 2 ? LIM_PAYLOAD : 1 + i);
        break;
    case KVT_MSG_SAVE_BEGIN_OK:
    case KVT_MSG_SAVE_OK:
    case KVT_MSG_LOAD_OK:
    case KVT_MSG_SAVE_RESERVE_OK:
        ck_assert_ptr_eq(d->u.chunks_ok.status, e->u.chunks_ok.status);
        ck_assert_uint_eq(d->u.chunks_ok.n, e->u.chunks_ok.n);
        ck_assert_ptr_eq(d->u.chunks_ok.payloads, e->u.chunks_ok.payloads);
        ck_assert_ptr_eq(d->u.chunks_ok.locs, e->u.chunks_ok.locs);
        ck_assert_uint_eq(d->u.chunks_ok.hold_ms, e->u.chunks_ok.hold_ms);
        if (d->u.chunks_ok.locs != NULL)
            ck_assert_ptr_eq(d->u.chunks_ok.locs, w->f[2].data);
        if (d->u.chunks_ok.payloads != NULL)
            ck_assert_ptr_eq(d->u.chunks_ok.payloads, &w->f[2]);
        break;
    case KVT_MSG_ARENA:
        break;
    case KVT_MSG_ARENA_OK:
        ck_assert_uint_eq(d->u.arena_ok.arena_bytes, e->u.arena_ok.arena_bytes);
        ck_assert_uint_eq(d->u.arena_ok.hold_ms, e->u.arena_ok.hold_ms);
        ck_assert_ptr_eq(d->u.arena_ok.path, e->u.arena_ok.path);
        ck_assert_uint_eq(d->u.arena_ok.path_len, e->u.arena_ok.path_len);
        break;
    case KVT_MSG_RELEASE:
        ck_assert_uint_eq(d->u.release.rank, e->u.release.rank);
        ck_assert_ptr_eq(d->u.release.hashes, e->u.release.hashes);
        ck_assert_uint_eq(d->u.release.nhashes, e->u.release.nhashes);
        break;
    case KVT_MSG_RELEASE_OK:
        ck_assert_uint_eq(d->u.release_ok.released, e->u.release_ok.released);
        break;
    case KVT_MSG_LOAD:
        ck_assert_uint_eq(d->u.load.rank, e->u.load.rank);
        ck_assert_ptr_eq(d->u.load.hashes, e->u.load.hashes);
        ck_assert_uint_eq(d->u.load.nhashes, e->u.load.nhashes);
        break;
    case KVT_MSG_TALLY:
        ck_assert_uint_eq(d->u.tally.engine_id, e->u.tally.engine_id);
        ck_assert_uint_eq(d->u.tally.paid_total, e->u.tally.paid_total);
        ck_assert_uint_eq(d->u.tally.probes_total, e->u.tally.probes_total);
        ck_assert_ptr_eq(d->u.tally.reasons, e->u.tally.reasons);
        ck_assert_uint_eq(d->u.tally.reasons_len, e->u.tally.reasons_len);
        check_reasons(w, d->u.tally.reasons, d->u.tally.reasons_len);
        break;
    case KVT_MSG_TALLY_OK:
        ck_assert_uint_eq(bits(d->u.tally_ok.payoff), bits(e->u.tally_ok.payoff));
        ck_assert_uint_eq(bits(d->u.tally_ok.share), bits(e->u.tally_ok.share));
        ck_assert_uint_eq(bits(d->u.tally_ok.act_ema), bits(e->u.tally_ok.act_ema));
        ck_assert_uint_eq(d->u.tally_ok.probes, e->u.tally_ok.probes);
        ck_assert_uint_eq(d->u.tally_ok.lookups, e->u.tally_ok.lookups);
        ck_assert_uint_eq(d->u.tally_ok.gate_flags, e->u.tally_ok.gate_flags);
        break;
    case KVT_MSG_ERROR:
        ck_assert_int_eq(d->u.error.code, e->u.error.code);
        ck_assert_ptr_eq(d->u.error.text, e->u.error.text);
        ck_assert_uint_eq(d->u.error.text_len, e->u.error.text_len);
        break;
    default:
        ck_abort_msg("type %d", e->hdr.type);
    }
}

/* Decode w, expect rc, and check that the common header was decoded. */
static void expect_hdr_err(const wire_t *w, int rc)
{
    kvt_msg_t d;

    ck_assert_int_eq(decode(w, &d), rc);
    check_hdr(w, &d);
}

/* --- round trips and layout --- */

static void round_trip(int type, int variant)
{
    wire_t w;
    kvt_msg_t d;
    uint8_t again[128];

    sample_make(type, variant, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    check_hdr(&w, &d);
    check_body(&w, &d);
    ck_assert_uint_eq(kvt_head_encode(again, sizeof again, &d), w.head_len);
    ck_assert_mem_eq(again, w.head, w.head_len);
}

START_TEST(test_round_trip_patterns)
{
    round_trip(all_types[_i], 0);
}
END_TEST

START_TEST(test_round_trip_max)
{
    round_trip(all_types[_i], 1);
}
END_TEST

START_TEST(test_head_sizes)
{
    for (int i = 0; i < NTYPES; i++)
        ck_assert_uint_eq(kvt_head_size_v(all_types[i], 1), expected_head_size(all_types[i]));
    for (int t = -1; t < 300; t++)
        if (expected_head_size(t) == 0)
            ck_assert_uint_eq(kvt_head_size_v(t, 1), 0);
    ck_assert_uint_eq(kvt_head_size_v(INT_MIN, 1), 0);
    ck_assert_uint_eq(kvt_head_size_v(INT_MAX, 1), 0);
}
END_TEST

/* The encoded head has every field at its PROTOCOL.md offset, little-endian. */
START_TEST(test_layout)
{
    int type = all_types[_i];
    wire_t w;
    const uint8_t *h, *b;
    const kvt_msg_t *m = &w.m;

    sample_make(type, 0, &w);
    h = w.head;
    b = h + 24;
    ck_assert_mem_eq(h, "KVT1", 4);
    ck_assert_uint_eq(h[4], 1);
    ck_assert_uint_eq(h[5], (unsigned)type);
    ck_assert_uint_eq(le(h + 6, 2), m->hdr.flags);
    ck_assert_uint_eq(le(h + 8, 8), m->hdr.req_id);
    ck_assert_uint_eq(le(h + 16, 4), m->hdr.ns_id);
    switch (type) {
    case KVT_MSG_HELLO:
        ck_assert_uint_eq(le(b, 8), m->u.hello.layout_fp);
        ck_assert_uint_eq(le(b + 8, 4), m->u.hello.chunk_tokens);
        ck_assert_uint_eq(le(b + 12, 2), m->u.hello.rank);
        ck_assert_uint_eq(le(b + 14, 2), m->u.hello.world);
        break;
    case KVT_MSG_HELLO_OK:
        ck_assert_uint_eq(le(b, 4), m->u.hello_ok.ns_id);
        ck_assert_uint_eq(le(b + 4, 4), m->u.hello_ok.lease_ms);
        ck_assert_uint_eq(le(b + 8, 8), m->u.hello_ok.max_chunk_bytes);
        ck_assert_uint_eq(le(b + 16, 4), m->u.hello_ok.max_chunks);
        ck_assert_uint_eq(le(b + 20, 4), m->u.hello_ok.daemon_version);
        break;
    case KVT_MSG_LOOKUP:
        ck_assert_uint_eq(le(b, 2), m->u.lookup.rank);
        ck_assert_uint_eq(le(b + 8, 8), m->u.lookup.prompt_tokens);
        ck_assert_uint_eq(le(b + 16, 8), m->u.lookup.hbm_tokens);
        break;
    case KVT_MSG_LOOKUP_OK:
        ck_assert_uint_eq(le(b, 4), m->u.lookup_ok.hit);
        ck_assert_uint_eq(le(b + 4, 4), m->u.lookup_ok.lease_ms);
        break;
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
        ck_assert_uint_eq(le(b, 2), m->u.save.rank);
        ck_assert_uint_eq(le(b + 8, 8), m->u.save.op_id);
        ck_assert_mem_eq(b + 16, m->u.save.parent.b, KVT_HASH_BYTES);
        break;
    case KVT_MSG_LOAD:
        ck_assert_uint_eq(le(b, 2), m->u.load.rank);
        break;
    case KVT_MSG_LOAD_OK:
    case KVT_MSG_SAVE_RESERVE_OK:
        ck_assert_uint_eq(le(b, 4), m->u.chunks_ok.hold_ms);
        break;
    case KVT_MSG_ARENA_OK:
        ck_assert_uint_eq(le(b, 8), m->u.arena_ok.arena_bytes);
        ck_assert_uint_eq(le(b + 8, 4), m->u.arena_ok.hold_ms);
        break;
    case KVT_MSG_RELEASE:
        ck_assert_uint_eq(le(b, 2), m->u.release.rank);
        break;
    case KVT_MSG_RELEASE_OK:
        ck_assert_uint_eq(le(b, 4), m->u.release_ok.released);
        break;
    case KVT_MSG_TALLY:
        ck_assert_uint_eq(le(b, 8), m->u.tally.engine_id);
        ck_assert_uint_eq(le(b + 8, 8), m->u.tally.paid_total);
        ck_assert_uint_eq(le(b + 16, 8), m->u.tally.probes_total);
        break;
    case KVT_MSG_TALLY_OK:
        ck_assert_uint_eq(le(b, 8), bits(m->u.tally_ok.payoff));
        ck_assert_uint_eq(le(b + 8, 8), bits(m->u.tally_ok.share));
        ck_assert_uint_eq(le(b + 16, 8), bits(m->u.tally_ok.act_ema));
        ck_assert_uint_eq(le(b + 24, 8), m->u.tally_ok.probes);
        ck_assert_uint_eq(le(b + 32, 8), m->u.tally_ok.lookups);
        ck_assert_uint_eq(le(b + 40, 2), m->u.tally_ok.gate_flags);
        break;
    case KVT_MSG_ERROR:
        ck_assert_uint_eq(le(b, 4), 0xfffffffcu); /* -4 as i32 */
        break;
    default:
        break;
    }
}
END_TEST

/* TALLY_OK doubles keep every bit: 1.0 is 00 00 00 00 00 00 f0 3f on the wire. */
START_TEST(test_tally_ok_double_bytes)
{
    static const uint8_t one[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    kvt_msg_t m, d;
    uint8_t h[72];
    kvt_frame_t f = {h, sizeof h};
    const double vals[] = {1.0,
                           -0.0,
                           0.0,
                           INFINITY,
                           from_bits(0x7ff4000000000001ull),
                           from_bits(0xfff8000000000000ull),
                           from_bits(1),
                           -DBL_MIN};

    memset(&m, 0, sizeof m);
    m.hdr.version = 1;
    m.hdr.type = KVT_MSG_TALLY_OK;
    m.u.tally_ok.payoff = 1.0;
    ck_assert_uint_eq(kvt_head_encode(h, sizeof h, &m), sizeof h);
    ck_assert_mem_eq(h + 24, one, 8);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        m.u.tally_ok.payoff = vals[i];
        m.u.tally_ok.share = vals[(i + 1) % 8];
        m.u.tally_ok.act_ema = vals[(i + 2) % 8];
        ck_assert_uint_eq(kvt_head_encode(h, sizeof h, &m), sizeof h);
        ck_assert_uint_eq(le(h + 24, 8), bits(vals[i]));
        ck_assert_int_eq(kvt_msg_decode(&f, 1, &lim, &d), 0);
        ck_assert_uint_eq(bits(d.u.tally_ok.payoff), bits(vals[i]));
        ck_assert_uint_eq(bits(d.u.tally_ok.share), bits(vals[(i + 1) % 8]));
        ck_assert_uint_eq(bits(d.u.tally_ok.act_ema), bits(vals[(i + 2) % 8]));
    }
}
END_TEST

/* Reserved bytes are sent as 0 and ignored on receipt (PROTOCOL.md, Transport). */
START_TEST(test_reserved_bytes)
{
    int type = all_types[_i];
    wire_t w;
    kvt_msg_t d;
    size_t from, to;
    uint8_t again[128];

    sample_make(type, 0, &w);
    reserved_range(type, &from, &to);
    memset(w.head, 0xa5, 128);
    ck_assert_uint_eq(kvt_head_encode(w.head, 128, &w.m), w.head_len);
    for (size_t i = 20; i < 24; i++)
        ck_assert_uint_eq(w.head[i], 0);
    for (size_t i = from; i < to; i++)
        ck_assert_uint_eq(w.head[i], 0);

    memset(w.head + 20, 0xff, 4);
    memset(w.head + from, 0xff, to - from);
    ck_assert_int_eq(decode(&w, &d), 0);
    check_hdr(&w, &d);
    check_body(&w, &d);
    ck_assert_uint_eq(kvt_head_encode(again, sizeof again, &d), w.head_len);
    for (size_t i = 20; i < 24; i++)
        ck_assert_uint_eq(again[i], 0);
    for (size_t i = from; i < to; i++)
        ck_assert_uint_eq(again[i], 0);
}
END_TEST

/* --- the common header --- */

START_TEST(test_frame0_short)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_LOOKUP, 0, &w);
    ck_assert_int_eq(kvt_msg_decode(w.f, 0, &lim, &d), KVT_WIRE_EPROTO);
    for (size_t len = 0; len < KVT_HDR_BYTES; len++) {
        w.f[0].len = len;
        ck_assert_int_eq(decode(&w, &d), KVT_WIRE_EPROTO);
        ck_assert_uint_eq(d.hdr.req_id, 0);
    }
}
END_TEST

START_TEST(test_bad_magic)
{
    wire_t w;
    kvt_msg_t d;

    for (int i = 0; i < 4; i++) {
        sample_make(KVT_MSG_LOAD, 0, &w);
        w.head[i] ^= 0x20; /* "kVT1", "KvT1", "KVt1", "KVT\021" */
        ck_assert_int_eq(decode(&w, &d), KVT_WIRE_EPROTO);
    }
    sample_make(KVT_MSG_LOAD, 0, &w);
    memcpy(w.head, "1TVK", 4); /* the magic in big-endian order */
    ck_assert_int_eq(decode(&w, &d), KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_bad_version)
{
    static const uint8_t versions[] = {0, KVT_PROTO_VERSION + 1, 0x81, 0xff};
    wire_t w;

    for (size_t i = 0; i < sizeof versions; i++) {
        sample_make(KVT_MSG_LOOKUP, 1, &w);
        w.head[4] = versions[i];
        expect_hdr_err(&w, KVT_WIRE_EVERSION);
        /* The version is judged before anything whose layout it defines. */
        w.f[0].len = KVT_HDR_BYTES;
        w.n = 1;
        expect_hdr_err(&w, KVT_WIRE_EVERSION);
        w.head[5] = 0x55;
        w.m.hdr.type = 0x55;
        expect_hdr_err(&w, KVT_WIRE_EVERSION);
    }
}
END_TEST

START_TEST(test_unknown_type)
{
    wire_t w;
    kvt_msg_t m;
    uint8_t buf[128];

    for (int t = 0; t < 256; t++) {
        if (expected_head_size(t) != 0)
            continue;
        sample_make(KVT_MSG_SAVE_OK, 0, &w);
        w.head[5] = (uint8_t)t;
        w.m.hdr.type = (uint8_t)t;
        expect_hdr_err(&w, KVT_WIRE_EUNSUPP);
        w.n = 1;
        expect_hdr_err(&w, KVT_WIRE_EUNSUPP);

        memset(&m, 0, sizeof m);
        m.hdr.type = (uint8_t)t;
        ck_assert_uint_eq(kvt_head_encode(buf, sizeof buf, &m), 0);
    }
}
END_TEST

/* --- per-type sizes and frame counts --- */

START_TEST(test_head_one_short)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(all_types[_i], 0, &w);
    w.f[0].len = w.head_len - 1;
    ck_assert_int_eq(decode(&w, &d), KVT_WIRE_EPROTO);
    if (w.f[0].len >= KVT_HDR_BYTES)
        check_hdr(&w, &d);
}
END_TEST

START_TEST(test_head_one_long)
{
    wire_t w;

    sample_make(all_types[_i], 0, &w);
    w.head[w.head_len] = 0;
    w.f[0].len = w.head_len + 1;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_frames_too_few)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(all_types[_i], 0, &w);
    w.n--;
    if (w.n == 0) {
        ck_assert_int_eq(decode(&w, &d), KVT_WIRE_EPROTO);
        return;
    }
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    w.n = 1;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_frames_too_many)
{
    static const uint8_t sixteen[16] = {1};
    wire_t w;

    sample_make(all_types[_i], 0, &w);
    w.f[w.n].data = w.payload[LIM_HASHES];
    w.f[w.n].len = 0;
    w.n++;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    w.f[w.n - 1].data = sixteen;
    w.f[w.n - 1].len = sizeof sixteen;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

/* --- hash lists --- */

static const int hash_types[] = {KVT_MSG_LOOKUP,       KVT_MSG_SAVE_BEGIN,  KVT_MSG_SAVE_DATA,
                                 KVT_MSG_SAVE_RESERVE, KVT_MSG_SAVE_COMMIT, KVT_MSG_LOAD,
                                 KVT_MSG_RELEASE};

static size_t nhashes_of(const kvt_msg_t *d)
{
    switch (d->hdr.type) {
    case KVT_MSG_LOOKUP:
        return d->u.lookup.nhashes;
    case KVT_MSG_LOAD:
        return d->u.load.nhashes;
    case KVT_MSG_RELEASE:
        return d->u.release.nhashes;
    default:
        return d->u.save.nhashes;
    }
}

/* Sample of a hash-carrying type whose hash frame is len bytes. The per-hash frames that follow
 * fit the whole hashes in it (SAVE_DATA: empty payloads; SAVE_RESERVE: lengths of 1;
 * SAVE_COMMIT: zero locations), so only the hash frame can be wrong. */
static void hash_sample(int type, size_t len, wire_t *w)
{
    sample_make(type, 0, w);
    w->f[1].len = len;
    for (size_t i = 0; i < len; i++)
        w->hashes[i % sizeof w->hashes] = (uint8_t)i;
    if (type == KVT_MSG_SAVE_DATA) {
        size_t n = len / KVT_HASH_BYTES;
        for (size_t i = 0; i < n && 2 + i < MAX_FRAMES; i++) {
            w->f[2 + i].data = w->payload[0];
            w->f[2 + i].len = 0;
        }
        w->n = 2 + n;
    }
    if (type == KVT_MSG_SAVE_RESERVE) {
        for (size_t i = 0; i < len / KVT_HASH_BYTES; i++)
            put_le(w->lens8 + 8 * i, 1, 8);
        w->f[2].len = 8 * (len / KVT_HASH_BYTES);
    }
    if (type == KVT_MSG_SAVE_COMMIT) {
        memset(w->locs, 0, sizeof w->locs);
        w->f[2].len = KVT_LOC_BYTES * (len / KVT_HASH_BYTES);
    }
}

START_TEST(test_hashes_malformed)
{
    static const size_t bad[] = {0, 1, 15, 17, 31, 33, 16 * 3 - 1, 16 * 3 + 1};
    int type = hash_types[_i];
    wire_t w;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hash_sample(type, bad[i], &w);
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
}
END_TEST

START_TEST(test_hashes_limit)
{
    int type = hash_types[_i];
    wire_t w;
    kvt_msg_t d;
    kvt_limits_t one = {1, LIM_PAYLOAD};

    hash_sample(type, 16, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_int_eq(kvt_msg_decode(w.f, w.n, &one, &d), 0);

    hash_sample(type, LIM_HASHES * KVT_HASH_BYTES, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    check_hdr(&w, &d);
    ck_assert_uint_eq(nhashes_of(&d), LIM_HASHES);
    ck_assert_int_eq(kvt_msg_decode(w.f, w.n, &one, &d), KVT_WIRE_ETOOBIG);

    hash_sample(type, (LIM_HASHES + 1) * KVT_HASH_BYTES, &w);
    expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
}
END_TEST

/* --- SAVE_DATA payloads --- */

START_TEST(test_save_data_payload_count)
{
    wire_t w;

    sample_make(KVT_MSG_SAVE_DATA, 0, &w); /* 3 hashes, 3 payloads */
    w.n = 2 + 2;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    w.f[5] = w.f[4];
    w.n = 2 + 4;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_save_data_payload_too_big)
{
    wire_t w;
    kvt_msg_t d;

    for (size_t i = 0; i < 3; i++) {
        sample_make(KVT_MSG_SAVE_DATA, 0, &w);
        w.f[2 + i].data = w.payload[i];
        w.f[2 + i].len = LIM_PAYLOAD;
        ck_assert_int_eq(decode(&w, &d), 0);
        ck_assert_uint_eq(d.u.save.payloads[i].len, LIM_PAYLOAD);
        w.f[2 + i].len = LIM_PAYLOAD + 1;
        expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
    }
}
END_TEST

/* --- status frames and LOAD_OK payloads --- */

static const int status_types[] = {KVT_MSG_SAVE_BEGIN_OK, KVT_MSG_SAVE_OK, KVT_MSG_LOAD_OK,
                                   KVT_MSG_SAVE_RESERVE_OK};

/* A valid status-carrying sample with n statuses (all MISS for LOAD_OK, else EXISTS) and the
 * frames that must follow them: n empty payloads (LOAD_OK) or n zero locations. */
static void status_sample(int type, size_t n, wire_t *w)
{
    sample_make(type, 0, w);
    memset(w->status, type == KVT_MSG_LOAD_OK ? KVT_CHUNK_MISS : KVT_CHUNK_EXISTS, n);
    w->f[1].len = n;
    if (type == KVT_MSG_LOAD_OK) {
        for (size_t i = 0; i < n; i++) {
            w->f[2 + i].data = w->payload[i];
            w->f[2 + i].len = 0;
        }
        w->n = 2 + n;
    }
    if (type == KVT_MSG_SAVE_RESERVE_OK) {
        memset(w->locs, 0, sizeof w->locs);
        w->f[2].len = KVT_LOC_BYTES * n;
    }
}

START_TEST(test_status_malformed)
{
    static const uint8_t out_of_range[] = {8, 9, 0x80, 0xff};
    int type = status_types[_i];
    wire_t w;

    status_sample(type, 0, &w);
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    for (size_t i = 0; i < sizeof out_of_range; i++) {
        for (size_t pos = 0; pos < 3; pos += 2) {
            sample_make(type, 0, &w);
            w.status[pos] = out_of_range[i];
            expect_hdr_err(&w, KVT_WIRE_EPROTO);
        }
    }
}
END_TEST

START_TEST(test_status_limit)
{
    int type = status_types[_i];
    wire_t w;
    kvt_msg_t d;

    status_sample(type, 1, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.chunks_ok.n, 1);
    status_sample(type, LIM_HASHES, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    check_hdr(&w, &d);
    ck_assert_uint_eq(d.u.chunks_ok.n, LIM_HASHES);

    status_sample(type, LIM_HASHES + 1, &w);
    expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
}
END_TEST

START_TEST(test_status_all_values)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_SAVE_OK, 1, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.chunks_ok.n, 8);
    for (size_t i = 0; i < 8; i++)
        ck_assert_uint_eq(d.u.chunks_ok.status[i], 7 - i);
}
END_TEST

START_TEST(test_load_ok_payload_on_non_hit)
{
    static const uint8_t one_byte[1] = {0x42};
    wire_t w;

    for (int st = 0; st <= KVT_CHUNK_MISS; st++) {
        if (st == KVT_CHUNK_HIT)
            continue;
        sample_make(KVT_MSG_LOAD_OK, 0, &w); /* HIT, MISS, HIT */
        w.status[1] = (uint8_t)st;
        w.f[3].data = one_byte;
        w.f[3].len = 1;
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
    sample_make(KVT_MSG_LOAD_OK, 0, &w);
    w.status[0] = KVT_CHUNK_MISS; /* payload 0 is 10 bytes */
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_load_ok_payloads)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_LOAD_OK, 0, &w);
    w.n = 2 + 2;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    w.n = 2 + 4;
    w.f[5] = w.f[3];
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    sample_make(KVT_MSG_LOAD_OK, 0, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.chunks_ok.payloads[0].len, 10);
    ck_assert_uint_eq(d.u.chunks_ok.payloads[1].len, 0);
    ck_assert_uint_eq(d.u.chunks_ok.payloads[2].len, LIM_PAYLOAD);
    w.f[4].len = LIM_PAYLOAD + 1;
    expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
}
END_TEST

/* --- LOOKUP_OK rank hits --- */

START_TEST(test_lookup_ok_rank_hits)
{
    static const size_t bad[] = {1, 2, 3, 5, 6, 7, 4 * KVT_WORLD_MAX - 1, 4 * (KVT_WORLD_MAX + 1)};
    wire_t w;
    kvt_msg_t d;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sample_make(KVT_MSG_LOOKUP_OK, 0, &w);
        w.f[1].len = bad[i];
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
    sample_make(KVT_MSG_LOOKUP_OK, 0, &w);
    w.f[1].len = 0;
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.lookup_ok.nranks, 0);
    w.f[1].len = 4;
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.lookup_ok.nranks, 1);
    ck_assert_uint_eq(kvt_get_u32(d.u.lookup_ok.rank_hits), 0x40414243u);
}
END_TEST

/* --- HELLO model and ERROR text --- */

START_TEST(test_hello_model)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_HELLO, 0, &w);
    w.f[1].len = 0;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    sample_make(KVT_MSG_HELLO, 1, &w); /* 255 bytes */
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.hello.model_len, KVT_MODEL_MAX);
    w.text[KVT_MODEL_MAX] = 'x';
    w.f[1].len = KVT_MODEL_MAX + 1;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    sample_make(KVT_MSG_HELLO, 0, &w);
    w.f[1].len = 1;
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.hello.model_len, 1);

    for (size_t pos = 0; pos < 24; pos += 23) {
        sample_make(KVT_MSG_HELLO, 0, &w);
        w.text[pos] = '\0';
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
    sample_make(KVT_MSG_HELLO, 0, &w);
    w.text[11] = '\0';
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_error_text)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_ERROR, 1, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.error.text_len, KVT_ERRTEXT_MAX);
    ck_assert_int_eq(d.u.error.code, INT32_MIN);
    w.text[KVT_ERRTEXT_MAX] = '!';
    w.f[1].len = KVT_ERRTEXT_MAX + 1;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    sample_make(KVT_MSG_ERROR, 0, &w);
    w.f[1].len = 0;
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.error.text_len, 0);
    ck_assert_int_eq(d.u.error.code, KVT_WIRE_ETOOBIG);
}
END_TEST

/* --- TALLY reasons --- */

/* A TALLY sample whose reasons frame is buf[0..len). */
static void tally_with(wire_t *w, const uint8_t *buf, size_t len)
{
    sample_make(KVT_MSG_TALLY, 0, w);
    if (len > 0)
        memcpy(w->reasons, buf, len);
    w->f[1].len = len;
}

START_TEST(test_tally_three_reasons)
{
    /* Built byte by byte from PROTOCOL.md: name_len u8, name, count u64 LE. */
    static const uint8_t rec[] = {
        4, 'p', 'a', 'i', 'd',  41,   0,    0,    0,    0,    0,    0,   0, /* paid=41 */
        1, 'x', 0,   0,   0,    0,    0,    0,    0,    0,                  /* x=0 */
        3, 'e', 'v', 'c', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff    /* evc=2^64-1 */
    };
    wire_t w;
    kvt_msg_t d;
    size_t off = 0, nl = 0;
    const char *name = NULL;
    uint64_t count = 0;

    tally_with(&w, rec, sizeof rec);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_ptr_eq(d.u.tally.reasons, w.reasons);
    ck_assert_uint_eq(d.u.tally.reasons_len, sizeof rec);

    ck_assert_int_eq(
        kvt_reason_next(d.u.tally.reasons, d.u.tally.reasons_len, &off, &name, &nl, &count), 1);
    ck_assert_uint_eq(nl, 4);
    ck_assert_mem_eq(name, "paid", 4);
    ck_assert_uint_eq(count, 41);
    ck_assert_uint_eq(off, 13);
    ck_assert_int_eq(
        kvt_reason_next(d.u.tally.reasons, d.u.tally.reasons_len, &off, &name, &nl, &count), 1);
    ck_assert_uint_eq(nl, 1);
    ck_assert_mem_eq(name, "x", 1);
    ck_assert_uint_eq(count, 0);
    ck_assert_uint_eq(off, 23);
    ck_assert_int_eq(
        kvt_reason_next(d.u.tally.reasons, d.u.tally.reasons_len, &off, &name, &nl, &count), 1);
    ck_assert_uint_eq(nl, 3);
    ck_assert_mem_eq(name, "evc", 3);
    ck_assert_uint_eq(count, UINT64_MAX);
    ck_assert_uint_eq(off, sizeof rec);
    ck_assert_int_eq(
        kvt_reason_next(d.u.tally.reasons, d.u.tally.reasons_len, &off, &name, &nl, &count), 0);
    ck_assert_int_eq(
        kvt_reason_next(d.u.tally.reasons, d.u.tally.reasons_len, &off, &name, &nl, &count), 0);
    ck_assert_uint_eq(off, sizeof rec);
}
END_TEST

START_TEST(test_tally_no_reasons)
{
    wire_t w;
    kvt_msg_t d;
    size_t off = 0, nl = 0;
    const char *name = NULL;
    uint64_t count = 0;

    tally_with(&w, NULL, 0);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.tally.reasons_len, 0);
    ck_assert_int_eq(kvt_reason_next(d.u.tally.reasons, 0, &off, &name, &nl, &count), 0);
    ck_assert_uint_eq(off, 0);
}
END_TEST

START_TEST(test_tally_truncated)
{
    uint8_t buf[3 * REC_MAX];
    size_t len = 0, last;
    wire_t w;
    size_t off, nl;
    const char *name;
    uint64_t count;

    len += put_reason(buf + len, "paid", 4, 7);
    len += put_reason(buf + len, "lost", 4, 9);
    last = len;
    len += put_reason(buf + len, "evicted", 7, 3);
    for (size_t cut = last + 1; cut < len; cut++) {
        tally_with(&w, buf, cut);
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
        off = last;
        ck_assert_int_eq(kvt_reason_next(buf, cut, &off, &name, &nl, &count), KVT_WIRE_EPROTO);
    }
}
END_TEST

START_TEST(test_tally_bad_names)
{
    uint8_t buf[3 * REC_MAX];
    char name49[KVT_REASON_NAME_MAX + 1];
    size_t len, off, nl;
    const char *name;
    uint64_t count;
    wire_t w;
    kvt_msg_t d;

    memset(name49, 'n', sizeof name49);

    /* zero-length name, alone and after a good record */
    len = put_reason(buf, "", 0, 5);
    tally_with(&w, buf, len);
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    len = put_reason(buf, "ok", 2, 1);
    len += put_reason(buf + len, "", 0, 5);
    tally_with(&w, buf, len);
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    off = 0;
    ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), 1);
    ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), KVT_WIRE_EPROTO);

    /* 48 bytes is the longest name, 49 is malformed */
    len = put_reason(buf, name49, KVT_REASON_NAME_MAX, 5);
    tally_with(&w, buf, len);
    ck_assert_int_eq(decode(&w, &d), 0);
    len = put_reason(buf, name49, KVT_REASON_NAME_MAX + 1, 5);
    tally_with(&w, buf, len);
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    off = 0;
    ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), KVT_WIRE_EPROTO);

    /* a NUL anywhere in the name */
    for (size_t pos = 0; pos < 5; pos += 2) {
        char nm[5];
        memcpy(nm, "abcde", sizeof nm);
        nm[pos] = '\0';
        len = put_reason(buf, nm, sizeof nm, 5);
        tally_with(&w, buf, len);
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
        off = 0;
        ck_assert_int_eq(kvt_reason_next(buf, len, &off, &name, &nl, &count), KVT_WIRE_EPROTO);
    }
}
END_TEST

START_TEST(test_tally_reason_count)
{
    uint8_t buf[(KVT_REASON_MAX + 1) * 12];
    size_t len = 0;
    char name[3];
    wire_t w;
    kvt_msg_t d;

    for (int i = 0; i < KVT_REASON_MAX; i++) {
        name[0] = 'r';
        name[1] = (char)('a' + i);
        len += put_reason(buf + len, name, 2, (uint64_t)i);
    }
    tally_with(&w, buf, len);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.tally.reasons_len, len);

    len += put_reason(buf + len, "zz", 2, 1);
    tally_with(&w, buf, len);
    expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
}
END_TEST

START_TEST(test_reason_encode)
{
    char name[KVT_REASON_NAME_MAX + 1];
    uint8_t ref[REC_MAX + 1], buf[REC_MAX + 1], *exact;
    size_t off = 0, nl = 0, n;
    const char *got = NULL;
    uint64_t count = 0;

    memset(name, 'q', sizeof name);
    for (size_t l = 1; l <= KVT_REASON_NAME_MAX; l += 47) {
        n = put_reason(ref, name, l, 0x0102030405060708ull);
        ck_assert_uint_eq(kvt_reason_encode(buf, sizeof buf, name, l, 0x0102030405060708ull), n);
        ck_assert_mem_eq(buf, ref, n);

        exact = malloc(n);
        ck_assert_ptr_nonnull(exact);
        ck_assert_uint_eq(kvt_reason_encode(exact, n - 1, name, l, 1), 0);
        ck_assert_uint_eq(kvt_reason_encode(exact, n, name, l, UINT64_MAX), n);
        off = 0;
        ck_assert_int_eq(kvt_reason_next(exact, n, &off, &got, &nl, &count), 1);
        ck_assert_uint_eq(nl, l);
        ck_assert_ptr_eq(got, (const char *)exact + 1);
        ck_assert_uint_eq(count, UINT64_MAX);
        ck_assert_uint_eq(off, n);
        free(exact);
    }
    ck_assert_uint_eq(kvt_reason_encode(buf, sizeof buf, name, 0, 1), 0);
    ck_assert_uint_eq(kvt_reason_encode(buf, sizeof buf, name, KVT_REASON_NAME_MAX + 1, 1), 0);
    ck_assert_uint_eq(kvt_reason_encode(buf, 0, name, 1, 1), 0);
}
END_TEST

/* --- encoder bounds --- */

START_TEST(test_encode_cap_too_small)
{
    wire_t w;
    uint8_t *exact;

    sample_make(all_types[_i], 1, &w);
    exact = malloc(w.head_len - 1);
    ck_assert_ptr_nonnull(exact);
    ck_assert_uint_eq(kvt_head_encode(exact, w.head_len - 1, &w.m), 0);
    ck_assert_uint_eq(kvt_head_encode(exact, 0, &w.m), 0);
    ck_assert_uint_eq(kvt_head_encode(exact, KVT_HDR_BYTES - 1, &w.m), 0);
    free(exact);
    exact = malloc(w.head_len);
    ck_assert_ptr_nonnull(exact);
    ck_assert_uint_eq(kvt_head_encode(exact, w.head_len, &w.m), w.head_len);
    ck_assert_mem_eq(exact, w.head, w.head_len);
    free(exact);
}
END_TEST

/* --- shared-memory data path --- */

START_TEST(test_save_reserve_lengths)
{
    static const size_t bad_len[] = {0, 8 * 3 - 1, 8 * 3 + 1, 8 * 2, 8 * 4};
    wire_t w;
    kvt_msg_t d;

    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
        sample_make(KVT_MSG_SAVE_RESERVE, 0, &w); /* 3 hashes: lengths 1, 2, LIM_PAYLOAD */
        w.f[2].len = bad_len[i];
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
    for (size_t pos = 0; pos < 3; pos++) {
        sample_make(KVT_MSG_SAVE_RESERVE, 0, &w);
        put_le(w.lens8 + 8 * pos, 0, 8);
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
        put_le(w.lens8 + 8 * pos, LIM_PAYLOAD, 8);
        ck_assert_int_eq(decode(&w, &d), 0);
        ck_assert_uint_eq(kvt_get_u64(d.u.save.lengths + 8 * pos), LIM_PAYLOAD);
        put_le(w.lens8 + 8 * pos, LIM_PAYLOAD + 1, 8);
        expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
        put_le(w.lens8 + 8 * pos, UINT64_MAX, 8);
        expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
        put_le(w.lens8 + 8 * pos, 1ull << 32, 8); /* a u32 read would see 0 */
        expect_hdr_err(&w, KVT_WIRE_ETOOBIG);
    }
}
END_TEST

/* Locations frames: exactly 16 bytes per chunk, whatever the statuses say. */
START_TEST(test_locations_size)
{
    static const int types[] = {KVT_MSG_SAVE_COMMIT, KVT_MSG_SAVE_RESERVE_OK, KVT_MSG_LOAD_OK};
    wire_t w;
    kvt_msg_t d;

    for (size_t t = 0; t < 3; t++) {
        sample_make(types[t], 1, &w); /* 8 chunks; LOAD_OK variant 1 is the SHM form */
        ck_assert_int_eq(decode(&w, &d), 0);
        ck_assert_uint_eq(w.f[2].len, LIM_HASHES * KVT_LOC_BYTES);
        for (size_t delta = 1; delta <= KVT_LOC_BYTES; delta += KVT_LOC_BYTES - 1) {
            w.f[2].len = LIM_HASHES * KVT_LOC_BYTES - delta;
            expect_hdr_err(&w, KVT_WIRE_EPROTO);
            w.f[2].len = LIM_HASHES * KVT_LOC_BYTES + delta;
            expect_hdr_err(&w, KVT_WIRE_EPROTO);
        }
        w.f[2].len = 0;
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }
}
END_TEST

START_TEST(test_load_ok_shm_frames)
{
    wire_t w;
    kvt_msg_t d;

    /* SHM flag with the payload form: 2 + n frames is not [head, status, locations] */
    sample_make(KVT_MSG_LOAD_OK, 0, &w);
    w.head[6] |= KVT_LOADR_SHM;
    w.m.hdr.flags |= KVT_LOADR_SHM;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    sample_make(KVT_MSG_LOAD_OK, 1, &w);
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_ptr_null(d.u.chunks_ok.payloads);
    ck_assert_uint_eq(kvt_get_u64(d.u.chunks_ok.locs + KVT_LOC_BYTES * 7 + 8), UINT64_MAX);
    w.n = 2;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    w.f[3] = w.f[2];
    w.n = 4;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    /* without the flag, the locations frame is read as payloads: count mismatch */
    sample_make(KVT_MSG_LOAD_OK, 1, &w);
    w.head[6] &= (uint8_t)~KVT_LOADR_SHM;
    w.m.hdr.flags &= (uint16_t)~KVT_LOADR_SHM;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_arena_ok_path)
{
    wire_t w;
    kvt_msg_t d;

    sample_make(KVT_MSG_ARENA_OK, 1, &w); /* 255 bytes */
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.arena_ok.path_len, KVT_PATH_MAX);
    w.text[KVT_PATH_MAX] = 'a';
    w.f[1].len = KVT_PATH_MAX + 1;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);

    for (size_t pos = 0; pos < 22; pos += 7) {
        sample_make(KVT_MSG_ARENA_OK, 0, &w);
        w.text[pos] = '\0';
        expect_hdr_err(&w, KVT_WIRE_EPROTO);
    }

    /* An empty path (anonymous arena) is valid, also as a {NULL, 0} frame: memchr must not be
     * handed NULL (found by fuzz_proto; UBSan nonnull-attribute). */
    sample_make(KVT_MSG_ARENA_OK, 0, &w);
    w.f[1].data = NULL;
    w.f[1].len = 0;
    ck_assert_int_eq(decode(&w, &d), 0);
    ck_assert_uint_eq(d.u.arena_ok.path_len, 0);
    ck_assert_uint_eq(d.u.arena_ok.arena_bytes, 0x7172737475767778ull);
    ck_assert_uint_eq(d.u.arena_ok.hold_ms, 0x81828384u);
}
END_TEST

START_TEST(test_arena_and_release_ok_frames)
{
    static const uint8_t one[1] = {0};
    wire_t w;

    sample_make(KVT_MSG_ARENA, 0, &w);
    w.f[1].data = one;
    w.f[1].len = 0;
    w.n = 2;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
    sample_make(KVT_MSG_RELEASE_OK, 0, &w);
    w.f[1].data = one;
    w.f[1].len = 1;
    w.n = 2;
    expect_hdr_err(&w, KVT_WIRE_EPROTO);
}
END_TEST

/* --- names --- */

START_TEST(test_names)
{
    const char *names[NTYPES];

    for (int i = 0; i < NTYPES; i++) {
        names[i] = kvt_msg_type_name(all_types[i]);
        ck_assert_ptr_nonnull(names[i]);
        ck_assert_uint_gt(strlen(names[i]), 0);
        ck_assert_str_ne(names[i], "unknown");
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(names[i], names[j]);
    }
    for (int t = -300; t < 300; t++)
        if (expected_head_size(t) == 0)
            ck_assert_str_eq(kvt_msg_type_name(t), "unknown");
    ck_assert_str_eq(kvt_msg_type_name(INT_MIN), "unknown");
    ck_assert_str_eq(kvt_msg_type_name(INT_MAX), "unknown");
}
END_TEST

START_TEST(test_status_names)
{
    const char *names[8];

    for (int s = 0; s < 8; s++) {
        names[s] = kvt_chunk_status_name(s);
        ck_assert_ptr_nonnull(names[s]);
        ck_assert_uint_gt(strlen(names[s]), 0);
        ck_assert_str_ne(names[s], "unknown");
        for (int j = 0; j < s; j++)
            ck_assert_str_ne(names[s], names[j]);
    }
    ck_assert_str_eq(kvt_chunk_status_name(-1), "unknown");
    ck_assert_str_eq(kvt_chunk_status_name(8), "unknown");
    ck_assert_str_eq(kvt_chunk_status_name(255), "unknown");
    ck_assert_str_eq(kvt_chunk_status_name(INT_MIN), "unknown");
    ck_assert_str_eq(kvt_chunk_status_name(INT_MAX), "unknown");
}
END_TEST

/* kvt_decode_why names what a refused HELLO got wrong (the daemon's EPROTO text says it). */
START_TEST(test_decode_why_hello)
{
    kvt_msg_t m = {.hdr = {.version = 2, .type = KVT_MSG_HELLO}};
    uint8_t head[128], out_ok;
    char name[KVT_MODEL_MAX + 1];
    kvt_frame_t f[3];
    kvt_msg_t dec;

    m.u.hello.world = 1;
    m.u.hello.chunk_tokens = 16;
    f[0].data = head;
    f[0].len = kvt_head_encode(head, sizeof head, &m);
    ck_assert_uint_gt(f[0].len, 0);
    memset(name, 'm', sizeof name);
    f[1].data = name;
    f[2].data = "";
    f[2].len = 0;
    struct {
        size_t model_len, nframes;
        const char *why;
    } cases[] = {{0, 3, "empty model name"},
                 {KVT_MODEL_MAX + 1, 3, "model name longer than 255 bytes"},
                 {4, 2, "a protocol 2 hello has 3 frames: head, model, revision"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f[1].len = cases[i].model_len;
        ck_assert_int_eq(kvt_msg_decode(f, cases[i].nframes, &lim, &dec), KVT_WIRE_EPROTO);
        ck_assert_str_eq(kvt_decode_why(f, cases[i].nframes), cases[i].why);
    }
    name[1] = '\0';
    f[1].len = 4;
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &dec), KVT_WIRE_EPROTO);
    ck_assert_str_eq(kvt_decode_why(f, 3), "model name holds a NUL byte");
    name[1] = 'm';
    out_ok = kvt_msg_decode(f, 3, &lim, &dec) == 0;
    ck_assert(out_ok);
    ck_assert_str_eq(kvt_decode_why(f, 3), "");
    f[0].len -= 1;
    ck_assert_str_eq(kvt_decode_why(f, 3), "the head's size is not its type's");
}
END_TEST

/* kvt_decode_why names what a refused request with a hash list got wrong (0.2.14): every case is
 * one kvt_msg_decode refuses with EPROTO, and the well-formed message names nothing. */
START_TEST(test_decode_why_requests)
{
    uint8_t head[128], hashes[3 * KVT_HASH_BYTES] = {1}, lens[3 * 8], locs[3 * KVT_LOC_BYTES];
    kvt_frame_t f[6];
    kvt_msg_t dec;
    struct {
        int type;
        size_t nframes, hash_len, f2_len;
        const char *why;
    } cases[] = {
        {KVT_MSG_LOOKUP, 3, 32, 0, "wrong frame count: head, hashes"},
        {KVT_MSG_LOOKUP, 2, 0, 0, "an empty hash list (frame 1)"},
        {KVT_MSG_LOAD, 2, 17, 0, "the hash list (frame 1) is not a whole number of 16-byte hashes"},
        {KVT_MSG_SAVE_RESERVE, 2, 32, 0, "wrong frame count: head, hashes, lengths"},
        {KVT_MSG_SAVE_RESERVE, 3, 32, 8, "the lengths (frame 2) are not 8 bytes per hash"},
        {KVT_MSG_SAVE_RESERVE, 3, 48, 24, "a length of 0"},
        {KVT_MSG_SAVE_COMMIT, 3, 32, 16, "the locations (frame 2) are not 16 bytes per hash"},
        {KVT_MSG_SAVE_COMMIT, 4, 32, 32, "the checksums (frame 3) are not 8 bytes per hash"},
        {KVT_MSG_SAVE_DATA, 3, 32, 4, "not one payload frame per hash"},
        {KVT_MSG_SAVE_RESERVE, 3, 16, 8, ""},
    };

    memset(lens, 0, sizeof lens);
    kvt_put_u64(lens, 64);
    kvt_put_u64(lens + 8, 64);
    memset(locs, 0, sizeof locs);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvt_msg_t m = {.hdr = {.version = 2, .type = (uint8_t)cases[i].type}};
        f[0].data = head;
        f[0].len = kvt_head_encode(head, sizeof head, &m);
        ck_assert_uint_gt(f[0].len, 0);
        f[1] = (kvt_frame_t){hashes, cases[i].hash_len};
        f[2] = (kvt_frame_t){cases[i].type == KVT_MSG_SAVE_RESERVE ? (void *)lens : (void *)locs,
                             cases[i].f2_len};
        f[3] = (kvt_frame_t){locs, 4}; /* a checksums frame of the wrong size */
        int rc = kvt_msg_decode(f, cases[i].nframes, &lim, &dec);
        ck_assert_msg(rc == (cases[i].why[0] != '\0' ? KVT_WIRE_EPROTO : 0), "case %zu: rc %d", i,
                      rc);
        ck_assert_msg(strcmp(kvt_decode_why(f, cases[i].nframes), cases[i].why) == 0,
                      "case %zu: \"%s\", not \"%s\"", i, kvt_decode_why(f, cases[i].nframes),
                      cases[i].why);
    }
}
END_TEST

START_TEST(test_strerror)
{
    const char *names[10];

    for (int c = 0; c >= KVT_WIRE_ESTALE; c--) {
        names[-c] = kvt_wire_strerror(c);
        ck_assert_ptr_nonnull(names[-c]);
        ck_assert_uint_gt(strlen(names[-c]), 0);
        ck_assert_str_ne(names[-c], "unknown error");
        for (int j = 0; j < -c; j++)
            ck_assert_str_ne(names[-c], names[j]);
    }
    ck_assert_str_eq(kvt_wire_strerror(1), "unknown error");
    ck_assert_str_eq(kvt_wire_strerror(KVT_WIRE_ESTALE - 1), "unknown error");
    ck_assert_str_eq(kvt_wire_strerror(-128), "unknown error");
    ck_assert_str_eq(kvt_wire_strerror(INT_MIN), "unknown error");
    ck_assert_str_eq(kvt_wire_strerror(INT_MAX), "unknown error");
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *rt = tcase_create("round_trip");
    TCase *hdr = tcase_create("header");
    TCase *sz = tcase_create("sizes");
    TCase *lists = tcase_create("lists");
    TCase *tally = tcase_create("tally");
    TCase *misc = tcase_create("misc");
    const int nh = (int)(sizeof hash_types / sizeof hash_types[0]);
    const int ns = (int)(sizeof status_types / sizeof status_types[0]);

    tcase_add_loop_test(rt, test_round_trip_patterns, 0, NTYPES);
    tcase_add_loop_test(rt, test_round_trip_max, 0, NTYPES);
    tcase_add_loop_test(rt, test_layout, 0, NTYPES);
    tcase_add_loop_test(rt, test_reserved_bytes, 0, NTYPES);
    tcase_add_test(rt, test_head_sizes);
    tcase_add_test(rt, test_tally_ok_double_bytes);
    suite_add_tcase(s, rt);

    tcase_add_test(hdr, test_frame0_short);
    tcase_add_test(hdr, test_bad_magic);
    tcase_add_test(hdr, test_bad_version);
    tcase_add_test(hdr, test_unknown_type);
    suite_add_tcase(s, hdr);

    tcase_add_loop_test(sz, test_head_one_short, 0, NTYPES);
    tcase_add_loop_test(sz, test_head_one_long, 0, NTYPES);
    tcase_add_loop_test(sz, test_frames_too_few, 0, NTYPES);
    tcase_add_loop_test(sz, test_frames_too_many, 0, NTYPES);
    tcase_add_loop_test(sz, test_encode_cap_too_small, 0, NTYPES);
    suite_add_tcase(s, sz);

    tcase_add_loop_test(lists, test_hashes_malformed, 0, nh);
    tcase_add_loop_test(lists, test_hashes_limit, 0, nh);
    tcase_add_test(lists, test_save_data_payload_count);
    tcase_add_test(lists, test_save_data_payload_too_big);
    tcase_add_loop_test(lists, test_status_malformed, 0, ns);
    tcase_add_loop_test(lists, test_status_limit, 0, ns);
    tcase_add_test(lists, test_status_all_values);
    tcase_add_test(lists, test_load_ok_payload_on_non_hit);
    tcase_add_test(lists, test_load_ok_payloads);
    tcase_add_test(lists, test_lookup_ok_rank_hits);
    tcase_add_test(lists, test_hello_model);
    tcase_add_test(lists, test_error_text);
    tcase_add_test(lists, test_save_reserve_lengths);
    tcase_add_test(lists, test_locations_size);
    tcase_add_test(lists, test_load_ok_shm_frames);
    tcase_add_test(lists, test_arena_ok_path);
    tcase_add_test(lists, test_arena_and_release_ok_frames);
    suite_add_tcase(s, lists);

    tcase_add_test(tally, test_tally_three_reasons);
    tcase_add_test(tally, test_tally_no_reasons);
    tcase_add_test(tally, test_tally_truncated);
    tcase_add_test(tally, test_tally_bad_names);
    tcase_add_test(tally, test_tally_reason_count);
    tcase_add_test(tally, test_reason_encode);
    suite_add_tcase(s, tally);

    tcase_add_test(misc, test_names);
    tcase_add_test(misc, test_status_names);
    tcase_add_test(misc, test_strerror);
    tcase_add_test(misc, test_decode_why_hello);
    tcase_add_test(misc, test_decode_why_requests);
    suite_add_tcase(s, misc);
    return s;
}

const check_program_t check_program = {.suite = proto_suite};
