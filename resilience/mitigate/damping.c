/* Damping of layout switches, as routers damp a flapping route: a switch
 * taken soon after the one before makes the next one harder to take. */
#include <string.h>

#include "resilience/mitigate/rebalance.h"

void gt_rebalance_damping_init(gt_rebalance_damping *d, int horizon) {
  d->horizon = horizon > 0 ? horizon : 1;
  d->last_step = -1;
  d->streak = 0;
}

/* Switches in a row, each within the horizon of the one before, as of step. */
static int streak(const gt_rebalance_damping *d, int64_t step) {
  return d->last_step >= 0 && step - d->last_step < d->horizon ? d->streak : 0;
}

int gt_rebalance_damping_persist(const gt_rebalance_damping *d, int64_t step, int persist) {
  int n = streak(d, step);
  return persist << (n < GT_REBALANCE_DAMPING_MAX ? n : GT_REBALANCE_DAMPING_MAX);
}

double gt_rebalance_damping_gain(const gt_rebalance_damping *d, int64_t step, double min_gain) {
  return min_gain * (1 + streak(d, step));
}

void gt_rebalance_damping_note(gt_rebalance_damping *d, int64_t step) {
  d->streak = streak(d, step) + 1;
  d->last_step = step;
}

int gt_rebalance_agree(int *proposed, int *agreed, bool change, const int *next, int n) {
  size_t bytes = (size_t)(n > 0 ? n : 0) * sizeof *next;
  if (!change) {
    *agreed = 0;
  } else if (*agreed && !memcmp(next, proposed, bytes)) {
    ++*agreed;
  } else {
    memcpy(proposed, next, bytes);
    *agreed = 1;
  }
  return *agreed;
}
