/* Learning-rate schedule and gradient clipping. */
#include <math.h>

#include "giant/optim.h"

float gt_lr_at(const gt_lr_schedule *s, int step) {
  if (s->warmup > 0 && step < s->warmup) return s->lr_max * (float)(step + 1) / (float)s->warmup;
  if (s->total <= s->warmup || step >= s->total) return s->total > s->warmup ? s->lr_min : s->lr_max;
  double progress = (double)(step - s->warmup) / (double)(s->total - s->warmup);
  double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
  return (float)(s->lr_min + (s->lr_max - s->lr_min) * cosine);
}

gt_status gt_grad_norm(gt_model *m, double *norm) {
  gt_backend *be = gt_model_backend(m);
  double *dev = NULL, host = 0;
  GT_TRY(gt_arena_alloc(gt_model_arena(m), sizeof(double), (void **)&dev));
  gt_status s = be->ops->sum_squares(be, dev, gt_model_grads(m), gt_model_buffer_floats(m));
  if (s == GT_OK) s = gt_backend_download(be, &host, dev, sizeof host);
  gt_arena_free(gt_model_arena(m), dev);
  *norm = sqrt(host);
  return s;
}

float gt_clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return (float)(max_norm / (norm + 1e-6));
}
