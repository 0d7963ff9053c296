/*
 * session.h - client sessions and what they hold in the arena.
 *
 * A session is one client connection, known by its ZeroMQ routing id (a ROUTER cannot see
 * disconnects, so sessions expire after an idle time and are bounded in number: the least
 * recently active is forgotten first). A session remembers the namespaces it declared, the data
 * path it uses (bytes in frames, or the shared-memory arena), and its holds:
 *
 *   - reservations: arena extents handed out by SAVE_RESERVE that the client is writing and
 *     has not committed yet; each may also pin the stored predecessor of its chunk;
 *   - load pins: stored chunks handed out by a shared-memory LOAD that the client is copying
 *     out and has not released yet (a pinned chunk is neither evicted nor reused).
 *
 * Every hold has a deadline (ram.shm_hold_ms after it was taken). sessions_expire() reclaims
 * holds past their deadline and every hold of a session it forgets, so a client that crashes
 * or hangs mid-save or mid-load costs the arena nothing after a bounded time. A correct client
 * never touches an extent after its deadline (libkvtier checks it before copying).
 *
 * Threads: loop thread only. Ownership: the table owns its sessions and holds; extents of
 * reservations belong to the session until committed (then to the index) or reclaimed.
 */
#ifndef KVT_SESSION_H
#define KVT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_proto.h"
#include "store.h"

#define SESSION_NS_MAX 16
#define SESSION_ID_MAX 256

typedef enum {
    SESSION_PATH_NONE = 0,
    SESSION_PATH_FRAMES = 1,
    SESSION_PATH_SHM = 2,
} session_path_t;

typedef struct session session_t;
typedef struct sessions sessions_t;

/* A table of at most max sessions releasing holds through store (borrowed). NULL on failure. */
sessions_t *sessions_new(uint32_t max, store_t *store);
/* Reclaims every hold, frees every session, sets *t to NULL. */
void sessions_destroy(sessions_t **t);

/* The session of routing id (id, len), created if new (forgetting the least recently active
 * one when the table is full), marked active at now_ms. NULL for an id longer than
 * SESSION_ID_MAX or on allocation failure. */
session_t *sessions_get(sessions_t *t, const void *id, size_t len, uint64_t now_ms);

/* The session of routing id (id, len) if it is known, else NULL; nothing is created or marked
 * active (a reply completed later looks its session up again: it may have been forgotten). */
session_t *sessions_find(const sessions_t *t, const void *id, size_t len);

/* Forgets sessions idle for more than idle_ms and reclaims holds past their deadline. */
void sessions_expire(sessions_t *t, uint64_t now_ms, uint64_t idle_ms);

uint32_t sessions_count(const sessions_t *t);
uint64_t sessions_reserved_bytes(const sessions_t *t);
uint64_t sessions_pinned_bytes(const sessions_t *t);

/* Records that s declared namespace ns: 0, or -ENOSPC beyond SESSION_NS_MAX. */
int session_declare(session_t *s, uint32_t ns);
bool session_has(const session_t *s, uint32_t ns);
void session_set_path(session_t *s, session_path_t path);

/* Holds a reservation of (off, len) for chunk (ns, rank, hash) until deadline_ms; keep (may be
 * NULL) is pinned (store_pin) until the reservation ends. 0 or -ENOMEM (nothing is held then). */
int session_reserve(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                    const kvt_wire_hash_t *h, uint64_t off, uint64_t len, store_chunk_t *keep,
                    uint64_t deadline_ms);

/* Ends s's reservation for (ns, rank, hash) and returns its extent, now owned by the caller:
 * 0, or -ENOENT when s holds no such reservation (never made, committed or reclaimed). */
int session_take_reservation(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                             const kvt_wire_hash_t *h, uint64_t *off, uint64_t *len);

/* Pins stored chunk c for s until deadline_ms (a load pin, store_pin). 0 or -ENOMEM. */
int session_pin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                store_chunk_t *c, uint64_t deadline_ms);

/* Drops s's load pin of (ns, rank, hash): 1 when one was dropped, 0 when none was held. */
int session_unpin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                  const kvt_wire_hash_t *h);

/* One session as status shows it. */
typedef struct {
    char id[2 * SESSION_ID_MAX + 1]; /* the routing id in lowercase hex */
    session_path_t data_path;
    uint32_t namespaces[SESSION_NS_MAX]; /* the ids it declared */
    size_t nnamespaces;
    uint64_t idle_ms;        /* since its last request */
    uint64_t age_ms;         /* since its first request */
    uint64_t reserved_bytes; /* held by its reservations */
    uint64_t pinned_bytes;   /* held by its load pins */
} session_info_t;

/* Describes up to max sessions into out[], most recently active first; returns how many. */
size_t sessions_info(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max);

#endif /* KVT_SESSION_H */
