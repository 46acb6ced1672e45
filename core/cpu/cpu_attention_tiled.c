/* Causal multi-head self-attention on the CPU in tiles (FlashAttention-2's
 * order of work), in memory that grows with T, not T^2.
 *
 * Forward takes the queries in blocks of QB rows and, for each, the keys up
 * to the diagonal in blocks of KB: S = scale Q K^T for the tile, then an
 * online softmax (a running row max m and sum l; when the max grows, what
 * is already summed into the output is rescaled by e^(m_old - m_new)), and
 * O += P V. At the end O /= l, and only lse = m + log l is kept for
 * backward: B*NH*T floats instead of the B*NH*T*T probabilities of the
 * full kernels (cpu_attention.c).
 *
 * Backward recomputes each tile's probabilities from q, k and lse,
 * P = e^(S - lse), with D = rowsum(dO * O) taken first for the block's rows:
 * dV += P^T dO, dP = dO V^T, dS = P (dP - D) scale, dQ += dS K,
 * dK += dS^T Q. One tile's products are five single-threaded sgemm calls.
 *
 * Grouped-query attention is the same walk with fewer key/value heads:
 * query head h reads key and value head h / (NH / NKV). Its q, k and v
 * are separate tensors; multi-head attention is the case NKV = NH, with
 * q, k and v side by side in rows of 3C.
 *
 * Threads: forward, each takes whole (batch, head) pairs, which own their
 * rows of out; backward, whole (batch, key/value head) pairs, which own
 * the columns of dqkv of the group's query heads and of their key and
 * value head, the group's query heads added in order. With fewer pairs
 * than threads the query blocks of one (batch, query head) pair are spread
 * instead; in backward each thread then sums dK and dV into a private
 * (T, hs) pair, added up in thread order after, so the result depends only
 * on the thread count.
 *
 * Memory beyond the operands: per thread two tiles of QB x KB, a few rows
 * of QB, and in the spread case the private (T, hs) pair; allocated per
 * call.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/cpu/cpu_internal.h"
#include "core/cpu/cpu_parallel.h"

/* Tile sizes, measured at hs = 64 on AVX2 (bench/attention.c): per-tile
 * sgemm calls pay for packing their operands, which larger tiles spread
 * over more work, so query blocks of QB = 256 rows meet key blocks of
 * KB = 256 (two 256 KiB tiles in backward). Where a tile crosses the
 * diagonal it runs in bands of DB rows, each against only the keys it
 * sees, so the masked triangle costs DB/2 wasted columns a row, not QB/2. */
enum { QB = 256, KB = 256, DB = 64 };

/* Where q, k and v lie (or their gradients): q's rows ldq floats apart,
 * k's and v's ldkv; a batch is T rows. */
typedef struct qkv_io {
  const float *q, *k, *v;
  int ldq, ldkv;
} qkv_io;

/* One query head and its key and value head. C is out's row width (NH
 * heads of hs). */
typedef struct head_view {
  const float *q, *k, *v; /* q's rows ldq apart, k's and v's ldkv */
  int T, hs, C, ldq, ldkv;
  float scale;
} head_view;

static head_view view(const qkv_io *io, int b, int h, int T, int C, int NH, int NKV) {
  int hs = C / NH, kvh = h / (NH / NKV);
  int64_t kv = (int64_t)b * T * io->ldkv + kvh * hs;
  return (head_view){io->q + (int64_t)b * T * io->ldq + h * hs,
                     io->k + kv,
                     io->v + kv,
                     T,
                     hs,
                     C,
                     io->ldq,
                     io->ldkv,
                     1.0f / sqrtf((float)hs)};
}

static float *scratch_alloc(size_t floats) { return aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64); }

/* Keys of the tile [c0, c0 + cols) that row t sees: 0 when the tile lies
 * beyond it. */
static int visible(int t, int c0, int cols) {
  int n = t + 1 - c0;
  return n < 0 ? 0 : n > cols ? cols : n;
}

/* The tile of rows [r0, r0 + rows) and keys [c0, c0 + cols) calls f once,
 * or, where it crosses the diagonal, once per band of DB rows with the
 * keys that band sees, so masked scores are mostly not computed. */
#define EACH_BAND(r0, rows, c0, cols, f)                               \
  do {                                                                 \
    if ((c0) + (cols) <= (r0) + 1) {                                   \
      f(r0, rows, c0, cols);                                           \
      break;                                                           \
    }                                                                  \
    for (int b0_ = (r0); b0_ < (r0) + (rows); b0_ += DB) {             \
      int br_ = (r0) + (rows)-b0_ < DB ? (r0) + (rows)-b0_ : DB;       \
      int bc_ = b0_ + br_ - (c0) < (cols) ? b0_ + br_ - (c0) : (cols); \
      if (bc_ > 0) f(b0_, br_, c0, bc_);                               \
    }                                                                  \
  } while (0)

/* One tile of the forward: scores, the online softmax of rows [t0, t0 +
 * rows) (m, l indexed from t0), and y += P v. */
static void forward_tile(const head_view *hv, float *y, int t0, int rows, int c0, int cols, float *s, float *m,
                         float *l) {
  int hs = hv->hs, C = hv->C, ldq = hv->ldq, ldkv = hv->ldkv;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, hv->scale, hv->q + (int64_t)t0 * ldq, ldq,
              hv->k + (int64_t)c0 * ldkv, ldkv, 0.0f, s, KB);
  for (int i = 0; i < rows; i++) {
    float *sr = s + (int64_t)i * KB;
    int n = visible(t0 + i, c0, cols);
    if (n == 0) {
      for (int j = 0; j < cols; j++) sr[j] = 0.0f;
      continue;
    }
    float mx = gt_cpu_max(sr, n);
    mx = mx > m[i] ? mx : m[i];
    for (int j = 0; j < n; j++) sr[j] = gt_cpu_expf(sr[j] - mx);
    for (int j = n; j < cols; j++) sr[j] = 0.0f;
    float alpha = gt_cpu_expf(m[i] - mx); /* 0 on the first tile: m = -inf */
    l[i] = l[i] * alpha + gt_cpu_sum(sr, n);
    m[i] = mx;
    if (alpha != 1.0f) {
      float *yr = y + (int64_t)(t0 + i) * C;
      for (int d = 0; d < hs; d++) yr[d] *= alpha;
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, s, KB, hv->v + (int64_t)c0 * ldkv, ldkv,
              1.0f, y + (int64_t)t0 * C, C);
}

/* Query rows [r0, r1) of one head: y (rows C apart) and lse. s is QB x KB. */
static void forward_block(const head_view *hv, float *y, float *lse, int r0, int r1, float *s, float *m, float *l) {
  int rows = r1 - r0, hs = hv->hs, C = hv->C;
  for (int i = 0; i < rows; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    float *yr = y + (int64_t)(r0 + i) * C;
    for (int d = 0; d < hs; d++) yr[d] = 0.0f;
  }
  for (int c0 = 0; c0 < r1; c0 += KB) {
    int cols = r1 - c0 < KB ? r1 - c0 : KB;
#define FWD(t0, n, k0, nk) forward_tile(hv, y, t0, n, k0, nk, s, m + ((t0)-r0), l + ((t0)-r0))
    EACH_BAND(r0, rows, c0, cols, FWD);
#undef FWD
  }
  for (int i = 0; i < rows; i++) {
    float *yr = y + (int64_t)(r0 + i) * C, inv = 1.0f / l[i];
    for (int d = 0; d < hs; d++) yr[d] *= inv;
    lse[r0 + i] = m[i] + logf(l[i]);
  }
}

/* Floats of one thread's forward scratch: the score tile, m and l. */
static size_t forward_scratch(void) { return (size_t)QB * KB + 2 * QB; }

static gt_status tiled_forward(gt_backend *be, float *out, float *lse, const qkv_io *io, int B, int T, int C, int NH,
                               int NKV) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int nt = gt_cpu_threads(be), BH = B * NH, nb = (T + QB - 1) / QB;
  size_t per = forward_scratch();
  float *scratch = scratch_alloc((size_t)nt * per);
  if (!scratch) return gt_errorf(GT_ENOMEM, "cpu: attention_tiled_forward: out of memory for %d threads' tiles", nt);
  if (BH >= nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bh = 0; bh < BH; bh++) {
      float *s = scratch + (size_t)omp_get_thread_num() * per;
      head_view hv = view(io, bh / NH, bh % NH, T, C, NH, NKV);
      float *y = out + (int64_t)(bh / NH) * T * C + (bh % NH) * hv.hs;
      for (int r0 = 0; r0 < T; r0 += QB)
        forward_block(&hv, y, lse + (int64_t)bh * T, r0, r0 + QB < T ? r0 + QB : T, s, s + QB * KB, s + QB * KB + QB);
    }
  } else {
    /* Few pairs: every thread takes blocks of each pair in turn, the
     * longest (last) rows first so the causal triangle's work evens out. */
    for (int bh = 0; bh < BH; bh++) {
      head_view hv = view(io, bh / NH, bh % NH, T, C, NH, NKV);
      float *y = out + (int64_t)(bh / NH) * T * C + (bh % NH) * hv.hs;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
      for (int ib = 0; ib < nb; ib++) {
        float *s = scratch + (size_t)omp_get_thread_num() * per;
        int r0 = (nb - 1 - ib) * QB;
        forward_block(&hv, y, lse + (int64_t)bh * T, r0, r0 + QB < T ? r0 + QB : T, s, s + QB * KB, s + QB * KB + QB);
      }
    }
  }
  free(scratch);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(attention_tiled_forward)(gt_backend *be, float *out, float *lse, const float *qkv, int B, int T,
                                                 int C, int NH) {
  qkv_io io = {qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C};
  return tiled_forward(be, out, lse, &io, B, T, C, NH, NH);
}

gt_status GT_CPU_KERNEL(attention_gqa_forward)(gt_backend *be, float *out, float *lse, const float *q, const float *k,
                                               const float *v, int B, int T, int C, int NH, int NKV) {
  qkv_io io = {q, k, v, C, NKV * (C / NH)};
  return tiled_forward(be, out, lse, &io, B, T, C, NH, NKV);
}

/* Gradients of query rows [r0, r1) of one head. dq has rows ldq apart; dk
 * and dv rows ldkv apart (the inputs', or a thread's private pair). s and dp are
 * QB x KB, dd QB floats. */
typedef struct head_grads {
  const float *dy, *y, *lse; /* dy, y rows C apart; lse this head's T */
  float *dq, *dk, *dv;
  int ldq, ldkv;
} head_grads;

/* One tile of the backward: rows [t0, t0 + rows) (dd indexed from t0),
 * keys [c0, c0 + cols). */
static void backward_tile(const head_view *hv, const head_grads *g, int t0, int rows, int c0, int cols, float *s,
                          float *dp, const float *dd) {
  int hs = hv->hs, C = hv->C, ldq = hv->ldq, ldkv = hv->ldkv;
  const float *qr = hv->q + (int64_t)t0 * ldq, *dyr = g->dy + (int64_t)t0 * C;
  const float *kc = hv->k + (int64_t)c0 * ldkv, *vc = hv->v + (int64_t)c0 * ldkv;
  float *dkc = g->dk + (int64_t)c0 * g->ldkv, *dvc = g->dv + (int64_t)c0 * g->ldkv;
  /* P = e^(scale q k^T - lse), zero beyond the diagonal */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, hv->scale, qr, ldq, kc, ldkv, 0.0f, s, KB);
  for (int i = 0; i < rows; i++) {
    float *sr = s + (int64_t)i * KB, L = g->lse[t0 + i];
    int n = visible(t0 + i, c0, cols);
    for (int j = 0; j < n; j++) sr[j] = gt_cpu_expf(sr[j] - L);
    for (int j = n; j < cols; j++) sr[j] = 0.0f;
  }
  /* dv += P^T dy; dP = dy v^T */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, s, KB, dyr, C, 1.0f, dvc, g->ldkv);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, dyr, C, vc, ldkv, 0.0f, dp, KB);
  /* dS = P (dP - D) scale, in dp */
  for (int i = 0; i < rows; i++) {
    const float *sr = s + (int64_t)i * KB;
    float *dr = dp + (int64_t)i * KB, D = dd[i], sc = hv->scale;
    for (int j = 0; j < cols; j++) dr[j] = sr[j] * (dr[j] - D) * sc;
  }
  /* dq += dS k; dk += dS^T q */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, dp, KB, kc, ldkv, 1.0f,
              g->dq + (int64_t)t0 * g->ldq, g->ldq);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, dp, KB, qr, ldq, 1.0f, dkc, g->ldkv);
}

static void backward_block(const head_view *hv, const head_grads *g, int r0, int r1, float *s, float *dp, float *dd) {
  int rows = r1 - r0, hs = hv->hs, C = hv->C;
  const float *dyr = g->dy + (int64_t)r0 * C;
  for (int i = 0; i < rows; i++) dd[i] = gt_cpu_dot(dyr + (int64_t)i * C, g->y + (int64_t)(r0 + i) * C, hs);
  for (int c0 = 0; c0 < r1; c0 += KB) {
    int cols = r1 - c0 < KB ? r1 - c0 : KB;
#define BWD(t0, n, k0, nk) backward_tile(hv, g, t0, n, k0, nk, s, dp, dd + ((t0)-r0))
    EACH_BAND(r0, rows, c0, cols, BWD);
#undef BWD
  }
}

/* Floats of one thread's backward scratch: two tiles and D. */
static size_t backward_scratch(void) { return 2 * (size_t)QB * KB + QB; }

/* The gradients go to d (dq, dk, dv, at io's strides), accumulated. */
static gt_status tiled_backward(gt_backend *be, const qkv_io *d, const float *dout, const qkv_io *io, const float *out,
                                const float *lse, int B, int T, int C, int NH, int NKV) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int nt = gt_cpu_threads(be), BH = B * NH, BKV = B * NKV, nb = (T + QB - 1) / QB, hs = C / NH, group = NH / NKV;
  int ldq = io->ldq, ldkv = io->ldkv;
  float *dq0 = (float *)d->q, *dk0 = (float *)d->k, *dv0 = (float *)d->v;
  bool spread = BKV < nt;
  /* Spread: each thread's dk and dv follow its tiles. */
  size_t per = backward_scratch() + (spread ? 2 * (size_t)T * hs : 0);
  float *scratch = scratch_alloc((size_t)nt * per);
  if (!scratch) return gt_errorf(GT_ENOMEM, "cpu: attention_tiled_backward: out of memory for %d threads' tiles", nt);
  if (!spread) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bk = 0; bk < BKV; bk++) {
      int b = bk / NKV, kvh = bk % NKV;
      float *s = scratch + (size_t)omp_get_thread_num() * per;
      int64_t kv = (int64_t)b * T * ldkv + kvh * hs;
      for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        head_view hv = view(io, b, h, T, C, NH, NKV);
        head_grads g = {dout + (int64_t)b * T * C + h * hs,
                        out + (int64_t)b * T * C + h * hs,
                        lse + ((int64_t)b * NH + h) * T,
                        dq0 + (int64_t)b * T * ldq + h * hs,
                        dk0 + kv,
                        dv0 + kv,
                        ldq,
                        ldkv};
        for (int r0 = 0; r0 < T; r0 += QB)
          backward_block(&hv, &g, r0, r0 + QB < T ? r0 + QB : T, s, s + QB * KB, s + 2 * QB * KB);
      }
    }
  } else {
    for (int bh = 0; bh < BH; bh++) {
      int b = bh / NH, h = bh % NH;
      head_view hv = view(io, b, h, T, C, NH, NKV);
      int64_t kv = (int64_t)b * T * ldkv + (h / group) * hs;
#pragma omp parallel num_threads(nt)
      {
        int tid = omp_get_thread_num(), team = omp_get_num_threads();
        float *s = scratch + (size_t)tid * per, *pk = s + backward_scratch(), *pv = pk + (size_t)T * hs;
        for (size_t i = 0; i < (size_t)T * hs; i++) pk[i] = pv[i] = 0.0f;
        head_grads g = {dout + (int64_t)b * T * C + h * hs,
                        out + (int64_t)b * T * C + h * hs,
                        lse + (int64_t)bh * T,
                        dq0 + (int64_t)b * T * ldq + h * hs,
                        pk,
                        pv,
                        ldq,
                        hs};
        for (int ib = tid; ib < nb; ib += team) {
          int r0 = (nb - 1 - ib) * QB;
          backward_block(&hv, &g, r0, r0 + QB < T ? r0 + QB : T, s, s + QB * KB, s + 2 * QB * KB);
        }
#pragma omp barrier
        /* Each thread adds up a share of the rows, over the threads in order. */
        int64_t lo, hi;
        gt_cpu_share(T, 1, &lo, &hi);
        for (int u = 0; u < team; u++) {
          const float *uk = scratch + (size_t)u * per + backward_scratch(), *uv = uk + (size_t)T * hs;
          for (int64_t t = lo; t < hi; t++) {
            float *dk = dk0 + kv + t * ldkv, *dv = dv0 + kv + t * ldkv;
            for (int e = 0; e < hs; e++) {
              dk[e] += uk[t * hs + e];
              dv[e] += uv[t * hs + e];
            }
          }
        }
      }
    }
  }
  free(scratch);
  return GT_OK;
}

gt_status GT_CPU_KERNEL(attention_tiled_backward)(gt_backend *be, float *dqkv, const float *dout, const float *qkv,
                                                  const float *out, const float *lse, int B, int T, int C, int NH) {
  qkv_io io = {qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C}, d = {dqkv, dqkv + C, dqkv + 2 * C, 3 * C, 3 * C};
  return tiled_backward(be, &d, dout, &io, out, lse, B, T, C, NH, NH);
}

gt_status GT_CPU_KERNEL(attention_gqa_backward)(gt_backend *be, float *dq, float *dk, float *dv, const float *dout,
                                                const float *q, const float *k, const float *v, const float *out,
                                                const float *lse, int B, int T, int C, int NH, int NKV) {
  int KV = NKV * (C / NH);
  qkv_io io = {q, k, v, C, KV}, d = {dq, dk, dv, C, KV};
  return tiled_backward(be, &d, dout, &io, out, lse, B, T, C, NH, NKV);
}
