/*
 * main.c - kvtierd entry point: arguments, configuration, wiring, signals, shutdown.
 *
 * Wiring only: the loop owns the server (ZeroMQ intake, requests, store, gates) and the HTTP
 * server of the status socket (http.c); main answers its GET /status and /metrics with the
 * documents of stats.c. Shutdown on SIGTERM/SIGINT: stop
 * intake (close the ROUTER and the status socket), let the loop run the close callbacks,
 * terminate the ZeroMQ context, and check that uv_loop_close() returns 0 - the proof that no
 * handle was leaked. A second signal during shutdown exits at once.
 *
 * Exit codes: 0 clean shutdown or a valid config under --check-config; 1 invalid config or a
 * start-up failure (the log line says which); 2 usage error.
 */
#include "config.h"
#include "fsutil.h"
#include "log.h"
#include "server.h"
#include "stats.h"
#include "http.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

typedef struct {
    uv_loop_t *loop;
    server_t *server;
    http_server_t *status;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    int stopping;
} daemon_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: kvtierd -c FILE [--check-config]\n"
               "       kvtierd --print-defaults | --version | --help\n"
               "  -c, --config FILE   configuration (JSON); see configs/kvtierd.json\n"
               "      --check-config  validate the configuration and exit (0 valid, 1 not)\n"
               "      --print-defaults  print every key with its default value\n");
}

static int status_handler(void *arg, const char *path, const char *query, char **body, size_t *len,
                          const char **content_type)
{
    daemon_t *d = arg;

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

static void signal_cb(uv_signal_t *h, int signum)
{
    daemon_t *d = h->data;

    if (d->stopping) {
        log_warn("shutdown", "signal=%d second signal, exiting now", signum);
        _exit(1);
    }
    d->stopping = 1;
    log_info("shutdown", "signal=%d", signum);
    server_close(&d->server);
    http_server_close(&d->status);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
}

static int run(const config_t *cfg)
{
    daemon_t d = {0};
    uv_loop_t loop;
    void *zctx;
    int rc = 1;

    if (strncmp(cfg->server.endpoint, "ipc://", 6) == 0)
        fsutil_mkdirs(cfg->server.endpoint + 6, false);
    fsutil_mkdirs(cfg->server.status_socket, false);
    /* A status client that hangs up before its answer is written must not kill the daemon:
     * writes report EPIPE instead. */
    signal(SIGPIPE, SIG_IGN);
    if (uv_loop_init(&loop) != 0)
        return 1;
    d.loop = &loop;
    zctx = zmq_ctx_new();
    if (zctx == NULL) {
        log_error("zmq_ctx", "error=\"%s\"", zmq_strerror(zmq_errno()));
        goto out_loop;
    }
    if (server_new(&loop, zctx, cfg, &d.server) != 0) {
        uv_run(&loop, UV_RUN_DEFAULT); /* finish closing whatever it had opened */
        goto out_ctx;
    }
    if ((rc = http_server_new(&loop, cfg->server.status_socket, 0660, status_handler, &d,
                              &d.status)) != 0) {
        log_error("status_socket", "path=%s error=\"%s\"", cfg->server.status_socket,
                  uv_strerror(rc));
        server_close(&d.server);
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out_ctx;
    }
    uv_signal_init(&loop, &d.sigterm);
    uv_signal_init(&loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, signal_cb, SIGTERM);
    uv_signal_start(&d.sigint, signal_cb, SIGINT);
    log_info("start",
             "version=%s pid=%d endpoint=%s status_socket=%s ram_capacity_bytes=%" PRIu64
             " arena=\"%s\" max_chunk_bytes=%" PRIu64 " lease_ms=%u",
             KVT_VERSION_STRING, (int)getpid(), cfg->server.endpoint, cfg->server.status_socket,
             cfg->ram.capacity_bytes, cfg->ram.arena_path, cfg->ram.max_chunk_bytes,
             cfg->ram.lease_ms);
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
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},   {"check-config", no_argument, NULL, 'k'},
        {"print-defaults", no_argument, NULL, 'p'}, {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int check = 0, defaults = 0, c;
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
    log_set_level(cfg->log.level);
    rc = run(cfg);
    free(cfg);
    return rc;
}
