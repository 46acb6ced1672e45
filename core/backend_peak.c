/* Peak matrix-product rate of a backend: the denominator of MFU.
 *
 * Each precision is timed the way training runs its products: fp32 with
 * gemm, mixed bf16 with gemm_ex on bf16 operands into an fp32 result (fp32
 * accumulation), so MFU compares a run against the rate its own kind of
 * product can reach. */
#include <stdlib.h>

#include "giant/backend.h"
#include "giant/log.h"
#include "giant/tensor.h"
#include "core/backend_engine.h"
#include "giant/engine/device.h"

#define PEAK_MAX_N 16384

/* One n x n x n product of the precision, c = a @ b. */
static gt_status run_gemm(gt_backend *be, gt_precision p, int n, const void *a, const void *b, float *c) {
  if (p == GT_PRECISION_FP32) {
    gt_gemm_args g = {.trans_a = GT_NO_TRANS,
                      .trans_b = GT_NO_TRANS,
                      .m = n,
                      .n = n,
                      .k = n,
                      .alpha = 1.0f,
                      .beta = 0.0f,
                      .a = a,
                      .lda = n,
                      .b = b,
                      .ldb = n,
                      .c = c,
                      .ldc = n,
                      .batch = 1};
    return gt_op_gemm(be, &g);
  }
  gt_gemm_ex_args g = {.trans_a = GT_NO_TRANS,
                       .trans_b = GT_NO_TRANS,
                       .m = n,
                       .n = n,
                       .k = n,
                       .alpha = 1.0f,
                       .beta = 0.0f,
                       .a = a,
                       .a_type = GT_BF16,
                       .lda = n,
                       .b = b,
                       .b_type = GT_BF16,
                       .ldb = n,
                       .c = c,
                       .c_type = GT_F32,
                       .ldc = n,
                       .batch = 1};
  return gt_op_gemm_ex(be, &g);
}

static gt_status time_gemms(gt_backend *be, gt_precision p, int n, double seconds, const void *a, const void *b,
                            float *c, double *best) {
  double flop = 2.0 * n * n * n;
  /* The first product pays for thread start-up, page faults and the
   * library's choice of kernel. */
  GT_TRY(run_gemm(be, p, n, a, b, c));
  GT_TRY(gt_stream_sync(be, NULL));
  *best = 0.0;
  double start = gt_now();
  for (int reps = 0; reps < 3 || gt_now() - start < seconds; reps++) {
    double t0 = gt_now();
    GT_TRY(run_gemm(be, p, n, a, b, c));
    GT_TRY(gt_stream_sync(be, NULL));
    double dt = gt_now() - t0;
    if (dt > 0 && flop / dt > *best) *best = flop / dt;
  }
  return GT_OK;
}

/* Small values in a pattern: no denormals, no overflow, and exact in bf16,
 * so both precisions multiply the same numbers. */
static float pattern(size_t i) { return (float)((int)(i % 17) - 8) * 0.0625f; }

gt_status gt_backend_measure_peak_ex(gt_backend *be, gt_precision p, int n, double seconds, double *flops) {
  if (!be) return gt_errorf(GT_EINVAL, "measure_peak: no backend");
  if (p != GT_PRECISION_FP32 && p != GT_PRECISION_BF16)
    return gt_errorf(GT_EINVAL, "measure_peak: unknown precision %d; use fp32 or bf16", (int)p);
  if (n < 1 || n > PEAK_MAX_N)
    return gt_errorf(GT_EINVAL, "measure_peak: matrix size n=%d must be in [1, %d]", n, PEAK_MAX_N);
  if (!(seconds >= 0.0)) return gt_errorf(GT_EINVAL, "measure_peak: seconds must be >= 0, got %g", seconds);
  if (p == GT_PRECISION_BF16 && !gt_backend_has_mixed_precision(be))
    return gt_errorf(GT_EUNSUPPORTED,
                     "measure_peak: backend %s has no gemm_ex, so it cannot run bf16 products; "
                     "measure fp32 instead or use a backend with mixed precision",
                     gt_backend_name(be));
  size_t count = (size_t)n * n;
  size_t elem = p == GT_PRECISION_BF16 ? sizeof(gt_bf16) : sizeof(float);
  size_t in_bytes = count * elem, c_bytes = count * sizeof(float);
  void *host = malloc(in_bytes);
  if (!host) return gt_errorf(GT_ENOMEM, "measure_peak: out of host memory for %zu bytes", in_bytes);
  for (size_t i = 0; i < count; i++) {
    if (p == GT_PRECISION_BF16)
      ((gt_bf16 *)host)[i] = gt_f32_to_bf16(pattern(i));
    else
      ((float *)host)[i] = pattern(i);
  }
  void *a = NULL, *b = NULL;
  float *c = NULL;
  double best = 0.0;
  gt_status s = gt_backend_alloc(be, in_bytes, &a);
  if (s == GT_OK) s = gt_backend_alloc(be, in_bytes, &b);
  if (s == GT_OK) s = gt_backend_alloc(be, c_bytes, (void **)&c);
  if (s == GT_OK) s = gt_backend_upload(be, a, host, in_bytes);
  if (s == GT_OK) s = gt_backend_upload(be, b, host, in_bytes);
  if (s == GT_OK) s = time_gemms(be, p, n, seconds, a, b, c, &best);
  gt_backend_free(be, c);
  gt_backend_free(be, b);
  gt_backend_free(be, a);
  free(host);
  if (s != GT_OK)
    return gt_error_context(s, "measuring the peak %s gemm rate of %s", gt_precision_name(p), gt_backend_name(be));
  gt_backend_set_peak_flops(be, best);
  if (flops) *flops = best;
  gt_info("%s: peak %s gemm %.1f GFLOP/s (n=%d%s)", gt_backend_name(be), gt_precision_name(p), best / 1e9, n,
          p == GT_PRECISION_BF16 ? ", bf16 operands, fp32 accumulation and result" : "");
  return GT_OK;
}

gt_status gt_backend_measure_peak(gt_backend *be, int n, double seconds, double *flops) {
  return gt_backend_measure_peak_ex(be, GT_PRECISION_FP32, n, seconds, flops);
}
