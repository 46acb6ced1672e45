/* ZeRO-2: the gradients sharded over data parallelism.
 *
 * With par.zero >= 2 and more than one data-parallel rank, the model's
 * gradient buffer holds only this rank's shard [lo, hi) of the flat
 * buffer: the same equal, contiguous ranges ZeRO-1 updates (the buffer is
 * padded to a multiple of dp, buffer_multiple), so the optimizer, the
 * checkpoints and the peers' slices keep working by flat ranges.
 *
 * Backward writes a layer's gradients into one of two staging slots, each
 * as wide as the widest layer's own parameters, laid out as the flat
 * buffer lays them out (a layer's own parameters are one contiguous range
 * of it). After the layer's backward the slot goes to a sink (the data-
 * parallel sync, in parallel/): it reduces each owner's piece of the range
 * to that owner, in place, asynchronously. Before the slot is used again
 * (two layers later, or at the step's end) the sends are waited for and
 * the owner adds its piece to its shard, so every micro-batch's gradients
 * accumulate in the shard as they would in the flat buffer.
 *
 * A parameter whose gradient is summed from more than one place before it
 * is final (a storage with a tied user, whose two layers' backwards both
 * add into it; a weight tied across pipeline stages, summed over the
 * stages after the schedule) is held whole in a buffer of its own for the
 * step, and goes to its owners at the step's end (gt_model_flush_grads).
 * For a GPT with a tied embedding this is the table once.
 *
 * The accumulation x += y runs as an SGD update with learning rate -1 and
 * no decay or momentum (x - (-1) * (y * 1 + 0 * x)): every backend has it,
 * and it gives x + y exactly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"

#define HELD_SLOT 2 /* the sink's id for the held gradients */

struct gt_zero {
  size_t lo, hi;      /* this rank's shard of the flat buffer */
  size_t slot_floats; /* the widest layer's own range */
  float *slot[2];
  int slot_layer[2]; /* the layer whose gradients a slot holds, -1: none */
  int *layer_slot;   /* per layer: the slot its running backward writes, -1: none (a slot may still
                        hold its previous micro-batch's, in flight) */
  bool pending[2];   /* its sends are in flight */
  int next;
  size_t *layer_lo, *layer_hi; /* per layer: its own parameters' floats, held ones left out (lo == hi: none) */
  float *held;                 /* gradients kept whole for the step */
  size_t *held_off;            /* per storage parameter: floats to its gradient in held, or SIZE_MAX */
  size_t held_floats;
  gt_grad_sink sink;
};

/* Slot k holds nothing any more. */
static void forget(gt_zero *z, int k) {
  if (z->slot_layer[k] >= 0 && z->layer_slot[z->slot_layer[k]] == k) z->layer_slot[z->slot_layer[k]] = -1;
  z->slot_layer[k] = -1;
}

static int storage_of(const gt_model *m, int p) { return m->params[p].tied_to >= 0 ? m->params[p].tied_to : p; }

bool gt_model_grads_sharded(const gt_model *m) { return m->zero != NULL; }

void gt_model_grad_range(const gt_model *m, size_t *lo, size_t *hi) {
  *lo = m->zero ? m->zero->lo : 0;
  *hi = m->zero ? m->zero->hi : m->nfloats;
}

float *gt_model_grad_at(const gt_model *m, size_t i) {
  if (!m->zero) return m->grad_buf + i;
  return i >= m->zero->lo && i <= m->zero->hi ? m->grad_buf + (i - m->zero->lo) : NULL;
}

float *gt_model_param_grad(const gt_model *m, int i) {
  const gt_param *p = &m->params[i];
  if (!p->local) return NULL;
  if (!m->zero) return m->grad_buf + p->offset;
  size_t h = m->zero->held_off[storage_of(m, i)];
  return h == SIZE_MAX ? NULL : m->zero->held + h;
}

/* Whether storage parameter q's gradient is summed from several places. */
static bool summed_from_several(const gt_model *m, int q) {
  const gt_param *p = &m->params[q];
  if (!p->local || p->tied_to >= 0 || p->numel == 0) return false;
  if (gt_model_param_tied_across_stages(m, q)) return true;
  for (int j = q + 1; j < m->nparams; j++)
    if (m->params[j].tied_to == q && m->params[j].local) return true;
  return false;
}

static gt_status lay_out(gt_model *m, gt_zero *z) {
  for (int q = 0; q < m->nparams; q++) {
    z->held_off[q] = SIZE_MAX;
    if (!summed_from_several(m, q)) continue;
    z->held_off[q] = z->held_floats;
    z->held_floats += (m->params[q].numel + 15) & ~(size_t)15;
  }
  z->slot_floats = 16;
  for (int i = 0; i < m->nlayers; i++) {
    const gt_layer *l = m->layers[i];
    z->layer_lo[i] = z->layer_hi[i] = 0;
    bool any = false;
    for (int p = l->first_param; l->local && p < l->first_param + l->nparams; p++) {
      const gt_param *pp = &m->params[p];
      if (pp->tied_to >= 0 || pp->numel == 0 || z->held_off[p] != SIZE_MAX) continue;
      size_t end = pp->offset + ((pp->numel + 15) & ~(size_t)15);
      if (!any || pp->offset < z->layer_lo[i]) z->layer_lo[i] = pp->offset;
      if (!any || end > z->layer_hi[i]) z->layer_hi[i] = end;
      any = true;
    }
    if (z->layer_hi[i] - z->layer_lo[i] > z->slot_floats) z->slot_floats = z->layer_hi[i] - z->layer_lo[i];
  }
  return GT_OK;
}

gt_status gt_zero_create(gt_model *m) {
  const gt_model_parallel *par = &m->par;
  if (par->zero < 2 || par->dp_size < 2) return GT_OK;
  if (m->cfg.offload_window > 0)
    return gt_errorf(GT_EUNSUPPORTED,
                     "ZeRO-%d with offloading is not supported: offloading already keeps the gradients in "
                     "host memory; use ZeRO-1 with the offload window, or ZeRO-%d without it",
                     par->zero, par->zero);
  if (par->dp_rank < 0 || par->dp_rank >= par->dp_size || m->nfloats % (size_t)par->dp_size)
    return gt_errorf(GT_EINVAL,
                     "ZeRO-%d needs the flat buffer (%zu floats) padded to a multiple of dp=%d and a rank "
                     "below it (got %d); set buffer_multiple from the plan",
                     par->zero, m->nfloats, par->dp_size, par->dp_rank);
  gt_zero *z = calloc(1, sizeof *z);
  if (!z) return gt_errorf(GT_ENOMEM, "out of memory for ZeRO-%d", par->zero);
  m->zero = z;
  size_t S = m->nfloats / (size_t)par->dp_size;
  z->lo = S * (size_t)par->dp_rank;
  z->hi = z->lo + S;
  z->slot_layer[0] = z->slot_layer[1] = -1;
  int L = m->nlayers ? m->nlayers : 1, P = m->nparams ? m->nparams : 1;
  z->layer_lo = calloc((size_t)L, sizeof *z->layer_lo);
  z->layer_hi = calloc((size_t)L, sizeof *z->layer_hi);
  z->layer_slot = malloc((size_t)L * sizeof *z->layer_slot);
  for (int i = 0; z->layer_slot && i < L; i++) z->layer_slot[i] = -1;
  z->held_off = calloc((size_t)P, sizeof *z->held_off);
  if (!z->layer_lo || !z->layer_hi || !z->held_off || !z->layer_slot)
    return gt_errorf(GT_ENOMEM, "out of memory for ZeRO-2");
  GT_TRY(lay_out(m, z));
  for (int k = 0; k < 2; k++) {
    gt_status st = gt_arena_alloc_as(m->arena, GT_MEM_GRADS, z->slot_floats * sizeof(float), (void **)&z->slot[k]);
    if (st != GT_OK) return gt_error_context(st, "ZeRO-2: gradient staging slot %d (%zu floats)", k, z->slot_floats);
  }
  if (z->held_floats) {
    gt_status st = gt_arena_alloc_as(m->arena, GT_MEM_GRADS, z->held_floats * sizeof(float), (void **)&z->held);
    if (st != GT_OK) return gt_error_context(st, "ZeRO-2: the tied parameters' gradients (%zu floats)", z->held_floats);
  }
  return gt_arena_alloc_as(m->arena, GT_MEM_GRADS, (S ? S : 1) * sizeof(float), (void **)&m->grad_buf);
}

void gt_zero_destroy(gt_model *m) {
  gt_zero *z = m->zero;
  if (!z) return;
  for (int k = 0; k < 2; k++)
    if (z->pending[k] && z->sink.wait) (void)z->sink.wait(z->sink.ctx, k);
  for (int k = 0; k < 2; k++) gt_arena_free(m->arena, z->slot[k]);
  gt_arena_free(m->arena, z->held);
  free(z->layer_lo);
  free(z->layer_hi);
  free(z->layer_slot);
  free(z->held_off);
  free(z);
  m->zero = NULL;
}

size_t gt_zero_device_bytes(const gt_model *m) {
  const gt_zero *z = m->zero;
  if (!z) return 0;
  size_t S = z->hi - z->lo;
  return gt_arena_block_size((S ? S : 1) * sizeof(float)) + 2 * gt_arena_block_size(z->slot_floats * sizeof(float)) +
         (z->held_floats ? gt_arena_block_size(z->held_floats * sizeof(float)) : 0);
}

gt_status gt_model_set_grad_sink(gt_model *m, const gt_grad_sink *sink) {
  if (!m->zero) return gt_errorf(GT_ESTATE, "the model's gradients are not sharded: it takes no gradient sink");
  /* Sends in flight end with the sink that started them; their sums are
   * dropped (a step abandoned). */
  for (int k = 0; k < 2; k++) {
    if (m->zero->pending[k] && m->zero->sink.wait) (void)m->zero->sink.wait(m->zero->sink.ctx, k);
    m->zero->pending[k] = false;
    forget(m->zero, k);
  }
  m->zero->sink = sink ? *sink : (gt_grad_sink){0};
  return GT_OK;
}

/* x[0, n) += y[0, n) (see the opening comment). */
static gt_status accumulate(gt_model *m, float *x, const float *y, size_t n) {
  gt_sgd_args a = {.lr = -1.0f, .grad_scale = 1.0f};
  return gt_op_sgd_update(m->be, x, y, NULL, n, &a);
}

/* The part of the flat floats [a, b), held at g, that lies in this
 * rank's shard is added to the shard. */
static gt_status add_to_shard(gt_model *m, const float *g, size_t a, size_t b) {
  gt_zero *z = m->zero;
  size_t s = a > z->lo ? a : z->lo, e = b < z->hi ? b : z->hi;
  return s < e ? accumulate(m, m->grad_buf + (s - z->lo), g + (s - a), e - s) : GT_OK;
}

/* The runs of layer i's own parameters that are not held, one after the
 * other in the flat buffer: fn on each run [a, b). */
static gt_status each_run(gt_model *m, int i, gt_status (*fn)(gt_model *m, int k, size_t a, size_t b), int k) {
  gt_zero *z = m->zero;
  const gt_layer *l = m->layers[i];
  size_t a = 0, b = 0;
  bool open = false;
  for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
    const gt_param *pp = &m->params[p];
    if (pp->tied_to >= 0 || pp->numel == 0) continue;
    size_t end = pp->offset + ((pp->numel + 15) & ~(size_t)15);
    if (z->held_off[p] != SIZE_MAX) {
      if (open) GT_TRY(fn(m, k, a, b));
      open = false;
      continue;
    }
    if (open && pp->offset == b) {
      b = end;
      continue;
    }
    if (open) GT_TRY(fn(m, k, a, b));
    a = pp->offset;
    b = end;
    open = true;
  }
  return open ? fn(m, k, a, b) : GT_OK;
}

static gt_status send_run(gt_model *m, int k, size_t a, size_t b) {
  gt_zero *z = m->zero;
  float *g = z->slot[k] + (a - z->layer_lo[z->slot_layer[k]]);
  return z->sink.send(z->sink.ctx, k, g, a, b);
}

static gt_status add_run(gt_model *m, int k, size_t a, size_t b) {
  gt_zero *z = m->zero;
  return add_to_shard(m, z->slot[k] + (a - z->layer_lo[z->slot_layer[k]]), a, b);
}

/* Slot k's sends are done; the owner's sums go into its shard. */
static gt_status settle(gt_model *m, int k) {
  gt_zero *z = m->zero;
  if (!z->pending[k]) return GT_OK;
  z->pending[k] = false;
  gt_status st = z->sink.wait(z->sink.ctx, k);
  if (st != GT_OK)
    return gt_error_context(st, "sending layer '%s''s gradients to their owners", m->layers[z->slot_layer[k]]->name);
  return each_run(m, z->slot_layer[k], add_run, k);
}

gt_status gt_zero_grads_begin(gt_model *m, int i) {
  gt_zero *z = m->zero;
  if (z->layer_hi[i] == z->layer_lo[i]) return GT_OK;
  if (!z->sink.send) return gt_errorf(GT_ESTATE, "the model's gradients are sharded but no sink takes them");
  int k = z->next;
  z->next ^= 1;
  GT_TRY(settle(m, k));
  if (z->slot_layer[k] >= 0 && z->layer_slot[z->slot_layer[k]] == k) z->layer_slot[z->slot_layer[k]] = -1;
  z->slot_layer[k] = i;
  z->layer_slot[i] = k;
  return gt_backend_memset(m->be, z->slot[k], 0, (z->layer_hi[i] - z->layer_lo[i]) * sizeof(float), NULL);
}

gt_status gt_zero_grads_end(gt_model *m, int i) {
  gt_zero *z = m->zero;
  int k = z->layer_slot[i];
  if (k < 0) return GT_OK;
  /* A collective started now reads what the kernels queued before it
   * wrote (on a GPU its stream waits for the compute stream's event), and
   * kernels queued after its wait read its result: no sync here. */
  z->pending[k] = true;
  return each_run(m, i, send_run, k);
}

float *gt_zero_grad(const gt_layer *self, int i) {
  const gt_model *m = self->model;
  const gt_zero *z = m->zero;
  int p = self->first_param + i;
  size_t h = z->held_off[storage_of(m, p)];
  if (h != SIZE_MAX) return z->held + h;
  int k = z->layer_slot[self->index];
  return k < 0 ? NULL : z->slot[k] + (m->params[p].offset - z->layer_lo[self->index]);
}

gt_status gt_model_flush_grads(gt_model *m) {
  gt_zero *z = m->zero;
  if (!z) return GT_OK;
  gt_status first = GT_OK;
  for (int k = 0; k < 2; k++) {
    int j = (z->next + k) & 1; /* the older first */
    gt_status st = settle(m, j);
    if (st != GT_OK && first == GT_OK) first = st;
    forget(z, j);
  }
  GT_TRY(first);
  if (!z->held_floats) return GT_OK;
  /* The held gradients are final now: each to its owners. */
  for (int q = 0; q < m->nparams; q++) {
    size_t h = z->held_off[q];
    if (h == SIZE_MAX) continue;
    const gt_param *p = &m->params[q];
    gt_status st = z->sink.send(z->sink.ctx, HELD_SLOT, z->held + h, p->offset, p->offset + p->numel);
    if (st != GT_OK && first == GT_OK) first = st;
  }
  gt_status st = z->sink.wait(z->sink.ctx, HELD_SLOT);
  if (first == GT_OK) first = st;
  GT_TRY(first);
  for (int q = 0; q < m->nparams; q++) {
    size_t h = z->held_off[q];
    if (h != SIZE_MAX)
      GT_TRY(add_to_shard(m, z->held + h, m->params[q].offset, m->params[q].offset + m->params[q].numel));
  }
  return GT_OK;
}

gt_status gt_zero_zero_grads(gt_model *m) {
  gt_zero *z = m->zero;
  /* Whatever is still in flight from an abandoned step is dropped. */
  for (int k = 0; k < 2; k++) {
    if (z->pending[k] && z->sink.wait) (void)z->sink.wait(z->sink.ctx, k);
    z->pending[k] = false;
    forget(z, k);
  }
  if (z->held) GT_TRY(gt_backend_memset(m->be, z->held, 0, z->held_floats * sizeof(float), NULL));
  return gt_backend_memset(m->be, m->grad_buf, 0, (z->hi - z->lo) * sizeof(float), NULL);
}
