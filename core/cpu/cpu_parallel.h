/* Helpers the CPU kernels share: thread counts, work splitting, row
 * reductions and a vectorisable exp. */
#ifndef GIANT_CPU_PARALLEL_H
#define GIANT_CPU_PARALLEL_H

#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/cpu/cpu_isa.h"
#include "core/backend_impl.h"

/* Element-wise loops below this size run on one thread: waking the pool
 * costs more than the work. */
#define GT_CPU_PAR_MIN 16384

/* OpenBLAS (OpenMP build) sizes its thread team from the calling thread's
 * OpenMP settings, which a thread other than the backend's creator may not
 * share. Align them before any kernel, and return the count for our own
 * parallel regions. */
static inline int gt_cpu_threads(gt_backend *be) {
  int n = be->num_threads > 0 ? be->num_threads : 1;
  if (!omp_in_parallel() && omp_get_max_threads() != n) omp_set_num_threads(n);
  return n;
}

/* This thread's share [*lo, *hi) of n items, cut at multiples of `align` so
 * each share is whole vectors. Shares depend only on n and the team size. */
static inline void gt_cpu_share(int64_t n, int64_t align, int64_t *lo, int64_t *hi) {
  int64_t nth = omp_get_num_threads(), tid = omp_get_thread_num();
  int64_t per = (n + nth - 1) / nth;
  per = (per + align - 1) / align * align;
  *lo = tid * per < n ? tid * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

/* Reductions over one row (cpu_reduce.c). Each runs as a single-thread
 * vector loop whose order is fixed at compile time: the same bits on every
 * call. They are out of line because GCC spills omp simd reductions to the
 * stack on every iteration when they are inlined into parallel regions. */
float gt_cpu_sum(const float *x, int64_t n);
float gt_cpu_max(const float *x, int64_t n); /* n >= 1 */
float gt_cpu_dot(const float *x, const float *y, int64_t n);
/* sum (x - c)^2 */
float gt_cpu_sumsq_dev(const float *x, float c, int64_t n);
/* sum a * b * (x - c) */
float gt_cpu_dot_dev(const float *a, const float *b, const float *x, float c, int64_t n);
/* sum x^2 in double */
double gt_cpu_sumsq_f64(const float *x, int64_t n);

/* f rounded to bf16 bits as gt_f32_to_bf16 rounds it (round to nearest
 * even, a NaN stays a quiet NaN), branch-free so loops around it
 * vectorise. Every kernel that writes bf16 goes through this one, so their
 * bits agree. */
static inline uint16_t gt_cpu_bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* e^x, branch-free so loops around it vectorise (libm's expf does not
 * without -ffast-math). Cephes' polynomial on x - n*ln2, about 2 ulp.
 * Below -87.33 the result is 0; above 88 it saturates at e^88; NaN stays
 * NaN. The range callers need (softmax after max-subtraction, tanh) lies
 * well inside. */
static inline float gt_cpu_expf(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc < -87.33654f ? -87.33654f : xc;
  /* Adding 1.5*2^23 rounds to an integer n held in the low mantissa bits. */
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits;
  memcpy(&bits, &t, sizeof bits);
  bits = (bits - 0x4B400000u + 127u) << 23; /* 2^n */
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  float y = p * two_n;
  return x < -87.33654f ? 0.0f : y;
}

#endif
