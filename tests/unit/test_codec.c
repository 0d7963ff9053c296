/*
 * test_codec.c - unit tests of byte-shuffle + lz4 (codec.c): exact shuffle layout, round trips
 * for every mode, element size and odd length, the auto-mode decisions, decode failures; and
 * compression figures on bf16-like data (normal-distributed floats rounded to bf16), printed
 * for the record (ratios and MB/s of shuffle+lz4 beside plain lz4). Speeds are printed, never
 * asserted.
 */
#include "check_main.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lz4.h>

#include "codec.h"
#include "record.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static double normal(void)
{
    double u1 = ((double)(rng() >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng() >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* n bytes of bf16 values drawn from N(0, sigma^2), round to nearest even. */
static void fill_bf16(uint8_t *buf, size_t n, double sigma)
{
    for (size_t i = 0; i + 1 < n; i += 2) {
        float f = (float)(normal() * sigma);
        uint32_t u;
        memcpy(&u, &f, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        buf[i] = (uint8_t)(u >> 16);
        buf[i + 1] = (uint8_t)(u >> 24);
    }
}

START_TEST(test_shuffle_layout)
{
    const uint8_t src[7] = {1, 2, 3, 4, 5, 6, 7};
    const uint8_t want2[7] = {1, 3, 5, 2, 4, 6, 7};
    const uint8_t want4[7] = {1, 2, 3, 4, 5, 6, 7}; /* one element of 4 + 3 tail bytes */
    uint8_t dst[7], back[7];

    codec_shuffle(dst, src, 7, 2);
    ck_assert_mem_eq(dst, want2, 7);
    codec_unshuffle(back, dst, 7, 2);
    ck_assert_mem_eq(back, src, 7);
    codec_shuffle(dst, src, 7, 4);
    ck_assert_mem_eq(dst, want4, 7);
    {
        const uint8_t s8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        const uint8_t w8[8] = {1, 5, 2, 6, 3, 7, 4, 8};
        uint8_t d8[8], b8[8];
        codec_shuffle(d8, s8, 8, 4);
        ck_assert_mem_eq(d8, w8, 8);
        codec_unshuffle(b8, d8, 8, 4);
        ck_assert_mem_eq(b8, s8, 8);
    }
}
END_TEST

static void round_trip(codec_mode_t mode, unsigned elem, const uint8_t *src, size_t n,
                       uint8_t *codec_out, size_t *stored_out)
{
    uint8_t *dst = malloc(n), *scratch = malloc(n), *back = malloc(n);
    const uint8_t *stored_bytes;
    uint8_t codec;
    size_t stored = codec_encode(mode, 0.9, elem, src, n, dst, n, scratch, &codec);

    if (codec == RECORD_CODEC_RAW) {
        ck_assert_uint_eq(stored, n);
        stored_bytes = src; /* raw: the caller stores src itself */
    } else {
        ck_assert_uint_eq(codec, RECORD_CODEC_LZ4);
        ck_assert_uint_lt(stored, n);
        stored_bytes = dst;
    }
    ck_assert_int_eq(codec_decode(codec, elem, stored_bytes, stored, back, n, scratch), 0);
    ck_assert_mem_eq(back, src, n);
    *codec_out = codec;
    *stored_out = stored;
    free(dst);
    free(scratch);
    free(back);
}

START_TEST(test_round_trips)
{
    static const size_t sizes[] = {1, 63, 64, 65, 4095, 4096, 131071, 131073, 1 << 20};
    static const unsigned elems[] = {1, 2, 4};
    uint8_t *buf = malloc(1 << 20);

    for (int kind = 0; kind < 3; kind++) {
        if (kind == 0)
            memset(buf, 0x42, 1 << 20);
        else if (kind == 1)
            fill_bf16(buf, 1 << 20, 0.5);
        else
            for (size_t i = 0; i < (1 << 20); i++)
                buf[i] = (uint8_t)rng();
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (size_t e = 0; e < 3; e++)
                for (codec_mode_t m = CODEC_MODE_AUTO; m <= CODEC_MODE_OFF; m++) {
                    uint8_t codec;
                    size_t stored;
                    round_trip(m, elems[e], buf, sizes[s], &codec, &stored);
                    if (m == CODEC_MODE_OFF || sizes[s] < 64)
                        ck_assert_uint_eq(codec, RECORD_CODEC_RAW);
                    if (kind == 0 && m != CODEC_MODE_OFF && sizes[s] >= 4096)
                        ck_assert_uint_eq(codec, RECORD_CODEC_LZ4);
                    if (kind == 2 && sizes[s] >= 4096)
                        ck_assert_uint_eq(codec, RECORD_CODEC_RAW);
                }
    }
    free(buf);
}
END_TEST

START_TEST(test_auto_threshold)
{
    size_t n = 1 << 20;
    uint8_t *src = malloc(n), *dst = malloc(n), *scratch = malloc(n);
    uint8_t codec;
    size_t stored;

    fill_bf16(src, n, 1.0);
    /* shuffled bf16 compresses to ~0.8: kept under 0.9, refused under 0.5 */
    stored = codec_encode(CODEC_MODE_AUTO, 0.9, 2, src, n, dst, n, scratch, &codec);
    ck_assert_uint_eq(codec, RECORD_CODEC_LZ4);
    ck_assert_uint_le(stored, (size_t)(0.9 * (double)n));
    stored = codec_encode(CODEC_MODE_AUTO, 0.5, 2, src, n, dst, n, scratch, &codec);
    ck_assert_uint_eq(codec, RECORD_CODEC_RAW);
    ck_assert_uint_eq(stored, n);
    /* "lz4" keeps whatever is smaller than raw */
    stored = codec_encode(CODEC_MODE_LZ4, 0.5, 2, src, n, dst, n, scratch, &codec);
    ck_assert_uint_eq(codec, RECORD_CODEC_LZ4);
    ck_assert_uint_lt(stored, n);
    free(src);
    free(dst);
    free(scratch);
}
END_TEST

START_TEST(test_decode_failures)
{
    uint8_t src[4096], dst[4096], scratch[4096], back[4096];
    uint8_t codec;
    size_t stored;

    memset(src, 7, sizeof src);
    stored =
        codec_encode(CODEC_MODE_LZ4, 0.9, 2, src, sizeof src, dst, sizeof dst, scratch, &codec);
    ck_assert_uint_eq(codec, RECORD_CODEC_LZ4);
    /* wrong raw length, truncated input, unknown codec, raw with a length mismatch */
    ck_assert_int_eq(codec_decode(codec, 2, dst, stored, back, 4095, scratch), -1);
    ck_assert_int_eq(codec_decode(codec, 2, dst, stored - 1, back, 4096, scratch), -1);
    ck_assert_int_eq(codec_decode(9, 2, dst, stored, back, 4096, scratch), -1);
    ck_assert_int_eq(codec_decode(RECORD_CODEC_RAW, 1, src, 4095, back, 4096, scratch), -1);
    ck_assert_int_eq(codec_mode_parse("zstd", &(codec_mode_t){0}), -1);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Figures for the closing note: 2 MiB bf16 chunks, shuffle+lz4 vs plain lz4. */
START_TEST(test_bf16_figures)
{
    const size_t n = 2u << 20;
    const int reps = 8;
    uint8_t *src = malloc(n), *dst = malloc(n), *scratch = malloc(n), *back = malloc(n);
    double ratio[2];

    fill_bf16(src, n, 1.0);
    for (int v = 0; v < 2; v++) {
        unsigned elem = v == 0 ? 2 : 1;
        uint8_t codec = 0;
        size_t stored = 0;
        double t0 = now_s(), tc, td;
        for (int r = 0; r < reps; r++)
            stored = codec_encode(CODEC_MODE_LZ4, 1.0, elem, src, n, dst, n, scratch, &codec);
        tc = now_s() - t0;
        ratio[v] = codec == RECORD_CODEC_LZ4 ? (double)stored / (double)n : 1.0;
        t0 = now_s();
        for (int r = 0; r < reps && codec == RECORD_CODEC_LZ4; r++)
            ck_assert_int_eq(codec_decode(codec, elem, dst, stored, back, n, scratch), 0);
        td = now_s() - t0;
        if (codec == RECORD_CODEC_LZ4)
            ck_assert_mem_eq(back, src, n);
        printf("codec bf16 N(0,1) 2MiB %-13s ratio=%.4f compress_MBps=%.0f "
               "decompress_MBps=%.0f\n",
               v == 0 ? "shuffle+lz4" : "plain lz4", ratio[v], (double)n * reps / tc / 1e6,
               codec == RECORD_CODEC_LZ4 ? (double)n * reps / td / 1e6 : 0.0);
    }
    {
        /* plain lz4's own output size (codec_encode stores raw once lz4 does not shrink) */
        int bound = LZ4_compressBound((int)n);
        char *big = malloc((size_t)bound);
        int out = 0;
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            out = LZ4_compress_default((const char *)src, big, (int)n, bound);
        printf("codec bf16 N(0,1) 2MiB plain lz4 unbounded ratio=%.4f compress_MBps=%.0f\n",
               (double)out / (double)n, (double)n * reps / (now_s() - t0) / 1e6);
        ratio[1] = (double)out / (double)n;
        free(big);
    }
    /* the point of the shuffle: plain lz4 finds (almost) nothing, shuffled it pays */
    ck_assert(ratio[1] > 0.97);
    ck_assert(ratio[0] < 0.90);
    {
        uint8_t codec;
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            codec_encode(CODEC_MODE_AUTO, 0.9, 1, src, n, dst, n, scratch, &codec);
        ck_assert_uint_eq(codec, RECORD_CODEC_RAW);
        printf("codec bf16 N(0,1) 2MiB auto plain lz4 (sampled, refused) MBps=%.0f\n",
               (double)n * reps / (now_s() - t0) / 1e6);
    }
    free(src);
    free(dst);
    free(scratch);
    free(back);
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("codec");

    tcase_add_test(tc, test_shuffle_layout);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_auto_threshold);
    tcase_add_test(tc, test_decode_failures);
    tcase_add_test(tc, test_bf16_figures);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = codec_suite};
