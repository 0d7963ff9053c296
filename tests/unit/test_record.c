/*
 * test_record.c - unit tests of the disk record format (record.c), both versions: encode/decode
 * round trips (version 2 with the revision and the raw bytes' csum, block-aligned payload;
 * version 1 still decoded), the header checksum of version 2 and the header + payload checksum
 * of version 1, and every way a header can be corrupted or cut short.
 */
#include "check_main.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "record.h"

static record_meta_t meta(unsigned version)
{
    record_meta_t m;

    memset(&m, 0, sizeof m);
    m.version = (uint16_t)version;
    m.codec = RECORD_CODEC_RAW;
    m.shuffle = 1;
    m.flags = RECORD_F_PARENT;
    m.model_len = 5;
    memcpy(m.model, "llama", 5);
    if (version == RECORD_VERSION) {
        m.revision_len = 3;
        memcpy(m.revision, "r42", 3);
    }
    m.world = 4;
    m.rank = 3;
    m.chunk_tokens = 256;
    m.fingerprint = 0x0123456789abcdefull;
    for (int i = 0; i < 16; i++) {
        m.hash[i] = (uint8_t)i;
        m.parent[i] = (uint8_t)(0xf0 + i);
    }
    m.raw_len = 100;
    m.stored_len = 100;
    return m;
}

/* A whole record (header, padding, payload, padding) in buf (zeroed); returns its span. */
static size_t build(uint8_t *buf, record_meta_t *m, const uint8_t *payload)
{
    int hl;

    if (m->version == RECORD_VERSION)
        m->csum = record_csum(payload, m->raw_len);
    hl = record_encode_header(buf, RECORD_HEADER_MAX, m, payload);
    ck_assert_int_gt(hl, 0);
    memcpy(buf + record_payload_off(m), payload, m->stored_len);
    return (size_t)record_span(m);
}

START_TEST(test_round_trip_v2)
{
    static uint8_t buf[2 * RECORD_BLOCK];
    uint8_t payload[100];
    record_meta_t m = meta(RECORD_VERSION), d;
    size_t hl, total;

    memset(buf, 0, sizeof buf);
    for (int i = 0; i < 100; i++)
        payload[i] = (uint8_t)(i * 7);
    total = build(buf, &m, payload);
    ck_assert_uint_eq(record_header_len(&m), 104); /* 96 + 5 + 3 */
    ck_assert_uint_eq(record_payload_off(&m), RECORD_BLOCK);
    ck_assert_uint_eq(total, 2 * RECORD_BLOCK);
    ck_assert_int_eq(record_decode_header(buf, total, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(hl, 104);
    ck_assert_uint_eq(d.version, RECORD_VERSION);
    ck_assert_str_eq(d.model, "llama");
    ck_assert_str_eq(d.revision, "r42");
    ck_assert_uint_eq(d.revision_len, 3);
    ck_assert_uint_eq(d.world, 4);
    ck_assert_uint_eq(d.rank, 3);
    ck_assert_uint_eq(d.chunk_tokens, 256);
    ck_assert_uint_eq(d.fingerprint, 0x0123456789abcdefull);
    ck_assert_mem_eq(d.hash, m.hash, 16);
    ck_assert_mem_eq(d.parent, m.parent, 16);
    ck_assert_uint_eq(d.flags, RECORD_F_PARENT);
    ck_assert_uint_eq(d.raw_len, 100);
    ck_assert_uint_eq(d.stored_len, 100);
    ck_assert_uint_eq(d.checksum, m.checksum);
    /* csum is XXH3-64 with seed 0 of the raw bytes: what LOAD_OK announces */
    ck_assert_uint_eq(d.csum, XXH3_64bits(payload, sizeof payload));
    ck_assert_uint_eq(record_csum(buf + RECORD_BLOCK, d.raw_len), d.csum);
    ck_assert_mem_eq(buf, "KVTR", 4);
}
END_TEST

START_TEST(test_round_trip_v1)
{
    uint8_t buf[1024] = {0}, payload[100];
    record_meta_t m = meta(RECORD_VERSION_V1), d;
    size_t hl, total;

    for (int i = 0; i < 100; i++)
        payload[i] = (uint8_t)(i * 7);
    total = build(buf, &m, payload);
    ck_assert_uint_eq(record_header_len(&m), 96);
    ck_assert_uint_eq(record_payload_off(&m), 96);
    ck_assert_uint_eq(total, 96 + 104);
    ck_assert_int_eq(record_decode_header(buf, total, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(d.version, RECORD_VERSION_V1);
    ck_assert_uint_eq(hl, 96);
    ck_assert_str_eq(d.model, "llama");
    ck_assert_str_eq(d.revision, "");
    ck_assert_uint_eq(d.checksum, m.checksum);
    ck_assert_int_eq(record_verify_v1(buf, hl, buf + hl, d.stored_len), RECORD_OK);
    /* a version 1 record cannot carry a revision */
    m = meta(RECORD_VERSION_V1);
    m.revision_len = 1;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
}
END_TEST

START_TEST(test_longest_names)
{
    uint8_t buf[RECORD_HEADER_MAX + 8], payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    record_meta_t m = meta(RECORD_VERSION), d;
    size_t hl;

    m.model_len = 255;
    memset(m.model, 'm', 255);
    m.revision_len = 255;
    memset(m.revision, 'r', 255);
    m.raw_len = m.stored_len = 8;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_HEADER_MAX);
    ck_assert_int_eq(record_encode_header(buf, RECORD_HEADER_MAX - 1, &m, payload), RECORD_ESPACE);
    ck_assert_int_eq(record_decode_header(buf, RECORD_HEADER_MAX, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(hl, RECORD_HEADER_MAX);
    ck_assert_uint_eq(strlen(d.model), 255);
    ck_assert_uint_eq(strlen(d.revision), 255);
    ck_assert_uint_eq(record_payload_off(&d), RECORD_BLOCK);
    m = meta(RECORD_VERSION_V1);
    m.model_len = 255;
    memset(m.model, 'm', 255);
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), 344);
    ck_assert_int_eq(record_decode_header(buf, 344, &d, &hl), RECORD_OK);
}
END_TEST

/* Version 2: every header byte is covered by the header checksum (decode refuses a flip with
 * ECHECKSUM or a field check); the payload is covered by csum. */
START_TEST(test_checksum_covers_every_byte_v2)
{
    static uint8_t buf[2 * RECORD_BLOCK], copy[2 * RECORD_BLOCK];
    uint8_t payload[100];
    record_meta_t m = meta(RECORD_VERSION), d;
    size_t total, hl;

    memset(buf, 0, sizeof buf);
    memset(payload, 0x5a, sizeof payload);
    total = build(buf, &m, payload);
    for (size_t i = 0; i < record_header_len(&m); i++) {
        memcpy(copy, buf, total);
        copy[i] ^= 0x01;
        ck_assert_msg(record_decode_header(copy, total, &d, &hl) != RECORD_OK,
                      "flip at header byte %zu went unnoticed", i);
    }
    for (size_t i = 0; i < 100; i++) {
        memcpy(copy, buf, total);
        copy[RECORD_BLOCK + i] ^= 0x80;
        ck_assert_int_eq(record_decode_header(copy, total, &d, &hl), RECORD_OK);
        ck_assert_uint_ne(record_csum(copy + RECORD_BLOCK, d.raw_len), d.csum);
    }
}
END_TEST

/* Version 1: every byte of header and payload is covered by the checksum. */
START_TEST(test_checksum_covers_every_byte_v1)
{
    uint8_t buf[1024] = {0}, payload[100];
    record_meta_t m = meta(RECORD_VERSION_V1), d;
    size_t total, hl;

    memset(payload, 0x5a, sizeof payload);
    total = build(buf, &m, payload);
    for (size_t i = 0; i < 96 + 100; i++) {
        uint8_t copy[1024];
        int rc;
        memcpy(copy, buf, total);
        copy[i] ^= 0x01;
        rc = record_decode_header(copy, total, &d, &hl);
        if (rc == RECORD_OK)
            rc = record_verify_v1(copy, hl, copy + hl, d.stored_len);
        ck_assert_msg(rc != RECORD_OK, "flip at byte %zu went unnoticed", i);
    }
}
END_TEST

/* Each header field set out of range is refused by decode (version 1: no header checksum of
 * its own, so the field checks are what stands; version 2 has both). */
START_TEST(test_corrupt_header_fields_v1)
{
    uint8_t buf[1024] = {0}, payload[100] = {0};
    record_meta_t m = meta(RECORD_VERSION_V1), d;
    size_t total, hl;
    struct {
        size_t off;
        uint8_t val;
        int want;
    } cases[] = {
        {0, 'X', RECORD_EMAGIC},    /* magic */
        {4, 3, RECORD_EVERSION},    /* version */
        {6, 104, RECORD_EHEADER},   /* header_len disagrees with model_len */
        {8, 2, RECORD_EHEADER},     /* unknown codec */
        {9, 3, RECORD_EHEADER},     /* shuffle element size 3 */
        {9, 0, RECORD_EHEADER},     /* shuffle element size 0 */
        {10, 0x4, RECORD_EHEADER},  /* unknown flag */
        {11, 0, RECORD_EHEADER},    /* empty model name */
        {12, 0, RECORD_EHEADER},    /* world 0 (low byte; high byte is 0) */
        {14, 4, RECORD_EHEADER},    /* rank == world */
        {16, 0, RECORD_EHEADER},    /* chunk_tokens 0 (256 = 0x100: low byte 0, high byte 1) */
        {20, 1, RECORD_EHEADER},    /* reserved word */
        {64, 0, RECORD_EHEADER},    /* raw_len 0 */
        {72, 99, RECORD_EHEADER},   /* raw codec with stored != raw */
        {71, 0x40, RECORD_EHEADER}, /* raw_len beyond RECORD_RAW_MAX */
        {88, 0, RECORD_EHEADER},    /* NUL inside the model name */
        {94, 1, RECORD_EHEADER},    /* padding after the model name not zero */
    };

    total = build(buf, &m, payload);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t copy[1024];
        memcpy(copy, buf, total);
        copy[cases[i].off] = cases[i].val;
        if (cases[i].off == 16)
            copy[17] = 0; /* chunk_tokens 256 -> 0 */
        if (cases[i].off == 64)
            memset(copy + 64, 0, 8);
        ck_assert_msg(record_decode_header(copy, total, &d, &hl) == cases[i].want,
                      "case %zu (offset %zu): got %d want %d", i, cases[i].off,
                      record_decode_header(copy, total, &d, &hl), cases[i].want);
    }
    /* lz4 must be strictly smaller than raw */
    m = meta(RECORD_VERSION_V1);
    m.codec = RECORD_CODEC_LZ4;
    m.shuffle = 2;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
    m.stored_len = 60;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), 96);
    ck_assert_int_eq(record_decode_header(buf, 96, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(d.codec, RECORD_CODEC_LZ4);
    ck_assert_uint_eq(d.shuffle, 2);
    buf[72] = 100; /* stored == raw under lz4 */
    ck_assert_int_eq(record_decode_header(buf, 96, &d, &hl), RECORD_EHEADER);
}
END_TEST

START_TEST(test_corrupt_header_fields_v2)
{
    static uint8_t buf[2 * RECORD_BLOCK], copy[2 * RECORD_BLOCK];
    uint8_t payload[100] = {0};
    record_meta_t m = meta(RECORD_VERSION), d;
    size_t total, hl;
    struct {
        size_t off;
        uint8_t val;
        int want;
    } cases[] = {
        {0, 'X', RECORD_EMAGIC},      /* magic */
        {4, 3, RECORD_EVERSION},      /* version */
        {6, 112, RECORD_EHEADER},     /* header_len disagrees with the names */
        {8, 2, RECORD_EHEADER},       /* unknown codec */
        {20, 4, RECORD_EHEADER},      /* revision_len disagrees with header_len */
        {21, 1, RECORD_EHEADER},      /* reserved */
        {23, 1, RECORD_EHEADER},      /* reserved */
        {96, 0, RECORD_EHEADER},      /* NUL inside the model name */
        {101, 0, RECORD_EHEADER},     /* NUL inside the revision */
        {103, 1, RECORD_ECHECKSUM},   /* a value in the names: only the checksum sees it */
        {30, 0xee, RECORD_ECHECKSUM}, /* the fingerprint: only the checksum sees it */
        {88, 0x11, RECORD_ECHECKSUM}, /* csum */
    };

    memset(buf, 0, sizeof buf);
    total = build(buf, &m, payload);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(copy, buf, total);
        copy[cases[i].off] = cases[i].val;
        ck_assert_msg(record_decode_header(copy, total, &d, &hl) == cases[i].want,
                      "case %zu (offset %zu): got %d want %d", i, cases[i].off,
                      record_decode_header(copy, total, &d, &hl), cases[i].want);
    }
}
END_TEST

/* A record cut anywhere inside its header asks for more; decode never reads past avail. */
START_TEST(test_truncated_header)
{
    static uint8_t buf[2 * RECORD_BLOCK];
    uint8_t payload[100] = {0};
    unsigned versions[2] = {RECORD_VERSION_V1, RECORD_VERSION};

    for (int v = 0; v < 2; v++) {
        record_meta_t m = meta(versions[v]), d;
        size_t hl, full;

        memset(buf, 0, sizeof buf);
        build(buf, &m, payload);
        full = record_header_len(&m);
        for (size_t n = 0; n < full; n++) {
            uint8_t *cut = malloc(n ? n : 1);
            memcpy(cut, buf, n);
            ck_assert_msg(record_decode_header(cut, n, &d, &hl) == RECORD_NEED_MORE,
                          "version %u avail %zu", versions[v], n);
            free(cut);
        }
        ck_assert_int_eq(record_decode_header(buf, full, &d, &hl), RECORD_OK);
    }
}
END_TEST

/* Zero bytes (a preallocated or hole-punched tail) are not a record. */
START_TEST(test_zeroes_are_not_a_record)
{
    uint8_t z[RECORD_HEADER_MAX] = {0};
    record_meta_t d;
    size_t hl;

    ck_assert_int_eq(record_decode_header(z, sizeof z, &d, &hl), RECORD_EMAGIC);
    ck_assert_str_eq(record_strerror(RECORD_ECHECKSUM), "checksum mismatch");
}
END_TEST

START_TEST(test_encode_rejects_invalid_meta)
{
    uint8_t buf[1024], payload[4] = {0};
    record_meta_t m = meta(RECORD_VERSION);

    m.rank = 4;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
    m = meta(RECORD_VERSION);
    m.model[2] = '\0';
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
    m = meta(RECORD_VERSION);
    m.revision[1] = '\0';
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
    m = meta(RECORD_VERSION);
    m.version = 3;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
}
END_TEST

static Suite *record_suite(void)
{
    Suite *s = suite_create("record");
    TCase *tc = tcase_create("record");

    tcase_add_test(tc, test_round_trip_v2);
    tcase_add_test(tc, test_round_trip_v1);
    tcase_add_test(tc, test_longest_names);
    tcase_add_test(tc, test_checksum_covers_every_byte_v2);
    tcase_add_test(tc, test_checksum_covers_every_byte_v1);
    tcase_add_test(tc, test_corrupt_header_fields_v1);
    tcase_add_test(tc, test_corrupt_header_fields_v2);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_zeroes_are_not_a_record);
    tcase_add_test(tc, test_encode_rejects_invalid_meta);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = record_suite};
