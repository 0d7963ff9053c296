/*
 * fuzz_check.h - the contract check of the libFuzzer targets: FUZZ_CHECK(c) aborts (a libFuzzer
 * crash, with the line and the condition on stderr) when c does not hold. A target defines
 * FUZZ_NAME (its name in the message) before including it.
 */
#ifndef KVT_FUZZ_CHECK_H
#define KVT_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(c)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s: check failed at line %d: %s\n", FUZZ_NAME, __LINE__, #c);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif /* KVT_FUZZ_CHECK_H */
