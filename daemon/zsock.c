/*
 * zsock.c - ZeroMQ ROUTER integration with libuv (see zsock.h).
 *
 * Handles: a uv_poll_t on ZMQ_FD for wake-ups and a uv_idle_t that is active only while a
 * drain was cut short by the batch limit (or a send may have consumed the edge). Both are
 * closed by zsock_close; the struct is freed when the last close callback has run ("free a
 * handle only in its close callback").
 * Threads: loop thread only.
 */
#include "zsock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"

struct zsock {
    void *sock;
    uv_poll_t poll;
    uv_idle_t idle;
    int open_handles; /* handles not yet closed */
    bool closing;
    bool in_drain;
    size_t max_parts;
    zmq_msg_t *parts;
    zsock_recv_cb cb;
    void *arg;
    /* the descriptor guard (zsock_guard_fds): the ROUTER's monitor, a PAIR socket */
    void *mon;
    uv_poll_t mon_poll;
    uv_idle_t mon_idle;
    int fd_guard;
    uint64_t *shed;     /* the caller's counter of connections shut down */
    sa_family_t family; /* of the endpoint: AF_UNIX (ipc), else AF_INET standing for tcp */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* ipc: the socket file, or a NUL
                                                                and an abstract name */
    size_t path_len;
};

static int pending_in(zsock_t *z)
{
    int ev = 0;
    size_t len = sizeof ev;

    if (zmq_getsockopt(z->sock, ZMQ_EVENTS, &ev, &len) != 0)
        return 0;
    return (ev & ZMQ_POLLIN) != 0;
}

/* Receives one multipart message; returns the number of parts kept (0 when nothing was
 * pending). Parts beyond max_parts are received and dropped. */
static size_t recv_one(zsock_t *z, bool *truncated)
{
    size_t n = 0;
    int more = 1;

    *truncated = false;
    while (more) {
        zmq_msg_t scratch, *m = n < z->max_parts ? &z->parts[n] : &scratch;
        size_t ml = sizeof more;

        zmq_msg_init(m);
        if (zmq_msg_recv(m, z->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(m);
            break; /* nothing pending (n == 0); mid-message cannot happen: delivery is atomic */
        }
        if (zmq_getsockopt(z->sock, ZMQ_RCVMORE, &more, &ml) != 0)
            more = 0;
        if (m == &scratch) {
            zmq_msg_close(m);
            *truncated = true;
        } else {
            n++;
        }
    }
    return n;
}

static void idle_cb(uv_idle_t *h);

static void drain(zsock_t *z)
{
    uint64_t t0;

    if (z->in_drain)
        return; /* a send from inside the callback: the running drain re-checks ZMQ_EVENTS */
    t0 = uv_hrtime();
    z->in_drain = true;
    for (int i = 0; i < ZSOCK_BATCH && !z->closing; i++) {
        bool truncated;
        size_t n;

        if (i > 0 && uv_hrtime() - t0 >= (uint64_t)ZSOCK_TURN_US * 1000u)
            break; /* the rest next turn (idle handle below) */
        if (!pending_in(z))
            break;
        n = recv_one(z, &truncated);
        if (n == 0)
            break;
        z->cb(z->arg, z->parts, n, truncated);
        for (size_t k = 0; k < n; k++)
            zmq_msg_close(&z->parts[k]);
    }
    z->in_drain = false;
    if (z->closing)
        return;
    if (pending_in(z))
        uv_idle_start(&z->idle, idle_cb);
    else
        uv_idle_stop(&z->idle);
}

static void idle_cb(uv_idle_t *h)
{
    drain(h->data);
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    drain(h->data);
}

/* zmq_bind, giving an ipc:// socket file ZSOCK_IPC_MODE: libzmq creates the file in this thread
 * (bind(2) in zmq_bind) with the umask's mode, so the umask is narrowed around the call (the
 * daemon is single-threaded at start-up; ZeroMQ's threads create no files) and the mode is set
 * explicitly afterwards, for a umask that was narrower still. An endpoint file that a process
 * listens on is EADDRINUSE, one that is not a socket EEXIST. */
static int bind_endpoint(void *sock, const char *endpoint)
{
    bool ipc = strncmp(endpoint, "ipc://", 6) == 0;
    mode_t old;
    int rc, err;

    /* libzmq's bind unlinks the socket file of an ipc endpoint, a live one too: a second daemon
     * configured with the same endpoint would take it over without an error, and the first one
     * (its tiers intact) would serve nobody. A file that a process still listens on is refused,
     * and so is one that is not a socket at all, which the bind would delete (a regular file, or
     * the daemon's own arena when server.endpoint names ram.arena_path). */
    if (ipc && endpoint[6] != '@') {
        struct stat st;
        if (lstat(endpoint + 6, &st) == 0 && !S_ISSOCK(st.st_mode)) {
            errno = EEXIST; /* not a socket: libzmq would unlink it (a file, the arena...) */
            return -1;
        }
        if ((rc = fsutil_unix_listener_alive(endpoint + 6)) != 0) {
            errno = rc > 0 ? EADDRINUSE : -rc;
            return -1;
        }
    }
    old = ipc ? umask(0777 & ~ZSOCK_IPC_MODE) : 0;
    rc = zmq_bind(sock, endpoint);
    err = zmq_errno();

    if (ipc)
        umask(old);
    if (rc != 0) {
        errno = err;
        return -1;
    }
    if (ipc && endpoint[6] != '@' && chmod(endpoint + 6, ZSOCK_IPC_MODE) != 0)
        return -1; /* errno is chmod's: zmq_errno() reads errno */
    return 0;
}

/*
 * Why the C library's generator is seeded here (0.2.7). A ROUTER names a peer that gave no routing
 * id of its own with one it generates: a zero byte, then a 32-bit counter that starts at a value
 * libzmq draws from rand() and counts up by one per such peer. libzmq 4.3 (Debian 12's 4.3.4, and
 * later releases) never checks a generated id against the ids peers chose themselves, and asserts
 * on the duplicate (socket_base.cpp): a client that takes as its own id the one the next anonymous
 * client will get aborts the daemon when that client connects. libzmq does not seed rand(), so
 * unseeded the counter starts at 0x6b8b4567 in every daemon. Seeded from getrandom(2) just before
 * the ROUTER is made, the first id is unknown to clients, and the daemon never shows an id
 * (status shows a keyed hash of it, session.c), so the next one cannot be predicted. Nothing else
 * in the daemon uses rand().
 */
static void seed_routing_ids(void)
{
    unsigned int seed;

    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (unsigned int)time(NULL) ^ (unsigned int)getpid() ^ (unsigned int)clock();
    srand(seed);
}

int zsock_new(uv_loop_t *loop, void *zctx, const char *endpoint, size_t max_parts,
              int64_t max_msg_bytes, int sndhwm, zsock_recv_cb cb, void *arg, zsock_t **out)
{
    zsock_t *z = calloc(1, sizeof *z);
    int linger = 0, mandatory = 1, rc;
    int fd;
    size_t fdlen = sizeof fd;

    if (z == NULL)
        return -ENOMEM;
    z->parts = calloc(max_parts, sizeof *z->parts);
    if (z->parts == NULL) {
        rc = -ENOMEM;
        goto fail_parts;
    }
    z->max_parts = max_parts;
    z->cb = cb;
    z->arg = arg;
    seed_routing_ids();
    z->sock = zmq_socket(zctx, ZMQ_ROUTER);
    if (z->sock == NULL) {
        rc = -zmq_errno();
        goto fail_socket;
    }
    if (zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(z->sock, ZMQ_MAXMSGSIZE, &max_msg_bytes, sizeof max_msg_bytes) != 0 ||
        zmq_setsockopt(z->sock, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm) != 0 ||
        zmq_setsockopt(z->sock, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory) != 0 ||
        bind_endpoint(z->sock, endpoint) != 0 ||
        zmq_getsockopt(z->sock, ZMQ_FD, &fd, &fdlen) != 0) {
        rc = -zmq_errno();
        goto fail_bind;
    }
    rc = uv_poll_init(loop, &z->poll, fd);
    if (rc != 0)
        goto fail_bind;
    uv_idle_init(loop, &z->idle);
    z->poll.data = z;
    z->idle.data = z;
    z->open_handles = 2;
    uv_poll_start(&z->poll, UV_READABLE, poll_cb);
    *out = z;
    /* Messages may already be queued before the first edge. */
    uv_idle_start(&z->idle, idle_cb);
    return 0;

fail_bind:
    zmq_close(z->sock);
fail_socket:
    free(z->parts);
fail_parts:
    free(z);
    return rc;
}

int zsock_send(zsock_t *z, zmq_msg_t *parts, size_t n)
{
    int rc = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
        if (zmq_msg_send(&parts[i], z->sock, flags) < 0) {
            rc = -zmq_errno();
            break;
        }
    }
    for (; i < n; i++)
        zmq_msg_close(&parts[i]);
    /* A send may have consumed the ZMQ_FD edge for pending input: look again next iteration. */
    if (!z->in_drain && !z->closing)
        uv_idle_start(&z->idle, idle_cb);
    return rc;
}

/* --- the descriptor guard --- */

/* Whether fd is a connection the ROUTER accepted on its endpoint (not a descriptor the number
 * was given to since, by another part of the daemon: the monitor's events come late). */
static bool accepted_here(const zsock_t *z, int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    if (z->family != AF_UNIX) /* the daemon's only inet sockets are ZeroMQ's (status is Unix) */
        return ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
    if (ss.ss_family != AF_UNIX)
        return false;
    const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
    if (z->path[0] == '\0') /* abstract: a NUL, then the name, as long as the address says */
        return len == offsetof(struct sockaddr_un, sun_path) + z->path_len &&
               memcmp(un->sun_path, z->path, z->path_len) == 0;
    return len > offsetof(struct sockaddr_un, sun_path) &&
           strncmp(un->sun_path, z->path, sizeof un->sun_path) == 0;
}

static void mon_idle_cb(uv_idle_t *h);

/* Reads the monitor's events (two frames each: u16 event and u32 value, then the address) and
 * shuts down every connection accepted on a descriptor at or above the guard. */
static void mon_drain(zsock_t *z)
{
    for (int i = 0; i < ZSOCK_BATCH && !z->closing; i++) {
        zmq_msg_t ev, addr;
        uint16_t event;
        uint32_t value;
        int more = 0;
        size_t ml = sizeof more;

        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, z->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            uv_idle_stop(&z->mon_idle);
            return;
        }
        if (zmq_getsockopt(z->mon, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
            zmq_msg_init(&addr);
            (void)zmq_msg_recv(&addr, z->mon, 0); /* the rest of the event: delivery is atomic */
            zmq_msg_close(&addr);
        }
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
            if (event == ZMQ_EVENT_ACCEPTED && (int)value >= z->fd_guard &&
                accepted_here(z, (int)value)) {
                /* shutdown, not close: the descriptor stays ZeroMQ's, which sees the end of the
                 * connection and closes it as for any peer that left */
                (void)shutdown((int)value, SHUT_RDWR);
                (*z->shed)++;
            }
        }
        zmq_msg_close(&ev);
    }
    uv_idle_start(&z->mon_idle, mon_idle_cb); /* more next turn */
}

static void mon_idle_cb(uv_idle_t *h)
{
    mon_drain(h->data);
}

static void mon_poll_cb(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    mon_drain(h->data);
}

int zsock_guard_fds(zsock_t *z, uv_loop_t *loop, void *zctx, const char *endpoint, int fd_guard,
                    uint64_t *shed)
{
    char addr[64];
    int fd, rc;
    size_t fdlen = sizeof fd;

    if (strncmp(endpoint, "ipc://", 6) == 0) {
        size_t n = strlen(endpoint + 6);
        if (n >= sizeof z->path)
            return -EINVAL; /* too long for a socket address anyway */
        z->family = AF_UNIX;
        memcpy(z->path, endpoint + 6, n + 1);
        z->path_len = n;
        if (z->path[0] == '@')
            z->path[0] = '\0'; /* libzmq's spelling of an abstract address */
    } else if (strncmp(endpoint, "tcp://", 6) == 0) {
        z->family = AF_INET; /* or AF_INET6: a host name may resolve to either */
    } else {
        return -EINVAL;
    }
    z->fd_guard = fd_guard;
    z->shed = shed;
    snprintf(addr, sizeof addr, "inproc://kvtierd-monitor-%p", (void *)z);
    if (zmq_socket_monitor(z->sock, addr, ZMQ_EVENT_ACCEPTED) != 0)
        return -zmq_errno();
    z->mon = zmq_socket(zctx, ZMQ_PAIR);
    if (z->mon == NULL || zmq_setsockopt(z->mon, ZMQ_LINGER, &(int){0}, sizeof(int)) != 0 ||
        zmq_connect(z->mon, addr) != 0 || zmq_getsockopt(z->mon, ZMQ_FD, &fd, &fdlen) != 0) {
        rc = -zmq_errno();
        goto fail;
    }
    rc = uv_poll_init(loop, &z->mon_poll, fd);
    if (rc != 0)
        goto fail;
    uv_idle_init(loop, &z->mon_idle);
    z->mon_poll.data = z->mon_idle.data = z;
    z->open_handles += 2;
    uv_poll_start(&z->mon_poll, UV_READABLE, mon_poll_cb);
    uv_idle_start(&z->mon_idle, mon_idle_cb); /* events before the first edge */
    return 0;

fail:
    (void)zmq_socket_monitor(z->sock, NULL, 0);
    if (z->mon != NULL)
        zmq_close(z->mon);
    z->mon = NULL;
    return rc;
}

static void close_cb(uv_handle_t *h)
{
    zsock_t *z = h->data;

    if (--z->open_handles == 0) {
        free(z->parts);
        free(z);
    }
}

void zsock_close(zsock_t **pz)
{
    zsock_t *z = *pz;

    if (z == NULL)
        return;
    z->closing = true;
    /* uv_close removes ZMQ_FD from the loop's poller before zmq_close releases it. */
    uv_close((uv_handle_t *)&z->poll, close_cb);
    uv_close((uv_handle_t *)&z->idle, close_cb);
    if (z->mon != NULL) {
        uv_close((uv_handle_t *)&z->mon_poll, close_cb);
        uv_close((uv_handle_t *)&z->mon_idle, close_cb);
        (void)zmq_socket_monitor(z->sock, NULL, 0);
        zmq_close(z->mon);
    }
    zmq_close(z->sock);
    *pz = NULL;
}
