/*
 * relink.c - the chains of both tiers, rebuilt at start (see store_internal.h: store__relink).
 *
 * Recovery adds every chunk without its predecessor and queues (chunk, recorded predecessor)
 * pairs, in the order it finds them: the disk's records by segment and offset, the RAM journal's
 * live entries by arena offset. Once every tier is recovered, store__relink links each chunk under
 * its predecessor, unless the link would close a loop: the records' links are what was true when
 * each was written, not one forest (a chunk removed and saved again after its successor, found
 * corrupt or reclaimed with its segment, then saved with that successor as its declared parent,
 * leaves two records that name each other), and a loop would be a set of chunks that RAM eviction
 * never takes (it takes leaves).
 *
 * The check. A chunk e is linked only while it has no predecessor, so e is the root of its tree,
 * and linking it under p closes a loop exactly when p's tree is e's: when p's root is e. The
 * roots are kept in a union-find over the queued chunks (path halving, union by size; each set
 * knows the root entry of its tree), about one step per relink. Until 0.2.11 the check walked
 * from p up to its root: nothing for records in the order written (parents first), but the
 * length of the chain for a chunk linked after its successors, and records can come in that
 * order (a re-attach relinks by arena offset, an extent freed by an eviction holds a later chunk;
 * the disk holds a chain evicted leaf first): a chain of 2048 chunks with 1024 branches whose
 * chunks came before their roots cost 2.1 M steps (test_relink_checks_do_not_walk_chains), a
 * spine of 65536 chunks and a million such branches minutes of start.
 *
 * Cost: about 90 ns per link at start on the development VM (a re-attach of 120,528 chunks in
 * chains in the order written: 13-15 ms from the RAM recovery's log line to READY with the walk,
 * which costs nothing in that order, 25-26 ms with the union-find), the price of a bound that
 * holds for every order.
 *
 * Memory: a node per chunk named in the queue (at most two per pair, 16 bytes each) and an
 * open-addressing table of at least four slots per pair (12 bytes each): at most 80 bytes per
 * pair (an entry is 232), freed when the relink ends. Without them (allocation failed, logged)
 * the walk is used, each bounded by RELINK_WALK_MAX ancestors (a longer one counts as a loop).
 *
 * Threads: the loop thread, before the daemon serves.
 */
#include "store_internal.h"

#include "array.h"
#include "log.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RELINK_WALK_MAX 65536u /* the fallback's bound: ancestors one walk looks through */

typedef struct {
    uint32_t up;         /* union-find parent (itself at a set's representative) */
    uint32_t size;       /* at a representative: nodes in the set */
    index_entry_t *root; /* at a representative: the root entry of the set's tree */
} uf_node_t;

typedef struct {
    const index_entry_t **key; /* open addressing: entry -> node, NULL = empty */
    uint32_t *val;
    size_t mask;
    uf_node_t *node; /* at most two per pair */
    uint32_t nnodes;
    uint64_t *steps;
} uf_t;

static bool uf_init(uf_t *u, size_t pairs, uint64_t *steps)
{
    size_t slots = 16;

    *u = (uf_t){.steps = steps};
    if (pairs > (UINT32_MAX - 1) / 2)
        return false;
    while (slots < 4 * pairs)
        slots <<= 1;
    u->key = calloc(slots, sizeof *u->key);
    u->val = malloc(slots * sizeof *u->val);
    u->node = malloc((pairs > 0 ? 2 * pairs : 1) * sizeof *u->node);
    u->mask = slots - 1;
    if (u->key == NULL || u->val == NULL || u->node == NULL) {
        free(u->key);
        free(u->val);
        free(u->node);
        return false;
    }
    return true;
}

static void uf_free(uf_t *u)
{
    free(u->key);
    free(u->val);
    free(u->node);
}

/* e's node, made on first sight: a set of its own, e the root of its tree (recovery adds every
 * chunk unlinked, and only a chunk with a node is ever linked here). */
static uint32_t uf_node(uf_t *u, index_entry_t *e)
{
    size_t i = ((uintptr_t)e >> 4) * 0x9e3779b97f4a7c15ull & u->mask;

    while (u->key[i] != NULL) {
        if (u->key[i] == e)
            return u->val[i];
        i = (i + 1) & u->mask;
    }
    u->key[i] = e;
    u->val[i] = u->nnodes;
    assert(e->parent == NULL);
    u->node[u->nnodes] = (uf_node_t){.up = u->nnodes, .size = 1, .root = e};
    return u->nnodes++;
}

static uint32_t uf_find(uf_t *u, uint32_t x)
{
    while (u->node[x].up != x) {
        u->node[x].up = u->node[u->node[x].up].up; /* path halving */
        x = u->node[x].up;
        (*u->steps)++;
    }
    return x;
}

/* Whether linking e (no predecessor: its tree's root) under p closes a loop; if not, records
 * the link: e's tree joins p's, whose root stays the root. */
static bool uf_link(uf_t *u, index_entry_t *e, index_entry_t *p)
{
    uint32_t a = uf_find(u, uf_node(u, e)), b = uf_find(u, uf_node(u, p));
    index_entry_t *root = u->node[b].root;

    (*u->steps)++;
    if (a == b || root == e)
        return true;
    if (u->node[a].size > u->node[b].size) {
        uint32_t t = a;
        a = b;
        b = t;
    }
    u->node[a].up = b;
    u->node[b].size += u->node[a].size;
    u->node[b].root = root;
    return false;
}

/* The fallback: whether e is p or one of p's ancestors (a walk longer than RELINK_WALK_MAX counts
 * as a loop). Only an entry with children can be an ancestor. */
static bool walk_loops(const index_entry_t *e, const index_entry_t *p, uint64_t *steps)
{
    uint32_t n = 0;

    if (e->nchildren == 0)
        return false;
    for (; p != NULL; p = p->parent, (*steps)++)
        if (p == e || ++n > RELINK_WALK_MAX)
            return true;
    return false;
}

void store__relink_queue(store_t *s, uint32_t ns, uint16_t rank, const kvt_wire_hash_t *h,
                         const uint8_t parent[16])
{
    if (ARRAY_RESERVE(s->relink, s->nrelink, s->relinkcap, 1024) != 0)
        return; /* the chunk stays, without its chain link */
    s->relink[s->nrelink].ns = ns;
    s->relink[s->nrelink].rank = rank;
    s->relink[s->nrelink].hash = *h;
    memcpy(s->relink[s->nrelink].parent.b, parent, 16);
    s->nrelink++;
}

void store__relink(store_t *s)
{
    uint64_t *steps = &s->rec.relink_steps;
    uf_t u;
    bool have_uf = uf_init(&u, s->nrelink, steps);

    if (!have_uf && s->nrelink > 0)
        log_warn("relink", "pairs=%zu error=\"out of memory\" action=walk", s->nrelink);
    for (size_t i = 0; i < s->nrelink; i++) {
        const relink_t *r = &s->relink[i];
        index_entry_t *e = index_find(s->ix, r->ns, r->rank, &r->hash);
        index_entry_t *p = index_find(s->ix, r->ns, r->rank, &r->parent);
        bool loops;
        if (e == NULL)
            continue;
        if (p == NULL) {
            index_flags_set(e, INDEX_F_ORPHAN); /* its predecessor is absent */
            continue;
        }
        if (p == e || e->parent != NULL)
            continue; /* a record naming itself, or linked by an earlier record of it */
        loops = have_uf ? uf_link(&u, e, p) : walk_loops(e, p, steps);
        if (loops) {
            index_flags_set(e, INDEX_F_ORPHAN); /* its predecessor follows it */
            s->rec.relinks_refused++;
            continue;
        }
        index_set_parent(s->ix, e, p);
        s->rec.relinks++;
    }
    if (have_uf)
        uf_free(&u);
    free(s->relink);
    s->relink = NULL;
    s->nrelink = s->relinkcap = 0;
}
