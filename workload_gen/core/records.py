"""The workload data model that every later stage consumes.

A :class:`Workload` says what each pipeline stage (and virtual chunk) does for ONE
micro-batch, in execution order, plus the once-per-iteration work (gradient sync,
optimizer, parameter gather). Gradient accumulation and the pipeline schedule are the
engine's job and are not unrolled here (DESIGN.md, "Workload").

Units: seconds, bytes, FLOPs (floating-point operations, a multiply-add counts 2).
"""
from __future__ import annotations

from dataclasses import field, replace
from enum import StrEnum

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.record import record

FORMAT_VERSION = 1


class Phase(StrEnum):
    FWD = "fwd"
    BWD_INPUT = "bwd-input"
    BWD_WEIGHT = "bwd-weight"
    RECOMPUTE = "recompute"
    """A forward op re-run during backward; profiled as its forward."""
    ITERATION = "iter"
    """Once per iteration: gradient sync, optimizer step, parameter gather."""


class OpKind(StrEnum):
    GEMM = "gemm"
    GROUPED_GEMM = "grouped_gemm"
    ATTENTION = "attention"
    NORM = "norm"
    ELEMENTWISE = "elementwise"
    ROPE = "rope"
    EMBEDDING = "embedding"
    LOSS = "loss"
    ROUTER = "router"
    PERMUTE = "permute"
    OPTIMIZER = "optimizer"


class CollKind(StrEnum):
    ALL_REDUCE = "allreduce"
    ALL_GATHER = "allgather"
    REDUCE_SCATTER = "reducescatter"
    ALL_TO_ALL = "alltoall"
    SEND_RECV = "sendrecv"
    BROADCAST = "broadcast"


class Group(StrEnum):
    TP = "tp"
    CP = "cp"
    EP = "ep"
    ETP = "etp"
    """Expert tensor parallel."""
    DP = "dp"
    """Gradient data-parallel group of dense parameters: dp*cp ranks (Megatron's dp_cp)."""
    EDP = "edp"
    """Expert data-parallel group: ranks holding the same experts."""
    PP = "pp"
    EMB = "emb"
    """First and last pipeline stage, for tied embedding gradients."""
    AMAX = "amax"
    """The tp*cp*dp ranks of one pipeline stage: Megatron's FP8 amax reduction group
    (``get_amax_reduction_group(with_context_parallel=True)``, the tensor-and-data-parallel
    group with CP), over which delayed scaling all-reduces its amaxes."""


class TimeSource(StrEnum):
    NONE = ""
    MEASURED = "measured"
    SCALED = "scaled"
    ESTIMATED = "estimated"
    IMPORTED = "imported"


OUTPUT_LAYER_OP = "output"
STEP_OVERHEAD_OP = "step_overhead"
"""The fixed host work of an optimizer step (compute_profile's ``step_overhead_s``): the GPU
waits while the host runs it, so the engine charges it to the breakdown's ``host`` part."""
"""Name of the output layer's (LM head's) linear ops: its forward GEMM, input-gradient and
weight-gradient GEMMs, and its TP collectives (``output_ag``, ``output_ag_bwd``, ...).
The engine finds the weight gradient that Megatron's defer_embedding_wgrad_compute moves
by this name (engine.program)."""

MOE_DISPATCH_OP, MOE_COMBINE_OP = "dispatch_a2a", "combine_a2a"
"""Names of an MoE layer's EP all-to-alls (workload_gen.layer_ops): the engine finds them by
name for the flex dispatcher's traffic and SM share and for the EP all-to-all overlap."""

GRAD_ACCUM_SUFFIX = ".grad_accum"
"""Name suffix of the main-gradient add after a linear's wgrad GEMM without gradient-
accumulation fusion (workload_gen.costs.grad_accumulate): ``<linear>.grad_accum``, shape
(rows, width) of the weight, or (rows, width, tensors) for GroupedLinear's per-expert
weights, one add each; the host launches one per weight tensor (engine.host_launch)."""

EXPERT_OP_PREFIX = "expert_"
"""Name prefix of MoE expert ops (``expert_fc1``, ``expert_fc2``, ``expert_swiglu``). A
grouped GEMM so named is Transformer Engine's GroupedLinear, one GEMM per expert; the other
grouped GEMMs (the unfused attention's) are one batched call."""

QUANTIZE_SUFFIX = {"fp8": ".fp8_cast", "fp4": ".fp4_cast"}
"""Name suffix of a GEMM input's quantize op by training dtype (``<linear>.fp8_cast``,
workload_gen.layer_ops). An expert GEMM's (``expert_fc1.fp8_cast``) stands for Transformer
Engine's ``split_quantize``: one quantize per local expert, each with its own output tensors
and Python object, which the host pays per expert (engine.host_launch)."""

FP8_WEIGHT_CAST_OP = "fp8_weight_cast"
"""The per-step quantize of the cached fp8 weights (workload_gen.builder, without
--fp8-param-gather)."""
FP8_PARAM_TRANSPOSE_OP = "fp8_param_transpose"
"""The per-step transpose of the gathered per-tensor fp8 weights (workload_gen.builder, with
--fp8-param-gather): made only where FP8 GEMMs take the TN layout alone (GpuSpec.fp8_gemm_any_layout)."""

SHARED_EXPERT_PREFIX = "shared_"
"""Name prefix of an MoE layer's shared-expert ops (``shared_fc1``, its activation,
``shared_fc2``, their casts: workload_gen.layer_ops); the EP overlap's combined pass moves them
into the attention node (engine.a2a_overlap)."""

CLAMP_SUFFIX = ".clamp"
"""Name suffix of the clamp Megatron runs before a gated activation (``<activation>.clamp``,
workload_gen.costs.glu_clamp)."""
EXPERT_FC2_BIAS_OP = f"{EXPERT_OP_PREFIX}fc2_bias"
"""The experts' eager fc2 bias loop (workload_gen.costs.expert_fc2_bias)."""

EAGER_SEQUENCE_SUFFIXES = (GRAD_ACCUM_SUFFIX, CLAMP_SUFFIX, EXPERT_FC2_BIAS_OP)
"""Name endings of the elementwise ops that stand for a sequence of eager PyTorch calls, one
kernel each, whose shape's third entry is that count: the main-gradient adds, Megatron's clamp
of a gated activation's input (workload_gen.costs.glu_clamp), the experts' fc2 bias loop
(costs.expert_fc2_bias). The host launches each call (engine.host_launch); a quantize cast's
kernels, by contrast, come from one call into Transformer Engine."""


@record
class ComputeOp:
    """One kernel (or fused kernel group) on one rank."""

    name: str
    """Stable op name within a layer, e.g. ``qkv``, ``core_attn``, ``fc1``."""
    layer: int
    """Global layer index; -1 for the embedding, num_layers for the head (final norm, output, loss)."""
    phase: Phase
    kind: OpKind
    shape: tuple[int, ...]
    """Kind-specific shape, see :func:`shape_doc`; the profile key is derived from it."""
    dtype: str
    flops: float
    bytes: float
    """HBM bytes read + written (roofline memory term)."""
    time_s: float | None = None
    source: TimeSource = TimeSource.NONE

    @property
    def shape_key(self) -> str:
        return "x".join(str(d) for d in self.shape)

    def with_time(self, time_s: float, source: TimeSource) -> ComputeOp:
        return replace(self, time_s=time_s, source=source)


@record
class CollectiveOp:
    """A collective on one parallel group, as every member issues it."""

    name: str
    layer: int
    phase: Phase
    kind: CollKind
    group: Group
    group_size: int
    bytes: int
    """NCCL convention: the full buffer as nccl-tests counts it (the gathered output of an
    all-gather, the input of a reduce-scatter, the per-rank buffer of an all-reduce or
    all-to-all, the message of a send/recv)."""
    overlappable: bool = False
    """Whether this collective may run concurrently with compute (async in Megatron)."""
    peer: int = 0
    """For SEND_RECV on the PP group: +1 sends downstream, -1 upstream; else 0."""


Op = ComputeOp | CollectiveOp


@record
class ChunkProgram:
    """What one virtual chunk of one pipeline stage does for one micro-batch."""

    stage: int
    chunk: int
    layers: tuple[int, ...]
    """Global layer indices held by this chunk."""
    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    """Backward in execution order, including recomputed forward ops."""


@record
class StageProgram:
    """The ops one rank of a pipeline stage runs: per chunk its forward and backward lists (one
    micro-batch each) and the once-per-iteration tail, plus the parameters the rank holds."""
    stage: int
    chunks: tuple[ChunkProgram, ...]
    iteration: tuple[Op, ...]
    """Once per iteration, in order: gradient sync buckets, optimizer, parameter gather."""
    params: int
    """Parameters held by one rank of this stage (dense + experts, sharded by tp/ep)."""
    dense_params: int
    """Of ``params``, those synchronised over the DP group (the rest over EDP)."""


@record
class Workload:
    """One training iteration as per-stage op lists, with the model and parallel layout that
    produced it: the contract between gen-workload, compute_profile and the engine."""
    model: ModelConfig
    parallel: ParallelConfig
    stages: tuple[StageProgram, ...]
    params_total: int
    """Whole-model parameter count (unsharded), as papers and model cards report it."""
    gpu: str = ""
    """GPU the compute times are for; empty until compute_profile attaches them."""
    meta: dict[str, str] = field(default_factory=dict, compare=False)
    overlap_slowdown: float = 0.0
    """How much longer a compute kernel takes while a collective of its rank runs beside
    it (0.15 = 15% longer): NCCL's and userbuffers' kernels hold SMs and HBM bandwidth.
    A property of the GPU's compute, set with the times by compute_profile; 0 for times
    from elsewhere (e.g. a SimAI file). The engine applies it (engine.sim)."""

    def ops(self):
        """Every op with its stage and chunk (chunk -1 for iteration ops), in file order."""
        for st in self.stages:
            for ch in st.chunks:
                for op in ch.forward:
                    yield st.stage, ch.chunk, op
                for op in ch.backward:
                    yield st.stage, ch.chunk, op
            for op in st.iteration:
                yield st.stage, -1, op


def attention_mask(shape: tuple[int, ...]) -> tuple[bool, int]:
    """An attention op's (causal, sliding-window keys) from its shape (:func:`shape_doc`):
    causal unless the sixth entry is 0 (a five-entry shape is causal), window 0 (none) unless a
    seventh entry gives the keys each query looks back."""
    return (bool(shape[5]) if len(shape) > 5 else True), (shape[6] if len(shape) > 6 else 0)


def shape_doc() -> str:
    """The meaning of ``ComputeOp.shape`` per kind (also printed in file headers)."""
    return (
        "gemm: m,n,k (C[m,n] = A[m,k] @ B[k,n]); grouped_gemm: groups,m_per_group,n,k; "
        "attention: batch,heads,seq_q,seq_kv,head_dim,causal[,window]; norm/elementwise/rope/permute: tokens,width "
        "(a grouped GEMM input's quantize, an unfused MoE (un)permute, the experts' fp8 (un)padding, "
        "a grouped GEMM's main-gradient adds, Megatron's eager RoPE: tokens,width,kernels); "
        "embedding: tokens,hidden,vocab_shard; loss: tokens,vocab_shard; router: tokens,hidden,experts; "
        "optimizer: params"
    )
