"""Throughput has one formula (workload_gen.core.metrics), and every package's lazy
re-exports come from the one helper (workload_gen.core.lazy)."""
from __future__ import annotations

import csv
import importlib
from pathlib import Path

import pytest

from formats.measured_runs import read_measured_runs
from workload_gen.core.metrics import tokens_per_iteration, tokens_per_s
from workload_gen.core.parallel_config import ParallelConfig

BRIDGE_TABLE = Path(__file__).resolve().parents[2] / "compute_profile/data/measured/megatron_bridge_llama3_measured.csv"


def test_tokens_per_s_by_hand_and_at_time_zero():
    # 512 sequences of 4096 tokens in 2 s: 1,048,576 tokens/s; a zero-length step divides nothing
    par = ParallelConfig(world_size=8, global_batch=512, seq_length=4096)
    assert tokens_per_iteration(par) == 2_097_152
    assert tokens_per_s(par, 2.0) == 1_048_576.0
    assert tokens_per_s(par, 0.0) == 0.0


def test_megatron_bridge_step_time_is_the_inverse_of_throughput():
    """A Megatron-Bridge row gives tokens/s per GPU; the step time read from it gives that
    throughput back through the same formula."""
    path = BRIDGE_TABLE
    run = read_measured_runs(path)[0]
    with path.open() as f:
        row = next(csv.DictReader(f))
    per_gpu = tokens_per_s(run.parallel, run.step_time_s) / run.parallel.world_size
    assert per_gpu == pytest.approx(float(row["tokens_per_s_per_gpu"]), rel=1e-12)


@pytest.mark.parametrize("package,name", [
    ("workload_gen", "build"), ("compute_profile", "estimate_time"), ("engine", None),
    ("collectives", "expand"), ("network.ns3", "TransportParams"),
])
def test_every_lazy_package_uses_the_one_helper(package, name):
    pkg = importlib.import_module(package)
    assert pkg.__getattr__.__qualname__ == "lazy_attributes.<locals>.__getattr__"
    if name is not None:
        value = getattr(pkg, name)
        assert vars(pkg)[name] is value  # loaded once, then a plain attribute
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        getattr(pkg, "no_such_name")
