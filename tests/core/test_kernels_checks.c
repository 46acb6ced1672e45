/* The checks every gt_op_* makes before a backend runs: a missing backend
 * or operation, negative sizes, NULL where memory is needed. Each refusal
 * names the operation (and the backend), and nothing runs. */
#include <string.h>

#include "core/backend_impl.h"
#include "tests/core/test_kernels.h"
#include "core/backend_engine.h"

static void expect(gt_status got, gt_status want, const char *needle) {
  assert_int_equal(got, want);
  if (!strstr(gt_last_error(), needle)) fail_msg("'%s' is not in the message '%s'", needle, gt_last_error());
}

/* An operation the backend lacks, shown with a copy of its table. */
static void test_missing_op(gt_backend *be) {
  const gt_backend_ops *real = be->ops;
  gt_backend_ops lacking = *real;
  lacking.kernels.gemm_ex = NULL;
  lacking.kernels.xent_slice_stats = NULL;
  be->ops = &lacking;
  gt_gemm_ex_args g = {.m = 1, .n = 1, .k = 1, .batch = 1};
  expect(gt_op_gemm_ex(be, &g), GT_EUNSUPPORTED, "gemm_ex");
  assert_non_null(strstr(gt_last_error(), gt_backend_name(be)));
  assert_false(gt_backend_has_mixed_precision(be));
  expect(gt_op_xent_slice_stats(be, NULL, NULL, NULL, NULL, 0, 0, 1), GT_EUNSUPPORTED, "xent_slice_stats");
  be->ops = real;
}

void test_op_checks(void **state) {
  (void)state;
  gt_backend *be = kt_be;
  expect(gt_op_gelu_forward(NULL, NULL, NULL, 0), GT_EINVAL, "gelu_forward");
  expect(gt_backend_memset(NULL, NULL, 0, 0, NULL), GT_EINVAL, "memset");
  test_missing_op(be);

  float *buf = kt_dput(be, NULL, 64 * sizeof(float));
  /* Negative sizes, each named. */
  expect(gt_op_layernorm_forward(be, buf, buf, buf, buf, buf, buf, 2, -4), GT_EINVAL, "C=-4");
  expect(gt_op_bias_add(be, buf, buf, -1, 4), GT_EINVAL, "bias_add");
  expect(gt_op_causal_softmax_forward(be, buf, 1, -2), GT_EINVAL, "causal_softmax_forward");
  expect(gt_op_embedding_slice_forward(be, buf, (int32_t *)buf, buf, -1, 4, NULL, 1, 1, 4), GT_EINVAL, "v0=-1");
  expect(gt_op_xent_slice_finish(be, buf, buf, buf, buf, 0, buf, (int32_t *)buf, 4, 1, 4), GT_EINVAL, "P=0");
  /* NULL where a kernel with work would write or read. */
  expect(gt_op_gelu_forward(be, NULL, buf, 4), GT_EINVAL, "gelu_forward: out and inp must not be NULL");
  expect(gt_op_residual_backward(be, buf, NULL, NULL, 4), GT_EINVAL, "dout");
  expect(gt_op_adamw_update(be, buf, buf, buf, NULL, 4, &(gt_adamw_args){.step = 1}), GT_EINVAL, "adamw_update");
  expect(gt_op_adamw_update(be, buf, buf, buf, buf, 4, &(gt_adamw_args){.step = 0}), GT_EINVAL, "1-based");
  expect(gt_backend_memcpy(be, NULL, buf, 4, GT_COPY_D2D, NULL), GT_EINVAL, "NULL");
  /* Nothing to do needs no memory. */
  KT_OK(gt_op_gelu_forward(be, NULL, NULL, 0));
  KT_OK(gt_op_linear_forward(be, NULL, NULL, NULL, NULL, 0, 4, 4));
  KT_OK(gt_backend_memset(be, NULL, 0, 0, NULL));
  kt_dfree(be, buf);
}
