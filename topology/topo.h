/*
 * The system graph: what braid knows of the machine (DESIGN §5).
 *
 * Vertices are GPUs, CPUs (one per NUMA node), PCI switches, NVSwitches, NICs
 * and NET (the network fabric the NICs plug into). Links are undirected and
 * carry a type (NVL, PCI, SYS, NET), a bandwidth in GB/s per direction, a
 * latency in microseconds and a count (NVLink lanes bundled in one link).
 *
 * Paths between any two vertices carry the bottleneck bandwidth and the link
 * class NVL < NVB < PIX < PXB < PHB < SYS < NET (see docs/TOPOLOGY.md).
 *
 * Sources: live detection (hwloc, NVML loaded with dlopen, sysfs for NIC
 * speed), hwloc XML files, NCCL topology XML files and braid's own text
 * format. Everything here is pure: no network I/O, no knowledge of
 * transports. A failure returns a braid_result and records its message
 * (src/log.h, err_msg): parsers name the file, line and attribute.
 */
#ifndef BRAID_TOPOLOGY_TOPO_H
#define BRAID_TOPOLOGY_TOPO_H

#include "braid.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum topo_vtype {
  TOPO_GPU = 0,
  TOPO_CPU = 1, /* a NUMA node with its cores and memory */
  TOPO_PCI = 2, /* a PCIe switch */
  TOPO_NVS = 3, /* an NVSwitch (all ports of a fabric merged) */
  TOPO_NIC = 4, /* one network port (a net device) */
  TOPO_NET = 5, /* the network the NICs plug into */
  TOPO_NVTYPES = 6
} topo_vtype;

typedef enum topo_ltype {
  TOPO_LINK_NVL = 0,
  TOPO_LINK_PCI = 1,
  TOPO_LINK_SYS = 2, /* inter-socket (UPI, Infinity Fabric) */
  TOPO_LINK_NET = 3,
  TOPO_NLTYPES = 4
} topo_ltype;

/* Path classes, best first (the order of `nvidia-smi topo -m` and NCCL). */
typedef enum topo_pclass {
  TOPO_PATH_LOC = 0, /* same vertex */
  TOPO_PATH_NVL = 1, /* NVLink, directly or through NVSwitch */
  TOPO_PATH_NVB = 2, /* NVLink through an intermediate GPU */
  TOPO_PATH_PIX = 3, /* at most one PCIe switch */
  TOPO_PATH_PXB = 4, /* several PCIe switches, no host bridge */
  TOPO_PATH_PHB = 5, /* through a CPU's host bridge */
  TOPO_PATH_SYS = 6, /* across the inter-socket link */
  TOPO_PATH_NET = 7, /* through the network */
  TOPO_PATH_DIS = 8, /* disconnected */
  TOPO_NPCLASSES = 9
} topo_pclass;

typedef struct topo_vertex {
  topo_vtype type;
  int index;      /* rank among the vertices of its type: GPU i, NIC i */
  int host;       /* host number (0 on one machine; see topo_cluster) */
  char name[48];  /* unique: "GPU0", "CPU1", "NIC3", "PCI2", "NVS0", "NET0" */
  char busid[24]; /* PCI bus id "0000:07:00.0", or "" */
  int numa;       /* the NUMA node it hangs from (-1 unknown) */
  /* GPU */
  int dev;  /* CUDA device number (-1 unknown) */
  int sm;   /* compute capability x10: 70 V100, 80 A100, 90 H100 (0 unknown) */
  int rank; /* rank in an NCCL file (-1 none) */
  int gdr;  /* GPUDirect RDMA capable (NIC and GPU), -1 unknown */
  /* NIC */
  char netdev[32]; /* "mlx5_0", "eth0" */
  int port;        /* port number (-1 unknown) */
  double speed;    /* GB/s per direction (0 unknown) */
  uint64_t guid;
  int maxconn;
  /* CPU */
  char arch[16];
  char vendor[32];
  int family, model;
  int cores, pus;     /* physical cores and hardware threads */
  uint64_t mem_bytes; /* local memory */
  uint64_t l3_bytes;  /* last-level (L3) cache, all slices of the node */
  char affinity[320]; /* cpu mask as NCCL writes it, "" unknown */
  /* PCI endpoints and switches */
  int pci_class; /* 0x030200, 0x060400, ... (-1 unknown) */
  int vendor_id, device_id, subsys_vendor, subsys_device; /* -1 unknown */
  double link_gts; /* PCIe link rate GT/s per lane (0 unknown) */
  int link_width;  /* lanes (0 unknown) */
  /* adjacency: indices into topo_graph.links */
  int *adj;
  int nadj, capadj;
} topo_vertex;

typedef struct topo_link {
  int a, b; /* vertex ids */
  topo_ltype type;
  double bw;     /* GB/s per direction (all lanes together) */
  double lat_us; /* one-way latency of the hop */
  int count;     /* NVLink lanes (1 for other links) */
} topo_link;

typedef struct topo_path_row topo_path_row;

typedef struct topo_graph {
  char name[64]; /* machine name ("DGX-A100", "live", a file name) */
  int nhosts;
  topo_vertex *v;
  int nv, capv;
  topo_link *links;
  int nl, capl;
  int *of_type[TOPO_NVTYPES]; /* vertex ids of each type, in index order */
  int ntype[TOPO_NVTYPES];
  topo_path_row **rows; /* path cache, one row per source (lazy) */
  /* names to ids for topo_find: open addressing, id + 1 per entry (0:
   * empty), capnames a power of two at least twice nv. A vertex keeps the
   * name topo_add_vertex gave it. */
  int *names;
  int capnames;
} topo_graph;

typedef struct topo_path {
  topo_pclass cls;
  double bw;     /* bottleneck bandwidth, GB/s (0 when disconnected) */
  double lat_us; /* sum of hop latencies */
  int nhops;     /* links on the path (0 for LOC) */
  int *verts;    /* nhops+1 vertex ids, from source to destination */
  int *links;    /* nhops link ids */
} topo_path;

/* ---- names ---- */
const char *topo_vtype_name(topo_vtype t);   /* "GPU", "CPU", ... */
const char *topo_ltype_name(topo_ltype t);   /* "NVL", "PCI", ... */
const char *topo_pclass_name(topo_pclass c); /* "NVL", "PIX", ... */
int topo_vtype_parse(const char *s);         /* -1 if unknown */
int topo_ltype_parse(const char *s);         /* -1 if unknown */

/* ---- building and querying ---- */
topo_graph *topo_graph_new(const char *name); /* NULL when out of memory */
void topo_graph_free(topo_graph *g);
/* Adds a vertex with the defaults of its type; name NULL = "<TYPE><index>".
   Returns its id, or -1 when out of memory or the name is taken. */
int topo_add_vertex(topo_graph *g, topo_vtype type, const char *name);
/* Adds a link, or merges into an existing link of the same type between the
   same vertices (counts and bandwidths add). bw <= 0 or lat < 0 take the
   type's defaults. Returns the link id, or -1 (self loop, bad id, no memory).
 */
int topo_add_link(topo_graph *g, int a, int b, topo_ltype type, double bw,
                  double lat_us, int count);
int topo_find(const topo_graph *g, const char *name);        /* id or -1 */
int topo_find_busid(const topo_graph *g, const char *busid); /* id or -1 */
static inline int topo_count(const topo_graph *g, topo_vtype t) {
  return g->ntype[t];
}
/* The id of the i-th vertex of a type (GPU i, NIC i), or -1. */
static inline int topo_nth(const topo_graph *g, topo_vtype t, int i) {
  return (i >= 0 && i < g->ntype[t]) ? g->of_type[t][i] : -1;
}
/* The link between two vertices with the best bandwidth, or -1. */
int topo_link_between(const topo_graph *g, int a, int b);
/* The vertex at the other end of link l from v. */
static inline int topo_other(const topo_graph *g, int l, int v) {
  return g->links[l].a == v ? g->links[l].b : g->links[l].a;
}
/* Deep copy (NULL when out of memory). */
topo_graph *topo_graph_copy(const topo_graph *g);
/* Same vertices (type, name, bus id) and links (ends, type, count,
   bandwidth within 1%)? BRAID_SUCCESS when so, else BRAID_ERR_MISMATCH with
   the first difference as the message. */
braid_result topo_graph_compare(const topo_graph *a, const topo_graph *b);
/* Checks internal consistency (for parsers and tests). */
braid_result topo_graph_check(const topo_graph *g);

/* ---- bandwidth facts ---- */
double topo_pcie_bw(double gts, int width); /* GB/s per direction */
double topo_nvlink_lane_bw(int sm);         /* GB/s per lane per direction */
int topo_pcie_gen(double gts);              /* 1..6, 0 unknown */

/* ---- paths ---- */
/* Computes the best path from a to b: lowest class first, then highest
   bottleneck bandwidth, then fewest hops. out->verts/links are allocated
   (NULL when the class is DIS; a == b gives LOC, 0 hops, verts = {a});
   release them with topo_path_release. */
braid_result topo_path_get(topo_graph *g, int a, int b, topo_path *out);
void topo_path_release(topo_path *p);
/* Cheap lookups from the same cache (no allocation after the first call). */
topo_pclass topo_path_class(topo_graph *g, int a, int b);
double topo_path_bw(topo_graph *g, int a, int b);
/* Fills the cache for every source (do this before sharing a graph among
   threads; the lazy cache is not thread-safe). */
braid_result topo_paths_all(topo_graph *g);
/* Drops the cache (after the graph changed). */
void topo_paths_reset(topo_graph *g);

/* ---- files ---- */
typedef enum topo_format {
  TOPO_FMT_AUTO = 0,
  TOPO_FMT_BRAID = 1, /* braid's text format (docs/TOPOLOGY.md) */
  TOPO_FMT_NCCL = 2,  /* NCCL_TOPO_FILE XML */
  TOPO_FMT_HWLOC = 3  /* hwloc XML (v2) */
} topo_format;

int topo_format_parse(const char *s); /* "braid", "nccl", "hwloc"; -1 */
/* Guesses from the content; TOPO_FMT_AUTO when unknown. */
topo_format topo_format_sniff(const char *buf, size_t len);

/* Parsers: buf need not be NUL-terminated; fname is used in messages. */
braid_result topo_parse_braid(const char *buf, size_t len, const char *fname,
                              topo_graph **out);
braid_result topo_parse_nccl(const char *buf, size_t len, const char *fname,
                             topo_graph **out);
braid_result topo_parse_hwloc(const char *buf, size_t len, const char *fname,
                              topo_graph **out);
braid_result topo_parse(const char *buf, size_t len, const char *fname,
                        topo_format fmt, topo_graph **out);
/* Reads a file (any format when fmt is AUTO). */
braid_result topo_load(const char *path, topo_format fmt, topo_graph **out);

/* Writers. */
braid_result topo_write_braid(const topo_graph *g, FILE *f);
braid_result topo_write_nccl(const topo_graph *g, FILE *f);
braid_result topo_write_hwloc(const topo_graph *g, FILE *f);
/* Graphviz "dot" text: vertices by type, links labelled with class and
   bandwidth. */
braid_result topo_write_dot(const topo_graph *g, FILE *f);
/* s for a double-quoted Graphviz string ('"' and '\\' escaped) in buf, cut
 * to fit n bytes with the terminator; returns buf. */
const char *topo_dot_esc(const char *s, char *buf, size_t n);
braid_result topo_save(const topo_graph *g, const char *path, topo_format fmt);

/* A file written whole or not at all: topo_wfile_open opens path for
 * writing; a regular file (or none yet) is written beside it and renamed
 * onto it by topo_wfile_close, so that neither a failure half-way nor
 * processes writing the same path at once leave a part of one; anything
 * else (a device, a pipe; "-": stdout) is written as it is. Close with
 * failed = 1 to leave what was at path. Both return BRAID_SUCCESS or an
 * error naming the path and the reason (ERR). */
typedef struct topo_wfile {
  FILE *f;
  char *tmp; /* the file beside path, or NULL */
  const char *path;
} topo_wfile;
braid_result topo_wfile_open(topo_wfile *w, const char *path);
braid_result topo_wfile_close(topo_wfile *w, int failed);

/* ---- NCCL graph (channel) files, NCCL_GRAPH_FILE ---- */
typedef struct topo_nccl_channel {
  int n;
  int *gpus;           /* GPU dev numbers in order */
  int net_in, net_out; /* net dev at the ends, -1 none */
} topo_nccl_channel;
typedef struct topo_nccl_pattern {
  int id, pattern, nchannels, crossnic;
  double speed_intra, speed_inter;
  char type_intra[8], type_inter[8];
  topo_nccl_channel *ch;
  int nch;
} topo_nccl_pattern;
typedef struct topo_nccl_graphs {
  topo_nccl_pattern *g;
  int n;
} topo_nccl_graphs;
braid_result topo_parse_nccl_graphs(const char *buf, size_t len,
                                    const char *fname, topo_nccl_graphs **out);
void topo_nccl_graphs_free(topo_nccl_graphs *g);

/* ---- live detection ---- */
/* Detects this machine with hwloc (CPU, NUMA, PCI tree, NICs, GPUs), adds
   NVLinks from NVML when libnvidia-ml can be loaded, and NIC speeds from
   sysfs. */
braid_result topo_detect(topo_graph **out);
/* Adds NVLinks found by NVML to GPUs of g (matched by bus id). Returns
   BRAID_SUCCESS with *nlinks = 0 when NVML is absent. */
braid_result topo_nvml_add_links(topo_graph *g, int *nlinks);

/* ---- machine models and clusters ---- */
/* Names of the shipped models, NULL-terminated. */
const char *const *topo_model_names(void);
/* Loads a model by name ("dgx-a100") or path. Looks in the source tree's
   topology/machines, then the installed data directory. */
braid_result topo_model_load(const char *name, topo_graph **out);
/* N copies of one host joined by a non-blocking fat tree: every NIC links to
   one shared NET vertex at nic_bw GB/s (<= 0: the NIC's own speed). Vertex
   names get a "h<host>." prefix. */
braid_result topo_cluster(const topo_graph *host, int nhosts, double nic_bw,
                          topo_graph **out);

/* ---- printing ---- */
/* The machine as a tree, then the GPU/NIC matrix as `nvidia-smi topo -m`. */
void topo_print(topo_graph *g, FILE *f);

#endif
