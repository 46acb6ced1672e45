/* The backend interface: what a device provides.
 *
 * A backend is an opaque handle on a device (gt_backend): memory, copies,
 * streams and events, matrix products, and the forward and backward kernels
 * of a transformer. Everything above it (layers, models, optimizers,
 * parallelism) calls the functions below and never touches device memory
 * directly, so a CUDA backend drops in beside the CPU one. Each function
 * checks its arguments once, then runs the device's implementation; an
 * operation a backend lacks is GT_EUNSUPPORTED, with a message naming both.
 * (How a device implements them: core/backend_impl.h.)
 *
 * Conventions for the kernels (gt_op_*):
 *  - Pointers are device pointers; shapes are row-major; N = B*T rows.
 *    Sizes are never negative.
 *  - Float tensors are fp32; token ids and targets int32.
 *  - Backward kernels ACCUMULATE (+=) into every gradient they write, input
 *    gradients included, so residual branches and tied weights need no extra
 *    pass. The caller zeroes gradients at the start of a step. The
 *    exceptions are the softmax_xent backward kernels, which write dlogits so
 *    they can reuse the probabilities' buffer.
 *  - Kernels run in order on the backend's compute stream. Memory copies and
 *    events take an explicit stream, so transfers and communication can
 *    overlap compute; a NULL stream is the compute stream.
 *  - Results are deterministic for a given backend and thread count.
 */
#ifndef GIANT_BACKEND_H
#define GIANT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "giant/status.h"
#include "giant/tensor.h"

GT_API_BEGIN

typedef struct gt_backend gt_backend;
typedef struct gt_stream gt_stream;
typedef struct gt_event gt_event;

typedef enum gt_device_kind { GT_DEVICE_CPU = 0, GT_DEVICE_CUDA = 1 } gt_device_kind;

typedef enum gt_copy_kind {
  GT_COPY_H2D = 0,
  GT_COPY_D2H = 1,
  GT_COPY_D2D = 2,
} gt_copy_kind;

typedef enum gt_transpose { GT_NO_TRANS = 0, GT_TRANS = 1 } gt_transpose;

/* The arithmetic of a model's matrix products, chosen per trainer.
 * GT_PRECISION_BF16 is mixed precision: the matrix products (the layers'
 * and attention's) read bf16 copies of the weights and of their input
 * activations and accumulate in fp32; master weights, gradients, optimizer
 * state, and every other kernel (LayerNorm, softmax, GELU, the residual
 * stream) stay fp32. */
typedef enum gt_precision {
  GT_PRECISION_FP32 = 0,
  GT_PRECISION_BF16 = 1,
} gt_precision;

const char *gt_precision_name(gt_precision p);
/* Parses "fp32" or "bf16". */
gt_status gt_precision_parse(const char *s, gt_precision *out);

/* C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, row-major.
 * op(A) is M x K, op(B) is K x N, C is M x N. Strides between batch entries
 * are in elements (ignored when batch == 1). The outputs C[i] must not
 * overlap: stacked (|stride_c| at least their span) or side by side in
 * shared rows (stride_c >= N, and all of them within ldc). */
typedef struct gt_gemm_args {
  gt_transpose trans_a, trans_b;
  int m, n, k;
  float alpha, beta;
  const float *a;
  int lda;
  int64_t stride_a;
  const float *b;
  int ldb;
  int64_t stride_b;
  float *c;
  int ldc;
  int64_t stride_c;
  int batch;
} gt_gemm_args;

/* Mixed precision: gemm with a dtype per operand. a and b are both GT_F32 or
 * both GT_BF16; c is GT_F32, or GT_BF16 when a and b are (other mixes are
 * GT_EUNSUPPORTED). Products accumulate in fp32 whatever the storage
 * (alpha and beta are fp32 too), so a trainer can keep bf16 copies of
 * weights and activations for its matrix products, fp32 results where
 * precision matters, and fp32 master weights for the optimizer. Shapes,
 * leading dimensions and strides are in elements, as in gemm. */
typedef struct gt_gemm_ex_args {
  gt_transpose trans_a, trans_b;
  int m, n, k;
  float alpha, beta;
  const void *a;
  gt_dtype a_type;
  int lda;
  int64_t stride_a;
  const void *b;
  gt_dtype b_type;
  int ldb;
  int64_t stride_b;
  void *c;
  gt_dtype c_type;
  int ldc;
  int64_t stride_c;
  int batch;
} gt_gemm_ex_args;

typedef struct gt_adamw_args {
  float lr, beta1, beta2, eps, weight_decay;
  int step;          /* 1-based, for bias correction */
  float grad_scale;  /* gradients are multiplied by this first (clipping) */
} gt_adamw_args;

typedef struct gt_sgd_args {
  float lr, momentum, weight_decay;
  bool nesterov;
  float grad_scale;
} gt_sgd_args;

/* ---- creating a backend ---- */

typedef struct gt_backend_config {
  gt_device_kind kind;
  int device;       /* CUDA device; -1 = from GT_LOCAL_RANK */
  int num_threads;  /* CPU threads; 0 = OMP_NUM_THREADS or all cores */
  /* Device memory this backend may hold, in bytes; 0 = no budget. An
   * allocation that would cross it fails with GT_ENOMEM, naming what was
   * asked for, what is in use and the budget. The CPU backend enforces it
   * too (its "device" memory is what gt_backend_alloc hands out; host
   * memory from gt_backend_host_alloc is not counted). */
  size_t device_mem_limit;
  /* Host memory from gt_backend_host_alloc (pinned on CUDA: where the
   * offloaded state lives), in bytes; 0 = no budget. Enforced alike, with
   * a message of its own. */
  size_t host_mem_limit;
} gt_backend_config;

gt_status gt_backend_create(const gt_backend_config *cfg, gt_backend **out);
void gt_backend_destroy(gt_backend *be);
/* Parses "cpu", "cuda", "cuda:1". */
gt_status gt_device_parse(const char *s, gt_backend_config *cfg);
/* Whether a backend kind is compiled in and has a device to run on; when not,
 * why (for skipped tests and clear errors). */
bool gt_backend_available(gt_device_kind kind, char *why, size_t why_len);

/* ---- what a backend is ---- */

gt_device_kind gt_backend_kind(const gt_backend *be);
/* "cpu", "cuda:0": the prefix of the backend's error messages. */
const char *gt_backend_name(const gt_backend *be);
/* The kernels chosen for this machine when the backend was created:
 * "avx512", "avx2+fma", with "+amx" when bf16 products run on AMX tiles;
 * "" where the backend does not say. */
const char *gt_backend_kernels(const gt_backend *be);
/* The CUDA device index; 0 on the CPU. */
int gt_backend_device(const gt_backend *be);
/* Host threads the kernels use (1 on CUDA). */
int gt_backend_num_threads(const gt_backend *be);
/* Whether the backend has every operation mixed precision uses (gemm_ex,
 * bias_add, bias_backward, causal_softmax_forward/backward). */
bool gt_backend_has_mixed_precision(const gt_backend *be);

/* ---- peak speed, the denominator of MFU ---- */

/* Times fp32 GEMMs of size n (n x n x n) for about `seconds` and records
 * the best rate as the backend's peak (gt_backend_peak_flops). */
gt_status gt_backend_measure_peak(gt_backend *be, int n, double seconds, double *flops);
/* The same for the products of a precision: under GT_PRECISION_BF16, gemm_ex
 * with bf16 operands and an fp32 result, as mixed-precision training runs
 * them. */
gt_status gt_backend_measure_peak_ex(gt_backend *be, gt_precision p, int n, double seconds, double *flops);
/* The recorded peak in FLOP/s; 0 until measured or set. */
double gt_backend_peak_flops(const gt_backend *be);
/* Records a peak measured earlier (a cached measurement), or a stand-in
 * where MFU does not matter, so that no measurement runs. */
void gt_backend_set_peak_flops(gt_backend *be, double flops);

/* ---- memory ---- */

/* The device memory a backend holds through gt_backend_alloc: the budget
 * (0: none), the bytes in use now, and the most in use since creation or
 * the last gt_backend_reset_mem_peak. */
typedef struct gt_device_mem {
  size_t limit, in_use, peak;
} gt_device_mem;
gt_device_mem gt_backend_mem(const gt_backend *be);
void gt_backend_reset_mem_peak(gt_backend *be);
/* The same for host memory from gt_backend_host_alloc (host_mem_limit). */
gt_device_mem gt_backend_host_mem(const gt_backend *be);

/* Device memory; freeing NULL does nothing. */
gt_status gt_backend_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_backend_free(gt_backend *be, void *ptr);
/* Host memory suited to transfers (pinned on CUDA). */
gt_status gt_backend_host_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_backend_host_free(gt_backend *be, void *ptr);
/* Queued on stream s (NULL: the compute stream); dst and src may be NULL
 * only when bytes is 0. */
gt_status gt_backend_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind,
                            gt_stream *s);
gt_status gt_backend_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
/* Synchronous copies on the compute stream. */
gt_status gt_backend_upload(gt_backend *be, void *dst, const void *src, size_t bytes);
gt_status gt_backend_download(gt_backend *be, void *dst, const void *src, size_t bytes);

/* ---- streams and events ---- */

/* The stream kernels run on, and the one for transfers that overlap it. */
gt_stream *gt_backend_compute_stream(const gt_backend *be);
gt_stream *gt_backend_copy_stream(const gt_backend *be);
gt_status gt_stream_create(gt_backend *be, gt_stream **s);
/* Destroying NULL does nothing. */
void gt_stream_destroy(gt_backend *be, gt_stream *s);
/* Waits on the host until the work queued on s is done. */
gt_status gt_stream_sync(gt_backend *be, gt_stream *s);
/* Work queued on s after this waits for e's work; e must have been recorded
 * (GT_ESTATE otherwise). */
gt_status gt_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e);
gt_status gt_event_create(gt_backend *be, gt_event **e);
void gt_event_destroy(gt_backend *be, gt_event *e);
/* Marks the point reached by the work queued on s. */
gt_status gt_event_record(gt_backend *be, gt_event *e, gt_stream *s);
/* Waits on the host for e's work; e must have been recorded. */
gt_status gt_event_sync(gt_backend *be, gt_event *e);

/* ---- matrix products ---- */

/* See gt_gemm_args; arguments that break its rules are GT_EINVAL. */
gt_status gt_op_gemm(gt_backend *be, const gt_gemm_args *g);
/* See gt_gemm_ex_args; GT_EUNSUPPORTED on a backend without mixed
 * precision (gt_backend_has_mixed_precision). */
gt_status gt_op_gemm_ex(gt_backend *be, const gt_gemm_ex_args *g);
/* Biases on their own, for products done by gemm or gemm_ex:
 * out[i,:] += bias for each of the N rows of out (N, OC). */
gt_status gt_op_bias_add(gt_backend *be, float *out, const float *bias, int N, int OC);
/* dbias += the sum over rows of dout (N, OC). */
gt_status gt_op_bias_backward(gt_backend *be, float *dbias, const float *dout, int N, int OC);

/* ---- transformer layers ---- */

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; wpe may be NULL. A negative
 * token is GT_ERANGE (the vocabulary is not known here: the model checks
 * ids against it on the host). */
gt_status gt_op_embedding_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                  const float *wpe, int B, int T, int C);
/* dwte += rows of dout by token; dwpe (may be NULL) += dout summed over b. */
gt_status gt_op_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int B, int T, int C);
/* Per row of C: out = (x - mean) * rstd * w + b; saves mean and rstd (N). */
gt_status gt_op_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C);
gt_status gt_op_layernorm_backward(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C);
/* out (N,OC) = inp (N,C) @ w^T + bias, w is (OC,C) as in PyTorch; bias may be NULL. */
gt_status gt_op_linear_forward(gt_backend *be, float *out, const float *inp, const float *w, const float *bias,
                               int N, int C, int OC);
/* dinp may be NULL (first layer), dbias may be NULL (no bias). */
gt_status gt_op_linear_backward(gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC);
/* GELU, tanh approximation as in GPT-2. */
gt_status gt_op_gelu_forward(gt_backend *be, float *out, const float *inp, size_t n);
gt_status gt_op_gelu_backward(gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
/* out = a + b. */
gt_status gt_op_residual_forward(gt_backend *be, float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout. Either may be NULL (that branch has no gradient). */
gt_status gt_op_residual_backward(gt_backend *be, float *da, float *db, const float *dout, size_t n);

/* ---- attention ---- */

/* Causal self-attention. qkv is (B,T,3C): q, k, v side by side, each C =
 * NH heads of C/NH. out is (B,T,C). att (B,NH,T,T) keeps the softmax
 * probabilities for backward (entries above the diagonal are zero). */
gt_status gt_op_attention_forward(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH);
/* datt is scratch of att's size. */
gt_status gt_op_attention_backward(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                   const float *att, int B, int T, int C, int NH);
/* The causal softmax of attention on its own, for attention composed of
 * gemm_ex products (gt_attention_forward_bf16). att holds BH score
 * matrices of T x T; row t keeps columns 0..t. In place: softmax of the
 * kept columns, zeros above the diagonal. */
gt_status gt_op_causal_softmax_forward(gt_backend *be, float *att, int BH, int T);
/* In place: datt (the gradient of the probabilities att) becomes the
 * gradient of the scores times scale, zeros above the diagonal. */
gt_status gt_op_causal_softmax_backward(gt_backend *be, float *datt, const float *att, int BH, int T, float scale);

/* Causal self-attention with bf16 products: as gt_op_attention_forward and
 * gt_op_attention_backward, but q, k, v, the probabilities and the output
 * gradient are rounded to bf16 for the four matrix products (gemm_ex, fp32
 * accumulation); scores, softmax, att and every output stay fp32. Composed
 * of the operations above, so it runs on every backend with gemm_ex.
 * scratch is device memory of gt_attention_bf16_scratch bytes. */
size_t gt_attention_bf16_scratch(int B, int T, int C, int NH);
gt_status gt_attention_forward_bf16(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                    int NH, void *scratch);
/* dqkv accumulates; datt is scratch of att's size, as in attention_backward. */
gt_status gt_attention_backward_bf16(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                     const float *att, int B, int T, int C, int NH, void *scratch);

/* ---- loss ---- */

/* Row-wise softmax over V logits, and the cross-entropy against targets.
 * probs may alias logits. losses[i] = -log probs[i, targets[i]]; a target
 * < 0 is ignored (loss 0, gradient 0). A target >= V is GT_ERANGE. */
gt_status gt_op_softmax_xent_forward(gt_backend *be, float *losses, float *probs, const float *logits,
                                     const int32_t *targets, int N, int V);
/* dlogits = (probs - onehot(target)) * dloss, written; may alias probs. */
gt_status gt_op_softmax_xent_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                      float dloss, int N, int V);

/* ---- embedding and loss over a slice of the vocabulary ---- */

/* Device kernels that see one slice [v0, v0 + V) of a vocabulary of
 * vocab_total ids: rows [v0, v0 + V) of the token table, or columns
 * [v0, v0 + V) of each row of logits. They know nothing of who holds the
 * other slices; a vocabulary-parallel layer (core/layers) composes them
 * with its group's reductions: gather every slice's stats, sum the target
 * logits, then finish. */

/* out[b,t,:] = wte[tokens[b,t] - v0,:] when the token is in the slice, else
 * 0; plus wpe[t,:] when wpe is not NULL. */
gt_status gt_op_embedding_slice_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                        int v0, int V, const float *wpe, int B, int T, int C);
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
gt_status gt_op_softmax_xent_slice_backward(gt_backend *be, float *dlogits, const float *probs,
                                            const int32_t *targets, int v0, float dloss, int N, int V);

/* ---- optimizers ---- */

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
gt_status gt_op_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                           const gt_sgd_args *a);

/* ---- reductions, scaling, conversions ---- */

/* *out = sum x[i]^2 (computed in double, stored as double in device memory). */
gt_status gt_op_sum_squares(gt_backend *be, double *out, const float *x, size_t n);
/* x *= s. */
gt_status gt_op_scale(gt_backend *be, float *x, float s, size_t n);
/* Mixed precision: conversions between fp32 and bf16 storage (round to
 * nearest even). */
gt_status gt_op_f32_to_bf16(gt_backend *be, uint16_t *dst, const float *src, size_t n);
gt_status gt_op_bf16_to_f32(gt_backend *be, float *dst, const uint16_t *src, size_t n);

GT_API_END
#endif
