/*
 * CPU layer kernels for the reference trainer. Activations are NHWC
 * (batch, row, column, channel), row-major. Convolutions are "valid" with
 * stride 1 and run as im2col plus a matrix product (OpenBLAS sgemm) per chunk
 * of a few images; a convolution weight is laid out [cout][ky][kx][cin], so a
 * row of the im2col matrix (ky, kx, cin) meets a row of the weight in one dot
 * product.
 */
#ifndef BRAID_TRAINER_LAYERS_H
#define BRAID_TRAINER_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* Makes OpenBLAS use n threads for every later call (the trainer uses one
 * per rank: the ranks already fill the cores); returns the count OpenBLAS
 * reports afterwards. */
int layers_set_blas_threads(int n);

/* Shape of one convolution: input b x h x w x c, kernel k x k, cout outputs;
 * output b x (h-k+1) x (w-k+1) x cout. */
typedef struct conv_shape {
  int b, h, w, c, k, cout;
} conv_shape;

static inline int conv_oh(const conv_shape *s) { return s->h - s->k + 1; }
static inline int conv_ow(const conv_shape *s) { return s->w - s->k + 1; }
/* Rows and columns of the im2col matrix. */
static inline size_t conv_rows(const conv_shape *s) {
  return (size_t)s->b * conv_oh(s) * conv_ow(s);
}
static inline size_t conv_cols(const conv_shape *s) {
  return (size_t)s->k * s->k * s->c;
}

/* col (rows x cols) from in, for images [b0, b0 + nb) of the batch. */
void im2col(const conv_shape *s, int b0, int nb, const float *in, float *col);
/* din += scatter of dcol, same image range (din zeroed by the caller). */
void col2im_add(const conv_shape *s, int b0, int nb, const float *dcol,
                float *din);

/* Images per im2col chunk: the convolutions work a few images at a time so
 * the im2col matrix stays in cache. */
int conv_chunk(const conv_shape *s);
/* Floats of scratch the convolution calls need (one chunk's im2col). */
size_t conv_scratch(const conv_shape *s);

/* out = conv(in) + bias, then ReLU when relu != 0. */
void conv_forward(const conv_shape *s, const float *in, const float *w,
                  const float *bias, int relu, float *scratch, float *out);
/* Parameter gradients from dout (the output's gradient) and the forward
 * input: gw = dout^T im2col(in), gbias = column sums of dout. */
void conv_backward_params(const conv_shape *s, const float *dout,
                          const float *in, float *scratch, float *gw,
                          float *gbias);
/* Input gradient: col2im(dout w) into din (overwritten). */
void conv_backward_input(const conv_shape *s, const float *dout, const float *w,
                         float *scratch, float *din);

/* out (b x nout) = in (b x nin) w^T + bias, w is nout x nin; then ReLU
 * when relu != 0. */
void dense_forward(int b, int nin, int nout, const float *in, const float *w,
                   const float *bias, int relu, float *out);
void dense_backward_params(int b, int nin, int nout, const float *dout,
                           const float *in, float *gw, float *gbias);
void dense_backward_input(int b, int nin, int nout, const float *dout,
                          const float *w, float *din);

/* In place x = max(x, 0); backward: d *= (y > 0) with y the output. */
void relu_forward(size_t n, float *x);
void relu_backward(size_t n, const float *y, float *d);

/* 2x2 average pooling with stride 2 (floor: an odd last row/column is
 * dropped), NHWC. */
void avgpool2_forward(int b, int h, int w, int c, const float *in, float *out);
/* din (b x h x w x c) is overwritten. */
void avgpool2_backward(int b, int h, int w, int c, const float *dout,
                       float *din);

/* avgpool2_backward then relu_backward in one pass: din is the gradient
 * through a ReLU whose output y (b x h x w x c) fed the pooling. */
void avgpool2_relu_backward(int b, int h, int w, int c, const float *dout,
                            const float *y, float *din);

/* Softmax cross-entropy over b rows of n logits. Returns the sum of the
 * per-row losses and the number of rows whose arg-max is the label; writes
 * dlogits = scale * (softmax - onehot) when dlogits != NULL. */
double softmax_xent(int b, int n, const float *logits, const uint8_t *labels,
                    float scale, float *dlogits, long *correct);

#endif
