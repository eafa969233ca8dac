"""--hf-config: Hugging Face config.json files onto ModelConfig, checked against the
published parameter counts (the same total_params the presets' 1% test uses)."""
from __future__ import annotations

import json
import math

import pytest

from engine.commands.gen_workload import main
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.hf_config import hf_model_from_dict, load_hf_config
from workload_gen.core.model_presets import PRESETS, PUBLISHED_PARAMS
from workload_gen.core.params import active_params, total_params

# The public config.json files (values as published on the Hugging Face hub).
LLAMA3_8B = {  # meta-llama/Meta-Llama-3-8B
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 (auto_map and quantization_config left out)
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}
QWEN3_235B = {  # Qwen/Qwen3-235B-A22B
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 94, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 1536, "norm_topk_prob": True, "num_attention_heads": 64, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4, "output_router_logits": False,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
CASES = [("llama3-8b", LLAMA3_8B), ("mixtral-8x7b", MIXTRAL_8X7B), ("deepseek-v3", DEEPSEEK_V3),
         ("qwen3-235b-a22b", QWEN3_235B)]


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.mark.parametrize("preset,config", CASES, ids=[c[0] for c in CASES])
def test_published_parameter_count_and_preset(tmp_path, preset, config):
    hf = load_hf_config(_write(tmp_path, config))
    published = PUBLISHED_PARAMS[preset]
    ours = total_params(hf.model)
    assert abs(ours - published) <= 0.01 * published, f"{preset}: {ours:,} vs {published:,.0f}"
    assert hf.model == PRESETS[preset]
    assert hf.model.name == preset


def test_deepseek_v3_mtp_is_counted_not_simulated(tmp_path):
    hf = load_hf_config(_write(tmp_path, DEEPSEEK_V3))
    assert hf.mtp_layers == 1
    # DeepSeek-V3 README_WEIGHTS.md: the MTP module has 11.5B unique parameters; 671B + MTP is
    # the 685B shown on the model card (which also counts MTP's shared embedding and head).
    assert abs(hf.mtp_params - 11.5e9) <= 0.02 * 11.5e9
    assert abs(hf.total_params - 685e9) <= 0.01 * 685e9
    assert hf.model.num_layers == 61  # the simulated model: main layers only
    assert len(hf.notes) == 1 and "counted" in hf.notes[0] and "not simulated" in hf.notes[0]
    assert abs(active_params(hf.model) - 37e9) <= 0.02 * 37e9


def test_cli_hf_config_names_the_preset_and_notes_mtp(tmp_path, capsys):
    path = _write(tmp_path, DEEPSEEK_V3)
    out = tmp_path / "w.txt"
    assert main(["--hf-config", str(path), "--tp", "2", "--sp", "--ep", "64", "--world-size", "128",
                 "--global-batch", "128", "--seq-length", "4096", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert "deepseek-v3: 671" in cap.err and "not simulated" in cap.err
    path = _write(tmp_path, LLAMA3_8B)
    assert main(["--hf-config", str(path), "--num-layers", "4", "--world-size", "8", "-o", str(out)]) == 0
    assert "llama3-8b" in capsys.readouterr().err  # a preset trimmed by a flag keeps its lineage


def test_qwen2_dense_and_moe_with_shared_experts():
    qwen2 = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": True}
    m = hf_model_from_dict(qwen2).model
    assert m.add_qkv_bias and not m.qk_layernorm and m.tied_embeddings and m.num_query_groups == 2
    moe = dict(qwen2, model_type="qwen2_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
               shared_expert_intermediate_size=128, decoder_sparse_step=1, mlp_only_layers=[0])
    m = hf_model_from_dict(moe).model
    assert (m.num_experts, m.moe_router_topk, m.expert_ffn, m.moe_shared_expert_intermediate_size,
            m.num_dense_layers) == (8, 2, 64, 128, 1)
    # decoder_sparse_step 2: layers 1 and 3 MoE (Qwen's (i + 1) % step == 0), an interleaved pattern.
    m = hf_model_from_dict(dict(moe, decoder_sparse_step=2, mlp_only_layers=[])).model
    assert m.moe_layer_pattern == (0, 1, 0, 1) and m.num_dense_layers == 0


def test_qwen3_dense_head_dim_and_qk_norm():
    m = hf_model_from_dict({"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 1024,
                            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                            "intermediate_size": 3072, "vocab_size": 151936}).model
    assert m.kv_channels == 128 and m.qk_layernorm and not m.add_qkv_bias


def test_rope_scaling_yarn_reads_as_yarn_and_other_types_as_rope():
    """Hugging Face's rope_scaling: type yarn (Qwen3's long-context configs, GPT-OSS) is YaRN
    with its factor and, when given, mscale / mscale_all_dim, whose cos/sin scale decides
    Megatron's RoPE kernel; llama3 / linear / dynamic only change RoPE's frequencies."""
    base = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151936}
    m = hf_model_from_dict(dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 32768})).model
    assert (m.position_embedding, m.yarn_scaling_factor) == ("yarn", 4.0)
    assert m.rope_cos_sin_scale == pytest.approx(0.1 * math.log(4) + 1)  # HF's default attention factor
    same = hf_model_from_dict(dict(base, rope_scaling={"type": "yarn", "factor": 40, "mscale": 1.0,
                                                       "mscale_all_dim": 1.0})).model
    assert same.rope_cos_sin_scale == 1.0  # DeepSeek-style equal mscales: TE's fused RoPE
    for kind in ("llama3", "linear", "dynamic"):
        assert hf_model_from_dict(dict(base, rope_scaling={"rope_type": kind, "factor": 8.0})).model.position_embedding \
            == "rope"
    with pytest.raises(ConfigError, match="rope_scaling.factor"):
        hf_model_from_dict(dict(base, rope_scaling={"rope_type": "yarn"}))
    with pytest.raises(ConfigError, match="rope_scaling.mscale"):
        hf_model_from_dict(dict(base, rope_scaling={"rope_type": "yarn", "factor": 4.0, "mscale": "big"}))


def test_deepseek_v2_lite_equals_the_preset():
    cfg = dict(DEEPSEEK_V3, model_type="deepseek_v2", num_hidden_layers=27, hidden_size=2048,
               num_attention_heads=16, intermediate_size=10944, vocab_size=102400, q_lora_rank=None,
               n_routed_experts=64, num_experts_per_tok=6, moe_intermediate_size=1408, n_shared_experts=2,
               first_k_dense_replace=1, num_nextn_predict_layers=None)
    hf = hf_model_from_dict(cfg)
    assert hf.model == PRESETS["deepseek-v2-lite"] and hf.mtp_layers == 0 and not hf.notes


def test_gpt2_and_neox():
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 2048,
            "vocab_size": 50257, "n_inner": None, "activation_function": "gelu_new"}
    assert hf_model_from_dict(gpt2).model == PRESETS["gpt3-125m"]
    # EleutherAI/pythia-160m style
    neox = {"model_type": "gpt_neox", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
            "intermediate_size": 3072, "vocab_size": 50304, "max_position_embeddings": 2048,
            "tie_word_embeddings": False, "rotary_pct": 0.25}
    m = hf_model_from_dict(neox).model
    assert m.name == "custom" and m.position_embedding == "rope" and m.normalization == "layernorm"
    assert abs(total_params(m) - 162_322_944) <= 0.01 * 162_322_944  # pythia-160m's safetensors total


@pytest.mark.parametrize("data,field", [
    ({"model_type": "bert", "hidden_size": 768}, "model_type='bert'"),
    ({"hidden_size": 768}, "model_type=None"),
    (dict(LLAMA3_8B, hidden_size=None), "hidden_size=None"),
    ({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"}, "num_local_experts=None"),
    (dict(LLAMA3_8B, num_key_value_heads=5), "num_query_groups=5"),
    (dict(LLAMA3_8B, intermediate_size="big"), "intermediate_size='big'"),
])
def test_bad_config_is_one_line_naming_file_field_and_value(tmp_path, capsys, data, field):
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_hf_config(path)
    assert str(path) in str(exc.value) and field in str(exc.value) and "\n" not in str(exc.value)
    assert main(["--hf-config", str(path), "-o", str(tmp_path / "w.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and str(path) in err


def test_invalid_json_and_model_conflict(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  \"model_type\": llama\n}")
    with pytest.raises(FormatError, match=f"{bad}:2: invalid JSON"):
        load_hf_config(bad)
    good = _write(tmp_path, LLAMA3_8B)
    assert main(["--hf-config", str(good), "--model", "llama3-8b", "-o", str(tmp_path / "w.txt")]) == 2
    assert "not both" in capsys.readouterr().err


def test_yaml_and_sweep_base_take_hf_config(tmp_path):
    """sweep has no model flags: its base (like a run YAML) says model: {hf_config: PATH}."""
    from workload_gen.config_loading import configs_from_dict

    path = _write(tmp_path, MIXTRAL_8X7B)
    model, _ = configs_from_dict({"model": {"hf_config": str(path)}, "parallel": {"world_size": 8, "ep": 8}})
    assert model == PRESETS["mixtral-8x7b"]
    model, _ = configs_from_dict({"model": {"hf_config": str(path), "num_layers": 8},
                                  "parallel": {"world_size": 8, "ep": 8}})
    assert model.num_layers == 8 and "overridden: num_layers" in model.source


@pytest.mark.parametrize("cmd", ["gen-workload", "run-analytical", "run-ns3", "search"])
def test_every_command_with_model_flags_lists_hf_config(cmd):
    import subprocess

    p = subprocess.run([cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--hf-config" in p.stdout
