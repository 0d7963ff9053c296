/*
 * log.c - key=value event lines on stderr (see log.h).
 *
 * The line is formatted into a stack buffer and written with a single write(2); a line longer
 * than the buffer is truncated and ends with "...". Logging never allocates and never fails the
 * caller.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static config_log_level_t log_level = LOG_INFO;

void log_set_level(config_log_level_t level)
{
    log_level = level;
}

int log_enabled(config_log_level_t level)
{
    return level >= log_level;
}

void log_write(config_log_level_t level, const char *event, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int k;
    va_list ap;

    if (level < log_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(line + n, sizeof line - n, ".%03ldZ level=%s event=%s ", ts.tv_nsec / 1000000,
                 config_log_level_name(level), event);
    if (k > 0 && (size_t)k < sizeof line - n)
        n += (size_t)k;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k < 0)
        k = 0;
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
