/* Status names and the per-thread error message. */
#include "giant/status.h"

#include <stdio.h>
#include <string.h>

#define GT_ERRMSG_MAX 1024
static _Thread_local char errmsg[GT_ERRMSG_MAX];

const char *gt_status_name(gt_status s) {
  switch (s) {
    case GT_OK: return "GT_OK";
    case GT_EINVAL: return "GT_EINVAL";
    case GT_ENOMEM: return "GT_ENOMEM";
    case GT_EIO: return "GT_EIO";
    case GT_EFORMAT: return "GT_EFORMAT";
    case GT_ETIMEDOUT: return "GT_ETIMEDOUT";
    case GT_EABORTED: return "GT_EABORTED";
    case GT_ECONN: return "GT_ECONN";
    case GT_EAUTH: return "GT_EAUTH";
    case GT_ENOTFOUND: return "GT_ENOTFOUND";
    case GT_EEXIST: return "GT_EEXIST";
    case GT_EUNSUPPORTED: return "GT_EUNSUPPORTED";
    case GT_EBACKEND: return "GT_EBACKEND";
    case GT_ESTATE: return "GT_ESTATE";
    case GT_ERANGE: return "GT_ERANGE";
    case GT_ECANCELED: return "GT_ECANCELED";
  }
  return "GT_E?";
}

const char *gt_last_error(void) { return errmsg; }

gt_status gt_verrorf(gt_status code, const char *fmt, va_list ap) {
  vsnprintf(errmsg, sizeof errmsg, fmt, ap);
  return code;
}

gt_status gt_errorf(gt_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gt_verrorf(code, fmt, ap);
  va_end(ap);
  return code;
}

gt_status gt_error_context(gt_status code, const char *fmt, ...) {
  char prefix[GT_ERRMSG_MAX / 2], old[GT_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, errmsg, sizeof old);
  /* Truncation is fine: the prefix matters most. */
  size_t n = strnlen(prefix, sizeof prefix);
  memcpy(errmsg, prefix, n);
  size_t k = n;
  if (k + 2 < sizeof errmsg) {
    errmsg[k++] = ':';
    errmsg[k++] = ' ';
  }
  size_t rest = strnlen(old, sizeof old);
  if (rest > sizeof errmsg - 1 - k) rest = sizeof errmsg - 1 - k;
  memcpy(errmsg + k, old, rest);
  errmsg[k + rest] = '\0';
  return code;
}
