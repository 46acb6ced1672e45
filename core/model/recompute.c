/* Activation recomputation (docs/memory.md).
 *
 * A layer that recomputes whole (GT_RECOMPUTE_BLOCK) keeps only its input
 * per micro-batch: the previous layer's output, which the model keeps
 * anyway. Its forward writes its saved activations into one area the model
 * owns, sized for the largest such layer, where the next one overwrites
 * them; just before its backward, its forward runs again from the same
 * input into that area, and backward reads them there. The kernels are
 * deterministic, so the activations made again are the bits the first
 * forward made, and so are the gradients.
 *
 * The attention mode is the transformer block's own business: it sizes its
 * saved activations by gt_layer_recompute and recomputes inside its
 * backward, so the model sees nothing of it. */
#include <string.h>

#include "core/model/model_internal.h"
#include "core/arena.h"

static const char *const names[] = {"none", "attention", "block"};

gt_status gt_recompute_parse(const char *name, gt_recompute *out) {
  for (int i = 0; name && i < 3; i++)
    if (!strcmp(name, names[i])) {
      *out = (gt_recompute)i;
      return GT_OK;
    }
  return gt_errorf(GT_EINVAL,
                   "unknown recomputation mode '%s': use none (keep every activation), attention (recompute "
                   "the attention core) or block (recompute each layer from its input)",
                   name ? name : "(null)");
}

const char *gt_recompute_name(gt_recompute mode) { return (unsigned)mode < 3 ? names[mode] : "?"; }

gt_recompute gt_layer_recompute(const gt_layer *self) { return self->recompute; }

/* The loss layer's backward follows its forward at once in every schedule,
 * so recomputing it would only run its forward twice. */
bool gt_model_recomputes(const gt_model *m, int i) {
  const gt_layer *l = m->layers[i];
  return l->recompute == GT_RECOMPUTE_BLOCK && !l->is_loss && l->local &&
         l->type->acts_floats(l, m->cfg.B_max, m->cfg.T_max) > 0;
}

gt_status gt_model_recompute_alloc(gt_model *m) {
  size_t BT = (size_t)m->cfg.B_max * (size_t)m->cfg.T_max;
  m->rc_saved_floats = m->rc_out_floats = 0;
  for (int i = 0; i < m->nlayers; i++) {
    if (!gt_model_recomputes(m, i)) continue;
    const gt_layer *l = m->layers[i];
    size_t n = l->type->acts_floats(l, m->cfg.B_max, m->cfg.T_max), o = BT * (size_t)l->out_dim;
    if (n > m->rc_saved_floats) m->rc_saved_floats = n;
    if (o > m->rc_out_floats) m->rc_out_floats = o;
  }
  if (!m->rc_saved_floats) return GT_OK;
  gt_status s =
      gt_arena_alloc_as(m->arena, GT_MEM_ACTIVATIONS, m->rc_saved_floats * sizeof(float), (void **)&m->rc_saved);
  if (s == GT_OK)
    s = gt_arena_alloc_as(m->arena, GT_MEM_ACTIVATIONS, m->rc_out_floats * sizeof(float), (void **)&m->rc_out);
  return s == GT_OK ? s : gt_error_context(s, "allocating the area of recomputed activations");
}

void gt_model_recompute_free(gt_model *m) {
  gt_arena_free(m->arena, m->rc_saved);
  gt_arena_free(m->arena, m->rc_out);
  m->rc_saved = m->rc_out = NULL;
}

size_t gt_model_recompute_bytes(const gt_model *m) {
  if (!m->rc_saved_floats) return 0;
  return gt_arena_block_size(m->rc_saved_floats * sizeof(float)) +
         gt_arena_block_size(m->rc_out_floats * sizeof(float));
}

float *gt_model_saved(const gt_model *m, const gt_acts *a, int i) {
  return gt_model_recomputes(m, i) ? m->rc_saved : a->saved[i];
}

gt_status gt_model_recompute(gt_model *m, int i, const gt_layer_ctx *ctx, const float *in) {
  gt_layer *l = m->layers[i];
  gt_layer_ctx again = *ctx;
  again.recompute = true;
  gt_status s = l->type->forward(l, &again, in, m->rc_out, m->rc_saved);
  return s == GT_OK ? s : gt_error_context(s, "recomputing the forward of layer '%s'", l->name);
}
