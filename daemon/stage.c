/*
 * stage.c - staging memory in transparent huge pages (see stage.h).
 */
#include "stage.h"

#include "alloc.h"
#include "fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define STAGE_THP_PATH "/sys/kernel/mm/transparent_hugepage/enabled"

struct stage {
    uint8_t *base;  /* the mapping: STAGE_ALIGN aligned, bytes long */
    uint64_t bytes; /* the bound: extents lie in [base, base + bytes) */
    alloc_t *alloc;
};

bool stage_thp_available(void)
{
    static const char *const huge[] = {"always", "madvise", NULL};

    return fsutil_sysfs_mode_is(STAGE_THP_PATH, huge);
}

stage_t *stage_new(uint64_t bytes)
{
    stage_t *s = calloc(1, sizeof *s);
    uint64_t len;
    uint8_t *map, *end;
    uintptr_t a;

    if (s == NULL)
        return NULL;
    s->bytes = (bytes + ALLOC_UNIT_DEFAULT - 1) / ALLOC_UNIT_DEFAULT * ALLOC_UNIT_DEFAULT;
    if (s->bytes == 0)
        s->bytes = ALLOC_UNIT_DEFAULT;
    /* one huge page more than needed, so that an aligned run of bytes lies inside; what lies
     * outside that run is unmapped again: the mapping is exactly [base, base + bytes), so no
     * huge page (THP "always", khugepaged) can be made past the bound */
    len = s->bytes + STAGE_ALIGN;
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        free(s);
        return NULL;
    }
    a = ((uintptr_t)map + STAGE_ALIGN - 1) & ~(uintptr_t)(STAGE_ALIGN - 1);
    s->base = (uint8_t *)a;
    end = map + len;
    if (s->base > map)
        munmap(map, (size_t)(s->base - map));
    if (s->base + s->bytes < end)
        munmap(s->base + s->bytes, (size_t)(end - (s->base + s->bytes)));
    /* huge pages for the whole ones inside the bound (advice: EINVAL without THP is fine) */
    if (s->bytes >= STAGE_ALIGN)
        (void)madvise(s->base, s->bytes / STAGE_ALIGN * STAGE_ALIGN, MADV_HUGEPAGE);
    s->alloc = alloc_new(s->bytes, ALLOC_UNIT_DEFAULT);
    if (s->alloc == NULL) {
        munmap(s->base, s->bytes);
        free(s);
        errno = ENOMEM;
        return NULL;
    }
    return s;
}

void stage_destroy(stage_t **sp)
{
    stage_t *s = sp != NULL ? *sp : NULL;

    if (s == NULL)
        return;
    alloc_destroy(&s->alloc);
    munmap(s->base, s->bytes);
    free(s);
    *sp = NULL;
}

void *stage_get(stage_t *s, uint64_t len)
{
    uint64_t off;

    if (s == NULL || len == 0 || alloc_get(s->alloc, len, &off) != 0)
        return NULL;
    return s->base + off;
}

void stage_put(stage_t *s, void *p, uint64_t len)
{
    alloc_put(s->alloc, (uint64_t)((uint8_t *)p - s->base), len);
}

void *stage_base(const stage_t *s)
{
    return s->base;
}

uint64_t stage_bytes(const stage_t *s)
{
    return s != NULL ? s->bytes : 0;
}

uint64_t stage_used(const stage_t *s)
{
    return s != NULL ? alloc_used(s->alloc) : 0;
}

uint64_t stage_resident(const stage_t *s)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t pages, n = 0;
    unsigned char *vec;

    if (s == NULL || pg <= 0)
        return 0;
    pages = (s->bytes + (uint64_t)pg - 1) / (uint64_t)pg;
    vec = malloc((size_t)pages);
    if (vec == NULL || mincore(s->base, (size_t)s->bytes, vec) != 0) {
        free(vec);
        return 0;
    }
    for (uint64_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    free(vec);
    return n * (uint64_t)pg;
}
