/*
 * test_shm.c - integration tests of the shared-memory data path against the real daemon.
 *
 * Each test starts kvtierd with a file arena under /dev/shm (named per test process so that
 * parallel runs never share one) and a short ram.shm_hold_ms, then checks: byte-exact round
 * trips through both paths for several ranks at once and across paths; the client's automatic
 * choice of path (ipc + mappable arena -> shm; memfd arena or tcp -> frames) and its visibility
 * in status; that nothing outside a reservation can be committed; that reservations and load
 * pins of a client killed mid-save and mid-load are reclaimed (status returns to zero); that a
 * pinned chunk survives eviction pressure; and an arena on hugetlbfs (root only: it reserves
 * huge pages and mounts the filesystem itself, and says "skipped" where it cannot).
 */
#include "check_main.h"

#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "kvt_proto.h"
#include "kvtier.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define HOLD_MS 1500

static char arena_json[512];

/* A daemon with a shareable arena of capacity bytes at a per-process path. */
static harness_t *start_shm(uint64_t capacity, uint64_t max_chunk)
{
    static int seq;
    harness_opts_t o = {.capacity_bytes = capacity, .max_chunk_bytes = max_chunk};

    snprintf(arena_json, sizeof arena_json,
             "{\"ram\": {\"arena_path\": \"/dev/shm/kvtier-test-%d-%d.arena\", "
             "\"shm_hold_ms\": %d}}",
             (int)getpid(), seq++, HOLD_MS);
    o.extra_json = arena_json;
    return harness_start(&o);
}

static kvt_client_t *connect_path(const harness_t *h, const char *endpoint, uint32_t world,
                                  uint32_t rank, int path)
{
    kvt_ns_desc_t d = harness_ns_desc("shm-model", world, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 5000, .data_path = path};
    kvt_client_t *c = NULL;
    int rc = kvt_connect(endpoint != NULL ? endpoint : h->endpoint, &d, rank, &o, &c);

    ck_assert_msg(rc == 0, "kvt_connect: %s", kvt_strerror(rc));
    return c;
}

/* Saves n chunks of size len (pattern of rank and hash) and checks every outcome. */
static void save_chain(kvt_client_t *c, uint32_t rank, const kvt_hash_t *hs, size_t n, size_t len,
                       int want)
{
    const void **bufs = calloc(n, sizeof *bufs);
    size_t *lens = calloc(n, sizeof *lens);
    uint8_t *out = calloc(n, 1);
    int rc;

    for (size_t i = 0; i < n; i++) {
        void *b = malloc(len);
        harness_fill(b, len, rank, harness_hash_key(&hs[i]));
        bufs[i] = b;
        lens[i] = len;
    }
    rc = kvt_save(c, hs, n, bufs, lens, NULL, out);
    ck_assert_msg(rc == 0, "kvt_save: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(out[i], want);
        free((void *)bufs[i]);
    }
    free(bufs);
    free(lens);
    free(out);
}

/* Loads n chunks and checks they are exactly the saved pattern; returns the prefix loaded. */
static size_t load_check(kvt_client_t *c, uint32_t rank, const kvt_hash_t *hs, size_t n, size_t len)
{
    void **bufs = calloc(n, sizeof *bufs);
    size_t *caps = calloc(n, sizeof *caps), *lens = calloc(n, sizeof *lens), nhit = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        bufs[i] = malloc(len);
        caps[i] = len;
    }
    rc = kvt_load(c, hs, n, bufs, caps, lens, &nhit);
    ck_assert_msg(rc == 0, "kvt_load: %s", kvt_strerror(rc));
    for (size_t i = 0; i < nhit; i++) {
        ck_assert_uint_eq(lens[i], len);
        ck_assert_msg(harness_check_fill(bufs[i], len, rank, harness_hash_key(&hs[i])),
                      "chunk %zu of rank %u is not byte-exact", i, rank);
    }
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(caps);
    free(lens);
    return nhit;
}

typedef struct {
    const harness_t *h;
    uint32_t rank;
    int path;
    int rounds;
} rank_job_t;

static void *rank_thread(void *arg)
{
    rank_job_t *j = arg;
    kvt_client_t *c = connect_path(j->h, NULL, 4, j->rank, j->path);
    kvt_hash_t hs[8];

    ck_assert_int_eq(kvt_data_path(c), j->path);
    for (int r = 0; r < j->rounds; r++) {
        harness_chain(1000u * (uint32_t)j->path + (uint32_t)r, hs, 8);
        save_chain(c, j->rank, hs, 8, 96 * KIB + j->rank, KVT_SAVE_STORED);
        ck_assert_uint_eq(load_check(c, j->rank, hs, 8, 96 * KIB + j->rank), 8);
    }
    kvt_close(&c);
    return NULL;
}

START_TEST(test_both_paths_four_ranks_concurrently)
{
    harness_t *h = start_shm(64 * MIB, 1 * MIB);
    pthread_t t[8];
    rank_job_t jobs[8];

    for (int i = 0; i < 8; i++) {
        jobs[i] = (rank_job_t){.h = h,
                               .rank = (uint32_t)(i % 4),
                               .path = i < 4 ? KVT_DATA_PATH_SHM : KVT_DATA_PATH_FRAMES,
                               .rounds = 4};
        ck_assert_int_eq(pthread_create(&t[i], NULL, rank_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    /* 2 paths x 4 ranks x 4 rounds x 8 chunks, no holds left, shm bytes went through commits */
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 256);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "server.bytes_committed"),
                     4 * 8 * (int64_t)(4 * 96 * KIB + 0 + 1 + 2 + 3));
    ck_assert_int_eq(harness_stat(h, "server.bytes_received"),
                     4 * 8 * (int64_t)(4 * 96 * KIB + 0 + 1 + 2 + 3));
    harness_stop(&h);
}
END_TEST

START_TEST(test_cross_path_and_exists)
{
    harness_t *h = start_shm(16 * MIB, 1 * MIB);
    kvt_client_t *shm = connect_path(h, NULL, 2, 1, KVT_DATA_PATH_AUTO);
    kvt_client_t *frm = connect_path(h, NULL, 2, 1, KVT_DATA_PATH_FRAMES);
    kvt_hash_t a[4], b[4];

    ck_assert_int_eq(kvt_data_path(shm), KVT_DATA_PATH_SHM); /* AUTO picks shm on ipc */
    harness_chain(1, a, 4);
    harness_chain(2, b, 4);
    save_chain(shm, 1, a, 4, 200 * KIB, KVT_SAVE_STORED);
    ck_assert_uint_eq(load_check(frm, 1, a, 4, 200 * KIB), 4);
    save_chain(frm, 1, b, 4, 300 * KIB, KVT_SAVE_STORED);
    ck_assert_uint_eq(load_check(shm, 1, b, 4, 300 * KIB), 4);
    /* existing chunks cost no transfer on either path */
    save_chain(shm, 1, b, 4, 300 * KIB, KVT_SAVE_EXISTS);
    save_chain(frm, 1, a, 4, 200 * KIB, KVT_SAVE_EXISTS);
    ck_assert_int_eq(harness_stat(h, "server.bytes_committed"), 4 * 200 * KIB);
    ck_assert_int_eq(harness_stat(h, "server.bytes_received"), 4 * 300 * KIB);
    {
        json_t *st = harness_status(h),
               *ss = json_object_get(json_object_get(st, "server"), "sessions");
        int shm_seen = 0, frames_seen = 0;
        size_t i;
        json_t *v;
        json_array_foreach(ss, i, v)
        {
            const char *p = json_string_value(json_object_get(v, "data_path"));
            shm_seen += strcmp(p, "shm") == 0;
            frames_seen += strcmp(p, "frames") == 0;
        }
        ck_assert_int_eq(shm_seen, 1);
        ck_assert_int_eq(frames_seen, 1);
        json_decref(st);
    }
    kvt_close(&shm);
    kvt_close(&frm);
    harness_stop(&h);
}
END_TEST

START_TEST(test_auto_falls_back_to_frames)
{
    harness_t *h = harness_start(NULL); /* memfd arena: nothing to map */
    kvt_ns_desc_t d = harness_ns_desc("shm-model", 1, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 5000, .data_path = KVT_DATA_PATH_SHM};
    kvt_client_t *c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_AUTO), *x = NULL;
    kvt_hash_t hs[2];

    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_FRAMES);
    ck_assert_int_eq(kvt_connect(h->endpoint, &d, 0, &o, &x), KVT_EUNSUPP);
    ck_assert_ptr_null(x);
    harness_chain(3, hs, 2);
    save_chain(c, 0, hs, 2, 10 * KIB, KVT_SAVE_STORED);
    ck_assert_uint_eq(load_check(c, 0, hs, 2, 10 * KIB), 2);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* An arena the client cannot map says why (0.2.7: KVT_ESYS and no text): the daemon's arena file
 * removed under it (as an operator's cleanup of /dev/shm would), a shared-memory connect fails
 * naming the path and the error; auto falls back to frames. */
START_TEST(test_unmappable_arena_says_why)
{
    harness_t *h = start_shm(4 * MIB, 64 * KIB);
    kvt_ns_desc_t d = harness_ns_desc("shm-model", 1, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 5000, .data_path = KVT_DATA_PATH_SHM};
    kvt_client_t *x = NULL, *c;
    char path[256];

    ck_assert_int_eq(sscanf(arena_json, "{\"ram\": {\"arena_path\": \"%255[^\"]", path), 1);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(kvt_connect(h->endpoint, &d, 0, &o, &x), KVT_ESYS);
    ck_assert_ptr_null(x);
    ck_assert_msg(strstr(kvt_last_error(NULL), path) != NULL &&
                      strstr(kvt_last_error(NULL), "No such file") != NULL,
                  "last error: '%s'", kvt_last_error(NULL));
    c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_AUTO);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_FRAMES);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_tcp_endpoint_uses_frames)
{
    char extra[256], ep[64];
    harness_opts_t o = {0};
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t hs[2];
    int port = 20000 + (int)(getpid() % 20000);

    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(extra, sizeof extra,
             "{\"server\": {\"endpoint\": \"%s\"}, \"ram\": {\"arena_path\": "
             "\"/dev/shm/kvtier-test-%d-tcp.arena\"}}",
             ep, (int)getpid());
    o.extra_json = extra;
    h = harness_start(&o);
    c = connect_path(h, ep, 1, 0, KVT_DATA_PATH_AUTO);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_FRAMES);
    harness_chain(4, hs, 2);
    save_chain(c, 0, hs, 2, 64 * KIB, KVT_SAVE_STORED);
    ck_assert_uint_eq(load_check(c, 0, hs, 2, 64 * KIB), 2);
    ck_assert_int_eq(harness_stat(h, "server.bytes_received"), 2 * 64 * KIB);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* --- raw exchanges: a client that stops half-way --- */

typedef struct {
    void *ctx, *s;
    uint32_t ns;
    uint64_t rid;
} raw_t;

static void raw_connect(raw_t *r, const harness_t *h)
{
    kvt_ns_desc_t d = harness_ns_desc("shm-model", 1, 0, 32);

    r->ctx = zmq_ctx_new();
    r->s = harness_raw_open(r->ctx, h->endpoint, 5000);
    r->rid = 100;
    r->ns = harness_raw_hello(r->s, "shm-model", kvt_ns_fingerprint(&d), 0, 1, r->rid++);
}

static void raw_close(raw_t *r)
{
    zmq_close(r->s);
    zmq_ctx_term(r->ctx);
}

/* One request; the reply is decoded into out (its frames stay in *m until closed). */
static void raw_call(raw_t *r, kvt_frame_t *f, size_t n, harness_raw_msg_t *m, kvt_msg_t *out)
{
    ck_assert_int_eq(harness_raw_send(r->s, f, n), 0);
    ck_assert_msg(harness_raw_recv(r->s, m) == 0, "no reply");
    harness_raw_decode(m, out);
}

/* SAVE_RESERVE of n chunks of len bytes; returns the reply (caller closes m). */
static void raw_reserve(raw_t *r, const kvt_hash_t *hs, size_t n, uint64_t len,
                        harness_raw_msg_t *m, kvt_msg_t *out)
{
    uint8_t head[128], lens[8 * 16];
    kvt_frame_t f[3];

    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++)
        kvt_put_u64(lens + 8 * i, len);
    f[0].data = head;
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_RESERVE, r->rid++, r->ns, 0);
    f[1].data = hs;
    f[1].len = n * sizeof *hs;
    f[2].data = lens;
    f[2].len = 8 * n;
    raw_call(r, f, 3, m, out);
    ck_assert_int_eq(out->hdr.type, KVT_MSG_SAVE_RESERVE_OK);
}

/* A child that reserves (mid-save) or pins (mid-load) and then waits to be killed. */
static pid_t child_hold(const harness_t *h, const kvt_hash_t *hs, size_t n, uint64_t len, int load)
{
    int p[2];
    pid_t pid;
    char ok = 0;

    ck_assert_int_eq(pipe(p), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        raw_t r;
        harness_raw_msg_t m;
        kvt_msg_t rep;
        close(p[0]);
        raw_connect(&r, h);
        if (load) {
            uint8_t head[128];
            kvt_frame_t f[2] = {{head, 0}, {hs, n * sizeof *hs}};
            kvt_msg_t req = {.hdr = {.version = 1,
                                     .type = KVT_MSG_LOAD,
                                     .flags = KVT_LOAD_SHM,
                                     .req_id = r.rid++,
                                     .ns_id = r.ns}};
            f[0].len = kvt_head_encode(head, sizeof head, &req);
            raw_call(&r, f, 2, &m, &rep);
        } else {
            raw_reserve(&r, hs, n, len, &m, &rep);
        }
        ok = 1;
        (void)!write(p[1], &ok, 1);
        pause(); /* killed here: the holds are never committed or released */
        _exit(0);
    }
    close(p[1]);
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    close(p[0]);
    return pid;
}

static void kill_child(pid_t pid)
{
    int st;

    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

START_TEST(test_killed_mid_save_reclaimed)
{
    harness_t *h = start_shm(16 * MIB, 1 * MIB);
    harness_int_eq_t zero = {"ram.reserved_bytes", 0};
    kvt_hash_t hs[4];
    json_t *st;
    int64_t base;
    pid_t pid;

    base = harness_stat(h, "ram.used_bytes");
    harness_chain(7, hs, 4);
    pid = child_hold(h, hs, 4, 512 * KIB, 0);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 4 * 512 * KIB);
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), base + 4 * 512 * KIB);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0); /* reserved chunks are invisible */
    kill_child(pid);
    st = harness_wait_status(h, harness_pred_int_eq, &zero, 3 * HOLD_MS + 2000);
    ck_assert_msg(st != NULL, "reservations of a killed client were not reclaimed");
    ck_assert_int_eq(harness_jint(st, "ram.used_bytes"), base);
    json_decref(st);
    {
        /* a new client saves the same chunks normally */
        kvt_client_t *c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_SHM);
        save_chain(c, 0, hs, 4, 512 * KIB, KVT_SAVE_STORED);
        ck_assert_uint_eq(load_check(c, 0, hs, 4, 512 * KIB), 4);
        kvt_close(&c);
    }
    harness_stop(&h);
}
END_TEST

START_TEST(test_killed_mid_load_reclaimed_and_pin_holds)
{
    harness_t *h = start_shm(8 * MIB, 1 * MIB);
    harness_int_eq_t zero = {"ram.pinned_bytes", 0};
    kvt_client_t *c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_SHM);
    kvt_hash_t pinned[2], other[4];
    json_t *st;
    pid_t pid;

    harness_chain(8, pinned, 2);
    save_chain(c, 0, pinned, 2, 1 * MIB, KVT_SAVE_STORED);
    pid = child_hold(h, pinned, 2, 0, 1);
    ck_assert_int_eq(harness_stat(h, "ram.pinned_bytes"), 2 * MIB);
    /* 3x capacity of other chains: the pinned chunks must survive */
    for (uint32_t k = 0; k < 6; k++) {
        harness_chain(100 + k, other, 4);
        save_chain(c, 0, other, 4, 1 * MIB, KVT_SAVE_STORED);
    }
    ck_assert_int_gt(harness_stat(h, "ram.evictions"), 0);
    ck_assert_uint_eq(load_check(c, 0, pinned, 2, 1 * MIB), 2);
    kill_child(pid);
    st = harness_wait_status(h, harness_pred_int_eq, &zero, 3 * HOLD_MS + 2000);
    ck_assert_msg(st != NULL, "load pins of a killed client were not reclaimed");
    json_decref(st);
    /* unpinned now: another 3x fill evicts them */
    for (uint32_t k = 0; k < 6; k++) {
        harness_chain(200 + k, other, 4);
        save_chain(c, 0, other, 4, 1 * MIB, KVT_SAVE_STORED);
    }
    ck_assert_uint_eq(load_check(c, 0, pinned, 2, 1 * MIB), 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_commit_outside_reservation_refused)
{
    harness_t *h = start_shm(16 * MIB, 1 * MIB);
    raw_t r;
    harness_raw_msg_t m;
    kvt_msg_t rep;
    kvt_hash_t hs[2];
    uint8_t head[128], locs[2 * KVT_LOC_BYTES];
    kvt_frame_t f[3];

    harness_chain(9, hs, 2);
    raw_connect(&r, h);
    raw_reserve(&r, hs, 2, 64 * KIB, &m, &rep);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_WANTED);
    ck_assert_int_eq(rep.u.chunks_ok.status[1], KVT_CHUNK_WANTED);
    ck_assert_uint_eq(rep.u.chunks_ok.hold_ms, HOLD_MS);
    memcpy(locs, rep.u.chunks_ok.locs, sizeof locs);
    harness_raw_msg_close(&m);
    /* chunk 1's range shifted by one page: outside what was reserved */
    kvt_put_u64(locs + KVT_LOC_BYTES, kvt_get_u64(locs + KVT_LOC_BYTES) + 4096);
    f[0].data = head;
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_COMMIT, r.rid++, r.ns, 0);
    f[1].data = hs;
    f[1].len = sizeof hs;
    f[2].data = locs;
    f[2].len = sizeof locs;
    raw_call(&r, f, 3, &m, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_ERROR);
    ck_assert_int_eq(rep.u.error.code, KVT_WIRE_EINVAL);
    harness_raw_msg_close(&m);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), 0);
    /* committing without any reservation stores nothing either */
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_COMMIT, r.rid++, r.ns, 0);
    raw_call(&r, f, 3, &m, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_SKIPPED);
    ck_assert_int_eq(rep.u.chunks_ok.status[1], KVT_CHUNK_SKIPPED);
    harness_raw_msg_close(&m);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0);
    raw_close(&r);
    harness_stop(&h);
}
END_TEST

/* CLIENT_CSUMS (protocol 2): a SAVE_COMMIT with a checksums frame is published with the writer's
 * checksums as given (the daemon hashes nothing: LOAD_OK answers exactly those values), one
 * without the frame with the daemon's own; the same commit in protocol 1 is EPROTO. And
 * libkvtier's copying save sends checksums that match the bytes it copied (a pin answers them). */
START_TEST(test_commit_client_checksums)
{
    harness_t *h = start_shm(8 * MIB, 1 * MIB);
    void *ctx = zmq_ctx_new();
    void *s = harness_raw_open(ctx, h->endpoint, 5000);
    kvt_hello_ok_t hello = harness_raw_hello2(s, "csum-model", "", 1);
    kvt_hash_t hs[3];
    uint8_t lens[8 * 2], locs[KVT_LOC_BYTES * 2], csums[8 * 2];
    kvt_frame_t f[4];
    harness_raw_msg_t r;
    kvt_msg_t m, rep;
    kvt_client_t *c;
    kvt_completion_t *comp;
    void *buf = malloc(64 * KIB);
    const void *src = buf;
    size_t len = 64 * KIB;
    uint8_t out;

    ck_assert_uint_eq(hello.features & KVT_FEAT_CLIENT_CSUMS, KVT_FEAT_CLIENT_CSUMS);
    harness_chain(41, hs, 3);
    for (int k = 0; k < 2; k++) {
        /* k = 0: chunks 0 and 1 with checksums given; k = 1: chunk 2 without */
        size_t n = k == 0 ? 2 : 1;
        memset(&m, 0, sizeof m);
        m.hdr = (kvt_hdr_t){
            .version = 2, .type = KVT_MSG_SAVE_RESERVE, .req_id = 10 + 2 * k, .ns_id = hello.ns_id};
        m.u.save.nhashes = n;
        if (k == 1) {
            m.hdr.flags = KVT_SAVE_PARENT;
            memcpy(m.u.save.parent.b, hs[1].b, KVT_HASH_BYTES);
        }
        for (size_t i = 0; i < n; i++)
            kvt_put_u64(lens + 8 * i, 64 * KIB);
        f[0] = (kvt_frame_t){&hs[2 * k], n * sizeof *hs};
        f[1] = (kvt_frame_t){lens, 8 * n};
        harness_raw_call(s, &m, f, 2, &r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_RESERVE_OK);
        for (size_t i = 0; i < n; i++)
            ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_WANTED);
        memcpy(locs, rep.u.chunks_ok.locs, n * KVT_LOC_BYTES);
        harness_raw_msg_close(&r);
        kvt_put_u64(csums, 0x1111);
        kvt_put_u64(csums + 8, 0x2222);
        m.hdr.type = KVT_MSG_SAVE_COMMIT;
        m.hdr.req_id++;
        if (k == 0) { /* protocol 1 knows no checksums frame: refused, nothing taken */
            m.hdr.version = 1;
            f[1] = (kvt_frame_t){locs, n * KVT_LOC_BYTES};
            f[2] = (kvt_frame_t){csums, 8 * n};
            harness_raw_call(s, &m, f, 3, &r, &rep);
            ck_assert_int_eq(rep.hdr.type, KVT_MSG_ERROR);
            ck_assert_int_eq(rep.u.error.code, KVT_WIRE_EPROTO);
            harness_raw_msg_close(&r);
            m.hdr.version = 2;
        }
        f[1] = (kvt_frame_t){locs, n * KVT_LOC_BYTES};
        f[2] = (kvt_frame_t){csums, 8 * n};
        harness_raw_call(s, &m, f, k == 0 ? 3 : 2, &r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
        for (size_t i = 0; i < n; i++)
            ck_assert_int_eq(rep.u.chunks_ok.status[i], KVT_CHUNK_STORED);
        harness_raw_msg_close(&r);
    }
    /* a frames LOAD of the three: the given checksums, then the daemon's own */
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2, .type = KVT_MSG_LOAD, .req_id = 20, .ns_id = hello.ns_id};
    m.u.load.nhashes = 3;
    f[0] = (kvt_frame_t){hs, sizeof hs};
    harness_raw_call(s, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOAD_OK);
    ck_assert_ptr_nonnull(rep.u.chunks_ok.checksums);
    ck_assert_uint_eq(kvt_get_u64(rep.u.chunks_ok.checksums), 0x1111);
    ck_assert_uint_eq(kvt_get_u64(rep.u.chunks_ok.checksums + 8), 0x2222);
    ck_assert_uint_eq(rep.u.chunks_ok.payloads[2].len, 64 * KIB);
    ck_assert_uint_eq(kvt_get_u64(rep.u.chunks_ok.checksums + 16),
                      kvt_checksum(rep.u.chunks_ok.payloads[2].data, 64 * KIB));
    /* a reader finds chunk 0's bytes do not match what its writer claimed */
    ck_assert_uint_ne(kvt_checksum(rep.u.chunks_ok.payloads[0].data, 64 * KIB), 0x1111);
    harness_raw_msg_close(&r);
    /* its RELEASE CORRUPT makes the daemon compare the bytes with the stored (given) checksum
     * and remove the chunk: a lying writer only loses its own chunks */
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2,
                        .type = KVT_MSG_RELEASE,
                        .flags = KVT_RELEASE_CORRUPT,
                        .req_id = 21,
                        .ns_id = hello.ns_id};
    m.u.release.nhashes = 1;
    f[0] = (kvt_frame_t){hs, sizeof hs[0]};
    harness_raw_call(s, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_RELEASE_OK);
    harness_raw_msg_close(&r);
    {
        json_t *st = NULL;
        for (int k = 0; k < 100; k++) {
            json_decref(st);
            st = harness_status(h);
            if (harness_jint(st, "ram.verify_drops") >= 1)
                break;
            usleep(20000);
        }
        ck_assert_int_eq(harness_jint(st, "ram.verify_drops"), 1);
        json_decref(st);
    }
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2, .type = KVT_MSG_LOAD, .req_id = 22, .ns_id = hello.ns_id};
    m.u.load.nhashes = 3;
    f[0] = (kvt_frame_t){hs, sizeof hs};
    harness_raw_call(s, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOAD_OK);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_MISS); /* gone */
    ck_assert_int_eq(rep.u.chunks_ok.status[2], KVT_CHUNK_HIT);  /* its honest successor stays */
    harness_raw_msg_close(&r);
    zmq_close(s);
    zmq_ctx_term(ctx);

    /* the library's copying save: its checksum is the bytes' (the pin answers it) */
    c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_SHM);
    harness_chain(42, hs, 1);
    harness_fill(buf, len, 0, harness_hash_key(&hs[0]));
    ck_assert_int_eq(kvt_save(c, hs, 1, &src, &len, NULL, &out), 0);
    ck_assert_int_eq(out, KVT_SAVE_STORED);
    ck_assert_int_eq(kvt_submit_pin(c, hs, 1, NULL, NULL), 0);
    comp = harness_next_completion(c, 5000);
    ck_assert_int_eq(comp->status, 0);
    ck_assert_int_eq(comp->outcomes[0], KVT_LOAD_HIT);
    ck_assert_ptr_nonnull(comp->checksums);
    ck_assert_uint_eq(comp->checksums[0], kvt_checksum(buf, len));
    ck_assert_int_eq(harness_check_fill(comp->ptrs[0], len, 0, harness_hash_key(&hs[0])), 1);
    kvt_completion_free(c, comp);
    kvt_close(&c);
    free(buf);
    harness_stop(&h);
}
END_TEST

#define HUGE_POOL "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

/* The pool of 2 MiB huge pages, after setting it when set >= 0 (the kernel may allocate fewer
 * than asked); -1 when it cannot be read (no 2 MiB huge pages here). */
static long huge_pool(long set)
{
    FILE *f;
    long v = -1;

    if (set >= 0 && (f = fopen(HUGE_POOL, "w")) != NULL) {
        fprintf(f, "%ld\n", set);
        fclose(f);
    }
    f = fopen(HUGE_POOL, "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* The pool as the test case found it: put back after the case (an unchecked fixture runs in
 * Check's parent process, so a test that failed midway still gives its pages back). */
static long huge_pool_before = -1;

static void huge_setup(void)
{
    huge_pool_before = huge_pool(-1);
}

static void huge_teardown(void)
{
    if (huge_pool_before >= 0 && huge_pool(-1) != huge_pool_before)
        huge_pool(huge_pool_before);
}

START_TEST(test_hugetlbfs_arena)
{
    char mnt[128], disk[160], extra[640];
    long pool = huge_pool(-1);
    harness_opts_t o = {.capacity_bytes = 8 * MIB, .max_chunk_bytes = 256 * KIB};
    harness_t *h;
    kvt_client_t *c;
    json_t *st;

    if (geteuid() != 0 || pool < 0) {
        printf("test_hugetlbfs_arena: skipped (needs root and 2 MiB huge pages: %s)\n", HUGE_POOL);
        return;
    }
    /* a mount namespace of this test's own: the mount goes with the test's process (the daemon,
     * its child, shares it), whatever way the test ends */
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        printf("test_hugetlbfs_arena: skipped (no mount namespace: %s)\n", strerror(errno));
        return;
    }
    snprintf(mnt, sizeof mnt, "%s/huge-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(mnt));
    snprintf(disk, sizeof disk, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(disk));
    /* 8 MiB + a headroom of 2 x 2 MiB + the header page: 7 pages; 16 more leave room */
    if (huge_pool(pool + 16) != pool + 16) {
        printf("test_hugetlbfs_arena: skipped (16 more 2 MiB huge pages could not be had)\n");
        return; /* the teardown puts the pool back */
    }
    if (mount("kvt-huge", mnt, "hugetlbfs", 0, "pagesize=2M") != 0) {
        printf("test_hugetlbfs_arena: skipped (mount hugetlbfs: %s)\n", strerror(errno));
        return;
    }
    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"%s/arena\", \"shm_hold_ms\": %d}, \"disk\": "
             "{\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"64MiB\", "
             "\"segment_bytes\": \"4MiB\", \"write_buffer_bytes\": \"2MiB\", \"fsync\": \"none\"}}",
             mnt, HOLD_MS, disk);
    o.extra_json = extra;
    h = harness_start(&o);
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "ram.huge_page_bytes"), 2 * MIB);
    ck_assert_int_eq(harness_jint(st, "ram.arena_bytes") % (2 * MIB), 0);
    json_decref(st);
    c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_SHM);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_SHM);
    /* 16 MiB through 8 MiB: the first chains only on disk */
    harness_save_chains(h, c, 1, 8, 8, 256 * KIB, 1);
    for (uint32_t k = 1; k <= 8; k++)
        ck_assert_uint_eq(harness_load_chain(c, k, 8, 256 * KIB, 0), 8); /* byte-exact */
    st = harness_status(h);
    ck_assert_int_gt(harness_jint(st, "disk.records_written"), 0);
    ck_assert_int_gt(harness_jint(st, "disk.hits"), 0); /* read back into the huge pages */
    printf("hugetlbfs arena: %lld bytes in 2 MiB pages; %lld records written, %lld disk hits, "
           "0 wrong bytes\n",
           (long long)harness_jint(st, "ram.arena_bytes"),
           (long long)harness_jint(st, "disk.records_written"),
           (long long)harness_jint(st, "disk.hits"));
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);
    ck_assert_int_eq(umount(mnt), 0);
}
END_TEST

/* Whether the kernel gives madvised private memory transparent huge pages (stage.h). */
static bool thp_madvise(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

    if (f == NULL)
        return false;
    if (fgets(buf, sizeof buf, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    return strstr(buf, "[always]") != NULL || strstr(buf, "[madvise]") != NULL;
}

/* 0.2.4: the arena on a tmpfs mounted huge=always is seen as huge-paged (status
 * ram.huge_page_bytes, from the mount's option), so disk.staging "auto" does not stage reads
 * there, and chunks go to disk and back byte-exact; the same daemon with its arena on /dev/shm
 * stages its reads when the kernel's THP mode allows. Root only (a mount namespace). */
START_TEST(test_thp_tmpfs_arena)
{
    char mnt[128], disk[160], extra[640];
    harness_opts_t o = {.capacity_bytes = 8 * MIB, .max_chunk_bytes = 256 * KIB};
    harness_t *h;
    kvt_client_t *c;
    json_t *st;

    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        printf("test_thp_tmpfs_arena: skipped (needs root and a mount namespace)\n");
        return;
    }
    snprintf(mnt, sizeof mnt, "%s/thp-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(mnt));
    snprintf(disk, sizeof disk, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(disk));
    if (mount("kvt-thp", mnt, "tmpfs", 0, "huge=always,size=64m") != 0) {
        printf("test_thp_tmpfs_arena: skipped (mount tmpfs huge=always: %s)\n", strerror(errno));
        return;
    }
    for (int on_shm = 0; on_shm < 2; on_shm++) {
        char arena[200];
        if (on_shm)
            snprintf(arena, sizeof arena, "/dev/shm/kvt-thp-test-%d.arena", (int)getpid());
        else
            snprintf(arena, sizeof arena, "%s/arena", mnt);
        snprintf(extra, sizeof extra,
                 "{\"ram\": {\"arena_path\": \"%s\", \"shm_hold_ms\": %d}, \"disk\": "
                 "{\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"64MiB\", "
                 "\"segment_bytes\": \"4MiB\", \"write_buffer_bytes\": \"2MiB\", "
                 "\"fsync\": \"none\"}}",
                 arena, HOLD_MS, disk);
        o.extra_json = extra;
        h = harness_start(&o);
        st = harness_status(h);
        ck_assert_int_eq(harness_jint(st, "ram.huge_page_bytes"), on_shm ? 0 : 2 * MIB);
        ck_assert(harness_jbool(st, "disk.staging_reads") == (on_shm && thp_madvise()));
        ck_assert(harness_jbool(st, "disk.staging_writes") ==
                  (on_shm && thp_madvise() && harness_jbool(st, "disk.direct_io")));
        json_decref(st);
        c = connect_path(h, NULL, 1, 0, KVT_DATA_PATH_SHM);
        ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_SHM);
        /* 16 MiB through 8 MiB: the first on disk only */
        harness_save_chains(h, c, 100 * on_shm + 1, 100 * on_shm + 8, 8, 256 * KIB, 1);
        for (uint32_t k = 1; k <= 8; k++) /* byte-exact */
            ck_assert_uint_eq(harness_load_chain(c, 100 * on_shm + k, 8, 256 * KIB, 0), 8);
        st = harness_status(h);
        ck_assert_int_gt(harness_jint(st, "disk.hits"), 0);
        ck_assert_int_eq(harness_jint(st, "disk.reads_staged"),
                         on_shm && thp_madvise() ? harness_jint(st, "disk.records_read") : 0);
        printf("arena on %s: huge_page_bytes %lld, %lld disk hits, %lld reads staged\n",
               on_shm ? "/dev/shm" : "tmpfs huge=always",
               (long long)harness_jint(st, "ram.huge_page_bytes"),
               (long long)harness_jint(st, "disk.hits"),
               (long long)harness_jint(st, "disk.reads_staged"));
        json_decref(st);
        kvt_close(&c);
        harness_stop(&h);
    }
    ck_assert_int_eq(umount(mnt), 0);
}
END_TEST

static Suite *shm_suite(void)
{
    Suite *s = suite_create("shm");
    TCase *t = tcase_create("shm"), *huge = tcase_create("huge");

    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_both_paths_four_ranks_concurrently);
    tcase_add_test(t, test_cross_path_and_exists);
    tcase_add_test(t, test_unmappable_arena_says_why);
    tcase_add_test(t, test_auto_falls_back_to_frames);
    tcase_add_test(t, test_tcp_endpoint_uses_frames);
    tcase_add_test(t, test_commit_client_checksums);
    tcase_add_test(t, test_killed_mid_save_reclaimed);
    tcase_add_test(t, test_killed_mid_load_reclaimed_and_pin_holds);
    tcase_add_test(t, test_commit_outside_reservation_refused);
    suite_add_tcase(s, t);
    tcase_set_timeout(huge, 60);
    tcase_add_unchecked_fixture(huge, huge_setup, huge_teardown);
    tcase_add_test(huge, test_hugetlbfs_arena);
    tcase_add_test(huge, test_thp_tmpfs_arena);
    suite_add_tcase(s, huge);
    return s;
}

const check_program_t check_program = {.suite = shm_suite, .scratch = "kvtshm"};
