/* Line-oriented logging to stderr. One fprintf per line keeps lines whole
 * when several threads log at once. */
#include "giant/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static atomic_int log_level = -1;
static atomic_int log_rank = -1;

double gt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int level_from_env(void) {
  const char *e = getenv("GT_LOG_LEVEL");
  if (!e) return GT_LOG_INFO;
  if (!strcasecmp(e, "debug")) return GT_LOG_DEBUG;
  if (!strcasecmp(e, "warn")) return GT_LOG_WARN;
  if (!strcasecmp(e, "error")) return GT_LOG_ERROR;
  return GT_LOG_INFO;
}

void gt_log_set_level(gt_log_level level) { atomic_store(&log_level, (int)level); }
void gt_log_set_rank(int rank) { atomic_store(&log_rank, rank); }

void gt_log(gt_log_level level, const char *fmt, ...) {
  int threshold = atomic_load(&log_level);
  if (threshold < 0) {
    threshold = level_from_env();
    atomic_store(&log_level, threshold);
  }
  if ((int)level < threshold) return;
  static const char *names[] = {"debug", "info", "warn", "error"};
  char msg[2048], tag[32] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rank = atomic_load(&log_rank);
  if (rank >= 0) snprintf(tag, sizeof tag, " [rank %d]", rank);
  fprintf(stderr, "giant %s%s: %s\n", names[level], tag, msg);
}
