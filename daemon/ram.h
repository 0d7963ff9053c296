/*
 * ram.h - the RAM tier's arena: one shared mapping carved by the extent allocator (alloc.h).
 *
 * The arena is a memfd (arena_path "") or a file under /dev/shm created 0660, mapped MAP_SHARED
 * once, so that clients can map the same file. Its layout (format RAM_FORMAT_VERSION):
 *
 *   [0, RAM_HDR_BYTES)                  the header page: magic "KVTARENA", format version,
 *                                       allocation unit, chunk-area offset and capacity, the
 *                                       arena generation, the arena id (random, fixed while the
 *                                       file keeps its contents), an XXH3-64 of those fields;
 *   [RAM_HDR_BYTES, + capacity)         the chunk area: every offset ram_alloc() returns, and
 *                                       every location the daemon answers, is a file offset in
 *                                       it (never 0: contract C5).
 *
 * Re-attach: with reattach, a file that exists with the expected size and a header that decodes
 * with this format version, unit and capacity is kept as it is (its bytes are the previous run's
 * chunks; the store rebuilds its index from the journal, journal.h, and claims their extents
 * with ram_claim()); anything else is a cold start: the file is truncated and sized anew, and
 * why is reported (ram_cold_reason_t). Either way the generation is the previous header's plus
 * one (1 when there was none) and the header page is rewritten (ram_write_header), so locations
 * of an earlier run never pass for this one's (ESTALE, PROTOCOL.md).
 *
 * Pages are backed by memory only when first written (without prefault); ram_resident()
 * measures that from the file's allocated blocks, so status reports memory that exists.
 *
 * Threads: loop thread only. Ownership: ram owns the mapping, the descriptor and the file. The
 * file is unlinked on destroy unless it is kept for a later re-attach (ram_keep()).
 */
#ifndef KVT_RAM_H
#define KVT_RAM_H

#include <stdbool.h>
#include <stdint.h>

#define RAM_HDR_BYTES 4096u
#define RAM_FORMAT_VERSION 1u

typedef struct ram ram_t;

/* Why an arena was created anew rather than re-attached (ram_open). */
typedef enum {
    RAM_ATTACHED = 0,  /* re-attached: not a cold start */
    RAM_COLD_DISABLED, /* ram.reattach false, or --cold-start */
    RAM_COLD_MEMFD,    /* an anonymous arena (ram.arena_path "") cannot outlive the process */
    RAM_COLD_NO_FILE,  /* no arena file (or an empty one) */
    RAM_COLD_SIZE,     /* the file's size is not this configuration's arena size */
    RAM_COLD_HEADER,   /* the header page does not decode (magic or checksum) */
    RAM_COLD_VERSION,  /* another format version */
    RAM_COLD_LAYOUT,   /* another capacity, unit or chunk-area offset */
    RAM_COLD_COUNT
} ram_cold_reason_t;

/* The word status and the log line give a reason ("attached", "disabled", "memfd", ...). */
const char *ram_cold_reason_name(ram_cold_reason_t r);

typedef struct {
    const char *path;  /* "" or NULL: an anonymous memfd */
    const char *group; /* group owning the file, or NULL / "" */
    uint64_t capacity; /* bytes of the chunk area */
    bool prefault;     /* allocate every page now */
    bool reattach;     /* keep a matching file's contents */
} ram_opts_t;

/* Opens the arena per o. A file is created (or kept) with mode 0660, owned by group (when not
 * NULL or "": -ENOENT if no such group), and locked (flock) for the daemon's life: -EBUSY when
 * another live daemon holds it. With prefault every page is allocated now (-ENOSPC when the
 * file system cannot hold the arena). *why says whether the arena was re-attached. Returns 0 or
 * a negative errno; *out is owned by the caller. */
int ram_open(const ram_opts_t *o, ram_t **out, ram_cold_reason_t *why);

/* Unmaps, closes, unlinks the file unless ram_keep() was called, and sets *r to NULL; NULL and
 * *r == NULL are accepted. */
void ram_destroy(ram_t **r);

/* The file stays at destroy, for the next start to re-attach. No-op for a memfd. */
void ram_keep(ram_t *r);

/* Writes the header page with this start's generation. ram_open() leaves the page as it found
 * it, so that a start that fails before serving changes nothing; the store writes it once the
 * arena's contents are recovered (and the journal that describes them is on file). */
void ram_write_header(ram_t *r);

/* Makes the generation larger than seen (a generation known from elsewhere, the journal's: a
 * header that did not decode gives none), before ram_write_header(). */
void ram_gen_above(ram_t *r, uint32_t seen);

/* Allocates len bytes: 0 and *off (a file offset >= RAM_HDR_BYTES), or -ENOSPC, or -EINVAL (len
 * 0 or larger than capacity). */
int ram_alloc(ram_t *r, uint64_t len, uint64_t *off);
void ram_free(ram_t *r, uint64_t off, uint64_t len);

/* Re-attach only, before any ram_alloc(): marks the extent (off, len) allocated. Extents must be
 * claimed in increasing offset order and must not overlap. 0 or -EINVAL (outside the chunk area,
 * unaligned, overlapping or out of order). */
int ram_claim(ram_t *r, uint64_t off, uint64_t len);

/* Whether (off, len) lies inside the chunk area, starting on an allocation unit. */
bool ram_extent_ok(const ram_t *r, uint64_t off, uint64_t len);

void *ram_ptr(const ram_t *r, uint64_t off);

/* After a cold start over an existing file: 0 when a new file replaced it (or none was there),
 * else why none could be made (a negative errno) and the old file was truncated in place. */
int ram_replace_error(const ram_t *r);
uint64_t ram_capacity(const ram_t *r);   /* bytes of the chunk area (whole units) */
uint64_t ram_file_bytes(const ram_t *r); /* the file's size: header page + chunk area (rounded
                                            up to whole huge pages on hugetlbfs) */
/* The arena's huge page size: on hugetlbfs, or on a tmpfs that backs files with transparent huge
 * pages (mounted huge=always or huge=within_size; a memfd with shmem_enabled so); else 0. */
uint64_t ram_huge_page(const ram_t *r);
uint64_t ram_used(const ram_t *r); /* bytes allocated (rounded to units) */
uint64_t ram_footprint(const ram_t *r, uint64_t len);
uint64_t ram_resident(const ram_t *r); /* bytes of the arena backed by memory */
uint64_t ram_largest_free(const ram_t *r);
uint32_t ram_free_runs(const ram_t *r);
const char *ram_path(const ram_t *r); /* "" for a memfd */
/* Whether the arena is a file on a tmpfs (such as /dev/shm): memory that no disk backs, which
 * is where its journal goes by default (store_reattach.c). false for a memfd and hugetlbfs. */
bool ram_on_tmpfs(const ram_t *r);
int ram_fd(const ram_t *r);

/* The arena's generation (>= 1; the header's) and its id (random, kept across re-attaches,
 * new at every cold start; the journal names the arena it describes by it). */
uint32_t ram_gen(const ram_t *r);
uint64_t ram_arena_id(const ram_t *r);

#endif /* KVT_RAM_H */
