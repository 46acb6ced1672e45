/* Giant: a hybrid-parallel training engine for giant models.
 * One include for the whole public API. */
#ifndef GIANT_GIANT_H
#define GIANT_GIANT_H

#include "giant/arena.h"
#include "giant/backend.h"
#include "giant/ckpt.h"
#include "giant/comm.h"
#include "giant/data.h"
#include "giant/dist.h"
#include "giant/detector.h"
#include "giant/dp_sync.h"
#include "giant/etcd.h"
#include "giant/fault.h"
#include "giant/grid.h"
#include "giant/group.h"
#include "giant/init.h"
#include "giant/layer.h"
#include "giant/layers.h"
#include "giant/log.h"
#include "giant/metrics.h"
#include "giant/model.h"
#include "giant/optim.h"
#include "giant/options.h"
#include "giant/pipeline.h"
#include "giant/plan.h"
#include "giant/planner.h"
#include "giant/pp_exec.h"
#include "giant/predictor.h"
#include "giant/protocol.h"
#include "giant/rdzv.h"
#include "giant/rebalance.h"
#include "giant/run.h"
#include "giant/status.h"
#include "giant/store.h"
#include "giant/tensor.h"
#include "giant/trainer.h"

#define GIANT_VERSION_STRING "0.1.0"

GT_API_BEGIN
/* The version libgiant was built as (GIANT_VERSION_STRING of its headers). */
const char *gt_version(void);
GT_API_END

#endif
