"""--clip-grad: Megatron computes the gradient norm only to clip by it (MegatronOptimizer.step,
``if self.config.clip_grad > 0.0: grad_norm = self.clip_grad_norm(...)``), so --clip-grad 0 drops
that pass over the main gradients and nothing else."""
from __future__ import annotations

import pytest

from compute_profile import attach
from engine.commands.gen_workload import main
from engine.pipeline import run_workload
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import load_system


def _iteration_ops(clip: float, **kw):
    par = ParallelConfig(world_size=8, tp=2, global_batch=8, dtype="bf16", clip_grad=clip, **kw)
    w = build(get_preset("llama3-8b"), par)
    return w, {op.name: op for op in w.stages[0].iteration}


@pytest.mark.parametrize("dist_opt", [False, True])
def test_clip_grad_zero_drops_only_the_norm_pass(dist_opt):
    w1, on = _iteration_ops(1.0, distributed_optimizer=dist_opt)
    w0, off = _iteration_ops(0.0, distributed_optimizer=dist_opt)
    assert set(on) - set(off) == {"grad_norm"} and set(off) <= set(on)
    # The norm reads this rank's fp32 main-gradient shard once: all its parameters over TP 2,
    # then over DP 4 with the distributed optimizer (hand count: the stage's parameters / 4).
    params = w1.stages[0].params
    shard = params // 4 if dist_opt else params
    assert on["grad_norm"].bytes == pytest.approx(4 * shard, rel=1e-3)
    # Any positive threshold costs the same: Megatron's norm does not depend on the value.
    assert {n: op.bytes for n, op in _iteration_ops(0.3, distributed_optimizer=dist_opt)[1].items()} == \
        {n: op.bytes for n, op in on.items()}


def test_clip_grad_zero_saves_the_norm_time_in_the_step():
    sysc = load_system("h100")
    t_on, t_off = (run_workload(_iteration_ops(clip)[0], sysc, attach=True, timeline=False).iteration_time_s
                   for clip in (1.0, 0.0))
    timed, _ = attach(_iteration_ops(1.0)[0], "h100-sxm")
    norm_s = next(op.time_s for op in timed.stages[0].iteration if op.name == "grad_norm")
    assert norm_s > 0
    assert t_on - t_off == pytest.approx(norm_s, rel=1e-6)  # the step runs the norm alone, on the compute stream


def test_megatron_spelling_sets_it(tmp_path, capsys):
    argv = ["--model", "llama3-8b", "--tp", "2", "--world-size", "8", "--global-batch", "8"]
    for clip, has_norm in (("0", False), ("0.0", False), ("1.0", True), ("0.5", True)):
        out = tmp_path / f"w{clip}.txt"
        assert main([*argv, "--clip-grad", clip, "-o", str(out)]) == 0
        assert ("grad_norm" in out.read_text()) is has_norm, clip
    assert "ignored Megatron-LM flags" not in capsys.readouterr().err


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "1"])
def test_bad_values_are_one_clear_error(bad):
    with pytest.raises(ConfigError, match=r"clip_grad=.* must be a number >= 0"):
        ParallelConfig(world_size=8, global_batch=8, clip_grad=bad)
