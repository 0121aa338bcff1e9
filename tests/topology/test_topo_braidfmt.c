/*
 * braid's own text format: reading, writing, and errors that name the file,
 * line and attribute.
 */
#include "topo_test_util.h"

#include <sys/wait.h>

static const char *small =
    "# a comment\n"
    "braid-topology 1\n"
    "name \"two GPUs\"\n"
    "cpu CPU0 numa=0 cores=8 mem_gb=16 vendor=GenuineIntel\n"
    "gpu G0 busid=0000:07:00.0 sm=80 dev=0\n"
    "gpu G1 busid=07:01.0 sm=80 dev=1   # short bus id\n"
    "nic N0 netdev=mlx5_0 speed=25\n"
    "net NET0\n"
    "link G0 CPU0 pci gen=4 width=16\n"
    "link G1 CPU0 pci gen=3 width=8\n"
    "link G0 G1 nvl count=4\n"
    "link N0 CPU0 pci bw=31.5 lat=0.8\n"
    "link N0 NET0 net\n";

Test(topo_braidfmt, parse_small) {
  topo_graph *g = NULL;
  cr_assert_eq(topo_parse(small, strlen(small), "s.topo", TOPO_FMT_AUTO, &g),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g->name, "two GPUs");
  cr_assert_eq(g->nv, 5);
  cr_assert_eq(g->nl, 5);
  int g0 = topo_find(g, "G0"), g1 = topo_find(g, "G1");
  cr_assert_str_eq(g->v[g1].busid, "0000:07:01.0");
  cr_assert_eq(g->v[topo_find(g, "CPU0")].mem_bytes, 16ull << 30);
  int l = topo_link_between(g, g0, g1);
  cr_assert_eq(g->links[l].count, 4);
  cr_assert_float_eq(g->links[l].bw, 100.0, 1e-9, "4 lanes x 25 GB/s");
  l = topo_link_between(g, g1, topo_find(g, "CPU0"));
  cr_assert_float_eq(g->links[l].bw, 7.877, 0.01, "PCIe gen3 x8");
  l = topo_link_between(g, topo_find(g, "N0"), topo_find(g, "CPU0"));
  cr_assert_float_eq(g->links[l].lat_us, 0.8, 1e-9);
  l = topo_link_between(g, topo_find(g, "N0"), topo_find(g, "NET0"));
  cr_assert_float_eq(g->links[l].bw, 25.0, 1e-9, "NET link at NIC speed");
  /* write and read back */
  size_t n;
  char *t = write_str(g, TOPO_FMT_BRAID, &n);
  topo_graph *g2 = NULL;
  cr_assert_eq(topo_parse_braid(t, n, "w.topo", &g2), BRAID_SUCCESS, "%s\n%s",
               err_msg(), t);
  cr_assert(topo_graph_compare(g, g2) == BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g2->name, "two GPUs");
  size_t n2;
  char *t2 = write_str(g2, TOPO_FMT_BRAID, &n2);
  cr_assert_str_eq(t, t2);
  free(t);
  free(t2);
  topo_graph_free(g);
  topo_graph_free(g2);
}

/* Names holding quotes, backslashes, '#' and '=' survive the braid
 * writer and the reader, and the Graphviz text escapes them: written as
 * they were, the round trip failed ("text right after a quoted value") and
 * dot refused the picture. */
Test(topo_braidfmt, quoted_names_round_trip) {
  static const char *text = "braid-topology 1\n"
                            "name \"Lab \\\"A\\\" \\\\ box\"\n"
                            "cpu \"CPU #0\" numa=0\n"
                            "gpu \"G=\\\"0\\\"\" dev=0\n"
                            "link \"G=\\\"0\\\"\" \"CPU #0\" pci\n";
  topo_graph *g = NULL;
  cr_assert_eq(topo_parse(text, strlen(text), "q.topo", TOPO_FMT_BRAID, &g),
               BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g->name, "Lab \"A\" \\ box");
  cr_assert_geq(topo_find(g, "G=\"0\""), 0);
  cr_assert_geq(topo_find(g, "CPU #0"), 0);
  size_t n;
  char *t = write_str(g, TOPO_FMT_BRAID, &n);
  topo_graph *g2 = NULL;
  cr_assert_eq(topo_parse_braid(t, n, "w.topo", &g2), BRAID_SUCCESS, "%s\n%s",
               err_msg(), t);
  cr_assert(topo_graph_compare(g, g2) == BRAID_SUCCESS, "%s", err_msg());
  cr_assert_str_eq(g2->name, g->name);
  free(t);
  FILE *f = open_memstream(&t, &n);
  cr_assert_not_null(f);
  cr_assert_eq(topo_write_dot(g, f), BRAID_SUCCESS);
  fclose(f);
  cr_assert(strstr(t, "label=\"Lab \\\"A\\\" \\\\ box\"") != NULL, "%s", t);
  cr_assert(strstr(t, "\"G=\\\"0\\\"\" -- ") != NULL ||
                strstr(t, " -- \"G=\\\"0\\\"\"") != NULL,
            "%s", t);
  free(t);
  topo_graph_free(g);
  topo_graph_free(g2);
}

Test(topo_braidfmt, errors) {
  const char *err;
  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\ngpu G0 sm=eighty\n",
                    "a.topo");
  cr_assert_has(err, "a.topo:2:");
  cr_assert_has(err, "'sm'");
  cr_assert_has(err, "eighty");

  err = parse_fails(
      TOPO_FMT_BRAID,
      "braid-topology 1\ngpu G0\ngpu G1\nlink G0 G1 nvl count=999\n", "b.topo");
  cr_assert_has(err, "b.topo:4:");
  cr_assert_has(err, "'count'");
  cr_assert_has(err, "out of range");

  err = parse_fails(TOPO_FMT_BRAID,
                    "braid-topology 1\ngpu G0\nlink G0 G9 nvl\n", "c.topo");
  cr_assert_has(err, "c.topo:3:");
  cr_assert_has(err, "G9");

  err = parse_fails(TOPO_FMT_BRAID,
                    "braid-topology 1\ngpu G0\nlink G0 G0 nvl\n", "d.topo");
  cr_assert_has(err, "d.topo:3:");
  cr_assert_has(err, "itself");

  /* a bus id is unique on its host, whatever the order of attributes */
  err = parse_fails(TOPO_FMT_BRAID,
                    "braid-topology 1\ngpu G0 busid=07:00.0 host=1\n"
                    "gpu G1 host=1 busid=07:00.0\n",
                    "f.topo");
  cr_assert_has(err, "f.topo:3:");
  cr_assert_has(err, "0000:07:00.0 already used by G0 on the same host");
  static const char *two_hosts = "braid-topology 1\ngpu G0 busid=07:00.0\n"
                                 "gpu G1 busid=07:00.0 host=1\n";
  topo_graph *g2 = NULL;
  cr_assert_eq(
      topo_parse(two_hosts, strlen(two_hosts), "g.topo", TOPO_FMT_BRAID, &g2),
      BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(g2->nhosts, 2);
  topo_graph_free(g2);

  /* a graph (channel) file where a topology is wanted: what to give */
  err =
      parse_fails(TOPO_FMT_AUTO, "<graphs version=\"1\"></graphs>\n", "g.xml");
  cr_assert_has(err, "g.xml:1: is an NCCL graph (channel) file");
  cr_assert_has(err, "give NCCL_TOPO_FILE's XML, hwloc XML or braid's format");

  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\ngpu G0 colour=green\n",
                    "e.topo");
  cr_assert_has(err, "e.topo:2:");
  cr_assert_has(err, "'colour'");

  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\ngpu G0\ngpu G0\n",
                    "f.topo");
  cr_assert_has(err, "f.topo:3:");
  cr_assert_has(err, "twice");

  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 2\n", "g.topo");
  cr_assert_has(err, "g.topo:1:");

  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\ngpu G0 busid=\"0000:07",
                    "h.topo");
  cr_assert_has(err, "h.topo:2:");
  cr_assert_has(err, "unterminated");

  err = parse_fails(TOPO_FMT_BRAID,
                    "braid-topology 1\ngpu A busid=0000:07:00.0\n"
                    "gpu B busid=0000:07:00.0\n",
                    "i.topo");
  cr_assert_has(err, "i.topo:3:");
  cr_assert_has(err, "'busid'");

  err = parse_fails(
      TOPO_FMT_BRAID,
      "braid-topology 1\ngpu A\ngpu B\nlink A B nvl\nlink B A nvl\n", "j.topo");
  cr_assert_has(err, "j.topo:5:");

  err = parse_fails(TOPO_FMT_BRAID, "", "empty.topo");
  cr_assert_has(err, "empty.topo");

  /* "hosts" takes exactly one number; every way of getting it wrong names
   * the line (a fuzzer found "hosts A pci ..." failing with no message) */
  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\nhosts PCI0 pci gen=3\n",
                    "k.topo");
  cr_assert_has(err, "k.topo:2:");
  cr_assert_has(err, "hosts");
  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\nhosts\n", "l.topo");
  cr_assert_has(err, "l.topo:2:");
  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\nhosts n=2\n", "m.topo");
  cr_assert_has(err, "m.topo:2:");
  err = parse_fails(TOPO_FMT_BRAID, "braid-topology 1\nhosts 0\n", "n.topo");
  cr_assert_has(err, "n.topo:2:");
  cr_assert_has(err, "out of range");
}

/* topo_save writes a file whole or not at all: processes saving one path
 * at once (every rank of a job with BRAID_TOPO_DUMP_FILE) never leave a
 * reader part of a file, and nothing is left beside it. */
Test(topo_braidfmt, saves_are_whole) {
  char dir[] = "/tmp/braid-topo-save-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[96];
  snprintf(path, sizeof path, "%s/dump.topo", dir);
  topo_graph *m = NULL, *g = NULL;
  cr_assert_eq(topo_model_load("dgx-h100", &m), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(topo_cluster(m, 16, 0, &g), BRAID_SUCCESS, "%s", err_msg());
  cr_assert_eq(topo_save(g, path, TOPO_FMT_BRAID), BRAID_SUCCESS, "%s",
               err_msg());
  pid_t kids[3];
  for (int k = 0; k < 3; k++) {
    kids[k] = fork();
    cr_assert_geq(kids[k], 0);
    if (kids[k] == 0) {
      for (int i = 0; i < 40; i++)
        if (topo_save(g, path, TOPO_FMT_BRAID) != BRAID_SUCCESS)
          _exit(1);
      _exit(0);
    }
  }
  int reads = 0, bad = 0;
  char first[256] = "";
  for (;;) {
    topo_graph *r = NULL;
    if (topo_load(path, TOPO_FMT_BRAID, &r) != BRAID_SUCCESS ||
        topo_count(r, TOPO_GPU) != 128) {
      if (!bad++)
        snprintf(first, sizeof first, "%s (%d GPUs)", r ? "read" : err_msg(),
                 r ? topo_count(r, TOPO_GPU) : 0);
    }
    topo_graph_free(r);
    reads++;
    int running = 0;
    for (int k = 0; k < 3; k++)
      running |= waitpid(kids[k], NULL, WNOHANG) == 0;
    if (!running)
      break;
  }
  cr_assert_eq(bad, 0, "%d of %d reads found part of a file; the first: %s",
               bad, reads, first);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
  cr_assert_eq(system(cmd), 0, "files left beside the dump");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
  topo_graph_free(g);
  topo_graph_free(m);
}
