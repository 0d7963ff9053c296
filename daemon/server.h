/*
 * server.h - the request side of kvtierd: ZeroMQ intake, sessions, dispatch of the protocol's
 * requests to the store and the gates, per-operation statistics, and the status documents.
 *
 * Every request gets exactly one reply: its *_OK, or ERROR with a wire code and a text. A
 * session is one client connection (one ROUTER routing id); it remembers the namespaces the
 * client declared with HELLO, and requests naming any other namespace are refused (ENONS).
 * Sessions idle for server.client_idle_ms are forgotten; at most server.max_clients are kept
 * (the least recently active is forgotten first).
 *
 * Threads: loop thread only. Ownership: the server owns the store, the namespace table, the
 * sessions and its ZeroMQ socket; it borrows the loop, the ZeroMQ context and the config, which
 * must outlive it.
 */
#ifndef KVT_SERVER_H
#define KVT_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "config.h"

typedef struct server server_t;

/* Creates the store (RAM arena) and binds the endpoint. Returns 0 or a negative errno, with a
 * log line saying what failed. */
int server_new(uv_loop_t *loop, void *zctx, const config_t *cfg, server_t **out);

/* Stops intake and closes the server's handles; memory is released in the close callbacks, so
 * the loop must run afterwards. Sets *sv to NULL. */
void server_close(server_t **sv);

/* GET /status: a newly allocated JSON document (caller frees). Returns 0 or -ENOMEM. */
int server_status_json(server_t *sv, char **body, size_t *len);

/* GET /metrics: a newly allocated Prometheus text document (caller frees). */
int server_metrics_text(server_t *sv, char **body, size_t *len);

#endif /* KVT_SERVER_H */
