/*
 * Logging: BRAID_DEBUG=WARN|INFO|TRACE, BRAID_DEBUG_SUBSYS=INIT,NET,... (or
 * ^NET to exclude), BRAID_DEBUG_FILE with %h (host) and %p (pid).
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

int log_level_now = LOG_WARN;
static unsigned g_subsys = LOG_ALL;
static FILE *g_file;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_host[64];

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {
    {"INIT", LOG_INIT}, {"BOOT", LOG_BOOT}, {"NET", LOG_NET},
    {"SHM", LOG_SHM},   {"COLL", LOG_COLL}, {"SCHED", LOG_SCHED},
    {"TOPO", LOG_TOPO}, {"ENV", LOG_ENV},   {"ALL", LOG_ALL}};

static unsigned parse_subsys(const char *s) {
  int exclude = 0;
  if (*s == '^') {
    exclude = 1;
    s++;
  }
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++) {
      if (strcasecmp(tok, subsys_names[i].name) == 0) {
        mask |= subsys_names[i].bit;
        found = 1;
      }
    }
    if (!found)
      fprintf(stderr, "braid: BRAID_DEBUG_SUBSYS: unknown subsystem '%s'\n",
              tok);
  }
  return exclude ? ~mask : mask;
}

void log_path(const char *pattern, int rank, const char *comm, char *out,
              size_t len) {
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  size_t o = 0;
  for (const char *p = pattern; *p != '\0' && o + 1 < len; p++) {
    int k = -1;
    if (p[0] == '%' && p[1] == 'h')
      k = snprintf(out + o, len - o, "%s", host);
    else if (p[0] == '%' && p[1] == 'p')
      k = snprintf(out + o, len - o, "%d", (int)getpid());
    else if (p[0] == '%' && p[1] == 'r' && rank >= 0)
      k = snprintf(out + o, len - o, "%d", rank);
    else if (p[0] == '%' && p[1] == 'c' && comm != NULL)
      k = snprintf(out + o, len - o, "%s", comm);
    if (k < 0) {
      out[o++] = *p;
      continue;
    }
    p++;
    o += (size_t)k;
    if (o >= len)
      o = len - 1;
  }
  out[o] = '\0';
}

static void open_file(const char *pattern) {
  char path[512];
  log_path(pattern, -1, NULL, path, sizeof path);
  g_file = fopen(path, "a");
  if (g_file == NULL)
    fprintf(stderr,
            "braid: cannot open BRAID_DEBUG_FILE %s; logging to stderr\n",
            path);
  else
    setvbuf(g_file, NULL, _IOLBF, 0);
}

void log_configure(const char *level, const char *subsys, const char *file) {
  gethostname(g_host, sizeof g_host - 1);
  if (level != NULL) {
    if (strcasecmp(level, "NONE") == 0 || strcasecmp(level, "OFF") == 0)
      log_level_now = LOG_NONE;
    else if (strcasecmp(level, "WARN") == 0)
      log_level_now = LOG_WARN;
    else if (strcasecmp(level, "INFO") == 0)
      log_level_now = LOG_INFO;
    else if (strcasecmp(level, "TRACE") == 0)
      log_level_now = LOG_TRACE;
    else
      fprintf(stderr,
              "braid: BRAID_DEBUG=%s is not NONE, WARN, INFO or TRACE; using "
              "WARN\n",
              level);
  }
  if (subsys != NULL)
    g_subsys = parse_subsys(subsys);
  if (file != NULL)
    open_file(file);
}

int log_enabled(int level, unsigned subsys) {
  return level <= log_level_now && (subsys & g_subsys) != 0;
}

void log_msg(int level, unsigned subsys, const char *file, int line,
             const char *fmt, ...) {
  if (!log_enabled(level, subsys))
    return;
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  struct timeval tv;
  gettimeofday(&tv, NULL);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  base = base != NULL ? base + 1 : file;
  pthread_mutex_lock(&g_lock);
  FILE *out = g_file != NULL ? g_file : stderr;
  if (level == LOG_TRACE)
    fprintf(out, "%s:%d:%ld.%06ld braid %s %s:%d %s\n", g_host, (int)getpid(),
            (long)tv.tv_sec, (long)tv.tv_usec, names[level], base, line, msg);
  else
    fprintf(out, "%s:%d braid %s %s\n", g_host, (int)getpid(), names[level],
            msg);
  pthread_mutex_unlock(&g_lock);
}

/* The public name of a result (include/braid.h). */
const char *braid_result_string(braid_result r) {
  switch (r) {
  case BRAID_SUCCESS:
    return "success";
  case BRAID_ERR_INVALID_ARG:
    return "invalid argument";
  case BRAID_ERR_SYSTEM:
    return "system error";
  case BRAID_ERR_REMOTE:
    return "remote error (a peer died or failed)";
  case BRAID_ERR_TIMEOUT:
    return "timed out";
  case BRAID_ERR_MISMATCH:
    return "ranks called different collectives";
  case BRAID_ERR_UNSUPPORTED:
    return "unsupported";
  case BRAID_ERR_NOMEM:
    return "out of memory";
  case BRAID_ERR_INTERNAL:
    return "internal error";
  case BRAID_IN_PROGRESS:
    return "in progress";
  case BRAID_ERR_ABORTED:
    return "aborted";
  }
  return "unknown result";
}

/* ---- errors ---------------------------------------------------------------
 * One message per thread: the failure point writes it (ERR), the public call
 * that ends hands it to the communicator. 512 bytes, the size of a
 * communicator's last error. */
static _Thread_local char t_err[512];

static void err_log(const char *file, int line, braid_result r) {
  if (log_level_now >= LOG_TRACE)
    log_msg(LOG_TRACE, LOG_ALL, file, line, "%s: %s", braid_result_string(r),
            t_err);
}

braid_result err_vat(const char *file, int line, braid_result r,
                     const char *fmt, va_list ap) {
  char buf[sizeof t_err]; /* the arguments may be err_msg() itself */
  vsnprintf(buf, sizeof buf, fmt, ap);
  memcpy(t_err, buf, sizeof t_err);
  err_log(file, line, r);
  return r;
}

braid_result err_at(const char *file, int line, braid_result r, const char *fmt,
                    ...) {
  va_list ap;
  va_start(ap, fmt);
  r = err_vat(file, line, r, fmt, ap);
  va_end(ap);
  return r;
}

braid_result err_wrap_at(const char *file, int line, braid_result r,
                         const char *fmt, ...) {
  char below[sizeof t_err];
  snprintf(below, sizeof below, "%s", err_why(r));
  char pre[sizeof t_err]; /* the arguments may be err_msg() itself */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(t_err, pre, sizeof t_err);
  /* "<prefix>: <below>", cut at the buffer's end. */
  size_t at = n < 0 ? 0 : (size_t)n < sizeof t_err ? (size_t)n : sizeof t_err;
  const char *parts[2] = {": ", below};
  for (int i = 0; i < 2; i++)
    for (const char *p = parts[i]; *p && at + 1 < sizeof t_err; p++)
      t_err[at++] = *p;
  if (at < sizeof t_err)
    t_err[at] = 0;
  err_log(file, line, r);
  return r;
}

const char *err_msg(void) { return t_err; }

const char *err_why(braid_result r) {
  return t_err[0] ? t_err : braid_result_string(r);
}

void err_clear(void) { t_err[0] = 0; }
