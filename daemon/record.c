/*
 * record.c - record encode/decode/verify (see record.h for the layouts).
 *
 * Design: the decoder rejects every header that could not have been written by the encoder
 * (each field range, the reserved bytes, the padding after the names, codec/length
 * consistency), so a torn or overwritten header is recognised as such before any length from
 * it is trusted; a version 2 header is also checked against its own checksum. Lengths from a
 * header are bounded (RECORD_RAW_MAX) before the caller reads that many bytes. Version 1's
 * checksum covers the header with its checksum field zeroed, then the stored payload; version
 * 2's covers the header alone, and the raw bytes carry their own csum.
 *
 * Threads: pure; any thread. Invariants: decode(encode(m)) == m for every valid m of either
 * version.
 */
#include "record.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
/* xxhash's own runtime dispatch (AVX2 / AVX-512 when the CPU has them; the same values): the
 * library's plain entry points are built for baseline SSE2, about 19 GB/s here against 30 */
#include <xxh_x86dispatch.h>
#endif

#include "kvt_proto.h"

#define OFF_SUM 80u
#define OFF_CSUM 88u

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static size_t header_len(unsigned version, size_t model_len, size_t revision_len)
{
    if (version == RECORD_VERSION_V1)
        return (size_t)record_align(RECORD_FIXED_V1 + model_len);
    return (size_t)record_align(RECORD_FIXED + model_len + revision_len);
}

size_t record_header_len(const record_meta_t *m)
{
    return header_len(m->version, m->model_len, m->revision_len);
}

uint64_t record_payload_off(const record_meta_t *m)
{
    size_t hl = record_header_len(m);

    return m->version == RECORD_VERSION_V1 ? hl : record_block(hl);
}

uint64_t record_span(const record_meta_t *m)
{
    if (m->version == RECORD_VERSION_V1)
        return record_header_len(m) + record_align(m->stored_len);
    return record_payload_off(m) + record_block(m->stored_len);
}

uint64_t record_csum(const void *p, uint64_t n)
{
    return XXH3_64bits(p, (size_t)n);
}

#define COPY_PIECE (128u << 10) /* copied, then hashed while it is still in the cache */

uint64_t record_copy_csum(void *dst, const void *src, uint64_t n)
{
    XXH3_state_t st;

    XXH3_64bits_reset(&st);
    for (uint64_t off = 0; off < n; off += COPY_PIECE) {
        size_t len = n - off < COPY_PIECE ? (size_t)(n - off) : COPY_PIECE;
        memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, len);
        XXH3_64bits_update(&st, (const uint8_t *)dst + off, len);
    }
    return XXH3_64bits_digest(&st);
}

static bool meta_valid(const record_meta_t *m)
{
    if (m->version != RECORD_VERSION && m->version != RECORD_VERSION_V1)
        return false;
    if (m->version == RECORD_VERSION_V1 && m->revision_len != 0)
        return false;
    if (m->model_len == 0 || m->codec > RECORD_CODEC_LZ4)
        return false;
    if (m->shuffle != 1 && m->shuffle != 2 && m->shuffle != 4)
        return false;
    if ((m->flags & ~(RECORD_F_REPLICATED | RECORD_F_PARENT)) != 0)
        return false;
    if (m->world == 0 || m->world > KVT_WORLD_MAX || m->rank >= m->world || m->chunk_tokens == 0)
        return false;
    if (m->raw_len == 0 || m->raw_len > RECORD_RAW_MAX || m->stored_len == 0)
        return false;
    if (m->codec == RECORD_CODEC_RAW && m->stored_len != m->raw_len)
        return false;
    if (m->codec == RECORD_CODEC_LZ4 && m->stored_len >= m->raw_len)
        return false;
    return true;
}

/* Version 1: the header with its checksum zeroed seeds the hash of the payload. */
static uint64_t checksum_v1(const uint8_t *hdr, size_t hdr_len, const void *payload, uint64_t n)
{
    uint8_t tmp[RECORD_HEADER_MAX];

    memcpy(tmp, hdr, hdr_len);
    memset(tmp + OFF_SUM, 0, 8);
    return XXH3_64bits_withSeed(payload, (size_t)n, XXH3_64bits(tmp, hdr_len));
}

/* Version 2: the header alone, its checksum field zeroed. */
static uint64_t checksum_v2(const uint8_t *hdr, size_t hdr_len)
{
    uint8_t tmp[RECORD_HEADER_MAX];

    memcpy(tmp, hdr, hdr_len);
    memset(tmp + OFF_SUM, 0, 8);
    return XXH3_64bits(tmp, hdr_len);
}

int record_encode_header(void *dst, size_t cap, record_meta_t *m, const void *payload)
{
    uint8_t *p = dst;
    size_t hl, names;

    if (!meta_valid(m) || memchr(m->model, '\0', m->model_len) != NULL ||
        memchr(m->revision, '\0', m->revision_len) != NULL)
        return RECORD_EHEADER;
    hl = record_header_len(m);
    if (cap < hl)
        return RECORD_ESPACE;
    memset(p, 0, hl);
    put32(p, RECORD_MAGIC);
    put16(p + 4, m->version);
    put16(p + 6, (uint16_t)hl);
    p[8] = m->codec;
    p[9] = m->shuffle;
    p[10] = m->flags;
    p[11] = m->model_len;
    put16(p + 12, m->world);
    put16(p + 14, m->rank);
    put32(p + 16, m->chunk_tokens);
    put64(p + 24, m->fingerprint);
    memcpy(p + 32, m->hash, 16);
    memcpy(p + 48, m->parent, 16);
    put64(p + 64, m->raw_len);
    put64(p + 72, m->stored_len);
    if (m->version == RECORD_VERSION_V1) {
        memcpy(p + RECORD_FIXED_V1, m->model, m->model_len);
        m->checksum = checksum_v1(p, hl, payload, m->stored_len);
    } else {
        p[20] = m->revision_len;
        put64(p + OFF_CSUM, m->csum);
        names = RECORD_FIXED;
        memcpy(p + names, m->model, m->model_len);
        memcpy(p + names + m->model_len, m->revision, m->revision_len);
        m->checksum = checksum_v2(p, hl);
    }
    put64(p + OFF_SUM, m->checksum);
    return (int)hl;
}

/* The fields both versions share, at the same offsets. */
static void decode_common(const uint8_t *p, record_meta_t *m)
{
    m->codec = p[8];
    m->shuffle = p[9];
    m->flags = p[10];
    m->model_len = p[11];
    m->world = get16(p + 12);
    m->rank = get16(p + 14);
    m->chunk_tokens = get32(p + 16);
    m->fingerprint = get64(p + 24);
    memcpy(m->hash, p + 32, 16);
    memcpy(m->parent, p + 48, 16);
    m->raw_len = get64(p + 64);
    m->stored_len = get64(p + 72);
    m->checksum = get64(p + OFF_SUM);
}

/* The names at p + from (model, then revision) and zero padding up to hl. */
static bool names_valid(const uint8_t *p, size_t from, size_t hl, record_meta_t *m)
{
    memcpy(m->model, p + from, m->model_len);
    memcpy(m->revision, p + from + m->model_len, m->revision_len);
    if (memchr(m->model, '\0', m->model_len) != NULL ||
        memchr(m->revision, '\0', m->revision_len) != NULL)
        return false;
    for (size_t i = from + m->model_len + m->revision_len; i < hl; i++)
        if (p[i] != 0)
            return false;
    return true;
}

int record_decode_header(const void *src, size_t avail, record_meta_t *m, size_t *hdr_len)
{
    const uint8_t *p = src;
    size_t hl, fixed;
    uint16_t version;

    if (avail < 8)
        return RECORD_NEED_MORE;
    if (get32(p) != RECORD_MAGIC)
        return RECORD_EMAGIC;
    version = get16(p + 4);
    if (version != RECORD_VERSION && version != RECORD_VERSION_V1)
        return RECORD_EVERSION;
    fixed = version == RECORD_VERSION_V1 ? RECORD_FIXED_V1 : RECORD_FIXED;
    if (avail < fixed)
        return RECORD_NEED_MORE;
    memset(m, 0, sizeof *m);
    m->version = version;
    decode_common(p, m);
    if (version == RECORD_VERSION_V1) {
        if (get32(p + 20) != 0)
            return RECORD_EHEADER;
    } else {
        m->revision_len = p[20];
        m->csum = get64(p + OFF_CSUM);
        if (p[21] != 0 || p[22] != 0 || p[23] != 0)
            return RECORD_EHEADER;
    }
    hl = record_header_len(m);
    if (get16(p + 6) != hl || !meta_valid(m))
        return RECORD_EHEADER;
    if (avail < hl)
        return RECORD_NEED_MORE;
    if (!names_valid(p, fixed, hl, m))
        return RECORD_EHEADER;
    if (version == RECORD_VERSION && checksum_v2(p, hl) != m->checksum)
        return RECORD_ECHECKSUM;
    *hdr_len = hl;
    return RECORD_OK;
}

int record_verify_v1(const void *hdr, size_t hdr_len, const void *payload, uint64_t stored_len)
{
    const uint8_t *p = hdr;

    if (hdr_len < RECORD_FIXED_V1 || hdr_len > RECORD_HEADER_MAX)
        return RECORD_ECHECKSUM;
    return checksum_v1(p, hdr_len, payload, stored_len) == get64(p + OFF_SUM) ? RECORD_OK
                                                                              : RECORD_ECHECKSUM;
}

const char *record_strerror(int rc)
{
    switch (rc) {
    case RECORD_OK:
        return "ok";
    case RECORD_NEED_MORE:
        return "truncated record";
    case RECORD_EMAGIC:
        return "bad magic";
    case RECORD_EVERSION:
        return "unknown record version";
    case RECORD_EHEADER:
        return "invalid record header";
    case RECORD_ECHECKSUM:
        return "checksum mismatch";
    case RECORD_ESPACE:
        return "destination too small";
    default:
        return "unknown record error";
    }
}
