/* Tensors: a typed, shaped view of memory that a backend owns.
 *
 * A gt_tensor does not own its data; an arena or a model does. Views
 * (reshape, slice) are new descriptors of the same bytes. Shapes are
 * row-major with strides in elements, up to four dimensions.
 */
#ifndef GIANT_TENSOR_H
#define GIANT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_dtype {
  GT_F32 = 0,  /* IEEE float32: parameters, activations, optimizer state */
  GT_BF16 = 1, /* bfloat16 storage: compute copies in mixed precision */
  GT_I32 = 2,  /* int32: token ids and targets */
} gt_dtype;

size_t gt_dtype_size(gt_dtype t);
const char *gt_dtype_name(gt_dtype t);

/* bfloat16 is the top half of a float32; conversion rounds to nearest even
 * and keeps NaN a NaN. */
typedef uint16_t gt_bf16;
gt_bf16 gt_f32_to_bf16(float f);
float gt_bf16_to_f32(gt_bf16 h);

#define GT_MAX_DIMS 4

struct gt_backend;

typedef struct gt_tensor {
  void *data;                   /* first element, in the backend's memory */
  struct gt_backend *backend;   /* where data lives; NULL for host memory */
  gt_dtype dtype;
  int ndim;
  int64_t shape[GT_MAX_DIMS];
  int64_t stride[GT_MAX_DIMS];  /* in elements */
} gt_tensor;

/* A contiguous tensor over `data`. */
gt_status gt_tensor_init(gt_tensor *t, struct gt_backend *be, void *data, gt_dtype dtype,
                         int ndim, const int64_t *shape);
int64_t gt_tensor_numel(const gt_tensor *t);
size_t gt_tensor_nbytes(const gt_tensor *t);
bool gt_tensor_is_contiguous(const gt_tensor *t);
/* The same elements under another shape (contiguous tensors only). */
gt_status gt_tensor_reshape(const gt_tensor *t, int ndim, const int64_t *shape, gt_tensor *out);
/* Elements [start, start+len) along dimension `dim`. */
gt_status gt_tensor_slice(const gt_tensor *t, int dim, int64_t start, int64_t len, gt_tensor *out);
/* "f32[8, 128, 256]" into buf. */
const char *gt_tensor_describe(const gt_tensor *t, char *buf, size_t n);

GT_API_END
#endif
