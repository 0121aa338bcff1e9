/*
 * What several transports share (transports/common.h): sticky messages,
 * peer processes, shared-memory segments. The parts of a setup that use the
 * bootstrap are in transports/common_setup.c.
 */
#include "transports/common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/log.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

void tp_keep_msg(char *why) { snprintf(why, TP_WHY, "%s", err_msg()); }

/* ---- peer processes ------------------------------------------------------ */

int tp_pid_state(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
  if (fd >= 0)
    close(fd);
  if (n <= 0) /* reaped, or no /proc: ask the kernel whether it exists */
    return kill(pid, 0) != 0 && errno == ESRCH ? TP_PID_GONE : TP_PID_RUNNING;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the state follows the command */
  if (p == NULL || p[1] != ' ')
    return TP_PID_RUNNING;
  char state = p[2];
  if (state != 'Z' && state != 'X')
    return TP_PID_RUNNING;
  /* field 52 (exit_code, wait status) counted from the state (field 3) */
  int field = 3;
  long code = -1;
  for (const char *q = p + 2; *q; q++)
    if (*q == ' ' && ++field == 52) {
      code = strtol(q + 1, NULL, 10);
      break;
    }
  return code >= 0 && (code & 0x7f) != 0 ? TP_PID_KILLED : TP_PID_EXITED;
}

int tp_pid_gone(int pid) { return tp_pid_state(pid) != TP_PID_RUNNING; }

int tp_pidfd_open(int pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int tp_peer_exited(int pidfd, int pid) {
  if (pidfd < 0)
    return tp_pid_gone(pid);
  struct pollfd pf = {pidfd, POLLIN, 0};
  return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLIN | POLLHUP));
}

uint64_t tp_pidns_id(void) {
  struct stat sb;
  if (stat("/proc/self/ns/pid", &sb) != 0)
    return 0;
  return (uint64_t)sb.st_ino ^ ((uint64_t)sb.st_dev << 32);
}

/* ---- shared-memory segments ---------------------------------------------- */

static _Atomic unsigned tp_seg_counter;

int tp_seg_create(const tp_seg_req *r, char *name, size_t namelen, void **map) {
  *map = NULL;
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; tries++) {
    snprintf(name, namelen, "/%s-%012" PRIx64 "-%d-%d-%u", r->prefix,
             (uint64_t)(r->token & 0xffffffffffffULL), (int)getpid(), r->rank,
             atomic_fetch_add(&tp_seg_counter, 1));
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0) {
    int e = errno;
    name[0] = 0;
    return ERR(BRAID_ERR_SYSTEM,
               "%s: rank %d cannot create a segment in /dev/shm: %s", r->who,
               r->rank, strerror(e));
  }
  int e = ftruncate(fd, (off_t)r->bytes) != 0 ? errno : 0;
  if (!e)
    e = posix_fallocate(fd, 0, (off_t)r->bytes);
  void *m = MAP_FAILED;
  if (!e) {
    m = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      e = errno;
  }
  close(fd);
  if (e) {
    shm_unlink(name);
    name[0] = 0;
    return ERR(e == ENOSPC ? BRAID_ERR_NOMEM : BRAID_ERR_SYSTEM,
               "%s: rank %d cannot allocate %" PRIu64 " bytes in /dev/shm%s: "
               "%s%s",
               r->who, r->rank, r->bytes, r->detail ? r->detail : "",
               strerror(e), e == ENOSPC && r->hint ? r->hint : "");
  }
  *map = m;
  return BRAID_SUCCESS;
}

int tp_seg_map(const char *name, uint64_t size, void **map) {
  *map = NULL;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  struct stat sb;
  int e = fd < 0 ? errno : 0;
  if (!e && fstat(fd, &sb) != 0)
    e = errno;
  if (!e && (uint64_t)sb.st_size < size)
    e = EINVAL;
  if (!e) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      e = errno;
    else
      *map = m;
  }
  if (fd >= 0)
    close(fd);
  return e;
}
