/*
 * Internal to topology/: limits, defaults, the small XML reader and helpers
 * shared by the parsers.
 */
#ifndef BRAID_TOPOLOGY_TOPO_INT_H
#define BRAID_TOPOLOGY_TOPO_INT_H

#include "src/log.h"
#include "topology/topo.h"
#include <stddef.h>

/* Hostile files cannot make braid allocate without bound. */
#define TOPO_MAX_VERTICES 65536
#define TOPO_MAX_LINKS 262144
#define TOPO_MAX_FILE_BYTES (64u << 20)
#define TOPO_MAX_XML_DEPTH 64
#define TOPO_MAX_XML_NODES 1000000
#define TOPO_MAX_NVL_COUNT 64

/* Defaults (GB/s per direction) when a source gives no figure. */
#define TOPO_NVL_LANE_BW 25.0
#define TOPO_PCI_DEFAULT_BW 24.0 /* PCIe gen4 x16, about */
#define TOPO_SYS_DEFAULT_BW 40.0 /* inter-socket link */
#define TOPO_NET_DEFAULT_BW 12.5 /* 100 Gb/s */

double topo_default_bw(topo_ltype t);
double topo_default_lat(topo_ltype t);

/* ---- XML (a small, strict reader: elements, attributes, text, comments,
   declarations, the five predefined entities and numeric references) ---- */
typedef struct xml_attr {
  char *name, *value;
  int line;
} xml_attr;

typedef struct xml_node {
  char *name;
  int line;
  xml_attr *attrs;
  int nattrs;
  struct xml_node **kids;
  int nkids, capkids;
  char *text; /* concatenated character data, or NULL */
  size_t textlen;
  struct xml_node *parent;
} xml_node;

/* Parses a document into *out; a failure says "fname:line: what". */
braid_result xml_parse(const char *buf, size_t len, const char *fname,
                       xml_node **out);
void xml_free(xml_node *n);
const xml_attr *xml_attr_get(const xml_node *n, const char *name);
const char *xml_get(const xml_node *n, const char *name); /* NULL if absent */

/* Attribute readers: a malformed value fails with
   "fname:line: <elem> attribute 'name': ..." (BRAID_ERR_INVALID_ARG); an
   absent attribute leaves *out unchanged and succeeds (fails when
   required). */
braid_result xml_get_int(const xml_node *n, const char *name, long lo, long hi,
                         int required, long *out, const char *fname);
braid_result xml_get_hex(const xml_node *n, const char *name, int required,
                         long *out, const char *fname);
braid_result xml_get_double(const xml_node *n, const char *name, double lo,
                            double hi, int required, double *out,
                            const char *fname);
braid_result xml_require(const xml_node *n, const char *name, const char **out,
                         const char *fname);

/* ---- helpers ---- */
/* Reads a whole file (bounded by TOPO_MAX_FILE_BYTES). */
braid_result topo_read_file(const char *path, char **buf, size_t *len);
/* Validates and normalises a PCI bus id to "dddd:bb:dd.f" lower case. */
int topo_busid_norm(const char *in, char *out, size_t outlen);
/* Parses "16 GT/s", "32.0 GT/s PCIe", "8.0 GT/s"; 0 for "" or unknown. */
double topo_parse_gts(const char *s);
/* A NIC's network bandwidth: its speed, else its PCIe link, else 12.5. */
double topo_nic_bw(const topo_graph *g, int nic);
/* Adds one NET vertex and links every NIC without a NET link to it. */
braid_result topo_attach_net(topo_graph *g);
/* The PCI tree: parent[v] is the CPU or PCI switch v hangs from (-1 for
   CPUs, NVS, NET and unreachable vertices). work holds 2*nv ints. */
void topo_pci_tree(const topo_graph *g, int *parent, int *work);
/* Fails with "<where>: out of memory" (BRAID_ERR_NOMEM). */
#define TOPO_NOMEM(where) ERR(BRAID_ERR_NOMEM, "%s: out of memory", (where))

#endif
