/*
 * fuzz_record.c - libFuzzer target for the disk tier's record header decoder and checksum
 * (daemon/record.h): record_decode_header, record_verify, record_encode_header.
 *
 * The input is what a segment file may hold at a record's offset (a torn write, bit rot, another
 * file), copied into an allocation of exactly its length. Beyond "no sanitizer report", the
 * target checks the contract and aborts (a libFuzzer crash) when it does not hold:
 *  - OK: the header length is record_header_len(model_len), inside the input; every field is in
 *    range (world, rank, chunk tokens, lengths, codec and its stored length, shuffle, flags); the
 *    model name holds no NUL and is NUL-terminated in the result; decoding the header alone gives
 *    the same result, and the header less one byte asks for more; re-encoding the decoded fields
 *    reproduces the header byte for byte except the checksum, and the checksum too exactly when
 *    the payload that follows in the input verifies (record_verify);
 *  - NEED_MORE: the input is shorter than the fixed header or than the header it announces;
 *  - any error: decoding never reads past the input (ASan).
 * Threads: single-threaded. Invariants: no state survives an input; everything is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_proto.h"
#include "record.h"

#define FUZZ_NAME "fuzz_record"
#include "fuzz_check.h"

#define OFF_SUM 80u /* the checksum field (record.h) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size > 0 ? size : 1), out[RECORD_HEADER_MAX];
    record_meta_t m, m2;
    size_t hl = 0, hl2 = 0;
    int rc;

    if (buf == NULL)
        abort();
    if (size > 0)
        memcpy(buf, data, size);
    rc = record_decode_header(buf, size, &m, &hl);
    FUZZ_CHECK(rc == RECORD_OK || rc == RECORD_NEED_MORE || rc == RECORD_EMAGIC ||
               rc == RECORD_EVERSION || rc == RECORD_EHEADER);
    if (rc == RECORD_NEED_MORE)
        FUZZ_CHECK(size < RECORD_HEADER_MAX);
    if (rc == RECORD_OK) {
        int vr, er;
        FUZZ_CHECK(hl == record_header_len(m.model_len) && hl <= size && hl <= RECORD_HEADER_MAX);
        FUZZ_CHECK(m.model_len > 0 && memchr(m.model, '\0', m.model_len) == NULL &&
                   m.model[m.model_len] == '\0');
        FUZZ_CHECK(m.world >= 1 && m.world <= KVT_WORLD_MAX && m.rank < m.world &&
                   m.chunk_tokens > 0);
        FUZZ_CHECK(m.raw_len > 0 && m.raw_len <= RECORD_RAW_MAX && m.stored_len > 0);
        FUZZ_CHECK((m.codec == RECORD_CODEC_RAW && m.stored_len == m.raw_len) ||
                   (m.codec == RECORD_CODEC_LZ4 && m.stored_len < m.raw_len));
        FUZZ_CHECK(m.shuffle == 1 || m.shuffle == 2 || m.shuffle == 4);
        FUZZ_CHECK((m.flags & ~(RECORD_F_REPLICATED | RECORD_F_PARENT)) == 0);
        /* the header alone decodes the same; one byte less asks for more */
        FUZZ_CHECK(record_decode_header(buf, hl, &m2, &hl2) == RECORD_OK && hl2 == hl &&
                   memcmp(&m, &m2, sizeof m) == 0);
        FUZZ_CHECK(record_decode_header(buf, hl - 1, &m2, &hl2) == RECORD_NEED_MORE);
        /* re-encoding: the same bytes; the same checksum exactly when the payload verifies */
        if (size >= hl + m.stored_len) {
            const uint8_t *payload = buf + hl;
            m2 = m;
            er = record_encode_header(out, sizeof out, &m2, payload);
            FUZZ_CHECK(er == (int)hl);
            FUZZ_CHECK(memcmp(out, buf, OFF_SUM) == 0 &&
                       memcmp(out + OFF_SUM + 8, buf + OFF_SUM + 8, hl - OFF_SUM - 8) == 0);
            vr = record_verify(buf, hl, payload, m.stored_len);
            FUZZ_CHECK(vr == RECORD_OK || vr == RECORD_ECHECKSUM);
            FUZZ_CHECK((vr == RECORD_OK) == (memcmp(out + OFF_SUM, buf + OFF_SUM, 8) == 0));
            FUZZ_CHECK(record_verify(out, hl, payload, m.stored_len) == RECORD_OK);
            /* too small a destination is refused */
            FUZZ_CHECK(record_encode_header(out, hl - 1, &m2, payload) == RECORD_ESPACE);
        }
    }
    free(buf);
    return 0;
}
