/* The device memory a backend holds and its budget (backend_ledger.c):
 * gt_backend_alloc reserves the bytes first (failing over the budget),
 * then records the block; gt_backend_free removes it. */
#ifndef GIANT_BACKEND_LEDGER_H
#define GIANT_BACKEND_LEDGER_H

#include "giant/backend.h"

typedef struct gt_mem_ledger gt_mem_ledger;

/* `what` ("device memory") names the budget in messages, `advice` says
 * what to do when it is short; both must outlive the ledger. */
gt_status gt_mem_ledger_create(size_t limit, const char *what, const char *advice, gt_mem_ledger **out);
void gt_mem_ledger_destroy(gt_mem_ledger *l);
/* Counts `bytes` in use, or fails with GT_ENOMEM naming what was asked
 * for, what is in use and the budget (`backend` prefixes the message). */
gt_status gt_mem_ledger_reserve(gt_mem_ledger *l, const char *backend, size_t bytes);
/* Undoes a reservation whose allocation failed. */
void gt_mem_ledger_unreserve(gt_mem_ledger *l, size_t bytes);
/* Remembers the block a reservation became, so that freeing it returns
 * its bytes. */
gt_status gt_mem_ledger_add(gt_mem_ledger *l, const void *ptr, size_t bytes);
void gt_mem_ledger_remove(gt_mem_ledger *l, const void *ptr);
void gt_mem_ledger_stats(gt_mem_ledger *l, gt_device_mem *out);
void gt_mem_ledger_reset_peak(gt_mem_ledger *l);

#endif
