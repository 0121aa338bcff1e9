/*
 * braid-perf's device buffers (-G 1): the few CUDA runtime calls it needs,
 * behind plain C so that braid_perf.c includes no CUDA header. perf_dev.c
 * implements them on the CUDA runtime (a build with BRAID_CUDA);
 * perf_dev_none.c answers that braid-perf was built without CUDA.
 *
 * Every call returns 0 on success or -1 after writing a message naming the
 * CUDA call and its error string to msg (PERF_DEV_MSG bytes).
 */
#ifndef BRAID_PERF_CUDA_PERF_DEV_H
#define BRAID_PERF_CUDA_PERF_DEV_H

#include <stddef.h>

#define PERF_DEV_MSG 256

/* 1 when braid-perf was built with CUDA. */
int perf_dev_built(void);
/* Number of visible devices; -1 (with msg) when there is none or no driver. */
int perf_dev_count(char *msg);
/* Makes `device` current on this thread; writes its name and PCI bus id to
 * desc (len bytes). */
int perf_dev_select(int device, char *desc, size_t len, char *msg);
int perf_dev_alloc(void **p, size_t n, char *msg);
void perf_dev_free(void *p);
/* Synchronous copies (cudaMemcpy) and fill. */
int perf_dev_to_host(void *dst, const void *src, size_t n, char *msg);
int perf_dev_from_host(void *dst, const void *src, size_t n, char *msg);
int perf_dev_fill(void *p, int byte, size_t n, char *msg);
/* A non-blocking CUDA stream (cudaStream_t as void *). */
int perf_dev_stream_create(void **stream, char *msg);
int perf_dev_stream_sync(void *stream, char *msg);
void perf_dev_stream_destroy(void *stream);
/* Waits for all work of the device (cudaDeviceSynchronize). */
int perf_dev_sync(char *msg);

#endif
