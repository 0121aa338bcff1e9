/*
 * Inside the MSCCL importer: the file as read (collectives/msccl.c) and the
 * merge of each gpu's threadblocks into one braid channel
 * (collectives/msccl_order.c).
 */
#ifndef BRAID_COLLECTIVES_MSCCL_INT_H
#define BRAID_COLLECTIVES_MSCCL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "msccl.h"
#include "schedule.h"

typedef enum ms_type {
  MS_SEND = 0, /* s */
  MS_RECV,     /* r */
  MS_RCS,      /* rcs: recv, copy to dst, send */
  MS_RRS,      /* rrs: recv, reduce with src, send */
  MS_RRC,      /* rrc: recv, reduce with src, write dst */
  MS_RRCS,     /* rrcs: rrc, then send dst */
  MS_CPY,      /* cpy: dst = src */
  MS_RE,       /* re: dst = dst (+) src */
  MS_NOP,      /* nop: a dependency only */
  MS_NUM_TYPES
} ms_type;

typedef struct ms_step {
  uint8_t type;       /* ms_type */
  uint8_t sbuf, dbuf; /* sched_buf */
  int soff, doff, cnt;
  int depid, deps; /* tb and step this one waits for; -1: none */
  uint32_t pos;    /* byte offset of <step> */
} ms_step;

typedef struct ms_tb {
  int send, recv, chan; /* peers, -1: none */
  int nsteps;
  ms_step *steps;
  uint32_t pos;
} ms_tb;

typedef struct ms_gpu {
  int ichunks, ochunks, schunks;
  int ntb;
  ms_tb *tb;
  uint32_t pos;
} ms_gpu;

typedef struct ms_algo {
  sched_coll coll;
  int ngpus, K;
  int scratch_blocks; /* the XML's scratch, in braid blocks */
  ms_gpu *gpu;
  /* for messages */
  const char *buf, *fname;
  size_t len;
} ms_algo;

/* Where a braid step came from (one per braid step of a rank). */
typedef struct ms_origin {
  int tb, step;
} ms_origin;

int ms_recvs(ms_type t);
int ms_sends(ms_type t);
const char *ms_type_name(ms_type t);

/* Orders every gpu's steps into one channel as a run of the threadblocks
 * would (messages between two gpus matched in order), and writes the braid
 * schedule (*out) with where each step came from (org[rank], nbraid steps
 * each). BRAID_ERR_INVALID_ARG with a message ("fname:line: ...", ERR)
 * naming the gpu, threadblock, step and line when no order exists (a
 * dependency cycle, a message nobody sends or receives). */
braid_result ms_build(const ms_algo *a, sched **out, ms_origin ***org);

#endif
