/* TensorBoard event files (--tensorboard DIR): scalars and text summaries
 * in TFRecord records, one record per call, so that what a step wrote is in
 * the file when the call returns and a kill leaves whole records. */
#ifndef GIANT_RUN_TBOARD_H
#define GIANT_RUN_TBOARD_H

#include <stdint.h>

#include "giant/status.h"

typedef struct run_tboard run_tboard;

typedef struct run_tboard_scalar {
  const char *tag; /* "train/loss" */
  float value;
} run_tboard_scalar;

/* A new file events.out.tfevents.<unix time>.<host>.<pid> in dir (made if
 * missing), its first event naming the format ("brain.Event:2"). */
gt_status run_tboard_open(const char *dir, run_tboard **out);
void run_tboard_close(run_tboard *tb);
/* The path of the file, for messages and tests. */
const char *run_tboard_path(const run_tboard *tb);
/* One event at step with n scalars. */
gt_status run_tboard_scalars(run_tboard *tb, int64_t step, const run_tboard_scalar *v, int n);
/* One event at step with a text summary (TensorBoard's text plugin). */
gt_status run_tboard_text(run_tboard *tb, int64_t step, const char *tag, const char *text);

#endif
