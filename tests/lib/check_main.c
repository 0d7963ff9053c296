/*
 * check_main.c - main() of every Check test program (see check_main.h): the run's scratch
 * directory, the suite of check_program, one SRunner, the exit status.
 *
 * Design: every test program used to write this main itself, with small differences (CK_NORMAL
 * or CK_ENV, a scratch root or not); there is now one. CK_ENV is the one kept: without the
 * environment variables it prints what CK_NORMAL prints.
 *
 * Threads: single-threaded (the parent of Check's forked tests).
 */
#include "check_main.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch_dir[64];

const char *check_scratch_dir(void)
{
    return scratch_dir;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

int check_rmtree(const char *path)
{
    return nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

void check_unlink_arena(const char *path)
{
    char dir[4096];

    (void)unlink(path);
    if ((size_t)snprintf(dir, sizeof dir, "%s.d", path) < sizeof dir)
        (void)check_rmtree(dir);
}

#define ARENAS_FILE "arenas" /* in the scratch directory: one registered path per line */

void check_register_arena(const char *path)
{
    char list[4200];
    FILE *f;

    if (scratch_dir[0] == '\0' || path[0] == '\0' || strchr(path, '\n') != NULL ||
        (size_t)snprintf(list, sizeof list, "%s/%s", scratch_dir, ARENAS_FILE) >= sizeof list)
        return;
    f = fopen(list, "a");
    if (f == NULL)
        return;
    fprintf(f, "%s\n", path);
    fclose(f);
}

/* Removes what check_register_arena recorded (a path already gone is no error). */
static void unlink_registered(void)
{
    char list[4200], line[4200];
    FILE *f;

    if ((size_t)snprintf(list, sizeof list, "%s/%s", scratch_dir, ARENAS_FILE) >= sizeof list ||
        (f = fopen(list, "r")) == NULL)
        return;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] != '\0')
            check_unlink_arena(line);
    }
    fclose(f);
}

int main(void)
{
    SRunner *sr;
    int failed, n;

    if (check_program.scratch != NULL) {
        n = snprintf(scratch_dir, sizeof scratch_dir, "/tmp/%s-XXXXXX", check_program.scratch);
        if (n <= 0 || (size_t)n >= sizeof scratch_dir || mkdtemp(scratch_dir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
    }
    sr = srunner_create(check_program.suite());
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (scratch_dir[0] != '\0') {
        unlink_registered();
        check_rmtree(scratch_dir);
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
