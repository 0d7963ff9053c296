/*
 * stage.h - staging memory for the disk tier's direct I/O, in transparent huge pages.
 *
 * Why: with O_DIRECT the device moves a record by DMA straight from or into the memory given,
 * and the cost of a request grows with the number of physically discontiguous pieces it has. A
 * 2 MiB chunk in the arena on /dev/shm (4 KiB shmem pages) is 512 pieces; in a 2 MiB huge page
 * it is one. Measured on the development VM (virtio disk, 2 MiB O_DIRECT requests, one at a
 * time, /var/tmp/mb/rd3.c in the 0.2.4 notes): reads 2.0-2.3 GB/s into huge pages against
 * 1.15-1.25 into /dev/shm pages and 0.85-1.1 into a 4 KiB-paged heap buffer; writes 4.2-4.4
 * against 1.9-2.2 and 1.4-2.1. A copy between the staging memory and the arena costs less than
 * that difference, so the disk tier stages (disk.staging, disk.h) unless the arena itself is in
 * huge pages (hugetlbfs, or tmpfs mounted huge=): then DMA goes straight into it, as before.
 *
 * Shared memory (the arena) cannot be given huge pages by the daemon on /dev/shm (its mount
 * says huge=never); private anonymous memory can, with madvise(MADV_HUGEPAGE), whenever the
 * kernel's THP mode is "always" or "madvise" (Debian's default). stage_thp_mode() reads it.
 *
 * A stage_t is one private anonymous mapping, 2 MiB aligned, its whole huge pages advised
 * MADV_HUGEPAGE (a tail shorter than one stays in small pages), carved into
 * extents by the arena's extent allocator (alloc.h, 4 KiB units). Its size is a hard bound: a
 * request that does not fit gets NULL and the caller does its I/O without staging. Pages become
 * resident when first written and stay so (stage_resident() reports it).
 *
 * Threads: stage_new/get/put/destroy are for one thread (the loop); the bytes of an extent
 * belong to whoever was given it until it is put back, and may be used on a worker.
 */
#ifndef KVT_STAGE_H
#define KVT_STAGE_H

#include <stdbool.h>
#include <stdint.h>

#define STAGE_ALIGN (2u << 20) /* the mapping's alignment: one PMD huge page on x86-64 */

typedef struct stage stage_t;

/* The kernel's transparent huge page mode for private memory
 * (/sys/kernel/mm/transparent_hugepage/enabled): true when madvised memory may be huge. */
bool stage_thp_available(void);

/* Staging memory of bytes (rounded up to 4 KiB), mapped 2 MiB aligned and exactly that long.
 * NULL on failure (errno set). */
stage_t *stage_new(uint64_t bytes);
void stage_destroy(stage_t **s);

/* An extent of at least len bytes, 4 KiB aligned, or NULL when none is free. */
void *stage_get(stage_t *s, uint64_t len);
/* Returns the extent p of len bytes (the len given to stage_get). */
void stage_put(stage_t *s, void *p, uint64_t len);

/* The whole of it as one buffer (for a single user: the flush's staging), and its size. */
void *stage_base(const stage_t *s);
uint64_t stage_bytes(const stage_t *s);
/* Bytes in extents handed out now. */
uint64_t stage_used(const stage_t *s);
/* Bytes of the mapping backed by memory now (mincore; 0 for NULL). */
uint64_t stage_resident(const stage_t *s);

#endif /* KVT_STAGE_H */
