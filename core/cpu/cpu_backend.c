/* CPU backend: creation, memory and threads. (Streams and events, with the
 * thread that plays the copy engine: cpu_stream.c.) Threads: the kernels
 * and OpenBLAS share one OpenMP pool of num_threads threads.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cpu/cpu_internal.h"
#include "giant/protocol.h"

gt_status gt_cpu_alloc(gt_backend *be, size_t bytes, void **ptr) {
  (void)be;
  /* 256-byte alignment: whole cache lines and any vector width. */
  size_t n = (bytes + 255) & ~(size_t)255;
  if (n == 0) n = 256;
  void *p = aligned_alloc(256, n);
  if (!p) return gt_errorf(GT_ENOMEM, "cpu: out of memory allocating %zu bytes", bytes);
  *ptr = p;
  return GT_OK;
}

void gt_cpu_free(gt_backend *be, void *ptr) {
  (void)be;
  free(ptr);
}

void gt_cpu_destroy(gt_backend *be) {
  gt_cpu_impl *impl = be->impl;
  if (impl) free(impl->scratch);
  free(impl);
  gt_cpu_stream_destroy(be, be->compute);
  gt_cpu_stream_destroy(be, be->copy);
  free(be);
}

/* OMP_NUM_THREADS when set; else, when a launcher started several workers
 * on this node (GT_LOCAL_WORLD_SIZE), an equal share of the cores, so that
 * workers do not oversubscribe the machine; else every core. */
static int default_threads(void) {
  if (getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
  const char *lws = getenv(GT_ENV_LOCAL_WORLD_SIZE);
  long cores = sysconf(_SC_NPROCESSORS_ONLN), workers = lws ? strtol(lws, NULL, 10) : 1;
  if (cores < 1) cores = 1;
  if (workers < 1) workers = 1;
  return cores / workers > 1 ? (int)(cores / workers) : 1;
}

/* bf16 products: AMX tiles when the CPU has them, unless GT_CPU_BF16=widen
 * asks for the portable path (fp32 widening and sgemm). */
static gt_status choose_bf16_kernel(gt_cpu_impl *impl) {
  const char *want = getenv("GT_CPU_BF16");
  if (want && strcmp(want, "auto") && strcmp(want, "widen") && strcmp(want, "amx"))
    return gt_errorf(GT_EINVAL, "GT_CPU_BF16=%s: use auto, amx or widen", want);
  bool widen = want && !strcmp(want, "widen");
#ifdef GIANT_CPU_AMX
  impl->amx = !widen && gt_cpu_amx_available();
#else
  (void)widen;
  impl->amx = false;
#endif
  if (want && !strcmp(want, "amx") && !impl->amx)
    return gt_errorf(GT_EUNSUPPORTED,
                     "GT_CPU_BF16=amx, but this CPU or kernel offers no AMX bf16 tiles; "
                     "unset it to use the portable path");
  return GT_OK;
}

gt_status gt_cpu_backend_create(const gt_backend_config *cfg, gt_backend **out) {
  gt_backend *be = calloc(1, sizeof *be);
  if (!be) return gt_errorf(GT_ENOMEM, "cpu: out of memory creating the backend");
  be->kind = GT_DEVICE_CPU;
  int n = cfg && cfg->num_threads > 0 ? cfg->num_threads : default_threads();
  if (n < 1) n = 1;
  be->num_threads = n;
  /* One pool for everything: our kernels and OpenBLAS (OpenMP build) both
   * run on these threads. */
  omp_set_num_threads(n);
  strcpy(be->name, "cpu");
  gt_cpu_impl *impl = calloc(1, sizeof(gt_cpu_impl));
  be->impl = impl;
  gt_status s = impl ? GT_OK : gt_errorf(GT_ENOMEM, "cpu: out of memory creating the backend");
  if (s == GT_OK) s = gt_cpu_isa_choose(&be->ops, be->kernels, sizeof be->kernels);
  if (s == GT_OK) s = choose_bf16_kernel(impl);
  /* AMX runs the bf16 products only, beside the level's other kernels. */
  if (s == GT_OK && impl->amx) strncat(be->kernels, "+amx", sizeof be->kernels - strlen(be->kernels) - 1);
  if (s == GT_OK) s = gt_cpu_compute_stream_create(&be->compute);
  if (s == GT_OK) s = gt_cpu_stream_create(be, &be->copy);
  if (s != GT_OK) {
    gt_cpu_destroy(be);
    return s;
  }
  *out = be;
  return GT_OK;
}
