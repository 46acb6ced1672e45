/* Helpers shared by the etcd tests. */
#ifndef GIANT_TESTS_ETCD_TEST_H
#define GIANT_TESTS_ETCD_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "giant/etcd.h"
#include "giant/log.h"
#include "localkit/etcd_server.h"

#define ETCD_OK(expr)                                                        \
  do {                                                                       \
    gt_status s_ = (expr);                                                   \
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

#endif
