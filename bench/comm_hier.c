/* See comm_hier.h. Each rank enters its host's namespace, reaches the
 * run's TCP store on the bridge, and forms two groups of the same four
 * ranks: one left to choose (it finds two hosts of two ranks, and takes
 * two levels) and one held to TCP (the flat ring through every rank, what
 * a group across hosts did before). Each round times one all-reduce of
 * each, in turn, after a barrier; rank 0 keeps the times. */
#include "comm_hier.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_stats.h"
#include "giant/engine/comm.h"
#include "giant/engine/store.h"
#include "localkit/netns.h"
#include "localkit/ranks.h"

#define HOSTS 2
#define PER_HOST 2
#define MAX_ROUNDS 64

typedef struct shared {
  chaos_net net;
  int rounds;
  size_t count;
  double hier[MAX_ROUNDS], flat[MAX_ROUNDS];
  char transport[16];
} shared;

static gt_comm *group(shared *sh, gt_store *s, const char *prefix, int rank, gt_comm_transport t) {
  gt_comm_config cfg = {.store = s,
                        .prefix = prefix,
                        .rank = rank,
                        .size = HOSTS * PER_HOST,
                        .host = sh->net.ip[rank / PER_HOST],
                        .transport = t,
                        .secret = HARNESS_SECRET};
  gt_comm *c = NULL;
  CHECK_OK(gt_comm_init(&cfg, &c));
  return c;
}

static double timed(gt_comm *c, float *x, size_t n) {
  CHECK_OK(gt_comm_barrier(c));
  double t0 = gt_now();
  CHECK_OK(gt_comm_allreduce(c, x, n, GT_F32, GT_COMM_SUM));
  return gt_now() - t0;
}

static int rank_main(int rank, int n, void *arg) {
  (void)n;
  shared *sh = arg;
  char path[96];
  snprintf(path, sizeof path, "/var/run/netns/%s", sh->net.ns[rank / PER_HOST]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0);
  close(fd);
  gt_store *s = harness_store();
  gt_comm *hier = group(sh, s, "hier", rank, GT_COMM_AUTO), *flat = group(sh, s, "flat", rank, GT_COMM_TCP);
  if (rank == 0) snprintf(sh->transport, sizeof sh->transport, "%s", gt_comm_transport_name(hier));
  float *x = malloc(sh->count * sizeof *x);
  CHECK(x);
  for (size_t i = 0; i < sh->count; i++) x[i] = (float)((i + (size_t)rank) % 7);
  timed(hier, x, sh->count); /* warm: first touches, socket buffers */
  timed(flat, x, sh->count);
  for (int k = 0; k < sh->rounds; k++) {
    double h = timed(hier, x, sh->count), f = timed(flat, x, sh->count);
    if (rank == 0) {
      sh->hier[k] = h;
      sh->flat[k] = f;
    }
  }
  free(x);
  gt_comm_destroy(flat);
  gt_comm_destroy(hier);
  gt_store_destroy(s);
  return RANK_OK;
}

int bench_comm_hier(size_t bytes, int rounds, int link_mbit, double *hier_s, double *flat_s, char *why, size_t whylen) {
  const char *no = chaos_unsupported();
  if (*no) {
    snprintf(why, whylen, "%s", no);
    return -1;
  }
  shared *sh = harness_shared(sizeof *sh);
  sh->count = bytes / sizeof(float);
  sh->rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
  if (chaos_net_create(&sh->net, HOSTS) != 0) {
    snprintf(why, whylen, "could not make the emulated hosts (network namespaces)");
    return -1;
  }
  for (int i = 0; i < HOSTS && link_mbit > 0; i++)
    if (chaos_net_limit(&sh->net, i, link_mbit * 1000) != 0) {
      snprintf(why, whylen, "could not limit the emulated hosts' links (tc tbf)");
      chaos_net_destroy(&sh->net);
      return -1;
    }
  harness_store_host(sh->net.host_ip); /* the run's store, on the bridge */
  int rc = -1, codes[HOSTS * PER_HOST];
  if (harness_run(HOSTS * PER_HOST, rank_main, sh, 600, codes) != 0) {
    snprintf(why, whylen, "a rank failed");
  } else if (strcmp(sh->transport, "tcp+shm")) {
    snprintf(why, whylen, "the group across hosts took '%s', not two levels", sh->transport);
  } else {
    *hier_s = bench_median(sh->hier, sh->rounds);
    *flat_s = bench_median(sh->flat, sh->rounds);
    rc = 0;
  }
  harness_store_host("127.0.0.1");
  chaos_net_destroy(&sh->net);
  return rc;
}
