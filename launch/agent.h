/* giantrun's parts: the options, the workers of one round, and the private
 * etcd of --standalone. */
#ifndef GIANT_LAUNCH_AGENT_H
#define GIANT_LAUNCH_AGENT_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "giant/launch.h"
#include "giant/status.h"

typedef struct agent_opts {
  const char *nnodes, *endpoint, *backend, *job_id, *node_id;
  const char *log_dir, *plan, *cacert, *cert, *key;
  const char *ckpt_dir; /* checkpoints: given to workers as GT_CKPT_DIR, _EVERY, _KEEP */
  int ckpt_every, ckpt_keep;
  int nproc, max_restarts, ttl_s, rdzv_timeout_s;
  float settle_s, stop_grace_s, monitor_s;
  bool standalone, version;
  int min_nodes, max_nodes;
  char node_buf[GT_RDZV_ID_MAX + 1];
  char **prog_argv;           /* PROGRAM ARGS..., NULL-terminated */
  char prog_path[PATH_MAX];   /* PROGRAM resolved against PATH */
} agent_opts;

/* Set by the SIGINT/SIGTERM handler: the signal number. */
extern volatile sig_atomic_t agent_stop_signal;

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after
 * --help or --version, 2 after a usage error). */
int agent_parse(int argc, char **argv, agent_opts *o);

/* ---- workers -------------------------------------------------------------- */

typedef struct line_buf {
  char *buf;
  size_t len;
} line_buf;

typedef struct worker {
  pid_t pid;      /* also its process group */
  int rank;
  int fd[2];      /* stdout, stderr pipes; -1 at EOF */
  line_buf line[2];
  int exited;     /* reaped */
  int status;     /* wait status */
  FILE *log;      /* <log-dir>/<job>/gen<N>/rank<R>.log, or NULL */
} worker;

typedef struct worker_group {
  worker *w;
  int n;
  long generation;
} worker_group;

/* Starts the round's workers, each in its own process group. */
gt_status workers_start(worker_group *g, const agent_opts *o, const gt_rdzv_round *r);
/* Forwards output (prefixed with the rank) for up to timeout_ms, and reaps
 * workers that exited. */
void workers_pump(worker_group *g, int timeout_ms);
/* 1 when a worker exited non-zero or by a signal; why says which. */
int workers_failed(const worker_group *g, char *why, size_t n);
/* 1 when every worker exited 0. */
int workers_all_ok(const worker_group *g);
/* SIGTERM to every live worker's group, SIGKILL after grace_s, reaps all and
 * frees the group. Safe on an empty group. */
void workers_stop(worker_group *g, double grace_s);

/* ---- standalone etcd ------------------------------------------------------ */

typedef struct standalone_etcd {
  pid_t pid;
  char dir[256];
  char endpoint[64];
} standalone_etcd;

gt_status standalone_start(standalone_etcd *e);
/* Stops etcd (SIGTERM, SIGKILL after 5 s) and removes its directory. */
void standalone_stop(standalone_etcd *e);

#endif
