/* Resuming and resharding. 20 steps saving at step 10, then a resume from
 * step 10 to 20 at the same layout, give bit-identical losses, parameters
 * and optimizer state, at dp=2,tp=2, at dp=2,pp=2 (1F1B), and with ZeRO-1.
 * A checkpoint taken at dp=2,tp=2 loads at tp=4, at dp=4 with ZeRO-1, at
 * pp=2 and on one process, and one taken at pp=4 loads at dp=2,tp=2, each
 * with exactly the source's parameters and optimizer state; training then
 * goes on with the source's losses within the hybrid tests' 1e-5. ZeRO-2
 * (sharded gradients) resumes bit-identically, a checkpoint it took at
 * dp=4 loads at ZeRO-1, and one ZeRO-1 took at dp=2,tp=2 loads at ZeRO-2
 * dp=4, each exactly. ZeRO-3 (sharded parameters, written by each rank's
 * range) does the same: it resumes bit-identically at dp=4, loads at
 * ZeRO-1, and loads what ZeRO-1 took, each exactly.
 *
 * Ranks are forked (tests/comm/harness); each writes what it holds into
 * shared memory in the single-process layout, so states taken at different
 * layouts compare float for float. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "localkit/ranks.h"

#include "ckpt/ckpt_run.h"

enum { SAVE = 10 };

/* A run of 20 steps saving at 10 (cached per layout: the reshard tests
 * load what the resume tests saved). */
typedef struct source {
  const char *layout;
  bool zero1;
  int zero; /* the ZeRO stage, 0: zero1's */
  int world;
  uint64_t chunk; /* bytes per hashed chunk (0: the default) */
  char *dir;
  cr_state saved, final;
} source;

static source sources[] = {
    {.layout = "dp=2,tp=2", .world = 4},
    {.layout = "dp=2,pp=2", .world = 4},
    {.layout = "dp=2,tp=2", .zero1 = true, .world = 4},
    {.layout = "pp=4", .world = 4},
    {.layout = NULL, .world = 1, .chunk = 256},
    {.layout = "dp=4", .zero = 2, .world = 4},
    {.layout = "dp=4", .zero = 3, .world = 4},
};

static source *get_source(int i) {
  source *s = &sources[i];
  if (s->dir) return s;
  s->dir = cr_fixture_dir("ck");
  s->saved = cr_state_new(cr_fx.layout);
  s->final = cr_state_new(cr_fx.layout);
  cr_cfg cfg = {.layout = s->layout,
                .zero1 = s->zero1,
                .zero = s->zero,
                .data = cr_fx.data,
                .dir = s->dir,
                .s1 = CR_STEPS,
                .save_at = SAVE,
                .saved = s->saved,
                .final = s->final,
                .chunk_bytes = s->chunk};
  cr_run(s->world, &cfg);
  return s;
}

static void resume_case(int i) {
  source *s = get_source(i);
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  cr_cfg cfg = {.layout = s->layout,
                .zero1 = s->zero1,
                .zero = s->zero,
                .data = cr_fx.data,
                .dir = s->dir,
                .s0 = SAVE,
                .s1 = CR_STEPS,
                .loaded = loaded,
                .final = final};
  cr_run(s->world, &cfg);
  char what[96];
  snprintf(what, sizeof what, "%s%s resumed at step %d", s->layout,
           s->zero == 3   ? " + ZeRO-3"
           : s->zero == 2 ? " + ZeRO-2"
           : s->zero1     ? " + ZeRO-1"
                          : "",
           SAVE);
  cr_fixture_same_state(what, &s->saved, &loaded);
  cr_fixture_same_state(what, &s->final, &final);
  /* ... and the ten steps after the load moved them. */
  assert_true(memcmp(s->saved.p->params, final.p->params, cr_fx.layout->nparams * sizeof(float)));
  for (int k = SAVE; k < CR_STEPS; k++) assert_memory_equal(&s->final.p->losses[k], &final.p->losses[k], sizeof(float));
  print_message("%s: losses of steps %d..%d bit-identical (%.6f .. %.6f)\n", what, SAVE, CR_STEPS - 1,
                final.p->losses[SAVE], final.p->losses[CR_STEPS - 1]);
}

static void test_resume_dp2_tp2(void **state) {
  (void)state;
  resume_case(0);
}
static void test_resume_dp2_pp2_1f1b(void **state) {
  (void)state;
  resume_case(1);
}
static void test_resume_dp2_tp2_zero1(void **state) {
  (void)state;
  resume_case(2);
}

/* Loads source i's checkpoint at another layout: exactly its state, then
 * its losses within the cross-layout tolerance. */
static void reshard_zero_case(int i, const char *to, int zero, int world) {
  source *s = get_source(i);
  cr_state loaded = cr_state_new(cr_fx.layout), final = cr_state_new(cr_fx.layout);
  cr_cfg cfg = {.layout = to,
                .zero = zero,
                .data = cr_fx.data,
                .dir = s->dir,
                .s0 = SAVE,
                .s1 = CR_STEPS,
                .loaded = loaded,
                .final = final};
  cr_run(world, &cfg);
  char what[96];
  snprintf(what, sizeof what, "%s%s -> %s%s", s->layout,
           s->zero == 3   ? " + ZeRO-3"
           : s->zero == 2 ? " + ZeRO-2"
           : s->zero1     ? " + ZeRO-1"
                          : "",
           to ? to : "one process",
           zero == 3   ? " + ZeRO-3"
           : zero == 2 ? " + ZeRO-2"
           : zero == 1 ? " + ZeRO-1"
                       : "");
  cr_fixture_same_state(what, &s->saved, &loaded);
  double worst = 0;
  for (int k = SAVE; k < CR_STEPS; k++) {
    double d = fabs((double) final.p->losses[k] - s->final.p->losses[k]) / fabs((double)s->final.p->losses[k]);
    worst = d > worst ? d : worst;
  }
  print_message("%s: losses of steps %d..%d within %.2e of the source's\n", what, SAVE, CR_STEPS - 1, worst);
  assert_true(worst <= 1e-5);
}

static void reshard_case(int i, const char *to, bool zero1, int world) { reshard_zero_case(i, to, zero1, world); }

static void test_resume_dp4_zero2(void **state) {
  (void)state;
  resume_case(5);
}
static void test_reshard_dp4_zero2_to_zero1(void **state) {
  (void)state;
  reshard_zero_case(5, "dp=4", 1, 4);
}
static void test_reshard_dp2_tp2_zero1_to_dp4_zero2(void **state) {
  (void)state;
  reshard_zero_case(2, "dp=4", 2, 4);
}
static void test_resume_dp4_zero3(void **state) {
  (void)state;
  resume_case(6);
}
static void test_reshard_dp4_zero3_to_zero1(void **state) {
  (void)state;
  reshard_zero_case(6, "dp=4", 1, 4);
}
static void test_reshard_dp2_tp2_zero1_to_dp4_zero3(void **state) {
  (void)state;
  reshard_zero_case(2, "dp=4", 3, 4);
}
static void test_reshard_dp2_tp2_to_tp4(void **state) {
  (void)state;
  reshard_case(0, "tp=4", false, 4);
}
static void test_reshard_dp2_tp2_to_dp4_zero1(void **state) {
  (void)state;
  reshard_case(0, "dp=4", true, 4);
}
static void test_reshard_dp2_tp2_to_pp2(void **state) {
  (void)state;
  reshard_case(0, "pp=2", false, 2);
}
static void test_reshard_dp2_tp2_to_one_process(void **state) {
  (void)state;
  reshard_case(0, NULL, false, 1);
}
static void test_reshard_pp4_to_dp2_tp2(void **state) {
  (void)state;
  reshard_case(3, "dp=2,tp=2", false, 4);
}

/* A rank reads only the chunks that hold its part. One process saved P
 * bytes of parameters and 2P of AdamW moments, as one slice per tensor in
 * 256-byte chunks. Loaded at dp=4 with ZeRO-1, every rank needs all the
 * parameters and a quarter of the moments: 6P bytes over the four ranks,
 * plus at most a chunk at each end of a rank's range in each tensor it
 * cuts. Reading whole slices would take 12P. */
static void test_reshard_reads_only_needed_chunks(void **state) {
  (void)state;
  source *s = get_source(4);
  char shard[4300];
  snprintf(shard, sizeof shard, "%s/step-%08d/shard-00000.bin", s->dir, SAVE);
  struct stat st;
  assert_int_equal(stat(shard, &st), 0);
  unsigned long long P = (unsigned long long)st.st_size / 3, chunk = s->chunk;
  unsigned long long *bytes = harness_shared(4 * sizeof *bytes);
  cr_state loaded = cr_state_new(cr_fx.layout);
  cr_cfg cfg = {.layout = "dp=4",
                .zero1 = true,
                .data = cr_fx.data,
                .dir = s->dir,
                .s0 = SAVE,
                .s1 = SAVE,
                .loaded = loaded,
                .bytes_read = bytes};
  cr_run(4, &cfg);
  cr_fixture_same_state("one process -> dp=4 + ZeRO-1", &s->saved, &loaded);
  unsigned long long sum = 0;
  for (int r = 0; r < 4; r++) {
    print_message("rank %d read %llu bytes (parameters %llu, all moments %llu)\n", r, bytes[r], P, 2 * P);
    assert_true(bytes[r] >= P && bytes[r] < 2 * P);
    sum += bytes[r];
  }
  /* Two range ends per rank, in each of the two moments: a partial chunk each. */
  assert_true(sum >= 6 * P && sum <= 6 * P + 4 * 2 * 2 * chunk);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resume_dp2_tp2),
      cmocka_unit_test(test_resume_dp2_pp2_1f1b),
      cmocka_unit_test(test_resume_dp2_tp2_zero1),
      cmocka_unit_test(test_reshard_dp2_tp2_to_tp4),
      cmocka_unit_test(test_reshard_dp2_tp2_to_dp4_zero1),
      cmocka_unit_test(test_reshard_dp2_tp2_to_pp2),
      cmocka_unit_test(test_reshard_dp2_tp2_to_one_process),
      cmocka_unit_test(test_reshard_pp4_to_dp2_tp2),
      cmocka_unit_test(test_reshard_reads_only_needed_chunks),
      cmocka_unit_test(test_resume_dp4_zero2),
      cmocka_unit_test(test_reshard_dp4_zero2_to_zero1),
      cmocka_unit_test(test_reshard_dp2_tp2_zero1_to_dp4_zero2),
      cmocka_unit_test(test_resume_dp4_zero3),
      cmocka_unit_test(test_reshard_dp4_zero3_to_zero1),
      cmocka_unit_test(test_reshard_dp2_tp2_zero1_to_dp4_zero3),
  };
  int rc = cmocka_run_group_tests(tests, cr_fixture_setup, cr_fixture_teardown);
  for (size_t i = 0; i < sizeof sources / sizeof *sources; i++)
    if (sources[i].dir) {
      cr_rmtree(sources[i].dir);
      free(sources[i].dir);
    }
  return rc;
}
