/* The fail-slow monitor (giant/failslow.h) in a job of four forked ranks,
 * fed synthetic step telemetry: every rank computes 10 ms a step (with a
 * little jitter) and world rank 2 three times that from step FROM on.
 * Checked: every rank reaches the same verdicts, the slow rank is flagged
 * within a few steps at about its real ratio, and rank 0's health record
 * on etcd names it by its rank at launch (gt_failslow_config.record_ranks:
 * after a reshape numbered the ranks left anew, a record must not land on
 * another process's), by its world rank without them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gt_test.h"
#include "examples/gpt/gpt.h"
#include "giant/coord.h"
#include "giant/failslow.h"
#include "giant/giant.h"
#include "localkit/etcd_server.h"
#include "localkit/ranks.h"
#include "parallel/train_result.h"

enum { RANKS = 4, STEPS = 60, FROM = 25, SLOW = 2, MAX_VERDICTS = 8 };
#define BASE_S 0.010
#define FACTOR 3.0

typedef struct seen {
  int n;
  gt_failslow_verdict v[MAX_VERDICTS];
} seen;

typedef struct job {
  char endpoint[64], job_id[32];
  const int *names; /* record_ranks, or NULL */
  seen *seen;       /* RANKS of them, in memory shared with the ranks */
} job;

/* Rank r's telemetry at step s: 2 rows of 64 tokens over 2 layers, 10 ms
 * with +-2% jitter that differs by rank and step, the slow rank x3 from
 * FROM on. No waits: the monitor's link watch stays idle. */
static gt_step_telemetry telemetry(int r, int s) {
  double c = BASE_S * (1 + 0.02 * sin(1.7 * s + 2.3 * r));
  if (r == SLOW && s >= FROM) c *= FACTOR;
  return (gt_step_telemetry){.rank = r, .layers = 2, .micro_batches = 1, .tokens = 128, .seq_sq = 128.0 * 64,
                             .compute_s = c, .step_s = c};
}

static int rank_main(int rank, int n, void *arg) {
  job *j = arg;
  gt_store *store;
  gt_plan plan;
  gt_dist *dist;
  train_rank_dist(&(gt_plan_config){.world = n, .rank = rank, .layout = "dp=4"}, j->job_id, &store, &plan, &dist);
  gt_backend *be;
  gt_model *m;
  CHECK_OK(gt_backend_create(&(gt_backend_config){.kind = GT_DEVICE_CPU, .num_threads = 1}, &be));
  /* The prior's scale: the fits learn speeds relative to the job, so any
   * peak serves, and a stand-in spares measuring one. */
  gt_backend_set_peak_flops(be, 1e10);
  CHECK_OK(gt_model_create(be, &(gt_model_config){.B_max = 2, .T_max = 64, .seed = 1}, &m));
  CHECK_OK(gpt_add_layers(m, &(gpt_config){.vocab_size = 64, .T_max = 64, .C = 32, .NH = 2, .L = 2}));
  CHECK_OK(gt_model_build(m));
  gt_etcd_client *cli = NULL;
  if (rank == 0) CHECK_OK(gt_etcd_connect(&(gt_etcd_config){.endpoints = j->endpoint, .timeout_ms = 5000}, &cli));
  gt_failslow_config cfg = {.etcd = cli, .job_id = j->job_id, .record_ranks = j->names, .quiet = true};
  gt_failslow *fs;
  CHECK_OK(gt_failslow_create(dist, m, &cfg, &fs));
  seen *mine = &j->seen[rank];
  for (int s = 0; s < STEPS; s++) {
    gt_step_stats st = {.step = s, .tokens = 128, .micro_batches = 1, .seq_len = 64, .telemetry = telemetry(rank, s)};
    st.seconds = st.telemetry.step_s;
    gt_failslow_report rep;
    CHECK_OK(gt_failslow_step(fs, &st, &rep));
    CHECK(rep.gathered && rep.nranks == n);
    for (int i = 0; i < rep.nverdicts && mine->n < MAX_VERDICTS; i++) mine->v[mine->n++] = rep.verdicts[i];
  }
  gt_failslow_destroy(fs);
  gt_etcd_close(cli);
  gt_model_destroy(m);
  gt_backend_destroy(be);
  gt_dist_destroy(dist);
  gt_store_destroy(store);
  return RANK_OK;
}

/* Runs the job and checks its verdicts. */
static void run_job(const etcd_fixture *fx, const char *id, const int *names) {
  job *j = harness_shared(sizeof *j);
  j->seen = harness_shared(RANKS * sizeof *j->seen);
  snprintf(j->endpoint, sizeof j->endpoint, "%s", fx->endpoint);
  snprintf(j->job_id, sizeof j->job_id, "%s", id);
  j->names = names; /* the forked ranks share the parent's address space layout */
  int codes[RANKS];
  /* 60 tiny steps of four ranks (an all-gather of a few hundred bytes
   * each): one second on a quiet machine, 15 s at the lowest priority
   * beside a busy suite; 120 s only bounds a hang. */
  assert_int_equal(harness_run(RANKS, rank_main, j, 120, codes), 0);

  /* The same verdicts on every rank. */
  const seen *s0 = &j->seen[0];
  for (int r = 1; r < RANKS; r++) {
    assert_int_equal(j->seen[r].n, s0->n);
    for (int i = 0; i < s0->n; i++) {
      assert_int_equal(j->seen[r].v[i].rank, s0->v[i].rank);
      assert_int_equal(j->seen[r].v[i].step, s0->v[i].step);
      assert_int_equal(j->seen[r].v[i].flagged, s0->v[i].flagged);
    }
  }
  /* One: the slow rank's compute, flagged within its k = 5 steps plus a
   * few, at about its ratio. */
  assert_int_equal(s0->n, 1);
  const gt_failslow_verdict *v = &s0->v[0];
  print_message("%s: rank %d flagged at step %d (onset %d), ratio %.2f\n", id, v->rank, v->step, v->onset, v->ratio);
  assert_int_equal(v->rank, SLOW);
  assert_int_equal(v->kind, GT_FAILSLOW_COMPUTE);
  assert_true(v->flagged);
  assert_true(v->onset >= FROM && v->step >= FROM + 4 && v->step <= FROM + 10);
  assert_true(fabs(v->ratio - FACTOR) < 0.2 * FACTOR);
}

static void test_records_name_ranks_as_launched(void **state) {
  etcd_fixture *fx = *state;
  /* As if launch rank 2 had left and ranks 3 and 4 were numbered 2 and 3. */
  static const int names[RANKS] = {0, 1, 3, 4};
  run_job(fx, "fsnamed", names);
  run_job(fx, "fsworld", NULL);
  /* Read after both jobs: the ranks are forked, and a gRPC client must not
   * be live in the process that forks them. */
  gt_etcd_client *cli;
  OK(gt_etcd_connect(&(gt_etcd_config){.endpoints = fx->endpoint, .timeout_ms = 5000}, &cli));
  gt_health_record rec[8], world[8];
  int n = 0, nworld = 0;
  OK(gt_health_list(cli, "fsnamed", rec, 8, &n));
  OK(gt_health_list(cli, "fsworld", world, 8, &nworld));
  gt_etcd_close(cli);
  assert_int_equal(n, 1);
  assert_int_equal(rec[0].rank, names[SLOW]);
  assert_int_equal(rec[0].state, GT_HEALTH_SLOW);
  assert_int_equal(rec[0].kind, GT_HEALTH_COMPUTE);
  assert_int_equal(rec[0].peer, -1);
  assert_true(fabs(rec[0].ratio - FACTOR) < 0.2 * FACTOR);
  /* What the slow rank computed that step, 30 ms. */
  assert_true(fabs(rec[0].observed_ms - 1e3 * BASE_S * FACTOR) < 0.05 * 1e3 * BASE_S * FACTOR);
  assert_true(rec[0].step >= FROM + 4 && rec[0].step <= FROM + 10);
  /* Without names: its world rank. */
  assert_int_equal(nworld, 1);
  assert_int_equal(world[0].rank, SLOW);
  assert_int_equal(world[0].state, GT_HEALTH_SLOW);
}

static int setup(void **state) {
  static etcd_fixture fx;
  if (etcd_fixture_start(&fx, NULL) != 0) return -1;
  *state = &fx;
  return 0;
}

static int teardown(void **state) {
  etcd_fixture_destroy(*state);
  return 0;
}

int main(void) {
  if (!etcd_fixture_available()) {
    printf("skipped: etcd not found\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_records_name_ranks_as_launched)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
