/*
 * test_reattach.c - the RAM tier across restarts (README "Restarts", store_reattach.c): the
 * arena file in /dev/shm is kept, and a restarted daemon re-attaches it, trusting only the
 * chunks its journal vouches for byte for byte.
 *
 * Each test names its own arena file (/dev/shm/kvt-reattach-<pid>-<n>) and journal directory
 * (under the run's scratch directory), both outside the harness's per-start directory, so that
 * a second harness_start() finds them (keep_arena); the arena file is removed at the end. State is
 * read from status (ram.recovery, ram.used_bytes, disk.hits), never waited for by sleeping.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "check_main.h"
#include "harness.h"

#define PER 16u /* chunks per chain */

typedef struct {
    char arena[128];
    char dir[256]; /* the journal's directory, and the disk tier's (dir/disk) */
    uint64_t capacity;
    uint64_t chunk;
    bool disk;
    bool default_journal; /* no ram.journal_path: the daemon's default place (test_journal_place) */
} persist_t;

static void persist_init(persist_t *p, uint64_t capacity, uint64_t chunk, bool disk)
{
    static int n;

    memset(p, 0, sizeof *p);
    snprintf(p->arena, sizeof p->arena, "/dev/shm/kvt-reattach-%d-%d", (int)getpid(), n++);
    check_register_arena(p->arena); /* also when a daemon names it through a link */
    snprintf(p->dir, sizeof p->dir, "%s/persist-XXXXXX", check_scratch_dir());
    ck_assert_ptr_nonnull(mkdtemp(p->dir));
    p->capacity = capacity;
    p->chunk = chunk;
    p->disk = disk;
}

static void persist_done(persist_t *p)
{
    check_unlink_arena(p->arena);
    check_rmtree(p->dir);
}

/* Starts a daemon on p's arena and journal; more: extra members of "ram" (may be ""). */
static harness_t *persist_start(const persist_t *p, uint64_t capacity, const char *more)
{
    char extra[1024], journal[320] = "";
    harness_opts_t o = {.capacity_bytes = capacity, .max_chunk_bytes = p->chunk, .keep_arena = 1};

    if (!p->default_journal)
        snprintf(journal, sizeof journal, ", \"journal_path\": \"%s/arena.journal\"", p->dir);
    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"%s\"%s%s}, "
             "\"disk\": {\"enabled\": %s, \"dir\": \"%s/disk\", \"capacity_bytes\": \"64MiB\", "
             "\"segment_bytes\": \"4MiB\", \"write_buffer_bytes\": \"1MiB\", \"fsync\": "
             "\"none\"}}",
             p->arena, journal, more, p->disk ? "true" : "false", p->dir);
    o.extra_json = extra;
    return harness_start(&o);
}

static const char *jstr(json_t *st, const char *a, const char *b, const char *c)
{
    json_t *v = json_object_get(json_object_get(st, a), b);

    if (c != NULL)
        v = json_object_get(v, c);

    return json_string_value(v) != NULL ? json_string_value(v) : "";
}

static void expect_path(const harness_t *h, const char *path, const char *reason)
{
    json_t *st = harness_status(h);

    ck_assert_str_eq(jstr(st, "ram", "recovery", "path"), path);
    ck_assert_str_eq(jstr(st, "ram", "recovery", "reason"), reason);
    json_decref(st);
}

/* Flips one byte of the arena file at off (the daemon is stopped), through a read-write
 * mapping as a client would have it. */
static void scribble(const char *arena, uint64_t off)
{
    int fd = open(arena, O_RDWR);
    struct stat st;
    uint8_t *m;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_uint_gt((uint64_t)st.st_size, off);
    m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    m[off] ^= 0x5a;
    munmap(m, (size_t)st.st_size);
    close(fd);
}

/* A daemon on p's arena takes chains 1..chains of model, then stops cleanly. */
static void save_and_stop(const persist_t *p, const char *model, uint32_t chains)
{
    harness_t *h = persist_start(p, p->capacity, "");
    kvt_client_t *c = harness_client(h, model, 1, 0, 0);

    for (uint32_t seed = 1; seed <= chains; seed++)
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, p->chunk, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
}

/* Fill RAM, SIGTERM, restart: every chunk comes back from the arena, byte-exact, with no disk
 * read although the clean stop also wrote them to the disk tier. */
START_TEST(test_reattach_clean_stop)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;
    int64_t gen;
    size_t got = 0;

    persist_init(&p, 4u << 20, 64u << 10, true);
    h = persist_start(&p, p.capacity, "");
    expect_path(h, "cold", "no_file");
    gen = harness_stat(h, "ram.arena_gen");
    c = harness_client(h, "reattach", 1, 0, 0);
    for (uint32_t seed = 1; seed <= 3; seed++)
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, p.chunk, 0), PER);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 3 * PER);
    kvt_close(&c);
    harness_stop(&h);

    h = persist_start(&p, p.capacity, "");
    expect_path(h, "reattach", "attached");
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), 3 * PER);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.bytes"), 3 * PER * p.chunk);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.checksum_drops"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.discarded"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.arena_gen"), gen + 1);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 3 * PER);
    ck_assert_int_gt(harness_stat(h, "ram.journal_bytes"), 0);
    c = harness_client(h, "reattach", 1, 0, 0);
    for (uint32_t seed = 1; seed <= 3; seed++)
        got += harness_load_chain(c, seed, PER, p.chunk, 0); /* asserts the bytes */
    ck_assert_uint_eq(got, 3 * PER);
    ck_assert_int_eq(harness_stat(h, "disk.hits"), 0);
    ck_assert_int_eq(harness_stat(h, "disk.bytes_read"), 0);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* A disk tier smaller than RAM (0.2.7): the stop's persist wrote RAM chunks, the disk reclaimed
 * its oldest segments for them, and a reclaimed chunk still in RAM went back to be written again,
 * until the persist's 20 s deadline; every chunk only the disk held was gone after the restart.
 * Now each chunk is written once, and only into the room the disk has while the arena will be
 * re-attached: everything present before the stop is present after it, byte-exact. */
START_TEST(test_reattach_disk_smaller_than_ram)
{
    enum { CHAINS = 12 };
    persist_t p;
    harness_opts_t o;
    char extra[1024];
    harness_t *h;
    kvt_client_t *c;
    size_t present[CHAINS + 1], before = 0, after = 0;

    persist_init(&p, 8u << 20, 64u << 10, true);
    snprintf(extra, sizeof extra,
             "{\"ram\": {\"arena_path\": \"%s\", \"journal_path\": \"%s/arena.journal\"}, "
             "\"disk\": {\"enabled\": true, \"dir\": \"%s/disk\", \"capacity_bytes\": "
             "\"4MiB\", \"segment_bytes\": \"1MiB\", \"write_buffer_bytes\": \"1MiB\", "
             "\"fsync\": \"none\"}}",
             p.arena, p.dir, p.dir);
    o = (harness_opts_t){.capacity_bytes = p.capacity,
                         .max_chunk_bytes = p.chunk,
                         .keep_arena = 1,
                         .extra_json = extra};
    h = harness_start(&o);
    c = harness_client(h, "reattach", 1, 0, 0);
    for (uint32_t seed = 1; seed <= CHAINS; seed++) { /* 12 MiB through 8 of RAM, 4 of disk */
        ck_assert_uint_eq(harness_save_chain(c, seed, PER, p.chunk, 0), PER);
        harness_wait_disk_drained(h);
    }
    for (uint32_t seed = 1; seed <= CHAINS; seed++)
        before += present[seed] = harness_lookup_chain(c, seed, PER);
    ck_assert_int_gt(harness_stat(h, "disk.chunks"), 0);
    kvt_close(&c);
    harness_stop(&h); /* within the harness's deadline, exit status 0 */

    h = harness_start(&o);
    expect_path(h, "reattach", "attached");
    c = harness_client(h, "reattach", 1, 0, 0);
    for (uint32_t seed = 1; seed <= CHAINS; seed++) {
        size_t got = harness_load_chain(c, seed, PER, p.chunk, 0); /* asserts the bytes */
        ck_assert_msg(got >= present[seed], "chain %u: %zu present before the stop, %zu after",
                      seed, present[seed], got);
        after += got;
    }
    printf("disk smaller than RAM: %zu chunks present before the stop, %zu after\n", before, after);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* A cold start over the arena of a daemon that died while a client held a pin (0.2.7): the file
 * is replaced, not truncated. Truncated, the pinned pointer read zeros (a regrown file) or raised
 * SIGBUS in the client (a shrunk one). ram.reattach false: every start is cold. */
START_TEST(test_cold_start_keeps_mapped_arena)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;
    kvt_completion_t *pin = NULL;
    kvt_hash_t hs[4];
    struct stat before, after;

    persist_init(&p, 4u << 20, 64u << 10, false);
    h = persist_start(&p, p.capacity, ", \"reattach\": false");
    c = harness_client_with(h, "reattach", 1, 0, 16, KVT_DATA_PATH_SHM);
    ck_assert_uint_eq(harness_save_chain(c, 41, 4, p.chunk, 0), 4);
    harness_chain(41, hs, 4);
    ck_assert_int_eq(kvt_pin(c, hs, 4, &pin), 0);
    ck_assert_uint_eq(pin->nhit, 4);
    ck_assert_int_eq(stat(p.arena, &before), 0);
    harness_kill9(h);
    harness_restart(h); /* cold: a new file at the path */
    expect_path(h, "cold", "disabled");
    for (size_t i = 0; i < 4; i++) /* the old mapping still holds the pinned bytes */
        ck_assert_int_eq(harness_check_fill(pin->ptrs[i], p.chunk, 0, (uint64_t)41 << 32 | i), 1);
    ck_assert_int_eq(stat(p.arena, &after), 0);
    ck_assert(before.st_ino != after.st_ino);
    kvt_completion_free(c, pin);
    ck_assert_uint_eq(harness_save_chain(c, 42, 4, p.chunk, 0), 4); /* the new arena serves */
    ck_assert_uint_eq(harness_load_chain(c, 42, 4, p.chunk, 0), 4);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* The replacing cold start through a symlink (the review of 0.2.7): ram.arena_path may name a
 * link; the new file goes beside the link's target, the link stays a link, and the group an
 * operator gave the arena file carries over (no ram.arena_group). */
START_TEST(test_cold_start_through_a_symlink)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;
    char link[300], target[128], extra[1024];
    harness_opts_t o;
    struct stat before, after, l;

    persist_init(&p, 4u << 20, 64u << 10, false);
    snprintf(target, sizeof target, "%s", p.arena);
    snprintf(link, sizeof link, "%s/arena-link", p.dir);
    ck_assert_int_eq(symlink(target, link), 0);
    snprintf(extra, sizeof extra, "{\"ram\": {\"arena_path\": \"%s\", \"reattach\": false}}", link);
    o = (harness_opts_t){.capacity_bytes = p.capacity,
                         .max_chunk_bytes = p.chunk,
                         .keep_arena = 1,
                         .extra_json = extra};
    h = harness_start(&o);
    c = harness_client_with(h, "reattach", 1, 0, 16, KVT_DATA_PATH_SHM);
    ck_assert_uint_eq(harness_save_chain(c, 43, 4, p.chunk, 0), 4);
    if (geteuid() == 0) /* an operator's group for the arena (the suite runs as root) */
        ck_assert_int_eq(chown(target, (uid_t)-1, 1), 0);
    ck_assert_int_eq(stat(target, &before), 0);
    harness_kill9(h);
    harness_restart(h);
    ck_assert_int_eq(lstat(link, &l), 0);
    ck_assert(S_ISLNK(l.st_mode));
    ck_assert_int_eq(stat(target, &after), 0);
    ck_assert(after.st_ino != before.st_ino);
    if (geteuid() == 0)
        ck_assert_uint_eq(after.st_gid, 1);
    ck_assert_uint_eq(harness_save_chain(c, 44, 4, p.chunk, 0), 4);
    ck_assert_uint_eq(harness_load_chain(c, 44, 4, p.chunk, 0), 4);
    ck_assert_int_eq(kvt_data_path(c), KVT_DATA_PATH_SHM);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* The saver: chains from 1 up, each reported on fd once its every chunk was STORED; runs until
 * its daemon is gone. A forked process: it reports by exit status, not by Check. */
static void saver(const char *endpoint, const persist_t *p, int fd)
{
    kvt_connect_opts_t o = {.timeout_ms = 2000, .data_path = KVT_DATA_PATH_SHM};
    kvt_ns_desc_t d = harness_ns_desc("killed", 1, 0, 32); /* harness_client's layout */
    kvt_client_t *c = NULL;
    void *bufs[PER];
    size_t lens[PER];

    if (kvt_connect(endpoint, &d, 0, &o, &c) != 0)
        _exit(2);
    for (size_t i = 0; i < PER; i++) {
        bufs[i] = malloc(p->chunk);
        lens[i] = p->chunk;
    }
    for (uint32_t seed = 1;; seed++) {
        kvt_hash_t hs[PER];
        uint8_t out[PER];
        kvt_save_opts_t so = {0};
        harness_chain(seed, hs, PER);
        for (size_t i = 0; i < PER; i++)
            harness_fill(bufs[i], p->chunk, 0, (uint64_t)seed << 32 | i);
        if (kvt_save(c, hs, PER, (const void *const *)bufs, lens, &so, out) != 0)
            break;
        for (size_t i = 0; i < PER; i++)
            if (out[i] != KVT_SAVE_STORED)
                _exit(3);
        if (write(fd, &seed, sizeof seed) != (ssize_t)sizeof seed)
            break;
    }
    _exit(0);
}

static void copy_file(const char *from, const char *to)
{
    uint8_t buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ssize_t n;

    ck_assert_int_ge(in, 0);
    ck_assert_int_ge(out, 0);
    while ((n = read(in, buf, sizeof buf)) > 0)
        ck_assert_int_eq(write(out, buf, (size_t)n), n);
    ck_assert_int_eq(n, 0);
    close(in);
    ck_assert_int_eq(close(out), 0);
}

/* Makes the journal's directory usable again and starts a daemon that re-attaches p's arena
 * from the journal at the legacy place (migrating it). */
static harness_t *start_migrating(const persist_t *p, const char *dir)
{
    harness_t *h;

    ck_assert_int_eq(chmod(dir, 0700), 0);
    h = persist_start(p, p->capacity, "");
    expect_path(h, "reattach", "attached");
    ck_assert_int_eq(harness_log_count(h, "action=migrate"), 1);
    return h;
}

/* The journal's default place (0.2.6, store_reattach.c): beside an arena on a tmpfs, in
 * <arena>.d, a directory of the daemon's own (mode 0700). A journal found only at the place of
 * 0.2.5 (<disk.dir>/<arena name>.journal) is read there once and moved; a <arena>.d that other
 * users could reach is not used (the legacy place is, with a log line); with a journal in both
 * places, the one of this arena's previous generation is replayed. */
START_TEST(test_reattach_journal_place)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;
    char want[240], legacy[400], dir[200];
    const char *base;
    struct stat st;
    json_t *js;

    persist_init(&p, 4u << 20, 64u << 10, true);
    p.default_journal = true;
    base = strrchr(p.arena, '/') + 1;
    snprintf(dir, sizeof dir, "%s.d", p.arena);
    snprintf(want, sizeof want, "%s/journal", dir);
    snprintf(legacy, sizeof legacy, "%s/disk/%s.journal", p.dir, base);
    save_and_stop(&p, "place", 2);
    ck_assert_int_eq(lstat(dir, &st), 0);
    ck_assert(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    ck_assert_int_eq(access(want, F_OK), 0);
    ck_assert_int_eq(access(legacy, F_OK), -1);

    /* an upgrade from 0.2.5: the journal is at the legacy place only */
    copy_file(want, legacy);
    ck_assert_int_eq(check_rmtree(dir), 0);
    h = persist_start(&p, p.capacity, "");
    expect_path(h, "reattach", "attached");
    ck_assert_int_eq(harness_log_count(h, "action=migrate"), 1);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), 2 * PER);
    js = harness_status(h);
    ck_assert_str_eq(jstr(js, "ram", "journal_path", NULL), want);
    json_decref(js);
    ck_assert_int_eq(access(legacy, F_OK), -1);
    harness_stop(&h);

    /* a directory another user could write into is refused: the legacy place is used */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    h = persist_start(&p, p.capacity, "");
    ck_assert_int_eq(harness_log_count(h, "action=legacy_path"), 1);
    js = harness_status(h);
    ck_assert_str_eq(jstr(js, "ram", "journal_path", NULL), legacy);
    json_decref(js);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), 0); /* nothing read from there */
    c = harness_client(h, "place", 1, 0, 0);
    for (uint32_t seed = 1; seed <= 2; seed++) /* the clean stops wrote them to disk */
        ck_assert_uint_eq(harness_load_chain(c, seed, PER, p.chunk, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
    ck_assert_int_eq(access(legacy, F_OK), 0);

    /* the directory usable again: its journal is the older one (another generation), the
     * legacy place holds this arena's; that one is replayed and moved, not thrown away */
    h = start_migrating(&p, dir);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.discarded"), 1); /* the older one */
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), 2 * PER);
    c = harness_client(h, "place", 1, 0, 0);
    for (uint32_t seed = 1; seed <= 2; seed++)
        ck_assert_uint_eq(harness_load_chain(c, seed, PER, p.chunk, 0), PER);
    ck_assert_int_eq(harness_stat(h, "disk.hits"), 0); /* from the arena */
    kvt_close(&c);
    harness_stop(&h);
    ck_assert_int_eq(access(legacy, F_OK), -1);
    ck_assert_int_eq(access(want, F_OK), 0);

    /* a journal of another arena at the new place, of a higher generation than this arena's
     * journal at the legacy place: the legacy one is still replayed (the generation is raised
     * above both only after every place was tried) */
    ck_assert_int_eq(unlink(p.arena), 0); /* a new arena, generation 1 */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    h = persist_start(&p, p.capacity, "");
    expect_path(h, "cold", "no_file");
    c = harness_client(h, "place", 1, 0, 0);
    ck_assert_uint_eq(harness_save_chain(c, 3, PER, p.chunk, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
    ck_assert_int_eq(access(legacy, F_OK), 0);
    h = start_migrating(&p, dir);
    ck_assert_int_eq(harness_log_count(h, "action=next_place"), 1);
    ck_assert_int_ge(harness_stat(h, "ram.recovery.chunks"), PER);
    c = harness_client(h, "place", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(c, 3, PER, p.chunk, 0), PER);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* SIGKILL while a client saves through the shared arena (and another holds a reservation it
 * never commits): after the restart every chain that was answered STORED loads byte-exact, the
 * reservation is gone, and the RAM accounting is exactly the chunks that came back. */
START_TEST(test_reattach_sigkill_during_saves)
{
    persist_t p;
    harness_t *h;
    int pfd[2], status;
    pid_t pid;
    uint32_t seed, done = 0;
    kvt_client_t *c;
    void *ctx, *s;
    kvt_hello_ok_t hello;
    kvt_msg_t m, rep;
    harness_raw_msg_t r;
    uint8_t hash[KVT_HASH_BYTES] = {0x77}, lens[8];
    kvt_frame_t f[2];
    int64_t chunks, foot;

    persist_init(&p, 32u << 20, 16u << 10, false);
    h = persist_start(&p, p.capacity, "");
    /* a reservation that is never committed */
    ctx = zmq_ctx_new();
    s = harness_raw_open(ctx, h->endpoint, 5000);
    hello = harness_raw_hello2(s, "reserver", "", 1);
    kvt_put_u64(lens, p.chunk);
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = 2,
                        .type = KVT_MSG_SAVE_RESERVE,
                        .req_id = 2,
                        .ns_id = hello.ns_id,
                        .gen = hello.arena_gen};
    m.u.save.nhashes = 1;
    f[0] = (kvt_frame_t){hash, sizeof hash};
    f[1] = (kvt_frame_t){lens, sizeof lens};
    harness_raw_call(s, &m, f, 2, &r, &rep);
    ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_RESERVE_OK);
    harness_raw_msg_close(&r);
    ck_assert_int_gt(harness_stat(h, "ram.reserved_bytes"), 0);

    ck_assert_int_eq(pipe(pfd), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pfd[0]);
        saver(h->endpoint, &p, pfd[1]);
    }
    close(pfd[1]);
    /* kill while it saves: after its 40th chain, with the 41st on its way */
    while (done < 40 && read(pfd[0], &seed, sizeof seed) == (ssize_t)sizeof seed)
        done = seed;
    ck_assert_uint_eq(done, 40);
    harness_kill9(h);
    while (read(pfd[0], &seed, sizeof seed) == (ssize_t)sizeof seed)
        done = seed; /* answered before the kill, read after it */
    close(pfd[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "saver status %d", status);
    zmq_close(s);
    zmq_ctx_term(ctx);
    harness_free(&h);

    h = persist_start(&p, p.capacity, "");
    expect_path(h, "reattach", "attached");
    c = harness_client(h, "killed", 1, 0, 0);
    for (seed = 1; seed <= done; seed++)
        ck_assert_uint_eq(harness_load_chain(c, seed, PER, p.chunk, 0), PER);
    chunks = harness_stat(h, "ram.chunks");
    foot = (int64_t)((p.chunk + 4095) / 4096 * 4096);
    ck_assert_int_ge(chunks, (int64_t)done * PER);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), chunks);
    ck_assert_int_eq(harness_stat(h, "ram.reserved_bytes"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.used_bytes"), chunks * foot);
    ck_assert_int_eq(harness_stat(h, "ram.stored_bytes"), chunks * (int64_t)p.chunk);
    printf("test_reattach_sigkill_during_saves: %u chains answered before SIGKILL, %lld chunks "
           "re-attached\n",
           done, (long long)chunks);
    kvt_close(&c);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* Bytes changed in the arena while no daemon ran (a client's read-write mapping): that chunk is
 * a checksum drop and a miss, the rest survive; a scribbled header page makes a cold start. */
START_TEST(test_reattach_scribbled)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;

    persist_init(&p, 4u << 20, 64u << 10, false);
    save_and_stop(&p, "scribbled", 2);

    /* the first chunk saved is the first extent of the chunk area: chain 1's first chunk */
    scribble(p.arena, 4096 + 1000);
    h = persist_start(&p, p.capacity, "");
    expect_path(h, "reattach", "attached");
    ck_assert_int_eq(harness_stat(h, "ram.recovery.checksum_drops"), 1);
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), 2 * PER - 1);
    c = harness_client(h, "scribbled", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(c, 2, PER, p.chunk, 0), PER);
    ck_assert_uint_lt(harness_load_chain(c, 1, PER, p.chunk, 0), PER); /* no wrong byte */
    kvt_close(&c);
    harness_stop(&h);

    scribble(p.arena, 3); /* the header page's magic */
    h = persist_start(&p, p.capacity, "");
    expect_path(h, "cold", "header");
    ck_assert_int_eq(harness_log_count(h, "event=ram_cold_start"), 1);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* A changed ram.capacity_bytes, or ram.reattach false: a clean cold start with a log line. */
START_TEST(test_reattach_config_changes)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;

    persist_init(&p, 4u << 20, 64u << 10, false);
    save_and_stop(&p, "resized", 1);

    h = persist_start(&p, 8u << 20, "");
    expect_path(h, "cold", "layout");
    ck_assert_int_eq(harness_log_count(h, "event=ram_cold_start"), 1);
    ck_assert_int_eq(harness_log_count(h, "ram.capacity_bytes"), 1);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0);
    c = harness_client(h, "resized", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(c, 1, PER, p.chunk, 0), 0);
    ck_assert_uint_eq(harness_save_chain(c, 3, PER, p.chunk, 0), PER);
    kvt_close(&c);
    harness_stop(&h);

    h = persist_start(&p, 8u << 20, ", \"reattach\": false");
    expect_path(h, "cold", "disabled");
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), 0);
    ck_assert_int_eq(harness_stat(h, "ram.journal_bytes"), 0);
    harness_stop(&h);
    /* without re-attach the arena file goes with the daemon, as before */
    ck_assert_int_eq(access(p.arena, F_OK), -1);
    persist_done(&p);
}
END_TEST

static int64_t post_drop(const harness_t *h, const char *query)
{
    char url[256], *body = NULL;
    int code = 0;

    snprintf(url, sizeof url, "/admin/drop?%s", query);
    ck_assert_int_eq(harness_http(h->status_path, "POST", url, &code, NULL, 0, &body), 0);
    free(body);
    return code;
}

/* A dropped namespace never comes back through a re-attach, even after a SIGKILL (the journal's
 * DEL records, not the clean stop's compaction); the other namespace's chunks do. */
START_TEST(test_reattach_drop_stays_dropped)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *a, *b;

    persist_init(&p, 4u << 20, 32u << 10, false);
    h = persist_start(&p, p.capacity, "");
    a = harness_client(h, "dropme", 1, 0, 0);
    b = harness_client(h, "keepme", 1, 0, 0);
    ck_assert_uint_eq(harness_save_chain(a, 1, PER, p.chunk, 0), PER);
    ck_assert_uint_eq(harness_save_chain(b, 2, PER, p.chunk, 0), PER);
    ck_assert_int_eq(post_drop(h, "ns=dropme"), 200);
    ck_assert_int_eq(harness_stat(h, "ram.chunks"), PER);
    kvt_close(&a);
    kvt_close(&b);
    harness_kill9(h);
    harness_free(&h);

    h = persist_start(&p, p.capacity, "");
    expect_path(h, "reattach", "attached");
    ck_assert_int_eq(harness_stat(h, "ram.recovery.chunks"), PER);
    a = harness_client(h, "dropme", 1, 0, 0);
    b = harness_client(h, "keepme", 1, 0, 0);
    ck_assert_uint_eq(harness_load_chain(a, 1, PER, p.chunk, 0), 0);
    ck_assert_uint_eq(harness_load_chain(b, 2, PER, p.chunk, 0), PER);
    kvt_close(&a);
    kvt_close(&b);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

static int reserve_code(void *s, const kvt_hello_ok_t *hello, int version, uint32_t gen,
                        uint64_t rid, uint64_t chunk)
{
    uint8_t hash[KVT_HASH_BYTES] = {(uint8_t)rid}, lens[8];
    kvt_frame_t f[2] = {{hash, sizeof hash}, {lens, sizeof lens}};
    harness_raw_msg_t r;
    kvt_msg_t m, rep;
    int code;

    kvt_put_u64(lens, chunk);
    memset(&m, 0, sizeof m);
    m.hdr = (kvt_hdr_t){.version = (uint8_t)version,
                        .type = KVT_MSG_SAVE_RESERVE,
                        .req_id = rid,
                        .ns_id = hello->ns_id,
                        .gen = version >= 2 ? gen : 0};
    m.u.save.nhashes = 1;
    harness_raw_call(s, &m, f, 2, &r, &rep);
    code = rep.hdr.type == KVT_MSG_ERROR ? rep.u.error.code : 0;
    if (rep.hdr.type != KVT_MSG_ERROR)
        ck_assert_int_eq(rep.hdr.type, KVT_MSG_SAVE_RESERVE_OK);
    harness_raw_msg_close(&r);
    return code;
}

/* Every start is a new generation: a shared-memory request naming the old one is ESTALE
 * (protocol 2); generation 0 and protocol 1 requests are not checked. */
START_TEST(test_reattach_estale)
{
    persist_t p;
    harness_t *h;
    void *ctx = zmq_ctx_new(), *s;
    kvt_hello_ok_t a, b;

    persist_init(&p, 4u << 20, 16u << 10, false);
    h = persist_start(&p, p.capacity, "");
    s = harness_raw_open(ctx, h->endpoint, 5000);
    a = harness_raw_hello2(s, "gen", "", 1);
    ck_assert_uint_gt(a.arena_gen, 0);
    ck_assert_uint_eq(a.features & KVT_FEAT_ARENA_GEN, KVT_FEAT_ARENA_GEN);
    ck_assert_int_eq(reserve_code(s, &a, 2, a.arena_gen, 2, p.chunk), 0);
    ck_assert_int_eq(reserve_code(s, &a, 2, a.arena_gen + 1, 3, p.chunk), KVT_WIRE_ESTALE);
    zmq_close(s);
    harness_stop(&h);

    h = persist_start(&p, p.capacity, "");
    s = harness_raw_open(ctx, h->endpoint, 5000);
    b = harness_raw_hello2(s, "gen", "", 1);
    ck_assert_uint_eq(b.arena_gen, a.arena_gen + 1);
    ck_assert_int_eq(reserve_code(s, &b, 2, a.arena_gen, 4, p.chunk), KVT_WIRE_ESTALE);
    ck_assert_int_eq(reserve_code(s, &b, 2, b.arena_gen, 5, p.chunk), 0);
    ck_assert_int_eq(reserve_code(s, &b, 2, 0, 6, p.chunk), 0);
    ck_assert_int_eq(harness_stat(h, "server.errors.stale"), 1);
    zmq_close(s);
    /* protocol 1 carries no generation: served as it is */
    s = harness_raw_open(ctx, h->endpoint, 5000);
    {
        kvt_hello_ok_t v1 = {.ns_id = harness_raw_hello(s, "gen1", 1, 0, 1, 1)};
        ck_assert_int_eq(reserve_code(s, &v1, 1, 0, 7, p.chunk), 0);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

/* The gates object of namespace model in a status document (borrowed), or NULL. */
static json_t *ns_gates(json_t *st, const char *model)
{
    json_t *a = json_object_get(st, "namespaces");

    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *ns = json_array_get(a, i);
        const char *m = json_string_value(json_object_get(ns, "model"));
        if (m != NULL && strcmp(m, model) == 0)
            return json_object_get(ns, "gates");
    }
    return NULL;
}

/* A clean restart keeps the gates' learned state (every estimator and counter status shows,
 * the ghost table's figures) and the running leases. */
START_TEST(test_reattach_gate_state_and_leases)
{
    persist_t p;
    harness_t *h;
    kvt_client_t *c;
    kvt_hash_t hs[PER];
    kvt_lookup_opts_t lo = {.lease = 1, .has_prompt = 1, .prompt_tokens = PER * 16};
    kvt_lookup_result_t res;
    json_t *before, *after, *st;
    char *a, *b;
    int64_t leased;

    persist_init(&p, 4u << 20, 16u << 10, false);
    h = persist_start(&p, p.capacity, "");
    c = harness_client(h, "gated", 1, 0, 0);
    ck_assert_uint_eq(harness_save_chain(c, 1, PER, p.chunk, 0), PER);
    harness_chain(1, hs, PER);
    for (int i = 0; i < 5; i++) {
        memset(&res, 0, sizeof res);
        ck_assert_int_eq(kvt_lookup(c, hs, PER, &lo, &res), 0);
        ck_assert_int_eq(kvt_tally(c, 9, (uint64_t)i * 3, (uint64_t)i * 5, NULL, 0, NULL), 0);
    }
    leased = harness_stat(h, "ram.leased_chunks");
    ck_assert_int_eq(leased, PER);
    st = harness_status(h);
    before = json_deep_copy(ns_gates(st, "gated"));
    json_decref(st);
    ck_assert_ptr_nonnull(before);
    ck_assert_int_gt(harness_jint(before, "lookup_skip.lookups"), 0);
    kvt_close(&c);
    harness_stop(&h);

    h = persist_start(&p, p.capacity, "");
    ck_assert_int_eq(harness_stat(h, "server.state_namespaces"), 1);
    ck_assert_int_eq(harness_stat(h, "server.state_leases"), PER);
    ck_assert_int_eq(harness_stat(h, "ram.leased_chunks"), leased);
    st = harness_status(h);
    after = ns_gates(st, "gated");
    ck_assert_ptr_nonnull(after);
    /* the namespace's measured LOOKUP service time is not gate state: it starts again */
    json_object_del(json_object_get(before, "lookup_skip"), "mean_lookup_us");
    json_object_del(json_object_get(after, "lookup_skip"), "mean_lookup_us");
    a = json_dumps(before, JSON_SORT_KEYS);
    b = json_dumps(after, JSON_SORT_KEYS);
    ck_assert_str_eq(b, a);
    free(a);
    free(b);
    json_decref(st);
    json_decref(before);
    harness_stop(&h);

    /* the state was consumed: a start after a crash does not bring it back */
    h = persist_start(&p, p.capacity, "");
    harness_kill9(h);
    harness_free(&h);
    h = persist_start(&p, p.capacity, "");
    ck_assert_int_eq(harness_stat(h, "server.state_namespaces"), 0);
    harness_stop(&h);
    persist_done(&p);
}
END_TEST

static Suite *reattach_suite(void)
{
    Suite *su = suite_create("reattach");
    TCase *tc = tcase_create("reattach");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_reattach_clean_stop);
    tcase_add_test(tc, test_reattach_disk_smaller_than_ram);
    tcase_add_test(tc, test_cold_start_keeps_mapped_arena);
    tcase_add_test(tc, test_cold_start_through_a_symlink);
    tcase_add_test(tc, test_reattach_sigkill_during_saves);
    tcase_add_test(tc, test_reattach_scribbled);
    tcase_add_test(tc, test_reattach_config_changes);
    tcase_add_test(tc, test_reattach_drop_stays_dropped);
    tcase_add_test(tc, test_reattach_estale);
    tcase_add_test(tc, test_reattach_gate_state_and_leases);
    tcase_add_test(tc, test_reattach_journal_place);
    suite_add_tcase(su, tc);
    return su;
}

const check_program_t check_program = {.suite = reattach_suite, .scratch = "kvtra"};
