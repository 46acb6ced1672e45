/* See etcd_cluster.h. */
#include "chaos/etcd_cluster.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "resilience/etcd/local.h"
#include "giant/engine/etcd.h"

static int start_member(chaos_etcd *e, const chaos_net *net, int i, const char *state) {
  const char *ip = net->ip[e->ns[i]];
  char name[16], data[260], client[64], peer[64], log[260];
  snprintf(name, sizeof name, "m%d", i);
  snprintf(data, sizeof data, "%s/etcd-m%d", e->dir, i);
  snprintf(client, sizeof client, "http://%s:2379", ip);
  snprintf(peer, sizeof peer, "http://%s:2380", ip);
  snprintf(log, sizeof log, "%s/etcd-m%d.log", e->dir, i);
  /* A lost leader is replaced in a few seconds; a member starved of a
   * core for a moment does not start an election: a heartbeat arrives
   * in ~1 ms, tens of ms on loaded cores, and the election timeout is
   * 10 heartbeats (2.5 s, 2.5x etcd's default), > 25x that. A member
   * serves only with a quorum: chaos_etcd_serving waits for the cluster. */
  static const char *const flags[] = {"--heartbeat-interval=250", "--election-timeout=2500", "--log-level=warn", NULL};
  gt_etcd_local_config c = {.name = name,
                            .data_dir = data,
                            .log_path = log,
                            .listen_client_urls = client,
                            .listen_peer_urls = peer,
                            .initial_cluster = e->initial,
                            .initial_cluster_token = e->token,
                            .initial_cluster_state = state,
                            .extra_args = flags,
                            .netns = net->ns[e->ns[i]]};
  gt_etcd_local srv;
  if (gt_etcd_local_start(&c, &srv) != GT_OK) {
    fprintf(stderr, "chaos: etcd member %d: %s\n", i, gt_last_error());
    return -1;
  }
  e->member[i] = srv;
  return 0;
}

int chaos_etcd_serving(const chaos_etcd *e, double timeout_s) {
  /* Each read fails over in 1 s (a read served takes ms, ~50 loaded);
   * failed ones are tried again until timeout_s. */
  gt_etcd_config cfg = {.endpoints = e->endpoints, .timeout_ms = 1000};
  return gt_etcd_local_wait_serving(&cfg, timeout_s) == GT_OK;
}

int chaos_etcd_start(chaos_etcd *e, const chaos_net *net, int first, const char *dir) {
  memset(e, 0, sizeof *e);
  if (first + CHAOS_ETCD_MEMBERS > net->n) {
    fprintf(stderr, "chaos: no namespaces for etcd\n");
    return -1;
  }
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
      fprintf(stderr, "chaos: cannot start etcd member %d\n", i);
      return -1;
    }
  if (!chaos_etcd_serving(e, CHAOS_ETCD_UP_S)) {
    fprintf(stderr, "chaos: the etcd cluster did not serve within %.0f s (logs in %s/etcd-m*.log)\n", CHAOS_ETCD_UP_S,
            dir);
    chaos_etcd_stop(e);
    return -1;
  }
  return 0;
}

void chaos_etcd_signal(chaos_etcd *e, int i, int sig) {
  if (i < 0 || i >= e->n || e->member[i].pid <= 0) return;
  /* `ip netns exec` execs etcd: the pid is etcd's own. */
  gt_etcd_local_signal(&e->member[i], sig);
}

int chaos_etcd_restart(chaos_etcd *e, const chaos_net *net, int i) {
  if (i < 0 || i >= e->n || e->member[i].pid > 0) return -1;
  return start_member(e, net, i, "existing");
}

void chaos_etcd_stop(chaos_etcd *e) {
  for (int i = 0; i < e->n; i++) gt_etcd_local_stop(&e->member[i], 0);
}
