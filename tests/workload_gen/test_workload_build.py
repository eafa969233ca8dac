"""Every preset builds for a sensible layout; execution-order properties of the programs."""
from __future__ import annotations

import subprocess
import sys

import pytest
from wg_helpers import make

from formats.native import read_native
from engine.commands.gen_workload import main
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.records import CollectiveOp, ComputeOp, OpKind, Phase

# A layout each model is commonly trained with (scaled down in DP where that changes nothing).
SENSIBLE = {
    "gpt3-125m": dict(world_size=8, global_batch=64),
    "gpt3-350m": dict(world_size=8, global_batch=64),
    "gpt3-760m": dict(world_size=8, global_batch=64),
    "gpt3-1.3b": dict(world_size=8, tp=2, global_batch=64),
    "gpt3-2.7b": dict(world_size=8, tp=2, global_batch=64),
    "gpt3-6.7b": dict(world_size=16, tp=4, sp=True, global_batch=64),
    "gpt3-13b": dict(world_size=32, tp=8, sp=True, global_batch=64),
    "gpt3-175b": dict(world_size=1024, tp=8, pp=8, sp=True, global_batch=1536),
    "llama2-7b": dict(world_size=8, tp=2, sp=True, global_batch=32, seq_length=4096, distributed_optimizer=True),
    "llama2-13b": dict(world_size=16, tp=4, sp=True, global_batch=32, seq_length=4096, distributed_optimizer=True),
    "llama2-70b": dict(world_size=64, tp=8, pp=4, sp=True, global_batch=64, seq_length=4096, distributed_optimizer=True),
    "llama3-8b": dict(world_size=8, tp=2, sp=True, global_batch=32, seq_length=8192, distributed_optimizer=True),
    "llama3-70b": dict(world_size=128, tp=8, pp=4, vpp=5, cp=2, sp=True, global_batch=64, seq_length=8192,
                       distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True),
    "llama3-405b": dict(world_size=224, tp=8, pp=7, vpp=2, cp=2, sp=True, global_batch=28, seq_length=8192,
                        distributed_optimizer=True, recompute="selective"),
    "mixtral-8x7b": dict(world_size=64, tp=2, sp=True, ep=8, pp=2, global_batch=64, seq_length=4096,
                         distributed_optimizer=True),
    "mixtral-8x22b": dict(world_size=256, tp=4, sp=True, ep=8, pp=4, global_batch=256, seq_length=4096,
                          distributed_optimizer=True),
    "deepseek-v2-lite": dict(world_size=8, ep=8, global_batch=32, seq_length=4096),
    "deepseek-v2": dict(world_size=128, tp=2, sp=True, ep=16, pp=4, global_batch=128, seq_length=4096,
                        distributed_optimizer=True, recompute="full"),
    "deepseek-v3": dict(world_size=128, tp=2, sp=True, ep=64, global_batch=128, seq_length=4096,
                        distributed_optimizer=True),
    "qwen3-235b-a22b": dict(world_size=64, tp=4, sp=True, ep=8, pp=2, global_batch=64, seq_length=4096,
                            distributed_optimizer=True),
    "qwen3-30b-a3b": dict(world_size=16, ep=8, global_batch=64, seq_length=4096, distributed_optimizer=True),
    "gpt-oss-120b": dict(world_size=64, ep=64, global_batch=128, seq_length=4096, distributed_optimizer=True),
    "gpt-oss-20b": dict(world_size=8, ep=8, global_batch=32, seq_length=4096),
    "llama4-scout": dict(world_size=64, tp=4, sp=True, ep=16, global_batch=64, seq_length=8192,
                         distributed_optimizer=True),
    "llama4-maverick": dict(world_size=128, tp=4, sp=True, ep=8, pp=4, global_batch=64, seq_length=16384,
                            distributed_optimizer=True),
    "grok-1": dict(world_size=256, tp=8, sp=True, ep=8, pp=4, global_batch=64, seq_length=8192,
                   distributed_optimizer=True),
    "nemotron4-15b": dict(world_size=16, tp=2, sp=True, global_batch=32, seq_length=4096, distributed_optimizer=True),
    "nemotron4-340b": dict(world_size=256, tp=8, pp=8, vpp=12, sp=True, global_batch=64, seq_length=4096,
                           distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True),
    "nemotron-3-nano-30b-a3b": dict(world_size=16, ep=8, pp=2, global_batch=64, seq_length=8192,
                                    distributed_optimizer=True),
}


def test_the_table_covers_every_preset():
    assert set(SENSIBLE) == set(PRESETS)


def _check_programs(w):
    L = w.model.num_layers
    seen: list[int] = []
    for st in w.stages:
        for ch in st.chunks:
            seen += ch.layers
            fwd_layers = [op.layer for op in ch.forward]
            assert fwd_layers == sorted(fwd_layers)
            assert set(fwd_layers) <= set(ch.layers) | {-1, L}
            real_bwd = [op for op in ch.backward if op.phase != Phase.RECOMPUTE]
            bwd_layers = [op.layer for op in real_bwd]
            assert bwd_layers == sorted(bwd_layers, reverse=True)  # backward reverses forward
            # Each forward GEMM has one dgrad and one wgrad with the transposed shapes.
            fwd_gemms = {(op.name, op.layer): op.shape for op in ch.forward
                         if isinstance(op, ComputeOp) and op.kind == OpKind.GEMM}
            for (name, layer), (m, n, k) in fwd_gemms.items():
                d = [op.shape for op in real_bwd if op.name == name and op.layer == layer and op.phase == Phase.BWD_INPUT]
                g = [op.shape for op in real_bwd if op.name == name and op.layer == layer and op.phase == Phase.BWD_WEIGHT]
                assert d == [(m, k, n)] and g == [(k, n, m)], (name, layer)
            # Recomputed ops of a layer run before that layer's backward and after the
            # backward of every later layer.
            for i, op in enumerate(ch.backward):
                if op.phase == Phase.RECOMPUTE:
                    later = ch.backward[i + 1:]
                    assert any(o.layer == op.layer and o.phase != Phase.RECOMPUTE for o in later)
                    earlier = ch.backward[:i]
                    assert all(o.layer >= op.layer for o in earlier if o.phase != Phase.RECOMPUTE)
    assert sorted(seen) == list(range(L))


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_for_a_sensible_layout(name):
    w = make(name, **SENSIBLE[name])
    assert w.params_total > 0 and len(w.stages) == w.parallel.pp
    _check_programs(w)
    for st in w.stages:
        assert 0 < st.dense_params <= st.params
        assert any(op.kind == OpKind.OPTIMIZER for op in st.iteration if isinstance(op, ComputeOp))


@pytest.mark.parametrize("recompute", [
    dict(recompute="full", recompute_method="uniform", recompute_num_layers=2),
    dict(recompute="full", recompute_method="block", recompute_num_layers=1),
    dict(recompute="selective"),
])
def test_recompute_order(recompute):
    w = make("llama2-7b", world_size=8, tp=2, sp=True, pp=2, vpp=2, global_batch=16, cp=2, seq_length=4096, **recompute)
    _check_programs(w)
    assert any(op.phase == Phase.RECOMPUTE for _, _, op in w.ops())


def test_uniform_recompute_reruns_a_group_before_its_layers_backward():
    w = make("llama2-7b", world_size=1, global_batch=1, recompute="full", recompute_num_layers=4)
    ch = w.stages[0].chunks[0]
    first = [(op.layer, op.phase == Phase.RECOMPUTE) for op in ch.backward if op.layer in (28, 29, 30, 31)]
    # Head backward first, then layers 28..31 re-run forward in order, then their backward 31..28.
    rec = [layer for layer, r in first if r]
    bwd = [layer for layer, r in first if not r]
    assert rec == sorted(rec) and set(rec) == {28, 29, 30, 31}
    assert bwd == sorted(bwd, reverse=True)
    assert first.index((31, False)) > max(i for i, (_, r) in enumerate(first) if r)


def test_recompute_includes_the_collectives_of_the_rerun_forward():
    w = make("llama2-7b", world_size=8, tp=8, sp=True, global_batch=8, recompute="full")
    rec = [op for op in w.stages[0].chunks[0].backward if op.phase == Phase.RECOMPUTE and op.layer == 5]
    assert [op.name for op in rec if isinstance(op, CollectiveOp)] == ["qkv_ag", "proj_rs", "fc1_ag", "fc2_rs"]


def test_gen_workload_cli_writes_a_readable_file_and_a_summary(tmp_path, capsys):
    out = tmp_path / "w.txt"
    argv = ["--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--world-size", "1024", "--global-batch", "1536",
            "--micro-batch", "1", "--seq-length", "2048", "--sp", "-o", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "174.604B params" in err and "stage 7" in err and f"wrote {out}" in err
    w = read_native(out)
    assert w == make("gpt3-175b", world_size=1024, tp=8, pp=8, sp=True, global_batch=1536, seq_length=2048)


def test_gen_workload_simai_export(tmp_path):
    out = tmp_path / "w.simai"
    assert main(["--model", "gpt3-6.7b", "--tp", "4", "--pp", "2", "--world-size", "16", "--global-batch", "16",
                 "--sp", "--format", "simai", "--stage", "1", "--gpu", "h100", "-q", "-o", str(out)]) == 0
    first = out.read_text().splitlines()[0]
    assert first.startswith("HYBRID_TRANSFORMER_FWD_IN_BCKWD") and "pp: 2" in first


@pytest.mark.parametrize("argv,message", [
    (["--pp", "2", "--stage", "2"], "stage=2"),
    (["--profile", "x.sqlite"], "needs --gpu"),
])
def test_gen_workload_output_option_errors(tmp_path, capsys, argv, message):
    assert main([*argv, "-o", str(tmp_path / "w.txt")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w.txt").exists()


def test_generation_path_does_not_import_torch(tmp_path):
    code = ("import sys; from engine.commands.gen_workload import main; "
            f"rc = main(['--model', 'llama3-8b', '-q', '-o', r'{tmp_path / 'w.txt'}']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "False"]


def test_uneven_first_and_last_stages():
    # DeepSeek-V3's 61 layers over 16 stages: 3 on the first, 2 on the last, 4 on each other.
    w = make("deepseek-v3", world_size=512, tp=2, sp=True, pp=16, ep=16, first_stage_layers=3, last_stage_layers=2,
             global_batch=64, seq_length=4096)
    assert [len(st.chunks[0].layers) for st in w.stages] == [3] + [4] * 14 + [2]
    _check_programs(w)
    import argparse

    from engine.commands.config_flags import add_config_arguments, configs_from_args
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    _, par = configs_from_args(p.parse_args(
        "--model llama3-405b --pipeline-model-parallel-size 16 --tensor-model-parallel-size 8 --sequence-parallel "
        "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7 --world-size 128".split()))
    assert (par.first_stage_layers, par.last_stage_layers) == (7, 7)


@pytest.mark.parametrize("settings,message", [
    (dict(first_stage_layers=8, last_stage_layers=7), "must split evenly over the other 14 stage"),
    (dict(first_stage_layers=7, vpp=2), "must be divisible by vpp=2"),
])
def test_uneven_stage_errors(settings, message):
    from workload_gen.core.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        make("llama3-405b", world_size=128, tp=8, sp=True, pp=16, global_batch=64, **settings)
