/* The chaos suite's cases: each runs a job on emulated nodes, injects one
 * fault, and checks the outcome the fault table of docs/chaos.md expects,
 * then what every case checks (chaos/job.h). */
#ifndef GIANT_TESTS_CHAOS_CASES_H
#define GIANT_TESTS_CHAOS_CASES_H

#include <stdbool.h>

#include "chaos/job.h"

typedef struct chaos_result {
  bool passed;
  char why[4096];        /* what failed, with the job's output */
  char summary[512];     /* one line of what was measured */
  double recover_ms;     /* the fault to the job's next kept step; -1: none to time */
  int steps_lost;        /* step runs thrown away (the ledger's count) */
  double job_s;          /* wall time of the job */
  double kept_s;         /* of it, the steps kept (the workers' step times) */
  int faults, recovered; /* random mode */
} chaos_result;

typedef struct chaos_case {
  const char *name;
  const char *fault, *expect; /* for the report */
  int nodes;                  /* emulated nodes it needs */
  bool quick;                 /* in the CI subset (ctest -L chaos) */
  void (*run)(chaos_env *env, chaos_result *r);
} chaos_case;

extern const chaos_case chaos_cases[];
extern const int chaos_ncases;
const chaos_case *chaos_case_find(const char *name);

/* Random mode: one long job on 4 emulated nodes, faults (kill a worker,
 * kill an agent and replace it, stop a worker for 30 s, cut a node off for
 * 20 s) at the times of a Poisson process of `per_minute` a minute from
 * `seed`, for `minutes`; then the user stops the job. Prints a line per
 * fault; the result has the ETTR's parts. Returns the faults played, or
 * -1 when the job could not start. */
int chaos_random(chaos_env *env, unsigned seed, double minutes, double per_minute, chaos_result *r);

#define CHAOS_NODES 3
#define CHAOS_NPROC 2

#endif
