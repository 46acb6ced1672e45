/* A committed manifest's slices must tile each tensor. A manifest whose
 * slices overlap where another is missing (the element counts balance) is
 * refused when read, naming the tensor, as is one with a gap; slices that
 * tile a tensor, whole rows or ZeRO-1's cut boxes, are accepted; a shape
 * whose size wraps 64 bits is refused. White box: the manifests are built
 * with the layer's own writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/ckpt_run.h"
#include "giant/log.h"
#include "giant/engine/checkpoint.h"

typedef struct box2 {
  int64_t r0, r1, c0, c1;
} box2;

/* A 4x6 tensor "param/w" stored as the given boxes, written to dir and
 * read back. */
static gt_status write_and_read(const char *dir, const box2 *boxes, int n) {
  ck_manifest m = {.chunk = GT_CKPT_CHUNK_DEFAULT};
  int64_t shape[2] = {4, 6};
  int t, f;
  assert_int_equal(ck_manifest_add_tensor(&m, "param/w", 2, shape, &t), GT_OK);
  assert_int_equal(ck_manifest_add_file(&m, "shard-00000.bin", &f), GT_OK);
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    ck_slice s = {.tensor = t,
                  .file = f,
                  .offset = off,
                  .box = {.ndim = 2, .lo = {boxes[i].r0, boxes[i].c0}, .hi = {boxes[i].r1, boxes[i].c1}}};
    s.length = ck_box_volume(&s.box) * sizeof(float);
    off += s.length;
    assert_int_equal(ck_manifest_add_slice(&m, &s, NULL), GT_OK);
  }
  assert_int_equal(ck_manifest_write(dir, &m), GT_OK);
  ck_manifest_free(&m);
  ck_manifest back;
  gt_status s = ck_manifest_read(dir, &back);
  if (s == GT_OK) ck_manifest_free(&back);
  return s;
}

static char dir[] = "/tmp/giant-ckpt-cover-XXXXXX";

static int setup(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  cr_rmtree(dir);
  return 0;
}

static void test_tiling_accepted(void **state) {
  (void)state;
  box2 rows[] = {{0, 2, 0, 6}, {2, 4, 0, 6}};
  assert_int_equal(write_and_read(dir, rows, 2), GT_OK);
  /* A ZeRO-1 shard boundary inside row 1: a run of a row-major block cut
   * into boxes, next to its neighbour's. */
  box2 cut[] = {{0, 1, 0, 6}, {1, 2, 0, 3}, {1, 2, 3, 6}, {2, 4, 0, 6}};
  assert_int_equal(write_and_read(dir, cut, 4), GT_OK);
}

static void test_overlap_hiding_a_gap_refused(void **state) {
  (void)state;
  box2 bad[] = {{0, 2, 0, 6}, {1, 3, 0, 6}, {3, 4, 0, 6}};
  box2 bad2[] = {{0, 2, 0, 6}, {1, 2, 0, 6}, {2, 3, 0, 6}};
  assert_int_equal(write_and_read(dir, bad, 3), GT_EFORMAT); /* 12 + 12 + 6: overlap and a surplus */
  assert_non_null(strstr(gt_last_error(), "overlap"));
  assert_int_equal(write_and_read(dir, bad2, 3), GT_EFORMAT); /* 24 elements, row 3 missing, row 1 twice */
  assert_non_null(strstr(gt_last_error(), "two slices of tensor param/w overlap"));
  assert_non_null(strstr(gt_last_error(), "MANIFEST"));
}

static void test_gap_refused(void **state) {
  (void)state;
  box2 gap[] = {{0, 2, 0, 6}, {2, 4, 0, 5}};
  assert_int_equal(write_and_read(dir, gap, 2), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "hold 22 of its 24 elements"));
}

/* A shape whose size wraps 64 bits: 4 x (2^62 + 1) floats "are" 4, and two
 * slices of (2^62 + 1) x 2 "hold" 8 bytes each, so the counts balance and
 * reading the tensor would loop for ever (found writing fuzz_ckpt_manifest). */
static void test_wrapping_shape_refused(void **state) {
  (void)state;
  ck_manifest m = {.chunk = GT_CKPT_CHUNK_DEFAULT};
  int64_t rows = ((int64_t)1 << 62) + 1, shape[2] = {rows, 4};
  int t, f;
  assert_int_equal(ck_manifest_add_tensor(&m, "param/w", 2, shape, &t), GT_OK);
  assert_int_equal(ck_manifest_add_file(&m, "shard-00000.bin", &f), GT_OK);
  for (int i = 0; i < 2; i++) {
    ck_slice s = {
        .tensor = t, .file = f, .offset = 8u * i, .box = {.ndim = 2, .lo = {0, 2 * i}, .hi = {rows, 2 * i + 2}}};
    s.length = ck_box_volume(&s.box) * sizeof(float);
    assert_int_equal(s.length, 8); /* wrapped */
    assert_int_equal(ck_manifest_add_slice(&m, &s, NULL), GT_OK);
  }
  assert_int_equal(ck_manifest_write(dir, &m), GT_OK);
  ck_manifest_free(&m);
  ck_manifest back;
  assert_int_equal(ck_manifest_read(dir, &back), GT_EFORMAT);
  assert_non_null(strstr(gt_last_error(), "tensor param/w has a negative or impossibly large dimension"));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_tiling_accepted),
                                     cmocka_unit_test(test_overlap_hiding_a_gap_refused),
                                     cmocka_unit_test(test_gap_refused), cmocka_unit_test(test_wrapping_shape_refused)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
