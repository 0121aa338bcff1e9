/*
 * Gloo (TCP) timing harness for perf/compare: the same loop, checks and
 * output as braid_bench and mpi_bench (harness.c). See harness.h.
 *
 * Rank and size come from RANK and SIZE; the rendezvous is a
 * gloo::rendezvous::FileStore in GLOO_STORE_DIR (a fresh empty directory per
 * run, shared by the ranks), and the TCP device binds to the loopback
 * interface (GLOO_IFACE, default "lo").
 *
 *   RANK=0 SIZE=2 GLOO_STORE_DIR=/tmp/s gloo_bench allreduce 8 256M 20 5 &
 *   RANK=1 SIZE=2 GLOO_STORE_DIR=/tmp/s gloo_bench allreduce 8 256M 20 5
 */
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "harness.h"

namespace {

uint32_t g_tag = 1;

void sum_float(void *c, const void *a, const void *b, size_t n) {
  gloo::sum<float>(c, a, b, n);
}

void sum_double(void *c, const void *a, const void *b, size_t n) {
  gloo::sum<double>(c, a, b, n);
}

struct Bench {
  std::shared_ptr<gloo::Context> ctx;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
  float *rs_buf = nullptr;
  size_t rs_count = (size_t)-1;
};

void call(void *p, int coll, float *s, float *r, size_t cnt) {
  Bench &b = *static_cast<Bench *>(p);
  int n = b.ctx->size;
  if (coll == H_BARRIER) {
    gloo::BarrierOptions o(b.ctx);
    o.setTag(g_tag++);
    gloo::barrier(o);
    return;
  }
  if (cnt == 0)
    return;
  switch (coll) {
  case H_ALLREDUCE: {
    gloo::AllreduceOptions o(b.ctx);
    o.setInput(s, cnt);
    o.setOutput(r, cnt);
    o.setReduceFunction(sum_float);
    o.setTag(g_tag++);
    gloo::allreduce(o);
    break;
  }
  case H_ALLGATHER: {
    gloo::AllgatherOptions o(b.ctx);
    o.setInput(s, cnt);
    o.setOutput(r, cnt * (size_t)n);
    o.setTag(g_tag++);
    gloo::allgather(o);
    break;
  }
  case H_BROADCAST: {
    gloo::BroadcastOptions o(b.ctx);
    o.setOutput(r, cnt);
    o.setRoot(0);
    o.setTag(g_tag++);
    gloo::broadcast(o);
    break;
  }
  case H_REDUCE_SCATTER: {
    /* Gloo's reduce-scatter is the older in-place algorithm object: the
     * whole buffer is reduced and each rank's block ends at its start
     * (rs_in_place). */
    if (b.rs_count != cnt || b.rs_buf != s) {
      std::vector<float *> ptrs{s};
      std::vector<int> elems((size_t)n, (int)cnt);
      b.rs.reset(new gloo::ReduceScatterHalvingDoubling<float>(
          b.ctx, ptrs, (int)(cnt * (size_t)n), elems));
      b.rs_count = cnt;
      b.rs_buf = s;
    }
    b.rs->run();
    break;
  }
  }
}

void sum(void *p, double *v) {
  Bench &b = *static_cast<Bench *>(p);
  double out = 0;
  gloo::AllreduceOptions o(b.ctx);
  o.setInput(v, 1);
  o.setOutput(&out, 1);
  o.setReduceFunction(sum_double);
  o.setTag(g_tag++);
  gloo::allreduce(o);
  *v = out;
}

void barrier(void *p) {
  double zero = 0;
  sum(p, &zero);
}

} // namespace

int main(int argc, char **argv) {
  h_opts opts;
  if (h_args(argc, argv, &opts))
    return 2;
  const char *rk = getenv("RANK"), *sz = getenv("SIZE");
  const char *dir = getenv("GLOO_STORE_DIR");
  if (!rk || !sz || !dir) {
    fprintf(stderr, "gloo_bench: set RANK, SIZE and GLOO_STORE_DIR\n");
    return 2;
  }
  int rank = atoi(rk), n = atoi(sz);
  const char *iface = getenv("GLOO_IFACE");
  gloo::transport::tcp::attr attr;
  attr.iface = iface ? iface : "lo";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  gloo::rendezvous::PrefixStore prefix("gloo_bench", store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->setTimeout(std::chrono::seconds(300));
  ctx->connectFullMesh(prefix, dev);

  Bench b;
  b.ctx = ctx;
  h_lib lib = {};
  lib.name = "gloo";
  lib.rank = rank;
  lib.nranks = n;
  lib.rs_in_place = 1;
  lib.ctx = &b;
  lib.call = call;
  lib.barrier = barrier;
  lib.sum = sum;
  return h_run(&lib, &opts);
}
