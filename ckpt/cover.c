/* A committed manifest's slices must tile each tensor: cover every element
 * once. Counting elements alone would pass a slice that overlaps another
 * where a third is missing (the counts balance), and a load would then
 * leave the gap's bytes unread without noticing, so the boxes are checked:
 * their volumes add up to the tensor's, and no two intersect. Boxes inside
 * the shape (decode checks that) that do both tile it exactly. */
#include <stdlib.h>

#include "ckpt/ckpt_internal.h"

typedef struct slice_key {
  int tensor;
  int64_t lo, hi; /* the box's first dimension */
  int index;
} slice_key;

static int cmp_key(const void *a, const void *b) {
  const slice_key *x = a, *y = b;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

static uint64_t tensor_volume(const ck_tensor *t) {
  uint64_t v = 1;
  for (int d = 0; d < t->ndim; d++) v *= (uint64_t)t->shape[d];
  return v;
}

gt_status ck_manifest_check_cover(const ck_manifest *m, const char *what) {
  if (m->nslices == 0 && m->ntensors == 0) return GT_OK;
  slice_key *k = malloc((size_t)(m->nslices ? m->nslices : 1) * sizeof *k);
  uint64_t *covered = calloc((size_t)(m->ntensors ? m->ntensors : 1), sizeof *covered);
  if (!k || !covered) {
    free(k);
    free(covered);
    return gt_errorf(GT_ENOMEM, "out of memory checking %s", what);
  }
  for (int i = 0; i < m->nslices; i++) {
    const ck_box *b = &m->slices[i].box;
    k[i] = (slice_key){
        .tensor = m->slices[i].tensor, .lo = b->ndim ? b->lo[0] : 0, .hi = b->ndim ? b->hi[0] : 1, .index = i};
    covered[k[i].tensor] += ck_box_volume(b);
  }
  /* Sorted by tensor and first-dimension start, a slice can only meet the
   * ones after it that start before it ends: a sweep, not all pairs. */
  qsort(k, (size_t)m->nslices, sizeof *k, cmp_key);
  gt_status s = GT_OK;
  for (int i = 0; s == GT_OK && i < m->nslices; i++)
    for (int j = i + 1; s == GT_OK && j < m->nslices && k[j].tensor == k[i].tensor && k[j].lo < k[i].hi; j++) {
      ck_box x;
      if (ck_box_intersect(&m->slices[k[i].index].box, &m->slices[k[j].index].box, &x))
        s = gt_errorf(GT_EFORMAT, "%s: two slices of tensor %s overlap (%llu elements in common)", what,
                      m->tensors[k[i].tensor].name, (unsigned long long)ck_box_volume(&x));
    }
  for (int t = 0; s == GT_OK && t < m->ntensors; t++)
    if (covered[t] != tensor_volume(&m->tensors[t]))
      s = gt_errorf(GT_EFORMAT, "%s: the slices of tensor %s hold %llu of its %llu elements: some are missing", what,
                    m->tensors[t].name, (unsigned long long)covered[t],
                    (unsigned long long)tensor_volume(&m->tensors[t]));
  free(k);
  free(covered);
  return s;
}
