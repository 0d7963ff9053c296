/*
 * ns.h - the namespace table: one entry per (model name, model revision, layout fingerprint)
 * declared by a client's HELLO or re-declared from a disk record at recovery. Chunks of
 * different namespaces never meet because the index key carries the namespace id.
 *
 * Bounds and lifetime: at most `max` namespaces (server.max_namespaces, at most NS_MAX) exist at
 * once. A namespace counts the sessions that declared it; one that no session declares and that
 * holds no chunk expires (ns_expire, from the server's sweep), its gate state with it. When the
 * table is full, the server may also evict the least recently declared namespace that no session
 * declares, after the store dropped its chunks (ns_victim, ns_remove): a flood of namespaces, or
 * one re-declared from disk after a restart, cannot lock new models out for longer than the
 * sessions holding them live.
 *
 * Ids: a namespace's id is unique for the daemon's life, never reused: it is its slot in the
 * table plus NS_MAX times the slot's generation (incremented when the slot is freed), so a
 * request or a late disk job naming the id of a namespace that went finds nothing, never its
 * successor in the slot. Ids are small integers handed to clients in HELLO_OK.
 *
 * Threads: loop thread only. The table owns its namespaces and their gate state; a ns_t pointer
 * is valid until the namespace is removed (ns_expire, ns_remove, ns_table_destroy).
 */
#ifndef KVT_NS_H
#define KVT_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gates.h"
#include "kvt_proto.h"

#define NS_MAX 1024 /* slots: the most namespaces that can exist at once */

typedef struct {
    uint32_t id;   /* unique for the daemon's life (see above); > 0 */
    uint32_t slot; /* 0..NS_MAX-1: where it lives in the table (status pages by slot) */
    char model[256];
    char revision[KVT_REVISION_MAX + 1]; /* "" when the client named none (protocol 1) */
    uint64_t fingerprint;
    uint16_t world;
    bool replicated;
    uint32_t chunk_tokens;
    uint64_t chunks;        /* stored chunks (all ranks) */
    uint64_t bytes;         /* stored payload bytes */
    uint32_t sessions;      /* sessions that declared it and are still known */
    uint64_t last_declared; /* the table's declaration count at its last declaration (0: only
                               re-declared from disk since the start) */
    uint64_t lookup_us;     /* LOOKUP service time, summed (the lookup-skip gate's figures) */
    uint64_t lookups;       /* LOOKUPs timed */
    uint64_t drops;         /* operator drops that matched it (server_drop_ns) */
    uint64_t drop_chunks;   /* chunks they removed */
    uint64_t drop_bytes;    /* payload bytes they removed */
    gates_t *gates;
} ns_t;

typedef struct ns_table ns_table_t;

/* A table of at most max namespaces (1..NS_MAX; anything else means NS_MAX). NULL on ENOMEM. */
ns_table_t *ns_table_new(uint32_t max);
void ns_table_destroy(ns_table_t **t);

/* What a declaration names (HELLO, or a disk record at recovery). Strings are borrowed and need
 * not be NUL-terminated. */
typedef struct {
    const char *model; /* 1..255 bytes */
    size_t model_len;
    const char *revision; /* 0..KVT_REVISION_MAX bytes; may be NULL when revision_len is 0 */
    size_t revision_len;
    uint64_t fingerprint;
    uint16_t world;
    bool replicated;
    uint32_t chunk_tokens;
} ns_ident_t;

/*
 * Finds or creates the namespace (model, revision, fingerprint). A new one gets a copy of
 * gates_cfg. Returns 0 and *out, -EEXIST when it exists with another world, replication or
 * chunk size (the wire's ECONFLICT), -ENOSPC when `max` namespaces exist (see ns_victim),
 * -EINVAL for a name out of bounds, -ENOMEM.
 */
int ns_declare(ns_table_t *t, const ns_ident_t *id, const gates_cfg_t *gates_cfg, ns_t **out);

/* The namespace of id->model, id->revision and id->fingerprint, or NULL (nothing is created). */
ns_t *ns_find(const ns_table_t *t, const ns_ident_t *id);

/* A session declared ns (it counts in ns->sessions until ns_undeclare). */
void ns_declared(ns_table_t *t, ns_t *ns);
void ns_undeclare(ns_t *ns);

/* The namespace with this id, or NULL (never declared, or gone). */
ns_t *ns_get(const ns_table_t *t, uint32_t id);

/* The namespace in slot (0..NS_MAX-1), or NULL: the table in slot order. */
ns_t *ns_at(const ns_table_t *t, uint32_t slot);

/* Namespaces that exist now. */
uint32_t ns_count(const ns_table_t *t);

/* The bound the table was made with. */
uint32_t ns_max(const ns_table_t *t);

/* Removes every namespace that no session declares and that holds no chunk; returns how many. */
uint32_t ns_expire(ns_table_t *t);

/* Of the namespaces no session declares, the one declared least recently (recovered ones never
 * declared since the start first), or NULL. */
ns_t *ns_victim(const ns_table_t *t);

/* Removes ns (no session may declare it; the store must hold none of its chunks). */
void ns_remove(ns_table_t *t, ns_t *ns);

/* Namespaces removed so far (expired or evicted). */
uint64_t ns_removed(const ns_table_t *t);

/* The rank under which a chunk of ns is stored: 0 for every rank of a replicated namespace. */
static inline uint16_t ns_store_rank(const ns_t *ns, uint16_t rank)
{
    return ns->replicated ? 0 : rank;
}

#endif /* KVT_NS_H */
