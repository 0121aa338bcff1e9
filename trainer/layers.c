#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

int layers_set_blas_threads(int n) {
  openblas_set_num_threads(n);
  return openblas_get_num_threads();
}

void im2col(const conv_shape *s, int b0, int nb, const float *in, float *col) {
  const int oh = conv_oh(s), ow = conv_ow(s), k = s->k, c = s->c;
  const size_t kc = (size_t)k * c, cols = conv_cols(s);
  for (int b = 0; b < nb; b++) {
    const float *img = in + (size_t)(b0 + b) * s->h * s->w * c;
    for (int oy = 0; oy < oh; oy++) {
      for (int ox = 0; ox < ow; ox++) {
        float *row = col + (((size_t)b * oh + oy) * ow + ox) * cols;
        for (int ky = 0; ky < k; ky++) {
          /* k adjacent pixels of all channels are contiguous in NHWC */
          const float *src = img + ((size_t)(oy + ky) * s->w + ox) * c;
          memcpy(row + ky * kc, src, kc * sizeof(float));
        }
      }
    }
  }
}

void col2im_add(const conv_shape *s, int b0, int nb, const float *dcol,
                float *din) {
  const int oh = conv_oh(s), ow = conv_ow(s), k = s->k, c = s->c;
  const size_t kc = (size_t)k * c, cols = conv_cols(s);
  for (int b = 0; b < nb; b++) {
    float *img = din + (size_t)(b0 + b) * s->h * s->w * c;
    for (int oy = 0; oy < oh; oy++) {
      for (int ox = 0; ox < ow; ox++) {
        const float *row = dcol + (((size_t)b * oh + oy) * ow + ox) * cols;
        for (int ky = 0; ky < k; ky++) {
          float *dst = img + ((size_t)(oy + ky) * s->w + ox) * c;
          const float *src = row + ky * kc;
          for (size_t i = 0; i < kc; i++)
            dst[i] += src[i];
        }
      }
    }
  }
}

static void bias_act_rows(size_t rows, int n, const float *bias, int relu,
                          float *out) {
  for (size_t r = 0; r < rows; r++) {
    float *o = out + r * n;
    if (relu) {
      for (int j = 0; j < n; j++) {
        float v = o[j] + bias[j];
        o[j] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int j = 0; j < n; j++)
        o[j] += bias[j];
    }
  }
}

static void col_sums(size_t rows, int n, const float *d, float *out) {
  /* accumulate in double: rows can be in the hundreds of thousands */
  double acc[256];
  for (int off = 0; off < n; off += 256) {
    int m = n - off < 256 ? n - off : 256;
    memset(acc, 0, sizeof acc);
    for (size_t r = 0; r < rows; r++) {
      const float *p = d + r * n + off;
      for (int j = 0; j < m; j++)
        acc[j] += p[j];
    }
    for (int j = 0; j < m; j++)
      out[off + j] = (float)acc[j];
  }
}

/* About 512 KiB of im2col per chunk: a few images of the 5x5 convolution,
 * a few dozen of the 3x3 one. */
#define CHUNK_FLOATS (128 * 1024)

int conv_chunk(const conv_shape *s) {
  size_t per = (size_t)conv_oh(s) * conv_ow(s) * conv_cols(s);
  size_t n = per ? CHUNK_FLOATS / per : 1;
  if (n < 1)
    n = 1;
  if (n > (size_t)s->b)
    n = s->b > 0 ? (size_t)s->b : 1;
  return (int)n;
}

size_t conv_scratch(const conv_shape *s) {
  return (size_t)conv_chunk(s) * conv_oh(s) * conv_ow(s) * conv_cols(s);
}

void conv_forward(const conv_shape *s, const float *in, const float *w,
                  const float *bias, int relu, float *scratch, float *out) {
  const size_t cols = conv_cols(s), per = (size_t)conv_oh(s) * conv_ow(s);
  const int chunk = conv_chunk(s);
  for (int b0 = 0; b0 < s->b; b0 += chunk) {
    const int nb = s->b - b0 < chunk ? s->b - b0 : chunk;
    const size_t rows = (size_t)nb * per;
    float *o = out + (size_t)b0 * per * s->cout;
    im2col(s, b0, nb, in, scratch);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, s->cout,
                (int)cols, 1.0f, scratch, (int)cols, w, (int)cols, 0.0f, o,
                s->cout);
    bias_act_rows(rows, s->cout, bias, relu, o);
  }
}

void conv_backward_params(const conv_shape *s, const float *dout,
                          const float *in, float *scratch, float *gw,
                          float *gbias) {
  const size_t cols = conv_cols(s), per = (size_t)conv_oh(s) * conv_ow(s);
  const int chunk = conv_chunk(s);
  if (s->b <= 0) {
    memset(gw, 0, (size_t)s->cout * cols * sizeof(float));
    memset(gbias, 0, (size_t)s->cout * sizeof(float));
    return;
  }
  for (int b0 = 0; b0 < s->b; b0 += chunk) {
    const int nb = s->b - b0 < chunk ? s->b - b0 : chunk;
    const size_t rows = (size_t)nb * per;
    im2col(s, b0, nb, in, scratch);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->cout, (int)cols,
                (int)rows, 1.0f, dout + (size_t)b0 * per * s->cout, s->cout,
                scratch, (int)cols, b0 == 0 ? 0.0f : 1.0f, gw, (int)cols);
  }
  col_sums(conv_rows(s), s->cout, dout, gbias);
}

void conv_backward_input(const conv_shape *s, const float *dout, const float *w,
                         float *scratch, float *din) {
  const size_t cols = conv_cols(s), per = (size_t)conv_oh(s) * conv_ow(s);
  const int chunk = conv_chunk(s);
  memset(din, 0, (size_t)s->b * s->h * s->w * s->c * sizeof(float));
  for (int b0 = 0; b0 < s->b; b0 += chunk) {
    const int nb = s->b - b0 < chunk ? s->b - b0 : chunk;
    const size_t rows = (size_t)nb * per;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)cols,
                s->cout, 1.0f, dout + (size_t)b0 * per * s->cout, s->cout, w,
                (int)cols, 0.0f, scratch, (int)cols);
    col2im_add(s, b0, nb, scratch, din);
  }
}

void dense_forward(int b, int nin, int nout, const float *in, const float *w,
                   const float *bias, int relu, float *out) {
  if (b == 0)
    return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, nout, nin, 1.0f, in,
              nin, w, nin, 0.0f, out, nout);
  bias_act_rows((size_t)b, nout, bias, relu, out);
}

void dense_backward_params(int b, int nin, int nout, const float *dout,
                           const float *in, float *gw, float *gbias) {
  if (b == 0) {
    memset(gw, 0, (size_t)nout * nin * sizeof(float));
    memset(gbias, 0, (size_t)nout * sizeof(float));
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nout, nin, b, 1.0f, dout,
              nout, in, nin, 0.0f, gw, nin);
  col_sums((size_t)b, nout, dout, gbias);
}

void dense_backward_input(int b, int nin, int nout, const float *dout,
                          const float *w, float *din) {
  if (b == 0)
    return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, nin, nout, 1.0f,
              dout, nout, w, nin, 0.0f, din, nin);
}

void relu_forward(size_t n, float *x) {
  for (size_t i = 0; i < n; i++)
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(size_t n, const float *y, float *d) {
  for (size_t i = 0; i < n; i++)
    d[i] = y[i] > 0.0f ? d[i] : 0.0f;
}

void avgpool2_forward(int b, int h, int w, int c, const float *in, float *out) {
  const int ph = h / 2, pw = w / 2;
  for (int n = 0; n < b; n++) {
    const float *img = in + (size_t)n * h * w * c;
    float *o = out + (size_t)n * ph * pw * c;
    for (int y = 0; y < ph; y++) {
      for (int x = 0; x < pw; x++) {
        const float *p00 = img + ((size_t)(2 * y) * w + 2 * x) * c;
        const float *p01 = p00 + c;
        const float *p10 = p00 + (size_t)w * c;
        const float *p11 = p10 + c;
        float *q = o + ((size_t)y * pw + x) * c;
        for (int j = 0; j < c; j++)
          q[j] = 0.25f * (p00[j] + p01[j] + p10[j] + p11[j]);
      }
    }
  }
}

void avgpool2_backward(int b, int h, int w, int c, const float *dout,
                       float *din) {
  const int ph = h / 2, pw = w / 2;
  memset(din, 0, (size_t)b * h * w * c * sizeof(float));
  for (int n = 0; n < b; n++) {
    float *img = din + (size_t)n * h * w * c;
    const float *d = dout + (size_t)n * ph * pw * c;
    for (int y = 0; y < ph; y++) {
      for (int x = 0; x < pw; x++) {
        float *p00 = img + ((size_t)(2 * y) * w + 2 * x) * c;
        float *p01 = p00 + c;
        float *p10 = p00 + (size_t)w * c;
        float *p11 = p10 + c;
        const float *q = d + ((size_t)y * pw + x) * c;
        for (int j = 0; j < c; j++) {
          float g = 0.25f * q[j];
          p00[j] = g;
          p01[j] = g;
          p10[j] = g;
          p11[j] = g;
        }
      }
    }
  }
}

void avgpool2_relu_backward(int b, int h, int w, int c, const float *dout,
                            const float *y, float *din) {
  const int ph = h / 2, pw = w / 2;
  if ((h & 1) || (w & 1)) /* a dropped last row or column gets no gradient */
    memset(din, 0, (size_t)b * h * w * c * sizeof(float));
  for (int n = 0; n < b; n++) {
    float *img = din + (size_t)n * h * w * c;
    const float *yi = y + (size_t)n * h * w * c;
    const float *d = dout + (size_t)n * ph * pw * c;
    for (int py = 0; py < ph; py++) {
      for (int px = 0; px < pw; px++) {
        const size_t o00 = ((size_t)(2 * py) * w + 2 * px) * c;
        const size_t o01 = o00 + c, o10 = o00 + (size_t)w * c, o11 = o10 + c;
        const float *q = d + ((size_t)py * pw + px) * c;
        for (int j = 0; j < c; j++) {
          const float g = 0.25f * q[j];
          img[o00 + j] = yi[o00 + j] > 0.0f ? g : 0.0f;
          img[o01 + j] = yi[o01 + j] > 0.0f ? g : 0.0f;
          img[o10 + j] = yi[o10 + j] > 0.0f ? g : 0.0f;
          img[o11 + j] = yi[o11 + j] > 0.0f ? g : 0.0f;
        }
      }
    }
  }
}

double softmax_xent(int b, int n, const float *logits, const uint8_t *labels,
                    float scale, float *dlogits, long *correct) {
  double loss = 0.0;
  long ok = 0;
  for (int i = 0; i < b; i++) {
    const float *z = logits + (size_t)i * n;
    int arg = 0;
    float mx = z[0];
    for (int j = 1; j < n; j++) {
      if (z[j] > mx) {
        mx = z[j];
        arg = j;
      }
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++)
      sum += exp((double)z[j] - mx);
    const int y = labels[i];
    loss += log(sum) - ((double)z[y] - mx);
    if (arg == y)
      ok++;
    if (dlogits) {
      float *d = dlogits + (size_t)i * n;
      for (int j = 0; j < n; j++) {
        double p = exp((double)z[j] - mx) / sum;
        d[j] = (float)(scale * (p - (j == y ? 1.0 : 0.0)));
      }
    }
  }
  if (correct)
    *correct = ok;
  return loss;
}
