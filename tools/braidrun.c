/*
 * braidrun: launches the ranks of a braid job on this machine (optionally
 * each inside a network namespace, one namespace per "host"), gives each its
 * BRAID_* variables, prefixes their output with the rank, and tears the job
 * down as soon as one rank fails.
 *
 * One event loop does everything: it reaps ranks, keeps the deadlines
 * (--timeout, the grace period), takes signals (through a pipe), reads the
 * ranks' output and writes it out. No step of it may wait long: a rank's
 * output is read one read() per turn, and braidrun's own stdout and stderr
 * are written only as far as they take data without waiting.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "braid.h"

extern char **environ;

#define LINE_MAX_BYTES 65536
#define DRAIN_MS 1000          /* output still read after the last rank exits */
#define OUT_HELD_MAX (1 << 20) /* output held for a slow stdout or stderr */
#define FILE_CHUNK (1 << 20)   /* the most given to a regular file at once */
#define GROUP_POLL_MS 20       /* how often emptying process groups are seen */
#define KILL_WAIT_MS 1000      /* how long SIGKILLed groups are waited for */

static const char usage[] =
    "usage: braidrun -n N [options] [--] program [args...]\n"
    "\n"
    "Runs N ranks of a braid program on this machine. Each rank gets\n"
    "BRAID_RANK, BRAID_SIZE, BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE and\n"
    "BRAID_UNIQUE_ID (a unique id created by braidrun, whose rendezvous\n"
    "service runs inside braidrun), so braid_comm_init_env() needs nothing\n"
    "else. Every line a rank writes to stdout or stderr is copied to\n"
    "braidrun's stdout or stderr with a \"[rank] \" prefix.\n"
    "\n"
    "options:\n"
    "  -n, -np N            number of ranks (default: the slots of --hosts)\n"
    "  --hosts LIST         run ranks inside network namespaces: LIST is\n"
    "                       NAME[:SLOTS],... (SLOTS default 1); ranks fill "
    "the\n"
    "                       hosts in order, each rank runs under\n"
    "                       'ip netns exec NAME'; the name 'localhost' means\n"
    "                       no namespace. BRAID_LOCAL_RANK/SIZE count per "
    "host;\n"
    "                       a name given twice is one host (slots add up).\n"
    "  --host-list LIST     the same as --hosts\n"
    "  --hostfile FILE      hosts from a file: one 'NAME [slots=N]' or\n"
    "                       'NAME:N' per line, '#' starts a comment\n"
    "  --timeout S          stop the whole job after S seconds (exit 124)\n"
    "  --grace S            seconds between SIGTERM and SIGKILL when tearing\n"
    "                       the job down (default 3)\n"
    "  -x VAR[=VALUE]       export VAR (with VALUE, or braidrun's own value)\n"
    "                       to every rank; may be repeated, the last -x of a\n"
    "                       name wins; not for the five BRAID_ variables "
    "above\n"
    "  -h, --help           this text\n"
    "\n"
    "When a rank exits with a non-zero status or dies from a signal, braidrun\n"
    "names it, sends SIGTERM to every other rank, SIGKILL after the grace\n"
    "period, and exits with that rank's status (128+N for signal N). Ranks\n"
    "that fail together: one killed by a signal is blamed before one that\n"
    "exited, and the summary names them all. Each rank's process group is\n"
    "signalled, also after the rank exited, so what it started stops too.\n"
    "SIGINT, SIGTERM and SIGHUP sent to braidrun are forwarded to every rank\n"
    "(a second one kills them at once); braidrun then exits with 128+signal.\n"
    "Ranks read stdin from /dev/null. Lines longer than 64 KiB are split.\n"
    "\n"
    "The namespaces must exist ('ip netns add NAME', with links between them)\n"
    "and braidrun's rendezvous address (BRAID_SOCKET_IFNAME, else the first\n"
    "non-loopback interface) must be reachable from each of them.\n";

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- braidrun's own output ----------------------------------------------- */

/* Everything braidrun writes to its stdout or stderr (the ranks' lines and
 * its own messages) goes through a queue, which is written only as far as
 * the file takes it without waiting: a stdout that nobody reads must not
 * keep braidrun from its deadlines, signals and teardown. */
typedef struct outq {
  int fd;   /* 1 or 2 */
  int file; /* a regular file, which takes a write without waiting */
  int gone; /* a write failed (no reader): what comes is discarded */
  char *buf;
  size_t head, len, cap; /* pending: buf[head..len) */
} outq;

static outq outs[2] = {{.fd = 1}, {.fd = 2}};
static outq *out_of[3]; /* the queue of fd 1 and of fd 2 */
static int sigpipe_fd[2] = {-1, -1};

static size_t out_pending(const outq *q) { return q->len - q->head; }

/* Opens /dev/null on a closed fd 0, 1 or 2 (so that none of braidrun's pipes
 * takes that number), and gives stdout and stderr one queue when they are
 * the same file, which keeps their lines in order. */
static void init_outputs(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
      break;
  struct stat st[2];
  int ok[2];
  memset(st, 0, sizeof st);
  for (int i = 0; i < 2; i++) {
    ok[i] = fstat(outs[i].fd, &st[i]) == 0;
    outs[i].file = ok[i] && S_ISREG(st[i].st_mode);
    outs[i].gone = !ok[i];
  }
  out_of[1] = &outs[0];
  out_of[2] = ok[0] && ok[1] && st[0].st_dev == st[1].st_dev &&
                      st[0].st_ino == st[1].st_ino
                  ? &outs[0]
                  : &outs[1];
}

static void out_append(outq *q, const char *p, size_t n) {
  if (q->gone || n == 0)
    return;
  if (q->len + n > q->cap && q->head > 0) {
    memmove(q->buf, q->buf + q->head, q->len - q->head);
    q->len -= q->head;
    q->head = 0;
  }
  if (q->len + n > q->cap) {
    size_t cap = q->cap ? q->cap : 65536;
    while (cap < q->len + n)
      cap *= 2;
    char *b = realloc(q->buf, cap);
    if (b == NULL)
      return; /* out of memory: this output is lost */
    q->buf = b;
    q->cap = cap;
  }
  memcpy(q->buf + q->len, p, n);
  q->len += n;
}

/* Writes what q's file takes now. A pipe, terminal or socket gets a write
 * only when poll says it is writable, and then at most PIPE_BUF bytes, which
 * a writable pipe takes at once; a regular file takes everything. Each write
 * ends at a line's end where it can, so that lines stay whole. */
static void out_flush(outq *q) {
  while (!q->gone && out_pending(q) > 0) {
    if (!q->file) {
      struct pollfd p = {.fd = q->fd, .events = POLLOUT};
      if (poll(&p, 1, 0) <= 0)
        break;
    }
    size_t n = out_pending(q), lim = q->file ? FILE_CHUNK : PIPE_BUF;
    if (n > lim) {
      const char *nl = memrchr(q->buf + q->head, '\n', lim);
      n = nl ? (size_t)(nl - (q->buf + q->head)) + 1 : lim;
    }
    ssize_t w = write(q->fd, q->buf + q->head, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (w <= 0) {
      q->gone = 1; /* our own output is gone: drop it, keep managing the job */
      q->head = q->len = 0;
      break;
    }
    q->head += (size_t)w;
  }
  if (q->head == q->len)
    q->head = q->len = 0;
}

static void vnote(const char *fmt, va_list ap) {
  char msg[4096];
  size_t k = (size_t)snprintf(msg, sizeof msg, "braidrun: ");
  size_t room = sizeof msg - k - 1; /* one byte for the newline */
  /* the analyzer misreads va_start in static variadic functions */
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  int m = vsnprintf(msg + k, room, fmt, ap);
  size_t len = k + (m < 0 ? 0 : (size_t)m < room ? (size_t)m : room - 1);
  msg[len++] = '\n';
  out_append(out_of[2], msg, len);
  out_flush(out_of[2]);
}

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnote(fmt, ap);
  va_end(ap);
}

/* Waits until stdout and stderr have taken what is pending, serving the
 * signal pipe. Gives up at deadline (-1: none) or at a signal other than
 * SIGCHLD, whose number it then returns, and drops what is left, saying so
 * on stderr if stderr takes it. */
static int flush_outputs(long long deadline) {
  int sig = 0;
  for (;;) {
    struct pollfd p[3];
    int np = 0;
    for (int i = 0; i < 2; i++) {
      out_flush(&outs[i]);
      if (out_pending(&outs[i]) > 0)
        p[np++] = (struct pollfd){.fd = outs[i].fd, .events = POLLOUT};
    }
    long long now = now_ms();
    if (np == 0 || sig || (deadline >= 0 && now >= deadline))
      break;
    p[np++] = (struct pollfd){.fd = sigpipe_fd[0], .events = POLLIN};
    long long wait =
        deadline < 0 || deadline - now > 1000 ? 1000 : deadline - now;
    if (poll(p, (nfds_t)np, (int)wait) > 0 && (p[np - 1].revents & POLLIN)) {
      unsigned char c[64];
      ssize_t got;
      while ((got = read(sigpipe_fd[0], c, sizeof c)) > 0)
        for (ssize_t i = 0; i < got; i++)
          if (c[i] != SIGCHLD)
            sig = c[i];
      while (waitpid(-1, NULL, WNOHANG) > 0) {
        /* processes of the ranks that braidrun adopted */
      }
    }
  }
  for (int i = 0; i < 2; i++) {
    size_t left = out_pending(&outs[i]);
    if (left == 0)
      continue;
    outs[i].head = outs[i].len = 0;
    note("%s did not take the last %zu bytes of output in time; dropped them",
         outs[i].fd == 1 ? "stdout" : "stderr", left);
  }
  return sig;
}

__attribute__((format(printf, 2, 3), noreturn)) static void
die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnote(fmt, ap);
  va_end(ap);
  flush_outputs(-1);
  exit(code);
}

/* ---- argument parsing ---------------------------------------------------- */

typedef struct host {
  char name[128];
  int slots;
} host;

static host *hosts;
static int nhosts;

#define SLOTS_MAX (1 << 20)

static int parse_count(const char *what, const char *s, int lo, int hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!isdigit((unsigned char)s[0]) || *end || errno || v < lo || v > hi)
    die(2, "%s '%s' is not a whole number in %d..%d", what, s, lo, hi);
  return (int)v;
}

static double parse_seconds(const char *what, const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!(isdigit((unsigned char)s[0]) || s[0] == '.') || *end || errno ||
      !(v > 0) || v > 1e7)
    die(2, "%s '%s' is not a positive number of seconds", what, s);
  return v;
}

/* A name already in the list is the same host: its slots add up there (two
 * entries would count BRAID_LOCAL_RANK from 0 twice on one host). */
static void add_host(const char *name, size_t len, int slots,
                     const char *where) {
  if (len == 0 || len >= sizeof hosts->name)
    die(2, "%s: host name '%.*s' is empty or too long", where, (int)len, name);
  for (size_t i = 0; i < len; i++)
    if (!(isalnum((unsigned char)name[i]) || strchr("._-", name[i])))
      die(2,
          "%s: host name '%.*s' has a character other than letters, "
          "digits, '.', '_' and '-'",
          where, (int)len, name);
  for (int h = 0; h < nhosts; h++)
    if (strlen(hosts[h].name) == len && memcmp(hosts[h].name, name, len) == 0) {
      if (slots > SLOTS_MAX - hosts[h].slots)
        die(2, "%s: host '%s' has more than %d slots", where, hosts[h].name,
            SLOTS_MAX);
      hosts[h].slots += slots;
      return;
    }
  host *h = realloc(hosts, sizeof *hosts * (size_t)(nhosts + 1));
  if (h == NULL)
    die(1, "out of memory");
  hosts = h;
  memcpy(hosts[nhosts].name, name, len);
  hosts[nhosts].name[len] = '\0';
  hosts[nhosts].slots = slots;
  nhosts++;
}

/* "name[:slots]" */
static void add_host_spec(const char *spec, size_t len, const char *where) {
  const char *colon = memchr(spec, ':', len);
  int slots = 1;
  if (colon != NULL) {
    char num[32];
    size_t nl = len - (size_t)(colon + 1 - spec);
    if (nl == 0 || nl >= sizeof num)
      die(2, "%s: '%.*s': slots after ':' must be a number", where, (int)len,
          spec);
    memcpy(num, colon + 1, nl);
    num[nl] = '\0';
    slots = parse_count("host slots", num, 1, SLOTS_MAX);
    len = (size_t)(colon - spec);
  }
  add_host(spec, len, slots, where);
}

static void parse_host_list(const char *list) {
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    add_host_spec(p, len, "--hosts");
    if (!comma)
      break;
    p = comma + 1;
  }
}

static void parse_hostfile(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    die(2, "--hostfile %s: %s", path, strerror(errno));
  char line[512], where[600];
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *tok = strtok(line, " \t\r\n");
    if (tok == NULL)
      continue;
    char *opt = strtok(NULL, " \t\r\n");
    if (opt == NULL) {
      add_host_spec(tok, strlen(tok), where);
      continue;
    }
    if (strncmp(opt, "slots=", 6) != 0 || strtok(NULL, " \t\r\n") != NULL)
      die(2, "%s: expected 'NAME [slots=N]'", where);
    add_host(tok, strlen(tok), parse_count("slots", opt + 6, 1, SLOTS_MAX),
             where);
  }
  fclose(f);
  if (nhosts == 0)
    die(2, "--hostfile %s names no host", path);
}

/* ---- programs and namespaces --------------------------------------------- */

/* Full path of an executable: as given when it holds a '/', else from PATH
 * (plus extra, a colon list tried after it). NULL when none. */
static char *find_exec(const char *prog, const char *extra) {
  struct stat st;
  if (strchr(prog, '/'))
    return stat(prog, &st) == 0 && S_ISREG(st.st_mode) &&
                   access(prog, X_OK) == 0
               ? strdup(prog)
               : NULL;
  const char *path = getenv("PATH");
  char *dirs = malloc(strlen(path ? path : "") + strlen(extra) + 2);
  if (dirs == NULL)
    return NULL;
  sprintf(dirs, "%s:%s", path ? path : "", extra);
  char *res = NULL, *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d && !res;
       d = strtok_r(NULL, ":", &save)) {
    char full[PATH_MAX];
    if (snprintf(full, sizeof full, "%s/%s", d, prog) < (int)sizeof full &&
        stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0)
      res = strdup(full);
  }
  free(dirs);
  return res;
}

static int is_local(const char *name) { return strcmp(name, "localhost") == 0; }

/* ---- ranks and their output ---------------------------------------------- */

typedef struct stream {
  int fd;  /* -1 once closed */
  int out; /* 1 or 2 */
  size_t len;
  char buf[LINE_MAX_BYTES];
} stream;

typedef struct rank {
  pid_t pid;  /* also the id of its process group */
  int alive;  /* not reaped yet */
  int group;  /* its process group may still have a member */
  int failed; /* failed on its own, before braidrun stopped the job */
  int status;
  stream s[2];
} rank;

static rank *ranks;
static char *ip;   /* the ip command, when a host is a namespace */
static char *prog; /* the program, as a path */
static int nranks;

static void emit(int r, stream *s, const char *line, size_t len) {
  char pre[32];
  int pl = snprintf(pre, sizeof pre, "[%d] ", r);
  outq *q = out_of[s->out];
  out_append(q, pre, (size_t)pl);
  out_append(q, line, len);
  out_append(q, "\n", 1);
}

/* Emits every complete line; with flush, the partial one too. */
static void drain_lines(int r, stream *s, int flush) {
  size_t start = 0;
  for (size_t i = 0; i < s->len; i++)
    if (s->buf[i] == '\n') {
      emit(r, s, s->buf + start, i - start);
      start = i + 1;
    }
  if (start < s->len && (flush || (start == 0 && s->len == sizeof s->buf))) {
    emit(r, s, s->buf + start, s->len - start);
    start = s->len;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

/* One read() per turn of the loop, of at most the free part of the line
 * buffer: a rank that writes without pause must not keep braidrun from
 * reaping, deadlines, signals and the other ranks' output. */
static void read_stream(int r, stream *s) {
  ssize_t n;
  do
    n = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    s->len += (size_t)n;
    drain_lines(r, s, 0);
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return;
  drain_lines(r, s, 1); /* EOF or error */
  close(s->fd);
  s->fd = -1;
}

static void on_signal(int sig) {
  int e = errno;
  unsigned char c = (unsigned char)sig;
  if (write(sigpipe_fd[1], &c, 1) < 0) {
    /* the pipe is full: a wakeup is already pending */
  }
  errno = e;
}

/* Sends sig to the process group of every rank, the rank itself and what it
 * started, also after the rank exited: the group lives on while one of its
 * processes does, and its id is not given to another process until then. */
static void signal_ranks(int sig) {
  for (int r = 0; r < nranks; r++) {
    if (!ranks[r].group || kill(-ranks[r].pid, sig) == 0)
      continue;
    if (ranks[r].alive)
      kill(ranks[r].pid, sig);
    else
      ranks[r].group = 0;
  }
}

/* How many exited ranks' process groups still have a process. Forgets the
 * empty ones at once, so that their ids, free for reuse from then on, are
 * never signalled. */
static int groups_left(void) {
  int left = 0;
  for (int r = 0; r < nranks; r++)
    if (!ranks[r].alive && ranks[r].group) {
      if (kill(-ranks[r].pid, 0) == 0)
        left++;
      else
        ranks[r].group = 0;
    }
  return left;
}

static int count_alive(void) {
  int n = 0;
  for (int r = 0; r < nranks; r++)
    n += ranks[r].alive;
  return n;
}

static int rank_of(pid_t pid) {
  for (int r = 0; r < nranks; r++)
    if (ranks[r].pid == pid)
      return r;
  return -1;
}

/* ---- environment --------------------------------------------------------- */

static char **child_env_base; /* environ minus the variables we set */
static size_t child_env_n;
static char **xvars; /* one entry per name */
static int nxvars;

/* set by braidrun for each rank; -x refuses them */
static const char *const per_rank_vars[] = {
    "BRAID_RANK", "BRAID_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_SIZE",
    "BRAID_UNIQUE_ID"};

/* entry is NAME=... for the name that ends name (at '=' or its end) */
static int env_name_eq(const char *entry, const char *name) {
  size_t n = strcspn(name, "=");
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static int overridden(const char *entry) {
  for (size_t i = 0; i < sizeof per_rank_vars / sizeof *per_rank_vars; i++)
    if (env_name_eq(entry, per_rank_vars[i]))
      return 1;
  for (int i = 0; i < nxvars; i++)
    if (env_name_eq(entry, xvars[i]))
      return 1;
  return 0;
}

static void build_env_base(void) {
  size_t n = 0;
  for (char **e = environ; *e; e++)
    n++;
  child_env_base = calloc(n + (size_t)nxvars + 8, sizeof *child_env_base);
  if (child_env_base == NULL)
    die(1, "out of memory");
  for (char **e = environ; *e; e++)
    if (!overridden(*e))
      child_env_base[child_env_n++] = *e;
  for (int i = 0; i < nxvars; i++)
    child_env_base[child_env_n++] = xvars[i];
}

/* The last -x of a name wins: a second entry of one name in a rank's
 * environment would make getenv and a shell disagree on its value. */
static void add_xvar(const char *spec) {
  const char *eq = strchr(spec, '=');
  size_t nl = eq ? (size_t)(eq - spec) : strlen(spec);
  if (nl == 0 || isdigit((unsigned char)spec[0]))
    die(2, "-x '%s': not a variable name", spec);
  for (size_t i = 0; i < nl; i++)
    if (!(isalnum((unsigned char)spec[i]) || spec[i] == '_'))
      die(2, "-x '%s': not a variable name", spec);
  for (size_t i = 0; i < sizeof per_rank_vars / sizeof *per_rank_vars; i++)
    if (strlen(per_rank_vars[i]) == nl &&
        strncmp(spec, per_rank_vars[i], nl) == 0)
      die(2,
          "-x %s: braidrun sets %s itself, to each rank's own value; it "
          "cannot be exported (see braidrun --help)",
          spec, per_rank_vars[i]);
  int at = nxvars;
  for (int i = 0; i < nxvars; i++)
    if (env_name_eq(xvars[i], spec))
      at = i;
  char *entry;
  if (eq) {
    entry = strdup(spec);
  } else {
    const char *v = getenv(spec);
    if (v == NULL) {
      note("-x %s: %s is not set here; not exported", spec, spec);
      if (at < nxvars) { /* an earlier -x of it is overridden too */
        free(xvars[at]);
        xvars[at] = xvars[--nxvars];
      }
      return;
    }
    entry = malloc(nl + strlen(v) + 2);
    if (entry)
      sprintf(entry, "%s=%s", spec, v);
  }
  if (entry == NULL)
    die(1, "out of memory");
  if (at < nxvars) {
    free(xvars[at]);
    xvars[at] = entry;
    return;
  }
  char **nx = realloc(xvars, sizeof *xvars * (size_t)(nxvars + 1));
  if (nx == NULL)
    die(1, "out of memory");
  xvars = nx;
  xvars[nxvars++] = entry;
}

/* ---- main ---------------------------------------------------------------- */

static const char *sig_name(int sig) {
  const char *s = strsignal(sig);
  return s ? s : "unknown signal";
}

static void describe(int r, int status, char *buf, size_t len) {
  if (WIFSIGNALED(status))
    snprintf(buf, len, "rank %d (pid %ld) was killed by signal %d (%s)", r,
             (long)ranks[r].pid, WTERMSIG(status), sig_name(WTERMSIG(status)));
  else
    snprintf(buf, len, "rank %d (pid %ld) exited with status %d", r,
             (long)ranks[r].pid, WEXITSTATUS(status));
}

static int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Ranks reaped in one batch, before braidrun stopped the job, failed on
 * their own. Often one failure and its consequences (the others lose a peer
 * and exit with an error), and the order waitpid returns them in says
 * nothing about which came first: the one blamed is a rank killed by a
 * signal (seldom a consequence) before one that exited, the lowest rank
 * among equals. Returns it. */
static int blame(const int *batch, int nb) {
  int best = batch[0];
  for (int i = 1; i < nb; i++) {
    int r = batch[i];
    int sr = WIFSIGNALED(ranks[r].status) != 0;
    int sb = WIFSIGNALED(ranks[best].status) != 0;
    if (sr > sb || (sr == sb && r < best))
      best = r;
  }
  return best;
}

/* "job failed: <the rank blamed>; also failed before ...: <the others>" */
static void summary(int first_fail) {
  char msg[3000], what[200];
  describe(first_fail, ranks[first_fail].status, what, sizeof what);
  size_t k = (size_t)snprintf(msg, sizeof msg, "job failed: %s", what);
  int others = 0, listed = 0;
  for (int r = 0; r < nranks; r++) {
    if (!ranks[r].failed || r == first_fail)
      continue;
    if (others++ == 0)
      k += (size_t)snprintf(msg + k, sizeof msg - k,
                            "; also failed before braidrun stopped the job:");
    if (listed < 8) {
      describe(r, ranks[r].status, what, sizeof what);
      k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s", listed ? "," : "",
                            what);
      listed++;
    }
  }
  if (others > listed)
    snprintf(msg + k, sizeof msg - k, " and %d more", others - listed);
  note("%s", msg);
}

static int is_valued_option(const char *a) {
  static const char *const names[] = {"-n",        "-np",         "--np",
                                      "--hosts",   "--host-list", "--hostfile",
                                      "--timeout", "--grace",     "-x"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strcmp(a, names[i]) == 0)
      return 1;
  return 0;
}

int main(int argc, char **argv) {
  init_outputs();
  int n = 0;
  double timeout_s = 0, grace_s = 3;
  int argi = 1;
  while (argi < argc) {
    const char *a = argv[argi];
    if (strcmp(a, "--") == 0) {
      argi++;
      break;
    }
    if (a[0] != '-')
      break;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (!is_valued_option(a))
      die(2, "unknown option '%s' (see braidrun --help)", a);
    if (argi + 1 >= argc)
      die(2, "option %s needs a value (see braidrun --help)", a);
    const char *v = argv[argi + 1];
    if (!strcmp(a, "-n") || !strcmp(a, "-np") || !strcmp(a, "--np"))
      n = parse_count("-n", v, 1, SLOTS_MAX);
    else if (!strcmp(a, "--hosts") || !strcmp(a, "--host-list"))
      parse_host_list(v);
    else if (!strcmp(a, "--hostfile"))
      parse_hostfile(v);
    else if (!strcmp(a, "--timeout"))
      timeout_s = parse_seconds("--timeout", v);
    else if (!strcmp(a, "--grace"))
      grace_s = parse_seconds("--grace", v);
    else
      add_xvar(v);
    argi += 2;
  }
  if (argi >= argc)
    die(2, "no program to run (usage: braidrun -n N [options] [--] program "
           "[args...])");
  long long slots = 0;
  for (int h = 0; h < nhosts; h++)
    slots += hosts[h].slots;
  if (n == 0 && nhosts == 0)
    die(2, "give the number of ranks with -n N (or --hosts)");
  if (n == 0 && slots > SLOTS_MAX)
    die(2,
        "the host list has %lld slots, more than the %d ranks braidrun "
        "starts; give -n",
        slots, SLOTS_MAX);
  if (n == 0)
    n = (int)slots;
  if (nhosts > 0 && n > slots)
    die(2, "-n %d is more than the %lld slots of the host list", n, slots);

  /* where each rank runs */
  size_t nn = (size_t)n + 1;
  int *host_of = calloc(nn, sizeof *host_of);
  int *local_rank = calloc(nn, sizeof *local_rank);
  int *local_size = calloc(nn, sizeof *local_size);
  if (!host_of || !local_rank || !local_size)
    die(1, "out of memory");
  if (nhosts == 0) {
    for (int r = 0; r < n; r++) {
      host_of[r] = -1;
      local_rank[r] = r;
      local_size[r] = n;
    }
  } else {
    int r = 0;
    for (int h = 0; h < nhosts && r < n; h++) {
      int first = r;
      for (int k = 0; k < hosts[h].slots && r < n; k++, r++) {
        host_of[r] = h;
        local_rank[r] = k;
      }
      for (int q = first; q < r; q++)
        local_size[q] = r - first;
    }
  }
  for (int h = 0; h < nhosts; h++) {
    if (is_local(hosts[h].name))
      continue;
    if (ip == NULL &&
        (ip = find_exec("ip", "/sbin:/usr/sbin:/bin:/usr/bin")) == NULL)
      die(2, "--hosts needs the 'ip' command (iproute2) to enter network "
             "namespaces, and it is not installed");
    char p[300];
    struct stat st;
    snprintf(p, sizeof p, "/run/netns/%s", hosts[h].name);
    if (stat(p, &st) != 0) {
      snprintf(p, sizeof p, "/var/run/netns/%s", hosts[h].name);
      if (stat(p, &st) != 0)
        die(2,
            "network namespace '%s' does not exist (create it with 'ip "
            "netns add %s'; 'localhost' runs ranks without a namespace)",
            hosts[h].name, hosts[h].name);
    }
  }
  prog = find_exec(argv[argi], "");
  if (prog == NULL)
    die(127, "%s: %s", argv[argi],
        strchr(argv[argi], '/') ? "not an executable file"
                                : "command not found in PATH");

  /* the unique id; its rendezvous service lives in this process */
  braid_unique_id id;
  braid_result br = braid_get_unique_id(&id);
  if (br != BRAID_SUCCESS)
    die(1, "cannot create the unique id: %s (BRAID_DEBUG=WARN says more)",
        braid_result_string(br));
  char idtext[2 * BRAID_UNIQUE_ID_BYTES + 1];
  if (braid_unique_id_to_string(&id, idtext, sizeof idtext) != BRAID_SUCCESS)
    die(1, "cannot write the unique id as text");

  /* argv and env of every rank, prepared before any fork */
  int pargc = argc - argi;
  build_env_base();
  char ***cargv = calloc(nn, sizeof *cargv);
  char ***cenv = calloc(nn, sizeof *cenv);
  char **cpath = calloc(nn, sizeof *cpath);
  if (!cargv || !cenv || !cpath)
    die(1, "out of memory");
  for (int r = 0; r < n; r++) {
    int ns = host_of[r] >= 0 && !is_local(hosts[host_of[r]].name);
    char **av = calloc((size_t)pargc + 5, sizeof *av);
    char **ev = calloc(child_env_n + 6, sizeof *ev);
    if (!av || !ev)
      die(1, "out of memory");
    int k = 0;
    if (ns) {
      av[k++] = "ip";
      av[k++] = "netns";
      av[k++] = "exec";
      av[k++] = hosts[host_of[r]].name;
      av[k++] = prog;
    } else {
      av[k++] = argv[argi];
    }
    for (int i = argi + 1; i < argc; i++)
      av[k++] = argv[i];
    memcpy(ev, child_env_base, child_env_n * sizeof *ev);
    char *vars[5];
    if (asprintf(&vars[0], "BRAID_RANK=%d", r) < 0 ||
        asprintf(&vars[1], "BRAID_SIZE=%d", n) < 0 ||
        asprintf(&vars[2], "BRAID_LOCAL_RANK=%d", local_rank[r]) < 0 ||
        asprintf(&vars[3], "BRAID_LOCAL_SIZE=%d", local_size[r]) < 0 ||
        asprintf(&vars[4], "BRAID_UNIQUE_ID=%s", idtext) < 0)
      die(1, "out of memory");
    memcpy(ev + child_env_n, vars, sizeof vars);
    cargv[r] = av;
    cenv[r] = ev;
    cpath[r] = ns ? ip : prog;
  }
  free(host_of);
  free(local_rank);
  free(local_size);

  /* signals arrive through a pipe into the poll loop */
  if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) != 0)
    die(1, "pipe: %s", strerror(errno));
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    sigaction(sigs[i], &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  /* A rank's processes whose parent exits become braidrun's children (not
   * init's), and braidrun reaps them: a process group then empties as soon
   * as its last process exits, which ends the teardown. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  ranks = calloc((size_t)n, sizeof *ranks);
  int *batch = calloc((size_t)n, sizeof *batch);
  if (ranks == NULL || batch == NULL)
    die(1, "out of memory");
  nranks = n;
  pid_t self = getpid();
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int r = 0; r < n; r++) {
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
      note("pipe: %s", strerror(errno));
      signal_ranks(SIGKILL);
      flush_outputs(-1);
      exit(1);
    }
    fflush(NULL);
    /* Signals stay blocked across fork, so that a child cannot take one with
     * braidrun's handler before it restores the default ones. */
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
      sigaddset(&block, sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid != 0)
      sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
      note("fork: %s", strerror(errno));
      signal_ranks(SIGKILL);
      flush_outputs(-1);
      exit(1);
    }
    if (pid == 0) {
      /* only async-signal-safe calls from here to exec */
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self)
        _exit(127);
      struct sigaction dfl = {.sa_handler = SIG_DFL};
      for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaction(sigs[i], &dfl, NULL);
      sigaction(SIGPIPE, &dfl, NULL);
      sigprocmask(SIG_SETMASK, &old, NULL);
      if (devnull >= 0)
        dup2(devnull, 0);
      dup2(po[1], 1);
      dup2(pe[1], 2);
      execve(cpath[r], cargv[r], cenv[r]);
      /* braidrun has one thread: strerror is safe in the child */
      char msg[PATH_MAX + 160];
      int n = snprintf(msg, sizeof msg, "braidrun: cannot run %s: %s\n",
                       cpath[r], strerror(errno));
      if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg);
      _exit(127);
    }
    setpgid(pid, pid); /* also here, so that no signal races the child */
    close(po[1]);
    close(pe[1]);
    ranks[r].pid = pid;
    ranks[r].alive = 1;
    ranks[r].group = 1;
    ranks[r].s[0].fd = po[0];
    ranks[r].s[0].out = 1;
    ranks[r].s[1].fd = pe[0];
    ranks[r].s[1].out = 2;
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
  }
  if (devnull >= 0)
    close(devnull);

  long long start = now_ms();
  long long timeout_at =
      timeout_s > 0 ? start + (long long)(timeout_s * 1000) : -1;
  long long grace_ms = (long long)(grace_s * 1000);
  long long kill_at = -1, killed_at = -1, last = start;
  /* The drain: how long output is still read once every rank has exited
   * (a process the rank started may hold its pipe open). It counts down
   * only while braidrun can take output, so that a slow stdout loses
   * nothing; after a timeout or a signal it counts down regardless. */
  long long drain_left = DRAIN_MS;
  int stopping = 0, timed_out = 0, first_fail = -1;
  int interrupted = 0, term_sent = 0, was_alive = n, held = 0;
  size_t npfd = (size_t)(2 * n + 3);
  struct pollfd *pfd = calloc(npfd, sizeof *pfd);
  stream **pstream = calloc(npfd, sizeof *pstream);
  int *prank = calloc(npfd, sizeof *prank);
  if (!pfd || !pstream || !prank)
    die(1, "out of memory");

  for (;;) {
    /* reap: the ranks that have exited by now are one batch */
    int nb = 0, st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      int r = rank_of(pid);
      if (r < 0 || !ranks[r].alive)
        continue; /* a process of a rank's, adopted by braidrun */
      ranks[r].alive = 0;
      ranks[r].status = st;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !stopping)
        batch[nb++] = r;
    }
    if (nb > 0) {
      first_fail = blame(batch, nb);
      stopping = 1;
      for (int i = 0; i < nb; i++)
        ranks[batch[i]].failed = 1;
      char what[200];
      describe(first_fail, ranks[first_fail].status, what, sizeof what);
      int rest = count_alive();
      if (rest > 0)
        note("%s; stopping the other %d rank%s", what, rest,
             rest == 1 ? "" : "s");
      else
        note("%s", what);
      for (int r = 0; r < n; r++)
        if (ranks[r].failed && r != first_fail) {
          describe(r, ranks[r].status, what, sizeof what);
          note("%s too", what);
        }
      signal_ranks(SIGTERM);
      term_sent = 1;
      kill_at = now_ms() + grace_ms;
    }
    long long now = now_ms();
    int alive = count_alive();
    int forced = timed_out || interrupted;
    if (alive == 0 && was_alive == 0 && (forced || !held))
      drain_left -= now - last;
    last = now;
    was_alive = alive;
    if (timeout_at >= 0 && now >= timeout_at && !stopping && alive > 0) {
      note("timeout: the job ran longer than %g s; stopping %d rank%s",
           timeout_s, alive, alive == 1 ? "" : "s");
      timed_out = 1;
      stopping = 1;
      signal_ranks(SIGTERM);
      term_sent = 1;
      kill_at = now + grace_ms;
    }
    /* After a forwarded SIGINT or SIGHUP the ranks may be gone and what
     * they started not (a shell's background jobs ignore SIGINT). */
    if (stopping && alive == 0 && !term_sent) {
      signal_ranks(SIGTERM);
      term_sent = 1;
    }
    int left = groups_left();
    if (kill_at >= 0 && now >= kill_at) {
      if (alive > 0 || left > 0) {
        for (int r = 0; r < n; r++)
          if (ranks[r].alive)
            note("rank %d (pid %ld) did not stop within %g s; sending "
                 "SIGKILL",
                 r, (long)ranks[r].pid, grace_s);
          else if (ranks[r].group)
            note("processes that rank %d started (process group %ld) did "
                 "not stop within %g s; sending SIGKILL",
                 r, (long)ranks[r].pid, grace_s);
        signal_ranks(SIGKILL);
        killed_at = now;
      }
      kill_at = -1;
    }
    int groups_done = !stopping || left == 0 ||
                      (kill_at < 0 && killed_at < 0) ||
                      (killed_at >= 0 && now >= killed_at + KILL_WAIT_MS);
    /* what to watch: a stream whose output stdout (stderr) has not taken
     * stays in its pipe, so the rank waits, as it would for a slow file */
    pfd[0] = (struct pollfd){.fd = sigpipe_fd[0], .events = POLLIN};
    int np = 1, nstreams = 0;
    held = 0;
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 2; k++) {
        stream *s = &ranks[r].s[k];
        if (s->fd < 0)
          continue;
        nstreams++;
        if (out_pending(out_of[s->out]) >= OUT_HELD_MAX) {
          held = 1;
          continue;
        }
        pfd[np] = (struct pollfd){.fd = s->fd, .events = POLLIN};
        pstream[np] = s;
        prank[np] = r;
        np++;
      }
    int first_out = np;
    outq *pout[2];
    for (int i = 0; i < 2; i++)
      if (out_pending(&outs[i]) > 0) {
        pout[np - first_out] = &outs[i];
        pfd[np++] = (struct pollfd){.fd = outs[i].fd, .events = POLLOUT};
      }
    if (alive == 0 && groups_done && (nstreams == 0 || drain_left <= 0))
      break;
    long long wait = 1000; /* until the next deadline, at most 1 s */
    long long at[] = {
        stopping ? -1 : timeout_at, kill_at,
        killed_at >= 0 && left > 0 ? killed_at + KILL_WAIT_MS : -1,
        alive == 0 && nstreams > 0 && (forced || !held) ? now + drain_left
                                                        : -1};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)
      if (at[i] >= 0 && at[i] - now < wait)
        wait = at[i] - now > 0 ? at[i] - now : 0;
    if (stopping && left > 0 && wait > GROUP_POLL_MS)
      wait = GROUP_POLL_MS; /* no event says that a group emptied */
    int pr = poll(pfd, (nfds_t)np, (int)wait);
    if (pr < 0 && errno != EINTR)
      die(1, "poll: %s", strerror(errno));
    if (pr <= 0)
      continue;
    if (pfd[0].revents) {
      unsigned char sig[64];
      ssize_t got;
      while ((got = read(sigpipe_fd[0], sig, sizeof sig)) > 0)
        for (ssize_t i = 0; i < got; i++) {
          if (sig[i] == SIGCHLD)
            continue;
          if (interrupted || timed_out || (stopping && first_fail >= 0)) {
            if (count_alive() > 0 || groups_left() > 0)
              note("signal %d again: killing every rank", sig[i]);
            signal_ranks(SIGKILL);
            killed_at = now_ms();
            kill_at = -1;
            term_sent = 1;
            if (!interrupted)
              interrupted = sig[i];
            continue;
          }
          interrupted = sig[i];
          stopping = 1;
          note("got signal %d (%s); forwarding it to the ranks", sig[i],
               sig_name(sig[i]));
          signal_ranks(sig[i]);
          term_sent = sig[i] == SIGTERM;
          kill_at = now_ms() + grace_ms;
        }
    }
    for (int i = 1; i < first_out; i++)
      if (pfd[i].revents) {
        read_stream(prank[i], pstream[i]);
        out_flush(out_of[pstream[i]->out]);
      }
    for (int i = first_out; i < np; i++)
      if (pfd[i].revents)
        out_flush(pout[i - first_out]);
  }
  for (int r = 0; r < n; r++) /* what a lingering descendant left */
    for (int k = 0; k < 2; k++)
      if (ranks[r].s[k].fd >= 0) {
        drain_lines(r, &ranks[r].s[k], 1);
        close(ranks[r].s[k].fd);
      }
  int code = 0;
  if (timed_out) {
    code = 124;
  } else if (first_fail >= 0) {
    if (n > 1)
      summary(first_fail);
    code = exit_code_of(ranks[first_fail].status);
  } else if (interrupted) {
    code = 128 + interrupted;
  }
  /* Normally braidrun waits for its stdout and stderr to take everything;
   * after a timeout or a signal, only for what is left of the drain. */
  int sig = flush_outputs(timed_out || interrupted
                              ? now_ms() + (drain_left > 0 ? drain_left : 0)
                              : -1);
  if (sig && code == 0)
    code = 128 + sig;
  for (int r = 0; r < n; r++) {
    for (size_t i = child_env_n; cenv[r][i]; i++)
      free(cenv[r][i]);
    free(cenv[r]);
    free(cargv[r]);
  }
  free(cenv);
  free(cargv);
  free(cpath);
  free(pfd);
  free(pstream);
  free(prank);
  free(batch);
  free(ranks);
  free(child_env_base);
  for (int i = 0; i < nxvars; i++)
    free(xvars[i]);
  free(xvars);
  free(hosts);
  free(ip);
  free(prog);
  free(outs[0].buf);
  free(outs[1].buf);
  return code;
}
