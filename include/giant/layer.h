/* Layers: the unit a model is made of.
 *
 * A layer type is a table of functions (gt_layer_type). At build time a
 * layer declares its parameters with gt_layer_declare_param; the model lays
 * every parameter out in one contiguous buffer (and the gradients in a twin
 * buffer), so an optimizer, a gradient all-reduce or a checkpoint sees one
 * flat array. At run time the model hands each layer its input, output and a
 * block of saved activations for one micro-batch; the layer reads its
 * parameters with gt_layer_param and accumulates into gt_layer_grad.
 *
 * Users write their own layer types against exactly this interface; the
 * built-in ones (embedding, transformer block, LayerNorm, linear, LM head)
 * use nothing else. See examples/custom_layer.
 */
#ifndef GIANT_LAYER_H
#define GIANT_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/backend.h"
#include "giant/group.h"
#include "giant/status.h"

GT_API_BEGIN

typedef struct gt_model gt_model;
typedef struct gt_layer gt_layer;

/* How a parameter is initialised (values depend only on the model seed, the
 * parameter's name and the element index, so every layout and every rank
 * computes the same initial values). */
typedef enum gt_init_kind {
  GT_INIT_ZEROS = 0,
  GT_INIT_ONES,
  GT_INIT_NORMAL, /* N(0, std) */
} gt_init_kind;

typedef struct gt_param_spec {
  const char *name; /* local to the layer, e.g. "w"; the model prefixes the layer name */
  int ndim;
  int64_t shape[4]; /* the whole parameter's shape, as one process holds it */
  gt_init_kind init;
  float std;  /* for GT_INIT_NORMAL */
  bool decay; /* weight decay applies (matrices yes, biases and norms no) */
  /* Tensor parallelism: when split and the layer is split across a group of
   * size p, rank r holds part r of p equal parts along split_dim. Otherwise
   * every rank of the group holds all of it. */
  bool split;
  int split_dim;
  /* Read only as the weight of the layer's matrix products (through
   * gt_layer_linear_forward/backward), never through gt_layer_param. Under
   * bf16 an offloaded model's window then holds it in bf16 alone, and its
   * transfers carry half the bytes; gt_layer_param gives NULL for it there. */
  bool matmul_only;
} gt_param_spec;

typedef struct gt_param {
  char name[96]; /* "<layer>.<local>" */
  int ndim;
  int64_t shape[4];            /* what this rank holds */
  int64_t global_shape[4];     /* the whole parameter */
  int split_dim;               /* -1: held whole; else cut along this dimension */
  int split_rank, split_parts; /* this rank holds part split_rank of split_parts */
  size_t numel;                /* elements this rank holds */
  bool local;                  /* its layer runs on this rank (pipeline stages) */
  int mirror_of;               /* a local copy of a tied parameter whose owner lives on another
                         pipeline stage: the owner's index, else -1 */
  size_t offset;               /* in floats, into the model's parameter (and gradient) buffer */
  gt_init_kind init;
  float std;
  bool decay;
  int layer;        /* index of the declaring layer */
  int tied_to;      /* index of the parameter whose storage this one shares, or -1 */
  bool matmul_only; /* gt_param_spec.matmul_only, as this layer reads it */
} gt_param;

/* What a layer sees when it runs on one micro-batch. */
typedef struct gt_layer_ctx {
  gt_backend *be;
  int B, T;               /* this micro-batch; T <= the model's T_max */
  const int32_t *tokens;  /* (B,T) token ids, device memory */
  const int32_t *targets; /* (B,T) next-token targets, -1 = ignore, device memory */
  float loss_scale;       /* d(step loss)/d(per-token loss), for loss layers */
  float *scratch;         /* device scratch of the largest scratch_floats() of any layer */
  gt_precision precision; /* of the model's matrix products (gt_model_set_precision) */
  /* This forward runs again just before the layer's backward, to make the
   * saved activations that activation recomputation did not keep: only
   * `acts` is read afterwards, so a layer may leave `out` unwritten (it is
   * a scratch area then). A layer's forward must be a pure function of its
   * input, its parameters and the batch for recomputation to be exact. */
  bool recompute;
} gt_layer_ctx;

/* Activation recomputation (docs/memory.md): what a layer keeps of a
 * micro-batch for its backward. */
typedef enum gt_recompute {
  GT_RECOMPUTE_NONE = 0,      /* every saved activation */
  GT_RECOMPUTE_ATTENTION = 1, /* a transformer block keeps all but its attention core's output and softmax
                                 state, which its backward computes again from the saved qkv; other layer
                                 types keep everything */
  GT_RECOMPUTE_BLOCK = 2,     /* only the layer's input (the previous layer's output): backward runs the
                                 layer's forward again first, into one area the model shares between such
                                 layers. The loss layer keeps everything: its backward follows its
                                 forward at once */
} gt_recompute;

/* Annotation scopes, in the manner of Whale: opened and closed around the
 * layers a user adds (gt_model_scope_begin / gt_model_scope_end), each
 * with a count. The rules, nesting and precedence: docs/annotations.md. */
typedef enum gt_scope_kind {
  GT_SCOPE_REPLICATE = 0, /* replicate(n): around the whole model, n data-parallel replicas; around
                             some layers of a split layout, those layers run data parallel over
                             the n ranks of the split, each on its share of the rows */
  GT_SCOPE_SPLIT = 1,     /* split(k): the layers inside are sharded over k tensor-parallel ranks */
  GT_SCOPE_STAGE = 2,     /* stage(i): the layers inside form pipeline stage i (0, 1, ... in order) */
  GT_SCOPE_PIPELINE = 3,  /* pipeline(m): the stages inside run as a pipeline of m micro-batches */
  GT_SCOPE_OFFLOAD = 4,   /* offload(w): around the whole model, offloaded with a window of w layers */
  GT_SCOPE_RECOMPUTE = 5, /* recompute(mode): the layers inside recompute their activations as the
                             gt_recompute mode says, whatever the model's default; the innermost wins */
  GT_SCOPE_ZERO = 6,      /* zero(s): around the whole model, ZeRO stage s (1: optimizer state, 2: and gradients) */
} gt_scope_kind;

typedef struct gt_layer_type {
  const char *name;
  /* Reads the user's config, sets in_dim/out_dim, declares parameters. */
  gt_status (*build)(gt_layer *self, const void *config);
  /* Floats of activations saved for backward, for one micro-batch of (B,T). */
  size_t (*acts_floats)(const gt_layer *self, int B, int T);
  /* Floats of temporary scratch needed by forward or backward. */
  size_t (*scratch_floats)(const gt_layer *self, int B, int T);
  /* in: (B,T,in_dim) floats, or NULL when in_dim == 0 (the layer reads
   * ctx->tokens). out: (B,T,out_dim). For a loss layer out is the per-token
   * loss (B,T). */
  gt_status (*forward)(gt_layer *self, const gt_layer_ctx *ctx, const float *in, float *out, float *acts);
  /* Accumulates into din (NULL for the first layer) and the parameter
   * gradients. dout is NULL for a loss layer, which uses ctx->loss_scale. */
  gt_status (*backward)(gt_layer *self, const gt_layer_ctx *ctx, const float *in, const float *dout, float *din,
                        float *acts);
  /* Forward FLOPs for one micro-batch (matrix products, 2 per multiply-add);
   * a training step costs three times this. NULL counts as zero. */
  double (*flops)(const gt_layer *self, int B, int T);
  /* Optional, for loss layers: copy the next-token distribution at (b,t)
   * from acts to host memory (V floats), after a forward. */
  gt_status (*probs)(gt_layer *self, const gt_layer_ctx *ctx, float *acts, int b, int t, float *host_out);
  void (*destroy)(gt_layer *self);
  /* Under sequence parallelism, split layers pass activations between them
   * as sequence shards: each tensor-parallel rank holds rows [r*N/p,
   * (r+1)*N/p) of the N = B*T token rows. A type that can run so says so. */
  bool supports_seq_parallel;
  /* Optional: of acts_floats, the floats that are attention (its
   * probabilities or what stands for them), which the memory ledger counts
   * apart from the other activations. NULL counts as zero. */
  size_t (*attn_floats)(const gt_layer *self, int B, int T);
} gt_layer_type;

struct gt_layer {
  const gt_layer_type *type;
  char name[64];
  int index;
  int in_dim;      /* features per token in; 0 = the layer reads token ids */
  int out_dim;     /* features per token out */
  bool is_loss;    /* last layer: produces per-token losses (out_dim 1) */
  int vocab;       /* a layer that reads token ids or predicts them: the vocabulary size */
  gt_group *tp;    /* the tensor-parallel group this layer is split across, or NULL */
  bool split;      /* inside a split scope (or the default strategy): shard when tp > 1 */
  int stage;       /* pipeline stage (annotations, or the even cut at build) */
  bool local;      /* this rank holds the layer (its stage is this rank's) */
  int first_param; /* this layer's parameters are model params [first, first+n) */
  int nparams;
  gt_model *model;
  void *state;            /* the layer type's own data (its config) */
  gt_recompute recompute; /* set when added: the innermost recompute scope's mode, else the model's */
};

/* During build: declare a parameter; *index receives its position among the
 * layer's parameters (0, 1, ...). */
gt_status gt_layer_declare_param(gt_layer *self, const gt_param_spec *spec, int *index);
/* During build: share another layer's parameter instead of declaring a new
 * one (weight tying). `layer_name` and `param` name it ("wte", "w"). */
gt_status gt_layer_tie_param(gt_layer *self, const char *local_name, const char *layer_name, const char *param,
                             int *index);
/* During build: this layer reads its parameter i only as a matrix
 * product's weight (gt_param_spec.matmul_only), for a tied parameter whose
 * owner reads it otherwise (an embedding table shared with the LM head). */
gt_status gt_layer_param_matmul_only(gt_layer *self, int i);
/* At run time: the device pointers of parameter i of this layer and of its
 * gradient. */
float *gt_layer_param(const gt_layer *self, int i);
float *gt_layer_grad(const gt_layer *self, int i);
const gt_param *gt_layer_param_info(const gt_layer *self, int i);

/* A layer's matrix products in the model's precision. Layers (built-in and
 * user-written) call these instead of the backend's linear kernels, so a
 * trainer's precision setting reaches every product.
 *
 * out (N,OC) = in (N,C) @ W^T + bias, W = parameter w of this layer, stored
 * (OC,C); bias may be NULL. Under bf16 the input is rounded to bf16, the
 * product reads W's bf16 copy and accumulates in fp32; out stays fp32. */
gt_status gt_layer_linear_forward(gt_layer *self, const gt_layer_ctx *ctx, float *out, const float *in, int w,
                                  const float *bias, int N, int C, int OC);
/* Accumulates din (may be NULL) += dout @ W, the gradient of W += dout^T @
 * in, and dbias (may be NULL) += column sums of dout. Under bf16 both
 * products take bf16 operands and accumulate in fp32 into fp32 gradients. */
gt_status gt_layer_linear_backward(gt_layer *self, const gt_layer_ctx *ctx, float *din, float *dbias, const float *dout,
                                   const float *in, int w, int N, int C, int OC);
/* Causal self-attention as the model is configured (gt_model_config's
 * attention): tiled, the backend's attention_tiled kernels (fp32 under
 * every precision); or full, the backend's attention_full kernels, or
 * under bf16 gt_attention_forward_bf16 and its backward (bf16 operands for
 * the four products, fp32 softmax). `saved` is what forward keeps for
 * backward, gt_layer_attention_saved_floats of it (tiled: a log-sum-exp
 * per row and head; full: the probabilities); `datt` is backward's
 * scratch, gt_layer_attention_scratch_floats of it (0 when tiled, and then
 * not read). Backward reads forward's out as well; dqkv accumulates. */
size_t gt_layer_attention_saved_floats(const gt_layer *self, int B, int T, int NH);
size_t gt_layer_attention_scratch_floats(const gt_layer *self, int B, int T, int NH);
gt_status gt_layer_attention_forward(gt_layer *self, const gt_layer_ctx *ctx, float *out, float *saved,
                                     const float *qkv, int B, int T, int C, int NH);
gt_status gt_layer_attention_backward(gt_layer *self, const gt_layer_ctx *ctx, float *dqkv, float *datt,
                                      const float *dout, const float *qkv, const float *out, const float *saved, int B,
                                      int T, int C, int NH);

/* The size of the tensor-parallel group this layer is split across (1 when
 * it is not split), and this rank's index in it. Valid from build on. */
int gt_layer_tp_size(const gt_layer *self);
int gt_layer_tp_rank(const gt_layer *self);
/* Whether this layer runs on sequence shards (split, and the model has
 * sequence parallelism on). */
bool gt_layer_seq_parallel(const gt_layer *self);
/* This layer's recomputation mode (gt_recompute), from its add on: a layer
 * type sizes its saved activations (acts_floats) by it. */
gt_recompute gt_layer_recompute(const gt_layer *self);

GT_API_END
#endif
