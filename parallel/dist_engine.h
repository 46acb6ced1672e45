/* A job's parallel state as the library's own trainer sees it: the groups
 * of each axis, the generation and instance names. Internal to libgiant
 * (shared with the layers above, SHARES in CMakeLists.txt). */
#ifndef GIANT_PARALLEL_DIST_ENGINE_H
#define GIANT_PARALLEL_DIST_ENGINE_H

#include "giant/engine/dist.h"
#include "giant/group.h"

/* The key namespace this state was built under. */
const char *gt_dist_generation(const gt_dist *d);

/* 0, 1, 2, ... in the order of the calls: what keeps the store keys of a
 * second executor on the same dist (a trainer rebuilt for a new pipeline
 * cut) apart from the first's. Every rank must call it alike. */
int gt_dist_next_instance(gt_dist *d);

/* The data-parallel group as a gt_group, for reducing metrics. */
gt_group *gt_dist_dp_group(gt_dist *d);

gt_group *gt_dist_tp_group(gt_dist *d);

/* NULL without pipeline parallelism. */
gt_group *gt_dist_pp_group(gt_dist *d);

#endif
