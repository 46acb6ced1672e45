/* giantrun's parts: the options, the workers of one round, and the private
 * etcd of --standalone. */
#ifndef GIANT_LAUNCH_AGENT_H
#define GIANT_LAUNCH_AGENT_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "comm/ports.h"
#include "resilience/etcd/local.h"
#include "resilience/rdzv/rdzv.h"
#include "giant/protocol.h"
#include "giant/status.h"

/* What giantrun took from Slurm (slurm.c). */
typedef struct slurm_info {
  bool active;                          /* SLURM_JOB_ID is set */
  bool etcd;                            /* no --rdzv-endpoint: the nodes meet on the first node's private etcd */
  int nnodes;                           /* nodes of the step */
  int node_id;                          /* SLURM_NODEID */
  char first_host[256], node_name[256]; /* of the expanded node list */
  char nnodes_buf[16], job_buf[GT_RDZV_ID_MAX + 1];
} slurm_info;

typedef struct agent_opts {
  const char *nnodes, *endpoint, *backend, *job_id, *node_id;
  const char *log_dir, *plan, *cacert, *cert, *key;
  const char *user, *password_file; /* etcd authentication: --rdzv-user, --rdzv-password-file */
  char password[256];               /* read from password_file */
  const char *comm_integrity;       /* --comm-integrity headers|mac, given to workers as GT_COMM_INTEGRITY */
  bool comm_encrypt;                /* --comm-encrypt, given to workers as GT_COMM_ENCRYPT=1 */
  const char *ckpt_dir;             /* checkpoints: given to workers as GT_CKPT_DIR, _EVERY, _KEEP */
  int ckpt_every, ckpt_keep;
  int nproc, max_restarts, restart_window_s, ttl_s, rdzv_timeout_s;
  float settle_s, stop_grace_s, monitor_s;
  float hang_timeout_s; /* 0: 3x the longest step seen, at least 30 s */
  bool standalone, version;
  bool status, watch; /* --status [--watch]: print the job's state from etcd (status.c) */
  bool reshape;       /* a dead worker's siblings reshape in-process (GT_RESHAPE=1) */
  int min_nodes, max_nodes;
  /* --comm-ports A-B, given to workers as GT_COMM_PORTS, and parsed ({0, 0}
   * without) */
  const char *comm_ports;
  gt_port_range ports;
  char node_buf[GT_RDZV_ID_MAX + 1];
  /* The address the workers advertise (GT_COMM_HOST): --comm-host or
   * --comm-iface as given, then as found (agent_comm_addr), and whence. */
  const char *comm_host, *comm_iface;
  char comm_addr[100], comm_addr_from[160];
  char **prog_argv;         /* PROGRAM ARGS..., NULL-terminated */
  char prog_path[PATH_MAX]; /* PROGRAM resolved against PATH */
  slurm_info slurm;
} agent_opts;

/* Set by the SIGINT/SIGTERM handler: the signal number. */
extern volatile sig_atomic_t agent_stop_signal;

/* giantrun --status [--watch]: prints the job's state; the exit status. */
int agent_status(const agent_opts *o);

/* Parses argv into o. Returns -1 to go on, else the exit status (0 after
 * --help or --version, 2 after a usage error). */
int agent_parse(int argc, char **argv, agent_opts *o);

/* ---- the workers' address (addr.c) ---------------------------------------- */

/* Fills o->comm_addr (and o->comm_addr_from) with the first of:
 * --comm-host, --comm-iface's IPv4 address, $GT_COMM_HOST, the local
 * address of the route to the first of the etcd endpoints (a list as
 * --rdzv-endpoint takes) that has one. An address this node cannot
 * listen on is an error. With endpoints NULL (etcd not known yet) the
 * route is left for a later call: o->comm_addr stays empty. */
gt_status agent_comm_addr(agent_opts *o, const char *endpoints);
/* The local IPv4 address of this node's route to the first endpoint that
 * has one (HOST:PORT, a name or an IPv4 literal, with or without
 * http(s)://), into out. */
gt_status agent_route_addr(const char *endpoints, char *out, size_t n);
/* The IPv4 address of network interface iface into out; an unknown
 * interface, or one without such an address, is an error naming it. */
gt_status agent_iface_addr(const char *iface, char *out, size_t n);

/* ---- workers -------------------------------------------------------------- */

typedef struct line_buf {
  char *buf;
  size_t len;
} line_buf;

typedef struct worker {
  pid_t pid; /* also its process group */
  int rank;
  int fd[3]; /* stdout, stderr, progress pipes; -1 at EOF */
  line_buf line[2];
  /* Progress: the step counter the worker reports (gt_job_step), when it
   * last advanced, and the longest time between two advances. */
  long long step;
  double step_at, longest_step;
  double usual_step;    /* step intervals, exponentially smoothed (a stopped worker is judged against it) */
  unsigned char rec[8]; /* a partly read progress record */
  int rec_len;
  int exited;   /* reaped */
  int released; /* --reshape: it died and the others went on without it */
  int status;   /* wait status */
  FILE *log;    /* <log-dir>/<job>/gen<N>/rank<R>.log, or NULL */
} worker;

typedef struct worker_group {
  worker *w;
  int n;
  long generation;
  /* A worker of the round reported a step. Kept apart from the workers'
   * step_at, which a closed progress pipe (a worker that died) clears: a
   * node's only worker, dead, must still tell that the job trains. */
  int stepped;
} worker_group;

/* Starts the round's workers, each in its own process group. */
gt_status workers_start(worker_group *g, const agent_opts *o, const gt_rdzv_round *r);
/* --reshape: starts worker i again, alone, after it died (GT_JOIN=1: it
 * joins the running job rather than starting one). */
gt_status workers_respawn(worker_group *g, int i, const agent_opts *o, const gt_rdzv_round *r);
/* Forwards output (prefixed with the rank) for up to timeout_ms, and reaps
 * workers that exited. */
void workers_pump(worker_group *g, int timeout_ms);
/* 1 when a worker exited non-zero or by a signal; why says which.
 * Released workers are passed over. */
int workers_failed(const worker_group *g, char *why, size_t n);
/* The index of the worker workers_failed names, or -1. */
int workers_failed_index(const worker_group *g);
/* A worker's exit status that asks for a restart of every worker (the
 * in-process reshape failed: EX_TEMPFAIL; giant/protocol.h holds the protocol). */
#define WORKER_EXIT_RESTART GT_RUN_EXIT_RESTART
/* 1 when a worker of the round, dead, released or not, has reported a step:
 * the job is training. */
int workers_any_stepped(const worker_group *g);
/* 1 while a worker that is not released still runs. */
int workers_any_running(const worker_group *g);
/* Worker exit statuses that stop the job at once: a restart cannot mend
 * them, with or without --reshape. 2 is a usage or configuration error
 * (Giant's programs and most command-line tools exit 2 on bad flags); 65
 * is bad input data (EX_DATAERR: a token file that is missing, malformed
 * or truncated); 70 is training that diverged, alike on every rank; 126
 * and 127 are the shell's "cannot execute" and "not found" (an exec that
 * failed exits 127 too). */
#define WORKER_EXIT_USAGE GT_RUN_EXIT_USAGE
#define WORKER_EXIT_INPUT GT_RUN_EXIT_INPUT
#define WORKER_EXIT_DIVERGED GT_RUN_EXIT_DIVERGED
#define WORKER_EXIT_NOEXEC 126
#define WORKER_EXIT_NOTFOUND 127
/* 1 when a worker exited with one of the statuses above; why says which. */
int workers_fatal(const worker_group *g, char *why, size_t n);
/* 1 when every worker exited 0. */
int workers_all_ok(const worker_group *g);
/* The index of a worker whose step has not advanced for slack times the
 * hang timeout (timeout_s, or 0 for 3x its longest step, at least
 * HANG_FLOOR_S), or -1; why says which. Workers that never reported a
 * step, or closed their job, are not watched. */
#define HANG_FLOOR_S 30.0
int workers_hung(const worker_group *g, double timeout_s, double slack, char *why, size_t n);
/* 1 when the worker is stopped (SIGSTOP, a debugger): it, and not a peer
 * it waits for, is why it makes no progress. */
int worker_stopped(const worker *w);
/* The index of a worker that is stopped and has made no step for 3 times
 * its usual step (smoothed), at least STOPPED_FLOOR_S, or -1; why says which. A
 * stopped process is certain to make none: no hang timeout is needed to
 * tell it from a slow one. */
#define STOPPED_FLOOR_S 2.0
int workers_stopped_long(const worker_group *g, char *why, size_t n);
/* When a running worker last advanced its step (gt_now), or `since` when
 * none has yet; now when one has closed its progress pipe (gt_job_done:
 * its training is over, and what is left is no stall). */
double workers_progress_at(const worker_group *g, double since);
/* Takes progress records (8-byte little-endian step counters) from a
 * worker's progress pipe. */
void progress_take(worker *w, const unsigned char *data, size_t n);
/* SIGTERM (with SIGCONT, so a stopped worker gets it) to every live
 * worker's group, SIGKILL after grace_s, reaps all and frees the group.
 * Safe on an empty group. */
void workers_stop(worker_group *g, double grace_s);

/* ---- the round's etcd thread --------------------------------------------- */

/* While workers run, every etcd call of the round happens on this thread, so
 * that supervising workers and forwarding their output never waits on etcd
 * (a call can take its whole timeout when etcd is away). */
typedef struct monitor monitor;

typedef struct monitor_state {
  int ended; /* the thread saw the round end: ev says how */
  gt_rdzv_event ev;
  int finished;      /* this node's finish is recorded in etcd */
  double etcd_ok_at; /* last time an etcd call succeeded (gt_now) */
  char error[400];   /* the last etcd error, "" after a success */
} monitor_state;

/* Starts the thread on r, which it owns until monitor_stop. */
gt_status monitor_start(monitor **out, gt_rdzv *r, int poll_ms);
/* Asks the thread to record that every worker of this node exited 0; it
 * retries with backoff until etcd takes it. */
void monitor_finish(monitor *m);
/* --reshape: asks the thread to publish a membership epoch without the
 * worker of generation rank `rank` (gt_rdzv_member_lost), retrying. */
void monitor_member_lost(monitor *m, int rank);
void monitor_get(monitor *m, monitor_state *st);
/* Stops and joins the thread (at most one etcd call's timeout); r is the
 * caller's again. NULL is a no-op. */
void monitor_stop(monitor *m);

/* ---- the job's leadership (lead.c) ---------------------------------------- */

/* Campaigns for the job's leadership for the agent's whole run and, while
 * this node leads, decides the workers' mitigation from their reports
 * (docs/failslow.md). Workers learn that agents lead from GT_COORD=leader. */
typedef struct lead lead;
gt_status lead_start(lead **out, const agent_opts *o, const char *endpoints);
/* Resigns (another agent leads at once) and frees l. NULL is a no-op. */
void lead_stop(lead *l);

/* ---- standalone etcd ------------------------------------------------------ */

typedef struct standalone_etcd {
  gt_etcd_local srv;
  char dir[256];
  char ip[48];       /* etcd listens there: 127.0.0.1 for --standalone */
  char endpoint[80]; /* https://IP:PORT */
  /* Made at start in dir (certs.c): the CA, etcd's certificate and key, and
   * the client certificate and key the agent and its workers use. */
  char ca[300], server_cert[300], server_key[300], client_cert[300], client_key[300];
} standalone_etcd;

/* Writes the private CA's certificate and the server and client
 * certificates and keys into e->dir, each mode 0600, their paths into e. */
gt_status standalone_make_certs(standalone_etcd *e);

/* Starts etcd listening on ip (NULL: 127.0.0.1), which its certificate
 * names, on two free ports, of `ports` when it is a range. */
gt_status standalone_start(standalone_etcd *e, const char *ip, const gt_port_range *ports);
/* Stops etcd (SIGTERM, SIGKILL after 5 s) and removes its directory. */
void standalone_stop(standalone_etcd *e);

/* ---- Slurm (slurm.c) ------------------------------------------------------ */

/* Inside a Slurm allocation (SLURM_JOB_ID set), fills what the flags left
 * unset (o->nnodes, node_id, job_id NULL; o->nproc 0) from Slurm's
 * variables, and prints one line saying what it took. Returns -1 to go
 * on, else the exit status (2: a bad variable, message printed). */
int slurm_defaults(agent_opts *o);

/* The allocation's private etcd (o->slurm.etcd): run by node 0, met by the
 * others through the submit directory. */
typedef struct slurm_etcd {
  standalone_etcd etcd; /* node 0's */
  char endpoint[80];
  char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
  char shared[PATH_MAX]; /* node 0: the directory it published in */
  char local[PATH_MAX];  /* other nodes: their copy of the credentials */
  char joined[PATH_MAX]; /* other nodes: node 0's directory, where they say they left */
} slurm_etcd;

/* Starts (node 0) or finds (the others, waiting up to --rdzv-timeout) the
 * etcd, and points o's endpoint and TLS files at it; sets GT_COMM_HOST,
 * unless set, to this node's address towards it. */
gt_status slurm_etcd_start(slurm_etcd *se, agent_opts *o);
/* The others say they left; node 0 waits for them (bounded: a lease TTL
 * and 10 s), stops its etcd and removes the directories. Safe on a zeroed
 * se. */
void slurm_etcd_stop(slurm_etcd *se, const agent_opts *o);

#endif
