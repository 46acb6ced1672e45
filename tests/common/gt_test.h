/* Shared by the CMocka tests: fail with the status and the library's
 * message when a call does not return GT_OK. Include after <cmocka.h>. */
#ifndef GIANT_TEST_COMMON_H
#define GIANT_TEST_COMMON_H

#include "giant/status.h"

#define OK(expr)                                                                          \
  do {                                                                                    \
    gt_status ok_s_ = (expr);                                                             \
    if (ok_s_ != GT_OK) fail_msg("%s: %s: %s", #expr, gt_status_name(ok_s_), gt_last_error()); \
  } while (0)

#endif
