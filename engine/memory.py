"""Peak memory of one rank per pipeline stage (bytes), part by part.

Static state, per parameter held by the rank (``StageProgram.params``, already sharded
by TP/EP/PP):

- weights: ``ParallelConfig.param_bytes`` (2 for bf16/fp16/fp8 training, which keeps bf16
  weights; 4 for fp32);
- gradients: ``ParallelConfig.grad_bytes``, the main-grad buffer's dtype, the same bytes
  the workload's DP reduction moves: 4 (fp32) when gradients are accumulated and reduced
  in fp32 (Megatron-LM's default for bf16, ``--accumulate-allreduce-grads-in-fp32``), 2
  for fp16 training and for bf16 with that turned off (Megatron-Core's DDP allocates the
  grad buffer in the parameter dtype then). The distributed optimizer reduce-scatters
  inside this full buffer, so it is not sharded;
- optimizer states: Adam's fp32 master copy + m + v = 12 bytes (8 for fp32 training,
  whose weights are the master copy); the distributed optimizer shards them over
  dp*cp for dense parameters and over the expert-DP group for expert parameters.

Activations per micro-batch follow Korthikanti et al. (arXiv 2205.05198, section 4):
for a GPT layer, s*b*h*(34 + 5*a*s/h) bytes, split into the tensors each op saves for
its backward (see :func:`layer_activation_bytes`), which makes the adaptations direct:
TP shards the parts inside attention/MLP (10 + 24/t without SP), SP shards the rest too
(all / t), GQA narrows K and V, SwiGLU stores the doubled FC1 output, MoE stores the
routed tokens (top-k copies) through the expert MLP, CP divides the sequence. With
selective recompute the core-attention part (5*a*s/h) is dropped; with full recompute
a layer keeps only its input (2*s*b*h, /t with SP) plus, while it is recomputed, one
group of layers' full activations.

Attention kernel: ``attention="flash"`` (default; Megatron-Core with Transformer
Engine uses fused/flash attention, which saves the fp32 softmax statistics, 4*a*s*b
bytes, instead of the a*s^2 probabilities) or ``"unfused"`` (the paper's 5*a*s^2*b).
``dropout`` adds the 1-byte masks of attention/hidden dropout (the paper's GPT-3 setup);
off by default, as Llama-style training runs with dropout 0 and ATen skips the mask then.

Micro-batches in flight are counted by walking the stage's pipeline schedule (forward
passes add the chunk's activations, backward passes free them): stage s of 1F1B holds
min(pp - s, m) micro-batches; for interleaving this gives Megatron's factor
(1 + (pp-1)/(pp*vpp)) * pp on the first stage.

Temporary: the largest per-op transient buffer: the loss (bf16 logits + their fp32
copy, (2 + 4) * tokens * vocab/t), the SP all-gathered layer input (2*s*b*h), the
gradients inside a dense MLP's backward (FC2 input and FC1 output, 2*s*b*f*(w+1)/t with
w = 2 for SwiGLU), or the MoE dispatch buffers. Reserved = allocated * 1.06: the caching allocator's
fragmentation; Megatron runs on B200 (../shared/data/real/b200_megatron_measured.csv)
show reserved/allocated between 1.03 and 1.07.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.schedules import SCHEDULES, default_schedule
from workload_gen.model_config import ModelConfig
from workload_gen.parallel_config import ParallelConfig
from workload_gen.records import Workload
from workload_gen.run_result import MemoryEstimate

RESERVED_FACTOR = 1.06


@dataclass(frozen=True, slots=True)
class LayerActivation:
    """Bytes one layer saves for backward for one micro-batch on one rank."""

    core_attention: float
    """The part selective recompute drops (softmax probabilities or flash statistics)."""
    rest: float
    input: float
    """The layer input, which full recompute keeps."""

    @property
    def total(self) -> float:
        return self.core_attention + self.rest


def layer_activation_bytes(
    model: ModelConfig, par: ParallelConfig, layer: int, *,
    attention: Literal["flash", "unfused"] = "flash", dropout: bool = False,
) -> LayerActivation:
    e = 4 if par.dtype == "fp32" else 2
    mask = 1 if dropout else 0
    t = par.tp
    s = par.seq_length // par.cp  # tokens of the sequence on this CP rank
    s_kv = par.seq_length if par.cp > 1 else s  # keys each query sees (ring/all-gather CP)
    b = par.micro_batch
    T = s * b
    h = model.hidden_size
    a = model.num_attention_heads
    sp_div = t if par.sp else 1  # SP shards the replicated parts over TP
    if model.multi_latent_attention:
        q_w, k_w, v_w = a * model.qk_dim, a * model.qk_dim, a * model.v_dim
        o_w = a * model.v_dim
        latent = (model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_pos_emb_head_dim
    else:
        d = model.head_dim
        q_w, k_w, v_w = a * d, model.kv_heads * d, model.kv_heads * d
        o_w = a * d  # attention output: one head_dim vector per query head
        latent = 0
    # --- attention block (Korthikanti 11sbh + 5as^2b for MHA with dropout) ---------
    ln1_in = e * T * h / sp_div
    qkv_in = e * T * h / sp_div
    qk = e * T * (q_w + k_w) / t
    v = e * T * v_w / t
    proj_in = e * T * o_w / t
    lat = e * T * latent / sp_div
    attn_mask = mask * T * h / sp_div
    if attention == "unfused":
        probs = (e + (mask + e if dropout else 0)) * a * s * s_kv * b / t
    else:
        probs = 4 * a * s * b / t  # fp32 log-sum-exp per query and head
    # --- MLP block (19sbh for gelu with ffn = 4h) ---------------------------------
    ln2_in = e * T * h / sp_div
    fc1_in = e * T * h / sp_div
    hid_mask = mask * T * h / sp_div
    width = 2 if model.activation == "swiglu" else 1
    if model.is_moe_layer(layer):
        k = model.moe_router_topk
        etp = par.expert_tp
        routed = T * k * etp / t if par.sp else T * k  # tokens through this rank's experts
        f_e = model.expert_ffn / etp
        mlp = e * T * model.num_experts / sp_div  # router logits
        mlp += e * routed * h  # permuted tokens = expert FC1 input
        mlp += e * routed * f_e * width + e * routed * f_e  # FC1 output, FC2 input
        mlp += e * routed * h  # expert output kept for the weighted combine
        fs = model.moe_shared_expert_intermediate_size
        if fs:
            mlp += e * T * fs * width / t + e * T * fs / t
    else:
        f = model.dense_ffn if model.is_moe else model.ffn
        mlp = e * T * f * width / t + e * T * f / t  # FC1 output (activation input), FC2 input
    rest = ln1_in + qkv_in + qk + v + proj_in + lat + attn_mask + ln2_in + fc1_in + mlp + hid_mask
    return LayerActivation(core_attention=probs, rest=rest, input=e * T * h / sp_div)


def _stage_chunk_activation(
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
    if par.recompute == "none":
        return sum(a.total for a in acts) + extra, 0.0
    if par.recompute == "selective":
        return sum(a.rest for a in acts) + extra, 0.0
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


def _in_flight_peak(workload: Workload, stage: int, per_chunk: dict[int, float], schedule: str) -> float:
    """Walk the schedule: forwards add the chunk's activations, backwards free them."""
    par = workload.parallel
    steps = SCHEDULES.get(schedule)(par.pp, par.vpp, par.num_microbatches, stage)
    held = peak = 0.0
    for st in steps:
        if st.forward:
            held += per_chunk[st.chunk]
            peak = max(peak, held)
        else:
            held -= per_chunk[st.chunk]
    return peak


def _temporary(workload: Workload, stage: int) -> float:
    model, par = workload.model, workload.parallel
    e = 4 if par.dtype == "fp32" else 2
    T = par.seq_length // par.cp * par.micro_batch
    h = model.hidden_size
    temp = 0.0
    if par.sp:
        temp = e * T * h  # the all-gathered input of QKV / FC1
    layers = {op.layer for ch in workload.stages[stage].chunks for op in ch.forward}
    width = 2 if model.activation == "swiglu" else 1
    dense = [layer for layer in layers if 0 <= layer < model.num_layers and not model.is_moe_layer(layer)]
    if dense:
        # Backward of a dense MLP: gradients of the FC2 input and of the FC1 output coexist.
        f = model.dense_ffn if model.is_moe else model.ffn
        temp = max(temp, e * T * f * (width + 1) / par.tp)
    if model.num_layers in layers:
        temp = max(temp, (e + 4) * T * model.vocab_size / par.tp)
    if any(model.is_moe_layer(layer) for layer in layers if 0 <= layer < model.num_layers):
        k = model.moe_router_topk
        tokens = T * k * par.expert_tp / par.tp if par.sp else T * k
        temp = max(temp, 2 * e * tokens * h)  # all-to-all send and receive buffers
    return temp


def estimate_memory(
    workload: Workload, *, schedule: str | None = None,
    attention: Literal["flash", "unfused"] = "flash", dropout: bool = False,
) -> tuple[MemoryEstimate, ...]:
    """One :class:`MemoryEstimate` per pipeline stage (its rank's peak, in bytes)."""
    par = workload.parallel
    sched = schedule or default_schedule(par.vpp)
    opt_bytes = 8 if par.dtype == "fp32" else 12
    out = []
    for prog in workload.stages:
        dense, expert = prog.dense_params, prog.params - prog.dense_params
        if par.distributed_optimizer:
            opt = opt_bytes * dense / (par.dp * par.cp) + opt_bytes * expert / par.edp
        else:
            opt = opt_bytes * prog.params
        parts = {
            ch.chunk: _stage_chunk_activation(workload, prog.stage, ch.chunk, attention=attention, dropout=dropout)
            for ch in prog.chunks
        }
        # Held activations of the micro-batches in flight, plus (full recompute) the one
        # group being recomputed, which exists once whatever the number in flight.
        acts = _in_flight_peak(workload, prog.stage, {c: p[0] for c, p in parts.items()}, sched)
        acts += max(p[1] for p in parts.values())
        out.append(MemoryEstimate(
            stage=prog.stage,
            weights=par.param_bytes * prog.params,
            gradients=par.grad_bytes * prog.params,
            optimizer_states=int(round(opt)),
            activations=int(round(acts)),
            temporary=int(round(_temporary(workload, prog.stage))),
            reserved_factor=RESERVED_FACTOR,
        ))
    return tuple(out)
