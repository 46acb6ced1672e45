/* Emulated nodes, for the chaos tests and the benchmarks across hosts: each node a network namespace with
 * its own address on a bridge of the test's own, joined by a veth pair.
 * Everything is named after the test's pid, so that runs side by side do
 * not meet, and chaos_net_destroy removes it all (namespaces, links),
 * also after a failed case. Needs root (CAP_NET_ADMIN) and `ip`. */
#ifndef GIANT_LOCALKIT_NETNS_H
#define GIANT_LOCALKIT_NETNS_H

#include <stdbool.h>

#define CHAOS_MAX_NODES 8

typedef struct chaos_net {
  int n;
  char tag[16];                   /* from the pid: in every name below */
  char bridge[16];                /* in the root namespace, addressed host_ip */
  char host_ip[32];               /* 10.A.B.1: the root namespace on the bridge (etcd listens here) */
  char ns[CHAOS_MAX_NODES][32];   /* node i's namespace */
  char ip[CHAOS_MAX_NODES][32];   /* node i's address: 10.A.B.(11 + i) */
  char veth[CHAOS_MAX_NODES][16]; /* node i's link's end on the bridge (a partition sets it down) */
} chaos_net;

/* Why the suite cannot run here ("" when it can): not root, no `ip`. */
const char *chaos_unsupported(void);
/* Runs a shell command; returns its exit status (-1 when it could not run). */
int chaos_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Makes n nodes; 0 on success, else -1 with what failed on stderr (what
 * was made is removed). */
int chaos_net_create(chaos_net *net, int n);
/* A slow link: node i's link limited to rate_kbit each way, by a tc token
 * bucket (tbf) on both ends of its veth pair; 0 takes the limits away.
 * Returns 0, or the failed command's status. */
int chaos_net_limit(chaos_net *net, int i, int rate_kbit);
/* Removes the namespaces and links; safe on a half-made or destroyed net. */
void chaos_net_destroy(chaos_net *net);
/* Removes what a run killed before its cleanup left (its pid, which names
 * everything it made, no longer runs): namespaces and the processes in
 * them, bridges, and /tmp/giant-chaos<pid>-* directories. Returns how many
 * things it removed. */
int chaos_sweep(void);
/* Whether anything of net is left: a namespace or the bridge. */
bool chaos_net_leftovers(const chaos_net *net);

#endif
