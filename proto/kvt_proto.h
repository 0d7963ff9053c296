/*
 * kvt_proto.h - the kvtier wire protocol: message layouts, encode and decode.
 *
 * This module is pure: no I/O, no ZeroMQ, no allocation, no global state. Every function may be
 * called from any thread. It is shared by the daemon and the client library; PROTOCOL.md beside
 * this file is the normative description and must change together with this header.
 *
 * A message is a ZeroMQ multipart message made of frames. Frame 0 is the "head": a fixed 24-byte
 * common header followed by a fixed-size body whose layout depends on the message type. Every
 * variable-length part (model name, hash lists, per-chunk outcome arrays, chunk payloads, error
 * text) travels as a frame of its own, so that bulk bytes are never copied to be framed and
 * every length is the frame's own length. All integers are little-endian.
 *
 * Decoding is strict: the head must have exactly the size its type demands, frame counts must
 * match, hash frames must be a non-zero multiple of 16 bytes no longer than the caller's limit.
 * Decoded messages borrow the caller's frame buffers; they are valid while the frames are.
 */
#ifndef KVT_PROTO_H
#define KVT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define KVT_PROTO_MAGIC 0x3154564bu /* bytes "KVT1" */
#define KVT_PROTO_VERSION 2         /* the version this module speaks by default */
#define KVT_PROTO_VERSION_MIN 1     /* the oldest version it still encodes and decodes */
#define KVT_HASH_BYTES 16
#define KVT_HDR_BYTES 24
#define KVT_MODEL_MAX 255      /* bytes of a model name */
#define KVT_ERRTEXT_MAX 255    /* bytes of an error message */
#define KVT_PATH_MAX 255       /* bytes of an arena path */
#define KVT_RANK_ALL 0xffffu   /* lookup rank meaning "every rank of the namespace" */
#define KVT_WORLD_MAX 1024     /* largest tensor-parallel world a namespace may declare */
#define KVT_REASON_MAX 16      /* per-reason counters a tally may carry */
#define KVT_REASON_NAME_MAX 48 /* bytes of a reason name */
#define KVT_REVISION_MAX 255   /* bytes of a model revision (HELLO, protocol 2) */
#define KVT_CSUM_BYTES 8       /* one chunk checksum (LOAD_OK, protocol 2) */

/* Message types. Requests are odd, their replies are request + 1; ERROR answers any request. */
typedef enum {
    KVT_MSG_HELLO = 1,
    KVT_MSG_HELLO_OK = 2,
    KVT_MSG_LOOKUP = 3,
    KVT_MSG_LOOKUP_OK = 4,
    KVT_MSG_SAVE_BEGIN = 5,
    KVT_MSG_SAVE_BEGIN_OK = 6,
    KVT_MSG_SAVE_DATA = 7,
    KVT_MSG_SAVE_OK = 8,
    KVT_MSG_LOAD = 9,
    KVT_MSG_LOAD_OK = 10,
    KVT_MSG_TALLY = 11,
    KVT_MSG_TALLY_OK = 12,
    KVT_MSG_ARENA = 13, /* shared-memory data path: where is the arena? */
    KVT_MSG_ARENA_OK = 14,
    KVT_MSG_SAVE_RESERVE = 15, /* shared memory: reserve arena space for the wanted chunks */
    KVT_MSG_SAVE_RESERVE_OK = 16,
    KVT_MSG_SAVE_COMMIT = 17, /* shared memory: the reserved chunks are written; publish */
    KVT_MSG_RELEASE = 19,     /* shared memory: the loaded chunks were copied out */
    KVT_MSG_RELEASE_OK = 20,
    KVT_MSG_ERROR = 127,
} kvt_msg_type_t;

/*
 * Wire error codes (negative). The public header kvtier.h exposes the same numbers as KVT_E*;
 * the values are part of the protocol and never change meaning.
 */
typedef enum {
    KVT_WIRE_OK = 0,
    KVT_WIRE_EPROTO = -1,    /* malformed message: bad magic, sizes, frame count */
    KVT_WIRE_EVERSION = -2,  /* protocol version not supported */
    KVT_WIRE_ENONS = -3,     /* namespace unknown or not declared by this client */
    KVT_WIRE_ETOOBIG = -4,   /* a payload or a list exceeds the daemon's limits */
    KVT_WIRE_EINVAL = -5,    /* well-formed but invalid argument (rank >= world, ...) */
    KVT_WIRE_ECONFLICT = -6, /* namespace already declared with another world or replication */
    KVT_WIRE_EBUSY = -7,     /* daemon is shutting down or over a resource limit */
    KVT_WIRE_EUNSUPP = -8,   /* unknown message type */
    KVT_WIRE_ESTALE = -9,    /* shared-memory request of another arena generation (2) */
} kvt_wire_err_t;

/* Per-chunk outcomes of SAVE_BEGIN_OK and SAVE_OK, and per-chunk status of LOAD_OK. */
typedef enum {
    KVT_CHUNK_WANTED = 0,   /* SAVE_BEGIN_OK: send this chunk's bytes */
    KVT_CHUNK_STORED = 1,   /* SAVE_OK: stored now */
    KVT_CHUNK_EXISTS = 2,   /* already stored; no bytes needed */
    KVT_CHUNK_NOSPACE = 3,  /* could not be stored: capacity (everything evictable is pinned) */
    KVT_CHUNK_DECLINED = 4, /* the save-admission gate declined the operation */
    KVT_CHUNK_SKIPPED = 5,  /* SAVE_OK: no bytes were sent for a chunk that was not stored */
    KVT_CHUNK_HIT = 6,      /* LOAD_OK: payload frame holds the chunk */
    KVT_CHUNK_MISS = 7,     /* LOAD_OK: not stored; payload frame is empty */
} kvt_chunk_status_t;

/*
 * Feature bits (protocol 2): HELLO offers what the client understands, HELLO_OK answers the
 * subset the daemon implements. A behaviour added after protocol 2 gets a bit; a change an older
 * peer would misread bumps the version instead.
 */
#define KVT_FEAT_CHECKSUMS 0x1ull    /* LOAD_OK checksums are real (else 0: not known) */
#define KVT_FEAT_TOKENS 0x2ull       /* TALLY token totals are folded by the gates */
#define KVT_FEAT_ARENA_GEN 0x4ull    /* shared-memory requests are checked against hdr.gen */
#define KVT_FEAT_CLIENT_CSUMS 0x8ull /* SAVE_COMMIT may carry the writer's checksums */

/* HELLO flags */
#define KVT_HELLO_REPLICATED 0x1u /* MLA: one copy of every chunk serves all ranks */
/* LOOKUP flags */
#define KVT_LOOKUP_LEASE 0x1u  /* pin the hits for the daemon's lease time */
#define KVT_LOOKUP_PROMPT 0x2u /* prompt_tokens / hbm_tokens are meaningful (lookup-skip gate) */
/* LOOKUP_OK flags */
#define KVT_LOOKUPR_SKIPPED 0x1u      /* the lookup-skip gate answered without looking */
#define KVT_LOOKUPR_LEASED 0x2u       /* the hits are pinned until lease_ms from now */
#define KVT_LOOKUPR_LEASE_CAPPED 0x4u /* a lease was asked but not granted: a lease bound */
/* LOAD flags / LOAD_OK flags */
#define KVT_LOAD_SHM 0x1u  /* answer with arena locations under a load pin, not with bytes */
#define KVT_LOADR_SHM 0x1u /* LOAD_OK carries locations (frame 2) instead of payload frames */
/* SAVE_BEGIN / SAVE_DATA flags */
#define KVT_SAVE_PARENT 0x1u /* parent holds the hash of the chunk before the first one */
#define KVT_SAVE_OPID 0x2u   /* op_id names the save operation (else derived by the daemon) */
/* RELEASE flags (protocol 2) */
#define KVT_RELEASE_CORRUPT 0x1u /* the chunks failed the client's checksum verification */
/* TALLY flags (protocol 2) */
#define KVT_TALLY_TOKENS 0x1u /* served_tokens_total / lookup_tokens_total are meaningful */

typedef struct {
    uint8_t b[KVT_HASH_BYTES];
} kvt_wire_hash_t;

/* A borrowed view of one frame. */
typedef struct {
    const void *data;
    size_t len;
} kvt_frame_t;

typedef struct {
    uint8_t version; /* protocol version; 0 when encoding means KVT_PROTO_VERSION */
    uint8_t type;    /* kvt_msg_type_t */
    uint16_t flags;  /* per-type flags above */
    uint64_t req_id; /* chosen by the client, echoed in the reply */
    uint32_t ns_id;  /* namespace handle from HELLO_OK; 0 in HELLO and replies to it */
    uint32_t gen;    /* protocol 2: arena generation of a shared-memory request (0 = not
                        checked); reserved (0) elsewhere and in protocol 1 */
} kvt_hdr_t;

/* frames: head, model name; protocol 2: head, model name, revision (may be empty) */
typedef struct {
    uint64_t layout_fp;    /* fingerprint of the KV layout (dtype, layers, heads, seed...) */
    uint32_t chunk_tokens; /* tokens per chunk, > 0 */
    uint16_t rank;         /* this client's rank, < world */
    uint16_t world;        /* ranks of the namespace, 1..KVT_WORLD_MAX */
    const char *model;     /* borrowed, not NUL-terminated */
    size_t model_len;      /* 1..KVT_MODEL_MAX */
    uint64_t features;     /* protocol 2: KVT_FEAT_* the client understands */
    const char *revision;  /* protocol 2: model revision, borrowed, not NUL-terminated */
    size_t revision_len;   /* 0..KVT_REVISION_MAX (0 in protocol 1) */
} kvt_hello_t;

/* frames: head */
typedef struct {
    uint32_t ns_id;
    uint32_t lease_ms;        /* the daemon's lease time */
    uint64_t max_chunk_bytes; /* largest payload the daemon accepts */
    uint32_t max_chunks;      /* most hashes per request */
    uint32_t daemon_version;  /* (major << 16) | (minor << 8) | patch */
    uint64_t features;        /* protocol 2: KVT_FEAT_* offered and implemented */
    uint32_t max_in_flight;   /* protocol 2: requests this client may have outstanding */
    uint32_t arena_gen;       /* protocol 2: generation of the shared arena (0: none) */
} kvt_hello_ok_t;

/* frames: head, hashes */
typedef struct {
    uint16_t rank; /* a rank < world, or KVT_RANK_ALL */
    uint64_t prompt_tokens;
    uint64_t hbm_tokens;
    const kvt_wire_hash_t *hashes; /* borrowed; may be unaligned: read with memcpy */
    size_t nhashes;
} kvt_lookup_t;

/* frames: head, per-rank hits (u32 each; empty unless the lookup named KVT_RANK_ALL) */
typedef struct {
    uint32_t hit;             /* contiguous prefix hit in chunks (the minimum over ranks) */
    uint32_t lease_ms;        /* remaining lease of the hits when KVT_LOOKUPR_LEASED */
    const uint8_t *rank_hits; /* borrowed: nranks little-endian u32 */
    size_t nranks;
} kvt_lookup_ok_t;

/* An arena location: 16 bytes on the wire, u64 offset then u64 length. */
#define KVT_LOC_BYTES 16

/* SAVE_BEGIN frames: head, hashes. SAVE_DATA frames: head, hashes, one payload per hash
 * (empty = no bytes sent for that chunk). SAVE_RESERVE frames: head, hashes, lengths (u64 per
 * hash, each 1..max_payload_bytes). SAVE_COMMIT frames: head, hashes, locations, and in protocol 2
 * optionally the writer's checksums (u64 per hash; feature CLIENT_CSUMS). */
typedef struct {
    uint16_t rank;
    uint64_t op_id;
    kvt_wire_hash_t parent;
    const kvt_wire_hash_t *hashes;
    size_t nhashes;
    const kvt_frame_t *payloads; /* SAVE_DATA only: nhashes frames, borrowed */
    const uint8_t *lengths;      /* SAVE_RESERVE only: nhashes little-endian u64 */
    const uint8_t *locs;         /* SAVE_COMMIT only: nhashes locations */
    const uint8_t *csums;        /* SAVE_COMMIT, protocol 2: nhashes u64 checksums, or NULL */
} kvt_save_t;

/* SAVE_BEGIN_OK / SAVE_OK / LOAD_OK frames: head, per-chunk status bytes, and for LOAD_OK one
 * payload per chunk (empty on a miss), or with KVT_LOADR_SHM one locations frame. Protocol 2
 * LOAD_OK adds a checksums frame (KVT_CSUM_BYTES per chunk): head, status, checksums, payloads;
 * or with KVT_LOADR_SHM head, status, locations, checksums.
 * SAVE_RESERVE_OK frames: head, status (WANTED = reserved), locations (zero when not reserved).
 * hold_ms (SAVE_RESERVE_OK, LOAD_OK with KVT_LOADR_SHM) is how long the daemon keeps the
 * reservation or the load pin before reclaiming it. */
typedef struct {
    const uint8_t *status; /* borrowed: n kvt_chunk_status_t bytes */
    size_t n;
    const kvt_frame_t *payloads; /* LOAD_OK only */
    const uint8_t *locs;         /* SAVE_RESERVE_OK, LOAD_OK with KVT_LOADR_SHM: n locations */
    const uint8_t *checksums;    /* LOAD_OK, protocol 2: n little-endian u64, else NULL */
    uint32_t hold_ms;
} kvt_chunks_ok_t;

/* ARENA_OK frames: head, arena path (empty: no shared arena; use the frames path). */
#define KVT_ARENA_PREFAULTED 0x1u /* ARENA_OK flag: every page is allocated; map it populated */
typedef struct {
    uint64_t arena_bytes;
    uint32_t hold_ms;
    uint32_t arena_gen; /* protocol 2: the arena's generation (reserved 0 in protocol 1) */
    const char *path;   /* borrowed, not NUL-terminated */
    size_t path_len;
} kvt_arena_ok_t;

/* RELEASE frames: head, hashes (the chunks of an earlier shared-memory LOAD). */
typedef struct {
    uint16_t rank;
    const kvt_wire_hash_t *hashes;
    size_t nhashes;
} kvt_release_t;

typedef struct {
    uint32_t released; /* load pins dropped */
} kvt_release_ok_t;

/* frames: head, hashes */
typedef struct {
    uint16_t rank;
    const kvt_wire_hash_t *hashes;
    size_t nhashes;
} kvt_load_t;

/* frames: head, reasons ("name=count" records, each u8 name length, name, u64 count; may be
 * empty). Totals are cumulative since the engine instance started. */
typedef struct {
    uint64_t engine_id;
    uint64_t paid_total;
    uint64_t probes_total;
    uint64_t served_tokens_total; /* protocol 2 (KVT_TALLY_TOKENS): tokens loaded and used */
    uint64_t lookup_tokens_total; /* protocol 2 (KVT_TALLY_TOKENS): prompt tokens looked up */
    const uint8_t *reasons;       /* borrowed encoded records */
    size_t reasons_len;
} kvt_tally_t;

/* frames: head. The namespace's gate state after the tally was folded. */
typedef struct {
    double payoff;       /* admission estimator */
    double share;        /* share of save operations the gate admits now */
    double act_ema;      /* lookup-skip actionable-rate estimator */
    uint64_t probes;     /* verdicts folded */
    uint64_t lookups;    /* lookups fed into act_ema */
    uint16_t gate_flags; /* KVT_GATE_* */
    /* protocol 2 */
    uint8_t policy;           /* KVT_POLICY_* of the admission gate */
    double density;           /* value-density estimate (served + regret per written token) */
    uint64_t served_tokens;   /* tokens the tier served (engine tallies) */
    uint64_t regret_tokens;   /* tokens a declined save would have served (ghost evidence) */
    uint64_t written_tokens;  /* tokens admitted and written */
    uint64_t declined_tokens; /* tokens of declined saves */
} kvt_tally_ok_t;

#define KVT_POLICY_ATOM 0
#define KVT_POLICY_VALUE 1

#define KVT_GATE_ADMISSION_ON 0x1u
#define KVT_GATE_SKIP_ON 0x2u
#define KVT_GATE_LOAD_BEARING 0x4u

/* frames: head, message text (may be empty) */
typedef struct {
    int32_t code; /* kvt_wire_err_t */
    const char *text;
    size_t text_len;
} kvt_error_t;

/* A decoded message: hdr plus the body of hdr.type. */
typedef struct {
    kvt_hdr_t hdr;
    union {
        kvt_hello_t hello;
        kvt_hello_ok_t hello_ok;
        kvt_lookup_t lookup;
        kvt_lookup_ok_t lookup_ok;
        kvt_save_t save;
        kvt_chunks_ok_t chunks_ok;
        kvt_load_t load;
        kvt_tally_t tally;
        kvt_tally_ok_t tally_ok;
        kvt_error_t error;
        kvt_arena_ok_t arena_ok;
        kvt_release_t release;
        kvt_release_ok_t release_ok;
    } u;
} kvt_msg_t;

/* Limits the decoder enforces; callers pass the daemon's configured values. */
typedef struct {
    size_t max_hashes;        /* most hashes in one list */
    size_t max_payload_bytes; /* largest chunk payload frame */
} kvt_limits_t;

/* Bytes of frame 0 for a message of the given type in protocol version (0 = KVT_PROTO_VERSION),
 * or 0 for an unknown type or version. */
size_t kvt_head_size_v(int type, int version);

/* Bytes of frame 0 for a message of the given type in KVT_PROTO_VERSION, or 0. */
size_t kvt_head_size(int type);

/*
 * Encodes frame 0 of m into buf (cap bytes) in protocol m->hdr.version (0: KVT_PROTO_VERSION).
 * Returns the number of bytes written (kvt_head_size_v of type and version), or 0 if the type or
 * version is unknown or cap is too small. Fields a version does not have are not encoded.
 * Variable frames are sent by the caller as they are (hashes as 16-byte arrays, status as
 * bytes, payloads raw), in the order of the message's version (PROTOCOL.md).
 */
size_t kvt_head_encode(void *buf, size_t cap, const kvt_msg_t *m);

/*
 * Decodes the nframes frames of one message of protocol 1 or 2 into out (out->hdr.version says
 * which). Pure: no allocation; out borrows frames (frames itself must outlive out when out
 * refers to payload frames). Returns 0 or a negative kvt_wire_err_t: KVT_WIRE_EPROTO for any
 * malformed size or count, KVT_WIRE_EVERSION for a version outside
 * KVT_PROTO_VERSION_MIN..KVT_PROTO_VERSION, KVT_WIRE_EUNSUPP for an unknown type, KVT_WIRE_ETOOBIG
 * when a list or a payload exceeds lim. On error, out->hdr is filled as far as it could be decoded
 * (type, flags, req_id and ns_id are valid whenever frame 0 held the common header with the right
 * magic; all zero otherwise) so that the error can be answered. Status bytes are checked to be
 * known values, not to be the ones a given reply type may carry: that is the reader's job.
 */
int kvt_msg_decode(const kvt_frame_t *frames, size_t nframes, const kvt_limits_t *lim,
                   kvt_msg_t *out);

/* Tally reasons: encode one record into buf; returns bytes written or 0 if it does not fit or
 * the name is empty or longer than KVT_REASON_NAME_MAX. */
size_t kvt_reason_encode(void *buf, size_t cap, const char *name, size_t name_len, uint64_t count);

/* Iterates the reason records of a decoded tally: *off starts at 0. Returns 1 and fills the
 * outputs for each record, 0 at the end, KVT_WIRE_EPROTO on a malformed record. */
int kvt_reason_next(const uint8_t *buf, size_t len, size_t *off, const char **name,
                    size_t *name_len, uint64_t *count);

/* A short static name for a message type, chunk status or wire error, for logs. */
const char *kvt_msg_type_name(int type);
const char *kvt_chunk_status_name(int status);
const char *kvt_wire_strerror(int code);

/* Why kvt_decode refused frames[0..nframes) with KVT_WIRE_EPROTO, in words, for the reply's text
 * (0.2.7): the head's size against its type's, a HELLO's frame count and its model and revision
 * names (empty, too long, a NUL byte); and (0.2.14) the frame count and frame sizes of LOOKUP,
 * LOAD and the SAVE requests (the hash list, lengths, locations, checksums, payload frames); ""
 * when it names nothing more. Pure, no allocation. */
const char *kvt_decode_why(const kvt_frame_t *frames, size_t nframes);

/* Little-endian helpers shared by encoder, decoder and users of per-rank hit arrays. */
static inline uint32_t kvt_get_u32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t kvt_get_u64(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)kvt_get_u32(b) | (uint64_t)kvt_get_u32(b + 4) << 32;
}

static inline void kvt_put_u32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

static inline void kvt_put_u64(void *p, uint64_t v)
{
    uint8_t *b = p;
    kvt_put_u32(b, (uint32_t)v);
    kvt_put_u32(b + 4, (uint32_t)(v >> 32));
}

#endif /* KVT_PROTO_H */
