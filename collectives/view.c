/*
 * Topology views: where a communicator's ranks sit (see view.h).
 */
#include "view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"

static sched_view *view_alloc(topo_graph *g, int nranks) {
  sched_view *v = calloc(1, sizeof *v);
  if (!v)
    return NULL;
  size_t n = (size_t)(nranks > 0 ? nranks : 1);
  v->vertex = malloc(n * sizeof(int));
  v->host = malloc(n * sizeof(int));
  if (!v->vertex || !v->host) {
    free(v->vertex);
    free(v->host);
    free(v);
    return NULL;
  }
  v->g = g;
  v->nranks = nranks;
  v->rails = 1;
  return v;
}

/* NICs of host h in g (the rails). */
static int host_nics(const topo_graph *g, int h) {
  int n = 0;
  for (int i = 0; i < topo_count(g, TOPO_NIC); i++)
    if (g->v[topo_nth(g, TOPO_NIC, i)].host == h)
      n++;
  return n;
}

/* The id of vertex `name` of host h ("h<h>.<name>" in a cluster). */
static int host_vertex(const topo_graph *g, int h, const char *name) {
  if (g->nhosts <= 1)
    return topo_find(g, name);
  char full[64];
  snprintf(full, sizeof full, "h%d.%s", h, name);
  return topo_find(g, full);
}

braid_result view_gpus(topo_graph *g, const int *gpus, int ngpus,
                       sched_view **out) {
  *out = NULL;
  if (!g)
    return ERR(BRAID_ERR_INVALID_ARG, "view_gpus: no graph");
  int nhosts = g->nhosts > 1 ? g->nhosts : 1;
  int per = topo_count(g, TOPO_GPU) / nhosts;
  if (!gpus)
    ngpus = per;
  if (ngpus < 1)
    return ERR(BRAID_ERR_INVALID_ARG, "view_gpus: %s has no GPU", g->name);
  sched_view *v = view_alloc(g, nhosts * ngpus);
  if (!v)
    return ERR(BRAID_ERR_NOMEM, "view_gpus: out of memory for %d ranks",
               nhosts * ngpus);
  v->nhosts = nhosts;
  for (int h = 0; h < nhosts; h++)
    for (int i = 0; i < ngpus; i++) {
      int gi = gpus ? gpus[i] : i;
      char name[32];
      snprintf(name, sizeof name, "GPU%d", gi);
      /* topo_cluster lays GPUs out host after host: try GPU h*per+gi
       * first, by name otherwise. */
      int id = gi >= 0 && gi < per ? topo_nth(g, TOPO_GPU, h * per + gi) : -1;
      char full[64];
      if (g->nhosts > 1)
        snprintf(full, sizeof full, "h%d.%s", h, name);
      else
        snprintf(full, sizeof full, "%s", name);
      if (id < 0 || strcmp(g->v[id].name, full) != 0)
        id = gi >= 0 ? host_vertex(g, h, name) : -1;
      if (id < 0 || g->v[id].type != TOPO_GPU) {
        view_free(v);
        return ERR(BRAID_ERR_INVALID_ARG,
                   "view_gpus: %s has no GPU %d on host %d", g->name, gi, h);
      }
      for (int j = 0; j < i; j++)
        if (v->vertex[h * ngpus + j] == id) {
          view_free(v);
          return ERR(BRAID_ERR_INVALID_ARG, "view_gpus: GPU %d listed twice",
                     gi);
        }
      v->vertex[h * ngpus + i] = id;
      v->host[h * ngpus + i] = h;
    }
  int rails = host_nics(g, 0);
  v->rails = rails > 0 ? rails : 1;
  *out = v;
  return BRAID_SUCCESS;
}

braid_result view_hosts(topo_graph *g, int nranks, const int *host,
                        sched_view **out) {
  *out = NULL;
  if (nranks < 1)
    return ERR(BRAID_ERR_INVALID_ARG, "view_hosts: %d ranks", nranks);
  int gh = g ? (g->nhosts > 1 ? g->nhosts : 1) : 0;
  int maxh = -1;
  for (int r = 0; r < nranks; r++) {
    int h = host ? host[r] : 0;
    if (h < 0 || (g && h >= gh))
      return ERR(BRAID_ERR_INVALID_ARG,
                 "view_hosts: rank %d on host %d (%s%d hosts)", r, h,
                 g ? "graph has " : "", g ? gh : 0);
    if (h > maxh)
      maxh = h;
  }
  sched_view *v = view_alloc(g, nranks);
  if (!v)
    return ERR(BRAID_ERR_NOMEM, "view_hosts: out of memory for %d ranks",
               nranks);
  /* Without a graph, hosts are 0 .. the largest number given. */
  v->nhosts = g ? gh : maxh + 1;
  for (int r = 0; r < nranks; r++) {
    int h = host ? host[r] : 0;
    v->host[r] = h;
    v->vertex[r] = -1;
    if (g) {
      int id = host_vertex(g, h, "CPU0");
      if (id < 0) { /* no CPU0: the host's first CPU vertex */
        for (int i = 0; i < topo_count(g, TOPO_CPU) && id < 0; i++)
          if (g->v[topo_nth(g, TOPO_CPU, i)].host == h)
            id = topo_nth(g, TOPO_CPU, i);
      }
      if (id < 0) {
        view_free(v);
        return ERR(BRAID_ERR_INVALID_ARG,
                   "view_hosts: %s has no CPU on host %d", g->name, h);
      }
      v->vertex[r] = id;
    }
  }
  if (g) {
    int rails = host_nics(g, 0);
    v->rails = rails > 0 ? rails : 1;
  }
  *out = v;
  return BRAID_SUCCESS;
}

void view_free(sched_view *v) {
  if (!v)
    return;
  if (v->owns_graph)
    topo_graph_free(v->g);
  free(v->vertex);
  free(v->host);
  free(v);
}

int view_host_ranks(const sched_view *v, int h, int *ranks) {
  int n = 0;
  for (int r = 0; r < v->nranks; r++)
    if (v->host[r] == h) {
      if (ranks)
        ranks[n] = r;
      n++;
    }
  return n;
}
