/* Offloading: master parameters and gradients in host memory, a window of
 * layers' weights on the device.
 *
 * With cfg.offload_window = w > 0 the model's flat parameter and gradient
 * buffers (and, through gt_model_state_alloc, the optimizer's state) are
 * host memory. The device holds w weight slots, each big enough for the
 * widest layer's parameters, and two gradient slots. Before a layer runs
 * (forward or backward) its weights must be in a slot; the layers after it
 * in the direction of travel (`prefetch` of them, at most w - 1) are
 * fetched on the copy stream meanwhile, so their transfers overlap this
 * layer's compute. Layers read their weights through gt_layer_param and
 * gt_layer_param_bf16, which point into the layer's slot here.
 *
 * Gradients: before a layer's backward its gradient slot is filled with
 * what the host holds for its parameters (zeros, without a copy, when the
 * host's are known to be zero: the first micro-batch of a step), the
 * layer's kernels accumulate into it exactly as they would into the flat
 * buffer, and the slot goes back to the host on the copy stream while the
 * next layer computes (a layer that says which of its gradients are final
 * part way through its backward, gt_layer_grads_final, sends those then).
 * The arithmetic is therefore the same, operation for operation, as
 * without offloading, including a tied parameter whose two users
 * accumulate into one gradient: the results are bit-identical.
 *
 * A slot is refilled only when its layer was evicted or the parameters
 * changed since it was fetched (an optimizer step, a load): a window as
 * wide as the model fetches each layer once per step.
 *
 * Precision: under fp32 a weight slot holds the layer's parameters in
 * fp32, laid out as its gradient slot. Under bf16 the window holds the
 * weights in the compute precision: a parameter read only by the layer's
 * matrix products (gt_param_spec.matmul_only) is held in bf16 alone,
 * copied from a bf16 twin of the parameter buffer in host memory, which
 * AdamW writes in the same pass as the update (else it is converted on
 * the host before the fetch); the other parameters (norms, biases, an
 * embedding table) are fetched in fp32 and get a bf16 copy beside them on
 * the device, for a product that reads them. The bf16 bits are those of
 * the fp32 master either way, so results do not change, and the window
 * and its transfers shrink by nearly half.
 *
 * Ordering: a slot's fetch waits for an event recorded on the compute
 * stream after the last kernel that read the slot's previous layer, and
 * the compute stream waits for the fetch's event before the layer runs.
 * A gradient slot is reused only after its copy to the host is done. On
 * the CPU backend the copy stream is a thread of its own (cpu_stream.c),
 * so all of this is exercised without a GPU.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"

#define GT_OFFLOAD_MAX_WINDOW 4096
#define NO_COPY SIZE_MAX /* a parameter's weight slot holds no copy in that precision */

struct gt_offload {
  int window, depth;
  bool bf16;              /* the weight slots are laid out for bf16 precision */
  size_t slot_bytes;      /* one weight slot: the widest layer's weights, each copy 32-byte aligned */
  size_t grad_floats;     /* one gradient slot: the widest layer's parameters in fp32 */
  size_t weight_bytes;    /* every local layer's weights once, as the slots hold them */
  unsigned char **slot;   /* window slots: weights */
  int *slot_layer;        /* layer in each slot, -1 when empty */
  uint64_t *slot_tick;    /* last use, for eviction */
  bool *slot_bf16_ok;     /* bf16: the device's bf16 copies of the fp32 part are current */
  gt_event **fetched;     /* the slot's fetch is done (copy stream) */
  gt_event **released;    /* compute is done reading the slot (compute stream) */
  int *layer_slot;        /* per layer: its slot, or -1 */
  size_t *w32_off;        /* per parameter: bytes to its fp32 copy in its layer's weight slot, or NO_COPY */
  size_t *w16_off;        /* per parameter: bytes to its bf16 copy, or NO_COPY */
  size_t *layer_mirror;   /* per layer, bf16: floats of the fp32 part, mirrored in bf16 after it */
  size_t *param_grad_off; /* per parameter: floats to its gradient in its layer's gradient slot */
  size_t *layer_floats;   /* per layer: floats of its gradient footprint */
  uint16_t *host16;       /* bf16: the host's bf16 twin of the parameter buffer, or NULL */
  /* gt_model_sum_grad_squares_next: where the next backward sums each
   * counted parameter's squares (NULL: not asked), the lowest layer using
   * each storage (its gradient is final once that layer's is back), and
   * which are summed */
  double *sumsq;
  int *last_user;
  bool *summed;
  uint64_t *bf16_version; /* per parameter (its storage owner): param_version the twin was made from */
  float *g32[2];          /* gradient slots */
  int g_layer[2];         /* layer whose gradients a slot holds, -1 when free */
  gt_event *g_done[2];    /* its copy to the host is done */
  bool g_pending[2];
  int g_next;
  bool *g_sent;    /* per parameter: its gradient went to the host during its layer's backward */
  bool *grad_zero; /* per parameter (its storage owner): host gradient is zero */
  uint64_t tick;
  uint64_t *param_version;   /* per parameter (its storage owner): bumped when it may have changed */
  uint64_t *fetched_version; /* per parameter: its storage's version when its layer's slot was filled */
  gt_offload_stats stats;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int storage_of(const gt_model *m, int p) { return m->params[p].tied_to >= 0 ? m->params[p].tied_to : p; }

void gt_offload_destroy(gt_model *m) {
  gt_offload *o = m->off;
  if (!o) return;
  gt_backend *be = m->be;
  /* Transfers in flight read and write these buffers. */
  (void)gt_stream_sync(be, gt_backend_copy_stream(be));
  for (int s = 0; s < o->window; s++) {
    if (o->slot) gt_arena_free(m->arena, o->slot[s]);
    if (o->fetched) gt_event_destroy(be, o->fetched[s]);
    if (o->released) gt_event_destroy(be, o->released[s]);
  }
  for (int k = 0; k < 2; k++) {
    gt_arena_free(m->arena, o->g32[k]);
    gt_event_destroy(be, o->g_done[k]);
  }
  if (o->host16) gt_backend_host_free(be, o->host16);
  free(o->slot);
  free(o->slot_layer);
  free(o->slot_tick);
  free(o->slot_bf16_ok);
  free(o->fetched);
  free(o->released);
  free(o->layer_slot);
  free(o->w32_off);
  free(o->w16_off);
  free(o->layer_mirror);
  free(o->param_grad_off);
  free(o->layer_floats);
  free(o->grad_zero);
  free(o->param_version);
  free(o->fetched_version);
  free(o->bf16_version);
  free(o->last_user);
  free(o->summed);
  free(o->g_sent);
  free(o);
  m->off = NULL;
  gt_backend_destroy(m->host_be);
  m->host_be = NULL;
}

static void *cal(size_t n, size_t size, bool *ok) {
  void *p = calloc(n ? n : 1, size);
  if (!p) *ok = false;
  return p;
}

static size_t align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* Gradient slot layout: each local layer's parameters (tied ones included,
 * since the layer reads them) one after another, in fp32, 64-byte
 * aligned. Returns the widest layer's floats. */
static size_t lay_out_grads(gt_model *m, gt_offload *o) {
  size_t widest = 0;
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (!l->local) continue;
    size_t at = 0;
    for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
      o->param_grad_off[p] = at;
      at += (m->params[p].numel + 15) & ~(size_t)15;
    }
    o->layer_floats[i] = at;
    if (at > widest) widest = at;
  }
  return widest ? widest : 16;
}

/* Weight slot layout of layer i, in bytes. fp32: as the gradient slot.
 * bf16: first the parameters fetched in fp32, then their bf16 copies in
 * the same order (one conversion on the device makes them all), then the
 * matmul-only parameters in bf16 alone. Adds the layer's weights, as
 * fetched, to o->weight_bytes; returns the slot bytes the layer needs. */
static size_t lay_out_weights(gt_model *m, gt_offload *o, int i) {
  const gt_layer *l = m->layers[i];
  size_t f = 0; /* floats of the fp32 part */
  for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
    const gt_param *pp = &m->params[p];
    o->w32_off[p] = o->w16_off[p] = NO_COPY;
    if (o->bf16 && pp->matmul_only) continue;
    o->w32_off[p] = f * sizeof(float);
    f += (pp->numel + 15) & ~(size_t)15;
    o->weight_bytes += pp->numel * sizeof(float);
  }
  o->layer_mirror[i] = o->bf16 ? f : 0;
  if (!o->bf16) return f * sizeof(float);
  size_t at = align64(f * (sizeof(float) + sizeof(uint16_t)));
  for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
    const gt_param *pp = &m->params[p];
    if (!pp->matmul_only) {
      o->w16_off[p] = f * sizeof(float) + o->w32_off[p] / 2;
      continue;
    }
    o->w16_off[p] = at;
    at += align64(pp->numel * sizeof(uint16_t));
    o->weight_bytes += pp->numel * sizeof(uint16_t);
  }
  return at;
}

/* Lays out and allocates the window's weight slots for the model's
 * precision, and under bf16 the host's bf16 twin of the parameters that
 * go to the device in bf16 alone. Every slot starts empty. */
static gt_status make_weight_slots(gt_model *m, gt_offload *o) {
  o->bf16 = m->precision == GT_PRECISION_BF16;
  o->slot_bytes = 64;
  o->weight_bytes = 0;
  bool twin = false;
  for (int i = 0; i < m->nlayers; i++) {
    o->layer_slot[i] = -1;
    if (!m->layers[i]->local) continue;
    size_t b = lay_out_weights(m, o, i);
    if (b > o->slot_bytes) o->slot_bytes = b;
    const gt_layer *l = m->layers[i];
    for (int p = l->first_param; p < l->first_param + l->nparams; p++) twin |= o->bf16 && m->params[p].matmul_only;
  }
  for (int p = 0; p < m->nparams; p++) o->bf16_version[p] = o->param_version[p] - 1; /* stale */
  if (twin) {
    gt_status st = gt_backend_host_alloc(m->be, (m->nfloats ? m->nfloats : 1) * sizeof(uint16_t), (void **)&o->host16);
    if (st != GT_OK) return gt_error_context(st, "offloading: host memory for the bf16 copy of the parameters");
  }
  for (int s = 0; s < o->window; s++) {
    o->slot_layer[s] = -1;
    o->slot_tick[s] = 0;
    o->slot_bf16_ok[s] = false;
    gt_status st = gt_arena_alloc_as(m->arena, GT_MEM_OFFLOAD, o->slot_bytes, (void **)&o->slot[s]);
    if (st != GT_OK)
      return gt_error_context(st, "offloading: weight slot %d of %d (%zu bytes each)", s, o->window, o->slot_bytes);
  }
  return GT_OK;
}

static void free_weight_slots(gt_model *m, gt_offload *o) {
  for (int s = 0; s < o->window; s++) {
    gt_arena_free(m->arena, o->slot[s]);
    o->slot[s] = NULL;
  }
  if (o->host16) gt_backend_host_free(m->be, o->host16);
  o->host16 = NULL;
}

gt_status gt_offload_create(gt_model *m) {
  const gt_model_config *c = &m->cfg;
  if (c->offload_window <= 0) return GT_OK;
  if (c->offload_window > GT_OFFLOAD_MAX_WINDOW)
    return gt_errorf(GT_EINVAL, "offload window of %d layers is more than the %d allowed", c->offload_window,
                     GT_OFFLOAD_MAX_WINDOW);
  if (c->offload_prefetch < 0)
    return gt_errorf(GT_EINVAL, "offload prefetch depth must be >= 0, got %d", c->offload_prefetch);
  gt_offload *o = calloc(1, sizeof *o);
  if (!o) return gt_errorf(GT_ENOMEM, "out of host memory for offloading");
  m->off = o;
  if (gt_backend_kind(m->be) != GT_DEVICE_CPU) {
    /* The update and the norm run where the state is, on host threads. */
    gt_status st = gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU}, &m->host_be);
    if (st != GT_OK) return gt_error_context(st, "offloading: the host backend for the optimizer");
  }
  int local = 0;
  for (int i = 0; i < m->nlayers; i++) local += m->layers[i]->local;
  /* More slots than layers would never be used. */
  o->window = c->offload_window < local ? c->offload_window : (local ? local : 1);
  int depth = c->offload_prefetch ? c->offload_prefetch : o->window - 1;
  o->depth = depth < o->window - 1 ? depth : o->window - 1;
  bool ok = true;
  int W = o->window, L = m->nlayers, P = m->nparams;
  o->slot = cal((size_t)W, sizeof *o->slot, &ok);
  o->slot_layer = cal((size_t)W, sizeof *o->slot_layer, &ok);
  o->slot_tick = cal((size_t)W, sizeof *o->slot_tick, &ok);
  o->slot_bf16_ok = cal((size_t)W, sizeof *o->slot_bf16_ok, &ok);
  o->fetched = cal((size_t)W, sizeof *o->fetched, &ok);
  o->released = cal((size_t)W, sizeof *o->released, &ok);
  o->layer_slot = cal((size_t)L, sizeof *o->layer_slot, &ok);
  o->layer_floats = cal((size_t)L, sizeof *o->layer_floats, &ok);
  o->layer_mirror = cal((size_t)L, sizeof *o->layer_mirror, &ok);
  o->param_grad_off = cal((size_t)P, sizeof *o->param_grad_off, &ok);
  o->w32_off = cal((size_t)P, sizeof *o->w32_off, &ok);
  o->w16_off = cal((size_t)P, sizeof *o->w16_off, &ok);
  o->grad_zero = cal((size_t)P, sizeof *o->grad_zero, &ok);
  o->param_version = cal((size_t)P, sizeof *o->param_version, &ok);
  o->fetched_version = cal((size_t)P, sizeof *o->fetched_version, &ok);
  o->bf16_version = cal((size_t)P, sizeof *o->bf16_version, &ok);
  o->last_user = cal((size_t)P, sizeof *o->last_user, &ok);
  o->summed = cal((size_t)P, sizeof *o->summed, &ok);
  o->g_sent = cal((size_t)P, sizeof *o->g_sent, &ok);
  if (!ok) return gt_errorf(GT_ENOMEM, "out of host memory for offloading");
  o->grad_floats = lay_out_grads(m, o);
  gt_backend *be = m->be;
  for (int s = 0; s < W; s++) {
    gt_status st = gt_event_create(be, &o->fetched[s]);
    if (st == GT_OK) st = gt_event_create(be, &o->released[s]);
    if (st == GT_OK) st = gt_event_record(be, o->released[s], NULL);
    if (st != GT_OK) return gt_error_context(st, "offloading: the events of weight slot %d", s);
  }
  GT_TRY(make_weight_slots(m, o));
  size_t bytes = o->grad_floats * sizeof(float);
  for (int k = 0; k < 2; k++) {
    o->g_layer[k] = -1;
    gt_status st = gt_arena_alloc_as(m->arena, GT_MEM_OFFLOAD, bytes, (void **)&o->g32[k]);
    if (st == GT_OK) st = gt_event_create(be, &o->g_done[k]);
    if (st != GT_OK) return gt_error_context(st, "offloading: gradient slot %d (%zu bytes)", k, bytes);
  }
  return GT_OK;
}

/* What the slots take of the device, as the arena sets them aside: the
 * requests gt_offload_create and gt_offload_set_precision make. */
size_t gt_offload_device_bytes(const gt_model *m) {
  const gt_offload *o = m->off;
  return (size_t)o->window * gt_arena_block_size(o->slot_bytes) +
         2 * gt_arena_block_size(o->grad_floats * sizeof(float));
}

/* The weight slots again, laid out for the new precision (the model's,
 * already set). Whatever still reads or fills the old ones finishes
 * first. */
gt_status gt_offload_set_precision(gt_model *m) {
  gt_offload *o = m->off;
  if (o->bf16 == (m->precision == GT_PRECISION_BF16) && o->slot[0]) return GT_OK;
  GT_TRY(gt_stream_sync(m->be, gt_backend_copy_stream(m->be)));
  GT_TRY(gt_stream_sync(m->be, NULL));
  free_weight_slots(m, o);
  return make_weight_slots(m, o);
}

uint16_t *gt_offload_host_bf16(gt_model *m) { return m->off ? m->off->host16 : NULL; }

/* The twin of parameters [first, first + n) was written with them. */
static void twin_written(gt_model *m, int first, int n) {
  gt_offload *o = m->off;
  if (!o || !o->host16) return;
  for (int p = first; p < first + n; p++)
    if (m->params[p].tied_to < 0) o->bf16_version[p] = o->param_version[p];
}

void gt_offload_bf16_written(gt_model *m) { twin_written(m, 0, m->nparams); }

void gt_offload_layer_bf16_written(gt_model *m, int layer) {
  twin_written(m, m->layers[layer]->first_param, m->layers[layer]->nparams);
}

/* The host's bf16 twin of storage parameter p, made from the fp32 master
 * when an update did not write it (a ZeRO-1 shard, SGD, a load). */
static gt_status refresh_twin(gt_model *m, int p) {
  gt_offload *o = m->off;
  if (o->bf16_version[p] == o->param_version[p]) return GT_OK;
  const gt_param *pp = &m->params[p];
  GT_TRY(gt_op_f32_to_bf16(gt_model_state_backend(m), o->host16 + pp->offset, m->param_buf + pp->offset, pp->numel));
  o->bf16_version[p] = o->param_version[p];
  return GT_OK;
}

/* The parameters [first, first + n) changed: the slots holding them (a
 * tied user's too, through the storage's version) are stale. */
static void params_changed(gt_model *m, int first, int n) {
  gt_offload *o = m->off;
  if (!o) return;
  for (int p = first; p < first + n; p++)
    if (m->params[p].tied_to < 0) o->param_version[p]++;
}

void gt_offload_params_changed(gt_model *m) { params_changed(m, 0, m->nparams); }

/* One layer's own parameters (an update layer by layer); the other
 * layers' slots stay. */
void gt_offload_layer_params_changed(gt_model *m, int layer) {
  params_changed(m, m->layers[layer]->first_param, m->layers[layer]->nparams);
}

/* Queues the copy of layer i's weights into slot s on the copy stream. */
static gt_status fetch(gt_model *m, int i, int s) {
  gt_offload *o = m->off;
  gt_backend *be = m->be;
  gt_stream *cs = gt_backend_copy_stream(be);
  int old = o->slot_layer[s];
  if (old >= 0) o->layer_slot[old] = -1;
  o->slot_layer[s] = i;
  o->layer_slot[i] = s;
  o->slot_bf16_ok[s] = false;
  /* The slot's previous layer may still be read by queued kernels. */
  GT_TRY(gt_stream_wait_event(be, cs, o->released[s]));
  const gt_layer *l = m->layers[i];
  unsigned char *slot = o->slot[s];
  for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
    const gt_param *pp = &m->params[p];
    int st = storage_of(m, p);
    o->fetched_version[p] = o->param_version[st];
    if (o->w32_off[p] != NO_COPY) {
      size_t n = pp->numel * sizeof(float);
      GT_TRY(gt_backend_memcpy(be, slot + o->w32_off[p], m->param_buf + pp->offset, n, GT_COPY_H2D, cs));
      o->stats.bytes_in += n;
    } else {
      size_t n = pp->numel * sizeof(uint16_t);
      GT_TRY(refresh_twin(m, st));
      GT_TRY(gt_backend_memcpy(be, slot + o->w16_off[p], o->host16 + pp->offset, n, GT_COPY_H2D, cs));
      o->stats.bytes_in += n;
    }
  }
  o->stats.fetches++;
  return gt_event_record(be, o->fetched[s], cs);
}

static bool resident(const gt_model *m, int i) {
  const gt_offload *o = m->off;
  if (o->layer_slot[i] < 0) return false;
  const gt_layer *l = m->layers[i];
  for (int p = l->first_param; p < l->first_param + l->nparams; p++)
    if (o->fetched_version[p] != o->param_version[storage_of(m, p)]) return false;
  return true;
}

/* Puts layer i in a slot: its own if current, else the least recently
 * used one (never one touched at `now`, the layers this call holds). */
static gt_status place(gt_model *m, int i, uint64_t now) {
  gt_offload *o = m->off;
  if (o->layer_floats[i] == 0) return GT_OK;
  int s = o->layer_slot[i];
  if (s < 0) {
    for (int k = 0; k < o->window; k++) {
      if (o->slot_tick[k] == now && o->slot_layer[k] >= 0) continue;
      if (s < 0 || o->slot_tick[k] < o->slot_tick[s]) s = k;
    }
    if (s < 0) return gt_errorf(GT_ESTATE, "offloading: no free weight slot for layer %d", i);
  }
  o->slot_tick[s] = now;
  if (!resident(m, i)) GT_TRY(fetch(m, i, s));
  return GT_OK;
}

gt_status gt_offload_layer_ready(gt_model *m, int i, int lo, int hi, int dir) {
  gt_offload *o = m->off;
  gt_backend *be = m->be;
  uint64_t now = ++o->tick;
  GT_TRY(place(m, i, now));
  /* Layers ahead, fetched while this one computes. */
  for (int d = 1; d <= o->depth; d++) {
    int j = i + d * dir;
    if (j < lo || j > hi) break;
    GT_TRY(place(m, j, now));
  }
  int s = o->layer_slot[i];
  if (s < 0) return GT_OK; /* no parameters */
  /* On the CPU backend the compute stream is this thread, so this is the
   * time compute stood still for a transfer (on a GPU the wait is queued
   * and costs the host nothing). */
  double t0 = now_s();
  GT_TRY(gt_stream_wait_event(be, NULL, o->fetched[s]));
  o->stats.wait_seconds += now_s() - t0;
  size_t f = o->layer_mirror[i];
  if (f && !o->slot_bf16_ok[s]) {
    GT_TRY(gt_op_f32_to_bf16(be, (uint16_t *)(o->slot[s] + f * sizeof(float)), (const float *)o->slot[s], f));
    o->slot_bf16_ok[s] = true;
  }
  return GT_OK;
}

/* After an update: the first layers the next forward needs start coming
 * now, behind whatever the caller does before that forward (loading data,
 * writing metrics). */
gt_status gt_model_prefetch(gt_model *m) {
  gt_offload *o = m->off;
  if (!o) return GT_OK;
  uint64_t now = ++o->tick;
  int placed = 0;
  for (int i = 0; i < m->nlayers && placed <= o->depth; i++) {
    if (!m->layers[i]->local || o->layer_floats[i] == 0) continue;
    GT_TRY(place(m, i, now));
    placed++;
  }
  return GT_OK;
}

void gt_model_grads_changed(gt_model *m) {
  gt_offload *o = m->off;
  if (!o) return;
  for (int p = 0; p < m->nparams; p++) o->grad_zero[p] = false;
}

gt_status gt_offload_layer_done(gt_model *m, int i) {
  gt_offload *o = m->off;
  int s = o->layer_slot[i];
  return s >= 0 ? gt_event_record(m->be, o->released[s], NULL) : GT_OK;
}

/* ---- gradients ---- */

static gt_status wait_grad_slot(gt_model *m, int k) {
  gt_offload *o = m->off;
  if (!o->g_pending[k]) return GT_OK;
  double t0 = now_s();
  GT_TRY(gt_event_sync(m->be, o->g_done[k]));
  o->stats.wait_seconds += now_s() - t0;
  o->stats.wait_grad_seconds += now_s() - t0;
  o->g_pending[k] = false;
  return GT_OK;
}

/* Whether layer j (-1: none) holds parameter p's storage too. */
static bool shares_storage(const gt_model *m, int j, int p) {
  if (j < 0) return false;
  const gt_layer *l = m->layers[j];
  for (int q = l->first_param; q < l->first_param + l->nparams; q++)
    if (storage_of(m, q) == storage_of(m, p)) return true;
  return false;
}

gt_status gt_offload_grads_begin(gt_model *m, int i) {
  gt_offload *o = m->off;
  gt_backend *be = m->be;
  int k = o->g_next;
  o->g_next ^= 1;
  GT_TRY(wait_grad_slot(m, k));
  o->g_layer[k] = i;
  const gt_layer *l = m->layers[i];
  for (int p = l->first_param; p < l->first_param + l->nparams; p++) {
    const gt_param *pp = &m->params[p];
    float *dst = o->g32[k] + o->param_grad_off[p];
    size_t n = pp->numel * sizeof(float);
    o->g_sent[p] = false;
    if (o->grad_zero[storage_of(m, p)]) {
      GT_TRY(gt_backend_memset(be, dst, 0, n, NULL));
      continue;
    }
    /* The host's gradient may still be arriving from the other slot: a
     * tied parameter whose other user ran just before. */
    if (shares_storage(m, o->g_layer[k ^ 1], p)) GT_TRY(wait_grad_slot(m, k ^ 1));
    GT_TRY(gt_backend_memcpy(be, dst, m->grad_buf + pp->offset, n, GT_COPY_H2D, NULL));
    o->stats.bytes_in += n;
  }
  return GT_OK;
}

/* Queues the copies of parameters [first, first + n) from gradient slot k
 * to the host on the copy stream, behind every kernel queued on the
 * compute stream so far; each parameter goes once per backward. */
static gt_status send_grads(gt_model *m, int k, int first, int n) {
  gt_offload *o = m->off;
  gt_backend *be = m->be;
  gt_stream *cs = gt_backend_copy_stream(be);
  bool any = false;
  for (int p = first; p < first + n; p++) any |= !o->g_sent[p];
  if (!any) return GT_OK;
  GT_TRY(gt_event_record(be, o->g_done[k], NULL));
  GT_TRY(gt_stream_wait_event(be, cs, o->g_done[k]));
  for (int p = first; p < first + n; p++) {
    const gt_param *pp = &m->params[p];
    if (o->g_sent[p]) continue;
    size_t bytes = pp->numel * sizeof(float);
    GT_TRY(gt_backend_memcpy(be, m->grad_buf + pp->offset, o->g32[k] + o->param_grad_off[p], bytes, GT_COPY_D2H, cs));
    o->grad_zero[storage_of(m, p)] = false;
    o->g_sent[p] = true;
    o->stats.bytes_out += bytes;
  }
  return GT_OK;
}

/* Part of layer i's backward is done: the gradients it has finished start
 * back now, behind the rest of its backward, instead of after it. Without
 * this, the bottom layer's gradients had only the embedding's short
 * backward to hide behind, and the step waited for most of them. */
gt_status gt_offload_grads_final(gt_model *m, int i, int first, int n) {
  gt_offload *o = m->off;
  int k = o->g_layer[0] == i ? 0 : o->g_layer[1] == i ? 1 : -1;
  if (k < 0 || o->g_pending[k]) return GT_OK; /* not in backward: nothing to send early */
  return send_grads(m, k, m->layers[i]->first_param + first, n);
}

gt_status gt_offload_grads_end(gt_model *m, int i) {
  gt_offload *o = m->off;
  gt_backend *be = m->be;
  int k = o->g_layer[0] == i ? 0 : 1;
  const gt_layer *l = m->layers[i];
  GT_TRY(send_grads(m, k, l->first_param, l->nparams));
  GT_TRY(gt_event_record(be, o->g_done[k], gt_backend_copy_stream(be)));
  o->g_pending[k] = true;
  return GT_OK;
}

gt_status gt_offload_grads_wait(gt_model *m, int i) {
  gt_offload *o = m->off;
  for (int k = 0; k < 2; k++)
    if (o->g_layer[k] == i) GT_TRY(wait_grad_slot(m, k));
  return GT_OK;
}

void gt_offload_grads_zeroed(gt_model *m) {
  gt_offload *o = m->off;
  if (!o) return;
  for (int p = 0; p < m->nparams; p++) o->grad_zero[p] = true;
}

float *gt_offload_param(const gt_layer *self, int i) {
  const gt_offload *o = self->model->off;
  int s = o->layer_slot[self->index];
  size_t off = o->w32_off[self->first_param + i];
  return s < 0 || off == NO_COPY ? NULL : (float *)(o->slot[s] + off);
}

const uint16_t *gt_offload_param_bf16(const gt_layer *self, int i) {
  const gt_offload *o = self->model->off;
  int s = o->layer_slot[self->index];
  size_t off = o->w16_off[self->first_param + i];
  return s < 0 || off == NO_COPY ? NULL : (const uint16_t *)(o->slot[s] + off);
}

float *gt_offload_grad(const gt_layer *self, int i) {
  const gt_offload *o = self->model->off;
  int k = o->g_layer[0] == self->index ? 0 : o->g_layer[1] == self->index ? 1 : -1;
  return k < 0 ? NULL : o->g32[k] + o->param_grad_off[self->first_param + i];
}

/* ---- the gradient norm's sums, as the gradients come back ---- */

gt_status gt_model_sum_grad_squares_next(gt_model *m, double *sumsq) {
  gt_offload *o = m->off;
  if (!o) return GT_OK;
  o->sumsq = sumsq;
  if (!sumsq) return GT_OK;
  for (int p = 0; p < m->nparams; p++) {
    o->last_user[p] = m->nlayers;
    o->summed[p] = false;
  }
  for (int p = 0; p < m->nparams; p++) {
    int st = storage_of(m, p);
    if (m->params[p].layer < o->last_user[st]) o->last_user[st] = m->params[p].layer;
  }
  return GT_OK;
}

/* Sums the squares of every counted parameter whose users are all at
 * layer `bound` or above (their gradients are back and final), on the
 * host's backend: the same operation, parameter by parameter, that
 * gt_grad_norm runs. */
gt_status gt_offload_sum_squares(gt_model *m, int bound) {
  gt_offload *o = m->off;
  if (!o || !o->sumsq) return GT_OK;
  gt_backend *hb = gt_model_state_backend(m);
  for (int p = 0; p < m->nparams; p++) {
    const gt_param *pp = &m->params[p];
    if (o->summed[p] || !gt_param_in_norm(pp) || o->last_user[p] < bound) continue;
    GT_TRY(gt_op_sum_squares(hb, o->sumsq + p, m->grad_buf + pp->offset, pp->numel));
    o->summed[p] = true;
  }
  return GT_OK;
}

void gt_offload_sum_squares_end(gt_model *m) {
  if (m->off) m->off->sumsq = NULL;
}

gt_offload_stats gt_model_offload_stats(const gt_model *m) {
  gt_offload_stats s = {0};
  if (!m->off) return s;
  s = m->off->stats;
  s.window = m->off->window;
  s.prefetch = m->off->depth;
  s.slot_bytes = m->off->slot_bytes;
  s.weight_bytes = m->off->weight_bytes;
  return s;
}
