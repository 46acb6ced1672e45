/* What a model holds on its device: the estimate --print-plan shows and the
 * planner keeps under a budget, and the ledger that measures it.
 *
 * The estimate adds up the same requests the model, its activations, its
 * offload slots, an optimizer and the trainer make, each rounded to the
 * arena's size class and put in the category the arena's caller tags it
 * with, so the figure is what the arena (and the backend's budget) will
 * see, category by category, not a rule of thumb. */
#include <stdio.h>

#include "core/model/model_internal.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "giant/engine/model.h"

static const char *const kind_names[GT_MEM_KINDS] = {"parameters",    "gradients", "optimizer state", "activations",
                                                     "attention",     "bf16 copy", "offload slots",   "scratch",
                                                     "communication", "other"};

const char *gt_mem_kind_name(gt_mem_kind k) { return (unsigned)k < GT_MEM_KINDS ? kind_names[k] : "?"; }

gt_status gt_model_device_estimate_ex(const gt_model *m, const gt_estimate_config *c, gt_device_estimate *out) {
  *out = (gt_device_estimate){0};
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  if (!c || c->optim_states < 0 || c->optim_shards < 0)
    return gt_errorf(GT_EINVAL, "optimizer states per parameter and shards must be >= 0");
  size_t nf = m->nfloats ? m->nfloats : 1, flat = nf * sizeof(float);
  bool bf16 = m->precision == GT_PRECISION_BF16;
  if (!m->off) {
    /* ZeRO-1's shard: the buffer is padded to a multiple of the shards. */
    size_t shards = c->optim_shards > 1 ? (size_t)c->optim_shards : 1, shard = (m->nfloats + shards - 1) / shards;
    /* From ZeRO-3 the parameters are this rank's shard, with the slots
     * that hold whole layers (zero3.c). */
    size_t slots16 = 0;
    out->weights = m->zero3 ? gt_zero3_device_bytes(m, &slots16) : gt_arena_block_size(flat);
    /* From ZeRO-2 the gradients are this rank's shard, with their staging
     * (zero.c). */
    out->grads = m->zero ? gt_zero_device_bytes(m) : gt_arena_block_size(flat);
    out->optimizer = (size_t)c->optim_states * gt_arena_block_size((shard ? shard : 1) * sizeof(float));
    if (bf16) out->bf16_copy = m->zero3 ? slots16 : gt_arena_block_size(nf * sizeof(uint16_t));
    /* The gradient norm's sums, one double per parameter, live through a
     * step's norm; offloaded they are host memory. */
    out->scratch = gt_arena_block_size((size_t)(m->nparams ? m->nparams : 1) * sizeof(double));
  } else {
    out->slots = gt_offload_device_bytes(m);
  }
  gt_acts_device_bytes(m, &out->activations, &out->attention);
  out->scratch += gt_arena_block_size((m->scratch_floats ? m->scratch_floats : 1) * sizeof(float));
  /* The trainer's counts (64 floats), reduced over its groups each step. */
  out->recompute = gt_model_recompute_bytes(m);
  if (c->distributed) out->comm = gt_arena_block_size(64 * sizeof(float));
  for (int k = 0; k < GT_MEM_KINDS; k++) out->total += gt_device_estimate_bytes(out, (gt_mem_kind)k);
  return GT_OK;
}

gt_status gt_model_device_estimate(const gt_model *m, int optim_states, gt_device_estimate *out) {
  if (optim_states < 0) {
    *out = (gt_device_estimate){0};
    return gt_errorf(GT_EINVAL, "optimizer states per parameter must be >= 0");
  }
  return gt_model_device_estimate_ex(m, &(gt_estimate_config){.optim_states = optim_states}, out);
}

size_t gt_device_estimate_bytes(const gt_device_estimate *e, gt_mem_kind k) {
  switch (k) {
    case GT_MEM_PARAMS: return e->weights;
    case GT_MEM_GRADS: return e->grads;
    case GT_MEM_OPTIMIZER: return e->optimizer;
    case GT_MEM_ACTIVATIONS: return e->activations + e->recompute;
    case GT_MEM_ATTENTION: return e->attention;
    case GT_MEM_BF16_COPY: return e->bf16_copy;
    case GT_MEM_OFFLOAD: return e->slots;
    case GT_MEM_SCRATCH: return e->scratch;
    case GT_MEM_COMM: return e->comm;
    default: return 0;
  }
}

gt_status gt_model_memory_ledger(const gt_model *m, gt_memory_ledger *out) {
  *out = (gt_memory_ledger){0};
  if (!m) return gt_errorf(GT_EINVAL, "gt_model_memory_ledger needs a model");
  gt_arena_kinds(m->arena, out->current, out->peak);
  for (int k = 0; k < GT_MEM_KINDS; k++) {
    out->current_total += out->current[k];
    out->peak_total += out->peak[k];
  }
  size_t reserved = gt_arena_reserved(m->arena), current = gt_arena_current(m->arena);
  out->cached = reserved > current ? reserved - current : 0;
  gt_device_mem dm = gt_backend_mem(m->be);
  out->device_in_use = dm.in_use;
  out->device_peak = dm.peak;
  out->device_limit = dm.limit;
  return GT_OK;
}

void gt_model_memory_reset_peak(gt_model *m) {
  if (!m) return;
  gt_arena_reset_peak(m->arena);
  gt_backend_reset_mem_peak(m->be);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void gt_memory_ledger_format(const gt_memory_ledger *l, bool now, char *buf, size_t n) {
  if (!n) return;
  const size_t *by = now ? l->current : l->peak;
  size_t used = 0;
  int w = snprintf(buf, n, "%s %.1f MiB", now ? "now" : "peak", mib(now ? l->current_total : l->peak_total));
  used = w < 0 ? 0 : (size_t)w;
  const char *sep = ": ";
  for (int k = 0; k < GT_MEM_KINDS && used < n; k++) {
    if (!by[k]) continue;
    w = snprintf(buf + used, n - used, "%s%s %.1f MiB", sep, kind_names[k], mib(by[k]));
    used += w < 0 ? 0 : (size_t)w;
    sep = ", ";
  }
}
