/* The model as an engine sees it: its flat parameter and gradient buffers,
 * the backend it lives on, its parallel layout and annotations, and what
 * offloading moved. A model is built with the user's API (giant/model.h). */
#ifndef GIANT_ENGINE_MODEL_H
#define GIANT_ENGINE_MODEL_H

#include "giant/model.h"

GT_API_BEGIN

/* Parallel context, set before layers are added (by the plan; see
 * giant/engine/plan.h). tp: the group tensor-parallel layers are split across;
 * NULL or size 1 = no tensor parallelism. */
typedef struct gt_model_parallel {
  gt_group *tp;
  bool seq_parallel;      /* sequence parallelism in split layers (needs tp > 1) */
  size_t buffer_multiple; /* pad the flat buffers to a multiple of this many
                             floats (so data-parallel shards are equal); 0 = none */
  /* Pipeline parallelism: the model is cut into pp_size * pp_chunks stages
   * (from the stage annotations when there are exactly that many, else
   * evenly by layer count); this rank holds stages s with s % pp_size ==
   * pp_rank, and only their layers get memory. 0 means 1. */
  int pp_rank, pp_size, pp_chunks;
  /* ZeRO stage (0..3) over a data-parallel group of dp_size ranks, this
   * one dp_rank: from 2 on, the gradient buffer holds only this rank's
   * shard of the flat buffer (core/model/zero.c). 0 or dp_size < 2: whole. */
  int zero, dp_rank, dp_size;
} gt_model_parallel;

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
  int zero;           /* zero(stage) around the whole model: the ZeRO stage (0: none) */
  int regions;        /* replicate scopes around part of the model */
  int region_ways;    /* their count (0: none given) */
  char dp_at[64], tp_at[64], stage_at[64], pipeline_at[64], offload_at[64], region_at[64], region_end[64], zero_at[64];
} gt_annotations;

typedef struct gt_offload_stats {
  int window, prefetch;         /* as run: clipped to the layers this rank holds */
  size_t slot_bytes;            /* one weight slot, in the compute precision */
  size_t weight_bytes;          /* every local layer's weights once, as fetched */
  uint64_t fetches;             /* layers' weights copied to the device */
  uint64_t bytes_in, bytes_out; /* host to device, device to host */
  /* Seconds the host waited for transfers (weights not yet fetched,
   * gradients not yet back): the copy time compute did not hide. */
  double wait_seconds;
  double wait_grad_seconds; /* the part of it that waited for gradients going back */
} gt_offload_stats;

gt_status gt_model_set_parallel(gt_model *m, const gt_model_parallel *p);

const gt_model_parallel *gt_model_get_parallel(const gt_model *m);

/* Fails, naming the layer, on annotations that contradict each other: the
 * conflicts docs/annotations.md lists. */
gt_status gt_model_annotations(const gt_model *m, gt_annotations *out);

/* Floats in the flat parameter buffer: every parameter starts on a 64-byte
 * boundary, so this is a little more than gt_model_param_count. */
size_t gt_model_buffer_floats(const gt_model *m);

/* The flat parameter and gradient buffers (device memory). Whoever writes
 * the parameters through this pointer calls gt_model_params_changed. NULL
 * when the parameters are sharded (ZeRO-3): gt_model_param_at. */
float *gt_model_params(const gt_model *m);

/* NULL when the gradients are sharded (ZeRO-2): gt_model_grad_at. */
float *gt_model_grads(const gt_model *m);

gt_backend *gt_model_backend(const gt_model *m);

/* Whether the model's master state lives in host memory (offload_window > 0). */
bool gt_model_offloaded(const gt_model *m);

/* Zero when not offloaded. */
gt_offload_stats gt_model_offload_stats(const gt_model *m);

/* The memory ledger: where a rank's device memory goes. Every block the
 * model's arena hands out (the model's buffers, its activations, the
 * optimizer's state, the trainer's buffers) carries a category
 * (gt_mem_kind); the ledger counts each category's bytes now and, at the
 * moment the total was highest, the breakdown of that peak. Bytes are the
 * arena's size classes, as gt_model_device_estimate counts them. */
typedef struct gt_memory_ledger {
  size_t current[GT_MEM_KINDS]; /* held now, by category */
  size_t peak[GT_MEM_KINDS];    /* held at the peak, by category */
  size_t current_total, peak_total;
  size_t cached; /* freed blocks the arena keeps for reuse */
  /* The backend's count of all its device memory (cached blocks and
   * memory outside the arena too) and its budget (0: none). */
  size_t device_in_use, device_peak, device_limit;
} gt_memory_ledger;
gt_status gt_model_memory_ledger(const gt_model *m, gt_memory_ledger *out);
/* Starts a new peak from what is held now (the backend's peak too). */
void gt_model_memory_reset_peak(gt_model *m);
/* One line: "peak 12.5 MiB: parameters 1.0 MiB, gradients ..." over the
 * categories that hold anything (of the peak, or with now, of current). */
void gt_memory_ledger_format(const gt_memory_ledger *l, bool now, char *buf, size_t n);

GT_API_END
#endif
