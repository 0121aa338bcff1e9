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
