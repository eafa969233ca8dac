"""YAML, short flags and Megatron-LM flags give the same configs; bad input is one line, exit 2."""
from __future__ import annotations

import argparse
import textwrap

import pytest

from engine.commands.gen_workload import main
from engine.commands.config_flags import add_config_arguments, configs_from_args
from workload_gen.config_loading import DEFAULT_MODEL, configs_from_dict, load_config_file
from workload_gen.megatron_flags import IGNORED_MEGATRON_FLAGS
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.model_presets import PRESETS


def _from_flags(argv: list[str]):
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    return configs_from_args(p.parse_args(argv))


YAML_70B = """\
model: llama3-70b
parallel:
  world_size: 256
  tp: 8
  sp: true
  pp: 4
  vpp: 2
  ep: 1
  cp: 1
training:
  global_batch: 512
  micro_batch: 1
  seq_length: 4096
  recompute: selective
  distributed_optimizer: true
  dtype: bf16
"""
SHORT_70B = ("--model llama3-70b --tp 8 --pp 4 --vpp 2 --ep 1 --cp 1 --world-size 256 --global-batch 512 "
             "--micro-batch 1 --seq-length 4096 --sp --recompute selective --dist-opt --dtype bf16").split()
MEGATRON_70B = (
    "--model llama3-70b --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
    "--num-layers-per-virtual-pipeline-stage 10 --expert-model-parallel-size 1 --context-parallel-size 1 "
    "--world-size 256 --global-batch-size 512 --micro-batch-size 1 --seq-length 4096 --sequence-parallel "
    "--recompute-granularity selective --use-distributed-optimizer --bf16 "
    "--lr 3e-4 --min-lr 3e-5 --weight-decay 0.1 --use-flash-attn --seed 1234 --save /tmp/ckpt"
).split()


def test_yaml_short_flags_and_megatron_flags_agree(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(YAML_70B)
    from_yaml = load_config_file(path)
    assert from_yaml == _from_flags(SHORT_70B) == _from_flags(MEGATRON_70B) == _from_flags(["-c", str(path)])
    model, par = from_yaml
    assert model == PRESETS["llama3-70b"]
    assert (par.tp, par.pp, par.vpp, par.dp, par.num_microbatches) == (8, 4, 2, 8, 64)


def test_fully_custom_model_from_megatron_launch_arguments_equals_the_preset():
    # Llama-3.1 70B described only by Megatron flags, no preset.
    argv = (
        "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
        "--group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
        "--tensor-model-parallel-size 8 --world-size 8 --global-batch-size 8"
    ).split()
    model, par = _from_flags(argv)
    ref = PRESETS["llama3-70b"]
    assert model.name == "llama3-70b"  # the architecture equals the preset, so it is named
    assert {k: v for k, v in model.to_dict().items() if k not in ("name", "source", "max_position_embeddings")} == \
        {k: v for k, v in ref.to_dict().items() if k not in ("name", "source", "max_position_embeddings")}


def test_nemotron4_from_megatron_flags_equals_the_preset():
    # Nemotron-4 15B described by its Megatron flags: squared ReLU (--squared-relu), LayerNorm.
    argv = (
        "--num-layers 32 --hidden-size 6144 --ffn-hidden-size 24576 --num-attention-heads 48 "
        "--group-query-attention --num-query-groups 8 --vocab-size 256000 --squared-relu --normalization LayerNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
        "--tensor-model-parallel-size 8 --world-size 8 --global-batch-size 8"
    ).split()
    model, _ = _from_flags(argv)
    assert model.name == "nemotron4-15b" and model.activation == "squared_relu"


def test_preset_overrides_trim_a_model():
    model, _ = _from_flags(["--model", "gpt3-175b", "--num-layers", "12"])
    assert model.num_layers == 12 and model.hidden_size == 12288 and "overridden: num_layers" in model.source
    yaml_model, _ = configs_from_dict({"model": {"preset": "gpt3-175b", "num_layers": 12}})
    assert yaml_model == model


def test_megatron_moe_and_mla_flags():
    argv = ("--model deepseek-v2-lite --moe-layer-freq ([0]*1+[1]*26) --num-experts 64 --moe-router-topk 6 "
            "--moe-ffn-hidden-size 1408 --moe-shared-expert-intermediate-size 2816 --multi-latent-attention "
            "--kv-lora-rank 512 --expert-model-parallel-size 8 --world-size 8 --global-batch-size 8 "
            "--moe-token-dispatcher-type alltoall --moe-grouped-gemm").split()
    model, par = _from_flags(argv)
    assert model == PRESETS["deepseek-v2-lite"] and par.ep == 8


def test_batch_settings_may_sit_under_parallel():
    a = configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 8, "global_batch": 64, "seq_length": 4096}})
    b = configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 8},
                           "training": {"global_batch": 64, "seq_length": 4096}})
    assert a == b and a[1].global_batch == 64


def test_flags_override_yaml(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(YAML_70B)
    _, par = _from_flags(["-c", str(path), "--tp", "4", "--no-sp"])
    assert par.tp == 4 and not par.sp
    path.write_text("model: llama3-8b\nparallel: {world_size: 8, global_batch: 64, vpp: 2, pp: 2}\n")
    _, par = _from_flags(["-c", str(path), "--global-batch", "32", "--num-layers-per-virtual-pipeline-stage", "4"])
    assert par.global_batch == 32 and par.vpp == 4


def test_no_arguments_gives_the_default_job():
    model, par = _from_flags([])
    assert model.name == DEFAULT_MODEL and par.world_size == 8 and par.num_microbatches >= 1


def test_world_size_and_batch_default_to_the_smallest_sensible_values():
    _, par = _from_flags(["--model", "gpt3-175b", "--tp", "8", "--pp", "8"])
    assert par.world_size == 64 and par.dp == 1 and par.num_microbatches == 8
    _, par = _from_flags(["--model", "mixtral-8x7b", "--ep", "8"])
    assert par.world_size == 8 and par.dp == 8


def test_every_ignored_flag_is_accepted():
    argv = ["--model", "gpt3-125m"]
    for flag, takes_value in IGNORED_MEGATRON_FLAGS.items():
        argv += [flag, "1"] if takes_value else [flag]
    assert _from_flags(argv)[0] == PRESETS["gpt3-125m"]


BAD = [
    (["--model", "llama3-8b", "--tp", "3"], "num_attention_heads=32 is not divisible by tp"),
    (["--model", "llama3-8b", "--tp", "16"], "num_query_groups=8 is not divisible by tp"),
    (["--model", "gpt3-175b", "--pp", "5", "--world-size", "5"], "num_layers=96 is not divisible by pp"),
    (["--model", "mixtral-8x7b", "--ep", "3", "--world-size", "3"], "num_experts=8 is not divisible by ep"),
    (["--model", "llama3-8b", "--tp", "4", "--world-size", "6"], "must be a multiple of tp*pp*cp"),
    (["--model", "llama3-8b", "--world-size", "8", "--global-batch", "12"], "global_batch=12"),
    (["--model", "mixtral-8x7b", "--ep", "8", "--world-size", "4"], "expert_tp*ep*pp = 8 must divide world_size=4"),
    (["--model", "llama4"], "unknown preset; known: gpt3-125m"),
    (["--model", "mixtral-8x7b", "--tp", "2", "--ep", "2", "--world-size", "4"], "need sequence parallelism"),
    (["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4"], "vocab_size"),
    (["--model", "gpt3-175b", "--seq-length", "4096"], "max_position_embeddings=2048"),
    (["--model", "llama3-8b", "--overlap-param-gather", "--overlap-grad-reduce"], "needs the distributed optimizer"),
    (["--model", "llama3-8b", "--tp", "2", "--tp-comm-overlap"], "needs sequence parallelism"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_configs_exit_2_with_one_line_and_no_output(tmp_path, capsys, argv, message):
    out = tmp_path / "w.txt"
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_unknown_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--tensor-parallel", "8"])
    assert exc.value.code == 2


@pytest.mark.parametrize("text,message", [
    ("model: llama3-8b\nparallel:\n  tp: 2\n  global_bacth: 8\n", "parallel.global_bacth"),
    ("model: llama3-8b\nparallel:\n  seq_length: 8\ntraining:\n  seq_length: 16\n", "conflicts with"),
    ("model: llama3-8b\nparalel:\n  tp: 2\n", "unknown section"),
    ("model: {preset: llama3-8b, hidden: 4}\n", "model.hidden"),
    ("model: llama3-8b\nparallel:\n  tp: two\n", "must be an integer"),
    ("model: llama3-8b\nparallel: [1, 2\n", "invalid YAML"),
])
def test_bad_yaml_names_the_file_and_field(tmp_path, capsys, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises((ConfigError, FormatError), match=message) as exc:
        load_config_file(path)
    assert str(path) in str(exc.value)
    assert main(["-c", str(path), "-o", str(tmp_path / "w.txt")]) == 2
    assert not (tmp_path / "w.txt").exists()
