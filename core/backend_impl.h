/* For backend implementations: what a gt_backend is, and the table of
 * operations a device fills in.
 *
 * Everything outside core/cpu and core/cuda goes through the gt_op_*,
 * gt_backend_*, gt_stream_* and gt_event_* functions of giant/backend.h,
 * which check their arguments once (backend_ops.c, backend_memory.c) and
 * then call through this table. A backend's functions may therefore assume
 * what those checks establish: a non-NULL backend, non-negative sizes,
 * non-NULL pointers where the public header forbids NULL, gemm and gemm_ex
 * arguments that passed gt_gemm_check / gt_gemm_ex_check, and a stream that
 * is never NULL (the wrappers put the compute stream in its place).
 * What only the data can tell (token ids against the vocabulary, targets)
 * stays with the backend, which holds the data.
 *
 * Memory, sync and destroy are required of every backend. The kernels are
 * the list in backend_kernels.h, from which their entries here and the
 * backends' declarations and tables are generated. A NULL kernel is an
 * operation the backend lacks: the wrapper reports it as GT_EUNSUPPORTED,
 * naming the operation and the backend.
 */
#ifndef GIANT_BACKEND_IMPL_H
#define GIANT_BACKEND_IMPL_H

#include "core/backend_kernels.h"
#include "giant/backend.h"
#include "core/backend_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each entry has the signature of the public function of the same name
 * (gt_backend_<name> for memory, gt_<name> for streams and events, gt_op_<name>
 * for the kernels), where it is documented. */
typedef struct gt_backend_ops {
  struct gt_memory_ops {
    gt_status (*alloc)(gt_backend *be, size_t bytes, void **ptr);
    void (*free)(gt_backend *be, void *ptr);
    gt_status (*host_alloc)(gt_backend *be, size_t bytes, void **ptr);
    void (*host_free)(gt_backend *be, void *ptr);
    gt_status (*memcpy)(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s);
    gt_status (*memset)(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
  } memory;

  struct gt_sync_ops {
    gt_status (*stream_create)(gt_backend *be, gt_stream **s);
    void (*stream_destroy)(gt_backend *be, gt_stream *s);
    gt_status (*stream_sync)(gt_backend *be, gt_stream *s);
    gt_status (*stream_wait_event)(gt_backend *be, gt_stream *s, gt_event *e);
    gt_status (*event_create)(gt_backend *be, gt_event **e);
    void (*event_destroy)(gt_backend *be, gt_event *e);
    gt_status (*event_record)(gt_backend *be, gt_event *e, gt_stream *s);
    gt_status (*event_sync)(gt_backend *be, gt_event *e);
  } sync;

  /* One entry per kernel of backend_kernels.h, with the signature of its
   * gt_op_<name>. */
#define GT_BACKEND_KERNEL_ENTRY(name, params) gt_status(*name) params;
  struct gt_kernel_ops {
    GT_BACKEND_KERNELS(GT_BACKEND_KERNEL_ENTRY)
  } kernels;
#undef GT_BACKEND_KERNEL_ENTRY

  /* Releases the backend and everything it holds, be included. */
  void (*destroy)(gt_backend *be);
} gt_backend_ops;

struct gt_backend {
  const gt_backend_ops *ops;
  gt_device_kind kind;
  int device;                        /* device index (CUDA), 0 on CPU */
  int num_threads;                   /* host threads the kernels use */
  char name[32];                     /* "cpu", "cuda:0" */
  char kernels[48];                  /* the kernels chosen for this machine at creation:
                         "avx2+fma", "avx512+amx", "cublas+cuda" */
  gt_stream *compute;                /* where kernels run */
  gt_stream *copy;                   /* for transfers that overlap compute */
  double peak_flops;                 /* measured by gt_backend_measure_peak, 0 until then */
  struct gt_mem_ledger *ledger;      /* device bytes held, and the budget (backend_ledger.c) */
  struct gt_mem_ledger *host_ledger; /* host bytes of gt_backend_host_alloc, and their budget */
  void *impl;
};

/* The argument checks of gemm and gemm_ex (gemm_check.c), made once by
 * gt_op_gemm and gt_op_gemm_ex before the backend runs: transpose flags,
 * shapes, leading dimensions, batch outputs that do not overlap; for
 * gemm_ex also the operand types. Pointers are only tested for NULL. */
gt_status gt_gemm_check(const gt_backend *be, const gt_gemm_args *g);
gt_status gt_gemm_ex_check(const gt_backend *be, const gt_gemm_ex_args *g);

#ifdef __cplusplus
}
#endif
#endif
