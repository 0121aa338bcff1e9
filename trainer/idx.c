#include "idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

__attribute__((format(printf, 3, 4))) static void
seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  /* the analyzer misreads va_start in static variadic functions */
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Reads exactly len bytes; returns the number read (less at end of data) or
 * -1 on a decompression or I/O error. */
static long long read_full(gzFile f, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    size_t want = len - got;
    if (want > (1u << 30))
      want = 1u << 30;
    int r = gzread(f, (char *)buf + got, (unsigned)want);
    if (r < 0)
      return -1;
    if (r == 0)
      break;
    got += (size_t)r;
  }
  return (long long)got;
}

static const char *gz_why(gzFile f) {
  int code = 0;
  const char *msg = gzerror(f, &code);
  if (code == Z_ERRNO)
    return strerror(errno);
  return msg && *msg ? msg : "corrupt compressed data";
}

int idx_read(const char *path, int want_ndims, idx_array *out, char *err,
             size_t errlen) {
  memset(out, 0, sizeof *out);
  if (want_ndims < 1 || want_ndims > IDX_MAX_DIMS) {
    seterr(err, errlen, "%s: asked for %d dimensions (1..%d supported)", path,
           want_ndims, IDX_MAX_DIMS);
    return -1;
  }
  gzFile f = gzopen(path, "rb");
  if (!f) {
    seterr(err, errlen, "%s: cannot open: %s", path,
           errno ? strerror(errno) : "out of memory");
    return -1;
  }
  int rc = -1;
  uint8_t hdr[4 + 4 * IDX_MAX_DIMS];
  long long got = read_full(f, hdr, 4);
  if (got < 0) {
    seterr(err, errlen, "%s: read error: %s", path, gz_why(f));
    goto done;
  }
  if (got < 4) {
    seterr(err, errlen,
           "%s: truncated: %lld bytes, an IDX header needs at least 4", path,
           got);
    goto done;
  }
  if (hdr[0] != 0 || hdr[1] != 0) {
    seterr(err, errlen,
           "%s: not an IDX file: magic starts with 0x%02x%02x, expected "
           "0x0000",
           path, hdr[0], hdr[1]);
    goto done;
  }
  if (hdr[2] != 0x08) {
    seterr(err, errlen,
           "%s: IDX element type 0x%02x, expected 0x08 (unsigned byte)", path,
           hdr[2]);
    goto done;
  }
  if (hdr[3] != want_ndims) {
    seterr(err, errlen, "%s: IDX file has %d dimensions, expected %d", path,
           hdr[3], want_ndims);
    goto done;
  }
  got = read_full(f, hdr + 4, 4 * (size_t)want_ndims);
  if (got < 0) {
    seterr(err, errlen, "%s: read error: %s", path, gz_why(f));
    goto done;
  }
  if (got < 4 * want_ndims) {
    seterr(err, errlen,
           "%s: truncated header: %lld of %d bytes of dimension sizes", path,
           got, 4 * want_ndims);
    goto done;
  }
  size_t total = 1;
  for (int i = 0; i < want_ndims; i++) {
    const uint8_t *p = hdr + 4 + 4 * i;
    uint32_t d = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                 ((uint32_t)p[2] << 8) | p[3];
    if (d == 0 || d > (1u << 28) || total > ((size_t)1 << 34) / d) {
      seterr(err, errlen, "%s: implausible size %u for dimension %d", path, d,
             i);
      goto done;
    }
    out->dims[i] = d;
    total *= d;
  }
  out->ndims = want_ndims;
  out->nbytes = total;
  out->data = malloc(total);
  if (!out->data) {
    seterr(err, errlen, "%s: cannot allocate %zu bytes", path, total);
    goto done;
  }
  got = read_full(f, out->data, total);
  if (got < 0) {
    seterr(err, errlen, "%s: read error in the data: %s", path, gz_why(f));
    goto done;
  }
  if ((size_t)got < total) {
    seterr(err, errlen,
           "%s: truncated: header promises %zu bytes of data, file has %lld",
           path, total, got);
    goto done;
  }
  uint8_t extra;
  got = read_full(f, &extra, 1);
  if (got != 0) {
    seterr(err, errlen, "%s: %s after the %zu bytes the header promises", path,
           got < 0 ? "read error" : "trailing bytes", total);
    goto done;
  }
  rc = 0;
done:
  gzclose(f);
  if (rc != 0)
    idx_free(out);
  return rc;
}

void idx_free(idx_array *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}

/* "<dir>/<base>" if it exists, else "<dir>/<base>.gz"; the plain name when
 * neither does (so the error names what was looked for). */
static void find_file(const char *dir, const char *base, char *path,
                      size_t len) {
  snprintf(path, len, "%s/%s", dir, base);
  if (access(path, R_OK) == 0)
    return;
  snprintf(path, len, "%s/%s.gz", dir, base);
}

int dataset_load_fmnist(const char *dir, const char *split, dataset *ds,
                        char *err, size_t errlen) {
  memset(ds, 0, sizeof *ds);
  char ipath[4096], lpath[4096], base[128];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
  find_file(dir, base, ipath, sizeof ipath);
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
  find_file(dir, base, lpath, sizeof lpath);
  if (access(ipath, R_OK) != 0) {
    seterr(err, errlen,
           "%s: missing (looked for %s-images-idx3-ubyte and .gz in %s; "
           "install dataset-fashion-mnist or pass --data DIR)",
           ipath, split, dir);
    return -1;
  }
  if (access(lpath, R_OK) != 0) {
    seterr(err, errlen,
           "%s: missing (looked for %s-labels-idx1-ubyte and .gz in %s)", lpath,
           split, dir);
    return -1;
  }
  idx_array im, lb;
  if (idx_read(ipath, 3, &im, err, errlen) != 0)
    return -1;
  if (idx_read(lpath, 1, &lb, err, errlen) != 0) {
    idx_free(&im);
    return -1;
  }
  int rc = -1;
  if (im.dims[1] != 28 || im.dims[2] != 28) {
    seterr(err, errlen, "%s: images are %ux%u, expected 28x28", ipath,
           im.dims[1], im.dims[2]);
    goto fail;
  }
  if (im.dims[0] != lb.dims[0]) {
    seterr(err, errlen, "%s has %u images but %s has %u labels", ipath,
           im.dims[0], lpath, lb.dims[0]);
    goto fail;
  }
  for (size_t i = 0; i < lb.nbytes; i++) {
    if (lb.data[i] >= 10) {
      seterr(err, errlen, "%s: label %u at index %zu, expected 0..9", lpath,
             lb.data[i], i);
      goto fail;
    }
  }
  ds->n = im.dims[0];
  ds->rows = (int)im.dims[1];
  ds->cols = (int)im.dims[2];
  ds->nclasses = 10;
  ds->images = im.data;
  ds->labels = lb.data;
  return 0;
fail:
  idx_free(&im);
  idx_free(&lb);
  return rc;
}

void dataset_free(dataset *ds) {
  free(ds->images);
  free(ds->labels);
  memset(ds, 0, sizeof *ds);
}
