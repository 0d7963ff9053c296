/*
 * session.h - client sessions: what each one declared, what it holds in the daemon, and the
 * bounds on it (contract C3 of the phase B plan).
 *
 * A session is one client connection, known by its ZeroMQ routing id. A ROUTER cannot see
 * disconnects, so sessions expire after an idle time; their number is bounded, and when the table
 * is full a new client is refused (EBUSY) rather than an established one forgotten. Only HELLO
 * creates a session: any other request from an unknown routing id is answered without one.
 *
 * A session remembers the namespaces it declared (each declaration counts in the namespace's
 * `sessions`, so a namespace nobody declares can expire), the data path it uses, and what it
 * holds:
 *
 *   - reservations: arena extents handed out by SAVE_RESERVE that the client is writing and
 *     has not committed yet; each may also pin the stored predecessor of its chunk;
 *   - load pins: stored chunks handed out by a shared-memory LOAD that the client is copying
 *     out and has not released yet (a pinned chunk is neither evicted nor reused);
 *   - leases: bytes its lookups leased, until the leases expire (a lease lives in the index;
 *     the session only remembers what it cost, in buckets of SESSION_LEASE_BUCKET_MS, so a cost
 *     ends up to one bucket before its lease);
 *   - charges: replies that are deferred or queued in ZeroMQ (requests in flight), their bytes
 *     (heap copies and arena bytes lent to ZeroMQ) and the disk reads they wait for.
 *
 * Every hold has a deadline (ram.shm_hold_ms after it was taken). sessions_expire() reclaims
 * holds past their deadline and every hold of a session it forgets, so a client that crashes
 * or hangs mid-save or mid-load costs the arena nothing after a bounded time. A correct client
 * never touches an extent after its deadline (libkvtier checks it before copying).
 *
 * Bounds (session_limits_t, from the config): requests in flight, reply bytes, held bytes
 * (leased + pinned + lent + reserved), disk reads and namespaces, per session and (reply bytes,
 * held bytes) for all sessions together. sessions_check() says which bound a request's cost
 * would pass; the server refuses it with EBUSY naming that bound.
 *
 * Lifetime: a session is referenced by the table and by each charge. Forgetting it (idle, peer
 * gone, table destroyed) releases its holds and its namespaces at once; its memory stays while
 * charges are out (their replies are in ZeroMQ or waiting for disk reads) and goes with the last
 * session_uncharge(). Such a session is dead: no request reaches it again.
 *
 * A session whose reply could not be queued (its ZeroMQ queue was full) is stalled
 * (session_stall): its holds are released and its requests are dropped unanswered until every
 * reply it still has in ZeroMQ has left the daemon; then it is served again.
 *
 * Threads: loop thread only. Ownership: the table owns its sessions and holds; extents of
 * reservations belong to the session until committed (then to the index) or reclaimed. The store
 * and the namespace table are borrowed and must outlive the table.
 */
#ifndef KVT_SESSION_H
#define KVT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_proto.h"
#include "ns.h"
#include "store.h"

#define SESSION_NS_MAX 16
#define SESSION_ID_MAX 256
#define SESSION_LEASE_BUCKET_MS 100u /* lease costs expire in steps of this (rounded down) */

typedef enum {
    SESSION_PATH_NONE = 0,
    SESSION_PATH_FRAMES = 1,
    SESSION_PATH_SHM = 2,
} session_path_t;

typedef struct session session_t;
typedef struct sessions sessions_t;

/* The bounds of contract C3; 0 nowhere means "unbounded". */
typedef struct {
    uint32_t max_sessions;    /* server.max_clients */
    uint32_t in_flight;       /* server.max_in_flight: requests in flight per session */
    uint32_t namespaces;      /* server.session_max_namespaces (<= SESSION_NS_MAX) */
    uint64_t reply_bytes;     /* server.session_reply_bytes */
    uint64_t max_reply_bytes; /* server.max_reply_bytes: all sessions */
    uint64_t held_bytes;      /* ram.session_held_share x ram.capacity_bytes */
    uint64_t max_held_bytes;  /* ram.max_held_share x ram.capacity_bytes: all sessions */
    uint32_t disk_reads;      /* disk.session_max_reads */
} session_limits_t;

/* Which bound a request would pass (status `server.refused.<name>`). */
typedef enum {
    SESSION_BOUND_NONE = 0,
    SESSION_BOUND_CLIENTS,         /* server.max_clients */
    SESSION_BOUND_IN_FLIGHT,       /* server.max_in_flight */
    SESSION_BOUND_NAMESPACES,      /* server.session_max_namespaces */
    SESSION_BOUND_MAX_NAMESPACES,  /* server.max_namespaces (the namespace table, ns.h) */
    SESSION_BOUND_REPLY_BYTES,     /* server.session_reply_bytes */
    SESSION_BOUND_MAX_REPLY_BYTES, /* server.max_reply_bytes */
    SESSION_BOUND_HELD,            /* ram.session_held_share */
    SESSION_BOUND_MAX_HELD,        /* ram.max_held_share */
    SESSION_BOUND_DISK_READS,      /* disk.session_max_reads */
    SESSION_BOUND_MAX_DISK_READS,  /* disk.max_reads_queued (checked by the server) */
    SESSION_BOUND_COUNT
} session_bound_t;

/* The config key of a bound ("server.max_in_flight"); its name in status is stats.c's. */
const char *session_bound_key(session_bound_t b);

/* What a session holds or has in flight (the session's own, or the sum over sessions). */
typedef struct {
    uint32_t in_flight;      /* replies deferred or queued in ZeroMQ */
    uint64_t reply_bytes;    /* their bytes: heap copies and lent arena bytes */
    uint64_t lent_bytes;     /* arena bytes of those replies (pinned chunks lent to ZeroMQ) */
    uint32_t disk_reads;     /* disk reads their loads wait for */
    uint64_t leased_bytes;   /* bytes leased by its lookups, until the leases expire */
    uint64_t pinned_bytes;   /* shared-memory load pins */
    uint64_t reserved_bytes; /* shared-memory reservations (the arena bytes they take) */
    uint32_t namespaces;     /* namespaces declared */
} session_usage_t;

/* Held bytes: what keeps arena space from being evicted or reused. */
static inline uint64_t session_usage_held(const session_usage_t *u)
{
    return u->leased_bytes + u->pinned_bytes + u->lent_bytes + u->reserved_bytes;
}

/* One reply's cost: a request in flight (requests is 1), its bytes and its disk reads. */
typedef struct {
    uint32_t requests;
    uint64_t reply_bytes;
    uint64_t lent_bytes;
    uint32_t disk_reads;
} session_charge_t;

/* A table within limits (copied) releasing holds through store and namespace declarations
 * through nst (both borrowed). NULL on failure. */
sessions_t *sessions_new(const session_limits_t *limits, store_t *store, ns_table_t *nst);
/* Forgets every session (reclaiming holds) and frees the table; every charge must have been
 * returned (asserted). Sets *t to NULL. */
void sessions_destroy(sessions_t **t);

/* The session of routing id (id, len), marked active at now_ms. Unknown ids get a new session
 * only when create is set. Returns 0 and *out, -ENOENT (unknown, not created), -EBUSY (the table
 * holds limits.max_sessions sessions), -EINVAL (an id longer than SESSION_ID_MAX or empty),
 * -ENOMEM. */
int sessions_get(sessions_t *t, const void *id, size_t len, uint64_t now_ms, bool create,
                 session_t **out);

/* Forgets sessions idle for more than idle_ms, reclaims holds past their deadline and expires
 * lease costs. */
void sessions_expire(sessions_t *t, uint64_t now_ms, uint64_t idle_ms);

/* Forgets s now (its peer is gone): as an idle expiry. */
void sessions_forget(sessions_t *t, session_t *s);

uint32_t sessions_count(const sessions_t *t);
uint64_t sessions_reserved_bytes(const sessions_t *t);
uint64_t sessions_pinned_bytes(const sessions_t *t);

/* The sum over sessions (forgotten ones whose charges are still out included); leased_bytes is
 * what every lease still running cost, whoever took it. */
void sessions_usage(const sessions_t *t, uint64_t now_ms, session_usage_t *out);

/* Counters of the table (status "server"). */
typedef struct {
    uint64_t refused[SESSION_BOUND_COUNT]; /* requests refused (EBUSY) per bound */
    uint64_t stalls;                       /* sessions stalled by a full ZeroMQ queue */
    uint64_t peers_gone;                   /* sessions forgotten because their peer was gone */
    uint64_t expired;                      /* sessions forgotten for being idle */
} sessions_counters_t;

const sessions_counters_t *sessions_counters(const sessions_t *t);
const session_limits_t *sessions_limits(const sessions_t *t);

/* --- bounds and charges --- */

/* The first bound that c, plus held_extra new held bytes (a lease, a reservation, shared-memory
 * pins), would take s or all sessions past, or SESSION_BOUND_NONE. Expired lease costs are
 * dropped first. */
session_bound_t sessions_check(sessions_t *t, session_t *s, uint64_t now_ms,
                               const session_charge_t *c, uint64_t held_extra);

/* Counts a request of s refused for bound b. */
void session_refused(sessions_t *t, session_t *s, session_bound_t b);

/* Adds c to s (and the table's sums) and takes a reference on s until session_uncharge(). */
void session_charge(sessions_t *t, session_t *s, const session_charge_t *c);
/* Returns c; may free a forgotten session whose last charge this was, and unstalls a stalled
 * session whose last reply left. */
void session_uncharge(sessions_t *t, session_t *s, const session_charge_t *c);

/* Remembers that s's lookup leased bytes until until_ms. */
void session_lease(sessions_t *t, session_t *s, uint64_t bytes, uint64_t until_ms);

/* Marks s stalled and releases its reservations and load pins (see above). */
void session_stall(sessions_t *t, session_t *s);
bool session_stalled(const session_t *s);
/* Whether s was forgotten (only its charges keep it). */
bool session_dead(const session_t *s);
/* Counts a reply to s that was not delivered. */
void session_reply_dropped(session_t *s);

/* A reference that keeps s's memory (not its place in the table) until session_unref(). */
void session_ref(session_t *s);
void session_unref(sessions_t *t, session_t *s);

const session_usage_t *session_usage(const session_t *s);

/* Records that s declared namespace ns: 0, or -ENOSPC beyond limits.namespaces. */
int session_declare(sessions_t *t, session_t *s, ns_t *ns);
bool session_has(const session_t *s, uint32_t ns);
void session_set_path(session_t *s, session_path_t path);

/* --- shared-memory holds --- */

/* Holds a reservation of (off, len) for chunk (ns, rank, hash) until deadline_ms; keep (may be
 * NULL) is pinned (store_pin) until the reservation ends; drops is the namespace's count of
 * operator drops (ns_t.drops), given back at the commit: a reservation made before a drop is not
 * published after it. 0, -ENOMEM, or -EBUSY when s holds 64 reservations of that chunk already
 * (0.2.14: a bound on the holds of one key; nothing is held then). */
int session_reserve(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                    const kvt_wire_hash_t *h, uint64_t off, uint64_t len, store_chunk_t *keep,
                    uint64_t deadline_ms, uint64_t drops);

/* Ends s's reservation for (ns, rank, hash) and returns its extent in *off, *len, now owned by
 * the caller, and the drops it was made under: 0, or -ENOENT when s holds no such reservation
 * (never made, committed or reclaimed). On entry *off, *len are the extent the commit names: when
 * s holds several reservations of that chunk (a hash repeated in one SAVE_RESERVE) the one of
 * that extent is taken, else the first (the caller then sees the extents differ). */
int session_take_reservation(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                             const kvt_wire_hash_t *h, uint64_t *off, uint64_t *len,
                             uint64_t *drops);

/* Pins stored chunk c for s until deadline_ms (a load pin, store_pin). A chunk s pins already
 * counts one more pin on its hold (charged and store-pinned once, until the latest deadline),
 * so that repeats cost no memory and no probe. 0 or -ENOMEM. */
int session_pin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                store_chunk_t *c, uint64_t deadline_ms);

/* Drops one of s's load pins of (ns, rank, hash), the hold with the last: 1 when one was
 * dropped, 0 when none was held. */
int session_unpin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                  const kvt_wire_hash_t *h);

/* --- status --- */

/* One session as status shows it. */
typedef struct {
    char id[2 * SESSION_ID_MAX + 1]; /* a keyed hash of the routing id, 16 hex digits (session.c) */
    session_path_t data_path;
    uint32_t namespaces[SESSION_NS_MAX]; /* the ids it declared */
    size_t nnamespaces;
    uint64_t idle_ms;        /* since its last request */
    uint64_t age_ms;         /* since its first request */
    uint64_t reserved_bytes; /* held by its reservations */
    uint64_t pinned_bytes;   /* held by its load pins */
    session_usage_t use;     /* everything it holds (use.reserved/pinned_bytes as above) */
    uint64_t held_bytes;     /* session_usage_held(&use) */
    bool stalled;
    uint64_t refused;         /* its requests refused over a bound */
    uint64_t replies_dropped; /* replies to it that were not delivered */
} session_info_t;

/* Describes up to max sessions into out[], most recently active first; returns how many. */
size_t sessions_info(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max);

/* Describes the (up to) max sessions that hold the most (held bytes + reply bytes, then disk
 * reads, then requests in flight), largest first; returns how many. O(sessions x max). */
size_t sessions_top(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max);

#endif /* KVT_SESSION_H */
