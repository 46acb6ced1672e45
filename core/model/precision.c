/* Mixed precision: the model's bf16 weight copy and the matrix products of
 * its layers.
 *
 * Under GT_PRECISION_BF16 the fp32 parameter buffer stays the master copy
 * that optimizers update, the gradients stay fp32, and a bf16 twin of the
 * parameter buffer (same offsets) feeds the matrix products. The twin is
 * refreshed by one conversion over the buffer before the first forward
 * after the parameters change (gt_model_params_changed), so gradient
 * accumulation over many micro-batches converts once per step.
 *
 * A product's activations are rounded to bf16 as they enter it, into a
 * scratch buffer the model grows to the largest product it has seen and
 * then reuses. Full attention's four products go the same way
 * (gt_attention_forward_bf16); tiled attention stays fp32. Saved
 * activations stay fp32: LayerNorm, softmax, GELU and the residual stream
 * read them at full precision.
 */
#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"

gt_precision gt_model_get_precision(const gt_model *m) { return m->precision; }

void gt_model_params_changed(gt_model *m) {
  gt_model_wait_readers(m);
  m->bf16_stale = true;
  gt_offload_params_changed(m);
  gt_zero3_params_changed(m);
}

void gt_model_layer_params_changed(gt_model *m, int layer) {
  if (!m->off || layer < 0 || layer >= m->nlayers) {
    gt_model_params_changed(m);
    return;
  }
  gt_model_wait_readers(m);
  gt_offload_layer_params_changed(m, layer);
}

static void free_bf16(gt_model *m) {
  gt_arena_free(m->arena, m->param_bf16);
  gt_arena_free(m->arena, m->mp_scratch);
  m->param_bf16 = NULL;
  m->mp_scratch = NULL;
  m->mp_scratch_bytes = 0;
}

gt_status gt_model_set_precision(gt_model *m, gt_precision p) {
  if (!m->built) return gt_errorf(GT_ESTATE, "set the precision after gt_model_build");
  if (p != GT_PRECISION_FP32 && p != GT_PRECISION_BF16)
    return gt_errorf(GT_EINVAL, "unknown precision %d: use GT_PRECISION_FP32 or GT_PRECISION_BF16", (int)p);
  if (p == m->precision) return GT_OK;
  if (p == GT_PRECISION_BF16 && !gt_backend_has_mixed_precision(m->be))
    return gt_errorf(GT_EUNSUPPORTED, "backend %s has no mixed-precision products (gemm_ex); train in fp32",
                     gt_backend_name(m->be));
  if (m->off) {
    /* Offloaded, the window holds the weights in the compute precision. */
    gt_precision was = m->precision;
    m->precision = p;
    gt_status s = gt_offload_set_precision(m);
    if (s != GT_OK) {
      /* The slots of the old precision again: they fit before. */
      m->precision = was;
      (void)gt_offload_set_precision(m);
    }
    return s;
  }
  if (m->zero3) {
    /* Sharded, the slots that hold whole layers have their bf16 twins. */
    gt_precision was = m->precision;
    m->precision = p;
    gt_status s = gt_zero3_set_precision(m);
    if (s != GT_OK) m->precision = was;
    return s;
  }
  if (p == GT_PRECISION_FP32) {
    free_bf16(m);
    m->precision = p;
    return GT_OK;
  }
  size_t bytes = (m->nfloats ? m->nfloats : 1) * sizeof(uint16_t);
  gt_status s = gt_arena_alloc_as(m->arena, GT_MEM_BF16_COPY, bytes, (void **)&m->param_bf16);
  if (s != GT_OK) return gt_error_context(s, "allocating the bf16 copy of %zu parameters", m->nfloats);
  m->precision = p;
  m->bf16_stale = true;
  return GT_OK;
}

void gt_model_precision_destroy(gt_model *m) { free_bf16(m); }

uint16_t *gt_model_params_bf16(gt_model *m) { return m->off ? gt_offload_host_bf16(m) : m->param_bf16; }

void gt_model_bf16_written(gt_model *m) {
  m->bf16_stale = false;
  gt_offload_bf16_written(m);
}

void gt_model_layer_bf16_written(gt_model *m, int layer) {
  if (m->off && layer >= 0 && layer < m->nlayers) gt_offload_layer_bf16_written(m, layer);
}

gt_status gt_model_refresh_bf16(gt_model *m) {
  if (m->precision != GT_PRECISION_BF16 || !m->bf16_stale || m->off || m->zero3) return GT_OK;
  GT_TRY(gt_op_f32_to_bf16(m->be, m->param_bf16, m->param_buf, m->nfloats));
  m->bf16_stale = false;
  return GT_OK;
}

const uint16_t *gt_layer_param_bf16(const gt_layer *self, int i) {
  const gt_model *m = self->model;
  if (m->off) return gt_offload_param_bf16(self, i);
  if (m->zero3) return gt_zero3_param_bf16(self, i);
  return m->param_bf16 ? m->param_bf16 + m->params[self->first_param + i].offset : NULL;
}

/* bf16 scratch of at least `elems` elements. It grows (rarely: the first
 * step sees every shape) and is kept. */
static gt_status mp_scratch(gt_model *m, size_t elems, uint16_t **out) {
  size_t bytes = elems * sizeof(uint16_t);
  if (bytes > m->mp_scratch_bytes) {
    gt_arena_free(m->arena, m->mp_scratch);
    m->mp_scratch = NULL;
    m->mp_scratch_bytes = 0;
    gt_status s = gt_arena_alloc_as(m->arena, GT_MEM_SCRATCH, bytes, (void **)&m->mp_scratch);
    if (s != GT_OK) return gt_error_context(s, "allocating %zu bytes of bf16 scratch", bytes);
    m->mp_scratch_bytes = bytes;
  }
  *out = m->mp_scratch;
  return GT_OK;
}

static gt_status check_dims(const gt_layer *self, int N, int C, int OC) {
  if (N < 0 || C < 0 || OC < 0)
    return gt_errorf(GT_EINVAL, "layer '%s': linear needs N, C, OC >= 0, got %d, %d, %d", self->name, N, C, OC);
  return GT_OK;
}

gt_status gt_layer_linear_forward(gt_layer *self, const gt_layer_ctx *ctx, float *out, const float *in, int w,
                                  const float *bias, int N, int C, int OC) {
  gt_backend *be = ctx->be;
  /* Under bf16 the fp32 weight is not read: an offloaded window may not
   * hold it (gt_param_spec.matmul_only). */
  if (ctx->precision != GT_PRECISION_BF16)
    return gt_op_linear_forward(be, out, in, gt_layer_param(self, w), bias, N, C, OC);
  GT_TRY(check_dims(self, N, C, OC));
  if (N == 0 || OC == 0) return GT_OK;
  uint16_t *in16 = NULL;
  GT_TRY(mp_scratch(self->model, (size_t)N * (size_t)C, &in16));
  GT_TRY(gt_op_f32_to_bf16(be, in16, in, (size_t)N * (size_t)C));
  /* out (N,OC) = in (N,C) @ W^T, W stored (OC,C). */
  gt_gemm_ex_args g = {.trans_a = GT_NO_TRANS,
                       .trans_b = GT_TRANS,
                       .m = N,
                       .n = OC,
                       .k = C,
                       .alpha = 1.0f,
                       .beta = 0.0f,
                       .a = in16,
                       .a_type = GT_BF16,
                       .lda = C,
                       .b = gt_layer_param_bf16(self, w),
                       .b_type = GT_BF16,
                       .ldb = C,
                       .c = out,
                       .c_type = GT_F32,
                       .ldc = OC,
                       .batch = 1};
  GT_TRY(gt_op_gemm_ex(be, &g));
  return bias ? gt_op_bias_add(be, out, bias, N, OC) : GT_OK;
}

gt_status gt_layer_linear_backward(gt_layer *self, const gt_layer_ctx *ctx, float *din, float *dbias, const float *dout,
                                   const float *in, int w, int N, int C, int OC) {
  gt_backend *be = ctx->be;
  if (ctx->precision != GT_PRECISION_BF16)
    return gt_op_linear_backward(be, din, gt_layer_grad(self, w), dbias, dout, in, gt_layer_param(self, w), N, C, OC);
  GT_TRY(check_dims(self, N, C, OC));
  if (N == 0 || OC == 0) return GT_OK;
  size_t nin = (size_t)N * (size_t)C, nout = (size_t)N * (size_t)OC;
  /* The second operand starts 256-byte aligned, as tensor-core GEMMs want. */
  size_t gap = (nout + 127) & ~(size_t)127;
  uint16_t *dout16 = NULL, *in16;
  GT_TRY(mp_scratch(self->model, gap + nin, &dout16));
  in16 = dout16 + gap;
  GT_TRY(gt_op_f32_to_bf16(be, dout16, dout, nout));
  GT_TRY(gt_op_f32_to_bf16(be, in16, in, nin));
  if (C > 0) {
    /* din (N,C) += dout (N,OC) @ W (OC,C). */
    if (din) {
      gt_gemm_ex_args g = {.trans_a = GT_NO_TRANS,
                           .trans_b = GT_NO_TRANS,
                           .m = N,
                           .n = C,
                           .k = OC,
                           .alpha = 1.0f,
                           .beta = 1.0f,
                           .a = dout16,
                           .a_type = GT_BF16,
                           .lda = OC,
                           .b = gt_layer_param_bf16(self, w),
                           .b_type = GT_BF16,
                           .ldb = C,
                           .c = din,
                           .c_type = GT_F32,
                           .ldc = C,
                           .batch = 1};
      GT_TRY(gt_op_gemm_ex(be, &g));
    }
    /* dW (OC,C) += dout^T (OC,N) @ in (N,C), into the fp32 gradient. */
    gt_gemm_ex_args g = {.trans_a = GT_TRANS,
                         .trans_b = GT_NO_TRANS,
                         .m = OC,
                         .n = C,
                         .k = N,
                         .alpha = 1.0f,
                         .beta = 1.0f,
                         .a = dout16,
                         .a_type = GT_BF16,
                         .lda = OC,
                         .b = in16,
                         .b_type = GT_BF16,
                         .ldb = C,
                         .c = gt_layer_grad(self, w),
                         .c_type = GT_F32,
                         .ldc = C,
                         .batch = 1};
    GT_TRY(gt_op_gemm_ex(be, &g));
  }
  return dbias ? gt_op_bias_backward(be, dbias, dout, N, OC) : GT_OK;
}

/* Attention as the model is configured: tiled in fp32 whatever the
 * precision (its saved state is a row's log-sum-exp, which the bf16 path,
 * built on whole score matrices, does not produce), or full, in the
 * backend's fp32 kernels or under bf16 with its products on bf16 operands. */
static bool tiled(const gt_layer *self) {
  return !self->model || gt_model_get_config(self->model)->attention == GT_ATTENTION_TILED;
}

size_t gt_layer_attention_saved_floats(const gt_layer *self, int B, int T, int NH) {
  size_t rows = (size_t)B * (size_t)NH * (size_t)T;
  return tiled(self) ? rows : rows * (size_t)T;
}

size_t gt_layer_attention_scratch_floats(const gt_layer *self, int B, int T, int NH) {
  return tiled(self) ? 0 : (size_t)B * (size_t)NH * (size_t)T * (size_t)T;
}

gt_status gt_layer_attention_forward(gt_layer *self, const gt_layer_ctx *ctx, float *out, float *saved,
                                     const float *qkv, int B, int T, int C, int NH) {
  gt_backend *be = ctx->be;
  if (tiled(self)) return gt_op_attention_tiled_forward(be, out, saved, qkv, B, T, C, NH);
  if (ctx->precision != GT_PRECISION_BF16) return gt_op_attention_full_forward(be, out, saved, qkv, B, T, C, NH);
  uint16_t *ws = NULL;
  GT_TRY(mp_scratch(self->model, gt_attention_bf16_scratch(B, T, C, NH) / sizeof(uint16_t), &ws));
  return gt_attention_forward_bf16(be, out, saved, qkv, B, T, C, NH, ws);
}

gt_status gt_layer_attention_backward(gt_layer *self, const gt_layer_ctx *ctx, float *dqkv, float *datt,
                                      const float *dout, const float *qkv, const float *out, const float *saved, int B,
                                      int T, int C, int NH) {
  gt_backend *be = ctx->be;
  if (tiled(self)) return gt_op_attention_tiled_backward(be, dqkv, dout, qkv, out, saved, B, T, C, NH);
  if (ctx->precision != GT_PRECISION_BF16)
    return gt_op_attention_full_backward(be, dqkv, datt, dout, qkv, saved, B, T, C, NH);
  uint16_t *ws = NULL;
  GT_TRY(mp_scratch(self->model, gt_attention_bf16_scratch(B, T, C, NH) / sizeof(uint16_t), &ws));
  return gt_attention_backward_bf16(be, dqkv, datt, dout, qkv, saved, B, T, C, NH, ws);
}
