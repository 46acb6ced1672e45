/* The GPT-2 transformer block, pre-LayerNorm:
 *
 *   x2  = x  + proj(attention(qkv(ln1(x))))
 *   out = x2 + fc2(gelu(fc1(ln2(x2))))
 *
 * Forward and backward are written out step by step in the manner of llm.c;
 * every saved activation has a named slot below.
 *
 * Split across a tensor-parallel group of p ranks (Megatron's pattern), each
 * rank holds NH/p heads: qkv and fc1 are column-parallel (rank r holds its
 * heads' rows of the weight), proj and fc2 are row-parallel (the matching
 * columns). Each branch then produces a partial sum that one all-reduce
 * completes, in forward; in backward, the gradient reaching each LayerNorm
 * is a partial sum completed the same way. LayerNorms and the row-parallel
 * biases are held whole by every rank, and their gradients come out
 * identical on every rank, so they need no reduction.
 *
 * With sequence parallelism on, the block takes and returns a shard of the
 * token rows: LayerNorms and residual adds run on N/p rows, an all-gather
 * before each column-parallel product rebuilds the whole input, and a
 * reduce-scatter after each row-parallel product replaces the all-reduce
 * (the same bytes moved, and the LayerNorm work divided by p).
 *
 * Recomputing attention (GT_RECOMPUTE_ATTENTION), the block does not save
 * its attention core's output and softmax state (att, atty): forward makes
 * them in scratch, and backward makes them again there from the saved qkv
 * before it needs them. Recomputed whole (ctx->recompute), forward stops
 * once the saved activations are made: the MLP's second product, its
 * reduction and the residual add only make the output. */
#include <math.h>

#include "core/layers/layer_util.h"
#include "giant/layers.h"
#include "core/model/model_engine.h"
#include "giant/group.h"

enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FC1W, FC1B, FC2W, FC2B, NPARAMS };

typedef struct block_cfg {
  int C, NH, H;    /* the whole block */
  int Cl, NHl, Hl; /* this rank's share: attention width, heads, MLP width */
} block_cfg;

/* Offsets (in floats) of the saved activations for one (B,T). att is what
 * attention keeps for backward, sized by the model's attention kind
 * (gt_layer_attention_saved_floats). Without `core`, att and atty take no
 * room (NULL): place_core puts them in scratch. */
typedef struct block_acts {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu;
  size_t total;
  size_t att_floats, core_floats; /* att, and att with atty */
} block_acts;

static block_acts layout(const gt_layer *self, float *base, int B, int T, bool core) {
  const block_cfg *c = self->state;
  size_t BT = (size_t)B * (size_t)T, C = (size_t)c->C, Cl = (size_t)c->Cl, Hl = (size_t)c->Hl;
  size_t att = gt_layer_attention_saved_floats(self, B, T, c->NHl);
  size_t sizes[12] = {BT * C, BT, BT, 3 * BT * Cl, att, BT * Cl, BT * C, BT * C, BT, BT, BT * Hl, BT * Hl};
  float **slots[12];
  block_acts a;
  slots[0] = &a.ln1;
  slots[1] = &a.ln1_mean;
  slots[2] = &a.ln1_rstd;
  slots[3] = &a.qkv;
  slots[4] = &a.att;
  slots[5] = &a.atty;
  slots[6] = &a.res2;
  slots[7] = &a.ln2;
  slots[8] = &a.ln2_mean;
  slots[9] = &a.ln2_rstd;
  slots[10] = &a.fch;
  slots[11] = &a.fch_gelu;
  a.att_floats = sizes[4];
  a.core_floats = sizes[4] + sizes[5];
  if (!core) sizes[4] = sizes[5] = 0;
  size_t off = 0;
  for (int i = 0; i < 12; i++) {
    *slots[i] = base && sizes[i] ? base + off : NULL;
    off += sizes[i];
  }
  a.total = off;
  return a;
}

/* Whether the saved activations hold the attention core. */
static bool keeps_core(const gt_layer *self) { return gt_layer_recompute(self) != GT_RECOMPUTE_ATTENTION; }

static gt_status block_build(gt_layer *self, const void *config) {
  const gt_block_config *u = config;
  if (!u) return gt_errorf(GT_EINVAL, "a configuration is required");
  if (u->C <= 0 || u->NH <= 0) return gt_errorf(GT_EINVAL, "block needs C and NH > 0, got %d and %d", u->C, u->NH);
  if (u->C % u->NH) return gt_errorf(GT_EINVAL, "block: C=%d is not divisible by the head count NH=%d", u->C, u->NH);
  int p = gt_layer_tp_size(self), H = u->mlp_hidden > 0 ? u->mlp_hidden : 4 * u->C;
  if (u->NH % p) return gt_errorf(GT_EINVAL, "tensor parallelism tp=%d does not divide the head count NH=%d", p, u->NH);
  if (H % p) return gt_errorf(GT_EINVAL, "tensor parallelism tp=%d does not divide the MLP width %d", p, H);
  block_cfg c = {.C = u->C, .NH = u->NH, .H = H, .Cl = u->C / p, .NHl = u->NH / p, .Hl = H / p};
  GT_TRY(gt_layer_keep_config(self, &c, sizeof c));
  self->in_dim = self->out_dim = c.C;
  /* GPT-2 scales the init of the projections that feed the residual stream. */
  float std = 0.02f, res_std = u->n_layers_total > 0 ? 0.02f / sqrtf(2.0f * (float)u->n_layers_total) : 0.02f;
  /* qkv is declared (3, C, C) so that a split along dimension 1 gives each
   * rank the q, k and v rows of its own heads. */
  const gt_param_spec specs[NPARAMS] = {
      {"ln1.w", 1, {c.C}, GT_INIT_ONES, 0, false, false, 0, false},
      {"ln1.b", 1, {c.C}, GT_INIT_ZEROS, 0, false, false, 0, false},
      {"qkv.w", 3, {3, c.C, c.C}, GT_INIT_NORMAL, std, true, true, 1, true},
      {"qkv.b", 2, {3, c.C}, GT_INIT_ZEROS, 0, false, true, 1, false},
      {"proj.w", 2, {c.C, c.C}, GT_INIT_NORMAL, res_std, true, true, 1, true},
      {"proj.b", 1, {c.C}, GT_INIT_ZEROS, 0, false, false, 0, false},
      {"ln2.w", 1, {c.C}, GT_INIT_ONES, 0, false, false, 0, false},
      {"ln2.b", 1, {c.C}, GT_INIT_ZEROS, 0, false, false, 0, false},
      {"fc1.w", 2, {c.H, c.C}, GT_INIT_NORMAL, std, true, true, 0, true},
      {"fc1.b", 1, {c.H}, GT_INIT_ZEROS, 0, false, true, 0, false},
      {"fc2.w", 2, {c.C, c.H}, GT_INIT_NORMAL, res_std, true, true, 1, true},
      {"fc2.b", 1, {c.C}, GT_INIT_ZEROS, 0, false, false, 0, false},
  };
  for (int i = 0; i < NPARAMS; i++) GT_TRY(gt_layer_declare_param(self, &specs[i], NULL));
  return GT_OK;
}

static size_t block_acts_floats(const gt_layer *self, int B, int T) {
  return layout(self, NULL, B, T, keeps_core(self)).total;
}

/* Of the saved tensors, what attention keeps (slot att of layout: the
 * probabilities, or with tiled attention a log-sum-exp per row); none when
 * attention is recomputed. */
static size_t block_attn_floats(const gt_layer *self, int B, int T) {
  return keeps_core(self) ? layout(self, NULL, B, T, true).att_floats : 0;
}

/* What forward and backward use of the scratch, the core aside. */
static size_t scratch_base(const gt_layer *self, int B, int T) {
  const block_cfg *c = self->state;
  size_t BT = (size_t)B * (size_t)T, datt = gt_layer_attention_scratch_floats(self, B, T, c->NHl);
  if (gt_layer_seq_parallel(self)) /* backward_sp: dfull, dln (C each) + dsh, dres2 (C) + the rest, + 2C */
    return BT * (4 * (size_t)c->C + 4 * (size_t)c->Cl + 2 * (size_t)c->Hl) + datt + 2 * (size_t)c->C;
  /* backward: dres2, dln (C each), datty (Cl), dqkv (3Cl), dfch_gelu, dfch (Hl each), datt (full attention) */
  return BT * (2 * (size_t)c->C + 4 * (size_t)c->Cl + 2 * (size_t)c->Hl) + datt;
}

/* Recomputing attention, the core lies past the rest of the scratch. */
static size_t block_scratch(const gt_layer *self, int B, int T) {
  return scratch_base(self, B, T) + (keeps_core(self) ? 0 : layout(self, NULL, B, T, true).core_floats);
}

static void place_core(const gt_layer *self, const gt_layer_ctx *ctx, block_acts *a) {
  if (a->att || !a->core_floats) return;
  a->att = ctx->scratch + scratch_base(self, ctx->B, ctx->T);
  a->atty = a->att + a->att_floats;
}

#define P(i) gt_layer_param(self, i)
#define G(i) gt_layer_grad(self, i)

/* Completes a row-parallel partial sum across the tensor-parallel group. */
static gt_status tp_sum(gt_layer *self, float *buf, size_t n) {
  return self->tp ? self->tp->allreduce_sum(self->tp, buf, n) : GT_OK;
}

/* Backward, recomputing attention: the core again, from the saved qkv. */
static gt_status recompute_core(gt_layer *self, const gt_layer_ctx *ctx, block_acts *a, const block_cfg *c) {
  if (a->att) return GT_OK;
  place_core(self, ctx, a);
  return gt_layer_attention_forward(self, ctx, a->atty, a->att, a->qkv, ctx->B, ctx->T, c->Cl, c->NHl);
}

static gt_status block_forward_sp(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts);
static gt_status block_backward_sp(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout,
                                   float *din, float *acts);

static gt_status block_forward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  if (gt_layer_seq_parallel(self)) return block_forward_sp(self, ctx, in, out, acts);
  const block_cfg *c = self->state;
  gt_backend *be = ctx->be;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, Hl = c->Hl;
  size_t NC = (size_t)N * (size_t)C;
  block_acts a = layout(self, acts, B, T, keeps_core(self));
  place_core(self, ctx, &a);
  float *tmp = ctx->scratch; /* (N, C) branch output before the residual add */
  /* A row-parallel bias is added by one rank, before the sum. */
  bool bias_here = gt_layer_tp_rank(self) == 0;

  GT_TRY(gt_op_layernorm_forward(be, a.ln1, a.ln1_mean, a.ln1_rstd, in, P(LN1W), P(LN1B), N, C));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.qkv, a.ln1, QKVW, P(QKVB), N, C, 3 * Cl));
  GT_TRY(gt_layer_attention_forward(self, ctx, a.atty, a.att, a.qkv, B, T, Cl, c->NHl));
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.atty, PROJW, bias_here ? P(PROJB) : NULL, N, Cl, C));
  GT_TRY(tp_sum(self, tmp, NC));
  GT_TRY(gt_op_residual_forward(be, a.res2, in, tmp, NC));
  GT_TRY(gt_op_layernorm_forward(be, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(LN2W), P(LN2B), N, C));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.fch, a.ln2, FC1W, P(FC1B), N, C, Hl));
  GT_TRY(gt_op_gelu_forward(be, a.fch_gelu, a.fch, (size_t)N * (size_t)Hl));
  if (ctx->recompute) return GT_OK;
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.fch_gelu, FC2W, bias_here ? P(FC2B) : NULL, N, Hl, C));
  GT_TRY(tp_sum(self, tmp, NC));
  return gt_op_residual_forward(be, out, a.res2, tmp, NC);
}

static gt_status block_backward(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                                float *acts) {
  if (gt_layer_seq_parallel(self)) return block_backward_sp(self, ctx, in, dout, din, acts);
  const block_cfg *c = self->state;
  gt_backend *be = ctx->be;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, Hl = c->Hl;
  size_t NC = (size_t)N * (size_t)C, NCl = (size_t)N * (size_t)Cl, NHl = (size_t)N * (size_t)Hl;
  block_acts a = layout(self, acts, B, T, keeps_core(self));
  GT_TRY(recompute_core(self, ctx, &a, c));
  float *dres2 = ctx->scratch, *dln = dres2 + NC, *datty = dln + NC, *dqkv = datty + NCl;
  float *dfch_gelu = dqkv + 3 * NCl, *dfch = dfch_gelu + NHl, *datt = dfch + NHl;

  /* MLP branch: out = res2 + fc2(gelu(fc1(ln2(res2)))). */
  GT_TRY(gt_backend_memcpy(be, dres2, dout, NC * sizeof(float), GT_COPY_D2D, NULL));
  GT_TRY(GT_ZERO(be, dfch_gelu, NHl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dfch_gelu, G(FC2B), dout, a.fch_gelu, FC2W, N, Hl, C));
  GT_TRY(GT_ZERO(be, dfch, NHl));
  GT_TRY(gt_op_gelu_backward(be, dfch, a.fch, dfch_gelu, NHl));
  GT_TRY(GT_ZERO(be, dln, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dln, G(FC1B), dfch, a.ln2, FC1W, N, C, Hl));
  GT_TRY(gt_layer_grads_final(self, FC1W, 4)); /* fc1, fc2: two thirds of the block's weights */
  GT_TRY(tp_sum(self, dln, NC));
  GT_TRY(gt_op_layernorm_backward(be, dres2, G(LN2W), G(LN2B), dln, a.res2, P(LN2W), a.ln2_mean, a.ln2_rstd, N, C));

  /* Attention branch: res2 = in + proj(attention(qkv(ln1(in)))). */
  GT_TRY(gt_op_residual_backward(be, din, NULL, dres2, NC));
  GT_TRY(GT_ZERO(be, datty, NCl));
  GT_TRY(gt_layer_linear_backward(self, ctx, datty, G(PROJB), dres2, a.atty, PROJW, N, Cl, C));
  GT_TRY(gt_layer_grads_final(self, PROJW, 4)); /* proj, ln2 */
  GT_TRY(GT_ZERO(be, dqkv, 3 * NCl));
  GT_TRY(gt_layer_attention_backward(self, ctx, dqkv, datt, datty, a.qkv, a.atty, a.att, B, T, Cl, c->NHl));
  GT_TRY(GT_ZERO(be, dln, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dln, G(QKVB), dqkv, a.ln1, QKVW, N, C, 3 * Cl));
  GT_TRY(gt_layer_grads_final(self, QKVW, 2));
  GT_TRY(tp_sum(self, dln, NC));
  return gt_op_layernorm_backward(be, din, G(LN1W), G(LN1B), dln, in, P(LN1W), a.ln1_mean, a.ln1_rstd, N, C);
}

/* ---- sequence parallelism ---- */

static gt_status block_forward_sp(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts) {
  const block_cfg *c = self->state;
  gt_backend *be = ctx->be;
  gt_group *g = self->tp;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, Hl = c->Hl, rows = 0;
  GT_TRY(gt_layer_rows(self, ctx, &rows));
  size_t RC = (size_t)rows * (size_t)C, NC = (size_t)N * (size_t)C;
  block_acts a = layout(self, acts, B, T, keeps_core(self));
  place_core(self, ctx, &a);
  float *sh = ctx->scratch, *tmp = sh + RC; /* a shard (rows, C) and a whole (N, C) */
  bool bias_here = g->rank == 0;

  GT_TRY(gt_op_layernorm_forward(be, sh, a.ln1_mean, a.ln1_rstd, in, P(LN1W), P(LN1B), rows, C));
  GT_TRY(g->allgather(g, sh, a.ln1, RC));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.qkv, a.ln1, QKVW, P(QKVB), N, C, 3 * Cl));
  GT_TRY(gt_layer_attention_forward(self, ctx, a.atty, a.att, a.qkv, B, T, Cl, c->NHl));
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.atty, PROJW, bias_here ? P(PROJB) : NULL, N, Cl, C));
  GT_TRY(g->reduce_scatter_sum(g, tmp, sh, RC));
  GT_TRY(gt_op_residual_forward(be, a.res2, in, sh, RC));
  GT_TRY(gt_op_layernorm_forward(be, sh, a.ln2_mean, a.ln2_rstd, a.res2, P(LN2W), P(LN2B), rows, C));
  GT_TRY(g->allgather(g, sh, a.ln2, RC));
  GT_TRY(gt_layer_linear_forward(self, ctx, a.fch, a.ln2, FC1W, P(FC1B), N, C, Hl));
  GT_TRY(gt_op_gelu_forward(be, a.fch_gelu, a.fch, (size_t)N * (size_t)Hl));
  if (ctx->recompute) return GT_OK;
  GT_TRY(gt_layer_linear_forward(self, ctx, tmp, a.fch_gelu, FC2W, bias_here ? P(FC2B) : NULL, N, Hl, C));
  (void)NC;
  GT_TRY(g->reduce_scatter_sum(g, tmp, sh, RC));
  return gt_op_residual_forward(be, out, a.res2, sh, RC);
}

static gt_status block_backward_sp(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout,
                                   float *din, float *acts) {
  const block_cfg *c = self->state;
  gt_backend *be = ctx->be;
  gt_group *g = self->tp;
  int B = ctx->B, T = ctx->T, N = B * T, C = c->C, Cl = c->Cl, Hl = c->Hl, rows = 0;
  GT_TRY(gt_layer_rows(self, ctx, &rows));
  size_t RC = (size_t)rows * (size_t)C, NC = (size_t)N * (size_t)C, NCl = (size_t)N * (size_t)Cl;
  size_t NHl = (size_t)N * (size_t)Hl;
  block_acts a = layout(self, acts, B, T, keeps_core(self));
  GT_TRY(recompute_core(self, ctx, &a, c));
  float *dfull = ctx->scratch, *dln = dfull + NC, *dsh = dln + NC, *dres2 = dsh + RC, *datty = dres2 + RC;
  float *dqkv = datty + NCl, *dfch_gelu = dqkv + 3 * NCl, *dfch = dfch_gelu + NHl, *datt = dfch + NHl;
  float *lntmp = datt + gt_layer_attention_scratch_floats(self, B, T, c->NHl);

  /* MLP branch, with the whole output gradient gathered for the products. */
  GT_TRY(gt_backend_memcpy(be, dres2, dout, RC * sizeof(float), GT_COPY_D2D, NULL));
  GT_TRY(g->allgather(g, dout, dfull, RC));
  GT_TRY(GT_ZERO(be, dfch_gelu, NHl));
  GT_TRY(gt_layer_linear_backward(self, ctx, dfch_gelu, G(FC2B), dfull, a.fch_gelu, FC2W, N, Hl, C));
  GT_TRY(GT_ZERO(be, dfch, NHl));
  GT_TRY(gt_op_gelu_backward(be, dfch, a.fch, dfch_gelu, NHl));
  GT_TRY(GT_ZERO(be, dln, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dln, G(FC1B), dfch, a.ln2, FC1W, N, C, Hl));
  GT_TRY(gt_layer_grads_final(self, FC1W, 4)); /* fc1, fc2: two thirds of the block's weights */
  GT_TRY(g->reduce_scatter_sum(g, dln, dsh, RC));
  GT_TRY(gt_layernorm_backward_shard(self, ctx, dres2, G(LN2W), G(LN2B), dsh, a.res2, P(LN2W), a.ln2_mean, a.ln2_rstd,
                                     rows, C, lntmp));

  /* Attention branch. */
  GT_TRY(gt_op_residual_backward(be, din, NULL, dres2, RC));
  GT_TRY(g->allgather(g, dres2, dfull, RC));
  GT_TRY(GT_ZERO(be, datty, NCl));
  GT_TRY(gt_layer_linear_backward(self, ctx, datty, G(PROJB), dfull, a.atty, PROJW, N, Cl, C));
  GT_TRY(gt_layer_grads_final(self, PROJW, 4)); /* proj, ln2 */
  GT_TRY(GT_ZERO(be, dqkv, 3 * NCl));
  GT_TRY(gt_layer_attention_backward(self, ctx, dqkv, datt, datty, a.qkv, a.atty, a.att, B, T, Cl, c->NHl));
  GT_TRY(GT_ZERO(be, dln, NC));
  GT_TRY(gt_layer_linear_backward(self, ctx, dln, G(QKVB), dqkv, a.ln1, QKVW, N, C, 3 * Cl));
  GT_TRY(gt_layer_grads_final(self, QKVW, 2));
  GT_TRY(g->reduce_scatter_sum(g, dln, dsh, RC));
  return gt_layernorm_backward_shard(self, ctx, din, G(LN1W), G(LN1B), dsh, in, P(LN1W), a.ln1_mean, a.ln1_rstd, rows,
                                     C, lntmp);
}

/* This rank's share of the work. */
static double block_flops(const gt_layer *self, int B, int T) {
  const block_cfg *c = self->state;
  double N = (double)B * T, C = c->C, Cl = c->Cl, Hl = c->Hl;
  double linear = 2.0 * N * (3 * Cl * C + Cl * C + 2 * C * Hl);
  double attention = 2.0 * 2.0 * B * (double)T * T * Cl; /* QK^T and AV, full (unmasked) */
  return linear + attention;
}

const gt_layer_type gt_block_layer = {
    .name = "block",
    .build = block_build,
    .acts_floats = block_acts_floats,
    .scratch_floats = block_scratch,
    .forward = block_forward,
    .backward = block_backward,
    .flops = block_flops,
    .destroy = gt_layer_free_state,
    .supports_seq_parallel = true,
    .attn_floats = block_attn_floats,
};
