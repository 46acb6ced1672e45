/* CUDA-specific access, for library code that calls CUDA libraries itself
 * (NCCL) and must order its work with a CUDA backend's streams. Internal to
 * libgiant (shared with the layers above, SHARES in CMakeLists.txt).
 *
 * These exist only in builds with the CUDA backend (GIANT_HAVE_CUDA); they
 * return the cudaStream_t / cudaEvent_t behind a backend's handles, as
 * void* so this header needs no CUDA headers, or NULL when the backend is
 * not a CUDA one. A NULL stream means the backend's compute stream.
 */
#ifndef GIANT_CORE_CUDA_HANDLES_H
#define GIANT_CORE_CUDA_HANDLES_H

#include "giant/backend.h"

/* cuda_memory.cu defines them: C linkage from C++. */
#ifdef __cplusplus
extern "C" {
#endif
void *gt_cuda_stream_handle(gt_backend *be, gt_stream *s);
void *gt_cuda_event_handle(gt_backend *be, gt_event *e);
#ifdef __cplusplus
}
#endif

#endif
