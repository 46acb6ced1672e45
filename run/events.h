/* The job's events in the lead's metrics file, between its step lines, for
 * giant-plot's marks and anyone reading the file, and as text under
 * events/<kind> in its TensorBoard file (docs/observability.md):
 *   {"event":"reshape","step":120,"unix_s":1795000000.250,"rank":0,
 *    "text":"reshaped to dp=1 tp=1 pp=1 (world 1)"}
 * Kinds: fault (a failed step the job went on from), flagged and recovered
 * (fail-slow verdicts), ladder (its rung, when it acts), reshape, resume
 * (from a checkpoint, at start). Steps are step indices, as the step
 * lines' (0-based). Written by the lead (rank 0) only. */
#ifndef GIANT_RUN_EVENTS_H
#define GIANT_RUN_EVENTS_H

struct gt_run;

/* One event; nothing off the lead. A
 * failure to write is logged, never the run's: the events are a record. */
void run_event(struct gt_run *r, const char *kind, int step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
