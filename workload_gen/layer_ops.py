"""Op lists of one transformer layer (and of the embedding and the head) for one micro-batch.

Each kind of layer (dense, MoE, the leading dense layers of an MoE model) is built once
per configuration as *templates* with ``layer=0``; the builder stamps the layer index in.
Ops follow Megatron-Core's execution order on one rank.

Notation (all per rank, one micro-batch): ``b`` micro-batch, ``s`` sequence length,
``cp``/``tp`` sizes, ``s_l = s/cp`` the local sequence, ``T = b*s_l`` tokens in the
tensor-parallel region (GEMMs, attention), ``T_sp = T/tp`` with SP (else ``T``) in the
norms, residuals, router and dispatcher, ``B`` bytes per activation element, ``h``
hidden size, ``a``/``g`` attention / KV heads, ``d`` head dim.

Collective sizes follow NCCL's convention (the full buffer, as nccl-tests reports it):

- TP without SP. Forward: all-reduce of the row-parallel output after ``proj`` and
  ``fc2``, ``T*h*B``. Backward: all-reduce of the column-parallel input gradient after
  the dgrad of ``qkv`` and ``fc1`` (``T*h*B``), issued before their wgrad (Megatron
  launches it asynchronously and computes wgrad meanwhile).
- TP with SP (Korthikanti et al., arXiv 2205.05198). Forward: all-gather of the
  sequence-sharded input before ``qkv``/``fc1``, gathered buffer ``T*h*B``; reduce-scatter
  of the ``proj``/``fc2`` output, input buffer ``T*h*B``. Backward, row-parallel
  (``fc2``, ``proj``): all-gather of the output gradient (``T*h*B``) before dgrad;
  column-parallel (``fc1``, ``qkv``): all-gather of the saved local input again for the
  wgrad (Megatron and Transformer Engine keep only the shard), then dgrad, then
  reduce-scatter of the input gradient (``T*h*B``), then wgrad.
- CP, ring (p2p): the local K and V (``b*s_l*g_l*(d_qk+d_v)*B`` bytes, ``g_l`` = KV heads
  per TP rank) move to the next CP rank ``cp-1`` times in forward; backward moves K/V
  ``cp-1`` times and the accumulated dK/dV ``cp`` times (the last hop returns it to its
  owner), as Transformer Engine's ring attention does. All-gather mode: one all-gather
  of K/V (gathered ``cp`` times the local size) forward, a reduce-scatter of dK/dV backward.
  a2a mode (Ulysses): all-to-all of the local Q, K, V (``b*s_l*(a_l*d_qk + g_l*(d_qk+d_v))*B``)
  to head shards and of the output (``b*s_l*a_l*d_v*B``) back, mirrored in backward.
- MLA with SP: the down projections are TP-duplicated and run on the local ``T_sp``
  tokens; the column-parallel up projections all-gather the latents (``T*q_lora*B``,
  ``T*kv_lora*B``) and the shared rotary key is all-gathered (``T*d_rope*B``); backward
  mirrors them (re-gather for wgrad, reduce-scatter of the input gradient).
- EP (alltoall dispatcher): dispatch and combine all-to-all of ``T_sp*topk*h*B`` each,
  in both directions; with expert-TP ``etp > 1`` an all-gather before the experts and a
  reduce-scatter after, ``etp*T_sp*topk*h*B`` each (mirrored in backward).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from workload_gen import costs
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import QUANTIZED_DTYPES
from workload_gen.core.params import MAMBA_CHUNK_SIZE, MAMBA_CONV_KERNEL
from workload_gen.core.moe_capacity import routed_copies
from workload_gen.core.moe_dispatch import distinct_ranks
from workload_gen.core.moe_padding import experts_pad, mean_pad_rows, quantization_align
from workload_gen.core.record import record
from workload_gen.core.records import (
    CLAMP_SUFFIX,
    EXPERT_FC2_BIAS_OP,
    EXPERT_OP_PREFIX,
    GRAD_ACCUM_SUFFIX,
    MOE_COMBINE_OP,
    MOE_DISPATCH_OP,
    OUTPUT_LAYER_OP,
    QUANTIZE_SUFFIX,
    SHARED_EXPERT_PREFIX,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    Op,
    OpKind,
    Phase,
)

FWD, BWD_I, BWD_W, RECOMP = Phase.FWD, Phase.BWD_INPUT, Phase.BWD_WEIGHT, Phase.RECOMPUTE


@record
class LayerKey:
    """Every ParallelConfig setting that changes per-micro-batch ops (not DP or batch count)."""

    tp: int
    sp: bool
    pp: int
    vpp: int
    cp: int
    cp_comm: str
    ep: int
    etp: int
    micro_batch: int
    seq_length: int
    dtype: str
    act_bytes: int
    grad_bytes: int
    recompute: str
    recompute_method: str
    recompute_num_layers: int | None
    tp_comm_overlap: bool
    vocab_padded: int
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    vshape: bool = False
    """DualPipeV's V placement of the virtual stages (workload_gen.core.virtual_stages)."""
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    overlap_p2p: bool = False
    """PP sends may overlap compute: interleaved schedule with overlap_p2p_comm."""
    fp8_recipe: str = "delayed"
    grad_accum_fusion: bool = True
    """Wgrad GEMMs accumulate into the main gradient in place (ParallelConfig.gradient_accumulation_fusion)."""
    bf16_first: int = 0
    bf16_last: int = 0
    """Global transformer layers kept in bf16 under fp8/fp4 (ParallelConfig.bf16_layer_span):
    the builder builds those layers from this key with dtype bf16 (builder._layer_kind)."""
    attention_backend: str = "flash"
    moe_capacity_factor: float | None = None
    """Megatron --moe-expert-capacity-factor (None: dropless); see core.moe_capacity."""
    moe_pad_to_capacity: bool = False
    """Megatron --moe-pad-expert-input-to-capacity."""
    moe_permute_fusion: bool = False
    """Megatron --moe-permute-fusion: TE's fused (un)permute kernels (costs.permute) instead of
    the torch ops (costs.permute_unfused)."""
    rope_fusion: bool = True
    """TE's fused RoPE (ParallelConfig.rope_fusion); off, the eager path (costs.rope_unfused)."""
    recompute_moe_act: bool = False
    """Selective recompute of the expert activation (Megatron --recompute-modules moe_act)."""
    recompute_mlp: bool = False
    """Selective recompute of the dense MLP (Megatron --recompute-modules mlp)."""
    recompute_shared_experts: bool = False
    """Selective recompute of the shared experts (Megatron --recompute-modules shared_experts)."""
    recompute_mla_up_proj: bool = False
    """Selective recompute of MLA's up projections and RoPE (--recompute-modules mla_up_proj)."""
    recompute_moe: bool = False
    """Selective recompute of the whole MoE layer (--recompute-modules moe)."""
    recompute_layernorm: bool = False
    """Selective recompute of the norms that are modules of their own (--recompute-modules layernorm)."""
    moe_shared_expert_overlap: bool = False
    """Megatron --moe-shared-expert-overlap: the shared experts run on a side stream under the
    dispatch and combine all-to-alls (see moe_block)."""
    moe_flex_backend: str | None = None
    """The flex dispatcher's backend (ParallelConfig.flex_backend: deepep, hybridep, ncclep);
    None for the alltoall dispatcher (allgather runs as alltoall, with a warning)."""
    moe_router_padding: bool = False
    """Megatron --moe-router-padding-for-quantization: the router pads each expert's count to
    the fp8/fp4 alignment (core.moe_padding)."""
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    moe_rank_load: float = 1.0
    """Expected max/mean of the token copies an EP rank receives (core.moe_routing
    .rank_load_factor): the layer runs at the busiest rank's pace, so its expert work and the
    all-to-alls it receives are that many times the mean."""
    """Group-limited routing (--moe-router-num-groups, --moe-router-group-topk): where a
    token's experts may be, hence how many EP ranks the flex dispatcher sends it to."""


Stamp = tuple[type, str, tuple]
"""(record class, name, the constructor arguments after ``layer``): a template op in the
form the builder's hot loop instantiates fastest."""


def _stamps(ops: tuple[Op, ...]) -> tuple[Stamp, ...]:
    out: list[Stamp] = []
    for op in ops:
        if type(op) is ComputeOp:
            out.append((ComputeOp, op.name, (op.phase, op.kind, op.shape, op.dtype, op.flops, op.bytes)))
        else:
            out.append((CollectiveOp, op.name, (op.phase, op.kind, op.group, op.group_size, op.bytes,
                                                 op.overlappable, op.peer)))
    return tuple(out)


@dataclass(slots=True)
class Templates:
    """One layer kind: forward ops, backward ops (execution order) and the forward ops as
    they are re-run by full recompute, each as ops (layer 0) and as stamps."""

    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    recompute: tuple[Op, ...]
    fwd_stamps: tuple[Stamp, ...] = ()
    bwd_stamps: tuple[Stamp, ...] = ()
    recompute_stamps: tuple[Stamp, ...] = ()

    def __post_init__(self) -> None:
        self.fwd_stamps = _stamps(self.fwd)
        self.bwd_stamps = _stamps(self.bwd)
        self.recompute_stamps = _stamps(self.recompute)


@dataclass(slots=True)
class _Emitter:
    """Collects forward ops and, per forward op, the backward block that undoes it."""

    model: ModelConfig
    key: LayerKey
    fwd: list[Op] = field(default_factory=list)
    blocks: list[list[Op]] = field(default_factory=list)
    span: tuple[str, int] | None = None
    """The layer's attention restriction (sliding window or chunk), see layer_span."""

    # --- derived sizes -----------------------------------------------------------------
    @property
    def T(self) -> int:
        return self.key.micro_batch * (self.key.seq_length // self.key.cp)

    @property
    def T_sp(self) -> int:
        return self.T // self.key.tp if self.key.sp else self.T

    @property
    def B(self) -> int:
        return self.key.act_bytes

    @property
    def _bias(self) -> str:
        """How a skip_bias_add linear (proj, fc1, fc2) pays its bias (see :meth:`linear`)."""
        return "deferred" if self.model.add_bias_linear else ""

    @property
    def _te_bias(self) -> str:
        """How a linear that adds its own bias (MLA's projections) pays it (see :meth:`linear`)."""
        return "epilogue" if self.model.add_bias_linear else ""

    @property
    def wgrad_out_bytes(self) -> int:
        """Bytes per element of the fresh gradient a wgrad GEMM writes without gradient-
        accumulation fusion (the parameter dtype), 0 when it accumulates into the main gradient
        in place (costs.wgrad_gemm's ``b_out``); nonzero means a main-gradient add follows."""
        return 0 if self.key.grad_accum_fusion else self.B

    @property
    def gemm_in_bytes(self) -> float:
        """Bytes per element a quantized GEMM reads of each operand: fp8 1, NVFP4 the e2m1
        value and its block-scale share (costs.NVFP4_GEMM_IN_BYTES); else the activation's."""
        if self.key.dtype == "fp4":
            return costs.NVFP4_GEMM_IN_BYTES
        return 1 if self.key.dtype == "fp8" else self.B

    @property
    def quantized(self) -> bool:
        """Transformer Engine runs this layer's linear GEMMs in fp8 or fp4."""
        return self.key.dtype in QUANTIZED_DTYPES

    @property
    def mxfp8(self) -> bool:
        """The layer's GEMMs run MXFP8, whose block scales cuBLAS reads swizzled
        (costs.mxfp8_swizzle_kernels, costs.mxfp8_unaligned)."""
        return self.key.dtype == "fp8" and self.key.fp8_recipe == "mxfp8"

    @property
    def tensorwise(self) -> bool:
        """The layer's GEMMs run FP8 current scaling, whose quantize is four kernels
        (costs.TENSORWISE_QUANTIZE_KERNELS)."""
        return self.key.dtype == "fp8" and self.key.fp8_recipe == "tensorwise"

    @property
    def cast_suffix(self) -> str:
        """The name suffix of a GEMM input's quantize kernel: '.fp8_cast' or '.fp4_cast'."""
        return QUANTIZE_SUFFIX[self.key.dtype]

    # --- primitives --------------------------------------------------------------------
    def compute(self, name: str, phase: Phase, kind: OpKind, shape: tuple[int, ...], fb: tuple[float, float],
                dtype: str | None = None) -> ComputeOp:
        """A compute template. Under fp8 or fp4 only the GEMMs run quantized (Transformer
        Engine); everything else, attention included, stays in bf16."""
        if dtype is None:
            dtype = self.key.dtype
            if dtype in QUANTIZED_DTYPES and kind not in (OpKind.GEMM, OpKind.GROUPED_GEMM):
                dtype = "bf16"
        return ComputeOp(name, 0, phase, kind, shape, dtype, float(fb[0]), float(fb[1]))

    def coll(self, name: str, phase: Phase, kind: CollKind, group: Group, size: int, nbytes: int,
             overlappable: bool = False, peer: int = 0) -> CollectiveOp:
        return CollectiveOp(name, 0, phase, kind, group, size, int(nbytes), overlappable, peer)

    def tp_coll(self, name: str, phase: Phase, kind: CollKind, nbytes: int, async_default: bool = False) -> CollectiveOp:
        """A TP collective; overlappable with --tp-comm-overlap, or always where Megatron
        issues it asynchronously anyway (``async_default``, see :meth:`linear`)."""
        return self.coll(name, phase, kind, Group.TP, self.key.tp, nbytes, self.key.tp_comm_overlap or async_default)

    def add(self, fwd_ops: list[Op], bwd_block: list[Op]) -> None:
        self.fwd.extend(fwd_ops)
        self.blocks.append(bwd_block)

    # --- building blocks ---------------------------------------------------------------
    def norm(self, name: str, rows: int, width: int) -> None:
        """The model's norm over [rows, width] (costs.norm)."""
        fwd, bwd = costs.norm(self.model.normalization, rows, width, self.B)
        shape = (rows, width)
        self.add([self.compute(name, FWD, OpKind.NORM, shape, fwd)],
                 [self.compute(name, BWD_I, OpKind.NORM, shape, bwd)])

    def residual(self, name: str) -> None:
        """Bias-dropout-add on the (SP-local) hidden state (costs.residual)."""
        rows, w = self.T_sp, self.model.hidden_size
        fwd, bwd = costs.residual(rows, w, self.B)
        self.add([self.compute(name, FWD, OpKind.ELEMENTWISE, (rows, w), fwd)],
                 [self.compute(name, BWD_I, OpKind.ELEMENTWISE, (rows, w), bwd)])

    def activation(self, name: str, rows: int, width: int) -> None:
        """The model's MLP activation on ``width`` outputs per row (costs.activation); a
        clamped gated activation (ModelConfig.activation_clamp) first runs Megatron's clamp
        kernels (costs.glu_clamp) as an op of its own, ``<name>.clamp``."""
        if self.model.activation_clamp is not None and self.model.activation == "swiglu":
            fwd, bwd = costs.glu_clamp(rows, width, self.B)
            kf, kb = costs.GLU_CLAMP_KERNELS
            self.add([self.compute(f"{name}{CLAMP_SUFFIX}", FWD, OpKind.ELEMENTWISE, (rows, 2 * width, kf), fwd)],
                     [self.compute(f"{name}{CLAMP_SUFFIX}", BWD_I, OpKind.ELEMENTWISE, (rows, 2 * width, kb), bwd)])
        fwd, bwd = costs.activation(self.model.activation, rows, width, self.B)
        self.add([self.compute(name, FWD, OpKind.ELEMENTWISE, (rows, width), fwd)],
                 [self.compute(name, BWD_I, OpKind.ELEMENTWISE, (rows, width), bwd)])

    def rope(self, name: str, rows: int, width: int) -> None:
        """Rotary embedding on the q and k columns: Transformer Engine's fused kernel
        (costs.rope), or Megatron-Core's eager path when the fusion is off or YaRN scales cos
        and sin (costs.rope_unfused; its shape's third entry is its kernel count)."""
        if self.key.rope_fusion and self.model.rope_cos_sin_scale == 1.0:
            fwd, bwd = costs.rope(rows, width, self.B)
            self.add([self.compute(name, FWD, OpKind.ROPE, (rows, width), fwd)],
                     [self.compute(name, BWD_I, OpKind.ROPE, (rows, width), bwd)])
            return
        key = self.key
        positions = key.seq_length // key.cp  # the angles of this rank's sequence positions
        fwd, bwd, (kf, kb) = costs.rope_unfused(rows, width, positions, self.model.head_dim, self.B)
        self.add([self.compute(name, FWD, OpKind.ROPE, (rows, width, kf), fwd)],
                 [self.compute(name, BWD_I, OpKind.ROPE, (rows, width, kb), bwd)])

    def mla_rope(self, rows: int, heads: int, dn: int, dr: int, dv: int) -> None:
        """MLA's fused RoPE, which also lays out q, k and v for the attention kernel
        (costs.mla_rope)."""
        fwd, bwd = costs.mla_rope(rows, heads, dn, dr, dv, self.B)
        shape = (rows, heads * (dn + dr))
        self.add([self.compute("rope", FWD, OpKind.ROPE, shape, fwd)],
                 [self.compute("rope", BWD_I, OpKind.ROPE, shape, bwd)])

    def linear(self, name: str, m: int, k: int, n: int, mode: str, fp8: bool = True, bias: str = "",
               requantize: bool = False) -> None:
        """One linear layer, C[m,n] = X[m,k] @ W[k,n] (n, k already divided by tp).

        mode 'col' (column-parallel: qkv, fc1, q/kv up, output layer), 'row'
        (row-parallel: proj, fc2) or 'local' (no TP communication: duplicated MLA down
        projections). Backward: dgrad dX[m,k] = dY[m,n] @ W^T (shape m,k,n), then wgrad
        dW[k,n] = X^T @ dY (shape k,n,m), with the TP collectives listed in the module doc.
        ``fp8=False``: stays bf16 under fp8 training (Megatron's output layer is not a
        Transformer Engine module).

        ``bias``: '' none; 'epilogue' (a Transformer Engine linear that adds its own bias,
        skip_bias_add False: qkv): forward, the GEMM epilogue reads the n-vector; backward,
        dbias is fused where dY is read anyway (bf16: the wgrad GEMM's cuBLASLt bias-gradient
        epilogue; fp8: the dY cast, tex.bgrad_quantize), so only its n-vector write;
        'deferred' (skip_bias_add True: proj, fc1, fc2, whose bias a fused bias-activation or
        bias-dropout-add kernel adds): forward the same n-vector read (counted on the GEMM),
        backward its own column-sum kernel over dY (costs.bias_grad) on the rows the bias was
        added to (the SP-local ones after a row-parallel reduce-scatter).

        ``requantize``: under fp8/fp4 the layer saved its bf16 input instead of the quantized
        copy (Transformer Engine's save_original_input, set where Megatron recomputes the
        tensor feeding it) and quantizes X again before the wgrad GEMM.
        """
        key, B = self.key, self.B
        quantized = self.quantized and fp8
        bi = self.gemm_in_bytes if quantized else B
        gemm_dtype = None if quantized else ("bf16" if self.quantized else None)
        tp_on = key.tp > 1 and mode != "local"
        fwd: list[Op] = []
        bwd: list[Op] = []
        # Sequence-parallel all-gathers of a quantized GEMM's input (X forward and for wgrad,
        # dY of a row-parallel layer) move the quantized tensor: Transformer Engine quantizes
        # the local shard and gathers that, through NCCL (linear.py: ``inputmat =
        # input_quantizer(inputmat)`` then ``gather_along_first_dim(..., quantizer=...)``;
        # base.py grad_output_preprocess the same for dY; distributed.py dispatches on the
        # quantizer to _all_gather_fp8 / _mxfp8 / _fp8_blockwise / _nvfp4, TransformerEngine
        # v2.0-v2.18, NVFP4 from v2.8; TE 1.x cast X and dY to fp8 before the gather too,
        # v1.13 linear.py) or through userbuffers with --tp-comm-overlap (the producer writes
        # fp8 into the buffer). The one exception: under fp4 Megatron registers the
        # userbuffers unquantized (initialize.py: FP8 mode only with --fp8-format), so those
        # gathers move bf16 and the gathered tensor is quantized whole.
        # The casts below are charged on the gathered rows, although TE quantizes the local
        # shard: docs/design_notes.md, "Quantized SP all-gathers", says why.
        gather_quantized = quantized and not (key.tp_comm_overlap and key.dtype == "fp4")
        ub_quantized = quantized and key.tp_comm_overlap and key.dtype == "fp8"
        ag_b = bi if gather_quantized else B
        if tp_on and mode == "col" and key.sp:
            fwd.append(self.tp_coll(f"{name}_ag", FWD, CollKind.ALL_GATHER, m * k * ag_b))
        if quantized:
            # Transformer Engine quantizes each GEMM input: X here (row- and column-wise, the
            # latter for wgrad); in backward dY before dgrad (reused by wgrad). The weight's
            # casts happen once per iteration (builder: fp8_weight_cast).
            gathered_x = tp_on and key.sp and mode == "col"
            shape = self._cast_shape(m, k, backward=False, gathered_input=gathered_x)
            fwd.append(self.compute(f"{name}{self.cast_suffix}", FWD, OpKind.ELEMENTWISE, shape,
                                    costs.quantize_cast(m, k, key.dtype, key.fp8_recipe), dtype="bf16"))
        fb = costs.gemm(m, n, k, bi, B)
        if bias:
            fb = (fb[0], fb[1] + n * B)
        fwd.append(self.compute(name, FWD, OpKind.GEMM, (m, n, k), fb, gemm_dtype))
        if tp_on and mode == "row":
            kind = CollKind.REDUCE_SCATTER if key.sp else CollKind.ALL_REDUCE
            # fp8 with userbuffers: the row-parallel GEMM writes its output into an fp8
            # buffer that is reduce-scattered in pipelined chunks (NeMo's FP8 overlap
            # configs set fp8_buf on proj_fprop and fc2_fprop), 1 byte per element
            rs_b = 1 if ub_quantized and key.sp else B
            fwd.append(self.tp_coll(f"{name}_{'rs' if key.sp else 'ar'}", FWD, kind, m * n * rs_b))
        # Megatron-Core's column-parallel backward (LinearWithGradAccumulationAndAsync-
        # Communication) is asynchronous even without --tp-comm-overlap: the re-gather of X
        # for wgrad runs under the dgrad GEMM, and the dgrad's reduce-scatter (all-reduce
        # without SP) under the wgrad GEMM. Those two are marked overlappable; the engine
        # overlaps an overlappable collective with the next GEMM. The row-parallel gather
        # of dY must finish before the dgrad GEMM, so it blocks.
        if tp_on and key.sp:
            # row: gather dY (the reduce-scatter's backward); col: re-gather X for wgrad.
            nbytes = m * n * ag_b if mode == "row" else m * k * ag_b
            bwd.append(self.tp_coll(f"{name}_ag_bwd", BWD_I, CollKind.ALL_GATHER, nbytes, async_default=mode == "col"))
        dbias_write = n * B if bias == "epilogue" else 0
        if quantized:
            cast = costs.quantize_cast(m, n, key.dtype, key.fp8_recipe)
            shape = self._cast_shape(m, n, backward=True, gathered_input=tp_on and key.sp and mode == "col",
                                     gathered_grad=tp_on and key.sp and mode == "row")
            bwd.append(self.compute(f"{name}{self.cast_suffix}", BWD_I, OpKind.ELEMENTWISE, shape,
                                    (cast[0], cast[1] + dbias_write), dtype="bf16"))
        bwd.append(self.compute(name, BWD_I, OpKind.GEMM, (m, k, n), costs.gemm(m, k, n, bi, B), gemm_dtype))
        if tp_on and mode == "col":
            kind = CollKind.REDUCE_SCATTER if key.sp else CollKind.ALL_REDUCE
            bwd.append(self.tp_coll(f"{name}_{'rs' if key.sp else 'ar'}_bwd", BWD_I, kind, m * k * B, async_default=True))
        if quantized and requantize:
            bwd.append(self.compute(f"{name}{self.cast_suffix}", BWD_W, OpKind.ELEMENTWISE, self._plain_cast_shape(m, k),
                                    costs.quantize_cast(m, k, key.dtype, key.fp8_recipe), dtype="bf16"))
        fresh = self.wgrad_out_bytes
        wb = costs.wgrad_gemm(k, n, m, bi, key.grad_bytes, fresh)
        if not quantized:
            wb = (wb[0], wb[1] + dbias_write)
        bwd.append(self.compute(name, BWD_W, OpKind.GEMM, (k, n, m), wb, gemm_dtype))
        if fresh:
            bwd.append(self.compute(f"{name}{GRAD_ACCUM_SUFFIX}", BWD_W, OpKind.ELEMENTWISE, (k, n),
                                    costs.grad_accumulate(k * n, B, key.grad_bytes), dtype="bf16"))
        if bias == "deferred":
            rows = m // key.tp if mode == "row" and tp_on and key.sp else m
            bwd.append(self.compute(f"{name}.dbias", BWD_W, OpKind.ELEMENTWISE, (rows, n),
                                    costs.bias_grad(rows, n, B), dtype="bf16"))
        self.add(fwd, bwd)

    def _plain_cast_shape(self, rows: int, cols: int) -> tuple[int, ...]:
        """A quantize op's shape without MXFP8's scale kernels: (rows, cols), with FP8 current
        scaling's kernel count as a third entry (costs.TENSORWISE_QUANTIZE_KERNELS)."""
        return (rows, cols, costs.TENSORWISE_QUANTIZE_KERNELS) if self.tensorwise else (rows, cols)

    def _cast_shape(self, rows: int, cols: int, backward: bool, gathered_input: bool = False,
                    gathered_grad: bool = False) -> tuple[int, ...]:
        """The shape of a te.Linear pass's quantize op: (rows, cols), or (rows, cols, kernels)
        under FP8 current scaling (costs.TENSORWISE_QUANTIZE_KERNELS) and under MXFP8, whose
        pass also launches the GEMMs' scale swizzles (costs.mxfp8_swizzle_kernels) and, for an
        operand quantized with GEMM-swizzled scales (not a sequence-parallel gather's) that is
        not whole 128 x 128 tiles, two memsets (costs.mxfp8_unaligned); the estimator charges
        each kernel its launch."""
        if not self.mxfp8:
            return self._plain_cast_shape(rows, cols)
        own = gathered_grad if backward else gathered_input  # this pass's quantized operand was gathered
        memsets = 0 if own else 2 * int(costs.mxfp8_unaligned(cols, 0, rows))
        return (rows, cols, 1 + memsets + costs.mxfp8_swizzle_kernels(backward, gathered_input, gathered_grad))

    def core_attention(self, heads: int, kv_heads: int, d_qk: int, d_v: int) -> None:
        """Causal flash attention on the local queries (s/cp) against all s keys (the ring
        visits every K/V block; load-balanced CP gives each rank 1/cp of the causal work)."""
        key, B = self.key, self.B
        b, cp = key.micro_batch, key.cp
        s_l, s = key.seq_length // cp, key.seq_length
        kv_bytes = b * s_l * kv_heads * (d_qk + d_v) * B
        fwd_comm: list[Op] = []
        fwd_post: list[Op] = []
        bwd_pre: list[Op] = []
        bwd_post: list[Op] = []
        if cp > 1 and key.cp_comm == "a2a":
            # Ulysses: all-to-all from sequence shards to head shards for Q, K, V; attention
            # over the whole sequence with heads/cp heads; all-to-all of the output back.
            # Per-rank buffers: local Q+K+V and local O.
            qkv_bytes = b * s_l * heads * d_qk * B + kv_bytes
            o_bytes = b * s_l * heads * d_v * B
            fwd_comm.append(self.coll("cp_qkv_a2a", FWD, CollKind.ALL_TO_ALL, Group.CP, cp, qkv_bytes))
            fwd_post.append(self.coll("cp_out_a2a", FWD, CollKind.ALL_TO_ALL, Group.CP, cp, o_bytes))
            bwd_pre.append(self.coll("cp_out_a2a", BWD_I, CollKind.ALL_TO_ALL, Group.CP, cp, o_bytes))
            bwd_post.append(self.coll("cp_qkv_a2a", BWD_I, CollKind.ALL_TO_ALL, Group.CP, cp, qkv_bytes))
            heads, kv_heads, s_l = heads // cp, kv_heads // cp, s
        span = self.span
        if span is not None and cp > 1:
            raise ConfigError("cp", cp, f"not modelled: {span[0]}ed attention with context parallelism "
                                        "(the ring's K/V exchange over a window or chunks)")
        # The shape a kernel database and the estimator see (batch, heads, sq, skv, d, causal
        # [, window]): chunks are independent causal c x c attentions, (b*ceil(s/c), heads, c,
        # c); a window is the causal s x s kernel with its left window w appended (flash-attn's
        # window_size=(w, 0)), which the estimator turns into the KV tiles the kernel visits.
        # The op's FLOPs are the band's exactly (costs.attention_fwd).
        if span is None:
            shape = (b, heads, s_l, s, d_qk, 1)
        elif span[0] == "chunk":
            shape = (b * -(-s // span[1]), heads, span[1], span[1], d_qk, 1)
        else:
            shape = (b, heads, s, s, d_qk, 1, span[1])
        fwd_fb = costs.attention_fwd(b, heads, kv_heads, s_l, s, d_qk, d_v, True, B, span)
        bwd_fb = costs.attention_bwd(b, heads, kv_heads, s_l, s, d_qk, d_v, True, B, span)
        if cp > 1 and key.cp_comm == "p2p":
            for i in range(1, cp):
                fwd_comm.append(self.coll(f"cp_kv.{i}", FWD, CollKind.SEND_RECV, Group.CP, cp, kv_bytes, True, 1))
                bwd_pre.append(self.coll(f"cp_kv.{i}", BWD_I, CollKind.SEND_RECV, Group.CP, cp, kv_bytes, True, 1))
            for i in range(1, cp + 1):
                bwd_post.append(self.coll(f"cp_dkv.{i}", BWD_I, CollKind.SEND_RECV, Group.CP, cp, kv_bytes, True, 1))
        elif cp > 1 and key.cp_comm == "all_gather":
            fwd_comm.append(self.coll("cp_kv_ag", FWD, CollKind.ALL_GATHER, Group.CP, cp, cp * kv_bytes))
            bwd_post.append(self.coll("cp_dkv_rs", BWD_I, CollKind.REDUCE_SCATTER, Group.CP, cp, cp * kv_bytes))
        if key.attention_backend == "unfused":
            attn_fwd, attn_bwd = self._unfused_attention(b, heads, s_l, s, d_qk, d_v)
        else:
            sink_bwd: list[Op] = []
            if self.model.softmax_type != "vanilla":
                # attention sinks: the forward's extra softmax term is fused in the kernel; the
                # learnable sink's gradient is a reduction of its own (costs.attention_sink)
                (sf, sb), sink_grad = costs.attention_sink(b, heads, s_l, B, self.model.softmax_type == "learnable")
                fwd_fb = (fwd_fb[0] + sf, fwd_fb[1] + sb)
                if sink_grad is not None:
                    sink_bwd = [self.compute("core_attn.sink_grad", BWD_W, OpKind.ELEMENTWISE, (b * heads * s_l, 1),
                                             sink_grad, dtype="bf16")]
            attn_fwd = [self.compute("core_attn", FWD, OpKind.ATTENTION, shape, fwd_fb)]
            attn_bwd = [self.compute("core_attn", BWD_I, OpKind.ATTENTION, shape, bwd_fb), *sink_bwd]
        recompute: list[Op] = []
        if key.recompute == "selective":
            # Megatron's selective recompute checkpoints core attention: its forward (and
            # the CP exchange feeding it) re-runs right before its backward.
            recompute = [_as_recompute(op) for op in (*fwd_comm, *attn_fwd, *fwd_post)]
        self.add([*fwd_comm, *attn_fwd, *fwd_post], [*recompute, *bwd_pre, *attn_bwd, *bwd_post])

    def _unfused_attention(self, b: int, heads: int, sq: int, skv: int, d_qk: int,
                           d_v: int) -> tuple[list[Op], list[Op]]:
        """Attention with the scores in memory (Megatron's unfused path): two batched GEMMs
        per direction over the whole s x s matrix (no causal skip: the mask is applied to
        full scores), and the softmax/dropout of costs.attention_softmax_dropout.
        Batched GEMMs are grouped_gemm ops, one group per (sequence, head)."""
        B, g = self.B, b * heads
        scores = (g, sq, skv, d_qk)     # S = Q K^T
        context = (g, sq, d_v, skv)     # O = P V
        sm = (b * heads * sq, skv)
        fwd = [
            self.compute("attn_scores", FWD, OpKind.GROUPED_GEMM, scores, costs.grouped_gemm(g, sq, skv, d_qk, B, B)),
            self.compute("attn_softmax_dropout", FWD, OpKind.ELEMENTWISE, sm,
                         costs.attention_softmax_dropout(b, heads, sq, skv, False), dtype="bf16"),
            self.compute("attn_context", FWD, OpKind.GROUPED_GEMM, context, costs.grouped_gemm(g, sq, d_v, skv, B, B)),
        ]
        bwd = [
            # dV = P^T dO and dP = dO V^T, then the softmax/dropout backward, then dQ = dS K, dK = dS^T Q
            self.compute("attn_context", BWD_I, OpKind.GROUPED_GEMM, (g, skv, d_v, sq),
                         costs.grouped_gemm(g, skv, d_v, sq, B, B)),
            self.compute("attn_context", BWD_W, OpKind.GROUPED_GEMM, (g, sq, skv, d_v),
                         costs.grouped_gemm(g, sq, skv, d_v, B, B)),
            self.compute("attn_softmax_dropout", BWD_I, OpKind.ELEMENTWISE, sm,
                         costs.attention_softmax_dropout(b, heads, sq, skv, True), dtype="bf16"),
            self.compute("attn_scores", BWD_I, OpKind.GROUPED_GEMM, (g, sq, d_qk, skv),
                         costs.grouped_gemm(g, sq, d_qk, skv, B, B)),
            self.compute("attn_scores", BWD_W, OpKind.GROUPED_GEMM, (g, skv, d_qk, sq),
                         costs.grouped_gemm(g, skv, d_qk, sq, B, B)),
        ]
        if self.quantized:
            fwd = [replace(op, dtype="bf16") for op in fwd]
            bwd = [replace(op, dtype="bf16") for op in bwd]
        return fwd, bwd

    # --- blocks ----------------------------------------------------------------------
    def attention_block(self) -> None:
        m, key = self.model, self.key
        tp, T, T_sp, h = key.tp, self.T, self.T_sp, m.hidden_size
        a = m.num_attention_heads // tp
        attn_start = len(self.fwd)
        self.norm("input_norm", T_sp, h)
        if m.multi_latent_attention:
            dr, dn, dv = m.qk_pos_emb_head_dim, m.qk_head_dim, m.v_head_dim
            # Down projections are duplicated over TP and run on the SP-local tokens; the
            # up projections are column-parallel and all-gather the (small) latents.
            if m.q_lora_rank:
                self.linear("q_down", T_sp, h, m.q_lora_rank, "local", bias=self._te_bias)
            self.linear("kv_down", T_sp, h, m.kv_lora_rank + dr, "local", bias=self._te_bias)
            up_start = len(self.fwd)
            if m.q_lora_rank:
                self.norm("q_norm", T_sp, m.q_lora_rank)
            self.norm("kv_norm", T_sp, m.kv_lora_rank)
            if m.q_lora_rank:
                self.linear("q_up", T, m.q_lora_rank, a * m.qk_dim, "col", bias=self._te_bias)
            else:
                self.linear("q_proj", T, h, a * m.qk_dim, "col", bias=self._te_bias)
            self.linear("kv_up", T, m.kv_lora_rank, a * (dn + dv), "col", bias=self._te_bias)
            if tp > 1 and key.sp:
                # The shared rotary key k_pe (dr per token) is gathered from the sequence shards.
                nbytes = T * dr * self.B
                self.add([self.tp_coll("k_pe_ag", FWD, CollKind.ALL_GATHER, nbytes)],
                         [self.tp_coll("k_pe_rs_bwd", BWD_I, CollKind.REDUCE_SCATTER, nbytes)])
            self.mla_rope(T, a, dn, dr, dv)
            up_ops = [op for op in self.fwd[up_start:] if op.name != "k_pe_ag"]
            self.core_attention(a, a, m.qk_dim, m.v_dim)
            if key.recompute_mla_up_proj:
                # Megatron's mla_up_proj (MultiLatentAttention: CheckpointWithoutOutput of the up
                # projections, their fused q/kv norms and RoPE; k_pe is gathered before it): q,
                # k, v are dropped after core attention's forward and re-made when the backward
                # reaches its output, before core attention's own backward.
                self._checkpoint(up_ops)
            self.linear("proj", T, a * dv, h, "row", bias=self._bias)
            if key.recompute_layernorm:
                # MLA's input norm is a module of its own (no down-projection fusion by default):
                # its output is dropped after attention's forward and re-made when the backward
                # reaches the attention output. Standard attention fuses the norm into the QKV
                # LayerNormLinear (Transformer Engine's spec), where layernorm recompute does nothing.
                self._checkpoint([self.fwd[attn_start]])
        else:
            g, d = m.kv_heads // tp, m.head_dim
            self.linear("qkv", T, h, (a + 2 * g) * d, "col",
                        bias="epilogue" if m.add_bias_linear or m.add_qkv_bias else "")
            if m.qk_layernorm:
                self.norm("q_norm", T * a, d)
                self.norm("k_norm", T * g, d)
            if m.position_embedding in ("rope", "yarn"):
                self.rope("rope", T, (a + g) * d)
            self.core_attention(a, g, d, d)
            self.linear("proj", T, a * d, h, "row", bias=self._bias)
        self.residual("attn_residual")

    def mlp_block(self, ffn: int) -> None:
        m, tp, T = self.model, self.key.tp, self.T
        mult = 2 if m.activation == "swiglu" else 1
        start = len(self.fwd)
        self.norm("pre_mlp_norm", self.T_sp, m.hidden_size)
        self.linear("fc1", T, m.hidden_size, mult * ffn // tp, "col", bias=self._bias)
        self.activation(m.activation, T, ffn // tp)
        self.linear("fc2", T, ffn // tp, m.hidden_size, "row", bias=self._bias)
        if self.key.recompute_mlp:
            # Megatron's mlp recompute (TransformerLayer: tensor_parallel.checkpoint of self.mlp,
            # whose fc1 carries the fused pre-MLP norm under Transformer Engine's spec)
            self._checkpoint(self.fwd[start:])
        self.residual("mlp_residual")

    def mamba_block(self) -> None:
        """A Mamba layer (Megatron-Core MambaLayer with MambaMixer's training path,
        mamba_mixer.py _ssm_training @d98e8a64): the norm (fused into in_proj by Transformer
        Engine), in_proj (column-parallel, h -> [z, x, B, C, dt], each part split by TP; its
        SP all-gather as any column-parallel linear), the causal conv1d over x, B, C, the
        SSD chunked scan with the z gate (mamba_split_conv1d_scan_combined), the grouped
        gated RMSNorm over the local d_inner, out_proj (row-parallel, d_inner -> h; its
        reduce-scatter or all-reduce), and the residual add. TP splits heads and groups."""
        m, key, B = self.model, self.key, self.B
        tp, T, h = key.tp, self.T, m.hidden_size
        heads, d = m.mamba_heads // tp, m.mamba_d_inner // tp
        gn = m.mamba_num_groups // tp * m.mamba_state_dim
        self.norm("input_norm", self.T_sp, h)
        self.linear("in_proj", T, h, 2 * d + 2 * gn + heads, "col")
        fwd, bwd = costs.mamba_conv1d(T, d + 2 * gn, MAMBA_CONV_KERNEL, B)
        self.add([self.compute("mamba_conv1d", FWD, OpKind.ELEMENTWISE, (T, d + 2 * gn), fwd)],
                 [self.compute("mamba_conv1d", BWD_I, OpKind.ELEMENTWISE, (T, d + 2 * gn), bwd)])
        fwd, bwd = costs.mamba_scan(T, d, heads, m.mamba_num_groups // tp, m.mamba_state_dim, MAMBA_CHUNK_SIZE, B)
        self.add([self.compute("mamba_scan", FWD, OpKind.ELEMENTWISE, (T, d), fwd)],
                 [self.compute("mamba_scan", BWD_I, OpKind.ELEMENTWISE, (T, d), bwd)])
        fwd, bwd = costs.norm("rmsnorm", T, d, B)  # the mixer's own RMSNorm, whatever --normalization says
        self.add([self.compute("mamba_out_norm", FWD, OpKind.NORM, (T, d), fwd)],
                 [self.compute("mamba_out_norm", BWD_I, OpKind.NORM, (T, d), bwd)])
        self.linear("out_proj", T, d, h, "row")
        self.residual("mamba_residual")

    def _checkpoint(self, ops: list[Op]) -> None:
        """Megatron's activation checkpoint of the forward ops ``ops``: they re-run
        (communication included) as soon as the backward reaches the checkpoint's output,
        i.e. first in the backward block added last, before any of their backward ops."""
        self.blocks[-1][:0] = [_as_recompute(op) for op in ops]

    def moe_block(self) -> None:
        """Megatron-Core MoE layer: router, token dispatch, the local experts' grouped GEMMs,
        combine, and the shared experts; balanced routing.

        Each rank routes its T_sp tokens to topk experts. Expert GEMMs see
        M = etp*T_sp*topk token rows spread evenly over the E/ep local experts:
        m_per_group = etp*ep*T_sp*topk/E. The dispatcher decides what crosses the EP
        all-to-all and which permutations run (Megatron-LM token_dispatcher.py):

        - alltoall: permute into one row per (token, expert) copy, all-to-all those rows,
          sort them by local expert (sort_chunks), and the reverse after the experts;
        - flex with DeepEP (and NCCL EP): each token is sent once per EP rank holding one of its experts
          (core.moe_dispatch.distinct_ranks rows per token), then permuted into per-expert
          rows on arrival, and unpermuted (summed per token) before the combine;
        - flex with HybridEP: the same traffic; Megatron calls its dispatch_with_permute and
          combine_with_unpermute without fuse_permute_dispatch (--moe-permute-fusion-into-
          hybridep, off by default, absent before 2edffadb), so a permute kernel of HybridEP's
          own follows the dispatch and an unpermute precedes the combine.

        Under fp8 the grouped GEMMs quantize their inputs as dense linears do (see linear):
        X before fc1 and fc2 forward, dY before their dgrads, each over the routed rows.
        """
        m, key, B = self.model, self.key, self.B
        h, E, k = m.hidden_size, m.num_experts, m.moe_router_topk
        ep, etp, T_sp = key.ep, key.etp, self.T_sp
        self.norm("pre_mlp_norm", T_sp, h)
        norm_op = self.fwd[-1]
        moe_start = len(self.fwd)
        # Router: logits = x @ W_r (h x E), softmax/top-k in fp32.
        r_fwd, r_dgrad, r_wgrad = costs.router(T_sp, h, E, B, key.grad_bytes)
        self.add(
            [self.compute("router", FWD, OpKind.ROUTER, (T_sp, h, E), r_fwd)],
            [self.compute("router", BWD_I, OpKind.ROUTER, (T_sp, h, E), r_dgrad),
             self.compute("router", BWD_W, OpKind.ROUTER, (T_sp, h, E), r_wgrad)],
        )
        # T_sp*k without a capacity; with one, what the capacity keeps or pads to
        routed = routed_copies(T_sp, k, E, key.moe_capacity_factor, key.moe_pad_to_capacity)
        align = quantization_align(key.dtype, key.fp8_recipe)
        if key.moe_router_padding and align:
            # the router's padded map: every expert's count from this rank rounded up to the
            # alignment, the extra slots dispatched and computed as rows (core.moe_padding)
            routed += round(mean_pad_rows(E, align))
        flex = key.moe_flex_backend is not None and ep > 1
        local_experts = E // ep
        if flex:
            # one row per (token, destination rank); expanded to per-expert rows on arrival
            sent = round(T_sp * distinct_ranks(E, k, ep, key.moe_router_num_groups, key.moe_router_group_topk))
            a2a = sent * h * B
        else:
            self._permute("permute", T_sp, routed, E)
            a2a = routed * h * B
        # the busiest EP rank receives moe_rank_load x the mean: its all-to-alls and expert
        # work set the layer's pace (routed and sent stay the mean: what a rank sends)
        load = key.moe_rank_load
        a2a = round(a2a * load)
        fs = m.moe_shared_expert_intermediate_size
        mult = 2 if m.activation == "swiglu" else 1
        # Megatron's --moe-shared-expert-overlap (token_dispatcher.py: the shared experts' fc1 and
        # activation are issued on their own stream after the dispatch all-to-all, fc2 after the
        # combine; autograd runs their backward on that stream too): the all-to-alls overlap the
        # shared-expert ops that follow them (engine.program.overlap_anchors); Megatron allows it
        # with the alltoall dispatcher only.
        side = bool(fs) and key.moe_shared_expert_overlap and ep > 1 and not flex
        if ep > 1:
            self.add([self.coll(MOE_DISPATCH_OP, FWD, CollKind.ALL_TO_ALL, Group.EP, ep, a2a, overlappable=side)],
                     [self.coll(MOE_DISPATCH_OP, BWD_I, CollKind.ALL_TO_ALL, Group.EP, ep, a2a, overlappable=side)])
        if side:
            dispatch_block = len(self.blocks) - 1
            self.linear(f"{SHARED_EXPERT_PREFIX}fc1", self.T, h, mult * fs // key.tp, "col", bias=self._bias)
            self.activation(f"{SHARED_EXPERT_PREFIX}{m.activation}", self.T, fs // key.tp)
            self._after_side_ops(dispatch_block)
        if etp > 1:
            self.add([self.coll("dispatch_ag", FWD, CollKind.ALL_GATHER, Group.ETP, etp, etp * a2a)],
                     [self.coll("dispatch_rs", BWD_I, CollKind.REDUCE_SCATTER, Group.ETP, etp, etp * a2a)])
        rows = round(etp * routed * load)
        # every flex backend permutes on arrival: DeepEP and NCCL EP with Megatron's permute,
        # HybridEP with a permute kernel of its own after the dispatch kernel (Megatron calls
        # dispatch_with_permute without fuse_permute_dispatch: --moe-permute-fusion-into-hybridep
        # is off by default and absent before 2edffadb)
        hybrid = key.moe_flex_backend == "hybridep"
        if flex:
            received = round(etp * sent * load)  # one row per (token, this rank) received
            self._permute("permute", received, rows, local_experts, fused=hybrid)
        elif ep > 1 and local_experts > 1:
            self._permute("sort_chunks", rows, rows)
        fixed = etp * ep * routed / E if key.moe_capacity_factor is not None and key.moe_pad_to_capacity else None
        pad = experts_pad(align, key.moe_flex_backend, key.moe_router_padding, fixed)
        if pad:
            # TEGroupedMLP's Fp8Padding (core.moe_padding): the rows and their probabilities
            # copied into per-expert aligned segments before fc1; its backward copies the
            # gradients back out
            padded = rows + mean_pad_rows(local_experts, align)
            cost = costs.expert_pad(rows, padded, h, B, probs=True)
            self.add([self.compute(f"{EXPERT_OP_PREFIX}pad", FWD, OpKind.PERMUTE, (rows, h, 2), cost)],
                     [self.compute(f"{EXPERT_OP_PREFIX}pad", BWD_I, OpKind.PERMUTE, (rows, h, 2), cost)])
        fe = m.expert_ffn // etp
        mg = rows / local_experts
        mg_shape = max(1, round(mg))
        bi, fresh = self.gemm_in_bytes, self.wgrad_out_bytes
        for name, n_out, k_in, act_after in ((f"{EXPERT_OP_PREFIX}fc1", mult * fe, h, True),
                                             (f"{EXPERT_OP_PREFIX}fc2", h, fe, False)):
            fb = costs.grouped_gemm(local_experts, mg, n_out, k_in, bi, B)
            wb = costs.grouped_wgrad(local_experts, k_in, n_out, mg, bi, key.grad_bytes, fresh)
            if m.add_bias_linear and act_after:
                # fc1 (TEGroupedMLP: skip_bias_add False): Transformer Engine's GroupedLinear adds
                # each expert's bias in the GEMM epilogue and fuses dbias where dY is read (as
                # linear()'s 'epilogue' bias): the bias vectors' read forward, write backward.
                bias_bytes = local_experts * n_out * B
                fb, wb = (fb[0], fb[1] + bias_bytes), (wb[0], wb[1] + bias_bytes)
            fwd = [self.compute(name, FWD, OpKind.GROUPED_GEMM, (local_experts, mg_shape, n_out, k_in), fb)]
            bwd = [self.compute(name, BWD_I, OpKind.GROUPED_GEMM, (local_experts, mg_shape, k_in, n_out),
                                costs.grouped_gemm(local_experts, mg, k_in, n_out, bi, B)),
                   self.compute(name, BWD_W, OpKind.GROUPED_GEMM, (local_experts, k_in, n_out, mg_shape), wb)]
            if self.quantized:
                # Transformer Engine's GroupedLinear quantizes its input (X) in forward and the
                # incoming gradient (dY) before the dgrad, over all routed rows, split per
                # expert: the shape's third entry is the kernels that takes (costs.
                # split_quantize_kernels), each paying the estimator's per-launch overhead
                for width, phase, ops in ((k_in, FWD, fwd), (n_out, BWD_I, bwd)):
                    kernels = costs.split_quantize_kernels(key.dtype, key.fp8_recipe, local_experts, width,
                                                           align, fixed)
                    if self.mxfp8:  # the weights' scale swizzles
                        kernels += costs.mxfp8_swizzle_kernels(phase is BWD_I, experts=local_experts)
                    ops.insert(0, self.compute(f"{name}{self.cast_suffix}", phase, OpKind.ELEMENTWISE,
                                               (rows, width, kernels),
                                               costs.quantize_cast(rows, width, key.dtype, key.fp8_recipe),
                                               dtype="bf16"))
                if not act_after and key.recompute_moe_act:
                    # moe_act recompute under fp8/fp4: fc2 keeps its bf16 input (Megatron's
                    # set_save_original_input, experts.py @d98e8a64) and quantizes it again
                    # for the weight gradient
                    kernels = costs.split_quantize_kernels(key.dtype, key.fp8_recipe, local_experts, k_in,
                                                           align, fixed, scale_buffers=1)
                    bwd.insert(len(bwd) - 1, self.compute(
                        f"{name}{self.cast_suffix}", BWD_W, OpKind.ELEMENTWISE, (rows, k_in, kernels),
                        costs.quantize_cast(rows, k_in, key.dtype, key.fp8_recipe), dtype="bf16"))
            if fresh:  # one main-gradient add per expert's weight tensor (DDP's hook per parameter)
                bwd.append(self.compute(f"{name}{GRAD_ACCUM_SUFFIX}", BWD_W, OpKind.ELEMENTWISE,
                                        (local_experts * k_in, n_out, local_experts),
                                        costs.grad_accumulate(local_experts * k_in * n_out, B, key.grad_bytes),
                                        dtype="bf16"))
            if m.add_bias_linear and act_after:
                bwd.append(self._expert_bias_accumulate(name, local_experts, n_out))
            self.add(fwd, bwd)
            if act_after:
                start = len(self.fwd)
                self.activation(f"{EXPERT_OP_PREFIX}{m.activation}", rows, fe)
                act = self.fwd[start:]  # the activation (and its clamp, inside Megatron's checkpoint)
            elif key.recompute_moe_act:
                # Megatron's moe_act recompute (experts.py, CheckpointWithoutOutput): the
                # activation's output, fc2's input, is dropped after fc2's forward and the
                # activation re-runs when the backward reaches fc2's output, before its GEMMs.
                self._checkpoint(act)
        if m.add_bias_linear:
            # fc2's bias (skip_bias_add True): Megatron adds bias * router prob per expert in
            # eager PyTorch (costs.expert_fc2_bias); autograd runs the backward of those ops,
            # and DDP's hook then adds each expert's bias gradient to its main gradient.
            # The flex dispatcher hands the experts fp32 probabilities.
            bf, bb, (kf, kb) = costs.expert_fc2_bias(rows, h, local_experts, B, probs_fp32=flex)
            name = EXPERT_FC2_BIAS_OP
            self.add([self.compute(name, FWD, OpKind.ELEMENTWISE, (rows, h, kf), bf, dtype="bf16")],
                     [self.compute(name, BWD_I, OpKind.ELEMENTWISE, (rows, h, kb), bb, dtype="bf16"),
                      self._expert_bias_accumulate(f"{EXPERT_OP_PREFIX}fc2", local_experts, h)])
        if pad:
            # Fp8Unpadding of fc2's output (after its bias), and its backward's padding copy
            cost = costs.expert_pad(rows, padded, h, B, probs=False)
            self.add([self.compute(f"{EXPERT_OP_PREFIX}unpad", FWD, OpKind.PERMUTE, (rows, h, 1), cost)],
                     [self.compute(f"{EXPERT_OP_PREFIX}unpad", BWD_I, OpKind.PERMUTE, (rows, h, 1), cost)])
        if flex:
            self._permute("unpermute", rows, received, local_experts, fused=hybrid)
        elif ep > 1 and local_experts > 1:
            self._permute("unsort_chunks", rows, rows)
        if etp > 1:
            self.add([self.coll("combine_rs", FWD, CollKind.REDUCE_SCATTER, Group.ETP, etp, etp * a2a)],
                     [self.coll("combine_ag", BWD_I, CollKind.ALL_GATHER, Group.ETP, etp, etp * a2a)])
        if ep > 1:
            self.add([self.coll(MOE_COMBINE_OP, FWD, CollKind.ALL_TO_ALL, Group.EP, ep, a2a, overlappable=side)],
                     [self.coll(MOE_COMBINE_OP, BWD_I, CollKind.ALL_TO_ALL, Group.EP, ep, a2a, overlappable=side)])
        if side:
            combine_block = len(self.blocks) - 1
            self.linear(f"{SHARED_EXPERT_PREFIX}fc2", self.T, fs // key.tp, h, "row", bias=self._bias)
            self._after_side_ops(combine_block)
        if not flex:
            self._permute("unpermute", routed, T_sp, E)
        if fs and not side:
            tp = key.tp
            start = len(self.fwd)
            # layernorm recompute under fp8/fp4: the shared fc1 keeps the re-made bf16 norm
            # output and quantizes it again in its backward (MoELayer.set_for_recompute_pre_mlp_
            # layernorm, moe_layer.py @d98e8a64)
            self.linear(f"{SHARED_EXPERT_PREFIX}fc1", self.T, h, mult * fs // tp, "col", bias=self._bias,
                        requantize=key.recompute_layernorm and not key.recompute_shared_experts)
            self.activation(f"{SHARED_EXPERT_PREFIX}{m.activation}", self.T, fs // tp)
            self.linear(f"{SHARED_EXPERT_PREFIX}fc2", self.T, fs // tp, h, "row", bias=self._bias)
            if key.recompute_shared_experts:
                self._checkpoint(self.fwd[start:])  # Megatron's SharedExpertMLP: checkpoint of its forward
        if key.recompute_moe:
            self._checkpoint(self.fwd[moe_start:])  # MoELayer: checkpoint of its whole forward (not the norm)
        if key.recompute_layernorm:
            # The MoE layer's pre-MLP norm is a module of its own (TENorm; the router needs its
            # output): CheckpointWithoutOutput drops that output after the MoE forward and
            # re-runs the norm when the backward reaches the MoE output.
            self._checkpoint([norm_op])
        self.residual("mlp_residual")

    def _expert_bias_accumulate(self, linear: str, experts: int, width: int) -> ComputeOp:
        """DDP's main-gradient add of each local expert's bias of ``width`` (``<linear>.bias.grad_accum``):
        Transformer Engine accumulates the weights' gradients in place, not the biases', so
        Megatron-Core DDP's backward hook adds each bias parameter's gradient to its main
        gradient (distributed_data_parallel.py _make_backward_post_hook, at every recipe
        commit): one eager add per expert, the shape's third entry."""
        return self.compute(f"{linear}.bias{GRAD_ACCUM_SUFFIX}", BWD_W, OpKind.ELEMENTWISE,
                            (experts, width, experts),
                            costs.grad_accumulate(experts * width, self.B, self.key.grad_bytes), dtype="bf16")

    def _after_side_ops(self, block: int) -> None:
        """Move the all-to-all's backward block (index ``block``) after the shared-expert blocks
        added since, so that the backward list (blocks reversed) issues the all-to-all first and
        runs the shared experts' backward beside it, as their side stream does."""
        self.blocks.append(self.blocks.pop(block))

    def _permute(self, name: str, rows_in: int, rows_out: int, experts: int = 0, fused: bool = False) -> None:
        """Token (un)permutation of rows_in into rows_out rows of h (costs.permute);
        unpermute also weights by the router probabilities. Without Megatron's
        --moe-permute-fusion (its default) permute and unpermute run as torch ops
        (costs.permute_unfused over a routing map of ``experts`` columns), and the op's shape
        carries their kernel count (tokens, width, kernels; records.shape_doc). ``fused``: a
        library's own single kernel whatever that flag says (HybridEP's permute)."""
        h = self.model.hidden_size
        rows = max(rows_in, rows_out)
        if fused or self.key.moe_permute_fusion or name not in ("permute", "unpermute"):
            cost = costs.permute(rows_in, rows_out, h, self.B, weighted=name == "unpermute")
            self.add([self.compute(name, FWD, OpKind.PERMUTE, (rows, h), cost)],
                     [self.compute(name, BWD_I, OpKind.PERMUTE, (rows, h), cost)])
            return
        un = name == "unpermute"
        ops = []
        for fwd, phase in ((True, FWD), (False, BWD_I)):
            cost = costs.permute_unfused(rows_in, rows_out, h, self.B, experts, un, fwd)
            kernels = costs.UNFUSED_PERMUTE_KERNELS[(name, fwd)]
            ops.append(self.compute(name, phase, OpKind.PERMUTE, (rows, h, kernels), cost))
        self.add([ops[0]], [ops[1]])

    def finish(self) -> Templates:
        bwd: list[Op] = []
        for block in reversed(self.blocks):
            bwd.extend(block)
        return Templates(tuple(self.fwd), tuple(bwd), tuple(_as_recompute(op) for op in self.fwd))


def _as_recompute(op: Op) -> Op:
    if isinstance(op, ComputeOp):
        return ComputeOp(op.name, op.layer, RECOMP, op.kind, op.shape, op.dtype, op.flops, op.bytes)
    return CollectiveOp(op.name, op.layer, RECOMP, op.kind, op.group, op.group_size, op.bytes, op.overlappable, op.peer)


def layer_span(model: ModelConfig, key: LayerKey, layer: int) -> tuple[str, int] | None:
    """Global layer ``layer``'s attention restriction that binds at this sequence length:
    the model's sliding window or chunk (ModelConfig.attention_span), or None when the
    layer attends fully or the window/chunk covers the whole sequence (then it costs what
    full attention costs: core.flops.attention_pairs)."""
    span = model.attention_span(layer)
    if span is None:
        return None
    kind, n = span
    s = key.seq_length
    return span if (kind == "window" and n + 1 < s) or (kind == "chunk" and n < s) else None


def layer_templates(model: ModelConfig, key: LayerKey, moe: bool,
                    span: tuple[str, int] | None = None, symbol: str | None = None) -> Templates:
    """Forward/backward/recompute op templates of one transformer layer (layer index 0),
    with attention restricted to ``span`` (a sliding window or chunk; see layer_span). A
    hybrid model's layer (``symbol``, ModelConfig.layer_symbol) holds one block: M a Mamba
    layer, * attention, - the MLP, E the MoE block (Megatron-Core's hybrid stack builds the
    last three as TransformerLayers with the other half left out, hybrid_layer_specs.py
    @d98e8a64); ``moe`` is then ignored."""
    e = _Emitter(model, key, span=span)
    if symbol == "M":
        e.mamba_block()
        return e.finish()
    if symbol in (None, "*"):
        e.attention_block()
    if symbol == "E" or (symbol is None and moe):
        e.moe_block()
    elif symbol in (None, "-"):
        e.mlp_block(model.dense_ffn if model.is_moe else model.ffn)
    return e.finish()


def embedding_templates(model: ModelConfig, key: LayerKey) -> Templates:
    """Vocab-parallel embedding: each TP rank looks up its vocabulary shard and the
    partial rows are summed over TP: all-reduce (``T*h*B``), or reduce-scatter straight
    into the sequence shards with SP and no learned positions (Megatron's
    reduce_scatter_embeddings). With learned positions and SP, Megatron all-reduces, adds
    the positions and keeps its sequence shard (a local split). Backward: under SP the
    gradient is all-gathered (``T*h*B``, the backward of the scatter); then the
    scatter-add into the embedding gradient (BWD_WEIGHT)."""
    e = _Emitter(model, key)
    T, h, B, tp = e.T, model.hidden_size, e.B, key.tp
    vt = key.vocab_padded // tp
    shape = (T, h, vt)
    e.add([e.compute("embedding", FWD, OpKind.EMBEDDING, shape, costs.embedding_lookup(T, h, B))],
          [e.compute("embedding", BWD_W, OpKind.EMBEDDING, shape, costs.embedding_wgrad(T, h, B, key.grad_bytes))])
    learned = model.position_embedding == "learned"
    if tp > 1:
        if key.sp and not learned:
            fwd = [e.tp_coll("embedding_rs", FWD, CollKind.REDUCE_SCATTER, T * h * B)]
        else:
            fwd = [e.tp_coll("embedding_ar", FWD, CollKind.ALL_REDUCE, T * h * B)]
        bwd = [e.tp_coll("embedding_ag_bwd", BWD_I, CollKind.ALL_GATHER, T * h * B)] if key.sp else []
        e.add(fwd, bwd)
    if learned:
        P = model.max_position_embeddings
        e.add([e.compute("position_embedding", FWD, OpKind.EMBEDDING, (T, h, P), costs.position_embedding(T, h, B))],
              [e.compute("position_embedding", BWD_W, OpKind.EMBEDDING, (T, h, P),
                         costs.embedding_wgrad(T, h, B, key.grad_bytes))])
    t_sp = e.T_sp
    drop = costs.dropout(t_sp, h, B)
    e.add([e.compute("embedding_dropout", FWD, OpKind.ELEMENTWISE, (t_sp, h), drop)],
          [e.compute("embedding_dropout", BWD_I, OpKind.ELEMENTWISE, (t_sp, h), drop)])
    return e.finish()


def head_templates(model: ModelConfig, key: LayerKey) -> Templates:
    """Final norm, output layer (column-parallel over the vocabulary) and vocab-parallel
    cross-entropy. The loss all-reduces three fp32 vectors of T elements over TP (the
    running max, the target logit and the sum of exponentials), 4*T bytes each."""
    e = _Emitter(model, key)
    T, h, B, tp = e.T, model.hidden_size, e.B, key.tp
    vt = key.vocab_padded // tp
    e.norm("final_norm", e.T_sp, h)
    e.linear(OUTPUT_LAYER_OP, T, h, vt, "col", fp8=False)
    fwd, bwd = costs.loss(T, vt, B)
    loss_fwd = [e.compute("loss", FWD, OpKind.LOSS, (T, vt), fwd, "fp32")]
    if tp > 1:
        loss_fwd += [e.tp_coll(nm, FWD, CollKind.ALL_REDUCE, 4 * T) for nm in ("loss_max_ar", "loss_target_ar", "loss_sum_ar")]
    e.add(loss_fwd, [e.compute("loss", BWD_I, OpKind.LOSS, (T, vt), bwd, "fp32")])
    return e.finish()


MTP_OP_PREFIX = "mtp_"
"""Names of the ops a multi-token-prediction module adds around its transformer layer (the
layer's own ops keep the main layers' names, so expert GEMMs stay recognisable)."""


def _prefixed(op: Op, prefix: str) -> Op:
    if isinstance(op, ComputeOp):
        return ComputeOp(prefix + op.name, op.layer, op.phase, op.kind, op.shape, op.dtype, op.flops, op.bytes)
    return CollectiveOp(prefix + op.name, op.layer, op.phase, op.kind, op.group, op.group_size, op.bytes,
                        op.overlappable, op.peer)


def _cp_rolls(e: _Emitter, tensors: tuple[tuple[str, int], ...]) -> list[Op]:
    """Megatron-Core's roll_tensor under context parallelism (multi_token_prediction.py
    @d98e8a64): each CP rank swaps the boundary element of each of its two sequence halves
    with its neighbours, a blocking send/recv of 2*b elements per rolled tensor (ids int64,
    the loss mask fp32); nothing without CP (a local torch.roll). Forward only (no grads)."""
    key = e.key
    if key.cp == 1:
        return []
    ops = [e.coll(f"roll_{name}_cp", FWD, CollKind.SEND_RECV, Group.CP, key.cp, 2 * key.micro_batch * nbytes,
                  False, 1) for name, nbytes in tensors]
    e.add(ops, [])
    return ops


def mtp_templates(model: ModelConfig, key: LayerKey) -> tuple[Templates, Templates]:
    """(before, after) the transformer layer of one multi-token-prediction depth, as
    Megatron-Core's MultiTokenPredictionLayer runs it (multi_token_prediction.py @d98e8a64:
    _get_embeddings, _concat_embeddings, _postprocess; gpt_model.py process_mtp_loss).

    Before: a second pass of the SHARED vocab-parallel embedding over the tokens shifted by
    the depth (embedding_templates' ops: lookup, its TP reduction, dropout; no new
    weights), the RMSNorms enorm (embedding) and hnorm (the decoder's output, already
    final-normed), the concatenation to 2h and eh_proj, a column-parallel linear 2h -> h/tp
    without gathered output (its SP input all-gather, 2*T*h*B, and backward as any column-
    parallel linear), then gather_from_tensor_model_parallel_region: an all-gather of the
    h/tp output columns to h (``T*h*B``; its backward is a split) and, under SP, a scatter
    to the sequence shard (no communication forward; its backward all-gathers the
    gradient, ``T*h*B``). After: the module's own final norm, then the SHARED output head
    again (the output layer's GEMM over the vocabulary and the vocab-parallel cross-entropy
    with its three TP all-reduces; the loss is scaled by --mtp-loss-scaling-factor, which
    costs nothing). The transformer layer between them is the main model's last layer kind
    (builder). Under full recompute, uniform, Megatron checkpoints the norms, eh_proj, the
    layer and the final norm together (_checkpointed_forward: recompute_num_layers must be
    1; check_against_model refuses more), so ``before.recompute`` holds only those; with
    block it skips the MTP recompute (a warning), and so does the builder."""
    emb = embedding_templates(model, key)
    e = _Emitter(model, key)
    T, h, B, tp = e.T, model.hidden_size, e.B, key.tp
    id_rolls = _cp_rolls(e, (("input_ids", 8), ("position_ids", 8)))
    e.norm("enorm", e.T_sp, h)
    e.norm("hnorm", e.T_sp, h)
    e.linear("eh_proj", T, 2 * h, h // tp, "col")
    if tp > 1:
        e.add([e.tp_coll("eh_proj_out_ag", FWD, CollKind.ALL_GATHER, T * h * B)],
              [e.tp_coll("eh_proj_scatter_ag_bwd", BWD_I, CollKind.ALL_GATHER, T * h * B)] if key.sp else [])
    mid = e.finish()
    mid_fwd = mid.fwd[len(id_rolls):]
    before = Templates(tuple(_prefixed(op, MTP_OP_PREFIX) for op in mid.fwd[:len(id_rolls)] + emb.fwd + mid_fwd),
                       tuple(_prefixed(op, MTP_OP_PREFIX) for op in mid.bwd + emb.bwd),
                       # what Megatron's MTP checkpoint re-runs: not the embedding, looked up before it
                       tuple(_prefixed(op, MTP_OP_PREFIX) for op in mid.recompute[len(id_rolls):]))
    head = head_templates(model, key)
    # process_mtp_loss per depth: the output layer, the rolls of the labels and the loss mask,
    # the loss, then (training) the acceptance count: a vocab-parallel argmax of the logits
    # and, over TP, all-gathers of each rank's max (logits dtype) and index (int64)
    x = _Emitter(model, key)
    vt = key.vocab_padded // tp
    rolls = _cp_rolls(x, (("labels", 8), ("loss_mask", 4)))
    x.add([x.compute("logits_argmax", FWD, OpKind.ELEMENTWISE, (T, vt), costs.logits_argmax(T, vt, B))], [])
    if tp > 1:
        x.add([x.tp_coll("argmax_max_ag", FWD, CollKind.ALL_GATHER, tp * T * B),
               x.tp_coll("argmax_index_ag", FWD, CollKind.ALL_GATHER, tp * T * 8)], [])
    loss_at = next(i for i, op in enumerate(head.fwd) if op.name == "loss")
    head_fwd = head.fwd[:loss_at] + tuple(rolls) + head.fwd[loss_at:] + tuple(x.fwd[len(rolls):])
    after = Templates(tuple(_prefixed(op, MTP_OP_PREFIX) for op in head_fwd),
                      tuple(_prefixed(op, MTP_OP_PREFIX) for op in head.bwd),
                      tuple(_prefixed(op, MTP_OP_PREFIX) for op in head.recompute))
    return before, after


def pp_bytes(model: ModelConfig, key: LayerKey) -> int:
    """Activation (or its gradient) between pipeline stages: b * s/cp * h * B, divided by
    tp under SP (Megatron-Core's get_tensor_shapes sends the sequence shard)."""
    n = key.micro_batch * (key.seq_length // key.cp) * model.hidden_size * key.act_bytes
    return n // key.tp if key.sp else n
