"""Peak memory of one rank per pipeline stage (bytes), part by part.

Static state, per parameter held by the rank (``StageProgram.params``, already sharded
by TP/EP/PP):

- weights: ``ParallelConfig.param_bytes`` (2 for bf16/fp16/fp8 training, which keeps bf16
  weights; 4 for fp32). Under fp8, Transformer Engine also keeps, for every linear weight
  of the transformer layers (attention, MLP, experts; not the embedding or the output
  layer, which Megatron runs in bf16), an fp8 copy and its fp8 transpose, 2 bytes per
  parameter, cast on the first micro-batch of the step and cached for the others
  (TE ``module/base.py`` ``get_fp8_workspace``: ``data`` and ``data_transpose`` uint8
  tensors cached under ``cache_name="weight"`` when the caller passes
  ``is_first_microbatch``, as Megatron-Core's TE wrappers do unless
  ``disable_parameter_transpose_cache``; v1.11, same in 2.x). On Blackwell (compute capability 10.x)
  cuBLAS runs FP8 GEMMs in every layout, so a per-tensor fp8 weight is its data alone, 1 byte
  (:func:`fp8_weight_copy_bytes`). MXFP8 adds one E8M0 scale per 32 values to
  each copy (TE docs, "MXFP8"), see :data:`FP8_WEIGHT_COPY_BYTES`;
- gradients: ``ParallelConfig.grad_bytes``, the main-grad buffer's dtype, the same bytes
  the workload's DP reduction moves: 4 (fp32) when gradients are accumulated and reduced
  in fp32 (Megatron-LM's default for bf16, ``--accumulate-allreduce-grads-in-fp32``), 2
  for fp16 training and for bf16 with that turned off (Megatron-Core's DDP allocates the
  grad buffer in the parameter dtype then). The buffer is full-size with both optimizers:
  Megatron's distributed optimizer reduce-scatters inside it; NeMo's
  ``distributed_fused_adam`` (Apex ``DistributedFusedAdam``) runs with
  ``contiguous_grad_buffer=True`` (NeMo's default, required with ``megatron_amp_O2``:
  ``MegatronBaseModel.setup_optimization``; the dgxc-benchmarking Llama 3.1 YAMLs set it),
  one persistent buffer of every bucket in ``grad_sync_dtype`` (Apex
  ``_init_grad_buffer``). Its reduce-scatter outputs (``sync_grads_shard``, P/N elements)
  are allocated when the last micro-batch's backward syncs each bucket and freed by
  ``zero_grad``, so they never coincide with the activation peak and are not counted.
  (Without the contiguous buffer the buckets are still full-size through gradient
  accumulation: Apex ``_grad_copy`` allocates them and only ``_finish_bucket_grad_sync``
  frees them, after the last micro-batch.)
- optimizer states, sharded over dp*cp for dense parameters and over the expert-DP group
  for expert parameters when ``distributed_optimizer`` (both optimizers shard over the
  DP group with CP: NeMo passes ``get_data_parallel_group(with_context_parallel=True)``),
  bytes per parameter from :func:`workload_gen.core.optimizer_state.optimizer_state_bytes`
  (its docstring has the sources): Megatron's Adam keeps the fp32 master copy + m + v = 12
  (8 for fp32 training, whose weights are the master copy); NeMo's
  ``distributed_fused_adam`` with bf16 weights stores only the 16 low bits of the fp32
  master (Apex ``param_remainders_shard`` int16 + ``exp_avg_shard`` + ``exp_avg_sq_shard``
  fp32), 2 + 4 + 4 = 10 bytes; fp16 weights keep the fp32 master (12), fp32 weights none (8).
  Megatron's precision-aware optimizer (Transformer Engine's FusedAdam) keeps the same
  16-bit remainder with bf16 weights and the moments in their dtypes: 10 bytes with fp32
  moments, 6 with bf16 ones, 8 under fp8 current/MX scaling with bf16 moments (Megatron's
  own fp32 master); ``--main-grads-dtype bf16`` makes the grad buffer bf16 (``grad_bytes``).

Activations per micro-batch follow Korthikanti et al. (arXiv 2205.05198, section 4):
for a GPT layer, s*b*h*(34 + 5*a*s/h) bytes, split into the tensors each op saves for
its backward (see :func:`layer_activation_bytes`), which makes the adaptations direct:
TP shards the parts inside attention/MLP (10 + 24/t without SP), SP shards the rest too
(all / t), GQA narrows K and V, SwiGLU stores the doubled FC1 output, MoE stores the
routed tokens (top-k copies) through the expert MLP, CP divides the sequence. With
selective recompute the core-attention part (5*a*s/h) is dropped; with full recompute
a layer keeps only its input (2*s*b*h, /t with SP) plus, while it is recomputed, one
group of layers' full activations.

Transformer Engine under fp8 saves the fp8 copy of each GEMM input instead of the bf16
one (TE v1.11 ``Linear``/``LayerNormLinear``/``LayerNormMLP``/``GroupedLinear``
``save_for_backward``: ``inputmat`` or ``inputmat_t`` after ``cast_to_fp8``, ``ln_out``
allocated as uint8, ``gelu_out`` cast by the activation): 1 byte for the QKV and FC1
inputs (norm outputs), the FC2 input (activation output) and the expert GEMM inputs. The
norm inputs and the FC1 output (the activation's input) stay bf16. The projection saves
an fp8 copy of the attention output while the fused attention kernel keeps its own bf16
output for its backward (FlashAttention and cuDNN save q, k, v, out, lse), so under fp8
with flash attention that tensor costs 2 + 1 bytes; the bf16 part is inside core
attention and selective recompute drops it.

MoE layers (Megatron-Core alltoall dispatcher): each rank routes its T/t tokens (SP)
k times, so it sends T*k/t token copies and, on average, receives as many; the memory
answer is the busiest EP rank's, which receives
:func:`workload_gen.core.moe_routing.rank_load_factor` times the mean (forced balance: the
statistics of uniform top-k, about 1.01 at 4096 tokens; learned routing: a cited prior,
1.23, or the user's ``moe_load_imbalance``). With expert TP the received copies are
all-gathered over etp, so factor*T*k*etp/t copies go through this rank's expert GEMMs
(saved: permuted input, FC1 output, FC2 input). The routing probabilities are applied
inside the expert MLP (experts.py ``bias_act_func``: ``weighted_bias_swiglu_impl`` saves the
FC1 output it already counts), so the expert output that comes back (reduce-scattered over
etp, all-to-all) is only restored to token order: ``unpermute`` gets no ``probs`` from any
dispatcher (token_dispatcher.py at d98e8a64 and at 23e00ed, the B200 runs' version) and its
scatter-add keeps nothing for backward. With an expert
capacity (``--moe-expert-capacity-factor``, padded or not) the copies are what the
capacity keeps or pads to (:func:`workload_gen.core.moe_capacity.routed_copies`), in the
saved tensors and the dispatch buffers alike.

Context parallelism (TE's ``AttnFuncWithCPAndKVP2P`` / ``...KVAllGather`` /
``...QKVOA2A``, v1.11 and 2.11): p2p and a2a save q, the last K/V chunk (p2p) or the
head-sharded K/V (a2a), the output and the fp32 lse: the same bytes as without CP for the
local s/cp tokens. all_gather also saves each step's output (``*out_per_step``), a second
copy of the attention output. The K/V exchange buffers are transients (below).

Attention kernel: ``attention="flash"`` (Megatron-Core with Transformer Engine uses
fused/flash attention, which saves the fp32 softmax statistics, 4*a*s*b bytes, instead
of the a*s^2 probabilities) or ``"unfused"`` (the paper's 5*a*s^2*b); the default is the
workload's ``ParallelConfig.attention_backend``. ``dropout`` adds the 1-byte masks of
attention/hidden dropout (the paper's GPT-3 setup); off by default, as Llama-style
training runs with dropout 0 and ATen skips the mask then.

Micro-batches in flight are counted by walking the stage's pipeline schedule (forward
passes add the chunk's activations, backward passes free them): stage s of 1F1B holds
min(pp - s, m) micro-batches; for interleaving this gives Megatron's factor
(1 + (pp-1)/(pp*vpp)) * pp on the first stage.

Temporary = persistent workspaces + the largest per-op transient buffer.

The MoE dispatcher's persistent buffers (:func:`dispatcher_workspace_bytes`), on the stages
that hold an MoE layer: DeepEP's NVLink and RDMA buffers, sized as Megatron's
``fused_a2a.get_buffer`` asks DeepEP (:func:`deepep_buffer_bytes`: about 320 MiB at EP 8
and 680 MiB at EP 64 for h = 7168); HybridEP's, sized for every token of the group landing
on one rank (:func:`hybridep_buffer_bytes`: T*ep rows of h bf16 values, 3.6 GiB at EP 64,
plus 1.2 GiB between nodes); the allgather dispatcher's gathered tokens in Megatron's global
memory buffer. DeepEP's and HybridEP's are allocated outside PyTorch's allocator, like the
userbuffers, and counted so that the peak is what must fit.

Workspaces (:func:`workspace_bytes`), allocated once and kept: PyTorch's cuBLAS
workspace for the GEMMs it runs itself (output layer, router), 32 MiB on sm90 and newer
(``CUBLAS_WORKSPACE_CONFIG`` default ``:4096:8``; ``:4096:2:16:8`` = 8 MiB + 128 KiB
before: ATen ``CublasHandlePool.cpp``), one per stream; Transformer Engine's cuBLAS
workspace, 32 MiB on sm90+ and 4 MiB before (TE ``get_cublas_workspace_size_bytes``),
plus 3 more for the userbuffers GEMM streams with ``tp_comm_overlap``
(``_NUM_MAX_UB_STREAMS``) and 4 more for grouped GEMMs in MoE models
(``tex._num_cublas_streams``; TE 2.x keeps these as separate tensors); and with
``tp_comm_overlap`` the userbuffers themselves: NeMo calls ``te.initialize_ub`` with
shape [seq * micro_batch / cp, hidden] and TE allocates one buffer of that shape per
overlapped GEMM: 6 all-gather buffers (qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop,
fc1_dgrad, fc2_dgrad; uint8 under fp8) and 4 reduce-scatter/wgrad buffers (proj_fprop,
fc2_fprop, qkv_wgrad, fc1_wgrad; bf16) (TE v1.11 ``initialize_ub``; TE 2.x adds two
"external" wgrad buffers, not counted). Userbuffers are allocated by TE itself
(``register_user_buffer_collective``: cuMem/cudaMalloc), outside PyTorch's caching
allocator, so ``torch.cuda.memory_allocated`` does not show them though they occupy the
GPU; they are counted here so that the peak is what must fit.

Transients (:func:`_temporary`): the loss (bf16 logits + their fp32 copy,
(2 + 4) * tokens * vocab/t), the SP all-gathered GEMM input (2*s*b*h; 1 byte per value
under fp8, where TE gathers the cast copy), the gradients inside a dense MLP's backward
(FC2 input and FC1 output, 2*s*b*f*(w+1)/t with w = 2 for SwiGLU) or an expert MLP's
(the same over the busiest rank's routed copies), the MoE dispatcher's buffers
(:func:`dispatcher_transient_bytes`: alltoall's permuted send buffer and all-to-all receive
buffer, 2*T*k*h/t * (1 + factor), plus the expert-TP all-gather output; allgather's
unpermuted output over the T*etp*ep/t gathered rows; DeepEP's received tokens, one row per
distinct (token, rank) pair), and the CP exchange buffers: p2p keeps every received K/V chunk and every step's output
until its forward ends (cp * (K/V chunk + output)), and its backward holds two K/V and
two dK/dV buffers plus dq; all_gather holds the gathered K/V and, in backward, the
full-length dK/dV (2 * cp * K/V chunk); a2a holds the exchanged q/k/v and their
reordered copies (2 * (q + K/V)).

Allocated is what live tensors take (``torch.cuda.max_memory_allocated``); reserved is
what PyTorch's caching allocator holds from CUDA (``torch.cuda.max_memory_reserved``):
allocated plus the allocator's rounding and fragmentation. Every request is rounded up to
512 bytes; requests up to 1 MiB are carved out of 2 MiB segments, larger ones are
rounded up to 2 MiB and served from cached free blocks (split, and the remainder kept) or
new segments (20 MiB for requests below 10 MiB), so freed blocks that are too small for
a later request stay reserved (PyTorch ``CUDACachingAllocator`` constants kMinBlockSize,
kSmallSize, kSmallBuffer, kLargeBuffer, kMinLargeAlloc, kRoundLarge; docs "CUDA
semantics: memory management"). Reserved = allocated * 1.06: Megatron runs on B200
(../shared/data/real/b200_megatron_measured.csv, SimuMax, the only public runs here
with both figures) show reserved/allocated between 1.028 and 1.069 (mean 1.046); 1.06
sits near the top of that range on purpose, as a fit check should not pass on the
fragmentation allowance. Memory outside PyTorch's allocator besides the userbuffers
(CUDA context, NCCL buffers) is not modelled.
"""
from __future__ import annotations

from typing import Literal

from engine.schedules import SCHEDULES
from workload_gen.costs import NVFP4_GEMM_IN_BYTES
from workload_gen.core.gpu_specs import find_gpu
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.moe_capacity import routed_copies
from workload_gen.core.moe_dispatch import rank_hit_probability
from workload_gen.core.moe_routing import rank_load_factor
from workload_gen.core.optimizer_state import optimizer_state_bytes, precision_aware_dtypes
from workload_gen.core.parallel_config import PER_TENSOR_FP8, QUANTIZED_DTYPES, ParallelConfig
from workload_gen.core.record import record
from workload_gen.core.records import OUTPUT_LAYER_OP, ChunkProgram, Workload
from workload_gen.core.run_result import MemoryEstimate
from workload_gen.core.units import KiB, MiB

RESERVED_FACTOR = 1.06
"""reserved / allocated: the caching allocator's rounding and fragmentation (B200 runs:
1.028-1.069, mean 1.046; see the module docstring)."""

TORCH_CUBLAS_WORKSPACE = {True: 4096 * KiB * 8, False: 4096 * KiB * 2 + 16 * KiB * 8}
"""PyTorch's cuBLAS workspace per (handle, stream), by "sm90 or newer": ATen
CublasHandlePool.cpp ``parseChosenWorkspaceSize`` defaults (:4096:8 and :4096:2:16:8)."""
TE_CUBLAS_WORKSPACE = {True: 32 * MiB, False: 4 * MiB}
"""Transformer Engine's cuBLAS workspace, by "sm90 or newer" (TE
``get_cublas_workspace_size_bytes``: 33_554_432 / 4_194_304 bytes)."""
TE_UB_STREAMS = 3
"""TE ``_NUM_MAX_UB_STREAMS``: extra cuBLAS workspaces for userbuffers GEMM overlap."""
TE_GROUPED_GEMM_STREAMS = 4
"""TE ``num_streams`` (gemm.h) / ``tex._num_cublas_streams``: workspaces for grouped GEMM."""
UB_ALL_GATHER_BUFFERS = 6
"""qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop, fc1_dgrad, fc2_dgrad (TE ``initialize_ub``)."""
UB_REDUCE_SCATTER_BUFFERS = 4
"""proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad (TE ``initialize_ub``)."""
FP8_WEIGHT_COPY_BYTES = {
    "delayed": 2.0, "tensorwise": 2.0,
    "mxfp8": 2 * (1 + 1 / 32),  # row- and column-wise copies, one E8M0 scale per 32 values each
    "blockwise": 2 * (1 + 4 / (128 * 128)),  # 128x128 weight blocks with an fp32 scale each
}
"""Bytes per linear-layer parameter of TE's cached fp8 weight (data + transpose) where FP8 GEMMs
take only the TN layout (Hopper); :func:`fp8_weight_copy_bytes` gives a GPU's."""


def fp8_weight_copy_bytes(recipe: str, gpu: str) -> float:
    """Bytes per linear-layer parameter of a fp8 weight as TE keeps it for ``recipe`` on ``gpu``:
    :data:`FP8_WEIGHT_COPY_BYTES`, except a per-tensor recipe's 1 byte (the data, no transpose)
    where FP8 GEMMs take any layout (GpuSpec.fp8_gemm_any_layout). MXFP8 and blockwise keep both
    directions everywhere: their block scales run along one axis of each copy."""
    spec = find_gpu(gpu)  # unset or a user's own GPU: Hopper's transpose kept, the larger estimate
    if recipe in PER_TENSOR_FP8 and spec is not None and spec.fp8_gemm_any_layout:
        return 1.0
    return FP8_WEIGHT_COPY_BYTES[recipe]


NVFP4_WEIGHT_COPY_BYTES = 2 * NVFP4_GEMM_IN_BYTES
"""Bytes per linear-layer parameter of TE's NVFP4 weight: row-wise and column-wise e2m1 data
(0.5 B each) with one E4M3 scale per 16 values each (TE docs, NVFP4; the weights' 16x16
blocks make the two copies numerically equal, not one): 2 * (0.5 + 1/16) = 1.125 B."""


def saved_gemm_input_bytes(par: ParallelConfig, e: int) -> float:
    """Bytes per element of a linear layer's input as Transformer Engine saves it for the
    backward: the fp8 copy (1 B), the NVFP4 column-wise copy the wgrad GEMM reads (0.5 B
    and an E4M3 scale per 16), else the activation's ``e``. Layers kept in bf16
    (first_last_layers_bf16) are counted as the others: the estimate is per layer kind."""
    if par.dtype == "fp4":
        return NVFP4_GEMM_IN_BYTES
    return 1 if par.dtype == "fp8" else e


def fp8_weight_cache_bytes(workload: Workload, stage: int) -> float:
    """Transformer Engine's cached fp8 or NVFP4 weight copies on one rank of ``stage`` (0
    unless fp8/fp4, or when the weights are themselves quantized: --fp8/fp4-param-gather),
    over the weights it quantizes (layers kept in bf16 have none)."""
    par = workload.parallel
    if par.dtype not in QUANTIZED_DTYPES or par.fp8_param_gather or par.fp4_param_gather:
        return 0.0
    from workload_gen.builder import quantized_layer_params  # loaded only for fp8/fp4 workloads, which have a model

    per = NVFP4_WEIGHT_COPY_BYTES if par.dtype == "fp4" else fp8_weight_copy_bytes(par.fp8_recipe, workload.gpu)
    return per * quantized_layer_params(workload.model, par, stage)


def weight_bytes(workload: Workload, stage: int) -> float:
    """The model weights one rank of ``stage`` holds, with TE's fp8 copies.

    With ``--fp8-param-gather`` the TE linear weights *are* fp8 tensors and no 16-bit copy is
    kept (Megatron-Core ``fp8_model_init`` via ``get_fp8_context(..., is_init=True)``,
    fp8_utils.py at d98e8a64): per such element :data:`FP8_WEIGHT_COPY_BYTES` replaces
    ``param_bytes`` + the cache. Delayed/tensorwise ``Float8Tensor``: its data, remapped into
    the DDP's uint8 ``param_data`` (param_and_grad_buffer.py ``modify_underlying_storage``), and
    the transpose TE's ``post_all_gather_processing`` keeps before Blackwell, 1 + 1 B (1 B on
    Blackwell: :func:`fp8_weight_copy_bytes`). MXFP8
    with ``--reuse-grad-buf-for-mxfp8-param-ag``: the ``MXFP8Tensor``'s own row- and
    column-wise data with one E8M0 scale per 32 values each, 2 * (1 + 1/32) B; its all-gather
    buffer is a bf16 view of the gradient buffer (``shared_buffer``), nothing more. NVFP4 with
    ``--fp4-param-gather``: the packed row-wise e2m1 bytes in the DDP's buffer and TE's
    column-wise copy, each with its E4M3 scales, :data:`NVFP4_WEIGHT_COPY_BYTES`. The other
    parameters (norms, biases, router, embeddings, output layer) stay ``param_bytes``."""
    par = workload.parallel
    prog = workload.stages[stage]
    if not (par.fp8_param_gather or par.fp4_param_gather):
        return par.param_bytes * prog.params + fp8_weight_cache_bytes(workload, stage)
    from workload_gen.core.params import stage_fp8_params  # fp8 workloads have a model

    fp8 = sum(stage_fp8_params(workload.model, par, stage))
    per = NVFP4_WEIGHT_COPY_BYTES if par.fp4_param_gather else fp8_weight_copy_bytes(par.fp8_recipe, workload.gpu)
    return par.param_bytes * (prog.params - fp8) + per * fp8


def _sm90_or_newer(gpu: str) -> bool:
    """Workspace sizes change at Hopper; an unknown or unset GPU counts as Hopper or newer."""
    spec = find_gpu(gpu)
    return spec is None or "fp8" in spec.peak_flops


def userbuffer_bytes(model: ModelConfig, par: ParallelConfig) -> float:
    """Transformer Engine's userbuffers for ``tp_comm_overlap`` (0 without it)."""
    if not par.tp_comm_overlap:
        return 0.0
    e = 4 if par.dtype == "fp32" else 2
    ag = 1 if par.dtype == "fp8" else e
    rows = par.seq_length * par.micro_batch // par.cp
    return rows * model.hidden_size * (UB_ALL_GATHER_BUFFERS * ag + UB_REDUCE_SCATTER_BUFFERS * e)


def workspace_bytes(workload: Workload) -> float:
    """Persistent workspaces of one rank: cuBLAS (PyTorch's and TE's) and userbuffers."""
    model, par = workload.model, workload.parallel
    new = _sm90_or_newer(workload.gpu)
    te = TE_CUBLAS_WORKSPACE[new]
    ws = TORCH_CUBLAS_WORKSPACE[new] + te
    if par.tp_comm_overlap:
        ws += TE_UB_STREAMS * te + userbuffer_bytes(model, par)
    if model.is_moe:
        ws += TE_GROUPED_GEMM_STREAMS * te
    return float(ws)


DEEPEP_NUM_SMS = 20
"""SMs of DeepEP's normal kernels when Megatron sets none: ``_DeepepManager`` calls
``set_deepep_num_sms(config.moe_flex_dispatcher_num_sms or 20)`` (Megatron-LM d98e8a64,
token_dispatcher.py; ``--moe-hybridep-num-sms``/``--moe-deepep-num-sms`` set it, deprecated
aliases of ``moe_flex_dispatcher_num_sms``, transformer_config.py)."""
DEEPEP_NVL_PEERS = 8
"""DeepEP's ``LEGACY_NUM_MAX_NVL_PEERS`` (csrc/kernels/legacy/compiled.cuh, DeepEP dd758caf): a
group larger than 8 is 8 NVLink peers times ``group/8`` RDMA ranks. Also the NVLink domain
taken for HybridEP, which detects it (``detect_accessible_ranks``): 8 on HGX H100/B200 nodes."""
DEEPEP_CONFIGS = {
    # group size: (dispatch (nvl send, nvl recv, rdma send, rdma recv), combine (...)), tokens per chunk
    2: ((24, 256, 6, 128), (10, 256, 6, 128)), 4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)), 16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)), 32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)), 64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)), 128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)), 160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
"""DeepEP's recommended configs, ``Buffer.get_dispatch_config`` / ``get_combine_config``
(deep_ep/buffers/legacy.py, DeepEP dd758caf; the v1 tables of ebfe47e4 differ only in the RDMA
send chunks). Megatron sizes its one buffer from both (fused_a2a.py ``get_buffer``)."""
DEEPEP_MAX_TOPK = 128
DEEPEP_MAX_SCALES = 128
"""``kNumMaxTopK`` / ``kNumMaxScales`` in DeepEP's buffer size hints (csrc/legacy/config.hpp)."""
DEEPEP_SOURCE_META_BYTES = 8
"""``sizeof(SourceMeta)``: two ints (csrc/kernels/legacy/internode.cu)."""
DEEPEP_TOPK_IDX_BYTES = 8
"""``topk_idx_t``: 64-bit by default (``EP_NUM_TOPK_IDX_BITS`` 64, common/compiled.cuh)."""


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def deepep_buffer_bytes(hidden_bytes: int, group: int, num_sms: int = DEEPEP_NUM_SMS) -> tuple[int, int]:
    """(NVLink, RDMA) bytes of the DeepEP ``Buffer`` Megatron allocates once for an EP group of
    ``group`` ranks and tokens of ``hidden_bytes`` bytes (``get_hidden_bytes``: hidden *
    max(element size, 2)), sized as ``fused_a2a.get_buffer`` does: the larger of the dispatch
    and combine configs' ``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``
    (DeepEP csrc/legacy/config.hpp, dd758caf). Per channel (num_sms/2) and peer, a ring of
    ``nvl recv`` (``rdma recv``, x2 send+recv) token slots, each with the token, its source
    meta, 128 top-k indices and weights and 128 scales. The NVLink buffer is cudaMalloc'd, the
    RDMA one comes from NVSHMEM's symmetric heap: both outside PyTorch's allocator, on the GPU.
    A group size DeepEP has no config for takes the next larger one (DeepEP itself asserts)."""
    if group <= 1:
        return 0, 0
    key = min((g for g in DEEPEP_CONFIGS if g >= group), default=max(DEEPEP_CONFIGS))
    nvl_ranks = min(group, DEEPEP_NVL_PEERS)
    rdma_ranks = max(group // DEEPEP_NVL_PEERS, 1)
    channels = num_sms // 2
    slot = (hidden_bytes + DEEPEP_SOURCE_META_BYTES + DEEPEP_MAX_TOPK * (DEEPEP_TOPK_IDX_BYTES + 4)
            + DEEPEP_MAX_SCALES * 4)
    nvl = rdma = 0
    for _nvl_send, nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[key]:
        rdma_recv = _round_up(rdma_recv, rdma_send)  # Config's constructor aligns it
        n = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * nvl_recv * slot
        nvl = max(nvl, _round_up(n, 128))
        if group > DEEPEP_NVL_PEERS:
            r = (channels * rdma_ranks * (DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4
                 + channels * rdma_ranks * rdma_recv * 2 * (slot + 16))  # + one int4 per token
            rdma = max(rdma, _round_up(r, 128))
    return nvl, rdma


def hybridep_buffer_bytes(hidden: int, tokens: int, local_experts: int, group: int,
                          nvl_ranks: int = DEEPEP_NVL_PEERS) -> tuple[int, int]:
    """(NVLink, RDMA) bytes of the ``HybridEPBuffer`` Megatron allocates once (fused_a2a.py
    ``init_hybrid_ep_buffer``: ``max_num_of_tokens_per_rank`` = the rank's tokens, bf16
    tokens: Megatron asserts no fp8 dispatch), as DeepEP's hybrid-ep branch (94a9f8f6)
    allocates it with ``use_shared_buffer=True`` (its default): the intra-node buffers are
    sized for the worst case, every token of the group routed to one rank,
    ``max_num_of_tokens = tokens * ranks_per_node * nodes`` (buffer/intranode.cu): the shared
    token buffer (bf16), the probabilities (fp32, local experts x ranks per node) and the
    fp8 scaling factors (fp32 per 128 values, allocated whatever the dtype); between NVLink
    domains (buffer/internode_doca.cu) the dispatch keeps the rank's tokens, probabilities and
    scales plus (nodes - 1) x tokens of inter-node group tokens, probabilities and scales, and
    the combine two (nodes - 1) x tokens token and probability buffers. Flags and metadata
    (a few KiB) are left out. All cudaMalloc'd outside PyTorch's allocator."""
    if group <= 1:
        return 0, 0
    per_node = min(group, nvl_ranks)
    nodes = max(group // per_node, 1)
    probs_w = local_experts * per_node
    scales_w = hidden // 128
    worst = tokens * per_node * nodes
    nvl = worst * (hidden * 2 + probs_w * 4 + scales_w * 4)
    rdma = 0
    if nodes > 1:
        others = tokens * (nodes - 1)
        rdma = (tokens * (hidden * 2 + local_experts * per_node * nodes * 4 + scales_w * 4)  # attn_input_*
                + others * (hidden * 2 + probs_w * 4 + scales_w * 4)  # dispatch inter-node group
                + 2 * others * (hidden * 2 + probs_w * 4))  # combine: intra-node reduction, inter-node group
    return nvl, rdma




def dispatcher_workspace_bytes(model: ModelConfig, par: ParallelConfig) -> float:
    """Persistent buffers of the MoE token dispatcher on a rank with MoE layers (0 for a dense
    model): the flex dispatcher's DeepEP or HybridEP buffers (allocated on the first dispatch
    and kept, outside PyTorch's allocator), or the allgather dispatcher's gathered tokens,
    which Megatron gathers into its global memory buffer (``gather_from_sequence_parallel_
    region(..., use_global_buffer=True)``: ``get_global_memory_buffer().get_tensor``, kept for
    reuse): tokens * etp * ep rows of the hidden size. The alltoall dispatcher keeps nothing."""
    if not model.is_moe:
        return 0.0
    e = 4 if par.dtype == "fp32" else 2
    h = model.hidden_size
    group = par.expert_tp * par.ep  # Megatron's tp_ep group: flex and allgather span it
    backend = par.flex_backend
    if backend == "deepep":
        sms = par.moe_hybridep_num_sms or DEEPEP_NUM_SMS
        return float(sum(deepep_buffer_bytes(h * max(e, 2), group, sms - sms % 2)))
    if backend == "hybridep":
        return float(sum(hybridep_buffer_bytes(h, par.routed_tokens, model.num_experts // par.ep, group)))
    if par.moe_token_dispatcher == "allgather" and group > 1:
        return float(e * h * par.routed_tokens * group)
    return 0.0


def dispatcher_transient_bytes(model: ModelConfig, par: ParallelConfig) -> float:
    """The largest dispatch/combine buffer of one MoE layer on one rank beyond what the layer
    saves (its expert-GEMM input is a saved activation), at the busiest EP rank's load
    (:func:`workload_gen.core.moe_routing.rank_load_factor`):

    - alltoall (token_dispatcher.py ``MoEAlltoAllTokenDispatcher``): the permuted send buffer
      (the rank's own copies) and the all-to-all receive buffer live together, plus with expert
      TP the all-gather output; the receive buffer's rows are the busiest rank's;
    - allgather: the unpermuted expert output over all gathered rows before its reduce-scatter
      (and, in backward, the gradient of the gathered input), tokens * etp * ep rows;
    - flex/deepep: DeepEP's ``recv_x``, one row per distinct (token, rank) pair received
      (DeepEP sends a token once to each rank that holds one of its experts; ``permute`` then
      makes the per-expert copies), mean ep*etp*tokens * P(rank hit)
      (:func:`workload_gen.core.moe_dispatch.rank_hit_probability`), and its restored twin
      before the combine;
    - flex/hybridep: none (``dispatch_with_permute`` writes the permuted copies straight from
      its own buffers);
    - flex/ncclep: as DeepEP (a permutation after the dispatch, as the step time takes it);
      its own symmetric-memory buffers are not modelled."""
    if not model.is_moe:
        return 0.0
    e = 4 if par.dtype == "fp32" else 2
    h = model.hidden_size
    etp = par.expert_tp
    tokens = par.routed_tokens
    sp_div = par.tp if par.sp else 1
    T = par.seq_length // par.cp * par.micro_batch
    local = _dispatched_copies(model, par, T, sp_div)
    factor = rank_load_factor(model, par, tokens)
    backend = par.flex_backend
    if backend == "hybridep":
        return 0.0
    if backend in ("deepep", "ncclep"):
        hit = rank_hit_probability(model.num_experts, model.moe_router_topk, par.ep,
                                   par.moe_router_num_groups, par.moe_router_group_topk)
        return e * h * tokens * etp * par.ep * hit * factor
    if par.moe_token_dispatcher == "allgather":
        return float(e * h * tokens * etp * par.ep)
    received = local * factor
    return e * h * (local + received + (received * etp if etp > 1 else 0))


@record
class LayerActivation:
    """Bytes one layer saves for backward for one micro-batch on one rank."""

    core_attention: float
    """The part selective recompute drops (softmax probabilities or flash statistics, and
    what the attention kernel keeps beyond its inputs)."""
    rest: float
    input: float
    """The layer input, which full recompute keeps."""
    recomputed: float = 0.0
    """What selective recompute of layernorm, mla_up_proj, moe, moe_act, mlp or shared_experts dropped from ``rest`` and
    re-creates while the layer's backward runs: the largest such piece, which exists once."""

    @property
    def total(self) -> float:
        return self.core_attention + self.rest


def _attention_widths(model: ModelConfig) -> tuple[int, int, int, int, int]:
    """(q, k, v, output, latent) widths of one token, all heads (unsharded)."""
    a = model.num_attention_heads
    if model.multi_latent_attention:
        latent = (model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_pos_emb_head_dim
        return a * model.qk_dim, a * model.qk_dim, a * model.v_dim, a * model.v_dim, latent
    d = model.head_dim
    return a * d, model.kv_heads * d, model.kv_heads * d, a * d, 0


def _dispatched_copies(model: ModelConfig, par: ParallelConfig, tokens: int, sp_div: int) -> float:
    """Token copies one rank sends to the experts (and gets back to combine) for ``tokens``
    tokens sharded over ``sp_div``: tokens*topk/sp_div dropless, else what the expert
    capacity keeps or pads to (:func:`workload_gen.core.moe_capacity.routed_copies`)."""
    if par.moe_expert_capacity_factor is None:
        return tokens * model.moe_router_topk / sp_div
    return routed_copies(tokens // sp_div, model.moe_router_topk, model.num_experts, par.moe_expert_capacity_factor,
                         par.moe_pad_expert_input_to_capacity)


def _received_copies(model: ModelConfig, par: ParallelConfig, tokens: int, sp_div: int) -> float:
    """Token copies the busiest EP rank receives for its experts (before the expert-TP gather):
    what a rank sends times :func:`workload_gen.core.moe_routing.rank_load_factor`."""
    return _dispatched_copies(model, par, tokens, sp_div) * rank_load_factor(model, par, tokens // sp_div)


def layer_activation_bytes(
    model: ModelConfig, par: ParallelConfig, layer: int, *,
    attention: Literal["flash", "unfused"] | None = None, dropout: bool = False,
) -> LayerActivation:
    attention = attention or par.attention_backend
    e = 4 if par.dtype == "fp32" else 2
    g = saved_gemm_input_bytes(par, e)  # a GEMM input as Transformer Engine saves it
    mask = 1 if dropout else 0
    t = par.tp
    s = par.seq_length // par.cp  # tokens of the sequence on this CP rank
    s_kv = par.seq_length if par.cp > 1 else s  # keys each query sees (ring/all-gather CP)
    b = par.micro_batch
    T = s * b
    h = model.hidden_size
    a = model.num_attention_heads
    sp_div = t if par.sp else 1  # SP shards the replicated parts over TP
    # modules selective recompute checkpoints beyond core attention (Megatron --recompute-modules)
    modules = set(par.recompute_modules) if par.recompute == "selective" else set()
    # What those checkpoints drop and re-make in the backward: the attention's pieces are
    # alive together during its backward, the MLP's during its own (which comes first).
    attn_re = mlp_re = 0.0
    q_w, k_w, v_w, o_w, latent = _attention_widths(model)
    # --- attention block (Korthikanti 11sbh + 5as^2b for MHA with dropout) ---------
    ln1_in = e * T * h / sp_div
    qkv_in = g * T * h / sp_div
    qk = e * T * (q_w + k_w) / t
    v = e * T * v_w / t
    proj_in = g * T * o_w / t  # the projection's saved input (its fp8 copy under fp8)
    lat = e * T * latent / sp_div
    if model.multi_latent_attention:
        if "mla_up_proj" in modules:
            attn_re, qk, v = qk + v, 0.0, 0.0  # q, k, v dropped; the up projections re-make them
        if "layernorm" in modules:  # MLA's input norm is its own module: its output is dropped
            attn_re, qkv_in = attn_re + qkv_in, 0.0
    attn_mask = mask * T * h / sp_div
    if attention == "unfused":
        probs = (e + (mask + e if dropout else 0)) * a * s * s_kv * b / t
    else:
        probs = 4 * a * s * b / t  # fp32 log-sum-exp per query and head
        if par.dtype in QUANTIZED_DTYPES:
            probs += e * T * o_w / t  # the kernel's own bf16 output, beside the fp8 copy
        if par.cp > 1 and par.cp_comm == "all_gather":
            probs += e * T * o_w / t  # TE's KV all-gather CP also saves each step's output
    # --- MLP block (19sbh for gelu with ffn = 4h) ---------------------------------
    ln2_in = e * T * h / sp_div
    hid_mask = mask * T * h / sp_div
    width = 2 if model.activation == "swiglu" else 1
    if model.is_moe_layer(layer):
        etp = par.expert_tp
        routed = _received_copies(model, par, T, sp_div) * etp  # through this rank's expert GEMMs (busiest rank)
        f_e = model.expert_ffn / etp
        fc1_in = e * T * h / sp_div  # the pre-MLP norm output, saved bf16 by the router
        mlp = e * T * model.num_experts / sp_div  # router logits
        mlp += g * routed * h  # permuted tokens = expert FC1 input
        mlp += e * routed * f_e * width  # FC1 output
        if "moe_act" in modules:
            # FC2 input: dropped, the activation re-runs (under fp8/fp4 FC2 keeps it bf16:
            # Transformer Engine's save_original_input, experts.py at d98e8a64)
            mlp_re = (e if par.dtype in QUANTIZED_DTYPES else g) * routed * f_e
        else:
            mlp += g * routed * f_e  # FC2 input
        fs = model.moe_shared_expert_intermediate_size
        if fs:
            shared = e * T * fs * width / t + g * T * fs / t
            if par.dtype in QUANTIZED_DTYPES and "layernorm" not in modules:
                # the shared FC1's fp8 copy of its input (with layernorm recompute it keeps the
                # re-made bf16 norm output instead: MoELayer.set_for_recompute_pre_mlp_layernorm)
                shared += saved_gemm_input_bytes(par, e) * T * h / sp_div
            if "shared_experts" in modules:  # checkpointed: only its input (the norm output) stays
                mlp_re = max(mlp_re, shared)  # re-made and freed before the experts' backward
            else:
                mlp += shared
        if "moe" in modules:  # the whole MoE layer checkpointed: only its input (the norm output) stays
            mlp_re, mlp = mlp, 0.0
        if "layernorm" in modules:  # the pre-MLP norm's output, re-made first, alive to the router's backward
            mlp_re, fc1_in = mlp_re + fc1_in, 0.0
    else:
        f = model.dense_ffn if model.is_moe else model.ffn
        fc1_in = g * T * h / sp_div
        mlp = e * T * f * width / t + g * T * f / t  # FC1 output (activation input), FC2 input
        if "mlp" in modules:  # checkpointed MLP (its fused pre-MLP norm included): keeps its input
            mlp_re, fc1_in, mlp = fc1_in + mlp, 0.0, 0.0
    attn_rest = ln1_in + qkv_in + qk + v + proj_in + lat + attn_mask
    mlp_rest = ln2_in + fc1_in + mlp + hid_mask
    symbol = model.layer_symbol(layer)
    layer_in = e * T * h / sp_div
    if symbol == "M":
        return LayerActivation(core_attention=0.0, rest=mamba_activation_bytes(model, par, g, e) + attn_mask,
                               input=layer_in)
    if symbol == "*":  # a hybrid model's attention-only layer
        return LayerActivation(core_attention=probs, rest=attn_rest, input=layer_in, recomputed=attn_re)
    if symbol in ("-", "E"):  # its MLP-only or MoE-only layer
        return LayerActivation(core_attention=0.0, rest=mlp_rest, input=layer_in, recomputed=mlp_re)
    return LayerActivation(core_attention=probs, rest=attn_rest + mlp_rest, input=layer_in,
                           recomputed=max(attn_re, mlp_re))


def mamba_activation_bytes(model: ModelConfig, par: ParallelConfig, g: float, e: int) -> float:
    """What one Mamba layer saves for backward on one rank for one micro-batch (bytes),
    ``g`` the bytes of a saved GEMM input, ``e`` of an activation element. Megatron-Core's
    MambaLayer (mamba_mixer.py _ssm_training @d98e8a64) and mamba_ssm's
    MambaSplitConv1dScanCombinedFn (ctx.save_for_backward): the norm's input and in_proj's
    saved input (TE's LayerNormColumnParallelLinear, as the QKV projection), in_proj's output
    [z, x, B, C, dt] (the scan keeps it whole and re-runs the conv1d in backward), the scan's
    pre-gate output out_x, the gated RMSNorm's input, and out_proj's saved input. The chunk
    states are recomputed in backward, not kept. Unit: bytes."""
    t = par.tp
    sp_div = t if par.sp else 1
    T = par.seq_length // par.cp * par.micro_batch
    h, d = model.hidden_size, model.mamba_d_inner
    in_proj_out = model.mamba_in_proj_width
    return (e * T * h / sp_div + g * T * h / sp_div  # norm input; in_proj input (the norm output)
            + e * T * in_proj_out / t                 # zxBCdt, saved by the scan
            + 2 * e * T * d / t                       # out_x; the gated norm's input
            + g * T * d / t)                          # out_proj's input


def stage_chunk_activation(
    workload: Workload, stage: int, chunk: int, *, attention: str, dropout: bool,
) -> tuple[float, float]:
    """(bytes held per micro-batch in flight, transient bytes while one is recomputed)."""
    model, par = workload.model, workload.parallel
    prog = workload.stages[stage]
    ch = next(c for c in prog.chunks if c.chunk == chunk)
    layers = [layer for layer in ch.layers if 0 <= layer < model.num_layers]
    acts = [layer_activation_bytes(model, par, layer, attention=attention, dropout=dropout) for layer in layers]
    e = 4 if par.dtype == "fp32" else 2
    T = par.seq_length // par.cp * par.micro_batch
    sp_div = par.tp if par.sp else 1
    op_layers = {op.layer for op in ch.forward}
    extra = 0.0
    if -1 in op_layers:  # embedding output
        extra += e * T * model.hidden_size / sp_div
    if model.num_layers in op_layers:  # final norm input and output-layer input
        extra += 2 * e * T * model.hidden_size / sp_div
    if model.mtp_num_layers:
        extra += _mtp_activation(workload, ch, acts, attention=attention, dropout=dropout)
    if par.recompute == "none":
        return sum(a.total for a in acts) + extra, 0.0
    if par.recompute == "selective":
        working = max((a.recomputed for a in acts), default=0.0)  # one checkpoint re-run at a time
        if "core_attn" not in par.recompute_modules:  # e.g. moe_act alone: core attention stays stored
            return sum(a.total for a in acts) + extra, working
        return sum(a.rest for a in acts) + extra, working
    # Full recompute: which layers are recomputed, and the working set of one group.
    n = par.recompute_num_layers or (1 if par.recompute_method == "uniform" else len(acts))
    if par.recompute_method == "uniform":
        groups = [acts[i:i + n] for i in range(0, len(acts), n)]
        kept = sum(g[0].input for g in groups)
        working = max((sum(a.total for a in g) for g in groups), default=0.0)
        return kept + extra, working
    recomputed, stored = acts[:n], acts[n:]
    kept = sum(a.input for a in recomputed) + sum(a.total for a in stored)
    working = max((a.total for a in recomputed), default=0.0)
    return kept + extra, working


def _mtp_activation(workload: Workload, ch: ChunkProgram, acts: list[LayerActivation], *,
                    attention: str, dropout: bool) -> float:
    """What the multi-token-prediction depths built on chunk ``ch`` save (workload_gen.
    layer_ops.mtp_templates): per depth its transformer layer, appended to ``acts`` (the
    main model's last layer kind, recompute applied like any layer's), and returned: the
    enorm input (the shifted tokens' embedding), eh_proj's input (the 2h concatenation, as
    a GEMM input is saved; the hnorm input is the main output layer's input, counted once),
    the MTP final norm's input and, where the head pass runs, the output layer's input.

    Full recompute: uniform checkpoints each depth whole (Megatron's _checkpointed_forward):
    it keeps the checkpoint's inputs (the enorm input, and the hidden states, counted as the
    layer's input), and eh_proj's and the final norm's inputs exist only in the working set
    of its re-run; block does not recompute the MTP, whose tensors are then all held."""
    from workload_gen.layer_ops import MTP_OP_PREFIX  # loaded only for MTP models

    model, par = workload.model, workload.parallel
    L = model.num_layers
    e = 4 if par.dtype == "fp32" else 2
    g = saved_gemm_input_bytes(par, e)
    row = par.seq_length // par.cp * par.micro_batch * model.hidden_size / (par.tp if par.sp else 1)
    depths = {op.layer for op in ch.forward if op.layer > L and op.name == MTP_OP_PREFIX + "eh_proj"}
    heads = {op.layer for op in ch.forward if op.layer > L and op.name == MTP_OP_PREFIX + OUTPUT_LAYER_OP}
    if not depths and not heads:  # a chunk without MTP ops
        return 0.0
    layer = layer_activation_bytes(model, par, L - 1, attention=attention, dropout=dropout)  # type: ignore[arg-type]
    inner = g * 2 * row + e * row  # eh_proj's input, the final norm's input
    if par.recompute == "full" and par.recompute_method == "block":
        return len(depths) * (layer.total + e * row + inner) + len(heads) * e * row
    if par.recompute == "full":
        acts += [LayerActivation(layer.core_attention, layer.rest + inner, layer.input, layer.recomputed)] * len(depths)
        return len(depths) * e * row + len(heads) * e * row
    acts += [layer] * len(depths)
    return len(depths) * (e * row + inner) + len(heads) * e * row


def deferred_wgrad_bytes(workload: Workload, stage: int) -> float:
    """What Megatron's defer_embedding_wgrad_compute keeps on the stage holding the output
    layer until the pipeline flush: per deferred micro-batch, the output layer's input
    (its sequence-parallel shard, s*b*h/t) and the gradient of its output, the vocab-
    parallel logits (s*b*V/t), both in the activation dtype (Megatron-Core's
    embedding_activation_buffer and grad_output_buffer). 0 on the other stages and
    without the option."""
    model, par = workload.model, workload.parallel
    deferred = par.deferred_wgrad_microbatches
    if not deferred:
        return 0.0
    from workload_gen.core.params import padded_vocab  # loaded only when the option is on

    prog = workload.stages[stage]
    if not any(op.layer == model.num_layers for ch in prog.chunks for op in ch.forward):
        return 0.0
    e = 4 if par.dtype == "fp32" else 2
    T = par.seq_length // par.cp * par.micro_batch
    sp_div = par.tp if par.sp else 1
    return float(deferred * e * T * (model.hidden_size / sp_div + padded_vocab(model, par) / par.tp))


def _in_flight_peak(workload: Workload, stage: int, per_chunk: dict[int, float], schedule: str) -> float:
    """Walk the schedule: forwards add the chunk's activations, backwards free them. A combined
    step (a forward run beside another micro-batch's backward, DualPipeV's) holds both until
    it ends: the forward's are counted before the backward's are freed. A backward split in two
    (engine.zero_bubble) frees them when its weight part runs (the weight gradients read the
    saved inputs)."""
    par = workload.parallel
    steps = SCHEDULES.get(schedule)(par.pp, par.vpp, par.num_microbatches, stage)
    held = peak = 0.0
    for st in steps:
        if st.forward:
            held += per_chunk[st.chunk]
            peak = max(peak, held)
            if st.pair is not None:
                held -= per_chunk[st.pair.chunk]
        elif st.part != "input":  # a split backward frees its activations with its weight part
            held -= per_chunk[st.chunk]
    return peak


def cp_exchange_bytes(model: ModelConfig, par: ParallelConfig) -> float:
    """The largest transient of TE's context-parallel attention on one rank (0 without CP)."""
    if par.cp == 1:
        return 0.0
    e = 4 if par.dtype == "fp32" else 2
    T = par.seq_length // par.cp * par.micro_batch
    q_w, k_w, v_w, o_w, _ = _attention_widths(model)
    q, kv, out = e * T * q_w / par.tp, e * T * (k_w + v_w) / par.tp, e * T * o_w / par.tp
    if par.cp_comm == "p2p":
        # forward: p2p_comm_buffers keeps all cp K/V chunks and out_per_step all cp outputs;
        # backward: two [kv, dkv] exchange buffers, one dkv_ and dq, one dq_ per step.
        return max(par.cp * (kv + out), 5 * kv + 2 * q)
    if par.cp_comm == "all_gather":
        return 2 * par.cp * kv  # gathered K/V and, in backward, full-length dK/dV
    return 2 * (q + kv)  # a2a: exchanged q/k/v and their reordered copies


def _temporary(workload: Workload, stage: int) -> float:
    """The largest transient buffer of one rank of ``stage`` (workspaces not included)."""
    model, par = workload.model, workload.parallel
    e = 4 if par.dtype == "fp32" else 2
    g = saved_gemm_input_bytes(par, e)
    T = par.seq_length // par.cp * par.micro_batch
    h = model.hidden_size
    sp_div = par.tp if par.sp else 1
    temp = 0.0
    if par.sp:
        temp = g * T * h  # the all-gathered input of QKV / FC1
    layers = {op.layer for ch in workload.stages[stage].chunks for op in ch.forward}
    width = 2 if model.activation == "swiglu" else 1
    blocks = [layer for layer in layers if 0 <= layer < model.num_layers]
    if any(layer > model.num_layers for layer in layers):  # an MTP depth: the last layer's kind
        blocks.append(model.num_layers - 1)
    dense = [layer for layer in blocks if model.layer_kind(layer) in ("dense", "-")]
    if any(model.layer_symbol(layer) == "M" for layer in blocks):
        # Backward of a Mamba layer: the gradient of in_proj's output beside the scan's output gradient
        temp = max(temp, e * T * (model.mamba_in_proj_width + model.mamba_d_inner) / par.tp)
    if dense:
        # Backward of a dense MLP: gradients of the FC2 input and of the FC1 output coexist.
        f = model.dense_ffn if model.is_moe else model.ffn
        temp = max(temp, e * T * f * (width + 1) / par.tp)
    if model.num_layers in layers:
        temp = max(temp, (e + 4) * T * model.vocab_size / par.tp)
    if any(model.is_moe_layer(layer) for layer in blocks):
        etp = par.expert_tp
        routed = _received_copies(model, par, T, sp_div) * etp
        temp = max(temp, dispatcher_transient_bytes(model, par))  # dispatch/combine buffers
        temp = max(temp, e * routed * model.expert_ffn / etp * (width + 1))  # expert MLP backward
    if blocks:
        temp = max(temp, cp_exchange_bytes(model, par))
    return temp


def _moe_workspace(workload: Workload, stage: int) -> float:
    """The dispatcher's persistent buffers on a rank of ``stage``, if its chunks hold an MoE
    layer (Megatron allocates them on the first dispatch: a dense-only stage has none)."""
    model = workload.model
    if not model.is_moe:
        return 0.0
    L = model.num_layers
    layers = {op.layer for ch in workload.stages[stage].chunks for op in ch.forward}
    if any(0 <= layer < L and model.is_moe_layer(layer) for layer in layers) or (
            any(layer > L for layer in layers) and model.is_moe_layer(L - 1)):
        return dispatcher_workspace_bytes(model, workload.parallel)
    return 0.0


def estimate_memory(
    workload: Workload, *, schedule: str | None = None,
    attention: Literal["flash", "unfused"] | None = None, dropout: bool = False,
) -> tuple[MemoryEstimate, ...]:
    """One :class:`MemoryEstimate` per pipeline stage (its rank's peak, in bytes).

    ``weights`` includes TE's cached fp8 weight copies; ``temporary`` is the persistent
    workspaces (:func:`workspace_bytes`) plus the largest transient."""
    par = workload.parallel
    attention = attention or par.attention_backend
    sched = schedule or par.schedule
    opt_bytes = optimizer_state_bytes(par.optimizer, par.dtype, precision_aware_dtypes(par))
    workspace = workspace_bytes(workload)
    out = []
    for prog in workload.stages:
        dense, expert = prog.dense_params, prog.params - prog.dense_params
        if par.distributed_optimizer:
            opt = opt_bytes * dense / (par.dp * par.cp) + opt_bytes * expert / par.edp
        else:
            opt = opt_bytes * prog.params
        parts = {
            ch.chunk: stage_chunk_activation(workload, prog.stage, ch.chunk, attention=attention, dropout=dropout)
            for ch in prog.chunks
        }
        # Held activations of the micro-batches in flight, plus (full recompute) the one
        # group being recomputed, which exists once whatever the number in flight.
        acts = _in_flight_peak(workload, prog.stage, {c: p[0] for c, p in parts.items()}, sched)
        acts += max(p[1] for p in parts.values())
        acts += deferred_wgrad_bytes(workload, prog.stage)
        out.append(MemoryEstimate(
            stage=prog.stage,
            weights=round(weight_bytes(workload, prog.stage)),
            gradients=par.grad_bytes * prog.params,
            optimizer_states=round(opt),
            activations=round(acts),
            temporary=round(workspace + _moe_workspace(workload, prog.stage) + _temporary(workload, prog.stage)),
            reserved_factor=RESERVED_FACTOR,
        ))
    return tuple(out)
