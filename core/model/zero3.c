/* ZeRO-3: the parameters sharded over data parallelism.
 *
 * With par.zero >= 3 over more than one data-parallel rank, the model's
 * parameter buffer holds only this rank's shard [lo, hi) of the flat
 * buffer, the same range ZeRO-1 updates and ZeRO-2 keeps the gradients
 * of (zero.c does the gradients here as at stage 2). The optimizer updates
 * the shard in place; nothing is gathered after the step.
 *
 * A layer reads whole parameters while it runs, so the device keeps a
 * window of slots, each as wide as the widest layer's parameters (a tied
 * user's included: the LM head reads the embedding's table), laid out
 * parameter after parameter as the flat buffer lays them out. Before a
 * layer's forward, and again before its backward, its parameters are put
 * in a slot: this rank copies its own pieces in, and a source (the data-
 * parallel sync, in parallel/) broadcasts each owner's piece to the
 * others, asynchronously. The next layer in the direction of travel is
 * started at the same time, so its transfer overlaps this layer's
 * compute. A slot is reused for another layer once the two it holds have
 * moved on (least recently used); a layer still in its slot, with the
 * parameters unchanged since it was gathered, is not gathered again (the
 * loss layer's forward and backward, back to back).
 *
 * Under bf16 each slot has a bf16 twin, converted on the device once the
 * gather ends: the products read the bf16 bits of the fp32 master as
 * they would from the whole model's twin.
 *
 * Ordering: the source's collectives start behind the kernels queued so
 * far (on a GPU the communicator's stream waits for the compute stream),
 * and the compute stream reads a slot only after its gather was waited
 * for; the CPU backend runs kernels on the calling thread. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"

#define WINDOW 2 /* the layer running and the next one, coming */

typedef struct run {
  size_t lo, hi; /* floats of the flat buffer */
  size_t at;     /* where they go in the slot */
} run;

struct gt_zero3 {
  size_t lo, hi;      /* this rank's shard */
  size_t slot_floats; /* the widest layer's parameters, tied ones included */
  float *slot[WINDOW];
  uint16_t *slot16[WINDOW]; /* bf16: the slot's twin, or NULL */
  int slot_layer[WINDOW];   /* -1: empty */
  uint64_t slot_tick[WINDOW], slot_version[WINDOW];
  bool pending[WINDOW]; /* its gather is in flight */
  bool bf16_ok[WINDOW]; /* the twin holds the slot's values */
  int *layer_slot;      /* per layer: its slot, or -1 */
  size_t *w_off;        /* per parameter: floats to it in its layer's slot */
  size_t *layer_floats; /* per layer: floats it takes in a slot */
  run *runs;            /* per layer, contiguous: the runs its slot is gathered in */
  int *run_first, *run_n;
  uint64_t tick, version;
  gt_param_source src;
};

static int storage_of(const gt_model *m, int p) { return m->params[p].tied_to >= 0 ? m->params[p].tied_to : p; }
static size_t pad16(size_t n) { return (n + 15) & ~(size_t)15; }

bool gt_model_params_sharded(const gt_model *m) { return m->zero3 != NULL; }

void gt_model_param_range(const gt_model *m, size_t *lo, size_t *hi) {
  *lo = m->zero3 ? m->zero3->lo : 0;
  *hi = m->zero3 ? m->zero3->hi : m->nfloats;
}

float *gt_model_param_at(const gt_model *m, size_t i) {
  if (!m->zero3) return m->param_buf + i;
  return i >= m->zero3->lo && i <= m->zero3->hi ? m->param_buf + (i - m->zero3->lo) : NULL;
}

/* Slot layout and gather runs of every local layer. */
static gt_status lay_out(gt_model *m, gt_zero3 *z) {
  int nruns = 0;
  for (int i = 0; i < m->nlayers; i++) nruns += m->layers[i]->nparams;
  z->runs = calloc((size_t)(nruns ? nruns : 1), sizeof *z->runs);
  if (!z->runs) return gt_errorf(GT_ENOMEM, "out of memory for ZeRO-3");
  z->slot_floats = 16;
  int r = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const gt_layer *l = m->layers[i];
    z->run_first[i] = r;
    size_t at = 0;
    for (int p = l->first_param; l->local && p < l->first_param + l->nparams; p++) {
      const gt_param *q = &m->params[storage_of(m, p)];
      z->w_off[p] = at;
      if (q->numel == 0) continue;
      size_t a = q->offset, b = q->offset + pad16(q->numel);
      if (r > z->run_first[i] && z->runs[r - 1].hi == a && z->runs[r - 1].at + (a - z->runs[r - 1].lo) == at)
        z->runs[r - 1].hi = b;
      else
        z->runs[r++] = (run){.lo = a, .hi = b, .at = at};
      at += b - a;
    }
    z->run_n[i] = r - z->run_first[i];
    z->layer_floats[i] = at;
    if (at > z->slot_floats) z->slot_floats = at;
  }
  return GT_OK;
}

gt_status gt_zero3_create(gt_model *m, size_t *shard_floats) {
  const gt_model_parallel *par = &m->par;
  *shard_floats = m->nfloats;
  if (par->zero < 3 || par->dp_size < 2) return GT_OK;
  if (m->cfg.offload_window > 0)
    return gt_errorf(GT_EUNSUPPORTED,
                     "ZeRO-3 with offloading is not supported: offloading keeps the parameters in host memory "
                     "already; use ZeRO-1 with the offload window, or ZeRO-3 without it");
  if (par->dp_rank < 0 || par->dp_rank >= par->dp_size || m->nfloats % (size_t)par->dp_size)
    return gt_errorf(GT_EINVAL,
                     "ZeRO-3 needs the flat buffer (%zu floats) padded to a multiple of dp=%d and a rank "
                     "below it (got %d); set buffer_multiple from the plan",
                     m->nfloats, par->dp_size, par->dp_rank);
  gt_zero3 *z = calloc(1, sizeof *z);
  if (!z) return gt_errorf(GT_ENOMEM, "out of memory for ZeRO-3");
  m->zero3 = z;
  size_t S = m->nfloats / (size_t)par->dp_size;
  z->lo = S * (size_t)par->dp_rank;
  z->hi = z->lo + S;
  *shard_floats = S;
  int L = m->nlayers ? m->nlayers : 1, P = m->nparams ? m->nparams : 1;
  z->layer_slot = malloc((size_t)L * sizeof *z->layer_slot);
  z->layer_floats = calloc((size_t)L, sizeof *z->layer_floats);
  z->run_first = calloc((size_t)L, sizeof *z->run_first);
  z->run_n = calloc((size_t)L, sizeof *z->run_n);
  z->w_off = calloc((size_t)P, sizeof *z->w_off);
  if (!z->layer_slot || !z->layer_floats || !z->run_first || !z->run_n || !z->w_off)
    return gt_errorf(GT_ENOMEM, "out of memory for ZeRO-3");
  for (int i = 0; i < L; i++) z->layer_slot[i] = -1;
  GT_TRY(lay_out(m, z));
  for (int k = 0; k < WINDOW; k++) {
    z->slot_layer[k] = -1;
    gt_status st = gt_arena_alloc_as(m->arena, GT_MEM_PARAMS, z->slot_floats * sizeof(float), (void **)&z->slot[k]);
    if (st != GT_OK) return gt_error_context(st, "ZeRO-3: parameter slot %d (%zu floats)", k, z->slot_floats);
  }
  return GT_OK;
}

/* Every gather in flight ends (its result kept or not). */
static gt_status settle_all(gt_model *m) {
  gt_zero3 *z = m->zero3;
  gt_status first = GT_OK;
  for (int k = 0; k < WINDOW; k++) {
    if (!z->pending[k]) continue;
    z->pending[k] = false;
    gt_status st = z->src.wait ? z->src.wait(z->src.ctx, k) : GT_OK;
    if (st != GT_OK && first == GT_OK) first = st;
  }
  return first;
}

static void free_twins(gt_model *m) {
  gt_zero3 *z = m->zero3;
  for (int k = 0; k < WINDOW; k++) {
    gt_arena_free(m->arena, z->slot16[k]);
    z->slot16[k] = NULL;
  }
}

void gt_zero3_destroy(gt_model *m) {
  gt_zero3 *z = m->zero3;
  if (!z) return;
  (void)settle_all(m);
  free_twins(m);
  for (int k = 0; k < WINDOW; k++) gt_arena_free(m->arena, z->slot[k]);
  free(z->layer_slot);
  free(z->layer_floats);
  free(z->run_first);
  free(z->run_n);
  free(z->w_off);
  free(z->runs);
  free(z);
  m->zero3 = NULL;
}

gt_status gt_zero3_set_precision(gt_model *m) {
  gt_zero3 *z = m->zero3;
  GT_TRY(settle_all(m));
  free_twins(m);
  if (m->precision != GT_PRECISION_BF16) return GT_OK;
  for (int k = 0; k < WINDOW; k++) {
    z->bf16_ok[k] = false;
    gt_status st =
        gt_arena_alloc_as(m->arena, GT_MEM_BF16_COPY, z->slot_floats * sizeof(uint16_t), (void **)&z->slot16[k]);
    if (st != GT_OK) {
      free_twins(m);
      return gt_error_context(st, "ZeRO-3: the bf16 copy of parameter slot %d (%zu values)", k, z->slot_floats);
    }
  }
  return GT_OK;
}

size_t gt_zero3_device_bytes(const gt_model *m, size_t *bf16) {
  const gt_zero3 *z = m->zero3;
  size_t S = z->hi - z->lo;
  if (bf16) *bf16 = (size_t)WINDOW * gt_arena_block_size(z->slot_floats * sizeof(uint16_t));
  return gt_arena_block_size((S ? S : 1) * sizeof(float)) +
         (size_t)WINDOW * gt_arena_block_size(z->slot_floats * sizeof(float));
}

gt_status gt_model_set_param_source(gt_model *m, const gt_param_source *src) {
  if (!m->zero3) return gt_errorf(GT_ESTATE, "the model's parameters are not sharded: it takes no parameter source");
  /* Gathers in flight end with the source that started them; the slots
   * are gathered again. */
  gt_status st = settle_all(m);
  for (int k = 0; k < WINDOW; k++) {
    if (m->zero3->slot_layer[k] >= 0) m->zero3->layer_slot[m->zero3->slot_layer[k]] = -1;
    m->zero3->slot_layer[k] = -1;
  }
  m->zero3->src = src ? *src : (gt_param_source){0};
  return st;
}

void gt_zero3_params_changed(gt_model *m) {
  if (m->zero3) m->zero3->version++;
}

/* Starts gathering the flat floats [a, b) into dst on slot k's source
 * group: this rank's piece is copied in, the owners broadcast theirs. */
static gt_status gather_run(gt_model *m, int k, float *dst, size_t a, size_t b) {
  gt_zero3 *z = m->zero3;
  size_t s = a > z->lo ? a : z->lo, e = b < z->hi ? b : z->hi;
  if (s < e)
    GT_TRY(gt_backend_memcpy(m->be, dst + (s - a), m->param_buf + (s - z->lo), (e - s) * sizeof(float), GT_COPY_D2D,
                             NULL));
  return z->src.gather(z->src.ctx, k, dst, a, b);
}

static gt_status gather_layer(gt_model *m, int i, int k) {
  gt_zero3 *z = m->zero3;
  if (!z->src.gather) return gt_errorf(GT_ESTATE, "the model's parameters are sharded but no source gathers them");
  int old = z->slot_layer[k];
  if (old >= 0) z->layer_slot[old] = -1;
  z->slot_layer[k] = i;
  z->layer_slot[i] = k;
  z->slot_version[k] = z->version;
  z->bf16_ok[k] = false;
  z->pending[k] = true;
  for (int r = z->run_first[i]; r < z->run_first[i] + z->run_n[i]; r++)
    GT_TRY(gather_run(m, k, z->slot[k] + z->runs[r].at, z->runs[r].lo, z->runs[r].hi));
  return GT_OK;
}

/* Layer i in a slot: its own if current, else the least recently used
 * one not touched at `now`. */
static gt_status place(gt_model *m, int i, uint64_t now) {
  gt_zero3 *z = m->zero3;
  if (!m->layers[i]->local || z->layer_floats[i] == 0) return GT_OK;
  int k = z->layer_slot[i];
  if (k >= 0 && z->slot_version[k] == z->version) {
    z->slot_tick[k] = now;
    return GT_OK;
  }
  if (k < 0) {
    for (int j = 0; j < WINDOW; j++) {
      if (z->slot_tick[j] == now && z->slot_layer[j] >= 0) continue;
      if (k < 0 || z->slot_tick[j] < z->slot_tick[k]) k = j;
    }
    if (k < 0) return gt_errorf(GT_ESTATE, "ZeRO-3: no free parameter slot for layer '%s'", m->layers[i]->name);
  }
  z->slot_tick[k] = now;
  if (z->pending[k]) {
    /* A gather nobody used (the pipeline turned round): it ends first. */
    z->pending[k] = false;
    GT_TRY(z->src.wait(z->src.ctx, k));
  }
  return gather_layer(m, i, k);
}

gt_status gt_zero3_layer_ready(gt_model *m, int i, int lo, int hi, int dir) {
  gt_zero3 *z = m->zero3;
  uint64_t now = ++z->tick;
  GT_TRY(place(m, i, now));
  if (i + dir >= lo && i + dir <= hi) GT_TRY(place(m, i + dir, now));
  int k = z->layer_slot[i];
  if (k < 0) return GT_OK; /* no parameters */
  if (z->pending[k]) {
    z->pending[k] = false;
    gt_status st = z->src.wait(z->src.ctx, k);
    if (st != GT_OK) return gt_error_context(st, "gathering layer '%s''s parameters (ZeRO-3)", m->layers[i]->name);
  }
  if (z->slot16[k] && !z->bf16_ok[k]) {
    GT_TRY(gt_op_f32_to_bf16(m->be, z->slot16[k], z->slot[k], z->layer_floats[i]));
    z->bf16_ok[k] = true;
  }
  return GT_OK;
}

float *gt_zero3_param(const gt_layer *self, int i) {
  const gt_zero3 *z = self->model->zero3;
  int k = z->layer_slot[self->index];
  return k < 0 ? NULL : z->slot[k] + z->w_off[self->first_param + i];
}

const uint16_t *gt_zero3_param_bf16(const gt_layer *self, int i) {
  const gt_zero3 *z = self->model->zero3;
  int k = z->layer_slot[self->index];
  return k < 0 || !z->slot16[k] ? NULL : z->slot16[k] + z->w_off[self->first_param + i];
}

/* The whole buffer, gathered through slot 0 a slot's width at a time; the
 * slots hold no layer afterwards. */
gt_status gt_zero3_get_params(gt_model *m, float *host) {
  gt_zero3 *z = m->zero3;
  if (!z->src.gather) return gt_errorf(GT_ESTATE, "the model's parameters are sharded but no source gathers them");
  GT_TRY(settle_all(m));
  for (int k = 0; k < WINDOW; k++) {
    if (z->slot_layer[k] >= 0) z->layer_slot[z->slot_layer[k]] = -1;
    z->slot_layer[k] = -1;
  }
  for (size_t a = 0; a < m->nfloats; a += z->slot_floats) {
    size_t b = a + z->slot_floats < m->nfloats ? a + z->slot_floats : m->nfloats;
    GT_TRY(gather_run(m, 0, z->slot[0], a, b));
    GT_TRY(z->src.wait(z->src.ctx, 0));
    GT_TRY(gt_backend_download(m->be, host + a, z->slot[0], (b - a) * sizeof(float)));
  }
  return GT_OK;
}
