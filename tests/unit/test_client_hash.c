/*
 * test_client_hash.c - unit tests of the client library's pure functions (client/hash.c,
 * client/shm.c's checksums and kvt_strerror): hash chains, their known value, hash text form,
 * layout fingerprints (with the 0.2 revision), engine-native keys, chunk checksums.
 *
 * The known vectors are checked twice: against a literal computed once outside this code base
 * (XXH3_128bits for the chain; `xxhsum -H2` / `xxhsum -H3` of the bytes for the engine keys and
 * the checksum), and against libxxhash called here on a buffer built by hand, so that a change of
 * byte order, of the prefix layout or of the canonical form in hash.c cannot pass.
 */
#include "check_main.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "kvtier.h"

#define CT 16 /* tokens per chunk in these tests */

static void fill_tokens(uint32_t *t, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        t[i] = seed + (uint32_t)i * 2654435761u;
}

START_TEST(chain_is_deterministic)
{
    uint32_t tok[3 * CT];
    kvt_hash_t a[3], b[3];

    fill_tokens(tok, 3 * CT, 11);
    ck_assert_uint_eq(kvt_hash_chain(tok, 3 * CT, CT, NULL, a, 3), 3);
    ck_assert_uint_eq(kvt_hash_chain(tok, 3 * CT, CT, NULL, b, 3), 3);
    ck_assert_mem_eq(a, b, sizeof a);
    /* chained hashes of different chunks differ */
    ck_assert_int_ne(memcmp(&a[0], &a[1], sizeof a[0]), 0);
    ck_assert_int_ne(memcmp(&a[1], &a[2], sizeof a[0]), 0);
}
END_TEST

START_TEST(chain_parent_continues_the_chain)
{
    uint32_t tok[2 * CT];
    kvt_hash_t both[2], first, second, zero, with_zero;

    fill_tokens(tok, 2 * CT, 5);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, both, 2), 2);
    ck_assert_uint_eq(kvt_hash_chain(tok, CT, CT, NULL, &first, 1), 1);
    ck_assert_mem_eq(&first, &both[0], sizeof first);
    ck_assert_uint_eq(kvt_hash_chain(tok + CT, CT, CT, &first, &second, 1), 1);
    ck_assert_mem_eq(&second, &both[1], sizeof second);
    /* no parent means a parent of 16 zero bytes */
    memset(&zero, 0, sizeof zero);
    ck_assert_uint_eq(kvt_hash_chain(tok, CT, CT, &zero, &with_zero, 1), 1);
    ck_assert_mem_eq(&with_zero, &both[0], sizeof with_zero);
    /* a different parent gives a different hash for the same tokens */
    ck_assert_int_ne(memcmp(&second, &first, sizeof first), 0);
    ck_assert_uint_eq(kvt_hash_chain(tok + CT, CT, CT, NULL, &second, 1), 1);
    ck_assert_int_ne(memcmp(&second, &both[1], sizeof second), 0);
}
END_TEST

START_TEST(chain_parent_may_alias_output)
{
    uint32_t tok[2 * CT];
    kvt_hash_t both[2], h;

    fill_tokens(tok, 2 * CT, 9);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, both, 2), 2);
    ck_assert_uint_eq(kvt_hash_chain(tok, CT, CT, NULL, &h, 1), 1);
    ck_assert_uint_eq(kvt_hash_chain(tok + CT, CT, CT, &h, &h, 1), 1);
    ck_assert_mem_eq(&h, &both[1], sizeof h);
}
END_TEST

START_TEST(chain_ignores_partial_chunk_and_respects_cap)
{
    uint32_t tok[2 * CT + 3];
    kvt_hash_t full[2], part[3], capped[2];

    fill_tokens(tok, 2 * CT + 3, 3);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, full, 2), 2);
    memset(part, 0xab, sizeof part);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT + 3, CT, NULL, part, 3), 2);
    ck_assert_mem_eq(part, full, sizeof full);
    /* the third slot was not written */
    for (size_t i = 0; i < sizeof part[2].b; i++)
        ck_assert_uint_eq(part[2].b[i], 0xab);
    ck_assert_uint_eq(kvt_hash_chain(tok, CT - 1, CT, NULL, part, 3), 0);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, capped, 1), 1);
    ck_assert_mem_eq(&capped[0], &full[0], sizeof capped[0]);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, 0, NULL, capped, 2), 0);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, capped, 0), 0);
}
END_TEST

START_TEST(chain_changes_with_one_token)
{
    uint32_t tok[2 * CT];
    kvt_hash_t base[2], h[2];

    fill_tokens(tok, 2 * CT, 21);
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, base, 2), 2);
    /* a change in chunk 1 changes only hash 1 */
    tok[CT + 7] ^= 1;
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, h, 2), 2);
    ck_assert_mem_eq(&h[0], &base[0], sizeof h[0]);
    ck_assert_int_ne(memcmp(&h[1], &base[1], sizeof h[1]), 0);
    tok[CT + 7] ^= 1;
    /* a change in chunk 0 changes both (chaining) */
    tok[CT - 1] += 1;
    ck_assert_uint_eq(kvt_hash_chain(tok, 2 * CT, CT, NULL, h, 2), 2);
    ck_assert_int_ne(memcmp(&h[0], &base[0], sizeof h[0]), 0);
    ck_assert_int_ne(memcmp(&h[1], &base[1], sizeof h[1]), 0);
}
END_TEST

START_TEST(chain_known_vector)
{
    /* chunk of 4 tokens 7, 1000010, 2000013, 3000016; no parent */
    static const uint32_t tok[4] = {7, 1000010, 2000013, 3000016};
    uint8_t input[16 + 4 * 4] = {0}, expect[16];
    kvt_hash_t h, parsed;
    XXH128_hash_t ref;
    char hex[33];

    ck_assert_uint_eq(kvt_hash_chain(tok, 4, 4, NULL, &h, 1), 1);
    kvt_hash_format(&h, hex);
    ck_assert_str_eq(hex, "61c8de342aac3d2fbbdf080c30c10b4e");

    /* the same, computed here: zero prev || LE u32 tokens, high64 BE then low64 BE */
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            input[16 + 4 * i + k] = (uint8_t)(tok[i] >> (8 * k));
    ref = XXH3_128bits(input, sizeof input);
    for (int k = 0; k < 8; k++) {
        expect[k] = (uint8_t)(ref.high64 >> (56 - 8 * k));
        expect[8 + k] = (uint8_t)(ref.low64 >> (56 - 8 * k));
    }
    ck_assert_mem_eq(h.b, expect, sizeof expect);

    /* second link: prev = h */
    memcpy(input, h.b, 16);
    ref = XXH3_128bits(input, sizeof input);
    ck_assert_uint_eq(kvt_hash_chain(tok, 4, 4, &h, &parsed, 1), 1);
    for (int k = 0; k < 8; k++) {
        ck_assert_uint_eq(parsed.b[k], (uint8_t)(ref.high64 >> (56 - 8 * k)));
        ck_assert_uint_eq(parsed.b[8 + k], (uint8_t)(ref.low64 >> (56 - 8 * k)));
    }
}
END_TEST

START_TEST(hash_parse_format_round_trip)
{
    kvt_hash_t h, g;
    char hex[33];

    ck_assert_int_eq(kvt_hash_parse("00112233445566778899aabbccddeeff", &h), 0);
    for (int i = 0; i < 16; i++)
        ck_assert_uint_eq(h.b[i], (uint8_t)(i * 0x11));
    kvt_hash_format(&h, hex);
    ck_assert_str_eq(hex, "00112233445566778899aabbccddeeff");
    /* upper case is accepted, output is lower case */
    ck_assert_int_eq(kvt_hash_parse("DEADBEEF00000000FFFFFFFF0123ABCD", &g), 0);
    kvt_hash_format(&g, hex);
    ck_assert_str_eq(hex, "deadbeef00000000ffffffff0123abcd");
    ck_assert_int_eq(kvt_hash_parse(hex, &h), 0);
    ck_assert_mem_eq(&h, &g, sizeof h);
}
END_TEST

START_TEST(hash_parse_rejects_invalid)
{
    static const char *const bad[] = {
        "",
        "0011223344556677",
        "00112233445566778899aabbccddeef",   /* 31 digits */
        "00112233445566778899aabbccddeeff0", /* 33 digits */
        "00112233445566778899aabbccddeefg",
        "0x112233445566778899aabbccddeeff",
        " 0112233445566778899aabbccddeeff",
        "00112233445566778899aabbccddeef ",
        "00112233-5566778899aabbccddeeff0",
    };
    kvt_hash_t h, before;

    memset(&h, 0x5a, sizeof h);
    before = h;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(kvt_hash_parse(bad[i], &h) == KVT_EINVAL, "accepted '%s'", bad[i]);
        ck_assert_mem_eq(&h, &before, sizeof h); /* untouched on error */
    }
    ck_assert_int_eq(kvt_hash_parse(NULL, &h), KVT_EINVAL);
    ck_assert_int_eq(kvt_hash_parse("00112233445566778899aabbccddeeff", NULL), KVT_EINVAL);
}
END_TEST

static kvt_ns_desc_t base_desc(void)
{
    kvt_ns_desc_t d = {.model = "m",
                       .dtype = "bf16",
                       .chunk_tokens = 256,
                       .num_layers = 32,
                       .num_kv_heads = 8,
                       .head_dim = 128,
                       .world_size = 4,
                       .mla = 0,
                       .hash_seed = 42,
                       .tenant = "t"};
    return d;
}

START_TEST(fingerprint_differs_per_field)
{
    kvt_ns_desc_t d = base_desc(), e;
    uint64_t base = kvt_ns_fingerprint(&d), seen[10];
    size_t nseen = 0;

    ck_assert_uint_eq(kvt_ns_fingerprint(&d), base);
#define VARY(stmt)                                                                                 \
    do {                                                                                           \
        e = base_desc();                                                                           \
        stmt;                                                                                      \
        seen[nseen] = kvt_ns_fingerprint(&e);                                                      \
        ck_assert_msg(seen[nseen] != base, "unchanged by: %s", #stmt);                             \
        for (size_t k = 0; k < nseen; k++)                                                         \
            ck_assert_msg(seen[k] != seen[nseen], "collision: %s", #stmt);                         \
        nseen++;                                                                                   \
    } while (0)
    VARY(e.dtype = "fp8");
    VARY(e.chunk_tokens = 128);
    VARY(e.num_layers = 33);
    VARY(e.num_kv_heads = 16);
    VARY(e.head_dim = 64);
    VARY(e.world_size = 8);
    VARY(e.mla = 1);
    VARY(e.hash_seed = 43);
    VARY(e.tenant = "u");
    VARY(e.tenant = NULL);
#undef VARY

    /* the model name is not part of the layout */
    e = base_desc();
    e.model = "another-model";
    ck_assert_uint_eq(kvt_ns_fingerprint(&e), base);
    /* mla is a flag: any non-zero value is the same layout */
    e = base_desc();
    e.mla = 1;
    d = base_desc();
    d.mla = 7;
    ck_assert_uint_eq(kvt_ns_fingerprint(&e), kvt_ns_fingerprint(&d));
    /* NULL strings are empty strings */
    e = base_desc();
    e.dtype = NULL;
    d = base_desc();
    d.dtype = "";
    ck_assert_uint_eq(kvt_ns_fingerprint(&e), kvt_ns_fingerprint(&d));
    /* length prefixes keep the two strings apart */
    e = base_desc();
    e.dtype = "bf16t";
    e.tenant = "";
    d = base_desc();
    d.dtype = "bf16";
    d.tenant = "t";
    ck_assert_uint_ne(kvt_ns_fingerprint(&e), kvt_ns_fingerprint(&d));
}
END_TEST

/* The bytes kvt_hash_key hashes: tag, LE u32 salt length, salt, key. */
static size_t key_input(uint8_t *buf, const void *key, size_t klen, const void *salt, size_t slen)
{
    static const uint8_t tag[16] = "kvtier-key-v1\0\0";

    memcpy(buf, tag, 16);
    for (int k = 0; k < 4; k++)
        buf[16 + k] = (uint8_t)(slen >> (8 * k));
    memcpy(buf + 20, salt, slen);
    memcpy(buf + 20 + slen, key, klen);
    return 20 + slen + klen;
}

static void expect_canonical(const kvt_hash_t *h, const uint8_t *input, size_t n)
{
    XXH128_hash_t ref = XXH3_128bits(input, n);

    for (int k = 0; k < 8; k++) {
        ck_assert_uint_eq(h->b[k], (uint8_t)(ref.high64 >> (56 - 8 * k)));
        ck_assert_uint_eq(h->b[8 + k], (uint8_t)(ref.low64 >> (56 - 8 * k)));
    }
}

START_TEST(key_known_vectors)
{
    /* vLLM: a 32-byte block hash (bytes 0..31) and group index 3 (LE u32), no salt */
    uint8_t vllm[36], in[128];
    /* SGLang: a page's SHA-256 in hex (of the empty string here), salted by a tenant */
    static const char sgl[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    kvt_hash_t h;
    char hex[33];
    size_t n;

    for (int i = 0; i < 32; i++)
        vllm[i] = (uint8_t)i;
    vllm[32] = 3;
    vllm[33] = vllm[34] = vllm[35] = 0;
    kvt_hash_key(vllm, sizeof vllm, NULL, 0, &h);
    kvt_hash_format(&h, hex);
    ck_assert_str_eq(hex, "598f2390956c327b4930b4ab2d8f7bdf"); /* xxhsum -H2 of the input */
    n = key_input(in, vllm, sizeof vllm, "", 0);
    expect_canonical(&h, in, n);
    /* the chunk checksum of the same input bytes: xxhsum -H3 */
    ck_assert_uint_eq(kvt_checksum(in, n), 0x76a604be8688a2f5ull);

    kvt_hash_key(sgl, 64, "tenant-a", 8, &h);
    kvt_hash_format(&h, hex);
    ck_assert_str_eq(hex, "690bc1bed12d36716fe95a4646308aec");
    n = key_input(in, sgl, 64, "tenant-a", 8);
    expect_canonical(&h, in, n);
}
END_TEST

START_TEST(key_distinct_inputs_distinct_hashes)
{
    uint8_t key[32] = {0};
    kvt_hash_t seen[8], batch[3], one;
    size_t k = 0;

    kvt_hash_key(key, 32, NULL, 0, &seen[k++]);
    key[31] = 1;
    kvt_hash_key(key, 32, NULL, 0, &seen[k++]); /* one bit of the key */
    kvt_hash_key(key, 31, NULL, 0, &seen[k++]); /* its length */
    kvt_hash_key(key, 32, "g1", 2, &seen[k++]); /* a salt */
    kvt_hash_key(key, 32, "g2", 2, &seen[k++]); /* another salt */
    kvt_hash_key("bc", 2, "a", 1, &seen[k++]);  /* the salt/key boundary... */
    kvt_hash_key("c", 1, "ab", 2, &seen[k++]);  /* ...is kept by the length prefix */
    ck_assert_uint_eq(
        kvt_hash_chain((const uint32_t *)(const void *)key, 8, 8, NULL, &seen[k++], 1),
        1); /* a token chain over the same bytes: another domain */
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(memcmp(&seen[i], &seen[j], sizeof seen[i]) != 0, "%zu == %zu", i, j);
    /* the batch form is the single form, key after key */
    {
        uint8_t keys[3 * 20];
        for (size_t i = 0; i < sizeof keys; i++)
            keys[i] = (uint8_t)(i * 37);
        kvt_hash_keys(keys, 20, 3, "s", 1, batch);
        for (size_t i = 0; i < 3; i++) {
            kvt_hash_key(keys + 20 * i, 20, "s", 1, &one);
            ck_assert_mem_eq(&one, &batch[i], sizeof one);
        }
    }
}
END_TEST

START_TEST(copy_checksum_is_one_pass_of_both)
{
    static const size_t sizes[] = {0, 1, 63, 16383, 16384, 16385, 100000, (2u << 20) + 3};
    size_t max = (2u << 20) + 3;
    uint8_t *src = malloc(max), *dst = malloc(max);

    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t i = 0; i < max; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        memset(dst, 0x5a, max);
        ck_assert_uint_eq(kvt_copy_checksum(dst, src, sizes[k]), XXH3_64bits(src, sizes[k]));
        ck_assert_uint_eq(kvt_checksum(src, sizes[k]), XXH3_64bits(src, sizes[k]));
        ck_assert_mem_eq(dst, src, sizes[k]);
        if (sizes[k] < max)
            ck_assert_uint_eq(dst[sizes[k]], 0x5a); /* not one byte more */
    }
    free(src);
    free(dst);
}
END_TEST

START_TEST(fingerprint_revision)
{
    kvt_ns_desc_t d = base_desc(), e = base_desc();
    uint64_t base = kvt_ns_fingerprint(&d), r1, r2;

    e.revision = ""; /* no revision: the 0.1 fingerprint */
    ck_assert_uint_eq(kvt_ns_fingerprint(&e), base);
    e.revision = "r1";
    r1 = kvt_ns_fingerprint(&e);
    e.revision = "r2";
    r2 = kvt_ns_fingerprint(&e);
    ck_assert_uint_ne(r1, base);
    ck_assert_uint_ne(r2, base);
    ck_assert_uint_ne(r1, r2);
    /* the revision is length-prefixed after the tenant: ("t", "1x") is not ("t1", "x") */
    e = base_desc();
    e.tenant = "t";
    e.revision = "1x";
    d = base_desc();
    d.tenant = "t1";
    d.revision = "x";
    ck_assert_uint_ne(kvt_ns_fingerprint(&e), kvt_ns_fingerprint(&d));
}
END_TEST

START_TEST(strerror_names_every_code)
{
    static const int codes[] = {KVT_OK,       KVT_EPROTO,    KVT_EVERSION,  KVT_ENONS,
                                KVT_ETOOBIG,  KVT_EINVAL,    KVT_ECONFLICT, KVT_EBUSY,
                                KVT_EUNSUPP,  KVT_ETIMEDOUT, KVT_ENOMEM,    KVT_ECONNECT,
                                KVT_EBUFSIZE, KVT_ESYS,      KVT_ESTALE,    KVT_ECLOSED};
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown = kvt_strerror(-9999);

    ck_assert_str_eq(unknown, "unknown error");
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_ne(kvt_strerror(codes[i]), unknown);
        for (size_t k = 0; k < i; k++)
            ck_assert_str_ne(kvt_strerror(codes[i]), kvt_strerror(codes[k]));
    }
}
END_TEST

static Suite *client_hash_suite(void)
{
    Suite *s = suite_create("client_hash");
    TCase *tc = tcase_create("hash");

    tcase_add_test(tc, chain_is_deterministic);
    tcase_add_test(tc, chain_parent_continues_the_chain);
    tcase_add_test(tc, chain_parent_may_alias_output);
    tcase_add_test(tc, chain_ignores_partial_chunk_and_respects_cap);
    tcase_add_test(tc, chain_changes_with_one_token);
    tcase_add_test(tc, chain_known_vector);
    tcase_add_test(tc, hash_parse_format_round_trip);
    tcase_add_test(tc, hash_parse_rejects_invalid);
    tcase_add_test(tc, fingerprint_differs_per_field);
    tcase_add_test(tc, fingerprint_revision);
    tcase_add_test(tc, key_known_vectors);
    tcase_add_test(tc, key_distinct_inputs_distinct_hashes);
    tcase_add_test(tc, copy_checksum_is_one_pass_of_both);
    tcase_add_test(tc, strerror_names_every_code);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = client_hash_suite};
