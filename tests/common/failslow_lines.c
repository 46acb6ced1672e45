/* See failslow_lines.h. */
#include "common/failslow_lines.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int failslow_line_compute(const char *line, int *step, double *compute, int max) {
  static const char key[] = "\"compute_s\":[";
  const char *c = strstr(line, key);
  if (!c || sscanf(line, "{\"failslow_step\":%d", step) != 1) return -1;
  int n = 0;
  for (c += strlen(key); n < max && *c && *c != ']'; n++) {
    char *end;
    compute[n] = strtod(c, &end);
    if (end == c) break;
    c = *end == ',' ? end + 1 : end;
  }
  return n;
}
