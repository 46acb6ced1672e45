/* Strided views of memory (dtype, shape, strides, where the data lives):
 * reshape, slice and describe. Internal to libgiant: the layers and models
 * keep flat buffers with sizes; this view is here for kernels' tests and
 * future callers inside the library. */
#ifndef GIANT_CORE_TENSOR_H
#define GIANT_CORE_TENSOR_H

#include "giant/tensor.h"

#define GT_MAX_DIMS 4

struct gt_backend;

typedef struct gt_tensor {
  void *data;                 /* first element, in the backend's memory */
  struct gt_backend *backend; /* where data lives; NULL for host memory */
  gt_dtype dtype;
  int ndim;
  int64_t shape[GT_MAX_DIMS];
  int64_t stride[GT_MAX_DIMS]; /* in elements */
} gt_tensor;

/* A contiguous tensor over `data`. */
gt_status gt_tensor_init(gt_tensor *t, struct gt_backend *be, void *data, gt_dtype dtype, int ndim,
                         const int64_t *shape);
int64_t gt_tensor_numel(const gt_tensor *t);
size_t gt_tensor_nbytes(const gt_tensor *t);
bool gt_tensor_is_contiguous(const gt_tensor *t);
/* The same elements under another shape (contiguous tensors only). */
gt_status gt_tensor_reshape(const gt_tensor *t, int ndim, const int64_t *shape, gt_tensor *out);
/* Elements [start, start+len) along dimension `dim`. */
gt_status gt_tensor_slice(const gt_tensor *t, int dim, int64_t start, int64_t len, gt_tensor *out);
/* "f32[8, 128, 256]" into buf. */
const char *gt_tensor_describe(const gt_tensor *t, char *buf, size_t n);

#endif
