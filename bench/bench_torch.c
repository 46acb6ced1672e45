/* The PyTorch subprocess: export, spawn, talk over pipes. */
#include "bench_torch.h"
#include "giant/engine/model.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct worker {
  pid_t pid;
  FILE *to, *from;
  char setting[96];
} worker;

struct bench_torch {
  worker w;
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

static void worker_stop(worker *w);

static gt_status spawn(worker *w, const char *dir, const bench_torch_shape *s, int torch_threads, int blas_threads,
                       const char *device, const char *precision) {
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) return gt_errorf(GT_EIO, "fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    char blas[16], tt[16], shape[128];
    snprintf(blas, sizeof blas, "%d", blas_threads);
    snprintf(tt, sizeof tt, "%d", torch_threads);
    snprintf(shape, sizeof shape, "%d,%d,%d,%d,%d,%d", s->B, s->T, s->V, s->C, s->NH, s->L);
    setenv("OPENBLAS_NUM_THREADS", blas, 1);
    setenv("OMP_NUM_THREADS", tt, 1);
    const char *py = bench_python();
    execlp(py, py, GIANT_BENCH_DIR "/train_step_torch.py", dir, shape, tt, device, precision, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  w->pid = pid;
  w->to = fdopen(in[1], "w");
  w->from = fdopen(out[0], "r");
  char line[256];
  if (!fgets(line, sizeof line, w->from)) {
    worker_stop(w);
    return gt_errorf(GT_EUNSUPPORTED, "python3 with torch did not start (is python3-torch installed?)");
  }
  if (strncmp(line, "ready", 5) != 0) {
    /* The worker says why it cannot run, e.g. "unavailable: ..." */
    line[strcspn(line, "\n")] = '\0';
    worker_stop(w);
    return gt_errorf(GT_EUNSUPPORTED, "the pytorch worker cannot run: %s", line);
  }
  if (!strcmp(device, "cpu"))
    snprintf(w->setting, sizeof w->setting, "%s, torch.set_num_threads(%d), OPENBLAS_NUM_THREADS=%d", precision,
             torch_threads, blas_threads);
  else
    snprintf(w->setting, sizeof w->setting, "%s on %s", precision, device);
  return GT_OK;
}

static void worker_stop(worker *w) {
  if (w->to) fclose(w->to); /* EOF ends the worker's loop */
  if (w->from) fclose(w->from);
  if (w->pid > 0) {
    for (int i = 0; i < 50; i++) {
      if (waitpid(w->pid, NULL, WNOHANG) == w->pid) {
        w->pid = 0;
        break;
      }
      usleep(100000);
    }
    if (w->pid > 0) {
      kill(w->pid, SIGKILL);
      waitpid(w->pid, NULL, 0);
    }
  }
  memset(w, 0, sizeof *w);
}

static gt_status ask(worker *w, const char *cmd, int n, double *vals, int nvals) {
  fprintf(w->to, "%s %d\n", cmd, n);
  fflush(w->to);
  char line[4096];
  if (!fgets(line, sizeof line, w->from)) return gt_errorf(GT_EIO, "the pytorch worker exited");
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
  worker own = {0};
  gt_status s = spawn(&t->w, dir, shape, 1, threads, device, precision);
  if (s != GT_OK) {
    free(t);
    return s;
  }
  /* On the CPU, torch's own pool as a contender; keep whichever is faster. */
  if (!strcmp(device, "cpu") && threads > 1 && spawn(&own, dir, shape, threads, 1, device, precision) == GT_OK) {
    double a, b;
    GT_TRY(ask(&t->w, "time", 2, &a, 1));
    GT_TRY(ask(&own, "time", 2, &b, 1));
    GT_TRY(ask(&t->w, "time", 2, &a, 1));
    GT_TRY(ask(&own, "time", 2, &b, 1));
    printf("pytorch thread settings: one pool (BLAS threads) %.1f ms/step, torch pool %.1f ms/step\n", a, b);
    if (b < a) {
      worker tmp = t->w;
      t->w = own;
      own = tmp;
    }
    worker_stop(&own);
    GT_TRY(ask(&t->w, "reset", 0, NULL, 0));
  }
  *out = t;
  return GT_OK;
}

gt_status bench_torch_losses(bench_torch *t, int n, float *losses) {
  double v[16];
  if (n > 16) return gt_errorf(GT_EINVAL, "at most 16 loss steps");
  GT_TRY(ask(&t->w, "losses", n, v, n));
  for (int i = 0; i < n; i++) losses[i] = (float)v[i];
  return GT_OK;
}

gt_status bench_torch_time(bench_torch *t, int n, double *ms) { return ask(&t->w, "time", n, ms, 1); }

const char *bench_torch_setting(const bench_torch *t) { return t->w.setting; }

void bench_torch_stop(bench_torch *t) {
  if (!t) return;
  worker_stop(&t->w);
  free(t);
}

const char *bench_python(void) {
  const char *py = getenv("GIANT_PYTHON");
  if (py && *py) return py;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}
