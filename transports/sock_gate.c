/*
 * The greeting of every braid connection (transports/sock_util.h): the
 * connecting side's challenge-response (sock_connect_auth) and the
 * listener's authenticating accept loop (sock_gate), which serves all
 * pending greetings at once so that silent or garbage connections neither
 * delay the real ranks nor exhaust descriptors.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "src/log.h"
#include "transports/hmac.h"
#include "transports/sock_util.h"

#define GATE_LOGGED 8     /* drops logged with WARN; later ones are counted */
#define GATE_BATCH 64     /* accepts per round before serving the pending */
#define RETRY_MAX_MS 50   /* longest pause before greeting again */
#define RETRY_FIRST_MS 10 /* first pause after being dropped */
/* How long a connection waits for the listener's challenge (its first
 * bytes, sent as it accepts) before greeting again on a new one: a
 * connection the listener never saw (the handshake's last ACK lost on a
 * lossy link, the listener's SYN-ACK retries spent) stays open on this side
 * alone and would wait out the whole deadline. */
#define CHALLENGE_WAIT_MS 5000

static const char client_label[] = "braid greeting: client";
static const char server_label[] = "braid greeting: server";

static int fill_random(uint8_t *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(buf + got, len - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    got += (size_t)n;
  }
  return 0;
}

static void sign_start(hmac_ctx *h, const uint8_t secret[16], const char *label,
                       uint32_t magic, uint32_t kind,
                       const uint8_t server_nonce[SOCK_NONCE],
                       const uint8_t client_nonce[SOCK_NONCE]) {
  hmac_init(h, secret, 16);
  hmac_update(h, label, strlen(label));
  hmac_update(h, &magic, sizeof(magic));
  hmac_update(h, &kind, sizeof(kind));
  hmac_update(h, server_nonce, SOCK_NONCE);
  hmac_update(h, client_nonce, SOCK_NONCE);
}

void sock_auth_sign(const uint8_t secret[16], uint32_t magic, uint32_t kind,
                    const uint8_t server_nonce[SOCK_NONCE],
                    const uint8_t client_nonce[SOCK_NONCE], const void *body,
                    size_t body_len, uint8_t mac[SOCK_MAC]) {
  hmac_ctx h;
  sign_start(&h, secret, client_label, magic, kind, server_nonce, client_nonce);
  hmac_update(&h, body, body_len);
  hmac_final(&h, mac);
}

/* The listener's proof, over the whole exchange. */
static void server_sign(const uint8_t secret[16], uint32_t magic, uint32_t kind,
                        const uint8_t server_nonce[SOCK_NONCE],
                        const sock_auth *a, uint8_t mac[SOCK_MAC]) {
  hmac_ctx h;
  sign_start(&h, secret, server_label, magic, kind, server_nonce, a->nonce);
  hmac_update(&h, a->mac, sizeof(a->mac));
  hmac_final(&h, mac);
}

/* ---- the connecting side ------------------------------------------------- */

/* One greeting on a connected fd: 0 admitted, 1 dropped before the verdict
 * (greet again), or SOCK_REFUSED / SOCK_TIMEOUT / SOCK_ERR with its
 * message recorded. */
static int greet_once(int fd, const char *as, int64_t deadline, uint32_t magic,
                      uint32_t kind, const uint8_t secret[16], const void *body,
                      size_t body_len) {
  sock_challenge ch;
  int64_t wait = sock_now_ms() + CHALLENGE_WAIT_MS;
  int rc =
      sock_read_full(fd, &ch, sizeof(ch), wait < deadline ? wait : deadline);
  if (rc == SOCK_EOF || rc == SOCK_RESET ||
      (rc == SOCK_TIMEOUT && wait < deadline)) {
    if (rc == SOCK_TIMEOUT)
      INFO(LOG_BOOT | LOG_NET,
           "no challenge from %s within %d ms: connecting again", as,
           CHALLENGE_WAIT_MS);
    return 1;
  }
  if (rc != 0) {
    char e[96];
    return SOCK_FAIL(rc, "waiting for the challenge of %s: %s", as,
                     sock_strerror(rc, e, sizeof(e)));
  }
  if (ch.magic != magic || ch.kind != kind)
    return SOCK_FAIL(SOCK_REFUSED,
                     "%s is not the braid listener expected (its challenge has "
                     "magic 0x%08x kind %u, not 0x%08x kind %u)",
                     as, ch.magic, ch.kind, magic, kind);
  uint8_t msg[SOCK_GATE_MAX_MSG];
  sock_auth a;
  memset(&a, 0, sizeof(a));
  a.magic = magic;
  a.kind = kind;
  if (fill_random(a.nonce, sizeof(a.nonce)) != 0)
    return SOCK_FAIL(SOCK_ERR, "getrandom failed: %s", strerror(errno));
  sock_auth_sign(secret, magic, kind, ch.nonce, a.nonce, body, body_len, a.mac);
  memcpy(msg, &a, sizeof(a));
  memcpy(msg + sizeof(a), body, body_len);
  rc = sock_write_full(fd, msg, sizeof(a) + body_len, deadline);
  sock_verdict v;
  if (rc == 0)
    rc = sock_read_full(fd, &v, sizeof(v), deadline);
  if (rc == SOCK_EOF || rc == SOCK_RESET)
    return 1;
  if (rc != 0) {
    char e[96];
    return SOCK_FAIL(rc, "greeting %s: %s", as,
                     sock_strerror(rc, e, sizeof(e)));
  }
  if (v.magic != magic || v.status != SOCK_VERDICT_OK)
    return SOCK_FAIL(SOCK_REFUSED,
                     "%s refused this process's proof of the job's secret (the "
                     "unique id or BRAID_SECRET differs from the other ranks')",
                     as);
  uint8_t want[SOCK_MAC];
  server_sign(secret, magic, kind, ch.nonce, &a, want);
  if (!hmac_equal(want, v.mac, sizeof(want)))
    return SOCK_FAIL(SOCK_REFUSED,
                     "%s admitted this process but did not prove the job's "
                     "secret itself (not this job's listener)",
                     as);
  return 0;
}

int sock_connect_auth(const struct sockaddr_storage *addr, int64_t deadline,
                      size_t bufs, uint32_t magic, uint32_t kind,
                      const uint8_t secret[16], const void *body,
                      size_t body_len, int *fd) {
  char as[80];
  sock_addr_str(addr, as, sizeof(as));
  if (body_len > SOCK_GATE_MAX_MSG - sizeof(sock_auth))
    return SOCK_FAIL(SOCK_ERR, "greeting body of %zu bytes is too long for %s",
                     body_len, as);
  int pause = RETRY_FIRST_MS, drops = 0;
  for (;;) {
    int s;
    int rc = sock_connect(addr, deadline, bufs, &s);
    if (rc != 0)
      return rc;
    rc = greet_once(s, as, deadline, magic, kind, secret, body, body_len);
    if (rc == 0) {
      if (drops > 0)
        INFO(LOG_BOOT | LOG_NET, "admitted by %s after %d dropped greetings",
             as, drops);
      *fd = s;
      return 0;
    }
    close(s);
    if (rc != 1)
      return rc;
    drops++;
    int left = sock_left_ms(deadline);
    if (left == 0)
      return SOCK_FAIL(SOCK_TIMEOUT,
                       "%s dropped all %d greetings of this process before "
                       "answering (flooded, or too slow)",
                       as, drops);
    TRACE(LOG_BOOT | LOG_NET, "%s dropped greeting %d; greeting again", as,
          drops);
    int nap = pause < left ? pause : left;
    struct timespec ts = {nap / 1000, (long)(nap % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pause = pause * 2 < RETRY_MAX_MS ? pause * 2 : RETRY_MAX_MS;
  }
}

/* ---- the listening side -------------------------------------------------- */

struct sock_gate_conn {
  int fd;
  int ready; /* poll saw it readable */
  struct sockaddr_storage addr;
  int64_t since; /* accept time */
  uint8_t nonce[SOCK_NONCE];
  size_t got;
  uint8_t buf[SOCK_GATE_MAX_MSG];
};

void sock_gate_init(sock_gate *g, int lfd, uint32_t magic, uint32_t kind,
                    const uint8_t secret[16], size_t body_len, int auth_ms,
                    const char *what) {
  memset(g, 0, sizeof(*g));
  g->lfd = lfd;
  g->magic = magic;
  g->kind = kind;
  memcpy(g->secret, secret, sizeof(g->secret));
  g->body_len = body_len;
  g->auth_ms = auth_ms;
  snprintf(g->what, sizeof(g->what), "%s", what);
}

static void gate_log(sock_gate *g, const struct sockaddr_storage *a,
                     const char *why) {
  char as[80];
  sock_addr_str(a, as, sizeof(as));
  if (++g->dropped <= GATE_LOGGED)
    WARN(LOG_BOOT | LOG_NET, "%s: rejected connection from %s: %s%s", g->what,
         as, why,
         g->dropped == GATE_LOGGED ? " (further rejections are counted)" : "");
  else
    TRACE(LOG_BOOT | LOG_NET, "%s: rejected connection from %s: %s", g->what,
          as, why);
}

static void gate_drop(sock_gate *g, int i, const char *why) {
  gate_log(g, &g->pend[i].addr, why);
  close(g->pend[i].fd);
  g->pend[i] = g->pend[--g->npend];
}

static void drop_oldest(sock_gate *g) {
  int old = 0;
  for (int i = 1; i < g->npend; i++)
    if (g->pend[i].since < g->pend[old].since)
      old = i;
  char why[128];
  snprintf(why, sizeof(why),
           "dropped to make room (%d connections were waiting to prove the "
           "secret)",
           g->npend);
  gate_drop(g, old, why);
}

static int gate_grow(sock_gate *g) {
  if (g->npend < g->cap)
    return 0;
  int nc = g->cap ? 2 * g->cap : 8;
  if (nc > SOCK_GATE_MAX_PENDING)
    nc = SOCK_GATE_MAX_PENDING;
  sock_gate_conn *np = realloc(g->pend, (size_t)nc * sizeof(*np));
  if (np == NULL)
    return -1;
  g->pend = np;
  struct pollfd *pf = realloc(g->pfd, (size_t)(nc + 1) * sizeof(*pf));
  if (pf == NULL)
    return -1;
  g->pfd = pf;
  g->cap = nc;
  return 0;
}

/* Accepts what waits (at most a batch) and sends each its challenge. */
static void gate_accept(sock_gate *g) {
  for (int k = 0; k < GATE_BATCH; k++) {
    struct sockaddr_storage peer;
    socklen_t l = sizeof(peer);
    int s = accept4(g->lfd, (struct sockaddr *)&peer, &l,
                    SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0)
      return;
    if (g->npend >= SOCK_GATE_MAX_PENDING)
      drop_oldest(g);
    if (gate_grow(g) != 0) {
      gate_log(g, &peer, "out of memory");
      close(s);
      return;
    }
    sock_gate_conn *c = &g->pend[g->npend];
    c->fd = s;
    c->ready = 0;
    c->addr = peer;
    c->since = sock_now_ms();
    c->got = 0;
    sock_challenge ch = {.magic = g->magic, .kind = g->kind};
    if (fill_random(c->nonce, sizeof(c->nonce)) != 0) {
      gate_log(g, &peer, "getrandom failed");
      close(s);
      continue;
    }
    memcpy(ch.nonce, c->nonce, sizeof(ch.nonce));
    sock_set_nodelay(s);
    /* A fresh socket's buffer takes the challenge at once. */
    if (send(s, &ch, sizeof(ch), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        (ssize_t)sizeof(ch)) {
      gate_log(g, &peer, "could not send the challenge");
      close(s);
      continue;
    }
    g->npend++;
  }
}

/* Checks a complete answer: 1 admitted (verdict sent), -1 dropped. */
static int gate_check(sock_gate *g, int i) {
  sock_gate_conn *c = &g->pend[i];
  sock_auth a;
  memcpy(&a, c->buf, sizeof(a));
  uint8_t want[SOCK_MAC];
  sock_auth_sign(g->secret, g->magic, g->kind, c->nonce, a.nonce,
                 c->buf + sizeof(a), g->body_len, want);
  sock_verdict v = {.magic = g->magic, .status = SOCK_VERDICT_REFUSED};
  int ok = hmac_equal(want, a.mac, sizeof(want));
  if (ok) {
    v.status = SOCK_VERDICT_OK;
    server_sign(g->secret, g->magic, g->kind, c->nonce, &a, v.mac);
  }
  int wrc = sock_write_full(c->fd, &v, sizeof(v), sock_now_ms() + g->auth_ms);
  if (!ok) {
    gate_drop(g, i,
              "it did not prove this job's secret (another job's id, or a "
              "replayed greeting)");
    return -1;
  }
  if (wrc != 0) {
    gate_drop(g, i, "closed before its verdict");
    return -1;
  }
  return 1;
}

/* Reads what is there: 1 admitted, 0 not yet, -1 dropped. */
static int gate_read(sock_gate *g, int i) {
  sock_gate_conn *c = &g->pend[i];
  size_t want = sizeof(sock_auth) + g->body_len;
  while (c->got < want) {
    /* The header first, so that a stranger is dropped before any body. */
    size_t lim = c->got < sizeof(sock_auth) ? sizeof(sock_auth) : want;
    ssize_t n = recv(c->fd, c->buf + c->got, lim - c->got, MSG_DONTWAIT);
    if (n == 0) {
      gate_drop(g, i, "closed before completing its greeting");
      return -1;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
      gate_drop(g, i, strerror(errno));
      return -1;
    }
    c->got += (size_t)n;
    if (c->got == sizeof(sock_auth)) {
      sock_auth a;
      memcpy(&a, c->buf, sizeof(a));
      if (a.magic != g->magic || a.kind != g->kind) {
        gate_drop(g, i, "not a braid greeting of this kind");
        return -1;
      }
    }
  }
  return gate_check(g, i);
}

static void gate_expire(sock_gate *g, int64_t now) {
  for (int i = 0; i < g->npend;) {
    if (now - g->pend[i].since >= g->auth_ms) {
      char why[96];
      snprintf(why, sizeof(why), "no valid greeting within %d ms", g->auth_ms);
      gate_drop(g, i, why);
      continue;
    }
    i++;
  }
}

int sock_gate_next(sock_gate *g, int64_t deadline, int *fd, void *body,
                   struct sockaddr_storage *peer) {
  if (gate_grow(g) != 0)
    return SOCK_ERR;
  for (;;) {
    int64_t now = sock_now_ms();
    gate_expire(g, now);
    if (now >= deadline)
      return SOCK_TIMEOUT;
    int64_t wake = deadline;
    for (int i = 0; i < g->npend; i++)
      if (g->pend[i].since + g->auth_ms < wake)
        wake = g->pend[i].since + g->auth_ms;
    g->pfd[0] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
    for (int i = 0; i < g->npend; i++)
      g->pfd[i + 1] = (struct pollfd){.fd = g->pend[i].fd, .events = POLLIN};
    int n = poll(g->pfd, (nfds_t)g->npend + 1, sock_left_ms(wake));
    if (n < 0 && errno != EINTR)
      return SOCK_ERR;
    if (n <= 0)
      continue;
    for (int i = 0; i < g->npend; i++)
      g->pend[i].ready = g->pfd[i + 1].revents != 0;
    /* Serve the pending before accepting more: a rank that answered is
     * admitted before a flood of newcomers can push it out. */
    for (int i = 0; i < g->npend;) {
      if (!g->pend[i].ready) {
        i++;
        continue;
      }
      g->pend[i].ready = 0;
      int r = gate_read(g, i);
      if (r < 0)
        continue; /* slot i now holds another connection */
      if (r == 1) {
        sock_gate_conn *c = &g->pend[i];
        memcpy(body, c->buf + sizeof(sock_auth), g->body_len);
        *fd = c->fd;
        if (peer)
          *peer = c->addr;
        g->pend[i] = g->pend[--g->npend];
        return 0;
      }
      i++;
    }
    if (g->pfd[0].revents & POLLIN)
      gate_accept(g);
  }
}

void sock_gate_free(sock_gate *g) {
  for (int i = 0; i < g->npend; i++)
    close(g->pend[i].fd);
  if (g->dropped > GATE_LOGGED)
    WARN(LOG_BOOT | LOG_NET, "%s: rejected %lu connections in all", g->what,
         g->dropped);
  free(g->pend);
  free(g->pfd);
  g->pend = NULL;
  g->pfd = NULL;
  g->npend = g->cap = 0;
}
