/*
 * test_async.c - libkvtier's asynchronous calls against the real daemon (kvtier.h).
 *
 * Four ranks at once, each with 64 requests in flight interleaving saves, lookups and loads on
 * both data paths, byte-exact, every completion matching its handle exactly once; a request
 * timing out on a stopped daemon (SIGSTOP) while another, submitted while it was stopped,
 * completes after SIGCONT; a daemon killed and restarted with requests in flight (each completes
 * once, with success or an error; the next submits recover, the shared-memory client maps the
 * new arena after a clean restart); kvt_shutdown and kvt_close with requests in flight (each
 * completion once, then nothing; under ASan: no leak); the transparent re-HELLO of requests in
 * flight when the daemon forgot the session; the model revision keeping namespaces apart; a
 * daemon frozen (SIGSTOP: no heartbeat) or killed under clients whose timeouts are longer than
 * the test: every request completes KVT_EUNAVAIL (or was answered), a request submitted while
 * the link is down fails after the down wait, and one submitted during a restart waits for it.
 * Waits are on completions and status, never fixed sleeps; nothing asserts a duration.
 */
#include "check_main.h"

#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvtier.h"

#define KIB 1024u
#define MIB (1024u * 1024u)
#define WAIT_MS 20000

static char extra[512];

/* A daemon with a shareable arena (per-process path) and extra JSON merged into "server". */
static harness_t *start_shm(uint64_t capacity, const char *server_json)
{
    static int seq;
    harness_opts_t o = {.capacity_bytes = capacity, .max_chunk_bytes = 1 * MIB};

    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"/dev/shm/kvtier-async-%d-%d.arena\", "
             "\"shm_hold_ms\": 5000}, \"server\": %s}",
             (int)getpid(), seq++, server_json != NULL ? server_json : "{}");
    o.extra_json = extra;
    return harness_start(&o);
}

static kvt_client_t *connect_c(const harness_t *h, uint32_t world, uint32_t rank, int path,
                               int timeout_ms, const char *revision)
{
    kvt_ns_desc_t d = harness_ns_desc("async-model", world, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = timeout_ms, .data_path = path};
    kvt_client_t *c = NULL;
    int rc;

    d.revision = revision;
    rc = kvt_connect(h->endpoint, &d, rank, &o, &c);
    ck_assert_msg(rc == 0, "kvt_connect: %s (%s)", kvt_strerror(rc), kvt_last_error(NULL));
    return c;
}

/* The next completion, waiting for it (fails the test after WAIT_MS). */

/* --- four ranks, 64 in flight each --- */

#define RT_CHUNKS 160
#define RT_DEPTH 64

enum { OP_SAVE, OP_LOOKUP, OP_LOAD, NOPS };

typedef struct {
    const harness_t *h;
    uint32_t rank;
    int path;
} rank_job_t;

typedef struct {
    kvt_client_t *c;
    kvt_hash_t hs[RT_CHUNKS];
    uint8_t *src, *dst;
    size_t len;
    kvt_handle_t handle[NOPS][RT_CHUNKS];
    int seen[NOPS][RT_CHUNKS];
    size_t todo[2 * RT_CHUNKS]; /* (op << 16 | i) submitted as places free up */
    size_t ntodo, done_todo;
    int in_flight, most;
} rt_t;

static void rt_submit(rt_t *t, int op, size_t i)
{
    kvt_submit_opts_t so = {.user = (void *)(uintptr_t)(op << 16 | i)};
    kvt_save_opts_t sv = {.parent = i > 0 ? &t->hs[i - 1] : NULL};
    const void *src = t->src + i * t->len;
    void *dst = t->dst + i * t->len;
    kvt_handle_t *hp = &t->handle[op][i];
    int rc;

    if (op == OP_SAVE)
        rc = kvt_submit_save(t->c, &t->hs[i], 1, &src, &t->len, &sv, &so, hp);
    else if (op == OP_LOOKUP)
        rc = kvt_submit_lookup(t->c, &t->hs[i], 1, NULL, &so, hp);
    else
        rc = kvt_submit_load(t->c, &t->hs[i], 1, &dst, &t->len, &so, hp);
    ck_assert_msg(rc == 0, "submit: %s", kvt_strerror(rc));
    ck_assert_uint_ne(*hp, 0);
    if (++t->in_flight > t->most)
        t->most = t->in_flight;
}

static void *rank_thread(void *arg)
{
    rank_job_t *j = arg;
    rt_t *t = calloc(1, sizeof *t);
    size_t ndone = 0, next_save = 0;
    kvt_stats_t st;

    ck_assert_ptr_nonnull(t);
    t->c = connect_c(j->h, 4, j->rank, j->path, 15000, NULL);
    ck_assert_int_eq(kvt_data_path(t->c), j->path);
    t->len = 48 * KIB + j->rank * 8; /* every rank its own size */
    t->src = malloc(RT_CHUNKS * t->len);
    t->dst = calloc(RT_CHUNKS, t->len);
    ck_assert_ptr_nonnull(t->src);
    ck_assert_ptr_nonnull(t->dst);
    harness_chain(7000 + (uint32_t)j->path * 10, t->hs, RT_CHUNKS);
    for (size_t i = 0; i < RT_CHUNKS; i++)
        harness_fill(t->src + i * t->len, t->len, j->rank, harness_hash_key(&t->hs[i]));
    /* 64 saves before any completion is taken: 64 in flight at once */
    for (; next_save < RT_DEPTH; next_save++)
        rt_submit(t, OP_SAVE, next_save);
    while (ndone < NOPS * RT_CHUNKS) {
        kvt_completion_t *comp = harness_next_completion(t->c, WAIT_MS);
        int op = (int)((uintptr_t)comp->user >> 16);
        size_t i = (uintptr_t)comp->user & 0xffff;

        ck_assert_int_lt(op, NOPS);
        ck_assert_uint_lt(i, RT_CHUNKS);
        ck_assert_msg(comp->handle == t->handle[op][i], "completion of another handle");
        ck_assert_msg(!t->seen[op][i], "completion delivered twice");
        t->seen[op][i] = 1;
        ck_assert_msg(comp->status == 0, "op %d chunk %zu: %s (%s)", op, i,
                      kvt_strerror(comp->status), comp->error);
        if (op == OP_SAVE) {
            ck_assert_int_eq(comp->op, KVT_OP_SAVE);
            ck_assert_int_eq(comp->outcomes[0], KVT_SAVE_STORED);
            t->todo[t->ntodo++] = (size_t)OP_LOOKUP << 16 | i;
            t->todo[t->ntodo++] = (size_t)OP_LOAD << 16 | i;
        } else if (op == OP_LOOKUP) {
            ck_assert_int_eq(comp->op, KVT_OP_LOOKUP);
            ck_assert_uint_eq(comp->lookup.hit, 1);
        } else {
            ck_assert_int_eq(comp->op, KVT_OP_LOAD);
            ck_assert_int_eq(comp->outcomes[0], KVT_LOAD_HIT);
            ck_assert_uint_eq(comp->lens[0], t->len);
            ck_assert_uint_eq(comp->nhit, 1);
            ck_assert_msg(harness_check_fill(t->dst + i * t->len, t->len, j->rank,
                                             harness_hash_key(&t->hs[i])),
                          "chunk %zu of rank %u is not byte-exact", i, j->rank);
        }
        kvt_completion_free(t->c, comp);
        t->in_flight--;
        ndone++;
        /* refill to 64 in flight: pending lookups and loads first, then new saves */
        while (t->in_flight < RT_DEPTH && (t->done_todo < t->ntodo || next_save < RT_CHUNKS)) {
            if (t->done_todo < t->ntodo) {
                size_t x = t->todo[t->done_todo++];
                rt_submit(t, (int)(x >> 16), x & 0xffff);
            } else {
                rt_submit(t, OP_SAVE, next_save++);
            }
        }
    }
    ck_assert_int_eq(t->most, RT_DEPTH);
    ck_assert_int_eq(kvt_stats(t->c, &st), 0);
    ck_assert_uint_eq(st.completed, st.submitted);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_uint_eq(st.in_flight + st.queued, 0);
    ck_assert_uint_ge(st.max_in_flight, RT_DEPTH);
    kvt_close(&t->c);
    free(t->src);
    free(t->dst);
    free(t);
    return NULL;
}

START_TEST(test_four_ranks_64_in_flight)
{
    harness_t *h = start_shm(128 * MIB, NULL);
    pthread_t th[4];
    rank_job_t jobs[4];

    for (uint32_t r = 0; r < 4; r++) {
        jobs[r] = (rank_job_t){
            .h = h, .rank = r, .path = r % 2 ? KVT_DATA_PATH_FRAMES : KVT_DATA_PATH_SHM};
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_thread, &jobs[r]), 0);
    }
    for (int r = 0; r < 4; r++)
        pthread_join(th[r], NULL);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 4 * RT_CHUNKS);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    harness_stop(&h);
}
END_TEST

/* --- a stopped daemon --- */

START_TEST(test_timeout_while_others_complete)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 30000, NULL);
    uint8_t a[4096], b[4096], back[4096];
    const void *src = b;
    void *dst = back;
    size_t len = sizeof b, cap = sizeof back, lens, nhit;
    kvt_submit_opts_t quick = {.user = (void *)1, .timeout_ms = 300};
    kvt_submit_opts_t slow = {.user = (void *)2, .timeout_ms = 30000};
    kvt_hash_t hs[2];
    kvt_handle_t ha = 0, hb = 0;
    kvt_completion_t *comp;
    kvt_stats_t st;

    harness_chain(41, hs, 2);
    harness_fill(a, sizeof a, 0, 1);
    harness_fill(b, sizeof b, 0, 2);
    {
        const void *pa = a;
        size_t la = sizeof a;
        ck_assert_int_eq(kvt_save(c, &hs[0], 1, &pa, &la, NULL, NULL), 0);
    }
    ck_assert_int_eq(kill(h->pid, SIGSTOP), 0);
    /* both submits return while the daemon is stopped */
    ck_assert_int_eq(kvt_submit_load(c, &hs[0], 1, &dst, &cap, &quick, &ha), 0);
    ck_assert_int_eq(kvt_submit_save(c, &hs[1], 1, &src, &len, NULL, &slow, &hb), 0);
    ck_assert_uint_ne(ha, hb);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.completed, 1); /* the save before the stop */

    comp = harness_next_completion(c, WAIT_MS);
    ck_assert_uint_eq(comp->handle, ha);
    ck_assert_int_eq(comp->status, KVT_ETIMEDOUT);
    kvt_completion_free(c, comp);
    /* the daemon is stopped: the other request cannot have completed */
    ck_assert_int_eq(kvt_next_completion(c, &comp), 0);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.timeouts, 1);

    ck_assert_int_eq(kill(h->pid, SIGCONT), 0);
    comp = harness_next_completion(c, WAIT_MS);
    ck_assert_uint_eq(comp->handle, hb);
    ck_assert_ptr_eq(comp->user, (void *)2);
    ck_assert_int_eq(comp->status, 0);
    ck_assert_int_eq(comp->outcomes[0], KVT_SAVE_STORED);
    kvt_completion_free(c, comp);
    /* the late reply of the timed-out load is dropped; the client goes on */
    ck_assert_int_eq(kvt_load(c, &hs[1], 1, &dst, &cap, &lens, &nhit), 0);
    ck_assert_uint_eq(nhit, 1);
    ck_assert_mem_eq(back, b, sizeof b);
    ck_assert_int_eq(kvt_load(c, &hs[0], 1, &dst, &cap, &lens, &nhit), 0);
    ck_assert_mem_eq(back, a, sizeof a);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* --- a daemon restart with requests in flight --- */

#define RS_N 24
#define RS_LEN (64 * KIB)

/* Submits RS_N saves of chain seed on c. */
static void submit_saves(kvt_client_t *c, uint32_t seed, kvt_hash_t *hs, uint8_t *buf,
                         kvt_handle_t *handles)
{
    harness_chain(seed, hs, RS_N);
    for (size_t i = 0; i < RS_N; i++) {
        const void *src = buf + i * RS_LEN;
        size_t len = RS_LEN;
        harness_fill(buf + i * RS_LEN, RS_LEN, 0, harness_hash_key(&hs[i]));
        ck_assert_int_eq(kvt_submit_save(c, &hs[i], 1, &src, &len, NULL,
                                         &(kvt_submit_opts_t){.user = (void *)(uintptr_t)i},
                                         &handles[i]),
                         0);
    }
}

/* Every one of the RS_N requests completes exactly once (success or an error), then nothing. */
/* Takes the RS_N completions of handles, each exactly once, and nothing more; each status must
 * be want or or_want (any status when want is 1). Returns how many completed with success. */
static int drain_once(kvt_client_t *c, const kvt_handle_t *handles, int want, int or_want)
{
    int seen[RS_N] = {0}, ok = 0;
    kvt_completion_t *comp;

    for (int k = 0; k < RS_N; k++) {
        size_t i;
        comp = harness_next_completion(c, WAIT_MS);
        i = (uintptr_t)comp->user;
        ck_assert_uint_lt(i, RS_N);
        ck_assert_uint_eq(comp->handle, handles[i]);
        ck_assert_msg(!seen[i], "request %zu completed twice", i);
        seen[i] = 1;
        ck_assert_msg(want == 1 || comp->status == want || comp->status == or_want,
                      "request %zu: %s (%s), expected %s or %s", i, kvt_strerror(comp->status),
                      comp->error != NULL ? comp->error : "", kvt_strerror(want),
                      kvt_strerror(or_want));
        ok += comp->status == 0;
        kvt_completion_free(c, comp);
    }
    ck_assert_int_eq(kvt_next_completion(c, &comp), 0);
    return ok;
}

static void round_trip(kvt_client_t *c, uint32_t seed)
{
    kvt_hash_t h;
    uint8_t *b = malloc(RS_LEN), *back = calloc(1, RS_LEN);
    const void *src = b;
    void *dst = back;
    size_t len = RS_LEN, cap = RS_LEN, lens = 0, nhit = 0;
    uint8_t out = 0;
    int rc;

    harness_chain(seed, &h, 1);
    harness_fill(b, RS_LEN, 0, seed);
    rc = kvt_save(c, &h, 1, &src, &len, NULL, &out);
    ck_assert_msg(rc == 0, "save after restart: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
    ck_assert_int_eq(out, KVT_SAVE_STORED);
    ck_assert_int_eq(kvt_load(c, &h, 1, &dst, &cap, &lens, &nhit), 0);
    ck_assert_uint_eq(nhit, 1);
    ck_assert_msg(memcmp(b, back, RS_LEN) == 0, "not byte-exact after the restart");
    free(b);
    free(back);
}

START_TEST(test_restart_with_requests_in_flight)
{
    harness_t *h = start_shm(64 * MIB, NULL);
    kvt_client_t *cs = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 2000, NULL);
    kvt_client_t *cf = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 2000, NULL);
    uint8_t *bs = malloc(RS_N * RS_LEN), *bf = malloc(RS_N * RS_LEN);
    kvt_hash_t hs[RS_N], hf[RS_N];
    kvt_handle_t ks[RS_N], kf[RS_N];
    kvt_stats_t st;
    kvt_arena_t ar;

    ck_assert_ptr_nonnull(bs);
    ck_assert_ptr_nonnull(bf);
    submit_saves(cs, 51, hs, bs, ks);
    submit_saves(cf, 52, hf, bf, kf);
    harness_kill9(h);
    drain_once(cs, ks, 1, 1);
    drain_once(cf, kf, 1, 1);

    harness_restart(h);
    round_trip(cs, 53); /* ENONS, HELLO again, retried */
    round_trip(cf, 54);
    ck_assert_int_eq(kvt_stats(cs, &st), 0);
    ck_assert_uint_ge(st.recoveries, 1);
    ck_assert_int_eq(kvt_stats(cf, &st), 0);
    ck_assert_uint_ge(st.recoveries, 1);

    /* every start is a new arena generation (the daemon re-attached the same file after the
     * SIGKILL: README "Restarts"), and a clean restart too: each time the client maps the arena
     * anew, as HELLO_OK's generation tells it to */
    ck_assert_int_eq(kvt_stats(cs, &st), 0);
    ck_assert_uint_eq(st.remaps, 1);
    ck_assert_int_eq(kvt_arena(cs, &ar), 0);
    ck_assert_uint_eq(ar.maps, 2);
    harness_restart(h);
    round_trip(cs, 55);
    ck_assert_int_eq(kvt_stats(cs, &st), 0);
    ck_assert_uint_eq(st.remaps, 2);
    ck_assert_int_eq(kvt_arena(cs, &ar), 0);
    ck_assert_uint_eq(ar.maps, 3);
    kvt_close(&cs);
    kvt_close(&cf);
    free(bs);
    free(bf);
    harness_stop(&h);
}
END_TEST

/* --- the link: a daemon gone under its clients --- */

/* Retries a lookup while it fails KVT_EUNAVAIL (the link not yet back); bounded. */
static void lookup_until_up(kvt_client_t *c)
{
    kvt_hash_t hs;
    kvt_lookup_result_t res;
    int rc = KVT_EUNAVAIL;

    harness_chain(59, &hs, 1);
    for (int64_t end = harness_now_ms() + WAIT_MS; rc == KVT_EUNAVAIL && harness_now_ms() < end;)
        rc = kvt_lookup(c, &hs, 1, NULL, &res);
    ck_assert_msg(rc == 0, "lookup after the daemon came back: %s", kvt_strerror(rc));
}

/* This process's CPU time (every thread), in ms. */
static int64_t cpu_ms(void)
{
    struct rusage ru;

    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

START_TEST(test_lost_daemon_fails_fast)
{
    harness_t *h = start_shm(64 * MIB, NULL);
    /* timeouts far beyond the test's own (120 s): only the link can end these requests */
    kvt_client_t *cs = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 600000, NULL);
    kvt_client_t *cf = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 600000, NULL);
    uint8_t *bs = malloc(RS_N * RS_LEN), *bf = malloc(RS_N * RS_LEN);
    kvt_hash_t hs[RS_N], hf[RS_N], hx;
    kvt_handle_t ks[RS_N], kf[RS_N];
    kvt_lookup_result_t res;
    kvt_completion_t *pin;
    kvt_link_t ln;
    kvt_stats_t st;
    int64_t cpu0;

    ck_assert_ptr_nonnull(bs);
    ck_assert_ptr_nonnull(bf);
    round_trip(cs, 81);
    round_trip(cf, 82);
    ck_assert_int_eq(kvt_link(cs, &ln), 0);
    ck_assert_uint_eq(ln.down, 0);
    ck_assert_int_eq(ln.down_wait_ms, 100);
    ck_assert_uint_eq(ln.disconnects, 0);

    /* a frozen daemon: its process answers no heartbeat, and the requests it holds fail */
    ck_assert_int_eq(kill(h->pid, SIGSTOP), 0);
    submit_saves(cs, 83, hs, bs, ks);
    submit_saves(cf, 84, hf, bf, kf);
    drain_once(cs, ks, KVT_EUNAVAIL, KVT_EUNAVAIL);
    drain_once(cf, kf, KVT_EUNAVAIL, KVT_EUNAVAIL);
    ck_assert_int_eq(kvt_link(cs, &ln), 0);
    ck_assert_uint_eq(ln.down, 1);
    ck_assert_uint_eq(ln.disconnects, 1);
    ck_assert_uint_eq(ln.unavailable, RS_N);
    ck_assert_int_ge(ln.down_for_ms, 0);
    /* and so does a request submitted while it is down, after the down wait */
    harness_chain(85, &hx, 1);
    ck_assert_int_eq(kvt_lookup(cf, &hx, 1, NULL, &res), KVT_EUNAVAIL);
    ck_assert_int_eq(kvt_stats(cf, &st), 0);
    ck_assert_uint_eq(st.timeouts, 0);
    ck_assert_int_eq(kill(h->pid, SIGCONT), 0);
    lookup_until_up(cs);
    lookup_until_up(cf);
    round_trip(cs, 86);
    round_trip(cf, 87);

    /* killed with requests in flight: each completes once, answered or KVT_EUNAVAIL, never
     * held for its timeout */
    harness_chain(86, &hx, 1); /* round_trip's chunk: pinned across the kill */
    ck_assert_int_eq(kvt_submit_pin(cs, &hx, 1, NULL, NULL), 0);
    pin = harness_next_completion(cs, WAIT_MS);
    ck_assert_int_eq(pin->status, 0);
    ck_assert_uint_eq(pin->nhit, 1);
    submit_saves(cs, 88, hs, bs, ks);
    submit_saves(cf, 89, hf, bf, kf);
    harness_kill9(h);
    drain_once(cs, ks, 0, KVT_EUNAVAIL);
    drain_once(cf, kf, 0, KVT_EUNAVAIL);
    ck_assert_int_eq(kvt_lookup(cs, &hx, 1, NULL, &res), KVT_EUNAVAIL);
    ck_assert_int_eq(kvt_link(cs, &ln), 0);
    ck_assert_uint_eq(ln.down, 1);
    ck_assert_uint_eq(ln.disconnects, 2);
    /* a release queued while the link is down waits for it, and the I/O thread sleeps
     * meanwhile: it spun a core on the release's timer (the one fixed wait here: 1 s of this
     * process's CPU time, against 1 s when it spins) */
    kvt_completion_free(cs, pin);
    cpu0 = cpu_ms();
    ck_assert_int_eq(usleep(1000 * 1000), 0);
    ck_assert_msg(cpu_ms() - cpu0 < 500, "%lld ms of CPU in 1 s while the link is down",
                  (long long)(cpu_ms() - cpu0));

    /* a request waits for a restart within its down wait (2 s here: a loaded machine; the
     * client reconnects every 20 ms), and the session recovers as after any restart */
    ck_assert_int_eq(kvt_set_down_wait(cs, 2000), 0);
    ck_assert_int_eq(kvt_set_down_wait(cf, 2000), 0);
    ck_assert_int_eq(kvt_set_down_wait(cf, -2), KVT_EINVAL);
    harness_restart(h);
    round_trip(cs, 90);
    round_trip(cf, 91);
    ck_assert_int_eq(kvt_link(cf, &ln), 0);
    ck_assert_uint_eq(ln.down, 0);
    ck_assert_int_eq(ln.down_wait_ms, 2000);
    ck_assert_int_eq(kvt_stats(cs, &st), 0);
    ck_assert_uint_ge(st.recoveries, 1);
    ck_assert_uint_eq(st.timeouts, 0);
    kvt_close(&cs);
    kvt_close(&cf);
    free(bs);
    free(bf);
    harness_stop(&h);
}
END_TEST

/* --- shutdown and close with requests in flight --- */

/* Submits 64 mixed requests to a stopped daemon. */
static void submit_64(kvt_client_t *c, kvt_hash_t *hs, uint8_t *buf, kvt_handle_t *handles)
{
    harness_chain(61, hs, 64);
    for (size_t i = 0; i < 64; i++) {
        kvt_submit_opts_t so = {.user = (void *)(uintptr_t)i};
        void *dst = buf + i * 1024;
        const void *src = dst;
        size_t len = 1024;
        int rc = i % 3 == 0   ? kvt_submit_lookup(c, &hs[i], 1, NULL, &so, &handles[i])
                 : i % 3 == 1 ? kvt_submit_save(c, &hs[i], 1, &src, &len, NULL, &so, &handles[i])
                              : kvt_submit_load(c, &hs[i], 1, &dst, &len, &so, &handles[i]);
        ck_assert_int_eq(rc, 0);
    }
}

START_TEST(test_shutdown_completes_each_once)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 60000, NULL);
    static uint8_t buf[64 * 1024];
    kvt_hash_t hs[64];
    kvt_handle_t handles[64];
    int seen[64] = {0};
    kvt_completion_t *comp;
    kvt_handle_t x;

    ck_assert_int_eq(kill(h->pid, SIGSTOP), 0);
    submit_64(c, hs, buf, handles);
    kvt_shutdown(c); /* returns: the library touches no caller buffer any more */
    for (int k = 0; k < 64; k++) {
        size_t i;
        ck_assert_int_eq(kvt_next_completion(c, &comp), 1);
        i = (uintptr_t)comp->user;
        ck_assert_uint_eq(comp->handle, handles[i]);
        ck_assert_int_eq(comp->status, KVT_ECLOSED);
        ck_assert(!seen[i]);
        seen[i] = 1;
        kvt_completion_free(c, comp);
    }
    ck_assert_int_eq(kvt_next_completion(c, &comp), 0);
    ck_assert_int_eq(kvt_poll(c, 0), 0);
    ck_assert_int_eq(kvt_submit_lookup(c, &hs[0], 1, NULL, NULL, &x), KVT_ECLOSED);
    ck_assert_int_eq(kvt_lookup(c, &hs[0], 1, NULL, &(kvt_lookup_result_t){0}), KVT_ECLOSED);
    kvt_shutdown(c); /* idempotent */
    kvt_close(&c);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(kill(h->pid, SIGCONT), 0);
    harness_stop(&h);
}
END_TEST

/* kvt_close with requests in flight, completions never taken: no hang, and (under ASan) no
 * leak: the test process's exit runs LeakSanitizer. */
START_TEST(test_close_with_requests_in_flight)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 60000, NULL);
    kvt_client_t *d = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 60000, NULL);
    static uint8_t buf[64 * 1024];
    kvt_hash_t hs[64];
    kvt_handle_t handles[64];
    kvt_completion_t *comp;

    ck_assert_int_eq(kill(h->pid, SIGSTOP), 0);
    submit_64(c, hs, buf, handles);
    kvt_close(&c);
    ck_assert_ptr_null(c);
    /* some taken and kept, the rest never taken */
    submit_64(d, hs, buf, handles);
    kvt_shutdown(d);
    ck_assert_int_eq(kvt_next_completion(d, &comp), 1);
    ck_assert_int_eq(comp->status, KVT_ECLOSED);
    kvt_close(&d);
    ck_assert_int_eq(kill(h->pid, SIGCONT), 0);
    harness_stop(&h);
}
END_TEST

/* kvt_shutdown while the copy helpers have chunks of saves and loads in hand: it returns only
 * when no helper touches a caller buffer any more (the buffers are freed right after it: ASan
 * sees any later write), and every request completes exactly once, a load that succeeded with
 * its bytes complete. */
#define SC_N 32
#define SC_LEN (1 * MIB)
START_TEST(test_shutdown_with_copies_in_flight)
{
    harness_t *h = start_shm(160 * MIB, NULL);
    kvt_hash_t hs[2 * SC_N];
    kvt_handle_t handles[2 * SC_N];
    int seen[2 * SC_N] = {0};
    uint8_t *src = malloc(SC_N * SC_LEN), *dst = calloc(SC_N, SC_LEN);
    int ok_loads[SC_N] = {0};
    kvt_completion_t *comp;
    kvt_client_t *c;

    setenv("KVTIER_COPY_THREADS", "3", 1);
    c = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 5000, NULL);
    unsetenv("KVTIER_COPY_THREADS");
    harness_chain(81, hs, 2 * SC_N);
    for (size_t i = 0; i < SC_N; i++) { /* chunks SC_N.. stored first, to be loaded */
        const void *b = src + i * SC_LEN;
        size_t len = SC_LEN;
        uint8_t out;
        harness_fill(src + i * SC_LEN, SC_LEN, 0, i);
        ck_assert_int_eq(kvt_save(c, &hs[SC_N + i], 1, &b, &len, NULL, &out), 0);
        ck_assert_int_eq(out, KVT_SAVE_STORED);
    }
    for (size_t i = 0; i < SC_N; i++) {
        kvt_submit_opts_t so = {.user = (void *)(uintptr_t)i}, lo = {.user = (void *)(SC_N + i)};
        const void *b = src + i * SC_LEN;
        void *d = dst + i * SC_LEN;
        size_t len = SC_LEN;
        ck_assert_int_eq(kvt_submit_save(c, &hs[i], 1, &b, &len, NULL, &so, &handles[i]), 0);
        ck_assert_int_eq(kvt_submit_load(c, &hs[SC_N + i], 1, &d, &len, &lo, &handles[SC_N + i]),
                         0);
    }
    kvt_shutdown(c); /* with copies in the helpers' hands */
    for (int k = 0; k < 2 * SC_N; k++) {
        size_t i;
        ck_assert_int_eq(kvt_next_completion(c, &comp), 1);
        i = (uintptr_t)comp->user;
        ck_assert_uint_lt(i, 2 * SC_N);
        ck_assert_uint_eq(comp->handle, handles[i]);
        ck_assert(!seen[i]);
        seen[i] = 1;
        ck_assert(comp->status == 0 || comp->status == KVT_ECLOSED);
        if (i >= SC_N && comp->status == 0 && comp->nhit == 1)
            ok_loads[i - SC_N] = 1;
        kvt_completion_free(c, comp);
    }
    ck_assert_int_eq(kvt_next_completion(c, &comp), 0);
    for (size_t i = 0; i < SC_N; i++)
        if (ok_loads[i])
            ck_assert_int_eq(harness_check_fill(dst + i * SC_LEN, SC_LEN, 0, i), 1);
    memset(src, 0xee, SC_N * SC_LEN); /* nobody reads or writes them any more */
    free(src);
    free(dst);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* --- the daemon forgets the session: one HELLO for every request in flight --- */

static int pred_no_clients(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "server.clients") == 0;
}

START_TEST(test_forgotten_session_recovers_in_flight)
{
    harness_opts_t o = {.extra_json = "{\"server\": {\"client_idle_ms\": 1000}}"};
    harness_t *h = harness_start(&o);
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 10000, NULL);
    uint8_t b[2048];
    const void *src = b;
    size_t len = sizeof b;
    kvt_hash_t hs[1];
    kvt_handle_t handles[16];
    kvt_stats_t st;
    json_t *s;

    harness_chain(71, hs, 1);
    harness_fill(b, sizeof b, 0, 71);
    ck_assert_int_eq(kvt_save(c, hs, 1, &src, &len, NULL, NULL), 0);
    s = harness_wait_status(h, pred_no_clients, NULL, WAIT_MS);
    ck_assert_msg(s != NULL, "the idle session was not forgotten");
    json_decref(s);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(kvt_submit_lookup(c, hs, 1, NULL, NULL, &handles[i]), 0);
    for (int i = 0; i < 16; i++) {
        kvt_completion_t *comp = harness_next_completion(c, WAIT_MS);
        ck_assert_msg(comp->status == 0, "%s", kvt_strerror(comp->status));
        ck_assert_uint_eq(comp->lookup.hit, 1);
        kvt_completion_free(c, comp);
    }
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.recoveries, 1); /* one HELLO for all of them */
    ck_assert_uint_eq(st.failed, 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* --- synchronous calls beside asynchronous ones: the hand-over of the I/O --- */

typedef struct {
    kvt_client_t *c;
    const kvt_hash_t *hs;
    int n;
} mix_t;

/* Saves a chain of 8 chunks of len bytes (seed), one synchronous save each, from bufs (8 x len,
 * filled here with the harness pattern). */
static void save_eight(kvt_client_t *c, uint32_t seed, kvt_hash_t *hs, uint8_t *bufs, size_t len)
{
    harness_chain(seed, hs, 8);
    for (int i = 0; i < 8; i++) {
        const void *src = bufs + i * len;
        harness_fill(bufs + i * len, len, 0, harness_hash_key(&hs[i]));
        ck_assert_int_eq(kvt_save(c, &hs[i], 1, &src, &len, NULL, NULL), 0);
    }
}

/* Synchronous lookups and loads while another thread keeps asynchronous requests in flight. */
static void *sync_thread(void *arg)
{
    mix_t *m = arg;
    uint8_t back[2048];

    for (int i = 0; i < m->n; i++) {
        kvt_lookup_result_t res = {0};
        void *dst = back;
        size_t cap = sizeof back, lens, nhit;
        ck_assert_int_eq(kvt_lookup(m->c, &m->hs[i % 8], 1, NULL, &res), 0);
        ck_assert_uint_eq(res.hit, 1);
        ck_assert_int_eq(kvt_load(m->c, &m->hs[i % 8], 1, &dst, &cap, &lens, &nhit), 0);
        ck_assert_uint_eq(nhit, 1);
        ck_assert(harness_check_fill(back, sizeof back, 0, harness_hash_key(&m->hs[i % 8])));
    }
    return NULL;
}

START_TEST(test_sync_beside_async)
{
    harness_t *h = start_shm(32 * MIB, NULL);
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 15000, NULL);
    static uint8_t bufs[8][2048];
    kvt_hash_t hs[8];
    mix_t m = {.c = c, .hs = hs, .n = 300};
    kvt_stats_t st;
    pthread_t t;

    save_eight(c, 91, hs, bufs[0], sizeof bufs[0]);
    /* An idle client's synchronous calls run the I/O themselves, once the I/O thread has parked
     * (on a loaded machine it may not have between two calls: lookups until one did) */
    for (int64_t end = harness_now_ms() + WAIT_MS;;) {
        kvt_lookup_result_t res = {0};
        ck_assert_int_eq(kvt_lookup(c, &hs[0], 1, NULL, &res), 0);
        ck_assert_int_eq(kvt_stats(c, &st), 0);
        if (st.inline_calls > 0 || harness_now_ms() > end)
            break;
        usleep(1000);
    }
    ck_assert_uint_gt(st.inline_calls, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, sync_thread, &m), 0);
    for (int i = 0; i < 600; i++) {     /* asynchronous loads, 4 in flight, taken on this thread */
        static uint8_t back[600][2048]; /* a buffer per load: completions in any order */
        void *dst = back[i];
        size_t cap = sizeof back[0];
        kvt_completion_t *comp;
        ck_assert_int_eq(kvt_submit_load(c, &hs[i % 8], 1, &dst, &cap,
                                         &(kvt_submit_opts_t){.user = (void *)(uintptr_t)i}, NULL),
                         0);
        if (i < 3)
            continue;
        comp = harness_next_completion(c, WAIT_MS);
        ck_assert_int_eq(comp->status, 0);
        ck_assert_int_eq(comp->outcomes[0], KVT_LOAD_HIT);
        ck_assert(harness_check_fill(back[(uintptr_t)comp->user], sizeof back[0], 0,
                                     harness_hash_key(&hs[(uintptr_t)comp->user % 8])));
        kvt_completion_free(c, comp);
    }
    for (int i = 0; i < 3; i++)
        kvt_completion_free(c, harness_next_completion(c, WAIT_MS));
    pthread_join(t, NULL);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_uint_eq(st.completed, st.submitted);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* --- the model revision --- */

/* --- the daemon's window: a client never has more than max_in_flight outstanding --- */

START_TEST(test_window_never_refused)
{
    enum { N = 400, WIN = 4 };
    harness_t *h = start_shm(32 * MIB, "{\"max_in_flight\": 4}");
    kvt_client_t *c = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 15000, NULL);
    static uint8_t src[8][4096], dst[N][4096];
    kvt_hash_t hs[8];
    kvt_stats_t st;
    int seen[N] = {0};

    save_eight(c, 93, hs, src[0], sizeof src[0]);
    ck_assert_int_eq(kvt_stats(c, &st), 0);
    ck_assert_uint_eq(st.max_in_flight, WIN);
    for (int i = 0; i < N; i++) { /* all submitted at once: the library queues beyond 4 */
        void *p = dst[i];
        size_t cap = sizeof dst[i];
        kvt_submit_opts_t so = {.user = (void *)(uintptr_t)i};
        if (i % 2 == 0)
            ck_assert_int_eq(kvt_submit_load(c, &hs[i % 8], 1, &p, &cap, &so, NULL), 0);
        else
            ck_assert_int_eq(kvt_submit_lookup(c, &hs[i % 8], 1, NULL, &so, NULL), 0);
    }
    for (int k = 0; k < N; k++) {
        kvt_completion_t *comp = harness_next_completion(c, WAIT_MS);
        int i = (int)(uintptr_t)comp->user;
        ck_assert_msg(comp->status == 0, "request %d: %s (%s)", i, kvt_strerror(comp->status),
                      comp->error);
        ck_assert_int_eq(seen[i]++, 0);
        if (i % 2 == 0)
            ck_assert(harness_check_fill(dst[i], sizeof dst[i], 0, harness_hash_key(&hs[i % 8])));
        kvt_completion_free(c, comp);
    }
    ck_assert_int_eq(harness_stat(h, "server.refused.in_flight"), 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_revision_separates_namespaces)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *a = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 5000, "rev-a");
    kvt_client_t *b = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 5000, "rev-b");
    kvt_client_t *a2 = connect_c(h, 1, 0, KVT_DATA_PATH_FRAMES, 5000, "rev-a");
    kvt_lookup_result_t r = {0};
    uint8_t buf[1024];
    const void *src = buf;
    size_t len = sizeof buf;
    kvt_hash_t hs[1];

    harness_chain(81, hs, 1);
    memset(buf, 7, sizeof buf);
    ck_assert_int_eq(kvt_save(a, hs, 1, &src, &len, NULL, NULL), 0);
    ck_assert_int_eq(kvt_lookup(b, hs, 1, NULL, &r), 0);
    ck_assert_uint_eq(r.hit, 0); /* another revision never hits */
    ck_assert_int_eq(kvt_lookup(a2, hs, 1, NULL, &r), 0);
    ck_assert_uint_eq(r.hit, 1);
    kvt_close(&a);
    kvt_close(&b);
    kvt_close(&a2);
    harness_stop(&h);
}
END_TEST

/* Copy helpers finish in any order, but a chain pipelined at depth (one chunk per save, each
 * naming its predecessor) is committed in chain order: no chunk reaches the daemon before its
 * predecessor, so none is an orphan (orphans are evicted first). The chain alternates 512 KiB
 * chunks (copied by the helpers) and 64 KiB ones (copied at once by the I/O thread: ready before
 * their predecessor). Checked through eviction: after more bytes than fit, what is left of the
 * chain is a prefix of it, and it loads back byte-exact. */
#define PC_N 16
#define PC_BIG (512 * KIB)
#define PC_LEN(i) ((i) % 2 == 0 ? PC_BIG : 64 * KIB)
START_TEST(test_pipelined_chain_commits_in_order)
{
    harness_t *h = start_shm(20 * PC_BIG, NULL);
    kvt_hash_t a[PC_N];
    uint8_t *buf = malloc(PC_N * PC_BIG), *back = malloc(PC_BIG);
    size_t inflight = 0, present = 0;
    kvt_completion_t *comp;
    kvt_lookup_result_t res = {0};
    kvt_client_t *c;
    bool gap = false;

    setenv("KVTIER_COPY_THREADS", "2", 1); /* read at connect */
    c = connect_c(h, 1, 0, KVT_DATA_PATH_SHM, 5000, NULL);
    unsetenv("KVTIER_COPY_THREADS");
    harness_chain(71, a, PC_N);
    for (size_t i = 0; i < PC_N; i++) {
        const void *src = buf + i * PC_BIG;
        size_t len = PC_LEN(i);
        kvt_save_opts_t sv = {.parent = i > 0 ? &a[i - 1] : NULL};
        harness_fill(buf + i * PC_BIG, len, 0, i);
        if (inflight == 8) {
            comp = harness_next_completion(c, WAIT_MS);
            ck_assert_int_eq(comp->status, 0);
            ck_assert_int_eq(comp->outcomes[0], KVT_SAVE_STORED);
            kvt_completion_free(c, comp);
            inflight--;
        }
        ck_assert_int_eq(kvt_submit_save(c, &a[i], 1, &src, &len, &sv, NULL, NULL), 0);
        inflight++;
    }
    for (; inflight > 0; inflight--) {
        comp = harness_next_completion(c, WAIT_MS);
        ck_assert_int_eq(comp->status, 0);
        ck_assert_int_eq(comp->outcomes[0], KVT_SAVE_STORED);
        kvt_completion_free(c, comp);
    }
    /* 6 MiB more, 4.5 MiB of chain: some of the chain must go */
    ck_assert_uint_eq(harness_save_chain(c, 72, 6, PC_BIG, 0), 6);
    ck_assert_uint_eq(harness_save_chain(c, 73, 6, PC_BIG, 0), 6);
    for (size_t i = 0; i < PC_N; i++) {
        ck_assert_int_eq(kvt_lookup(c, &a[i], 1, NULL, &res), 0);
        ck_assert_msg(!(gap && res.hit == 1), "chunk %zu stored after an evicted predecessor", i);
        gap |= res.hit == 0;
        present += res.hit;
    }
    ck_assert_uint_lt(present, PC_N);
    ck_assert_uint_gt(present, 0);
    ck_assert_int_eq(kvt_lookup(c, a, PC_N, NULL, &res), 0);
    ck_assert_uint_eq(res.hit, present);
    for (size_t i = 0; i < present; i++) {
        void *dst = back;
        size_t cap = PC_BIG, len = 0, nhit = 0;
        ck_assert_int_eq(kvt_load(c, &a[i], 1, &dst, &cap, &len, &nhit), 0);
        ck_assert_uint_eq(nhit, 1);
        ck_assert_uint_eq(len, PC_LEN(i));
        ck_assert_int_eq(harness_check_fill(back, len, 0, i), 1);
    }
    kvt_close(&c);
    free(buf);
    free(back);
    harness_stop(&h);
}
END_TEST

/* --- fork --- */

/* What the child finds of a client its parent connected, as bits: 0 when every call failed
 * KVT_ECLOSED at once (kvt_last_error naming the fork), kvt_next_completion gave nothing and
 * kvt_close returned. */
static int forked_child_calls(kvt_client_t *c, const kvt_hash_t *hs, size_t n, size_t len)
{
    kvt_lookup_result_t res = {0};
    kvt_completion_t *comp = (kvt_completion_t *)1;
    kvt_handle_t hd = 0;
    kvt_stats_t st;
    char *buf = calloc(n, len);
    void *dst[8];
    const void *src[8];
    size_t caps[8], lens[8], nhit = 0;
    int bad = 0;

    for (size_t i = 0; i < n; i++) {
        dst[i] = buf + i * len;
        src[i] = buf + i * len;
        caps[i] = len;
    }
    if (kvt_lookup(c, hs, n, NULL, &res) != KVT_ECLOSED || !strstr(kvt_last_error(c), "fork"))
        bad |= 1;
    if (kvt_load(c, hs, n, dst, caps, lens, &nhit) != KVT_ECLOSED)
        bad |= 2;
    if (kvt_save(c, hs, n, src, caps, NULL, (uint8_t *)lens) != KVT_ECLOSED)
        bad |= 4;
    if (kvt_submit_lookup(c, hs, n, NULL, NULL, &hd) != KVT_ECLOSED)
        bad |= 8;
    if (kvt_poll(c, 100) != KVT_ECLOSED || kvt_next_completion(c, &comp) != 0 || comp != NULL)
        bad |= 16;
    if (kvt_stats(c, &st) != KVT_ECLOSED || kvt_fd(c) != -1)
        bad |= 32;
    kvt_close(&c);
    if (c != NULL)
        bad |= 64;
    free(buf);
    return bad;
}

/* vLLM and SGLang fork workers. A child that inherits a connected client has none of its
 * threads and shares its eventfds and socket with the parent: before 0.2.13 a call there spun
 * for ever inside ZeroMQ (its timeout never fired) and kvt_close hung in pthread_cond_destroy.
 * Now the child's calls fail KVT_ECLOSED at once, and the parent's client, with a completion
 * pending at the fork, goes on serving the same bytes. */
START_TEST(test_forked_child_fails_fast_and_parent_goes_on)
{
    static const int paths[] = {KVT_DATA_PATH_SHM, KVT_DATA_PATH_FRAMES};
    harness_t *h = start_shm(64 * MIB, NULL);

    for (size_t p = 0; p < 2; p++) {
        kvt_client_t *c = connect_c(h, 1, 0, paths[p], 2000, NULL);
        kvt_hash_t hs[4];
        kvt_handle_t hd;
        kvt_completion_t *comp;
        int status = -1;
        int64_t deadline;
        pid_t pid, got = 0;

        ck_assert_uint_eq(harness_save_chain(c, 8100 + (uint32_t)p, 4, 64 * KIB, 0), 4);
        harness_chain(8100 + (uint32_t)p, hs, 4);
        ck_assert_int_eq(kvt_submit_lookup(c, hs, 4, NULL, NULL, &hd), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            /* a hang ends as SIGALRM, not as the test's timeout (Check's SIGALRM handler,
             * inherited, would kill the whole process group) */
            signal(SIGALRM, SIG_DFL);
            alarm(20);
            _exit(forked_child_calls(c, hs, 4, 64 * KIB));
        }
        comp = harness_next_completion(c, WAIT_MS);
        ck_assert_uint_eq(comp->handle, hd);
        ck_assert_int_eq(comp->status, 0);
        ck_assert_uint_eq(comp->lookup.hit, 4);
        kvt_completion_free(c, comp);
        ck_assert_uint_eq(harness_load_chain(c, 8100 + (uint32_t)p, 4, 64 * KIB, 0), 4);
        deadline = harness_now_ms() + 25000;
        while ((got = waitpid(pid, &status, WNOHANG)) == 0 && harness_now_ms() < deadline)
            usleep(20000);
        if (got == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        ck_assert_msg(got == pid, "path %zu: the forked child hung", p);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "path %zu: child status %#x (exit bits %d)", p, status,
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        ck_assert_uint_eq(harness_load_chain(c, 8100 + (uint32_t)p, 4, 64 * KIB, 0), 4);
        kvt_close(&c);
    }
    harness_stop(&h);
}
END_TEST

static Suite *async_suite(void)
{
    Suite *s = suite_create("async");
    TCase *t = tcase_create("async");

    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_four_ranks_64_in_flight);
    tcase_add_test(t, test_timeout_while_others_complete);
    tcase_add_test(t, test_restart_with_requests_in_flight);
    tcase_add_test(t, test_lost_daemon_fails_fast);
    tcase_add_test(t, test_shutdown_completes_each_once);
    tcase_add_test(t, test_close_with_requests_in_flight);
    tcase_add_test(t, test_shutdown_with_copies_in_flight);
    tcase_add_test(t, test_forgotten_session_recovers_in_flight);
    tcase_add_test(t, test_sync_beside_async);
    tcase_add_test(t, test_window_never_refused);
    tcase_add_test(t, test_revision_separates_namespaces);
    tcase_add_test(t, test_pipelined_chain_commits_in_order);
    tcase_add_test(t, test_forked_child_fails_fast_and_parent_goes_on);
    suite_add_tcase(s, t);
    return s;
}

const check_program_t check_program = {.suite = async_suite, .scratch = "kvtas"};
