/* Embedding and cross-entropy over a slice [v0, v0 + V) of the vocabulary.
 *
 * Whoever holds a slice sees only its columns of each row of logits, so it
 * reduces them to a (max, sum of exponentials) pair; the pairs of all
 * slices merge exactly as in online softmax: M = max m_r,
 * S = sum s_r * exp(m_r - M). These kernels do not know who holds the
 * other slices; the layer gathers the pairs (core/layers/lm_head.c). */
#include <math.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

gt_status GT_CPU_KERNEL(embedding_slice_forward)(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                                 int v0, int V, const float *wpe, int B, int T, int C) {
  int nt = gt_cpu_threads(be);
  int64_t N = (int64_t)B * T;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    float *o = out + i * C;
    int64_t tok = (int64_t)tokens[i] - v0;
    const float *w = tok >= 0 && tok < V ? wte + tok * C : NULL;
    const float *p = wpe ? wpe + (i % T) * C : NULL;
    for (int c = 0; c < C; c++) o[c] = (w ? w[c] : 0.0f) + (p ? p[c] : 0.0f);
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(embedding_slice_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                                  const int32_t *tokens, int v0, int V, int B, int T, int C) {
  int nt = gt_cpu_threads(be);
  /* Channels split across threads: no two threads touch one element, and
   * every element sums its tokens in order, so the result is deterministic. */
#pragma omp parallel num_threads(nt)
  {
    int64_t lo, hi;
    gt_cpu_share(C, 16, &lo, &hi);
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
      int64_t tok = (int64_t)tokens[i] - v0;
      const float *d = dout + i * C;
      if (tok >= 0 && tok < V) {
        float *w = dwte + tok * C;
        for (int64_t c = lo; c < hi; c++) w[c] += d[c];
      }
      if (dwpe) {
        float *p = dwpe + (i % T) * C;
        for (int64_t c = lo; c < hi; c++) p[c] += d[c];
      }
    }
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(xent_slice_stats)(gt_backend *be, float *stats, float *tlogit, const float *logits,
                                          const int32_t *targets, int v0, int N, int V) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < N; i++) {
    const float *x = logits + (int64_t)i * V;
    float m = -INFINITY;
    for (int j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
    float s = 0.0f;
    for (int j = 0; j < V; j++) s += gt_cpu_expf(x[j] - m);
    stats[i] = m;
    stats[N + i] = s;
    int64_t t = (int64_t)targets[i] - v0;
    tlogit[i] = targets[i] >= 0 && t >= 0 && t < V ? x[t] : 0.0f;
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(xent_slice_finish)(gt_backend *be, float *losses, float *probs, const float *logits,
                                           const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                           int vocab_total, int N, int V) {
  for (int i = 0; i < N; i++)
    if (targets[i] >= vocab_total)
      return gt_errorf(GT_ERANGE, "target id %d at row %d is >= the vocabulary %d", targets[i], i, vocab_total);
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < N; i++) {
    float M = -INFINITY;
    for (int r = 0; r < P; r++) {
      float m = stats_all[(int64_t)r * 2 * N + i];
      M = m > M ? m : M;
    }
    double S = 0;
    for (int r = 0; r < P; r++)
      S += (double)stats_all[(int64_t)r * 2 * N + N + i] * exp((double)stats_all[(int64_t)r * 2 * N + i] - M);
    float inv = (float)(1.0 / S);
    const float *x = logits + (int64_t)i * V;
    float *p = probs + (int64_t)i * V;
    for (int j = 0; j < V; j++) p[j] = gt_cpu_expf(x[j] - M) * inv;
    losses[i] = targets[i] < 0 ? 0.0f : (float)(log(S) + M - tlogit[i]);
  }
  return GT_OK;
}

gt_status GT_CPU_KERNEL(softmax_xent_slice_backward)(gt_backend *be, float *dlogits, const float *probs,
                                                     const int32_t *targets, int v0, float dloss, int N, int V) {
  int nt = gt_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int i = 0; i < N; i++) {
    const float *p = probs + (int64_t)i * V;
    float *d = dlogits + (int64_t)i * V;
    if (targets[i] < 0) {
      for (int j = 0; j < V; j++) d[j] = 0.0f;
      continue;
    }
    for (int j = 0; j < V; j++) d[j] = p[j] * dloss;
    int64_t t = (int64_t)targets[i] - v0;
    if (t >= 0 && t < V) d[t] -= dloss;
  }
  return GT_OK;
}
