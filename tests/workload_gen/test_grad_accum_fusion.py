"""Megatron's --no-gradient-accumulation-fusion: the linear layers' weight-gradient GEMMs write a
fresh gradient in the parameter dtype, and DDP's backward hook adds it to the main gradient
(Megatron-Core distributed_data_parallel.py, _make_backward_post_hook: ``main_grad.add_(grad)``
once per parameter tensor). With the fusion (Megatron's default) the GEMM reads and writes the
main gradient in place. The byte counts below are worked out here from those two paths and the
model's weight shapes, not read from the code."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.host_launch import op_units
from engine.pipeline import run_analytical
from workload_gen import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import OpKind, Phase

H, F, E, TOP_K, EXPERT_FFN = 2048, 768, 128, 8, 768  # Qwen3-30B-A3B (config.json)
HEADS, GROUPS, HEAD_DIM = 32, 4, 128
B_ACT, B_GRAD = 2, 4  # bf16 weights and gradients; fp32 main gradients (Megatron's default for bf16)


def _layer_ops(fusion: bool, ep: int = 8):
    par = ParallelConfig(world_size=8, ep=ep, global_batch=8, micro_batch=1, seq_length=4096,
                         gradient_accumulation_fusion=fusion)
    w = build(replace(get_preset("qwen3-30b-a3b"), num_layers=2), par)
    return [op for _, _, op in w.ops() if op.layer == 0 and op.phase is Phase.BWD_WEIGHT]


def _linear_weights_per_rank(ep: int) -> int:
    """The layer's linear weights one rank holds: q, k, v and the output projection, and each
    local expert's gate, up and down projections (SwiGLU)."""
    qkv = H * (HEADS + 2 * GROUPS) * HEAD_DIM
    proj = HEADS * HEAD_DIM * H
    experts = (E // ep) * 3 * H * EXPERT_FFN
    return qkv + proj + experts


@pytest.mark.parametrize("ep", [8, 4])
def test_every_linear_weight_gets_one_add_and_the_unfused_path_moves_two_activation_bytes_more(ep):
    """Unfused, per weight element: the GEMM writes the gradient (B_ACT), the add reads it and
    reads and writes the main gradient (B_ACT + 2 B_GRAD); fused, the GEMM reads and writes the
    main gradient (2 B_GRAD). Off - on = 2 B_ACT per element of every linear weight."""
    on, off = _layer_ops(True, ep), _layer_ops(False, ep)
    adds = [op for op in off if op.name.endswith(".grad_accum")]
    assert not any(op.name.endswith(".grad_accum") for op in on)
    weights = _linear_weights_per_rank(ep)
    assert sum(op.flops for op in adds) == weights  # one add per element, each weight once
    assert sum(op.bytes for op in adds) == weights * (B_ACT + 2 * B_GRAD)
    assert sum(op.bytes for op in off) - sum(op.bytes for op in on) == 2 * B_ACT * weights
    # the GEMMs themselves do the same arithmetic either way
    gemms = lambda ops: sum(op.flops for op in ops if op.kind in (OpKind.GEMM, OpKind.GROUPED_GEMM))  # noqa: E731
    assert gemms(off) == gemms(on)


def test_the_host_launches_one_add_per_expert_weight():
    """GroupedLinear keeps one parameter per local expert, and DDP hooks each apart."""
    off = _layer_ops(False)
    expert_adds = [op for op in off if op.name.startswith("expert_") and op.name.endswith(".grad_accum")]
    assert [op.shape[2] for op in expert_adds] == [E // 8, E // 8]
    assert all(op_units(op, E // 8, alltoall=True) == E // 8 for op in expert_adds)
    dense_adds = [op for op in off if not op.name.startswith("expert_") and op.name.endswith(".grad_accum")]
    assert dense_adds and all(op_units(op, E // 8, alltoall=True) == 1 for op in dense_adds)


def test_megatron_spells_it_and_a_bad_value_is_refused():
    from engine.commands.config_flags import add_config_arguments, configs_from_args
    from engine.commands.parser import OneLineParser

    parser = OneLineParser(prog="test")
    add_config_arguments(parser)
    flags = ["--model", "qwen3-30b-a3b", "--world-size", "8", "--ep", "8"]
    assert not configs_from_args(parser.parse_args([*flags, "--no-gradient-accumulation-fusion"]))[1] \
        .gradient_accumulation_fusion
    assert configs_from_args(parser.parse_args(flags))[1].gradient_accumulation_fusion
    with pytest.raises(ConfigError, match="gradient_accumulation_fusion"):
        ParallelConfig(world_size=8, gradient_accumulation_fusion="no")


def test_without_the_fusion_the_step_is_slower_by_at_least_the_extra_bytes_at_peak_bandwidth():
    """A lower bound that holds whatever the host does: 2 B_ACT per weight element per
    micro-batch over the H100's 3.35 TB/s HBM (datasheet)."""
    base = dict(world_size=8, ep=8, global_batch=16, micro_batch=1, seq_length=4096)
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=4)
    on = run_analytical(model, ParallelConfig(**base), "h100", timeline=False)
    off = run_analytical(model, ParallelConfig(**base, gradient_accumulation_fusion=False), "h100", timeline=False)
    micro_batches = 16 // 8
    floor = 4 * micro_batches * 2 * B_ACT * _linear_weights_per_rank(8) / 3.35e12
    assert off.iteration_time_s - on.iteration_time_s >= floor
    assert off.iteration_time_s < 1.2 * on.iteration_time_s
