/*
 * A small strict XML reader for MSCCL schedule files (collectives/msccl.c):
 * elements with attributes, nothing else of consequence. Comments, the XML
 * declaration and processing instructions are skipped; text between
 * elements must be white space; DOCTYPE, CDATA and entities other than the
 * five predefined ones and character references below 128 are refused.
 * Every element and attribute remembers its byte offset, so that errors can
 * name the line. Bounded: nesting depth, element and attribute counts.
 */
#ifndef BRAID_COLLECTIVES_MSCCL_XML_H
#define BRAID_COLLECTIVES_MSCCL_XML_H

#include <stddef.h>
#include <stdint.h>

#include "src/log.h" /* braid_result; err_msg() reads the message */

#define MXML_MAX_DEPTH 16
#define MXML_MAX_ELEMS (1u << 20)
#define MXML_MAX_ATTRS 64 /* per element */

typedef struct mxml_attr {
  uint32_t name;  /* offset of the name in mxml_doc.str */
  uint32_t value; /* offset of the decoded value in mxml_doc.str */
  uint32_t pos;   /* byte offset of the attribute in the text */
} mxml_attr;

/* Element ids index mxml_doc.e; the root is 0, -1 is "none". */
typedef struct mxml_elem {
  uint32_t name;               /* offset in str */
  uint32_t pos;                /* byte offset of '<' */
  uint32_t attr;               /* first attribute in mxml_doc.a */
  uint32_t nattr;              /* attributes */
  int32_t parent, child, next; /* first child, next sibling */
  int32_t last;                /* last child (while reading) */
} mxml_elem;

typedef struct mxml_doc {
  mxml_elem *e;
  uint32_t ne, cape;
  mxml_attr *a;
  uint32_t na, capa;
  char *str; /* names and decoded values, each NUL-terminated */
  size_t nstr, capstr;
} mxml_doc;

/* Parses buf[0..len). BRAID_SUCCESS, or an error (BRAID_ERR_INVALID_ARG,
 * BRAID_ERR_NOMEM) with *errpos the byte offset of the problem and a message
 * (without position, ERR). */
braid_result mxml_parse(mxml_doc *d, const char *buf, size_t len,
                        size_t *errpos);
void mxml_free(mxml_doc *d);

/* 1-based line of a byte offset. */
int mxml_line(const char *buf, size_t len, size_t pos);

static inline const char *mxml_name(const mxml_doc *d, int32_t el) {
  return d->str + d->e[el].name;
}
/* The value of attribute `name` of element el, or NULL; *pos its offset. */
const char *mxml_get(const mxml_doc *d, int32_t el, const char *name,
                     uint32_t *pos);

#endif
