/*
 * The MSCCL importer (collectives/msccl.c) on small texts: what it maps
 * (a two-gpu allreduce and its steps), the XML reader's errors with their
 * line, the attributes it refuses, and sched_file_parse taking XML.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/msccl.h"
#include "collectives/sched_file.h"

/* A two-gpu allreduce of 2 chunks: each gpu sends the chunk the other
 * reduces (rrc into its output), then they swap the sums. */
#define ALGO_HEAD                                                              \
  "<algo name=\"ar2\" proto=\"Simple\" nchannels=\"1\" nchunksperloop=\"2\" "  \
  "ngpus=\"2\" coll=\"allreduce\" inplace=\"0\">\n"
#define GPU(id, peer, mine, other)                                             \
  "  <gpu id=\"" #id "\" i_chunks=\"2\" o_chunks=\"2\" s_chunks=\"0\">\n"      \
  "    <tb id=\"0\" send=\"" #peer "\" recv=\"" #peer "\" chan=\"0\">\n"       \
  "      <step s=\"0\" type=\"s\" srcbuf=\"i\" srcoff=\"" #other               \
  "\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" "           \
  "hasdep=\"0\"/>\n"                                                           \
  "      <step s=\"1\" type=\"rrc\" srcbuf=\"i\" srcoff=\"" #mine              \
  "\" dstbuf=\"o\" dstoff=\"" #mine "\" cnt=\"1\" depid=\"-1\" deps=\"-1\" "   \
  "hasdep=\"0\"/>\n"                                                           \
  "      <step s=\"2\" type=\"s\" srcbuf=\"o\" srcoff=\"" #mine                \
  "\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\" depid=\"-1\" deps=\"-1\" "           \
  "hasdep=\"0\"/>\n"                                                           \
  "      <step s=\"3\" type=\"r\" srcbuf=\"o\" srcoff=\"0\" dstbuf=\"o\" "     \
  "dstoff=\"" #other "\" cnt=\"1\" depid=\"-1\" deps=\"-1\" hasdep=\"0\"/>\n"  \
  "    </tb>\n"                                                                \
  "  </gpu>\n"
static const char good[] = "<?xml version=\"1.0\"?>\n" ALGO_HEAD GPU(0, 1, 0, 1)
    GPU(1, 0, 1, 0) "</algo>\n";

static braid_result import(const char *text, sched **s) {
  return msccl_import(text, strlen(text), "p.xml", s, NULL);
}

/* good with `from` replaced by `to` (once), imported; the message. */
static void refused(const char *from, const char *to, const char *want) {
  const char *at = strstr(good, from);
  cr_assert_not_null(at, "'%s' not in the text", from);
  char text[8192];
  snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good), good, to,
           at + strlen(from));
  sched *s = NULL;
  cr_assert_eq(import(text, &s), BRAID_ERR_INVALID_ARG, "accepted: %s -> %s",
               from, to);
  cr_assert_null(s);
  cr_assert(strstr(err_msg(), want), "'%s' -> '%s': message '%s' lacks '%s'",
            from, to, err_msg(), want);
  cr_assert_eq(strncmp(err_msg(), "p.xml:", 6), 0, "%s", err_msg());
}

Test(msccl, maps_each_step) {
  sched *s = NULL;
  msccl_info info;
  cr_assert_eq(msccl_import(good, strlen(good), "p.xml", &s, &info), 0, "%s",
               err_msg());
  cr_assert_eq(s->coll, SCHED_ALLREDUCE);
  cr_assert_eq(s->nranks, 2);
  cr_assert_eq(s->chunks_per_block, 2);
  cr_assert_eq(s->nchannels, 1);
  cr_assert_str_eq(s->algo, "ar2");
  cr_assert_eq(info.nthreadblocks, 2);
  cr_assert_eq(info.nsteps, 8);
  cr_assert_str_eq(info.proto, "Simple");
  const sched_channel *c = sched_chan_c(s, 1, 0);
  cr_assert_eq(c->nsteps, 4);
  /* recv first: gpu 1's rrc waits for gpu 0's send, so the order is s, rrc,
   * s, r as written */
  cr_assert_eq(c->steps[0].prim, SCHED_P_SEND);
  cr_assert_eq(c->steps[1].prim, SCHED_P_RECV_REDUCE);
  cr_assert_eq(c->steps[1].peer, 0);
  cr_assert_eq(c->steps[1].src.buf, SCHED_BUF_IN);
  cr_assert_eq(c->steps[1].dst.buf, SCHED_BUF_OUT);
  cr_assert_eq(c->steps[1].dst.index, 1);
  cr_assert_eq(c->steps[3].prim, SCHED_P_RECV);
  sched_free(s);
}

Test(msccl, sched_file_reads_xml) {
  sched **out = NULL;
  int n = 0;
  cr_assert_eq(sched_file_parse(good, strlen(good), "p.xml", &out, &n), 0, "%s",
               err_msg());
  cr_assert_eq(n, 1);
  sched_free(out[0]);
  free(out);
  cr_assert(msccl_is_xml(" \n\t<algo", 8));
  cr_assert(!msccl_is_xml(" {\"a\": 1}", 9));
}

Test(msccl, xml_errors_name_the_line) {
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"", "p.xml:1: no element"},
      {"<algo>\n<gpu>\n</algo>", "p.xml:3: </algo> closes <gpu>"},
      {"<algo a=\"1\" a=\"2\"/>", "attribute 'a' given twice"},
      {"<algo a=1/>", "expected a quoted attribute value"},
      {"<algo>\n\ntext</algo>", "p.xml:3: text outside a tag"},
      {"<!DOCTYPE x><algo/>", "DOCTYPE"},
      {"<algo a=\"&bogus;\"/>", "unknown entity"},
      {"<algo/><algo/>", "a second root element"},
      {"<algo>\n  <gpu>", "p.xml:2: <gpu> is never closed"},
      {"<!-- open", "unterminated comment"},
      {"<algo a=\"x", "unterminated attribute value"},
      {"<x/>", "the root element is <x>, not <algo>"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    sched *s = NULL;
    cr_assert_eq(import(cases[i].text, &s), BRAID_ERR_INVALID_ARG, "case %zu",
                 i);
    cr_assert(strstr(err_msg(), cases[i].want), "case %zu: '%s' lacks '%s'", i,
              err_msg(), cases[i].want);
  }
}

Test(msccl, refused_attributes) {
  refused("proto=\"Simple\"", "proto=\"Fast\"", "p.xml:2: proto=\"Fast\"");
  refused("coll=\"allreduce\"", "coll=\"broadcast\"", "braid imports");
  refused("nchunksperloop=\"2\"", "nchunksperloop=\"0\"", "nchunksperloop");
  refused("ngpus=\"2\"", "ngpus=\"3\"", "no <gpu id=\"2\">");
  refused("<step s=\"1\"", "<step s=\"2\"", "steps are numbered");
  refused("type=\"rrc\"", "type=\"xyz\"", "step type \"xyz\"");
  refused("srcoff=\"1\"", "srcoff=\"5\"", "outside the gpu's i buffer");
  refused("send=\"1\"", "send=\"-1\"", "has send=-1");
  refused("recv=\"1\"", "recv=\"0\"", "talks to itself");
  refused("i_chunks=\"2\"", "i_chunks=\"3\"", "i_chunks=\"3\"");
  refused("depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"-1\"",
          "both -1 or both set");
  refused("depid=\"-1\" deps=\"-1\"", "depid=\"0\" deps=\"9\"",
          "does not exist");
  /* gpu 0 reduces chunk 1 instead of 0: the verifier says where */
  refused("type=\"rrc\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\"",
          "type=\"rrc\" srcbuf=\"i\" srcoff=\"1\" dstbuf=\"o\" dstoff=\"1\"",
          "MSCCL gpu 0 threadblock 0 step 1 (type rrc), line 6");
}

Test(msccl, nchunksperloop_must_split_into_blocks) {
  static const char ag[] =
      "<algo ngpus=\"4\" nchunksperloop=\"6\" coll=\"allgather\"></algo>";
  sched *s = NULL;
  cr_assert_eq(import(ag, &s), BRAID_ERR_INVALID_ARG);
  cr_assert(strstr(err_msg(), "nchunksperloop=6 is not a multiple of 4"), "%s",
            err_msg());
}
