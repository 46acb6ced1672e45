/* The update layer by layer on a thread of its own (layer_update.h).
 *
 * Exactness: AdamW and SGD are elementwise, so updating the layers in
 * backward order, on another thread, gives the same numbers as one pass
 * after backward. The gradients and their scale are fixed when the step
 * opens: this step's without clipping (the scale is 1 before the norm is
 * known), or the previous step's, held aside, with the scale its norm gave
 * (the delayed update). What must not happen is a layer's update reading
 * gradients that are still arriving: the model's hook hands a layer over
 * only once this step's gradients for it are on the host and final (the
 * step's last micro-batch), and nothing writes either set again before the
 * step ends.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "optim/layer_update.h"
#include "optim/optimizer_engine.h"

struct gt_layer_update {
  gt_optimizer *opt;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *queue; /* layers handed over and not yet taken */
  int cap, head, count;
  int pushed, done; /* this step's */
  float lr, scale;
  const float *grads; /* NULL: the model's */
  bool stop;
  gt_status status; /* the step's first failure */
  char message[512];
};

static void *serve(void *arg) {
  gt_layer_update *u = arg;
  pthread_mutex_lock(&u->mu);
  for (;;) {
    while (!u->count && !u->stop) pthread_cond_wait(&u->cv, &u->mu);
    if (!u->count) break;
    int layer = u->queue[u->head];
    u->head = (u->head + 1) % u->cap;
    u->count--;
    float lr = u->lr, scale = u->scale;
    const float *grads = u->grads;
    bool failed = u->status != GT_OK;
    pthread_mutex_unlock(&u->mu);
    gt_status s = failed ? GT_OK : gt_optimizer_step_layer_from(u->opt, layer, lr, scale, grads);
    pthread_mutex_lock(&u->mu);
    if (s != GT_OK && u->status == GT_OK) {
      u->status = s;
      snprintf(u->message, sizeof u->message, "updating layer %d: %s", layer, gt_last_error());
    }
    u->done++;
    pthread_cond_broadcast(&u->cv);
  }
  pthread_mutex_unlock(&u->mu);
  return NULL;
}

gt_status gt_layer_update_create(gt_optimizer *o, int nlayers, gt_layer_update **out) {
  *out = NULL;
  gt_layer_update *u = calloc(1, sizeof *u);
  int cap = nlayers + 1;
  if (u) u->queue = calloc((size_t)cap, sizeof *u->queue);
  if (!u || !u->queue) {
    if (u) free(u);
    return gt_errorf(GT_ENOMEM, "out of memory for the layer-by-layer update");
  }
  u->opt = o;
  u->cap = cap;
  pthread_mutex_init(&u->mu, NULL);
  pthread_cond_init(&u->cv, NULL);
  if (pthread_create(&u->thread, NULL, serve, u) != 0) {
    pthread_cond_destroy(&u->cv);
    pthread_mutex_destroy(&u->mu);
    free(u->queue);
    free(u);
    return gt_errorf(GT_EIO, "cannot start the thread of the layer-by-layer update");
  }
  *out = u;
  return GT_OK;
}

void gt_layer_update_destroy(gt_layer_update *u) {
  if (!u) return;
  pthread_mutex_lock(&u->mu);
  u->stop = true;
  pthread_cond_broadcast(&u->cv);
  pthread_mutex_unlock(&u->mu);
  pthread_join(u->thread, NULL);
  pthread_cond_destroy(&u->cv);
  pthread_mutex_destroy(&u->mu);
  free(u->queue);
  free(u);
}

void gt_layer_update_begin(gt_layer_update *u, float lr, float grad_scale, const float *grads) {
  pthread_mutex_lock(&u->mu);
  /* A step that failed before its finish may have left layers in hand. */
  while (u->done < u->pushed) pthread_cond_wait(&u->cv, &u->mu);
  gt_optimizer_begin_step(u->opt);
  u->lr = lr;
  u->scale = grad_scale;
  u->grads = grads;
  u->pushed = u->done = 0;
  u->status = GT_OK;
  pthread_mutex_unlock(&u->mu);
}

gt_status gt_layer_update_push(gt_layer_update *u, int layer) {
  pthread_mutex_lock(&u->mu);
  if (u->count == u->cap) {
    pthread_mutex_unlock(&u->mu);
    return gt_errorf(GT_ESTATE, "layer %d handed over for update twice in a step", layer);
  }
  u->queue[(u->head + u->count) % u->cap] = layer;
  u->count++;
  u->pushed++;
  pthread_cond_broadcast(&u->cv);
  pthread_mutex_unlock(&u->mu);
  return GT_OK;
}

int gt_layer_update_progress(gt_layer_update *u) {
  pthread_mutex_lock(&u->mu);
  int done = u->done;
  pthread_mutex_unlock(&u->mu);
  return done;
}

gt_status gt_layer_update_finish(gt_layer_update *u) {
  pthread_mutex_lock(&u->mu);
  while (u->done < u->pushed) pthread_cond_wait(&u->cv, &u->mu);
  gt_status s = u->status;
  pthread_mutex_unlock(&u->mu);
  if (s != GT_OK) return gt_errorf(s, "%s", u->message);
  return GT_OK;
}
