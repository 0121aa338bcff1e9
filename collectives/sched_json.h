/*
 * A small strict JSON parser (RFC 8259) for schedule files
 * (collectives/sched_file.c): the whole text becomes a flat array of values
 * that remember their byte offset, so that every error can name the line and
 * column. No extensions: no comments, no trailing commas, no NaN, no leading
 * zeros, no unescaped control characters, duplicate keys rejected, nothing
 * but white space after the value. Bounded: nesting depth and value count.
 */
#ifndef BRAID_COLLECTIVES_SCHED_JSON_H
#define BRAID_COLLECTIVES_SCHED_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "src/log.h" /* braid_result; err_msg() reads the message */

#define SJSON_MAX_DEPTH 32
#define SJSON_MAX_VALUES (1u << 23)
/* members per object (keys are checked for duplicates) */
#define SJSON_MAX_MEMBERS 256

/* Limits of schedule files (collectives/sched_file.c, docs/SCHEDULES.md). */
#define SCHED_FILE_MAX_BYTES (64u << 20) /* sched_file_load */
#define SCHED_FILE_MAX_SCHEDULES 256     /* per file */
#define SCHED_FILE_MAX_RANKS 4096
#define SCHED_FILE_MAX_CHANNELS 64
#define SCHED_FILE_MAX_STEPS (1 << 19)  /* per schedule, all ranks */
#define SCHED_FILE_MAX_CHUNKS (1 << 16) /* chunks_per_block, scratch_blocks */

typedef enum sjson_type {
  SJSON_NULL = 0,
  SJSON_FALSE,
  SJSON_TRUE,
  SJSON_NUM,
  SJSON_STR,
  SJSON_ARR,
  SJSON_OBJ
} sjson_type;

/* One value. Ids are indices into sjson_doc.v; 0 is "none" (the root is 1). */
typedef struct sjson_val {
  uint32_t pos;  /* byte offset of the value's first character */
  uint32_t next; /* next element / member of the parent, 0: last */
  uint32_t a;    /* ARR/OBJ: first element / member (0: empty); STR: offset
                    of the decoded text in sjson_doc.str */
  uint32_t n;    /* ARR/OBJ: elements / members; STR: decoded length */
  uint32_t key;  /* object members: offset of the decoded key in str */
  uint32_t kpos; /* object members: byte offset of the key */
  uint8_t type;  /* sjson_type */
  uint8_t isint; /* NUM written without fraction or exponent */
  double num;
} sjson_val;

typedef struct sjson_doc {
  sjson_val *v;
  uint32_t nv, capv;
  char *str; /* decoded strings and keys, each NUL-terminated */
  size_t nstr, capstr;
} sjson_doc;

/* Parses buf[0..len). BRAID_SUCCESS, or an error (BRAID_ERR_INVALID_ARG,
 * BRAID_ERR_NOMEM) with *errpos the byte offset of the problem and a message
 * (without position, ERR). */
braid_result sjson_parse(sjson_doc *d, const char *buf, size_t len,
                         size_t *errpos);
void sjson_free(sjson_doc *d);

/* 1-based line and column (in bytes) of a byte offset. */
void sjson_linecol(const char *buf, size_t len, size_t pos, int *line,
                   int *col);

static inline const sjson_val *sjson_get(const sjson_doc *d, uint32_t id) {
  return id ? &d->v[id] : NULL;
}
static inline const char *sjson_str(const sjson_doc *d, const sjson_val *x) {
  return d->str + x->a;
}
static inline const char *sjson_key(const sjson_doc *d, const sjson_val *x) {
  return d->str + x->key;
}
const char *sjson_type_name(sjson_type t);

#endif
