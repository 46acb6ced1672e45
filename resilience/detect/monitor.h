/* Inside the fail-slow monitor: its state, the link watch and probe, and
 * how verdicts are reported. */
#ifndef GIANT_RESILIENCE_FAILSLOW_MONITOR_H
#define GIANT_RESILIENCE_FAILSLOW_MONITOR_H

#include <stdio.h>

#include "giant/engine/comm.h"
#include "resilience/detect/failslow.h"
#include "giant/engine/detector.h"
#include "giant/engine/predictor.h"

/* The link watch: the job-wide communication wait against its history,
 * and the probe it triggers. */
typedef struct link_watch {
  double *history; /* ring of job-wide waits of untriggered steps, `window` long */
  int nhist, hist_at;
  double *scratch, *vals; /* max(window, npairs, nranks) doubles each */
  float *rtt;             /* per pair (i < j, in order): this probe's round trip, seconds */
  int npairs;
  int high;                         /* consecutive steps with the waits up */
  int onset;                        /* first of them */
  int suspect_a, suspect_b, streak; /* the pair that stood out in the last `streak` probes
                                        (b -1: the ranks behind one link, a the first) */
  int quiet;                        /* flagged: consecutive probes or steps it did not stand out */
  int flagged_a, flagged_b;         /* -1: no link flagged */
  float *payload;                   /* what a probe transfer carries (probe_bytes) */
  size_t payload_n;
  unsigned char *behind, *flagged; /* per rank: behind the slow link in this probe; and as flagged */
} link_watch;

struct gt_failslow {
  gt_failslow_config cfg;
  gt_comm *world;
  int rank, n, gathered;
  gt_predictor *pred;
  gt_detector *det;
  gt_step_telemetry *tel;
  double *predicted, *e, *scratch;
  double level; /* the job's recent factor over the fits (ape_raw) */
  gt_detector_event *events;
  gt_failslow_verdict *verdicts; /* 2 * n + 2 */
  int *record_rank;              /* cfg.record_ranks, copied; NULL: the same */
  int nverdicts;
  link_watch link;
  FILE *metrics;
};

gt_status gt_failslow_link_init(gt_failslow *fs);
void gt_failslow_link_free(gt_failslow *fs);
/* After the compute verdicts of a gathered step: watches the waits, probes
 * when they are up and compute is not to blame, and appends link verdicts.
 * Collective over the world when it probes (every rank decides alike). */
gt_status gt_failslow_link_step(gt_failslow *fs, int step, gt_failslow_report *rep);

/* Rank 0: log lines, the metrics JSON line, health records. */
void gt_failslow_publish(gt_failslow *fs, const gt_failslow_report *rep);

/* The median of v[0..n) (scratch: n doubles). */
double gt_failslow_median(double *scratch, const double *v, int n);

#endif
