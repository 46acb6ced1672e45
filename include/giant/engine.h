/* Giant's engine API: the building blocks of a training job, for programs
 * that assemble an engine of their own instead of running the job through
 * giant/run.h. It includes the user's API (giant/giant.h) and adds:
 *
 *   engine/device.h      streams, events, measured peak speed
 *   engine/model.h       a model's flat buffers, layout, annotations, memory ledger
 *   engine/store.h       key-value stores (TCP; etcd in engine/etcd.h)
 *   engine/comm.h        communicators and their collectives
 *   engine/grid.h        the dp x tp x pp process grid
 *   engine/plan.h        plans: a layout resolved against a model
 *   engine/dist.h        a job's parallel state
 *   engine/pipeline.h    pipeline schedules as data, and their simulator
 *   engine/trainer.h     the training step
 *   engine/checkpoint.h  checkpointing a trainer
 *   engine/init.h        a worker joining its job (gt_init)
 *   engine/etcd.h        the etcd v3 client
 *   engine/coord.h       the coordinator: leader, health, mitigation records
 *   engine/predictor.h   the iteration-time predictor
 *   engine/detector.h    fail-slow detection
 *   engine/ladder.h      the mitigation ladder's decision
 *
 * docs/engine.md walks through assembling a job from them. */
#ifndef GIANT_ENGINE_H
#define GIANT_ENGINE_H

#include "giant/giant.h"

#include "giant/engine/device.h"
#include "giant/engine/model.h"
#include "giant/engine/comm.h"
#include "giant/engine/grid.h"
#include "giant/engine/plan.h"
#include "giant/engine/dist.h"
#include "giant/engine/pipeline.h"
#include "giant/engine/trainer.h"
#include "giant/engine/checkpoint.h"
#include "giant/engine/init.h"
#include "giant/engine/etcd.h"
#include "giant/engine/coord.h"
#include "giant/engine/predictor.h"
#include "giant/engine/detector.h"
#include "giant/engine/ladder.h"

#endif
