/*
 * harness.h - runs the real kvtierd binary for integration tests.
 *
 * harness_start() creates a fresh directory (mkdtemp, under the run's scratch directory of
 * check_main.h, else /tmp; short paths so that ipc and Unix socket paths stay under 100 bytes),
 * writes a small JSON config there (memfd arena, endpoint ipc://<dir>/kvt.zmq, status socket
 * <dir>/status.sock, disk.dir <dir>/disk whether the tier is enabled or not, so that what the
 * daemon keeps for a restart - a RAM journal, the gate state - stays in the directory), starts
 * kvtierd with stderr in <dir>/kvtierd.log and waits, polling GET
 * /status with a deadline, until it answers. harness_stop() sends SIGTERM, waits for exit status 0
 * and fails the test if the log holds a sanitizer report. The daemon is started with
 * PR_SET_PDEATHSIG so that a test that fails (Check's forked child _exit()s) never leaves a daemon
 * behind.
 *
 * Failures inside the harness are Check assertion failures: call these only from a test
 * function (the forked test process). Not thread-safe; one thread per test.
 */
#ifndef KVT_TEST_HARNESS_H
#define KVT_TEST_HARNESS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include <zmq.h>

#include "kvt_proto.h"
#include "kvtier.h"

#define HARNESS_DEADLINE_MS 10000
/* How long a stop may take: the daemon's own bound on its shutdown persist (STORE_PERSIST_MS,
 * 20 s, store_io.c) plus a margin. A stop of a loaded daemon under the sanitizers once took more
 * than HARNESS_DEADLINE_MS, which is the daemon's bound, not a hang. */
#define HARNESS_STOP_MS 30000

typedef struct {
    uint64_t capacity_bytes;  /* 0: 4 MiB */
    uint64_t max_chunk_bytes; /* 0: 256 KiB */
    uint32_t lease_ms;        /* 0: 30000 */
    const char *extra_json;   /* NULL, or a JSON object deep-merged over the generated config */
    int keep_arena;  /* a file arena (ram.arena_path) outlives harness_stop/harness_free, for a
                        test that restarts on it (the test removes it); else it is removed */
    unsigned nofile; /* 0, or the daemon's descriptor limit (soft and hard RLIMIT_NOFILE) */
} harness_opts_t;

typedef struct {
    char dir[96];
    char endpoint[128];    /* "ipc://<dir>/kvt.zmq" */
    char status_path[128]; /* "<dir>/status.sock" */
    char config_path[128];
    char log_path[128];
    pid_t pid;
    uint64_t capacity_bytes;
    uint64_t max_chunk_bytes;
    uint32_t lease_ms;
    char arena_path[256]; /* the config's ram.arena_path ("" for a memfd) */
    int keep_arena;
    unsigned nofile;
} harness_t;

/* The kvtierd binary tests start: $KVT_TEST_KVTIERD when set (to run a test against another
 * build, e.g. to see it fail on an older daemon), else the one of this build. */
const char *harness_kvtierd(void);

/* Starts a daemon (opts may be NULL) and returns once GET /status answers. Never NULL. */
harness_t *harness_start(const harness_opts_t *opts);

/* SIGTERM, wait, assert exit status 0 and a log free of sanitizer reports, remove the
 * directory, free *h and set it to NULL. */
void harness_stop(harness_t **h);

/* Waits for the exit of a daemon the test has signalled (SIGTERM) itself: asserts exit status 0
 * within HARNESS_DEADLINE_MS and a log free of sanitizer reports; h stays valid (harness_free). */
void harness_reap(harness_t *h);

/* Starts the daemon again with the same directory, config and endpoint: after harness_kill9(),
 * or, when it runs, after a clean stop (SIGTERM and harness_reap). Returns once GET /status
 * answers. (The log is started anew.) */
void harness_restart(harness_t *h);

/* SIGKILL the daemon and reap it; the harness stays valid (paths remain) until harness_free(). */
void harness_kill9(harness_t *h);

/* Removes the directory (and a file arena unless keep_arena) and frees a harness whose daemon
 * was killed; sets *h to NULL. */
void harness_free(harness_t **h);

/* One HTTP/1.0 request on a Unix socket (tool_http_request, bounded by 3 s). Returns 0 and fills
 * *code, *body (malloc'd, NUL terminated, owned by the caller) and content_type (may be NULL) or
 * -1 if the socket does not answer a complete response. */
int harness_http(const char *sock_path, const char *method, const char *path, int *code,
                 char *content_type, size_t ct_cap, char **body);

/* GET /status parsed: a new reference, or NULL if the daemon does not answer. */
json_t *harness_status(const harness_t *h);

/* Integer at a dotted path ("ram.used_bytes", "server.errors.malformed") of a status object;
 * fails the test if the member is missing or not an integer. */
int64_t harness_jint(json_t *status, const char *dotted);

/* Same, fetching a fresh status first. */
int64_t harness_stat(const harness_t *h, const char *dotted);

/* Polls GET /status until pred(status, arg) returns non-zero or timeout_ms passes. Returns the
 * matching status (new reference) or NULL on timeout. */
typedef int (*harness_pred_fn)(json_t *status, void *arg);
json_t *harness_wait_status(const harness_t *h, harness_pred_fn pred, void *arg, int timeout_ms);

/* The string at dotted in status (asserted present and a string; borrowed from status). */
const char *harness_jstr(json_t *status, const char *dotted);
/* The boolean at a dotted path of a status document (asserts it is one). */
bool harness_jbool(json_t *status, const char *dotted);
/* The number (integer or real) at a dotted path (asserts it is one). */
double harness_jnum(json_t *status, const char *dotted);

/* Predicate argument for harness_pred_int_eq: the integer at path equals value. */
typedef struct {
    const char *path;
    int64_t value;
} harness_int_eq_t;
int harness_pred_int_eq(json_t *status, void *arg);

/* Connects a client (asserts success). world/mla/model describe the namespace; the other
 * descriptor fields are fixed test values (chunk_tokens 16). */
kvt_client_t *harness_client(const harness_t *h, const char *model, uint32_t world, int mla,
                             uint32_t rank);

/* The same for a namespace of chunk_tokens tokens per chunk (not MLA), on a data path
 * (KVT_DATA_PATH_*). */
kvt_client_t *harness_client_with(const harness_t *h, const char *model, uint32_t world,
                                  uint32_t rank, uint32_t chunk_tokens, int data_path);

/* Lines of the daemon's log (its stderr so far) that contain needle. */
int harness_log_count(const harness_t *h, const char *needle);

/* The descriptor harness_client() uses; num_layers distinguishes layouts of one model. */
kvt_ns_desc_t harness_ns_desc(const char *model, uint32_t world, int mla, uint32_t num_layers);

/* n chained hashes of the synthetic prompt identified by seed (kvt_hash_chain over tokens
 * seed * 2^20 + i, chunk_tokens 16). Different seeds give unrelated chains. */
void harness_chain(uint32_t seed, kvt_hash_t *out, size_t n);

/* Fills buf with a deterministic pattern of (rank, key); harness_check_fill() returns 1 when
 * buf holds exactly that pattern. */
void harness_fill(void *buf, size_t len, uint32_t rank, uint64_t key);
int harness_check_fill(const void *buf, size_t len, uint32_t rank, uint64_t key);

/* Saves chain seed: n chunks of len bytes (harness_chain(seed)), in calls of at most 16 chained by
 * parent, each filled with harness_fill(rank, seed << 32 | i). Returns how many were stored or
 * existed (a failed call counts none). */
size_t harness_save_chain(kvt_client_t *c, uint32_t seed, size_t n, size_t len, uint32_t rank);

/* Loads chain seed as saved by harness_save_chain and fails the test on any chunk that loads with
 * other bytes or another length; returns how many loaded. */
size_t harness_load_chain(kvt_client_t *c, uint32_t seed, size_t n, size_t len, uint32_t rank);

/* Saves chains first..last (n chunks of len bytes each, rank 0), asserting every chunk stored;
 * when paced, waits for the disk's write buffer to drain after each (harness_wait_disk_drained). */
void harness_save_chains(const harness_t *h, kvt_client_t *c, uint32_t first, uint32_t last,
                         size_t n, size_t len, int paced);

/* The hit prefix of a lookup of chain seed's first n hashes (n <= 64; asserts the call). */
size_t harness_lookup_chain(kvt_client_t *c, uint32_t seed, size_t n);

/* Waits (polling status) until the disk tier's write buffer is empty and no read runs: a
 * demotion made after it finds the buffer free. Fails the test after HARNESS_DEADLINE_MS. */
void harness_wait_disk_drained(const harness_t *h);

/* RssAnon of process pid in bytes (/proc/<pid>/status; fails the test when unreadable). */
uint64_t harness_rss_anon(pid_t pid);

/* The disk tier's segment files in dir, oldest first (names sort as their ids): how many (at
 * most max), their paths malloc'd into out; harness_free_paths frees them. */
size_t harness_segments(const char *dir, char **out, size_t max);
void harness_free_paths(char **paths, size_t n);

/* A pseudo-random sequence (splitmix64) of the state *s, for tests that need reproducible
 * choices. */
uint64_t harness_prng(uint64_t *s);

/* Monotonic milliseconds. */
int64_t harness_now_ms(void);

/* The next completion of c, waiting for it on kvt_poll (fails the test after timeout_ms). */
kvt_completion_t *harness_next_completion(kvt_client_t *c, int timeout_ms);

/* The first 8 bytes of a hash as a number: the key harness_fill() patterns are made of. */
uint64_t harness_hash_key(const kvt_hash_t *h);

/* --- raw ZeroMQ peers, for malformed or partial exchanges the library would never send ---
 * Their heads are protocol 1: the raw tests are also the proof that a protocol 1 client keeps
 * working against this daemon (libkvtier itself speaks protocol 2). */

#define HARNESS_RAW_MAX_FRAMES 8

typedef struct {
    size_t n;
    zmq_msg_t part[HARNESS_RAW_MAX_FRAMES];
    kvt_frame_t f[HARNESS_RAW_MAX_FRAMES];
} harness_raw_msg_t;

/* A DEALER connected to endpoint with a receive timeout (asserts success). */
void *harness_raw_open(void *ctx, const char *endpoint, int rcv_timeout_ms);
/* Sends n frames as one message: 0 or -1. */
int harness_raw_send(void *s, const kvt_frame_t *f, size_t n);
/* Receives one multipart message: 0, or -1 on timeout / more than HARNESS_RAW_MAX_FRAMES. */
int harness_raw_recv(void *s, harness_raw_msg_t *m);
void harness_raw_msg_close(harness_raw_msg_t *m);
/* Decodes a reply; asserts it is well-formed. */
void harness_raw_decode(const harness_raw_msg_t *m, kvt_msg_t *out);
/* Encodes a head of type with req_id rid, ns_id ns and rank (where the type has one) into buf
 * (128 bytes); returns its size. */
size_t harness_raw_head(uint8_t *buf, int type, uint64_t rid, uint32_t ns, uint16_t rank);
/* Encodes the head of a HELLO (chunk_tokens 16) into buf (128 bytes); returns its size. */
size_t harness_raw_hello_head(uint8_t *buf, uint64_t fp, uint16_t rank, uint16_t world,
                              uint64_t rid);
/* HELLO on a raw socket (chunk_tokens 16); returns the ns_id of HELLO_OK or fails the test. */
uint32_t harness_raw_hello(void *s, const char *model, uint64_t fp, uint16_t rank, uint16_t world,
                           uint64_t rid);

/* The layout fingerprint of harness_raw_hello2's namespaces. */
#define HARNESS_RAW_FP2 0x5eedull

/* Sends one message whose head is m (any version) followed by nrest frames, receives the reply
 * into *r (close it) and decodes it into *rep; asserts the reply carries m's request id. */
void harness_raw_call(void *s, const kvt_msg_t *m, const kvt_frame_t *rest, size_t nrest,
                      harness_raw_msg_t *r, kvt_msg_t *rep);

/* Protocol 2 HELLO of model/revision (fingerprint HARNESS_RAW_FP2, world 1, chunk_tokens 16,
 * every feature offered); asserts HELLO_OK in protocol 2 and returns its body. */
kvt_hello_ok_t harness_raw_hello2(void *s, const char *model, const char *rev, uint64_t rid);

#endif /* KVT_TEST_HARNESS_H */
