/*
 * braid-topo schedule end to end: the table on DGX-1 V100, a GPU subset,
 * --save read back with sched_file_load, --render dot with one edge per ring
 * step, and bad arguments (exit 2, message naming the bad value).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/generators.h"
#include "collectives/plan.h"
#include "collectives/sched_file.h"
#include "collectives/view.h"
#include "src/log.h"
#include "topology/topo.h"

static char dir[64];
static char outp[128], errp[128];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/braid-topo-sched-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(outp, sizeof(outp), "%s/out", dir);
  snprintf(errp, sizeof(errp), "%s/err", dir);
}

static void teardown(void) {
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* Runs braid-topo schedule ARGS; returns its exit status. */
static int tool(const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "'%s' schedule %s >'%s' 2>'%s'", BRAID_TOPO_BIN,
           args, outp, errp);
  int st = system(cmd);
  cr_assert(WIFEXITED(st), "%s: killed", cmd);
  return WEXITSTATUS(st);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s missing", path);
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len + 4096 > cap) {
      cap = (cap + 4096) * 2;
      buf = realloc(buf, cap);
      cr_assert_not_null(buf);
    }
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (!got)
      break;
  }
  buf[len] = '\0';
  fclose(f);
  return buf;
}

/* The table row of generator `name` (the line that starts with it and has a
 * '%'), copied into row; 0 when absent. */
static int find_row(const char *out, const char *name, char *row, size_t n) {
  for (const char *l = out; l && *l;
       l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    size_t nl = strlen(name);
    const char *e = strchr(l, '\n');
    size_t ll = e ? (size_t)(e - l) : strlen(l);
    if (ll > nl && !strncmp(l, name, nl) && l[nl] == ' ' &&
        memchr(l, '%', ll)) {
      snprintf(row, n, "%.*s", (int)ll, l);
      return 1;
    }
  }
  return 0;
}

/* The efficiency (percent) at the end of a row (before "<- selected"). */
static double row_eff(const char *row) {
  const char *pct = strchr(row, '%');
  cr_assert_not_null(pct);
  const char *b = pct;
  while (b > row && b[-1] != ' ')
    b--;
  return atof(b);
}

/* Every generator that supports (coll) on these GPUs of dgx1-v100 has a row
 * with an efficiency; exactly one is selected. */
static void check_table(const char *gpus_arg, const int *gpus, int ngpus,
                        const char *coll_arg, sched_coll coll) {
  char args[256];
  snprintf(args, sizeof(args), "--machine dgx1-v100 %s --coll %s --size 64M",
           gpus_arg, coll_arg);
  int rc = tool(args);
  char *out = slurp(outp), *err = slurp(errp);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  topo_graph *g = NULL;
  cr_assert_eq(topo_model_load("dgx1-v100", &g), BRAID_SUCCESS, "%s",
               err_msg());
  sched_view *v = NULL;
  cr_assert_eq(view_gpus(g, gpus, ngpus, &v), BRAID_SUCCESS, "%s", err_msg());
  int rows = 0;
  GEN_FOREACH (gd) {
    if (!gen_supports_view(gd, coll, v->nranks, v))
      continue;
    char row[256];
    cr_assert(find_row(out, gd->name, row, sizeof(row)),
              "no row with an efficiency for %s in:\n%s", gd->name, out);
    double eff = row_eff(row);
    cr_assert(eff > 0 && eff < 1000, "%s: efficiency %.1f", row, eff);
    cr_assert_not_null(strstr(row, " yes "), "%s: not verified", row);
    rows++;
  }
  cr_assert_gt(rows, 3, "only %d generators", rows);
  const char *sel = strstr(out, "<- selected");
  cr_assert_not_null(sel, "no pick in:\n%s", out);
  cr_assert_null(strstr(sel + 1, "<- selected"), "two picks");
  char first[128];
  snprintf(first, sizeof(first), "%d ranks on", v->nranks);
  cr_assert_not_null(strstr(out, first), "%s", out);
  view_free(v);
  topo_graph_free(g);
  free(out);
  free(err);
}

TestSuite(topo_schedule, .init = setup, .fini = teardown);

/* Criterion runs no fini after a skip: the directory goes first. */
#define skip(...)                                                              \
  do {                                                                         \
    teardown();                                                                \
    cr_skip_test(__VA_ARGS__);                                                 \
  } while (0)

Test(topo_schedule, every_generator_on_dgx1) {
  check_table("", NULL, 0, "allreduce", SCHED_ALLREDUCE);
}

Test(topo_schedule, gpu_subset) {
  static const int gpus[] = {0, 2, 3};
  check_table("--gpus 0,2,3", gpus, 3, "broadcast", SCHED_BROADCAST);
  char *out = slurp(outp);
  cr_assert_not_null(strstr(out, "3 ranks on GPU0 GPU2 GPU3"), "%s", out);
  cr_assert_null(strstr(out, "GPU5"), "%s", out);
  free(out);
}

Test(topo_schedule, save_loads_back) {
  char args[512], path[192];
  snprintf(path, sizeof(path), "%s/ring.json", dir);
  snprintf(args, sizeof(args),
           "--machine dgx1-v100 --coll allreduce --size 1M --algo ring "
           "--save '%s'",
           path);
  cr_assert_eq(tool(args), 0);
  sched **s = NULL;
  int n = 0;
  cr_assert_eq(sched_file_load(path, &s, &n), 0, "%s", err_msg());
  cr_assert_eq(n, 1);
  cr_assert_str_eq(s[0]->algo, "ring");
  cr_assert_eq(s[0]->coll, SCHED_ALLREDUCE);
  cr_assert_eq(s[0]->nranks, 8);
  sched_free(s[0]);
  free(s);

  /* without --algo: the selected generator's schedule */
  snprintf(args, sizeof(args),
           "--machine dgx1-v100 --coll allgather --size 32M --save '%s'", path);
  cr_assert_eq(tool(args), 0);
  char *out = slurp(outp);
  cr_assert_eq(sched_file_load(path, &s, &n), 0, "%s", err_msg());
  char row[256];
  cr_assert(find_row(out, s[0]->algo, row, sizeof(row)), "%s", out);
  cr_assert_not_null(strstr(row, "<- selected"), "saved %s, table:\n%s",
                     s[0]->algo, out);
  cr_assert_eq(s[0]->coll, SCHED_ALLGATHER);
  sched_free(s[0]);
  free(s);
  free(out);
}

Test(topo_schedule, render_dot_one_edge_per_ring_step) {
  char args[512], dot[192], js[192];
  snprintf(dot, sizeof(dot), "%s/ring.dot", dir);
  snprintf(js, sizeof(js), "%s/ring.json", dir);
  snprintf(args, sizeof(args),
           "--machine dgx1-v100 --coll allreduce --size 8M --algo ring "
           "--save '%s' --render dot -o '%s'",
           js, dot);
  cr_assert_eq(tool(args), 0);
  sched **s = NULL;
  int n = 0;
  cr_assert_eq(sched_file_load(js, &s, &n), 0, "%s", err_msg());
  char *text = slurp(dot);
  cr_assert_eq(strncmp(text, "digraph", 7), 0);
  /* a ring of n ranks has n hops per channel: one labelled edge each */
  int want = 0;
  for (int c = 0; c < s[0]->nchannels; c++) {
    char lab[32];
    snprintf(lab, sizeof(lab), "label=\"c%d ", c);
    int got = 0;
    for (const char *p = text; (p = strstr(p, lab)); p++)
      got++;
    cr_assert_eq(got, s[0]->nranks, "channel %d: %d edges, ring of %d", c, got,
                 s[0]->nranks);
    /* each hop r -> r+1 (even channels) or r -> r-1 (odd) */
    for (int r = 0; r < s[0]->nranks; r++) {
      int to = (c % 2 == 0) ? (r + 1) % 8 : (r + 7) % 8;
      char edge[96];
      snprintf(edge, sizeof(edge), "\"GPU%d\" -> \"GPU%d\" [color", r, to);
      cr_assert_not_null(strstr(text, edge), "no edge %s", edge);
    }
    want += got;
  }
  cr_assert_eq(want, 8 * s[0]->nchannels);
  free(text);
  sched_free(s[0]);
  free(s);
}

Test(topo_schedule, render_svg) {
  if (system("command -v dot >/dev/null 2>&1") != 0)
    skip("Graphviz 'dot' is not installed");
  char args[512], svg[192];
  snprintf(svg, sizeof(svg), "%s/s.svg", dir);
  snprintf(args, sizeof(args),
           "--machine dgx1-v100 --gpus 0,1,2,3 --coll allreduce --size 1M "
           "--render svg -o '%s'",
           svg);
  cr_assert_eq(tool(args), 0);
  char *text = slurp(svg);
  cr_assert_not_null(strstr(text, "<svg"));
  cr_assert_not_null(strstr(text, "GPU3"));
  free(text);
}

static void expect_bad(const char *args, const char *want) {
  int rc = tool(args);
  char *err = slurp(errp);
  cr_assert_eq(rc, 2, "%s: exit %d (%s)", args, rc, err);
  cr_assert_not_null(strstr(err, want), "%s: '%s' lacks '%s'", args, err, want);
  free(err);
}

Test(topo_schedule, bad_arguments) {
  expect_bad("--machine nope --coll allreduce --size 1M",
             "unknown machine 'nope'");
  expect_bad("--machine dgx1-v100 --gpus 0,9 --coll allreduce --size 1M",
             "GPU 9");
  expect_bad("--machine dgx1-v100 --gpus 0,x --coll allreduce --size 1M",
             "bad GPU list '0,x'");
  expect_bad("--machine dgx1-v100 --coll allscatter --size 1M",
             "unknown collective 'allscatter'");
  expect_bad("--machine dgx1-v100 --gpus 0,5,6 --coll allreduce --size 1M "
             "--algo hybrid",
             "no NVLink ring through every rank (with BRAID_ALGO=hybrid braid "
             "keeps its usual choice");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M --algo hybrid "
             "--channels 1",
             "hybrid needs two channels or more");
  expect_bad("--machine pcie-4gpu --coll send --size 1M",
             "send takes no schedule");
  expect_bad("--machine pcie-4gpu --coll recv --size 1M --save x.json",
             "recv takes no schedule");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M -o x.svg",
             "-o x.svg names the picture of --render, which is not given");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 0x10",
             "bad size '0x10'");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 12Q",
             "bad size '12Q'");
  expect_bad("--machine dgx1-v100 --coll allreduce --size -4K",
             "bad size '-4K'");
  expect_bad("--machine dgx1-v100 --coll allreduce", "--size is required");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M --algo nope",
             "unknown algorithm 'nope'");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M --dtype f128",
             "unknown dtype 'f128'");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M --render gif -o x",
             "bad format 'gif'");
  expect_bad("--machine dgx1-v100 --coll allreduce --size 1M --bogus 1",
             "unknown option '--bogus'");
  expect_bad("--machine pcie-4gpu --coll allgather --size 1M --algo treepack",
             "'treepack' does not support allgather");
}

/* A generator that cannot plan the call says why, and the tool prints it:
 * hier on one host, hybrid for a collective it does not generate. */
Test(topo_schedule, refused_algorithm_says_why) {
  cr_assert_eq(
      tool("--machine dgx1-v100 --coll allreduce --size 1M --algo hier"), 2);
  char *err = slurp(errp);
  cr_assert_not_null(strstr(err, "hier needs ranks on two hosts or more"), "%s",
                     err);
  free(err);
  cr_assert_eq(
      tool("--machine dgx1-v100 --coll broadcast --size 1M --algo hybrid"), 2);
  err = slurp(errp);
  cr_assert_not_null(strstr(err, "hybrid does not generate broadcast"), "%s",
                     err);
  free(err);
}

Test(topo_schedule, sizes_with_suffixes) {
  cr_assert_eq(tool("--machine pcie-4gpu --coll allreduce --size 4K --dtype "
                    "float64 --algo ring"),
               0);
  char *out = slurp(outp);
  cr_assert_not_null(strstr(out, "(512 x float64 per rank)"), "%s", out);
  free(out);
  cr_assert_eq(tool("--machine pcie-4gpu --coll allgather --size 1G --algo "
                    "ring"),
               0);
  out = slurp(outp);
  /* 1 GiB of output over 4 ranks of float32: 2^30 / 4 / 4 elements each */
  cr_assert_not_null(strstr(out, "(67108864 x float32 per rank and block)"),
                     "%s", out);
  free(out);
}

/* The generator after "braid runs " in the tool's output, into name. */
static int runs_line(const char *out, char *name, size_t n) {
  const char *p = strstr(out, "\nbraid runs ");
  if (!p)
    return 0;
  p += strlen("\nbraid runs ");
  size_t k = strcspn(p, " ");
  snprintf(name, n, "%.*s", (int)k, p);
  return 1;
}

/* The path the tool prints for device buffers ("on device buffers, path
 * X:"), copied into name; 0 when absent. */
static int path_line(const char *out, char *name, size_t n) {
  const char *p = strstr(out, "\non device buffers, path ");
  if (!p)
    return 0;
  p += strlen("\non device buffers, path ");
  size_t k = strcspn(p, ":");
  snprintf(name, n, "%.*s", (int)k, p);
  return 1;
}

/* The tool and the library agree: on every shipped machine model, for every
 * collective a topology-aware generator serves and sizes from 4 KiB to
 * 256 MiB, the generator braid-topo says braid runs is the planner's
 * choice for the library's defaults on those GPUs (plan_select, which
 * src/executor.c calls for every call), the one marked selected in its
 * table, and never an opt-in generator (hybrid) unless --algo names it;
 * the path it prints for device buffers is the runtime's size rule
 * (plan_device_path, which src/exec_plan.c applies) with the default
 * settings, kernels where the ranks are on one host and at most 8. */
Test(topo_schedule, tool_and_library_agree_on_every_model, .timeout = 240) {
  const sched_coll colls[] = {SCHED_ALLREDUCE, SCHED_ALLGATHER,
                              SCHED_REDUCE_SCATTER, SCHED_BROADCAST};
  const char *sizes[] = {"4K", "1M", "256M"};
  const size_t sizes_b[] = {4096, 1u << 20, 256u << 20};
  int checked = 0;
  for (const char *const *m = topo_model_names(); *m; m++) {
    topo_graph *g = NULL;
    cr_assert_eq(topo_model_load(*m, &g), BRAID_SUCCESS, "%s: %s", *m,
                 err_msg());
    sched_view *v = NULL;
    if (view_gpus(g, NULL, 0, &v) != BRAID_SUCCESS) { /* a model without
                                                        GPUs (cpu-2socket) */
      topo_graph_free(g);
      continue;
    }
    for (size_t c = 0; c < sizeof colls / sizeof *colls; c++)
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int split =
            colls[c] == SCHED_ALLGATHER || colls[c] == SCHED_REDUCE_SCATTER;
        size_t bytes = sizes_b[s] / 4 / (split ? (size_t)v->nranks : 1) * 4;
        plan_request rq;
        plan_request_defaults(&rq, colls[c], v->nranks, bytes, v, 1);
        const gen_desc *want = NULL;
        cr_assert_eq(plan_select(&rq, &want), BRAID_SUCCESS, "%s %s %s: %s", *m,
                     sched_coll_name(colls[c]), sizes[s], err_msg());
        cr_expect_eq(want->flags & GEN_OPT_IN, 0u,
                     "%s: the planner chose opt-in %s unasked", *m, want->name);
        char args[256], got[32] = "", row[256];
        snprintf(args, sizeof args, "--machine %s --coll %s --size %s", *m,
                 sched_coll_name(colls[c]), sizes[s]);
        cr_assert_eq(tool(args), 0, "%s", args);
        char *out = slurp(outp);
        cr_assert(runs_line(out, got, sizeof got), "%s: no 'braid runs':\n%s",
                  args, out);
        cr_expect_str_eq(got, want->name,
                         "%s: the tool says %s, the planner %s", args, got,
                         want->name);
        cr_expect(find_row(out, want->name, row, sizeof row) &&
                      strstr(row, "<- selected"),
                  "%s: %s not marked selected:\n%s", args, want->name, out);
        int kernels = v->nhosts == 1 && v->nranks <= 8;
        plan_path dp =
            plan_device_path(colls[c], v->nranks, bytes, kernels ? SIZE_MAX : 0,
                             PLAN_CUDA_HOST_MAX_DEFAULT, NULL);
        char path[32] = "";
        cr_assert(path_line(out, path, sizeof path), "%s: no path:\n%s", args,
                  out);
        cr_expect_str_eq(path, plan_path_name(dp),
                         "%s: the tool says path %s, the planner %s", args,
                         path, plan_path_name(dp));
        /* the kernel path shows the schedule the kernels execute, verified */
        cr_expect((dp == PLAN_PATH_KERNEL) ==
                      (strstr(out, "the kernels execute the direct schedule "
                                   "(one channel") != NULL &&
                       strstr(out, "verified, folds in rank order") != NULL),
                  "%s: path %s, and the kernels' schedule:\n%s", args, path,
                  out);
        free(out);
        checked++;
      }
    view_free(v);
    topo_graph_free(g);
  }
  cr_expect_geq(checked, 24, "only %d cases checked", checked);
  /* with --algo naming it, the opt-in generator runs */
  cr_assert_eq(tool("--machine dgx1-v100 --coll allreduce --size 64M --algo "
                    "hybrid"),
               0);
  char *out = slurp(outp);
  char got[32] = "";
  cr_expect(runs_line(out, got, sizeof got) && !strcmp(got, "hybrid"),
            "--algo hybrid: braid runs '%s':\n%s", got, out);
  free(out);
}

/* A large plan (hybrid on 8 GPUs, 8 channels: 64 edges) is drawn as one
 * panel per channel plus the machine's links, with no label on any edge:
 * every channel's panel holds exactly that channel's ring steps. */
Test(topo_schedule, render_large_plan_one_panel_per_channel) {
  char args[512], dot[192], js[192];
  snprintf(dot, sizeof(dot), "%s/hybrid.dot", dir);
  snprintf(js, sizeof(js), "%s/hybrid.json", dir);
  snprintf(args, sizeof(args),
           "--machine dgx1-v100 --coll allreduce --size 256M --algo hybrid "
           "--channels 8 --save '%s' --render dot -o '%s'",
           js, dot);
  cr_assert_eq(tool(args), 0);
  sched **s = NULL;
  int n = 0;
  cr_assert_eq(sched_file_load(js, &s, &n), 0, "%s", err_msg());
  int nch = s[0]->nchannels, nr = s[0]->nranks;
  cr_assert_geq(nch, 4, "hybrid made %d channels", nch);
  char *text = slurp(dot);
  cr_expect_null(strstr(text, "label=\"c0 "), "edges still labelled");
  for (int p = 0; p <= nch; p++) {
    char title[32], edge[32];
    snprintf(title, sizeof title, "p%d_title", p);
    cr_expect_not_null(strstr(text, title), "no panel %d", p);
    if (p == 0)
      continue;
    /* a ring of nr ranks: nr edges in this panel, none elsewhere */
    snprintf(edge, sizeof edge, "\n  p%d_r", p);
    int edges = 0;
    for (const char *q = text; (q = strstr(q, edge)); q++)
      if (strstr(q, " -> ") && strstr(q, " -> ") < strchr(q + 1, '\n'))
        edges++;
    cr_expect_eq(edges, nr, "panel %d: %d edges, a ring of %d", p, edges, nr);
  }
  free(text);
  for (int i = 0; i < n; i++)
    sched_free(s[i]);
  free(s);
}
