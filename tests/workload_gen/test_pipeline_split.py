"""The embedding and the loss as layer slots of the pipeline split (Megatron-Core's
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split).

The oracle is Megatron's rule written out by hand: L + e + l slots split evenly over the
pp*vpp virtual stages in interleaved order (virtual stage v = chunk*pp + stage); the first
virtual stage holds the embedding's slot and one layer fewer, the last the loss's slot.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.pipeline import run_workload
from workload_gen import build
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.params import chunk_layers, stage_layer_counts
from workload_gen.core.records import ComputeOp
from workload_gen.core.system import get_system

L405 = get_preset("llama3-405b")


def _par(**kw) -> ParallelConfig:
    base = dict(world_size=1024, tp=8, sp=True, pp=8, vpp=8, cp=2, micro_batch=1, global_batch=512, seq_length=8192,
                account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    return ParallelConfig(**{**base, **kw})


def _virtual_order(model, par) -> list[tuple[int, ...]]:
    return [chunk_layers(model, par, s, c) for c in range(par.vpp) for s in range(par.pp)]


def test_405b_recipe_layout_by_hand() -> None:
    # NVIDIA's H100 recipe: 126 layers + embedding + loss = 128 slots over 8 x 8 = 64 virtual
    # stages, 2 slots each: the first holds layer 0 (beside the embedding), the last layer 125
    # (beside the loss), every other virtual stage two layers.
    par = _par()
    order = _virtual_order(L405, par)
    assert [len(x) for x in order] == [1] + [2] * 62 + [1]
    assert [layer for x in order for layer in x] == list(range(126))  # contiguous, each once
    assert order[0] == (0,) and order[1] == (1, 2) and order[-1] == (125,)
    # stage 0 holds chunks 0..7 = virtual stages 0, 8, 16, ...: 1 + 7*2 layers; the last stage too
    assert stage_layer_counts(L405, par) == (15, 16, 16, 16, 16, 16, 16, 15)


@pytest.mark.parametrize("e,l,layers,pp,vpp,counts", [
    # 31 layers + the embedding = 32 slots over 4 x 2 virtual stages, 4 each: 3 beside the embedding
    (1, 0, 31, 4, 2, [3, 4, 4, 4, 4, 4, 4, 4]),
    # 31 + the loss: 3 layers beside the output layer in the last virtual stage
    (0, 1, 31, 4, 2, [4, 4, 4, 4, 4, 4, 4, 3]),
    # 30 + both = 32 over 4 stages: 7, 8, 8, 7
    (1, 1, 30, 4, 1, [7, 8, 8, 7]),
    # one stage holds every layer whatever the slots
    (1, 1, 6, 1, 1, [6]),
])
def test_one_slot_or_both(e: int, l: int, layers: int, pp: int, vpp: int, counts: list[int]) -> None:
    model = replace(get_preset("llama3-8b"), num_layers=layers)
    par = ParallelConfig(world_size=pp, pp=pp, vpp=vpp, micro_batch=1, global_batch=pp * 4, seq_length=1024,
                         account_for_embedding_in_pipeline_split=bool(e), account_for_loss_in_pipeline_split=bool(l))
    order = _virtual_order(model, par)
    assert [len(x) for x in order] == counts
    assert [layer for x in order for layer in x] == list(range(layers))


def test_parameters_are_conserved_and_the_loss_stage_holds_fewer_layers() -> None:
    wl = build(L405, _par())
    # every parameter sits on exactly one stage (tensor-parallel shards x tp)
    assert sum(st.params for st in wl.stages) * 8 == pytest.approx(wl.params_total, rel=2e-3)
    layer_flops = [sum(op.flops for ch in st.chunks for op in ch.forward
                       if isinstance(op, ComputeOp) and 0 <= op.layer < L405.num_layers) for st in wl.stages]
    assert layer_flops[0] == pytest.approx(layer_flops[7]) and layer_flops[1] == pytest.approx(layer_flops[3])
    assert layer_flops[0] == pytest.approx(layer_flops[1] * 15 / 16, rel=1e-9)


def test_the_recipe_simulates_and_is_refused_without_the_slots() -> None:
    # 126 layers do not split over pp*vpp = 64 without the slots; with them the run works and
    # its step is at least the busiest stage's compute for 8 micro-batches
    res = run_workload(build(L405, _par(global_batch=64)), get_system("h100"))
    busiest = max(b.compute_s for b in res.stage_breakdowns)
    assert busiest > 0 and res.iteration_time_s >= busiest
    with pytest.raises(ConfigError, match="not divisible by pp\\*vpp"):
        build(L405, _par(account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False))


@pytest.mark.parametrize("kw,match", [
    (dict(account_for_loss_in_pipeline_split=False), "plus the embedding slot = 127 is not divisible"),
    (dict(pp=2, vpp=1, first_stage_layers=60), "cannot be combined"),
    (dict(account_for_embedding_in_pipeline_split="yes"), "must be true or false"),
])
def test_bad_layouts_are_one_clear_error(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(L405, _par(**kw))


def test_a_virtual_stage_of_only_the_embedding_or_loss_is_accepted_as_megatron_does() -> None:
    """62 layers + the embedding and loss slots = 64 slots over 64 virtual stages: Megatron-LM
    runs the first virtual stage with only the embedding and the last with only the loss
    (NVIDIA's GB200 Llama 3.1 405B recipe has PP 16 x VP 8 over 126 layers + 2 slots)."""
    model = replace(L405, num_layers=62)
    w = build(model, _par())
    first = w.stages[0].chunks[0].forward
    last = w.stages[-1].chunks[-1].forward
    assert not [op for op in first if 0 <= op.layer < model.num_layers]  # embedding only
    assert not [op for op in last if 0 <= op.layer < model.num_layers]  # loss only
    layers = {op.layer for st in w.stages for ch in st.chunks for op in ch.forward if 0 <= op.layer < model.num_layers}
    assert layers == set(range(62))


def test_yaml_keys_and_megatron_flags(tmp_path) -> None:
    model, par = configs_from_dict({"model": "llama3-405b", "parallel": {
        "world_size": 1024, "tp": 8, "sp": True, "pp": 8, "vpp": 8, "cp": 2,
        "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True},
        "training": {"global_batch": 512, "seq_length": 8192}})
    assert par.account_for_embedding_in_pipeline_split and par.account_for_loss_in_pipeline_split
    from engine.commands.gen_workload import main
    out = tmp_path / "w.txt"
    rc = main(["--model", "llama3-405b", "--tp", "8", "--sp", "--pp", "8", "--vpp", "8", "--cp", "2",
               "--world-size", "1024", "--global-batch", "512", "--seq-length", "8192",
               "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "-o", str(out)])
    assert rc == 0 and out.stat().st_size > 0


def test_two_stages_with_both_slots_are_the_even_split() -> None:
    # 32 layers + 2 slots over 2 stages: 17 slots each, so 16 layers beside the embedding and
    # 16 beside the loss, which is exactly Megatron's default split: the same simulated step.
    model = get_preset("llama3-8b")
    kw = dict(world_size=16, tp=2, sp=True, pp=2, micro_batch=1, global_batch=64, seq_length=4096)
    plain = ParallelConfig(**kw)
    slots = ParallelConfig(**kw, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    assert stage_layer_counts(model, slots) == stage_layer_counts(model, plain) == (16, 16)
    h100 = get_system("h100")
    assert run_workload(build(model, slots), h100).iteration_time_s == run_workload(build(model, plain), h100).iteration_time_s
