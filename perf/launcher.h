/*
 * Whether a launcher started this process, for braid-perf and the compare
 * harness (perf/compare/braid_bench.c): with any rank or size variable of a
 * launcher braid_comm_init_env reads (docs/LAUNCH.md, "The rules,
 * exactly"), or braidrun's unique id, set, the tools join the job through
 * braid_comm_init_env, which also reports one of rank and size set without
 * the other, naming the variable; with none set they run one rank alone, as
 * nccl-tests does without mpirun.
 */
#ifndef BRAID_PERF_LAUNCHER_H
#define BRAID_PERF_LAUNCHER_H

#include <stdlib.h>

static inline int perf_launched(void) {
  static const char *const vars[] = {"BRAID_RANK",
                                     "BRAID_SIZE",
                                     "BRAID_UNIQUE_ID",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "PMI_RANK",
                                     "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i]) != NULL)
      return 1;
  return 0;
}

#endif
