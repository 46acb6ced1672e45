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
  float beta1, beta2, eps;  /* AdamW */
  float momentum;           /* SGD */
  bool nesterov;            /* SGD */
  float weight_decay;       /* applied to parameters declared with decay */
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
/* An optimizer that owns only floats [lo, hi) of the flat buffer (a ZeRO
 * shard): its state is sized hi - lo and a step updates only that range. */
gt_status gt_optimizer_create_range(gt_model *m, const gt_optim_config *cfg, size_t lo, size_t hi,
                                    gt_optimizer **out);
void gt_optimizer_destroy(gt_optimizer *o);
/* One update of every parameter from the model's gradients, which are first
 * multiplied by grad_scale (1 = none; clipping passes its factor). */
gt_status gt_optimizer_step(gt_optimizer *o, float lr, float grad_scale);
/* The same from gradients other than the model's (laid out like them, NULL:
 * the model's): a delayed update applies the gradients it held aside. */
gt_status gt_optimizer_step_from(gt_optimizer *o, float lr, float grad_scale, const float *grads);
/* The same step taken layer by layer, as each layer's gradients become
 * final: begin_step once (the update count moves on), then step_layer for
 * every layer, in any order, from any one thread at a time. A layer's
 * parameters are its own (a tied one is updated by its owner). The result
 * is the same, bit for bit, as gt_optimizer_step. */
void gt_optimizer_begin_step(gt_optimizer *o);
gt_status gt_optimizer_step_layer(gt_optimizer *o, int layer, float lr, float grad_scale);
/* The same from gradients other than the model's, as gt_optimizer_step_from:
 * the previous step's, held aside, while backward writes this step's. */
gt_status gt_optimizer_step_layer_from(gt_optimizer *o, int layer, float lr, float grad_scale, const float *grads);
int gt_optimizer_steps(const gt_optimizer *o);
/* For checkpoints: the state buffers over floats [lo, hi) of the flat
 * buffer, in the memory of the model's state backend (gt_model_state_
 * backend: the device's, or the host's when offloaded), or NULL when the
 * state is on disk. Buffer 0 is AdamW's first moment or SGD's momentum,
 * buffer 1 AdamW's second moment. */
int gt_optimizer_num_states(const gt_optimizer *o);
float *gt_optimizer_state(gt_optimizer *o, int k);
/* Copies n floats of state k, from float `at` of the range (0 = float lo
 * of the flat buffer), to or from host memory, wherever the state lives. */
gt_status gt_optimizer_read_state(gt_optimizer *o, int k, size_t at, size_t n, float *dst);
gt_status gt_optimizer_write_state(gt_optimizer *o, int k, size_t at, size_t n, const float *src);
/* Whether the state is kept on disk (gt_optim_config.state_dir). */
bool gt_optimizer_on_disk(const gt_optimizer *o);
/* For checkpoints of state on disk, which may not fit host memory: an
 * unlinked file in the state's directory with room reserved for a copy of
 * all of it (a full disk fails here), state k's float i at byte
 * (k * (hi - lo) + i) * 4; and copies of the whole state to and from such
 * a file, kept on disk (the kernel copies, or shares blocks where the file
 * system can). GT_EINVAL when the state is in memory. */
gt_status gt_optimizer_state_scratch(gt_optimizer *o, int *fd);
gt_status gt_optimizer_copy_state_out(gt_optimizer *o, int fd);
gt_status gt_optimizer_copy_state_in(gt_optimizer *o, int fd);
void gt_optimizer_range(const gt_optimizer *o, size_t *lo, size_t *hi);
const gt_optim_config *gt_optimizer_get_config(const gt_optimizer *o);
/* Resuming: the update count (AdamW's bias correction follows it). */
void gt_optimizer_set_steps(gt_optimizer *o, int steps);

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
/* The same norm from per-parameter sums of squares already made (host
 * memory; gt_model_sum_grad_squares_next). */
double gt_grad_norm_of_squares(const gt_model *m, const double *sumsq);
/* The same when the model is split or sharded: this rank holds the floats
 * [lo, hi) of the gradients that count (a ZeRO shard, or everything), and
 * the norm's square is summed over `shards` (the data-parallel group under
 * ZeRO, else NULL) and, for split parameters only, over the tensor-parallel
 * group `tp` (NULL when not split): parameters held whole by every
 * tensor-parallel rank are counted once. Pipeline stages hold disjoint
 * layers, so everything is summed over `pp` (NULL without pipelining). */
gt_status gt_grad_norm_dist(gt_model *m, size_t lo, size_t hi, gt_group *shards, gt_group *tp, gt_group *pp,
                            double *norm);
/* The factor that brings a gradient of norm `norm` down to `max_norm`
 * (1 when it is already within, or when max_norm <= 0). */
float gt_clip_factor(double norm, float max_norm);

GT_API_END
#endif
