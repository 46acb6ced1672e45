/* The PyTorch peer of bench_train_step: export, one bench_peer per thread setting. */
#include "bench_torch.h"
#include "bench_peer.h"
#include "giant/engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct worker {
  bench_peer *peer;
  char setting[96];
} worker;

#define BENCH_TORCH_MAX 3

struct bench_torch {
  worker w[BENCH_TORCH_MAX];
  int n;
};

gt_status bench_torch_export(gt_model *m, const int32_t *tokens, size_t ntokens, const char *dir) {
  char path[512];
  size_t n = gt_model_buffer_floats(m);
  float *host = malloc(n * sizeof *host);
  if (!host) return gt_errorf(GT_ENOMEM, "out of memory");
  GT_TRY(gt_model_get_params(m, host, n));
  snprintf(path, sizeof path, "%s/params.bin", dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(host, sizeof *host, n, f) != n) return gt_errorf(GT_EIO, "cannot write %s", path);
  fclose(f);
  free(host);
  snprintf(path, sizeof path, "%s/params.txt", dir);
  f = fopen(path, "w");
  if (!f) return gt_errorf(GT_EIO, "cannot write %s", path);
  for (int i = 0; i < gt_model_num_params(m); i++) {
    const gt_param *p = gt_model_param(m, i);
    fprintf(f, "%s %zu %zu %d", p->name, p->offset, p->numel, p->tied_to);
    for (int d = 0; d < p->ndim; d++) fprintf(f, " %lld", (long long)p->shape[d]);
    fprintf(f, "\n");
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/tokens.bin", dir);
  f = fopen(path, "wb");
  if (!f || fwrite(tokens, sizeof *tokens, ntokens, f) != ntokens) return gt_errorf(GT_EIO, "cannot write %s", path);
  fclose(f);
  return GT_OK;
}

static gt_status spawn(worker *w, const char *dir, const bench_torch_shape *s, int torch_threads, int blas_threads,
                       const char *device, const char *precision) {
  char blas[48], omp[48], tt[16], shape[128];
  snprintf(blas, sizeof blas, "OPENBLAS_NUM_THREADS=%d", blas_threads);
  snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", torch_threads);
  snprintf(tt, sizeof tt, "%d", torch_threads);
  int len = snprintf(shape, sizeof shape, "%d,%d,%d,%d,%d,%d", s->B, s->T, s->V, s->C, s->NH, s->L);
  if (s->llama) snprintf(shape + len, sizeof shape - (size_t)len, ",%d,%d", s->NKV, s->H);
  const char *args[] = {dir, shape, tt, device, precision, s->llama ? "llama" : "gpt", NULL};
  const char *env[] = {blas, omp, NULL};
  /* Lines before "ready" say why the script cannot run ("unavailable: ..."). */
  GT_TRY(bench_peer_start_env("train_step_torch.py", args, env, stdout, &w->peer));
  if (!strcmp(device, "cpu"))
    snprintf(w->setting, sizeof w->setting, "%s, torch.set_num_threads(%d), OPENBLAS_NUM_THREADS=%d%s", precision,
             torch_threads, blas_threads, torch_threads == blas_threads ? " (torch's default)" : "");
  else
    snprintf(w->setting, sizeof w->setting, "%s on %s", precision, device);
  return GT_OK;
}

static gt_status ask(worker *w, const char *cmd, int n, double *vals, int nvals) {
  char line[4096], text[64];
  snprintf(text, sizeof text, "%s %d", cmd, n);
  GT_TRY(bench_peer_ask(w->peer, text, line, sizeof line));
  char *p = line;
  for (int i = 0; i < nvals; i++) {
    char *end;
    vals[i] = strtod(p, &end);
    if (end == p) return gt_errorf(GT_EFORMAT, "unexpected answer from the pytorch worker: %s", line);
    p = end;
  }
  return GT_OK;
}

gt_status bench_torch_start(const char *dir, const bench_torch_shape *shape, int threads, const char *device,
                            const char *precision, bench_torch **out) {
  *out = NULL;
  bench_torch *t = calloc(1, sizeof *t);
  if (!t) return gt_errorf(GT_ENOMEM, "out of memory");
  /* {torch intra-op threads, OpenBLAS threads}; on a GPU, or with one
   * thread, there is only one setting. */
  int settings[BENCH_TORCH_MAX][2] = {{threads, threads}, {1, threads}, {threads, 1}};
  int n = !strcmp(device, "cpu") && threads > 1 ? BENCH_TORCH_MAX : 1;
  for (int i = 0; i < n; i++) {
    gt_status s = spawn(&t->w[t->n], dir, shape, settings[i][0], settings[i][1], device, precision);
    if (s != GT_OK) {
      bench_torch_stop(t);
      return s;
    }
    t->n++;
  }
  *out = t;
  return GT_OK;
}

int bench_torch_settings(const bench_torch *t) { return t->n; }

gt_status bench_torch_losses(bench_torch *t, int i, int n, float *losses) {
  double v[16];
  if (n > 16) return gt_errorf(GT_EINVAL, "at most 16 loss steps");
  GT_TRY(ask(&t->w[i], "losses", n, v, n));
  for (int k = 0; k < n; k++) losses[k] = (float)v[k];
  return GT_OK;
}

gt_status bench_torch_time(bench_torch *t, int i, int n, double *ms, int *busy) {
  bench_cpu_times before, after;
  bench_cpu_times_read(bench_peer_pid(t->w[i].peer), &before);
  GT_TRY(ask(&t->w[i], "time", n, ms, 1));
  bench_cpu_times_read(bench_peer_pid(t->w[i].peer), &after);
  *busy = bench_cpu_times_busy(&before, &after);
  return GT_OK;
}

gt_status bench_torch_threads(bench_torch *t, int i, int *openblas, int *intra) {
  double v[2];
  GT_TRY(ask(&t->w[i], "threads", 0, v, 2));
  *openblas = (int)v[0];
  *intra = (int)v[1];
  return GT_OK;
}

const char *bench_torch_setting(const bench_torch *t, int i) { return t->w[i].setting; }

void bench_torch_stop(bench_torch *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) bench_peer_stop(t->w[i].peer);
  free(t);
}

const char *bench_python(void) {
  const char *py = getenv("GIANT_PYTHON");
  if (py && *py) return py;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}
