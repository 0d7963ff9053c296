/*
 * fuzz_record.c - libFuzzer target for the disk tier's record header decoder and checksums
 * (daemon/record.h): record_decode_header, record_verify_v1, record_encode_header, for both
 * record versions (2, written; 1, still read).
 *
 * The input is what a segment file may hold at a record's offset (a torn write, bit rot, another
 * file), copied into an allocation of exactly its length. Beyond "no sanitizer report", the
 * target checks the contract and aborts (a libFuzzer crash) when it does not hold:
 *  - OK: the header length is record_header_len() of the decoded fields, inside the input; every
 *    field is in range (world, rank, chunk tokens, lengths, codec and its stored length, shuffle,
 *    flags); the model name (and the revision) holds no NUL and is NUL-terminated in the result;
 *    decoding the header alone gives the same result, and the header less one byte asks for
 *    more; re-encoding the decoded fields reproduces the header: version 2 byte for byte (its
 *    checksum covers the header, which decode verified), version 1 byte for byte except the
 *    checksum, and the checksum too exactly when the payload that follows in the input verifies
 *    (record_verify_v1);
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

#define OFF_SUM 80u /* the header checksum field (record.h) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Version 1: the checksum covers the payload that follows the header. */
static void check_v1(const uint8_t *buf, size_t size, size_t hl, const record_meta_t *m)
{
    uint8_t out[RECORD_HEADER_MAX];
    const uint8_t *payload = buf + hl;
    record_meta_t m2 = *m;
    int er, vr;

    if (size < hl + m->stored_len)
        return;
    er = record_encode_header(out, sizeof out, &m2, payload);
    FUZZ_CHECK(er == (int)hl);
    FUZZ_CHECK(memcmp(out, buf, OFF_SUM) == 0 &&
               memcmp(out + OFF_SUM + 8, buf + OFF_SUM + 8, hl - OFF_SUM - 8) == 0);
    vr = record_verify_v1(buf, hl, payload, m->stored_len);
    FUZZ_CHECK(vr == RECORD_OK || vr == RECORD_ECHECKSUM);
    FUZZ_CHECK((vr == RECORD_OK) == (memcmp(out + OFF_SUM, buf + OFF_SUM, 8) == 0));
    FUZZ_CHECK(record_verify_v1(out, hl, payload, m->stored_len) == RECORD_OK);
    FUZZ_CHECK(record_encode_header(out, hl - 1, &m2, payload) == RECORD_ESPACE);
}

/* Version 2: the header checksum covers the header only, and decode verified it. */
static void check_v2(const uint8_t *buf, size_t hl, const record_meta_t *m)
{
    uint8_t out[RECORD_HEADER_MAX];
    record_meta_t m2 = *m;

    FUZZ_CHECK(m->revision_len == 0 || (memchr(m->revision, '\0', m->revision_len) == NULL &&
                                        m->revision[m->revision_len] == '\0'));
    FUZZ_CHECK(record_payload_off(m) == record_block(hl) &&
               record_span(m) == record_block(hl) + record_block(m->stored_len));
    FUZZ_CHECK(record_encode_header(out, sizeof out, &m2, NULL) == (int)hl);
    FUZZ_CHECK(memcmp(out, buf, hl) == 0 && m2.checksum == m->checksum);
    FUZZ_CHECK(record_encode_header(out, hl - 1, &m2, NULL) == RECORD_ESPACE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size > 0 ? size : 1);
    record_meta_t m, m2;
    size_t hl = 0, hl2 = 0;
    int rc;

    if (buf == NULL)
        abort();
    if (size > 0)
        memcpy(buf, data, size);
    rc = record_decode_header(buf, size, &m, &hl);
    FUZZ_CHECK(rc == RECORD_OK || rc == RECORD_NEED_MORE || rc == RECORD_EMAGIC ||
               rc == RECORD_EVERSION || rc == RECORD_EHEADER || rc == RECORD_ECHECKSUM);
    if (rc == RECORD_NEED_MORE)
        FUZZ_CHECK(size < RECORD_HEADER_MAX);
    if (rc == RECORD_OK) {
        FUZZ_CHECK(m.version == RECORD_VERSION || m.version == RECORD_VERSION_V1);
        FUZZ_CHECK(hl == record_header_len(&m) && hl <= size && hl <= RECORD_HEADER_MAX);
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
        if (m.version == RECORD_VERSION_V1)
            check_v1(buf, size, hl, &m);
        else
            check_v2(buf, hl, &m);
    }
    free(buf);
    return 0;
}
