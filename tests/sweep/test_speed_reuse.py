"""Sweeps and search reuse work without changing a single figure.

- engine.pipeline.build_cached / attach_compute keep the workload of points that differ only
  in system fields; rows are identical to evaluating every point from scratch.
- The executor puts such points in one batch; the table stays in point order.
- search on the process pool, and search pruned by the compute bound (top_k), rank the same
  top layouts as the plain sequential search.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine import pipeline
from engine.sweep.execute import _by_workload, run_points
from engine.sweep.grid import expand, spec_from_dict
from engine.sweep.point import evaluate_config
from engine.sweep.search import compute_bound, search
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import load_system

SPEC = {
    "base": {"model": "gpt3-125m", "system": "h100",
             "training": {"seq_length": 1024, "distributed_optimizer": True, "overlap_grad_reduce": True}},
    "grid": [
        {"product": {"parallel.tp": [1, 2], "parallel.pp": [1, 2], "system.nic_bw": [25e9, 50e9, 100e9]}},
        {"zip": {"parallel.world_size": [8, 16], "training.global_batch": [16, 32]}},
    ],
}


def test_build_and_attach_are_kept_per_configuration():
    pipeline.clear_caches()
    model, par = configs_from_dict({"model": "gpt3-125m", "parallel": {"tp": 2, "world_size": 4, "global_batch": 8}})
    w1, m1 = pipeline.build_cached(model, par)
    w2, m2 = pipeline.build_cached(model, replace(par))
    assert w1 is w2 and m1 is m2
    w3, _ = pipeline.build_cached(model, replace(par, tp=1))
    assert w3 is not w1
    a1 = pipeline.attach_compute(w1, "h100", None)
    assert pipeline.attach_compute(w1, "h100", None) is a1
    assert pipeline.attach_compute(w1, "a100", None) is not a1


def test_rows_equal_evaluating_every_point_from_scratch(tmp_path):
    points = expand(spec_from_dict(SPEC))
    assert len(points) == 24
    fresh = []
    for p in points:
        pipeline.clear_caches()
        fresh.append(evaluate_config(p.config))
    pipeline.clear_caches()
    rows = run_points(points, evaluate_config, tmp_path / "j.jsonl", workers=1, progress=False)
    import json

    assert rows == [json.loads(json.dumps(r, default=str)) for r in fresh]
    # points differing only in the system end up adjacent, so one worker builds their workload once
    order = _by_workload(points)
    assert sorted(p.index for p in order) == [p.index for p in points]
    keys = [p.config["parallel"] | {"gb": p.config["training"]["global_batch"]} for p in order]
    groups = [keys[i:i + 3] for i in range(0, len(keys), 3)]  # the 3 NIC bandwidths of one layout
    assert all(g[0] == g[1] == g[2] for g in groups)
    assert len({repr(sorted(g[0].items())) for g in groups}) == 8  # 2 tp x 2 pp x 2 (world, batch)


@pytest.fixture(scope="module")
def small_search():
    model = replace(get_preset("llama3-70b"), num_layers=4)
    base = ParallelConfig(world_size=16, global_batch=16, seq_length=65536)  # some layouts over memory
    return model, base, load_system("h100")


def test_pool_and_pruning_keep_the_ranking(small_search):
    model, base, system = small_search
    plain = search(model, base, system, workers=1)
    pooled = search(model, base, system, workers=2)
    assert [(c.label(), c.iteration_time_s) for c in pooled.ranked] == \
        [(c.label(), c.iteration_time_s) for c in plain.ranked]
    assert (pooled.over_memory, pooled.invalid, pooled.simulated) == (plain.over_memory, plain.invalid, plain.simulated)
    # the memory pruning (no build where a smaller micro-batch was already over) counts as
    # building every layout did
    from engine.memory import estimate_memory
    from engine.sweep.search import enumerate_layouts
    from workload_gen import build

    layouts, _ = enumerate_layouts(model, base, system)
    settled, over = set(), 0
    for par in layouts:
        lighter = replace(par, recompute="none")
        if lighter in settled:
            continue
        if max(m.reserved_peak for m in estimate_memory(build(model, par))) > system.gpu_spec.memory_bytes:
            over += 1
            continue
        settled.add(lighter)
    assert over > 0 and plain.over_memory == over and plain.simulated == len(settled)
    # the bound never exceeds the simulated time (else pruning could drop a top layout)
    assert plain.ranked
    for c in plain.ranked:
        timed, _ = pipeline.attach_compute(pipeline.build_cached(model, c.parallel)[0], system.gpu, None)
        assert compute_bound(timed) <= c.iteration_time_s * (1 + 1e-12), c.label()
    k = 3
    pruned = search(model, base, system, workers=2, top_k=k)
    assert [c.label() for c in pruned.ranked[:k]] == [c.label() for c in plain.ranked[:k]]
    assert pruned.simulated + pruned.pruned == plain.simulated
    assert pruned.pruned > 0
    again = search(model, base, system, workers=1, top_k=k)
    assert [c.label() for c in again.ranked] == [c.label() for c in pruned.ranked]


def test_compute_bound_is_below_the_simulated_time():
    model, par = configs_from_dict({"model": "gpt3-125m", "parallel": {
        "tp": 2, "pp": 2, "world_size": 8, "global_batch": 32, "seq_length": 512, "sp": True}})
    res = pipeline.run_analytical(model, par, "h100", timeline=False)
    assert 0 < compute_bound(res.workload) <= res.iteration_time_s


def test_compute_bound_of_one_gpu_is_the_iteration_time():
    """On one GPU nothing communicates: the iteration is exactly its compute (every op, every
    micro-batch, and the once-per-iteration work) plus the GPU's waits for kernel launches
    (a 125M model at 512 tokens is host-bound: engine.host_launch), so the compute bound
    equals the ops' times summed by hand."""
    model, par = configs_from_dict({"model": "gpt3-125m", "parallel": {
        "world_size": 1, "global_batch": 4, "seq_length": 512}})
    res = pipeline.run_analytical(model, par, "h100", timeline=False)
    w = res.workload
    st = w.stages[0]
    by_hand = par.num_microbatches * sum(op.time_s for ch in st.chunks for op in (*ch.forward, *ch.backward)) \
        + sum(op.time_s for op in st.iteration if hasattr(op, "time_s"))
    assert compute_bound(w) == pytest.approx(by_hand, rel=1e-9)
    # host_s holds the launch waits and the optimizer step's fixed host work, an op of by_hand
    step = next(op.time_s for op in st.iteration if op.name == "step_overhead")
    waits = res.breakdown.host_s - step
    assert waits > 0
    assert res.iteration_time_s == pytest.approx(by_hand + waits, rel=1e-9)


def test_csv_table_is_what_pandas_wrote(tmp_path):
    """The sweep's CSV is written without pandas, byte for byte as pandas wrote it."""
    import io

    import pandas as pd

    from engine.sweep.table import csv_text, write_table

    points = expand(spec_from_dict(SPEC))
    rows = [{**dict(p.axes), **evaluate_config(p.config)} for p in points]
    rows.append({"status": "invalid", "reason": 'a "quoted", multi\nline reason', "tp": 3, "mfu": float("nan"),
                 "flag": True, "mixed": 2.5, "axis": {"k": [1, 2]}})
    rows.append({"mixed": "text", "flag": None, "big": 2**40})
    expected = io.StringIO()
    pd.DataFrame(rows).to_csv(expected, index=False, float_format="%.9g")
    assert csv_text(rows) == expected.getvalue()
    write_table(rows, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text() == expected.getvalue()
