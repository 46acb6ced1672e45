/* The etcd of a launcher test program: one server on loopback for all of
 * its tests, started before the first and removed after the last. */
#ifndef GIANT_TESTS_LAUNCH_ETCD_H
#define GIANT_TESTS_LAUNCH_ETCD_H

#include "localkit/etcd_server.h"
#include "launch/launch_test.h"

static etcd_fixture fx;

static int etcd_setup(void **state) {
  (void)state;
  return etcd_fixture_start(&fx, NULL);
}

static int etcd_teardown(void **state) {
  (void)state;
  etcd_fixture_destroy(&fx);
  return 0;
}

/* 0 when etcd is on PATH; else 77 (skipped), saying so. */
static inline int etcd_missing(void) {
  if (etcd_fixture_available()) return 0;
  fprintf(stderr, "etcd not found on PATH: skipping\n");
  return 77;
}

/* main's return: the tests' result, or 77 (skipped) without etcd. */
#define RUN_WITH_ETCD(tests) (etcd_missing() ? 77 : cmocka_run_group_tests(tests, etcd_setup, etcd_teardown))

#endif
