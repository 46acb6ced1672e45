/* Tensor descriptors and views, dtypes, and the status messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/gt_test.h"
#include "core/tensor.h"

static void test_views_share_memory_and_check_bounds(void **state) {
  (void)state;
  float data[2 * 3 * 4];
  for (int i = 0; i < 24; i++) data[i] = (float)i;
  gt_tensor t, v, s;
  OK(gt_tensor_init(&t, NULL, data, GT_F32, 3, (int64_t[]){2, 3, 4}));
  assert_int_equal(gt_tensor_numel(&t), 24);
  assert_int_equal(gt_tensor_nbytes(&t), 96);
  assert_true(gt_tensor_is_contiguous(&t));
  assert_int_equal(t.stride[0], 12);
  OK(gt_tensor_reshape(&t, 2, (int64_t[]){6, 4}, &v));
  assert_ptr_equal(v.data, data);
  assert_int_equal(v.stride[0], 4);
  assert_int_equal(gt_tensor_reshape(&t, 2, (int64_t[]){5, 5}, &v), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "24"));
  /* A slice along the middle dimension: element [1, 2, 3] of t is 23. */
  OK(gt_tensor_slice(&t, 1, 1, 2, &s));
  assert_int_equal(s.shape[1], 2);
  assert_false(gt_tensor_is_contiguous(&s));
  float *base = s.data;
  assert_true(base[1 * s.stride[0] + 1 * s.stride[1] + 3] == 23.0f);
  assert_int_equal(gt_tensor_reshape(&s, 1, (int64_t[]){16}, &v), GT_EINVAL);
  assert_int_equal(gt_tensor_slice(&t, 2, 3, 2, &s), GT_ERANGE);
  assert_int_equal(gt_tensor_slice(&t, 3, 0, 1, &s), GT_EINVAL);
  assert_int_equal(gt_tensor_init(&t, NULL, data, GT_F32, 5, (int64_t[]){1, 1, 1, 1, 1}), GT_EINVAL);
  assert_int_equal(gt_tensor_init(&t, NULL, data, GT_F32, 1, (int64_t[]){-1}), GT_EINVAL);
  char buf[64];
  OK(gt_tensor_init(&t, NULL, data, GT_BF16, 2, (int64_t[]){8, 3}));
  assert_string_equal(gt_tensor_describe(&t, buf, sizeof buf), "bf16[8, 3]");
  assert_int_equal(gt_tensor_nbytes(&t), 48);
}

static void test_status_messages_and_context(void **state) {
  (void)state;
  assert_int_equal(gt_errorf(GT_ENOTFOUND, "file %s is missing", "x.tok"), GT_ENOTFOUND);
  assert_string_equal(gt_last_error(), "file x.tok is missing");
  assert_int_equal(gt_error_context(GT_ENOTFOUND, "loading %s", "data"), GT_ENOTFOUND);
  assert_string_equal(gt_last_error(), "loading data: file x.tok is missing");
  assert_string_equal(gt_status_name(GT_ETIMEDOUT), "GT_ETIMEDOUT");
  assert_string_equal(gt_dtype_name(GT_I32), "i32");
  assert_int_equal(gt_dtype_size(GT_BF16), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_views_share_memory_and_check_bounds),
      cmocka_unit_test(test_status_messages_and_context),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
