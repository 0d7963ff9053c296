/*
 * test_drop.c - invalidation (POST /admin/drop, what `kvtierctl drop` sends) against the real
 * daemon over a disk tier.
 *
 * Three namespaces are declared over raw protocol 2 peers (the revision is part of a namespace's
 * identity): model-a revision r2, model-b, model-a revision r1, saved in that order into a RAM
 * tier too small for all of them, so the oldest (model-a/r2) has gone to disk and the newest
 * (model-a/r1) is in RAM. Dropping ns=model-a&revision=r1 removes r1's chunks (from RAM) and
 * leaves r2 and model-b whole; dropping ns=model-a then removes r2's (from disk); model-b is
 * untouched throughout, the counts are in the answer and in status, a load of a dropped chunk
 * misses. A restart on the same disk directory brings model-b back and none of model-a (the
 * tombstones in <disk.dir>/drops). The answers to a bad query (400) and to a name that matches
 * nothing (404) are checked too.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "check_main.h"
#include "harness.h"

#define CH (64u * 1024u)
#define PER_NS 12u

typedef struct {
    void *ctx, *s;
    uint64_t rid;
} peer_t;

static void peer_open(peer_t *p, const harness_t *h)
{
    p->ctx = zmq_ctx_new();
    p->s = harness_raw_open(p->ctx, h->endpoint, 5000);
    p->rid = 1;
}

static void peer_close(peer_t *p)
{
    zmq_close(p->s);
    zmq_ctx_term(p->ctx);
}

static uint32_t declare(peer_t *p, const char *model, const char *rev)
{
    return harness_raw_hello2(p->s, model, rev, p->rid++).ns_id;
}

/* One request of frames [head of type, hashes(, payload)]; returns the decoded reply's type and
 * copies what the caller needs. */
static void call(peer_t *p, int type, uint32_t ns, const kvt_hash_t *hs, size_t n,
                 const void *payload, size_t len, harness_raw_msg_t *r, kvt_msg_t *rep)
{
    uint8_t head[128];
    kvt_frame_t f[3];
    size_t nf = 2;

    f[0] = (kvt_frame_t){head, harness_raw_head(head, type, p->rid++, ns, 0)};
    f[1] = (kvt_frame_t){hs, n * sizeof *hs};
    if (payload != NULL)
        f[nf++] = (kvt_frame_t){payload, len};
    ck_assert_int_eq(harness_raw_send(p->s, f, nf), 0);
    ck_assert_int_eq(harness_raw_recv(p->s, r), 0);
    harness_raw_decode(r, rep);
}

static void save_all(peer_t *p, uint32_t ns, uint32_t seed)
{
    static uint8_t data[CH];
    kvt_hash_t hs[PER_NS];
    harness_raw_msg_t r;
    kvt_msg_t rep;

    harness_chain(seed, hs, PER_NS);
    for (uint32_t i = 0; i < PER_NS; i++) {
        harness_fill(data, CH, 0, seed * 1000 + i);
        call(p, KVT_MSG_SAVE_DATA, ns, &hs[i], 1, data, CH, &r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
        ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_STORED);
        harness_raw_msg_close(&r);
    }
}

/* How many of the namespace's PER_NS chunks a lookup finds (each looked up alone). */
static uint32_t present(peer_t *p, uint32_t ns, uint32_t seed)
{
    kvt_hash_t hs[PER_NS];
    harness_raw_msg_t r;
    kvt_msg_t rep;
    uint32_t k = 0;

    harness_chain(seed, hs, PER_NS);
    for (uint32_t i = 0; i < PER_NS; i++) {
        call(p, KVT_MSG_LOOKUP, ns, &hs[i], 1, NULL, 0, &r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOOKUP_OK);
        k += rep.u.lookup_ok.hit;
        harness_raw_msg_close(&r);
    }
    return k;
}

/* Loads chunk i of the namespace: 1 hit with the right bytes, 0 miss. */
static int load_one(peer_t *p, uint32_t ns, uint32_t seed, uint32_t i)
{
    kvt_hash_t hs[PER_NS];
    harness_raw_msg_t r;
    kvt_msg_t rep;
    int hit;

    harness_chain(seed, hs, PER_NS);
    call(p, KVT_MSG_LOAD, ns, &hs[i], 1, NULL, 0, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOAD_OK);
    hit = rep.u.chunks_ok.status[0] == KVT_CHUNK_HIT;
    if (hit)
        ck_assert(harness_check_fill(rep.u.chunks_ok.payloads[0].data,
                                     rep.u.chunks_ok.payloads[0].len, 0, seed * 1000 + i));
    harness_raw_msg_close(&r);
    return hit;
}

/* POST /admin/drop?QUERY: the HTTP code and the parsed answer (a new reference). */
static json_t *drop(const harness_t *h, const char *query, int *code)
{
    char url[256], *body = NULL;
    json_error_t jerr;
    json_t *doc;

    snprintf(url, sizeof url, "/admin/drop?%s", query);
    ck_assert_int_eq(harness_http(h->status_path, "POST", url, code, NULL, 0, &body), 0);
    doc = json_loads(body, 0, &jerr);
    ck_assert_msg(doc != NULL, "not JSON: %s", body);
    free(body);
    return doc;
}

static int64_t jget(json_t *o, const char *path)
{
    return harness_jint(o, path);
}

/* The status entry of namespace id. */
static json_t *ns_status(json_t *st, uint32_t id)
{
    size_t i;
    json_t *ns;

    json_array_foreach(json_object_get(st, "namespaces"), i,
                       ns) if (jget(ns, "id") == id) return ns;
    ck_abort_msg("namespace %u not in status", id);
    return NULL;
}

static int pred_flushed(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.write_buffer_chunks") == 0;
}

static harness_t *start(const char *dir)
{
    harness_opts_t o = {.capacity_bytes = 1u << 20, .max_chunk_bytes = CH};
    static char extra[512];

    snprintf(extra, sizeof extra,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"16MiB\", "
             "\"segment_bytes\": \"4MiB\", \"write_buffer_bytes\": \"4MiB\"}}",
             dir);
    o.extra_json = extra;
    return harness_start(&o);
}

/* A model name is any bytes but NUL (0.2.7): one holding a newline and quotes, dropped by an
 * operator, logs one line, its value quoted; it made a forged log line of its own before. */
START_TEST(test_drop_logs_a_hostile_name_on_one_line)
{
    harness_t *h = harness_start(NULL);
    peer_t p;
    json_t *doc;
    char line[2048];
    FILE *f;
    int code, forged = 0, drops = 0;

    peer_open(&p, h);
    ck_assert_uint_gt(declare(&p, "inj\nts=fake level=error event=injected \"q\"", "r1"), 0);
    doc = drop(h, "ns=inj%0Ats%3Dfake%20level%3Derror%20event%3Dinjected%20%22q%22", &code);
    ck_assert_int_eq(code, 200);
    json_decref(doc);
    f = fopen(h->log_path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f) != NULL) {
        forged += strncmp(line, "ts=fake", 7) == 0;
        drops += strstr(line, "event=drop ") != NULL &&
                 strstr(line, "ns=\"inj?ts=fake level=error event=injected 'q'\"") != NULL;
    }
    fclose(f);
    ck_assert_int_eq(forged, 0);
    ck_assert_int_eq(drops, 1);
    peer_close(&p);
    harness_stop(&h);
}
END_TEST

START_TEST(test_drop_namespace_ram_disk_revision_restart)
{
    char dir[128];
    harness_t *h;
    peer_t p;
    uint32_t a2, b, a1;
    json_t *doc, *st;
    int code;

    snprintf(dir, sizeof dir, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    h = start(dir);
    peer_open(&p, h);
    a2 = declare(&p, "model-a", "r2");
    b = declare(&p, "model-b", "");
    a1 = declare(&p, "model-a", "r1");
    ck_assert(a1 != a2 && a1 != b && a2 != b);
    save_all(&p, a2, 2);
    save_all(&p, b, 3);
    save_all(&p, a1, 1);
    st = harness_wait_status(h, pred_flushed, NULL, 10000);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_gt(jget(st, "disk.chunks"), 0);
    json_decref(st);
    ck_assert_uint_eq(present(&p, a2, 2), PER_NS);
    ck_assert_uint_eq(present(&p, b, 3), PER_NS);
    ck_assert_uint_eq(present(&p, a1, 1), PER_NS);

    /* bad queries and no match */
    json_decref(drop(h, "model=model-a", &code));
    ck_assert_int_eq(code, 400);
    json_decref(drop(h, "ns=", &code));
    ck_assert_int_eq(code, 400);
    json_decref(drop(h, "ns=model-a&ns=model-b", &code));
    ck_assert_int_eq(code, 400);
    doc = drop(h, "ns=model-c", &code);
    ck_assert_int_eq(code, 404);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "namespaces")), 0);
    json_decref(doc);

    /* one revision: r1 goes (it was in RAM), r2 and model-b stay */
    doc = drop(h, "ns=model%2Da&revision=r1", &code);
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(jget(doc, "chunks"), PER_NS);
    ck_assert_int_eq(jget(doc, "bytes"), (int64_t)PER_NS * CH);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "namespaces")), 1);
    ck_assert_int_gt(jget(json_array_get(json_object_get(doc, "namespaces"), 0), "ram_chunks"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "revision")), "r1");
    json_decref(doc);
    ck_assert_uint_eq(present(&p, a1, 1), 0);
    ck_assert_int_eq(load_one(&p, a1, 1, PER_NS - 1), 0);
    ck_assert_uint_eq(present(&p, a2, 2), PER_NS);
    ck_assert_uint_eq(present(&p, b, 3), PER_NS);
    ck_assert_int_eq(load_one(&p, a2, 2, 0), 1);

    /* the whole model: r2 goes too (from disk), model-b stays */
    doc = drop(h, "ns=model-a", &code);
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(jget(doc, "chunks"), PER_NS);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "namespaces")), 2);
    ck_assert(json_is_null(json_object_get(doc, "revision")));
    json_decref(doc);
    ck_assert_uint_eq(present(&p, a2, 2), 0);
    ck_assert_int_eq(load_one(&p, a2, 2, 0), 0);
    ck_assert_uint_eq(present(&p, b, 3), PER_NS);
    for (uint32_t i = 0; i < PER_NS; i++)
        ck_assert_int_eq(load_one(&p, b, 3, i), 1);

    st = harness_status(h);
    ck_assert_int_eq(jget(ns_status(st, a1), "chunks"), 0);
    ck_assert_int_eq(jget(ns_status(st, a1), "drops"), 2);
    ck_assert_int_eq(jget(ns_status(st, a1), "dropped_chunks"), PER_NS);
    ck_assert_int_eq(jget(ns_status(st, a2), "drops"), 1);
    ck_assert_int_eq(jget(ns_status(st, a2), "dropped_bytes"), (int64_t)PER_NS * CH);
    ck_assert_int_eq(jget(ns_status(st, b), "chunks"), PER_NS);
    ck_assert_int_eq(jget(ns_status(st, b), "drops"), 0);
    ck_assert_int_eq(jget(st, "ram.index_chunks"), PER_NS);
    json_decref(st);
    peer_close(&p);
    harness_stop(&h);

    /* a restart on the same directory: model-b back, model-a not. The clean stop wrote an index
     * checkpoint, which holds no dropped record at all; without it the restart scans every
     * record, and the tombstone is what keeps model-a's out */
    {
        char ckpt[256];
        snprintf(ckpt, sizeof ckpt, "%s/index.ckpt", dir);
        ck_assert_int_eq(unlink(ckpt), 0);
    }
    h = start(dir);
    st = harness_status(h);
    ck_assert_int_ge(jget(st, "disk.recovery_dropped"), PER_NS); /* model-a/r2 was on disk */
    ck_assert_int_eq(jget(st, "ram.index_chunks"), PER_NS);
    json_decref(st);
    peer_open(&p, h);
    b = declare(&p, "model-b", "");
    a1 = declare(&p, "model-a", "r1");
    a2 = declare(&p, "model-a", "");
    ck_assert_uint_eq(present(&p, b, 3), PER_NS);
    ck_assert_uint_eq(present(&p, a1, 1), 0);
    ck_assert_uint_eq(present(&p, a2, 2), 0);
    peer_close(&p);
    harness_stop(&h);
}
END_TEST

/* A chunk with a RAM and a disk copy, pinned by a shared-memory load, is dropped: it waits in the
 * limbo for its pin. Forgetting its disk copy made its RAM copy dirty again, which put the limbo
 * entry back on the cleaner's list, where it stayed after its last unpin freed it: the shutdown
 * persist then walked freed memory (a hang, or ASan's use after free). Now the stop is clean and
 * the rest of the namespace's neighbours survive it. */
START_TEST(test_drop_pinned_clean_chunk_then_stop)
{
    char dir[128], arena[160];
    harness_opts_t o = {.capacity_bytes = 1u << 20, .max_chunk_bytes = CH};
    static char extra[640];
    kvt_ns_desc_t d = harness_ns_desc("pinned-model", 1, 0, 32);
    kvt_connect_opts_t co = {.timeout_ms = 5000, .data_path = KVT_DATA_PATH_SHM};
    kvt_completion_t *pin = NULL;
    kvt_client_t *c = NULL;
    kvt_hash_t hs[4];
    harness_t *h;
    json_t *doc, *st;
    int code;

    snprintf(dir, sizeof dir, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(arena, sizeof arena, "/dev/shm/kvtier-drop-%d.arena", (int)getpid());
    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"%s\"}, \"disk\": {\"enabled\": true, \"dir\": \"%s\", "
             "\"capacity_bytes\": \"16MiB\", \"segment_bytes\": \"4MiB\", "
             "\"write_buffer_bytes\": \"4MiB\"}}",
             arena, dir);
    o.extra_json = extra;
    h = harness_start(&o);
    ck_assert_int_eq(kvt_connect(h->endpoint, &d, 0, &co, &c), 0);
    ck_assert_uint_eq(harness_save_chain(c, 5, 4, CH, 0), 4);
    harness_chain(5, hs, 4);
    /* 1.5 MiB more through the 1 MiB of RAM: the first four go to disk and leave RAM */
    for (uint32_t seed = 7; seed < 13; seed++)
        ck_assert_uint_eq(harness_save_chain(c, seed, 4, CH, 0), 4);
    st = harness_wait_status(h, pred_flushed, NULL, 10000);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_ge(jget(st, "disk.chunks"), 4);
    json_decref(st);
    /* the pin promotes chunk 0 back into RAM: a RAM and a disk copy, pinned */
    ck_assert_int_eq(kvt_pin(c, hs, 1, &pin), 0);
    ck_assert_uint_eq(pin->nhit, 1);
    /* the load's read reads the rest of the chain ahead (store.h, "Read-ahead"), and while
     * promotions hold RAM the cleaner writes more: reads and writes in flight pin their chunks
     * until they land, so the drop comes after them */
    harness_wait_disk_drained(h);
    st = harness_status(h);
    ck_assert_int_ge(jget(st, "disk.promotions"), 1);
    json_decref(st);
    doc = drop(h, "ns=pinned-model", &code);
    ck_assert_int_eq(code, 200);
    ck_assert_int_eq(jget(json_array_get(json_object_get(doc, "namespaces"), 0), "pinned"), 1);
    json_decref(doc);
    kvt_completion_free(c, pin); /* the last pin: the limbo entry is freed */
    ck_assert_uint_eq(harness_save_chain(c, 6, 4, CH, 0), 4); /* the cleaner runs on */
    kvt_close(&c);
    harness_stop(&h); /* the persist walks the dirty list: exit 0 within the deadline */
    check_unlink_arena(arena);
}
END_TEST

/* A drop removes what was written before it, also what was still in flight: a reservation made
 * before an operator's drop and committed after it is not stored (the client sees NOSPACE: not
 * stored), and the namespace takes new saves at once. Before 0.2.13 the commit answered STORED
 * and the dropped chunk was back right after the drop (the hostile-client probe's finding). */
START_TEST(test_a_commit_in_flight_at_a_drop_is_not_stored)
{
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = CH};
    static char extra[256];
    char arena[160];
    kvt_ns_desc_t d = harness_ns_desc("drop-inflight", 1, 0, 32);
    kvt_connect_opts_t co = {.timeout_ms = 5000, .data_path = KVT_DATA_PATH_SHM};
    kvt_completion_t *resv = NULL, *done = NULL;
    kvt_client_t *c = NULL;
    kvt_hash_t hs[2];
    size_t lens[2] = {CH, CH};
    harness_t *h;
    json_t *doc;
    int code;

    snprintf(arena, sizeof arena, "/dev/shm/kvtier-dropf-%d.arena", (int)getpid());
    snprintf(extra, sizeof extra, "{\"ram\": {\"arena_path\": \"%s\"}}", arena);
    o.extra_json = extra; /* a file arena: the shared-memory path */
    h = harness_start(&o);
    ck_assert_int_eq(kvt_connect(h->endpoint, &d, 0, &co, &c), 0);
    ck_assert_uint_eq(harness_save_chain(c, 3, 2, CH, 0), 2); /* something for the drop to find */
    harness_chain(4, hs, 2);
    ck_assert_int_eq(kvt_reserve(c, hs, 2, lens, NULL, &resv), 0);
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(resv->outcomes[i], KVT_SAVE_RESERVED);
        memset(resv->ptrs[i], 0x5a, CH);
    }
    doc = drop(h, "ns=drop-inflight", &code);
    ck_assert_int_eq(code, 200);
    json_decref(doc);
    ck_assert_int_eq(kvt_commit(c, resv, 2, &done), 0);
    for (size_t i = 0; i < 2; i++)
        ck_assert_int_eq(done->outcomes[i], KVT_SAVE_NOSPACE);
    kvt_completion_free(c, done);
    ck_assert_uint_eq(harness_lookup_chain(c, 4, 2), 0);
    ck_assert_uint_eq(harness_lookup_chain(c, 3, 2), 0);
    /* saves made after the drop are stored as always */
    ck_assert_uint_eq(harness_save_chain(c, 4, 2, CH, 0), 2);
    ck_assert_uint_eq(harness_lookup_chain(c, 4, 2), 2);
    kvt_close(&c);
    harness_stop(&h);
    check_unlink_arena(arena);
}
END_TEST

static Suite *drop_suite(void)
{
    Suite *su = suite_create("drop");
    TCase *tc = tcase_create("drop");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_drop_namespace_ram_disk_revision_restart);
    tcase_add_test(tc, test_drop_logs_a_hostile_name_on_one_line);
    tcase_add_test(tc, test_drop_pinned_clean_chunk_then_stop);
    tcase_add_test(tc, test_a_commit_in_flight_at_a_drop_is_not_stored);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = drop_suite, .scratch = "kvtdr"};
