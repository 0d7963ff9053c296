/*
 * hash.c - chunk hash chains, engine keys, namespace fingerprints and hash text (see kvtier.h).
 *
 * Design: everything here is a pure function of its inputs, computed with xxHash (XXH3).
 * - A chunk hash is XXH3_128bits (seed 0) over prev (16 bytes) followed by the chunk's token ids
 *   as little-endian u32. The 128-bit result is stored in xxHash's canonical form (high 64 bits
 *   then low 64 bits, each big-endian), so the bytes, and the hex text, are the same on every
 *   host and equal what `xxhsum -H2` prints for the same input.
 * - The layout fingerprint is XXH3_64bits over a canonical encoding of every descriptor field
 *   except the model name, in declaration order: dtype as u64 length + bytes, chunk_tokens,
 *   num_layers, num_kv_heads, head_dim, world_size as u32, mla as one byte (0 or 1), hash_seed as
 *   u64, tenant as u64 length + bytes; then, only when the revision is not empty (0.2), the
 *   revision as u64 length + bytes, so a descriptor without a revision keeps its 0.1
 *   fingerprint (and the chunks its disk records hold). NULL strings encode as empty ones. All
 *   integers are little-endian, so the fingerprint does not depend on the host.
 * - An engine key's chunk hash (kvt_hash_key) is XXH3_128bits (seed 0) over a 16-byte domain
 *   tag, the salt length as a little-endian u32, the salt and the key, in the canonical form
 *   above. The tag keeps these hashes apart from kvt_hash_chain's, whose input starts with a
 *   16-byte hash; the length prefix keeps (salt, key) pairs that concatenate alike apart.
 * Streaming states live on the stack (XXH_STATIC_LINKING_ONLY): no allocation, no failure path.
 *
 * Threads: no state; every function may be called from any thread.
 */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <string.h>

#include "kvt_proto.h" /* kvt_put_u32/u64: the little-endian helpers of the wire protocol */
#include "kvtier.h"

static void fp_string(XXH3_state_t *st, const char *s)
{
    uint8_t len[8];
    size_t n = s != NULL ? strlen(s) : 0;

    kvt_put_u64(len, (uint64_t)n);
    XXH3_64bits_update(st, len, sizeof len);
    if (n > 0)
        XXH3_64bits_update(st, s, n);
}

uint64_t kvt_ns_fingerprint(const kvt_ns_desc_t *ns)
{
    XXH3_state_t st;
    uint8_t fixed[5 * 4 + 1 + 8];

    if (ns == NULL)
        return 0;
    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    fp_string(&st, ns->dtype);
    kvt_put_u32(fixed, ns->chunk_tokens);
    kvt_put_u32(fixed + 4, ns->num_layers);
    kvt_put_u32(fixed + 8, ns->num_kv_heads);
    kvt_put_u32(fixed + 12, ns->head_dim);
    kvt_put_u32(fixed + 16, ns->world_size);
    fixed[20] = ns->mla != 0;
    kvt_put_u64(fixed + 21, ns->hash_seed);
    XXH3_64bits_update(&st, fixed, sizeof fixed);
    fp_string(&st, ns->tenant);
    if (ns->revision != NULL && ns->revision[0] != '\0')
        fp_string(&st, ns->revision);
    return XXH3_64bits_digest(&st);
}

/* Feeds n token ids to st as little-endian u32. */
static void chain_tokens(XXH3_state_t *st, const uint32_t *tok, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    XXH3_128bits_update(st, tok, n * sizeof *tok);
#else
    uint8_t buf[4 * 256];

    while (n > 0) {
        size_t k = n < 256 ? n : 256;
        for (size_t i = 0; i < k; i++)
            kvt_put_u32(buf + 4 * i, tok[i]);
        XXH3_128bits_update(st, buf, 4 * k);
        tok += k;
        n -= k;
    }
#endif
}

size_t kvt_hash_chain(const uint32_t *tokens, size_t ntokens, uint32_t chunk_tokens,
                      const kvt_hash_t *parent, kvt_hash_t *out, size_t out_cap)
{
    XXH3_state_t st;
    XXH128_canonical_t canon;
    kvt_hash_t prev;
    size_t n;

    if (chunk_tokens == 0 || tokens == NULL || out == NULL)
        return 0;
    n = ntokens / chunk_tokens;
    if (n > out_cap)
        n = out_cap;
    if (parent != NULL)
        prev = *parent;
    else
        memset(&prev, 0, sizeof prev);
    XXH3_INITSTATE(&st);
    for (size_t i = 0; i < n; i++) {
        XXH3_128bits_reset(&st);
        XXH3_128bits_update(&st, prev.b, sizeof prev.b);
        chain_tokens(&st, tokens + i * (size_t)chunk_tokens, chunk_tokens);
        XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
        _Static_assert(sizeof canon.digest == sizeof prev.b, "canonical xxh128 is 16 bytes");
        memcpy(prev.b, canon.digest, sizeof prev.b);
        out[i] = prev;
    }
    return n;
}

static const uint8_t key_tag[16] = "kvtier-key-v1\0\0";

void kvt_hash_key(const void *key, size_t key_len, const void *salt, size_t salt_len,
                  kvt_hash_t *out)
{
    XXH3_state_t st;
    XXH128_canonical_t canon;
    uint8_t len[4];

    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, key_tag, sizeof key_tag);
    kvt_put_u32(len, (uint32_t)salt_len);
    XXH3_128bits_update(&st, len, sizeof len);
    if (salt_len > 0)
        XXH3_128bits_update(&st, salt, salt_len);
    if (key_len > 0)
        XXH3_128bits_update(&st, key, key_len);
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
    memcpy(out->b, canon.digest, sizeof out->b);
}

void kvt_hash_keys(const void *keys, size_t key_len, size_t n, const void *salt, size_t salt_len,
                   kvt_hash_t *out)
{
    const uint8_t *k = keys;

    for (size_t i = 0; i < n; i++)
        kvt_hash_key(k + i * key_len, key_len, salt, salt_len, &out[i]);
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int kvt_hash_parse(const char *hex, kvt_hash_t *h)
{
    kvt_hash_t tmp;

    if (hex == NULL || h == NULL)
        return KVT_EINVAL;
    for (size_t i = 0; i < sizeof tmp.b; i++) {
        int hi = hex_value(hex[2 * i]);
        int lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
        if (lo < 0)
            return KVT_EINVAL;
        tmp.b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[2 * sizeof tmp.b] != '\0')
        return KVT_EINVAL;
    *h = tmp;
    return 0;
}

void kvt_hash_format(const kvt_hash_t *h, char buf[33])
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < sizeof h->b; i++) {
        buf[2 * i] = digits[h->b[i] >> 4];
        buf[2 * i + 1] = digits[h->b[i] & 0xf];
    }
    buf[2 * sizeof h->b] = '\0';
}
