/* A backend's streams and events, and its measured peak
 * speed: for engines that overlap copies with compute or report MFU. The
 * backend itself, its memory and its kernels are the user's API
 * (giant/backend.h). */
#ifndef GIANT_ENGINE_DEVICE_H
#define GIANT_ENGINE_DEVICE_H

#include "giant/backend.h"

GT_API_BEGIN

/* Times fp32 GEMMs of size n (n x n x n) for about `seconds` and records
 * the best rate as the backend's peak (gt_backend_peak_flops). */
gt_status gt_backend_measure_peak(gt_backend *be, int n, double seconds, double *flops);

/* The same for the products of a precision: under GT_PRECISION_BF16, gemm_ex
 * with bf16 operands and an fp32 result, as mixed-precision training runs
 * them. */
gt_status gt_backend_measure_peak_ex(gt_backend *be, gt_precision p, int n, double seconds, double *flops);

/* The recorded peak in FLOP/s; 0 until measured or set. */
double gt_backend_peak_flops(const gt_backend *be);

/* Records a peak measured earlier (a cached measurement), or a stand-in
 * where MFU does not matter, so that no measurement runs. */
void gt_backend_set_peak_flops(gt_backend *be, double flops);

/* The stream kernels run on, and the one for transfers that overlap it. */
gt_stream *gt_backend_compute_stream(const gt_backend *be);

gt_stream *gt_backend_copy_stream(const gt_backend *be);

gt_status gt_stream_create(gt_backend *be, gt_stream **s);

/* Destroying NULL does nothing. */
void gt_stream_destroy(gt_backend *be, gt_stream *s);

/* Waits on the host until the work queued on s is done. */
gt_status gt_stream_sync(gt_backend *be, gt_stream *s);

/* Work queued on s after this waits for e's work; e must have been recorded
 * (GT_ESTATE otherwise). */
gt_status gt_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e);

gt_status gt_event_create(gt_backend *be, gt_event **e);

void gt_event_destroy(gt_backend *be, gt_event *e);

/* Marks the point reached by the work queued on s. */
gt_status gt_event_record(gt_backend *be, gt_event *e, gt_stream *s);

/* Waits on the host for e's work; e must have been recorded. */
gt_status gt_event_sync(gt_backend *be, gt_event *e);

GT_API_END
#endif
