/* The kernels the library's own layers, optimizers and mixed precision use
 * beyond those a user's layer calls (giant/backend.h): attention with bf16
 * products, embedding and loss over a slice of the vocabulary (tensor
 * parallelism), the optimizers' updates, reductions and conversions, and a
 * backend's memory details. Internal to libgiant: the layers above include
 * it (SHARES in CMakeLists.txt); libgiant does not export it. */
#ifndef GIANT_CORE_BACKEND_ENGINE_H
#define GIANT_CORE_BACKEND_ENGINE_H

#include "giant/backend.h"

typedef struct gt_adamw_args {
  float lr, beta1, beta2, eps, weight_decay;
  int step;         /* 1-based, for bias correction */
  float grad_scale; /* gradients are multiplied by this first (clipping) */
} gt_adamw_args;

typedef struct gt_sgd_args {
  float lr, momentum, weight_decay;
  bool nesterov;
  float grad_scale;
} gt_sgd_args;

/* Whether the backend has every operation mixed precision uses (gemm_ex,
 * bias_add, bias_backward, causal_softmax_forward/backward). */
bool gt_backend_has_mixed_precision(const gt_backend *be);

void gt_backend_reset_mem_peak(gt_backend *be);

/* The same for host memory from gt_backend_host_alloc (host_mem_limit). */
gt_device_mem gt_backend_host_mem(const gt_backend *be);

/* Causal self-attention with bf16 products: as gt_op_attention_full_forward
 * and gt_op_attention_full_backward, but q, k, v, the probabilities and the
 * output gradient are rounded to bf16 for the four matrix products
 * (gemm_ex, fp32 accumulation); scores, softmax, att and every output stay
 * fp32. Composed of the operations above, so it runs on every backend with
 * gemm_ex. It keeps the whole B*NH*T*T probabilities, as full attention
 * does: there is no tiled bf16 path, and tiled attention stays fp32 under
 * mixed precision (gt_layer_attention_forward). scratch is device memory
 * of gt_attention_bf16_scratch bytes. */
size_t gt_attention_bf16_scratch(int B, int T, int C, int NH);

gt_status gt_attention_forward_bf16(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                    int NH, void *scratch);

/* dqkv accumulates; datt is scratch of att's size, as in attention_full_backward. */
gt_status gt_attention_backward_bf16(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                     const float *att, int B, int T, int C, int NH, void *scratch);

/* out[b,t,:] = wte[tokens[b,t] - v0,:] when the token is in the slice, else
 * 0; plus wpe[t,:] when wpe is not NULL. */
/* Device kernels that see one slice [v0, v0 + V) of a vocabulary of
 * vocab_total ids: rows [v0, v0 + V) of the token table, or columns
 * [v0, v0 + V) of each row of logits. They know nothing of who holds the
 * other slices; a vocabulary-parallel layer (core/layers) composes them
 * with its group's reductions: gather every slice's stats, sum the target
 * logits, then finish. */

gt_status gt_op_embedding_slice_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0,
                                        int V, const float *wpe, int B, int T, int C);

/* dwte += rows of dout for tokens in the slice; dwpe (may be NULL) += dout
 * summed over b. */
gt_status gt_op_embedding_slice_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                         const int32_t *tokens, int v0, int V, int B, int T, int C);

/* Per row of the slice's logits (N, V): stats[i] = the slice's max m,
 * stats[N+i] = sum_j exp(logit - m); tlogit[i] = the target's logit when the
 * target is in the slice, else 0. */
gt_status gt_op_xent_slice_stats(gt_backend *be, float *stats, float *tlogit, const float *logits,
                                 const int32_t *targets, int v0, int N, int V);

/* With the stats of all P slices (P blocks of 2N floats, in vocabulary
 * order) and the target logits summed over slices: probs = softmax over the
 * whole row (this slice's columns; may alias logits), losses = log-sum-exp -
 * target logit (0 where the target is < 0). A target >= vocab_total is
 * GT_ERANGE. */
gt_status gt_op_xent_slice_finish(gt_backend *be, float *losses, float *probs, const float *logits,
                                  const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                  int vocab_total, int N, int V);

/* dlogits = (probs - onehot(target - v0)) * dloss, written; may alias probs. */
gt_status gt_op_softmax_xent_slice_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                            int v0, float dloss, int N, int V);

/* AdamW on n parameters with moments m and v (a->step >= 1). */
gt_status gt_op_adamw_update(gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                             const gt_adamw_args *a);

/* The same update, bit for bit, that also writes param_bf16[i], the new
 * param[i] rounded as gt_op_f32_to_bf16 rounds it, in the same pass over
 * memory: an optimizer that keeps a bf16 copy of the weights for the
 * forward pass reads its fp32 parameters once, not twice. */
gt_status gt_op_adamw_update_bf16(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                  uint16_t *param_bf16, size_t n, const gt_adamw_args *a);

/* SGD; mom may be NULL only without momentum. */
gt_status gt_op_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n, const gt_sgd_args *a);

/* *out = sum x[i]^2 (computed in double, stored as double in device memory). */
gt_status gt_op_sum_squares(gt_backend *be, double *out, const float *x, size_t n);

/* x *= s. */
gt_status gt_op_scale(gt_backend *be, float *x, float s, size_t n);

/* Mixed precision: conversions between fp32 and bf16 storage (round to
 * nearest even). */
gt_status gt_op_f32_to_bf16(gt_backend *be, uint16_t *dst, const float *src, size_t n);

gt_status gt_op_bf16_to_f32(gt_backend *be, float *dst, const uint16_t *src, size_t n);

/* The causal softmax of attention on its own, for attention composed of
 * gemm_ex products (gt_attention_forward_bf16). att holds BH score
 * matrices of T x T; row t keeps columns 0..t. In place: softmax of the
 * kept columns, zeros above the diagonal. */
gt_status gt_op_causal_softmax_forward(gt_backend *be, float *att, int BH, int T);

/* In place: datt (the gradient of the probabilities att) becomes the
 * gradient of the scores times scale, zeros above the diagonal. */
gt_status gt_op_causal_softmax_backward(gt_backend *be, float *datt, const float *att, int BH, int T, float scale);

/* The CUDA device index; 0 on the CPU. */
int gt_backend_device(const gt_backend *be);

#endif
