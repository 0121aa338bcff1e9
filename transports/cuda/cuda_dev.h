/*
 * The device layer: what braid needs of CUDA, behind plain C calls, so that
 * the executor, the streams and the transports need no CUDA headers.
 *
 * Built with CUDA (CMake option BRAID_CUDA=AUTO|ON|OFF, AUTO by default), the
 * calls go to the CUDA runtime (linked statically, so libbraid needs no CUDA
 * library at run time and works on machines without a driver or a GPU: then
 * cudev_count() is 0). Built without CUDA, every call reports that.
 *
 * Streams and events are opaque (cudaStream_t / cudaEvent_t as void *).
 * Calls that fail return an error and leave a message for cudev_error(),
 * naming the CUDA call and its error string.
 */
#ifndef BRAID_TRANSPORTS_CUDA_DEV_H
#define BRAID_TRANSPORTS_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "braid.h"

int cudev_built(void); /* 1 when the library was built with CUDA */
int cudev_count(void); /* visible devices; 0 without CUDA, driver or GPU */
/* The message of the last failed call on this thread. */
const char *cudev_error(void);

/* 1: device (or managed) memory, with *device set; 0: host memory (pageable
 * or pinned); -1: error. Never fails for host pointers in a build without
 * CUDA or without a driver (it answers 0). */
int cudev_is_device(const void *p, int *device);
braid_result cudev_set_device(int device);
/* This thread's current device; -1 when there is none (or no CUDA). */
int cudev_get_device(void);
/* PCI bus id "0000:07:00.0" of a device. */
braid_result cudev_busid(int device, char *busid, size_t len);

/* Internal streams and events. */
braid_result cudev_stream_create(void **stream); /* non-blocking */
void cudev_stream_destroy(void *stream);
braid_result cudev_stream_sync(void *stream);
braid_result cudev_event_create(void **event);
braid_result cudev_event_record(void *event, void *stream);
/* BRAID_SUCCESS when done, TP_AGAIN (-1) while pending, else an error. */
int cudev_event_query(void *event);
void cudev_event_destroy(void *event);

/* Memory. */
braid_result cudev_malloc(void **p, size_t n);
void cudev_free(void *p);
braid_result cudev_host_alloc(void **p, size_t n); /* pinned, mapped */
void cudev_host_free(void *p);
/* Asynchronous copy in any direction (cudaMemcpyDefault) on `stream`. */
braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream);

/* Reduction kernels on `stream`, every dtype x op (BRAID_AVG reduces as a
 * sum; cudev_div divides once at the end), with the CPU kernels' results
 * (src/reduce.h: NaN and rounding rules). dst may equal a or b. */
braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream);
/* Reduce and forward in one pass: dst = fwd = a (+) b (fwd: a peer's
 * buffer mapped through IPC, or pinned host memory). */
braid_result cudev_reduce_fwd(void *dst, void *fwd, const void *a,
                              const void *b, size_t n, braid_dtype dt,
                              braid_op op, void *stream);
braid_result cudev_div(void *buf, size_t n, braid_dtype dt, int divisor,
                       void *stream);

/* CUDA IPC: a handle (64 bytes) for a cudaMalloc'd base pointer, and its
 * mapping in another process (same or other GPU of the host). */
#define CUDEV_IPC_BYTES 64
braid_result cudev_ipc_get(void *base, void *handle);
braid_result cudev_ipc_open(const void *handle, void **base);
void cudev_ipc_close(void *base);

/* Stream gates: how a call on a CUDA stream is stream-ordered. The gate
 * enqueues on the user's stream a marker that says "everything before has
 * run" and then holds the stream until braid releases it, without holding a
 * CPU thread. */
typedef struct cudev_gate cudev_gate;
braid_result cudev_gate_new(void *user_stream, cudev_gate **g);
void cudev_gate_free(cudev_gate *g);
/* Enqueues gate number `seq` (increasing) on the user stream. */
braid_result cudev_gate_enqueue(cudev_gate *g, uint32_t seq);
/* 1 when the user stream reached gate seq, 0 not yet. */
int cudev_gate_reached(cudev_gate *g, uint32_t seq);
/* Lets the user stream pass gate seq. */
void cudev_gate_release(cudev_gate *g, uint32_t seq);

#endif
