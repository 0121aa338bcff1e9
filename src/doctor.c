/*
 * braid-doctor's local checks (docs/DOCTOR.md): /dev/shm against the shm
 * transport's segments, cross-memory attach, limits, cores, the BRAID_*
 * environment; the report itself and the init-failure hook. The network,
 * RDMA, GPU and multi-rank checks are in src/doctor_net.c.
 */
#include "src/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/plan.h"
#include "collectives/select.h"
#include "src/bootstrap.h"
#include "src/comm.h"
#include "src/config.h"
#include "src/launch_env.h"
#include "src/log.h"
#include "transports/ibverbs/ibverbs.h"
#include "transports/ofi/ofi.h"
#include "transports/shm.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

extern char **environ;

/* ---- the report ---------------------------------------------------------- */

braid_result doc_add(doc_report *r, const char *check, doc_verdict v,
                     const char *fix, const char *fmt, ...) {
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    doc_finding *f = realloc(r->f, (size_t)cap * sizeof *f);
    if (f == NULL) {
      r->oom = 1;
      return BRAID_ERR_NOMEM;
    }
    r->f = f;
    r->cap = cap;
  }
  doc_finding *f = &r->f[r->n++];
  memset(f, 0, sizeof *f);
  snprintf(f->check, sizeof f->check, "%s", check);
  f->verdict = v;
  snprintf(f->fix, sizeof f->fix, "%s", fix ? fix : "");
  va_list ap;
  va_start(ap, fmt);
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  vsnprintf(f->what, sizeof f->what, fmt, ap);
  va_end(ap);
  return BRAID_SUCCESS;
}

doc_verdict doc_worst(const doc_report *r) {
  doc_verdict w = DOC_OK;
  for (int i = 0; i < r->n; i++)
    if (r->f[i].verdict > w)
      w = r->f[i].verdict;
  return w;
}

void doc_report_free(doc_report *r) {
  free(r->f);
  memset(r, 0, sizeof *r);
}

const char *doc_verdict_name(doc_verdict v) {
  return v == DOC_OK ? "ok" : v == DOC_WARN ? "warning" : "error";
}

const char *doc_bytes(unsigned long long b, char *buf, size_t len) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double x = (double)b;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", b);
  else
    snprintf(buf, len, "%.*f %s", x < 10.0 ? 1 : 0, x, unit[u]);
  return buf;
}

/* ---- job shape ---------------------------------------------------------- */

static int affinity_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

typedef struct shape {
  int local;     /* ranks per host */
  int nranks;    /* ranks of the job; 0 unknown */
  int channels;  /* connections per peer (BRAID_NCHANNELS + 1) */
  size_t slot;   /* bytes per slot */
  char why[128]; /* where local came from */
} shape;

static void job_shape(const doc_opts *o, shape *s) {
  const cfg_env *env = cfg_get();
  memset(s, 0, sizeof *s);
  launch_info li;
  int launched = launch_rank(&li) == BRAID_SUCCESS;
  s->nranks = o->nranks > 0 ? o->nranks : launched ? li.size : 0;
  if (o->local_ranks > 0) {
    s->local = o->local_ranks;
    snprintf(s->why, sizeof s->why, "%d ranks on this host", s->local);
  } else if (launched && li.local_size > 0) {
    s->local = li.local_size;
    snprintf(s->why, sizeof s->why, "%d ranks on this host (%s)", s->local,
             li.source);
  } else if (s->nranks > 0) {
    s->local = s->nranks;
    snprintf(s->why, sizeof s->why,
             "%d ranks on this host (all of the job; --local-ranks to say "
             "otherwise)",
             s->local);
  } else {
    int c = affinity_cores();
    s->local = c < 8 ? c : 8;
    snprintf(s->why, sizeof s->why,
             "%d ranks on this host (assumed: min(cores, 8); --local-ranks "
             "to say)",
             s->local);
  }
  int nch = env->nchannels > 0 ? env->nchannels : PLAN_DEFAULT_CHANNELS;
  s->channels = nch + 1; /* as src/comm.c sets the transports up */
  size_t slice;
  cfg_slots(env->buffsize, &s->slot, &slice);
}

/* ---- /dev/shm ------------------------------------------------------------ */

/* Bytes the shm transport reserves in /dev/shm on this host for one
 * communicator: every local rank one segment (transports/shm_setup.c). */
static unsigned long long shm_need(const shape *s, size_t buffsize) {
  if (s->local < 2)
    return 0;
  const cfg_env *env = cfg_get();
  size_t slot, slice;
  cfg_slots(buffsize, &slot, &slice);
  uint64_t seg =
      shm_segment_bytes(s->local - 1, s->channels, env->nslots, slot);
  return (unsigned long long)seg * (unsigned long long)s->local;
}

static void check_shm(const shape *s, doc_report *r) {
  const cfg_env *env = cfg_get();
  char b1[32], b2[32], b3[32], fix[512];
  if (env->transport != NULL && strcmp(env->transport, "shm") != 0) {
    doc_add(r, "shm", DOC_OK, NULL,
            "BRAID_TRANSPORT=%s: the shm transport is not used, /dev/shm "
            "not needed",
            env->transport);
    return;
  }
  struct statvfs sv;
  if (statvfs("/dev/shm", &sv) != 0 || access("/dev/shm", W_OK | X_OK) != 0) {
    doc_add(r, "shm", s->local > 1 ? DOC_ERROR : DOC_WARN,
            "mount a tmpfs on /dev/shm writable by the ranks' user (mount -t "
            "tmpfs -o size=1g tmpfs /dev/shm; docker: --shm-size=1g), or "
            "BRAID_TRANSPORT=tcp",
            "/dev/shm is missing or not writable (%s): ranks on one host "
            "cannot create their shared-memory segments",
            strerror(errno));
    return;
  }
  unsigned long long total =
      (unsigned long long)sv.f_blocks * (unsigned long long)sv.f_frsize;
  unsigned long long avail =
      (unsigned long long)sv.f_bavail * (unsigned long long)sv.f_frsize;
  unsigned long long need = shm_need(s, env->buffsize);
  if (need == 0) {
    doc_add(r, "shm", DOC_OK, NULL,
            "/dev/shm: %s, %s free; %s: no shared-memory peers, nothing "
            "mapped",
            doc_bytes(total, b1, sizeof b1), doc_bytes(avail, b2, sizeof b2),
            s->why);
    return;
  }
  doc_verdict v = need > avail       ? DOC_ERROR
                  : need > avail / 2 ? DOC_WARN
                                     : DOC_OK;
  fix[0] = '\0';
  if (v != DOC_OK) {
    /* the largest power-of-two BRAID_BUFFSIZE that fits in half of it */
    size_t b = env->buffsize, lo = (size_t)env->nslots * 4096;
    while (b / 2 >= lo && shm_need(s, b) > avail / 2)
      b /= 2;
    unsigned long long want = need * 2;
    int n = 0;
    n += snprintf(fix, sizeof fix,
                  "enlarge /dev/shm to at least %s (docker run "
                  "--shm-size=%lluM; Kubernetes: an emptyDir with medium "
                  "Memory on /dev/shm; a host: mount -o remount,size=%lluM "
                  "/dev/shm)",
                  doc_bytes(want, b1, sizeof b1), (want >> 20) + 1,
                  (want >> 20) + 1);
    if (n < 0 || n >= (int)sizeof fix)
      n = (int)sizeof fix - 1;
    if (shm_need(s, b) <= avail / 2 && b < env->buffsize)
      snprintf(fix + n, sizeof fix - (size_t)n,
               ", or set BRAID_BUFFSIZE=%zuK (needs %s; smaller slots, "
               "lower bandwidth)",
               b >> 10, doc_bytes(shm_need(s, b), b3, sizeof b3));
    else
      snprintf(fix + n, sizeof fix - (size_t)n,
               ", or lower BRAID_NCHANNELS, or run fewer ranks per host");
  }
  doc_add(r, "shm", v, fix,
          "/dev/shm: %s, %s free; the shm transport reserves %s for %s "
          "(%d peers x %d channels x %d slots of %zu bytes per rank, per "
          "communicator; each braid_comm_split takes as much again)%s",
          doc_bytes(total, b1, sizeof b1), doc_bytes(avail, b2, sizeof b2),
          doc_bytes(need, b3, sizeof b3), s->why, s->local - 1, s->channels,
          env->nslots, s->slot,
          v == DOC_ERROR  ? ": communicator creation fails with \"cannot "
                            "allocate ... in /dev/shm\""
          : v == DOC_WARN ? ": more than half of what is free"
                          : "");
}

/* ---- cross-memory attach ------------------------------------------------- */

static int read_int_file(const char *path, int *out) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  int ok = fscanf(f, "%d", out) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

static int seccomp_mode(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  char line[256];
  int mode = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Seccomp: %d", &mode) == 1)
      break;
  fclose(f);
  return mode;
}

/* A read of this process's own memory, and a write into it: fail only
 * where the system calls themselves are refused (seccomp, a kernel without
 * CMA). Returns 1 when the read works; *wrote says whether the write did
 * (process_vm_writev, the shared single copy's sender side), *werr its
 * errno. */
static int cma_self(int *err, int *wrote, int *werr) {
  volatile uint64_t word = 0x6272616964636d61ull;
  uint64_t got = 0;
  struct iovec l = {&got, sizeof got};
  struct iovec rv = {(void *)&word, sizeof word};
  ssize_t n = process_vm_readv(getpid(), &l, 1, &rv, 1, 0);
  *err = n < 0 ? errno : 0;
  int read_ok = n == (ssize_t)sizeof got && got == word;
  uint64_t put = 0x77726974656d6521ull;
  struct iovec wl = {&put, sizeof put};
  n = process_vm_writev(getpid(), &wl, 1, &rv, 1, 0);
  *werr = n < 0 ? errno : 0;
  *wrote = n == (ssize_t)sizeof put && word == put;
  return read_ok;
}

pid_t doc_fork_piped(int *in, int *out) {
  int down[2], up[2]; /* parent -> child, child -> parent */
  if (pipe2(down, O_CLOEXEC) != 0)
    return -1;
  if (pipe2(up, O_CLOEXEC) != 0) {
    close(down[0]);
    close(down[1]);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(down[0]);
    close(down[1]);
    close(up[0]);
    close(up[1]);
    return -1;
  }
  close(pid == 0 ? down[1] : down[0]);
  close(pid == 0 ? up[0] : up[1]);
  *in = pid == 0 ? down[0] : up[0];
  *out = pid == 0 ? up[1] : down[1];
  return pid;
}

/* A read of a child's memory, as a rank reads a peer's: the child allows
 * any tracer (PR_SET_PTRACER_ANY, as braid's ranks do) and waits on a pipe
 * that the parent closes after the read (or that closes when the parent
 * dies). 1 readable, 0 not (*err the errno), -1 the probe could not run. */
static int cma_child(int *err) {
  static volatile uint64_t word = 0;
  int in, out;
  pid_t pid = doc_fork_piped(&in, &out);
  if (pid < 0)
    return -1;
  if (pid == 0) { /* only async-signal-safe calls until _exit */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    word = 0x646f63746f72636dull;
    char c = 1;
    if (write(out, &c, 1) != 1)
      _exit(1);
    (void)!read(in, &c, 1); /* EOF when the parent is done */
    _exit(0);
  }
  char c = 0;
  int rc = -1;
  struct pollfd pf = {in, POLLIN, 0};
  if (poll(&pf, 1, 5000) == 1 && read(in, &c, 1) == 1) {
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got};
    struct iovec rv = {(void *)&word, sizeof word};
    ssize_t n = process_vm_readv(pid, &l, 1, &rv, 1, 0);
    *err = n < 0 ? errno : 0;
    rc = n == (ssize_t)sizeof got && got == 0x646f63746f72636dull;
  }
  close(out);
  close(in);
  if (rc < 0)
    kill(pid, SIGKILL); /* it did not answer in time */
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
    ;
  return rc;
}

static void check_cma(const doc_opts *o, const shape *s, doc_report *r) {
  const cfg_env *env = cfg_get();
  char b1[32];
  const char *cost_fmt =
      "messages of at least %s between ranks of a host are copied twice "
      "through the shared segment instead of once, which costs memory "
      "bandwidth and lowers large-message bandwidth";
  char cost[256];
  snprintf(cost, sizeof cost, cost_fmt,
           doc_bytes(env->cma_threshold ? env->cma_threshold
                                        : shm_cma_default(s->local),
                     b1, sizeof b1));
  if (!env->shm_cma) {
    doc_add(r, "cma", DOC_OK, NULL,
            "single-copy (cross-memory attach) is off (BRAID_SHM_CMA=0): %s",
            cost);
    return;
  }
  int yama = -1;
  int have_yama =
      read_int_file("/proc/sys/kernel/yama/ptrace_scope", &yama) == 0;
  int sec = seccomp_mode();
  int e_self = 0, e_child = 0, wrote = 0, e_write = 0;
  int self = cma_self(&e_self, &wrote, &e_write);
  int child = self && !o->cheap ? cma_child(&e_child) : -1;
  char yama_txt[96];
  if (have_yama)
    snprintf(yama_txt, sizeof yama_txt, "kernel.yama.ptrace_scope=%d", yama);
  else
    snprintf(yama_txt, sizeof yama_txt, "no Yama");
  const char *sec_txt = sec == 2   ? ", a seccomp filter is installed"
                        : sec == 1 ? ", strict seccomp"
                                   : "";
  doc_verdict v = s->local > 1 ? DOC_WARN : DOC_OK;
  if (!self) {
    doc_add(r, "cma", v,
            "allow process_vm_readv in the container's seccomp profile "
            "(docker: --cap-add SYS_PTRACE, or a profile that allows "
            "process_vm_readv; Kubernetes: securityContext.seccompProfile), "
            "or set BRAID_SHM_CMA=0 to accept the copies and silence this",
            "cross-memory attach is refused: process_vm_readv on this "
            "process failed (%s; %s%s), so %s",
            strerror(e_self), yama_txt, sec_txt, cost);
    return;
  }
  if (child == 0) {
    const char *fix =
        yama == 3 ? "kernel.yama.ptrace_scope=3 cannot be lowered without a "
                    "reboot: boot with it at 1 (braid's ranks allow their "
                    "peers themselves), or set BRAID_SHM_CMA=0"
        : yama == 2
            ? "give the ranks CAP_SYS_PTRACE (docker: --cap-add SYS_PTRACE), "
              "or set kernel.yama.ptrace_scope=1 (sysctl), or set "
              "BRAID_SHM_CMA=0"
            : "check the security module (Yama, AppArmor, SELinux) and the "
              "pid namespaces of the ranks, or set BRAID_SHM_CMA=0";
    doc_add(r, "cma", v, fix,
            "cross-memory attach between processes is refused: reading a "
            "child's memory failed (%s; %s%s), so %s",
            strerror(e_child), yama_txt, sec_txt, cost);
    return;
  }
  if (child < 0 && have_yama && yama >= 2) {
    doc_add(r, "cma", v,
            yama == 3 ? "kernel.yama.ptrace_scope=3 cannot be lowered "
                        "without a reboot: boot with it at 1, or set "
                        "BRAID_SHM_CMA=0"
                      : "give the ranks CAP_SYS_PTRACE, or set "
                        "kernel.yama.ptrace_scope=1, or set BRAID_SHM_CMA=0",
            "%s: ranks cannot read each other's memory, so %s", yama_txt, cost);
    return;
  }
  if (!wrote) {
    doc_add(r, "cma", v,
            "allow process_vm_writev beside process_vm_readv in the "
            "container's seccomp profile (docker: --cap-add SYS_PTRACE, or a "
            "profile that allows both)",
            "cross-memory attach reads but does not write: "
            "process_vm_writev on this process failed (%s; %s), so a rank "
            "that only sends (an in-place broadcast's root, a gather's "
            "senders, a scatter's root) cannot take its share of a large "
            "single copy, and its receivers copy all of it "
            "(docs/TRANSPORTS.md, \"Single copy, shared\")",
            strerror(e_write), sec_txt[0] ? sec_txt + 2 : "no seccomp filter");
    return;
  }
  doc_add(r, "cma", DOC_OK, NULL,
          "cross-memory attach works (%s%s; %s): messages of at least %s "
          "between ranks of a host are copied once",
          yama_txt, sec_txt,
          child == 1 ? "read a child's memory" : "read this process's memory",
          b1);
}

/* ---- limits -------------------------------------------------------------- */

static void check_limits(const shape *s, const doc_probe *p, doc_report *r) {
  const cfg_env *env = cfg_get();
  char b1[32], b2[32], fix[512];
  struct rlimit nf;
  if (getrlimit(RLIMIT_NOFILE, &nf) == 0) {
    /* tcp: one socket per remote peer and channel; the bootstrap one per
     * rank at the root; pidfds, eventfds and the rest: 64 */
    unsigned long long per_peer = (unsigned long long)s->channels;
    unsigned long long need =
        s->nranks > 0
            ? (unsigned long long)(s->nranks - 1) * per_peer + s->nranks + 64
            : 0;
    unsigned long long soft = nf.rlim_cur;
    if (nf.rlim_cur == RLIM_INFINITY)
      snprintf(b1, sizeof b1, "unlimited");
    else
      snprintf(b1, sizeof b1, "%llu", soft);
    if (nf.rlim_max == RLIM_INFINITY)
      snprintf(b2, sizeof b2, "unlimited");
    else
      snprintf(b2, sizeof b2, "%llu", (unsigned long long)nf.rlim_max);
    if (nf.rlim_cur == RLIM_INFINITY || need == 0 || soft >= need) {
      unsigned long long room = nf.rlim_cur == RLIM_INFINITY ? 0
                                : soft > 64 ? (soft - 64) / (per_peer + 1)
                                            : 0;
      char room_txt[64];
      if (nf.rlim_cur == RLIM_INFINITY)
        snprintf(room_txt, sizeof room_txt, "no limit on ranks");
      else
        snprintf(room_txt, sizeof room_txt, "room for about %llu ranks", room);
      doc_add(r, "limits", DOC_OK, NULL,
              "open files: %s (soft), %s over tcp (%llu sockets per "
              "peer)%s",
              b1, room_txt, per_peer,
              need ? "" : " (job size unknown: --ranks)");
    } else {
      snprintf(fix, sizeof fix,
               "raise the limit: ulimit -n %llu (the hard limit is %s; "
               "/etc/security/limits.conf nofile, docker --ulimit "
               "nofile=%llu)",
               need, b2, need);
      doc_add(r, "limits", DOC_ERROR, fix,
              "open files: %llu (soft) is below the about %llu a rank of %d "
              "needs over tcp (%llu sockets per peer): connections fail "
              "with \"Too many open files\"",
              soft, need, s->nranks, per_peer);
    }
  }
  struct rlimit ml;
  if (getrlimit(RLIMIT_MEMLOCK, &ml) != 0)
    return;
  /* ibverbs registers 2 x BRAID_BUFFSIZE per connection, and the buffers
   * of large messages besides (transports/ibverbs/ibverbs_setup.c) */
  int remote = s->nranks > s->local ? s->nranks - 1 : s->local;
  unsigned long long need =
      (unsigned long long)remote * (unsigned)s->channels * 2ull * env->buffsize;
  const char *lim = ml.rlim_cur == RLIM_INFINITY
                        ? "unlimited"
                        : doc_bytes(ml.rlim_cur, b1, sizeof b1);
  if (!p->ib && !p->ofi) {
    doc_add(r, "limits", DOC_OK, NULL,
            "locked memory: %s; only RDMA transports lock memory, and none "
            "is present",
            lim);
  } else if (ml.rlim_cur == RLIM_INFINITY || ml.rlim_cur >= need) {
    doc_add(r, "limits", DOC_OK, NULL,
            "locked memory: %s, enough for the RDMA transport's slots (%s)",
            lim, doc_bytes(need, b2, sizeof b2));
  } else {
    doc_add(r, "limits", DOC_ERROR,
            "ulimit -l unlimited (/etc/security/limits.conf memlock "
            "unlimited; docker --ulimit memlock=-1)",
            "locked memory: %s is below the %s that %s's slots need for %d "
            "remote peers (plus the buffers of large messages): memory "
            "registration fails at communicator creation",
            lim, doc_bytes(need, b2, sizeof b2), p->ib ? p->dev : p->prov,
            remote);
  }
}

/* ---- cores --------------------------------------------------------------- */

static void check_cores(const shape *s, doc_report *r) {
  int cores = affinity_cores();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (s->local <= cores) {
    doc_add(r, "cores", DOC_OK, NULL,
            "%d cores available to this process (%ld online) for %s", cores,
            online, s->why);
    return;
  }
  doc_add(r, "cores", DOC_WARN,
          "run at most one rank per core (fewer ranks per host, or a wider "
          "CPU set: taskset, --cpus-per-task, docker --cpus); BRAID_SPIN_US=0 "
          "makes waiting ranks sleep at once",
          "%d cores available to this process (%ld online) for %s: ranks "
          "take turns on the cores, and every collective waits for the "
          "slowest",
          cores, online, s->why);
}

/* ---- environment --------------------------------------------------------- */

/* Variables of braid's scripts and tests, not of the library (docs/ENV.md,
 * "Tools and tests"). */
static const char *const script_vars[] = {
    "BRAID_SKIP_SANITIZE", "BRAID_SKIP_FUZZ", "BRAID_SKIP_LINT",
    "BRAID_NETNS_TRANSPORTS", "BRAID_NETNS_COUNTS"};

typedef struct env_seen {
  char names[160][48];
  int nnames;
  char refused[16][320];
  char refused_name[16][48];
  int nrefused;
} env_seen;

static void env_visit(void *arg, const char *name, const char *value,
                      const char *why) {
  env_seen *e = arg;
  (void)value;
  int known = 0;
  for (int i = 0; i < e->nnames; i++)
    known |= strcmp(e->names[i], name) == 0;
  if (!known && e->nnames < 160)
    snprintf(e->names[e->nnames++], sizeof e->names[0], "%s", name);
  if (why != NULL && e->nrefused < 16) {
    snprintf(e->refused[e->nrefused], sizeof e->refused[0], "%s", why);
    snprintf(e->refused_name[e->nrefused++], sizeof e->refused_name[0], "%s",
             name);
  }
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63)
    return SIZE_MAX;
  size_t d[64][64];
  for (size_t i = 0; i <= la; i++)
    d[i][0] = i;
  for (size_t j = 0; j <= lb; j++)
    d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      size_t m = sub < del ? sub : del;
      m = m < ins ? m : ins;
      /* a swap of two neighbours counts as one edit */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < m)
        m = d[i - 2][j - 2] + 1;
      d[i][j] = m;
    }
  return d[la][lb];
}

static void check_env(const shape *s, doc_report *r) {
  env_seen *e = calloc(1, sizeof *e);
  if (e == NULL) {
    r->oom = 1;
    return;
  }
  cfg_validate(env_visit, e);
  for (size_t i = 0; launch_env_var(i) != NULL; i++)
    env_visit(e, launch_env_var(i), NULL, NULL);
  for (size_t i = 0; i < sizeof script_vars / sizeof *script_vars; i++)
    env_visit(e, script_vars[i], NULL, NULL);
  int bad = 0, nset = 0;
  for (char **p = environ; p != NULL && *p != NULL; p++) {
    if (strncmp(*p, "BRAID_", 6) != 0)
      continue;
    const char *eq = strchr(*p, '=');
    size_t len = eq ? (size_t)(eq - *p) : strlen(*p);
    char name[64];
    if (len >= sizeof name)
      len = sizeof name - 1;
    memcpy(name, *p, len);
    name[len] = '\0';
    nset++;
    int known = 0;
    size_t best = SIZE_MAX;
    const char *near = NULL;
    for (int i = 0; i < e->nnames && !known; i++) {
      known = strcmp(e->names[i], name) == 0;
      size_t d = edit_distance(name, e->names[i]);
      if (d < best) {
        best = d;
        near = e->names[i];
      }
    }
    if (known)
      continue;
    bad++;
    char fix[256];
    if (near != NULL && best <= 3)
      snprintf(fix, sizeof fix, "did you mean %s? (docs/ENV.md lists them)",
               near);
    else
      snprintf(fix, sizeof fix,
               "remove it; docs/ENV.md lists the variables braid reads");
    doc_add(r, "env", DOC_WARN, fix,
            "%s is set but braid does not read it: the setting is ignored",
            name);
  }
  for (int i = 0; i < e->nrefused; i++) {
    bad++;
    char fix[160];
    snprintf(fix, sizeof fix,
             "set %s to a value braid takes (docs/ENV.md), or unset it",
             e->refused_name[i]);
    doc_add(r, "env", DOC_WARN, fix, "refused value: %s", e->refused[i]);
  }
  const cfg_env *env = cfg_get();
  if (env->transport != NULL && comm_tp_by_name(env->transport) == NULL) {
    bad++;
    doc_add(r, "env", DOC_ERROR,
            "BRAID_TRANSPORT takes shm, tcp, ofi or ibverbs; unset it for "
            "the automatic choice",
            "BRAID_TRANSPORT=%s is not a transport: every communicator fails "
            "to form",
            env->transport);
  }
  if (env->algo != NULL) {
    int n = s->nranks > 1 ? s->nranks : s->local > 1 ? s->local : 2;
    const gen_desc *g = NULL;
    if (select_algo(SCHED_ALLREDUCE, n, 8, SELECT_TP_SHM, env->algo, &g) !=
        BRAID_SUCCESS) {
      bad++;
      doc_add(r, "env", DOC_WARN,
              "fix the filter (docs/SCHEDULES.md), or unset BRAID_ALGO",
              "BRAID_ALGO=%s: %s", env->algo, err_msg());
    }
  }
  const char *files[][2] = {{"BRAID_TOPO_FILE", env->topo_file},
                            {"BRAID_SCHEDULE_FILE", env->schedule_file}};
  for (size_t i = 0; i < 2; i++)
    if (files[i][1] != NULL && access(files[i][1], R_OK) != 0) {
      bad++;
      char fix[160];
      snprintf(fix, sizeof fix, "point %s at a readable file, or unset it",
               files[i][0]);
      doc_add(r, "env", DOC_ERROR, fix,
              "%s=%s cannot be read (%s): communicator creation fails",
              files[i][0], files[i][1], strerror(errno));
    }
  if (bad == 0)
    doc_add(r, "env", DOC_OK, NULL,
            "%d BRAID_* variables set, all known to braid and accepted", nset);
  free(e);
}

/* ---- launch: the launcher's variables ------------------------------------ */

/* The variables braid_comm_init_env reads, by its own rules
 * (launch_check): a value it refuses stops the job before it forms. */
static void check_launch(doc_report *r) {
  launch_info li;
  char how[PATH_MAX + 64];
  if (launch_check(&li, how, sizeof how) != BRAID_SUCCESS) {
    char err[512];
    snprintf(err, sizeof err, "%s", err_msg());
    const char *fix =
        strstr(err, "more than one host") != NULL
            ? "set MASTER_ADDR and MASTER_PORT (or BRAID_COMM_ID=host:port) "
              "to a free port on rank 0's host, alike on every rank"
        : strstr(err, "BRAID_UNIQUE_ID") != NULL
            ? "give every rank the text of the id braidrun or "
              "braid_unique_id_to_string made, or unset BRAID_UNIQUE_ID"
        : strstr(err, "BRAID_SECRET") != NULL
            ? "set BRAID_SECRET to 32 hexadecimal digits, alike on every "
              "rank, or unset it"
            : "give every rank its launcher's rank and size (plain decimal, "
              "the rank below the size) and, for an address, MASTER_ADDR "
              "with MASTER_PORT in 1..65535 or BRAID_COMM_ID=host:port "
              "(docs/LAUNCH.md, \"The rules, exactly\")";
    doc_add(r, "launch", DOC_ERROR, fix, "braid_comm_init_env would fail: %s",
            err);
    return;
  }
  if (li.source == NULL)
    doc_add(r, "launch", DOC_OK, NULL,
            "no launcher's rank or size variable set: a run of its own");
  else
    doc_add(r, "launch", DOC_OK, NULL,
            "rank %d of %d (%s); the ranks would meet through %s", li.rank,
            li.size, li.source, how);
}

/* ---- running the checks -------------------------------------------------- */

braid_result doc_run(const doc_opts *o, doc_report *r) {
  shape s;
  job_shape(o, &s);
  check_env(&s, r);
  if (!o->cheap) /* the init error itself names a bad launcher variable */
    check_launch(r);
  check_shm(&s, r);
  check_cma(o, &s, r);
  doc_net(o, s.nranks, s.local, r);
  /* before anything that may initialise CUDA in this process (libfabric's
   * probe can): its IPC probe forks a child that uses CUDA */
  doc_gpu(o, s.local, r);
  /* the transports' probes, once (libfabric's can take a second) */
  doc_probe p;
  memset(&p, 0, sizeof p);
  tp_settings set;
  cfg_tp_settings(&set);
  p.ib = ib_probe_device(&set, p.dev, sizeof p.dev);
  p.ofi = ofi_probe_fast(&set, p.prov, sizeof p.prov);
  check_limits(&s, &p, r);
  doc_rdma(o, &p, r);
  check_cores(&s, r);
  return r->oom ? BRAID_ERR_NOMEM : BRAID_SUCCESS;
}

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init_quiet;
static char g_init_err[512];

void doc_last_init_error(char *buf, size_t len) {
  pthread_mutex_lock(&g_init_lock);
  snprintf(buf, len, "%s", g_init_err);
  pthread_mutex_unlock(&g_init_lock);
}

void doc_init_quiet(int quiet) {
  pthread_mutex_lock(&g_init_lock);
  g_init_quiet = quiet;
  pthread_mutex_unlock(&g_init_lock);
}

void doc_init_failed(int rank, int nranks, const struct tp_bootstrap *b,
                     const char *err) {
  char why[sizeof g_init_err]; /* err may be the thread's own message */
  snprintf(why, sizeof why, "%s", err ? err : "");
  pthread_mutex_lock(&g_init_lock);
  snprintf(g_init_err, sizeof g_init_err, "%s", why);
  int quiet = g_init_quiet;
  pthread_mutex_unlock(&g_init_lock);
  if (quiet)
    return;
  int local = 0;
  for (int p = 0; b != NULL && rank >= 0 && p < nranks; p++)
    local += boot_same_host(b, rank, p) != 0;
  doc_opts o = {local, nranks, 1};
  doc_report r = {0};
  doc_run(&o, &r);
  int shown = 0;
  for (int i = 0; i < r.n; i++) {
    if (r.f[i].verdict == DOC_OK)
      continue;
    if (shown++ == 0 && rank >= 0)
      WARN(LOG_INIT,
           "rank %d: the communicator did not form; braid-doctor's checks "
           "found (docs/DOCTOR.md):",
           rank);
    else if (shown == 1)
      WARN(LOG_INIT, "the communicator did not form (this rank's number is "
                     "not known); braid-doctor's checks found "
                     "(docs/DOCTOR.md):");
    WARN(LOG_INIT, "doctor %s %s: %s%s%s", r.f[i].check,
         doc_verdict_name(r.f[i].verdict), r.f[i].what,
         r.f[i].fix[0] ? "; fix: " : "", r.f[i].fix);
  }
  doc_report_free(&r);
  /* the checks' own messages do not replace the thread's last error:
   * braid_comm_last_error(NULL) gives why creation failed */
  if (why[0] != '\0')
    (void)ERR(BRAID_ERR_INVALID_ARG, "%s", why);
}
