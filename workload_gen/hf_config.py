"""A Hugging Face ``config.json`` onto :class:`~workload_gen.core.model_config.ModelConfig`.

``--hf-config config.json`` (every command with model flags) reads the file a model is
usually held by. Supported ``model_type`` values and the fields read:

- ``llama``, ``mistral`` (Llama 2/3, Mistral): num_hidden_layers, hidden_size,
  num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
  attention_bias, tie_word_embeddings; SwiGLU, RMSNorm, RoPE, no linear biases.
- ``mixtral``: as Llama plus num_local_experts and num_experts_per_tok (every layer MoE,
  experts of intermediate_size).
- ``qwen2``, ``qwen3`` (dense) and ``qwen2_moe``, ``qwen3_moe``: as Llama plus QKV bias
  (Qwen2) or QK-norm (Qwen3); MoE: num_experts, num_experts_per_tok,
  moe_intermediate_size, shared_expert_intermediate_size, and which layers are MoE from
  decoder_sparse_step and mlp_only_layers (leading dense layers, or any per-layer
  pattern as moe_layer_pattern).
- ``deepseek_v2``, ``deepseek_v3``: MLA (q_lora_rank, kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim); n_routed_experts, num_experts_per_tok,
  moe_intermediate_size, n_shared_experts (of moe_intermediate_size each),
  first_k_dense_replace (leading dense layers of intermediate_size), moe_layer_freq 1.
  num_nextn_predict_layers (multi-token prediction, MTP) is counted in the parameter
  count (:attr:`HFModel.total_params`) but not simulated unless asked: the model read holds
  the main layers only (it equals the preset), and a note names ``--mtp-num-layers``.
- ``gpt2`` (n_layer, n_embd, n_head, n_positions, n_inner) and ``gpt_neox``: GELU MLP,
  LayerNorm with biases; learned positions (GPT-2) or RoPE (NeoX).
- rope_scaling of type yarn (any of the Llama-like types): position_embedding yarn with
  its factor, mscale and mscale_all_dim (other types only change RoPE's frequencies).
- ``gpt_oss`` (openai/gpt-oss-*): as Llama plus num_local_experts, num_experts_per_tok,
  experts of intermediate_size with biases (attention_bias), sliding_window and
  layer_types (sliding every layer but each N-th: window_attn_skip_freq N), one attention
  sink per head (softmax_type learnable).
- ``llama4`` / ``llama4_text`` (meta-llama/Llama-4-*; the text_config): num_local_experts,
  num_experts_per_tok, experts and the shared expert of intermediate_size, dense layers of
  intermediate_size_mlp, MoE layers from interleave_moe_layer_step (or moe_layers),
  attention_chunk_size on the RoPE layers and every N-th layer NoPE (no_rope_layers or
  no_rope_layer_interval); use_qk_norm is a weightless L2 norm (no parameters).

A missing field, or an unsupported model_type or value, is one ConfigError naming the
file, the field and the value. A config whose architecture equals a preset gives that
preset (named, not ``custom``).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.model_config import ModelConfig, moe_layer_layout
from workload_gen.core.model_presets import preset_equal_to
from workload_gen.core.yaml_file import check_nesting, read_text_file

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_oss", "llama4",
              "llama4_text")
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
GPT = ("gpt2", "gpt_neox")
SUPPORTED_MODEL_TYPES: tuple[str, ...] = LLAMA_LIKE + DEEPSEEK + GPT


@dataclass(frozen=True)
class HFModel:
    """A model read from a Hugging Face config."""

    model: ModelConfig
    """What is simulated (a preset when the architecture equals one)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules (DeepSeek's num_nextn_predict_layers): counted, not simulated."""
    notes: list[str] = field(default_factory=list)
    """One line each, for stderr (what was counted but not simulated)."""

    @property
    def mtp_params(self) -> int:
        """Parameters of the MTP modules: workload_gen.core.params.mtp_params (the embedding
        and output head are shared with the main model and not counted again)."""
        from dataclasses import replace

        from workload_gen.core.params import mtp_params

        return mtp_params(replace(self.model, mtp_num_layers=self.mtp_layers))

    @property
    def total_params(self) -> int:
        """Main model plus the MTP modules (what the checkpoint holds)."""
        from workload_gen.core.params import total_params

        return total_params(self.model) + self.mtp_params


class _Fields:
    """Reads fields of one config file; every problem names the file, field and value."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data = data
        self.source = source

    def err(self, name: str, value: object, valid: str) -> ConfigError:
        return ConfigError(name, value, valid, self.source)

    def int(self, name: str, default: object = ..., *, minimum: int = 1) -> Any:
        if name not in self.data or self.data[name] is None:
            if default is ...:
                raise self.err(name, None, f"missing from the Hugging Face config (model_type "
                                           f"{self.data.get('model_type')!r} needs it)")
            return default
        value = self.data[name]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.err(name, value, f"must be an integer >= {minimum}")
        return value

    def bool(self, name: str, default: bool) -> bool:
        value = self.data.get(name, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.err(name, value, "must be true or false")
        return value


def read_hf_json(path: str | Path) -> dict[str, Any]:
    text = read_text_file(path)
    check_nesting(text, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(str(path), exc.lineno, f"invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise FormatError(str(path), None, "nested too deeply to read") from None
    if not isinstance(data, dict):
        raise FormatError(str(path), 1, "expected a JSON object (a Hugging Face config.json)")
    return data


def load_hf_config(path: str | Path) -> HFModel:
    """Read ``path`` (a Hugging Face config.json) into the model to simulate."""
    return hf_model_from_dict(read_hf_json(path), str(path))


def hf_model_from_dict(data: Mapping[str, Any], source: str = "<hf config>") -> HFModel:
    # Multimodal wrappers keep the language model under text_config.
    if "text_config" in data and isinstance(data["text_config"], Mapping) and "num_hidden_layers" not in data:
        data = data["text_config"]
    f = _Fields(data, source)
    mtype = data.get("model_type")
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise f.err("model_type", mtype, f"not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    mtp = 0
    try:
        if mtype in LLAMA_LIKE:
            kw = _llama_like(f, mtype)
        elif mtype in DEEPSEEK:
            kw = _deepseek(f)
            mtp = f.int("num_nextn_predict_layers", 0, minimum=0)
        else:
            kw = _gpt(f, mtype)
        model = ModelConfig(name="custom", source=f"{source} (Hugging Face config, model_type {mtype})", **kw)
    except ConfigError as exc:
        if exc.source:
            raise
        raise f.err(exc.field, exc.value, exc.valid) from None
    model = preset_equal_to(model) or model
    hf = HFModel(model, mtp)
    if mtp:
        from workload_gen.core.params import total_params

        hf.notes.append(
            f"note: {source}: num_nextn_predict_layers={mtp} multi-token-prediction module(s) "
            f"({hf.mtp_params / 1e9:.1f}B parameters) are counted ({total_params(model) / 1e9:.1f}B + "
            f"{hf.mtp_params / 1e9:.1f}B = {hf.total_params / 1e9:.1f}B) but not simulated: the workload "
            f"holds the {model.num_layers} main layers only; --mtp-num-layers {mtp} (mtp_num_layers) simulates them")
    return hf


def _heads(f: _Fields) -> tuple[int, int, int]:
    layers = f.int("num_hidden_layers")
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    return layers, hidden, heads


def _llama_like(f: _Fields, mtype: str) -> dict[str, Any]:
    layers, hidden, heads = _heads(f)
    kv = f.int("num_key_value_heads", heads)
    head_dim = f.int("head_dim", None)
    if f.bool("mlp_bias", False):
        raise f.err("mlp_bias", True, "biases on the MLP are not modelled for this model_type")
    kw: dict[str, Any] = dict(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=kv,
        kv_channels=head_dim if head_dim is not None and head_dim * heads != hidden else None,
        ffn_hidden_size=f.int("intermediate_size"), vocab_size=f.int("vocab_size"),
        max_position_embeddings=f.int("max_position_embeddings", 4096),
        activation="swiglu", normalization="rmsnorm", position_embedding="rope", add_bias_linear=False,
        # Qwen2 always has a QKV bias; the others have one when attention_bias is set.
        add_qkv_bias=mtype.startswith("qwen2") or f.bool("attention_bias", False),
        qk_layernorm=mtype.startswith("qwen3"),
        tied_embeddings=f.bool("tie_word_embeddings", False),
    )
    kw.update(_rope_scaling(f))
    if mtype == "mixtral":
        kw.update(num_experts=f.int("num_local_experts"), moe_router_topk=f.int("num_experts_per_tok"))
    elif mtype in ("qwen2_moe", "qwen3_moe"):
        experts = f.int("num_experts")
        kw.update(num_experts=experts, moe_router_topk=f.int("num_experts_per_tok"),
                  moe_ffn_hidden_size=f.int("moe_intermediate_size"),
                  moe_shared_expert_intermediate_size=f.int("shared_expert_intermediate_size", 0, minimum=0),
                  **_moe_layers(f, _qwen_moe_layers(f, layers)))
    elif mtype == "gpt_oss":
        kw.update(_gpt_oss(f, layers))
    elif mtype in ("llama4", "llama4_text"):
        kw.update(_llama4(f, layers))
    return kw


def _rope_scaling(f: _Fields) -> dict[str, Any]:
    """rope_scaling of type yarn (GPT-OSS; Qwen's long-context variants) as position_embedding
    yarn with its factor and, when given, mscale and mscale_all_dim (Hugging Face's yarn
    parameters: without them the attention factor is 0.1 ln factor + 1, as Megatron-Core's
    concentration factor, ModelConfig.rope_cos_sin_scale). Other types (linear, dynamic,
    llama3) only change the frequencies: plain RoPE."""
    rs = f.data.get("rope_scaling")
    if rs is None:
        return {}
    if not isinstance(rs, Mapping):
        raise f.err("rope_scaling", rs, "must be an object (rope_type, factor, ...) or null")
    kind = rs.get("rope_type", rs.get("type"))
    if kind != "yarn":
        return {}
    out: dict[str, Any] = {"position_embedding": "yarn"}
    for key, field_name in (("factor", "yarn_scaling_factor"), ("mscale", "yarn_mscale"),
                            ("mscale_all_dim", "yarn_mscale_all_dim")):
        value = rs.get(key)
        if value is None:
            if key == "factor":
                raise f.err("rope_scaling.factor", None, "missing: yarn needs its scaling factor (a number > 0)")
            continue
        low_ok = key == "mscale_all_dim"  # Megatron's own default for it is 0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 if low_ok else value > 0):
            raise f.err(f"rope_scaling.{key}", value, f"must be a number {'>=' if low_ok else '>'} 0")
        out[field_name] = float(value)
    return out


def _moe_layers(f: _Fields, moe: list[bool]) -> dict[str, Any]:
    """num_dense_layers for 'k dense, then all MoE' (as before), else moe_layer_pattern."""
    if not any(moe):
        raise f.err("num_experts", f.data.get("num_experts"), "no layer is MoE under this config's layer rule")
    layout = moe_layer_layout(tuple(int(x) for x in moe))
    return {"num_dense_layers": layout} if isinstance(layout, int) else {"moe_layer_pattern": layout}


def _qwen_moe_layers(f: _Fields, layers: int) -> list[bool]:
    """Qwen's rule: layer i is MoE when i is not in mlp_only_layers and
    (i + 1) % decoder_sparse_step == 0."""
    step = f.int("decoder_sparse_step", 1)
    only = f.data.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise f.err("mlp_only_layers", only, "must be a list of layer indices")
    return [i not in only and (i + 1) % step == 0 for i in range(layers)]


def _every_nth(f: _Fields, name: str, flags: list[bool]) -> int | None:
    """N such that flags[i] is True exactly when (i + 1) % N == 0 (Megatron's integer form
    of --window-attn-skip-freq / --no-rope-freq), None when no flag is set; another pattern
    is refused by name."""
    if not any(flags):
        return None
    n = flags.index(True) + 1
    if flags != [(i + 1) % n == 0 for i in range(len(flags))]:
        raise f.err(name, f.data.get(name), "not modelled: only 'every N-th layer' patterns are")
    return n


def _gpt_oss(f: _Fields, layers: int) -> dict[str, Any]:
    """GPT-OSS: experts with biases (its MLP's gate_up_proj_bias/down_proj_bias, always
    present, and attention_bias on qkv/o), a sliding window on the layers layer_types marks
    sliding_attention, one learned sink per head (self_attn.sinks, always present)."""
    if not f.bool("attention_bias", True):
        raise f.err("attention_bias", False, "not modelled: GPT-OSS without attention biases (its experts keep theirs)")
    experts = f.int("num_local_experts")
    types = f.data.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]  # HF's default
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"sliding_attention", "full_attention"}:
        raise f.err("layer_types", types, f"must list {layers} of sliding_attention/full_attention")
    window = f.int("sliding_window", None)
    full = [t == "full_attention" for t in types]
    if window is None or all(full):
        window, skip = None, None
    else:
        skip = _every_nth(f, "layer_types", full)
    limit = f.data.get("swiglu_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0):
        raise f.err("swiglu_limit", limit, "must be a number > 0 (the clamp of the gated activation's inputs)")
    return dict(num_experts=experts, moe_router_topk=f.int("num_experts_per_tok", None) or f.int("experts_per_token"),
                add_bias_linear=True, add_qkv_bias=False, window_size=window, window_attn_skip_freq=skip, softmax_type="learnable",
                activation_gate="quick_gelu",  # HF GptOssExperts: gate * sigmoid(alpha * gate), alpha 1.702
                activation_clamp=float(limit) if limit is not None else None)


def _llama4(f: _Fields, layers: int) -> dict[str, Any]:
    """Llama 4's text model: a shared expert of intermediate_size in every MoE layer, dense
    layers of intermediate_size_mlp, chunked attention on the RoPE layers."""
    experts = f.int("num_local_experts")
    width = f.int("intermediate_size")
    step = f.int("interleave_moe_layer_step", 1)
    moe_layers = f.data.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))  # HF Llama4TextConfig's default
    if not isinstance(moe_layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in moe_layers):
        raise f.err("moe_layers", moe_layers, "must be a list of layer indices")
    rope = f.data.get("no_rope_layers")
    if not rope:
        n = f.int("no_rope_layer_interval", 4)
        rope = [int((i + 1) % n != 0) for i in range(layers)]  # HF's default
    if not isinstance(rope, list) or len(rope) != layers or not set(rope) <= {0, 1}:
        raise f.err("no_rope_layers", rope, f"must list {layers} flags of 0 (NoPE) or 1 (RoPE)")
    chunk = f.int("attention_chunk_size", None)
    return dict(ffn_hidden_size=width, dense_ffn_hidden_size=f.int("intermediate_size_mlp", width),
                num_experts=experts, moe_router_topk=f.int("num_experts_per_tok"), moe_ffn_hidden_size=width,
                moe_shared_expert_intermediate_size=width,
                **_moe_layers(f, [i in moe_layers for i in range(layers)]),
                attention_chunk_size=chunk, no_rope_freq=_every_nth(f, "no_rope_layers", [x == 0 for x in rope]))


def _deepseek(f: _Fields) -> dict[str, Any]:
    layers, hidden, heads = _heads(f)
    kw: dict[str, Any] = dict(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        ffn_hidden_size=f.int("intermediate_size"), vocab_size=f.int("vocab_size"),
        max_position_embeddings=f.int("max_position_embeddings", 4096),
        activation="swiglu", normalization="rmsnorm", position_embedding="rope", add_bias_linear=False,
        add_qkv_bias=False, tied_embeddings=f.bool("tie_word_embeddings", False),
        multi_latent_attention=True, q_lora_rank=f.int("q_lora_rank", None), kv_lora_rank=f.int("kv_lora_rank"),
        qk_head_dim=f.int("qk_nope_head_dim"), qk_pos_emb_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )
    if f.bool("attention_bias", False):
        raise f.err("attention_bias", True, "biases on MLA's projections are not modelled")
    experts = f.int("n_routed_experts", 0, minimum=0)
    if experts:
        freq = f.int("moe_layer_freq", 1)
        if freq != 1:
            raise f.err("moe_layer_freq", freq, "only 1 (every layer after first_k_dense_replace is MoE) is modelled")
        width = f.int("moe_intermediate_size")
        kw.update(num_experts=experts, moe_router_topk=f.int("num_experts_per_tok"), moe_ffn_hidden_size=width,
                  moe_shared_expert_intermediate_size=f.int("n_shared_experts", 0, minimum=0) * width,
                  num_dense_layers=f.int("first_k_dense_replace", 0, minimum=0))
    return kw


def _gpt(f: _Fields, mtype: str) -> dict[str, Any]:
    if mtype == "gpt2":
        layers, hidden, heads = f.int("n_layer"), f.int("n_embd"), f.int("n_head")
        inner = f.int("n_inner", None)
        return dict(
            num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
            ffn_hidden_size=inner if inner is not None and inner != 4 * hidden else None,
            vocab_size=f.int("vocab_size"), max_position_embeddings=f.int("n_positions", 1024),
            activation="gelu", normalization="layernorm", position_embedding="learned", add_bias_linear=True,
            tied_embeddings=f.bool("tie_word_embeddings", True),
        )
    layers, hidden, heads = _heads(f)
    inner = f.int("intermediate_size", 4 * hidden)
    return dict(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        ffn_hidden_size=inner if inner != 4 * hidden else None, vocab_size=f.int("vocab_size"),
        max_position_embeddings=f.int("max_position_embeddings", 2048),
        activation="gelu", normalization="layernorm", position_embedding="rope", add_bias_linear=True,
        tied_embeddings=f.bool("tie_word_embeddings", False),
    )
