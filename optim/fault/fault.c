/* GT_FAULT: the parser, and the plan read once per process. Every error
 * names the fault it is in and the part that was wrong, since a typo in a
 * chaos test must not pass silently as "no fault". Compiled only into a
 * build with fault points (GIANT_FAULTS; refuse.c otherwise). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/fault/fault.h"
#include "giant/log.h"

typedef struct kind_info {
  const char *name;
  gt_fault_kind kind;
  const char *keys;     /* allowed keys, space-separated, each padded by spaces */
  const char *required; /* required keys, likewise */
} kind_info;

static const kind_info kinds[] = {
    {"slow", GT_FAULT_SLOW, " rank factor from until ", " rank factor "},
    {"slowlink", GT_FAULT_SLOWLINK, " rank peer delay_ms from until ", " rank peer delay_ms "},
    {"stall", GT_FAULT_STALL, " rank at seconds ", " rank at seconds "},
    {"crash", GT_FAULT_CRASH, " rank at ", " rank at "},
    {"nan", GT_FAULT_NAN, " rank at ", " rank at "},
    {"nangrad", GT_FAULT_NANGRAD, " rank at ", " rank at "},
    {"slowsave", GT_FAULT_SLOWSAVE, " rank seconds ", " rank seconds "},
    {"crashreshape", GT_FAULT_CRASH_RESHAPE, " rank ", " rank "},
    {"stallreshape", GT_FAULT_STALL_RESHAPE, " rank seconds ", " rank seconds "},
    {"holdjoin", GT_FAULT_HOLDJOIN, " rank seconds ", " rank seconds "},
    {"pace", GT_FAULT_PACE, " rank ms from until ", " rank ms "},
};

static bool has_word(const char *list, const char *w, size_t n) {
  for (const char *p = strstr(list, " "); p && p[1]; p = strchr(p + 1, ' '))
    if (strncmp(p + 1, w, n) == 0 && p[1 + n] == ' ') return true;
  return false;
}

static gt_status parse_number(const char *fault, const char *key, const char *val, bool integer, double *out) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (end == val || *end || errno || !isfinite(v) || (integer && (v != floor(v) || v < 0 || v > 1e9)))
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': %s=%s is not %s", fault, key, val,
                     integer ? "a whole number >= 0" : "a number");
  *out = v;
  return GT_OK;
}

static gt_status set_key(const char *fault, gt_fault *f, const char *key, const char *val) {
  double v = 0;
  if (strcmp(key, "rank") == 0 && strcmp(val, "all") == 0) {
    f->rank = -1;
    return GT_OK;
  }
  bool integer = strcmp(key, "factor") != 0 && strcmp(key, "delay_ms") != 0 && strcmp(key, "seconds") != 0 &&
                 strcmp(key, "ms") != 0;
  GT_TRY(parse_number(fault, key, val, integer, &v));
  if (strcmp(key, "rank") == 0)
    f->rank = (int)v;
  else if (strcmp(key, "peer") == 0)
    f->peer = (int)v;
  else if (strcmp(key, "from") == 0)
    f->from = (int)v;
  else if (strcmp(key, "until") == 0)
    f->until = (int)v;
  else if (strcmp(key, "at") == 0)
    f->at = (int)v;
  else if (strcmp(key, "factor") == 0)
    f->factor = v;
  else if (strcmp(key, "delay_ms") == 0)
    f->delay_ms = v;
  else if (strcmp(key, "ms") == 0)
    f->step_ms = v;
  else
    f->seconds = v;
  return GT_OK;
}

static gt_status check_values(const char *fault, const gt_fault *f) {
  if (f->kind == GT_FAULT_SLOW && !(f->factor >= 1))
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': factor must be >= 1 (3 runs three times slower)", fault);
  bool ranged = f->kind == GT_FAULT_SLOW || f->kind == GT_FAULT_SLOWLINK || f->kind == GT_FAULT_PACE;
  if (ranged && f->until >= 0 && f->until <= f->from)
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': until (%d) must come after from (%d)", fault, f->until, f->from);
  if ((f->kind == GT_FAULT_SLOWLINK && f->delay_ms < 0) || (f->kind == GT_FAULT_PACE && f->step_ms < 0) ||
      ((f->kind == GT_FAULT_STALL || f->kind == GT_FAULT_SLOWSAVE || f->kind == GT_FAULT_STALL_RESHAPE ||
        f->kind == GT_FAULT_HOLDJOIN) &&
       f->seconds < 0))
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': a delay must be >= 0", fault);
  if (f->kind == GT_FAULT_SLOWLINK && f->rank == f->peer)
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': a link joins two different ranks", fault);
  if (f->kind == GT_FAULT_SLOWLINK && f->rank < 0)
    return gt_errorf(GT_EINVAL, "GT_FAULT '%s': a link needs one rank, not rank=all", fault);
  return GT_OK;
}

/* One "kind:key=value,..." (modified in place). */
static gt_status parse_fault(char *text, gt_fault *f) {
  char fault[160];
  snprintf(fault, sizeof fault, "%s", text);
  char *colon = strchr(text, ':');
  if (colon) *colon = '\0';
  const kind_info *k = NULL;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(text, kinds[i].name) == 0) k = &kinds[i];
  if (!k)
    return gt_errorf(GT_EINVAL,
                     "GT_FAULT '%s': unknown fault kind '%s' (want slow, slowlink, stall, crash, nan, nangrad, "
                     "slowsave, crashreshape, stallreshape, holdjoin or pace)",
                     fault, text);
  *f = (gt_fault){.kind = k->kind, .until = -1};
  char seen[128] = " ";
  for (char *save = NULL, *kv = colon ? strtok_r(colon + 1, ",", &save) : NULL; kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv || !eq[1]) return gt_errorf(GT_EINVAL, "GT_FAULT '%s': '%s' is not key=value", fault, kv);
    *eq = '\0';
    if (!has_word(k->keys, kv, strlen(kv)))
      return gt_errorf(GT_EINVAL, "GT_FAULT '%s': unknown key '%s' for %s (keys:%s)", fault, kv, k->name, k->keys);
    if (has_word(seen, kv, strlen(kv))) return gt_errorf(GT_EINVAL, "GT_FAULT '%s': '%s' given twice", fault, kv);
    GT_TRY(set_key(fault, f, kv, eq + 1));
    size_t len = strlen(seen);
    snprintf(seen + len, sizeof seen - len, "%s ", kv);
  }
  for (const char *r = k->required + 1; *r; r = strchr(r, ' ') + 1) {
    size_t n = strcspn(r, " ");
    if (!has_word(seen, r, n))
      return gt_errorf(GT_EINVAL, "GT_FAULT '%s': %s needs %.*s= (required:%s)", fault, k->name, (int)n, r,
                       k->required);
  }
  return check_values(fault, f);
}

gt_status gt_fault_parse(const char *spec, gt_fault_plan *out) {
  *out = (gt_fault_plan){0};
  if (!spec) return GT_OK;
  size_t len = strlen(spec);
  char *copy = malloc(len + 1);
  if (!copy) return gt_errorf(GT_ENOMEM, "out of memory reading GT_FAULT");
  memcpy(copy, spec, len + 1);
  gt_status s = GT_OK;
  for (char *save = NULL, *item = strtok_r(copy, ";", &save); item && s == GT_OK; item = strtok_r(NULL, ";", &save)) {
    /* Spaces around ';' separate faults too (docs/faults.md). */
    while (*item == ' ') item++;
    for (size_t e = strlen(item); e && item[e - 1] == ' '; e--) item[e - 1] = '\0';
    if (!*item) continue;
    if (out->n == GT_FAULT_MAX) {
      s = gt_errorf(GT_EINVAL, "GT_FAULT: at most %d faults", GT_FAULT_MAX);
      break;
    }
    s = parse_fault(item, &out->f[out->n++]);
  }
  free(copy);
  if (s != GT_OK) *out = (gt_fault_plan){0};
  return s;
}

/* GT_FAULT as this process read it, once: every user (the trainer, the
 * checkpoint writer, a reshape long after the start) plays the same faults,
 * and none reads the environment while another thread might change it. A
 * mutex rather than pthread_once, so that a test can have it read again
 * (gt_fault_env_reset). */
static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER;
static bool env_read;
static gt_status env_status;
static char env_error[512];
static gt_fault_plan env_plan;

gt_status gt_fault_from_env(int rank, gt_fault_plan *out) {
  pthread_mutex_lock(&env_mu);
  if (!env_read) {
    env_status = gt_fault_parse(getenv("GT_FAULT"), &env_plan);
    if (env_status != GT_OK) snprintf(env_error, sizeof env_error, "%s", gt_last_error());
    env_read = true;
  }
  gt_status s = env_status;
  *out = s == GT_OK ? env_plan : (gt_fault_plan){0};
  pthread_mutex_unlock(&env_mu);
  if (s != GT_OK) return gt_errorf(s, "%s", env_error); /* this caller's thread gets the message too */
  out->rank = rank;
  return GT_OK;
}

void gt_fault_env_reset(void) {
  pthread_mutex_lock(&env_mu);
  env_read = false;
  pthread_mutex_unlock(&env_mu);
}
