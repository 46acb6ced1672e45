/* The mitigation ladder (giant/engine/ladder.h). The model is the simplest that
 * tells the rungs apart: the step is as long as its slowest part.
 *   now:      step_s, the slow rank's part taking slowdown f times its share;
 *   t = step_s / f, the step if every rank were fast;
 *   S1 (dp replicas share rows by speed): the slow replica at 1/f of a fast
 *     one's speed: t * dp / (dp - 1 + 1/f), or, when it may not drop below
 *     min_share of its rows, the fast ones' larger share;
 *   S2 (pp stages share layers by speed): the same with pp stages;
 *   S3 and S4 (without the rank, its data-parallel replica's work spread
 *     over the others): t * dp / (dp - 1) at dp > 1; with one replica the
 *     job cannot run without a stage, and neither rung is possible. */
#include "giant/engine/ladder.h"

#include <math.h>

const char *gt_ladder_rung_name(gt_ladder_rung r) {
  static const char *const names[] = {"none", "S1 rebalance", "S2 re-cut", "S3 exclude", "S4 restart"};
  return r >= 0 && r <= 4 ? names[r] : "?";
}

/* Sharing n parts by speed, one at 1/f: the step, relative to t. */
static double shared(int n, double f, double min_share) {
  double ideal = n / (n - 1 + 1 / f);        /* every part done at the same moment */
  double slow = (1.0 / (n - 1 + 1 / f)) / f; /* the slow part's fraction of the work */
  if (min_share > 0 && slow < min_share / n) {
    /* It keeps min_share of an even share: the others split the rest. */
    double fast = (1 - min_share / n) / (n - 1);
    double t_fast = fast * n, t_slow = min_share * f;
    return t_fast > t_slow ? t_fast : t_slow;
  }
  return ideal;
}

/* The cheapest rung over the horizon, of those with a step predicted. */
static void choose(const double *cost_s, int horizon, gt_ladder_decision *out) {
  double best = INFINITY;
  out->rung = GT_LADDER_NONE;
  for (int r = 0; r <= 4; r++) {
    if (!(out->step_s[r] > 0)) continue;
    out->total_s[r] = (r ? cost_s[r] : 0) + horizon * out->step_s[r];
    if (out->total_s[r] < best) {
      best = out->total_s[r];
      out->rung = (gt_ladder_rung)r;
    }
  }
}

gt_status gt_ladder_decide_link(const gt_ladder_link_input *in, gt_ladder_decision *out) {
  *out = (gt_ladder_decision){.rung = GT_LADDER_NONE};
  if (!(in->step_s > 0) || in->dp < 1 || in->replicas < 1 || in->horizon < 1 || !(in->wait_s >= 0) ||
      !(in->wait_base_s >= 0))
    return gt_errorf(GT_EINVAL,
                     "ladder: step %g s, waits %g and %g s, dp %d, %d replica(s), horizon %d: want "
                     "positive values",
                     in->step_s, in->wait_s, in->wait_base_s, in->dp, in->replicas, in->horizon);
  out->step_s[0] = in->step_s;
  if (in->replicas < in->dp) {
    double fast = fmax(in->step_s - fmax(in->wait_s - in->wait_base_s, 0), 1e-9);
    double without = fast * in->dp / (in->dp - in->replicas);
    if (in->can[3]) out->step_s[3] = without;
    if (in->can[4]) out->step_s[4] = without;
  }
  choose(in->cost_s, in->horizon, out);
  return GT_OK;
}

gt_status gt_ladder_decide(const gt_ladder_input *in, gt_ladder_decision *out) {
  *out = (gt_ladder_decision){.rung = GT_LADDER_NONE};
  if (!(in->step_s > 0) || !(in->slowdown >= 1) || in->dp < 1 || in->pp < 1 || in->horizon < 1)
    return gt_errorf(GT_EINVAL,
                     "ladder: step %g s, slowdown %g, dp %d, pp %d, horizon %d: want positive values, "
                     "slowdown >= 1",
                     in->step_s, in->slowdown, in->dp, in->pp, in->horizon);
  double f = in->slowdown, t = in->step_s / f;
  out->step_s[0] = in->step_s;
  if (in->can[1] && in->dp > 1) out->step_s[1] = t * shared(in->dp, f, in->min_share);
  if (in->can[2] && in->pp > 1) out->step_s[2] = t * shared(in->pp, f, 0);
  if (in->dp > 1) {
    double without = t * in->dp / (in->dp - 1);
    if (in->can[3]) out->step_s[3] = without;
    if (in->can[4]) out->step_s[4] = without;
  }
  choose(in->cost_s, in->horizon, out);
  return GT_OK;
}
