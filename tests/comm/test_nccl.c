/* NCCL communicators on CUDA devices: one rank per device (up to 4, at
 * least 1), checked exactly as the host collectives are, host buffers
 * staged through the device, and the ordering of a collective after the
 * compute that produced its input. Skipped (exit
 * 77, with the reason) where no CUDA device is present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "common/gt_skip.h"
#include "localkit/ranks.h"
#include "core/backend_engine.h"
#include "giant/engine/comm.h"
#include "giant/engine/device.h"
#include "giant/engine/store.h"

/* Ranks on up to 4 devices; -1 without one. */
static int probe_devices(void) {
  int n = harness_cuda_devices(4);
  return n ? n : -1;
}

static float *dev_upload(const float *h, size_t n) {
  float *d = NULL;
  CHECK(cudaMalloc((void **)&d, n * sizeof *d + 4) == cudaSuccess);
  if (n) CHECK(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}

static void dev_download(float *h, const float *d, size_t n) {
  if (n) CHECK(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess);
}

/* Rank r's device, the store and an NCCL communicator of n ranks on it;
 * exits the rank on failure. */
static void open_rank(int r, int n, const char *prefix, gt_backend **be, gt_store **s, gt_comm **c) {
  gt_backend_config bc = {.kind = GT_DEVICE_CUDA, .device = r};
  CHECK_OK(gt_backend_create(&bc, be));
  *s = harness_store();
  gt_comm_config cfg = {.store = *s,
                        .prefix = prefix,
                        .rank = r,
                        .size = n,
                        .backend = *be,
                        .secret = HARNESS_SECRET,
                        .init_timeout_ms = 60000,
                        .op_timeout_ms = 60000};
  CHECK_OK(gt_comm_init(&cfg, c));
}

/* Host buffers larger than the staging (16 MiB), as an offloaded model's
 * gradients and parameters are: each operation goes in pieces, with the
 * results of the whole. A count that is no multiple of any piece, pinned
 * memory for the collectives and pageable for point to point. */
static void host_pieces(int r, int n, gt_comm *c) {
  size_t count = ((size_t)5 << 20) + 3;
  float *a = NULL, *all = NULL;
  CHECK(cudaMallocHost((void **)&a, count * sizeof *a) == cudaSuccess);
  CHECK(cudaMallocHost((void **)&all, (size_t)n * count * sizeof *all) == cudaSuccess);
  for (size_t i = 0; i < count; i++) a[i] = (float)(int)(i % 1000) + (float)r;
  CHECK_OK(gt_comm_allreduce(c, a, count, GT_F32, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) CHECK(a[i] == (float)n * (float)(int)(i % 1000) + (float)(n * (n - 1) / 2));
  for (size_t i = 0; i < count; i++) a[i] = (float)(r * 1000) + (float)(int)(i % 100);
  CHECK_OK(gt_comm_allgather(c, a, all, count, GT_F32));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++) CHECK(all[(size_t)q * count + i] == (float)(q * 1000) + (float)(int)(i % 100));
  CHECK_OK(gt_comm_reduce_scatter(c, all, a, count, GT_F32, GT_COMM_SUM));
  for (size_t i = 0; i < count; i++) CHECK(a[i] == (float)n * ((float)(r * 1000) + (float)(int)(i % 100)));
  for (size_t i = 0; i < count; i++) a[i] = r == n - 1 ? (float)(int)(i % 77) : -1.0f;
  CHECK_OK(gt_comm_broadcast(c, a, count, GT_F32, n - 1));
  for (size_t i = 0; i < count; i++) CHECK(a[i] == (float)(int)(i % 77));
  if (n >= 2) {
    /* A ring of pageable buffers, and a plain send and receive. */
    float *mine = malloc(count * sizeof *mine), *got = malloc(count * sizeof *got);
    CHECK(mine && got);
    for (size_t i = 0; i < count; i++) {
      mine[i] = (float)(r * 1000) + (float)(int)(i % 999);
      got[i] = -1.0f;
    }
    CHECK_OK(gt_comm_sendrecv(c, mine, count, (r + 1) % n, got, count, (r + n - 1) % n, GT_F32));
    int from = (r + n - 1) % n;
    for (size_t i = 0; i < count; i++) CHECK(got[i] == (float)(from * 1000) + (float)(int)(i % 999));
    if (r == 0) CHECK_OK(gt_comm_send(c, mine, count, GT_F32, 1));
    if (r == 1) {
      CHECK_OK(gt_comm_recv(c, got, count, GT_F32, 0));
      for (size_t i = 0; i < count; i++) CHECK(got[i] == (float)(int)(i % 999));
    }
    free(mine);
    free(got);
  }
  cudaFreeHost(a);
  cudaFreeHost(all);
}

static int rank_main(int r, int n, void *arg) {
  (void)arg;
  gt_backend *be = NULL;
  gt_store *s = NULL;
  gt_comm *c = NULL;
  open_rank(r, n, "nccl", &be, &s, &c);
  CHECK(strcmp(gt_comm_transport_name(c), "nccl") == 0);
  size_t sizes[] = {1, 7, (size_t)n * 5 + 3, 1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t count = sizes[k];
    float *h = malloc((size_t)n * count * sizeof *h), *g = malloc((size_t)n * count * sizeof *g);
    CHECK(h && g);
    for (size_t i = 0; i < count; i++) h[i] = (float)(int)(i % 1000) + 3.0f * (float)r;
    float *d = dev_upload(h, count);
    CHECK_OK(gt_comm_allreduce(c, d, count, GT_F32, GT_COMM_SUM));
    dev_download(g, d, count);
    for (size_t i = 0; i < count; i++)
      CHECK(g[i] == (float)n * (float)(int)(i % 1000) + 3.0f * (float)(n * (n - 1) / 2));
    /* all-gather of each rank's block */
    float *out = dev_upload(g, 0);
    cudaFree(out);
    CHECK(cudaMalloc((void **)&out, (size_t)n * count * sizeof *out) == cudaSuccess);
    for (size_t i = 0; i < count; i++) h[i] = (float)(r * 1000) + (float)(int)(i % 100);
    CHECK(cudaMemcpy(d, h, count * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_OK(gt_comm_allgather(c, d, out, count, GT_F32));
    dev_download(g, out, (size_t)n * count);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++) CHECK(g[(size_t)q * count + i] == (float)(q * 1000) + (float)(int)(i % 100));
    /* reduce-scatter of the gathered buffer: block r summed n times */
    CHECK_OK(gt_comm_reduce_scatter(c, out, d, count, GT_F32, GT_COMM_SUM));
    dev_download(g, d, count);
    for (size_t i = 0; i < count; i++) CHECK(g[i] == (float)n * ((float)(r * 1000) + (float)(int)(i % 100)));
    /* broadcast from the last rank */
    for (size_t i = 0; i < count; i++) h[i] = r == n - 1 ? (float)(int)(i % 77) : -1.0f;
    CHECK(cudaMemcpy(d, h, count * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_OK(gt_comm_broadcast(c, d, count, GT_F32, n - 1));
    dev_download(g, d, count);
    for (size_t i = 0; i < count; i++) CHECK(g[i] == (float)(int)(i % 77));
    cudaFree(d);
    cudaFree(out);
    free(h);
    free(g);
  }
  if (n >= 2 && r < 2) {
    float v[3] = {1, 2, 3}, w[3] = {0};
    float *d = dev_upload(v, 3);
    if (r == 0)
      CHECK_OK(gt_comm_send(c, d, 3, GT_F32, 1));
    else
      CHECK_OK(gt_comm_recv(c, d, 3, GT_F32, 0));
    dev_download(w, d, 3);
    CHECK(w[0] == 1 && w[1] == 2 && w[2] == 3);
    cudaFree(d);
  }
  if (n >= 2) {
    float v = (float)r, w = -1;
    float *dv = dev_upload(&v, 1), *dw = dev_upload(&w, 1);
    CHECK_OK(gt_comm_sendrecv(c, dv, 1, (r + 1) % n, dw, 1, (r + n - 1) % n, GT_F32));
    dev_download(&w, dw, 1);
    CHECK(w == (float)((r + n - 1) % n));
    cudaFree(dv);
    cudaFree(dw);
  }
  /* Host buffers, as the control plane passes them (a checkpoint's
   * commit flag, the commit vote, fail-slow telemetry): staged through
   * device memory, with the same results. Pageable and pinned. */
  {
    float flag = (float)(r + 1), mine[2] = {(float)r, 10.0f * (float)r}, *all = malloc((size_t)n * 2 * sizeof *all);
    CHECK(all != NULL);
    CHECK_OK(gt_comm_allreduce(c, &flag, 1, GT_F32, GT_COMM_SUM));
    CHECK(flag == (float)(n * (n + 1) / 2));
    CHECK_OK(gt_comm_allgather(c, mine, all, 2, GT_F32));
    for (int q = 0; q < n; q++) CHECK(all[2 * q] == (float)q && all[2 * q + 1] == 10.0f * (float)q);
    float *pinned = NULL;
    CHECK(cudaMallocHost((void **)&pinned, 3 * sizeof *pinned) == cudaSuccess);
    for (int i = 0; i < 3; i++) pinned[i] = r == 0 ? (float)(i + 7) : 0.0f;
    CHECK_OK(gt_comm_broadcast(c, pinned, 3, GT_F32, 0));
    CHECK(pinned[0] == 7 && pinned[1] == 8 && pinned[2] == 9);
    /* A device input with a host output. */
    float *dm = dev_upload(mine, 2);
    CHECK_OK(gt_comm_allgather(c, dm, all, 2, GT_F32));
    for (int q = 0; q < n; q++) CHECK(all[2 * q] == (float)q && all[2 * q + 1] == 10.0f * (float)q);
    cudaFree(dm);
    cudaFreeHost(pinned);
    free(all);
  }
  host_pieces(r, n, c);
  CHECK_OK(gt_comm_barrier(c));
  gt_comm *half = NULL;
  CHECK_OK(gt_comm_split(c, r % 2, r, "halves", &half));
  CHECK(half && gt_comm_size(half) == (n - r % 2 + 1) / 2);
  float one = 1, got = 0;
  float *d = dev_upload(&one, 1);
  CHECK_OK(gt_comm_allreduce(half, d, 1, GT_F32, GT_COMM_SUM));
  dev_download(&got, d, 1);
  CHECK(got == (float)gt_comm_size(half));
  cudaFree(d);
  gt_comm_destroy(half);
  /* Abort from this thread: later operations fail at once. */
  gt_comm_abort(c);
  float *e = dev_upload(&one, 1);
  CHECK(gt_comm_allreduce(c, e, 1, GT_F32, GT_COMM_SUM) == GT_EABORTED);
  cudaFree(e);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  gt_backend_destroy(be);
  return RANK_OK;
}

/* A collective started right after kernels that write its input, with no
 * host synchronisation between them, reads their final values: 120
 * doublings of 256 MB (tens of milliseconds of work) are queued on the
 * compute stream, then an all-gather copies the buffer (one rank: a plain
 * copy, on the NCCL stream). Were the NCCL stream not made to wait for the
 * compute stream, the copy would run in the middle of the doublings and
 * find smaller powers of two. */
enum { ORDER_PASSES = 120 };

static int order_main(int r, int n, void *arg) {
  (void)arg;
  gt_backend *be = NULL;
  gt_store *s = NULL;
  gt_comm *c = NULL;
  open_rank(r, n, "nccl_order", &be, &s, &c);
  size_t count = (size_t)64 << 20, bytes = count * sizeof(float);
  float *h = malloc(bytes), *src = NULL, *dst = NULL;
  CHECK(h);
  for (size_t i = 0; i < count; i++) h[i] = 1.0f;
  CHECK_OK(gt_backend_alloc(be, bytes, (void **)&src));
  CHECK_OK(gt_backend_alloc(be, bytes, (void **)&dst));
  CHECK_OK(gt_backend_upload(be, src, h, bytes));
  CHECK_OK(gt_backend_memset(be, dst, 0, bytes, NULL));
  CHECK_OK(gt_stream_sync(be, NULL));
  for (int k = 0; k < ORDER_PASSES; k++) CHECK_OK(gt_op_scale(be, src, 2.0f, count));
  CHECK_OK(gt_comm_allgather(c, src, dst, count, GT_F32));
  CHECK_OK(gt_backend_download(be, h, dst, bytes));
  float want = 1.0f;
  for (int k = 0; k < ORDER_PASSES; k++) want *= 2.0f;
  size_t stale = 0;
  for (size_t i = 0; i < count; i++) stale += h[i] != want;
  if (stale) fprintf(stderr, "%zu of %zu elements were copied before the compute stream wrote them\n", stale, count);
  CHECK(stale == 0);
  gt_backend_free(be, src);
  gt_backend_free(be, dst);
  free(h);
  gt_comm_destroy(c);
  gt_store_destroy(s);
  gt_backend_destroy(be);
  return RANK_OK;
}

static void test_nccl_waits_for_compute(void **state) {
  (void)state;
  if (probe_devices() < 1) SKIP_CASE("no CUDA device");
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(1, order_main, NULL, 120, codes), 0);
}

static void test_nccl_collectives(void **state) {
  (void)state;
  int n = probe_devices();
  if (n < 1) SKIP_CASE("no CUDA device");
  int codes[HARNESS_MAX];
  assert_int_equal(harness_run(n, rank_main, NULL, 120, codes), 0);
}

int main(void) {
  int n = probe_devices();
  if (n < 1) return 77;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_nccl_collectives),
                                     cmocka_unit_test(test_nccl_waits_for_compute)};
  return gt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
