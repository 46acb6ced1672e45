/* A model: an ordered list of layers, its parameters, and the forward and
 * backward passes over one micro-batch.
 *
 * Lifecycle: gt_model_create, gt_model_add for each layer (shapes are
 * checked as layers are added), gt_model_build (lays out and initialises
 * parameters on the device), then any number of forward/backward passes.
 *
 * Activations live in a gt_acts: the saved tensors of one micro-batch in
 * flight. A plain training loop needs one; a pipeline schedule keeps several.
 */
#ifndef GIANT_MODEL_H
#define GIANT_MODEL_H

#include "giant/arena.h"
#include "giant/backend.h"
#include "giant/data.h"
#include "giant/layer.h"

GT_API_BEGIN

typedef struct gt_acts gt_acts;

typedef struct gt_model_config {
  int B_max, T_max;  /* the largest micro-batch the model will run */
  uint64_t seed;     /* initialisation */
  size_t budget_bytes; /* device memory budget for the model's arena; 0 = none */
  /* Leave the parameters at zero instead of initialising them from the
   * seed: for a model whose state comes from elsewhere at once (moved from
   * peers after a reshape), where computing the initial values is wasted. */
  bool no_init;
  /* Offloading (docs/offload.md). With offload_window = w > 0, the master
   * parameters and gradients (and optimizer state allocated through
   * gt_model_state_alloc) live in host memory, and the device holds the
   * weights of w layers at a time, fetching offload_prefetch layers ahead
   * (0 means 1; at most w - 1) on the copy stream while a layer computes.
   * Results are bit-identical to training without it. 0 takes the
   * window of an offload(w) annotation, if any; < 0 is off whatever the
   * annotations say. */
  int offload_window, offload_prefetch;
} gt_model_config;

gt_status gt_model_create(gt_backend *be, const gt_model_config *cfg, gt_model **out);
void gt_model_destroy(gt_model *m);

/* Parallel context, set before layers are added (by the plan; see
 * giant/plan.h). tp: the group tensor-parallel layers are split across;
 * NULL or size 1 = no tensor parallelism. */
typedef struct gt_model_parallel {
  gt_group *tp;
  bool seq_parallel;     /* sequence parallelism in split layers (needs tp > 1) */
  size_t buffer_multiple; /* pad the flat buffers to a multiple of this many
                             floats (so data-parallel shards are equal); 0 = none */
  /* Pipeline parallelism: the model is cut into pp_size * pp_chunks stages
   * (from the stage annotations when there are exactly that many, else
   * evenly by layer count); this rank holds stages s with s % pp_size ==
   * pp_rank, and only their layers get memory. 0 means 1. */
  int pp_rank, pp_size, pp_chunks;
} gt_model_parallel;
gt_status gt_model_set_parallel(gt_model *m, const gt_model_parallel *p);
const gt_model_parallel *gt_model_get_parallel(const gt_model *m);

/* Annotations (docs/annotations.md). Scopes nest; every begin needs an end
 * before build. `count` is the scope's number: replicate(n) and split(k)
 * take 0 for "as the layout says", stage(i) its index, pipeline(m) m >= 1,
 * offload(w) w >= 1. Only layers inside split scopes are sharded when the
 * layout has tensor parallelism. */
gt_status gt_model_scope_begin(gt_model *m, gt_scope_kind kind, int count);
gt_status gt_model_scope_end(gt_model *m);
/* Micro-batches requested by a pipeline scope (0 if none), and the number of
 * stages the stage annotations make (1 if none). */
int gt_model_pipeline_micro_batches(const gt_model *m);
int gt_model_num_stages(const gt_model *m);

/* What a model's annotations ask of its layout, read from a model whose
 * layers are added (built or not), so that a plan can be made before the
 * model that trains is built. Each name is the first layer of the scope
 * that gave the number, for messages ("" where none did). */
typedef struct gt_annotations {
  int dp;             /* replicate(n) around the whole model: n (0: none, or no count) */
  int tp;             /* split(k): k (0: no split scope gives a count) */
  bool any_split;     /* some layer is inside a split scope */
  int stages;         /* stage scopes (0: none) */
  int micro_batches;  /* pipeline(m): m (0: none) */
  int offload_window; /* offload(w) around the whole model: w (0: none) */
  int regions;        /* replicate scopes around part of the model */
  int region_ways;    /* their count (0: none given) */
  char dp_at[64], tp_at[64], stage_at[64], pipeline_at[64], offload_at[64], region_at[64], region_end[64];
} gt_annotations;
/* Fails, naming the layer, on annotations that contradict each other: the
 * conflicts docs/annotations.md lists. */
gt_status gt_model_annotations(const gt_model *m, gt_annotations *out);
/* After build: whether the pipeline stages are those the stage scopes name
 * (else the planner's cut, or the even one). */
bool gt_model_stages_annotated(const gt_model *m);

/* Appends a layer. Fails with a message naming both layers when its input
 * width does not match the previous layer's output width, or when a layer is
 * added after the loss layer. */
gt_status gt_model_add(gt_model *m, const gt_layer_type *type, const char *name, const void *config,
                       gt_layer **out);
/* Allocates and initialises parameters and gradients; after this no layer
 * can be added. The model must end in a loss layer. */
gt_status gt_model_build(gt_model *m);

int gt_model_num_layers(const gt_model *m);
/* After gt_model_build: the token ids the model takes, as inputs and as
 * targets alike (ids are below it); 0 before the build. */
int gt_model_vocab_size(const gt_model *m);
gt_layer *gt_model_layer(const gt_model *m, int i);
gt_layer *gt_model_find_layer(const gt_model *m, const char *name);
int gt_model_num_params(const gt_model *m);
const gt_param *gt_model_param(const gt_model *m, int i);
/* Trainable scalars (tied parameters counted once). */
size_t gt_model_param_count(const gt_model *m);
/* Trainable scalars of the whole model, counting split parameters whole
 * (what gt_model_param_count gives on one process). */
size_t gt_model_param_count_whole(const gt_model *m);
/* Floats in the flat parameter buffer: every parameter starts on a 64-byte
 * boundary, so this is a little more than gt_model_param_count. */
size_t gt_model_buffer_floats(const gt_model *m);
/* The flat parameter and gradient buffers (device memory). Whoever writes
 * the parameters through this pointer calls gt_model_params_changed. */
float *gt_model_params(const gt_model *m);
float *gt_model_grads(const gt_model *m);
gt_backend *gt_model_backend(const gt_model *m);
gt_arena *gt_model_arena(const gt_model *m);
const gt_model_config *gt_model_get_config(const gt_model *m);
/* Forward FLOPs of one micro-batch (B,T), summed over layers. */
double gt_model_flops(const gt_model *m, int B, int T);

/* ---- pipeline stages ---- */

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

/* Activations for one micro-batch of up to (B_max, T_max). */
gt_status gt_acts_create(gt_model *m, gt_acts **out);
void gt_acts_destroy(gt_acts *a);

/* The valid targets (not -1) of the batch the last forward ran on `a`. */
int64_t gt_acts_targets(const gt_acts *a);

/* Runs the batch forward; *loss (if not NULL) gets the mean loss over the
 * batch's valid targets. Token ids >= the vocabulary fail with GT_ERANGE. */
gt_status gt_model_forward(gt_model *m, gt_acts *a, const gt_batch *batch, float *loss);
/* Backward of the last forward on `a`, accumulating into the gradients with
 * d(step loss)/d(per-token loss) = loss_scale. */
gt_status gt_model_backward(gt_model *m, gt_acts *a, float loss_scale);
gt_status gt_model_zero_grads(gt_model *m);
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
/* After a forward: the output distribution at (b,t), V floats into host_out. */
gt_status gt_model_probs(gt_model *m, gt_acts *a, int b, int t, float *host_out);

/* Mixed precision (see gt_precision). Under GT_PRECISION_BF16 the model
 * keeps a bf16 copy of its parameter buffer for the matrix products; the
 * fp32 buffer stays the master that optimizers update. The trainer sets its
 * configured precision here. */
gt_status gt_model_set_precision(gt_model *m, gt_precision p);
gt_precision gt_model_get_precision(const gt_model *m);
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

/* A reader of the parameter buffer (and of the optimizer state, which
 * changes with it) from another thread: a checkpoint copying its snapshot
 * while the next step's forward and backward run. wait(ctx) returns once
 * the reader is done with the bytes; gt_model_params_changed calls it
 * first. Registering the same pair twice is refused. */
#define GT_MODEL_MAX_READERS 4
gt_status gt_model_add_reader(gt_model *m, void (*wait)(void *ctx), void *ctx);
void gt_model_remove_reader(gt_model *m, void (*wait)(void *ctx), void *ctx);
void gt_model_wait_readers(gt_model *m);

/* ---- offloading ---- */

/* Whether the model's master state lives in host memory (offload_window > 0). */
bool gt_model_offloaded(const gt_model *m);
/* Memory for state that moves with the parameters (an optimizer's moments,
 * a ZeRO-1 shard): the model's device arena, or host memory when the model
 * is offloaded. Freeing NULL does nothing. */
gt_status gt_model_state_alloc(gt_model *m, size_t bytes, void **ptr);
void gt_model_state_free(gt_model *m, void *ptr);
/* The backend whose kernels run on that state (the optimizer's update, the
 * gradient norm): the model's own, or, for a model offloaded from a GPU,
 * a CPU backend the model holds, so that the update runs on host threads
 * where the state is. */
gt_backend *gt_model_state_backend(const gt_model *m);

typedef struct gt_offload_stats {
  int window, prefetch;        /* as run: clipped to the layers this rank holds */
  size_t slot_bytes;           /* one weight slot, in the compute precision */
  size_t weight_bytes;         /* every local layer's weights once, as fetched */
  uint64_t fetches;            /* layers' weights copied to the device */
  uint64_t bytes_in, bytes_out; /* host to device, device to host */
  /* Seconds the host waited for transfers (weights not yet fetched,
   * gradients not yet back): the copy time compute did not hide. */
  double wait_seconds;
  double wait_grad_seconds;    /* the part of it that waited for gradients going back */
} gt_offload_stats;
/* Zero when not offloaded. */
gt_offload_stats gt_model_offload_stats(const gt_model *m);
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

/* The device memory a built model will hold while it trains in a plain
 * loop (one micro-batch's activations in flight; a pipeline holds more),
 * by what it is for, in bytes as the arena sets them aside.
 * optim_states: floats of optimizer state per parameter (AdamW 2, SGD
 * with momentum 1), which offloading moves to the host. The bf16 operand
 * scratch of mixed precision, which grows to the largest product, is not
 * counted. */
typedef struct gt_device_estimate {
  size_t weights, grads, optimizer, bf16_copy; /* the flat buffers on the device */
  size_t slots;                                /* offloaded: the window and gradient slots */
  size_t activations, scratch;
  size_t total;
} gt_device_estimate;
gt_status gt_model_device_estimate(const gt_model *m, int optim_states, gt_device_estimate *out);

/* Copies between the device parameter buffer and host memory (for tests,
 * checkpoints, inspection). n = gt_model_buffer_floats floats. */
gt_status gt_model_get_params(gt_model *m, float *host, size_t n);
gt_status gt_model_set_params(gt_model *m, const float *host, size_t n);
gt_status gt_model_get_grads(gt_model *m, float *host, size_t n);

/* The element of the whole parameter that element `i` of this rank's slice
 * is (identity when the parameter is not split). */
size_t gt_param_global_index(const gt_param *p, size_t i);

/* The initial value of element `i` of parameter `name` under `seed`. */
float gt_init_value(uint64_t seed, const char *name, size_t i, gt_init_kind kind, float std);

GT_API_END
#endif
