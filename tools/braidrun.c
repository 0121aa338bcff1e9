/*
 * braidrun: launches the ranks of a braid job on this machine (optionally
 * each inside a network namespace, one namespace per "host"), gives each its
 * BRAID_* variables, prefixes their output with the rank, and tears the job
 * down as soon as one rank fails.
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
#define DRAIN_MS 1000 /* output still read after the last rank exits */

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
    "host.\n"
    "  --host-list LIST     the same as --hosts\n"
    "  --hostfile FILE      hosts from a file: one 'NAME [slots=N]' or\n"
    "                       'NAME:N' per line, '#' starts a comment\n"
    "  --timeout S          stop the whole job after S seconds (exit 124)\n"
    "  --grace S            seconds between SIGTERM and SIGKILL when tearing\n"
    "                       the job down (default 3)\n"
    "  -x VAR[=VALUE]       export VAR (with VALUE, or braidrun's own value)\n"
    "                       to every rank; may be repeated\n"
    "  -h, --help           this text\n"
    "\n"
    "When a rank exits with a non-zero status or dies from a signal, braidrun\n"
    "names it, sends SIGTERM to every other rank, SIGKILL after the grace\n"
    "period, and exits with that rank's status (128+N for signal N).\n"
    "SIGINT, SIGTERM and SIGHUP sent to braidrun are forwarded to every rank\n"
    "(a second one kills them at once); braidrun then exits with 128+signal.\n"
    "Ranks read stdin from /dev/null. Lines longer than 64 KiB are split.\n"
    "\n"
    "The namespaces must exist ('ip netns add NAME', with links between them)\n"
    "and braidrun's rendezvous address (BRAID_SOCKET_IFNAME, else the first\n"
    "non-loopback interface) must be reachable from each of them.\n";

__attribute__((format(printf, 2, 3), noreturn)) static void
die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("braidrun: ", stderr);
  /* the analyzer misreads va_start in static variadic functions */
  vfprintf(stderr, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
  fputc('\n', stderr);
  va_end(ap);
  exit(code);
}

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("braidrun: ", stderr);
  /* the analyzer misreads va_start in static variadic functions */
  vfprintf(stderr, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
  fputc('\n', stderr);
  fflush(stderr);
  va_end(ap);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- argument parsing ---------------------------------------------------- */

typedef struct host {
  char name[128];
  int slots;
} host;

static host *hosts;
static int nhosts;

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
    slots = parse_count("host slots", num, 1, 1 << 20);
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
    add_host(tok, strlen(tok), parse_count("slots", opt + 6, 1, 1 << 20),
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
  pid_t pid;
  int alive;
  int status;
  stream s[2];
} rank;

static rank *ranks;
static char *ip;   /* the ip command, when a host is a namespace */
static char *prog; /* the program, as a path */
static int nranks;
static int sigpipe_fd[2] = {-1, -1};

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return; /* our own output is gone: drop it, keep managing the job */
    p += w;
    n -= (size_t)w;
  }
}

static void emit(int r, stream *s, const char *line, size_t len) {
  /* one write per line so that lines of different ranks do not mix */
  static char tmp[LINE_MAX_BYTES + 32];
  int pl = snprintf(tmp, 32, "[%d] ", r);
  memcpy(tmp + pl, line, len);
  tmp[(size_t)pl + len] = '\n';
  write_all(s->out, tmp, (size_t)pl + len + 1);
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

static void read_stream(int r, stream *s) {
  for (;;) {
    ssize_t n = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
    if (n > 0) {
      s->len += (size_t)n;
      drain_lines(r, s, 0);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    drain_lines(r, s, 1); /* EOF or error */
    close(s->fd);
    s->fd = -1;
    return;
  }
}

static void on_signal(int sig) {
  int e = errno;
  unsigned char c = (unsigned char)sig;
  if (write(sigpipe_fd[1], &c, 1) < 0) {
    /* the pipe is full: a wakeup is already pending */
  }
  errno = e;
}

static void signal_ranks(int sig) {
  for (int r = 0; r < nranks; r++)
    if (ranks[r].alive && kill(-ranks[r].pid, sig) != 0)
      kill(ranks[r].pid, sig);
}

static int count_alive(void) {
  int n = 0;
  for (int r = 0; r < nranks; r++)
    n += ranks[r].alive;
  return n;
}

/* ---- environment --------------------------------------------------------- */

static char **child_env_base; /* environ minus the variables we set */
static size_t child_env_n;
static char **xvars;
static int nxvars;

static int env_name_eq(const char *entry, const char *name) {
  size_t n = strcspn(name, "=");
  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static int overridden(const char *entry) {
  static const char *ours[] = {
      "BRAID_RANK=", "BRAID_SIZE=", "BRAID_LOCAL_RANK=", "BRAID_LOCAL_SIZE=",
      "BRAID_UNIQUE_ID="};
  for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
    if (env_name_eq(entry, ours[i]))
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

static void add_xvar(const char *spec) {
  const char *eq = strchr(spec, '=');
  size_t nl = eq ? (size_t)(eq - spec) : strlen(spec);
  if (nl == 0 || isdigit((unsigned char)spec[0]))
    die(2, "-x '%s': not a variable name", spec);
  for (size_t i = 0; i < nl; i++)
    if (!(isalnum((unsigned char)spec[i]) || spec[i] == '_'))
      die(2, "-x '%s': not a variable name", spec);
  char *entry;
  if (eq) {
    entry = strdup(spec);
  } else {
    const char *v = getenv(spec);
    if (v == NULL) {
      note("-x %s: %s is not set here; not exported", spec, spec);
      return;
    }
    entry = malloc(nl + strlen(v) + 2);
    if (entry)
      sprintf(entry, "%s=%s", spec, v);
  }
  char **nx = realloc(xvars, sizeof *xvars * (size_t)(nxvars + 1));
  if (entry == NULL || nx == NULL)
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

int main(int argc, char **argv) {
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
    if (argi + 1 >= argc)
      die(2, "option %s needs a value (see braidrun --help)", a);
    const char *v = argv[argi + 1];
    if (!strcmp(a, "-n") || !strcmp(a, "-np") || !strcmp(a, "--np"))
      n = parse_count("-n", v, 1, 1 << 20);
    else if (!strcmp(a, "--hosts") || !strcmp(a, "--host-list"))
      parse_host_list(v);
    else if (!strcmp(a, "--hostfile"))
      parse_hostfile(v);
    else if (!strcmp(a, "--timeout"))
      timeout_s = parse_seconds("--timeout", v);
    else if (!strcmp(a, "--grace"))
      grace_s = parse_seconds("--grace", v);
    else if (!strcmp(a, "-x"))
      add_xvar(v);
    else
      die(2, "unknown option '%s' (see braidrun --help)", a);
    argi += 2;
  }
  if (argi >= argc)
    die(2, "no program to run (usage: braidrun -n N [options] [--] program "
           "[args...])");
  int slots = 0;
  for (int h = 0; h < nhosts; h++)
    slots += hosts[h].slots;
  if (n == 0 && nhosts == 0)
    die(2, "give the number of ranks with -n N (or --hosts)");
  if (n == 0)
    n = slots;
  if (nhosts > 0 && n > slots)
    die(2, "-n %d is more than the %d slots of the host list", n, slots);

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

  ranks = calloc((size_t)n, sizeof *ranks);
  if (ranks == NULL)
    die(1, "out of memory");
  nranks = n;
  pid_t self = getpid();
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int r = 0; r < n; r++) {
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
      note("pipe: %s", strerror(errno));
      signal_ranks(SIGKILL);
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
  long long kill_at = -1, drain_until = -1;
  int stopping = 0, timed_out = 0, first_fail = -1, fail_status = 0;
  int interrupted = 0;
  struct pollfd *pfd = calloc((size_t)(2 * n + 1), sizeof *pfd);
  stream **pstream = calloc((size_t)(2 * n + 1), sizeof *pstream);
  int *prank = calloc((size_t)(2 * n + 1), sizeof *prank);
  if (!pfd || !pstream || !prank)
    die(1, "out of memory");

  for (;;) {
    /* reap */
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      for (int r = 0; r < n; r++) {
        if (ranks[r].pid != pid || !ranks[r].alive)
          continue;
        ranks[r].alive = 0;
        ranks[r].status = st;
        int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (failed && !stopping) {
          char what[200];
          describe(r, st, what, sizeof what);
          first_fail = r;
          fail_status = st;
          stopping = 1;
          int rest = count_alive();
          if (rest > 0) {
            note("%s; stopping the other %d rank%s", what, rest,
                 rest == 1 ? "" : "s");
            signal_ranks(SIGTERM);
            kill_at = now_ms() + (long long)(grace_s * 1000);
          } else {
            note("%s", what);
          }
        }
      }
    }
    long long now = now_ms();
    int alive = count_alive();
    if (alive == 0 && drain_until < 0)
      drain_until = now + DRAIN_MS;
    if (timeout_at >= 0 && now >= timeout_at && !stopping && alive > 0) {
      note("timeout: the job ran longer than %g s; stopping %d rank%s",
           timeout_s, alive, alive == 1 ? "" : "s");
      timed_out = 1;
      stopping = 1;
      signal_ranks(SIGTERM);
      kill_at = now + (long long)(grace_s * 1000);
    }
    if (kill_at >= 0 && now >= kill_at && alive > 0) {
      for (int r = 0; r < n; r++)
        if (ranks[r].alive)
          note("rank %d (pid %ld) did not stop within %g s of SIGTERM; "
               "sending SIGKILL",
               r, (long)ranks[r].pid, grace_s);
      signal_ranks(SIGKILL);
      kill_at = -1;
    }
    /* what to watch */
    pfd[0] = (struct pollfd){.fd = sigpipe_fd[0], .events = POLLIN};
    int np = 1;
    for (int r = 0; r < n; r++)
      for (int k = 0; k < 2; k++)
        if (ranks[r].s[k].fd >= 0) {
          pfd[np] = (struct pollfd){.fd = ranks[r].s[k].fd, .events = POLLIN};
          pstream[np] = &ranks[r].s[k];
          prank[np] = r;
          np++;
        }
    if (alive == 0 && (np == 1 || now >= drain_until))
      break;
    long long wait = 1000; /* until the next deadline, at most 1 s */
    long long at[] = {stopping ? -1 : timeout_at, kill_at, drain_until};
    for (int i = 0; i < 3; i++)
      if (at[i] >= 0 && at[i] - now < wait)
        wait = at[i] - now > 0 ? at[i] - now : 0;
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
            if (count_alive() > 0)
              note("signal %d again: killing every rank", sig[i]);
            signal_ranks(SIGKILL);
            if (!interrupted)
              interrupted = sig[i];
            continue;
          }
          interrupted = sig[i];
          stopping = 1;
          note("got signal %d (%s); forwarding it to the ranks", sig[i],
               sig_name(sig[i]));
          signal_ranks(sig[i]);
          kill_at = now_ms() + (long long)(grace_s * 1000);
        }
    }
    for (int i = 1; i < np; i++)
      if (pfd[i].revents)
        read_stream(prank[i], pstream[i]);
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
    if (count_alive() == 0 && n > 1) {
      char what[200];
      describe(first_fail, fail_status, what, sizeof what);
      note("job failed: %s", what);
    }
    code = exit_code_of(fail_status);
  } else if (interrupted) {
    code = 128 + interrupted;
  }
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
  free(ranks);
  free(child_env_base);
  for (int i = 0; i < nxvars; i++)
    free(xvars[i]);
  free(xvars);
  free(hosts);
  free(ip);
  free(prog);
  return code;
}
