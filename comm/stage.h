/* Host buffers through a device staging buffer, for a transport that reads
 * only device memory (NCCL): how an operation is cut into pieces that fit
 * the staging, and each piece's copies in and out. Arithmetic alone, so
 * that it is checked on any machine (test_comm_stage plays every operation
 * on simulated ranks with memcpy); the NCCL backend runs the copies with
 * cudaMemcpyAsync, row by row, and each piece as one NCCL operation.
 *
 * Piece k covers elements [k m, (k + 1) m) of what a rank sends (its block,
 * for the collectives) and of what it receives point to point, m elements
 * a piece. The peers must cut an operation alike: every rank of a group
 * stages a large operation or none does (giant/engine/comm.h), and a
 * point-to-point piece has the same size whichever of send, recv or
 * sendrecv either side called. The input goes through the staging when it
 * is host memory, and for a reduce-scatter always (a piece is a strided
 * part of every rank's block); the output likewise, and for an all-gather
 * always; in place (all-reduce, broadcast), one area serves both. */
#ifndef GIANT_COMM_STAGE_H
#define GIANT_COMM_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"
#include "giant/engine/comm.h"

/* Bytes of staging at most, unless one element of every rank needs more. */
#define GT_STAGE_LIMIT ((size_t)16 << 20)

/* `rows` rows of `width` bytes: row r from byte src + r spitch of the source
 * to byte dst + r dpitch of the destination. No copy when width is 0. */
typedef struct gt_stage_copy {
  size_t dst, dpitch, src, spitch, width, rows;
} gt_stage_copy;

/* Where the transport reads or writes a piece: at byte `off` of the
 * staging, or of the caller's buffer. */
typedef struct gt_stage_at {
  bool staged;
  size_t off;
} gt_stage_at;

typedef struct gt_stage_plan {
  comm_op_kind kind;
  size_t count, count2, e; /* the operation's counts; bytes an element */
  int size, rank, root;    /* root: a broadcast's */
  bool via_in, via_out, in_place;
  size_t in_rows, out_rows; /* a reduce-scatter's input and an all-gather's output: one row per rank */
  size_t piece;             /* elements a piece */
  size_t pieces;
  size_t at_out; /* the output area's byte offset in the staging */
  size_t bytes;  /* the staging a piece needs */
} gt_stage_plan;

typedef struct gt_stage_piece {
  size_t n, n2;         /* elements the transport sends (a rank's block) and receives point to point */
  gt_stage_copy in;     /* the caller's input to the staging, before the operation */
  gt_stage_copy out;    /* the staging to the caller's output, once it is done */
  gt_stage_at from, to; /* what the transport reads and writes */
} gt_stage_piece;

/* Elements q sends (a rank's block, for the collectives) and receives point
 * to point; whether it runs in place (one buffer, in and out). */
size_t gt_stage_sent(const gt_comm_req *q);
size_t gt_stage_received(const gt_comm_req *q);
bool gt_stage_in_place(const gt_comm_req *q);
/* The buffer q reads: its one buffer in place, else its source. */
const void *gt_stage_input(const gt_comm_req *q);
/* The bytes q reads from its input and writes to its output, with
 * elements of e bytes on a group of `size` (a reduce-scatter reads a block
 * of every rank's, an all-gather writes one). */
void gt_stage_extent(const gt_comm_req *q, size_t e, int size, size_t *in_bytes, size_t *out_bytes);

/* The plan for operation q on a group of `size` where this is `rank`, with
 * elements of e bytes, its input and output host memory as said (one of
 * them at least), in pieces of at most `limit` bytes of staging. */
void gt_stage_plan_make(const gt_comm_req *q, size_t e, int size, int rank, bool host_in, bool host_out, size_t limit,
                        gt_stage_plan *p);

/* Piece k (< p->pieces). */
void gt_stage_piece_at(const gt_stage_plan *p, size_t k, gt_stage_piece *out);

#endif
