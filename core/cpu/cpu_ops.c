/* The CPU backend's operation table, by topic as in backend_impl.h: every
 * kernel of the list (core/backend_kernels.h) under this level's name. */
#include "core/cpu/cpu_internal.h"

#define GT_CPU_ENTRY(name, params) .name = GT_CPU_KERNEL(name),

const gt_backend_ops gt_cpu_ops = {
    .memory =
        {
            .alloc = gt_cpu_alloc,
            .free = gt_cpu_free,
            /* All CPU memory is host memory. */
            .host_alloc = gt_cpu_alloc,
            .host_free = gt_cpu_free,
            .memcpy = gt_cpu_memcpy,
            .memset = gt_cpu_memset,
        },
    .sync =
        {
            .stream_create = gt_cpu_stream_create,
            .stream_destroy = gt_cpu_stream_destroy,
            .stream_sync = gt_cpu_stream_sync,
            .stream_wait_event = gt_cpu_stream_wait_event,
            .event_create = gt_cpu_event_create,
            .event_destroy = gt_cpu_event_destroy,
            .event_record = gt_cpu_event_record,
            .event_sync = gt_cpu_event_sync,
        },
    .kernels = {GT_BACKEND_KERNELS(GT_CPU_ENTRY)},
    .destroy = gt_cpu_destroy,
};
