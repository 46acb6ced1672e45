/* Fault injection, for tests and chaos runs: GT_FAULT names faults to play
 * on chosen ranks at chosen steps, so that detection and recovery can be
 * tested on a real job. The grammar is in docs/faults.md, e.g.
 *   GT_FAULT="slow:rank=2,factor=3,from=40;crash:rank=1,at=30"
 *
 * The fault points exist only in a build configured with -DGIANT_FAULTS=ON
 * (which defines GIANT_FAULTS; tools/test.sh and tests/chaos/chaos.sh do), so
 * that a stray variable cannot slow, poison or kill a production job.
 * There GT_FAULT is parsed once per process, and each user asks for its
 * own copy of the plan (gt_fault_from_env) and calls the hooks below at
 * its fault points: the trainer once a step, after the step's forward and
 * backward (gt_fault_step, gt_fault_nangrad, gt_fault_apply_links), the
 * checkpoint writer (gt_fault_save_delay), a reshape (gt_fault_reshape_point,
 * gt_fault_join_hold). Without the option the hooks are empty inline
 * functions, no fault code is in the library, and a job started with
 * GT_FAULT set fails at its start (gt_fault_check_env) rather than run
 * without the faults a test asked for. */
#ifndef GIANT_FAULT_H
#define GIANT_FAULT_H

#include <stdbool.h>

#include "giant/engine/grid.h"
#include "giant/status.h"

#ifdef GIANT_FAULTS

typedef enum gt_fault_kind {
  GT_FAULT_SLOW,          /* rank computes factor times slower from step `from` (to `until`, if given) */
  GT_FAULT_SLOWLINK,      /* sends from rank to peer delayed by delay_ms, steps [from, until) (gt_fault_apply_links) */
  GT_FAULT_STALL,         /* rank stops for `seconds` once, at step `at` */
  GT_FAULT_CRASH,         /* rank kills itself (SIGKILL) at step `at` */
  GT_FAULT_NAN,           /* rank's loss becomes NaN at step `at` */
  GT_FAULT_NANGRAD,       /* rank's gradients get a NaN at step `at`, once (a transient fault) */
  GT_FAULT_SLOWSAVE,      /* rank's checkpoint writer waits `seconds` before writing each save */
  GT_FAULT_CRASH_RESHAPE, /* rank kills itself (SIGKILL) in the middle of its next reshape */
  GT_FAULT_STALL_RESHAPE, /* rank stops for `seconds` in the middle of each reshape */
  GT_FAULT_HOLDJOIN,      /* rank waits up to `seconds`, once, for a lost rank to ask to join (gt_fault_join_hold) */
  GT_FAULT_PACE,          /* rank's steps take at least step_ms each, steps [from, until) */
} gt_fault_kind;

typedef struct gt_fault {
  gt_fault_kind kind;
  int rank;        /* -1: every rank ("rank=all") */
  int from, until; /* slow, slowlink: steps [from, until); until -1: for good */
  int at;          /* stall, crash, nan */
  int peer;        /* slowlink */
  double factor;   /* slow: > 1 */
  double delay_ms; /* slowlink */
  double seconds;  /* stall, slowsave, stallreshape, holdjoin */
  double step_ms;  /* pace */
} gt_fault;

#define GT_FAULT_MAX 16

typedef struct gt_fault_plan {
  int n;
  gt_fault f[GT_FAULT_MAX];
  int rank;                   /* the rank this process plays */
  bool stalled[GT_FAULT_MAX]; /* stall, nangrad, holdjoin: played (they play once) */
  gt_grid *grid;              /* where slowlink plays (gt_fault_apply_links) */
  bool link_on[GT_FAULT_MAX]; /* slowlink: its delay is in place */
} gt_fault_plan;

/* Parses a ';'-separated list of faults. GT_EINVAL names the bad part: an
 * unknown kind or key, a bad number, a missing required key. */
gt_status gt_fault_parse(const char *spec, gt_fault_plan *out);
/* GT_FAULT's plan for `rank`, each caller its own copy (what has played
 * is the caller's). GT_FAULT is read and parsed once per process, by the
 * first caller on any thread: every user plays the same faults, and a bad
 * spec gives every caller the same GT_EINVAL (and an empty plan). An
 * unset or empty GT_FAULT gives a plan with no faults. */
gt_status gt_fault_from_env(int rank, gt_fault_plan *out);
/* True when the plan holds a fault for this rank. */
bool gt_fault_active(const gt_fault_plan *p);

/* Plays this rank's faults at `step`, after forward and backward took
 * compute_seconds: slow sleeps (factor - 1) * compute_seconds, pace sleeps
 * what the step (with the other faults' sleeps) falls short of step_ms, stall sleeps
 * once, crash raises SIGKILL, nan sets *loss to NaN (so the step's reduced
 * loss and the divergence check see it), slowlink puts its delay in place
 * or takes it away. Returns the seconds it slept. */
double gt_fault_step(gt_fault_plan *p, int step, double compute_seconds, float *loss);
/* Called by a program in the middle of an in-process reshape (the new
 * communicators built, the state not yet moved): crashreshape kills the
 * rank there, stallreshape holds it for its seconds, so that a test can
 * fail a reshape, or act while one is under way. */
void gt_fault_reshape_point(const gt_fault_plan *p);
/* The seconds this rank's checkpoint writer waits before writing a save
 * (slowsave), so that a test can have a save in flight when it acts. */
double gt_fault_save_delay(const gt_fault_plan *p);
/* holdjoin: the seconds this rank (the one that takes joins in) waits, at
 * its first look for joins while the job runs short of a rank, for that
 * rank to ask to join; once, then 0. A restarted worker's start takes an
 * unknown time; this lets a test have it join before the job ends. */
double gt_fault_join_hold(gt_fault_plan *p);
/* nangrad: true once, at its step, on its rank (the trainer then puts a
 * NaN into the gradients). */
bool gt_fault_nangrad(gt_fault_plan *p, int step);

/* Readies this rank's slowlink faults on grid: from step `from` to
 * `until`, sends to the peer named are delayed on every communicator of
 * the grid that joins the two (gt_grid_set_send_delay), switched by
 * gt_fault_step. grid NULL (a job of one): a warning. */
gt_status gt_fault_apply_links(gt_fault_plan *p, gt_grid *grid);

/* A build with fault points plays GT_FAULT: nothing to refuse (a bad spec
 * is gt_fault_from_env's error). */
static inline gt_status gt_fault_check_env(void) { return GT_OK; }
/* Forgets GT_FAULT as read, so that the next gt_fault_from_env reads it
 * again: for tests that change GT_FAULT within one process. */
void gt_fault_env_reset(void);

#else /* no fault points */

typedef struct gt_fault_plan {
  int rank;
} gt_fault_plan;

/* GT_EUNSUPPORTED, with a message that says how to get a build that has
 * them, when GT_FAULT is set and not empty: a test or chaos run must not
 * pass without its faults played. Trainers and gt_run_open call it first,
 * so a job fails at its start (giantrun does not restart a worker that
 * exits with GT_RUN_EXIT_USAGE). Not exported. */
gt_status gt_fault_check_env(void);

/* The hooks play nothing: calls the compiler removes. */
static inline gt_status gt_fault_from_env(int rank, gt_fault_plan *out) {
  out->rank = rank;
  return GT_OK;
}
static inline bool gt_fault_active(const gt_fault_plan *p) {
  (void)p;
  return false;
}
static inline double gt_fault_step(gt_fault_plan *p, int step, double compute_seconds, float *loss) {
  (void)p;
  (void)step;
  (void)compute_seconds;
  (void)loss;
  return 0;
}
static inline void gt_fault_reshape_point(const gt_fault_plan *p) { (void)p; }
static inline double gt_fault_save_delay(const gt_fault_plan *p) {
  (void)p;
  return 0;
}
static inline double gt_fault_join_hold(gt_fault_plan *p) {
  (void)p;
  return 0;
}
static inline bool gt_fault_nangrad(gt_fault_plan *p, int step) {
  (void)p;
  (void)step;
  return false;
}
static inline gt_status gt_fault_apply_links(gt_fault_plan *p, gt_grid *grid) {
  (void)p;
  (void)grid;
  return GT_OK;
}
static inline void gt_fault_env_reset(void) {}

#endif
#endif
