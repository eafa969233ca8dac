"""``search`` enumerates Megatron-Core's folded MoE layouts and prunes them by memory like the others.

Folding (megatron/core/parallel_state.py, initialize_model_parallel, NVIDIA/Megatron-LM@d98e8a64):
the expert layers regroup each stage's ranks as etp x ep x edp, so ep need not divide dp*cp;
Megatron asks only that etp*ep*pp divide the world size and ep the expert count. NVIDIA's MoE
recipes use it as attention TP with expert EP and etp 1 (Mixtral 8x7B: TP 2, EP 8, ETP 1).
"""
from __future__ import annotations

import pytest

from engine.pipeline import build_cached
from engine.sweep.search import enumerate_layouts, search
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import load_system

MIXTRAL = get_preset("mixtral-8x7b")  # 8 experts, 32 layers, 47B parameters
BASE = ParallelConfig(world_size=16, global_batch=32, seq_length=4096)


def test_folded_layouts_are_enumerated_with_megatrons_rules() -> None:
    layouts, _ = enumerate_layouts(MIXTRAL, BASE, load_system("h100"))
    for p in layouts:
        assert MIXTRAL.num_experts % p.ep == 0
        assert p.world_size % (p.expert_tp * p.ep * p.pp) == 0
        assert p.expert_tp in (p.tp, 1)
    folded = {(p.tp, p.pp, p.ep, p.expert_tp) for p in layouts if (p.dp * p.cp) % p.ep}
    # NVIDIA's Mixtral recipe shape, TP 2 x PP 2 (dp 4) with EP 8 and ETP 1: ep exceeds dp*cp
    assert (2, 2, 8, 1) in folded
    # etp = tp layouts stay (the unfolded ones), ep = 1 included
    assert any(p.ep == 8 and p.expert_tp == p.tp == 2 for p in layouts)
    # dense models get no expert variants
    dense, _ = enumerate_layouts(get_preset("llama3-8b"), BASE, load_system("h100"))
    assert all(p.ep == 1 and p.etp is None for p in dense)


@pytest.mark.slow
def test_folded_layouts_are_pruned_by_memory_and_can_win() -> None:
    h100 = load_system("h100")
    res = search(MIXTRAL, BASE, h100, workers=1, top_k=3)
    assert res.over_memory > 0
    for c in res.ranked:
        assert c.reserved_bytes <= h100.gpu_spec.memory_bytes
    folded = [c for c in res.ranked if (c.parallel.dp * c.parallel.cp) % c.parallel.ep]
    assert folded, [c.label() for c in res.ranked]
    assert "etp1" in folded[0].label()
    # the result rows name the expert layout: 16 GPUs = etp 1 x ep 8 x edp x pp, so edp = 16 / (8 pp)
    from engine.commands.sweep import candidate_row

    row = candidate_row(1, folded[0])
    p = folded[0].parallel
    assert (row["etp"], row["edp"]) == (1, 16 // (8 * p.pp)) and row["ep"] == 8
    # folded layouts over memory by the model that checks every layout are never ranked
    layouts, _ = enumerate_layouts(MIXTRAL, BASE, h100)
    heavy = [p for p in layouts if (p.dp * p.cp) % p.ep and p.recompute == "none" and p.micro_batch == 4]
    over = [p for p in heavy
            if max(m.reserved_peak for m in build_cached(MIXTRAL, p)[1]) > h100.gpu_spec.memory_bytes]
    assert over
    ranked = {c.parallel for c in res.ranked}
    assert not ranked & set(over)
