/*
 * test_record.c - unit tests of the disk record format (record.c): encode/decode round trip,
 * checksum over header and payload, and every way a header can be corrupted or cut short.
 */
#include "check_main.h"

#include <stdlib.h>
#include <string.h>

#include "record.h"

static record_meta_t meta(void)
{
    record_meta_t m;

    memset(&m, 0, sizeof m);
    m.codec = RECORD_CODEC_RAW;
    m.shuffle = 1;
    m.flags = RECORD_F_PARENT;
    m.model_len = 5;
    memcpy(m.model, "llama", 5);
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

/* A whole record (header + payload + padding) in buf; returns its length. */
static size_t build(uint8_t *buf, record_meta_t *m, const uint8_t *payload)
{
    int hl = record_encode_header(buf, RECORD_HEADER_MAX, m, payload);

    ck_assert_int_gt(hl, 0);
    memcpy(buf + hl, payload, m->stored_len);
    memset(buf + hl + m->stored_len, 0, record_align(m->stored_len) - m->stored_len);
    return (size_t)record_total_len(m->model_len, m->stored_len);
}

START_TEST(test_round_trip)
{
    uint8_t buf[1024], payload[100];
    record_meta_t m = meta(), d;
    size_t hl, total;

    for (int i = 0; i < 100; i++)
        payload[i] = (uint8_t)(i * 7);
    total = build(buf, &m, payload);
    ck_assert_uint_eq(record_header_len(5), 96);
    ck_assert_uint_eq(total, 96 + 104);
    ck_assert_int_eq(record_decode_header(buf, total, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(hl, 96);
    ck_assert_str_eq(d.model, "llama");
    ck_assert_uint_eq(d.model_len, 5);
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
    ck_assert_int_eq(record_verify(buf, hl, buf + hl, d.stored_len), RECORD_OK);
    /* the magic is "KVTR" in file order */
    ck_assert_mem_eq(buf, "KVTR", 4);
}
END_TEST

START_TEST(test_longest_model)
{
    uint8_t buf[RECORD_HEADER_MAX + 8], payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    record_meta_t m = meta(), d;
    size_t hl;

    m.model_len = 255;
    memset(m.model, 'm', 255);
    m.raw_len = m.stored_len = 8;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_HEADER_MAX);
    ck_assert_int_eq(record_encode_header(buf, RECORD_HEADER_MAX - 1, &m, payload), RECORD_ESPACE);
    ck_assert_int_eq(record_decode_header(buf, RECORD_HEADER_MAX, &d, &hl), RECORD_OK);
    ck_assert_uint_eq(hl, RECORD_HEADER_MAX);
    ck_assert_uint_eq(strlen(d.model), 255);
}
END_TEST

/* Every byte of header and payload is covered by the checksum: flipping any bit of a field
 * that still decodes makes verify fail. */
START_TEST(test_checksum_covers_every_byte)
{
    uint8_t buf[1024], payload[100];
    record_meta_t m = meta(), d;
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
            rc = record_verify(copy, hl, copy + hl, d.stored_len);
        ck_assert_msg(rc != RECORD_OK, "flip at byte %zu went unnoticed", i);
    }
}
END_TEST

/* Each header field set out of range is refused by decode (and by encode). */
START_TEST(test_corrupt_header_fields)
{
    uint8_t buf[1024], payload[100] = {0};
    record_meta_t m = meta(), d;
    size_t total, hl;
    struct {
        size_t off;
        uint8_t val;
        int want;
    } cases[] = {
        {0, 'X', RECORD_EMAGIC},    /* magic */
        {4, 2, RECORD_EVERSION},    /* version */
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
    m = meta();
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

/* A record cut anywhere inside its header asks for more; decode never reads past avail. */
START_TEST(test_truncated_header)
{
    uint8_t buf[1024], payload[100] = {0};
    record_meta_t m = meta(), d;
    size_t hl;

    build(buf, &m, payload);
    for (size_t n = 0; n < 96; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        ck_assert_msg(record_decode_header(cut, n, &d, &hl) == RECORD_NEED_MORE, "avail %zu", n);
        free(cut);
    }
    ck_assert_int_eq(record_decode_header(buf, 96, &d, &hl), RECORD_OK);
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
    record_meta_t m = meta();

    m.rank = 4;
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
    m = meta();
    m.model[2] = '\0';
    ck_assert_int_eq(record_encode_header(buf, sizeof buf, &m, payload), RECORD_EHEADER);
}
END_TEST

static Suite *record_suite(void)
{
    Suite *s = suite_create("record");
    TCase *tc = tcase_create("record");

    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_longest_model);
    tcase_add_test(tc, test_checksum_covers_every_byte);
    tcase_add_test(tc, test_corrupt_header_fields);
    tcase_add_test(tc, test_truncated_header);
    tcase_add_test(tc, test_zeroes_are_not_a_record);
    tcase_add_test(tc, test_encode_rejects_invalid_meta);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = record_suite};
