/*
 * The XML reader of MSCCL schedule files (see msccl_xml.h): one pass over
 * the text into a flat array of elements and attributes. Strict where
 * leniency would only hide mistakes; every error names its byte offset.
 */
#include "msccl_xml.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"

typedef struct rd {
  mxml_doc *d;
  const char *b;
  size_t len, p;
  size_t *errpos;
  braid_result rc; /* the failure's result */
} rd;

/* Records the problem at byte `pos` for the calling thread (ERR, at the
 * caller's line) and returns -1: malformed text (fail,
 * BRAID_ERR_INVALID_ARG), or out of memory. */
__attribute__((format(printf, 6, 7))) static int
fail_at(const char *file, int line, rd *r, braid_result res, size_t pos,
        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  r->rc = err_vat(file, line, res, fmt, ap);
  va_end(ap);
  *r->errpos = pos;
  return -1;
}
#define fail(r, pos, ...)                                                      \
  fail_at(__FILE__, __LINE__, (r), BRAID_ERR_INVALID_ARG, (pos), __VA_ARGS__)
#define fail_nomem(r, pos)                                                     \
  fail_at(__FILE__, __LINE__, (r), BRAID_ERR_NOMEM, (pos), "out of memory")

static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
static int is_name0(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == ':';
}
static int is_name(char c) {
  return is_name0(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}
static void skip_ws(rd *r) {
  while (r->p < r->len && is_ws(r->b[r->p]))
    r->p++;
}
static int starts(const rd *r, const char *s) {
  size_t n = strlen(s);
  return r->len - r->p >= n && memcmp(r->b + r->p, s, n) == 0;
}

/* Appends n bytes and a NUL to the string store; its offset in *off. */
static int put_str(rd *r, const char *s, size_t n, uint32_t *off) {
  mxml_doc *d = r->d;
  if (d->nstr + n + 1 > d->capstr) {
    size_t cap = d->capstr ? d->capstr : 1024;
    while (cap < d->nstr + n + 1)
      cap *= 2;
    if (cap > UINT32_MAX)
      return fail(r, r->p, "document too large");
    char *ns = realloc(d->str, cap);
    if (!ns)
      return fail_nomem(r, r->p);
    d->str = ns;
    d->capstr = cap;
  }
  memcpy(d->str + d->nstr, s, n);
  d->str[d->nstr + n] = '\0';
  *off = (uint32_t)d->nstr;
  d->nstr += n + 1;
  return 0;
}

static int read_name(rd *r, uint32_t *off) {
  size_t s = r->p;
  if (s >= r->len || !is_name0(r->b[s]))
    return fail(r, s, "expected a name");
  while (r->p < r->len && is_name(r->b[r->p]))
    r->p++;
  return put_str(r, r->b + s, r->p - s, off);
}

/* Skips up to and past `end` (a comment, declaration or instruction). */
static int skip_past(rd *r, const char *end, const char *what) {
  size_t s = r->p;
  size_t n = strlen(end);
  for (; r->p + n <= r->len; r->p++)
    if (memcmp(r->b + r->p, end, n) == 0) {
      r->p += n;
      return 0;
    }
  return fail(r, s, "unterminated %s", what);
}

/* &name; or &#N; / &#xN; at r->p (which is '&'): the character in *c. */
static int read_entity(rd *r, char *c) {
  static const struct {
    const char *name;
    char c;
  } ent[] = {{"lt;", '<'},
             {"gt;", '>'},
             {"amp;", '&'},
             {"quot;", '"'},
             {"apos;", '\''}};
  size_t s = r->p++;
  for (size_t i = 0; i < sizeof(ent) / sizeof(ent[0]); i++)
    if (starts(r, ent[i].name)) {
      r->p += strlen(ent[i].name);
      *c = ent[i].c;
      return 0;
    }
  if (r->p < r->len && r->b[r->p] == '#') {
    r->p++;
    int hex = r->p < r->len && r->b[r->p] == 'x';
    r->p += (size_t)hex;
    unsigned v = 0;
    int nd = 0;
    while (r->p < r->len && r->b[r->p] != ';' && nd < 8) {
      char h = r->b[r->p];
      unsigned dv;
      if (h >= '0' && h <= '9')
        dv = (unsigned)(h - '0');
      else if (hex && h >= 'a' && h <= 'f')
        dv = (unsigned)(h - 'a' + 10);
      else if (hex && h >= 'A' && h <= 'F')
        dv = (unsigned)(h - 'A' + 10);
      else
        return fail(r, s, "bad character reference");
      v = v * (hex ? 16u : 10u) + dv;
      nd++;
      r->p++;
    }
    if (nd == 0 || r->p >= r->len || r->b[r->p] != ';')
      return fail(r, s, "bad character reference");
    r->p++;
    if (v == 0 || v >= 128)
      return fail(r, s, "character reference %u: only 1..127 are read", v);
    *c = (char)v;
    return 0;
  }
  return fail(r, s, "unknown entity (only &lt; &gt; &amp; &quot; &apos;)");
}

static int read_value(rd *r, uint32_t *off) {
  if (r->p >= r->len || (r->b[r->p] != '"' && r->b[r->p] != '\''))
    return fail(r, r->p, "expected a quoted attribute value");
  char q = r->b[r->p++];
  size_t s = r->p;
  char buf[256];
  size_t n = 0;
  for (;;) {
    if (r->p >= r->len)
      return fail(r, s - 1, "unterminated attribute value");
    char c = r->b[r->p];
    if (c == q)
      break;
    if (c == '<' || c == '\0')
      return fail(r, r->p, "'%s' inside an attribute value",
                  c ? "<" : "NUL byte");
    if (c == '&') {
      if (read_entity(r, &c))
        return -1;
    } else {
      r->p++;
    }
    if (n == sizeof(buf) - 1)
      return fail(r, s, "attribute value longer than %zu bytes",
                  sizeof(buf) - 1);
    buf[n++] = c;
  }
  r->p++;
  return put_str(r, buf, n, off);
}

static int new_elem(rd *r, int32_t parent, int32_t *id) {
  mxml_doc *d = r->d;
  if (d->ne >= MXML_MAX_ELEMS)
    return fail(r, r->p, "more than %u elements", MXML_MAX_ELEMS);
  if (d->ne == d->cape) {
    uint32_t cap = d->cape ? d->cape * 2 : 64;
    mxml_elem *ne = realloc(d->e, (size_t)cap * sizeof(*ne));
    if (!ne)
      return fail_nomem(r, r->p);
    d->e = ne;
    d->cape = cap;
  }
  mxml_elem *e = &d->e[d->ne];
  memset(e, 0, sizeof(*e));
  e->pos = (uint32_t)r->p;
  e->parent = parent;
  e->child = e->next = e->last = -1;
  e->attr = d->na;
  *id = (int32_t)d->ne++;
  if (parent >= 0) { /* append as the parent's last child */
    mxml_elem *p = &d->e[parent];
    if (p->last >= 0)
      d->e[p->last].next = *id;
    else
      p->child = *id;
    p->last = *id;
  }
  return 0;
}

static int add_attr(rd *r, int32_t el, uint32_t name, uint32_t value,
                    size_t pos) {
  mxml_doc *d = r->d;
  mxml_elem *e = &d->e[el];
  if (e->nattr >= MXML_MAX_ATTRS)
    return fail(r, pos, "more than %d attributes", MXML_MAX_ATTRS);
  for (uint32_t i = 0; i < e->nattr; i++)
    if (!strcmp(d->str + d->a[e->attr + i].name, d->str + name))
      return fail(r, pos, "attribute '%s' given twice", d->str + name);
  if (d->na == d->capa) {
    uint32_t cap = d->capa ? d->capa * 2 : 256;
    if (cap < d->capa)
      return fail(r, pos, "too many attributes");
    mxml_attr *na = realloc(d->a, (size_t)cap * sizeof(*na));
    if (!na)
      return fail_nomem(r, pos);
    d->a = na;
    d->capa = cap;
  }
  d->a[d->na++] = (mxml_attr){name, value, (uint32_t)pos};
  e->nattr++;
  return 0;
}

/* A start tag at r->p ('<' already checked). *closed: it ended in "/>". */
static int start_tag(rd *r, int32_t parent, int32_t *id, int *closed) {
  *id = -1;
  if (new_elem(r, parent, id))
    return -1;
  r->p++;
  uint32_t nm = 0;
  if (read_name(r, &nm))
    return -1;
  r->d->e[*id].name = nm;
  for (;;) {
    size_t before = r->p;
    skip_ws(r);
    if (r->p >= r->len)
      return fail(r, r->d->e[*id].pos, "unterminated tag <%s", r->d->str + nm);
    if (r->b[r->p] == '>') {
      r->p++;
      *closed = 0;
      return 0;
    }
    if (starts(r, "/>")) {
      r->p += 2;
      *closed = 1;
      return 0;
    }
    if (r->p == before)
      return fail(r, r->p, "expected white space before an attribute");
    size_t apos = r->p;
    uint32_t an = 0, av = 0;
    if (read_name(r, &an))
      return -1;
    skip_ws(r);
    if (r->p >= r->len || r->b[r->p] != '=')
      return fail(r, r->p, "expected '=' after attribute '%s'", r->d->str + an);
    r->p++;
    skip_ws(r);
    if (read_value(r, &av) || add_attr(r, *id, an, av, apos))
      return -1;
  }
}

static int end_tag(rd *r, int32_t el) {
  size_t s = r->p;
  r->p += 2;
  uint32_t nm = 0;
  if (read_name(r, &nm))
    return -1;
  const char *name = r->d->str + nm;
  skip_ws(r);
  if (r->p >= r->len || r->b[r->p] != '>')
    return fail(r, r->p, "expected '>' to end </%s", name);
  r->p++;
  if (el < 0)
    return fail(r, s, "</%s> without an open element", name);
  if (strcmp(name, mxml_name(r->d, el)) != 0)
    return fail(r, s, "</%s> closes <%s>", name, mxml_name(r->d, el));
  return 0;
}

/* Comments, declarations and instructions; 1 when one was skipped. */
static int skip_misc(rd *r) {
  if (starts(r, "<!--"))
    return skip_past(r, "-->", "comment") ? -1 : 1;
  if (starts(r, "<?"))
    return skip_past(r, "?>", "processing instruction") ? -1 : 1;
  if (starts(r, "<!"))
    return fail(r, r->p, "DOCTYPE and CDATA are not read");
  return 0;
}

static int parse(rd *r) {
  int32_t cur = -1;
  int depth = 0, root_done = 0;
  if (starts(r, "\xEF\xBB\xBF"))
    r->p += 3;
  for (;;) {
    skip_ws(r);
    if (r->p >= r->len)
      break;
    int m = skip_misc(r);
    if (m < 0)
      return -1;
    if (m)
      continue;
    char c = r->b[r->p];
    if (c != '<')
      return fail(r, r->p,
                  c ? "text outside a tag (only white space is read)"
                    : "NUL byte");
    if (starts(r, "</")) {
      if (end_tag(r, cur))
        return -1;
      cur = r->d->e[cur].parent;
      depth--;
      if (cur < 0)
        root_done = 1;
      continue;
    }
    if (root_done)
      return fail(r, r->p, "a second root element");
    if (depth >= MXML_MAX_DEPTH)
      return fail(r, r->p, "nesting deeper than %d levels", MXML_MAX_DEPTH);
    int32_t id = -1;
    int closed = 0;
    if (start_tag(r, cur, &id, &closed))
      return -1;
    if (closed) {
      if (cur < 0)
        root_done = 1;
    } else {
      cur = id;
      depth++;
    }
  }
  if (cur >= 0)
    return fail(r, r->d->e[cur].pos, "<%s> is never closed",
                mxml_name(r->d, cur));
  if (!root_done)
    return fail(r, r->p, "no element");
  return 0;
}

braid_result mxml_parse(mxml_doc *d, const char *buf, size_t len,
                        size_t *errpos) {
  memset(d, 0, sizeof(*d));
  size_t ep = 0;
  rd r = {d, buf ? buf : "",        buf ? len : 0,
          0, errpos ? errpos : &ep, BRAID_SUCCESS};
  if (len > UINT32_MAX) {
    fail(&r, 0, "document too large");
    return r.rc;
  }
  if (parse(&r)) {
    mxml_free(d);
    return r.rc;
  }
  return BRAID_SUCCESS;
}

void mxml_free(mxml_doc *d) {
  if (!d)
    return;
  free(d->e);
  free(d->a);
  free(d->str);
  memset(d, 0, sizeof(*d));
}

int mxml_line(const char *buf, size_t len, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < len; i++)
    line += buf[i] == '\n';
  return line;
}

const char *mxml_get(const mxml_doc *d, int32_t el, const char *name,
                     uint32_t *pos) {
  const mxml_elem *e = &d->e[el];
  for (uint32_t i = 0; i < e->nattr; i++) {
    const mxml_attr *a = &d->a[e->attr + i];
    if (!strcmp(d->str + a->name, name)) {
      if (pos)
        *pos = a->pos;
      return d->str + a->value;
    }
  }
  return NULL;
}
