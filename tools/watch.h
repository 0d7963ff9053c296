/*
 * watch.h - `kvtierctl status --watch [SECONDS]`: a compact live view of a running kvtierd.
 *
 * Every interval the view fetches GET /status and draws one frame: RAM and disk use, hit rates
 * (over the last interval and since the start), requests per second in all and per request
 * type, the gate state of each namespace (the 16 with the most stored bytes) and the most
 * recently active sessions (8). Rates need two samples: the first frame shows "-" for them. On
 * a terminal each frame replaces the last (the screen is cleared); otherwise the frames are
 * plain text blocks, each opened by a line "--- kvtierd <version> at <UTC time>", so that a log
 * or a pipe keeps them all. The view ends after count frames (0: until SIGINT or SIGTERM, which
 * end it with exit 0) or when the daemon stops answering (exit 3).
 *
 * Threads: single-threaded (the caller's).
 */
#ifndef KVT_TOOLS_WATCH_H
#define KVT_TOOLS_WATCH_H

/* Runs the view against the status socket at sock (each GET bounded by timeout_ms). Returns the
 * program's exit status: 0, or 3 after a message when the status cannot be read. */
int watch_run(const char *sock, int timeout_ms, double interval_s, unsigned long count);

#endif /* KVT_TOOLS_WATCH_H */
