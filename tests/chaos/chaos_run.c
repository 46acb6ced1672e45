/* chaos_run: the chaos suite's runner (tests/chaos/chaos.sh runs it).
 *
 *   chaos_run [--program P] [--case NAME]... [--quick] [--repeat N] [--list]
 *   chaos_run [--program P] --random [--seed S] [--minutes M] [--per-minute F]
 *
 * --program: the program the jobs train, gpt (the default) or
 * custom_layer; both train through Giant's run API, and so get every
 * case's resilience from it (GT_CHAOS_PROGRAM says the same).
 * Runs each case (all of them by default; --quick: the CI subset) N times
 * in a row, each on emulated nodes and an etcd of its own, removed after
 * it; prints a line per run and, last,
 *   chaos_cases=<n> passed=<p> ettr=<e> max_recover_ms=<m> leftovers=<k>
 * ETTR is the kept steps' time over the jobs' wall time. Random mode plays
 * faults into one long job (chaos_random) and ends with
 *   chaos_random faults=<n> recovered=<r> steps_lost=<l> ettr=<e> max_recover_ms=<m> leftovers=<k>
 * Exit 0 when every
 * run passed and nothing was left behind, 1 otherwise, 77 when the suite
 * cannot run here (not root, no `ip`, no etcd), 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos/cases.h"

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: chaos_run [--program gpt|custom_layer] [--case NAME]... [--quick] [--repeat N] [--list]\n"
          "       chaos_run [--program gpt|custom_layer] --random [--seed S] [--minutes M] [--per-minute F]\n");
  return rc;
}

int main(int argc, char **argv) {
  const chaos_case *pick[64];
  int npick = 0, repeat = 1;
  bool quick = false, random = false;
  double minutes = 10, per_minute = 1;
  unsigned seed = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--program") && i + 1 < argc) {
      const char *p = argv[++i];
      if (strcmp(p, "gpt") != 0 && strcmp(p, "custom_layer") != 0) {
        fprintf(stderr, "chaos_run: --program wants gpt or custom_layer, got '%s'\n", p);
        return 2;
      }
      setenv("GT_CHAOS_PROGRAM", p, 1);
    } else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
      const chaos_case *c = chaos_case_find(argv[++i]);
      if (!c) {
        fprintf(stderr, "chaos_run: no case '%s' (--list shows them)\n", argv[i]);
        return 2;
      }
      if (npick < 64) pick[npick++] = c;
    } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 100) {
        fprintf(stderr, "chaos_run: --repeat wants 1..100, got '%s'\n", argv[i]);
        return 2;
      }
      repeat = (int)n;
    } else if ((!strcmp(argv[i], "--minutes") || !strcmp(argv[i], "--per-minute")) && i + 1 < argc) {
      char *end;
      double v = strtod(argv[i + 1], &end);
      if (*end || !(v > 0) || v > 1440) {
        fprintf(stderr, "chaos_run: %s wants a number in (0, 1440], got '%s'\n", argv[i], argv[i + 1]);
        return 2;
      }
      *(!strcmp(argv[i], "--minutes") ? &minutes : &per_minute) = v;
      i++;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      char *end;
      unsigned long v = strtoul(argv[++i], &end, 10);
      if (*end || end == argv[i] || v > 0xffffffffUL) {
        fprintf(stderr, "chaos_run: --seed wants a whole number, got '%s'\n", argv[i]);
        return 2;
      }
      seed = (unsigned)v;
    } else if (!strcmp(argv[i], "--random")) {
      random = true;
    } else if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--list")) {
      for (int k = 0; k < chaos_ncases; k++)
        printf("%-14s %s%s -> %s\n", chaos_cases[k].name, chaos_cases[k].quick ? "[quick] " : "", chaos_cases[k].fault,
               chaos_cases[k].expect);
      return 0;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      return usage(stdout, 0);
    } else {
      fprintf(stderr, "chaos_run: unknown argument '%s'\n", argv[i]);
      return usage(stderr, 2);
    }
  }
#ifndef GIANT_FAULTS
  /* Every case plays GT_FAULT's faults (a crash, a slowdown, a pace that
   * makes a job outlast its fault), which such a build refuses. */
  printf(
      "chaos: skipped: this build has no fault points (configure with -DGIANT_FAULTS=ON; tests/chaos/chaos.sh does)\n");
  return 77;
#endif
  int swept = chaos_sweep();
  if (swept) printf("chaos: removed %d thing(s) a killed run left behind\n", swept);
  if (random) {
    chaos_env env;
    int o = chaos_env_open(&env, 4);
    if (o == 1) {
      printf("chaos: skipped: %s\n", env.skip);
      return 77;
    }
    chaos_result r = {.recover_ms = -1};
    int faults = o == 0 ? chaos_random(&env, seed, minutes, per_minute, &r) : -1;
    chaos_env copy = env;
    chaos_env_close(&env);
    int left = chaos_env_leftovers(&copy);
    printf("%s\n", r.summary);
    if (!r.passed) printf("why: %s\n", faults < 0 ? "the job could not start" : r.why);
    printf("chaos_random faults=%d recovered=%d steps_lost=%d ettr=%.3f max_recover_ms=%.0f leftovers=%d\n", r.faults,
           r.recovered, r.steps_lost, r.job_s > 0 ? r.kept_s / r.job_s : 0, r.recover_ms, left);
    return r.passed && !left ? 0 : 1;
  }
  if (npick == 0)
    for (int k = 0; k < chaos_ncases; k++)
      if (!quick || chaos_cases[k].quick) pick[npick++] = &chaos_cases[k];
  int runs = 0, passed = 0, leftovers = 0;
  double job_s = 0, kept_s = 0, max_recover = 0;
  for (int k = 0; k < npick; k++) {
    for (int rep = 0; rep < repeat; rep++) {
      chaos_env env;
      int o = chaos_env_open(&env, pick[k]->nodes);
      if (o == 1) {
        printf("chaos: skipped: %s\n", env.skip);
        return 77;
      }
      chaos_result r = {.recover_ms = -1};
      if (o == 0)
        pick[k]->run(&env, &r);
      else
        snprintf(r.why, sizeof r.why, "cannot make the emulated nodes or start etcd");
      chaos_env copy = env;
      chaos_env_close(&env);
      bool left = chaos_env_leftovers(&copy);
      runs++;
      passed += r.passed;
      leftovers += left;
      job_s += r.job_s;
      kept_s += r.kept_s;
      if (r.recover_ms > max_recover) max_recover = r.recover_ms;
      printf("chaos: %-12s run %d/%d: %s (%.1f s, recovered in %.0f ms, %d step run(s) lost%s)\n  %s\n", pick[k]->name,
             rep + 1, repeat, r.passed ? "passed" : "FAILED", r.job_s, r.recover_ms, r.steps_lost,
             left ? ", LEFT SOMETHING BEHIND" : "", r.summary);
      if (!r.passed) printf("  why: %s\n", r.why);
      fflush(stdout);
    }
  }
  printf("chaos_cases=%d passed=%d ettr=%.3f max_recover_ms=%.0f leftovers=%d\n", runs, passed,
         job_s > 0 ? kept_s / job_s : 0, max_recover, leftovers);
  return passed == runs && leftovers == 0 ? 0 : 1;
}
