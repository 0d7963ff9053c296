/*
 * test_proto2.c - protocol 2 against the real daemon, and protocol 1 beside it (PROTOCOL.md,
 * "Versions and compatibility").
 *
 * Raw DEALER peers build protocol 2 heads by hand (the harness's raw helpers speak protocol 1,
 * the old clients), so the daemon's answers are checked frame by frame: HELLO_OK's new fields,
 * the revision as part of a namespace's identity, LOAD_OK's checksums frame, TALLY/TALLY_OK's
 * bodies, errors answered in the request's version and, for a version the daemon does not
 * know, in protocol 1. The last test turns it around: libkvtier (protocol 2) against a ROUTER
 * that answers like a protocol 1 daemon fails at connect with KVT_EVERSION, never a hang.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "check_main.h"
#include "harness.h"

#define CAP_JSON "{\"server\": {\"max_in_flight\": 77}}"

START_TEST(test_hello_v2_fields_and_revision)
{
    harness_opts_t ho = {.extra_json = CAP_JSON};
    harness_t *h = harness_start(&ho);
    void *ctx = zmq_ctx_new();
    void *s = harness_raw_open(ctx, h->endpoint, 5000);
    kvt_hello_ok_t a, a2, b;
    json_t *st;
    size_t i;
    int seen = 0;

    a = harness_raw_hello2(s, "rev-model", "rev-a", 1);
    ck_assert_uint_eq(a.max_in_flight, 77);
    ck_assert_uint_eq(a.arena_gen, 0); /* the harness's arena is a memfd: not shared */
    ck_assert_uint_eq(a.features & ~(KVT_FEAT_CHECKSUMS | KVT_FEAT_TOKENS | KVT_FEAT_ARENA_GEN |
                                     KVT_FEAT_CLIENT_CSUMS),
                      0);
    ck_assert_uint_gt(a.max_chunks, 0);
    a2 = harness_raw_hello2(s, "rev-model", "rev-a", 2);
    b = harness_raw_hello2(s, "rev-model", "rev-b", 3);
    ck_assert_uint_eq(a.ns_id, a2.ns_id);
    ck_assert_uint_ne(a.ns_id, b.ns_id); /* same model and fingerprint, another revision */

    st = harness_status(h);
    for (i = 0; i < json_array_size(json_object_get(st, "namespaces")); i++) {
        json_t *ns = json_array_get(json_object_get(st, "namespaces"), i);
        const char *rev = json_string_value(json_object_get(ns, "revision"));
        ck_assert_ptr_nonnull(rev);
        seen += strcmp(rev, "rev-a") == 0 || strcmp(rev, "rev-b") == 0;
    }
    ck_assert_int_eq(seen, 2);
    json_decref(st);
    zmq_close(s);
    zmq_ctx_term(ctx);
    harness_stop(&h);
}
END_TEST

/* One chunk saved by a protocol 1 client is loaded by it and by a protocol 2 client on the same
 * namespace: the same bytes, and only the protocol 2 reply has the checksums frame. */
START_TEST(test_load_ok_both_versions)
{
    harness_t *h = harness_start(NULL);
    void *ctx = zmq_ctx_new();
    void *s1 = harness_raw_open(ctx, h->endpoint, 5000);
    void *s2 = harness_raw_open(ctx, h->endpoint, 5000);
    uint8_t hash[KVT_HASH_BYTES] = {0x42}, bytes[3000];
    uint8_t head[128];
    kvt_frame_t f[3];
    harness_raw_msg_t r;
    kvt_msg_t rep, m;
    uint32_t ns1, ns2;

    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 7);
    ns1 = harness_raw_hello(s1, "both", HARNESS_RAW_FP2, 0, 1, 1);
    ns2 = harness_raw_hello2(s2, "both", "", 1)
              .ns_id; /* no revision: the protocol 1 client's namespace */
    ck_assert_uint_eq(ns1, ns2);

    f[0] = (kvt_frame_t){head, harness_raw_head(head, KVT_MSG_SAVE_DATA, 2, ns1, 0)};
    f[1] = (kvt_frame_t){hash, sizeof hash};
    f[2] = (kvt_frame_t){bytes, sizeof bytes};
    ck_assert_int_eq(harness_raw_send(s1, f, 3), 0);
    ck_assert_int_eq(harness_raw_recv(s1, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_OK);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_STORED);
    harness_raw_msg_close(&r);

    f[0].len = harness_raw_head(head, KVT_MSG_LOAD, 3, ns1, 0);
    ck_assert_int_eq(harness_raw_send(s1, f, 2), 0);
    ck_assert_int_eq(harness_raw_recv(s1, &r), 0);
    harness_raw_decode(&r, &rep);
    ck_assert_uint_eq(rep.hdr.version, 1);
    ck_assert_uint_eq(r.n, 3); /* head, status, payload */
    ck_assert_ptr_null(rep.u.chunks_ok.checksums);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_HIT);
    ck_assert_mem_eq(rep.u.chunks_ok.payloads[0].data, bytes, sizeof bytes);
    harness_raw_msg_close(&r);

    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2, .type = KVT_MSG_LOAD, .req_id = 4, .ns_id = ns2};
    harness_raw_call(s2, &m, &f[1], 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_LOAD_OK);
    ck_assert_uint_eq(rep.hdr.version, 2);
    ck_assert_uint_eq(r.n, 4); /* head, status, checksums, payload */
    ck_assert_ptr_nonnull(rep.u.chunks_ok.checksums);
    ck_assert_int_eq(rep.u.chunks_ok.status[0], KVT_CHUNK_HIT);
    ck_assert_mem_eq(rep.u.chunks_ok.payloads[0].data, bytes, sizeof bytes);
    harness_raw_msg_close(&r);

    zmq_close(s1);
    zmq_close(s2);
    zmq_ctx_term(ctx);
    harness_stop(&h);
}
END_TEST

/* The text of an ERROR reply, NUL-terminated (a static buffer). */
static const char *text_of(const kvt_msg_t *m)
{
    static char text[KVT_ERRTEXT_MAX + 1];

    snprintf(text, sizeof text, "%.*s", (int)m->u.error.text_len, m->u.error.text);
    return text;
}

START_TEST(test_tally_and_errors_v2)
{
    harness_t *h = harness_start(NULL);
    void *ctx = zmq_ctx_new();
    void *s = harness_raw_open(ctx, h->endpoint, 5000);
    uint8_t head[128];
    kvt_frame_t f[2] = {{NULL, 0}, {NULL, 0}};
    harness_raw_msg_t r;
    kvt_msg_t m, rep;
    uint32_t ns = harness_raw_hello2(s, "tally2", "", 1).ns_id;

    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){
        .version = 2, .type = KVT_MSG_TALLY, .flags = KVT_TALLY_TOKENS, .req_id = 2, .ns_id = ns};
    m.u.tally = (kvt_tally_t){.engine_id = 9,
                              .paid_total = 1,
                              .probes_total = 4,
                              .served_tokens_total = 8192,
                              .lookup_tokens_total = 65536};
    harness_raw_call(s, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_TALLY_OK);
    ck_assert_uint_eq(rep.hdr.version, 2);
    ck_assert_uint_eq(r.f[0].len, kvt_head_size_v(KVT_MSG_TALLY_OK, 2));
    ck_assert_uint_eq(rep.u.tally_ok.probes, 4);
    harness_raw_msg_close(&r);

    /* an error to a protocol 2 request is a protocol 2 ERROR */
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2, .type = KVT_MSG_LOOKUP, .req_id = 3, .ns_id = ns + 100};
    f[0] = (kvt_frame_t){head, KVT_HASH_BYTES};
    memset(head, 1, KVT_HASH_BYTES);
    harness_raw_call(s, &m, f, 1, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_ERROR);
    ck_assert_uint_eq(rep.hdr.version, 2);
    ck_assert_int_eq(rep.u.error.code, KVT_WIRE_ENONS);
    harness_raw_msg_close(&r);

    /* a version the daemon does not speak is answered in protocol 1, with the req_id */
    {
        uint8_t h3[KVT_HDR_BYTES + 24];
        kvt_frame_t g[2] = {{h3, sizeof h3}, {head, KVT_HASH_BYTES}};
        m.hdr.version = 1;
        m.hdr.req_id = 4;
        ck_assert_uint_eq(kvt_head_encode(h3, sizeof h3, &m), sizeof h3);
        h3[4] = KVT_PROTO_VERSION + 1;
        ck_assert_int_eq(harness_raw_send(s, g, 2), 0);
        ck_assert_int_eq(harness_raw_recv(s, &r), 0);
        harness_raw_decode(&r, &rep);
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_ERROR);
        ck_assert_uint_eq(rep.hdr.version, 1);
        ck_assert_uint_eq(rep.hdr.req_id, 4);
        ck_assert_int_eq(rep.u.error.code, KVT_WIRE_EVERSION);
        /* and says which versions it speaks (0.2.13) */
        ck_assert_msg(strstr(text_of(&rep), "this daemon speaks 1 to 2") != NULL, "text: %s",
                      text_of(&rep));
        harness_raw_msg_close(&r);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    harness_stop(&h);
}
END_TEST

/* A ROUTER that answers every request like a protocol 1 daemon answers a protocol 2 head:
 * ERROR EVERSION in protocol 1, req_id echoed. */
typedef struct {
    void *ctx;
    char endpoint[160];
    int answered;
} old_daemon_t;

static void *old_daemon_main(void *arg)
{
    old_daemon_t *od = arg;
    void *s = zmq_socket(od->ctx, ZMQ_ROUTER);
    int tmo = 10000;
    zmq_msg_t id, part;
    uint8_t head[KVT_HDR_BYTES + 8];
    static const char text[] = "hello: unsupported protocol version";
    kvt_msg_t m = {.hdr = {.version = 1, .type = KVT_MSG_ERROR}};

    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    if (zmq_bind(s, od->endpoint) != 0)
        return NULL;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, s, 0) >= 0) {
        int more = 1;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s, 0) >= (int)KVT_HDR_BYTES)
            m.hdr.req_id = kvt_get_u64((const uint8_t *)zmq_msg_data(&part) + 8);
        while (more) {
            size_t sz = sizeof more;
            zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
            if (more)
                zmq_msg_recv(&part, s, 0);
        }
        zmq_msg_close(&part);
        m.u.error.code = KVT_WIRE_EVERSION;
        kvt_head_encode(head, sizeof head, &m);
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        zmq_send(s, head, sizeof head, ZMQ_SNDMORE);
        zmq_send(s, text, sizeof text - 1, 0);
        od->answered = 1;
    }
    zmq_msg_close(&id);
    zmq_close(s);
    return NULL;
}

START_TEST(test_client_against_protocol1_daemon)
{
    old_daemon_t od = {.ctx = zmq_ctx_new()};
    kvt_ns_desc_t ns = harness_ns_desc("old", 1, 0, 1);
    kvt_connect_opts_t o = {.timeout_ms = 5000, .data_path = KVT_DATA_PATH_FRAMES};
    kvt_client_t *c = NULL;
    pthread_t t;
    int rc;

    snprintf(od.endpoint, sizeof od.endpoint, "ipc://%s/old.zmq", check_scratch_dir());
    ck_assert_int_eq(pthread_create(&t, NULL, old_daemon_main, &od), 0);
    rc = kvt_connect(od.endpoint, &ns, 0, &o, &c);
    ck_assert_int_eq(rc, KVT_EVERSION); /* the reply's code: a timeout would be KVT_ETIMEDOUT */
    ck_assert_ptr_null(c);
    ck_assert_str_eq(kvt_last_error(NULL),
                     "kvtierd speaks protocol 1; libkvtier 0.2 needs protocol 2");
    pthread_join(t, NULL);
    ck_assert_int_eq(od.answered, 1);
    zmq_ctx_term(od.ctx);
}
END_TEST

/* A ROUTER that answers HELLO like a protocol 2 daemon offering CHECKSUMS, then every LOAD with
 * a protocol 1 LOAD_OK: a HIT whose payload carries no checksum (hello_v1: HELLO_OK itself in
 * protocol 1). */
typedef struct {
    void *ctx;
    char endpoint[160];
    int hello_v1;
} downgrade_t;

static void *downgrade_main(void *arg)
{
    downgrade_t *d = arg;
    void *s = zmq_socket(d->ctx, ZMQ_ROUTER);
    int tmo = 3000;
    static uint8_t payload[4096];

    memset(payload, 0xee, sizeof payload);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    if (zmq_bind(s, d->endpoint) != 0)
        return NULL;
    for (int k = 0; k < 4; k++) {
        uint8_t id[256], f[8][512], head[KVT_HDR_BYTES + 96];
        int idl = zmq_recv(s, id, sizeof id, 0), nf = 0, more = 1;
        kvt_msg_t m;
        size_t hl;

        if (idl < 0)
            break;
        while (more && nf < 8) {
            size_t sz = sizeof more;
            zmq_recv(s, f[nf++], sizeof f[0], 0);
            zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
        }
        memset(&m, 0, sizeof m);
        m.hdr.req_id = kvt_get_u64(f[0] + 8);
        m.hdr.ns_id = 7;
        if (f[0][5] == KVT_MSG_HELLO) {
            m.hdr.version = d->hello_v1 ? 1 : 2;
            m.hdr.type = KVT_MSG_HELLO_OK;
            m.u.hello_ok = (kvt_hello_ok_t){.ns_id = 7,
                                            .lease_ms = 1000,
                                            .max_chunk_bytes = 1 << 20,
                                            .max_chunks = 64,
                                            .features = KVT_FEAT_CHECKSUMS,
                                            .max_in_flight = 4};
            hl = kvt_head_encode(head, sizeof head, &m);
            zmq_send(s, id, (size_t)idl, ZMQ_SNDMORE);
            zmq_send(s, head, hl, 0);
        } else if (f[0][5] == KVT_MSG_LOAD) {
            static const uint8_t hit = KVT_CHUNK_HIT;
            m.hdr.version = 1;
            m.hdr.type = KVT_MSG_LOAD_OK;
            hl = kvt_head_encode(head, sizeof head, &m);
            zmq_send(s, id, (size_t)idl, ZMQ_SNDMORE);
            zmq_send(s, head, hl, ZMQ_SNDMORE);
            zmq_send(s, &hit, 1, ZMQ_SNDMORE);
            zmq_send(s, payload, sizeof payload, 0);
        }
    }
    zmq_close(s);
    return NULL;
}

/* The session is protocol 2 with CHECKSUMS: a reply in protocol 1 (which has no checksums
 * frame) is refused, never a verified-looking HIT of unverified bytes; a HELLO_OK in protocol 1
 * fails the connect like a protocol 1 daemon. */
START_TEST(test_reply_in_protocol1_refused)
{
    for (int v1 = 0; v1 < 2; v1++) {
        downgrade_t d = {.ctx = zmq_ctx_new(), .hello_v1 = v1};
        kvt_ns_desc_t ns = harness_ns_desc("downgrade", 1, 0, 1);
        kvt_connect_opts_t o = {.timeout_ms = 2000, .data_path = KVT_DATA_PATH_FRAMES};
        kvt_client_t *c = NULL;
        kvt_hash_t h = {{1}};
        static uint8_t buf[4096];
        void *bp = buf;
        size_t cap = sizeof buf, len = 0, nhit = 0;
        pthread_t t;
        int rc;

        snprintf(d.endpoint, sizeof d.endpoint, "ipc://%s/down%d.zmq", check_scratch_dir(), v1);
        ck_assert_int_eq(pthread_create(&t, NULL, downgrade_main, &d), 0);
        rc = kvt_connect(d.endpoint, &ns, 0, &o, &c);
        if (v1) {
            ck_assert_int_eq(rc, KVT_EVERSION);
            ck_assert_ptr_null(c);
        } else {
            ck_assert_int_eq(rc, 0);
            rc = kvt_load(c, &h, 1, &bp, &cap, &len, &nhit);
            ck_assert_int_eq(rc, KVT_EVERSION);
            ck_assert_msg(strstr(kvt_last_error(c), "protocol 1") != NULL, "error text '%s'",
                          kvt_last_error(c));
            kvt_close(&c);
        }
        pthread_join(t, NULL);
        zmq_ctx_term(d.ctx);
    }
}
END_TEST

static Suite *proto2_suite(void)
{
    Suite *s = suite_create("proto2");
    TCase *t = tcase_create("proto2");

    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_hello_v2_fields_and_revision);
    tcase_add_test(t, test_load_ok_both_versions);
    tcase_add_test(t, test_tally_and_errors_v2);
    tcase_add_test(t, test_client_against_protocol1_daemon);
    tcase_add_test(t, test_reply_in_protocol1_refused);
    suite_add_tcase(s, t);
    return s;
}

const check_program_t check_program = {.suite = proto2_suite, .scratch = "kvtp2"};
