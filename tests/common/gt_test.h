/* Shared by the CMocka tests: checks that fail with the status and the
 * library's message. Include after <cmocka.h>. */
#ifndef GIANT_TEST_COMMON_H
#define GIANT_TEST_COMMON_H

#include <math.h>
#include <string.h>

#include "giant/status.h"

#define OK(expr)                                                                          \
  do {                                                                                    \
    gt_status ok_s_ = (expr);                                                             \
    if (ok_s_ != GT_OK) fail_msg("%s: %s: %s", #expr, gt_status_name(ok_s_), gt_last_error()); \
  } while (0)

/* |got - want| <= tol, with both values in the failure message. */
#define NEAR(got, want, tol)                                                         \
  do {                                                                               \
    double g_ = (got), w_ = (want);                                                  \
    if (!(fabs(g_ - w_) <= (tol))) fail_msg("%s = %.17g, want %.17g", #got, g_, w_); \
  } while (0)

/* The call failed with `want`, and its message contains `words`. */
static inline void expect_error(gt_status got, gt_status want, const char *words) {
  if (got != want || !strstr(gt_last_error(), words))
    fail_msg("got %s '%s', wanted %s with '%s'", gt_status_name(got), gt_last_error(), gt_status_name(want), words);
}

#endif
