/*
 * state.h - what a clean restart keeps beside the chunks: every namespace's learned gate state
 * (gates.h: the estimators, counters, tally baselines and the value policy's ghost table) and
 * the lookup leases still running, in one small versioned file (mode 0600): <disk.dir>/gates.state
 * with the disk tier, else <the RAM journal>.gates (store_state_path).
 *
 * Written at a clean stop (state_save, atomically: a temporary file, fsync, rename, fsync of the
 * directory: fsutil_write_atomic), read at the next start after the tiers are recovered
 * (state_load) and then removed, so that a later crash never brings back a state older than the
 * chunks. A file that is missing, of another version, another build's layout or whose checksum
 * fails is ignored with a log line: the gates then start from their priors, as before.
 *
 * File: magic "KVTSTAT1", `version u32`, `nns u32`, `nleases u32`, reserved u32, `saved_ms u64`
 * (CLOCK_REALTIME at the stop); nns namespaces: `model_len u8, model, revision_len u8, revision,
 * fingerprint u64, world u16, flags u8 (1: replicated), chunk_tokens u32, blob_len u32, blob`
 * (gates_export); nleases leases in expiry order: `ns u32 (index into the namespaces), rank u16,
 * hash[16], remaining_ms u32`; `xxh3 u64` of everything before it. Little-endian.
 *
 * A restored lease runs for what was left of it at the stop less the time the daemon was down;
 * it belongs to no session (the sessions of the stopped daemon are gone), so no client's held
 * bytes count it.
 *
 * Threads: loop thread only; state_decode is pure (the fuzzer's).
 */
#ifndef KVT_STATE_H
#define KVT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "ns.h"
#include "store.h"

#define STATE_VERSION 1u

typedef struct {
    ns_ident_t id; /* model and revision point into the decoded buffer */
    const uint8_t *blob;
    size_t blob_len;
} state_ns_t;

typedef struct {
    uint32_t ns; /* index of its namespace in the file */
    uint16_t rank;
    uint8_t hash[16];
    uint32_t remaining_ms;
} state_lease_t;

typedef struct {
    /* each returns 0 to go on; the decoder stops at the first non-zero */
    int (*ns)(void *arg, uint32_t index, const state_ns_t *ns);
    int (*lease)(void *arg, const state_lease_t *l);
} state_visit_t;

/* Decodes buf[n]: checks magic, version and checksum first (nothing is visited unless they
 * pass), then visits every namespace and lease. *saved_ms receives the stop's wall-clock time.
 * 0, -EBADMSG (short, magic, checksum, a field that runs past the end, a lease of a namespace
 * that is not in the file), -EPROTO (another version), or a visitor's non-zero value. */
int state_decode(const uint8_t *buf, size_t n, const state_visit_t *v, void *arg,
                 uint64_t *saved_ms);

/* The server's part (server.c calls these with store_state_path): state_save writes the file for
 * every namespace and every unexpired lease (store_leases); state_load restores it into the
 * namespaces (declaring those that are not) and the index, counts what it restored in *nns and
 * *nleases, and removes the file. Both log what they did; neither fails the daemon. */
void state_save(const char *path, const ns_table_t *nst, const store_t *st, uint64_t now_ms);
void state_load(const char *path, ns_table_t *nst, store_t *st, const config_t *cfg,
                uint64_t now_ms, uint64_t *nns, uint64_t *nleases);

#endif /* KVT_STATE_H */
