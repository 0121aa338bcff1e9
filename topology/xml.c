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
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct xp {
  const char *p, *end;
  int line;
  const char *fname;
  long nodes;
} xp;

/* Fails with "fname:line: what" at the reader's line. */
/* r evaluated once and the macro's own value, as ERR's (src/log.h). */
#define XERR_R(x, r, ...)                                                      \
  __extension__({                                                              \
    braid_result xerr_r__ = (r);                                               \
    (void)xerr(x, xerr_r__, __VA_ARGS__);                                      \
    xerr_r__;                                                                  \
  })
#define XERR(x, ...) XERR_R(x, BRAID_ERR_INVALID_ARG, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static braid_result
xerr(const xp *x, braid_result r, const char *fmt, ...) {
  char m[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof(m), fmt, ap);
  va_end(ap);
  return ERR(r, "%s:%d: %s", x->fname, x->line, m);
}

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
static braid_result skip_past(xp *x, const char *close, const char *what) {
  int line0 = x->line;
  while (x->p < x->end && !at(x, close))
    adv(x, 1);
  if (x->p >= x->end) {
    x->line = line0;
    return XERR(x, "unterminated %s", what);
  }
  adv(x, strlen(close));
  return BRAID_SUCCESS;
}

static braid_result read_name(xp *x, char **out) {
  const char *s = x->p;
  if (x->p >= x->end || !name_start((unsigned char)*x->p))
    return XERR(x, "expected a name");
  while (x->p < x->end && name_char((unsigned char)*x->p))
    x->p++;
  size_t n = (size_t)(x->p - s);
  char *r = malloc(n + 1);
  if (!r)
    return XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
  memcpy(r, s, n);
  r[n] = 0;
  *out = r;
  return BRAID_SUCCESS;
}

/* Appends decoded text [s, e) to *buf (length *len). */
static braid_result append_decoded(xp *x, char **buf, size_t *len,
                                   const char *s, const char *e) {
  size_t cap = *len + (size_t)(e - s) + 1;
  char *b = realloc(*buf, cap);
  if (!b)
    return XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
  *buf = b;
  size_t o = *len;
  while (s < e) {
    if (*s != '&') {
      b[o++] = *s++;
      continue;
    }
    const char *semi = memchr(s, ';', (size_t)(e - s));
    if (!semi || semi - s > 12)
      return XERR(x, "bad character reference");
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
      if (*endp || endp == tmp + hex || cp == 0 || cp > 0x10FFFF)
        return XERR(x, "bad character reference '&%.*s;'", (int)n, ent);
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
    } else
      return XERR(x, "unknown entity '&%.*s;'", (int)n, ent);
    s = semi + 1;
  }
  b[o] = 0;
  *len = o;
  return BRAID_SUCCESS;
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

static braid_result parse_attrs(xp *x, xml_node *n) {
  for (;;) {
    int had_ws = x->p < x->end && is_ws(*x->p);
    skip_ws(x);
    if (x->p >= x->end)
      return XERR(x, "<%s> is not closed (file truncated?)", n->name);
    if (*x->p == '>' || at(x, "/>"))
      return BRAID_SUCCESS;
    if (!had_ws)
      return XERR(x, "<%s>: expected a space before attribute", n->name);
    int line = x->line;
    char *name;
    CHECKR(read_name(x, &name));
    for (int i = 0; i < n->nattrs; i++)
      if (!strcmp(n->attrs[i].name, name)) {
        braid_result r =
            XERR(x, "<%s> attribute '%s' appears twice", n->name, name);
        free(name);
        return r;
      }
    xml_attr *na = realloc(n->attrs, (size_t)(n->nattrs + 1) * sizeof(*na));
    if (!na) {
      free(name);
      return XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
    }
    n->attrs = na;
    xml_attr *a = &n->attrs[n->nattrs++];
    a->name = name;
    a->value = NULL;
    a->line = line;
    skip_ws(x);
    if (x->p >= x->end || *x->p != '=')
      return XERR(x, "<%s> attribute '%s': expected '='", n->name, name);
    adv(x, 1);
    skip_ws(x);
    if (x->p >= x->end || (*x->p != '"' && *x->p != '\''))
      return XERR(x, "<%s> attribute '%s': expected a quoted value", n->name,
                  name);
    char q = *x->p;
    adv(x, 1);
    const char *s = x->p;
    while (x->p < x->end && *x->p != q) {
      if (*x->p == '<')
        return XERR(x, "<%s> attribute '%s': '<' in value", n->name, name);
      adv(x, 1);
    }
    if (x->p >= x->end) {
      x->line = line;
      return XERR(x, "<%s> attribute '%s': unterminated value", n->name, name);
    }
    size_t len = 0;
    CHECKR(append_decoded(x, &a->value, &len, s, x->p));
    adv(x, 1);
  }
}

static braid_result add_kid(xp *x, xml_node *n, xml_node *k) {
  if (n->nkids == n->capkids) {
    int cap = n->capkids ? n->capkids * 2 : 4;
    xml_node **nk = realloc(n->kids, (size_t)cap * sizeof(*nk));
    if (!nk)
      return XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
    n->kids = nk;
    n->capkids = cap;
  }
  n->kids[n->nkids++] = k;
  k->parent = n;
  return BRAID_SUCCESS;
}

static braid_result parse_element(xp *x, int depth, xml_node **out) {
  if (depth > TOPO_MAX_XML_DEPTH)
    return XERR(x, "elements nested deeper than %d", TOPO_MAX_XML_DEPTH);
  if (++x->nodes > TOPO_MAX_XML_NODES)
    return XERR(x, "more than %d elements", TOPO_MAX_XML_NODES);
  xml_node *n = calloc(1, sizeof(*n));
  if (!n)
    return XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
  braid_result r;
  n->line = x->line;
  adv(x, 1); /* '<' */
  if ((r = read_name(x, &n->name)) != BRAID_SUCCESS ||
      (r = parse_attrs(x, n)) != BRAID_SUCCESS)
    goto fail;
  if (at(x, "/>")) {
    adv(x, 2);
    *out = n;
    return BRAID_SUCCESS;
  }
  adv(x, 1); /* '>' */
  for (;;) {
    if (x->p >= x->end) {
      r = XERR(x, "<%s> opened on line %d is not closed (file truncated?)",
               n->name, n->line);
      goto fail;
    }
    if (at(x, "</")) {
      adv(x, 2);
      char *close;
      if ((r = read_name(x, &close)) != BRAID_SUCCESS)
        goto fail;
      if (strcmp(close, n->name))
        r = XERR(x, "</%s> closes <%s> opened on line %d", close, n->name,
                 n->line);
      free(close);
      if (r != BRAID_SUCCESS)
        goto fail;
      skip_ws(x);
      if (x->p >= x->end || *x->p != '>') {
        r = XERR(x, "</%s: expected '>'", n->name);
        goto fail;
      }
      adv(x, 1);
      *out = n;
      return BRAID_SUCCESS;
    } else if (at(x, "<!--")) {
      if ((r = skip_past(x, "-->", "comment")) != BRAID_SUCCESS)
        goto fail;
    } else if (at(x, "<![CDATA[")) {
      adv(x, 9);
      const char *s = x->p;
      int line0 = x->line;
      while (x->p < x->end && !at(x, "]]>"))
        adv(x, 1);
      if (x->p >= x->end) {
        x->line = line0;
        r = XERR(x, "unterminated CDATA");
        goto fail;
      }
      size_t cap = n->textlen + (size_t)(x->p - s) + 1;
      char *t = realloc(n->text, cap);
      if (!t) {
        r = XERR_R(x, BRAID_ERR_NOMEM, "out of memory");
        goto fail;
      }
      memcpy(t + n->textlen, s, (size_t)(x->p - s));
      n->textlen += (size_t)(x->p - s);
      t[n->textlen] = 0;
      n->text = t;
      adv(x, 3);
    } else if (at(x, "<?")) {
      if ((r = skip_past(x, "?>", "processing instruction")) != BRAID_SUCCESS)
        goto fail;
    } else if (at(x, "<!")) {
      r = XERR(x, "unexpected markup declaration inside <%s>", n->name);
      goto fail;
    } else if (*x->p == '<') {
      xml_node *k;
      if ((r = parse_element(x, depth + 1, &k)) != BRAID_SUCCESS)
        goto fail;
      if ((r = add_kid(x, n, k)) != BRAID_SUCCESS) {
        xml_free(k);
        goto fail;
      }
    } else {
      const char *s = x->p;
      while (x->p < x->end && *x->p != '<')
        adv(x, 1);
      if ((r = append_decoded(x, &n->text, &n->textlen, s, x->p)) !=
          BRAID_SUCCESS)
        goto fail;
    }
  }
fail:
  xml_free(n);
  return r;
}

braid_result xml_parse(const char *buf, size_t len, const char *fname,
                       xml_node **out) {
  xp x = {buf, buf + len, 1, fname ? fname : "<buffer>", 0};
  *out = NULL;
  if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3))
    x.p += 3;
  xml_node *root = NULL;
  braid_result r = BRAID_SUCCESS;
  for (;;) {
    skip_ws(&x);
    if (x.p >= x.end)
      break;
    if (at(&x, "<?")) {
      if ((r = skip_past(&x, "?>", "declaration")) != BRAID_SUCCESS)
        goto fail;
    } else if (at(&x, "<!--")) {
      if ((r = skip_past(&x, "-->", "comment")) != BRAID_SUCCESS)
        goto fail;
    } else if (at(&x, "<!DOCTYPE")) {
      if (root) {
        r = XERR(&x, "DOCTYPE after the root element");
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
        r = XERR(&x, "unterminated DOCTYPE");
        goto fail;
      }
      adv(&x, 1);
    } else if (*x.p == '<' && !root) {
      if ((r = parse_element(&x, 0, &root)) != BRAID_SUCCESS)
        goto fail;
    } else {
      r = XERR(&x,
               root ? "content after the root element"
                    : "expected an element, found '%c'",
               *x.p);
      goto fail;
    }
  }
  if (!root)
    return XERR(&x, "no root element (empty or truncated file)");
  *out = root;
  return BRAID_SUCCESS;
fail:
  xml_free(root);
  return r;
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

static braid_result attr_err(const xml_node *n, const char *name, int line,
                             const char *fname, const char *what,
                             const char *value) {
  if (value)
    return ERR(BRAID_ERR_INVALID_ARG,
               "%s:%d: <%s> attribute '%s': %s (got '%.40s')", fname, line,
               n->name, name, what, value);
  return ERR(BRAID_ERR_INVALID_ARG, "%s:%d: <%s> attribute '%s': %s", fname,
             line, n->name, name, what);
}

braid_result xml_require(const xml_node *n, const char *name, const char **out,
                         const char *fname) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return attr_err(n, name, n->line, fname, "missing", NULL);
  *out = a->value;
  return BRAID_SUCCESS;
}

braid_result xml_get_int(const xml_node *n, const char *name, long lo, long hi,
                         int required, long *out, const char *fname) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required ? attr_err(n, name, n->line, fname, "missing", NULL)
                    : BRAID_SUCCESS;
  char *e;
  errno = 0;
  long v = strtol(a->value, &e, 0);
  while (*e == ' ')
    e++;
  if (e == a->value || *e || errno)
    return attr_err(n, name, a->line, fname, "not an integer", a->value);
  if (v < lo || v > hi) {
    char what[96];
    snprintf(what, sizeof(what), "out of range [%ld, %ld]", lo, hi);
    return attr_err(n, name, a->line, fname, what, a->value);
  }
  *out = v;
  return BRAID_SUCCESS;
}

braid_result xml_get_hex(const xml_node *n, const char *name, int required,
                         long *out, const char *fname) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required ? attr_err(n, name, n->line, fname, "missing", NULL)
                    : BRAID_SUCCESS;
  char *e;
  errno = 0;
  long v = strtol(a->value, &e, 16);
  if (e == a->value || *e || errno || v < 0 || v > INT_MAX)
    return attr_err(n, name, a->line, fname, "not a hexadecimal number",
                    a->value);
  *out = v;
  return BRAID_SUCCESS;
}

braid_result xml_get_double(const xml_node *n, const char *name, double lo,
                            double hi, int required, double *out,
                            const char *fname) {
  const xml_attr *a = xml_attr_get(n, name);
  if (!a)
    return required ? attr_err(n, name, n->line, fname, "missing", NULL)
                    : BRAID_SUCCESS;
  char *e;
  double v = strtod(a->value, &e);
  if (e == a->value || *e || !isfinite(v))
    return attr_err(n, name, a->line, fname, "not a number", a->value);
  if (v < lo || v > hi)
    return attr_err(n, name, a->line, fname, "out of range", a->value);
  *out = v;
  return BRAID_SUCCESS;
}
