/*
 * reload.c - configuration reload (see reload.h).
 *
 * Design: the new file is loaded into a scratch config_t (a failed load leaves everything as it
 * was); config_merge_live() then writes its live keys into the running config in place, which
 * is safe because every live key is read where it is used, on the loop thread, and this runs on
 * the loop thread between two callbacks. What the parts of the daemon hold rather than read
 * (the log level, each namespace's gate settings, the sweep interval) is applied after the
 * merge.
 *
 * Threads: loop thread only.
 */
#include "reload.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void key_changed(void *arg, const char *path, bool live)
{
    (void)arg;
    log_info("reload_key", "key=%s action=%s", path, live ? "applied" : "restart_required");
}

int reload_config(const char *path, config_t *cfg, server_t *sv)
{
    server_config_state_t *st = server_config_state(sv);
    config_t *next = malloc(sizeof *next);
    char err[512];
    int restart;

    if (next == NULL || config_load(path, next, err, sizeof err) != 0) {
        if (next == NULL)
            snprintf(err, sizeof err, "out of memory");
        st->reload_errors++;
        snprintf(st->last_error, sizeof st->last_error, "%s", err);
        {
            char q[sizeof err];
            log_error("reload_failed", "path=%s error=\"%s\" action=kept_running_config", path,
                      log_quote(q, sizeof q, err)); /* its text quotes the bad value */
        }
        free(next);
        return -1;
    }
    restart = config_merge_live(cfg, next, key_changed, NULL);
    free(next);
    log_set_level(cfg->log.level);
    server_reconfigure(sv);
    st->reloads++;
    st->restart_pending = (uint32_t)restart;
    st->last_error[0] = '\0';
    log_info("reload", "path=%s restart_required=%d log_level=%s", path, restart,
             log_level_name(cfg->log.level));
    return 0;
}
