/*
 * The words of braid-trace's reports (trace_words.h). Everything from a dump
 * is printed through words_clean, so a string in a dump cannot break a
 * report's lines.
 */
#include "trace_words.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void words_clean(const char *s, char *buf, size_t len) {
  size_t i = 0;
  for (; s[i] != '\0' && i + 1 < len; i++)
    buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
  buf[i] = '\0';
}

void words_ranks(const int *ranks, int n, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, n == 1 ? "rank " : "ranks ");
  for (int i = 0; i < n && at < len; i++) {
    int j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
      j++;
    const char *sep = i ? ", " : "";
    if (j - i >= 2) { /* three or more in a row */
      at += (size_t)snprintf(buf + at, len - at, "%s%d-%d", sep, ranks[i],
                             ranks[j]);
      i = j;
    } else {
      at += (size_t)snprintf(buf + at, len - at, "%s%d", sep, ranks[i]);
    }
  }
}

void words_call(const trace_call *c, char *buf, size_t len) {
  char kind[64];
  words_clean(c->kind, kind, sizeof kind);
  if (strcmp(c->kind, "send") == 0)
    snprintf(buf, len, "send to rank %lld", c->root);
  else if (strcmp(c->kind, "recv") == 0)
    snprintf(buf, len, "recv from rank %lld", c->root);
  else
    snprintf(buf, len, "%s #%lld", kind, c->seq);
}

void words_sig(const trace_call *c, int with_fp, char *buf, size_t len) {
  char kind[64], dtype[64], op[64];
  words_clean(c->kind, kind, sizeof kind);
  words_clean(c->dtype, dtype, sizeof dtype);
  words_clean(c->op, op, sizeof op);
  /* each rank of an alltoallv sends a count of its own: not part of it */
  size_t at =
      strcmp(c->kind, "alltoallv") == 0
          ? (size_t)snprintf(buf, len, "%s(%s", kind, dtype[0] ? dtype : "?")
          : (size_t)snprintf(buf, len, "%s(%lld x %s", kind, c->count,
                             dtype[0] ? dtype : "?");
  if (op[0] && at < len)
    at += (size_t)snprintf(buf + at, len - at, ", %s", op);
  if (c->root >= 0 && at < len)
    at += (size_t)snprintf(buf + at, len - at, ", root %lld", c->root);
  if (with_fp && c->has_fp && at < len)
    at += (size_t)snprintf(buf + at, len - at, ", fp 0x%016llx", c->fp);
  if (at < len)
    snprintf(buf + at, len - at, ")");
}

void words_time(long long us, int with_date, char *buf, size_t len) {
  time_t s = (time_t)(us / 1000000);
  struct tm tm;
  if (us <= 0 || gmtime_r(&s, &tm) == NULL) {
    snprintf(buf, len, "(no time)");
    return;
  }
  char day[32] = "";
  if (with_date)
    strftime(day, sizeof day, "%Y-%m-%d ", &tm);
  snprintf(buf, len, "%s%02d:%02d:%02d.%03lld UTC", day, tm.tm_hour, tm.tm_min,
           tm.tm_sec, us % 1000000 / 1000);
}

void words_state(const trace_call *c, char *buf, size_t len) {
  char t[48], what[96];
  const char *s = c->state;
  if (strcmp(s, "done") == 0) {
    words_time(c->t_done_us, 0, t, sizeof t);
    snprintf(buf, len, "done at %s", t);
  } else if (strcmp(s, "failed") == 0) {
    words_clean(c->result[0] ? c->result : "no result given", what,
                sizeof what);
    snprintf(buf, len, "failed (%s)", what);
  } else if (strcmp(s, "waiting") == 0) {
    words_time(c->t_started_us, 0, t, sizeof t);
    if (c->waits_on >= 0)
      snprintf(buf, len, "waiting for rank %lld, started at %s", c->waits_on,
               t);
    else
      snprintf(buf, len, "waiting, started at %s", t);
  } else if (strcmp(s, "started") == 0) {
    words_time(c->t_started_us, 0, t, sizeof t);
    snprintf(buf, len, "running (not waiting), started at %s", t);
  } else if (strcmp(s, "queued") == 0) {
    words_time(c->t_queued_us, 0, t, sizeof t);
    snprintf(buf, len, "queued at %s, not started", t);
  } else {
    words_clean(s[0] ? s : "no state given", what, sizeof what);
    snprintf(buf, len, "in state \"%s\"", what);
  }
}
