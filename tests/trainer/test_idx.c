/*
 * IDX reader: good files (plain and gzip) load; truncated, malformed and
 * missing ones fail with a message naming the file and the fault.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/braid-idx-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(trainer_idx, .init = make_dir, .fini = remove_dir);

/* Criterion runs no fini after a skip: the directory goes first. */
#define skip(...)                                                              \
  do {                                                                         \
    remove_dir();                                                              \
    cr_skip_test(__VA_ARGS__);                                                 \
  } while (0)

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* Builds an IDX image of ndims dims; returns its size. */
static size_t build(uint8_t *buf, uint8_t type, int ndims, const uint32_t *dims,
                    size_t ndata) {
  buf[0] = buf[1] = 0;
  buf[2] = type;
  buf[3] = (uint8_t)ndims;
  for (int i = 0; i < ndims; i++)
    put_be32(buf + 4 + 4 * i, dims[i]);
  size_t h = 4 + 4 * (size_t)ndims;
  for (size_t i = 0; i < ndata; i++)
    buf[h + i] = (uint8_t)(i % 10);
  return h + ndata;
}

static void write_file(const char *name, const uint8_t *buf, size_t n, int gz) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(gzwrite(f, buf, (unsigned)n), (int)n);
    cr_assert_eq(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
  }
}

static char *path_of(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

static uint8_t buf[4 * 28 * 28 + 64];

/* Reads name; expects failure with both words in the message. */
static void expect_error(const char *name, int ndims, const char *w1,
                         const char *w2) {
  idx_array a;
  char err[512] = "";
  cr_assert_eq(idx_read(path_of(name), ndims, &a, err, sizeof err), -1,
               "%s should not load", name);
  cr_expect_not_null(strstr(err, name), "error names the file: %s", err);
  cr_expect_not_null(strstr(err, w1), "error says '%s': %s", w1, err);
  if (w2)
    cr_expect_not_null(strstr(err, w2), "error says '%s': %s", w2, err);
  cr_expect_null(a.data);
}

Test(trainer_idx, good_plain_and_gzip) {
  uint32_t dims[3] = {4, 28, 28};
  size_t n = build(buf, 0x08, 3, dims, 4 * 28 * 28);
  for (int gz = 0; gz < 2; gz++) {
    const char *name = gz ? "good.gz" : "good";
    write_file(name, buf, n, gz);
    idx_array a;
    char err[512] = "";
    cr_assert_eq(idx_read(path_of(name), 3, &a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a.ndims, 3);
    cr_expect_eq(a.dims[0], 4u);
    cr_expect_eq(a.dims[1], 28u);
    cr_expect_eq(a.nbytes, (size_t)4 * 28 * 28);
    cr_expect_eq(memcmp(a.data, buf + 16, a.nbytes), 0);
    idx_free(&a);
  }
}

Test(trainer_idx, truncated_data) {
  uint32_t dims[3] = {4, 28, 28};
  size_t n = build(buf, 0x08, 3, dims, 4 * 28 * 28);
  write_file("short", buf, n - 100, 0);
  expect_error("short", 3, "truncated", "3136");
  write_file("short.gz", buf, n - 1, 1);
  expect_error("short.gz", 3, "truncated", "3135");
}

Test(trainer_idx, truncated_header) {
  uint32_t dims[3] = {4, 28, 28};
  build(buf, 0x08, 3, dims, 0);
  write_file("hdr", buf, 9, 0);
  expect_error("hdr", 3, "truncated header", NULL);
  write_file("tiny", buf, 2, 0);
  expect_error("tiny", 3, "truncated", NULL);
  write_file("empty", buf, 0, 0);
  expect_error("empty", 3, "truncated", NULL);
}

Test(trainer_idx, bad_magic_type_and_dims) {
  uint32_t dims[3] = {1, 28, 28};
  size_t n = build(buf, 0x08, 3, dims, 28 * 28);
  buf[0] = 0x1f; /* not an IDX magic */
  write_file("magic", buf, n, 0);
  expect_error("magic", 3, "not an IDX file", NULL);

  n = build(buf, 0x0D, 3, dims, 28 * 28); /* float elements */
  write_file("type", buf, n, 0);
  expect_error("type", 3, "element type 0x0d", "unsigned byte");

  n = build(buf, 0x08, 3, dims, 28 * 28);
  write_file("dims", buf, n, 0);
  expect_error("dims", 1, "3 dimensions", "expected 1");

  uint32_t zero[3] = {0, 28, 28};
  n = build(buf, 0x08, 3, zero, 0);
  write_file("zero", buf, n, 0);
  expect_error("zero", 3, "implausible size 0", NULL);
}

Test(trainer_idx, trailing_bytes) {
  uint32_t dims[1] = {10};
  size_t n = build(buf, 0x08, 1, dims, 12);
  write_file("long", buf, n, 0);
  expect_error("long", 1, "trailing bytes", NULL);
}

Test(trainer_idx, corrupt_gzip) {
  uint32_t dims[3] = {4, 28, 28};
  size_t n = build(buf, 0x08, 3, dims, 4 * 28 * 28);
  write_file("bad.gz", buf, n, 1);
  /* flip bytes inside the deflate stream */
  FILE *f = fopen(path_of("bad.gz"), "r+b");
  cr_assert_not_null(f);
  fseek(f, 20, SEEK_SET);
  uint8_t junk[40];
  memset(junk, 0xA5, sizeof junk);
  fwrite(junk, 1, sizeof junk, f);
  fclose(f);
  idx_array a;
  char err[512] = "";
  cr_assert_eq(idx_read(path_of("bad.gz"), 3, &a, err, sizeof err), -1);
  cr_expect_not_null(strstr(err, "bad.gz"), "%s", err);
}

Test(trainer_idx, missing_file) {
  expect_error("nope", 3, "cannot open", "No such file");
}

/* ---- the Fashion-MNIST pair -------------------------------------------- */

static void write_pair(const char *split, uint32_t nimg, uint32_t h,
                       uint32_t nlab, uint8_t bad_label) {
  static uint8_t big[3 * 30 * 30 + 64];
  char name[128];
  uint32_t d3[3] = {nimg, h, h};
  size_t n = build(big, 0x08, 3, d3, (size_t)nimg * h * h);
  snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", split);
  write_file(name, big, n, 1);
  uint32_t d1[1] = {nlab};
  n = build(big, 0x08, 1, d1, nlab);
  if (bad_label)
    big[8 + nlab - 1] = bad_label;
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split); /* plain */
  write_file(name, big, n, 0);
}

Test(trainer_idx, dataset_checks) {
  dataset ds;
  char err[1024];
  write_pair("train", 3, 28, 3, 0);
  cr_assert_eq(dataset_load_fmnist(dir, "train", &ds, err, sizeof err), 0, "%s",
               err);
  cr_expect_eq(ds.n, 3u);
  cr_expect_eq(ds.labels[1], 1);
  dataset_free(&ds);

  write_pair("train", 3, 28, 2, 0);
  cr_assert_eq(dataset_load_fmnist(dir, "train", &ds, err, sizeof err), -1);
  cr_expect_not_null(strstr(err, "3 images but"), "%s", err);
  cr_expect_not_null(strstr(err, "has 2 labels"), "%s", err);

  write_pair("train", 3, 28, 3, 12);
  cr_assert_eq(dataset_load_fmnist(dir, "train", &ds, err, sizeof err), -1);
  cr_expect_not_null(strstr(err, "label 12 at index 2"), "%s", err);

  write_pair("train", 3, 30, 3, 0);
  cr_assert_eq(dataset_load_fmnist(dir, "train", &ds, err, sizeof err), -1);
  cr_expect_not_null(strstr(err, "30x30, expected 28x28"), "%s", err);

  cr_assert_eq(dataset_load_fmnist(dir, "t10k", &ds, err, sizeof err), -1);
  cr_expect_not_null(strstr(err, "t10k-images-idx3-ubyte"), "%s", err);
  cr_expect_not_null(strstr(err, "missing"), "%s", err);
}

Test(trainer_idx, real_fashion_mnist) {
  const char *d = "/usr/share/datasets/fashion-mnist";
  if (access(d, R_OK) != 0)
    skip("%s not present (Debian package dataset-fashion-mnist)", d);
  dataset tr, te;
  char err[1024];
  cr_assert_eq(dataset_load_fmnist(d, "train", &tr, err, sizeof err), 0, "%s",
               err);
  cr_assert_eq(dataset_load_fmnist(d, "t10k", &te, err, sizeof err), 0, "%s",
               err);
  cr_expect_eq(tr.n, 60000u);
  cr_expect_eq(te.n, 10000u);
  long count[10] = {0};
  for (size_t i = 0; i < tr.n; i++)
    count[tr.labels[i]]++;
  for (int c = 0; c < 10; c++)
    cr_expect_eq(count[c], 6000, "class %d has %ld images", c, count[c]);
  dataset_free(&tr);
  dataset_free(&te);
}
