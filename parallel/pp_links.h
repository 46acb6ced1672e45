/* A pipeline rank's point-to-point links: one two-rank communicator per
 * link and direction, so that on each of them a rank only sends or only
 * receives. A communicator runs its operations one at a time, in order: a
 * receive posted ahead on a communicator that also carries this rank's
 * sends would hold those sends back until the receive's data came.
 */
#ifndef GIANT_PP_LINKS_H
#define GIANT_PP_LINKS_H

#include <stdbool.h>

#include "giant/engine/comm.h"
#include "giant/status.h"

typedef enum gt_pp_dir {
  GT_PP_DIR_FWD = 0, /* activations, rank r to r + 1 */
  GT_PP_DIR_BWD = 1, /* gradients, rank r to r - 1 */
} gt_pp_dir;

typedef struct gt_pp_links {
  gt_comm *send[2]; /* by direction; NULL where this rank sends nothing that way */
  gt_comm *recv[2]; /* ... receives nothing that way */
} gt_pp_links;

/* Peers inside a link: the sender is its rank 0, the receiver its rank 1. */
enum { GT_PP_LINK_SENDER = 0, GT_PP_LINK_RECEIVER = 1 };

/* Collective over the pipeline group `pp` (rank r of P). With `ring` the
 * last rank sends on to the first and the first back to the last
 * (interleaved schedules). Keys live under prefix. */
gt_status gt_pp_links_create(gt_comm *pp, int r, int P, bool ring, const char *prefix, gt_pp_links *out);
void gt_pp_links_destroy(gt_pp_links *l);
/* Makes every pending operation on the links fail at once, here and at
 * the peers: for a run given up with receives still posted. */
void gt_pp_links_abort(gt_pp_links *l);

#endif
