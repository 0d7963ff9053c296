/*
 * tool.h - what the programs (kvtierctl, kvtier-bench, kvtier-replay) and the test harness
 * share: one HTTP request on the daemon's Unix status socket, the endpoints read from a daemon
 * config file, and the messages and option parsing of a command line program.
 *
 * Messages go to stderr as "<name>: <what>", name being the program's (tool_init). The defaults
 * below are kvtierd's own (`kvtierd --print-defaults`), for a config that does not set a key.
 *
 * Threads: tool_init() before any other thread starts; everything else may be called from any
 * thread (nothing here keeps state besides the name and usage text set by tool_init).
 */
#ifndef KVT_TOOL_H
#define KVT_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kvtier.h"

#define TOOL_DEFAULT_CONFIG "/etc/kvtier/kvtierd.json"
#define TOOL_DEFAULT_ENDPOINT "ipc:///run/kvtier/kvtier.zmq"
#define TOOL_DEFAULT_STATUS_SOCKET "/run/kvtier/status.sock"
#define TOOL_EXIT_USAGE 2         /* every program's exit status for a usage error */
#define TOOL_HTTP_MAX (64u << 20) /* the largest response tool_http_request() accepts */
#define TOOL_CONTENT_TYPE_MAX 64

/* --- the program: its name in messages, its usage text --- */

/* Sets the program name that prefixes every message and the usage text tool_usage_error()
 * prints. Both are borrowed and must outlive every other call (string literals). */
void tool_init(const char *name, const char *usage);

/* Prints "<name>: <fmt...>\n" to stderr. */
void tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "<name>: <fmt...>\n" and then the usage text to stderr; returns TOOL_EXIT_USAGE. */
int tool_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "<name>: <what>[ <obj>]: <kvt_strerror(err)>[ (<the daemon's text>)]" to stderr; obj
 * and c may be NULL (c: no daemon text). */
void tool_kvt_error(const char *what, const char *obj, const kvt_client_t *c, int err);

/* --- numbers and words on the command line --- */

/* Parses decimal, or hexadecimal after 0x: no sign, no trailing characters, at most max.
 * Returns 0, or -1 (nothing stored). */
int tool_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* The value val of option name as an integer in [min, max]: 0, or tool_usage_error()'s status
 * after "NAME needs a value" (val NULL) or "NAME: expected an integer in MIN..MAX, got 'VAL'". */
int tool_opt_u64(const char *name, const char *val, uint64_t min, uint64_t max, uint64_t *out);

/* "auto", "frames", "shm" <-> KVT_DATA_PATH_*: the value, or -1 for another word; the name,
 * or "?" for another value. */
int tool_data_path_parse(const char *word);
const char *tool_data_path_name(int data_path);

/* --- the daemon's config file --- */

/*
 * Reads server.endpoint into *endpoint and server.status_socket into *status_socket (either
 * pointer may be NULL: not wanted). Each result is a new string owned by the caller, or NULL when
 * the config does not set the key. Both keys are checked whether wanted or not. Returns 0, or -1
 * after a message naming the file: unreadable or invalid JSON ("config PATH: line N: ..."), a key
 * that is not a string ("config PATH: server.KEY: not a string"), out of memory.
 */
int tool_config_endpoints(const char *path, char **endpoint, char **status_socket);

/* --- HTTP/1.0 on a Unix socket (the daemon's status socket) --- */

typedef struct {
    int code;                                 /* HTTP status code */
    char content_type[TOOL_CONTENT_TYPE_MAX]; /* the Content-Type header, "" without one */
    char *body;                               /* owned, NUL-terminated */
    size_t body_len;
} tool_http_reply_t;

/*
 * One request "METHOD URL HTTP/1.0" on the Unix socket at sock_path, read until the server
 * closes, everything bounded by timeout_ms from the call. Returns 0 with *reply filled (free it
 * with tool_http_reply_free), or a positive errno value: the socket's own errors (ENOENT,
 * ECONNREFUSED, ...), ENAMETOOLONG (path longer than sun_path), ETIMEDOUT, EFBIG (response larger
 * than TOOL_HTTP_MAX), EBADMSG (not an HTTP response), ENOMEM. *reply is untouched on error.
 */
int tool_http_request(const char *sock_path, const char *method, const char *url, int timeout_ms,
                      tool_http_reply_t *reply);
void tool_http_reply_free(tool_http_reply_t *reply);

/*
 * GET /status parsed: 0 with *doc (a new reference) and, when body is not NULL, *body (the
 * document's text as served, owned, NUL-terminated); or -1 after a message "status SOCK: ..."
 * (the errno text of tool_http_request, "HTTP status N", or "invalid JSON: ...").
 */
int tool_status_get(const char *sock_path, int timeout_ms, json_t **doc, char **body);

/* The member at a dotted path of obj ("ram.used_bytes", "server.errors.malformed"), borrowed;
 * NULL when any step is missing or not an object. */
json_t *tool_json_path(const json_t *obj, const char *dotted);

/* b bytes for people ("512 B", "1.5 GiB") into buf (len bytes); returns buf, or "?" for b < 0
 * (a field that was absent). */
const char *tool_human_bytes(double b, char *buf, size_t len);

/* Monotonic milliseconds. */
int64_t tool_now_ms(void);

#endif /* KVT_TOOL_H */
