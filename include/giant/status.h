/* Status codes and error messages.
 *
 * Every fallible function returns a gt_status. GT_OK is zero; failures are
 * negative. A failing function also leaves a message for the calling thread,
 * read with gt_last_error(), that says what was wrong and what to do about
 * it. The message survives until the next failure on the same thread.
 */
#ifndef GIANT_STATUS_H
#define GIANT_STATUS_H

#include <stdarg.h>

/* Everything between GT_API_BEGIN and GT_API_END in a public header is
 * libgiant's interface: exported from the shared library, which is built
 * with hidden visibility, and C linkage for C++. Nothing else leaves it. */
#ifdef __cplusplus
#define GT_API_EXTERN_C_BEGIN extern "C" {
#define GT_API_EXTERN_C_END }
#else
#define GT_API_EXTERN_C_BEGIN
#define GT_API_EXTERN_C_END
#endif
#define GT_API_BEGIN _Pragma("GCC visibility push(default)") GT_API_EXTERN_C_BEGIN
#define GT_API_END GT_API_EXTERN_C_END _Pragma("GCC visibility pop")

GT_API_BEGIN

typedef enum gt_status {
  GT_OK = 0,
  GT_EINVAL = -1,        /* bad argument, flag or configuration */
  GT_ENOMEM = -2,        /* out of host or device memory, or over a budget */
  GT_EIO = -3,           /* a read, write or system call failed */
  GT_EFORMAT = -4,       /* malformed file, checkpoint or network message */
  GT_ETIMEDOUT = -5,     /* a wait ran out of time */
  GT_EABORTED = -6,      /* the operation's handle was aborted */
  GT_ECONN = -7,         /* a peer or server is unreachable or went away */
  GT_EAUTH = -8,         /* authentication or authorisation failed */
  GT_ENOTFOUND = -9,     /* a named thing (file, key, layer) does not exist */
  GT_EEXIST = -10,       /* it exists already */
  GT_EUNSUPPORTED = -11, /* valid, but not implemented for this case */
  GT_EBACKEND = -12,     /* the device or a library below us failed */
  GT_ESTATE = -13,       /* called in the wrong state (order of calls) */
  GT_ERANGE = -14,       /* a value out of its allowed range */
  GT_ECANCELED = -15,    /* cancelled on request */
} gt_status;

/* "GT_EINVAL" and so on. */
const char *gt_status_name(gt_status s);

/* The message of the calling thread's most recent failure ("" if none). */
const char *gt_last_error(void);

/* Records a message for this thread and returns `code`, so a failure path
 * reads: return gt_errorf(GT_EINVAL, "B must be positive, got %d", B); */
gt_status gt_errorf(gt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
gt_status gt_verrorf(gt_status code, const char *fmt, va_list ap);

/* Prefixes the current message with context ("loading data/x.tok: ...")
 * and returns `code` unchanged. */
gt_status gt_error_context(gt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Propagate a failure to the caller. */
#define GT_TRY(expr)                          \
  do {                                        \
    gt_status gt_try_s_ = (expr);             \
    if (gt_try_s_ != GT_OK) return gt_try_s_; \
  } while (0)

GT_API_END
#endif
