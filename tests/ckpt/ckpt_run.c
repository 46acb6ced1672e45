/* See ckpt_run.h. */
#include "ckpt/ckpt_run.h"

#include <ftw.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "localkit/ranks.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/dist.h"
#include "giant/layer.h"
#include "giant/engine/plan.h"
#include "ckpt/hf.h"
#include "ckpt/peers_api.h"
#include "core/data/loader_engine.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/store.h"
#include "giant/engine/trainer.h"
#include "optim/trainer/trainer_engine.h"
#include "parallel/plan_engine.h"

cr_state cr_state_new(const train_result *layout) {
  return (cr_state){train_result_new(layout), train_result_new(layout), train_result_new(layout)};
}

/* The parameters and the optimizer state this rank holds, into the
 * single-process layout. */
static void capture(gt_trainer *tr, const gt_plan *plan, const cr_state *o) {
  if (!o->p) return;
  if (plan->world == 1 && o->p->count == 0) { /* the run that records the layout */
    gt_model *m = gt_trainer_model(tr);
    train_result_set_layout(o->p, m);
    train_result_set_layout(o->m, m);
    train_result_set_layout(o->v, m);
  }
  train_result_write_trainer(o->p, o->m, o->v, tr, plan->me.tp);
}

/* A step over batches taken from the loader here, so that the global
 * sample index of every row can be recorded (the loader reuses its
 * buffers, so each micro-batch is copied). */
static gt_status step_recording(gt_trainer *tr, gt_loader *data, const cr_cfg *cfg, int step, const gt_plan *plan,
                                gt_step_stats *st) {
  static int32_t in[CR_ACCUM][CR_ROWS * CR_T], tg[CR_ACCUM][CR_ROWS * CR_T];
  gt_batch b[CR_ACCUM];
  for (int i = 0; i < CR_ACCUM; i++) {
    GT_TRY(gt_loader_next(data, &b[i]));
    size_t n = (size_t)b[i].B * (size_t)b[i].T;
    memcpy(in[i], b[i].inputs, n * sizeof(int32_t));
    memcpy(tg[i], b[i].targets, n * sizeof(int32_t));
    b[i].inputs = in[i];
    b[i].targets = tg[i];
    if (plan->me.tp || plan->me.pp) continue; /* one record per replica */
    for (int r = 0; r < b[i].B; r++) {
      int k = __atomic_fetch_add(&cfg->nrows[step], 1, __ATOMIC_SEQ_CST);
      CHECK(k < CR_ROWS * CR_ACCUM);
      cfg->rows[step][k] = b[i].row + (unsigned long long)r;
    }
  }
  return gt_trainer_step_batches(tr, b, CR_ACCUM, st);
}

/* The model, cut into pipeline stages for stage_speed (NULL: evenly), and
 * its trainer. */
static void build(const cr_cfg *cfg, gt_backend *be, gt_dist *dist, const gt_plan *plan, int rows,
                  const double *stage_speed, gt_model **m, gt_trainer **tr) {
  CHECK_OK(gt_model_create(
      be,
      &(gt_model_config){
          .B_max = cfg->share0 ? CR_ROWS : rows, .T_max = CR_T, .seed = 42, .offload_window = cfg->offload_window},
      m));
  CHECK(gt_model_offloaded(*m) == (cfg->offload_window > 0));
  int C = cfg->C ? cfg->C : CR_C;
  if (dist) {
    gt_model_parallel mp = gt_dist_model_parallel(dist);
    CHECK_OK(gt_model_set_parallel(*m, &mp));
  }
  gpt_config gc = {.vocab_size = CR_V, .T_max = CR_T, .C = C, .NH = CR_NH, .L = CR_L, .tie_weights = true};
  CHECK_OK(gpt_add_layers(*m, &gc));
  if (stage_speed) CHECK_OK(gt_plan_cut_stages(plan, *m, rows, CR_T, stage_speed));
  CHECK_OK(gt_model_build(*m));
  if (dist) CHECK_OK(gt_plan_check_model(plan, *m));
  gt_trainer_config tc = {.optim = gt_optim_defaults(GT_OPTIM_ADAMW),
                          .grad_clip = 1.0f,
                          .grad_accum = CR_ACCUM,
                          .dist = dist,
                          .schedule = {3e-3f, 3e-4f, 3, CR_STEPS}};
  CHECK_OK(gt_trainer_create(*m, &tc, tr));
}

/* Re-cuts the pipeline: a new model and trainer cut for stage_speed, the
 * state moved into them, the old ones (and the checkpointer on them) gone. */
static void recut(const cr_cfg *cfg, gt_backend *be, gt_dist *dist, const gt_plan *plan, int rows, gt_model **m,
                  gt_trainer **tr, gt_ckpt **ck, const gt_ckpt_config *kc, gt_loader *data) {
  gt_model *m2;
  gt_trainer *tr2;
  build(cfg, be, dist, plan, rows, cfg->recut_speed, &m2, &tr2);
  int moved = 0;
  for (int i = 0; i < gt_model_num_layers(m2); i++)
    moved += gt_model_layer(*m, i)->stage != gt_model_layer(m2, i)->stage;
  if (cfg->moved && plan->rank == 0) *cfg->moved = moved;
  CHECK_OK(gt_trainer_move_state(*tr, tr2));
  gt_ckpt_destroy(*ck);
  gt_trainer_destroy(*tr);
  gt_model_destroy(*m);
  *m = m2;
  *tr = tr2;
  CHECK_OK(gt_ckpt_create(kc, *tr, data, ck));
}

/* The state a run holds at one layout. */
typedef struct cr_live {
  gt_dist *dist;
  gt_plan plan;
  int rows;
  gt_model *m;
  gt_trainer *tr;
  gt_loader *data;
  gt_ckpt *ck;
  gt_ckpt_mirror *mirror;
} cr_live;

static void live_free(cr_live *l) {
  gt_ckpt_mirror_destroy(l->mirror);
  gt_ckpt_destroy(l->ck);
  gt_loader_close(l->data);
  gt_trainer_destroy(l->tr);
  gt_model_destroy(l->m);
  gt_dist_destroy(l->dist);
  *l = (cr_live){0};
}

static gt_loader *open_data(const cr_cfg *cfg, const gt_plan *plan, int rows) {
  gt_loader *data;
  gt_loader_config lc = {.path = cfg->data,
                         .B = cfg->share0 ? CR_ROWS : rows,
                         .T_max = CR_T,
                         .shard = plan->me.dp,
                         .nshards = plan->layout.dp,
                         .seed = 7};
  CHECK_OK(gt_loader_open(&lc, CR_V, &data));
  return data;
}

/* The in-process layout change of cfg->live_*: false when this rank
 * leaves, or when the move failed as the test expects (run no more). */
static bool live_change(const cr_cfg *cfg, gt_backend *be, gt_store *store, int rank, int world,
                        const gt_ckpt_config *kc, cr_live *l) {
  int lost = cfg->live_lost - 1, empty = cfg->live_empty - 1;
  CHECK_OK(gt_ckpt_wait(l->ck));
  if (rank == lost) return false;
  uint64_t row = (uint64_t)cfg->live_at * CR_ACCUM * CR_ROWS; /* the next row of the stream, every replica's */
  CHECK(gt_loader_next_row(l->data) == row);
  cr_live n = {0};
  int rank2 = rank - (lost >= 0 && rank > lost), world2 = world - (lost >= 0);
  train_rank_dist_on(store,
                     &(gt_plan_config){.world = world2,
                                       .rank = rank2,
                                       .layout = cfg->live_layout,
                                       .schedule = GT_PP_1F1B,
                                       .zero1 = cfg->live_zero1,
                                       .zero = cfg->live_zero},
                     "live1", &n.plan, &n.dist);
  n.rows = CR_ROWS / n.plan.layout.dp;
  build(cfg, be, n.dist, &n.plan, n.rows, NULL, &n.m, &n.tr);
  if (rank == empty) { /* a restarted rank: nothing of its own */
    gt_ckpt_destroy(l->ck);
    gt_trainer_destroy(l->tr);
    gt_model_destroy(l->m);
    l->ck = NULL;
    l->tr = NULL;
    l->m = NULL;
  }
  gt_ckpt_peer_stats ps;
  gt_status s = gt_ckpt_reshard_peers(l->tr, n.tr, l->mirror, cfg->live_fallback, &ps);
  if (rank2 == 0 && cfg->live_status) {
    *cfg->live_status = s;
    snprintf(cfg->live_error, 1024, "%s", s == GT_OK ? "" : gt_last_error());
  }
  if (cfg->live_stats && s == GT_OK) cfg->live_stats[rank] = ps;
  if (!cfg->live_status) CHECK_OK(s);
  live_free(l);
  *l = n;
  if (s != GT_OK) return false;
  CHECK(ps.step == cfg->live_at && gt_trainer_step_index(l->tr) == cfg->live_at);
  l->data = open_data(cfg, &l->plan, l->rows);
  CHECK_OK(gt_loader_restart_at(l->data, row));
  CHECK_OK(gt_ckpt_create(kc, l->tr, l->data, &l->ck));
  capture(l->tr, &l->plan, &cfg->loaded);
  return true;
}

int cr_rank(int rank, int world, void *arg) {
  cr_cfg *cfg = arg;
  gt_log_set_rank(rank);
  gt_backend *be;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  gt_backend_set_peak_flops(be, 1e9);
  gt_store *store;
  gt_dist *dist;
  gt_plan plan;
  train_rank_dist(&(gt_plan_config){.world = world,
                                    .rank = rank,
                                    .layout = cfg->layout,
                                    .schedule = GT_PP_1F1B,
                                    .zero1 = cfg->zero1,
                                    .zero = cfg->zero},
                  "gen0", &store, &plan, &dist);
  int rows = CR_ROWS / plan.layout.dp;
  gt_model *m;
  gt_trainer *tr;
  build(cfg, be, dist, &plan, rows, NULL, &m, &tr);
  if (cfg->init_from) {
    CHECK_OK(ck_hf_import(m, cfg->init_from, "hf-gpt2"));
    capture(tr, &plan, &cfg->loaded);
  }
  gt_loader *data = open_data(cfg, &plan, rows);
  if (cfg->share0) CHECK_OK(gt_loader_reshare(data, rows, plan.me.dp * rows, CR_ROWS)); /* even until share_at */
  gt_ckpt *ck;
  /* The ranks' reports of a save reach rank 0 within a small step of each
   * other (milliseconds): 60 s. */
  gt_ckpt_config kc = {.dir = cfg->dir,
                       .store = store,
                       .timeout_ms = 60000,
                       .keep = cfg->keep,
                       .busy = cfg->busy,
                       .chunk_bytes = cfg->chunk_bytes};
  CHECK_OK(gt_ckpt_create(&kc, tr, data, &ck));
  int s0 = cfg->s0;
  if (s0 != 0 || cfg->load_path) {
    gt_ckpt_info info;
    gt_status ls = gt_ckpt_load(ck, cfg->load_path, &info);
    if (cfg->load_status && rank == 0) {
      *cfg->load_status = ls;
      snprintf(cfg->load_error, 1024, "%s", ls == GT_OK ? "" : gt_last_error());
    }
    if (cfg->load_status && ls != GT_OK)
      s0 = cfg->s1; /* stop here */
    else if (cfg->load_if_any && ls == GT_ENOTFOUND)
      s0 = 0;
    else
      CHECK_OK(ls);
    if (ls == GT_OK && s0 > 0) CHECK(info.step == s0 && gt_trainer_step_index(tr) == s0);
    if (ls == GT_OK && s0 < 0) s0 = info.step;
    if (ls == GT_OK) capture(tr, &plan, &cfg->loaded);
    if (ls == GT_OK && cfg->loaded_step && rank == 0) *cfg->loaded_step = info.step;
    if (ls == GT_OK && cfg->bytes_read) cfg->bytes_read[rank] = info.bytes_read;
    if (ls == GT_OK && cfg->save_at == s0) CHECK_OK(gt_ckpt_save(ck)); /* as loaded, into cfg->dir */
  }
  bool leave = false;
  gt_ckpt_mirror *mirror = NULL; /* copies of single-owner state on the rank two on: "another node" of two ranks */
  if (cfg->live_mirror) CHECK_OK(gt_ckpt_mirror_create(tr, 2, &mirror));
  for (int s = s0; s < cfg->s1 && !leave; s++) {
    if (s == cfg->kill_at && s > 0) raise(SIGKILL);
    if (cfg->live_at && s == cfg->live_at) {
      cr_live l = {dist, plan, rows, m, tr, data, ck, mirror};
      leave = !live_change(cfg, be, store, rank, world, &kc, &l);
      dist = l.dist;
      plan = l.plan;
      rows = l.rows;
      m = l.m;
      tr = l.tr;
      data = l.data;
      ck = l.ck;
      mirror = l.mirror;
      if (leave) break;
    }
    if (cfg->recut_at && s == cfg->recut_at) recut(cfg, be, dist, &plan, rows, &m, &tr, &ck, &kc, data);
    gt_step_stats st;
    if (cfg->share0 && s == cfg->share_at) {
      int B = plan.me.dp ? CR_ROWS - cfg->share0 : cfg->share0, off = plan.me.dp ? cfg->share0 : 0;
      /* The trainer reshares the loader it steps; a recording step takes its batches itself. */
      if (cfg->rows)
        CHECK_OK(gt_loader_reshare(data, B, off, CR_ROWS));
      else
        CHECK_OK(gt_trainer_set_rows(tr, B, off, CR_ROWS));
    }
    if (cfg->rows)
      CHECK_OK(step_recording(tr, data, cfg, s, &plan, &st));
    else
      CHECK_OK(gt_trainer_step(tr, data, &st));
    if (mirror) CHECK_OK(gt_ckpt_mirror_update(mirror));
    /* The step's telemetry counts its tensor-parallel collectives apart:
     * some time in them with tp > 1, none without, never more than the step. */
    CHECK(plan.layout.tp > 1 ? st.telemetry.tp_wait_s > 0 : st.telemetry.tp_wait_s == 0);
    CHECK(st.telemetry.tp_wait_s <= st.seconds);
    /* ... and its pipeline waits per peer: some from each peer a stage
     * receives from (its previous and next pipeline ranks), none from a
     * peer it does not have. */
    const gt_step_telemetry *tl = &st.telemetry;
    int pp = plan.layout.pp;
    CHECK(pp > 1 && plan.me.pp > 0 ? tl->pp_wait_prev_s > 0 : tl->pp_wait_prev_s == 0);
    CHECK(pp > 1 && plan.me.pp < pp - 1 ? tl->pp_wait_next_s > 0 : tl->pp_wait_next_s == 0);
    CHECK(tl->pp_wait_prev_s + tl->pp_wait_next_s <= st.seconds);
    if (rank == 0 && cfg->final.p) {
      cfg->final.p->losses[s] = st.loss;
      cfg->final.p->norms[s] = st.grad_norm;
    }
    if (cfg->before_save) cfg->before_save(cfg->dir, s + 1);
    if (s + 1 == cfg->wait_at) (void)gt_ckpt_wait(ck); /* how it ended is the test's business */
    if (s + 1 == cfg->save_at || (cfg->save_every && (s + 1) % cfg->save_every == 0)) {
      CHECK_OK(gt_ckpt_save(ck));
      capture(tr, &plan, &cfg->saved);
    }
  }
  if (leave) { /* left the job, or the move failed as the test expects */
    cr_live l = {dist, plan, rows, m, tr, data, ck, mirror};
    live_free(&l);
    gt_store_destroy(store);
    gt_backend_destroy(be);
    return RANK_OK;
  }
  if (cfg->after_steps) cfg->after_steps(cfg->dir);
  gt_status ws = gt_ckpt_wait(ck);
  if (cfg->save_status)
    *cfg->save_status = ws;
  else
    CHECK_OK(ws);
  if (cfg->skipped) {
    gt_ckpt_stats stats;
    gt_ckpt_get_stats(ck, &stats);
    cfg->skipped[rank] = stats.skipped;
  }
  capture(tr, &plan, &cfg->final);
  gt_ckpt_mirror_destroy(mirror);
  gt_ckpt_destroy(ck);
  gt_loader_close(data);
  gt_trainer_destroy(tr);
  gt_model_destroy(m);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  gt_backend_destroy(be);
  return RANK_OK;
}

void cr_run(int world, cr_cfg *cfg) {
  int codes[HARNESS_MAX];
  /* A run takes 0.1-1 s on busy cores (a few small steps and saves on up to
   * eight ranks): 240 s is > 200x. */
  int bad = harness_run(world, cr_rank, cfg, 240, codes);
  if (bad)
    fail_msg("%s%s: %d rank(s) failed (rank 0's code %d)", cfg->layout ? cfg->layout : "one process",
             cfg->zero1 ? " + ZeRO-1" : "", bad, codes[0]);
}

void cr_free_data(char *data) {
  *strrchr(data, '/') = 0;
  cr_rmtree(data);
  free(data);
}

train_result *cr_layout(const char *data) {
  cr_cfg cfg = {.data = data, .dir = "/nonexistent-unused", .final = cr_state_new(NULL)};
  cr_run(1, &cfg);
  return cfg.final.p;
}

cr_fixture cr_fx;

int cr_fixture_setup(void **state) {
  (void)state;
  cr_fx.data = cr_make_data();
  cr_fx.layout = cr_layout(cr_fx.data);
  return 0;
}

int cr_fixture_teardown(void **state) {
  (void)state;
  cr_free_data(cr_fx.data);
  cr_fx = (cr_fixture){0};
  return 0;
}

char *cr_fixture_dir(const char *tag) {
  static int k;
  char *d = malloc(strlen(cr_fx.data) + strlen(tag) + 16);
  CHECK(d);
  sprintf(d, "%s.%s%d", cr_fx.data, tag, k++);
  return d;
}

void cr_fixture_same_state(const char *what, const cr_state *a, const cr_state *b) {
  cr_assert_same_state(cr_fx.layout, what, a, b);
}

char *cr_make_data(void) {
  char tmpl[] = "/tmp/giant-ckpt-XXXXXX";
  CHECK(mkdtemp(tmpl));
  enum { N = 20000 };
  uint32_t *tok = malloc(N * sizeof *tok);
  CHECK(tok);
  /* Runs of arithmetic sequences, a new stride and start every 23 tokens. */
  for (int i = 0; i < N; i++) {
    int run = i / 23, t = i % 23;
    tok[i] = (uint32_t)((run * 13 + t * (1 + run % 5)) % CR_V);
  }
  char *path = malloc(strlen(tmpl) + 16);
  CHECK(path);
  sprintf(path, "%s/data.tok", tmpl);
  CHECK_OK(gt_tokfile_write(path, tok, N, CR_V, GT_TOKFILE_NO_SEP));
  free(tok);
  return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(p);
}

void cr_rmtree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void cr_flip_bit(const char *path, long offset, unsigned char mask) {
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, offset, SEEK_SET), 0);
  int c = fgetc(f);
  assert_true(c != EOF);
  assert_int_equal(fseek(f, offset, SEEK_SET), 0);
  assert_int_equal(fputc(c ^ mask, f), c ^ mask);
  assert_int_equal(fclose(f), 0);
}

static bool all_zero(const train_result *layout, const train_result *r) {
  for (size_t i = 0; i < layout->nparams; i++)
    if (r->params[i] != 0) return false;
  return true;
}

void cr_assert_same_state(const train_result *layout, const char *what, const cr_state *a, const cr_state *b) {
  size_t n = layout->nparams * sizeof(float);
  /* Something was captured: the moments are not the zeros they start as. */
  assert_false(all_zero(layout, a->p) || all_zero(layout, a->m) || all_zero(layout, a->v));
  print_message("%s: parameters %s, first moments %s, second moments %s\n", what,
                memcmp(a->p->params, b->p->params, n) ? "DIFFER" : "identical",
                memcmp(a->m->params, b->m->params, n) ? "DIFFER" : "identical",
                memcmp(a->v->params, b->v->params, n) ? "DIFFER" : "identical");
  assert_memory_equal(a->p->params, b->p->params, n);
  assert_memory_equal(a->m->params, b->m->params, n);
  assert_memory_equal(a->v->params, b->v->params, n);
}
