/*
 * redis.c - the Redis backend of kvtier-bench's workload (--vs-redis), through hiredis: SET
 * pipelined per batch on save, GET pipelined per batch on load, so that one call costs one round
 * trip like a kvtier call of the same chunks. Keys are "kvtier-bench:<seed>:<rank>:<hash>"; the
 * chunks a round saved are unlinked after its verify step, and whatever a failed round left
 * behind on exit (through a fresh connection, the old one may hold unread replies).
 *
 * Threads: rank threads, each with its own redisContext.
 */
#include "bench.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define BENCH_REDIS_KEY_MAX 96
#define BENCH_REDIS_UNLINK_BLOCK 1024

/* The Redis key of chunk h on this rank; returns its length. */
static size_t redis_key(const rank_t *r, const kvt_hash_t *h, char key[BENCH_REDIS_KEY_MAX])
{
    char hex[33];
    kvt_hash_format(h, hex);
    int n = snprintf(key, BENCH_REDIS_KEY_MAX, "%s:%016" PRIx64 ":%u:%s", BENCH_MODEL, r->b->seed,
                     r->rank, hex);
    return (size_t)n;
}

/* Reads the next pipelined reply; NULL after recording the failure. An error reply fails. */
static redisReply *redis_reply(rank_t *r, const char *what)
{
    void *p = NULL;
    if (redisGetReply(r->redis, &p) != REDIS_OK || !p) {
        rank_fail(r, 1, "redis %s: %s", what, r->redis->errstr);
        return NULL;
    }
    redisReply *x = p;
    if (x->type == REDIS_REPLY_ERROR) {
        rank_fail(r, 1, "redis %s: %s", what, x->str);
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

typedef enum { REDIS_SET, REDIS_GET, REDIS_UNLINK } redis_cmd_t;

static const char *const redis_cmds[] = {"SET", "GET", "UNLINK"};

/* Takes the reply to command cmd on chunk `at`: SET must answer OK (the chunk is then stored),
 * GET copies its value into dst (nil is a miss: lens 0), UNLINK's count is not looked at. */
static int redis_take(rank_t *r, redis_cmd_t cmd, const redisReply *x, size_t at)
{
    size_t chunk = r->b->o.chunk_bytes;
    size_t len = x->type == REDIS_REPLY_STRING ? (size_t)x->len : 0;
    switch (cmd) {
    case REDIS_SET:
        if (x->type != REDIS_REPLY_STATUS || strcmp(x->str, "OK") != 0) {
            rank_fail(r, 1, "redis SET: the reply is not OK");
            return -1;
        }
        r->outcomes[at] = KVT_SAVE_STORED;
        return 0;
    case REDIS_GET:
        if (x->type != REDIS_REPLY_NIL && (x->type != REDIS_REPLY_STRING || len > chunk)) {
            rank_fail(r, 1, "redis GET: reply of type %d, %zu bytes (chunks are %zu)", x->type, len,
                      chunk);
            return -1;
        }
        if (len)
            memcpy(r->dst + at * chunk, x->str, len);
        r->lens[at] = len;
        return 0;
    case REDIS_UNLINK:
        return 0;
    }
    return -1;
}

/* One pipeline: cmd on the keys of chunks [i, i + k) of chain h (SET with the chunk in src as
 * value, binary safe), every command appended before the first reply is read, so a call costs
 * one round trip like a kvtier call of k chunks. */
static int redis_pipeline(rank_t *r, redis_cmd_t cmd, const kvt_hash_t *h, size_t i, size_t k)
{
    size_t chunk = r->b->o.chunk_bytes;
    const char *name = redis_cmds[cmd];
    char key[BENCH_REDIS_KEY_MAX];
    for (size_t j = 0; j < k; j++) {
        size_t klen = redis_key(r, &h[i + j], key);
        const char *val = (const char *)(r->src + (i + j) * chunk);
        int rc = cmd == REDIS_SET ? redisAppendCommand(r->redis, "SET %b %b", key, klen, val, chunk)
                                  : redisAppendCommand(r->redis, "%s %b", name, key, klen);
        if (rc != REDIS_OK) {
            rank_fail(r, 1, "redis %s: %s", name, r->redis->errstr);
            return -1;
        }
    }
    for (size_t j = 0; j < k; j++) {
        redisReply *x = redis_reply(r, name);
        if (!x)
            return -1;
        int rc = redis_take(r, cmd, x, i + j);
        freeReplyObject(x);
        if (rc)
            return -1;
    }
    return 0;
}

int redis_call(rank_t *r, op_t op, const kvt_hash_t *h, size_t i, size_t k)
{
    return redis_pipeline(r, op == OP_SAVE ? REDIS_SET : REDIS_GET, h, i, k);
}

/* Unlinks the chunks saved to Redis since the last call (the chain of the current step). */
int redis_drop(rank_t *r)
{
    for (size_t i = 0; i < r->nrkeys; i += BENCH_REDIS_UNLINK_BLOCK) {
        size_t left = r->nrkeys - i;
        size_t k = left < BENCH_REDIS_UNLINK_BLOCK ? left : BENCH_REDIS_UNLINK_BLOCK;
        if (redis_pipeline(r, REDIS_UNLINK, r->rkeys, i, k))
            return -1;
    }
    r->rkeys = NULL;
    r->nrkeys = 0;
    return 0;
}

void redis_setup(rank_t *r)
{
    const bench_opts_t *o = &r->b->o;
    struct timeval tv = {.tv_sec = BENCH_TIMEOUT_MS / 1000,
                         .tv_usec = BENCH_TIMEOUT_MS % 1000 * 1000};
    r->redis = redisConnectWithTimeout(o->redis_host, o->redis_port, tv);
    if (!r->redis)
        rank_fail(r, 1, "redis %s: out of memory", o->redis_addr);
    else if (r->redis->err)
        rank_fail(r, 1, "redis %s: %s", o->redis_addr, r->redis->errstr);
    else if (redisSetTimeout(r->redis, tv) != REDIS_OK)
        rank_fail(r, 1, "redis %s: cannot set the timeout", o->redis_addr);
}

/* Unlinks what this rank left in Redis (a round cut short by a failure) and disconnects. After
 * a failure the pipeline may hold unread replies: a fresh connection does the cleanup. */
void redis_close(rank_t *r)
{
    if (!r->redis)
        return;
    if (r->nrkeys && ((r->failed && redisReconnect(r->redis) != REDIS_OK) || redis_drop(r)))
        tool_error("rank %u: %zu Redis keys %s:%016" PRIx64 ":%u:* may be left: %s", r->rank,
                   r->nrkeys, BENCH_MODEL, r->b->seed, r->rank, r->redis->errstr);
    redisFree(r->redis);
    r->redis = NULL;
}
