/*
 * test_disk_integration.c - the disk tier against the real daemon (tests/lib/harness.h): chunks
 * demoted out of a full RAM tier read back byte-exact; a clean restart finds every chunk that
 * was on disk; kill -9 during sustained saves loses nothing that loads (every chunk that loads
 * is byte-exact, the torn tail is dropped); a flipped byte in a stored record is a miss and a
 * checksum count, never served; a lookup reads a disk-only chain ahead of its load; disk use
 * stays under capacity through a 3x fill; ENOSPC on a
 * small tmpfs (root only) degrades the tier while RAM keeps serving, and it resumes when space
 * returns.
 *
 * Every daemon gets 4 MiB of RAM and 64 KiB chunks in chains of 16 (1 MiB per chain), so a
 * test that saves more than 4 chains pushes the oldest chains to disk. The write buffer (2 MiB)
 * holds more than one save's burst of evictions, so no demotion is refused for lack of buffer. The
 * disk directory lives outside the harness directory so that a second daemon can be started on it.
 */
#include "check_main.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "record.h"

#define CH (64u * 1024u)
#define PER 16u

/* A fresh disk directory for one test. */
static void disk_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* A daemon with 4 MiB of RAM over a disk tier in dir. segment is also the write buffer's size:
 * tests that must lose nothing use one large enough to absorb every demotion while a flush is
 * in flight, however slowly the (loaded) machine flushes. */
/* start() with more members of "disk" (more: "" or ", \"key\": value..."). */
static harness_t *start_with(const char *dir, const char *capacity, const char *fsync,
                             const char *segment, const char *more)
{
    char extra[640];
    harness_opts_t o = {.capacity_bytes = 4u << 20, .max_chunk_bytes = 256u << 10};

    snprintf(extra, sizeof extra,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"%s\", "
             "\"segment_bytes\": \"%s\", \"write_buffer_bytes\": \"%s\", "
             "\"fsync\": \"%s\", \"max_reads_in_flight\": 4%s}}",
             dir, capacity, segment, segment, fsync, more);
    o.extra_json = extra;
    return harness_start(&o);
}

static harness_t *start(const char *dir, const char *capacity, const char *fsync,
                        const char *segment)
{
    return start_with(dir, capacity, fsync, segment, "");
}

static kvt_client_t *client(const harness_t *h)
{
    return harness_client(h, "disk-model", 1, 0, 0);
}

/* Saves chain seed (PER chunks); returns how many were stored or existed. */
static int save_chain(kvt_client_t *c, uint32_t seed)
{
    kvt_hash_t hs[PER];
    const void *bufs[PER];
    size_t lens[PER];
    uint8_t out[PER];
    int ok = 0;

    harness_chain(seed, hs, PER);
    for (uint32_t i = 0; i < PER; i++) {
        void *b = malloc(CH);
        harness_fill(b, CH, 0, (uint64_t)seed * 1000 + i);
        bufs[i] = b;
        lens[i] = CH;
    }
    if (kvt_save(c, hs, PER, bufs, lens, NULL, out) == 0)
        for (uint32_t i = 0; i < PER; i++)
            ok += out[i] == KVT_SAVE_STORED || out[i] == KVT_SAVE_EXISTS;
    for (uint32_t i = 0; i < PER; i++)
        free((void *)bufs[i]);
    return ok;
}

/* Loads chain seed; fails the test on any chunk that loads with other bytes. Returns the
 * number of chunks that loaded (hit) and sets *missing_at to the first miss (PER if none). */
static int load_chain(kvt_client_t *c, uint32_t seed, uint32_t *missing_at)
{
    kvt_hash_t hs[PER];
    void *bufs[PER];
    size_t caps[PER], lens[PER], nhit = 0;
    int hits = 0;

    harness_chain(seed, hs, PER);
    for (uint32_t i = 0; i < PER; i++) {
        bufs[i] = malloc(CH);
        caps[i] = CH;
    }
    ck_assert_int_eq(kvt_load(c, hs, PER, bufs, caps, lens, &nhit), 0);
    if (missing_at != NULL)
        *missing_at = PER;
    for (uint32_t i = 0; i < PER; i++) {
        if (lens[i] == 0) {
            if (missing_at != NULL && *missing_at == PER)
                *missing_at = i;
        } else {
            ck_assert_uint_eq(lens[i], CH);
            ck_assert_msg(harness_check_fill(bufs[i], CH, 0, (uint64_t)seed * 1000 + i),
                          "chain %u chunk %u loaded with other bytes", seed, i);
            hits++;
        }
        free(bufs[i]);
    }
    return hits;
}

/* Looks chain seed up (PER chunks); returns its hit. */
static size_t lookup_chain(kvt_client_t *c, uint32_t seed)
{
    return harness_lookup_chain(c, seed, PER);
}

static int pred_flushed(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.write_buffer_chunks") == 0 &&
           harness_jint(st, "disk.reads_in_flight") == 0;
}

static void wait_flushed(const harness_t *h)
{
    json_t *st = harness_wait_status(h, pred_flushed, NULL, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "the write buffer never drained");
    json_decref(st);
}

/* Saves chains 1-8 through h's 4 MiB of RAM, each written before the next: chains 1-4 end up
 * only on disk. */
static void save_eight_chains(const harness_t *h, kvt_client_t *c)
{
    for (uint32_t s = 1; s <= 8; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h);
    }
}

static const char *jstr(json_t *st, const char *a, const char *b)
{
    json_t *v = json_object_get(json_object_get(st, a), b);

    ck_assert_msg(json_is_string(v), "%s.%s is not a string", a, b);
    return json_string_value(v);
}

/* Sum of the segment files' sizes (and allocated bytes) under dir. */
static void seg_bytes(const char *dir, uint64_t *size, uint64_t *alloc)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    *size = *alloc = 0;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL) {
        char path[512];
        struct stat st;
        if (strstr(de->d_name, ".seg") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &st) == 0) {
            *size += (uint64_t)st.st_size;
            *alloc += (uint64_t)st.st_blocks * 512;
        }
    }
    closedir(d);
}

/* A second look at dir for a failure message: each segment file and its size, and the disk
 * figures of status, so that an excess says whether it was a file beyond the daemon's account
 * (it persists) or a listing that raced a write (it is gone). */
static void seg_report(const harness_t *h, const char *dir, char *buf, size_t len)
{
    json_t *st = harness_status(h);
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n;

    ck_assert_ptr_nonnull(st);
    ck_assert_ptr_nonnull(d);
    n = (size_t)snprintf(buf, len,
                         "used_bytes %lld bytes_written %lld reclaimed_segments %lld "
                         "write_buffer_chunks %lld; files now:",
                         (long long)harness_jint(st, "disk.used_bytes"),
                         (long long)harness_jint(st, "disk.bytes_written"),
                         (long long)harness_jint(st, "disk.reclaimed_segments"),
                         (long long)harness_jint(st, "disk.write_buffer_chunks"));
    json_decref(st);
    while ((de = readdir(d)) != NULL && n < len) {
        char path[512];
        struct stat sb;
        if (strstr(de->d_name, ".seg") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &sb) == 0)
            n += (size_t)snprintf(buf + n, len - n, " %s=%lld", de->d_name, (long long)sb.st_size);
    }
    closedir(d);
}

START_TEST(test_demote_and_read_back)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;

    disk_dir(dir, sizeof dir);
    h = start(dir, "32MiB", "segment", "16MiB");
    c = client(h);
    /* Paced: a demotion finding the write buffer full while a flush is in flight is dropped
     * (demotions_refused), and how fast flushes finish depends on the machine's load. */
    for (uint32_t s = 1; s <= 8; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h);
    }
    st = harness_status(h);
    ck_assert_str_eq(jstr(st, "disk", "state"), "ok");
    ck_assert_int_gt(harness_jint(st, "disk.demotions"), 60);
    ck_assert_int_eq(harness_jint(st, "disk.demotions_refused"), 0);
    ck_assert_int_eq(harness_jint(st, "ram.index_chunks"), 8 * PER);
    json_decref(st);
    ck_assert_uint_eq(lookup_chain(c, 1), PER); /* a lookup counts chunks in either tier */
    for (uint32_t s = 1; s <= 8; s++)
        ck_assert_int_eq(load_chain(c, s, NULL), PER);
    st = harness_status(h);
    ck_assert_int_gt(harness_jint(st, "disk.hits"), 60);
    ck_assert_int_gt(harness_jint(st, "disk.promotions"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), 32 << 20);
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Read-ahead through the real daemon, in the engine's order: a lookup finds a chain only on
 * disk and the daemon reads it into RAM before the load comes (disk.prefetches); the load then
 * reads nothing more (every chunk a prefetch hit), byte-exact; chains looked up and never loaded
 * cost no drop. */
static int pred_reads_done(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.reads_in_flight") == 0 &&
           harness_jint(st, "disk.reads_queued") == 0 && harness_jint(st, "disk.prefetches") > 0;
}

START_TEST(test_lookup_reads_ahead_for_the_load)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t pf, records;

    disk_dir(dir, sizeof dir);
    h = start(dir, "32MiB", "segment", "16MiB");
    c = client(h);
    save_eight_chains(h, c); /* chains 1-4 end up only on disk */
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "disk.prefetches"), 0);
    records = harness_jint(st, "disk.records_read");
    json_decref(st);
    ck_assert_uint_eq(lookup_chain(c, 1), PER);
    (void)lookup_chain(c, 2); /* looked up, never loaded */
    st = harness_wait_status(h, pred_reads_done, NULL, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the read-aheads never finished");
    pf = harness_jint(st, "disk.prefetches");
    ck_assert_int_gt(pf, 0);
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records, pf);
    json_decref(st);
    ck_assert_int_eq(load_chain(c, 1, NULL), PER);
    st = harness_status(h);
    ck_assert_int_ge(harness_jint(st, "disk.prefetch_hits"), 1);
    ck_assert_int_ge(harness_jint(st, "disk.hits"), PER);
    /* what was read ahead was read once: the load's hits are prefetch hits or its own reads */
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records,
                     pf + (PER - harness_jint(st, "disk.prefetch_hits")));
    ck_assert_int_eq(harness_jint(st, "disk.demotions_refused"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    json_decref(st);
    ck_assert_int_eq(load_chain(c, 2, NULL), PER);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Loads chunk i of chain seed alone; 1 when it came back (byte-exact), 0 on a miss. */
static int load_one(kvt_client_t *c, uint32_t seed, uint32_t i)
{
    kvt_hash_t hs[PER];
    void *buf = malloc(CH);
    size_t cap = CH, len = 0, nhit = 0;

    harness_chain(seed, hs, PER);
    ck_assert_int_eq(kvt_load(c, &hs[i], 1, &buf, &cap, &len, &nhit), 0);
    if (len != 0)
        ck_assert_msg(len == CH && harness_check_fill(buf, CH, 0, (uint64_t)seed * 1000 + i),
                      "chain %u chunk %u loaded with other bytes", seed, i);
    free(buf);
    return len != 0;
}

static int pred_reads_idle(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.reads_in_flight") == 0 &&
           harness_jint(st, "disk.reads_queued") == 0;
}

/* The chain read-ahead's window slides (0.2.6): a client loading a disk-only chain one chunk at a
 * time, slower than the disk (every read-ahead has landed before its next load), finds every
 * chunk after the first read ahead, with a window of two chunks (disk.prefetch_depth_bytes).
 * Before 0.2.6 only a load that read from disk moved the window, so every third chunk waited for
 * a read of its own: records_read would be PER with prefetch_hits about 2 * PER / 3. */
START_TEST(test_chain_read_ahead_slides)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t records, hits0;

    disk_dir(dir, sizeof dir);
    h = start_with(dir, "32MiB", "segment", "16MiB", ", \"prefetch_depth_bytes\": \"128KiB\"");
    c = client(h);
    save_eight_chains(h, c); /* chains 1-4 end up only on disk */
    st = harness_status(h);
    records = harness_jint(st, "disk.records_read");
    hits0 = harness_jint(st, "disk.prefetch_hits");
    ck_assert_int_eq(harness_jint(st, "ram.index_chunks"), 8 * PER);
    json_decref(st);
    for (uint32_t i = 0; i < PER; i++) {
        ck_assert_int_eq(load_one(c, 1, i), 1);
        st = harness_wait_status(h, pred_reads_idle, NULL, HARNESS_DEADLINE_MS);
        ck_assert_msg(st != NULL, "the reads never finished");
        json_decref(st);
    }
    st = harness_status(h);
    printf("chain read-ahead: %lld records read, %lld prefetch hits for %u chunks loaded one by "
           "one\n",
           (long long)(harness_jint(st, "disk.records_read") - records),
           (long long)(harness_jint(st, "disk.prefetch_hits") - hits0), PER);
    ck_assert_int_eq(harness_jint(st, "disk.prefetch_hits") - hits0, PER - 1);
    /* read once each: the window's reach past the chain's end stops at its end */
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records, PER);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* The chain read-ahead's window grows once the client walks the chain (0.2.8): a load's own read
 * looks disk.prefetch_depth_bytes ahead (two chunks here), a load of a chunk that read-ahead
 * brought in four times as far (eight). Before 0.2.8 the second load read two ahead too: 4
 * records after it, not 10. With disk.read_io_bytes 4 KiB every read's I/O goes alone through the
 * gate (disk.c, "The I/O gate"), in the order the reads were started: then a batch load of the
 * other three disk-only chains, 48 reads at once, must come back whole and byte-exact (a ticket
 * the gate lost would hold every later read, and the loads would time out). */
START_TEST(test_chain_read_ahead_window_grows)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t records;
    kvt_hash_t hs[3 * PER];
    void *bufs[3 * PER];
    size_t caps[3 * PER], lens[3 * PER], nhit = 0;

    disk_dir(dir, sizeof dir);
    h = start_with(dir, "32MiB", "segment", "16MiB",
                   ", \"prefetch_depth_bytes\": \"128KiB\", \"read_io_bytes\": \"4KiB\"");
    c = client(h);
    save_eight_chains(h, c); /* chains 1-4 end up only on disk */
    records = harness_stat(h, "disk.records_read");
    ck_assert_int_eq(load_one(c, 1, 0), 1);
    st = harness_wait_status(h, pred_reads_idle, NULL, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records, 1 + 2);
    json_decref(st);
    ck_assert_int_eq(load_one(c, 1, 1), 1); /* read ahead: the client walks the chain */
    st = harness_wait_status(h, pred_reads_idle, NULL, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records, 1 + 1 + 8);
    json_decref(st);
    for (uint32_t i = 2; i < PER; i++)
        ck_assert_int_eq(load_one(c, 1, i), 1);

    for (uint32_t k = 0; k < 3; k++)
        harness_chain(2 + k, &hs[k * PER], PER);
    for (size_t i = 0; i < 3 * PER; i++) {
        caps[i] = CH;
        bufs[i] = malloc(CH);
        ck_assert_ptr_nonnull(bufs[i]);
    }
    ck_assert_int_eq(kvt_load(c, hs, 3 * PER, bufs, caps, lens, &nhit), 0);
    ck_assert_uint_eq(nhit, 3 * PER);
    for (size_t i = 0; i < 3 * PER; i++) {
        ck_assert_msg(lens[i] == CH && harness_check_fill(bufs[i], CH, 0,
                                                          (uint64_t)(2 + i / PER) * 1000 + i % PER),
                      "chain %zu chunk %zu loaded with other bytes", 2 + i / PER, i % PER);
        free(bufs[i]);
    }
    ck_assert_int_eq(harness_stat(h, "disk.checksum_drops"), 0);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* What a lookup reads ahead is what it answered (store.c: "no rank loads past it"), and loading
 * it does not slide a chain's window past that: a lookup of the first half of a disk-only chain,
 * then the load of that half, reads that half only. */
START_TEST(test_lookup_read_ahead_stays_in_its_prefix)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    kvt_hash_t hs[PER];
    void *bufs[PER / 2];
    size_t caps[PER / 2], lens[PER / 2], nhit = 0;
    int64_t records;

    disk_dir(dir, sizeof dir);
    h = start(dir, "32MiB", "segment", "16MiB");
    c = client(h);
    save_eight_chains(h, c); /* chains 1-4 end up only on disk */
    st = harness_status(h);
    records = harness_jint(st, "disk.records_read");
    json_decref(st);
    ck_assert_uint_eq(harness_lookup_chain(c, 1, PER / 2), PER / 2);
    st = harness_wait_status(h, pred_reads_done, NULL, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the read-aheads never finished");
    json_decref(st);
    harness_chain(1, hs, PER);
    for (uint32_t i = 0; i < PER / 2; i++) {
        bufs[i] = malloc(CH);
        caps[i] = CH;
    }
    ck_assert_int_eq(kvt_load(c, hs, PER / 2, bufs, caps, lens, &nhit), 0);
    for (uint32_t i = 0; i < PER / 2; i++) {
        ck_assert_msg(lens[i] == CH && harness_check_fill(bufs[i], CH, 0, 1000 + i),
                      "chunk %u loaded with other bytes", i);
        free(bufs[i]);
    }
    st = harness_wait_status(h, pred_reads_idle, NULL, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the reads never finished");
    ck_assert_int_eq(harness_jint(st, "disk.records_read") - records, PER / 2);
    ck_assert_int_eq(harness_jint(st, "disk.prefetch_hits"), PER / 2);
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_restart_finds_disk_chunks)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    int64_t on_disk, loaded = 0;
    json_t *st;

    disk_dir(dir, sizeof dir);
    h = start(dir, "32MiB", "segment", "16MiB");
    c = client(h);
    for (uint32_t s = 1; s <= 10; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h); /* paced, as in test_demote_and_read_back */
    }
    on_disk = harness_stat(h, "disk.chunks");
    ck_assert_int_ge(on_disk, 4 * PER); /* RAM holds 4 of the 10 chains */
    kvt_close(&c);
    harness_stop(&h);

    /* the chunks only in RAM at shutdown were written then: the restart finds every chunk */
    ck_assert_int_lt(on_disk, 10 * PER);
    h = start(dir, "32MiB", "segment", "16MiB");
    c = client(h);
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "disk.recovery.records"), 10 * PER);
    ck_assert_int_eq(harness_jint(st, "disk.recovery.checksum_drops"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.recovery.torn_bytes"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.chunks"), 10 * PER);
    json_decref(st);
    for (uint32_t s = 1; s <= 10; s++)
        loaded += load_chain(c, s, NULL); /* asserts every loaded chunk is byte-exact */
    ck_assert_int_eq(loaded, 10 * PER);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_kill9_during_saves)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    pid_t saver;
    int64_t loaded = 0, recovered;
    json_t *st;

    disk_dir(dir, sizeof dir);
    h = start(dir, "64MiB", "none", "2MiB");
    saver = fork();
    ck_assert_int_ge(saver, 0);
    if (saver == 0) {
        kvt_client_t *sc = client(h);
        for (uint32_t s = 1; s <= 400; s++)
            if (save_chain(sc, s) != PER)
                break;
        _exit(0);
    }
    /* let the disk take some flushes, then kill the daemon while the saver is still going */
    while (harness_stat(h, "disk.records_written") < 100)
        usleep(2000);
    harness_kill9(h);
    waitpid(saver, NULL, 0);
    harness_free(&h);

    h = start(dir, "64MiB", "none", "2MiB");
    c = client(h);
    st = harness_status(h);
    recovered = harness_jint(st, "disk.recovery.records");
    ck_assert_int_ge(recovered, 100);
    ck_assert_int_eq(harness_jint(st, "disk.recovery.checksum_drops"), 0);
    json_decref(st);
    for (uint32_t s = 1; s <= 400; s++)
        loaded += load_chain(c, s, NULL); /* asserts every loaded chunk is byte-exact */
    ck_assert_int_eq(loaded, recovered);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Finds the record of hash h in the segment files of dir: path and payload offset. */
static int find_record(const char *dir, const kvt_hash_t *hash, char *path, size_t plen,
                       uint64_t *payload_off)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;

    ck_assert_ptr_nonnull(d);
    while (!found && (de = readdir(d)) != NULL) {
        uint8_t hdr[RECORD_HEADER_MAX];
        uint64_t off = 0;
        int fd;
        if (strstr(de->d_name, ".seg") == NULL)
            continue;
        snprintf(path, plen, "%s/%s", dir, de->d_name);
        fd = open(path, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        for (;;) {
            record_meta_t m;
            size_t hl;
            ssize_t n = pread(fd, hdr, sizeof hdr, (off_t)off);
            if (n <= 0 || record_decode_header(hdr, (size_t)n, &m, &hl) != RECORD_OK)
                break;
            if (memcmp(m.hash, hash->b, 16) == 0) {
                *payload_off = off + record_payload_off(&m);
                found = 1;
                break;
            }
            off += record_span(&m);
        }
        close(fd);
    }
    closedir(d);
    return found;
}

START_TEST(test_flipped_byte_is_a_miss)
{
    char dir[96], path[512];
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t hs[PER];
    uint64_t poff;
    uint32_t miss_at;
    uint8_t b;
    int fd;

    disk_dir(dir, sizeof dir);
    h = start(dir, "32MiB", "segment", "2MiB");
    c = client(h);
    /* Paced: a demotion finding the write buffer full while a flush is in flight is dropped
     * (demotions_refused), and how fast flushes finish depends on the machine's load. */
    for (uint32_t s = 1; s <= 8; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h);
    }
    /* chain 1 was demoted whole; corrupt chunk 5 of it on disk */
    harness_chain(1, hs, PER);
    ck_assert(find_record(dir, &hs[5], path, sizeof path, &poff));
    fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)poff + 100), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)poff + 100), 1);
    close(fd);
    ck_assert_int_eq(harness_stat(h, "disk.checksum_drops"), 0);
    ck_assert_int_eq(load_chain(c, 1, &miss_at), PER - 1);
    ck_assert_uint_eq(miss_at, 5);
    ck_assert_int_eq(harness_stat(h, "disk.checksum_drops"), 1);
    /* the bad record was dropped from the index: the next load misses without a read */
    ck_assert_int_eq(load_chain(c, 1, &miss_at), PER - 1);
    ck_assert_uint_eq(miss_at, 5);
    ck_assert_int_eq(harness_stat(h, "disk.checksum_drops"), 1);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

START_TEST(test_capacity_holds_under_3x_fill)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    uint64_t size, alloc;
    json_t *st;
    int recent = 0;

    disk_dir(dir, sizeof dir);
    h = start(dir, "12MiB", "none", "2MiB");
    c = client(h);
    /* Paced, as the other tests: saves never wait for the disk, so chains saved faster than the
     * cleaner writes them are dropped (demotions_refused) and would not reach the disk to fill
     * it three times, however slowly the (loaded) machine flushes. */
    for (uint32_t s = 1; s <= 40; s++) { /* 4 MiB RAM + 3 x 12 MiB disk */
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h);
        seg_bytes(dir, &size, &alloc);
        if (size > (12u << 20)) {
            char why[2048];
            seg_report(h, dir, why, sizeof why);
            ck_abort_msg("chain %u: segment files hold %llu bytes (%s)", s,
                         (unsigned long long)size, why);
        }
        ck_assert_int_le(harness_stat(h, "disk.used_bytes"), 12 << 20);
    }
    wait_flushed(h);
    seg_bytes(dir, &size, &alloc);
    ck_assert_uint_le(size, 12u << 20);
    ck_assert_uint_le(alloc, 12u << 20);
    st = harness_status(h);
    ck_assert_int_gt(harness_jint(st, "disk.reclaimed_segments"), 8);
    ck_assert_int_gt(harness_jint(st, "disk.evictions"), 0);
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), 12 << 20);
    json_decref(st);
    /* old chains are gone (misses, never wrong bytes), recent ones load */
    ck_assert_int_eq(load_chain(c, 40, NULL), PER);
    for (uint32_t s = 1; s <= 40; s++)
        recent += load_chain(c, s, NULL);
    ck_assert_int_ge(recent, 8 * (int)PER);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static int pred_state(json_t *st, void *arg)
{
    json_t *v = json_object_get(json_object_get(st, "disk"), "state");

    return json_is_string(v) && strcmp(json_string_value(v), arg) == 0;
}

START_TEST(test_enospc_degrades_and_resumes)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    uint32_t s = 1;

    if (geteuid() != 0) {
        printf("test_enospc_degrades_and_resumes: skipped (needs root to mount a tmpfs)\n");
        return;
    }
    disk_dir(dir, sizeof dir);
    if (mount("kvt-enospc", dir, "tmpfs", 0, "size=1m") != 0) {
        printf("test_enospc_degrades_and_resumes: skipped (mount tmpfs: %s)\n", strerror(errno));
        return;
    }
    h = start(dir, "16MiB", "none", "2MiB");
    c = client(h);
    /* 1 MiB of filesystem under a 16 MiB tier: a flush fails with ENOSPC */
    for (; s <= 8; s++)
        ck_assert_int_eq(save_chain(c, s), PER);
    st = harness_wait_status(h, pred_state, "degraded", HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_gt(harness_jint(st, "disk.write_errors"), 0);
    ck_assert_str_eq(jstr(st, "disk", "last_error"), "No space left on device");
    json_decref(st);
    /* RAM keeps serving: saves are stored, the newest chain loads byte-exact */
    for (; s <= 12; s++)
        ck_assert_int_eq(save_chain(c, s), PER);
    ck_assert_int_eq(load_chain(c, 12, NULL), PER);
    /* space comes back: the next flush after the retry delay succeeds */
    ck_assert_int_eq(mount("kvt-enospc", dir, "tmpfs", MS_REMOUNT, "size=64m"), 0);
    st = NULL;
    for (int64_t t0 = harness_now_ms(); st == NULL && harness_now_ms() - t0 < 10000; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        st = harness_wait_status(h, pred_state, "ok", 200);
    }
    ck_assert_msg(st != NULL, "the disk tier never resumed");
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);
    ck_assert_int_eq(umount(dir), 0);
}
END_TEST

/* A daemon on a fresh 16 MiB disk (2 MiB segments) in dir, chains 1-12 saved by *c, each written
 * before the next, and every one of them leased by a second client *a (one leasing lookup per
 * chain: 30 s each). */
static harness_t *start_leased(char *dir, size_t len, kvt_client_t **c, kvt_client_t **a)
{
    harness_t *h;

    disk_dir(dir, len);
    h = start(dir, "16MiB", "none", "2MiB");
    *c = client(h);
    *a = client(h);
    for (uint32_t s = 1; s <= 12; s++) {
        ck_assert_int_eq(save_chain(*c, s), PER);
        wait_flushed(h);
    }
    for (uint32_t s = 1; s <= 12; s++) {
        kvt_hash_t hs[PER];
        kvt_lookup_opts_t lo = {.lease = 1};
        kvt_lookup_result_t r = {0};
        harness_chain(s, hs, PER);
        ck_assert_int_eq(kvt_lookup(*a, hs, PER, &lo, &r), 0);
        ck_assert_int_eq(r.leased, 1);
    }
    return h;
}

/* A stop while a client holds leases on every disk-only chunk (one lookup with a lease per
 * chain: 30 s each), with RAM-only chunks to persist and no journal (a memfd arena: RAM dies with
 * the process, so the persist reclaims the oldest segments for them). The leases no longer
 * protect anything once the socket is closed; the persist reclaims past them and the stop ends
 * at once. Before, every reclaim was deferred by the leases, the persist waited out its 20 s
 * deadline and wrote nothing (log "disk_persist chunks=0 ... ms=20002"). */
START_TEST(test_stop_persists_past_leases)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c, *a;
    int64_t t0;

    h = start_leased(dir, sizeof dir, &c, &a);
    for (uint32_t s = 100; s < 116; s++)
        save_chain(c, s); /* RAM full of chunks the full disk cannot take */
    ck_assert_int_gt(harness_stat(h, "disk.reclaims_deferred_by_leases"), 0);
    kvt_close(&a);
    kvt_close(&c);
    t0 = harness_now_ms();
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    harness_reap(h); /* exit 0 within 10 s */
    printf("stop with every disk chunk leased: %lld ms\n", (long long)(harness_now_ms() - t0));
    ck_assert_int_eq(harness_log_count(h, "event=disk_persist"), 1);
    ck_assert_int_eq(harness_log_count(h, "event=disk_persist chunks=0 "), 0);
    harness_free(&h);
}
END_TEST

/* Leases alone do not freeze the disk tier (0.2.10): a second client leases every chain on disk
 * (one leasing lookup per chain; a lease of a chunk with a disk copy costs it none of its held
 * bytes), then 16 more chains go through the 4 MiB of RAM over the full 16 MiB disk, each
 * written before the next. Once the leased segments a reclaim steps over pass a quarter of the
 * capacity, it reclaims the oldest past its leases (disk.reclaims_past_leases): nothing is
 * refused, the new chains are whole, and the capacity holds. Before, the reclaims took the new
 * chains' segments while the leased ones stayed (or, with every segment leased, the demotions
 * were refused until the leases ran out). */
START_TEST(test_leases_do_not_freeze_the_disk)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c, *a;
    json_t *st;

    h = start_leased(dir, sizeof dir, &c, &a);
    for (uint32_t s = 100; s < 116; s++) {
        ck_assert_int_eq(save_chain(c, s), PER);
        wait_flushed(h);
    }
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    printf("leases on every disk chain: %lld segments reclaimed past them, %lld reclaims deferred, "
           "%lld demotions refused\n",
           (long long)harness_jint(st, "disk.reclaims_past_leases"),
           (long long)harness_jint(st, "disk.reclaims_deferred_by_leases"),
           (long long)harness_jint(st, "disk.demotions_refused"));
    fflush(stdout);
    ck_assert_int_gt(harness_jint(st, "disk.reclaims_past_leases"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.demotions_refused"), 0);
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), harness_jint(st, "disk.capacity_bytes"));
    json_decref(st);
    for (uint32_t s = 104; s < 116; s++) /* the newest 12 MiB: on disk, some in RAM too */
        ck_assert_uint_eq(lookup_chain(c, s), PER);
    kvt_close(&a);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static Suite *disk_integration_suite(void)
{
    Suite *su = suite_create("disk_integration");
    TCase *tc = tcase_create("disk");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_demote_and_read_back);
    tcase_add_test(tc, test_lookup_reads_ahead_for_the_load);
    tcase_add_test(tc, test_chain_read_ahead_slides);
    tcase_add_test(tc, test_chain_read_ahead_window_grows);
    tcase_add_test(tc, test_lookup_read_ahead_stays_in_its_prefix);
    tcase_add_test(tc, test_restart_finds_disk_chunks);
    tcase_add_test(tc, test_kill9_during_saves);
    tcase_add_test(tc, test_flipped_byte_is_a_miss);
    tcase_add_test(tc, test_capacity_holds_under_3x_fill);
    tcase_add_test(tc, test_enospc_degrades_and_resumes);
    tcase_add_test(tc, test_stop_persists_past_leases);
    tcase_add_test(tc, test_leases_do_not_freeze_the_disk);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = disk_integration_suite, .scratch = "kvtdk"};
