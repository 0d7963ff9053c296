/*
 * test_status_keys.c - the shape of GET /status and GET /metrics, pinned by committed fixtures.
 *
 * Operators script against the status keys and scrape the metric families, so their set must
 * not change by accident (a refactoring of the status code, a renamed field). The test starts
 * the real daemon with the disk tier on, declares a namespace from a client, saves, loads and
 * looks up a few chunks, pushes a tally with a reason (so every conditional part of the
 * documents is present: a session, a consumer among the top sessions (a lease), a namespace with
 * its gates, a reason count), then compares
 *
 *   - the set of JSON key paths of /status with tests/data/status_keys.txt: every object member
 *     by its dotted path, recursively; members of array elements as the union over the
 *     elements, written with "[]" (`server.sessions[].id`);
 *   - the set of metric lines of /metrics, reduced to the metric name and its sorted label
 *     names (`kvtier_op_latency_us{op,quantile}`), with tests/data/metrics_names.txt.
 *
 * A key that disappears or appears fails the test, with the difference in the message. When a
 * change of the documents is intended, regenerate the fixtures with
 * `KVT_WRITE_FIXTURES=1 ./test_status_keys` and commit them with the change.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "harness.h"

#define CH (16u * 1024u)
#define NCHUNKS 4u
#define LINE_MAX_LEN 512

typedef struct {
    char **v;
    size_t n, cap;
} strset_t;

static void set_add(strset_t *s, const char *str)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], str) == 0)
            return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        ck_assert_ptr_nonnull(s->v);
    }
    s->v[s->n] = strdup(str);
    ck_assert_ptr_nonnull(s->v[s->n]);
    s->n++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void set_sort(strset_t *s)
{
    qsort(s->v, s->n, sizeof *s->v, cmp_str);
}

static void set_free(strset_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    *s = (strset_t){0};
}

static int set_has(const strset_t *s, const char *str)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], str) == 0)
            return 1;
    return 0;
}

/* The key paths of v below prefix ("" at the root). */
static void key_paths(json_t *v, const char *prefix, strset_t *out)
{
    char path[LINE_MAX_LEN];
    const char *key;
    json_t *m;
    size_t i;

    if (json_is_object(v)) {
        json_object_foreach(v, key, m)
        {
            snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key);
            set_add(out, path);
            key_paths(m, path, out);
        }
    } else if (json_is_array(v)) {
        snprintf(path, sizeof path, "%s[]", prefix);
        json_array_foreach(v, i, m) key_paths(m, path, out);
    }
}

/* "name{a=\"x\",b=\"y\"} 1" -> "name{a,b}" (labels sorted); "name 1" -> "name". */
static void metric_shape(const char *line, char *out, size_t cap)
{
    char labels[16][64];
    size_t nl = 0, n = strcspn(line, "{ ");
    const char *p = line + n;
    size_t k;

    ck_assert_uint_lt(n, cap);
    memcpy(out, line, n);
    out[n] = '\0';
    if (*p != '{')
        return;
    p++;
    while (*p != '}' && *p != '\0') {
        size_t ln = strcspn(p, "=");
        ck_assert_uint_lt(nl, 16);
        ck_assert_uint_lt(ln, sizeof labels[0]);
        memcpy(labels[nl], p, ln);
        labels[nl][ln] = '\0';
        nl++;
        p += ln;
        ck_assert_msg(p[0] == '=' && p[1] == '"', "metric line without a quoted label: %s", line);
        for (p += 2; *p != '"' && *p != '\0'; p++)
            if (*p == '\\' && p[1] != '\0')
                p++;
        ck_assert_msg(*p == '"', "unterminated label value: %s", line);
        p++;
        if (*p == ',')
            p++;
    }
    for (size_t i = 1; i < nl; i++)
        for (size_t j = i; j > 0 && strcmp(labels[j - 1], labels[j]) > 0; j--) {
            char t[64];
            memcpy(t, labels[j], sizeof t);
            memcpy(labels[j], labels[j - 1], sizeof t);
            memcpy(labels[j - 1], t, sizeof t);
        }
    k = strlen(out);
    for (size_t i = 0; i < nl; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%s", i == 0 ? "{" : ",", labels[i]);
    snprintf(out + k, cap - k, "}");
}

static void metric_names(const char *text, strset_t *out)
{
    const char *p = text;

    while (*p != '\0') {
        size_t n = strcspn(p, "\n");
        char line[LINE_MAX_LEN], shape[LINE_MAX_LEN];

        ck_assert_uint_lt(n, sizeof line);
        memcpy(line, p, n);
        line[n] = '\0';
        if (n > 0 && line[0] != '#') {
            metric_shape(line, shape, sizeof shape);
            set_add(out, shape);
        }
        p += n;
        if (*p == '\n')
            p++;
    }
}

static void fixture_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", KVT_TEST_DATA_DIR, name);
}

static void fixture_read(const char *name, strset_t *out)
{
    char path[512], line[LINE_MAX_LEN];
    FILE *f;

    fixture_path(name, path, sizeof path);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open fixture %s", path);
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] != '\0')
            set_add(out, line);
    }
    fclose(f);
}

static void fixture_write(const char *name, const strset_t *s)
{
    char path[512];
    FILE *f;

    fixture_path(name, path, sizeof path);
    f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write fixture %s", path);
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "%s\n", s->v[i]);
    ck_assert_int_eq(fclose(f), 0);
}

/* Fails with the lines missing from got and the lines it has in excess. */
static void compare(const char *name, strset_t *got)
{
    strset_t want = {0};
    char msg[4096];
    size_t k = 0;

    set_sort(got);
    if (getenv("KVT_WRITE_FIXTURES") != NULL) {
        fixture_write(name, got);
        return;
    }
    fixture_read(name, &want);
    msg[0] = '\0';
    for (size_t i = 0; i < want.n && k < sizeof msg - 1; i++)
        if (!set_has(got, want.v[i]))
            k += (size_t)snprintf(msg + k, sizeof msg - k, " -%s", want.v[i]);
    for (size_t i = 0; i < got->n && k < sizeof msg - 1; i++)
        if (!set_has(&want, got->v[i]))
            k += (size_t)snprintf(msg + k, sizeof msg - k, " +%s", got->v[i]);
    ck_assert_msg(k == 0, "%s differs (-missing +new):%s", name, msg);
    ck_assert_uint_eq(got->n, want.n);
    set_free(&want);
}

/* Saves, loads and looks up NCHUNKS chunks and tallies with a reason. */
static void workload(const harness_t *h)
{
    kvt_client_t *c = harness_client(h, "keys-model", 1, 0, 0);
    kvt_hash_t hs[NCHUNKS];
    const void *bufs[NCHUNKS];
    void *dst[NCHUNKS];
    size_t lens[NCHUNKS], caps[NCHUNKS], got[NCHUNKS], nhit = 0;
    uint8_t out[NCHUNKS];
    kvt_lookup_result_t r = {0};
    kvt_reason_t reason = {.name = "too_small", .count = 3};
    kvt_gate_state_t gs;

    harness_chain(7, hs, NCHUNKS);
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        void *b = malloc(CH);
        ck_assert_ptr_nonnull(b);
        harness_fill(b, CH, 0, i);
        bufs[i] = b;
        lens[i] = CH;
        dst[i] = malloc(CH);
        caps[i] = CH;
    }
    ck_assert_int_eq(kvt_save(c, hs, NCHUNKS, bufs, lens, NULL, out), 0);
    for (uint32_t i = 0; i < NCHUNKS; i++)
        ck_assert_uint_eq(out[i], KVT_SAVE_STORED);
    ck_assert_int_eq(kvt_load(c, hs, NCHUNKS, dst, caps, got, &nhit), 0);
    ck_assert_uint_eq(nhit, NCHUNKS);
    ck_assert_int_eq(kvt_lookup(c, hs, NCHUNKS, NULL, &r), 0);
    ck_assert_uint_eq(r.hit, NCHUNKS);
    /* a lease (30 s) keeps the session among server.top_sessions while the documents are read */
    ck_assert_int_eq(kvt_lookup(c, hs, NCHUNKS, &(kvt_lookup_opts_t){.lease = 1}, &r), 0);
    ck_assert_int_eq(r.leased, 1);
    ck_assert_int_eq(kvt_tally(c, 1, 2, 10, &reason, 1, &gs), 0);
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        free((void *)bufs[i]);
        free(dst[i]);
    }
    kvt_close(&c);
}

START_TEST(test_status_and_metrics_keys)
{
    char dir[96], extra[512];
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 64u << 10};
    strset_t keys = {0}, names = {0};
    harness_t *h;
    json_t *st;
    char *body = NULL;
    int code = 0;

    snprintf(dir, sizeof dir, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(extra, sizeof extra,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"8MiB\", "
             "\"segment_bytes\": \"2MiB\", \"write_buffer_bytes\": \"1MiB\"}}",
             dir);
    o.extra_json = extra;
    h = harness_start(&o);
    workload(h);

    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(st, "disk"), "state")),
                     "ok");
    key_paths(st, "", &keys);
    /* the loop's turn buckets, by wall and by CPU time: cumulative, every turn in +Inf */
    {
        static const char *const b[] = {"50",   "100",  "200",   "500",   "1000",
                                        "2000", "5000", "10000", "50000", "+Inf"};
        json_t *loop = json_object_get(st, "loop");
        json_t *wall = json_object_get(json_object_get(loop, "turn_us"), "buckets");
        json_t *cpu = json_object_get(json_object_get(loop, "turn_cpu_us"), "buckets");
        int64_t turns = json_integer_value(json_object_get(loop, "turns")), pw = 0, pc = 0;
        ck_assert_int_gt(turns, 0);
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
            int64_t w = json_integer_value(json_object_get(wall, b[i]));
            int64_t c = json_integer_value(json_object_get(cpu, b[i]));
            ck_assert_int_ge(w, pw);
            ck_assert_int_ge(c, pc);
            pw = w;
            pc = c;
        }
        ck_assert_int_eq(pw, turns);
        ck_assert_int_eq(pc, turns);
    }
    /* every op's buckets_us: [lo, hi, count] in order, not overlapping, summing to its count,
     * its p99 within the bucket that holds it */
    {
        const char *op;
        json_t *op_o;

        json_object_foreach(json_object_get(st, "ops"), op, op_o)
        {
            json_t *bk = json_object_get(op_o, "buckets_us"), *e;
            int64_t sum = 0, prev_hi = -1,
                    p99 = json_integer_value(json_object_get(op_o, "p99_us"));
            int64_t count = json_integer_value(json_object_get(op_o, "count")), in_p99 = 0;
            size_t i;

            ck_assert_msg(json_is_array(bk), "ops.%s.buckets_us", op);
            json_array_foreach(bk, i, e)
            {
                int64_t lo = json_integer_value(json_array_get(e, 0));
                int64_t hi = json_integer_value(json_array_get(e, 1));
                int64_t n = json_integer_value(json_array_get(e, 2));
                ck_assert_msg(lo > prev_hi && hi >= lo && n > 0, "ops.%s bucket %zu", op, i);
                in_p99 += lo <= p99 && p99 <= hi;
                prev_hi = hi;
                sum += n;
            }
            ck_assert_int_eq(sum, count);
            ck_assert_int_eq(in_p99, count > 0 ? 1 : 0);
        }
        ck_assert_int_gt(json_integer_value(json_object_get(
                             json_object_get(json_object_get(st, "ops"), "lookup"), "count")),
                         0);
    }
    json_decref(st);
    compare("status_keys.txt", &keys);

    ck_assert_int_eq(harness_http(h->status_path, "GET", "/metrics", &code, NULL, 0, &body), 0);
    ck_assert_int_eq(code, 200);
    metric_names(body, &names);
    free(body);
    compare("metrics_names.txt", &names);

    set_free(&keys);
    set_free(&names);
    harness_stop(&h);
}
END_TEST

static Suite *status_keys_suite(void)
{
    Suite *su = suite_create("status_keys");
    TCase *tc = tcase_create("keys");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_status_and_metrics_keys);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = status_keys_suite, .scratch = "kvtsk"};
