/*
 * kvtier-soak.c - a soak run against a running kvtierd: several ranks of one engine issue mixed
 * leased lookups, saves, loads and tallies for a duration while the daemon's resident anonymous
 * memory and open descriptors are sampled; the run fails if either trends upward, or on any
 * wrong byte or client error.
 *
 *   kvtier-soak -e ENDPOINT -s STATUS_SOCKET [--duration S] [--ranks N] [--prompts N]
 *               [--chunks N] [--chunk-bytes B] [--sample-ms MS] [--warmup S]
 *               [--tolerance PCT] [--slack-mib MIB] [--fd-slack N] [--json]
 *
 * Design. One namespace "soak" of --ranks ranks (world = ranks), one client per rank, each on its
 * own thread (the library is synchronous; a rank is a thread, as in an engine). Every iteration
 * all ranks pick the same prompt from a pool of --prompts prompts of --chunks chunks (a pool
 * larger than the RAM tier keeps eviction, and with a disk tier demotion and promotion, busy),
 * then per rank: a leased lookup of the prompt (rank 0 asks for all ranks), a load of the hit
 * prefix (every byte compared), a save of the rest (chained after the prefix, op id = the
 * iteration, so the admission gate decides it once for every rank), and every 16 iterations a
 * tally from rank 0 with running verdict totals. A chunk's bytes are a pseudo-random stream
 * seeded by its hash and rank (incompressible, like KV): a chunk of another hash or rank never
 * compares equal.
 * Prompts are drawn from a fixed sequence (the same for every run) and the ranks stay in step
 * only through the prompt index: no barrier, so they contend as real ranks do.
 *
 * Sampling (the main thread): the daemon's pid comes from GET /status; every --sample-ms the
 * RssAnon line of /proc/<pid>/status and the entries of /proc/<pid>/fd are read. The verdict
 * ignores the first --warmup seconds (the arena and the index fill up, ZeroMQ and libuv size
 * their buffers), splits the rest into thirds and compares the last third with the first: RSS
 * fails when the median of the last third exceeds the median of the first by more than
 * --tolerance percent plus --slack-mib MiB (medians ignore single spikes: a burst of promotions),
 * fds fail when the largest count of the last third exceeds the largest of the first by more than
 * --fd-slack (default 0; a leak of descriptors grows by whole steps, with every operation that
 * leaks: a soak's thousands of them leave it far behind any slack, while a daemon whose disk
 * tier is busy has a few descriptors in transit at any moment, 0.2.10: a reclaimed segment's
 * until the next flush unlinks it, a segment being read until its reads end). The least-squares
 * slope of RSS over the measured window is reported beside it.
 *
 * Threads: the main thread samples; one thread per rank. Shared state: a stop flag and per-rank
 * counters, read after the joins (atomics only for the flag and the shared prompt counter).
 *
 * Exit: 0 no trend and no error; 1 a trend, a wrong byte or a client error; 2 usage; 3 the daemon
 * could not be reached.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "kvtier.h"
#include "tool.h"

#define SOAK_TALLY_EVERY 16
#define SOAK_MAX_RANKS 16
#define SOAK_MAX_SAMPLES 100000

enum { EXIT_TREND = 1, EXIT_USAGE = TOOL_EXIT_USAGE, EXIT_FAIL = 3 };

static const char usage_text[] =
    "usage: kvtier-soak -e ENDPOINT -s STATUS_SOCKET [--duration S] [--ranks N] [--prompts N]\n"
    "                   [--chunks N] [--chunk-bytes B] [--sample-ms MS] [--warmup S]\n"
    "                   [--tolerance PCT] [--slack-mib MIB] [--fd-slack N] [--json]\n"
    "  mixed leased lookups, loads, saves and tallies from N ranks for S seconds (default 60)\n"
    "  while the daemon's RssAnon and open fds are sampled; exit 1 on an upward trend, a wrong\n"
    "  byte or a client error\n";

typedef struct {
    const char *endpoint, *status;
    uint64_t duration_s, ranks, prompts, chunks, chunk_bytes, sample_ms, warmup_s;
    uint64_t tolerance_pct, slack_mib, fd_slack;
    int json;
} soak_opts_t;

typedef struct {
    uint64_t lookups, leased, capped, loads, loaded, saves, stored, nospace, tallies;
    uint64_t busy;     /* EBUSY answers (a bound said no: not an error) */
    uint64_t errors;   /* other client errors */
    uint64_t mismatch; /* chunks loaded with other bytes */
} soak_counts_t;

typedef struct soak soak_t;

typedef struct {
    soak_t *sk;
    uint32_t rank;
    kvt_client_t *c;
    soak_counts_t n;
    char last_error[256];
} soak_rank_t;

struct soak {
    soak_opts_t o;
    atomic_int stop;
    soak_rank_t ranks[SOAK_MAX_RANKS];
};

typedef struct {
    double t_s;
    uint64_t rss, fds;
} sample_t;

/* --- chunks --- */

/* Incompressible bytes seeded by the chunk's hash and rank (xorshift64*), so that the disk tier
 * stores them raw and fills up as a real cache does. */
static void chunk_fill(uint8_t *p, size_t len, const kvt_hash_t *h, uint32_t rank)
{
    uint64_t x;

    memcpy(&x, h->b, sizeof x);
    x ^= (uint64_t)(rank + 1) * 0x9e3779b97f4a7c15ull;
    if (x == 0)
        x = 1;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v = x * 0x2545f4914f6cdd1dull;
        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
}

/* The hashes of prompt k: chunks chained over token ids derived from k. */
static void prompt_hashes(uint64_t k, uint64_t chunks, kvt_hash_t *out)
{
    enum { TOKENS = 16 };
    uint32_t *tok = malloc(chunks * TOKENS * sizeof *tok);

    if (tok == NULL)
        abort();
    for (uint64_t i = 0; i < chunks * TOKENS; i++)
        tok[i] = (uint32_t)(k * 0x9e3779b1u + i);
    kvt_hash_chain(tok, chunks * TOKENS, TOKENS, NULL, out, chunks);
    free(tok);
}

/* The prompt of iteration it: a fixed pseudo-random sequence over the pool. */
static uint64_t prompt_of(uint64_t it, uint64_t pool)
{
    uint64_t z = it * 0x9e3779b97f4a7c15ull + 1;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % pool;
}

/* --- a rank --- */

static void rank_error(soak_rank_t *r, const char *what, int rc)
{
    if (rc == KVT_EBUSY) {
        r->n.busy++;
        return;
    }
    r->n.errors++;
    snprintf(r->last_error, sizeof r->last_error, "%s: %s (%s)", what, kvt_strerror(rc),
             kvt_last_error(r->c));
}

static void *rank_main(void *arg)
{
    soak_rank_t *r = arg;
    const soak_opts_t *o = &r->sk->o;
    size_t n = o->chunks, len = o->chunk_bytes;
    kvt_hash_t *hs = calloc(n, sizeof *hs);
    void **bufs = calloc(n, sizeof *bufs);
    size_t *caps = calloc(n, sizeof *caps), *lens = calloc(n, sizeof *lens);
    uint8_t *outcomes = calloc(n, 1), *expect = malloc(len);
    uint64_t paid = 0, probes = 0;

    if (hs == NULL || bufs == NULL || caps == NULL || lens == NULL || outcomes == NULL ||
        expect == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        if ((bufs[i] = malloc(len)) == NULL)
            abort();
        caps[i] = len;
    }
    for (uint64_t it = 0; !atomic_load(&r->sk->stop); it++) {
        uint64_t k = prompt_of(it, o->prompts);
        kvt_lookup_opts_t lo = {.lease = 1, .all_ranks = r->rank == 0};
        uint32_t rank_hits[SOAK_MAX_RANKS];
        kvt_lookup_result_t res = {.rank_hits = rank_hits, .rank_hits_cap = SOAK_MAX_RANKS};
        size_t hit, nhit = 0;
        int rc;

        prompt_hashes(k, n, hs);
        rc = kvt_lookup(r->c, hs, n, &lo, &res);
        r->n.lookups++;
        if (rc != 0) {
            rank_error(r, "lookup", rc);
            continue;
        }
        r->n.leased += res.leased != 0;
        r->n.capped += res.hit > 0 && !res.leased;
        /* rank 0 asked for every rank: its own prefix is rank_hits[0] */
        hit = r->rank == 0 && res.nranks > 0 ? rank_hits[0] : res.hit;
        if (hit > 0) {
            rc = kvt_load(r->c, hs, hit, bufs, caps, lens, &nhit);
            r->n.loads++;
            if (rc != 0) {
                rank_error(r, "load", rc);
                nhit = 0;
            }
            for (size_t i = 0; i < nhit; i++) {
                chunk_fill(expect, len, &hs[i], r->rank);
                if (lens[i] != len || memcmp(bufs[i], expect, len) != 0)
                    r->n.mismatch++;
            }
            r->n.loaded += nhit;
        }
        if (nhit < n) {
            kvt_save_opts_t so = {
                .parent = nhit > 0 ? &hs[nhit - 1] : NULL, .has_op_id = 1, .op_id = it};
            for (size_t i = nhit; i < n; i++)
                chunk_fill(bufs[i], len, &hs[i], r->rank);
            rc = kvt_save(r->c, &hs[nhit], n - nhit, (const void *const *)&bufs[nhit], caps, &so,
                          outcomes);
            r->n.saves++;
            if (rc != 0) {
                rank_error(r, "save", rc);
            } else {
                for (size_t i = 0; i < n - nhit; i++) {
                    r->n.stored += outcomes[i] == KVT_SAVE_STORED;
                    r->n.nospace += outcomes[i] == KVT_SAVE_NOSPACE;
                }
            }
        }
        probes++;
        paid += nhit > 0;
        if (r->rank == 0 && it % SOAK_TALLY_EVERY == SOAK_TALLY_EVERY - 1) {
            rc = kvt_tally(r->c, 1, paid, probes, NULL, 0, NULL);
            r->n.tallies++;
            if (rc != 0)
                rank_error(r, "tally", rc);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(hs);
    free(caps);
    free(lens);
    free(outcomes);
    free(expect);
    return NULL;
}

/* --- sampling --- */

static int64_t rss_anon(int pid)
{
    char path[64], line[256];
    long long kb = -1;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int64_t open_fds(int pid)
{
    char path[64];
    struct dirent *de;
    int64_t n = 0;
    DIR *d;

    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    if ((d = opendir(path)) == NULL)
        return -1;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The median (rss) or the largest (fds) of samples [from, to). */
static uint64_t stat_of(const sample_t *v, size_t from, size_t to, int fds)
{
    uint64_t *x = malloc((to - from) * sizeof *x), r;

    if (x == NULL)
        abort();
    for (size_t i = from; i < to; i++)
        x[i - from] = fds ? v[i].fds : v[i].rss;
    qsort(x, to - from, sizeof *x, cmp_u64);
    r = fds ? x[to - from - 1] : x[(to - from) / 2];
    free(x);
    return r;
}

/* Least-squares slope of rss over time, bytes per second. */
static double slope(const sample_t *v, size_t from, size_t to)
{
    double n = (double)(to - from), st = 0, sr = 0, stt = 0, str = 0;

    for (size_t i = from; i < to; i++) {
        st += v[i].t_s;
        sr += (double)v[i].rss;
        stt += v[i].t_s * v[i].t_s;
        str += v[i].t_s * (double)v[i].rss;
    }
    return n * stt - st * st > 0 ? (n * str - st * sr) / (n * stt - st * st) : 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* --- the run --- */

static int parse_args(soak_opts_t *o, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t *dst = NULL, lo = 1, hi = UINT32_MAX;
        int rc;

        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (strcmp(a, "-e") == 0 || strcmp(a, "-s") == 0) {
            if (v == NULL)
                return tool_usage_error("%s needs a value", a);
            *(a[1] == 'e' ? &o->endpoint : &o->status) = v;
            i++;
            continue;
        }
        if (strcmp(a, "--duration") == 0)
            dst = &o->duration_s, hi = 7 * 86400;
        else if (strcmp(a, "--ranks") == 0)
            dst = &o->ranks, hi = SOAK_MAX_RANKS;
        else if (strcmp(a, "--prompts") == 0)
            dst = &o->prompts;
        else if (strcmp(a, "--chunks") == 0)
            dst = &o->chunks, hi = 4096;
        else if (strcmp(a, "--chunk-bytes") == 0)
            dst = &o->chunk_bytes, lo = 16, hi = 64u << 20;
        else if (strcmp(a, "--sample-ms") == 0)
            dst = &o->sample_ms, lo = 10, hi = 60000;
        else if (strcmp(a, "--warmup") == 0)
            dst = &o->warmup_s, lo = 0;
        else if (strcmp(a, "--tolerance") == 0)
            dst = &o->tolerance_pct, lo = 0, hi = 1000;
        else if (strcmp(a, "--slack-mib") == 0)
            dst = &o->slack_mib, lo = 0, hi = 1u << 20;
        else if (strcmp(a, "--fd-slack") == 0)
            dst = &o->fd_slack, lo = 0, hi = 1u << 20;
        else
            return tool_usage_error("unknown option '%s'", a);
        if ((rc = tool_opt_u64(a, v, lo, hi, dst)) != 0)
            return rc;
        i++;
    }
    if (o->endpoint == NULL || o->status == NULL)
        return tool_usage_error("give -e ENDPOINT and -s STATUS_SOCKET");
    if (o->warmup_s >= o->duration_s)
        return tool_usage_error("--warmup must be shorter than --duration");
    return 0;
}

static void sum_counts(const soak_t *sk, soak_counts_t *t, const char **last_error)
{
    *t = (soak_counts_t){0};
    *last_error = "";
    for (uint64_t i = 0; i < sk->o.ranks; i++) {
        const soak_counts_t *n = &sk->ranks[i].n;
        t->lookups += n->lookups, t->leased += n->leased, t->capped += n->capped;
        t->loads += n->loads, t->loaded += n->loaded, t->saves += n->saves;
        t->stored += n->stored, t->nospace += n->nospace, t->tallies += n->tallies;
        t->busy += n->busy, t->errors += n->errors, t->mismatch += n->mismatch;
        if (sk->ranks[i].last_error[0] != '\0')
            *last_error = sk->ranks[i].last_error;
    }
}

int main(int argc, char **argv)
{
    static soak_t sk = {.o = {.duration_s = 60,
                              .ranks = 4,
                              .prompts = 256,
                              .chunks = 8,
                              .chunk_bytes = 64 * 1024,
                              .sample_ms = 250,
                              .warmup_s = 10,
                              .tolerance_pct = 5,
                              .slack_mib = 8}};
    soak_opts_t *o = &sk.o;
    pthread_t th[SOAK_MAX_RANKS];
    sample_t *samples;
    size_t ns = 0, first = 0;
    soak_counts_t t;
    const char *last_error;
    json_t *st = NULL;
    double t0, rss_slope = 0;
    uint64_t rss_a = 0, rss_b = 0, fds_a = 0, fds_b = 0, rss_max = 0;
    int pid, rc, trend_rss = 0, trend_fds = 0, started = 0;

    tool_init("kvtier-soak", usage_text);
    if ((rc = parse_args(o, argc, argv)) != 0)
        return rc;
    if (tool_status_get(o->status, 5000, &st, NULL) != 0)
        return EXIT_FAIL;
    pid = (int)json_integer_value(json_object_get(st, "pid"));
    json_decref(st);
    if (pid <= 0 || rss_anon(pid) < 0) {
        tool_error("cannot read /proc/%d/status (the daemon must run on this host)", pid);
        return EXIT_FAIL;
    }
    samples = calloc(SOAK_MAX_SAMPLES, sizeof *samples);
    if (samples == NULL)
        return EXIT_FAIL;
    for (uint64_t i = 0; i < o->ranks; i++) {
        kvt_ns_desc_t desc = {.model = "soak",
                              .dtype = "bf16",
                              .chunk_tokens = 16,
                              .num_layers = 1,
                              .world_size = (uint32_t)o->ranks};
        kvt_connect_opts_t co = {.timeout_ms = 10000};
        soak_rank_t *r = &sk.ranks[i];

        r->sk = &sk;
        r->rank = (uint32_t)i;
        rc = kvt_connect(o->endpoint, &desc, r->rank, &co, &r->c);
        if (rc != 0) {
            tool_kvt_error("connect", o->endpoint, NULL, rc);
            rc = EXIT_FAIL;
            goto out;
        }
    }
    for (uint64_t i = 0; i < o->ranks; i++, started++)
        if (pthread_create(&th[i], NULL, rank_main, &sk.ranks[i]) != 0) {
            tool_error("pthread_create failed");
            atomic_store(&sk.stop, 1);
            rc = EXIT_FAIL;
            break;
        }
    t0 = now_s();
    while (started == (int)o->ranks && ns < SOAK_MAX_SAMPLES) {
        double at = now_s() - t0;
        int64_t rss = rss_anon(pid), fds = open_fds(pid);
        if (rss < 0 || fds < 0) {
            tool_error("the daemon (pid %d) went away", pid);
            rc = EXIT_FAIL;
            break;
        }
        samples[ns++] = (sample_t){.t_s = at, .rss = (uint64_t)rss, .fds = (uint64_t)fds};
        if ((uint64_t)rss > rss_max)
            rss_max = (uint64_t)rss;
        if (first == 0 && at >= (double)o->warmup_s)
            first = ns - 1;
        if (at >= (double)o->duration_s)
            break;
        sleep_ms(o->sample_ms);
    }
    atomic_store(&sk.stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (rc == EXIT_FAIL)
        goto out;
    sum_counts(&sk, &t, &last_error);
    if (ns - first >= 6) {
        size_t third = (ns - first) / 3;
        rss_a = stat_of(samples, first, first + third, 0);
        rss_b = stat_of(samples, ns - third, ns, 0);
        fds_a = stat_of(samples, first, first + third, 1);
        fds_b = stat_of(samples, ns - third, ns, 1);
        rss_slope = slope(samples, first, ns);
        trend_rss = (double)rss_b > (double)rss_a * (1.0 + (double)o->tolerance_pct / 100.0) +
                                        (double)(o->slack_mib << 20);
        trend_fds = fds_b > fds_a + o->fd_slack;
    } else {
        tool_error("too few samples after the warmup (%zu): lengthen --duration", ns - first);
        rc = EXIT_FAIL;
        goto out;
    }
    rc = trend_rss || trend_fds || t.mismatch > 0 || t.errors > 0 ? EXIT_TREND : 0;
    if (o->json) {
        json_t *j = json_pack(
            "{s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
            "s:{s:I, s:I, s:I, s:f, s:b}, s:{s:I, s:I, s:b}, s:s, s:b}",
            "duration_s", (json_int_t)o->duration_s, "samples", (json_int_t)ns, "ops", "lookups",
            (json_int_t)t.lookups, "leased", (json_int_t)t.leased, "lease_capped",
            (json_int_t)t.capped, "loads", (json_int_t)t.loads, "chunks_loaded",
            (json_int_t)t.loaded, "saves", (json_int_t)t.saves, "chunks_stored",
            (json_int_t)t.stored, "nospace", (json_int_t)t.nospace, "tallies",
            (json_int_t)t.tallies, "busy", (json_int_t)t.busy, "errors", (json_int_t)t.errors,
            "mismatches", (json_int_t)t.mismatch, "rss", "first_third_median_bytes",
            (json_int_t)rss_a, "last_third_median_bytes", (json_int_t)rss_b, "max_bytes",
            (json_int_t)rss_max, "slope_bytes_per_s", rss_slope, "trend", trend_rss, "fds",
            "first_third_max", (json_int_t)fds_a, "last_third_max", (json_int_t)fds_b, "trend",
            trend_fds, "last_error", last_error, "ok", rc == 0);
        char *text = j != NULL ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text != NULL)
            puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("soak %" PRIu64 " s, %" PRIu64 " ranks, %zu samples (%" PRIu64 " s warmup)\n",
               o->duration_s, o->ranks, ns, o->warmup_s);
        printf("ops: %" PRIu64 " lookups (%" PRIu64 " leased, %" PRIu64 " lease-capped), %" PRIu64
               " loads (%" PRIu64 " chunks), %" PRIu64 " saves (%" PRIu64 " stored, %" PRIu64
               " nospace), %" PRIu64 " tallies, %" PRIu64 " busy, %" PRIu64 " errors, %" PRIu64
               " wrong chunks\n",
               t.lookups, t.leased, t.capped, t.loads, t.loaded, t.saves, t.stored, t.nospace,
               t.tallies, t.busy, t.errors, t.mismatch);
        printf("rss: median %.1f MiB (first third) -> %.1f MiB (last third), max %.1f MiB, "
               "slope %.1f KiB/s%s\n",
               (double)rss_a / 1048576.0, (double)rss_b / 1048576.0, (double)rss_max / 1048576.0,
               rss_slope / 1024.0, trend_rss ? "  TREND" : "");
        printf("fds: max %" PRIu64 " (first third) -> %" PRIu64 " (last third)%s\n", fds_a, fds_b,
               trend_fds ? "  TREND" : "");
        if (last_error[0] != '\0')
            printf("last error: %s\n", last_error);
        printf("%s\n", rc == 0 ? "ok" : "FAIL");
    }
out:
    for (uint64_t i = 0; i < o->ranks; i++)
        kvt_close(&sk.ranks[i].c);
    free(samples);
    return rc;
}
