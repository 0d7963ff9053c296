/*
 * fuzz_persist.c - libFuzzer target for the decoders of what the daemon keeps across restarts:
 * the RAM journal (daemon/journal.h: journal_decode_hdr, journal_decode), the disk index
 * checkpoint (daemon/checkpoint.h: ckpt_decode) and the gate state file (daemon/state.h:
 * state_decode). They read files in the daemon's own directories, so "untrusted" means torn,
 * truncated, bit-rotten or another version's, never crafted by a client; still, none may read
 * past its input or accept what it should not.
 *
 * Input: byte 0 chooses the decoder (mod 3), the rest is the file (copied into an allocation of
 * exactly its length). Every format is checksummed, so the target first writes the right
 * checksum into the input where the format keeps it (each journal record's, the checkpoint's
 * and the state file's trailer) - otherwise nearly every input would stop at the checksum and
 * the parsers behind it would never be reached. Contract checks (abort = a crash):
 *  - journal: a record that decodes has a length within the input, and re-encoding it gives
 *    the same bytes; decoding never returns more than it was given;
 *  - checkpoint and state: 0 or a negative errno, and a visitor sees only fields inside the
 *    input (ASan), RECs in strictly increasing (segment, offset) order, leases of namespaces
 *    that were visited before.
 * Threads: single-threaded. Invariants: no state survives an input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "kvt_csum.h"
#include "journal.h"
#include "kvt_proto.h"
#include "state.h"

#define FUZZ_NAME "fuzz_persist"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void journal_case(uint8_t *b, size_t n)
{
    journal_hdr_t h;
    size_t pos = JOURNAL_HDR_BYTES;

    if (n >= JOURNAL_HDR_BYTES)
        kvt_put_u64(b + 48, kvt_csum(b, 48));
    if (journal_decode_hdr(b, n, &h) != 0)
        pos = 0; /* records alone */
    while (pos + 4 <= n) {
        journal_rec_t r;
        uint8_t out[JOURNAL_REC_MAX];
        size_t len = (size_t)(b[pos] | b[pos + 1] << 8);
        int rc;
        if (len >= 12 && len <= JOURNAL_REC_MAX && pos + len <= n)
            kvt_put_u64(b + pos + len - 8, kvt_csum(b + pos, len - 8));
        rc = journal_decode(b + pos, n - pos, &r);
        if (rc <= 0)
            break;
        FUZZ_CHECK((size_t)rc <= n - pos);
        FUZZ_CHECK(journal_encode(&r, out) == (size_t)rc);
        FUZZ_CHECK(memcmp(out, b + pos, (size_t)rc) == 0);
        pos += (size_t)rc;
    }
}

typedef struct {
    bool any;
    uint64_t seg, off;
    uint32_t nns;
} seen_t;

static int ck_rec(void *arg, const record_meta_t *m, const ckpt_loc_t *loc)
{
    seen_t *s = arg;

    FUZZ_CHECK(m->model_len > 0 && m->model[m->model_len] == '\0');
    FUZZ_CHECK(!s->any || loc->seg > s->seg || (loc->seg == s->seg && loc->off > s->off));
    s->any = true;
    s->seg = loc->seg;
    s->off = loc->off;
    return 0;
}

static void ckpt_case(uint8_t *b, size_t n)
{
    ckpt_visit_t v = {.rec = ck_rec};
    seen_t s = {0};
    int rc;

    if (n >= 8)
        kvt_put_u64(b + n - 8, kvt_csum(b, n - 8));
    rc = ckpt_decode(b, n, &v, &s, NULL);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EPROTO || rc == -ENOMEM);
}

static int st_ns(void *arg, uint32_t index, const state_ns_t *ns)
{
    seen_t *s = arg;

    FUZZ_CHECK(index == s->nns);
    FUZZ_CHECK(ns->id.model_len > 0);
    s->nns++;
    return 0;
}

static int st_lease(void *arg, const state_lease_t *l)
{
    seen_t *s = arg;

    FUZZ_CHECK(l->ns < s->nns);
    return 0;
}

static void state_case(uint8_t *b, size_t n)
{
    state_visit_t v = {.ns = st_ns, .lease = st_lease};
    seen_t s = {0};
    uint64_t saved;
    int rc;

    if (n >= 8)
        kvt_put_u64(b + n - 8, kvt_csum(b, n - 8));
    rc = state_decode(b, n, &v, &s, &saved);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EPROTO);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;

    if (size < 1)
        return 0;
    b = malloc(size - 1 > 0 ? size - 1 : 1);
    if (b == NULL)
        return 0;
    memcpy(b, data + 1, size - 1);
    switch (data[0] % 3) {
    case 0:
        journal_case(b, size - 1);
        break;
    case 1:
        ckpt_case(b, size - 1);
        break;
    default:
        state_case(b, size - 1);
        break;
    }
    free(b);
    return 0;
}
