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
 *                    "pinned"}],
 *    "tombstone": "written" | "failed" | "pending"}   (0.2.6; with a disk tier and a match)
 *
 * With a disk tier the answer waits until the tombstones (drops.h) are on file, so that a crash
 * after the answer does not bring the dropped disk copies back; the file is written on the
 * thread pool (0.2.6), so a hung disk holds this answer (until the status socket's timeout
 * closes the connection: the drop itself has happened), not the loop. "failed" carries
 * "tombstone_error"; "pending": too many drops were waiting to answer this one so.
 *
 * Threads: loop thread only (the HTTP server's POST handler).
 */
#ifndef KVT_ADMIN_H
#define KVT_ADMIN_H

#include <stddef.h>

#include "http.h"
#include "server.h"

#define ADMIN_DROP_PATH "/admin/drop"

/* The POST handler of ADMIN_DROP_PATH (http_post_cb with arg = the server_t *). With a disk
 * tier it answers once the tombstones are on file (HTTP_DEFER, server_drops_written). */
int admin_drop(void *arg, const char *query, char **body, size_t *len, const char **content_type,
               http_answer_t *later);

#endif /* KVT_ADMIN_H */
