/* See etcd_cluster.h. */
#include "chaos/etcd_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "giant/engine/etcd.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int start_member(chaos_etcd *e, const chaos_net *net, int i, const char *state) {
  const char *ip = net->ip[e->ns[i]];
  char name[16], data[260], lc[64], ac[64], lp[64], ip_url[64], ic[560], tok[64], st[48], log[260];
  snprintf(name, sizeof name, "--name=m%d", i);
  snprintf(data, sizeof data, "--data-dir=%s/etcd-m%d", e->dir, i);
  snprintf(lc, sizeof lc, "--listen-client-urls=http://%s:2379", ip);
  snprintf(ac, sizeof ac, "--advertise-client-urls=http://%s:2379", ip);
  snprintf(lp, sizeof lp, "--listen-peer-urls=http://%s:2380", ip);
  snprintf(ip_url, sizeof ip_url, "--initial-advertise-peer-urls=http://%s:2380", ip);
  snprintf(ic, sizeof ic, "--initial-cluster=%s", e->initial);
  snprintf(tok, sizeof tok, "--initial-cluster-token=%s", e->token);
  snprintf(st, sizeof st, "--initial-cluster-state=%s", state);
  snprintf(log, sizeof log, "%s/etcd-m%d.log", e->dir, i);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    /* A lost leader is replaced in a few seconds; a member starved of a
     * core for a moment does not start an election: a heartbeat arrives
     * in ~1 ms, tens of ms on loaded cores, and the election timeout is
     * 10 heartbeats (2.5 s, 2.5x etcd's default), > 25x that. */
    execlp("ip", "ip", "netns", "exec", net->ns[e->ns[i]], "etcd", name, data, lc, ac, lp, ip_url, ic, tok, st,
           "--heartbeat-interval=250", "--election-timeout=2500", "--log-level=warn", (char *)NULL);
    _exit(127);
  }
  e->pid[i] = pid;
  return 0;
}

int chaos_etcd_serving(const chaos_etcd *e, double timeout_s) {
  /* Each read fails over in 1 s (a read served takes ms, ~50 loaded);
   * failed ones are tried again until timeout_s. */
  gt_etcd_config cfg = {.endpoints = e->endpoints, .timeout_ms = 1000};
  gt_etcd_client *c = NULL;
  if (gt_etcd_connect(&cfg, &c) != GT_OK) return 0;
  int ok = 0;
  for (double end = now_s() + timeout_s; !ok && now_s() < end;) {
    gt_etcd_kvs kvs;
    /* A linearizable read needs a leader and a quorum. */
    if (gt_etcd_get(c, "/chaos-health", NULL, &kvs) == GT_OK) ok = 1, gt_etcd_kvs_free(&kvs);
    else usleep(100000);
  }
  gt_etcd_close(c);
  return ok;
}

int chaos_etcd_start(chaos_etcd *e, const chaos_net *net, int first, const char *dir) {
  memset(e, 0, sizeof *e);
  if (first + CHAOS_ETCD_MEMBERS > net->n) return fprintf(stderr, "chaos: no namespaces for etcd\n"), -1;
  e->n = CHAOS_ETCD_MEMBERS;
  snprintf(e->dir, sizeof e->dir, "%s", dir);
  snprintf(e->token, sizeof e->token, "chaos-%s", net->tag);
  size_t ep = 0, in = 0;
  for (int i = 0; i < e->n; i++) {
    e->ns[i] = first + i;
    ep += (size_t)snprintf(e->endpoints + ep, sizeof e->endpoints - ep, "%s%s:2379", i ? "," : "", net->ip[first + i]);
    in += (size_t)snprintf(e->initial + in, sizeof e->initial - in, "%sm%d=http://%s:2380", i ? "," : "", i,
                           net->ip[first + i]);
  }
  for (int i = 0; i < e->n; i++)
    if (start_member(e, net, i, "new") != 0) {
      chaos_etcd_stop(e);
      return fprintf(stderr, "chaos: cannot start etcd member %d\n", i), -1;
    }
  if (!chaos_etcd_serving(e, CHAOS_ETCD_UP_S)) {
    fprintf(stderr, "chaos: the etcd cluster did not serve within %.0f s (logs in %s/etcd-m*.log)\n",
            CHAOS_ETCD_UP_S, dir);
    chaos_etcd_stop(e);
    return -1;
  }
  return 0;
}

void chaos_etcd_signal(chaos_etcd *e, int i, int sig) {
  if (i < 0 || i >= e->n || e->pid[i] <= 0) return;
  /* `ip netns exec` execs etcd: the pid is etcd's own. */
  kill(e->pid[i], sig);
  if (sig == SIGKILL) {
    waitpid(e->pid[i], NULL, 0);
    e->pid[i] = 0;
  }
}

int chaos_etcd_restart(chaos_etcd *e, const chaos_net *net, int i) {
  if (i < 0 || i >= e->n || e->pid[i] > 0) return -1;
  return start_member(e, net, i, "existing");
}

void chaos_etcd_stop(chaos_etcd *e) {
  for (int i = 0; i < e->n; i++) {
    if (e->pid[i] <= 0) continue;
    kill(e->pid[i], SIGCONT);
    kill(e->pid[i], SIGKILL);
    waitpid(e->pid[i], NULL, 0);
    e->pid[i] = 0;
  }
}
