"""Parameter counts: whole model, per pipeline stage and rank, dense versus expert.

Every weight tensor of a Megatron-Core GPT model is listed once, with how it is split
across ranks (see :class:`ParamTensor`). The totals reproduce the published figures
(tests check each preset within 1%); the per-rank numbers drive gradient buckets, the
optimizer step and memory.

Tensor list per transformer layer (numels unsharded; ``h`` hidden, ``a`` heads, ``g``
KV heads, ``d`` head dim, ``F`` MLP width, ``E`` experts, ``Fe`` expert width, ``Fs``
shared-expert width, ``m`` = 2 for SwiGLU (gate and up halves of fc1) else 1):

- input norm: ``h`` (+ ``h`` bias for LayerNorm); replicated over TP
- standard attention: qkv ``h*(a+2g)*d`` (+ bias ``(a+2g)*d``), qk-norms ``2d`` when
  enabled, attention sinks ``a`` (GPT-OSS, softmax_type learnable; split over TP), proj
  ``a*d*h`` (+ bias ``h``, replicated: row-parallel bias)
- MLA (DeepSeek-V2/V3): q down ``h*q_lora`` (replicated), q norm ``q_lora``, q up
  ``q_lora*a*(dn+dr)`` -- or a direct q ``h*a*(dn+dr)`` without q_lora -- kv down
  ``h*(kv_lora+dr)`` (replicated), kv norm ``kv_lora``, kv up ``kv_lora*a*(dn+dv)``,
  proj ``a*dv*h``. Megatron-Core builds the down projections "duplicated" (not split by TP).
- dense MLP: pre-MLP norm, fc1 ``h*m*F`` (+ bias ``m*F``), fc2 ``F*h`` (+ bias ``h``)
- MoE MLP: pre-MLP norm, router ``h*E`` (replicated), experts ``E*(h*m*Fe + Fe*h)`` split
  over ep (whole experts) and expert-TP, shared experts ``h*m*Fs + Fs*h`` split over TP.
- embedding: word ``V*h`` (vocab-parallel), learned positions ``P*h`` (replicated)
- head: final norm ``h``; output layer ``V*h`` when untied. With tied embeddings and
  pp > 1 the last stage holds a second copy of the word embedding for the output layer;
  it is counted per rank (it has gradients and optimizer state) but not in the total.
- MTP depth k (:func:`mtp_tensors`, on the chunk :func:`mtp_chunk` picks, layer
  ``num_layers + 1 + k``): enorm, hnorm, eh_proj ``2h*h`` (column-parallel, no bias), one
  layer like the last, a final norm; off the first chunk the rank also keeps a word-embedding
  copy (:func:`mtp_embedding_copy`). Per rank only: :func:`total_params` is the main model's.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig, pipeline_slots
from workload_gen.core.record import record
from workload_gen.core.virtual_stages import last_chunk, virtual_stage

Shard = Literal["tp", "replicated", "expert"]


@record
class ParamTensor:
    name: str
    numel: int
    """Elements of the whole (unsharded) tensor; for experts, all experts together."""
    shard: Shard
    """tp: split over TP; replicated: a full copy on every TP rank; expert: split over ep*etp."""
    sp_reduce: bool = False
    """Replicated tensor that sees only the local sequence shard under SP, so its gradient
    must be all-reduced over TP (Megatron marks these ``sequence_parallel``)."""


def _norm(model: ModelConfig, name: str, width: int) -> tuple[ParamTensor, ...]:
    ts = [ParamTensor(f"{name}.weight", width, "replicated", True)]
    if model.normalization == "layernorm":
        ts.append(ParamTensor(f"{name}.bias", width, "replicated", True))
    return tuple(ts)


def _linear(model: ModelConfig, name: str, fan_in: int, fan_out: int, kind: Literal["col", "row", "dup"],
            bias: bool | None = None) -> tuple[ParamTensor, ...]:
    """A linear layer: column-parallel splits the output dim (and its bias), row-parallel
    splits the input dim (its bias is replicated), 'dup' is a full copy per TP rank."""
    has_bias = model.add_bias_linear if bias is None else bias
    wshard: Shard = "replicated" if kind == "dup" else "tp"
    ts = [ParamTensor(f"{name}.weight", fan_in * fan_out, wshard, kind == "dup")]
    if has_bias:
        bshard: Shard = "tp" if kind == "col" else "replicated"
        ts.append(ParamTensor(f"{name}.bias", fan_out, bshard, bshard == "replicated"))
    return tuple(ts)


def attention_tensors(model: ModelConfig) -> tuple[ParamTensor, ...]:
    h, a = model.hidden_size, model.num_attention_heads
    ts: list[ParamTensor] = list(_norm(model, "input_norm", h))
    if model.multi_latent_attention:
        dqk = model.qk_dim
        if model.q_lora_rank:
            ts += _linear(model, "q_down", h, model.q_lora_rank, "dup")
            ts += _norm(model, "q_norm", model.q_lora_rank)
            ts += _linear(model, "q_up", model.q_lora_rank, a * dqk, "col")
        else:
            ts += _linear(model, "q_proj", h, a * dqk, "col")
        ts += _linear(model, "kv_down", h, model.kv_lora_rank + model.qk_pos_emb_head_dim, "dup")
        ts += _norm(model, "kv_norm", model.kv_lora_rank)
        ts += _linear(model, "kv_up", model.kv_lora_rank, a * (model.qk_head_dim + model.v_head_dim), "col")
        ts += _linear(model, "proj", a * model.v_head_dim, h, "row")
        return tuple(ts)
    d, g = model.head_dim, model.kv_heads
    ts += _linear(model, "qkv", h, (a + 2 * g) * d, "col", model.add_bias_linear or model.add_qkv_bias)
    if model.qk_layernorm:
        ts += _norm(model, "q_norm", d) + _norm(model, "k_norm", d)
    if model.softmax_type == "learnable":
        # GPT-OSS's attention sinks: one learned logit per head, split with the heads over TP.
        ts.append(ParamTensor("softmax_offset", a, "tp"))
    ts += _linear(model, "proj", a * d, h, "row")
    return tuple(ts)


def _mult(model: ModelConfig) -> int:
    return 2 if model.activation == "swiglu" else 1


def mlp_tensors(model: ModelConfig, moe: bool, ffn: int | None = None) -> tuple[ParamTensor, ...]:
    h, m = model.hidden_size, _mult(model)
    ts: list[ParamTensor] = list(_norm(model, "pre_mlp_norm", h))
    if not moe:
        f = ffn if ffn is not None else model.ffn
        ts += _linear(model, "fc1", h, m * f, "col")
        ts += _linear(model, "fc2", f, h, "row")
        return tuple(ts)
    e, fe = model.num_experts, model.expert_ffn
    ts.append(ParamTensor("router.weight", h * e, "replicated", True))
    per_expert = h * m * fe + fe * h + ((m * fe + h) if model.add_bias_linear else 0)
    ts.append(ParamTensor("experts", e * per_expert, "expert"))
    fs = model.moe_shared_expert_intermediate_size
    if fs:
        ts += _linear(model, "shared_fc1", h, m * fs, "col")
        ts += _linear(model, "shared_fc2", fs, h, "row")
    return tuple(ts)


MAMBA_CONV_KERNEL = 4
"""The Mamba mixer's causal depthwise conv1d width (MambaMixer d_conv=4, mamba_mixer.py
@d98e8a64; Megatron has no flag for it). Unit: tokens."""

MAMBA_CHUNK_SIZE = 128
"""Tokens per chunk of the SSD scan (MambaMixer chunk_size=128, mamba_mixer.py @d98e8a64)."""


def mamba_tensors(model: ModelConfig) -> tuple[ParamTensor, ...]:
    """One Mamba layer's weights (Megatron-Core MambaLayer + MambaMixer, mamba_mixer.py
    @d98e8a64), with ``h`` hidden, ``H`` heads, ``P`` head dim, ``d = H*P`` (d_inner),
    ``G`` groups, ``N`` state size:

    - the layer norm ``h``, fused into in_proj (TELayerNormColumnParallelLinear);
    - in_proj ``h*(2d + 2GN + H)`` to [z, x, B, C, dt], column-parallel (each part split by TP), no bias;
    - conv1d, depthwise over x, B, C: weight ``(d + 2GN)*4`` and bias ``d + 2GN``, split by TP;
    - dt_bias, A_log and D (one per head, D_has_hdim False), split by TP;
    - the gated RMSNorm's weight ``d``, split by TP;
    - out_proj ``d*h``, row-parallel, no bias.

    Megatron asserts bias-free projections (``assert not bias``) whatever --add-bias-linear says.
    The SSM parameters are plain tensors (not a matmul any token passes through as a GEMM):
    named ``mamba.ssm.*`` so the FLOP count leaves them out."""
    h, H, d = model.hidden_size, model.mamba_heads, model.mamba_d_inner
    gn = model.mamba_num_groups * model.mamba_state_dim
    conv = d + 2 * gn
    ts = list(_norm(model, "mamba_norm", h))
    ts += _linear(model, "in_proj", h, model.mamba_in_proj_width, "col", bias=False)
    ts += [ParamTensor("mamba.ssm.conv1d.weight", conv * MAMBA_CONV_KERNEL, "tp"),
           ParamTensor("mamba.ssm.conv1d.bias", conv, "tp"),
           ParamTensor("mamba.ssm.dt_bias", H, "tp"),
           ParamTensor("mamba.ssm.A_log", H, "tp"),
           ParamTensor("mamba.ssm.D", H, "tp"),
           ParamTensor("mamba.ssm.gated_norm.weight", d, "tp")]
    ts += _linear(model, "out_proj", d, h, "row", bias=False)
    return tuple(ts)


@lru_cache(maxsize=4096)
def layer_tensors(model: ModelConfig, layer: int) -> tuple[ParamTensor, ...]:
    """All weights of global layer ``layer`` (0-based), in Megatron registration order. A
    hybrid model's layer holds one block: Mamba, attention, MLP or MoE (its symbol)."""
    moe = model.is_moe_layer(layer)
    ffn = model.dense_ffn if model.is_moe else model.ffn
    symbol = model.layer_symbol(layer)
    if symbol is None:
        return attention_tensors(model) + mlp_tensors(model, moe, ffn)
    if symbol == "M":
        return mamba_tensors(model)
    if symbol == "*":
        return attention_tensors(model)
    return mlp_tensors(model, moe, ffn)


def embedding_tensors(model: ModelConfig, vocab: int) -> tuple[ParamTensor, ...]:
    ts = [ParamTensor("word_embeddings", vocab * model.hidden_size, "tp")]
    if model.position_embedding == "learned":
        ts.append(ParamTensor("position_embeddings", model.max_position_embeddings * model.hidden_size, "replicated"))
    return tuple(ts)


def head_tensors(model: ModelConfig, vocab: int, output_copy: bool) -> tuple[ParamTensor, ...]:
    """Final norm and, when untied (or a tied copy on a separate last stage), the output layer."""
    ts = list(_norm(model, "final_norm", model.hidden_size))
    if not model.tied_embeddings or output_copy:
        ts.append(ParamTensor("output_layer", vocab * model.hidden_size, "tp"))
    return tuple(ts)


# --- totals --------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def param_split(model: ModelConfig) -> tuple[int, int]:
    """(dense, expert) parameters of the whole unsharded model, unpadded vocabulary."""
    dense = sum(t.numel for t in embedding_tensors(model, model.vocab_size))
    dense += sum(t.numel for t in head_tensors(model, model.vocab_size, output_copy=False))
    expert = 0
    kinds: dict[str, tuple[int, int]] = {}
    for layer in range(model.num_layers):
        key = model.layer_kind(layer)
        if key not in kinds:
            ts = layer_tensors(model, layer)
            kinds[key] = (sum(t.numel for t in ts if t.shard != "expert"),
                          sum(t.numel for t in ts if t.shard == "expert"))
        d, e = kinds[key]
        dense += d
        expert += e
    return dense, expert


def total_params(model: ModelConfig) -> int:
    """Whole-model parameter count as papers and model cards report it (the main model:
    MTP modules are counted apart, :func:`mtp_params`, as DeepSeek-V3 reports 671B + 14B)."""
    d, e = param_split(model)
    return d + e


def mtp_params(model: ModelConfig) -> int:
    """Parameters of the ``mtp_num_layers`` multi-token-prediction modules as DeepSeek-V3's
    checkpoint lays them out (arXiv 2412.19437 Sec. 2.2; deepseek-ai/DeepSeek-V3
    README_WEIGHTS.md, layer 61): per module the two RMSNorms enorm and hnorm (h each), the
    projection eh_proj (2h -> h, no bias), one transformer layer like the main model's last
    (MoE in V3) and the shared head's final norm (h). The embedding (embed_tokens) and the
    output head (shared_head.head) are SHARED with the main model: the checkpoint stores
    them again in layer 61, but they are one tensor each in training and are not counted."""
    n = model.mtp_num_layers
    if not n:
        return 0
    return n * sum(t.numel for t in mtp_tensors(model))


def active_params(model: ModelConfig) -> int:
    """Parameters one token passes through: dense plus topk of the routed experts."""
    d, e = param_split(model)
    if not model.is_moe:
        return d
    return d + e * model.moe_router_topk // model.num_experts


# --- per rank ---------------------------------------------------------------------------


def padded_vocab(model: ModelConfig, par: ParallelConfig) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * tp."""
    mult = par.make_vocab_size_divisible_by * par.tp
    return -(-model.vocab_size // mult) * mult


def local_numel(t: ParamTensor, par: ParallelConfig) -> int:
    """Elements of ``t`` held by one rank."""
    if t.shard == "tp":
        return t.numel // par.tp
    if t.shard == "expert":
        return t.numel // (par.ep * par.expert_tp)
    return t.numel


def stage_layer_counts(model: ModelConfig, par: ParallelConfig) -> tuple[int, ...]:
    """Layers per pipeline stage (all chunks together).

    Even split by default; Megatron's --decoder-first/last-pipeline-num-layers give the
    first/last stage their own count and split the rest evenly over the other stages
    (validated in ``check_against_model``); a --pipeline-model-parallel-layout lists them.
    """
    first, last = par.first_stage_layers, par.last_stage_layers
    if par.pipeline_layout is not None or par.account_for_embedding_in_pipeline_split \
            or par.account_for_loss_in_pipeline_split:
        return tuple(sum(len(chunk_layers(model, par, s, c)) for c in range(par.vpp)) for s in range(par.pp))
    if first is None and last is None:
        return (model.num_layers // par.pp,) * par.pp
    middle = par.pp - (first is not None) - (last is not None)
    rest = model.num_layers - (first or 0) - (last or 0)
    each = rest // middle if middle else 0
    counts = [each] * par.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def chunk_layers(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> tuple[int, ...]:
    """Global layers of virtual chunk ``chunk`` on stage ``stage`` (Megatron interleaving:
    chunk c of stage s holds layers starting at (c*pp + s) * L/(pp*vpp)).

    With the embedding and/or loss accounted in the split, they are layer slots: the
    L + e + l slots split evenly over the virtual stages, the embedding's slot is the first
    of virtual stage 0 and the loss's the last of the last virtual stage (Megatron-Core's
    get_num_layers_to_build and get_transformer_layer_offset).

    Uneven first/last stages: each chunk of stage s holds counts[s] / vpp layers and the
    virtual stages are filled in data-flow order (c*pp + s), so chunk c of stage s starts
    at c * sum(counts)/vpp + sum(counts[:s])/vpp (get_transformer_layer_offset's
    interleaved uneven branch). A pipeline layout lists the layers of each virtual stage
    (:mod:`workload_gen.core.pipeline_layout`); a chunk may then hold none. Under DualPipeV the
    virtual stages sit on the ranks in a V (workload_gen.core.virtual_stages)."""
    vshape = par.vshape
    if par.pipeline_layout is not None:
        from workload_gen.core.pipeline_layout import parse_layout

        return parse_layout(par.pipeline_layout, par.pp).layer_ids(stage, chunk, vshape=vshape)
    e = int(par.account_for_embedding_in_pipeline_split)
    if e or par.account_for_loss_in_pipeline_split:
        per = pipeline_slots(model.num_layers, par) // (par.pp * par.vpp)
        v = virtual_stage(stage, chunk, par.pp, vshape)
        return tuple(range(max(v * per - e, 0), min((v + 1) * per - e, model.num_layers)))
    if par.first_stage_layers is not None or par.last_stage_layers is not None:
        per_chunk = [n // par.vpp for n in stage_layer_counts(model, par)]
        start = chunk * sum(per_chunk) + sum(per_chunk[:stage])
        return tuple(range(start, start + per_chunk[stage]))
    per = model.num_layers // (par.pp * par.vpp)
    start = virtual_stage(stage, chunk, par.pp, vshape) * per
    return tuple(range(start, start + per))


def mtp_chunk(model: ModelConfig, par: ParallelConfig) -> tuple[int, int] | None:
    """(stage, chunk) that builds the multi-token-prediction layers, None without them:
    where the layout puts its 'm's, else the last chunk of the last stage, after the
    decoder and before the output layer (Megatron-Core's default: mtp_on_this_rank is the
    last pipeline stage's last virtual stage)."""
    if not model.mtp_num_layers:
        return None
    if par.pipeline_layout is not None:
        from workload_gen.core.pipeline_layout import parse_layout

        return parse_layout(par.pipeline_layout, par.pp).holder("m", vshape=par.vshape)
    return head_chunk(par)


def head_chunk(par: ParallelConfig) -> tuple[int, int]:
    """(stage, chunk) holding the output layer and the loss: the last virtual stage's
    (workload_gen.core.virtual_stages.last_chunk)."""
    return last_chunk(par.pp, par.vpp, par.vshape)


def mtp_tensors(model: ModelConfig) -> tuple[ParamTensor, ...]:
    """The weights of ONE multi-token-prediction depth in Megatron-Core's registration
    order (MultiTokenPredictionLayer @d98e8a64: enorm, hnorm, eh_proj, the transformer
    layer, final_layernorm): eh_proj is a column-parallel 2h -> h linear without bias, the
    layer is the main model's last layer's kind. Their sum is mtp_params' per depth."""
    h = model.hidden_size
    return (_norm(model, "enorm", h) + _norm(model, "hnorm", h)
            + _linear(model, "eh_proj", 2 * h, h, "col", bias=False)
            + layer_tensors(model, model.num_layers - 1) + _norm(model, "mtp_final_norm", h))


def mtp_embedding_copy(model: ModelConfig, par: ParallelConfig) -> bool:
    """Whether the rank holding the MTP layers keeps its own copy of the word embedding:
    Megatron-Core's GPTModel builds an embedding on every model chunk that pre-processes
    or runs MTP (gpt_model.py @d98e8a64: ``if self.pre_process or self.mtp_process``), so
    with the MTP layers on another chunk than the first there is a second copy, kept in
    sync by all-reducing its gradient with the first stage's (finalize_model_grads
    _allreduce_word_embedding_grads). With tied embeddings and the MTP layers on the last
    stage that copy is the output layer's, already counted by head_tensors."""
    at = mtp_chunk(model, par)
    if at is None or at == (0, 0) or (par.vshape and at[0] == 0):
        return False  # on the embedding's rank (DualPipeV's rank 0 holds both ends): no copy
    return not (model.tied_embeddings and par.pp > 1 and at == head_chunk(par))


def _mtp_local(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> list[tuple[int, ParamTensor]]:
    """(layer, tensor) of the MTP module on (stage, chunk): depth k is layer
    num_layers + 1 + k, after the word-embedding copy if the rank keeps one (layer
    num_layers + 1, registered first: its gradient is complete once the MTP backward is)."""
    if mtp_chunk(model, par) != (stage, chunk):
        return []
    out: list[tuple[int, ParamTensor]] = []
    if mtp_embedding_copy(model, par):
        out.append((model.num_layers + 1, ParamTensor("word_embeddings", padded_vocab(model, par) * model.hidden_size,
                                                      "tp")))
    ts = mtp_tensors(model)
    for k in range(model.mtp_num_layers):
        out += [(model.num_layers + 1 + k, t) for t in ts]
    return out


def chunk_tensors(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> list[tuple[int, ParamTensor]]:
    """(layer, tensor) pairs held by one chunk, in registration (forward) order; the
    embedding is layer -1 and the head is layer num_layers."""
    vocab = padded_vocab(model, par)
    out: list[tuple[int, ParamTensor]] = []
    if stage == 0 and chunk == 0:
        out += [(-1, t) for t in embedding_tensors(model, vocab)]
    for layer in chunk_layers(model, par, stage, chunk):
        out += [(layer, t) for t in layer_tensors(model, layer)]
    if model.mtp_num_layers:
        out += _mtp_local(model, par, stage, chunk)
    if (stage, chunk) == head_chunk(par):
        out += [(model.num_layers, t) for t in head_tensors(model, vocab, output_copy=stage > 0)]
    return out


LocalTensor = tuple[int, int, bool, bool]
"""(layer, elements on this rank, is expert, needs the SP gradient all-reduce)."""


@lru_cache(maxsize=256)
def _local_kind(model: ModelConfig, kind: str, tp: int, expert_split: int) -> tuple[tuple[int, bool, bool], ...]:
    layer = next(i for i in range(model.num_layers) if model.layer_kind(i) == kind)
    out = []
    for t in layer_tensors(model, layer):
        n = t.numel // tp if t.shard == "tp" else t.numel // expert_split if t.shard == "expert" else t.numel
        out.append((n, t.shard == "expert", t.sp_reduce))
    return tuple(out)


def rank_tensors(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> list[LocalTensor]:
    """Like :func:`chunk_tensors`, but as one rank's element counts (fast: the builder and
    the gradient buckets call this for every stage)."""
    out: list[LocalTensor] = []
    vocab = padded_vocab(model, par)
    if stage == 0 and chunk == 0:
        out += [(-1, local_numel(t, par), False, t.sp_reduce) for t in embedding_tensors(model, vocab)]
    split = par.ep * par.expert_tp
    kinds = {}
    for layer in chunk_layers(model, par, stage, chunk):
        kind = model.layer_kind(layer)
        if kind not in kinds:
            kinds[kind] = _local_kind(model, kind, par.tp, split)
        out += [(layer, n, e, r) for n, e, r in kinds[kind]]
    if model.mtp_num_layers:
        out += [(layer, local_numel(t, par), t.shard == "expert", t.sp_reduce)
                for layer, t in _mtp_local(model, par, stage, chunk)]
    if (stage, chunk) == head_chunk(par):
        out += [(model.num_layers, local_numel(t, par), False, t.sp_reduce)
                for t in head_tensors(model, vocab, output_copy=stage > 0)]
    return out


def stage_params(model: ModelConfig, par: ParallelConfig, stage: int) -> tuple[int, int]:
    """(params, dense_params) held by one rank of pipeline stage ``stage``."""
    total = dense = 0
    for chunk in range(par.vpp):
        for _, n, expert, _ in rank_tensors(model, par, stage, chunk):
            total += n
            if not expert:
                dense += n
    return total, dense


def stage_layer_params(model: ModelConfig, par: ParallelConfig, stage: int) -> int:
    """Parameters of the transformer layers one rank of ``stage`` holds, without the
    embedding and the output layer: the weights Transformer Engine casts to fp8 (Megatron
    runs the embedding and the output layer in bf16). The workload's once-per-step weight
    cast and the memory of TE's cached fp8 copies both count these.

    Included though TE casts none of them: the norm and router weights and the linear
    biases the layers also hold. Per layer of the presets that is at most 0.05% of the
    parameters for norms and routers and 0.15% with GPT-3's biases (gpt3-125m, the
    smallest); TP replicates norms and routers, so one rank's share can be up to tp times
    that."""
    held = sum(n for chunk in range(par.vpp) for layer, n, _, _ in rank_tensors(model, par, stage, chunk)
               if 0 <= layer < model.num_layers)
    if model.mtp_num_layers and (at := mtp_chunk(model, par)) is not None and at[0] == stage:
        # the MTP depths' eh_proj and layers are Transformer Engine modules too; the
        # word-embedding copy is not
        held += model.mtp_num_layers * sum(local_numel(t, par) for t in mtp_tensors(model))
    return held


# --- fp8 primary weights (--fp8-param-gather) ---------------------------------------------

FP8_LINEARS = frozenset({"qkv", "proj", "q_down", "q_up", "q_proj", "kv_down", "kv_up", "fc1", "fc2",
                         "shared_fc1", "shared_fc2", "eh_proj", "in_proj", "out_proj"})
"""The linear layers Megatron-Core builds as Transformer Engine modules inside the transformer
(and MTP) layers: under ``--fp8-param-gather`` their weights are created inside TE's
``fp8_model_init`` (the Mamba mixer's in_proj and out_proj are TE linears too,
mamba_mixer.py at d98e8a64) (``fp8_utils.get_fp8_context(config, layer_no, is_init=True)`` with
``config.fp8_param`` = ``args.fp8_param_gather``, ``training/argument_utils.py`` at d98e8a64)
and become ``Float8Tensor`` / ``MXFP8Tensor`` parameters. Everything else stays bf16: norm
weights (TE's fused ``layer_norm_weight`` is a plain parameter), linear biases, the router
(a plain ``torch.nn.Parameter`` of ``TopKRouter``), attention sinks, the word/position
embeddings and the output layer (Megatron's own ``ColumnParallelLinear``, not TE)."""


def _fp8_local(model: ModelConfig, par: ParallelConfig, layer: int, t: ParamTensor) -> int:
    """Elements of ``t`` on one rank that are fp8 primary weights (0 for bf16 tensors)."""
    if layer < 0 or layer == model.num_layers:
        return 0  # embedding, final norm, output layer
    if t.shard == "expert":  # TE GroupedLinear weights; the expert biases stay bf16
        weights = model.num_experts * model.hidden_size * model.expert_ffn * (_mult(model) + 1)
        return weights // (par.ep * par.expert_tp)
    name, _, kind = t.name.rpartition(".")
    return local_numel(t, par) if kind == "weight" and name in FP8_LINEARS else 0


def rank_tensors_fp8(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> list[tuple[int, int, int, bool]]:
    """(layer, fp8 elements, bf16 elements, is expert) per tensor one rank holds in ``chunk``,
    in registration order (:func:`chunk_tensors`, the same order as :func:`rank_tensors`):
    Megatron-Core's DDP puts the two parts in different buffers (``group_params_for_buffers``
    keys on ``torch.uint8`` for quantized storage, param_and_grad_buffer.py at d98e8a64)."""
    out = []
    for layer, t in chunk_tensors(model, par, stage, chunk):
        n = local_numel(t, par)
        f = _fp8_local(model, par, layer, t)
        out.append((layer, f, n - f, t.shard == "expert"))
    return out


def stage_fp8_params(model: ModelConfig, par: ParallelConfig, stage: int) -> tuple[int, int]:
    """(dense, expert) fp8 primary-weight elements one rank of ``stage`` holds."""
    dense = expert = 0
    for c in range(par.vpp):
        for _, f, _, is_expert in rank_tensors_fp8(model, par, stage, c):
            if is_expert:
                expert += f
            else:
                dense += f
    return dense, expert


def chunk_fp8_tensor_counts(model: ModelConfig, par: ParallelConfig, stage: int, chunk: int) -> tuple[int, int]:
    """(dense, expert) fp8 weight *tensors* one rank of ``stage`` holds in ``chunk``: one per TE
    linear, and two per local expert (TE ``GroupedLinear`` registers ``weight0..weight{n-1}``
    for fc1 and for fc2; the expert count per rank is num_experts / ep whatever the expert TP).
    Each is also one fp8 GEMM of TE's scaling metadata (``num_gemms``)."""
    dense = expert = 0
    for layer, t in chunk_tensors(model, par, stage, chunk):
        if not _fp8_local(model, par, layer, t):
            continue
        if t.shard == "expert":
            expert += 2 * model.num_experts // par.ep
        else:
            dense += 1
    return dense, expert


def stage_fp8_tensor_counts(model: ModelConfig, par: ParallelConfig, stage: int) -> tuple[int, int]:
    """(dense, expert) fp8 weight tensors one rank of ``stage`` holds over its chunks
    (:func:`chunk_fp8_tensor_counts`)."""
    counts = [chunk_fp8_tensor_counts(model, par, stage, c) for c in range(par.vpp)]
    return sum(d for d, _ in counts), sum(e for _, e in counts)
