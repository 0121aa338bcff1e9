/*
 * Bootstrap (src/bootstrap.h): the rendezvous and the control mesh; the root
 * service is in bootstrap_root.c. Wire formats are private to these two files
 * (shared ones in bootstrap_int.h); both ends run the same build.
 */
#include "src/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "src/bootstrap_int.h"
#include "src/config.h"
#include "src/log.h"
#include "transports/sock_util.h"

#define FRAME_MAGIC 0x42524446u /* "BRDF": mesh frames */

/* FR_LEFT: the sender gave up on an exchange; its error message follows,
 * so that the ranks still waiting for it learn the cause (a rank that died)
 * rather than only that the sender closed its connections. */
enum {
  FR_ALLGATHER = 1,
  FR_BARRIER = 2,
  FR_P2P = 3,
  FR_SPLIT = 4,
  FR_LEFT = 5,
  FR_NOTE = 6
};
static const char *frame_name[] = {"?",
                                   "boot_allgather",
                                   "boot_barrier",
                                   "boot_send/boot_recv",
                                   "boot_split",
                                   "a notice of leaving",
                                   "boot_note_send/boot_note_recv"};

/* Frames a receiver passes over instead of failing: a note where it waits
 * for anything else (one no rank read: sent to a rank that left the
 * agreement it served), and anything else where it waits for a note (left
 * over from an exchange that failed, which the note's sender gave up on). */
static int passed_over(uint32_t want, uint32_t got) {
  return (want == FR_NOTE) != (got == FR_NOTE);
}

typedef struct mesh_hello {
  int32_t rank, nranks;
} mesh_hello;

typedef struct frame_hdr {
  uint32_t magic;
  uint32_t kind;
  uint64_t len;
} frame_hdr;

/* Sockets shared by a bootstrap and its splits. */
typedef struct boot_mesh {
  atomic_int refs;
  int nranks; /* of the world the sockets were made for */
  int *fds;   /* world rank -> socket (-1 for self) */
  uint8_t secret[16];
} boot_mesh;

struct tp_bootstrap {
  boot_mesh *m;
  int rank, nranks;
  int *map; /* rank of this view -> world rank */
  boot_peer *peers;
  int timeout_ms;
  const atomic_int *abort; /* set: exchanges end with BRAID_ERR_ABORTED */
};

/* ---- identity ------------------------------------------------------------ */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    h ^= c[i];
    h *= 1099511628211ull;
  }
  return h;
}

static void read_small(const char *path, char *buf, size_t len) {
  buf[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
}

static void fill_self(boot_peer *p, const struct sockaddr_storage *addr) {
  memset(p, 0, sizeof(*p));
  gethostname(p->host, sizeof(p->host) - 1);
  char boot_id[64], netns[64];
  read_small("/proc/sys/kernel/random/boot_id", boot_id, sizeof(boot_id));
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  netns[n > 0 ? n : 0] = '\0';
  uint64_t h = 1469598103934665603ull;
  h = fnv1a(h, p->host, strlen(p->host) + 1);
  h = fnv1a(h, boot_id, strlen(boot_id) + 1);
  h = fnv1a(h, netns, strlen(netns) + 1);
  p->host_hash = h;
  p->pid = (int32_t)getpid();
  p->addr = *addr;
}

int boot_timeout_or_default(int timeout_ms) {
  if (timeout_ms > 0)
    return timeout_ms;
  const cfg_env *c = cfg_get();
  if (c && c->timeout_ms > 0)
    return c->timeout_ms;
  return 300000;
}

/* ---- rendezvous and mesh --------------------------------------------------
 */

static void mesh_unref(boot_mesh *m) {
  if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1)
    return;
  for (int i = 0; i < m->nranks; i++)
    if (m->fds[i] >= 0)
      close(m->fds[i]);
  free(m->fds);
  free(m);
}

static boot *boot_alloc(int nranks) {
  boot *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return NULL;
  b->map = calloc((size_t)nranks, sizeof(int));
  b->peers = calloc((size_t)nranks, sizeof(boot_peer));
  if (b->map == NULL || b->peers == NULL) {
    free(b->map);
    free(b->peers);
    free(b);
    return NULL;
  }
  b->nranks = nranks;
  return b;
}

void boot_close(boot *b) {
  if (b == NULL)
    return;
  mesh_unref(b->m);
  free(b->map);
  free(b->peers);
  free(b);
}

/* The local address the kernel would use to reach `to` (a UDP connect
 * sends nothing), port 0. */
static braid_result route_source(const struct sockaddr_storage *to,
                                 struct sockaddr_storage *local) {
  char as[80];
  int s = socket(to->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  socklen_t l = sizeof(*local);
  memset(local, 0, sizeof(*local));
  if (s < 0 ||
      connect(s, (const struct sockaddr *)to, sock_addr_len(to)) != 0 ||
      getsockname(s, (struct sockaddr *)local, &l) != 0) {
    braid_result r =
        ERR(BRAID_ERR_SYSTEM, "no route to the bootstrap root at %s: %s",
            sock_addr_str(to, as, sizeof(as)), strerror(errno));
    if (s >= 0)
      close(s);
    return r;
  }
  close(s);
  sock_addr_set_port(local, 0);
  return BRAID_SUCCESS;
}

braid_result boot_listen_addr(const struct sockaddr_storage *root,
                              struct sockaddr_storage *addr, char *ifname,
                              size_t len, boot_addr_how *how) {
  const cfg_env *c = cfg_get();
  const char *spec = c ? c->socket_ifname : NULL;
  char name[64] = "";
  if (spec != NULL || root == NULL) {
    /* The root's family first: the ranks reached the root through it. */
    int fam = root != NULL ? root->ss_family : AF_INET;
    if (sock_pick_addr_family(spec, fam, addr, name, sizeof name) != 0) {
      /* The message names the variable; a setting is a bad argument. */
      char why[600];
      snprintf(why, sizeof why, "%s", err_msg());
      return ERR(spec != NULL ? BRAID_ERR_INVALID_ARG : BRAID_ERR_SYSTEM, "%s",
                 why);
    }
    if (how)
      *how = spec != NULL ? BOOT_ADDR_IFNAME : BOOT_ADDR_DEFAULT;
  } else {
    /* The address this host uses to reach the root (the kernel's choice
     * of source address for it). */
    CHECKR(route_source(root, addr));
    (void)sock_addr_ifname(addr, name, sizeof name);
    if (how)
      *how = BOOT_ADDR_ROUTE;
  }
  if (ifname != NULL && len > 0)
    snprintf(ifname, len, "%s", name);
  return BRAID_SUCCESS;
}

/* 0 once this host has a route to root, else the errno that says it has
 * none (ENETUNREACH, EHOSTUNREACH: an interface or route not up yet). */
static int no_route(const struct sockaddr_storage *root) {
  int s = socket(root->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return 0; /* not a route's fault: route_source says why */
  int e = connect(s, (const struct sockaddr *)root, sock_addr_len(root)) == 0
              ? 0
              : errno;
  close(s);
  return e == ENETUNREACH || e == EHOSTUNREACH ? e : 0;
}

static braid_result rendezvous(const struct sockaddr_storage *root,
                               const uint8_t secret[16], int rank, int nranks,
                               int64_t deadline, boot *b, int *lfd) {
  char e[200], as[80];
  sock_addr_str(root, as, sizeof(as));
  /* A route to the root that is not there yet (a network still coming up
   * when the job starts) is waited for, as a root that is not listening
   * yet is, until the deadline. */
  int nr = no_route(root);
  for (int64_t nap_ms = 50; nr != 0 && sock_left_ms(deadline) > 0;
       nr = no_route(root)) {
    int64_t left = sock_left_ms(deadline);
    struct timespec ts = {0, (long)((nap_ms < left ? nap_ms : left) * 1000000)};
    nanosleep(&ts, NULL);
    nap_ms = nap_ms < 500 ? 2 * nap_ms : 500;
  }
  if (nr != 0)
    return ERR(BRAID_ERR_TIMEOUT,
               "rank %d: no route to the bootstrap root at %s (%s) within the "
               "timeout",
               rank, as, strerror(nr));
  /* Listen where BRAID_SOCKET_IFNAME says, else on the address this host
   * uses to reach the root; peers and the tcp transport connect to it. */
  struct sockaddr_storage local, bound;
  char ifname[64];
  braid_result lr = boot_listen_addr(root, &local, ifname, sizeof ifname, NULL);
  if (lr != BRAID_SUCCESS)
    return ERR_WRAP(lr, "rank %d: control listener", rank);
  if (sock_listen(&local, 0, 0, lfd, &bound) != 0)
    return ERR_WRAP(BRAID_ERR_SYSTEM, "rank %d: control listener", rank);
  char bs[80];
  INFO(LOG_BOOT, "rank %d: control listener on %s (interface %s)", rank,
       sock_addr_str(&bound, bs, sizeof(bs)), ifname);
  root_hello h;
  memset(&h, 0, sizeof(h));
  h.rank = rank;
  h.nranks = nranks;
  h.wait_ms = sock_left_ms(deadline);
  fill_self(&h.me, &bound);
  int fd;
  int crc = sock_connect_auth(root, deadline, 0, BOOT_MAGIC, KIND_ROOT, secret,
                              &h, sizeof(h), &fd);
  if (crc != 0) {
    close(*lfd);
    return ERR(crc == SOCK_TIMEOUT   ? BRAID_ERR_TIMEOUT
               : crc == SOCK_REFUSED ? BRAID_ERR_INVALID_ARG
                                     : BRAID_ERR_SYSTEM,
               "rank %d: %s the bootstrap root: %s", rank,
               crc == SOCK_REFUSED ? "refused by" : "cannot reach", err_msg());
  }
  /* the root answers by this rank's deadline (wait_ms), less the time the
   * hello took to reach it: a moment more for its answer to arrive */
  root_reply r;
  int rc = sock_read_full(fd, &r, sizeof(r), deadline + ROOT_ANSWER_MS);
  if (rc == 0 && r.status == BRAID_SUCCESS) {
    if (r.nranks != nranks) {
      close(fd);
      close(*lfd);
      return ERR(BRAID_ERR_INTERNAL,
                 "rank %d: the bootstrap root at %s answered with a table of "
                 "%d ranks, not %d",
                 rank, as, (int)r.nranks, nranks);
    }
    rc = sock_read_full(fd, b->peers, (size_t)nranks * sizeof(boot_peer),
                        deadline);
  }
  close(fd);
  if (rc != 0) {
    braid_result res =
        ERR(rc == SOCK_TIMEOUT ? BRAID_ERR_TIMEOUT : BRAID_ERR_REMOTE,
            "rank %d: rendezvous with the bootstrap root at %s failed: %s",
            rank, as,
            rc == SOCK_TIMEOUT ? "timed out waiting for the other ranks (the "
                                 "root did not say which are missing)"
            : rc == SOCK_EOF   ? "the root closed the connection (did it "
                                 "already finish?)"
                               : sock_strerror(rc, e, sizeof(e)));
    close(*lfd);
    return res;
  }
  if (r.status != BRAID_SUCCESS) {
    r.text[sizeof(r.text) - 1] = '\0';
    close(*lfd);
    return ERR((braid_result)r.status, "rank %d: bootstrap root %s refused: %s",
               rank, as, r.text);
  }
  return BRAID_SUCCESS;
}

static braid_result build_mesh(boot *b, int lfd, int64_t deadline) {
  boot_mesh *m = b->m;
  char as[80];
  int rank = b->rank, n = b->nranks;
  for (int j = 0; j < rank; j++) {
    mesh_hello h = {rank, n};
    int fd;
    if (sock_connect_auth(&b->peers[j].addr, deadline, 0, BOOT_MAGIC, KIND_MESH,
                          m->secret, &h, sizeof(h), &fd) != 0)
      return ERR_WRAP(BRAID_ERR_SYSTEM,
                      "rank %d: control connection to rank %d", rank, j);
    m->fds[j] = fd;
  }
  char what[96];
  snprintf(what, sizeof(what), "control listener of rank %d", rank);
  sock_gate g;
  sock_gate_init(&g, lfd, BOOT_MAGIC, KIND_MESH, m->secret, sizeof(mesh_hello),
                 AUTH_MS, what);
  int need = n - 1 - rank;
  braid_result res = BRAID_SUCCESS;
  while (need > 0) {
    int fd;
    mesh_hello h;
    struct sockaddr_storage from;
    int rc = sock_gate_next(&g, deadline, &fd, &h, &from);
    if (rc != 0) {
      char missing[96] = "";
      size_t off = 0;
      for (int j = rank + 1; j < n && off + 12 < sizeof(missing); j++)
        if (m->fds[j] < 0)
          off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%d",
                                  off ? "," : "", j);
      res =
          ERR(rc == SOCK_TIMEOUT ? BRAID_ERR_TIMEOUT : BRAID_ERR_SYSTEM,
              "rank %d: %s waiting for control connections from ranks %s", rank,
              rc == SOCK_TIMEOUT ? "timed out" : "accept failed", missing);
      break;
    }
    if (h.nranks != n || h.rank <= rank || h.rank >= n || m->fds[h.rank] >= 0) {
      WARN(LOG_BOOT,
           "%s: rejected connection from %s claiming rank %d of %d "
           "(expected one of ranks %d..%d of %d, once each)",
           what, sock_addr_str(&from, as, sizeof(as)), h.rank, h.nranks,
           rank + 1, n - 1, n);
      close(fd);
      continue;
    }
    m->fds[h.rank] = fd;
    need--;
  }
  sock_gate_free(&g);
  return res;
}

braid_result boot_init(const braid_unique_id *id, int rank, int nranks,
                       int timeout_ms, boot **out) {
  if (out)
    *out = NULL;
  if (id == NULL || out == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_init: %s is NULL",
               id ? "out" : "id");
  if (nranks <= 0 || rank < 0 || rank >= nranks)
    return ERR(BRAID_ERR_INVALID_ARG,
               "boot_init: rank %d is not in 0..nranks-1 (nranks %d)", rank,
               nranks);
  struct sockaddr_storage root;
  uint8_t secret[16];
  if (boot_id_decode(id, &root, secret) != 0)
    return ERR(BRAID_ERR_INVALID_ARG,
               "boot_init: the unique id is not a braid id of this version "
               "(bad magic/version/address family)");
  timeout_ms = boot_timeout_or_default(timeout_ms);
  int64_t deadline = sock_now_ms() + timeout_ms;
  boot *b = boot_alloc(nranks);
  boot_mesh *m = calloc(1, sizeof(*m));
  if (b == NULL || m == NULL || !(m->fds = malloc(nranks * sizeof(int)))) {
    free(m);
    boot_close(b);
    return ERR(BRAID_ERR_NOMEM, "boot_init: out of memory");
  }
  atomic_init(&m->refs, 1);
  m->nranks = nranks;
  memcpy(m->secret, secret, 16);
  for (int i = 0; i < nranks; i++) {
    m->fds[i] = -1;
    b->map[i] = i;
  }
  b->m = m;
  b->rank = rank;
  b->timeout_ms = timeout_ms;
  int lfd = -1;
  braid_result r = rendezvous(&root, secret, rank, nranks, deadline, b, &lfd);
  if (r == BRAID_SUCCESS) {
    r = build_mesh(b, lfd, deadline);
    close(lfd);
  }
  if (r != BRAID_SUCCESS) {
    boot_close(b);
    return r;
  }
  INFO(LOG_BOOT, "rank %d/%d: bootstrap ready", rank, nranks);
  *out = b;
  return BRAID_SUCCESS;
}

/* ---- accessors ----------------------------------------------------------- */

int boot_rank(const boot *b) { return b->rank; }
int boot_nranks(const boot *b) { return b->nranks; }
const boot_peer *boot_peer_info(const boot *b, int rank) {
  if (rank < 0 || rank >= b->nranks)
    return NULL;
  return &b->peers[rank];
}
int boot_same_host(const boot *b, int a, int b_rank) {
  if (a < 0 || a >= b->nranks || b_rank < 0 || b_rank >= b->nranks)
    return 0;
  return b->peers[a].host_hash == b->peers[b_rank].host_hash;
}
const uint8_t *boot_secret(const boot *b, size_t *len) {
  if (len)
    *len = sizeof(b->m->secret);
  return b->m->secret;
}

/* ---- framed exchange over the mesh ----------------------------------------
 */

typedef struct xop {
  int peer; /* rank of this view */
  int send;
  frame_hdr hdr;
  size_t hoff;
  char *buf;
  size_t len, off;
  uint64_t skip; /* bytes of a frame passed over, yet to read */
  int done;
} xop;

static int peer_fd(const boot *b, int peer) { return b->m->fds[b->map[peer]]; }

static braid_result xop_dead(boot *b, xop *o, const char *what, int rc) {
  return ERR(BRAID_ERR_REMOTE,
             "%s: rank %d closed its control connection to rank %d (%s; "
             "process died?)",
             what, o->peer, b->rank, rc == 0 ? "end of file" : strerror(errno));
}

/* How a notice of leaving starts when the rank left on a mismatch of calls
 * (the receiver then fails with BRAID_ERR_MISMATCH too). */
#define LEFT_MISMATCH "mismatch: "

/* The peer of o sent FR_LEFT: reads its message (sent in one piece right
 * after the header; waits at most a second for it) into the error. */
static braid_result peer_left(boot *b, xop *o, const char *what) {
  char why[TEXT_LEN] = "";
  size_t want =
      o->hdr.len < sizeof why - 1 ? (size_t)o->hdr.len : sizeof why - 1;
  size_t got = 0;
  int64_t deadline = sock_now_ms() + 1000;
  while (got < want && sock_left_ms(deadline) > 0) {
    struct pollfd p = {.fd = peer_fd(b, o->peer), .events = POLLIN};
    if (poll(&p, 1, sock_left_ms(deadline)) <= 0)
      break;
    ssize_t n = recv(p.fd, why + got, want - got, MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
      break;
    got += n > 0 ? (size_t)n : 0;
  }
  why[got] = '\0';
  /* a rank that left on a mismatch of calls (tell_left) makes it one here */
  if (strncmp(why, LEFT_MISMATCH, strlen(LEFT_MISMATCH)) == 0)
    return ERR(BRAID_ERR_MISMATCH, "%s: rank %d left the exchange: %s", what,
               o->peer, why + strlen(LEFT_MISMATCH));
  return ERR(BRAID_ERR_REMOTE, "%s: rank %d left the exchange: %s", what,
             o->peer, got > 0 ? why : "(no reason received)");
}

/* This rank gives up on an exchange (the thread's message, err_msg, says
 * why): tells every peer whose frame of this exchange is not half sent, so
 * that those waiting for it learn the cause. Best effort: never waits. */
static void tell_left(boot *b, const xop *ops, int n, braid_result r) {
  char why[TEXT_LEN];
  snprintf(why, sizeof why, "%s%s",
           r == BRAID_ERR_MISMATCH ? LEFT_MISMATCH : "", err_msg());
  size_t len = strlen(why);
  for (int i = 0; i < n; i++) {
    if (!ops[i].send || (ops[i].hoff > 0 && !ops[i].done))
      continue;
    frame_hdr h = {FRAME_MAGIC, FR_LEFT, len};
    struct iovec iov[2] = {{&h, sizeof h}, {why, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    (void)sendmsg(peer_fd(b, ops[i].peer), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

/* Moves what it can for one op: BRAID_SUCCESS (done or not), or an error. */
static braid_result xop_step(boot *b, xop *o, uint32_t kind, const char *what) {
  int fd = peer_fd(b, o->peer);
  while (!o->done) {
    ssize_t n;
    if (o->send) {
      struct iovec iov[2];
      int k = 0;
      if (o->hoff < sizeof(o->hdr)) {
        iov[k].iov_base = (char *)&o->hdr + o->hoff;
        iov[k++].iov_len = sizeof(o->hdr) - o->hoff;
      }
      iov[k].iov_base = o->buf + o->off;
      iov[k++].iov_len = o->len - o->off;
      struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
      n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0)
        goto fail;
      size_t h = sizeof(o->hdr) - o->hoff;
      if ((size_t)n >= h) {
        o->hoff = sizeof(o->hdr);
        o->off += (size_t)n - h;
      } else {
        o->hoff += (size_t)n;
      }
    } else if (o->skip > 0) {
      char junk[4096];
      n = recv(fd, junk, o->skip < sizeof junk ? (size_t)o->skip : sizeof junk,
               MSG_DONTWAIT);
      if (n <= 0)
        goto fail;
      o->skip -= (uint64_t)n;
      continue;
    } else if (o->hoff < sizeof(o->hdr)) {
      n = recv(fd, (char *)&o->hdr + o->hoff, sizeof(o->hdr) - o->hoff,
               MSG_DONTWAIT);
      if (n <= 0)
        goto fail;
      o->hoff += (size_t)n;
      if (o->hoff < sizeof(o->hdr))
        continue;
      if (o->hdr.magic != FRAME_MAGIC)
        return ERR(BRAID_ERR_REMOTE,
                   "%s: garbage on the control connection from rank %d", what,
                   o->peer);
      if (passed_over(kind, o->hdr.kind)) {
        o->skip = o->hdr.len;
        o->hoff = 0;
        continue;
      }
      if (o->hdr.kind == FR_LEFT)
        return peer_left(b, o, what);
      /* the ranks are in different calls: a mismatch, as between
       * collectives */
      if (o->hdr.kind != kind)
        return ERR(BRAID_ERR_MISMATCH,
                   "%s: rank %d sent a %s message instead (bootstrap calls in "
                   "a different order?)",
                   what, o->peer,
                   o->hdr.kind <= FR_LEFT ? frame_name[o->hdr.kind]
                                          : "unknown");
      if (o->hdr.len != o->len)
        return ERR(BRAID_ERR_MISMATCH,
                   "%s: rank %d sent %llu bytes where rank %d expects %zu "
                   "(lengths differ between ranks, or calls in a different "
                   "order)",
                   what, o->peer, (unsigned long long)o->hdr.len, b->rank,
                   o->len);
    } else {
      n = recv(fd, o->buf + o->off, o->len - o->off, MSG_DONTWAIT);
      if (n <= 0)
        goto fail;
      o->off += (size_t)n;
    }
    if (o->hoff == sizeof(o->hdr) && o->off == o->len)
      o->done = 1;
    continue;
  fail:
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return BRAID_SUCCESS;
    if (n < 0 && errno == EINTR)
      continue;
    return xop_dead(b, o, what, (int)n);
  }
  return BRAID_SUCCESS;
}

static braid_result xchg(boot *b, xop *ops, int n, uint32_t kind) {
  const char *what = frame_name[kind];
  int64_t deadline = sock_now_ms() + b->timeout_ms;
  struct pollfd *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(*p));
  int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  if (p == NULL || idx == NULL) {
    free(p);
    free(idx);
    return ERR(BRAID_ERR_NOMEM, "%s: out of memory", what);
  }
  for (int i = 0; i < n; i++) {
    ops[i].hdr.magic = FRAME_MAGIC;
    ops[i].hdr.kind = kind;
    ops[i].hdr.len = ops[i].len;
    ops[i].hoff = ops[i].off = 0;
    ops[i].done = 0;
  }
  braid_result r = BRAID_SUCCESS;
  for (;;) {
    int np = 0;
    for (int i = 0; i < n; i++) {
      if (ops[i].done)
        continue;
      p[np].fd = peer_fd(b, ops[i].peer);
      p[np].events = ops[i].send ? POLLOUT : POLLIN;
      p[np].revents = 0;
      idx[np++] = i;
    }
    if (np == 0)
      break;
    /* in slices, to see an abort of the communicator from another thread */
    int left = sock_left_ms(deadline);
    int k = poll(p, (nfds_t)np, b->abort != NULL && left > 20 ? 20 : left);
    if (k < 0 && errno == EINTR)
      continue;
    if (b->abort != NULL && atomic_load(b->abort)) {
      r = ERR(BRAID_ERR_ABORTED, "%s: rank %d: the communicator was aborted",
              what, b->rank);
      break;
    }
    if (k == 0 && sock_left_ms(deadline) > 0)
      continue;
    if (k <= 0) {
      xop *o = &ops[idx[0]];
      r = ERR(BRAID_ERR_TIMEOUT,
              "%s: rank %d timed out after %d ms waiting to %s rank %d", what,
              b->rank, b->timeout_ms, o->send ? "send to" : "receive from",
              o->peer);
      break;
    }
    for (int j = 0; j < np && r == BRAID_SUCCESS; j++)
      if (p[j].revents)
        r = xop_step(b, &ops[idx[j]], kind, what);
    if (r != BRAID_SUCCESS)
      break;
  }
  if (r == BRAID_ERR_REMOTE || r == BRAID_ERR_TIMEOUT ||
      r == BRAID_ERR_MISMATCH)
    tell_left(b, ops, n, r);
  free(p);
  free(idx);
  return r;
}

static braid_result gather_kind(boot *b, const void *mine, void *all,
                                size_t len, uint32_t kind) {
  int n = b->nranks;
  char *dst = all;
  if (len && mine != dst + (size_t)b->rank * len)
    memcpy(dst + (size_t)b->rank * len, mine, len);
  if (n == 1)
    return BRAID_SUCCESS;
  xop *ops = calloc(2 * (size_t)(n - 1), sizeof(xop));
  if (ops == NULL)
    return ERR(BRAID_ERR_NOMEM, "%s: out of memory", frame_name[kind]);
  int k = 0;
  for (int p = 0; p < n; p++) {
    if (p == b->rank)
      continue;
    ops[k].peer = p;
    ops[k].send = 1;
    ops[k].buf = dst + (size_t)b->rank * len;
    ops[k++].len = len;
    ops[k].peer = p;
    ops[k].buf = dst + (size_t)p * len;
    ops[k++].len = len;
  }
  braid_result r = xchg(b, ops, k, kind);
  free(ops);
  return r;
}

braid_result boot_allgather(boot *b, const void *mine, void *all, size_t len) {
  if (b == NULL || (len && (mine == NULL || all == NULL)))
    return ERR(BRAID_ERR_INVALID_ARG, "boot_allgather: NULL %s",
               b ? "buffer" : "bootstrap");
  return gather_kind(b, mine, all, len, FR_ALLGATHER);
}

void boot_set_abort(boot *b, const atomic_int *flag) {
  if (b != NULL)
    b->abort = flag;
}

braid_result boot_barrier(boot *b) {
  if (b == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_barrier: NULL bootstrap");
  char none = 0;
  return gather_kind(b, &none, &none, 0, FR_BARRIER);
}

static braid_result p2p(boot *b, int peer, void *buf, size_t len, int send,
                        uint32_t kind) {
  const char *what = kind == FR_NOTE
                         ? (send ? "boot_note_send" : "boot_note_recv")
                     : send ? "boot_send"
                            : "boot_recv";
  if (b == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "%s: NULL bootstrap", what);
  if (peer < 0 || peer >= b->nranks || peer == b->rank)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s: peer %d is not another rank of 0..%d (this is rank %d)",
               what, peer, b->nranks - 1, b->rank);
  if (len && buf == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "%s: NULL buffer", what);
  xop o;
  memset(&o, 0, sizeof(o));
  o.peer = peer;
  o.send = send;
  o.buf = buf;
  o.len = len;
  return xchg(b, &o, 1, kind);
}

braid_result boot_send(boot *b, int peer, const void *buf, size_t len) {
  return p2p(b, peer, (void *)buf, len, 1, FR_P2P);
}

braid_result boot_recv(boot *b, int peer, void *buf, size_t len) {
  return p2p(b, peer, buf, len, 0, FR_P2P);
}

braid_result boot_note_send(boot *b, int peer, const void *buf, size_t len) {
  return p2p(b, peer, (void *)buf, len, 1, FR_NOTE);
}

braid_result boot_note_recv(boot *b, int peer, void *buf, size_t len) {
  return p2p(b, peer, buf, len, 0, FR_NOTE);
}

braid_result boot_split(boot *parent, const int *ranks, int nranks, int rank,
                        boot **out) {
  if (out)
    *out = NULL;
  if (parent == NULL || ranks == NULL || out == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_split: %s is NULL",
               parent == NULL  ? "parent"
               : ranks == NULL ? "ranks"
                               : "out");
  if (nranks <= 0 || nranks > parent->nranks || rank < 0 || rank >= nranks)
    return ERR(
        BRAID_ERR_INVALID_ARG,
        "boot_split: rank %d / nranks %d invalid for a parent of %d ranks",
        rank, nranks, parent->nranks);
  if (ranks[rank] != parent->rank)
    return ERR(BRAID_ERR_INVALID_ARG,
               "boot_split: ranks[%d] is %d but this process is parent rank %d",
               rank, ranks[rank], parent->rank);
  for (int i = 0; i < nranks; i++) {
    int bad = ranks[i] < 0 || ranks[i] >= parent->nranks;
    for (int j = 0; j < i && !bad; j++)
      bad = ranks[j] == ranks[i];
    if (bad)
      return ERR(BRAID_ERR_INVALID_ARG,
                 "boot_split: ranks[%d]=%d is out of range or repeated "
                 "(parent has %d ranks)",
                 i, ranks[i], parent->nranks);
  }
  boot *b = boot_alloc(nranks);
  if (b == NULL)
    return ERR(BRAID_ERR_NOMEM, "boot_split: out of memory");
  for (int i = 0; i < nranks; i++) {
    b->map[i] = parent->map[ranks[i]];
    b->peers[i] = parent->peers[ranks[i]];
  }
  b->rank = rank;
  b->timeout_ms = parent->timeout_ms;
  b->m = parent->m;
  atomic_fetch_add(&b->m->refs, 1);
  /* Every member must hold the same member list. */
  uint64_t h =
      fnv1a(1469598103934665603ull, b->map, (size_t)nranks * sizeof(int));
  uint64_t *all = malloc((size_t)nranks * sizeof(uint64_t));
  braid_result r = all ? gather_kind(b, &h, all, sizeof(h), FR_SPLIT)
                       : ERR(BRAID_ERR_NOMEM, "boot_split: out of memory");
  for (int i = 0; r == BRAID_SUCCESS && i < nranks; i++)
    if (all[i] != h)
      r = ERR(BRAID_ERR_INVALID_ARG,
              "boot_split: rank %d (parent rank %d) passed a different member "
              "list than rank %d",
              i, ranks[i], rank);
  free(all);
  if (r != BRAID_SUCCESS) {
    boot_close(b);
    return r;
  }
  *out = b;
  return BRAID_SUCCESS;
}

int boot_peer_gone(boot *b, int p) {
  if (b == NULL || p < 0 || p >= b->nranks || p == b->rank)
    return 0;
  int fd = peer_fd(b, p);
  return fd >= 0 && sock_peer_dead(fd);
}

braid_result boot_check_peers(boot *b, int *dead) {
  if (b == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_check_peers: NULL bootstrap");
  for (int p = 0; p < b->nranks; p++) {
    if (p == b->rank)
      continue;
    int fd = peer_fd(b, p);
    if (fd >= 0 && sock_peer_dead(fd)) {
      int32_t *pids = malloc((size_t)b->nranks * sizeof(int32_t));
      uint8_t *same = calloc((size_t)b->nranks, 2);
      for (int q = 0; pids && same && q < b->nranks; q++) {
        pids[q] = b->peers[q].pid;
        same[q] = (uint8_t)boot_same_host(b, b->rank, q);
        int qfd = q > p && q != b->rank ? peer_fd(b, q) : -1;
        same[b->nranks + q] = (uint8_t)(qfd >= 0 && sock_peer_dead(qfd));
      }
      int d = pids && same ? sock_blame(p, b->rank, b->nranks, pids, same,
                                        same + b->nranks)
                           : p;
      free(pids);
      free(same);
      if (dead)
        *dead = d;
      if (d != p)
        return ERR(BRAID_ERR_REMOTE,
                   "rank %d (pid %d on %s) died; rank %d then closed its "
                   "control connection to rank %d",
                   d, (int)b->peers[d].pid, b->peers[d].host, p, b->rank);
      return ERR(BRAID_ERR_REMOTE,
                 "rank %d (pid %d on %s) closed its control connection to "
                 "rank %d (process died?)",
                 p, (int)b->peers[p].pid, b->peers[p].host, b->rank);
    }
  }
  return BRAID_SUCCESS;
}
