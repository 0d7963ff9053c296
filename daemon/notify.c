/*
 * notify.c - sd_notify(3) for kvtierd: readiness, status, watchdog, reload, stop (see notify.h).
 *
 * Design: libsystemd's sd_notify() does the protocol (the NOTIFY_SOCKET datagram, abstract or
 * path sockets, credentials); this file only says when. The watchdog is a libuv timer on the
 * daemon's loop, so a ping proves the loop turned: the loop thread serves every request, and a
 * loop wedged in one callback (or a SIGSTOPped process) sends nothing until it turns again. The
 * interval is half of WATCHDOG_USEC, as sd_watchdog_enabled(3) advises. Both timers are unref'd:
 * they never keep the loop alive, so a stop can finish with them still running, and main.c
 * closes them last.
 *
 * Threads: the send functions on any thread; the notify_t on the loop thread only.
 * Invariants: n->open counts the timers not yet through their close callback; n is freed when
 * it reaches 0 after notify_close().
 */
#include "notify.h"

#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

struct notify {
    uv_timer_t watchdog;
    uv_timer_t status;
    notify_summary_fn summary;
    void *arg;
    int open; /* timers not yet closed */
    bool status_on;
};

bool notify_enabled(void)
{
    const char *s = getenv("NOTIFY_SOCKET");

    return s != NULL && s[0] != '\0';
}

static void notify_vsend(const char *prefix, const char *suffix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void notify_vsend(const char *prefix, const char *suffix, const char *fmt, va_list ap)
{
    char msg[NOTIFY_STATUS_MAX + 128];
    size_t n = (size_t)snprintf(msg, sizeof msg, "%s", prefix);
    int k, rc;

    if (!notify_enabled())
        return;
    k = vsnprintf(msg + n, sizeof msg - n, fmt, ap);
    if (k < 0)
        return;
    n += (size_t)k < sizeof msg - n ? (size_t)k : sizeof msg - n - 1;
    snprintf(msg + n, sizeof msg - n, "%s", suffix);
    rc = sd_notify(0, msg);
    if (rc < 0)
        log_debug("notify_failed", "error=\"%s\"", strerror(-rc));
}

void notify_send(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    notify_vsend("", "", fmt, ap);
    va_end(ap);
}

void notify_status(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    notify_vsend("STATUS=", "", fmt, ap);
    va_end(ap);
}

void notify_progress(const char *fmt, ...)
{
    char extend[64];
    va_list ap;

    snprintf(extend, sizeof extend, "\nEXTEND_TIMEOUT_USEC=%llu", NOTIFY_EXTEND_USEC);
    va_start(ap, fmt);
    notify_vsend("STATUS=", extend, fmt, ap);
    va_end(ap);
}

uint64_t notify_watchdog_usec(void)
{
    uint64_t usec = 0;

    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

static void send_summary(notify_t *n, const char *prefix)
{
    char line[NOTIFY_STATUS_MAX];

    line[0] = '\0';
    n->summary(n->arg, line, sizeof line);
    notify_send("%sSTATUS=%s", prefix, line);
}

static void watchdog_cb(uv_timer_t *t)
{
    (void)t;
    notify_send("WATCHDOG=1");
}

static void status_cb(uv_timer_t *t)
{
    send_summary(t->data, "");
}

int notify_start(uv_loop_t *loop, notify_summary_fn fn, void *arg, notify_t **out)
{
    notify_t *n = calloc(1, sizeof *n);
    uint64_t usec = notify_watchdog_usec();

    *out = NULL;
    if (n == NULL)
        return -ENOMEM;
    n->summary = fn;
    n->arg = arg;
    uv_timer_init(loop, &n->watchdog);
    uv_timer_init(loop, &n->status);
    n->watchdog.data = n->status.data = n;
    n->open = 2;
    uv_unref((uv_handle_t *)&n->watchdog);
    uv_unref((uv_handle_t *)&n->status);
    send_summary(n, "READY=1\n");
    if (usec > 0) {
        uint64_t ms = usec / 2000 > 0 ? usec / 2000 : 1;
        log_info("watchdog", "usec=%" PRIu64 " ping_ms=%" PRIu64, usec, ms);
        notify_send("WATCHDOG=1");
        uv_timer_start(&n->watchdog, watchdog_cb, ms, ms);
    }
    if (notify_enabled()) {
        uv_timer_start(&n->status, status_cb, NOTIFY_STATUS_MS, NOTIFY_STATUS_MS);
        n->status_on = true;
    }
    *out = n;
    return 0;
}

void notify_reloading(notify_t *n)
{
    struct timespec ts;

    (void)n;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    notify_send("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=Reloading the configuration",
                (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

void notify_reloaded(notify_t *n)
{
    if (n != NULL)
        send_summary(n, "READY=1\n");
    else
        notify_send("READY=1");
}

void notify_stopping(notify_t *n, const char *status)
{
    if (n != NULL && n->status_on) {
        uv_timer_stop(&n->status);
        n->status_on = false;
    }
    notify_send("STOPPING=1\nSTATUS=%s", status);
}

static void closed_cb(uv_handle_t *h)
{
    notify_t *n = h->data;

    if (--n->open == 0)
        free(n);
}

void notify_close(notify_t **pn)
{
    notify_t *n = pn != NULL ? *pn : NULL;

    if (n == NULL)
        return;
    *pn = NULL;
    uv_close((uv_handle_t *)&n->watchdog, closed_cb);
    uv_close((uv_handle_t *)&n->status, closed_cb);
}
