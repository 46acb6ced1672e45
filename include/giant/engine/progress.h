/* Progress records on etcd: what a running job is doing, for giantrun
 * --status (docs/observability.md) and any etcd client.
 *
 *   /giant/<job>/progress/job      rank 0's view of the job, one line:
 *     gen=0 world=4 dp=2 tp=2 pp=1 step=120 steps=1000 step_ms=812.5
 *     tokens_per_s=5041 mfu=0.41 loss=3.2158 ckpt=100 eta_s=715.0
 *     time=1795000000.25
 *   /giant/<job>/progress/rank/<R> each rank's own, one line:
 *     gen=0 world=4 node=node-a pid=4242 step=120 step_ms=811.0
 *     time=1795000000.25
 *
 * The run library writes them from a thread of its own, at most once a
 * second, so that a slow or absent etcd never holds a step up. A rank's
 * record outlives the rank (a reshape renumbers the ranks): a reader keeps
 * those whose gen and world match the job's record. ckpt is -1 before the
 * first committed checkpoint; eta_s is -1 before a step time is known. */
#ifndef GIANT_ENGINE_PROGRESS_H
#define GIANT_ENGINE_PROGRESS_H

#include <stdint.h>

#include "giant/engine/etcd.h"
#include "giant/status.h"

#define GT_PROGRESS_LINE_MAX 512

typedef struct gt_progress_job {
  long gen;
  int world, dp, tp, pp;
  int64_t step, steps;
  double step_ms, tokens_per_s, mfu, loss;
  int64_t ckpt;
  double eta_s;
  double time; /* unix seconds when written */
} gt_progress_job;

typedef struct gt_progress_rank {
  int rank;
  long gen;
  int world;
  char node[64]; /* "-" when not under giantrun */
  int pid;
  int64_t step;
  double step_ms;
  double time;
} gt_progress_rank;

/* The records as their lines, and back: GT_EFORMAT naming what is wrong. */
gt_status gt_progress_job_format(const gt_progress_job *p, char *line, size_t len);
gt_status gt_progress_job_parse(const char *line, size_t len, gt_progress_job *out);
gt_status gt_progress_rank_format(const gt_progress_rank *p, char *line, size_t len);
gt_status gt_progress_rank_parse(const char *line, size_t len, int rank, gt_progress_rank *out);

gt_status gt_progress_put_job(gt_etcd_client *c, const char *job_id, const gt_progress_job *p);
gt_status gt_progress_put_rank(gt_etcd_client *c, const char *job_id, const gt_progress_rank *p);
/* The job's record; *found 0 when there is none yet. */
gt_status gt_progress_get_job(gt_etcd_client *c, const char *job_id, gt_progress_job *out, int *found);
/* Every rank's record, by rank, at most max. A record that does not parse
 * is skipped (a reader must not fail on one bad key), counted in *bad. */
gt_status gt_progress_list_ranks(gt_etcd_client *c, const char *job_id, gt_progress_rank *out, int max, int *n,
                                 int *bad);

#endif
