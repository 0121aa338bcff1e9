/*
 * Rank, size and rendezvous from a launcher's environment (braidrun,
 * torchrun, Open MPI, Slurm, MPICH/PMI), for braid_comm_init_env.
 */
#ifndef BRAID_SRC_LAUNCH_ENV_H
#define BRAID_SRC_LAUNCH_ENV_H

#include <stddef.h>

#include "braid.h"

typedef struct launch_info {
  int rank, size;
  int local_rank, local_size; /* -1 when the launcher does not say */
  const char *source;         /* "braidrun", "torchrun", "openmpi", ... */
} launch_info;

/* Detects the launcher and builds the unique id every rank of the job agrees
 * on (BRAID_UNIQUE_ID, MASTER_ADDR/MASTER_PORT or BRAID_COMM_ID with the
 * root at rank 0, or a rendezvous file keyed by the job id on one host).
 * Errors (the thread's message, err_msg in src/log.h) name the variable
 * that is missing or malformed. */
braid_result launch_detect(launch_info *li, braid_unique_id *id,
                           int timeout_ms);
/* The i-th of braid's own variables (BRAID_*) read here, NULL past the
 * last (braid-doctor tells them from misspellings). */
const char *launch_env_var(size_t i);
/* Rank and size only (launch_detect's first half: no rendezvous, no
 * file, no socket). */
braid_result launch_rank(launch_info *li);
/* Every launcher variable launch_detect would read, checked by its rules
 * without meeting anyone (no root, no file, no socket): BRAID_SUCCESS with
 * li->source NULL when no launcher's rank or size variable is set; else
 * li as launch_detect gives it and how (len bytes) says how the ranks would
 * meet; an error names the variable, as launch_detect's would. */
braid_result launch_check(launch_info *li, char *how, size_t len);
/* The launcher whose rank or size variable is set (its source name,
 * "braidrun", "torchrun", ...), "braid" for BRAID_UNIQUE_ID alone, or NULL
 * when none is set (braid_env_launcher). */
const char *launch_name(void);
/* Rank 0 removes the rendezvous file, if it made one (after init). */
void launch_cleanup(void);

#endif
