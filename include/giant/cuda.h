/* CUDA-specific access, for code that calls CUDA libraries itself (NCCL,
 * custom kernels) and must order its work with a CUDA backend's streams.
 *
 * These exist only in builds with the CUDA backend (GIANT_HAVE_CUDA); they
 * return the cudaStream_t / cudaEvent_t behind a backend's handles, as
 * void* so this header needs no CUDA headers, or NULL when the backend is
 * not a CUDA one. A NULL stream means the backend's compute stream.
 */
#ifndef GIANT_CUDA_H
#define GIANT_CUDA_H

#include "giant/backend.h"

GT_API_BEGIN

void *gt_cuda_stream_handle(gt_backend *be, gt_stream *s);
void *gt_cuda_event_handle(gt_backend *be, gt_event *e);

GT_API_END
#endif
