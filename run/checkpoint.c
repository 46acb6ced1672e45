/* See checkpoint.h. */
#include "checkpoint.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "giant/engine/plan.h"
#include "ckpt/peers_api.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/init.h"
#include "giant/engine/trainer.h"

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

void run_ckpt_catch_stop(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sa.sa_flags = SA_RESETHAND | SA_RESTART; /* a second signal ends the process at once */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

int run_ckpt_stop_signal(void) { return stop_signal; }

/* The last step the previous run finished, as it recorded (-1: none). */
static int read_progress(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/progress", dir);
  FILE *f = fopen(path, "r");
  int step = -1;
  if (f && fscanf(f, "%d", &step) != 1) step = -1;
  if (f) fclose(f);
  return step;
}

/* Advisory, for the log line after a restart: no fsync. */
static void write_progress(const char *dir, int step) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/progress", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%d\n", step);
  if (fclose(f) == 0) rename(tmp, path);
}

gt_status run_ckpt_start(const run_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **out) {
  *out = NULL;
  if (!a->dir) return GT_OK;
  gt_ckpt_config cc = {.dir = a->dir, .keep = a->keep, .store = job->world_size > 1 ? job->store : NULL};
  GT_TRY(gt_ckpt_create(&cc, tr, loader, out));
  int progress = read_progress(a->dir);
  gt_ckpt_info info;
  gt_status s = gt_ckpt_load(*out, NULL, &info);
  if (s == GT_ENOTFOUND) {
    if (job->rank == 0) printf("checkpoints: none in %s yet; starting at step 0\n", a->dir);
    return GT_OK;
  }
  if (s != GT_OK) return s;
  if (job->rank == 0)
    printf("checkpoints: resumed from %s (step %d, taken at dp=%d,tp=%d,pp=%d%s)%s; steps lost: %d\n", info.path,
           info.step, info.layout.dp, info.layout.tp, info.layout.pp,
           info.zero == 3   ? " with ZeRO-3"
           : info.zero == 2 ? " with ZeRO-2"
           : info.zero1     ? " with ZeRO-1"
                            : "",
           info.fallbacks ? " after passing over newer ones that failed to load" : "",
           progress > info.step ? progress - info.step : 0);
  return GT_OK;
}

gt_status run_ckpt_rebind(const run_ckpt_args *a, gt_job *job, gt_trainer *tr, gt_loader *loader, gt_ckpt **c) {
  *c = NULL;
  if (!a->dir) return GT_OK;
  gt_ckpt_config cc = {.dir = a->dir, .keep = a->keep, .store = job->world_size > 1 ? job->store : NULL};
  return gt_ckpt_create(&cc, tr, loader, c);
}

/* Says when the last save ended, once: the steps between its own and
 * this one are the steps it was in flight, which a failure meanwhile
 * would have lost on top of --ckpt-every (docs/checkpoint-format.md). */
static void log_finished(run_ckpt_args *a, gt_ckpt *c, int step) {
  gt_ckpt_stats st;
  gt_ckpt_get_stats(c, &st);
  if (st.finished < 0 || st.finished == a->logged) return;
  a->logged = st.finished;
  if (st.result == GT_OK)
    printf("checkpoint step-%08d committed at step %d (%d steps in flight)\n", st.finished, step, step - st.finished);
}

gt_status run_ckpt_after_step(run_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead) {
  if (!c) return GT_OK;
  int step = gt_trainer_step_index(tr);
  if (step % a->every == 0) GT_TRY(gt_ckpt_save(c));
  /* After the save: a progress of P means the save at P - P % every had begun. */
  if (lead) write_progress(a->dir, step);
  if (lead) log_finished(a, c, step);
  return GT_OK;
}

void run_ckpt_finish(run_ckpt_args *a, gt_ckpt *c, gt_trainer *tr, bool lead) {
  if (!c) return;
  (void)gt_ckpt_wait(c); /* a failed save was logged; the run itself went well */
  if (lead) log_finished(a, c, gt_trainer_step_index(tr));
}
