/* The backend interface: what a device provides.
 *
 * A backend is a table of operations (gt_backend_ops) that a device
 * implements: memory, copies, streams and events, matrix products, and the
 * forward and backward kernels of a transformer. Everything above this
 * interface (layers, models, optimizers, parallelism) calls through it and
 * never touches device memory directly, so a CUDA backend drops in beside
 * the CPU one.
 *
 * Conventions for the kernels:
 *  - Pointers are device pointers; shapes are row-major; N = B*T rows.
 *  - Float tensors are fp32; token ids and targets int32.
 *  - Backward kernels ACCUMULATE (+=) into every gradient they write, input
 *    gradients included, so residual branches and tied weights need no extra
 *    pass. The caller zeroes gradients at the start of a step. The one
 *    exception is softmax_xent_backward, which writes dlogits so it can
 *    reuse the probabilities' buffer.
 *  - Kernels run in order on the backend's compute stream. Memory copies and
 *    events take an explicit stream, so transfers and communication can
 *    overlap compute.
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

typedef struct gt_backend_ops {
  /* ---- memory ---- */
  gt_status (*alloc)(gt_backend *be, size_t bytes, void **ptr);
  void (*free)(gt_backend *be, void *ptr);
  /* Host memory suited to transfers (pinned on CUDA). */
  gt_status (*host_alloc)(gt_backend *be, size_t bytes, void **ptr);
  void (*host_free)(gt_backend *be, void *ptr);
  gt_status (*memcpy)(gt_backend *be, void *dst, const void *src, size_t bytes,
                      gt_copy_kind kind, gt_stream *s);
  gt_status (*memset)(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);

  /* ---- streams and events ---- */
  gt_status (*stream_create)(gt_backend *be, gt_stream **s);
  void (*stream_destroy)(gt_backend *be, gt_stream *s);
  gt_status (*stream_sync)(gt_backend *be, gt_stream *s);
  gt_status (*event_create)(gt_backend *be, gt_event **e);
  void (*event_destroy)(gt_backend *be, gt_event *e);
  gt_status (*event_record)(gt_backend *be, gt_event *e, gt_stream *s);
  gt_status (*stream_wait_event)(gt_backend *be, gt_stream *s, gt_event *e);
  gt_status (*event_sync)(gt_backend *be, gt_event *e);

  /* ---- matrix products ---- */
  gt_status (*gemm)(gt_backend *be, const gt_gemm_args *g);

  /* ---- kernels (forward and backward) ---- */
  /* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; wpe may be NULL. */
  gt_status (*embedding_forward)(gt_backend *be, float *out, const int32_t *tokens,
                                 const float *wte, const float *wpe, int B, int T, int C);
  gt_status (*embedding_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int B, int T, int C);
  /* Per row of C: out = (x - mean) * rstd * w + b; saves mean and rstd (N). */
  gt_status (*layernorm_forward)(gt_backend *be, float *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int N, int C);
  gt_status (*layernorm_backward)(gt_backend *be, float *dinp, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C);
  /* out (N,OC) = inp (N,C) @ w^T + bias, w is (OC,C) as in PyTorch; bias may be NULL. */
  gt_status (*linear_forward)(gt_backend *be, float *out, const float *inp, const float *w,
                              const float *bias, int N, int C, int OC);
  /* dinp may be NULL (first layer), dbias may be NULL (no bias). */
  gt_status (*linear_backward)(gt_backend *be, float *dinp, float *dw, float *dbias,
                               const float *dout, const float *inp, const float *w, int N, int C,
                               int OC);
  /* GELU, tanh approximation as in GPT-2. */
  gt_status (*gelu_forward)(gt_backend *be, float *out, const float *inp, size_t n);
  gt_status (*gelu_backward)(gt_backend *be, float *dinp, const float *inp, const float *dout,
                             size_t n);
  /* out = a + b. */
  gt_status (*residual_forward)(gt_backend *be, float *out, const float *a, const float *b,
                                size_t n);
  /* da += dout; db += dout. Either may be NULL (that branch has no gradient). */
  gt_status (*residual_backward)(gt_backend *be, float *da, float *db, const float *dout, size_t n);
  /* Causal self-attention. qkv is (B,T,3C): q, k, v side by side, each C =
   * NH heads of C/NH. out is (B,T,C). att (B,NH,T,T) keeps the softmax
   * probabilities for backward (entries above the diagonal are zero). */
  gt_status (*attention_forward)(gt_backend *be, float *out, float *att, const float *qkv, int B,
                                 int T, int C, int NH);
  /* datt is scratch of att's size. */
  gt_status (*attention_backward)(gt_backend *be, float *dqkv, float *datt, const float *dout,
                                  const float *qkv, const float *att, int B, int T, int C, int NH);
  /* Row-wise softmax over V logits, and the cross-entropy against targets.
   * probs may alias logits. losses[i] = -log probs[i, targets[i]]; a target
   * < 0 is ignored (loss 0, gradient 0). A target >= V is an error. */
  gt_status (*softmax_xent_forward)(gt_backend *be, float *losses, float *probs,
                                    const float *logits, const int32_t *targets, int N, int V);
  /* dlogits = (probs - onehot(target)) * dloss, written; may alias probs. */
  gt_status (*softmax_xent_backward)(gt_backend *be, float *dlogits, const float *probs,
                                     const int32_t *targets, float dloss, int N, int V);

  /* ---- optimizers and reductions ---- */
  gt_status (*adamw_update)(gt_backend *be, float *param, const float *grad, float *m, float *v,
                            size_t n, const gt_adamw_args *a);
  gt_status (*sgd_update)(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                          const gt_sgd_args *a);
  /* *out = sum x[i]^2 (computed in double, stored as double in device memory). */
  gt_status (*sum_squares)(gt_backend *be, double *out, const float *x, size_t n);
  /* x *= s. */
  gt_status (*scale)(gt_backend *be, float *x, float s, size_t n);
  /* Mixed precision: conversions between fp32 and bf16 storage. */
  gt_status (*f32_to_bf16)(gt_backend *be, uint16_t *dst, const float *src, size_t n);
  gt_status (*bf16_to_f32)(gt_backend *be, float *dst, const uint16_t *src, size_t n);

  void (*destroy)(gt_backend *be);

  /* ---- additions (kept at the end so existing tables stay valid) ---- */
  /* Mixed-precision matrix product; NULL when the backend has none (callers
   * fall back to converting and calling gemm). */
  gt_status (*gemm_ex)(gt_backend *be, const gt_gemm_ex_args *g);

  /* Vocabulary parallelism: this rank holds rows [v0, v0 + V) of the token
   * table, or columns [v0, v0 + V) of each row of logits. */
  /* out[b,t,:] = wte[tokens[b,t] - v0,:] when the token is in range, else 0;
   * plus wpe[t,:] when wpe is not NULL. */
  gt_status (*embedding_forward_vp)(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                    int v0, int V, const float *wpe, int B, int T, int C);
  /* dwte += rows of dout for tokens in range; dwpe (may be NULL) += dout summed over b. */
  gt_status (*embedding_backward_vp)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int v0, int V, int B, int T, int C);
  /* Per row of this rank's logits (N, V): stats[i] = local max m, stats[N+i]
   * = sum_j exp(logit - m); tlogit[i] = the target's logit when the target
   * is in range, else 0. */
  gt_status (*xent_vp_local)(gt_backend *be, float *stats, float *tlogit, const float *logits,
                             const int32_t *targets, int v0, int N, int V);
  /* With every rank's stats gathered (P blocks of 2N, rank order) and the
   * target logits summed over ranks: probs = softmax over the whole row
   * (this rank's columns; may alias logits), losses = log-sum-exp - target
   * logit (0 where the target is < 0). A target >= the whole vocabulary
   * (vocab_total) is GT_ERANGE. */
  gt_status (*xent_vp_finish)(gt_backend *be, float *losses, float *probs, const float *logits,
                              const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                              int vocab_total, int N, int V);
  /* dlogits = (probs - onehot(target - v0)) * dloss, written; may alias probs. */
  gt_status (*softmax_xent_backward_vp)(gt_backend *be, float *dlogits, const float *probs,
                                        const int32_t *targets, int v0, float dloss, int N, int V);

  /* Biases on their own, for matrix products done by gemm or gemm_ex. */
  /* out[i,:] += bias for each of the N rows of out (N, OC). */
  gt_status (*bias_add)(gt_backend *be, float *out, const float *bias, int N, int OC);
  /* dbias += the sum over rows of dout (N, OC). */
  gt_status (*bias_backward)(gt_backend *be, float *dbias, const float *dout, int N, int OC);

  /* The causal softmax of attention on its own, for attention composed of
   * gemm_ex products (gt_attention_forward_bf16). att holds BH score
   * matrices of T x T; row t keeps columns 0..t. In place: softmax of the
   * kept columns, zeros above the diagonal. */
  gt_status (*causal_softmax_forward)(gt_backend *be, float *att, int BH, int T);
  /* In place: datt (the gradient of the probabilities att) becomes the
   * gradient of the scores times scale, zeros above the diagonal. */
  gt_status (*causal_softmax_backward)(gt_backend *be, float *datt, const float *att, int BH, int T, float scale);
} gt_backend_ops;

struct gt_backend {
  const gt_backend_ops *ops;
  gt_device_kind kind;
  int device;             /* device index (CUDA), 0 on CPU */
  int num_threads;        /* host threads the kernels use */
  char name[32];          /* "cpu", "cuda:0" */
  char kernels[48];       /* the kernels chosen for this machine at creation:
                             "avx2+fma", "avx512+amx", "cublas+cuda" */
  gt_stream *compute;     /* where kernels run */
  gt_stream *copy;        /* for transfers that overlap compute */
  double peak_flops;      /* measured by gt_backend_measure_peak, 0 until then */
  void *impl;
};

typedef struct gt_backend_config {
  gt_device_kind kind;
  int device;       /* CUDA device; -1 = from GT_LOCAL_RANK */
  int num_threads;  /* CPU threads; 0 = OMP_NUM_THREADS or all cores */
} gt_backend_config;

gt_status gt_backend_create(const gt_backend_config *cfg, gt_backend **out);
void gt_backend_destroy(gt_backend *be);
/* Parses "cpu", "cuda", "cuda:1". */
gt_status gt_device_parse(const char *s, gt_backend_config *cfg);
/* Whether the backend has every operation mixed precision uses (gemm_ex,
 * bias_add, bias_backward, causal_softmax_forward/backward). */
bool gt_backend_has_mixed_precision(const gt_backend *be);
/* Whether a backend kind is compiled in and has a device to run on; when not,
 * why (for skipped tests and clear errors). */
bool gt_backend_available(gt_device_kind kind, char *why, size_t why_len);

/* Times fp32 GEMMs of size n (n x n x n) for about `seconds` and stores the
 * best rate in be->peak_flops (the denominator of MFU). */
gt_status gt_backend_measure_peak(gt_backend *be, int n, double seconds, double *flops);
/* The same for the products of a precision: under GT_PRECISION_BF16, gemm_ex
 * with bf16 operands and an fp32 result, as mixed-precision training runs
 * them. */
gt_status gt_backend_measure_peak_ex(gt_backend *be, gt_precision p, int n, double seconds, double *flops);

/* Causal self-attention with bf16 products: as attention_forward and
 * attention_backward, but q, k, v, the probabilities and the output
 * gradient are rounded to bf16 for the four matrix products (gemm_ex, fp32
 * accumulation); scores, softmax, att and every output stay fp32. Composed
 * of backend operations, so it runs on every backend with gemm_ex. scratch
 * is device memory of gt_attention_bf16_scratch bytes. */
size_t gt_attention_bf16_scratch(int B, int T, int C, int NH);
gt_status gt_attention_forward_bf16(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                    int NH, void *scratch);
/* dqkv accumulates; datt is scratch of att's size, as in attention_backward. */
gt_status gt_attention_backward_bf16(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                     const float *att, int B, int T, int C, int NH, void *scratch);

/* For backend implementations: the argument checks every gemm and gemm_ex
 * makes before touching memory (transpose flags, shapes, leading
 * dimensions, batch outputs that do not overlap; for gemm_ex also the
 * operand types). Pointers are only tested for NULL. */
gt_status gt_gemm_check(const gt_backend *be, const gt_gemm_args *g);
gt_status gt_gemm_ex_check(const gt_backend *be, const gt_gemm_ex_args *g);

/* Shorthands for synchronous copies on the compute stream. */
gt_status gt_backend_upload(gt_backend *be, void *dst, const void *src, size_t bytes);
gt_status gt_backend_download(gt_backend *be, void *dst, const void *src, size_t bytes);

GT_API_END
#endif
