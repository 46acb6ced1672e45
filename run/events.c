/* The job's events in the lead's metrics file and its TensorBoard events
 * (events.h). The metrics file is
 * opened for each event (they are rare) in append mode, and each line goes
 * out in one write, so that it never interleaves with the step lines the
 * trainer appends through its own handle. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "events.h"
#include "giant/log.h"
#include "run_internal.h"

/* text as the inside of a JSON string. */
static void escape(const char *text, char *out, size_t cap) {
  size_t j = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p && j + 7 < cap; p++) {
    if (*p == '"' || *p == '\\') {
      out[j++] = '\\';
      out[j++] = (char)*p;
    } else if (*p < 0x20) {
      j += (size_t)snprintf(out + j, cap - j, "\\u%04x", *p);
    } else {
      out[j++] = (char)*p;
    }
  }
  out[j] = '\0';
}

void run_event(gt_run *r, const char *kind, int step, const char *fmt, ...) {
  if (!r->lead) return;
  char text[512], esc[1024], line[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  char tag[64];
  snprintf(tag, sizeof tag, "events/%s", kind);
  run_observe_text(&r->obs, r->lead, step, tag, "%s", text);
  if (!r->metrics[0]) return;
  escape(text, esc, sizeof esc);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(line, sizeof line, "{\"event\":\"%s\",\"step\":%d,\"unix_s\":%.3f,\"rank\":%d,\"text\":\"%s\"}\n",
                   kind, step, (double)ts.tv_sec + ts.tv_nsec * 1e-9, r->job->rank, esc);
  FILE *f = fopen(r->metrics, "a");
  bool ok = f && n > 0 && fwrite(line, 1, (size_t)n, f) == (size_t)n;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) gt_warn("could not write the %s event to the metrics file %s", kind, r->metrics);
}
