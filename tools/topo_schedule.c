/*
 * braid-topo schedule: every generator's schedule for one collective on a
 * machine model (or a file, some of its GPUs, or a cluster of N copies),
 * checked by the verifier and timed by the simulator, with the selector's
 * pick marked. --save writes the pick (or --algo's schedule) as JSON,
 * --render draws its channels on the machine's GPUs with Graphviz.
 */
#include "tools/topo_schedule.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "braid.h"
#include "collectives/generators.h"
#include "collectives/plan.h"
#include "collectives/sched_file.h"
#include "collectives/select.h"
#include "collectives/sim.h"
#include "collectives/verify.h"
#include "collectives/view.h"
#include "src/log.h"
#include "tools/topo_dot.h"
#include "topology/topo.h"

#define MAX_GPUS 64

typedef struct sopts {
  const char *machine, *file, *coll_s, *size_s, *algo, *dtype_s, *save, *render,
      *out;
  int gpus[MAX_GPUS], ngpus, hosts, channels, det;
  double nic_bw;
  sched_coll coll;
  braid_dtype dt;
  size_t size;
} sopts;

__attribute__((format(printf, 1, 2))) static int bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "braid-topo schedule: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

/* "256M", "1G", "4096", "64KiB": bytes (powers of 1024). 0 when bad. */
size_t topo_parse_size(const char *s) {
  char *e;
  if (strpbrk(s, "xXpP")) /* strtod's hexadecimal */
    return 0;
  errno = 0;
  double v = strtod(s, &e);
  if (e == s || errno || !(v > 0))
    return 0;
  double mul = 1;
  switch (*e) {
  case 'k':
  case 'K':
    mul = 1024.0;
    e++;
    break;
  case 'm':
  case 'M':
    mul = 1024.0 * 1024;
    e++;
    break;
  case 'g':
  case 'G':
    mul = 1024.0 * 1024 * 1024;
    e++;
    break;
  default:
    break;
  }
  if (mul > 1 && *e == 'i')
    e++;
  if (*e == 'B' || *e == 'b')
    e++;
  if (*e || v * mul > 1e15 || v * mul < 1)
    return 0;
  return (size_t)(v * mul);
}

static int parse_coll(const char *s, sched_coll *out) {
  for (int c = 0; c < SCHED_NUM_COLLS; c++)
    if (!strcasecmp(s, sched_coll_name((sched_coll)c))) {
      *out = (sched_coll)c;
      return 0;
    }
  if (!strcasecmp(s, "reducescatter")) {
    *out = SCHED_REDUCE_SCATTER;
    return 0;
  }
  return -1;
}

static int parse_gpus(const char *s, sopts *o) {
  const char *p = s;
  o->ngpus = 0;
  while (*p) {
    char *e;
    errno = 0;
    long v = strtol(p, &e, 10);
    if (e == p || errno || v < 0 || v > 1 << 20 || (*e && *e != ','))
      return bad("--gpus: bad GPU list '%s' (e.g. 0,2,3)", s);
    if (o->ngpus == MAX_GPUS)
      return bad("--gpus: more than %d GPUs in '%s'", MAX_GPUS, s);
    o->gpus[o->ngpus++] = (int)v;
    p = *e ? e + 1 : e;
    if (*e && !*p)
      return bad("--gpus: bad GPU list '%s' (e.g. 0,2,3)", s);
  }
  return o->ngpus ? 0 : bad("--gpus: empty GPU list");
}

static int parse_args(int argc, char **argv, sopts *o) {
  memset(o, 0, sizeof(*o));
  o->hosts = 1;
  o->channels = PLAN_DEFAULT_CHANNELS;
  o->dt = BRAID_FLOAT32;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    static const char *const names[] = {
        "--machine",      "-m",       "--file",   "-f",
        "--coll",         "--size",   "--algo",   "--dtype",
        "--save",         "--render", "-o",       "--gpus",
        "--hosts",        "--nic-bw", "--output", "--channels",
        "--deterministic"};
    size_t k = 0, nn = sizeof(names) / sizeof(names[0]);
    while (k < nn && strcmp(a, names[k]) != 0)
      k++;
    if (k == nn)
      return bad("unknown option '%s'", a);
    if (i + 1 >= argc)
      return bad("%s needs a value", a);
    const char *v = argv[++i];
    const char **dst[] = {
        &o->machine, &o->machine, &o->file, &o->file,   &o->coll_s, &o->size_s,
        &o->algo,    &o->dtype_s, &o->save, &o->render, &o->out,    NULL,
        NULL,        NULL,        &o->out,  NULL,       NULL};
    if (dst[k]) {
      *dst[k] = v;
      continue;
    }
    if (!strcmp(a, "--gpus")) {
      if (parse_gpus(v, o))
        return 2;
      continue;
    }
    char *e;
    double d = strtod(v, &e);
    if (*e || e == v || !(d > 0))
      return bad("%s: bad value '%s'", a, v);
    if (!strcmp(a, "--hosts")) {
      if (d > 4096 || d != (int)d) /* the range first: (int) of inf is UB */
        return bad("--hosts: bad value '%s' (a whole number, 1 to 4096)", v);
      o->hosts = (int)d;
    } else if (!strcmp(a, "--channels")) {
      if (d > 32 || d != (int)d)
        return bad("--channels: bad value '%s' (1 to 32, as BRAID_NCHANNELS)",
                   v);
      o->channels = (int)d;
    } else if (!strcmp(a, "--deterministic")) {
      if (d != 1)
        return bad("--deterministic: bad value '%s' (1, as "
                   "BRAID_DETERMINISTIC)",
                   v);
      o->det = 1;
    } else
      o->nic_bw = d;
  }
  if (!o->coll_s)
    return bad("--coll is required (allreduce, allgather, ...)");
  if (parse_coll(o->coll_s, &o->coll))
    return bad("unknown collective '%s'", o->coll_s);
  if (o->coll == SCHED_SEND || o->coll == SCHED_RECV)
    return bad("%s takes no schedule: braid_send and braid_recv run as one "
               "message between two ranks (docs/SCHEDULES.md, \"linear\")",
               o->coll_s);
  if (!o->size_s)
    return bad("--size is required (e.g. 256M)");
  if (!(o->size = topo_parse_size(o->size_s)))
    return bad("bad size '%s' (bytes, with K, M or G)", o->size_s);
  if (o->dtype_s) {
    int dt = -1;
    for (int t = 0; t < BRAID_NUM_DTYPES; t++)
      if (!strcasecmp(o->dtype_s, braid_dtype_name((braid_dtype)t)))
        dt = t;
    if (dt < 0)
      return bad("unknown dtype '%s'", o->dtype_s);
    o->dt = (braid_dtype)dt;
  }
  if (o->algo && !gen_find(o->algo))
    return bad("unknown algorithm '%s'", o->algo);
  if (o->render && strcmp(o->render, "svg") && strcmp(o->render, "png") &&
      strcmp(o->render, "dot"))
    return bad("--render: bad format '%s' (svg, png or dot)", o->render);
  if (o->out && !o->render)
    return bad("-o %s names the picture of --render, which is not given",
               o->out);
  if (o->render && !o->out)
    return bad("--render needs -o OUT");
  if (o->machine && o->file)
    return bad("give --machine or --file, not both");
  return 0;
}

/* ---- the graph and the view ---- */

static topo_graph *load_graph(const sopts *o, int *rc) {
  topo_graph *g = NULL;
  braid_result r;
  *rc = 2;
  if (o->file)
    r = topo_load(o->file, TOPO_FMT_AUTO, &g);
  else if (o->machine)
    r = topo_model_load(o->machine, &g);
  else {
    r = topo_detect(&g);
    *rc = 1;
  }
  if (r != BRAID_SUCCESS) {
    if (o->machine)
      bad("unknown machine '%s': %s", o->machine, err_msg());
    else
      fprintf(stderr, "braid-topo schedule: %s\n", err_msg());
    return NULL;
  }
  if (o->hosts > 1) {
    topo_graph *c = NULL;
    r = topo_cluster(g, o->hosts, o->nic_bw, &c);
    topo_graph_free(g);
    if (r != BRAID_SUCCESS) {
      bad("--hosts %d: %s", o->hosts, err_msg());
      return NULL;
    }
    g = c;
  }
  return g;
}

static const char *rname(const sched_view *v, int r) {
  return v->g->v[v->vertex[r]].name;
}

/* ---- channels ---- */

/* Distinct receivers of rank r's messages on channel c: the first `max`
 * are stored in t; past max the count may include repeats (callers only ask
 * whether there is exactly one). */
static int targets(const sched *s, int r, int c, int *t, int max) {
  const sched_channel *ch = sched_chan_c(s, r, c);
  int n = 0;
  for (int k = 0; k < ch->nsteps; k++) {
    const sched_step *st = &ch->steps[k];
    int to = st->prim == SCHED_P_SEND ? st->peer
             : (st->prim == SCHED_P_RECV_REDUCE_SEND ||
                st->prim == SCHED_P_RECV_COPY_SEND)
                 ? st->peer_out
                 : -1;
    if (to < 0)
      continue;
    int seen = 0;
    for (int i = 0; i < n && i < max; i++)
      seen |= t[i] == to;
    if (!seen && n < max)
      t[n++] = to;
    else if (!seen)
      n++;
  }
  return n;
}

/* Prints channel c as a ring, a tree or step counts. */
static void print_channel(const sched *s, int c, const sched_view *v) {
  int n = s->nranks;
  printf("    channel %-2d weight %.4f  route %-4s ", c, s->weights[c],
         sched_route_name((sched_route)s->route[c]));
  int *next = malloc((size_t)n * sizeof(int));
  int *par = malloc((size_t)n * sizeof(int));
  char *A = calloc((size_t)n * (size_t)n, 1);
  if (!next || !par || !A) {
    printf("(out of memory)\n");
    free(next);
    free(par);
    free(A);
    return;
  }
  int ring = n >= 2, edges = 0, msgs_min = 1 << 30, msgs_max = 0;
  for (int r = 0; r < n; r++) {
    int t[4];
    int nt = targets(s, r, c, t, 4);
    ring &= nt == 1;
    next[r] = nt >= 1 ? t[0] : -1;
    int ns = sched_chan_c(s, r, c)->nsteps;
    msgs_min = ns < msgs_min ? ns : msgs_min;
    msgs_max = ns > msgs_max ? ns : msgs_max;
    const sched_channel *ch = sched_chan_c(s, r, c);
    for (int k = 0; k < ch->nsteps; k++) {
      const sched_step *st = &ch->steps[k];
      int ends[2] = {st->peer, st->peer_out};
      for (int e = 0; e < 2; e++)
        if (ends[e] >= 0 && ends[e] < n && ends[e] != r &&
            !A[r * n + ends[e]]) {
          A[r * n + ends[e]] = A[ends[e] * n + r] = 1;
          edges++;
        }
    }
  }
  if (ring) { /* one cycle through every rank? */
    int r = 0, len = 0;
    do {
      r = next[r];
      len++;
    } while (r > 0 && len <= n);
    ring = r == 0 && len == n;
  }
  if (ring) {
    printf("ring ");
    int r = 0;
    do {
      printf("%s ", rname(v, r));
      r = next[r];
    } while (r != 0);
    printf("%s\n", rname(v, 0));
  } else if (edges == n - 1 && n >= 2) { /* a spanning tree? BFS */
    int root = (s->coll == SCHED_BROADCAST || s->coll == SCHED_REDUCE ||
                s->coll == SCHED_GATHER || s->coll == SCHED_SCATTER)
                   ? s->root
                   : 0;
    for (int r = 0; r < n; r++)
      par[r] = -2;
    par[root] = -1;
    next[0] = root; /* BFS queue */
    int qh = 0, qt = 1;
    while (qh < qt) {
      int u = next[qh++];
      for (int w = 0; w < n; w++)
        if (A[u * n + w] && par[w] == -2) {
          par[w] = u;
          next[qt++] = w;
        }
    }
    if (qt == n) {
      printf("tree, parent of each rank:");
      for (int r = 0; r < n; r++)
        printf(" %s<%s", rname(v, r), par[r] < 0 ? "root" : rname(v, par[r]));
      printf("\n");
    } else
      printf("steps per rank %d..%d\n", msgs_min, msgs_max);
  } else
    printf("steps per rank %d..%d, %d links used\n", msgs_min, msgs_max, edges);
  free(next);
  free(par);
  free(A);
}

/* ---- rendering ---- */

static const char *const palette[] = {
    "#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00", "#a65628",
    "#f781bf", "#17becf", "#bcbd22", "#1f78b4", "#33a02c", "#6a3d9a"};

static int write_dot(FILE *f, const sched *s, const sched_view *v,
                     const char *title) {
  const topo_graph *g = v->g;
  int n = s->nranks;
  char e[512], ea[2 * sizeof g->v[0].name], eb[sizeof ea];
  fprintf(f, "digraph braid_schedule {\n");
  fprintf(f,
          "  graph [label=\"%s\", labelloc=t, fontname=\"Helvetica\", "
          "layout=circo];\n",
          topo_dot_esc(title, e, sizeof e));
  fprintf(f, "  node [shape=box, style=filled, fontname=\"Helvetica\"];\n");
  fprintf(f, "  edge [fontname=\"Helvetica\", fontsize=9];\n");
  for (int i = 0; i < topo_count(g, TOPO_GPU); i++) {
    int id = topo_nth(g, TOPO_GPU, i), used = 0;
    for (int r = 0; r < n; r++)
      used |= v->vertex[r] == id;
    fprintf(f, "  \"%s\" [fillcolor=\"%s\"];\n",
            topo_dot_esc(g->v[id].name, ea, sizeof ea),
            used ? "#76b900" : "#eeeeee");
  }
  /* the machine: direct GPU-GPU links, grey, undirected */
  for (int l = 0; l < g->nl; l++) {
    const topo_link *k = &g->links[l];
    if (g->v[k->a].type != TOPO_GPU || g->v[k->b].type != TOPO_GPU)
      continue;
    fprintf(f,
            "  \"%s\" -> \"%s\" [dir=none, color=\"#c8c8c8\", "
            "style=dashed, penwidth=%d];\n",
            topo_dot_esc(g->v[k->a].name, ea, sizeof ea),
            topo_dot_esc(g->v[k->b].name, eb, sizeof eb), k->count > 1 ? 3 : 1);
  }
  /* the schedule: one edge per (sender, receiver) of each channel */
  int *t = malloc((size_t)n * sizeof(int));
  if (!t)
    return -1;
  for (int c = 0; c < s->nchannels; c++) {
    const char *col = palette[c % (int)(sizeof(palette) / sizeof(palette[0]))];
    for (int r = 0; r < n; r++) {
      int nt = targets(s, r, c, t, n);
      for (int i = 0; i < nt && i < n; i++)
        fprintf(f,
                "  \"%s\" -> \"%s\" [color=\"%s\", fontcolor=\"%s\", "
                "label=\"c%d %.3f\"];\n",
                topo_dot_esc(rname(v, r), ea, sizeof ea),
                topo_dot_esc(rname(v, t[i]), eb, sizeof eb), col, col, c,
                s->weights[c]);
    }
  }
  free(t);
  fprintf(f, "}\n");
  return ferror(f) ? -1 : 0;
}

/* Plans with more edges than this are drawn one panel per channel. */
#define RENDER_EDGES_ONE_PICTURE 16

/* A large plan, legibly: a grid of panels, the first the machine's GPU
 * links, then one per channel holding only that channel's edges, every
 * panel with the ranks at the same places on a circle; each channel's
 * weight and route in its panel's title instead of on every edge. */
static int write_dot_panels(FILE *f, const sched *s, const sched_view *v,
                            const char *title) {
  const topo_graph *g = v->g;
  int n = s->nranks, np = s->nchannels + 1, cols = 1;
  while (cols * cols < np)
    cols++;
  const double side = 300, radius = 105;
  char e[512], ea[2 * sizeof g->v[0].name];
  fprintf(f, "digraph braid_schedule {\n");
  fprintf(f,
          "  graph [label=\"%s\", labelloc=t, fontname=\"Helvetica\", "
          "fontsize=18, layout=neato, inputscale=72, splines=true];\n",
          topo_dot_esc(title, e, sizeof e));
  fprintf(f, "  node [shape=box, style=filled, fontname=\"Helvetica\", "
             "fontsize=10, width=0.5, height=0.3, fixedsize=true];\n");
  fprintf(f, "  edge [arrowsize=0.6];\n");
  int *t = malloc((size_t)n * sizeof(int));
  if (!t)
    return -1;
  for (int p = 0; p < np; p++) {
    double cx = (p % cols) * side, cy = -(p / cols) * side;
    int c = p - 1;
    const char *col =
        c < 0 ? "#888888"
              : palette[c % (int)(sizeof(palette) / sizeof(palette[0]))];
    if (c < 0)
      fprintf(f,
              "  p0_title [shape=plaintext, style=\"\", width=2.5, "
              "label=\"the machine's GPU links\", pos=\"%.0f,%.0f!\"];\n",
              cx, cy + radius + 40);
    else
      fprintf(f,
              "  p%d_title [shape=plaintext, style=\"\", width=2.5, "
              "fontcolor=\"%s\", label=\"channel %d: weight %.3f, route "
              "%s\", pos=\"%.0f,%.0f!\"];\n",
              p, col, c, s->weights[c],
              sched_route_name((sched_route)s->route[c]), cx, cy + radius + 40);
    for (int r = 0; r < n; r++) {
      double a = 2 * 3.14159265358979 * r / n;
      fprintf(f,
              "  p%d_r%d [label=\"%s\", fillcolor=\"#76b900\", "
              "pos=\"%.0f,%.0f!\"];\n",
              p, r, topo_dot_esc(rname(v, r), ea, sizeof ea),
              cx + radius * sin(a), cy + radius * cos(a));
    }
    if (c < 0) { /* links between the ranks' GPUs, NVLink bonds thicker */
      for (int l = 0; l < g->nl; l++) {
        const topo_link *k = &g->links[l];
        int ra = -1, rb = -1;
        for (int r = 0; r < n; r++) {
          if (v->vertex[r] == k->a)
            ra = r;
          if (v->vertex[r] == k->b)
            rb = r;
        }
        if (ra >= 0 && rb >= 0)
          fprintf(f,
                  "  p0_r%d -> p0_r%d [dir=none, color=\"#888888\", "
                  "penwidth=%d];\n",
                  ra, rb, k->count > 1 ? 3 : 1);
      }
      continue;
    }
    for (int r = 0; r < n; r++) {
      int nt = targets(s, r, c, t, n);
      for (int i = 0; i < nt && i < n; i++)
        fprintf(f, "  p%d_r%d -> p%d_r%d [color=\"%s\"];\n", p, r, p, t[i],
                col);
    }
  }
  free(t);
  fprintf(f, "}\n");
  return ferror(f) ? -1 : 0;
}

/* The plan's edges (sender, receiver, channel) counted. */
static int count_edges(const sched *s) {
  int n = s->nranks, total = 0;
  int *t = malloc((size_t)n * sizeof(int));
  if (!t)
    return 0;
  for (int c = 0; c < s->nchannels; c++)
    for (int r = 0; r < n; r++)
      total += targets(s, r, c, t, n);
  free(t);
  return total;
}

/* The picture of a plan: one for a small plan, panels for a large one. */
static int write_plan(FILE *f, const sched *s, const sched_view *v,
                      const char *title) {
  return count_edges(s) > RENDER_EDGES_ONE_PICTURE
             ? write_dot_panels(f, s, v, title)
             : write_dot(f, s, v, title);
}

static int render(const sopts *o, const sched *s, const sched_view *v) {
  char title[256];
  snprintf(title, sizeof(title), "%s: %s %s, %s (%d channels)", v->g->name,
           sched_coll_name(s->coll), o->size_s, s->algo, s->nchannels);
  if (!strcmp(o->render, "dot")) {
    FILE *f = strcmp(o->out, "-") ? fopen(o->out, "w") : stdout;
    int open_err = f ? 0 : errno;
    int rc = !f || write_plan(f, s, v, title);
    if (f && f != stdout && fclose(f))
      rc = 1;
    if (rc)
      fprintf(stderr, "braid-topo schedule: cannot write %s%s%s\n", o->out,
              open_err ? ": " : "", open_err ? strerror(open_err) : "");
    return rc;
  }
  char tmp[] = "/tmp/braid-schedule-XXXXXX.dot";
  int fd = mkstemps(tmp, 4);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  int rc;
  if (!f || write_plan(f, s, v, title) || fclose(f)) {
    fprintf(stderr, "braid-topo schedule: cannot write a temporary file\n");
    rc = 1;
  } else
    rc = topo_run_dot("braid-topo schedule", o->render, tmp, o->out);
  if (fd >= 0)
    unlink(tmp);
  return rc;
}

/* ---- the table ---- */

typedef struct row {
  const gen_desc *g;
  sched *s;
  int verified;
  char verr[512];
  int simmed;
  sim_result res;
  char note[256];
} row;

static void human(double us, char *b, size_t n) {
  if (us >= 1e6)
    snprintf(b, n, "%.3f s", us / 1e6);
  else if (us >= 1e3)
    snprintf(b, n, "%.3f ms", us / 1e3);
  else
    snprintf(b, n, "%.2f us", us);
}

/* The schedule the collective kernels execute (the direct one, one
 * channel: device/kcoll_chunk.h follows it, tests/collectives/
 * test_kcoll_direct.c), and what the verifier says of it. */
static void kernel_sched(sched_coll coll, int n, int root) {
  gen_params p = {.coll = coll, .nranks = n, .root = root, .nchannels = 1};
  sched *s = NULL;
  braid_result r = gen_build(gen_find("direct"), &p, &s);
  if (r == BRAID_SUCCESS)
    r = verify_sched(s, 0, 2);
  if (r == BRAID_SUCCESS)
    r = verify_rank_order(s, 0);
  if (r == BRAID_SUCCESS)
    printf("the kernels execute the direct schedule (one channel, %d steps "
           "on rank 0): verified, folds in rank order\n",
           sched_chan_c(s, 0, 0)->nsteps);
  else
    printf("the kernels' direct schedule: %s\n", err_why(r));
  sched_free(s);
}

static int run(const sopts *o, topo_graph *g) {
  sched_view *v = NULL;
  if (view_gpus(g, o->ngpus ? o->gpus : NULL, o->ngpus, &v) != BRAID_SUCCESS)
    return bad("%s", err_msg());
  int n = v->nranks;
  size_t es = braid_dtype_size(o->dt);
  int split = o->coll == SCHED_ALLGATHER || o->coll == SCHED_REDUCE_SCATTER ||
              o->coll == SCHED_GATHER || o->coll == SCHED_SCATTER ||
              o->coll == SCHED_ALLTOALL;
  size_t count = o->size / es / (split ? (size_t)n : 1);
  if (count == 0) {
    view_free(v);
    return bad("bad size '%s': less than one %s element per rank", o->size_s,
               braid_dtype_name(o->dt));
  }
  size_t bytes = count * es;
  if (o->algo) {
    /* the generator's own reason, where it gives one: it may support the
     * view and still decline it when it builds (hybrid without an NVLink
     * ring through every rank, or on one channel) */
    char why[160] = "";
    plan_request rq0;
    plan_request_defaults(&rq0, o->coll, n, bytes, v, 1);
    rq0.max_channels = o->channels;
    gen_params gp = plan_params(&rq0);
    sched *s = NULL;
    int ok = gen_supports_view(gen_find(o->algo), o->coll, n, v);
    braid_result r = gen_build(gen_find(o->algo), &gp, &s);
    if (r != BRAID_SUCCESS)
      snprintf(why, sizeof(why), "%s", err_why(r));
    sched_free(s);
    if (!ok || r != BRAID_SUCCESS) {
      view_free(v);
      return bad("algorithm '%s' does not support %s on this view%s%s (with "
                 "BRAID_ALGO=%s braid keeps its usual choice for this call)",
                 o->algo, sched_coll_name(o->coll), why[0] ? ": " : "", why,
                 o->algo);
    }
  }
  sim_params sp;
  sim_params_gpu(&sp);
  printf("%s, %d ranks on", g->name, n);
  for (int r = 0; r < n && r < 16; r++)
    printf(" %s", rname(v, r));
  printf("%s\n%s of %s (%zu x %s per rank%s)\n", n > 16 ? " ..." : "",
         sched_coll_name(o->coll), o->size_s, count, braid_dtype_name(o->dt),
         split ? " and block" : "");
  double bound = sim_bound_us(o->coll, 0, v, bytes, &sp);
  char hb[32];
  human(bound, hb, sizeof(hb));
  if (bound > 0)
    printf("bound %s\n", hb);

  /* The pick is the library's: the planner (collectives/plan.c) on the
   * ranks' GPUs with the library's defaults, --algo as BRAID_ALGO and
   * --channels as BRAID_NCHANNELS. Every candidate is simulated once for
   * the table (with --algo: that one alone), opt-in ones included. */
  plan_request rq;
  plan_request_defaults(&rq, o->coll, n, bytes, v, 1);
  rq.sim = sp;
  rq.algo = o->algo;
  rq.max_channels = o->channels;
  rq.deterministic = o->det;
  const gen_desc *pick = NULL;
  if (plan_select(&rq, &pick) != BRAID_SUCCESS)
    printf("the library would refuse this call: %s\n", err_msg());
  select_cand cand[32];
  int nc = 0;
  if (o->algo) {
    memset(&cand[0], 0, sizeof(cand[0]));
    cand[0].gen = gen_find(o->algo);
    nc = 1;
  } else {
    select_filter every;
    select_filter_all(&every);
    if (select_sim_table(o->coll, 0, v, bytes, &sp, &every, o->channels, cand,
                         32, &nc) != BRAID_SUCCESS) {
      fprintf(stderr, "braid-topo schedule: %s\n", err_msg());
      view_free(v);
      return 1;
    }
  }
  row rows[32];
  int nr = 0;
  for (int i = 0; i < nc; i++) {
    const gen_desc *gd = cand[i].gen;
    if (!gd)
      continue;
    row *w = &rows[nr++];
    memset(w, 0, sizeof(*w));
    w->g = gd;
    gen_params gp = plan_params(&rq); /* the runtime's parameters */
    braid_result r = gen_build(gd, &gp, &w->s);
    if (r != BRAID_SUCCESS) {
      snprintf(w->note, sizeof(w->note), "%s", err_why(r));
      continue;
    }
    w->verified = verify_sched(w->s, 0, 2) == BRAID_SUCCESS &&
                  verify_sched(w->s, 1, 2) == BRAID_SUCCESS;
    if (!w->verified)
      snprintf(w->verr, sizeof(w->verr), "%s", err_msg());
    if (o->algo) {
      w->simmed = sim_run(w->s, v, bytes, &sp, &w->res) == BRAID_SUCCESS;
      if (!w->simmed)
        snprintf(w->note, sizeof(w->note), "%s", err_msg());
    } else {
      w->simmed = cand[i].ok;
      w->res = cand[i].res;
      snprintf(w->note, sizeof(w->note), "%s", cand[i].note);
    }
  }
  printf("\n%-10s %3s %-9s %12s %10s %10s %12s %6s\n", "algo", "ch", "verified",
         "time", "algbw", "busbw", "bound", "eff");
  for (int i = 0; i < nr; i++) {
    row *w = &rows[i];
    if (!w->s) {
      printf("%-10s  -  %s\n", w->g->name, w->note);
      continue;
    }
    printf("%-10s %3d %-9s ", w->g->name, w->s->nchannels,
           w->verified ? "yes" : "FAILED");
    if (w->simmed) {
      char ht[32], hbd[32];
      char eff[16] = "     -"; /* one rank: nothing to bound */
      human(w->res.time_us, ht, sizeof(ht));
      human(w->res.bound_us, hbd, sizeof(hbd));
      if (w->res.bound_us > 0)
        snprintf(eff, sizeof eff, "%5.1f%%", 100 * w->res.efficiency);
      else
        snprintf(hbd, sizeof hbd, "-");
      printf("%12s %6.2f GB/s %6.2f GB/s %12s %s%s%s\n", ht, w->res.algbw,
             w->res.busbw, hbd, eff, w->g == pick ? "  <- selected" : "",
             w->g != pick && (w->g->flags & GEN_OPT_IN) &&
                     !(o->det && (w->g->flags & GEN_RANK_ORDER))
                 ? "  (opt-in: only with --algo/BRAID_ALGO naming it)"
                 : "");
    } else
      printf("not simulated: %s\n", w->note);
  }
  if (pick) {
    size_t lo = plan_bucket_bytes(bytes);
    printf("\nbraid runs %s for this call: its planner's choice for blocks of "
           "%zu to %zu bytes with BRAID_NCHANNELS=%d%s%s%s%s\n",
           pick->name, lo, lo ? 2 * lo - 1 : 0, o->channels,
           o->algo ? " and BRAID_ALGO=" : "", o->algo ? o->algo : "",
           o->algo ? "" : " (BRAID_ALGO unset)",
           o->det ? " and BRAID_DETERMINISTIC=1" : "");
    /* on device buffers: the runtime's size rule (plan_device_path) with
     * the default settings; the kernels run where every rank is on one
     * host over CUDA IPC, at most 8 (docs/CUDA.md) */
    const char *why = "";
    int kernels = o->hosts == 1 && n <= 8;
    plan_path dp = plan_device_path(o->coll, n, bytes, kernels ? SIZE_MAX : 0,
                                    PLAN_CUDA_HOST_MAX_DEFAULT, &why);
    printf("on device buffers, path %s: %s (with BRAID_CUDA_KERNEL_MAX and "
           "BRAID_CUDA_HOST_MAX unset)\n",
           plan_path_name(dp), why);
    if (dp == PLAN_PATH_KERNEL) {
      printf("on device buffers over CUDA IPC, braid runs %s as collective "
             "kernels instead (direct), unless BRAID_CUDA_KERNEL_MAX is below "
             "the call's size (docs/CUDA.md)\n",
             sched_coll_name(o->coll));
      kernel_sched(o->coll, n, rq.root);
    }
  }
  const row *chosen = NULL;
  for (int i = 0; i < nr; i++) {
    row *w = &rows[i];
    if (!w->s || !w->g)
      continue;
    if (o->algo || w->g == pick)
      chosen = w;
    printf("\n%s: %d channels%s\n", w->g->name, w->s->nchannels,
           w->g == pick ? " (selected)" : "");
    if (!w->verified)
      printf("    verifier: %s\n", w->verr);
    for (int c = 0; c < w->s->nchannels; c++)
      print_channel(w->s, c, v);
  }
  int rc = 0;
  if ((o->save || o->render) && !chosen) {
    fprintf(stderr, "braid-topo schedule: no schedule to %s\n",
            o->save ? "save" : "render");
    rc = 1;
  }
  if (!rc && o->save) {
    if (sched_file_save(chosen->s, o->save) != BRAID_SUCCESS) {
      fprintf(stderr, "braid-topo schedule: %s\n", err_msg());
      rc = 1;
    }
    if (!rc)
      printf("\nsaved %s (%s) to %s\n", chosen->g->name,
             sched_coll_name(o->coll), o->save);
  }
  if (!rc && o->render)
    rc = render(o, chosen->s, v);
  for (int i = 0; i < nr; i++)
    sched_free(rows[i].s);
  view_free(v);
  return rc;
}

int topo_schedule_main(int argc, char **argv) {
  sopts o;
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc;
  topo_graph *g = load_graph(&o, &rc);
  if (!g)
    return rc;
  rc = run(&o, g);
  topo_graph_free(g);
  return rc;
}
