/* CUDA backend: device memory, pinned host memory, copies, streams and
 * events.
 *
 * Device memory comes straight from cudaMalloc/cudaFree. That is slow and
 * synchronising, but the engine never calls it in a loop: every device
 * allocation goes through a gt_arena (core/arena.c), which caches freed
 * blocks by size class, so a training step that repeats the previous one's
 * shapes makes no cudaMalloc at all (gt_arena_device_allocs stays put).
 *
 * A NULL stream means the compute stream. Events remember whether they were
 * ever recorded: CUDA would treat waiting on a fresh one as a no-op, which
 * hides an ordering bug, so that is GT_ESTATE as on the CPU.
 */
#include <stdlib.h>

#include "core/cuda/cuda_internal.h"
#include "core/cuda/handles.h"
#include "giant/log.h"

/* ---- memory ---- */

gt_status gt_cuda_alloc(gt_backend *be, size_t bytes, void **ptr) {
  GT_TRY(gt_cuda_enter(be));
  if (bytes == 0) bytes = 256; /* a valid, unique pointer */
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    return gt_errorf(GT_ENOMEM,
                     "%s: out of device memory allocating %zu bytes (%zu of %zu bytes free); "
                     "lower the batch size or use more pipeline/tensor parallelism",
                     be->name, bytes, free_b, total_b);
  }
  return gt_cuda_check(be, e, "cudaMalloc");
}

void gt_cuda_free(gt_backend *be, void *ptr) {
  if (!ptr) return;
  if (gt_cuda_enter(be) != GT_OK) return;
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    gt_warn("%s: cudaFree failed: %s", be->name, cudaGetErrorString(e));
  }
}

gt_status gt_cuda_host_alloc(gt_backend *be, size_t bytes, void **ptr) {
  GT_TRY(gt_cuda_enter(be));
  if (bytes == 0) bytes = 256;
  cudaError_t e = cudaMallocHost(ptr, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return gt_errorf(GT_ENOMEM,
                     "%s: cannot pin %zu bytes of host memory; check `ulimit -l` "
                     "and free host memory",
                     be->name, bytes);
  }
  return gt_cuda_check(be, e, "cudaMallocHost");
}

void gt_cuda_host_free(gt_backend *be, void *ptr) {
  if (!ptr) return;
  if (gt_cuda_enter(be) != GT_OK) return;
  cudaError_t e = cudaFreeHost(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    gt_warn("%s: cudaFreeHost failed: %s", be->name, cudaGetErrorString(e));
  }
}

static cudaStream_t stream_of(gt_backend *be, gt_stream *s) { return (s ? s : be->compute)->s; }

gt_status gt_cuda_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s) {
  cudaMemcpyKind k;
  switch (kind) {
    case GT_COPY_H2D: k = cudaMemcpyHostToDevice; break;
    case GT_COPY_D2H: k = cudaMemcpyDeviceToHost; break;
    case GT_COPY_D2D: k = cudaMemcpyDeviceToDevice; break;
    default: /* gt_backend_memcpy admits only the three kinds */ k = cudaMemcpyDefault; break;
  }
  if (bytes == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  return gt_cuda_check(be, cudaMemcpyAsync(dst, src, bytes, k, stream_of(be, s)), "cudaMemcpyAsync");
}

gt_status gt_cuda_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s) {
  if (bytes == 0) return GT_OK;
  GT_TRY(gt_cuda_enter(be));
  return gt_cuda_check(be, cudaMemsetAsync(dst, value, bytes, stream_of(be, s)), "cudaMemsetAsync");
}

/* ---- streams and events ---- */

gt_status gt_cuda_stream_create(gt_backend *be, gt_stream **s) {
  *s = NULL;
  GT_TRY(gt_cuda_enter(be));
  gt_stream *st = (gt_stream *)calloc(1, sizeof *st);
  if (!st) return gt_errorf(GT_ENOMEM, "%s: out of host memory creating a stream", be->name);
  gt_status r =
      gt_cuda_check(be, cudaStreamCreateWithFlags(&st->s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (r != GT_OK) {
    free(st);
    return r;
  }
  *s = st;
  return GT_OK;
}

void gt_cuda_stream_destroy(gt_backend *be, gt_stream *s) {
  if (!s) return;
  if (gt_cuda_enter(be) == GT_OK) (void)cudaStreamDestroy(s->s);
  free(s);
}

gt_status gt_cuda_stream_sync(gt_backend *be, gt_stream *s) {
  GT_TRY(gt_cuda_enter(be));
  /* Faults of earlier kernels surface here. */
  return gt_cuda_check(be, cudaStreamSynchronize(stream_of(be, s)), "cudaStreamSynchronize");
}

gt_status gt_cuda_event_create(gt_backend *be, gt_event **e) {
  *e = NULL;
  GT_TRY(gt_cuda_enter(be));
  gt_event *ev = (gt_event *)calloc(1, sizeof *ev);
  if (!ev) return gt_errorf(GT_ENOMEM, "%s: out of host memory creating an event", be->name);
  gt_status r = gt_cuda_check(be, cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  if (r != GT_OK) {
    free(ev);
    return r;
  }
  *e = ev;
  return GT_OK;
}

void gt_cuda_event_destroy(gt_backend *be, gt_event *e) {
  if (!e) return;
  if (gt_cuda_enter(be) == GT_OK) (void)cudaEventDestroy(e->e);
  free(e);
}

gt_status gt_cuda_event_record(gt_backend *be, gt_event *e, gt_stream *s) {
  GT_TRY(gt_cuda_enter(be));
  GT_TRY(gt_cuda_check(be, cudaEventRecord(e->e, stream_of(be, s)), "cudaEventRecord"));
  e->recorded = true;
  return GT_OK;
}

gt_status gt_cuda_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e) {
  if (!e->recorded) return gt_errorf(GT_ESTATE, "%s: waiting on an event that was never recorded", be->name);
  GT_TRY(gt_cuda_enter(be));
  return gt_cuda_check(be, cudaStreamWaitEvent(stream_of(be, s), e->e, 0), "cudaStreamWaitEvent");
}

gt_status gt_cuda_event_sync(gt_backend *be, gt_event *e) {
  if (!e->recorded) return gt_errorf(GT_ESTATE, "%s: waiting on an event that was never recorded", be->name);
  GT_TRY(gt_cuda_enter(be));
  return gt_cuda_check(be, cudaEventSynchronize(e->e), "cudaEventSynchronize");
}

/* ---- raw handles (core/cuda/handles.h) ---- */

void *gt_cuda_stream_handle(gt_backend *be, gt_stream *s) {
  if (!be || be->kind != GT_DEVICE_CUDA) return NULL;
  return (void *)stream_of(be, s);
}

void *gt_cuda_event_handle(gt_backend *be, gt_event *e) {
  if (!be || be->kind != GT_DEVICE_CUDA || !e) return NULL;
  return (void *)e->e;
}
