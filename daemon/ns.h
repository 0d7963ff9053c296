/*
 * ns.h - the namespace table: one entry per (model name, layout fingerprint) declared by a
 * client's HELLO. Chunks of different namespaces never meet because the index key carries the
 * namespace id. A namespace lives as long as the daemon (at most NS_MAX of them); its id is a
 * small integer handed to clients in HELLO_OK.
 *
 * Threads: loop thread only. The table owns its namespaces and their gate state.
 */
#ifndef KVT_NS_H
#define KVT_NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gates.h"

#define NS_MAX 1024

typedef struct {
    uint32_t id; /* 1..NS_MAX */
    char model[256];
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

/*
 * Finds or creates the namespace (model, fingerprint). A new one gets a copy of gates_cfg.
 * Returns 0 and *out, -EEXIST when it exists with another world, replication or chunk size
 * (the wire's ECONFLICT), -ENOSPC when NS_MAX namespaces exist, -ENOMEM.
 */
int ns_declare(ns_table_t *t, const char *model, size_t model_len, uint64_t fingerprint,
               uint16_t world, bool replicated, uint32_t chunk_tokens, const gates_cfg_t *gates_cfg,
               ns_t **out);

/* The namespace with this id, or NULL. */
ns_t *ns_get(const ns_table_t *t, uint32_t id);

uint32_t ns_count(const ns_table_t *t);

/* The rank under which a chunk of ns is stored: 0 for every rank of a replicated namespace. */
static inline uint16_t ns_store_rank(const ns_t *ns, uint16_t rank)
{
    return ns->replicated ? 0 : rank;
}

#endif /* KVT_NS_H */
