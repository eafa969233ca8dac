"""The h800 system (DeepSeek-V3's cluster) and a system YAML's own name in the run's title
and summary.json."""
from __future__ import annotations

import json
from dataclasses import replace

from compute_profile import attach
from engine.api import simulate
from engine.commands.run import analytical_main
from workload_gen import build
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.system import SYSTEMS
from workload_gen.core.units import GB, GBIT


def test_h800_figures_and_their_sources():
    s = SYSTEMS["h800"]
    # NVIDIA H800 SXM5 datasheet: NVLink 400 GB/s bidirectional -> 200 GB/s each way.
    assert s.nvlink_bw == 200 * GB
    # DeepSeek-V3 (arXiv 2412.19437) Sec. 3.2.2: "NVLink offers a bandwidth of 160 GB/s,
    # roughly 3.2 times that of IB (50 GB/s)"; Sec. 3.1: 8 GPUs per node.
    assert s.nvlink_busbw == 160 * GB
    assert s.gpus_per_node == 8 and s.nics_per_node == 8
    assert s.nic_bw == 400 * GBIT == 50 * GB
    assert "2412.19437" in s.source and "H800" in s.source
    # Same compute and HBM as the H100 SXM (only the NVLink is cut).
    h800, h100 = get_gpu("h800"), get_gpu("h100-sxm")
    assert h800.peak_flops == h100.peak_flops and h800.hbm_bw == h100.hbm_bw
    assert h800.sm_count == h100.sm_count and h800.compute_capability == (9, 0)


def test_h800_is_slower_than_h100_only_through_nvlink():
    # One node, tp 8: the TP all-reduces run on NVLink, which is 160 vs 360 GB/s busbw.
    m = replace(get_preset("gpt3-1.3b"), num_layers=2)
    p = ParallelConfig(world_size=8, tp=8, global_batch=1, micro_batch=1, seq_length=2048)
    w, _ = attach(build(m, p), "h100-sxm")
    t800 = simulate(w, SYSTEMS["h800"], timeline=False)
    t100 = simulate(w, SYSTEMS["h100"], timeline=False)
    assert t800.iteration_time_s > t100.iteration_time_s
    assert t800.breakdown.compute_s == t100.breakdown.compute_s


def test_a_system_yaml_names_the_run(tmp_path, capsys):
    yaml = tmp_path / "my.yaml"
    yaml.write_text("base: h800\nname: deepseek-h800-cluster\n")
    out = tmp_path / "run"
    assert analytical_main(["--model", "gpt3-125m", "--num-layers", "1", "--world-size", "8",
                            "--system", str(yaml), "--out", str(out)]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert title.startswith("gpt3-125m on deepseek-h800-cluster (h800): 8 GPUs")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["system"]["name"] == "deepseek-h800-cluster"
    assert summary["config"]["system"]["gpu"] == "h800"
