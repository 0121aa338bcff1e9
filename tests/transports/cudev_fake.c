/*
 * A stand-in for the device layer (device/cuda_dev.h) made of host
 * memory, so that tp_cuda's own code -- setup over the bootstrap, IPC
 * mapping, slot offsets, liveness, teardown -- runs between rank processes
 * on a machine without a GPU. "Device memory" is a POSIX shm segment whose
 * name is the IPC handle; copies run at once; an event reports completion
 * only on its second query, so the transport sees pending copies. Linked
 * into a test instead of libbraid, never with it.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/cuda_dev.h"
#include "transports/transport.h"

#define FAKE_MAX 64

typedef struct region {
  void *base;
  size_t size;
  char name[CUDEV_IPC_BYTES];
  int owner;
} region;

static region regions[FAKE_MAX];
static unsigned counter;

typedef struct fev {
  int queries_left;
} fev;

int cudev_built(void) { return 1; }
int cudev_count(void) { return 1; }
const char *cudev_error(void) { return "fake device error"; }
braid_result cudev_set_device(int device) {
  return device == 0 ? BRAID_SUCCESS : BRAID_ERR_INVALID_ARG;
}

braid_result cudev_stream_create(void **stream) {
  *stream = malloc(1);
  return *stream ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
}
void cudev_stream_destroy(void *stream) { free(stream); }
braid_result cudev_stream_sync(void *stream) {
  (void)stream;
  return BRAID_SUCCESS;
}

braid_result cudev_event_create(void **event) {
  *event = calloc(1, sizeof(fev));
  return *event ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
}
braid_result cudev_event_record(void *event, void *stream) {
  if (!stream)
    return BRAID_ERR_INVALID_ARG;
  ((fev *)event)->queries_left = 1;
  return BRAID_SUCCESS;
}
int cudev_event_query(void *event) {
  fev *e = event;
  if (e->queries_left > 0) {
    e->queries_left--;
    return CUDEV_AGAIN;
  }
  return BRAID_SUCCESS;
}
void cudev_event_destroy(void *event) { free(event); }

static region *slot_for(void *base) {
  for (int i = 0; i < FAKE_MAX; i++)
    if (regions[i].base == base)
      return &regions[i];
  return NULL;
}

static braid_result map_region(region *r, int create) {
  int fd = shm_open(r->name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0)
    return BRAID_ERR_SYSTEM;
  struct stat sb;
  if (create && ftruncate(fd, (off_t)r->size) != 0) {
    close(fd);
    return BRAID_ERR_SYSTEM;
  }
  if (!create && fstat(fd, &sb) == 0)
    r->size = (size_t)sb.st_size;
  void *m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return BRAID_ERR_SYSTEM;
  r->base = m;
  return BRAID_SUCCESS;
}

braid_result cudev_malloc(void **p, size_t n) {
  region *r = slot_for(NULL);
  if (!r || n == 0)
    return BRAID_ERR_NOMEM;
  snprintf(r->name, sizeof(r->name), "/braid-fakedev-%d-%u", (int)getpid(),
           counter++);
  r->size = n;
  r->owner = 1;
  braid_result rc = map_region(r, 1);
  if (rc) {
    r->base = NULL;
    return rc;
  }
  *p = r->base;
  return BRAID_SUCCESS;
}

void cudev_free(void *p) {
  region *r = p ? slot_for(p) : NULL;
  if (!r)
    return;
  munmap(r->base, r->size);
  if (r->owner)
    shm_unlink(r->name);
  memset(r, 0, sizeof(*r));
}

braid_result cudev_host_alloc(void **p, size_t n) {
  *p = malloc(n);
  return *p ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
}
void cudev_host_free(void *p) { free(p); }

braid_result cudev_memcpy(void *dst, const void *src, size_t n, void *stream) {
  if (!stream)
    return BRAID_ERR_INVALID_ARG;
  memmove(dst, src, n);
  return BRAID_SUCCESS;
}

braid_result cudev_reduce(void *dst, const void *a, const void *b, size_t n,
                          braid_dtype dt, braid_op op, void *stream) {
  if (!stream || dt != BRAID_FLOAT32 || op != BRAID_SUM)
    return BRAID_ERR_UNSUPPORTED;
  float *d = dst;
  const float *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    d[i] = x[i] + y[i];
  return BRAID_SUCCESS;
}

braid_result cudev_ipc_get(void *base, void *handle) {
  region *r = slot_for(base);
  if (!r || !r->owner)
    return BRAID_ERR_INVALID_ARG;
  memcpy(handle, r->name, CUDEV_IPC_BYTES);
  return BRAID_SUCCESS;
}

braid_result cudev_ipc_open(const void *handle, void **base) {
  region *r = slot_for(NULL);
  if (!r)
    return BRAID_ERR_NOMEM;
  memcpy(r->name, handle, CUDEV_IPC_BYTES);
  r->name[CUDEV_IPC_BYTES - 1] = 0;
  r->owner = 0;
  braid_result rc = map_region(r, 0);
  if (rc) {
    memset(r, 0, sizeof(*r));
    return rc;
  }
  *base = r->base;
  return BRAID_SUCCESS;
}

void cudev_ipc_close(void *base) { cudev_free(base); }

/* Unlinks every region this process created (a rank about to die). */
void fakedev_unlink_all(void) {
  for (int i = 0; i < FAKE_MAX; i++)
    if (regions[i].base && regions[i].owner)
      shm_unlink(regions[i].name);
}
