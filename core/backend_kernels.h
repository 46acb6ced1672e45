/* The kernels a backend implements, written once.
 *
 * GT_BACKEND_KERNELS(X) calls X(name, (parameters)) for every kernel, by
 * topic in the order of giant/backend.h. Every kernel returns gt_status and
 * has the signature of its public gt_op_<name>, where it is documented
 * (backend_ops.c checks this at compile time). From this list come the
 * kernel entries of the operation table (backend_impl.h), the declarations
 * of the CPU kernels, under each instruction-set level's name
 * (cpu_internal.h, cpu_isa.h), and of the CUDA kernels (cuda_internal.h),
 * and both backends' tables (cpu_ops.c, cuda_ops.c). A new kernel is
 * therefore one line here, its implementations and its checked wrapper in
 * backend_ops.c.
 *
 * Memory, streams, events and destroy are not in the list: they are written
 * out in backend_impl.h, since some return nothing and the CPU serves host
 * and device memory with the same functions.
 */
#ifndef GIANT_BACKEND_KERNELS_H
#define GIANT_BACKEND_KERNELS_H

#include "giant/backend.h"
#include "core/backend_engine.h"

/* The list is laid out by hand: clang-format reads its parameter lists as
 * expressions. */
/* clang-format off */
#define GT_BACKEND_KERNELS(X)                                                                                          \
  /* matrix products, and the biases of products done by them */                                                       \
  X(gemm, (gt_backend *be, const gt_gemm_args *g))                                                                     \
  X(gemm_ex, (gt_backend *be, const gt_gemm_ex_args *g))                                                               \
  X(bias_add, (gt_backend *be, float *out, const float *bias, int N, int OC))                                          \
  X(bias_backward, (gt_backend *be, float *dbias, const float *dout, int N, int OC))                                   \
  /* the layers of a transformer, forward and backward */                                                              \
  X(embedding_forward, (gt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe,         \
                        int B, int T, int C))                                                                          \
  X(embedding_backward, (gt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,           \
                         int B, int T, int C))                                                                         \
  X(layernorm_forward, (gt_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,        \
                        const float *b, int N, int C))                                                                 \
  X(layernorm_backward, (gt_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,       \
                         const float *w, const float *mean, const float *rstd, int N, int C))                          \
  X(linear_forward, (gt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,           \
                     int C, int OC))                                                                                   \
  X(linear_backward, (gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,       \
                      const float *w, int N, int C, int OC))                                                           \
  X(gelu_forward, (gt_backend *be, float *out, const float *inp, size_t n))                                            \
  X(gelu_backward, (gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n))                       \
  X(residual_forward, (gt_backend *be, float *out, const float *a, const float *b, size_t n))                          \
  X(residual_backward, (gt_backend *be, float *da, float *db, const float *dout, size_t n))                            \
  /* the layers of the Llama family: RMSNorm, rotary positions, SwiGLU */                                              \
  X(rmsnorm_forward, (gt_backend *be, float *out, float *rstd, const float *inp, const float *w, float eps, int N,     \
                      int C))                                                                                          \
  X(rmsnorm_backward, (gt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,    \
                       const float *rstd, int N, int C))                                                               \
  X(rope_forward, (gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld, float theta,    \
                   float scale))                                                                                       \
  X(rope_backward, (gt_backend *be, float *dinp, const float *dout, int B, int T, int NH, int hs, int ld,              \
                    float theta, float scale))                                                                         \
  X(swiglu_forward, (gt_backend *be, float *out, const float *gate, const float *up, size_t n))                        \
  X(swiglu_backward, (gt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,                  \
                     const float *up, size_t n))                                                                       \
  /* attention */                                                                                                      \
  X(attention_tiled_forward, (gt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int C,         \
                              int NH))                                                                                 \
  X(attention_tiled_backward, (gt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,     \
                               const float *lse, int B, int T, int C, int NH))                                         \
  X(attention_gqa_forward, (gt_backend *be, float *out, float *lse, const float *q, const float *k, const float *v,    \
                            int B, int T, int C, int NH, int NKV))                                                     \
  X(attention_gqa_backward, (gt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,       \
                             const float *k, const float *v, const float *out, const float *lse, int B, int T, int C,  \
                             int NH, int NKV))                                                                         \
  X(attention_full_forward, (gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C, int NH))   \
  X(attention_full_backward, (gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,           \
                              const float *att, int B, int T, int C, int NH))                                          \
  X(causal_softmax_forward, (gt_backend *be, float *att, int BH, int T))                                               \
  X(causal_softmax_backward, (gt_backend *be, float *datt, const float *att, int BH, int T, float scale))              \
  /* softmax cross-entropy over whole rows of logits */                                                                \
  X(softmax_xent_forward, (gt_backend *be, float *losses, float *probs, const float *logits,                           \
                           const int32_t *targets, int N, int V))                                                      \
  X(softmax_xent_backward, (gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,                \
                            float dloss, int N, int V))                                                                \
  /* embedding and cross-entropy over a slice [v0, v0 + V) of the vocabulary */                                        \
  X(embedding_slice_forward, (gt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0, int V,      \
                              const float *wpe, int B, int T, int C))                                                  \
  X(embedding_slice_backward, (gt_backend *be, float *dwte, float *dwpe, const float *dout,                            \
                               const int32_t *tokens, int v0, int V, int B, int T, int C))                             \
  X(xent_slice_stats, (gt_backend *be, float *stats, float *tlogit, const float *logits, const int32_t *targets,       \
                       int v0, int N, int V))                                                                          \
  X(xent_slice_finish, (gt_backend *be, float *losses, float *probs, const float *logits,                              \
                        const float *stats_all, int P, const float *tlogit, const int32_t *targets,                    \
                        int vocab_total, int N, int V))                                                                \
  X(softmax_xent_slice_backward, (gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,          \
                                  int v0, float dloss, int N, int V))                                                  \
  /* optimizers */                                                                                                     \
  X(adamw_update, (gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,                      \
                   const gt_adamw_args *a))                                                                            \
  X(adamw_update_bf16, (gt_backend *be, float *param, const float *grad, float *m, float *v,                           \
                        uint16_t *param_bf16, size_t n, const gt_adamw_args *a))                                       \
  X(sgd_update, (gt_backend *be, float *param, const float *grad, float *mom, size_t n, const gt_sgd_args *a))         \
  /* reductions, scaling and conversions over flat buffers */                                                          \
  X(sum_squares, (gt_backend *be, double *out, const float *x, size_t n))                                              \
  X(scale, (gt_backend *be, float *x, float s, size_t n))                                                              \
  X(f32_to_bf16, (gt_backend *be, uint16_t *dst, const float *src, size_t n))                                          \
  X(bf16_to_f32, (gt_backend *be, float *dst, const uint16_t *src, size_t n))
/* clang-format on */

#endif
