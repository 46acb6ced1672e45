/* Logging to stderr, one line per message, with a level, a monotonic
 * timestamp and (once set) the rank, so interleaved output of many workers
 * stays readable. GT_LOG_LEVEL=debug|info|warn|error sets the threshold. */
#ifndef GIANT_LOG_H
#define GIANT_LOG_H

#include "giant/status.h"

GT_API_BEGIN

typedef enum { GT_LOG_DEBUG = 0, GT_LOG_INFO, GT_LOG_WARN, GT_LOG_ERROR } gt_log_level;

void gt_log(gt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gt_log_set_level(gt_log_level level);
/* Tag every later line with "[rank N]"; a negative rank removes the tag. */
void gt_log_set_rank(int rank);

#define gt_debug(...) gt_log(GT_LOG_DEBUG, __VA_ARGS__)
#define gt_info(...) gt_log(GT_LOG_INFO, __VA_ARGS__)
#define gt_warn(...) gt_log(GT_LOG_WARN, __VA_ARGS__)
#define gt_err(...) gt_log(GT_LOG_ERROR, __VA_ARGS__)

/* Seconds on a monotonic clock. */
double gt_now(void);

GT_API_END
#endif
