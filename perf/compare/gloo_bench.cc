/*
 * Gloo (TCP) timing harness for perf/compare. See harness.h.
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
#include <memory>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "harness.h"
}

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
  int coll;
  float *s, *r;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
  size_t rs_count = (size_t)-1;

  void call(size_t cnt) {
    int n = ctx->size;
    if (cnt == 0)
      return;
    switch (coll) {
    case H_ALLREDUCE: {
      gloo::AllreduceOptions o(ctx);
      o.setInput(s, cnt);
      o.setOutput(r, cnt);
      o.setReduceFunction(sum_float);
      o.setTag(g_tag++);
      gloo::allreduce(o);
      break;
    }
    case H_ALLGATHER: {
      gloo::AllgatherOptions o(ctx);
      o.setInput(s, cnt);
      o.setOutput(r, cnt * (size_t)n);
      o.setTag(g_tag++);
      gloo::allgather(o);
      break;
    }
    case H_BROADCAST: {
      gloo::BroadcastOptions o(ctx);
      o.setOutput(r, cnt);
      o.setRoot(0);
      o.setTag(g_tag++);
      gloo::broadcast(o);
      break;
    }
    case H_REDUCE_SCATTER: {
      /* Gloo's reduce-scatter is the older in-place algorithm object: the
       * whole buffer is reduced and each rank keeps its block. */
      if (rs_count != cnt) {
        std::vector<float *> ptrs{s};
        std::vector<int> elems((size_t)n, (int)cnt);
        rs.reset(new gloo::ReduceScatterHalvingDoubling<float>(
            ctx, ptrs, (int)(cnt * (size_t)n), elems));
        rs_count = cnt;
      }
      rs->run();
      break;
    }
    }
  }
};

double mean_over_ranks(std::shared_ptr<gloo::Context> &ctx, double t) {
  double out = 0;
  gloo::AllreduceOptions o(ctx);
  o.setInput(&t, 1);
  o.setOutput(&out, 1);
  o.setReduceFunction(sum_double);
  o.setTag(g_tag++);
  gloo::allreduce(o);
  return out / ctx->size;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

int main(int argc, char **argv) {
  int coll, iters, warmup;
  size_t minb, maxb;
  if (h_args(argc, argv, &coll, &minb, &maxb, &iters, &warmup))
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

  size_t cap = maxb < 64 ? 64 : maxb;
  Bench b;
  b.ctx = ctx;
  b.coll = coll;
  b.s = static_cast<float *>(aligned_alloc(64, (cap + 63) / 64 * 64));
  b.r = static_cast<float *>(aligned_alloc(64, (cap + 63) / 64 * 64));
  for (size_t i = 0; i < cap / 4; i++) {
    b.s[i] = (float)(rank + 1);
    b.r[i] = 0;
  }
  if (rank == 0)
    h_header(stdout, "gloo", coll, n);
  std::shared_ptr<gloo::Context> base = ctx;
  for (size_t bytes = minb; bytes <= maxb; bytes = bytes ? bytes * 2 : 1) {
    size_t cnt = h_param_count(coll, bytes, n);
    for (int i = 0; i < warmup; i++)
      b.call(cnt);
    mean_over_ranks(base, 0); /* a barrier */
    double t0 = now();
    for (int i = 0; i < iters; i++)
      b.call(cnt);
    double t = mean_over_ranks(base, (now() - t0) / iters);
    if (rank == 0) {
      double alg, bus;
      h_bw(coll, cnt, t, n, &alg, &bus);
      size_t shown = coll == H_ALLGATHER || coll == H_REDUCE_SCATTER
                         ? cnt * (size_t)n * 4
                         : cnt * 4;
      printf("%zu %zu %.3f %.6g %.6g\n", shown, cnt, t * 1e6, alg, bus);
      fflush(stdout);
    }
    if (bytes >= maxb)
      break;
  }
  free(b.s);
  free(b.r);
  return 0;
}
