/*
 * fuzz_proto.c - libFuzzer target for kvt_msg_decode, kvt_decode_why, kvt_head_encode and
 * kvt_reason_next.
 *
 * Design: the input is split into frames as fuzz_proto.h describes, each frame in an allocation
 * of its exact size (an empty frame is {NULL, 0}, which callers may pass), and decoded with small
 * limits. Beyond "no sanitizer report", the target
 * checks the decoder's contract and aborts (a libFuzzer crash) when it does not hold:
 *  - a failure returns one of EPROTO, EVERSION, EUNSUPP, ETOOBIG; the common header is decoded
 *    exactly when frame 0 holds 24 bytes with the right magic (req_id 0 otherwise); EVERSION is
 *    returned exactly for a bad version, EUNSUPP exactly for an unknown type with a good one;
 *  - a success has a head of kvt_head_size_v(type, version) bytes (protocol 1 or 2), and
 *    re-encoding the decoded message
 *    gives the input head byte for byte once the input's reserved bytes are zeroed (the decoder
 *    ignores reserved bytes and the encoder writes zeros, PROTOCOL.md), while encoding into one
 *    byte less returns 0;
 *  - every view of a decoded message (model, hashes, rank hits, status, payloads, reasons, text)
 *    lies inside its frame and obeys its rule; the target reads every byte of every view so
 *    that ASan checks the bounds;
 *  - kvt_reason_next, run over every frame as if it were a reason list, only reports records
 *    inside the frame.
 * Threads: single-threaded. Invariants: no state survives an input; everything is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_proto.h"
#include "kvt_proto.h"

#define FUZZ_CHECK(c)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_proto: check failed at line %d: %s\n", __LINE__, #c);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile unsigned sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    unsigned s = 0;

    for (size_t i = 0; i < n; i++)
        s += b[i];
    sink += s;
}

static uint64_t le(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Zeroes the reserved bytes of a head of the given type and version (PROTOCOL.md). */
static void zero_reserved(uint8_t *h, int type, int v)
{
    if (v < 2)
        memset(h + 20, 0, 4); /* the arena generation in protocol 2 */
    switch (type) {
    case KVT_MSG_HELLO:
        if (v >= 2)
            memset(h + 24 + 24, 0, 8);
        break;
    case KVT_MSG_HELLO_OK:
        if (v >= 2)
            memset(h + 24 + 40, 0, 8);
        break;
    case KVT_MSG_TALLY:
        if (v >= 2)
            memset(h + 24 + 40, 0, 16);
        break;
    case KVT_MSG_LOOKUP:
    case KVT_MSG_SAVE_BEGIN:
    case KVT_MSG_SAVE_DATA:
    case KVT_MSG_SAVE_RESERVE:
    case KVT_MSG_SAVE_COMMIT:
    case KVT_MSG_LOAD:
    case KVT_MSG_RELEASE:
        memset(h + 24 + 2, 0, 6);
        break;
    case KVT_MSG_LOAD_OK:
    case KVT_MSG_SAVE_RESERVE_OK:
    case KVT_MSG_RELEASE_OK:
        memset(h + 24 + 4, 0, 4);
        break;
    case KVT_MSG_ARENA_OK:
        if (v < 2)
            memset(h + 24 + 12, 0, 4);
        break;
    case KVT_MSG_TALLY_OK:
        memset(h + 24 + 42, 0, 6);
        if (v >= 2)
            memset(h + 24 + 49, 0, 7);
        break;
    case KVT_MSG_ERROR:
        memset(h + 24 + 4, 0, 4);
        break;
    default:
        break;
    }
}

/* Walks buf as a reason list; returns the records seen before the end or the first error. */
static size_t walk_reasons(const uint8_t *buf, size_t len, int *rc)
{
    size_t off = 0, nl = 0, n = 0, prev;
    const char *name;
    uint64_t count;

    for (;;) {
        prev = off;
        *rc = kvt_reason_next(buf, len, &off, &name, &nl, &count);
        if (*rc <= 0)
            return n;
        FUZZ_CHECK(*rc == 1);
        FUZZ_CHECK(nl >= 1 && nl <= KVT_REASON_NAME_MAX);
        FUZZ_CHECK((const uint8_t *)name == buf + prev + 1);
        FUZZ_CHECK(off == prev + 1 + nl + 8 && off <= len);
        FUZZ_CHECK(memchr(name, '\0', nl) == NULL);
        touch(name, nl);
        sink += (unsigned)count;
        n++;
    }
}

static void touch_hashes(const kvt_wire_hash_t *h, size_t n, const kvt_frame_t *f)
{
    kvt_wire_hash_t tmp;

    FUZZ_CHECK((const void *)h == f->data);
    FUZZ_CHECK(n >= 1 && n <= FUZZ_MAX_HASHES && n * KVT_HASH_BYTES == f->len);
    for (size_t i = 0; i < n; i++) {
        memcpy(&tmp, &h[i], sizeof tmp);
        touch(tmp.b, sizeof tmp.b);
    }
}

static void touch_payloads(const kvt_frame_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(p[i].len <= FUZZ_MAX_PAYLOAD);
        touch(p[i].data, p[i].len);
    }
}

static void check_status(const kvt_chunks_ok_t *c, const kvt_frame_t *f)
{
    FUZZ_CHECK(c->status == f->data && c->n == f->len);
    FUZZ_CHECK(c->n >= 1 && c->n <= FUZZ_MAX_HASHES);
    for (size_t i = 0; i < c->n; i++) {
        FUZZ_CHECK(c->status[i] <= KVT_CHUNK_MISS);
        FUZZ_CHECK(strcmp(kvt_chunk_status_name(c->status[i]), "unknown") != 0);
    }
}

static void check_ok(const kvt_frame_t *f, size_t n, const kvt_msg_t *m)
{
    const uint8_t *h = f[0].data;
    size_t hl = f[0].len;
    uint8_t *want, *got;
    int rc;

    FUZZ_CHECK(n >= 1 && hl >= KVT_HDR_BYTES && h[4] >= KVT_PROTO_VERSION_MIN &&
               h[4] <= KVT_PROTO_VERSION && m->hdr.version == h[4]);
    FUZZ_CHECK(kvt_head_size_v(m->hdr.type, h[4]) == hl && m->hdr.type == h[5]);
    FUZZ_CHECK(m->hdr.gen == (h[4] >= 2 ? le(h + 20, 4) : 0));
    FUZZ_CHECK(strcmp(kvt_msg_type_name(m->hdr.type), "unknown") != 0);

    want = malloc(hl);
    got = malloc(hl);
    FUZZ_CHECK(want != NULL && got != NULL);
    memcpy(want, h, hl);
    zero_reserved(want, m->hdr.type, h[4]);
    FUZZ_CHECK(kvt_head_encode(got, hl, m) == hl);
    FUZZ_CHECK(memcmp(got, want, hl) == 0);
    FUZZ_CHECK(kvt_head_encode(got, hl - 1, m) == 0);
    free(got);
    free(want);

    switch (m->hdr.type) {
    case KVT_MSG_HELLO:
        FUZZ_CHECK(n == (h[4] >= 2 ? 3u : 2u) && m->u.hello.model == f[1].data &&
                   m->u.hello.model_len == f[1].len);
        FUZZ_CHECK(m->u.hello.model_len >= 1 && m->u.hello.model_len <= KVT_MODEL_MAX);
        FUZZ_CHECK(memchr(m->u.hello.model, '\0', m->u.hello.model_len) == NULL);
        touch(m->u.hello.model, m->u.hello.model_len);
        if (h[4] >= 2) {
            FUZZ_CHECK(m->u.hello.revision == f[2].data && m->u.hello.revision_len == f[2].len);
            FUZZ_CHECK(f[2].len <= KVT_REVISION_MAX);
            FUZZ_CHECK(f[2].len == 0 || memchr(f[2].data, '\0', f[2].len) == NULL);
            touch(m->u.hello.revision, m->u.hello.revision_len);
        } else {
            FUZZ_CHECK(m->u.hello.revision == NULL && m->u.hello.revision_len == 0);
        }
        break;
    case KVT_MSG_HELLO_OK:
    case KVT_MSG_TALLY_OK:
    case KVT_MSG_ARENA:
    case KVT_MSG_RELEASE_OK:
        FUZZ_CHECK(n == 1);
        break;
    case KVT_MSG_ARENA_OK:
        FUZZ_CHECK(n == 2 && m->u.arena_ok.path == f[1].data);
        FUZZ_CHECK(m->u.arena_ok.path_len == f[1].len && f[1].len <= KVT_PATH_MAX);
        FUZZ_CHECK(f[1].len == 0 || memchr(f[1].data, '\0', f[1].len) == NULL);
        touch(m->u.arena_ok.path, m->u.arena_ok.path_len);
        break;
    case KVT_MSG_RELEASE:
        FUZZ_CHECK(n == 2);
        touch_hashes(m->u.release.hashes, m->u.release.nhashes, &f[1]);
        break;
    case KVT_MSG_SAVE_RESERVE:
        touch_hashes(m->u.save.hashes, m->u.save.nhashes, &f[1]);
        FUZZ_CHECK(n == 3 && m->u.save.lengths == f[2].data && m->u.save.payloads == NULL);
        FUZZ_CHECK(f[2].len == 8 * m->u.save.nhashes);
        for (size_t i = 0; i < m->u.save.nhashes; i++) {
            uint64_t l = kvt_get_u64(m->u.save.lengths + 8 * i);
            FUZZ_CHECK(l >= 1 && l <= FUZZ_MAX_PAYLOAD);
        }
        break;
    case KVT_MSG_SAVE_COMMIT:
        touch_hashes(m->u.save.hashes, m->u.save.nhashes, &f[1]);
        /* protocol 2 may add the writer's checksums (CLIENT_CSUMS) as a fourth frame */
        FUZZ_CHECK((n == 3 || (n == 4 && m->hdr.version >= 2)) && m->u.save.locs == f[2].data &&
                   m->u.save.payloads == NULL);
        FUZZ_CHECK(f[2].len == KVT_LOC_BYTES * m->u.save.nhashes);
        touch(m->u.save.locs, f[2].len);
        if (n == 4) {
            FUZZ_CHECK(m->u.save.csums == f[3].data && f[3].len == 8 * m->u.save.nhashes);
            touch(m->u.save.csums, f[3].len);
        } else {
            FUZZ_CHECK(m->u.save.csums == NULL);
        }
        break;
    case KVT_MSG_SAVE_RESERVE_OK:
        check_status(&m->u.chunks_ok, &f[1]);
        FUZZ_CHECK(n == 3 && m->u.chunks_ok.locs == f[2].data);
        FUZZ_CHECK(m->u.chunks_ok.payloads == NULL);
        FUZZ_CHECK(f[2].len == KVT_LOC_BYTES * m->u.chunks_ok.n);
        touch(m->u.chunks_ok.locs, f[2].len);
        break;
    case KVT_MSG_LOOKUP:
        FUZZ_CHECK(n == 2);
        touch_hashes(m->u.lookup.hashes, m->u.lookup.nhashes, &f[1]);
        break;
    case KVT_MSG_LOAD:
        FUZZ_CHECK(n == 2);
        touch_hashes(m->u.load.hashes, m->u.load.nhashes, &f[1]);
        break;
    case KVT_MSG_LOOKUP_OK:
        FUZZ_CHECK(n == 2 && m->u.lookup_ok.rank_hits == f[1].data);
        FUZZ_CHECK(m->u.lookup_ok.nranks * 4 == f[1].len);
        FUZZ_CHECK(m->u.lookup_ok.nranks <= KVT_WORLD_MAX);
        for (size_t i = 0; i < m->u.lookup_ok.nranks; i++)
            sink += kvt_get_u32(m->u.lookup_ok.rank_hits + 4 * i);
        break;
    case KVT_MSG_SAVE_BEGIN:
        FUZZ_CHECK(n == 2 && m->u.save.payloads == NULL);
        touch_hashes(m->u.save.hashes, m->u.save.nhashes, &f[1]);
        break;
    case KVT_MSG_SAVE_DATA:
        touch_hashes(m->u.save.hashes, m->u.save.nhashes, &f[1]);
        FUZZ_CHECK(n == 2 + m->u.save.nhashes && m->u.save.payloads == &f[2]);
        touch_payloads(m->u.save.payloads, m->u.save.nhashes);
        break;
    case KVT_MSG_SAVE_BEGIN_OK:
    case KVT_MSG_SAVE_OK:
        FUZZ_CHECK(n == 2 && m->u.chunks_ok.payloads == NULL);
        check_status(&m->u.chunks_ok, &f[1]);
        break;
    case KVT_MSG_LOAD_OK: {
        /* protocol 2 adds a checksums frame: after the status (frames) or the locations (shm) */
        size_t sums = (m->hdr.flags & KVT_LOADR_SHM) ? 3 : 2, first = h[4] >= 2 ? 3 : 2;
        check_status(&m->u.chunks_ok, &f[1]);
        if (h[4] >= 2) {
            FUZZ_CHECK(m->u.chunks_ok.checksums == f[sums].data);
            FUZZ_CHECK(f[sums].len == KVT_CSUM_BYTES * m->u.chunks_ok.n);
            touch(m->u.chunks_ok.checksums, f[sums].len);
        } else {
            FUZZ_CHECK(m->u.chunks_ok.checksums == NULL);
        }
        if (m->hdr.flags & KVT_LOADR_SHM) {
            FUZZ_CHECK(n == (h[4] >= 2 ? 4u : 3u) && m->u.chunks_ok.locs == f[2].data);
            FUZZ_CHECK(m->u.chunks_ok.payloads == NULL);
            FUZZ_CHECK(f[2].len == KVT_LOC_BYTES * m->u.chunks_ok.n);
            touch(m->u.chunks_ok.locs, f[2].len);
            break;
        }
        FUZZ_CHECK(m->u.chunks_ok.locs == NULL);
        FUZZ_CHECK(n == first + m->u.chunks_ok.n && m->u.chunks_ok.payloads == &f[first]);
        for (size_t i = 0; i < m->u.chunks_ok.n; i++)
            FUZZ_CHECK(m->u.chunks_ok.status[i] == KVT_CHUNK_HIT ||
                       m->u.chunks_ok.payloads[i].len == 0);
        touch_payloads(m->u.chunks_ok.payloads, m->u.chunks_ok.n);
        break;
    }
    case KVT_MSG_TALLY:
        FUZZ_CHECK(n == 2 && m->u.tally.reasons == f[1].data);
        FUZZ_CHECK(m->u.tally.reasons_len == f[1].len);
        FUZZ_CHECK(walk_reasons(m->u.tally.reasons, m->u.tally.reasons_len, &rc) <= KVT_REASON_MAX);
        FUZZ_CHECK(rc == 0);
        break;
    case KVT_MSG_ERROR:
        FUZZ_CHECK(n == 2 && m->u.error.text == f[1].data && m->u.error.text_len == f[1].len);
        FUZZ_CHECK(m->u.error.text_len <= KVT_ERRTEXT_MAX);
        FUZZ_CHECK((uint32_t)m->u.error.code == le(h + 24, 4));
        touch(m->u.error.text, m->u.error.text_len);
        break;
    default:
        FUZZ_CHECK(!"decoded an unknown type");
    }
}

static void check_err(const kvt_frame_t *f, size_t n, const kvt_msg_t *m, int rc)
{
    const uint8_t *h = n > 0 ? f[0].data : NULL;
    int hdr_ok = n > 0 && f[0].len >= KVT_HDR_BYTES && le(h, 4) == KVT_PROTO_MAGIC;

    FUZZ_CHECK(rc == KVT_WIRE_EPROTO || rc == KVT_WIRE_EVERSION || rc == KVT_WIRE_EUNSUPP ||
               rc == KVT_WIRE_ETOOBIG);
    FUZZ_CHECK(strcmp(kvt_wire_strerror(rc), "unknown error") != 0);
    if (!hdr_ok) {
        FUZZ_CHECK(rc == KVT_WIRE_EPROTO);
        FUZZ_CHECK(m->hdr.req_id == 0 && m->hdr.type == 0 && m->hdr.flags == 0);
        FUZZ_CHECK(m->hdr.ns_id == 0);
        return;
    }
    FUZZ_CHECK(m->hdr.type == h[5] && m->hdr.flags == le(h + 6, 2));
    FUZZ_CHECK(m->hdr.req_id == le(h + 8, 8) && m->hdr.ns_id == le(h + 16, 4));
    FUZZ_CHECK((rc == KVT_WIRE_EVERSION) ==
               (h[4] < KVT_PROTO_VERSION_MIN || h[4] > KVT_PROTO_VERSION));
    if (rc != KVT_WIRE_EVERSION)
        FUZZ_CHECK((rc == KVT_WIRE_EUNSUPP) == (kvt_head_size_v(h[5], h[4]) == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const kvt_limits_t lim = {FUZZ_MAX_HASHES, FUZZ_MAX_PAYLOAD};
    kvt_frame_t *frames;
    kvt_msg_t m;
    size_t n, pos = 1, len;
    int rc;

    if (size == 0)
        return 0;
    n = data[0] % (FUZZ_MAX_FRAMES + 1);
    frames = malloc(n * sizeof *frames);
    FUZZ_CHECK(frames != NULL || n == 0);
    for (size_t i = 0; i < n; i++) {
        uint8_t *buf;
        len = 0;
        if (size - pos >= 2) {
            len = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
            pos += 2;
        }
        if (len > size - pos)
            len = size - pos;
        buf = NULL;
        if (len > 0) {
            buf = malloc(len);
            FUZZ_CHECK(buf != NULL);
            memcpy(buf, data + pos, len);
        }
        pos += len;
        frames[i].data = buf;
        frames[i].len = len;
    }

    rc = kvt_msg_decode(frames, n, &lim, &m);
    if (rc == 0)
        check_ok(frames, n, &m);
    else
        check_err(frames, n, &m, rc);
    /* the daemon asks why of every EPROTO: it reads the frames too, and always answers text */
    if (rc == KVT_WIRE_EPROTO)
        FUZZ_CHECK(kvt_decode_why(frames, n) != NULL);

    for (size_t i = 0; i < n; i++)
        walk_reasons(frames[i].data, frames[i].len, &rc);

    for (size_t i = 0; i < n; i++)
        free((void *)frames[i].data);
    free(frames);
    return 0;
}
