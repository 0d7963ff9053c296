/*
 * test_checkpoint.c - the disk tier's index checkpoint (checkpoint.h) against the real daemon: a
 * restart after a clean stop reads the checkpoint instead of the records; chunks written after a
 * periodic checkpoint survive a SIGKILL (the tail and the newer segments are scanned); a
 * corrupted or stale checkpoint is detected and the full scan taken. Every chunk is loaded back
 * byte for byte (from disk: the arena is a memfd, so RAM starts empty), through the reads that
 * verify its checksum.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "harness.h"

#define CH (64u * 1024u)
#define PER 16u

static void make_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/ckpt-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* 4 MiB of RAM that the cleaner keeps clean (every chunk is written to disk at once), 1 MiB
 * segments; interval: disk.checkpoint_interval_s. */
static harness_t *start(const char *dir, unsigned interval)
{
    char extra[512];
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 256u << 10};

    snprintf(extra, sizeof extra,
             "{\"ram\": {\"clean_target_bytes\": \"4MiB\"}, \"disk\": {\"enabled\": true, "
             "\"dir\": \"%s\", \"capacity_bytes\": \"64MiB\", \"segment_bytes\": \"1MiB\", "
             "\"write_buffer_bytes\": \"1MiB\", \"fsync\": \"none\", \"checkpoint_interval_s\": "
             "%u}}",
             dir, interval);
    o.extra_json = extra;
    return harness_start(&o);
}

static const char *recovery_str(const harness_t *h, const char *key)
{
    static char buf[128];
    json_t *st = harness_status(h);
    json_t *v = json_object_get(json_object_get(json_object_get(st, "disk"), "recovery"), key);

    snprintf(buf, sizeof buf, "%s", json_string_value(v) != NULL ? json_string_value(v) : "");
    json_decref(st);
    return buf;
}

static int pred_clean(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "ram.dirty_bytes") == 0 &&
           harness_jint(st, "disk.write_buffer_chunks") == 0;
}

/* Waits until every chunk saved so far is on disk. */
static void wait_clean(const harness_t *h)
{
    json_t *st = harness_wait_status(h, pred_clean, NULL, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "the cleaner never wrote everything");
    json_decref(st);
}

/* Saves chains first..last, each written to disk before the next is saved: the tests here are
 * about the checkpoint, and a burst past the 4 MiB of RAM could have dirty chunks evicted while
 * the writer is behind, which the daemon refuses to hold for it (saves never wait on the disk):
 * under load 2 of 96 chunks were refused so, and the restart then rightly found 94. */
static void save(harness_t *h, uint32_t first, uint32_t last)
{
    kvt_client_t *c = harness_client(h, "ckpt", 1, 0, 0);

    for (uint32_t seed = first; seed <= last; seed++) {
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        wait_clean(h);
    }
    kvt_close(&c);
}

static size_t load(harness_t *h, uint32_t first, uint32_t last)
{
    kvt_client_t *c = harness_client(h, "ckpt", 1, 0, 0);
    size_t got = 0;

    for (uint32_t seed = first; seed <= last; seed++)
        got += harness_load_chain(c, seed, PER, CH, 0); /* asserts the bytes */
    kvt_close(&c);
    return got;
}

/* A clean stop writes the checkpoint; the restart takes its records and reads no segment. */
START_TEST(test_checkpoint_clean_restart)
{
    char dir[256];
    harness_t *h;

    int64_t on_disk, refused, records, scanned;

    make_dir(dir, sizeof dir);
    h = start(dir, 0);
    save(h, 1, 6); /* 6 MiB: several segments */
    wait_clean(h);
    on_disk = harness_stat(h, "disk.chunks");
    refused = harness_stat(h, "disk.demotions_refused");
    ck_assert_msg(on_disk == 6 * PER, "before the stop: %lld of %u chunks on disk, %lld refused",
                  (long long)on_disk, 6 * PER, (long long)refused);
    harness_stop(&h);

    h = start(dir, 0);
    ck_assert_str_eq(recovery_str(h, "path"), "checkpoint");
    /* this test failed now and then under load (94 or 95 records) until 0.2.9 found why: the
     * precondition above caught 2 refused demotions of the burst; save() now lets the writer
     * catch up after each chain. The message says what the restart found. */
    records = harness_stat(h, "disk.recovery.checkpoint_records");
    scanned = harness_stat(h, "disk.recovery.scanned_bytes");
    ck_assert_msg(records == 6 * PER && scanned == 0,
                  "restart: %lld checkpoint records of %u, %lld bytes scanned, %lld chunks "
                  "indexed",
                  (long long)records, 6 * PER, (long long)scanned,
                  (long long)harness_stat(h, "ram.index_chunks"));
    ck_assert_int_eq(harness_stat(h, "ram.index_chunks"), 6 * PER);
    ck_assert_uint_eq(load(h, 1, 6), 6 * PER);
    ck_assert_int_gt(harness_stat(h, "disk.hits"), 0);
    harness_stop(&h);
    ck_assert_int_eq(check_rmtree(dir), 0);
}
END_TEST

/* A periodic checkpoint, more saves after it, SIGKILL: the restart takes the checkpoint and
 * scans what came after it (the tail of its newest segment and the newer ones). */
START_TEST(test_checkpoint_then_more_then_kill)
{
    char dir[256];
    harness_t *h;
    harness_int_eq_t two = {.path = "disk.checkpoints", .value = 2};
    json_t *st;
    int64_t n;

    make_dir(dir, sizeof dir);
    h = start(dir, 1);
    save(h, 1, 3);
    wait_clean(h);
    /* two more checkpoints from here: the second was built after chains 1-3 were on disk */
    n = harness_stat(h, "disk.checkpoints");
    two.value = n + 2;
    st = harness_wait_status(h, harness_pred_int_eq, &two, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(st);
    json_decref(st);
    save(h, 4, 7);
    wait_clean(h);
    harness_kill9(h);
    harness_free(&h);

    h = start(dir, 0);
    ck_assert_str_eq(recovery_str(h, "path"), "checkpoint");
    ck_assert_int_ge(harness_stat(h, "disk.recovery.checkpoint_records"), 3 * PER);
    ck_assert_int_gt(harness_stat(h, "disk.recovery.scanned_bytes"), 0);
    ck_assert_uint_eq(load(h, 1, 7), 7 * PER);
    harness_stop(&h);
    ck_assert_int_eq(check_rmtree(dir), 0);
}
END_TEST

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    unsigned char b;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x01;
    ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* A corrupted checkpoint: the full scan, and every chunk still loads. A segment it covers that
 * grew (not the newest: bytes appended to the oldest): the checkpoint serves, the tail is scanned
 * (0.2.11; a full scan before) and cut as torn, and every chunk loads. One that shrank: stale,
 * the full scan. */
START_TEST(test_checkpoint_corrupted_or_stale)
{
    char dir[256], path[300], seg[300];
    harness_t *h;
    size_t n;

    make_dir(dir, sizeof dir);
    h = start(dir, 0);
    save(h, 1, 4);
    wait_clean(h);
    harness_stop(&h);

    snprintf(path, sizeof path, "%s/index.ckpt", dir);
    flip_byte(path, 40);
    h = start(dir, 0);
    ck_assert_str_eq(recovery_str(h, "path"), "scan");
    ck_assert_str_eq(recovery_str(h, "reason"), "corrupted");
    ck_assert_int_eq(harness_log_count(h, "event=disk_checkpoint"), 1);
    ck_assert_uint_eq(load(h, 1, 4), 4 * PER);
    harness_stop(&h);

    /* the oldest segment (not the newest the checkpoint covers) gets bytes it did not have */
    snprintf(seg, sizeof seg, "%s/%016x.seg", dir, 1u);
    {
        int fd = open(seg, O_WRONLY | O_APPEND);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "junk", 4), 4);
        close(fd);
    }
    h = start(dir, 0);
    ck_assert_str_eq(recovery_str(h, "path"), "checkpoint");
    ck_assert_int_eq(harness_stat(h, "disk.recovery.torn_bytes"), 4);
    ck_assert_uint_eq(load(h, 1, 4), 4 * PER);
    harness_stop(&h);

    /* the oldest segment loses its last block */
    {
        struct stat st;
        ck_assert_int_eq(stat(seg, &st), 0);
        ck_assert_int_eq(truncate(seg, st.st_size - 4096), 0);
    }
    h = start(dir, 0);
    ck_assert_str_eq(recovery_str(h, "path"), "scan");
    ck_assert_str_eq(recovery_str(h, "reason"), "stale: a segment it covers changed size");
    n = load(h, 1, 4); /* asserts zero wrong bytes */
    ck_assert_uint_lt(n, 4 * PER);
    ck_assert_uint_gt(n, 0);
    harness_stop(&h);
    ck_assert_int_eq(check_rmtree(dir), 0);
}
END_TEST

static Suite *ckpt_suite(void)
{
    Suite *su = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_checkpoint_clean_restart);
    tcase_add_test(tc, test_checkpoint_then_more_then_kill);
    tcase_add_test(tc, test_checkpoint_corrupted_or_stale);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = ckpt_suite, .scratch = "kvtck"};
