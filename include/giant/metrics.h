/* Per-step training metrics: printed as a line and appended as one JSON
 * object per line to a metrics file, for plots and for the iteration-time
 * predictor. */
#ifndef GIANT_METRICS_H
#define GIANT_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "giant/status.h"

GT_API_BEGIN

/* What one rank did in a step and how long it took, for the iteration-time
 * predictor and fail-slow detection (giant/engine/predictor.h). Fixed size, so that
 * ranks can exchange it as it is. Times are this rank's own. */
typedef struct gt_step_telemetry {
  int rank;              /* the trainer's: the rank as launched (GT_RANK), which a reshape does not renumber;
                        gt_failslow_step's gather: the rank in the world it gathers over */
  int layers;            /* layers this rank holds (its pipeline stages') */
  int micro_batches;     /* micro-batches this rank ran */
  int64_t tokens;        /* this rank's B*T summed over its micro-batches */
  double seq_sq;         /* attention work: B*T*T summed over micro-batches (padded rows cost T too) */
  double compute_s;      /* forward and backward less the waits below (tensor-parallel ones are in it) */
  double data_s;         /* waiting for the loader */
  double dp_wait_s;      /* blocked in data-parallel reductions: token counts, and gradients after backward */
  double pp_wait_s;      /* blocked on pipeline sends and receives */
  double pp_wait_prev_s; /* ... of which receiving from the previous pipeline rank (activations) */
  double pp_wait_next_s; /* ... and from the next pipeline rank (gradients) */
  double tp_wait_s;      /* in tensor-parallel collectives, wall time (on the CPU backend their blocking is not
                        in compute_s, its copying is) */
  double step_s;         /* the whole step's wall time (gt_step_stats.seconds) */
} gt_step_telemetry;

typedef struct gt_step_stats {
  int step;   /* 0-based */
  float loss; /* mean over the step's micro-batches */
  float lr;
  double grad_norm; /* before clipping */
  double seconds;   /* wall time of the step */
  int64_t tokens;   /* tokens processed (B*T summed over micro-batches) */
  double tokens_per_s;
  double flops; /* model FLOPs of the step (3x forward) */
  double mfu;   /* flops / seconds / measured peak; 0 if no peak */
  int micro_batches;
  int seq_len; /* T of the last micro-batch */
  /* The samples the step trained, all replicas together: global sample
   * indices [first_row, first_row + rows) of the data stream (0, 0 when
   * the step had no loader). A resumed or reshaped job's steps go on
   * where the stream stopped, so the kept steps tile it exactly. */
  uint64_t first_row, rows;
  /* The step's loss or gradient stayed non-finite when run again on the
   * same samples; they were skipped and nothing changed
   * (gt_trainer_config.skip_nonfinite). No metrics line is written. */
  bool skipped;
  /* The most device memory the model's arena has held, in bytes: the
   * memory ledger's peak (giant/engine/model.h), since the model was built
   * or its peak was last reset. */
  size_t mem_peak;
  /* Progress, filled by the run (giant/run.h) from --steps: the fraction
   * of training done after this step, and the seconds left at the
   * measured step time (0 when unknown or done). */
  double done, eta_s;
  /* The validation loss after this step, where the run evaluated
   * (--eval-every): the sum of the token losses over the tokens of a fixed
   * set of rows, all replicas together. */
  bool has_eval;
  float eval_loss;
  gt_step_telemetry telemetry;
} gt_step_stats;

typedef struct gt_metrics gt_metrics;

/* path NULL: no file. The file is appended to (a resumed run continues it). */
gt_status gt_metrics_open(const char *path, gt_metrics **out);
void gt_metrics_close(gt_metrics *m);
gt_status gt_metrics_write(gt_metrics *m, const gt_step_stats *s);
/* "step 12 | loss 3.2101 | lr 3.00e-04 | ..." to f, ending "| eval 3.3012"
 * when s->has_eval and "| 40.0% | ETA 1m05s" when s->done is set. */
void gt_metrics_print(FILE *f, const gt_step_stats *s);

GT_API_END
#endif
