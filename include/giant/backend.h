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

/* ---- creating a backend ---- */

typedef struct gt_backend_config {
  gt_device_kind kind;
  int device;      /* CUDA device; -1 = from GT_LOCAL_RANK */
  int num_threads; /* CPU threads; 0 = OMP_NUM_THREADS or all cores */
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
/* Host threads the kernels use (1 on CUDA). */
int gt_backend_num_threads(const gt_backend *be);

/* ---- memory ---- */

/* The device memory a backend holds through gt_backend_alloc: the budget
 * (0: none), the bytes in use now, and the most in use since creation or
 * the last gt_backend_reset_mem_peak. */
typedef struct gt_device_mem {
  size_t limit, in_use, peak;
} gt_device_mem;
gt_device_mem gt_backend_mem(const gt_backend *be);

/* Device memory; freeing NULL does nothing. */
gt_status gt_backend_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_backend_free(gt_backend *be, void *ptr);
/* Host memory suited to transfers (pinned on CUDA). */
gt_status gt_backend_host_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_backend_host_free(gt_backend *be, void *ptr);
/* Queued on stream s (NULL: the compute stream); dst and src may be NULL
 * only when bytes is 0. */
gt_status gt_backend_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s);
gt_status gt_backend_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
/* Synchronous copies on the compute stream. */
gt_status gt_backend_upload(gt_backend *be, void *dst, const void *src, size_t bytes);
gt_status gt_backend_download(gt_backend *be, void *dst, const void *src, size_t bytes);

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
gt_status gt_op_embedding_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C);
/* dwte += rows of dout by token; dwpe (may be NULL) += dout summed over b. */
gt_status gt_op_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                   int B, int T, int C);
/* Per row of C: out = (x - mean) * rstd * w + b; saves mean and rstd (N). */
gt_status gt_op_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C);
gt_status gt_op_layernorm_backward(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C);
/* out (N,OC) = inp (N,C) @ w^T + bias, w is (OC,C) as in PyTorch; bias may be NULL. */
gt_status gt_op_linear_forward(gt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,
                               int C, int OC);
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

/* ---- the layers of the Llama family ---- */

/* RMSNorm per row of C: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) +
 * eps), saved (N) for backward. Backward accumulates into dinp and dw. */
gt_status gt_op_rmsnorm_forward(gt_backend *be, float *out, float *rstd, const float *inp, const float *w, float eps,
                                int N, int C);
gt_status gt_op_rmsnorm_backward(gt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C);
/* Rotary position embeddings, in Hugging Face Llama's layout: each row
 * (B*T rows, ld floats apart, position t = row % T) holds NH heads of hs
 * (even) side by side from column 0, and each head's pair (i, i + hs/2)
 * is turned by the angle (t / scale) * theta^(-2i/hs): theta is the base
 * (10000 in Llama 2), scale the linear position scaling (1 for none).
 * Columns past NH*hs are left alone. Forward writes out = R x; backward
 * writes dinp = R^T dout (it does not accumulate). Both may work in place
 * (out == inp, dinp == dout). */
gt_status gt_op_rope_forward(gt_backend *be, float *out, const float *inp, int B, int T, int NH, int hs, int ld,
                             float theta, float scale);
gt_status gt_op_rope_backward(gt_backend *be, float *dinp, const float *dout, int B, int T, int NH, int hs, int ld,
                              float theta, float scale);
/* SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + e^-g). Backward
 * accumulates into dgate and dup. */
gt_status gt_op_swiglu_forward(gt_backend *be, float *out, const float *gate, const float *up, size_t n);
gt_status gt_op_swiglu_backward(gt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                const float *up, size_t n);

/* ---- attention ---- */

/* Causal self-attention. qkv is (B,T,3C): q, k, v side by side, each C =
 * NH heads of C/NH. out is (B,T,C). Two implementations of the same
 * function, differing in what forward keeps for backward.
 *
 * Tiled (FlashAttention-2's order): lse (B,NH,T) keeps each row's
 * log-sum-exp of the scaled scores; backward recomputes the probabilities
 * tile by tile from q, k and lse, and needs out (the forward's) as well.
 * Memory beyond the operands grows with T, not T^2. dqkv accumulates. */
gt_status gt_op_attention_tiled_forward(gt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int C,
                                        int NH);
gt_status gt_op_attention_tiled_backward(gt_backend *be, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int C, int NH);
/* Grouped-query attention, tiled as above: NKV key/value heads (NKV
 * divides NH), each serving NH/NKV consecutive query heads. q is (B,T,C),
 * NH heads of C/NH; k and v are (B,T,KV), KV = NKV*C/NH. out (B,T,C), lse
 * (B,NH,T). Backward sums each key and value head's gradient over its
 * group; dq, dk and dv accumulate. With NKV == NH and q, k, v side by side
 * in one (B,T,3C) tensor this is attention_tiled. */
gt_status gt_op_attention_gqa_forward(gt_backend *be, float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int C, int NH, int NKV);
gt_status gt_op_attention_gqa_backward(gt_backend *be, float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v, const float *out,
                                       const float *lse, int B, int T, int C, int NH, int NKV);
/* Full: att (B,NH,T,T) keeps the softmax probabilities for backward
 * (entries above the diagonal are zero); backward takes datt, scratch of
 * att's size. dqkv accumulates. */
gt_status gt_op_attention_full_forward(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                       int NH);
gt_status gt_op_attention_full_backward(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                        const float *att, int B, int T, int C, int NH);

/* ---- loss ---- */

/* Row-wise softmax over V logits, and the cross-entropy against targets.
 * probs may alias logits. losses[i] = -log probs[i, targets[i]]; a target
 * < 0 is ignored (loss 0, gradient 0). A target >= V is GT_ERANGE. */
gt_status gt_op_softmax_xent_forward(gt_backend *be, float *losses, float *probs, const float *logits,
                                     const int32_t *targets, int N, int V);
/* dlogits = (probs - onehot(target)) * dloss, written; may alias probs. */
gt_status gt_op_softmax_xent_backward(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                      float dloss, int N, int V);

GT_API_END
#endif
