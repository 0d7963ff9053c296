/*
 * codec.h - per-record compression of the disk tier: byte-shuffle, then lz4, kept only where
 * it pays.
 *
 * Byte-shuffle splits the bytes of each element into planes (all first bytes, then all second
 * bytes, ...). KV caches are 16-bit floats: the high byte (sign, exponent, top mantissa bits)
 * repeats a lot, the low byte is noise; interleaved, lz4 finds almost nothing (ratio ~1.00 on
 * normal-distributed bf16), shuffled, the high-byte plane compresses. Bytes past the last whole
 * element stay in place at the end.
 *
 * Modes: "off" stores raw; "lz4" stores compressed whenever that is smaller than raw; "auto"
 * first compresses a 64 KiB sample (shuffled on its own) and stores raw at once when the sample
 * ratio is above the threshold, else compresses everything and keeps it only when the whole
 * ratio is at most the threshold. The sample makes incompressible chunks cost ~3% of a full
 * compression instead of 100%.
 *
 * Threads: pure, any thread; no allocation (callers pass the scratch space).
 */
#ifndef KVT_CODEC_H
#define KVT_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* Values in the order of their configuration words (codec_mode_words): auto, lz4, off. */
typedef enum { CODEC_MODE_AUTO = 0, CODEC_MODE_LZ4, CODEC_MODE_OFF } codec_mode_t;

/* The words of the modes ("auto", "lz4", "off"), indexed by codec_mode_t, NULL-terminated: the
 * one list that the "disk.compression" key, its messages and the status use. */
extern const char *const codec_mode_words[];

#define CODEC_SAMPLE_BYTES (64u * 1024u)

/* "off" | "lz4" | "auto" -> mode. Returns 0 or -1. */
int codec_mode_parse(const char *s, codec_mode_t *mode);

/* The word of a mode, or "unknown". */
const char *codec_mode_name(codec_mode_t mode);

/* dst[n] = the planes of src[n] for elements of elem bytes (1: a plain copy). */
void codec_shuffle(void *dst, const void *src, size_t n, unsigned elem);
void codec_unshuffle(void *dst, const void *src, size_t n, unsigned elem);

/*
 * Encodes src[n] (n > 0, n < 2^31) into dst (cap >= n) using scratch (>= n bytes). Returns the
 * stored length and sets *codec: RECORD_CODEC_RAW (the result is n; dst holds nothing useful and
 * the caller stores src itself, which saves a copy) or RECORD_CODEC_LZ4 (dst holds lz4 of the
 * shuffled bytes and the result is < n). elem 1 = plain lz4 without a shuffle.
 */
size_t codec_encode(codec_mode_t mode, double threshold, unsigned elem, const void *src, size_t n,
                    void *dst, size_t cap, void *scratch, uint8_t *codec);

/* Decodes stored bytes into dst of exactly raw bytes, with scratch (>= raw bytes). Returns 0,
 * or -1 when the stored bytes do not decode to exactly raw bytes. */
int codec_decode(uint8_t codec, unsigned elem, const void *src, size_t stored, void *dst,
                 size_t raw, void *scratch);

#endif /* KVT_CODEC_H */
