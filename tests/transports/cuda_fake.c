#include "cuda_fake.h"

#include <stdlib.h>
#include <string.h>

enum { OP_COPY, OP_REDUCE, OP_RECORD };

typedef struct fake_ev {
  int pending;
} fake_ev;

typedef struct fake_op {
  int kind;
  void *dst;
  const void *a, *b;
  size_t n;
  tp_reducer r;
  fake_ev *ev;
} fake_op;

#define FAKE_Q 65536
static fake_op q[FAKE_Q];
static int qh, qt, ncopies, fail_code;

static int push(fake_op op) {
  if (fail_code) {
    int rc = fail_code;
    fail_code = 0;
    return rc;
  }
  if (qt - qh >= FAKE_Q)
    return BRAID_ERR_NOMEM;
  q[qt++ % FAKE_Q] = op;
  return BRAID_SUCCESS;
}

static int f_copy(void *dst, const void *src, size_t n, void *stream) {
  (void)stream;
  ncopies++;
  return push((fake_op){.kind = OP_COPY, .dst = dst, .a = src, .n = n});
}

static int f_reduce(void *dst, const void *a, const void *b, size_t n,
                    const tp_reducer *r, void *stream) {
  (void)stream;
  ncopies++;
  return push((fake_op){
      .kind = OP_REDUCE, .dst = dst, .a = a, .b = b, .n = n, .r = *r});
}

static int f_event_new(void **ev) {
  *ev = calloc(1, sizeof(fake_ev));
  return *ev ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
}

static int f_record(void *ev, void *stream) {
  (void)stream;
  int rc = push((fake_op){.kind = OP_RECORD, .ev = ev});
  if (!rc)
    ((fake_ev *)ev)->pending = 1;
  return rc;
}

static int f_query(void *ev) {
  return ((fake_ev *)ev)->pending ? TP_AGAIN : BRAID_SUCCESS;
}

static void f_event_free(void *ev) { free(ev); }

static const char *f_error(void) { return "fake engine failure"; }

const cuf_engine fake_engine = {.copy = f_copy,
                                .reduce = f_reduce,
                                .event_new = f_event_new,
                                .record = f_record,
                                .query = f_query,
                                .event_free = f_event_free,
                                .error = f_error};

int fake_run(int n) {
  int ran = 0;
  while (qh < qt && (n < 0 || ran < n)) {
    fake_op *op = &q[qh++ % FAKE_Q];
    if (op->kind == OP_COPY)
      memmove(op->dst, op->a, op->n);
    else if (op->kind == OP_REDUCE)
      op->r.fn(op->dst, op->a, op->b, op->n / op->r.elem_size);
    else
      op->ev->pending = 0;
    ran++;
  }
  return ran;
}

int fake_pending(void) { return qt - qh; }
int fake_copies(void) { return ncopies; }
void fake_fail_next(int code) { fail_code = code; }
void fake_reset(void) { qh = qt = ncopies = fail_code = 0; }
