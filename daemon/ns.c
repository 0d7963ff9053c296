/*
 * ns.c - namespace table (see ns.h).
 *
 * A fixed array of NS_MAX slots: declarations are rare (one per client connect, one per
 * namespace found at recovery) and the number of namespaces is small, so a linear search by
 * (model, revision, fingerprint) is the simplest thing that is fast enough; lookups by id on the
 * request path are O(1) (the slot is (id - 1) % NS_MAX, and the id must match). A freed slot's
 * generation grows, so the ids it gives out later differ from every id it gave out before.
 *
 * Threads: loop thread only.
 */
#include "ns.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ns_table {
    ns_t *slot[NS_MAX];
    uint32_t gen[NS_MAX]; /* generation of each slot: bumped when its namespace goes */
    uint32_t n;           /* namespaces alive */
    uint32_t max;
    uint64_t declarations; /* ns_declared calls (the recency clock of ns_victim) */
    uint64_t removed;
};

ns_table_t *ns_table_new(uint32_t max)
{
    ns_table_t *t = calloc(1, sizeof(ns_table_t));

    if (t != NULL)
        t->max = max >= 1 && max <= NS_MAX ? max : NS_MAX;
    return t;
}

static void ns_free(ns_t *ns)
{
    gates_destroy(&ns->gates);
    free(ns);
}

void ns_table_destroy(ns_table_t **pt)
{
    ns_table_t *t = *pt;

    if (t == NULL)
        return;
    for (uint32_t i = 0; i < NS_MAX; i++)
        if (t->slot[i] != NULL)
            ns_free(t->slot[i]);
    free(t);
    *pt = NULL;
}

static bool same_name(const char *have, const char *name, size_t len)
{
    return strlen(have) == len && (len == 0 || memcmp(have, name, len) == 0);
}

static bool same_ident(const ns_t *ns, const ns_ident_t *id)
{
    return ns->fingerprint == id->fingerprint && same_name(ns->model, id->model, id->model_len) &&
           same_name(ns->revision, id->revision, id->revision_len);
}

ns_t *ns_find(const ns_table_t *t, const ns_ident_t *id)
{
    for (uint32_t i = 0; i < NS_MAX; i++)
        if (t->slot[i] != NULL && same_ident(t->slot[i], id))
            return t->slot[i];
    return NULL;
}

int ns_declare(ns_table_t *t, const ns_ident_t *id, const gates_cfg_t *gates_cfg, ns_t **out)
{
    uint32_t free_slot = NS_MAX;
    ns_t *ns;

    if (id->model_len == 0 || id->model_len >= sizeof ns->model ||
        id->revision_len >= sizeof ns->revision)
        return -EINVAL;
    for (uint32_t i = 0; i < NS_MAX; i++) {
        ns = t->slot[i];
        if (ns == NULL) {
            if (free_slot == NS_MAX)
                free_slot = i;
            continue;
        }
        if (!same_ident(ns, id))
            continue;
        if (ns->world != id->world || ns->replicated != id->replicated ||
            ns->chunk_tokens != id->chunk_tokens)
            return -EEXIST;
        *out = ns;
        return 0;
    }
    if (t->n >= t->max || free_slot == NS_MAX)
        return -ENOSPC;
    ns = calloc(1, sizeof *ns);
    if (ns == NULL)
        return -ENOMEM;
    ns->gates = gates_new(gates_cfg);
    if (ns->gates == NULL) {
        free(ns);
        return -ENOMEM;
    }
    memcpy(ns->model, id->model, id->model_len);
    if (id->revision_len > 0)
        memcpy(ns->revision, id->revision, id->revision_len);
    ns->fingerprint = id->fingerprint;
    ns->world = id->world;
    ns->replicated = id->replicated;
    ns->chunk_tokens = id->chunk_tokens;
    ns->slot = free_slot;
    /* unsigned arithmetic: after 2^32 / NS_MAX reuses of one slot its ids wrap (not 0) */
    ns->id = free_slot + 1 + NS_MAX * t->gen[free_slot];
    if (ns->id == 0)
        ns->id = free_slot + 1;
    t->slot[free_slot] = ns;
    t->n++;
    *out = ns;
    return 0;
}

void ns_declared(ns_table_t *t, ns_t *ns)
{
    ns->sessions++;
    ns->last_declared = ++t->declarations;
}

void ns_undeclare(ns_t *ns)
{
    if (ns->sessions > 0)
        ns->sessions--;
}

ns_t *ns_get(const ns_table_t *t, uint32_t id)
{
    ns_t *ns;

    if (id == 0)
        return NULL;
    ns = t->slot[(id - 1) % NS_MAX];
    return ns != NULL && ns->id == id ? ns : NULL;
}

ns_t *ns_at(const ns_table_t *t, uint32_t slot)
{
    return slot < NS_MAX ? t->slot[slot] : NULL;
}

uint32_t ns_count(const ns_table_t *t)
{
    return t->n;
}

uint32_t ns_max(const ns_table_t *t)
{
    return t->max;
}

void ns_remove(ns_table_t *t, ns_t *ns)
{
    uint32_t i = ns->slot;

    if (t->slot[i] != ns)
        return;
    t->slot[i] = NULL;
    t->gen[i]++;
    t->n--;
    t->removed++;
    ns_free(ns);
}

uint32_t ns_expire(ns_table_t *t)
{
    uint32_t gone = 0;

    for (uint32_t i = 0; i < NS_MAX; i++) {
        ns_t *ns = t->slot[i];
        if (ns != NULL && ns->sessions == 0 && ns->chunks == 0 && ns->bytes == 0) {
            ns_remove(t, ns);
            gone++;
        }
    }
    return gone;
}

ns_t *ns_victim(const ns_table_t *t)
{
    ns_t *best = NULL;

    for (uint32_t i = 0; i < NS_MAX; i++) {
        ns_t *ns = t->slot[i];
        if (ns != NULL && ns->sessions == 0 &&
            (best == NULL || ns->last_declared < best->last_declared))
            best = ns;
    }
    return best;
}

uint64_t ns_removed(const ns_table_t *t)
{
    return t->removed;
}
