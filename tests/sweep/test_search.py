"""Strategy search on the issue's reference case, checked against published Megatron practice."""
from __future__ import annotations

import pytest

from engine.sweep.search import enumerate_layouts, explain, search
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import load_system


def test_enumeration_respects_divisibility():
    model = get_preset("llama3-70b")  # 64 heads, 8 KV groups, 80 layers
    base = ParallelConfig(world_size=64, global_batch=64, seq_length=4096)
    layouts, reasons = enumerate_layouts(model, base, load_system("h100"))
    assert layouts
    for p in layouts:
        assert 8 % p.tp == 0 and 80 % (p.pp * p.vpp) == 0
        assert p.tp * p.pp * p.cp * p.dp == 64
        assert p.sp == (p.tp > 1)
    assert sum(reasons.values()) > 0  # e.g. pp=5 with 64 GPUs is rejected, with a reason


@pytest.mark.slow
def test_llama3_70b_on_1024_h100_fits_and_agrees_with_practice():
    """Llama-3 70B, 1024 H100, global batch 1024, sequence 8192 (Llama 3's training length).

    Published practice at this scale is TP 8 (or TP 4 with CP 2, NeMo's recipe) with PP 4-8,
    sequence parallel on. The search must return a plan that fits in memory, uses SP, and
    a practice plan must be within a few percent of the best (our model's resolution).
    """
    model = get_preset("llama3-70b")
    base = ParallelConfig(world_size=1024, global_batch=1024, seq_length=8192)
    system = load_system("h100")
    res = search(model, base, system)
    best = res.ranked[0]
    assert best.reserved_bytes <= system.gpu_spec.memory_bytes
    assert best.parallel.sp and best.parallel.tp >= 4
    assert 2 <= best.parallel.pp <= 8
    assert best.parallel.tp * best.parallel.cp >= 8  # the sequence-sharding degree practice uses
    practice = [c for c in res.ranked
                if c.parallel.sp and c.parallel.tp * c.parallel.cp >= 8 and 4 <= c.parallel.pp <= 8]
    assert practice, "no practice plan fits in memory"
    assert practice[0].tokens_per_s >= 0.95 * best.tokens_per_s
    assert "faster than" in explain(res.ranked[0], res.ranked[1])


def test_layers_that_do_not_divide_get_the_embedding_and_loss_slots():
    """Llama 3.1 405B (126 layers) on 1024 GPUs: pp 8 does not divide 126, but 126 + 2 = 128
    slots do, NVIDIA's recipe layout. Such layouts are enumerated with both slots, only for
    power-of-two pp x vpp and only where the plain split fails; 70B (80 layers) gets none."""
    h100 = load_system("h100")
    base = ParallelConfig(world_size=1024, global_batch=1024, seq_length=8192)
    layouts, _ = enumerate_layouts(get_preset("llama3-405b"), base, h100)
    slotted = [p for p in layouts if p.account_for_embedding_in_pipeline_split]
    assert {p.pp for p in slotted} >= {8, 16}
    for p in layouts:
        v = p.pp * p.vpp
        assert p.account_for_embedding_in_pipeline_split == p.account_for_loss_in_pipeline_split
        assert p.account_for_embedding_in_pipeline_split == (126 % v != 0)
        assert (128 if p.account_for_embedding_in_pipeline_split else 126) % v == 0
    seventy, _ = enumerate_layouts(get_preset("llama3-70b"), base, h100)
    assert not any(p.account_for_embedding_in_pipeline_split for p in seventy)
