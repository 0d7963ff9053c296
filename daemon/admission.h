/*
 * admission.h - save admission once per save operation (docs/GATES.md section 2): the part of
 * the gates that needs memory across requests.
 *
 * Every rank of an engine saves its own shard of the same chunks, so one save operation arrives
 * as one request per rank (SAVE_BEGIN, SAVE_DATA, SAVE_RESERVE). The namespace's gate
 * (gates_admit) must decide the operation once and every rank must get that answer:
 * admission_decide() takes the decision for the first rank that presents the operation and
 * remembers it (saveops.h) for the others. An operation is named by the client's op id when
 * the request carries KVT_SAVE_OPID, else by (first chunk hash, chunk count). An operation all
 * of whose chunks are stored already gets no decision and consumes no credit. The deciding
 * request's WANTED chunks are the operation's offer to the gate (gates_admit_op: the tokens it
 * counts, the ghost table of declined chunks).
 *
 * Threads: loop thread only. Ownership: the admission state owns its table of decisions; the
 * namespaces (and their gates) are borrowed for each call.
 */
#ifndef KVT_ADMISSION_H
#define KVT_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_proto.h"
#include "ns.h"

typedef struct admission admission_t;

/* NULL on allocation failure. */
admission_t *admission_new(void);
void admission_destroy(admission_t **a);

/*
 * The admission of save request req (SAVE_BEGIN, SAVE_DATA or SAVE_RESERVE of namespace ns)
 * whose per-chunk status (req->u.save.nhashes entries, from store_save_query) holds wanted
 * WANTED chunks. With wanted == 0 nothing is decided and true is returned. Otherwise the
 * operation's decision is taken (the first time) or recalled; when it declines, every WANTED
 * chunk becomes DECLINED. Returns whether the operation is admitted.
 */
bool admission_decide(admission_t *a, ns_t *ns, const kvt_msg_t *req, uint64_t now_ms,
                      size_t wanted, uint8_t *status);

/* Save operations whose decision is remembered now (status: server.save_ops_remembered). */
uint32_t admission_remembered(const admission_t *a);

#endif /* KVT_ADMISSION_H */
