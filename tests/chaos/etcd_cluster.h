/* A three-member etcd cluster for the chaos suite, each member in a network
 * namespace of its own on the suite's bridge (tests/chaos/netns.h), so
 * that the coordinator has no single point of failure and a member can be
 * killed, stopped or cut off like a node. The members are libgiant's local
 * etcd servers (resilience/etcd/local.h). Data and logs live under a directory
 * of the caller's; chaos_etcd_stop kills and reaps every member. */
#ifndef GIANT_TESTS_CHAOS_ETCD_CLUSTER_H
#define GIANT_TESTS_CHAOS_ETCD_CLUSTER_H

#include <sys/types.h>

#include "localkit/netns.h"
#include "resilience/etcd/local.h"

#define CHAOS_ETCD_MEMBERS 3
/* How long a cluster (re)started has to serve: its members elect a leader
 * after an election timeout (2.5 s, randomized up to twice that), so ~3 to
 * 6 s, a few more with Go's start on loaded cores. 90 s is > 10x; a
 * cluster that serves is not waited on any longer. */
#define CHAOS_ETCD_UP_S 90.0

typedef struct chaos_etcd {
  int n;
  gt_etcd_local member[CHAOS_ETCD_MEMBERS]; /* .pid 0: not running */
  int ns[CHAOS_ETCD_MEMBERS];               /* the member's node index in the chaos_net */
  char dir[200];                            /* <dir>/etcd-m<i>/ data, <dir>/etcd-m<i>.log */
  char endpoints[256];                      /* "IP:2379,IP:2379,IP:2379": for clients */
  char initial[512];                        /* the --initial-cluster value */
  char token[32];
} chaos_etcd;

/* Starts a member in each of the namespaces net->ns[first .. first + 2]
 * and waits (bounded) until the cluster serves. 0, or -1 with what failed
 * on stderr (what was started is stopped). */
int chaos_etcd_start(chaos_etcd *e, const chaos_net *net, int first, const char *dir);
/* Sends sig to member i (SIGKILL: reaped, pid 0). */
void chaos_etcd_signal(chaos_etcd *e, int i, int sig);
/* Starts member i again on its data (after SIGKILL); 0 or -1. */
int chaos_etcd_restart(chaos_etcd *e, const chaos_net *net, int i);
/* Whether the cluster answers a read through every listed endpoint set
 * within timeout_s (a quorum serves). */
int chaos_etcd_serving(const chaos_etcd *e, double timeout_s);
void chaos_etcd_stop(chaos_etcd *e);

#endif
