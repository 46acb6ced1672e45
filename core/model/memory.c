/* What a model will hold on its device: the estimate --print-plan shows and
 * the offloading tests hold the measured peak to.
 *
 * It adds up the same requests the model, its activations, its offload
 * slots and an optimizer make, each rounded to the arena's size class, so
 * the figure is what the arena (and the backend's budget) will see, not a
 * rule of thumb. */
#include "core/model/model_internal.h"
#include "core/arena.h"

gt_status gt_model_device_estimate(const gt_model *m, int optim_states, gt_device_estimate *out) {
  *out = (gt_device_estimate){0};
  if (!m->built) return gt_errorf(GT_ESTATE, "the model is not built yet (call gt_model_build)");
  if (optim_states < 0) return gt_errorf(GT_EINVAL, "optimizer states per parameter must be >= 0");
  size_t flat = (m->nfloats ? m->nfloats : 1) * sizeof(float);
  bool bf16 = m->precision == GT_PRECISION_BF16;
  /* ZeRO-1 and up over dp ranks: the optimizer's state is a shard's; from
   * ZeRO-2 the gradients too, with their staging (zero.c). */
  int dp = m->par.dp_size > 1 && m->par.zero >= 1 ? m->par.dp_size : 1;
  size_t shard = (m->nfloats / (size_t)dp ? m->nfloats / (size_t)dp : 1) * sizeof(float);
  if (!m->off) {
    out->weights = gt_arena_block_size(flat);
    out->grads = gt_arena_block_size(m->zero ? shard : flat);
    out->slots = gt_zero_device_bytes(m);
    out->optimizer = (size_t)optim_states * gt_arena_block_size(shard);
    if (bf16) out->bf16_copy = gt_arena_block_size((m->nfloats ? m->nfloats : 1) * sizeof(uint16_t));
  } else {
    out->slots = gt_offload_device_bytes(m);
  }
  out->activations = gt_acts_device_bytes(m);
  out->scratch = gt_arena_block_size((m->scratch_floats ? m->scratch_floats : 1) * sizeof(float));
  out->total =
      out->weights + out->grads + out->optimizer + out->bf16_copy + out->slots + out->activations + out->scratch;
  return GT_OK;
}
