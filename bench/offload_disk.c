/* bench_offload's disk tier: the AdamW step with the state in a file
 * against the same step with it in memory, and against the time the
 * file's bytes alone take to move. With reads ahead and writes behind, the
 * step on disk should cost about the larger of the update and the I/O,
 * not their sum. */
#include "offload_disk.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "gpt.h"
#include "core/model/model_engine.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"

enum { WARMUP = 1, STEPS = 5 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The median AdamW step of one optimizer over the model's gradients; the
 * parameters are set back to `start` first, so both runs update alike. */
static gt_status time_steps(gt_model *m, const gt_optim_config *oc, const float *start, double *median) {
  size_t n = gt_model_buffer_floats(m);
  GT_TRY(gt_model_set_params(m, start, n));
  gt_optimizer *o;
  GT_TRY(gt_optimizer_create(m, oc, &o));
  double t[WARMUP + STEPS];
  gt_status s = GT_OK;
  for (int k = 0; k < WARMUP + STEPS && s == GT_OK; k++) {
    double t0 = now();
    s = gt_optimizer_step(o, 1e-3f, 1.0f);
    t[k] = now() - t0;
  }
  gt_optimizer_destroy(o);
  bench_sort(t + WARMUP, STEPS);
  *median = t[WARMUP + STEPS / 2];
  return s;
}

/* One thread reads and writes back `bytes` of a file in dir, 8 MiB at a
 * time, as the I/O thread does in a step (every byte read once and
 * written once): the I/O alone, without the update. */
static gt_status time_io(const char *dir, size_t bytes, double *seconds) {
  int fd = open(dir, O_TMPFILE | O_RDWR, 0600);
  if (fd < 0) return gt_errorf(GT_EIO, "cannot create a file in %s", dir);
  size_t piece = (size_t)8 << 20;
  char *buf = malloc(piece);
  gt_status s = buf && posix_fallocate(fd, 0, (off_t)bytes) == 0 ? GT_OK : gt_errorf(GT_EIO, "no room in %s", dir);
  double best = 0;
  for (int round = 0; round < WARMUP + STEPS && s == GT_OK; round++) {
    double t0 = now();
    for (size_t off = 0; off < bytes && s == GT_OK; off += piece) {
      size_t len = bytes - off < piece ? bytes - off : piece;
      if (pread(fd, buf, len, (off_t)off) != (ssize_t)len)
        s = gt_errorf(GT_EIO, "reading %s", dir);
      else if (pwrite(fd, buf, len, (off_t)off) != (ssize_t)len)
        s = gt_errorf(GT_EIO, "writing %s", dir);
    }
    double dt = now() - t0;
    if (round >= WARMUP && (best == 0 || dt < best)) best = dt;
  }
  free(buf);
  close(fd);
  *seconds = best;
  return s;
}

gt_status bench_offload_disk(const char *dir, int layers, int C, int threads, disk_result *out) {
  memset(out, 0, sizeof *out);
  gt_backend *be;
  GT_TRY(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = threads}, &be));
  gt_backend_set_peak_flops(be, 1e12);
  gt_model *m = NULL;
  float *start = NULL, *a = NULL, *b = NULL;
  gt_status s = gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = 16, .seed = 3, .offload_window = 1}, &m);
  if (s == GT_OK)
    s = gpt_add_layers(
        m, &(gpt_config){.vocab_size = 256, .T_max = 16, .C = C, .NH = 8, .L = layers, .tie_weights = true});
  if (s == GT_OK) s = gt_model_build(m);
  size_t n = s == GT_OK ? gt_model_buffer_floats(m) : 0;
  if (s == GT_OK) {
    out->params = gt_model_param_count(m);
    start = malloc(n * sizeof *start);
    a = malloc(n * sizeof *a);
    b = malloc(n * sizeof *b);
    if (!start || !a || !b) s = gt_errorf(GT_ENOMEM, "out of memory");
  }
  if (s == GT_OK) {
    /* Offloaded, the gradients are host memory: a pattern of both signs. */
    float *g = gt_model_grads(m);
    for (size_t i = 0; i < n; i++) g[i] = (float)((int)(i % 97) - 48) * 1e-3f;
    gt_model_grads_changed(m);
    s = gt_model_get_params(m, start, n);
  }
  gt_optim_config oc = gt_optim_defaults(GT_OPTIM_ADAMW);
  if (s == GT_OK) s = time_steps(m, &oc, start, &out->memory_s);
  if (s == GT_OK) s = gt_model_get_params(m, a, n);
  oc.state_dir = dir;
  if (s == GT_OK) s = time_steps(m, &oc, start, &out->disk_s);
  if (s == GT_OK) s = gt_model_get_params(m, b, n);
  if (s == GT_OK && memcmp(a, b, n * sizeof *a) != 0)
    s = gt_errorf(GT_EINVAL, "the step with the state on disk gave other parameters than in memory");
  if (s == GT_OK) s = time_io(dir, 2 * n * sizeof(float), &out->io_s);
  free(start);
  free(a);
  free(b);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return s;
}
