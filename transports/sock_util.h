/*
 * Socket helpers shared by the bootstrap and the tcp transport: interface
 * selection (BRAID_SOCKET_IFNAME syntax), address text, listeners, connects
 * and full reads/writes, every one bounded by a timeout.
 *
 * Results are 0 on success or a negative SOCK_E* code; the calls that say
 * why record the message (ERR, src/log.h: err_msg() reads it), naming the
 * address and the failing call.
 */
#ifndef BRAID_TRANSPORTS_SOCK_UTIL_H
#define BRAID_TRANSPORTS_SOCK_UTIL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "braid.h"

#define SOCK_EOF (-1)     /* the peer closed the connection */
#define SOCK_TIMEOUT (-2) /* the deadline passed */
#define SOCK_ERR (-3)     /* a system call failed (errno kept) */
#define SOCK_RESET (-4)   /* ECONNRESET / EPIPE: the peer went away */
#define SOCK_REFUSED (-5) /* the greeting's proof of the secret failed */

/* The braid_result a SOCK_E* code stands for: BRAID_ERR_TIMEOUT,
 * BRAID_ERR_REMOTE (EOF, reset), BRAID_ERR_INVALID_ARG (refused),
 * BRAID_ERR_SYSTEM; BRAID_SUCCESS for 0. */
braid_result sock_result(int code);
/* Inside the socket helpers: records the message and gives code back. */
#define SOCK_FAIL(code, ...) ((void)ERR(sock_result(code), __VA_ARGS__), (code))

/* Milliseconds on the monotonic clock. */
int64_t sock_now_ms(void);
/* Milliseconds left before deadline (>= 0). */
int sock_left_ms(int64_t deadline);

/* Length of the sockaddr for its family (0 for an unknown family). */
socklen_t sock_addr_len(const struct sockaddr_storage *a);
/* "192.0.2.1:5000" or "[fd00::1]:5000" into buf; returns buf. */
const char *sock_addr_str(const struct sockaddr_storage *a, char *buf,
                          size_t len);
int sock_addr_port(const struct sockaddr_storage *a);
void sock_addr_set_port(struct sockaddr_storage *a, int port);

/* Whether interface `name` passes the filter `spec` (NCCL syntax:
 * comma-separated prefixes; a leading '^' excludes the listed ones; a
 * leading '=' (after any '^') makes them exact names). NULL/"" passes all. */
int sock_ifname_match(const char *spec, const char *name);
/* 0 when spec is a filter that names no interface ("^", "=", ","): every
 * name would pass or none would, which no one means. */
int sock_ifname_names(const char *spec);
/* Picks the local address to advertise: with spec, the first up interface
 * that passes it (IPv4 before IPv6, link-local IPv6 skipped; loopback only
 * when no other interface passes); else the first up non-loopback IPv4
 * interface not named docker* or virbr*; else loopback. Port is 0. ifname
 * (may be NULL) gets the interface's name. A spec that matches nothing
 * fails naming BRAID_SOCKET_IFNAME and the interfaces that are up. */
int sock_pick_addr(const char *spec, struct sockaddr_storage *out, char *ifname,
                   size_t ifname_len);
/* sock_pick_addr with the family tried first, AF_INET or AF_INET6, when
 * spec is set (without spec the choice is sock_pick_addr's). */
int sock_pick_addr_family(const char *spec, int prefer,
                          struct sockaddr_storage *out, char *ifname,
                          size_t ifname_len);
/* "eth0 192.0.2.2, lo 127.0.0.1 (loopback)": every interface that is up
 * with an IPv4 or a global IPv6 address ("none" when there is none). */
void sock_list_ifaces(char *buf, size_t len);
/* The name of the interface that holds address a (its port ignored) into
 * ifname: 0, or -1 with "?" when no interface holds it. */
int sock_addr_ifname(const struct sockaddr_storage *a, char *ifname,
                     size_t len);
/* Resolves host (name or literal) and port into out. */
int sock_resolve(const char *host, int port, struct sockaddr_storage *out);

int sock_set_nonblock(int fd);
int sock_set_nodelay(int fd);
/* SO_SNDBUF / SO_RCVBUF of at least bytes where the system allows. */
void sock_set_bufs(int fd, size_t bytes);

/* Nonblocking listener bound to addr (its port, 0 = any); *bound gets the
 * address with the port actually bound. reuse sets SO_REUSEADDR. */
int sock_listen(const struct sockaddr_storage *addr, int reuse, size_t bufs,
                int *fd, struct sockaddr_storage *bound);
/* Nonblocking connect to addr, waiting until deadline (retries while the
 * listener is not there yet). *fd is nonblocking on success. bufs > 0 sets
 * the socket buffers before connecting. */
int sock_connect(const struct sockaddr_storage *addr, int64_t deadline,
                 size_t bufs, int *fd);
/* Accepts one connection (waiting until deadline). *fd is nonblocking. */
int sock_accept(int lfd, int64_t deadline, int *fd,
                struct sockaddr_storage *peer);

/* All of buf, or an error, by deadline (works on nonblocking sockets). */
int sock_write_full(int fd, const void *buf, size_t len, int64_t deadline);
int sock_read_full(int fd, void *buf, size_t len, int64_t deadline);
/* Text for a SOCK_E* code (with errno for SOCK_ERR). */
const char *sock_strerror(int code, char *buf, size_t len);

/* Whether the peer of fd has closed or reset it, without consuming data:
 * 1 dead, 0 alive (or data pending). */
int sock_peer_dead(int fd);

/* The greeting every braid connection opens with (transports/sock_gate.c):
 * a challenge-response over the job's secret, which never crosses the wire.
 * The listener sends a sock_challenge with a fresh random nonce; the
 * connecting side answers with a sock_auth (its own nonce and an
 * HMAC-SHA256, keyed by the secret, of the magic, the kind, both nonces and
 * the body that follows it) and the body; the listener answers with a
 * sock_verdict, which when it admits carries the listener's own HMAC of the
 * exchange. An answer recorded on one connection does not fit the nonce of
 * another. */
#define SOCK_NONCE 16
#define SOCK_MAC 32
typedef struct sock_challenge {
  uint32_t magic, kind;
  uint8_t nonce[SOCK_NONCE];
} sock_challenge;
typedef struct sock_auth {
  uint32_t magic, kind;
  uint8_t nonce[SOCK_NONCE];
  uint8_t mac[SOCK_MAC];
} sock_auth;
#define SOCK_VERDICT_OK 1u
#define SOCK_VERDICT_REFUSED 2u /* the answer did not prove the secret */
typedef struct sock_verdict {
  uint32_t magic, status;
  uint8_t mac[SOCK_MAC]; /* with SOCK_VERDICT_OK */
} sock_verdict;

/* The connecting side's HMAC of a greeting (for sock_auth.mac). */
void sock_auth_sign(const uint8_t secret[16], uint32_t magic, uint32_t kind,
                    const uint8_t server_nonce[SOCK_NONCE],
                    const uint8_t client_nonce[SOCK_NONCE], const void *body,
                    size_t body_len, uint8_t mac[SOCK_MAC]);

/* Connects to addr (as sock_connect) and proves the secret with the
 * greeting (magic, kind) carrying body. A connection the listener drops
 * before its verdict (it was flooded, or the answer came too late) is made
 * again until deadline. 0 with *fd nonblocking once admitted; SOCK_REFUSED
 * when the listener refused the proof (another job's secret) or did not
 * prove the secret itself; SOCK_TIMEOUT; SOCK_ERR. Its message says which. */
int sock_connect_auth(const struct sockaddr_storage *addr, int64_t deadline,
                      size_t bufs, uint32_t magic, uint32_t kind,
                      const uint8_t secret[16], const void *body,
                      size_t body_len, int *fd);

/* An authenticating accept loop on a listener. It serves every pending
 * greeting at once (poll over all of them), keeps at most
 * SOCK_GATE_MAX_PENDING connections that have not proved the secret (a new
 * one drops the oldest), and drops one that has not proved it within
 * auth_ms of its accept. A dropped connection is logged (WARN for the first
 * few, then counted) naming `what` and the remote address. */
#define SOCK_GATE_MAX_MSG 512 /* sock_auth + body */
#define SOCK_GATE_MAX_PENDING 256
typedef struct sock_gate_conn sock_gate_conn;
typedef struct sock_gate {
  int lfd;
  uint32_t magic, kind;
  uint8_t secret[16];
  size_t body_len;
  int auth_ms;
  char what[96];
  int npend, cap;
  sock_gate_conn *pend;
  struct pollfd *pfd; /* cap + 1 */
  unsigned long dropped;
} sock_gate;
void sock_gate_init(sock_gate *g, int lfd, uint32_t magic, uint32_t kind,
                    const uint8_t secret[16], size_t body_len, int auth_ms,
                    const char *what);
/* body_len must be at most SOCK_GATE_MAX_MSG - sizeof(sock_auth). */
/* Waits until deadline for the next connection that proves the secret:
 * 0 (with *fd nonblocking, body filled, *peer set, the verdict sent),
 * SOCK_TIMEOUT or SOCK_ERR. */
int sock_gate_next(sock_gate *g, int64_t deadline, int *fd, void *body,
                   struct sockaddr_storage *peer);
/* Closes the connections still pending (not the listener). */
void sock_gate_free(sock_gate *g);

/* Which rank to blame when the connection to `peer` closed, among n ranks
 * (`me` excluded). A peer that closed because another rank died first is
 * not the one to name: candidates are peer and the ranks in closed[] (their
 * connections closed too; may be NULL), ranked by what their processes show
 * (pids[r], same_host[r]): killed by a signal, then gone (or on another
 * host), then exited, then running; a tie keeps peer. When every
 * candidate still runs or exited normally, the first rank on this host whose
 * process was killed or is gone is named. Returns peer when nothing better
 * is known. */
int sock_blame(int peer, int me, int n, const int32_t *pids,
               const uint8_t *same_host, const uint8_t *closed);

#endif
