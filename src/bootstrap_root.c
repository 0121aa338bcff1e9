/*
 * Bootstrap (src/bootstrap.h), the root side: boot_unique_id and
 * boot_unique_id_at, and the root service they start, a detached thread that
 * answers one rendezvous. It admits ranks that prove the id's secret, checks
 * that they agree on nranks and that no rank joins twice, forgets ranks that
 * leave before the rendezvous completes, and once all nranks ranks are in
 * sends every one of them the table of peers. At its timeout it tells the
 * ranks that came which ones are missing. The id's text form is read here
 * too.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "src/bootstrap_int.h"
#include "src/log.h"
#include "transports/sock_util.h"

/* ---- root service -------------------------------------------------------- */

typedef struct root_svc {
  int lfd;
  uint8_t secret[16];
  int timeout_ms;
  char addr[80];
} root_svc;

static void root_answer(const char *what, int fd, braid_result status,
                        const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void root_answer(const char *what, int fd, braid_result status,
                        const char *fmt, ...) {
  root_reply r;
  memset(&r, 0, sizeof(r));
  r.status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.text, sizeof(r.text), fmt, ap);
  va_end(ap);
  WARN(LOG_BOOT, "%s: %s", what, r.text);
  (void)sock_write_full(fd, &r, sizeof(r), sock_now_ms() + 1000);
  close(fd);
}

static void *root_main(void *arg) {
  root_svc *s = arg;
  const int64_t start = sock_now_ms();
  int64_t deadline = start + s->timeout_ms;
  char what[128], as[80];
  snprintf(what, sizeof(what), "bootstrap root %s", s->addr);
  sock_gate g;
  sock_gate_init(&g, s->lfd, BOOT_MAGIC, KIND_ROOT, s->secret,
                 sizeof(root_hello), AUTH_MS, what);
  int nranks = -1, joined = 0;
  int *fds = NULL;
  boot_peer *table = NULL;
  while (nranks < 0 || joined < nranks) {
    if (sock_now_ms() >= deadline)
      break;
    int64_t wake = sock_now_ms() + 500;
    int fd;
    root_hello h;
    struct sockaddr_storage from;
    int rc =
        sock_gate_next(&g, wake < deadline ? wake : deadline, &fd, &h, &from);
    /* A rank that left before the rendezvous finished frees its slot. */
    for (int r = 0; fds && r < nranks; r++)
      if (fds[r] >= 0 && sock_peer_dead(fds[r])) {
        WARN(LOG_BOOT, "%s: rank %d disconnected before all %d ranks arrived",
             what, r, nranks);
        close(fds[r]);
        fds[r] = -1;
        joined--;
      }
    if (fds && joined == 0) {
      /* Everyone left: the next arrival sets nranks afresh. */
      free(fds);
      free(table);
      fds = NULL;
      table = NULL;
      nranks = -1;
    }
    if (rc == SOCK_ERR) {
      WARN(LOG_BOOT, "%s: accept failed: %s", what, strerror(errno));
      break;
    }
    if (rc != 0)
      continue;
    sock_addr_str(&from, as, sizeof(as));
    if (h.nranks <= 0 || h.rank < 0 || h.rank >= h.nranks) {
      root_answer(what, fd, BRAID_ERR_INVALID_ARG,
                  "rank %d with nranks %d (from %s) is out of range", h.rank,
                  h.nranks, as);
      continue;
    }
    if (nranks < 0) {
      nranks = h.nranks;
      fds = calloc((size_t)nranks, sizeof(int));
      table = calloc((size_t)nranks, sizeof(boot_peer));
      if (fds == NULL || table == NULL) {
        root_answer(what, fd, BRAID_ERR_NOMEM, "bootstrap root out of memory");
        break;
      }
      for (int r = 0; r < nranks; r++)
        fds[r] = -1;
    }
    if (h.nranks != nranks) {
      root_answer(what, fd, BRAID_ERR_INVALID_ARG,
                  "rank %d (from %s) says nranks=%d but the ranks already "
                  "joined say nranks=%d",
                  h.rank, as, h.nranks, nranks);
      continue;
    }
    if (fds[h.rank] >= 0) {
      root_answer(what, fd, BRAID_ERR_INVALID_ARG,
                  "duplicate rank: rank %d (from %s, pid %d) already joined "
                  "(pid %d): two processes were given one rank (two jobs "
                  "meeting through one rendezvous, or a launcher's fault)",
                  h.rank, as, (int)h.me.pid, (int)table[h.rank].pid);
      continue;
    }
    fds[h.rank] = fd;
    table[h.rank] = h.me;
    joined++;
    /* give up before the first rank does, so that every rank that waits
     * hears which ranks are missing */
    if (h.wait_ms > ROOT_EARLY_MS) {
      int64_t end = sock_now_ms() + h.wait_ms - ROOT_EARLY_MS;
      if (end < deadline)
        deadline = end;
    }
    TRACE(LOG_BOOT, "%s: rank %d/%d joined from %s", what, h.rank, nranks, as);
  }
  sock_gate_free(&g);
  close(s->lfd);
  if (nranks > 0 && joined == nranks) {
    root_reply r;
    memset(&r, 0, sizeof(r));
    r.nranks = nranks;
    int64_t dl = sock_now_ms() + s->timeout_ms;
    for (int i = 0; i < nranks; i++) {
      if (sock_write_full(fds[i], &r, sizeof(r), dl) != 0 ||
          sock_write_full(fds[i], table, (size_t)nranks * sizeof(boot_peer),
                          dl) != 0)
        WARN(LOG_BOOT, "%s: could not send the peer table to rank %d", what, i);
      close(fds[i]);
    }
    INFO(LOG_BOOT, "%s: rendezvous of %d ranks complete", what, nranks);
  } else {
    char missing[128] = "";
    size_t off = 0;
    for (int i = 0; fds && i < nranks && off + 12 < sizeof(missing); i++)
      if (fds[i] < 0)
        off += (size_t)snprintf(missing + off, sizeof(missing) - off, "%s%d",
                                off ? "," : "", i);
    for (int i = 0; fds && i < nranks; i++)
      if (fds[i] >= 0)
        root_answer(what, fds[i], BRAID_ERR_TIMEOUT,
                    "rendezvous at %s timed out after %lld ms: %d of %d ranks "
                    "arrived (missing: %s)",
                    s->addr, (long long)(sock_now_ms() - start), joined, nranks,
                    missing);
    if (nranks < 0)
      WARN(LOG_BOOT, "%s: no rank arrived within %d ms; root service ends",
           what, s->timeout_ms);
  }
  free(fds);
  free(table);
  free(s);
  return NULL;
}

braid_result boot_root_start(const struct sockaddr_storage *bind_addr,
                             int reuse, const uint8_t secret[16],
                             struct sockaddr_storage *bound) {
  root_svc *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return ERR(BRAID_ERR_NOMEM, "bootstrap root: out of memory");
  if (sock_listen(bind_addr, reuse, 0, &s->lfd, bound) != 0) {
    free(s);
    return ERR_WRAP(BRAID_ERR_SYSTEM, "bootstrap root");
  }
  memcpy(s->secret, secret, 16);
  s->timeout_ms = boot_timeout_or_default(0);
  sock_addr_str(bound, s->addr, sizeof(s->addr));
  pthread_attr_t at;
  pthread_t th;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &at, root_main, s);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    close(s->lfd);
    free(s);
    return ERR(BRAID_ERR_SYSTEM, "bootstrap root: cannot start its thread: %s",
               strerror(rc));
  }
  return BRAID_SUCCESS;
}

/* ---- the unique id ------------------------------------------------------ */

static void id_encode(braid_unique_id *id, const struct sockaddr_storage *a,
                      const uint8_t secret[16]) {
  id_wire w;
  memset(&w, 0, sizeof(w));
  w.magic = BOOT_MAGIC;
  w.version = BOOT_VERSION;
  w.family = a->ss_family;
  w.port = (uint16_t)sock_addr_port(a);
  if (a->ss_family == AF_INET) {
    memcpy(w.addr, &((const struct sockaddr_in *)a)->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
    memcpy(w.addr, &in6->sin6_addr, 16);
    w.scope_id = in6->sin6_scope_id;
  }
  memcpy(w.secret, secret, 16);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &w, sizeof(w));
}

int boot_id_decode(const braid_unique_id *id, struct sockaddr_storage *a,
                   uint8_t secret[16]) {
  id_wire w;
  memcpy(&w, id->internal, sizeof(w));
  if (w.magic != BOOT_MAGIC || w.version != BOOT_VERSION ||
      (w.family != AF_INET && w.family != AF_INET6))
    return -1;
  memset(a, 0, sizeof(*a));
  a->ss_family = w.family;
  if (w.family == AF_INET) {
    memcpy(&((struct sockaddr_in *)a)->sin_addr, w.addr, 4);
  } else {
    memcpy(&((struct sockaddr_in6 *)a)->sin6_addr, w.addr, 16);
    ((struct sockaddr_in6 *)a)->sin6_scope_id = w.scope_id;
  }
  sock_addr_set_port(a, w.port);
  memcpy(secret, w.secret, 16);
  return 0;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

braid_result boot_id_from_text(const char *text, braid_unique_id *id) {
  size_t len = strlen(text);
  if (len != 2 * BRAID_UNIQUE_ID_BYTES)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%zu characters, where a unique id has %d hex digits", len,
               2 * BRAID_UNIQUE_ID_BYTES);
  braid_unique_id parsed;
  for (size_t i = 0; i < len; i++) {
    int v = hexval(text[i]);
    if (v < 0)
      return ERR(BRAID_ERR_INVALID_ARG,
                 "character %zu ('%c') is not a hex digit", i, text[i]);
    if (i % 2 == 0)
      parsed.internal[i / 2] = (char)(v << 4);
    else
      parsed.internal[i / 2] = (char)(parsed.internal[i / 2] | v);
  }
  if (boot_id_check(&parsed) != BRAID_SUCCESS) {
    char why[96];
    snprintf(why, sizeof why, "%s", err_msg());
    return ERR(BRAID_ERR_INVALID_ARG, "hex that %s", why);
  }
  *id = parsed;
  return BRAID_SUCCESS;
}

braid_result boot_id_check(const braid_unique_id *id) {
  id_wire w;
  memcpy(&w, id->internal, sizeof(w));
  if (w.magic != BOOT_MAGIC)
    return ERR(BRAID_ERR_INVALID_ARG,
               "has no braid magic: not a braid unique id");
  if (w.version != BOOT_VERSION)
    return ERR(BRAID_ERR_INVALID_ARG,
               "is a unique id of another braid version (%u, not %u)",
               (unsigned)w.version, (unsigned)BOOT_VERSION);
  if (w.family != AF_INET && w.family != AF_INET6)
    return ERR(BRAID_ERR_INVALID_ARG, "has an unknown address family %u",
               (unsigned)w.family);
  return BRAID_SUCCESS;
}

static braid_result make_secret(uint8_t secret[16]) {
  size_t got = 0;
  while (got < 16) {
    ssize_t n = getrandom(secret + got, 16 - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ERR(BRAID_ERR_SYSTEM, "getrandom failed: %s", strerror(errno));
    got += (size_t)n;
  }
  return BRAID_SUCCESS;
}

braid_result boot_unique_id(braid_unique_id *id) {
  if (id == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_unique_id: id is NULL");
  struct sockaddr_storage addr, bound;
  char ifname[64];
  braid_result lr = boot_listen_addr(NULL, &addr, ifname, sizeof ifname, NULL);
  if (lr != BRAID_SUCCESS)
    return ERR_WRAP(lr, "boot_unique_id");
  uint8_t secret[16];
  CHECKR(make_secret(secret));
  CHECKR(boot_root_start(&addr, 0, secret, &bound));
  char as[80];
  INFO(LOG_BOOT, "bootstrap root listening on %s (interface %s)",
       sock_addr_str(&bound, as, sizeof(as)), ifname);
  id_encode(id, &bound, secret);
  return BRAID_SUCCESS;
}

braid_result boot_unique_id_at(const char *host, int port,
                               const uint8_t secret[16], int is_root,
                               braid_unique_id *id) {
  if (id == NULL || secret == NULL || host == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "boot_unique_id_at: %s is NULL",
               id == NULL       ? "id"
               : secret == NULL ? "secret"
                                : "host");
  if (port <= 0 || port > 65535)
    return ERR(BRAID_ERR_INVALID_ARG,
               "boot_unique_id_at: port %d is not in 1..65535", port);
  struct sockaddr_storage addr;
  if (sock_resolve(host, port, &addr) != 0)
    return ERR_WRAP(BRAID_ERR_INVALID_ARG, "boot_unique_id_at");
  if (is_root) {
    /* Listen on every address of the family so that any name of this host
     * reaches the root. */
    struct sockaddr_storage any;
    memset(&any, 0, sizeof(any));
    any.ss_family = addr.ss_family;
    sock_addr_set_port(&any, port);
    struct sockaddr_storage bound;
    CHECKR(boot_root_start(&any, 1, secret, &bound));
  }
  id_encode(id, &addr, secret);
  return BRAID_SUCCESS;
}
