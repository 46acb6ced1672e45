/* The validation loss (--eval-every N with --eval-data FILE or
 * --eval-split F): forward only over a fixed set of rows, the sum of the
 * token losses over the tokens, all data-parallel replicas together, so
 * that every layout and a resumed run compute it over the same rows. */
#ifndef GIANT_RUN_EVAL_H
#define GIANT_RUN_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/data.h"
#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "giant/model.h"
#include "giant/run.h"

typedef struct run_eval {
  int every; /* --eval-every: 0 no evaluation */
  int T;     /* --seq: a row's tokens, and one more for its last target */
  int rows;  /* the fixed set: rows 0 .. rows-1 of the evaluation tokens */
  void *map; /* the token file they are in, mapped */
  size_t map_len;
  const char *path;
  uint32_t width, vocab;
  uint64_t first, count; /* the evaluation tokens: [first, first + count) of the file's */
  /* --eval-split: training reads only the tokens before `first`, through
   * this source (the loader's rows of a file, as a file gives them). */
  gt_loader_source train;
} run_eval;

/* From the options (which gt_run_parse checked agree): maps the file and,
 * for --eval-split, makes *train the source of the training rows (else
 * leaves it). Nothing without --eval-every. */
gt_status run_eval_open(run_eval *e, const gt_run_options *o, const gt_loader_source **train);
void run_eval_close(run_eval *e);
/* Whether to evaluate after step (0-based). */
bool run_eval_due(const run_eval *e, int step, int steps);
/* The loss over the fixed rows, on every rank of the layout alike:
 * collective over the data-parallel group (dist NULL: one process). cap:
 * the most rows the model's activations take. */
gt_status run_eval_loss(run_eval *e, gt_model *m, gt_dist *dist, const gt_plan *plan, int cap, float *loss);

#endif
