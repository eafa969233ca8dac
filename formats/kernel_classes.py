"""Name rules that map profiler op and kernel names onto trainsim's op kinds.

WHY a table of rules: a real trace names what ran (``aten::addmm``,
``ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn``,
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``), while trainsim's workload names what the
model does (gemm, attention, norm, ...). The diff and the calibration import can only
line the two up after this translation. The rules are ordered: the first match wins, so
specific names (flash attention, layer-norm kernels) come before generic ones
(``elementwise``, ``gemm``).

Two vocabularies:
- CPU ops (``aten::*`` and autograd nodes ``*Backward0``): on a CPU-only trace there are
  no kernels, so the outermost aten op that does the work is classified, and its children
  are not visited again.
- CUDA kernel names: cuBLAS/CUTLASS GEMMs, flash/cuDNN/FMHA attention, PyTorch's
  elementwise and reduction templates, layer-norm kernels, NCCL device kernels.
Anything that matches no rule is ``other`` (copies, fills, views, framework overhead).
"""
from __future__ import annotations

import re
from functools import lru_cache

from workload_gen.core.record import record
from workload_gen.core.records import CollKind, OpKind

OTHER = "other"
"""Category of an op no rule matches."""
COMM = "comm"
"""Category of a collective (its CollKind is in ``Classification.coll``)."""


@record
class Classification:
    category: str
    """An OpKind value, ``comm`` or ``other``."""
    coll: CollKind | None = None
    """For ``comm``: which collective."""

    @property
    def kind(self) -> OpKind | None:
        return OpKind(self.category) if self.category in _KIND_VALUES else None


_KIND_VALUES = frozenset(k.value for k in OpKind)

# --- collectives (both vocabularies) -----------------------------------------------
# NCCL device kernels: ncclDevKernel_AllReduce_Sum_bf16_RING_LL (NCCL >= 2.19),
# ncclKernel_AllGather_RING_LL_Sum_int8_t (older), ncclDevKernel_SendRecv,
# ncclDevKernel_ReduceScatter_Sum_f32_RING_LL, ncclDevKernel_Broadcast_RING_LL.
# CPU side: c10d::allreduce_, nccl:all_reduce, gloo:all_gather, record_param_comms.
_COLL_RULES: tuple[tuple[re.Pattern[str], CollKind], ...] = tuple(
    (re.compile(p, re.I), k) for p, k in (
        (r"all_?reduce|allreduce", CollKind.ALL_REDUCE),
        (r"reduce_?scatter|_reduce_scatter_base", CollKind.REDUCE_SCATTER),
        (r"all_?gather|_allgather_base", CollKind.ALL_GATHER),
        (r"all_?to_?all|alltoall", CollKind.ALL_TO_ALL),
        (r"broadcast", CollKind.BROADCAST),
        (r"send_?recv|sendrecv|\bsend\b|\brecv\b|nccl:send|nccl:recv|c10d::send|c10d::recv_", CollKind.SEND_RECV),
    )
)
_COMM_MARK = re.compile(r"^nccl|^c10d::|^nccl:|^gloo:|^record_param_comms", re.I)


def classify_collective(name: str) -> CollKind | None:
    """The collective a name refers to, or None; only for names that look like comm."""
    if not _COMM_MARK.search(name):
        return None
    for pat, kind in _COLL_RULES:
        if pat.search(name):
            return kind
    return None


# --- CPU (aten) ops ---------------------------------------------------------------
_CPU_RULES: tuple[tuple[re.Pattern[str], OpKind], ...] = tuple(
    (re.compile(p), k) for p, k in (
        (r"^aten::(_fused_adam|_fused_adamw|_foreach_)|^Optimizer\.step", OpKind.OPTIMIZER),
        (r"scaled_dot_product|flash_attention|efficient_attention|_cudnn_attention|^ScaledDotProduct", OpKind.ATTENTION),
        (r"^aten::(linear|addmm|mm|bmm|matmul|baddbmm|addbmm|_addmm_activation)$"
         r"|^(Addmm|Mm|Bmm|Baddbmm|Matmul|Linear)Backward\d*$", OpKind.GEMM),
        (r"^aten::(layer_norm|native_layer_norm|rms_norm|_fused_rms_norm|group_norm|native_group_norm)$"
         r"|^aten::native_layer_norm_backward$|^(NativeLayerNorm|LayerNorm|RmsNorm|FusedRmsNorm|NativeGroupNorm)Backward\d*$",
         OpKind.NORM),
        (r"^aten::(embedding|embedding_backward|embedding_dense_backward|index_select)$|^EmbeddingBackward\d*$",
         OpKind.EMBEDDING),
        (r"^aten::(cross_entropy_loss|log_softmax|_log_softmax|nll_loss|nll_loss_nd|nll_loss2d|_log_softmax_backward_data"
         r"|nll_loss_backward)$|^(NllLoss|NllLoss2D|LogSoftmax)Backward\d*$", OpKind.LOSS),
        (r"rotary|rope", OpKind.ROPE),
        (r"^aten::(gelu|gelu_backward|silu|silu_backward|relu|add|add_|mul|mul_|sub|div|dropout|native_dropout|"
         r"native_dropout_backward|cat|tanh|sigmoid|softmax|_softmax|where|masked_fill)$"
         r"|^(Gelu|Silu|Relu|Add|Mul|Sub|Div|NativeDropout|Cat|Split|SplitWithSizes|Tanh|Sigmoid)Backward\d*$",
         OpKind.ELEMENTWISE),
    )
)


_NAMES_CACHED = 4096
"""Distinct names whose class is kept: a trace repeats a few hundred names tens of thousands
of times, and trying the rules' patterns in turn took a tenth of the Kineto reader's time."""


@lru_cache(maxsize=_NAMES_CACHED)
def classify_cpu_op(name: str) -> Classification:
    """Classify a CPU-side op (aten op, autograd node, or record_function range); cached per
    name (:data:`_NAMES_CACHED`)."""
    coll = classify_collective(name)
    if coll is not None:
        return Classification(COMM, coll)
    for pat, kind in _CPU_RULES:
        if pat.search(name):
            return Classification(kind.value)
    return Classification(OTHER)


# --- CUDA kernels -------------------------------------------------------------------
_GPU_RULES: tuple[tuple[re.Pattern[str], OpKind], ...] = tuple(
    (re.compile(p, re.I), k) for p, k in (
        # multi_tensor_apply drives torch's foreach/fused Adam; apex/TE: multi_tensor_adam.
        (r"multi_tensor_apply|fused_adam|multi_tensor_adam|adam_kernel|FusedAdam", OpKind.OPTIMIZER),
        # flash-attn 2 (flash_fwd_kernel, flash_bwd_dq_dk_dv_loop...), PyTorch's copy
        # (pytorch_flash::flash_fwd_kernel), mem-efficient (fmha_cutlassF/B), cuDNN SDPA
        # (cudnn_generated_fort_native_sdpa...), FA3 / Hopper FMHA (sm90 ... fmha).
        (r"flash_fwd|flash_bwd|flash::|pytorch_flash|fmha|_sdpa|sdpa_|attention|attn_fwd|attn_bwd", OpKind.ATTENTION),
        (r"layer_?norm|layernorm|rms_?norm|rmsnorm|cuApplyLayerNorm|cuComputeGradInput|cuComputePartGradGammaBeta"
         r"|cuComputeGradGammaBeta|ln_fwd|ln_bwd|rmsnorm_fwd|rmsnorm_bwd", OpKind.NORM),
        (r"rotary|rope_", OpKind.ROPE),
        (r"softmax.*cross|cross_?entropy|nll_loss|cunn_SoftMax|log_softmax", OpKind.LOSS),
        (r"embedding|indexSelect|index_select|embedding_backward|krn_partial_segment|compute_grad_weight", OpKind.EMBEDDING),
        (r"grouped_?gemm|GroupedGemm|group_gemm", OpKind.GROUPED_GEMM),
        (r"topk|router|moe_gate", OpKind.ROUTER),
        (r"permute_kernel|unpermute|moe_permute|moe_unpermute", OpKind.PERMUTE),
        # cuBLAS (ampere_/sm80_/sm90_xmma_gemm, cutlass_*gemm, nvjet_* on Hopper, Kernel2 of cublasLt),
        # plain gemv and batched gemm.
        (r"gemm|gemv|cublas|cutlass|nvjet|xmma|^Kernel2$|s16816|s1688|h16816|wgmma", OpKind.GEMM),
        (r"elementwise|vectorized|unrolled|gelu|silu|swiglu|dropout|bias_|add_kernel|mul_kernel|"
         r"CatArrayBatchedCopy|reduce_kernel|fill_kernel|tanh|sigmoid", OpKind.ELEMENTWISE),
    )
)


@lru_cache(maxsize=_NAMES_CACHED)
def classify_kernel(name: str) -> Classification:
    """Classify a GPU kernel by its (possibly demangled, templated) name; cached per name."""
    if name.startswith("nccl"):
        for pat, kind in _COLL_RULES:
            if pat.search(name):
                return Classification(COMM, kind)
        return Classification(COMM, CollKind.SEND_RECV if "SendRecv" in name else CollKind.ALL_REDUCE)
    if name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
        return Classification(OTHER)
    for pat, kind in _GPU_RULES:
        if pat.search(name):
            return Classification(kind.value)
    return Classification(OTHER)


_GROUP_WORDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), g) for p, g in (
        (r"expert.?tensor|\betp\b", "etp"),
        (r"expert.?data|\bedp\b|dp_ep|data_modulo_expert", "edp"),
        (r"expert|\bep\b", "ep"),
        (r"pipeline|\bpp\b", "pp"),
        (r"context|\bcp\b", "cp"),
        (r"tensor|\btp\b|\bmp\b|model_parallel", "tp"),
        (r"embd|embedding|\bemb\b", "emb"),
        (r"data|\bdp\b|default_pg|world", "dp"),
    )
)


def group_from_description(desc: str) -> str:
    """Parallel group from a process-group description or AICB group name ('' if unknown).

    Megatron names its groups (``TENSOR_MODEL_PARALLEL_GROUP``, ``DATA_PARALLEL_GROUP``,
    ...) and torch records them as ``Process Group Description``; AICB logs use
    ``CommGroup.tp_group``.
    """
    for pat, group in _GROUP_WORDS:
        if pat.search(desc.replace("_", " ")) or pat.search(desc):
            return group
    return ""
