/*
 * zsock.h - a ZeroMQ ROUTER socket driven by the libuv loop. The one place that touches ZMQ_FD
 * and ZMQ_EVENTS.
 *
 * ZMQ_FD is edge-triggered and any zmq_send/zmq_recv may consume the edge, so readiness is never
 * trusted alone: on every poll wake-up, and after every send, ZMQ_EVENTS is read again and
 * messages are drained with ZMQ_DONTWAIT, at most ZSOCK_BATCH per loop iteration and for at most
 * ZSOCK_TURN_US of it (the first message always); when a batch ends with messages still
 * pending, an idle handle continues the drain on the next iteration so that timers, disk
 * completions and the status socket keep being served under a flood. (256 messages a turn made
 * turns of 5-12 ms of CPU in a save burst on the development VM, each commit a publish and a
 * reply; the time bound keeps a turn near half a millisecond whatever a message costs.)
 *
 * A received multipart message is handed to the callback as an array of zmq_msg_t, part 0 being
 * the peer's routing id. A message with more than max_parts parts is drained completely and
 * delivered truncated (max_parts parts) with truncated = true, so the server can answer it.
 *
 * Threads: loop thread only. Ownership: zsock owns its ZMQ socket and uv handles; the callback
 * borrows the parts (zsock closes them after the callback returns).
 */
#ifndef KVT_ZSOCK_H
#define KVT_ZSOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include <zmq.h>

#define ZSOCK_BATCH 256
#define ZSOCK_TURN_US 500

typedef struct zsock zsock_t;

typedef void (*zsock_recv_cb)(void *arg, zmq_msg_t *parts, size_t nparts, bool truncated);

/* Binds a ROUTER socket on endpoint in zctx. max_msg_bytes bounds a single frame (larger frames
 * make ZeroMQ drop the peer); sndhwm bounds the replies queued for one peer. An ipc:// endpoint's
 * socket file gets mode ZSOCK_IPC_MODE whatever the umask (it is created under a umask that
 * allows no more, then chmod'ed). Returns 0 or a negative errno (zmq_errno). */
int zsock_new(uv_loop_t *loop, void *zctx, const char *endpoint, size_t max_parts,
              int64_t max_msg_bytes, int sndhwm, zsock_recv_cb cb, void *arg, zsock_t **out);

#define ZSOCK_IPC_MODE 0660

/* Sends the n parts as one multipart message; the parts are consumed (closed) whether or not
 * sending succeeds. The ROUTER is ZMQ_ROUTER_MANDATORY, so a reply that cannot be queued is
 * reported rather than dropped silently: returns 0, -EAGAIN (the peer's queue is at sndhwm),
 * -EHOSTUNREACH (no such peer: it disconnected), or another negative errno. */
int zsock_send(zsock_t *z, zmq_msg_t *parts, size_t n);

/*
 * The descriptor guard (0.2.14). A connection takes a descriptor as soon as ZeroMQ's I/O thread
 * accepts it, before it says anything, so server.max_clients (sessions, counted at HELLO) does not
 * bound them; and at the process's descriptor limit libzmq 4.3's ipc listener asserts on the
 * EMFILE of accept(2) and aborts the daemon (the session-15 fault probe: 300 silent connections
 * under `ulimit -n 200`). The guard watches the ROUTER's accepts (a ZeroMQ socket monitor, events
 * read on the loop) and shuts down at once every connection accepted on a descriptor numbered
 * fd_guard or higher: Linux gives the lowest free number, so such a number means that many
 * descriptors are open, and the ones left above it stay free for the daemon's own files and for
 * accepts made before the loop reads their events. The connections already open are served on;
 * a client shut out sees its connection close (libkvtier reconnects, ZeroMQ's reconnect interval
 * apart). An event read late may name a descriptor closed and given to something else since:
 * only a socket bound on the endpoint's address (its socket file for ipc) is shut down.
 * Each connection shut down adds one to *shed (the caller's counter, read on the loop thread).
 * Returns 0 or a negative errno (a transport other than ipc and tcp: -EINVAL).
 */
int zsock_guard_fds(zsock_t *z, uv_loop_t *loop, void *zctx, const char *endpoint, int fd_guard,
                    uint64_t *shed);

/* Stops receiving and closes the handles; the ZMQ socket is closed at once (linger 0) and the
 * zsock is freed in the last close callback. Sets *z to NULL. */
void zsock_close(zsock_t **z);

#endif /* KVT_ZSOCK_H */
