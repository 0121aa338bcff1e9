/*
 * braid-doctor's checks (docs/DOCTOR.md): what on this machine or in this
 * environment would stop a job or slow it, each finding with a verdict and
 * the fix. tools/braid-doctor.c prints them; the library runs the cheap ones
 * when a communicator fails to form and logs what is not ok at WARN.
 *
 * The checks read settings through src/config.c (cfg_get, cfg_validate) and
 * ask the transports and the device layer what they would do, so that the
 * doctor and the library agree.
 */
#ifndef BRAID_SRC_DOCTOR_H
#define BRAID_SRC_DOCTOR_H

#include <stddef.h>
#include <sys/types.h>

#include "braid.h"

typedef enum doc_verdict {
  DOC_OK = 0,   /* nothing to do */
  DOC_WARN = 1, /* a job runs, slower or not as asked */
  DOC_ERROR = 2 /* a job would fail to form or fail later */
} doc_verdict;

typedef struct doc_finding {
  char check[16]; /* "shm", "cma", "net", "limits", "rdma", "gpu", ... */
  doc_verdict verdict;
  char what[640]; /* what was found */
  char fix[512];  /* what to do ("" when nothing) */
} doc_finding;

typedef struct doc_report {
  doc_finding *f;
  int n, cap;
  int oom; /* a finding was lost for want of memory */
} doc_report;

typedef struct doc_opts {
  int local_ranks; /* ranks per host the job runs; <= 0: the launcher's
                      local size, else nranks, else min(cores, 8) */
  int nranks;      /* ranks of the job; <= 0: the launcher's, else unknown */
  int cheap;       /* 1: no child process, no topology, no GPU context (the
                      init-failure path) */
} doc_opts;

/* Runs every local check into r (appends). BRAID_ERR_NOMEM only. */
braid_result doc_run(const doc_opts *o, doc_report *r);
/* What the ranks of doc_ranks learn of each other: every rank's worst
 * verdict, and the communicator, kept so that no rank leaves before every
 * report is out (doc_job_end). */
typedef struct doc_job {
  int rank, nranks;      /* nranks 0: the verdicts were not exchanged */
  doc_verdict worst;     /* the worst verdict of every rank's report */
  doc_verdict *verdicts; /* each rank's worst, nranks of them */
  braid_comm *comm;
} doc_job;

/* Tries a real rendezvous over the launcher's variables
 * (braid_comm_init_env's rules), a tiny allreduce and a send/recv with each
 * peer, every wait bounded by timeout_ms; appends findings under "ranks",
 * naming the pair or the step that failed. nranks > 0 must match the
 * launcher's size. Where all of that worked, the ranks exchange the worst
 * verdicts of their reports (r, the last finding of which is the one added
 * here) into job, whose communicator stays open: call doc_job_end once this
 * rank's report is out. */
braid_result doc_ranks(int nranks, int timeout_ms, doc_report *r, doc_job *job);
/* Waits until every rank of job has called it (each has printed its
 * report), bounded by the timeout of doc_ranks, then closes job. Nothing
 * when the verdicts were not exchanged. */
void doc_job_end(doc_job *job);
/* The worst verdict in r (DOC_OK when empty). */
doc_verdict doc_worst(const doc_report *r);
void doc_report_free(doc_report *r);
const char *doc_verdict_name(doc_verdict v); /* "ok", "warning", "error" */

/* The init-failure hook (src/comm.c): runs the cheap checks for a job of
 * nranks (the ranks on this host counted from the bootstrap b when it
 * formed, else NULL), logs every finding that is not ok at WARN, and keeps
 * err (the init error) for doc_ranks. */
struct tp_bootstrap;
void doc_init_failed(int rank, int nranks, const struct tp_bootstrap *b,
                     const char *err);

/* 1: doc_init_failed keeps the error but logs nothing (doc_ranks, which
 * reports the findings itself). */
void doc_init_quiet(int quiet);
/* The error text the last doc_init_failed kept ("" when none). */
void doc_last_init_error(char *buf, size_t len);

/* ---- internal to the doctor (src/doctor*.c) ---------------------------- */
__attribute__((format(printf, 5, 6))) braid_result
doc_add(doc_report *r, const char *check, doc_verdict v, const char *fix,
        const char *fmt, ...);
void doc_net(const doc_opts *o, int nranks, int local, doc_report *r);
/* What the transports' probes found (ib_probe_device, ofi_probe_fast). */
typedef struct doc_probe {
  int ib, ofi;
  char dev[64], prov[64];
} doc_probe;
void doc_rdma(const doc_opts *o, const doc_probe *p, doc_report *r);
void doc_gpu(const doc_opts *o, int local, doc_report *r);
/* Bytes as "64 MiB" into buf. */
const char *doc_bytes(unsigned long long b, char *buf, size_t len);
/* Forks a child joined to this process by two pipes (close-on-exec): *in
 * reads what the other side writes to *out. 0 in the child, the child's pid
 * in the parent, -1 when a pipe or the fork failed (nothing left open). */
pid_t doc_fork_piped(int *in, int *out);

#endif
