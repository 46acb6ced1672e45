/* The CUDA backend beyond the kernel suite: device selection and its
 * errors, arenas reaching a steady state without device allocations,
 * copies ordered across streams by events (large pinned transfers on the
 * copy stream among them), out-of-memory reporting, the bf16 GEMM path
 * (gemm_ex) against a double reference, bad ids that must fail before
 * anything is written (GT_CUDA_CHECK_IDS=1) or be skipped by the kernels
 * (by default). Skipped (77) without a GPU.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/arena.h"
#include "giant/backend.h"
#include "giant/tensor.h"
#include "core/backend_engine.h"
#include "giant/engine/device.h"
#ifdef GIANT_HAVE_CUDA
#include "core/cuda/handles.h"
#endif

static gt_backend *be;

#define OK(expr)                                                                         \
  do {                                                                                   \
    gt_status s_ = (expr);                                                               \
    if (s_ != GT_OK) fail_msg("%s: %s: %s", #expr, gt_status_name(s_), gt_last_error()); \
  } while (0)

static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

static void *dput(const void *host, size_t bytes) {
  void *d = NULL;
  OK(gt_backend_alloc(be, bytes, &d));
  OK(gt_backend_upload(be, d, host, bytes));
  return d;
}

static gt_status create_cuda(int device, gt_backend **out) {
  gt_backend_config cfg = {.kind = GT_DEVICE_CUDA, .device = device, .num_threads = 0};
  return gt_backend_create(&cfg, out);
}

static void test_device_selection(void **state) {
  (void)state;
  gt_backend *b = NULL;
  assert_int_equal(create_cuda(1000, &b), GT_EINVAL);
  assert_null(b);
  assert_non_null(strstr(gt_last_error(), "CUDA device 1000 requested"));
  assert_int_equal(create_cuda(-7, &b), GT_EINVAL);

  setenv("GT_LOCAL_RANK", "zero", 1);
  assert_int_equal(create_cuda(-1, &b), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "GT_LOCAL_RANK='zero'"));
  setenv("GT_LOCAL_RANK", "1000", 1);
  assert_int_equal(create_cuda(-1, &b), GT_EINVAL);
  assert_non_null(strstr(gt_last_error(), "CUDA device 1000 requested"));
  setenv("GT_LOCAL_RANK", "0", 1);
  OK(create_cuda(-1, &b));
  assert_int_equal(gt_backend_device(b), 0);
  assert_string_equal(gt_backend_name(b), "cuda:0");
  assert_int_equal(gt_backend_kind(b), GT_DEVICE_CUDA);
  assert_true(gt_backend_has_mixed_precision(b));
  gt_backend_destroy(b);
  unsetenv("GT_LOCAL_RANK");
  OK(create_cuda(-1, &b));
  assert_int_equal(gt_backend_device(b), 0);
  gt_backend_destroy(b);

  gt_backend_config cfg;
  OK(gt_device_parse("cuda:0", &cfg));
  OK(gt_backend_create(&cfg, &b));
  assert_string_equal(gt_backend_name(b), "cuda:0");
  gt_backend_destroy(b);
}

static void test_arena_steady_state(void **state) {
  (void)state;
  gt_arena *a;
  OK(gt_arena_create(be, 0, &a));
  const size_t sizes[] = {1000, 4096, 1 << 20, (3 << 20) + 17, 256, 77777};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  size_t after_first = 0;
  for (int step = 0; step < 4; step++) {
    void *p[NS];
    for (int i = 0; i < NS; i++) {
      OK(gt_arena_alloc(a, sizes[i], &p[i]));
      OK(gt_backend_memset(be, p[i], step, sizes[i], gt_backend_compute_stream(be)));
    }
    OK(gt_stream_sync(be, gt_backend_compute_stream(be)));
    for (int i = NS - 1; i >= 0; i--) gt_arena_free(a, p[i]);
    if (step == 0) after_first = gt_arena_device_allocs(a);
    assert_int_equal(gt_arena_device_allocs(a), after_first);
    assert_int_equal(gt_arena_current(a), 0);
  }
  assert_int_equal(after_first, NS);
  assert_true(gt_arena_peak(a) >= (3 << 20) + (1 << 20));
  gt_arena_destroy(a);

  /* A budget below the request fails with the budget named. */
  OK(gt_arena_create(be, 1 << 20, &a));
  void *p = NULL;
  assert_int_equal(gt_arena_alloc(a, 2 << 20, &p), GT_ENOMEM);
  assert_non_null(strstr(gt_last_error(), "budget"));
  gt_arena_destroy(a);
}

static void test_out_of_memory(void **state) {
  (void)state;
  void *p = NULL;
  assert_int_equal(gt_backend_alloc(be, (size_t)1 << 50, &p), GT_ENOMEM);
  assert_non_null(strstr(gt_last_error(), "out of device memory"));
  /* The failure is not sticky: the device still works. */
  OK(gt_backend_alloc(be, 1 << 20, &p));
  OK(gt_backend_memset(be, p, 0, 1 << 20, gt_backend_compute_stream(be)));
  OK(gt_stream_sync(be, gt_backend_compute_stream(be)));
  gt_backend_free(be, p);
}

static void test_streams_and_events(void **state) {
  (void)state;
  enum { N = 1 << 20 };
  float *host, *back;
  OK(gt_backend_host_alloc(be, N * sizeof(float), (void **)&host));
  OK(gt_backend_host_alloc(be, N * sizeof(float), (void **)&back));
  for (int i = 0; i < N; i++) host[i] = (float)i;
  float *d, *d2;
  OK(gt_backend_alloc(be, N * sizeof(float), (void **)&d));
  OK(gt_backend_alloc(be, N * sizeof(float), (void **)&d2));
  gt_event *ev;
  OK(gt_event_create(be, &ev));
  /* Never recorded: waiting on it is a caller's bug, reported. */
  assert_int_equal(gt_stream_wait_event(be, gt_backend_compute_stream(be), ev), GT_ESTATE);
  assert_int_equal(gt_event_sync(be, ev), GT_ESTATE);

  /* Upload on the copy stream; compute waits for it, scales, copies D2D and
   * downloads. Without the event the scale could read stale memory. */
  OK(gt_backend_memcpy(be, d, host, N * sizeof(float), GT_COPY_H2D, gt_backend_copy_stream(be)));
  OK(gt_event_record(be, ev, gt_backend_copy_stream(be)));
  OK(gt_stream_wait_event(be, gt_backend_compute_stream(be), ev));
  OK(gt_op_scale(be, d, 2.0f, N));
  OK(gt_backend_memcpy(be, d2, d, N * sizeof(float), GT_COPY_D2D, gt_backend_compute_stream(be)));
  OK(gt_backend_memcpy(be, back, d2, N * sizeof(float), GT_COPY_D2H, gt_backend_compute_stream(be)));
  OK(gt_stream_sync(be, gt_backend_compute_stream(be)));
  for (int i = 0; i < N; i++) assert_true(back[i] == 2.0f * (float)i);

  /* A stream of our own, ordered after compute by an event. */
  gt_stream *s;
  OK(gt_stream_create(be, &s));
  OK(gt_op_scale(be, d2, 0.5f, N));
  OK(gt_event_record(be, ev, gt_backend_compute_stream(be)));
  OK(gt_stream_wait_event(be, s, ev));
  OK(gt_backend_memcpy(be, back, d2, N * sizeof(float), GT_COPY_D2H, s));
  OK(gt_event_record(be, ev, s));
  OK(gt_event_sync(be, ev));
  for (int i = 0; i < N; i++) assert_true(back[i] == (float)i);
  assert_int_equal(gt_backend_memcpy(be, back, d2, 4, (gt_copy_kind)9, s), GT_EINVAL);

#ifdef GIANT_HAVE_CUDA
  /* The raw handles for libraries that take CUDA streams (NCCL). */
  assert_non_null(gt_cuda_stream_handle(be, gt_backend_compute_stream(be)));
  assert_ptr_equal(gt_cuda_stream_handle(be, NULL), gt_cuda_stream_handle(be, gt_backend_compute_stream(be)));
  assert_ptr_not_equal(gt_cuda_stream_handle(be, s), gt_cuda_stream_handle(be, gt_backend_copy_stream(be)));
  assert_non_null(gt_cuda_event_handle(be, ev));
  gt_backend *cpu;
  gt_backend_config cc = {.kind = GT_DEVICE_CPU};
  OK(gt_backend_create(&cc, &cpu));
  assert_null(gt_cuda_stream_handle(cpu, gt_backend_compute_stream(cpu)));
  gt_backend_destroy(cpu);
#endif

  gt_stream_destroy(be, s);
  gt_event_destroy(be, ev);
  gt_backend_free(be, d);
  gt_backend_free(be, d2);
  gt_backend_host_free(be, host);
  gt_backend_host_free(be, back);
}

/* C = op(A) op(B) in double from bf16-rounded inputs, row-major, batched. */
static void ref_gemm(double *c, const float *a, const float *b, int m, int n, int k, int ta, int tb, int batch) {
  for (int i = 0; i < batch; i++)
    for (int r = 0; r < m; r++)
      for (int j = 0; j < n; j++) {
        double s = 0;
        for (int p = 0; p < k; p++) {
          double av = ta ? a[(size_t)i * m * k + (size_t)p * m + r] : a[(size_t)i * m * k + (size_t)r * k + p];
          double bv = tb ? b[(size_t)i * k * n + (size_t)j * k + p] : b[(size_t)i * k * n + (size_t)p * n + j];
          s += av * bv;
        }
        c[(size_t)i * m * n + (size_t)r * n + j] = s;
      }
}

static void check_gemm_ex(int m, int n, int k, int ta, int tb, int batch) {
  size_t na = (size_t)batch * m * k, nb = (size_t)batch * k * n, nc = (size_t)batch * m * n;
  float *a = xmalloc(na * sizeof *a), *b = xmalloc(nb * sizeof *b);
  uint16_t *a16 = xmalloc(na * 2), *b16 = xmalloc(nb * 2), *c16 = xmalloc(nc * 2);
  for (size_t i = 0; i < na; i++) {
    a16[i] = gt_f32_to_bf16(uniform());
    a[i] = gt_bf16_to_f32(a16[i]);
  }
  for (size_t i = 0; i < nb; i++) {
    b16[i] = gt_f32_to_bf16(uniform());
    b[i] = gt_bf16_to_f32(b16[i]);
  }
  double *want = xmalloc(nc * sizeof *want);
  ref_gemm(want, a, b, m, n, k, ta, tb, batch);
  void *da = dput(a16, na * 2), *db = dput(b16, nb * 2), *dc;
  OK(gt_backend_alloc(be, nc * sizeof(float), &dc));
  gt_gemm_ex_args g = {.trans_a = ta ? GT_TRANS : GT_NO_TRANS,
                       .trans_b = tb ? GT_TRANS : GT_NO_TRANS,
                       .m = m,
                       .n = n,
                       .k = k,
                       .alpha = 1.0f,
                       .beta = 0.0f,
                       .a = da,
                       .a_type = GT_BF16,
                       .lda = ta ? m : k,
                       .stride_a = (int64_t)m * k,
                       .b = db,
                       .b_type = GT_BF16,
                       .ldb = tb ? k : n,
                       .stride_b = (int64_t)k * n,
                       .c = dc,
                       .c_type = GT_F32,
                       .ldc = n,
                       .stride_c = (int64_t)m * n,
                       .batch = batch};
  OK(gt_op_gemm_ex(be, &g));
  float *got = xmalloc(nc * sizeof *got);
  OK(gt_backend_download(be, got, dc, nc * sizeof(float)));
  /* Exact products of bf16 values, summed in fp32: error grows with k. */
  for (size_t i = 0; i < nc; i++)
    if (fabs(got[i] - want[i]) > 1e-5 * k + 1e-6)
      fail_msg("gemm_ex bf16->f32 m=%d n=%d k=%d ta=%d tb=%d batch=%d: [%zu] got %.7g want %.7g", m, n, k, ta, tb,
               batch, i, got[i], want[i]);

  /* bf16 output: the fp32 result rounded once, so within one bf16 step. */
  g.c_type = GT_BF16;
  OK(gt_op_gemm_ex(be, &g));
  OK(gt_backend_download(be, c16, dc, nc * 2));
  for (size_t i = 0; i < nc; i++) {
    double v = gt_bf16_to_f32(c16[i]);
    if (fabs(v - want[i]) > fabs(want[i]) * (1.0 / 128) + 1e-5 * k + 1e-6)
      fail_msg("gemm_ex bf16->bf16: [%zu] got %.7g want %.7g", i, v, want[i]);
  }
  gt_backend_free(be, da);
  gt_backend_free(be, db);
  gt_backend_free(be, dc);
  free(a);
  free(b);
  free(a16);
  free(b16);
  free(c16);
  free(want);
  free(got);
}

static void test_gemm_ex(void **state) {
  (void)state;
  check_gemm_ex(17, 33, 65, 0, 0, 1);
  check_gemm_ex(64, 48, 128, 1, 0, 1);
  check_gemm_ex(31, 16, 40, 0, 1, 3);
  check_gemm_ex(8, 130, 9, 1, 1, 2);

  /* fp32 through gemm_ex is plain fp32 (no TF32): matches gemm closely. */
  enum { M = 33, N = 47, K = 129 };
  float *a = xmalloc(M * K * sizeof *a), *b = xmalloc(K * N * sizeof *b), *c = xmalloc(M * N * sizeof *c);
  for (int i = 0; i < M * K; i++) a[i] = uniform();
  for (int i = 0; i < K * N; i++) b[i] = uniform();
  double *want = xmalloc(M * N * sizeof *want);
  ref_gemm(want, a, b, M, N, K, 0, 0, 1);
  void *da = dput(a, sizeof(float) * M * K), *db = dput(b, sizeof(float) * K * N), *dc;
  OK(gt_backend_alloc(be, M * N * sizeof(float), &dc));
  gt_gemm_ex_args g = {.m = M,
                       .n = N,
                       .k = K,
                       .alpha = 1.0f,
                       .beta = 0.0f,
                       .a = da,
                       .a_type = GT_F32,
                       .lda = K,
                       .b = db,
                       .b_type = GT_F32,
                       .ldb = N,
                       .c = dc,
                       .c_type = GT_F32,
                       .ldc = N,
                       .batch = 1};
  OK(gt_op_gemm_ex(be, &g));
  OK(gt_backend_download(be, c, dc, M * N * sizeof(float)));
  for (int i = 0; i < M * N; i++) assert_true(fabs(c[i] - want[i]) < 1e-5 * (1 + fabs(want[i])));

  /* Operands of different dtypes are refused, not guessed at. */
  g.b_type = GT_BF16;
  assert_int_equal(gt_op_gemm_ex(be, &g), GT_EUNSUPPORTED);
  g.b_type = GT_I32;
  assert_int_equal(gt_op_gemm_ex(be, &g), GT_EUNSUPPORTED);
  g.b_type = GT_F32;
  g.c_type = GT_BF16;
  assert_int_equal(gt_op_gemm_ex(be, &g), GT_EUNSUPPORTED);
  gt_backend_free(be, da);
  gt_backend_free(be, db);
  gt_backend_free(be, dc);
  free(a);
  free(b);
  free(c);
  free(want);
}

/* With GT_CUDA_CHECK_IDS=1, bad ids fail before the kernel runs: outputs
 * and gradients untouched. */
static void test_bad_ids_change_nothing(void **state) {
  (void)state;
  gt_backend *shared = be;
  setenv("GT_CUDA_CHECK_IDS", "1", 1);
  gt_status created = create_cuda(0, &be);
  unsetenv("GT_CUDA_CHECK_IDS");
  OK(created);
  enum { N = 6, V = 10, C = 8 };
  float logits[N * V], back[N * V];
  for (int i = 0; i < N * V; i++) logits[i] = uniform();
  int32_t targets[N] = {1, -1, 3, V, 9, V + 5};
  float *dl = dput(logits, sizeof logits);
  int32_t *dt = dput(targets, sizeof targets);
  assert_int_equal(gt_op_softmax_xent_forward(be, NULL, dl, dl, dt, N, V), GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "target id 10 at position 3"));
  assert_int_equal(gt_op_softmax_xent_backward(be, dl, dl, dt, 1.0f, N, V), GT_ERANGE);
  OK(gt_backend_download(be, back, dl, sizeof back));
  assert_memory_equal(back, logits, sizeof logits);
  /* The error slot was reset: a valid call now succeeds. */
  targets[3] = 0;
  targets[5] = -3;
  OK(gt_backend_upload(be, dt, targets, sizeof targets));
  OK(gt_op_softmax_xent_forward(be, NULL, dl, dl, dt, N, V));
  OK(gt_stream_sync(be, gt_backend_compute_stream(be)));

  int32_t tokens[N] = {0, 1, 2, -4, 3, 0};
  float wte[V * C], dwte0[V * C], dwte1[V * C], dout[N * C];
  for (int i = 0; i < V * C; i++) {
    wte[i] = uniform();
    dwte0[i] = uniform();
  }
  for (int i = 0; i < N * C; i++) dout[i] = uniform();
  int32_t *dtok = dput(tokens, sizeof tokens);
  float *dwte = dput(dwte0, sizeof dwte0), *ddout = dput(dout, sizeof dout), *dwe = dput(wte, sizeof wte);
  assert_int_equal(gt_op_embedding_backward(be, dwte, NULL, ddout, dtok, 2, 3, C), GT_ERANGE);
  assert_non_null(strstr(gt_last_error(), "token id -4 at position 3"));
  assert_int_equal(gt_op_embedding_forward(be, ddout, dtok, dwe, NULL, 2, 3, C), GT_ERANGE);
  OK(gt_backend_download(be, dwte1, dwte, sizeof dwte1));
  assert_memory_equal(dwte1, dwte0, sizeof dwte0);

  gt_backend_free(be, dl);
  gt_backend_free(be, dt);
  gt_backend_free(be, dtok);
  gt_backend_free(be, dwte);
  gt_backend_free(be, ddout);
  gt_backend_free(be, dwe);
  gt_backend_destroy(be);
  be = shared;
}

/* By default the kernels take ids as the host checked them, without a
 * synchronising check of their own: an id out of range is skipped (a
 * target >= V is an ignored row, a negative token adds nothing), never
 * used as an index, and nothing waits for the stream. */
static void test_bad_ids_unchecked(void **state) {
  (void)state;
  enum { N = 4, V = 6, C = 4 };
  float logits[N * V], losses[N], back[N * V];
  for (int i = 0; i < N * V; i++) logits[i] = uniform();
  int32_t targets[N] = {1, V, -1, V + 1000000};
  float *dl = dput(logits, sizeof logits), *dloss = dput(losses, sizeof losses);
  int32_t *dt = dput(targets, sizeof targets);
  OK(gt_op_softmax_xent_forward(be, dloss, dl, dl, dt, N, V));
  OK(gt_stream_sync(be, NULL));
  OK(gt_backend_download(be, losses, dloss, sizeof losses));
  assert_true(losses[0] > 0.0f);
  assert_true(losses[1] == 0.0f && losses[2] == 0.0f && losses[3] == 0.0f);
  OK(gt_op_softmax_xent_backward(be, dl, dl, dt, 1.0f, N, V));
  OK(gt_backend_download(be, back, dl, sizeof back));
  for (int j = 0; j < V; j++) assert_true(back[V + j] == 0.0f && back[3 * V + j] == 0.0f);

  int32_t tokens[2] = {1, -1000000};
  float wte[V * C], out[2 * C], dwte[V * C];
  for (int i = 0; i < V * C; i++) wte[i] = uniform();
  int32_t *dtok = dput(tokens, sizeof tokens);
  float *dwe = dput(wte, sizeof wte), *dout = dput(out, sizeof out);
  OK(gt_op_embedding_forward(be, dout, dtok, dwe, NULL, 1, 2, C));
  OK(gt_backend_download(be, out, dout, sizeof out));
  for (int c = 0; c < C; c++) assert_true(out[c] == wte[C + c] && out[C + c] == 0.0f);
  OK(gt_op_embedding_backward(be, dwe, NULL, dout, dtok, 1, 2, C));
  OK(gt_backend_download(be, dwte, dwe, sizeof dwte));
  for (int i = 0; i < V * C; i++) assert_true(dwte[i] == (i / C == 1 ? 2.0f * wte[i] : wte[i]));
  gt_backend_free(be, dl);
  gt_backend_free(be, dloss);
  gt_backend_free(be, dt);
  gt_backend_free(be, dtok);
  gt_backend_free(be, dwe);
  gt_backend_free(be, dout);
}

/* A large transfer through pinned memory on the copy stream, ordered with
 * the compute stream by events both ways: the upload on the copy stream,
 * kernels on the compute stream after it, the download on the copy stream
 * after them. The transfers take milliseconds and the kernels follow at
 * once, so a missing wait shows as stale or half-scaled values. */
static void test_copy_stream_large(void **state) {
  (void)state;
  enum { PASSES = 8 };
  size_t n = (size_t)32 << 20, bytes = n * sizeof(float);
  float *host, *back, *d;
  OK(gt_backend_host_alloc(be, bytes, (void **)&host));
  OK(gt_backend_host_alloc(be, bytes, (void **)&back));
  OK(gt_backend_alloc(be, bytes, (void **)&d));
  for (size_t i = 0; i < n; i++) {
    host[i] = (float)(i % 4093) - 2046.0f;
    back[i] = -1.0f;
  }
  gt_stream *copy = gt_backend_copy_stream(be), *compute = gt_backend_compute_stream(be);
  gt_event *up, *done;
  OK(gt_event_create(be, &up));
  OK(gt_event_create(be, &done));
  assert_int_equal(gt_stream_wait_event(be, copy, done), GT_ESTATE);
  assert_int_equal(gt_event_sync(be, up), GT_ESTATE);

  OK(gt_backend_memcpy(be, d, host, bytes, GT_COPY_H2D, copy));
  OK(gt_event_record(be, up, copy));
  OK(gt_stream_wait_event(be, compute, up));
  for (int k = 0; k < PASSES; k++) OK(gt_op_scale(be, d, 2.0f, n));
  OK(gt_event_record(be, done, compute));
  OK(gt_stream_wait_event(be, copy, done));
  OK(gt_backend_memcpy(be, back, d, bytes, GT_COPY_D2H, copy));
  OK(gt_stream_sync(be, copy));
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += back[i] != host[i] * (float)(1 << PASSES);
  assert_int_equal(wrong, 0);

  /* Again, the host waiting on an event of the copy stream instead. */
  OK(gt_op_scale(be, d, 0.5f, n));
  OK(gt_event_record(be, done, compute));
  OK(gt_stream_wait_event(be, copy, done));
  OK(gt_backend_memcpy(be, back, d, bytes, GT_COPY_D2H, copy));
  OK(gt_event_record(be, up, copy));
  OK(gt_event_sync(be, up));
  for (size_t i = 0; i < n; i++) wrong += back[i] != host[i] * (float)(1 << (PASSES - 1));
  assert_int_equal(wrong, 0);

  gt_event_destroy(be, up);
  gt_event_destroy(be, done);
  gt_backend_free(be, d);
  gt_backend_host_free(be, host);
  gt_backend_host_free(be, back);
}

int main(void) {
  char why[256] = "";
  if (!gt_backend_available(GT_DEVICE_CUDA, why, sizeof why)) {
    /* Without a device, asking for one must fail cleanly, saying why. */
    gt_backend *none = NULL;
    gt_status s = create_cuda(0, &none);
    if (s == GT_OK || none || !gt_last_error()[0]) {
      fprintf(stderr, "test_cuda_backend: creating cuda:0 without a device gave %s, '%s'\n", gt_status_name(s),
              gt_last_error());
      return 1;
    }
    printf("skipping the CUDA backend tests: %s\n", why);
    return 77;
  }
  unsetenv("GT_LOCAL_RANK");
  if (create_cuda(0, &be) != GT_OK) {
    fprintf(stderr, "test_cuda_backend: cannot create cuda:0: %s\n", gt_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_selection),  cmocka_unit_test(test_arena_steady_state),
      cmocka_unit_test(test_out_of_memory),     cmocka_unit_test(test_streams_and_events),
      cmocka_unit_test(test_gemm_ex),           cmocka_unit_test(test_bad_ids_change_nothing),
      cmocka_unit_test(test_bad_ids_unchecked), cmocka_unit_test(test_copy_stream_large),
  };
  int failed = cmocka_run_group_tests_name("cuda_backend", tests, NULL, NULL);
  gt_backend_destroy(be);
  return failed ? 1 : 0;
}
