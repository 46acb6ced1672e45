/* Bad checkpoints and failing saves. Each case gets an error naming the
 * file or the tensor, and the newest good checkpoint still loads:
 * a truncated shard, a flipped bit, a missing manifest, a manifest of
 * another model, an unknown version, a directory that cannot be written,
 * a full disk (a small tmpfs; needs root), and a writer killed at random
 * points while saving. One process each; ranks are forked. The full disk
 * is a ctest test of its own (test_ckpt_bad_full_disk, argv[1] full-disk),
 * skipped (77) without root, so that the rest shows as passed there. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt_run.h"
#include "common/gt_skip.h"
#include "localkit/ranks.h"

static char *data, *tmp;

static int setup(void **state) {
  (void)state;
  data = cr_make_data();
  tmp = strdup(data);
  *strrchr(tmp, '/') = 0;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char mnt[4200];
  snprintf(mnt, sizeof mnt, "%s/tmpfs", tmp);
  umount2(mnt, MNT_DETACH); /* still mounted if the full-disk case failed half-way */
  cr_rmtree(tmp);
  free(tmp);
  free(data);
  return 0;
}

/* Shared memory for what a rank reports. */
typedef struct report {
  int load_status, loaded_step, save_status;
  char error[1024];
} report;

static report *new_report(void) { return harness_shared(sizeof(report)); }

/* A fresh root with committed checkpoints at steps 5 and 10. */
static char *make_source(const char *name) {
  char *dir = malloc(strlen(tmp) + 64);
  sprintf(dir, "%s/%s", tmp, name);
  cr_cfg cfg = {.data = data, .dir = dir, .s1 = 10, .save_every = 5};
  cr_run(1, &cfg);
  return dir;
}

/* Loads `path` (NULL: the newest that loads) into a model of width C. */
static report *try_load(const char *dir, const char *path, int C) {
  report *r = new_report();
  r->loaded_step = -1;
  cr_cfg cfg = {.data = data,
                .dir = dir,
                .s0 = -1,
                .load_path = path,
                .C = C,
                .load_status = &r->load_status,
                .load_error = r->error,
                .loaded_step = &r->loaded_step};
  cr_run(1, &cfg);
  print_message("load %s: %s: %s\n", path ? path : dir, gt_status_name(r->load_status), r->error);
  return r;
}

static void expect_error(const report *r, gt_status code, const char *a, const char *b) {
  assert_int_equal(r->load_status, code);
  assert_non_null(strstr(r->error, a));
  if (b) assert_non_null(strstr(r->error, b));
}

/* The newest committed checkpoint is unusable: an explicit load fails
 * with `code` and a message holding a and b; loading the newest falls
 * back to step 5. */
static void damaged_newest(const char *dir, gt_status code, const char *a, const char *b) {
  char step10[4200];
  snprintf(step10, sizeof step10, "%s/step-00000010", dir);
  expect_error(try_load(dir, step10, 0), code, a, b);
  report *r = try_load(dir, NULL, 0);
  assert_int_equal(r->load_status, GT_OK);
  assert_int_equal(r->loaded_step, 5);
}

static void shard_path(const char *dir, char *out, size_t cap) {
  snprintf(out, cap, "%s/step-00000010/shard-00000.bin", dir);
}

static void test_truncated_shard(void **state) {
  (void)state;
  char *dir = make_source("truncated"), shard[4200];
  shard_path(dir, shard, sizeof shard);
  struct stat st;
  assert_int_equal(stat(shard, &st), 0);
  assert_int_equal(truncate(shard, st.st_size / 2), 0);
  damaged_newest(dir, GT_EFORMAT, "truncated", "shard-00000.bin");
  free(dir);
}

static void test_flipped_bit(void **state) {
  (void)state;
  char *dir = make_source("flipped"), shard[4200];
  shard_path(dir, shard, sizeof shard);
  cr_flip_bit(shard, 4001, 0x10);
  damaged_newest(dir, GT_EFORMAT, "SHA-256", "tensor param/");
  free(dir);
}

static void test_missing_manifest(void **state) {
  (void)state;
  char *dir = make_source("missing"), path[4200];
  snprintf(path, sizeof path, "%s/step-00000010/MANIFEST", dir);
  assert_int_equal(unlink(path), 0);
  damaged_newest(dir, GT_ENOTFOUND, "MANIFEST is missing", NULL);
  int steps[4], n;
  assert_int_equal(gt_ckpt_list(dir, steps, 4, &n), GT_OK);
  assert_int_equal(n, 1); /* the directory without a manifest is not a checkpoint */
  assert_int_equal(steps[0], 5);
  free(dir);
}

static void test_manifest_of_another_model(void **state) {
  (void)state;
  char *dir = make_source("other");
  report *r = try_load(dir, NULL, 48); /* the same layers, 48 wide instead of 32 */
  expect_error(r, GT_EFORMAT, "tensor param/", "in this model");
  free(dir);
}

static void test_unknown_version(void **state) {
  (void)state;
  char *dir = make_source("version"), path[8400], step10[4200];
  snprintf(step10, sizeof step10, "%s/step-00000010", dir);
  snprintf(path, sizeof path, "%s/MANIFEST", step10);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char v[4] = {99, 0, 0, 0};
  assert_int_equal(pwrite(fd, v, 4, 8), 4);
  close(fd);
  damaged_newest(dir, GT_EFORMAT, "format version 99", "MANIFEST");
  free(dir);
}

/* A save that fails is reported, the run trains to its end anyway. */
static report *run_failing_saves(const char *dir, int steps) {
  report *r = new_report();
  cr_state out = cr_state_new(NULL);
  cr_cfg cfg = {.data = data, .dir = dir, .s1 = steps, .save_every = 5, .save_status = &r->save_status, .final = out};
  cr_run(1, &cfg);
  assert_true(out.p->losses[steps - 1] > 0); /* the last step ran */
  return r;
}

static void test_unwritable_directory(void **state) {
  (void)state;
  char file[4200], dir[4300];
  snprintf(file, sizeof file, "%s/a-file", tmp);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(dir, sizeof dir, "%s/ckpt", file); /* its parent is not a directory: nobody, root included, can write */
  report *r = run_failing_saves(dir, 10);
  assert_int_not_equal(r->save_status, GT_OK);
  int n = -1, steps[1];
  gt_status ls = gt_ckpt_list(dir, steps, 1, &n); /* the root cannot even be listed */
  assert_true(ls != GT_OK || n == 0);
}

static long du(const char *dir) {
  char path[8400];
  struct stat a, b;
  snprintf(path, sizeof path, "%s/shard-00000.bin", dir);
  if (stat(path, &a)) return -1;
  snprintf(path, sizeof path, "%s/MANIFEST", dir);
  if (stat(path, &b)) return -1;
  return (long)(a.st_size + b.st_size);
}

static void test_full_disk(void **state) {
  (void)state;
  /* A tmpfs room for one checkpoint and a half: the save at step 5 fits,
   * the one at step 10 runs out of space. */
  char *src = make_source("measure"), step5[4200];
  snprintf(step5, sizeof step5, "%s/step-00000005", src);
  long one = du(step5);
  assert_true(one > 0);
  char mnt[4200];
  snprintf(mnt, sizeof mnt, "%s/tmpfs", tmp);
  assert_int_equal(mkdir(mnt, 0755), 0);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%ld", (one * 3 / 2 + 4095) / 4096 * 4096);
  if (mount("tmpfs", mnt, "tmpfs", 0, opts) != 0) {
    free(src);
    SKIP_CASE("cannot mount a tmpfs here (%s)", strerror(errno));
  }
  report *r = run_failing_saves(mnt, 10);
  report *l = try_load(mnt, NULL, 0);
  umount2(mnt, MNT_DETACH);
  assert_int_not_equal(r->save_status, GT_OK);
  assert_int_equal(l->load_status, GT_OK);
  assert_int_equal(l->loaded_step, 5);
  free(src);
}

/* A writer SIGKILLed at random moments, again and again, each time
 * resuming from the newest committed checkpoint and saving every step:
 * after every kill the newest committed checkpoint loads. */
static void test_kill_during_save(void **state) {
  (void)state;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/killed", tmp);
  srand((unsigned)time(NULL));
  int newest = 0;
  for (int round = 0; round < 6; round++) {
    cr_cfg cfg = {.data = data, .dir = dir, .s0 = -1, .load_if_any = true, .s1 = 100000, .save_every = 1, .keep = 2};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(cr_rank(0, 1, &cfg));
    struct timespec ts = {0, (long)(50 + rand() % 400) * 1000000L};
    nanosleep(&ts, NULL); /* the kill's random moment */
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    int steps[8], n;
    assert_int_equal(gt_ckpt_list(dir, steps, 8, &n), GT_OK);
    if (n == 0) continue; /* killed before its first save */
    assert_true(n <= 3);  /* keep 2, and one may have committed before the retention ran */
    assert_true(steps[0] >= newest);
    newest = steps[0];
    report *r = try_load(dir, NULL, 0);
    assert_int_equal(r->load_status, GT_OK);
    assert_int_equal(r->loaded_step, newest);
  }
  print_message("newest committed checkpoint after 6 kills: step %d\n", newest);
  assert_true(newest > 0);
}

/* No argument: every case but the full disk; `full-disk`: that one. */
int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "full-disk")) {
    if (geteuid() != 0) {
      fprintf(stderr, "mounting a small tmpfs needs root: skipping\n");
      return 77;
    }
    const struct CMUnitTest full[] = {cmocka_unit_test(test_full_disk)};
    return gt_test_exit(cmocka_run_group_tests(full, setup, teardown));
  }
  if (argc != 1) {
    fprintf(stderr, "usage: %s [full-disk]\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncated_shard),  cmocka_unit_test(test_flipped_bit),
      cmocka_unit_test(test_missing_manifest), cmocka_unit_test(test_manifest_of_another_model),
      cmocka_unit_test(test_unknown_version),  cmocka_unit_test(test_unwritable_directory),
      cmocka_unit_test(test_kill_during_save),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
