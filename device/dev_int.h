/*
 * Internal interface between the device layer (dev.c, C) and its kernels
 * (kernels.cu): launches that return a cudaError_t as an int. dev.c checks
 * the arguments and turns errors into messages.
 */
#ifndef BRAID_TRANSPORTS_CUDA_DEV_INT_H
#define BRAID_TRANSPORTS_CUDA_DEV_INT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] (and fwd[i], when fwd is not NULL) for n elements of
 * dtype dt (braid_dtype); op is braid_op (BRAID_AVG sums). `sms` is the
 * current device's multiprocessor count: a launch has at most sms times the
 * blocks of its kernel that stay resident on one (its registers decide), so
 * that they all run at once; 256 threads per block. */
int cuk_reduce(void *dst, void *fwd, const void *a, const void *b, size_t n,
               int dt, int op, unsigned sms, void *stream);
/* buf[i] /= divisor. */
int cuk_div(void *buf, size_t n, int dt, int divisor, unsigned sms,
            void *stream);
/* dst[i] = src[i] x scalar (reduce_ops.cuh's product) for n elements of
 * dtype dt: scalar read from dscalar (device memory) when the kernel runs,
 * or, dscalar NULL, the element in the low bytes of imm (scale.cu). */
int cuk_scale(void *dst, const void *src, size_t n, int dt, const void *dscalar,
              uint64_t imm, unsigned sms, void *stream);
/* Loads the scaling kernels on the current device (as cuk_preload). */
int cuk_scale_preload(void);
/* The gate without stream memory operations: one thread that stores seq to
 * *reached and waits until (int32_t)(*released - seq) >= 0 (device pointers
 * of mapped pinned host memory). */
int cuk_gate(uint32_t *reached, uint32_t *released, uint32_t seq, void *stream);
/* The kernel of cudev_kernel_coll (cuda_dev.h); the call is valid. */
struct cudev_ka;
struct cudev_kcall;
int cuk_coll(const struct cudev_ka *k, uint64_t seq,
             const struct cudev_kcall *call, void *stream);
/* The fewest blocks of that kernel (any dtype and op) resident on one SM of
 * the current device (1 for one the runtime cannot say of). */
int cuk_coll_resident(int *per_sm);
/* Loads every kernel above on the current device (cudaFuncGetAttributes)
 * and computes the reduction kernels' resident blocks per SM. Lazy loading
 * would otherwise load one at its first launch, which may wait for a stream
 * that a gate holds. */
int cuk_preload(void);
/* Threads per block of the reduction kernels. */
#define CUK_THREADS 256

/* Tests: 1 makes new gates use the kernel even where stream memory
 * operations work (to test both), 0 restores the default. */
void cudev_gate_force_kernel(int on);
/* Tests: 1 when gate g uses stream memory operations, 0 the kernel. */
struct cudev_gate;
int cudev_gate_uses_memops(const struct cudev_gate *g);

#ifdef __cplusplus
}
#endif

#endif
