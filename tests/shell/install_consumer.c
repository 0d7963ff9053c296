/*
 * install_consumer.c - a program that knows only the installed kvtier.h (built by
 * install_check.sh with `pkg-config --cflags --libs kvtier` against the installed library):
 * keeps 8 saves and 8 loads in flight from two threads, one submitting and one polling the
 * completion fd, and reads back every byte.
 *
 * usage: install_consumer ENDPOINT auto|frames CHUNKS
 * The submitting thread (main) saves CHUNKS chunks of 256 KiB, at most 8 in flight, and loads
 * each one back as soon as its save completed, at most 8 loads in flight; the polling thread
 * takes every completion, checks it and returns its place to the submitter. Exit 0 when every
 * chunk was stored and loaded back byte-exact, 1 otherwise (with a message).
 */
#include <kvtier.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (256u << 10)
#define DEPTH 8

enum { SAVE, LOAD };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kvt_client_t *c;
    size_t n;
    uint8_t *src, *dst;
    kvt_hash_t *h;
    size_t *caps;
    int in_flight[2], most[2];
    size_t *to_load; /* saved, not yet submitted for loading */
    size_t nto_load, loaded, failed;
    char why[256];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void fill(uint8_t *p, size_t i)
{
    for (size_t k = 0; k < CHUNK; k++)
        p[k] = (uint8_t)(i * 131 + k * 7 + (k >> 9));
}

static void failure(const char *what, size_t i, int rc, const char *detail)
{
    if (g.failed++ == 0)
        snprintf(g.why, sizeof g.why, "%s of chunk %zu: %s %s", what, i, kvt_strerror(rc),
                 detail != NULL ? detail : "");
}

/* The polling thread: waits on kvt_fd, takes completions until every chunk is accounted for. */
static void *poller(void *arg)
{
    struct pollfd p = {.fd = kvt_fd(g.c), .events = POLLIN};

    (void)arg;
    for (;;) {
        kvt_completion_t *comp;
        pthread_mutex_lock(&g.mu);
        if (g.loaded + g.failed >= g.n) {
            pthread_mutex_unlock(&g.mu);
            return NULL;
        }
        pthread_mutex_unlock(&g.mu);
        if (poll(&p, 1, 30000) <= 0) {
            pthread_mutex_lock(&g.mu);
            failure("poll", 0, KVT_ETIMEDOUT, "no completion for 30 s");
            g.failed = g.n;
            pthread_cond_broadcast(&g.cv);
            pthread_mutex_unlock(&g.mu);
            return NULL;
        }
        while (kvt_next_completion(g.c, &comp) == 1) {
            size_t i = (size_t)(uintptr_t)comp->user;
            int op = comp->op == KVT_OP_SAVE ? SAVE : LOAD;
            pthread_mutex_lock(&g.mu);
            g.in_flight[op]--;
            if (comp->status != 0) {
                failure(op == SAVE ? "save" : "load", i, comp->status, comp->error);
            } else if (op == SAVE) {
                if (comp->outcomes[0] != KVT_SAVE_STORED)
                    failure("save", i, 0, "not stored");
                else
                    g.to_load[g.nto_load++] = i;
            } else if (comp->outcomes[0] != KVT_LOAD_HIT || comp->lens[0] != CHUNK ||
                       memcmp(g.dst + i * CHUNK, g.src + i * CHUNK, CHUNK) != 0) {
                failure("load", i, 0, "not the bytes saved");
            } else {
                g.loaded++;
            }
            pthread_cond_broadcast(&g.cv);
            pthread_mutex_unlock(&g.mu);
            kvt_completion_free(g.c, comp);
        }
    }
}

static int submit(int op, size_t i)
{
    kvt_submit_opts_t so = {.user = (void *)(uintptr_t)i};
    kvt_hash_t *parent = i > 0 ? &g.h[i - 1] : NULL;
    kvt_save_opts_t sv = {.parent = parent};
    const void *src = g.src + i * CHUNK;
    void *dst = g.dst + i * CHUNK;
    size_t len = CHUNK;

    if (op == SAVE)
        return kvt_submit_save(g.c, &g.h[i], 1, &src, &len, &sv, &so, NULL);
    return kvt_submit_load(g.c, &g.h[i], 1, &dst, &g.caps[i], &so, NULL);
}

int main(int argc, char **argv)
{
    kvt_ns_desc_t ns = {.model = "install-consumer",
                        .dtype = "u8",
                        .chunk_tokens = 16,
                        .world_size = 1,
                        .revision = "r1"};
    kvt_connect_opts_t o = {.timeout_ms = 20000};
    size_t next_save = 0, nload = 0;
    pthread_t t;
    int rc;

    if (argc != 4) {
        fprintf(stderr, "usage: install_consumer ENDPOINT auto|frames CHUNKS\n");
        return 2;
    }
    o.data_path = strcmp(argv[2], "frames") == 0 ? KVT_DATA_PATH_FRAMES : KVT_DATA_PATH_AUTO;
    g.n = (size_t)strtoul(argv[3], NULL, 10);
    g.src = malloc(g.n * CHUNK);
    g.dst = calloc(g.n, CHUNK);
    g.h = calloc(g.n, sizeof *g.h);
    g.caps = calloc(g.n, sizeof *g.caps);
    g.to_load = calloc(g.n, sizeof *g.to_load);
    if (g.n == 0 || !g.src || !g.dst || !g.h || !g.caps || !g.to_load)
        return 2;
    for (size_t i = 0; i < g.n; i++) {
        uint8_t key[20];
        memset(key, (int)i, sizeof key);
        kvt_hash_key(key, sizeof key, argv[2], strlen(argv[2]), &g.h[i]); /* runs apart */
        fill(g.src + i * CHUNK, i);
        g.caps[i] = CHUNK;
    }
    rc = kvt_connect(argv[1], &ns, 0, &o, &g.c);
    if (rc != 0) {
        fprintf(stderr, "install_consumer: connect %s: %s %s\n", argv[1], kvt_strerror(rc),
                kvt_last_error(NULL));
        return 1;
    }
    if (pthread_create(&t, NULL, poller, NULL) != 0)
        return 1;
    pthread_mutex_lock(&g.mu);
    while (nload < g.n && g.failed == 0) {
        int did = 0;
        if (next_save < g.n && g.in_flight[SAVE] < DEPTH) {
            g.in_flight[SAVE]++;
            if (submit(SAVE, next_save) != 0)
                failure("submit save", next_save, KVT_EINVAL, "");
            next_save++;
            did = 1;
        }
        if (nload < g.nto_load && g.in_flight[LOAD] < DEPTH) {
            g.in_flight[LOAD]++;
            if (submit(LOAD, g.to_load[nload]) != 0)
                failure("submit load", g.to_load[nload], KVT_EINVAL, "");
            nload++;
            did = 1;
        }
        for (int op = SAVE; op <= LOAD; op++)
            if (g.in_flight[op] > g.most[op])
                g.most[op] = g.in_flight[op];
        if (!did)
            pthread_cond_wait(&g.cv, &g.mu);
    }
    pthread_mutex_unlock(&g.mu);
    pthread_join(t, NULL);
    printf("install_consumer: %s path, %zu chunks loaded back byte-exact of %zu; most in flight: "
           "%d saves, %d loads\n",
           kvt_data_path(g.c) == KVT_DATA_PATH_SHM ? "shm" : "frames", g.loaded, g.n, g.most[SAVE],
           g.most[LOAD]);
    kvt_close(&g.c);
    if (g.failed) {
        fprintf(stderr, "install_consumer: %s\n", g.why);
        return 1;
    }
    return g.loaded == g.n ? 0 : 1;
}
