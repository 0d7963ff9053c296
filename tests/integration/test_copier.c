/*
 * test_copier.c - libkvtier's copy helpers (client/copier.c) against a scripted daemon: a ROUTER
 * thread that speaks protocol 2 (HELLO, ARENA of a file arena, SAVE_RESERVE, SAVE_COMMIT, LOOKUP)
 * and answers when the test says, so that what happens while a save's chunks are being copied
 * (off every list of the I/O thread) is decided by the test, not by timing.
 *
 * - A save whose commit is never answered still times out, even when the deadline bookkeeping
 *   was rebuilt while it was copying (an earlier request's deadline passed meanwhile).
 * - A save keeps its place in the in-flight window while it copies: with a window of 2, a save
 *   and two lookups never have more than 2 requests outstanding at the daemon.
 *
 * The chunks are large (16 x 8 MiB per save, one copy helper) so that the copies last several
 * milliseconds.
 */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "check_main.h"
#include "harness.h"
#include "kvt_proto.h"

#define ARENA_BYTES (256u << 20)
#define CHUNK (8u << 20)
#define N 16
#define HELD_MAX 64

typedef struct {
    zmq_msg_t id;
    int type; /* the reply's */
    uint64_t req_id;
    int64_t due_ms; /* INT64_MAX: never */
    size_t n;
    uint8_t status[N];
    uint8_t locs[N * KVT_LOC_BYTES];
    bool live;
} held_t;

typedef struct {
    char endpoint[160], arena[160];
    uint32_t window;
    int64_t reserve_after_lookup_ms; /* a reserve is answered this long after the last lookup */
    int64_t lookup_at;
    bool answer_commit;
    int64_t lookup_hold_ms;
    atomic_bool stop;
    int outstanding, max_outstanding;
    uint64_t next_off;
    held_t held[HELD_MAX];
} fake_t;

static void reply(void *s, zmq_msg_t *id, const kvt_msg_t *m, const kvt_frame_t *f, size_t nf)
{
    uint8_t head[256];
    size_t hl = kvt_head_encode(head, sizeof head, m);
    zmq_msg_t c;

    ck_assert_uint_gt(hl, 0);
    zmq_msg_init(&c);
    zmq_msg_copy(&c, id);
    zmq_msg_send(&c, s, ZMQ_SNDMORE);
    zmq_send(s, head, hl, nf > 0 ? ZMQ_SNDMORE : 0);
    for (size_t i = 0; i < nf; i++)
        zmq_send(s, f[i].data, f[i].len, i + 1 < nf ? ZMQ_SNDMORE : 0);
}

static kvt_msg_t head_of(int type, uint64_t req_id)
{
    kvt_msg_t m;

    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2, .type = (uint8_t)type, .req_id = req_id, .ns_id = 1};
    return m;
}

static void answer(void *s, held_t *h)
{
    kvt_msg_t m = head_of(h->type, h->req_id);
    kvt_frame_t f[2] = {{h->status, h->n}, {h->locs, h->n * KVT_LOC_BYTES}};

    if (h->type == KVT_MSG_LOOKUP_OK) {
        reply(s, &h->id, &m, (kvt_frame_t[]){{"", 0}}, 1);
    } else {
        if (h->type == KVT_MSG_SAVE_RESERVE_OK)
            m.u.chunks_ok.hold_ms = 30000;
        reply(s, &h->id, &m, f, h->type == KVT_MSG_SAVE_RESERVE_OK ? 2 : 1);
    }
}

static held_t *hold(fake_t *fk, zmq_msg_t *id, int type, uint64_t req_id, int64_t due)
{
    for (int i = 0; i < HELD_MAX; i++) {
        held_t *h = &fk->held[i];
        if (h->live)
            continue;
        memset(h, 0, sizeof *h);
        h->live = true;
        zmq_msg_init(&h->id);
        zmq_msg_copy(&h->id, id);
        h->type = type;
        h->req_id = req_id;
        h->due_ms = due;
        if (++fk->outstanding > fk->max_outstanding)
            fk->max_outstanding = fk->outstanding;
        return h;
    }
    ck_abort_msg("fake daemon: too many requests held");
    return NULL;
}

static void *fake_main(void *arg)
{
    fake_t *fk = arg;
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_ROUTER);
    kvt_limits_t lim = {.max_hashes = 1u << 20, .max_payload_bytes = SIZE_MAX};
    int zero = 0;

    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(s, fk->endpoint), 0);
    while (!atomic_load(&fk->stop)) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        zmq_msg_t parts[16];
        kvt_frame_t fr[16];
        int np = 0, more = 1;
        int64_t now;
        kvt_msg_t m;

        zmq_poll(&it, 1, 1);
        now = harness_now_ms();
        for (int i = 0; i < HELD_MAX; i++) {
            held_t *h = &fk->held[i];
            if (h->live && h->due_ms <= now) {
                answer(s, h);
                zmq_msg_close(&h->id);
                h->live = false;
                fk->outstanding--;
            }
        }
        if (!(it.revents & ZMQ_POLLIN))
            continue;
        while (more && np < 16) {
            zmq_msg_init(&parts[np]);
            zmq_msg_recv(&parts[np], s, 0);
            more = zmq_msg_more(&parts[np]);
            np++;
        }
        for (int i = 1; i < np; i++)
            fr[i - 1] = (kvt_frame_t){zmq_msg_data(&parts[i]), zmq_msg_size(&parts[i])};
        if (kvt_msg_decode(fr, (size_t)np - 1, &lim, &m) == 0) {
            now = harness_now_ms();
            switch (m.hdr.type) {
            case KVT_MSG_HELLO: {
                kvt_msg_t r = head_of(KVT_MSG_HELLO_OK, m.hdr.req_id);
                r.hdr.ns_id = 0;
                r.u.hello_ok =
                    (kvt_hello_ok_t){.ns_id = 1,
                                     .lease_ms = 1000,
                                     .max_chunk_bytes = CHUNK,
                                     .max_chunks = 64,
                                     .daemon_version = 0x201,
                                     .features = KVT_FEAT_CHECKSUMS | KVT_FEAT_CLIENT_CSUMS,
                                     .max_in_flight = fk->window};
                reply(s, &parts[0], &r, NULL, 0);
                break;
            }
            case KVT_MSG_ARENA: {
                kvt_msg_t r = head_of(KVT_MSG_ARENA_OK, m.hdr.req_id);
                r.u.arena_ok.arena_bytes = ARENA_BYTES;
                r.u.arena_ok.hold_ms = 30000;
                reply(s, &parts[0], &r, (kvt_frame_t[]){{fk->arena, strlen(fk->arena)}}, 1);
                break;
            }
            case KVT_MSG_RELEASE:
                break;
            case KVT_MSG_LOOKUP:
                fk->lookup_at = now;
                hold(fk, &parts[0], KVT_MSG_LOOKUP_OK, m.hdr.req_id, now + fk->lookup_hold_ms);
                break;
            case KVT_MSG_SAVE_RESERVE: {
                held_t *h = hold(fk, &parts[0], KVT_MSG_SAVE_RESERVE_OK, m.hdr.req_id,
                                 fk->lookup_at + fk->reserve_after_lookup_ms);
                h->n = m.u.save.nhashes;
                for (size_t i = 0; i < h->n && i < N; i++) {
                    h->status[i] = KVT_CHUNK_WANTED;
                    kvt_put_u64(h->locs + i * KVT_LOC_BYTES, 4096 + fk->next_off);
                    kvt_put_u64(h->locs + i * KVT_LOC_BYTES + 8, CHUNK);
                    fk->next_off = (fk->next_off + CHUNK) % (ARENA_BYTES - CHUNK - 4096);
                }
                break;
            }
            case KVT_MSG_SAVE_COMMIT: {
                held_t *h = hold(fk, &parts[0], KVT_MSG_SAVE_OK, m.hdr.req_id,
                                 fk->answer_commit ? now : INT64_MAX);
                h->n = m.u.save.nhashes;
                memset(h->status, KVT_CHUNK_STORED, sizeof h->status);
                break;
            }
            default:
                break;
            }
        }
        for (int i = 0; i < np; i++)
            zmq_msg_close(&parts[i]);
    }
    for (int i = 0; i < HELD_MAX; i++)
        if (fk->held[i].live)
            zmq_msg_close(&fk->held[i].id);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return NULL;
}

static fake_t *fake_start(uint32_t window, pthread_t *t)
{
    fake_t *fk = calloc(1, sizeof *fk);
    int fd;

    ck_assert_ptr_nonnull(fk);
    fk->window = window;
    snprintf(fk->endpoint, sizeof fk->endpoint, "ipc://%s/fake.zmq", check_scratch_dir());
    snprintf(fk->arena, sizeof fk->arena, "/dev/shm/kvtier-copier-%d.arena", (int)getpid());
    fd = open(fk->arena, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, ARENA_BYTES), 0);
    close(fd);
    ck_assert_int_eq(pthread_create(t, NULL, fake_main, fk), 0);
    return fk;
}

/* Stops the daemon; returns the most requests it ever held unanswered at once. */
static int fake_stop(fake_t *fk, pthread_t t)
{
    int most;

    atomic_store(&fk->stop, true);
    pthread_join(t, NULL);
    most = fk->max_outstanding;
    check_unlink_arena(fk->arena);
    free(fk);
    return most;
}

static kvt_client_t *connect_fake(const fake_t *fk)
{
    kvt_ns_desc_t ns = harness_ns_desc("copier", 1, 0, 1);
    kvt_connect_opts_t o = {.timeout_ms = 1000, .data_path = KVT_DATA_PATH_SHM};
    kvt_client_t *c = NULL;

    setenv("KVTIER_COPY_THREADS", "1", 1);
    ck_assert_int_eq(kvt_connect(fk->endpoint, &ns, 0, &o, &c), 0);
    unsetenv("KVTIER_COPY_THREADS");
    return c;
}

static void chunks(kvt_hash_t *h, const void **bufs, size_t *lens, uint8_t *mem)
{
    for (int i = 0; i < N; i++) {
        memset(mem + (size_t)i * CHUNK, i + 1, CHUNK);
        bufs[i] = mem + (size_t)i * CHUNK;
        lens[i] = CHUNK;
        memset(&h[i], i + 7, sizeof h[i]);
    }
}

START_TEST(test_save_times_out_after_its_copies)
{
    pthread_t t;
    fake_t *fk = fake_start(16, &t);
    kvt_client_t *c;
    kvt_hash_t h[N], lh;
    const void *bufs[N];
    size_t lens[N];
    uint8_t *mem = malloc((size_t)N * CHUNK);
    kvt_completion_t *comp;
    kvt_submit_opts_t lso = {.timeout_ms = 100};
    int64_t t0;

    ck_assert_ptr_nonnull(mem);
    chunks(h, bufs, lens, mem);
    memset(&lh, 0x55, sizeof lh);
    /* the lookup's deadline (100 ms) passes while the save's 128 MiB are being copied */
    fk->reserve_after_lookup_ms = 97;
    fk->answer_commit = false; /* and the commit is never answered */
    c = connect_fake(fk);
    /* a request whose deadline is noted, answered at once: its stale deadline passes while the
     * save copies, and the next look at the deadlines rebuilds them without the save */
    ck_assert_int_eq(kvt_submit_lookup(c, &lh, 1, NULL, &lso, NULL), 0);
    comp = harness_next_completion(c, 5000);
    ck_assert_int_eq(comp->status, 0);
    kvt_completion_free(c, comp);
    t0 = harness_now_ms();
    ck_assert_int_eq(kvt_submit_save(c, h, N, bufs, lens, NULL, NULL, NULL), 0);
    ck_assert_int_eq(kvt_poll(c, 6000), 1); /* a hang detector, not a speed claim */
    ck_assert_int_eq(kvt_next_completion(c, &comp), 1);
    ck_assert_int_eq(comp->status, KVT_ETIMEDOUT);
    ck_assert_int_ge(harness_now_ms() - t0, 900);
    kvt_completion_free(c, comp);
    kvt_close(&c);
    fake_stop(fk, t);
    free(mem);
}
END_TEST

START_TEST(test_copying_save_keeps_its_window_place)
{
    pthread_t t;
    fake_t *fk = fake_start(2, &t);
    kvt_client_t *c;
    kvt_hash_t h[N], lh;
    const void *bufs[N];
    size_t lens[N];
    uint8_t *mem = malloc((size_t)N * CHUNK);
    kvt_completion_t *comp;

    ck_assert_ptr_nonnull(mem);
    chunks(h, bufs, lens, mem);
    memset(&lh, 0x55, sizeof lh);
    fk->answer_commit = true;
    fk->lookup_hold_ms = 300; /* the lookups hold their places while the save copies */
    c = connect_fake(fk);
    ck_assert_int_eq(kvt_submit_save(c, h, N, bufs, lens, NULL, NULL, NULL), 0);
    ck_assert_int_eq(kvt_submit_lookup(c, &lh, 1, NULL, NULL, NULL), 0);
    ck_assert_int_eq(kvt_submit_lookup(c, &lh, 1, NULL, NULL, NULL), 0);
    for (int k = 0; k < 3; k++) {
        comp = harness_next_completion(c, 5000);
        ck_assert_msg(comp->status == 0, "op %d: %s", comp->op, kvt_strerror(comp->status));
        kvt_completion_free(c, comp);
    }
    kvt_close(&c);
    ck_assert_int_le(fake_stop(fk, t), 2);
    free(mem);
}
END_TEST

static Suite *copier_suite(void)
{
    Suite *s = suite_create("copier");
    TCase *tc = tcase_create("copier");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_save_times_out_after_its_copies);
    tcase_add_test(tc, test_copying_save_keeps_its_window_place);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = copier_suite, .scratch = "kvtcp"};
