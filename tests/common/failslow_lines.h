/* The fail-slow monitor's metrics lines, as the example writes them with
 * --metrics: {"failslow_step":S, ..., "compute_s":[a,b,...], ...}, one a
 * step, each rank's compute that step. */
#ifndef GIANT_TEST_FAILSLOW_LINES_H
#define GIANT_TEST_FAILSLOW_LINES_H

/* From one line: its step and the first `max` ranks' compute (seconds).
 * Returns how many were read, or -1 when the line is not a monitor's line
 * with a compute list. */
int failslow_line_compute(const char *line, int *step, double *compute, int max);

#endif
