/* The layout planner and its cost model.
 *
 * Given what each layer costs (FLOPs, parameter and activation bytes), what
 * each rank can do (relative speed, memory budget) and what the network
 * costs, the planner cuts the layers into pipeline stages, splits a batch
 * over data-parallel replicas, predicts a layout's step time and memory,
 * and chooses the fastest layout (dp x tp x pp) that fits. It is pure
 * arithmetic: no processes, no communication.
 *
 * The cost model, per micro-batch of a virtual stage on pipeline rank s:
 *   forward  = FLOPs / (speed_s * peak_flops * tp) + tensor-parallel all-reduces
 *   backward = 2 * forward compute + the same all-reduces
 *   ring all-reduce of n bytes over k ranks = 2(k-1)/k * n / bw + 2(k-1) * latency
 *   crossing a stage boundary = p2p_latency + (largest boundary output) / p2p_bw
 * The pipeline makespan comes from gt_pp_simulate on the chosen schedule.
 * The data-parallel all-reduce of the gradients (fp32, the size of the
 * parameters) overlaps backward by the fraction dp_overlap; the rest adds
 * to the step. Memory per rank is the model's expected peak
 * (gt_model_device_estimate_ex) by the same categories: parameters,
 * gradients and the optimizer's states (/ dp with ZeRO-1) of the rank's
 * parameter bytes / tp, each in the arena's size class, the bf16 copy under
 * bf16, the peak bytes of activations in flight under the schedule / tp
 * (their attention part apart), and what the model adds beside its layers
 * (gt_planner_model_extras): the gradient buffers between layers and the
 * batch per micro-batch in flight, scratch, the trainer's buffers.
 */
#ifndef GIANT_PLANNER_H
#define GIANT_PLANNER_H

#include <stdbool.h>
#include <stdio.h>

#include "giant/engine/grid.h"
#include "giant/model.h"
#include "giant/engine/pipeline.h"
#include "giant/group.h"

#define GT_PLANNER_MAX_STAGES 256 /* pipeline ranks x chunks */

typedef struct gt_planner_layer {
  double flops;       /* forward FLOPs of one micro-batch (backward costs twice this) */
  double param_bytes; /* the whole layer's parameters (not split) */
  /* Offloaded, what the layer's weight slot holds and a fetch moves: its
   * parameters with the tied ones it reads (0: param_bytes), and of those
   * the ones read only by matrix products (gt_param_spec.matmul_only),
   * which a window holds in bf16 alone under bf16. fp32 bytes. */
  double window_bytes, matmul_bytes;
  double act_bytes;          /* activations saved for backward, one micro-batch (as the arena sets them aside) */
  double attn_bytes;         /* of act_bytes, the saved attention tensors (gt_layer_type.attn_floats) */
  double out_bytes;          /* output handed to the next layer, one micro-batch */
  int tp_allreduces;         /* all-reduces over the tensor-parallel group per forward (as many in backward) */
  double tp_allreduce_bytes; /* bytes of each */
} gt_planner_layer;

/* Fills one entry per layer of a built model for micro-batches of (B, T):
 * FLOPs and activations from the layer types, parameters from
 * gt_layer_param_info (tied parameters counted once; in window_bytes with
 * each layer that reads them), 2 all-reduces of
 * B*T*C floats per transformer block. Build the model without tensor
 * parallelism: split parameters count only this rank's part. Free *out. */
gt_status gt_planner_layers_from_model(const gt_model *m, int B, int T, gt_planner_layer **out, int *n);

/* What a rank holds beside its layers' parameters and saved tensors, as the
 * model's estimate counts it, read from a model whose layers are added
 * (built or not) for micro-batches of (B, T): per micro-batch in flight,
 * the two gradient buffers between layers and the batch's tokens and
 * targets; once, the layers' largest scratch and the gradient norm's sums
 * (host memory when offloaded); and, with more than one rank, the
 * trainer's buffer for its reductions. Each in the arena's size class. */
typedef struct gt_planner_extras {
  double act_bytes, scratch_bytes, norm_bytes, comm_bytes;
} gt_planner_extras;
gt_status gt_planner_model_extras(const gt_model *m, int B, int T, gt_planner_extras *out);

typedef struct gt_planner_stages {
  int n;                   /* stages */
  const double *speed;     /* relative FLOP/s per stage; NULL: all 1 */
  const double *mem_bytes; /* budget per stage; NULL: unlimited */
  const double *in_flight; /* micro-batches of activations each stage holds; NULL: 1 */
  double state_factor;     /* bytes held per parameter byte; 0: 4 */
  /* Offloaded: parameters and their state live in host memory, so a stage
   * holds only activations (the window's slots, the same for every cut,
   * are left out of mem_bytes by the caller). */
  bool offloaded;
} gt_planner_stages;

/* Cuts layers [0, L) into st->n contiguous non-empty stages, stage s
 * holding layers [first[s], first[s+1]) (first has n+1 entries), minimising
 * the largest stage time (FLOPs / speed) with every stage's memory
 * (state_factor * params + in_flight * activations) within its budget.
 * Exact dynamic programme over the cut points, O(n L^2). Among equally fast
 * cuts the earliest wins (fewer layers on earlier stages, which hold more
 * micro-batches under 1F1B). GT_ENOMEM when nothing fits; first[] then
 * holds the cut with the smallest largest overflow, which the message
 * names. */
gt_status gt_planner_partition(const gt_planner_layer *layers, int L, const gt_planner_stages *st, int *first);

/* Splits `rows` over n replicas in proportion to speed (NULL: equal),
 * largest remainder first (ties to the lower index), every share >= 1. */
gt_status gt_planner_batch_split(int rows, int n, const double *speed, int *share);

typedef struct gt_planner_hw {
  int world;
  const double *speed;               /* per world rank, relative FLOP/s; NULL: all 1 */
  const double *mem_bytes;           /* per world rank budget; NULL: unlimited */
  double peak_flops;                 /* FLOP/s of a rank of speed 1 */
  double p2p_bandwidth, p2p_latency; /* bytes/s, seconds: between pipeline stages */
  double ar_bandwidth, ar_latency;   /* bytes/s per link, seconds per hop: all-reduces */
  double dp_overlap;                 /* share of the gradient all-reduce hidden behind backward, 0..1 */
  double copy_bandwidth;             /* bytes/s between host and device memory; needed when offloading */
} gt_planner_hw;

typedef struct gt_planner_job {
  const gt_planner_layer *layers;
  int nlayers;
  int micro_batches; /* the global batch, in micro-batches; each replica runs ceil(this / dp) */
  gt_pp_kind schedule;
  int chunks;            /* virtual stages per rank (interleaved), else 1 */
  bool zero1;            /* optimizer state sharded over data parallelism */
  int zero;              /* the ZeRO stage, when more than zero1 says (2: gradients sharded too); 0: zero1's */
  const int *tp_allowed; /* tensor-parallel sizes the model takes (heads, hidden, vocabulary); */
  int ntp_allowed;       /* NULL / 0: only 1 */
  /* Offloading (docs/offload.md) with a window of this many layers, 0:
   * none. A rank then holds window + 2 slots of its widest layer and the
   * activations; its transfers overlap compute, and a stage takes as long
   * as the longer of the two. */
  int offload_window;
  /* The compute precision: under bf16 an offloaded window holds the
   * matmul-only weights in bf16 (and the others in fp32 with a bf16 copy). */
  gt_precision precision;
  /* Factors already decided (by flags or annotations, gt_plan_preview):
   * the planner chooses only among layouts that keep them; 0: free. */
  gt_grid_layout fixed;
  int optim_states;         /* floats of optimizer state per parameter; 0: AdamW's 2 */
  gt_planner_extras extras; /* 0: none counted */
} gt_planner_job;

typedef struct gt_planner_result {
  gt_grid_layout layout;
  gt_pp_kind schedule;
  int chunks;
  int micro_batches;                           /* per replica */
  int nstages;                                 /* pp * chunks */
  int first[GT_PLANNER_MAX_STAGES + 1];        /* virtual stage j: layers [first[j], first[j+1]), on rank j % pp */
  double stage_seconds[GT_PLANNER_MAX_STAGES]; /* forward + backward of one micro-batch */
  double step_seconds;                         /* pipeline + exposed data-parallel all-reduce */
  double pipeline_seconds;                     /* simulated makespan */
  double dp_seconds;                           /* the slowest stage's gradient all-reduce */
  double bubble;                               /* simulated idle share of the pipeline */
  double mem_bytes[GT_PLANNER_MAX_STAGES];     /* per pipeline rank: the expected peak */
  /* Of it, by category (gt_mem_kind), as the memory ledger will count it. */
  double mem_kinds[GT_PLANNER_MAX_STAGES][GT_MEM_KINDS];
  double mem_shortfall; /* largest need - budget over world ranks; <= 0: fits */
  /* Offloaded: bytes a step moves between host and device on the busiest
   * pipeline rank, and the time they take at copy_bandwidth (overlapped
   * with compute; a stage's time is the longer of the two). */
  double offload_bytes, offload_seconds;
  int short_rank; /* the world rank of that shortfall */
} gt_planner_result;

/* Predicts one layout. first: the cut into pp * chunks virtual stages, or
 * NULL to take gt_planner_partition's. An estimate that does not fit in
 * memory still succeeds; its mem_shortfall is positive. */
gt_status gt_planner_estimate(const gt_planner_hw *hw, const gt_planner_job *job, gt_grid_layout layout,
                              const int *first, gt_planner_result *out);
/* Every (dp, tp, pp) with dp*tp*pp == world, tp allowed, pp*chunks <= layers,
 * dp <= micro-batches (and, interleaved, the per-replica micro-batches a
 * multiple of pp): the fastest whose expected peak fits every rank's
 * budget. GT_ENOMEM naming the layout that comes closest, its expected
 * peak, what that is made of and its shortfall when none fits (*out is
 * that layout's estimate); GT_EINVAL when no layout is possible at all. Ties go to the smaller pp, then the smaller tp. */
gt_status gt_planner_choose(const gt_planner_hw *hw, const gt_planner_job *job, gt_planner_result *out);
void gt_planner_print(const gt_planner_result *e, const gt_planner_job *job, FILE *f);
/* "parameters 2.0 MiB, gradients 2.0 MiB, ..." of a rank's mem_kinds,
 * over the categories that hold anything. */
void gt_planner_mem_text(const double *kinds, char *buf, size_t n);

#endif
