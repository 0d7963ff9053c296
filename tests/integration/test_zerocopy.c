/*
 * test_zerocopy.c - libkvtier's zero-copy calls against the real daemon: reserve, fill the
 * pointers, commit; pin, read the pointers, release (kvtier.h).
 *
 * Byte-exact round trips with several reservations and pins in flight; what kvt_submit_commit
 * refuses (another kind of completion, another client's reservation, one already committed) and
 * what the daemon refuses (a commit naming another range: the raw case is in test_shm.c); a
 * pinned chunk that survives a 3x fill of the tier and is evicted once released; a client
 * SIGKILLed while it holds reservations and pins, after which status returns to its baseline;
 * chunks only on disk pinned and loaded through the arena (promoted, answered by location);
 * the arena's mapping as kvt_arena() reports it (page-aligned, for cudaHostRegister).
 */
#include "check_main.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvtier.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define WAIT_MS 20000

static char extra[640];

/* A daemon with a shareable arena, a hold of hold_ms and, when disk_dir is not NULL, a small
 * disk tier there. */
static harness_t *start_shm(uint64_t capacity, int hold_ms, const char *disk_dir)
{
    static int seq;
    harness_opts_t o = {.capacity_bytes = capacity, .max_chunk_bytes = 1 * MIB};
    int n = snprintf(extra, sizeof extra,
                     "{\"ram\": {\"arena_path\": \"/dev/shm/kvtier-zc-%d-%d.arena\", "
                     "\"shm_hold_ms\": %d}",
                     (int)getpid(), seq++, hold_ms);

    if (disk_dir != NULL)
        n += snprintf(extra + n, sizeof extra - (size_t)n,
                      ", \"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": "
                      "\"32MiB\", \"segment_bytes\": \"2MiB\", \"write_buffer_bytes\": \"2MiB\", "
                      "\"fsync\": \"none\"}",
                      disk_dir);
    snprintf(extra + n, sizeof extra - (size_t)n, "}");
    o.extra_json = extra;
    return harness_start(&o);
}

static kvt_client_t *connect_c(const harness_t *h, int path)
{
    kvt_ns_desc_t d = harness_ns_desc("zc-model", 1, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 10000, .data_path = path};
    kvt_client_t *c = NULL;
    int rc = kvt_connect(h->endpoint, &d, 0, &o, &c);

    ck_assert_msg(rc == 0, "kvt_connect: %s", kvt_strerror(rc));
    return c;
}

/* The next completion, which must have succeeded. */
static kvt_completion_t *next(kvt_client_t *c)
{
    kvt_completion_t *comp = harness_next_completion(c, WAIT_MS);

    ck_assert_msg(comp->status == 0, "op %d: %s (%s)", comp->op, kvt_strerror(comp->status),
                  comp->error);
    return comp;
}

/* Reserves n chunks of len (parent: the chunk before hs[0]), fills them with the harness
 * pattern and commits; asserts every outcome is want. */
static void zc_save(kvt_client_t *c, const kvt_hash_t *hs, size_t n, size_t len, int want)
{
    size_t lens[16];
    kvt_completion_t *res, *done;
    kvt_handle_t hr, hc;

    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++)
        lens[i] = len;
    ck_assert_int_eq(kvt_submit_reserve(c, hs, n, lens, NULL, NULL, &hr), 0);
    res = next(c);
    ck_assert_uint_eq(res->handle, hr);
    ck_assert_int_eq(res->op, KVT_OP_RESERVE);
    for (size_t i = 0; i < n; i++) {
        if (res->outcomes[i] != KVT_SAVE_RESERVED) {
            ck_assert_ptr_null(res->ptrs[i]);
            continue;
        }
        ck_assert_ptr_nonnull(res->ptrs[i]);
        harness_fill(res->ptrs[i], len, 0, harness_hash_key(&hs[i])); /* the "DMA" */
    }
    ck_assert_int_eq(kvt_submit_commit(c, res, n, NULL, &hc), 0);
    done = next(c);
    ck_assert_uint_eq(done->handle, hc);
    ck_assert_int_eq(done->op, KVT_OP_COMMIT);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(done->outcomes[i], want);
    kvt_completion_free(c, done);
}

/* Pins n chunks; asserts every one is a hit of len bytes holding the pattern. The caller
 * frees (releases) the completion. */
static kvt_completion_t *zc_pin(kvt_client_t *c, const kvt_hash_t *hs, size_t n, size_t len)
{
    kvt_completion_t *p;
    kvt_handle_t hp;

    ck_assert_int_eq(kvt_submit_pin(c, hs, n, NULL, &hp), 0);
    p = next(c);
    ck_assert_uint_eq(p->handle, hp);
    ck_assert_int_eq(p->op, KVT_OP_PIN);
    ck_assert_uint_eq(p->nhit, n);
    ck_assert_int_gt(p->hold_until_ms, harness_now_ms() - 1000);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(p->outcomes[i], KVT_LOAD_HIT);
        ck_assert_uint_eq(p->lens[i], len);
        ck_assert_msg(harness_check_fill(p->ptrs[i], len, 0, harness_hash_key(&hs[i])),
                      "pinned chunk %zu is not byte-exact", i);
    }
    return p;
}

START_TEST(test_reserve_commit_pin_release)
{
    harness_t *h = start_shm(32 * MIB, 5000, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    kvt_hash_t hs[8];
    kvt_completion_t *res[8], *p;
    kvt_handle_t hd[8];
    size_t len = 200 * KIB, nhit = 0, lens[8];
    void *bufs[8];
    kvt_arena_t ar;
    long page = sysconf(_SC_PAGESIZE);

    ck_assert_int_eq(kvt_arena(c, &ar), 0);
    ck_assert_ptr_nonnull(ar.base);
    ck_assert_uint_eq((uintptr_t)ar.base % (uintptr_t)page, 0);
    ck_assert_uint_eq(ar.bytes % (size_t)page, 0);
    ck_assert_uint_ge(ar.bytes, 32 * MIB);
    ck_assert_uint_eq(ar.maps, 1);

    harness_chain(1, hs, 8);
    /* eight reservations in flight at once, one chunk each, filled and committed in order */
    for (size_t i = 0; i < 8; i++)
        ck_assert_int_eq(kvt_submit_reserve(c, &hs[i], 1, &len,
                                            &(kvt_save_opts_t){.parent = i ? &hs[i - 1] : NULL},
                                            &(kvt_submit_opts_t){.user = (void *)(uintptr_t)i},
                                            &hd[i]),
                         0);
    for (size_t k = 0; k < 8; k++) {
        kvt_completion_t *r = next(c);
        size_t i = (uintptr_t)r->user;
        ck_assert_uint_eq(r->handle, hd[i]);
        ck_assert_int_eq(r->outcomes[0], KVT_SAVE_RESERVED);
        ck_assert_uint_eq((uint8_t *)r->ptrs[0] - (uint8_t *)ar.base + len <= ar.bytes, 1);
        res[i] = r;
    }
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 8 * (int64_t)len);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0); /* reserved chunks are invisible */
    for (size_t i = 0; i < 8; i++) {
        harness_fill(res[i]->ptrs[0], len, 0, harness_hash_key(&hs[i]));
        ck_assert_int_eq(kvt_submit_commit(c, res[i], 1, NULL, NULL), 0);
    }
    for (size_t k = 0; k < 8; k++) {
        kvt_completion_t *d = next(c);
        ck_assert_int_eq(d->outcomes[0], KVT_SAVE_STORED);
        kvt_completion_free(c, d);
    }
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 8);

    /* a second save of the same chunks reserves nothing */
    zc_save(c, hs, 8, len, KVT_SAVE_EXISTS);

    p = zc_pin(c, hs, 8, len);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 8 * (int64_t)len);
    kvt_completion_free(c, p); /* releases: no round trip, batched */
    {
        harness_int_eq_t zero = {"ram.pinned_bytes", 0};
        json_t *st = harness_wait_status(h, harness_pred_int_eq, &zero, WAIT_MS);
        ck_assert_msg(st != NULL, "the pins were not released");
        json_decref(st);
    }
    /* the copying API reads the same bytes */
    for (size_t i = 0; i < 8; i++) {
        bufs[i] = malloc(len);
        lens[i] = len;
    }
    ck_assert_int_eq(kvt_load(c, hs, 8, bufs, lens, lens, &nhit), 0);
    ck_assert_uint_eq(nhit, 8);
    for (size_t i = 0; i < 8; i++) {
        ck_assert(harness_check_fill(bufs[i], len, 0, harness_hash_key(&hs[i])));
        free(bufs[i]);
    }
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_commit_refusals)
{
    harness_t *h = start_shm(16 * MIB, 5000, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM), *d = connect_c(h, KVT_DATA_PATH_SHM);
    kvt_client_t *f = connect_c(h, KVT_DATA_PATH_FRAMES);
    kvt_hash_t hs[2];
    size_t lens[2] = {64 * KIB, 64 * KIB};
    kvt_completion_t *res, *lk, *done;
    kvt_handle_t x;

    harness_chain(2, hs, 2);
    /* the zero-copy calls need the arena */
    ck_assert_int_eq(kvt_submit_reserve(f, hs, 2, lens, NULL, NULL, &x), KVT_EUNSUPP);
    ck_assert_int_eq(kvt_submit_pin(f, hs, 2, NULL, &x), KVT_EUNSUPP);
    ck_assert_int_eq(kvt_arena(f, &(kvt_arena_t){0}), KVT_EUNSUPP);

    ck_assert_int_eq(kvt_submit_lookup(c, hs, 2, NULL, NULL, &x), 0);
    lk = next(c);
    ck_assert_int_eq(kvt_submit_commit(c, lk, 2, NULL, &x), KVT_EINVAL); /* not a reservation */
    kvt_completion_free(c, lk);

    ck_assert_int_eq(kvt_submit_reserve(c, hs, 2, lens, NULL, NULL, &x), 0);
    res = next(c);
    ck_assert_int_eq(kvt_submit_commit(d, res, 2, NULL, &x), KVT_EINVAL); /* another client's */
    ck_assert_int_eq(kvt_submit_commit(c, res, 3, NULL, &x), KVT_EINVAL); /* more than it has */
    harness_fill(res->ptrs[0], lens[0], 0, harness_hash_key(&hs[0]));
    /* commit only the first chunk: the second is abandoned (reclaimed at its deadline) */
    ck_assert_int_eq(kvt_submit_commit(c, res, 1, NULL, &x), 0);
    done = next(c);
    ck_assert_int_eq(done->outcomes[0], KVT_SAVE_STORED);
    ck_assert_int_eq(done->outcomes[1], KVT_SAVE_NOSPACE);
    kvt_completion_free(c, done);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 1);
    {
        harness_int_eq_t zero = {"ram.reserved_bytes", 0};
        json_t *st = harness_wait_status(h, harness_pred_int_eq, &zero, WAIT_MS);
        ck_assert_msg(st != NULL, "the abandoned reservation was not reclaimed");
        json_decref(st);
    }
    kvt_close(&c);
    kvt_close(&d);
    kvt_close(&f);
    harness_stop(&h);
}
END_TEST

START_TEST(test_pin_survives_fill_then_evicted)
{
    harness_t *h = start_shm(8 * MIB, 60000, NULL); /* a hold longer than the fills take */
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    kvt_hash_t pinned[2], other[2];
    kvt_completion_t *p;
    size_t nhit;

    harness_chain(3, pinned, 2);
    zc_save(c, pinned, 2, 1 * MIB, KVT_SAVE_STORED);
    p = zc_pin(c, pinned, 2, 1 * MIB);
    /* 3x the capacity, 2 MiB a reservation: with the 2 MiB pinned that is the most one client
     * may hold (ram.session_held_share 0.5 of 8 MiB) */
    for (uint32_t k = 0; k < 12; k++) {
        harness_chain(100 + k, other, 2);
        zc_save(c, other, 2, 1 * MIB, KVT_SAVE_STORED);
    }
    ck_assert_int_gt(harness_stat(h, "ram.evictions"), 0);
    for (size_t i = 0; i < 2; i++) /* the bytes under the pointers never moved */
        ck_assert(harness_check_fill(p->ptrs[i], 1 * MIB, 0, harness_hash_key(&pinned[i])));
    kvt_completion_free(c, p);
    {
        harness_int_eq_t zero = {"ram.pinned_bytes", 0};
        json_t *st = harness_wait_status(h, harness_pred_int_eq, &zero, WAIT_MS);
        ck_assert_msg(st != NULL, "the pins were not released");
        json_decref(st);
    }
    for (uint32_t k = 0; k < 12; k++) {
        harness_chain(200 + k, other, 2);
        zc_save(c, other, 2, 1 * MIB, KVT_SAVE_STORED);
    }
    ck_assert_int_eq(kvt_submit_pin(c, pinned, 2, NULL, NULL), 0);
    p = next(c);
    nhit = p->nhit;
    ck_assert_int_eq(p->outcomes[0], KVT_LOAD_MISS);
    kvt_completion_free(c, p);
    ck_assert_uint_eq(nhit, 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Chunks only on disk come back on the shared-memory path: the daemon promotes them into the
 * arena and answers by location once read (a deferred reply the library simply waits for). */
START_TEST(test_disk_chunks_by_location)
{
    char dir[128];
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t a[4], b[4], other[4];
    static uint8_t back[4][256 * KIB];
    void *bufs[4];
    size_t caps[4], lens[4], nhit;
    int64_t promoted;
    kvt_completion_t *p;

    snprintf(dir, sizeof dir, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    h = start_shm(4 * MIB, 5000, dir);
    c = connect_c(h, KVT_DATA_PATH_SHM);
    harness_chain(7, a, 4);
    harness_chain(8, b, 4);
    zc_save(c, a, 4, 256 * KIB, KVT_SAVE_STORED);
    zc_save(c, b, 4, 256 * KIB, KVT_SAVE_STORED);
    /* 16 MiB more through 4 MiB of RAM: a and b, the oldest, are written and leave RAM */
    for (uint32_t k = 0; k < 16; k++) {
        harness_chain(300 + k, other, 4);
        zc_save(c, other, 4, 256 * KIB, KVT_SAVE_STORED);
        harness_wait_disk_drained(h);
    }
    promoted = harness_stat(h, "disk.promotions");
    p = zc_pin(c, a, 4, 256 * KIB); /* byte-exact under the pointers */
    ck_assert_int_eq(harness_stat(h, "disk.promotions"), promoted + 4);
    kvt_completion_free(c, p);
    for (size_t i = 0; i < 4; i++) { /* the copying load, verified, of the other chain */
        bufs[i] = back[i];
        caps[i] = sizeof back[i];
    }
    ck_assert_int_eq(kvt_load(c, b, 4, bufs, caps, lens, &nhit), 0);
    ck_assert_uint_eq(nhit, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert(harness_check_fill(back[i], lens[i], 0, harness_hash_key(&b[i])));
    ck_assert_int_eq(harness_stat(h, "disk.promotions"), promoted + 8);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_killed_holder_reclaimed)
{
    harness_t *h = start_shm(16 * MIB, 1500, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    harness_int_eq_t rz = {"ram.reserved_bytes", 0}, pz = {"ram.pinned_bytes", 0};
    kvt_hash_t stored[2], fresh[3];
    int64_t used;
    json_t *st;
    int p[2];
    pid_t pid;
    char ok = 0;

    harness_chain(4, stored, 2);
    harness_chain(5, fresh, 3);
    zc_save(c, stored, 2, 256 * KIB, KVT_SAVE_STORED);
    used = harness_stat(h, "ram.used_bytes");
    ck_assert_int_eq(pipe(p), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kvt_client_t *k = connect_c(h, KVT_DATA_PATH_SHM);
        size_t lens[3] = {128 * KIB, 128 * KIB, 128 * KIB};
        kvt_completion_t *r1, *r2;
        close(p[0]);
        ck_assert_int_eq(kvt_submit_reserve(k, fresh, 3, lens, NULL, NULL, NULL), 0);
        ck_assert_int_eq(kvt_submit_pin(k, stored, 2, NULL, NULL), 0);
        r1 = next(k);
        r2 = next(k);
        ok = r1 != NULL && r2 != NULL;
        (void)!write(p[1], &ok, 1);
        pause(); /* killed here, holding both */
        _exit(0);
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    close(p[0]);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 3 * 128 * KIB);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 2 * 256 * KIB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    st = harness_wait_status(h, harness_pred_int_eq, &rz, WAIT_MS);
    ck_assert_msg(st != NULL, "the killed client's reservations were not reclaimed");
    json_decref(st);
    st = harness_wait_status(h, harness_pred_int_eq, &pz, WAIT_MS);
    ck_assert_msg(st != NULL, "the killed client's pins were not reclaimed");
    ck_assert_int_eq(harness_jint(st, "ram.used_bytes"), used);
    json_decref(st);
    zc_save(c, fresh, 3, 128 * KIB, KVT_SAVE_STORED); /* the same chunks, saved normally */
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* The synchronous zero-copy calls: kvt_reserve, kvt_commit and kvt_pin return completions the
 * caller owns (never queued), byte-exact like the asynchronous ones; refused arguments and a
 * shut-down client send nothing and give no completion, and a refused commit leaves the
 * reservation the caller's. */
START_TEST(test_sync_zero_copy_calls)
{
    harness_t *h = start_shm(16 * MIB, 5000, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    kvt_hash_t hs[3];
    size_t lens[3] = {256 * KIB, 256 * KIB, 256 * KIB};
    kvt_completion_t *resv = NULL, *done = NULL, *pin = NULL, *q;

    harness_chain(31, hs, 3);
    ck_assert_int_eq(kvt_reserve(c, hs, 3, lens, NULL, &resv), 0);
    ck_assert_ptr_nonnull(resv);
    ck_assert_int_eq(resv->op, KVT_OP_RESERVE);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(resv->outcomes[i], KVT_SAVE_RESERVED);
        harness_fill(resv->ptrs[i], lens[i], 0, harness_hash_key(&hs[i]));
    }
    ck_assert_int_eq(kvt_commit(c, resv, 9, &done), KVT_EINVAL); /* more than it holds */
    ck_assert_ptr_null(done);
    ck_assert_int_eq(kvt_commit(c, resv, 3, &done), 0); /* still the caller's: it commits */
    ck_assert_ptr_nonnull(done);
    ck_assert_int_eq(done->op, KVT_OP_COMMIT);
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(done->outcomes[i], KVT_SAVE_STORED);
    kvt_completion_free(c, done); /* the reservation went with the commit */
    ck_assert_int_eq(kvt_pin(c, hs, 3, &pin), 0);
    ck_assert_ptr_nonnull(pin);
    ck_assert_uint_eq(pin->nhit, 3);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(pin->lens[i], lens[i]);
        ck_assert_int_eq(harness_check_fill(pin->ptrs[i], lens[i], 0, harness_hash_key(&hs[i])), 1);
    }
    ck_assert_int_eq(kvt_next_completion(c, &q), 0); /* nothing was queued */
    kvt_completion_free(c, pin);
    ck_assert_int_eq(kvt_pin(c, hs, 0, &pin), KVT_EINVAL);
    ck_assert_ptr_null(pin);
    ck_assert_int_eq(kvt_pin(c, hs, 1, NULL), KVT_EINVAL);
    kvt_shutdown(c);
    ck_assert_int_eq(kvt_pin(c, hs, 1, &pin), KVT_ECLOSED);
    ck_assert_ptr_null(pin);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Thousands of holds in one session (the index over them, session.c, 0.2.7): four
 * reservations of 1000 chunks committed in another order than they were made, every chunk
 * pinned twice in four pins freed out of order (0.2.9: one hold with two pins, charged once: the
 * RAM it holds); every chunk stored byte-exact, and nothing held at the end. */
START_TEST(test_many_holds_out_of_order)
{
    enum { PARTS = 4, PER = 1000, N = PARTS * PER };
    const size_t len = 4 * KIB;
    harness_t *h = start_shm(64 * MIB, 5000, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    static kvt_hash_t hs[N];
    static size_t lens[PER];
    kvt_completion_t *resv[PARTS], *pin[2 * PARTS], *done;
    static const int commit_order[PARTS] = {2, 0, 3, 1},
                     free_order[2 * PARTS] = {5, 1, 7, 3, 0, 6, 2, 4};
    harness_int_eq_t pz = {"ram.pinned_bytes", 0};

    harness_chain(7100, hs, N);
    for (size_t i = 0; i < PER; i++)
        lens[i] = len;
    for (int p = 0; p < PARTS; p++) {
        ck_assert_int_eq(kvt_reserve(c, hs + p * PER, PER, lens, NULL, &resv[p]), 0);
        for (size_t i = 0; i < PER; i++) {
            ck_assert_int_eq(resv[p]->outcomes[i], KVT_SAVE_RESERVED);
            harness_fill(resv[p]->ptrs[i], len, 0, harness_hash_key(&hs[p * PER + i]));
        }
    }
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), (int64_t)(N * len));
    for (int k = 0; k < PARTS; k++) {
        int p = commit_order[k];
        ck_assert_int_eq(kvt_commit(c, resv[p], PER, &done), 0);
        for (size_t i = 0; i < PER; i++)
            ck_assert_int_eq(done->outcomes[i], KVT_SAVE_STORED);
        kvt_completion_free(c, done);
    }
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    for (int p = 0; p < 2 * PARTS; p++) {
        ck_assert_int_eq(kvt_pin(c, hs + (p % PARTS) * PER, PER, &pin[p]), 0);
        ck_assert_uint_eq(pin[p]->nhit, PER);
    }
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), (int64_t)(N * len));
    for (int k = 0; k < 2 * PARTS; k++) {
        int p = free_order[k];
        for (size_t i = 0; i < PER; i += 97)
            ck_assert_int_eq(harness_check_fill(pin[p]->ptrs[i], len, 0,
                                                harness_hash_key(&hs[(p % PARTS) * PER + i])),
                             1);
        kvt_completion_free(c, pin[p]);
    }
    json_decref(harness_wait_status(h, harness_pred_int_eq, &pz, WAIT_MS));
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), N);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* A hash repeated in pins (0.2.9, a hostile client's): eight pins of one chunk named 4096 times
 * each, none released, are one hold of the session, charged once; the daemon answers a status
 * request meanwhile, and every release comes off the same hold. Before, each repeat was a hold
 * of its own, all on one probe run of the session's index (32768 holds, pinned_bytes 32768
 * times the chunk, and loop turns of seconds as the holds were swept). */
START_TEST(test_repeated_pins_one_hold)
{
    enum { REP = 4096, PINS = 8 };
    const size_t len = 64; /* a load's cost still counts every repeat (store_load_cost): small */
    harness_t *h = start_shm(16 * MIB, 60000, NULL);
    kvt_client_t *c = connect_c(h, KVT_DATA_PATH_SHM);
    static kvt_hash_t hs[REP];
    kvt_completion_t *pin[PINS];
    harness_int_eq_t pz = {"ram.pinned_bytes", 0};

    harness_chain(7300, hs, 1);
    ck_assert_uint_eq(harness_save_chain(c, 7300, 1, len, 0), 1);
    for (size_t i = 1; i < REP; i++)
        hs[i] = hs[0];
    for (int p = 0; p < PINS; p++) {
        ck_assert_int_eq(kvt_pin(c, hs, REP, &pin[p]), 0);
        ck_assert_uint_eq(pin[p]->nhit, REP);
        ck_assert_ptr_eq(pin[p]->ptrs[REP - 1], pin[p]->ptrs[0]);
    }
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), (int64_t)len);
    ck_assert(harness_check_fill(pin[PINS - 1]->ptrs[0], len, 0, (uint64_t)7300 << 32));
    for (int p = 0; p < PINS - 1; p++)
        kvt_completion_free(c, pin[p]);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), (int64_t)len); /* one pin is left */
    kvt_completion_free(c, pin[PINS - 1]);
    json_decref(harness_wait_status(h, harness_pred_int_eq, &pz, WAIT_MS));
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static Suite *zerocopy_suite(void)
{
    Suite *s = suite_create("zerocopy");
    TCase *t = tcase_create("zerocopy");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_reserve_commit_pin_release);
    tcase_add_test(t, test_commit_refusals);
    tcase_add_test(t, test_pin_survives_fill_then_evicted);
    tcase_add_test(t, test_disk_chunks_by_location);
    tcase_add_test(t, test_killed_holder_reclaimed);
    tcase_add_test(t, test_sync_zero_copy_calls);
    tcase_add_test(t, test_many_holds_out_of_order);
    tcase_add_test(t, test_repeated_pins_one_hold);
    suite_add_tcase(s, t);
    return s;
}

const check_program_t check_program = {.suite = zerocopy_suite, .scratch = "kvtzc"};
