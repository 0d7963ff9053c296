/*
 * ram.h - the RAM tier's arena: one shared mapping carved by the extent allocator (alloc.h).
 *
 * The arena is a memfd (arena_path "") or a file under /dev/shm created 0660, sized to the
 * configured capacity and mapped MAP_SHARED once, so that a later data path can map the same
 * file in clients. Its pages are backed by memory only when first written; ram_resident()
 * measures that from the file's allocated blocks, so status reports memory that exists, not
 * memory that is assumed.
 *
 * Threads: loop thread only. Ownership: ram owns the mapping, the descriptor and the file
 * (unlinked on destroy).
 */
#ifndef KVT_RAM_H
#define KVT_RAM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ram ram_t;

/* Creates the arena of capacity bytes at path ("" or NULL: anonymous memfd). A file is created
 * with mode 0660, owned by group (when not NULL or "": -ENOENT if no such group), and locked
 * (flock) for the daemon's life: -EBUSY when another live daemon holds it. With prefault every
 * page is allocated now (-ENOSPC when the file system cannot hold the capacity). Returns 0 or
 * a negative errno; *out is owned by the caller. */
int ram_new(const char *path, const char *group, uint64_t capacity, bool prefault, ram_t **out);

/* Unmaps, closes, unlinks the file and sets *r to NULL; NULL and *r == NULL are accepted. */
void ram_destroy(ram_t **r);

/* Allocates len bytes: 0 and *off, or -ENOSPC, or -EINVAL (len 0 or larger than capacity). */
int ram_alloc(ram_t *r, uint64_t len, uint64_t *off);
void ram_free(ram_t *r, uint64_t off, uint64_t len);

void *ram_ptr(const ram_t *r, uint64_t off);

uint64_t ram_capacity(const ram_t *r);
uint64_t ram_used(const ram_t *r); /* bytes allocated (rounded to units) */
uint64_t ram_footprint(const ram_t *r, uint64_t len);
uint64_t ram_resident(const ram_t *r); /* bytes of the arena backed by memory */
uint64_t ram_largest_free(const ram_t *r);
uint32_t ram_free_runs(const ram_t *r);
const char *ram_path(const ram_t *r); /* "" for a memfd */
int ram_fd(const ram_t *r);

#endif /* KVT_RAM_H */
