/* Reads the step traces of tests/data/. */
#include "trace.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void trace_load(const char *name, trace *t) {
  char path[1024], line[512];
  snprintf(path, sizeof path, "%s/%s.csv", GIANT_TEST_DATA, name);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open the trace %s", path);
  *t = (trace){0};
  int lines = 0, n = 0;
  while (fgets(line, sizeof line, f)) {
    lines++;
    if (line[0] == '#') {
      char *r = strstr(line, "ranks=");
      if (r && sscanf(r, "ranks=%d steps=%d peak_flops=%lf", &t->ranks, &t->steps, &t->peak_flops) != 3)
        fail_msg("%s:%d: a bad header", path, lines);
      continue;
    }
    if (strncmp(line, "step,", 5) == 0) continue;
    if (!t->tel) {
      if (t->ranks < 1 || t->steps < 1) fail_msg("%s: no 'ranks= steps=' header before the data", path);
      t->tel = calloc((size_t)t->ranks * (size_t)t->steps, sizeof *t->tel);
    }
    if (n == t->ranks * t->steps) fail_msg("%s: more lines than %d steps of %d ranks", path, t->steps, t->ranks);
    gt_step_telemetry *w = &t->tel[n];
    int step;
    long long tokens;
    if (sscanf(line, "%d,%d,%d,%d,%lld,%lf,%lf,%lf,%lf,%lf", &step, &w->rank, &w->layers, &w->micro_batches, &tokens,
               &w->seq_sq, &w->compute_s, &w->data_s, &w->dp_wait_s, &w->pp_wait_s) != 10 ||
        step != n / t->ranks || w->rank != n % t->ranks)
      fail_msg("%s:%d: not step %d of rank %d", path, lines, n / t->ranks, n % t->ranks);
    w->tokens = tokens;
    n++;
  }
  fclose(f);
  if (n != t->ranks * t->steps) fail_msg("%s: %d lines, want %d", path, n, t->ranks * t->steps);
}

void trace_free(trace *t) { free(t->tel); }
