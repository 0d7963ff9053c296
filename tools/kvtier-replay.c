/*
 * kvtier-replay.c - a simulated engine that replays a Mooncake-format trace (JSON lines
 * {timestamp, input_length, output_length, hash_ids}) against a running kvtierd.
 *
 *   kvtier-replay [-c CONFIG | -e ENDPOINT -s STATUS_SOCKET] --trace FILE [--requests N]
 *                 [--hbm-blocks N] [--chunk-bytes N] [--min-load-tokens N] [--engine-id ID]
 *                 [--ns NAME] [--salt N] [--timeout MS] [--policy off|atom|value] [--json]
 *
 * Design. The trace's hash_ids are 512-token blocks, already prefix-chained; the namespace has
 * chunk_tokens 512, so one block is one chunk, named by a 16-byte hash: the id little-endian in
 * bytes 0..7, the run salt in bytes 8..15. Only whole blocks (input_length / 512) are looked
 * up, saved, loaded and cached, as an engine hashes only whole chunks. Requests run in trace
 * order (timestamps are ignored), one at a time, on one client (world size 1, rank 0):
 *   1. hbm = the leading blocks of the request present in the simulated HBM prefix cache (an
 *      LRU of --hbm-blocks block ids), in tokens;
 *   2. lookup of the whole blocks with prompt_tokens = input_length, hbm_tokens = hbm. A lookup
 *      the daemon skipped was already counted as a verdict by the daemon, and a miss (hit 0) is
 *      no verdict; otherwise lmc and the verdict follow docs/GATES.md section 1;
 *   3. a paid verdict loads the blocks [hbm, lmc) and checks every byte against the pattern
 *      derived from the block id;
 *   4. one save operation (op id = the request's index in the trace, parent = the previous
 *      block's hash) of the blocks from max(hbm, hit) to the last whole block;
 *   5. the request's blocks enter the HBM LRU, last block first, so that a prefix is evicted
 *      after its extensions;
 *   6. every 8 requests (and once at the end) the cumulative totals, per-reason counts and token
 *      totals (tokens loaded on paid verdicts; prompt tokens of the requests with a verdict) go
 *      to the daemon with kvt_tally2.
 * The daemon's status (GET /status on the status socket, tool.h) is read before and after the
 * replay: bytes moved into the tier are the deltas of server.bytes_received and bytes_committed.
 * The report's token figures are the engine's: written = blocks stored x 512, served = tokens
 * loaded, net = served - c x written at c = 0.02, 0.05, 0.1 and at the namespace's configured
 * gates.admission.cost_ratio. The policy is the daemon's, per namespace (gates.admission.enabled
 * and .policy in its configuration): --policy names the one the run means to test, and the
 * replay refuses to start (exit 3) when the namespace runs another one ("off": admission
 * disabled); the report says which one ran.
 *
 * A request of more whole blocks than the daemon takes in one call (its max_chunks_per_request,
 * from kvt_server_info) is replayed as its first max_chunks blocks, with that many blocks' tokens
 * as its prompt, as an engine whose context ends there would ask (0.2.10; it used to end the
 * replay with an error): report requests_truncated and blocks_truncated count them, and a line
 * on stderr says so once.
 *
 * Threads: single-threaded. Exit: 0 ok, 1 a load returned wrong bytes, 2 usage, 3 error.
 *
 * Invariants: verdicts = answered lookups with hit > 0 (of whole-block requests); every chunk
 * loaded is compared byte for byte.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "kvtier.h"
#include "tool.h"

#define RP_BLOCK_TOKENS 512u
#define RP_TALLY_EVERY 8
#define RP_DEFAULT_SALT UINT64_C(0x7265706c61790001)

enum { EXIT_VERIFY = 1, EXIT_USAGE = TOOL_EXIT_USAGE, EXIT_FAIL = 3 };

enum { V_HBM, V_UNALIGNED, V_SMALL, V_PAID, V_COUNT };
static const char *const verdict_names[V_COUNT] = {
    "hbm_satisfies_after_alloc", "unaligned_hbm_prefill", "too_small", "aligned_large_hit"};

typedef struct {
    const char *config;
    const char *endpoint;
    const char *status_socket;
    const char *trace;
    const char *ns;
    const char *policy;    /* NULL: any; else "off", "atom" or "value" */
    char *config_endpoint; /* owned: read from the config file */
    char *config_status;   /* owned */
    uint64_t requests;     /* 0: all */
    uint64_t hbm_blocks;
    uint64_t chunk_bytes;
    uint64_t min_load_tokens;
    uint64_t engine_id;
    uint64_t salt;
    uint32_t max_blocks; /* the daemon's chunks per call: longer requests are cut to it */
    int timeout_ms;
    int json;
} rp_opts_t;

typedef struct {
    uint64_t input_length;
    uint32_t nblocks; /* whole blocks */
    size_t first;     /* offset into rp_trace_t.blocks */
} rp_req_t;

typedef struct {
    rp_req_t *reqs;
    size_t nreqs;
    uint32_t *blocks; /* dense block index per whole block, requests back to back */
    size_t nblocks;
    uint64_t *ids; /* dense index -> trace hash id (sorted, distinct) */
    size_t nids;
    uint32_t max_blocks; /* most whole blocks of one request */
} rp_trace_t;

/* LRU over dense block indices: a doubly linked list in arrays, head = most recent. */
typedef struct {
    int32_t *prev, *next;
    uint8_t *in;
    int32_t head, tail;
    size_t count, cap;
} rp_lru_t;

typedef struct {
    uint64_t requests, no_whole_block;
    uint64_t lookups_answered, lookups_skipped, lookups_hit;
    uint64_t verdicts[V_COUNT], paid_total, probes_total;
    uint64_t prompt_tokens, hbm_tokens, tokens_loaded, blocks_loaded, loads_verified;
    uint64_t verdict_prompt_tokens; /* prompt tokens of the requests that got a verdict */
    uint64_t load_short, load_mismatch;
    uint64_t save_ops, save_ops_declined, blocks_stored, blocks_exists, blocks_declined;
    uint64_t blocks_nospace, tallies;
    uint64_t requests_truncated, blocks_truncated; /* over max_blocks: cut to it */
} rp_stats_t;

static const char usage_text[] =
    "usage: kvtier-replay [-c CONFIG | -e ENDPOINT -s STATUS_SOCKET] --trace FILE\n"
    "                     [--requests N] [--hbm-blocks N] [--chunk-bytes N]\n"
    "                     [--min-load-tokens N] [--engine-id ID] [--ns NAME] [--salt N]\n"
    "                     [--timeout MS] [--policy off|atom|value] [--json]\n"
    "Defaults: all requests, --hbm-blocks 2000, --chunk-bytes 65536, --min-load-tokens 8192,\n"
    "--engine-id 1, --ns replay, --timeout 10000, any policy. --policy: refuse to run unless\n"
    "the daemon's namespace runs it (off: admission disabled). Exit: 0 ok, 1 a load returned\n"
    "wrong bytes, 2 usage, 3 error.\n";

static int fail_kvt(const char *what, const kvt_client_t *c, int err)
{
    tool_kvt_error(what, NULL, c, err);
    return EXIT_FAIL;
}

static int parse_args(rp_opts_t *o, int argc, char **argv)
{
    uint64_t n;
    int rc;

    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            i -= 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (strcmp(a, "-c") == 0 || strcmp(a, "-e") == 0 || strcmp(a, "-s") == 0 ||
            strcmp(a, "--trace") == 0 || strcmp(a, "--ns") == 0 || strcmp(a, "--policy") == 0) {
            if (v == NULL || v[0] == '\0')
                return tool_usage_error("%s needs a value", a);
            if (strcmp(a, "-c") == 0)
                o->config = v;
            else if (strcmp(a, "-e") == 0)
                o->endpoint = v;
            else if (strcmp(a, "-s") == 0)
                o->status_socket = v;
            else if (strcmp(a, "--trace") == 0)
                o->trace = v;
            else if (strcmp(a, "--policy") == 0)
                o->policy = v;
            else
                o->ns = v;
            continue;
        }
        if (strcmp(a, "--requests") == 0)
            rc = tool_opt_u64(a, v, 1, UINT32_MAX, &o->requests);
        else if (strcmp(a, "--hbm-blocks") == 0)
            rc = tool_opt_u64(a, v, 0, UINT32_MAX / 2, &o->hbm_blocks);
        else if (strcmp(a, "--chunk-bytes") == 0)
            rc = tool_opt_u64(a, v, 8, 64u << 20, &o->chunk_bytes);
        else if (strcmp(a, "--min-load-tokens") == 0)
            rc = tool_opt_u64(a, v, 0, UINT32_MAX, &o->min_load_tokens);
        else if (strcmp(a, "--engine-id") == 0)
            rc = tool_opt_u64(a, v, 0, UINT64_MAX, &o->engine_id);
        else if (strcmp(a, "--salt") == 0)
            rc = tool_opt_u64(a, v, 0, UINT64_MAX, &o->salt);
        else if (strcmp(a, "--timeout") == 0) {
            rc = tool_opt_u64(a, v, 1, 3600 * 1000, &n);
            o->timeout_ms = (int)n;
        } else
            return tool_usage_error("unknown option '%s'", a);
        if (rc != 0)
            return rc;
    }
    if (o->trace == NULL)
        return tool_usage_error("--trace FILE is required");
    if (o->chunk_bytes % 8 != 0)
        return tool_usage_error("--chunk-bytes must be a multiple of 8");
    if (o->policy != NULL && strcmp(o->policy, "off") != 0 && strcmp(o->policy, "atom") != 0 &&
        strcmp(o->policy, "value") != 0)
        return tool_usage_error("--policy must be off, atom or value, got '%s'", o->policy);
    return 0;
}

/* Reads server.endpoint and server.status_socket from the daemon's config when not given. */
static int resolve_endpoints(rp_opts_t *o)
{
    if (o->endpoint != NULL && o->status_socket != NULL)
        return 0;
    if (o->config == NULL)
        return tool_usage_error("give -c CONFIG or both -e ENDPOINT and -s STATUS_SOCKET");
    if (tool_config_endpoints(o->config, &o->config_endpoint, &o->config_status) != 0)
        return EXIT_FAIL;
    if ((o->endpoint == NULL && o->config_endpoint == NULL) ||
        (o->status_socket == NULL && o->config_status == NULL)) {
        tool_error("config %s: server.endpoint and server.status_socket must be strings",
                   o->config);
        return EXIT_FAIL;
    }
    if (o->endpoint == NULL)
        o->endpoint = o->config_endpoint;
    if (o->status_socket == NULL)
        o->status_socket = o->config_status;
    return 0;
}

/* GET /status: the parsed document (owned), or NULL after a message. */
static json_t *status_get(const char *path, int timeout_ms)
{
    json_t *doc = NULL;

    return tool_status_get(path, timeout_ms, &doc, NULL) == 0 ? doc : NULL;
}

static uint64_t jint(const json_t *obj, const char *dotted)
{
    const json_t *v = tool_json_path(obj, dotted);

    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* The bytes moved into the tier so far: frames payload + shared-arena commits. */
static uint64_t status_bytes_in(const json_t *st, uint64_t *received, uint64_t *committed)
{
    *received = jint(st, "server.bytes_received");
    *committed = jint(st, "server.bytes_committed");
    return *received + *committed;
}

static json_t *status_ns_gates(const json_t *st, const char *ns)
{
    size_t i;
    json_t *e;

    json_array_foreach(json_object_get(st, "namespaces"), i, e)
    {
        const char *m = json_string_value(json_object_get(e, "model"));
        if (m != NULL && strcmp(m, ns) == 0)
            return json_object_get(e, "gates");
    }
    return NULL;
}

/* The admission policy a namespace's gates run: "off" while admission is disabled, else the
 * policy's name; "?" when status does not say. */
static const char *gates_policy(const json_t *gates)
{
    const json_t *adm = json_object_get(gates, "admission");
    const char *p = json_string_value(json_object_get(adm, "policy"));

    if (!json_is_boolean(json_object_get(adm, "enabled")) || p == NULL)
        return "?";
    return json_is_true(json_object_get(adm, "enabled")) ? p : "off";
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void trace_free(rp_trace_t *t)
{
    free(t->reqs);
    free(t->blocks);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* Grows *p (elements of size sz) to hold at least need elements. */
static int grow(void *p, size_t *cap, size_t need, size_t sz)
{
    size_t ncap = *cap ? *cap : 1024;
    void *np;

    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    np = realloc(*(void **)p, ncap * sz);
    if (np == NULL)
        return -1;
    *(void **)p = np;
    *cap = ncap;
    return 0;
}

/*
 * Loads the first max requests (0: all) of the trace at path. Block ids are replaced by dense
 * indices into t->ids. Returns 0 or EXIT_FAIL after a message.
 */
static int trace_load(const char *path, uint64_t max, rp_trace_t *t)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t linecap = 0, reqcap = 0, blkcap = 0, lineno = 0;
    uint64_t *raw = NULL;
    ssize_t len;
    int rc = EXIT_FAIL;

    memset(t, 0, sizeof *t);
    if (f == NULL) {
        tool_error("trace %s: %s", path, strerror(errno));
        return EXIT_FAIL;
    }
    while ((max == 0 || t->nreqs < max) && (len = getline(&line, &linecap, f)) >= 0) {
        json_error_t jerr;
        json_t *o, *ids, *il;
        size_t nwhole;
        lineno++;
        if (len <= 1)
            continue;
        o = json_loads(line, 0, &jerr);
        ids = json_object_get(o, "hash_ids");
        il = json_object_get(o, "input_length");
        if (o == NULL || !json_is_array(ids) || !json_is_integer(il) ||
            json_integer_value(il) < 0) {
            tool_error("trace %s:%zu: not a trace record", path, lineno);
            json_decref(o);
            goto out;
        }
        nwhole = (size_t)json_integer_value(il) / RP_BLOCK_TOKENS;
        if (nwhole > json_array_size(ids) || nwhole > UINT32_MAX ||
            grow(&t->reqs, &reqcap, t->nreqs + 1, sizeof *t->reqs) != 0 ||
            grow(&raw, &blkcap, t->nblocks + nwhole, sizeof *raw) != 0) {
            tool_error("trace %s:%zu: %s", path, lineno,
                       nwhole > json_array_size(ids) ? "fewer hash_ids than whole blocks"
                                                     : "out of memory");
            json_decref(o);
            goto out;
        }
        t->reqs[t->nreqs] = (rp_req_t){.input_length = (uint64_t)json_integer_value(il),
                                       .nblocks = (uint32_t)nwhole,
                                       .first = t->nblocks};
        for (size_t i = 0; i < nwhole; i++) {
            json_t *id = json_array_get(ids, i);
            if (!json_is_integer(id) || json_integer_value(id) < 0) {
                tool_error("trace %s:%zu: bad hash id", path, lineno);
                json_decref(o);
                goto out;
            }
            raw[t->nblocks + i] = (uint64_t)json_integer_value(id);
        }
        t->nblocks += nwhole;
        if (nwhole > t->max_blocks)
            t->max_blocks = (uint32_t)nwhole;
        t->nreqs++;
        json_decref(o);
    }
    if (ferror(f)) {
        tool_error("trace %s: read error", path);
        goto out;
    }
    if (t->nreqs == 0) {
        tool_error("trace %s: no requests", path);
        goto out;
    }
    t->ids = malloc((t->nblocks ? t->nblocks : 1) * sizeof *t->ids);
    t->blocks = malloc((t->nblocks ? t->nblocks : 1) * sizeof *t->blocks);
    if (t->ids == NULL || t->blocks == NULL) {
        tool_error("out of memory");
        goto out;
    }
    if (t->nblocks > 0)
        memcpy(t->ids, raw, t->nblocks * sizeof *raw);
    qsort(t->ids, t->nblocks, sizeof *t->ids, cmp_u64);
    for (size_t i = 0; i < t->nblocks; i++)
        if (i == 0 || t->ids[i] != t->ids[t->nids - 1])
            t->ids[t->nids++] = t->ids[i];
    for (size_t i = 0; i < t->nblocks; i++) {
        const uint64_t *p = bsearch(&raw[i], t->ids, t->nids, sizeof *t->ids, cmp_u64);
        t->blocks[i] = (uint32_t)(p - t->ids);
    }
    rc = 0;
out:
    free(raw);
    free(line);
    fclose(f);
    if (rc != 0)
        trace_free(t);
    return rc;
}

static int lru_init(rp_lru_t *l, size_t n, size_t cap)
{
    l->prev = malloc((n ? n : 1) * sizeof *l->prev);
    l->next = malloc((n ? n : 1) * sizeof *l->next);
    l->in = calloc(n ? n : 1, 1);
    l->head = l->tail = -1;
    l->count = 0;
    l->cap = cap;
    return l->prev != NULL && l->next != NULL && l->in != NULL ? 0 : -1;
}

static void lru_free(rp_lru_t *l)
{
    free(l->prev);
    free(l->next);
    free(l->in);
}

static void lru_unlink(rp_lru_t *l, int32_t i)
{
    if (l->prev[i] >= 0)
        l->next[l->prev[i]] = l->next[i];
    else
        l->head = l->next[i];
    if (l->next[i] >= 0)
        l->prev[l->next[i]] = l->prev[i];
    else
        l->tail = l->prev[i];
    l->in[i] = 0;
    l->count--;
}

/* Makes block i the most recent, evicting the least recent when full. */
static void lru_touch(rp_lru_t *l, int32_t i)
{
    if (l->cap == 0)
        return;
    if (l->in[i])
        lru_unlink(l, i);
    else if (l->count == l->cap)
        lru_unlink(l, l->tail);
    l->prev[i] = -1;
    l->next[i] = l->head;
    if (l->head >= 0)
        l->prev[l->head] = i;
    l->head = i;
    if (l->tail < 0)
        l->tail = i;
    l->in[i] = 1;
    l->count++;
}

static void block_hash(uint64_t id, uint64_t salt, kvt_hash_t *h)
{
    for (int k = 0; k < 8; k++) {
        h->b[k] = (uint8_t)(id >> (8 * k));
        h->b[8 + k] = (uint8_t)(salt >> (8 * k));
    }
}

/* The bytes of block id: a splitmix64 stream seeded by (id, salt). len is a multiple of 8. */
static void block_fill(uint64_t id, uint64_t salt, void *buf, size_t len)
{
    uint64_t x = id * UINT64_C(0x9e3779b97f4a7c15) ^ salt;
    uint8_t *p = buf;

    for (size_t off = 0; off < len; off += 8) {
        uint64_t z = (x += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        z ^= z >> 31;
        memcpy(p + off, &z, 8);
    }
}

static int push_tally(kvt_client_t *c, const rp_opts_t *o, rp_stats_t *s)
{
    kvt_reason_t reasons[V_COUNT];
    int rc;

    for (int v = 0; v < V_COUNT; v++)
        reasons[v] = (kvt_reason_t){.name = verdict_names[v], .count = s->verdicts[v]};
    rc = kvt_tally2(c, o->engine_id, s->paid_total, s->probes_total,
                    &(kvt_tally_tokens_t){.served_tokens_total = s->tokens_loaded,
                                          .lookup_tokens_total = s->verdict_prompt_tokens},
                    reasons, V_COUNT, NULL);
    if (rc != 0)
        return fail_kvt("tally", c, rc);
    s->tallies++;
    return 0;
}

typedef struct {
    kvt_hash_t *hashes;
    void **bufs;  /* max_blocks chunk buffers (save data, then load targets) */
    size_t *lens; /* chunk_bytes each */
    size_t *got;  /* load: stored sizes */
    uint8_t *outcomes;
    void *expect; /* one chunk: the pattern a loaded block must match */
} rp_bufs_t;

/* Loads blocks [from, to) of request r and verifies them. */
static int replay_load(kvt_client_t *c, const rp_opts_t *o, const rp_trace_t *t, const rp_req_t *r,
                       rp_bufs_t *b, uint32_t from, uint32_t to, rp_stats_t *s)
{
    size_t n = to - from, nhit = 0;
    int rc;

    rc = kvt_load(c, b->hashes + from, n, b->bufs, b->lens, b->got, &nhit);
    if (rc != 0)
        return fail_kvt("load", c, rc);
    if (nhit < n)
        s->load_short++;
    for (size_t i = 0; i < nhit; i++) {
        uint64_t id = t->ids[t->blocks[r->first + from + i]];
        block_fill(id, o->salt, b->expect, o->chunk_bytes);
        if (b->got[i] != o->chunk_bytes || memcmp(b->bufs[i], b->expect, o->chunk_bytes) != 0) {
            tool_error("block %" PRIu64 " loaded with wrong bytes", id);
            s->load_mismatch++;
            continue;
        }
        s->loads_verified++;
    }
    s->blocks_loaded += nhit;
    s->tokens_loaded += nhit * RP_BLOCK_TOKENS;
    return 0;
}

/* Replays request index ri: lookup, verdict, load, save, HBM insert. */
static int replay_one(kvt_client_t *c, const rp_opts_t *o, const rp_trace_t *t, rp_lru_t *lru,
                      rp_bufs_t *b, size_t ri, rp_stats_t *s)
{
    const rp_req_t *r = &t->reqs[ri];
    const uint32_t *blk = t->blocks + r->first;
    uint32_t n = r->nblocks, hbm_blocks = 0, hit = 0, from;
    uint64_t input_length = r->input_length;
    kvt_lookup_result_t res = {0};
    kvt_lookup_opts_t lopts = {.has_prompt = 1};
    int rc;

    if (o->max_blocks > 0 && n > o->max_blocks) { /* what the daemon takes in one call */
        s->requests_truncated++;
        s->blocks_truncated += n - o->max_blocks;
        n = o->max_blocks;
        input_length = (uint64_t)n * RP_BLOCK_TOKENS;
    }
    lopts.prompt_tokens = input_length;
    s->requests++;
    s->prompt_tokens += input_length;
    if (n == 0) {
        s->no_whole_block++;
        return 0;
    }
    while (hbm_blocks < n && lru->in[blk[hbm_blocks]])
        hbm_blocks++;
    s->hbm_tokens += (uint64_t)hbm_blocks * RP_BLOCK_TOKENS;
    for (uint32_t i = 0; i < n; i++)
        block_hash(t->ids[blk[i]], o->salt, &b->hashes[i]);

    lopts.hbm_tokens = (uint64_t)hbm_blocks * RP_BLOCK_TOKENS;
    rc = kvt_lookup(c, b->hashes, n, &lopts, &res);
    if (rc != 0)
        return fail_kvt("lookup", c, rc);
    if (res.skipped) {
        s->lookups_skipped++;
    } else {
        s->lookups_answered++;
        hit = res.hit;
    }
    if (hit > 0) {
        uint64_t hbm = lopts.hbm_tokens, lmc = (uint64_t)hit * RP_BLOCK_TOKENS;
        int v;
        s->lookups_hit++;
        if (lmc >= input_length)
            lmc = input_length - 1;
        lmc -= lmc % RP_BLOCK_TOKENS;
        if (lmc <= hbm)
            v = V_HBM;
        else if (hbm % RP_BLOCK_TOKENS != 0)
            v = V_UNALIGNED;
        else if (lmc - hbm < o->min_load_tokens)
            v = V_SMALL;
        else
            v = V_PAID;
        s->verdicts[v]++;
        s->probes_total++;
        s->verdict_prompt_tokens += input_length;
        if (v == V_PAID) {
            s->paid_total++;
            rc = replay_load(c, o, t, r, b, hbm_blocks, (uint32_t)(lmc / RP_BLOCK_TOKENS), s);
            if (rc != 0)
                return rc;
        }
    }

    from = hbm_blocks > hit ? hbm_blocks : hit;
    if (from < n) {
        kvt_save_opts_t sopts = {
            .parent = from > 0 ? &b->hashes[from - 1] : NULL, .has_op_id = 1, .op_id = ri};
        uint64_t declined = 0;
        for (uint32_t i = from; i < n; i++)
            block_fill(t->ids[blk[i]], o->salt, b->bufs[i - from], o->chunk_bytes);
        rc = kvt_save(c, b->hashes + from, n - from, (const void *const *)b->bufs, b->lens, &sopts,
                      b->outcomes);
        if (rc != 0)
            return fail_kvt("save", c, rc);
        s->save_ops++;
        for (uint32_t i = 0; i < n - from; i++) {
            switch (b->outcomes[i]) {
            case KVT_SAVE_STORED:
                s->blocks_stored++;
                break;
            case KVT_SAVE_EXISTS:
                s->blocks_exists++;
                break;
            case KVT_SAVE_DECLINED:
                s->blocks_declined++;
                declined++;
                break;
            default:
                s->blocks_nospace++;
                break;
            }
        }
        if (declined > 0)
            s->save_ops_declined++;
    }
    for (uint32_t i = n; i-- > 0;)
        lru_touch(lru, (int32_t)blk[i]);
    return 0;
}

/* net = served - c x written, in tokens. */
static double net_at(double c, const rp_stats_t *s)
{
    return (double)s->tokens_loaded - c * (double)(s->blocks_stored * RP_BLOCK_TOKENS);
}

static json_t *report_json(const rp_opts_t *o, const rp_stats_t *s, uint64_t d_received,
                           uint64_t d_committed, const json_t *gates, double seconds)
{
    json_t *adm = json_object_get(gates, "admission");
    json_t *skip = json_object_get(gates, "lookup_skip");
    json_t *verdicts = json_object();
    json_t *rep, *more;
    const json_t *cr = json_object_get(adm, "cost_ratio");

    for (int v = 0; v < V_COUNT; v++)
        json_object_set_new(verdicts, verdict_names[v], json_integer((json_int_t)s->verdicts[v]));
    rep = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
        " s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f,"
        " s:{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}, s:{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}}",
        "requests", (json_int_t)s->requests, "requests_without_whole_block",
        (json_int_t)s->no_whole_block, "hbm_blocks", (json_int_t)o->hbm_blocks, "chunk_bytes",
        (json_int_t)o->chunk_bytes, "lookups_answered", (json_int_t)s->lookups_answered,
        "lookups_skipped", (json_int_t)s->lookups_skipped, "lookups_hit",
        (json_int_t)s->lookups_hit, "verdicts", verdicts, "probes_total",
        (json_int_t)s->probes_total, "paid_total", (json_int_t)s->paid_total, "prompt_tokens",
        (json_int_t)s->prompt_tokens, "hbm_tokens", (json_int_t)s->hbm_tokens, "tokens_loaded",
        (json_int_t)s->tokens_loaded, "blocks_loaded", (json_int_t)s->blocks_loaded,
        "loads_verified", (json_int_t)s->loads_verified, "load_short", (json_int_t)s->load_short,
        "load_mismatch", (json_int_t)s->load_mismatch, "save_ops", (json_int_t)s->save_ops,
        "save_ops_declined", (json_int_t)s->save_ops_declined, "blocks_saved",
        (json_int_t)s->blocks_stored, "blocks_exists", (json_int_t)s->blocks_exists,
        "blocks_declined", (json_int_t)s->blocks_declined, "blocks_nospace",
        (json_int_t)s->blocks_nospace, "bytes_received", (json_int_t)d_received, "bytes_committed",
        (json_int_t)d_committed, "load_hit_rate",
        s->prompt_tokens ? (double)s->tokens_loaded / (double)s->prompt_tokens : 0.0,
        "hbm_hit_rate", s->prompt_tokens ? (double)s->hbm_tokens / (double)s->prompt_tokens : 0.0,
        "seconds", seconds, "admission", "enabled", json_object_get(adm, "enabled"), "payoff",
        json_object_get(adm, "payoff"), "probes", json_object_get(adm, "probes"), "saved",
        json_object_get(adm, "saved"), "skipped", json_object_get(adm, "skipped"), "would_decline",
        json_object_get(adm, "would_decline"), "lookup_skip", "enabled",
        json_object_get(skip, "enabled"), "lookups", json_object_get(skip, "lookups"), "act_ema",
        json_object_get(skip, "act_ema"), "load_bearing", json_object_get(skip, "load_bearing"),
        "skips", json_object_get(skip, "skips"), "would_skip", json_object_get(skip, "would_skip"));
    if (rep == NULL)
        return NULL;
    /* Added by issue 12: the engine's token figures and the value evidence of the daemon; by
     * 0.2.10 the requests cut to the daemon's chunks per call. */
    more = json_pack(
        "{s:s, s:I, s:I, s:I, s:{s:f, s:f, s:f}, s:o, s:I, s:I}", "policy", gates_policy(gates),
        "written_tokens", (json_int_t)(s->blocks_stored * RP_BLOCK_TOKENS), "served_tokens",
        (json_int_t)s->tokens_loaded, "lookup_tokens", (json_int_t)s->verdict_prompt_tokens, "net",
        "0.02", net_at(0.02, s), "0.05", net_at(0.05, s), "0.1", net_at(0.1, s), "net_cost_ratio",
        json_is_number(cr) ? json_real(net_at(json_number_value(cr), s)) : json_null(),
        "requests_truncated", (json_int_t)s->requests_truncated, "blocks_truncated",
        (json_int_t)s->blocks_truncated);
    if (more == NULL || json_object_update(rep, more) != 0) {
        json_decref(more);
        json_decref(rep);
        return NULL;
    }
    json_decref(more);
    {
        /* report key <- status path under namespaces[].gates.admission (null when absent) */
        static const char *const keys[][2] = {
            {"policy", "policy"},
            {"cost_ratio", "cost_ratio"},
            {"share", "share"},
            {"density", "density"},
            {"served_tokens", "served_tokens"},
            {"regret_tokens", "regret_tokens"},
            {"written_tokens", "written_tokens"},
            {"declined_tokens", "declined_tokens"},
            {"net_tokens", "net_tokens"},
            {"ghost_entries", "ghost.entries"},
            {"atom_would_decline", "atom.would_decline"},
            {"value_would_decline", "value.would_decline"},
        };
        json_t *a = json_object_get(rep, "admission");
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            json_t *v = tool_json_path(adm, keys[i][1]);
            json_object_set_new(a, keys[i][0], v != NULL ? json_incref(v) : json_null());
        }
    }
    return rep;
}

static void print_value(const char *key, const char *sub, const json_t *v)
{
    char name[96];
    char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));

    snprintf(name, sizeof name, "%s%s%s", key, sub ? "." : "", sub ? sub : "");
    printf("%-36s %s\n", name, txt != NULL ? txt : "?");
    free(txt);
}

/* Prints the report as "key value" lines, a nested object's members as key.member. */
static void print_table(json_t *rep)
{
    const char *k, *k2;
    json_t *v, *v2;

    json_object_foreach(rep, k, v)
    {
        if (!json_is_object(v)) {
            print_value(k, NULL, v);
            continue;
        }
        json_object_foreach(v, k2, v2)
        {
            print_value(k, k2, v2);
        }
    }
}

int main(int argc, char **argv)
{
    rp_opts_t o = {.ns = "replay",
                   .hbm_blocks = 2000,
                   .chunk_bytes = 64 * 1024,
                   .min_load_tokens = 8192,
                   .engine_id = 1,
                   .salt = RP_DEFAULT_SALT,
                   .timeout_ms = 10000};
    rp_trace_t t;
    rp_lru_t lru = {0};
    rp_bufs_t b = {0};
    rp_stats_t s = {0};
    kvt_client_t *c = NULL;
    kvt_server_info_t info;
    json_t *st0 = NULL, *st1 = NULL, *rep = NULL;
    uint64_t r0, c0, r1, c1;
    struct timespec t0, t1;
    int rc;

    tool_init("kvtier-replay", usage_text);
    if ((rc = parse_args(&o, argc, argv)) != 0)
        return rc;
    if ((rc = resolve_endpoints(&o)) != 0)
        goto out_opts;
    if ((rc = trace_load(o.trace, o.requests, &t)) != 0)
        goto out_opts;
    rc = EXIT_FAIL;
    if (lru_init(&lru, t.nids, o.hbm_blocks) != 0)
        goto fail_nomem;
    b.hashes = calloc(t.max_blocks + 1, sizeof *b.hashes);
    b.bufs = calloc(t.max_blocks + 1, sizeof *b.bufs);
    b.lens = calloc(t.max_blocks + 1, sizeof *b.lens);
    b.got = calloc(t.max_blocks + 1, sizeof *b.got);
    b.outcomes = calloc(t.max_blocks + 1, 1);
    b.expect = malloc(o.chunk_bytes);
    if (b.hashes == NULL || b.bufs == NULL || b.lens == NULL || b.got == NULL ||
        b.outcomes == NULL || b.expect == NULL)
        goto fail_nomem;
    for (uint32_t i = 0; i < t.max_blocks; i++) {
        b.lens[i] = o.chunk_bytes;
        if ((b.bufs[i] = malloc(o.chunk_bytes)) == NULL)
            goto fail_nomem;
    }

    {
        kvt_ns_desc_t ns = {
            .model = o.ns, .dtype = "bf16", .chunk_tokens = RP_BLOCK_TOKENS, .world_size = 1};
        kvt_connect_opts_t copts = {.timeout_ms = o.timeout_ms};
        rc = kvt_connect(o.endpoint, &ns, 0, &copts, &c);
        if (rc != 0) {
            rc = fail_kvt("connect", NULL, rc);
            goto out;
        }
    }
    if (kvt_server_info(c, &info) == 0 && t.max_blocks > info.max_chunks) {
        o.max_blocks = info.max_chunks;
        fprintf(stderr,
                "kvtier-replay: requests of more than %" PRIu32 " blocks (the longest has %" PRIu32
                ") are replayed as their first %" PRIu32 ", the daemon's chunks per call\n",
                info.max_chunks, t.max_blocks, info.max_chunks);
    }
    if ((st0 = status_get(o.status_socket, o.timeout_ms)) == NULL) {
        rc = EXIT_FAIL;
        goto out;
    }
    if (o.policy != NULL && strcmp(gates_policy(status_ns_gates(st0, o.ns)), o.policy) != 0) {
        tool_error("--policy %s: namespace %s runs admission policy %s (the daemon's "
                   "gates.admission.enabled and .policy decide it)",
                   o.policy, o.ns, gates_policy(status_ns_gates(st0, o.ns)));
        rc = EXIT_FAIL;
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < t.nreqs; i++) {
        if ((rc = replay_one(c, &o, &t, &lru, &b, i, &s)) != 0)
            goto out;
        if ((i + 1) % RP_TALLY_EVERY == 0 && (rc = push_tally(c, &o, &s)) != 0)
            goto out;
    }
    if (t.nreqs % RP_TALLY_EVERY != 0 && (rc = push_tally(c, &o, &s)) != 0)
        goto out;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if ((st1 = status_get(o.status_socket, o.timeout_ms)) == NULL) {
        rc = EXIT_FAIL;
        goto out;
    }
    status_bytes_in(st0, &r0, &c0);
    status_bytes_in(st1, &r1, &c1);
    rep = report_json(&o, &s, r1 - r0, c1 - c0, status_ns_gates(st1, o.ns),
                      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (rep == NULL)
        goto fail_nomem;
    if (o.json) {
        json_dumpf(rep, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
        fputc('\n', stdout);
    } else {
        print_table(rep);
    }
    rc = s.load_mismatch > 0 ? EXIT_VERIFY : 0;
    goto out;
fail_nomem:
    tool_error("out of memory");
    rc = EXIT_FAIL;
out:
    json_decref(rep);
    json_decref(st1);
    json_decref(st0);
    kvt_close(&c);
    for (uint32_t i = 0; b.bufs != NULL && i < t.max_blocks; i++)
        free(b.bufs[i]);
    free(b.bufs);
    free(b.hashes);
    free(b.lens);
    free(b.got);
    free(b.outcomes);
    free(b.expect);
    lru_free(&lru);
    trace_free(&t);
out_opts:
    free(o.config_endpoint);
    free(o.config_status);
    return rc;
}
