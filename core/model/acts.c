/* Activations of one micro-batch, and the forward and backward passes. */
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/group.h"

/* The arena requests one micro-batch's activations make, in order: each
 * local layer's output and saved tensors (of which attn_floats are
 * attention), the two gradient buffers, the tokens and the targets. `take`
 * gets each request's bytes, the bytes of it that are attention, and where
 * its block goes (NULL when only counting): gt_acts_create allocates them
 * and the device estimate adds them up, from this one list. */
typedef gt_status (*take_fn)(void *ctx, size_t bytes, size_t attn, void **dst);

static gt_status each_request(const gt_model *m, gt_acts *a, take_fn take, void *ctx) {
  size_t BT = (size_t)m->cfg.B_max * (size_t)m->cfg.T_max;
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (!l->local) continue;
    GT_TRY(take(ctx, BT * (size_t)l->out_dim * sizeof(float), 0, a ? (void **)&a->out[i] : NULL));
    size_t n = l->type->acts_floats(l, m->cfg.B_max, m->cfg.T_max);
    size_t attn = l->type->attn_floats ? l->type->attn_floats(l, m->cfg.B_max, m->cfg.T_max) : 0;
    /* A layer recomputed whole saves into the model's one area instead. */
    if (n && !gt_model_recomputes(m, i))
      GT_TRY(take(ctx, n * sizeof(float), (attn < n ? attn : n) * sizeof(float), a ? (void **)&a->saved[i] : NULL));
  }
  for (int k = 0; k < 2; k++)
    GT_TRY(take(ctx, BT * (size_t)m->max_dim * sizeof(float), 0, a ? (void **)&a->dbuf[k] : NULL));
  if (m->nregions && gt_model_region_ways(m) > 1)
    GT_TRY(take(ctx, BT * (size_t)m->max_dim * sizeof(float), 0, a ? (void **)&a->rbuf : NULL));
  GT_TRY(take(ctx, BT * sizeof(int32_t), 0, a ? (void **)&a->tokens : NULL));
  return take(ctx, BT * sizeof(int32_t), 0, a ? (void **)&a->targets : NULL);
}

static gt_status take_block(void *ctx, size_t bytes, size_t attn, void **dst) {
  return gt_arena_alloc_parts(ctx, GT_MEM_ACTIVATIONS, bytes, GT_MEM_ATTENTION, attn, dst);
}

/* Adds a request as the arena sets it aside: the attention part exact, the
 * rest of the size class activations. */
static gt_status count_block(void *ctx, size_t bytes, size_t attn, void **dst) {
  (void)dst;
  size_t *sum = ctx, cls = gt_arena_block_size(bytes);
  sum[1] += attn;
  sum[0] += cls - attn;
  return GT_OK;
}

void gt_acts_device_bytes(const gt_model *m, size_t *acts, size_t *attn) {
  size_t sum[2] = {0, 0};
  (void)each_request(m, NULL, count_block, sum);
  *acts = sum[0];
  *attn = sum[1];
}

gt_status gt_acts_create(gt_model *m, gt_acts **out) {
  *out = NULL;
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  gt_acts *a = calloc(1, sizeof *a);
  if (!a) return gt_errorf(GT_ENOMEM, "out of memory creating activations");
  a->m = m;
  a->out = calloc((size_t)m->nlayers, sizeof *a->out);
  a->saved = calloc((size_t)m->nlayers, sizeof *a->saved);
  if (!a->out || !a->saved) {
    gt_acts_destroy(a);
    return gt_errorf(GT_ENOMEM, "out of memory creating activations");
  }
  gt_status s = each_request(m, a, take_block, m->arena);
  if (s != GT_OK) {
    gt_acts_destroy(a);
    return gt_error_context(s, "allocating activations for B=%d T=%d", m->cfg.B_max, m->cfg.T_max);
  }
  *out = a;
  return GT_OK;
}

void gt_acts_destroy(gt_acts *a) {
  if (!a) return;
  gt_arena *ar = a->m->arena;
  for (int i = 0; i < a->m->nlayers; i++) {
    if (a->out) gt_arena_free(ar, a->out[i]);
    if (a->saved) gt_arena_free(ar, a->saved[i]);
  }
  gt_arena_free(ar, a->dbuf[0]);
  gt_arena_free(ar, a->dbuf[1]);
  gt_arena_free(ar, a->rbuf);
  gt_arena_free(ar, a->tokens);
  gt_arena_free(ar, a->targets);
  free(a->out);
  free(a->saved);
  free(a);
}

int64_t gt_acts_targets(const gt_acts *a) { return a->ntargets; }

static void make_ctx(gt_model *m, gt_acts *a, float loss_scale, gt_layer_ctx *ctx) {
  ctx->be = m->be;
  ctx->B = a->B;
  ctx->T = a->T;
  ctx->tokens = a->tokens;
  ctx->targets = a->targets;
  ctx->loss_scale = loss_scale;
  ctx->scratch = m->scratch;
  ctx->precision = m->precision;
  ctx->recompute = false;
}

/* Token ids are checked on the host before they reach a device, where an
 * out-of-range id would read out of bounds; the same pass counts the valid
 * targets. */
static gt_status check_batch(const gt_model *m, const gt_batch *b, int64_t *valid) {
  if (b->B <= 0 || b->T <= 0) return gt_errorf(GT_EINVAL, "batch shape (%d, %d) must be positive", b->B, b->T);
  if (b->B > m->cfg.B_max)
    return gt_errorf(GT_EINVAL, "batch of %d rows is larger than the model's B_max %d", b->B, m->cfg.B_max);
  if (b->T > m->cfg.T_max)
    return gt_errorf(GT_EINVAL, "sequence of %d tokens is longer than the model's T_max %d", b->T, m->cfg.T_max);
  size_t n = (size_t)b->B * (size_t)b->T;
  int vin = m->vocab_in, vout = m->vocab_out;
  *valid = 0;
  for (size_t i = 0; i < n; i++) {
    if (b->inputs[i] < 0 || b->inputs[i] >= vin)
      return gt_errorf(GT_ERANGE, "token id %d at position %zu is outside the vocabulary [0, %d)", b->inputs[i], i,
                       vin);
    if (b->targets && (b->targets[i] < -1 || b->targets[i] >= vout))
      return gt_errorf(GT_ERANGE, "target id %d at position %zu is outside the vocabulary [0, %d)", b->targets[i], i,
                       vout);
    if (b->targets) *valid += b->targets[i] >= 0;
  }
  return GT_OK;
}

/* Copies the batch to the device and records its shape. */
static gt_status load_batch(gt_model *m, gt_acts *a, const gt_batch *batch) {
  int64_t valid = 0;
  GT_TRY(check_batch(m, batch, &valid));
  a->ntargets = valid;
  gt_backend *be = m->be;
  a->B = batch->B;
  a->T = batch->T;
  size_t BT = (size_t)a->B * (size_t)a->T;
  GT_TRY(gt_backend_memcpy(be, a->tokens, batch->inputs, BT * sizeof(int32_t), GT_COPY_H2D, NULL));
  if (batch->targets) {
    GT_TRY(gt_backend_memcpy(be, a->targets, batch->targets, BT * sizeof(int32_t), GT_COPY_H2D, NULL));
  } else {
    GT_TRY(gt_backend_memset(be, a->targets, 0xff, BT * sizeof(int32_t), NULL)); /* all -1 */
  }
  return GT_OK;
}

/* A replicated region of a split layout (docs/annotations.md): rank q of
 * the R ranks of the tensor-parallel group runs the region's layers on
 * rows [q*B/R, (q+1)*B/R) of the micro-batch, which are contiguous in every
 * activation. At the region's last layer the shares are all-gathered into
 * the whole output; backward takes its share of the whole output gradient
 * there, and all-gathers the input gradient at the region's first layer.
 * region_enter gives layer i the context of its rows when it is in a
 * region (else the whole micro-batch's). */
typedef struct region_io {
  const struct gt_region *g; /* NULL: layer i is in no region */
  gt_layer_ctx ctx;
  size_t row0; /* the first row of this rank's share */
} region_io;

gt_status gt_model_check_rows(const gt_model *m, int B) {
  int R = gt_model_region_ways(m);
  if (!m->nregions || R < 2 || B % R == 0) return GT_OK;
  return gt_errorf(GT_EINVAL,
                   "a micro-batch of %d rows does not divide among the %d ranks of the replicated region "
                   "'%s'..'%s': use a multiple of %d rows",
                   B, R, m->layers[m->regions[0].lo]->name, m->layers[m->regions[0].hi]->name, R);
}

static gt_status region_enter(gt_model *m, gt_acts *a, const gt_layer_ctx *ctx, int i, region_io *r) {
  int R = gt_model_region_ways(m);
  r->g = R > 1 ? gt_model_region_of(m, i) : NULL;
  r->ctx = *ctx;
  r->row0 = 0;
  if (!r->g) return GT_OK;
  GT_TRY(gt_model_check_rows(m, a->B));
  int rows = a->B / R;
  r->row0 = (size_t)m->par.tp->rank * (size_t)rows;
  r->ctx.B = rows;
  r->ctx.tokens = ctx->tokens + r->row0 * (size_t)a->T;
  r->ctx.targets = ctx->targets + r->row0 * (size_t)a->T;
  return GT_OK;
}

/* A pointer at this rank's rows of a whole activation of `dim` features. */
static const float *share_of(const region_io *r, const gt_acts *a, const float *whole, int dim) {
  return whole ? whole + r->row0 * (size_t)a->T * (size_t)dim : NULL;
}

static gt_status region_gather(gt_model *m, const gt_acts *a, const region_io *r, const float *share, float *whole,
                               int dim) {
  gt_group *tp = m->par.tp;
  gt_status s = tp->allgather(tp, share, whole, (size_t)r->ctx.B * (size_t)a->T * (size_t)dim);
  return s == GT_OK ? s
                    : gt_error_context(s, "gathering the rows of the replicated region '%s'..'%s'",
                                       m->layers[r->g->lo]->name, m->layers[r->g->hi]->name);
}

gt_status gt_model_sum_region_grads(gt_model *m, size_t lo, size_t hi) {
  if (!m->nregions || gt_model_region_ways(m) < 2) return GT_OK;
  gt_group *tp = m->par.tp;
  for (int i = 0; i < m->nparams; i++) {
    const gt_param *p = &m->params[i];
    if (!p->local || p->tied_to >= 0 || !gt_model_region_of(m, p->layer)) continue;
    size_t s = p->offset > lo ? p->offset : lo, e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (s < e) GT_TRY(tp->allreduce_sum(tp, gt_model_grad_at(m, s), e - s));
  }
  return GT_OK;
}

/* Forward of layers [lo, hi]; `in` feeds layer lo. */
static gt_status forward_layers(gt_model *m, gt_acts *a, int lo, int hi, const float *in, float *loss) {
  GT_TRY(gt_model_refresh_bf16(m));
  gt_layer_ctx ctx;
  make_ctx(m, a, 0.0f, &ctx);
  for (int i = lo; i <= hi; i++) {
    gt_layer *l = m->layers[i];
    if (m->off) GT_TRY(gt_offload_layer_ready(m, i, lo, hi, +1));
    if (m->zero3) GT_TRY(gt_zero3_layer_ready(m, i, lo, hi, +1));
    region_io r;
    GT_TRY(region_enter(m, a, &ctx, i, &r));
    float *out = a->out[i];
    if (r.g && i == r.g->lo) in = share_of(&r, a, in, l->in_dim);
    if (r.g && i == r.g->hi) out = a->rbuf;
    gt_status s = l->type->forward(l, &r.ctx, in, out, gt_model_saved(m, a, i));
    if (s != GT_OK) return gt_error_context(s, "forward of layer '%s'", l->name);
    if (m->off) GT_TRY(gt_offload_layer_done(m, i));
    if (r.g && i == r.g->hi) GT_TRY(region_gather(m, a, &r, a->rbuf, a->out[i], l->out_dim));
    in = a->out[i];
  }
  a->forward_done = true;
  if (loss && hi == m->nlayers - 1) {
    size_t BT = (size_t)a->B * (size_t)a->T;
    GT_TRY(gt_backend_download(m->be, m->host_losses, a->out[hi], BT * sizeof(float)));
    double sum = 0;
    for (size_t i = 0; i < BT; i++) sum += m->host_losses[i];
    *loss = a->ntargets ? (float)(sum / (double)a->ntargets) : 0.0f;
  }
  return GT_OK;
}

/* Offloaded: layer i's gradients are on the host; its hook may read them. */
static gt_status finish_grads(gt_model *m, int i) {
  GT_TRY(gt_offload_grads_wait(m, i));
  return m->grad_hook ? m->grad_hook(m->grad_hook_ctx, i) : GT_OK;
}

/* Backward of layers [lo, hi] from dout (NULL at the loss layer); *din gets
 * the gradient of layer lo's input (NULL for layer 0). `in_lo` is what fed
 * layer lo in forward. */
static gt_status backward_layers(gt_model *m, gt_acts *a, int lo, int hi, const float *in_lo, const float *dout,
                                 float loss_scale, const float **din_out) {
  gt_backend *be = m->be;
  gt_layer_ctx ctx;
  make_ctx(m, a, loss_scale, &ctx);
  int k = 0;
  /* Offloaded, a layer's gradients reach the host while the layer below
   * computes; its hook runs once they are there. */
  int pending = -1;
  for (int i = hi; i >= lo; i--) {
    gt_layer *l = m->layers[i];
    region_io r;
    GT_TRY(region_enter(m, a, &ctx, i, &r));
    bool gather = r.g && i == r.g->lo && i > 0; /* the input gradient of a region's rows, gathered below */
    float *din = NULL, *ldin = NULL;
    if (i > 0) {
      din = ldin = a->dbuf[k];
      k ^= 1;
      if (gather) ldin = a->rbuf;
      /* Backward kernels accumulate, so the input gradient starts at zero. */
      GT_TRY(gt_backend_memset(be, ldin, 0, (size_t)r.ctx.B * (size_t)a->T * (size_t)l->in_dim * sizeof(float), NULL));
    }
    const float *in = i > lo ? a->out[i - 1] : in_lo;
    if (r.g && i == r.g->lo) in = share_of(&r, a, in, l->in_dim);
    if (r.g && i == r.g->hi) dout = share_of(&r, a, dout, l->out_dim);
    if (m->off) {
      GT_TRY(gt_offload_layer_ready(m, i, lo, hi, -1));
      GT_TRY(gt_offload_grads_begin(m, i));
    }
    if (m->zero3) GT_TRY(gt_zero3_layer_ready(m, i, lo, hi, -1));
    /* Offloaded, the layer's weights are in their slot by now. */
    if (gt_model_recomputes(m, i)) GT_TRY(gt_model_recompute(m, i, &r.ctx, in));
    if (m->zero) GT_TRY(gt_zero_grads_begin(m, i));
    gt_status s = l->type->backward(l, &r.ctx, in, dout, ldin, gt_model_saved(m, a, i));
    if (s != GT_OK) return gt_error_context(s, "backward of layer '%s'", l->name);
    if (gather) GT_TRY(region_gather(m, a, &r, ldin, din, l->in_dim));
    if (m->zero) GT_TRY(gt_zero_grads_end(m, i));
    if (m->off) {
      GT_TRY(gt_offload_layer_done(m, i));
      GT_TRY(gt_offload_grads_end(m, i));
      /* The norm's sums, where asked: the layers back already are summed
       * while the last two come, whose copies had only the bottom layer's
       * short backward to hide behind. */
      if (i == lo) GT_TRY(gt_offload_sum_squares(m, lo + 2));
      if (pending >= 0) GT_TRY(finish_grads(m, pending));
      if (i == lo) GT_TRY(gt_offload_sum_squares(m, lo + 1));
      pending = i;
    } else if (m->grad_hook) {
      GT_TRY(m->grad_hook(m->grad_hook_ctx, i));
    }
    dout = din;
  }
  if (pending >= 0) GT_TRY(finish_grads(m, pending));
  if (m->off) GT_TRY(gt_offload_sum_squares(m, lo));
  a->forward_done = false;
  if (din_out) *din_out = dout;
  return GT_OK;
}

static gt_status whole_model(const gt_model *m) {
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  if (m->pp_stages > 1)
    return gt_errorf(GT_ESTATE,
                     "the model is cut into %d pipeline stages: run it stage by stage "
                     "(gt_model_forward_stage) or through the trainer",
                     m->pp_stages);
  return GT_OK;
}

gt_status gt_model_forward(gt_model *m, gt_acts *a, const gt_batch *batch, float *loss) {
  GT_TRY(whole_model(m));
  GT_TRY(load_batch(m, a, batch));
  return forward_layers(m, a, 0, m->nlayers - 1, NULL, loss);
}

gt_status gt_model_backward(gt_model *m, gt_acts *a, float loss_scale) {
  GT_TRY(whole_model(m));
  if (!a->forward_done) return gt_errorf(GT_ESTATE, "backward without a forward on these activations");
  gt_status s = backward_layers(m, a, 0, m->nlayers - 1, NULL, NULL, loss_scale, NULL);
  gt_offload_sum_squares_end(m); /* the request was for this backward */
  return s;
}

static gt_status local_stage(const gt_model *m, int stage, int *lo, int *hi) {
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  GT_TRY(gt_model_stage_layers(m, stage, lo, hi));
  if (!m->layers[*lo]->local) return gt_errorf(GT_EINVAL, "pipeline stage %d is not held by this rank", stage);
  return GT_OK;
}

gt_status gt_model_forward_stage(gt_model *m, gt_acts *a, const gt_batch *batch, int stage, const float *in,
                                 const float **out, float *loss) {
  int lo, hi;
  GT_TRY(local_stage(m, stage, &lo, &hi));
  if ((lo == 0) != (in == NULL))
    return gt_errorf(GT_EINVAL, "stage %d %s an input activation", stage, lo == 0 ? "takes no" : "needs");
  GT_TRY(load_batch(m, a, batch));
  a->stage_in = in;
  GT_TRY(forward_layers(m, a, lo, hi, in, loss));
  if (out) *out = a->out[hi];
  return GT_OK;
}

gt_status gt_model_backward_stage(gt_model *m, gt_acts *a, int stage, const float *dout, float loss_scale,
                                  const float **din) {
  int lo, hi;
  GT_TRY(local_stage(m, stage, &lo, &hi));
  if (!a->forward_done) return gt_errorf(GT_ESTATE, "backward of stage %d without its forward", stage);
  if ((hi == m->nlayers - 1) != (dout == NULL))
    return gt_errorf(GT_EINVAL, "stage %d %s an output gradient", stage, hi == m->nlayers - 1 ? "takes no" : "needs");
  return backward_layers(m, a, lo, hi, a->stage_in, dout, loss_scale, din);
}

gt_status gt_model_probs(gt_model *m, gt_acts *a, int b, int t, float *host_out) {
  gt_layer *l = m->layers[m->nlayers - 1];
  if (!l->type->probs) return gt_errorf(GT_EUNSUPPORTED, "loss layer '%s' does not expose probabilities", l->name);
  if (b < 0 || b >= a->B || t < 0 || t >= a->T)
    return gt_errorf(GT_ERANGE, "position (%d, %d) is outside the last batch (%d, %d)", b, t, a->B, a->T);
  gt_layer_ctx ctx;
  make_ctx(m, a, 0.0f, &ctx);
  return l->type->probs(l, &ctx, a->saved[m->nlayers - 1], b, t, host_out);
}
