/* Causal self-attention with bf16 matrix products on the whole score
 * matrix (full attention; tiled attention has no bf16 path and stays fp32),
 * composed of backend operations: gemm_ex for the four products (strided-batched over the heads
 * of one sequence, as the backends' own attention kernels do), the causal
 * softmax and the bf16 conversions. Mixed-precision training uses it so that
 * attention's products run where the linear layers' do (tensor cores, AMX
 * tiles) instead of in fp32; the scores, the softmax, the saved
 * probabilities and every gradient stay fp32.
 *
 * Head h of sequence b: queries at qkv[b][t][h*hs ..], rows 3C apart; keys C
 * further on, values 2C further; consecutive heads hs elements apart.
 */
#include <math.h>

#include "giant/backend.h"
#include "giant/tensor.h"
#include "core/backend_engine.h"

/* bf16 elements of each scratch region, rounded up to 256 bytes. */
static size_t region(size_t elems) { return (elems + 127) & ~(size_t)127; }

static size_t qkv_elems(int B, int T, int C) { return region((size_t)B * T * 3 * C); }
static size_t att_elems(int B, int T, int NH) { return region((size_t)B * NH * T * T); }

size_t gt_attention_bf16_scratch(int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
  return (qkv_elems(B, T, C) + att_elems(B, T, NH) + region((size_t)B * T * C)) * sizeof(uint16_t);
}

static gt_status check(gt_backend *be, const char *op, int B, int T, int C, int NH, const void *scratch) {
  if (B < 0 || T < 0 || C < 0 || NH < 1 || C % NH != 0)
    return gt_errorf(GT_EINVAL, "%s: need B, T, C >= 0 and NH >= 1 dividing C, got B=%d T=%d C=%d NH=%d", op, B, T, C,
                     NH);
  if (!gt_backend_has_mixed_precision(be))
    return gt_errorf(GT_EUNSUPPORTED, "%s: backend %s has no bf16 products; train in fp32", op, gt_backend_name(be));
  if (B && T && C && !scratch) return gt_errorf(GT_EINVAL, "%s: no scratch given", op);
  return GT_OK;
}

/* One strided-batched bf16 product over the NH heads of a sequence. */
static gt_status heads(gt_backend *be, int NH, gt_transpose ta, gt_transpose tb, int m, int n, int k, float alpha,
                       const uint16_t *a, int lda, int64_t sa, const uint16_t *b, int ldb, int64_t sb, float beta,
                       float *c, int ldc, int64_t sc) {
  gt_gemm_ex_args g = {.trans_a = ta,
                       .trans_b = tb,
                       .m = m,
                       .n = n,
                       .k = k,
                       .alpha = alpha,
                       .beta = beta,
                       .a = a,
                       .a_type = GT_BF16,
                       .lda = lda,
                       .stride_a = sa,
                       .b = b,
                       .b_type = GT_BF16,
                       .ldb = ldb,
                       .stride_b = sb,
                       .c = c,
                       .c_type = GT_F32,
                       .ldc = ldc,
                       .stride_c = sc,
                       .batch = NH};
  return gt_op_gemm_ex(be, &g);
}

gt_status gt_attention_forward_bf16(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                    int NH, void *scratch) {
  GT_TRY(check(be, "attention_forward_bf16", B, T, C, NH, scratch));
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int hs = C / NH, C3 = 3 * C;
  int64_t TT = (int64_t)T * T;
  float scale = 1.0f / sqrtf((float)hs);
  uint16_t *qkv16 = scratch, *att16 = qkv16 + qkv_elems(B, T, C);
  GT_TRY(gt_op_f32_to_bf16(be, qkv16, qkv, (size_t)B * T * C3));
  for (int b = 0; b < B; b++) {
    const uint16_t *q = qkv16 + (int64_t)b * T * C3, *k = q + C;
    /* att = scale * q k^T, every head of sequence b */
    GT_TRY(heads(be, NH, GT_NO_TRANS, GT_TRANS, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, att + b * NH * TT, T, TT));
  }
  GT_TRY(gt_op_causal_softmax_forward(be, att, B * NH, T));
  GT_TRY(gt_op_f32_to_bf16(be, att16, att, (size_t)B * NH * TT));
  for (int b = 0; b < B; b++) {
    const uint16_t *v = qkv16 + (int64_t)b * T * C3 + 2 * C;
    /* out = att v */
    GT_TRY(heads(be, NH, GT_NO_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, att16 + b * NH * TT, T, TT, v, C3, hs, 0.0f,
                 out + (int64_t)b * T * C, C, hs));
  }
  return GT_OK;
}

gt_status gt_attention_backward_bf16(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                     const float *att, int B, int T, int C, int NH, void *scratch) {
  GT_TRY(check(be, "attention_backward_bf16", B, T, C, NH, scratch));
  if (B == 0 || T == 0 || C == 0) return GT_OK;
  int hs = C / NH, C3 = 3 * C;
  int64_t TT = (int64_t)T * T;
  float scale = 1.0f / sqrtf((float)hs);
  uint16_t *qkv16 = scratch, *p16 = qkv16 + qkv_elems(B, T, C), *dy16 = p16 + att_elems(B, T, NH);
  GT_TRY(gt_op_f32_to_bf16(be, qkv16, qkv, (size_t)B * T * C3));
  GT_TRY(gt_op_f32_to_bf16(be, dy16, dout, (size_t)B * T * C));
  GT_TRY(gt_op_f32_to_bf16(be, p16, att, (size_t)B * NH * TT));
  for (int b = 0; b < B; b++) {
    int64_t off = (int64_t)b * T * C3;
    const uint16_t *v = qkv16 + off + 2 * C, *dy = dy16 + (int64_t)b * T * C, *p = p16 + b * NH * TT;
    /* datt = dy v^T; dv += att^T dy */
    GT_TRY(heads(be, NH, GT_NO_TRANS, GT_TRANS, T, T, hs, 1.0f, dy, C, hs, v, C3, hs, 0.0f, datt + b * NH * TT, T, TT));
    GT_TRY(heads(be, NH, GT_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, p, T, TT, dy, C, hs, 1.0f, dqkv + off + 2 * C, C3, hs));
  }
  GT_TRY(gt_op_causal_softmax_backward(be, datt, att, B * NH, T, scale));
  /* The probabilities are done with: their region takes the score gradient. */
  uint16_t *ds16 = p16;
  GT_TRY(gt_op_f32_to_bf16(be, ds16, datt, (size_t)B * NH * TT));
  for (int b = 0; b < B; b++) {
    int64_t off = (int64_t)b * T * C3;
    const uint16_t *q = qkv16 + off, *k = q + C, *ds = ds16 + b * NH * TT;
    /* dq += dscores k; dk += dscores^T q (the scale is already in dscores) */
    GT_TRY(heads(be, NH, GT_NO_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, ds, T, TT, k, C3, hs, 1.0f, dqkv + off, C3, hs));
    GT_TRY(heads(be, NH, GT_TRANS, GT_NO_TRANS, T, hs, T, 1.0f, ds, T, TT, q, C3, hs, 1.0f, dqkv + off + C, C3, hs));
  }
  return GT_OK;
}
