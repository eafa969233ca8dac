"""``build(model, parallel) -> Workload``: Megatron-Core's per-stage programs.

For every pipeline stage and virtual chunk, the ops of ONE micro-batch in execution
order (forward; backward with recompute), plus the once-per-iteration ops (gradient
buckets, optimizer, parameter all-gather). The per-layer op lists come from
:mod:`workload_gen.layer_ops`; this module assembles them and derives the data-parallel
part.

Speed: sweeps call this thousands of times. Each layer kind is built once per
configuration, chunk programs are memoised on the settings that shape them (DP size,
global batch and optimizer switches do not), and only the iteration ops are rebuilt
when just those change.

Data-parallel gradient sync (Megatron-Core DistributedDataParallel):

- Each model chunk has its own buffers: one for dense parameters (synchronised over the
  DP group, dp*cp ranks) and one for expert parameters (over the expert-DP group).
- Gradients fill buckets in backward order (reverse of registration). A bucket is closed
  once it holds at least ``bucket_elements`` (Megatron's max(40M, 1M*dp*cp) or
  --ddp-bucket-size); without --overlap-grad-reduce Megatron uses one bucket per buffer.
  With the distributed optimizer each bucket is padded to a multiple of lcm(group, 128).
- A bucket's ``layer`` is the lowest layer whose gradients it holds: it can start when
  that layer's backward on the last micro-batch has finished. Buckets are listed in the
  order they become ready (later chunks first, then higher layers first).
- Bucket bytes = elements * grad bytes: fp32 (4) for bf16 training, because Megatron's
  arguments.py turns on accumulate_allreduce_grads_in_fp32 for bf16; the param dtype (2)
  for fp16 unless --accumulate-allreduce-grads-in-fp32. Distributed optimizer: a
  reduce-scatter per bucket (input buffer = the bucket) and, after the optimizer step, an
  all-gather of the updated bf16 parameters (gathered buffer = the bucket, in param
  bytes); otherwise one all-reduce per bucket.
- Under SP the TP-replicated weights that only saw the local sequence shard (norms,
  row-parallel biases, router, MLA down projections) have their gradients all-reduced
  over TP (``sp_grads_ar``), and with tied embeddings or MTP and pp > 1 the word-embedding
  gradient is all-reduced between the first and last stage (``embedding_grad_ar``, group
  EMB). Both run after the bucket sync, before the optimizer (finalize_model_grads).
- Optimizer: Adam on this rank's shard (all of the rank's parameters without the
  distributed optimizer): per element it reads and writes m, v and the stored fp32 main
  weight, reads the gradient and writes the model weight; the bytes per optimizer and
  dtype are :func:`workload_gen.core.optimizer_state.optimizer_step_bytes`'s, the costs
  of every op :mod:`workload_gen.costs`'s.
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from workload_gen import costs
from workload_gen.amax_reduction import with_amax_reductions

from workload_gen.layer_ops import (
    MTP_OP_PREFIX,
    LayerKey,
    Stamp,
    Templates,
    embedding_templates,
    head_templates,
    layer_span,
    mtp_templates,
    layer_templates,
    pp_bytes,
)
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.moe_routing import rank_load_factor
from workload_gen.core.optimizer_state import precision_aware_dtypes
from workload_gen.core.parallel_config import ParallelConfig, check_against_model
from workload_gen.core.params import (
    chunk_layers,
    head_chunk,
    mtp_chunk,
    padded_vocab,
    rank_tensors,
    rank_tensors_fp8,
    stage_fp8_params,
    stage_fp8_tensor_counts,
    stage_layer_params,
    stage_params,
    total_params,
)
from workload_gen.core.records import (
    FP8_PARAM_TRANSPOSE_OP,
    FP8_WEIGHT_CAST_OP,
    STEP_OVERHEAD_OP,
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    Op,
    OpKind,
    Phase,
    StageProgram,
    Workload,
)
from workload_gen.core.virtual_stages import stage_chunk, virtual_stage

def layer_key(model: ModelConfig, par: ParallelConfig) -> LayerKey:
    mods = par.recompute_modules if par.recompute == "selective" else ()  # Megatron reads them only then
    return LayerKey(
        tp=par.tp, sp=par.sp, pp=par.pp, vpp=par.vpp, cp=par.cp, cp_comm=par.cp_comm, ep=par.ep,
        etp=par.expert_tp, micro_batch=par.micro_batch, seq_length=par.seq_length, dtype=par.dtype,
        act_bytes=par.param_bytes, grad_bytes=par.grad_bytes,
        # selective recompute of modules without core_attn leaves core attention stored
        recompute="none" if mods and "core_attn" not in mods else par.recompute,
        recompute_method=par.recompute_method, recompute_num_layers=par.recompute_num_layers,
        tp_comm_overlap=par.tp_comm_overlap, vocab_padded=padded_vocab(model, par),
        first_stage_layers=par.first_stage_layers, last_stage_layers=par.last_stage_layers, vshape=par.vshape,
        account_for_embedding_in_pipeline_split=par.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=par.account_for_loss_in_pipeline_split,
        overlap_p2p=par.vpp > 1 and par.overlap_p2p_comm, fp8_recipe=par.fp8_recipe,
        grad_accum_fusion=par.gradient_accumulation_fusion,
        bf16_first=par.bf16_layer_span[0], bf16_last=par.bf16_layer_span[1],
        attention_backend=par.attention_backend,
        moe_capacity_factor=par.moe_expert_capacity_factor, moe_pad_to_capacity=par.moe_pad_expert_input_to_capacity,
        moe_permute_fusion=par.moe_permute_fusion, rope_fusion=par.rope_fusion,
        moe_router_padding=par.moe_router_padding_for_quantization,
        recompute_moe_act="moe_act" in mods,
        recompute_mlp="mlp" in mods,
        recompute_shared_experts="shared_experts" in mods,
        recompute_mla_up_proj="mla_up_proj" in mods,
        recompute_moe="moe" in mods,
        recompute_layernorm="layernorm" in mods,
        moe_flex_backend=par.flex_backend, moe_shared_expert_overlap=par.moe_shared_expert_overlap,
        moe_router_num_groups=par.moe_router_num_groups, moe_router_group_topk=par.moe_router_group_topk,
        moe_rank_load=rank_load_factor(model, par, par.routed_tokens),
    )


def build(model: ModelConfig, parallel: ParallelConfig) -> Workload:
    """The workload of one training iteration of ``model`` under ``parallel``."""
    check_against_model(model, parallel)
    key = layer_key(model, parallel)
    stages = []
    for s in range(parallel.pp):
        chunks = with_amax_reductions(model, parallel, s, _stage_chunks(model, key, s, parallel.pipeline_layout))
        params, dense = stage_params(model, parallel, s)
        stages.append(StageProgram(s, chunks, _iteration_ops(model, parallel, s), params, dense))
    return Workload(model, parallel, tuple(stages), total_params(model))


# --- per-micro-batch programs ---------------------------------------------------------


def _stamp(stamps: tuple[Stamp, ...], layer: int) -> list[Op]:
    """Copies of template ops with their layer index set: the hot loop of build().

    Positional construction from pre-extracted argument tuples is about twice as fast as
    reading each template's attributes (1.1 vs 2.5 us per op, measured)."""
    return [cls(name, layer, *rest) for cls, name, rest in stamps]


@lru_cache(maxsize=32)
def _templates(model: ModelConfig, key: LayerKey) -> tuple[Templates, Templates | None, Templates, Templates]:
    dense = layer_templates(model, key, moe=False)
    moe = layer_templates(model, key, moe=True) if model.is_moe else None
    return dense, moe, embedding_templates(model, key), head_templates(model, key)


@lru_cache(maxsize=32)
def _span_templates(model: ModelConfig, key: LayerKey, span: tuple[str, int], moe: bool) -> Templates:
    """Templates of a layer whose attention is windowed or chunked (GPT-OSS, Llama 4):
    one kind per (span, dense/MoE), built once."""
    return layer_templates(model, key, moe=moe, span=span)


@lru_cache(maxsize=32)
def _hybrid_templates(model: ModelConfig, key: LayerKey, symbol: str) -> Templates:
    """Templates of a hybrid model's layer kind (M, *, -, E), built once per configuration."""
    return layer_templates(model, key, moe=symbol == "E", symbol=symbol)


def _layer_kind(model: ModelConfig, key: LayerKey, layer: int) -> Templates:
    """The templates global layer ``layer`` is built from: dense or MoE, with its attention
    span if one binds (layer_span), or a hybrid model's layer kind."""
    moe = model.is_moe_layer(layer)
    if (key.bf16_first or key.bf16_last) and (layer < key.bf16_first or layer >= model.num_layers - key.bf16_last):
        # Megatron's --first-last-layers-bf16: get_fp8_context / get_fp4_context give these
        # global layers no quantization context, so the layer is built as under bf16
        key = replace(key, dtype="bf16", bf16_first=0, bf16_last=0)
    symbol = model.layer_symbol(layer)
    if symbol is not None:
        return _hybrid_templates(model, key, symbol)
    span = layer_span(model, key, layer)
    if span is not None:
        return _span_templates(model, key, span, moe)
    dense_t, moe_t, _, _ = _templates(model, key)
    return moe_t if moe and moe_t is not None else dense_t


def _recompute_groups(key: LayerKey, layers: tuple[int, ...]) -> list[tuple[tuple[int, ...], bool]]:
    """Split a chunk's layers into backward units: (layers, recomputed?).

    Full/uniform: consecutive groups of recompute_num_layers (default 1), each
    checkpointed as a whole. Full/block: the first recompute_num_layers layers (default
    all) are checkpointed one by one, the rest are not recomputed.
    """
    if key.recompute != "full":
        return [((layer,), False) for layer in layers]
    if key.recompute_method == "uniform":
        n = key.recompute_num_layers or 1
        return [(layers[i:i + n], True) for i in range(0, len(layers), n)]
    n = len(layers) if key.recompute_num_layers is None else key.recompute_num_layers
    return [((layer,), i < n) for i, layer in enumerate(layers)]


@lru_cache(maxsize=64)
def _stage_chunks(model: ModelConfig, key: LayerKey, stage: int, layout: str | None) -> tuple[ChunkProgram, ...]:
    """The chunk programs of one stage. ``layout`` (the pipeline layout string) is not part of
    the LayerKey: it decides only which layers a chunk holds, never how a layer is built.
    A layout may leave a chunk without layers; its pipeline sends then carry the layer
    before it (forward; -1 = the embedding) and after it (backward; num_layers = the head)."""
    _, _, emb_t, head_t = _templates(model, key)
    par_like = _ParView(key, layout)
    nbytes = pp_bytes(model, key)
    head_at = head_chunk(par_like)  # type: ignore[arg-type]
    mtp = _mtp_parts(model, key, par_like)
    chunks = []
    for c in range(key.vpp):
        layers = chunk_layers(model, par_like, stage, c)  # type: ignore[arg-type]
        kind = {layer: _layer_kind(model, key, layer) for layer in layers}
        fwd: list[Op] = []
        bwd: list[Op] = []
        first_chunk = stage == 0 and c == 0
        last_chunk = (stage, c) == head_at
        v = virtual_stage(stage, c, key.pp, key.vshape)
        # DualPipeV's turn at the bottom of the V: the last rank feeds its own chunk 1 (no transfer)
        local_next = key.vshape and stage_chunk(v + 1, key.pp, True)[0] == stage
        local_prev = key.vshape and v > 0 and stage_chunk(v - 1, key.pp, True)[0] == stage
        if first_chunk:
            fwd += _stamp(emb_t.fwd_stamps, -1)
        for layer in layers:
            fwd += _stamp(kind[layer].fwd_stamps, layer)
        mtp_here = mtp is not None and mtp.at == (stage, c)
        if mtp_here:
            fwd += mtp.forward(model.num_layers, head=last_chunk)
        if last_chunk and mtp is not None and not mtp_here:
            fwd += mtp.head_forward(model.num_layers)
        if last_chunk:
            fwd += _stamp(head_t.fwd_stamps, model.num_layers)
        elif not local_next:
            fwd.append(CollectiveOp("pp_send_fwd", layers[-1] if layers else _layer_before(model, par_like, stage, c),
                                    Phase.FWD, CollKind.SEND_RECV, Group.PP, key.pp,
                                    nbytes * mtp.pp_factor(stage, c, 0) if mtp else nbytes, key.overlap_p2p, 1))
        if last_chunk:
            bwd += _stamp(head_t.bwd_stamps, model.num_layers)
        if last_chunk and mtp is not None and not mtp_here:
            bwd += mtp.head_backward(model.num_layers)
        if mtp_here:
            bwd += mtp.backward(model.num_layers, head=last_chunk)
        for group, recomputed in reversed(_recompute_groups(key, layers)):
            if recomputed:
                for layer in group:
                    bwd += _stamp(kind[layer].recompute_stamps, layer)
            for layer in reversed(group):
                bwd += _stamp(kind[layer].bwd_stamps, layer)
        if first_chunk:
            bwd += _stamp(emb_t.bwd_stamps, -1)
        elif not local_prev:
            bwd.append(CollectiveOp("pp_send_bwd", layers[0] if layers else _layer_before(model, par_like, stage, c) + 1,
                                    Phase.BWD_INPUT, CollKind.SEND_RECV, Group.PP, key.pp,
                                    nbytes * mtp.pp_factor(stage, c, 1) if mtp else nbytes, key.overlap_p2p, -1))
        chunks.append(ChunkProgram(stage, c, layers, tuple(fwd), tuple(bwd)))
    return tuple(chunks)


class _MTPParts:
    """The multi-token-prediction module's op stamps (layer_ops.mtp_templates around the
    main model's last layer kind), placed on the chunk params.mtp_chunk picks. Depth k's
    ops carry layer num_layers + 1 + k (the head is num_layers). Megatron-Core runs the
    MTP depths in order after the decoder and, in process_mtp_loss, their output-head
    passes before the main output layer; the backward mirrors it. When a layout puts the
    MTP layers in an earlier virtual stage than the loss ('m|L'), the depths' final norms
    stay with them and the head passes run where the output layer is; the pipeline sends
    in between carry the main and every depth's hidden states, concatenated along the
    sequence (MultiTokenPredictionBlock.forward's torch.cat), 1 + n times the bytes."""

    __slots__ = ("at", "n", "v_at", "vshape", "pp", "before", "layer", "norm_f", "norm_b", "head_f", "head_b", "recompute")

    def __init__(self, model: ModelConfig, key: LayerKey, at: tuple[int, int], layer: Templates) -> None:
        before, after = mtp_templates(model, key)
        self.at, self.n, self.pp = at, model.mtp_num_layers, key.pp
        self.v_at = virtual_stage(at[0], at[1], key.pp, key.vshape)
        self.vshape = key.vshape
        self.before, self.layer = before, layer
        norm = MTP_OP_PREFIX + "final_norm"  # head_templates' final norm, renamed by mtp_templates
        self.norm_f = tuple(s for s in after.fwd_stamps if s[1] == norm)
        self.norm_b = tuple(s for s in after.bwd_stamps if s[1] == norm)
        self.head_f = tuple(s for s in after.fwd_stamps if s[1] != norm)
        self.head_b = tuple(s for s in after.bwd_stamps if s[1] != norm)
        # full recompute, uniform: Megatron's MTP checkpoint (norms, eh_proj, the layer, its
        # final norm) re-runs before the depth's backward; block skips it (multi_token_prediction.py)
        self.recompute: tuple[Stamp, ...] = ()
        if key.recompute == "full" and key.recompute_method == "uniform":
            self.recompute = (before.recompute_stamps + layer.recompute_stamps
                              + tuple(s for s in after.recompute_stamps if s[1] == norm))

    def forward(self, num_layers: int, head: bool) -> list[Op]:
        ops: list[Op] = []
        for k in range(self.n):
            d = num_layers + 1 + k
            ops += _stamp(self.before.fwd_stamps, d) + _stamp(self.layer.fwd_stamps, d) + _stamp(self.norm_f, d)
        return ops + (self.head_forward(num_layers) if head else [])

    def head_forward(self, num_layers: int) -> list[Op]:
        return [op for k in range(self.n) for op in _stamp(self.head_f, num_layers + 1 + k)]

    def head_backward(self, num_layers: int) -> list[Op]:
        return [op for k in reversed(range(self.n)) for op in _stamp(self.head_b, num_layers + 1 + k)]

    def backward(self, num_layers: int, head: bool) -> list[Op]:
        ops: list[Op] = self.head_backward(num_layers) if head else []
        for k in reversed(range(self.n)):
            d = num_layers + 1 + k
            ops += _stamp(self.recompute, d)
            ops += _stamp(self.norm_b, d) + _stamp(self.layer.bwd_stamps, d) + _stamp(self.before.bwd_stamps, d)
        return ops

    def pp_factor(self, stage: int, chunk: int, after: int) -> int:
        """1 + n for a send that carries the MTP depths' hidden states (forward sends from
        the MTP virtual stage on, backward sends from the ones after it), else 1."""
        return 1 + self.n if virtual_stage(stage, chunk, self.pp, self.vshape) >= self.v_at + after else 1


def _mtp_parts(model: ModelConfig, key: LayerKey, par_like: object) -> _MTPParts | None:
    at = mtp_chunk(model, par_like)  # type: ignore[arg-type]
    if at is None:
        return None
    return _MTPParts(model, key, at, _layer_kind(model, key, model.num_layers - 1))


def _layer_before(model: ModelConfig, par_like: object, stage: int, chunk: int) -> int:
    """The last layer of the virtual stages before (stage, chunk) in data-flow order; -1
    (the embedding) when none holds a layer."""
    pp, vshape = par_like.pp, par_like.vshape  # type: ignore[attr-defined]
    for v in reversed(range(virtual_stage(stage, chunk, pp, vshape))):
        layers = chunk_layers(model, par_like, *stage_chunk(v, pp, vshape))  # type: ignore[arg-type]
        if layers:
            return layers[-1]
    return -1


class _ParView:
    """The fields chunk_layers() reads, from a LayerKey (keeps the cache key small)."""

    __slots__ = ("pp", "vpp", "vshape", "first_stage_layers", "last_stage_layers",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "pipeline_layout")

    def __init__(self, key: LayerKey, layout: str | None) -> None:
        self.pipeline_layout = layout
        self.pp, self.vpp, self.vshape = key.pp, key.vpp, key.vshape
        self.first_stage_layers, self.last_stage_layers = key.first_stage_layers, key.last_stage_layers
        self.account_for_embedding_in_pipeline_split = key.account_for_embedding_in_pipeline_split
        self.account_for_loss_in_pipeline_split = key.account_for_loss_in_pipeline_split


# --- once per iteration ---------------------------------------------------------------


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def grad_buckets(model: ModelConfig, par: ParallelConfig, stage: int) -> list[tuple[int, Group, int, int, bool]]:
    """(chunk, group, elements incl. padding, lowest layer, holds fp8 primary weights?) per
    bucket, in ready order.

    With ``fp8_param_gather`` Megatron-Core's DDP keys its buffers on the parameters' storage
    dtype too (``group_params_for_buffers``: ``torch.uint8`` for TE quantized tensors,
    param_and_grad_buffer.py at d98e8a64), so each chunk has up to four buffers, dense/expert
    x fp8/bf16, each bucketed and padded on its own (the same ``bucket_size`` and
    ``lcm(dp, 128)`` end padding, optimizer/param_layout.py); a tensor's fp8 part (TE linear
    weights) and bf16 part (norms, biases, router, embeddings, output layer) go to different
    buffers (:func:`workload_gen.core.params.rank_tensors_fp8`). Megatron merges the bf16
    buckets into the last fp8 bucket group (``partition_buckets``), i.e. issues them
    together; here they stay separate collectives that become ready at the same layer.
    Without it every bucket is bf16 (fifth field False)."""
    cap = par.bucket_elements if par.overlap_grad_reduce else None
    sizes = {Group.DP: par.dp * par.cp, Group.EDP: par.edp}
    fp8 = par.fp8_param_gather or par.fp4_param_gather  # fp4 params are uint8 storage too
    out: list[tuple[int, Group, int, int, bool]] = []
    for c in reversed(range(par.vpp)):
        # (group, fp8?, the field holding the buffer's elements) over the rank's tensors as
        # they come: no per-tensor copy on the common (not fp8) path
        if fp8:
            tensors = rank_tensors_fp8(model, par, stage, c)  # (layer, fp8 elements, bf16 elements, expert)
            buffers = ((Group.DP, True, 1), (Group.DP, False, 2), (Group.EDP, True, 1), (Group.EDP, False, 2))
            expert_at = 3
        else:
            tensors = rank_tensors(model, par, stage, c)  # type: ignore[assignment]  # (layer, elements, expert, sp)
            buffers = ((Group.DP, False, 1), (Group.EDP, False, 1))
            expert_at = 2
        chunk_buckets: list[tuple[int, Group, int, int, bool]] = []
        for group, in_fp8, at in buffers:
            expert = group is Group.EDP
            cur, low = 0, 0
            for t in reversed(tensors):
                if t[expert_at] != expert:
                    continue
                n = t[at]
                if fp8 and not n:
                    continue  # no parameter of this dtype in this tensor
                cur += n
                low = t[0]
                if cap is not None and cur >= cap:
                    chunk_buckets.append((c, group, cur, low, in_fp8))
                    cur = 0
            if cur:
                chunk_buckets.append((c, group, cur, low, in_fp8))
        if model.mtp_num_layers:  # MTP depth k (layer L+1+k) finishes its backward after the head, before layer L-1
            L, n = model.num_layers, model.mtp_num_layers
            chunk_buckets.sort(key=lambda b: -(b[3] if b[3] <= L else L - (n - (b[3] - L - 1)) / (n + 1)))
        else:
            chunk_buckets.sort(key=lambda b: -b[3])  # stable: dense before expert on ties
        if par.distributed_optimizer:
            chunk_buckets = [(c, g, _pad(n, math.lcm(sizes[g], 128)), lo, f) for c, g, n, lo, f in chunk_buckets]
        out += chunk_buckets
    return out


def _iteration_ops(model: ModelConfig, par: ParallelConfig, stage: int) -> tuple[Op, ...]:
    it = Phase.ITERATION
    sizes = {Group.DP: par.dp * par.cp, Group.EDP: par.edp}
    flagged = grad_buckets(model, par, stage)
    first_layer = next((chunk[0] for c in range(par.vpp) if (chunk := chunk_layers(model, par, stage, c))),
                       -1 if stage == 0 else model.num_layers)
    ops: list[Op] = []
    counters: dict[tuple[int, Group], int] = {}
    names = []
    for c, g, _, _, _ in flagged:
        i = counters.get((c, g), 0)
        counters[(c, g)] = i + 1
        names.append(f"{g.value}.{c}.{i}")
    for (c, g, n, low, _), nm in zip(flagged, names):
        if sizes[g] == 1:
            continue
        if par.distributed_optimizer:
            ops.append(CollectiveOp(f"grad_rs.{nm}", low, it, CollKind.REDUCE_SCATTER, g, sizes[g], n * par.grad_bytes,
                                    par.overlap_grad_reduce))
        else:
            ops.append(CollectiveOp(f"grad_ar.{nm}", low, it, CollKind.ALL_REDUCE, g, sizes[g], n * par.grad_bytes,
                                    par.overlap_grad_reduce))
    if par.sp and par.tp > 1:
        sp_n = sum(n for c in range(par.vpp) for _, n, _, sp in rank_tensors(model, par, stage, c) if sp)
        if sp_n:
            ops.append(CollectiveOp("sp_grads_ar", first_layer, it, CollKind.ALL_REDUCE, Group.TP, par.tp,
                                    sp_n * par.grad_bytes))
    head_stage = head_chunk(par)[0]
    if head_stage > 0 and stage in (0, head_stage) and (model.tied_embeddings or model.mtp_num_layers):
        # finalize_model_grads' word-embedding all-reduce over Megatron's embedding group, the
        # first and the last stage (parallel_state.default_embedding_ranks at d98e8a64), of
        # each one's shared_embedding_or_output_weight, with tied embeddings or MTP
        # (_get_shared_word_embedding_weight): on the last stage the MTP rank's word-embedding
        # copy when the MTP layers are on its last chunk and not tied, else the output layer's
        # weight (same shape). An MTP copy on another stage is in no embedding group: not synced.
        emb = padded_vocab(model, par) // par.tp * model.hidden_size
        copy = not model.tied_embeddings and mtp_chunk(model, par) == head_chunk(par)
        layer = -1 if stage == 0 else model.num_layers + 1 if copy else model.num_layers
        ops.append(CollectiveOp("embedding_grad_ar", layer, it, CollKind.ALL_REDUCE, Group.EMB, 2, emb * par.grad_bytes))
    if par.distributed_optimizer:
        local = sum(n // sizes[g] for _, g, n, _, _ in flagged)
    else:
        local = stage_params(model, par, stage)[0]
    held = stage_params(model, par, stage)[0]
    # Megatron's optimizer step around Adam: the gradient norm over this rank's main-grad
    # shard (read once; the clip rescale is fused into Adam; none with --clip-grad 0), then zero_grad of the whole
    # grad buffer (write once), then the step's fixed host work (optimizer bookkeeping,
    # loss and grad-norm reductions' host syncs, timers): shape (0,) = no parameters, a fixed time
    # from the compute profile's per-iteration constant (estimator: step_overhead_s).
    if par.clip_grad > 0:  # Megatron computes the norm only to clip by it
        ops.append(ComputeOp("grad_norm", -1, it, OpKind.ELEMENTWISE, (local, 1), "fp32",
                             *costs.grad_norm(local, par.grad_bytes)))
    fp8_params = par.fp8_param_gather
    per_tensor = fp8_params and par.fp8_recipe != "mxfp8"
    # fp8 primary weights, delayed/tensorwise: the step writes no bf16 weight for them, it casts the shard
    local_fp8 = sum(n // sizes[g] for _, g, n, _, f in flagged if f) if per_tensor else 0
    ops.append(ComputeOp("optimizer", -1, it, OpKind.OPTIMIZER, (local,), "fp32",
                         *costs.adam_step(local, par.optimizer, par.dtype, par.grad_bytes, par.param_bytes,
                                          precision_aware_dtypes(par), local_fp8)))
    if local_fp8:
        ops += _fp8_shard_cast_ops(model, par, stage, local_fp8)
    ops.append(ComputeOp("zero_grad", -1, it, OpKind.ELEMENTWISE, (held, 1), "fp32",
                         *costs.zero_grad(held, par.grad_bytes)))
    if par.dtype == "fp8" and not fp8_params:
        # Transformer Engine casts each weight to fp8 (and its transpose) on the first
        # micro-batch of the step and caches it for the others: once per iteration.
        linear_params = quantized_layer_params(model, par, stage)
        flops, nbytes = costs.fp8_cast(linear_params, 1, par.fp8_recipe)
        ops.append(ComputeOp(FP8_WEIGHT_CAST_OP, -1, it, OpKind.ELEMENTWISE, (linear_params, 1), "bf16", flops, nbytes))
    if par.dtype == "fp4":
        # NVFP4: each weight is quantized once per step (16x16 blocks, row- and column-wise:
        # costs.fp4_cast) and cached for the other micro-batches. With --fp4-param-gather
        # the gathered weight is row-wise NVFP4 already and TE still makes its column-wise
        # copy; the same traffic is counted for it (an upper bound: no bf16 read then).
        linear_params = quantized_layer_params(model, par, stage)
        ops.append(ComputeOp("fp4_weight_cast", -1, it, OpKind.ELEMENTWISE, (linear_params, 1), "bf16",
                             *costs.fp4_cast(linear_params, 1)))
    ops.append(ComputeOp(STEP_OVERHEAD_OP, -1, it, OpKind.OPTIMIZER, (0,), "fp32", 0.0, 0.0))
    if par.distributed_optimizer:
        order = sorted(range(len(flagged)), key=lambda j: (flagged[j][0], flagged[j][3]))
        for j in order:
            c, g, n, low, in_fp8 = flagged[j]
            if sizes[g] == 1:
                continue
            b = 1 if in_fp8 and per_tensor else par.param_bytes  # MXFP8 gathers bf16
            if in_fp8 and par.fp4_param_gather:
                b = costs.FP4_BYTES  # NVFP4: only the packed row-wise e2m1 bytes live in param_data
            ops.append(CollectiveOp(f"param_ag.{names[j]}", low, it, CollKind.ALL_GATHER, g, sizes[g],
                                    n * b, par.overlap_param_gather))
    if fp8_params:
        ops += _fp8_post_gather_ops(model, par, stage, flagged)
    return tuple(ops)


def quantized_layer_params(model: ModelConfig, par: ParallelConfig, stage: int) -> int:
    """The transformer-layer parameters of one rank of ``stage`` whose weights Transformer
    Engine quantizes each step: :func:`stage_layer_params` less the layers
    ``--first-last-layers-bf16`` keeps in bf16 (their share of the stage's layers: the
    stage's layer parameters are spread evenly over its layers, which holds for uniform
    layers and is the stage average otherwise)."""
    held = stage_layer_params(model, par, stage)
    first, last = par.bf16_layer_span
    if not (first or last):
        return held
    layers = [layer for c in range(par.vpp) for layer in chunk_layers(model, par, stage, c)]
    if not layers:
        return held
    kept = sum(1 for layer in layers if layer < first or layer >= model.num_layers - last)
    return held * (len(layers) - kept) // len(layers)


def _fp8_shard_cast_ops(model: ModelConfig, par: ParallelConfig, stage: int, local_fp8: int) -> list[Op]:
    """The optimizer step's cast of this rank's fp32 master shard of the fp8 weights
    (delayed/tensorwise, :func:`workload_gen.costs.fp8_param_shard_cast`), then TE's all-reduce
    (max) of one fp32 amax per fp8 weight tensor over each distributed optimizer's group
    (``packed_amaxes`` in ``_cast_master_weights_to_fp8_{delayed,current}_scaling``, TE
    tensor/utils.py at d0067d0d): Megatron chains a dense and an expert DistributedOptimizer,
    each casting its own parameters over its own group (DP x CP, expert DP)."""
    ops: list[Op] = [ComputeOp("fp8_param_cast", -1, Phase.ITERATION, OpKind.ELEMENTWISE, (local_fp8, 1), "fp32",
                               *costs.fp8_param_shard_cast(local_fp8, par.fp8_recipe))]
    dense, expert = stage_fp8_tensor_counts(model, par, stage)
    for name, group, size, count in (("fp8_amax_ar", Group.DP, par.dp * par.cp, dense),
                                     ("fp8_amax_ar.expert", Group.EDP, par.edp, expert)):
        if count and size > 1:
            ops.append(CollectiveOp(name, -1, Phase.ITERATION, CollKind.ALL_REDUCE, group, size, 4 * count))
    return ops


def _fp8_post_gather_ops(model: ModelConfig, par: ParallelConfig, stage: int,
                         flagged: list[tuple[int, Group, int, int, bool]]) -> list[Op]:
    """What Megatron runs on the fp8 weights after each bucket's all-gather (DDP
    ``_start_bucket_group_param_sync`` -> ``_post_param_sync``, param_and_grad_buffer.py at
    d98e8a64, on every bucket whatever the group size), in place of the per-step weight cast
    (TE's modules take an fp8 weight as it is):

    - delayed/tensorwise (``Float8Tensor``): TE ``post_all_gather_processing``, the transpose
      (:func:`workload_gen.costs.fp8_transpose`) over the rank's whole fp8 weights. Counted as
      on Hopper; Blackwell GPUs skip it (non-TN fp8 GEMMs), which the GPU-agnostic workload
      does not know.
    - mxfp8 with ``--reuse-grad-buf-for-mxfp8-param-ag``: the step wrote the updated shard in
      bf16 into the bucket's ``param_data`` (a bf16 view of the fp32 gradient buffer,
      ``_copy_main_params_to_param_buffer``), the all-gather moved bf16, and now
      ``copy_tensors_to_quantized_params`` re-quantizes each gathered bf16 weight into its
      MXFP8 row- and column-wise copies (the same kernel and bytes as the per-step cast,
      :func:`workload_gen.costs.fp8_cast`), then ``bucket.param_data.zero_()`` clears the
      borrowed gradient buffer: 2 B per (padded) bucket element."""
    dense, expert = stage_fp8_params(model, par, stage)
    held = dense + expert
    it = Phase.ITERATION
    if par.fp8_recipe != "mxfp8":
        return [ComputeOp(FP8_PARAM_TRANSPOSE_OP, -1, it, OpKind.ELEMENTWISE, (held, 1), "fp8",
                          *costs.fp8_transpose(held))]
    padded = sum(n for _, _, n, _, f in flagged if f)
    flops, nbytes = costs.fp8_cast(held, 1, "mxfp8")
    return [ComputeOp("fp8_param_requant", -1, it, OpKind.ELEMENTWISE, (held, 1), "bf16", flops, nbytes),
            ComputeOp("param_buffer_zero", -1, it, OpKind.ELEMENTWISE, (padded, 1), "bf16",
                      *costs.zero_grad(padded, 2))]
