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

#include "giant/backend.h"
#include "giant/data.h"
#include "giant/layer.h"

GT_API_BEGIN

typedef struct gt_acts gt_acts;

/* How attention keeps what its backward needs (gt_op_attention_tiled_* and
 * gt_op_attention_full_*). Tiled saves a log-sum-exp per row, B*NH*T
 * floats, and recomputes the probabilities in backward; full saves the
 * B*NH*T*T probabilities and needs as much again as backward scratch. Both
 * compute the same function; tiled always takes its products in fp32, full
 * takes them in bf16 under GT_PRECISION_BF16 (gt_model_set_precision). */
typedef enum gt_attention_kind {
  GT_ATTENTION_TILED = 0, /* the default */
  GT_ATTENTION_FULL = 1,
} gt_attention_kind;

typedef struct gt_model_config {
  int B_max, T_max;    /* the largest micro-batch the model will run */
  uint64_t seed;       /* initialisation */
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
  /* Activation recomputation for the layers outside every recompute(mode)
   * scope (docs/memory.md); GT_RECOMPUTE_NONE, the default, keeps every
   * saved activation. */
  gt_recompute recompute;
  gt_attention_kind attention; /* of the layers that call gt_layer_attention_* */
} gt_model_config;

/* "none", "attention" or "block" into *out; anything else fails with
 * GT_EINVAL and a message naming the three. */
gt_status gt_recompute_parse(const char *name, gt_recompute *out);
const char *gt_recompute_name(gt_recompute mode);

gt_status gt_model_create(gt_backend *be, const gt_model_config *cfg, gt_model **out);
void gt_model_destroy(gt_model *m);

/* Annotations (docs/annotations.md). Scopes nest; every begin needs an end
 * before build. `count` is the scope's number: replicate(n) and split(k)
 * take 0 for "as the layout says", stage(i) its index, pipeline(m) m >= 1,
 * offload(w) w >= 1. Only layers inside split scopes are sharded when the
 * layout has tensor parallelism. */
gt_status gt_model_scope_begin(gt_model *m, gt_scope_kind kind, int count);
gt_status gt_model_scope_end(gt_model *m);

/* Appends a layer. Fails with a message naming both layers when its input
 * width does not match the previous layer's output width, or when a layer is
 * added after the loss layer. */
gt_status gt_model_add(gt_model *m, const gt_layer_type *type, const char *name, const void *config, gt_layer **out);
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
const gt_model_config *gt_model_get_config(const gt_model *m);
/* Forward FLOPs of one micro-batch (B,T), summed over layers. */
double gt_model_flops(const gt_model *m, int B, int T);

/* Activations for one micro-batch of up to (B_max, T_max). */
gt_status gt_acts_create(gt_model *m, gt_acts **out);
void gt_acts_destroy(gt_acts *a);

/* Runs the batch forward; *loss (if not NULL) gets the mean loss over the
 * batch's valid targets. Token ids >= the vocabulary fail with GT_ERANGE. */
gt_status gt_model_forward(gt_model *m, gt_acts *a, const gt_batch *batch, float *loss);
/* Backward of the last forward on `a`, accumulating into the gradients with
 * d(step loss)/d(per-token loss) = loss_scale. */
gt_status gt_model_backward(gt_model *m, gt_acts *a, float loss_scale);
gt_status gt_model_zero_grads(gt_model *m);
/* After a forward: the output distribution at (b,t), V floats into host_out. */
gt_status gt_model_probs(gt_model *m, gt_acts *a, int b, int t, float *host_out);

/* Mixed precision (see gt_precision). Under GT_PRECISION_BF16 the model
 * keeps a bf16 copy of its parameter buffer for the matrix products; the
 * fp32 buffer stays the master that optimizers update. The trainer sets its
 * configured precision here. */
gt_status gt_model_set_precision(gt_model *m, gt_precision p);
gt_precision gt_model_get_precision(const gt_model *m);

/* What a block of device memory is for: the categories of the memory
 * ledger (giant/engine/model.h) and of the estimate below, so that the two
 * compare category by category. */
typedef enum gt_mem_kind {
  GT_MEM_PARAMS,      /* the flat parameter buffer (master weights) */
  GT_MEM_GRADS,       /* the flat gradient buffer, and a held copy of it */
  GT_MEM_OPTIMIZER,   /* optimizer state (AdamW's moments, momentum) */
  GT_MEM_ACTIVATIONS, /* layers' outputs and saved tensors, gradient buffers, the batch */
  GT_MEM_ATTENTION,   /* the part of the saved tensors that is attention (gt_layer_type.attn_floats) */
  GT_MEM_BF16_COPY,   /* mixed precision's bf16 copy of the parameters */
  GT_MEM_OFFLOAD,     /* offloading's weight and gradient slots */
  GT_MEM_SCRATCH,     /* layers' scratch, bf16 operands, the gradient norm's sums */
  GT_MEM_COMM,        /* buffers the groups reduce through */
  GT_MEM_OTHER,       /* anything not tagged */
  GT_MEM_KINDS
} gt_mem_kind;

/* "parameters", "gradients", ...; "?" for a value out of range. */
const char *gt_mem_kind_name(gt_mem_kind k);

/* The device memory a built model will hold while it trains in a plain
 * loop (one micro-batch's activations in flight; a pipeline holds more),
 * by what it is for, in bytes as the arena sets them aside: the same
 * requests the model, its activations, its offload slots, an optimizer
 * and the trainer make, so that the peak the ledger measures equals it
 * category by category. The bf16 operand scratch of mixed precision, which
 * grows to the largest product, is not counted. */
typedef struct gt_device_estimate {
  size_t weights, grads, optimizer, bf16_copy; /* the flat buffers on the device */
  size_t slots;                                /* offloaded: the window and gradient slots; ZeRO-2: the
                                                  gradients' staging */
  size_t activations;                          /* without the attention below */
  size_t attention;                            /* layers' saved attention tensors */
  size_t scratch;                              /* layers' scratch and the gradient norm's sums */
  size_t comm;                                 /* the trainer's buffers for reductions over groups */
  size_t recompute;                            /* the one area recomputed layers (GT_RECOMPUTE_BLOCK) share:
                                                  counted as activations */
  size_t total;
} gt_device_estimate;

/* What the estimate assumes of training. */
typedef struct gt_estimate_config {
  /* Floats of optimizer state per parameter (AdamW 2, SGD with momentum
   * 1), which offloading moves to the host. */
  int optim_states;
  /* ZeRO-1: the optimizer state is one of this many equal shards of the
   * flat buffer (data-parallel ranks); 0 or 1: all of it. */
  int optim_shards;
  /* The trainer reduces over groups (it has a dist): its small device
   * buffer for the step's counts. */
  bool distributed;
} gt_estimate_config;
gt_status gt_model_device_estimate_ex(const gt_model *m, const gt_estimate_config *c, gt_device_estimate *out);
/* One process, optim_states floats of optimizer state per parameter. */
gt_status gt_model_device_estimate(const gt_model *m, int optim_states, gt_device_estimate *out);
/* An estimate's bytes of one category (GT_MEM_OTHER: 0). */
size_t gt_device_estimate_bytes(const gt_device_estimate *e, gt_mem_kind k);

/* Copies between the device parameter buffer and host memory (for
 * checkpoints and inspection). n = gt_model_buffer_floats floats
 * (giant/engine/model.h): the parameters with their padding. With the
 * parameters sharded over data parallelism (ZeRO-3), get gathers them
 * from the data-parallel group, so every rank of it calls it together,
 * and set keeps this rank's shard of what it is given. */
gt_status gt_model_get_params(gt_model *m, float *host, size_t n);
gt_status gt_model_set_params(gt_model *m, const float *host, size_t n);

GT_API_END
#endif
