/*
 * ingest.c - copies and checksums of chunk bytes on the thread pool (see ingest.h).
 *
 * Design: the fused copy and the hash are proto/kvt_csum.h's (one definition for the daemon and
 * libkvtier; its header has the design and the figures): it hashes each 4 KiB block of the frame
 * and streams it into the arena from the cache, so a frames save moves the chunk's bytes once in
 * and once out. The result equals XXH3_64bits() of the whole chunk, which is what clients and
 * the disk records compare against.
 *
 * ingest_run() groups consecutive items into jobs by bytes: the share of one job is the total
 * divided by the workers, but never less than INGEST_JOB_MIN, so a save of a few small chunks is
 * one uv_queue_work and a save of sixteen 2 MiB chunks spreads over every worker. A batch
 * counts its jobs; the after-work callback of the last one calls done.
 *
 * Threads: workers run copy_hash/hash over their own items only; the batch counter and done run
 * on the loop (after-work callbacks).
 */
#include "ingest.h"
#include "kvt_csum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct ingest_batch ingest_batch_t;

typedef struct {
    uv_work_t req;
    ingest_batch_t *b;
    ingest_item_t *items;
    size_t n;
} ingest_job_t;

struct ingest_batch {
    ingest_done_cb done;
    void *arg;
    size_t outstanding;
    ingest_job_t jobs[];
};

static void job_work(uv_work_t *req)
{
    ingest_job_t *j = req->data;

    for (size_t i = 0; i < j->n; i++) {
        ingest_item_t *it = &j->items[i];
        it->csum = it->src != NULL ? kvt_csum_copy(it->dst, it->src, (size_t)it->len)
                                   : kvt_csum(it->dst, (size_t)it->len);
    }
}

static void job_after(uv_work_t *req, int status)
{
    ingest_job_t *j = req->data;
    ingest_batch_t *b = j->b;

    (void)status; /* never cancelled: ingest jobs are not handed to uv_cancel */
    if (--b->outstanding > 0)
        return;
    b->done(b->arg);
    free(b);
}

int ingest_run(uv_loop_t *loop, ingest_item_t *items, size_t n, unsigned workers,
               ingest_done_cb done, void *arg)
{
    uint64_t total = 0, share;
    size_t njobs = 0, i = 0, cap;
    ingest_batch_t *b;

    for (size_t k = 0; k < n; k++)
        total += items[k].len;
    if (workers == 0)
        workers = 1;
    cap = n < workers ? n : workers;
    share = total / workers;
    if (share < INGEST_JOB_MIN)
        share = INGEST_JOB_MIN;
    b = malloc(sizeof *b + cap * sizeof b->jobs[0]);
    if (b == NULL)
        return -ENOMEM;
    b->done = done;
    b->arg = arg;
    /* consecutive items, about share bytes per job; the last possible job takes what is left */
    while (i < n) {
        ingest_job_t *j = &b->jobs[njobs++];
        uint64_t bytes = 0;
        j->items = &items[i];
        j->n = 0;
        do {
            bytes += items[i++].len;
            j->n++;
        } while (i < n && (bytes < share || njobs == cap));
    }
    b->outstanding = njobs;
    for (size_t k = 0; k < njobs; k++) {
        b->jobs[k].b = b;
        b->jobs[k].req.data = &b->jobs[k];
        uv_queue_work(loop, &b->jobs[k].req, job_work, job_after);
    }
    return 0;
}
