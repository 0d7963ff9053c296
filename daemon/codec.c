/*
 * codec.c - byte-shuffle + lz4 per record (see codec.h).
 *
 * Design: the shuffle is a plain strided copy (the compiler vectorises the 2-byte case well
 * enough that it costs far less than lz4). lz4 is the default-acceleration block compressor;
 * decompression uses LZ4_decompress_safe, which never writes past dst and fails on malformed
 * input, so a payload that passed its checksum but is still wrong (a bug, not a disk error)
 * cannot overrun a buffer.
 * Threads: pure. Invariants: codec_decode(codec_encode(x)) == x for every mode and element size.
 */
#include "codec.h"

#include <lz4.h>
#include <string.h>

#include "record.h"

const char *const codec_mode_words[] = {"auto", "lz4", "off", NULL};

int codec_mode_parse(const char *s, codec_mode_t *mode)
{
    for (int i = 0; codec_mode_words[i] != NULL; i++) {
        if (strcmp(s, codec_mode_words[i]) == 0) {
            *mode = (codec_mode_t)i;
            return 0;
        }
    }
    return -1;
}

const char *codec_mode_name(codec_mode_t mode)
{
    return (unsigned)mode <= CODEC_MODE_OFF ? codec_mode_words[mode] : "unknown";
}

void codec_shuffle(void *dst, const void *src, size_t n, unsigned elem)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t ne = elem > 1 ? n / elem : 0;

    if (ne == 0) {
        memcpy(d, s, n);
        return;
    }
    if (elem == 2) {
        uint8_t *lo = d, *hi = d + ne;
        for (size_t i = 0; i < ne; i++) {
            lo[i] = s[2 * i];
            hi[i] = s[2 * i + 1];
        }
    } else {
        for (unsigned b = 0; b < elem; b++)
            for (size_t i = 0; i < ne; i++)
                d[b * ne + i] = s[i * elem + b];
    }
    memcpy(d + ne * elem, s + ne * elem, n - ne * elem);
}

void codec_unshuffle(void *dst, const void *src, size_t n, unsigned elem)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t ne = elem > 1 ? n / elem : 0;

    if (ne == 0) {
        memcpy(d, s, n);
        return;
    }
    if (elem == 2) {
        const uint8_t *lo = s, *hi = s + ne;
        for (size_t i = 0; i < ne; i++) {
            d[2 * i] = lo[i];
            d[2 * i + 1] = hi[i];
        }
    } else {
        for (unsigned b = 0; b < elem; b++)
            for (size_t i = 0; i < ne; i++)
                d[i * elem + b] = s[b * ne + i];
    }
    memcpy(d + ne * elem, s + ne * elem, n - ne * elem);
}

/* lz4 of src[n] into dst[cap]; 0 when it does not fit. */
static size_t lz4(const void *src, size_t n, void *dst, size_t cap)
{
    int r = LZ4_compress_default(src, dst, (int)n, (int)cap);

    return r > 0 ? (size_t)r : 0;
}

/* The record stays raw: the caller writes src itself (no copy here). */
static size_t store_raw(size_t n, uint8_t *codec)
{
    *codec = RECORD_CODEC_RAW;
    return n;
}

size_t codec_encode(codec_mode_t mode, double threshold, unsigned elem, const void *src, size_t n,
                    void *dst, size_t cap, void *scratch, uint8_t *codec)
{
    size_t out, limit = n - 1;

    if (mode == CODEC_MODE_OFF || n < 64 || n > (size_t)LZ4_MAX_INPUT_SIZE)
        return store_raw(n, codec);
    if (mode == CODEC_MODE_AUTO) {
        limit = (size_t)(threshold * (double)n);
        if (limit >= n)
            limit = n - 1;
        if (n > 2 * CODEC_SAMPLE_BYTES) {
            size_t sn = CODEC_SAMPLE_BYTES;
            codec_shuffle(scratch, src, sn, elem);
            out = lz4(scratch, sn, dst, cap < n ? cap : n);
            if (out == 0 || (double)out > threshold * (double)sn)
                return store_raw(n, codec);
        }
    }
    if (limit == 0)
        return store_raw(n, codec);
    codec_shuffle(scratch, src, n, elem);
    out = lz4(scratch, n, dst, limit < cap ? limit : cap);
    if (out == 0)
        return store_raw(n, codec);
    *codec = RECORD_CODEC_LZ4;
    return out;
}

int codec_decode(uint8_t codec, unsigned elem, const void *src, size_t stored, void *dst,
                 size_t raw, void *scratch)
{
    int r;

    if (codec == RECORD_CODEC_RAW) {
        if (stored != raw)
            return -1;
        memcpy(dst, src, raw);
        return 0;
    }
    if (codec != RECORD_CODEC_LZ4 || stored > (size_t)INT32_MAX || raw > (size_t)INT32_MAX)
        return -1;
    r = LZ4_decompress_safe(src, scratch, (int)stored, (int)raw);
    if (r < 0 || (size_t)r != raw)
        return -1;
    codec_unshuffle(dst, scratch, raw, elem);
    return 0;
}
