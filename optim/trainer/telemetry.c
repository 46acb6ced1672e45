/* Per-step telemetry: what a rank did and where its time went. */
#include "optim/trainer/telemetry.h"

#include <time.h>

#include "giant/layer.h"
#include "giant/log.h"
#include "giant/engine/model.h"
#include "parallel/dp_sync.h"
#include "parallel/pp_exec.h"

/* The step's start on the thread that runs it, in that thread's CPU time. */
static _Thread_local double cpu0;

static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void gt_telemetry_begin(void) { cpu0 = thread_cpu_now(); }

gt_status gt_telemetry_load(gt_loader *l, gt_batch *b, gt_step_telemetry *tel) {
  double t0 = gt_now();
  gt_status s = gt_loader_next(l, b);
  tel->data_s += gt_now() - t0;
  return s;
}

void gt_telemetry_add_batch(gt_step_telemetry *tel, const gt_batch *b) {
  tel->micro_batches++;
  tel->tokens += (int64_t)b->B * b->T;
  tel->seq_sq += (double)b->B * b->T * b->T; /* the kernels run every row to T */
}

void gt_telemetry_after_compute(gt_step_telemetry *tel, gt_model *m, const gt_pp_exec *pipe, double t0, bool wall_time,
                                int rank) {
  if (pipe) {
    double run, busy;
    gt_pp_exec_timing(pipe, &run, &busy);
    tel->compute_s = busy;
    tel->pp_wait_s = run > busy ? run - busy : 0;
    gt_pp_exec_peer_waits(pipe, &tel->pp_wait_prev_s, &tel->pp_wait_next_s);
  } else {
    tel->compute_s = gt_now() - t0 - tel->data_s - tel->dp_wait_s;
  }
  /* On the CPU the device is this thread (its OpenMP team runs in step
   * with it, and its waits block), so its CPU time is the device's busy
   * time: time the OS gave other processes sharing the cores, which wall
   * time would count, is not the rank's slowness, unless the caller says
   * the rank has its cores to itself (wall_time). */
  if (gt_backend_kind(gt_model_backend(m)) == GT_DEVICE_CPU && !wall_time) tel->compute_s = thread_cpu_now() - cpu0;
  tel->rank = rank;
  tel->layers = 0;
  for (int i = 0; i < gt_model_num_layers(m); i++) tel->layers += gt_model_layer(m, i)->local;
}

void gt_telemetry_after_reduce(gt_step_telemetry *tel, gt_dp_sync *sync) {
  if (sync) tel->dp_wait_s += gt_dp_sync_last(sync)->wait_seconds;
}
