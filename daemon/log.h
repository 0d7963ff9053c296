/*
 * log.h - one-line, key=value event logging to stderr, and the log levels.
 *
 * Every line reads "ts=<RFC 3339 UTC> level=<level> event=<name> key=value ...". Callers pass
 * the event name and the key=value rest as a printf format. Control bytes in the rest become '?'
 * (values may come from clients: a newline must not make a line of its own); a value that may
 * hold spaces or quotes is written quoted through log_quote(). Lines are written with one write(2)
 * so that concurrent writers (the thread pool, later) never interleave within a line.
 *
 * The level type and its words ("debug", "info", "warn", "error") live here, at the bottom of
 * the daemon: config.c parses the "log.level" key with log_level_parse(), and nothing in this
 * module depends on the configuration.
 *
 * Threads: any thread. The level is set at start-up and by a configuration reload (on the loop
 * thread); other threads may log meanwhile (it is read atomically).
 */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include <stddef.h>

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;

/* The words of the levels, indexed by log_level_t, NULL-terminated. */
extern const char *const log_level_words[];

/* The word of a level, or "unknown" for a value that is none. */
const char *log_level_name(log_level_t level);

/* Parses a level word: 0 and *out, or -1 when s is none of log_level_words. */
int log_level_parse(const char *s, log_level_t *out);

void log_set_level(log_level_t level);
log_level_t log_get_level(void);
int log_enabled(log_level_t level);

void log_write(log_level_t level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s as the inside of a quoted value, into buf (cap bytes, truncated): '"' becomes '\'' and '\\'
 * becomes '/', so that key="..." stays one value. Returns buf. */
const char *log_quote(char *buf, size_t cap, const char *s);
/* s as an unquoted key=value value when it holds no space, '=', '"' or control byte (so names
 * log as they always did), else quoted as log_quote does, with the quotes. Returns buf. */
const char *log_value(char *buf, size_t cap, const char *s);

#define log_debug(ev, ...) log_write(LOG_DEBUG, ev, __VA_ARGS__)
#define log_info(ev, ...) log_write(LOG_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...) log_write(LOG_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_write(LOG_ERROR, ev, __VA_ARGS__)

#endif /* KVT_LOG_H */
