"""The model architecture: one frozen record, independent of parallelism and system.

Field names follow Megatron-LM's flags (``--num-layers`` -> ``num_layers``) so that a
user's launch arguments map onto it one to one. Validation that involves only the
model lives here; anything that involves the parallel layout lives in
``parallel_config``.
"""
from __future__ import annotations

import math
from dataclasses import fields
from typing import Literal

from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import MODEL_FIELD_LIMITS, check_fields
from workload_gen.core.record import record


@record(kw_only=True)
class ModelConfig:
    """A transformer's architecture as Megatron describes it (dense, GQA, MoE, MLA): only the
    shapes that decide FLOPs, bytes and parameter counts."""
    name: str = "custom"
    """Preset name or 'custom'; informational only."""
    source: str = ""
    """Where the numbers come from (paper, model card); shown in headers."""
    num_layers: int
    """Transformer layers, dense and MoE together."""
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int | None = None
    """KV heads for GQA/MQA; None means as many as the attention heads (MHA)."""
    kv_channels: int | None = None
    """Per-head dimension; None means hidden_size / num_attention_heads."""
    ffn_hidden_size: int | None = None
    """Dense MLP width; None means 4 * hidden_size."""
    vocab_size: int
    max_position_embeddings: int = 4096
    """Only used for learned absolute position embeddings (GPT-3)."""
    activation: Literal["gelu", "swiglu", "squared_relu"] = "gelu"
    """MLP activation. gelu and squared_relu (relu(x)^2, Nemotron-4) act on one fc1 output of
    width ffn; swiglu gates one half of a 2*ffn fc1 output with the other."""
    activation_gate: Literal["silu", "quick_gelu"] = "silu"
    """The gate of the gated (swiglu-shaped) activation: SiLU (SwiGLU), or quick-GELU,
    x*sigmoid(1.702x) (GPT-OSS; Megatron --quick-geglu, which implies the gated shape). The
    same shapes and passes; but Megatron's fused weighted quick-GEGLU
    (fused_bias_geglu.weighted_bias_quick_geglu_impl, every recipe commit since 0d8e0714) makes
    a device scalar of its linear offset on every call, ``torch.tensor(offset,
    device=cuda)``, a blocking copy: the host waits for the GPU before each expert activation
    and its recompute (engine.host_launch)."""
    activation_clamp: float | None = None
    """Clamp of the gated activation's inputs (Megatron --activation-func-clamp-value; GPT-OSS
    7.0, HF swiglu_limit): Megatron clamps both fc1 halves and concatenates them again in
    separate kernels before its fused GLU (fused_bias_geglu.weighted_bias_quick_geglu_impl),
    extra passes over the fc1 output that workload_gen.costs.glu_clamp charges. None: no clamp."""
    normalization: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rope", "yarn", "none"] = "learned"
    """learned absolute positions (GPT-3), rotary (Llama), rotary with YaRN's scaled frequencies
    (GPT-OSS; Megatron ``--position-embedding-type yarn``, Megatron-Core's YarnRotaryEmbedding:
    RoPE's kernels, see :attr:`rope_cos_sin_scale`), or none: no position signal at all
    (Megatron ``--position-embedding-type none``; Nemotron-H's attention layers, whose Mamba
    layers carry the order)."""
    yarn_scaling_factor: float = 1.0
    """YaRN's context-extension factor s (Megatron --rotary-scaling-factor, Megatron-Bridge
    yarn_rotary_scaling_factor, HF rope_scaling.factor; GPT-OSS 32). Read with
    position_embedding yarn; MLA's RoPE (DeepSeek-V3) takes the same flags for its own kernel."""
    yarn_mscale: float = 1.0
    """YaRN's mscale (Megatron --mscale, default 1.0): with yarn_mscale_all_dim it sets the
    factor RoPE's cos and sin are scaled by (ModelConfig.rope_cos_sin_scale)."""
    yarn_mscale_all_dim: float = 0.0
    """YaRN's mscale_all_dim (Megatron --mscale-all-dim, default 0.0): see yarn_mscale."""
    add_bias_linear: bool = True
    """Biases on the linear layers (GPT-3 has them, Llama does not)."""
    add_qkv_bias: bool = False
    """Bias on the QKV projection only (Qwen2-style)."""
    qk_layernorm: bool = False
    """RMS norm on per-head q and k (Qwen3)."""
    tied_embeddings: bool = True
    """Input embedding and output layer share weights."""
    # --- MoE --------------------------------------------------------------
    num_experts: int = 0
    """Routed experts per MoE layer; 0 means a dense model."""
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    """Width of one routed expert; None means ffn_hidden_size."""
    moe_shared_expert_intermediate_size: int = 0
    """Total width of the shared experts (DeepSeek); 0 means none."""
    num_dense_layers: int = 0
    """Leading dense layers of an MoE model (DeepSeek's first_k_dense_replace)."""
    dense_ffn_hidden_size: int | None = None
    """Width of the dense layers of an MoE model; None means ffn_hidden_size."""
    moe_layer_pattern: tuple[int, ...] | str | None = None
    """Which layers are MoE, one 0 (dense) or 1 (MoE) per layer: Megatron's
    ``--moe-layer-freq`` as a list, e.g. ``([0,1]*24)`` for Llama 4 Maverick (HF
    ``interleave_moe_layer_step: 2``: every other layer, starting with layer 1, is MoE).
    None means "num_dense_layers leading dense layers, then MoE"; a pattern needs
    num_dense_layers = 0. A string is Megatron's list expression (``"([0,1]*24)"``, the YAML
    spelling) or one 0/1 digit per layer (``"0101..."``, what to_dict writes: workload headers
    hold single values); either is stored as the tuple. Unit: one flag per layer."""
    # --- MLA (DeepSeek-V2/V3) ----------------------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    """None means q is projected directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    """The non-rotary part of each q/k head (qk_nope_head_dim)."""
    qk_pos_emb_head_dim: int = 64
    """The rotary part of each q/k head (qk_rope_head_dim)."""
    v_head_dim: int = 128
    # --- attention variants (GPT-OSS, Llama 4) --------------------------------
    window_size: int | None = None
    """Sliding-window attention: each query attends to itself and the ``window_size`` keys
    before it (Megatron's ``--window-size (w,0)``, flash-attn's window_size_left; HF's
    ``sliding_window``, GPT-OSS 128). None means full causal attention. Unit: tokens."""
    window_attn_skip_freq: int | None = None
    """With a window: every N-th layer (1-based, Megatron's ``--window-attn-skip-freq N``)
    keeps full attention, the others use the window; None means every layer is windowed.
    GPT-OSS alternates (HF ``layer_types`` sliding, full, ...): 2. Unit: layers."""
    softmax_type: Literal["vanilla", "off-by-one", "learnable"] = "vanilla"
    """Megatron's ``--softmax-type``. ``learnable`` is GPT-OSS's attention sink: one learned
    logit per head per layer added to the softmax denominator (HF ``self_attn.sinks``,
    shape [num_attention_heads]); it adds ``num_attention_heads`` parameters per layer and
    one exp-add per query row, which is not counted in the kernel costs (under 1/s of the
    softmax's work). ``off-by-one`` adds a constant 1 instead (no parameters)."""
    attention_chunk_size: int | None = None
    """Chunked local attention (Llama 4, HF ``attention_chunk_size`` 8192): a query attends
    causally only within its own chunk of this many tokens, on the layers that use RoPE;
    the NoPE layers (every ``no_rope_freq``-th) attend globally. None means no chunking.
    No Megatron flag. Unit: tokens."""
    no_rope_freq: int | None = None
    """Every N-th layer (1-based) skips RoPE and attends globally (Megatron's
    ``--no-rope-freq N``; Llama 4: 4, HF ``no_rope_layers``). RoPE costs nothing in
    parameters; with ``attention_chunk_size`` it decides which layers are chunked.
    Unit: layers."""
    # --- hybrid Mamba-Transformer (Nemotron-H, Nemotron-3) ------------------------
    hybrid_layer_pattern: str | None = None
    """One symbol per layer (Megatron ``--hybrid-layer-pattern``, formerly
    ``--hybrid-override-pattern``): ``M`` a Mamba layer (norm + Mamba-2 mixer), ``*`` an
    attention-only layer, ``-`` an MLP-only layer, ``E`` an MoE-only layer
    (megatron/core/models/hybrid/hybrid_layer_allocation.py Symbols @d98e8a64); its length
    is num_layers. None: every layer is attention followed by an MLP or MoE (a GPT model).
    Megatron's other symbols (G, D, +) and its ``|`` and ``/`` separators are refused
    (:func:`parse_hybrid_pattern`)."""
    mamba_num_heads: int | None = None
    """Mamba-2 heads (Megatron ``--mamba-num-heads``); None: Megatron's d_inner = 2*hidden
    split into heads of mamba_head_dim (mamba_mixer.py, expand 2)."""
    mamba_head_dim: int = 64
    """Channels per Mamba head (``--mamba-head-dim``, Megatron's default 64)."""
    mamba_state_dim: int = 128
    """SSM state size N per group (``--mamba-state-dim``, default 128)."""
    mamba_num_groups: int = 8
    """Groups sharing one B and C (``--mamba-num-groups``, default 8; like GQA's KV groups)."""
    # --- multi-token prediction (DeepSeek-V3) ----------------------------------
    mtp_num_layers: int = 0
    """Multi-token-prediction modules (Megatron ``--mtp-num-layers``, HF
    ``num_nextn_predict_layers``; DeepSeek-V3's checkpoint has 1). Each holds an embedding
    projection eh_proj (2h -> h), two RMSNorms (enorm, hnorm), one transformer layer like
    the main model's last (MoE in V3) and its own final norm; the embedding and the output
    head are SHARED with the main model and not counted again
    (:func:`workload_gen.core.params.mtp_params`). Simulated on the chunk
    :func:`workload_gen.core.params.mtp_chunk` picks (:func:`workload_gen.layer_ops.mtp_templates`):
    a second embedding lookup, the norms, eh_proj, the layer and a second output-head pass
    and loss per module. Unit: modules."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a positive integer")
        for name in ("num_query_groups", "kv_channels", "ffn_hidden_size", "moe_ffn_hidden_size",
                     "dense_ffn_hidden_size", "q_lora_rank", "max_position_embeddings", "kv_lora_rank",
                     "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "moe_router_topk"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(name, value, "must be a positive integer")
        for name in ("window_size", "window_attn_skip_freq", "attention_chunk_size", "no_rope_freq"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(name, value, "must be a positive integer")
        if not isinstance(self.mtp_num_layers, int) or isinstance(self.mtp_num_layers, bool) or self.mtp_num_layers < 0:
            raise ConfigError("mtp_num_layers", self.mtp_num_layers, "must be an integer >= 0")
        for name, zero_ok in (("yarn_scaling_factor", False), ("yarn_mscale", False), ("yarn_mscale_all_dim", True)):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or value < 0 or (value == 0 and not zero_ok)):
                raise ConfigError(name, value, f"must be a finite number {'>=' if zero_ok else '>'} 0")
        if self.activation_gate not in ("silu", "quick_gelu"):
            raise ConfigError("activation_gate", self.activation_gate, "must be silu or quick_gelu")
        if self.activation_gate == "quick_gelu" and self.activation != "swiglu":
            raise ConfigError("activation_gate", self.activation_gate,
                              f"needs the gated activation (activation swiglu), not {self.activation}")
        if self.softmax_type not in ("vanilla", "off-by-one", "learnable"):
            raise ConfigError("softmax_type", self.softmax_type, "must be vanilla, off-by-one or learnable")
        if self.window_size is not None and self.attention_chunk_size is not None:
            raise ConfigError("window_size", self.window_size, "cannot be combined with attention_chunk_size")
        if self.moe_layer_pattern is not None:
            pattern = self.moe_layer_pattern
            if isinstance(pattern, str):
                pattern = (tuple(int(c) for c in pattern) if pattern and set(pattern) <= {"0", "1"}
                           else parse_layer_pattern("moe_layer_pattern", pattern))
                object.__setattr__(self, "moe_layer_pattern", pattern)
            if isinstance(pattern, list):  # YAML gives a list; the record stays hashable
                pattern = tuple(pattern)
                object.__setattr__(self, "moe_layer_pattern", pattern)
            if (not isinstance(pattern, tuple) or len(pattern) != self.num_layers
                    or any(x not in (0, 1) or isinstance(x, bool) for x in pattern)):
                raise ConfigError("moe_layer_pattern", self.moe_layer_pattern,
                                  f"must be num_layers={self.num_layers} values, each 0 (dense) or 1 (MoE)")
            if not self.num_experts:
                raise ConfigError("moe_layer_pattern", pattern, "only applies to MoE models (num_experts > 0)")
            if 1 not in pattern:
                raise ConfigError("moe_layer_pattern", pattern, "needs at least one MoE layer (1)")
            if self.num_dense_layers:
                raise ConfigError("num_dense_layers", self.num_dense_layers, "must be 0 with moe_layer_pattern")
        self._check_hybrid()
        check_fields(self, MODEL_FIELD_LIMITS)  # before any per-layer work: 10^6 layers ran for minutes
        if self.moe_shared_expert_intermediate_size < 0:
            raise ConfigError("moe_shared_expert_intermediate_size", self.moe_shared_expert_intermediate_size, "must be >= 0")
        if self.num_query_groups is not None:
            if self.num_query_groups < 1 or self.num_attention_heads % self.num_query_groups:
                raise ConfigError(
                    "num_query_groups", self.num_query_groups,
                    f"must divide num_attention_heads={self.num_attention_heads}",
                )
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads and not self.multi_latent_attention:
            raise ConfigError(
                "hidden_size", self.hidden_size,
                f"must be divisible by num_attention_heads={self.num_attention_heads} (or set kv_channels)",
            )
        if self.num_experts < 0:
            raise ConfigError("num_experts", self.num_experts, "must be >= 0")
        if self.num_experts:
            if not 1 <= self.moe_router_topk <= self.num_experts:
                raise ConfigError("moe_router_topk", self.moe_router_topk, f"must be in 1..num_experts={self.num_experts}")
            if not 0 <= self.num_dense_layers < self.num_layers:
                raise ConfigError("num_dense_layers", self.num_dense_layers, f"must be in 0..num_layers-1={self.num_layers - 1}")
        elif self.num_dense_layers:
            raise ConfigError("num_dense_layers", self.num_dense_layers, "only applies to MoE models (num_experts > 0)")

    def _check_hybrid(self) -> None:
        """Validate the hybrid pattern and the Mamba shapes (Megatron's MambaMixer asserts,
        mamba_mixer.py @d98e8a64): heads divide into groups; d_inner = heads*head_dim."""
        for name in ("mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(name, value, "must be a positive integer")
        if self.hybrid_layer_pattern is None:
            return
        symbols = parse_hybrid_pattern(self.hybrid_layer_pattern, self.num_layers)
        if "E" in symbols and not self.num_experts:
            raise ConfigError("hybrid_layer_pattern", symbols, "has MoE layers (E) but num_experts is 0")
        if self.moe_layer_pattern is not None or self.num_dense_layers:
            raise ConfigError("hybrid_layer_pattern", symbols, "decides the MoE layers itself: leave "
                                                               "moe_layer_pattern and num_dense_layers unset")
        if self.mtp_num_layers:
            raise ConfigError("mtp_num_layers", self.mtp_num_layers, "not modelled with a hybrid pattern "
                                                                    "(Megatron gives hybrid MTP layers a pattern of their own)")
        if self.window_size is not None or self.attention_chunk_size is not None:
            raise ConfigError("hybrid_layer_pattern", symbols, "not modelled with sliding-window or chunked attention")
        if self.mamba_heads % self.mamba_num_groups:
            raise ConfigError("mamba_num_groups", self.mamba_num_groups,
                              f"must divide the Mamba heads ({self.mamba_heads})")

    # Derived values stay derived (STYLE.md section 2).
    @property
    def rope_cos_sin_scale(self) -> float:
        """The factor Megatron-Core multiplies RoPE's cos and sin by: YaRN's concentration factor
        (``yarn_rotary_pos_embedding._yarn_get_concentration_factor``, Megatron-LM d98e8a64, the
        same at every recipe commit since 0d8e0714) for position_embedding yarn, else 1. With
        m(s, k) = 0.1 k ln s + 1 for s > 1 (1 otherwise), it is m(s, mscale) / m(s,
        mscale_all_dim): GPT-OSS's s = 32 with Megatron's CLI defaults (1, 0), or with
        Megatron-Bridge's None / None (m(s, 1) alone), gives 1 + 0.1 ln 32 = 1.3466, the
        attention factor YaRN's paper (arXiv 2309.00071, eq. 22: sqrt(1/t) = 0.1 ln s + 1) and
        Hugging Face's default compute. Megatron's ``apply_rotary_pos_emb`` runs Transformer
        Engine's fused RoPE only at 1; any other value takes its unfused eager path
        (rope_utils.py: "mscale ... is not supported by TE's fused RoPE"), which
        workload_gen.costs.rope_unfused prices."""
        if self.position_embedding != "yarn" or self.yarn_scaling_factor <= 1:
            return 1.0

        def m(k: float) -> float:
            return 0.1 * k * math.log(self.yarn_scaling_factor) + 1.0
        return m(self.yarn_mscale) / m(self.yarn_mscale_all_dim)

    @property
    def mamba_heads(self) -> int:
        """Mamba-2 heads: mamba_num_heads, else Megatron's 2*hidden // head_dim."""
        if self.mamba_num_heads is not None:
            return self.mamba_num_heads
        return 2 * self.hidden_size // self.mamba_head_dim

    @property
    def mamba_d_inner(self) -> int:
        """The Mamba mixer's inner width: heads * head_dim (mamba_mixer.py d_inner)."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_in_proj_width(self) -> int:
        """in_proj's output width, [z, x, B, C, dt]: 2*d_inner + 2*groups*state_dim + heads
        (mamba_mixer.py in_proj, @d98e8a64): its parameters and what the layer saves of it."""
        return 2 * self.mamba_d_inner + 2 * self.mamba_num_groups * self.mamba_state_dim + self.mamba_heads

    def layer_symbol(self, layer: int) -> str | None:
        """Global layer ``layer``'s hybrid symbol (M, *, -, E), or None in a GPT model
        (attention then MLP or MoE in every layer)."""
        return None if self.hybrid_layer_pattern is None else self.hybrid_layer_pattern[layer]

    def layer_kind(self, layer: int) -> str:
        """What global layer ``layer`` is built from: "dense" or "moe" in a GPT model
        (attention + MLP or MoE); in a hybrid model its symbol. The one key every per-layer
        cache (templates, tensors, FLOPs) uses."""
        symbol = self.layer_symbol(layer)
        if symbol is not None:
            return symbol
        return "moe" if self.is_moe_layer(layer) else "dense"

    def has_attention(self, layer: int) -> bool:
        """Whether global layer ``layer`` has an attention block."""
        return self.layer_symbol(layer) in (None, "*")

    @property
    def head_dim(self) -> int:
        return self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_query_groups if self.num_query_groups is not None else self.num_attention_heads

    @property
    def qk_dim(self) -> int:
        """Width of one head's query and key vectors: head_dim, or for MLA the non-rotary
        plus the rotary part (qk_head_dim + qk_pos_emb_head_dim, DeepSeek-V2 section 2.1)."""
        return self.qk_head_dim + self.qk_pos_emb_head_dim if self.multi_latent_attention else self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one head's value (and attention output) vector: head_dim, or MLA's v_head_dim."""
        return self.v_head_dim if self.multi_latent_attention else self.head_dim

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    @property
    def dense_ffn(self) -> int:
        return self.dense_ffn_hidden_size if self.dense_ffn_hidden_size is not None else self.ffn

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size if self.moe_ffn_hidden_size is not None else self.ffn

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether global layer ``layer`` (0-based) has an MoE MLP."""
        if self.hybrid_layer_pattern is not None:
            return self.hybrid_layer_pattern[layer] == "E"
        if self.moe_layer_pattern is not None:
            return self.moe_layer_pattern[layer] == 1
        return self.is_moe and layer >= self.num_dense_layers

    @property
    def has_dense_layers(self) -> bool:
        """Whether any layer has a dense MLP."""
        if self.hybrid_layer_pattern is not None:
            return "-" in self.hybrid_layer_pattern
        return not self.is_moe or bool(self.num_dense_layers) or 0 in (self.moe_layer_pattern or ())

    def attention_span(self, layer: int) -> tuple[str, int] | None:
        """How global layer ``layer`` (0-based) restricts causal attention: ("window", w),
        ("chunk", c), or None for full causal attention. Megatron's rules (layer numbers
        1-based): windowed unless ``layer+1`` is a multiple of window_attn_skip_freq
        (megatron/core/transformer/utils.py is_layer_window_attention); chunked unless
        ``layer+1`` is a multiple of no_rope_freq (Llama 4's NoPE layers are global)."""
        if self.window_size is not None:
            skip = self.window_attn_skip_freq
            return None if skip and (layer + 1) % skip == 0 else ("window", self.window_size)
        if self.attention_chunk_size is not None:
            skip = self.no_rope_freq
            return None if skip and (layer + 1) % skip == 0 else ("chunk", self.attention_chunk_size)
        return None

    def to_dict(self) -> dict[str, object]:
        """Every field, except the attention-variant, layer-pattern and MTP fields while at
        their defaults: a model without them writes the same workload header and
        summary.json as before they existed, and readers fill the defaults back in."""
        out = fields_dict(self, _OMIT_AT_DEFAULT)
        if self.moe_layer_pattern is not None:
            # One string of 0/1 digits ("0101..."): file headers hold single JSON values.
            out["moe_layer_pattern"] = "".join(str(x) for x in self.moe_layer_pattern)
        return out


def fields_dict(config: object, omitted_at_default: frozenset[str]) -> dict[str, object]:
    """Every field of a config record by name, except those in ``omitted_at_default`` while
    they hold their default (fields added after the file formats were fixed: files written
    without them stay byte-identical, and readers fill the default back in). The one rule
    behind ModelConfig.to_dict and ParallelConfig.to_dict."""
    return {f.name: getattr(config, f.name) for f in fields(config)  # type: ignore[arg-type]
            if f.name not in omitted_at_default or getattr(config, f.name) != f.default}


def moe_layer_layout(pattern: tuple[int, ...]) -> int | tuple[int, ...]:
    """A per-layer MoE pattern (0 dense, 1 MoE) in its plain spelling: the number of leading
    dense layers (``num_dense_layers``) when it is "k dense, then only MoE", else the pattern
    itself (``moe_layer_pattern``). The one rule for Megatron's --moe-layer-freq, a Hugging
    Face config's MoE layers and the preset match."""
    k = pattern.index(1) if 1 in pattern else len(pattern)
    return k if all(pattern[k:]) else pattern


def parse_layer_pattern(name: str, text: str) -> tuple[int, ...]:
    """A Megatron per-layer pattern (its ``moe_freq_type``/``no_rope_freq_type`` evaluate the
    string as a Python list expression): lists of 0/1, ``+`` between lists and ``*`` by an
    integer, e.g. ``([0]*3+[1]*1)*3``. Evaluated on its syntax tree, nothing else allowed,
    at most MAX_LAYERS entries."""
    import ast  # only for list patterns

    from workload_gen.core.limits import MAX_LAYERS

    def ev(node: ast.AST) -> object:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [ev(e) for e in node.elts]
            if all(type(x) is int and x in (0, 1) for x in items):
                return items
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                out = a + b
            elif isinstance(node.op, ast.Mult) and isinstance(a, list) != isinstance(b, list):
                lst, n = (a, b) if isinstance(a, list) else (b, a)
                if type(n) is not int or n < 0 or len(lst) * n > MAX_LAYERS:
                    raise ValueError
                out = lst * n
            else:
                raise ValueError
            if len(out) > MAX_LAYERS:
                raise ValueError
            return out
        raise ValueError

    try:
        pattern = ev(ast.parse(text, mode="eval"))
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        pattern = None
    if not isinstance(pattern, list) or not pattern:
        raise ConfigError(name, text, "must be a list pattern of 0s and 1s like '([0,1]*24)'")
    return tuple(pattern)


HYBRID_SYMBOLS: dict[str, str] = {"M": "Mamba", "*": "attention", "-": "MLP", "E": "MoE"}
"""The hybrid layer symbols modelled (megatron/core/models/hybrid/hybrid_layer_allocation.py
Symbols @d98e8a64) and what each layer holds."""

_UNMODELLED_SYMBOLS: dict[str, str] = {
    "G": "a Gated DeltaNet layer", "D": "a DeepSeek sparse-attention layer", "+": "an MLA-only layer",
    "|": "a pipeline-stage boundary (give the layout with --pp and --first/--last-stage-layers)",
    "/": "multi-token-prediction layers",
}


def parse_hybrid_pattern(text: str, num_layers: int) -> str:
    """Megatron's hybrid layer pattern, one symbol per layer: checked against the symbols
    modelled (:data:`HYBRID_SYMBOLS`) and the layer count. One ConfigError line for a
    symbol Megatron has but the simulator does not model, an unknown symbol, or a length
    other than ``num_layers`` (Megatron's allocate_layers asserts the same)."""
    if not isinstance(text, str) or not text:
        raise ConfigError("hybrid_layer_pattern", text, "must be a string of layer symbols (M, *, -, E)")
    for ch in text:
        if ch in _UNMODELLED_SYMBOLS:
            raise ConfigError("hybrid_layer_pattern", text, f"not modelled: symbol {ch!r} ({_UNMODELLED_SYMBOLS[ch]}); "
                                                            "modelled: M, *, -, E")
        if ch not in HYBRID_SYMBOLS:
            raise ConfigError("hybrid_layer_pattern", text, f"unknown symbol {ch!r}: valid are M (Mamba), "
                                                            "* (attention), - (MLP), E (MoE)")
    if len(text) != num_layers:
        raise ConfigError("hybrid_layer_pattern", text, f"has {len(text)} symbols; must have num_layers={num_layers}")
    return text


_OMIT_AT_DEFAULT = frozenset({"hybrid_layer_pattern", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim",
                              "mamba_num_groups", "moe_layer_pattern", "window_size", "window_attn_skip_freq", "softmax_type",
                              "attention_chunk_size", "no_rope_freq", "mtp_num_layers", "yarn_scaling_factor", "activation_gate",
                              "yarn_mscale", "yarn_mscale_all_dim"})

MODEL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelConfig))
