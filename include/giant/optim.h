/* Optimizers, learning-rate schedules and gradient clipping.
 *
 * An optimizer keeps its state (AdamW's two moments, SGD's momentum) in
 * buffers laid out exactly like the model's parameter buffer, so state can
 * later be sharded, offloaded or checkpointed by the same offsets. */
#ifndef GIANT_OPTIM_H
#define GIANT_OPTIM_H

#include "giant/group.h"
#include "giant/model.h"

GT_API_BEGIN

typedef enum gt_optim_kind { GT_OPTIM_ADAMW = 0, GT_OPTIM_SGD = 1 } gt_optim_kind;

typedef struct gt_optim_config {
  gt_optim_kind kind;
  float beta1, beta2, eps; /* AdamW */
  float momentum;          /* SGD */
  bool nesterov;           /* SGD */
  float weight_decay;      /* applied to parameters declared with decay */
  /* The disk tier (docs/offload.md): a directory in which the state is
   * kept, in a file of its own that nothing else sees; an update streams
   * it through `state_stage_bytes` of host memory (0: 64 MiB, or half of
   * what the backend's host_mem_limit leaves), reading ahead and writing
   * behind on an I/O thread. The file's whole size is reserved at
   * creation: a missing, read-only or full directory fails there. The
   * state must be updated on the host: an offloaded model, or one on the
   * CPU backend. NULL: the state is in memory. */
  const char *state_dir;
  size_t state_stage_bytes;
} gt_optim_config;

/* AdamW(0.9, 0.95, 1e-8, weight decay 0.1): GPT-style defaults. */
gt_optim_config gt_optim_defaults(gt_optim_kind kind);
/* "adamw" or "sgd". */
gt_status gt_optim_parse(const char *name, gt_optim_kind *kind);

typedef struct gt_optimizer gt_optimizer;

gt_status gt_optimizer_create(gt_model *m, const gt_optim_config *cfg, gt_optimizer **out);
void gt_optimizer_destroy(gt_optimizer *o);
/* One update of every parameter from the model's gradients, which are first
 * multiplied by grad_scale (1 = none; clipping passes its factor). */
gt_status gt_optimizer_step(gt_optimizer *o, float lr, float grad_scale);

/* Linear warmup to lr_max over `warmup` steps, then cosine decay to lr_min
 * at step `total`, then lr_min. Steps count from 0. */
typedef struct gt_lr_schedule {
  float lr_max, lr_min;
  int warmup, total;
} gt_lr_schedule;
float gt_lr_at(const gt_lr_schedule *s, int step);

/* The global L2 norm of the model's gradients: the squares summed per
 * parameter (gt_param_in_norm), then over the parameters in order. */
gt_status gt_grad_norm(gt_model *m, double *norm);
/* The factor that brings a gradient of norm `norm` down to `max_norm`
 * (1 when it is already within, or when max_norm <= 0). */
float gt_clip_factor(double norm, float max_norm);

GT_API_END
#endif
