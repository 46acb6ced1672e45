/* The model's private state, shared by model.c, params.c and acts.c. */
#ifndef GIANT_MODEL_INTERNAL_H
#define GIANT_MODEL_INTERNAL_H

#include "giant/model.h"
#include "core/arena.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

typedef struct gt_offload gt_offload;
typedef struct gt_zero gt_zero;
typedef struct gt_zero3 gt_zero3;

#define GT_MODEL_MAX_SCOPE_DEPTH 16

/* One annotation scope: its kind, its count (replicate n, split k, stage
 * i, pipeline m, offload w) and the layers it holds. */
typedef struct gt_scope_rec {
  gt_scope_kind kind;
  int arg;
  int first, last; /* layers [first, last]; first > last: none (yet) */
  int depth;       /* scopes around it when it opened */
} gt_scope_rec;

struct gt_model {
  gt_backend *be;
  gt_model_config cfg;
  gt_arena *arena;
  gt_layer **layers;
  int nlayers, cap_layers;
  gt_param *params;
  int nparams, cap_params;
  bool built;
  size_t nfloats;    /* floats in the parameter buffer (tied params once) */
  size_t ntrainable; /* sum of untied parameters' sizes */
  float *param_buf;  /* device */
  float *grad_buf;   /* device */
  float *scratch;    /* device, shared by layers one at a time */
  size_t scratch_floats;
  int max_dim;        /* widest per-token activation between layers */
  int vocab_in;       /* token ids the first layer accepts */
  int vocab_out;      /* targets the loss layer accepts */
  float *host_losses; /* B_max*T_max, to reduce the per-token losses */
  gt_model_parallel par;
  /* annotation scopes (annotate.c), in the order they were opened */
  gt_scope_rec *recs;
  int nrecs, cap_recs;
  int open[GT_MODEL_MAX_SCOPE_DEPTH]; /* the scopes open now, outermost first */
  int nopen;
  int stages;       /* stage scopes opened so far */
  bool stages_used; /* build cut the stages where the stage scopes say */
  /* replicated regions of a split layout (annotate.c): layers [lo, hi]
   * each rank of the tensor-parallel group runs on its share of the rows */
  struct gt_region {
    int lo, hi;
  } * regions;
  int nregions;
  int pp_stages; /* stages the pipeline cuts the model into (1: none) */
  int *cut;      /* from gt_model_set_stage_cut: ncut + 1 entries, or NULL */
  int ncut;
  /* called after each layer's backward (data-parallel gradient sync) */
  gt_status (*grad_hook)(void *ctx, int layer);
  void *grad_hook_ctx;
  /* mixed precision (precision.c) */
  gt_precision precision;
  uint16_t *param_bf16; /* device, nfloats: the bf16 twin of param_buf, or NULL */
  bool bf16_stale;      /* param_buf changed since param_bf16 was made */
  uint16_t *mp_scratch; /* device: operands rounded to bf16 */
  size_t mp_scratch_bytes;
  /* readers of the buffers outside the training thread (readers.c) */
  struct {
    void (*wait)(void *ctx);
    void *ctx;
  } readers[GT_MODEL_MAX_READERS];
  int nreaders;
  /* offloading (offload.c): NULL unless cfg.offload_window > 0 */
  gt_offload *off;
  gt_backend *host_be; /* offloaded from a device that is not the CPU: the state's backend */
  /* activation recomputation (recompute.c): the saved activations and the
   * output of the layer whose forward runs again, one area for every layer
   * that recomputes whole; NULL when none does */
  float *rc_saved, *rc_out;
  size_t rc_saved_floats, rc_out_floats;
  /* ZeRO-2 (zero.c): NULL unless the gradients are sharded */
  gt_zero *zero;
  /* ZeRO-3 (zero3.c): NULL unless the parameters are sharded; param_buf
   * then holds this rank's shard only */
  gt_zero3 *zero3;
};

struct gt_acts {
  gt_model *m;
  float **out;               /* per local layer: (B_max,T_max,out_dim) */
  float **saved;             /* per layer: its saved activations */
  float *dbuf[2];            /* ping-pong gradient buffers between layers */
  float *rbuf;               /* replicated regions: a rank's rows at a region's edge, before the gather */
  int32_t *tokens, *targets; /* device copies of the batch */
  int B, T;
  int64_t ntargets;
  bool forward_done;
  const float *stage_in; /* the input the last forward_stage was given */
};

/* annotate.c: checks the scopes and finds the replicated regions (at
 * build); frees the records. The region layer i belongs to, or NULL; and,
 * for a layer in one, the ranks that share its rows (1 when the layout
 * has no tensor parallelism). */
void gt_model_annotate_layer(gt_model *m, gt_layer *l);
gt_status gt_model_finish_annotations(gt_model *m);
gt_status gt_model_check_regions(const gt_model *m);
void gt_model_annotations_destroy(gt_model *m);
const struct gt_region *gt_model_region_of(const gt_model *m, int layer);
int gt_model_region_ways(const gt_model *m);

/* acts.c: the device bytes one gt_acts takes, as the arena sets them
 * aside: the saved attention tensors and the rest. */
void gt_acts_device_bytes(const gt_model *m, size_t *acts, size_t *attn);

/* recompute.c: whether layer i recomputes whole (GT_RECOMPUTE_BLOCK, not
 * the loss layer, with something to save), so that a micro-batch keeps
 * none of its saved activations; the shared area, made at build, and its
 * bytes; where layer i's saved activations go for micro-batch a; and the
 * forward that makes them again before layer i's backward, on the same
 * input and context (a replicated region's rows). */
bool gt_model_recomputes(const gt_model *m, int i);
gt_status gt_model_recompute_alloc(gt_model *m);
void gt_model_recompute_free(gt_model *m);
size_t gt_model_recompute_bytes(const gt_model *m);
float *gt_model_saved(const gt_model *m, const gt_acts *a, int i);
gt_status gt_model_recompute(gt_model *m, int i, const gt_layer_ctx *ctx, const float *in);

/* precision.c: frees the bf16 buffers; converts the parameters to bf16
 * when they changed (before a forward). */
void gt_model_precision_destroy(gt_model *m);
gt_status gt_model_refresh_bf16(gt_model *m);

/* offload.c: the window of layers' weights on the device, and the
 * gradients' way back to the host. Forward and backward call
 * layer_ready before a layer runs (dir: +1 forward, -1 backward; [lo, hi]
 * bounds the prefetch) and layer_done after; backward brackets each layer
 * with grads_begin / grads_end, and grads_wait(i) returns once layer i's
 * gradients are on the host. */
gt_status gt_offload_create(gt_model *m);
void gt_offload_destroy(gt_model *m);
/* Lays the weight slots out again for the model's (new) precision. */
gt_status gt_offload_set_precision(gt_model *m);
size_t gt_offload_device_bytes(const gt_model *m);
/* bf16: the host's bf16 twin of the parameter buffer (NULL when no
 * parameter goes to the device in bf16 alone), and the marks that an
 * update wrote it with the parameters, all or one layer's. */
uint16_t *gt_offload_host_bf16(gt_model *m);
/* The squares of the gradients backward was asked to sum
 * (gt_model_sum_grad_squares_next), for the parameters whose users are at
 * layer `bound` or above; _end forgets the request. */
gt_status gt_offload_sum_squares(gt_model *m, int bound);
void gt_offload_sum_squares_end(gt_model *m);
void gt_offload_bf16_written(gt_model *m);
void gt_offload_layer_bf16_written(gt_model *m, int layer);
void gt_offload_params_changed(gt_model *m);
void gt_offload_layer_params_changed(gt_model *m, int layer);
gt_status gt_offload_layer_ready(gt_model *m, int i, int lo, int hi, int dir);
gt_status gt_offload_layer_done(gt_model *m, int i);
gt_status gt_offload_grads_begin(gt_model *m, int i);
gt_status gt_offload_grads_end(gt_model *m, int i);
gt_status gt_offload_grads_final(gt_model *m, int i, int first, int n);
gt_status gt_offload_grads_wait(gt_model *m, int i);
void gt_offload_grads_zeroed(gt_model *m);
float *gt_offload_param(const gt_layer *self, int i);
const uint16_t *gt_offload_param_bf16(const gt_layer *self, int i);
float *gt_offload_grad(const gt_layer *self, int i);

/* zero.c: the sharded gradients (ZeRO-2). create does nothing unless
 * par.zero >= 2 over more than one rank; it allocates the shard as
 * grad_buf. Backward brackets each layer with grads_begin / grads_end;
 * layers read their gradients through gt_zero_grad. */
gt_status gt_zero_create(gt_model *m);
void gt_zero_destroy(gt_model *m);
/* What gt_zero_create holds on the device: the shard, the staging slots
 * and the held gradients (0 without ZeRO-2). */
size_t gt_zero_device_bytes(const gt_model *m);
gt_status gt_zero_grads_begin(gt_model *m, int i);
gt_status gt_zero_grads_end(gt_model *m, int i);
gt_status gt_zero_zero_grads(gt_model *m);
float *gt_zero_grad(const gt_layer *self, int i);

/* zero3.c: the sharded parameters (ZeRO-3). create does nothing unless
 * par.zero >= 3 over more than one rank; *shard_floats gets what the
 * parameter buffer must hold (the shard, or every float). Forward and
 * backward call layer_ready before a layer runs (dir: +1 forward, -1
 * backward; [lo, hi] bounds the prefetch); layers read their parameters
 * through gt_zero3_param and gt_zero3_param_bf16. */
gt_status gt_zero3_create(gt_model *m, size_t *shard_floats);
void gt_zero3_destroy(gt_model *m);
/* What ZeRO-3 holds on the device: the shard and the slots, and in *bf16
 * (when not NULL) the slots' bf16 twins as bf16 precision allocates them. */
size_t gt_zero3_device_bytes(const gt_model *m, size_t *bf16);
/* The slots' bf16 twins made or freed for the model's (new) precision. */
gt_status gt_zero3_set_precision(gt_model *m);
void gt_zero3_params_changed(gt_model *m);
gt_status gt_zero3_layer_ready(gt_model *m, int i, int lo, int hi, int dir);
float *gt_zero3_param(const gt_layer *self, int i);
const uint16_t *gt_zero3_param_bf16(const gt_layer *self, int i);
/* Every float of the parameters, gathered over the data-parallel group
 * (every rank of it calls this). */
gt_status gt_zero3_get_params(gt_model *m, float *host);

#endif
