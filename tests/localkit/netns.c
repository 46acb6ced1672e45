/* See netns.h. */
#include "localkit/netns.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *chaos_unsupported(void) {
  if (geteuid() != 0) return "not root: network namespaces need CAP_NET_ADMIN";
  if (system("command -v ip >/dev/null 2>&1") != 0) return "no `ip` command (iproute2)";
  return "";
}

int chaos_sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int chaos_net_create(chaos_net *net, int n) {
  memset(net, 0, sizeof *net);
  if (n < 1 || n > CHAOS_MAX_NODES) {
    fprintf(stderr, "chaos: %d nodes, want 1..%d\n", n, CHAOS_MAX_NODES);
    return -1;
  }
  int pid = (int)getpid(), id = pid; /* whole: chaos_sweep asks whether it runs */
  snprintf(net->tag, sizeof net->tag, "%d", id);
  snprintf(net->bridge, sizeof net->bridge, "gb%d", id);
  int a = 100 + pid % 100, b = (pid / 100) % 250;
  snprintf(net->host_ip, sizeof net->host_ip, "10.%d.%d.1", a, b);
  if (chaos_sh("ip link add %s type bridge && ip addr add %s/24 dev %s && ip link set %s up", net->bridge, net->host_ip,
               net->bridge, net->bridge) != 0) {
    fprintf(stderr, "chaos: cannot make bridge %s\n", net->bridge);
    chaos_net_destroy(net);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    net->n = i + 1;
    snprintf(net->ns[i], sizeof net->ns[i], "gc%dn%d", id, i);
    snprintf(net->ip[i], sizeof net->ip[i], "10.%d.%d.%d", a, b, 11 + i);
    snprintf(net->veth[i], sizeof net->veth[i], "gv%d%d", id, i);
    char peer[16];
    snprintf(peer, sizeof peer, "gp%d%d", id, i);
    if (chaos_sh("ip netns add %s && ip link add %s type veth peer name %s && ip link set %s netns %s && "
                 "ip link set %s master %s up && ip netns exec %s ip link set %s name eth0 && "
                 "ip netns exec %s ip addr add %s/24 dev eth0 && ip netns exec %s ip link set eth0 up && "
                 "ip netns exec %s ip link set lo up",
                 net->ns[i], net->veth[i], peer, peer, net->ns[i], net->veth[i], net->bridge, net->ns[i], peer,
                 net->ns[i], net->ip[i], net->ns[i], net->ns[i]) != 0) {
      fprintf(stderr, "chaos: cannot make node %d (%s)\n", i, net->ns[i]);
      chaos_net_destroy(net);
      return -1;
    }
  }
  /* Every node reaches the root namespace and the others. */
  for (int i = 0; i < n; i++)
    if (chaos_sh("ip netns exec %s ping -c 1 -W 2 %s >/dev/null 2>&1", net->ns[i], net->host_ip) != 0 &&
        chaos_sh("command -v ping >/dev/null 2>&1") == 0) {
      fprintf(stderr, "chaos: node %d cannot reach %s\n", i, net->host_ip);
      chaos_net_destroy(net);
      return -1;
    }
  return 0;
}

int chaos_net_limit(chaos_net *net, int i, int rate_kbit) {
  if (rate_kbit <= 0)
    return chaos_sh(
        "tc qdisc del dev %s root 2>/dev/null; ip netns exec %s tc qdisc del dev eth0 root 2>/dev/null; "
        "true",
        net->veth[i], net->ns[i]);
  /* The bucket holds 10 ms of the rate (tbf wants at least a timer tick's
   * worth): a burst much larger would let a probe's payload through at
   * the line's speed. */
  long burst = (long)rate_kbit * 1000 / 8 / 100;
  if (burst < 4096) burst = 4096;
  return chaos_sh(
      "tc qdisc replace dev %s root tbf rate %dkbit burst %ld latency 200ms && ip netns exec %s tc "
      "qdisc replace dev eth0 root tbf rate %dkbit burst %ld latency 200ms",
      net->veth[i], rate_kbit, burst, net->ns[i], rate_kbit, burst);
}

void chaos_net_destroy(chaos_net *net) {
  for (int i = 0; i < net->n; i++) {
    if (!net->ns[i][0]) continue;
    /* Any process still in the namespace goes first: a namespace with
     * processes in it outlives its name. */
    chaos_sh("ip netns pids %s 2>/dev/null | xargs -r kill -9 2>/dev/null; ip netns del %s 2>/dev/null", net->ns[i],
             net->ns[i]);
    chaos_sh("ip link del %s 2>/dev/null", net->veth[i]);
  }
  if (net->bridge[0]) chaos_sh("ip link del %s 2>/dev/null", net->bridge);
}

bool chaos_net_leftovers(const chaos_net *net) {
  for (int i = 0; i < net->n; i++)
    if (net->ns[i][0] && chaos_sh("ip netns list | grep -qw %s", net->ns[i]) == 0) return true;
  return net->bridge[0] && chaos_sh("ip link show %s >/dev/null 2>&1", net->bridge) == 0;
}

/* Whether the run of pid `id` still runs. */
static bool alive(long id) { return kill((pid_t)id, 0) == 0; }

int chaos_sweep(void) {
  int removed = 0;
  FILE *p = popen("ip netns list 2>/dev/null; ip -o link show type bridge 2>/dev/null", "r");
  char line[512];
  while (p && fgets(line, sizeof line, p)) {
    long id;
    int node;
    char name[64];
    if (sscanf(line, "gc%ldn%d", &id, &node) == 2 && !alive(id) && sscanf(line, "%63s", name) == 1) {
      chaos_sh("ip netns pids %s 2>/dev/null | xargs -r kill -9 2>/dev/null; ip netns del %s 2>/dev/null", name, name);
      removed++;
    } else if (sscanf(line, "%*d: gb%ld", &id) == 1 && !alive(id)) {
      chaos_sh("ip link del gb%ld 2>/dev/null", id);
      removed++;
    }
  }
  if (p) pclose(p);
  DIR *d = opendir("/tmp");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    long id;
    if (sscanf(e->d_name, "giant-chaos%ld-", &id) == 1 && !alive(id)) {
      chaos_sh("rm -rf /tmp/%s", e->d_name);
      removed++;
    }
  }
  if (d) closedir(d);
  return removed;
}
