/*
 * A small, strict XML reader for topology files. It builds a tree of
 * elements with their attributes and text, records the line of every element
 * and attribute, and rejects anything malformed with "file:line: what". No
 * external entities, no DTD processing: hostile input is bounded in depth,
 * node count and size.
 */
#include "topology/topo_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct xp {
  const char *p, *end;
  int line;
  const char *fname;
  char *err;
  size_t errlen;
  long nodes;
} xp;

#define XERR(x, ...)                                                           \
  do {                                                                         \
    char m__[200];                                                             \
    snprintf(m__, sizeof(m__), __VA_ARGS__);                                   \
    topo_errf((x)->err, (x)->errlen, "%s:%d: %s", (x)->fname, (x)->line, m__); \
  } while (0)

static int at(xp *x, const char *s) {
  size_t n = strlen(s);
  return (size_t)(x->end - x->p) >= n && !memcmp(x->p, s, n);
}
static void adv(xp *x, size_t n) {
  for (size_t i = 0; i < n && x->p < x->end; i++, x->p++)
    if (*x->p == '\n')
      x->line++;
}
static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
static void skip_ws(xp *x) {
  while (x->p < x->end && is_ws(*x->p))
    adv(x, 1);
}
static int name_start(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
         c == ':' || c >= 0x80;
}
static int name_char(unsigned char c) {
  return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

/* Skips to just after `close`; error if the input ends first. */
static int skip_past(xp *x, const char *close, const char *what) {
  int line0 = x->line;
  while (x->p < x->end && !at(x, close))
    adv(x, 1);
  if (x->p >= x->end) {
    x->line = line0;
    XERR(x, "unterminated %s", what);
    return -1;
  }
  adv(x, strlen(close));
  return 0;
}

static char *read_name(xp *x) {
  const char *s = x->p;
  if (x->p >= x->end || !name_start((unsigned char)*x->p)) {
    XERR(x, "expected a name");
    return NULL;
  }
  while (x->p < x->end && name_char((unsigned char)*x->p))
    x->p++;
  size_t n = (size_t)(x->p - s);
  char *r = malloc(n + 1);
  if (!r) {
    XERR(x, "out of memory");
    return NULL;
  }
  memcpy(r, s, n);
  r[n] = 0;
  return r;
}

/* Appends decoded text [s, e) to *buf (length *len). */
static int append_decoded(xp *x, char **buf, size_t *len, const char *s,
                          const char *e) {
  size_t cap = *len + (size_t)(e - s) + 1;
  char *b = realloc(*buf, cap);
  if (!b) {
    XERR(x, "out of memory");
    return -1;
  }
  *buf = b;
  size_t o = *len;
  while (s < e) {
    if (*s != '&') {
      b[o++] = *s++;
      continue;
    }
    const char *semi = memchr(s, ';', (size_t)(e - s));
    if (!semi || semi - s > 12) {
      XERR(x, "bad character reference");
      return -1;
    }
    size_t n = (size_t)(semi - s - 1);
    const char *ent = s + 1;
    if (n == 2 && !memcmp(ent, "lt", 2))
      b[o++] = '<';
    else if (n == 2 && !memcmp(ent, "gt", 2))
      b[o++] = '>';
    else if (n == 3 && !memcmp(ent, "amp", 3))
      b[o++] = '&';
    else if (n == 4 && !memcmp(ent, "quot", 4))
      b[o++] = '"';
    else if (n == 4 && !memcmp(ent, "apos", 4))
      b[o++] = '\'';
    else if (n >= 2 && ent[0] == '#') {
      char tmp[16];
      memcpy(tmp, ent + 1, n - 1);
      tmp[n - 1] = 0;
      char *endp;
      int hex = tmp[0] == 'x';
      unsigned long cp = strtoul(tmp + hex, &endp, hex ? 16 : 10);
      if (*endp || endp == tmp + hex || cp == 0 || cp > 0x10FFFF) {
        XERR(x, "bad character reference '&%.*s;'", (int)n, ent);
        return -1;
      }
      /* UTF-8 encode: at most 4 bytes, never longer than "&#N;" itself */
      if (cp < 0x80)
        b[o++] = (char)cp;
      else if (cp < 0x800) {
        b[o++] = (char)(0xC0 | (cp >> 6));
        b[o++] = (char)(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        b[o++] = (char)(0xE0 | (cp >> 12));
        b[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[o++] = (char)(0x80 | (cp & 0x3F));
      } else {
        b[o++] = (char)(0xF0 | (cp >> 18));
        b[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[o++] = (char)(0x80 | (cp & 0x3F));
      }
    } else {
      XERR(x, "unknown entity '&%.*s;'", (int)n, ent);
      return -1;
    }
    s = semi + 1;
  }
  b[o] = 0;
  *len = o;
  return 0;
}

void xml_free(xml_node *n) {
  if (!n)
    return;
  for (int i = 0; i < n->nkids; i++)
    xml_free(n->kids[i]);
  free(n->kids);
  for (int i = 0; i < n->nattrs; i++) {
    free(n->attrs[i].name);
    free(n->attrs[i].value);
  }
  free(n->attrs);
  free(n->name);
  free(n->text);
  free(n);
}

static int parse_attrs(xp *x, xml_node *n) {
  for (;;) {
    int had_ws = x->p < x->end && is_ws(*x->p);
    skip_ws(x);
    if (x->p >= x->end) {
      XERR(x, "<%s> is not closed (file truncated?)", n->name);
      return -1;
    }
    if (*x->p == '>' || at(x, "/>"))
      return 0;
    if (!had_ws) {
      XERR(x, "<%s>: expected a space before attribute", n->name);
      return -1;
    }
    int line = x->line;
    char *name = read_name(x);
    if (!name)
      return -1;
    for (int i = 0; i < n->nattrs; i++)
      if (!strcmp(n->attrs[i].name, name)) {
        XERR(x, "<%s> attribute '%s' appears twice", n->name, name);
        free(name);
        return -1;
      }
    xml_attr *na = realloc(n->attrs, (size_t)(n->nattrs + 1) * sizeof(*na));
    if (!na) {
      free(name);
      XERR(x, "out of memory");
      return -1;
    }
    n->attrs = na;
    xml_attr *a = &n->attrs[n->nattrs++];
    a->name = name;
    a->value = NULL;
    a->line = line;
    skip_ws(x);
    if (x->p >= x->end || *x->p != '=') {
      XERR(x, "<%s> attribute '%s': expected '='", n->name, name);
      return -1;
    }
    adv(x, 1);
    skip_ws(x);
    if (x->p >= x->end || (*x->p != '"' && *x->p != '\'')) {
      XERR(x, "<%s> attribute '%s': expected a quoted value", n->name, name);
      return -1;
    }
    char q = *x->p;
    adv(x, 1);
    const char *s = x->p;
    while (x->p < x->end && *x->p != q) {
      if (*x->p == '<') {
        XERR(x, "<%s> attribute '%s': '<' in value", n->name, name);
        return -1;
      }
      adv(x, 1);
    }
    if (x->p >= x->end) {
      x->line = line;
      XERR(x, "<%s> attribute '%s': unterminated value", n->name, name);
      return -1;
    }
    size_t len = 0;
    if (append_decoded(x, &a->value, &len, s, x->p))
      return -1;
    adv(x, 1);
  }
}

static int add_kid(xp *x, xml_node *n, xml_node *k) {
  if (n->nkids == n->capkids) {
    int cap = n->capkids ? n->capkids * 2 : 4;
    xml_node **nk = realloc(n->kids, (size_t)cap * sizeof(*nk));
    if (!nk) {
      XERR(x, "out of memory");
      return -1;
    }
    n->kids = nk;
    n->capkids = cap;
  }
  n->kids[n->nkids++] = k;
  k->parent = n;
  return 0;
}

static xml_node *parse_element(xp *x, int depth) {
  if (depth > TOPO_MAX_XML_DEPTH) {
    XERR(x, "elements nested deeper than %d", TOPO_MAX_XML_DEPTH);
    return NULL;
  }
  if (++x->nodes > TOPO_MAX_XML_NODES) {
    XERR(x, "more than %d elements", TOPO_MAX_XML_NODES);
    return NULL;
  }
  xml_node *n = calloc(1, sizeof(*n));
  if (!n) {
    XERR(x, "out of memory");
    return NULL;
  }
  n->line = x->line;
  adv(x, 1); /* '<' */
  if (!(n->name = read_name(x)) || parse_attrs(x, n))
    goto fail;
  if (at(x, "/>")) {
    adv(x, 2);
    return n;
  }
  adv(x, 1); /* '>' */
  for (;;) {
    if (x->p >= x->end) {
      XERR(x, "<%s> opened on line %d is not closed (file truncated?)", n->name,
           n->line);
      goto fail;
    }
    if (at(x, "</")) {
      adv(x, 2);
      char *close = read_name(x);
      if (!close)
        goto fail;
      int ok = !strcmp(close, n->name);
      if (!ok)
        XERR(x, "</%s> closes <%s> opened on line %d", close, n->name, n->line);
      free(close);
      if (!ok)
        goto fail;
      skip_ws(x);
      if (x->p >= x->end || *x->p != '>') {
        XERR(x, "</%s: expected '>'", n->name);
        goto fail;
      }
      adv(x, 1);
      return n;
    } else if (at(x, "<!--")) {
      if (skip_past(x, "-->", "comment"))
        goto fail;
    } else if (at(x, "<![CDATA[")) {
      adv(x, 9);
      const char *s = x->p;
      int line0 = x->line;
      while (x->p < x->end && !at(x, "]]>"))
        adv(x, 1);
      if (x->p >= x->end) {
        x->line = line0;
        XERR(x, "unterminated CDATA");
        goto fail;
      }
      size_t cap = n->textlen + (size_t)(x->p - s) + 1;
      char *t = realloc(n->text, cap);
      if (!t) {
        XERR(x, "out of memory");
        goto fail;
      }
      memcpy(t + n->textlen, s, (size_t)(x->p - s));
      n->textlen += (size_t)(x->p - s);
      t[n->textlen] = 0;
      n->text = t;
      adv(x, 3);
    } else if (at(x, "<?")) {
      if (skip_past(x, "?>", "processing instruction"))
        goto fail;
    } else if (at(x, "<!")) {
      XERR(x, "unexpected markup declaration inside <%s>", n->name);
      goto fail;
    } else if (*x->p == '<') {
      xml_node *k = parse_element(x, depth + 1);
      if (!k)
        goto fail;
      if (add_kid(x, n, k)) {
        xml_free(k);
        goto fail;
      }
    } else {
      const char *s = x->p;
      while (x->p < x->end && *x->p != '<')
        adv(x, 1);
      if (append_decoded(x, &n->text, &n->textlen, s, x->p))
        goto fail;
    }
  }
fail:
  xml_free(n);
  return NULL;
}

xml_node *xml_parse(const char *buf, size_t len, const char *fname, char *err,
                    size_t errlen) {
  xp x = {buf, buf + len, 1, fname ? fname : "<buffer>", err, errlen, 0};
  if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3))
    x.p += 3;
  xml_node *root = NULL;
  for (;;) {
    skip_ws(&x);
    if (x.p >= x.end)
      break;
    if (at(&x, "<?")) {
      if (skip_past(&x, "?>", "declaration"))
        goto fail;
    } else if (at(&x, "<!--")) {
      if (skip_past(&x, "-->", "comment"))
        goto fail;
    } else if (at(&x, "<!DOCTYPE")) {
      if (root) {
        XERR(&x, "DOCTYPE after the root element");
        goto fail;
      }
      /* skip, including a bracketed internal subset */
      int depth = 0;
      while (x.p < x.end && (*x.p != '>' || depth > 0)) {
        if (*x.p == '[')
          depth++;
        else if (*x.p == ']')
          depth--;
        adv(&x, 1);
      }
      if (x.p >= x.end) {
        XERR(&x, "unterminated DOCTYPE");
        goto fail;
      }
      adv(&x, 1);
    } else if (*x.p == '<' && !root) {
      if (!(root = parse_element(&x, 0)))
        goto fail;
    } else {
      XERR(&x,
           root ? "content after the root element"
                : "expected an element, found '%c'",
           *x.p);
      goto fail;
    }
  }
  if (!root)
    XERR(&x, "no root element (empty or truncated file)");
  return root;
fail:
  xml_free(root);
  return NULL;
}

const xml_attr *xml_attr_get(const xml_node *n, const char *name) {
  for (int i = 0; i < n->nattrs; i++)
    if (!strcmp(n->attrs[i].name, name))
      return &n->attrs[i];
  return NULL;
}

const char *xml_get(const xml_node *n, const char *name) {
  const xml_attr *a = xml_attr_get(n, name);
  return a ? a->value : NULL;
}

static int attr_err(const xml_node *n, const char *name, int line,
                    const char *fname, char *err, size_t errlen,
                    const char *what, const char *value) {
  if (value)
    topo_errf(err, errlen, "%s:%d: <%s> attribute '%s': %s (got '%.40s')",
              fname, line, n->name, name, what, value);
  else
    topo_errf(err, errlen, "%s:%d: <%s> attribute '%s': %s", fname, line,
              n->name, name, what);
  return -1;
}

int xml_require(const xml_node *n, const char *name, const char **out,
                const char *fname, char *err, size_t errlen) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return attr_err(n, name, n->line, fname, err, errlen, "missing", NULL);
  *out = a->value;
  return 0;
}

int xml_get_int(const xml_node *n, const char *name, long lo, long hi,
                int required, long *out, const char *fname, char *err,
                size_t errlen) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required
               ? attr_err(n, name, n->line, fname, err, errlen, "missing", NULL)
               : 0;
  char *e;
  errno = 0;
  long v = strtol(a->value, &e, 0);
  while (*e == ' ')
    e++;
  if (e == a->value || *e || errno)
    return attr_err(n, name, a->line, fname, err, errlen, "not an integer",
                    a->value);
  if (v < lo || v > hi) {
    char what[96];
    snprintf(what, sizeof(what), "out of range [%ld, %ld]", lo, hi);
    return attr_err(n, name, a->line, fname, err, errlen, what, a->value);
  }
  *out = v;
  return 0;
}

int xml_get_hex(const xml_node *n, const char *name, int required, long *out,
                const char *fname, char *err, size_t errlen) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required
               ? attr_err(n, name, n->line, fname, err, errlen, "missing", NULL)
               : 0;
  char *e;
  errno = 0;
  long v = strtol(a->value, &e, 16);
  if (e == a->value || *e || errno || v < 0 || v > INT_MAX)
    return attr_err(n, name, a->line, fname, err, errlen,
                    "not a hexadecimal number", a->value);
  *out = v;
  return 0;
}

int xml_get_double(const xml_node *n, const char *name, double lo, double hi,
                   int required, double *out, const char *fname, char *err,
                   size_t errlen) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required
               ? attr_err(n, name, n->line, fname, err, errlen, "missing", NULL)
               : 0;
  char *e;
  double v = strtod(a->value, &e);
  if (e == a->value || *e || !isfinite(v))
    return attr_err(n, name, a->line, fname, err, errlen, "not a number",
                    a->value);
  if (v < lo || v > hi)
    return attr_err(n, name, a->line, fname, err, errlen, "out of range",
                    a->value);
  *out = v;
  return 0;
}
