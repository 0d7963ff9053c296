/*
 * reload.h - configuration reload (SIGHUP, `systemctl reload kvtierd`).
 *
 * The file given with -c is read and validated again exactly as at start-up (config_load, the
 * same code as `kvtierd --check-config`). An invalid file is refused with a log line naming the
 * key (event reload_failed) and the daemon keeps running on the configuration it has. A valid
 * one is merged key by key (config_merge_live): the live keys take their new values at once, the
 * others keep their running values and are logged as needing a restart (event reload_key
 * action=restart_required). The outcome is counted in the server's config state (status
 * "config").
 *
 * Threads: loop thread only (the signal callback).
 */
#ifndef KVT_RELOAD_H
#define KVT_RELOAD_H

#include "config.h"
#include "server.h"

/* Reloads path into cfg (the config the daemon runs on) and applies it to sv. Returns 0 when the
 * file was valid (applied), -1 when it was refused. */
int reload_config(const char *path, config_t *cfg, server_t *sv);

#endif /* KVT_RELOAD_H */
