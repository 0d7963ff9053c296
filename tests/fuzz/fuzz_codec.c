/*
 * fuzz_codec.c - libFuzzer target for the disk tier's codec (daemon/codec.h): codec_decode of
 * arbitrary stored bytes, and codec_encode followed by codec_decode of arbitrary chunks.
 *
 * Input: byte 0 chooses the codec of the decode (bit 0: lz4, else raw), the shuffle element
 * (bits 1-2: 1, 2 or 4; 3 means 1) and the mode of the encode (bits 3-4: auto, lz4, off);
 * bytes 1-2 (little-endian) are the raw length the decode is asked for (at most FUZZ_RAW_MAX);
 * the rest is the data, both the stored bytes of the decode and the chunk of the round trip.
 * Each buffer is an allocation of exactly its size (ASan sees a write past it). The contract,
 * checked beyond "no sanitizer report" (a failure aborts):
 *  - decode returns 0 or -1; raw decodes exactly when the lengths agree, to the same bytes;
 *  - encode returns a stored length; LZ4 exactly when it is shorter than the chunk (never with
 *    mode off), and then decoding it gives the chunk back byte for byte, while decoding it to one
 *    byte more or less fails; RAW with the chunk's own length.
 * Threads: single-threaded. Invariants: no state survives an input; everything is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "record.h"

#define FUZZ_NAME "fuzz_codec"
#include "fuzz_check.h"

#define FUZZ_RAW_MAX 65536u

static void *xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);

    if (p == NULL)
        abort();
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned elems[4] = {1, 2, 4, 1};
    static const codec_mode_t modes[4] = {CODEC_MODE_AUTO, CODEC_MODE_LZ4, CODEC_MODE_OFF,
                                          CODEC_MODE_LZ4};
    uint8_t codec, *src, *dst, *scratch, *back;
    unsigned elem;
    codec_mode_t mode;
    size_t raw, n, stored;
    int rc;

    if (size < 3 || size - 3 > FUZZ_RAW_MAX)
        return 0;
    codec = (data[0] & 1) ? RECORD_CODEC_LZ4 : RECORD_CODEC_RAW;
    elem = elems[(data[0] >> 1) & 3];
    mode = modes[(data[0] >> 3) & 3];
    raw = (size_t)(data[1] | data[2] << 8) % (FUZZ_RAW_MAX + 1);
    n = size - 3;
    src = xmalloc(n);
    memcpy(src, data + 3, n);

    /* decode of arbitrary stored bytes */
    dst = xmalloc(raw);
    scratch = xmalloc(raw);
    rc = codec_decode(codec, elem, src, n, dst, raw, scratch);
    FUZZ_CHECK(rc == 0 || rc == -1);
    if (codec == RECORD_CODEC_RAW) {
        FUZZ_CHECK((rc == 0) == (n == raw));
        if (rc == 0)
            FUZZ_CHECK(memcmp(dst, src, raw) == 0);
    }
    free(dst);
    free(scratch);

    /* round trip of the data as a chunk */
    if (n > 0) {
        dst = xmalloc(n);
        scratch = xmalloc(n);
        stored = codec_encode(mode, 0.9, elem, src, n, dst, n, scratch, &codec);
        if (codec == RECORD_CODEC_LZ4) {
            FUZZ_CHECK(mode != CODEC_MODE_OFF && stored > 0 && stored < n);
            back = xmalloc(n + 1);
            free(scratch);
            scratch = xmalloc(n + 1);
            FUZZ_CHECK(codec_decode(codec, elem, dst, stored, back, n, scratch) == 0);
            FUZZ_CHECK(memcmp(back, src, n) == 0);
            FUZZ_CHECK(codec_decode(codec, elem, dst, stored, back, n + 1, scratch) == -1);
            FUZZ_CHECK(codec_decode(codec, elem, dst, stored, back, n - 1, scratch) == -1);
            free(back);
        } else {
            FUZZ_CHECK(codec == RECORD_CODEC_RAW && stored == n);
        }
        free(dst);
        free(scratch);
    }
    free(src);
    return 0;
}
