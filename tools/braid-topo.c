/*
 * braid-topo: look at the machine as braid sees it.
 *
 *   braid-topo show    [--file F | --machine M] [--hosts N --nic-bw B]
 *   braid-topo path    A B [--file F | --machine M]
 *   braid-topo render  --format svg|png|dot -o OUT [--file F | --machine M]
 *   braid-topo convert --from F --to G [--format nccl|hwloc|braid]
 *   braid-topo models
 *   braid-topo import  PLAN.xml [-o out.json]  (MSCCL schedules)
 *
 * Without --file or --machine the machine is detected live. Subcommands are
 * rows of one table; a new one (e.g. `schedule`) is one more row.
 */
#include "src/log.h"
#include "tools/topo_dot.h"
#include "tools/topo_import.h"
#include "tools/topo_schedule.h"
#include "topology/topo.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
  const char *file, *machine, *out, *format, *from, *to;
  int hosts;
  double nic_bw;
  const char *pos[4];
  int npos;
  unsigned given; /* OPT_* of the options given */
} opts;

/* The options, as bits: what was given, and what a command takes. */
enum {
  OPT_FILE = 1u << 0,
  OPT_MACHINE = 1u << 1,
  OPT_OUT = 1u << 2,
  OPT_FORMAT = 1u << 3,
  OPT_FROM = 1u << 4,
  OPT_TO = 1u << 5,
  OPT_HOSTS = 1u << 6,
  OPT_NIC_BW = 1u << 7
};
static const char *const opt_names[] = {"--file",   "--machine", "-o",
                                        "--format", "--from",    "--to",
                                        "--hosts",  "--nic-bw"};

typedef struct subcmd {
  const char *name;
  int (*run)(opts *o);
  const char *usage;
  unsigned takes; /* OPT_* it reads */
  int npos;       /* the words it takes besides options */
} subcmd;

static int parse_opts(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof(*o));
  o->hosts = 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = NULL;
    unsigned bit = 0;
    if (!strcmp(a, "--file") || !strcmp(a, "-f"))
      dst = &o->file, bit = OPT_FILE;
    else if (!strcmp(a, "--machine") || !strcmp(a, "-m"))
      dst = &o->machine, bit = OPT_MACHINE;
    else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
      dst = &o->out, bit = OPT_OUT;
    else if (!strcmp(a, "--format"))
      dst = &o->format, bit = OPT_FORMAT;
    else if (!strcmp(a, "--from"))
      dst = &o->from, bit = OPT_FROM;
    else if (!strcmp(a, "--to"))
      dst = &o->to, bit = OPT_TO;
    o->given |= bit;
    if (dst != NULL) {
      /* its value, below */
    } else if (!strcmp(a, "--hosts") || !strcmp(a, "--nic-bw")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "braid-topo: %s needs a value\n", a);
        return -1;
      }
      char *e;
      double v = strtod(argv[++i], &e);
      int hosts = !strcmp(a, "--hosts");
      o->given |= hosts ? OPT_HOSTS : OPT_NIC_BW;
      /* !(v > 0) refuses nan; the range before (int): (int) of inf is UB */
      if (*e || e == argv[i] || !(v > 0) || v > (hosts ? 4096 : 1e6) ||
          (hosts && v != (int)v)) {
        fprintf(stderr, "braid-topo: %s: bad value '%s' (%s)\n", a, argv[i],
                hosts ? "a whole number, 1 to 4096" : "GB/s, above 0");
        return -1;
      }
      if (hosts)
        o->hosts = (int)v;
      else
        o->nic_bw = v;
      continue;
    } else if (a[0] == '-') {
      fprintf(stderr, "braid-topo: unknown option '%s'\n", a);
      return -1;
    } else {
      if (o->npos == 4) {
        fprintf(stderr, "braid-topo: too many arguments\n");
        return -1;
      }
      o->pos[o->npos++] = a;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "braid-topo: %s needs a value\n", a);
      return -1;
    }
    *dst = argv[++i];
  }
  return 0;
}

/* The graph the options name: a file, a model (maybe replicated), or live. */
static topo_graph *get_graph(const opts *o) {
  topo_graph *g = NULL;
  braid_result r;
  if (o->file && o->machine) {
    fprintf(stderr, "braid-topo: give --file or --machine, not both\n");
    return NULL;
  }
  if (o->file)
    r = topo_load(o->file, TOPO_FMT_AUTO, &g);
  else if (o->machine)
    r = topo_model_load(o->machine, &g);
  else
    r = topo_detect(&g);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "braid-topo: %s\n", err_msg());
    return NULL;
  }
  if (o->hosts > 1) {
    topo_graph *c = NULL;
    r = topo_cluster(g, o->hosts, o->nic_bw, &c);
    topo_graph_free(g);
    if (r != BRAID_SUCCESS) {
      fprintf(stderr, "braid-topo: %s\n", err_msg());
      return NULL;
    }
    g = c;
  }
  return g;
}

static int cmd_show(opts *o) {
  topo_graph *g = get_graph(o);
  if (!g)
    return 1;
  topo_print(g, stdout);
  topo_graph_free(g);
  return 0;
}

static int cmd_path(opts *o) {
  topo_graph *g = get_graph(o);
  if (!g)
    return 1;
  int a = topo_find(g, o->pos[0]), b = topo_find(g, o->pos[1]);
  int rc = 0;
  topo_path p;
  if (a < 0 || b < 0) {
    fprintf(stderr, "braid-topo: no vertex '%s'\n",
            a < 0 ? o->pos[0] : o->pos[1]);
    rc = 1;
  } else if (topo_path_get(g, a, b, &p) != BRAID_SUCCESS) {
    fprintf(stderr, "braid-topo: out of memory\n");
    rc = 1;
  } else {
    printf("%s -> %s: %s, %.2f GB/s, %.2f us, %d hops\n", o->pos[0], o->pos[1],
           topo_pclass_name(p.cls), p.bw, p.lat_us, p.nhops);
    for (int i = 0; i < p.nhops; i++) {
      const topo_link *l = &g->links[p.links[i]];
      printf("  %s -> %s  %s x%d %.2f GB/s\n", g->v[p.verts[i]].name,
             g->v[p.verts[i + 1]].name, topo_ltype_name(l->type), l->count,
             l->bw);
    }
    topo_path_release(&p);
  }
  topo_graph_free(g);
  return rc;
}

static int cmd_render(opts *o) {
  const char *fmt = o->format ? o->format : "svg";
  if (strcmp(fmt, "svg") && strcmp(fmt, "png") && strcmp(fmt, "dot")) {
    fprintf(stderr, "braid-topo render: --format svg, png or dot\n");
    return 2;
  }
  if (!o->out) {
    fprintf(stderr, "braid-topo render: -o OUT is required\n");
    return 2;
  }
  topo_graph *g = get_graph(o);
  if (!g)
    return 1;
  int rc = 0;
  if (!strcmp(fmt, "dot")) {
    FILE *f = strcmp(o->out, "-") ? fopen(o->out, "w") : stdout;
    if (!f || topo_write_dot(g, f) != BRAID_SUCCESS) {
      fprintf(stderr, "braid-topo: cannot write %s%s%s\n", o->out,
              f ? "" : ": ", f ? "" : strerror(errno));
      rc = 1;
    }
    if (f && f != stdout && fclose(f))
      rc = 1;
  } else {
    char tmp[] = "/tmp/braid-topo-XXXXXX.dot";
    int fd = mkstemps(tmp, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f || topo_write_dot(g, f) != BRAID_SUCCESS || fclose(f)) {
      fprintf(stderr, "braid-topo: cannot write a temporary file\n");
      rc = 1;
    } else
      rc = topo_run_dot("braid-topo", fmt, tmp, o->out);
    if (fd >= 0)
      unlink(tmp);
  }
  topo_graph_free(g);
  return rc;
}

static int cmd_convert(opts *o) {
  if (!o->from || !o->to) {
    fprintf(stderr, "braid-topo convert: --from F and --to G are required\n");
    return 2;
  }
  int fmt = TOPO_FMT_AUTO;
  if (o->format && (fmt = topo_format_parse(o->format)) < 0) {
    fprintf(stderr, "braid-topo convert: --format nccl, hwloc or braid\n");
    return 2;
  }
  topo_graph *g = NULL;
  if (topo_load(o->from, TOPO_FMT_AUTO, &g) != BRAID_SUCCESS) {
    fprintf(stderr, "braid-topo: %s\n", err_msg());
    return 1;
  }
  int rc = 0;
  if (topo_save(g, o->to, (topo_format)fmt) != BRAID_SUCCESS) {
    fprintf(stderr, "braid-topo: %s\n", err_msg());
    rc = 1;
  }
  topo_graph_free(g);
  return rc;
}

static int cmd_models(opts *o) {
  (void)o;
  const char *const *n = topo_model_names();
  int rc = 0;
  for (int i = 0; n[i]; i++) {
    topo_graph *g = NULL;
    if (topo_model_load(n[i], &g) != BRAID_SUCCESS) {
      printf("%-12s (%s)\n", n[i], err_msg());
      rc = 1; /* a model braid ships is missing: the install is incomplete */
      continue;
    }
    printf("%-12s %-12s %d GPU, %d NIC, %d NUMA, %d PCI switch, %d NVSwitch\n",
           n[i], g->name, topo_count(g, TOPO_GPU), topo_count(g, TOPO_NIC),
           topo_count(g, TOPO_CPU), topo_count(g, TOPO_PCI),
           topo_count(g, TOPO_NVS));
    topo_graph_free(g);
  }
  return rc;
}

static const subcmd cmds[] = {
    {"show", cmd_show,
     "show [--file F | --machine M] [--hosts N [--nic-bw GBps]]\n"
     "      the machine as a tree and the GPU/NIC matrix (nvidia-smi topo -m)",
     OPT_FILE | OPT_MACHINE | OPT_HOSTS | OPT_NIC_BW, 0},
    {"path", cmd_path,
     "path A B [--file F | --machine M]\n"
     "      the path between two vertices: class, bandwidth, hops",
     OPT_FILE | OPT_MACHINE, 2},
    {"render", cmd_render,
     "render --format svg|png|dot -o OUT [--file F | --machine M] [--hosts N]\n"
     "      draw the graph with Graphviz",
     OPT_FILE | OPT_MACHINE | OPT_OUT | OPT_FORMAT | OPT_HOSTS | OPT_NIC_BW, 0},
    {"convert", cmd_convert,
     "convert --from F --to G [--format nccl|hwloc|braid]\n"
     "      between NCCL XML, hwloc XML and braid's format (default: .xml "
     "NCCL, else braid)",
     OPT_FROM | OPT_TO | OPT_FORMAT, 0},
    {"models", cmd_models, "models\n      the machine models braid ships", 0,
     0},
    /* reads its own options: tools/topo_schedule.c */
    {"schedule", NULL, TOPO_SCHEDULE_USAGE, 0, 0},
    /* reads its own arguments: tools/topo_import.c */
    {"import", NULL, TOPO_IMPORT_USAGE, 0, 0},
};

static void usage(FILE *f) {
  fprintf(f, "usage: braid-topo COMMAND [options]\n\n");
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
    fprintf(f, "  braid-topo %s\n", cmds[i].usage);
  fprintf(f, "\nWithout --file or --machine the machine is detected live.\n");
}

/* An option the command does not read, or a word too many or too few, is
 * a mistake to say rather than to ignore. */
static int check_opts(const subcmd *c, const opts *o) {
  for (unsigned b = 0; b < sizeof opt_names / sizeof opt_names[0]; b++)
    if ((o->given >> b & 1u) && !(c->takes >> b & 1u)) {
      fprintf(stderr, "braid-topo %s: takes no %s\nusage: braid-topo %s\n",
              c->name, opt_names[b], c->usage);
      return -1;
    }
  if ((o->given & OPT_NIC_BW) && !(o->given & OPT_HOSTS)) {
    fprintf(stderr,
            "braid-topo %s: --nic-bw sets the NICs of --hosts N; give "
            "--hosts too\n",
            c->name);
    return -1;
  }
  if (o->npos > c->npos) {
    fprintf(stderr,
            "braid-topo %s: unexpected argument '%s'\nusage: "
            "braid-topo %s\n",
            c->name, o->pos[c->npos], c->usage);
    return -1;
  }
  if (o->npos < c->npos) {
    fprintf(stderr,
            "braid-topo %s: takes %d names, given %d\nusage: "
            "braid-topo %s\n",
            c->name, c->npos, o->npos, c->usage);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
    if (!strcmp(argv[1], cmds[i].name)) {
      if (!cmds[i].run)
        return !strcmp(argv[1], "import")
                   ? topo_import_main(argc - 2, argv + 2)
                   : topo_schedule_main(argc - 2, argv + 2);
      opts o;
      if (parse_opts(argc - 2, argv + 2, &o) || check_opts(&cmds[i], &o))
        return 2;
      return cmds[i].run(&o);
    }
  fprintf(stderr, "braid-topo: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
