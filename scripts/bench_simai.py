"""Benchmark the SimAI paths: read, SimAI accounting, import, export. Prints figures; asserts nothing.

Usage: python scripts/bench_simai.py
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.simai_accounting import SimaiCluster, simai_accounting  # noqa: E402
from formats.simai_convert import simai_to_workload, workload_to_simai  # noqa: E402
from formats.simai_reader import read_simai  # noqa: E402
from formats.simai_writer import write_simai  # noqa: E402

EXAMPLE = REPO / ".." / "shared" / "data" / "simai" / "workload_analytical.txt"


def timed(label: str, fn, repeat: int = 5):
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    print(f"{label:58s} median {statistics.median(times) * 1e3:8.1f} ms  (min {min(times) * 1e3:.1f})")
    return out


def main() -> int:
    sw = timed(f"read {EXAMPLE.name} (1789 records)", lambda: read_simai(EXAMPLE))
    cluster = SimaiCluster(gpus=9216, gpus_per_server=8, nvlink_busbw=360, nic_busbw=48.5, nics_per_server=8)
    acc = timed("simai_accounting on it", lambda: simai_accounting(sw, cluster))
    print(f"{'':58s} total {acc.total_us:,.0f} us (SimAI: 7,545,619)")
    timed("simai_to_workload on it", lambda: simai_to_workload(sw, gpus=9216))

    from compute_profile import attach
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    par = ParallelConfig(world_size=1024, tp=8, sp=True, pp=8, micro_batch=1, global_batch=1536, seq_length=2048,
                         distributed_optimizer=True)
    w, _cov = attach(build(get_preset("gpt3-175b"), par), "h100")
    sim = timed("workload_to_simai GPT-3 175B tp8 pp8 1024 GPUs, stage 0", lambda: workload_to_simai(w, 0))
    print(f"{'':58s} {len(sim.records)} records")
    with tempfile.TemporaryDirectory() as tmp:
        timed("write_simai of the same", lambda: write_simai(w, Path(tmp) / "w.txt", 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
