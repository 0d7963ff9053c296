/*
 * check_main.h - the one main() of every Check test program (check_main.c).
 *
 * A test program does not write main(): it defines check_program, which names the function that
 * builds its suite and, for a program whose tests start daemons or write files, the prefix of a
 * scratch directory for the whole run. main() creates that directory (/tmp/<prefix>-XXXXXX), builds
 * the suite, runs every test with CK_ENV (CK_VERBOSITY, CK_RUN_SUITE and CK_RUN_CASE apply; the
 * default prints failures only), removes the directory after the run so that what failed tests
 * left there does not pile up, and exits 0 when no test failed, 1 otherwise. Arena files outside
 * it (/dev/shm) that a test's daemon used are registered with check_register_arena and removed
 * at the end of the run too (0.2.10): a failed test exits before its own cleanup, and its arena
 * used to stay in /dev/shm (RAM) until the machine restarted.
 *
 * Threads: the suite function runs once in the parent process before any test; Check forks each
 * test, so a test may read check_scratch_dir() but must not change process-wide state it relies
 * on in later tests.
 */
#ifndef KVT_TEST_CHECK_MAIN_H
#define KVT_TEST_CHECK_MAIN_H

#include <check.h>

typedef struct {
    Suite *(*suite)(void); /* builds the program's suite (setup the whole run needs goes here) */
    const char *scratch;   /* NULL, or the prefix of the run's scratch directory under /tmp */
} check_program_t;

/* Defined by each test program. */
extern const check_program_t check_program;

/* The run's scratch directory, "" when check_program.scratch is NULL. */
const char *check_scratch_dir(void);

/* Records arena file path (from a test, in its forked process) for removal by main() after the
 * run, with check_unlink_arena; a no-op without a scratch directory. Async-signal-unsafe. */
void check_register_arena(const char *path);

/* Removes a directory tree (what is inside first, links not followed); returns 0 or -1. */
int check_rmtree(const char *path);

/* Removes an arena file the daemon kept (ram.reattach) and its journal directory beside it
 * (<path>.d, the journal's default place for an arena on a tmpfs: store_reattach.c). */
void check_unlink_arena(const char *path);

#endif /* KVT_TEST_CHECK_MAIN_H */
