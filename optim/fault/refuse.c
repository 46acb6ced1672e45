/* A build without fault points (GIANT_FAULTS off): the one piece of
 * GT_FAULT it keeps is the refusal. Ignoring the variable would let a test
 * or chaos run pass without the faults it asked for, on a build that
 * cannot play them. */
#include <stdlib.h>

#include "optim/fault/fault.h"

gt_status gt_fault_check_env(void) {
  const char *spec = getenv("GT_FAULT");
  if (!spec || !*spec) return GT_OK;
  return gt_errorf(GT_EUNSUPPORTED,
                   "GT_FAULT is set ('%.120s'), but this build has no fault points: configure with "
                   "-DGIANT_FAULTS=ON (tests and chaos builds do), or unset GT_FAULT",
                   spec);
}
