/* The DDP subprocess: spawn, talk over pipes, stop. */
#include "bench_ddp.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct bench_ddp {
  pid_t pid;
  FILE *to, *from;
};

gt_status bench_ddp_start(const char *dir, const bench_torch_shape *s, int world, bench_ddp **out) {
  *out = NULL;
  bench_ddp *d = calloc(1, sizeof *d);
  if (!d) return gt_errorf(GT_ENOMEM, "out of memory");
  int in[2], outp[2];
  if (pipe(in) || pipe(outp)) {
    free(d);
    return gt_errorf(GT_EIO, "pipe: %s", strerror(errno));
  }
  fflush(stdout); /* the child must not write this process's buffered output again */
  pid_t pid = fork();
  if (pid < 0) {
    for (int i = 0; i < 2; i++) close(in[i]), close(outp[i]);
    free(d);
    return gt_errorf(GT_EIO, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(outp[1], 1);
    close(in[1]);
    close(outp[0]);
    char shape[128], w[16];
    snprintf(shape, sizeof shape, "%d,%d,%d,%d,%d,%d", s->B, s->T, s->V, s->C, s->NH, s->L);
    snprintf(w, sizeof w, "%d", world);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    const char *py = bench_python();
    execlp(py, py, GIANT_BENCH_DIR "/scaling_ddp.py", dir, shape, w, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(outp[1]);
  d->pid = pid;
  d->to = fdopen(in[1], "w");
  d->from = fdopen(outp[0], "r");
  char line[256];
  if (!fgets(line, sizeof line, d->from) || strncmp(line, "ready", 5) != 0) {
    line[strcspn(line, "\n")] = '\0';
    bench_ddp_stop(d);
    return gt_errorf(GT_EUNSUPPORTED, "the DDP peer did not start (python3 with torch and Gloo?)%s%s",
                     *line ? ": " : "", line);
  }
  *out = d;
  return GT_OK;
}

/* Sends "cmd n" and reads the first line of the answer into line. */
static gt_status ask(bench_ddp *d, const char *cmd, int n, char *line, size_t cap) {
  fprintf(d->to, "%s %d\n", cmd, n);
  fflush(d->to);
  if (!fgets(line, (int)cap, d->from)) return gt_errorf(GT_EIO, "the DDP peer exited during '%s'", cmd);
  return GT_OK;
}

gt_status bench_ddp_losses(bench_ddp *d, int n, float *losses) {
  char line[4096], *p = line;
  if (n > 16) return gt_errorf(GT_EINVAL, "at most 16 loss steps");
  GT_TRY(ask(d, "losses", n, line, sizeof line));
  for (int i = 0; i < n; i++) {
    char *end;
    losses[i] = strtof(p, &end);
    if (end == p) return gt_errorf(GT_EFORMAT, "unexpected answer from the DDP peer: %s", line);
    p = end;
  }
  return GT_OK;
}

gt_status bench_ddp_tune(bench_ddp *d, int n, char *best, size_t cap) {
  char line[512];
  GT_TRY(ask(d, "tune", n, line, sizeof line));
  while (strncmp(line, "best ", 5) != 0) {
    if (strncmp(line, "setting ", 8) != 0)
      return gt_errorf(GT_EFORMAT, "unexpected answer from the DDP peer: %s", line);
    printf("ddp %s", line + 8);
    if (!fgets(line, sizeof line, d->from)) return gt_errorf(GT_EIO, "the DDP peer exited while tuning");
  }
  line[strcspn(line, "\n")] = '\0';
  snprintf(best, cap, "%s", line + 5);
  return GT_OK;
}

gt_status bench_ddp_time(bench_ddp *d, int n, double *ms) {
  char line[256], *end;
  GT_TRY(ask(d, "time", n, line, sizeof line));
  *ms = strtod(line, &end);
  if (end == line) return gt_errorf(GT_EFORMAT, "unexpected answer from the DDP peer: %s", line);
  return GT_OK;
}

void bench_ddp_stop(bench_ddp *d) {
  if (!d) return;
  if (d->to) fclose(d->to); /* EOF ends the peer's loop, and it ends its workers */
  if (d->from) fclose(d->from);
  for (int i = 0; d->pid > 0 && i < 100; i++) {
    if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
      d->pid = 0;
    else
      usleep(100000);
  }
  if (d->pid > 0) {
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
  }
  free(d);
}
