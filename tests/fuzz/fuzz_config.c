/*
 * fuzz_config.c - libFuzzer target for the configuration loader (daemon/config.h):
 * config_load_string over the defaults, and config_dump.
 *
 * The input is the text of a configuration file (NUL-terminated in its own allocation; the loader
 * reads a C string). The contract, checked beyond "no sanitizer report" (a failure aborts):
 *  - a failure returns -1 with a non-empty one-line message and leaves the config untouched
 *    (byte for byte the defaults it was given);
 *  - a success gives a config that dumps (config_dump) to a document that loads again into the
 *    same config, and dumps again to the same text: load and dump agree on every key, value and
 *    range, whatever the input set.
 * Threads: single-threaded. Invariants: no state survives an input; everything is freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define FUZZ_NAME "fuzz_config"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    config_t *cfg = malloc(sizeof *cfg), *def = malloc(sizeof *def), *again = malloc(sizeof *again);
    char *text = malloc(size + 1), err[512];
    char *dump, *dump2;

    if (cfg == NULL || def == NULL || again == NULL || text == NULL)
        abort();
    if (size > 0)
        memcpy(text, data, size);
    text[size] = '\0';
    /* memset first: the padding of the structs compares too */
    memset(cfg, 0, sizeof *cfg);
    memset(def, 0, sizeof *def);
    config_defaults(cfg);
    config_defaults(def);
    err[0] = '\0';
    if (config_load_string(text, cfg, err, sizeof err) != 0) {
        FUZZ_CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
        FUZZ_CHECK(memcmp(cfg, def, sizeof *cfg) == 0);
    } else {
        dump = config_dump(cfg);
        FUZZ_CHECK(dump != NULL);
        memset(again, 0, sizeof *again);
        config_defaults(again);
        FUZZ_CHECK(config_load_string(dump, again, err, sizeof err) == 0);
        dump2 = config_dump(again);
        FUZZ_CHECK(dump2 != NULL && strcmp(dump, dump2) == 0);
        free(dump);
        free(dump2);
    }
    free(cfg);
    free(def);
    free(again);
    free(text);
    return 0;
}
