/* giantrun: the node agent. Joins the job's rendezvous on etcd, runs this
 * node's workers, watches them and the other nodes, and moves to the next
 * generation (stopping and starting its workers again) when either fails. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "giant/log.h"
#include "launch/agent.h"
#include "launch/keeper.h"
#include "resilience/rdzv/rdzv.h"

static void on_signal(int sig) { agent_stop_signal = sig; }

static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static int fail_status(gt_status st, const char *what) {
  if (st == GT_ECANCELED && agent_stop_signal) return 128 + agent_stop_signal;
  fprintf(stderr, "giantrun: %s: %s (%s)\n", what, gt_last_error(), gt_status_name(st));
  return 1;
}

typedef enum {
  ROUND_RESTART,
  ROUND_DONE,
  ROUND_FAILED,
  ROUND_STOPPED,
  ROUND_ERROR,
  ROUND_UNRECORDED /* the workers finished, but etcd never heard of it */
} round_end;

/* How long a node whose workers all exited 0 keeps trying to record that
 * while etcd is unreachable, before it exits 0 anyway. */
#define FINISH_RECORD_S 120.0
/* Restarts wait BACKOFF_BASE_S * 2^(restarts-1), at most BACKOFF_MAX_S,
 * times a random factor in [0.5, 1) so that a crash loop neither spins nor
 * hammers etcd and the nodes in step. */
#define BACKOFF_BASE_S 1.0
#define BACKOFF_MAX_S 30.0

/* This node's workers failed: the job moves on, or, when the failure is
 * fatal (a usage or configuration error), ends. */
static round_end report_failure(gt_rdzv *r, const char *why, int fatal, int *code) {
  gt_status st = fatal ? gt_rdzv_abort(r, why) : gt_rdzv_fail(r, why);
  if (st != GT_OK) {
    *code = fail_status(st, "reporting the failure to etcd");
    return ROUND_ERROR;
  }
  return ROUND_RESTART; /* the next join sees the new generation, or the end */
}

/* The round ended (seen by the etcd thread): stop what still runs here. */
static round_end round_over(const agent_opts *o, gt_rdzv *r, const gt_rdzv_round *rd, worker_group *g, gt_rdzv_event ev,
                            int finished) {
  /* Another node ended the job (only after every node finished). */
  if (ev == GT_RDZV_DONE && !finished)
    gt_warn("giantrun: the job ended (%s) while workers ran here", gt_rdzv_reason(r));
  workers_stop(g, o->stop_grace_s);
  if (ev == GT_RDZV_RESTART) {
    gt_warn("giantrun: leaving gen%ld: %s", rd->generation, gt_rdzv_reason(r));
    return ROUND_RESTART;
  }
  return ev == GT_RDZV_DONE ? ROUND_DONE : ROUND_FAILED;
}

/* Runs one round's workers until they finish, fail, or the job moves on.
 * etcd is left to the etcd thread (monitor.c) meanwhile. */
static round_end run_round(const agent_opts *o, gt_rdzv *r, const gt_rdzv_round *rd, int *code) {
  worker_group g;
  gt_status st = workers_start(&g, o, rd);
  monitor *m = NULL;
  if (st == GT_OK) st = monitor_start(&m, r, (int)(o->monitor_s * 1000));
  if (st != GT_OK) {
    *code = fail_status(st, "starting workers");
    workers_stop(&g, o->stop_grace_s);
    gt_rdzv_fail(r, "could not start its workers");
    return ROUND_ERROR;
  }
  gt_info("giantrun: node %s is node %d of %d in gen%ld; ranks %d..%d of %d running%s", o->node_id, rd->node_rank,
          rd->nnodes, rd->generation, rd->rank_base, rd->rank_base + rd->nproc - 1, rd->world_size,
          rd->rejoin ? ", joining the running job" : "");
  int interval_ms = (int)(o->monitor_s * 1000);
  int finished = 0, warned = 0, replaced = 0, left = 0;
  double started = gt_now();
  char why[400];
  for (;;) {
    workers_pump(&g, interval_ms);
    monitor_state ms;
    monitor_get(m, &ms);
    if (agent_stop_signal) {
      gt_info("giantrun: signal %d: stopping the workers", (int)agent_stop_signal);
      workers_stop(&g, o->stop_grace_s);
      monitor_stop(m);
      *code = 128 + agent_stop_signal;
      return ROUND_STOPPED;
    }
    if (left) {
      /* Cut off (--reshape): the workers are gone; wait for etcd to answer
       * and move the job to a round that takes this node in again. */
      if (ms.ended) {
        monitor_stop(m);
        return round_over(o, r, rd, &g, ms.ev, 0);
      }
      if (gt_now() - ms.etcd_ok_at > o->rdzv_timeout_s) {
        monitor_stop(m);
        fprintf(stderr, "giantrun: lost etcd for %d s (--rdzv-timeout): %s\n", o->rdzv_timeout_s, ms.error);
        *code = 1;
        return ROUND_ERROR;
      }
      continue;
    }
    /* --reshape: a stopped worker (SIGSTOP) that makes no step is the one
     * holding the others up: it is killed, and goes as a dead one does. A
     * worker that is merely blocked past the hang timeout is likely
     * waiting for a peer (on this node or another) whose own agent acts
     * first: it gets twice the timeout before this node gives up. */
    int stopped = o->reshape ? workers_stopped_long(&g, why, sizeof why) : -1;
    if (stopped >= 0) {
      gt_warn("giantrun: %s; it is stopped: killing it (--reshape)", why);
      kill(-g.w[stopped].pid, SIGKILL);
      kill(-g.w[stopped].pid, SIGCONT);
      continue;
    }
    int hung = workers_hung(&g, o->hang_timeout_s, o->reshape ? 2.0 : 1.0, why, sizeof why) >= 0;
    int dead = hung ? -1 : workers_failed_index(&g);
    /* A worker that dies before the job took its first step leaves no
     * training to go on with: the round fails, and restarts (back-off,
     * --max-restarts), as it does without --reshape. Restarted alone, such
     * a worker would join a job none of whose ranks may be able to run. */
    if (o->reshape && dead >= 0 && workers_failed(&g, why, sizeof why) && !workers_fatal(&g, why, sizeof why) &&
        !(WIFEXITED(g.w[dead].status) && WEXITSTATUS(g.w[dead].status) == WORKER_EXIT_RESTART) &&
        (workers_any_stepped(&g) || rd->rejoin) && (workers_any_running(&g) || rd->world_size > g.n)) {
      /* --reshape: the others go on without it, in a membership epoch
       * that the etcd thread publishes. */
      gt_warn("giantrun: %s; the other workers reshape without it (--reshape)", why);
      g.w[dead].released = 1;
      monitor_member_lost(m, g.w[dead].rank);
      /* It alone starts again, and joins the running job; each such
       * restart counts against --max-restarts. */
      if (replaced < o->max_restarts) {
        gt_status rs = workers_respawn(&g, dead, o, rd);
        if (rs == GT_OK) {
          replaced++;
          gt_info("giantrun: worker rank %d restarted alone (pid %ld): it joins the running job", g.w[dead].rank,
                  (long)g.w[dead].pid);
        } else {
          gt_warn("giantrun: cannot restart worker rank %d alone: %s", g.w[dead].rank, gt_last_error());
        }
      }
      continue;
    }
    if (hung || workers_failed(&g, why, sizeof why)) {
      int fatal = !hung && workers_fatal(&g, why, sizeof why);
      gt_warn("giantrun: %s; stopping this node's workers", why);
      workers_stop(&g, o->stop_grace_s);
      monitor_stop(m);
      return report_failure(r, why, fatal, code);
    }
    if (!finished && workers_all_ok(&g)) {
      monitor_finish(m);
      finished = 1;
    }
    if (ms.ended) {
      monitor_stop(m);
      return round_over(o, r, rd, &g, ms.ev, finished);
    }
    if (ms.error[0] && !warned) gt_warn("giantrun: %s; retrying", ms.error);
    warned = ms.error[0] != 0;
    double silent = gt_now() - ms.etcd_ok_at;
    if (finished && silent > FINISH_RECORD_S) {
      /* The work is done; only its record is missing. */
      gt_warn(
          "giantrun: every worker here exited 0, but etcd has not answered for %.0f s (%s): "
          "exiting 0 without the job marked done in etcd",
          silent, ms.error);
      monitor_stop(m);
      workers_stop(&g, o->stop_grace_s);
      *code = 0;
      return ROUND_UNRECORDED;
    }
    /* --reshape: etcd silent past a lease TTL while no worker here made a
     * step either: this node is cut off (were only etcd away, the workers
     * would go on training). The others have gone on without it (its
     * ranks left their membership); its workers stop, since they can no
     * longer be part of the job, and the node rejoins once etcd answers. */
    bool progressing = gt_now() - workers_progress_at(&g, started) <= o->ttl_s;
    if (o->reshape && !finished && silent > o->ttl_s && !progressing) {
      gt_warn(
          "giantrun: etcd silent for %.0f s, past the lease TTL (%s): the job goes on without this node; its "
          "workers stop, and it rejoins when etcd answers (--reshape)",
          silent, ms.error);
      workers_stop(&g, o->stop_grace_s);
      left = 1;
      continue;
    }
    /* etcd may come back; past a lease TTL the job has moved on anyway,
     * unless (--reshape) the workers go on training: etcd itself is away
     * (a lost quorum keeps every lease), and they wait for it up to
     * --rdzv-timeout. */
    double limit = o->reshape && progressing ? o->rdzv_timeout_s : o->ttl_s + 10.0;
    if (!finished && silent > limit) {
      workers_stop(&g, o->stop_grace_s);
      monitor_stop(m);
      fprintf(stderr, "giantrun: lost etcd: %s\n", ms.error);
      *code = 1;
      return ROUND_ERROR;
    }
  }
}

/* Waits before running workers again after the job's restarts went up to
 * restarts. Returns 0 when a signal came meanwhile. */
static int back_off(int restarts) {
  double d = BACKOFF_BASE_S;
  for (int i = 1; i < restarts && d < BACKOFF_MAX_S; i++) d *= 2;
  if (d > BACKOFF_MAX_S) d = BACKOFF_MAX_S;
  unsigned seed = (unsigned)getpid() ^ (unsigned)(gt_now() * 1e6);
  d *= 0.5 + 0.5 * (rand_r(&seed) / ((double)RAND_MAX + 1));
  gt_info("giantrun: restart %d: waiting %.1f s before starting workers again", restarts, d);
  double t0 = gt_now();
  for (double end = t0 + d; gt_now() < end;) {
    if (agent_stop_signal) return 0;
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  /* The wait as taken (naps overshoot), to the millisecond: a restart's
   * time can then be told apart from the back-off it chose to wait. */
  gt_info("giantrun: restart %d: back-off waited %.3f s", restarts, gt_now() - t0);
  return 1;
}

static int run_job(const agent_opts *o, const char *endpoints) {
  gt_rdzv_config cfg = {.endpoints = endpoints,
                        .cacert = o->cacert,
                        .cert = o->cert,
                        .key = o->key,
                        .user = o->user,
                        .password = o->user ? o->password : NULL,
                        .job_id = o->job_id,
                        .node_id = o->node_id,
                        .min_nodes = o->min_nodes,
                        .max_nodes = o->max_nodes,
                        .nproc = o->nproc,
                        .max_restarts = o->max_restarts,
                        .restart_window_s = o->restart_window_s,
                        .ttl_s = o->ttl_s,
                        .settle_ms = (int)(o->settle_s * 1000),
                        .join_timeout_ms = o->rdzv_timeout_s * 1000,
                        .call_timeout_ms = 5000,
                        .poll_ms = (int)(o->monitor_s * 1000),
                        .reshape = o->reshape,
                        .cancel = &agent_stop_signal};
  gt_rdzv *r;
  gt_status st = gt_rdzv_open(&cfg, &r);
  if (st != GT_OK) return fail_status(st, "rendezvous");
  lead *ld = NULL;
  if ((st = lead_start(&ld, o, endpoints)) != GT_OK) {
    gt_rdzv_close(r);
    return fail_status(st, "leadership");
  }
  int code = 1, rounds = 0, last_restarts = -1;
  for (;;) {
    gt_rdzv_round rd;
    gt_rdzv_event ev;
    st = gt_rdzv_join(r, &rd, &ev);
    if (st != GT_OK) {
      code = fail_status(st, "rendezvous");
      break;
    }
    if (ev != GT_RDZV_RUNNING) {
      if (rounds == 0) {
        fprintf(stderr, "giantrun: job '%s' has already ended in etcd (%s): choose a new --job-id\n", o->job_id,
                gt_rdzv_reason(r));
        code = 1;
      } else if (ev == GT_RDZV_DONE) {
        code = 0;
      } else {
        fprintf(stderr, "giantrun: the job failed: %s\n", gt_rdzv_reason(r));
        code = 1;
      }
      break;
    }
    rounds++;
    if (last_restarts >= 0 && rd.restarts > last_restarts && !back_off(rd.restarts)) {
      code = 128 + agent_stop_signal;
      break;
    }
    last_restarts = rd.restarts;
    round_end end = run_round(o, r, &rd, &code);
    if (end == ROUND_RESTART) continue;
    if (end == ROUND_DONE) {
      gt_info("giantrun: job %s done (%s)", o->job_id, gt_rdzv_reason(r));
      code = 0;
    } else if (end == ROUND_FAILED) {
      fprintf(stderr, "giantrun: the job failed: %s\n", gt_rdzv_reason(r));
      code = 1;
    }
    break;
  }
  lead_stop(ld);
  gt_rdzv_close(r);
  return code;
}

/* The address this node's workers advertise (agent_comm_addr): -1 to go
 * on, else giantrun's exit status. */
static int comm_addr(agent_opts *o, const char *endpoints) {
  gt_status st = agent_comm_addr(o, endpoints);
  if (st != GT_OK) {
    fprintf(stderr, "giantrun: the address of this node's workers: %s\n", gt_last_error());
    return st == GT_EINVAL ? 2 : 1;
  }
  if (o->comm_addr[0])
    gt_info("giantrun: node %s: workers advertise %s to their peers (from %s)", o->node_id, o->comm_addr,
            o->comm_addr_from);
  return -1;
}

int main(int argc, char **argv) {
  install_signals();
  agent_opts o;
  int r = agent_parse(argc, argv, &o);
  if (r >= 0) return r;
  if (o.status) return agent_status(&o);
  /* Before any thread: whatever ends this agent, its workers' children go
   * with it (keeper.h). */
  gt_status ks = keeper_start();
  if (ks != GT_OK) return fail_status(ks, "starting");
  char endpoints[1024];
  /* The workers' address first: a bad --comm-iface is told before an etcd
   * starts. --standalone's etcd listens on loopback (standalone.c); the
   * route to Slurm's is known once it runs. */
  int code = comm_addr(&o, o.slurm.etcd ? NULL : o.standalone ? "127.0.0.1" : o.endpoint);
  if (code >= 0) return code;
  standalone_etcd etcd = {0};
  slurm_etcd setcd = {0};
  if (o.slurm.etcd) {
    gt_status st = slurm_etcd_start(&setcd, &o);
    if (st != GT_OK) return fail_status(st, "Slurm");
    snprintf(endpoints, sizeof endpoints, "%s", o.endpoint);
    if (!o.comm_addr[0] && (code = comm_addr(&o, o.endpoint)) >= 0) {
      slurm_etcd_stop(&setcd, &o);
      return code;
    }
  } else if (o.standalone) {
    gt_status st = standalone_start(&etcd, NULL, &o.ports);
    if (st != GT_OK) return fail_status(st, "standalone");
    snprintf(endpoints, sizeof endpoints, "%s", etcd.endpoint);
    o.endpoint = endpoints;
    o.cacert = etcd.ca;
    o.cert = etcd.client_cert;
    o.key = etcd.client_key;
  } else {
    snprintf(endpoints, sizeof endpoints, "%s", o.endpoint);
  }
  code = agent_stop_signal ? 128 + agent_stop_signal : run_job(&o, endpoints);
  if (o.standalone) standalone_stop(&etcd);
  if (o.slurm.etcd) slurm_etcd_stop(&setcd, &o);
  return code;
}
