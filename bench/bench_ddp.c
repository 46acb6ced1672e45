/* The DDP peer: scaling_ddp.py through bench_peer. */
#include "bench_ddp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peer.h"

struct bench_ddp {
  bench_peer *peer;
};

gt_status bench_ddp_start(const char *dir, const bench_torch_shape *s, int world, bench_ddp **out) {
  *out = NULL;
  bench_ddp *d = calloc(1, sizeof *d);
  if (!d) return gt_errorf(GT_ENOMEM, "out of memory");
  char shape[128], w[16];
  snprintf(shape, sizeof shape, "%d,%d,%d,%d,%d,%d", s->B, s->T, s->V, s->C, s->NH, s->L);
  snprintf(w, sizeof w, "%d", world);
  const char *args[] = {dir, shape, w, NULL};
  const char *env[] = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", NULL};
  fflush(stdout); /* the child must not write this process's buffered output again */
  gt_status st = bench_peer_start_env("scaling_ddp.py", args, env, stdout, &d->peer);
  if (st != GT_OK) {
    free(d);
    return st;
  }
  *out = d;
  return GT_OK;
}

/* Sends "cmd n" and reads the first line of the answer into line. */
static gt_status ask(bench_ddp *d, const char *cmd, int n, char *line, size_t cap) {
  char text[64];
  snprintf(text, sizeof text, "%s %d", cmd, n);
  return bench_peer_ask(d->peer, text, line, cap);
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
    printf("ddp %s\n", line + 8);
    GT_TRY(bench_peer_read(d->peer, line, sizeof line));
  }
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
  bench_peer_stop(d->peer); /* EOF ends the peer's loop, and it ends its workers */
  free(d);
}
