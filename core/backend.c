/* Backend selection and creation, and what a caller may read of one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/backend_ledger.h"
#include "core/cpu/cpu_internal.h"
#include "giant/log.h"
#include "core/backend_engine.h"
#include "giant/engine/device.h"

#ifdef GIANT_HAVE_CUDA
gt_status gt_cuda_backend_create(const gt_backend_config *cfg, gt_backend **out);
bool gt_cuda_available(char *why, size_t why_len);
#endif

bool gt_backend_available(gt_device_kind kind, char *why, size_t why_len) {
  if (kind == GT_DEVICE_CPU) return true;
#ifdef GIANT_HAVE_CUDA
  return gt_cuda_available(why, why_len);
#else
  if (why) snprintf(why, why_len, "this build of Giant has no CUDA backend (configure with GIANT_CUDA=ON)");
  return false;
#endif
}

gt_status gt_device_parse(const char *s, gt_backend_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->device = -1;
  if (!strcmp(s, "cpu")) {
    cfg->kind = GT_DEVICE_CPU;
    cfg->device = 0;
    return GT_OK;
  }
  if (!strncmp(s, "cuda", 4)) {
    cfg->kind = GT_DEVICE_CUDA;
    if (s[4] == '\0') return GT_OK;
    char *end;
    long d = s[4] == ':' ? strtol(s + 5, &end, 10) : -1;
    if (s[4] == ':' && end != s + 5 && *end == '\0' && d >= 0 && d < 1024) {
      cfg->device = (int)d;
      return GT_OK;
    }
  }
  return gt_errorf(GT_EINVAL, "unknown device '%s': use cpu, cuda or cuda:N", s);
}

const char *gt_precision_name(gt_precision p) {
  switch (p) {
    case GT_PRECISION_FP32: return "fp32";
    case GT_PRECISION_BF16: return "bf16";
  }
  return "unknown";
}

gt_status gt_precision_parse(const char *s, gt_precision *out) {
  if (s && !strcmp(s, "fp32"))
    *out = GT_PRECISION_FP32;
  else if (s && !strcmp(s, "bf16"))
    *out = GT_PRECISION_BF16;
  else
    return gt_errorf(GT_EINVAL, "unknown precision '%s': use fp32 or bf16", s ? s : "(null)");
  return GT_OK;
}

gt_device_kind gt_backend_kind(const gt_backend *be) { return be->kind; }
const char *gt_backend_name(const gt_backend *be) { return be->name; }
const char *gt_backend_kernels(const gt_backend *be) { return be->kernels; }
int gt_backend_device(const gt_backend *be) { return be->device; }
int gt_backend_num_threads(const gt_backend *be) { return be->num_threads; }
double gt_backend_peak_flops(const gt_backend *be) { return be->peak_flops; }
void gt_backend_set_peak_flops(gt_backend *be, double flops) { be->peak_flops = flops; }
gt_stream *gt_backend_compute_stream(const gt_backend *be) { return be->compute; }
gt_stream *gt_backend_copy_stream(const gt_backend *be) { return be->copy; }

bool gt_backend_has_mixed_precision(const gt_backend *be) {
  const struct gt_kernel_ops *k = &be->ops->kernels;
  return k->gemm_ex && k->bias_add && k->bias_backward && k->causal_softmax_forward && k->causal_softmax_backward;
}

gt_status gt_backend_create(const gt_backend_config *cfg, gt_backend **out) {
  *out = NULL;
  gt_backend_config def = {.kind = GT_DEVICE_CPU, .device = 0, .num_threads = 0};
  if (!cfg) cfg = &def;
  gt_backend *be = NULL;
  gt_status s;
  if (cfg->kind == GT_DEVICE_CPU) {
    s = gt_cpu_backend_create(cfg, &be);
  } else {
#ifdef GIANT_HAVE_CUDA
    s = gt_cuda_backend_create(cfg, &be);
#else
    return gt_errorf(GT_EUNSUPPORTED,
                     "device cuda requested, but this build of Giant has no CUDA backend; "
                     "rebuild with -DGIANT_CUDA=ON on a machine with the CUDA toolkit");
#endif
  }
  if (s != GT_OK) return s;
  s = gt_mem_ledger_create(cfg->device_mem_limit, "device memory",
                           "offload state to the host, make the batch or the model smaller, or raise the budget",
                           &be->ledger);
  if (s == GT_OK)
    s = gt_mem_ledger_create(cfg->host_mem_limit, "host memory",
                             "keep the optimizer state on disk, make the model smaller, or raise the budget",
                             &be->host_ledger);
  if (s != GT_OK) {
    gt_mem_ledger_destroy(be->ledger);
    be->ops->destroy(be);
    return s;
  }
  *out = be;
  return GT_OK;
}

void gt_backend_destroy(gt_backend *be) {
  if (!be) return;
  gt_mem_ledger_destroy(be->ledger);
  gt_mem_ledger_destroy(be->host_ledger);
  be->ledger = be->host_ledger = NULL;
  be->ops->destroy(be);
}

gt_device_mem gt_backend_mem(const gt_backend *be) {
  gt_device_mem m = {0};
  if (be && be->ledger) gt_mem_ledger_stats(be->ledger, &m);
  return m;
}

void gt_backend_reset_mem_peak(gt_backend *be) {
  if (be && be->ledger) gt_mem_ledger_reset_peak(be->ledger);
}

gt_device_mem gt_backend_host_mem(const gt_backend *be) {
  gt_device_mem m = {0};
  if (be && be->host_ledger) gt_mem_ledger_stats(be->host_ledger, &m);
  return m;
}
