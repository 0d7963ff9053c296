/*
 * notify.h - the daemon's side of the systemd service protocol (sd_notify(3), libsystemd):
 * readiness, status lines, the watchdog, reload and stop notifications.
 *
 * Under systemd (Type=notify) the service manager passes NOTIFY_SOCKET, and WATCHDOG_USEC when
 * the unit sets WatchdogSec=. Without NOTIFY_SOCKET every call here does nothing, so the daemon
 * runs the same from a shell, a test or another supervisor. Messages are one datagram each
 * ("READY=1\nSTATUS=..."); a failed send is logged at debug and otherwise ignored (the service
 * manager is not part of the data path).
 *
 * The lifecycle, in the order main.c sends it:
 *   - STATUS= lines while starting and while recovery runs (notify_status, notify_progress; a
 *     progress line also extends the start timeout, EXTEND_TIMEOUT_USEC, so that a long but
 *     advancing recovery is not killed by TimeoutStartSec);
 *   - READY=1 once, after every recovery (notify_start, called in one place: main.c's run(),
 *     after the server and the status socket exist), with the first one-line summary;
 *   - while running: WATCHDOG=1 from a timer on the loop every WATCHDOG_USEC / 2 (only a loop
 *     that turns pings: a wedged loop or a stopped process stops pinging and systemd restarts
 *     the daemon), and STATUS=<summary> every NOTIFY_STATUS_MS;
 *   - RELOADING=1 (with MONOTONIC_USEC) and READY=1 around a configuration reload;
 *   - STOPPING=1 when a stop begins, STATUS= lines while it drains and persists.
 *
 * Threads: notify_send, notify_status and notify_progress may be called from any thread
 * (sd_notify opens its own socket per call); the notify_t and its timers belong to the loop
 * thread.
 */
#ifndef KVT_NOTIFY_H
#define KVT_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define NOTIFY_STATUS_MS 5000u         /* steady-state STATUS= refresh */
#define NOTIFY_EXTEND_USEC 30000000ull /* what one recovery progress line adds to the start */
#define NOTIFY_STATUS_MAX 256          /* bytes of one STATUS= text */

/* Whether NOTIFY_SOCKET names a service manager to talk to. */
bool notify_enabled(void);

/* Sends the message fmt (newline-separated KEY=VALUE assignments). Nothing without
 * NOTIFY_SOCKET. */
void notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS=<text>. */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS=<text> and EXTEND_TIMEOUT_USEC=NOTIFY_EXTEND_USEC: a start-up step (recovery) made
 * progress. */
void notify_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval systemd asked for (WATCHDOG_USEC, for this process), or 0 when none. */
uint64_t notify_watchdog_usec(void);

typedef struct notify notify_t;

/* Writes the one-line steady-state summary into buf (cap bytes, NUL-terminated). Called on the
 * loop thread. */
typedef void (*notify_summary_fn)(void *arg, char *buf, size_t cap);

/* The daemon is ready: sends READY=1 with the first summary and starts the watchdog timer (when
 * WATCHDOG_USEC is set) and the status timer (when NOTIFY_SOCKET is set). The timers do not
 * keep the loop alive (uv_unref), so they ping through a stop until the rest has closed; close
 * them with notify_close(). fn and arg are borrowed until then. Returns 0 or -ENOMEM. */
int notify_start(uv_loop_t *loop, notify_summary_fn fn, void *arg, notify_t **out);

/* A reload begins (RELOADING=1) / ended (READY=1 with the summary). */
void notify_reloading(notify_t *n);
void notify_reloaded(notify_t *n);

/* A stop begins: STOPPING=1 with the status text. The status timer stops (the stop's own
 * STATUS= lines follow); the watchdog keeps pinging while the loop turns. */
void notify_stopping(notify_t *n, const char *status);

/* Closes the timers (the loop must run afterwards) and frees n in their close callbacks; sets
 * *n to NULL. NULL and *n == NULL are accepted. */
void notify_close(notify_t **n);

#endif /* KVT_NOTIFY_H */
