/* The CPU backend's operation table, by topic as in backend_impl.h. */
#include "core/cpu/cpu_internal.h"

const gt_backend_ops gt_cpu_ops = {
    .memory =
        {
            .alloc = gt_cpu_alloc,
            .free = gt_cpu_free,
            /* All CPU memory is host memory. */
            .host_alloc = gt_cpu_alloc,
            .host_free = gt_cpu_free,
            .memcpy = gt_cpu_memcpy,
            .memset = gt_cpu_memset,
        },
    .sync =
        {
            .stream_create = gt_cpu_stream_create,
            .stream_destroy = gt_cpu_stream_destroy,
            .stream_sync = gt_cpu_stream_sync,
            .stream_wait_event = gt_cpu_stream_wait_event,
            .event_create = gt_cpu_event_create,
            .event_destroy = gt_cpu_event_destroy,
            .event_record = gt_cpu_event_record,
            .event_sync = gt_cpu_event_sync,
        },
    .product =
        {
            .gemm = gt_cpu_gemm,
            .gemm_ex = gt_cpu_gemm_ex,
            .bias_add = gt_cpu_bias_add,
            .bias_backward = gt_cpu_bias_backward,
        },
    .layer =
        {
            .embedding_forward = gt_cpu_embedding_forward,
            .embedding_backward = gt_cpu_embedding_backward,
            .layernorm_forward = gt_cpu_layernorm_forward,
            .layernorm_backward = gt_cpu_layernorm_backward,
            .linear_forward = gt_cpu_linear_forward,
            .linear_backward = gt_cpu_linear_backward,
            .gelu_forward = gt_cpu_gelu_forward,
            .gelu_backward = gt_cpu_gelu_backward,
            .residual_forward = gt_cpu_residual_forward,
            .residual_backward = gt_cpu_residual_backward,
        },
    .attention =
        {
            .attention_forward = gt_cpu_attention_forward,
            .attention_backward = gt_cpu_attention_backward,
            .causal_softmax_forward = gt_cpu_causal_softmax_forward,
            .causal_softmax_backward = gt_cpu_causal_softmax_backward,
        },
    .loss =
        {
            .softmax_xent_forward = gt_cpu_softmax_xent_forward,
            .softmax_xent_backward = gt_cpu_softmax_xent_backward,
        },
    .vocab_slice =
        {
            .embedding_slice_forward = gt_cpu_embedding_slice_forward,
            .embedding_slice_backward = gt_cpu_embedding_slice_backward,
            .xent_slice_stats = gt_cpu_xent_slice_stats,
            .xent_slice_finish = gt_cpu_xent_slice_finish,
            .softmax_xent_slice_backward = gt_cpu_softmax_xent_slice_backward,
        },
    .optimizer =
        {
            .adamw_update = gt_cpu_adamw_update,
            .adamw_update_bf16 = gt_cpu_adamw_update_bf16,
            .sgd_update = gt_cpu_sgd_update,
        },
    .vector =
        {
            .sum_squares = gt_cpu_sum_squares,
            .scale = gt_cpu_scale,
            .f32_to_bf16 = gt_cpu_f32_to_bf16,
            .bf16_to_f32 = gt_cpu_bf16_to_f32,
        },
    .destroy = gt_cpu_destroy,
};
