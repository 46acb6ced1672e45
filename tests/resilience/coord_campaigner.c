/* A campaigner in a process of its own, for test_coord: campaigns for
 * JOB's leadership as NODE with a TTL, prints "leading <term>" once it
 * leads, then waits to be killed (at most 120 s).
 *
 * usage: coord_campaigner ENDPOINT JOB NODE TTL_S */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "giant/engine/coord.h"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: coord_campaigner ENDPOINT JOB NODE TTL_S\n");
    return 2;
  }
  gt_leader *l;
  /* An etcd request takes ~1 ms, ~50 ms on loaded cores: 5 s is 100x. */
  gt_leader_config cfg = {.etcd = {.endpoints = argv[1], .timeout_ms = 5000},
                          .job_id = argv[2],
                          .node_id = argv[3],
                          .ttl_s = atoi(argv[4])};
  if (gt_leader_open(&cfg, &l) != GT_OK) {
    fprintf(stderr, "coord_campaigner: %s\n", gt_last_error());
    return 1;
  }
  /* Nobody else holds the job when the tests start it: it leads in a few
   * ms (a lease and a put), so 60 s is only a bound on a broken etcd. */
  if (gt_leader_wait(l, 60000) != GT_OK) {
    fprintf(stderr, "coord_campaigner: %s\n", gt_last_error());
    return 1;
  }
  int64_t term = 0;
  char node[128];
  if (gt_leader_current(l, node, sizeof node, &term) != GT_OK) return 1;
  printf("leading %lld\n", (long long)term);
  fflush(stdout);
  /* The tests kill it within seconds; 120 s only ends it when a test
   * failed before doing so. */
  nanosleep(&(struct timespec){120, 0}, NULL);
  gt_leader_close(l);
  return 0;
}
