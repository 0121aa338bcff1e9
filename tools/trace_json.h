/*
 * A reader for one line of JSON Lines holding one flat object, as in braid's
 * flight-recorder dumps (docs/TRACE.md): every member is handed to a
 * callback, strings decoded. Nested values are skipped (a later format may
 * add them under keys this reader does not know).
 */
#ifndef BRAID_TRACE_JSON_H
#define BRAID_TRACE_JSON_H

#include <stddef.h>

typedef enum {
  TJ_STRING,
  TJ_NUMBER,
  TJ_BOOL,
  TJ_NULL,
  TJ_NESTED /* an object or an array, skipped */
} tj_type;

typedef struct {
  tj_type type;
  const char *str; /* TJ_STRING: decoded, NUL-terminated */
  int is_int;      /* TJ_NUMBER: an integer that fits a long long */
  long long i;     /* TJ_NUMBER with is_int, TJ_BOOL (0 or 1) */
} tj_value;

/* Returns 0, or -1 with a message in err (errlen bytes) to stop the line. */
typedef int (*tj_member_fn)(void *ctx, const char *key, const tj_value *v,
                            char *err, size_t errlen);

/* Parses line (len bytes, no newline) as one JSON object and calls fn for
 * each member in order. Returns 0, or -1 with what is wrong in err. */
int tj_parse_line(const char *line, size_t len, tj_member_fn fn, void *ctx,
                  char *err, size_t errlen);

#endif
