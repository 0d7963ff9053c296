/*
 * array.h - the doubling arrays of the daemon's tables (segments, drop lists, tombstones,
 * shared-memory holds, status instances, relinks): one way to make room for one more element.
 *
 * ARRAY_RESERVE(arr, n, cap, first) makes sure arr (a T * with cap elements allocated, n used)
 * can take element n: when n == cap it reallocates to twice cap (first when cap is 0). 0, or
 * -ENOMEM with arr and cap unchanged (also when the new size would overflow). The caller owns
 * arr and frees it; n stays the caller's to advance. Not thread-safe (one owner per array).
 */
#ifndef KVT_ARRAY_H
#define KVT_ARRAY_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* pp points at the caller's T * (copied through memcpy: the pointer's type is the caller's). */
static inline int array__grow(void *pp, size_t *cap, size_t elem, size_t first)
{
    size_t nc = *cap ? *cap * 2 : first;
    void *p, *np;

    if (nc < *cap || nc > SIZE_MAX / elem)
        return -ENOMEM;
    memcpy(&p, pp, sizeof p);
    np = realloc(p, nc * elem);
    if (np == NULL)
        return -ENOMEM;
    memcpy(pp, &np, sizeof np);
    *cap = nc;
    return 0;
}

#define ARRAY_RESERVE(arr, n, cap, first)                                                          \
    ((n) < (cap) ? 0 : array__grow(&(arr), &(cap), sizeof *(arr), (first)))

#endif
