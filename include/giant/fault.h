/* Fault injection, off by default: GT_FAULT names faults to play on chosen
 * ranks at chosen steps, so that detection and recovery can be tested on a
 * real job. The grammar is in docs/faults.md, e.g.
 *   GT_FAULT="slow:rank=2,factor=3,from=40;crash:rank=1,at=30"
 * The trainer reads GT_FAULT when it is created and calls gt_fault_step once
 * a step, after the step's forward and backward. */
#ifndef GIANT_FAULT_H
#define GIANT_FAULT_H

#include <stdbool.h>

#include "giant/engine/grid.h"
#include "giant/status.h"

GT_API_BEGIN

typedef enum gt_fault_kind {
  GT_FAULT_SLOW,     /* rank computes factor times slower from step `from` (to `until`, if given) */
  GT_FAULT_SLOWLINK, /* sends from rank to peer delayed by delay_ms, steps [from, until) (gt_fault_apply_links) */
  GT_FAULT_STALL,    /* rank stops for `seconds` once, at step `at` */
  GT_FAULT_CRASH,    /* rank kills itself (SIGKILL) at step `at` */
  GT_FAULT_NAN,      /* rank's loss becomes NaN at step `at` */
  GT_FAULT_NANGRAD,  /* rank's gradients get a NaN at step `at`, once (a transient fault) */
  GT_FAULT_SLOWSAVE, /* rank's checkpoint writer waits `seconds` before writing each save */
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
  int rank;              /* the rank this process plays */
  bool stalled[GT_FAULT_MAX]; /* stall, nangrad, holdjoin: played (they play once) */
  gt_grid *grid;              /* where slowlink plays (gt_fault_apply_links) */
  bool link_on[GT_FAULT_MAX]; /* slowlink: its delay is in place */
} gt_fault_plan;

/* Parses a ';'-separated list of faults. GT_EINVAL names the bad part: an
 * unknown kind or key, a bad number, a missing required key. */
gt_status gt_fault_parse(const char *spec, gt_fault_plan *out);
/* Reads GT_FAULT for `rank`; an unset or empty GT_FAULT gives a plan with no
 * faults. */
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

GT_API_END
#endif
