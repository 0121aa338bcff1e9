/*
 * The one place braid reads environment variables (docs/ENV.md lists them).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/plan.h"
#include "log.h"
#include "transports/transport.h"

static cfg_env g_cfg;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Set while cfg_validate runs: every read and refusal goes to it instead of
 * the log (one validation at a time, under g_visit_lock). */
static cfg_visit g_visit;
static void *g_visit_arg;
static pthread_mutex_t g_visit_lock = PTHREAD_MUTEX_INITIALIZER;

int cfg_parse_size(const char *s, size_t *out) {
  /* a digit first: strtoull would skip blanks and take a minus sign
   * (" -1" is SIZE_MAX to it) */
  if (s == NULL || *s < '0' || *s > '9')
    return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s)
    return -1;
  unsigned long long mult = 1;
  if (*end == 'k' || *end == 'K')
    mult = 1ull << 10;
  else if (*end == 'm' || *end == 'M')
    mult = 1ull << 20;
  else if (*end == 'g' || *end == 'G')
    mult = 1ull << 30;
  if (mult != 1)
    end++;
  if (*end == 'B' || *end == 'b')
    end++;
  if (*end != '\0')
    return -1;
  if (v > (unsigned long long)SIZE_MAX / mult)
    return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static const char *env_raw(const char *name) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : NULL;
}

/* A value braid does not take: logged, or reported to cfg_validate's
 * visitor. */
__attribute__((format(printf, 3, 4))) static void
refuse(const char *name, const char *value, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_visit != NULL)
    g_visit(g_visit_arg, name, value, msg);
  else
    WARN(LOG_ENV, "%s", msg);
}

static const char *env_str(const char *name) {
  const char *v = env_raw(name);
  if (g_visit != NULL)
    g_visit(g_visit_arg, name, v, NULL);
  return v;
}

static int env_int(const char *name, int def, int lo, int hi) {
  const char *v = env_str(name);
  if (v == NULL)
    return def;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    /* "its default": a default of 0 can mean "chosen by braid" */
    refuse(name, v, "%s=%s is not an integer in [%d, %d]; using its default",
           name, v, lo, hi);
    return def;
  }
  return (int)x;
}

static size_t env_size(const char *name, size_t def) {
  const char *v = env_str(name);
  if (v == NULL)
    return def;
  size_t x;
  if (cfg_parse_size(v, &x) != 0) {
    refuse(name, v, "%s=%s is not a size (like 4M); using its default", name,
           v);
    return def;
  }
  return x;
}

static void cfg_fill(cfg_env *c) {
  /* Logging first, so that warnings below go where the user asked. */
  c->debug = env_str("BRAID_DEBUG");
  c->debug_subsys = env_str("BRAID_DEBUG_SUBSYS");
  c->debug_file = env_str("BRAID_DEBUG_FILE");
  if (g_visit == NULL)
    log_configure(c->debug, c->debug_subsys, c->debug_file);

  c->timeout_ms = env_int("BRAID_TIMEOUT", 300, 1, 86400) * 1000;
  c->nchannels = env_int("BRAID_NCHANNELS", 0, 0, 32);
  c->check = env_int("BRAID_CHECK", 0, 0, 1);
  c->deterministic = env_int("BRAID_DETERMINISTIC", 0, 0, 1);
  c->transport = env_str("BRAID_TRANSPORT");
  c->algo = env_str("BRAID_ALGO");
  c->socket_ifname = env_str("BRAID_SOCKET_IFNAME");
  c->buffsize = env_size("BRAID_BUFFSIZE", (size_t)4 << 20);
  c->nslots = env_int("BRAID_NSLOTS", 8, 2, 64);
  c->slice_bytes = env_size("BRAID_SLICE", 0);
  c->shm_cma = env_int("BRAID_SHM_CMA", 1, 0, 1);
  c->cma_threshold = env_size("BRAID_SHM_CMA_THRESHOLD", 0); /* 0: by CPUs */
  c->cma_max = env_size("BRAID_SHM_CMA_MAX", (size_t)32 << 20);
  c->spin_us = env_int("BRAID_SPIN_US", 50, 0, 1000000);
  c->yield_us = env_int("BRAID_YIELD_US", 2000, 0, 10000000);
  c->unstack = env_int("BRAID_UNSTACK", 1, 0, 1);
  c->fast_path = env_int("BRAID_FAST_PATH", 1, 0, 1);
  c->heartbeat_ms = env_int("BRAID_HEARTBEAT_MS", 1000, 0, 3600000);
  c->flight_n = env_int("BRAID_FLIGHT_RECORDER", 256, 0, 1 << 20);
  c->flight_file = env_str("BRAID_FLIGHT_RECORDER_FILE");
  if (c->flight_file == NULL || c->flight_file[0] == '\0')
    c->flight_file = "/tmp/braid-flight.%h.%p.%c.r%r.jsonl";
  c->flight_signal = env_int("BRAID_FLIGHT_RECORDER_SIGNAL", 1, 0, 1);
  /* measured on an H100 under MPS (docs/PERFORMANCE.md, "Figures"): the
   * collective kernels were the fastest path at every size from 8 B to 256
   * MiB; of the others, host memory was the faster up to 32 KiB */
  c->cuda_host_max =
      env_size("BRAID_CUDA_HOST_MAX", PLAN_CUDA_HOST_MAX_DEFAULT);
  c->cuda_kernel_max = env_size("BRAID_CUDA_KERNEL_MAX", SIZE_MAX);
  c->cuda_kernel_slot = env_size("BRAID_CUDA_KERNEL_SLOT", (size_t)4 << 20);
  if (c->cuda_kernel_slot < 256) {
    refuse("BRAID_CUDA_KERNEL_SLOT", env_raw("BRAID_CUDA_KERNEL_SLOT"),
           "BRAID_CUDA_KERNEL_SLOT=%zu is below 256 bytes; using 4M",
           c->cuda_kernel_slot);
    c->cuda_kernel_slot = (size_t)4 << 20;
  }
  /* at most CUDEV_KA_BLOCKS (device/cuda_dev.h); 0: by the ranks
   * sharing the GPU (src/exec_kernel.c, blocks_for) */
  c->cuda_kernel_blocks = env_int("BRAID_CUDA_KERNEL_BLOCKS", 0, 0, 128);
  c->cuda_buffsize = env_size("BRAID_CUDA_BUFFSIZE", 0);
  c->cuda_one_queue = env_int("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, 32) == 1;
  /* gates held braid's own work behind a held stream on an H100 under MPS
   * (docs/CUDA.md, "Stream gates and hardware queues"): off unless asked */
  c->cuda_gate = env_int("BRAID_CUDA_GATE", 0, 0, 1);
  c->topo_file = env_str("BRAID_TOPO_FILE");
  c->topo_dump_file = env_str("BRAID_TOPO_DUMP_FILE");
  c->schedule_file = env_str("BRAID_SCHEDULE_FILE");
  c->ofi_provider = env_str("BRAID_OFI_PROVIDER");
  c->ofi_domain = env_str("BRAID_OFI_DOMAIN");
  c->ib_hca = env_str("BRAID_IB_HCA");
  c->mps_pipe_dir = env_str("CUDA_MPS_PIPE_DIRECTORY");
  c->ib_gid_index = env_int("BRAID_IB_GID_INDEX", -1, -1, 65535);
  const char *bs = env_raw("BRAID_BUFFSIZE");
  bs = bs != NULL ? bs : "4M";
  if (c->buffsize < (size_t)c->nslots * 4096) {
    refuse("BRAID_BUFFSIZE", bs,
           "BRAID_BUFFSIZE=%s is below %d slots of 4 KiB; using 4M", bs,
           c->nslots);
    c->buffsize = (size_t)4 << 20;
  }
  /* a slot is at most 4 GiB (the shm ring's limit, transports/shm_setup.c) */
  if (c->buffsize / (size_t)c->nslots > ((size_t)4 << 30)) {
    refuse("BRAID_BUFFSIZE", bs,
           "BRAID_BUFFSIZE=%s makes slots of more than 4 GiB (%d slots, "
           "BRAID_NSLOTS); using 4M",
           bs, c->nslots);
    c->buffsize = (size_t)4 << 20;
  }
  if (c->cuda_buffsize != 0 && c->cuda_buffsize < (size_t)c->nslots * 4096) {
    refuse("BRAID_CUDA_BUFFSIZE", env_raw("BRAID_CUDA_BUFFSIZE"),
           "BRAID_CUDA_BUFFSIZE=%zu is below %d slots of 4 KiB; using "
           "BRAID_BUFFSIZE",
           c->cuda_buffsize, c->nslots);
    c->cuda_buffsize = 0;
  }
}

static void cfg_load(void) { cfg_fill(&g_cfg); }

void cfg_validate(cfg_visit fn, void *arg) {
  cfg_env scratch;
  memset(&scratch, 0, sizeof scratch);
  pthread_mutex_lock(&g_visit_lock);
  pthread_once(&g_once, cfg_load); /* the cache is filled without a visitor */
  g_visit = fn;
  g_visit_arg = arg;
  cfg_fill(&scratch);
  g_visit = NULL;
  g_visit_arg = NULL;
  pthread_mutex_unlock(&g_visit_lock);
}

void cfg_slots(size_t buffsize, size_t *slot, size_t *slice) {
  const cfg_env *env = cfg_get();
  *slot = buffsize / (size_t)env->nslots & ~(size_t)63;
  *slice = env->slice_bytes > 0 && env->slice_bytes < *slot ? env->slice_bytes
                                                            : *slot;
}

const cfg_env *cfg_get(void) {
  pthread_once(&g_once, cfg_load);
  return &g_cfg;
}

void cfg_tp_settings(tp_settings *out) {
  const cfg_env *c = cfg_get();
  *out = (tp_settings){.shm_cma = c->shm_cma,
                       .cma_threshold = c->cma_threshold,
                       .heartbeat_ms = c->heartbeat_ms,
                       .socket_ifname = c->socket_ifname,
                       .ofi_provider = c->ofi_provider,
                       .ofi_domain = c->ofi_domain,
                       .ib_hca = c->ib_hca,
                       .ib_gid_index = c->ib_gid_index};
}
