/* Tensor descriptors, views, and bf16 conversion. */

#include <stdio.h>
#include <string.h>
#include "core/tensor.h"

size_t gt_dtype_size(gt_dtype t) {
  switch (t) {
    case GT_F32: return 4;
    case GT_BF16: return 2;
    case GT_I32: return 4;
  }
  return 0;
}

const char *gt_dtype_name(gt_dtype t) {
  switch (t) {
    case GT_F32: return "f32";
    case GT_BF16: return "bf16";
    case GT_I32: return "i32";
  }
  return "?";
}

gt_bf16 gt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (gt_bf16)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                         /* round to nearest, ties to even */
  return (gt_bf16)(u >> 16);
}

float gt_bf16_to_f32(gt_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void contiguous_strides(gt_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    t->stride[i] = s;
    s *= t->shape[i];
  }
}

static gt_status check_shape(int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > GT_MAX_DIMS) return gt_errorf(GT_EINVAL, "tensor rank %d is outside 0..%d", ndim, GT_MAX_DIMS);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) return gt_errorf(GT_EINVAL, "tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
  return GT_OK;
}

/* A fixed trip count, not ndim: with some -march targets gcc turns an
 * ndim-long loop into a memcpy whose length it cannot bound by check_shape's
 * test, and warns of a copy past shape[] (-Warray-bounds). Dimensions past
 * ndim are zero, as gt_tensor_init leaves them. */
static void set_shape(gt_tensor *t, int ndim, const int64_t *shape) {
  t->ndim = ndim;
  for (int i = 0; i < GT_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 0;
}

gt_status gt_tensor_init(gt_tensor *t, struct gt_backend *be, void *data, gt_dtype dtype, int ndim,
                         const int64_t *shape) {
  GT_TRY(check_shape(ndim, shape));
  memset(t, 0, sizeof *t);
  t->data = data;
  t->backend = be;
  t->dtype = dtype;
  set_shape(t, ndim, shape);
  contiguous_strides(t);
  return GT_OK;
}

int64_t gt_tensor_numel(const gt_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t gt_tensor_nbytes(const gt_tensor *t) { return (size_t)gt_tensor_numel(t) * gt_dtype_size(t->dtype); }

bool gt_tensor_is_contiguous(const gt_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

gt_status gt_tensor_reshape(const gt_tensor *t, int ndim, const int64_t *shape, gt_tensor *out) {
  GT_TRY(check_shape(ndim, shape));
  if (!gt_tensor_is_contiguous(t))
    return gt_errorf(GT_EINVAL, "reshape needs a contiguous tensor; copy the view first");
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  if (n != gt_tensor_numel(t))
    return gt_errorf(GT_EINVAL, "reshape from %lld to %lld elements", (long long)gt_tensor_numel(t), (long long)n);
  gt_tensor r = *t;
  set_shape(&r, ndim, shape);
  contiguous_strides(&r);
  *out = r;
  return GT_OK;
}

gt_status gt_tensor_slice(const gt_tensor *t, int dim, int64_t start, int64_t len, gt_tensor *out) {
  if (dim < 0 || dim >= t->ndim) return gt_errorf(GT_EINVAL, "slice dimension %d of a rank-%d tensor", dim, t->ndim);
  if (start < 0 || len < 0 || start + len > t->shape[dim])
    return gt_errorf(GT_ERANGE, "slice [%lld, %lld) of dimension %d with size %lld", (long long)start,
                     (long long)(start + len), dim, (long long)t->shape[dim]);
  gt_tensor r = *t;
  r.data = (char *)t->data + (size_t)(start * t->stride[dim]) * gt_dtype_size(t->dtype);
  r.shape[dim] = len;
  *out = r;
  return GT_OK;
}

const char *gt_tensor_describe(const gt_tensor *t, char *buf, size_t n) {
  int off = snprintf(buf, n, "%s[", gt_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim && off > 0 && (size_t)off < n; i++)
    off += snprintf(buf + off, n - (size_t)off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (off > 0 && (size_t)off < n) snprintf(buf + off, n - (size_t)off, "]");
  return buf;
}
