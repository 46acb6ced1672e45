/* What a model will hold on its device: the estimate --print-plan shows and
 * the offloading tests hold the measured peak to.
 *
 * It adds up the same requests the model, its activations, its offload
 * slots and an optimizer make, each rounded to the arena's size class, so
 * the figure is what the arena (and the backend's budget) will see, not a
 * rule of thumb. */
#include "core/model/model_internal.h"

gt_status gt_model_device_estimate(const gt_model *m, int optim_states, gt_device_estimate *out) {
  *out = (gt_device_estimate){0};
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  if (optim_states < 0) return gt_errorf(GT_EINVAL, "optimizer states per parameter must be >= 0");
  size_t flat = (m->nfloats ? m->nfloats : 1) * sizeof(float);
  bool bf16 = m->precision == GT_PRECISION_BF16;
  if (!m->off) {
    out->weights = gt_arena_block_size(flat);
    out->grads = gt_arena_block_size(flat);
    out->optimizer = (size_t)optim_states * gt_arena_block_size(flat);
    if (bf16) out->bf16_copy = gt_arena_block_size((m->nfloats ? m->nfloats : 1) * sizeof(uint16_t));
  } else {
    gt_offload_stats os = gt_model_offload_stats(m);
    size_t slot = gt_arena_block_size(os.slot_bytes);
    out->slots = (size_t)(os.window + 2) * slot;
    if (bf16) out->slots += (size_t)os.window * gt_arena_block_size(os.slot_bytes / 2);
  }
  size_t BT = (size_t)m->cfg.B_max * (size_t)m->cfg.T_max;
  for (int i = 0; i < m->nlayers; i++) {
    gt_layer *l = m->layers[i];
    if (!l->local) continue;
    out->activations += gt_arena_block_size(BT * (size_t)l->out_dim * sizeof(float));
    size_t n = l->type->acts_floats(l, m->cfg.B_max, m->cfg.T_max);
    if (n) out->activations += gt_arena_block_size(n * sizeof(float));
  }
  out->activations += 2 * gt_arena_block_size(BT * (size_t)m->max_dim * sizeof(float));
  out->activations += 2 * gt_arena_block_size(BT * sizeof(int32_t));
  out->scratch = gt_arena_block_size((m->scratch_floats ? m->scratch_floats : 1) * sizeof(float));
  out->total = out->weights + out->grads + out->optimizer + out->bf16_copy + out->slots + out->activations +
               out->scratch;
  return GT_OK;
}
