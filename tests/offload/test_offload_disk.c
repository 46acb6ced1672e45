/* The disk tier of the optimizer state (optim/disk_state.c) against the
 * state in memory: the same training, bit for bit.
 *
 * A 6-layer GPT, offloaded (window 2), trains 20 steps under a host memory
 * budget that holds its weights and gradients but not its AdamW state.
 * With the state in memory it fails at start with the budget's message;
 * with the state on disk, staged a few KiB at a time (so every update
 * streams many chunks), it trains inside the budget and ends with the same
 * losses, parameters and AdamW moments as the run in memory without a
 * budget: in fp32 and bf16, at one process, updating layer by layer, and
 * at dp=2 with ZeRO-1 (each rank's shard on disk). A checkpoint of state
 * on disk loads into state in memory, and back; and one is saved and
 * resumed under a budget the state does not fit, its snapshot kept on disk.
 *
 * Bad directories fail when the optimizer is created: missing, a file, and
 * (as root, on a tmpfs mounted here) full or read-only. The full and
 * read-only ones are a ctest test of their own (test_offload_disk_full,
 * argv[1] full), skipped (77) without root, so that the rest shows as
 * passed there. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>

#include "common/gt_test.h"
#include "localkit/ranks.h"
#include "examples/gpt/gpt.h"
#include "giant/ckpt.h"
#include "giant/engine/dist.h"
#include "giant/engine/plan.h"
#include "parallel/train_result.h"
#include "core/backend_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/optimizer_engine.h"

enum { V = 64, T = 8, C = 32, NH = 4, L = 6, ROWS = 2, M = 2, STEPS = 20, WINDOW = 2, MID = 10 };

/* A run (20 steps of a toy GPT in one or two forked ranks, its optimizer
 * state in memory or on disk) takes ~0.2 s, a few seconds on loaded cores
 * under ASan: 240 s is > 50x, a bound only on a hung rank. */
#define RUN_TIMEOUT_S 240
#define STAGE_BYTES (3 * 2 * 1024 * sizeof(float)) /* the least: chunks of 1024 floats */

static char tmpdir[64];

typedef struct run_cfg {
  const char *layout; /* NULL: one process */
  bool zero1, per_layer, on_disk;
  gt_precision precision;
  size_t host_limit; /* 0: none */
  const char *ckpt;  /* save at the end here, then load it into a trainer with the state elsewhere */
  const char *mid;   /* save at step MID here, as training goes on (the copy made during the next step), */
  bool resume;       /* or resume from it there and train steps MID..STEPS */
  /* out (shared) */
  gt_status status;
  char message[600];
  size_t host_peak, weights_bytes, state_bytes;
  train_result *p, *m, *v;
} run_cfg;

/* A second trainer of the same model, the state where the first's is not,
 * loads the checkpoint: its state must read back the same. */
static void reload(gt_model *m, gt_trainer *tr, const gt_trainer_config *tc, const run_cfg *cfg) {
  gt_trainer_config tc2 = *tc;
  tc2.optim.state_dir = cfg->on_disk ? NULL : tmpdir;
  gt_trainer *t2;
  CHECK_OK(gt_trainer_create(m, &tc2, &t2));
  gt_ckpt *c;
  CHECK_OK(gt_ckpt_create(&(gt_ckpt_config){.dir = cfg->ckpt, .sync = true}, t2, NULL, &c));
  CHECK_OK(gt_ckpt_load(c, NULL, NULL));
  gt_ckpt_destroy(c);
  gt_optimizer *a = gt_trainer_optimizer(tr), *b = gt_trainer_optimizer(t2);
  CHECK(gt_optimizer_on_disk(b) != gt_optimizer_on_disk(a));
  CHECK(gt_optimizer_steps(b) == gt_optimizer_steps(a));
  size_t lo, hi;
  gt_optimizer_range(a, &lo, &hi);
  float *x = malloc((hi - lo) * sizeof *x), *y = malloc((hi - lo) * sizeof *y);
  CHECK(x && y);
  for (int k = 0; k < 2; k++) {
    CHECK_OK(gt_optimizer_read_state(a, k, 0, hi - lo, x));
    CHECK_OK(gt_optimizer_read_state(b, k, 0, hi - lo, y));
    CHECK(memcmp(x, y, (hi - lo) * sizeof *x) == 0);
  }
  free(x);
  free(y);
  gt_trainer_destroy(t2);
}

static int train(int rank, int world, void *arg) {
  (void)world;
  run_cfg *cfg = arg;
  gt_backend *be;
  CHECK_OK(gt_backend_create(
      &(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1, .host_mem_limit = cfg->host_limit}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist(&(gt_plan_config){.world = world, .rank = rank, .layout = cfg->layout, .zero1 = cfg->zero1}, "gen0",
                  &store, &plan, &dist);
  int rows = ROWS / plan.layout.dp, row0 = plan.me.dp * rows;
  gt_model *m;
  CHECK_OK(
      gt_model_create(be, &(gt_model_config){.B_max = rows, .T_max = T, .seed = 42, .offload_window = WINDOW}, &m));
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(m, &mp));
  }
  CHECK_OK(
      gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = L, .tie_weights = true}));
  CHECK_OK(gt_model_build(m));
  if (rank == 0) {
    cfg->weights_bytes = gt_backend_host_mem(be).in_use;
    cfg->state_bytes = 2 * gt_model_buffer_floats(m) * sizeof(float);
  }
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = cfg->per_layer ? 0.0f : 1.0f,
                          .grad_accum = M,
                          .dist = dist,
                          .precision = cfg->precision,
                          .schedule = (gt_lr_schedule){3e-3f, 3e-4f, 2, STEPS},
                          .update_per_layer = cfg->per_layer};
  tc.optim.state_dir = cfg->on_disk ? tmpdir : NULL;
  tc.optim.state_stage_bytes = STAGE_BYTES;
  gt_trainer *tr = NULL;
  gt_status s = gt_trainer_create(m, &tc, &tr);
  gt_ckpt *mid = NULL;
  if (s == GT_OK && cfg->mid) s = gt_ckpt_create(&(gt_ckpt_config){.dir = cfg->mid}, tr, NULL, &mid);
  if (s == GT_OK && cfg->resume) s = gt_ckpt_load(mid, NULL, NULL);
  int32_t in[M][ROWS * T], tg[M][ROWS * T];
  gt_batch b[M];
  for (int step = s == GT_OK ? gt_trainer_step_index(tr) : 0; s == GT_OK && step < STEPS; step++) {
    if (mid && !cfg->resume && step == MID) s = gt_ckpt_save(mid);
    for (int k = 0; s == GT_OK && k < M; k++) {
      train_batch_for(step, k, V, T, ROWS, in[k], tg[k]);
      b[k] = (gt_batch){.B = rows, .T = T, .inputs = in[k] + row0 * T, .targets = tg[k] + row0 * T};
    }
    gt_step_stats st;
    s = gt_trainer_step_batches(tr, b, M, &st);
    if (s == GT_OK && rank == 0) {
      cfg->p->losses[step] = st.loss;
      cfg->p->norms[step] = st.grad_norm;
    }
  }
  if (mid && s == GT_OK) s = gt_ckpt_wait(mid);
  if (rank == 0) {
    cfg->status = s;
    if (s != GT_OK) snprintf(cfg->message, sizeof cfg->message, "%s", gt_last_error());
    cfg->host_peak = gt_backend_host_mem(be).peak;
  }
  gt_ckpt_destroy(mid);
  if (s == GT_OK) {
    if (!cfg->layout) {
      train_result_set_layout(cfg->p, m);
      train_result_set_layout(cfg->m, m);
      train_result_set_layout(cfg->v, m);
    }
    train_result_write_trainer(cfg->p, cfg->m, cfg->v, tr, plan.me.tp);
    if (cfg->ckpt) {
      gt_ckpt *c;
      CHECK_OK(gt_ckpt_create(&(gt_ckpt_config){.dir = cfg->ckpt, .sync = true}, tr, NULL, &c));
      CHECK_OK(gt_ckpt_save(c));
      gt_ckpt_destroy(c);
      reload(m, tr, &tc, cfg);
    }
  }
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

static run_cfg *run(run_cfg c, const train_result *layout) {
  run_cfg *cfg = harness_shared(sizeof *cfg);
  *cfg = c;
  cfg->p = train_result_new(layout);
  cfg->m = train_result_new(layout);
  cfg->v = train_result_new(layout);
  int codes[2];
  if (harness_run(c.layout ? 2 : 1, train, cfg, RUN_TIMEOUT_S, codes))
    fail_msg("%s%s: a rank failed", c.layout ? c.layout : "one process", c.on_disk ? ", state on disk" : "");
  return cfg;
}

static void same(const run_cfg *a, const run_cfg *b) {
  assert_memory_equal(a->p->losses, b->p->losses, sizeof a->p->losses);
  assert_memory_equal(a->p->params, b->p->params, a->p->nparams * sizeof(float));
  assert_memory_equal(a->m->params, b->m->params, a->m->nparams * sizeof(float));
  assert_memory_equal(a->v->params, b->v->params, a->v->nparams * sizeof(float));
}

static void case_disk(const char *layout, bool zero1, bool per_layer, gt_precision prec) {
  const char *what = layout ? layout : per_layer ? "per layer" : "one process";
  run_cfg *layout_of = run((run_cfg){.precision = prec}, NULL);
  run_cfg *ref = layout ? run((run_cfg){.layout = layout, .zero1 = zero1, .precision = prec}, layout_of->p) : layout_of;
  if (per_layer) ref = run((run_cfg){.per_layer = true, .precision = prec}, layout_of->p);
  assert_int_equal(ref->status, GT_OK);
  /* Room for the weights, the gradients and half the moments' size (a
   * ZeRO-1 shard of the weights takes a quarter): not for the moments. */
  size_t budget = ref->weights_bytes + ref->state_bytes / 2;
  run_cfg c = {.layout = layout, .zero1 = zero1, .per_layer = per_layer, .precision = prec, .host_limit = budget};
  run_cfg *in_memory = run(c, layout_of->p);
  print_message("%-12s %s: state in memory under a %zu-byte host budget: %s\n", what, gt_precision_name(prec), budget,
                in_memory->message);
  assert_int_equal(in_memory->status, GT_ENOMEM);
  assert_non_null(strstr(in_memory->message, "host memory budget exceeded"));
  assert_non_null(strstr(in_memory->message, "keep the optimizer state on disk"));
  c.on_disk = true;
  run_cfg *disk = run(c, layout_of->p);
  if (disk->status != GT_OK) fail_msg("%s, state on disk: %s", what, disk->message);
  print_message("%-12s %s: state on disk, %zu bytes of moments; host peak %zu of %zu; loss %.4f -> %.4f\n", what,
                gt_precision_name(prec), ref->state_bytes, disk->host_peak, budget, disk->p->losses[0],
                disk->p->losses[STEPS - 1]);
  assert_true(disk->host_peak <= budget);
  same(disk, ref);
  assert_true(disk->p->losses[STEPS - 1] < disk->p->losses[0]);
}

static void test_one_process(void **state) {
  (void)state;
  case_disk(NULL, false, false, GT_PRECISION_FP32);
  case_disk(NULL, false, false, GT_PRECISION_BF16);
}

static void test_per_layer(void **state) {
  (void)state;
  case_disk(NULL, false, true, GT_PRECISION_FP32);
}
static void test_dp2_zero1(void **state) {
  (void)state;
  case_disk("dp=2", true, false, GT_PRECISION_FP32);
}

/* Saved from disk, loaded into memory; saved from memory, loaded onto disk. */
static void test_checkpoint(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/ckpt%d", tmpdir, k);
    run_cfg *r = run((run_cfg){.on_disk = k == 0, .precision = GT_PRECISION_FP32, .ckpt = dir}, NULL);
    if (r->status != GT_OK) fail_msg("%s", r->message);
  }
}

/* State on disk under a host budget that holds the weights, the
 * checkpoint's copy of them and half a moment: not the state, which a
 * checkpoint used to copy whole into host memory. Saved at step 10 while
 * training goes on, and resumed in a new trainer: every step after, the
 * parameters and the moments are those of the run without a checkpoint
 * (in memory, without a budget). */
static void test_checkpoint_under_budget(void **state) {
  (void)state;
  run_cfg *ref = run((run_cfg){.precision = GT_PRECISION_FP32}, NULL);
  size_t moment = ref->state_bytes / 2, budget = ref->weights_bytes + moment + moment / 2;
  char dir[128];
  snprintf(dir, sizeof dir, "%s/mid", tmpdir);
  run_cfg c = {.on_disk = true, .precision = GT_PRECISION_FP32, .host_limit = budget, .mid = dir};
  run_cfg *saved = run(c, ref->p);
  if (saved->status != GT_OK) fail_msg("saving state on disk under a %zu-byte budget: %s", budget, saved->message);
  c.resume = true;
  run_cfg *resumed = run(c, ref->p);
  if (resumed->status != GT_OK)
    fail_msg("resuming state on disk under a %zu-byte budget: %s", budget, resumed->message);
  print_message(
      "state on disk (%zu bytes of moments), host budget %zu: peak %zu saving at step %d, %zu resuming; "
      "loss at step %d %.6f, uninterrupted %.6f\n",
      ref->state_bytes, budget, saved->host_peak, MID, resumed->host_peak, STEPS - 1, resumed->p->losses[STEPS - 1],
      ref->p->losses[STEPS - 1]);
  assert_true(saved->host_peak <= budget && resumed->host_peak <= budget);
  same(saved, ref);
  assert_memory_equal(resumed->p->losses + MID, ref->p->losses + MID, (STEPS - MID) * sizeof(float));
  assert_memory_equal(resumed->p->params, ref->p->params, ref->p->nparams * sizeof(float));
  assert_memory_equal(resumed->m->params, ref->m->params, ref->m->nparams * sizeof(float));
  assert_memory_equal(resumed->v->params, ref->v->params, ref->v->nparams * sizeof(float));
}

/* ---- bad directories, at creation ---- */

static gt_status create_on(const char *dir, size_t stage, char *msg, size_t n) {
  gt_backend *be;
  OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_model *m;
  OK(gt_model_create(be, &(gt_model_config){.B_max = 1, .T_max = T, .seed = 1, .offload_window = 1}, &m));
  OK(gpt_add_layers(m, &(gpt_config){.vocab_size = V, .T_max = T, .C = C, .NH = NH, .L = 2, .tie_weights = true}));
  OK(gt_model_build(m));
  gt_optim_config oc = gt_optim_defaults(GT_OPTIM_ADAMW);
  oc.state_dir = dir;
  oc.state_stage_bytes = stage;
  gt_optimizer *o = NULL;
  gt_status s = gt_optimizer_create(m, &oc, &o);
  snprintf(msg, n, "%s", s == GT_OK ? "" : gt_last_error());
  if (s == GT_OK) {
    /* A good one: every float reads back as written, across chunks. */
    size_t lo, hi;
    gt_optimizer_range(o, &lo, &hi);
    float *x = malloc((hi - lo) * sizeof *x), *y = malloc((hi - lo) * sizeof *y);
    for (size_t i = 0; i < hi - lo; i++) x[i] = (float)i * 0.5f - 7.0f;
    OK(gt_optimizer_read_state(o, 1, 0, hi - lo, y));
    for (size_t i = 0; i < hi - lo; i++) assert_true(y[i] == 0.0f); /* it starts at zero */
    OK(gt_optimizer_write_state(o, 1, 0, hi - lo, x));
    OK(gt_optimizer_read_state(o, 1, 3, hi - lo - 3, y));
    assert_memory_equal(x + 3, y, (hi - lo - 3) * sizeof *x);
    expect_error(gt_optimizer_read_state(o, 1, 1, hi - lo, y), GT_EINVAL, "outside");
    expect_error(gt_optimizer_read_state(o, 2, 0, 1, y), GT_EINVAL, "outside");
    free(x);
    free(y);
  }
  gt_optimizer_destroy(o);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  return s;
}

static void test_bad_directories(void **state) {
  (void)state;
  char msg[600], path[160];
  assert_int_equal(create_on(tmpdir, STAGE_BYTES, msg, sizeof msg), GT_OK);
  /* Nothing is left in the directory: the file was never named, or is gone. */
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) assert_true(e->d_name[0] == '.');
  closedir(d);
  snprintf(path, sizeof path, "%s/missing", tmpdir);
  assert_int_equal(create_on(path, STAGE_BYTES, msg, sizeof msg), GT_ENOTFOUND);
  print_message("missing: %s\n", msg);
  assert_non_null(strstr(msg, path));
  snprintf(path, sizeof path, "%s/a-file", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(create_on(path, STAGE_BYTES, msg, sizeof msg), GT_ENOTFOUND);
  print_message("a file: %s\n", msg);
  assert_non_null(strstr(msg, "Not a directory"));
  unlink(path);
  assert_int_equal(create_on(tmpdir, 1024, msg, sizeof msg), GT_ENOMEM);
  assert_non_null(strstr(msg, "too few"));
}

/* Full and read-only: a small tmpfs of our own (root only: main skips
 * without it). */
static void test_full_and_read_only(void **state) {
  (void)state;
  char msg[600], path[160];
  snprintf(path, sizeof path, "%s/small", tmpdir);
  assert_int_equal(mkdir(path, 0755), 0);
  if (mount("tmpfs", path, "tmpfs", 0, "size=64k") != 0) {
    int e = errno;
    rmdir(path);
    SKIP_CASE("cannot mount a tmpfs here (%s)", strerror(e));
  }
  gt_status s = create_on(path, STAGE_BYTES, msg, sizeof msg);
  print_message("full: %s\n", msg);
  assert_int_equal(s, GT_ENOMEM);
  assert_non_null(strstr(msg, "has no room"));
  assert_int_equal(mount("tmpfs", path, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
  s = create_on(path, STAGE_BYTES, msg, sizeof msg);
  print_message("read-only: %s\n", msg);
  assert_int_equal(s, GT_EIO);
  assert_non_null(strstr(msg, "Read-only file system"));
  assert_int_equal(umount(path), 0);
  rmdir(path);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "%s/giant-disk-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* No argument: every case but the full and read-only directories; `full`:
 * those. */
int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "full")) {
    if (geteuid() != 0) {
      fprintf(stderr, "mounting a small tmpfs needs root: skipping\n");
      return 77;
    }
    const struct CMUnitTest full[] = {cmocka_unit_test(test_full_and_read_only)};
    return gt_test_exit(cmocka_run_group_tests(full, setup, teardown));
  }
  if (argc != 1) {
    fprintf(stderr, "usage: %s [full]\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_directories), cmocka_unit_test(test_one_process),
      cmocka_unit_test(test_per_layer),       cmocka_unit_test(test_dp2_zero1),
      cmocka_unit_test(test_checkpoint),      cmocka_unit_test(test_checkpoint_under_budget),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
