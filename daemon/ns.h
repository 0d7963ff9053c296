/*
 * ns.h - the namespace table: one entry per (model name, model revision, layout fingerprint)
 * declared by a client's HELLO. Chunks of different namespaces never meet because the index key
 * carries the namespace id. A namespace lives as long as the daemon (at most NS_MAX of them); its
 * id is a small integer handed to clients in HELLO_OK.
 *
 * Threads: loop thread only. The table owns its namespaces and their gate state.
 */
#ifndef KVT_NS_H
#define KVT_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gates.h"
#include "kvt_proto.h"

#define NS_MAX 1024

typedef struct {
    uint32_t id; /* 1..NS_MAX */
    char model[256];
    char revision[KVT_REVISION_MAX + 1]; /* "" when the client named none (protocol 1) */
    uint64_t fingerprint;
    uint16_t world;
    bool replicated;
    uint32_t chunk_tokens;
    uint64_t chunks; /* stored chunks (all ranks) */
    uint64_t bytes;  /* stored payload bytes */
    gates_t *gates;
} ns_t;

typedef struct ns_table ns_table_t;

ns_table_t *ns_table_new(void);
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
 * chunk size (the wire's ECONFLICT), -ENOSPC when NS_MAX namespaces exist, -EINVAL for a name
 * out of bounds, -ENOMEM.
 */
int ns_declare(ns_table_t *t, const ns_ident_t *id, const gates_cfg_t *gates_cfg, ns_t **out);

/* The namespace with this id, or NULL. */
ns_t *ns_get(const ns_table_t *t, uint32_t id);

uint32_t ns_count(const ns_table_t *t);

/* The rank under which a chunk of ns is stored: 0 for every rank of a replicated namespace. */
static inline uint16_t ns_store_rank(const ns_t *ns, uint16_t rank)
{
    return ns->replicated ? 0 : rank;
}

#endif /* KVT_NS_H */
