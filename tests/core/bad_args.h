/*
 * The bad-argument walker's table (tests/core/bad_args.c): the arguments of
 * a call with good defaults, the bad values that replace one of them, a
 * caller per public function, and the rows that pair them.
 */
#ifndef BRAID_TESTS_BAD_ARGS_H
#define BRAID_TESTS_BAD_ARGS_H

#include <stddef.h>

#include "braid.h"

#define MAXR 8

typedef struct env {
  braid_comm *c, *newc;
  int rank, n;
  float a[64], b[64];
  size_t cnt[MAXR], dsp[MAXR], cnt_self[MAXR], dsp_step1[MAXR], dsp_big[MAXR];
  int ex[1];
  braid_stream *s1, *s2, *cuda, *news;
  braid_unique_id id, idout; /* id: the job's (BRAID_UNIQUE_ID) */
  braid_config cfg, okcfg;
  char text[2 * BRAID_UNIQUE_ID_BYTES + 1];
} env;

/* One call's arguments: valid defaults, then one made bad by a row. */
typedef struct args {
  env *e;
  const void *in;
  void *out;
  size_t count;
  braid_dtype dt;
  braid_op op;
  int root, nranks, rank, color, key, nex, value, variant;
  braid_comm *comm;
  braid_comm **pcomm;
  braid_stream *stream;
  braid_stream **pstream;
  const size_t *sc, *sd, *rc, *rd;
  const int *ex;
  const braid_unique_id *id;
  braid_unique_id *pid;
  braid_config *cfg;
  const char *text, *path;
  char *buf;
  size_t len;
  int *pint;
  braid_result res, *pres;
} args;

typedef void (*mutator)(args *a);
typedef long (*caller)(args *a);
typedef struct bad_caller {
  const char *name; /* without braid_ */
  caller call;
} bad_caller;

/* What a row's call must do. E: BRAID_ERR_INVALID_ARG, named in the last
 * error and a WARN line (EC: the same, run only with a CUDA device); L: the
 * same in a WARN line only; V: the documented value for a bad one (the
 * caller returns 1), VL: and a WARN line; OK: success; CU: success with a
 * CUDA device, else BRAID_ERR_UNSUPPORTED. */
enum kind { E, EC, L, V, VL, OK, CU };

typedef struct row {
  const char *fn, *arg, *words; /* fn without braid_ */
  int kind;
  mutator bad;
} row;

/* bad_args_rows.c */
void bad_defaults(args *a, env *e);
extern const bad_caller bad_callers[];
extern const int bad_ncallers;
extern const row bad_rows[];
extern const int bad_nrows;

#endif
