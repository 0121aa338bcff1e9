/*
 * Bootstrap: rendezvous through the root named in the unique id, then a mesh
 * of control sockets (one per pair of ranks) that carries small blobs for
 * setup and tells a rank when a peer dies (EOF or reset on its socket).
 * Every connection first proves the id's secret by a challenge-response
 * (the secret never crosses the wire); one that does not, or not within a
 * second, is logged and dropped and never reaches the job, and a flood of
 * such connections neither delays the ranks nor exhausts descriptors
 * (transports/sock_gate.c).
 */
#ifndef BRAID_SRC_BOOTSTRAP_H
#define BRAID_SRC_BOOTSTRAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "braid.h"

typedef struct tp_bootstrap boot;

/* What each rank publishes about itself at rendezvous. */
typedef struct boot_peer {
  char host[64];      /* hostname */
  uint64_t host_hash; /* hostname + boot id + net namespace: same host test */
  int32_t pid;
  struct sockaddr_storage addr; /* this rank's control listener (IP to reach) */
} boot_peer;

/* Every call that can fail returns a braid_result and says why in the
 * calling thread's message (ERR, src/log.h; read it with err_msg). */

/* Fills id: root address (boot_listen_addr without a root:
 * BRAID_SOCKET_IFNAME / first non-loopback interface, else loopback), a
 * random secret, a magic. Starts, in this
 * process, the root service thread that answers one rendezvous. */
braid_result boot_unique_id(braid_unique_id *id);

/* An id for a root at a known address (torchrun's MASTER_ADDR/MASTER_PORT,
 * BRAID_COMM_ID): the secret comes from the caller. When is_root, this
 * process starts the root service listening on host:port. */
braid_result boot_unique_id_at(const char *host, int port,
                               const uint8_t secret[16], int is_root,
                               braid_unique_id *id);

/* Reads braid_unique_id_to_string's text into *id (untouched on failure):
 * BRAID_SUCCESS, or BRAID_ERR_INVALID_ARG with why (length, a character
 * that is not a hex digit, or hex that is no braid id: its magic, version
 * and address family). */
braid_result boot_id_from_text(const char *text, braid_unique_id *id);
/* BRAID_SUCCESS when id is a braid id of this version (magic, version,
 * address family), else BRAID_ERR_INVALID_ARG with why, in words to follow
 * "id": "has no braid magic ...". */
braid_result boot_id_check(const braid_unique_id *id);

/* How boot_listen_addr chose its address. */
typedef enum boot_addr_how {
  BOOT_ADDR_IFNAME = 1, /* the first interface BRAID_SOCKET_IFNAME passes */
  BOOT_ADDR_ROUTE,      /* the kernel's source address toward the root */
  BOOT_ADDR_DEFAULT     /* no root given: the address boot_unique_id takes */
} boot_addr_how;

/* The address (port 0) this process listens on for the bootstrap: the root
 * service of boot_unique_id, every rank's control listener, and through the
 * latter the tcp transport's listeners. With BRAID_SOCKET_IFNAME, the first
 * interface that passes it (sock_pick_addr's rules, root's family first);
 * else, with root, the address this host reaches root from; else the first
 * up non-loopback IPv4 interface (sock_pick_addr). ifname (len bytes, may
 * be NULL) gets the interface's name, how (may be NULL) the rule. A setting
 * that matches no interface here is BRAID_ERR_INVALID_ARG naming the
 * variable and the interfaces that are up. braid-doctor reports what this
 * returns. */
braid_result boot_listen_addr(const struct sockaddr_storage *root,
                              struct sockaddr_storage *addr, char *ifname,
                              size_t len, boot_addr_how *how);

/* Collective over nranks: rendezvous, then the control mesh. */
braid_result boot_init(const braid_unique_id *id, int rank, int nranks,
                       int timeout_ms, boot **out);
/* A bootstrap for a subset of the ranks of `parent` (split): ranks[i] is the
 * parent rank of new rank i. Shares the parent's sockets. Collective over the
 * subset. */
braid_result boot_split(boot *parent, const int *ranks, int nranks, int rank,
                        boot **out);
void boot_close(boot *b);

int boot_rank(const boot *b);
int boot_nranks(const boot *b);
const boot_peer *boot_peer_info(const boot *b, int rank);
int boot_same_host(const boot *b, int a, int b_rank);
/* 1 if rank p's control connection has closed (its process is gone). */
int boot_peer_gone(boot *b, int p);
/* The secret bytes from the id (transports authenticate with them too). */
const uint8_t *boot_secret(const boot *b, size_t *len);

/* All collective over the bootstrap's ranks; bounded by the timeout. */
braid_result boot_allgather(boot *b, const void *mine, void *all, size_t len);
braid_result boot_barrier(boot *b);
/* Exchanges on b end with BRAID_ERR_ABORTED once *flag is set (another
 * thread's braid_comm_abort); NULL: never. */
void boot_set_abort(boot *b, const atomic_int *flag);
braid_result boot_send(boot *b, int peer, const void *buf, size_t len);
braid_result boot_recv(boot *b, int peer, void *buf, size_t len);
/* Notes, for an agreement among ranks some of which may have left or
 * failed an exchange (braid_comm_shrink): a note no rank reads does not
 * disturb the next call (every receive passes over notes), and a note's
 * receive passes over frames left from an exchange that failed. */
braid_result boot_note_send(boot *b, int peer, const void *buf, size_t len);
braid_result boot_note_recv(boot *b, int peer, void *buf, size_t len);
/* Polls every control socket once: BRAID_SUCCESS, or BRAID_ERR_REMOTE with
 * *dead set to the (this bootstrap's) rank whose socket closed. */
braid_result boot_check_peers(boot *b, int *dead);

#endif
