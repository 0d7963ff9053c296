/*
 * journal.h - the RAM tier's journal: what the arena holds, written where no client can reach
 * it, so that a restart can re-attach the arena (ram.h) and trust only what the daemon itself
 * committed there.
 *
 * The arena is mapped read-write by clients (shared-memory saves write into it), so nothing in
 * it can vouch for a chunk. The journal is a private file (mode 0600, ram.journal_path; by
 * default <arena>.d/journal beside an arena on a tmpfs, else <disk.dir>/<arena name>.journal:
 * store_reattach.c) that the daemon appends to: a namespace record the first
 * time a namespace's chunk is journaled (its identity: model, revision, fingerprint, world,
 * chunk_tokens, replication), an ADD record for every chunk that becomes RAM-resident (published
 * by a save or commit, or promoted from disk: namespace, rank, hash, parent hash, arena location
 * and length, checksum), and a DEL record (its location) whenever a chunk's arena extent is
 * given up (evicted, dropped, found corrupt, released after a write-back). The live set is
 * therefore, for every location, its last record when that is an ADD. A re-attach accepts a live
 * entry only if the XXH3-64 of the bytes now at its location equals the journaled checksum: a
 * client that wrote into the shared mapping can destroy a chunk, never forge one.
 *
 * File: a header (magic "KVTJRNL1", format version, the arena id, capacity and chunk-area
 * offset, the arena generation of the run that writes it, an XXH3-64 of those), then records.
 * Record: `len u16` (the whole record), `type u8`, reserved u8, the body, `csum u64` (XXH3-64
 * of everything before it in the record). A torn tail (a record cut short, or one whose checksum
 * fails) ends the journal there. All integers little-endian.
 *
 * Durability: records are written with write(2) into the page cache, without fsync: enough for
 * a process crash (SIGKILL, abort), the case the journal is for; a machine crash empties
 * /dev/shm anyway. A clean stop rewrites (compacts) the journal to exactly the live set and
 * fsyncs it. While running, the store compacts it when its records pass
 * JOURNAL_COMPACT_FACTOR x the live chunks (plus a floor), so its size stays within a constant
 * factor of what RAM holds.
 *
 * The decoder (journal_decode_hdr, journal_decode) is a pure function of its bytes, for the
 * fuzzer. journal_t is the appending file: records are gathered in a buffer and written by
 * journal_flush() (the store flushes before a save is answered and before an extent given up
 * can be handed out again, so the journal on file is never behind what a client was told or
 * what the arena can hold).
 *
 * Threads: loop thread only. Ownership: journal_t owns its descriptor and buffer.
 */
#ifndef KVT_JOURNAL_H
#define KVT_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_VERSION 1u
#define JOURNAL_HDR_BYTES 56u
#define JOURNAL_REC_MAX (4u + 16u + 255u + 255u + 8u + 8u) /* the largest record (NS) */
#define JOURNAL_COMPACT_FACTOR 4u
#define JOURNAL_COMPACT_FLOOR 4096u

typedef enum { JOURNAL_NS = 1, JOURNAL_ADD = 2, JOURNAL_DEL = 3 } journal_type_t;

#define JOURNAL_ADD_PARENT 0x1u
#define JOURNAL_ADD_ORPHAN 0x2u /* saved with a declared predecessor that was not stored */
#define JOURNAL_NS_REPLICATED 0x1u

typedef struct {
    uint64_t arena_id;
    uint64_t capacity;
    uint64_t chunk_off;
    uint32_t unit;
    uint32_t gen;
} journal_hdr_t;

typedef struct {
    uint32_t ns; /* the journal's name for the namespace (the writer's ns id) */
    uint16_t world;
    uint8_t flags; /* JOURNAL_NS_* */
    uint8_t model_len, revision_len;
    uint32_t chunk_tokens;
    uint64_t fingerprint;
    char model[256], revision[256]; /* NUL-terminated */
} journal_ns_t;

typedef struct {
    uint32_t ns;
    uint16_t rank;
    uint8_t flags; /* JOURNAL_ADD_* */
    uint8_t hash[16], parent[16];
    uint64_t off, len, csum;
} journal_add_t;

typedef struct {
    journal_type_t type;
    union {
        journal_ns_t ns;
        journal_add_t add;
        uint64_t del_off;
    } u;
} journal_rec_t;

/* Encoders: write the header / one record into buf (JOURNAL_HDR_BYTES / JOURNAL_REC_MAX bytes
 * at least) and return its length. A model or revision longer than 255 bytes is cut. */
size_t journal_encode_hdr(const journal_hdr_t *h, uint8_t *buf);
size_t journal_encode(const journal_rec_t *r, uint8_t *buf);

/* Decoders, pure: journal_decode_hdr returns 0 or -EBADMSG (short, magic, version, checksum);
 * journal_decode returns the record's length (> 0), 0 when buf[n] ends inside the record (a
 * torn tail), or -EBADMSG (checksum, unknown type, a length that does not fit the type). */
int journal_decode_hdr(const uint8_t *buf, size_t n, journal_hdr_t *out);
int journal_decode(const uint8_t *buf, size_t n, journal_rec_t *out);

typedef struct journal journal_t;

/* Starts a new journal for path: path.tmp is created (mode 0600) with the header h and opened
 * for appending; the file at path is untouched until journal_install(). Returns 0 or a negative
 * errno. */
int journal_create(const char *path, const journal_hdr_t *h, journal_t **out);

/* Flushes, fsyncs when sync, and renames path.tmp over path: from here the new journal is the
 * one a restart reads (appends continue into it). 0 or a negative errno (the journal is broken
 * then, see journal_flush). */
int journal_install(journal_t *j, bool sync);

/* Flushes and closes; with sync, fsyncs first. Sets *j to NULL; NULL is accepted. */
void journal_close(journal_t **j, bool sync);

/* Appends a record to the buffer (flushed when full). A namespace's record is written once per
 * file, before its first ADD: the caller asks journal_ns_known() (which remembers the namespace
 * as known from then) and appends journal_put_ns() when it was not. */
bool journal_ns_known(journal_t *j, uint32_t ns);
void journal_put_ns(journal_t *j, const journal_ns_t *ns);
void journal_add(journal_t *j, const journal_add_t *a);
void journal_del(journal_t *j, uint64_t off);

/* Writes the buffered records. Returns 0 or the negative errno of the write. A journal that
 * cannot be written is broken: journal_failed() is true from then, nothing more is appended,
 * and the file is truncated to nothing, so that the next start re-attaches no chunk (a record
 * lost might be a DEL: losing the cache is acceptable, resurrecting an evicted or dropped
 * chunk is not). */
int journal_flush(journal_t *j);

bool journal_failed(const journal_t *j);
uint64_t journal_records(const journal_t *j); /* records appended since journal_create */
uint64_t journal_bytes(const journal_t *j);   /* the file's size */
const char *journal_path(const journal_t *j);

/* Reads the whole file at path into a malloc'd buffer (*buf, *len). 0, -ENOENT, or an errno. */
int journal_read(const char *path, uint8_t **buf, size_t *len);

#endif /* KVT_JOURNAL_H */
