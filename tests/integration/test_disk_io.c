/*
 * test_disk_io.c - a disk whose I/O fails or hangs under the running daemon (faultfs.c, preloaded
 * into the real kvtierd): reads that return EIO, writes and syncs that return EIO, one I/O in N
 * failing, and a disk that stops answering. test_disk_faults.c damages files; this damages calls.
 *
 * What must hold, in every test: the daemon keeps answering (saves, lookups, status) whatever the
 * disk does, saves never wait on it (a hung disk turns demotions into counted drops, never a held
 * save), a failed read is a miss (never an error for the request, never wrong bytes), a failed
 * write loses nothing that reported present, the fault reaches status, and once the disk heals the
 * tier is ok again and a restart on the same directory serves no wrong byte. The faults are
 * switched while the daemon runs through the preload's control file; its count file says that
 * they happened (a test whose fault never fired would prove nothing).
 *
 * Geometry as test_disk_faults: 4 MiB of RAM, 64 KiB chunks in chains of 16 (1 MiB per chain).
 */
#include "check_main.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define CH (64u * 1024u)
#define PER 16u

static char ctl[160]; /* the preload's control file: <disk dir>.ctl */

static void make_dir(char *buf, size_t len)
{
    snprintf(buf, len, "%s/disk-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(buf));
    snprintf(ctl, sizeof ctl, "%s.ctl", buf);
}

/* Replaces the control file's words (a new file renamed over the old: the preload sees a change).
 */
static void set_faults(const char *words)
{
    char tmp[200];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s.tmp", ctl);
    f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", words);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(rename(tmp, ctl), 0);
}

/* How many faults of kind ("reads", "writes", "syncs", "stalls") the preload injected so far. */
static long injected(const char *kind)
{
    char path[200], buf[200], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "%s.count", ctl);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strstr(buf, kind);
    return p != NULL ? strtol(p + strlen(kind), NULL, 10) : 0;
}

/* harness_start(o) with the faulty disk preloaded for dir. */
static harness_t *start_preloaded(harness_opts_t *o, const char *dir)
{
    char asan[512];
    const char *prev = getenv("ASAN_OPTIONS");
    harness_t *h;

    /* a sanitized daemon: its runtime must come first, unless told not to check */
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", prev != NULL ? prev : "",
             prev != NULL && prev[0] != '\0' ? ":" : "");
    ck_assert_int_eq(setenv("LD_PRELOAD", KVT_FAULTFS_PATH, 1), 0);
    ck_assert_int_eq(setenv("KVT_FAULTFS_DIR", dir, 1), 0);
    ck_assert_int_eq(setenv("KVT_FAULTFS_CTL", ctl, 1), 0);
    ck_assert_int_eq(setenv("ASAN_OPTIONS", asan, 1), 0);
    h = harness_start(o);
    unsetenv("LD_PRELOAD");
    unsetenv("KVT_FAULTFS_DIR");
    unsetenv("KVT_FAULTFS_CTL");
    if (prev != NULL)
        setenv("ASAN_OPTIONS", prev, 1);
    else
        unsetenv("ASAN_OPTIONS");
    return h;
}

/* A daemon on dir with the faulty disk preloaded (fsync: "none" or "record"; wbuf: the write
 * buffer; stall_ms: disk.read_stall_ms); disk_more: further members of "disk" ("" or ",
 * \"key\": value..."); more: further top-level members of the config ("" or ", \"ram\":
 * {...}"), and keep_arena for a file arena a test restarts on. */
static harness_t *start_disk_more(const char *dir, const char *fsync, const char *wbuf,
                                  unsigned stall_ms, const char *disk_more, const char *more,
                                  int keep_arena)
{
    static char extra[1024];
    harness_opts_t o = {
        .capacity_bytes = 4u << 20, .max_chunk_bytes = 256u << 10, .keep_arena = keep_arena};

    snprintf(extra, sizeof extra,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"64MiB\", "
             "\"segment_bytes\": \"2MiB\", \"write_buffer_bytes\": \"%s\", \"fsync\": \"%s\", "
             "\"read_stall_ms\": %u%s}%s}",
             dir, wbuf, fsync, stall_ms, disk_more, more);
    o.extra_json = extra;
    return start_preloaded(&o, dir);
}

static harness_t *start_more(const char *dir, const char *fsync, const char *wbuf,
                             unsigned stall_ms, const char *more, int keep_arena)
{
    return start_disk_more(dir, fsync, wbuf, stall_ms, "", more, keep_arena);
}

static harness_t *start_with(const char *dir, const char *fsync, const char *wbuf,
                             unsigned stall_ms)
{
    return start_more(dir, fsync, wbuf, stall_ms, "", 0);
}

static harness_t *start(const char *dir, const char *fsync)
{
    return start_with(dir, fsync, "2MiB", 2000);
}

static int pred_state(json_t *st, void *arg)
{
    return strcmp(harness_jstr(st, "disk.state"), arg) == 0;
}

static void save_chains(const harness_t *h, kvt_client_t *c, uint32_t first, uint32_t last,
                        int paced)
{
    harness_save_chains(h, c, first, last, PER, CH, paced);
}

/* The chunks of chain seed the daemon reports present (a lookup's hit prefix). */
static size_t present(kvt_client_t *c, uint32_t seed)
{
    return harness_lookup_chain(c, seed, PER);
}

/* Capacities hold: RAM and disk used within their bounds. */
static void assert_within_capacity(const harness_t *h)
{
    json_t *st = harness_status(h);

    ck_assert_ptr_nonnull(st);
    ck_assert_int_le(harness_jint(st, "ram.used_bytes"), harness_jint(st, "ram.capacity_bytes"));
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), harness_jint(st, "disk.capacity_bytes"));
    json_decref(st);
}

/* Heals the disk and brings the tier back to ok: flushes and a read must succeed (chain
 * read_chain is on disk); *next is the next chain to save. */
static void heal(const harness_t *h, kvt_client_t *c, uint32_t *next, uint32_t read_chain)
{
    json_t *st = NULL;

    set_faults("");
    for (int i = 0; i < 40 && st == NULL; i++) {
        save_chains(h, c, *next, *next, 1);
        (*next)++;
        harness_load_chain(c, read_chain, PER, CH, 0);
        st = harness_wait_status(h, pred_state, "ok", 200);
    }
    ck_assert_msg(st != NULL, "the tier never returned to ok once the disk healed");
    json_decref(st);
}

/* Stops the daemon, starts a healthy one on the same directory, loads chains 1..last: zero
 * wrong bytes, and chains keep[0]..keep[1] (when keep[0] > 0) whole; prints what was kept. */
static void restart_and_report(harness_t **h, const char *dir, uint32_t last,
                               const uint32_t keep[2], const char *what)
{
    kvt_client_t *c;
    size_t kept;

    set_faults("");
    harness_stop(h);
    *h = start(dir, "none");
    c = harness_client(*h, "diskio", 1, 0, 0);
    printf("%s: after restart, chunks kept per chain:", what);
    kept = 0;
    for (uint32_t s = 1; s <= last; s++) {
        size_t k = harness_load_chain(c, s, PER, CH, 0); /* asserts zero wrong bytes */
        printf(" %zu", k);
        if (keep[0] > 0 && s >= keep[0] && s <= keep[1])
            ck_assert_msg(k == PER, "%s: chain %u (intact on disk) lost %zu chunks", what, s,
                          PER - k);
        kept += k;
    }
    printf("; %zu of %u chunks kept, 0 wrong bytes\n", kept, last * PER);
    kvt_close(&c);
    harness_stop(h);
}

START_TEST(test_read_eio_is_a_miss)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    uint32_t next = 9;
    size_t got;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* 8 MiB through 4 MiB: chains 1-2 are on disk only */
    /* (no lookup before the fault: it would read chain 1 ahead, racing the fault) */
    set_faults("eio-read");
    /* SGLang's order: a lookup (which reads ahead what is on disk), then the load */
    ck_assert_uint_eq(present(c, 2), PER);
    got = harness_load_chain(c, 1, PER, CH, 0); /* rc 0 asserted: a failed read is a miss */
    ck_assert_uint_lt(got, PER);
    ck_assert_uint_lt(harness_load_chain(c, 2, PER, CH, 0), PER);
    ck_assert_int_gt(injected("reads"), 0);
    st = harness_wait_status(h, pred_state, "degraded", HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "failed reads never reached disk.state");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "read");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error"), strerror(EIO));
    ck_assert_int_gt(harness_jint(st, "disk.read_errors"), 0);
    json_decref(st);
    /* what failed is no longer reported present: no lookup promises a chunk no load can serve */
    ck_assert_uint_eq(present(c, 1), got);
    /* RAM keeps serving, saves keep being stored */
    ck_assert_uint_eq(harness_load_chain(c, 8, PER, CH, 0), PER);
    save_chains(h, c, next, next + 1, 0);
    next += 2;
    heal(h, c, &next, 4);
    assert_within_capacity(h);
    kvt_close(&c);
    /* the records were never damaged: a restart finds them, and serves them right */
    restart_and_report(&h, dir, next - 1, (const uint32_t[2]){3, next - 1}, "EIO on reads");
}
END_TEST

/* 0.2.4: one read fails once (a transient device error): the read is done again, the chain
 * loads whole, the chunk stays present, and the tier never degrades. Before the retry the chunk
 * was a miss and left the index. */
START_TEST(test_transient_read_error_is_retried)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-2 on disk only */
    set_faults("fail-reads=1");
    ck_assert_uint_eq(harness_load_chain(c, 1, PER, CH, 0), PER); /* byte-exact, all of it */
    ck_assert_int_eq(injected("reads"), 1);
    st = harness_status(h);
    ck_assert_int_eq(harness_jint(st, "disk.read_retries"), 1);
    ck_assert_int_eq(harness_jint(st, "disk.read_errors"), 0);
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "ok");
    json_decref(st);
    set_faults("");
    ck_assert_uint_eq(present(c, 1), PER); /* nothing left the index */
    ck_assert_uint_eq(harness_load_chain(c, 2, PER, CH, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* 0.2.4: a stop while the disk hangs. The persist's writes and the flush in flight never
 * return, so the stop cannot finish; after server.stop_timeout_ms the daemon exits (status 1,
 * log "stop_timeout_ms ... action=exit") instead of waiting for systemd's SIGKILL. Nothing is
 * lost that a crash would keep: the next start re-attaches the file arena, so every chain that
 * was present before the stop is present and byte-exact after it. */
START_TEST(test_stop_with_a_hung_disk)
{
    char dir[96], more[640], arena[160], want[200];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    size_t before[13];
    int64_t t0;
    int wst = 0;
    pid_t got = 0;

    make_dir(dir, sizeof dir);
    snprintf(arena, sizeof arena, "/dev/shm/kvt-hung-stop-%d.arena", (int)getpid());
    /* The journal at its default place (0.2.6: beside the arena on its tmpfs, not in the disk's
     * directory; README, "A disk that hangs"): its appends are the loop's own write(2), which
     * faultfs stalls too, and with the default of 0.2.5 (<disk.dir>/<arena>.journal) the first
     * save after the stall blocked the loop until the disk answered. */
    snprintf(more, sizeof more,
             ", \"ram\": {\"arena_path\": \"%s\"}, \"server\": {\"stop_timeout_ms\": 2000}", arena);
    snprintf(want, sizeof want, "%s.d/journal", arena);
    set_faults("");
    h = start_more(dir, "none", "2MiB", 2000, more, 1);
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(st, "ram"), "journal_path")),
                     want);
    json_decref(st);
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only, 5-8 in RAM (clean) */
    set_faults("stall");
    t0 = harness_now_ms();
    save_chains(h, c, 9, 12, 0); /* RAM-only chains: their flush hangs, the saves do not */
    for (uint32_t s = 1; s <= 12; s++)
        before[s] = present(c, s);
    ck_assert_uint_eq(before[12], PER);
    st = harness_status(h); /* the loop answers while the disk hangs */
    ck_assert_ptr_nonnull(st);
    json_decref(st);
    printf("hung disk: chains 9-12 saved, looked up and status read in %lld ms\n",
           (long long)(harness_now_ms() - t0));
    ck_assert_int_ge(injected("stalls "), 1);
    kvt_close(&c);
    t0 = harness_now_ms();
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    while (harness_now_ms() - t0 < 15000 && (got = waitpid(h->pid, &wst, WNOHANG)) == 0)
        usleep(20 * 1000);
    ck_assert_msg(got == h->pid, "the stop with a hung disk did not end within 15 s");
    ck_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 1);
    printf("hung disk at stop: exited 1 after %lld ms (stop_timeout_ms 2000)\n",
           (long long)(harness_now_ms() - t0));
    h->pid = 0;
    ck_assert_int_ge(harness_log_count(h, "stop_timeout_ms=2000 action=exit"), 1);
    set_faults(""); /* the disk answers again (the next start does not preload it anyway) */
    harness_restart(h);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t s = 1; s <= 12; s++)
        ck_assert_uint_eq(present(c, s), before[s]);
    /* the chains that were RAM-only are written now that the disk answers (the cleaner starts
     * with the re-attach: before 0.2.4 it waited for the first save, and the loads' promotions
     * below dropped three of those chains); then every chain loads, byte-exact */
    harness_wait_disk_drained(h);
    for (uint32_t s = 1; s <= 12; s++) /* byte-exact */
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), before[s]);
    ck_assert_uint_eq(before[12], PER);
    kvt_close(&c);
    harness_stop(&h);
    check_unlink_arena(arena);
}
END_TEST

/* An operator's drop while the disk hangs (0.2.6): its tombstone file is written on the thread
 * pool, so the loop keeps serving (status, a save of another namespace) while the drop's answer
 * waits for the file; once the disk answers, the drop is answered "tombstone": "written", and a
 * SIGKILL then does not bring the dropped disk copies back. */
START_TEST(test_drop_with_a_hung_disk)
{
    char dir[96], more[320], arena[160];
    harness_t *h;
    kvt_client_t *c, *o;
    json_t *st;
    pid_t child;
    int64_t t0;
    int wst = 0;

    make_dir(dir, sizeof dir);
    snprintf(arena, sizeof arena, "/dev/shm/kvt-hung-drop-%d.arena", (int)getpid());
    snprintf(more, sizeof more, ", \"ram\": {\"arena_path\": \"%s\"}", arena);
    set_faults("");
    h = start_more(dir, "none", "2MiB", 2000, more, 1);
    c = harness_client(h, "diskio", 1, 0, 0);
    o = harness_client(h, "other", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only */
    ck_assert_uint_eq(present(c, 1), PER);
    set_faults("stall");
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) { /* the operator: its answer waits for the disk */
        char *body = NULL;
        int code = 0, ok;
        ok = harness_http(h->status_path, "POST", "/admin/drop?ns=diskio", &code, NULL, 0, &body) ==
                 0 &&
             code == 200 && body != NULL && strstr(body, "\"tombstone\":\"written\"") != NULL;
        _exit(ok ? 0 : 1);
    }
    t0 = harness_now_ms();
    while (present(c, 1) != 0 && harness_now_ms() - t0 < 5000) /* the drop happened */
        usleep(10 * 1000);
    ck_assert_uint_eq(present(c, 1), 0);
    ck_assert_int_eq(waitpid(child, &wst, WNOHANG), 0); /* its answer still waits */
    st = harness_status(h);                             /* the loop answers meanwhile */
    ck_assert_ptr_nonnull(st);
    json_decref(st);
    ck_assert_uint_eq(harness_save_chain(o, 20, PER, CH, 0), PER);
    printf("drop on a hung disk: dropped, status and a save served in %lld ms, the answer held\n",
           (long long)(harness_now_ms() - t0));
    set_faults(""); /* the disk answers: the tombstone is written, the drop answered */
    ck_assert_int_eq(waitpid(child, &wst, 0), child);
    ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
                  "the drop was not answered 200 with its tombstone written");
    kvt_close(&c);
    kvt_close(&o);
    harness_kill9(h);
    harness_restart(h);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t s = 1; s <= 8; s++)
        ck_assert_uint_eq(present(c, s), 0);
    kvt_close(&c);
    harness_stop(&h);
    check_unlink_arena(arena);
}
END_TEST

/* Writes (or syncs) fail: the tier degrades, saves are still stored in RAM, nothing reported
 * present is lost, and the writes resume once the disk heals. */
static void write_faults(const char *words, const char *fsync, const char *kind)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st = NULL;
    uint32_t next = 9;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, fsync);
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only, 5-8 in RAM */
    set_faults(words);
    for (int i = 0; i < 16 && st == NULL; i++, next++) {
        ck_assert_uint_eq(harness_save_chain(c, next, PER, CH, 0), PER);
        st = harness_wait_status(h, pred_state, "degraded", 200);
    }
    ck_assert_msg(st != NULL, "failing %s never degraded the tier", kind);
    ck_assert_int_gt(injected(kind), 0);
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "write");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error"), strerror(EIO));
    ck_assert_int_gt(harness_jint(st, "disk.write_errors"), 0);
    json_decref(st);
    /* a save burst into the degraded tier: every save stored */
    save_chains(h, c, next, next + 7, 0);
    next += 8;
    /* everything reported present loads right (nothing was lost for a write that failed) */
    for (uint32_t s = 1; s < next; s++) {
        size_t p = present(c, s);
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), p);
    }
    ck_assert_uint_eq(present(c, next - 1), PER);
    heal(h, c, &next, 1);
    assert_within_capacity(h);
    kvt_close(&c);
    restart_and_report(&h, dir, next - 1, (const uint32_t[2]){1, 4}, kind);
}

START_TEST(test_write_eio_degrades_and_resumes)
{
    write_faults("eio-write", "none", "writes");
}
END_TEST

START_TEST(test_sync_eio_fails_the_batch)
{
    write_faults("eio-sync", "record", "syncs");
}
END_TEST

/* One I/O in 5 fails while one client saves and another loads older chains: every load is
 * right or a miss, every save is stored, and the daemon keeps serving. */
START_TEST(test_flaky_disk_serves_no_wrong_byte)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c, *r;
    uint64_t rng = 7;
    size_t hits = 0, tried = 0;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    r = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 6, 1);
    set_faults("flaky=5");
    for (uint32_t s = 7; s <= 30; s++) {
        uint32_t old = 1 + (uint32_t)(harness_prng(&rng) % (s - 1));
        ck_assert_uint_eq(harness_save_chain(c, s, PER, CH, 0), PER);
        present(r, old); /* reads ahead */
        hits += harness_load_chain(r, old, PER, CH, 0);
        tried += PER;
    }
    ck_assert_int_gt(injected("reads") + injected("writes"), 0);
    printf("flaky disk: %ld reads and %ld writes failed; %zu of %zu chunks loaded, 0 wrong bytes\n",
           injected("reads"), injected("writes"), hits, tried);
    set_faults("");
    assert_within_capacity(h);
    kvt_close(&r);
    kvt_close(&c);
    restart_and_report(&h, dir, 30, (const uint32_t[2]){0, 0}, "flaky disk");
}
END_TEST

/* disk.flush_running_seconds (asserted present) */
static double flush_running(json_t *st)
{
    json_t *v = json_object_get(json_object_get(st, "disk"), "flush_running_seconds");

    ck_assert_msg(json_is_number(v), "disk.flush_running_seconds is missing");
    return json_number_value(v);
}

/* The disk stops answering (every read, write and sync blocks, as a dead device or a hung
 * network filesystem does): saves of three times the RAM are all stored meanwhile (demotions
 * become counted drops; the hung flush holds only its write buffer), lookups and status are
 * answered, and a load waiting on a hung read is answered once the reads are stalled
 * (disk.read_stall_ms): its unread chunks are misses, and later loads of disk-only chunks miss at
 * once instead of queueing behind the hung reads. Once the disk answers again, the stall ends,
 * reads serve loads again, and everything reported present loads right. */
static int pred_stalled(json_t *st, void *arg)
{
    json_t *v = json_object_get(json_object_get(st, "disk"), "read_stalled");

    return json_is_boolean(v) && json_is_true(v) == *(int *)arg;
}

START_TEST(test_hung_disk_spares_saves)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c, *r;
    kvt_hash_t hs[PER];
    void *bufs[PER];
    size_t caps[PER];
    kvt_handle_t hd;
    kvt_completion_t *done;
    json_t *st;
    uint32_t next = 21;
    int64_t refused0, misses0;
    int yes = 1, no = 0;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start_with(dir, "none", "1MiB", 300);
    c = harness_client(h, "diskio", 1, 0, 0);
    r = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only */
    ck_assert_uint_eq(present(c, 3), PER);
    refused0 = harness_stat(h, "disk.demotions_refused");
    set_faults("stall");
    /* a load of a disk-only chain: its reads hang */
    harness_chain(1, hs, PER);
    for (size_t i = 0; i < PER; i++) {
        bufs[i] = malloc(CH);
        caps[i] = CH;
    }
    ck_assert_int_eq(kvt_submit_load(r, hs, PER, bufs, caps, NULL, &hd), 0);
    /* 12 MiB of saves through 4 MiB of RAM while the disk is hung: every one stored */
    save_chains(h, c, 9, 20, 0);
    ck_assert_int_gt(injected("stalls"), 0); /* the disk did hang */
    ck_assert_uint_eq(present(c, 20), PER);
    ck_assert_uint_eq(harness_load_chain(c, 20, PER, CH, 0), PER);
    /* the load waiting on the hung reads is answered while the disk is still hung */
    done = harness_next_completion(r, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(done);
    ck_assert_msg(done->status == 0, "load: %s", kvt_strerror(done->status));
    ck_assert_uint_lt(done->nhit, PER);
    kvt_completion_free(r, done);
    st = harness_wait_status(h, pred_stalled, &yes, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "disk.read_stalled never became true");
    ck_assert_int_ge(harness_jint(st, "disk.read_stalls"), 1);
    ck_assert_int_gt(harness_jint(st, "disk.stall_misses"), 0);
    ck_assert_int_gt(harness_jint(st, "disk.demotions_refused"), refused0);
    ck_assert_int_le(harness_jint(st, "ram.used_bytes"), harness_jint(st, "ram.capacity_bytes"));
    /* the hung flush shows: it has been running since the saves began */
    ck_assert(flush_running(st) > 0.1);
    misses0 = harness_jint(st, "disk.stall_misses");
    printf("hung disk: 192 chunks saved and stored, %lld demotions refused, %lld reads in "
           "flight; the waiting load answered with misses\n",
           (long long)(harness_jint(st, "disk.demotions_refused") - refused0),
           (long long)harness_jint(st, "disk.reads_in_flight"));
    json_decref(st);
    /* a load of another disk-only chain meanwhile: misses at once (it cannot wait for a read
     * that would only queue behind the hung ones) */
    ck_assert_uint_eq(harness_load_chain(r, 3, PER, CH, 0), 0);
    ck_assert_int_ge(harness_stat(h, "disk.stall_misses"), misses0 + 1);
    set_faults("");
    st = harness_wait_status(h, pred_stalled, &no, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the stall never ended once the disk answered");
    json_decref(st);
    harness_wait_disk_drained(h);
    st = harness_status(h);
    ck_assert(flush_running(st) < 0.1);
    json_decref(st);
    ck_assert_uint_eq(harness_load_chain(r, 3, PER, CH, 0), PER); /* reads serve loads again */
    for (size_t i = 0; i < PER; i++)
        free(bufs[i]);
    heal(h, c, &next, 2);
    for (uint32_t s = 1; s < next; s++) {
        size_t p = present(c, s);
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), p);
    }
    assert_within_capacity(h);
    kvt_close(&r);
    kvt_close(&c);
    restart_and_report(&h, dir, next - 1, (const uint32_t[2]){2, 4}, "hung disk");
}
END_TEST

/* One stuck read holds nobody else (0.2.8): with the I/O gate (disk.read_io_bytes 4 KiB, so
 * every read goes alone), the reads of one segment file hang (a bad sector's retries) while a
 * load of a chain in other segments must still be served whole: a read in I/O for longer than
 * the gate's DISK_IO_GATE_MS no longer holds the reads behind it. Without that, every read
 * behind the stuck one waited at the gate, none finished, and after disk.read_stall_ms every
 * load missed. */
START_TEST(test_one_stuck_read_holds_nobody)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c, *r;
    kvt_hash_t hs[PER];
    void *buf = malloc(CH);
    size_t cap = CH;
    kvt_handle_t hd;
    kvt_completion_t *done;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start_disk_more(dir, "none", "2MiB", 2000, ", \"read_io_bytes\": \"4KiB\"", "", 0);
    c = harness_client(h, "diskio", 1, 0, 0);
    r = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only, chain 1 in the first segment */
    ck_assert_uint_eq(present(c, 4), PER);
    set_faults("stall-read=0000000000000001.seg");
    harness_chain(1, hs, PER);
    ck_assert_int_eq(kvt_submit_load(r, hs, 1, &buf, &cap, NULL, &hd), 0);
    for (int i = 0; i < 1000 && injected("stalls") == 0; i++)
        usleep(2000);
    ck_assert_int_gt(injected("stalls"), 0);                      /* the read of chain 1 is stuck */
    ck_assert_uint_eq(harness_load_chain(c, 4, PER, CH, 0), PER); /* byte-exact, asserted */
    ck_assert_int_eq(harness_stat(h, "disk.read_stalls"), 0);
    set_faults("");
    done = harness_next_completion(r, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(done);
    ck_assert_int_eq(done->status, 0);
    ck_assert_uint_eq(done->nhit, 1);
    ck_assert(harness_check_fill(buf, CH, 0, (uint64_t)1 << 32)); /* chain 1, chunk 0 */
    kvt_completion_free(r, done);
    free(buf);
    kvt_close(&r);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static int pred_flush_stuck(json_t *st, void *arg)
{
    (void)arg;
    return harness_jnum(st, "disk.flush_running_seconds") >= 0.2;
}

static int pred_seals(json_t *st, void *arg)
{
    return harness_jint(st, "disk.seal_syncs") >= *(const int64_t *)arg;
}

/* A seal's fsync that hangs (a device slow to flush its cache), with fsync "segment": the flush
 * after the roll does it before it writes, so the flush shows as running
 * (flush_running_seconds) and no seal is counted yet; saves are still stored (RAM absorbs them,
 * what cannot be demoted is refused). Once the disk answers the seal is counted with its time
 * (seal_sync_seconds, not in write_seconds), nothing failed, and every chunk reported present
 * loads right. */
START_TEST(test_slow_seal_shows)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t one = 1;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "segment");
    c = harness_client(h, "diskio", 1, 0, 0);
    set_faults("stall-sync");
    save_chains(h, c, 1, 8, 0); /* 8 MiB through 4 MiB of RAM: chains 1-4 demote */
    st = harness_wait_status(h, pred_flush_stuck, NULL, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "no flush held by the hanging seal");
    ck_assert_int_gt(injected("stalls"), 0);
    ck_assert_int_eq(harness_jint(st, "disk.seal_syncs"), 0);
    json_decref(st);
    set_faults("");
    st = harness_wait_status(h, pred_seals, &one, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the seal never completed once the disk answered");
    ck_assert_int_eq(harness_jint(st, "disk.seal_sync_errors"), 0);
    ck_assert(harness_jnum(st, "disk.seal_sync_seconds") >= 0.2);
    json_decref(st);
    for (uint32_t s = 1; s <= 8; s++)
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), present(c, s));
    assert_within_capacity(h);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

static int pred_seal_failed(json_t *st, void *arg)
{
    (void)arg;
    return harness_jint(st, "disk.seal_sync_errors") >= 1;
}

/* A seal's fsync that fails is counted and logged, and degrades the tier (0.2.10: status
 * last_error_op "sync") without refusing anything: the tier keeps writing and serving, the
 * sealed segment's records read back byte-exact. Once the disk heals, the tier is ok again only
 * after a later seal's fsync succeeded (a read and a flush alone do not clear it). */
START_TEST(test_seal_eio_is_counted)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    int64_t seals;
    uint32_t next = 9;
    json_t *st;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "segment");
    c = harness_client(h, "diskio", 1, 0, 0);
    set_faults("eio-sync");
    save_chains(h, c, 1, 8, 1);
    st = harness_wait_status(h, pred_seal_failed, NULL, HARNESS_DEADLINE_MS);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_gt(injected("syncs"), 0);
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "degraded");
    ck_assert_str_eq(harness_jstr(st, "disk.last_error_op"), "sync");
    ck_assert_int_eq(harness_jint(st, "disk.demotions_refused"), 0);
    json_decref(st);
    set_faults("");
    for (uint32_t s = 1; s <= 4; s++) /* on disk only by now, read back byte-exact */
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), PER);
    /* a read and a flush succeeded since, but no sync yet: still degraded */
    save_chains(h, c, next, next, 1);
    next++;
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    seals = harness_jint(st, "disk.seal_syncs");
    if (harness_jint(st, "disk.seal_sync_errors") == seals) /* no seal succeeded yet */
        ck_assert_str_eq(harness_jstr(st, "disk.state"), "degraded");
    json_decref(st);
    heal(h, c, &next, 1);
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_gt(harness_jint(st, "disk.seal_syncs"),
                     harness_jint(st, "disk.seal_sync_errors"));
    json_decref(st);
    assert_within_capacity(h);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* A slow disk is not a hung one: every read takes 80 ms (eight at a time) and a load of four
 * disk-only chains (64 reads, about 640 ms in all) gets every chunk, although it waits longer
 * than disk.read_stall_ms (400 ms): reads keep finishing, so the reads never count as stalled. */
START_TEST(test_slow_disk_is_not_a_stall)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t hs[4 * PER];
    void *bufs[4 * PER];
    size_t caps[4 * PER], nhit = 0;
    json_t *st;
    double rs;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start_with(dir, "none", "2MiB", 400);
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1); /* chains 1-4 on disk only */
    set_faults("delay=80");
    /* the four chains as four loads in flight at once */
    for (uint32_t k = 0; k < 4; k++)
        harness_chain(k + 1, &hs[k * PER], PER);
    for (size_t i = 0; i < 4 * PER; i++) {
        bufs[i] = malloc(CH);
        caps[i] = CH;
    }
    for (uint32_t k = 0; k < 4; k++) {
        kvt_handle_t hd;
        ck_assert_int_eq(
            kvt_submit_load(c, &hs[k * PER], PER, &bufs[k * PER], &caps[k * PER], NULL, &hd), 0);
    }
    for (uint32_t k = 0; k < 4; k++) {
        kvt_completion_t *done = harness_next_completion(c, HARNESS_DEADLINE_MS);
        ck_assert_ptr_nonnull(done);
        ck_assert_int_eq(done->status, 0);
        ck_assert_uint_eq(done->nhit, PER);
        nhit += done->nhit;
        kvt_completion_free(c, done);
    }
    ck_assert_uint_eq(nhit, 4 * PER);
    for (uint32_t k = 0; k < 4; k++)
        for (size_t i = 0; i < PER; i++)
            ck_assert(harness_check_fill(bufs[k * PER + i], CH, 0, (uint64_t)(k + 1) << 32 | i));
    ck_assert_int_eq(harness_stat(h, "disk.read_stalls"), 0);
    ck_assert_int_eq(harness_stat(h, "disk.stall_misses"), 0);
    /* the delay did apply: the reads spent seconds in their system calls (without it, ~0.1) */
    st = harness_status(h);
    rs = json_number_value(json_object_get(json_object_get(st, "disk"), "read_seconds"));
    printf("slow disk: 64 chunks loaded through reads of 80 ms: %.2f s in reads, no stall\n", rs);
    ck_assert(rs > 2.0);
    json_decref(st);
    for (size_t i = 0; i < 4 * PER; i++)
        free(bufs[i]);
    set_faults("");
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* The stop writes the chunks that are only in RAM; the first write of that persist fails: the
 * persist waits for the tier's retry and writes them again, so the restart finds every one (before
 * 0.2.3 the persist ended with its last append, and a failure of its last flush lost them). */
START_TEST(test_persist_retries_a_failed_flush)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;

    make_dir(dir, sizeof dir);
    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 1, 1); /* 1 MiB of 4: within the clean target, nothing is written */
    ck_assert_int_eq(harness_stat(h, "disk.records_written"), 0);
    kvt_close(&c);
    set_faults("fail-writes=1");
    harness_stop(&h); /* the persist: its first flush fails, the retry succeeds */
    ck_assert_int_eq(injected("writes"), 1);
    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(c, 1, PER, CH, 0), PER); /* zero wrong bytes, too */
    printf("persist after a failed flush: %u of %u chunks kept after the restart\n", PER, PER);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* A flush fails, the disk heals, and no save comes after: the cleaner must go on by itself once
 * the tier's retry time has passed (the probe flush), so the tier returns to ok and the dirty
 * RAM beyond the clean target reaches the disk. Before, the cleaner stopped at the refused
 * append and only the next save restarted it: the tier stayed degraded with all of RAM dirty,
 * and that next save dropped a dirty chunk that reported present (demotions_refused). */
START_TEST(test_cleaner_resumes_after_a_failed_flush)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st = NULL;
    uint32_t next = 1;
    int64_t dirty, cap, target;

    make_dir(dir, sizeof dir);
    set_faults("eio-write");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    for (int i = 0; i < 16 && st == NULL; i++, next++) {
        ck_assert_uint_eq(harness_save_chain(c, next, PER, CH, 0), PER);
        st = harness_wait_status(h, pred_state, "degraded", 200);
    }
    ck_assert_msg(st != NULL, "failing writes never degraded the tier");
    ck_assert_int_gt(injected("writes"), 0);
    json_decref(st);
    set_faults(""); /* healed; from here on no request but status */
    st = harness_wait_status(h, pred_state, "ok", 5000);
    ck_assert_msg(st != NULL, "the tier stayed degraded after the disk healed (no save came)");
    json_decref(st);
    st = harness_status(h);
    ck_assert_ptr_nonnull(st);
    dirty = harness_jint(st, "ram.dirty_bytes");
    cap = harness_jint(st, "ram.capacity_bytes");
    target = harness_jint(st, "ram.clean_target_bytes");
    json_decref(st);
    ck_assert_int_le(dirty, cap - target + (int64_t)CH);
    printf("cleaner after a failed flush: tier ok again, dirty %lld of %lld bytes, no save\n",
           (long long)dirty, (long long)cap);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* A filesystem that fills before disk.capacity_bytes (0.2.7; the preload's full=: 12 MiB under a
 * 64 MiB capacity): the flush that gets ENOSPC lowers the capacity in force to what the tier
 * holds, the next flush reclaims the oldest segment for its room, and the tier keeps writing
 * instead of staying degraded for as long as the filesystem is full of its own segments; once
 * the filesystem has room again, a flush raises the capacity back to the configured one. */
START_TEST(test_full_filesystem_reclaims)
{
    char dir[96], words[64];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    const int64_t fs = 12 << 20;
    int64_t errors, refused;
    uint32_t seed, first;
    size_t got = 0;

    make_dir(dir, sizeof dir);
    snprintf(words, sizeof words, "full=%lld", (long long)fs);
    h = start(dir, "none");
    set_faults(words); /* filling once the tier runs: at open it would start lowered */
    c = harness_client(h, "diskio", 1, 0, 0);
    /* until the filesystem fills (12 MiB of segments and the tier's other files) */
    for (seed = 1; harness_stat(h, "disk.write_errors") == 0; seed++) {
        ck_assert_uint_le(seed, 40);
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    ck_assert_int_gt(injected("writes"), 0);
    st = harness_wait_status(h, pred_state, "ok", 5000);
    ck_assert_msg(st != NULL, "the tier stayed degraded on a full filesystem");
    json_decref(st);
    errors = harness_stat(h, "disk.write_errors");
    refused = harness_stat(h, "disk.demotions_refused");
    first = seed;
    for (; seed < first + 24; seed++) { /* 24 MiB more: every flush now reclaims for its room */
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    st = harness_status(h);
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "ok");
    ck_assert_int_eq(harness_jint(st, "disk.write_errors"), errors); /* no ENOSPC again */
    ck_assert_int_le(harness_jint(st, "disk.capacity_bytes"), fs);
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), fs);
    ck_assert_int_gt(harness_jint(st, "disk.reclaimed_segments"), 0);
    printf("full filesystem: capacity lowered to %lld of %lld, demotions refused %lld while "
           "degraded, %lld after\n",
           (long long)harness_jint(st, "disk.capacity_bytes"), 64ll << 20, (long long)refused,
           (long long)(harness_jint(st, "disk.demotions_refused") - refused));
    json_decref(st);
    for (uint32_t k = seed - 8; k < seed - 4; k++) /* on disk only by now: byte-exact */
        got += harness_load_chain(c, k, PER, CH, 0);
    ck_assert_uint_eq(got, 4 * PER);
    set_faults(""); /* room again: the next flushes raise the capacity */
    for (first = seed; seed < first + 4; seed++) {
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    ck_assert_int_eq(harness_stat(h, "disk.capacity_bytes"), 64 << 20);
    ck_assert_int_ge(harness_log_count(h, "event=disk_capacity"), 2);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Small filesystems (0.2.14, the session-15 fault probe). (1) One of 5 MiB filling while the
 * tier runs (2 MiB segments and batches): smaller than the old floor of two segments and a batch,
 * so the capacity could not be lowered to what the tier held and no flush ever reclaimed: the
 * tier stayed degraded for good. Now ENOSPC lowers it to what it holds, reclaims, and writes on.
 * (2) One with less room than disk.capacity_bytes at open: the tier starts lowered and never
 * meets ENOSPC. (3) One that cannot hold a segment and a batch: said at start (disk_too_small),
 * and the daemon serves from RAM while the flushes fail. */
START_TEST(test_small_filesystems)
{
    char dir[96];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t errors;
    uint32_t seed;

    make_dir(dir, sizeof dir);
    h = start(dir, "none");
    set_faults("full=5242880");
    c = harness_client(h, "diskio", 1, 0, 0);
    for (seed = 1; harness_stat(h, "disk.write_errors") == 0; seed++) {
        ck_assert_uint_le(seed, 40);
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    st = harness_wait_status(h, pred_state, "ok", 5000);
    ck_assert_msg(st != NULL, "the tier stayed degraded on a 5 MiB filesystem");
    json_decref(st);
    errors = harness_stat(h, "disk.write_errors");
    for (uint32_t first = seed; seed < first + 12; seed++) {
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    st = harness_status(h);
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "ok");
    ck_assert_int_eq(harness_jint(st, "disk.write_errors"), errors);
    ck_assert_int_gt(harness_jint(st, "disk.reclaimed_segments"), 0);
    ck_assert_int_le(harness_jint(st, "disk.used_bytes"), 5 << 20);
    json_decref(st);
    ck_assert_uint_eq(harness_load_chain(c, seed - 2, PER, CH, 0), PER);
    kvt_close(&c);
    harness_stop(&h);

    /* (2) 12 MiB at open under a 64 MiB capacity */
    make_dir(dir, sizeof dir);
    set_faults("full=12582912");
    h = start(dir, "none");
    ck_assert_int_le(harness_stat(h, "disk.capacity_bytes"), 12 << 20);
    ck_assert_int_eq(harness_log_count(h, "less room on the filesystem"), 1);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (seed = 1; seed <= 24; seed++) {
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    st = harness_status(h);
    ck_assert_str_eq(harness_jstr(st, "disk.state"), "ok");
    ck_assert_int_eq(harness_jint(st, "disk.write_errors"), 0);
    ck_assert_int_gt(harness_jint(st, "disk.reclaimed_segments"), 0);
    json_decref(st);
    kvt_close(&c);
    harness_stop(&h);

    /* (3) 3 MiB: less than a 2 MiB segment and a 2 MiB batch: said at start; the flushes that
     * do not fit fail and the tier degrades, RAM serving on (test_enospc_degrades_and_resumes:
     * and resumes once the filesystem grows) */
    make_dir(dir, sizeof dir);
    set_faults("full=3145728");
    h = start(dir, "none");
    ck_assert_int_eq(harness_log_count(h, "event=disk_too_small"), 1);
    c = harness_client(h, "diskio", 1, 0, 0);
    st = NULL;
    for (seed = 1; seed <= 12 && st == NULL; seed++) {
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        st = harness_wait_status(h, pred_state, "degraded", 300);
    }
    ck_assert_msg(st != NULL, "3 MiB under 2 MiB segments and batches never degraded");
    json_decref(st);
    ck_assert_uint_eq(harness_load_chain(c, seed - 1, PER, CH, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
    set_faults("");
}
END_TEST

/* A full filesystem smaller than the cleaner's target (the review of 0.2.7): 16 MiB of RAM
 * (target 8 MiB) over a 64 MiB capacity on an 8 MiB filesystem. Once ENOSPC lowered the
 * capacity, a target bounded only by the configured capacity made the cleaner rewrite the chunks
 * its own writes reclaimed, without a save: 13,681 records in 3 idle seconds. The target in force
 * follows the capacity in force. */
START_TEST(test_full_filesystem_no_churn)
{
    char dir[96], extra[512];
    harness_opts_t o = {.capacity_bytes = 16u << 20, .max_chunk_bytes = 256u << 10};
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t before, after;

    make_dir(dir, sizeof dir);
    snprintf(extra, sizeof extra,
             "{\"disk\": {\"enabled\": true, \"dir\": \"%s\", \"capacity_bytes\": \"64MiB\", "
             "\"segment_bytes\": \"1MiB\", \"write_buffer_bytes\": \"1MiB\", \"fsync\": "
             "\"none\"}}",
             dir);
    o.extra_json = extra;
    h = start_preloaded(&o, dir);
    set_faults("full=8388608"); /* once the tier runs: at open it would start lowered */
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t seed = 1; seed <= 24; seed++) { /* 24 MiB through 16 MiB of RAM */
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, CH, 0), PER);
        harness_wait_disk_drained(h);
    }
    ck_assert_int_gt(harness_stat(h, "disk.write_errors"), 0);
    ck_assert_int_le(harness_stat(h, "disk.capacity_bytes"), 8 << 20);
    st = harness_wait_status(h, pred_state, "ok", 5000);
    ck_assert_msg(st != NULL, "the tier stayed degraded on a full filesystem");
    json_decref(st);
    before = harness_stat(h, "disk.records_written");
    usleep(1000 * 1000); /* no saves, no loads */
    after = harness_stat(h, "disk.records_written");
    printf("full filesystem under the cleaner's target: %lld records written in an idle second, "
           "clean target %lld\n",
           (long long)(after - before), (long long)harness_stat(h, "ram.clean_target_bytes"));
    ck_assert_int_le(after - before, 4 * PER); /* what was left to clean, at most: no loop */
    ck_assert_int_le(harness_stat(h, "ram.clean_target_bytes"), 8 << 20);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* Chains 1-8 saved on a healthy disk in dir and a clean stop (every chain on disk: the stop
 * persists the RAM-only ones; 2 MiB segments), then the checkpoint removed: the next start
 * scans every segment. */
static void chains_on_disk_unchecked(const char *dir)
{
    char ckpt[160];
    harness_t *h;
    kvt_client_t *c;

    set_faults("");
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1);
    kvt_close(&c);
    harness_stop(&h);
    snprintf(ckpt, sizeof ckpt, "%s/index.ckpt", dir);
    ck_assert_int_eq(unlink(ckpt), 0);
}

/* The bytes of the segment files in dir (their sizes summed). */
static uint64_t segment_bytes(const char *dir)
{
    char cmd[256];
    unsigned long long n = 0;
    FILE *f;

    snprintf(cmd, sizeof cmd, "cat %s/*.seg 2>/dev/null | wc -c", dir);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%llu", &n), 1);
    pclose(f);
    return n;
}

/* A read that fails while the start scans the segments (a transient device error during
 * recovery, here the first read of the first segment): the segment stays on disk as it is,
 * counted in disk.used_bytes whole, and the next start, on a healthy disk, scans it again and
 * serves every chain. Until 0.2.9 the scan took the failed read for the end of the segment's
 * valid records and truncated the file there: all its records lost (chains 1-2 here), for one
 * EIO. */
START_TEST(test_read_error_during_recovery_keeps_the_segment)
{
    char dir[96];
    harness_t *h;
    json_t *st;
    uint64_t bytes;

    make_dir(dir, sizeof dir);
    chains_on_disk_unchecked(dir);
    bytes = segment_bytes(dir);
    ck_assert_uint_ge(bytes, 8u * PER * CH);
    set_faults("fail-reads=1");
    h = start(dir, "none");
    ck_assert_int_eq(injected("reads"), 1);
    st = harness_status(h);
    ck_assert_int_ge(harness_jint(st, "disk.recovery.bad_files"), 1);
    ck_assert_int_ge(harness_jint(st, "disk.used_bytes"), (int64_t)bytes);
    json_decref(st);
    ck_assert_uint_eq(segment_bytes(dir), bytes); /* nothing truncated */
    restart_and_report(&h, dir, 8, (const uint32_t[2]){1, 8}, "a read error during recovery");
}
END_TEST

/* The newest segment file of dir into path: false when there is none. */
static bool newest_segment(const char *dir, char *path, size_t cap)
{
    char *segs[256];
    size_t n = harness_segments(dir, segs, 256);

    if (n > 0)
        snprintf(path, cap, "%s", segs[n - 1]);
    harness_free_paths(segs, n);
    return n > 0;
}

static int pred_segment_fault(json_t *st, void *arg)
{
    return harness_jint(st, "disk.segment_faults") >= *(int64_t *)arg;
}

/* The active segment deleted under the daemon while a flush into it is in flight (the disk
 * stalled): that flush ends in the deleted file, and the next flush starts a new segment. Until
 * 0.2.11 the check left the active segment only when no flush was in flight; then every later
 * record went into the deleted file, readable until the stop and lost at the next start (here
 * chains 7-12, demoted after the fault was found). */
START_TEST(test_faulted_active_segment_is_left)
{
    char dir[96], seg[512], seg2[512];
    harness_t *h;
    kvt_client_t *c;
    json_t *st;
    int64_t faults = 1;
    int64_t until;
    size_t was[13] = {0}, before = 0, after = 0;

    make_dir(dir, sizeof dir);
    set_faults("");
    /* 16 MiB segments: nothing saved here fills one, so no flush rolls by size */
    h = start_disk_more(dir, "none", "1MiB", 2000, ", \"segment_bytes\": \"16MiB\"", "", 0);
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 6, 1); /* chains 1-2 on disk */
    ck_assert(newest_segment(dir, seg, sizeof seg));
    set_faults("stall");
    save_chains(h, c, 7, 8, 0); /* demotes chains 3-4: their flush hangs in its write */
    until = harness_now_ms() + HARNESS_DEADLINE_MS;
    while (injected("stalls") == 0 && harness_now_ms() < until)
        usleep(10000);
    ck_assert_int_gt(injected("stalls"), 0);
    ck_assert_int_eq(unlink(seg), 0);
    st = harness_wait_status(h, pred_segment_fault, &faults, HARNESS_DEADLINE_MS);
    ck_assert_msg(st != NULL, "the deleted active segment was never found (disk.segment_faults)");
    json_decref(st);
    set_faults("");
    harness_wait_disk_drained(h);
    save_chains(h, c, 9, 12, 1); /* demotes chains 5-8 */
    ck_assert_msg(newest_segment(dir, seg2, sizeof seg2) && strcmp(seg2, seg) > 0,
                  "no segment was started after %s was deleted", seg);
    /* Chains 1-4 and what the hung flush held (some of chains 3-5) were in the deleted file,
     * readable until the stop and then lost (records are not copied out of a deleted segment).
     * Chains 7-12 were demoted after the fault was found, or reach the disk at the stop (the
     * persist): every chunk of them present now must survive a restart. */
    for (uint32_t k = 7; k <= 12; k++) {
        was[k] = present(c, k);
        before += was[k];
    }
    ck_assert_uint_ge(before, 5 * PER);
    kvt_close(&c);
    harness_stop(&h);
    h = start(dir, "none");
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t k = 7; k <= 12; k++) {
        size_t got = harness_load_chain(c, k, PER, CH, 0); /* asserts zero wrong bytes */
        ck_assert_msg(got >= was[k], "chain %u: %zu of %zu present chunks lost in the restart", k,
                      was[k] - got, was[k]);
        after += got;
    }
    printf("deleted active segment: a new segment after it; %zu of %zu chunks present of chains "
           "7-12 kept across a restart\n",
           after, before);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* The oldest-but-one segment file of dir into path, and its size. */
static uint64_t second_segment(const char *dir, char *path, size_t cap)
{
    char *segs[256];
    size_t n = harness_segments(dir, segs, 256);
    struct stat st;

    ck_assert_msg(n >= 2, "fewer than two segments in %s", dir);
    snprintf(path, cap, "%s", segs[1]);
    harness_free_paths(segs, n);
    ck_assert_int_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* Starts a daemon on dir and asserts how its disk tier recovered (disk.recovery.path), and that
 * a read failed in it (bad) or none did. */
static harness_t *start_recovered(const char *dir, const char *path, int bad)
{
    harness_t *h = start(dir, "none");
    json_t *st = harness_status(h);

    ck_assert_ptr_nonnull(st);
    ck_assert_msg(strcmp(harness_jstr(st, "disk.recovery.path"), path) == 0,
                  "recovered by %s (%s), expected %s", harness_jstr(st, "disk.recovery.path"),
                  harness_jstr(st, "disk.recovery.reason"), path);
    if (bad)
        ck_assert_int_ge(harness_jint(st, "disk.recovery.bad_files"), 1);
    else
        ck_assert_int_eq(harness_jint(st, "disk.recovery.bad_files"), 0);
    json_decref(st);
    return h;
}

/* A bad sector in the middle of a segment that is not the newest, found by a start's scan: the
 * segment is kept whole (partial, scanned to the bad spot), and the checkpoint that the stop
 * writes still serves the next starts: each scans only that segment's tail past the spot (again
 * stopped there while the sector stays bad), and once the sector reads again, every chain is
 * back. Until 0.2.11 a partial segment that was not the newest made every checkpoint stale
 * ("a segment it covers changed size"): a full scan of the whole disk at every start for as
 * long as the sector stayed bad. */
START_TEST(test_bad_sector_keeps_the_checkpoint)
{
    char dir[96], seg[512], word[700];
    const char *name;
    harness_t *h;
    kvt_client_t *c;
    uint64_t size;

    make_dir(dir, sizeof dir);
    chains_on_disk_unchecked(dir);
    size = second_segment(dir, seg, sizeof seg);
    name = strrchr(seg, '/') + 1;
    snprintf(word, sizeof word, "bad=%s@%llu", name, (unsigned long long)(size / 2));
    set_faults(word);
    h = start_recovered(dir, "scan", 1);
    ck_assert_int_ge(injected("reads"), 1);
    harness_stop(&h); /* writes a checkpoint: the partial segment by its scanned prefix */
    h = start_recovered(dir, "checkpoint", 1); /* the sector is still bad */
    harness_stop(&h);
    set_faults("");
    h = start_recovered(dir, "checkpoint", 0);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t k = 1; k <= 8; k++)
        ck_assert_msg(harness_load_chain(c, k, PER, CH, 0) == PER, "chain %u not whole", k);
    printf("bad sector at byte %llu of %s: kept whole, the checkpoint served both later starts, "
           "every chain back once it read again\n",
           (unsigned long long)(size / 2), name);
    kvt_close(&c);
    harness_stop(&h);
}
END_TEST

/* The bytes of the regular files directly in dir (what the preload's full= counts). */
static uint64_t dir_file_bytes(const char *dir)
{
    char cmd[256];
    unsigned long long n = 0;
    FILE *f;

    snprintf(cmd, sizeof cmd,
             "find %s -maxdepth 1 -type f -printf '%%s\\n' | awk '{n+=$1} END {print n+0}'", dir);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%llu", &n), 1);
    pclose(f);
    return n;
}

/* A filesystem that fills (other files) just before a clean stop, with a re-attached arena: the
 * persist writes only into the room the disk has, since its RAM chunks stay in the arena anyway
 * (0.2.7). Its first flush fails with ENOSPC, which lowers the capacity in force to what the tier
 * holds; the batch it had filled beside that flush must then not reclaim the oldest segments -
 * chunks only the disk holds - for its room. Before, it did (after the tier's retry): chains 1-2,
 * on disk only, lost at a clean stop for copies of chunks the restart re-attached anyway. */
START_TEST(test_persist_on_a_full_filesystem_keeps_the_disk)
{
    char dir[96], more[640], arena[160], words[64];
    harness_t *h;
    kvt_client_t *c;
    size_t before[12];
    int64_t t0;
    int wst = 0;
    pid_t got = 0;

    make_dir(dir, sizeof dir);
    snprintf(arena, sizeof arena, "/dev/shm/kvt-full-stop-%d.arena", (int)getpid());
    snprintf(more, sizeof more, ", \"ram\": {\"arena_path\": \"%s\"}", arena);
    set_faults("");
    /* 1 MiB write buffers: the persist fills one while the other's flush fails */
    h = start_more(dir, "none", "1MiB", 2000, more, 1);
    c = harness_client(h, "diskio", 1, 0, 0);
    save_chains(h, c, 1, 8, 1);  /* chains 1-4 on disk only, 5-8 in RAM and on disk */
    save_chains(h, c, 9, 10, 0); /* RAM-only (within the clean target): the persist's */
    for (uint32_t s = 1; s <= 10; s++)
        before[s] = present(c, s);
    ck_assert_uint_eq(before[1], PER);
    kvt_close(&c);
    snprintf(words, sizeof words, "full=%llu", (unsigned long long)dir_file_bytes(dir));
    set_faults(words); /* full: no file in the directory may grow */
    t0 = harness_now_ms();
    ck_assert_int_eq(kill(h->pid, SIGTERM), 0);
    while (harness_now_ms() - t0 < 30000 && (got = waitpid(h->pid, &wst, WNOHANG)) == 0)
        usleep(20 * 1000);
    ck_assert_msg(got == h->pid, "the stop on a full filesystem did not end within 30 s");
    ck_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    h->pid = 0;
    ck_assert_int_ge(injected("writes"), 1);
    ck_assert_int_ge(harness_log_count(h, "action=lowered"), 1);
    printf("full filesystem at stop: ended after %lld ms\n", (long long)(harness_now_ms() - t0));
    set_faults("");
    harness_restart(h); /* healthy, the arena re-attached */
    c = harness_client(h, "diskio", 1, 0, 0);
    printf("full filesystem at stop: chunks kept per chain:");
    for (uint32_t s = 1; s <= 10; s++) {
        size_t k = harness_load_chain(c, s, PER, CH, 0); /* byte-exact */
        printf(" %zu/%zu", k, before[s]);
        ck_assert_msg(k == before[s], "chain %u: %zu chunks before the stop, %zu after", s,
                      before[s], k);
    }
    printf("\n");
    kvt_close(&c);
    harness_stop(&h);
    check_unlink_arena(arena);
}
END_TEST

/* A crash while chunks are spilled into the arena's write headroom (a slow disk under a save
 * burst: chunks being written leave the RAM tier for the headroom until their write commits):
 * the re-attach brings them back as RAM chunks, beyond ram.capacity_bytes. Before, the RAM tier
 * then reported more used than its capacity (83 of 64 MiB in the probe) for as long as no save
 * came to evict, across clean restarts too; now its clean chunks leave RAM at the start and the
 * rest once the cleaner has written them. Every chain present before is present after. */
static int pred_ram_fits(json_t *st, void *arg)
{
    (void)arg;
    return strcmp(harness_jstr(st, "disk.state"), "ok") == 0 &&
           harness_jint(st, "ram.used_bytes") <= harness_jint(st, "ram.capacity_bytes");
}

START_TEST(test_reattach_after_spills_fits_the_ram_tier)
{
    char dir[96], more[640], arena[160];
    harness_t *h;
    kvt_client_t *c;
    json_t *st = NULL;
    size_t before[25];
    int64_t spilled = 0, cap, used;

    make_dir(dir, sizeof dir);
    snprintf(arena, sizeof arena, "/dev/shm/kvt-spill-reattach-%d.arena", (int)getpid());
    snprintf(more, sizeof more, ", \"ram\": {\"arena_path\": \"%s\"}", arena);
    set_faults("delay=40"); /* every write 40 ms late: the burst outruns the disk */
    h = start_more(dir, "none", "1MiB", 2000, more, 1);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t s = 1; s <= 24 && spilled == 0; s++) {
        ck_assert_uint_eq(harness_save_chain(c, s, PER, CH, 0), PER);
        if (harness_stat(h, "ram.demoting_bytes") > 0)
            spilled = s;
    }
    ck_assert_msg(spilled > 0, "no chunk was spilled into the write headroom");
    for (uint32_t s = 1; s <= (uint32_t)spilled; s++)
        before[s] = present(c, s);
    kvt_close(&c);
    harness_kill9(h);
    set_faults("");
    harness_restart(h); /* healthy; the arena and its journal re-attached */
    cap = harness_stat(h, "ram.capacity_bytes");
    /* the clean chunks leave RAM at the start, the rest once the cleaner has written them */
    st = harness_wait_status(h, pred_ram_fits, NULL, 10000);
    ck_assert_msg(st != NULL, "the re-attached RAM tier stayed over its capacity");
    used = harness_jint(st, "ram.used_bytes");
    ck_assert_int_gt(harness_jint(st, "ram.recovery.bytes"), cap); /* the spills came back */
    printf("spills at a crash: %lld bytes recovered, RAM tier %lld of %lld bytes after the start\n",
           (long long)harness_jint(st, "ram.recovery.bytes"), (long long)used, (long long)cap);
    json_decref(st);
    c = harness_client(h, "diskio", 1, 0, 0);
    for (uint32_t s = 1; s <= (uint32_t)spilled; s++)
        ck_assert_uint_eq(harness_load_chain(c, s, PER, CH, 0), before[s]); /* byte-exact */
    ck_assert_int_le(harness_stat(h, "ram.used_bytes"), cap);
    kvt_close(&c);
    harness_stop(&h);
    check_unlink_arena(arena);
}
END_TEST

static Suite *disk_io_suite(void)
{
    Suite *su = suite_create("disk_io");
    TCase *tc = tcase_create("io");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_read_eio_is_a_miss);
    tcase_add_test(tc, test_write_eio_degrades_and_resumes);
    tcase_add_test(tc, test_sync_eio_fails_the_batch);
    tcase_add_test(tc, test_flaky_disk_serves_no_wrong_byte);
    tcase_add_test(tc, test_transient_read_error_is_retried);
    tcase_add_test(tc, test_stop_with_a_hung_disk);
    tcase_add_test(tc, test_drop_with_a_hung_disk);
    tcase_add_test(tc, test_hung_disk_spares_saves);
    tcase_add_test(tc, test_slow_disk_is_not_a_stall);
    tcase_add_test(tc, test_one_stuck_read_holds_nobody);
    tcase_add_test(tc, test_slow_seal_shows);
    tcase_add_test(tc, test_seal_eio_is_counted);
    tcase_add_test(tc, test_persist_retries_a_failed_flush);
    tcase_add_test(tc, test_cleaner_resumes_after_a_failed_flush);
    tcase_add_test(tc, test_full_filesystem_reclaims);
    tcase_add_test(tc, test_full_filesystem_no_churn);
    tcase_add_test(tc, test_small_filesystems);
    tcase_add_test(tc, test_persist_on_a_full_filesystem_keeps_the_disk);
    tcase_add_test(tc, test_reattach_after_spills_fits_the_ram_tier);
    tcase_add_test(tc, test_faulted_active_segment_is_left);
    suite_add_tcase(su, tc);
    tc = tcase_create("recovery");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_read_error_during_recovery_keeps_the_segment);
    tcase_add_test(tc, test_bad_sector_keeps_the_checkpoint);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = disk_io_suite, .scratch = "kvtdio"};
