/*
 * drops.h - tombstones of dropped namespaces, so that a restart does not bring back from the
 * disk segments what an operator dropped (kvtierctl drop, POST /admin/drop).
 *
 * A drop removes a namespace's chunks from the index at once; the records of its disk-only
 * chunks stay in their segments as dead bytes until segment reclaim deletes the files. Recovery
 * reads every valid record, so without a note it would re-index them. A tombstone names the
 * namespace identity (model, revision, layout fingerprint) and a log position (segment id,
 * offset): every record of that namespace at a position below it (lexicographically) is dead.
 * Records are written in the order of their write-buffer tickets, so the position just past the
 * last record queued before the drop separates the dead records from later saves of the same
 * namespace. That position is known once the flush holding that last ticket has finished: a
 * tombstone is added with the log end at the time of the drop and a pending ticket, and is
 * settled (moved to the record of that ticket) when its flush commits.
 *
 * Tombstones live in <disk.dir>/drops, rewritten whole (write, fsync, rename, fsync of the
 * directory) on every change: a few lines, written on operator actions only. One line per
 * tombstone, every string in hex so that any model name is safe:
 *   kvtier-drops 1
 *   <segment> <offset> <fingerprint hex16> <model hex> <revision hex or ->
 * A file that cannot be read or parsed is logged and ignored (an empty set: dropped chunks may
 * come back, live data is never lost). A tombstone whose covered segments are all gone is pruned.
 *
 * Revisions: a record that carries its revision matches a tombstone of that revision only. A
 * record without one (the record format before contract C4, which every record has today) is
 * matched by model and fingerprint alone, so dropping any revision of a model also kills the
 * revision-less records of that model and layout written before the drop: such a record cannot
 * be attributed, and for an invalidation losing a little cache is the safe side of keeping KV
 * that may be stale.
 *
 * Limits: a crash before a pending tombstone settled leaves it at the drop-time log end, so
 * records of the namespace that were still in the write buffer may come back after that crash.
 *
 * Writes: synchronous until drops_attach(), then on the loop's thread pool (0.2.6), one at a
 * time, the last state always written last: a disk that hangs must not stop the loop through an
 * operator's drop or a flush's settle. drops_when_written() tells when the file holds the set as
 * it is now: the admin drop answers only then (a SIGKILL after its answer keeps the drop), and a
 * hung disk holds that answer, not the loop. A failed write is logged (drops_write_failed).
 *
 * Threads: loop thread only (and the start-up before it); the writes' system calls run on a
 * worker.
 */
#ifndef KVT_DROPS_H
#define KVT_DROPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define DROPS_MAX 4096       /* tombstones kept; beyond, the oldest settled one is forgotten */
#define DROPS_WAITERS_MAX 64 /* drops_when_written() callers waiting at once (the HTTP slots) */

typedef struct drops drops_t;

/* Reads <dir>/drops (absent: empty). Returns 0 and *out, or -ENOMEM. A bad file is logged and
 * read as empty. dir is copied. */
int drops_open(const char *dir, drops_t **out);
/* From now on the file is written on loop's thread pool (the start-up's writes were synchronous).
 */
void drops_attach(drops_t *d, uv_loop_t *loop);
/* Frees d. With a write in flight, that write's completion does, after writing the last state
 * synchronously if it changed since: run the loop after it, as the stop does. Waiters still
 * waiting then get -ECANCELED. */
void drops_destroy(drops_t **d);

/* cb(arg, rc) once the file holds the set as it is now with every tombstone settled (rc 0: a
 * crash from then on brings nothing of the dropped namespaces back; 0.2.7, it was called once
 * the pending tombstone was written, and records of the write buffer at the drop could come
 * back), or a write failed (a negative errno). A disk that hangs holds it (the flush that
 * settles never commits). Returns 0 (registered: cb comes later, on the loop), 1 when the file
 * already holds it or its last write failed (nothing to wait for; cb is not called), -EBUSY with
 * DROPS_WAITERS_MAX waiting, or -ENOMEM. */
typedef void (*drops_written_cb)(void *arg, int rc);
int drops_when_written(drops_t *d, drops_written_cb cb, void *arg);

/* Whether the record of (model[0..model_len), revision, fingerprint) at (seg, off) is dead;
 * revision NULL: the record carries none (see above). */
bool drops_covers(const drops_t *d, const char *model, size_t model_len, const char *revision,
                  uint64_t fingerprint, uint64_t seg, uint64_t off);

/* Adds the tombstone of a dropped namespace at log position (seg, off); pending_seq is the last
 * write-buffer ticket queued before the drop that had not committed yet (0: none), after which
 * drops_settle() moves the position. Rewrites the file (see Writes). 0 or a negative errno (the
 * tombstone is kept in memory either way; the caller logs). */
int drops_add(drops_t *d, const char *model, const char *revision, uint64_t fingerprint,
              uint64_t seg, uint64_t off, uint64_t pending_seq);

/* Whether any tombstone waits for a ticket. */
bool drops_pending(const drops_t *d);

/* Ticket seq committed (its record is at (seg, off - 1) or before: pass the position just past
 * it). Every tombstone pending on a ticket <= seq takes that position; rewrites the file when
 * one did. 0 or a negative errno. */
int drops_settle(drops_t *d, uint64_t seq, uint64_t seg, uint64_t off);

/* Forgets the tombstones that cover no segment from first_seg on (the oldest segment that still
 * exists); rewrites the file when one went. */
void drops_prune(drops_t *d, uint64_t first_seg);

#endif /* KVT_DROPS_H */
