/*
 * LeNet on a CUDA device (lenet_cuda.h): lenet.c's forward and backward
 * passes with one simple kernel per operation, all on the model's stream.
 * The geometry, the NHWC layout, the [cout][ky][kx][cin] weights and the
 * order of the flat parameter array are lenet.c's; the arithmetic differs
 * only in summation order (the matrix products accumulate in float, the
 * bias sums and the softmax in double, as on the CPU).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "lenet.h"
}
#include "lenet_cuda.h"

namespace {

enum {
  C1 = 20,
  K1 = 3,
  H1 = LENET_IN - K1 + 1, /* 26 */
  P1 = H1 / 2,            /* 13 */
  C2 = 50,
  K2 = 5,
  H2 = P1 - K2 + 1,    /* 9 */
  P2 = H2 / 2,         /* 4 */
  FLAT = P2 * P2 * C2, /* 800 */
  HID = 128,
  TILE = 16,
  THREADS = 256
};

thread_local char err_msg[256];

int fail(const char *what, cudaError_t e) {
  snprintf(err_msg, sizeof err_msg, "%s: %s", what, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return -1;
}

#define CK(what, expr)                                                         \
  do {                                                                         \
    cudaError_t e_ = (expr);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return fail(what, e_);                                                   \
  } while (0)

unsigned blocks(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

struct shape { /* a "valid" convolution, stride 1, NHWC */
  int b, h, w, c, k, cout;
  __host__ __device__ int oh() const { return h - k + 1; }
  __host__ __device__ int ow() const { return w - k + 1; }
  __host__ __device__ size_t rows() const { return (size_t)b * oh() * ow(); }
  __host__ __device__ size_t cols() const { return (size_t)k * k * c; }
};

/* col[(b, oy, ox)][(ky, kx, ci)] = in[b][oy + ky][ox + kx][ci] */
__global__ void k_im2col(shape s, const float *in, float *col) {
  size_t n = s.rows() * s.cols();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / s.cols(), q = i % s.cols();
    int ci = (int)(q % s.c), kx = (int)(q / s.c % s.k),
        ky = (int)(q / s.c / s.k);
    int ox = (int)(r % s.ow()), oy = (int)(r / s.ow() % s.oh());
    size_t b = r / s.ow() / s.oh();
    col[i] = in[((b * s.h + oy + ky) * s.w + ox + kx) * s.c + ci];
  }
}

/* din[b][y][x][ci] = sum of dcol over the (oy, ox, ky, kx) that read it: a
 * gather, so every element is written once (no atomics, same result every
 * run). */
__global__ void k_col2im(shape s, const float *dcol, float *din) {
  size_t n = (size_t)s.b * s.h * s.w * s.c;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int ci = (int)(i % s.c), x = (int)(i / s.c % s.w),
        y = (int)(i / s.c / s.w % s.h);
    size_t b = i / s.c / s.w / s.h;
    float acc = 0.0f;
    for (int ky = 0; ky < s.k; ky++)
      for (int kx = 0; kx < s.k; kx++) {
        int oy = y - ky, ox = x - kx;
        if (oy < 0 || ox < 0 || oy >= s.oh() || ox >= s.ow())
          continue;
        size_t r = (b * s.oh() + oy) * s.ow() + ox;
        acc += dcol[r * s.cols() + ((size_t)ky * s.k + kx) * s.c + ci];
      }
    din[i] = acc;
  }
}

/* C (m x n, row-major, ldc = n) = op(A) op(B) (+ C when accumulate), with
 * op(A) m x k and op(B) k x n; ta/tb: the operand is stored transposed.
 * 16 x 16 tiles through shared memory. */
__global__ void k_gemm(int m, int n, int k, const float *A, int lda, int ta,
                       const float *B, int ldb, int tb, float *C,
                       int accumulate) {
  __shared__ float as[TILE][TILE + 1], bs[TILE][TILE + 1];
  int row = blockIdx.x * TILE + threadIdx.y; /* rows: x, up to 2^31 - 1 */
  int col = blockIdx.y * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += TILE) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    as[threadIdx.y][threadIdx.x] =
        row < m && ka < k
            ? (ta ? A[(size_t)ka * lda + row] : A[(size_t)row * lda + ka])
            : 0.0f;
    bs[threadIdx.y][threadIdx.x] =
        kb < k && col < n
            ? (tb ? B[(size_t)col * ldb + kb] : B[(size_t)kb * ldb + col])
            : 0.0f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TILE; j++)
      acc += as[threadIdx.y][j] * bs[j][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) {
    float *c = C + (size_t)row * n + col;
    *c = accumulate ? *c + acc : acc;
  }
}

/* out[r][j] += bias[j], then ReLU when relu. */
__global__ void k_bias_act(size_t rows, int n, const float *bias, int relu,
                           float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = out[i] + bias[i % n];
    out[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
}

/* out[j] = sum over rows of d[r][j], one block per column, in double. */
__global__ void k_col_sums(size_t rows, int n, const float *d, float *out) {
  __shared__ double part[THREADS];
  int j = blockIdx.x;
  double acc = 0.0;
  for (size_t r = threadIdx.x; r < rows; r += blockDim.x)
    acc += d[r * n + j];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s)
      part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[j] = (float)part[0];
}

__global__ void k_relu_backward(size_t n, const float *y, float *d) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    d[i] = y[i] > 0.0f ? d[i] : 0.0f;
}

__global__ void k_pool_forward(int b, int h, int w, int c, const float *in,
                               float *out) {
  int ph = h / 2, pw = w / 2;
  size_t n = (size_t)b * ph * pw * c;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int j = (int)(i % c), x = (int)(i / c % pw), y = (int)(i / c / pw % ph);
    size_t img = i / c / pw / ph;
    const float *p00 = in + ((img * h + 2 * y) * w + 2 * x) * c + j;
    const float *p10 = p00 + (size_t)w * c;
    out[i] = 0.25f * (p00[0] + p00[c] + p10[0] + p10[c]);
  }
}

/* din = avgpool2 backward of dout, through a ReLU with output y. */
__global__ void k_pool_relu_backward(int b, int h, int w, int c,
                                     const float *dout, const float *y,
                                     float *din) {
  int ph = h / 2, pw = w / 2;
  size_t n = (size_t)b * h * w * c;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int j = (int)(i % c), x = (int)(i / c % w), yy = (int)(i / c / w % h);
    size_t img = i / c / w / h;
    float g = 0.0f;
    if (yy / 2 < ph && x / 2 < pw && y[i] > 0.0f)
      g = 0.25f * dout[((img * ph + yy / 2) * pw + x / 2) * c + j];
    din[i] = g;
  }
}

/* One row per thread, as layers.c's softmax_xent. */
__global__ void k_softmax_xent(int b, int n, const float *logits,
                               const uint8_t *labels, float scale,
                               float *dlogits, double *loss, int *ok) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b)
    return;
  const float *z = logits + (size_t)i * n;
  int arg = 0;
  float mx = z[0];
  for (int j = 1; j < n; j++)
    if (z[j] > mx) {
      mx = z[j];
      arg = j;
    }
  double sum = 0.0;
  for (int j = 0; j < n; j++)
    sum += exp((double)z[j] - mx);
  int y = labels[i];
  loss[i] = log(sum) - ((double)z[y] - mx);
  ok[i] = arg == y;
  if (dlogits)
    for (int j = 0; j < n; j++) {
      double p = exp((double)z[j] - mx) / sum;
      dlogits[(size_t)i * n + j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));
    }
}

__global__ void k_sgd(size_t n, float lr, const float *g, float *p) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] -= lr * g[i];
}

} // namespace

struct lenet_cuda {
  lenet_tensor t[LENET_NTENSORS];
  size_t nparams;
  int maxb;
  cudaStream_t stream;
  float *params, *grads, *x, *col;
  uint8_t *labels;
  float *a1, *p1, *a2, *p2, *h, *logits;
  float *dlogits, *dh, *dp2, *da2, *dp1, *da1;
  double *loss;
  int *ok;
  double *hloss; /* pinned copies of the per-row results */
  int *hok;
};

namespace {

unsigned grid_for(size_t n) {
  unsigned g = blocks(n);
  return g < 4096 ? (g ? g : 1) : 4096;
}

float *P(lenet_cuda *m, int t) { return m->params + m->t[t].off; }
float *G(lenet_cuda *m, int t) { return m->grads + m->t[t].off; }

/* C (m x n) = op(A) op(B) (+ C) */
void gemm(cudaStream_t s, int m, int n, int k, const float *A, int lda, int ta,
          const float *B, int ldb, int tb, float *C, int acc) {
  /* m (batch x pixels) can pass gridDim.y's 65535 tiles; n is small */
  dim3 grid((m + TILE - 1) / TILE, (n + TILE - 1) / TILE), block(TILE, TILE);
  k_gemm<<<grid, block, 0, s>>>(m, n, k, A, lda, ta, B, ldb, tb, C, acc);
}

void conv_forward(lenet_cuda *m, shape s, const float *in, int wt, int bt,
                  float *out) {
  k_im2col<<<grid_for(s.rows() * s.cols()), THREADS, 0, m->stream>>>(s, in,
                                                                     m->col);
  /* out (rows x cout) = col (rows x cols) w^T */
  gemm(m->stream, (int)s.rows(), s.cout, (int)s.cols(), m->col, (int)s.cols(),
       0, P(m, wt), (int)s.cols(), 1, out, 0);
  k_bias_act<<<grid_for(s.rows() * s.cout), THREADS, 0, m->stream>>>(
      s.rows(), s.cout, P(m, bt), 1, out);
}

void conv_backward(lenet_cuda *m, shape s, const float *dout, const float *in,
                   int wt, int bt, float *din) {
  k_im2col<<<grid_for(s.rows() * s.cols()), THREADS, 0, m->stream>>>(s, in,
                                                                     m->col);
  /* gw (cout x cols) = dout^T (cout x rows) col (rows x cols) */
  gemm(m->stream, s.cout, (int)s.cols(), (int)s.rows(), dout, s.cout, 1, m->col,
       (int)s.cols(), 0, G(m, wt), 0);
  k_col_sums<<<s.cout, THREADS, 0, m->stream>>>(s.rows(), s.cout, dout,
                                                G(m, bt));
  if (din == NULL)
    return;
  /* dcol (rows x cols) = dout (rows x cout) w (cout x cols), into col */
  gemm(m->stream, (int)s.rows(), (int)s.cols(), s.cout, dout, s.cout, 0,
       P(m, wt), (int)s.cols(), 0, m->col, 0);
  k_col2im<<<grid_for((size_t)s.b * s.h * s.w * s.c), THREADS, 0, m->stream>>>(
      s, m->col, din);
}

void dense_forward(lenet_cuda *m, int b, int nin, int nout, const float *in,
                   int wt, int bt, int relu, float *out) {
  gemm(m->stream, b, nout, nin, in, nin, 0, P(m, wt), nin, 1, out, 0);
  k_bias_act<<<grid_for((size_t)b * nout), THREADS, 0, m->stream>>>(
      (size_t)b, nout, P(m, bt), relu, out);
}

void dense_backward(lenet_cuda *m, int b, int nin, int nout, const float *dout,
                    const float *in, int wt, int bt, float *din) {
  /* gw (nout x nin) = dout^T in; gbias = column sums; din = dout w */
  gemm(m->stream, nout, nin, b, dout, nout, 1, in, nin, 0, G(m, wt), 0);
  k_col_sums<<<nout, THREADS, 0, m->stream>>>((size_t)b, nout, dout, G(m, bt));
  gemm(m->stream, b, nin, nout, dout, nout, 0, P(m, wt), nin, 0, din, 0);
}

shape conv1(int b) { return shape{b, LENET_IN, LENET_IN, 1, K1, C1}; }
shape conv2(int b) { return shape{b, P1, P1, C1, K2, C2}; }

void forward(lenet_cuda *m, int b) {
  cudaStream_t s = m->stream;
  conv_forward(m, conv1(b), m->x, LENET_CONV1_W, LENET_CONV1_B, m->a1);
  k_pool_forward<<<grid_for((size_t)b * P1 * P1 * C1), THREADS, 0, s>>>(
      b, H1, H1, C1, m->a1, m->p1);
  conv_forward(m, conv2(b), m->p1, LENET_CONV2_W, LENET_CONV2_B, m->a2);
  k_pool_forward<<<grid_for((size_t)b * FLAT), THREADS, 0, s>>>(b, H2, H2, C2,
                                                                m->a2, m->p2);
  dense_forward(m, b, FLAT, HID, m->p2, LENET_FC1_W, LENET_FC1_B, 1, m->h);
  dense_forward(m, b, HID, LENET_CLASSES, m->h, LENET_FC2_W, LENET_FC2_B, 0,
                m->logits);
}

int upload(lenet_cuda *m, int b, const float *x, const uint8_t *labels) {
  if (b < 0 || b > m->maxb) {
    snprintf(err_msg, sizeof err_msg,
             "lenet_cuda: batch %d outside [0, %d] (maxb)", b, m->maxb);
    return -1;
  }
  CK("cudaMemcpyAsync (images)",
     cudaMemcpyAsync(m->x, x, (size_t)b * LENET_IN * LENET_IN * sizeof(float),
                     cudaMemcpyHostToDevice, m->stream));
  CK("cudaMemcpyAsync (labels)",
     cudaMemcpyAsync(m->labels, labels, (size_t)b, cudaMemcpyHostToDevice,
                     m->stream));
  return 0;
}

int results(lenet_cuda *m, int b, double *loss_sum, long *correct) {
  CK("cudaMemcpyAsync (loss)",
     cudaMemcpyAsync(m->hloss, m->loss, (size_t)b * sizeof(double),
                     cudaMemcpyDeviceToHost, m->stream));
  CK("cudaMemcpyAsync (correct)",
     cudaMemcpyAsync(m->hok, m->ok, (size_t)b * sizeof(int),
                     cudaMemcpyDeviceToHost, m->stream));
  CK("cudaStreamSynchronize", cudaStreamSynchronize(m->stream));
  double l = 0.0;
  long ok = 0;
  for (int i = 0; i < b; i++) {
    l += m->hloss[i];
    ok += m->hok[i];
  }
  *loss_sum = l;
  *correct = ok;
  return 0;
}

} // namespace

extern "C" {

int lenet_cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

const char *lenet_cuda_error(void) { return err_msg; }

void lenet_cuda_destroy(lenet_cuda *m) {
  if (m == NULL)
    return;
  float *bufs[] = {m->params, m->grads, m->x,   m->col,    m->a1,      m->p1,
                   m->a2,     m->p2,    m->h,   m->logits, m->dlogits, m->dh,
                   m->dp2,    m->da2,   m->dp1, m->da1};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    cudaFree(bufs[i]);
  cudaFree(m->labels);
  cudaFree(m->loss);
  cudaFree(m->ok);
  cudaFreeHost(m->hloss);
  cudaFreeHost(m->hok);
  if (m->stream)
    cudaStreamDestroy(m->stream);
  (void)cudaGetLastError();
  free(m);
}

int lenet_cuda_create(lenet_cuda **out, int maxb) {
  *out = NULL;
  lenet host; /* the layout of the CPU model */
  if (lenet_create(&host, 0) != 0) {
    snprintf(err_msg, sizeof err_msg, "lenet_cuda_create: out of memory");
    return -1;
  }
  lenet_cuda *m = (lenet_cuda *)calloc(1, sizeof *m);
  if (m == NULL) {
    lenet_destroy(&host);
    snprintf(err_msg, sizeof err_msg, "lenet_cuda_create: out of memory");
    return -1;
  }
  memcpy(m->t, host.t, sizeof m->t);
  m->nparams = host.nparams;
  lenet_destroy(&host);
  m->maxb = maxb > 0 ? maxb : 1;
  const size_t b = (size_t)m->maxb, fl = sizeof(float);
  shape s1 = conv1((int)b), s2 = conv2((int)b);
  size_t col = s1.rows() * s1.cols() > s2.rows() * s2.cols()
                   ? s1.rows() * s1.cols()
                   : s2.rows() * s2.cols();
  struct {
    float **p;
    size_t n;
  } a[] = {{&m->params, m->nparams},
           {&m->grads, m->nparams},
           {&m->x, b * LENET_IN * LENET_IN},
           {&m->col, col},
           {&m->a1, b * H1 * H1 * C1},
           {&m->p1, b * P1 * P1 * C1},
           {&m->a2, b * H2 * H2 * C2},
           {&m->p2, b * FLAT},
           {&m->h, b * HID},
           {&m->logits, b * LENET_CLASSES},
           {&m->dlogits, b * LENET_CLASSES},
           {&m->dh, b * HID},
           {&m->dp2, b * FLAT},
           {&m->da2, b * H2 * H2 * C2},
           {&m->dp1, b * P1 * P1 * C1},
           {&m->da1, b * H1 * H1 * C1}};
  cudaError_t e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    lenet_cuda_destroy(m);
    return fail("cudaStreamCreateWithFlags", e);
  }
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
    if ((e = cudaMalloc((void **)a[i].p, a[i].n * fl)) != cudaSuccess) {
      lenet_cuda_destroy(m);
      return fail("cudaMalloc", e);
    }
  if ((e = cudaMalloc((void **)&m->labels, b)) != cudaSuccess ||
      (e = cudaMalloc((void **)&m->loss, b * sizeof(double))) != cudaSuccess ||
      (e = cudaMalloc((void **)&m->ok, b * sizeof(int))) != cudaSuccess ||
      (e = cudaMallocHost((void **)&m->hloss, b * sizeof(double))) !=
          cudaSuccess ||
      (e = cudaMallocHost((void **)&m->hok, b * sizeof(int))) != cudaSuccess ||
      (e = cudaMemsetAsync(m->params, 0, m->nparams * fl, m->stream)) !=
          cudaSuccess ||
      (e = cudaMemsetAsync(m->grads, 0, m->nparams * fl, m->stream)) !=
          cudaSuccess) {
    lenet_cuda_destroy(m);
    return fail("cudaMalloc", e);
  }
  *out = m;
  return 0;
}

size_t lenet_cuda_nparams(const lenet_cuda *m) { return m->nparams; }
float *lenet_cuda_params(lenet_cuda *m) { return m->params; }
float *lenet_cuda_grads(lenet_cuda *m) { return m->grads; }
void *lenet_cuda_stream(lenet_cuda *m) { return m->stream; }

int lenet_cuda_set_params(lenet_cuda *m, const float *host) {
  CK("cudaMemcpyAsync (parameters)",
     cudaMemcpyAsync(m->params, host, m->nparams * sizeof(float),
                     cudaMemcpyHostToDevice, m->stream));
  CK("cudaStreamSynchronize", cudaStreamSynchronize(m->stream));
  return 0;
}

int lenet_cuda_get_params(lenet_cuda *m, float *host) {
  CK("cudaMemcpyAsync (parameters)",
     cudaMemcpyAsync(host, m->params, m->nparams * sizeof(float),
                     cudaMemcpyDeviceToHost, m->stream));
  CK("cudaStreamSynchronize", cudaStreamSynchronize(m->stream));
  return 0;
}

int lenet_cuda_get_grads(lenet_cuda *m, float *host) {
  CK("cudaMemcpyAsync (gradients)",
     cudaMemcpyAsync(host, m->grads, m->nparams * sizeof(float),
                     cudaMemcpyDeviceToHost, m->stream));
  CK("cudaStreamSynchronize", cudaStreamSynchronize(m->stream));
  return 0;
}

int lenet_cuda_train_step(lenet_cuda *m, int b, const float *x,
                          const uint8_t *labels, float scale, double *loss_sum,
                          long *correct) {
  *loss_sum = 0.0;
  *correct = 0;
  if (b == 0) {
    CK("cudaMemsetAsync",
       cudaMemsetAsync(m->grads, 0, m->nparams * sizeof(float), m->stream));
    return 0;
  }
  if (upload(m, b, x, labels) != 0)
    return -1;
  cudaStream_t s = m->stream;
  forward(m, b);
  k_softmax_xent<<<(b + 127) / 128, 128, 0, s>>>(b, LENET_CLASSES, m->logits,
                                                 m->labels, scale, m->dlogits,
                                                 m->loss, m->ok);
  /* fc2, fc1 */
  dense_backward(m, b, HID, LENET_CLASSES, m->dlogits, m->h, LENET_FC2_W,
                 LENET_FC2_B, m->dh);
  k_relu_backward<<<grid_for((size_t)b * HID), THREADS, 0, s>>>((size_t)b * HID,
                                                                m->h, m->dh);
  dense_backward(m, b, FLAT, HID, m->dh, m->p2, LENET_FC1_W, LENET_FC1_B,
                 m->dp2);
  /* pool2, relu, conv2 */
  k_pool_relu_backward<<<grid_for((size_t)b * H2 * H2 * C2), THREADS, 0, s>>>(
      b, H2, H2, C2, m->dp2, m->a2, m->da2);
  conv_backward(m, conv2(b), m->da2, m->p1, LENET_CONV2_W, LENET_CONV2_B,
                m->dp1);
  /* pool1, relu, conv1 (no input gradient) */
  k_pool_relu_backward<<<grid_for((size_t)b * H1 * H1 * C1), THREADS, 0, s>>>(
      b, H1, H1, C1, m->dp1, m->a1, m->da1);
  conv_backward(m, conv1(b), m->da1, m->x, LENET_CONV1_W, LENET_CONV1_B, NULL);
  CK("kernel launch", cudaGetLastError());
  return results(m, b, loss_sum, correct);
}

int lenet_cuda_evaluate(lenet_cuda *m, int b, const float *x,
                        const uint8_t *labels, double *loss_sum,
                        long *correct) {
  *loss_sum = 0.0;
  *correct = 0;
  if (b == 0)
    return 0;
  if (upload(m, b, x, labels) != 0)
    return -1;
  forward(m, b);
  k_softmax_xent<<<(b + 127) / 128, 128, 0, m->stream>>>(
      b, LENET_CLASSES, m->logits, m->labels, 1.0f, NULL, m->loss, m->ok);
  CK("kernel launch", cudaGetLastError());
  return results(m, b, loss_sum, correct);
}

int lenet_cuda_allreduce_grads(lenet_cuda *m, braid_comm *c, braid_stream *s) {
  braid_result r = braid_allreduce(m->grads, m->grads, m->nparams,
                                   BRAID_FLOAT32, BRAID_AVG, c, s);
  if (r != BRAID_SUCCESS) {
    snprintf(err_msg, sizeof err_msg, "braid_allreduce (gradients): %s",
             braid_comm_last_error(c));
    return -1;
  }
  return 0;
}

int lenet_cuda_sgd(lenet_cuda *m, float lr) {
  k_sgd<<<grid_for(m->nparams), THREADS, 0, m->stream>>>(m->nparams, lr,
                                                         m->grads, m->params);
  CK("kernel launch (sgd)", cudaGetLastError());
  return 0;
}

int lenet_cuda_sync(lenet_cuda *m) {
  CK("cudaStreamSynchronize", cudaStreamSynchronize(m->stream));
  return 0;
}

} /* extern "C" */
