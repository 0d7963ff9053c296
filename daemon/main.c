/*
 * main.c - kvtierd entry point: arguments, configuration, wiring, the service lifecycle
 * (readiness, watchdog, reload, graceful stop), signals.
 *
 * Wiring only: the loop owns the server (ZeroMQ intake, requests, store, gates) and the HTTP
 * server of the status socket (http.c); main answers its GET /status and /metrics with the
 * documents of stats.c and its POST /admin/drop with admin.c.
 *
 * Lifecycle (notify.h says what systemd sees):
 *   - start: the server is created (the RAM arena, the disk tier's recovery, which reports its
 *     progress, the RAM tier's re-attach and the gate state of the last clean stop), then the
 *     status socket; only then, in one place (run() below), READY=1. Every recovery runs
 *     inside server_new() and so before READY. --cold-start: this start does not re-attach.
 *   - SIGHUP: reload_config() (reload.h); an invalid file keeps the running config.
 *   - SIGTERM / SIGINT, a graceful stop within the unit's TimeoutStopSec (30 s): STOPPING=1;
 *     saves are refused while what is in flight finishes (server_drain, at most
 *     server.stop_drain_ms, default 2 s); then intake stops (the ROUTER and the status socket
 *     close), the RAM-only chunks are written to the disk tier (at most 20 s, store.c) and its
 *     write buffer is flushed; the loop runs the close callbacks, the ZeroMQ context terminates
 *     and uv_loop_close() must return 0 - the proof that no handle was leaked. A second signal
 *     during the stop exits at once (exit 1), and so does a stop that has not finished within
 *     server.stop_timeout_ms (25 s: a disk that hangs; see stop_deadline_main).
 * The signal handlers are installed before the server is created, so a signal that arrives
 * during recovery is acted on once the loop runs (a SIGHUP never kills the daemon).
 *
 * Exit codes: 0 clean shutdown or a valid config under --check-config; 1 invalid config or a
 * start-up failure (the log line says which); 2 usage error.
 */
#include "admin.h"
#include "config.h"
#include "fsutil.h"
#include "http.h"
#include "log.h"
#include "notify.h"
#include "reload.h"
#include "server.h"
#include "stats.h"
#include "store.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

typedef struct {
    uv_loop_t *loop;
    const char *config_path;
    config_t *cfg;
    server_t *server;
    http_server_t *status;
    notify_t *notify;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;
    int stopping;
} daemon_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: kvtierd -c FILE [--check-config] [--cold-start]\n"
               "       kvtierd --print-defaults | --version | --help\n"
               "  -c, --config FILE   configuration (JSON); see configs/kvtierd.json\n"
               "      --check-config  validate the configuration and exit (0 valid, 1 not)\n"
               "      --cold-start    ignore what the RAM arena holds (ram.reattach stays as set)\n"
               "      --print-defaults  print every key with its default value\n"
               "Signals: SIGHUP reloads the configuration, SIGTERM or SIGINT stops gracefully.\n");
}

static int status_handler(void *arg, const char *path, const char *query, char **body, size_t *len,
                          const char **content_type)
{
    daemon_t *d = arg;

    if (d->server == NULL)
        return 404; /* stopping: the server is gone, the socket closes next */
    if (strcmp(path, "/status") == 0) {
        *content_type = "application/json";
        return stats_status_json_query(d->server, query, body, len) == 0 ? 200 : 500;
    }
    if (strcmp(path, "/metrics") == 0) {
        *content_type = "text/plain; version=0.0.4";
        return stats_metrics_text(d->server, body, len) == 0 ? 200 : 500;
    }
    return 404;
}

static int drop_handler(void *arg, const char *query, char **body, size_t *len,
                        const char **content_type, http_answer_t *later)
{
    daemon_t *d = arg;

    if (d->server == NULL)
        return 500;
    return admin_drop(d->server, query, body, len, content_type, later);
}

static void summary_cb(void *arg, char *buf, size_t cap)
{
    daemon_t *d = arg;

    if (d->server != NULL)
        stats_summary_line(d->server, buf, cap);
    else
        snprintf(buf, cap, "Stopping");
}

static void close_signals(daemon_t *d)
{
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
}

/* The stop's second step: what was in flight is done (or the drain timed out). */
static void drained_cb(void *arg)
{
    daemon_t *d = arg;

    notify_status(d->cfg->disk.enabled ? "Stopping: writing the RAM-only chunks to the disk tier"
                                       : "Stopping: closing");
    server_close(&d->server);
    http_server_close(&d->status);
    close_signals(d);
}

/*
 * The stop's deadline (server.stop_timeout_ms, counted from the stop signal). A disk that does
 * not answer can hold a stop: workers block in system calls that never return, and the loop
 * itself blocks in the few small synchronous writes of a stop (the gate state's fsync in
 * disk.dir). So the deadline is a thread of its own, not a loop timer: when it passes, the
 * daemon exits 1 as a crash would. A file arena with its journal is re-attached at the next
 * start and the disk tier recovers from its segments; what was RAM-only in a memfd arena is
 * lost, as it would be to systemd's SIGKILL a few seconds later. _exit: libuv's destructor
 * would join the blocked workers. A stop that finishes first returns from main, which ends
 * the thread with the process.
 */
static void *stop_deadline_main(void *arg)
{
    unsigned ms = *(const unsigned *)arg;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    log_error("shutdown",
              "stop_timeout_ms=%u action=exit reason=\"the stop did not finish: a "
              "disk that does not answer (status disk.flush_running_seconds)\"",
              ms);
    _exit(1);
    return NULL;
}

static void stop_deadline_start(unsigned ms)
{
    static unsigned deadline_ms;
    pthread_attr_t attr;
    pthread_t t;

    deadline_ms = ms;
    if (ms == 0 || pthread_attr_init(&attr) != 0)
        return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, stop_deadline_main, &deadline_ms) != 0)
        log_warn("shutdown", "stop_timeout_ms=%u error=\"no deadline thread\"", ms);
    pthread_attr_destroy(&attr);
}

static void signal_cb(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;

    if (d->stopping) {
        log_warn("shutdown", "signal=%d second signal, exiting now", signum);
        _exit(1);
    }
    d->stopping = 1;
    log_info("shutdown", "signal=%d drain_ms=%u timeout_ms=%u", signum,
             d->cfg->server.stop_drain_ms, d->cfg->server.stop_timeout_ms);
    stop_deadline_start(d->cfg->server.stop_timeout_ms);
    notify_stopping(d->notify, "Stopping: finishing the requests in flight (no new saves)");
    server_drain(d->server, d->cfg->server.stop_drain_ms, drained_cb, d);
}

static void sighup_cb(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;

    (void)signum;
    if (d->stopping) {
        log_info("reload", "path=%s action=ignored reason=stopping", d->config_path);
        return;
    }
    notify_reloading(d->notify);
    reload_config(d->config_path, d->cfg, d->server);
    notify_reloaded(d->notify);
}

static int run(const char *config_path, config_t *cfg)
{
    daemon_t d = {.config_path = config_path, .cfg = cfg};
    uv_loop_t loop;
    void *zctx;
    int rc = 1;

    char pool[16];

    /* The thread pool is sized before the loop queues its first job (libuv reads this once):
     * the disk's jobs must never occupy every thread (store.h, store_pool_threads). */
    snprintf(pool, sizeof pool, "%u", store_pool_threads(cfg));
    setenv("UV_THREADPOOL_SIZE", pool, 1);
    if (strncmp(cfg->server.endpoint, "ipc://", 6) == 0)
        fsutil_mkdirs(cfg->server.endpoint + 6, false);
    fsutil_mkdirs(cfg->server.status_socket, false);
    /* A status client that hangs up before its answer is written must not kill the daemon:
     * writes report EPIPE instead. */
    signal(SIGPIPE, SIG_IGN);
    if (uv_loop_init(&loop) != 0)
        return 1;
    d.loop = &loop;
    uv_signal_init(&loop, &d.sigterm);
    uv_signal_init(&loop, &d.sigint);
    uv_signal_init(&loop, &d.sighup);
    d.sigterm.data = d.sigint.data = d.sighup.data = &d;
    uv_signal_start(&d.sigterm, signal_cb, SIGTERM);
    uv_signal_start(&d.sigint, signal_cb, SIGINT);
    uv_signal_start(&d.sighup, sighup_cb, SIGHUP);
    zctx = zmq_ctx_new();
    if (zctx == NULL) {
        log_error("zmq_ctx", "error=\"%s\"", zmq_strerror(zmq_errno()));
        close_signals(&d);
        uv_run(&loop, UV_RUN_DEFAULT);
        goto out_loop;
    }
    notify_status("Starting: creating the RAM arena (%" PRIu64 " MiB)%s",
                  cfg->ram.capacity_bytes >> 20,
                  cfg->disk.enabled ? ", then recovering the disk tier" : "");
    if (server_new(&loop, zctx, cfg, &d.server) != 0) {
        close_signals(&d);
        uv_run(&loop, UV_RUN_DEFAULT); /* finish closing whatever it had opened */
        goto out_ctx;
    }
    server_config_state(d.server)->path = config_path;
    if ((rc = http_server_new(&loop, cfg->server.status_socket, 0660, status_handler, &d,
                              &d.status)) != 0 ||
        (rc = http_server_set_post(d.status, ADMIN_DROP_PATH, drop_handler, &d)) != 0) {
        log_error("status_socket", "path=%s error=\"%s\"", cfg->server.status_socket,
                  uv_strerror(rc));
        http_server_close(&d.status);
        server_close(&d.server);
        close_signals(&d);
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out_ctx;
    }
    log_info("start",
             "version=%s pid=%d endpoint=%s status_socket=%s ram_capacity_bytes=%" PRIu64
             " arena=\"%s\" max_chunk_bytes=%" PRIu64 " lease_ms=%u pool_threads=%s",
             KVT_VERSION_STRING, (int)getpid(), cfg->server.endpoint, cfg->server.status_socket,
             cfg->ram.capacity_bytes, cfg->ram.arena_path, cfg->ram.max_chunk_bytes,
             cfg->ram.lease_ms, pool);
    /* Every recovery ran inside server_new(): ready now, and only here. */
    if (notify_start(&loop, summary_cb, &d, &d.notify) != 0)
        log_warn("notify", "error=\"%s\"", strerror(ENOMEM));
    log_info("ready", "notify=%d watchdog_usec=%" PRIu64, notify_enabled(), notify_watchdog_usec());
    uv_run(&loop, UV_RUN_DEFAULT);
    /* Only the notify timers are left (unref'd): close them and let their callbacks run. */
    notify_close(&d.notify);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = 0;

out_ctx:
    if (zctx != NULL)
        zmq_ctx_term(zctx);
out_loop:
    if (uv_loop_close(&loop) != 0) {
        log_error("shutdown", "uv_loop_close=busy (a handle was leaked)");
        rc = 1;
    } else if (rc == 0) {
        log_info("shutdown", "clean=1");
    }
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"check-config", no_argument, NULL, 'k'},
                                         {"print-defaults", no_argument, NULL, 'p'},
                                         {"version", no_argument, NULL, 'V'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"cold-start", no_argument, NULL, 'C'},
                                         {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int check = 0, defaults = 0, cold = 0, c;
    char err[512];
    config_t *cfg = malloc(sizeof *cfg);
    int rc;

    if (cfg == NULL)
        return 1;
    while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'k':
            check = 1;
            break;
        case 'p':
            defaults = 1;
            break;
        case 'C':
            cold = 1;
            break;
        case 'V':
            printf("kvtierd %s\n", KVT_VERSION_STRING);
            free(cfg);
            return 0;
        case 'h':
            usage(stdout);
            free(cfg);
            return 0;
        default:
            usage(stderr);
            free(cfg);
            return 2;
        }
    }
    config_defaults(cfg);
    if (defaults) {
        char *s = config_dump(cfg);
        rc = s != NULL ? 0 : 1;
        if (s != NULL)
            puts(s);
        free(s);
        free(cfg);
        return rc;
    }
    if (path == NULL || optind != argc) {
        usage(stderr);
        free(cfg);
        return 2;
    }
    if (config_load(path, cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtierd: %s\n", err);
        free(cfg);
        return 1;
    }
    if (check) {
        printf("kvtierd: %s: ok\n", path);
        free(cfg);
        return 0;
    }
    cfg->cold_start = cold != 0;
    log_set_level(cfg->log.level);
    rc = run(path, cfg);
    free(cfg);
    return rc;
}
