/* The CUDA backend's operation table, by topic as in backend_impl.h. C, not
 * CUDA C++, for its designated initializers; the functions are extern "C". */
#include "core/cuda/cuda_internal.h"

const gt_backend_ops gt_cuda_ops = {
    .memory =
        {
            .alloc = gt_cuda_alloc,
            .free = gt_cuda_free,
            .host_alloc = gt_cuda_host_alloc,
            .host_free = gt_cuda_host_free,
            .memcpy = gt_cuda_memcpy,
            .memset = gt_cuda_memset,
        },
    .sync =
        {
            .stream_create = gt_cuda_stream_create,
            .stream_destroy = gt_cuda_stream_destroy,
            .stream_sync = gt_cuda_stream_sync,
            .stream_wait_event = gt_cuda_stream_wait_event,
            .event_create = gt_cuda_event_create,
            .event_destroy = gt_cuda_event_destroy,
            .event_record = gt_cuda_event_record,
            .event_sync = gt_cuda_event_sync,
        },
    .product =
        {
            .gemm = gt_cuda_gemm,
            .gemm_ex = gt_cuda_gemm_ex,
            .bias_add = gt_cuda_bias_add,
            .bias_backward = gt_cuda_bias_backward,
        },
    .layer =
        {
            .embedding_forward = gt_cuda_embedding_forward,
            .embedding_backward = gt_cuda_embedding_backward,
            .layernorm_forward = gt_cuda_layernorm_forward,
            .layernorm_backward = gt_cuda_layernorm_backward,
            .linear_forward = gt_cuda_linear_forward,
            .linear_backward = gt_cuda_linear_backward,
            .gelu_forward = gt_cuda_gelu_forward,
            .gelu_backward = gt_cuda_gelu_backward,
            .residual_forward = gt_cuda_residual_forward,
            .residual_backward = gt_cuda_residual_backward,
        },
    .attention =
        {
            .attention_forward = gt_cuda_attention_forward,
            .attention_backward = gt_cuda_attention_backward,
            .causal_softmax_forward = gt_cuda_causal_softmax_forward,
            .causal_softmax_backward = gt_cuda_causal_softmax_backward,
        },
    .loss =
        {
            .softmax_xent_forward = gt_cuda_softmax_xent_forward,
            .softmax_xent_backward = gt_cuda_softmax_xent_backward,
        },
    .vocab_slice =
        {
            .embedding_slice_forward = gt_cuda_embedding_slice_forward,
            .embedding_slice_backward = gt_cuda_embedding_slice_backward,
            .xent_slice_stats = gt_cuda_xent_slice_stats,
            .xent_slice_finish = gt_cuda_xent_slice_finish,
            .softmax_xent_slice_backward = gt_cuda_softmax_xent_slice_backward,
        },
    .optimizer =
        {
            .adamw_update = gt_cuda_adamw_update,
            .adamw_update_bf16 = gt_cuda_adamw_update_bf16,
            .sgd_update = gt_cuda_sgd_update,
        },
    .vector =
        {
            .sum_squares = gt_cuda_sum_squares,
            .scale = gt_cuda_scale,
            .f32_to_bf16 = gt_cuda_f32_to_bf16,
            .bf16_to_f32 = gt_cuda_bf16_to_f32,
        },
    .destroy = gt_cuda_destroy,
};
