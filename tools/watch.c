/*
 * watch.c - the live view of `kvtierctl status --watch` (see watch.h).
 *
 * Design: a loop of fetch, draw, sleep. Each frame is built from the status document alone (the
 * daemon keeps no view state); rates are differences of counters between this sample and the
 * previous one over the monotonic time between them. A frame is written to a buffer first and
 * then to stdout in one call, so a terminal never shows half of one. Namespaces are listed by
 * stored bytes, largest first, sessions in the order status lists them (most recently active
 * first). Lines are cut at 160 columns.
 *
 * Threads: single-threaded; SIGINT and SIGTERM set a flag that ends the loop after the frame.
 */
#include "watch.h"

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tool.h"

#define WATCH_NS_MAX 16
#define WATCH_SESSIONS_MAX 8
#define WATCH_COLS 160
#define WATCH_FRAME_MAX 16384

static volatile sig_atomic_t watch_stop;

static void on_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

typedef struct {
    char buf[WATCH_FRAME_MAX];
    size_t len;
} frame_t;

static void line(frame_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line(frame_t *f, const char *fmt, ...)
{
    char l[WATCH_COLS + 1];
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    vsnprintf(l, sizeof l, fmt, ap);
    va_end(ap);
    n = strlen(l);
    if (f->len + n + 2 > sizeof f->buf)
        return;
    memcpy(f->buf + f->len, l, n);
    f->len += n;
    f->buf[f->len++] = '\n';
}

static double num(const json_t *o, const char *path)
{
    const json_t *v = tool_json_path(o, path);

    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static const char *str(const json_t *o, const char *path)
{
    const char *s = json_string_value(tool_json_path(o, path));

    return s != NULL ? s : "?";
}

/* A rate of the counter at path between prev and cur over dt seconds, or "-" without prev. */
static void rate(const json_t *cur, const json_t *prev, const char *path, double dt, char *buf,
                 size_t cap)
{
    if (prev == NULL || dt <= 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.1f", (num(cur, path) - num(prev, path)) / dt);
}

/* hits / (hits + misses) as a percentage, over the interval (prev given) or in all. */
static void hit_rate(const json_t *cur, const json_t *prev, const char *hits, const char *misses,
                     char *buf, size_t cap)
{
    double h = num(cur, hits) - (prev != NULL ? num(prev, hits) : 0);
    double m = num(cur, misses) - (prev != NULL ? num(prev, misses) : 0);

    if (h + m <= 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.1f%%", 100.0 * h / (h + m));
}

static int by_bytes(const void *a, const void *b)
{
    double x = num(*(json_t *const *)a, "bytes"), y = num(*(json_t *const *)b, "bytes");

    return x > y ? -1 : x < y;
}

static void draw_tiers(frame_t *f, const json_t *st, const json_t *prev, double dt)
{
    char used[24], cap[24], res[24], pin[24], r1[24], r2[24], r3[24];
    const char *dstate = str(st, "disk.state");

    tool_human_bytes(num(st, "ram.used_bytes"), used, sizeof used);
    tool_human_bytes(num(st, "ram.capacity_bytes"), cap, sizeof cap);
    tool_human_bytes(num(st, "ram.reserved_bytes"), res, sizeof res);
    tool_human_bytes(num(st, "ram.pinned_bytes"), pin, sizeof pin);
    line(f, "ram    %s of %s (%.0f%%)  %.0f chunks  reserved %s  pinned %s  evictions/s %s", used,
         cap,
         num(st, "ram.capacity_bytes") > 0
             ? 100.0 * num(st, "ram.used_bytes") / num(st, "ram.capacity_bytes")
             : 0.0,
         num(st, "ram.chunks"), res, pin, (rate(st, prev, "ram.evictions", dt, r1, sizeof r1), r1));
    if (strcmp(dstate, "off") == 0) {
        line(f, "disk   off");
    } else {
        tool_human_bytes(num(st, "disk.used_bytes"), used, sizeof used);
        tool_human_bytes(num(st, "disk.capacity_bytes"), cap, sizeof cap);
        rate(st, prev, "disk.demotions", dt, r1, sizeof r1);
        rate(st, prev, "disk.promotions", dt, r2, sizeof r2);
        rate(st, prev, "disk.demotions_refused", dt, r3, sizeof r3);
        line(f,
             "disk   %s  %s of %s  %.0f chunks  write buffer %.0f  reads %.0f+%.0f queued  "
             "demotions/s %s  promotions/s %s  refused/s %s",
             dstate, used, cap, num(st, "disk.chunks"), num(st, "disk.write_buffer_chunks"),
             num(st, "disk.reads_in_flight"), num(st, "disk.reads_queued"), r1, r2, r3);
    }
    hit_rate(st, prev, "ram.hits", "ram.misses", r1, sizeof r1);
    hit_rate(st, NULL, "ram.hits", "ram.misses", r2, sizeof r2);
    hit_rate(st, prev, "disk.hits", "disk.misses", r3, sizeof r3);
    line(f, "hits   %s now, %s since start (chunks of lookups and loads)  disk loads %s", r1, r2,
         r3);
}

static void draw_ops(frame_t *f, const json_t *st, const json_t *prev, double dt)
{
    const json_t *ops = json_object_get(st, "ops");
    char all[24], l[WATCH_COLS + 1];
    const char *name;
    const json_t *op;
    size_t n;

    rate(st, prev, "server.requests", dt, all, sizeof all);
    n = (size_t)snprintf(l, sizeof l, "ops/s  %s:", all);
    json_object_foreach((json_t *)ops, name, op)
    {
        char path[96], r[24];
        snprintf(path, sizeof path, "ops.%s.count", name);
        rate(st, prev, path, dt, r, sizeof r);
        if (n < sizeof l)
            n += (size_t)snprintf(l + n, sizeof l - n, " %s %s", name, r);
    }
    line(f, "%s", l);
    line(f, "server %.0f clients  %.0f requests  errors %.0f busy %.0f malformed%s",
         num(st, "server.clients"), num(st, "server.requests"), num(st, "server.errors.busy"),
         num(st, "server.errors.malformed"),
         json_is_true(tool_json_path(st, "server.draining")) ? "  STOPPING" : "");
}

static void draw_namespaces(frame_t *f, const json_t *st)
{
    const json_t *nss = json_object_get(st, "namespaces");
    json_t *v[WATCH_NS_MAX * 64];
    size_t n = 0, i;
    json_t *ns;

    json_array_foreach((json_t *)nss, i, ns) if (n < sizeof v / sizeof v[0]) v[n++] = ns;
    qsort(v, n, sizeof v[0], by_bytes);
    line(f, "namespaces %zu%s", json_array_size(nss),
         n > WATCH_NS_MAX ? " (the 16 with the most bytes)" : "");
    if (n == 0)
        return;
    line(f, "  %-28s %-12s %8s %10s  %-34s %s", "model", "revision", "chunks", "bytes", "admission",
         "lookup_skip");
    for (i = 0; i < n && i < WATCH_NS_MAX; i++) {
        char b[24], adm[48], skip[48];
        const json_t *a = tool_json_path(v[i], "gates.admission");
        const json_t *s = tool_json_path(v[i], "gates.lookup_skip");

        tool_human_bytes(num(v[i], "bytes"), b, sizeof b);
        /* the configured policy's estimate: value's density, atom's payoff */
        if (strcmp(str(a, "policy"), "atom") == 0)
            snprintf(adm, sizeof adm, "%s atom payoff %.3f share %.2f",
                     json_is_true(json_object_get(a, "enabled")) ? "on " : "off", num(a, "payoff"),
                     num(a, "share"));
        else
            snprintf(adm, sizeof adm, "%s value density %.3f share %.2f",
                     json_is_true(json_object_get(a, "enabled")) ? "on " : "off", num(a, "density"),
                     num(a, "share"));
        snprintf(skip, sizeof skip, "%s %s skips %.0f",
                 json_is_true(json_object_get(s, "enabled")) ? "on " : "off",
                 json_is_true(json_object_get(s, "load_bearing")) ? "load-bearing" : "idle",
                 num(s, "skips"));
        line(f, "  %-28.28s %-12.12s %8.0f %10s  %-34s %s", str(v[i], "model"),
             str(v[i], "revision")[0] ? str(v[i], "revision") : "-", num(v[i], "chunks"), b, adm,
             skip);
    }
}

static void draw_sessions(frame_t *f, const json_t *st)
{
    const json_t *ss = tool_json_path(st, "server.sessions");
    size_t i;
    json_t *s;

    line(f, "sessions %.0f (most recently active first)", num(st, "server.clients"));
    if (json_array_size(ss) == 0)
        return;
    line(f, "  %-20s %-6s %9s %9s %10s %10s", "id", "path", "idle s", "age s", "reserved",
         "pinned");
    json_array_foreach((json_t *)ss, i, s)
    {
        char r[24], p[24];
        if (i == WATCH_SESSIONS_MAX)
            break;
        tool_human_bytes(num(s, "reserved_bytes"), r, sizeof r);
        tool_human_bytes(num(s, "pinned_bytes"), p, sizeof p);
        line(f, "  %-20.20s %-6s %9.1f %9.1f %10s %10s", str(s, "id"), str(s, "data_path"),
             num(s, "idle_ms") / 1000.0, num(s, "age_ms") / 1000.0, r, p);
    }
}

static void draw(frame_t *f, const json_t *st, const json_t *prev, double dt, double interval_s)
{
    char when[32];
    time_t now = time(NULL);
    struct tm tm;

    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    line(f, "--- kvtierd %s at %s  up %.0f s  pid %.0f  every %.1f s", str(st, "version"), when,
         num(st, "uptime_s"), num(st, "pid"), interval_s);
    draw_tiers(f, st, prev, dt);
    draw_ops(f, st, prev, dt);
    draw_namespaces(f, st);
    draw_sessions(f, st);
}

int watch_run(const char *sock, int timeout_ms, double interval_s, unsigned long count)
{
    struct sigaction sa = {.sa_handler = on_signal};
    bool tty = isatty(STDOUT_FILENO) == 1;
    json_t *prev = NULL;
    int64_t prev_ms = 0;
    static frame_t f;

    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (unsigned long k = 0; !watch_stop && (count == 0 || k < count); k++) {
        json_t *st;
        int64_t now;

        if (k > 0) {
            struct timespec ts = {.tv_sec = (time_t)interval_s,
                                  .tv_nsec =
                                      (long)((interval_s - (double)(time_t)interval_s) * 1e9)};
            while (nanosleep(&ts, &ts) != 0 && !watch_stop)
                ;
            if (watch_stop)
                break;
        }
        if (tool_status_get(sock, timeout_ms, &st, NULL) != 0) {
            json_decref(prev);
            return 3;
        }
        now = tool_now_ms();
        f.len = 0;
        if (tty) { /* home, clear the screen */
            memcpy(f.buf, "\033[H\033[2J", 7);
            f.len = 7;
        }
        draw(&f, st, prev, prev != NULL ? (double)(now - prev_ms) / 1000.0 : 0.0, interval_s);
        if (!tty && f.len < sizeof f.buf)
            f.buf[f.len++] = '\n';
        fwrite(f.buf, 1, f.len, stdout);
        fflush(stdout);
        json_decref(prev);
        prev = st;
        prev_ms = now;
    }
    json_decref(prev);
    return 0;
}
