/* The kernel suite: every backend operation checked through the backend
 * interface, so one suite runs against any backend.
 *
 * Forwards are compared with plain double-precision references written
 * here; backwards with central finite differences of a scalar loss
 * L = sum(out * W) evaluated by those references. When the backend under
 * test is not the CPU, every result is also compared with the CPU backend's
 * on the same inputs.
 */
#ifndef GIANT_TEST_KERNELS_H
#define GIANT_TEST_KERNELS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "giant/backend.h"

extern gt_backend *kt_be;  /* the backend under test */
extern gt_backend *kt_ref; /* the CPU backend when kt_be is another, else NULL */

#define KT_OK(expr)                                                                            \
  do {                                                                                         \
    gt_status kt_s_ = (expr);                                                                  \
    if (kt_s_ != GT_OK) fail_msg("%s: %s: %s", #expr, gt_status_name(kt_s_), gt_last_error()); \
  } while (0)

/* Deterministic pseudo-random numbers. */
void kt_seed(uint64_t seed);
float kt_uniform(void); /* in [-1, 1) */
int kt_randint(int n);  /* in [0, n) */
void kt_fill(float *x, size_t n, float scale);
float *kt_randn_alloc(size_t n, float scale);   /* malloc'd, filled */
double *kt_to_double(const float *x, size_t n); /* malloc'd copy */
void *kt_xmalloc(size_t bytes);

/* Device memory: allocate and upload (zeros when host is NULL), download. */
void *kt_dput(gt_backend *be, const void *host, size_t bytes);
void kt_dget(gt_backend *be, void *host, const void *dev, size_t bytes);
void kt_dfree(gt_backend *be, void *dev);

/* |got - want| <= tol * (|want| + 0.1 * max|want| + 1e-6) for each element;
 * wants that are NaN are skipped (finite differences not taken there). */
void kt_check(const char *what, const float *got, const double *want, size_t n, double tol);
/* Same, against a float result. */
void kt_check_f(const char *what, const float *got, const float *want, size_t n, double tol);
/* Bit-for-bit equality. */
void kt_check_exact(const char *what, const float *got, const float *want, size_t n);
/* Against the reference backend's result: within 1e-5 of the tensor's scale. */
void kt_check_backend(const char *what, const float *got, const float *ref, size_t n);

/* Central differences of f with respect to x[i] for i % every == 0 (the rest
 * are set to NaN), written into grad. */
typedef double (*kt_loss_fn)(void *ctx);
void kt_fd(kt_loss_fn f, void *ctx, double *x, size_t n, size_t every, double *grad);
/* grad0 + fd as float-comparable doubles (gradients accumulate). */
double *kt_plus(const float *grad0, const double *fd, size_t n);

/* The tests, by file. */
void test_gemm_shapes(void **state);
void test_gemm_batched(void **state);
void test_gemm_edges(void **state);
void test_embedding(void **state);
void test_layernorm(void **state);
void test_linear(void **state);
void test_gelu(void **state);
void test_residual(void **state);
void test_attention(void **state);
void test_attention_errors(void **state);
void test_attention_tiled(void **state);
void test_softmax_xent(void **state);
void test_softmax_xent_errors(void **state);
void test_adamw(void **state);
void test_adamw_bf16(void **state);
void test_sgd(void **state);
void test_sum_squares(void **state);
void test_scale(void **state);
void test_bf16(void **state);
void test_nn_errors(void **state);
void test_determinism(void **state);
void test_measure_peak(void **state);
void test_embedding_slice(void **state);
void test_xent_slice(void **state);
void test_op_checks(void **state);
void test_gemm_ex(void **state);
void test_gemm_ex_f32_is_gemm(void **state);
void test_gemm_ex_errors(void **state);
void test_bias(void **state);
void test_causal_softmax(void **state);
void test_attention_bf16(void **state);
void test_rmsnorm(void **state);
void test_rope(void **state);
void test_swiglu(void **state);
void test_llama_errors(void **state);
void test_attention_gqa(void **state);

#endif
