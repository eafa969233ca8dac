"""Megatron-Core's --pipeline-model-parallel-layout, and uneven first/last stages with VPP.

Oracles: the layout grammar's worked examples in Megatron-Core's own docstrings
(megatron/core/transformer/pipeline_parallel_layer_layout.py, ``parse_str_to_list``,
NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553), and layer assignments written
out by hand from its rules: virtual stage v of the string is chunk v // pp of pipeline rank
v % pp, decoder layers numbered in string order (``get_layer_offset``); with uneven stages
and vpp, each rank's count splits evenly over its chunks and chunks fill in data-flow order
(transformer_layer.py ``get_transformer_layer_offset``). Physics: a layout equal to the even
split builds the same programs; per-stage parameters add up to the model's.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.pipeline import run_workload
from workload_gen.builder import build
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig, check_against_model
from workload_gen.core.params import chunk_layers, mtp_chunk, stage_layer_counts, total_params
from workload_gen.core.pipeline_layout import parse_layout
from workload_gen.core.records import ComputeOp
from workload_gen.core.system import get_system

L8B = get_preset("llama3-8b")  # 32 layers, untied embeddings
DSV3 = get_preset("deepseek-v3")  # 61 layers


def _par(**kw) -> ParallelConfig:
    base = dict(world_size=8, pp=4, global_batch=16)
    return ParallelConfig(**{**base, **kw})


def _symbols(text: str, pp: int = 1) -> list[str]:
    return ["".join(s) for s in parse_layout(text, pp).stages]


def test_megatron_docstring_example() -> None:
    # parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" will be parsed to
    # [["E","t","t","t"]]+[["t","t"]]*29+[["m"],["L"]]
    assert _symbols("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]


@pytest.mark.parametrize("text,stages", [
    # the unrolling examples in parse_str_to_list's comments, a..f written as layer symbols:
    # xy(ab|cd|ef)*2,pq -> xyab|cd|efab|cd|efpq
    ("Et(tt|t|tt)*2,tL", ["Ettt", "t", "tttt", "t", "tttL"]),
    ("(Et)*3", ["EtEtEt"]),  # (ab)*3 -> ababab (grammar only; check_layout refuses three E)
    ("Et,(tt|)*2", ["Ettt", "tt", ""]),  # ab,(cd|)*2 -> abcd|cd|
    ("(|tt)*2,tL", ["", "tt", "tttL"]),  # (|ab)*2,cd -> |ab|abcd
])
def test_unrolling_follows_megatrons_two_patterns(text: str, stages: list[str]) -> None:
    assert _symbols(text) == stages


def test_deepseek_v3_layout_places_layers_and_mtp_as_megatron() -> None:
    # DeepSeek-V3 (61 layers, one MTP module) on pp 16: 32 virtual stages -> vpp 2.
    model = replace(DSV3, mtp_num_layers=1)
    par = ParallelConfig(world_size=256, pp=16, vpp=2, ep=16, global_batch=256,
                         pipeline_layout="Ettt|(tt|)*29,m|L")
    check_against_model(model, par)
    # v = 0 is rank 0 chunk 0: E and layers 0-2; v = 1..15 are ranks 1..15 chunk 0 with two
    # layers each (3..32); v = 16..29 are ranks 0..13 chunk 1 (33..60); v = 30 (rank 14,
    # chunk 1) holds the MTP layer, v = 31 (rank 15, chunk 1) the loss.
    assert chunk_layers(model, par, 0, 0) == (0, 1, 2)
    assert chunk_layers(model, par, 1, 0) == (3, 4)
    assert chunk_layers(model, par, 15, 0) == (31, 32)
    assert chunk_layers(model, par, 0, 1) == (33, 34)
    assert chunk_layers(model, par, 13, 1) == (59, 60)
    assert chunk_layers(model, par, 14, 1) == () and chunk_layers(model, par, 15, 1) == ()
    assert mtp_chunk(model, par) == (14, 1)
    assert stage_layer_counts(model, par) == (5,) + (4,) * 13 + (2, 2)
    # without a layout Megatron builds the MTP on the last stage, after the decoder
    assert mtp_chunk(model, replace(par, pipeline_layout=None, vpp=1, pp=1, world_size=16)) == (0, 0)
    assert mtp_chunk(DSV3, par) is None


def test_layout_equal_to_the_even_split_builds_the_same_programs() -> None:
    even = _par(vpp=2)
    text = "Et*4|" + "t*4|" * 6 + "t*4L"
    laid = _par(vpp=2, pipeline_layout=text)
    a, b = build(L8B, even), build(L8B, laid)
    assert [[(c.layers, c.forward, c.backward) for c in s.chunks] for s in a.stages] == \
           [[(c.layers, c.forward, c.backward) for c in s.chunks] for s in b.stages]
    assert [s.iteration for s in a.stages] == [s.iteration for s in b.stages]


def test_stage_parameters_follow_the_layout_and_add_up_to_the_model() -> None:
    # Llama 3 8B: untied output layer, vocabulary 128256 already a multiple of 128, tp 1:
    # the stages together hold every parameter once.
    par = _par(vpp=2, pipeline_layout="Et*3|(t*5|)*5,t*4|L")
    w = build(L8B, par)
    assert sum(s.params for s in w.stages) == total_params(L8B)
    assert stage_layer_counts(L8B, par) == (8, 10, 9, 5)
    per_layer = (w.stages[1].params) // 10  # stage 1 holds ten layers and nothing else
    assert w.stages[2].params == 9 * per_layer


def test_empty_virtual_stages_run() -> None:
    # Embedding alone on rank 0, every layer on rank 1, ranks 2 and 3 only forward activations.
    par = _par(vpp=2, pipeline_layout="E|t*32||||||L")
    w = build(L8B, par)
    assert [sum(len(c.layers) for c in s.chunks) for s in w.stages] == [0, 32, 0, 0]
    assert not [op for c in w.stages[2].chunks for op in c.forward if isinstance(op, ComputeOp)]
    res = run_workload(w, get_system("h100"), timeline=False, attach=True)
    assert res.iteration_time_s > 0


def test_yaml_layout_sets_vpp_like_megatron() -> None:
    _, par = configs_from_dict({"model": "llama3-8b", "parallel": {
        "world_size": 8, "pp": 4, "pipeline_layout": "Et*3|(t*5|)*5,t*4|L"}, "training": {"global_batch": 16}})
    assert (par.vpp, par.pipeline_layout) == (2, "Et*3|(t*5|)*5,t*4|L")
    with pytest.raises(ConfigError, match="parallel.vpp=4 is invalid; conflicts with pipeline_layout"):
        configs_from_dict({"model": "llama3-8b", "parallel": {"world_size": 8, "pp": 4, "vpp": 4,
                                                              "pipeline_layout": "Et*3|(t*5|)*5,t*4|L"}})


def test_megatron_flag_sets_the_layout() -> None:
    import argparse

    from engine.commands.config_flags import add_config_arguments, configs_from_args
    p = argparse.ArgumentParser()
    add_config_arguments(p)
    _, par = configs_from_args(p.parse_args([
        "--model", "llama3-8b", "--pipeline-model-parallel-size", "4", "--world-size", "8", "--global-batch-size", "16",
        "--pipeline-model-parallel-layout", "Et*3|(t*5|)*5,t*4|L"]))
    assert (par.vpp, par.pipeline_layout) == (2, "Et*3|(t*5|)*5,t*4|L")


@pytest.mark.parametrize("settings,message", [
    (dict(pipeline_layout="Et*3|(t*5|)*5,t*4|X"), "unknown symbol 'X'"),
    (dict(pipeline_layout="Et*32|L|"), "has 3 virtual stages, not a multiple of pp=4"),
    (dict(pipeline_layout="Et*3|(t*5|)*5,t*4|L"), "but vpp=1; set vpp=2"),
    (dict(pipeline_layout="Et*3|(t*5|)*5,t*4|L", vpp=2, first_stage_layers=2), "cannot be combined"),
    (dict(pipeline_layout="t*99999999", pp=1), "expands to more than"),
])
def test_bad_layouts_are_one_line_errors(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        _par(**settings)


@pytest.mark.parametrize("text,message", [
    ("Et*3|(t*5|)*5,t*3|L", "holds 31 transformer layers"),
    ("tEt*2|(t*5|)*5,t*4|L", "exactly one E"),
    ("Et*3|(t*5|)*5,t*4|Lt", "exactly one L"),
    ("Et*3|(t*5|)*4,t*5|t*4L|", "exactly one L"),
    ("Et*3|(t*5|)*5,t*4m|L", "MTP layers"),
])
def test_layouts_checked_against_the_model(text, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_against_model(L8B, _par(vpp=2, pipeline_layout=text))


def test_mtp_after_every_decoder_layer_in_one_last_chunk() -> None:
    model = replace(L8B, mtp_num_layers=1)
    check_against_model(model, _par(vpp=2, pipeline_layout="Et*3|(t*5|)*5,t*4m|L"))
    with pytest.raises(ConfigError, match="must come after every transformer layer"):
        check_against_model(model, _par(vpp=2, pipeline_layout="Et*3|(t*5|)*5,mt*4|L"))
    with pytest.raises(ConfigError, match="the last chunk of its pipeline rank"):
        check_against_model(model, _par(vpp=2, pipeline_layout="Et*8|t*8|t*8|t*8m||||L"))  # m: rank 3, chunk 0


def test_uneven_first_last_stages_with_vpp_by_hand() -> None:
    # 16 layers, pp 4, vpp 2, first 2, last 6: the two middle ranks share 16-2-6 = 8 (4 each).
    # Per chunk: rank 0 one, ranks 1-2 two, rank 3 three (8 per virtual round). Chunk c of
    # rank s starts at c*8 + the chunks of the ranks before it (Megatron's
    # get_transformer_layer_offset: vp_stage * total_virtual_chunks + F/v + middle_rank * M/v/middle).
    model = replace(L8B, num_layers=16)
    par = _par(vpp=2, first_stage_layers=2, last_stage_layers=6)
    check_against_model(model, par)
    got = {(s, c): chunk_layers(model, par, s, c) for s in range(4) for c in range(2)}
    assert got == {(0, 0): (0,), (1, 0): (1, 2), (2, 0): (3, 4), (3, 0): (5, 6, 7),
                   (0, 1): (8,), (1, 1): (9, 10), (2, 1): (11, 12), (3, 1): (13, 14, 15)}
    assert stage_layer_counts(model, par) == (2, 4, 4, 6)
    w = build(model, par)
    assert sorted(layer for s in w.stages for c in s.chunks for layer in c.layers) == list(range(16))


@pytest.mark.parametrize("settings,message", [
    (dict(first_stage_layers=3), "must be divisible by vpp=2"),  # Megatron: first % vpp
    (dict(first_stage_layers=4, last_stage_layers=2), "must be divisible by vpp=2"),  # 10/2 = 5 per middle rank
])
def test_uneven_vpp_divisibility_as_megatron(settings, message) -> None:
    model = replace(L8B, num_layers=16)
    with pytest.raises(ConfigError, match=message):
        check_against_model(model, _par(vpp=2, **settings))


def test_deepseek_v3_uneven_stages_with_vpp() -> None:
    # DeepSeek-V3's 61 layers on pp 16, vpp 2: every rank's count must be even (each splits
    # over its 2 chunks), so 61 cannot be split by first/last counts; Megatron refuses it too
    # and NVIDIA's recipes give a layout instead (test_deepseek_v3_layout_...). With vpp 1,
    # first 1 and last 4 leave 56 = 14 x 4 layers for the middle ranks.
    par = ParallelConfig(world_size=256, pp=16, vpp=2, ep=16, global_batch=256, first_stage_layers=2,
                         last_stage_layers=4)
    with pytest.raises(ConfigError, match="must split evenly over the other 14"):
        check_against_model(DSV3, par)  # 61 - 6 = 55
    par = replace(par, vpp=1, first_stage_layers=1)
    check_against_model(DSV3, par)
    assert stage_layer_counts(DSV3, par) == (1,) + (4,) * 14 + (4,)
    # 60 layers (61 without the first dense one, say): first 2, last 2 -> 2 per middle chunk
    model = replace(DSV3, num_layers=60)
    par = replace(par, vpp=2, first_stage_layers=2, last_stage_layers=2)
    check_against_model(model, par)
    assert stage_layer_counts(model, par) == (2,) + (4,) * 14 + (2,)
    assert chunk_layers(model, par, 0, 1) == (30,)  # virtual round 0 holds 1 + 14*2 + 1 = 30 layers


def test_layout_survives_the_native_file(tmp_path) -> None:
    # The layout is a ParallelConfig field: written to the workload file, read back, the same
    # workload (empty chunks included); files without it (every earlier one) read as None.
    from formats.native import read_native, write_native

    w = build(L8B, _par(vpp=2, pipeline_layout="E|t*32||||||L"))
    path = tmp_path / "w.txt"
    write_native(w, path)
    back = read_native(path)
    assert back.parallel == w.parallel and back.stages == w.stages
    plain = build(L8B, _par())
    write_native(plain, path)
    assert "pipeline_layout" not in path.read_text() and read_native(path).parallel.pipeline_layout is None


def test_uneven_stages_take_vpp_not_layers_per_virtual_stage() -> None:
    # Megatron-LM's arguments.py: with uneven stages the virtual stages per rank must be given
    # (--num-virtual-stages-per-pipeline-rank); layers per virtual stage would differ by rank.
    stages = {"world_size": 8, "pp": 4, "first_stage_layers": 2, "last_stage_layers": 6}
    _, par = configs_from_dict({"model": "llama3-8b", "parallel": {**stages, "vpp": 2}, "training": {"global_batch": 16}})
    assert par.vpp == 2 and stage_layer_counts(L8B, par) == (2, 12, 12, 6)
    with pytest.raises(ConfigError, match="cannot be combined with uneven first/last stages"):
        configs_from_dict({"model": "llama3-8b", "parallel": {**stages, "num_layers_per_virtual_pipeline_stage": 1}})
