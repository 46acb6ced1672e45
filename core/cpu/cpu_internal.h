/* CPU backend internals: the functions behind gt_cpu_ops. Kernels live in
 * cpu_*.c files by family and are declared here from the kernel list
 * (core/backend_kernels.h); cpu_ops.c gathers them into the ops table. Those
 * files are compiled once per instruction-set level, each kernel under the
 * level's name (cpu_isa.h). Arguments arrive checked by the gt_op_* wrappers
 * (core/backend_impl.h). */
#ifndef GIANT_CPU_INTERNAL_H
#define GIANT_CPU_INTERNAL_H

#include "core/cpu/cpu_isa.h"
#include "core/backend_impl.h"
#include "core/backend_engine.h"

/* be->impl of a CPU backend. */
typedef struct gt_cpu_impl {
  float *scratch;     /* gemm_ex: bf16 operands widened to fp32, or packed into AMX tiles */
  size_t scratch_cap; /* floats */
  bool amx;           /* bf16 products on AMX tiles */
} gt_cpu_impl;

gt_status gt_cpu_backend_create(const gt_backend_config *cfg, gt_backend **out);

/* The kernels for this CPU (cpu_isa.c): the ops table of the best level the
 * CPU and OS support, or the one GT_CPU_KERNELS names; `name` receives the
 * level's name ("avx512", "avx2+fma", "sse2"). */
gt_status gt_cpu_isa_choose(const gt_backend_ops **ops, char *name, size_t name_len);

/* memory (cpu_backend.c); streams and events (cpu_stream.c) */
gt_status gt_cpu_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_cpu_free(gt_backend *be, void *ptr);
gt_status gt_cpu_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s);
gt_status gt_cpu_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
gt_status gt_cpu_stream_create(gt_backend *be, gt_stream **s);
/* The compute stream: work queued on it runs in the calling thread. */
gt_status gt_cpu_compute_stream_create(gt_stream **s);
void gt_cpu_stream_destroy(gt_backend *be, gt_stream *s);
gt_status gt_cpu_stream_sync(gt_backend *be, gt_stream *s);
gt_status gt_cpu_event_create(gt_backend *be, gt_event **e);
void gt_cpu_event_destroy(gt_backend *be, gt_event *e);
gt_status gt_cpu_event_record(gt_backend *be, gt_event *e, gt_stream *s);
gt_status gt_cpu_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e);
gt_status gt_cpu_event_sync(gt_backend *be, gt_event *e);
void gt_cpu_destroy(gt_backend *be);

#ifdef GIANT_CPU_AMX
/* bf16 products on AMX tiles (cpu_gemm_amx.c): whether the CPU and OS allow
 * them, the scratch floats one product needs, and batch entry e of a
 * checked gemm_ex with bf16 operands, k > 0 and an fp32 result. */
bool gt_cpu_amx_available(void);
size_t gt_cpu_amx_scratch_floats(int m, int n, int k);
gt_status gt_cpu_gemm_bf16_amx(gt_backend *be, const gt_gemm_ex_args *g, int64_t e, uint16_t *scratch);
#endif

#ifdef GT_CPU_ISA
/* The ops table and the kernels of this level: gt_cpu_<name>_<level> for
 * each kernel of the list, defined as GT_CPU_KERNEL(name) by family in
 * cpu_gemm.c, cpu_gemm_ex.c, cpu_kernels_*.c and cpu_attention*.c. Only the
 * level's own files see them; the rest of the backend reaches a level
 * through the table gt_cpu_isa_choose hands it. */
extern const gt_backend_ops gt_cpu_ops;
#define GT_CPU_DECLARE(name, params) gt_status GT_CPU_KERNEL(name) params;
GT_BACKEND_KERNELS(GT_CPU_DECLARE)
#undef GT_CPU_DECLARE
#endif

#endif
