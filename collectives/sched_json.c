/*
 * Strict JSON (RFC 8259) into a flat value array; see sched_json.h.
 */
#include "sched_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"

typedef struct jp {
  sjson_doc *d;
  const char *b;
  size_t len, i;
  size_t *errpos;
  braid_result rc; /* the failure's result */
} jp;

/* Records the problem at byte `pos` for the calling thread (ERR, at the
 * caller's line) and returns -1; the readers return 0 or -1 after it:
 * malformed text (fail, BRAID_ERR_INVALID_ARG), or out of memory. */
__attribute__((format(printf, 6, 7))) static int
fail_at(const char *file, int line, jp *p, braid_result r, size_t pos,
        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  p->rc = err_vat(file, line, r, fmt, ap);
  va_end(ap);
  *p->errpos = pos;
  return -1;
}
#define fail(p, pos, ...)                                                      \
  fail_at(__FILE__, __LINE__, (p), BRAID_ERR_INVALID_ARG, (pos), __VA_ARGS__)
#define fail_nomem(p, pos)                                                     \
  fail_at(__FILE__, __LINE__, (p), BRAID_ERR_NOMEM, (pos), "out of memory")

static void ws(jp *p) {
  while (p->i < p->len) {
    char c = p->b[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      break;
    p->i++;
  }
}

/* A printable description of the character at the current offset. */
static const char *what(jp *p, char *tmp, size_t n) {
  if (p->i >= p->len)
    return "end of input";
  unsigned char c = (unsigned char)p->b[p->i];
  if (c >= 0x20 && c < 0x7f)
    snprintf(tmp, n, "'%c'", c);
  else
    snprintf(tmp, n, "byte 0x%02x", c);
  return tmp;
}

static uint32_t new_val(jp *p, sjson_type t, size_t pos) {
  sjson_doc *d = p->d;
  if (d->nv >= SJSON_MAX_VALUES) {
    fail(p, pos, "too many JSON values (limit %u)", SJSON_MAX_VALUES);
    return 0;
  }
  if (d->nv == d->capv) {
    uint32_t nc = d->capv ? d->capv * 2 : 256;
    sjson_val *nvv = realloc(d->v, (size_t)nc * sizeof(*nvv));
    if (!nvv) {
      fail_nomem(p, pos);
      return 0;
    }
    d->v = nvv;
    d->capv = nc;
  }
  uint32_t id = d->nv++;
  sjson_val *x = &d->v[id];
  memset(x, 0, sizeof(*x));
  x->type = (uint8_t)t;
  x->pos = (uint32_t)pos;
  return id;
}

static int put_char(jp *p, char c) {
  sjson_doc *d = p->d;
  if (d->nstr == d->capstr) {
    size_t nc = d->capstr ? d->capstr * 2 : 1024;
    char *ns = realloc(d->str, nc);
    if (!ns)
      return fail_nomem(p, p->i);
    d->str = ns;
    d->capstr = nc;
  }
  d->str[d->nstr++] = c;
  return 0;
}

static int put_utf8(jp *p, uint32_t cp) {
  char o[4];
  int n;
  if (cp < 0x80) {
    o[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  for (int k = 0; k < n; k++)
    if (put_char(p, o[k]))
      return -1;
  return 0;
}

static int hex4(jp *p, uint32_t *out) {
  if (p->len - p->i < 4)
    return fail(p, p->i, "truncated \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->b[p->i + (size_t)k];
    int h = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (h < 0)
      return fail(p, p->i + (size_t)k, "bad hex digit in \\u escape");
    v = v * 16 + (uint32_t)h;
  }
  p->i += 4;
  *out = v;
  return 0;
}

/* Length of a valid UTF-8 sequence at b[0..n), or 0. */
static int utf8_len(const unsigned char *b, size_t n) {
  int len;
  uint32_t cp;
  if (b[0] >= 0xc2 && b[0] <= 0xdf) {
    len = 2;
    cp = b[0] & 0x1fu;
  } else if (b[0] >= 0xe0 && b[0] <= 0xef) {
    len = 3;
    cp = b[0] & 0x0fu;
  } else if (b[0] >= 0xf0 && b[0] <= 0xf4) {
    len = 4;
    cp = b[0] & 0x07u;
  } else
    return 0;
  if (n < (size_t)len)
    return 0;
  for (int k = 1; k < len; k++) {
    if ((b[k] & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (b[k] & 0x3fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* Parses a string at p->i (on the quote); *off gets its decoded offset. */
static int parse_string(jp *p, uint32_t *off, uint32_t *slen) {
  size_t start = p->i++;
  size_t o = p->d->nstr;
  for (;;) {
    if (p->i >= p->len)
      return fail(p, start, "unterminated string");
    unsigned char c = (unsigned char)p->b[p->i];
    if (c == '"') {
      p->i++;
      break;
    }
    if (c < 0x20)
      return fail(p, p->i, "control character 0x%02x in a string", c);
    if (c == '\\') {
      if (++p->i >= p->len)
        return fail(p, start, "unterminated string");
      char e = p->b[p->i++];
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *hit = e ? strchr(from, e) : NULL;
      if (hit) {
        if (put_char(p, to[hit - from]))
          return -1;
        continue;
      }
      if (e != 'u')
        return fail(p, p->i - 1, "bad escape '\\%c'", e);
      uint32_t cp = 0;
      if (hex4(p, &cp))
        return -1;
      if (cp >= 0xdc00 && cp <= 0xdfff)
        return fail(p, p->i - 6, "lone low surrogate in \\u escape");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        uint32_t lo = 0;
        if (p->len - p->i < 2 || p->b[p->i] != '\\' || p->b[p->i + 1] != 'u')
          return fail(p, p->i - 6, "high surrogate without its low half");
        p->i += 2;
        if (hex4(p, &lo))
          return -1;
        if (lo < 0xdc00 || lo > 0xdfff)
          return fail(p, p->i - 6, "bad low surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0)
        return fail(p, p->i - 6, "\\u0000 in a string");
      if (put_utf8(p, cp))
        return -1;
      continue;
    }
    if (c < 0x80) {
      if (put_char(p, (char)c))
        return -1;
      p->i++;
      continue;
    }
    int n = utf8_len((const unsigned char *)p->b + p->i, p->len - p->i);
    if (!n)
      return fail(p, p->i, "invalid UTF-8 in a string");
    for (int k = 0; k < n; k++)
      if (put_char(p, p->b[p->i + (size_t)k]))
        return -1;
    p->i += (size_t)n;
  }
  if (put_char(p, '\0'))
    return -1;
  if (p->d->nstr > UINT32_MAX)
    return fail(p, start, "strings too long");
  *off = (uint32_t)o;
  *slen = (uint32_t)(p->d->nstr - o - 1);
  return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(jp *p, uint32_t id) {
  size_t s = p->i, i = p->i;
  int isint = 1;
  if (i < p->len && p->b[i] == '-')
    i++;
  if (i >= p->len || !is_digit(p->b[i]))
    return fail(p, s, "bad number");
  if (p->b[i] == '0') {
    i++;
    if (i < p->len && is_digit(p->b[i]))
      return fail(p, s, "number with a leading zero");
  } else
    while (i < p->len && is_digit(p->b[i]))
      i++;
  if (i < p->len && p->b[i] == '.') {
    isint = 0;
    i++;
    if (i >= p->len || !is_digit(p->b[i]))
      return fail(p, i, "bad number: digits must follow '.'");
    while (i < p->len && is_digit(p->b[i]))
      i++;
  }
  if (i < p->len && (p->b[i] == 'e' || p->b[i] == 'E')) {
    isint = 0;
    i++;
    if (i < p->len && (p->b[i] == '+' || p->b[i] == '-'))
      i++;
    if (i >= p->len || !is_digit(p->b[i]))
      return fail(p, i, "bad number: digits must follow the exponent");
    while (i < p->len && is_digit(p->b[i]))
      i++;
  }
  char tmp[64];
  size_t n = i - s;
  if (n >= sizeof(tmp))
    return fail(p, s, "number too long (%zu characters)", n);
  memcpy(tmp, p->b + s, n);
  tmp[n] = '\0';
  double v = strtod(tmp, NULL);
  if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
    return fail(p, s, "number out of range");
  p->d->v[id].num = v;
  p->d->v[id].isint = (uint8_t)isint;
  p->i = i;
  return 0;
}

static int lit(jp *p, const char *w) {
  size_t n = strlen(w);
  if (p->len - p->i < n || memcmp(p->b + p->i, w, n) != 0)
    return 0;
  p->i += n;
  return 1;
}

static uint32_t parse_value(jp *p, int depth);

static uint32_t parse_container(jp *p, int depth, int obj) {
  size_t pos = p->i;
  if (depth >= SJSON_MAX_DEPTH) {
    fail(p, pos, "nesting deeper than %d levels", SJSON_MAX_DEPTH);
    return 0;
  }
  uint32_t id = new_val(p, obj ? SJSON_OBJ : SJSON_ARR, pos);
  if (!id)
    return 0;
  p->i++;
  ws(p);
  char close = obj ? '}' : ']';
  if (p->i < p->len && p->b[p->i] == close) {
    p->i++;
    return id;
  }
  uint32_t prev = 0, n = 0;
  char tmp[16];
  for (;;) {
    uint32_t key = 0;
    size_t kpos = p->i;
    if (obj) {
      if (p->i >= p->len || p->b[p->i] != '"') {
        fail(p, p->i, "expected a key (a string), found %s",
             what(p, tmp, sizeof(tmp)));
        return 0;
      }
      uint32_t klen;
      if (n >= SJSON_MAX_MEMBERS) {
        fail(p, kpos, "object with more than %d members", SJSON_MAX_MEMBERS);
        return 0;
      }
      if (parse_string(p, &key, &klen))
        return 0;
      for (uint32_t m = p->d->v[id].a; m; m = p->d->v[m].next)
        if (!strcmp(p->d->str + p->d->v[m].key, p->d->str + key)) {
          fail(p, kpos, "duplicate key \"%s\"", p->d->str + key);
          return 0;
        }
      ws(p);
      if (p->i >= p->len || p->b[p->i] != ':') {
        fail(p, p->i, "expected ':' after a key, found %s",
             what(p, tmp, sizeof(tmp)));
        return 0;
      }
      p->i++;
      ws(p);
    }
    uint32_t c = parse_value(p, depth + 1);
    if (!c)
      return 0;
    if (obj) {
      p->d->v[c].key = key;
      p->d->v[c].kpos = (uint32_t)kpos;
    }
    if (prev)
      p->d->v[prev].next = c;
    else
      p->d->v[id].a = c;
    prev = c;
    p->d->v[id].n = ++n;
    ws(p);
    if (p->i < p->len && p->b[p->i] == ',') {
      p->i++;
      ws(p);
      if (p->i < p->len && p->b[p->i] == close) {
        fail(p, p->i, "trailing comma before '%c'", close);
        return 0;
      }
      continue;
    }
    if (p->i < p->len && p->b[p->i] == close) {
      p->i++;
      return id;
    }
    fail(p, p->i, "expected ',' or '%c', found %s", close,
         what(p, tmp, sizeof(tmp)));
    return 0;
  }
}

static uint32_t parse_value(jp *p, int depth) {
  char tmp[16];
  ws(p);
  if (p->i >= p->len) {
    fail(p, p->i, "expected a value, found end of input");
    return 0;
  }
  size_t pos = p->i;
  char c = p->b[p->i];
  if (c == '{' || c == '[')
    return parse_container(p, depth, c == '{');
  if (c == '"') {
    uint32_t id = new_val(p, SJSON_STR, pos), off = 0, n = 0;
    if (!id || parse_string(p, &off, &n))
      return 0;
    p->d->v[id].a = off;
    p->d->v[id].n = n;
    return id;
  }
  if (c == '-' || is_digit(c)) {
    uint32_t id = new_val(p, SJSON_NUM, pos);
    if (!id || parse_number(p, id))
      return 0;
    return id;
  }
  if (lit(p, "true"))
    return new_val(p, SJSON_TRUE, pos);
  if (lit(p, "false"))
    return new_val(p, SJSON_FALSE, pos);
  if (lit(p, "null"))
    return new_val(p, SJSON_NULL, pos);
  fail(p, pos, "expected a value, found %s", what(p, tmp, sizeof(tmp)));
  return 0;
}

braid_result sjson_parse(sjson_doc *d, const char *buf, size_t len,
                         size_t *errpos) {
  memset(d, 0, sizeof(*d));
  size_t ep = 0;
  jp p = {d, buf, len, 0, errpos ? errpos : &ep, BRAID_SUCCESS};
  if (len > UINT32_MAX) {
    fail(&p, 0, "input larger than 4 GiB");
    return p.rc;
  }
  /* id 0 is "none" */
  new_val(&p, SJSON_NULL, 0);
  if (d->nv != 1)
    return p.rc;
  if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
    p.i = 3; /* a UTF-8 byte order mark */
  if (!parse_value(&p, 0))
    return p.rc;
  ws(&p);
  if (p.i < len) {
    fail(&p, p.i, "trailing characters after the JSON value");
    return p.rc;
  }
  return BRAID_SUCCESS;
}

void sjson_free(sjson_doc *d) {
  if (!d)
    return;
  free(d->v);
  free(d->str);
  memset(d, 0, sizeof(*d));
}

void sjson_linecol(const char *buf, size_t len, size_t pos, int *line,
                   int *col) {
  int l = 1;
  size_t ls = 0;
  if (pos > len)
    pos = len;
  for (size_t i = 0; i < pos; i++)
    if (buf[i] == '\n') {
      l++;
      ls = i + 1;
    }
  *line = l;
  *col = (int)(pos - ls) + 1;
}

const char *sjson_type_name(sjson_type t) {
  switch (t) {
  case SJSON_NULL:
    return "null";
  case SJSON_FALSE:
  case SJSON_TRUE:
    return "a boolean";
  case SJSON_NUM:
    return "a number";
  case SJSON_STR:
    return "a string";
  case SJSON_ARR:
    return "an array";
  case SJSON_OBJ:
    return "an object";
  }
  return "?";
}
