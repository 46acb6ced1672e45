/* Learning-rate schedule and gradient clipping. */
#include <math.h>
#include <stdlib.h>

#include "giant/optim.h"
#include "core/arena.h"
#include "core/backend_engine.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"
#include "giant/group.h"
#include "optim/optimizer_engine.h"

float gt_lr_at(const gt_lr_schedule *s, int step) {
  if (s->warmup > 0 && step < s->warmup) return s->lr_max * (float)(step + 1) / (float)s->warmup;
  if (s->total <= s->warmup || step >= s->total) return s->total > s->warmup ? s->lr_min : s->lr_max;
  double progress = (double)(step - s->warmup) / (double)(s->total - s->warmup);
  double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
  return (float)(s->lr_min + (s->lr_max - s->lr_min) * cosine);
}

double gt_grad_norm_of_squares(const gt_model *m, const double *sumsq) {
  double total = 0;
  for (int i = 0; i < gt_model_num_params(m); i++)
    if (gt_param_in_norm(gt_model_param(m, i))) total += sumsq[i];
  return sqrt(total);
}

/* The sums run where the gradients are: the device, or the host for an
 * offloaded model (gt_model_state_backend). One per parameter, so that an
 * offloaded model can make them as its gradients come back (the same
 * operation on the same floats: the same bits). */
gt_status gt_grad_norm(gt_model *m, double *norm) {
  gt_backend *be = gt_model_state_backend(m);
  int np = gt_model_num_params(m);
  double *dev = NULL, *host = calloc((size_t)(np ? np : 1), sizeof *host);
  if (!host) return gt_errorf(GT_ENOMEM, "out of memory");
  if (gt_model_grads_sharded(m)) {
    free(host);
    return gt_errorf(GT_EUNSUPPORTED, "the gradients are sharded (ZeRO-2): their norm is gt_grad_norm_dist's");
  }
  gt_status s = gt_model_state_alloc_as(m, GT_MEM_SCRATCH, (size_t)(np ? np : 1) * sizeof(double), (void **)&dev);
  const float *g = gt_model_grads(m);
  for (int i = 0; i < np && s == GT_OK; i++) {
    const gt_param *p = gt_model_param(m, i);
    if (gt_param_in_norm(p)) s = gt_op_sum_squares(be, dev + i, g + p->offset, p->numel);
  }
  if (s == GT_OK && np) s = gt_backend_download(be, host, dev, (size_t)np * sizeof(double));
  if (dev) gt_model_state_free(m, dev);
  *norm = s == GT_OK ? gt_grad_norm_of_squares(m, host) : 0;
  free(host);
  return s;
}

float gt_clip_factor(double norm, float max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return (float)(max_norm / (norm + 1e-6));
}

gt_status gt_grad_norm_dist(gt_model *m, size_t lo, size_t hi, gt_group *shards, gt_group *tp, gt_group *pp,
                            double *norm) {
  gt_backend *be = gt_model_state_backend(m);
  int np = gt_model_num_params(m);
  double *dev = NULL;
  GT_TRY(gt_model_state_alloc_as(m, GT_MEM_SCRATCH, (size_t)(np ? np : 1) * sizeof(double), (void **)&dev));
  double *host = calloc((size_t)(np ? np : 1), sizeof *host);
  gt_status s = host ? GT_OK : gt_errorf(GT_ENOMEM, "out of memory");
  /* One partial sum per parameter, so split and whole ones can be told apart. */
  for (int i = 0; i < np && s == GT_OK; i++) {
    const gt_param *p = gt_model_param(m, i);
    /* A mirror of a tied parameter is counted once, by its owner's stage;
     * other stages' parameters are not here. */
    bool counted = gt_param_in_norm(p);
    size_t a = counted && p->offset > lo ? p->offset : lo;
    size_t b = counted && p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (!counted || a >= b) {
      s = gt_backend_memset(be, dev + i, 0, sizeof(double), NULL);
      continue;
    }
    const float *g = gt_model_grad_at(m, a); /* [lo, hi) is within what this rank holds */
    s = g ? gt_op_sum_squares(be, dev + i, g, b - a)
          : gt_errorf(GT_EINVAL, "the gradient norm of floats [%zu, %zu): not held by this rank", lo, hi);
  }
  if (s == GT_OK) s = gt_backend_download(be, host, dev, (size_t)np * sizeof(double));
  gt_model_state_free(m, dev);
  be = gt_model_backend(m); /* the groups carry device memory */
  /* [0] split parameters, [1] whole ones. The groups carry floats in
   * device memory; a squared norm keeps its relative precision in float. */
  double sums[2] = {0, 0};
  for (int i = 0; i < np && s == GT_OK; i++) sums[gt_model_param(m, i)->split_dim >= 0 ? 0 : 1] += host[i];
  free(host);
  float part[2] = {(float)sums[0], (float)sums[1]}, *dpart = NULL;
  bool reduce = (shards && shards->size > 1) || (tp && tp->size > 1) || (pp && pp->size > 1);
  if (s == GT_OK && reduce) s = gt_arena_alloc_as(gt_model_arena(m), GT_MEM_COMM, sizeof part, (void **)&dpart);
  if (s == GT_OK && reduce) s = gt_backend_upload(be, dpart, part, sizeof part);
  if (s == GT_OK && shards && shards->size > 1) s = shards->allreduce_sum(shards, dpart, 2);
  if (s == GT_OK && pp && pp->size > 1) s = pp->allreduce_sum(pp, dpart, 2); /* stages hold disjoint layers */
  if (s == GT_OK && tp && tp->size > 1) s = tp->allreduce_sum(tp, dpart, 1);
  if (s == GT_OK && reduce) s = gt_backend_download(be, part, dpart, sizeof part);
  if (dpart) gt_arena_free(gt_model_arena(m), dpart);
  *norm = sqrt((double)part[0] + (double)part[1]);
  return s;
}
