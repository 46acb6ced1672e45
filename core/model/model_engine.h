/* The model's functions for the library's own layers: pipeline stages,
 * bf16 copies, readers, gradient hooks, the optimizer state's memory and
 * the offload window. Internal to libgiant (shared with the layers above,
 * SHARES in CMakeLists.txt); not exported. */
#ifndef GIANT_CORE_MODEL_ENGINE_H
#define GIANT_CORE_MODEL_ENGINE_H

#include "giant/engine/model.h"
#include "core/arena.h"

/* Micro-batches requested by a pipeline scope (0 if none), and the number of
 * stages the stage annotations make (1 if none). */
int gt_model_pipeline_micro_batches(const gt_model *m);

int gt_model_num_stages(const gt_model *m);

/* After build: whether the pipeline stages are those the stage scopes name
 * (else the planner's cut, or the even one). */
bool gt_model_stages_annotated(const gt_model *m);

/* Trainable scalars of the whole model, counting split parameters whole
 * (what gt_model_param_count gives on one process). */
size_t gt_model_param_count_whole(const gt_model *m);

gt_arena *gt_model_arena(const gt_model *m);

/* Before build: cut the layers into `n` pipeline stages, stage s holding
 * layers [first[s], first[s+1]) (first has n+1 entries, first[0] = 0,
 * first[n] = the layer count). It takes precedence over the even cut; stage
 * annotations that make exactly the stages needed take precedence over it. */
gt_status gt_model_set_stage_cut(gt_model *m, const int *first, int n);

/* Stages in all (pp_size * pp_chunks; 1 without pipelining), and the layers
 * [*first, *last] of stage `stage`. */
int gt_model_num_pipeline_stages(const gt_model *m);

gt_status gt_model_stage_layers(const gt_model *m, int stage, int *first, int *last);

/* Runs the layers of one stage this rank holds. `batch` gives the tokens
 * (and targets); `in` is the activation received from the previous stage
 * (NULL for stage 0), which must stay valid until the stage's backward.
 * *out (when not NULL) points at the stage's output, rows x out_dim floats.
 * On the last stage *loss gets the micro-batch's mean loss. */
gt_status gt_model_forward_stage(gt_model *m, gt_acts *a, const gt_batch *batch, int stage, const float *in,
                                 const float **out, float *loss);

/* Backward of one stage: dout is the gradient of its output (NULL on the
 * last stage, which starts from the loss); *din (when not NULL) points at
 * the gradient of its input (NULL on stage 0), valid until this acts' next
 * backward. */
gt_status gt_model_backward_stage(gt_model *m, gt_acts *a, int stage, const float *dout, float loss_scale,
                                  const float **din);

/* The valid targets (not -1) of the batch the last forward ran on `a`. */
int64_t gt_acts_targets(const gt_acts *a);

/* Replicated regions of a split layout: each rank of the tensor-parallel
 * group ran the region's layers on its share of the rows, so its gradients
 * of their parameters are partial. Once per step, after every micro-
 * batch's backward (before or after averaging over data parallelism: the
 * two sums commute), this sums them over the group, for the floats [lo,
 * hi) of the flat buffer (a ZeRO-1 shard, or all of it). The trainer calls
 * it; without regions it does nothing. */
gt_status gt_model_sum_region_grads(gt_model *m, size_t lo, size_t hi);

/* Whether parameter i's gradient is summed over the pipeline stages after
 * backward: a local mirror of a weight owned on another stage, or a local
 * owner whose tie another stage holds (gt_pp_exec_sync_tied sums them). */
bool gt_model_param_tied_across_stages(const gt_model *m, int i);

/* The ranks that share layer i's rows: those of the tensor-parallel group
 * for a layer in a replicated region, else 1. */
int gt_model_layer_replicas(const gt_model *m, int layer);

/* Whether micro-batches of B rows can run: a replicated region needs rows
 * that divide among its ranks. The message names the region. */
gt_status gt_model_check_rows(const gt_model *m, int B);

/* Called after each layer's backward with the layer's index, in backward
 * order: the layer's parameter gradients for this micro-batch are final
 * then. Data parallelism uses it to start reducing gradients while the
 * layers below are still computing theirs. NULL removes the hook. */
gt_status gt_model_set_grad_hook(gt_model *m, gt_status (*hook)(void *ctx, int layer), void *ctx);

/* ZeRO-2 (gt_model_parallel.zero >= 2 over dp_size > 1): the gradient
 * buffer holds only this rank's shard, the floats [lo, hi) of the flat
 * buffer. A layer's gradients are staged on the device while it runs
 * backward, then handed to the sink, which sums each owner's piece over
 * the data-parallel group to that owner; the model adds the sums into its
 * shard once the sink says they arrived. */
typedef struct gt_grad_sink {
  /* Starts summing the flat floats [lo, hi), at g on every rank, to the
   * ranks whose shards hold them, into g in place on each owner; `slot`
   * (0, 1, or 2 for the gradients held to the step's end) names the
   * group of sends wait() ends. g stays untouched until then. */
  gt_status (*send)(void *ctx, int slot, float *g, size_t lo, size_t hi);
  /* Returns once every send of `slot` since its last wait has ended. */
  gt_status (*wait)(void *ctx, int slot);
  void *ctx;
} gt_grad_sink;

bool gt_model_grads_sharded(const gt_model *m);

/* Refused unless the gradients are sharded; NULL removes it. Sends in
 * flight end first, their sums dropped. */
gt_status gt_model_set_grad_sink(gt_model *m, const gt_grad_sink *sink);

/* After the step's last backward: every send is waited for and added to
 * the shard, and the gradients held to the end (tied parameters) are
 * summed to their owners too. The shard is then the step's sum. Nothing
 * to do unless sharded. */
gt_status gt_model_flush_grads(gt_model *m);

/* The floats [*lo, *hi) of the flat buffer whose gradients this rank
 * holds (all of them unless sharded), and the gradient of flat float i,
 * which must lie in that range or be its end (NULL otherwise). */
void gt_model_grad_range(const gt_model *m, size_t *lo, size_t *hi);

float *gt_model_grad_at(const gt_model *m, size_t i);

/* Parameter i's whole gradient where this rank holds it whole: always
 * unless sharded; sharded, only for the parameters summed from several
 * places (tied ones, held to the step's end); NULL otherwise. */
float *gt_model_param_grad(const gt_model *m, int i);

/* ZeRO-3 (gt_model_parallel.zero >= 3 over dp_size > 1): the parameter
 * buffer holds only this rank's shard, the floats [lo, hi) of the flat
 * buffer (the gradients' shard, as ZeRO-2 keeps it). Before a layer runs
 * its parameters are gathered into a slot on the device: the model copies
 * this rank's pieces in and the source brings the others'. */
typedef struct gt_param_source {
  /* Starts filling the flat floats [lo, hi) at dst on every rank of the
   * data-parallel group, each owner's piece from the owner, whose dst
   * already holds it; `slot` (0 or 1) names the group of gathers wait()
   * ends. dst is not to be read until then. */
  gt_status (*gather)(void *ctx, int slot, float *dst, size_t lo, size_t hi);
  /* Returns once every gather of `slot` since its last wait has ended. */
  gt_status (*wait)(void *ctx, int slot);
  void *ctx;
} gt_param_source;

bool gt_model_params_sharded(const gt_model *m);

/* Refused unless the parameters are sharded; NULL removes it. Gathers in
 * flight end first. */
gt_status gt_model_set_param_source(gt_model *m, const gt_param_source *src);

/* The floats [*lo, *hi) of the flat buffer whose parameters this rank
 * holds (all of them unless sharded), and parameter float i, which must
 * lie in that range or be its end (NULL otherwise). An optimizer updates
 * through this. */
void gt_model_param_range(const gt_model *m, size_t *lo, size_t *hi);

float *gt_model_param_at(const gt_model *m, size_t i);

/* Whoever writes the parameter buffer directly (an optimizer, a checkpoint
 * loader) calls this before writing, so that readers registered below are
 * done with the bytes, and so that the bf16 copy is refreshed before the
 * next forward. gt_model_set_params does it itself. An optimizer calls it
 * before it updates its state too: the two change together. */
void gt_model_params_changed(gt_model *m);

/* The same for the parameters of one layer only (an update that goes layer
 * by layer): an offloaded model then refetches only the slots that hold
 * them; otherwise it is gt_model_params_changed. */
void gt_model_layer_params_changed(gt_model *m, int layer);

/* The bf16 twin of the parameter buffer (same offsets), for an optimizer
 * that writes it in the same pass as the fp32 update: in device memory, or
 * offloaded in host memory beside the master (the window's matmul-only
 * weights come from it); NULL when there is none (fp32). Whoever rewrote
 * all of it after gt_model_params_changed says so with
 * gt_model_bf16_written, and the conversion before the next forward (or
 * the next fetch) is skipped; an update of one layer's parameters, after
 * gt_model_layer_params_changed, says so with gt_model_layer_bf16_written. */
uint16_t *gt_model_params_bf16(gt_model *m);

void gt_model_bf16_written(gt_model *m);

void gt_model_layer_bf16_written(gt_model *m, int layer);

gt_status gt_model_add_reader(gt_model *m, void (*wait)(void *ctx), void *ctx);

void gt_model_remove_reader(gt_model *m, void (*wait)(void *ctx), void *ctx);

void gt_model_wait_readers(gt_model *m);

/* Memory for state that moves with the parameters (an optimizer's moments,
 * a ZeRO-1 shard): the model's device arena, or host memory when the model
 * is offloaded. Freeing NULL does nothing. */
gt_status gt_model_state_alloc(gt_model *m, size_t bytes, void **ptr);
/* The same, counted in the memory ledger as `kind` (gt_model_state_alloc:
 * GT_MEM_OTHER). */
gt_status gt_model_state_alloc_as(gt_model *m, gt_mem_kind kind, size_t bytes, void **ptr);

void gt_model_state_free(gt_model *m, void *ptr);

/* The backend whose kernels run on that state (the optimizer's update, the
 * gradient norm): the model's own, or, for a model offloaded from a GPU,
 * a CPU backend the model holds, so that the update runs on host threads
 * where the state is. */
gt_backend *gt_model_state_backend(const gt_model *m);

/* Offloaded: the next gt_model_backward also sums the squares of each
 * parameter's gradient that a norm counts (gt_param_in_norm) into
 * sumsq[p] (memory from gt_model_state_alloc, one double per parameter),
 * each as soon as its gradients are back on the host and final, so that
 * the layers already back are summed while the last ones come. For the
 * step's last micro-batch: gt_grad_norm_of_squares gives the norm, the
 * same bits as gt_grad_norm. One backward only; NULL cancels; without
 * offloading it does nothing. */
gt_status gt_model_sum_grad_squares_next(gt_model *m, double *sumsq);

/* Offloaded: starts fetching the weights the next forward needs first, so
 * that they arrive while the caller does other work (the trainer calls it
 * after each update). Does nothing otherwise. */
gt_status gt_model_prefetch(gt_model *m);

/* Whoever writes the gradient buffer directly, other than backward (a
 * fault that plants a NaN), calls this after: an offloaded model otherwise
 * takes gradients it zeroed for zero without reading them. */
void gt_model_grads_changed(gt_model *m);

gt_status gt_model_get_grads(gt_model *m, float *host, size_t n);

/* The element of the whole parameter that element `i` of this rank's slice
 * is (identity when the parameter is not split). */
size_t gt_param_global_index(const gt_param *p, size_t i);

/* The initial value of element `i` of parameter `name` under `seed`. */
float gt_init_value(uint64_t seed, const char *name, size_t i, gt_init_kind kind, float std);

/* In backward, optional: the gradients of this layer's parameters
 * [first, first + n) are final, as the kernels queued so far leave them;
 * the rest of its backward does not touch them. Offloaded, their copy to
 * the host starts now, behind the rest of the layer's backward, instead of
 * after it. Anywhere else it does nothing. */
gt_status gt_layer_grads_final(const gt_layer *self, int first, int n);

/* Whether a gradient norm counts this parameter: its storage's owner (not
 * a tied user), held by this rank and not a mirror of another stage's. */
bool gt_param_in_norm(const gt_param *p);

/* Mixed precision: the bf16 copy of parameter i, refreshed from the fp32
 * master before each forward that follows a change; NULL under fp32. */
const uint16_t *gt_layer_param_bf16(const gt_layer *self, int i);

/* A reader of the parameter buffer (and of the optimizer state, which
 * changes with it) from another thread: a checkpoint copying its snapshot
 * while the next step's forward and backward run. wait(ctx) returns once
 * the reader is done with the bytes; gt_model_params_changed calls it
 * first. Registering the same pair twice is refused. */
#define GT_MODEL_MAX_READERS 4

#endif
