/*
 * Rank, size and rendezvous from a launcher's environment.
 *
 * The launcher variables are read here and nowhere else (docs/ENV.md,
 * docs/LAUNCH.md). Rank and size come from the first launcher whose
 * variables are present, in this order: braidrun, torchrun, Open MPI, Slurm,
 * MPICH/PMI. The rendezvous, independently, from the first that applies:
 *  1. BRAID_UNIQUE_ID: the id itself, as text;
 *  2. BRAID_COMM_ID=host:port, or MASTER_ADDR + MASTER_PORT: rank 0 runs the
 *     root there; the secret is BRAID_SECRET, or else one derived from the
 *     address and the job id (weaker: anyone who can read those can derive
 *     it);
 *  3. a rendezvous file on one host, named after the job id: rank 0 creates
 *     an id and publishes it atomically (mode 0600) with its own pid and
 *     start time, the others poll for it and take it while that process
 *     runs (a file whose writer has exited is an earlier job's).
 */
#include "launch_env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "log.h"

#define RDV_MAGIC "BRAIDRDV2\n\0\0\0\0\0\0"
#define RDV_MAGIC_LEN 16
#define DEFAULT_TIMEOUT_MS 300000

static pthread_mutex_t rdv_lock = PTHREAD_MUTEX_INITIALIZER;
static char rdv_path[PATH_MAX]; /* the file this process created, if any */

/* A variable's value; NULL when unset. */
static const char *env(const char *name) { return getenv(name); }

/* Strict decimal: digits only (an optional leading '-' is parsed so that a
 * negative value is reported as out of range rather than as garbage). */
static braid_result parse_int(const char *name, const char *val, long lo,
                              long hi, int *out) {
  const char *p = val;
  if (*p == '-')
    p++;
  int ok = *p != '\0';
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9')
      ok = 0;
  if (!ok)
    return ERR(BRAID_ERR_INVALID_ARG, "%s='%s' is not a decimal integer", name,
               val);
  errno = 0;
  long v = strtol(val, NULL, 10);
  if (errno == ERANGE || v < lo || v > hi)
    return ERR(BRAID_ERR_INVALID_ARG, "%s='%s' is out of range (%ld..%ld)",
               name, val, lo, hi);
  *out = (int)v;
  return BRAID_SUCCESS;
}

/* ---- rank and size ------------------------------------------------------- */

typedef struct launcher {
  const char *source;
  const char *rank, *size, *local_rank, *local_size;
} launcher;

static const launcher launchers[] = {
    {"braidrun", "BRAID_RANK", "BRAID_SIZE", "BRAID_LOCAL_RANK",
     "BRAID_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

/* braid's own variables read here besides braidrun's rank and size */
enum { V_UNIQUE_ID, V_COMM_ID, V_SECRET, V_RENDEZVOUS_DIR };
static const char *const own_vars[] = {"BRAID_UNIQUE_ID", "BRAID_COMM_ID",
                                       "BRAID_SECRET", "BRAID_RENDEZVOUS_DIR"};

const char *launch_env_var(size_t i) {
  const launcher *b = &launchers[0]; /* braidrun */
  const char *rs[] = {b->rank, b->size, b->local_rank, b->local_size};
  if (i < 4)
    return rs[i];
  i -= 4;
  return i < sizeof own_vars / sizeof *own_vars ? own_vars[i] : NULL;
}

static braid_result detect_rank(launch_info *li) {
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
    const launcher *l = &launchers[i];
    const char *r = env(l->rank), *s = env(l->size);
    if (r == NULL && s == NULL)
      continue;
    if (r == NULL || s == NULL)
      return ERR(BRAID_ERR_INVALID_ARG, "%s is set but %s is not (launcher %s)",
                 r ? l->rank : l->size, r ? l->size : l->rank, l->source);
    CHECKR(parse_int(l->size, s, 1, INT_MAX, &li->size));
    CHECKR(parse_int(l->rank, r, 0, INT_MAX, &li->rank));
    if (li->rank >= li->size)
      return ERR(BRAID_ERR_INVALID_ARG, "%s=%d is not below %s=%d", l->rank,
                 li->rank, l->size, li->size);
    const char *lr = l->local_rank ? env(l->local_rank) : NULL;
    const char *ls = l->local_size ? env(l->local_size) : NULL;
    if (lr != NULL)
      CHECKR(parse_int(l->local_rank, lr, 0, li->size - 1, &li->local_rank));
    if (ls != NULL)
      CHECKR(parse_int(l->local_size, ls, 1, li->size, &li->local_size));
    if (lr != NULL && ls != NULL && li->local_rank >= li->local_size)
      return ERR(BRAID_ERR_INVALID_ARG, "%s=%d is not below %s=%d",
                 l->local_rank, li->local_rank, l->local_size, li->local_size);
    li->source = l->source;
    return BRAID_SUCCESS;
  }
  /* the id says whom to meet, not who this rank is */
  if (env(own_vars[V_UNIQUE_ID]) != NULL)
    return ERR(BRAID_ERR_INVALID_ARG,
               "no launcher found: BRAID_UNIQUE_ID is set, but no rank and "
               "size (set BRAID_RANK and BRAID_SIZE with it, or RANK and "
               "WORLD_SIZE)");
  return ERR(
      BRAID_ERR_INVALID_ARG,
      "no launcher found (set BRAID_RANK/BRAID_SIZE/BRAID_UNIQUE_ID, or "
      "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or run under mpirun/srun)");
}

/* ---- hashing (not cryptographic) ----------------------------------------- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t hash_str(uint64_t h, const char *s) {
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return mix64(h ^ 0xff); /* separator, so "ab"+"c" != "a"+"bc" */
}

/* The job id variables every rank of one job shares. */
static const char *const job_vars[] = {"TORCHELASTIC_RUN_ID",
                                       "OMPI_MCA_ess_base_jobid",
                                       "PMIX_NAMESPACE",
                                       "OMPI_MCA_orte_hnp_uri",
                                       "SLURM_JOB_ID",
                                       "SLURM_STEP_ID",
                                       "PMI_PORT"};

static uint64_t hash_job(uint64_t h) {
  for (size_t i = 0; i < sizeof job_vars / sizeof *job_vars; i++) {
    const char *v = env(job_vars[i]);
    h = hash_str(h, job_vars[i]);
    h = hash_str(h, v ? v : "");
  }
  return h;
}

/* ---- BRAID_COMM_ID / MASTER_ADDR ----------------------------------------- */

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* BRAID_SECRET's value s into out. */
static braid_result parse_secret(const char *s, uint8_t out[16]) {
  size_t n = strlen(s); /* the value itself is never printed */
  int ok = n == 32;
  for (size_t i = 0; ok && i < 16; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      ok = 0;
    else
      out[i] = (uint8_t)(hi << 4 | lo);
  }
  if (!ok)
    return ERR(BRAID_ERR_INVALID_ARG,
               "BRAID_SECRET must be 32 hexadecimal digits (got %zu "
               "characters%s)",
               n, n == 32 ? ", not all hexadecimal" : "");
  return BRAID_SUCCESS;
}

static braid_result get_secret(const char *host, int port, uint8_t out[16]) {
  const char *s = env(own_vars[V_SECRET]);
  if (s != NULL)
    return parse_secret(s, out);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  uint64_t h = hash_str(0xcbf29ce484222325ull, "braid-secret-1");
  h = hash_job(hash_str(hash_str(h, host), ps));
  uint64_t h2 = mix64(h ^ 0x5851f42d4c957f2dull);
  for (int i = 0; i < 8; i++) {
    out[i] = (uint8_t)(h >> (8 * i));
    out[8 + i] = (uint8_t)(h2 >> (8 * i));
  }
  INFO(LOG_ENV, "rendezvous secret derived from the address and job id; set "
                "BRAID_SECRET on shared machines");
  return BRAID_SUCCESS;
}

/* "host:port" or "[v6addr]:port". */
static braid_result parse_comm_id(const char *v, char *host, size_t hostlen,
                                  int *port) {
  const char *colon = strrchr(v, ':');
  const char *h = v;
  size_t hl = colon ? (size_t)(colon - v) : 0;
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  if (colon == NULL || hl == 0 || hl >= hostlen)
    return ERR(BRAID_ERR_INVALID_ARG, "BRAID_COMM_ID='%s' is not host:port", v);
  memcpy(host, h, hl);
  host[hl] = '\0';
  const char *ps = colon + 1;
  int ok = *ps != '\0';
  for (const char *q = ps; *q; q++)
    if (*q < '0' || *q > '9')
      ok = 0;
  long p = ok && strlen(ps) <= 5 ? strtol(ps, NULL, 10) : -1;
  if (p < 1 || p > 65535)
    return ERR(BRAID_ERR_INVALID_ARG,
               "BRAID_COMM_ID='%s': port '%s' is not in 1..65535", v, ps);
  *port = (int)p;
  return BRAID_SUCCESS;
}

/* The rendezvous address from BRAID_COMM_ID, else MASTER_ADDR and
 * MASTER_PORT: *found = 1 when one is given (host, port). */
static braid_result parse_address(char *host, size_t hostlen, int *port,
                                  int *found) {
  const char *cid = env(own_vars[V_COMM_ID]);
  const char *ma = env("MASTER_ADDR"), *mp = env("MASTER_PORT");
  *found = 0;
  if (cid != NULL) {
    CHECKR(parse_comm_id(cid, host, hostlen, port));
  } else if (ma != NULL || mp != NULL) {
    if (ma == NULL || mp == NULL)
      return ERR(BRAID_ERR_INVALID_ARG, "%s is set but %s is not",
                 ma ? "MASTER_ADDR" : "MASTER_PORT",
                 ma ? "MASTER_PORT" : "MASTER_ADDR");
    if (*ma == '\0' || strlen(ma) >= hostlen)
      return ERR(BRAID_ERR_INVALID_ARG,
                 "MASTER_ADDR='%s' is not a host name or address", ma);
    snprintf(host, hostlen, "%s", ma);
    CHECKR(parse_int("MASTER_PORT", mp, 1, 65535, port));
  } else {
    return BRAID_SUCCESS;
  }
  *found = 1;
  return BRAID_SUCCESS;
}

/* *found = 1 when an address was given and *id is built from it. */
static braid_result rdv_address(const launch_info *li, braid_unique_id *id,
                                int *found) {
  char host[256];
  int port = 0, given = 0;
  const char *cid = env(own_vars[V_COMM_ID]);
  *found = 0;
  CHECKR(parse_address(host, sizeof host, &port, &given));
  if (!given)
    return BRAID_SUCCESS;
  uint8_t secret[16];
  CHECKR(get_secret(host, port, secret));
  braid_result r = boot_unique_id_at(host, port, secret, li->rank == 0, id);
  if (r != BRAID_SUCCESS) {
    /* torchrun's agent may hold MASTER_PORT for its own store */
    char e[256];
    snprintf(e, sizeof e, "%s", err_msg());
    return ERR(r, "rendezvous at %s:%d (from %s): %s%s", host, port,
               cid ? "BRAID_COMM_ID" : "MASTER_ADDR/MASTER_PORT", e,
               cid || li->rank != 0
                   ? ""
                   : " (for another port: BRAID_COMM_ID=host:port)");
  }
  comm_id_reusable(id); /* rank 0 runs its root anew each time */
  *found = 1;
  return BRAID_SUCCESS;
}

/* ---- rendezvous file ----------------------------------------------------- */

/* The file: RDV_MAGIC, then who wrote it (rdv_writer, as below), then the
 * id. A reader takes the id only while its writer, rank 0, still runs: rank
 * 0 removes the file once its braid_comm_init_env returns, so a file whose
 * writer has exited was left by an earlier job (rank 0 killed, or an older
 * braid that did not clean up), however recent it is, and a file whose
 * writer runs belongs to the job now starting, however late a rank joins. */
typedef struct rdv_writer {
  long long pid;
  unsigned long long
      start; /* its start, in clock ticks since boot; 0 unknown */
  unsigned long long pidns; /* inode of its pid namespace; 0 unknown */
  char boot[40];            /* the kernel's boot id; "" unknown */
} rdv_writer;

#define RDV_WRITER_LEN 64 /* 8 pid, 8 start, 8 pidns, 40 boot */
#define RDV_FILE_LEN (RDV_MAGIC_LEN + RDV_WRITER_LEN + BRAID_UNIQUE_ID_BYTES)

/* State (R, S, Z, ...) and start (clock ticks since boot) of a process from
 * /proc/<pid>/stat ("self" for this one). 0: read; -1: no such process or
 * no /proc. */
static int proc_stat(const char *pid, char *state, unsigned long long *start) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  /* after ')': state is field 3; starttime is field 22 */
  if (p == NULL || sscanf(p + 2,
                          "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
                          "%*u %*d %*d %*d %*d %*d %*d %llu",
                          state, start) != 2)
    return -1;
  return 0;
}

/* Wall-clock start time of this process, or 0 when unknown. */
static time_t proc_start_time(void) {
  FILE *f = fopen("/proc/stat", "re");
  if (f == NULL)
    return 0;
  char line[256];
  long long btime = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %lld", &btime) == 1)
      break;
  fclose(f);
  char state;
  unsigned long long start = 0;
  long hz = sysconf(_SC_CLK_TCK);
  if (btime == 0 || hz <= 0 || proc_stat("self", &state, &start) != 0)
    return 0;
  return (time_t)(btime + (long long)(start / (unsigned long long)hz));
}

/* This process as a writer of the file. */
static void writer_self(rdv_writer *w) {
  memset(w, 0, sizeof *w);
  w->pid = (long long)getpid();
  char state;
  if (proc_stat("self", &state, &w->start) != 0)
    w->start = 0;
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) == 0)
    w->pidns = (unsigned long long)st.st_ino;
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f != NULL) {
    if (fgets(w->boot, sizeof w->boot, f) == NULL)
      w->boot[0] = '\0';
    w->boot[strcspn(w->boot, "\n")] = '\0';
    fclose(f);
  }
}

static void put_u64(unsigned char *p, unsigned long long v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static unsigned long long get_u64(const unsigned char *p) {
  unsigned long long v = 0;
  for (int i = 0; i < 8; i++)
    v |= (unsigned long long)p[i] << (8 * i);
  return v;
}

static void writer_pack(const rdv_writer *w, unsigned char *p) {
  memset(p, 0, RDV_WRITER_LEN);
  put_u64(p, (unsigned long long)w->pid);
  put_u64(p + 8, w->start);
  put_u64(p + 16, w->pidns);
  memcpy(p + 24, w->boot, strnlen(w->boot, sizeof w->boot - 1));
}

static void writer_unpack(const unsigned char *p, rdv_writer *w) {
  memset(w, 0, sizeof *w);
  w->pid = (long long)get_u64(p);
  w->start = get_u64(p + 8);
  w->pidns = get_u64(p + 16);
  memcpy(w->boot, p + 24, sizeof w->boot - 1);
}

/* Whether the file's writer w still runs, seen from reader me: 1 yes, 0 no
 * (why says so), -1 cannot tell (another pid namespace, no /proc). */
static int writer_alive(const rdv_writer *w, const rdv_writer *me, char *why,
                        size_t len) {
  if (w->boot[0] && me->boot[0] && strcmp(w->boot, me->boot) != 0) {
    snprintf(why, len, "written by pid %lld before this machine last booted",
             w->pid);
    return 0;
  }
  if (w->pidns == 0 || w->start == 0 || me->pidns == 0 ||
      w->pidns != me->pidns || w->pid <= 0)
    return -1;
  char pid[24], state = '?';
  unsigned long long start = 0;
  snprintf(pid, sizeof pid, "%lld", w->pid);
  if (proc_stat(pid, &state, &start) != 0 || state == 'Z' || state == 'X') {
    snprintf(why, len, "its writer, pid %lld, has exited", w->pid);
    return 0;
  }
  if (start != w->start) {
    snprintf(why, len,
             "its writer, pid %lld, has exited (the pid now names another "
             "process)",
             w->pid);
    return 0;
  }
  return 1;
}

/* The file's path, and in key (keylen bytes) what names it: the job id
 * variable or the parent process, then the launcher and the size. */
static braid_result rdv_file_path(const launch_info *li, char *path, size_t len,
                                  char *key, size_t keylen) {
  const char *dir = env(own_vars[V_RENDEZVOUS_DIR]);
  if (dir == NULL || *dir == '\0')
    dir = "/tmp";
  /* The job key: the first job id variable present, else the parent
   * process (the launcher daemon that forked every local rank). */
  key[0] = '\0';
  const char *pairs[][2] = {{"OMPI_MCA_ess_base_jobid", NULL},
                            {"PMIX_NAMESPACE", NULL},
                            {"OMPI_MCA_orte_hnp_uri", NULL},
                            {"SLURM_JOB_ID", "SLURM_STEP_ID"},
                            {"PMI_PORT", NULL}};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs && !key[0]; i++) {
    const char *a = env(pairs[i][0]);
    const char *b = pairs[i][1] ? env(pairs[i][1]) : NULL;
    if (a != NULL && *a)
      snprintf(key, keylen, "%s=%s.%s", pairs[i][0], a, b ? b : "");
  }
  if (!key[0])
    snprintf(key, keylen, "parent pid %ld", (long)getppid());
  uint64_t h = hash_str(0xcbf29ce484222325ull, key);
  h = hash_str(h, li->source);
  char ss[16];
  snprintf(ss, sizeof ss, "%d", li->size);
  h = hash_str(h, ss);
  size_t kl = strlen(key);
  snprintf(key + kl, keylen - kl, ", %s, %d ranks", li->source, li->size);
  int n = snprintf(path, len, "%s/braid-rdv-%u-%016llx", dir,
                   (unsigned)geteuid(), (unsigned long long)h);
  if (n < 0 || (size_t)n >= len)
    return ERR(BRAID_ERR_INVALID_ARG, "BRAID_RENDEZVOUS_DIR='%s' is too long",
               dir);
  TRACE(LOG_ENV, "rendezvous file %s (key %s)", path, key);
  return BRAID_SUCCESS;
}

/* Whether path holds a rendezvous file whose writer, another process than
 * me, runs for certain (then *w is it). */
static int rdv_live_writer(const char *path, const rdv_writer *me,
                           rdv_writer *w) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return 0;
  unsigned char buf[RDV_FILE_LEN];
  int ok = read(fd, buf, sizeof buf) == (ssize_t)sizeof buf &&
           memcmp(buf, RDV_MAGIC, RDV_MAGIC_LEN) == 0;
  close(fd);
  if (!ok)
    return 0;
  writer_unpack(buf + RDV_MAGIC_LEN, w);
  char why[256];
  return w->pid != me->pid && writer_alive(w, me, why, sizeof why) == 1;
}

static braid_result rdv_publish(const char *path, const char *key,
                                const braid_unique_id *id) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  unlink(tmp);
  int fd =
      open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return ERR(BRAID_ERR_SYSTEM, "cannot create rendezvous file %s: %s", tmp,
               strerror(errno));
  unsigned char buf[RDV_FILE_LEN];
  rdv_writer me;
  writer_self(&me);
  memcpy(buf, RDV_MAGIC, RDV_MAGIC_LEN);
  writer_pack(&me, buf + RDV_MAGIC_LEN);
  memcpy(buf + RDV_MAGIC_LEN + RDV_WRITER_LEN, id->internal,
         sizeof id->internal);
  ssize_t w = write(fd, buf, sizeof buf);
  int e = w == (ssize_t)sizeof buf ? 0 : (w < 0 ? errno : EIO);
  if (e == 0 && fsync(fd) != 0)
    e = errno;
  close(fd);
  /* Into place only where no file is (link fails on one), so that a file
   * whose writer still runs, another job's rank 0 in its init, is seen and
   * left alone; where the file system has no links, a check, then rename. */
  int placed = 0;
  if (e == 0 && link(tmp, path) == 0)
    placed = 1;
  else if (e == 0 && errno != EEXIST && errno != EPERM && errno != ENOTSUP)
    e = errno; /* (EOPNOTSUPP is ENOTSUP on Linux) */
  if (e == 0 && !placed) {
    rdv_writer other;
    if (rdv_live_writer(path, &me, &other)) {
      unlink(tmp);
      return ERR(BRAID_ERR_INVALID_ARG,
                 "rendezvous file %s is another job's: its rank 0, pid %lld, "
                 "is still starting. Two jobs with the same key (%s) meet "
                 "through one file, jobs of as many ranks started by one "
                 "process without a job id; give each its own "
                 "BRAID_RENDEZVOUS_DIR, or MASTER_ADDR/MASTER_PORT",
                 path, other.pid, key);
    }
    if (rename(tmp, path) != 0)
      e = errno;
  }
  if (placed)
    unlink(tmp);
  if (e != 0) {
    unlink(tmp);
    return ERR(BRAID_ERR_SYSTEM, "cannot write rendezvous file %s: %s", path,
               strerror(e));
  }
  pthread_mutex_lock(&rdv_lock);
  snprintf(rdv_path, sizeof rdv_path, "%s", path);
  pthread_mutex_unlock(&rdv_lock);
  return BRAID_SUCCESS;
}

/* *got = 1: read the id of a file whose writer runs; 0: no file (yet), or
 * one left by an earlier job, which rank 0 is yet to replace (stale says
 * why, "" when there is no file). A failure: the file is refused.
 * not_before: when the writer's liveness cannot be told (another pid
 * namespace, no /proc), a file older than this is taken as stale. */
static braid_result rdv_try_read(const char *path, const rdv_writer *me,
                                 time_t not_before, braid_unique_id *id,
                                 int *got, char *stale, size_t stale_len) {
  *got = 0;
  stale[0] = '\0';
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return BRAID_SUCCESS;
    return ERR(BRAID_ERR_SYSTEM, "cannot open rendezvous file %s: %s", path,
               strerror(errno));
  }
  struct stat st;
  unsigned char buf[RDV_FILE_LEN];
  braid_result r = BRAID_SUCCESS;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    r = ERR(BRAID_ERR_SYSTEM, "rendezvous file %s is not a regular file", path);
  } else if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    r = ERR(BRAID_ERR_SYSTEM,
            "rendezvous file %s belongs to uid %u with mode %03o; refusing it "
            "(expected uid %u, mode 0600)",
            path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
            (unsigned)geteuid());
  } else if (st.st_size != (off_t)sizeof buf ||
             read(fd, buf, sizeof buf) != (ssize_t)sizeof buf ||
             memcmp(buf, RDV_MAGIC, RDV_MAGIC_LEN) != 0) {
    /* renamed into place whole, so not half written: another format */
    snprintf(stale, stale_len,
             "not a rendezvous file of this braid version (%lld bytes)",
             (long long)st.st_size);
  } else {
    rdv_writer w;
    writer_unpack(buf + RDV_MAGIC_LEN, &w);
    int alive = writer_alive(&w, me, stale, stale_len);
    if (alive < 0 && not_before != 0 && st.st_mtime < not_before) {
      snprintf(stale, stale_len,
               "older than this process, and its writer, pid %lld, is not "
               "visible from here (another pid namespace)",
               w.pid);
      alive = 0;
    }
    if (alive != 0) {
      memcpy(id->internal, buf + RDV_MAGIC_LEN + RDV_WRITER_LEN,
             sizeof id->internal);
      *got = 1;
    }
  }
  close(fd);
  return r;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether a rendezvous file can serve the job: its ranks on one host. */
static braid_result rdv_file_fits(const launch_info *li) {
  int nodes = 0;
  const char *nn = env("SLURM_STEP_NUM_NODES");
  if (nn == NULL)
    nn = env("SLURM_NNODES");
  if (nn != NULL &&
      parse_int("SLURM_NNODES", nn, 1, INT_MAX, &nodes) != BRAID_SUCCESS)
    nodes = 0;
  if ((li->local_size > 0 && li->local_size != li->size) || nodes > 1)
    return ERR(BRAID_ERR_INVALID_ARG,
               "the %d ranks (%s) span more than one host: set MASTER_ADDR "
               "and MASTER_PORT (or BRAID_COMM_ID=host:port) to a free port "
               "on rank 0's host",
               li->size, li->source);
  return BRAID_SUCCESS;
}

static braid_result rdv_file(const launch_info *li, braid_unique_id *id,
                             int timeout_ms) {
  CHECKR(rdv_file_fits(li));
  char path[PATH_MAX], key[600];
  CHECKR(rdv_file_path(li, path, sizeof path, key, sizeof key));
  if (li->rank == 0) {
    braid_result r = boot_unique_id(id);
    if (r != BRAID_SUCCESS)
      return ERR_WRAP(r, "rendezvous");
    CHECKR(rdv_publish(path, key, id));
    INFO(LOG_ENV, "published the unique id in %s", path);
    return BRAID_SUCCESS;
  }
  time_t start = proc_start_time();
  time_t not_before = start ? start - 2 : 0;
  rdv_writer me;
  writer_self(&me);
  char stale[256] = "";
  long long deadline = now_ms() + timeout_ms;
  long sleep_us = 1000;
  for (;;) {
    int got = 0;
    char why[256];
    CHECKR(rdv_try_read(path, &me, not_before, id, &got, why, sizeof why));
    if (got) {
      INFO(LOG_ENV, "read the unique id from %s", path);
      return BRAID_SUCCESS;
    }
    if (why[0] && strcmp(why, stale) != 0)
      INFO(LOG_ENV,
           "rendezvous file %s is left by an earlier job (%s); waiting for "
           "rank 0 to replace it",
           path, why);
    snprintf(stale, sizeof stale, "%s", why);
    if (now_ms() >= deadline) {
      if (stale[0])
        return ERR(BRAID_ERR_TIMEOUT,
                   "rank %d waited %d ms for rank 0's rendezvous file %s; the "
                   "file there is stale, ignored as left by an earlier job "
                   "(%s), and rank 0 of this job did not replace it (is rank "
                   "0 running, on this host, with the same "
                   "BRAID_RENDEZVOUS_DIR? else set MASTER_ADDR/MASTER_PORT)",
                   li->rank, timeout_ms, path, stale);
      return ERR(BRAID_ERR_TIMEOUT,
                 "rank %d waited %d ms for rank 0's rendezvous file %s (needs "
                 "one host, one BRAID_RENDEZVOUS_DIR; else set MASTER_ADDR/"
                 "MASTER_PORT)",
                 li->rank, timeout_ms, path);
    }
    usleep((useconds_t)sleep_us);
    if (sleep_us < 20000)
      sleep_us *= 2;
  }
}

/* ---- entry points -------------------------------------------------------- */

braid_result launch_detect(launch_info *li, braid_unique_id *id,
                           int timeout_ms) {
  if (li == NULL || id == NULL)
    return ERR(BRAID_ERR_INVALID_ARG, "launch_detect: %s is NULL",
               li ? "id" : "li");
  memset(li, 0, sizeof *li);
  li->local_rank = li->local_size = -1;
  memset(id, 0, sizeof *id);
  if (timeout_ms <= 0)
    timeout_ms = DEFAULT_TIMEOUT_MS;
  CHECKR(detect_rank(li));
  INFO(LOG_ENV, "launcher %s: rank %d of %d (local %d of %d)", li->source,
       li->rank, li->size, li->local_rank, li->local_size);

  const char *uid = env(own_vars[V_UNIQUE_ID]);
  if (uid != NULL) {
    braid_result r = boot_id_from_text(uid, id);
    if (r != BRAID_SUCCESS)
      return ERR_WRAP(r, "BRAID_UNIQUE_ID is not the text of "
                         "braid_unique_id_to_string");
    return BRAID_SUCCESS;
  }
  int found = 0;
  CHECKR(rdv_address(li, id, &found));
  if (found)
    return BRAID_SUCCESS;
  if (li->size == 1) /* nobody to meet: a private root */
    return boot_unique_id(id);
  return rdv_file(li, id, timeout_ms);
}

braid_result launch_rank(launch_info *li) {
  memset(li, 0, sizeof *li);
  li->local_rank = li->local_size = -1;
  return detect_rank(li);
}

const char *launch_name(void) {
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++)
    if (env(launchers[i].rank) != NULL || env(launchers[i].size) != NULL)
      return launchers[i].source;
  return env(own_vars[V_UNIQUE_ID]) != NULL ? "braid" : NULL;
}

braid_result launch_check(launch_info *li, char *how, size_t len) {
  memset(li, 0, sizeof *li);
  li->local_rank = li->local_size = -1;
  snprintf(how, len, "%s", "");
  if (launch_name() == NULL)
    return BRAID_SUCCESS; /* no launcher: li->source stays NULL */
  CHECKR(detect_rank(li));
  const char *uid = env(own_vars[V_UNIQUE_ID]);
  if (uid != NULL) {
    braid_unique_id id;
    braid_result r = boot_id_from_text(uid, &id);
    if (r != BRAID_SUCCESS)
      return ERR_WRAP(r, "BRAID_UNIQUE_ID is not the text of "
                         "braid_unique_id_to_string");
    snprintf(how, len, "the unique id in BRAID_UNIQUE_ID");
    return BRAID_SUCCESS;
  }
  char host[256];
  int port = 0, given = 0;
  CHECKR(parse_address(host, sizeof host, &port, &given));
  if (given) {
    const char *s = env(own_vars[V_SECRET]);
    uint8_t secret[16];
    if (s != NULL)
      CHECKR(parse_secret(s, secret));
    snprintf(how, len, "the root at %s:%d (%s)", host, port,
             env(own_vars[V_COMM_ID]) ? "BRAID_COMM_ID"
                                      : "MASTER_ADDR/MASTER_PORT");
    return BRAID_SUCCESS;
  }
  if (li->size == 1) {
    snprintf(how, len, "none needed (one rank)");
    return BRAID_SUCCESS;
  }
  CHECKR(rdv_file_fits(li));
  char path[PATH_MAX], key[600];
  CHECKR(rdv_file_path(li, path, sizeof path, key, sizeof key));
  snprintf(how, len, "a rendezvous file on this host (%s)", path);
  return BRAID_SUCCESS;
}

void launch_cleanup(void) {
  pthread_mutex_lock(&rdv_lock);
  if (rdv_path[0] != '\0') {
    if (unlink(rdv_path) != 0 && errno != ENOENT)
      WARN(LOG_ENV, "cannot remove rendezvous file %s: %s", rdv_path,
           strerror(errno));
    rdv_path[0] = '\0';
  }
  pthread_mutex_unlock(&rdv_lock);
}
