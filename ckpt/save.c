/* The checkpointer and its saves: a snapshot on the caller's thread (on the
 * CPU backend its copy is deferred to the writer, below), then a
 * background thread that hashes and writes this rank's shard, reports it
 * through the store, and on rank 0 gathers every rank's report and commits
 * the checkpoint by renaming its manifest into place. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "giant/engine/dist.h"
#include "optim/fault/fault.h"
#include "giant/log.h"
#include "ckpt/peers_api.h"
#include "core/model/model_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/comm.h"
#include "giant/engine/grid.h"
#include "giant/engine/model.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"
#include "parallel/dist_engine.h"

/* The model's first write after a save waits here for the snapshot copy,
 * which the writer thread makes while the step computes. */
static void wait_copied(void *ctx) {
  gt_ckpt *c = ctx;
  pthread_mutex_lock(&c->mu);
  if (c->copying) {
    double t0 = gt_now();
    while (c->copying) pthread_cond_wait(&c->copied, &c->mu);
    c->stall_s += gt_now() - t0;
  }
  pthread_mutex_unlock(&c->mu);
}

static void copy_done(gt_ckpt *c) {
  pthread_mutex_lock(&c->mu);
  c->copying = false;
  pthread_cond_broadcast(&c->copied);
  pthread_mutex_unlock(&c->mu);
}

gt_status gt_ckpt_create(const gt_ckpt_config *cfg, gt_trainer *tr, gt_loader *loader, gt_ckpt **out) {
  *out = NULL;
  if (!cfg || !cfg->dir || !*cfg->dir) return gt_errorf(GT_EINVAL, "checkpoints need a directory (--ckpt-dir)");
  if (cfg->keep < 0) return gt_errorf(GT_EINVAL, "checkpoints to keep must be >= 0, got %d", cfg->keep);
  if (cfg->busy != GT_CKPT_BUSY_WAIT && cfg->busy != GT_CKPT_BUSY_SKIP)
    return gt_errorf(GT_EINVAL, "unknown checkpoint busy policy %d", (int)cfg->busy);
  if (cfg->chunk_bytes && !ck_chunk_valid(cfg->chunk_bytes))
    return gt_errorf(GT_EINVAL, "checkpoint chunk_bytes %llu must be a multiple of 64 in [64, 1 GiB] (0: 4 MiB)",
                     (unsigned long long)cfg->chunk_bytes);
  gt_dist *dist = gt_trainer_dist(tr);
  if (dist && gt_dist_plan(dist)->world > 1 && !cfg->store)
    return gt_errorf(GT_EINVAL, "a distributed job's checkpoints need the job's store in gt_ckpt_config");
  gt_ckpt *c = calloc(1, sizeof *c);
  if (!c || !(c->root = strdup(cfg->dir))) {
    free(c);
    return gt_errorf(GT_ENOMEM, "out of memory creating a checkpointer");
  }
  c->cfg = *cfg;
  c->cfg.dir = c->root;
  if (c->cfg.timeout_ms <= 0) c->cfg.timeout_ms = 300000;
  if (!c->cfg.chunk_bytes) c->cfg.chunk_bytes = GT_CKPT_CHUNK_DEFAULT;
  c->tr = tr;
  c->m = gt_trainer_model(tr);
  c->opt = gt_trainer_optimizer(tr);
  c->loader = loader;
  c->dist = dist;
  c->plan = dist ? *gt_dist_plan(dist) : (gt_plan){.layout = {1, 1, 1}, .world = 1, .chunks = 1};
  snprintf(c->keys, sizeof c->keys, "%s/ckpt", dist ? gt_dist_generation(dist) : "local");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->copied, NULL);
  c->finished = -1;
  gt_fault_plan faults; /* a bad GT_FAULT stopped the trainer's creation */
  if (gt_fault_from_env(c->plan.rank, &faults) == GT_OK) c->save_delay = gt_fault_save_delay(&faults);
  c->nparams = gt_model_buffer_floats(c->m);
  gt_optimizer_range(c->opt, &c->lo, &c->hi);
  c->nstates = gt_optimizer_num_states(c->opt);
  /* The backend's host memory: pinned on a GPU, so snapshots copy at full speed. */
  c->be = gt_model_backend(c->m);
  c->state_fd = -1;
  gt_status s = gt_backend_host_alloc(c->be, (c->nparams ? c->nparams : 1) * sizeof(float), (void **)&c->params);
  if (gt_optimizer_on_disk(c->opt)) {
    /* State on disk may not fit host memory: its snapshots stay on disk. */
    if (s == GT_OK) s = gt_optimizer_state_scratch(c->opt, &c->state_fd);
    size_t quarter = (c->hi - c->lo) / 4 > 1024 ? (c->hi - c->lo) / 4 : 1024;
    c->staging_floats = quarter < ((size_t)1 << 20) ? quarter : (size_t)1 << 20;
    if (s == GT_OK) s = gt_backend_host_alloc(c->be, c->staging_floats * sizeof(float), (void **)&c->staging);
  }
  for (int k = 0; k < c->nstates && s == GT_OK && c->state_fd < 0; k++)
    s = gt_backend_host_alloc(c->be, (c->hi - c->lo + 1) * sizeof(float), (void **)&c->state[k]);
  if (s != GT_OK) {
    s = gt_error_context(s,
                         "the checkpoint's snapshot buffers (%zu floats of parameters, %d x %zu of optimizer "
                         "state)",
                         c->nparams, c->nstates, c->hi - c->lo);
    gt_ckpt_destroy(c);
    return s;
  }
  /* Touch every page now, so that no save's stall pays the page faults. */
  memset(c->params, 0, (c->nparams ? c->nparams : 1) * sizeof(float));
  for (int k = 0; k < c->nstates && c->state[k]; k++) memset(c->state[k], 0, (c->hi - c->lo + 1) * sizeof(float));
  if (gt_backend_kind(c->be) == GT_DEVICE_CPU) {
    s = gt_model_add_reader(c->m, wait_copied, c);
    if (s != GT_OK) {
      gt_ckpt_destroy(c);
      return s;
    }
    c->deferred_copy = true;
  }
  *out = c;
  return GT_OK;
}

void gt_ckpt_destroy(gt_ckpt *c) {
  if (!c) return;
  gt_ckpt_wait(c);
  if (c->deferred_copy) gt_model_remove_reader(c->m, wait_copied, c);
  pthread_cond_destroy(&c->copied);
  pthread_mutex_destroy(&c->mu);
  ck_manifest_free(&c->part);
  ck_manifest_free(&c->user);
  ck_manifest_free(&c->loaded);
  free(c->src);
  free(c->src_buf);
  free(c->src_at);
  if (c->params) gt_backend_host_free(c->be, c->params);
  for (int k = 0; k < 2; k++)
    if (c->state[k]) gt_backend_host_free(c->be, c->state[k]);
  if (c->staging) gt_backend_host_free(c->be, c->staging);
  if (c->state_fd >= 0) close(c->state_fd);
  free(c->root);
  free(c);
}

gt_status gt_ckpt_put_blob(gt_ckpt *c, const char *name, const void *bytes, size_t len) {
  if (!name || !*name || strlen(name) >= CK_NAME - 8)
    return gt_errorf(GT_EINVAL, "a checkpoint blob needs a name of 1 to %d characters", CK_NAME - 9);
  for (int i = 0; i < c->user.nblobs; i++) { /* replace: drop the old one */
    if (strcmp(c->user.blobs[i].name, name)) continue;
    free(c->user.blobs[i].bytes);
    c->user.blobs[i] = c->user.blobs[--c->user.nblobs];
    break;
  }
  return ck_manifest_add_blob(&c->user, name, bytes, len);
}

gt_status gt_ckpt_get_blob(const gt_ckpt *c, const char *name, const void **bytes, size_t *len) {
  char key[CK_NAME + 8];
  snprintf(key, sizeof key, "user/%s", name);
  const ck_blob *b = ck_manifest_blob(&c->loaded, key);
  if (!b) return gt_errorf(GT_ENOTFOUND, "the loaded checkpoint has no blob named %s", name);
  *bytes = b->bytes;
  *len = b->len;
  return GT_OK;
}

/* This rank's shard: every slice it writes, hashed as it goes. */
static gt_status write_shard(gt_ckpt *c, const char *dir) {
  if (c->part.nfiles == 0) return GT_OK;
  gt_status s = ck_write_shard(dir, c->part.files[0], &c->part, c->src);
  return s == GT_OK ? s : gt_error_context(s, "checkpoint shard");
}

/* A rank's report: 'K' and its part of the manifest, or 'F' and why not. */
static gt_status report(gt_ckpt *c, gt_status st) {
  ck_buf b = {0};
  if (st == GT_OK) {
    ck_put(&b, "K", 1);
    st = ck_manifest_encode(&c->part, &b);
  }
  if (st != GT_OK) {
    b.len = 0;
    ck_put(&b, "F", 1);
    ck_put(&b, gt_last_error(), strlen(gt_last_error()));
  }
  char key[256];
  snprintf(key, sizeof key, "%s/%lld/%d", c->keys, (long long)c->part.step, c->plan.rank);
  gt_status s = b.oom ? gt_errorf(GT_ENOMEM, "out of memory") : gt_store_set(c->cfg.store, key, b.p, b.len);
  ck_buf_free(&b);
  return st != GT_OK ? st : s;
}

/* Rank 0: every other rank's part, merged into `all`. */
static gt_status gather(gt_ckpt *c, ck_manifest *all) {
  gt_status first = GT_OK;
  for (int r = 1; r < c->plan.world; r++) {
    char key[256];
    snprintf(key, sizeof key, "%s/%lld/%d", c->keys, (long long)c->part.step, r);
    void *v = NULL;
    size_t len = 0;
    /* In slices, so that gt_ckpt_abandon ends the wait for a rank that is gone. */
    double end = gt_now() + c->cfg.timeout_ms / 1000.0;
    gt_status s;
    for (;;) {
      s = gt_store_get(c->cfg.store, key, &v, &len, 200);
      if (s != GT_ETIMEDOUT) break;
      if (atomic_load(&c->abandoned)) {
        s = gt_errorf(GT_ECANCELED, "the save was abandoned (gt_ckpt_abandon): rank %d did not report", r);
        break;
      }
      if (gt_now() >= end) break;
    }
    if (s != GT_OK)
      s = gt_error_context(s, "waiting for rank %d's checkpoint shard", r);
    else
      gt_store_del(c->cfg.store, key);
    ck_manifest part;
    if (s == GT_OK && len > 0 && ((char *)v)[0] == 'K') {
      s = ck_manifest_decode((unsigned char *)v + 1, len - 1, "a rank's checkpoint report", &part);
      if (s == GT_OK) {
        s = ck_manifest_merge(all, &part);
        ck_manifest_free(&part);
      }
    } else if (s == GT_OK) {
      s = gt_errorf(GT_EIO, "rank %d could not write its shard: %.*s", r, (int)(len ? len - 1 : 0), (char *)v + 1);
    }
    free(v);
    if (s != GT_OK && first == GT_OK) first = s; /* keep reading: every report is deleted */
  }
  return first;
}

static gt_status commit(gt_ckpt *c, const char *dir) {
  ck_manifest all = {.step = c->part.step, .chunk = c->part.chunk};
  gt_status s = ck_manifest_merge(&all, &c->part);
  if (s == GT_OK && c->plan.world > 1) s = gather(c, &all);
  if (s == GT_OK) s = ck_manifest_write(dir, &all); /* the commit point */
  ck_manifest_free(&all);
  /* Committed: `latest` and retention are housekeeping (loads scan for
   * manifests), so their failure is a warning, not a lost save. */
  if (s == GT_OK && ck_after_commit(c->root, (int)c->part.step, c->cfg.keep) != GT_OK)
    gt_warn("checkpoint %s committed, but: %s", dir, gt_last_error());
  return s;
}

static void *save_thread(void *arg) {
  gt_ckpt *c = arg;
  double t0 = gt_now();
  gt_status copied = c->deferred_copy ? ck_snapshot_copy(c) : GT_OK;
  copy_done(c);
  if (c->save_delay > 0) { /* GT_FAULT slowsave: a slow filesystem */
    struct timespec ts = {(time_t)c->save_delay, (long)((c->save_delay - (double)(time_t)c->save_delay) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
  }
  char dir[4150];
  ck_step_dir(c->root, (int)c->part.step, dir, sizeof dir);
  gt_status s = copied;
  if (s == GT_OK) s = ck_mkdir(c->root);
  if (s == GT_OK) s = ck_mkdir(dir);
  if (s == GT_OK) s = write_shard(c, dir);
  if (c->plan.world > 1 && c->plan.rank != 0)
    s = report(c, s);
  else if (s == GT_OK)
    s = commit(c, dir);
  else if (c->plan.world > 1) { /* clear the others' reports */
    char why[1024];
    snprintf(why, sizeof why, "%s", gt_last_error());
    ck_manifest none = {0};
    (void)gather(c, &none);
    ck_manifest_free(&none);
    s = gt_errorf(s, "%s", why);
  }
  if (s == GT_OK && c->plan.rank == 0)
    gt_info("checkpoint %s committed in %.2f s", dir, gt_now() - t0);
  else if (s != GT_OK)
    gt_warn("checkpoint at step %lld not saved: %s; training goes on, the previous checkpoint stays",
            (long long)c->part.step, gt_last_error());
  pthread_mutex_lock(&c->mu);
  if (s != GT_OK) snprintf(c->why, sizeof c->why, "%s", gt_last_error());
  c->result = s;
  c->finished = c->part.step;
  c->busy = false;
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void gt_ckpt_get_stats(gt_ckpt *c, gt_ckpt_stats *out) {
  pthread_mutex_lock(&c->mu);
  *out = (gt_ckpt_stats){.writing = c->joinable && c->busy ? (int)c->part.step : -1,
                         .finished = (int)c->finished,
                         .result = c->finished >= 0 ? c->result : GT_OK,
                         .skipped = c->skipped,
                         .stall_s = c->stall_s};
  pthread_mutex_unlock(&c->mu);
}

void gt_ckpt_abandon(gt_ckpt *c) {
  if (c) atomic_store(&c->abandoned, 1);
}

gt_status gt_ckpt_wait(gt_ckpt *c) {
  if (!c->joinable) return GT_OK;
  pthread_join(c->thread, NULL);
  c->joinable = false;
  if (c->result != GT_OK)
    return gt_errorf(c->result, "checkpoint at step %lld was not saved: %s", (long long)c->part.step, c->why);
  return GT_OK;
}

/* Under the skip policy, whether any rank's writer is still busy: one
 * all-reduce of a flag over the world, so that every rank skips the same
 * saves. Were each rank to decide alone, a rank that saved would report a
 * shard no commit gathers, or rank 0 would wait for reports from ranks
 * that skipped. */
static gt_status busy_anywhere(gt_ckpt *c, bool *busy) {
  pthread_mutex_lock(&c->mu);
  float flag = c->joinable && c->busy ? 1.0f : 0.0f;
  pthread_mutex_unlock(&c->mu);
  if (c->dist && c->plan.world > 1) {
    gt_status s = gt_comm_allreduce(gt_grid_world(gt_dist_grid(c->dist)), &flag, 1, GT_F32, GT_COMM_SUM);
    if (s != GT_OK)
      return gt_error_context(s, "agreeing whether to skip the checkpoint at step %d", gt_trainer_step_index(c->tr));
  }
  *busy = flag > 0;
  return GT_OK;
}

static gt_status save(gt_ckpt *c);

/* The time spent here, and in the model's wait for a deferred snapshot
 * copy, is what saving costs the training loop: gt_ckpt_stats.stall_s. */
gt_status gt_ckpt_save(gt_ckpt *c) {
  double t0 = gt_now();
  gt_status s = save(c);
  pthread_mutex_lock(&c->mu);
  c->stall_s += gt_now() - t0;
  pthread_mutex_unlock(&c->mu);
  return s;
}

static gt_status save(gt_ckpt *c) {
  /* A delayed update held aside is applied first, at every save, whether
   * or not it is skipped below (a skip depends on timing): the checkpoint
   * then holds all there is, and a run resumed from it goes on exactly as
   * the run that saved it. */
  GT_TRY(gt_trainer_flush(c->tr));
  if (c->cfg.busy == GT_CKPT_BUSY_SKIP) {
    bool busy = false;
    GT_TRY(busy_anywhere(c, &busy));
    if (busy) {
      c->skipped++;
      gt_info("checkpoint at step %d skipped: the one at step %lld is still being written on some rank",
              gt_trainer_step_index(c->tr), (long long)c->part.step);
      return GT_OK;
    }
  }
  if (c->joinable) (void)gt_ckpt_wait(c); /* a failure was logged by the writer */
  /* Rewriting a committed checkpoint's shards would leave its manifest
   * describing bytes that changed under it until the new one commits. */
  char dir[4150], manifest[4200];
  ck_step_dir(c->root, gt_trainer_step_index(c->tr), dir, sizeof dir);
  snprintf(manifest, sizeof manifest, "%s/%s", dir, CK_MANIFEST);
  if (access(manifest, F_OK) == 0) {
    gt_info("checkpoint %s exists already; not saving it again", dir);
    return GT_OK;
  }
  GT_TRY(ck_snapshot(c));
  c->busy = true;
  c->copying = c->deferred_copy;
  if (pthread_create(&c->thread, NULL, save_thread, c) != 0) {
    c->busy = false;
    c->copying = false;
    return gt_errorf(GT_EIO, "cannot start the checkpoint writer thread");
  }
  c->joinable = true;
  return c->cfg.sync ? gt_ckpt_wait(c) : GT_OK;
}
