/* --tensorboard in a build without protobuf-c: the flag is refused with
 * what to install, and nothing else changes. */
#include "tboard.h"

#include <stddef.h>

gt_status run_tboard_open(const char *dir, run_tboard **out) {
  (void)dir;
  *out = NULL;
  return gt_errorf(GT_EUNSUPPORTED,
                   "--tensorboard: this build has no protobuf-c; install protobuf-c-compiler and "
                   "libprotobuf-c-dev and build again");
}
void run_tboard_close(run_tboard *tb) { (void)tb; }
const char *run_tboard_path(const run_tboard *tb) {
  (void)tb;
  return "";
}
gt_status run_tboard_scalars(run_tboard *tb, int64_t step, const run_tboard_scalar *v, int n) {
  (void)tb, (void)step, (void)v, (void)n;
  return GT_OK;
}
gt_status run_tboard_text(run_tboard *tb, int64_t step, const char *tag, const char *text) {
  (void)tb, (void)step, (void)tag, (void)text;
  return GT_OK;
}
