/*
 * kvtierctl.c - command line tool for a running kvtierd: status (once, or a live view with
 * --watch, watch.c), drop (invalidation: POST /admin/drop on the status socket), and the debug
 * verbs put, get, lookup and tally over the client library.
 *
 *   kvtierctl [-c CONFIG | -e ENDPOINT -s STATUS_SOCKET] [--ns NAME] [--rank R] [--world W]
 *             [--chunk-tokens N] [--mla] [--timeout MS] VERB [--json] ...
 *
 * Scripts rely on this interface: the verbs, their arguments, their output (one word or number
 * per verb, or one JSON object on stdout with --json) and the exit codes (0 ok, 1 miss on get,
 * 2 usage error, 3 daemon error, timeout or I/O error) do not change. `drop` prints the number
 * of chunks it removed (exit 1 when no namespace matched); `status --watch` is for people.
 *
 * Design: one verb per run, one client (or one status socket connection) per run. Global
 * options may also follow the verb. The endpoint and the status socket come from -e / -s, else
 * from the daemon's JSON config (-c, default /etc/kvtier/kvtierd.json), read only when needed; a
 * key the config does not set has the daemon's default. `status` speaks HTTP/1.0 over the Unix
 * status socket itself (tool.h, no curl), bounded by --timeout. Errors go to stderr as
 * "kvtierctl: <what>: <reason>", with the daemon's text when it sent one.
 *
 * Threads: single-threaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "kvtier.h"
#include "tool.h"
#include "watch.h"

#define CTL_DEFAULT_TIMEOUT_MS 5000
#define KVTIERCTL_NS_MAX 255 /* kvt_ns_desc_t.model: 1..255 bytes (kvtier.h) */

enum { EXIT_MISS = 1, EXIT_USAGE = TOOL_EXIT_USAGE, EXIT_FAIL = 3 };

typedef struct {
    const char *config;
    const char *endpoint;
    const char *status_socket;
    char *config_endpoint; /* owned: read from the config file */
    char *config_status;   /* owned */
    kvt_ns_desc_t ns;
    int ns_given; /* --ns was on the command line (drop needs it) */
    uint32_t rank;
    int timeout_ms;
    int data_path; /* KVT_DATA_PATH_* */
    int json;
    /* verb arguments */
    int nargs;
    char **args;
} ctl_t;

static const char usage_text[] =
    "usage: kvtierctl [-c CONFIG | -e ENDPOINT -s STATUS_SOCKET] [--ns NAME] [--rank R]\n"
    "                 [--world W] [--chunk-tokens N] [--mla] [--timeout MS]\n"
    "                 [--data-path auto|frames|shm] VERB [--json] ...\n"
    "verbs:\n"
    "  status [--json]                             daemon status (status socket)\n"
    "  status --watch [SECONDS] [--count N]        live view, redrawn every SECONDS (2)\n"
    "  drop --ns NAME [--revision R]               remove a namespace's chunks (RAM and disk)\n"
    "  put [--op ID] [--parent HASH] HASH FILE     save FILE as chunk HASH\n"
    "  get HASH FILE                               load chunk HASH into FILE (exit 1: miss)\n"
    "  lookup [--all-ranks] [--lease] [--prompt-tokens N] [--hbm-tokens N] HASH...\n"
    "                                              prefix hit in chunks\n"
    "  tally PAID PROBES [--engine ID] [--served-tokens N --lookup-tokens N]\n"
    "        [--reason NAME=COUNT...]              push verdict (and token) totals, print the\n"
    "                                              gate state\n"
    "HASH is 32 hex digits. Defaults: -c " TOOL_DEFAULT_CONFIG ", --ns kvtierctl, --rank 0,\n"
    "--world 1, --chunk-tokens 256, --timeout 5000, --data-path frames.\n"
    "drop prints the number of chunks removed. Exit: 0 ok, 1 miss (get; drop: no such\n"
    "namespace), 2 usage, 3 error.\n";

static int fail_sys(const char *what, const char *obj, int err)
{
    tool_error("%s%s%s: %s", what, obj ? " " : "", obj ? obj : "", strerror(err));
    return EXIT_FAIL;
}

static int fail_kvt(const char *what, const char *obj, const kvt_client_t *c, int err)
{
    tool_kvt_error(what, obj, c, err);
    return EXIT_FAIL;
}

static int opt_hash(const char *name, const char *val, kvt_hash_t *h)
{
    if (val == NULL)
        return tool_usage_error("%s needs a value", name);
    if (kvt_hash_parse(val, h) != 0)
        return tool_usage_error("%s: expected 32 hex digits, got '%s'", name, val);
    return 0;
}

/*
 * Parses the global option at argv[*i] if it is one. Returns 1 when consumed (*i advanced past
 * its value), 0 when argv[*i] is not a global option, EXIT_USAGE (after the message) on error.
 */
static int parse_global(ctl_t *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    uint64_t n;
    int rc;

    if (strcmp(a, "--json") == 0) {
        o->json = 1;
        *i += 1;
        return 1;
    }
    if (strcmp(a, "--mla") == 0) {
        o->ns.mla = 1;
        *i += 1;
        return 1;
    }
    if (strcmp(a, "-c") == 0 || strcmp(a, "-e") == 0 || strcmp(a, "-s") == 0 ||
        strcmp(a, "--ns") == 0) {
        if (v == NULL || v[0] == '\0')
            return tool_usage_error("%s needs a value", a);
        if (a[1] == 'c')
            o->config = v;
        else if (a[1] == 'e')
            o->endpoint = v;
        else if (a[1] == 's')
            o->status_socket = v;
        else if (strlen(v) > KVTIERCTL_NS_MAX)
            return tool_usage_error("--ns: a namespace name is at most %d bytes (this one is %zu)",
                                    KVTIERCTL_NS_MAX, strlen(v));
        else
            o->ns.model = v;
        o->ns_given |= a[1] == '-';
        *i += 2;
        return 1;
    }
    if (strcmp(a, "--rank") == 0) {
        if ((rc = tool_opt_u64(a, v, 0, 1023, &n)) != 0)
            return rc;
        o->rank = (uint32_t)n;
    } else if (strcmp(a, "--world") == 0) {
        if ((rc = tool_opt_u64(a, v, 1, 1024, &n)) != 0)
            return rc;
        o->ns.world_size = (uint32_t)n;
    } else if (strcmp(a, "--chunk-tokens") == 0) {
        if ((rc = tool_opt_u64(a, v, 1, UINT32_MAX, &n)) != 0)
            return rc;
        o->ns.chunk_tokens = (uint32_t)n;
    } else if (strcmp(a, "--data-path") == 0) {
        if (v == NULL)
            return tool_usage_error("%s needs a value", a);
        if ((o->data_path = tool_data_path_parse(v)) < 0)
            return tool_usage_error("--data-path: expected auto, frames or shm, got '%s'", v);
    } else if (strcmp(a, "--timeout") == 0) {
        if ((rc = tool_opt_u64(a, v, 1, 24u * 3600 * 1000, &n)) != 0)
            return rc;
        o->timeout_ms = (int)n;
    } else {
        return 0;
    }
    *i += 2;
    return 1;
}

/* Reads server.endpoint and server.status_socket from the daemon's config, when one of the
 * two is needed and was not given; a key the config does not set has the daemon's default. */
static int resolve_endpoints(ctl_t *o, int need_endpoint, int need_status)
{
    const char *path = o->config != NULL ? o->config : TOOL_DEFAULT_CONFIG;

    if ((!need_endpoint || o->endpoint != NULL) && (!need_status || o->status_socket != NULL))
        return 0;
    if (tool_config_endpoints(path, &o->config_endpoint, &o->config_status) != 0)
        return EXIT_FAIL;
    if (o->config_endpoint == NULL && (o->config_endpoint = strdup(TOOL_DEFAULT_ENDPOINT)) == NULL)
        return fail_sys("config", path, ENOMEM);
    if (o->config_status == NULL && (o->config_status = strdup(TOOL_DEFAULT_STATUS_SOCKET)) == NULL)
        return fail_sys("config", path, ENOMEM);
    if (o->endpoint == NULL)
        o->endpoint = o->config_endpoint;
    if (o->status_socket == NULL)
        o->status_socket = o->config_status;
    return 0;
}

static int ctl_connect(ctl_t *o, kvt_client_t **c)
{
    kvt_connect_opts_t opts = {.timeout_ms = o->timeout_ms, .data_path = o->data_path};
    int rc;

    if (o->rank >= o->ns.world_size)
        return tool_usage_error("--rank %" PRIu32 " must be less than --world %" PRIu32, o->rank,
                                o->ns.world_size);
    rc = resolve_endpoints(o, 1, 0);
    if (rc != 0)
        return rc;
    rc = kvt_connect(o->endpoint, &o->ns, o->rank, &opts, c);
    if (rc != 0)
        return fail_kvt("connect", o->endpoint, NULL, rc);
    return 0;
}

/* Prints obj (stolen) as one line of JSON on stdout. */
static int print_json(json_t *obj)
{
    int rc = 0;

    if (obj == NULL || json_dumpf(obj, stdout, JSON_COMPACT) != 0)
        rc = fail_sys("json output", NULL, ENOMEM);
    else
        fputc('\n', stdout);
    json_decref(obj);
    return rc;
}

static json_t *json_hash(const kvt_hash_t *h)
{
    char hex[33];

    kvt_hash_format(h, hex);
    return json_string(hex);
}

/* Reads the whole of path into a new buffer (*buf owned by the caller). */
static int read_file(const char *path, void **buf, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    int fd, err = 0;

    if (b == NULL)
        return fail_sys("read", path, ENOMEM);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
        goto fail;
    }
    for (;;) {
        ssize_t r;
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                err = ENOMEM;
                break;
            }
            b = nb;
            cap *= 2;
        }
        r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            err = errno;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (err != 0)
        goto fail;
    *buf = b;
    *len = n;
    return 0;
fail:
    free(b);
    return fail_sys("read", path, err);
}

static int write_file(const char *path, const void *buf, size_t len)
{
    const char *p = buf;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), err = 0;

    if (fd < 0)
        return fail_sys("write", path, errno);
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            err = errno;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (close(fd) != 0 && err == 0)
        err = errno;
    return err != 0 ? fail_sys("write", path, err) : 0;
}

static const char *outcome_name(uint8_t o)
{
    switch (o) {
    case KVT_SAVE_STORED:
        return "stored";
    case KVT_SAVE_EXISTS:
        return "exists";
    case KVT_SAVE_NOSPACE:
        return "nospace";
    case KVT_SAVE_DECLINED:
        return "declined";
    default:
        return "unknown";
    }
}

static int verb_put(ctl_t *o, int argc, char **argv)
{
    kvt_save_opts_t sopts = {0};
    kvt_hash_t hash, parent;
    kvt_client_t *c = NULL;
    const char *pos[2];
    void *buf = NULL;
    size_t len, npos = 0;
    uint8_t outcome;
    int rc;

    for (int i = 0; i < argc;) {
        uint64_t v;
        if ((rc = parse_global(o, argc, argv, &i)) != 0) {
            if (rc != 1)
                return rc;
        } else if (strcmp(argv[i], "--op") == 0) {
            if ((rc = tool_opt_u64("--op", i + 1 < argc ? argv[i + 1] : NULL, 0, UINT64_MAX, &v)))
                return rc;
            sopts.has_op_id = 1;
            sopts.op_id = v;
            i += 2;
        } else if (strcmp(argv[i], "--parent") == 0) {
            if ((rc = opt_hash("--parent", i + 1 < argc ? argv[i + 1] : NULL, &parent)) != 0)
                return rc;
            sopts.parent = &parent;
            i += 2;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return tool_usage_error("put: unknown option %s", argv[i]);
        } else {
            if (npos == 2)
                return tool_usage_error("put: too many arguments");
            pos[npos++] = argv[i++];
        }
    }
    if (npos != 2)
        return tool_usage_error("put: expected HASH FILE");
    if ((rc = opt_hash("put: HASH", pos[0], &hash)) != 0)
        return rc;
    if ((rc = read_file(pos[1], &buf, &len)) != 0)
        return rc;
    if (len == 0) {
        free(buf);
        return tool_usage_error("put: %s is empty (a chunk holds at least one byte)", pos[1]);
    }
    if ((rc = ctl_connect(o, &c)) != 0)
        goto out;
    rc = kvt_save(c, &hash, 1, (const void *const *)&buf, &len, &sopts, &outcome);
    if (rc != 0) {
        rc = fail_kvt("put", pos[0], c, rc);
        goto out;
    }
    if (o->json)
        rc = print_json(json_pack("{s:o,s:I,s:s}", "hash", json_hash(&hash), "bytes",
                                  (json_int_t)len, "outcome", outcome_name(outcome)));
    else
        printf("%s\n", outcome_name(outcome));
out:
    kvt_close(&c);
    free(buf);
    return rc;
}

static int verb_get(ctl_t *o, int argc, char **argv)
{
    kvt_server_info_t info;
    kvt_client_t *c = NULL;
    kvt_hash_t hash;
    const char *pos[2];
    void *buf = NULL;
    size_t cap, len = 0, nhit = 0, npos = 0;
    int rc;

    for (int i = 0; i < argc;) {
        if ((rc = parse_global(o, argc, argv, &i)) != 0) {
            if (rc != 1)
                return rc;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return tool_usage_error("get: unknown option %s", argv[i]);
        } else {
            if (npos == 2)
                return tool_usage_error("get: too many arguments");
            pos[npos++] = argv[i++];
        }
    }
    if (npos != 2)
        return tool_usage_error("get: expected HASH FILE");
    if ((rc = opt_hash("get: HASH", pos[0], &hash)) != 0)
        return rc;
    if ((rc = ctl_connect(o, &c)) != 0)
        return rc;
    kvt_server_info(c, &info);
    /* The daemon never stores more than max_chunk_bytes; untouched pages cost nothing. */
    cap = info.max_chunk_bytes > SIZE_MAX ? SIZE_MAX : (size_t)info.max_chunk_bytes;
    buf = malloc(cap);
    if (buf == NULL) {
        rc = fail_sys("get", pos[0], ENOMEM);
        goto out;
    }
    rc = kvt_load(c, &hash, 1, &buf, &cap, &len, &nhit);
    if (rc != 0) {
        rc = fail_kvt("get", pos[0], c, rc);
        goto out;
    }
    if (nhit == 0) {
        rc = EXIT_MISS;
        if (o->json) {
            int jrc = print_json(json_pack("{s:o,s:b}", "hash", json_hash(&hash), "hit", 0));
            rc = jrc != 0 ? jrc : rc;
        } else {
            printf("miss\n");
        }
        goto out;
    }
    if ((rc = write_file(pos[1], buf, len)) != 0)
        goto out;
    if (o->json)
        rc = print_json(json_pack("{s:o,s:b,s:I}", "hash", json_hash(&hash), "hit", 1, "bytes",
                                  (json_int_t)len));
    else
        printf("hit %zu\n", len);
out:
    kvt_close(&c);
    free(buf);
    return rc;
}

static int verb_lookup(ctl_t *o, int argc, char **argv)
{
    kvt_lookup_opts_t lopts = {0};
    kvt_lookup_result_t res = {0};
    uint32_t rank_hits[1024];
    kvt_client_t *c = NULL;
    kvt_hash_t *hashes;
    size_t n = 0;
    int rc;

    hashes = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *hashes);
    if (hashes == NULL)
        return fail_sys("lookup", NULL, ENOMEM);
    for (int i = 0; i < argc;) {
        uint64_t v;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if ((rc = parse_global(o, argc, argv, &i)) != 0) {
            if (rc != 1)
                goto out;
        } else if (strcmp(argv[i], "--all-ranks") == 0) {
            lopts.all_ranks = 1;
            i++;
        } else if (strcmp(argv[i], "--lease") == 0) {
            lopts.lease = 1;
            i++;
        } else if (strcmp(argv[i], "--prompt-tokens") == 0 ||
                   strcmp(argv[i], "--hbm-tokens") == 0) {
            if ((rc = tool_opt_u64(argv[i], val, 0, UINT64_MAX, &v)) != 0)
                goto out;
            if (argv[i][2] == 'p')
                lopts.prompt_tokens = v;
            else
                lopts.hbm_tokens = v;
            lopts.has_prompt = 1;
            i += 2;
        } else if (argv[i][0] == '-') {
            rc = tool_usage_error("lookup: unknown option %s", argv[i]);
            goto out;
        } else {
            if ((rc = opt_hash("lookup: HASH", argv[i], &hashes[n])) != 0)
                goto out;
            n++;
            i++;
        }
    }
    if (n == 0) {
        rc = tool_usage_error("lookup: expected at least one HASH");
        goto out;
    }
    if ((rc = ctl_connect(o, &c)) != 0)
        goto out;
    res.rank_hits = rank_hits;
    res.rank_hits_cap = sizeof rank_hits / sizeof rank_hits[0];
    rc = kvt_lookup(c, hashes, n, &lopts, &res);
    if (rc != 0) {
        rc = fail_kvt("lookup", NULL, c, rc);
        goto out;
    }
    if (o->json) {
        json_t *obj = json_pack("{s:I,s:I,s:b,s:b,s:I}", "hit", (json_int_t)res.hit, "chunks",
                                (json_int_t)n, "skipped", res.skipped, "leased", res.leased,
                                "lease_ms", (json_int_t)res.lease_ms);
        if (obj != NULL && lopts.all_ranks) {
            json_t *arr = json_array();
            for (uint32_t r = 0; r < res.nranks; r++)
                json_array_append_new(arr, json_integer(rank_hits[r]));
            json_object_set_new(obj, "rank_hits", arr);
        }
        rc = print_json(obj);
    } else {
        printf("%" PRIu32 "\n", res.hit);
    }
out:
    kvt_close(&c);
    free(hashes);
    return rc;
}

static int verb_tally(ctl_t *o, int argc, char **argv)
{
    kvt_reason_t reasons[16];
    kvt_gate_state_t st;
    kvt_client_t *c = NULL;
    kvt_tally_tokens_t tokens = {0};
    uint64_t engine = 0, totals[2];
    size_t nreasons = 0, npos = 0;
    int rc, in_reasons = 0, has_served = 0, has_lookup = 0;

    for (int i = 0; i < argc;) {
        char *eq;
        if ((rc = parse_global(o, argc, argv, &i)) != 0) {
            if (rc != 1)
                return rc;
            in_reasons = 0;
        } else if (strcmp(argv[i], "--engine") == 0 || strcmp(argv[i], "--served-tokens") == 0 ||
                   strcmp(argv[i], "--lookup-tokens") == 0) {
            uint64_t *to = strcmp(argv[i], "--engine") == 0          ? &engine
                           : strcmp(argv[i], "--served-tokens") == 0 ? &tokens.served_tokens_total
                                                                     : &tokens.lookup_tokens_total;
            if ((rc = tool_opt_u64(argv[i], i + 1 < argc ? argv[i + 1] : NULL, 0,
                                   to == &engine ? UINT64_MAX : INT64_MAX, to)) != 0)
                return rc;
            has_served |= to == &tokens.served_tokens_total;
            has_lookup |= to == &tokens.lookup_tokens_total;
            in_reasons = 0;
            i += 2;
        } else if (strcmp(argv[i], "--reason") == 0) {
            if (i + 1 >= argc || strchr(argv[i + 1], '=') == NULL)
                return tool_usage_error("--reason needs NAME=COUNT");
            in_reasons = 1;
            i++;
        } else if (argv[i][0] == '-') {
            return tool_usage_error("tally: unknown option %s", argv[i]);
        } else if (in_reasons && (eq = strchr(argv[i], '=')) != NULL) {
            size_t nl = (size_t)(eq - argv[i]);
            if (nreasons == sizeof reasons / sizeof reasons[0])
                return tool_usage_error("--reason: at most %zu reasons", nreasons);
            if (nl == 0 || nl > 48 || tool_parse_u64(eq + 1, UINT64_MAX, &reasons[nreasons].count))
                return tool_usage_error(
                    "--reason: expected NAME=COUNT (name 1..48 bytes), got '%s'", argv[i]);
            *eq = '\0';
            reasons[nreasons++].name = argv[i];
            i++;
        } else {
            in_reasons = 0;
            if (npos == 2)
                return tool_usage_error("tally: too many arguments");
            if ((rc = tool_opt_u64(npos == 0 ? "tally: PAID" : "tally: PROBES", argv[i], 0,
                                   INT64_MAX, &totals[npos])) != 0)
                return rc;
            npos++;
            i++;
        }
    }
    if (npos != 2)
        return tool_usage_error("tally: expected PAID PROBES");
    if (has_served != has_lookup)
        return tool_usage_error("tally: --served-tokens and --lookup-tokens go together");
    if ((rc = ctl_connect(o, &c)) != 0)
        return rc;
    rc = kvt_tally2(c, engine, totals[0], totals[1], has_served ? &tokens : NULL, reasons, nreasons,
                    &st);
    if (rc != 0) {
        rc = fail_kvt("tally", NULL, c, rc);
        goto out;
    }
    if (o->json)
        rc = print_json(json_pack(
            "{s:f,s:f,s:f,s:I,s:I,s:b,s:b,s:b,s:s,s:f,s:I,s:I,s:I,s:I}", "payoff", st.payoff,
            "share", st.share, "act_ema", st.act_ema, "probes", (json_int_t)st.probes, "lookups",
            (json_int_t)st.lookups, "admission_enabled", st.admission_enabled, "skip_enabled",
            st.skip_enabled, "load_bearing", st.load_bearing, "policy",
            st.policy == KVT_ADMISSION_ATOM ? "atom" : "value", "density", st.density,
            "served_tokens", (json_int_t)st.served_tokens, "regret_tokens",
            (json_int_t)st.regret_tokens, "written_tokens", (json_int_t)st.written_tokens,
            "declined_tokens", (json_int_t)st.declined_tokens));
    else
        printf(
            "payoff %.6f share %.6f act_ema %.6f probes %" PRIu64 " lookups %" PRIu64
            " admission %s skip %s load_bearing %s policy %s density %.6f served_tokens %" PRIu64
            " regret_tokens %" PRIu64 " written_tokens %" PRIu64 " declined_tokens %" PRIu64 "\n",
            st.payoff, st.share, st.act_ema, st.probes, st.lookups,
            st.admission_enabled ? "on" : "off", st.skip_enabled ? "on" : "off",
            st.load_bearing ? "yes" : "no", st.policy == KVT_ADMISSION_ATOM ? "atom" : "value",
            st.density, st.served_tokens, st.regret_tokens, st.written_tokens, st.declined_tokens);
out:
    kvt_close(&c);
    return rc;
}

/* The number at a dotted path of obj ("ram.used_bytes"), or -1 when absent. */
static double jnum(const json_t *obj, const char *path)
{
    const json_t *v = tool_json_path(obj, path);

    return json_is_number(v) ? json_number_value(v) : -1;
}

/* The bounds of contract C3 at work and the sessions that hold the most (server.top_sessions):
 * lines after the summary's, only when there is something to say. */
static void print_consumers(const json_t *st)
{
    const json_t *top = tool_json_path(st, "server.top_sessions"), *s;
    double refused = 0, stalls = jnum(st, "server.stalls"),
           dropped = jnum(st, "server.replies_dropped");
    const json_t *ref = tool_json_path(st, "server.refused");
    char a[32], b[32], c[32], d[32], e[32], f[32];
    const char *key;
    json_t *v;
    size_t i;

    json_object_foreach((json_t *)ref, key, v) refused +=
        json_is_integer(v) ? (double)json_integer_value(v) : 0;
    if (refused > 0 || stalls > 0 || dropped > 0) {
        printf("refused %.0f (", refused);
        i = 0;
        json_object_foreach((json_t *)ref, key,
                            v) if (json_is_integer(v) && json_integer_value(v) > 0)
            printf("%s%s %lld", i++ ? ", " : "", key, (long long)json_integer_value(v));
        printf("), stalled sessions %.0f, replies dropped %.0f\n", stalls, dropped);
    }
    if (json_array_size(top) == 0)
        return;
    printf("top sessions: held %s of %s per session, replies %s per session\n",
           tool_human_bytes(jnum(st, "ram.held_bytes"), a, sizeof a),
           tool_human_bytes(jnum(st, "server.limits.session_held_bytes"), b, sizeof b),
           tool_human_bytes(jnum(st, "server.limits.session_reply_bytes"), c, sizeof c));
    json_array_foreach(top, i, s)
    {
        const char *id = json_string_value(json_object_get(s, "id"));
        printf("  %s: held %s (leased %s, pinned %s, lent %s, reserved %s), %.0f in flight, "
               "%s queued, %.0f disk reads%s\n",
               id ? id : "?", tool_human_bytes(jnum(s, "held_bytes"), a, sizeof a),
               tool_human_bytes(jnum(s, "leased_bytes"), b, sizeof b),
               tool_human_bytes(jnum(s, "pinned_bytes"), c, sizeof c),
               tool_human_bytes(jnum(s, "lent_bytes"), d, sizeof d),
               tool_human_bytes(jnum(s, "reserved_bytes"), e, sizeof e), jnum(s, "in_flight"),
               tool_human_bytes(jnum(s, "reply_bytes"), f, sizeof f), jnum(s, "disk_reads"),
               json_is_true(json_object_get(s, "stalled")) ? ", stalled" : "");
    }
}

static void print_status_summary(const json_t *st)
{
    const char *version = json_string_value(json_object_get(st, "version"));
    const json_t *nss = json_object_get(st, "namespaces");
    char used[32], capacity[32];
    size_t i;
    const json_t *ns;

    printf("kvtierd %s, up %.1f s\n", version ? version : "?", jnum(st, "uptime_s"));
    printf("ram: %s used of %s, %.0f chunks\n",
           tool_human_bytes(jnum(st, "ram.used_bytes"), used, sizeof used),
           tool_human_bytes(jnum(st, "ram.capacity_bytes"), capacity, sizeof capacity),
           jnum(st, "ram.chunks"));
    printf("hits %.0f, misses %.0f, evictions %.0f\n", jnum(st, "ram.hits"), jnum(st, "ram.misses"),
           jnum(st, "ram.evictions"));
    {
        const char *dstate =
            json_string_value(json_object_get(json_object_get(st, "disk"), "state"));
        if (dstate != NULL && strcmp(dstate, "off") != 0)
            printf("disk: %s, %s used of %s, %.0f chunks, hits %.0f, misses %.0f\n", dstate,
                   tool_human_bytes(jnum(st, "disk.used_bytes"), used, sizeof used),
                   tool_human_bytes(jnum(st, "disk.capacity_bytes"), capacity, sizeof capacity),
                   jnum(st, "disk.chunks"), jnum(st, "disk.hits"), jnum(st, "disk.misses"));
    }
    printf("clients %.0f\n", jnum(st, "server.clients"));
    /* status lists 64 namespaces per page; the count is all of them (an older daemon lists all) */
    printf("namespaces %.0f\n", jnum(st, "server.namespaces_declared") >= 0
                                    ? jnum(st, "server.namespaces_declared")
                                    : (double)json_array_size(nss));
    json_array_foreach(nss, i, ns)
    {
        const char *model = json_string_value(json_object_get(ns, "model"));
        printf("  %s: %.0f chunks\n", model ? model : "?", jnum(ns, "chunks"));
    }
    if (jnum(st, "namespaces_page.next") > 0)
        printf("  ... %.0f more (GET /status?namespaces=%.0f)\n",
               jnum(st, "namespaces_page.total") - jnum(st, "namespaces_page.shown"),
               jnum(st, "namespaces_page.next"));
    print_consumers(st);
}

/* A number of seconds in [0.1, 86400] (a fraction allowed): 0, or -1. */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    double v;

    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    v = strtod(s, &end);
    if (*end != '\0' || !(v >= 0.1 && v <= 86400))
        return -1;
    *out = v;
    return 0;
}

static int verb_status(ctl_t *o, int argc, char **argv)
{
    json_t *st;
    char *body = NULL;
    double interval = 2.0;
    uint64_t count = 0;
    int rc, watch = 0;

    for (int i = 0; i < argc;) {
        if (strcmp(argv[i], "--watch") == 0) {
            watch = 1;
            i++;
            if (i < argc && argv[i][0] != '-') {
                if (parse_seconds(argv[i], &interval) != 0)
                    return tool_usage_error("--watch: expected seconds in 0.1..86400, got '%s'",
                                            argv[i]);
                i++;
            }
            continue;
        }
        if (strcmp(argv[i], "--count") == 0) {
            if ((rc = tool_opt_u64("--count", i + 1 < argc ? argv[i + 1] : NULL, 1, UINT32_MAX,
                                   &count)) != 0)
                return rc;
            i += 2;
            continue;
        }
        if ((rc = parse_global(o, argc, argv, &i)) == 0)
            return tool_usage_error("status: unexpected argument %s", argv[i]);
        if (rc != 1)
            return rc;
    }
    if (count > 0 && !watch)
        return tool_usage_error("status: --count goes with --watch");
    if (watch && o->json)
        return tool_usage_error("status: --watch draws a view; --json prints one document");
    if ((rc = resolve_endpoints(o, 0, 1)) != 0)
        return rc;
    if (watch)
        return watch_run(o->status_socket, o->timeout_ms, interval, (unsigned long)count);
    if (tool_status_get(o->status_socket, o->timeout_ms, &st, &body) != 0)
        return EXIT_FAIL;
    if (o->json) {
        size_t len = strlen(body);
        fputs(body, stdout);
        if (len == 0 || body[len - 1] != '\n')
            fputc('\n', stdout);
    } else {
        print_status_summary(st);
    }
    json_decref(st);
    free(body);
    return 0;
}

/* Appends s percent-encoded (everything but RFC 3986's unreserved characters) to buf. */
static void url_encode(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);

    for (; *s != '\0' && n + 4 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~')
            buf[n++] = (char)c;
        else
            n += (size_t)snprintf(buf + n, cap - n, "%%%02X", c);
    }
    buf[n] = '\0';
}

static int verb_drop(ctl_t *o, int argc, char **argv)
{
    const char *revision = NULL;
    char url[2048] = "/admin/drop?ns=";
    tool_http_reply_t r;
    json_error_t jerr;
    json_t *doc;
    int rc, err;

    for (int i = 0; i < argc;) {
        if (strcmp(argv[i], "--revision") == 0) {
            if (i + 1 >= argc)
                return tool_usage_error("--revision needs a value");
            revision = argv[i + 1];
            i += 2;
            continue;
        }
        if ((rc = parse_global(o, argc, argv, &i)) == 0)
            return tool_usage_error("drop: unexpected argument %s", argv[i]);
        if (rc != 1)
            return rc;
    }
    if (!o->ns_given)
        return tool_usage_error("drop: --ns NAME is required (the model whose chunks go)");
    if (strlen(o->ns.model) > 255 || (revision != NULL && strlen(revision) > 255))
        return tool_usage_error("drop: a model name and a revision are at most 255 bytes");
    url_encode(url, sizeof url, o->ns.model);
    if (revision != NULL) {
        strcat(url, "&revision=");
        url_encode(url, sizeof url, revision);
    }
    if ((rc = resolve_endpoints(o, 0, 1)) != 0)
        return rc;
    err = tool_http_request(o->status_socket, "POST", url, o->timeout_ms, &r);
    if (err != 0)
        return fail_sys("drop", o->status_socket, err);
    doc = json_loads(r.body, 0, &jerr);
    if (doc == NULL || (r.code != 200 && r.code != 404)) {
        const char *why = json_string_value(json_object_get(doc, "error"));
        tool_error("drop: HTTP status %d%s%s", r.code, why ? ": " : "", why ? why : "");
        json_decref(doc);
        tool_http_reply_free(&r);
        return EXIT_FAIL;
    }
    {
        /* 0.2.6: the daemon answers once the tombstones are on file, or says why not */
        const char *tomb = json_string_value(json_object_get(doc, "tombstone"));
        const char *why = json_string_value(json_object_get(doc, "tombstone_error"));
        if (tomb != NULL && strcmp(tomb, "written") != 0)
            fprintf(stderr,
                    "kvtierctl: drop: the tombstone file was not written (%s%s%s): a restart may "
                    "bring the dropped disk copies back\n",
                    tomb, why != NULL ? ": " : "", why != NULL ? why : "");
    }
    if (o->json) {
        rc = print_json(json_incref(doc));
    } else {
        printf("%" JSON_INTEGER_FORMAT "\n", json_integer_value(json_object_get(doc, "chunks")));
        rc = 0;
    }
    if (rc == 0 && r.code == 404)
        rc = EXIT_MISS;
    json_decref(doc);
    tool_http_reply_free(&r);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(ctl_t *, int, char **);
    } verbs[] = {{"status", verb_status}, {"drop", verb_drop},     {"put", verb_put},
                 {"get", verb_get},       {"lookup", verb_lookup}, {"tally", verb_tally}};
    ctl_t o = {.ns = {.model = "kvtierctl", .chunk_tokens = 256, .world_size = 1},
               .timeout_ms = CTL_DEFAULT_TIMEOUT_MS,
               /* a one-shot tool: mapping (and populating) a large arena costs more than
                  moving one chunk through a frame; --data-path shm exercises that path */
               .data_path = KVT_DATA_PATH_FRAMES};
    int i = 1, rc = -1;

    tool_init("kvtierctl", usage_text);
    while (i < argc) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        rc = parse_global(&o, argc, argv, &i);
        if (rc == 0)
            break;
        if (rc != 1)
            return rc;
    }
    if (i >= argc)
        return tool_usage_error("no verb given");
    if (argv[i][0] == '-')
        return tool_usage_error("unknown option %s", argv[i]);
    rc = -1;
    for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++) {
        if (strcmp(argv[i], verbs[v].name) != 0)
            continue;
        rc = verbs[v].fn(&o, argc - i - 1, argv + i + 1);
        break;
    }
    if (rc < 0)
        rc = tool_usage_error("unknown verb %s", argv[i]);
    free(o.config_endpoint);
    free(o.config_status);
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc != EXIT_USAGE)
        rc = fail_sys("write", "stdout", errno ? errno : EIO);
    return rc;
}
