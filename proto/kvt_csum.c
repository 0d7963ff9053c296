/*
 * kvt_csum.c - the chunk checksum and its fused copy (see kvt_csum.h for the design and the
 * figures behind it).
 */
#include "kvt_csum.h"

#include <string.h>
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define KVT_CSUM_AHEAD (8u << 10)

uint64_t kvt_csum(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

#if defined(__SSE2__)
/* d[0..k) = s[0..k) with streaming stores (d 16-byte aligned); the caller fences. */
static void stream_copy(uint8_t *d, const uint8_t *s, size_t k)
{
    size_t i = 0;

    for (; i + 64 <= k; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i f = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), e);
        _mm_stream_si128((__m128i *)(d + i + 48), f);
    }
    if (i < k)
        memcpy(d + i, s + i, k - i);
}
#endif

uint64_t kvt_csum_copy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    XXH3_state_t *st;
    uint64_t h;

    /* the state's layout is private to the shared library: allocated by it, once per copy */
    st = n > KVT_CSUM_BLOCK ? XXH3_createState() : NULL;
    if (st == NULL) {
        memcpy(d, s, n);
        return XXH3_64bits(d, n);
    }
    XXH3_64bits_reset(st);
#if defined(__SSE2__)
    if (((uintptr_t)d & 15) == 0) {
        for (size_t off = 0; off < n; off += KVT_CSUM_BLOCK) {
            size_t k = n - off < KVT_CSUM_BLOCK ? n - off : KVT_CSUM_BLOCK;
            XXH3_64bits_update(st, s + off, k);
            stream_copy(d + off, s + off, k);
        }
        _mm_sfence(); /* the streamed bytes are visible before whatever the caller does next */
        h = XXH3_64bits_digest(st);
        XXH3_freeState(st);
        return h;
    }
#endif
    for (size_t off = 0; off < n; off += KVT_CSUM_BLOCK) {
        size_t k = n - off < KVT_CSUM_BLOCK ? n - off : KVT_CSUM_BLOCK;
        for (size_t p = off + KVT_CSUM_AHEAD; p < off + KVT_CSUM_AHEAD + k && p < n; p += 64)
            __builtin_prefetch(s + p, 0, 3);
        memcpy(d + off, s + off, k);
        XXH3_64bits_update(st, d + off, k);
    }
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}
