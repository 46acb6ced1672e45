/* Pipeline schedules as data, and a timeline simulator for them.
 *
 * A schedule is, for each pipeline rank, the ordered list of steps it runs:
 * forward or backward of one micro-batch through one of its chunks. An
 * executor walks steps[rank][0 .. nsteps[rank]-1] in order; before a forward
 * of virtual stage vs > 0 it receives the activation from the rank running
 * vs-1, before a backward of vs < V-1 it receives the gradient from the rank
 * running vs+1 (V = stages * chunks model stages in all). Model stage vs
 * lives on rank vs % stages.
 *
 * The lists are deadlock-free when a rank's sends do not wait for the
 * receiver (buffered or non-blocking sends; gt_pp_schedule_check proves
 * this by running them). An executor with rendezvous sends must pair each
 * send with the receive its rank posts next, as Megatron-LM's
 * send_forward_recv_backward does.
 *
 *   GPipe        every forward, then every backward, both in micro-batch
 *                order (0, 1, ...): in-order backwards free activations in
 *                the order they were made and give the same makespan.
 *   1F1B         PipeDream-Flush / DAPPLE: rank r runs min(p-r-1, m)
 *                warm-up forwards, then alternates one forward and one
 *                backward, then drains the remaining backwards. At most
 *                min(p-r, m) micro-batches are in flight on rank r.
 *   interleaved  Megatron-LM's interleaved 1F1B: rank r holds v chunks,
 *                model stages r, r+p, r+2p, ...; micro-batches go through
 *                in groups of p. Rank r runs min(2(p-r-1) + (v-1)p, m v)
 *                warm-up forwards (all m v when m == p, as Megatron does).
 *                Needs m % p == 0. With v == 1 it is 1F1B.
 */
#ifndef GIANT_PIPELINE_H
#define GIANT_PIPELINE_H

#include <stdbool.h>

#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_pp_kind { GT_PP_GPIPE = 0, GT_PP_1F1B = 1, GT_PP_INTERLEAVED = 2 } gt_pp_kind;
typedef enum gt_pp_op { GT_PP_FORWARD = 0, GT_PP_BACKWARD = 1 } gt_pp_op;

typedef struct gt_pp_step {
  gt_pp_op op;
  int micro_batch; /* 0 .. micro_batches-1 */
  int chunk;       /* which of this rank's virtual stages (0 unless interleaved) */
} gt_pp_step;

typedef struct gt_pp_schedule {
  gt_pp_kind kind;
  int stages;         /* p: pipeline ranks */
  int micro_batches;  /* m */
  int chunks;         /* v: virtual stages per rank */
  int *nsteps;        /* per rank: 2 * m * v */
  gt_pp_step **steps; /* per rank, in execution order */
} gt_pp_schedule;

gt_status gt_pp_schedule_build(gt_pp_kind kind, int stages, int micro_batches, int chunks, gt_pp_schedule **out);
void gt_pp_schedule_free(gt_pp_schedule *s);
/* "gpipe", "1f1b", "interleaved". */
gt_status gt_pp_parse(const char *name, gt_pp_kind *kind);
const char *gt_pp_name(gt_pp_kind kind);
/* The model stage (0 .. stages*chunks-1) that chunk c of rank r runs:
 * r + c*stages (interleaved assigns rank r stages r, r+p, r+2p, ...). */
int gt_pp_virtual_stage(const gt_pp_schedule *s, int rank, int chunk);

/* Checks that every forward and backward of every (micro-batch, model
 * stage) appears exactly once, on the rank that holds the stage; that each
 * backward comes after its forward on its rank; and that the ranks, each
 * running its list in order and each step waiting for the step it receives
 * from, all finish (no deadlock). The message names the first violation. */
gt_status gt_pp_schedule_check(const gt_pp_schedule *s);

/* ---- simulation ---- */

typedef struct gt_pp_sim_result {
  int stages;
  double makespan;        /* from the first step's start to the last step's end */
  double bubble;          /* 1 - sum(busy) / (stages * makespan): idle share */
  double *busy;           /* per rank: seconds spent in steps */
  int *peak_in_flight;    /* per rank: most forwards (micro-batch, chunk) whose
                          backward has not run yet, the activation driver */
  double *peak_act_bytes; /* per rank, when act_bytes was given, else 0 */
} gt_pp_sim_result;

typedef struct gt_pp_costs {
  const double *fwd, *bwd; /* seconds per virtual stage (stages*chunks entries) */
  double p2p_seconds;      /* added when a step waits for another rank's output */
  const double *act_bytes; /* optional: activations one micro-batch keeps per virtual stage */
} gt_pp_costs;

/* Runs the schedule on a clock: each rank executes its steps in order, a
 * step starting when the rank is free and its input is there. Fails with
 * GT_ESTATE naming the stuck ranks if the schedule deadlocks, GT_EINVAL on
 * negative or non-finite times. Free the result with gt_pp_sim_free. */
gt_status gt_pp_simulate(const gt_pp_schedule *s, const gt_pp_costs *c, gt_pp_sim_result *out);
void gt_pp_sim_free(gt_pp_sim_result *r);

GT_API_END
#endif
