/*
 * test_lifecycle.c - kvtierd as a systemd service (Type=notify), its reload and its graceful
 * stop, against the real daemon.
 *
 *   - notify: the test binds its own NOTIFY_SOCKET datagram socket and sets WATCHDOG_USEC, as
 *     systemd does, and starts a daemon over a disk tier that already holds chunks. It asserts
 *     STATUS= progress of the disk recovery (the last line naming every record) before READY=1,
 *     READY=1 once, WATCHDOG=1 pings, no ping at all while the daemon is SIGSTOPped (the stop is
 *     observed in /proc before the socket is drained, so no ping can be in flight), pings again
 *     after SIGCONT, and STOPPING=1 on SIGTERM.
 *   - reload: log level and a gate setting changed in the file, SIGHUP, status shows both (and
 *     the key that needs a restart is counted and logged); an invalid file and an out-of-range
 *     value are refused with a logged error, the daemon running on as before.
 *   - stop: a shared-memory reservation is open when SIGTERM comes; while it is, the daemon
 *     refuses saves (EBUSY, status server.draining) and still answers lookups; the commit of the
 *     reservation is taken, and then the daemon exits 0 without waiting out stop_drain_ms.
 *   - endpoint in use: a second daemon on a running one's ipc endpoint is refused at start.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "check_main.h"
#include "harness.h"

#define WATCHDOG_USEC 200000 /* pings every 100 ms */
#define NOTIFY_MAX 64        /* messages kept */
#define CH (16u * 1024u)
#define NCHUNKS 6u

typedef struct {
    int fd;
    char path[108];
    char *msg[NOTIFY_MAX];
    size_t n;
} notify_sock_t;

static void notify_open(notify_sock_t *ns)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    memset(ns, 0, sizeof *ns);
    snprintf(ns->path, sizeof ns->path, "%s/notify-%d", check_scratch_dir(), (int)getpid());
    memcpy(sa.sun_path, ns->path, strlen(ns->path) + 1);
    ns->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(ns->fd, 0);
    unlink(ns->path);
    ck_assert_int_eq(bind(ns->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", ns->path, 1), 0);
}

static void notify_close(notify_sock_t *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->msg[i]);
    close(ns->fd);
    unlink(ns->path);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
}

/* One datagram within timeout_ms (NUL-terminated, owned by the caller), or NULL. */
static char *notify_recv(notify_sock_t *ns, int timeout_ms)
{
    struct pollfd p = {.fd = ns->fd, .events = POLLIN};
    char buf[4096];
    ssize_t n;

    if (poll(&p, 1, timeout_ms) != 1)
        return NULL;
    n = recv(ns->fd, buf, sizeof buf - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return strdup(buf);
}

/* Receives until a message containing want arrives (kept in ns->msg); fails after timeout_ms. */
static const char *notify_wait(notify_sock_t *ns, const char *want, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;

    for (;;) {
        int64_t left = deadline - harness_now_ms();
        char *m = notify_recv(ns, left > 0 ? (int)left : 0);

        ck_assert_msg(m != NULL, "no notify message with \"%s\" within %d ms", want, timeout_ms);
        if (ns->n < NOTIFY_MAX)
            ns->msg[ns->n++] = m;
        else
            free(m);
        if (strstr(ns->msg[ns->n - 1], want) != NULL)
            return ns->msg[ns->n - 1];
    }
}

/* Drops what is queued on the socket. */
static void notify_drain(notify_sock_t *ns)
{
    char *m;

    while ((m = notify_recv(ns, 0)) != NULL)
        free(m);
}

static size_t count_with(const notify_sock_t *ns, const char *want)
{
    size_t k = 0;

    for (size_t i = 0; i < ns->n; i++)
        k += strstr(ns->msg[i], want) != NULL;
    return k;
}

/* The process state letter of pid (/proc/pid/stat), or '?'. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return '?';
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p[2] : '?';
}

static void disk_json(char *buf, size_t len, const char *dir)
{
    snprintf(buf, len,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"8MiB\", "
             "\"segment_bytes\": \"2MiB\", \"write_buffer_bytes\": \"1MiB\"}}",
             dir);
}

/* Saves NCHUNKS chunks into a daemon over dir and stops it: they persist to the disk tier. */
static void fill_disk(const char *dir)
{
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 64u << 10};
    char extra[512];
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t hs[NCHUNKS];
    const void *bufs[NCHUNKS];
    size_t lens[NCHUNKS];
    uint8_t out[NCHUNKS];
    static uint8_t data[NCHUNKS][CH];

    disk_json(extra, sizeof extra, dir);
    o.extra_json = extra;
    h = harness_start(&o);
    c = harness_client(h, "life-model", 1, 0, 0);
    harness_chain(3, hs, NCHUNKS);
    for (uint32_t i = 0; i < NCHUNKS; i++) {
        harness_fill(data[i], CH, 0, i);
        bufs[i] = data[i];
        lens[i] = CH;
    }
    ck_assert_int_eq(kvt_save(c, hs, NCHUNKS, bufs, lens, NULL, out), 0);
    kvt_close(&c);
    harness_stop(&h);
}

START_TEST(test_notify_ready_watchdog_stopping)
{
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 64u << 10};
    char dir[128], extra[512], want[64], wd[32];
    notify_sock_t ns;
    const char *ready, *last;
    size_t i_ready = 0, i_last = 0;
    harness_t *h;
    char *m;

    snprintf(dir, sizeof dir, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    fill_disk(dir);

    notify_open(&ns);
    snprintf(wd, sizeof wd, "%d", WATCHDOG_USEC);
    ck_assert_int_eq(setenv("WATCHDOG_USEC", wd, 1), 0);
    disk_json(extra, sizeof extra, dir);
    o.extra_json = extra;
    h = harness_start(&o);

    /* recovery progress, then READY=1 after it */
    snprintf(want, sizeof want, "%u records", NCHUNKS);
    last = notify_wait(&ns, want, 5000);
    ck_assert_ptr_nonnull(strstr(last, "STATUS=Recovering the disk tier"));
    ck_assert_ptr_nonnull(strstr(last, "EXTEND_TIMEOUT_USEC="));
    ready = notify_wait(&ns, "READY=1", 5000);
    ck_assert_ptr_nonnull(strstr(ready, "STATUS=Serving"));
    for (size_t i = 0; i < ns.n; i++) {
        if (ns.msg[i] == last)
            i_last = i;
        if (ns.msg[i] == ready)
            i_ready = i;
    }
    ck_assert_uint_lt(i_last, i_ready);
    ck_assert_uint_eq(count_with(&ns, "READY=1"), 1);
    ck_assert_uint_ge(count_with(&ns, "STATUS=Starting"), 1);
    ck_assert_int_eq(harness_stat(h, "disk.recovery.records"), NCHUNKS);

    /* the watchdog pings while the loop turns */
    for (int k = 0; k < 3; k++)
        notify_wait(&ns, "WATCHDOG=1", 5000);

    /* a stopped process sends nothing */
    ck_assert_int_eq(kill(h->pid, SIGSTOP), 0);
    for (int64_t deadline = harness_now_ms() + 5000; proc_state(h->pid) != 'T';) {
        ck_assert_msg(harness_now_ms() < deadline, "kvtierd did not stop");
        usleep(1000);
    }
    notify_drain(&ns);
    m = notify_recv(&ns, 3 * WATCHDOG_USEC / 1000);
    ck_assert_msg(m == NULL, "a SIGSTOPped daemon sent \"%s\"", m != NULL ? m : "");
    ck_assert_int_eq(kill(h->pid, SIGCONT), 0);
    notify_wait(&ns, "WATCHDOG=1", 5000);

    /* STOPPING=1 on SIGTERM, then a clean exit */
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    ck_assert_ptr_nonnull(strstr(notify_wait(&ns, "STOPPING=1", 5000), "STATUS=Stopping"));
    harness_reap(h);
    harness_free(&h);
    notify_close(&ns);
}
END_TEST

/* Rewrites the harness's config with the JSON object patch merged over it. */
static void config_patch(const harness_t *h, const char *patch)
{
    json_error_t jerr;
    json_t *cfg = json_load_file(h->config_path, 0, &jerr), *p = json_loads(patch, 0, &jerr);

    ck_assert_ptr_nonnull(cfg);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(json_object_update_recursive(cfg, p), 0);
    ck_assert_int_eq(json_dump_file(cfg, h->config_path, JSON_INDENT(2)), 0);
    json_decref(cfg);
    json_decref(p);
}

static void config_write_raw(const harness_t *h, const char *text)
{
    FILE *f = fopen(h->config_path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static json_t *wait_int(const harness_t *h, const char *path, int64_t value)
{
    harness_int_eq_t want = {.path = path, .value = value};
    json_t *st = harness_wait_status(h, harness_pred_int_eq, &want, 5000);

    ck_assert_msg(st != NULL, "status %s never became %lld", path, (long long)value);
    return st;
}

static const char *jstr(json_t *st, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(st, a), b));
}

static bool log_has(const harness_t *h, const char *text)
{
    FILE *f = fopen(h->log_path, "r");
    char line[2048];
    bool found = false;

    ck_assert_ptr_nonnull(f);
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

START_TEST(test_reload)
{
    harness_t *h = harness_start(NULL);
    kvt_client_t *c = harness_client(h, "reload-model", 1, 0, 0);
    json_t *st, *ns0;

    st = harness_status(h);
    ck_assert_str_eq(jstr(st, "config", "log_level"), "info");
    ns0 = json_array_get(json_object_get(st, "namespaces"), 0);
    ck_assert(json_is_false(
        json_object_get(json_object_get(json_object_get(ns0, "gates"), "admission"), "enabled")));
    json_decref(st);

    /* two live keys and one that needs a restart */
    config_patch(h, "{\"log\": {\"level\": \"debug\"}, \"gates\": {\"admission\": {\"enabled\": "
                    "true, \"floor\": 0.5}}, \"ram\": {\"max_chunk_bytes\": 131072}}");
    ck_assert_int_eq(kill(h->pid, SIGHUP), 0);
    st = wait_int(h, "config.reloads", 1);
    ck_assert_str_eq(jstr(st, "config", "log_level"), "debug");
    ck_assert_int_eq(harness_jint(st, "config.restart_pending"), 1);
    ck_assert_int_eq(harness_jint(st, "config.reload_errors"), 0);
    ns0 = json_object_get(
        json_object_get(json_array_get(json_object_get(st, "namespaces"), 0), "gates"),
        "admission");
    ck_assert(json_is_true(json_object_get(ns0, "enabled")));
    ck_assert(json_real_value(json_object_get(ns0, "floor")) == 0.5);
    json_decref(st);
    ck_assert(log_has(h, "event=reload_key key=log.level action=applied"));
    ck_assert(log_has(h, "event=reload_key key=gates.admission.enabled action=applied"));
    ck_assert(log_has(h, "event=reload_key key=ram.max_chunk_bytes action=restart_required"));

    /* an invalid file: refused, logged, the running config kept */
    config_write_raw(h, "{\"log\": {\"level\": \"info\"},");
    ck_assert_int_eq(kill(h->pid, SIGHUP), 0);
    st = wait_int(h, "config.reload_errors", 1);
    ck_assert_str_eq(jstr(st, "config", "log_level"), "debug");
    ck_assert_int_eq(harness_jint(st, "config.reloads"), 1);
    json_decref(st);
    ck_assert(log_has(h, "event=reload_failed"));

    /* a value out of range: the message names the key */
    config_write_raw(h, "{\"ram\": {\"lease_ms\": 0}}");
    ck_assert_int_eq(kill(h->pid, SIGHUP), 0);
    st = wait_int(h, "config.reload_errors", 2);
    ck_assert_ptr_nonnull(strstr(jstr(st, "config", "last_error"), "ram.lease_ms"));
    ck_assert_str_eq(jstr(st, "config", "log_level"), "debug");
    json_decref(st);

    /* still serving */
    {
        kvt_lookup_result_t r = {0};
        kvt_hash_t hs[1];
        harness_chain(1, hs, 1);
        ck_assert_int_eq(kvt_lookup(c, hs, 1, NULL, &r), 0);
    }
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static int pred_draining(json_t *st, void *arg)
{
    (void)arg;
    return json_is_true(json_object_get(json_object_get(st, "server"), "draining"));
}

START_TEST(test_stop_finishes_in_flight)
{
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 64u << 10};
    char extra[256];
    harness_t *h;
    void *ctx, *s;
    uint32_t nsid;
    kvt_hash_t hs[2];
    uint8_t head[128], lens[8], locs[KVT_LOC_BYTES], data[1024];
    kvt_frame_t f[3];
    harness_raw_msg_t r;
    kvt_msg_t rep;
    json_t *st;

    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"/dev/shm/kvtier-life-%d.arena\"}, \"server\": "
             "{\"stop_drain_ms\": 10000}}",
             (int)getpid());
    o.extra_json = extra;
    h = harness_start(&o);
    ctx = zmq_ctx_new();
    s = harness_raw_open(ctx, h->endpoint, 5000);
    nsid = harness_raw_hello(s, "stop-model", HARNESS_RAW_FP2, 0, 1, 1);
    harness_chain(5, hs, 2);

    /* a reservation under way */
    kvt_put_u64(lens, sizeof data);
    f[0] = (kvt_frame_t){head, harness_raw_head(head, KVT_MSG_SAVE_RESERVE, 2, nsid, 0)};
    f[1] = (kvt_frame_t){&hs[0], sizeof hs[0]};
    f[2] = (kvt_frame_t){lens, sizeof lens};
    ck_assert_int_eq(harness_raw_send(s, f, 3), 0);
    ck_assert_int_eq(harness_raw_recv(s, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_RESERVE_OK);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_WANTED);
    memcpy(locs, rep.u.chunks_ok.locs, sizeof locs);
    harness_raw_msg_close(&r);

    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    st = harness_wait_status(h, pred_draining, NULL, 5000);
    ck_assert_msg(st != NULL, "server.draining never became true");
    json_decref(st);

    /* a new save is refused, a lookup answered */
    memset(data, 7, sizeof data);
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_DATA, 3, nsid, 0);
    f[1] = (kvt_frame_t){&hs[1], sizeof hs[1]};
    f[2] = (kvt_frame_t){data, sizeof data};
    ck_assert_int_eq(harness_raw_send(s, f, 3), 0);
    ck_assert_int_eq(harness_raw_recv(s, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_ERROR);
    ck_assert_int_eq(rep.u.error.code, KVT_WIRE_EBUSY);
    harness_raw_msg_close(&r);
    f[0].len = harness_raw_head(head, KVT_MSG_LOOKUP, 4, nsid, 0);
    ck_assert_int_eq(harness_raw_send(s, f, 2), 0);
    ck_assert_int_eq(harness_raw_recv(s, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOOKUP_OK);
    harness_raw_msg_close(&r);
    ck_assert_int_eq(proc_state(h->pid) != '?', 1); /* still running: the reservation holds it */

    /* the commit of the reservation finishes what was in flight; then the daemon exits */
    f[0].len = harness_raw_head(head, KVT_MSG_SAVE_COMMIT, 5, nsid, 0);
    f[1] = (kvt_frame_t){&hs[0], sizeof hs[0]};
    f[2] = (kvt_frame_t){locs, sizeof locs};
    ck_assert_int_eq(harness_raw_send(s, f, 3), 0);
    ck_assert_int_eq(harness_raw_recv(s, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_STORED);
    harness_raw_msg_close(&r);
    zmq_close(s);
    zmq_ctx_term(ctx);
    harness_reap(h);
    ck_assert(log_has(h, "event=stop_drained deferred_replies=0 reserved_bytes=0 timed_out=0"));
    ck_assert(log_has(h, "event=shutdown clean=1"));
    harness_free(&h);
}
END_TEST

/* Runs kvtierd on a config naming endpoint (its own status socket, a memfd arena, no disk) in
 * h's directory; asserts that it exits non-zero within the harness deadline and returns its log
 * (the caller frees it). */
static char *second_daemon_refused(const harness_t *h, const char *endpoint)
{
    char cfg[256], logp[256], json[1024], *log;
    pid_t pid;
    int wst = 0, fd;
    int64_t deadline;
    FILE *f;

    snprintf(cfg, sizeof cfg, "%s/second.json", h->dir);
    snprintf(logp, sizeof logp, "%s/second.log", h->dir);
    snprintf(json, sizeof json,
             "{\"server\": {\"endpoint\": \"%s\", \"status_socket\": \"%s/second.sock\"}, "
             "\"ram\": {\"capacity_bytes\": \"4MiB\", \"max_chunk_bytes\": \"256KiB\", "
             "\"arena_path\": \"\"}, "
             "\"disk\": {\"enabled\": false, \"dir\": \"%s/second-disk\"}}",
             endpoint, h->dir, h->dir);
    ck_assert_ptr_nonnull(f = fopen(cfg, "w"));
    fputs(json, f);
    fclose(f);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
            _exit(126);
        execl(harness_kvtierd(), "kvtierd", "-c", cfg, (char *)NULL);
        _exit(127);
    }
    deadline = harness_now_ms() + HARNESS_DEADLINE_MS;
    while (waitpid(pid, &wst, WNOHANG) == 0 && harness_now_ms() < deadline)
        usleep(20000);
    if (harness_now_ms() >= deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_abort_msg("a second daemon on %s was still running after %d ms", endpoint,
                     HARNESS_DEADLINE_MS);
    }
    ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) != 0, "second daemon: status 0x%x", wst);
    ck_assert_ptr_nonnull(f = fopen(logp, "r"));
    log = calloc(1, 65536);
    ck_assert_ptr_nonnull(log);
    (void)!fread(log, 1, 65535, f);
    fclose(f);
    return log;
}

/* A second daemon configured with a running one's ipc endpoint (its own status socket and arena)
 * is refused at start, with the reason in its log: libzmq's bind would have unlinked the live
 * socket file and taken the endpoint over, leaving the first daemon serving nobody. The first
 * daemon serves on. A file at the endpoint that is not a socket is refused too (the bind would
 * have deleted it; the session-16 probe). (A stale endpoint file, after a SIGKILL, is bound over:
 * test_reattach.) */
START_TEST(test_endpoint_in_use_refused)
{
    harness_t *h = harness_start(NULL);
    char path[256], ep[300], got[32] = "", *log;
    kvt_client_t *c;
    FILE *f;

    ck_assert_uint_eq(harness_save_chain((c = harness_client(h, "m-ep", 1, 0, 0)), 1, 4, CH, 0), 4);
    log = second_daemon_refused(h, h->endpoint);
    ck_assert_msg(strstr(log, "a process listens on it") != NULL, "second daemon's log:\n%s", log);
    free(log);
    /* the first one still serves its clients, the old connection and a new one */
    ck_assert_uint_eq(harness_load_chain(c, 1, 4, CH, 0), 4);
    kvt_close(&c);
    c = harness_client(h, "m-ep", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(c, 1, 4, CH, 0), 4);
    kvt_close(&c);
    /* a regular file where the endpoint would be */
    snprintf(path, sizeof path, "%s/keep.me", h->dir);
    snprintf(ep, sizeof ep, "ipc://%s", path);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("keep me\n", f);
    fclose(f);
    log = second_daemon_refused(h, ep);
    ck_assert_msg(strstr(log, "not a socket") != NULL, "second daemon's log:\n%s", log);
    free(log);
    ck_assert_ptr_nonnull(f = fopen(path, "r"));
    ck_assert_ptr_nonnull(fgets(got, sizeof got, f));
    fclose(f);
    ck_assert_str_eq(got, "keep me\n");
    harness_stop(&h);
}
END_TEST

static Suite *lifecycle_suite(void)
{
    Suite *su = suite_create("lifecycle");
    TCase *tc = tcase_create("lifecycle");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_notify_ready_watchdog_stopping);
    tcase_add_test(tc, test_reload);
    tcase_add_test(tc, test_stop_finishes_in_flight);
    tcase_add_test(tc, test_endpoint_in_use_refused);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = lifecycle_suite, .scratch = "kvtlc"};
