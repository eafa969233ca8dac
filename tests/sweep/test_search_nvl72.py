"""Strategy search on a 72-GPU NVLink domain (GB200 NVL72, issue 28): TP may grow to the
domain, and the ranking's explanation says which groups stay inside the NVLink domain."""
from __future__ import annotations

from dataclasses import replace

from engine.sweep.search import domain_groups, enumerate_layouts, explain, search
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import load_system

NVL72 = load_system("gb200-nvl72")


def test_llama3_405b_on_eight_racks_offers_nvidias_layout_and_domain_sized_groups():
    """Llama 3.1 405B on 576 GPUs (8 racks), sequence 8192: NVIDIA's TP 8 x PP 8 (126 + 2
    slots) layout is offered; TP stops at 8 because Megatron's TP must divide the 8 KV groups,
    and CP grows to 16 so that tp x cp may reach a domain's worth of GPUs."""
    model = get_preset("llama3-405b")
    base = ParallelConfig(world_size=576, global_batch=576, seq_length=8192)
    layouts, _ = enumerate_layouts(model, base, NVL72)
    assert {p.tp for p in layouts} == {1, 2, 4, 8}
    assert any(p.tp == 8 and p.pp == 8 and p.account_for_embedding_in_pipeline_split for p in layouts)
    assert max(p.tp * p.cp for p in layouts) == 64 and 16 in {p.cp for p in layouts}  # 576 = 64 x 9
    # with 16 KV groups the same model may take TP 16 on NVL72, never on an 8-GPU node
    wide = replace(model, num_query_groups=16)
    assert 16 in {p.tp for p in enumerate_layouts(wide, base, NVL72)[0]}
    assert 16 not in {p.tp for p in enumerate_layouts(wide, base, load_system("h100"))[0]}


def test_groups_inside_the_rack_follow_rank_order():
    """Rank r is in rack r // 72: a tp 8 x cp 2 block of 16 ranks starting at 64 straddles
    racks 0 and 1 (72 is not a multiple of 16), a tp 8 block never does; an EP 8 group of a
    MoE layout sits in one rack, EP 16 does not. With tp 8 x pp 8 on 576 GPUs each pipeline
    stage is exactly one rack: dp 9 x tp 8 = 72, so even the DP group stays on NVLink."""
    par = ParallelConfig(world_size=576, global_batch=576, seq_length=8192, tp=8, pp=8)
    assert dict(domain_groups(par, 72)) == {"tp": True, "dp": True, "pp": False}
    cp2 = replace(par, cp=2, pp=4)
    assert dict(domain_groups(cp2, 72)) == {"tp": True, "cp": False, "dp": False, "pp": False}  # dp 9 x 16 = 144
    assert dict(domain_groups(cp2, 64))["cp"]  # 64 GPUs per rack keep 16-rank blocks inside
    moe = ParallelConfig(world_size=144, global_batch=144, seq_length=4096, tp=1, ep=8)
    assert dict(domain_groups(moe, 72))["ep"]
    assert dict(domain_groups(replace(moe, ep=16, global_batch=144), 72))["ep"] is False


def test_search_explains_what_stays_in_the_nvlink_domain():
    model = replace(get_preset("llama3-405b"), num_layers=8)
    res = search(model, ParallelConfig(world_size=144, global_batch=144, seq_length=8192), NVL72, workers=1,
                 top_k=2)
    best = res.ranked[0]
    inside = {n for n, ok in best.domain_groups if ok}
    assert "tp" in inside and best.parallel.tp * best.parallel.cp <= 72
    text = explain(res.ranked[0], res.ranked[1], NVL72.domain_gpus)
    assert "inside the 72-GPU NVLink domain: tp" in text and "across domains (NICs): dp" in text


def test_search_on_a_rack_says_its_tensor_rate_is_carried_by_the_power_law(capsys):
    """search's times are estimated, so on GB200 it prints run-analytical's line on the tensor
    rate carried from B200's fit (x1.20: 1,200 W over 1,000 W), and on B200 none."""
    from engine.commands.run import carry_line
    from engine.commands.sweep import search_main

    argv = ["--model", "llama3-8b", "--num-layers", "2", "--world-size", "8", "--global-batch", "8",
            "--seq-length", "2048", "--top-k", "2", "-q"]
    assert search_main([*argv, "--system", "gb200-nvl72"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln for ln in out if ln.startswith("tensor rate:")] == [carry_line("gb200")]
    assert "b200's fit x1.20" in carry_line("gb200")
    assert search_main([*argv, "--system", "b200"]) == 0
    assert not any(ln.startswith("tensor rate:") for ln in capsys.readouterr().out.splitlines())
