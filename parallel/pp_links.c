/* A pipeline rank's point-to-point links (pp_links.h).
 *
 * Link s of a direction is the one rank s sends on: to s + 1 forward, to
 * s - 1 backward. A rank sends on its own link and receives on its
 * neighbour's, so giving neighbouring links different colours puts each
 * link of a colour on ranks no other link of that colour touches: one
 * split per colour and direction builds them all. A chain needs two
 * colours (one when P = 2), a ring of even length two, of odd length
 * three. */
#include <stdio.h>

#include "giant/log.h"
#include "parallel/pp_links.h"

/* The colour of forward link s; backward link s takes that of forward link
 * P - 1 - s, the chain seen from its other end. */
static int colour(int s, int P, bool ring) { return ring && P % 2 && s == P - 1 ? 2 : s % 2; }

static int link_colour(gt_pp_dir dir, int s, int P, bool ring) {
  return colour(dir == GT_PP_DIR_FWD ? s : P - 1 - s, P, ring);
}

/* Whether link s exists: the chain has no link past either end. */
static bool has_link(gt_pp_dir dir, int s, int P, bool ring) {
  return ring || (dir == GT_PP_DIR_FWD ? s < P - 1 : s > 0);
}

gt_status gt_pp_links_create(gt_comm *pp, int r, int P, bool ring, const char *prefix, gt_pp_links *out) {
  *out = (gt_pp_links){0};
  if (P < 2) return GT_OK;
  int colours = ring && P % 2 ? 3 : P > 2 || ring ? 2 : 1;
  for (int dir = 0; dir < 2; dir++) {
    int step = dir == GT_PP_DIR_FWD ? 1 : -1, from = (r - step + P) % P; /* the link this rank receives on */
    bool sends = has_link(dir, r, P, ring), receives = has_link(dir, from, P, ring);
    for (int k = 0; k < colours; k++) {
      /* The group is named by its link: the sender's rank. */
      bool tx = sends && link_colour(dir, r, P, ring) == k, rx = receives && link_colour(dir, from, P, ring) == k;
      char name[200];
      snprintf(name, sizeof name, "%s/%s%d", prefix, dir == GT_PP_DIR_FWD ? "fwd" : "bwd", k);
      gt_comm *c = NULL;
      gt_status s = gt_comm_split(pp, tx ? r : rx ? from : -1, tx ? GT_PP_LINK_SENDER : GT_PP_LINK_RECEIVER, name, &c);
      if (s != GT_OK) {
        gt_pp_links_destroy(out);
        return gt_error_context(s, "pipeline link %s colour %d", dir == GT_PP_DIR_FWD ? "forward" : "backward", k);
      }
      if (tx) out->send[dir] = c;
      if (rx) out->recv[dir] = c;
    }
  }
  return GT_OK;
}

void gt_pp_links_destroy(gt_pp_links *l) {
  for (int dir = 0; dir < 2; dir++) {
    gt_comm_destroy(l->send[dir]);
    gt_comm_destroy(l->recv[dir]);
    l->send[dir] = l->recv[dir] = NULL;
  }
}

void gt_pp_links_abort(gt_pp_links *l) {
  for (int dir = 0; dir < 2; dir++) {
    gt_comm_abort(l->send[dir]);
    gt_comm_abort(l->recv[dir]);
  }
}
