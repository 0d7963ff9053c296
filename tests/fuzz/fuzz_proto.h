/*
 * fuzz_proto.h - the input format of the kvt_proto libFuzzer target (fuzz_proto.c), shared with
 * its seed generator (fuzz_proto_seeds.c).
 *
 * An input is a multipart message:
 *   byte 0              number of frames, taken modulo FUZZ_MAX_FRAMES + 1 (0..32)
 *   then, per frame     a 2-byte little-endian length L, then L bytes of frame data
 * A length that runs past the end of the input is cut to the bytes that remain; frames whose
 * length field lies past the end are empty. Every non-empty frame is copied into its own
 * allocation of exactly its length, so AddressSanitizer sees any read past a frame; an empty frame
 * is passed as {NULL, 0}.
 *
 * The decoder runs with the small limits below, so that the limit checks are reachable with
 * short inputs.
 */
#ifndef KVT_FUZZ_PROTO_H
#define KVT_FUZZ_PROTO_H

#define FUZZ_MAX_FRAMES 32
#define FUZZ_MAX_HASHES 4
#define FUZZ_MAX_PAYLOAD 48

#endif /* KVT_FUZZ_PROTO_H */
