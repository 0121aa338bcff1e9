/*
 * Every bad argument named: for every public function of braid.h and each
 * of its arguments, bad values are passed; the call must return
 * BRAID_ERR_INVALID_ARG (or the documented result), name the function, the
 * argument and its value in braid_comm_last_error and in a WARN line of the
 * log (BRAID_DEBUG_FILE; the log alone where there is no communicator),
 * and leave the communicator working: an allreduce after every row gives
 * the exact sum. The functions and their parameters are read from braid.h
 * itself (BRAID_HEADER): a function or a parameter without a row fails the
 * test. Run under braidrun (2 or more ranks, at most 8).
 */
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bad_args.h"
#include "braid.h"

/* ---- braid.h: the functions and their parameters ------------------------ */

#define MAXFN 96
#define MAXP 12
typedef struct api_fn {
  char name[64];
  char param[MAXP][32];
  int np;
} api_fn;

static int ident(char ch) { return ch == '_' || isalnum((unsigned char)ch); }

/* The identifier that ends just before `end`, no further back than `lo`. */
static int last_ident(const char *lo, const char *end, char *out, size_t len) {
  while (end > lo && !ident(end[-1]))
    end--;
  const char *s = end;
  while (s > lo && ident(s[-1]))
    s--;
  snprintf(out, len, "%.*s", (int)(end - s), s);
  return end > s;
}

/* Every declaration that starts a line with BRAID_API: its function's name
 * (the identifier before the first '(') and parameters. -1: unreadable. */
static int read_api(const char *path, api_fn *fns, int max) {
  static char text[1 << 17];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  int n = 0;
  for (const char *p = strstr(text, "BRAID_API"); p != NULL && n < max;
       p = strstr(p + 1, "BRAID_API")) {
    if (p != text && p[-1] != '\n')
      continue; /* its #define */
    const char *open = strchr(p, '('), *close = open ? strchr(open, ')') : 0;
    if (close == NULL)
      return -1;
    api_fn *fn = &fns[n++];
    fn->np = 0;
    last_ident(p, open, fn->name, sizeof fn->name);
    for (const char *s = open + 1; s < close && fn->np < MAXP;) {
      const char *c = memchr(s, ',', (size_t)(close - s));
      c = c != NULL ? c : close;
      char *pn = fn->param[fn->np];
      if (last_ident(s, c, pn, sizeof fn->param[0]) && strcmp(pn, "void"))
        fn->np++;
      s = c + 1;
    }
  }
  return n;
}

/* 0 when every function has a caller and rows for each of its parameters,
 * and every row names a function and a parameter of braid.h. */
static int coverage(const api_fn *fns, int nfns) {
  int bad = 0;
  for (int i = 0; i < nfns; i++) {
    if (strncmp(fns[i].name, "braid_", 6) != 0) {
      fprintf(stderr, "bad_args: %s: not a braid_ name\n", fns[i].name);
      return 1;
    }
    int have = 0;
    for (int k = 0; k < bad_ncallers; k++)
      have |= !strcmp(bad_callers[k].name, fns[i].name + 6);
    for (int p = -1; p < fns[i].np; p++) {
      int rowed = 0;
      for (int k = 0; k < bad_nrows; k++)
        rowed |= !strcmp(bad_rows[k].fn, fns[i].name + 6) &&
                 (p < 0 || !strcmp(bad_rows[k].arg, fns[i].param[p]));
      if (!have || !rowed) {
        fprintf(stderr, "bad_args: %s%s%s has no %s\n", fns[i].name,
                p < 0 ? "" : ", argument ", p < 0 ? "" : fns[i].param[p],
                have ? "row" : "caller");
        bad = 1;
      }
    }
  }
  for (int k = 0; k < bad_nrows; k++) {
    int known = 0;
    for (int i = 0; i < nfns; i++)
      if (!strcmp(bad_rows[k].fn, fns[i].name + 6)) {
        known = !strcmp(bad_rows[k].arg, "-") && fns[i].np == 0;
        for (int p = 0; p < fns[i].np; p++)
          known |= !strcmp(bad_rows[k].arg, fns[i].param[p]);
      }
    if (!known) {
      fprintf(stderr,
              "bad_args: row %d: braid_%s has no argument %s in braid.h\n", k,
              bad_rows[k].fn, bad_rows[k].arg);
      bad = 1;
    }
  }
  return bad;
}

/* ---- the walk ----------------------------------------------------------- */

static char g_log[256];

static long log_end(void) {
  struct stat st;
  return stat(g_log, &st) == 0 ? (long)st.st_size : 0;
}

/* What the log got since offset `from`. */
static void log_since(long from, char *out, size_t len) {
  out[0] = '\0';
  FILE *f = fopen(g_log, "r");
  if (f == NULL)
    return;
  size_t k = 0;
  if (fseek(f, from, SEEK_SET) == 0)
    k = fread(out, 1, len - 1, f);
  out[k] = '\0';
  fclose(f);
}

/* 1 when text names "braid_fn:" and holds every '|'-separated word. */
static int names(const char *text, const char *fn, const char *words) {
  char want[128];
  snprintf(want, sizeof want, "braid_%s:", fn);
  if (strstr(text, want) == NULL)
    return 0;
  for (const char *w = words; *w;) {
    size_t k = strcspn(w, "|");
    snprintf(want, sizeof want, "%.*s", (int)k, w);
    if (strstr(text, want) == NULL)
      return 0;
    w += k + (w[k] == '|');
  }
  return 1;
}

/* A correct allreduce still gives the exact sum. */
static int comm_works(env *e) {
  float x[8], y[8];
  for (int i = 0; i < 8; i++)
    x[i] = (float)(e->rank + 1 + i), y[i] = -1;
  braid_result r = braid_allreduce(x, y, 8, BRAID_FLOAT32, BRAID_SUM, e->c, 0);
  int ok = r == BRAID_SUCCESS;
  for (int i = 0; i < 8; i++)
    ok &= y[i] == (float)(e->n * (e->n + 1) / 2 + e->n * i);
  if (!ok)
    fprintf(stderr, "allreduce: %s, y[0] = %g: %s\n", braid_result_string(r),
            y[0], braid_comm_last_error(e->c));
  return ok;
}

/* 0 passed, 1 failed, 2 skipped (needs a CUDA device). */
static int walk_row(int k, env *e) {
  const row *w = &bad_rows[k];
  if (w->kind == EC && e->cuda == NULL)
    return 2;
  caller call = NULL;
  for (int i = 0; i < bad_ncallers; i++)
    if (!strcmp(bad_callers[i].name, w->fn))
      call = bad_callers[i].call;
  args a;
  bad_defaults(&a, e);
  w->bad(&a);
  long from = log_end();
  long r = call(&a);
  char logged[4096], why[160] = "";
  log_since(from, logged, sizeof logged);
  static const long wants[] = {[E] = BRAID_ERR_INVALID_ARG,
                               [EC] = BRAID_ERR_INVALID_ARG,
                               [L] = BRAID_ERR_INVALID_ARG,
                               [V] = 1,
                               [VL] = 1,
                               [OK] = BRAID_SUCCESS,
                               [CU] = BRAID_ERR_UNSUPPORTED};
  long want = w->kind == CU && e->cuda != NULL ? 0 : wants[w->kind];
  const char *err = braid_comm_last_error(e->c);
  if (r != want)
    snprintf(why, sizeof why, "returned %ld (%s), not %ld", r,
             w->kind == V || w->kind == VL
                 ? "not the documented value"
                 : braid_result_string((braid_result)r),
             want);
  else if ((w->kind == E || w->kind == EC) && !names(err, w->fn, w->words))
    snprintf(why, sizeof why, "the last error does not name it");
  else if (w->kind != V && w->kind != OK && w->kind != CU &&
           (!strstr(logged, "WARN") || !names(logged, w->fn, w->words)))
    snprintf(why, sizeof why, "no WARN line names it");
  else if (!comm_works(e))
    snprintf(why, sizeof why, "the communicator no longer works");
  if (e->newc != NULL) {
    braid_comm_destroy(e->newc);
    e->newc = NULL;
  }
  if (why[0] == '\0')
    return 0;
  fprintf(stderr,
          "rank %d: row %d, braid_%s, argument %s (%s): %s\n"
          "  last error: %s\n"
          "  log: %s\n",
          e->rank, k, w->fn, w->arg, w->words ? w->words : "-", why, err,
          logged);
  return 1;
}

static int setup(env *e, const char *idtext) {
  braid_comm_rank(e->c, &e->rank);
  braid_comm_size(e->c, &e->n);
  if (e->n < 2 || e->n > MAXR || idtext == NULL ||
      braid_unique_id_from_string(&e->id, idtext) != BRAID_SUCCESS) {
    fprintf(stderr, "bad_args: needs braidrun with 2 to %d ranks\n", MAXR);
    return 1;
  }
  for (int j = 0; j < e->n; j++) {
    e->cnt[j] = e->cnt_self[j] = 2;
    e->dsp[j] = e->dsp_big[j] = (size_t)j * 2;
    e->dsp_step1[j] = (size_t)j; /* blocks of 2 a step of 1 apart */
  }
  e->cnt_self[e->rank] = 3; /* sends itself 3, receives 2 */
  e->dsp_big[e->n - 1] = SIZE_MAX / 2;
  braid_config_init(&e->okcfg);
  e->okcfg.timeout_ms = 3000; /* a check that let a call through: no hang */
  if (braid_stream_from_cuda(NULL, &e->cuda) != BRAID_SUCCESS)
    e->cuda = NULL;
  return braid_stream_create(&e->s1) != BRAID_SUCCESS ||
         braid_stream_create(&e->s2) != BRAID_SUCCESS;
}

int main(void) {
  /* the log, before any braid call reads the settings */
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(g_log, sizeof g_log, "%s/braid-bad-args-%d.log", tmp, (int)getpid());
  setenv("BRAID_DEBUG_FILE", g_log, 1);
  setenv("BRAID_DEBUG", "WARN", 1);
  unsetenv("BRAID_DEBUG_SUBSYS");
  static api_fn fns[MAXFN];
  int nfns = read_api(BRAID_HEADER, fns, MAXFN);
  if (nfns < 30) {
    fprintf(stderr, "bad_args: read %d functions from %s\n", nfns,
            BRAID_HEADER);
    return 1;
  }
  int fails = coverage(fns, nfns);
  static env e;
  braid_result r = braid_comm_init_env(&e.c, NULL);
  if (r != BRAID_SUCCESS || setup(&e, getenv("BRAID_UNIQUE_ID"))) {
    fprintf(stderr, "bad_args: init: %s\n", braid_result_string(r));
    return 1;
  }
  int skipped = 0;
  for (int k = 0; k < bad_nrows; k++) {
    int s = walk_row(k, &e);
    fails += s == 1;
    skipped += s == 2;
  }
  braid_stream_destroy(e.s1);
  braid_stream_destroy(e.s2);
  if (e.cuda != NULL)
    braid_stream_destroy(e.cuda);
  if (braid_comm_finalize(e.c) != BRAID_SUCCESS)
    fails++;
  braid_comm_destroy(e.c);
  printf("bad_args: rank %d: %d functions, %d rows, %d failed, %d skipped "
         "(no CUDA device)\n",
         e.rank, nfns, bad_nrows, fails, skipped);
  if (fails == 0)
    unlink(g_log);
  return fails != 0;
}
