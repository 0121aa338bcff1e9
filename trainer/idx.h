/*
 * IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
 */
#ifndef BRAID_TRAINER_IDX_H
#define BRAID_TRAINER_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4

/* An unsigned-byte IDX array: dims[0] items, each dims[1] x ... bytes. */
typedef struct idx_array {
  int ndims;
  uint32_t dims[IDX_MAX_DIMS];
  size_t nbytes;
  uint8_t *data;
} idx_array;

/* Reads an IDX file of unsigned bytes with want_ndims dimensions. gzip input
 * is detected from the content. On failure returns -1 and writes to err a
 * message that names the file and what is wrong with it. */
int idx_read(const char *path, int want_ndims, idx_array *out, char *err,
             size_t errlen);
void idx_free(idx_array *a);

/* A labelled image set: n images of rows x cols bytes, labels < nclasses. */
typedef struct dataset {
  size_t n;
  int rows, cols, nclasses;
  uint8_t *images; /* n * rows * cols */
  uint8_t *labels; /* n */
} dataset;

/* Loads "<dir>/<split>-images-idx3-ubyte[.gz]" and the matching labels
 * (split is "train" or "t10k"), checks that they agree, that images are
 * 28x28 and that labels are below 10. */
int dataset_load_fmnist(const char *dir, const char *split, dataset *ds,
                        char *err, size_t errlen);
void dataset_free(dataset *ds);

#endif
