/* Giant: a hybrid-parallel training engine for giant models.
 *
 * One include for the user's API: errors and logging, element types, the
 * backend and its kernels, layers (built-in and your own), models and their
 * annotations, data, optimizers, the job (giant/run.h: flags, training,
 * checkpoints, resilience), checkpoint inspection and metrics. A program
 * written against it needs nothing else.
 *
 * The building blocks the job is made of (communicators, groups, the store,
 * etcd, plans, the trainer, the coordinator, the detector, the ladder) are
 * the engine's API, for those who assemble an engine of their own: one
 * include, giant/engine.h. */
#ifndef GIANT_GIANT_H
#define GIANT_GIANT_H

#include "giant/status.h"
#include "giant/log.h"
#include "giant/tensor.h"
#include "giant/backend.h"
#include "giant/group.h"
#include "giant/layer.h"
#include "giant/layers.h"
#include "giant/model.h"
#include "giant/data.h"
#include "giant/optim.h"
#include "giant/options.h"
#include "giant/metrics.h"
#include "giant/ckpt.h"
#include "giant/protocol.h"
#include "giant/run.h"

#define GIANT_VERSION_STRING "0.1.0"

GT_API_BEGIN
/* The version libgiant was built as (GIANT_VERSION_STRING of its headers). */
const char *gt_version(void);
GT_API_END

#endif
