/*
 * Helper of tests/doctor/doctor_test.sh:
 *   doctor_helper seccomp PROG ARGS...  runs PROG under a seccomp filter that
 *                                       refuses process_vm_readv/writev (EPERM)
 *                                       and lets everything else through;
 *                                       exit 77 when no filter can be installed
 *   doctor_helper seccomp-write PROG ARGS...
 *                                       the same, refusing process_vm_writev
 *                                       alone
 *   doctor_helper bcast                 braid_comm_init_env, then 20 in-place
 *                                       broadcasts of 4 MiB from rank 0, each
 *                                       checked; exit 0 when all were right
 *   doctor_helper ports                 prints two TCP ports free just now
 *   doctor_helper init                  braid_comm_init_env, then an allreduce;
 *                                       exit 0 when both worked, 1 otherwise
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "braid.h"
#include "free_port.h"

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

/* Refuses process_vm_writev, and process_vm_readv too when reads_too. */
static int run_seccomp(char **argv, int reads_too) {
#ifdef ARCH
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
               reads_too ? __NR_process_vm_readv : __NR_process_vm_writev, 1,
               0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    fprintf(stderr, "SKIP: cannot install a seccomp filter: %s\n",
            strerror(errno));
    return 77;
  }
  execvp(argv[0], argv);
  fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
  return 1;
#else
  (void)argv;
  (void)reads_too;
  fprintf(stderr, "SKIP: no seccomp filter for this architecture\n");
  return 77;
#endif
}

static braid_result init_env(braid_comm **c) {
  braid_config cfg;
  braid_config_init(&cfg);
  cfg.timeout_ms = 5000;
  braid_result r = braid_comm_init_env(c, &cfg);
  if (r != BRAID_SUCCESS)
    printf("init failed: %s\n", braid_result_string(r));
  return r;
}

/* In-place broadcasts large enough for the shared single copy (the root
 * writes pieces into its peers' buffers while they read the rest), each
 * round's bytes different, checked on every rank. */
static int run_bcast(void) {
  braid_comm *c = NULL;
  if (init_env(&c) != BRAID_SUCCESS)
    return 1;
  int rank = 0;
  braid_comm_rank(c, &rank);
  size_t n = (size_t)1 << 20; /* 4 MiB of int32 */
  int32_t *v = malloc(n * sizeof *v);
  int bad = 0;
  braid_result r = v ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
  for (int round = 0; round < 20 && r == BRAID_SUCCESS && !bad; round++) {
    for (size_t i = 0; i < n; i++)
      v[i] = rank == 0 ? (int32_t)(i * 7u + (size_t)round) : -1;
    r = braid_broadcast(v, v, n, BRAID_INT32, 0, c, NULL);
    for (size_t i = 0; i < n && r == BRAID_SUCCESS; i++)
      if (v[i] != (int32_t)(i * 7u + (size_t)round)) {
        printf("rank %d round %d: element %zu is %d\n", rank, round, i,
               (int)v[i]);
        bad = 1;
        break;
      }
  }
  free(v);
  braid_comm_destroy(c);
  printf("bcast %s, %s\n", braid_result_string(r), bad ? "wrong" : "right");
  return r == BRAID_SUCCESS && !bad ? 0 : 1;
}

static int run_init(void) {
  braid_comm *c = NULL;
  if (init_env(&c) != BRAID_SUCCESS)
    return 1;
  int v = 1, s = 0;
  braid_result r = braid_allreduce(&v, &s, 1, BRAID_INT32, BRAID_SUM, c, NULL);
  braid_comm_destroy(c);
  printf("init ok, allreduce %s\n", braid_result_string(r));
  return r == BRAID_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "seccomp") == 0)
    return run_seccomp(argv + 2, 1);
  if (argc >= 3 && strcmp(argv[1], "seccomp-write") == 0)
    return run_seccomp(argv + 2, 0);
  if (argc == 2 && strcmp(argv[1], "bcast") == 0)
    return run_bcast();
  if (argc == 2 && strcmp(argv[1], "ports") == 0) {
    int a = free_port(), b = free_port();
    while (b == a && b > 0)
      b = free_port();
    if (a < 0 || b < 0)
      return 1;
    printf("%d %d\n", a, b);
    return 0;
  }
  if (argc == 2 && strcmp(argv[1], "init") == 0)
    return run_init();
  fprintf(stderr, "usage: doctor_helper seccomp PROG ARGS... | seccomp-write "
                  "PROG ARGS... | ports | init | bcast\n");
  return 2;
}
