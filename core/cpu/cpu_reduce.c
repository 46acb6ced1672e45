/* Row reductions shared by the kernels (declared in cpu_parallel.h). */
#include "core/cpu/cpu_parallel.h"

float gt_cpu_sum(const float *x, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += x[i];
  return s;
}

float gt_cpu_max(const float *x, int64_t n) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

float gt_cpu_dot(const float *x, const float *y, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}

float gt_cpu_sumsq_dev(const float *x, float c, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += (x[i] - c) * (x[i] - c);
  return s;
}

float gt_cpu_dot_dev(const float *a, const float *b, const float *x, float c, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i] * (x[i] - c);
  return s;
}

double gt_cpu_sumsq_f64(const float *x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
  return s;
}
