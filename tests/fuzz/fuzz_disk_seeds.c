/*
 * fuzz_disk_seeds.c - writes the seed corpora of fuzz_record (tests/fuzz/corpus_record/) and
 * fuzz_codec (tests/fuzz/corpus_codec/).
 *
 * Usage: fuzz_disk_seeds RECORD_DIR CODEC_DIR. Record seeds are whole records as a segment holds
 * them (header, payload, padding), of both versions (version 2 with a revision, named v2_*):
 * raw and lz4-compressed, with and without a parent, a long model name, a header without its
 * payload, and a torn one. Codec seeds are inputs in the format
 * of fuzz_codec.c: bf16-like data (compressible once shuffled) and random bytes, under each codec
 * and element size, and a real lz4 payload to decode. The committed corpora were produced by this
 * tool; run it again after a change of the record format. Single-threaded; exits 0 or 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "record.h"

static int write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    FILE *f;
    int ok;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    ok = fwrite(p, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* n bytes of little-endian bf16 values near 1.0 (a repeating high byte). */
static void bf16_like(uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2) {
        p[i] = (uint8_t)next();
        p[i + 1] = (uint8_t)(0x3f + (next() % 3));
    }
    if (n % 2)
        p[n - 1] = 0;
}

#define HEADER_ONLY SIZE_MAX /* record_seed: cut after the header */

/* One record of version v: header + payload + padding (payload stored as given; version 2 pads
 * the header to its payload block and the payload to a whole block), cut to cut bytes when not
 * 0 (HEADER_ONLY: after the header). */
static int record_seed(const char *dir, const char *name, uint16_t v, const char *model,
                       uint8_t flags, uint8_t codec, uint8_t shuffle, const uint8_t *payload,
                       size_t stored, size_t raw, size_t cut)
{
    static uint8_t buf[2 * RECORD_BLOCK + 8192];
    record_meta_t m;
    uint64_t off, span;
    int hl;

    memset(&m, 0, sizeof m);
    memset(buf, 0, sizeof buf);
    m.version = v;
    m.codec = codec;
    m.shuffle = shuffle;
    m.flags = flags;
    m.model_len = (uint8_t)strlen(model);
    memcpy(m.model, model, m.model_len);
    m.world = 4;
    m.rank = 1;
    m.chunk_tokens = 256;
    m.fingerprint = 0x0123456789abcdefull;
    for (int i = 0; i < 16; i++) {
        m.hash[i] = (uint8_t)(0x10 + i);
        m.parent[i] = (uint8_t)(0x40 + i);
    }
    m.raw_len = raw;
    m.stored_len = stored;
    if (v == RECORD_VERSION) {
        static const char rev[] = "a1b2c3d";
        m.revision_len = sizeof rev - 1;
        memcpy(m.revision, rev, m.revision_len);
        m.csum = record_csum(payload, stored); /* a raw payload's csum (lz4: any value) */
    }
    off = record_payload_off(&m);
    span = record_span(&m);
    if (span > sizeof buf)
        return -1;
    hl = record_encode_header(buf, sizeof buf, &m, payload);
    if (hl < 0)
        return -1;
    memcpy(buf + off, payload, stored);
    return write_file(dir, name, buf, cut == HEADER_ONLY ? (size_t)hl : cut ? cut : (size_t)span);
}

int main(int argc, char **argv)
{
    uint8_t data[4096], shuf[4096], lz[4096], scratch[4096], in[3 + 4096];
    char longmodel[256];
    size_t stored;
    uint8_t codec;
    int rc = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_disk_seeds RECORD_DIR CODEC_DIR\n");
        return 1;
    }
    bf16_like(data, sizeof data);
    memset(longmodel, 'm', 255);
    longmodel[255] = '\0';
    stored =
        codec_encode(CODEC_MODE_LZ4, 1.0, 2, data, sizeof data, lz, sizeof lz, scratch, &codec);
    if (codec != RECORD_CODEC_LZ4)
        return 1;

    for (uint16_t v = RECORD_VERSION_V1; v <= RECORD_VERSION; v++) {
        const char *pre = v == RECORD_VERSION_V1 ? "" : "v2_"; /* version 1: the old names */
        char n[64];
#define SEED(name, ...)                                                                            \
    (snprintf(n, sizeof n, "%s%s", pre, name), record_seed(argv[1], n, v, __VA_ARGS__))
        rc |= SEED("raw", "Llama-3.1-8B", 0, RECORD_CODEC_RAW, 1, data, 100, 100, 0);
        rc |= SEED("raw_parent", "Llama-3.1-8B", RECORD_F_PARENT | RECORD_F_REPLICATED,
                   RECORD_CODEC_RAW, 1, data, 64, 64, 0);
        rc |= SEED("lz4", "Qwen2-7B", RECORD_F_PARENT, RECORD_CODEC_LZ4, 2, lz, stored, sizeof data,
                   0);
        rc |= SEED("long_model", longmodel, 0, RECORD_CODEC_RAW, 4, data, 8, 8, 0);
        rc |= SEED("header_only", "m", 0, RECORD_CODEC_RAW, 1, data, 16, 16, HEADER_ONLY);
        rc |= SEED("torn", "model", 0, RECORD_CODEC_RAW, 1, data, 200, 200, 60);
#undef SEED
    }

    /* codec: byte 0 = codec | elem << 1 | mode << 3, bytes 1-2 = raw length, then data */
    for (unsigned e = 0; e < 3; e++) {
        char name[64];
        size_t n = 1024;
        in[0] = (uint8_t)((e << 1) | (1u << 3)); /* raw decode, elem e, mode lz4 */
        in[1] = (uint8_t)n;
        in[2] = (uint8_t)(n >> 8);
        memcpy(in + 3, data, n);
        snprintf(name, sizeof name, "bf16_elem%u", 1u << e);
        rc |= write_file(argv[2], name, in, 3 + n);
    }
    for (size_t i = 0; i < 512; i++)
        shuf[i] = (uint8_t)next();
    in[0] = 0; /* raw, elem 1, auto */
    in[1] = 0;
    in[2] = 2; /* raw length 512 */
    memcpy(in + 3, shuf, 512);
    rc |= write_file(argv[2], "random_auto", in, 3 + 512);
    in[0] = 1 | (1u << 1) | (2u << 3); /* lz4 decode, elem 2, mode off */
    in[1] = (uint8_t)(sizeof data & 0xff);
    in[2] = (uint8_t)(sizeof data >> 8);
    memcpy(in + 3, lz, stored);
    rc |= write_file(argv[2], "lz4_payload", in, 3 + stored);
    return rc != 0;
}
