/*
 * log.h - one-line, key=value event logging to stderr.
 *
 * Every line reads "ts=<RFC 3339 UTC> level=<level> event=<name> key=value ...". Callers pass
 * the event name and the key=value rest as a printf format. Lines are written with one write(2)
 * so that concurrent writers (the thread pool, later) never interleave within a line.
 *
 * Threads: any thread. The level is set once at start-up before other threads exist.
 */
#ifndef KVT_LOG_H
#define KVT_LOG_H

#include "config.h"

void log_set_level(config_log_level_t level);
int log_enabled(config_log_level_t level);

void log_write(config_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(ev, ...) log_write(LOG_DEBUG, ev, __VA_ARGS__)
#define log_info(ev, ...) log_write(LOG_INFO, ev, __VA_ARGS__)
#define log_warn(ev, ...) log_write(LOG_WARN, ev, __VA_ARGS__)
#define log_error(ev, ...) log_write(LOG_ERROR, ev, __VA_ARGS__)

#endif /* KVT_LOG_H */
