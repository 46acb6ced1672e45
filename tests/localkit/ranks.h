/* Ranks on one machine, for tests and benchmarks: fork N ranks on
 * loopback, each running a function, with a TCP store hosted by the parent;
 * a bounded wait collects their exit statuses and kills stragglers. */
#ifndef GIANT_LOCALKIT_RANKS_H
#define GIANT_LOCALKIT_RANKS_H

#include <stdio.h>
#include <unistd.h>

#include "giant/engine/comm.h"
#include "giant/log.h"
#include "giant/engine/store.h"

#define HARNESS_SECRET "giant-test-secret"
#define HARNESS_MAX 16

/* Exit codes a rank reports. */
enum { RANK_OK = 0, RANK_FAIL = 1 };
/* What harness_run records for a rank that did not exit by itself. */
#define RANK_KILLED_BY(sig) (128 + (sig))
#define RANK_STRAGGLER (-1)
/* A rank that stopped itself (SIGSTOP): killed once every other rank ended. */
#define RANK_STOPPED 200

extern int harness_rank;

/* Checks inside a rank: on failure print where and why, and exit. */
#define CHECK(cond)                                                                                                   \
  do {                                                                                                                \
    if (!(cond)) {                                                                                                    \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s [last error: %s]\n", harness_rank, __FILE__, __LINE__, #cond, \
              gt_last_error());                                                                                       \
      fflush(stderr);                                                                                                 \
      _exit(RANK_FAIL);                                                                                               \
    }                                                                                                                 \
  } while (0)
#define CHECK_OK(expr) CHECK((expr) == GT_OK)

typedef int (*harness_fn)(int rank, int n, void *arg);

/* Runs fn on n forked ranks; codes[i] gets each rank's exit code,
 * RANK_KILLED_BY(sig) or RANK_STRAGGLER. Returns the number of ranks whose
 * code was not RANK_OK. */
int harness_run(int n, harness_fn fn, void *arg, double timeout_s, int *codes);

/* In a rank: a client of the parent's store. */
gt_store *harness_store(void);
/* The address the store of later runs listens on (default 127.0.0.1):
 * ranks in network namespaces of their own reach it on their bridge. */
void harness_store_host(const char *host);
/* In a rank: a communicator of all n ranks under prefix. */
gt_comm *harness_comm(gt_store *s, const char *prefix, int rank, int n, gt_comm_transport t, int op_timeout_ms);
/* Memory shared by the parent and every rank (created before forking). */
void *harness_shared(size_t bytes);

/* The CUDA devices a rank each can open, at most `most`, counted in a
 * child so that the caller never initializes CUDA before forking ranks;
 * with none, the reason is printed ("skipped: ..."). */
int harness_cuda_devices(int most);

#endif
