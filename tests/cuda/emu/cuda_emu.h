/*
 * What the emulated GPU's files share (test code only, see cuda_emu.c):
 * cuda_emu.c models the devices, streams and events; cuda_emu_mem.c device
 * and pinned memory, copies and IPC handles; cuda_emu_dev.c braid's device
 * layer (device/cuda_dev.h) on top of both.
 */
#ifndef BRAID_CUDA_EMU_H
#define BRAID_CUDA_EMU_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "device/cuda_dev.h"

/* How long a call that would hang a real process waits before it aborts,
 * saying so. */
#define EMU_FREE_DEADLINE_S 30.0

extern _Thread_local char emu_msg[256]; /* the last error's words */
/* Sets what cudaGetLastError returns next (a failed kernel launch). */
void emu_set_last_error(cudaError_t e);
extern _Thread_local int emu_device; /* cudaSetDevice's */

/* Bus id of device d into out, or -1 when there is no such device; the
 * number of devices for d < 0. */
int emu_busid(int d, char *out, size_t len);
int emu_count(void);
/* Sets the last error and its words (fmt has one %s, for what). */
cudaError_t emu_err(cudaError_t e, const char *fmt, const char *what);

/* Where the emulated GPU reads and writes device memory at p (a second
 * mapping of it: host code that touches a device address faults, as on a
 * GPU); p itself for other memory, NULL for NULL. */
void *emu_view(const void *p);
/* Aborts, naming kernel and what, unless p (a kernel's operand) is NULL,
 * device memory or pinned host memory: a kernel faults on pageable memory. */
void emu_kernel_reaches(const char *kernel, const char *what, const void *p);
/* The device a pointer into device memory belongs to, -1 for other memory
 * (cuda_emu_mem.c). */
int emu_region_device(const void *p);
/* cudev_room on the emulated GPU's regions (cuda_emu_mem.c). */
size_t emu_region_room(const void *p, size_t want);

/* A stream's operations. */
enum emu_kind {
  OP_COPY,
  OP_SET,
  OP_REDUCE,
  OP_DIV,
  OP_SCALE, /* dst = a x scalar: b (device memory, read as it runs) or imm */
  OP_HOSTFN,
  OP_EVREC,
  OP_EVWAIT,
  OP_GATE,
  OP_QUIT
};

struct CUevent_st;

typedef struct emu_op {
  enum emu_kind kind;
  void *dst, *fwd;
  const void *a, *b;
  size_t n;
  int value;
  braid_dtype dt;
  braid_op op;
  unsigned char imm[8]; /* OP_SCALE's host scalar */
  cudaHostFn_t fn;
  void *arg;
  struct CUevent_st *ev;
  uint64_t gen;
  struct emu_gate_words *words; /* a gate's: the words, not the gate */
  uint32_t seq;
  uint64_t ticket; /* CUDA_DEVICE_MAX_CONNECTIONS=1: its place in the queue */
  struct emu_op *next;
} emu_op;

/* A gate (cuda_emu_dev.c): the operation stores seq to "reached", then
 * holds its stream until "released" reaches seq. Words outlive their gate,
 * as dev.c's do (a pool). */
typedef struct emu_gate_words {
  atomic_uint reached, released;
} emu_gate_words;
struct cudev_gate {
  struct CUstream_st *stream;
  emu_gate_words *w;
  uint32_t base, last; /* gate seq is the words' value base + seq */
};

/* Queues a copy of *tmpl on stream h (waits for room in a full queue). */
cudaError_t emu_stream_push(cudaStream_t h, const emu_op *tmpl);
/* What cudaFree does first: waits for the work issued so far on every
 * stream; aborts, naming call, after EMU_FREE_DEADLINE_S. */
void emu_device_idle(const char *call);

#endif
