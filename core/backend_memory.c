/* Memory, copies, streams and events of a backend, as callers see them:
 * arguments checked once, a NULL stream replaced by the compute stream,
 * then the backend's implementation (backend_impl.h). */
#include "core/backend_impl.h"
#include "core/backend_ledger.h"
#include "giant/engine/device.h"

static gt_status no_backend(const char *op) {
  return gt_errorf(GT_EINVAL, "%s: the backend is NULL; create one with gt_backend_create", op);
}

static gt_stream *or_compute(const gt_backend *be, gt_stream *s) { return s ? s : be->compute; }

/* ---- memory ---- */

/* Device memory, or host memory for transfers. */
static gt_status alloc_checked(gt_backend *be, bool host, size_t bytes, void **ptr) {
  const char *op = host ? "host_alloc" : "alloc";
  if (!be) return no_backend(op);
  if (!ptr) return gt_errorf(GT_EINVAL, "%s: %s: ptr must not be NULL", be->name, op);
  *ptr = NULL;
  /* Memory counts against its budget: reserved before the device or the
   * host is asked, so that two threads cannot both pass the check. */
  gt_mem_ledger *l = host ? be->host_ledger : be->ledger;
  if (l) GT_TRY(gt_mem_ledger_reserve(l, be->name, bytes));
  gt_status s = host ? be->ops->memory.host_alloc(be, bytes, ptr) : be->ops->memory.alloc(be, bytes, ptr);
  if (s == GT_OK && l) {
    s = gt_mem_ledger_add(l, *ptr, bytes);
    if (s != GT_OK) {
      if (host)
        be->ops->memory.host_free(be, *ptr);
      else
        be->ops->memory.free(be, *ptr);
      *ptr = NULL;
    }
  }
  if (s != GT_OK && l) gt_mem_ledger_unreserve(l, bytes);
  return s;
}

gt_status gt_backend_alloc(gt_backend *be, size_t bytes, void **ptr) { return alloc_checked(be, false, bytes, ptr); }

void gt_backend_free(gt_backend *be, void *ptr) {
  if (!be || !ptr) return;
  if (be->ledger) gt_mem_ledger_remove(be->ledger, ptr);
  be->ops->memory.free(be, ptr);
}

gt_status gt_backend_host_alloc(gt_backend *be, size_t bytes, void **ptr) {
  return alloc_checked(be, true, bytes, ptr);
}

void gt_backend_host_free(gt_backend *be, void *ptr) {
  if (!be || !ptr) return;
  if (be->host_ledger) gt_mem_ledger_remove(be->host_ledger, ptr);
  be->ops->memory.host_free(be, ptr);
}

gt_status gt_backend_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s) {
  if (!be) return no_backend("memcpy");
  if (kind != GT_COPY_H2D && kind != GT_COPY_D2H && kind != GT_COPY_D2D)
    return gt_errorf(GT_EINVAL, "%s: memcpy: unknown copy kind %d", be->name, (int)kind);
  if (bytes && (!dst || !src))
    return gt_errorf(GT_EINVAL, "%s: memcpy of %zu bytes with a NULL pointer", be->name, bytes);
  return be->ops->memory.memcpy(be, dst, src, bytes, kind, or_compute(be, s));
}

gt_status gt_backend_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s) {
  if (!be) return no_backend("memset");
  if (bytes && !dst) return gt_errorf(GT_EINVAL, "%s: memset of %zu bytes at NULL", be->name, bytes);
  return be->ops->memory.memset(be, dst, value, bytes, or_compute(be, s));
}

gt_status gt_backend_upload(gt_backend *be, void *dst, const void *src, size_t bytes) {
  GT_TRY(gt_backend_memcpy(be, dst, src, bytes, GT_COPY_H2D, NULL));
  return gt_stream_sync(be, NULL);
}

gt_status gt_backend_download(gt_backend *be, void *dst, const void *src, size_t bytes) {
  GT_TRY(gt_backend_memcpy(be, dst, src, bytes, GT_COPY_D2H, NULL));
  return gt_stream_sync(be, NULL);
}

/* ---- streams and events ---- */

gt_status gt_stream_create(gt_backend *be, gt_stream **s) {
  if (!be) return no_backend("stream_create");
  if (!s) return gt_errorf(GT_EINVAL, "%s: stream_create: s must not be NULL", be->name);
  return be->ops->sync.stream_create(be, s);
}

void gt_stream_destroy(gt_backend *be, gt_stream *s) {
  /* NULL names the compute stream elsewhere, but the backend owns that one. */
  if (be && s) be->ops->sync.stream_destroy(be, s);
}

gt_status gt_stream_sync(gt_backend *be, gt_stream *s) {
  if (!be) return no_backend("stream_sync");
  return be->ops->sync.stream_sync(be, or_compute(be, s));
}

gt_status gt_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e) {
  if (!be) return no_backend("stream_wait_event");
  if (!e) return gt_errorf(GT_EINVAL, "%s: stream_wait_event: the event is NULL", be->name);
  return be->ops->sync.stream_wait_event(be, or_compute(be, s), e);
}

gt_status gt_event_create(gt_backend *be, gt_event **e) {
  if (!be) return no_backend("event_create");
  if (!e) return gt_errorf(GT_EINVAL, "%s: event_create: e must not be NULL", be->name);
  return be->ops->sync.event_create(be, e);
}

void gt_event_destroy(gt_backend *be, gt_event *e) {
  if (be && e) be->ops->sync.event_destroy(be, e);
}

gt_status gt_event_record(gt_backend *be, gt_event *e, gt_stream *s) {
  if (!be) return no_backend("event_record");
  if (!e) return gt_errorf(GT_EINVAL, "%s: event_record: the event is NULL", be->name);
  return be->ops->sync.event_record(be, e, or_compute(be, s));
}

gt_status gt_event_sync(gt_backend *be, gt_event *e) {
  if (!be) return no_backend("event_sync");
  if (!e) return gt_errorf(GT_EINVAL, "%s: event_sync: the event is NULL", be->name);
  return be->ops->sync.event_sync(be, e);
}
