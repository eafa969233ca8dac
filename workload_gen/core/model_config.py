"""The model architecture: one frozen record, independent of parallelism and system.

Field names follow Megatron-LM's flags (``--num-layers`` -> ``num_layers``) so that a
user's launch arguments map onto it one to one. Validation that involves only the
model lives here; anything that involves the parallel layout lives in
``parallel_config``.
"""
from __future__ import annotations

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
    normalization: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["learned", "rope"] = "learned"
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
    """Width of those leading dense layers; None means ffn_hidden_size."""
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

    # Derived values stay derived (STYLE.md section 2).
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
        return self.is_moe and layer >= self.num_dense_layers

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


MODEL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelConfig))
