/* Fail-slow monitoring of a running job: every rank, after every step (or
 * every `every` steps), gathers all ranks' gt_step_telemetry with one small
 * all-gather over the world communicator, feeds the predictor and the
 * detector (giant/engine/predictor.h, giant/engine/detector.h), and returns the step's
 * verdicts with every rank's telemetry.
 *
 * Two kinds of verdict:
 *   compute  a rank computes slower than its workload explains, against its
 *            peers (the detector);
 *   link     the communication waits rose job-wide over their own history
 *            while compute stayed normal; a bounded active probe (a
 *            ping-pong of probe_bytes between every pair of ranks, on the
 *            world communicator) names, for k probes in a row, either the
 *            ranks all of whose round trips stand out against those of
 *            the pairs without them (a node's own link is slow: every
 *            rank behind it is flagged, peer -1), or else the pair whose
 *            round trip stands out against the median pair's. Probes run
 *            only while the waits are up, so a clean run pays nothing.
 *
 * Every rank computes the same verdicts: they are a pure function of the
 * gathered telemetry and of the probe's round trips, which every rank
 * receives alike, so no agreement round is needed. World rank 0 alone
 * reports them: a log line per verdict, a JSON line per step in the
 * metrics file, and, when the job has an etcd, a health record per verdict
 * (giant/engine/coord.h). docs/failslow.md has the knobs and their defaults. */
#ifndef GIANT_FAILSLOW_H
#define GIANT_FAILSLOW_H

#include <stdbool.h>

#include "giant/engine/detector.h"
#include "giant/engine/dist.h"
#include "giant/engine/etcd.h"
#include "giant/metrics.h"
#include "giant/model.h"

typedef enum gt_failslow_kind {
  GT_FAILSLOW_COMPUTE = 1, /* the rank's own computation is slow */
  GT_FAILSLOW_LINK = 2,    /* the link between rank and peer is slow */
} gt_failslow_kind;

typedef struct gt_failslow_verdict {
  int rank;
  gt_failslow_kind kind;
  int peer;     /* link: the other end (rank < peer: a ping-pong cannot tell the direction), or -1: every
                    link of the rank (its node's own); compute: -1 */
  bool flagged; /* true: found slow; false: recovered */
  double ratio; /* compute: observed / predicted, job-wide factor removed; link: round trip / median pair's */
  int onset;    /* flagged: the first step of the evidence */
  int step;     /* the step of the verdict */
} gt_failslow_verdict;

typedef struct gt_failslow_config {
  double theta;             /* slowdown that counts, as a fraction; 0: 0.25 (compute verdicts of two ranks: 0.4) */
  int k;                    /* consecutive steps (compute) or probes (link) to flag; 0: 5 */
  int warmup;               /* gathered steps before any verdict; 0: 10 */
  int window;               /* gathered steps of history (noise, wait baseline); 0: 50 */
  int every;                /* gather every `every` steps; 0: 1 */
  int probe_rounds;         /* round trips per pair and probe; 0: 3 */
  int probe_bytes;          /* what each probe transfer carries, each way: a link short of bandwidth shows
                          only under a payload; 0: 16 KiB */
  const char *metrics_path; /* rank 0 appends a JSON line per gathered step here; NULL: none */
  bool quiet;               /* no log lines */
  /* Health records (rank 0): an etcd client (gt_job_etcd) and the job id;
   * NULL client: none. */
  gt_etcd_client *etcd;
  const char *job_id;
  /* The rank each rank of this world is in the health records, nranks
   * long: its rank at launch, after a reshape has numbered the ranks left
   * anew (so that a record never lands on another process's); NULL: the
   * same. Copied. */
  const int *record_ranks;
} gt_failslow_config;

typedef struct gt_failslow_report {
  int step;
  bool gathered; /* false on steps between gathers: nothing else is set */
  int nranks;
  const gt_step_telemetry *telemetry; /* every rank's, in rank order (valid until the next call) */
  /* Each rank's compute under its fit, before this step was learnt. The
   * fits learn speeds relative to the job (gt_detector_config's
   * relative_fits), so seconds are predicted * job_factor. */
  const double *predicted;
  double job_factor; /* exp(median over ranks of log(observed / predicted)): what all ranks shared */
  double ape;        /* mean over ranks not flagged of |1 - predicted * job_factor / observed| */
  double ape_raw;    /* the same with the job factor forecast from the steps before (a moving average) */
  double gather_s;   /* the all-gather's time on this rank */
  bool probed;       /* a link probe ran this step */
  double probe_s;    /* its time */
  /* The job-wide communication wait (the median rank's step less its
   * compute and loading), this step and over the history of normal steps:
   * what a slow link adds to each step is their difference. */
  double wait_s, wait_base_s;
  int nverdicts;
  const gt_failslow_verdict *verdicts; /* valid until the next call */
} gt_failslow_report;

typedef struct gt_failslow gt_failslow;

/* Collective over the world of dist (three ranks or more): rank 0's prior
 * (from m's layers and its backend's peak FLOP/s) is shared so that every
 * rank's predictor starts alike. */
gt_status gt_failslow_create(gt_dist *dist, const gt_model *m, const gt_failslow_config *cfg, gt_failslow **out);
/* After each training step, on every rank, with the stats the trainer
 * filled. Collective over the world (on gathering steps). */
gt_status gt_failslow_step(gt_failslow *fs, const gt_step_stats *stats, gt_failslow_report *out);
/* Whether rank's computation, or its link to peer (-1: every link of
 * rank, its node's own), is flagged now. */
bool gt_failslow_flagged(const gt_failslow *fs, int rank, gt_failslow_kind kind, int peer);
void gt_failslow_destroy(gt_failslow *fs);

#endif
