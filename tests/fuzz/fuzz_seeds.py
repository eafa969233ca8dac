"""Valid inputs the fuzzers mutate: small, generated here (so the suite needs no data
files), built once per process."""
from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
import tempfile
from functools import cache
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@cache
def workloads():
    """A few small workloads covering TP/SP, PP, VPP, CP, EP/ETP and compute times."""
    from compute_profile import attach
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    out = []
    for model, par, train in (
        ("gpt3-125m", {"world_size": 8, "tp": 2, "pp": 2}, {"global_batch": 8, "seq_length": 512}),
        ({"preset": "mixtral-8x7b", "num_layers": 2}, {"world_size": 16, "tp": 2, "sp": True, "ep": 2, "cp": 2},
         {"global_batch": 8, "seq_length": 1024}),
        ({"preset": "llama3-8b", "num_layers": 4}, {"world_size": 8, "tp": 2, "sp": True, "pp": 2, "vpp": 2},
         {"global_batch": 16, "seq_length": 1024, "recompute": "selective"}),
    ):
        m, p = configs_from_dict({"model": model, "parallel": par, "training": train})
        w = build(m, p)
        out.append(w)
    out.append(attach(out[0], "h100")[0])
    return tuple(out)


@cache
def native_texts() -> tuple[str, ...]:
    from formats.native import native_lines

    return tuple("\n".join(native_lines(w)) + "\n" for w in workloads())


@cache
def simai_texts() -> tuple[str, ...]:
    from compute_profile import attach
    from formats.simai_convert import workload_to_simai
    from formats.simai_text import render_simai

    texts = []
    for w in workloads():
        if w.parallel.cp > 1:
            continue
        timed = w if w.gpu else attach(w, "h100")[0]
        texts.append(render_simai(workload_to_simai(timed, 0)))
    texts.append("HYBRID_CUSTOMIZED model_parallel_NPU_group: 2 pp: 1 ga: 1 all_gpus: 4\n1\n"
                 "l0\t-1\t10\tALLREDUCE\t1024\t10\tNONE\t0\t10\tALLREDUCE_DP_EP\t2048\t100\tHYBRID_TRANSFORMER\n")
    for name in ("simai/microAllReduce.txt", "aicb/gpt7b_w8_tp1_pp1_gbs32_mbs2_seq2048.txt"):
        p = SHARED / name
        if p.is_file() and p.stat().st_size < 60_000:
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
    return tuple(texts)


RUN_YAML = """\
model:
  preset: gpt3-125m
  num_layers: 4
parallel:
  world_size: 8
  tp: 2
  sp: true
  pp: 2
  vpp: 1
  cp: 1
  ep: 1
training:
  micro_batch: 1
  global_batch: 16
  seq_length: 1024
  dtype: bf16
  recompute: selective
  distributed_optimizer: true
  overlap_grad_reduce: true
"""

RUN_JSON = json.dumps({"model": {"preset": "mixtral-8x7b", "num_layers": 2},
                       "parallel": {"world_size": 16, "tp": 2, "sp": True, "ep": 4},
                       "training": {"global_batch": 32, "seq_length": 2048, "dtype": "fp8", "fp8_recipe": "mxfp8"}})

SYSTEM_YAML = """\
base: h100
name: my-cluster
gpus_per_node: 8
nics_per_node: 8
nic_bw: 50e9
nvlink_bw: 450e9
"""

EFFICIENCY_YAML = """\
default:
  nvlink: {peak_fraction: 0.8, half_time_s: 2.0e-5}
  nic: {peak_fraction: 0.9, half_time_s: 3.0e-5}
systems:
  h100:
    nic: {peak_fraction: 0.85}
"""

SWEEP_YAML = """\
base:
  model: gpt3-125m
  system: h100
  parallel: {world_size: 16, sp: false}
  training: {global_batch: 64, micro_batch: 1, seq_length: 1024}
grid:
  - product:
      parallel.tp: [1, 2, 4]
      parallel.pp: [1, 2]
  - zip:
      training.micro_batch: [1, 2]
      training.global_batch: [64, 128]
filters:
  - "parallel.tp * parallel.pp <= 8"
  - "parallel.pp != 2 or parallel.tp == 1"
output: out.csv
"""

TOPOLOGY = """\
9 2 2 3 10 H100
4 5 6 7 8
0 4 2880Gbps 0.000025ms 0
1 4 2880Gbps 0.000025ms 0
2 5 2880Gbps 0.000025ms 0
3 5 2880Gbps 0.000025ms 0
0 6 400Gbps 0.0005ms 0
2 6 400Gbps 0.0005ms 0
1 7 400Gbps 0.0005ms 0
3 7 400Gbps 0.0005ms 0
6 8 800Gbps 0.0005ms 0
7 8 800Gbps 0.0005ms 0
"""


def _rows():
    from compute_profile.db import ProfileRow

    return [ProfileRow(gpu=gpu, kind=kind, shape_key=shape, dtype="bf16", phase=phase, time_s=t, source=src,
                       flops=2e9, bytes=1e6, min_s=t * 0.9, max_s=t * 1.1, repeats=5, note="seed, with a comma")
            for gpu, kind, shape, phase, t, src in (
                ("h100-sxm", "gemm", "128x256x512", "fwd", 1e-4, "measured"),
                ("h100-sxm", "gemm", "128x256x512", "bwd-input", 2e-4, "measured"),
                ("h100-sxm", "norm", "4096x1024", "fwd", 3e-5, "imported"),
                ("cpu", "attention", "1x8x128x128x64x1", "fwd", 5e-3, "estimated"),
                ("h200", "optimizer", "1000000", "iter", 1e-3, "measured"),
            )]


@cache
def profile_db_bytes() -> bytes:
    from compute_profile.db import ProfileDB

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "seed.sqlite"
        with ProfileDB(path) as db:
            db.put(_rows())
        con = sqlite3.connect(path)
        con.execute("VACUUM")
        con.close()
        return path.read_bytes()


@cache
def profile_csv_text() -> str:
    from compute_profile.db import COLUMNS

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(COLUMNS)
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    for r in _rows():
        w.writerow([getattr(r, c) for c in COLUMNS])
    return buf.getvalue()


def gpu_trace() -> dict:
    """A small GPU Kineto trace (tests/kineto_sample.py, with the optional typed fields) and
    the start of the next profiler step."""
    from kineto_sample import kineto_events

    trace = kineto_events(typed=True)
    trace["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "ts": 10000,
                                 "dur": 10000, "pid": 100, "tid": 1, "args": {}})
    return trace


@cache
def cpu_trace() -> dict:
    """The first events of the repository's CPU trace (one step's head), when present."""
    p = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"
    if not p.is_file():
        return gpu_trace()
    with gzip.open(p, "rt") as fh:
        data = json.load(fh)
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"][:150]
    return {k: v for k, v in data.items() if k != "traceEvents"} | {"traceEvents": events}
