/* Membership of a running round: lost members and waiting nodes move the
 * job on; finished members end it; failures move it on or, fatal, end it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "giant/log.h"
#include "resilience/rdzv/internal.h"
#include "giant/engine/etcd.h"
#include "resilience/rdzv/rdzv.h"

static gt_status need_round(const gt_rdzv *r, const char *what) {
  if (r->gen < 0 || !r->members)
    return gt_errorf(GT_ESTATE, "%s: this node is in no round; call gt_rdzv_join first", what);
  return GT_OK;
}

static int is_member(const gt_rdzv *r, const char *id) {
  for (int i = 0; i < r->nmembers; i++)
    if (!strcmp(r->members[i].id, id)) return 1;
  return 0;
}

static int is_released(const gt_rdzv *r, const char *id) {
  for (int i = 0; i < r->nmembers; i++)
    if (!strcmp(r->members[i].id, id)) return r->members[i].released;
  return 0;
}

/* cfg.reshape: member i left; its ranks leave the membership so that the
 * others go on without them. Every agent that sees it does the same, and
 * gt_members_remove is idempotent, so the first one's epoch stands. */
static gt_status release(gt_rdzv *r, int i) {
  int base = 0;
  for (int k = 0; k < i; k++) base += r->members[k].nproc;
  GT_TRY(gt_rdzv_members_lost(r, base, r->members[i].nproc));
  r->members[i].released = 1;
  gt_warn(
      "giantrun: node %s left gen%ld (its lease lapsed): ranks %d..%d leave, the others reshape without "
      "them",
      r->members[i].id, r->gen, base, base + r->members[i].nproc - 1);
  return GT_OK;
}

static gt_status revive_leases(gt_rdzv *r) {
  gt_warn("rendezvous: etcd kept node %s's lease through the outage: renewing it again", r->cfg.node_id);
  gt_etcd_keepalive_stop(r->ka);
  r->ka = NULL;
  GT_TRY(gt_etcd_keepalive_start(r->cli, r->lease, NULL, NULL, &r->ka));
  if (r->job_ka && gt_etcd_keepalive_lost(r->job_ka)) {
    gt_etcd_keepalive_stop(r->job_ka);
    r->job_ka = NULL;
    GT_TRY(gt_etcd_keepalive_start(r->cli, r->job_lease, NULL, NULL, &r->job_ka));
  }
  return GT_OK;
}

/* Every member finished or, reshaping, left and was let go: the job is
 * done. */
static gt_status end_done(gt_rdzv *r, int released, gt_rdzv_event *ev) {
  char val[64];
  snprintf(val, sizeof val, "ok gen%ld", r->gen);
  int ended;
  GT_TRY(rdzv_end_job(r, NULL, val, &ended));
  r->ended = 1;
  if (released)
    snprintf(r->reason, sizeof r->reason, "every worker left in gen%ld exited 0 (%d node(s) left before)", r->gen,
             released);
  else
    snprintf(r->reason, sizeof r->reason, "every worker of gen%ld exited 0", r->gen);
  *ev = GT_RDZV_DONE;
  return GT_OK;
}

static gt_status look(gt_rdzv *r, const rdzv_snap *s, gt_rdzv_event *ev) {
  if (s->done) {
    r->ended = 1;
    snprintf(r->reason, sizeof r->reason, "%s", s->done_val);
    *ev = s->done > 0 ? GT_RDZV_DONE : GT_RDZV_FAILED;
    return GT_OK;
  }
  if (s->gen != r->gen) {
    char k[256];
    rdzv_key(r, k, sizeof k, "gen%ld/reason", r->gen);
    void *v;
    size_t len;
    if (gt_etcd_get_value(r->cli, k, &v, &len, NULL) == GT_OK) {
      snprintf(r->reason, sizeof r->reason, "%.*s", (int)len, (const char *)v);
      free(v);
    }
    *ev = GT_RDZV_RESTART;
    return GT_OK;
  }
  char why[400], np[256], fp[256];
  rdzv_key(r, np, sizeof np, "gen%ld/nodes/", r->gen);
  rdzv_key(r, fp, sizeof fp, "gen%ld/finished/", r->gen);
  const gt_etcd_kvs *nodes = rdzv_snap_nodes(s), *fin = rdzv_snap_finished(s);
  int finished = 0, released = 0;
  for (int i = 0; i < r->nmembers; i++) {
    finished += rdzv_kvs_has(fin, fp, r->members[i].id);
    released += r->members[i].released;
  }
  /* Finished records outlive leases: a node whose workers all exited 0 has
   * done its part even if etcd was away long enough for its lease to go. */
  if (finished && finished + released == r->nmembers) return end_done(r, released, ev);
  /* The keepalive gives up after a TTL without an answer. If this read
   * still sees the node's key, etcd kept the lease (it expires none without
   * a quorum, and a new leader renews them all): renew it again, go on. */
  if (r->ka && gt_etcd_keepalive_lost(r->ka) && rdzv_kvs_has(nodes, np, r->cfg.node_id)) GT_TRY(revive_leases(r));
  if ((!r->ka || gt_etcd_keepalive_lost(r->ka)) && !rdzv_kvs_has(fin, fp, r->cfg.node_id)) {
    snprintf(why, sizeof why, "node %s lost its lease (etcd unreachable for a TTL)", r->cfg.node_id);
    /* cfg.reshape: the others go on without this node's ranks; it leaves
     * the round and rejoins it (gt_rdzv_join), rather than restart all. */
    if (r->cfg.reshape && r->nmembers > 1 && finished == 0) {
      snprintf(r->reason, sizeof r->reason, "%s; it rejoins gen%ld in-process", why, r->gen);
      *ev = GT_RDZV_RESTART;
      return GT_OK;
    }
    GT_TRY(rdzv_advance(r, s, 1, why));
    *ev = GT_RDZV_RESTART;
    return GT_OK;
  }
  /* A member that left, reshaping, is let go while one stays: the others
   * go on without its ranks. Once some have finished, they trained to the
   * end without them (their workers exit 0 only after the last step), so
   * the job ends, rather than a new round that resumes at the last step
   * to do nothing. */
  for (int i = 0; i < r->nmembers; i++) {
    const char *id = r->members[i].id;
    if (!r->members[i].released && !rdzv_kvs_has(nodes, np, id) && !rdzv_kvs_has(fin, fp, id)) {
      snprintf(why, sizeof why, "node %s left gen%ld", id, r->gen);
      if (r->cfg.reshape && released + 1 < r->nmembers) {
        GT_TRY(release(r, i));
        released++;
        continue;
      }
      GT_TRY(rdzv_advance(r, s, 1, why));
      *ev = GT_RDZV_RESTART;
      return GT_OK;
    }
  }
  if (finished && finished + released == r->nmembers) return end_done(r, released, ev);
  /* A node waiting to join is admitted by a new round, unless workers have
   * already finished (a new round would run them again). */
  size_t pl = strlen(np);
  if (r->nmembers - released < r->cfg.max_nodes && finished == 0) {
    for (size_t i = 0; i < nodes->n; i++) {
      const char *id = nodes->kvs[i].key + pl;
      if (r->cfg.reshape && is_released(r, id)) {
        /* Back, and rejoining in-process (gt_rdzv_join): a member again,
         * released anew should it leave again. */
        for (int k = 0; k < r->nmembers; k++)
          if (!strcmp(r->members[k].id, id)) r->members[k].released = 0;
        released--;
        gt_info("giantrun: node %s is back in gen%ld: its workers join the running job", id, r->gen);
        continue;
      }
      if (!is_member(r, id) || is_released(r, id)) {
        snprintf(why, sizeof why, "node %s waits to join; admitting it at gen%ld", id, r->gen + 1);
        GT_TRY(rdzv_advance(r, s, 0, why));
        *ev = GT_RDZV_RESTART;
        return GT_OK;
      }
    }
  }
  *ev = GT_RDZV_RUNNING;
  return GT_OK;
}

/* Drains the watch: 1 when something other than a workers' store key
 * changed (or the watch broke), so the round must be read again. */
static int changed(gt_rdzv *r) {
  if (!r->watch) return 1;
  if (gt_etcd_watch_status(r->watch) != GT_OK) {
    gt_etcd_watch_cancel(r->watch);
    r->watch = NULL;
    return 1;
  }
  size_t rl = strlen(r->root);
  int relevant = 0;
  gt_etcd_event ev;
  while (gt_etcd_watch_next(r->watch, &ev, 0) == GT_OK) {
    const char *k = ev.kv.key ? ev.kv.key : "";
    int store = strlen(k) > rl && !strncmp(k + rl, "gen", 3) && strstr(k + rl, "/store/");
    if (ev.type != GT_ETCD_EVENT_PUT && ev.type != GT_ETCD_EVENT_DELETE)
      relevant = 1;
    else if (!store)
      relevant = 1;
    gt_etcd_event_free(&ev);
  }
  return relevant;
}

/* Past this without a read, read anyway: a safety net under the watch. */
#define FULL_READ_PERIOD_S 5.0

gt_status gt_rdzv_check(gt_rdzv *r, gt_rdzv_event *ev) {
  *ev = GT_RDZV_RUNNING;
  GT_TRY(need_round(r, "gt_rdzv_check"));
  int lease_lost = !r->ka || gt_etcd_keepalive_lost(r->ka);
  if (!changed(r) && !lease_lost && rdzv_now() - r->last_read < FULL_READ_PERIOD_S) return GT_OK;
  rdzv_snap s;
  GT_TRY(rdzv_snap_read(r, r->gen, &s));
  r->last_read = rdzv_now();
  if (!r->watch) {
    gt_etcd_watch_opts wo = {.prefix = 1, .start_revision = s.res.revision + 1};
    if (gt_etcd_watch_start(r->cli, r->root, &wo, NULL, NULL, &r->watch) != GT_OK) r->watch = NULL;
  }
  gt_status st = look(r, &s, ev);
  rdzv_snap_free(&s);
  return st;
}

/* Moves the job on from this node's failure, or ends it (fatal). */
static gt_status fail_round(gt_rdzv *r, const char *why, int fatal) {
  rdzv_snap s;
  GT_TRY(rdzv_snap_read(r, r->gen, &s));
  gt_status st = GT_OK;
  if (!s.done && s.gen == r->gen) {
    char full[400];
    snprintf(full, sizeof full, "node %s: %s", r->cfg.node_id, why ? why : "workers failed");
    if (fatal) {
      char done[420];
      snprintf(done, sizeof done, "failed: %s", full);
      int ended;
      st = rdzv_end_job(r, &s, done, &ended);
      if (st == GT_OK && ended) snprintf(r->reason, sizeof r->reason, "%s", full);
    } else {
      st = rdzv_advance(r, &s, 1, full);
    }
  }
  rdzv_snap_free(&s);
  return st;
}

gt_status gt_rdzv_fail(gt_rdzv *r, const char *why) {
  GT_TRY(need_round(r, "gt_rdzv_fail"));
  return fail_round(r, why, 0);
}

gt_status gt_rdzv_abort(gt_rdzv *r, const char *why) {
  GT_TRY(need_round(r, "gt_rdzv_abort"));
  return fail_round(r, why, 1);
}

gt_status gt_rdzv_finish(gt_rdzv *r) {
  GT_TRY(need_round(r, "gt_rdzv_finish"));
  char k[256];
  rdzv_key(r, k, sizeof k, "gen%ld/finished/%s", r->gen, r->cfg.node_id);
  /* No lease: the record stands even if this agent's lease lapses later. */
  return gt_etcd_put(r->cli, k, "1", 1, 0, NULL, NULL);
}
