/* The all-reduce across emulated hosts (comm_hier.c), for bench_comm. */
#ifndef GIANT_BENCH_COMM_HIER_H
#define GIANT_BENCH_COMM_HIER_H

#include <stddef.h>

/* 2 network namespaces on a bridge, 2 ranks in each: an all-reduce of
 * `bytes` fp32 in two levels (shared memory in a host, TCP between the
 * hosts' leaders) against the flat TCP ring of the same ranks, rounds
 * interleaved, each host's link held to link_mbit (0: as fast as the veth
 * pair); each side's median time in seconds. Returns 0, or -1 with
 * why (not root, no `ip`, a failed run). */
int bench_comm_hier(size_t bytes, int rounds, int link_mbit, double *hier_s, double *flat_s, char *why, size_t whylen);

#endif
