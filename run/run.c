/* The job as a library (giant/run.h): the handle, joining the job, the
 * data, and how the run ended. Planning, building and resuming are
 * start.c; the training loop is train.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/fault/fault.h"
#include "giant/protocol.h"
#include "run_internal.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/dist.h"
#include "giant/engine/init.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "resilience/detect/failslow.h"

void run_report(const gt_run *r, const char *what, gt_status s) {
  fprintf(stderr, "%s: %s: %s (%s)\n", r->o.program, what, gt_last_error(), gt_status_name(s));
  if (s == GT_ENOMEM && strstr(gt_last_error(), "device memory budget"))
    fprintf(stderr,
            "%s: --offload W keeps the master weights, gradients and optimizer state in host memory "
            "and only W layers' weights on the device\n",
            r->o.program);
  if (s == GT_ENOMEM && strstr(gt_last_error(), "host memory budget"))
    fprintf(stderr,
            "%s: --offload-optimizer disk:DIR keeps the optimizer state in a file in DIR, streamed "
            "through a little host memory\n",
            r->o.program);
}

gt_status run_fail(gt_run *r, int code, const char *what, gt_status s) {
  run_report(r, what, s);
  r->rc = code;
  return s;
}

gt_status gt_run_open(const gt_run_options *o, gt_run **out) {
  gt_run *r = calloc(1, sizeof *r);
  *out = r;
  if (!r) return gt_errorf(GT_ENOMEM, "out of memory");
  r->o = *o;
  if (!r->o.program) r->o.program = "run";
  r->rsh.name = r->o.program; /* the ladder logs under it with or without --reshape */
  r->rc = GT_RUN_EXIT_FAILED;
  r->schedule = GT_PP_1F1B;
  gt_backend_config bc;
  gt_status s = gt_optim_parse(o->optimizer, &r->kind); /* gt_run_parse checked them */
  if (s == GT_OK) s = gt_precision_parse(o->precision, &r->precision);
  if (s == GT_OK) s = gt_recompute_parse(o->recompute ? o->recompute : "none", &r->recompute);
  if (s == GT_OK) s = gt_pp_parse(o->schedule, &r->schedule);
  if (s == GT_OK) s = gt_device_parse(o->device, &bc);
  if (s == GT_OK) s = run_ladder_parse(o->ladder, &r->ladder);
  if (s != GT_OK) return run_fail(r, GT_RUN_EXIT_USAGE, "the options", s);
  /* Before joining the job: every worker fails alike, and giantrun does
   * not restart a configuration error. */
  if ((s = gt_fault_check_env()) != GT_OK) return run_fail(r, GT_RUN_EXIT_USAGE, "starting", s);
  if (o->offload_optimizer && !strncmp(o->offload_optimizer, "disk:", 5)) r->state_dir = o->offload_optimizer + 5;
  bc.num_threads = o->threads;
  bc.device_mem_limit = (size_t)o->device_mem_mib << 20;
  bc.host_mem_limit = (size_t)o->host_mem_mib << 20;
  if ((s = gt_init(&r->job)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "joining the job", s);
  r->lead = r->job->rank == 0;
  /* A worker giantrun restarted alone joins the running job (--reshape):
   * it builds no layout of its own and takes its state from the others. */
  const char *env_join = getenv(GT_ENV_JOIN);
  r->joining = o->reshape && env_join && !strcmp(env_join, "1") && r->job->world_size > 1;
  if ((s = gt_backend_create(&bc, &r->be)) != GT_OK) return run_fail(r, GT_RUN_EXIT_FAILED, "starting the backend", s);
  return GT_OK;
}

gt_status gt_run_prepare(gt_run *r, gt_status (*prepare)(const gt_run_options *o, void *user), void *user) {
  if (!r || r->joining || !prepare) return GT_OK;
  gt_status s = r->job->rank == 0 ? prepare(&r->o, user) : GT_OK;
  if (s != GT_OK) return run_fail(r, run_input_code(s), "preparing data", s);
  if (r->job->world_size == 1) return GT_OK;
  /* The others wait at a barrier; a failed rank 0 leaves them to time
   * out, unless giantrun stops them first (it does: input errors end the job). */
  s = gt_store_barrier(r->job->store, "gt-run-data", r->job->rank, r->job->world_size, 600000);
  if (s != GT_OK) s = gt_error_context(s, "waiting for rank 0 to prepare %s", r->o.data);
  return s == GT_OK ? GT_OK : run_fail(r, GT_RUN_EXIT_FAILED, "preparing data", s);
}

gt_status gt_run_set_source(gt_run *r, const gt_loader_source *src) {
  if (!r || !src) return gt_errorf(GT_EINVAL, "gt_run_set_source: NULL run or source");
  if (r->started) return gt_errorf(GT_ESTATE, "gt_run_set_source: call it before gt_run_start");
  r->source = src;
  return GT_OK;
}

gt_model *gt_run_trained_model(gt_run *r) { return r && r->trained ? r->m : NULL; }

int gt_run_rank(const gt_run *r) { return r && r->job ? r->job->rank : 0; }

int gt_run_pipeline_stages(const gt_run *r) { return r && r->started ? r->plan.layout.pp : 1; }

int gt_run_exit_status(gt_run *r, gt_status s) {
  if (!r) return GT_RUN_EXIT_FAILED;
  if (s != GT_OK && r->rc == GT_RUN_EXIT_OK) r->rc = GT_RUN_EXIT_FAILED; /* a failure after the run ended well */
  return r->rc;
}

void gt_run_destroy(gt_run *r) {
  if (!r) return;
  if (r->job) gt_job_done(r->job); /* what is left (threads, saves) is winding down, not a stall */
  run_progress_close(r->progress); /* before the job: it writes on the job's etcd client */
  run_reshape_destroy(&r->rsh);
  run_rebalance_destroy(r->rb);
  free(r->shares);
  gt_failslow_destroy(r->failslow);
  run_observe_close(&r->obs);
  run_eval_close(&r->eval);
  gt_ckpt_destroy(r->ckpt);
  gt_trainer_destroy(r->tr);
  gt_model_destroy(r->m);
  gt_loader_close(r->loader);
  gt_dist_destroy(r->dist);
  gt_job_destroy(r->job);
  gt_backend_destroy(r->be);
  free(r);
}
