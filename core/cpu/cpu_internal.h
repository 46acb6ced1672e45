/* CPU backend internals: the functions behind gt_cpu_ops. Kernels live in
 * cpu_*.c files by family; cpu_ops.c gathers them into the ops table. Those
 * files are compiled once per instruction-set level (cpu_isa.h). Arguments
 * arrive checked by the gt_op_* wrappers (core/backend_impl.h). */
#ifndef GIANT_CPU_INTERNAL_H
#define GIANT_CPU_INTERNAL_H

#include "core/cpu/cpu_isa.h"
#include "core/backend_impl.h"
#include "core/kernels.h"

extern const gt_backend_ops gt_cpu_ops;

/* be->impl of a CPU backend. */
typedef struct gt_cpu_impl {
  float *scratch;    /* gemm_ex: bf16 operands widened to fp32, or packed into AMX tiles */
  size_t scratch_cap; /* floats */
  bool amx;          /* bf16 products on AMX tiles */
} gt_cpu_impl;

gt_status gt_cpu_backend_create(const gt_backend_config *cfg, gt_backend **out);

/* The kernels for this CPU (cpu_isa.c): the ops table of the best level the
 * CPU and OS support, or the one GT_CPU_ISA names; `name` receives the
 * level's name ("avx512", "avx2+fma", "sse2"). */
gt_status gt_cpu_isa_choose(const gt_backend_ops **ops, char *name, size_t name_len);

/* memory (cpu_backend.c); streams and events (cpu_stream.c) */
gt_status gt_cpu_alloc(gt_backend *be, size_t bytes, void **ptr);
void gt_cpu_free(gt_backend *be, void *ptr);
gt_status gt_cpu_memcpy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_copy_kind kind,
                        gt_stream *s);
gt_status gt_cpu_memset(gt_backend *be, void *dst, int value, size_t bytes, gt_stream *s);
gt_status gt_cpu_stream_create(gt_backend *be, gt_stream **s);
/* The compute stream: work queued on it runs in the calling thread. */
gt_status gt_cpu_compute_stream_create(gt_stream **s);
void gt_cpu_stream_destroy(gt_backend *be, gt_stream *s);
gt_status gt_cpu_stream_sync(gt_backend *be, gt_stream *s);
gt_status gt_cpu_event_create(gt_backend *be, gt_event **e);
void gt_cpu_event_destroy(gt_backend *be, gt_event *e);
gt_status gt_cpu_event_record(gt_backend *be, gt_event *e, gt_stream *s);
gt_status gt_cpu_stream_wait_event(gt_backend *be, gt_stream *s, gt_event *e);
gt_status gt_cpu_event_sync(gt_backend *be, gt_event *e);
void gt_cpu_destroy(gt_backend *be);

/* matrix products (cpu_gemm.c) */
gt_status gt_cpu_gemm(gt_backend *be, const gt_gemm_args *g);
/* mixed precision and biases (cpu_gemm_ex.c) */
gt_status gt_cpu_gemm_ex(gt_backend *be, const gt_gemm_ex_args *g);
gt_status gt_cpu_bias_add(gt_backend *be, float *out, const float *bias, int N, int OC);
gt_status gt_cpu_bias_backward(gt_backend *be, float *dbias, const float *dout, int N, int OC);
#ifdef GIANT_CPU_AMX
/* bf16 products on AMX tiles (cpu_gemm_amx.c): whether the CPU and OS allow
 * them, the scratch floats one product needs, and batch entry e of a
 * checked gemm_ex with bf16 operands, k > 0 and an fp32 result. */
bool gt_cpu_amx_available(void);
size_t gt_cpu_amx_scratch_floats(int m, int n, int k);
gt_status gt_cpu_gemm_bf16_amx(gt_backend *be, const gt_gemm_ex_args *g, int64_t e, uint16_t *scratch);
#endif

/* layers (cpu_kernels_nn.c) */
gt_status gt_cpu_embedding_forward(gt_backend *be, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int B, int T, int C);
gt_status gt_cpu_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                    const int32_t *tokens, int B, int T, int C);
gt_status gt_cpu_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *w, const float *b, int N, int C);
gt_status gt_cpu_layernorm_backward(gt_backend *be, float *dinp, float *dw, float *db,
                                    const float *dout, const float *inp, const float *w,
                                    const float *mean, const float *rstd, int N, int C);
gt_status gt_cpu_linear_forward(gt_backend *be, float *out, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC);
gt_status gt_cpu_linear_backward(gt_backend *be, float *dinp, float *dw, float *dbias,
                                 const float *dout, const float *inp, const float *w, int N, int C,
                                 int OC);
gt_status gt_cpu_gelu_forward(gt_backend *be, float *out, const float *inp, size_t n);
gt_status gt_cpu_gelu_backward(gt_backend *be, float *dinp, const float *inp, const float *dout,
                               size_t n);
gt_status gt_cpu_residual_forward(gt_backend *be, float *out, const float *a, const float *b,
                                  size_t n);
gt_status gt_cpu_residual_backward(gt_backend *be, float *da, float *db, const float *dout,
                                   size_t n);

/* attention (cpu_attention.c) */
gt_status gt_cpu_attention_forward(gt_backend *be, float *out, float *att, const float *qkv, int B,
                                   int T, int C, int NH);
gt_status gt_cpu_attention_backward(gt_backend *be, float *dqkv, float *datt, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int C,
                                    int NH);
gt_status gt_cpu_causal_softmax_forward(gt_backend *be, float *att, int BH, int T);
gt_status gt_cpu_causal_softmax_backward(gt_backend *be, float *datt, const float *att, int BH, int T,
                                         float scale);

/* loss (cpu_kernels_loss.c) */
gt_status gt_cpu_softmax_xent_forward(gt_backend *be, float *losses, float *probs,
                                      const float *logits, const int32_t *targets, int N, int V);
gt_status gt_cpu_softmax_xent_backward(gt_backend *be, float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int V);

/* optimizers (cpu_kernels_optim.c) */
gt_status gt_cpu_adamw_update(gt_backend *be, float *param, const float *grad, float *m, float *v,
                              size_t n, const gt_adamw_args *a);
gt_status gt_cpu_adamw_update_bf16(gt_backend *be, float *param, const float *grad, float *m, float *v,
                                   uint16_t *param_bf16, size_t n, const gt_adamw_args *a);
gt_status gt_cpu_sgd_update(gt_backend *be, float *param, const float *grad, float *mom, size_t n,
                            const gt_sgd_args *a);

/* reductions, scaling, conversions (cpu_kernels_math.c) */
gt_status gt_cpu_sum_squares(gt_backend *be, double *out, const float *x, size_t n);
gt_status gt_cpu_scale(gt_backend *be, float *x, float s, size_t n);
gt_status gt_cpu_f32_to_bf16(gt_backend *be, uint16_t *dst, const float *src, size_t n);
gt_status gt_cpu_bf16_to_f32(gt_backend *be, float *dst, const uint16_t *src, size_t n);

/* a slice of the vocabulary (cpu_kernels_vocab.c) */
gt_status gt_cpu_embedding_slice_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0,
                                      int V, const float *wpe, int B, int T, int C);
gt_status gt_cpu_embedding_slice_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                                       const int32_t *tokens, int v0, int V, int B, int T, int C);
gt_status gt_cpu_xent_slice_stats(gt_backend *be, float *stats, float *tlogit, const float *logits,
                               const int32_t *targets, int v0, int N, int V);
gt_status gt_cpu_xent_slice_finish(gt_backend *be, float *losses, float *probs, const float *logits,
                                const float *stats_all, int P, const float *tlogit, const int32_t *targets,
                                int vocab_total, int N, int V);
gt_status gt_cpu_softmax_xent_slice_backward(gt_backend *be, float *dlogits, const float *probs,
                                          const int32_t *targets, int v0, float dloss, int N, int V);

#endif
