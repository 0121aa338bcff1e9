/*
 * The JSON reader of braid-trace (trace_json.h): one flat object per line,
 * strictly by RFC 8259's grammar, with each failure said in words and the
 * byte where it was found. Decoded strings live in one buffer per line.
 */
#include "trace_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting in a skipped value is refused rather than recursed into. */
#define TJ_MAX_DEPTH 64

typedef struct {
  const char *s, *end;
  const char *start;
  char *out; /* next free byte of the decode buffer */
  char *err;
  size_t errlen;
} tj_parser;

static int fail(tj_parser *p, const char *fmt, ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(p->err, p->errlen, "%s at byte %zu", what,
           (size_t)(p->s - p->start) + 1);
  return -1;
}

static void skip_ws(tj_parser *p) {
  while (p->s < p->end &&
         (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n'))
    p->s++;
}

static int hex4(tj_parser *p, unsigned *out) {
  unsigned v = 0;
  if (p->end - p->s < 4)
    return fail(p, "\\u needs four hex digits");
  for (int i = 0; i < 4; i++) {
    char c = p->s[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = (unsigned)(c - 'A' + 10);
    else
      return fail(p, "\\u needs four hex digits");
    v = v * 16 + d;
  }
  p->s += 4;
  *out = v;
  return 0;
}

static void put_utf8(tj_parser *p, unsigned cp) {
  if (cp < 0x80) {
    *p->out++ = (char)cp;
  } else if (cp < 0x800) {
    *p->out++ = (char)(0xC0 | (cp >> 6));
    *p->out++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *p->out++ = (char)(0xE0 | (cp >> 12));
    *p->out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *p->out++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *p->out++ = (char)(0xF0 | (cp >> 18));
    *p->out++ = (char)(0x80 | ((cp >> 12) & 0x3F));
    *p->out++ = (char)(0x80 | ((cp >> 6) & 0x3F));
    *p->out++ = (char)(0x80 | (cp & 0x3F));
  }
}

/* \uXXXX, with a surrogate pair for code points past U+FFFF. */
static int unicode_escape(tj_parser *p) {
  unsigned cp = 0;
  if (hex4(p, &cp) < 0)
    return -1;
  if (cp >= 0xDC00 && cp <= 0xDFFF)
    return fail(p, "a low surrogate \\u%04X without a high one", cp);
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    unsigned lo = 0;
    if (p->end - p->s < 2 || p->s[0] != '\\' || p->s[1] != 'u')
      return fail(p, "a high surrogate \\u%04X without a low one", cp);
    p->s += 2;
    if (hex4(p, &lo) < 0)
      return -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
      return fail(p, "a high surrogate \\u%04X without a low one", cp);
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  if (cp == 0)
    return fail(p, "\\u0000 in a string");
  put_utf8(p, cp);
  return 0;
}

/* A string at p->s (the opening quote), decoded into the buffer. */
static int parse_string(tj_parser *p, const char **out) {
  *out = p->out;
  p->s++;
  for (;;) {
    if (p->s >= p->end)
      return fail(p, "the line ends inside a string");
    unsigned char c = (unsigned char)*p->s;
    if (c == '"') {
      p->s++;
      *p->out++ = '\0';
      return 0;
    }
    if (c < 0x20)
      return fail(p, "a control character (0x%02x) in a string", c);
    if (c != '\\') {
      *p->out++ = (char)c;
      p->s++;
      continue;
    }
    p->s++;
    if (p->s >= p->end)
      return fail(p, "the line ends inside a string");
    char e = *p->s++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit = strchr(from, e);
    if (e != '\0' && hit != NULL)
      *p->out++ = to[hit - from];
    else if (e == 'u') {
      if (unicode_escape(p) < 0)
        return -1;
    } else
      return fail(p, "an unknown escape \\%c in a string", e);
  }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(tj_parser *p, tj_value *v) {
  const char *b = p->s;
  int integral = 1;
  if (p->s < p->end && *p->s == '-')
    p->s++;
  if (p->s >= p->end || !is_digit(*p->s))
    return fail(p, "a number needs a digit");
  if (*p->s == '0')
    p->s++;
  else
    while (p->s < p->end && is_digit(*p->s))
      p->s++;
  if (p->s < p->end && *p->s == '.') {
    integral = 0;
    p->s++;
    if (p->s >= p->end || !is_digit(*p->s))
      return fail(p, "a digit must follow a decimal point");
    while (p->s < p->end && is_digit(*p->s))
      p->s++;
  }
  if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
    integral = 0;
    p->s++;
    if (p->s < p->end && (*p->s == '+' || *p->s == '-'))
      p->s++;
    if (p->s >= p->end || !is_digit(*p->s))
      return fail(p, "an exponent needs a digit");
    while (p->s < p->end && is_digit(*p->s))
      p->s++;
  }
  v->type = TJ_NUMBER;
  v->is_int = 0;
  v->i = 0;
  if (integral && p->s - b < 32) {
    char buf[32];
    memcpy(buf, b, (size_t)(p->s - b));
    buf[p->s - b] = '\0';
    errno = 0;
    long long x = strtoll(buf, NULL, 10);
    if (errno == 0) {
      v->is_int = 1;
      v->i = x;
    }
  }
  return 0;
}

static int literal(tj_parser *p, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
    return fail(p, "an unexpected '%c'", *p->s);
  p->s += n;
  return 0;
}

static int parse_value(tj_parser *p, tj_value *v, int depth);

/* An object or array inside a member: read by the grammar, then dropped. */
static int skip_nested(tj_parser *p, int depth) {
  char close = *p->s == '{' ? '}' : ']';
  if (depth >= TJ_MAX_DEPTH)
    return fail(p, "values nested deeper than %d", TJ_MAX_DEPTH);
  char *mark = p->out; /* nothing inside is kept */
  p->s++;
  skip_ws(p);
  if (p->s < p->end && *p->s == close) {
    p->s++;
    return 0;
  }
  for (;;) {
    tj_value inner;
    skip_ws(p);
    if (close == '}') {
      const char *key;
      if (p->s >= p->end || *p->s != '"')
        return fail(p, "a key (a string) expected");
      if (parse_string(p, &key) < 0)
        return -1;
      skip_ws(p);
      if (p->s >= p->end || *p->s != ':')
        return fail(p, "':' expected after a key");
      p->s++;
    }
    if (parse_value(p, &inner, depth + 1) < 0)
      return -1;
    p->out = mark;
    skip_ws(p);
    if (p->s < p->end && *p->s == ',') {
      p->s++;
      continue;
    }
    if (p->s < p->end && *p->s == close) {
      p->s++;
      return 0;
    }
    return fail(p, "',' or '%c' expected", close);
  }
}

static int parse_value(tj_parser *p, tj_value *v, int depth) {
  memset(v, 0, sizeof *v);
  skip_ws(p);
  if (p->s >= p->end)
    return fail(p, "the line ends where a value was expected");
  switch (*p->s) {
  case '"':
    v->type = TJ_STRING;
    return parse_string(p, &v->str);
  case '{':
  case '[':
    v->type = TJ_NESTED;
    return skip_nested(p, depth);
  case 't':
    v->type = TJ_BOOL;
    v->i = 1;
    return literal(p, "true");
  case 'f':
    v->type = TJ_BOOL;
    return literal(p, "false");
  case 'n':
    v->type = TJ_NULL;
    return literal(p, "null");
  default:
    if (*p->s != '-' && !is_digit(*p->s))
      return fail(p, "an unexpected '%c' where a value was expected", *p->s);
    return parse_number(p, v);
  }
}

static int parse_members(tj_parser *p, tj_member_fn fn, void *ctx) {
  skip_ws(p);
  if (p->s >= p->end || *p->s != '{')
    return fail(p, "a line must hold one JSON object ('{' expected)");
  p->s++;
  skip_ws(p);
  if (p->s < p->end && *p->s == '}') {
    p->s++;
    return 0;
  }
  for (;;) {
    const char *key;
    tj_value v;
    skip_ws(p);
    char *mark = p->out; /* the key and its value are decoded from here */
    if (p->s >= p->end)
      return fail(p, "the line ends inside the object");
    if (*p->s != '"')
      return fail(p, "a key (a string) expected");
    if (parse_string(p, &key) < 0)
      return -1;
    skip_ws(p);
    if (p->s >= p->end || *p->s != ':')
      return fail(p, "':' expected after key \"%.40s\"", key);
    p->s++;
    if (parse_value(p, &v, 0) < 0)
      return -1;
    if (fn(ctx, key, &v, p->err, p->errlen) < 0)
      return -1;
    p->out = mark;
    skip_ws(p);
    if (p->s < p->end && *p->s == ',') {
      p->s++;
      continue;
    }
    if (p->s < p->end && *p->s == '}') {
      p->s++;
      return 0;
    }
    if (p->s >= p->end)
      return fail(p, "the line ends inside the object");
    return fail(p, "',' or '}' expected");
  }
}

int tj_parse_line(const char *line, size_t len, tj_member_fn fn, void *ctx,
                  char *err, size_t errlen) {
  /* decoded text is never longer than its JSON form */
  char *buf = malloc(len + 2);
  if (buf == NULL) {
    snprintf(err, errlen, "out of memory for a line of %zu bytes", len);
    return -1;
  }
  tj_parser p = {line, line + len, line, buf, err, errlen};
  int rc = parse_members(&p, fn, ctx);
  if (rc == 0) {
    skip_ws(&p);
    if (p.s < p.end)
      rc = fail(&p, "text after the object");
  }
  free(buf);
  return rc;
}
