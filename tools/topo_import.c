/*
 * `braid-topo import` (see topo_import.h): reads the file, lets
 * collectives/msccl.c import and verify it, simulates the result on the
 * ranks' GPUs of a machine model and writes it as a schedule file.
 */
#include "tools/topo_import.h"
#include "collectives/msccl.h"
#include "collectives/sched_file.h"
#include "collectives/sched_json.h"
#include "collectives/sim.h"
#include "collectives/view.h"
#include "src/log.h"
#include "tools/topo_schedule.h"
#include "topology/topo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct iopts {
  const char *in, *out, *machine;
  size_t size;
} iopts;

static int usage_err(const char *what, const char *arg) {
  fprintf(stderr, "braid-topo import: %s%s%s\nusage: braid-topo %s\n", what,
          arg ? " " : "", arg ? arg : "", TOPO_IMPORT_USAGE);
  return 2;
}

static int parse(int argc, char **argv, iopts *o) {
  memset(o, 0, sizeof(*o));
  o->machine = "dgx1-v100";
  o->size = 64u << 20;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int val = !strcmp(a, "-o") || !strcmp(a, "--output") ||
              !strcmp(a, "--machine") || !strcmp(a, "-m") ||
              !strcmp(a, "--size");
    if (val && i + 1 >= argc)
      return usage_err(a, "needs a value");
    if (!strcmp(a, "-o") || !strcmp(a, "--output"))
      o->out = argv[++i];
    else if (!strcmp(a, "--machine") || !strcmp(a, "-m"))
      o->machine = argv[++i];
    else if (!strcmp(a, "--size")) {
      if (!(o->size = topo_parse_size(argv[++i])))
        return usage_err("bad size (bytes, with K, M or G):", argv[i]);
    } else if (a[0] == '-' && a[1])
      return usage_err("unknown option", a);
    else if (o->in)
      return usage_err("one input file, not also", a);
    else
      o->in = a;
  }
  if (!o->in)
    return usage_err("no input file", NULL);
  topo_graph *g = NULL;
  if (topo_model_load(o->machine, &g) != BRAID_SUCCESS)
    return usage_err("unknown machine:", err_msg());
  topo_graph_free(g);
  return 0;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "braid-topo import: %s: cannot open: %s\n", path,
            strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    if (n == cap) {
      char *nb = cap > SCHED_FILE_MAX_BYTES ? NULL : realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        fprintf(stderr, "braid-topo import: %s: too large\n", path);
        break;
      }
      b = nb;
      cap *= 2;
    }
    size_t got = fread(b + n, 1, cap - n, f);
    n += got;
    if (!got)
      break;
  }
  if (b && ferror(f)) {
    fprintf(stderr, "braid-topo import: %s: cannot read: %s\n", path,
            strerror(errno));
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = n;
  return b;
}

/* The simulator's time on the first ngpus GPUs of the machine (or of a
 * cluster of it when one host has too few). */
static void simulate(const iopts *o, const sched *s) {
  char err[512] = "";
  topo_graph *g = NULL, *c = NULL;
  if (topo_model_load(o->machine, &g) != BRAID_SUCCESS) {
    printf("simulator: machine '%s' not loaded: %s\n", o->machine, err_msg());
    return;
  }
  int per = topo_count(g, TOPO_GPU), n = s->nranks;
  sched_view *v = NULL;
  if (per > 0 && n > per && n % per == 0 &&
      topo_cluster(g, n / per, 0, &c) == BRAID_SUCCESS) {
    if (view_gpus(c, NULL, 0, &v) != BRAID_SUCCESS)
      snprintf(err, sizeof(err), "%s", err_msg());
  } else if (n <= per) {
    int gpus[256];
    for (int i = 0; i < n; i++)
      gpus[i] = i;
    if (view_gpus(g, gpus, n, &v) != BRAID_SUCCESS)
      snprintf(err, sizeof(err), "%s", err_msg());
  } else {
    snprintf(err, sizeof(err), "%d ranks do not fit %d-GPU hosts", n, per);
  }
  if (!v) {
    printf("simulator: no view of %d ranks on %s: %s\n", n, o->machine, err);
  } else {
    sim_params p;
    sim_params_gpu(&p);
    int split = s->coll != SCHED_ALLREDUCE;
    size_t bytes = o->size / (split ? (size_t)n : 1);
    sim_result r;
    if (bytes == 0 || sim_run(s, v, bytes, &p, &r) != BRAID_SUCCESS)
      printf("simulator: %s\n",
             bytes ? err_msg() : "size below one byte a rank");
    else
      printf("simulated on %s (%d GPUs), %zu bytes: %.3f us, algbw %.2f "
             "GB/s, busbw %.2f GB/s, %.1f%% of the bound\n",
             g->name, n, o->size, r.time_us, r.algbw, r.busbw,
             r.efficiency * 100);
    view_free(v);
  }
  topo_graph_free(c);
  topo_graph_free(g);
}

int topo_import_main(int argc, char **argv) {
  iopts o;
  int rc = parse(argc, argv, &o);
  if (rc)
    return rc;
  size_t len = 0;
  char *buf = slurp(o.in, &len);
  if (!buf)
    return 1;
  msccl_info info;
  sched *s = NULL;
  braid_result r = msccl_import(buf, len, o.in, &s, &info);
  free(buf);
  if (r != BRAID_SUCCESS) {
    fprintf(stderr, "braid-topo import: refused: %s\n", err_msg());
    return 1;
  }
  printf("%s: \"%s\", %s on %d gpus, %d threadblocks, %d steps, proto %s "
         "(a hint, not used on the host)\n",
         o.in, info.name, sched_coll_name(s->coll), info.ngpus,
         info.nthreadblocks, info.nsteps, info.proto);
  printf("braid schedule: 1 channel, %d chunks per block, %d scratch blocks; "
         "verified out of place and in place\n",
         s->chunks_per_block, s->scratch_blocks);
  simulate(&o, s);
  if (o.out) {
    if (sched_file_save(s, o.out) != BRAID_SUCCESS) {
      fprintf(stderr, "braid-topo import: %s\n", err_msg());
      sched_free(s);
      return 1;
    }
    printf("saved to %s\n", o.out);
  }
  sched_free(s);
  return 0;
}
