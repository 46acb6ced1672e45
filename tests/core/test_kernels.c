/* The kernel suite's entry point and shared helpers.
 *
 *   test_kernels cpu    checks the CPU backend against references
 *   test_kernels cuda   checks the CUDA backend against references and the
 *                       CPU backend; skipped (77) where there is no GPU
 */
#include "tests/core/test_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gt_backend *kt_be;
gt_backend *kt_ref;

static uint64_t rng = 0x9E3779B97F4A7C15ull;

void kt_seed(uint64_t seed) { rng = seed * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t next(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1Dull;
}

float kt_uniform(void) { return (float)((next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
int kt_randint(int n) { return (int)((next() >> 33) % (uint64_t)n); }

void kt_fill(float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = kt_uniform() * scale;
}

void *kt_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}

float *kt_randn_alloc(size_t n, float scale) {
  float *x = kt_xmalloc(n * sizeof *x);
  kt_fill(x, n, scale);
  return x;
}

double *kt_to_double(const float *x, size_t n) {
  double *d = kt_xmalloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

void *kt_dput(gt_backend *be, const void *host, size_t bytes) {
  void *d = NULL;
  KT_OK(gt_backend_alloc(be, bytes, &d));
  if (host)
    KT_OK(gt_backend_upload(be, d, host, bytes));
  else
    KT_OK(gt_backend_memset(be, d, 0, bytes, NULL));
  return d;
}

void kt_dget(gt_backend *be, void *host, const void *dev, size_t bytes) {
  KT_OK(gt_backend_download(be, host, dev, bytes));
}

void kt_dfree(gt_backend *be, void *dev) { gt_backend_free(be, dev); }

static double maxabs(const double *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
  return m;
}

void kt_check(const char *what, const float *got, const double *want, size_t n, double tol) {
  double floor = 0.1 * maxabs(want, n) + 1e-6;
  for (size_t i = 0; i < n; i++) {
    if (isnan(want[i])) continue;
    double err = fabs((double)got[i] - want[i]);
    if (!(err <= tol * (fabs(want[i]) + floor)))
      fail_msg("%s[%zu]: got %.9g, want %.9g (error %.3g, allowed %.3g)", what, i, (double)got[i], want[i], err,
               tol * (fabs(want[i]) + floor));
  }
}

void kt_check_f(const char *what, const float *got, const float *want, size_t n, double tol) {
  double *w = kt_to_double(want, n);
  kt_check(what, got, w, n, tol);
  free(w);
}

void kt_check_exact(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
      fail_msg("%s[%zu]: got %.9g, want exactly %.9g", what, i, (double)got[i], (double)want[i]);
}

void kt_check_backend(const char *what, const float *got, const float *ref, size_t n) {
  char name[128];
  snprintf(name, sizeof name, "%s (%s vs cpu)", what, gt_backend_name(kt_be));
  kt_check_f(name, got, ref, n, 1e-5);
}

void kt_fd(kt_loss_fn f, void *ctx, double *x, size_t n, size_t every, double *grad) {
  for (size_t i = 0; i < n; i++) {
    if (i % every) {
      grad[i] = NAN;
      continue;
    }
    double x0 = x[i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
    x[i] = x0 + h;
    double up = f(ctx);
    x[i] = x0 - h;
    double down = f(ctx);
    x[i] = x0;
    grad[i] = (up - down) / (2 * h);
  }
}

double *kt_plus(const float *grad0, const double *fd, size_t n) {
  double *w = kt_xmalloc(n * sizeof *w);
  for (size_t i = 0; i < n; i++) w[i] = isnan(fd[i]) ? NAN : grad0[i] + fd[i];
  return w;
}

int main(int argc, char **argv) {
  const char *dev = argc > 1 ? argv[1] : "cpu";
  gt_backend_config cfg;
  if (gt_device_parse(dev, &cfg) != GT_OK) {
    fprintf(stderr, "test_kernels: %s\n", gt_last_error());
    return 2;
  }
  char why[256] = "";
  if (!gt_backend_available(cfg.kind, why, sizeof why)) {
    printf("skipping the kernel suite on %s: %s\n", dev, why);
    return 77;
  }
  if (cfg.device < 0) cfg.device = 0;
  gt_status st = gt_backend_create(&cfg, &kt_be);
  if (st == GT_EUNSUPPORTED && getenv("GT_CPU_KERNELS")) {
    /* A level this CPU lacks (the suite runs once per level of the build). */
    printf("skipping the kernel suite: %s\n", gt_last_error());
    return 77;
  }
  if (st != GT_OK) {
    fprintf(stderr, "test_kernels: cannot create backend %s: %s\n", dev, gt_last_error());
    return 1;
  }
  printf("kernel suite on %s, kernels %s\n", gt_backend_name(kt_be), gt_backend_kernels(kt_be));
  if (gt_backend_kind(kt_be) != GT_DEVICE_CPU) {
    gt_backend_config cpu = {.kind = GT_DEVICE_CPU};
    if (gt_backend_create(&cpu, &kt_ref) != GT_OK) {
      fprintf(stderr, "test_kernels: cannot create the cpu backend: %s\n", gt_last_error());
      return 1;
    }
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_shapes),
      cmocka_unit_test(test_gemm_batched),
      cmocka_unit_test(test_gemm_edges),
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_residual),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_attention_errors),
      cmocka_unit_test(test_attention_tiled),
      cmocka_unit_test(test_softmax_xent),
      cmocka_unit_test(test_softmax_xent_errors),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_sum_squares),
      cmocka_unit_test(test_scale),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_nn_errors),
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_measure_peak),
      cmocka_unit_test(test_embedding_slice),
      cmocka_unit_test(test_xent_slice),
      cmocka_unit_test(test_op_checks),
      cmocka_unit_test(test_adamw_bf16),
      cmocka_unit_test(test_gemm_ex),
      cmocka_unit_test(test_gemm_ex_f32_is_gemm),
      cmocka_unit_test(test_gemm_ex_errors),
      cmocka_unit_test(test_bias),
      cmocka_unit_test(test_causal_softmax),
      cmocka_unit_test(test_attention_bf16),
      cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_rope),
      cmocka_unit_test(test_swiglu),
      cmocka_unit_test(test_llama_errors),
      cmocka_unit_test(test_attention_gqa),
  };
  int failed = cmocka_run_group_tests_name(dev, tests, NULL, NULL);
  gt_backend_destroy(kt_ref);
  gt_backend_destroy(kt_be);
  return failed ? 1 : 0;
}
