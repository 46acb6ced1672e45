/* The Llama decoder block, pre-RMSNorm, without biases:
 *
 *   x2  = x  + o(attention(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = rmsnorm1(x)
 *   out = x2 + down(silu(gate(n2)) * up(n2)),                  n2 = rmsnorm2(x2)
 *
 * Attention is grouped-query: NKV key/value heads, each serving NH/NKV
 * query heads (NKV = NH is multi-head attention), tiled, in fp32 under
 * every precision (gt_op_attention_gqa_*). Rotary embeddings turn q and k
 * in place after their products; their backward turns the gradients back.
 *
 * Parameter names are Hugging Face LlamaForCausalLM's within a decoder
 * layer ("self_attn.q_proj.weight", ...), with the same shapes (out, in),
 * so a layer named "model.layers.N" holds exactly HF's names.
 *
 * Split across a tensor-parallel group of p ranks (Megatron's pattern),
 * each rank holds NH/p query heads and NKV/p key/value heads, whose groups
 * then stay on one rank: q, k, v, gate and up are column-parallel (rank r
 * holds its rows of the weight), o and down row-parallel (the matching
 * columns). Each branch gives a partial sum that one all-reduce completes
 * in forward; in backward the gradient reaching each RMSNorm is completed
 * the same way. The norms are held whole and their gradients come out the
 * same on every rank. No sequence parallelism.
 *
 * Every saved activation has a named slot below; recomputed whole
 * (ctx->recompute), forward stops once they are made. */
#include "core/layers/layer_util.h"
#include "giant/layers.h"
#include "core/model/model_engine.h"
#include "giant/group.h"

/* The order makes the MLP's weights and the attention's contiguous ranges
 * for gt_layer_grads_final. */
enum { NORM1, QW, KW, VW, OW, NORM2, GATEW, UPW, DOWNW, NPARAMS };

typedef struct llama_cfg {
  int C, NH, NKV, H, hs; /* the whole block */
  int Cl, KVl, Hl;       /* this rank's share: query width, key/value width, MLP width */
  int NHl, NKVl;         /* this rank's heads */
  float eps, theta, scale;
} llama_cfg;

/* Offsets (in floats) of the saved activations for one (B,T). */
typedef struct llama_acts {
  float *n1, *rstd1, *q, *k, *v, *lse, *atty, *res2, *n2, *rstd2, *gate, *up, *h;
  size_t total;
} llama_acts;

static llama_acts layout(const gt_layer *self, float *base, int B, int T) {
  const llama_cfg *c = self->state;
  size_t BT = (size_t)B * (size_t)T, C = (size_t)c->C, Cl = (size_t)c->Cl, KVl = (size_t)c->KVl, Hl = (size_t)c->Hl;
  size_t sizes[13] = {BT * C, BT, BT * Cl, BT * KVl, BT * KVl, BT * (size_t)c->NHl, BT * Cl, BT * C,
                      BT * C, BT, BT * Hl, BT * Hl,  BT * Hl};
  llama_acts a;
  float **slots[13] = {&a.n1,   &a.rstd1, &a.q,     &a.k,    &a.v,  &a.lse, &a.atty,
                       &a.res2, &a.n2,    &a.rstd2, &a.gate, &a.up, &a.h};
  size_t off = 0;
  for (int i = 0; i < 13; i++) {
    *slots[i] = base ? base + off : NULL;
    off += sizes[i];
  }
  a.total = off;
  return a;
}

static gt_status llama_build(gt_layer *self, const void *config) {
  const gt_llama_block_config *u = config;
  if (!u) return gt_errorf(GT_EINVAL, "a configuration is required");
  int NKV = u->n_kv_heads > 0 ? u->n_kv_heads : u->NH, p = gt_layer_tp_size(self);
  if (u->C <= 0 || u->NH <= 0 || u->mlp_hidden <= 0)
    return gt_errorf(GT_EINVAL, "llama block needs C, NH and mlp_hidden > 0, got %d, %d and %d", u->C, u->NH,
                     u->mlp_hidden);
  if (u->C % u->NH) return gt_errorf(GT_EINVAL, "llama block: C=%d is not divisible by NH=%d", u->C, u->NH);
  if ((u->C / u->NH) % 2)
    return gt_errorf(GT_EINVAL, "llama block: rotary embeddings need an even head size, got C/NH = %d", u->C / u->NH);
  if (u->n_kv_heads < 0 || u->NH % NKV)
    return gt_errorf(GT_EINVAL, "llama block: n_kv_heads=%d must divide the head count NH=%d", u->n_kv_heads, u->NH);
  if (u->eps < 0.0f || u->rope_theta < 0.0f || u->rope_scale < 0.0f || (u->rope_theta > 0.0f && u->rope_theta <= 1.0f))
    return gt_errorf(GT_EINVAL, "llama block: need eps >= 0, rope_theta > 1 and rope_scale >= 0 (0 for defaults)");
  if (u->NH % p || NKV % p)
    return gt_errorf(GT_EINVAL,
                     "tensor parallelism tp=%d must divide the head count NH=%d and the key/value heads "
                     "n_kv_heads=%d",
                     p, u->NH, NKV);
  if (u->mlp_hidden % p)
    return gt_errorf(GT_EINVAL, "tensor parallelism tp=%d does not divide the MLP width %d", p, u->mlp_hidden);
  int hs = u->C / u->NH;
  llama_cfg c = {.C = u->C,
                 .NH = u->NH,
                 .NKV = NKV,
                 .H = u->mlp_hidden,
                 .hs = hs,
                 .Cl = u->C / p,
                 .KVl = NKV / p * hs,
                 .Hl = u->mlp_hidden / p,
                 .NHl = u->NH / p,
                 .NKVl = NKV / p,
                 .eps = u->eps > 0.0f ? u->eps : 1e-5f,
                 .theta = u->rope_theta > 0.0f ? u->rope_theta : 10000.0f,
                 .scale = u->rope_scale > 0.0f ? u->rope_scale : 1.0f};
  GT_TRY(gt_layer_keep_config(self, &c, sizeof c));
  self->in_dim = self->out_dim = c.C;
  float std = u->init_std > 0.0f ? u->init_std : 0.02f;
  int KV = NKV * hs;
  const gt_param_spec specs[NPARAMS] = {
      {"input_layernorm.weight", 1, {c.C}, GT_INIT_ONES, 0, false, false, 0, false},
      {"self_attn.q_proj.weight", 2, {c.C, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"self_attn.k_proj.weight", 2, {KV, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"self_attn.v_proj.weight", 2, {KV, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"self_attn.o_proj.weight", 2, {c.C, c.C}, GT_INIT_NORMAL, std, true, true, 1, true},
      {"post_attention_layernorm.weight", 1, {c.C}, GT_INIT_ONES, 0, false, false, 0, false},
      {"mlp.gate_proj.weight", 2, {c.H, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"mlp.up_proj.weight", 2, {c.H, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"mlp.down_proj.weight", 2, {c.C, c.H}, GT_INIT_NORMAL, std, true, true, 1, true},
  };
  for (int i = 0; i < NPARAMS; i++) GT_TRY(gt_layer_declare_param(self, &specs[i], NULL));
  return GT_OK;
}

static size_t llama_acts_floats(const gt_layer *self, int B, int T) { return layout(self, NULL, B, T).total; }

static size_t llama_attn_floats(const gt_layer *self, int B, int T) {
  const llama_cfg *c = self->state;
  return (size_t)B * (size_t)T * (size_t)c->NHl;
}

/* Forward: the branch output before the residual add (C). Backward: dres2,
 * dn (C each), datty, dq (Cl each), dk, dv (KVl each), dh, dgate, dup (Hl
 * each). */
static size_t llama_scratch(const gt_layer *self, int B, int T) {
  const llama_cfg *c = self->state;
  return (size_t)B * (size_t)T * (2 * (size_t)c->C + 2 * (size_t)c->Cl + 2 * (size_t)c->KVl + 3 * (size_t)c->Hl);
}

#define P(i) gt_layer_param(self, i)
#define G(i) gt_layer_grad(self, i)

/* Completes a row-parallel partial sum across the tensor-parallel group. */
static gt_status tp_sum(gt_layer *self, float *buf, size_t n) {
  return self->tp ? self->tp->allreduce_sum(self->tp, buf, n) : GT_OK;
}

static gt_status llama_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const llama_cfg *c = self->state;
  gt_backend *be = ctx->be;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, KVl = c->KVl, Hl = c->Hl;
  size_t NC = (size_t)N * (size_t)C;
  llama_acts a = layout(self, acts, B, T);
  float *tmp = ctx->scratch; /* (N, C) branch output before the residual add */

  GT_TRY(gt_op_rmsnorm_forward(be, a.n1, a.rstd1, in, P(NORM1), c->eps, N, C));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.q, a.n1, QW, NULL, N, C, Cl));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.k, a.n1, KW, NULL, N, C, KVl));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.v, a.n1, VW, NULL, N, C, KVl));
  GT_TRY(gt_op_rope_forward(be, a.q, a.q, B, T, c->NHl, c->hs, Cl, c->theta, c->scale));
  GT_TRY(gt_op_rope_forward(be, a.k, a.k, B, T, c->NKVl, c->hs, KVl, c->theta, c->scale));
  GT_TRY(gt_op_attention_gqa_forward(be, a.atty, a.lse, a.q, a.k, a.v, B, T, Cl, c->NHl, c->NKVl));
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.atty, OW, NULL, N, Cl, C));
  GT_TRY(tp_sum(self, tmp, NC));
  GT_TRY(gt_op_residual_forward(be, a.res2, in, tmp, NC));
  GT_TRY(gt_op_rmsnorm_forward(be, a.n2, a.rstd2, a.res2, P(NORM2), c->eps, N, C));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.gate, a.n2, GATEW, NULL, N, C, Hl));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.up, a.n2, UPW, NULL, N, C, Hl));
  GT_TRY(gt_op_swiglu_forward(be, a.h, a.gate, a.up, (size_t)N * (size_t)Hl));
  if (ctx->recompute) return GT_OK;
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.h, DOWNW, NULL, N, Hl, C));
  GT_TRY(tp_sum(self, tmp, NC));
  return gt_op_residual_forward(be, out, a.res2, tmp, NC);
}

static gt_status llama_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                                float *acts) {
  const llama_cfg *c = self->state;
  gt_backend *be = ctx->be;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, KVl = c->KVl, Hl = c->Hl;
  size_t NC = (size_t)N * (size_t)C, NCl = (size_t)N * (size_t)Cl, NKVl = (size_t)N * (size_t)KVl;
  size_t NHl = (size_t)N * (size_t)Hl;
  llama_acts a = layout(self, acts, B, T);
  float *dres2 = ctx->scratch, *dn = dres2 + NC, *datty = dn + NC, *dq = datty + NCl, *dk = dq + NCl;
  float *dv = dk + NKVl, *dh = dv + NKVl, *dgate = dh + NHl, *dup = dgate + NHl;

  /* MLP branch: out = res2 + down(swiglu(gate(n2), up(n2))). */
  GT_TRY(gt_backend_memcpy(be, dres2, dout, NC * sizeof(float), GT_COPY_D2D, NULL));
  GT_TRY(GT_ZERO(be, dh, NHl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dh, NULL, dout, a.h, DOWNW, N, Hl, C));
  GT_TRY(GT_ZERO(be, dgate, 2 * NHl)); /* dgate, dup */
  GT_TRY(gt_op_swiglu_backward(be, dgate, dup, dh, a.gate, a.up, NHl));
  GT_TRY(GT_ZERO(be, dn, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dn, NULL, dgate, a.n2, GATEW, N, C, Hl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dn, NULL, dup, a.n2, UPW, N, C, Hl));
  GT_TRY(gt_layer_grads_final(self, GATEW, 3));
  GT_TRY(tp_sum(self, dn, NC));
  GT_TRY(gt_op_rmsnorm_backward(be, dres2, G(NORM2), dn, a.res2, P(NORM2), a.rstd2, N, C));

  /* Attention branch: res2 = in + o(attention(rope(q), rope(k), v)). */
  GT_TRY(gt_op_residual_backward(be, din, NULL, dres2, NC));
  GT_TRY(GT_ZERO(be, datty, NCl));
  GT_TRY(gt_layer_linear_backward(self, ctx, datty, NULL, dres2, a.atty, OW, N, Cl, C));
  GT_TRY(GT_ZERO(be, dq, NCl + 2 * NKVl)); /* dq, dk, dv */
  GT_TRY(gt_op_attention_gqa_backward(be, dq, dk, dv, datty, a.q, a.k, a.v, a.atty, a.lse, B, T, Cl, c->NHl, c->NKVl));
  GT_TRY(gt_op_rope_backward(be, dq, dq, B, T, c->NHl, c->hs, Cl, c->theta, c->scale));
  GT_TRY(gt_op_rope_backward(be, dk, dk, B, T, c->NKVl, c->hs, KVl, c->theta, c->scale));
  GT_TRY(GT_ZERO(be, dn, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dn, NULL, dq, a.n1, QW, N, C, Cl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dn, NULL, dk, a.n1, KW, N, C, KVl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dn, NULL, dv, a.n1, VW, N, C, KVl));
  GT_TRY(gt_layer_grads_final(self, QW, 5)); /* q, k, v, o, norm2 */
  GT_TRY(tp_sum(self, dn, NC));
  return gt_op_rmsnorm_backward(be, din, G(NORM1), dn, in, P(NORM1), a.rstd1, N, C);
}

gt_status gt_llama_block_settings(const gt_layer *l, gt_llama_block_config *out) {
  if (!l || l->type != &gt_llama_block_layer || !l->state)
    return gt_errorf(GT_EINVAL, "gt_llama_block_settings: the layer is no built llama block");
  const llama_cfg *c = l->state;
  *out = (gt_llama_block_config){.C = c->C,
                                 .NH = c->NH,
                                 .n_kv_heads = c->NKV,
                                 .mlp_hidden = c->H,
                                 .eps = c->eps,
                                 .rope_theta = c->theta,
                                 .rope_scale = c->scale};
  return GT_OK;
}

/* This rank's share of the work. */
static double llama_flops(const gt_layer *self, int B, int T) {
  const llama_cfg *c = self->state;
  double N = (double)B * T, C = c->C, Cl = c->Cl, KVl = c->KVl, Hl = c->Hl;
  double linear = 2.0 * N * (2 * Cl * C + 2 * KVl * C + 3 * C * Hl);
  double attention = 2.0 * 2.0 * B * (double)T * T * Cl; /* QK^T and AV, full (unmasked) */
  return linear + attention;
}

const gt_layer_type gt_llama_block_layer = {
    .name = "llama_block",
    .build = llama_build,
    .acts_floats = llama_acts_floats,
    .scratch_floats = llama_scratch,
    .forward = llama_forward,
    .backward = llama_backward,
    .flops = llama_flops,
    .destroy = gt_layer_free_state,
    .attn_floats = llama_attn_floats,
};
