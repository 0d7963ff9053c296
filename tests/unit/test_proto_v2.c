/*
 * test_proto_v2.c - unit tests of what protocol 2 adds to proto/kvt_proto.c (PROTOCOL.md,
 * "Protocol 2"): the per-version head sizes, the new fields at their offsets, the new frames
 * (HELLO revision, LOAD_OK checksums), the arena generation in the common header, and the
 * malformed cases they bring. test_proto.c pins protocol 1 message by message; this file checks
 * that protocol 1 and 2 differ exactly where PROTOCOL.md says and nowhere else.
 *
 * Heads are built at an odd address (UBSan flags unaligned wide loads) and read back with
 * little-endian readers written here, independent of the module's own helpers.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_main.h"
#include "kvt_proto.h"

static const kvt_limits_t lim = {8, 64};

static uint64_t le(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* Head sizes of protocol 2 that differ from protocol 1 (PROTOCOL.md); every other type has the
 * same size in both. */
START_TEST(test_head_sizes_v2)
{
    static const struct {
        int type;
        size_t v1, v2;
    } changed[] = {
        {KVT_MSG_HELLO, 24 + 16, 24 + 32},
        {KVT_MSG_HELLO_OK, 24 + 24, 24 + 48},
        {KVT_MSG_TALLY, 24 + 24, 24 + 56},
        {KVT_MSG_TALLY_OK, 24 + 48, 24 + 96},
    };

    for (int t = 0; t < 256; t++) {
        size_t v1 = kvt_head_size_v(t, 1), v2 = kvt_head_size_v(t, 2);
        int found = 0;
        for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
            if (changed[i].type != t)
                continue;
            found = 1;
            ck_assert_uint_eq(v1, changed[i].v1);
            ck_assert_uint_eq(v2, changed[i].v2);
        }
        if (!found)
            ck_assert_uint_eq(v1, v2);
        ck_assert_uint_eq(kvt_head_size(t), v2);
        ck_assert_uint_eq(kvt_head_size_v(t, 0), v2);
        ck_assert_uint_eq(kvt_head_size_v(t, 3), 0);
        ck_assert_uint_eq(kvt_head_size_v(t, -1), 0);
    }
}
END_TEST

/* hdr.version 0 encodes KVT_PROTO_VERSION; the generation lands at 20..23 in protocol 2 only. */
START_TEST(test_header_version_and_gen)
{
    uint8_t buf[1 + 128], *h = buf + 1;
    kvt_frame_t f[3];
    kvt_msg_t m, d;
    uint8_t hashes[16] = {1};
    uint8_t locs[KVT_LOC_BYTES] = {0};
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_SAVE_COMMIT;
    m.hdr.req_id = 7;
    m.hdr.gen = 0xa1b2c3d4u;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 32);
    ck_assert_uint_eq(h[4], KVT_PROTO_VERSION);
    ck_assert_uint_eq(le(h + 20, 4), 0xa1b2c3d4u);
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){hashes, sizeof hashes};
    f[2] = (kvt_frame_t){locs, sizeof locs};
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_uint_eq(d.hdr.version, 2);
    ck_assert_uint_eq(d.hdr.gen, 0xa1b2c3d4u);

    /* protocol 1: bytes 20..23 stay reserved (0) and are not read back */
    m.hdr.version = 1;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(h[4], 1);
    ck_assert(all_zero(h + 20, 4));
    h[20] = 0x5a; /* a peer's reserved bytes are ignored */
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_uint_eq(d.hdr.version, 1);
    ck_assert_uint_eq(d.hdr.gen, 0);
}
END_TEST

START_TEST(test_commit_checksums_frame)
{
    uint8_t h[128], hashes[32] = {1, [16] = 2}, locs[2 * KVT_LOC_BYTES] = {0}, csums[16];
    kvt_frame_t f[4];
    kvt_msg_t m, d;
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_SAVE_COMMIT;
    m.hdr.req_id = 9;
    n = kvt_head_encode(h, sizeof h, &m);
    kvt_put_u64(csums, 0x0102030405060708ull);
    kvt_put_u64(csums + 8, 0xfeull);
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){hashes, sizeof hashes};
    f[2] = (kvt_frame_t){locs, sizeof locs};
    f[3] = (kvt_frame_t){csums, sizeof csums};
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_ptr_null(d.u.save.csums); /* no frame: the daemon hashes */
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), 0);
    ck_assert_ptr_eq(d.u.save.csums, csums);
    ck_assert_uint_eq(kvt_get_u64(d.u.save.csums + 8), 0xfe);
    f[3].len = 8; /* one checksum for two chunks */
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), KVT_WIRE_EPROTO);
    f[3].len = sizeof csums;
    m.hdr.version = 1; /* protocol 1 has no such frame */
    f[0].len = kvt_head_encode(h, sizeof h, &m);
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), KVT_WIRE_EPROTO);
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
}
END_TEST

START_TEST(test_hello_v2)
{
    static const char model[] = "Qwen/Qwen3-32B";
    char rev[KVT_REVISION_MAX + 1];
    uint8_t buf[1 + 128], *h = buf + 1;
    kvt_frame_t f[3];
    kvt_msg_t m, d;
    size_t n;

    memset(rev, 'r', sizeof rev);
    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_HELLO;
    m.hdr.flags = KVT_HELLO_REPLICATED;
    m.u.hello.layout_fp = 0x0102030405060708ull;
    m.u.hello.chunk_tokens = 256;
    m.u.hello.rank = 3;
    m.u.hello.world = 8;
    m.u.hello.features = 0xfedcba9876543210ull;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 32);
    ck_assert_uint_eq(le(h + 24 + 16, 8), 0xfedcba9876543210ull);
    ck_assert(all_zero(h + 24 + 24, 8));
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){model, strlen(model)};

    /* an empty revision, as ZeroMQ may hand it over: {NULL, 0} */
    f[2] = (kvt_frame_t){NULL, 0};
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_uint_eq(d.u.hello.features, 0xfedcba9876543210ull);
    ck_assert_uint_eq(d.u.hello.revision_len, 0);
    ck_assert_uint_eq(d.u.hello.layout_fp, m.u.hello.layout_fp);
    ck_assert_uint_eq(d.u.hello.world, 8);

    f[2] = (kvt_frame_t){rev, KVT_REVISION_MAX};
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_ptr_eq(d.u.hello.revision, rev);
    ck_assert_uint_eq(d.u.hello.revision_len, KVT_REVISION_MAX);

    f[2].len = KVT_REVISION_MAX + 1;
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), KVT_WIRE_EPROTO);
    rev[5] = '\0';
    f[2].len = 10;
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), KVT_WIRE_EPROTO);
    /* protocol 2 HELLO needs its revision frame; protocol 1 HELLO must not have one */
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), KVT_WIRE_EPROTO);
    ck_assert_uint_eq(d.hdr.req_id, m.hdr.req_id);
    m.hdr.version = 1;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 16);
    f[0].len = n;
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), 0);
    ck_assert_uint_eq(d.u.hello.features, 0);
    ck_assert_ptr_null(d.u.hello.revision);
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_hello_ok_v2)
{
    uint8_t buf[1 + 128], *h = buf + 1, again[128];
    kvt_frame_t f;
    kvt_msg_t m, d;
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_HELLO_OK;
    m.u.hello_ok.ns_id = 0x11223344u;
    m.u.hello_ok.lease_ms = 30000;
    m.u.hello_ok.max_chunk_bytes = 1ull << 26;
    m.u.hello_ok.max_chunks = 4096;
    m.u.hello_ok.daemon_version = 0x000200;
    m.u.hello_ok.features = KVT_FEAT_CHECKSUMS | KVT_FEAT_ARENA_GEN;
    m.u.hello_ok.max_in_flight = 0x55667788u;
    m.u.hello_ok.arena_gen = 0x99aabbccu;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 48);
    ck_assert_uint_eq(le(h + 24 + 24, 8), KVT_FEAT_CHECKSUMS | KVT_FEAT_ARENA_GEN);
    ck_assert_uint_eq(le(h + 24 + 32, 4), 0x55667788u);
    ck_assert_uint_eq(le(h + 24 + 36, 4), 0x99aabbccu);
    ck_assert(all_zero(h + 24 + 40, 8));
    f = (kvt_frame_t){h, n};
    ck_assert_int_eq(kvt_msg_decode(&f, 1, &lim, &d), 0);
    ck_assert_uint_eq(d.u.hello_ok.features, m.u.hello_ok.features);
    ck_assert_uint_eq(d.u.hello_ok.max_in_flight, m.u.hello_ok.max_in_flight);
    ck_assert_uint_eq(d.u.hello_ok.arena_gen, m.u.hello_ok.arena_gen);
    ck_assert_uint_eq(d.u.hello_ok.max_chunks, 4096);
    ck_assert_uint_eq(kvt_head_encode(again, sizeof again, &d), n);
    ck_assert_mem_eq(again, h, n);
    /* the protocol 1 size is malformed in protocol 2 */
    f.len = 24 + 24;
    ck_assert_int_eq(kvt_msg_decode(&f, 1, &lim, &d), KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_load_ok_v2_frames)
{
    uint8_t buf[1 + 128], *h = buf + 1;
    uint8_t status[3] = {KVT_CHUNK_HIT, KVT_CHUNK_MISS, KVT_CHUNK_HIT};
    uint8_t sums[3 * KVT_CSUM_BYTES], locs[3 * KVT_LOC_BYTES] = {0};
    uint8_t p0[5] = {1, 2, 3, 4, 5}, p2[7] = {9};
    kvt_frame_t f[6];
    kvt_msg_t m, d;
    size_t n;

    for (size_t i = 0; i < sizeof sums; i++)
        sums[i] = (uint8_t)(0x40 + i);
    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_LOAD_OK;
    m.u.chunks_ok.hold_ms = 1234;
    n = kvt_head_encode(h, 128, &m);
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){status, 3};
    f[2] = (kvt_frame_t){sums, sizeof sums};
    f[3] = (kvt_frame_t){p0, sizeof p0};
    f[4] = (kvt_frame_t){NULL, 0};
    f[5] = (kvt_frame_t){p2, sizeof p2};
    ck_assert_int_eq(kvt_msg_decode(f, 6, &lim, &d), 0);
    ck_assert_ptr_eq(d.u.chunks_ok.checksums, sums);
    ck_assert_ptr_eq(d.u.chunks_ok.payloads, &f[3]);
    ck_assert_uint_eq(le(d.u.chunks_ok.checksums + 16, 8), le(sums + 16, 8));
    ck_assert_uint_eq(d.u.chunks_ok.hold_ms, 1234);
    /* the checksum frame is required and sized to the status frame */
    f[2].len = sizeof sums - 1;
    ck_assert_int_eq(kvt_msg_decode(f, 6, &lim, &d), KVT_WIRE_EPROTO);
    f[2].len = sizeof sums;
    ck_assert_int_eq(kvt_msg_decode(f, 5, &lim, &d), KVT_WIRE_EPROTO);
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), KVT_WIRE_EPROTO);
    /* a miss still carries no payload */
    f[4] = (kvt_frame_t){p0, 1};
    ck_assert_int_eq(kvt_msg_decode(f, 6, &lim, &d), KVT_WIRE_EPROTO);

    /* shared-memory form: head, status, locations, checksums */
    m.hdr.flags = KVT_LOADR_SHM;
    n = kvt_head_encode(h, 128, &m);
    f[0] = (kvt_frame_t){h, n};
    f[2] = (kvt_frame_t){locs, sizeof locs};
    f[3] = (kvt_frame_t){sums, sizeof sums};
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), 0);
    ck_assert_ptr_eq(d.u.chunks_ok.locs, locs);
    ck_assert_ptr_eq(d.u.chunks_ok.checksums, sums);
    ck_assert_ptr_null(d.u.chunks_ok.payloads);
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), KVT_WIRE_EPROTO);
    f[3].len = 8;
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), KVT_WIRE_EPROTO);

    /* protocol 1 forms carry no checksums */
    m.hdr.version = 1;
    n = kvt_head_encode(h, 128, &m);
    f[0] = (kvt_frame_t){h, n};
    ck_assert_int_eq(kvt_msg_decode(f, 3, &lim, &d), 0);
    ck_assert_ptr_null(d.u.chunks_ok.checksums);
    ck_assert_int_eq(kvt_msg_decode(f, 4, &lim, &d), KVT_WIRE_EPROTO);
}
END_TEST

START_TEST(test_tally_v2)
{
    uint8_t buf[1 + 128], *h = buf + 1, again[128];
    kvt_frame_t f[2];
    kvt_msg_t m, d;
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_TALLY;
    m.hdr.flags = KVT_TALLY_TOKENS;
    m.u.tally.engine_id = 1;
    m.u.tally.paid_total = 2;
    m.u.tally.probes_total = 3;
    m.u.tally.served_tokens_total = 0x0102030405060708ull;
    m.u.tally.lookup_tokens_total = 0x1112131415161718ull;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 56);
    ck_assert_uint_eq(le(h + 24 + 24, 8), 0x0102030405060708ull);
    ck_assert_uint_eq(le(h + 24 + 32, 8), 0x1112131415161718ull);
    ck_assert(all_zero(h + 24 + 40, 16));
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){NULL, 0};
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), 0);
    ck_assert_uint_eq(d.hdr.flags, KVT_TALLY_TOKENS);
    ck_assert_uint_eq(d.u.tally.served_tokens_total, m.u.tally.served_tokens_total);
    ck_assert_uint_eq(d.u.tally.lookup_tokens_total, m.u.tally.lookup_tokens_total);
    ck_assert_uint_eq(d.u.tally.probes_total, 3);
    ck_assert_uint_eq(kvt_head_encode(again, sizeof again, &d), n);
    ck_assert_mem_eq(again, h, n);

    /* protocol 1 has no token totals: they are neither encoded nor decoded */
    m.hdr.version = 1;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 24);
    f[0].len = n;
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), 0);
    ck_assert_uint_eq(d.u.tally.served_tokens_total, 0);
}
END_TEST

START_TEST(test_tally_ok_v2)
{
    uint8_t buf[1 + 128], *h = buf + 1, again[128];
    kvt_frame_t f;
    kvt_msg_t m, d;
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_TALLY_OK;
    m.u.tally_ok.payoff = 0.25;
    m.u.tally_ok.gate_flags = KVT_GATE_ADMISSION_ON;
    m.u.tally_ok.policy = KVT_POLICY_VALUE;
    m.u.tally_ok.density = 0.0625;
    m.u.tally_ok.served_tokens = 0x2122232425262728ull;
    m.u.tally_ok.regret_tokens = 0x3132333435363738ull;
    m.u.tally_ok.written_tokens = 0x4142434445464748ull;
    m.u.tally_ok.declined_tokens = 0x5152535455565758ull;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 96);
    ck_assert_uint_eq(h[24 + 48], KVT_POLICY_VALUE);
    ck_assert(all_zero(h + 24 + 49, 7));
    ck_assert_uint_eq(le(h + 24 + 56, 8), bits(0.0625));
    ck_assert_uint_eq(le(h + 24 + 64, 8), 0x2122232425262728ull);
    ck_assert_uint_eq(le(h + 24 + 72, 8), 0x3132333435363738ull);
    ck_assert_uint_eq(le(h + 24 + 80, 8), 0x4142434445464748ull);
    ck_assert_uint_eq(le(h + 24 + 88, 8), 0x5152535455565758ull);
    f = (kvt_frame_t){h, n};
    ck_assert_int_eq(kvt_msg_decode(&f, 1, &lim, &d), 0);
    ck_assert_uint_eq(d.u.tally_ok.policy, KVT_POLICY_VALUE);
    ck_assert_uint_eq(bits(d.u.tally_ok.density), bits(0.0625));
    ck_assert_uint_eq(d.u.tally_ok.declined_tokens, m.u.tally_ok.declined_tokens);
    ck_assert_uint_eq(bits(d.u.tally_ok.payoff), bits(0.25));
    ck_assert_uint_eq(kvt_head_encode(again, sizeof again, &d), n);
    ck_assert_mem_eq(again, h, n);
}
END_TEST

START_TEST(test_arena_ok_gen)
{
    static const char path[] = "/dev/shm/kvtier.arena";
    uint8_t buf[1 + 128], *h = buf + 1;
    kvt_frame_t f[2];
    kvt_msg_t m, d;
    size_t n;

    memset(&m, 0, sizeof m);
    m.hdr.type = KVT_MSG_ARENA_OK;
    m.u.arena_ok.arena_bytes = 1ull << 33;
    m.u.arena_ok.hold_ms = 10000;
    m.u.arena_ok.arena_gen = 0xdeadbeefu;
    n = kvt_head_encode(h, 128, &m);
    ck_assert_uint_eq(n, 24 + 16);
    ck_assert_uint_eq(le(h + 24 + 12, 4), 0xdeadbeefu);
    f[0] = (kvt_frame_t){h, n};
    f[1] = (kvt_frame_t){path, strlen(path)};
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), 0);
    ck_assert_uint_eq(d.u.arena_ok.arena_gen, 0xdeadbeefu);
    /* protocol 1: reserved, neither sent nor read */
    m.hdr.version = 1;
    n = kvt_head_encode(h, 128, &m);
    ck_assert(all_zero(h + 24 + 12, 4));
    h[24 + 12] = 1;
    ck_assert_int_eq(kvt_msg_decode(f, 2, &lim, &d), 0);
    ck_assert_uint_eq(d.u.arena_ok.arena_gen, 0);
}
END_TEST

START_TEST(test_estale_text)
{
    ck_assert_str_eq(kvt_wire_strerror(KVT_WIRE_ESTALE),
                     "shared-memory request of another arena generation");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("proto_v2");
    TCase *tc = tcase_create("v2");

    tcase_add_test(tc, test_head_sizes_v2);
    tcase_add_test(tc, test_header_version_and_gen);
    tcase_add_test(tc, test_commit_checksums_frame);
    tcase_add_test(tc, test_hello_v2);
    tcase_add_test(tc, test_hello_ok_v2);
    tcase_add_test(tc, test_load_ok_v2_frames);
    tcase_add_test(tc, test_tally_v2);
    tcase_add_test(tc, test_tally_ok_v2);
    tcase_add_test(tc, test_arena_ok_gen);
    tcase_add_test(tc, test_estale_text);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = suite};
