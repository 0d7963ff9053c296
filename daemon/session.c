/*
 * session.c - client sessions, their holds, charges and bounds (see session.h).
 *
 * Design: sessions live in a chained hash table keyed by routing id and on one activity list
 * (head = least recently active), so expiring idle ones is O(1) per session. Holds are a
 * per-session array with an open-addressing index over it (hold_find): a session may hold tens of
 * thousands within its bounds (4 KiB chunks up to ram.session_held_share), and until 0.2.7 each
 * hash of a COMMIT or RELEASE was searched linearly, 0.4 s of the loop per RELEASE of 4096
 * hashes held by no one. The index is keyed by XXH3 of (kind, namespace, rank, hash) with a
 * random seed of the table, so a client cannot choose hashes that collide in it.
 *
 * Accounting is incremental: every counter of session_usage_t is kept per session and summed in
 * the table as it changes, so checking a bound is O(1) on the request path. Lease costs are kept
 * in rings of (expiry, bytes) buckets, one per session and one for the table (leases outlive the
 * session that took them): every lease lasts ram.lease_ms, so expiries arrive in order and a
 * bucket per SESSION_LEASE_BUCKET_MS bounds a ring to lease_ms / bucket + 1 entries.
 *
 * Reference counting: the table holds one reference on each session it lists, every charge one
 * more. A forgotten session is unlinked at once (holds released, namespaces undeclared, flagged
 * dead) and freed with its last reference; the table's sums keep its charges until they return.
 *
 * Threads: loop thread only.
 * Invariants: the table's usage sums equal the sums over its sessions, listed or dead, except
 * leased_bytes (the table's ring keeps the costs of forgotten sessions until they expire); a dead
 * session holds no reservation, pin, lease cost or namespace.
 */
#include "session.h"

#include "array.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

#define HOLD_SAME_KEY_SCAN 64 /* holds of one key a commit looks through for its extent */

typedef enum { HOLD_RESERVE, HOLD_PIN } hold_kind_t;

typedef struct {
    uint8_t kind;
    uint16_t rank;
    uint32_t ns;
    kvt_wire_hash_t hash;
    uint64_t off, len;    /* HOLD_RESERVE: the extent */
    store_chunk_t *chunk; /* HOLD_RESERVE: pinned predecessor or NULL; HOLD_PIN: the chunk */
    uint64_t deadline_ms;
    uint32_t hh;    /* its key's hash (hold_hash): where the index looks for it */
    uint32_t count; /* HOLD_PIN: pins of this chunk by the session (releases to go) */
    uint64_t drops; /* HOLD_RESERVE: the namespace's drops when it was made (session_reserve) */
} hold_t;

/* Lease costs by expiry, oldest first (a ring). */
typedef struct {
    struct lease_bucket {
        uint64_t until_ms;
        uint64_t bytes;
    } * b;
    size_t head, n, cap;
} lease_ring_t;

struct session {
    session_t *hnext;
    session_t *prev, *next;
    uint64_t last_ms;
    uint64_t created_ms;
    uint32_t ns[SESSION_NS_MAX];
    int nns;
    uint8_t path;
    bool dead;
    bool stalled;
    uint32_t refs;
    hold_t *holds;
    size_t nholds, cap;
    uint32_t *slots; /* the index over holds: a hold's position + 1, 0 empty; at most half full */
    uint32_t nslots; /* a power of two, or 0 before the first hold */
    session_usage_t use;
    lease_ring_t leases;
    uint64_t refused;
    uint64_t replies_dropped;
    size_t idlen;
    uint8_t id[SESSION_ID_MAX];
};

struct sessions {
    store_t *store;
    ns_table_t *nst;
    session_limits_t lim;
    session_t **buckets;
    uint32_t nbuckets;
    uint32_t n;
    session_t *head, *tail;
    session_usage_t use; /* every session's, dead ones included; leases: see lease_ring */
    lease_ring_t leases; /* every lease cost still running */
    uint64_t charges;    /* charges out (references other than the table's) */
    sessions_counters_t counters;
    uint64_t id_key; /* the seed of the ids status shows (info_fill), random per daemon */
};

static const char *const bound_keys[SESSION_BOUND_COUNT] = {
    [SESSION_BOUND_NONE] = "",
    [SESSION_BOUND_CLIENTS] = "server.max_clients",
    [SESSION_BOUND_IN_FLIGHT] = "server.max_in_flight",
    [SESSION_BOUND_NAMESPACES] = "server.session_max_namespaces",
    [SESSION_BOUND_MAX_NAMESPACES] = "server.max_namespaces",
    [SESSION_BOUND_REPLY_BYTES] = "server.session_reply_bytes",
    [SESSION_BOUND_MAX_REPLY_BYTES] = "server.max_reply_bytes",
    [SESSION_BOUND_HELD] = "ram.session_held_share",
    [SESSION_BOUND_MAX_HELD] = "ram.max_held_share",
    [SESSION_BOUND_DISK_READS] = "disk.session_max_reads",
    [SESSION_BOUND_MAX_DISK_READS] = "disk.max_reads_queued",
};

const char *session_bound_key(session_bound_t b)
{
    return b < SESSION_BOUND_COUNT ? bound_keys[b] : "";
}

/* --- lease rings --- */

/* Drops the buckets that expired by now_ms; returns the bytes they held. */
static uint64_t ring_expire(lease_ring_t *r, uint64_t now_ms)
{
    uint64_t gone = 0;

    while (r->n > 0 && r->b[r->head].until_ms <= now_ms) {
        gone += r->b[r->head].bytes;
        r->head = (r->head + 1) % r->cap;
        r->n--;
    }
    return gone;
}

/* Adds bytes expiring at until_ms, rounded down to a bucket: a cost never outlives its lease
 * (a client that waited for its leases to end finds its bound free), at the price of a bound
 * that new leases may pass by one bucket's worth for the bucket's time. 0 or -ENOMEM. */
static int ring_add(lease_ring_t *r, uint64_t bytes, uint64_t until_ms)
{
    uint64_t until = until_ms / SESSION_LEASE_BUCKET_MS * SESSION_LEASE_BUCKET_MS;

    if (r->n > 0) {
        struct lease_bucket *tail = &r->b[(r->head + r->n - 1) % r->cap];
        if (tail->until_ms >= until) { /* same bucket, or earlier after a reload shortened
                                          ram.lease_ms: the cost then outlives its lease */
            tail->bytes += bytes;
            return 0;
        }
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        struct lease_bucket *nb = malloc(cap * sizeof *nb);
        if (nb == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < r->n; i++)
            nb[i] = r->b[(r->head + i) % r->cap];
        free(r->b);
        r->b = nb;
        r->cap = cap;
        r->head = 0;
    }
    r->b[(r->head + r->n) % r->cap] = (struct lease_bucket){.until_ms = until, .bytes = bytes};
    r->n++;
    return 0;
}

static void session_leases_expire(sessions_t *t, session_t *s, uint64_t now_ms)
{
    s->use.leased_bytes -= ring_expire(&s->leases, now_ms);
    t->use.leased_bytes -= ring_expire(&t->leases, now_ms);
}

/* --- the table --- */

static uint32_t id_hash(const uint8_t *id, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ id[i]) * 16777619u;
    return h;
}

sessions_t *sessions_new(const session_limits_t *limits, store_t *store, ns_table_t *nst)
{
    sessions_t *t = calloc(1, sizeof *t);

    if (t == NULL)
        return NULL;
    t->store = store;
    t->nst = nst;
    t->lim = *limits;
    if (t->lim.namespaces == 0 || t->lim.namespaces > SESSION_NS_MAX)
        t->lim.namespaces = SESSION_NS_MAX;
    t->nbuckets = 1;
    while (t->nbuckets < t->lim.max_sessions && t->nbuckets < (1u << 20))
        t->nbuckets <<= 1;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    if (t->buckets == NULL) {
        free(t);
        return NULL;
    }
    if (getrandom(&t->id_key, sizeof t->id_key, GRND_NONBLOCK) != (ssize_t)sizeof t->id_key)
        t->id_key = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)t;
    return t;
}

static void hold_end(sessions_t *t, session_t *s, hold_t *h)
{
    if (h->kind == HOLD_RESERVE) {
        uint64_t foot = store_footprint(t->store, h->len);
        store_unreserve(t->store, h->off, h->len);
        s->use.reserved_bytes -= foot;
        t->use.reserved_bytes -= foot;
        if (h->chunk != NULL)
            store_unpin(t->store, h->chunk);
    } else {
        uint64_t len = store_chunk_len(h->chunk);
        s->use.pinned_bytes -= len;
        t->use.pinned_bytes -= len;
        store_unpin(t->store, h->chunk); /* may free the entry */
    }
}

/* The slot of the index that points at hold i. */
static uint32_t slot_of(const session_t *s, size_t i)
{
    uint32_t mask = s->nslots - 1, j = s->holds[i].hh & mask;

    while (s->slots[j] != (uint32_t)i + 1)
        j = (j + 1) & mask;
    return j;
}

/* Empties slot j, moving later entries of its probe run back (no tombstones: a lookup stops at
 * the first empty slot). */
static void slot_delete(session_t *s, uint32_t j)
{
    uint32_t mask = s->nslots - 1, k = j;

    s->slots[j] = 0;
    for (;;) {
        uint32_t home;
        k = (k + 1) & mask;
        if (s->slots[k] == 0)
            return;
        home = s->holds[s->slots[k] - 1].hh & mask;
        /* the entry at k may move to j unless its home lies cyclically in (j, k] */
        if (j < k ? home <= j || home > k : home <= j && home > k) {
            s->slots[j] = s->slots[k];
            s->slots[k] = 0;
            j = k;
        }
    }
}

/* Removes hold i (order is not kept: the last hold takes its place). */
static void hold_remove(session_t *s, size_t i)
{
    size_t last = s->nholds - 1;

    slot_delete(s, slot_of(s, i));
    if (i != last) {
        s->slots[slot_of(s, last)] = (uint32_t)i + 1;
        s->holds[i] = s->holds[last];
    }
    s->nholds = last;
}

/* Ends every hold of s. */
static void holds_release(sessions_t *t, session_t *s)
{
    for (size_t i = 0; i < s->nholds; i++)
        hold_end(t, s, &s->holds[i]);
    s->nholds = 0;
    if (s->slots != NULL)
        memset(s->slots, 0, s->nslots * sizeof *s->slots);
}

static void list_unlink(sessions_t *t, session_t *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        t->head = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    else
        t->tail = s->prev;
    s->prev = s->next = NULL;
}

static void list_append(sessions_t *t, session_t *s)
{
    s->prev = t->tail;
    s->next = NULL;
    if (t->tail != NULL)
        t->tail->next = s;
    else
        t->head = s;
    t->tail = s;
}

static void session_free(session_t *s)
{
    free(s->holds);
    free(s->slots);
    free(s->leases.b);
    free(s);
}

void session_ref(session_t *s)
{
    s->refs++;
}

void session_unref(sessions_t *t, session_t *s)
{
    (void)t;
    assert(s->refs > 0);
    if (--s->refs == 0) {
        assert(s->dead);
        session_free(s);
    }
}

/* Unlinks s from the table, releases what it holds and drops the table's reference. */
static void session_drop(sessions_t *t, session_t *s)
{
    session_t **pp = &t->buckets[id_hash(s->id, s->idlen) & (t->nbuckets - 1)];

    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    s->hnext = NULL;
    list_unlink(t, s);
    holds_release(t, s);
    for (int i = 0; i < s->nns; i++) {
        ns_t *ns = ns_get(t->nst, s->ns[i]);
        if (ns != NULL)
            ns_undeclare(ns);
    }
    t->use.namespaces -= (uint32_t)s->nns;
    s->use.namespaces = 0;
    s->nns = 0;
    /* its lease costs stay in the table's ring: the leases run on in the index */
    s->use.leased_bytes = 0;
    s->dead = true;
    t->n--;
    session_unref(t, s);
}

void sessions_destroy(sessions_t **pt)
{
    sessions_t *t = *pt;

    if (t == NULL)
        return;
    while (t->head != NULL)
        session_drop(t, t->head);
    assert(t->charges == 0); /* the server returned every charge before (zcref, store drained) */
    free(t->leases.b);
    free(t->buckets);
    free(t);
    *pt = NULL;
}

int sessions_get(sessions_t *t, const void *id, size_t len, uint64_t now_ms, bool create,
                 session_t **out)
{
    uint32_t b;
    session_t *s;

    *out = NULL;
    if (len == 0 || len > SESSION_ID_MAX)
        return -EINVAL;
    b = id_hash(id, len) & (t->nbuckets - 1);
    for (s = t->buckets[b]; s != NULL; s = s->hnext)
        if (s->idlen == len && memcmp(s->id, id, len) == 0)
            break;
    if (s == NULL) {
        if (!create)
            return -ENOENT;
        if (t->n >= t->lim.max_sessions)
            return -EBUSY; /* established sessions are not forgotten for a newcomer */
        s = calloc(1, sizeof *s);
        if (s == NULL)
            return -ENOMEM;
        memcpy(s->id, id, len);
        s->idlen = len;
        s->created_ms = now_ms;
        s->refs = 1;
        s->hnext = t->buckets[b];
        t->buckets[b] = s;
        t->n++;
    } else {
        list_unlink(t, s);
    }
    list_append(t, s);
    s->last_ms = now_ms;
    *out = s;
    return 0;
}

void sessions_expire(sessions_t *t, uint64_t now_ms, uint64_t idle_ms)
{
    while (t->head != NULL && now_ms - t->head->last_ms > idle_ms) {
        t->counters.expired++;
        session_drop(t, t->head);
    }
    t->use.leased_bytes -= ring_expire(&t->leases, now_ms);
    for (session_t *s = t->head; s != NULL; s = s->next) {
        s->use.leased_bytes -= ring_expire(&s->leases, now_ms);
        for (size_t i = 0; i < s->nholds;) {
            if (s->holds[i].deadline_ms <= now_ms) {
                hold_end(t, s, &s->holds[i]);
                hold_remove(s, i);
            } else {
                i++;
            }
        }
    }
}

void sessions_forget(sessions_t *t, session_t *s)
{
    if (s->dead)
        return;
    t->counters.peers_gone++;
    session_drop(t, s);
}

uint32_t sessions_count(const sessions_t *t)
{
    return t->n;
}

uint64_t sessions_reserved_bytes(const sessions_t *t)
{
    return t->use.reserved_bytes;
}

uint64_t sessions_pinned_bytes(const sessions_t *t)
{
    return t->use.pinned_bytes;
}

void sessions_usage(const sessions_t *t, uint64_t now_ms, session_usage_t *out)
{
    const lease_ring_t *r = &t->leases;

    *out = t->use;
    /* the sweep expires buckets once a second or more often: leave out those past already */
    for (size_t i = 0; i < r->n; i++) {
        const struct lease_bucket *lb = &r->b[(r->head + i) % r->cap];
        if (lb->until_ms > now_ms)
            break;
        out->leased_bytes -= lb->bytes;
    }
}

const sessions_counters_t *sessions_counters(const sessions_t *t)
{
    return &t->counters;
}

const session_limits_t *sessions_limits(const sessions_t *t)
{
    return &t->lim;
}

/* --- bounds and charges --- */

static bool over(uint64_t have, uint64_t add, uint64_t limit)
{
    return limit != 0 && (add > limit || have > limit - add);
}

session_bound_t sessions_check(sessions_t *t, session_t *s, uint64_t now_ms,
                               const session_charge_t *c, uint64_t held_extra)
{
    const session_limits_t *l = &t->lim;
    uint64_t held = c->lent_bytes + held_extra;

    session_leases_expire(t, s, now_ms);
    if (c->requests > 0 && over(s->use.in_flight, c->requests, l->in_flight))
        return SESSION_BOUND_IN_FLIGHT;
    if (c->reply_bytes > 0 && over(s->use.reply_bytes, c->reply_bytes, l->reply_bytes))
        return SESSION_BOUND_REPLY_BYTES;
    if (c->reply_bytes > 0 && over(t->use.reply_bytes, c->reply_bytes, l->max_reply_bytes))
        return SESSION_BOUND_MAX_REPLY_BYTES;
    if (held > 0 && over(session_usage_held(&s->use), held, l->held_bytes))
        return SESSION_BOUND_HELD;
    if (held > 0 && over(session_usage_held(&t->use), held, l->max_held_bytes))
        return SESSION_BOUND_MAX_HELD;
    if (c->disk_reads > 0 && over(s->use.disk_reads, c->disk_reads, l->disk_reads))
        return SESSION_BOUND_DISK_READS;
    return SESSION_BOUND_NONE;
}

void session_refused(sessions_t *t, session_t *s, session_bound_t b)
{
    if (b < SESSION_BOUND_COUNT)
        t->counters.refused[b]++;
    if (s != NULL)
        s->refused++;
}

static void usage_add(session_usage_t *u, const session_charge_t *c)
{
    u->in_flight += c->requests;
    u->reply_bytes += c->reply_bytes;
    u->lent_bytes += c->lent_bytes;
    u->disk_reads += c->disk_reads;
}

static void usage_sub(session_usage_t *u, const session_charge_t *c)
{
    assert(u->in_flight >= c->requests && u->reply_bytes >= c->reply_bytes &&
           u->lent_bytes >= c->lent_bytes && u->disk_reads >= c->disk_reads);
    u->in_flight -= c->requests;
    u->reply_bytes -= c->reply_bytes;
    u->lent_bytes -= c->lent_bytes;
    u->disk_reads -= c->disk_reads;
}

void session_charge(sessions_t *t, session_t *s, const session_charge_t *c)
{
    usage_add(&s->use, c);
    usage_add(&t->use, c);
    t->charges++;
    session_ref(s);
}

void session_uncharge(sessions_t *t, session_t *s, const session_charge_t *c)
{
    usage_sub(&s->use, c);
    usage_sub(&t->use, c);
    t->charges--;
    if (s->stalled && s->use.in_flight == 0)
        s->stalled = false; /* everything it had queued has left: serve it again */
    session_unref(t, s);
}

/* Records bytes in r; when the ring cannot grow they join its newest bucket (they then expire
 * later, never earlier). false when they could not be recorded at all. */
static bool ring_record(lease_ring_t *r, uint64_t bytes, uint64_t until_ms)
{
    if (ring_add(r, bytes, until_ms) == 0)
        return true;
    if (r->n == 0)
        return false;
    r->b[(r->head + r->n - 1) % r->cap].bytes += bytes;
    return true;
}

void session_lease(sessions_t *t, session_t *s, uint64_t bytes, uint64_t until_ms)
{
    if (bytes == 0)
        return;
    if (ring_record(&s->leases, bytes, until_ms))
        s->use.leased_bytes += bytes;
    if (ring_record(&t->leases, bytes, until_ms))
        t->use.leased_bytes += bytes;
}

void session_stall(sessions_t *t, session_t *s)
{
    if (s->stalled || s->dead)
        return;
    s->stalled = true;
    t->counters.stalls++;
    holds_release(t, s);
}

bool session_stalled(const session_t *s)
{
    return s->stalled;
}

bool session_dead(const session_t *s)
{
    return s->dead;
}

void session_reply_dropped(session_t *s)
{
    s->replies_dropped++;
}

const session_usage_t *session_usage(const session_t *s)
{
    return &s->use;
}

int session_declare(sessions_t *t, session_t *s, ns_t *ns)
{
    if (session_has(s, ns->id))
        return 0;
    if ((uint32_t)s->nns >= t->lim.namespaces)
        return -ENOSPC;
    s->ns[s->nns++] = ns->id;
    s->use.namespaces++;
    t->use.namespaces++;
    ns_declared(t->nst, ns);
    return 0;
}

bool session_has(const session_t *s, uint32_t ns)
{
    for (int i = 0; i < s->nns; i++)
        if (s->ns[i] == ns)
            return true;
    return false;
}

void session_set_path(session_t *s, session_path_t path)
{
    s->path = (uint8_t)path;
}

/* --- shared-memory holds --- */

static uint32_t hold_hash(const sessions_t *t, hold_kind_t kind, uint32_t ns, uint16_t rank,
                          const kvt_wire_hash_t *h)
{
    uint8_t key[4 + 2 + 1 + KVT_HASH_BYTES];

    memcpy(key, &ns, 4);
    memcpy(key + 4, &rank, 2);
    key[6] = (uint8_t)kind;
    memcpy(key + 7, h->b, KVT_HASH_BYTES);
    return (uint32_t)XXH3_64bits_withSeed(key, sizeof key, t->id_key);
}

/* Puts hold position + 1 (val) in the first free slot of its probe run from home hh. */
static void slot_put(uint32_t *slots, uint32_t nslots, uint32_t hh, uint32_t val)
{
    uint32_t j = hh & (nslots - 1);

    while (slots[j] != 0)
        j = (j + 1) & (nslots - 1);
    slots[j] = val;
}

/* Room in the index for one more hold (rebuilt twice as large when it would pass half full):
 * 0 or -ENOMEM (the index unchanged). */
static int index_reserve(session_t *s)
{
    uint32_t n = s->nslots ? s->nslots : 32, *slots;

    while ((uint64_t)(s->nholds + 1) * 2 > n) {
        if (n >= (1u << 31))
            return -ENOMEM;
        n <<= 1;
    }
    if (n == s->nslots)
        return 0;
    slots = calloc(n, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < s->nholds; i++)
        slot_put(slots, n, s->holds[i].hh, (uint32_t)i + 1);
    free(s->slots);
    s->slots = slots;
    s->nslots = n;
    return 0;
}

/* The hold of (kind, ns, rank, h) with extent at[0], at[1] (off, len), or else the first of that
 * key; with at NULL the first of the key; -1 when there is none. Reservations are the holds a key
 * can have several of (a hash repeated in one SAVE_RESERVE reserves it once per mention): a
 * commit takes the one it names. The walk stops at the HOLD_SAME_KEY_SCAN-th hold of the key, so
 * that a client that repeats a hash thousands of times and commits them in another order than it
 * reserved them costs a bounded walk per commit (that client gets EINVAL instead: the first
 * hold's extent is not the one it named). */
static long hold_find_at(const sessions_t *t, const session_t *s, hold_kind_t kind, uint32_t ns,
                         uint16_t rank, const kvt_wire_hash_t *h, const uint64_t *at,
                         uint32_t *nkey)
{
    long first = -1;
    uint32_t hh, mask, j, seen = 0;

    if (nkey != NULL)
        *nkey = 0;

    if (s->nholds == 0)
        return -1;
    hh = hold_hash(t, kind, ns, rank, h);
    mask = s->nslots - 1;
    for (j = hh & mask; s->slots[j] != 0; j = (j + 1) & mask) {
        const hold_t *x = &s->holds[s->slots[j] - 1];
        if (x->hh != hh || x->kind != kind || x->ns != ns || x->rank != rank ||
            memcmp(x->hash.b, h->b, KVT_HASH_BYTES) != 0)
            continue;
        if (at == NULL || (x->off == at[0] && x->len == at[1]))
            return (long)s->slots[j] - 1;
        if (first < 0)
            first = (long)s->slots[j] - 1;
        if (nkey != NULL)
            *nkey = seen + 1;
        if (++seen == HOLD_SAME_KEY_SCAN)
            break;
    }
    return first;
}

/* Index of a hold of this kind for (ns, rank, hash), or -1. */
static long hold_find(const sessions_t *t, const session_t *s, hold_kind_t kind, uint32_t ns,
                      uint16_t rank, const kvt_wire_hash_t *h)
{
    return hold_find_at(t, s, kind, ns, rank, h, NULL, NULL);
}

/* A new hold of s for chunk (ns, rank, h) until deadline_ms, pinning chunk when not NULL; NULL
 * on allocation failure (nothing held). */
static hold_t *hold_add(sessions_t *t, session_t *s, hold_kind_t kind, uint32_t ns, uint16_t rank,
                        const kvt_wire_hash_t *h, store_chunk_t *chunk, uint64_t deadline_ms)
{
    hold_t *x;

    if (index_reserve(s) != 0 || ARRAY_RESERVE(s->holds, s->nholds, s->cap, 16) != 0)
        return NULL;
    x = &s->holds[s->nholds];
    *x = (hold_t){.kind = (uint8_t)kind,
                  .ns = ns,
                  .rank = rank,
                  .chunk = chunk,
                  .deadline_ms = deadline_ms,
                  .hh = hold_hash(t, kind, ns, rank, h),
                  .count = 1};
    memcpy(x->hash.b, h->b, KVT_HASH_BYTES);
    slot_put(s->slots, s->nslots, x->hh, (uint32_t)++s->nholds);
    if (chunk != NULL)
        store_pin(t->store, chunk);
    return x;
}

int session_reserve(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                    const kvt_wire_hash_t *h, uint64_t off, uint64_t len, store_chunk_t *keep,
                    uint64_t deadline_ms, uint64_t drops)
{
    static const uint64_t none[2] = {UINT64_MAX, 0}; /* no reservation has length 0 */
    uint32_t nkey;
    hold_t *x;
    uint64_t foot;

    /* the holds of one key share one run of the index: HOLD_SAME_KEY_SCAN of them at most, so
     * that a hash a client reserves over and over cannot make every operation on the index walk
     * thousands of them (65,536 made loop turns of 2.2 s as they expired: the session-16 probe) */
    (void)hold_find_at(t, s, HOLD_RESERVE, ns, rank, h, none, &nkey);
    if (nkey >= HOLD_SAME_KEY_SCAN)
        return -EBUSY;
    x = hold_add(t, s, HOLD_RESERVE, ns, rank, h, keep, deadline_ms);
    if (x == NULL)
        return -ENOMEM;
    x->off = off;
    x->len = len;
    x->drops = drops;
    /* charged what it holds of the arena, not its length (contract C3) */
    foot = store_footprint(t->store, len);
    s->use.reserved_bytes += foot;
    t->use.reserved_bytes += foot;
    return 0;
}

int session_take_reservation(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                             const kvt_wire_hash_t *h, uint64_t *off, uint64_t *len,
                             uint64_t *drops)
{
    const uint64_t at[2] = {*off, *len};
    long i = hold_find_at(t, s, HOLD_RESERVE, ns, rank, h, at, NULL);
    uint64_t foot;
    hold_t *x;

    if (i < 0)
        return -ENOENT;
    x = &s->holds[i];
    *off = x->off;
    *len = x->len;
    *drops = x->drops;
    if (x->chunk != NULL)
        store_unpin(t->store, x->chunk);
    foot = store_footprint(t->store, x->len);
    s->use.reserved_bytes -= foot;
    t->use.reserved_bytes -= foot;
    hold_remove(s, (size_t)i);
    return 0;
}

/* A pin of a chunk the session pins already (a load naming it again, or a hash repeated in one
 * load) counts on the same hold (0.2.9): it is charged and pinned in the store once, lasts
 * until the latest deadline, and leaves at its last release. One hold per pin made a hash
 * repeated 4096 times in every load 4096 holds on one probe run of the index, each found by a
 * walk of all the others: a loop turn of 132 s, and the holds' memory unbounded by the held
 * bytes (a 1-byte chunk costs one byte per hold). */
int session_pin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                store_chunk_t *c, uint64_t deadline_ms)
{
    long i = hold_find(t, s, HOLD_PIN, ns, rank, h);
    uint64_t len;

    if (i >= 0 && s->holds[i].chunk == c) {
        hold_t *x = &s->holds[i];
        if (x->count == UINT32_MAX)
            return -ENOMEM;
        x->count++;
        if (deadline_ms > x->deadline_ms)
            x->deadline_ms = deadline_ms;
        return 0;
    }
    if (hold_add(t, s, HOLD_PIN, ns, rank, h, c, deadline_ms) == NULL)
        return -ENOMEM;
    len = store_chunk_len(c);
    s->use.pinned_bytes += len;
    t->use.pinned_bytes += len;
    return 0;
}

int session_unpin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    long i = hold_find(t, s, HOLD_PIN, ns, rank, h);

    if (i < 0)
        return 0;
    if (s->holds[i].count > 1) {
        s->holds[i].count--;
        return 1;
    }
    hold_end(t, s, &s->holds[i]);
    hold_remove(s, (size_t)i);
    return 1;
}

/* --- status --- */

/* The id status shows for a session: XXH3-64 of its routing id keyed by a random seed of this
 * daemon, in hex, stable for the session's life. Not the routing id itself (0.2.7): knowing
 * the ids the ROUTER generated lets a client predict the next one and abort libzmq with a
 * duplicate (zsock.c, seed_routing_ids). */
static void info_fill(const sessions_t *t, const session_t *s, uint64_t now_ms, session_info_t *o)
{
    uint64_t expired = 0;

    snprintf(o->id, sizeof o->id, "%016llx",
             (unsigned long long)XXH3_64bits_withSeed(s->id, s->idlen, t->id_key));
    o->data_path = (session_path_t)s->path;
    o->nnamespaces = (size_t)s->nns;
    memcpy(o->namespaces, s->ns, (size_t)s->nns * sizeof s->ns[0]);
    o->idle_ms = now_ms - s->last_ms;
    o->age_ms = now_ms - s->created_ms;
    o->use = s->use;
    for (size_t i = 0; i < s->leases.n; i++) {
        const struct lease_bucket *lb = &s->leases.b[(s->leases.head + i) % s->leases.cap];
        if (lb->until_ms > now_ms)
            break;
        expired += lb->bytes;
    }
    o->use.leased_bytes -= expired;
    o->reserved_bytes = s->use.reserved_bytes;
    o->pinned_bytes = s->use.pinned_bytes;
    o->held_bytes = session_usage_held(&o->use);
    o->stalled = s->stalled;
    o->refused = s->refused;
    o->replies_dropped = s->replies_dropped;
}

size_t sessions_info(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max)
{
    size_t n = 0;

    for (const session_t *s = t->tail; s != NULL && n < max; s = s->prev, n++)
        info_fill(t, s, now_ms, &out[n]);
    return n;
}

/* Orders sessions by what they hold: held + reply bytes, then disk reads, then in flight. */
static int weigh(const session_usage_t *a, const session_usage_t *b)
{
    uint64_t wa = session_usage_held(a) + a->reply_bytes,
             wb = session_usage_held(b) + b->reply_bytes;

    if (wa != wb)
        return wa > wb ? 1 : -1;
    if (a->disk_reads != b->disk_reads)
        return a->disk_reads > b->disk_reads ? 1 : -1;
    if (a->in_flight != b->in_flight)
        return a->in_flight > b->in_flight ? 1 : -1;
    return 0;
}

size_t sessions_top(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max)
{
    const session_t *top[64];
    size_t n = 0;

    if (max > sizeof top / sizeof top[0])
        max = sizeof top / sizeof top[0];
    for (const session_t *s = t->tail; s != NULL && max > 0; s = s->prev) {
        size_t i;
        if (session_usage_held(&s->use) + s->use.reply_bytes + s->use.disk_reads +
                s->use.in_flight ==
            0)
            continue; /* holds nothing: not a consumer */
        if (n == max && weigh(&s->use, &top[n - 1]->use) <= 0)
            continue;
        if (n < max)
            n++;
        for (i = n - 1; i > 0 && weigh(&s->use, &top[i - 1]->use) > 0; i--)
            top[i] = top[i - 1];
        top[i] = s;
    }
    for (size_t i = 0; i < n; i++)
        info_fill(t, top[i], now_ms, &out[i]);
    return n;
}
