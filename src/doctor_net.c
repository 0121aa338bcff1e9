/*
 * braid-doctor's network, RDMA, GPU and multi-rank checks (docs/DOCTOR.md);
 * the local ones and the report are in src/doctor.c.
 */
#include "src/doctor.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/cuda_dev.h"
#include "src/bootstrap.h"
#include "src/config.h"
#include "src/launch_env.h"
#include "src/log.h"
#include "topology/topo.h"
#include "transports/sock_util.h"

/* ---- TCP interface ------------------------------------------------------- */

/* The address comes from boot_listen_addr, the function the bootstrap
 * itself calls, so that the report and the job cannot disagree. Without a
 * root it gives what a root started here takes, and, when
 * BRAID_SOCKET_IFNAME is set, what every rank takes (for a root with an
 * IPv6 address a rank tries the interface's IPv6 address first). */
void doc_net(const doc_opts *o, int nranks, int local, doc_report *r) {
  (void)o;
  const cfg_env *env = cfg_get();
  const char *spec = env->socket_ifname;
  char ifs[400], ifname[64] = "", addr[80] = "";
  sock_list_ifaces(ifs, sizeof ifs);
  struct sockaddr_storage ss;
  if (boot_listen_addr(NULL, &ss, ifname, sizeof ifname, NULL) !=
      BRAID_SUCCESS) {
    char fix[1024]; /* doc_add keeps what fits */
    snprintf(fix, sizeof fix,
             "set BRAID_SOCKET_IFNAME to an interface that is up here (NCCL "
             "syntax: prefixes like eth, ^docker to exclude, =eth0 for an "
             "exact name), or unset it; up here: %s",
             ifs);
    doc_add(r, "net", DOC_ERROR, fix,
            "%s: the bootstrap and tcp have no address, so every "
            "communicator fails to form",
            err_msg());
    return;
  }
  sock_addr_str(&ss, addr, sizeof addr);
  char *colon = strrchr(addr, ':'); /* the port (0) is of no interest */
  if (colon != NULL)
    *colon = '\0';
  char why[300];
  if (spec != NULL)
    snprintf(why, sizeof why, "the first that BRAID_SOCKET_IFNAME=%s matches",
             spec);
  else if (strcmp(ifname, "lo") == 0)
    snprintf(why, sizeof why,
             "no up non-loopback IPv4 interface (docker* and virbr* are "
             "skipped)");
  else
    snprintf(why, sizeof why,
             "the first up non-loopback IPv4 interface (docker* and virbr* "
             "skipped; a rank that joins a root on another host through "
             "MASTER_ADDR or a unique id uses the address its route to the "
             "root leaves from; BRAID_SOCKET_IFNAME chooses one for all)");
  int loop =
      ss.ss_family == AF_INET
          ? (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127
          : IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
  int multi = nranks > 0 && nranks > local;
  if (loop) {
    doc_add(r, "net", multi ? DOC_ERROR : DOC_WARN,
            "for a job across hosts, set BRAID_SOCKET_IFNAME to the "
            "interface that joins them",
            "bootstrap and tcp would use %s %s (%s): only ranks of this host "
            "can reach it%s; interfaces up: %s",
            ifname, addr, why,
            multi ? ", and this job spans hosts" : " (fine for one host)", ifs);
    return;
  }
  doc_add(r, "net", DOC_OK, NULL,
          "bootstrap and tcp use %s %s (%s): other hosts must reach this "
          "address; interfaces up: %s",
          ifname, addr, why, ifs);
}

/* ---- RDMA and the choice between hosts ----------------------------------- */

static void list_dir(const char *path, char *buf, size_t len) {
  buf[0] = '\0';
  DIR *d = opendir(path);
  if (d == NULL)
    return;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n + 1 < len) {
    if (e->d_name[0] == '.')
      continue;
    int w = snprintf(buf + n, len - n, "%s%s", n ? " " : "", e->d_name);
    if (w < 0 || (size_t)w >= len - n)
      break;
    n += (size_t)w;
  }
  closedir(d);
}

void doc_rdma(const doc_opts *o, const doc_probe *p, doc_report *r) {
  (void)o;
  const cfg_env *env = cfg_get();
  const char *dev = p->dev, *prov = p->prov;
  int ib = p->ib, ofi = p->ofi;
  char sys[256];
  list_dir("/sys/class/infiniband", sys, sizeof sys);
  const char *remote = ib ? "ibverbs" : ofi ? "ofi" : "tcp";
  char found[640];
  snprintf(found, sizeof found,
           "RDMA devices: %s; usable port: %s; libfabric provider: %s%s",
           sys[0] ? sys : "none", ib ? dev : "none", prov[0] ? prov : "none",
           prov[0] && !ofi ? " (socket-class: braid's tcp serves as well)"
                           : "");
  if (env->transport != NULL) {
    int need_ib = strcmp(env->transport, "ibverbs") == 0 ||
                  strcmp(env->transport, "ib") == 0;
    int need_ofi = strcmp(env->transport, "ofi") == 0;
    if ((need_ib && !ib) || (need_ofi && !prov[0])) {
      doc_add(r, "rdma", DOC_ERROR,
              "unset BRAID_TRANSPORT for the automatic choice, or fix the "
              "device (BRAID_IB_HCA, BRAID_OFI_PROVIDER, drivers, rdma-core)",
              "BRAID_TRANSPORT=%s but %s: every communicator fails to form. "
              "%s",
              env->transport,
              need_ib ? "no active RDMA port is selected"
                      : "no libfabric provider is found",
              found);
      return;
    }
    doc_add(r, "rdma", DOC_OK, NULL,
            "BRAID_TRANSPORT=%s for every pair of ranks. %s", env->transport,
            found);
    return;
  }
  if (sys[0] && !ib) {
    doc_add(r, "rdma", DOC_WARN,
            "check the ports (ibv_devinfo: state PORT_ACTIVE) and "
            "BRAID_IB_HCA",
            "RDMA devices are present but none has an active port that "
            "BRAID_IB_HCA%s%s selects: between hosts braid would use %s. %s",
            env->ib_hca ? "=" : "", env->ib_hca ? env->ib_hca : "", remote,
            found);
    return;
  }
  doc_add(r, "rdma", DOC_OK, NULL,
          "on this host: shm; between hosts: %s (ibverbs when every rank has "
          "an RDMA port, else ofi when every rank has a fast provider, else "
          "tcp). %s",
          remote, found);
}

/* ---- GPUs ---------------------------------------------------------------- */

/* The CUDA IPC probe: a child, forked before this process touches CUDA,
 * opens a handle of GPU 0's memory on the GPU it is told, as ranks of a
 * host do. */
typedef struct ipc_child {
  pid_t pid;
  int to, from; /* pipe ends of the parent */
} ipc_child;

static int ipc_start(ipc_child *k) {
  int in, out;
  k->pid = -1;
  pid_t pid = doc_fork_piped(&in, &out);
  if (pid < 0)
    return -1;
  if (pid == 0) {
    unsigned char h[CUDEV_IPC_BYTES + sizeof(int)];
    char res = 0;
    void *base = NULL;
    int dev = 0;
    if (read(in, h, sizeof h) == (ssize_t)sizeof h) {
      memcpy(&dev, h + CUDEV_IPC_BYTES, sizeof dev);
      res = cudev_set_device(dev) == BRAID_SUCCESS &&
            cudev_ipc_open(h, &base) == BRAID_SUCCESS;
      (void)!write(out, &res, 1);
      if (res)
        cudev_ipc_close(base);
    }
    _exit(0);
  }
  k->pid = pid;
  k->to = out;
  k->from = in;
  return 0;
}

static void ipc_stop(ipc_child *k) {
  if (k->pid < 0)
    return;
  close(k->to);
  close(k->from);
  kill(k->pid, SIGKILL);
  while (waitpid(k->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  k->pid = -1;
}

/* BRAID_SUCCESS: it works; BRAID_ERR_UNSUPPORTED: it does not; another
 * failure: it could not be probed. Each failure says why. */
static braid_result ipc_probe(ipc_child *k, int dev, int timeout_ms) {
  if (k->pid < 0)
    return ERR(BRAID_ERR_SYSTEM, "no probe process (fork failed)");
  braid_result rc = BRAID_ERR_SYSTEM;
  void *p = NULL;
  unsigned char h[CUDEV_IPC_BYTES + sizeof(int)];
  memset(h, 0, sizeof h);
  if (cudev_set_device(0) != BRAID_SUCCESS ||
      cudev_malloc(&p, 1 << 20) != BRAID_SUCCESS ||
      cudev_ipc_get(p, h) != BRAID_SUCCESS) {
    rc = ERR(BRAID_ERR_UNSUPPORTED, "exporting a handle failed: %s",
             cudev_error());
  } else {
    memcpy(h + CUDEV_IPC_BYTES, &dev, sizeof dev);
    struct pollfd pf = {k->from, POLLIN, 0};
    char res = 0;
    if (write(k->to, h, sizeof h) != (ssize_t)sizeof h)
      rc = ERR(BRAID_ERR_SYSTEM, "the probe process is gone");
    else if (poll(&pf, 1, timeout_ms) == 1 && read(k->from, &res, 1) == 1)
      rc = res == 1 ? BRAID_SUCCESS
                    : ERR(BRAID_ERR_UNSUPPORTED,
                          "opening the handle in another process on GPU %d "
                          "failed",
                          dev);
    else
      rc = ERR(BRAID_ERR_UNSUPPORTED,
               "the probe process did not answer in %d ms", timeout_ms);
  }
  ipc_stop(k);
  if (p != NULL)
    cudev_free(p);
  return rc;
}

static void gpu_paths(int n, char *buf, size_t len) {
  buf[0] = '\0';
  topo_graph *g = NULL;
  if (topo_detect(&g) != BRAID_SUCCESS || g == NULL) {
    snprintf(buf, len, "paths unknown (topology: %s)", err_msg());
    return;
  }
  size_t at = 0;
  int ids[16], m = 0;
  for (int i = 0; i < n && m < 16; i++) {
    char bus[32] = "";
    if (cudev_busid(i, bus, sizeof bus) == BRAID_SUCCESS)
      ids[m++] = topo_find_busid(g, bus);
  }
  for (int a = 0; a < m; a++)
    for (int b = a + 1; b < m; b++) {
      const char *c =
          ids[a] < 0 || ids[b] < 0
              ? "unknown (a bus id missing from the detected topology)"
              : topo_pclass_name(topo_path_class(g, ids[a], ids[b]));
      int w = snprintf(buf + at, len - at, "%sGPU%d-GPU%d %s", at ? ", " : "",
                       a, b, c);
      if (w < 0 || (size_t)w >= len - at)
        break;
      at += (size_t)w;
    }
  if (at == 0)
    snprintf(buf, len, "one GPU, no GPU pairs");
  topo_graph_free(g);
}

void doc_gpu(const doc_opts *o, int local, doc_report *r) {
  if (o->cheap)
    return; /* no GPU context in the init-failure path */
  if (!cudev_built()) {
    doc_add(r, "gpu", DOC_OK, NULL,
            "braid was built without CUDA: no GPU checks (device buffers "
            "are refused; build with CUDA for GPUs)");
    return;
  }
  /* the IPC probe forks before this process touches CUDA */
  ipc_child kid;
  ipc_start(&kid);
  char ipc_err[256] = "";
  int n = cudev_count();
  if (n <= 0) {
    ipc_stop(&kid);
    const char *why = cudev_error();
    doc_add(r, "gpu", DOC_OK, NULL, "no GPU (%s)",
            why != NULL && why[0] ? why : "none visible");
    return;
  }
  char bus[400] = "", paths[600];
  size_t at = 0;
  for (int i = 0; i < n && at + 1 < sizeof bus; i++) {
    char b[32] = "?";
    cudev_busid(i, b, sizeof b);
    int w =
        snprintf(bus + at, sizeof bus - at, "%sGPU%d %s", i ? ", " : "", i, b);
    if (w < 0 || (size_t)w >= sizeof bus - at)
      break;
    at += (size_t)w;
  }
  gpu_paths(n, paths, sizeof paths);
  doc_add(r, "gpu", DOC_OK, NULL, "%d GPUs: %s; paths: %s", n, bus, paths);
  braid_result ipc = ipc_probe(&kid, n > 1 ? 1 : 0, 10000);
  if (ipc != BRAID_SUCCESS)
    snprintf(ipc_err, sizeof ipc_err, "%s", err_msg());
  if (ipc == BRAID_SUCCESS)
    doc_add(r, "gpu", DOC_OK, NULL,
            "CUDA IPC works: a handle of GPU 0's memory opened in another "
            "process on GPU %d%s",
            n > 1 ? 1 : 0, n > 1 ? " (peer access between them)" : "");
  else
    doc_add(r, "gpu", DOC_WARN,
            "check that the ranks see the same GPUs (CUDA_VISIBLE_DEVICES), "
            "share the IPC namespace (docker --ipc=host) and that the "
            "driver allows peer access (nvidia-smi topo -p2p r)",
            "CUDA IPC %s (%s): device buffers between ranks of this host "
            "go through host memory, much slower",
            ipc != BRAID_ERR_UNSUPPORTED ? "could not be probed"
                                         : "does not work",
            ipc_err[0] ? ipc_err : "no detail");
  if (local > n) {
    const char *dir = cfg_get()->mps_pipe_dir;
    char pipe_path[512];
    snprintf(pipe_path, sizeof pipe_path, "%s/control",
             dir != NULL ? dir : "/tmp/nvidia-mps");
    if (access(pipe_path, F_OK) != 0)
      doc_add(r, "gpu", DOC_WARN,
              "start an MPS daemon (nvidia-cuda-mps-control -d), or run one "
              "rank per GPU",
              "%d ranks on this host share %d GPUs and no MPS control daemon "
              "was found at %s: each GPU runs one process at a time",
              local, n, pipe_path);
    else
      doc_add(r, "gpu", DOC_OK, NULL, "%d ranks share %d GPUs under MPS (%s)",
              local, n, pipe_path);
  }
}

/* ---- ranks: a real rendezvous -------------------------------------------- */

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every rank's worst verdict into job (the communicator c stays open in it);
 * an error finding and c aborted when that fails. */
static void exchange_verdicts(braid_comm *c, int me, int n, doc_report *r,
                              doc_job *job) {
  int32_t mine = (int32_t)doc_worst(r);
  int32_t *all = calloc((size_t)n, sizeof *all);
  job->verdicts = calloc((size_t)n, sizeof *job->verdicts);
  braid_result res = all != NULL && job->verdicts != NULL
                         ? braid_allgather(&mine, all, 1, BRAID_INT32, c, NULL)
                         : BRAID_ERR_NOMEM;
  if (res != BRAID_SUCCESS) {
    doc_add(r, "ranks", DOC_ERROR,
            "run with BRAID_DEBUG=INFO to see the transports each pair uses",
            "rank %d of %d: exchanging the ranks' verdicts (a 4-byte "
            "allgather) failed: %s",
            me, n,
            res == BRAID_ERR_NOMEM ? "out of memory"
                                   : braid_comm_last_error(c));
    free(all);
    free(job->verdicts);
    job->verdicts = NULL;
    braid_comm_abort(c);
    return;
  }
  job->worst = DOC_OK;
  for (int i = 0; i < n; i++) {
    job->verdicts[i] = all[i] >= DOC_ERROR ? DOC_ERROR
                       : all[i] > DOC_OK   ? DOC_WARN
                                           : DOC_OK;
    if (job->verdicts[i] > job->worst)
      job->worst = job->verdicts[i];
  }
  free(all);
  job->rank = me;
  job->nranks = n;
  job->comm = c;
}

void doc_job_end(doc_job *job) {
  if (job->comm != NULL) {
    if (braid_barrier(job->comm, NULL) == BRAID_SUCCESS)
      braid_comm_destroy(job->comm);
    else
      braid_comm_abort(job->comm);
  }
  free(job->verdicts);
  memset(job, 0, sizeof *job);
}

braid_result doc_ranks(int nranks, int timeout_ms, doc_report *r,
                       doc_job *job) {
  memset(job, 0, sizeof *job);
  launch_info li;
  if (launch_rank(&li) != BRAID_SUCCESS) {
    doc_add(r, "ranks", DOC_ERROR,
            "start the doctor on every rank: braidrun -n N braid-doctor "
            "--ranks N, torchrun ... or mpirun -n N braid-doctor --ranks N",
            "--ranks %d: %s", nranks, err_msg());
    return BRAID_SUCCESS;
  }
  if (nranks > 0 && nranks != li.size) {
    doc_add(r, "ranks", DOC_ERROR,
            "give --ranks the number of ranks the launcher starts",
            "--ranks %d but the launcher (%s) says %d ranks", nranks, li.source,
            li.size);
    return BRAID_SUCCESS;
  }
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.timeout_ms = timeout_ms;
  cfg.name = "doctor";
  braid_comm *c = NULL;
  long long t0 = now_ms();
  doc_init_quiet(1);
  braid_result res = braid_comm_init_env(&c, &cfg);
  doc_init_quiet(0);
  if (res != BRAID_SUCCESS) {
    char err[512] = "";
    doc_last_init_error(err, sizeof err);
    const char *fix =
        strstr(err, "cannot reach") != NULL || strstr(err, "connect") != NULL
            ? "check that every rank reaches rank 0's address (BRAID_COMM_ID, "
              "or MASTER_ADDR:MASTER_PORT; a firewall; BRAID_SOCKET_IFNAME on "
              "each host) and that rank 0 runs"
        : strstr(err, "waiting for the other ranks") != NULL ||
                strstr(err, "ranks arrived (missing:") != NULL
            ? "a rank did not join (the root names those missing): check that "
              "all ranks were started with "
              "the same root address, and read the other ranks' reports "
              "(the one that failed names why)"
        : strstr(err, "expects") != NULL || strstr(err, "differ") != NULL
            ? "the ranks disagree: give every rank the same BRAID_* settings "
              "(BRAID_TRANSPORT, BRAID_NCHANNELS, ...) and the same braid"
            : "read the error; BRAID_DEBUG=INFO shows each step of the "
              "communicator's creation";
    doc_add(r, "ranks", DOC_ERROR, fix,
            "rank %d of %d (%s): forming the communicator (rendezvous, "
            "transports) failed after %lld ms (%s): %s",
            li.rank, li.size, li.source, now_ms() - t0,
            braid_result_string(res), err[0] ? err : "no detail");
    return BRAID_SUCCESS;
  }
  int me = li.rank, n = li.size;
  int32_t v = me + 1, sum = 0;
  res = braid_allreduce(&v, &sum, 1, BRAID_INT32, BRAID_SUM, c, NULL);
  if (res != BRAID_SUCCESS || sum != n * (n + 1) / 2) {
    doc_add(r, "ranks", DOC_ERROR,
            "run with BRAID_DEBUG=INFO to see the transports each pair uses",
            "rank %d of %d: a 4-byte allreduce %s: %s", me, n,
            res != BRAID_SUCCESS ? "failed" : "gave a wrong sum",
            res != BRAID_SUCCESS ? braid_comm_last_error(c) : "data corrupt");
    braid_comm_abort(c);
    return BRAID_SUCCESS;
  }
  /* round k: send to me + k, receive from me - k */
  for (int k = 1; k < n; k++) {
    int to = (me + k) % n, from = (me - k + n) % n;
    int32_t out = me, in = -1;
    braid_group_start();
    braid_result a = braid_send(&out, 1, BRAID_INT32, to, c, NULL);
    braid_result b = braid_recv(&in, 1, BRAID_INT32, from, c, NULL);
    res = braid_group_end();
    if (res == BRAID_SUCCESS)
      res = a != BRAID_SUCCESS ? a : b;
    if (res != BRAID_SUCCESS || in != from) {
      doc_add(r, "ranks", DOC_ERROR,
              "check the path between these two ranks (BRAID_DEBUG=INFO "
              "names the transport; BRAID_TRANSPORT=tcp rules the fast ones "
              "out)",
              "rank %d of %d: send to rank %d / receive from rank %d failed: "
              "%s",
              me, n, to, from,
              res != BRAID_SUCCESS ? braid_comm_last_error(c) : "data corrupt");
      braid_comm_abort(c);
      return BRAID_SUCCESS;
    }
  }
  doc_add(r, "ranks", DOC_OK, NULL,
          "rank %d of %d (%s): rendezvous, a 4-byte allreduce and a "
          "send/receive with every other rank worked in %lld ms",
          me, n, li.source, now_ms() - t0);
  exchange_verdicts(c, me, n, r, job);
  return r->oom ? BRAID_ERR_NOMEM : BRAID_SUCCESS;
}
