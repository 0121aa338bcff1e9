/*
 * Schedule files (collectives/sched_file.c): round trips of every
 * topology-blind generator, malformed inputs with their file:line:column
 * messages, a broken schedule caught by the verifier, and a big file.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/generators.h"
#include "collectives/sched_file.h"
#include "collectives/sched_json.h"
#include "tests/collectives/gen_try.h"

static int rooted(sched_coll c) {
  return c == SCHED_BROADCAST || c == SCHED_REDUCE || c == SCHED_GATHER ||
         c == SCHED_SCATTER || c == SCHED_SEND || c == SCHED_RECV;
}

/* The JSON text of schedules (malloc'd, NUL-terminated). */
static char *to_text(sched *const *s, int n, int all, size_t *len) {
  char *buf = NULL;
  size_t sz = 0;
  FILE *f = open_memstream(&buf, &sz);
  cr_assert_not_null(f);
  int rc = all ? sched_file_write_all(s, n, f) : sched_file_write(s[0], f);
  cr_assert_eq(rc, 0, "the writer failed");
  fclose(f);
  *len = sz;
  return buf;
}

static void same_chunks(sched_chunks a, sched_chunks b, const char *what) {
  cr_assert(a.buf == b.buf && a.index == b.index && a.count == b.count,
            "%s: chunks (%u,%u,%u) read back as (%u,%u,%u)", what, a.buf,
            a.index, a.count, b.buf, b.index, b.count);
}

static void same_sched(const sched *a, const sched *b, const char *what) {
  cr_assert_eq(a->coll, b->coll, "%s: collective", what);
  cr_assert_eq(a->nranks, b->nranks, "%s: nranks", what);
  cr_assert_eq(a->root, b->root, "%s: root", what);
  cr_assert_eq(a->chunks_per_block, b->chunks_per_block, "%s: K", what);
  cr_assert_eq(a->scratch_blocks, b->scratch_blocks, "%s: scratch", what);
  cr_assert_eq(a->nchannels, b->nchannels, "%s: channels", what);
  cr_assert_str_eq(a->algo, b->algo, "%s: algo", what);
  for (int c = 0; c < a->nchannels; c++) {
    cr_assert(a->weights[c] == b->weights[c], "%s: weight %d: %.17g vs %.17g",
              what, c, a->weights[c], b->weights[c]);
    cr_assert_eq(a->route[c], b->route[c], "%s: route %d", what, c);
    for (int r = 0; r < a->nranks; r++) {
      const sched_channel *x = sched_chan_c(a, r, c),
                          *y = sched_chan_c(b, r, c);
      cr_assert_eq(x->nsteps, y->nsteps, "%s: rank %d channel %d steps", what,
                   r, c);
      for (int k = 0; k < x->nsteps; k++) {
        const sched_step *p = &x->steps[k], *q = &y->steps[k];
        char w[256];
        snprintf(w, sizeof(w), "%s rank %d channel %d step %d", what, r, c, k);
        cr_assert(p->prim == q->prim && p->peer == q->peer &&
                      p->peer_out == q->peer_out,
                  "%s: prim/peer %u/%d/%d read back as %u/%d/%d", w, p->prim,
                  p->peer, p->peer_out, q->prim, q->peer, q->peer_out);
        same_chunks(p->src, q->src, w);
        same_chunks(p->dst, q->dst, w);
      }
    }
  }
}

static sched **parse_ok(const char *text, size_t len, int *n) {
  sched **out = NULL;
  braid_result rc = sched_file_parse(text, len, "t.json", &out, n);
  cr_assert_eq(rc, 0, "parse failed: %s", err_msg());
  return out;
}

static void free_all(sched **s, int n) {
  for (int i = 0; i < n; i++)
    sched_free(s[i]);
  free(s);
}

Test(sched_file, round_trip_every_generator) {
  static const int ns[] = {1, 2, 3, 5, 8, 13};
  int trips = 0;
  GEN_FOREACH (g) {
    if (g->needs)
      continue;
    for (int c = 0; c < SCHED_NUM_COLLS; c++)
      for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
        int n = ns[ni];
        if (!gen_supports(g, (sched_coll)c, n))
          continue;
        for (int nch = 1; nch <= 3; nch += 2) {
          gen_params p = {
              (sched_coll)c, n, rooted(c) ? n - 1 : 0, nch, NULL, 0, 0};
          sched *s = gen_try(g->fn, &p);
          if (!s)
            continue; /* e.g. send/recv need two ranks */
          char what[128];
          snprintf(what, sizeof(what), "%s %s n=%d nch=%d", g->name,
                   sched_coll_name(c), n, nch);
          size_t len;
          char *text = to_text(&s, 1, 0, &len);
          int cnt;
          sched **back = parse_ok(text, len, &cnt);
          cr_assert_eq(cnt, 1, "%s", what);
          same_sched(s, back[0], what);
          /* writing the copy gives the same text */
          size_t len2;
          char *text2 = to_text(back, 1, 0, &len2);
          cr_assert(len == len2 && !memcmp(text, text2, len),
                    "%s: text differs", what);
          free(text2);
          free(text);
          free_all(back, cnt);
          sched_free(s);
          trips++;
        }
      }
  }
  cr_assert_gt(trips, 100, "only %d round trips", trips);
}

Test(sched_file, array_of_schedules) {
  gen_params p1 = {SCHED_ALLREDUCE, 4, 0, 2, NULL, 0, 0};
  gen_params p2 = {SCHED_BROADCAST, 5, 3, 1, NULL, 0, 0};
  sched *s[2] = {gen_try(gen_ring, &p1), gen_try(gen_tree, &p2)};
  cr_assert(s[0] && s[1]);
  s[0]->route[1] = SCHED_ROUTE_HOST;
  s[0]->weights[0] = 0.75;
  s[0]->weights[1] = 0.25;
  size_t len;
  char *text = to_text(s, 2, 1, &len);
  cr_assert_eq(text[0], '[');
  int n;
  sched **back = parse_ok(text, len, &n);
  cr_assert_eq(n, 2);
  same_sched(s[0], back[0], "ring");
  same_sched(s[1], back[1], "tree");
  cr_assert_eq(back[0]->route[1], SCHED_ROUTE_HOST);
  free_all(back, n);
  free(text);
  sched_free(s[0]);
  sched_free(s[1]);
}

/* A valid two-rank broadcast, one field per line, so that positions in the
 * messages below can be counted by hand. */
static const char line13[] = "       {\"op\": \"copy\", \"src\": [\"in\", 0], "
                             "\"dst\": [\"out\", 0]}],\n";
static const char *good[] = {
    "{\n",                                                             /* 1 */
    "  \"braid_schedule\": 1,\n",                                      /* 2 */
    "  \"collective\": \"broadcast\",\n",                              /* 3 */
    "  \"nranks\": 2,\n",                                              /* 4 */
    "  \"root\": 0,\n",                                                /* 5 */
    "  \"chunks_per_block\": 1,\n",                                    /* 6 */
    "  \"scratch_blocks\": 0,\n",                                      /* 7 */
    "  \"algo\": \"hand\",\n",                                         /* 8 */
    "  \"channels\": [\n",                                             /* 9 */
    "    {\"weight\": 1, \"route\": \"any\",\n",                       /* 10 */
    "     \"ranks\": [\n",                                             /* 11 */
    "      [{\"op\": \"send\", \"peer\": 1, \"src\": [\"in\", 0]},\n", /* 12 */
    line13,
    "      [{\"op\": \"recv\", \"peer\": 0, \"dst\": [\"out\", 0]}]\n", /* 14 */
    "     ]}\n",                                                        /* 15 */
    "  ]\n",                                                            /* 16 */
    "}\n",                                                              /* 17 */
};
#define NGOOD (int)(sizeof(good) / sizeof(good[0]))

/* The good text with line `line` (1-based) replaced (NULL: unchanged). */
static char *with_line(int line, const char *repl) {
  size_t cap = 4096;
  char *b = calloc(1, cap);
  cr_assert_not_null(b);
  for (int i = 0; i < NGOOD; i++)
    strcat(b, i + 1 == line && repl ? repl : good[i]);
  return b;
}

static void expect_error(const char *text, size_t len, const char *want) {
  sched **out = NULL;
  int n = -1;
  braid_result rc = sched_file_parse(text, len, "t.json", &out, &n);
  cr_assert_eq(rc, BRAID_ERR_INVALID_ARG, "accepted, expected '%s'", want);
  cr_assert_null(out);
  cr_assert_eq(n, 0);
  cr_assert_not_null(strstr(err_msg(), want), "error '%s' lacks '%s'",
                     err_msg(), want);
}

static void expect_line(int line, const char *repl, const char *want) {
  char *t = with_line(line, repl);
  expect_error(t, strlen(t), want);
  free(t);
}

Test(sched_file, good_hand_written) {
  char *t = with_line(0, NULL);
  int n;
  sched **s = parse_ok(t, strlen(t), &n);
  cr_assert_eq(n, 1);
  cr_assert_eq(s[0]->coll, SCHED_BROADCAST);
  cr_assert_eq(sched_chan(s[0], 0, 0)->nsteps, 2);
  cr_assert_eq(sched_chan(s[0], 1, 0)->steps[0].prim, SCHED_P_RECV);
  cr_assert_str_eq(s[0]->algo, "hand");
  free_all(s, n);
  free(t);
}

Test(sched_file, malformed) {
  expect_line(8, "  \"algo\": \"hand\", \"colour\": 3,\n",
              "t.json:8:19: unknown key \"colour\"");
  expect_line(4, "  \"nranks\": \"2\",\n",
              "t.json:4:13: nranks: expected a number, found a string");
  expect_line(4, "  \"nranks\": 2.5,\n",
              "t.json:4:13: nranks: expected an integer");
  expect_line(12,
              "      [{\"op\": \"send\", \"peer\": 2, \"src\": [\"in\", 0]},\n",
              "t.json:12:31: channels[0].ranks[0][0].peer: peer 2 is out of "
              "range (nranks 2)");
  expect_line(
      14, "      [{\"op\": \"recv\", \"peer\": -1, \"dst\": [\"out\", 0]}]\n",
      "t.json:14:31: channels[0].ranks[1][0].peer: peer -1 is out of "
      "range");
  expect_line(10, "    {\"weight\": 0.5, \"route\": \"any\",\n",
              "t.json:9:15: channels: channel weights sum to 0.5, not 1");
  expect_line(10, "    {\"weight\": 1, \"route\": \"pcie\",\n",
              "t.json:10:28: channels[0].route: unknown route \"pcie\"");
  expect_line(4, "  \"nranks\": 5000,\n",
              "t.json:4:13: nranks: 5000 is out of range (1..4096)");
  expect_line(4, "  \"nranks\": 0,\n",
              "t.json:4:13: nranks: 0 is out of range (1..4096)");
  expect_line(3, "  \"collective\": \"allscatter\",\n",
              "t.json:3:17: collective: unknown collective \"allscatter\"");
  expect_line(2, "  \"braid_schedule\": 2,\n",
              "t.json:2:21: braid_schedule: unsupported version 2");
  expect_line(2, "\n", "t.json:1:1: missing key \"braid_schedule\"");
  expect_line(12,
              "      [{\"op\": \"sned\", \"peer\": 1, \"src\": [\"in\", 0]},\n",
              "t.json:12:15: channels[0].ranks[0][0].op: unknown op \"sned\"");
  expect_line(12,
              "      [{\"op\": \"send\", \"peer\": 1, \"src\": [\"in\", 0], "
              "\"dst\": [\"out\", 0]},\n",
              "t.json:12:52: channels[0].ranks[0][0]: key \"dst\" does not "
              "apply to op \"send\"");
  expect_line(12, "      [{\"op\": \"send\", \"peer\": 1},\n",
              "t.json:12:8: channels[0].ranks[0][0]: missing key \"src\"");
  expect_line(
      12, "      [{\"op\": \"send\", \"peer\": 1, \"src\": [\"tmp\", 0]},\n",
      "t.json:12:42: channels[0].ranks[0][0].src: unknown buffer "
      "\"tmp\"");
  expect_line(14,
              "      [{\"op\": \"recv\", \"peer\": 0, \"dst\": [\"out\"]}]\n",
              "t.json:14:41: channels[0].ranks[1][0].dst: a chunk range is");
  expect_line(11, "     \"ranks\": [[],\n",
              "t.json:11:15: channels[0].ranks: 3 ranks, but nranks is 2");
  /* JSON syntax */
  expect_line(16, "  ],\n", "t.json:17:1: trailing comma before '}'");
  expect_line(5, "  \"root\": 0,,\n", "t.json:5:13: expected a key");
  expect_line(5, "  \"root\": 00,\n",
              "t.json:5:11: number with a leading zero");
  expect_line(8, "  \"algo\": \"ha\tnd\",\n", "t.json:8:14: control character");
  expect_line(8, "  \"algo\": \"hand\", \"algo\": \"x\",\n",
              "t.json:8:19: duplicate key \"algo\"");
  expect_line(17, "} x\n",
              "t.json:17:3: trailing characters after the JSON value");
  expect_line(17, "", "t.json:17:1: expected ',' or '}', found end of input");
}

Test(sched_file, nesting_and_limits) {
  char deep[128];
  memset(deep, '[', 40);
  memset(deep + 40, ']', 40);
  deep[80] = '\0';
  expect_error(deep, strlen(deep),
               "t.json:1:33: nesting deeper than 32 levels");

  /* 65 channels */
  size_t cap = 1 << 16;
  char *t = malloc(cap);
  cr_assert_not_null(t);
  int o = snprintf(t, cap,
                   "{\"braid_schedule\": 1, \"collective\": \"allreduce\", "
                   "\"nranks\": 1, \"chunks_per_block\": 1, \"channels\": [");
  for (int c = 0; c < 65; c++)
    o += snprintf(t + o, cap - (size_t)o,
                  "%s{\"weight\": 0.015625, \"ranks\": [[]]}", c ? ", " : "");
  snprintf(t + o, cap - (size_t)o, "]}");
  expect_error(t, strlen(t), "t.json:1:98: channels: too many channels: 65");
  free(t);

  /* more steps than SCHED_FILE_MAX_STEPS, in one channel of one rank */
  const char *step =
      "{\"op\":\"copy\",\"src\":[\"in\",0],\"dst\":[\"out\",0]},";
  size_t sl = strlen(step), nst = SCHED_FILE_MAX_STEPS + 1;
  cap = nst * sl + 256;
  t = malloc(cap);
  cr_assert_not_null(t);
  o = snprintf(t, cap,
               "{\"braid_schedule\": 1, \"collective\": \"allreduce\", "
               "\"nranks\": 1, \"chunks_per_block\": 1, \"channels\": "
               "[{\"weight\": 1, \"ranks\": [[");
  for (size_t k = 0; k < nst; k++)
    memcpy(t + o + k * sl, step, sl);
  o += (int)(nst * sl) - 1;
  snprintf(t + o, cap - (size_t)o, "]]}]}");
  expect_error(t, strlen(t), "too many steps (limit 524288 per schedule)");
  free(t);

  expect_error("", 0, "t.json:1:1: expected a value, found end of input");
  expect_error("[]", 2, "t.json:1:1: 0 schedules");
  expect_error("42", 2, "expected a schedule object or an array of them");
}

/* Writes a schedule to a temporary file; returns its path (static). */
static const char *tmp_file(sched *const *s, int n) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/braid-test-sched-XXXXXX");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  cr_assert_eq(sched_file_write_all(s, n, f), 0);
  fclose(f);
  return path;
}

Test(sched_file, dropped_step_fails_the_verifier) {
  gen_params p = {SCHED_ALLREDUCE, 6, 0, 2, NULL, 0, 0};
  sched *s[2] = {gen_try(gen_ring, &p), gen_try(gen_ring, &p)};
  cr_assert(s[0] && s[1]);
  /* schedule 1, rank 3, channel 1: drop step 4 */
  sched_channel *ch = sched_chan(s[1], 3, 1);
  cr_assert_gt(ch->nsteps, 5);
  memmove(&ch->steps[4], &ch->steps[5],
          (size_t)(ch->nsteps - 5) * sizeof(ch->steps[0]));
  ch->nsteps--;
  const char *path = tmp_file(s, 2);
  sched **out = NULL;
  int n = -1;
  cr_assert_eq(sched_file_load(path, &out, &n), BRAID_ERR_INVALID_ARG);
  cr_assert_null(out);
  cr_assert_not_null(strstr(err_msg(), path), "%s", err_msg());
  cr_assert_not_null(strstr(err_msg(),
                            "schedule 1 (allreduce, algo \"ring\", 6 "
                            "ranks) fails the verifier"),
                     "%s", err_msg());
  cr_assert_not_null(strstr(err_msg(), "channel 1"), "%s", err_msg());
  cr_assert_not_null(strstr(err_msg(), "rank "), "%s", err_msg());
  cr_assert_not_null(strstr(err_msg(), "step "), "%s", err_msg());
  /* the position is schedule 1's opening brace: column 3 of a line that
   * holds only "{" after the lines of schedule 0 */
  int lines = 0, c;
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  while ((c = fgetc(f)) != EOF)
    lines += c == '\n';
  fclose(f);
  const char *colon = strstr(err_msg(), path) + strlen(path);
  int line = 0, col = 0;
  cr_assert_eq(sscanf(colon, ":%d:%d:", &line, &col), 2, "%s", err_msg());
  cr_assert_eq(col, 3, "%s", err_msg());
  cr_assert_gt(line, 2, "%s", err_msg());
  cr_assert_lt(line, lines, "%s", err_msg());
  f = fopen(path, "r");
  cr_assert_not_null(f);
  char lb[256] = "";
  for (int i = 1; i <= line; i++)
    cr_assert_not_null(fgets(lb, sizeof(lb), f));
  fclose(f);
  cr_assert_str_eq(lb, "  {\n", "line %d is '%s'", line, lb);
  unlink(path);
  sched_free(s[0]);
  sched_free(s[1]);
}

/* sched_file_save writes what sched_file_load takes, and nothing else: a
 * schedule over the file's step limit is refused and leaves the file that
 * was there; a failed write leaves it too, and a device stays a device. */
Test(sched_file, save_what_load_takes) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/braid-test-save-XXXXXX");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "old\n", 4), 4);
  close(fd);
  gen_params big = {SCHED_ALLREDUCE, 512, 0, 2, NULL, 0, 0};
  sched *s = gen_try(gen_ring, &big);
  cr_assert_not_null(s);
  cr_assert_eq(sched_file_save(s, path), BRAID_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(err_msg(), "more than a schedule file may hold "
                                       "(524288)"),
                     "%s", err_msg());
  sched_free(s);
  char buf[16] = "";
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(buf, sizeof buf, f));
  fclose(f);
  cr_assert_str_eq(buf, "old\n", "the refused save changed the file");
  gen_params small = {SCHED_ALLREDUCE, 4, 0, 2, NULL, 0, 0};
  s = gen_try(gen_ring, &small);
  cr_assert_not_null(s);
  cr_assert_eq(sched_file_save(s, path), BRAID_SUCCESS, "%s", err_msg());
  sched **out = NULL;
  int n = 0;
  cr_assert_eq(sched_file_load(path, &out, &n), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(n, 1);
  same_sched(s, out[0], "saved and loaded");
  free_all(out, n);
  cr_assert_eq(sched_file_save(s, "/nonexistent-dir/s.json"), BRAID_ERR_SYSTEM);
  cr_assert_not_null(strstr(err_msg(), "No such file or directory"), "%s",
                     err_msg());
  struct stat st;
  if (stat("/dev/full", &st) == 0) {
    cr_assert_eq(sched_file_save(s, "/dev/full"), BRAID_ERR_SYSTEM);
    cr_assert_not_null(strstr(err_msg(), "No space left"), "%s", err_msg());
    cr_assert_eq(stat("/dev/full", &st), 0, "/dev/full is gone");
    cr_assert(S_ISCHR(st.st_mode));
  }
  sched_free(s);
  unlink(path);
}

/* chunks_per_block and scratch_blocks each within the file's limits, whose
 * product of chunks no int counts: refused by name (the verifier's count
 * wrapped, to a refusal as "out of memory", or to 0 cells and acceptance). */
Test(sched_file, too_many_chunks_for_the_verifier) {
  static const char *const ks[] = {"65536", "32768"};
  for (int i = 0; i < 2; i++) {
    char text[512], path[64];
    snprintf(text, sizeof text,
             "{\"braid_schedule\": 1, \"collective\": \"allreduce\", "
             "\"nranks\": 1, \"chunks_per_block\": %s, \"scratch_blocks\": "
             "65536, \"channels\": [{\"weight\": 1, \"ranks\": [[{\"op\": "
             "\"copy\", \"src\": [\"in\", 0, %s], \"dst\": [\"out\", 0, "
             "%s]}]]}]}",
             ks[i], ks[i], ks[i]);
    snprintf(path, sizeof path, "/tmp/braid-test-sched-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    sched **out = NULL;
    int n = -1;
    braid_result rc = sched_file_load(path, &out, &n);
    unlink(path);
    cr_assert_eq(rc, BRAID_ERR_INVALID_ARG, "chunks_per_block %s: accepted",
                 ks[i]);
    cr_assert_not_null(strstr(err_msg(), "more than the verifier counts"), "%s",
                       err_msg());
    cr_assert_not_null(strstr(err_msg(), "scratch_blocks 65536"), "%s",
                       err_msg());
  }
}

/* A large schedule (a 64-rank ring allreduce) loads whole and unchanged;
 * no test asserts how long that takes. */
Test(sched_file, big_file_loads) {
  gen_params p = {SCHED_ALLREDUCE, 64, 0, 2, NULL, 0, 0};
  sched *s = gen_try(gen_ring, &p);
  cr_assert_not_null(s);
  const char *path = tmp_file(&s, 1);
  sched **out = NULL;
  int n = 0;
  braid_result rc = sched_file_load(path, &out, &n);
  cr_assert_eq(rc, 0, "%s", err_msg());
  cr_assert_eq(n, 1);
  same_sched(s, out[0], "ring 64");
  free_all(out, n);
  sched_free(s);
  unlink(path);
}

Test(sched_file, missing_file) {
  sched **out = NULL;
  int n = -1;
  cr_assert_eq(sched_file_load("/nonexistent/s.json", &out, &n),
               BRAID_ERR_SYSTEM);
  cr_assert_not_null(strstr(err_msg(), "/nonexistent/s.json: cannot open"),
                     "%s", err_msg());
}

Test(sched_file, too_big_file) {
  char path[] = "/tmp/braid-test-sched-big-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, (off_t)SCHED_FILE_MAX_BYTES + 1), 0);
  close(fd);
  sched **out = NULL;
  int n = -1;
  cr_assert_eq(sched_file_load(path, &out, &n), BRAID_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(err_msg(), "larger than 67108864 bytes"), "%s",
                     err_msg());
  cr_assert_not_null(strstr(err_msg(), path), "%s", err_msg());
  unlink(path);
}
