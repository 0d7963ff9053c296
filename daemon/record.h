/*
 * record.h - the disk tier's record format: pure encode, decode and checksum verification.
 *
 * A segment file is a sequence of records, each starting at an 8-byte aligned offset:
 *
 *   off size  field
 *     0   4   magic "KVTR"
 *     4   2   version (RECORD_VERSION)
 *     6   2   header_len: RECORD_FIXED + model_len rounded up to 8
 *     8   1   codec: RECORD_CODEC_RAW or RECORD_CODEC_LZ4 (byte-shuffled, then lz4)
 *     9   1   shuffle element bytes: 1 (none), 2 or 4
 *    10   1   flags: RECORD_F_REPLICATED, RECORD_F_PARENT
 *    11   1   model_len, 1..255
 *    12   2   world (1..KVT_WORLD_MAX)
 *    14   2   rank (< world)
 *    16   4   chunk_tokens (> 0)
 *    20   4   reserved, 0
 *    24   8   layout fingerprint
 *    32  16   chunk hash
 *    48  16   parent hash (meaningful with RECORD_F_PARENT)
 *    64   8   raw_len: bytes of the chunk (> 0, <= RECORD_RAW_MAX)
 *    72   8   stored_len: payload bytes (== raw_len for raw; < raw_len for lz4)
 *    80   8   checksum
 *    88   -   model name, then zero padding to header_len
 *   then stored_len payload bytes, then zero padding to 8.
 *
 * All integers little-endian. checksum = XXH3_64(payload, seed = XXH3_64(header with the
 * checksum field zeroed)): one xxh3-64 chain over header and payload without a streaming state.
 * The header carries everything recovery needs to re-declare the namespace (model, fingerprint,
 * world, replicated, chunk_tokens) and to relink the prefix chain (parent hash).
 *
 * Threads: pure functions, callable from any thread. No allocation, no I/O (fuzzable).
 */
#ifndef KVT_RECORD_H
#define KVT_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECORD_MAGIC 0x5254564bu /* "KVTR" in file byte order */
#define RECORD_VERSION 1u
#define RECORD_FIXED 88u
#define RECORD_HEADER_MAX (RECORD_FIXED + 256u) /* 88 + 255 rounded up to 8 */
#define RECORD_RAW_MAX (1ull << 30)
#define RECORD_ALIGN 8u

#define RECORD_CODEC_RAW 0u
#define RECORD_CODEC_LZ4 1u

#define RECORD_F_REPLICATED 0x1u
#define RECORD_F_PARENT 0x2u

enum {
    RECORD_OK = 0,
    RECORD_NEED_MORE = 1,  /* fewer bytes than the header needs */
    RECORD_EMAGIC = -1,    /* not a record (or not where one should start) */
    RECORD_EVERSION = -2,  /* a record of another format version */
    RECORD_EHEADER = -3,   /* a header field is out of range */
    RECORD_ECHECKSUM = -4, /* header or payload bytes differ from what was written */
    RECORD_ESPACE = -5,    /* encode: the destination is too small */
};

typedef struct {
    uint8_t codec;
    uint8_t shuffle;
    uint8_t flags;
    uint8_t model_len;
    uint16_t world;
    uint16_t rank;
    uint32_t chunk_tokens;
    uint64_t fingerprint;
    uint8_t hash[16];
    uint8_t parent[16];
    uint64_t raw_len;
    uint64_t stored_len;
    uint64_t checksum; /* decode fills it; encode computes it */
    char model[256];   /* model_len bytes, NUL terminated by decode */
} record_meta_t;

static inline uint64_t record_align(uint64_t n)
{
    return (n + RECORD_ALIGN - 1) & ~(uint64_t)(RECORD_ALIGN - 1);
}

/* Header bytes for a model name of model_len bytes. */
static inline size_t record_header_len(size_t model_len)
{
    return (size_t)record_align(RECORD_FIXED + model_len);
}

/* Bytes a whole record occupies in a segment (header, payload, padding). */
static inline uint64_t record_total_len(size_t model_len, uint64_t stored_len)
{
    return record_header_len(model_len) + record_align(stored_len);
}

/*
 * Writes the header of m (m->stored_len bytes of payload at payload) into dst, with the
 * checksum computed over both; m->checksum receives it. The payload is not copied. Returns the
 * header length, or RECORD_EHEADER (m invalid) / RECORD_ESPACE (cap too small).
 */
int record_encode_header(void *dst, size_t cap, record_meta_t *m, const void *payload);

/*
 * Decodes the header at src (avail bytes readable). Returns RECORD_OK with *m and *hdr_len,
 * RECORD_NEED_MORE when avail is shorter than the header, or a negative RECORD_E* code. Does not
 * check the checksum (see record_verify).
 */
int record_decode_header(const void *src, size_t avail, record_meta_t *m, size_t *hdr_len);

/* Checks the checksum of a decoded header (hdr: hdr_len bytes) and its payload. Returns
 * RECORD_OK or RECORD_ECHECKSUM. */
int record_verify(const void *hdr, size_t hdr_len, const void *payload, uint64_t stored_len);

const char *record_strerror(int rc);

#endif /* KVT_RECORD_H */
