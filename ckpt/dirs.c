/* The root directory: committed checkpoints (a step directory with a
 * MANIFEST), the `latest` pointer, and retention. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_internal.h"
#include "giant/log.h"

void ck_step_dir(const char *root, int step, char *out, size_t cap) { snprintf(out, cap, "%s/step-%08d", root, step); }

static bool parse_step(const char *name, int *step) {
  if (strncmp(name, "step-", 5) || strlen(name) != 13) return false;
  int v = 0;
  for (const char *p = name + 5; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + (*p - '0');
  }
  *step = v;
  return true;
}

static bool committed(const char *root, int step) {
  char path[4200], dir[4150];
  ck_step_dir(root, step, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, CK_MANIFEST);
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int desc(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

/* Step directories under root, committed or all, newest first. */
static gt_status scan(const char *root, bool only_committed, int **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) {
    if (errno == ENOENT) return GT_OK;
    return gt_errorf(GT_EIO, "cannot list checkpoint directory %s: %s", root, strerror(errno));
  }
  int cap = 0;
  struct dirent *e;
  gt_status s = GT_OK;
  while (s == GT_OK && (e = readdir(d))) {
    int step;
    if (!parse_step(e->d_name, &step) || (only_committed && !committed(root, step))) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int *q = realloc(*steps, (size_t)cap * sizeof *q);
      if (!q)
        s = gt_errorf(GT_ENOMEM, "out of memory listing %s", root);
      else
        *steps = q;
    }
    if (s == GT_OK) (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (s != GT_OK) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return s;
  }
  if (*n) qsort(*steps, (size_t)*n, sizeof **steps, desc);
  return GT_OK;
}

gt_status ck_committed(const char *root, int **steps, int *n) { return scan(root, true, steps, n); }

gt_status gt_ckpt_list(const char *dir, int *steps, int max, int *n) {
  int *all, k;
  GT_TRY(scan(dir, true, &all, &k));
  for (int i = 0; i < k && i < max; i++) steps[i] = all[i];
  *n = k;
  free(all);
  return GT_OK;
}

gt_status ck_after_commit(const char *root, int step, int keep) {
  char text[32];
  int len = snprintf(text, sizeof text, "step-%08d\n", step);
  gt_status s = ck_write_durable(root, "latest", text, (size_t)len);
  int *all, n;
  if (s == GT_OK) s = scan(root, false, &all, &n);
  if (s != GT_OK) return s;
  int kept = 0;
  for (int i = 0; i < n; i++) {
    bool c = committed(root, all[i]);
    if (c && all[i] >= step) kept++;
    /* Committed ones beyond `keep` go (never `step` itself, the newest);
     * uncommitted ones older than `step` are dead saves. Newer uncommitted
     * ones may be a save still in flight. */
    bool drop = all[i] < step && (c ? keep > 0 && ++kept > keep : true);
    if (!drop) continue;
    char dir[4150];
    ck_step_dir(root, all[i], dir, sizeof dir);
    gt_status r = ck_remove_dir(dir);
    if (r != GT_OK)
      gt_warn("checkpoint retention: %s", gt_last_error());
    else
      gt_debug("removed %s checkpoint %s", c ? "old" : "uncommitted", dir);
  }
  free(all);
  return GT_OK;
}
