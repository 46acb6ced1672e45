/* The CUDA backend's operation table, by topic as in backend_impl.h, with
 * every kernel of the list (core/backend_kernels.h). C, not CUDA C++, for its
 * designated initializers; the functions are extern "C". */
#include "core/cuda/cuda_internal.h"

#define GT_CUDA_ENTRY(name, params) .name = gt_cuda_##name,

const gt_backend_ops gt_cuda_ops = {
    .memory =
        {
            .alloc = gt_cuda_alloc,
            .free = gt_cuda_free,
            .host_alloc = gt_cuda_host_alloc,
            .host_free = gt_cuda_host_free,
            .memcpy = gt_cuda_memcpy,
            .memset = gt_cuda_memset,
        },
    .sync =
        {
            .stream_create = gt_cuda_stream_create,
            .stream_destroy = gt_cuda_stream_destroy,
            .stream_sync = gt_cuda_stream_sync,
            .stream_wait_event = gt_cuda_stream_wait_event,
            .event_create = gt_cuda_event_create,
            .event_destroy = gt_cuda_event_destroy,
            .event_record = gt_cuda_event_record,
            .event_sync = gt_cuda_event_sync,
        },
    .kernels = {GT_BACKEND_KERNELS(GT_CUDA_ENTRY)},
    .destroy = gt_cuda_destroy,
};
