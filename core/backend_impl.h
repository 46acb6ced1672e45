/* For backend implementations: what a gt_backend is, and the table of
 * operations a device fills in.
 *
 * Everything outside core/cpu and core/cuda goes through the gt_op_*,
 * gt_backend_*, gt_stream_* and gt_event_* functions of giant/backend.h,
 * which check their arguments once (backend_ops.c, backend_memory.c) and
 * then call through this table. A backend's functions may therefore assume
 * what those checks establish: a non-NULL backend, non-negative sizes,
 * non-NULL pointers where the public header forbids NULL, gemm and gemm_ex
 * arguments that passed gt_gemm_check / gt_gemm_ex_check, and a stream that
 * is never NULL (the wrappers put the compute stream in its place).
 * What only the data can tell (token ids against the vocabulary, targets)
 * stays with the backend, which holds the data.
 *
 * Memory, sync and destroy are required of every backend. A NULL entry
 * among the kernels is an operation the backend lacks: the wrapper reports
 * it as GT_EUNSUPPORTED, naming the operation and the backend.
 */
#ifndef GIANT_BACKEND_IMPL_H
#define GIANT_BACKEND_IMPL_H

#include "giant/backend.h"
#include "core/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each entry has the signature of the public function of the same name
 * (gt_backend_<name> for memory, gt_<name> for streams and events, gt_op_<name>
 * for the rest), where it is documented. */
typedef struct gt_backend_ops {
  struct gt_memory_ops {
    gt_status (*alloc)(gt_backend *be, size_t bytes, void **ptr);
    void (*free)(gt_backend *be, void *ptr);
    gt_status (*host_alloc)(gt_backend *be, size_t bytes, void **ptr);
    void (*host_free)(gt_backend *be, void *ptr);
    gt_status (*memcpy)(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind, gt_stream *s);
    gt_status (*memset)(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
  } memory;

  struct gt_sync_ops {
    gt_status (*stream_create)(gt_backend *be, gt_stream **s);
    void (*stream_destroy)(gt_backend *be, gt_stream *s);
    gt_status (*stream_sync)(gt_backend *be, gt_stream *s);
    gt_status (*stream_wait_event)(gt_backend *be, gt_stream *s, gt_event *e);
    gt_status (*event_create)(gt_backend *be, gt_event **e);
    void (*event_destroy)(gt_backend *be, gt_event *e);
    gt_status (*event_record)(gt_backend *be, gt_event *e, gt_stream *s);
    gt_status (*event_sync)(gt_backend *be, gt_event *e);
  } sync;

  /* Matrix products, and the biases of products done by them. */
  struct gt_product_ops {
    gt_status (*gemm)(gt_backend *be, const gt_gemm_args *g);
    gt_status (*gemm_ex)(gt_backend *be, const gt_gemm_ex_args *g);
    gt_status (*bias_add)(gt_backend *be, float *out, const float *bias, int N, int OC);
    gt_status (*bias_backward)(gt_backend *be, float *dbias, const float *dout, int N, int OC);
  } product;

  /* The layers of a transformer, forward and backward. */
  struct gt_layer_ops {
    gt_status (*embedding_forward)(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                   const float *wpe, int B, int T, int C);
    gt_status (*embedding_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                    const int32_t *tokens, int B, int T, int C);
    gt_status (*layernorm_forward)(gt_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C);
    gt_status (*layernorm_backward)(gt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                    int C);
    gt_status (*linear_forward)(gt_backend *be, float *out, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC);
    gt_status (*linear_backward)(gt_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int C, int OC);
    gt_status (*gelu_forward)(gt_backend *be, float *out, const float *inp, size_t n);
    gt_status (*gelu_backward)(gt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    gt_status (*residual_forward)(gt_backend *be, float *out, const float *a, const float *b, size_t n);
    gt_status (*residual_backward)(gt_backend *be, float *da, float *db, const float *dout, size_t n);
  } layer;

  struct gt_attention_ops {
    gt_status (*attention_forward)(gt_backend *be, float *out, float *att, const float *qkv, int B, int T, int C,
                                   int NH);
    gt_status (*attention_backward)(gt_backend *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int C, int NH);
    gt_status (*causal_softmax_forward)(gt_backend *be, float *att, int BH, int T);
    gt_status (*causal_softmax_backward)(gt_backend *be, float *datt, const float *att, int BH, int T, float scale);
  } attention;

  /* Softmax cross-entropy over whole rows of logits. */
  struct gt_loss_ops {
    gt_status (*softmax_xent_forward)(gt_backend *be, float *losses, float *probs, const float *logits,
                                      const int32_t *targets, int N, int V);
    gt_status (*softmax_xent_backward)(gt_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                       float dloss, int N, int V);
  } loss;

  /* Embedding and cross-entropy over a slice [v0, v0 + V) of the vocabulary. */
  struct gt_vocab_slice_ops {
    gt_status (*embedding_slice_forward)(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                                         int v0, int V, const float *wpe, int B, int T, int C);
    gt_status (*embedding_slice_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                          const int32_t *tokens, int v0, int V, int B, int T, int C);
    gt_status (*xent_slice_stats)(gt_backend *be, float *stats, float *tlogit, const float *logits,
                                  const int32_t *targets, int v0, int N, int V);
    gt_status (*xent_slice_finish)(gt_backend *be, float *losses, float *probs, const float *logits,
                                   const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                   int vocab_total, int N, int V);
    gt_status (*softmax_xent_slice_backward)(gt_backend *be, float *dlogits, const float *probs,
                                             const int32_t *targets, int v0, float dloss, int N, int V);
  } vocab_slice;

  struct gt_optimizer_ops {
    gt_status (*adamw_update)(gt_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                              const gt_adamw_args *a);
    gt_status (*adamw_update_bf16)(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                   uint16_t *param_bf16, size_t n, const gt_adamw_args *a);
    gt_status (*sgd_update)(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                            const gt_sgd_args *a);
  } optimizer;

  /* Reductions, scaling and conversions over flat buffers. */
  struct gt_vector_ops {
    gt_status (*sum_squares)(gt_backend *be, double *out, const float *x, size_t n);
    gt_status (*scale)(gt_backend *be, float *x, float s, size_t n);
    gt_status (*f32_to_bf16)(gt_backend *be, uint16_t *dst, const float *src, size_t n);
    gt_status (*bf16_to_f32)(gt_backend *be, float *dst, const uint16_t *src, size_t n);
  } vector;

  /* Releases the backend and everything it holds, be included. */
  void (*destroy)(gt_backend *be);
} gt_backend_ops;

struct gt_backend {
  const gt_backend_ops *ops;
  gt_device_kind kind;
  int device;         /* device index (CUDA), 0 on CPU */
  int num_threads;    /* host threads the kernels use */
  char name[32];      /* "cpu", "cuda:0" */
  char kernels[48];   /* the kernels chosen for this machine at creation:
                         "avx2+fma", "avx512+amx", "cublas+cuda" */
  gt_stream *compute; /* where kernels run */
  gt_stream *copy;    /* for transfers that overlap compute */
  double peak_flops;  /* measured by gt_backend_measure_peak, 0 until then */
  struct gt_mem_ledger *ledger;      /* device bytes held, and the budget (backend_ledger.c) */
  struct gt_mem_ledger *host_ledger; /* host bytes of gt_backend_host_alloc, and their budget */
  void *impl;
};

/* The argument checks of gemm and gemm_ex (gemm_check.c), made once by
 * gt_op_gemm and gt_op_gemm_ex before the backend runs: transpose flags,
 * shapes, leading dimensions, batch outputs that do not overlap; for
 * gemm_ex also the operand types. Pointers are only tested for NULL. */
gt_status gt_gemm_check(const gt_backend *be, const gt_gemm_args *g);
gt_status gt_gemm_ex_check(const gt_backend *be, const gt_gemm_ex_args *g);

#ifdef __cplusplus
}
#endif
#endif
