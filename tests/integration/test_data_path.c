/*
 * test_data_path.c - the data path off the loop, against the real daemon (issue 11; issue 13's
 * "shared memory is verified", daemon half): checksums, scribbled arenas, shared-memory loads
 * of disk-resident chunks, and the races the new ownership rules must survive.
 *
 *   - checksums: protocol 2 LOAD_OK carries, on both data paths, the XXH3-64 of every chunk's
 *     bytes, for chunk sizes around ZeroMQ's inline-message limit and above, and HELLO_OK
 *     answers CHECKSUMS;
 *   - scribbled arena: a client maps the arena read-write and flips bytes of committed chunks;
 *     frames loads then carry a checksum that mismatches the bytes, RELEASE CORRUPT removes such
 *     a chunk (and not one it merely accuses), demotion and the shutdown persist never write
 *     them as valid, and after a restart nothing wrong is served;
 *   - a shared-memory LOAD of chunks only on disk is answered by location, byte-exact, after
 *     their promotion;
 *   - races (run them under ASan): shared-memory and frames savers racing on the same chunks
 *     through a RAM tier much smaller than the working set with the disk on, loaders on both
 *     paths, lookups with leases, and a client falsely reporting good chunks corrupt while they
 *     are being demoted, flushed, promoted and evicted; every byte loaded must be exact and no
 *     verification may ever fail (an extent reused while a worker reads it would show up as
 *     either).
 *
 * Raw protocol 2 peers (the harness's raw helpers speak protocol 1) see the checksum frames; the
 * racing clients are libkvtier's.
 */
#include "check_main.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#include "harness.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define CH (64u * KIB)
#define N 5 /* chunks per raw request: LOAD_OK v2 has 3 frames before the payloads */
#define MODEL "dp-model"
#define FP 0xda7a

static char extra[768];

/* A fresh directory outside the harness's, so that a restarted daemon finds it. */
static void disk_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* A daemon with a shareable arena of ram bytes and, when dir is not NULL, a disk tier there. */
static harness_t *start(uint64_t ram, const char *dir)
{
    static int seq;
    harness_opts_t o = {.capacity_bytes = ram, .max_chunk_bytes = 256 * KIB};
    int n = snprintf(extra, sizeof extra,
                     "{\"ram\": {\"arena_path\": \"/dev/shm/kvtier-dp-%d-%d.arena\", "
                     "\"shm_hold_ms\": 5000}",
                     (int)getpid(), seq++);

    if (dir != NULL)
        n += snprintf(extra + n, sizeof extra - (size_t)n,
                      ", \"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": "
                      "\"32MiB\", \"segment_bytes\": \"2MiB\", \"write_buffer_bytes\": \"2MiB\", "
                      "\"fsync\": \"none\", \"max_reads_in_flight\": 4}",
                      dir);
    snprintf(extra + n, sizeof extra - (size_t)n, "}");
    o.extra_json = extra;
    return harness_start(&o);
}

/* --- a raw protocol 2 peer --- */

typedef struct {
    void *ctx, *s;
    uint32_t ns;
    uint64_t rid;
} peer_t;

static void peer_call(peer_t *p, kvt_msg_t *m, const kvt_frame_t *rest, size_t nrest,
                      harness_raw_msg_t *r, kvt_msg_t *rep)
{
    m->hdr.version = 2;
    m->hdr.req_id = p->rid++;
    m->hdr.ns_id = p->ns;
    harness_raw_call(p->s, m, rest, nrest, r, rep);
    ck_assert_uint_eq(rep->hdr.version, 2);
}

/* HELLO (protocol 2, every feature offered) of a world-1 namespace; asserts CHECKSUMS. */
static void peer_open(peer_t *p, const harness_t *h, uint64_t fp)
{
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_HELLO}}, rep;
    kvt_frame_t f[2] = {{MODEL, strlen(MODEL)}, {"", 0}};
    harness_raw_msg_t r;

    p->ctx = zmq_ctx_new();
    p->s = harness_raw_open(p->ctx, h->endpoint, 10000);
    p->rid = 1;
    p->ns = 0;
    m.u.hello.layout_fp = fp;
    m.u.hello.chunk_tokens = 16;
    m.u.hello.world = 1;
    m.u.hello.features = ~0ull;
    peer_call(p, &m, f, 2, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_HELLO_OK);
    ck_assert_uint_eq(rep.u.hello_ok.features & KVT_FEAT_CHECKSUMS, KVT_FEAT_CHECKSUMS);
    p->ns = rep.u.hello_ok.ns_id;
    harness_raw_msg_close(&r);
}

static void peer_close(peer_t *p)
{
    zmq_close(p->s);
    zmq_ctx_term(p->ctx);
}

/* The deterministic bytes of chunk (seed, i): len bytes. */
static void chunk_bytes(uint8_t *buf, size_t len, uint32_t seed, size_t i)
{
    harness_fill(buf, len, 0, (uint64_t)seed * 1000 + i);
}

/* SAVE_DATA of chain seed's first n chunks (lens[i] bytes each); every one must be STORED. */
static void peer_save(peer_t *p, uint32_t seed, size_t n, const size_t *lens)
{
    kvt_hash_t hs[N];
    kvt_frame_t f[1 + N];
    uint8_t *bufs[N];
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_SAVE_DATA}}, rep;
    harness_raw_msg_t r;

    ck_assert_uint_le(n, N);
    harness_chain(seed, hs, n);
    f[0] = (kvt_frame_t){hs, n * sizeof *hs};
    for (size_t i = 0; i < n; i++) {
        bufs[i] = malloc(lens[i]);
        chunk_bytes(bufs[i], lens[i], seed, i);
        f[1 + i] = (kvt_frame_t){bufs[i], lens[i]};
    }
    peer_call(p, &m, f, 1 + n, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_STORED);
        free(bufs[i]);
    }
    harness_raw_msg_close(&r);
}

static void peer_save_chain(peer_t *p, uint32_t seed)
{
    size_t lens[N] = {CH, CH, CH, CH, CH};

    peer_save(p, seed, N, lens);
}

/* LOAD (frames, or SHM) of chain seed's first n chunks; the reply stays in r. */
static void peer_load(peer_t *p, uint32_t seed, size_t n, bool shm, harness_raw_msg_t *r,
                      kvt_msg_t *rep)
{
    kvt_hash_t hs[N];
    kvt_frame_t f[1] = {{hs, n * sizeof *hs}};
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOAD, .flags = shm ? KVT_LOAD_SHM : 0}};

    harness_chain(seed, hs, n);
    peer_call(p, &m, f, 1, r, rep);
    ck_assert_int_eq(rep->hdr.type, KVT_MSG_LOAD_OK);
    ck_assert_ptr_nonnull(rep->u.chunks_ok.checksums);
}

static uint64_t csum_of(const kvt_msg_t *rep, size_t i)
{
    return kvt_get_u64(rep->u.chunks_ok.checksums + i * KVT_CSUM_BYTES);
}

/* RELEASE of chain seed's chunks [from, from + n), with CORRUPT when corrupt. */
static void peer_release(peer_t *p, uint32_t seed, size_t from, size_t n, bool corrupt)
{
    kvt_hash_t hs[N];
    kvt_frame_t f[1] = {{&hs[from], n * sizeof *hs}};
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_RELEASE, .flags = corrupt ? KVT_RELEASE_CORRUPT : 0}},
              rep;
    harness_raw_msg_t r;

    harness_chain(seed, hs, from + n);
    peer_call(p, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_RELEASE_OK);
    harness_raw_msg_close(&r);
}

/* LOOKUP of chain seed's first n chunks: the prefix hit. */
static uint32_t peer_lookup(peer_t *p, uint32_t seed, size_t n)
{
    kvt_hash_t hs[N];
    kvt_frame_t f[1] = {{hs, n * sizeof *hs}};
    kvt_msg_t m = {.hdr = {.type = KVT_MSG_LOOKUP}}, rep;
    harness_raw_msg_t r;
    uint32_t hit;

    harness_chain(seed, hs, n);
    peer_call(p, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOOKUP_OK);
    hit = rep.u.lookup_ok.hit;
    harness_raw_msg_close(&r);
    return hit;
}

/* The daemon's arena, mapped (read-write when rw: a hostile client's view). */
static uint8_t *map_arena(const harness_t *h, bool rw, size_t *len)
{
    json_t *st = harness_status(h);
    const char *path = json_string_value(json_object_get(json_object_get(st, "ram"), "arena_path"));
    int fd = open(path, rw ? O_RDWR : O_RDONLY);
    void *p;

    ck_assert_int_ge(fd, 0);
    *len = (size_t)harness_jint(st, "ram.capacity_bytes");
    p = mmap(NULL, *len, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    close(fd);
    json_decref(st);
    return p;
}

static int pred_flushed(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.write_buffer_chunks") == 0;
}

static void wait_flushed(const harness_t *h)
{
    json_t *st = harness_wait_status(h, pred_flushed, NULL, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "the demotions never reached the disk");
    json_decref(st);
}

typedef struct {
    const char *path;
    int64_t at_least;
} int_ge_t;

static int pred_int_ge(json_t *st, void *arg)
{
    const int_ge_t *a = arg;

    return harness_jint(st, a->path) >= a->at_least;
}

static void wait_ge(const harness_t *h, const char *path, int64_t v)
{
    int_ge_t a = {path, v};
    json_t *st = harness_wait_status(h, pred_int_ge, &a, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "%s never reached %lld", path, (long long)v);
    json_decref(st);
}

/* --- checksums --- */

START_TEST(test_checksums_on_both_paths)
{
    harness_t *h = start(16 * MIB, NULL);
    size_t lens[N] = {1, 33, 34, 4097, 200000}; /* ZeroMQ keeps parts up to 33 bytes inline */
    size_t alen;
    uint8_t *arena;
    harness_raw_msg_t r;
    kvt_msg_t rep;
    peer_t p;

    peer_open(&p, h, FP);
    peer_save(&p, 7, N, lens);
    peer_load(&p, 7, N, false, &r, &rep);
    for (size_t i = 0; i < N; i++) {
        uint8_t *want = malloc(lens[i]);
        chunk_bytes(want, lens[i], 7, i);
        ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_HIT);
        ck_assert_uint_eq(rep.u.chunks_ok.payloads[i].len, lens[i]);
        ck_assert_mem_eq(rep.u.chunks_ok.payloads[i].data, want, lens[i]);
        ck_assert_uint_eq(csum_of(&rep, i), XXH3_64bits(want, lens[i]));
        free(want);
    }
    harness_raw_msg_close(&r);
    /* the shared-memory path: the same checksums beside the locations */
    arena = map_arena(h, false, &alen);
    peer_load(&p, 7, N, true, &r, &rep);
    for (size_t i = 0; i < N; i++) {
        uint64_t off = kvt_get_u64(rep.u.chunks_ok.locs + i * KVT_LOC_BYTES);
        uint64_t len = kvt_get_u64(rep.u.chunks_ok.locs + i * KVT_LOC_BYTES + 8);
        ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_HIT);
        ck_assert_uint_eq(len, lens[i]);
        ck_assert_uint_le(off + len, alen);
        ck_assert_uint_eq(csum_of(&rep, i), XXH3_64bits(arena + off, len));
    }
    harness_raw_msg_close(&r);
    peer_release(&p, 7, 0, N, false);
    /* a miss carries 0 */
    peer_load(&p, 8, 2, false, &r, &rep);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_MISS);
    ck_assert_uint_eq(csum_of(&rep, 0), 0);
    harness_raw_msg_close(&r);
    munmap(arena, alen);
    peer_close(&p);
    harness_stop(&h);
}
END_TEST

/* --- a scribbled arena --- */

/* Flips byte 1000 of each of chain seed's chunks in the arena (found by a SHM load). */
static void scribble_chain(peer_t *p, uint8_t *arena, uint32_t seed)
{
    harness_raw_msg_t r;
    kvt_msg_t rep;

    peer_load(p, seed, N, true, &r, &rep);
    for (size_t i = 0; i < N; i++) {
        ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_HIT);
        arena[kvt_get_u64(rep.u.chunks_ok.locs + i * KVT_LOC_BYTES) + 1000] ^= 0x5a;
    }
    harness_raw_msg_close(&r);
    peer_release(p, seed, 0, N, false);
}

/* A frames load of chain seed: returns how many chunks came with bytes matching their
 * checksum, and checks those are exactly the bytes saved. */
static int load_verified(peer_t *p, uint32_t seed)
{
    harness_raw_msg_t r;
    kvt_msg_t rep;
    uint8_t want[CH];
    int good = 0;

    peer_load(p, seed, N, false, &r, &rep);
    for (size_t i = 0; i < N; i++) {
        const kvt_frame_t *pl = &rep.u.chunks_ok.payloads[i];
        if (rep.u.chunks_ok.status[i] != KVT_CHUNK_HIT)
            continue;
        if (XXH3_64bits(pl->data, pl->len) != csum_of(&rep, i))
            continue;
        chunk_bytes(want, CH, seed, i);
        ck_assert_uint_eq(pl->len, CH);
        ck_assert_msg(memcmp(pl->data, want, CH) == 0, "chain %u chunk %zu: wrong bytes", seed, i);
        good++;
    }
    harness_raw_msg_close(&r);
    return good;
}

START_TEST(test_scribbled_arena)
{
    char dir[96];
    harness_t *h;
    uint8_t *arena;
    size_t alen;
    peer_t p;
    json_t *st;
    enum { S = 1, K = 2, P = 3 }; /* scribbled, kept intact, scribbled at shutdown */

    disk_dir(dir, sizeof dir);
    h = start(4 * MIB, dir);
    peer_open(&p, h, FP);
    peer_save_chain(&p, S);
    peer_save_chain(&p, K);
    arena = map_arena(h, true, &alen);
    scribble_chain(&p, arena, S);
    /* the bytes travel (the daemon lends the arena to the socket), but their checksum is the one
     * computed at the commit: a client sees the mismatch */
    ck_assert_int_eq(load_verified(&p, S), 0);
    ck_assert_int_eq(load_verified(&p, K), N);
    /* reported corrupt: S[0] is re-verified and removed; K[0], accused falsely, stays */
    peer_release(&p, S, 0, 1, true);
    peer_release(&p, K, 0, 1, true);
    wait_ge(h, "ram.verifies", 2);
    wait_ge(h, "ram.verify_drops", 1);
    ck_assert_int_eq(harness_stat(h, "ram.verify_drops"), 1);
    ck_assert_uint_eq(peer_lookup(&p, S, N), 0);
    ck_assert_uint_eq(peer_lookup(&p, K, N), N);
    /* pressure (4 MiB of RAM, 12 more chains of 320 KiB): the cleaner writes the oldest saves,
     * S and K first; S's scribbled chunks are refused by the flush and removed, K's written */
    for (uint32_t c = 10; c < 22; c++) {
        peer_save_chain(&p, c);
        wait_flushed(h);
    }
    wait_ge(h, "disk.verify_drops", N - 1);
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "ram.verify_drops"), N);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.demotions_refused"), 0);
    json_decref(st);
    ck_assert_uint_eq(peer_lookup(&p, S, N), 0);
    ck_assert_int_eq(load_verified(&p, K), N);
    /* P is saved last: dirty while half the RAM is clean, so only the shutdown writes it */
    peer_save_chain(&p, P);
    wait_flushed(h);
    ck_assert_int_eq(harness_stat(h, "disk.verify_drops"), N - 1);
    scribble_chain(&p, arena, P);
    munmap(arena, alen);
    peer_close(&p);
    /* the shutdown persist verifies P's chunks before writing them: none is written */
    harness_stop(&h);
    h = start(4 * MIB, dir);
    peer_open(&p, h, FP);
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "disk.recovery.checksum_drops"), 0);
    json_decref(st);
    ck_assert_uint_eq(peer_lookup(&p, S, N), 0);
    ck_assert_uint_eq(peer_lookup(&p, P, N), 0);
    ck_assert_int_eq(load_verified(&p, K), N);
    for (uint32_t c = 10; c < 22; c++)
        ck_assert_int_eq(load_verified(&p, c), N);
    peer_close(&p);
    harness_stop(&h);
}
END_TEST

/* --- shared-memory loads of chunks only on disk --- */

START_TEST(test_shm_load_of_disk_chunks)
{
    char dir[96];
    harness_t *h;
    uint8_t *arena, want[CH];
    size_t alen;
    peer_t p;
    harness_raw_msg_t r;
    kvt_msg_t rep;
    int64_t promoted;

    disk_dir(dir, sizeof dir);
    h = start(4 * MIB, dir);
    peer_open(&p, h, FP);
    peer_save_chain(&p, 1);
    /* 16 more chains (5 MiB) through 4 MiB: chain 1, the coldest, is demoted and its extents
     * are freed when its writes commit */
    for (uint32_t c = 2; c < 18; c++) {
        peer_save_chain(&p, c);
        wait_flushed(h);
    }
    ck_assert_int_eq(harness_stat(h, "disk.demotions_refused"), 0);
    promoted = harness_stat(h, "disk.promotions");
    arena = map_arena(h, false, &alen);
    peer_load(&p, 1, N, true, &r, &rep);
    for (size_t i = 0; i < N; i++) {
        uint64_t off = kvt_get_u64(rep.u.chunks_ok.locs + i * KVT_LOC_BYTES);
        ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_HIT);
        ck_assert_uint_eq(kvt_get_u64(rep.u.chunks_ok.locs + i * KVT_LOC_BYTES + 8), CH);
        chunk_bytes(want, CH, 1, i);
        ck_assert_msg(memcmp(arena + off, want, CH) == 0, "chunk %zu is not byte-exact", i);
        ck_assert_uint_eq(csum_of(&rep, i), XXH3_64bits(want, CH));
    }
    harness_raw_msg_close(&r);
    ck_assert_int_eq(harness_stat(h, "disk.promotions"), promoted + N);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), N * CH);
    peer_release(&p, 1, 0, N, false);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 0);
    munmap(arena, alen);
    peer_close(&p);
    harness_stop(&h);
}
END_TEST

/* --- races --- */

#define RCH (32u * KIB)
#define RPER 8u
#define RSEEDS 40u
#define ROUNDS 120

typedef struct {
    const harness_t *h;
    int role;
    unsigned seed;
    int wrong;  /* chunks loaded with other bytes */
    int errors; /* calls that failed */
    int busy;   /* calls a bound of contract C3 refused (EBUSY): allowed under this pressure */
} racer_t;

enum { R_SHM_SAVE, R_FRAMES_SAVE, R_SHM_LOAD, R_FRAMES_LOAD, R_LOOKUP, R_ACCUSE, R_COUNT };

static kvt_ns_desc_t race_desc(void)
{
    return harness_ns_desc(MODEL, 1, 0, 7);
}

static kvt_client_t *race_client(const harness_t *h, int path)
{
    kvt_ns_desc_t d = race_desc();
    kvt_connect_opts_t o = {.timeout_ms = 10000, .data_path = path};
    kvt_client_t *c = NULL;

    return kvt_connect(h->endpoint, &d, 0, &o, &c) == 0 ? c : NULL;
}

static void count_rc(racer_t *r, int rc)
{
    if (rc == KVT_EBUSY)
        r->busy++;
    else if (rc != 0)
        r->errors++;
}

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

static void race_save(racer_t *r, kvt_client_t *c, uint32_t seed)
{
    kvt_hash_t hs[RPER];
    const void *bufs[RPER];
    size_t lens[RPER];
    uint8_t out[RPER];

    harness_chain(seed, hs, RPER);
    for (uint32_t i = 0; i < RPER; i++) {
        void *b = malloc(RCH);
        harness_fill(b, RCH, 0, (uint64_t)seed * 1000 + i);
        bufs[i] = b;
        lens[i] = RCH;
    }
    count_rc(r, kvt_save(c, hs, RPER, bufs, lens, NULL, out));
    for (uint32_t i = 0; i < RPER; i++)
        free((void *)bufs[i]);
}

static void race_load(racer_t *r, kvt_client_t *c, uint32_t seed)
{
    kvt_hash_t hs[RPER];
    void *bufs[RPER];
    size_t caps[RPER], lens[RPER], nhit = 0;
    int rc;

    harness_chain(seed, hs, RPER);
    for (uint32_t i = 0; i < RPER; i++) {
        bufs[i] = malloc(RCH);
        caps[i] = RCH;
    }
    rc = kvt_load(c, hs, RPER, bufs, caps, lens, &nhit);
    count_rc(r, rc);
    if (rc == 0)
        for (size_t i = 0; i < nhit; i++)
            r->wrong +=
                lens[i] != RCH || !harness_check_fill(bufs[i], RCH, 0, (uint64_t)seed * 1000 + i);
    for (uint32_t i = 0; i < RPER; i++)
        free(bufs[i]);
}

static void *racer_main(void *arg)
{
    racer_t *r = arg;
    kvt_client_t *c = NULL;
    peer_t p;

    if (r->role == R_ACCUSE) {
        kvt_ns_desc_t d = race_desc();
        peer_open(&p, r->h, kvt_ns_fingerprint(&d));
    } else {
        c = race_client(r->h, r->role == R_SHM_SAVE || r->role == R_SHM_LOAD
                                  ? KVT_DATA_PATH_SHM
                                  : KVT_DATA_PATH_FRAMES);
        if (c == NULL) {
            r->errors++;
            return NULL;
        }
    }
    for (int k = 0; k < ROUNDS; k++) {
        uint32_t seed = 1 + next_rand(&r->seed) % RSEEDS;
        kvt_hash_t hs[RPER];
        kvt_lookup_result_t lr = {0};

        switch (r->role) {
        case R_SHM_SAVE:
        case R_FRAMES_SAVE:
            race_save(r, c, seed);
            break;
        case R_SHM_LOAD:
        case R_FRAMES_LOAD:
            race_load(r, c, seed);
            break;
        case R_LOOKUP:
            harness_chain(seed, hs, RPER);
            count_rc(r, kvt_lookup(c, hs, RPER, &(kvt_lookup_opts_t){.lease = 1}, &lr));
            break;
        case R_ACCUSE: {
            /* a SHM load pins what is in the arena; the client then calls it all corrupt */
            harness_raw_msg_t m;
            kvt_msg_t rep;
            kvt_frame_t f[1] = {{hs, N * sizeof *hs}};
            kvt_msg_t q = {.hdr = {.type = KVT_MSG_LOAD, .flags = KVT_LOAD_SHM}};
            harness_chain(seed, hs, N);
            peer_call(&p, &q, f, 1, &m, &rep);
            harness_raw_msg_close(&m);
            q = (kvt_msg_t){.hdr = {.type = KVT_MSG_RELEASE, .flags = KVT_RELEASE_CORRUPT}};
            peer_call(&p, &q, f, 1, &m, &rep);
            harness_raw_msg_close(&m);
            break;
        }
        }
    }
    if (c != NULL)
        kvt_close(&c);
    else
        peer_close(&p);
    return NULL;
}

START_TEST(test_races_under_pressure)
{
    char dir[96];
    harness_t *h;
    pthread_t t[R_COUNT];
    racer_t rs[R_COUNT];
    json_t *st;

    disk_dir(dir, sizeof dir);
    h = start(2 * MIB, dir); /* 64 chunks of RAM for a working set of 320 */
    for (int i = 0; i < R_COUNT; i++) {
        rs[i] = (racer_t){.h = h, .role = i, .seed = 77u + 13u * (unsigned)i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, racer_main, &rs[i]), 0);
    }
    for (int i = 0; i < R_COUNT; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(rs[i].wrong == 0, "racer %d loaded %d chunks with other bytes", i,
                      rs[i].wrong);
        ck_assert_msg(rs[i].errors == 0, "racer %d had %d failed calls", i, rs[i].errors);
        printf("racer %d: %d calls refused EBUSY\n", i, rs[i].busy);
    }
    /* the writes and the reads: the lookups' read-aheads may still be landing when the last
     * racer is done (promoting_bytes counts them until then) */
    harness_wait_disk_drained(h);
    st = harness_status(h);
    ck_assert_int_gt(harness_jint(st, "ram.verifies"), 0); /* the accusations reached chunks */
    ck_assert_int_eq(harness_jint(st, "ram.verify_drops"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.verify_drops"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    ck_assert_int_gt(harness_jint(st, "disk.demotions"), 0);
    ck_assert_int_gt(harness_jint(st, "disk.promotions"), 0);
    ck_assert_int_le(harness_jint(st, "ram.used_bytes"), 2 * MIB);
    ck_assert_int_eq(harness_jint(st, "ram.ingest_bytes"), 0);
    ck_assert_int_eq(harness_jint(st, "ram.promoting_bytes"), 0);
    json_decref(st);
    harness_stop(&h); /* a sanitizer report in the daemon's log fails here */
}
END_TEST

static Suite *data_path_suite(void)
{
    Suite *s = suite_create("data_path");
    TCase *t = tcase_create("data_path");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_checksums_on_both_paths);
    tcase_add_test(t, test_scribbled_arena);
    tcase_add_test(t, test_shm_load_of_disk_chunks);
    tcase_add_test(t, test_races_under_pressure);
    suite_add_tcase(s, t);
    return s;
}

const check_program_t check_program = {.suite = data_path_suite, .scratch = "kvtdp"};
