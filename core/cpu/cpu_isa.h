/* One CPU backend, compiled once per instruction-set level.
 *
 * The kernel files (cpu_kernels_*.c, cpu_attention.c, cpu_gemm*.c,
 * cpu_reduce.c) and the ops table (cpu_ops.c) are built several times, each
 * time with GT_CPU_ISA set to the level's name and the compiler flags of that
 * level (core/cpu/CMakeLists.txt): x86-64 baseline, AVX2+FMA (x86-64-v3) and
 * AVX-512 (x86-64-v4). This header gives each build's external symbols the
 * level's suffix, so gt_cpu_gelu_forward becomes gt_cpu_gelu_forward_avx2,
 * and gt_cpu_ops becomes gt_cpu_ops_avx2; cpu_isa.c picks one table at run
 * time from what the CPU reports. The definitions themselves keep their
 * plain names.
 *
 * A kernel added to those files needs a line here: without it, the link
 * fails on a symbol defined once per level, so it cannot be forgotten.
 */
#ifndef GIANT_CPU_ISA_H
#define GIANT_CPU_ISA_H

#ifdef GT_CPU_ISA
#define GT_CPU_ISA_CAT2(name, isa) name##_##isa
#define GT_CPU_ISA_CAT(name, isa) GT_CPU_ISA_CAT2(name, isa)
/* A macro does not expand inside its own expansion, so `name` stays plain. */
#define GT_CPU_ISA_NAME(name) GT_CPU_ISA_CAT(name, GT_CPU_ISA)

#define gt_cpu_ops GT_CPU_ISA_NAME(gt_cpu_ops)
/* cpu_gemm.c, cpu_gemm_ex.c */
#define gt_cpu_gemm GT_CPU_ISA_NAME(gt_cpu_gemm)
#define gt_cpu_gemm_ex GT_CPU_ISA_NAME(gt_cpu_gemm_ex)
#define gt_cpu_bias_add GT_CPU_ISA_NAME(gt_cpu_bias_add)
#define gt_cpu_bias_backward GT_CPU_ISA_NAME(gt_cpu_bias_backward)
/* cpu_kernels_nn.c */
#define gt_cpu_embedding_forward GT_CPU_ISA_NAME(gt_cpu_embedding_forward)
#define gt_cpu_embedding_backward GT_CPU_ISA_NAME(gt_cpu_embedding_backward)
#define gt_cpu_layernorm_forward GT_CPU_ISA_NAME(gt_cpu_layernorm_forward)
#define gt_cpu_layernorm_backward GT_CPU_ISA_NAME(gt_cpu_layernorm_backward)
#define gt_cpu_linear_forward GT_CPU_ISA_NAME(gt_cpu_linear_forward)
#define gt_cpu_linear_backward GT_CPU_ISA_NAME(gt_cpu_linear_backward)
#define gt_cpu_gelu_forward GT_CPU_ISA_NAME(gt_cpu_gelu_forward)
#define gt_cpu_gelu_backward GT_CPU_ISA_NAME(gt_cpu_gelu_backward)
#define gt_cpu_residual_forward GT_CPU_ISA_NAME(gt_cpu_residual_forward)
#define gt_cpu_residual_backward GT_CPU_ISA_NAME(gt_cpu_residual_backward)
/* cpu_attention.c */
#define gt_cpu_attention_forward GT_CPU_ISA_NAME(gt_cpu_attention_forward)
#define gt_cpu_attention_backward GT_CPU_ISA_NAME(gt_cpu_attention_backward)
#define gt_cpu_causal_softmax_forward GT_CPU_ISA_NAME(gt_cpu_causal_softmax_forward)
#define gt_cpu_causal_softmax_backward GT_CPU_ISA_NAME(gt_cpu_causal_softmax_backward)
/* cpu_kernels_loss.c */
#define gt_cpu_softmax_xent_forward GT_CPU_ISA_NAME(gt_cpu_softmax_xent_forward)
#define gt_cpu_softmax_xent_backward GT_CPU_ISA_NAME(gt_cpu_softmax_xent_backward)
/* cpu_kernels_optim.c */
#define gt_cpu_adamw_update GT_CPU_ISA_NAME(gt_cpu_adamw_update)
#define gt_cpu_adamw_update_bf16 GT_CPU_ISA_NAME(gt_cpu_adamw_update_bf16)
#define gt_cpu_sgd_update GT_CPU_ISA_NAME(gt_cpu_sgd_update)
/* cpu_kernels_math.c */
#define gt_cpu_sum_squares GT_CPU_ISA_NAME(gt_cpu_sum_squares)
#define gt_cpu_scale GT_CPU_ISA_NAME(gt_cpu_scale)
#define gt_cpu_f32_to_bf16 GT_CPU_ISA_NAME(gt_cpu_f32_to_bf16)
#define gt_cpu_bf16_to_f32 GT_CPU_ISA_NAME(gt_cpu_bf16_to_f32)
/* cpu_reduce.c */
#define gt_cpu_sum GT_CPU_ISA_NAME(gt_cpu_sum)
#define gt_cpu_max GT_CPU_ISA_NAME(gt_cpu_max)
#define gt_cpu_dot GT_CPU_ISA_NAME(gt_cpu_dot)
#define gt_cpu_sumsq_dev GT_CPU_ISA_NAME(gt_cpu_sumsq_dev)
#define gt_cpu_dot_dev GT_CPU_ISA_NAME(gt_cpu_dot_dev)
#define gt_cpu_sumsq_f64 GT_CPU_ISA_NAME(gt_cpu_sumsq_f64)
/* cpu_kernels_vocab.c (a slice of the vocabulary) */
#define gt_cpu_embedding_slice_forward GT_CPU_ISA_NAME(gt_cpu_embedding_slice_forward)
#define gt_cpu_embedding_slice_backward GT_CPU_ISA_NAME(gt_cpu_embedding_slice_backward)
#define gt_cpu_xent_slice_stats GT_CPU_ISA_NAME(gt_cpu_xent_slice_stats)
#define gt_cpu_xent_slice_finish GT_CPU_ISA_NAME(gt_cpu_xent_slice_finish)
#define gt_cpu_softmax_xent_slice_backward GT_CPU_ISA_NAME(gt_cpu_softmax_xent_slice_backward)
#endif /* GT_CPU_ISA */

#endif
