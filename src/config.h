/*
 * Every environment variable braid reads is read here, once (docs/ENV.md).
 */
#ifndef BRAID_SRC_CONFIG_H
#define BRAID_SRC_CONFIG_H

#include <stddef.h>

typedef struct cfg_env {
  int timeout_ms;        /* BRAID_TIMEOUT (seconds in the env), default 300 s */
  int nchannels;         /* BRAID_NCHANNELS, default 0 = auto */
  int check;             /* BRAID_CHECK, default 0 */
  int deterministic;     /* BRAID_DETERMINISTIC, default 0 */
  const char *transport; /* BRAID_TRANSPORT, default NULL = auto */
  const char *algo;      /* BRAID_ALGO */
  const char *socket_ifname; /* BRAID_SOCKET_IFNAME */
  size_t buffsize;           /* BRAID_BUFFSIZE: bytes of slots per connection */
  size_t cuda_buffsize;      /* BRAID_CUDA_BUFFSIZE: the same for CUDA IPC, 0:
                                buffsize */
  int nslots;                /* BRAID_NSLOTS, default 8 */
  size_t slice_bytes;        /* BRAID_SLICE: pipeline slice (0 = auto) */
  int shm_cma;               /* BRAID_SHM_CMA: single-copy, default 1 */
  size_t cma_threshold;      /* BRAID_SHM_CMA_THRESHOLD, 0: shm_cma_default */
  size_t cma_max;            /* BRAID_SHM_CMA_MAX (0: no limit) */
  int spin_us;               /* BRAID_SPIN_US: spin before yielding */
  int yield_us;              /* BRAID_YIELD_US: poll with yields, then sleep */
  int unstack;               /* BRAID_UNSTACK: move off a peer's CPU */
  int fast_path;             /* BRAID_FAST_PATH: the small-call path */
  int heartbeat_ms;          /* BRAID_HEARTBEAT_MS: tcp, 0 = off */
  int flight_n;              /* BRAID_FLIGHT_RECORDER: calls kept */
  const char *flight_file;   /* BRAID_FLIGHT_RECORDER_FILE: dump pattern */
  int flight_signal;         /* BRAID_FLIGHT_RECORDER_SIGNAL: SIGUSR1 */
  size_t cuda_host_max;      /* BRAID_CUDA_HOST_MAX, default 32K; 0 = off */
  size_t cuda_kernel_max;    /* BRAID_CUDA_KERNEL_MAX, default no limit */
  size_t cuda_kernel_slot;   /* BRAID_CUDA_KERNEL_SLOT, default 4M */
  int cuda_kernel_blocks;    /* BRAID_CUDA_KERNEL_BLOCKS, 0 (default): auto */
  /* BRAID_CUDA_GATE: 1 hold a CUDA stream at a gate while braid runs a
   * call on its own stream (the call returns once enqueued); 0 the calling
   * thread waits for the stream to reach the call and runs it. Default 0:
   * where streams share a hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1
   * always, cuda_one_queue; under MPS on an H100 with 8), a held stream
   * holds braid's own work too */
  int cuda_gate;
  int cuda_one_queue;
  const char *debug;          /* BRAID_DEBUG */
  const char *debug_subsys;   /* BRAID_DEBUG_SUBSYS */
  const char *debug_file;     /* BRAID_DEBUG_FILE */
  const char *topo_file;      /* BRAID_TOPO_FILE */
  const char *topo_dump_file; /* BRAID_TOPO_DUMP_FILE */
  const char *schedule_file;  /* BRAID_SCHEDULE_FILE */
  const char *ofi_provider;   /* BRAID_OFI_PROVIDER, default NULL = fastest */
  const char *ofi_domain;     /* BRAID_OFI_DOMAIN, default NULL = auto */
  const char *ib_hca; /* BRAID_IB_HCA (NCCL syntax), default NULL = all */
  /* CUDA_MPS_PIPE_DIRECTORY (NVIDIA's MPS; NULL: /tmp/nvidia-mps): where
   * the device setup looks for an MPS control daemon (src/comm_dev.c) */
  const char *mps_pipe_dir;
  int ib_gid_index; /* BRAID_IB_GID_INDEX, default -1 = auto */
} cfg_env;

/* Reads the environment once (thread-safe); later calls return the cache. */
const cfg_env *cfg_get(void);
struct tp_settings; /* transports/transport.h */
/* The transports' settings from cfg_get(): what src/ hands them in
 * tp_setup and to their probes (transports read no environment). */
void cfg_tp_settings(struct tp_settings *out);
/* The slot of a connection with `buffsize` bytes of slots (BRAID_NSLOTS
 * of them, rounded down to 64 bytes) and its pipeline slice (BRAID_SLICE
 * when smaller than the slot, else the slot). */
void cfg_slots(size_t buffsize, size_t *slot, size_t *slice);
/* One variable as cfg_validate sees it: its name, its value (NULL when
 * unset) and, when braid would not take the value, why (refused, the
 * sentence braid would log; NULL when accepted). A variable may be seen
 * twice: read, then refused by a check across variables. */
typedef void (*cfg_visit)(void *arg, const char *name, const char *value,
                          const char *refused);
/* Reads the environment as cfg_get does, into a scratch copy, and reports
 * every variable read (set or not) to fn instead of logging refusals; the
 * cache and the log settings are untouched. For braid-doctor. */
void cfg_validate(cfg_visit fn, void *arg);
/* Integer/size parsing with K/M/G suffixes; returns -1 on a bad value. */
int cfg_parse_size(const char *s, size_t *out);

#endif
