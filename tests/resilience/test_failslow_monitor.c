/* The fail-slow monitor (resilience/detect/failslow.h) in a job of four forked ranks,
 * fed synthetic step telemetry: every rank computes 10 ms a step (with a
 * little jitter) and world rank 2 three times that from step FROM on.
 * Checked: every rank reaches the same verdicts, the slow rank is flagged
 * within a few steps at about its real ratio, and rank 0's health record
 * on etcd names it by its rank at launch (gt_failslow_config.record_ranks:
 * after a reshape numbered the ranks left anew, a record must not land on
 * another process's), by its world rank without them. And a slow link
 * (a real send delay from rank 1 to rank 2, the waits it raises in the
 * telemetry) stays flagged while a rank is flagged slow beside it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/gt_test.h"
#include "examples/gpt/gpt.h"
#include "giant/engine/coord.h"
#include "resilience/detect/failslow.h"
#include "giant/giant.h"
#include "localkit/etcd_server.h"
#include "localkit/ranks.h"
#include "parallel/train_result.h"
#include "comm/delays.h"
#include "giant/engine/device.h"
#include "giant/engine/dist.h"
#include "giant/engine/etcd.h"
#include "giant/engine/plan.h"
#include "giant/engine/store.h"

enum { RANKS = 4, STEPS = 60, FROM = 25, SLOW = 2, MAX_VERDICTS = 8 };
/* The link case: sends from rank 1 to rank 2 delayed LINK_DELAY_MS over
 * steps [LINK_FROM, LINK_UNTIL), every rank waiting LINK_WAIT_S a step
 * more; rank 3 x3 from LATE_FROM. */
enum { LINK_FROM = 15, LINK_UNTIL = 50, LATE_FROM = 32, LATE_SLOW = 3 };
#define BASE_S 0.010
#define LINK_WAIT_S 0.010
#define LINK_DELAY_MS 50.0
#define FACTOR 3.0

typedef struct seen {
  int n;
  gt_failslow_verdict v[MAX_VERDICTS];
} seen;

typedef struct job {
  char endpoint[64], job_id[32];
  bool link;        /* the link case */
  const int *names; /* record_ranks, or NULL */
  seen *seen;       /* RANKS of them, in memory shared with the ranks */
} job;

/* Rank r's telemetry at step s: 2 rows of 64 tokens over 2 layers, 10 ms
 * with +-2% jitter that differs by rank and step, the slow rank x3 from
 * FROM on. No waits, and the monitor's link watch stays idle; in the link
 * case, waits while the link is slow and rank LATE_SLOW x3 from LATE_FROM. */
static gt_step_telemetry telemetry(int r, int s, bool link) {
  double c = BASE_S * (1 + 0.02 * sin(1.7 * s + 2.3 * r)), wait = 0;
  if (!link && r == SLOW && s >= FROM) c *= FACTOR;
  if (link && r == LATE_SLOW && s >= LATE_FROM) c *= FACTOR;
  if (link && s >= LINK_FROM && s < LINK_UNTIL) wait = LINK_WAIT_S;
  return (gt_step_telemetry){.rank = r,
                             .layers = 2,
                             .micro_batches = 1,
                             .tokens = 128,
                             .seq_sq = 128.0 * 64,
                             .compute_s = c,
                             .step_s = c + wait,
                             .dp_wait_s = wait};
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
    if (j->link && rank == 1 && (s == LINK_FROM || s == LINK_UNTIL))
      CHECK_OK(gt_grid_set_send_delay(gt_dist_grid(dist), 2, s == LINK_FROM ? LINK_DELAY_MS : 0));
    gt_step_stats st = {
        .step = s, .tokens = 128, .micro_batches = 1, .seq_len = 64, .telemetry = telemetry(rank, s, j->link)};
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

/* Runs the job; checks that every rank reached the same verdicts, and
 * returns rank 0's. */
static const seen *run_job(const etcd_fixture *fx, const char *id, const int *names, bool link) {
  job *j = harness_shared(sizeof *j);
  j->seen = harness_shared(RANKS * sizeof *j->seen);
  snprintf(j->endpoint, sizeof j->endpoint, "%s", fx->endpoint);
  snprintf(j->job_id, sizeof j->job_id, "%s", id);
  j->names = names; /* the forked ranks share the parent's address space layout */
  j->link = link;
  int codes[RANKS];
  /* 60 tiny steps of four ranks (an all-gather of a few hundred bytes
   * each): one second on a quiet machine, 15 s at the lowest priority
   * beside a busy suite; 120 s only bounds a hang. */
  assert_int_equal(harness_run(RANKS, rank_main, j, 120, codes), 0);
  const seen *s0 = &j->seen[0];
  for (int i = 0; i < s0->n; i++) {
    const gt_failslow_verdict *v = &s0->v[i];
    char what[48];
    if (v->kind == GT_FAILSLOW_LINK)
      snprintf(what, sizeof what, "link %d-%d", v->rank, v->peer);
    else
      snprintf(what, sizeof what, "compute of rank %d", v->rank);
    print_message("%s: %s %s at step %d (onset %d), ratio %.2f\n", id, what, v->flagged ? "flagged" : "cleared",
                  v->step, v->onset, v->ratio);
  }
  for (int r = 1; r < RANKS; r++) {
    assert_int_equal(j->seen[r].n, s0->n);
    for (int i = 0; i < s0->n; i++) {
      assert_int_equal(j->seen[r].v[i].rank, s0->v[i].rank);
      assert_int_equal(j->seen[r].v[i].step, s0->v[i].step);
      assert_int_equal(j->seen[r].v[i].flagged, s0->v[i].flagged);
    }
  }
  return s0;
}

/* One verdict: the slow rank's compute, flagged within its k = 5 steps
 * plus a few, at about its ratio. */
static void expect_slow_rank(const seen *s0) {
  assert_int_equal(s0->n, 1);
  const gt_failslow_verdict *v = &s0->v[0];
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
  expect_slow_rank(run_job(fx, "fsnamed", names, false));
  expect_slow_rank(run_job(fx, "fsworld", NULL, false));
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

/* The slow link 1-2 flagged within a few steps of its waits, rank 3
 * flagged slow beside it, and the link not cleared while it plays: the
 * waits it raised stay up. It was, five steps after the rank's flag, when
 * the link watch counted the steps with a rank flagged slow as steps with
 * no waits to blame on a link. Cleared k = 5 steps (and a few) after the
 * link is healed and the waits are gone, the rank still flagged. */
static void test_link_held_beside_slow_rank(void **state) {
  const seen *s0 = run_job(*state, "fslink", NULL, true);
  assert_int_equal(s0->n, 3);
  const gt_failslow_verdict *link = &s0->v[0], *slow = &s0->v[1], *healed = &s0->v[2];
  assert_int_equal(link->kind, GT_FAILSLOW_LINK);
  assert_true(link->flagged);
  assert_int_equal(link->rank, 1);
  assert_int_equal(link->peer, 2);
  assert_in_range(link->step, LINK_FROM + 2, LINK_FROM + 12);
  assert_int_equal(slow->kind, GT_FAILSLOW_COMPUTE);
  assert_true(slow->flagged);
  assert_int_equal(slow->rank, LATE_SLOW);
  assert_in_range(slow->step, LATE_FROM + 4, LATE_FROM + 10);
  assert_int_equal(healed->kind, GT_FAILSLOW_LINK);
  assert_false(healed->flagged);
  assert_int_equal(healed->rank, 1);
  assert_int_equal(healed->peer, 2);
  assert_in_range(healed->step, LINK_UNTIL + 4, LINK_UNTIL + 8);
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_records_name_ranks_as_launched),
                                     cmocka_unit_test(test_link_held_beside_slow_rank)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
