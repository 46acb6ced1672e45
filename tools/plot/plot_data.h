/* giant-plot's reading of metrics files (docs/observability.md): the step,
 * evaluation, fail-slow and event lines of one or more files, in file
 * order, into the series and marks a sheet draws. */
#ifndef GIANT_TOOLS_PLOT_DATA_H
#define GIANT_TOOLS_PLOT_DATA_H

#include <stddef.h>

/* What a mark on the sheet says happened. */
typedef enum plot_mark_kind {
  PLOT_FAULT,
  PLOT_FLAGGED,
  PLOT_LADDER,
  PLOT_RESHAPE,
  PLOT_RESUME,
  PLOT_OTHER,
} plot_mark_kind;

typedef struct plot_mark {
  int step;
  plot_mark_kind kind;
  int derived; /* read from the evidence (a verdict, a step gone back), not an event line */
  char label[64];
} plot_mark;

/* A value at a step (and rank, for the heat strip); seq is its place in
 * the input, so that of two at one step the later wins. */
typedef struct plot_point {
  int step, rank;
  double v;
  size_t seq;
} plot_point;

typedef struct plot_series {
  plot_point *p;
  size_t n, cap;
} plot_series;

typedef struct plot_data {
  plot_series loss, eval, tokens_per_s, mfu;
  /* Each rank's compute seconds a step, from the fail-slow monitor's lines
   * and from the step lines; heat is the one drawn, heat_source says which. */
  plot_series heat_failslow, heat_step, *heat;
  const char *heat_source;
  plot_mark *marks;
  size_t nmarks, cap_marks;
  size_t step_lines, seq;
  int lead_rank;             /* the lowest rank whose step lines were read */
  int first_step, last_step; /* of the step lines, finite values or not */
  /* Ranks (and links) the fail-slow verdicts hold slow, so that only the
   * step each turned slow is marked: "kind:rank:peer" keys. */
  char (*slow)[32];
  size_t nslow, cap_slow;
  int have_flagged_events, have_resume_events;
} plot_data;

#define PLOT_DATA_INIT \
  { .lead_rank = -1 }

/* Reads one metrics file into d (appending). 0 on success; on failure
 * prints why (file and line) to stderr and returns -1. A truncated last
 * line (no newline, not JSON: a job killed mid-write) is skipped with a
 * warning. */
int plot_read_file(plot_data *d, const char *path);
/* After every file: keeps the lead rank's step values, one per step (the
 * latest), sorts every series and the marks by step. -1 (with a message)
 * when no step line was read. */
int plot_finish(plot_data *d, const char *what);
void plot_data_free(plot_data *d);

#endif
