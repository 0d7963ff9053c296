/*
 * record.h - the disk tier's record format: pure encode, decode and checksum verification.
 *
 * A segment file is a sequence of records. The daemon writes version 2; recovery still reads
 * version 1 (segments written before the chunk checksum existed). Segments never mix versions:
 * the daemon appends only to segments it created itself.
 *
 * Version 2 (written). Each record starts at a RECORD_BLOCK (4 KiB) aligned offset; its payload
 * starts at the next block boundary after the header and is padded with zeros to a whole block,
 * so that header and payload can be read and written with O_DIRECT straight from and into
 * arena extents:
 *
 *   off size  field
 *     0   4   magic "KVTR"
 *     4   2   version (2)
 *     6   2   header_len: RECORD_FIXED + model_len + revision_len, rounded up to 8
 *     8   1   codec: RECORD_CODEC_RAW or RECORD_CODEC_LZ4 (byte-shuffled, then lz4)
 *     9   1   shuffle element bytes: 1 (none), 2 or 4
 *    10   1   flags: RECORD_F_REPLICATED, RECORD_F_PARENT
 *    11   1   model_len, 1..255
 *    12   2   world (1..KVT_WORLD_MAX)
 *    14   2   rank (< world)
 *    16   4   chunk_tokens (> 0)
 *    20   1   revision_len, 0..255 (the model revision of the namespace; protocol 2's HELLO)
 *    21   3   reserved, 0
 *    24   8   layout fingerprint
 *    32  16   chunk hash
 *    48  16   parent hash (meaningful with RECORD_F_PARENT)
 *    64   8   raw_len: bytes of the chunk (> 0, <= RECORD_RAW_MAX)
 *    72   8   stored_len: payload bytes (== raw_len for raw; < raw_len for lz4)
 *    80   8   checksum: XXH3_64 (seed 0) of the header_len header bytes with this field zeroed
 *    88   8   csum: XXH3_64 (seed 0) of the raw_len chunk bytes (the chunk's commit checksum)
 *    96   -   model name, revision, then zero padding to header_len
 *   then zero padding to the payload offset (header_len rounded up to RECORD_BLOCK), stored_len
 *   payload bytes, and zero padding to a whole block.
 *
 * The header checksum makes every header field trustworthy before the payload is read; the
 * payload is verified by csum over the raw bytes after decompression (one pass over the bytes,
 * and the same value the index keeps and LOAD_OK announces).
 *
 * Version 1 (read only): 8-byte alignment, RECORD_FIXED_V1 (88) header bytes with the checksum
 * at 80 and the model from 88 (no revision, no csum, reserved u32 at 20);
 * checksum = XXH3_64(payload, seed = XXH3_64(header with the checksum field zeroed)) over the
 * stored payload. A v1 record has no csum: the reader computes it from the verified bytes.
 *
 * All integers little-endian. The header carries everything recovery needs to re-declare the
 * namespace (model, revision, fingerprint, world, replicated, chunk_tokens) and to relink the
 * prefix chain (parent hash).
 *
 * Threads: pure functions, callable from any thread. No allocation, no I/O (fuzzable).
 */
#ifndef KVT_RECORD_H
#define KVT_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECORD_MAGIC 0x5254564bu /* "KVTR" in file byte order */
#define RECORD_VERSION 2u        /* the version written */
#define RECORD_VERSION_V1 1u     /* still read */
#define RECORD_FIXED 96u
#define RECORD_FIXED_V1 88u
#define RECORD_HEADER_MAX                                                                          \
    (RECORD_FIXED + 255u + 255u + 2u) /* 608: the longest header, any version */
#define RECORD_BLOCK 4096u            /* version 2 alignment */
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
    uint16_t version; /* RECORD_VERSION or RECORD_VERSION_V1; encode: which one to write */
    uint8_t codec;
    uint8_t shuffle;
    uint8_t flags;
    uint8_t model_len;
    uint8_t revision_len; /* version 2 */
    uint16_t world;
    uint16_t rank;
    uint32_t chunk_tokens;
    uint64_t fingerprint;
    uint8_t hash[16];
    uint8_t parent[16];
    uint64_t raw_len;
    uint64_t stored_len;
    uint64_t checksum;  /* the header's checksum field; decode fills it, encode computes it */
    uint64_t csum;      /* version 2: XXH3_64 of the raw bytes (encode: the caller sets it) */
    char model[256];    /* model_len bytes, NUL terminated by decode */
    char revision[256]; /* revision_len bytes, NUL terminated by decode */
} record_meta_t;

static inline uint64_t record_align(uint64_t n)
{
    return (n + RECORD_ALIGN - 1) & ~(uint64_t)(RECORD_ALIGN - 1);
}

static inline uint64_t record_block(uint64_t n)
{
    return (n + RECORD_BLOCK - 1) & ~(uint64_t)(RECORD_BLOCK - 1);
}

/* Header bytes of m (its version, model and revision lengths). */
size_t record_header_len(const record_meta_t *m);

/* Bytes from the start of the record to its payload. */
uint64_t record_payload_off(const record_meta_t *m);

/* Bytes the whole record occupies in a segment (header, payload, padding). */
uint64_t record_span(const record_meta_t *m);

/*
 * Writes the header of m into dst (the header_len bytes only: the caller pads a version 2
 * record to its payload offset with zeros). Version 2: m->csum must hold the raw bytes'
 * checksum and payload is not read (may be NULL); version 1: the checksum covers payload
 * (m->stored_len bytes). m->checksum receives the header's checksum field. Returns the header
 * length, or RECORD_EHEADER (m invalid) / RECORD_ESPACE (cap too small).
 */
int record_encode_header(void *dst, size_t cap, record_meta_t *m, const void *payload);

/*
 * Decodes the header at src (avail bytes readable), either version. Returns RECORD_OK with *m
 * and *hdr_len (the header bytes), RECORD_NEED_MORE when avail is shorter than the header, or a
 * negative RECORD_E* code. A version 2 header is verified against its checksum here
 * (RECORD_ECHECKSUM); a version 1 record's checksum covers its payload too (record_verify_v1).
 */
int record_decode_header(const void *src, size_t avail, record_meta_t *m, size_t *hdr_len);

/* Version 1: checks the checksum of a decoded header (hdr: hdr_len bytes) and its stored
 * payload. Returns RECORD_OK or RECORD_ECHECKSUM. */
int record_verify_v1(const void *hdr, size_t hdr_len, const void *payload, uint64_t stored_len);

/* The chunk checksum: XXH3_64 (seed 0) of n bytes. */
uint64_t record_csum(const void *p, uint64_t n);

/* Copies n bytes of src to dst (not overlapping) and returns record_csum(dst, n), reading the
 * bytes from memory once (the disk tier's staged reads and writes, stage.h). */
uint64_t record_copy_csum(void *dst, const void *src, uint64_t n);

const char *record_strerror(int rc);

#endif /* KVT_RECORD_H */
