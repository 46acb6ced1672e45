/* The optimizer's functions for the library's own trainer and checkpoints:
 * ranges of the flat buffer, layer-by-layer updates, the state's memory
 * and its copies, and the gradient norm over a job. Internal to libgiant
 * (shared with the layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_OPTIM_OPTIMIZER_ENGINE_H
#define GIANT_OPTIM_OPTIMIZER_ENGINE_H

#include "giant/optim.h"
#include "giant/group.h"

/* An optimizer that owns only floats [lo, hi) of the flat buffer (a ZeRO
 * shard): its state is sized hi - lo and a step updates only that range. */
gt_status gt_optimizer_create_range(gt_model *m, const gt_optim_config *cfg, size_t lo, size_t hi, gt_optimizer **out);

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

#endif
