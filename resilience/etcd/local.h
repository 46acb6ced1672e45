/* gt_etcd_local: an etcd server run by this process, as a child, on this
 * machine: giantrun --standalone's private etcd, the servers of the tests
 * and benchmarks (tests/localkit), and the members of the chaos suite's
 * cluster, each in a network namespace of its own.
 *
 *   gt_etcd_local srv;
 *   gt_etcd_local_config c = {.name = "m0", .data_dir = dir, .log_path = log,
 *                             .listen_client_urls = "http://127.0.0.1:2379",
 *                             .listen_peer_urls = "http://127.0.0.1:2380",
 *                             .ready_timeout_s = 15};
 *   gt_etcd_local_start(&c, &srv);     serving, or an error and no process
 *   ...
 *   gt_etcd_local_stop(&srv, 5);       SIGTERM, SIGKILL after 5 s
 *   gt_etcd_local_remove(dir);         rm -rf
 *
 * The module builds etcd's command line from the configuration, forks and
 * execs it (through `ip netns exec` when a namespace is named), and waits,
 * bounded, until its log says it serves: woken by the log's growth and by
 * the child's exit, not on a timer. A cluster's members serve only together;
 * start each without waiting and wait for the cluster with
 * gt_etcd_local_wait_serving. Every wait is bounded. Not thread-safe: one
 * gt_etcd_local per server, used by one thread.
 */
#ifndef GIANT_ETCD_LOCAL_H
#define GIANT_ETCD_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "giant/engine/etcd.h"
#include "giant/status.h"

typedef struct gt_etcd_local_config {
  const char *name;     /* --name; required */
  const char *data_dir; /* --data-dir; required */
  /* etcd's stdout and stderr go to this file (required): appended, or
   * emptied first with log_truncate. */
  const char *log_path;
  bool log_truncate;
  /* Comma-separated URLs. listen_client_urls and listen_peer_urls are
   * required; the advertised ones default to them. */
  const char *listen_client_urls, *advertise_client_urls;
  const char *listen_peer_urls, *advertise_peer_urls;
  /* --initial-cluster; NULL: this member alone ("name=advertise_peer_urls"). */
  const char *initial_cluster;
  const char *initial_cluster_token; /* NULL: etcd's default */
  const char *initial_cluster_state; /* "new" or "existing"; NULL: etcd's default (new) */
  /* TLS for clients: a certificate and key (both or neither); a trusted CA
   * besides asks every client for a certificate of that CA. */
  const char *cert_file, *key_file, *trusted_ca_file;
  /* TLS between members, likewise. */
  const char *peer_cert_file, *peer_key_file, *peer_trusted_ca_file;
  /* More flags ("--auth-token-ttl=2"), NULL-terminated; may be NULL. */
  const char *const *extra_args;
  /* The etcd program; NULL: gt_etcd_local_find's. */
  const char *bin;
  /* Run inside this network namespace (`ip netns exec NETNS`, which needs
   * root); NULL: this process's. */
  const char *netns;
  /* The server gets a process group of its own, so that a terminal's
   * Ctrl-C reaches only this process, which stops it in its own time. */
  bool own_process_group;
  /* SIGKILL the server when the thread that started it ends, however it
   * ends (PR_SET_PDEATHSIG). */
  bool die_with_parent;
  /* > 0: wait at most this long until the log says the server serves
   * clients (which needs etcd's info-level log, its default); a server
   * that does not is killed. 0: return once it is started. */
  double ready_timeout_s;
} gt_etcd_local_config;

typedef struct gt_etcd_local {
  pid_t pid;       /* 0 while not running */
  bool exited;     /* the last start failed because the server exited */
  int exit_status; /* its wait status then */
} gt_etcd_local;

/* The etcd program: the first etcd on PATH, else /usr/bin/etcd. GT_ENOTFOUND
 * (with a message) when there is none. */
gt_status gt_etcd_local_find(char *path, size_t cap);

/* A TCP port of 127.0.0.1 that was free a moment ago (another process may
 * take it before etcd binds it: start again on new ports then); -1 if
 * none. */
int gt_etcd_local_free_port(void);

/* Starts the server and, with ready_timeout_s, waits until it serves.
 * GT_EINVAL for a configuration that lacks what is required, GT_EIO when
 * the log cannot be opened, fork fails or the server exits while starting
 * (srv->exited, srv->exit_status saying how), GT_ETIMEDOUT when it did not
 * serve in time (it is killed). On failure srv->pid is 0. */
gt_status gt_etcd_local_start(const gt_etcd_local_config *cfg, gt_etcd_local *srv);

/* Sends sig to the server. After SIGKILL it is reaped and srv->pid is 0;
 * SIGSTOP returns once every thread of it has stopped (within 15 s, else
 * GT_ETIMEDOUT). GT_EINVAL when it is not running. */
gt_status gt_etcd_local_signal(gt_etcd_local *srv, int sig);

/* Stops the server: SIGCONT and SIGTERM, then SIGKILL if it has not exited
 * within grace_s (at once when grace_s <= 0); it is reaped and srv->pid is
 * 0. A server not running is a no-op. */
void gt_etcd_local_stop(gt_etcd_local *srv, double grace_s);

/* Removes dir and everything under it (symbolic links are removed, not
 * followed); a dir that does not exist is GT_OK. */
gt_status gt_etcd_local_remove(const char *dir);

/* Waits until the cluster at cfg's endpoints answers a linearizable read
 * (it has a leader and a quorum), at most timeout_s: each try is bounded
 * by cfg->timeout_ms (0: 1000 ms). GT_OK, GT_ETIMEDOUT, or gt_etcd_connect's
 * error. */
gt_status gt_etcd_local_wait_serving(const gt_etcd_config *cfg, double timeout_s);

/* Copies the last cap - 1 bytes (at most) of the log at path into out,
 * NUL-terminated; returns their count (0 when it cannot be read). */
size_t gt_etcd_local_log_tail(const char *path, char *out, size_t cap);

#endif
