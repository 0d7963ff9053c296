/*
 * session.c - client sessions and their arena holds (see session.h).
 *
 * Design: sessions live in a chained hash table keyed by routing id and on one activity list
 * (head = least recently active), so forgetting the oldest and expiring idle ones are O(1) per
 * session. Holds are a per-session array searched linearly from a cursor that follows request
 * order (commits and releases arrive in the order their reservations and pins were made, so a
 * search is usually one step); holds of a session are few (at most the chunks of its requests
 * in flight).
 * Threads: loop thread only.
 */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum { HOLD_RESERVE, HOLD_PIN } hold_kind_t;

typedef struct {
    uint8_t kind;
    uint16_t rank;
    uint32_t ns;
    kvt_wire_hash_t hash;
    uint64_t off, len;    /* HOLD_RESERVE: the extent */
    store_chunk_t *chunk; /* HOLD_RESERVE: pinned predecessor or NULL; HOLD_PIN: the chunk */
    uint64_t deadline_ms;
} hold_t;

struct session {
    session_t *hnext;
    session_t *prev, *next;
    uint64_t last_ms;
    uint64_t created_ms;
    uint32_t ns[SESSION_NS_MAX];
    int nns;
    uint8_t path;
    hold_t *holds;
    size_t nholds, cap, cursor;
    size_t idlen;
    uint8_t id[SESSION_ID_MAX];
};

struct sessions {
    store_t *store;
    session_t **buckets;
    uint32_t nbuckets;
    uint32_t max;
    uint32_t n;
    session_t *head, *tail;
    uint64_t reserved_bytes;
    uint64_t pinned_bytes;
};

static uint32_t id_hash(const uint8_t *id, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ id[i]) * 16777619u;
    return h;
}

sessions_t *sessions_new(uint32_t max, store_t *store)
{
    sessions_t *t = calloc(1, sizeof *t);

    if (t == NULL)
        return NULL;
    t->store = store;
    t->max = max;
    t->nbuckets = 1;
    while (t->nbuckets < max && t->nbuckets < (1u << 20))
        t->nbuckets <<= 1;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    if (t->buckets == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

static void hold_end(sessions_t *t, hold_t *h)
{
    if (h->kind == HOLD_RESERVE) {
        store_unreserve(t->store, h->off, h->len);
        t->reserved_bytes -= h->len;
        if (h->chunk != NULL)
            store_unpin(t->store, h->chunk);
    } else {
        t->pinned_bytes -= store_chunk_len(h->chunk);
        store_unpin(t->store, h->chunk); /* may free the entry */
    }
}

/* Removes hold i (order is not kept). */
static void hold_remove(session_t *s, size_t i)
{
    s->holds[i] = s->holds[--s->nholds];
    if (s->cursor > s->nholds)
        s->cursor = 0;
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

static void session_drop(sessions_t *t, session_t *s)
{
    session_t **pp = &t->buckets[id_hash(s->id, s->idlen) & (t->nbuckets - 1)];

    while (*pp != s)
        pp = &(*pp)->hnext;
    *pp = s->hnext;
    list_unlink(t, s);
    for (size_t i = 0; i < s->nholds; i++)
        hold_end(t, &s->holds[i]);
    t->n--;
    free(s->holds);
    free(s);
}

void sessions_destroy(sessions_t **pt)
{
    sessions_t *t = *pt;

    if (t == NULL)
        return;
    while (t->head != NULL)
        session_drop(t, t->head);
    free(t->buckets);
    free(t);
    *pt = NULL;
}

session_t *sessions_get(sessions_t *t, const void *id, size_t len, uint64_t now_ms)
{
    uint32_t b = id_hash(id, len) & (t->nbuckets - 1);
    session_t *s;

    if (len == 0 || len > SESSION_ID_MAX)
        return NULL;
    for (s = t->buckets[b]; s != NULL; s = s->hnext)
        if (s->idlen == len && memcmp(s->id, id, len) == 0)
            break;
    if (s == NULL) {
        if (t->n >= t->max && t->head != NULL)
            session_drop(t, t->head);
        s = calloc(1, sizeof *s);
        if (s == NULL)
            return NULL;
        memcpy(s->id, id, len);
        s->idlen = len;
        s->created_ms = now_ms;
        s->hnext = t->buckets[b];
        t->buckets[b] = s;
        t->n++;
    } else {
        list_unlink(t, s);
    }
    list_append(t, s);
    s->last_ms = now_ms;
    return s;
}

session_t *sessions_find(const sessions_t *t, const void *id, size_t len)
{
    session_t *s;

    if (len == 0 || len > SESSION_ID_MAX)
        return NULL;
    for (s = t->buckets[id_hash(id, len) & (t->nbuckets - 1)]; s != NULL; s = s->hnext)
        if (s->idlen == len && memcmp(s->id, id, len) == 0)
            return s;
    return NULL;
}

void sessions_expire(sessions_t *t, uint64_t now_ms, uint64_t idle_ms)
{
    while (t->head != NULL && now_ms - t->head->last_ms > idle_ms)
        session_drop(t, t->head);
    for (session_t *s = t->head; s != NULL; s = s->next) {
        for (size_t i = 0; i < s->nholds;) {
            if (s->holds[i].deadline_ms <= now_ms) {
                hold_end(t, &s->holds[i]);
                hold_remove(s, i);
            } else {
                i++;
            }
        }
    }
}

uint32_t sessions_count(const sessions_t *t)
{
    return t->n;
}

uint64_t sessions_reserved_bytes(const sessions_t *t)
{
    return t->reserved_bytes;
}

uint64_t sessions_pinned_bytes(const sessions_t *t)
{
    return t->pinned_bytes;
}

int session_declare(session_t *s, uint32_t ns)
{
    if (session_has(s, ns))
        return 0;
    if (s->nns == SESSION_NS_MAX)
        return -ENOSPC;
    s->ns[s->nns++] = ns;
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

static hold_t *hold_new(session_t *s)
{
    if (s->nholds == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        hold_t *h = realloc(s->holds, cap * sizeof *h);
        if (h == NULL)
            return NULL;
        s->holds = h;
        s->cap = cap;
    }
    return &s->holds[s->nholds++];
}

/* Index of the hold of this kind for (ns, rank, hash), searching from the cursor; or -1. */
static long hold_find(session_t *s, hold_kind_t kind, uint32_t ns, uint16_t rank,
                      const kvt_wire_hash_t *h)
{
    for (size_t k = 0; k < s->nholds; k++) {
        size_t i = (s->cursor + k) % s->nholds;
        const hold_t *x = &s->holds[i];
        if (x->kind == kind && x->ns == ns && x->rank == rank &&
            memcmp(x->hash.b, h->b, KVT_HASH_BYTES) == 0) {
            s->cursor = i;
            return (long)i;
        }
    }
    return -1;
}

/* A new hold of s for chunk (ns, rank, h) until deadline_ms, pinning chunk when not NULL; NULL
 * on allocation failure (nothing held). */
static hold_t *hold_add(sessions_t *t, session_t *s, hold_kind_t kind, uint32_t ns, uint16_t rank,
                        const kvt_wire_hash_t *h, store_chunk_t *chunk, uint64_t deadline_ms)
{
    hold_t *x = hold_new(s);

    if (x == NULL)
        return NULL;
    *x = (hold_t){
        .kind = (uint8_t)kind, .ns = ns, .rank = rank, .chunk = chunk, .deadline_ms = deadline_ms};
    memcpy(x->hash.b, h->b, KVT_HASH_BYTES);
    if (chunk != NULL)
        store_pin(t->store, chunk);
    return x;
}

int session_reserve(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                    const kvt_wire_hash_t *h, uint64_t off, uint64_t len, store_chunk_t *keep,
                    uint64_t deadline_ms)
{
    hold_t *x = hold_add(t, s, HOLD_RESERVE, ns, rank, h, keep, deadline_ms);

    if (x == NULL)
        return -ENOMEM;
    x->off = off;
    x->len = len;
    t->reserved_bytes += len;
    return 0;
}

int session_take_reservation(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank,
                             const kvt_wire_hash_t *h, uint64_t *off, uint64_t *len)
{
    long i = hold_find(s, HOLD_RESERVE, ns, rank, h);
    hold_t *x;

    if (i < 0)
        return -ENOENT;
    x = &s->holds[i];
    *off = x->off;
    *len = x->len;
    if (x->chunk != NULL)
        store_unpin(t->store, x->chunk);
    t->reserved_bytes -= x->len;
    hold_remove(s, (size_t)i);
    return 0;
}

int session_pin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                store_chunk_t *c, uint64_t deadline_ms)
{
    if (hold_add(t, s, HOLD_PIN, ns, rank, h, c, deadline_ms) == NULL)
        return -ENOMEM;
    t->pinned_bytes += store_chunk_len(c);
    return 0;
}

int session_unpin(sessions_t *t, session_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h)
{
    long i = hold_find(s, HOLD_PIN, ns, rank, h);

    if (i < 0)
        return 0;
    hold_end(t, &s->holds[i]);
    hold_remove(s, (size_t)i);
    return 1;
}

size_t sessions_info(const sessions_t *t, uint64_t now_ms, session_info_t *out, size_t max)
{
    static const char digits[] = "0123456789abcdef";
    size_t n = 0;

    for (const session_t *s = t->tail; s != NULL && n < max; s = s->prev, n++) {
        session_info_t *o = &out[n];

        for (size_t i = 0; i < s->idlen; i++) {
            o->id[2 * i] = digits[s->id[i] >> 4];
            o->id[2 * i + 1] = digits[s->id[i] & 15];
        }
        o->id[2 * s->idlen] = '\0';
        o->data_path = (session_path_t)s->path;
        o->nnamespaces = (size_t)s->nns;
        memcpy(o->namespaces, s->ns, (size_t)s->nns * sizeof s->ns[0]);
        o->idle_ms = now_ms - s->last_ms;
        o->age_ms = now_ms - s->created_ms;
        o->reserved_bytes = o->pinned_bytes = 0;
        for (size_t i = 0; i < s->nholds; i++) {
            if (s->holds[i].kind == HOLD_RESERVE)
                o->reserved_bytes += s->holds[i].len;
            else
                o->pinned_bytes += store_chunk_len(s->holds[i].chunk);
        }
    }
    return n;
}
