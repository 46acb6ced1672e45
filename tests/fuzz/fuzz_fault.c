/* Fuzz target: the GT_FAULT spec parser (gt_fault_parse, docs/faults.md),
 * and the read-only questions a plan answers. Nothing is played: faults
 * sleep, crash and kill. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/fault/fault.h"
#include "giant/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  gt_log_set_level(GT_LOG_ERROR);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *spec = malloc(size + 1);
  if (!spec) return 0;
  memcpy(spec, data, size);
  spec[size] = 0;
  gt_fault_plan plan;
  if (gt_fault_parse(spec, &plan) == GT_OK) {
    /* What the parser promises of an accepted plan (fault.h). */
    if (plan.n < 0 || plan.n > GT_FAULT_MAX) abort();
    for (int i = 0; i < plan.n; i++) {
      const gt_fault *f = &plan.f[i];
      if (f->kind < GT_FAULT_SLOW || f->kind > GT_FAULT_PACE || f->rank < -1) abort();
      if (f->kind == GT_FAULT_SLOW && !(f->factor >= 1)) abort();
    }
    for (int rank = 0; rank < 3; rank++) {
      plan.rank = rank;
      (void)gt_fault_active(&plan);
      (void)gt_fault_save_delay(&plan);
    }
  }
  free(spec);
  return 0;
}
