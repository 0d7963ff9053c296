/*
 * checkpoint.h - the disk tier's index checkpoint: what a full scan of the segments would give
 * recovery, written down so that a restart reads one file instead of every record.
 *
 * Contents: the segments it covers (id, committed size, record format version) and every live
 * record in them (the store's entries with a disk copy, in segment and offset order): its
 * location (segment, offset, header and payload lengths, version) and what recovery needs of
 * its header (namespace identity, rank, hash, parent hash, raw length, checksum). It is written
 * at a clean stop, after the last flush, and every disk.checkpoint_interval_s while running
 * (atomically: temporary file, fsync, rename, fsync of the directory), as <disk.dir>/index.ckpt.
 *
 * At start (disk.c) it is used only when it is intact (its checksum) and current: every segment
 * it names exists with exactly the size it recorded - but the newest it names, which may have
 * grown since, whose tail past the recorded size is scanned - and every segment file older than
 * the newest it names is one it names. Segments newer than it are scanned. Anything else
 * (missing, corrupted, another version, a segment missing, shorter, longer or not covered) is
 * today's full scan, with a log line saying why. Reads still verify every record's checksum: a
 * checkpoint only says where records are.
 *
 * File: magic "KVTCKPT1", `version u32`, reserved u32, `written_ms u64` (CLOCK_REALTIME),
 * reserved u64; items `tag u8, len u32, body[len]`: SEG (1) `id u64, size u64, version u8`; NS
 * (2) `model_len u8, model, revision_len u8, revision, fingerprint u64, world u16, flags u8
 * (RECORD_F_REPLICATED), chunk_tokens u32`, numbered from 0 in file order; REC (3) `ns u32, seg
 * u64, off u64, hdr_len u16, stored u32, version u8, rank u16, flags u8 (RECORD_F_PARENT),
 * hash[16], parent[16], raw_len u64, csum u64`; then END (0xff, len 8) `xxh3 u64` of every byte
 * before it. Little-endian.
 *
 * Threads: the builder and decoder are pure (any thread; the fuzzer's); ckpt_write runs on a
 * worker (periodic) or the loop (at the stop).
 */
#ifndef KVT_CHECKPOINT_H
#define KVT_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fsutil.h"
#include "record.h"

#define CKPT_VERSION 1u
#define CKPT_FILE "index.ckpt"

/* Where a record lives (disk.h's disk_loc_t, without depending on disk.h). */
typedef struct {
    uint64_t seg, off;
    uint16_t hdr_len;
    uint32_t stored;
    uint8_t version;
} ckpt_loc_t;

/* A checkpoint being built: a growing buffer (ckpt_finish seals it). */
typedef struct {
    fsutil_buf_t buf; /* the file so far */
    /* the namespaces written so far, to refer to them by number */
    struct ckpt_ns {
        uint64_t fingerprint;
        uint32_t chunk_tokens;
        uint16_t world;
        uint8_t flags;
        char model[256], revision[256];
    } * ns;
    uint32_t nns, nscap;
} ckpt_buf_t;

/* Starts a checkpoint; 0 or -ENOMEM. */
int ckpt_begin(ckpt_buf_t *c, uint64_t written_ms);
/* Every SEG first, in id order; then the RECs in (segment, offset) order. */
void ckpt_put_seg(ckpt_buf_t *c, uint64_t id, uint64_t size, uint8_t version);
void ckpt_put_rec(ckpt_buf_t *c, const record_meta_t *m, const ckpt_loc_t *loc);
/* Seals it: 0 (c->buf.b[c->buf.len] is the file) or -ENOMEM (something could not be added). */
int ckpt_finish(ckpt_buf_t *c);
void ckpt_free(ckpt_buf_t *c);

typedef struct {
    /* each returns 0 to go on; decoding stops at the first non-zero, which it returns */
    int (*seg)(void *arg, uint64_t id, uint64_t size, uint8_t version);
    /* m: the record's namespace, rank, hash, parent, lengths and checksum as the scan would
     * decode them (model and revision NUL terminated); valid for the call */
    int (*rec)(void *arg, const record_meta_t *m, const ckpt_loc_t *loc);
} ckpt_visit_t;

/* Decodes buf[n]: checks magic, version and the trailing checksum before visiting anything,
 * then visits every item. 0, -EBADMSG (short, magic, checksum, an item that does not fit its
 * tag, a REC of a namespace not defined before it, RECs out of order), -EPROTO (another
 * version), or a visitor's non-zero value. *written_ms may be NULL. */
int ckpt_decode(const uint8_t *buf, size_t n, const ckpt_visit_t *v, void *arg,
                uint64_t *written_ms);

/* Writes the sealed checkpoint c as dir/CKPT_FILE atomically (fsutil_write_atomic). 0 or a
 * negative errno. */
int ckpt_write(const char *dir, const ckpt_buf_t *c);

#endif /* KVT_CHECKPOINT_H */
