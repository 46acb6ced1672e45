/* Arenas: a device's memory, counted.
 *
 * Every byte the engine holds on a device goes through an arena, which
 * reports the bytes in use now and the peak since the last reset, and can
 * hold a budget: an allocation that would cross it fails with GT_ENOMEM
 * naming the budget. Freed blocks are cached by size class and reused, so a
 * training loop that allocates the same shapes every step stops calling the
 * device allocator after its first step.
 */
#ifndef GIANT_ARENA_H
#define GIANT_ARENA_H

#include <stddef.h>

#include "giant/model.h"
#include "giant/status.h"

struct gt_backend;
typedef struct gt_arena gt_arena;

/* budget_bytes == 0 means no budget. */
gt_status gt_arena_create(struct gt_backend *be, size_t budget_bytes, gt_arena **out);
/* Frees cached blocks; blocks still in use are freed too and reported. */
void gt_arena_destroy(gt_arena *a);

/* 256-byte aligned; zero-size requests return a valid unique pointer.
 * The block counts as GT_MEM_OTHER in the ledger. */
gt_status gt_arena_alloc(gt_arena *a, size_t bytes, void **ptr);
/* The same, the block counted as `kind`. */
gt_status gt_arena_alloc_as(gt_arena *a, gt_mem_kind kind, size_t bytes, void **ptr);
/* The same, `part` bytes of the block counted as part_kind and the rest of
 * its size class as kind: one block that holds two things (a layer's
 * saved tensors, of which some are attention). */
gt_status gt_arena_alloc_parts(gt_arena *a, gt_mem_kind kind, size_t bytes, gt_mem_kind part_kind, size_t part,
                               void **ptr);
void gt_arena_free(gt_arena *a, void *ptr);
/* Returns cached blocks to the device allocator. */
void gt_arena_trim(gt_arena *a);

/* The bytes an arena sets aside for a request of `bytes` (its size class):
 * what memory estimates add up. */
size_t gt_arena_block_size(size_t bytes);

size_t gt_arena_current(const gt_arena *a);  /* bytes handed out and not freed */
size_t gt_arena_peak(const gt_arena *a);     /* max of current since reset */
size_t gt_arena_reserved(const gt_arena *a); /* current + cached */
void gt_arena_reset_peak(gt_arena *a);
/* By category: the bytes held now, and those held when current last
 * reached its peak (GT_MEM_KINDS entries each; either may be NULL). */
void gt_arena_kinds(const gt_arena *a, size_t *current, size_t *peak);
size_t gt_arena_budget(const gt_arena *a);
void gt_arena_set_budget(gt_arena *a, size_t budget_bytes);
/* Device allocator calls so far (to check the steady state makes none). */
size_t gt_arena_device_allocs(const gt_arena *a);

#endif
