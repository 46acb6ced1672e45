/* Annotation scopes: recorded as a model's layers are added, checked
 * against each other (docs/annotations.md lists the rules), and read back
 * as what they ask of the layout. Messages name the first layer of the
 * scope at fault, since that is what a user finds in the model's code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_internal.h"
#include "core/model/model_engine.h"
#include "giant/engine/model.h"

static const char *scope_name(gt_scope_kind k) {
  switch (k) {
    case GT_SCOPE_REPLICATE: return "replicate";
    case GT_SCOPE_SPLIT: return "split";
    case GT_SCOPE_STAGE: return "stage";
    case GT_SCOPE_PIPELINE: return "pipeline";
    case GT_SCOPE_OFFLOAD: return "offload";
    case GT_SCOPE_RECOMPUTE: return "recompute";
    case GT_SCOPE_ZERO: return "zero";
  }
  return "?";
}

gt_status gt_model_scope_begin(gt_model *m, gt_scope_kind kind, int count) {
  if (m->built) return gt_errorf(GT_ESTATE, "annotation after gt_model_build");
  if (m->nopen == GT_MODEL_MAX_SCOPE_DEPTH)
    return gt_errorf(GT_EINVAL, "annotation scopes nest deeper than %d", GT_MODEL_MAX_SCOPE_DEPTH);
  if ((unsigned)kind > GT_SCOPE_ZERO) return gt_errorf(GT_EINVAL, "unknown annotation scope %d", (int)kind);
  const char *at = m->nlayers ? m->layers[m->nlayers - 1]->name : NULL;
  if (count < 0)
    return gt_errorf(GT_EINVAL, "%s(%d)%s%s%s: a scope's count cannot be negative", scope_name(kind), count,
                     at ? " after layer '" : "", at ? at : "", at ? "'" : "");
  if (kind == GT_SCOPE_PIPELINE && count < 1)
    return gt_errorf(GT_EINVAL, "a pipeline scope needs at least 1 micro-batch, got %d", count);
  if (kind == GT_SCOPE_OFFLOAD && count < 1)
    return gt_errorf(GT_EINVAL, "an offload scope needs a window of at least 1 layer, got %d", count);
  if (kind == GT_SCOPE_RECOMPUTE && count > GT_RECOMPUTE_BLOCK)
    return gt_errorf(GT_EINVAL,
                     "recompute(%d)%s%s%s: unknown recomputation mode; use GT_RECOMPUTE_NONE (0), "
                     "GT_RECOMPUTE_ATTENTION (1) or GT_RECOMPUTE_BLOCK (2)",
                     count, at ? " after layer '" : "", at ? at : "", at ? "'" : "");
  if (kind == GT_SCOPE_ZERO && (count < 1 || count > 3))
    return gt_errorf(GT_EINVAL, "zero(%d): a ZeRO scope names stage 1, 2 or 3", count);
  for (int i = 0; i < m->nopen; i++) {
    const gt_scope_rec *o = &m->recs[m->open[i]];
    if (o->kind == kind &&
        (kind == GT_SCOPE_STAGE || kind == GT_SCOPE_PIPELINE || kind == GT_SCOPE_OFFLOAD || kind == GT_SCOPE_ZERO))
      return gt_errorf(GT_EINVAL, "%s(%d) opened inside %s(%d), which begins at layer '%s': %s scopes cannot nest",
                       scope_name(kind), count, scope_name(o->kind), o->arg,
                       o->first < m->nlayers ? m->layers[o->first]->name : "(none yet)", scope_name(kind));
  }
  if (m->nrecs == m->cap_recs) {
    int cap = m->cap_recs ? 2 * m->cap_recs : 16;
    gt_scope_rec *r = realloc(m->recs, (size_t)cap * sizeof *r);
    if (!r) return gt_errorf(GT_ENOMEM, "out of memory recording an annotation");
    m->recs = r;
    m->cap_recs = cap;
  }
  m->recs[m->nrecs] =
      (gt_scope_rec){.kind = kind, .arg = count, .first = m->nlayers, .last = m->nlayers - 1, .depth = m->nopen};
  m->open[m->nopen++] = m->nrecs++;
  if (kind == GT_SCOPE_STAGE) m->stages++;
  return GT_OK;
}

gt_status gt_model_scope_end(gt_model *m) {
  if (m->nopen == 0) return gt_errorf(GT_ESTATE, "gt_model_scope_end without a matching begin");
  gt_scope_rec *r = &m->recs[m->open[--m->nopen]];
  r->last = m->nlayers - 1;
  return GT_OK;
}

/* A layer added now: the stage it is in, whether a split scope holds it,
 * and how it recomputes (the innermost recompute scope, else the model's
 * default). */
void gt_model_annotate_layer(gt_model *m, gt_layer *l) {
  l->stage = m->stages > 0 ? m->stages - 1 : 0;
  l->recompute = m->cfg.recompute;
  for (int i = 0; i < m->nopen; i++) {
    const gt_scope_rec *o = &m->recs[m->open[i]];
    if (o->kind == GT_SCOPE_SPLIT) l->split = true;
    if (o->kind == GT_SCOPE_STAGE) l->stage = o->arg;
    if (o->kind == GT_SCOPE_RECOMPUTE) l->recompute = (gt_recompute)o->arg;
  }
}

int gt_model_pipeline_micro_batches(const gt_model *m) {
  for (int i = 0; i < m->nrecs; i++)
    if (m->recs[i].kind == GT_SCOPE_PIPELINE) return m->recs[i].arg;
  return 0;
}

int gt_model_num_stages(const gt_model *m) { return m->stages > 0 ? m->stages : 1; }

bool gt_model_stages_annotated(const gt_model *m) { return m->stages_used; }

static const char *lname(const gt_model *m, int i) { return i >= 0 && i < m->nlayers ? m->layers[i]->name : "?"; }

static bool whole(const gt_model *m, const gt_scope_rec *r) { return r->first == 0 && r->last == m->nlayers - 1; }

static bool inside(const gt_scope_rec *outer, const gt_scope_rec *r) {
  return r->first >= outer->first && r->last <= outer->last;
}

static void name_into(char *dst, const char *src) { snprintf(dst, 64, "%s", src); }

gt_status gt_model_annotations(const gt_model *m, gt_annotations *out) {
  memset(out, 0, sizeof *out);
  if (m->nopen) return gt_errorf(GT_EINVAL, "%d annotation scope(s) still open at build", m->nopen);
  const gt_scope_rec *split0 = NULL, *region0 = NULL, *pipe = NULL;
  int nstage = 0;
  for (int i = 0; i < m->nrecs; i++) {
    const gt_scope_rec *r = &m->recs[i];
    const char *first = lname(m, r->first);
    if (r->first > r->last)
      return gt_errorf(GT_EINVAL, "%s(%d) holds no layer (it closes before layer '%s'): remove it", scope_name(r->kind),
                       r->arg, r->first < m->nlayers ? first : "(the end)");
    switch (r->kind) {
      case GT_SCOPE_REPLICATE:
        if (whole(m, r)) {
          if (out->dp_at[0])
            return gt_errorf(GT_EINVAL, "two replicate scopes around the whole model (from layer '%s'): keep one",
                             first);
          out->dp = r->arg;
          name_into(out->dp_at, first);
          break;
        }
        /* A region: data parallel inside the split layout around it. */
        for (int j = 0; j < m->nrecs; j++) {
          const gt_scope_rec *o = &m->recs[j];
          if (j == i || o->first > o->last) continue;
          if (o->kind == GT_SCOPE_REPLICATE && !whole(m, o) && inside(o, r))
            return gt_errorf(GT_EINVAL,
                             "replicate(%d) around '%s'..'%s' lies inside another replicated region: "
                             "regions cannot nest",
                             r->arg, first, lname(m, r->last));
          if (o->kind == GT_SCOPE_SPLIT && o->first <= r->last && o->last >= r->first)
            return gt_errorf(GT_EINVAL,
                             "layer '%s' is split inside the replicated region '%s'..'%s': a region's "
                             "layers are whole on each rank (move the split scope out of it)",
                             lname(m, o->first > r->first ? o->first : r->first), first, lname(m, r->last));
        }
        if (r->last == m->nlayers - 1)
          return gt_errorf(GT_EINVAL, "the replicated region '%s'..'%s' holds the loss layer: end it before '%s'",
                           first, lname(m, r->last), lname(m, r->last));
        if (region0 && r->arg && region0->arg && r->arg != region0->arg)
          return gt_errorf(GT_EINVAL,
                           "replicate(%d) around '%s' conflicts with replicate(%d) around '%s': every "
                           "region spans the same tensor-parallel group",
                           r->arg, first, region0->arg, lname(m, region0->first));
        if (!region0 || (!region0->arg && r->arg)) region0 = r;
        out->regions++;
        break;
      case GT_SCOPE_SPLIT:
        out->any_split = true;
        if (split0 && r->arg && split0->arg && r->arg != split0->arg)
          return gt_errorf(GT_EINVAL,
                           "split(%d) around '%s' conflicts with split(%d) around '%s': a model has one "
                           "tensor-parallel size",
                           r->arg, first, split0->arg, lname(m, split0->first));
        if (!split0 || (!split0->arg && r->arg)) split0 = r;
        break;
      case GT_SCOPE_STAGE:
        if (r->arg != nstage)
          return gt_errorf(GT_EINVAL,
                           "stage(%d) around '%s' should be stage(%d): stages are numbered 0, 1, 2, ... "
                           "in the order of the layers",
                           r->arg, first, nstage);
        if (nstage == 0) name_into(out->stage_at, first);
        nstage++;
        break;
      case GT_SCOPE_PIPELINE:
        if (pipe) return gt_errorf(GT_EINVAL, "a second pipeline scope around '%s': a model has at most one", first);
        pipe = r;
        out->micro_batches = r->arg;
        name_into(out->pipeline_at, first);
        break;
      case GT_SCOPE_OFFLOAD:
        if (!whole(m, r))
          return gt_errorf(GT_EINVAL,
                           "offload(%d) around '%s'..'%s' must enclose the whole model: a model is "
                           "offloaded all or nothing",
                           r->arg, first, lname(m, r->last));
        out->offload_window = r->arg;
        name_into(out->offload_at, first);
        break;
      case GT_SCOPE_RECOMPUTE: break; /* a layer's own business, decided as it is added */
      case GT_SCOPE_ZERO:
        if (!whole(m, r))
          return gt_errorf(GT_EINVAL,
                           "zero(%d) around '%s'..'%s' must enclose the whole model: the flat buffers are "
                           "sharded all or nothing",
                           r->arg, first, lname(m, r->last));
        out->zero = r->arg;
        name_into(out->zero_at, first);
        break;
    }
  }
  if (split0) {
    out->tp = split0->arg;
    name_into(out->tp_at, lname(m, split0->first));
  }
  if (region0) {
    out->region_ways = region0->arg;
    name_into(out->region_at, lname(m, region0->first));
    name_into(out->region_end, lname(m, region0->last));
    if (out->tp && out->region_ways && out->tp != out->region_ways)
      return gt_errorf(GT_EINVAL,
                       "replicate(%d) around '%s'..'%s' spans the ranks of the split around it, but "
                       "split(%d) around '%s' makes %d of them",
                       out->region_ways, out->region_at, out->region_end, out->tp, out->tp_at, out->tp);
    if (!out->any_split && out->region_ways > 1)
      return gt_errorf(GT_EINVAL,
                       "replicate(%d) around '%s'..'%s' shares rows among the ranks of a split, but no "
                       "layer is split: put the other layers in a split scope, or replicate the whole model",
                       out->region_ways, out->region_at, out->region_end);
  }
  out->stages = nstage;
  if (nstage) {
    for (int i = 0; i < m->nlayers; i++) {
      bool in = false;
      for (int j = 0; j < m->nrecs && !in; j++)
        in = m->recs[j].kind == GT_SCOPE_STAGE && m->recs[j].first <= i && i <= m->recs[j].last;
      if (!in)
        return gt_errorf(GT_EINVAL,
                         "layer '%s' is outside every stage scope: with stage annotations, the stages "
                         "cover every layer",
                         lname(m, i));
    }
    for (int j = 0; pipe && j < m->nrecs; j++) {
      const gt_scope_rec *r = &m->recs[j];
      if (r->kind == GT_SCOPE_STAGE && !inside(pipe, r))
        return gt_errorf(GT_EINVAL,
                         "stage(%d) around '%s' lies outside the pipeline scope (from '%s' to '%s'): the "
                         "pipeline holds every stage",
                         r->arg, lname(m, r->first), lname(m, pipe->first), lname(m, pipe->last));
    }
  }
  return GT_OK;
}

/* At build: the annotations once more (the layers are all there now), and
 * the regions the forward pass treats apart. */
gt_status gt_model_finish_annotations(gt_model *m) {
  gt_annotations a;
  GT_TRY(gt_model_annotations(m, &a));
  /* offload(w) stands where the config leaves the window open (0). */
  if (m->cfg.offload_window == 0) m->cfg.offload_window = a.offload_window;
  free(m->regions);
  m->regions = NULL;
  m->nregions = 0;
  if (!a.regions) return GT_OK;
  m->regions = calloc((size_t)a.regions, sizeof *m->regions);
  if (!m->regions) return gt_errorf(GT_ENOMEM, "out of memory");
  for (int i = 0; i < m->nrecs; i++) {
    const gt_scope_rec *r = &m->recs[i];
    if (r->kind == GT_SCOPE_REPLICATE && !whole(m, r))
      m->regions[m->nregions++] = (struct gt_region){r->first, r->last};
  }
  return GT_OK;
}

int gt_model_region_ways(const gt_model *m) { return m->par.tp ? m->par.tp->size : 1; }

int gt_model_layer_replicas(const gt_model *m, int layer) {
  return gt_model_region_of(m, layer) ? gt_model_region_ways(m) : 1;
}

bool gt_model_param_tied_across_stages(const gt_model *m, int i) {
  const gt_param *p = &m->params[i];
  if (!p->local) return false;
  if (p->mirror_of >= 0) return true;
  /* A tie is declared after its owner. */
  for (int j = i + 1; p->tied_to < 0 && j < m->nparams; j++)
    if (m->params[j].tied_to == i && !m->params[j].local) return true;
  return false;
}

const struct gt_region *gt_model_region_of(const gt_model *m, int layer) {
  for (int i = 0; i < m->nregions; i++)
    if (m->regions[i].lo <= layer && layer <= m->regions[i].hi) return &m->regions[i];
  return NULL;
}

/* After the stages are assigned and the parameters laid out: what a region
 * cannot do. Its rows meet again at its edges, so it stays in one stage;
 * a tied parameter would add the gradient of whole rows from outside to
 * the partial ones inside; offloaded gradients are not summed over the
 * group yet. */
gt_status gt_model_check_regions(const gt_model *m) {
  for (int k = 0; k < m->nregions; k++) {
    const struct gt_region *g = &m->regions[k];
    if (m->layers[g->lo]->stage != m->layers[g->hi]->stage)
      return gt_errorf(GT_EINVAL,
                       "the replicated region '%s'..'%s' crosses the cut between pipeline stages %d and "
                       "%d: cut the stages at its edges (stage scopes) or shorten it",
                       lname(m, g->lo), lname(m, g->hi), m->layers[g->lo]->stage, m->layers[g->hi]->stage);
    if (gt_model_region_ways(m) > 1 && m->cfg.offload_window > 0)
      return gt_errorf(GT_EUNSUPPORTED,
                       "the replicated region '%s'..'%s' cannot run offloaded yet: leave out the "
                       "offload window, or the region",
                       lname(m, g->lo), lname(m, g->hi));
  }
  for (int i = 0; i < m->nparams; i++) {
    const gt_param *p = &m->params[i];
    int own = p->tied_to >= 0 ? m->params[p->tied_to].layer : p->mirror_of >= 0 ? m->params[p->mirror_of].layer : -1;
    if (own < 0) continue;
    const struct gt_region *a = gt_model_region_of(m, p->layer), *b = gt_model_region_of(m, own);
    if (a != b)
      return gt_errorf(GT_EINVAL,
                       "layer '%s' ties '%s' to layer '%s' across the edge of a replicated region: tie "
                       "parameters within a region or outside all of them (untie them)",
                       lname(m, p->layer), p->name, lname(m, own));
  }
  return GT_OK;
}

void gt_model_annotations_destroy(gt_model *m) {
  free(m->recs);
  free(m->regions);
  m->recs = NULL;
  m->regions = NULL;
}
