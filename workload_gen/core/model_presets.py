"""Built-in model presets: public architectures as frozen :class:`ModelConfig` instances.

Each preset cites where its numbers come from (paper table or the model card's
``config.json``) and carries the published total parameter count in
:data:`PUBLISHED_PARAMS`; ``tests/workload_gen/test_params.py`` checks our own count
(:mod:`workload_gen.core.params`) against it within 1%.

Presets go through the same constructor as user YAML, so a preset can never hold a
value a user could not type. Vocabulary sizes are the tokenizers' real sizes;
Megatron's padding to a multiple of ``make_vocab_size_divisible_by * tp`` is applied
by the workload builder, not here, so that the parameter count matches the paper.
"""
from __future__ import annotations

from dataclasses import replace

from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig, moe_layer_layout

_GPT3_SRC = "Brown et al. 2020, 'Language Models are Few-Shot Learners', arXiv 2005.14165, Table 2.1 (sizes) and Table D.1 (params)"


def _gpt3(name: str, layers: int, hidden: int, heads: int, note: str = "") -> ModelConfig:
    # GPT-3: learned absolute positions (2048), GELU MLP of width 4h, LayerNorm, biases on
    # every linear layer, tied input/output embedding, GPT-2 BPE vocabulary of 50257.
    return ModelConfig(
        name=name, source=_GPT3_SRC + note, num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, vocab_size=50257, max_position_embeddings=2048,
        activation="gelu", normalization="layernorm", position_embedding="learned",
        add_bias_linear=True, tied_embeddings=True,
    )


def _llama(name: str, source: str, layers: int, hidden: int, heads: int, kv: int, ffn: int,
           vocab: int) -> ModelConfig:
    # Llama family: RoPE, RMSNorm, SwiGLU, no biases, untied output layer.
    return ModelConfig(
        name=name, source=source, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_query_groups=kv, ffn_hidden_size=ffn, vocab_size=vocab, activation="swiglu",
        normalization="rmsnorm", position_embedding="rope", add_bias_linear=False, tied_embeddings=False,
    )


def _nemotron4(name: str, source: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(
        name=name, source=source, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_query_groups=8, ffn_hidden_size=4 * hidden, vocab_size=256000, activation="squared_relu",
        normalization="layernorm", position_embedding="rope", add_bias_linear=False, tied_embeddings=False,
    )


_GPT_OSS_SRC = ("gpt-oss-120b & gpt-oss-20b Model Card (arXiv 2508.10925, Table 1); "
                "openai/{name} config.json")


def _gpt_oss(name: str, layers: int, experts: int) -> ModelConfig:
    return ModelConfig(
        name=name, source=_GPT_OSS_SRC.format(name=name), num_layers=layers, hidden_size=2880,
        num_attention_heads=64, num_query_groups=8, kv_channels=64, ffn_hidden_size=2880, vocab_size=201088,
        activation="swiglu", activation_gate="quick_gelu", normalization="rmsnorm", add_bias_linear=True,
        # config.json rope_scaling: yarn, factor 32 (no mscale: the attention factor 0.1 ln 32 + 1)
        position_embedding="yarn", yarn_scaling_factor=32.0,
        tied_embeddings=False, num_experts=experts, moe_router_topk=4,
        window_size=128, window_attn_skip_freq=2, softmax_type="learnable",
        activation_clamp=7.0,  # config.json swiglu_limit
    )


def _llama4(name: str, hf: str, experts: int, pattern: tuple[int, ...] | None) -> ModelConfig:
    return ModelConfig(
        name=name, source=f"meta-llama/{hf} config.json (text_config); Llama 4 model card",
        num_layers=48, hidden_size=5120, num_attention_heads=40, num_query_groups=8, kv_channels=128,
        ffn_hidden_size=8192, dense_ffn_hidden_size=16384, vocab_size=202048, activation="swiglu",
        normalization="rmsnorm", position_embedding="rope", add_bias_linear=False, tied_embeddings=False,
        num_experts=experts, moe_router_topk=1, moe_ffn_hidden_size=8192, moe_shared_expert_intermediate_size=8192,
        moe_layer_pattern=pattern, attention_chunk_size=8192, no_rope_freq=4,
    )


_PRESETS: tuple[ModelConfig, ...] = (
    # GPT-3 paper, Table 2.1 (n_layers, d_model, n_heads) and Table D.1 (parameters).
    _gpt3("gpt3-125m", 12, 768, 12),
    _gpt3("gpt3-350m", 24, 1024, 16),
    _gpt3("gpt3-760m", 24, 1536, 16),
    # Table 2.1 lists 24 heads of d_head 128 for 1.3B, which does not multiply to
    # d_model=2048; we use 16 heads of 128 (as Megatron-LM's GPT-3 1.3B recipes do).
    _gpt3("gpt3-1.3b", 24, 2048, 16, "; 16 heads x 128 (the table's 24 heads do not divide d_model=2048)"),
    _gpt3("gpt3-2.7b", 32, 2560, 32),
    _gpt3("gpt3-6.7b", 32, 4096, 32),
    # Table 2.1 prints d_model=5140, a typo for 5120 = 40 heads x 128 (Table D.1's 12.85B
    # parameters matches 5120).
    _gpt3("gpt3-13b", 40, 5120, 40, "; d_model 5120 (Table 2.1's 5140 is a typo: 40 heads x 128)"),
    _gpt3("gpt3-175b", 96, 12288, 96),
    # Llama 2: Touvron et al. 2023, arXiv 2307.09288; sizes from the HF model cards'
    # config.json (meta-llama/Llama-2-*-hf). Only 70B uses GQA (8 KV heads).
    _llama("llama2-7b", "Llama 2 (arXiv 2307.09288); meta-llama/Llama-2-7b-hf config.json",
           32, 4096, 32, 32, 11008, 32000),
    _llama("llama2-13b", "Llama 2 (arXiv 2307.09288); meta-llama/Llama-2-13b-hf config.json",
           40, 5120, 40, 40, 13824, 32000),
    _llama("llama2-70b", "Llama 2 (arXiv 2307.09288); meta-llama/Llama-2-70b-hf config.json",
           80, 8192, 64, 8, 28672, 32000),
    # Llama 3.1: Dubey et al. 2024, 'The Llama 3 Herd of Models', arXiv 2407.21783, Table 3;
    # meta-llama/Llama-3.1-*/config.json. 128K-token vocabulary (128256).
    _llama("llama3-8b", "Llama 3.1 (arXiv 2407.21783, Table 3); meta-llama/Llama-3.1-8B config.json",
           32, 4096, 32, 8, 14336, 128256),
    _llama("llama3-70b", "Llama 3.1 (arXiv 2407.21783, Table 3); meta-llama/Llama-3.1-70B config.json",
           80, 8192, 64, 8, 28672, 128256),
    _llama("llama3-405b", "Llama 3.1 (arXiv 2407.21783, Table 3); meta-llama/Llama-3.1-405B config.json",
           126, 16384, 128, 8, 53248, 128256),
    # Mixtral: Jiang et al. 2024, 'Mixtral of Experts', arXiv 2401.04088, Table 1;
    # mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1 config.json. 8 experts, top-2,
    # every layer MoE, no shared experts.
    replace(_llama("mixtral-8x7b", "Mixtral (arXiv 2401.04088, Table 1); mistralai/Mixtral-8x7B-v0.1 config.json",
                   32, 4096, 32, 8, 14336, 32000), num_experts=8, moe_router_topk=2),
    replace(_llama("mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1 config.json (Mistral AI, 2024)",
                   56, 6144, 48, 8, 16384, 32000), num_experts=8, moe_router_topk=2),
    # DeepSeek-V2: arXiv 2405.04434 (Section 3.1 and Appendix B for Lite); HF
    # deepseek-ai/DeepSeek-V2(-Lite) config.json. MLA with kv_lora_rank 512, qk nope/rope
    # head dims 128/64, v head dim 128; 2 shared experts of moe_intermediate_size each;
    # first_k_dense_replace=1 leading dense layer.
    ModelConfig(
        name="deepseek-v2-lite", source="DeepSeek-V2 (arXiv 2405.04434, App. B); deepseek-ai/DeepSeek-V2-Lite config.json",
        num_layers=27, hidden_size=2048, num_attention_heads=16, vocab_size=102400,
        ffn_hidden_size=10944, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
        add_bias_linear=False, tied_embeddings=False,
        num_experts=64, moe_router_topk=6, moe_ffn_hidden_size=1408, moe_shared_expert_intermediate_size=2 * 1408,
        num_dense_layers=1,
        multi_latent_attention=True, q_lora_rank=None, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128,
    ),
    ModelConfig(
        name="deepseek-v2", source="DeepSeek-V2 (arXiv 2405.04434, Sec. 3.1); deepseek-ai/DeepSeek-V2 config.json",
        num_layers=60, hidden_size=5120, num_attention_heads=128, vocab_size=102400,
        ffn_hidden_size=12288, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
        add_bias_linear=False, tied_embeddings=False,
        num_experts=160, moe_router_topk=6, moe_ffn_hidden_size=1536, moe_shared_expert_intermediate_size=2 * 1536,
        num_dense_layers=1,
        multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128,
    ),
    # DeepSeek-V3: arXiv 2412.19437 (Sec. 4.2); deepseek-ai/DeepSeek-V3 config.json.
    # 671B main model. The checkpoint also holds 1 multi-token-prediction module
    # (num_nextn_predict_layers = 1): opt in with mtp_num_layers=1, which params.mtp_params
    # counts (11.6B unique; embedding and head shared) and the builder simulates.
    ModelConfig(
        name="deepseek-v3", source="DeepSeek-V3 (arXiv 2412.19437, Sec. 4.2); deepseek-ai/DeepSeek-V3 config.json (MTP module excluded)",
        num_layers=61, hidden_size=7168, num_attention_heads=128, vocab_size=129280,
        ffn_hidden_size=18432, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
        add_bias_linear=False, tied_embeddings=False,
        num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
        num_dense_layers=3,
        multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128,
    ),
    # Qwen3-235B-A22B: Qwen3 Technical Report, arXiv 2505.09388, Table 2; Qwen/Qwen3-235B-A22B
    # config.json. 64 q heads / 4 KV heads of head_dim 128 (64*128 != hidden 4096), QK-norm,
    # 128 experts top-8 of width 1536, no shared experts, untied embeddings.
    replace(_llama("qwen3-235b-a22b", "Qwen3 Technical Report (arXiv 2505.09388, Table 2); Qwen/Qwen3-235B-A22B config.json",
                   94, 4096, 64, 4, 12288, 151936),
            kv_channels=128, qk_layernorm=True, num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=1536),
    # Qwen3-30B-A3B: Qwen3 Technical Report (arXiv 2505.09388, Table 2) and Qwen/Qwen3-30B-A3B
    # config.json: 48 layers, hidden 2048, 32 q / 4 KV heads of head_dim 128, QK-norm,
    # 128 experts top-8 of moe_intermediate_size 768, no shared experts, every layer MoE
    # (decoder_sparse_step 1, mlp_only_layers []), vocab 151936, untied embeddings.
    replace(_llama("qwen3-30b-a3b", "Qwen3 Technical Report (arXiv 2505.09388, Table 2); Qwen/Qwen3-30B-A3B config.json",
                   48, 2048, 32, 4, 6144, 151936),
            kv_channels=128, qk_layernorm=True, num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=768),
    # GPT-OSS: OpenAI, 'gpt-oss-120b & gpt-oss-20b Model Card' (arXiv 2508.10925, Sec. 2.1
    # and Table 1); openai/gpt-oss-120b and openai/gpt-oss-20b config.json: hidden 2880,
    # 64 q / 8 KV heads of head_dim 64, biases on qkv/o and the experts (attention_bias),
    # experts of intermediate_size 2880 (SwiGLU), top-4, vocab 201088, untied; layer_types
    # alternate sliding_attention (sliding_window 128) and full_attention, starting with
    # sliding; one learned attention sink per head (self_attn.sinks).
    _gpt_oss("gpt-oss-120b", 36, 128),
    _gpt_oss("gpt-oss-20b", 24, 32),
    # Llama 4: meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E config.json
    # (text_config): 48 layers, hidden 5120, 40 q / 8 KV heads of 128, experts and the shared
    # expert of intermediate_size 8192, dense layers of intermediate_size_mlp 16384, top-1,
    # vocab 202048, untied; attention_chunk_size 8192 on the RoPE layers, every 4th layer
    # NoPE and global (no_rope_layers); QK norm is a weightless L2 norm (no parameters).
    # Scout: interleave_moe_layer_step 1 (every layer MoE, 16 experts); Maverick: step 2
    # (layers 1, 3, 5, ... MoE, 128 experts), Megatron's --moe-layer-freq ([0,1]*24).
    _llama4("llama4-scout", "Llama-4-Scout-17B-16E", 16, None),
    _llama4("llama4-maverick", "Llama-4-Maverick-17B-128E", 128, (0, 1) * 24),
    # Grok-1: xai-org/grok-1 run.py (LanguageModelConfig: 64 layers, emb_size 48*128 = 6144,
    # 48 q / 8 KV heads of key_size 128, vocab 128*1024, 8 experts, 2 selected, widening_factor
    # 8) and model.py (ffn_size = int(8 * 6144) * 2 // 3 = 32768, rounded to a multiple of 8;
    # gated GELU MLP with three matrices, counted as swiglu's; RMSNorm, RoPE, no biases; the
    # output layer reuses the embedding matrix). Its extra post-attention/post-MoE norms
    # (2h per layer) are not counted (0.0003% of the parameters).
    replace(_llama("grok-1", "xai-org/grok-1 run.py (LanguageModelConfig) and model.py (ffn_size)",
                   64, 6144, 48, 8, 32768, 131072),
            kv_channels=128, tied_embeddings=True, num_experts=8, moe_router_topk=2),
    # Nemotron-4: squared-ReLU MLP of width 4h, RoPE, LayerNorm, GQA with 8 KV heads, no
    # biases, untied embeddings, SentencePiece vocabulary of 256,000.
    _nemotron4("nemotron4-15b", "Nemotron-4 15B Technical Report (arXiv 2402.16819, Table 1)", 32, 6144, 48),
    _nemotron4("nemotron4-340b", "Nemotron-4 340B Technical Report (arXiv 2406.11704, Table 1)", 96, 18432, 96),
    # NVIDIA Nemotron-3 Nano 30B-A3B: hybrid Mamba-Transformer MoE; nvidia/NVIDIA-Nemotron-3-
    # Nano-30B-A3B-BF16 config.json, as Megatron-Bridge's Nemotron3NanoProvider builds it (the
    # recipe args in compute_profile/data/measured/moe_recipes/*nemotron-3-nano*): 52 layers
    # (hybrid_override_pattern: 23 Mamba-2, 23 MoE, 6 attention), hidden 2688, 32 q / 2 KV
    # heads of head_dim 128, no position embedding, RMSNorm, squared-ReLU experts of width
    # 1856, 128 experts top-6 plus a shared expert of 3712, Mamba 64 heads x 64, state 128,
    # 8 groups, no biases, untied embeddings, vocab 131072.
    ModelConfig(
        name="nemotron-3-nano-30b-a3b",
        source="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json; Megatron-Bridge Nemotron3NanoProvider",
        num_layers=52, hidden_size=2688, num_attention_heads=32, num_query_groups=2, kv_channels=128,
        ffn_hidden_size=1856, vocab_size=131072, activation="squared_relu", normalization="rmsnorm",
        position_embedding="none", add_bias_linear=False, tied_embeddings=False,
        num_experts=128, moe_router_topk=6, moe_ffn_hidden_size=1856, moe_shared_expert_intermediate_size=3712,
        hybrid_layer_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        mamba_num_heads=64, mamba_head_dim=64, mamba_state_dim=128, mamba_num_groups=8),
)

PRESETS: dict[str, ModelConfig] = {m.name: m for m in _PRESETS}
"""Preset name -> frozen ModelConfig, in the order above (families, then size)."""

PUBLISHED_PARAMS: dict[str, float] = {
    # GPT-3 Table D.1, "Params (M)".
    "gpt3-125m": 125e6, "gpt3-350m": 356e6, "gpt3-760m": 760e6, "gpt3-1.3b": 1320e6,
    "gpt3-2.7b": 2650e6, "gpt3-6.7b": 6660e6, "gpt3-13b": 12850e6, "gpt3-175b": 174600e6,
    # HF model cards (safetensors parameter totals).
    "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248, "llama3-70b": 70_553_706_496, "llama3-405b": 405_853_388_800,
    "mixtral-8x7b": 46_702_792_704, "mixtral-8x22b": 140_620_634_112,
    # DeepSeek papers / model cards: 15.7B, 236B, 671B total parameters.
    "deepseek-v2-lite": 15.7e9, "deepseek-v2": 236e9, "deepseek-v3": 671e9,
    # Qwen3 report: 235B total, 22B activated.
    "qwen3-235b-a22b": 235e9,
    # Qwen/Qwen3-30B-A3B model card: "Number of Parameters: 30.5B in total and 3.3B activated".
    "qwen3-30b-a3b": 30.5e9,
    # gpt-oss model card (arXiv 2508.10925) Table 1, "Total": 116.83B and 20.91B.
    "gpt-oss-120b": 116.83e9, "gpt-oss-20b": 20.91e9,
    # Llama 4 model card (meta-llama/Llama-4-Scout-17B-16E, -Maverick-17B-128E): 109B and
    # 400B total; these include the vision encoder, which we do not model (see the tests).
    "llama4-scout": 109e9, "llama4-maverick": 400e9,
    # xai-org/grok-1 README: "314B parameters".
    "grok-1": 314e9,
    # Nemotron-4 reports: 3.2B embedding + 12.5B non-embedding; 9.4B + 331.6B.
    "nemotron4-15b": 15.7e9, "nemotron4-340b": 341.0e9,
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 model card: "31.6B total parameters".
    "nemotron-3-nano-30b-a3b": 31.6e9,
}
"""Total parameter counts as the source publishes them (for the 1% test)."""


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


def get_preset(name: str, source: str | None = None) -> ModelConfig:
    """The preset called ``name``; unknown names raise a ConfigError listing the known ones."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ConfigError("model", name, f"unknown preset; known: {', '.join(PRESETS)}", source) from None


def architecture_key(model: ModelConfig) -> tuple[object, ...]:
    """What determines the simulated model, with equivalent spellings made equal: a
    default (None) and the value it stands for (num_query_groups None and = heads,
    ffn_hidden_size None and = 4h, ...); MoE fields of a dense model, MLA fields of a
    standard-attention model and the position-table length of a RoPE model (no table)
    do not count. Name and source never count."""
    mla = model.multi_latent_attention
    moe = model.is_moe
    return (
        model.num_layers, model.hidden_size, model.num_attention_heads, model.vocab_size,
        None if mla else model.kv_heads, None if mla else model.head_dim,
        model.dense_ffn if moe else model.ffn,
        model.max_position_embeddings if model.position_embedding == "learned" else None,
        model.activation, model.activation_gate, model.normalization, model.position_embedding,
        (model.yarn_scaling_factor, model.yarn_mscale, model.yarn_mscale_all_dim)
        if model.position_embedding == "yarn" else None,
        model.add_bias_linear,
        model.add_qkv_bias, model.qk_layernorm, model.tied_embeddings,
        (model.num_experts, model.moe_router_topk, model.expert_ffn, model.moe_shared_expert_intermediate_size,
         _moe_layout(model)) if moe else None,
        (model.q_lora_rank, model.kv_lora_rank, model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim)
        if mla else None,
        # a skip frequency means nothing without its window or chunk
        (model.window_size, model.window_attn_skip_freq) if model.window_size is not None else None,
        (model.attention_chunk_size, model.no_rope_freq) if model.attention_chunk_size is not None else None,
        model.softmax_type, model.mtp_num_layers,
        (model.hybrid_layer_pattern, model.mamba_heads, model.mamba_head_dim, model.mamba_state_dim,
         model.mamba_num_groups) if model.hybrid_layer_pattern is not None else None,
    )


def _moe_layout(model: ModelConfig) -> int | tuple[int, ...]:
    """Which layers are MoE, one spelling per layout (:func:`moe_layer_layout`), whether given
    as num_dense_layers or as a pattern. Cheap for the usual case (no per-layer work without
    a pattern)."""
    p = model.moe_layer_pattern
    return model.num_dense_layers if p is None else moe_layer_layout(p)


def preset_equal_to(model: ModelConfig) -> ModelConfig | None:
    """The preset whose architecture equals ``model``'s (see :func:`architecture_key`), or None."""
    key = architecture_key(model)
    for preset in _PRESETS:
        if architecture_key(preset) == key:
            return preset
    return None
