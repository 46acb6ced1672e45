/* Step traces recorded from real runs (the CSV files of tests/data/, written by
 * tests/data/trace_from_metrics.py): every rank's telemetry, step by step. */
#ifndef GIANT_TEST_TRACE_H
#define GIANT_TEST_TRACE_H

#include "giant/metrics.h"

typedef struct trace {
  int ranks, steps;
  double peak_flops;
  gt_step_telemetry *tel; /* steps x ranks, tel[step * ranks + rank] */
} trace;

/* Loads tests/data/<name>.csv; fails the test on a bad file. */
void trace_load(const char *name, trace *t);
void trace_free(trace *t);

#endif
