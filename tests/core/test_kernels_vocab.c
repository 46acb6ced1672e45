/* The kernels over a slice of the vocabulary: the vocabulary cut into P
 * slices, each computed as a rank would, and the slices combined as the
 * collectives would (here, on the host), must give what the
 * whole-vocabulary kernels give. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/test_kernels.h"
#include "core/backend_engine.h"

static const int P = 3;

static void test_embedding_slice_case(int B, int T, int C, int V) {
  int N = B * T, Vp = V / P;
  int32_t *tok = kt_xmalloc((size_t)N * sizeof *tok);
  for (int i = 0; i < N; i++) tok[i] = kt_randint(V);
  float *wte = kt_randn_alloc((size_t)V * C, 1.0f), *wpe = kt_randn_alloc((size_t)T * C, 1.0f);
  float *dout = kt_randn_alloc((size_t)N * C, 1.0f);
  float *want = kt_xmalloc((size_t)N * C * sizeof(float)), *got = calloc((size_t)N * C, sizeof(float));
  float *part = kt_xmalloc((size_t)N * C * sizeof(float));
  int32_t *dtok = kt_dput(kt_be, tok, (size_t)N * sizeof *tok);
  float *dwte = kt_dput(kt_be, wte, (size_t)V * C * sizeof(float)),
        *dwpe = kt_dput(kt_be, wpe, (size_t)T * C * sizeof(float));
  float *dout_d = kt_dput(kt_be, dout, (size_t)N * C * sizeof(float)),
        *dres = kt_dput(kt_be, NULL, (size_t)N * C * sizeof(float));
  KT_OK(gt_op_embedding_forward(kt_be, dres, dtok, dwte, dwpe, B, T, C));
  kt_dget(kt_be, want, dres, (size_t)N * C * sizeof(float));
  /* Forward: every rank's part, position table on rank 0, summed. */
  for (int r = 0; r < P; r++) {
    KT_OK(gt_op_embedding_slice_forward(kt_be, dres, dtok, dwte + (size_t)r * Vp * C, r * Vp, Vp, r == 0 ? dwpe : NULL,
                                        B, T, C));
    kt_dget(kt_be, part, dres, (size_t)N * C * sizeof(float));
    for (int i = 0; i < N * C; i++) got[i] += part[i];
  }
  kt_check_f("embedding_slice_forward", got, want, (size_t)N * C, 1e-6);
  /* Backward: each rank's rows of the table gradient, from the whole dout. */
  float *gw = kt_dput(kt_be, NULL, (size_t)V * C * sizeof(float)),
        *gp = kt_dput(kt_be, NULL, (size_t)T * C * sizeof(float));
  KT_OK(gt_op_embedding_backward(kt_be, gw, gp, dout_d, dtok, B, T, C));
  float *want_w = kt_xmalloc((size_t)V * C * sizeof(float)), *got_w = kt_xmalloc((size_t)V * C * sizeof(float));
  kt_dget(kt_be, want_w, gw, (size_t)V * C * sizeof(float));
  float *gw2 = kt_dput(kt_be, NULL, (size_t)V * C * sizeof(float));
  for (int r = 0; r < P; r++)
    KT_OK(gt_op_embedding_slice_backward(kt_be, gw2 + (size_t)r * Vp * C, NULL, dout_d, dtok, r * Vp, Vp, B, T, C));
  kt_dget(kt_be, got_w, gw2, (size_t)V * C * sizeof(float));
  kt_check_exact("embedding_slice_backward", got_w, want_w, (size_t)V * C);
  free(tok);
  free(wte);
  free(wpe);
  free(dout);
  free(want);
  free(got);
  free(part);
  free(want_w);
  free(got_w);
  kt_dfree(kt_be, dtok);
  kt_dfree(kt_be, dwte);
  kt_dfree(kt_be, dwpe);
  kt_dfree(kt_be, dout_d);
  kt_dfree(kt_be, dres);
  kt_dfree(kt_be, gw);
  kt_dfree(kt_be, gp);
  kt_dfree(kt_be, gw2);
}

void test_embedding_slice(void **state) {
  (void)state;
  kt_seed(21);
  test_embedding_slice_case(2, 5, 7, 9);
  test_embedding_slice_case(1, 1, 1, 3);
  test_embedding_slice_case(3, 4, 33, 30);
}

static void test_xent_slice_case(int N, int V) {
  int Vp = V / P;
  float *logits = kt_randn_alloc((size_t)N * V, 3.0f);
  int32_t *tg = kt_xmalloc((size_t)N * sizeof *tg);
  for (int i = 0; i < N; i++) tg[i] = i % 4 == 3 ? -1 : kt_randint(V);
  /* The whole-vocabulary reference. */
  float *dl = kt_dput(kt_be, logits, (size_t)N * V * sizeof(float)),
        *dloss = kt_dput(kt_be, NULL, (size_t)N * sizeof(float));
  int32_t *dtg = kt_dput(kt_be, tg, (size_t)N * sizeof *tg);
  KT_OK(gt_op_softmax_xent_forward(kt_be, dloss, dl, dl, dtg, N, V));
  float *want_loss = kt_xmalloc((size_t)N * sizeof(float)), *want_p = kt_xmalloc((size_t)N * V * sizeof(float));
  kt_dget(kt_be, want_loss, dloss, (size_t)N * sizeof(float));
  kt_dget(kt_be, want_p, dl, (size_t)N * V * sizeof(float));
  KT_OK(gt_op_softmax_xent_backward(kt_be, dl, dl, dtg, 0.25f, N, V));
  float *want_d = kt_xmalloc((size_t)N * V * sizeof(float));
  kt_dget(kt_be, want_d, dl, (size_t)N * V * sizeof(float));
  /* Each rank's columns, as a rank holds them: contiguous (N, Vp). */
  float *stats_all = kt_xmalloc((size_t)P * 2 * N * sizeof(float)), *tsum = calloc((size_t)N, sizeof(float));
  float *cols = kt_xmalloc((size_t)N * Vp * sizeof(float)), *tl = kt_xmalloc((size_t)N * sizeof(float));
  float *dcols[3], *dstats = kt_dput(kt_be, NULL, (size_t)2 * N * sizeof(float)),
                   *dtl = kt_dput(kt_be, NULL, (size_t)N * sizeof(float));
  for (int r = 0; r < P; r++) {
    for (int i = 0; i < N; i++)
      memcpy(cols + (size_t)i * Vp, logits + (size_t)i * V + (size_t)r * Vp, (size_t)Vp * sizeof(float));
    dcols[r] = kt_dput(kt_be, cols, (size_t)N * Vp * sizeof(float));
    KT_OK(gt_op_xent_slice_stats(kt_be, dstats, dtl, dcols[r], dtg, r * Vp, N, Vp));
    kt_dget(kt_be, stats_all + (size_t)r * 2 * N, dstats, (size_t)2 * N * sizeof(float));
    kt_dget(kt_be, tl, dtl, (size_t)N * sizeof(float));
    for (int i = 0; i < N; i++) tsum[i] += tl[i]; /* the all-reduce */
  }
  float *dall = kt_dput(kt_be, stats_all, (size_t)P * 2 * N * sizeof(float)),
        *dts = kt_dput(kt_be, tsum, (size_t)N * sizeof(float));
  float *got_p = kt_xmalloc((size_t)N * V * sizeof(float)), *got_d = kt_xmalloc((size_t)N * V * sizeof(float));
  float *got_loss = kt_xmalloc((size_t)N * sizeof(float));
  for (int r = 0; r < P; r++) {
    KT_OK(gt_op_xent_slice_finish(kt_be, dloss, dcols[r], dcols[r], dall, P, dts, dtg, V, N, Vp));
    kt_dget(kt_be, got_loss, dloss, (size_t)N * sizeof(float));
    kt_check_f("xent_slice_finish loss", got_loss, want_loss, (size_t)N, 1e-5);
    kt_dget(kt_be, cols, dcols[r], (size_t)N * Vp * sizeof(float));
    for (int i = 0; i < N; i++)
      memcpy(got_p + (size_t)i * V + (size_t)r * Vp, cols + (size_t)i * Vp, (size_t)Vp * sizeof(float));
    KT_OK(gt_op_softmax_xent_slice_backward(kt_be, dcols[r], dcols[r], dtg, r * Vp, 0.25f, N, Vp));
    kt_dget(kt_be, cols, dcols[r], (size_t)N * Vp * sizeof(float));
    for (int i = 0; i < N; i++)
      memcpy(got_d + (size_t)i * V + (size_t)r * Vp, cols + (size_t)i * Vp, (size_t)Vp * sizeof(float));
  }
  kt_check_f("xent_slice_finish probabilities", got_p, want_p, (size_t)N * V, 1e-5);
  kt_check_f("softmax_xent_slice_backward", got_d, want_d, (size_t)N * V, 1e-5);
  /* A target beyond the whole vocabulary is an error (on CUDA only with
   * GT_CUDA_CHECK_IDS=1: the host checks targets before upload). */
  tg[0] = V;
  int32_t *bad = kt_dput(kt_be, tg, (size_t)N * sizeof *tg);
  if (gt_backend_kind(kt_be) == GT_DEVICE_CPU)
    assert_int_equal(gt_op_xent_slice_finish(kt_be, dloss, dcols[0], dcols[0], dall, P, dts, bad, V, N, Vp), GT_ERANGE);
  for (int r = 0; r < P; r++) kt_dfree(kt_be, dcols[r]);
  kt_dfree(kt_be, bad);
  kt_dfree(kt_be, dl);
  kt_dfree(kt_be, dloss);
  kt_dfree(kt_be, dtg);
  kt_dfree(kt_be, dstats);
  kt_dfree(kt_be, dtl);
  kt_dfree(kt_be, dall);
  kt_dfree(kt_be, dts);
  free(logits);
  free(tg);
  free(want_loss);
  free(want_p);
  free(want_d);
  free(stats_all);
  free(tsum);
  free(cols);
  free(tl);
  free(got_p);
  free(got_d);
  free(got_loss);
}

void test_xent_slice(void **state) {
  (void)state;
  kt_seed(22);
  test_xent_slice_case(5, 9);
  test_xent_slice_case(1, 3);
  test_xent_slice_case(17, 333);
}
