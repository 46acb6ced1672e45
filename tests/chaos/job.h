/* A job of the chaos suite: examples/gpt under one giantrun agent per
 * emulated node (tests/chaos/netns.h), etcd on the bridge, and what is
 * checked after every case: exit codes, the final loss against one process
 * trained without faults, the sample ledger, steps lost, processes, etcd
 * keys and the emulated network left behind. etcd is a three-member
 * cluster (chaos/etcd_cluster.h).
 *
 * Every wait is bounded; a case that fails leaves nothing behind either
 * (chaos_env_close removes the namespaces, kills what is in them, stops
 * etcd and removes the scratch directory). */
#ifndef GIANT_TESTS_CHAOS_JOB_H
#define GIANT_TESTS_CHAOS_JOB_H

#include <stdbool.h>
#include <sys/types.h>

#include "chaos/etcd_cluster.h"
#include "localkit/netns.h"

typedef struct chaos_env {
  chaos_net net; /* the job's nodes, then the etcd members' namespaces */
  int nodes;
  chaos_etcd etcd; /* three members, on the same bridge */
  /* The program trained: examples/gpt, or the one $GT_CHAOS_PROGRAM names
   * (custom_layer); both train through Giant's run API. */
  char prog[512], prog_name[32], giantrun[512], giant_ckpt[512];
  char dir[64], text[128], data[128]; /* scratch directory and its corpus */
  char skip[160];                     /* why the suite cannot run here, or "" */
  bool net_up, etcd_up;
} chaos_env;

/* Why the emulated nodes cannot be made here (not root, no `ip`, no etcd),
 * or "" when they can. */
const char *chaos_env_unsupported(void);
/* Makes the scratch corpus and its token file, `nodes` emulated nodes and a three-member etcd
 * cluster in namespaces of its own on their bridge. 0: ready; 1: cannot run here (env->skip says why: not root, no
 * `ip`, no etcd); -1: failed (on stderr), with everything made removed. */
int chaos_env_open(chaos_env *env, int nodes);
void chaos_env_close(chaos_env *env);
/* Whether anything of the environment is left (namespaces, bridge). */
bool chaos_env_leftovers(const chaos_env *env);

#define CHAOS_GLOBAL_BATCH 12 /* unless chaos_job_cfg.global_batch says */

typedef struct chaos_job_cfg {
  const char *name; /* the job id's stem: [A-Za-z0-9-] */
  int nodes, nproc; /* agents, and workers on each */
  int steps;
  const char *plan;        /* the launch layout, e.g. "dp=3,tp=2"; NULL: dp over every worker */
  const char *fault;       /* GT_FAULT for every worker, or NULL */
  const char *agent_flags; /* more giantrun flags, space-separated, or NULL */
  const char *model_flags; /* flags that change what is trained (the reference run takes them too) */
  const char *gpt_flags;   /* the program's flags of the job alone (how it runs), space-separated, or NULL */
  /* giantrun runs `sh -c WRAP sh PROG ARGS...` instead of the program itself: a
   * shell wrapper that decides per rank ($GT_RANK) what to run. */
  const char *wrap;
  bool no_reshape;  /* without giantrun --reshape */
  int global_batch; /* 0: CHAOS_GLOBAL_BATCH */
  /* No GT_COMM_HOST: each agent finds its node's address itself. */
  bool auto_host;
  const char *node_flags[CHAOS_MAX_NODES]; /* more giantrun flags of node i's agent, or NULL */
} chaos_job_cfg;

typedef struct chaos_job {
  chaos_env *env;
  chaos_job_cfg cfg;
  char id[64];
  char metrics[160]; /* the workers' metrics files: <dir>/<id>-m%r.jsonl */
  char log[CHAOS_MAX_NODES][160];
  pid_t agent[CHAOS_MAX_NODES];
  int code[CHAOS_MAX_NODES]; /* exit status, 128+N for signal N, -1 not ended (killed at the bound) */
  int ledger_from;           /* the ledger checks steps from this one (a job that resumed a checkpoint) */
  int ledger_to;             /* ... up to this one, excluded (0: cfg.steps; a job stopped before its end) */
  double t0, t_end;          /* start, and the last agent's end (chaos_job_wait) */
  char *out;                 /* every agent's output, after chaos_job_wait */
} chaos_job;

int chaos_global_batch(const chaos_job_cfg *c);
/* Starts one agent per node; the job id is unique to the call. */
int chaos_job_start(chaos_job *j, chaos_env *env, const chaos_job_cfg *cfg);
/* Starts node i's agent (again: its log is appended to). */
int chaos_job_start_node(chaos_job *j, int i);
/* Waits up to timeout_s for the highest step any worker has finished to
 * reach `step`; returns it, or -1 at the bound. */
int chaos_job_wait_step(chaos_job *j, int step, double timeout_s);
/* Waits up to timeout_s for a line of node i's agent output (its workers'
 * included) to hold `text`; whether one did. */
bool chaos_job_wait_log(chaos_job *j, int i, const char *text, double timeout_s);
/* The highest step rank's metrics file has, or -1. */
int chaos_rank_last_step(const chaos_job *j, int rank);
/* Waits for node i's agent (bounded; killed at the bound). */
int chaos_job_wait_node(chaos_job *j, int i, double timeout_s);
/* Waits for every agent still running, then gathers their output into
 * j->out. The agents left past the bound are killed (code -1). */
void chaos_job_wait(chaos_job *j, double timeout_s);
void chaos_job_free(chaos_job *j);

/* The last "loss A -> B over steps X..steps" line of out: B, or NAN. */
float chaos_final_loss(const char *out, int steps);
/* One process, no faults, the same model, data and steps: its last loss,
 * or NAN (with why). */
float chaos_reference_loss(chaos_env *env, const chaos_job_cfg *cfg, char *why, size_t n);

/* The sample ledger, from every worker's metrics: each step 0..steps-1 was
 * kept, every run of a step trained rows [step*G, (step+1)*G) (G the
 * global batch), so the kept steps took every sample exactly once.
 * *lost: runs of steps beyond the one kept (work a restart threw away).
 * 0, or -1 with why. */
int chaos_ledger(const chaos_job *j, int *lost, char *why, size_t n);
/* The kept steps' time, the numerator of the ETTR: for each step the
 * ledger checks, the time it took in the run that was kept (unix_s since
 * the step before it in the same run: the step and what the loop does
 * between steps), but where that holds a stall (over five times the
 * healthy pace) or follows a restart or reshape, the step's own time
 * (step_time_s) and the usual time between steps; the median across
 * ranks. The stalls, recoveries and restarts of a fault are not in it. */
double chaos_kept_seconds(const chaos_job *j);
/* Processes still running with this job's id in their environment. */
int chaos_job_processes(const chaos_job *j);
/* The job's keys in etcd: only the documented records (`done`, health and
 * mitigation records) may be left; then they are removed and none must
 * remain. 0, or -1 with why. */
int chaos_job_keys(chaos_job *j, char *why, size_t n);
/* The pid of the job's worker of world rank `rank`, or -1. */
pid_t chaos_worker_pid(const chaos_job *j, int rank);
/* Processes left in node i's namespace. */
int chaos_node_processes(const chaos_env *env, int i);

#endif
