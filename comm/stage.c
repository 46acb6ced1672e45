/* See stage.h. */
#include "comm/stage.h"
#include "giant/engine/comm.h"

static size_t round_up(size_t n) { return (n + 255) & ~(size_t)255; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

bool gt_stage_in_place(const gt_comm_req *q) { return q->kind == OP_ALLREDUCE || q->kind == OP_BROADCAST; }

size_t gt_stage_sent(const gt_comm_req *q) { return q->kind == OP_RECV || q->kind == OP_BARRIER ? 0 : q->count; }

size_t gt_stage_received(const gt_comm_req *q) {
  return q->kind == OP_RECV ? q->count : q->kind == OP_SENDRECV ? q->count2 : 0;
}

const void *gt_stage_input(const gt_comm_req *q) { return gt_stage_in_place(q) ? q->buf : q->src; }

void gt_stage_extent(const gt_comm_req *q, size_t e, int size, size_t *in_bytes, size_t *out_bytes) {
  size_t rows = (size_t)size;
  *in_bytes = gt_stage_sent(q) * e * (q->kind == OP_REDUCE_SCATTER ? rows : 1);
  *out_bytes = gt_stage_in_place(q) || q->kind == OP_REDUCE_SCATTER || q->kind == OP_REDUCE ? q->count * e
               : q->kind == OP_ALLGATHER                                                    ? q->count * rows * e
                                                                                            : gt_stage_received(q) * e;
}

static bool point_to_point(comm_op_kind k) { return k == OP_SEND || k == OP_RECV || k == OP_SENDRECV; }

void gt_stage_plan_make(const gt_comm_req *q, size_t e, int size, int rank, bool host_in, bool host_out, size_t limit,
                        gt_stage_plan *p) {
  bool rs = q->kind == OP_REDUCE_SCATTER, ag = q->kind == OP_ALLGATHER, one = gt_stage_in_place(q);
  *p = (gt_stage_plan){.kind = q->kind,
                       .count = gt_stage_sent(q),
                       .count2 = gt_stage_received(q),
                       .e = e,
                       .size = size,
                       .rank = rank,
                       .root = q->peer,
                       .in_place = one};
  p->via_in = host_in || rs;
  p->via_out = one ? host_in : host_out || ag;
  p->in_rows = rs ? (size_t)size : 1;
  p->out_rows = ag ? (size_t)size : 1;
  /* Staging bytes an element of a piece takes: the input and output rows
   * of a reduce-scatter or an all-gather; a point-to-point piece makes
   * room for both directions, whichever the call has, so that its size
   * is the same on both sides. */
  size_t per = e;
  if (rs || ag)
    per = e * (size_t)(size + 1);
  else if (point_to_point(q->kind))
    per = 2 * e;
  p->piece = limit / per ? limit / per : 1;
  size_t most = p->count > p->count2 ? p->count : p->count2;
  p->pieces = (most + p->piece - 1) / p->piece;
  size_t first = min_sz(p->count, p->piece), first2 = min_sz(p->count2, p->piece);
  size_t out_first = q->kind == OP_RECV || q->kind == OP_SENDRECV ? first2 : first;
  p->at_out = p->via_in && !one ? round_up(p->in_rows * first * e) : 0;
  p->bytes = p->at_out + (p->via_out ? p->out_rows * out_first * e : 0);
}

void gt_stage_piece_at(const gt_stage_plan *p, size_t k, gt_stage_piece *out) {
  size_t o = k * p->piece, e = p->e;
  size_t n = o < p->count ? min_sz(p->count - o, p->piece) : 0;
  size_t n2 = o < p->count2 ? min_sz(p->count2 - o, p->piece) : 0;
  *out = (gt_stage_piece){.n = n, .n2 = n2};
  bool root = p->kind == OP_BROADCAST && p->root == p->rank;
  /* A broadcast's receivers send nothing: nothing to copy in. */
  out->from = p->via_in ? (gt_stage_at){true, 0} : (gt_stage_at){false, o * e};
  if (p->via_in && n && (p->kind != OP_BROADCAST || root))
    out->in = (gt_stage_copy){
        .dst = 0, .dpitch = n * e, .src = o * e, .spitch = p->count * e, .width = n * e, .rows = p->in_rows};
  /* A reduce's output is root's alone. */
  bool nothing = p->kind == OP_SEND || root || (p->kind == OP_REDUCE && p->root != p->rank);
  size_t got = p->kind == OP_RECV || p->kind == OP_SENDRECV ? n2 : nothing ? 0 : n;
  size_t at = p->in_place ? 0 : p->at_out;
  out->to = p->via_out ? (gt_stage_at){true, at} : (gt_stage_at){false, o * e};
  if (p->via_out && got)
    out->out = (gt_stage_copy){.dst = o * e,
                               .dpitch = (p->kind == OP_ALLGATHER ? p->count : got) * e,
                               .src = at,
                               .spitch = got * e,
                               .width = got * e,
                               .rows = p->out_rows};
}
