/* Helpers shared by the etcd tests. */
#ifndef GIANT_TESTS_ETCD_TEST_H
#define GIANT_TESTS_ETCD_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "giant/engine/etcd.h"
#include "giant/log.h"
#include "localkit/etcd_server.h"

/* A call to the test's own etcd on loopback takes milliseconds, a few
 * hundred at worst under sanitizers on busy cores or while etcd syncs its
 * log to a busy disk. Calls meant to succeed get 30 s, which only ends a
 * broken run; calls meant to run out set a short deadline of their own. */
#define ETCD_CALL_MS 30000
/* How late a call that runs out may return past its deadline: 10 ms at
 * most measured on loaded cores (gRPC's deadline); 2 s is > 100x, and
 * still tells a deadline kept from one ignored for ETCD_CALL_MS. */
#define ETCD_LATE_S 2.0

#define ETCD_OK(expr)                                                                      \
  do {                                                                                     \
    gt_status s_ = (expr);                                                                 \
    if (s_ != GT_OK) fail_msg("%s -> %s: %s", #expr, gt_status_name(s_), gt_last_error()); \
  } while (0)

static inline gt_etcd_client *etcd_test_connect(const char *endpoints, int timeout_ms) {
  gt_etcd_config cfg = {0};
  cfg.endpoints = endpoints;
  cfg.timeout_ms = timeout_ms;
  gt_etcd_client *c = NULL;
  ETCD_OK(gt_etcd_connect(&cfg, &c));
  return c;
}

/* A test group's setup and teardown: an etcd of its own on loopback, and a
 * client whose calls give up after timeout_ms. */
static inline int etcd_test_up(etcd_fixture *fx, gt_etcd_client **cli, int timeout_ms) {
  if (!etcd_fixture_available() || etcd_fixture_start(fx, NULL) != 0) return -1;
  gt_etcd_config cfg = {0};
  cfg.endpoints = fx->endpoint;
  cfg.timeout_ms = timeout_ms;
  return gt_etcd_connect(&cfg, cli) == GT_OK ? 0 : -1;
}

static inline int etcd_test_down(etcd_fixture *fx, gt_etcd_client *cli) {
  gt_etcd_close(cli);
  etcd_fixture_destroy(fx);
  return 0;
}

#endif
