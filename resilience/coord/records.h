/* The coordinator's records as lines of text, and their names: what
 * health.c and mitigation.c write to etcd and read back. Internal to the
 * resilience layer. */
#ifndef GIANT_COORD_RECORDS_H
#define GIANT_COORD_RECORDS_H

#include "giant/engine/coord.h"

const char *gt_health_state_name(gt_health_state s);

const char *gt_health_kind_name(gt_health_kind k);

gt_status gt_health_format(const gt_health_record *r, char *line, size_t len);

/* Parses a line of gt_health_format; rank is taken from the caller (it is
 * in the key). A malformed line is GT_EFORMAT, naming what is wrong. */
gt_status gt_health_parse(const char *line, size_t len, int rank, gt_health_record *out);

/* One line each, parsed back exactly (GT_EFORMAT naming what is wrong). */
gt_status gt_mitigation_report_format(const gt_mitigation_report *r, char *line, size_t len);

gt_status gt_mitigation_report_parse(const char *line, size_t len, gt_mitigation_report *out);

gt_status gt_mitigation_format(const gt_mitigation *m, char *line, size_t len);

gt_status gt_mitigation_parse(const char *line, size_t len, gt_mitigation *out);

#endif
