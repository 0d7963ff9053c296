/*
 * admin.h - the operators' actions on the status socket (mode 0660: the kvtier group only).
 *
 * POST /admin/drop?ns=NAME[&revision=R] removes the chunks of every namespace whose model is
 * NAME (and whose revision is R, when given; `revision=` alone names the namespaces declared
 * without one) from RAM and disk (server_drop_ns). Parameters are percent-decoded ('+' is a
 * space); an unknown parameter, a missing or empty ns, or one given twice is 400. The answer is
 * JSON: 200 with what was dropped per namespace, 404 when no namespace matched, 400 with
 * {"error": ...}:
 *
 *   {"ns": NAME, "revision": R | null, "chunks": N, "bytes": N,
 *    "namespaces": [{"id", "model", "revision", "chunks", "bytes", "ram_chunks", "disk_chunks",
 *                    "pinned"}]}
 *
 * Threads: loop thread only (the HTTP server's POST handler).
 */
#ifndef KVT_ADMIN_H
#define KVT_ADMIN_H

#include <stddef.h>

#include "server.h"

#define ADMIN_DROP_PATH "/admin/drop"

/* The POST handler of ADMIN_DROP_PATH (http_post_cb with arg = the server_t *). */
int admin_drop(void *arg, const char *query, char **body, size_t *len, const char **content_type);

#endif /* KVT_ADMIN_H */
