/* The example's fail-slow detection (giant/failslow.h): --failslow turns
 * it on, --failslow-theta, -k, -warmup, -window, -every, -probe-rounds and
 * -probe-bytes tune it (defaults in docs/failslow.md). */
#ifndef GIANT_EXAMPLE_GPT_FAILSLOW_H
#define GIANT_EXAMPLE_GPT_FAILSLOW_H

#include "giant/failslow.h"
#include "giant/init.h"
#include "giant/options.h"

typedef struct gpt_failslow_args {
  bool on;
  float theta;
  int k, warmup, window, every, probe_rounds, probe_bytes;
} gpt_failslow_args;

#define GPT_FAILSLOW_USAGE                                                                                   \
  "fail-slow detection (3 or more ranks):\n"                                                               \
  "  --failslow          gather every rank's step telemetry and flag slow ranks and links\n"               \
  "  --failslow-theta X  slowdown that counts, as a fraction (default 0.25)\n"                             \
  "  --failslow-k N      consecutive steps (compute) or probes (link) to flag (default 5)\n"               \
  "  --failslow-warmup N steps learnt before any verdict (default 10)\n"                                   \
  "  --failslow-window N steps of history for the noise and the wait baseline (default 50)\n"             \
  "  --failslow-every N  gather every N steps (default 1)\n"                                               \
  "  --failslow-probe-rounds N  round trips per pair in a link probe (default 3)\n"                       \
  "  --failslow-probe-bytes N   what a probe's transfers carry, each way (default 16384)\n"

#define GPT_FAILSLOW_OPTS(a)                                                                                 \
  {"--failslow", GT_OPT_FLAG, &(a)->on, 0, 0}, {"--failslow-theta", GT_OPT_FLOAT, &(a)->theta, 0.01, 100}, \
      {"--failslow-k", GT_OPT_INT, &(a)->k, 1, 1000}, {"--failslow-warmup", GT_OPT_INT, &(a)->warmup, 1, 1e6}, \
      {"--failslow-window", GT_OPT_INT, &(a)->window, 4, 1e5}, {"--failslow-every", GT_OPT_INT, &(a)->every, 1, 1e6}, \
      {"--failslow-probe-rounds", GT_OPT_INT, &(a)->probe_rounds, 1, 100},                                \
      {"--failslow-probe-bytes", GT_OPT_INT, &(a)->probe_bytes, 4, 64 << 20}

/* NULL *out unless a->on. metrics: rank 0's metrics file (verdict lines go
 * there too), or NULL. record_ranks: each rank's rank at launch, for the
 * health records, after a reshape (NULL: the same). */
gt_status gpt_failslow_start(const gpt_failslow_args *a, gt_dist *dist, const gt_model *m, gt_job *job,
                             const char *metrics, const int *record_ranks, gt_failslow **out);
/* After each step; fs NULL: nothing. The step's report goes to *rep
 * (rep->gathered false when nothing was gathered). */
gt_status gpt_failslow_after_step(gt_failslow *fs, const gt_step_stats *st, gt_failslow_report *rep);
/* Rank 0, at the end: how well the predictor did over the run. */
void gpt_failslow_summary(gt_failslow *fs, bool lead);

#endif
