/*
 * harness.c - starts, queries and stops the real kvtierd for integration tests (see harness.h).
 *
 * Design: the config is built as a jansson object so that a test's extra JSON is deep-merged
 * over it (json_object_update_recursive) and the file is always valid JSON. The daemon is
 * fork+exec'd with stdout and stderr in <dir>/kvtierd.log and PR_SET_PDEATHSIG(SIGKILL), so it
 * dies with the test process even when a failed assertion _exit()s the test. Readiness and
 * every state change are observed by polling GET /status on the Unix socket with a deadline
 * (the programs' HTTP client, tools/tool.h); the only sleeps are the short pauses between polls.
 *
 * Threads: none of its own; call from the test's thread.
 * Invariants: every path built here is shorter than 108 bytes (sun_path); a harness_t owns its
 * directory and its daemon process until harness_stop()/harness_free().
 */
#include "harness.h"
#include "check_main.h"
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef KVTIERD_PATH
#error "KVTIERD_PATH must name the kvtierd binary"
#endif

#define POLL_PAUSE_MS 20
#define HTTP_IO_TIMEOUT_MS 3000
#define LOG_EXCERPT 1500

int64_t harness_now_ms(void)
{
    return tool_now_ms();
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Reads the whole log into a malloc'd NUL-terminated string ("" if unreadable). */
static char *read_log(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        if (f != NULL)
            fclose(f);
        return strdup("");
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        fclose(f);
        return strdup("");
    }
    n = (long)fread(buf, 1, (size_t)n, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The last LOG_EXCERPT bytes of a log, for failure messages. */
static const char *log_tail(const char *log)
{
    size_t n = strlen(log);
    return n > LOG_EXCERPT ? log + n - LOG_EXCERPT : log;
}

static int write_config(harness_t *h, const char *extra_json)
{
    json_t *cfg, *extra;
    json_error_t jerr;
    int rc;

    char disk_dir[160];

    snprintf(disk_dir, sizeof disk_dir, "%s/disk", h->dir);
    cfg = json_pack("{s:{s:s, s:s}, s:{s:I, s:s, s:I, s:i}, s:{s:s}, s:{s:s}}", "server",
                    "endpoint", h->endpoint, "status_socket", h->status_path, "ram",
                    "capacity_bytes", (json_int_t)h->capacity_bytes, "arena_path", "",
                    "max_chunk_bytes", (json_int_t)h->max_chunk_bytes, "lease_ms", (int)h->lease_ms,
                    "disk", "dir", disk_dir, "log", "level", "info");
    ck_assert_ptr_nonnull(cfg);
    if (extra_json != NULL) {
        extra = json_loads(extra_json, 0, &jerr);
        ck_assert_msg(extra != NULL && json_is_object(extra), "extra_json is not an object: %s",
                      jerr.text);
        ck_assert_int_eq(json_object_update_recursive(cfg, extra), 0);
        json_decref(extra);
    }
    {
        const char *arena =
            json_string_value(json_object_get(json_object_get(cfg, "ram"), "arena_path"));
        snprintf(h->arena_path, sizeof h->arena_path, "%s", arena != NULL ? arena : "");
        /* removed after the whole run, also when the test fails (kept ones too: a re-attach
         * test's arena outlives its daemons, never the run) */
        check_register_arena(h->arena_path);
    }
    rc = json_dump_file(cfg, h->config_path, JSON_INDENT(2));
    json_decref(cfg);
    return rc;
}

const char *harness_kvtierd(void)
{
    const char *bin = getenv("KVT_TEST_KVTIERD");

    return bin != NULL && bin[0] != '\0' ? bin : KVTIERD_PATH;
}

static void exec_daemon(const harness_t *h, pid_t parent)
{
    sigset_t none;
    int fd;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(126);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    fd = open(h->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        dup2(fd, STDIN_FILENO);
    if (h->nofile != 0 &&
        setrlimit(RLIMIT_NOFILE, &(struct rlimit){.rlim_cur = h->nofile, .rlim_max = h->nofile}))
        _exit(126);
    execl(harness_kvtierd(), "kvtierd", "-c", h->config_path, (char *)NULL);
    _exit(127);
}

/* Starts the daemon of h (its config written) and waits until GET /status answers. */
static void spawn_ready(harness_t *h)
{
    pid_t parent = getpid();
    int64_t deadline;

    h->pid = fork();
    ck_assert_msg(h->pid >= 0, "fork: %s", strerror(errno));
    if (h->pid == 0)
        exec_daemon(h, parent);

    deadline = harness_now_ms() + HARNESS_DEADLINE_MS;
    for (;;) {
        json_t *st;
        int wst;

        if (waitpid(h->pid, &wst, WNOHANG) == h->pid) {
            char *log = read_log(h->log_path);
            h->pid = 0;
            ck_abort_msg("kvtierd exited before it was ready (status 0x%x); log:\n%s", wst,
                         log_tail(log));
        }
        st = harness_status(h);
        if (st != NULL) {
            json_decref(st);
            break;
        }
        if (harness_now_ms() > deadline) {
            char *log = read_log(h->log_path);
            kill(h->pid, SIGKILL);
            waitpid(h->pid, NULL, 0);
            ck_abort_msg("kvtierd not ready after %d ms; log:\n%s", HARNESS_DEADLINE_MS,
                         log_tail(log));
        }
        pause_ms(POLL_PAUSE_MS);
    }
}

harness_t *harness_start(const harness_opts_t *opts)
{
    harness_opts_t o = {0};
    harness_t *h;
    int n;

    if (opts != NULL)
        o = *opts;
    h = calloc(1, sizeof *h);
    ck_assert_ptr_nonnull(h);
    h->capacity_bytes = o.capacity_bytes ? o.capacity_bytes : 4u << 20;
    h->max_chunk_bytes = o.max_chunk_bytes ? o.max_chunk_bytes : 256u << 10;
    h->lease_ms = o.lease_ms ? o.lease_ms : 30000;
    h->keep_arena = o.keep_arena;
    h->nofile = o.nofile;

    n = snprintf(h->dir, sizeof h->dir, "%s/kd-XXXXXX",
                 check_scratch_dir()[0] != '\0' ? check_scratch_dir() : "/tmp");
    ck_assert(n > 0 && (size_t)n < sizeof h->dir);
    ck_assert_msg(mkdtemp(h->dir) != NULL, "mkdtemp %s: %s", h->dir, strerror(errno));
    snprintf(h->endpoint, sizeof h->endpoint, "ipc://%s/kvt.zmq", h->dir);
    snprintf(h->status_path, sizeof h->status_path, "%s/status.sock", h->dir);
    snprintf(h->config_path, sizeof h->config_path, "%s/kvtierd.json", h->dir);
    n = snprintf(h->log_path, sizeof h->log_path, "%s/kvtierd.log", h->dir);
    ck_assert(n > 0 && (size_t)n < sizeof h->log_path);
    ck_assert_int_eq(write_config(h, o.extra_json), 0);
    spawn_ready(h);
    return h;
}

static void check_log_clean(const harness_t *h)
{
    static const char *const bad[] = {"AddressSanitizer", "LeakSanitizer", "runtime error:"};
    char *log = read_log(h->log_path);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = strstr(log, bad[i]);
        ck_assert_msg(p == NULL, "kvtierd log holds a sanitizer report (%s):\n%.*s", bad[i],
                      LOG_EXCERPT, p != NULL ? (p > log + 200 ? p - 200 : log) : "");
    }
    free(log);
}

void harness_reap(harness_t *h)
{
    int64_t deadline = harness_now_ms() + HARNESS_STOP_MS;
    int wst = 0;
    pid_t r;

    ck_assert_msg(h->pid > 0, "harness_reap on a daemon that is not running");
    while ((r = waitpid(h->pid, &wst, WNOHANG)) == 0 && harness_now_ms() < deadline)
        pause_ms(POLL_PAUSE_MS);
    if (r == 0) {
        char *log = read_log(h->log_path);
        kill(h->pid, SIGKILL);
        waitpid(h->pid, NULL, 0);
        ck_abort_msg("kvtierd did not exit within %d ms of SIGTERM; log:\n%s", HARNESS_STOP_MS,
                     log_tail(log));
    }
    h->pid = 0;
    check_log_clean(h);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        char *log = read_log(h->log_path);
        ck_abort_msg("kvtierd exit: %s %d (want exit 0); log:\n%s",
                     WIFEXITED(wst) ? "status" : "signal",
                     WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst), log_tail(log));
    }
}

void harness_stop(harness_t **hp)
{
    harness_t *h = *hp;

    if (h == NULL)
        return;
    ck_assert_msg(h->pid > 0, "harness_stop on a daemon that is not running");
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    harness_reap(h);
    harness_free(hp);
}

void harness_restart(harness_t *h)
{
    if (h->pid > 0) {
        ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
        harness_reap(h);
    }
    spawn_ready(h);
}

void harness_kill9(harness_t *h)
{
    ck_assert_msg(h->pid > 0, "harness_kill9 on a daemon that is not running");
    ck_assert_int_eq(kill(h->pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(h->pid, NULL, 0), h->pid);
    h->pid = 0;
}

void harness_free(harness_t **hp)
{
    harness_t *h = *hp;

    if (h == NULL)
        return;
    if (h->pid > 0) {
        kill(h->pid, SIGKILL);
        waitpid(h->pid, NULL, 0);
    }
    check_rmtree(h->dir);
    /* the daemon keeps its arena file for a re-attach (ram.reattach): tests do not */
    if (h->arena_path[0] != '\0' && !h->keep_arena)
        check_unlink_arena(h->arena_path);
    free(h);
    *hp = NULL;
}

int harness_http(const char *sock_path, const char *method, const char *path, int *code,
                 char *content_type, size_t ct_cap, char **body)
{
    tool_http_reply_t r;

    if (tool_http_request(sock_path, method, path, HTTP_IO_TIMEOUT_MS, &r) != 0)
        return -1;
    *code = r.code;
    if (content_type != NULL && ct_cap > 0)
        snprintf(content_type, ct_cap, "%s", r.content_type);
    *body = r.body;
    return 0;
}

json_t *harness_status(const harness_t *h)
{
    json_error_t jerr;
    json_t *st;
    char *body = NULL;
    int code = 0;

    if (harness_http(h->status_path, "GET", "/status", &code, NULL, 0, &body) != 0)
        return NULL;
    if (code != 200) {
        free(body);
        return NULL;
    }
    st = json_loads(body, 0, &jerr);
    ck_assert_msg(st != NULL && json_is_object(st), "GET /status body is not a JSON object: %s",
                  jerr.text);
    free(body);
    return st;
}

int64_t harness_jint(json_t *status, const char *dotted)
{
    json_t *v = tool_json_path(status, dotted);

    ck_assert_msg(json_is_integer(v), "status.%s is missing or not an integer", dotted);
    return (int64_t)json_integer_value(v);
}

double harness_jnum(json_t *status, const char *dotted)
{
    json_t *v = tool_json_path(status, dotted);

    ck_assert_msg(json_is_number(v), "status.%s is missing or not a number", dotted);
    return json_number_value(v);
}

bool harness_jbool(json_t *status, const char *dotted)
{
    json_t *v = tool_json_path(status, dotted);

    ck_assert_msg(json_is_boolean(v), "status.%s is missing or not a boolean", dotted);
    return json_is_true(v);
}

int64_t harness_stat(const harness_t *h, const char *dotted)
{
    json_t *st = harness_status(h);
    int64_t v;

    ck_assert_msg(st != NULL, "GET /status did not answer");
    v = harness_jint(st, dotted);
    json_decref(st);
    return v;
}

json_t *harness_wait_status(const harness_t *h, harness_pred_fn pred, void *arg, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;

    for (;;) {
        json_t *st = harness_status(h);
        if (st != NULL && pred(st, arg))
            return st;
        json_decref(st);
        if (harness_now_ms() > deadline)
            return NULL;
        pause_ms(POLL_PAUSE_MS);
    }
}

const char *harness_jstr(json_t *status, const char *dotted)
{
    json_t *v = tool_json_path(status, dotted);

    ck_assert_msg(json_is_string(v), "status.%s is missing or not a string", dotted);
    return json_string_value(v);
}

int harness_pred_int_eq(json_t *status, void *arg)
{
    const harness_int_eq_t *e = arg;
    json_t *v = tool_json_path(status, e->path);

    return json_is_integer(v) && json_integer_value(v) == e->value;
}

kvt_ns_desc_t harness_ns_desc(const char *model, uint32_t world, int mla, uint32_t num_layers)
{
    kvt_ns_desc_t d = {
        .model = model,
        .dtype = "bf16",
        .chunk_tokens = 16,
        .num_layers = num_layers,
        .num_kv_heads = 8,
        .head_dim = 128,
        .world_size = world,
        .mla = mla,
        .hash_seed = 0,
        .tenant = NULL,
    };
    return d;
}

kvt_client_t *harness_client_with(const harness_t *h, const char *model, uint32_t world,
                                  uint32_t rank, uint32_t chunk_tokens, int data_path)
{
    kvt_ns_desc_t d = harness_ns_desc(model, world, 0, 32);
    kvt_connect_opts_t o = {.timeout_ms = 5000, .data_path = data_path};
    kvt_client_t *c = NULL;
    int rc;

    d.chunk_tokens = chunk_tokens;
    rc = kvt_connect(h->endpoint, &d, rank, &o, &c);
    ck_assert_msg(rc == 0, "kvt_connect(%s, %s, rank %u/%u): %s", h->endpoint, model, rank, world,
                  kvt_strerror(rc));
    ck_assert_ptr_nonnull(c);
    return c;
}

kvt_client_t *harness_client(const harness_t *h, const char *model, uint32_t world, int mla,
                             uint32_t rank)
{
    kvt_ns_desc_t d = harness_ns_desc(model, world, mla, 32);
    kvt_connect_opts_t o = {.timeout_ms = 5000};
    kvt_client_t *c = NULL;
    int rc = kvt_connect(h->endpoint, &d, rank, &o, &c);

    ck_assert_msg(rc == 0, "kvt_connect(%s, %s, rank %u/%u): %s", h->endpoint, model, rank, world,
                  kvt_strerror(rc));
    ck_assert_ptr_nonnull(c);
    return c;
}

int harness_log_count(const harness_t *h, const char *needle)
{
    FILE *f = fopen(h->log_path, "r");
    char line[2048];
    int n = 0;

    ck_assert_msg(f != NULL, "cannot open %s", h->log_path);
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

void harness_chain(uint32_t seed, kvt_hash_t *out, size_t n)
{
    size_t ntok = n * 16;
    uint32_t *tok = malloc(ntok * sizeof *tok);

    ck_assert_ptr_nonnull(tok);
    for (size_t i = 0; i < ntok; i++)
        tok[i] = (seed << 20) + (uint32_t)i;
    ck_assert_uint_eq(kvt_hash_chain(tok, ntok, 16, NULL, out, n), n);
    free(tok);
}

kvt_completion_t *harness_next_completion(kvt_client_t *c, int timeout_ms)
{
    kvt_completion_t *comp = NULL;
    int64_t deadline = harness_now_ms() + timeout_ms;

    while (kvt_next_completion(c, &comp) == 0) {
        int64_t left = deadline - harness_now_ms();
        ck_assert_msg(left > 0, "no completion within %d ms", timeout_ms);
        ck_assert_int_ge(kvt_poll(c, (int)left), 0);
    }
    return comp;
}

uint64_t harness_hash_key(const kvt_hash_t *h)
{
    uint64_t k;

    memcpy(&k, h->b, sizeof k);
    return k;
}

uint64_t harness_prng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void harness_fill(void *buf, size_t len, uint32_t rank, uint64_t key)
{
    uint64_t s = key * 0x100000001b3ull ^ ((uint64_t)rank << 48) ^ len;
    uint8_t *b = buf;

    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = harness_prng(&s);
        size_t k = len - i < 8 ? len - i : 8;
        memcpy(b + i, &v, k);
    }
}

int harness_check_fill(const void *buf, size_t len, uint32_t rank, uint64_t key)
{
    uint8_t *want = malloc(len ? len : 1);
    int ok;

    ck_assert_ptr_nonnull(want);
    harness_fill(want, len, rank, key);
    ok = memcmp(want, buf, len) == 0;
    free(want);
    return ok;
}

static int pred_disk_drained(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.write_buffer_chunks") == 0 &&
           harness_jint(st, "disk.reads_in_flight") == 0 &&
           harness_jint(st, "disk.reads_queued") == 0;
}

void harness_save_chains(const harness_t *h, kvt_client_t *c, uint32_t first, uint32_t last,
                         size_t n, size_t len, int paced)
{
    for (uint32_t s = first; s <= last; s++) {
        ck_assert_uint_eq(harness_save_chain(c, s, n, len, 0), n);
        if (paced)
            harness_wait_disk_drained(h);
    }
}

size_t harness_lookup_chain(kvt_client_t *c, uint32_t seed, size_t n)
{
    kvt_hash_t hs[64];
    kvt_lookup_result_t r = {0};
    int rc;

    ck_assert_uint_le(n, 64);
    harness_chain(seed, hs, n);
    rc = kvt_lookup(c, hs, n, NULL, &r);
    ck_assert_msg(rc == 0, "kvt_lookup: %s", kvt_strerror(rc));
    return r.hit;
}

void harness_wait_disk_drained(const harness_t *h)
{
    json_t *st = harness_wait_status(h, pred_disk_drained, NULL, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "the disk tier's write buffer never drained");
    json_decref(st);
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t harness_segments(const char *dir, char **out, size_t max)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n = 0;

    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL && n < max) {
        char path[512];
        if (strlen(de->d_name) != 20 || strcmp(de->d_name + 16, ".seg") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        out[n] = strdup(path);
        ck_assert_ptr_nonnull(out[n]);
        n++;
    }
    closedir(d);
    qsort(out, n, sizeof *out, cmp_path);
    return n;
}

void harness_free_paths(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
}

uint64_t harness_rss_anon(pid_t pid)
{
    char path[64], line[256];
    uint64_t kb = 0;
    FILE *f;
    int found = 0;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "RssAnon: %lu kB", (unsigned long *)&kb) == 1) {
            found = 1;
            break;
        }
    fclose(f);
    ck_assert_msg(found, "no RssAnon in %s", path);
    return kb * 1024;
}

size_t harness_save_chain(kvt_client_t *c, uint32_t seed, size_t n, size_t len, uint32_t rank)
{
    kvt_hash_t *hs = calloc(n, sizeof *hs);
    size_t ok = 0;

    ck_assert_ptr_nonnull(hs);
    harness_chain(seed, hs, n);
    for (size_t at = 0; at < n; at += 16) {
        size_t k = n - at < 16 ? n - at : 16;
        const void *bufs[16];
        size_t lens[16];
        uint8_t out[16];
        kvt_save_opts_t o = {.parent = at > 0 ? &hs[at - 1] : NULL};
        for (size_t i = 0; i < k; i++) {
            void *b = malloc(len);
            ck_assert_ptr_nonnull(b);
            harness_fill(b, len, rank, (uint64_t)seed << 32 | (at + i));
            bufs[i] = b;
            lens[i] = len;
        }
        if (kvt_save(c, &hs[at], k, bufs, lens, &o, out) == 0)
            for (size_t i = 0; i < k; i++)
                ok += out[i] == KVT_SAVE_STORED || out[i] == KVT_SAVE_EXISTS;
        for (size_t i = 0; i < k; i++)
            free((void *)bufs[i]);
    }
    free(hs);
    return ok;
}

size_t harness_load_chain(kvt_client_t *c, uint32_t seed, size_t n, size_t len, uint32_t rank)
{
    kvt_hash_t *hs = calloc(n, sizeof *hs);
    size_t got = 0;

    ck_assert_ptr_nonnull(hs);
    harness_chain(seed, hs, n);
    for (size_t at = 0; at < n; at += 16) {
        size_t k = n - at < 16 ? n - at : 16, lens[16], caps[16], nhit = 0;
        void *bufs[16];
        int rc;
        for (size_t i = 0; i < k; i++) {
            bufs[i] = malloc(len);
            caps[i] = len;
        }
        rc = kvt_load(c, &hs[at], k, bufs, caps, lens, &nhit);
        ck_assert_msg(rc == 0, "kvt_load: %s (%s)", kvt_strerror(rc), kvt_last_error(c));
        for (size_t i = 0; i < k; i++) {
            if (lens[i] > 0) {
                ck_assert_uint_eq(lens[i], len);
                ck_assert_msg(
                    harness_check_fill(bufs[i], len, rank, (uint64_t)seed << 32 | (at + i)),
                    "chain %u chunk %zu loaded with other bytes", seed, at + i);
                got++;
            }
            free(bufs[i]);
        }
    }
    free(hs);
    return got;
}

/* --- raw ZeroMQ peers --- */

void *harness_raw_open(void *ctx, const char *endpoint, int rcv_timeout_ms)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;

    ck_assert_ptr_nonnull(s);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcv_timeout_ms, sizeof rcv_timeout_ms);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

int harness_raw_send(void *s, const kvt_frame_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (zmq_send(s, f[i].data, f[i].len, i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            return -1;
    return 0;
}

/* Receives one multipart message; returns 0, or -1 on timeout / too many frames. */
int harness_raw_recv(void *s, harness_raw_msg_t *m)
{
    int more = 1;

    m->n = 0;
    while (more) {
        size_t sz = sizeof more;
        if (m->n == HARNESS_RAW_MAX_FRAMES)
            return -1;
        zmq_msg_init(&m->part[m->n]);
        if (zmq_msg_recv(&m->part[m->n], s, 0) < 0) {
            zmq_msg_close(&m->part[m->n]);
            return -1;
        }
        m->f[m->n].data = zmq_msg_data(&m->part[m->n]);
        m->f[m->n].len = zmq_msg_size(&m->part[m->n]);
        m->n++;
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
    }
    return 0;
}

void harness_raw_msg_close(harness_raw_msg_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        zmq_msg_close(&m->part[i]);
    m->n = 0;
}

/* Decodes a reply; asserts it is well-formed. */
void harness_raw_decode(const harness_raw_msg_t *m, kvt_msg_t *out)
{
    kvt_limits_t lim = {.max_hashes = 65536, .max_payload_bytes = 64u << 20};
    int rc = kvt_msg_decode(m->f, m->n, &lim, out);

    ck_assert_msg(rc == 0, "the daemon's reply does not decode: %s", kvt_wire_strerror(rc));
}

size_t harness_raw_head(uint8_t *buf, int type, uint64_t rid, uint32_t ns, uint16_t rank)
{
    kvt_msg_t m;

    memset(&m, 0, sizeof m);
    m.hdr.version = 1; /* raw peers speak protocol 1: they are the old clients (harness.h) */
    m.hdr.type = (uint8_t)type;
    m.hdr.req_id = rid;
    m.hdr.ns_id = ns;
    if (type == KVT_MSG_LOOKUP)
        m.u.lookup.rank = rank;
    else if (type == KVT_MSG_SAVE_BEGIN || type == KVT_MSG_SAVE_DATA ||
             type == KVT_MSG_SAVE_RESERVE || type == KVT_MSG_SAVE_COMMIT)
        m.u.save.rank = rank;
    else if (type == KVT_MSG_RELEASE)
        m.u.release.rank = rank;
    else if (type == KVT_MSG_LOAD)
        m.u.load.rank = rank;
    return kvt_head_encode(buf, 128, &m);
}

size_t harness_raw_hello_head(uint8_t *buf, uint64_t fp, uint16_t rank, uint16_t world,
                              uint64_t rid)
{
    kvt_msg_t m;

    memset(&m, 0, sizeof m);
    m.hdr.version = 1;
    m.hdr.type = KVT_MSG_HELLO;
    m.hdr.req_id = rid;
    m.u.hello.layout_fp = fp;
    m.u.hello.chunk_tokens = 16;
    m.u.hello.rank = rank;
    m.u.hello.world = world;
    return kvt_head_encode(buf, 128, &m);
}

/* HELLO on a raw socket; returns the ns_id of HELLO_OK, or fails the test. */
uint32_t harness_raw_hello(void *s, const char *model, uint64_t fp, uint16_t rank, uint16_t world,
                           uint64_t rid)
{
    uint8_t head[128];
    kvt_msg_t m;
    harness_raw_msg_t r;
    kvt_frame_t f[2];

    f[0].data = head;
    f[0].len = harness_raw_hello_head(head, fp, rank, world, rid);
    f[1].data = model;
    f[1].len = strlen(model);
    ck_assert_int_eq(harness_raw_send(s, f, 2), 0);
    ck_assert_msg(harness_raw_recv(s, &r) == 0, "no reply to HELLO");
    harness_raw_decode(&r, &m);
    ck_assert_int_eq(m.hdr.type, KVT_MSG_HELLO_OK);
    ck_assert_uint_eq(m.hdr.req_id, rid);
    harness_raw_msg_close(&r);
    return m.u.hello_ok.ns_id;
}

void harness_raw_call(void *s, const kvt_msg_t *m, const kvt_frame_t *rest, size_t nrest,
                      harness_raw_msg_t *r, kvt_msg_t *rep)
{
    uint8_t head[160];
    kvt_frame_t f[HARNESS_RAW_MAX_FRAMES];

    ck_assert_uint_le(nrest + 1, HARNESS_RAW_MAX_FRAMES);
    f[0].data = head;
    f[0].len = kvt_head_encode(head, sizeof head, m);
    ck_assert_uint_gt(f[0].len, 0);
    for (size_t i = 0; i < nrest; i++)
        f[1 + i] = rest[i];
    ck_assert_int_eq(harness_raw_send(s, f, nrest + 1), 0);
    ck_assert_msg(harness_raw_recv(s, r) == 0, "no reply to %s", kvt_msg_type_name(m->hdr.type));
    harness_raw_decode(r, rep);
    ck_assert_uint_eq(rep->hdr.req_id, m->hdr.req_id);
}

kvt_hello_ok_t harness_raw_hello2(void *s, const char *model, const char *rev, uint64_t rid)
{
    kvt_msg_t m = {.hdr = {.version = 2, .type = KVT_MSG_HELLO, .req_id = rid}}, rep;
    kvt_frame_t f[2] = {{model, strlen(model)}, {rev, strlen(rev)}};
    harness_raw_msg_t r;
    kvt_hello_ok_t ok;

    m.u.hello.layout_fp = HARNESS_RAW_FP2;
    m.u.hello.chunk_tokens = 16;
    m.u.hello.world = 1;
    m.u.hello.features = ~0ull;
    harness_raw_call(s, &m, f, 2, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_HELLO_OK);
    ck_assert_uint_eq(rep.hdr.version, 2);
    ok = rep.u.hello_ok;
    harness_raw_msg_close(&r);
    return ok;
}
