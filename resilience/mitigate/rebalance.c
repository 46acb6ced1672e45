/* The rebalancing decision: replica speeds from telemetry, the shares that
 * make the replicas finish together, and whether switching pays. */
#include "resilience/mitigate/rebalance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "giant/engine/grid.h"
#include "giant/engine/plan.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Rank r's rows per compute-second, the median over the steps (a noisy
 * step moves a median little); 0 when no step has work and time. */
static double rank_speed(const gt_step_telemetry *tel, int nsteps, int world, int r, double *scratch) {
  int n = 0;
  for (int s = 0; s < nsteps; s++) {
    const gt_step_telemetry *t = &tel[(size_t)s * (size_t)world + (size_t)r];
    if (t->tokens > 0 && t->seq_sq > 0 && t->compute_s > 0)
      scratch[n++] = (double)t->tokens * (double)t->tokens / t->seq_sq / t->compute_s;
  }
  if (n == 0) return 0;
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
  return n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2;
}

/* The compute time of a step: the slowest replica's rows x micro-batches
 * over its speed. */
static double predict(const int *share, const double *speed, const int *micro, int dp) {
  double worst = 0;
  for (int i = 0; i < dp; i++) worst = fmax(worst, share[i] * (double)micro[i] / speed[i]);
  return worst;
}

/* Every replica starts at one row; each further row goes where it finishes
 * first (ties to the lower index), which minimises the slowest replica's
 * time for whole rows. */
static void split(int total, int dp, int cap, const double *speed, const int *micro, int *share) {
  for (int i = 0; i < dp; i++) share[i] = 1;
  for (int given = dp; given < total; given++) {
    int pick = -1;
    double best = INFINITY;
    for (int i = 0; i < dp; i++) {
      double t = (share[i] + 1) * (double)micro[i] / speed[i];
      if (share[i] < cap && t < best) {
        best = t;
        pick = i;
      }
    }
    share[pick]++; /* some replica is under cap: the caller checked total <= dp * cap */
  }
}

static gt_status check_config(const gt_rebalance_config *cfg) {
  if (!cfg) return gt_errorf(GT_EINVAL, "rebalance: wants a config");
  if (cfg->cap < 1 || cfg->horizon < 1 || !(cfg->transition_s >= 0) || !(cfg->min_gain >= 0 && cfg->min_gain < 1))
    return gt_errorf(
        GT_EINVAL, "rebalance: cap (%d) and horizon (%d) must be >= 1, transition_s (%g) >= 0, min_gain (%g) in [0, 1)",
        cfg->cap, cfg->horizon, cfg->transition_s, cfg->min_gain);
  return GT_OK;
}

gt_status gt_rebalance_speeds(const gt_plan *plan, const gt_step_telemetry *tel, int nsteps, double *speed,
                              int *micro) {
  if (!plan || !tel || !speed || !micro || plan->world < 1 || plan->layout.dp < 1)
    return gt_errorf(GT_EINVAL, "rebalance: wants a plan, telemetry and room for the speeds");
  if (nsteps < 1) return gt_errorf(GT_EINVAL, "rebalance: wants at least one step of telemetry, got %d", nsteps);
  int dp = plan->layout.dp, world = plan->world;
  double *scratch = malloc((size_t)nsteps * sizeof *scratch);
  if (!scratch) return gt_errorf(GT_ENOMEM, "rebalance: out of memory");
  gt_status s = GT_OK;
  for (int i = 0; i < dp; i++) {
    speed[i] = INFINITY;
    micro[i] = 1;
  }
  for (int r = 0; s == GT_OK && r < world; r++) {
    gt_grid_coords c;
    s = gt_grid_coords_of(&plan->layout, r, &c);
    double v = s == GT_OK ? rank_speed(tel, nsteps, world, r, scratch) : 0;
    if (s == GT_OK && !(v > 0))
      s = gt_errorf(GT_EINVAL, "rebalance: rank %d has no step with rows and compute time in its telemetry", r);
    if (s == GT_OK && v < speed[c.dp]) {
      speed[c.dp] = v;
      int m = tel[(size_t)(nsteps - 1) * (size_t)world + (size_t)r].micro_batches;
      micro[c.dp] = m > 0 ? m : 1;
    }
  }
  free(scratch);
  return s;
}

gt_status gt_rebalance_choose(const gt_rebalance_config *cfg, int dp, const double *speed, const int *micro,
                              const int *shares, int *new_shares, gt_rebalance_decision *out) {
  GT_TRY(check_config(cfg));
  if (dp < 1 || !speed || !micro || !shares || !new_shares || !out)
    return gt_errorf(GT_EINVAL, "rebalance: wants dp >= 1 (got %d), the speeds and the current shares", dp);
  int total = 0;
  for (int i = 0; i < dp; i++) {
    if (shares[i] < 1 || shares[i] > cfg->cap)
      return gt_errorf(GT_EINVAL, "rebalance: replica %d holds %d rows, outside 1..%d", i, shares[i], cfg->cap);
    if (!(speed[i] > 0) || !isfinite(speed[i]) || micro[i] < 1)
      return gt_errorf(GT_EINVAL, "rebalance: replica %d has speed %g rows/s and %d micro-batches; both must be > 0", i,
                       speed[i], micro[i]);
    total += shares[i];
  }
  split(total, dp, cfg->cap, speed, micro, new_shares);
  double min_gain = cfg->min_gain > 0 ? cfg->min_gain : 0.05;
  gt_rebalance_decision d = {.step_now_s = predict(shares, speed, micro, dp),
                             .step_new_s = predict(new_shares, speed, micro, dp)};
  d.gain_s = (d.step_now_s - d.step_new_s) * cfg->horizon - cfg->transition_s;
  d.change = memcmp(shares, new_shares, (size_t)dp * sizeof *shares) && d.gain_s > 0 &&
             d.step_new_s <= (1 - min_gain) * d.step_now_s;
  if (!d.change) memcpy(new_shares, shares, (size_t)dp * sizeof *shares);
  *out = d;
  return GT_OK;
}

gt_status gt_rebalance_decide(const gt_rebalance_config *cfg, const gt_plan *plan, const gt_step_telemetry *tel,
                              int nsteps, const int *shares, int *new_shares, double *speed_out,
                              gt_rebalance_decision *out) {
  if (!cfg || !plan || !tel || !shares || plan->world < 1 || plan->layout.dp < 1)
    return gt_errorf(GT_EINVAL, "rebalance: wants a config, a plan, telemetry and the current shares");
  GT_TRY(check_config(cfg));
  int dp = plan->layout.dp;
  double *speed = malloc((size_t)dp * sizeof *speed);
  int *micro = malloc((size_t)dp * sizeof *micro);
  gt_status s = speed && micro ? GT_OK : gt_errorf(GT_ENOMEM, "rebalance: out of memory");
  if (s == GT_OK) s = gt_rebalance_speeds(plan, tel, nsteps, speed, micro);
  if (s == GT_OK) s = gt_rebalance_choose(cfg, dp, speed, micro, shares, new_shares, out);
  if (s == GT_OK && speed_out) memcpy(speed_out, speed, (size_t)dp * sizeof *speed);
  free(speed);
  free(micro);
  return s;
}
