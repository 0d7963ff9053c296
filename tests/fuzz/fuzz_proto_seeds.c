/*
 * fuzz_proto_seeds.c - writes the seed corpus of fuzz_proto (tests/fuzz/corpus/).
 *
 * Usage: fuzz_proto_seeds DIR. Writes one file per message type in protocol 1, one per message
 * whose frames or head differ in protocol 2 (names ending in _v2), each a valid message within
 * the fuzz limits of fuzz_proto.h, plus two invalid ones (a version-3 head, an unknown type), in
 * the input format that fuzz_proto.h describes. Files are named after the message. The committed
 * corpus was produced by this tool; run it again after a protocol change. Single-threaded; exits 0
 * or 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_proto.h"
#include "kvt_proto.h"

#define UNKNOWN_TYPE 18 /* a gap in the type numbers */

typedef struct {
    const char *name;
    kvt_msg_t m;
    kvt_frame_t f[8];
    size_t n;
} seed_t;

static const uint8_t hashes[2 * KVT_HASH_BYTES] = {
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
};
static const uint8_t bytes8[8] = {'k', 'v', 'c', 'h', 'u', 'n', 'k', '!'};

static int write_seed(const char *dir, const seed_t *s)
{
    uint8_t head[128];
    char path[4096];
    size_t hl = kvt_head_encode(head, sizeof head, &s->m);
    FILE *fp;
    int ok;

    if (hl == 0 && s->m.hdr.type != UNKNOWN_TYPE)
        return -1;
    if (s->m.hdr.type == UNKNOWN_TYPE) { /* unknown type: a bare common header */
        kvt_msg_t tmp = s->m;
        tmp.hdr.type = KVT_MSG_SAVE_OK;
        hl = kvt_head_encode(head, sizeof head, &tmp);
        head[5] = UNKNOWN_TYPE;
    }
    if (strcmp(s->name, "bad_version") == 0)
        head[4] = KVT_PROTO_VERSION + 1;
    snprintf(path, sizeof path, "%s/%s", dir, s->name);
    fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    ok = fputc((int)(s->n + 1), fp) != EOF;
    for (size_t i = 0; i <= s->n && ok; i++) {
        const void *d = i == 0 ? head : s->f[i - 1].data;
        size_t len = i == 0 ? hl : s->f[i - 1].len;
        ok = fputc((int)(len & 0xff), fp) != EOF && fputc((int)(len >> 8), fp) != EOF &&
             (len == 0 || fwrite(d, len, 1, fp) == 1);
    }
    if (fclose(fp) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

static void frame(seed_t *s, const void *data, size_t len)
{
    s->f[s->n].data = data;
    s->f[s->n].len = len;
    s->n++;
}

static seed_t seed(const char *name, int type, uint16_t flags)
{
    seed_t s;

    memset(&s, 0, sizeof s);
    s.name = name;
    s.m.hdr.version = strstr(name, "_v2") != NULL ? 2 : 1;
    s.m.hdr.type = (uint8_t)type;
    s.m.hdr.flags = flags;
    s.m.hdr.req_id = 0x1000 + (uint64_t)type;
    s.m.hdr.ns_id = type == KVT_MSG_HELLO ? 0 : 7;
    return s;
}

int main(int argc, char **argv)
{
    static const uint8_t st_begin[] = {KVT_CHUNK_WANTED, KVT_CHUNK_EXISTS};
    static const uint8_t st_save[] = {KVT_CHUNK_STORED, KVT_CHUNK_SKIPPED};
    static const uint8_t st_load[] = {KVT_CHUNK_HIT, KVT_CHUNK_MISS};
    static const uint8_t ranks[8] = {3, 0, 0, 0, 2, 0, 0, 0};
    static const char text[] = "lookup: malformed message";
    uint8_t reasons[2 * (1 + KVT_REASON_NAME_MAX + 8)];
    size_t rlen;
    static const uint8_t sums[2 * KVT_CSUM_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8};
    seed_t s[32];
    uint8_t lens[2 * 8], locs[2 * KVT_LOC_BYTES];
    int k = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 1;
    }
    kvt_put_u64(lens, 8);
    kvt_put_u64(lens + 8, FUZZ_MAX_PAYLOAD);
    kvt_put_u64(locs, 4096);
    kvt_put_u64(locs + 8, 8);
    memset(locs + KVT_LOC_BYTES, 0, KVT_LOC_BYTES);
    rlen = kvt_reason_encode(reasons, sizeof reasons, "paid", 4, 12);
    rlen += kvt_reason_encode(reasons + rlen, sizeof reasons - rlen, "not_reused", 10, 3);

    s[k] = seed("hello", KVT_MSG_HELLO, KVT_HELLO_REPLICATED);
    s[k].m.u.hello.layout_fp = 0x0123456789abcdefull;
    s[k].m.u.hello.chunk_tokens = 256;
    s[k].m.u.hello.rank = 1;
    s[k].m.u.hello.world = 2;
    frame(&s[k++], "llama", 5);

    s[k] = seed("hello_ok", KVT_MSG_HELLO_OK, 0);
    s[k].m.u.hello_ok.ns_id = 7;
    s[k].m.u.hello_ok.lease_ms = 5000;
    s[k].m.u.hello_ok.max_chunk_bytes = FUZZ_MAX_PAYLOAD;
    s[k].m.u.hello_ok.max_chunks = FUZZ_MAX_HASHES;
    s[k++].m.u.hello_ok.daemon_version = 0x000100;

    s[k] = seed("lookup", KVT_MSG_LOOKUP, KVT_LOOKUP_LEASE | KVT_LOOKUP_PROMPT);
    s[k].m.u.lookup.rank = KVT_RANK_ALL;
    s[k].m.u.lookup.prompt_tokens = 1000;
    s[k].m.u.lookup.hbm_tokens = 256;
    frame(&s[k++], hashes, sizeof hashes);

    s[k] = seed("lookup_ok", KVT_MSG_LOOKUP_OK, KVT_LOOKUPR_LEASED);
    s[k].m.u.lookup_ok.hit = 2;
    s[k].m.u.lookup_ok.lease_ms = 5000;
    frame(&s[k++], ranks, sizeof ranks);

    s[k] = seed("save_begin", KVT_MSG_SAVE_BEGIN, KVT_SAVE_PARENT | KVT_SAVE_OPID);
    s[k].m.u.save.op_id = 99;
    memset(s[k].m.u.save.parent.b, 0x5a, KVT_HASH_BYTES);
    frame(&s[k++], hashes, sizeof hashes);

    s[k] = seed("save_begin_ok", KVT_MSG_SAVE_BEGIN_OK, 0);
    frame(&s[k++], st_begin, sizeof st_begin);

    s[k] = seed("save_data", KVT_MSG_SAVE_DATA, KVT_SAVE_OPID);
    s[k].m.u.save.op_id = 99;
    frame(&s[k], hashes, sizeof hashes);
    frame(&s[k], bytes8, sizeof bytes8);
    frame(&s[k++], "", 0);

    s[k] = seed("save_ok", KVT_MSG_SAVE_OK, 0);
    frame(&s[k++], st_save, sizeof st_save);

    s[k] = seed("load", KVT_MSG_LOAD, 0);
    s[k].m.u.load.rank = 1;
    frame(&s[k++], hashes, KVT_HASH_BYTES);

    s[k] = seed("load_ok", KVT_MSG_LOAD_OK, 0);
    frame(&s[k], st_load, sizeof st_load);
    frame(&s[k], bytes8, sizeof bytes8);
    frame(&s[k++], "", 0);

    s[k] = seed("tally", KVT_MSG_TALLY, 0);
    s[k].m.u.tally.engine_id = 42;
    s[k].m.u.tally.paid_total = 12;
    s[k].m.u.tally.probes_total = 15;
    frame(&s[k++], reasons, rlen);

    s[k] = seed("tally_ok", KVT_MSG_TALLY_OK, 0);
    s[k].m.u.tally_ok.payoff = 0.8;
    s[k].m.u.tally_ok.share = 1.0;
    s[k].m.u.tally_ok.act_ema = 0.25;
    s[k].m.u.tally_ok.probes = 15;
    s[k].m.u.tally_ok.lookups = 40;
    s[k++].m.u.tally_ok.gate_flags = KVT_GATE_ADMISSION_ON | KVT_GATE_SKIP_ON;

    s[k] = seed("error", KVT_MSG_ERROR, 0);
    s[k].m.u.error.code = KVT_WIRE_EPROTO;
    frame(&s[k++], text, sizeof text - 1);

    s[k] = seed("load_ok_shm", KVT_MSG_LOAD_OK, KVT_LOADR_SHM);
    s[k].m.u.chunks_ok.hold_ms = 2000;
    frame(&s[k], st_load, sizeof st_load);
    frame(&s[k++], locs, sizeof locs);

    s[k++] = seed("arena", KVT_MSG_ARENA, 0);

    s[k] = seed("arena_ok", KVT_MSG_ARENA_OK, 0);
    s[k].m.u.arena_ok.arena_bytes = 1ull << 30;
    s[k].m.u.arena_ok.hold_ms = 2000;
    frame(&s[k++], "/dev/shm/kvtierd.arena", 22);

    s[k] = seed("save_reserve", KVT_MSG_SAVE_RESERVE, KVT_SAVE_OPID);
    s[k].m.u.save.op_id = 99;
    frame(&s[k], hashes, sizeof hashes);
    frame(&s[k++], lens, sizeof lens);

    s[k] = seed("save_reserve_ok", KVT_MSG_SAVE_RESERVE_OK, 0);
    s[k].m.u.chunks_ok.hold_ms = 2000;
    frame(&s[k], st_begin, sizeof st_begin);
    frame(&s[k++], locs, sizeof locs);

    s[k] = seed("save_commit", KVT_MSG_SAVE_COMMIT, KVT_SAVE_OPID);
    s[k].m.u.save.op_id = 99;
    frame(&s[k], hashes, sizeof hashes);
    frame(&s[k++], locs, sizeof locs);

    s[k] = seed("release", KVT_MSG_RELEASE, 0);
    s[k].m.u.release.rank = 1;
    frame(&s[k++], hashes, sizeof hashes);

    s[k] = seed("release_ok", KVT_MSG_RELEASE_OK, 0);
    s[k++].m.u.release_ok.released = 2;

    /* protocol 2: the messages whose head or frames differ */
    s[k] = seed("hello_v2", KVT_MSG_HELLO, 0);
    s[k].m.u.hello.layout_fp = 0x0123456789abcdefull;
    s[k].m.u.hello.chunk_tokens = 256;
    s[k].m.u.hello.world = 1;
    s[k].m.u.hello.features = KVT_FEAT_CHECKSUMS | KVT_FEAT_TOKENS | KVT_FEAT_ARENA_GEN;
    frame(&s[k], "llama", 5);
    frame(&s[k++], "2024-07-23", 10);

    s[k] = seed("hello_ok_v2", KVT_MSG_HELLO_OK, 0);
    s[k].m.u.hello_ok.ns_id = 7;
    s[k].m.u.hello_ok.max_chunks = FUZZ_MAX_HASHES;
    s[k].m.u.hello_ok.features = KVT_FEAT_CHECKSUMS;
    s[k].m.u.hello_ok.max_in_flight = 256;
    s[k++].m.u.hello_ok.arena_gen = 3;

    s[k] = seed("load_ok_v2", KVT_MSG_LOAD_OK, 0);
    frame(&s[k], st_load, sizeof st_load);
    frame(&s[k], sums, sizeof sums);
    frame(&s[k], bytes8, sizeof bytes8);
    frame(&s[k++], "", 0);

    s[k] = seed("load_ok_shm_v2", KVT_MSG_LOAD_OK, KVT_LOADR_SHM);
    s[k].m.u.chunks_ok.hold_ms = 2000;
    frame(&s[k], st_load, sizeof st_load);
    frame(&s[k], locs, sizeof locs);
    frame(&s[k++], sums, sizeof sums);

    s[k] = seed("tally_v2", KVT_MSG_TALLY, KVT_TALLY_TOKENS);
    s[k].m.u.tally.engine_id = 42;
    s[k].m.u.tally.paid_total = 12;
    s[k].m.u.tally.probes_total = 15;
    s[k].m.u.tally.served_tokens_total = 1 << 20;
    s[k].m.u.tally.lookup_tokens_total = 1 << 24;
    frame(&s[k++], reasons, rlen);

    s[k] = seed("tally_ok_v2", KVT_MSG_TALLY_OK, 0);
    s[k].m.u.tally_ok.payoff = 0.8;
    s[k].m.u.tally_ok.policy = KVT_POLICY_VALUE;
    s[k].m.u.tally_ok.density = 0.5;
    s[k++].m.u.tally_ok.written_tokens = 4096;

    s[k] = seed("save_commit_v2", KVT_MSG_SAVE_COMMIT, 0);
    s[k].m.hdr.gen = 5;
    frame(&s[k], hashes, sizeof hashes);
    frame(&s[k++], locs, sizeof locs);

    s[k] = seed("bad_version", KVT_MSG_LOAD, 0);
    frame(&s[k++], hashes, KVT_HASH_BYTES);

    s[k++] = seed("unknown_type", UNKNOWN_TYPE, 0);

    for (int i = 0; i < k; i++) {
        if (write_seed(argv[1], &s[i]) != 0) {
            fprintf(stderr, "%s: cannot write %s/%s\n", argv[0], argv[1], s[i].name);
            return 1;
        }
    }
    return 0;
}
