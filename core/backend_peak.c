/* Peak matrix-product rate of a backend: the denominator of MFU. */
#include <stdlib.h>

#include "giant/backend.h"
#include "giant/log.h"

#define PEAK_MAX_N 16384

static gt_status time_gemms(gt_backend *be, int n, double seconds, float *a, float *b, float *c,
                            double *best) {
  gt_gemm_args g = {.trans_a = GT_NO_TRANS, .trans_b = GT_NO_TRANS, .m = n, .n = n, .k = n,
                    .alpha = 1.0f, .beta = 0.0f, .a = a, .lda = n, .b = b, .ldb = n,
                    .c = c, .ldc = n, .batch = 1};
  double flop = 2.0 * n * n * n;
  /* The first product pays for thread start-up and page faults. */
  GT_TRY(be->ops->gemm(be, &g));
  GT_TRY(be->ops->stream_sync(be, be->compute));
  *best = 0.0;
  double start = gt_now();
  for (int reps = 0; reps < 3 || gt_now() - start < seconds; reps++) {
    double t0 = gt_now();
    GT_TRY(be->ops->gemm(be, &g));
    GT_TRY(be->ops->stream_sync(be, be->compute));
    double dt = gt_now() - t0;
    if (dt > 0 && flop / dt > *best) *best = flop / dt;
  }
  return GT_OK;
}

gt_status gt_backend_measure_peak(gt_backend *be, int n, double seconds, double *flops) {
  if (!be) return gt_errorf(GT_EINVAL, "measure_peak: no backend");
  if (n < 1 || n > PEAK_MAX_N)
    return gt_errorf(GT_EINVAL, "measure_peak: matrix size n=%d must be in [1, %d]", n, PEAK_MAX_N);
  if (!(seconds >= 0.0))
    return gt_errorf(GT_EINVAL, "measure_peak: seconds must be >= 0, got %g", seconds);
  size_t count = (size_t)n * n, bytes = count * sizeof(float);
  float *host = malloc(bytes);
  if (!host) return gt_errorf(GT_ENOMEM, "measure_peak: out of host memory for %zu bytes", bytes);
  /* Small values in a pattern: no denormals, no overflow. */
  for (size_t i = 0; i < count; i++) host[i] = (float)((int)(i % 17) - 8) * 0.0625f;
  float *a = NULL, *b = NULL, *c = NULL;
  double best = 0.0;
  gt_status s = be->ops->alloc(be, bytes, (void **)&a);
  if (s == GT_OK) s = be->ops->alloc(be, bytes, (void **)&b);
  if (s == GT_OK) s = be->ops->alloc(be, bytes, (void **)&c);
  if (s == GT_OK) s = gt_backend_upload(be, a, host, bytes);
  if (s == GT_OK) s = gt_backend_upload(be, b, host, bytes);
  if (s == GT_OK) s = time_gemms(be, n, seconds, a, b, c, &best);
  if (c) be->ops->free(be, c);
  if (b) be->ops->free(be, b);
  if (a) be->ops->free(be, a);
  free(host);
  if (s != GT_OK) return gt_error_context(s, "measuring the peak gemm rate of %s", be->name);
  be->peak_flops = best;
  if (flops) *flops = best;
  gt_info("%s: peak fp32 gemm %.1f GFLOP/s (n=%d)", be->name, best / 1e9, n);
  return GT_OK;
}
