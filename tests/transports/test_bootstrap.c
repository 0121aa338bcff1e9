/*
 * Bootstrap tests: real rank processes rendezvous through a root service in
 * the test process, build the control mesh and exchange data over it.
 */
#define _GNU_SOURCE /* unshare */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ranks.h"
#include "src/bootstrap.h"
#include "src/log.h"
#include "transports/sock_util.h"

#define FAIL(...)                                                              \
  do {                                                                         \
    snprintf(msg, msglen, __VA_ARGS__);                                        \
    return 1;                                                                  \
  } while (0)

typedef struct blob {
  int32_t rank, nranks, pid;
  uint32_t pattern;
} blob;

static int rank_basic(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  (void)arg;
  boot *b = NULL;
  braid_result r = boot_init(id, rank, nranks, 20000, &b);
  if (r != BRAID_SUCCESS)
    FAIL("boot_init: %s (%s)", braid_result_string(r), err_msg());
  if (boot_rank(b) != rank || boot_nranks(b) != nranks)
    FAIL("rank/nranks %d/%d", boot_rank(b), boot_nranks(b));
  if (boot_peer_info(b, rank)->pid != getpid())
    FAIL("own pid %d in the table", boot_peer_info(b, rank)->pid);
  for (int p = 0; p < nranks; p++)
    if (!boot_same_host(b, 0, p))
      FAIL("rank %d not on the same host as rank 0", p);
  size_t slen;
  if (boot_secret(b, &slen) == NULL || slen != 16)
    FAIL("secret length %zu", slen);
  /* small allgather */
  blob mine = {rank, nranks, getpid(), 0xabc00000u + (uint32_t)rank};
  blob *all = calloc((size_t)nranks, sizeof(blob));
  r = boot_allgather(b, &mine, all, sizeof(blob));
  if (r != BRAID_SUCCESS)
    FAIL("allgather: %s", err_msg());
  for (int p = 0; p < nranks; p++)
    if (all[p].rank != p || all[p].nranks != nranks ||
        all[p].pattern != 0xabc00000u + (uint32_t)p ||
        all[p].pid != boot_peer_info(b, p)->pid)
      FAIL("allgather slot %d holds rank %d pattern %x", p, all[p].rank,
           all[p].pattern);
  free(all);
  /* a large allgather (more than a socket buffer per peer) */
  size_t big = 300 * 1024;
  unsigned char *ball = malloc(big * (size_t)nranks);
  for (size_t i = 0; i < big; i++)
    ball[(size_t)rank * big + i] = (unsigned char)(i * 7 + (size_t)rank);
  r = boot_allgather(b, ball + (size_t)rank * big, ball, big);
  if (r != BRAID_SUCCESS)
    FAIL("big allgather: %s", err_msg());
  for (int p = 0; p < nranks; p++)
    for (size_t i = 0; i < big; i++)
      if (ball[(size_t)p * big + i] != (unsigned char)(i * 7 + (size_t)p))
        FAIL("big allgather: rank %d byte %zu wrong", p, i);
  free(ball);
  if ((r = boot_barrier(b)) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  /* ring send/recv, including an empty message */
  if (nranks > 1) {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    char out[1100], in[1100];
    size_t olen = 1000 + (size_t)rank, ilen = 1000 + (size_t)prev;
    for (size_t i = 0; i < olen; i++)
      out[i] = (char)(rank * 31 + (int)i);
    if (rank % 2 == 0) {
      r = boot_send(b, next, out, olen);
      if (r == BRAID_SUCCESS)
        r = boot_recv(b, prev, in, ilen);
    } else {
      r = boot_recv(b, prev, in, ilen);
      if (r == BRAID_SUCCESS)
        r = boot_send(b, next, out, olen);
    }
    if (r != BRAID_SUCCESS)
      FAIL("ring: %s", err_msg());
    for (size_t i = 0; i < ilen; i++)
      if (in[i] != (char)(prev * 31 + (int)i))
        FAIL("ring: byte %zu from rank %d wrong", i, prev);
    if (rank == 0)
      r = boot_send(b, next, NULL, 0);
    else if (rank == 1)
      r = boot_recv(b, 0, NULL, 0);
    if (r != BRAID_SUCCESS)
      FAIL("empty message: %s", err_msg());
  } else if (boot_send(b, 0, "x", 1) != BRAID_ERR_INVALID_ARG) {
    FAIL("boot_send to itself was accepted");
  }
  int dead = -1;
  if (boot_check_peers(b, &dead) != BRAID_SUCCESS)
    FAIL("check_peers reports rank %d: %s", dead, err_msg());
  if ((r = boot_barrier(b)) != BRAID_SUCCESS)
    FAIL("final barrier: %s", err_msg());
  boot_close(b);
  return 0;
}

static void run_basic(int n) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(n, &id, rank_basic, NULL, 40000, NULL), 0,
               "some of %d ranks failed (see stderr)", n);
}

Test(bootstrap, one_rank, .timeout = 60) { run_basic(1); }
Test(bootstrap, two_ranks, .timeout = 60) { run_basic(2); }
Test(bootstrap, three_ranks, .timeout = 60) { run_basic(3); }
Test(bootstrap, four_ranks, .timeout = 60) { run_basic(4); }
Test(bootstrap, eight_ranks, .timeout = 60) { run_basic(8); }

Test(bootstrap, bad_arguments) {
  boot *b = (boot *)1;
  braid_unique_id id;
  memset(&id, 0, sizeof(id));
  cr_assert_eq(boot_init(&id, 0, 2, 1000, &b), BRAID_ERR_INVALID_ARG);
  cr_assert(b == NULL);
  cr_assert(strstr(err_msg(), "unique id") != NULL, "message: %s", err_msg());
  cr_assert_eq(boot_init(&id, 2, 2, 1000, &b), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "rank 2") != NULL, "message: %s", err_msg());
  uint8_t secret[16] = {0};
  cr_assert_eq(boot_unique_id_at("127.0.0.1", 0, secret, 0, &id),
               BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "port 0") != NULL, "message: %s", err_msg());
}

Test(bootstrap, ifname_filter) {
  cr_assert(sock_ifname_match(NULL, "eth0"));
  cr_assert(sock_ifname_match("eth", "eth0"));
  cr_assert(sock_ifname_match("ib,eth", "eth1"));
  cr_assert(!sock_ifname_match("ib", "eth0"));
  cr_assert(!sock_ifname_match("^docker,lo", "docker0"));
  cr_assert(!sock_ifname_match("^docker,lo", "lo"));
  cr_assert(sock_ifname_match("^docker,lo", "eth0"));
  cr_assert(sock_ifname_match("=eth0", "eth0"));
  cr_assert(!sock_ifname_match("=eth0", "eth01"));
  cr_assert(!sock_ifname_match("^=eth0", "eth0"));
  cr_assert(sock_ifname_match("^=eth0", "eth01"));
  cr_assert(sock_ifname_names(NULL) && sock_ifname_names("^lo"));
  for (const char *bad = "^\0=\0^=\0,\0^,,\0"; *bad; bad += strlen(bad) + 1) {
    struct sockaddr_storage none;
    cr_assert(!sock_ifname_names(bad), "%s", bad);
    cr_assert_neq(sock_pick_addr(bad, &none, NULL, 0), 0, "%s", bad);
    cr_assert(strstr(err_msg(), "names no interface"), "%s", err_msg());
  }
  struct sockaddr_storage a;
  char name[64];
  cr_assert_eq(sock_pick_addr("lo", &a, name, sizeof(name)), 0, "%s",
               err_msg());
  cr_assert_str_eq(name, "lo");
  cr_assert_neq(sock_pick_addr("=nosuchif9", &a, name, sizeof(name)), 0);
  cr_assert(strstr(err_msg(), "nosuchif9") != NULL, "message: %s", err_msg());
}

Test(bootstrap, rogue_to_root_is_rejected, .timeout = 60) {
  uint8_t secret[16];
  for (int i = 0; i < 16; i++)
    secret[i] = (uint8_t)(0x5a ^ i);
  braid_unique_id id;
  int port = -1;
  braid_result r = BRAID_ERR_SYSTEM;
  /* a free port may be taken again by a connection of a parallel test */
  for (int tries = 0; tries < 20 && r != BRAID_SUCCESS; tries++) {
    port = free_port();
    cr_assert_gt(port, 0);
    r = boot_unique_id_at("127.0.0.1", port, secret, 1, &id);
  }
  cr_assert_eq(r, BRAID_SUCCESS, "%s", err_msg());
  struct sockaddr_storage root;
  cr_assert_eq(sock_resolve("127.0.0.1", port, &root), 0);
  int silent = rogue_connect(&root, 0, NULL);
  int wrong = rogue_connect(&root, 0x42524431u, "0123456789abcdef");
  cr_assert(silent >= 0 && wrong >= 0, "cannot connect to the root");
  cr_assert(closed_by_peer(wrong, 3000),
            "the root kept a connection with a wrong secret open");
  cr_assert_eq(run_ranks(3, &id, rank_basic, NULL, 40000, NULL), 0,
               "the job did not complete beside rogue connections");
  cr_assert(closed_by_peer(silent, 8000),
            "the root kept a silent connection open");
  close(silent);
  close(wrong);
}

Test(bootstrap, rogue_to_mesh_listener_is_rejected, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  spawn_rank(&p[0], 0, 3, &id, rank_basic, NULL);
  struct sockaddr_storage l;
  int found = -1;
  for (int i = 0; i < 500 && found != 0; i++) {
    found = find_listener(p[0].pid, &l);
    if (found != 0)
      usleep(10000);
  }
  if (found != 0) {
    wait_ranks(p, 1, 10);
    cr_skip_test("cannot see rank 0's control listener in /proc (IPv6-only "
                 "interface or no procfs)");
  }
  int wrong = rogue_connect(&l, 0x42524431u, "0123456789abcdef");
  cr_assert_geq(wrong, 0, "cannot connect to rank 0's control listener");
  spawn_rank(&p[1], 1, 3, &id, rank_basic, NULL);
  spawn_rank(&p[2], 2, 3, &id, rank_basic, NULL);
  wait_ranks(p, 3, 40000);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
  cr_assert(closed_by_peer(wrong, 3000),
            "rank 0 kept a connection with a wrong secret open");
  close(wrong);
}

/* Exit 10 when refused with a duplicate-rank error, 0 when the job ran. */
static int rank_maybe_dup(int rank, int nranks, const braid_unique_id *id,
                          void *arg, char *msg, size_t msglen) {
  int claimed = arg ? *(int *)arg : nranks;
  boot *b = NULL;
  braid_result r = boot_init(id, rank, claimed, 20000, &b);
  if (r == BRAID_ERR_INVALID_ARG) {
    snprintf(msg, msglen, "%s", err_msg());
    if (strstr(err_msg(), "duplicate rank") && strstr(err_msg(), "rank 1"))
      return 10;
    if (strstr(err_msg(), "nranks=5") && strstr(err_msg(), "nranks=3"))
      return 11;
    return 2;
  }
  if (r != BRAID_SUCCESS)
    FAIL("boot_init: %s (%s)", braid_result_string(r), err_msg());
  if (boot_barrier(b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  boot_close(b);
  return 0;
}

Test(bootstrap, duplicate_rank_is_refused, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  spawn_rank(&p[0], 1, 3, &id, rank_maybe_dup, NULL);
  spawn_rank(&p[1], 1, 3, &id, rank_maybe_dup, NULL);
  int first = wait_any(p, 2, 20000);
  cr_assert_geq(first, 0, "neither rank-1 process was refused");
  cr_assert_eq(p[first].status, 10, "status %d: %s", p[first].status,
               p[first].msg);
  spawn_rank(&p[2], 0, 3, &id, rank_maybe_dup, NULL);
  spawn_rank(&p[3], 2, 3, &id, rank_maybe_dup, NULL);
  wait_ranks(p, 4, 30000);
  for (int i = 0; i < 4; i++)
    if (i != first)
      cr_expect_eq(p[i].status, 0, "process %d: status %d: %s", i, p[i].status,
                   p[i].msg);
}

Test(bootstrap, nranks_disagreement_is_refused, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[4];
  int five = 5;
  spawn_rank(&p[0], 0, 3, &id, rank_maybe_dup, NULL);
  usleep(100000);
  spawn_rank(&p[1], 1, 3, &id, rank_maybe_dup, &five);
  int first = wait_any(p, 2, 20000);
  cr_assert_eq(first, 1, "the rank claiming nranks=5 was not refused");
  cr_assert_eq(p[1].status, 11, "status %d: %s", p[1].status, p[1].msg);
  spawn_rank(&p[2], 1, 3, &id, rank_maybe_dup, NULL);
  spawn_rank(&p[3], 2, 3, &id, rank_maybe_dup, NULL);
  wait_ranks(p, 4, 30000);
  cr_expect_eq(p[0].status, 0, "%s", p[0].msg);
  cr_expect_eq(p[2].status, 0, "%s", p[2].msg);
  cr_expect_eq(p[3].status, 0, "%s", p[3].msg);
}

static int rank_alone(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  (void)arg;
  boot *b = NULL;
  braid_result r = boot_init(id, rank, nranks, 800, &b);
  if (r != BRAID_ERR_TIMEOUT)
    FAIL("expected a timeout, got %s (%s)", braid_result_string(r), err_msg());
  if (strstr(err_msg(), "timed out") == NULL ||
      strstr(err_msg(), "rank 0") == NULL)
    FAIL("message does not say what timed out: %s", err_msg());
  return 0;
}

Test(bootstrap, missing_rank_times_out, .timeout = 30) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p;
  spawn_rank(&p, 0, 2, &id, rank_alone, NULL);
  wait_ranks(&p, 1, 10000);
  cr_assert_eq(p.status, 0, "status %d: %s", p.status, p.msg);
}

/* Ranks 0 and 1 of 3 meet, rank 2 never comes, and the root's own wait
 * is far longer than the ranks' (BRAID_TIMEOUT, 300 s, against 1.5 s):
 * each rank hears from the root which rank is missing before it gives up.
 * It used to time out on its own and say only "timed out waiting for the
 * other ranks" (torch's init_process_group with timeout=5 s). */
static int rank_missing_named(int rank, int nranks, const braid_unique_id *id,
                              void *arg, char *msg, size_t msglen) {
  (void)arg;
  boot *b = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  braid_result r = boot_init(id, rank, nranks, 1500, &b);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  if (r != BRAID_ERR_TIMEOUT)
    FAIL("expected a timeout, got %s (%s)", braid_result_string(r), err_msg());
  if (strstr(err_msg(), "missing: 2") == NULL)
    FAIL("the missing rank is not named: %s", err_msg());
  if (s > 1.5 + 1.0)
    FAIL("gave up after %.2f s (its timeout: 1.5 s)", s);
  return 0;
}

Test(bootstrap, a_missing_rank_is_named, .timeout = 30) {
  setenv("BRAID_TIMEOUT", "300", 1); /* the root's wait */
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[2];
  for (int r = 0; r < 2; r++)
    spawn_rank(&p[r], r, 3, &id, rank_missing_named, NULL);
  wait_ranks(p, 2, 10000);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
}

/* No route to the root (an interface not up yet): the rank waits for one
 * until its timeout, as for a root that is not listening yet, and then
 * says so with BRAID_ERR_TIMEOUT; it failed at once with a system error.
 * Run in a network namespace of its own, where only loopback is. */
Test(bootstrap, no_route_to_the_root_is_waited_for, .timeout = 30) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    char out[600];
    if (unshare(CLONE_NEWNET) != 0) {
      snprintf(out, sizeof out, "S cannot make a network namespace: %s",
               strerror(errno));
    } else {
      uint8_t secret[16] = {1};
      braid_unique_id id;
      boot *b = NULL;
      braid_result r = boot_unique_id_at("198.18.0.1", 29999, secret, 0, &id);
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      if (r == BRAID_SUCCESS)
        r = boot_init(&id, 1, 2, 1200, &b);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double sec =
          (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
      snprintf(out, sizeof out, "%c %.2f %s",
               r == BRAID_ERR_TIMEOUT ? 'T' : 'X', sec, err_msg());
    }
    if (write(p[1], out, strlen(out) + 1) < 0)
      _exit(1);
    _exit(0);
  }
  close(p[1]);
  char got[600] = "";
  ssize_t n = read(p[0], got, sizeof got - 1);
  got[n > 0 ? n : 0] = '\0';
  close(p[0]);
  waitpid(pid, NULL, 0);
  if (got[0] == 'S')
    cr_skip_test("%s (needs root)", got + 2);
  double sec = -1;
  sscanf(got + 2, "%lf", &sec);
  cr_expect_eq(got[0], 'T', "not a timeout: %s", got);
  cr_expect(strstr(got, "no route to the bootstrap root") != NULL, "%s", got);
  cr_expect(sec >= 1.0 && sec < 5.0, "gave up after %.2f s (timeout 1.2 s)",
            sec);
}

/* Rank 1 dies; rank 0 finds it in an allgather before it sent rank 2 its
 * part, and gives up; rank 2 comes to the allgather later and reads rank
 * 0's part first: it must learn from rank 0 that rank 1 is the cause, not
 * only that rank 0 went away. */
static int rank_left(int rank, int nranks, const braid_unique_id *id, void *arg,
                     char *msg, size_t msglen) {
  (void)arg;
  boot *b = NULL;
  if (boot_init(id, rank, nranks, 10000, &b))
    FAIL("boot_init: %s", err_msg());
  if (rank == 1)
    _exit(0);
  usleep(rank == 0 ? 100 * 1000 : 400 * 1000);
  int32_t mine = rank, all[3];
  braid_result r = boot_allgather(b, &mine, all, sizeof mine);
  const char *e = err_msg();
  if (rank == 0 && (r != BRAID_ERR_REMOTE || !strstr(e, "rank 1")))
    FAIL("rank 0: allgather gave %s: %s", braid_result_string(r), e);
  if (rank == 2 &&
      (r != BRAID_ERR_REMOTE || !strstr(e, "rank 0 left the exchange") ||
       !strstr(e, "rank 1 closed its control connection")))
    FAIL("rank 2: allgather gave %s: %s", braid_result_string(r), e);
  boot_close(b);
  return 0;
}

Test(bootstrap, leaving_rank_tells_the_cause, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  run_ranks(3, &id, rank_left, NULL, 30000, p);
  cr_expect_eq(p[0].status, 0, "%s", p[0].msg);
  cr_expect_eq(p[2].status, 0, "%s", p[2].msg);
}

/* Splits 4 ranks into evens and odds, closes the parent, then uses the
 * split; also checks a length mismatch is reported. */
static int rank_split(int rank, int nranks, const braid_unique_id *id,
                      void *arg, char *msg, size_t msglen) {
  (void)arg;
  boot *b = NULL, *s = NULL;
  braid_result r = boot_init(id, rank, nranks, 20000, &b);
  if (r != BRAID_SUCCESS)
    FAIL("boot_init: %s", err_msg());
  int members[2] = {rank % 2, rank % 2 + 2};
  r = boot_split(b, members, 2, rank / 2, &s);
  if (r != BRAID_SUCCESS)
    FAIL("split: %s", err_msg());
  boot_close(b);
  if (boot_rank(s) != rank / 2 || boot_nranks(s) != 2)
    FAIL("split rank %d of %d", boot_rank(s), boot_nranks(s));
  if (boot_peer_info(s, 1 - rank / 2)->pid == getpid())
    FAIL("split table holds this process as the other member");
  int mine = rank * 10, all[2] = {0, 0};
  if (boot_allgather(s, &mine, all, sizeof(int)) != BRAID_SUCCESS)
    FAIL("split allgather: %s", err_msg());
  if (all[0] != members[0] * 10 || all[1] != members[1] * 10)
    FAIL("split allgather got %d,%d", all[0], all[1]);
  if (boot_barrier(s) != BRAID_SUCCESS)
    FAIL("split barrier: %s", err_msg());
  /* rank 0 of the split sends 8 bytes, rank 1 expects 12 */
  char buf[12] = {0};
  if (boot_rank(s) == 0) {
    if (boot_send(s, 1, buf, 8) != BRAID_SUCCESS)
      FAIL("send: %s", err_msg());
  } else {
    r = boot_recv(s, 0, buf, 12);
    if (r != BRAID_ERR_MISMATCH || !strstr(err_msg(), "8 bytes") ||
        !strstr(err_msg(), "12"))
      FAIL("mismatch not reported: %s: %s", braid_result_string(r), err_msg());
  }
  boot_close(s);
  return 0;
}

Test(bootstrap, split_outlives_parent, .timeout = 60) {
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(run_ranks(4, &id, rank_split, NULL, 30000, NULL), 0);
}

/* Every rank checks that its control listener is on the expected family. */
static int rank_family(int rank, int nranks, const braid_unique_id *id,
                       void *arg, char *msg, size_t msglen) {
  int family = *(int *)arg;
  boot *b = NULL;
  if (boot_init(id, rank, nranks, 20000, &b) != BRAID_SUCCESS)
    FAIL("boot_init: %s", err_msg());
  const struct sockaddr_storage *a = &boot_peer_info(b, rank)->addr;
  if (a->ss_family != family)
    FAIL("control listener family %d, expected %d", a->ss_family, family);
  if (family == AF_INET && ((const struct sockaddr_in *)a)->sin_addr.s_addr !=
                               htonl(INADDR_LOOPBACK))
    FAIL("control listener not on loopback");
  int x = rank, all[4];
  if (boot_allgather(b, &x, all, sizeof(int)) != BRAID_SUCCESS)
    FAIL("allgather: %s", err_msg());
  for (int p = 0; p < nranks; p++)
    if (all[p] != p)
      FAIL("allgather slot %d = %d", p, all[p]);
  if (boot_barrier(b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  boot_close(b);
  return 0;
}

Test(bootstrap, socket_ifname_selects_loopback, .timeout = 60) {
  /* config is read once per process; each test runs in its own process */
  setenv("BRAID_SOCKET_IFNAME", "=lo", 1);
  braid_unique_id id;
  cr_assert_eq(boot_unique_id(&id), BRAID_SUCCESS, "%s", err_msg());
  int family = AF_INET;
  cr_assert_eq(run_ranks(3, &id, rank_family, &family, 30000, NULL), 0);
}

/* The first up non-loopback IPv4 interface here: 0 with its name and
 * address, -1 when there is none. */
static int other_iface(char *name, size_t len, struct sockaddr_storage *a) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return -1;
  int found = 0;
  for (struct ifaddrs *i = list; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
      memset(a, 0, sizeof(*a));
      memcpy(a, i->ifa_addr, sizeof(struct sockaddr_in));
      snprintf(name, len, "%s", i->ifa_name);
      found = 1;
    }
  freeifaddrs(list);
  return found ? 0 : -1;
}

/* A root on 127.0.0.1 from a known port (the test process runs it). */
static void root_on_loopback(braid_unique_id *id) {
  uint8_t secret[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
  braid_result r = BRAID_ERR_SYSTEM;
  for (int tries = 0; tries < 20 && r != BRAID_SUCCESS; tries++)
    r = boot_unique_id_at("127.0.0.1", free_port(), secret, 1, id);
  cr_assert_eq(r, BRAID_SUCCESS, "%s", err_msg());
}

static int rank_listens_at(int rank, int nranks, const braid_unique_id *id,
                           void *arg, char *msg, size_t msglen) {
  const struct sockaddr_in *want = arg;
  boot *b = NULL;
  if (boot_init(id, rank, nranks, 20000, &b) != BRAID_SUCCESS)
    FAIL("boot_init: %s", err_msg());
  char as[80];
  for (int p = 0; p < nranks; p++) {
    const struct sockaddr_storage *a = &boot_peer_info(b, p)->addr;
    if (a->ss_family != AF_INET ||
        ((const struct sockaddr_in *)a)->sin_addr.s_addr !=
            want->sin_addr.s_addr)
      FAIL("rank %d's control listener is on %s, not on the interface "
           "BRAID_SOCKET_IFNAME names",
           p, sock_addr_str(a, as, sizeof(as)));
  }
  if (boot_barrier(b) != BRAID_SUCCESS)
    FAIL("barrier: %s", err_msg());
  boot_close(b);
  return 0;
}

/* A rank that joins a root elsewhere (here on loopback) listens on the
 * interface BRAID_SOCKET_IFNAME names, not where its route to the root
 * leaves from. */
Test(bootstrap, socket_ifname_moves_rank_listeners, .timeout = 60) {
  char name[64], spec[80];
  struct sockaddr_storage a;
  if (other_iface(name, sizeof(name), &a) != 0)
    cr_skip_test("no up non-loopback IPv4 interface here");
  snprintf(spec, sizeof(spec), "=%s", name);
  setenv("BRAID_SOCKET_IFNAME", spec, 1);
  braid_unique_id id;
  root_on_loopback(&id);
  cr_assert_eq(run_ranks(2, &id, rank_listens_at, &a, 30000, NULL), 0);
  /* the same address, and the same rules, for the doctor's report */
  struct sockaddr_storage got;
  char ifname[64];
  boot_addr_how how = 0;
  cr_assert_eq(boot_listen_addr(NULL, &got, ifname, sizeof(ifname), &how),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(ifname, name);
  cr_assert_eq(how, BOOT_ADDR_IFNAME);
}

/* A setting that matches nothing fails the rank that joins a root, naming
 * the variable and the interfaces up, before it meets anyone. */
Test(bootstrap, socket_ifname_matching_nothing_fails_rank, .timeout = 60) {
  /* config is read once per process: before the root starts */
  setenv("BRAID_SOCKET_IFNAME", "=braid-nope9", 1);
  braid_unique_id id;
  root_on_loopback(&id);
  boot *b = NULL;
  cr_assert_eq(boot_init(&id, 0, 2, 5000, &b), BRAID_ERR_INVALID_ARG,
               "boot_init: %s", err_msg());
  cr_assert(strstr(err_msg(), "BRAID_SOCKET_IFNAME==braid-nope9 matches no "
                              "interface") != NULL &&
                strstr(err_msg(), "up here: ") != NULL &&
                strstr(err_msg(), "lo 127.0.0.1") != NULL,
            "message: %s", err_msg());
}

/* A filter that only excludes passes lo too; loopback is taken only when
 * nothing else passes. Without a filter, IPv4 off loopback as before. */
Test(bootstrap, ifname_exclusion_prefers_other_interfaces) {
  char name[64], got[64];
  struct sockaddr_storage a, b;
  cr_assert_eq(sock_pick_addr("^braid-nope9", &b, got, sizeof(got)), 0, "%s",
               err_msg());
  if (other_iface(name, sizeof(name), &a) != 0) {
    cr_assert_str_eq(got, "lo");
    return;
  }
  cr_assert_str_neq(got, "lo", "^braid-nope9 chose loopback beside %s", name);
  cr_assert_eq(sock_pick_addr("=lo", &b, got, sizeof(got)), 0);
  cr_assert_str_eq(got, "lo");
  cr_assert_eq(b.ss_family, AF_INET);
  cr_assert_eq(sock_pick_addr(NULL, &b, got, sizeof(got)), 0);
  cr_assert_str_eq(got, name);
  /* the preferred family first, when the interface has it */
  if (sock_pick_addr_family("=lo", AF_INET6, &b, got, sizeof(got)) == 0)
    cr_assert(b.ss_family == AF_INET6 || b.ss_family == AF_INET);
  char ifs[400];
  sock_list_ifaces(ifs, sizeof(ifs));
  cr_assert(strstr(ifs, name) != NULL, "%s not in the list: %s", name, ifs);
  cr_assert_eq(sock_addr_ifname(&a, got, sizeof(got)), 0);
  cr_assert_str_eq(got, name);
}

Test(bootstrap, ipv6_root, .timeout = 60) {
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6;
  memset(&a6, 0, sizeof(a6));
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  if (s < 0 || bind(s, (struct sockaddr *)&a6, sizeof(a6)) != 0) {
    if (s >= 0)
      close(s);
    cr_skip_test("no IPv6 loopback on this machine (::1 cannot be bound)");
  }
  close(s);
  uint8_t secret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  braid_unique_id id;
  braid_result r = BRAID_ERR_SYSTEM;
  for (int tries = 0; tries < 20 && r != BRAID_SUCCESS; tries++)
    r = boot_unique_id_at("::1", free_port(), secret, 1, &id);
  cr_assert_eq(r, BRAID_SUCCESS, "%s", err_msg());
  int family = AF_INET6;
  cr_assert_eq(run_ranks(2, &id, rank_family, &family, 30000, NULL), 0);
}

/* torchrun's flow: every rank builds the id from a known host:port; a rank
 * that arrives before the root service is up keeps retrying. */
Test(bootstrap, root_at_known_port_starts_late, .timeout = 60) {
  uint8_t secret[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
  int port = free_port();
  cr_assert_gt(port, 0);
  braid_unique_id id, root_id;
  cr_assert_eq(boot_unique_id_at("localhost", port, secret, 0, &id),
               BRAID_SUCCESS, "%s", err_msg());
  rank_proc p[3];
  spawn_rank(&p[1], 1, 3, &id, rank_basic, NULL);
  spawn_rank(&p[2], 2, 3, &id, rank_basic, NULL);
  usleep(300000);
  cr_assert_eq(boot_unique_id_at("localhost", port, secret, 1, &root_id),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(memcmp(&id, &root_id, sizeof(id)), 0,
               "root and ranks built different ids");
  spawn_rank(&p[0], 0, 3, &id, rank_basic, NULL);
  wait_ranks(p, 3, 40000);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(p[r].status, 0, "rank %d: status %d: %s", r, p[r].status,
                 p[r].msg);
}
