/* The kernels of a backend, as callers see them: each gt_op_* checks its
 * arguments once (sizes, the pointers that must not be NULL, the op's own
 * rules) and then runs the backend's implementation, which may take them as
 * given (backend_impl.h). The checks are comparisons on scalars: nothing
 * here allocates, synchronises, or reads device memory. */
#include <stdarg.h>
#include <stdio.h>

#include "core/backend_impl.h"
#include "core/backend_engine.h"

/* A refusal names the backend and the operation: "cpu: gelu_forward: ...". */
static gt_status refuse(const gt_backend *be, gt_status code, const char *op, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return gt_errorf(code, "%s: %s: %s", be->name, op, why);
}

/* The backend's entry for op, or a refusal. */
#define NEED_OP(be, op)                                                                                     \
  do {                                                                                                      \
    if (!(be)) return gt_errorf(GT_EINVAL, #op ": the backend is NULL; create one with gt_backend_create"); \
    if (!(be)->ops->kernels.op)                                                                             \
      return refuse(be, GT_EUNSUPPORTED, #op, "backend %s does not implement this operation", (be)->name);  \
  } while (0)

#define NEED(be, op, cond, ...)                                 \
  do {                                                          \
    if (!(cond)) return refuse(be, GT_EINVAL, op, __VA_ARGS__); \
  } while (0)

/* Pointers that a kernel with work to do dereferences. */
#define NEED_PTRS(be, op, work, ptrs_ok, names) NEED(be, op, !(work) || (ptrs_ok), "%s must not be NULL", names)

/* Each kernel of the list has the signature of its public function, so the
 * table's entries, what the backends define and what callers pass cannot
 * drift apart. */
#define SAME_AS_PUBLIC(name, params)                                            \
  _Static_assert(_Generic(&gt_op_##name, gt_status(*) params : 1, default : 0), \
                 "backend_kernels.h: " #name " differs from gt_op_" #name);
GT_BACKEND_KERNELS(SAME_AS_PUBLIC)
#undef SAME_AS_PUBLIC

/* ---- matrix products ---- */

gt_status gt_op_gemm(gt_backend *be, const gt_gemm_args *g) {
  NEED_OP(be, gemm);
  NEED(be, "gemm", g, "the arguments must not be NULL");
  GT_TRY(gt_gemm_check(be, g));
  return be->ops->kernels.gemm(be, g);
}

gt_status gt_op_gemm_ex(gt_backend *be, const gt_gemm_ex_args *g) {
  NEED_OP(be, gemm_ex);
  NEED(be, "gemm_ex", g, "the arguments must not be NULL");
  GT_TRY(gt_gemm_ex_check(be, g));
  return be->ops->kernels.gemm_ex(be, g);
}

gt_status gt_op_bias_add(gt_backend *be, float *out, const float *bias, int N, int OC) {
  NEED_OP(be, bias_add);
  NEED(be, "bias_add", N >= 0 && OC >= 0, "need N, OC >= 0, got %d and %d", N, OC);
  NEED_PTRS(be, "bias_add", N && OC, out && bias, "out and bias");
  return be->ops->kernels.bias_add(be, out, bias, N, OC);
}

gt_status gt_op_bias_backward(gt_backend *be, float *dbias, const float *dout, int N, int OC) {
  NEED_OP(be, bias_backward);
  NEED(be, "bias_backward", N >= 0 && OC >= 0, "need N, OC >= 0, got %d and %d", N, OC);
  NEED_PTRS(be, "bias_backward", OC, dbias && (dout || !N), "dbias and dout");
  return be->ops->kernels.bias_backward(be, dbias, dout, N, OC);
}

/* ---- transformer layers ---- */

#define NEED_DIMS3(be, op, a, b, c)                                                                                  \
  NEED(be, op, (a) >= 0 && (b) >= 0 && (c) >= 0, "sizes must not be negative, got " #a "=%d " #b "=%d " #c "=%d", a, \
       b, c)

gt_status gt_op_embedding_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C) {
  NEED_OP(be, embedding_forward);
  NEED_DIMS3(be, "embedding_forward", B, T, C);
  NEED_PTRS(be, "embedding_forward", B && T, out && tokens && (wte || !C), "out, tokens and wte");
  return be->ops->kernels.embedding_forward(be, out, tokens, wte, wpe, B, T, C);
}

gt_status gt_op_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                   int B, int T, int C) {
  NEED_OP(be, embedding_backward);
  NEED_DIMS3(be, "embedding_backward", B, T, C);
  NEED_PTRS(be, "embedding_backward", B && T && C, dwte && dout && tokens, "dwte, dout and tokens");
  return be->ops->kernels.embedding_backward(be, dwte, dwpe, dout, tokens, B, T, C);
}

gt_status gt_op_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
  NEED_OP(be, layernorm_forward);
  NEED(be, "layernorm_forward", N >= 0 && C >= 0, "sizes must not be negative, got N=%d C=%d", N, C);
  NEED_PTRS(be, "layernorm_forward", N && C, out && inp && w && b, "out, inp, w and b");
  return be->ops->kernels.layernorm_forward(be, out, mean, rstd, inp, w, b, N, C);
}

gt_status gt_op_layernorm_backward(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
  NEED_OP(be, layernorm_backward);
  NEED(be, "layernorm_backward", N >= 0 && C >= 0, "sizes must not be negative, got N=%d C=%d", N, C);
  NEED_PTRS(be, "layernorm_backward", N && C, dinp && dw && db && dout && inp && w && mean && rstd,
            "dinp, dw, db, dout, inp, w, mean and rstd");
  return be->ops->kernels.layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

gt_status gt_op_linear_forward(gt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,
                               int C, int OC) {
  NEED_OP(be, linear_forward);
  NEED_DIMS3(be, "linear_forward", N, C, OC);
  NEED_PTRS(be, "linear_forward", N && OC, out && ((inp && w) || !C), "out, inp and w");
  return be->ops->kernels.linear_forward(be, out, inp, w, bias, N, C, OC);
}

gt_status gt_op_linear_backward(gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
  NEED_OP(be, linear_backward);
  NEED_DIMS3(be, "linear_backward", N, C, OC);
  NEED_PTRS(be, "linear_backward", N && OC, dout && ((dw && inp && w) || !C), "dw, dout, inp and w");
  return be->ops->kernels.linear_backward(be, dinp, dw, dbias, dout, inp, w, N, C, OC);
}

gt_status gt_op_gelu_forward(gt_backend *be, float *out, const float *inp, size_t n) {
  NEED_OP(be, gelu_forward);
  NEED_PTRS(be, "gelu_forward", n, out && inp, "out and inp");
  return be->ops->kernels.gelu_forward(be, out, inp, n);
}

gt_status gt_op_gelu_backward(gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
  NEED_OP(be, gelu_backward);
  NEED_PTRS(be, "gelu_backward", n, dinp && inp && dout, "dinp, inp and dout");
  return be->ops->kernels.gelu_backward(be, dinp, inp, dout, n);
}

gt_status gt_op_residual_forward(gt_backend *be, float *out, const float *a, const float *b, size_t n) {
  NEED_OP(be, residual_forward);
  NEED_PTRS(be, "residual_forward", n, out && a && b, "out, a and b");
  return be->ops->kernels.residual_forward(be, out, a, b, n);
}

gt_status gt_op_residual_backward(gt_backend *be, float *da, float *db, const float *dout, size_t n) {
  NEED_OP(be, residual_backward);
  NEED_PTRS(be, "residual_backward", n && (da || db), dout, "dout");
  return be->ops->kernels.residual_backward(be, da, db, dout, n);
}

/* ---- the layers of the Llama family ---- */

gt_status gt_op_rmsnorm_forward(gt_backend *be, float *out, float *rstd, const float *inp, const float *w, float eps,
                                int N, int C) {
  NEED_OP(be, rmsnorm_forward);
  NEED(be, "rmsnorm_forward", N >= 0 && C >= 0, "sizes must not be negative, got N=%d C=%d", N, C);
  NEED(be, "rmsnorm_forward", eps > 0.0f, "eps must be positive, got %g", (double)eps);
  NEED_PTRS(be, "rmsnorm_forward", N && C, out && rstd && inp && w, "out, rstd, inp and w");
  return be->ops->kernels.rmsnorm_forward(be, out, rstd, inp, w, eps, N, C);
}

gt_status gt_op_rmsnorm_backward(gt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C) {
  NEED_OP(be, rmsnorm_backward);
  NEED(be, "rmsnorm_backward", N >= 0 && C >= 0, "sizes must not be negative, got N=%d C=%d", N, C);
  NEED_PTRS(be, "rmsnorm_backward", N && C, dinp && dw && dout && inp && w && rstd, "dinp, dw, dout, inp, w and rstd");
  return be->ops->kernels.rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
}

#define NEED_ROPE(be, op, B, T, NH, hs, ld, theta, scale)                                                   \
  do {                                                                                                      \
    NEED(be, op, (B) >= 0 && (T) >= 0 && (NH) >= 0 && (hs) >= 0 && (hs) % 2 == 0,                           \
         "need B, T, NH >= 0 and an even head size, got B=%d T=%d NH=%d hs=%d", B, T, NH, hs);              \
    NEED(be, op, (int64_t)(NH) * (hs) <= (ld), "the heads (NH*hs = %lld) must fit a row of ld = %d floats", \
         (long long)(NH) * (hs), ld);                                                                       \
    NEED(be, op, (theta) > 1.0f && (scale) > 0.0f, "need theta > 1 and scale > 0, got theta=%g scale=%g",   \
         (double)(theta), (double)(scale));                                                                 \
  } while (0)

gt_status gt_op_rope_forward(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld,
                             float theta, float scale) {
  NEED_OP(be, rope_forward);
  NEED_ROPE(be, "rope_forward", B, T, NH, hs, ld, theta, scale);
  NEED_PTRS(be, "rope_forward", B && T && NH && hs, out && inp, "out and inp");
  return be->ops->kernels.rope_forward(be, out, inp, B, T, NH, hs, ld, theta, scale);
}

gt_status gt_op_rope_backward(gt_backend *be, float *dinp, const float *dout, int B, int T, int NH, int hs, int ld,
                              float theta, float scale) {
  NEED_OP(be, rope_backward);
  NEED_ROPE(be, "rope_backward", B, T, NH, hs, ld, theta, scale);
  NEED_PTRS(be, "rope_backward", B && T && NH && hs, dinp && dout, "dinp and dout");
  return be->ops->kernels.rope_backward(be, dinp, dout, B, T, NH, hs, ld, theta, scale);
}

gt_status gt_op_swiglu_forward(gt_backend *be, float *out, const float *gate, const float *up, size_t n) {
  NEED_OP(be, swiglu_forward);
  NEED_PTRS(be, "swiglu_forward", n, out && gate && up, "out, gate and up");
  return be->ops->kernels.swiglu_forward(be, out, gate, up, n);
}

gt_status gt_op_swiglu_backward(gt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                const float *up, size_t n) {
  NEED_OP(be, swiglu_backward);
  NEED_PTRS(be, "swiglu_backward", n, dgate && dup && dout && gate && up, "dgate, dup, dout, gate and up");
  return be->ops->kernels.swiglu_backward(be, dgate, dup, dout, gate, up, n);
}

/* ---- attention ---- */

#define NEED_HEADS(be, op, B, T, C, NH)                                          \
  NEED(be, op, (B) >= 0 && (T) >= 0 && (C) >= 0 && (NH) >= 1 && (C) % (NH) == 0, \
       "need B, T, C >= 0 and NH >= 1 dividing C, got B=%d T=%d C=%d NH=%d", B, T, C, NH)

gt_status gt_op_attention_tiled_forward(gt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int C,
                                        int NH) {
  NEED_OP(be, attention_tiled_forward);
  NEED_HEADS(be, "attention_tiled_forward", B, T, C, NH);
  NEED_PTRS(be, "attention_tiled_forward", B && T && C, out && lse && qkv, "out, lse and qkv");
  return be->ops->kernels.attention_tiled_forward(be, out, lse, qkv, B, T, C, NH);
}

gt_status gt_op_attention_tiled_backward(gt_backend *be, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int C, int NH) {
  NEED_OP(be, attention_tiled_backward);
  NEED_HEADS(be, "attention_tiled_backward", B, T, C, NH);
  NEED_PTRS(be, "attention_tiled_backward", B && T && C, dqkv && dout && qkv && out && lse,
            "dqkv, dout, qkv, out and lse");
  return be->ops->kernels.attention_tiled_backward(be, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

#define NEED_GROUPS(be, op, B, T, C, NH, NKV)                                                                          \
  do {                                                                                                                 \
    NEED_HEADS(be, op, B, T, C, NH);                                                                                   \
    NEED(be, op, (NKV) >= 1 && (NH) % (NKV) == 0, "the key/value heads must divide the query heads, got NH=%d NKV=%d", \
         NH, NKV);                                                                                                     \
  } while (0)

gt_status gt_op_attention_gqa_forward(gt_backend *be, float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int C, int NH, int NKV) {
  NEED_OP(be, attention_gqa_forward);
  NEED_GROUPS(be, "attention_gqa_forward", B, T, C, NH, NKV);
  NEED_PTRS(be, "attention_gqa_forward", B && T && C, out && lse && q && k && v, "out, lse, q, k and v");
  return be->ops->kernels.attention_gqa_forward(be, out, lse, q, k, v, B, T, C, NH, NKV);
}

gt_status gt_op_attention_gqa_backward(gt_backend *be, float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v, const float *out,
                                       const float *lse, int B, int T, int C, int NH, int NKV) {
  NEED_OP(be, attention_gqa_backward);
  NEED_GROUPS(be, "attention_gqa_backward", B, T, C, NH, NKV);
  NEED_PTRS(be, "attention_gqa_backward", B && T && C, dq && dk && dv && dout && q && k && v && out && lse,
            "dq, dk, dv, dout, q, k, v, out and lse");
  return be->ops->kernels.attention_gqa_backward(be, dq, dk, dv, dout, q, k, v, out, lse, B, T, C, NH, NKV);
}

gt_status gt_op_attention_full_forward(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                       int NH) {
  NEED_OP(be, attention_full_forward);
  NEED_HEADS(be, "attention_full_forward", B, T, C, NH);
  NEED_PTRS(be, "attention_full_forward", B && T && C, out && att && qkv, "out, att and qkv");
  return be->ops->kernels.attention_full_forward(be, out, att, qkv, B, T, C, NH);
}

gt_status gt_op_attention_full_backward(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                        const float *att, int B, int T, int C, int NH) {
  NEED_OP(be, attention_full_backward);
  NEED_HEADS(be, "attention_full_backward", B, T, C, NH);
  NEED_PTRS(be, "attention_full_backward", B && T && C, dqkv && datt && dout && qkv && att,
            "dqkv, datt, dout, qkv and att");
  return be->ops->kernels.attention_full_backward(be, dqkv, datt, dout, qkv, att, B, T, C, NH);
}

gt_status gt_op_causal_softmax_forward(gt_backend *be, float *att, int BH, int T) {
  NEED_OP(be, causal_softmax_forward);
  NEED(be, "causal_softmax_forward", BH >= 0 && T >= 0, "need BH, T >= 0, got %d and %d", BH, T);
  NEED_PTRS(be, "causal_softmax_forward", BH && T, att, "att");
  return be->ops->kernels.causal_softmax_forward(be, att, BH, T);
}

gt_status gt_op_causal_softmax_backward(gt_backend *be, float *datt, const float *att, int BH, int T, float scale) {
  NEED_OP(be, causal_softmax_backward);
  NEED(be, "causal_softmax_backward", BH >= 0 && T >= 0, "need BH, T >= 0, got %d and %d", BH, T);
  NEED_PTRS(be, "causal_softmax_backward", BH && T, datt && att, "datt and att");
  return be->ops->kernels.causal_softmax_backward(be, datt, att, BH, T, scale);
}

/* ---- loss ---- */

#define NEED_ROWS(be, op, N, V) NEED(be, op, (N) >= 0 && (V) >= 1, "need N >= 0 and V >= 1, got N=%d V=%d", N, V)

gt_status gt_op_softmax_xent_forward(gt_backend *be, float *losses, float *probs, const float *logits,
                                     const int32_t *targets, int N, int V) {
  NEED_OP(be, softmax_xent_forward);
  NEED_ROWS(be, "softmax_xent_forward", N, V);
  NEED_PTRS(be, "softmax_xent_forward", N, losses && probs && logits && targets, "losses, probs, logits and targets");
  return be->ops->kernels.softmax_xent_forward(be, losses, probs, logits, targets, N, V);
}

gt_status gt_op_softmax_xent_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                      float dloss, int N, int V) {
  NEED_OP(be, softmax_xent_backward);
  NEED_ROWS(be, "softmax_xent_backward", N, V);
  NEED_PTRS(be, "softmax_xent_backward", N, dlogits && probs && targets, "dlogits, probs and targets");
  return be->ops->kernels.softmax_xent_backward(be, dlogits, probs, targets, dloss, N, V);
}

/* ---- a slice of the vocabulary ---- */

#define NEED_SLICE(be, op, v0, V) \
  NEED(be, op, (v0) >= 0 && (V) >= 1, "need a slice with v0 >= 0 and V >= 1, got v0=%d V=%d", v0, V)

gt_status gt_op_embedding_slice_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0,
                                        int V, const float *wpe, int B, int T, int C) {
  NEED_OP(be, embedding_slice_forward);
  NEED_SLICE(be, "embedding_slice_forward", v0, V);
  NEED_DIMS3(be, "embedding_slice_forward", B, T, C);
  NEED_PTRS(be, "embedding_slice_forward", B && T && C, out && tokens && wte, "out, tokens and wte");
  return be->ops->kernels.embedding_slice_forward(be, out, tokens, wte, v0, V, wpe, B, T, C);
}

gt_status gt_op_embedding_slice_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                         const int32_t *tokens, int v0, int V, int B, int T, int C) {
  NEED_OP(be, embedding_slice_backward);
  NEED_SLICE(be, "embedding_slice_backward", v0, V);
  NEED_DIMS3(be, "embedding_slice_backward", B, T, C);
  NEED_PTRS(be, "embedding_slice_backward", B && T && C, dwte && dout && tokens, "dwte, dout and tokens");
  return be->ops->kernels.embedding_slice_backward(be, dwte, dwpe, dout, tokens, v0, V, B, T, C);
}

gt_status gt_op_xent_slice_stats(gt_backend *be, float *stats, float *tlogit, const float *logits,
                                 const int32_t *targets, int v0, int N, int V) {
  NEED_OP(be, xent_slice_stats);
  NEED_SLICE(be, "xent_slice_stats", v0, V);
  NEED(be, "xent_slice_stats", N >= 0, "need N >= 0, got %d", N);
  NEED_PTRS(be, "xent_slice_stats", N, stats && tlogit && logits && targets, "stats, tlogit, logits and targets");
  return be->ops->kernels.xent_slice_stats(be, stats, tlogit, logits, targets, v0, N, V);
}

gt_status gt_op_xent_slice_finish(gt_backend *be, float *losses, float *probs, const float *logits,
                                  const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                  int vocab_total, int N, int V) {
  NEED_OP(be, xent_slice_finish);
  NEED_ROWS(be, "xent_slice_finish", N, V);
  NEED(be, "xent_slice_finish", P >= 1 && vocab_total >= V,
       "need P >= 1 slices and a vocabulary of at least V=%d, got P=%d vocab_total=%d", V, P, vocab_total);
  NEED_PTRS(be, "xent_slice_finish", N, losses && probs && logits && stats_all && tlogit && targets,
            "losses, probs, logits, stats_all, tlogit and targets");
  return be->ops->kernels.xent_slice_finish(be, losses, probs, logits, stats_all, P, tlogit, targets, vocab_total, N,
                                            V);
}

gt_status gt_op_softmax_xent_slice_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                            int v0, float dloss, int N, int V) {
  NEED_OP(be, softmax_xent_slice_backward);
  NEED_SLICE(be, "softmax_xent_slice_backward", v0, V);
  NEED(be, "softmax_xent_slice_backward", N >= 0, "need N >= 0, got %d", N);
  NEED_PTRS(be, "softmax_xent_slice_backward", N, dlogits && probs && targets, "dlogits, probs and targets");
  return be->ops->kernels.softmax_xent_slice_backward(be, dlogits, probs, targets, v0, dloss, N, V);
}

/* ---- optimizers ---- */

gt_status gt_op_adamw_update(gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                             const gt_adamw_args *a) {
  NEED_OP(be, adamw_update);
  NEED(be, "adamw_update", a, "the arguments must not be NULL");
  NEED(be, "adamw_update", a->step >= 1, "step is 1-based, got %d", a->step);
  NEED_PTRS(be, "adamw_update", n, param && grad && m && v, "param, grad, m and v");
  return be->ops->kernels.adamw_update(be, param, grad, m, v, n, a);
}

gt_status gt_op_adamw_update_bf16(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                  uint16_t *param_bf16, size_t n, const gt_adamw_args *a) {
  NEED_OP(be, adamw_update_bf16);
  NEED(be, "adamw_update_bf16", a, "the arguments must not be NULL");
  NEED(be, "adamw_update_bf16", a->step >= 1, "step is 1-based, got %d", a->step);
  NEED_PTRS(be, "adamw_update_bf16", n, param && grad && m && v && param_bf16, "param, grad, m, v and param_bf16");
  return be->ops->kernels.adamw_update_bf16(be, param, grad, m, v, param_bf16, n, a);
}

gt_status gt_op_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                           const gt_sgd_args *a) {
  NEED_OP(be, sgd_update);
  NEED(be, "sgd_update", a, "the arguments must not be NULL");
  NEED(be, "sgd_update", a->momentum == 0.0f || mom, "momentum %g needs a momentum buffer, got NULL",
       (double)a->momentum);
  NEED(be, "sgd_update", !a->nesterov || a->momentum != 0.0f, "nesterov needs a nonzero momentum");
  NEED_PTRS(be, "sgd_update", n, param && grad, "param and grad");
  return be->ops->kernels.sgd_update(be, param, grad, mom, n, a);
}

/* ---- reductions, scaling, conversions ---- */

gt_status gt_op_sum_squares(gt_backend *be, double *out, const float *x, size_t n) {
  NEED_OP(be, sum_squares);
  NEED(be, "sum_squares", out && (x || !n), "out and x must not be NULL");
  return be->ops->kernels.sum_squares(be, out, x, n);
}

gt_status gt_op_scale(gt_backend *be, float *x, float s, size_t n) {
  NEED_OP(be, scale);
  NEED_PTRS(be, "scale", n, x, "x");
  return be->ops->kernels.scale(be, x, s, n);
}

gt_status gt_op_f32_to_bf16(gt_backend *be, uint16_t *dst, const float *src, size_t n) {
  NEED_OP(be, f32_to_bf16);
  NEED_PTRS(be, "f32_to_bf16", n, dst && src, "dst and src");
  return be->ops->kernels.f32_to_bf16(be, dst, src, n);
}

gt_status gt_op_bf16_to_f32(gt_backend *be, float *dst, const uint16_t *src, size_t n) {
  NEED_OP(be, bf16_to_f32);
  NEED_PTRS(be, "bf16_to_f32", n, dst && src, "dst and src");
  return be->ops->kernels.bf16_to_f32(be, dst, src, n);
}
