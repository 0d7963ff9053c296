/*
 * ingest.h - chunk bytes moved and checksummed on the libuv thread pool, never on the loop.
 *
 * Every chunk's commit checksum (csum, PLAN contract C1) is the XXH3-64, seed 0, of its payload
 * bytes, computed by the daemon itself: a shared-memory commit hashes the extent the client
 * wrote; a frames save copies the ZeroMQ frame into its arena extent and hashes it in the same
 * pass (proto/kvt_csum.h: each block hashed, then streamed into the arena from the cache); a
 * re-verification (RELEASE CORRUPT) hashes the extent and compares. ingest_run() spreads a list
 * of such items over at most `workers` thread-pool jobs of at least INGEST_JOB_MIN bytes each,
 * so a large save uses every core while a small one costs one job.
 *
 * Threads: the copies and hashes (proto/kvt_csum.h) run on the workers; ingest_run() and its
 * done callback run on the loop thread. The items (and the bytes they point to) belong to the
 * jobs from ingest_run() until done is called: the caller must not free, move or reuse them
 * meanwhile. A job cannot be cancelled; the caller waits for done (shutdown included).
 */
#ifndef KVT_INGEST_H
#define KVT_INGEST_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define INGEST_JOB_MIN (1u << 20)

typedef struct {
    void *dst;       /* the bytes to hash (and to fill when src is not NULL) */
    const void *src; /* NULL: hash dst as it is */
    uint64_t len;
    uint64_t csum; /* the result, set by the worker */
} ingest_item_t;

typedef void (*ingest_done_cb)(void *arg);

/*
 * Runs items[0..n) (n > 0) on the thread pool in at most workers jobs (workers >= 1); calls
 * done(arg) on the loop once every item's csum is set. Returns 0 (done will be called, never
 * from inside this call) or -ENOMEM (nothing was started).
 */
int ingest_run(uv_loop_t *loop, ingest_item_t *items, size_t n, unsigned workers,
               ingest_done_cb done, void *arg);

#endif /* KVT_INGEST_H */
