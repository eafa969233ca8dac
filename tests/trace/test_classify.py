"""Kernel and op names as they appear in real PyTorch/CUDA traces -> trainsim categories."""
from __future__ import annotations

import pytest

from formats.kernel_classes import classify_cpu_op, classify_kernel, group_from_description

KERNELS = [
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm"),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)", "gemm"),
    ("volta_sgemm_128x64_tn", "gemm"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false>(Flash_fwd_params)", "attention"),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, false, true, false, false, true>(Flash_bwd_params)", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t>, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", "norm"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(float const*, float const*, float const*, float const*, float const*, float*, int)", "norm"),
    ("void cuApplyLayerNorm<c10::BFloat16, float, c10::BFloat16>(c10::BFloat16*, float*, float*, c10::BFloat16 const*, int, int, float, c10::BFloat16 const*, c10::BFloat16 const*)", "norm"),
    ("void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<float, float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 4096u, 1u, 4u, 1u, 16u, 32u, 4u> >(transformer_engine::normalization::FwdParams)", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)", "elementwise"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", "loss"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)", "loss"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, ...)", "embedding"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int)", "embedding"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, ...>", "optimizer"),
    ("Memcpy HtoD (Pageable -> Device)", "other"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel", "elementwise"),
]

COLLECTIVES = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "allreduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "allgather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reducescatter"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "sendrecv"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "broadcast"),
]


@pytest.mark.parametrize("name,want", KERNELS)
def test_kernels(name, want):
    assert classify_kernel(name).category == want


@pytest.mark.parametrize("name,want", COLLECTIVES)
def test_nccl_kernels(name, want):
    c = classify_kernel(name)
    assert c.category == "comm" and c.coll.value == want


@pytest.mark.parametrize("name,want", [
    ("aten::linear", "gemm"), ("aten::addmm", "gemm"), ("aten::bmm", "gemm"), ("AddmmBackward0", "gemm"),
    ("MmBackward0", "gemm"), ("aten::scaled_dot_product_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("ScaledDotProductFlashAttentionForCpuBackward0", "attention"),
    ("ScaledDotProductEfficientAttentionBackward0", "attention"),
    ("aten::layer_norm", "norm"), ("aten::rms_norm", "norm"), ("NativeLayerNormBackward0", "norm"),
    ("aten::embedding", "embedding"), ("EmbeddingBackward0", "embedding"),
    ("aten::cross_entropy_loss", "loss"), ("NllLossBackward0", "loss"), ("LogSoftmaxBackward0", "loss"),
    ("aten::gelu", "elementwise"), ("GeluBackward0", "elementwise"), ("aten::add", "elementwise"),
    ("aten::_fused_adam_", "optimizer"), ("aten::_foreach_lerp_", "optimizer"),
    ("aten::view", "other"), ("aten::copy_", "other"), ("aten::transpose", "other"),
    ("torch::autograd::AccumulateGrad", "other"),
])
def test_cpu_ops(name, want):
    assert classify_cpu_op(name).category == want


@pytest.mark.parametrize("name,want", [
    ("nccl:all_reduce", "allreduce"), ("c10d::allgather_", "allgather"), ("nccl:_reduce_scatter_base", "reducescatter"),
    ("nccl:all_to_all", "alltoall"), ("nccl:send", "sendrecv"), ("c10d::broadcast_", "broadcast"),
])
def test_cpu_comm_ops(name, want):
    c = classify_cpu_op(name)
    assert c.category == "comm" and c.coll.value == want


@pytest.mark.parametrize("desc,group", [
    ("TENSOR_MODEL_PARALLEL_GROUP", "tp"), ("DATA_PARALLEL_GROUP", "dp"), ("PIPELINE_MODEL_PARALLEL_GROUP", "pp"),
    ("EXPERT_MODEL_PARALLEL_GROUP", "ep"), ("CONTEXT_PARALLEL_GROUP", "cp"), ("tp_group", "tp"),
    ("dp_group", "dp"), ("ep_group", "ep"), ("EXPERT_DATA_PARALLEL_GROUP", "edp"), ("mystery", ""),
])
def test_group_descriptions(desc, group):
    assert group_from_description(desc) == group
