/* The update layer by layer, while backward goes on (layer_update.c).
 *
 * An offloaded model's gradients reach the host one layer at a time; with
 * gt_trainer_config.update_per_layer the optimizer updates each layer on a
 * host thread as soon as its gradients are final, while the device runs
 * the backward of the layers below, as STRONGHOLD does; with
 * delayed_update it applies the previous step's gradients the same way.
 * The trainer opens a step (begin), the model's gradient hook hands each
 * layer over (push), and the trainer waits for the last (finish) before
 * the step ends, so a step still returns with every parameter updated (or,
 * delayed, with the previous step's update applied). */
#ifndef GIANT_OPTIM_LAYER_UPDATE_H
#define GIANT_OPTIM_LAYER_UPDATE_H

#include "giant/optim.h"

typedef struct gt_layer_update gt_layer_update;

gt_status gt_layer_update_create(gt_optimizer *o, int nlayers, gt_layer_update **out);
/* Finishes what was handed over, then stops the thread. */
void gt_layer_update_destroy(gt_layer_update *u);
/* Opens a step: the optimizer's update count moves on, and layers pushed
 * from now on are updated at learning rate lr from `grads` (NULL: the
 * model's) times grad_scale. */
void gt_layer_update_begin(gt_layer_update *u, float lr, float grad_scale, const float *grads);
/* Hands layer i over; returns at once. */
gt_status gt_layer_update_push(gt_layer_update *u, int layer);
/* Layers of this step updated so far. */
int gt_layer_update_progress(gt_layer_update *u);
/* Waits until every layer handed over is updated; the first failure, if
 * any. */
gt_status gt_layer_update_finish(gt_layer_update *u);

#endif
