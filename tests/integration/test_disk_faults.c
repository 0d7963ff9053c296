/*
 * test_disk_faults.c - the disk tier's faults against the real daemon: a segment truncated or
 * deleted under it, a full filesystem (ENOSPC), a directory that refuses new files, bit flips
 * across every segment, and SIGKILL during the shutdown persist. Each fault must reach status
 * (disk.state "degraded" with last_error, then "ok" again once reads and writes succeed), and
 * each test restarts the daemon on the same directory and loads everything ever saved: zero
 * wrong bytes (harness_load_chain fails on any), and the chunks kept are printed.
 *
 * Every daemon gets 4 MiB of RAM and 64 KiB chunks in chains of 16 (1 MiB per chain), so saving
 * more than 4 chains pushes the oldest to disk; saves are paced (the write buffer drained after
 * each chain) where a test needs chains to be on disk. The disk directory lives outside the
 * harness directory so that the restarted daemon finds it. Tests that need root (a tmpfs, the
 * immutable flag) say "skipped" and pass without it.
 */
#include "check_main.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define CH (64u * 1024u)
#define PER 16u

static void make_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

/* clean_target: ram.clean_target_bytes ("0": the default, half the RAM written ahead). */
static harness_t *start_cleaning(const char *dir, const char *capacity, const char *segment,
                                 uint64_t ram_bytes, const char *clean_target)
{
    char extra[512];
    harness_opts_t o = {.capacity_bytes = ram_bytes, .max_chunk_bytes = 256u << 10};

    snprintf(extra, sizeof extra,
             "{\"ram\": {\"clean_target_bytes\": %s}, \"disk\": {\"enabled\": true, \"dir\": "
             "\"%s\", \"capacity_bytes\": \"%s\", \"segment_bytes\": \"%s\", "
             "\"write_buffer_bytes\": \"%s\", \"fsync\": \"none\"}}",
             clean_target, dir, capacity, segment, segment);
    o.extra_json = extra;
    return harness_start(&o);
}

static harness_t *start(const char *dir, const char *capacity, const char *segment,
                        uint64_t ram_bytes)
{
    return start_cleaning(dir, capacity, segment, ram_bytes, "0");
}

static int pred_state(json_t *st, void *arg)
{
    return strcmp(harness_jstr(st, "disk.state"), arg) == 0;
}

static json_t *wait_state(const harness_t *h, const char *state)
{
    json_t *st = harness_wait_status(h, pred_state, (void *)state, HARNESS_DEADLINE_MS);

    ck_assert_msg(st != NULL, "disk.state never became %s", state);
    return st;
}

/* Saves chains first..last, draining the write buffer after each when paced. */
static void save_chains(const harness_t *h, kvt_client_t *c, uint32_t first, uint32_t last,
                        int paced)
{
    harness_save_chains(h, c, first, last, PER, CH, paced);
}

/* Loads chains first..last (zero wrong bytes: harness_load_chain asserts it); returns the chunks
 * kept. */
static size_t load_chains(kvt_client_t *c, uint32_t first, uint32_t last)
{
    size_t kept = 0;

    for (uint32_t s = first; s <= last; s++)
        kept += harness_load_chain(c, s, PER, CH, 0);
    return kept;
}

/* Saves more chains (flushes succeed) and loads one from an intact segment (a read succeeds),
 * until the tier says ok again. */
static void recover_ok(const harness_t *h, kvt_client_t *c, uint32_t *next, uint32_t read_chain)
{
    json_t *st = NULL;

    for (int i = 0; i < 20 && st == NULL; i++) {
        save_chains(h, c, *next, *next, 1);
        (*next)++;
        harness_load_chain(c, read_chain, PER, CH, 0);
        st = harness_wait_status(h, pred_state, "ok", 200);
    }
    ck_assert_msg(st != NULL, "the tier never returned to ok");
    json_decref(st);
}

/* Stops the daemon (a clean shutdown) and starts a new one on the same directory. */
static void restart(harness_t **h, const char *dir, const char *capacity, const char *segment)
{
    harness_stop(h);
    *h = start(dir, capacity, segment, 4u << 20);
}

/* Loads chains 1..last from the (restarted) daemon: zero wrong bytes, and prints what was kept. */
static void report(const harness_t *h, uint32_t last, const char *what)
{
    kvt_client_t *c = harness_client(h, "faults", 1, 0, 0);
    size_t kept = load_chains(c, 1, last); /* asserts zero wrong bytes */
    json_t *st = harness_status(h);

    printf("%s: after restart %zu of %u chunks kept, 0 wrong bytes (recovery: %lld records, "
           "%lld checksum drops, %lld torn bytes, %lld bad headers)\n",
           what, kept, last * PER, (long long)harness_jint(st, "disk.recovery.records"),
           (long long)harness_jint(st, "disk.recovery.checksum_drops"),
           (long long)harness_jint(st, "disk.recovery.torn_bytes"),
           (long long)harness_jint(st, "disk.recovery.bad_headers"));
    json_decref(st);
    kvt_close(&c);
}

/* The end of a segment fault test (chains 1..8 saved, the oldest segment damaged): writes and
 * reads succeed again, so the tier is ok again (chain 4's records are in a later segment); then
 * a restart serves no wrong byte. */
static void segment_fault_end(harness_t **h, kvt_client_t **c, const char *dir, char **segs,
                              size_t n, const char *what)
{
    uint32_t next = 9;

    recover_ok(*h, *c, &next, 4);
    kvt_close(c);
    harness_free_paths(segs, n);
    restart(h, dir, "64MiB", "2MiB");
    report(*h, next - 1, what);
    harness_stop(h);
}

static int pred_segment_faults(json_t *st, void *arg)
{
    return harness_jint(st, "disk.segment_faults") >= *(int64_t *)arg;
}

/* A daemon on a fresh disk directory (*h, its client *c) that saved chains 1-8 (chains 1-4 only
 * on disk now), then the oldest of its segment files (segs[0] of the n returned, malloc'd paths)
 * cut to half its size under it. */
static size_t start_and_cut_oldest(char *dir, size_t len, harness_t **h, kvt_client_t **c,
                                   char **segs)
{
    struct stat sb;
    size_t n;

    make_dir(dir, len);
    *h = start(dir, "64MiB", "2MiB", 4u << 20);
    *c = harness_client(*h, "faults", 1, 0, 0);
    save_chains(*h, *c, 1, 8, 1);
    n = harness_segments(dir, segs, 64);
    ck_assert_uint_ge(n, 2);
    ck_assert_int_eq(stat(segs[0], &sb), 0);
    ck_assert_int_eq(truncate(segs[0], sb.st_size / 2), 0);
    return n;
}

START_TEST(test_truncated_segment)
{
    char dir[96], *segs[64];
    harness_t *h;
    kvt_client_t *c;
    size_t n, loaded;
    int64_t one = 1;
    json_t *st;

    n = start_and_cut_oldest(dir, sizeof dir, &h, &c, segs);

    loaded = harness_load_chain(c, 1, PER, CH, 0); /* misses, never other bytes */
    ck_assert_uint_lt(loaded, PER);
    st = harness_wait_status(h, pred_segment_faults, &one, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the truncated segment was never reported");
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "degraded");
    ck_assert_str_ne(harness_jstr(st, "disk.last_error"), "");
    printf("truncated segment: state degraded, last_error \"%s\" (%s), %zu of %u chunks of the "
           "chain loaded\n",
           harness_jstr(st, "disk.last_error"), harness_jstr(st, "disk.last_error_op"), loaded,
           PER);
    json_decref(st);
    segment_fault_end(&h, &c, dir, segs, n, "truncated segment");
}
END_TEST

/* A segment cut short while no load touches it (0.2.10): once the daemon's check finds it (an
 * fstat once a second), the records past the cut are forgotten (status disk.records_lost), so
 * that lookups stop reporting chunks whose loads could only fail: the chains of that segment
 * load every chunk a lookup reports, and no read fails on the way. */
START_TEST(test_truncated_segment_forgotten)
{
    char dir[96], *segs[64];
    harness_t *h;
    kvt_client_t *c;
    size_t n, hits = 0, loaded = 0;
    int64_t one = 1;
    json_t *st;

    n = start_and_cut_oldest(dir, sizeof dir, &h, &c, segs);
    st = harness_wait_status(h, pred_segment_faults, &one, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the truncated segment was never reported");
    ck_assert_int_gt(harness_jint(st, "disk.records_lost"), 0);
    json_decref(st);
    for (uint32_t s = 1; s <= 2; s++) { /* the chains of the oldest segment */
        size_t hit = harness_lookup_chain(c, s, PER), got = harness_load_chain(c, s, PER, CH, 0);
        ck_assert_uint_ge(got, hit); /* every chunk reported present loads */
        hits += hit;
        loaded += got;
    }
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_lt(loaded, 2 * PER);
    ck_assert_int_eq(harness_jint(st, "disk.read_errors"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.checksum_drops"), 0);
    printf("truncated segment, found by the check: %lld records forgotten; chains 1-2: %zu "
           "chunks reported present, %zu loaded, 0 failed reads\n",
           (long long)harness_jint(st, "disk.records_lost"), hits, loaded);
    json_decref(st);
    segment_fault_end(&h, &c, dir, segs, n, "truncated segment, found by the check");
}
END_TEST

START_TEST(test_deleted_segment)
{
    char dir[96], *segs[64];
    harness_t *h;
    kvt_client_t *c;
    size_t n;
    int64_t one = 1;
    json_t *st;

    make_dir(dir, sizeof dir);
    h = start(dir, "64MiB", "2MiB", 4u << 20);
    c = harness_client(h, "faults", 1, 0, 0);
    save_chains(h, c, 1, 8, 1);
    n = harness_segments(dir, segs, 64);
    ck_assert_uint_ge(n, 2);
    ck_assert_int_eq(unlink(segs[0]), 0);
    st = harness_wait_status(h, pred_segment_faults, &one, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the deleted segment was never reported");
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "degraded");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "segment");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error"), strerror(ENOENT));
    json_decref(st);
    /* still readable through the open descriptor until the restart */
    ck_assert_uint_eq(harness_load_chain(c, 1, PER, CH, 0), PER);
    segment_fault_end(&h, &c, dir, segs, n, "deleted segment");
}
END_TEST

START_TEST(test_enospc_restart)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;

    if (geteuid() != 0) {
        printf("test_enospc_restart: skipped (needs root to mount a tmpfs)\n");
        return;
    }
    make_dir(dir, sizeof dir);
    if (mount("kvt-faults", dir, "tmpfs", 0, "size=2m") != 0) {
        printf("test_enospc_restart: skipped (mount tmpfs: %s)\n", strerror(errno));
        return;
    }
    h = start(dir, "16MiB", "1MiB", 4u << 20);
    c = harness_client(h, "faults", 1, 0, 0);
    {
        /* another file takes most of the filesystem once the tier runs (from 0.2.14 the tier
         * sizes itself to the room it finds at start, and on an empty 2 MiB filesystem it would
         * reclaim its way through without an ENOSPC) */
        char ballast[160];
        static char zeros[64 << 10];
        FILE *f;
        snprintf(ballast, sizeof ballast, "%s/ballast", dir);
        ck_assert_ptr_nonnull(f = fopen(ballast, "w"));
        for (int i = 0; i < 24; i++) /* 1.5 MiB */
            ck_assert_uint_eq(fwrite(zeros, 1, sizeof zeros, f), sizeof zeros);
        ck_assert_int_eq(fclose(f), 0);
    }
    save_chains(h, c, 1, 10, 1); /* 10 MiB through 4 MiB of RAM onto what is left of 2 MiB */
    st = wait_state(h, "degraded");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error"), strerror(ENOSPC));
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "write");
    json_decref(st);
    kvt_close(&c);
    restart(&h, dir, "16MiB", "1MiB");
    report(h, 10, "ENOSPC");
    harness_stop(&h);
    ck_assert_int_eq(umount(dir), 0);
}
END_TEST

/* Sets or clears the immutable flag of dir (no new entries in it, even for root). 0 or -errno. */
static int set_immutable(const char *dir, int on)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), flags = 0, rc = 0;

    if (fd < 0)
        return -errno;
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) {
        rc = -errno;
    } else {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        if (ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0)
            rc = -errno;
    }
    close(fd);
    return rc;
}

START_TEST(test_unwritable_directory)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    uint32_t next = 5;
    json_t *st = NULL;
    int rc;

    make_dir(dir, sizeof dir);
    h = start(dir, "64MiB", "1MiB", 4u << 20);
    c = harness_client(h, "faults", 1, 0, 0);
    save_chains(h, c, 1, 4, 1);
    rc = set_immutable(dir, 1);
    if (rc != 0) {
        printf("test_unwritable_directory: skipped (immutable flag: %s)\n", strerror(-rc));
        kvt_close(&c);
        harness_stop(&h);
        return;
    }
    /* 1 MiB segments: the next flushes need new files, which the directory refuses */
    for (int i = 0; i < 16 && st == NULL; i++, next++) {
        ck_assert_uint_eq(harness_save_chain(c, next, PER, CH, 0), PER);
        st = harness_wait_status(h, pred_state, "degraded", 200);
    }
    ck_assert_int_eq(set_immutable(dir, 0), 0);
    ck_assert_msg(st != NULL, "a directory refusing new files never degraded the tier");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "write");
    printf("unwritable directory: state degraded, last_error \"%s\"\n",
           harness_jstr(st, "disk.last_error"));
    json_decref(st);
    st = NULL;
    for (int i = 0; i < 40 && st == NULL; i++, next++) {
        ck_assert_uint_eq(harness_save_chain(c, next, PER, CH, 0), PER);
        st = harness_wait_status(h, pred_state, "ok", 200);
    }
    ck_assert_msg(st != NULL, "the tier never resumed after the directory became writable");
    json_decref(st);
    kvt_close(&c);
    restart(&h, dir, "64MiB", "1MiB");
    report(h, next - 1, "unwritable directory");
    harness_stop(&h);
}
END_TEST

START_TEST(test_bit_flips_across_segments)
{
    enum { FLIPS = 64 };
    char dir[96], *segs[64];
    harness_t *h;
    kvt_client_t *c;
    uint64_t rng = 13;
    size_t n;
    int flipped = 0;

    make_dir(dir, sizeof dir);
    h = start(dir, "64MiB", "2MiB", 4u << 20);
    c = harness_client(h, "faults", 1, 0, 0);
    save_chains(h, c, 1, 12, 1);
    kvt_close(&c);
    harness_stop(&h); /* the persist writes what was only in RAM */
    n = harness_segments(dir, segs, 64);
    ck_assert_uint_ge(n, 3);
    for (int i = 0; i < FLIPS; i++) {
        const char *p = segs[harness_prng(&rng) % n];
        struct stat sb;
        uint8_t b;
        off_t off;
        int fd = open(p, O_RDWR);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &sb), 0);
        if (sb.st_size > 0) {
            off = (off_t)(harness_prng(&rng) % (uint64_t)sb.st_size);
            ck_assert_int_eq(pread(fd, &b, 1, off), 1);
            b ^= (uint8_t)(1u << (harness_prng(&rng) % 8));
            ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
            flipped++;
        }
        close(fd);
    }
    harness_free_paths(segs, n);
    h = start(dir, "64MiB", "2MiB", 4u << 20);
    report(h, 12, "bit flips");
    ck_assert_int_gt(flipped, FLIPS / 2);
    harness_stop(&h);
}
END_TEST

/* The bytes of dir's segment files. */
static uint64_t segment_bytes(const char *dir)
{
    char *segs[256];
    size_t n = harness_segments(dir, segs, 256);
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(segs[i], &sb) == 0)
            sum += (uint64_t)sb.st_size;
    }
    harness_free_paths(segs, n);
    return sum;
}

/* Whether the daemon's log holds text. */
static int log_has(const harness_t *h, const char *text)
{
    FILE *f = fopen(h->log_path, "r");
    char line[1024];
    int found = 0;

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

START_TEST(test_kill9_during_persist)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    int64_t t0;

    make_dir(dir, sizeof dir);
    /* 64 MiB of RAM: the 48 chains stay RAM-only until the shutdown persist writes them (the
     * cleaner would write ahead once half the RAM is dirty: a 1-byte target keeps it idle
     * until the RAM is all dirty) */
    h = start_cleaning(dir, "256MiB", "8MiB", 64u << 20, "1");
    c = harness_client(h, "faults", 1, 0, 0);
    save_chains(h, c, 1, 48, 0);
    kvt_close(&c);
    ck_assert_int_eq(harness_stat(h, "disk.records_written"), 0);
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    /* kill it once the persist has written a few segments (or finished, on a fast machine) */
    for (t0 = harness_now_ms(); segment_bytes(dir) < (16u << 20) && !log_has(h, "disk_persist");)
        ck_assert_msg(harness_now_ms() - t0 < 30000, "the persist wrote nothing");
    harness_kill9(h);
    printf("kill -9 during persist: %s\n",
           log_has(h, "event=disk_persist") ? "the persist had finished" : "mid-persist");
    harness_free(&h);
    h = start(dir, "256MiB", "8MiB", 4u << 20);
    report(h, 48, "kill -9 during persist");
    harness_stop(&h);
}
END_TEST

static int pred_segments_ok(json_t *st, void *arg)
{
    (void)arg;
    return strcmp(harness_jstr(st, "disk.state"), "ok") == 0 &&
           harness_jint(st, "disk.segments") > 0;
}

/* Symbolic links at segment names in disk.dir (the session-16 probe): the daemon followed them,
 * truncated the target of one found at the start as a torn segment, and truncated and overwrote
 * the target of one planted at the name of the next segment it created. Segment, lock, journal
 * and atomic-file opens are O_NOFOLLOW from 0.2.14: a link is a bad file at recovery and a failed
 * create while running, its target untouched, and the tier writes on under later names. */
START_TEST(test_symlinks_in_disk_dir)
{
    static const char precious[] = "precious: not a segment\n";
    char dir[96], victim[160], link[192], got[64] = "";
    harness_t *h;
    kvt_client_t *c;
    json_t *st = NULL;
    FILE *f;
    uint32_t seed;

    make_dir(dir, sizeof dir);
    snprintf(victim, sizeof victim, "%s/victim", check_scratch_dir());
    ck_assert_ptr_nonnull(f = fopen(victim, "w"));
    fputs(precious, f);
    fclose(f);
    snprintf(link, sizeof link, "%s/%016x.seg", dir, 0xffu);
    ck_assert_int_eq(symlink(victim, link), 0);
    h = start(dir, "16MiB", "1MiB", 4u << 20);
    ck_assert_int_eq(harness_log_count(h, "event=disk_recovery_bad_file"), 1);
    for (unsigned id = 0x100; id < 0x108; id++) { /* the next segments' names */
        snprintf(link, sizeof link, "%s/%016x.seg", dir, id);
        ck_assert_int_eq(symlink(victim, link), 0);
    }
    c = harness_client(h, "faults", 1, 0, 0);
    for (seed = 1; seed <= 40 && st == NULL; seed++) {
        save_chains(h, c, seed, seed, 0);
        st = harness_wait_status(h, pred_segments_ok, NULL, 250);
    }
    ck_assert_msg(st != NULL, "the tier never wrote a segment past the links");
    json_decref(st);
    ck_assert_ptr_nonnull(f = fopen(victim, "r"));
    ck_assert_ptr_nonnull(fgets(got, sizeof got, f));
    fclose(f);
    ck_assert_str_eq(got, precious);
    printf("links in disk.dir: the target kept its %zu bytes; %lld write errors, %lld segments\n",
           strlen(precious), (long long)harness_stat(h, "disk.write_errors"),
           (long long)harness_stat(h, "disk.segments"));
    kvt_close(&c);
    harness_stop(&h);
    unlink(victim);
}
END_TEST

static Suite *disk_faults_suite(void)
{
    Suite *su = suite_create("disk_faults");
    TCase *tc = tcase_create("faults");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_truncated_segment);
    tcase_add_test(tc, test_truncated_segment_forgotten);
    tcase_add_test(tc, test_deleted_segment);
    tcase_add_test(tc, test_enospc_restart);
    tcase_add_test(tc, test_unwritable_directory);
    tcase_add_test(tc, test_bit_flips_across_segments);
    tcase_add_test(tc, test_kill9_during_persist);
    tcase_add_test(tc, test_symlinks_in_disk_dir);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = disk_faults_suite, .scratch = "kvtdf"};
