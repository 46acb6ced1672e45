/* The mitigation ladder in a run (ladder.c): one decision when the
 * fail-slow monitor flags a rank or a link, which the run carries out:
 *   S1 rows      --rebalance moves rows off the slow replica at once;
 *   S2 re-cut    --rebalance re-cuts the pipeline stages at once;
 *   S3 exclude   --reshape: the slow ranks leave, the others reshape;
 *   S4 restart   --ckpt-dir: a checkpoint now, then every worker exits
 *                for giantrun to restart the job from it (fresh
 *                processes; a rank slow by its node stays slow: S3).
 * docs/failslow.md, "The ladder". */
#ifndef GIANT_RUN_LADDER_H
#define GIANT_RUN_LADDER_H

#include <stdbool.h>

#include "resilience/detect/failslow.h"
#include "giant/engine/init.h"
#include "giant/engine/ladder.h"
#include "resilience/members/members.h"
#include "giant/engine/plan.h"
#include "reshape.h"

/* The steps the ladder judges over, at most, and the transition costs,
 * estimates: */
#define RUN_LADDER_HORIZON 200
#define RUN_COST_RECUT_S 0.5    /* moving layers between stages */
#define RUN_COST_EXCLUDE_S 0.5  /* a reshape: bench_reshape measures 0.2-0.4 s on 4 CPU ranks */
#define RUN_COST_RESTART_S 30.0 /* a checkpoint, a restart and a load */

/* What this job can do, and what --ladder forces. */
typedef struct run_ladder_caps {
  bool rows, recut, exclude, restart;
  gt_ladder_rung forced; /* with forced_set: the rung taken when the job can take it */
  bool forced_set;       /* --ladder none|rows|recut|exclude|restart; false: auto, the cheapest */
} run_ladder_caps;

typedef struct run_ladder_action {
  gt_ladder_rung rung;       /* GT_LADDER_NONE: nothing to do this step */
  int ranks[GT_MEMBERS_MAX]; /* S3: the ranks (of the current layout) that leave */
  int n;
} run_ladder_action;

/* After each step, with the monitor's report: the action for a rank it
 * flagged compute-slow this step, or for the ranks behind a link it
 * flagged (their node's own). The lead logs every rung's predicted step;
 * rank 0 records exclusions in the health records. */
void run_ladder_decide(run_reshape *r, gt_job *job, const gt_plan *plan, const gt_failslow_report *rep,
                       const run_ladder_caps *caps, int steps_left, bool lead, run_ladder_action *out);
/* --ladder's text into caps->forced. */
gt_status run_ladder_parse(const char *text, run_ladder_caps *caps);

#endif
