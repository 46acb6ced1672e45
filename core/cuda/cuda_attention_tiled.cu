/* Causal multi-head self-attention on CUDA in tiles (FlashAttention-2's
 * order of work), fp32, in memory that grows with T, not T^2.
 *
 * Forward: one block per (query tile, batch * head). The block holds its
 * queries and output accumulator in shared memory and walks the key tiles
 * up to the diagonal with an online softmax (running row max and sum; the
 * accumulator is rescaled when the max grows), then writes out and the
 * row's log-sum-exp, lse, which is all backward keeps of the softmax.
 *
 * Backward recomputes the probabilities P = e^(scale q k^T - lse) tile by
 * tile, with D = rowsum(dO * O) per query row. Two kernels, so that every
 * gradient has one writer and the sums run in a fixed order (no atomics):
 * one block per query tile accumulates dQ += dS K over the key tiles up to
 * the diagonal; one block per key tile accumulates dV += P^T dO and
 * dK += dS^T Q over the query tiles from the diagonal on, where
 * dS = P (dO V^T - D) scale.
 *
 * Grouped-query attention is the same with fewer key/value heads: query
 * head h reads key and value head h / (NH / NKV), and the block of a key
 * tile walks the query tiles of each of its group's heads in turn, so dK
 * and dV still have one writer. Multi-head attention is NKV = NH.
 *
 * Tiles are square, bt rows, the largest of 32, 16, ... whose shared
 * memory fits the 48 KiB every device grants without opting in; head sizes
 * past about 1500 do not fit even at bt = 1 and are refused.
 */
#include <math.h>

#include "core/cuda/cuda_internal.h"

#define TILED_THREADS 128
#define TILED_SHARED_FLOATS (48 * 1024 / 4)

/* The tile size for a kernel whose shared memory is `per_hs` tiles of
 * bt x hs, `per_sq` of bt x bt and `per_row` rows of bt; 0 when none fits. */
static int tile_rows(int hs, int per_hs, int per_sq, int per_row) {
  for (int bt = 32; bt >= 1; bt /= 2)
    if ((int64_t)per_hs * bt * hs + (int64_t)per_sq * bt * bt + (int64_t)per_row * bt <= TILED_SHARED_FLOATS) return bt;
  return 0;
}

static size_t tile_bytes(int bt, int hs, int per_hs, int per_sq, int per_row) {
  return sizeof(float) * ((size_t)per_hs * bt * hs + (size_t)per_sq * bt * bt + (size_t)per_row * bt);
}

/* Rows [r0, r0 + rows) of one head's q (or k, v, rows ld apart) into s (hs apart). */
__device__ void load_rows(float *s, const float *src, int r0, int rows, int hs, int ld) {
  for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) s[e] = src[(int64_t)(r0 + e / hs) * ld + e % hs];
}

/* Where q, k and v lie: q's rows ldq floats apart, k's and v's ldkv (one
 * (B,T,3C) tensor for multi-head attention, three for grouped-query). The
 * gradients lie at the same strides. */
struct qkv_io {
  const float *q, *k, *v;
  int ldq, ldkv;
};
struct qkv_grads {
  float *q, *k, *v;
};

/* A (batch, query head)'s q, and its key and value head's k and v. */
struct head_ptrs {
  const float *q, *k, *v;
};

__device__ head_ptrs head_of(const qkv_io &io, int b, int h, int T, int C, int NH, int NKV) {
  int hs = C / NH;
  int64_t kv = (int64_t)b * T * io.ldkv + (h / (NH / NKV)) * hs;
  return head_ptrs{io.q + (int64_t)b * T * io.ldq + h * hs, io.k + kv, io.v + kv};
}

__device__ float dot_rows(const float *a, const float *b, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; d++) s += a[d] * b[d];
  return s;
}

/* Shared memory: Q, K, V, O (bt x hs), S (bt x bt), m, l, alpha (bt). */
__global__ void attention_tiled_forward_kernel(float *out, float *lse, qkv_io io, int T, int C, int NH, int NKV, int bt,
                                               float scale) {
  extern __shared__ float sm[];
  int hs = C / NH, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  int r0 = blockIdx.x * bt, rows = min(bt, T - r0), r1 = r0 + rows;
  head_ptrs hp = head_of(io, b, h, T, C, NH, NKV);
  const float *q = hp.q, *k = hp.k, *v = hp.v;
  float *Qs = sm, *Ks = Qs + bt * hs, *Vs = Ks + bt * hs, *Os = Vs + bt * hs, *Ss = Os + bt * hs;
  float *ms = Ss + bt * bt, *ls = ms + bt, *al = ls + bt;
  load_rows(Qs, q, r0, rows, hs, io.ldq);
  for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) Os[e] = 0.0f;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    ms[i] = -INFINITY;
    ls[i] = 0.0f;
  }
  for (int c0 = 0; c0 < r1; c0 += bt) {
    int cols = min(bt, r1 - c0);
    __syncthreads(); /* the previous tile's K, V and S are done with */
    load_rows(Ks, k, c0, cols, hs, io.ldkv);
    load_rows(Vs, v, c0, cols, hs, io.ldkv);
    __syncthreads();
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
      int i = e / cols, j = e % cols;
      Ss[i * bt + j] = c0 + j > r0 + i ? -INFINITY : dot_rows(Qs + i * hs, Ks + j * hs, hs) * scale;
    }
    __syncthreads();
    /* Key 0 lies in the first tile, so m is finite from then on and a
     * row's fully masked tile gives p = 0, alpha = 1. */
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
      float *sr = Ss + i * bt, mx = ms[i], sum = 0.0f;
      for (int j = 0; j < cols; j++) mx = fmaxf(mx, sr[j]);
      for (int j = 0; j < cols; j++) {
        float p = expf(sr[j] - mx);
        sr[j] = p;
        sum += p;
      }
      float a = expf(ms[i] - mx);
      ls[i] = ls[i] * a + sum;
      ms[i] = mx;
      al[i] = a;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
      int i = e / hs, d = e % hs;
      float acc = Os[e] * al[i];
      for (int j = 0; j < cols; j++) acc += Ss[i * bt + j] * Vs[j * hs + d];
      Os[e] = acc;
    }
  }
  __syncthreads();
  float *y = out + (int64_t)b * T * C + h * hs;
  for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
    int i = e / hs;
    y[(int64_t)(r0 + i) * C + e % hs] = Os[e] / ls[i];
  }
  for (int i = threadIdx.x; i < rows; i += blockDim.x) lse[(int64_t)bh * T + r0 + i] = ms[i] + logf(ls[i]);
}

/* D = rowsum(dO * O) for rows [r0, r0 + rows), and their lse, into Ds and Ls. */
__device__ void row_terms(float *Ds, float *Ls, const float *dy, const float *y, const float *lse, int r0, int rows,
                          int hs, int C) {
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    int64_t o = (int64_t)(r0 + i) * C;
    Ds[i] = dot_rows(dy + o, y + o, hs);
    Ls[i] = lse[r0 + i];
  }
}

/* dS for (query i, key j) of a tile: the score gradient times the scale. */
__device__ float score_grad(const float *Qi, const float *dOi, const float *Kj, const float *Vj, float L, float D,
                            int hs, float scale, float *p_out) {
  float p = expf(dot_rows(Qi, Kj, hs) * scale - L);
  *p_out = p;
  return p * (dot_rows(dOi, Vj, hs) - D) * scale;
}

/* One block per query tile: dq. Shared memory: Q, dO, dQ, K, V (bt x hs),
 * dS (bt x bt), D, lse (bt). */
__global__ void attention_tiled_dq_kernel(qkv_grads d, const float *dout, qkv_io io, const float *out, const float *lse,
                                          int T, int C, int NH, int NKV, int bt, float scale) {
  extern __shared__ float sm[];
  int hs = C / NH, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  int r0 = blockIdx.x * bt, rows = min(bt, T - r0), r1 = r0 + rows;
  head_ptrs hp = head_of(io, b, h, T, C, NH, NKV);
  const float *q = hp.q, *k = hp.k, *v = hp.v;
  const float *dy = dout + (int64_t)b * T * C + h * hs, *y = out + (int64_t)b * T * C + h * hs;
  float *Qs = sm, *dOs = Qs + bt * hs, *dQs = dOs + bt * hs, *Ks = dQs + bt * hs, *Vs = Ks + bt * hs;
  float *dSs = Vs + bt * hs, *Ds = dSs + bt * bt, *Ls = Ds + bt;
  load_rows(Qs, q, r0, rows, hs, io.ldq);
  load_rows(dOs, dy, r0, rows, hs, C);
  for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) dQs[e] = 0.0f;
  row_terms(Ds, Ls, dy, y, lse + (int64_t)bh * T, r0, rows, hs, C);
  for (int c0 = 0; c0 < r1; c0 += bt) {
    int cols = min(bt, r1 - c0);
    __syncthreads();
    load_rows(Ks, k, c0, cols, hs, io.ldkv);
    load_rows(Vs, v, c0, cols, hs, io.ldkv);
    __syncthreads();
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
      int i = e / cols, j = e % cols;
      float p;
      dSs[i * bt + j] = c0 + j > r0 + i ? 0.0f
                                        : score_grad(Qs + i * hs, dOs + i * hs, Ks + j * hs, Vs + j * hs, Ls[i], Ds[i],
                                                     hs, scale, &p);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) {
      int i = e / hs, d = e % hs;
      float acc = dQs[e];
      for (int j = 0; j < cols; j++) acc += dSs[i * bt + j] * Ks[j * hs + d];
      dQs[e] = acc;
    }
  }
  __syncthreads();
  float *dq = d.q + (int64_t)b * T * io.ldq + h * hs;
  for (int e = threadIdx.x; e < rows * hs; e += blockDim.x) dq[(int64_t)(r0 + e / hs) * io.ldq + e % hs] += dQs[e];
}

/* One block per key tile of a (batch, key/value head): dk and dv, over the
 * query tiles from the diagonal on of each query head of the group in
 * turn. Shared memory: K, V, dK, dV, Q, dO (bt x hs), P, dS (bt x bt), D,
 * lse (bt). */
__global__ void attention_tiled_dkv_kernel(qkv_grads d, const float *dout, qkv_io io, const float *out,
                                           const float *lse, int T, int C, int NH, int NKV, int bt, float scale) {
  extern __shared__ float sm[];
  int hs = C / NH, group = NH / NKV, bk = blockIdx.y, b = bk / NKV, kvh = bk % NKV;
  int c0 = blockIdx.x * bt, cols = min(bt, T - c0);
  head_ptrs hp = head_of(io, b, kvh * group, T, C, NH, NKV);
  float *Ks = sm, *Vs = Ks + bt * hs, *dKs = Vs + bt * hs, *dVs = dKs + bt * hs, *Qs = dVs + bt * hs;
  float *dOs = Qs + bt * hs, *Ps = dOs + bt * hs, *dSs = Ps + bt * bt, *Ds = dSs + bt * bt, *Ls = Ds + bt;
  load_rows(Ks, hp.k, c0, cols, hs, io.ldkv);
  load_rows(Vs, hp.v, c0, cols, hs, io.ldkv);
  for (int e = threadIdx.x; e < cols * hs; e += blockDim.x) dKs[e] = dVs[e] = 0.0f;
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const float *q = io.q + (int64_t)b * T * io.ldq + h * hs;
    const float *dy = dout + (int64_t)b * T * C + h * hs, *y = out + (int64_t)b * T * C + h * hs;
    const float *lh = lse + ((int64_t)b * NH + h) * T;
    for (int r0 = c0; r0 < T; r0 += bt) {
      int rows = min(bt, T - r0);
      __syncthreads();
      load_rows(Qs, q, r0, rows, hs, io.ldq);
      load_rows(dOs, dy, r0, rows, hs, C);
      row_terms(Ds, Ls, dy, y, lh, r0, rows, hs, C);
      __syncthreads();
      for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        int i = e / cols, j = e % cols;
        float p = 0.0f, ds = 0.0f;
        if (c0 + j <= r0 + i)
          ds = score_grad(Qs + i * hs, dOs + i * hs, Ks + j * hs, Vs + j * hs, Ls[i], Ds[i], hs, scale, &p);
        Ps[i * bt + j] = p;
        dSs[i * bt + j] = ds;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < cols * hs; e += blockDim.x) {
        int j = e / hs, d = e % hs;
        float dv = dVs[e], dk = dKs[e];
        for (int i = 0; i < rows; i++) {
          dv += Ps[i * bt + j] * dOs[i * hs + d];
          dk += dSs[i * bt + j] * Qs[i * hs + d];
        }
        dVs[e] = dv;
        dKs[e] = dk;
      }
    }
  }
  __syncthreads();
  int64_t kv = (int64_t)b * T * io.ldkv + kvh * hs;
  float *dk = d.k + kv, *dv = d.v + kv;
  for (int e = threadIdx.x; e < cols * hs; e += blockDim.x) {
    int64_t o = (int64_t)(c0 + e / hs) * io.ldkv + e % hs;
    dk[o] += dKs[e];
    dv[o] += dVs[e];
  }
}

static gt_status tiled_check(int bt, int B, int NH, int hs, const char *op) {
  if (bt == 0)
    return gt_errorf(GT_EUNSUPPORTED,
                     "cuda: %s: head size %d does not fit a tile in shared memory; use full attention "
                     "(GT_ATTENTION_FULL) for heads this large",
                     op, hs);
  if ((int64_t)B * NH > 65535)
    return gt_errorf(GT_EUNSUPPORTED, "cuda: %s: B*NH = %lld exceeds the grid's 65535", op, (long long)B * NH);
  return GT_OK;
}

static gt_status tiled_forward(gt_backend *be, float *out, float *lse, qkv_io io, int B, int T, int C, int NH,
                               int NKV) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  int hs = C / NH, bt = tile_rows(hs, 4, 1, 3);
  GT_TRY(tiled_check(bt, B, NH, hs, "attention_tiled_forward"));
  dim3 grid((unsigned)((T + bt - 1) / bt), (unsigned)(B * NH));
  attention_tiled_forward_kernel<<<grid, TILED_THREADS, tile_bytes(bt, hs, 4, 1, 3), gt_cuda_stream(be)>>>(
      out, lse, io, T, C, NH, NKV, bt, 1.0f / sqrtf((float)hs));
  return gt_cuda_launched(be, "attention_tiled_forward");
}

static gt_status tiled_backward(gt_backend *be, qkv_grads d, const float *dout, qkv_io io, const float *out,
                                const float *lse, int B, int T, int C, int NH, int NKV) {
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  int hs = C / NH, bq = tile_rows(hs, 5, 1, 2), bk = tile_rows(hs, 6, 2, 2);
  GT_TRY(tiled_check(bk, B, NH, hs, "attention_tiled_backward"));
  float scale = 1.0f / sqrtf((float)hs);
  dim3 gq((unsigned)((T + bq - 1) / bq), (unsigned)(B * NH)), gk((unsigned)((T + bk - 1) / bk), (unsigned)(B * NKV));
  attention_tiled_dq_kernel<<<gq, TILED_THREADS, tile_bytes(bq, hs, 5, 1, 2), gt_cuda_stream(be)>>>(
      d, dout, io, out, lse, T, C, NH, NKV, bq, scale);
  GT_TRY(gt_cuda_launched(be, "attention_tiled_dq"));
  attention_tiled_dkv_kernel<<<gk, TILED_THREADS, tile_bytes(bk, hs, 6, 2, 2), gt_cuda_stream(be)>>>(
      d, dout, io, out, lse, T, C, NH, NKV, bk, scale);
  return gt_cuda_launched(be, "attention_tiled_dkv");
}

gt_status gt_cuda_attention_tiled_forward(gt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int C,
                                          int NH) {
  return tiled_forward(be, out, lse, qkv_io{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C}, B, T, C, NH, NH);
}

gt_status gt_cuda_attention_tiled_backward(gt_backend *be, float *dqkv, const float *dout, const float *qkv,
                                           const float *out, const float *lse, int B, int T, int C, int NH) {
  return tiled_backward(be, qkv_grads{dqkv, dqkv + C, dqkv + 2 * C}, dout,
                        qkv_io{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C}, out, lse, B, T, C, NH, NH);
}

gt_status gt_cuda_attention_gqa_forward(gt_backend *be, float *out, float *lse, const float *q, const float *k,
                                        const float *v, int B, int T, int C, int NH, int NKV) {
  return tiled_forward(be, out, lse, qkv_io{q, k, v, C, NKV * (C / NH)}, B, T, C, NH, NKV);
}

gt_status gt_cuda_attention_gqa_backward(gt_backend *be, float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, const float *k, const float *v, const float *out,
                                         const float *lse, int B, int T, int C, int NH, int NKV) {
  return tiled_backward(be, qkv_grads{dq, dk, dv}, dout, qkv_io{q, k, v, C, NKV * (C / NH)}, out, lse, B, T, C, NH,
                        NKV);
}
