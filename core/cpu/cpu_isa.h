/* One CPU backend, compiled once per instruction-set level.
 *
 * The kernel files (cpu_kernels_*.c, cpu_attention*.c, cpu_gemm*.c,
 * cpu_reduce.c) and the ops table (cpu_ops.c) are built several times, each
 * time with GT_CPU_ISA set to the level's name and the compiler flags of that
 * level (core/cpu/CMakeLists.txt): x86-64 baseline, AVX2+FMA (x86-64-v3) and
 * AVX-512 (x86-64-v4). Each build's external symbols get the level's suffix,
 * so gt_cpu_ops becomes gt_cpu_ops_avx2; cpu_isa.c picks one table at run
 * time from what the CPU reports.
 *
 * The kernels of the list in core/backend_kernels.h are named through
 * GT_CPU_KERNEL: GT_CPU_KERNEL(gelu_forward) is gt_cpu_gelu_forward_avx2 in
 * the AVX2 build. cpu_internal.h declares every one of them from the list
 * and cpu_ops.c puts every one in the table, so a kernel added to the list
 * needs nothing here, and a definition whose signature differs from the
 * list's does not compile.
 *
 * The other external symbols of those files, the row reductions of
 * cpu_reduce.c, keep their plain names in the source and are renamed by a
 * line here each: without it, the link fails on a symbol defined once per
 * level, so it cannot be forgotten.
 */
#ifndef GIANT_CPU_ISA_H
#define GIANT_CPU_ISA_H

#ifdef GT_CPU_ISA
#define GT_CPU_ISA_CAT2(name, isa) name##_##isa
#define GT_CPU_ISA_CAT(name, isa) GT_CPU_ISA_CAT2(name, isa)
/* A macro does not expand inside its own expansion, so `name` stays plain. */
#define GT_CPU_ISA_NAME(name) GT_CPU_ISA_CAT(name, GT_CPU_ISA)

/* The kernel `name` of backend_kernels.h, as this level defines it. */
#define GT_CPU_KERNEL(name) GT_CPU_ISA_NAME(gt_cpu_##name)

#define gt_cpu_ops GT_CPU_ISA_NAME(gt_cpu_ops)
/* cpu_reduce.c */
#define gt_cpu_sum GT_CPU_ISA_NAME(gt_cpu_sum)
#define gt_cpu_max GT_CPU_ISA_NAME(gt_cpu_max)
#define gt_cpu_dot GT_CPU_ISA_NAME(gt_cpu_dot)
#define gt_cpu_sumsq_dev GT_CPU_ISA_NAME(gt_cpu_sumsq_dev)
#define gt_cpu_dot_dev GT_CPU_ISA_NAME(gt_cpu_dot_dev)
#define gt_cpu_sumsq_f64 GT_CPU_ISA_NAME(gt_cpu_sumsq_f64)
#endif /* GT_CPU_ISA */

#endif
