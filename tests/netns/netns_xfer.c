/*
 * One rank of a two-rank transport exchange, meant to run with one rank per
 * network-namespace host (tests/netns/netns.sh), or as two processes on one
 * host.
 *
 *   netns_xfer --rank R --nranks 2 --idfile F --transport tcp|ofi
 *              [--mode check|bench|rawtcp|stuck] [--bytes N] [--reps K]
 *
 * Rank 0 makes the unique id and writes it to F (then renames it into
 * place); the other ranks wait for F. check: both directions, two channels,
 * sizes 0/1/7/4096/1 MiB+3, every byte compared. bench: rank 0 streams N
 * bytes (1 MiB messages) to rank 1 over the transport, K times, and rank 1
 * prints the throughput. rawtcp: the same over one plain TCP socket, the
 * ceiling of the path. stuck: a communicator over tcp; after one allreduce
 * rank 1 stops itself (SIGSTOP), and rank 0's next allreduce must end at its
 * 4 s timeout naming rank 1 as a rank that has not answered a heartbeat
 * (the caller sets BRAID_HEARTBEAT_MS): across hosts nothing else shows a
 * stopped process. Rank 0 then kills rank 1 (the namespaces share one pid
 * namespace) and prints "rank 0: stuck ok: <the message>". Exit: 0 ok, 77
 * transport unavailable, else failure.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/log.h"
#include "transports/sock_util.h"
#include "transports/transport.h"
#include "xchg.h"

#define CHUNK ((size_t)1 << 20)
#define TIMEOUT_MS 120000

static int write_id(const char *path, const braid_unique_id *id) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1) {
    if (f)
      fclose(f);
    return -1;
  }
  if (fclose(f) != 0)
    return -1;
  return rename(tmp, path);
}

static int read_id(const char *path, braid_unique_id *id, int timeout_ms) {
  int64_t dl = xchg_now_ms() + timeout_ms;
  while (xchg_now_ms() < dl) {
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (n == 1)
        return 0;
    }
    usleep(20000);
  }
  return -1;
}

static int bench_tp(const tp_ops *tp, void *st, boot *b, int rank, size_t bytes,
                    int reps) {
  uint8_t *buf = malloc(bytes);
  if (buf == NULL)
    return 1;
  for (size_t j = 0; j < bytes; j++)
    buf[j] = rank == 0 ? xchg_byte(0, 0, 0, j) : 0;
  tp_conn *c = tp->conn(st, 1 - rank, 0);
  size_t nmsg = (bytes + CHUNK - 1) / CHUNK;
  double best = 0;
  for (int rep = 0; rep < reps; rep++) {
    if (boot_barrier(b) != BRAID_SUCCESS)
      return 2;
    int64_t t0 = xchg_now_ms();
    size_t posted = 0, done = 0;
    uint64_t tickets[64];
    int64_t dl = t0 + TIMEOUT_MS;
    while (done < nmsg) {
      int r;
      if (rank == 0) {
        while (posted < nmsg && posted - done < 8) {
          size_t off = posted * CHUNK;
          size_t len = bytes - off < CHUNK ? bytes - off : CHUNK;
          r = tp->isend(c, buf + off, len, &tickets[posted % 64]);
          if (r == TP_AGAIN)
            break;
          if (r != BRAID_SUCCESS) {
            fprintf(stderr, "rank 0: isend: %s\n", err_msg());
            return 3;
          }
          posted++;
        }
        r = done < posted ? tp->send_done(c, tickets[done % 64]) : TP_AGAIN;
      } else {
        size_t off = done * CHUNK;
        size_t len = bytes - off < CHUNK ? bytes - off : CHUNK;
        r = tp->recv(c, buf + off, len);
      }
      if (r == BRAID_SUCCESS) {
        done++;
        continue;
      }
      if (r != TP_AGAIN) {
        fprintf(stderr, "rank %d: %s\n", rank, err_msg());
        return 4;
      }
      if (xchg_now_ms() > dl) {
        fprintf(stderr, "rank %d: bench timed out\n", rank);
        return 5;
      }
      sched_yield();
    }
    if (rank == 1) {
      int64_t ms = xchg_now_ms() - t0;
      for (size_t j = 0; j < bytes; j += 4093)
        if (buf[j] != xchg_byte(0, 0, 0, j)) {
          fprintf(stderr, "rank 1: byte %zu differs\n", j);
          return 6;
        }
      double gbps = (double)bytes / (ms > 0 ? (double)ms : 0.5) / 1e6;
      if (gbps > best)
        best = gbps;
      printf("RESULT transport=%s bytes=%zu rep=%d ms=%lld GBps=%.3f\n",
             tp->name, bytes, rep, (long long)ms, gbps);
      memset(buf, 0, bytes);
    }
  }
  if (rank == 1)
    printf("BEST transport=%s bytes=%zu GBps=%.3f\n", tp->name, bytes, best);
  free(buf);
  return boot_barrier(b) == BRAID_SUCCESS ? 0 : 7;
}

static int bench_raw(boot *b, int rank, size_t bytes, int reps) {
  int fd = -1;
  int64_t dl = sock_now_ms() + TIMEOUT_MS;
  if (rank == 1) {
    struct sockaddr_storage a = boot_peer_info(b, 1)->addr, bound;
    sock_addr_set_port(&a, 0);
    int lfd;
    if (sock_listen(&a, 0, 4 << 20, &lfd, &bound) != 0) {
      fprintf(stderr, "rank 1: %s\n", err_msg());
      return 1;
    }
    if (boot_send(b, 0, &bound, sizeof(bound)) != BRAID_SUCCESS ||
        sock_accept(lfd, dl, &fd, NULL) != 0) {
      fprintf(stderr, "rank 1: raw tcp accept failed\n");
      return 2;
    }
    close(lfd);
  } else {
    struct sockaddr_storage a;
    if (boot_recv(b, 1, &a, sizeof(a)) != BRAID_SUCCESS ||
        sock_connect(&a, dl, 4 << 20, &fd) != 0) {
      fprintf(stderr, "rank 0: raw tcp connect: %s\n", err_msg());
      return 3;
    }
  }
  uint8_t *buf = malloc(bytes);
  if (buf == NULL)
    return 4;
  memset(buf, rank == 0 ? 0x5a : 0, bytes);
  double best = 0;
  for (int rep = 0; rep < reps; rep++) {
    if (boot_barrier(b) != BRAID_SUCCESS)
      return 5;
    int64_t t0 = xchg_now_ms();
    for (size_t off = 0; off < bytes; off += CHUNK) {
      size_t len = bytes - off < CHUNK ? bytes - off : CHUNK;
      int r = rank == 0 ? sock_write_full(fd, buf + off, len, dl)
                        : sock_read_full(fd, buf + off, len, dl);
      if (r != 0) {
        fprintf(stderr, "rank %d: raw tcp transfer failed (%d)\n", rank, r);
        return 6;
      }
    }
    if (rank == 1) {
      int64_t ms = xchg_now_ms() - t0;
      double gbps = (double)bytes / (ms > 0 ? (double)ms : 0.5) / 1e6;
      if (gbps > best)
        best = gbps;
      printf("RESULT transport=rawtcp bytes=%zu rep=%d ms=%lld GBps=%.3f\n",
             bytes, rep, (long long)ms, gbps);
    }
  }
  if (rank == 1)
    printf("BEST transport=rawtcp bytes=%zu GBps=%.3f\n", bytes, best);
  close(fd);
  free(buf);
  return boot_barrier(b) == BRAID_SUCCESS ? 0 : 7;
}

static int stuck(int rank, const braid_unique_id *id) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.transport = "tcp";
  cfg.timeout_ms = 4000;
  braid_comm *c = NULL;
  braid_result r = braid_comm_init(&c, 2, id, rank, &cfg);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: braid_comm_init: %s\n", rank,
            braid_result_string(r));
    return 3;
  }
  float buf[4] = {1, 2, 3, 4};
  r = braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: first allreduce: %s\n", rank,
            braid_comm_last_error(c));
    return 3;
  }
  if (rank == 1) {
    fflush(NULL);
    raise(SIGSTOP); /* until rank 0 kills it */
    return 0;
  }
  r = braid_allreduce(buf, buf, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
  const char *msg = braid_comm_last_error(c);
  int ok = r == BRAID_ERR_TIMEOUT && strstr(msg, "rank 1 (host ") != NULL &&
           strstr(msg, "has not answered a heartbeat") != NULL;
  const boot_peer *p1 = boot_peer_info(c->boot, 1);
  if (p1 != NULL && p1->pid > 0)
    kill(p1->pid, SIGKILL);
  printf("rank 0: stuck %s (result %d): %s\n", ok ? "ok" : "FAILED", (int)r,
         msg);
  braid_comm_abort(c);
  return ok ? 0 : 4;
}

int main(int argc, char **argv) {
  int rank = -1, nranks = 2, reps = 3;
  const char *idfile = NULL, *tpname = "tcp", *mode = "check";
  size_t bytes = (size_t)64 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rank"))
      rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nranks"))
      nranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--idfile"))
      idfile = argv[i + 1];
    else if (!strcmp(argv[i], "--transport"))
      tpname = argv[i + 1];
    else if (!strcmp(argv[i], "--mode"))
      mode = argv[i + 1];
    else if (!strcmp(argv[i], "--bytes"))
      bytes = (size_t)strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "netns_xfer: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (rank < 0 || nranks != 2 || rank >= nranks || idfile == NULL ||
      bytes == 0 || reps < 1) {
    fprintf(stderr, "usage: netns_xfer --rank R --nranks 2 --idfile F "
                    "--transport tcp|ofi [--mode check|bench|rawtcp|stuck] "
                    "[--bytes N] [--reps K]\n");
    return 2;
  }
  const tp_ops *tp = !strcmp(tpname, "ofi") ? &tp_ofi : &tp_tcp;
  char err[512];
  braid_unique_id id;
  if (rank == 0) {
    if (boot_unique_id(&id) != BRAID_SUCCESS || write_id(idfile, &id) != 0) {
      fprintf(stderr, "rank 0: making the id: %s %s\n", err_msg(),
              strerror(errno));
      return 2;
    }
  } else if (read_id(idfile, &id, 30000) != 0) {
    fprintf(stderr, "rank %d: no id in %s after 30 s\n", rank, idfile);
    return 2;
  }
  if (!strcmp(mode, "stuck"))
    return stuck(rank, &id);
  boot *b = NULL;
  if (boot_init(&id, rank, nranks, TIMEOUT_MS, &b) != BRAID_SUCCESS) {
    fprintf(stderr, "rank %d: boot_init: %s\n", rank, err_msg());
    return 2;
  }
  int rc;
  if (!strcmp(mode, "rawtcp")) {
    rc = bench_raw(b, rank, bytes, reps);
  } else {
    void *st = NULL;
    int bench = !strcmp(mode, "bench");
    int r = xchg_setup(tp, b, bench ? 1 : 2, 8, bench ? CHUNK : CHUNK + 3,
                       TIMEOUT_MS, &st, err, sizeof(err));
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "rank %d: %s\n", rank, err);
      boot_close(b);
      return r == BRAID_ERR_UNSUPPORTED ? XCHG_SKIP : 3;
    }
    if (bench) {
      rc = bench_tp(tp, st, b, rank, bytes, reps);
    } else {
      static const size_t sizes[] = {0, 1, 7, 4096, CHUNK + 3};
      rc = xchg_run(tp, st, rank, 1 - rank, 2, sizes, 5, 20, 4, 0, TIMEOUT_MS,
                    err, sizeof(err));
      if (rc == 0)
        rc = xchg_run(tp, st, rank, 1 - rank, 2, sizes + 1, 4, 8, 2, 0,
                      TIMEOUT_MS, err, sizeof(err));
      if (rc != 0)
        fprintf(stderr, "rank %d: %s\n", rank, err);
      else if (boot_barrier(b) != BRAID_SUCCESS)
        rc = 4;
      if (rc == 0)
        printf("rank %d: %s exchange ok\n", rank, tp->name);
    }
    tp->teardown(st);
  }
  boot_close(b);
  return rc;
}
