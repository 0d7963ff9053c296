/*
 * test_config.c - unit tests of daemon/config.c: defaults, the shipped files in configs/,
 * every error class with its exact message, namespace gate overrides, the size parser and the
 * config_dump round trip.
 *
 * KVT_SOURCE_DIR (a CMake define) locates configs/. Every error case also checks that a failed
 * load leaves the caller's config_t untouched.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"

#include <jansson.h>

#include "config.h"

#define CONFIGS_DIR KVT_SOURCE_DIR "/configs"

/* Loads json expecting failure; returns the message (static buffer). */
static const char *load_fail(const char *json)
{
    static char err[512];
    config_t *cfg = malloc(sizeof *cfg), *before = malloc(sizeof *before);

    ck_assert_ptr_nonnull(cfg);
    ck_assert_ptr_nonnull(before);
    config_defaults(cfg);
    cfg->server.max_clients = 7; /* a marker the failed load must not overwrite */
    memcpy(before, cfg, sizeof *cfg);
    err[0] = '\0';
    ck_assert_msg(config_load_string(json, cfg, err, sizeof err) == -1, "accepted: %s", json);
    ck_assert_msg(memcmp(before, cfg, sizeof *cfg) == 0, "failed load modified cfg: %s", json);
    ck_assert_msg(err[0] != '\0', "empty message for %s", json);
    free(before);
    free(cfg);
    return err;
}

static void expect_error(const char *json, const char *msg)
{
    const char *err = load_fail(json);

    ck_assert_msg(strstr(err, msg) != NULL, "json %s\n  got  \"%s\"\n  want \"%s\"", json, err,
                  msg);
}

static config_t *load_ok(const char *json)
{
    char err[512] = "";
    config_t *cfg = malloc(sizeof *cfg);

    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(config_load_string(json, cfg, err, sizeof err) == 0, "%s: %s", json, err);
    return cfg;
}

START_TEST(test_defaults)
{
    config_t cfg;

    memset(&cfg, 0xa5, sizeof cfg);
    config_defaults(&cfg);
    ck_assert_str_eq(cfg.server.endpoint, "ipc:///run/kvtier/kvtier.zmq");
    ck_assert_str_eq(cfg.server.status_socket, "/run/kvtier/status.sock");
    ck_assert_uint_eq(cfg.server.max_chunks_per_request, 4096);
    ck_assert_uint_eq(cfg.server.max_clients, 4096);
    ck_assert_uint_eq(cfg.server.client_idle_ms, 600000);
    ck_assert_uint_eq(cfg.ram.capacity_bytes, 8ULL << 30);
    ck_assert_str_eq(cfg.ram.arena_path, "/dev/shm/kvtier.arena");
    ck_assert_uint_eq(cfg.ram.max_chunk_bytes, 64ULL << 20);
    ck_assert_uint_eq(cfg.ram.lease_ms, 30000);
    ck_assert_int_eq(cfg.log.level, LOG_INFO);
    ck_assert(!cfg.gates.admission.enabled);
    ck_assert(cfg.gates.admission.target == 0.10);
    ck_assert(cfg.gates.admission.floor == 0.25);
    ck_assert(cfg.gates.admission.alpha == 1.0 / 16);
    ck_assert_uint_eq(cfg.gates.admission.warmup, 64);
    ck_assert_uint_eq(cfg.gates.admission.report_every, 256);
    ck_assert(!cfg.gates.lookup_skip.enabled);
    ck_assert_uint_eq(cfg.gates.lookup_skip.min_load_tokens, 8192);
    ck_assert(cfg.gates.lookup_skip.cut == 0.01);
    ck_assert_uint_eq(cfg.gates.lookup_skip.min_lookups, 64);
    ck_assert_uint_eq(cfg.gates.lookup_skip.probe_every, 32);
    ck_assert(cfg.gates.lookup_skip.alpha == 1.0 / 64);
    ck_assert_uint_eq(cfg.gates.lookup_skip.report_every, 256);
    ck_assert_int_eq(cfg.n_ns, 0);
    ck_assert_ptr_eq(config_gates_for(&cfg, "any/model"), &cfg.gates);
    ck_assert_ptr_eq(config_gates_for(&cfg, NULL), &cfg.gates);
}
END_TEST

START_TEST(test_empty_object_is_defaults)
{
    config_t *cfg = load_ok("{}"), def;
    char *a, *b;

    config_defaults(&def);
    a = config_dump(cfg);
    b = config_dump(&def);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(a, b);
    /* The defaults need no more than 6 significant digits: 0.1 prints as 0.1. */
    ck_assert_ptr_nonnull(strstr(a, "\"target\": 0.1,"));
    ck_assert_ptr_nonnull(strstr(a, "\"alpha\": 0.015625,"));
    free(a);
    free(b);
    free(cfg);
}
END_TEST

START_TEST(test_log_level_names)
{
    ck_assert_str_eq(log_level_name(LOG_DEBUG), "debug");
    ck_assert_str_eq(log_level_name(LOG_INFO), "info");
    ck_assert_str_eq(log_level_name(LOG_WARN), "warn");
    ck_assert_str_eq(log_level_name(LOG_ERROR), "error");
    ck_assert_str_eq(log_level_name((log_level_t)4), "unknown");
}
END_TEST

START_TEST(test_every_shipped_config_loads)
{
    DIR *d = opendir(CONFIGS_DIR);
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char path[1024], err[512] = "";
        config_t cfg;

        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", CONFIGS_DIR, e->d_name);
        ck_assert_msg(config_load(path, &cfg, err, sizeof err) == 0, "%s: %s", path, err);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 2);
}
END_TEST

/* Every key of want (recursively) is present in have. */
static void assert_keys_present(json_t *want, json_t *have, const char *where)
{
    const char *key;
    json_t *v;

    json_object_foreach(want, key, v)
    {
        json_t *h = json_object_get(have, key);

        ck_assert_msg(h != NULL, "%s: key %s missing", where, key);
        if (json_is_object(v)) {
            ck_assert_msg(json_is_object(h), "%s: %s is not an object", where, key);
            assert_keys_present(v, h, key);
        }
    }
}

START_TEST(test_production_config_is_defaults_and_complete)
{
    config_t cfg, def;
    char err[512] = "";
    char *a, *b;
    json_t *file, *dump;

    ck_assert_msg(config_load(CONFIGS_DIR "/kvtierd.json", &cfg, err, sizeof err) == 0, "%s", err);
    config_defaults(&def);
    /* The one documented difference: production enables the disk tier (under the unit's
     * StateDirectory); the built-in default leaves it off so that a minimal config never writes
     * into /var/lib. */
    ck_assert(cfg.disk.enabled);
    ck_assert(!def.disk.enabled);
    def.disk.enabled = true;
    a = config_dump(&cfg);
    b = config_dump(&def);
    ck_assert_str_eq(a, b);

    /* The file spells out every key the dump has, and nothing else. */
    file = json_load_file(CONFIGS_DIR "/kvtierd.json", 0, NULL);
    dump = json_loads(b, 0, NULL);
    ck_assert_ptr_nonnull(file);
    ck_assert_ptr_nonnull(dump);
    assert_keys_present(dump, file, "kvtierd.json");
    assert_keys_present(file, dump, "dump");
    json_decref(file);
    json_decref(dump);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_dev_config)
{
    config_t cfg;
    char err[512] = "";

    ck_assert_msg(config_load(CONFIGS_DIR "/dev.json", &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(cfg.server.endpoint, "ipc://run/kvtierd.zmq");
    ck_assert_str_eq(cfg.server.status_socket, "run/status.sock");
    ck_assert_uint_eq(cfg.ram.capacity_bytes, 256ULL << 20);
    ck_assert_uint_eq(cfg.ram.max_chunk_bytes, 16ULL << 20);
    ck_assert_str_eq(cfg.ram.arena_path, "/dev/shm/kvtier-dev.arena");
    ck_assert_int_eq(cfg.log.level, LOG_INFO);
}
END_TEST

START_TEST(test_load_missing_file)
{
    config_t cfg;
    char err[512] = "";

    ck_assert_int_eq(config_load(CONFIGS_DIR "/no-such-file.json", &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no-such-file.json") != NULL, "%s", err);
}
END_TEST

/* The file itself: a path that is not a regular file, or too large, is refused at once with the
 * reason (a FIFO used to block the load, on the loop at a SIGHUP, until a writer came; a directory
 * said "'[' or '{' expected near end of file"), and a syntax error names the file. */
START_TEST(test_load_not_a_config_file)
{
    char dir[] = "/tmp/kvt-config-XXXXXX", path[600], err[512];
    config_t cfg;
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));

    ck_assert_int_eq(config_load(dir, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a regular file (a directory)") != NULL, "%s", err);

    snprintf(path, sizeof path, "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    alarm(5); /* without the fix the load waits for a writer for ever */
    ck_assert_int_eq(config_load(path, &cfg, err, sizeof err), -1);
    alarm(0);
    ck_assert_msg(strstr(err, "not a regular file (a FIFO)") != NULL, "%s", err);
    unlink(path);

    ck_assert_int_eq(config_load("/dev/zero", &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/dev/zero: not a regular file (a character device)") != NULL, "%s",
                  err);

    snprintf(path, sizeof path, "%s/big.json", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"x\": \"", f);
    for (int i = 0; i < (1 << 20); i++)
        fputc('a', f);
    fputs("\"}", f);
    fclose(f);
    ck_assert_int_eq(config_load(path, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bytes, more than the 1048576 a configuration may have") != NULL,
                  "%s", err);
    unlink(path);

    snprintf(path, sizeof path, "%s/bad.json", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\n  \"ram\": {\"lease_ms\": 18446744073709551616}\n}\n", f);
    fclose(f);
    ck_assert_int_eq(config_load(path, &cfg, err, sizeof err), -1);
    snprintf(path + strlen(path), sizeof path - strlen(path), ":2:");
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "%s (expected %s...)", err, path);
    path[strlen(path) - 3] = '\0';
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_syntax_error_reports_line)
{
    expect_error("{\n  \"ram\": {\n    \"lease_ms\": 5,\n  }\n}", "<string>:4:");
    expect_error("{\n  \"log\": {\"level\": \"info\"}\n  \"ram\": {}\n}", "<string>:3:");
    expect_error("{\"log\": {}, \"log\": {}}", "duplicate object key");
    expect_error("[1, 2]", "configuration: expected a JSON object at the top level");
}
END_TEST

START_TEST(test_unknown_keys)
{
    expect_error("{\"bogus\": 1}", "bogus: unknown key");
    expect_error("{\"ram\": {\"capacity\": 1}}", "ram.capacity: unknown key");
    expect_error("{\"gates\": {\"admission\": {\"enabld\": true}}}",
                 "gates.admission.enabld: unknown key");
    expect_error("{\"gates\": {\"skip\": {}}}", "gates.skip: unknown key");
    expect_error("{\"ram.lease_ms\": 5}", "ram.lease_ms: unknown key");
    expect_error("{\"\": 5}", ": unknown key");
    /* a message is one line whatever the key holds (found by fuzz_config) */
    expect_error("{\"\\namespaces\": 1}", "?amespaces: unknown key");
    expect_error("{\"ram\": {\"a\\r\\nb\\u007f\": 1}}", "ram.a??b?: unknown key");
}
END_TEST

START_TEST(test_wrong_types)
{
    expect_error("{\"ram\": {\"lease_ms\": \"5\"}}", "ram.lease_ms: expected integer");
    expect_error("{\"ram\": {\"lease_ms\": 5.0}}", "ram.lease_ms: expected integer");
    expect_error("{\"server\": {\"endpoint\": 5}}", "server.endpoint: expected string");
    expect_error("{\"gates\": {\"admission\": {\"enabled\": 1}}}",
                 "gates.admission.enabled: expected boolean");
    expect_error("{\"gates\": {\"lookup_skip\": {\"cut\": \"0.1\"}}}",
                 "gates.lookup_skip.cut: expected number");
    expect_error("{\"ram\": {\"capacity_bytes\": true}}", "ram.capacity_bytes: expected size");
    expect_error("{\"log\": {\"level\": 1}}", "log.level: expected string");
    expect_error("{\"ram\": 5}", "ram: expected object");
    expect_error("{\"gates\": {\"admission\": []}}", "gates.admission: expected object");
    expect_error("{\"server\": {\"endpoint\": {\"x\": 1}}}", "server.endpoint: expected string");
}
END_TEST

START_TEST(test_ranges)
{
    expect_error("{\"ram\": {\"lease_ms\": 0}}",
                 "ram.lease_ms: must be between 1 and 600000, got 0");
    expect_error("{\"ram\": {\"lease_ms\": 600001}}",
                 "ram.lease_ms: must be between 1 and 600000, got 600001");
    expect_error("{\"ram\": {\"lease_ms\": -3}}",
                 "ram.lease_ms: must be between 1 and 600000, got -3");
    expect_error("{\"ram\": {\"capacity_bytes\": 12}}",
                 "ram.capacity_bytes: must be between 1 MiB and 16 TiB, got 12");
    expect_error("{\"ram\": {\"capacity_bytes\": \"17TiB\"}}",
                 "ram.capacity_bytes: must be between 1 MiB and 16 TiB, got 18691697672192");
    expect_error("{\"ram\": {\"max_chunk_bytes\": 0}}",
                 "ram.max_chunk_bytes: must be between 1 and 1 GiB, got 0");
    expect_error("{\"server\": {\"max_chunks_per_request\": 65537}}",
                 "server.max_chunks_per_request: must be between 1 and 65536, got 65537");
    expect_error("{\"server\": {\"max_clients\": 0}}",
                 "server.max_clients: must be between 1 and 1000000, got 0");
    expect_error("{\"server\": {\"max_clients\": 1000001}}",
                 "server.max_clients: must be between 1 and 1000000, got 1000001");
    expect_error("{\"server\": {\"client_idle_ms\": 999}}",
                 "server.client_idle_ms: must be between 1000 and 86400000, got 999");
    expect_error("{\"server\": {\"client_idle_ms\": 86400001}}",
                 "server.client_idle_ms: must be between 1000 and 86400000, got 86400001");
    expect_error("{\"gates\": {\"admission\": {\"alpha\": 0}}}",
                 "gates.admission.alpha: must be greater than 0 and at most 1, got 0");
    expect_error("{\"gates\": {\"admission\": {\"alpha\": 1.5}}}",
                 "gates.admission.alpha: must be greater than 0 and at most 1, got 1.5");
    expect_error("{\"gates\": {\"lookup_skip\": {\"alpha\": -0.5}}}",
                 "gates.lookup_skip.alpha: must be greater than 0 and at most 1, got -0.5");
    expect_error("{\"gates\": {\"admission\": {\"target\": 1.01}}}",
                 "gates.admission.target: must be between 0 and 1, got 1.01");
    expect_error("{\"gates\": {\"admission\": {\"floor\": -0.1}}}",
                 "gates.admission.floor: must be between 0 and 1, got -0.1");
    expect_error("{\"gates\": {\"lookup_skip\": {\"cut\": 2}}}",
                 "gates.lookup_skip.cut: must be between 0 and 1, got 2");
    expect_error("{\"gates\": {\"admission\": {\"report_every\": 0}}}",
                 "gates.admission.report_every: must be at least 1, got 0");
    expect_error("{\"gates\": {\"lookup_skip\": {\"probe_every\": 0}}}",
                 "gates.lookup_skip.probe_every: must be at least 1, got 0");
    expect_error("{\"gates\": {\"admission\": {\"warmup\": -1}}}",
                 "gates.admission.warmup: must be at least 0, got -1");
    expect_error("{\"gates\": {\"lookup_skip\": {\"min_load_tokens\": -5}}}",
                 "gates.lookup_skip.min_load_tokens: must be at least 0, got -5");
}
END_TEST

START_TEST(test_range_edges_accepted)
{
    config_t *cfg = load_ok("{\"ram\": {\"capacity_bytes\": \"16TiB\", \"max_chunk_bytes\": "
                            "\"1GiB\", \"lease_ms\": 600000},"
                            " \"server\": {\"max_chunks_per_request\": 1, \"client_idle_ms\": "
                            "1000},"
                            " \"gates\": {\"admission\": {\"alpha\": 1, \"target\": 0, "
                            "\"floor\": 1, \"warmup\": 0},"
                            " \"lookup_skip\": {\"cut\": 0, \"min_lookups\": 0, "
                            "\"min_load_tokens\": 0, \"probe_every\": 1}}}");

    ck_assert_uint_eq(cfg->ram.capacity_bytes, 16ULL << 40);
    ck_assert_uint_eq(cfg->ram.max_chunk_bytes, 1ULL << 30);
    ck_assert_uint_eq(cfg->ram.lease_ms, 600000);
    ck_assert_uint_eq(cfg->server.max_chunks_per_request, 1);
    ck_assert_uint_eq(cfg->server.client_idle_ms, 1000);
    ck_assert(cfg->gates.admission.alpha == 1.0);
    ck_assert(cfg->gates.admission.target == 0.0);
    ck_assert(cfg->gates.admission.floor == 1.0);
    ck_assert_uint_eq(cfg->gates.admission.warmup, 0);
    ck_assert(cfg->gates.lookup_skip.cut == 0.0);
    ck_assert_uint_eq(cfg->gates.lookup_skip.min_lookups, 0);
    ck_assert_uint_eq(cfg->gates.lookup_skip.min_load_tokens, 0);
    ck_assert_uint_eq(cfg->gates.lookup_skip.probe_every, 1);
    free(cfg);

    cfg = load_ok("{\"ram\": {\"capacity_bytes\": 1048576, \"max_chunk_bytes\": 1048576}}");
    ck_assert_uint_eq(cfg->ram.capacity_bytes, 1048576);
    ck_assert_uint_eq(cfg->ram.max_chunk_bytes, 1048576);
    free(cfg);
}
END_TEST

START_TEST(test_bad_sizes)
{
    expect_error("{\"ram\": {\"capacity_bytes\": \"12XB\"}}",
                 "ram.capacity_bytes: invalid size \"12XB\"");
    expect_error("{\"ram\": {\"capacity_bytes\": \"-1\"}}",
                 "ram.capacity_bytes: invalid size \"-1\"");
    expect_error("{\"ram\": {\"capacity_bytes\": \"1.5GiB\"}}",
                 "ram.capacity_bytes: invalid size \"1.5GiB\"");
    expect_error("{\"ram\": {\"max_chunk_bytes\": \"\"}}",
                 "ram.max_chunk_bytes: invalid size \"\"");
    expect_error("{\"ram\": {\"capacity_bytes\": -1}}",
                 "ram.capacity_bytes: must be between 1 MiB and 16 TiB, got -1");
}
END_TEST

START_TEST(test_strings)
{
    char json[1024], s[300];

    expect_error("{\"log\": {\"level\": \"verbose\"}}",
                 "log.level: must be one of debug, info, warn, error, got \"verbose\"");
    expect_error("{\"server\": {\"endpoint\": \"http://host:1\"}}",
                 "server.endpoint: must start with \"ipc://\" or \"tcp://\"");
    expect_error("{\"server\": {\"endpoint\": \"ipc://\"}}",
                 "server.endpoint: must start with \"ipc://\" or \"tcp://\"");
    expect_error("{\"server\": {\"status_socket\": \"\"}}",
                 "server.status_socket: must not be empty");
    expect_error("{\"server\": {\"endpoint\": \"ipc://a\\u0000b\"}}", "<string>:1:");
    expect_error("{\"ram\": {\"lease_ms\\u0000x\": 1}}", "<string>:1:");

    /* status_socket: 107 bytes fit sun_path, 108 do not. */
    memset(s, 'a', 108);
    s[108] = '\0';
    snprintf(json, sizeof json, "{\"server\": {\"status_socket\": \"%s\"}}", s);
    expect_error(json, "server.status_socket: must be shorter than 108 bytes, got 108");
    s[107] = '\0';
    snprintf(json, sizeof json, "{\"server\": {\"status_socket\": \"%s\"}}", s);
    free(load_ok(json));

    /* arena_path: 255 bytes fit the buffer, 256 do not. */
    memset(s, 'p', 256);
    s[256] = '\0';
    snprintf(json, sizeof json, "{\"ram\": {\"arena_path\": \"%s\"}}", s);
    expect_error(json, "ram.arena_path: longer than 255 bytes");
    s[255] = '\0';
    snprintf(json, sizeof json, "{\"ram\": {\"arena_path\": \"%s\"}}", s);
    {
        config_t *cfg = load_ok(json);
        ck_assert_uint_eq(strlen(cfg->ram.arena_path), 255);
        free(cfg);
    }

    {
        config_t *cfg =
            load_ok("{\"server\": {\"endpoint\": \"tcp://127.0.0.1:5555\"},"
                    " \"log\": {\"level\": \"debug\"}, \"ram\": {\"arena_path\": \"\"}}");
        ck_assert_str_eq(cfg->server.endpoint, "tcp://127.0.0.1:5555");
        ck_assert_int_eq(cfg->log.level, LOG_DEBUG);
        ck_assert_str_eq(cfg->ram.arena_path, "");
        free(cfg);
    }
}
END_TEST

START_TEST(test_max_chunk_exceeds_capacity)
{
    expect_error("{\"ram\": {\"capacity_bytes\": \"256MiB\", \"max_chunk_bytes\": \"512MiB\"}}",
                 "ram.max_chunk_bytes: must not exceed ram.capacity_bytes (256 MiB), got "
                 "536870912");
    /* The default max_chunk_bytes (64 MiB) is checked against a smaller capacity too. */
    expect_error("{\"ram\": {\"capacity_bytes\": \"32MiB\"}}",
                 "ram.max_chunk_bytes: must not exceed ram.capacity_bytes (32 MiB), got 67108864");
}
END_TEST

START_TEST(test_disk_keys)
{
    config_t def, *c;

    config_defaults(&def);
    ck_assert(!def.disk.enabled);
    ck_assert_str_eq(def.disk.dir, "/var/lib/kvtier/disk");
    ck_assert_uint_eq(def.disk.capacity_bytes, 64ULL << 30);
    ck_assert_uint_eq(def.disk.segment_bytes, 256ULL << 20);
    ck_assert_int_eq(def.disk.compression, CODEC_MODE_AUTO);
    ck_assert(def.disk.compression_threshold == 0.9);
    ck_assert_int_eq(def.disk.fsync, CONFIG_FSYNC_SEGMENT);
    ck_assert_uint_eq(def.disk.max_reads_in_flight, 8);
    ck_assert_uint_eq(def.disk.write_buffer_bytes, 80ULL << 20);

    c = load_ok("{\"disk\": {\"enabled\": true, \"dir\": \"/tmp/d\", \"capacity_bytes\": "
                "\"8MiB\", \"segment_bytes\": \"1MiB\", \"write_buffer_bytes\": \"512KiB\", "
                "\"compression\": \"lz4\", \"compression_threshold\": 1, \"fsync\": \"record\", "
                "\"max_reads_in_flight\": 1}, \"ram\": {\"max_chunk_bytes\": \"256KiB\"}}");
    ck_assert(c->disk.enabled);
    ck_assert_str_eq(c->disk.dir, "/tmp/d");
    ck_assert_uint_eq(c->disk.capacity_bytes, 8ULL << 20);
    ck_assert_uint_eq(c->disk.segment_bytes, 1ULL << 20);
    ck_assert_uint_eq(c->disk.write_buffer_bytes, 512ULL << 10);
    ck_assert_int_eq(c->disk.compression, CODEC_MODE_LZ4);
    ck_assert(c->disk.compression_threshold == 1.0);
    ck_assert_int_eq(c->disk.fsync, CONFIG_FSYNC_RECORD);
    ck_assert_uint_eq(c->disk.max_reads_in_flight, 1);
    free(c);

    expect_error("{\"disk\": {\"compression\": \"zstd\"}}",
                 "disk.compression: must be one of auto, lz4, off, got \"zstd\"");
    expect_error("{\"disk\": {\"fsync\": \"always\"}}",
                 "disk.fsync: must be one of none, segment, record, got \"always\"");
    expect_error("{\"disk\": {\"compression_threshold\": 0}}",
                 "disk.compression_threshold: must be greater than 0 and at most 1, got 0");
    expect_error("{\"disk\": {\"compression_threshold\": 1.5}}",
                 "disk.compression_threshold: must be greater than 0 and at most 1, got 1.5");
    expect_error("{\"disk\": {\"max_reads_in_flight\": 0}}",
                 "disk.max_reads_in_flight: must be between 1 and 1024, got 0");
    expect_error("{\"disk\": {\"dir\": \"\"}}", "disk.dir: must not be empty");
    expect_error("{\"disk\": {\"segment_bytes\": 1000}}",
                 "disk.segment_bytes: must be between 1 MiB and 4 GiB, got 1000");
    expect_error("{\"disk\": {\"enabled\": 1}}", "disk.enabled: expected boolean");
    /* cross-key rules, only with the tier enabled */
    expect_error("{\"disk\": {\"enabled\": true, \"write_buffer_bytes\": \"64MiB\"}}",
                 "disk.write_buffer_bytes: must be at least ram.max_chunk_bytes + 64 KiB "
                 "(65600 KiB), got 67108864");
    expect_error("{\"disk\": {\"enabled\": true, \"segment_bytes\": \"64MiB\"}}",
                 "disk.write_buffer_bytes: must not exceed disk.segment_bytes (64 MiB), got "
                 "83886080");
    expect_error("{\"disk\": {\"enabled\": true, \"capacity_bytes\": \"511MiB\"}}",
                 "disk.capacity_bytes: must be at least two segments (512 MiB), got 535822336");
    c = load_ok("{\"disk\": {\"write_buffer_bytes\": \"64MiB\"}}");
    ck_assert(!c->disk.enabled);
    free(c);
}
END_TEST

START_TEST(test_namespace_overrides)
{
    /* namespaces come first in the file: they must still inherit the globals below. */
    config_t *cfg = load_ok("{\"namespaces\": {"
                            "  \"MiniMax-M3/fp8/tp4\": {\"gates\": {\"admission\": "
                            "{\"enabled\": true}}},"
                            "  \"other\": {\"gates\": {\"lookup_skip\": {\"cut\": 0.5}}}},"
                            " \"gates\": {\"admission\": {\"warmup\": 10},"
                            "            \"lookup_skip\": {\"min_load_tokens\": 4096}}}");
    const gates_cfg_t *a, *b, *g;

    ck_assert_int_eq(cfg->n_ns, 2);
    g = config_gates_for(cfg, "unlisted");
    ck_assert_ptr_eq(g, &cfg->gates);
    ck_assert(!g->admission.enabled);
    ck_assert_uint_eq(g->admission.warmup, 10);
    ck_assert(g->lookup_skip.cut == 0.01);

    a = config_gates_for(cfg, "MiniMax-M3/fp8/tp4");
    ck_assert_ptr_ne(a, &cfg->gates);
    ck_assert(a->admission.enabled);
    ck_assert_uint_eq(a->admission.warmup, 10);
    ck_assert_uint_eq(a->lookup_skip.min_load_tokens, 4096);
    ck_assert(a->lookup_skip.cut == 0.01);

    b = config_gates_for(cfg, "other");
    ck_assert(!b->admission.enabled);
    ck_assert_uint_eq(b->admission.warmup, 10);
    ck_assert(b->lookup_skip.cut == 0.5);
    ck_assert_uint_eq(b->lookup_skip.min_load_tokens, 4096);
    free(cfg);
}
END_TEST

START_TEST(test_namespace_errors)
{
    char json[20000], name[300];
    size_t n;
    int i;

    expect_error("{\"namespaces\": []}", "namespaces: expected object");
    expect_error("{\"namespaces\": {\"m\": 3}}", "namespaces.m: expected object");
    expect_error("{\"namespaces\": {\"m\": {\"ram\": {}}}}", "namespaces.m.ram: unknown key");
    expect_error("{\"namespaces\": {\"m\": {\"gates\": {\"admission\": {\"x\": 1}}}}}",
                 "namespaces.m.gates.admission.x: unknown key");
    expect_error("{\"namespaces\": {\"m\": {\"gates\": {\"admission\": {\"alpha\": 0}}}}}",
                 "namespaces.m.gates.admission.alpha: must be greater than 0 and at most 1, got 0");
    expect_error(
        "{\"namespaces\": {\"m\": {\"gates\": {\"lookup_skip\": {\"enabled\": \"yes\"}}}}}",
        "namespaces.m.gates.lookup_skip.enabled: expected boolean");
    expect_error("{\"namespaces\": {\"m\": {\"gates\": 1}}}",
                 "namespaces.m.gates: expected object");
    expect_error("{\"namespaces\": {\"\": {}}}",
                 "namespaces: model name must be 1 to 255 bytes, got 0");

    memset(name, 'm', 256);
    name[256] = '\0';
    snprintf(json, sizeof json, "{\"namespaces\": {\"%s\": {}}}", name);
    expect_error(json, "namespaces: model name must be 1 to 255 bytes, got 256");
    name[255] = '\0';
    snprintf(json, sizeof json, "{\"namespaces\": {\"%s\": {}}}", name);
    {
        config_t *cfg = load_ok(json);
        ck_assert_int_eq(cfg->n_ns, 1);
        ck_assert_str_eq(cfg->ns[0].name, name);
        free(cfg);
    }

    /* CONFIG_NS_OVERRIDES_MAX entries load, one more does not. */
    n = (size_t)snprintf(json, sizeof json, "{\"namespaces\": {");
    for (i = 0; i < CONFIG_NS_OVERRIDES_MAX; i++)
        n += (size_t)snprintf(json + n, sizeof json - n, "%s\"m%d\": {}", i ? ", " : "", i);
    snprintf(json + n, sizeof json - n, "}}");
    {
        config_t *cfg = load_ok(json);
        ck_assert_int_eq(cfg->n_ns, CONFIG_NS_OVERRIDES_MAX);
        ck_assert_str_eq(cfg->ns[CONFIG_NS_OVERRIDES_MAX - 1].name, "m63");
        free(cfg);
    }
    snprintf(json + n, sizeof json - n, ", \"one-more\": {}}}");
    expect_error(json, "namespaces: at most 64 entries, got 65");
}
END_TEST

START_TEST(test_parse_size)
{
    static const struct {
        const char *s;
        int rc;
        uint64_t v;
    } cases[] = {
        {"0", 0, 0},
        {"4096", 0, 4096},
        {"1B", 0, 1},
        {"4KiB", 0, 4096},
        {"512MiB", 0, 512ULL << 20},
        {"8GiB", 0, 8ULL << 30},
        {"1TiB", 0, 1ULL << 40},
        {"1KB", 0, 1000},
        {"3MB", 0, 3000000},
        {"2GB", 0, 2000000000},
        {"5TB", 0, 5000000000000ULL},
        {"18446744073709551615", 0, UINT64_MAX},
        {"16777215TiB", 0, 16777215ULL << 40},
        {"18446744073709551616", -1, 0},
        {"16777216TiB", -1, 0},
        {"", -1, 0},
        {"MiB", -1, 0},
        {"-1", -1, 0},
        {"+1", -1, 0},
        {" 1", -1, 0},
        {"1 MiB", -1, 0},
        {"1MiB ", -1, 0},
        {"1.5GiB", -1, 0},
        {"12XB", -1, 0},
        {"1mib", -1, 0},
        {"1K", -1, 0},
        {"0x10", -1, 0},
        {"1MiBMiB", -1, 0},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 12345;
        int rc = config_parse_size(cases[i].s, &v);

        ck_assert_msg(rc == cases[i].rc, "\"%s\": rc %d", cases[i].s, rc);
        if (rc == 0)
            ck_assert_msg(v == cases[i].v, "\"%s\": %llu", cases[i].s, (unsigned long long)v);
        else
            ck_assert_msg(v == 12345, "\"%s\": out written on failure", cases[i].s);
    }
    ck_assert_int_eq(config_parse_size(NULL, NULL), -1);
}
END_TEST

START_TEST(test_dump_round_trip)
{
    config_t *cfg = load_ok(
        "{\"server\": {\"endpoint\": \"tcp://0.0.0.0:7000\", "
        "\"status_socket\": \"s.sock\", \"max_clients\": 17},"
        " \"ram\": {\"capacity_bytes\": \"3GB\", \"arena_path\": \"\","
        " \"max_chunk_bytes\": 4097, \"lease_ms\": 1},"
        " \"log\": {\"level\": \"warn\"},"
        " \"gates\": {\"admission\": {\"target\": 0.1, \"floor\": 0.30000000000000004, \"alpha\": "
        "0.3333333333333333, \"warmup\": 9007199254740993}},"
        " \"namespaces\": {\"a/b\": {\"gates\": {\"lookup_skip\": "
        "{\"enabled\": true, \"cut\": 0.7}}}, \"c\": {}}}");
    config_t *back;
    char *a, *b, err[512] = "";
    json_t *j;

    a = config_dump(cfg);
    ck_assert_ptr_nonnull(a);
    /* Sizes are dumped as integers. */
    j = json_loads(a, 0, NULL);
    ck_assert_ptr_nonnull(j);
    ck_assert(json_is_integer(json_object_get(json_object_get(j, "ram"), "capacity_bytes")));
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "ram"), "capacity_bytes")),
        3000000000LL);
    ck_assert_int_eq(json_object_size(json_object_get(j, "namespaces")), 2);
    json_decref(j);

    back = malloc(sizeof *back);
    ck_assert_ptr_nonnull(back);
    ck_assert_msg(config_load_string(a, back, err, sizeof err) == 0, "%s\n%s", err, a);
    b = config_dump(back);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(a, b);

    ck_assert_str_eq(back->server.endpoint, "tcp://0.0.0.0:7000");
    ck_assert_str_eq(back->server.status_socket, "s.sock");
    ck_assert_uint_eq(back->server.max_clients, 17);
    ck_assert_uint_eq(back->ram.capacity_bytes, 3000000000ULL);
    ck_assert_uint_eq(back->ram.max_chunk_bytes, 4097);
    ck_assert_uint_eq(back->ram.lease_ms, 1);
    ck_assert_str_eq(back->ram.arena_path, "");
    ck_assert_int_eq(back->log.level, LOG_WARN);
    ck_assert(back->gates.admission.target == 0.1);
    ck_assert(back->gates.admission.alpha == 0.3333333333333333);
    ck_assert(back->gates.admission.floor == 0.1 + 0.2);
    ck_assert_uint_eq(back->gates.admission.warmup, 9007199254740993ULL);
    ck_assert_int_eq(back->n_ns, 2);
    ck_assert_str_eq(back->ns[0].name, "a/b");
    ck_assert(back->ns[0].gates.lookup_skip.enabled);
    ck_assert(back->ns[0].gates.lookup_skip.cut == 0.7);
    ck_assert(back->ns[0].gates.admission.alpha == 0.3333333333333333);
    ck_assert_str_eq(back->ns[1].name, "c");
    ck_assert(!back->ns[1].gates.lookup_skip.enabled);
    ck_assert_uint_eq(back->ns[1].gates.admission.warmup, 9007199254740993ULL);
    /* One dump uses the digits its most demanding double needs. */
    ck_assert_ptr_nonnull(strstr(a, "\"floor\": 0.30000000000000004,"));
    free(a);
    free(b);
    free(back);
    free(cfg);
}
END_TEST

struct changes {
    char keys[16][128];
    bool live[16];
    int n;
};

static void note_change(void *arg, const char *path, bool live)
{
    struct changes *c = arg;

    ck_assert_int_lt(c->n, 16);
    snprintf(c->keys[c->n], sizeof c->keys[0], "%s", path);
    c->live[c->n++] = live;
}

static int change_of(const struct changes *c, const char *path)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->keys[i], path) == 0)
            return c->live[i] ? 1 : 0;
    return -1;
}

START_TEST(test_live_flags)
{
    static const char *const live[] = {"log.level",
                                       "ram.lease_ms",
                                       "ram.shm_hold_ms",
                                       "server.client_idle_ms",
                                       "server.stop_drain_ms",
                                       "disk.max_reads_in_flight",
                                       "gates.admission.enabled",
                                       "gates.lookup_skip.cut",
                                       "namespaces.any-model"};
    static const char *const restart[] = {"server.endpoint",    "server.max_chunks_per_request",
                                          "ram.capacity_bytes", "ram.arena_path",
                                          "disk.dir",           "disk.enabled",
                                          "no.such.key"};

    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        ck_assert_msg(config_key_live(live[i]), "%s should be live", live[i]);
    for (size_t i = 0; i < sizeof restart / sizeof restart[0]; i++)
        ck_assert_msg(!config_key_live(restart[i]), "%s should need a restart", restart[i]);
}
END_TEST

START_TEST(test_merge_live)
{
    config_t *cur = load_ok("{\"ram\": {\"lease_ms\": 1000}, \"namespaces\": {\"a\": {\"gates\": "
                            "{\"admission\": {\"floor\": 0.5}}}, \"gone\": {}}}");
    config_t *next = load_ok("{\"ram\": {\"lease_ms\": 2000, \"capacity_bytes\": \"1GiB\"}, "
                             "\"log\": {\"level\": \"debug\"}, \"gates\": {\"admission\": "
                             "{\"enabled\": true}}, \"namespaces\": {\"a\": {\"gates\": "
                             "{\"admission\": {\"floor\": 0.75}}}, \"new\": {}}}");
    uint64_t cap = cur->ram.capacity_bytes;
    struct changes c = {0};

    ck_assert_int_eq(config_merge_live(cur, next, note_change, &c), 1);
    ck_assert_uint_eq(cur->ram.lease_ms, 2000);
    ck_assert_int_eq(cur->log.level, LOG_DEBUG);
    ck_assert(cur->gates.admission.enabled);
    ck_assert_uint_eq(cur->ram.capacity_bytes, cap); /* needs a restart: kept */
    ck_assert(config_gates_for(cur, "a")->admission.floor == 0.75);
    ck_assert(config_gates_for(cur, "a")->admission.enabled);
    ck_assert(config_gates_for(cur, "new")->admission.enabled);
    ck_assert(config_gates_for(cur, "gone") == &cur->gates);
    ck_assert_int_eq(change_of(&c, "ram.lease_ms"), 1);
    ck_assert_int_eq(change_of(&c, "ram.capacity_bytes"), 0);
    ck_assert_int_eq(change_of(&c, "log.level"), 1);
    ck_assert_int_eq(change_of(&c, "gates.admission.enabled"), 1);
    ck_assert_int_eq(change_of(&c, "namespaces.a"), 1);
    ck_assert_int_eq(change_of(&c, "namespaces.new"), 1);
    ck_assert_int_eq(change_of(&c, "namespaces.gone"), 1);
    ck_assert_int_eq(change_of(&c, "server.endpoint"), -1);
    /* the same file again changes nothing */
    c.n = 0;
    memcpy(next, cur, sizeof *next);
    ck_assert_int_eq(config_merge_live(cur, next, note_change, &c), 0);
    ck_assert_int_eq(c.n, 0);
    free(cur);
    free(next);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_empty_object_is_defaults);
    tcase_add_test(tc, test_log_level_names);
    tcase_add_test(tc, test_every_shipped_config_loads);
    tcase_add_test(tc, test_production_config_is_defaults_and_complete);
    tcase_add_test(tc, test_dev_config);
    tcase_add_test(tc, test_load_missing_file);
    tcase_add_test(tc, test_syntax_error_reports_line);
    tcase_add_test(tc, test_unknown_keys);
    tcase_add_test(tc, test_wrong_types);
    tcase_add_test(tc, test_ranges);
    tcase_add_test(tc, test_range_edges_accepted);
    tcase_add_test(tc, test_bad_sizes);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_max_chunk_exceeds_capacity);
    tcase_add_test(tc, test_disk_keys);
    tcase_add_test(tc, test_namespace_overrides);
    tcase_add_test(tc, test_namespace_errors);
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_load_not_a_config_file);
    tcase_add_test(tc, test_dump_round_trip);
    tcase_add_test(tc, test_live_flags);
    tcase_add_test(tc, test_merge_live);
    suite_add_tcase(s, tc);
    return s;
}

const check_program_t check_program = {.suite = config_suite};
