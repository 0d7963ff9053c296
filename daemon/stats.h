/*
 * stats.h - the status documents: GET /status (JSON) and GET /metrics (Prometheus text), both
 * rendered from one table of fields over plain stats structs.
 *
 * The engines expose their figures as plain structs (store_ram_stats_t, store_disk_stats_t with
 * disk_stats_t, session_info_t, gates_state_t, server_counters_t) and know nothing of JSON or
 * Prometheus; this module takes one snapshot of them through server_view() and renders it.
 * Every field of the documents is one row of a table in stats.c: its JSON key, where it is in
 * the snapshot, its type and, for numbers, whether it is a counter or a gauge, its unit and a
 * help text; a row that has a Prometheus family today names it (and its fixed labels). /metrics
 * is a walk of the same tables that prints the rows with a family, so the two documents cannot
 * disagree and a new status field is one row (plus its struct member in the engine).
 *
 * The JSON keys, their order and the metric families are an interface operators script against
 * (tests/integration/test_status_keys.c pins them; tests/shell/metrics_promtool.sh runs
 * `promtool check metrics` on them). Every numeric field has a family, named by the Prometheus
 * conventions from its JSON path, kind and unit (stats.c explains the rule), with HELP and TYPE.
 *
 * Threads: loop thread only (the documents read loop-owned state). Ownership: the returned
 * document is a malloc'd buffer owned by the caller.
 */
#ifndef KVT_STATS_H
#define KVT_STATS_H

#include <stddef.h>

#include "server.h"

/* GET /status: *body (malloc'd, *len bytes, NUL-terminated) is the JSON document. 0 or
 * -ENOMEM. Its size is bounded: it lists at most 256 sessions (and the 8 largest consumers) and
 * 64 namespaces; the query (the request target after '?', "" for none) "namespaces=OFFSET" lists
 * the 64 from OFFSET on (status namespaces_page says where the next page starts). */
int stats_status_json_query(const server_t *sv, const char *query, char **body, size_t *len);

/* GET /metrics: *body (malloc'd, *len bytes) is the Prometheus text. 0 or -ENOMEM. */
int stats_metrics_text(const server_t *sv, char **body, size_t *len);

/* One line for systemd's STATUS= (RAM and disk use, clients, namespaces, hit rate) into buf
 * (cap bytes, NUL-terminated). */
void stats_summary_line(const server_t *sv, char *buf, size_t cap);

#endif /* KVT_STATS_H */
