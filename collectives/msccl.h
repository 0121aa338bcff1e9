/*
 * MSCCL schedules: reads the XML schedule format of MSCCL (and of RCCL,
 * which loads the same files) into braid's schedule IR, and proves the
 * result with the verifier before anyone runs it. The mapping, and what is
 * refused, is documented in docs/SCHEDULES.md ("Importing MSCCL
 * schedules").
 */
#ifndef BRAID_COLLECTIVES_MSCCL_H
#define BRAID_COLLECTIVES_MSCCL_H

#include <stddef.h>

#include "schedule.h"
#include "src/log.h" /* braid_result; err_msg() reads the message */

/* Limits of an imported file. */
#define MSCCL_MAX_GPUS 256
#define MSCCL_MAX_TBS 128          /* threadblocks per gpu */
#define MSCCL_MAX_STEPS (1 << 16)  /* steps of all threadblocks of all gpus */
#define MSCCL_MAX_CHUNKS (1 << 16) /* nchunksperloop, i/o/s_chunks */

/* What the file said, for the tool to report. */
typedef struct msccl_info {
  char name[64];  /* algo name */
  char proto[16]; /* LL, LL128 or Simple (a hint braid does not need) */
  int ngpus;
  int nchunksperloop;
  int nchannels;           /* the XML's channels */
  int nthreadblocks;       /* all gpus */
  int nsteps;              /* all threadblocks */
  int inplace, outofplace; /* the XML's attributes (-1: absent) */
} msccl_info;

/* Is the text XML (its first byte that is not white space or a byte order
 * mark is '<')? */
int msccl_is_xml(const char *buf, size_t len);

/* Imports one <algo> and runs the verifier on the schedule (out of place and
 * in place, 2 slots per connection). BRAID_SUCCESS with *out set (info may
 * be NULL), or an error (BRAID_ERR_INVALID_ARG for a file braid refuses)
 * whose message (ERR) starts with "fname:" and names the line, or the rank,
 * step and chunk the verifier refused together with the MSCCL gpu,
 * threadblock and step they come from. */
braid_result msccl_import(const char *buf, size_t len, const char *fname,
                          sched **out, msccl_info *info);

#endif
