/*
 * log.c - key=value event lines on stderr (see log.h).
 *
 * The line is formatted into a stack buffer and written with a single write(2); a line longer
 * than the buffer is truncated and ends with "...". Logging never allocates and never fails the
 * caller. The level words are the table log_level_words (one list: config.c parses with it).
 * The level is an atomic (relaxed) int: a configuration reload changes it on the loop thread
 * while thread-pool workers may log.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const log_level_words[] = {"debug", "info", "warn", "error", NULL};

static _Atomic int log_level = LOG_INFO;

const char *log_level_name(log_level_t level)
{
    return (unsigned)level <= LOG_ERROR ? log_level_words[level] : "unknown";
}

int log_level_parse(const char *s, log_level_t *out)
{
    for (int i = 0; log_level_words[i] != NULL; i++) {
        if (strcmp(s, log_level_words[i]) == 0) {
            *out = (log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void log_set_level(log_level_t level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

log_level_t log_get_level(void)
{
    return (log_level_t)atomic_load_explicit(&log_level, memory_order_relaxed);
}

int log_enabled(log_level_t level)
{
    return level >= log_get_level();
}

const char *log_quote(char *buf, size_t cap, const char *s)
{
    size_t i = 0;

    if (cap == 0)
        return buf;
    for (; s != NULL && s[i] != '\0' && i + 1 < cap; i++)
        buf[i] = s[i] == '"' ? '\'' : s[i] == '\\' ? '/' : s[i];
    buf[i] = '\0';
    return buf;
}

const char *log_value(char *buf, size_t cap, const char *s)
{
    bool plain = s != NULL && s[0] != '\0';

    for (const char *p = s; plain && *p != '\0'; p++)
        plain = *p != ' ' && *p != '=' && *p != '"' && (unsigned char)*p >= 0x20 && *p != 0x7f;
    if (plain || cap < 3)
        return log_quote(buf, cap, s); /* nothing to change: a copy */
    buf[0] = '"';
    log_quote(buf + 1, cap - 2, s);
    strcat(buf, "\"");
    return buf;
}

void log_write(log_level_t level, const char *event, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int k;
    va_list ap;

    if (level < log_get_level())
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(line + n, sizeof line - n, ".%03ldZ level=%s event=%s ", ts.tv_nsec / 1000000,
                 log_level_name(level), event);
    if (k > 0 && (size_t)k < sizeof line - n)
        n += (size_t)k;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k < 0)
        k = 0;
    {
        /* One event, one line (0.2.7): values may come from clients (a namespace's model name
         * holds any byte but NUL), and a newline in one forged a line of its own. Control bytes
         * of the rest become '?'. */
        size_t end = (size_t)k >= sizeof line - n ? sizeof line - 1 : n + (size_t)k;
        for (size_t i = n; i < end; i++)
            if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
                line[i] = '?';
    }
    if ((size_t)k >= sizeof line - n - 1) {
        n = sizeof line - 5;
        line[n++] = '.';
        line[n++] = '.';
        line[n++] = '.';
    } else {
        n += (size_t)k;
    }
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}
