/* Shared by the CMocka tests: checks that fail with the status and the
 * library's message. Include after <cmocka.h>. */
#ifndef GIANT_TEST_COMMON_H
#define GIANT_TEST_COMMON_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/gt_skip.h"
#include "giant/status.h"

#define OK(expr)                                                                               \
  do {                                                                                         \
    gt_status ok_s_ = (expr);                                                                  \
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

/* GT_FAULT's fault points are in the build only with -DGIANT_FAULTS=ON
 * (optim/fault/fault.h); without them a job started with GT_FAULT set
 * fails at its start. A program all of whose cases play faults starts
 * main() with SKIP_PROGRAM_WITHOUT_FAULTS(): it exits 77, which ctest
 * reports as skipped. A case among others that need none calls
 * SKIP_CASE_WITHOUT_FAULTS() before it sets GT_FAULT: CMocka skips it, and
 * main returns gt_test_exit(...) (common/gt_skip.h). */
#ifdef GIANT_FAULTS
#define GT_TEST_FAULTS 1
#else
#define GT_TEST_FAULTS 0
#endif
#define GT_TEST_NO_FAULTS "this build has no fault points (configure with -DGIANT_FAULTS=ON)"
#define SKIP_PROGRAM_WITHOUT_FAULTS()                       \
  do {                                                      \
    if (!GT_TEST_FAULTS) {                                  \
      fprintf(stderr, "%s: skipping\n", GT_TEST_NO_FAULTS); \
      return 77;                                            \
    }                                                       \
  } while (0)
#define SKIP_CASE_WITHOUT_FAULTS()                           \
  do {                                                       \
    if (!GT_TEST_FAULTS) SKIP_CASE("%s", GT_TEST_NO_FAULTS); \
  } while (0)

#endif
