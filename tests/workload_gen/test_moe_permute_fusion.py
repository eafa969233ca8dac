"""Megatron's --moe-permute-fusion: off (Megatron's default) the token permute and unpermute run
as torch ops (moe_utils.permute / unpermute with fused=False, Megatron-LM d98e8a64); on, as TE's
fused kernels. The byte counts below are worked out here from those ops, not read from the code."""
from __future__ import annotations

from dataclasses import replace

from engine.host_launch import op_units
from engine.pipeline import run_analytical
from workload_gen import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import OpKind, Phase
from workload_gen.costs import permute, permute_unfused

T, E, K, H, B = 4096, 128, 8, 2048, 2
R = T * K


def test_unfused_unpermute_makes_four_more_passes_over_the_routed_rows():
    """Fused: read the R routed rows once, write the T tokens. Unfused: multiply by the probs
    (read and write R rows), zero-fill the output (T rows), scatter-add (read R rows, and a
    read-modify-write of the output per routed element: 2R), plus the probs' gather (T*E of
    fp32 and bool, 5 bytes each)."""
    fused = permute(R, T, H, B, weighted=True)
    flops, nbytes = permute_unfused(R, T, H, B, E, unpermute=True, forward=True)
    assert fused[1] == (R + T) * H * B
    assert nbytes == (R + R + T + R + 2 * R) * H * B + 5 * T * E
    assert flops == fused[0] == R * H  # the same multiply by the router probability
    assert nbytes / fused[1] > 4


def test_unfused_permute_sorts_the_routing_map_then_gathers():
    """Unfused: the [T, E] routing map is transposed and argsorted (four radix passes, each reading and writing a 1-byte key and its 8-byte index),
    then index_select reads and writes the R gathered rows. Fused: one kernel reads the T
    token rows and writes the R rows."""
    sort = 4 * 2 * T * E * (1 + 8)
    gather = 2 * R * H * B
    _, nbytes = permute_unfused(T, R, H, B, E, unpermute=False, forward=True)
    # the transpose is costed inside the sort's first pass (both touch the same 1-byte flags)
    assert nbytes == sort + gather
    assert permute(T, R, H, B, weighted=False)[1] == (T + R) * H * B


def _ops(fusion: bool):
    par = ParallelConfig(world_size=8, ep=8, global_batch=8, micro_batch=1, seq_length=4096,
                         moe_permute_fusion=fusion)
    w = build(replace(get_preset("qwen3-30b-a3b"), num_layers=2), par)
    return [op for _, _, op in w.ops() if op.kind is OpKind.PERMUTE and op.name in ("permute", "unpermute")]


def test_the_flag_picks_the_kernels_and_megatron_spells_it():
    fused, unfused = _ops(True), _ops(False)
    assert fused and all(len(op.shape) == 2 for op in fused)
    assert all(len(op.shape) == 3 and op.shape[2] > 1 for op in unfused)
    assert sum(op.bytes for op in unfused) > 2 * sum(op.bytes for op in fused)
    # the host launches each torch call of the unfused path (engine.host_launch)
    fwd_permute = next(op for op in unfused if op.name == "permute" and op.phase is Phase.FWD)
    assert op_units(fwd_permute, 16, alltoall=False) == fwd_permute.shape[2]
    from engine.commands.config_flags import add_config_arguments, configs_from_args
    from engine.commands.parser import OneLineParser

    parser = OneLineParser(prog="test")
    add_config_arguments(parser)
    flags = ["--model", "qwen3-30b-a3b", "--world-size", "8", "--ep", "8"]
    assert configs_from_args(parser.parse_args([*flags, "--moe-permute-fusion"]))[1].moe_permute_fusion
    assert not configs_from_args(parser.parse_args(flags))[1].moe_permute_fusion


def test_fusion_makes_the_step_faster_and_only_by_the_permute_ops():
    base = dict(world_size=8, ep=8, global_batch=16, micro_batch=1, seq_length=4096)
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=4)
    on = run_analytical(model, ParallelConfig(**base, moe_permute_fusion=True), "h100", timeline=False)
    off = run_analytical(model, ParallelConfig(**base), "h100", timeline=False)
    assert on.iteration_time_s < off.iteration_time_s < 1.2 * on.iteration_time_s
