/*
 * test_integration.c - integration tests: the real kvtierd, libkvtier and raw ZeroMQ peers.
 *
 * Every test starts its own daemon through the harness (fresh temp dir, tiny config, memfd
 * arena), talks to it with libkvtier clients (one per rank) and, for bad input and crashes,
 * with raw DEALER sockets that build frames with proto/kvt_proto. Outcomes are asserted
 * exactly: per-chunk outcomes, prefix hits, bytes loaded back, and the counters of GET /status.
 * State changes are waited for by polling status with a deadline, never by sleeping.
 *
 * Threads: one per test (Check forks each test); crash tests fork children that only use raw
 * ZeroMQ and report through their exit status.
 * Invariants: payloads are generated from (rank, chunk hash, tag) so any load can be verified
 * byte-exact without keeping the saved buffers around.
 */
#include "check_main.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "kvt_proto.h"
#include "kvtier.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

static size_t round4k(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

/* Pattern key of one chunk: its hash, salted by a per-test tag (two saves of the same hash with
 * different tags carry different bytes). */
static uint64_t hkey(const kvt_hash_t *h, uint32_t tag)
{
    uint64_t k;
    memcpy(&k, h->b, sizeof k);
    return k ^ (uint64_t)tag * 0x9e3779b97f4a7c15ull;
}

/* Saves chunks filled with the (rank, hash, tag) pattern; returns kvt_save's code. */
static int save_pattern(kvt_client_t *c, const kvt_hash_t *hs, size_t n, const size_t *sizes,
                        uint32_t rank, uint32_t tag, const kvt_hash_t *parent, uint8_t *outcomes)
{
    void **bufs = calloc(n, sizeof *bufs);
    kvt_save_opts_t o = {.parent = parent};
    int rc;

    ck_assert_ptr_nonnull(bufs);
    for (size_t i = 0; i < n; i++) {
        bufs[i] = malloc(sizes[i] ? sizes[i] : 1);
        ck_assert_ptr_nonnull(bufs[i]);
        harness_fill(bufs[i], sizes[i], rank, hkey(&hs[i], tag));
    }
    rc = kvt_save(c, hs, n, (const void *const *)bufs, sizes, &o, outcomes);
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    return rc;
}

static void assert_outcomes(const uint8_t *out, size_t n, int want, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == want, "%s: chunk %zu outcome %d, want %d", what, i, out[i], want);
}

/* Saves and asserts kvt_save returned 0 and every chunk got outcome want. */
static void save_expect(kvt_client_t *c, const kvt_hash_t *hs, size_t n, const size_t *sizes,
                        uint32_t rank, uint32_t tag, const kvt_hash_t *parent, int want,
                        const char *what)
{
    uint8_t *out = calloc(n, 1);
    int rc;

    ck_assert_ptr_nonnull(out);
    rc = save_pattern(c, hs, n, sizes, rank, tag, parent, out);
    ck_assert_msg(rc == 0, "%s: kvt_save: %s (%s)", what, kvt_strerror(rc), kvt_last_error(c));
    assert_outcomes(out, n, want, what);
    free(out);
}

/* Loads n chunks into cap-byte buffers; every chunk loaded must have size sizes[i] (when sizes
 * is not NULL) and hold exactly the (rank, hash, tag) pattern. Returns *nhit; lens_out (may be
 * NULL) receives the per-chunk lengths. */
static size_t load_verify(kvt_client_t *c, const kvt_hash_t *hs, size_t n, const size_t *sizes,
                          uint32_t rank, uint32_t tag, size_t cap, size_t *lens_out)
{
    void **bufs = calloc(n, sizeof *bufs);
    size_t *caps = calloc(n, sizeof *caps), *lens = calloc(n, sizeof *lens), nhit = 0;
    int rc;

    ck_assert(bufs != NULL && caps != NULL && lens != NULL);
    for (size_t i = 0; i < n; i++) {
        bufs[i] = malloc(cap);
        ck_assert_ptr_nonnull(bufs[i]);
        caps[i] = cap;
    }
    rc = kvt_load(c, hs, n, bufs, caps, lens, &nhit);
    ck_assert_msg(rc == 0, "kvt_load: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    ck_assert_uint_le(nhit, n);
    for (size_t i = 0; i < n; i++) {
        if (i < nhit)
            ck_assert_msg(lens[i] > 0, "chunk %zu inside the hit prefix has length 0", i);
        if (lens[i] == 0)
            continue;
        if (sizes != NULL)
            ck_assert_msg(lens[i] == sizes[i], "chunk %zu: loaded %zu bytes, saved %zu", i, lens[i],
                          sizes[i]);
        ck_assert_msg(harness_check_fill(bufs[i], lens[i], rank, hkey(&hs[i], tag)),
                      "chunk %zu (rank %u): loaded bytes differ from the saved bytes", i, rank);
    }
    if (nhit < n)
        ck_assert_msg(lens[nhit] == 0, "chunk %zu ends the hit prefix but loaded %zu bytes", nhit,
                      lens[nhit]);
    if (lens_out != NULL)
        memcpy(lens_out, lens, n * sizeof *lens);
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(caps);
    free(lens);
    return nhit;
}

static uint32_t lookup_hit(kvt_client_t *c, const kvt_hash_t *hs, size_t n)
{
    kvt_lookup_result_t res = {0};
    int rc = kvt_lookup(c, hs, n, NULL, &res);

    ck_assert_msg(rc == 0, "kvt_lookup: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    ck_assert_int_eq(res.skipped, 0);
    ck_assert_int_eq(res.leased, 0);
    return res.hit;
}

static kvt_lookup_result_t lookup_lease(kvt_client_t *c, const kvt_hash_t *hs, size_t n,
                                        int all_ranks, uint32_t *rank_hits, uint32_t cap)
{
    kvt_lookup_opts_t o = {.all_ranks = all_ranks, .lease = 1};
    kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = cap};
    int rc = kvt_lookup(c, hs, n, &o, &res);

    ck_assert_msg(rc == 0, "kvt_lookup(lease): %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    return res;
}

static kvt_client_t *connect_desc(const harness_t *h, const kvt_ns_desc_t *d, uint32_t rank)
{
    kvt_connect_opts_t o = {.timeout_ms = 5000};
    kvt_client_t *c = NULL;
    int rc = kvt_connect(h->endpoint, d, rank, &o, &c);

    ck_assert_msg(rc == 0, "kvt_connect(%s): %s", d->model, kvt_strerror(rc));
    return c;
}

/* The status entry of the namespace with this model and fingerprint (borrowed from st). */
static json_t *find_ns(json_t *st, const char *model, uint64_t fp)
{
    json_t *arr = json_object_get(st, "namespaces"), *e;
    char want[17];
    size_t i;

    snprintf(want, sizeof want, "%016llx", (unsigned long long)fp);
    ck_assert_msg(json_is_array(arr), "status.namespaces is not an array");
    json_array_foreach(arr, i, e)
    {
        const char *m = json_string_value(json_object_get(e, "model"));
        const char *f = json_string_value(json_object_get(e, "fingerprint"));
        if (m != NULL && f != NULL && strcmp(m, model) == 0 && strcasecmp(f, want) == 0)
            return e;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Round trips
 */

START_TEST(test_roundtrip_4ranks)
{
    enum { WORLD = 4, N = 5 };
    const size_t max_chunk = 256 * KIB;
    const size_t sizes[N] = {1, 4095, 4096, 65537, 256 * KIB};
    harness_opts_t o = {.capacity_bytes = 4 * MIB, .max_chunk_bytes = max_chunk};
    harness_t *h = harness_start(&o);
    kvt_client_t *c[WORLD];
    kvt_server_info_t info;
    kvt_hash_t hs[N];
    size_t total = 0, total_alloc = 0, lens[N];
    int64_t received;

    for (size_t i = 0; i < N; i++) {
        total += sizes[i];
        total_alloc += round4k(sizes[i]);
    }
    harness_chain(1, hs, N);
    for (uint32_t r = 0; r < WORLD; r++) {
        c[r] = harness_client(h, "rt-model", WORLD, 0, r);
        ck_assert_int_eq(kvt_server_info(c[r], &info), 0);
        ck_assert_uint_eq(info.max_chunk_bytes, max_chunk);
        ck_assert_uint_eq(info.lease_ms, 30000);
        ck_assert_uint_eq(info.max_chunks, 4096);
        ck_assert_uint_eq(
            info.daemon_version,
            (uint32_t)(KVT_VERSION_MAJOR << 16 | KVT_VERSION_MINOR << 8 | KVT_VERSION_PATCH));
    }
    for (uint32_t r = 0; r < WORLD; r++)
        save_expect(c[r], hs, N, sizes, r, 0, NULL, KVT_SAVE_STORED, "first save");

    ck_assert_int_eq(harness_stat(h, "ram.chunks"), WORLD * N);
    ck_assert_int_eq(harness_stat(h, "ram.stored_bytes"), (int64_t)(WORLD * total));
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), (int64_t)(WORLD * total_alloc));
    received = harness_stat(h, "server.bytes_received");
    ck_assert_int_eq(received, (int64_t)(WORLD * total));

    for (uint32_t r = 0; r < WORLD; r++) {
        ck_assert_uint_eq(lookup_hit(c[r], hs, N), N);
        ck_assert_uint_eq(load_verify(c[r], hs, N, sizes, r, 0, max_chunk, lens), N);
    }
    ck_assert_int_eq(harness_stat(h, "ram.hits"), 2 * WORLD * N);
    ck_assert_int_eq(harness_stat(h, "ram.misses"), 0);

    for (uint32_t r = 0; r < WORLD; r++)
        save_expect(c[r], hs, N, sizes, r, 0, NULL, KVT_SAVE_EXISTS, "second save");
    ck_assert_int_eq(harness_stat(h, "server.bytes_received"), received);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), WORLD * N);
    ck_assert_int_eq(harness_stat(h, "ram.evictions"), 0);

    /* A buffer too small for the stored chunk: EBUFSIZE and the size needed. */
    {
        char small[1000];
        void *b[1] = {small};
        size_t cap[1] = {sizeof small}, len[1] = {0}, nhit = 99;
        ck_assert_int_eq(kvt_load(c[0], &hs[4], 1, b, cap, len, &nhit), KVT_EBUFSIZE);
        ck_assert_uint_eq(len[0], 256 * KIB);
    }
    /* A payload larger than max_chunk_bytes is refused and nothing is stored. */
    {
        kvt_hash_t big;
        size_t bigsz = max_chunk + 1;
        uint8_t out = 0;
        harness_chain(11, &big, 1);
        ck_assert_int_eq(save_pattern(c[1], &big, 1, &bigsz, 1, 0, NULL, &out), KVT_ETOOBIG);
        ck_assert_int_eq(harness_stat(h, "ram.chunks"), WORLD * N);
        ck_assert_uint_eq(lookup_hit(c[1], &big, 1), 0);
    }

    for (uint32_t r = 0; r < WORLD; r++) {
        kvt_close(&c[r]);
        ck_assert_ptr_null(c[r]);
    }
    harness_stop(&h);
    ck_assert_ptr_null(h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Semantics: prefix, all-ranks, replicated, namespaces
 */

START_TEST(test_prefix_semantics)
{
    const size_t sizes[4] = {1000, 2000, 3000, 4000};
    harness_t *h = harness_start(NULL);
    kvt_client_t *c = harness_client(h, "prefix-model", 1, 0, 0);
    kvt_hash_t hs[4];
    size_t lens[4];

    harness_chain(2, hs, 4);
    save_expect(c, hs, 2, sizes, 0, 0, NULL, KVT_SAVE_STORED, "chunks 0,1");
    save_expect(c, &hs[3], 1, &sizes[3], 0, 0, &hs[2], KVT_SAVE_STORED, "chunk 3 after 2");
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 3);

    ck_assert_uint_eq(lookup_hit(c, hs, 4), 2);
    ck_assert_uint_eq(lookup_hit(c, &hs[2], 2), 0);
    ck_assert_uint_eq(load_verify(c, hs, 4, sizes, 0, 0, 64 * KIB, lens), 2);
    ck_assert_uint_eq(lens[0], 1000);
    ck_assert_uint_eq(lens[1], 2000);
    ck_assert_uint_eq(lens[2], 0);
    ck_assert_uint_eq(load_verify(c, &hs[2], 1, NULL, 0, 0, 64 * KIB, lens), 0);
    ck_assert_uint_eq(lens[0], 0);

    /* Filling the gap makes the whole chain hit. */
    save_expect(c, &hs[2], 1, &sizes[2], 0, 0, &hs[1], KVT_SAVE_STORED, "chunk 2");
    ck_assert_uint_eq(lookup_hit(c, hs, 4), 4);
    ck_assert_uint_eq(load_verify(c, hs, 4, sizes, 0, 0, 64 * KIB, NULL), 4);

    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_all_ranks_min)
{
    enum { WORLD = 4, N = 6 };
    const uint32_t stored[WORLD] = {5, 2, 4, 3};
    size_t sizes[N];
    harness_t *h = harness_start(NULL);
    kvt_client_t *c[WORLD];
    kvt_hash_t hs[N];
    uint32_t rank_hits[WORLD];
    kvt_lookup_opts_t all = {.all_ranks = 1};

    harness_chain(3, hs, N);
    for (size_t i = 0; i < N; i++)
        sizes[i] = 512 + 100 * i;
    for (uint32_t r = 0; r < WORLD; r++) {
        c[r] = harness_client(h, "allranks-model", WORLD, 0, r);
        save_expect(c[r], hs, stored[r], sizes, r, 0, NULL, KVT_SAVE_STORED, "prefix save");
    }
    for (uint32_t r = 0; r < WORLD; r++)
        ck_assert_uint_eq(lookup_hit(c[r], hs, N), stored[r]);

    for (uint32_t r = 0; r < WORLD; r++) {
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = WORLD};
        memset(rank_hits, 0xff, sizeof rank_hits);
        ck_assert_int_eq(kvt_lookup(c[r], hs, N, &all, &res), 0);
        ck_assert_uint_eq(res.hit, 2);
        ck_assert_uint_eq(res.nranks, WORLD);
        ck_assert_int_eq(res.leased, 0);
        for (uint32_t k = 0; k < WORLD; k++)
            ck_assert_msg(rank_hits[k] == stored[k], "rank_hits[%u] = %u, want %u", k, rank_hits[k],
                          stored[k]);
    }
    ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), 0);

    /* An all-ranks lease pins the min prefix on every rank; a rank's own lease adds its own. */
    {
        kvt_lookup_result_t res = lookup_lease(c[1], hs, N, 1, rank_hits, WORLD);
        ck_assert_uint_eq(res.hit, 2);
        ck_assert_int_eq(res.leased, 1);
        ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), 2 * WORLD);
        res = lookup_lease(c[0], hs, N, 0, NULL, 0);
        ck_assert_uint_eq(res.hit, 5);
        ck_assert_int_eq(res.leased, 1);
        ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), 2 * WORLD + 3);
    }
    for (uint32_t r = 0; r < WORLD; r++)
        kvt_close(&c[r]);
    harness_stop(&h);
}
END_TEST

START_TEST(test_replicated_namespace)
{
    enum { N = 3 };
    const size_t sizes[N] = {100, 5000, 70000};
    harness_t *h = harness_start(NULL);
    kvt_client_t *r0 = harness_client(h, "mla-model", 2, 1, 0);
    kvt_client_t *r1 = harness_client(h, "mla-model", 2, 1, 1);
    kvt_ns_desc_t d = harness_ns_desc("mla-model", 2, 1, 32);
    kvt_hash_t hs[N];
    uint32_t rank_hits[2] = {0, 0};
    kvt_lookup_opts_t all = {.all_ranks = 1};
    kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = 2};
    json_t *st, *ns;

    harness_chain(4, hs, N);
    save_expect(r0, hs, N, sizes, 0, 0, NULL, KVT_SAVE_STORED, "rank 0 save");
    ck_assert_uint_eq(lookup_hit(r1, hs, N), N);
    /* rank 1 gets rank 0's bytes: one copy serves every rank */
    ck_assert_uint_eq(load_verify(r1, hs, N, sizes, 0, 0, 128 * KIB, NULL), N);
    save_expect(r1, hs, N, sizes, 0, 0, NULL, KVT_SAVE_EXISTS, "rank 1 save");
    ck_assert_int_eq(kvt_lookup(r1, hs, N, &all, &res), 0);
    ck_assert_uint_eq(res.hit, N);
    ck_assert_uint_eq(res.nranks, 2);
    ck_assert_uint_eq(rank_hits[0], N);
    ck_assert_uint_eq(rank_hits[1], N);

    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(harness_jint(st, "ram.chunks"), N);
    ck_assert_int_eq(harness_jint(st, "ram.stored_bytes"), 100 + 5000 + 70000);
    ns = find_ns(st, "mla-model", kvt_ns_fingerprint(&d));
    ck_assert_msg(ns != NULL, "namespace mla-model not in status");
    ck_assert(json_is_true(json_object_get(ns, "replicated")));
    ck_assert_int_eq(json_integer_value(json_object_get(ns, "world")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(ns, "chunks")), N);
    json_decref(st);

    kvt_close(&r0);
    kvt_close(&r1);
    harness_stop(&h);
}
END_TEST

START_TEST(test_namespaces_isolated)
{
    enum { N = 3 };
    const size_t sizes[N] = {3000, 3000, 3000};
    harness_t *h = harness_start(NULL);
    kvt_ns_desc_t da = harness_ns_desc("iso-a", 1, 0, 32);
    kvt_ns_desc_t db = harness_ns_desc("iso-a", 1, 0, 16); /* same model, other layout */
    kvt_ns_desc_t dc = harness_ns_desc("iso-b", 1, 0, 32); /* other model, same layout */
    kvt_client_t *a = connect_desc(h, &da, 0), *b = connect_desc(h, &db, 0);
    kvt_client_t *cc = connect_desc(h, &dc, 0);
    kvt_hash_t hs[N];
    json_t *st, *ns;

    ck_assert(kvt_ns_fingerprint(&da) != kvt_ns_fingerprint(&db));
    harness_chain(5, hs, N);
    save_expect(a, hs, N, sizes, 0, 'A', NULL, KVT_SAVE_STORED, "ns A");
    ck_assert_uint_eq(lookup_hit(b, hs, N), 0);
    ck_assert_uint_eq(lookup_hit(cc, hs, N), 0);
    ck_assert_uint_eq(load_verify(b, hs, N, NULL, 0, 'B', 64 * KIB, NULL), 0);
    ck_assert_uint_eq(load_verify(cc, hs, N, NULL, 0, 'C', 64 * KIB, NULL), 0);

    save_expect(b, hs, N, sizes, 0, 'B', NULL, KVT_SAVE_STORED, "ns B, same hashes");
    save_expect(cc, hs, N, sizes, 0, 'C', NULL, KVT_SAVE_STORED, "ns C, same hashes");
    ck_assert_uint_eq(load_verify(a, hs, N, sizes, 0, 'A', 64 * KIB, NULL), N);
    ck_assert_uint_eq(load_verify(b, hs, N, sizes, 0, 'B', 64 * KIB, NULL), N);
    ck_assert_uint_eq(load_verify(cc, hs, N, sizes, 0, 'C', 64 * KIB, NULL), N);

    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(harness_jint(st, "ram.chunks"), 3 * N);
    ck_assert_uint_eq(json_array_size(json_object_get(st, "namespaces")), 3);
    ns = find_ns(st, "iso-a", kvt_ns_fingerprint(&da));
    ck_assert_msg(ns != NULL, "namespace iso-a/A not in status");
    ck_assert_int_eq(json_integer_value(json_object_get(ns, "chunks")), N);
    ns = find_ns(st, "iso-a", kvt_ns_fingerprint(&db));
    ck_assert_msg(ns != NULL, "namespace iso-a/B not in status");
    ck_assert_int_eq(json_integer_value(json_object_get(ns, "chunks")), N);
    ck_assert_ptr_nonnull(find_ns(st, "iso-b", kvt_ns_fingerprint(&dc)));
    json_decref(st);

    kvt_close(&a);
    kvt_close(&b);
    kvt_close(&cc);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Leases and capacity
 */

/* Saves nchains chains of len chunks of size bytes each, seeds first.., asserting STORED. */
static void fill_chains(kvt_client_t *c, uint32_t first, int nchains, size_t len, size_t size,
                        int want)
{
    kvt_hash_t hs[8];
    size_t sizes[8];

    ck_assert_uint_le(len, 8);
    for (size_t i = 0; i < len; i++)
        sizes[i] = size;
    for (int k = 0; k < nchains; k++) {
        harness_chain(first + (uint32_t)k, hs, len);
        save_expect(c, hs, len, sizes, 0, 0, NULL, want, "fill");
    }
}

START_TEST(test_leases)
{
    enum { N = 4 };
    const size_t chunk = 64 * KIB;
    const size_t sizes[N] = {chunk, chunk, chunk, chunk};
    /* the held bounds off (shares of 1): this test is about what leases pin, up to all of it;
     * test_hostile.c has the bounds */
    harness_opts_t o = {.capacity_bytes = 1 * MIB,
                        .max_chunk_bytes = chunk,
                        .lease_ms = 2000,
                        .extra_json =
                            "{\"ram\": {\"session_held_share\": 1.0, \"max_held_share\": 1.0}}"};
    harness_t *h = harness_start(&o);
    kvt_client_t *c = harness_client(h, "lease-model", 1, 0, 0);
    const int fill_chunks = (int)(3 * o.capacity_bytes / chunk);
    harness_int_eq_t no_lease = {"ram.leased_chunks", 0};
    kvt_lookup_result_t r1, r2;
    kvt_hash_t hs[N];
    json_t *st;
    int64_t chunks;

    harness_chain(100, hs, N);
    save_expect(c, hs, N, sizes, 0, 0, NULL, KVT_SAVE_STORED, "leased chain");
    r1 = lookup_lease(c, hs, N, 0, NULL, 0);
    ck_assert_uint_eq(r1.hit, N);
    ck_assert_int_eq(r1.leased, 1);
    ck_assert_uint_gt(r1.lease_ms, 0);
    ck_assert_uint_le(r1.lease_ms, 2000);
    ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), N);
    /* a repeated lookup never extends a lease */
    r2 = lookup_lease(c, hs, N, 0, NULL, 0);
    ck_assert_uint_eq(r2.hit, N);
    ck_assert_int_eq(r2.leased, 1);
    ck_assert_uint_le(r2.lease_ms, r1.lease_ms);
    ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), N);

    /* 3x capacity of other chains: everything but the leased chain is evictable */
    fill_chains(c, 200, fill_chunks / N, N, chunk, KVT_SAVE_STORED);
    ck_assert_int_gt(harness_stat(h, "ram.evictions"), 0);
    ck_assert_uint_eq(load_verify(c, hs, N, sizes, 0, 0, chunk, NULL), N);

    st = harness_wait_status(h, harness_pred_int_eq, &no_lease, (int)o.lease_ms + 10000);
    ck_assert_msg(st != NULL, "leased_chunks did not return to 0 after the lease time");
    json_decref(st);
    fill_chains(c, 300, fill_chunks / N, N, chunk, KVT_SAVE_STORED);
    ck_assert_uint_eq(lookup_hit(c, hs, N), 0);
    ck_assert_uint_eq(load_verify(c, hs, N, sizes, 0, 0, chunk, NULL), 0);

    /* Lease everything stored: then nothing is evictable and a new chunk gets NOSPACE. */
    chunks = harness_stat(h, "ram.chunks");
    ck_assert_int_gt(chunks, 0);
    for (int k = 0; k < fill_chunks / N; k++) {
        kvt_hash_t fh[N];
        harness_chain(300 + (uint32_t)k, fh, N);
        (void)lookup_lease(c, fh, N, 0, NULL, 0);
    }
    ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), chunks);
    fill_chains(c, 400, 1, N, chunk, KVT_SAVE_NOSPACE);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), chunks);
    st = harness_wait_status(h, harness_pred_int_eq, &no_lease, (int)o.lease_ms + 10000);
    ck_assert_msg(st != NULL, "leased_chunks did not return to 0 after the lease time");
    json_decref(st);
    fill_chains(c, 400, 1, N, chunk, KVT_SAVE_STORED);

    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Chunk size of the capacity test: 1..100000 bytes, a function of the hash. */
static size_t cap_size(const kvt_hash_t *h)
{
    return 1 + (size_t)(hkey(h, 0) % 100000);
}

START_TEST(test_capacity)
{
    enum { MAXLEN = 5, MAXCHAINS = 256 };
    const uint64_t cap = 1 * MIB;
    harness_opts_t o = {.capacity_bytes = cap, .max_chunk_bytes = 128 * KIB};
    harness_t *h = harness_start(&o);
    kvt_client_t *c = harness_client(h, "cap-model", 1, 0, 0);
    kvt_hash_t(*chains)[MAXLEN] = calloc(MAXCHAINS, sizeof *chains);
    size_t lens[MAXLEN], sizes[MAXLEN], len[MAXCHAINS], nchains = 0, saved = 0;
    int64_t loadable = 0, loadable_bytes = 0, loadable_alloc = 0;

    ck_assert_ptr_nonnull(chains);
    while (saved < 3 * cap) {
        json_t *st;
        ck_assert_uint_lt(nchains, MAXCHAINS);
        len[nchains] = 1 + nchains % MAXLEN;
        harness_chain(1000 + (uint32_t)nchains, chains[nchains], len[nchains]);
        for (size_t i = 0; i < len[nchains]; i++) {
            sizes[i] = cap_size(&chains[nchains][i]);
            saved += sizes[i];
        }
        save_expect(c, chains[nchains], len[nchains], sizes, 0, 0, NULL, KVT_SAVE_STORED,
                    "capacity fill");
        nchains++;
        st = harness_status(h);
        ck_assert_ptr_nonnull(st);
        ck_assert_msg(harness_jint(st, "ram.used_bytes") <= (int64_t)cap,
                      "used_bytes %lld > capacity %llu after chain %zu",
                      (long long)harness_jint(st, "ram.used_bytes"), (unsigned long long)cap,
                      nchains);
        /* the arena file is the header page (4 KiB) and the capacity */
        ck_assert_msg(harness_jint(st, "ram.resident_bytes") <= (int64_t)cap + 4096,
                      "resident_bytes %lld > capacity %llu + the header page after chain %zu",
                      (long long)harness_jint(st, "ram.resident_bytes"), (unsigned long long)cap,
                      nchains);
        ck_assert_int_eq(harness_jint(st, "ram.capacity_bytes"), (int64_t)cap);
        json_decref(st);
    }
    ck_assert_int_gt(harness_stat(h, "ram.evictions"), 0);

    /* No orphan: what loads of every chain is a prefix, byte-exact, and lookup agrees. */
    for (size_t k = 0; k < nchains; k++) {
        size_t nhit;
        for (size_t i = 0; i < len[k]; i++)
            sizes[i] = cap_size(&chains[k][i]);
        nhit = load_verify(c, chains[k], len[k], sizes, 0, 0, 128 * KIB, lens);
        for (size_t i = nhit; i < len[k]; i++)
            ck_assert_msg(lens[i] == 0, "chain %zu: chunk %zu loads but chunk %zu does not", k, i,
                          nhit);
        ck_assert_uint_eq(lookup_hit(c, chains[k], len[k]), nhit);
        for (size_t i = 0; i < nhit; i++) {
            loadable++;
            loadable_bytes += (int64_t)sizes[i];
            loadable_alloc += (int64_t)round4k(sizes[i]);
        }
    }
    ck_assert_int_gt(loadable, 0);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), loadable);
    ck_assert_int_eq(harness_stat(h, "ram.stored_bytes"), loadable_bytes);
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), loadable_alloc);

    free(chains);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Raw ZeroMQ peers
 */

static uint64_t prng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

enum {
    BAD_SHORT_GARBAGE, /* one frame of 0..23 random bytes */
    BAD_MULTI_GARBAGE, /* 1..4 random frames, the first with a wrong magic */
    BAD_MAGIC,         /* a valid LOOKUP with one byte of magic changed */
    BAD_VERSION,
    BAD_TRUNC_HEAD, /* LOOKUP head cut to 24..47 bytes */
    BAD_LONG_HEAD,  /* LOOKUP head with one extra byte */
    BAD_NO_HASHES,  /* LOOKUP without its hash frame */
    BAD_EXTRA_FRAME,
    BAD_SAVE_BEGIN_FRAMES, /* SAVE_BEGIN with a payload frame */
    BAD_SAVE_DATA_FRAMES,  /* SAVE_DATA, 2 hashes, 1 payload */
    BAD_HASH_LEN,          /* hash frame of 15, 17 or 0 bytes */
    BAD_TOO_MANY,          /* max_chunks_per_request + 1 hashes */
    BAD_BIG_PAYLOAD,       /* SAVE_DATA payload of max_chunk_bytes + 1 */
    BAD_UNKNOWN_TYPE,
    BAD_REPLY_TYPE, /* a reply type (HELLO_OK) sent as a request: no such request */
    BAD_NS_OTHER,   /* ns declared by another connection */
    BAD_NS_NONE,    /* ns never declared */
    BAD_RANK,       /* rank >= world */
    BAD_CONFLICT,   /* HELLO: same model + fingerprint, other world */
    BAD_KINDS
};

typedef struct {
    uint32_t raw_ns, good_ns;
    uint64_t good_fp;
    size_t max_hashes, max_chunk;
    uint8_t *bigbuf; /* max_chunk + 1 bytes */
    kvt_hash_t hashes[128];
} bad_ctx_t;

/* Sends one bad request of kind k with req_id rid; sets the expected error code and req_id. */
static void send_bad(void *s, const bad_ctx_t *bc, int k, uint64_t rid, uint64_t *rng,
                     int *want_code, uint64_t *want_rid)
{
    uint8_t head[128], g[4][64];
    kvt_frame_t f[4];
    size_t n = 2;
    kvt_msg_t hm;

    *want_rid = rid;
    f[1].data = bc->hashes;
    f[1].len = 3 * KVT_HASH_BYTES;
    f[0].data = head;
    f[0].len = harness_raw_head(head, KVT_MSG_LOOKUP, rid, bc->raw_ns, 0);
    switch (k) {
    case BAD_SHORT_GARBAGE:
        for (size_t i = 0; i < sizeof g[0]; i++)
            g[0][i] = (uint8_t)prng(rng);
        f[0].data = g[0];
        f[0].len = prng(rng) % KVT_HDR_BYTES;
        n = 1;
        *want_code = KVT_WIRE_EPROTO;
        *want_rid = 0;
        break;
    case BAD_MULTI_GARBAGE:
        n = 1 + prng(rng) % 4;
        for (size_t j = 0; j < n; j++) {
            for (size_t i = 0; i < sizeof g[j]; i++)
                g[j][i] = (uint8_t)prng(rng);
            f[j].data = g[j];
            f[j].len = prng(rng) % sizeof g[j];
        }
        g[0][0] = (uint8_t)('K' + 1 + g[0][0] % 100);
        *want_code = KVT_WIRE_EPROTO;
        *want_rid = 0;
        break;
    case BAD_MAGIC:
        head[prng(rng) % 4] ^= 0x20;
        *want_code = KVT_WIRE_EPROTO;
        *want_rid = 0;
        break;
    case BAD_VERSION:
        head[4] = (uint8_t)(2 + prng(rng) % 250);
        *want_code = KVT_WIRE_EVERSION;
        break;
    case BAD_TRUNC_HEAD:
        f[0].len = KVT_HDR_BYTES + prng(rng) % 24;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_LONG_HEAD:
        f[0].len += 1;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_NO_HASHES:
        n = 1;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_EXTRA_FRAME:
        f[2] = f[1];
        n = 3;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_SAVE_BEGIN_FRAMES:
        f[0].len = harness_raw_head(head, KVT_MSG_SAVE_BEGIN, rid, bc->raw_ns, 0);
        f[1].len = KVT_HASH_BYTES;
        f[2].data = "xyz";
        f[2].len = 3;
        n = 3;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_SAVE_DATA_FRAMES:
        f[0].len = harness_raw_head(head, KVT_MSG_SAVE_DATA, rid, bc->raw_ns, 0);
        f[1].len = 2 * KVT_HASH_BYTES;
        f[2].data = "xyz";
        f[2].len = 3;
        n = 3;
        *want_code = KVT_WIRE_EPROTO;
        break;
    case BAD_HASH_LEN: {
        static const size_t lens[3] = {15, 17, 0};
        f[1].len = lens[rid % 3];
        *want_code = KVT_WIRE_EPROTO;
        break;
    }
    case BAD_TOO_MANY:
        f[1].len = (bc->max_hashes + 1) * KVT_HASH_BYTES;
        *want_code = KVT_WIRE_ETOOBIG;
        break;
    case BAD_BIG_PAYLOAD:
        f[0].len = harness_raw_head(head, KVT_MSG_SAVE_DATA, rid, bc->raw_ns, 0);
        f[1].len = KVT_HASH_BYTES;
        f[2].data = bc->bigbuf;
        f[2].len = bc->max_chunk + 1;
        n = 3;
        *want_code = KVT_WIRE_ETOOBIG;
        break;
    case BAD_UNKNOWN_TYPE:
        head[5] = (uint8_t)(rid % 2 ? 50 : 0);
        f[0].len = KVT_HDR_BYTES + rid % 8;
        *want_code = KVT_WIRE_EUNSUPP;
        break;
    case BAD_REPLY_TYPE:
        memset(&hm, 0, sizeof hm);
        hm.hdr.version = 1;
        hm.hdr.type = KVT_MSG_HELLO_OK;
        hm.hdr.req_id = rid;
        f[0].len = kvt_head_encode(head, sizeof head, &hm);
        n = 1;
        *want_code = KVT_WIRE_EUNSUPP;
        break;
    case BAD_NS_OTHER:
        f[0].len =
            harness_raw_head(head, rid % 2 ? KVT_MSG_LOOKUP : KVT_MSG_LOAD, rid, bc->good_ns, 0);
        *want_code = KVT_WIRE_ENONS;
        break;
    case BAD_NS_NONE:
        f[0].len =
            harness_raw_head(head, KVT_MSG_LOOKUP, rid, 0xdead0000u + (uint32_t)(rid % 1000), 0);
        *want_code = KVT_WIRE_ENONS;
        break;
    case BAD_RANK:
        f[0].len =
            harness_raw_head(head, KVT_MSG_LOOKUP, rid, bc->raw_ns, (uint16_t)(2 + rid % 100));
        *want_code = KVT_WIRE_EINVAL;
        break;
    case BAD_CONFLICT:
        memset(&hm, 0, sizeof hm);
        hm.hdr.version = 1;
        hm.hdr.type = KVT_MSG_HELLO;
        hm.hdr.req_id = rid;
        hm.u.hello.layout_fp = bc->good_fp;
        hm.u.hello.chunk_tokens = 16;
        hm.u.hello.rank = 0;
        hm.u.hello.world = 3;
        f[0].len = kvt_head_encode(head, sizeof head, &hm);
        f[1].data = "good-model";
        f[1].len = strlen("good-model");
        *want_code = KVT_WIRE_ECONFLICT;
        break;
    default:
        ck_abort_msg("unknown bad kind %d", k);
    }
    ck_assert_int_eq(harness_raw_send(s, f, n), 0);
}

/* One good round trip of a fresh single chunk; returns its size. */
static size_t good_roundtrip(kvt_client_t *c, uint32_t seed)
{
    kvt_hash_t hs;
    size_t size = 1 + (seed * 7919u) % (48 * KIB);

    harness_chain(seed, &hs, 1);
    save_expect(c, &hs, 1, &size, 0, 0, NULL, KVT_SAVE_STORED, "good client save");
    ck_assert_uint_eq(lookup_hit(c, &hs, 1), 1);
    ck_assert_uint_eq(load_verify(c, &hs, 1, &size, 0, 0, 64 * KIB, NULL), 1);
    return size;
}

START_TEST(test_bad_input_flood)
{
    enum { FLOOD = 2000, GOOD_EVERY = 50, MAX_HASHES = 64 };
    static const char *const counter[] = {
        [-KVT_WIRE_EPROTO] = "server.errors.malformed",
        [-KVT_WIRE_EVERSION] = "server.errors.version",
        [-KVT_WIRE_ENONS] = "server.errors.unknown_ns",
        [-KVT_WIRE_ETOOBIG] = "server.errors.too_big",
        [-KVT_WIRE_EINVAL] = "server.errors.invalid",
        [-KVT_WIRE_ECONFLICT] = "server.errors.conflict",
        [-KVT_WIRE_EBUSY] = "server.errors.busy",
        [-KVT_WIRE_EUNSUPP] = "server.errors.unsupported",
    };
    harness_opts_t o = {.capacity_bytes = 4 * MIB,
                        .max_chunk_bytes = 64 * KIB,
                        .extra_json = "{\"server\": {\"max_chunks_per_request\": 64}}"};
    harness_t *h = harness_start(&o);
    kvt_ns_desc_t gd = harness_ns_desc("good-model", 1, 0, 32);
    kvt_client_t *good = connect_desc(h, &gd, 0);
    void *ctx = zmq_ctx_new();
    void *raw;
    bad_ctx_t bc = {
        .good_fp = kvt_ns_fingerprint(&gd), .max_hashes = MAX_HASHES, .max_chunk = 64 * KIB};
    int64_t sent[9] = {0};
    uint64_t rng = 42;
    size_t good_chunks = 0;
    json_t *st, *ns;

    ck_assert_ptr_nonnull(ctx);
    bc.bigbuf = calloc(1, bc.max_chunk + 1);
    ck_assert_ptr_nonnull(bc.bigbuf);
    harness_chain(7, bc.hashes, 128);
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ns = find_ns(st, "good-model", bc.good_fp);
    ck_assert_msg(ns != NULL, "good-model not in status");
    bc.good_ns = (uint32_t)json_integer_value(json_object_get(ns, "id"));
    json_decref(st);

    raw = harness_raw_open(ctx, h->endpoint, 5000);
    bc.raw_ns = harness_raw_hello(raw, "raw-model", 0x1234, 0, 2, 1);
    ck_assert_uint_ne(bc.raw_ns, bc.good_ns);

    for (int i = 0; i < FLOOD; i++) {
        uint64_t rid = 1000 + (uint64_t)i, want_rid = 0;
        int k = i % BAD_KINDS, want_code = 0;
        harness_raw_msg_t r;
        kvt_msg_t m;

        send_bad(raw, &bc, k, rid, &rng, &want_code, &want_rid);
        ck_assert_msg(harness_raw_recv(raw, &r) == 0, "no reply to bad message %d (kind %d)", i, k);
        harness_raw_decode(&r, &m);
        ck_assert_msg(m.hdr.type == KVT_MSG_ERROR, "bad message %d (kind %d): reply type %s", i, k,
                      kvt_msg_type_name(m.hdr.type));
        ck_assert_msg(m.u.error.code == want_code,
                      "bad message %d (kind %d): error %d (%s), want %d (%s); text \"%.*s\"", i, k,
                      m.u.error.code, kvt_wire_strerror(m.u.error.code), want_code,
                      kvt_wire_strerror(want_code), (int)m.u.error.text_len, m.u.error.text);
        ck_assert_msg(m.hdr.req_id == want_rid, "bad message %d (kind %d): req_id %llu, want %llu",
                      i, k, (unsigned long long)m.hdr.req_id, (unsigned long long)want_rid);
        harness_raw_msg_close(&r);
        sent[-want_code]++;
        if (i % GOOD_EVERY == 0) {
            good_roundtrip(good, 5000 + (uint32_t)i);
            good_chunks++;
        }
    }

    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    for (int e = 1; e <= 8; e++)
        ck_assert_msg(harness_jint(st, counter[e]) == sent[e], "%s = %lld, want %lld", counter[e],
                      (long long)harness_jint(st, counter[e]), (long long)sent[e]);
    ck_assert_int_eq(harness_jint(st, "ram.chunks"), (int64_t)good_chunks);
    json_decref(st);

    /* The raw connection is still usable: its namespace still answers. */
    {
        uint8_t head[128];
        kvt_frame_t f[2] = {{head, harness_raw_head(head, KVT_MSG_LOOKUP, 77, bc.raw_ns, 1)},
                            {bc.hashes, 2 * KVT_HASH_BYTES}};
        harness_raw_msg_t r;
        kvt_msg_t m;
        ck_assert_int_eq(harness_raw_send(raw, f, 2), 0);
        ck_assert_int_eq(harness_raw_recv(raw, &r), 0);
        harness_raw_decode(&r, &m);
        ck_assert_int_eq(m.hdr.type, KVT_MSG_LOOKUP_OK);
        ck_assert_uint_eq(m.hdr.req_id, 77);
        ck_assert_uint_eq(m.u.lookup_ok.hit, 0);
        harness_raw_msg_close(&r);
    }

    /* A frame beyond max_chunk_bytes + 64 KiB: ZeroMQ drops that peer's connection, so the daemon
     * never sees the message (no error counted); the peer reconnects and is served again. */
    {
        size_t huge = bc.max_chunk + 64 * KIB + 4096;
        uint8_t *buf = calloc(1, huge);
        void *raw2 = harness_raw_open(ctx, h->endpoint, 500);
        kvt_frame_t f = {buf, huge};
        int64_t deadline = harness_now_ms() + HARNESS_DEADLINE_MS;
        int answered = 0;

        ck_assert_ptr_nonnull(buf);
        (void)harness_raw_hello(raw2, "raw2-model", 0x99, 0, 1, 5);
        ck_assert_int_eq(harness_raw_send(raw2, &f, 1), 0);
        for (uint64_t rid = 6; !answered && harness_now_ms() < deadline; rid++) {
            uint8_t head[128];
            kvt_msg_t m;
            harness_raw_msg_t r;
            kvt_frame_t hf[2];
            hf[0].data = head;
            hf[0].len = harness_raw_hello_head(head, 0x99, 0, 1, rid);
            hf[1].data = "raw2-model";
            hf[1].len = strlen("raw2-model");
            ck_assert_int_eq(harness_raw_send(raw2, hf, 2), 0);
            if (harness_raw_recv(raw2, &r) != 0)
                continue;
            harness_raw_decode(&r, &m);
            ck_assert_msg(m.hdr.type == KVT_MSG_HELLO_OK,
                          "after an oversize frame: reply %s (code %d), want hello_ok",
                          kvt_msg_type_name(m.hdr.type),
                          m.hdr.type == KVT_MSG_ERROR ? m.u.error.code : 0);
            harness_raw_msg_close(&r);
            answered = 1;
        }
        ck_assert_msg(answered, "the peer that sent an oversize frame is never served again");
        zmq_close(raw2);
        free(buf);
    }
    ck_assert_int_eq(harness_stat(h, "server.errors.malformed"), sent[-KVT_WIRE_EPROTO]);
    ck_assert_int_eq(harness_stat(h, "server.errors.too_big"), sent[-KVT_WIRE_ETOOBIG]);
    good_roundtrip(good, 99999);

    zmq_close(raw);
    zmq_ctx_term(ctx);
    free(bc.bigbuf);
    kvt_close(&good);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Clients that die
 */

/* For forked children, which must not use Check: one request, one decoded reply head. Returns
 * the reply type, or -1. Only fixed fields of *out are valid afterwards. */
static int child_request(void *s, const kvt_frame_t *f, size_t n, kvt_msg_t *out)
{
    kvt_limits_t lim = {.max_hashes = 65536, .max_payload_bytes = 64u * MIB};
    harness_raw_msg_t r;
    int rc;

    if (harness_raw_send(s, f, n) != 0 || harness_raw_recv(s, &r) != 0)
        return -1;
    rc = kvt_msg_decode(r.f, r.n, &lim, out);
    harness_raw_msg_close(&r);
    return rc == 0 ? out->hdr.type : -1;
}

/* Child: raw HELLO; returns the socket (ns_id in *ns) or _exit()s with a code >= 10. */
static void *child_connect(void *ctx, const char *endpoint, uint32_t *ns)
{
    uint8_t head[128];
    kvt_frame_t f[2];
    kvt_msg_t m;
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int tmo = 5000;

    if (s == NULL)
        _exit(10);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    if (zmq_connect(s, endpoint) != 0)
        _exit(11);
    memset(&m, 0, sizeof m);
    m.hdr.version = 1;
    m.hdr.type = KVT_MSG_HELLO;
    m.hdr.req_id = 1;
    m.u.hello.layout_fp = 0xc0ffee;
    m.u.hello.chunk_tokens = 16;
    m.u.hello.world = 1;
    f[0].data = head;
    f[0].len = kvt_head_encode(head, sizeof head, &m);
    f[1].data = "crash-model";
    f[1].len = strlen("crash-model");
    if (child_request(s, f, 2, &m) != KVT_MSG_HELLO_OK)
        _exit(12);
    *ns = m.u.hello_ok.ns_id;
    return s;
}

/* Child: SAVE_BEGIN of 8 chunks, all WANTED, then dies without SAVE_DATA. */
static void child_save_begin_then_die(const char *endpoint)
{
    void *ctx = zmq_ctx_new(), *s;
    kvt_hash_t hs[8];
    uint8_t head[128];
    kvt_frame_t f[2];
    kvt_msg_t m;
    uint32_t ns;

    if (ctx == NULL)
        _exit(9);
    s = child_connect(ctx, endpoint, &ns);
    harness_chain(600, hs, 8);
    f[0].data = head;
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_BEGIN, 2, ns, 0);
    f[1].data = hs;
    f[1].len = sizeof hs;
    if (child_request(s, f, 2, &m) != KVT_MSG_SAVE_BEGIN_OK)
        _exit(20);
    _exit(0);
}

/* Child: a flood of SAVE_DATA messages that announce 4 chunks and carry only 2 payloads, sent
 * without waiting; dies as soon as the first reply arrives. */
static void child_partial_flood_then_die(const char *endpoint)
{
    void *ctx = zmq_ctx_new(), *s;
    static uint8_t payload[60 * KIB];
    kvt_hash_t hs[4];
    uint8_t head[128];
    kvt_frame_t f[4];
    harness_raw_msg_t r;
    uint32_t ns;

    if (ctx == NULL)
        _exit(9);
    s = child_connect(ctx, endpoint, &ns);
    harness_chain(700, hs, 4);
    memset(payload, 0xab, sizeof payload);
    f[0].data = head;
    f[1].data = hs;
    f[1].len = sizeof hs;
    f[2].data = payload;
    f[2].len = sizeof payload;
    f[3] = f[2];
    for (int i = 0; i < 50; i++) {
        f[0].len = harness_raw_head(head, KVT_MSG_SAVE_DATA, 100 + (uint64_t)i, ns, 0);
        if (harness_raw_send(s, f, 4) != 0)
            _exit(30);
    }
    if (harness_raw_recv(s, &r) != 0)
        _exit(31);
    _exit(0);
}

static void run_child(void (*fn)(const char *), const char *endpoint)
{
    int wst = 0;
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        fn(endpoint);
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "crash child failed: status 0x%x", wst);
}

START_TEST(test_client_dies_mid_save)
{
    const size_t sizes[2] = {10000, 20000};
    harness_opts_t o = {.capacity_bytes = 4 * MIB, .max_chunk_bytes = 64 * KIB};
    harness_t *h = harness_start(&o);
    kvt_client_t *c = harness_client(h, "survivor-model", 1, 0, 0), *c2;
    harness_int_eq_t used;
    kvt_hash_t hs[2];
    json_t *st;
    int64_t baseline;

    harness_chain(800, hs, 2);
    save_expect(c, hs, 2, sizes, 0, 0, NULL, KVT_SAVE_STORED, "before the crashes");
    baseline = harness_stat(h, "ram.used_bytes");
    ck_assert_int_eq(baseline, (int64_t)(round4k(sizes[0]) + round4k(sizes[1])));

    run_child(child_save_begin_then_die, h->endpoint);
    run_child(child_partial_flood_then_die, h->endpoint);
    ck_assert_int_ge(harness_stat(h, "server.errors.malformed"), 1);

    used.path = "ram.used_bytes";
    used.value = baseline;
    st = harness_wait_status(h, harness_pred_int_eq, &used, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "ram.used_bytes does not return to %lld after the crashes",
                  (long long)baseline);
    ck_assert_int_eq(harness_jint(st, "ram.chunks"), 2);
    json_decref(st);

    /* Old and new clients are served; the crashed chains left nothing behind. */
    ck_assert_uint_eq(load_verify(c, hs, 2, sizes, 0, 0, 64 * KIB, NULL), 2);
    c2 = harness_client(h, "survivor-model", 1, 0, 0);
    ck_assert_uint_eq(load_verify(c2, hs, 2, sizes, 0, 0, 64 * KIB, NULL), 2);
    {
        kvt_hash_t more[2];
        harness_chain(801, more, 2);
        save_expect(c2, more, 2, sizes, 0, 0, NULL, KVT_SAVE_STORED, "after the crashes");
        ck_assert_uint_eq(load_verify(c, more, 2, sizes, 0, 0, 64 * KIB, NULL), 2);
    }
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), 2 * baseline);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 4);

    kvt_close(&c);
    kvt_close(&c2);
    harness_stop(&h);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Timeouts, crash of the daemon, status socket
 */

START_TEST(test_timeouts)
{
    harness_t *h = harness_start(NULL);
    kvt_ns_desc_t d = harness_ns_desc("timeout-model", 1, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 300};
    kvt_client_t *c = NULL, *dead = NULL;
    char ep[160];
    kvt_hash_t hs[2];
    kvt_lookup_result_t res = {0};

    /* Nobody serves this endpoint: the HELLO is never answered. */
    snprintf(ep, sizeof ep, "ipc://%s/nobody.zmq", h->dir);
    ck_assert_int_eq(kvt_connect(ep, &d, 0, &o, &c), KVT_ETIMEDOUT);
    ck_assert_ptr_null(c);

    /* A daemon killed under a connected client: calls fail KVT_EUNAVAIL once the client has
     * seen the connection close (kvtier.h "The link"); with that fast failure off, they time
     * out; they never hang. */
    ck_assert_int_eq(kvt_connect(h->endpoint, &d, 0, &o, &dead), 0);
    harness_chain(900, hs, 2);
    ck_assert_int_eq(lookup_hit(dead, hs, 2), 0);
    harness_kill9(h);
    ck_assert_int_eq(kvt_lookup(dead, hs, 2, NULL, &res), KVT_EUNAVAIL);
    ck_assert_int_eq(kvt_set_down_wait(dead, -1), 0);
    ck_assert_int_eq(kvt_lookup(dead, hs, 2, NULL, &res), KVT_ETIMEDOUT);
    kvt_close(&dead);
    harness_free(&h);
    ck_assert_ptr_null(h);
}
END_TEST

/* Prometheus text: every line is empty, a comment, or "name[{labels}] value". */
static void assert_prometheus_text(const char *body)
{
    const char *line = body;
    int samples = 0;

    while (*line != '\0') {
        size_t n = strcspn(line, "\n");
        char buf[512], *sp, *end;
        ck_assert_uint_lt(n, sizeof buf);
        memcpy(buf, line, n);
        buf[n] = '\0';
        if (n > 0 && buf[0] != '#') {
            size_t name = strspn(buf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789_:");
            ck_assert_msg(name > 0 && (buf[name] == ' ' || buf[name] == '{'),
                          "metrics line is not a sample: \"%s\"", buf);
            sp = strrchr(buf, ' ');
            ck_assert_ptr_nonnull(sp);
            strtod(sp + 1, &end);
            ck_assert_msg(end != sp + 1 && *end == '\0', "metrics sample has no value: \"%s\"",
                          buf);
            samples++;
        }
        line += n;
        if (*line == '\n')
            line++;
    }
    ck_assert_int_gt(samples, 0);
}

START_TEST(test_status_socket)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *c;
    struct stat sb;
    char ctype[128], *body = NULL;
    int code = 0;
    kvt_hash_t hs;
    json_t *st;

    ck_assert_int_eq(stat(h->status_path, &sb), 0);
    ck_assert(S_ISSOCK(sb.st_mode));
    ck_assert_msg((sb.st_mode & 07777) == 0660, "status socket mode %o, want 660",
                  (unsigned)(sb.st_mode & 07777));

    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(json_string_value(json_object_get(st, "version")), KVT_VERSION_STRING);
    ck_assert_int_eq(harness_jint(st, "pid"), h->pid);
    ck_assert_str_eq(json_string_value(json_object_get(st, "endpoint")), h->endpoint);
    ck_assert(json_is_number(json_object_get(st, "uptime_s")));
    ck_assert_int_eq(harness_jint(st, "ram.capacity_bytes"), (int64_t)h->capacity_bytes);
    ck_assert_int_eq(harness_jint(st, "ram.used_bytes"), 0);
    ck_assert_int_eq(harness_jint(st, "ram.chunks"), 0);
    ck_assert(json_is_false(json_object_get(json_object_get(st, "disk"), "enabled")));
    ck_assert_int_eq(harness_jint(st, "disk.used_bytes"), 0);
    ck_assert_int_eq(json_array_size(json_object_get(st, "namespaces")), 0);
    json_decref(st);

    c = harness_client(h, "status-model", 1, 0, 0);
    harness_chain(950, &hs, 1);
    ck_assert_uint_eq(lookup_hit(c, &hs, 1), 0);
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(harness_jint(st, "ops.hello.count"), 1);
    ck_assert_int_eq(harness_jint(st, "ops.lookup.count"), 1);
    ck_assert_int_eq(harness_jint(st, "ops.load.count"), 0);
    ck_assert_int_eq(harness_jint(st, "ram.misses"), 1);
    ck_assert_int_eq(harness_jint(st, "server.clients"), 1);
    ck_assert_int_eq(json_array_size(json_object_get(st, "namespaces")), 1);
    json_decref(st);

    ck_assert_int_eq(
        harness_http(h->status_path, "GET", "/metrics", &code, ctype, sizeof ctype, &body), 0);
    ck_assert_int_eq(code, 200);
    ck_assert_msg(strncmp(ctype, "text/plain", 10) == 0, "/metrics Content-Type \"%s\"", ctype);
    assert_prometheus_text(body);
    free(body);

    ck_assert_int_eq(harness_http(h->status_path, "GET", "/nope", &code, NULL, 0, &body), 0);
    ck_assert_int_eq(code, 404);
    free(body);
    ck_assert_int_eq(harness_http(h->status_path, "POST", "/status", &code, NULL, 0, &body), 0);
    ck_assert_int_eq(code, 405);
    free(body);

    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static Suite *integration_suite(void)
{
    Suite *s = suite_create("integration");
    TCase *tc;

    /* Each tcase: generous, for sanitizer builds; CK_DEFAULT_TIMEOUT cannot shorten it. */
    tc = tcase_create("roundtrip");
    tcase_add_test(tc, test_roundtrip_4ranks);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("semantics");
    tcase_add_test(tc, test_prefix_semantics);
    tcase_add_test(tc, test_all_ranks_min);
    tcase_add_test(tc, test_replicated_namespace);
    tcase_add_test(tc, test_namespaces_isolated);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("capacity");
    tcase_add_test(tc, test_leases);
    tcase_add_test(tc, test_capacity);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("robustness");
    tcase_add_test(tc, test_bad_input_flood);
    tcase_add_test(tc, test_client_dies_mid_save);
    tcase_add_test(tc, test_timeouts);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("status");
    tcase_add_test(tc, test_status_socket);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = integration_suite, .scratch = "kvtit"};
