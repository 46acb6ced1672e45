/* Readers of the parameter buffer outside the training thread. A
 * checkpoint copies its snapshot while the next step computes, since
 * forward and backward only read the parameters; the first write (the
 * optimizer's update) waits here for the copy to end. */
#include "core/model/model_internal.h"
#include "core/model/model_engine.h"

gt_status gt_model_add_reader(gt_model *m, void (*wait)(void *ctx), void *ctx) {
  for (int i = 0; i < m->nreaders; i++)
    if (m->readers[i].wait == wait && m->readers[i].ctx == ctx)
      return gt_errorf(GT_EINVAL, "this reader of the model's parameters is registered already");
  if (m->nreaders == GT_MODEL_MAX_READERS)
    return gt_errorf(GT_EINVAL, "a model takes at most %d readers of its parameters (checkpointers)",
                     GT_MODEL_MAX_READERS);
  m->readers[m->nreaders].wait = wait;
  m->readers[m->nreaders++].ctx = ctx;
  return GT_OK;
}

void gt_model_remove_reader(gt_model *m, void (*wait)(void *ctx), void *ctx) {
  for (int i = 0; i < m->nreaders; i++)
    if (m->readers[i].wait == wait && m->readers[i].ctx == ctx) {
      m->readers[i] = m->readers[--m->nreaders];
      return;
    }
}

void gt_model_wait_readers(gt_model *m) {
  for (int i = 0; i < m->nreaders; i++) m->readers[i].wait(m->readers[i].ctx);
}
