/*
 * Loading flight-recorder dumps (trace_dump.h): lines are read whole, parsed
 * by trace_json.c, and their members stored by one table of known keys;
 * unknown keys are ignored, as the format's versioning rule asks. A file cut
 * short (a last line without its end, fewer calls than its header
 * announces) is loaded with a note; any other fault refuses the file.
 */
#include "trace_dump.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "trace_json.h"

/* Longer lines are refused: no dump line comes near. */
#define TRACE_MAX_LINE (1 << 20)

enum { F_INT, F_STR, F_HEX };

typedef struct {
  const char *key;
  int header; /* a header key (else a call's) */
  int type;
  size_t off;
} field;

#define H(k, t, m)                                                             \
  { k, 1, t, offsetof(trace_dump, m) }
#define C(k, t, m)                                                             \
  { k, 0, t, offsetof(trace_call, m) }
static const field fields[] = {
    H("braid_flight", F_INT, version),
    H("comm", F_STR, comm),
    H("comm_id", F_STR, comm_id),
    H("rank", F_INT, rank),
    H("nranks", F_INT, nranks),
    H("host", F_STR, host),
    H("pid", F_INT, pid),
    H("reason", F_STR, reason),
    H("time_us", F_INT, time_us),
    H("error", F_STR, error),
    H("ncalls", F_INT, ncalls),
    C("seq", F_INT, seq),
    C("kind", F_STR, kind),
    C("count", F_INT, count),
    C("dtype", F_STR, dtype),
    C("op", F_STR, op),
    C("root", F_INT, root),
    C("stream", F_STR, stream),
    C("state", F_STR, state),
    C("channel", F_INT, channel),
    C("step", F_INT, step),
    C("prim", F_STR, prim),
    C("waits_on", F_INT, waits_on),
    C("fp", F_HEX, fp_text),
    C("t_queued_us", F_INT, t_queued_us),
    C("t_started_us", F_INT, t_started_us),
    C("t_done_us", F_INT, t_done_us),
    C("result", F_STR, result),
};
#undef H
#undef C
#define NFIELDS (sizeof fields / sizeof fields[0])

/* One line's members: a header's, a call's, or (wrongly) both. */
typedef struct {
  trace_dump h;
  trace_call c;
  unsigned long seen; /* bit i: fields[i] was present */
} line_vals;

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL)
    memcpy(d, s, n);
  return d;
}

static int on_member(void *ctx, const char *key, const tj_value *v, char *err,
                     size_t errlen) {
  line_vals *lv = ctx;
  for (size_t i = 0; i < NFIELDS; i++) {
    const field *f = &fields[i];
    if (strcmp(f->key, key) != 0)
      continue;
    char *base = f->header ? (char *)&lv->h : (char *)&lv->c;
    if (f->type == F_INT) {
      if (v->type != TJ_NUMBER || !v->is_int) {
        snprintf(err, errlen, "\"%s\" must be an integer", key);
        return -1;
      }
      memcpy(base + f->off, &v->i, sizeof v->i);
    } else {
      if (v->type != TJ_STRING) {
        snprintf(err, errlen, "\"%s\" must be a string", key);
        return -1;
      }
      char *old, *s = dup_str(v->str);
      if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
      }
      memcpy(&old, base + f->off, sizeof old);
      free(old); /* a repeated key: the last one counts */
      memcpy(base + f->off, &s, sizeof s);
    }
    lv->seen |= 1UL << i;
    return 0;
  }
  return 0; /* unknown keys are for newer readers */
}

static int seen(const line_vals *lv, const char *key) {
  for (size_t i = 0; i < NFIELDS; i++)
    if (strcmp(fields[i].key, key) == 0)
      return (lv->seen >> i) & 1;
  return 0;
}

static void free_call(trace_call *c) {
  free(c->kind), free(c->dtype), free(c->op), free(c->stream);
  free(c->state), free(c->prim), free(c->result), free(c->fp_text);
}

static void free_dump(trace_dump *d) {
  if (d == NULL)
    return;
  for (int i = 0; i < d->ncall; i++)
    free_call(&d->calls[i]);
  free(d->calls);
  free(d->path), free(d->comm), free(d->host), free(d->reason);
  free(d->error), free(d->comm_id);
  free(d);
}

void trace_set_free(trace_set *set) {
  for (int i = 0; i < set->n; i++)
    free_dump(set->dumps[i]);
  free(set->dumps);
  memset(set, 0, sizeof *set);
}

int trace_is_p2p(const trace_call *c) {
  return strcmp(c->kind, "send") == 0 || strcmp(c->kind, "recv") == 0;
}

/* Strings a dump may leave out read as "" afterwards. */
static char *or_empty(char *s) { return s != NULL ? s : dup_str(""); }

static int check_header(line_vals *lv, char *err, size_t errlen) {
  trace_dump *h = &lv->h;
  if (h->version != TRACE_FORMAT_VERSION) {
    snprintf(err, errlen,
             "format version %lld (\"braid_flight\"); this braid-trace reads "
             "version %d",
             h->version, TRACE_FORMAT_VERSION);
    return -1;
  }
  if (!seen(lv, "nranks") || h->nranks < 1 || h->nranks > TRACE_MAX_RANKS) {
    snprintf(err, errlen, "the header needs \"nranks\", 1 to %d",
             TRACE_MAX_RANKS);
    return -1;
  }
  if (!seen(lv, "rank") || h->rank < 0 || h->rank >= h->nranks) {
    snprintf(err, errlen, "the header needs \"rank\", 0 to %lld",
             h->nranks - 1);
    return -1;
  }
  for (size_t i = 0; i < NFIELDS; i++)
    if (!fields[i].header && ((lv->seen >> i) & 1)) {
      snprintf(err, errlen, "a header line with a call's key \"%s\"",
               fields[i].key);
      return -1;
    }
  if (!seen(lv, "ncalls"))
    h->ncalls = -1;
  else if (h->ncalls < 0) {
    snprintf(err, errlen, "\"ncalls\" %lld is below 0", h->ncalls);
    return -1;
  }
  h->comm = or_empty(h->comm), h->host = or_empty(h->host);
  h->reason = or_empty(h->reason), h->error = or_empty(h->error);
  h->comm_id = or_empty(h->comm_id);
  return 0;
}

static int check_call(line_vals *lv, const trace_dump *d, char *err,
                      size_t errlen) {
  trace_call *c = &lv->c;
  if (!seen(lv, "seq") || c->seq < 0) {
    snprintf(err, errlen, "a call needs \"seq\" (0 or more)");
    return -1;
  }
  if (c->kind == NULL || c->kind[0] == '\0') {
    snprintf(err, errlen, "a call needs \"kind\"");
    return -1;
  }
  /* the kinds src/flight.c writes: collectives/schedule.c's
   * sched_coll_name, barrier and alltoallv (braid-trace needs nothing of the
   * library, so the names are here too) */
  static const char *const kinds[] = {
      "allreduce",      "broadcast", "reduce",  "allgather",
      "reduce_scatter", "gather",    "scatter", "alltoall",
      "send",           "recv",      "barrier", "alltoallv"};
  int known = 0;
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && !known; k++)
    known = strcmp(c->kind, kinds[k]) == 0;
  if (!known) {
    snprintf(err, errlen,
             "\"kind\" \"%.40s\" is not a collective braid "
             "records",
             c->kind);
    return -1;
  }
  if (seen(lv, "count") && c->count < 0) {
    snprintf(err, errlen, "\"count\" %lld is below 0", c->count);
    return -1;
  }
  if (!seen(lv, "waits_on"))
    c->waits_on = -1;
  if (!seen(lv, "root"))
    c->root = -1;
  if (c->root < -1 || c->root >= d->nranks) {
    snprintf(err, errlen, "\"root\" %lld is not a rank of %lld", c->root,
             d->nranks);
    return -1;
  }
  if (c->waits_on < -1 || c->waits_on >= d->nranks) {
    snprintf(err, errlen, "\"waits_on\" %lld is not a rank of %lld",
             c->waits_on, d->nranks);
    return -1;
  }
  if (c->fp_text != NULL && c->fp_text[0] != '\0') {
    char *end = NULL;
    errno = 0;
    c->fp = strtoull(c->fp_text, &end, 16);
    if (errno != 0 || strncmp(c->fp_text, "0x", 2) != 0 || *end != '\0' ||
        end == c->fp_text + 2) {
      snprintf(err, errlen, "\"fp\" must be a hex number \"0x...\", not \"%s\"",
               c->fp_text);
      return -1;
    }
    c->has_fp = 1;
  }
  c->kind = or_empty(c->kind), c->dtype = or_empty(c->dtype);
  c->op = or_empty(c->op), c->stream = or_empty(c->stream);
  c->state = or_empty(c->state), c->prim = or_empty(c->prim);
  c->result = or_empty(c->result), c->fp_text = or_empty(c->fp_text);
  return 0;
}

static int add_call(trace_dump *d, const trace_call *c) {
  if (d->ncall == d->cap) {
    int cap = d->cap ? 2 * d->cap : 16;
    trace_call *v = realloc(d->calls, (size_t)cap * sizeof *v);
    if (v == NULL)
      return -1;
    d->calls = v, d->cap = cap;
  }
  d->calls[d->ncall++] = *c;
  return 0;
}

static int add_dump(trace_set *set, trace_dump *d) {
  if (set->n == set->cap) {
    int cap = set->cap ? 2 * set->cap : 16;
    trace_dump **v = realloc(set->dumps, (size_t)cap * sizeof *v);
    if (v == NULL)
      return -1;
    set->dumps = v, set->cap = cap;
  }
  set->dumps[set->n++] = d;
  return 0;
}

/* A dump is cut short when its last line is, or when it holds fewer or
 * more calls than its header announces. */
static void note_short(trace_dump *d, FILE *err) {
  int counted = d->ncalls < 0 || d->ncalls == d->ncall;
  if (counted && d->truncated[0] == '\0')
    return;
  if (d->truncated[0] == '\0')
    snprintf(d->truncated, sizeof d->truncated,
             "its header announces %lld calls, %d follow", d->ncalls, d->ncall);
  fprintf(err, "braid-trace: warning: %s:%d: %s\n", d->path, d->line,
          d->truncated);
}

typedef struct {
  const char *path;
  FILE *f, *err;
  trace_dump **out; /* the file's dumps, in order */
  int nout;
  char *line;
  size_t cap;
  int lineno;
  int warned; /* a warning already says why the file holds no dump */
  int in_dir; /* found in a directory: a file that is no dump is left out */
} reader;

/* Parses one line into dumps; 0, 1 to read no further (a file of a
 * directory that is no dump), or -1 after an error was printed. */
static int take_line(reader *r, char *s, size_t n, int ended) {
  char msg[256];
  line_vals lv;
  memset(&lv, 0, sizeof lv);
  trace_dump *cur = r->nout ? r->out[r->nout - 1] : NULL;
  int rc = tj_parse_line(s, n, on_member, &lv, msg, sizeof msg);
  if (cur == NULL && r->in_dir &&
      (rc == 0 ? !seen(&lv, "braid_flight") : ended)) {
    fprintf(r->err,
            "braid-trace: warning: %s: not a braid flight dump (its first "
            "line has no \"braid_flight\"): left out\n",
            r->path);
    r->warned = 1;
    rc = 2;
  } else if (rc < 0 && !ended && cur != NULL) {
    /* the writer stopped inside the last line */
    snprintf(cur->truncated, sizeof cur->truncated,
             "the file ends inside line %d (%s)", r->lineno, msg);
    rc = 1;
  } else if (rc < 0 && !ended) {
    fprintf(r->err,
            "braid-trace: warning: %s:%d: the file ends inside its header "
            "(%s): no dump in it\n",
            r->path, r->lineno, msg);
    r->warned = 1;
    rc = 1;
  } else if (rc == 0 && seen(&lv, "braid_flight")) {
    rc = check_header(&lv, msg, sizeof msg);
    if (rc == 0) {
      trace_dump *d = malloc(sizeof *d);
      trace_dump **v = realloc(r->out, (size_t)(r->nout + 1) * sizeof *v);
      if (v != NULL)
        r->out = v;
      if (d == NULL || v == NULL || (lv.h.path = dup_str(r->path)) == NULL) {
        free(d);
        snprintf(msg, sizeof msg, "out of memory");
        rc = -1;
      } else {
        *d = lv.h;
        d->line = r->lineno;
        r->out[r->nout++] = d;
        memset(&lv.h, 0, sizeof lv.h);
      }
    }
  } else if (rc == 0 && cur == NULL) {
    snprintf(msg, sizeof msg,
             "not a braid flight dump: the first line has no "
             "\"braid_flight\"");
    rc = -1;
  } else if (rc == 0) {
    rc = check_call(&lv, cur, msg, sizeof msg);
    lv.c.line = r->lineno;
    if (rc == 0 && add_call(cur, &lv.c) < 0) {
      snprintf(msg, sizeof msg, "out of memory");
      rc = -1;
    }
    if (rc == 0)
      memset(&lv.c, 0, sizeof lv.c);
  }
  free_call(&lv.c);
  free(lv.h.comm), free(lv.h.host), free(lv.h.reason), free(lv.h.error);
  free(lv.h.comm_id);
  if (rc < 0)
    fprintf(r->err, "braid-trace: %s:%d: %s\n", r->path, r->lineno, msg);
  return rc < 0 ? -1 : rc == 2;
}

static int blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
      return 0;
  return 1;
}

static int load_file(trace_set *set, const char *path, int in_dir, FILE *err) {
  reader r = {path, fopen(path, "r"), err, NULL, 0, NULL, 0, 0, 0, in_dir};
  int rc = 0;
  if (r.f == NULL) {
    fprintf(err, "braid-trace: %s: %s\n", path, strerror(errno));
    return 1;
  }
  ssize_t n;
  while (rc == 0 && (n = getline(&r.line, &r.cap, r.f)) >= 0) {
    r.lineno++;
    int ended = n > 0 && r.line[n - 1] == '\n';
    size_t len = (size_t)n - (size_t)ended;
    if (len > TRACE_MAX_LINE) {
      fprintf(err, "braid-trace: %s:%d: a line of %zu bytes (at most %d)\n",
              path, r.lineno, len, TRACE_MAX_LINE);
      rc = -1;
    } else if (memchr(r.line, '\0', len) != NULL) {
      fprintf(err, "braid-trace: %s:%d: a NUL byte in the line\n", path,
              r.lineno);
      rc = -1;
    } else if (!blank(r.line, len)) {
      rc = take_line(&r, r.line, len, ended);
    }
  }
  if (rc == 1) /* a file of a directory that is no dump */
    rc = 0;
  if (rc == 0 && ferror(r.f)) {
    fprintf(err, "braid-trace: %s: %s\n", path, strerror(errno));
    rc = -1;
  }
  if (rc == 0 && r.nout == 0 && !r.warned)
    fprintf(err, "braid-trace: warning: %s: empty, no dump in it\n", path);
  for (int i = 0; i < r.nout; i++) {
    if (rc == 0)
      note_short(r.out[i], err);
    if (rc == 0 && add_dump(set, r.out[i]) < 0) {
      fprintf(err, "braid-trace: out of memory\n");
      rc = -1;
    }
    if (rc < 0)
      free_dump(r.out[i]);
  }
  free(r.out);
  free(r.line);
  fclose(r.f);
  return rc < 0 ? 1 : 0;
}

static int dump_name(const char *name) {
  size_t n = strlen(name);
  return name[0] != '.' && ((n > 5 && strcmp(name + n - 5, ".json") == 0) ||
                            (n > 6 && strcmp(name + n - 6, ".jsonl") == 0));
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.json and *.jsonl directly in dir, in name order. */
static int load_dir(trace_set *set, const char *dir, FILE *err) {
  DIR *dp = opendir(dir);
  if (dp == NULL) {
    fprintf(err, "braid-trace: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  char **names = NULL;
  int n = 0, errors = 0;
  struct dirent *e;
  while ((e = readdir(dp)) != NULL) {
    if (!dump_name(e->d_name))
      continue;
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    char *p = malloc(len), **v = realloc(names, (size_t)(n + 1) * sizeof *v);
    if (v != NULL)
      names = v;
    if (p == NULL || v == NULL) {
      free(p);
      fprintf(err, "braid-trace: out of memory\n");
      errors++;
      break;
    }
    snprintf(p, len, "%s/%s", dir, e->d_name);
    names[n++] = p;
  }
  closedir(dp);
  if (n > 1)
    qsort(names, (size_t)n, sizeof *names, by_name);
  if (n == 0 && errors == 0)
    fprintf(err, "braid-trace: warning: %s: no *.json or *.jsonl file\n", dir);
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
      errors += load_file(set, names[i], 1, err);
    free(names[i]);
  }
  free(names);
  return errors;
}

int trace_load(trace_set *set, const char *path, FILE *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(err, "braid-trace: %s: %s\n", path, strerror(errno));
    return 1;
  }
  if (S_ISDIR(st.st_mode))
    return load_dir(set, path, err);
  return load_file(set, path, 0, err);
}
