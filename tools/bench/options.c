/*
 * options.c - kvtier-bench's command line: getopt_long over the options of usage(), sizes with
 * unit suffixes, the loopback check of --vs-redis, and the endpoint and status socket of a daemon
 * config (-c, through tools/tool.h). Every rule that needs no daemon is checked here, before
 * anything connects; limits the daemon announces are checked by check_limits() (steps.c).
 *
 * Threads: main thread, before any other thread exists.
 */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BENCH_MAX_RANKS 256
#define BENCH_CHAIN_CHUNKS 8 /* disk mode: chunks per saved chain */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier-bench (-e ENDPOINT | -c CONFIG) [options]\n"
            "\n"
            "Saves, loads (verified byte-exact) and looks up synthetic chunks against a running\n"
            "kvtierd on its shared-memory and its frames data path, and measures the same\n"
            "workload over raw ZeroMQ, memcpy and optionally Redis in the same run.\n"
            "\n"
            "  -e, --endpoint ENDPOINT  daemon endpoint (ipc://PATH or tcp://HOST:PORT)\n"
            "  -c, --config FILE        read server.endpoint from the daemon's JSON config\n"
            "      --chunk-bytes SIZE   bytes per chunk, e.g. 2MiB (default 2MiB)\n"
            "      --chunks N           chunks per rank per round (default 64)\n"
            "      --ranks N            ranks, one client and thread each (default 1)\n"
            "      --world N            namespace world size (default: --ranks)\n"
            "      --rounds N           save+load rounds (default 5)\n"
            "      --batch N            chunks per save/load call (default 1)\n"
            "      --prompt-chunks N    hashes per lookup (default 400; 4 KiB chunks)\n"
            "      --lookups N          lookups per lookup thread (default 2000)\n"
            "      --all-ranks          lookups ask for all ranks (one thread asks)\n"
            "      --ns NAME            namespace model name (default kvtier-bench-<random>)\n"
            "      --data-path PATH     auto (default): measure both data paths, the shm one\n"
            "                           shown unavailable when the arena cannot be mapped;\n"
            "                           shm: the same, but fail then; frames: frames only\n"
            "      --vs-redis HOST:PORT also run the workload against this Redis server (a\n"
            "                           loopback address: 127.0.0.1, [::1] or localhost);\n"
            "                           its keys kvtier-bench:<seed>:* are deleted at the end\n"
            "      --data KIND          chunk bytes: random (default) or bf16 (N(0,1) values\n"
            "                           rounded to bf16, the same for every run)\n"
            "      --disk-dir DIR       disk mode: measure the daemon's disk tier instead (DIR:\n"
            "                           its disk.dir, where the raw baseline file is written\n"
            "                           and removed); needs more chunks than ram.capacity_bytes\n"
            "      --status SOCKET      the daemon's status socket (default: server.status_socket\n"
            "                           of -c CONFIG); disk mode reads capacities and counters\n"
            "      --chain-chunks N     disk mode: chunks per saved chain (default 8)\n"
            "      --lookup-first       disk mode: each chain's loads are preceded by a lookup\n"
            "                           of the chain, as an engine looks a prompt up before it\n"
            "                           loads it (the daemon reads ahead what it finds on disk)\n"
            "      --paced              disk mode: between two chains the saves wait until the\n"
            "                           daemon's write buffer holds at most one chain, so that\n"
            "                           every chunk demotes (the restore then reads them all)\n"
            "      --depth N            keep N requests in flight per rank through the\n"
            "                           asynchronous calls (default: synchronous calls, one\n"
            "                           at a time); the zmq baseline keeps the same depth\n"
            "      --zero-copy          also measure kvtier-zc: reserve/commit and pin/release\n"
            "                           on the shared-memory path, the bench's memcpy standing\n"
            "                           in for a DMA, beside raw ZeroMQ round trips of its size;\n"
            "                           disk mode: half the shared-memory restore is pins with\n"
            "                           no copy out (the engine's DMA path), then reloaded and\n"
            "                           verified untimed\n"
            "      --cold               measure an empty tier (default: the steady state, the\n"
            "                           tier filled to capacity first; needs the status socket)\n"
            "      --json               print one JSON object instead of the table\n"
            "  -h, --help               this text\n"
            "\n"
            "GB/s = 10^9 bytes/s of payload over the wall time of all ranks. The daemon needs\n"
            "about ranks x chunks x chunk-bytes of RAM capacity per round and path.\n"
            "Exit status: 0 ok, 1 data mismatch or daemon error, 2 usage error.\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1ull << 10},
                 {"MiB", 1ull << 20},
                 {"GiB", 1ull << 30},
                 {"KB", 1000},
                 {"MB", 1000000},
                 {"GB", 1000000000},
                 {"K", 1ull << 10},
                 {"M", 1ull << 20},
                 {"G", 1ull << 30}};
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mult)
                return -1;
            *out = v * units[i].mult;
            return 0;
        }
    }
    return -1;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Parses HOST:PORT ([HOST]:PORT for IPv6) into o. Returns 0, -1 when malformed, -2 when HOST
 * is not a loopback address (the benchmark never sends its load to another machine). */
static int parse_redis_addr(const char *s, bench_opts_t *o)
{
    const char *host = s, *colon;
    size_t hlen;
    uint32_t port;
    if (*s == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':')
            return -1;
        host = s + 1;
        hlen = (size_t)(end - host);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hlen = (size_t)(colon - s);
    }
    if (hlen == 0 || hlen >= sizeof o->redis_host || strlen(s) >= sizeof o->redis_addr ||
        parse_u32(colon + 1, 1, 65535, &port))
        return -1;
    memcpy(o->redis_host, host, hlen);
    o->redis_host[hlen] = '\0';
    if (strcmp(o->redis_host, "localhost") == 0)
        strcpy(o->redis_host, "127.0.0.1");
    struct in_addr a4;
    struct in6_addr a6;
    int loopback = 0;
    if (inet_pton(AF_INET, o->redis_host, &a4) == 1)
        loopback = (ntohl(a4.s_addr) >> 24) == 127;
    else if (inet_pton(AF_INET6, o->redis_host, &a6) == 1)
        loopback = IN6_IS_ADDR_LOOPBACK(&a6);
    if (!loopback)
        return -2;
    strcpy(o->redis_addr, s);
    o->redis_port = (int)port;
    return 0;
}

/* Reads server.endpoint (required) into out and server.status_socket (when present, shorter
 * than status_cap and status is still "") into status. */
static int endpoint_from_config(const char *path, char *out, size_t cap, char *status,
                                size_t status_cap)
{
    char *ep = NULL, *st = NULL;
    int rc = -1;

    if (tool_config_endpoints(path, &ep, &st) != 0)
        return -1;
    if (st && !status[0] && strlen(st) < status_cap)
        memcpy(status, st, strlen(st) + 1);
    if (!ep || !*ep)
        tool_error("%s: no server.endpoint string (use --endpoint)", path);
    else if (strlen(ep) >= cap)
        tool_error("%s: server.endpoint too long", path);
    else {
        memcpy(out, ep, strlen(ep) + 1);
        rc = 0;
    }
    free(ep);
    free(st);
    return rc;
}

enum {
    OPT_CHUNK_BYTES = 256,
    OPT_CHUNKS,
    OPT_RANKS,
    OPT_WORLD,
    OPT_ROUNDS,
    OPT_BATCH,
    OPT_PROMPT_CHUNKS,
    OPT_LOOKUPS,
    OPT_ALL_RANKS,
    OPT_NS,
    OPT_JSON,
    OPT_DATA_PATH,
    OPT_VS_REDIS,
    OPT_DISK_DIR,
    OPT_STATUS,
    OPT_DATA,
    OPT_CHAIN_CHUNKS,
    OPT_DEPTH,
    OPT_ZERO_COPY,
    OPT_COLD,
    OPT_LOOKUP_FIRST,
    OPT_PACED,
};

/* Returns 0 to run, 1 after --help, -1 on a usage error (message printed). */
int parse_args(int argc, char **argv, bench_opts_t *o)
{
    static const struct option longopts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"config", required_argument, NULL, 'c'},
        {"chunk-bytes", required_argument, NULL, OPT_CHUNK_BYTES},
        {"chunks", required_argument, NULL, OPT_CHUNKS},
        {"ranks", required_argument, NULL, OPT_RANKS},
        {"world", required_argument, NULL, OPT_WORLD},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"prompt-chunks", required_argument, NULL, OPT_PROMPT_CHUNKS},
        {"lookups", required_argument, NULL, OPT_LOOKUPS},
        {"all-ranks", no_argument, NULL, OPT_ALL_RANKS},
        {"ns", required_argument, NULL, OPT_NS},
        {"json", no_argument, NULL, OPT_JSON},
        {"data-path", required_argument, NULL, OPT_DATA_PATH},
        {"vs-redis", required_argument, NULL, OPT_VS_REDIS},
        {"disk-dir", required_argument, NULL, OPT_DISK_DIR},
        {"status", required_argument, NULL, OPT_STATUS},
        {"data", required_argument, NULL, OPT_DATA},
        {"chain-chunks", required_argument, NULL, OPT_CHAIN_CHUNKS},
        {"depth", required_argument, NULL, OPT_DEPTH},
        {"zero-copy", no_argument, NULL, OPT_ZERO_COPY},
        {"cold", no_argument, NULL, OPT_COLD},
        {"lookup-first", no_argument, NULL, OPT_LOOKUP_FIRST},
        {"paced", no_argument, NULL, OPT_PACED},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *endpoint = NULL, *config = NULL, *ns = NULL;
    const char *bad = NULL;
    int c, rc, rounds_given = 0;
    *o = (bench_opts_t){.chunk_bytes = 2u << 20,
                        .chunks = 64,
                        .ranks = 1,
                        .prompt_chunks = 400,
                        .lookups = 2000,
                        .rounds = 5,
                        .batch = 1};
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":e:c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'e':
            endpoint = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case OPT_CHUNK_BYTES:
            if (parse_size(optarg, &o->chunk_bytes) || o->chunk_bytes == 0 ||
                o->chunk_bytes > (1ull << 30))
                bad = "--chunk-bytes must be a size from 1 byte to 1GiB";
            break;
        case OPT_CHUNKS:
            if (parse_u32(optarg, 1, 1u << 20, &o->chunks))
                bad = "--chunks must be 1..1048576";
            break;
        case OPT_RANKS:
            if (parse_u32(optarg, 1, BENCH_MAX_RANKS, &o->ranks))
                bad = "--ranks must be 1..256";
            break;
        case OPT_WORLD:
            if (parse_u32(optarg, 1, 1024, &o->world))
                bad = "--world must be 1..1024";
            break;
        case OPT_ROUNDS:
            if (parse_u32(optarg, 1, 1000, &o->rounds))
                bad = "--rounds must be 1..1000";
            rounds_given = 1;
            break;
        case OPT_BATCH:
            if (parse_u32(optarg, 1, 4096, &o->batch))
                bad = "--batch must be 1..4096";
            break;
        case OPT_PROMPT_CHUNKS:
            if (parse_u32(optarg, 1, 65536, &o->prompt_chunks))
                bad = "--prompt-chunks must be 1..65536";
            break;
        case OPT_LOOKUPS:
            if (parse_u32(optarg, 1, 10000000, &o->lookups))
                bad = "--lookups must be 1..10000000";
            break;
        case OPT_ALL_RANKS:
            o->all_ranks = 1;
            break;
        case OPT_NS:
            ns = optarg;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_DATA_PATH:
            o->data_path = tool_data_path_parse(optarg);
            if (o->data_path < 0)
                bad = "--data-path must be auto, frames or shm";
            break;
        case OPT_VS_REDIS:
            rc = parse_redis_addr(optarg, o);
            if (rc == -2)
                bad = "--vs-redis: HOST must be a loopback address (127.0.0.0/8, ::1, localhost)";
            else if (rc)
                bad = "--vs-redis must be HOST:PORT with a port from 1 to 65535";
            break;
        case OPT_DISK_DIR:
            if (!*optarg || strlen(optarg) >= sizeof o->disk_dir)
                bad = "--disk-dir must be a directory path";
            else
                strcpy(o->disk_dir, optarg);
            break;
        case OPT_STATUS:
            if (!*optarg || strlen(optarg) >= sizeof o->status_sock)
                bad = "--status must be a Unix socket path shorter than 108 bytes";
            else
                strcpy(o->status_sock, optarg);
            break;
        case OPT_DATA:
            if (strcmp(optarg, "random") == 0)
                o->data = DATA_RANDOM;
            else if (strcmp(optarg, "bf16") == 0)
                o->data = DATA_BF16;
            else
                bad = "--data must be random or bf16";
            break;
        case OPT_CHAIN_CHUNKS:
            if (parse_u32(optarg, 1, 1u << 20, &o->chain_chunks))
                bad = "--chain-chunks must be 1..1048576";
            break;
        case OPT_DEPTH:
            if (parse_u32(optarg, 1, 4096, &o->depth))
                bad = "--depth must be 1..4096";
            break;
        case OPT_ZERO_COPY:
            o->zero_copy = 1;
            break;
        case OPT_COLD:
            o->cold = 1;
            break;
        case OPT_PACED:
            o->paced = 1;
            break;
        case OPT_LOOKUP_FIRST:
            o->lookup_first = 1;
            break;
        case ':':
            tool_error("%s needs a value", argv[optind - 1]);
            return -1;
        default:
            tool_error("unknown option %s (see --help)", argv[optind - 1]);
            return -1;
        }
        if (bad) {
            tool_error("%s, got '%s'", bad, optarg);
            return -1;
        }
    }
    if (optind < argc) {
        tool_error("unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    if (!endpoint == !config) {
        tool_error("give exactly one of --endpoint and -c CONFIG");
        return -1;
    }
    if (endpoint) {
        if (strlen(endpoint) >= sizeof o->endpoint) {
            tool_error("endpoint too long");
            return -1;
        }
        strcpy(o->endpoint, endpoint);
    } else if (endpoint_from_config(config, o->endpoint, sizeof o->endpoint, o->status_sock,
                                    sizeof o->status_sock)) {
        return -1;
    }
    if (o->zero_copy && o->data_path == KVT_DATA_PATH_FRAMES) {
        tool_error("--zero-copy needs the shared-memory path (not --data-path frames)");
        return -1;
    }
    if ((o->lookup_first || o->paced) && !o->disk_dir[0]) {
        tool_error("--lookup-first and --paced apply to --disk-dir only");
        return -1;
    }
    if (o->disk_dir[0]) {
        if (rounds_given || o->redis_addr[0] || o->cold) {
            tool_error("--rounds, --vs-redis and --cold do not apply to --disk-dir");
            return -1;
        }
        if (!o->status_sock[0]) {
            tool_error("--disk-dir needs the daemon's status socket: --status "
                       "SOCKET, or -c CONFIG with server.status_socket");
            return -1;
        }
        o->rounds = 1;
        if (o->chain_chunks == 0)
            o->chain_chunks = BENCH_CHAIN_CHUNKS;
    } else if (o->chain_chunks) {
        tool_error("--chain-chunks applies to --disk-dir only");
        return -1;
    }
    if (o->world == 0)
        o->world = o->ranks;
    if (o->world < o->ranks) {
        tool_error("--world %u is smaller than --ranks %u", o->world, o->ranks);
        return -1;
    }
    if (ns && (!*ns || strlen(ns) >= sizeof o->model)) {
        tool_error("--ns must be 1..255 bytes");
        return -1;
    }
    if (ns)
        strcpy(o->model, ns);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * o->ranks * o->chunks * (double)o->chunk_bytes;
    if (pages > 0 && psize > 0 && need > 0.5 * (double)pages * (double)psize) {
        tool_error("the run needs %.0f MiB of client buffers (2 x ranks x chunks x "
                   "chunk-bytes), more than half of this machine's memory",
                   need / (1 << 20));
        return -1;
    }
    return 0;
}

/* An ipc:// endpoint whose socket file is missing means no daemon: fail fast, not on timeout. */
int check_endpoint(const char *ep)
{
    struct stat st;
    if (strncmp(ep, "ipc://", 6) == 0 && stat(ep + 6, &st) != 0) {
        tool_error("no daemon at %s (%s)", ep, strerror(errno));
        return -1;
    }
    return 0;
}
