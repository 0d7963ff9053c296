/*
 * test_verify.c - what libkvtier does with the protocol 2 answers a daemon may give that this
 * daemon does not give on demand (ESTALE, other arena generations, a wrong checksum), and what
 * it does with a chunk really scribbled in this daemon's arena.
 *
 * A proxy thread stands between one client and the real daemon (a ROUTER for the client, a
 * DEALER to the daemon) and forwards everything, except that it can (a) answer the first
 * shared-memory request with ERROR ESTALE and announce another arena generation from then on,
 * recording the generation every later shared-memory request carries; (b) announce CHECKSUMS
 * and fill every LOAD_OK's checksums with the XXH3-64 of the chunk's bytes (the payload, or the
 * arena bytes at the location), reporting one chosen chunk's checksum wrong, recording the
 * RELEASE CORRUPT messages the client sends. So the client's recovery (re-HELLO, remap, retry
 * with the new generation) and verification (a mismatch is a miss, a counter and a RELEASE
 * CORRUPT; copying loads verify, pins on request) are tested with chosen answers.
 *
 * Against the daemon itself, which answers CHECKSUMS: a chunk scribbled in the arena (the test
 * maps the arena file read-write) loads as a miss on both paths, the copying load's counter
 * moved, and is removed by the daemon once reported (RELEASE CORRUPT): a pin then misses it.
 */
#include "check_main.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zmq.h>

#include "harness.h"
#include "kvt_proto.h"
#include "kvtier.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define WAIT_MS 20000
#define PX_FRAMES 80
#define PX_LOADS 64

/* A short pause between two polls of a state (no fixed sleep stands in for a wait). */
static void poll_pause(void)
{
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* --- the proxy --- */

typedef struct {
    void *ctx;
    char front[160];
    char back[160];
    /* what it does */
    int stale_once;
    uint32_t gen_after;
    int checksums;
    kvt_hash_t corrupt;
    char arena_path[128];
    /* what it saw (under mu) */
    pthread_mutex_t mu;
    int stale_sent;
    uint32_t gens[64];
    int ngens;
    uint32_t real_gen; /* the generation the daemon answered (requests go back to it with it) */
    kvt_hash_t corrupt_released[64];
    int ncorrupt_released;
    /* the hashes of the loads in flight, by req_id */
    struct {
        uint64_t id;
        kvt_hash_t h[16];
        size_t n;
    } loads[PX_LOADS];
    atomic_int stop;
    int ready;
    pthread_t t;
} proxy_t;

typedef struct {
    zmq_msg_t m[PX_FRAMES];
    kvt_frame_t f[PX_FRAMES];
    size_t n;
} px_msg_t;

static int px_recv(void *s, px_msg_t *x)
{
    int more = 1;

    x->n = 0;
    while (more && x->n < PX_FRAMES) {
        zmq_msg_init(&x->m[x->n]);
        if (zmq_msg_recv(&x->m[x->n], s, 0) < 0) {
            zmq_msg_close(&x->m[x->n]);
            return -1;
        }
        x->f[x->n].data = zmq_msg_data(&x->m[x->n]);
        x->f[x->n].len = zmq_msg_size(&x->m[x->n]);
        more = zmq_msg_more(&x->m[x->n]);
        x->n++;
    }
    return more ? -1 : 0;
}

static void px_close(px_msg_t *x)
{
    for (size_t i = 0; i < x->n; i++)
        zmq_msg_close(&x->m[i]);
    x->n = 0;
}

/* Sends frames f[from..n) (frame from+k replaced by repl[k] when that is non-NULL), after an
 * optional routing id. */
static void px_send(void *s, const zmq_msg_t *id, const kvt_frame_t *f, size_t from, size_t n)
{
    if (id != NULL)
        zmq_send(s, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id), ZMQ_SNDMORE);
    for (size_t i = from; i < n; i++)
        zmq_send(s, f[i].data, f[i].len, i + 1 < n ? ZMQ_SNDMORE : 0);
}

static const kvt_limits_t px_lim = {.max_hashes = 65536, .max_payload_bytes = 64u << 20};

/* A request from the client: recorded, answered ESTALE, or forwarded. */
static void px_from_client(proxy_t *p, void *front, void *back, px_msg_t *x)
{
    kvt_msg_t m;
    bool shm_req;

    if (kvt_msg_decode(x->f + 1, x->n - 1, &px_lim, &m) != 0) {
        px_send(back, NULL, x->f, 1, x->n);
        return;
    }
    shm_req = m.hdr.type == KVT_MSG_SAVE_RESERVE || m.hdr.type == KVT_MSG_SAVE_COMMIT ||
              (m.hdr.type == KVT_MSG_LOAD && (m.hdr.flags & KVT_LOAD_SHM));
    pthread_mutex_lock(&p->mu);
    if (p->stale_once && !p->stale_sent && shm_req) {
        kvt_msg_t e = {
            .hdr = {
                .version = 2, .type = KVT_MSG_ERROR, .req_id = m.hdr.req_id, .ns_id = m.hdr.ns_id}};
        uint8_t head[64];
        static const char text[] = "request of another arena generation";
        kvt_frame_t f[2] = {{head, 0}, {text, sizeof text - 1}};
        e.u.error.code = KVT_WIRE_ESTALE;
        f[0].len = kvt_head_encode(head, sizeof head, &e);
        p->stale_sent = 1;
        pthread_mutex_unlock(&p->mu);
        px_send(front, &x->m[0], f, 0, 2);
        return;
    }
    if (p->stale_sent && shm_req && p->ngens < 64)
        p->gens[p->ngens++] = m.hdr.gen;
    /* the daemon checks generations: a request naming the one the proxy made up goes on with the
     * daemon's own (bytes 20..23 of the head, PROTOCOL.md) */
    if (p->gen_after && m.hdr.gen == p->gen_after && p->real_gen != 0 && x->n > 1 &&
        x->f[1].len >= 24)
        kvt_put_u32((uint8_t *)x->f[1].data + 20, p->real_gen);
    if (m.hdr.type == KVT_MSG_RELEASE && (m.hdr.flags & KVT_RELEASE_CORRUPT))
        for (size_t i = 0; i < m.u.release.nhashes && p->ncorrupt_released < 64; i++)
            memcpy(&p->corrupt_released[p->ncorrupt_released++], &m.u.release.hashes[i], 16);
    if (m.hdr.type == KVT_MSG_LOAD && m.u.load.nhashes <= 16) {
        size_t k = m.hdr.req_id % PX_LOADS;
        p->loads[k].id = m.hdr.req_id;
        p->loads[k].n = m.u.load.nhashes;
        memcpy(p->loads[k].h, m.u.load.hashes, m.u.load.nhashes * 16);
    }
    pthread_mutex_unlock(&p->mu);
    px_send(back, NULL, x->f, 1, x->n);
}

/* A reply from the daemon: heads rewritten as the proxy was told, then forwarded. */
static void px_from_daemon(proxy_t *p, void *front, const zmq_msg_t *id, px_msg_t *x,
                           const uint8_t *arena, size_t arena_bytes)
{
    uint8_t head[128], csum[16 * 8];
    kvt_frame_t f[PX_FRAMES];
    kvt_msg_t m;
    bool rewrite = false;

    memcpy(f, x->f, x->n * sizeof *f);
    if (kvt_msg_decode(x->f, x->n, &px_lim, &m) == 0) {
        pthread_mutex_lock(&p->mu);
        if (m.hdr.type == KVT_MSG_HELLO_OK || m.hdr.type == KVT_MSG_ARENA_OK) {
            uint32_t g =
                m.hdr.type == KVT_MSG_HELLO_OK ? m.u.hello_ok.arena_gen : m.u.arena_ok.arena_gen;
            if (g != 0 && g != p->gen_after)
                p->real_gen = g;
        }
        if (m.hdr.type == KVT_MSG_HELLO_OK) {
            if (p->checksums)
                m.u.hello_ok.features |= KVT_FEAT_CHECKSUMS;
            if (p->stale_sent && p->gen_after)
                m.u.hello_ok.arena_gen = p->gen_after;
            rewrite = true;
        } else if (m.hdr.type == KVT_MSG_ARENA_OK && p->stale_sent && p->gen_after) {
            m.u.arena_ok.arena_gen = p->gen_after;
            rewrite = true;
        } else if (m.hdr.type == KVT_MSG_LOAD_OK && p->checksums &&
                   m.u.chunks_ok.checksums != NULL && m.u.chunks_ok.n <= 16) {
            const kvt_chunks_ok_t *k = &m.u.chunks_ok;
            size_t slot = m.hdr.req_id % PX_LOADS;
            bool shm = (m.hdr.flags & KVT_LOADR_SHM) != 0;
            for (size_t i = 0; i < k->n; i++) {
                uint64_t v = 0;
                if (k->status[i] == KVT_CHUNK_HIT && !shm) {
                    v = XXH3_64bits(k->payloads[i].data, k->payloads[i].len);
                } else if (k->status[i] == KVT_CHUNK_HIT && arena != NULL) {
                    uint64_t off = kvt_get_u64(k->locs + 16 * i),
                             len = kvt_get_u64(k->locs + 16 * i + 8);
                    if (off + len <= arena_bytes)
                        v = XXH3_64bits(arena + off, len);
                }
                if (p->loads[slot].id == m.hdr.req_id && i < p->loads[slot].n &&
                    memcmp(&p->loads[slot].h[i], &p->corrupt, 16) == 0)
                    v ^= 1; /* this chunk "does not verify" */
                kvt_put_u64(csum + 8 * i, v);
            }
            f[shm ? 3 : 2] = (kvt_frame_t){csum, 8 * k->n};
        }
        pthread_mutex_unlock(&p->mu);
        if (rewrite)
            f[0] = (kvt_frame_t){head, kvt_head_encode(head, sizeof head, &m)};
    }
    px_send(front, id, f, 0, x->n);
}

static void *px_main(void *arg)
{
    proxy_t *p = arg;
    void *front = zmq_socket(p->ctx, ZMQ_ROUTER), *back = zmq_socket(p->ctx, ZMQ_DEALER);
    zmq_msg_t id;
    int have_id = 0, zero = 0;
    uint8_t *arena = NULL;
    size_t arena_bytes = 0;

    zmq_setsockopt(front, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(back, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(front, p->front) != 0 || zmq_connect(back, p->back) != 0)
        return NULL;
    if (p->arena_path[0] != '\0') {
        int fd = open(p->arena_path, O_RDONLY);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            arena_bytes = (size_t)st.st_size;
            arena = mmap(NULL, arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
            if (arena == MAP_FAILED)
                arena = NULL;
        }
        if (fd >= 0)
            close(fd);
    }
    zmq_msg_init(&id);
    pthread_mutex_lock(&p->mu);
    p->ready = 1;
    pthread_mutex_unlock(&p->mu);
    while (!atomic_load(&p->stop)) {
        zmq_pollitem_t it[2] = {{.socket = front, .events = ZMQ_POLLIN},
                                {.socket = back, .events = ZMQ_POLLIN}};
        px_msg_t x;
        x.n = 0;
        if (zmq_poll(it, 2, 50) <= 0)
            continue;
        if ((it[0].revents & ZMQ_POLLIN) && px_recv(front, &x) == 0 && x.n >= 2) {
            if (!have_id) {
                zmq_msg_copy(&id, &x.m[0]);
                have_id = 1;
            }
            px_from_client(p, front, back, &x);
        }
        px_close(&x);
        if ((it[1].revents & ZMQ_POLLIN) && px_recv(back, &x) == 0 && have_id)
            px_from_daemon(p, front, &id, &x, arena, arena_bytes);
        px_close(&x);
    }
    zmq_msg_close(&id);
    if (arena != NULL)
        munmap(arena, arena_bytes);
    zmq_close(front);
    zmq_close(back);
    return NULL;
}

static proxy_t *proxy_start(const harness_t *h, const char *arena_path)
{
    static int seq;
    proxy_t *p = calloc(1, sizeof *p);

    ck_assert_ptr_nonnull(p);
    pthread_mutex_init(&p->mu, NULL);
    p->ctx = zmq_ctx_new();
    snprintf(p->front, sizeof p->front, "ipc://%s/px%d.zmq", h->dir, seq++);
    snprintf(p->back, sizeof p->back, "%s", h->endpoint);
    if (arena_path != NULL)
        snprintf(p->arena_path, sizeof p->arena_path, "%s", arena_path);
    return p;
}

static void proxy_run(proxy_t *p)
{
    int64_t deadline = harness_now_ms() + WAIT_MS;

    ck_assert_int_eq(pthread_create(&p->t, NULL, px_main, p), 0);
    for (;;) {
        int ready;
        pthread_mutex_lock(&p->mu);
        ready = p->ready;
        pthread_mutex_unlock(&p->mu);
        if (ready)
            break;
        ck_assert_msg(harness_now_ms() < deadline, "the proxy did not start");
        poll_pause();
    }
}

static void proxy_stop(proxy_t *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->t, NULL);
    zmq_ctx_term(p->ctx);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Whether the proxy saw a RELEASE CORRUPT naming h (waits for it). */
static int proxy_saw_corrupt(proxy_t *p, const kvt_hash_t *h)
{
    int64_t deadline = harness_now_ms() + WAIT_MS;

    for (;;) {
        int seen = 0;
        pthread_mutex_lock(&p->mu);
        for (int i = 0; i < p->ncorrupt_released; i++)
            seen += memcmp(&p->corrupt_released[i], h, sizeof *h) == 0;
        pthread_mutex_unlock(&p->mu);
        if (seen || harness_now_ms() > deadline)
            return seen;
        poll_pause();
    }
}

/* --- helpers --- */

static char extra[256], arena_path[128];

static harness_t *start_shm(void)
{
    static int seq;
    harness_opts_t o = {.capacity_bytes = 16 * MIB, .max_chunk_bytes = 1 * MIB};

    snprintf(arena_path, sizeof arena_path, "/dev/shm/kvtier-verify-%d-%d.arena", (int)getpid(),
             seq++);
    snprintf(extra, sizeof extra, "{\"ram\": {\"arena_path\": \"%s\", \"shm_hold_ms\": 10000}}",
             arena_path);
    o.extra_json = extra;
    return harness_start(&o);
}

static kvt_client_t *connect_at(const char *endpoint, int path, int verify)
{
    kvt_ns_desc_t d = harness_ns_desc("verify-model", 1, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 10000, .data_path = path, .verify = verify};
    kvt_client_t *c = NULL;
    int rc = kvt_connect(endpoint, &d, 0, &o, &c);

    ck_assert_msg(rc == 0, "kvt_connect %s: %s", endpoint, kvt_strerror(rc));
    return c;
}

#define N 4
#define LEN (96 * KIB)

static void save_n(kvt_client_t *c, const kvt_hash_t *hs)
{
    static uint8_t buf[N][LEN];
    const void *bufs[N];
    size_t lens[N];
    uint8_t out[N];

    for (size_t i = 0; i < N; i++) {
        harness_fill(buf[i], LEN, 0, harness_hash_key(&hs[i]));
        bufs[i] = buf[i];
        lens[i] = LEN;
    }
    ck_assert_int_eq(kvt_save(c, hs, N, bufs, lens, NULL, out), 0);
    for (size_t i = 0; i < N; i++)
        ck_assert_int_eq(out[i], KVT_SAVE_STORED);
}

/* Loads the N chunks (copying API); returns the bitmask of the chunks loaded byte-exact. */
static unsigned load_n(kvt_client_t *c, const kvt_hash_t *hs, size_t *nhit)
{
    static uint8_t buf[N][LEN];
    void *bufs[N];
    size_t caps[N], lens[N];
    unsigned ok = 0;

    for (size_t i = 0; i < N; i++) {
        memset(buf[i], 0, LEN);
        bufs[i] = buf[i];
        caps[i] = LEN;
    }
    ck_assert_int_eq(kvt_load(c, hs, N, bufs, caps, lens, nhit), 0);
    for (size_t i = 0; i < N; i++)
        if (lens[i] == LEN && harness_check_fill(buf[i], LEN, 0, harness_hash_key(&hs[i])))
            ok |= 1u << i;
    return ok;
}

/* Another process with the arena mapped read-write flips bytes of stored chunk h (found where a
 * pin of c points, relative to c's mapping): one every 4 KiB (every_page), else the middle one. */
static void scribble(kvt_client_t *c, const kvt_hash_t *h, bool every_page)
{
    kvt_completion_t *pin;
    kvt_arena_t ar;
    struct stat sb;
    uint8_t *mine;
    size_t off, len;
    int fd;

    ck_assert_int_eq(kvt_arena(c, &ar), 0);
    ck_assert_int_eq(kvt_submit_pin(c, h, 1, NULL, NULL), 0);
    pin = harness_next_completion(c, WAIT_MS);
    ck_assert_int_eq(pin->outcomes[0], KVT_LOAD_HIT);
    off = (size_t)((uint8_t *)pin->ptrs[0] - (uint8_t *)ar.base);
    len = pin->lens[0];
    kvt_completion_free(c, pin);
    fd = open(arena_path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fstat(fd, &sb), 0);
    mine = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(mine, MAP_FAILED);
    close(fd);
    if (every_page)
        for (size_t k = 0; k < len; k += 4096)
            mine[off + k] ^= 0xff;
    else
        mine[off + len / 2] ^= 0xff;
    munmap(mine, (size_t)sb.st_size);
}

/* --- ESTALE: re-HELLO, map the arena anew, retry with the new generation --- */

START_TEST(test_estale_remaps_and_retries)
{
    harness_t *h = start_shm();
    proxy_t *p = proxy_start(h, NULL);
    kvt_client_t *c;
    kvt_hash_t hs[N];
    kvt_stats_t st;
    kvt_arena_t ar;
    kvt_server_info_t info;
    size_t nhit;

    p->stale_once = 1;
    p->gen_after = 2;
    proxy_run(p);
    c = connect_at(p->front, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    ck_assert_int_eq(kvt_arena(c, &ar), 0);
    ck_assert_uint_eq(ar.gen, 1);
    harness_chain(11, hs, N);
    save_n(c, hs); /* SAVE_RESERVE answered ESTALE: recovered and retried inside the call */
    ck_assert_uint_eq(load_n(c, hs, &nhit), (1u << N) - 1);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.recoveries, 1);
    ck_assert_uint_eq(st.remaps, 1);
    ck_assert_int_eq(kvt_arena(c, &ar), 0);
    ck_assert_uint_eq(ar.gen, 2);
    ck_assert_uint_eq(ar.maps, 2);
    ck_assert_int_eq(kvt_server_info(c, &info), 0);
    ck_assert_uint_eq(info.arena_gen, 2);
    pthread_mutex_lock(&p->mu);
    ck_assert_int_eq(p->stale_sent, 1);
    ck_assert_int_ge(p->ngens, 3); /* the retried reserve, the commit, the load */
    for (int i = 0; i < p->ngens; i++)
        ck_assert_uint_eq(p->gens[i], 2); /* every later request names the generation mapped */
    pthread_mutex_unlock(&p->mu);
    kvt_close(&c);
    proxy_stop(p);
    harness_stop(&h);
}
END_TEST

/* --- checksums: a mismatch is a miss, a counter and a RELEASE CORRUPT --- */

START_TEST(test_checksum_mismatch_frames)
{
    harness_t *h =
        harness_start(&(harness_opts_t){.capacity_bytes = 16 * MIB, .max_chunk_bytes = 1 * MIB});
    proxy_t *p = proxy_start(h, NULL);
    kvt_client_t *c;
    kvt_hash_t hs[N];
    kvt_server_info_t info;
    kvt_stats_t st;
    kvt_completion_t *comp;
    static uint8_t buf[N][LEN];
    void *bufs[N];
    size_t caps[N], nhit;

    harness_chain(12, hs, N);
    p->checksums = 1;
    p->corrupt = hs[2];
    proxy_run(p);
    c = connect_at(p->front, KVT_DATA_PATH_FRAMES, KVT_VERIFY_DEFAULT);
    ck_assert_int_eq(kvt_server_info(c, &info), 0);
    ck_assert(info.features & KVT_FEATURE_CHECKSUMS);
    save_n(c, hs);
    ck_assert_uint_eq(load_n(c, hs, &nhit), 0xbu); /* chunk 2 is a miss, the others exact */
    ck_assert_uint_eq(nhit, 2);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.chunks_verified, N);
    ck_assert_uint_eq(st.checksum_mismatches, 1);
    ck_assert_msg(proxy_saw_corrupt(p, &hs[2]), "no RELEASE CORRUPT for the chunk");
    /* the same through the asynchronous call: the outcome says why */
    for (size_t i = 0; i < N; i++) {
        bufs[i] = buf[i];
        caps[i] = LEN;
    }
    ck_assert_int_eq(kvt_submit_load(c, hs, N, bufs, caps, NULL, NULL), 0);
    comp = harness_next_completion(c, WAIT_MS);
    ck_assert_int_eq(comp->status, 0);
    ck_assert_int_eq(comp->outcomes[1], KVT_LOAD_HIT);
    ck_assert_int_eq(comp->outcomes[2], KVT_LOAD_CORRUPT);
    ck_assert_uint_eq(comp->lens[2], 0);
    ck_assert_int_eq(comp->outcomes[3], KVT_LOAD_HIT);
    kvt_completion_free(c, comp);
    kvt_close(&c);
    proxy_stop(p);
    harness_stop(&h);
}
END_TEST

START_TEST(test_checksum_mismatch_shm_and_pins)
{
    harness_t *h = start_shm();
    proxy_t *p = proxy_start(h, arena_path), *q = proxy_start(h, arena_path);
    kvt_client_t *c, *all;
    kvt_hash_t hs[N];
    kvt_completion_t *pin;
    kvt_stats_t st;
    size_t nhit;

    harness_chain(13, hs, N);
    p->checksums = q->checksums = 1;
    p->corrupt = q->corrupt = hs[1];
    proxy_run(p);
    proxy_run(q);
    c = connect_at(p->front, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    save_n(c, hs);
    /* the copying load verifies while it copies out of the arena */
    ck_assert_uint_eq(load_n(c, hs, &nhit), 0xdu);
    ck_assert_uint_eq(nhit, 1);
    ck_assert_msg(proxy_saw_corrupt(p, &hs[1]), "no RELEASE CORRUPT (copying load)");
    /* a pin is not verified by default; the engine's helper does it */
    ck_assert_int_eq(kvt_submit_pin(c, hs, N, NULL, NULL), 0);
    pin = harness_next_completion(c, WAIT_MS);
    ck_assert_ptr_nonnull(pin->checksums);
    ck_assert_uint_eq(pin->nhit, N);
    ck_assert_uint_eq(pin->checksums[0], XXH3_64bits(pin->ptrs[0], pin->lens[0]));
    ck_assert_int_eq(kvt_pin_verify(c, pin), 1);
    ck_assert_int_eq(pin->outcomes[1], KVT_LOAD_CORRUPT);
    ck_assert_ptr_null(pin->ptrs[1]);
    ck_assert_uint_eq(pin->nhit, 1);
    kvt_completion_free(c, pin);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.checksum_mismatches, 2);
    kvt_close(&c);

    /* KVT_VERIFY_ALL: the I/O thread verifies the pin before delivering it */
    all = connect_at(q->front, KVT_DATA_PATH_SHM, KVT_VERIFY_ALL);
    ck_assert_int_eq(kvt_submit_pin(all, hs, N, NULL, NULL), 0);
    pin = harness_next_completion(all, WAIT_MS);
    ck_assert_int_eq(pin->outcomes[0], KVT_LOAD_HIT);
    ck_assert_int_eq(pin->outcomes[1], KVT_LOAD_CORRUPT);
    ck_assert_uint_eq(pin->nhit, 1);
    kvt_completion_free(all, pin);
    ck_assert_msg(proxy_saw_corrupt(q, &hs[1]), "no RELEASE CORRUPT (verified pin)");
    kvt_close(&all);
    proxy_stop(p);
    proxy_stop(q);
    harness_stop(&h);
}
END_TEST

/* --- the daemon itself: a scribbled arena --- */

START_TEST(test_scribbled_arena)
{
    harness_t *h = start_shm();
    kvt_client_t *c = connect_at(h->endpoint, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    kvt_client_t *f = connect_at(h->endpoint, KVT_DATA_PATH_FRAMES, KVT_VERIFY_DEFAULT);
    kvt_hash_t hs[N];
    kvt_server_info_t info;
    kvt_completion_t *pin;
    kvt_stats_t st;
    size_t nhit;
    unsigned ok;

    harness_chain(14, hs, N);
    save_n(c, hs);
    scribble(c, &hs[1], true); /* a byte every 4 KiB */

    ck_assert_int_eq(kvt_server_info(c, &info), 0);
    ck_assert(info.features & KVT_FEATURE_CHECKSUMS); /* the daemon computes commit checksums */
    /* the copying shared-memory load verifies (fused with the copy): a miss, never the wrong
     * bytes, counted, and reported (RELEASE CORRUPT) */
    ok = load_n(c, hs, &nhit);
    ck_assert_uint_eq(ok, 0xdu);
    ck_assert_uint_eq(nhit, 1); /* the contiguous prefix: chunk 0 */
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.checksum_mismatches, 1);
    ck_assert_uint_eq(st.chunks_verified, N);
    /* the frames path (the daemon lends the arena bytes to the socket, with the commit's
     * checksum): a miss too, a mismatch or, once the report above removed it, a plain miss */
    ok = load_n(f, hs, &nhit);
    ck_assert_uint_eq(ok, 0xdu);
    ck_assert_uint_eq(nhit, 1);
    ck_assert_int_eq(kvt_stats(f, &st), 0);
    ck_assert_uint_le(st.checksum_mismatches, 1);
    /* the daemon re-verified the reported chunk and removed it: it is gone for every client */
    {
        harness_int_eq_t one = {"ram.verify_drops", 1};
        json_t *js = harness_wait_status(h, harness_pred_int_eq, &one, WAIT_MS);
        ck_assert_msg(js != NULL, "the scribbled chunk was not removed");
        json_decref(js);
    }
    ck_assert_int_eq(kvt_submit_pin(c, hs, N, NULL, NULL), 0);
    pin = harness_next_completion(c, WAIT_MS);
    ck_assert_ptr_nonnull(pin->checksums);
    ck_assert_int_eq(pin->outcomes[1], KVT_LOAD_MISS);
    ck_assert_uint_eq(pin->nhit, 1);
    ck_assert_int_eq(kvt_pin_verify(c, pin), 0); /* what is left is intact */
    kvt_completion_free(c, pin);
    kvt_close(&c);
    kvt_close(&f);
    harness_stop(&h);
}
END_TEST

/* A chain that the journal's links close into a loop. Chunk 1 of a chain is removed (found
 * corrupt: its successor, chunk 2, becomes an orphan), then saved again with chunk 2 as its
 * declared parent. The journal now says 2 follows 1 (chunk 2's record, from before) and 1
 * follows 2: after a crash the re-attach relinked both, a cycle in which each is the other's
 * stored successor, so that neither was ever a chain tail again - never evicted, whatever the
 * pressure, and carried into every later journal. Now a relink that would close a loop is not
 * made (the chunk stays an orphan) and both are evicted like any cold chunk. */
START_TEST(test_relink_never_closes_a_loop)
{
    harness_t *h = start_shm();
    kvt_client_t *c = connect_at(h->endpoint, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    static uint8_t one[LEN];
    kvt_hash_t hs[N], flood[N];
    kvt_save_opts_t so = {0};
    uint8_t out[1];
    const void *bufs[1] = {one};
    size_t nhit, lens[1] = {LEN};

    harness_chain(21, hs, N);
    save_n(c, hs);
    scribble(c, &hs[1], false);                    /* its middle byte */
    ck_assert_uint_eq(load_n(c, hs, &nhit), 0xdu); /* reported corrupt, removed */
    {
        harness_int_eq_t dropped = {"ram.verify_drops", 1};
        json_t *js = harness_wait_status(h, harness_pred_int_eq, &dropped, WAIT_MS);
        ck_assert_msg(js != NULL, "the scribbled chunk was not removed");
        json_decref(js);
    }
    /* chunk 1 again, declared to follow chunk 2 */
    harness_fill(one, LEN, 0, harness_hash_key(&hs[1]));
    so.parent = &hs[2];
    ck_assert_int_eq(kvt_save(c, &hs[1], 1, bufs, lens, &so, out), 0);
    ck_assert_int_eq(out[0], KVT_SAVE_STORED);
    kvt_close(&c);
    harness_kill9(h);
    harness_restart(h);
    c = connect_at(h->endpoint, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    ck_assert_uint_eq(harness_lookup_chain(c, 21, 1), 1); /* re-attached: chunk 0, */
    {
        kvt_lookup_result_t r = {0};
        ck_assert_int_eq(kvt_lookup(c, &hs[1], 2, NULL, &r), 0);
        ck_assert_uint_eq(r.hit, 2); /* re-attached, 1 and 2 */
    }
    /* three times the RAM tier of other chains: every cold chunk is evicted */
    for (uint32_t seed = 1000; seed < 1000 + 3 * (16 * MIB / LEN) / N; seed++) {
        harness_chain(seed, flood, N);
        save_n(c, flood);
    }
    {
        kvt_lookup_result_t r1 = {0}, r2 = {0};
        ck_assert_int_eq(kvt_lookup(c, &hs[1], 1, NULL, &r1), 0);
        ck_assert_int_eq(kvt_lookup(c, &hs[2], 1, NULL, &r2), 0);
        ck_assert_msg(r1.hit == 0 && r2.hit == 0,
                      "chunks 1 and 2 were never evicted (present: %u %u): a chain loop",
                      (unsigned)r1.hit, (unsigned)r2.hit);
    }
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Records in an order that makes the start's loop checks walk (relink.c): a chain of COMB_FILL
 * fillers, a spine of COMB_SPINE chunks, COMB_TEETH chunks declared under the spine's tip, the
 * RAM tier exactly full; then a child for each tooth, each save evicting a filler and taking its
 * extent, so that every child lies below its tooth in the arena (the order a re-attach relinks
 * in). At the restart each tooth is linked after its child: a walk up to the spine's root for
 * each (COMB_TEETH x COMB_SPINE = 2.1 M steps here, as many per tooth as the spine is long, up
 * to 65536) before 0.2.11; the loop checks are a union-find now, about one step per relink. */
#define COMB_FILL 1024u
#define COMB_SPINE 2048u
#define COMB_TEETH 1024u
#define COMB_LEN (4 * KIB)

static void save_one(kvt_client_t *c, const kvt_hash_t *h, const kvt_hash_t *parent)
{
    static uint8_t one[COMB_LEN];
    const void *bufs[1] = {one};
    size_t lens[1] = {COMB_LEN};
    kvt_save_opts_t so = {.parent = parent};
    uint8_t out[1];

    ck_assert_int_eq(kvt_save(c, h, 1, bufs, lens, &so, out), 0);
    ck_assert_int_eq(out[0], KVT_SAVE_STORED);
}

static void save_chain_of(kvt_client_t *c, const kvt_hash_t *hs, size_t n, const kvt_hash_t *parent)
{
    static uint8_t one[COMB_LEN];
    static const void *bufs[1024];
    static size_t lens[1024];
    static uint8_t out[1024];
    kvt_save_opts_t so = {.parent = parent};

    ck_assert_uint_le(n, 1024);
    for (size_t i = 0; i < n; i++) {
        bufs[i] = one;
        lens[i] = COMB_LEN;
    }
    ck_assert_int_eq(kvt_save(c, hs, n, bufs, lens, &so, out), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(out[i], KVT_SAVE_STORED);
}

START_TEST(test_relink_checks_do_not_walk_chains)
{
    harness_opts_t o = {.capacity_bytes = (COMB_FILL + COMB_SPINE + COMB_TEETH) * COMB_LEN,
                        .max_chunk_bytes = COMB_LEN};
    static kvt_hash_t fill[COMB_FILL], spine[COMB_SPINE], teeth[COMB_TEETH], kids[COMB_TEETH];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t steps, relinks;
    uint32_t found = 0;

    snprintf(arena_path, sizeof arena_path, "/dev/shm/kvtier-verify-%d-comb.arena", (int)getpid());
    snprintf(extra, sizeof extra, "{\"ram\": {\"arena_path\": \"%s\"}}", arena_path);
    o.extra_json = extra;
    h = harness_start(&o);
    c = connect_at(h->endpoint, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    harness_chain(70001, fill, COMB_FILL);
    harness_chain(70002, spine, COMB_SPINE);
    harness_chain(70003, teeth, COMB_TEETH);
    harness_chain(70004, kids, COMB_TEETH);
    save_chain_of(c, fill, COMB_FILL, NULL);
    for (uint32_t k = 0; k < COMB_SPINE; k += 1024)
        save_chain_of(c, &spine[k], 1024, k > 0 ? &spine[k - 1] : NULL);
    for (uint32_t t = 0; t < COMB_TEETH; t++)
        save_one(c, &teeth[t], &spine[COMB_SPINE - 1]);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), COMB_FILL + COMB_SPINE + COMB_TEETH);
    for (uint32_t t = 0; t < COMB_TEETH; t++)
        save_one(c, &kids[t], &teeth[t]); /* evicts a filler: the RAM tier is full */
    kvt_close(&c);
    harness_kill9(h);
    harness_restart(h); /* re-attaches the arena, and relinks every chain in arena order */
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(harness_jstr(st, "ram.recovery.path"), "reattach");
    steps = harness_jint(st, "ram.recovery.relink_steps");
    relinks = harness_jint(st, "ram.recovery.relinks");
    ck_assert_int_eq(harness_jint(st, "ram.recovery.relinks_refused"), 0);
    json_decref(st);
    printf("relink checks: %lld relinks, %lld steps (a walk per tooth: %u)\n", (long long)relinks,
           (long long)steps, COMB_TEETH * COMB_SPINE);
    ck_assert_int_eq(relinks, COMB_SPINE - 1 + 2 * COMB_TEETH);
    ck_assert_int_le(steps, 8 * relinks);
    c = connect_at(h->endpoint, KVT_DATA_PATH_SHM, KVT_VERIFY_DEFAULT);
    for (uint32_t t = 0; t < COMB_TEETH; t++) {
        kvt_hash_t hh[2] = {teeth[t], kids[t]};
        kvt_lookup_result_t r = {0};
        ck_assert_int_eq(kvt_lookup(c, hh, 2, NULL, &r), 0);
        found += r.hit;
    }
    ck_assert_uint_eq(found, 2 * COMB_TEETH);
    kvt_close(&c);
    harness_stop(&h);
    unlink(arena_path);
}
END_TEST

static Suite *verify_suite(void)
{
    Suite *s = suite_create("verify");
    TCase *t = tcase_create("verify");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_estale_remaps_and_retries);
    tcase_add_test(t, test_relink_never_closes_a_loop);
    tcase_add_test(t, test_relink_checks_do_not_walk_chains);
    tcase_add_test(t, test_checksum_mismatch_frames);
    tcase_add_test(t, test_checksum_mismatch_shm_and_pins);
    tcase_add_test(t, test_scribbled_arena);
    suite_add_tcase(s, t);
    return s;
}

const check_program_t check_program = {.suite = verify_suite, .scratch = "kvtvf"};
