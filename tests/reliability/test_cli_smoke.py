"""Issue 16: a corpus of bad inputs across the nine commands; each ends with exit code 0
or 2, never a traceback (run in-process: an exception other than SystemExit fails the
test, as it would print a traceback at the command line)."""
from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from rel_helpers import edit_native, edit_record, native_text, run_main, simai_text

TRACE = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"
SWEEP_BASE = {"model": "gpt3-125m", "system": "h100", "parallel": {"world_size": 16, "sp": False},
              "training": {"global_batch": 64, "micro_batch": 1, "seq_length": 1024}}
TINY = ["--model", "gpt3-125m", "--num-layers", "2", "--world-size", "8", "--tp", "2", "--global-batch", "8",
        "--seq-length", "512"]


def _simai(edit) -> str:
    lines = simai_text().split("\n")
    lines[0] = edit(lines[0])
    return "\n".join(lines)


def _trace(mutate) -> str:
    with gzip.open(TRACE, "rt") as fh:
        data = json.load(fh)
    i = next(k for k, e in enumerate(data["traceEvents"]) if e.get("ph") == "X")
    mutate(data, data["traceEvents"][i])
    return json.dumps(data)


def _sweep(grid=None, filters=(), base=SWEEP_BASE) -> str:
    return yaml.safe_dump({"base": base, "grid": grid if grid is not None else
                           [{"product": {"parallel.tp": [1, 2]}}], "filters": list(filters), "output": "out.csv"})


FILES: dict[str, object] = {
    # native workloads
    "n_chunk.txt": lambda: edit_native("# stage 0:", "# stage 0: params=1 dense_params=1 chunks=0:0-100000000000"),
    "n_nest.txt": lambda: edit_native("# model.name:", "# model.name: " + "[" * 100000 + "]" * 100000),
    "n_flops.txt": lambda: edit_record("qkv", 10, "1e400")[0],
    "n_att0.txt": lambda: edit_record("core_attn", 8, "1x0x512x512x64x1")[0],
    "n_negbytes.txt": lambda: edit_record("proj_ar", 11, "-786432")[0],
    "n_group0.txt": lambda: edit_record("proj_ar", 15, "0")[0],
    "n_notp.txt": lambda: edit_native("# parallel.tp:", None),
    "n_experts.txt": lambda: edit_native("# model.num_experts:", "# model.num_experts: 2.5"),
    "n_binary.txt": lambda: b"# trainsim workload\n\xff\xfe\x00",
    "n_good.txt": native_text,
    # SimAI
    "s_negck.txt": lambda: _simai(lambda h: h.replace("checkpoints: 0", "checkpoints: -3")),
    "s_negcki.txt": lambda: _simai(lambda h: h.replace("checkpoint_initiates: 0", "checkpoint_initiates: -1")),
    "s_ga.txt": lambda: _simai(lambda h: h.replace("ga: 2", "ga: 1e308")),
    "s_negtp.txt": lambda: _simai(lambda h: h.replace("model_parallel_NPU_group: 2", "model_parallel_NPU_group: -2")),
    "s_comm.txt": lambda: simai_text().replace("\tALLREDUCE\t", "\tALLREDUCEX\t", 1).replace("ALLREDUCEX", "FOO"),
    # profile databases and CSV
    "p_other.sqlite": "other-db",
    "p_text.sqlite": "text-db",
    "p_corrupt.sqlite": "corrupt-db",
    "p_junk.sqlite": lambda: b"this is not sqlite at all" * 100,
    "c_huge.csv": lambda: "gpu,kind,shape_key,dtype,phase,time_s,source\ncpu,gemm,1x1x1,bf16,fwd," + "1" * 200_000
                          + ",measured\n",
    "c_utf16.csv": lambda: "gpu,kind,shape_key,dtype,phase,time_s,source\ncpu,gemm,1x1x1,bf16,fwd,1,measured\n"
                           .encode("utf-16"),
    "c_nan.csv": lambda: "gpu,kind,shape_key,dtype,phase,time_s,source\ncpu,gemm,1x1x1,bf16,fwd,nan,measured\n",
    "a_bad.txt": lambda: "Emb:\n    time_gpu_avg: e\n",
    # traces
    "t_corrupt.json.gz": lambda: TRACE.read_bytes()[:5000],
    "t_empty.json": lambda: '{"traceEvents": []}',
    "t_nostep.json": lambda: _trace(lambda d, e: d.__setitem__("traceEvents", [
        x for x in d["traceEvents"] if not str(x.get("name", "")).startswith("ProfilerStep")])),
    "t_strts.json": lambda: _trace(lambda d, e: e.__setitem__("ts", str(e["ts"]))),
    "t_args.json": lambda: _trace(lambda d, e: e.__setitem__("args", [1, 2])),
    "t_pid.json": lambda: _trace(lambda d, e: e.__setitem__("pid", [1])),
    # sweeps
    "w_grid5.yaml": lambda: _sweep(grid=5),
    "w_pow.yaml": lambda: _sweep(filters=["9 ** 9 ** 9"]),
    "w_rep.yaml": lambda: _sweep(filters=['"a" * 4000000000']),
    "w_div.yaml": lambda: _sweep(filters=["1 / (parallel.tp - 1) > 0"]),
    "w_deep.yaml": lambda: _sweep(filters=["(" * 100 + "1" + ")" * 100 + " + " + "-" * 500 + "1"]),
    "w_none.yaml": lambda: _sweep(filters=["parallel.tp > 99"]),
    "w_invalid.yaml": lambda: _sweep(grid=[{"product": {"parallel.tp": [8, 16]}}]),
    "w_binary.yaml": lambda: b"base: \xff\xfe\n",
    # configs
    "y_nonutf8.yaml": lambda: b"model: gpt3-125m\nparallel: {tp: \xff}\n",
    "y_parallel5.yaml": lambda: "model: gpt3-125m\nparallel: 5\n",
    "e_keys.yaml": lambda: "default: {}\n",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    from compute_profile.db import ProfileDB, ProfileRow

    for name, make in FILES.items():
        path = d / name
        if make == "other-db":
            con = sqlite3.connect(path)
            con.execute("CREATE TABLE foo (x)")
            con.commit()
            con.close()
        elif make in ("text-db", "corrupt-db"):
            with ProfileDB(path) as db:
                db.put([ProfileRow(gpu="h100-sxm", kind="gemm", shape_key=f"{i}x1x1", dtype="bf16", phase="fwd",
                                   time_s=1e-4, source="measured") for i in range(1, 300)])
            if make == "text-db":
                con = sqlite3.connect(path)
                con.execute("PRAGMA ignore_check_constraints = ON")
                con.execute("UPDATE kernel_times SET time_s = 'abc' WHERE rowid = 1")
                con.commit()
                con.close()
            else:
                raw = bytearray(path.read_bytes())
                raw[4096 + 8:4096 + 400] = b"\xa5" * 392
                path.write_bytes(bytes(raw))
        else:
            content = make()
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
    (d / "run").mkdir()
    return d


def _cmd(name):
    import importlib

    module, func = {
        "gen-workload": ("engine.commands.gen_workload", "main"), "compute-profile": ("engine.commands.compute_profile", "main"),
        "expand-collective": ("engine.commands.expand_collective", "main"), "run-analytical": ("engine.commands.run", "analytical_main"),
        "run-ns3": ("engine.commands.run", "ns3_main"), "run-flow": ("engine.commands.run", "flow_main"),
        "diff-trace": ("engine.commands.diff", "diff_trace_main"),
        "diff-workload": ("engine.commands.diff", "diff_workload_main"), "sweep": ("engine.commands.sweep", "sweep_main"),
        "search": ("engine.commands.sweep", "search_main"),
    }[name]
    return getattr(importlib.import_module(module), func)


CASES = [
    # run-analytical on bad workloads
    *[("run-analytical", [f, "--no-plot"]) for f in ("n_chunk.txt", "n_nest.txt", "n_flops.txt", "n_att0.txt",
                                                     "n_negbytes.txt", "n_group0.txt", "n_notp.txt",
                                                     "n_experts.txt", "n_binary.txt", "s_negck.txt", "s_negcki.txt",
                                                     "s_ga.txt", "s_comm.txt")],
    ("run-analytical", ["s_negtp.txt", "--accounting", "simai"]),
    ("run-analytical", ["n_good.txt", "--profile", "p_corrupt.sqlite", "--no-plot"]),
    ("run-analytical", ["n_good.txt", "--profile", "p_other.sqlite", "--no-plot"]),
    ("run-analytical", ["n_good.txt", "--profile", "p_text.sqlite", "--no-plot"]),
    ("run-ns3", ["s_negck.txt"]),
    ("run-ns3", ["n_flops.txt"]),
    ("run-flow", ["s_negck.txt"]),
    ("run-flow", ["n_flops.txt"]),
    # compute-profile
    *[("compute-profile", [c, "--profile", db]) for c in ("stats", "show")
      for db in ("p_other.sqlite", "p_corrupt.sqlite", "p_text.sqlite", "p_junk.sqlite", "missing.sqlite")],
    *[("compute-profile", ["import-csv", f, "--profile", "new.sqlite"]) for f in ("c_huge.csv", "c_utf16.csv", "c_nan.csv")],
    ("compute-profile", ["import-csv", "c_nan.csv", "--profile", "p_other.sqlite"]),
    *[("compute-profile", ["import-trace", f, "--gpu", "cpu", "--profile", "new.sqlite"])
      for f in ("t_corrupt.json.gz", "t_empty.json", "t_nostep.json", "t_strts.json", "t_args.json", "t_pid.json")],
    ("compute-profile", ["import-aiob", "a_bad.txt", "--gpu", "h100", "--profile", "new.sqlite", *TINY]),
    ("compute-profile", ["export-csv", "--profile", "p_corrupt.sqlite", "-o", "x.csv"]),
    # expand-collective
    ("expand-collective", ["--op", "allreduce", "--size", "1e26TiB", "--ranks", "8"]),
    ("expand-collective", ["--op", "allreduce", "--size", "1GiB", "--ranks", "7-0"]),
    ("expand-collective", ["--op", "allreduce", "--size", "1GiB", "--ranks", "65536"]),
    ("expand-collective", ["--op", "allreduce", "--size", "1GiB", "--ranks", "10000000"]),
    ("expand-collective", ["-w", "n_group0.txt"]),
    ("expand-collective", ["-w", "s_ga.txt"]),
    # sweep
    *[("sweep", [f, "--quiet", "--no-plots", "--workers", "1"]) for f in
      ("w_grid5.yaml", "w_pow.yaml", "w_rep.yaml", "w_div.yaml", "w_deep.yaml", "w_none.yaml", "w_invalid.yaml",
       "w_binary.yaml")],
    ("sweep", ["w_invalid.yaml", "--workers", "0"]),
    # diff-trace / diff-workload
    ("diff-trace", ["run", "t_corrupt.json.gz"]),
    ("diff-trace", ["run", "t_nostep.json"]),
    ("diff-workload", ["n_flops.txt", "n_good.txt"]),
    ("diff-workload", ["s_negck.txt", "n_good.txt"]),
    # configs
    ("gen-workload", ["-c", "y_nonutf8.yaml", "-o", "w.txt"]),
    ("gen-workload", ["-c", "y_parallel5.yaml", "-o", "w.txt"]),
    ("gen-workload", ["--model", "llama3-70b", "--tp", "16", "--world-size", "64", "-o", "w.txt"]),
    ("run-analytical", [*TINY, "--efficiency", "e_keys.yaml", "--no-plot"]),
    # search
    ("search", ["--top-k", "0", *TINY]),
    ("search", ["--system", "nosuch.yaml", *TINY]),
    ("search", ["--world-size", "0", "--model", "gpt3-125m"]),
]


def _id(case) -> str:
    command, argv = case.values[:2] if hasattr(case, "values") else case
    return f"{command} {' '.join(argv)[:60]}"


@pytest.mark.parametrize("command, argv", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_exits_0_or_2_without_a_traceback(corpus, monkeypatch, command, argv):
    monkeypatch.chdir(corpus)
    rc, out, err = run_main(_cmd(command), argv)
    assert rc in (0, 2), f"exit {rc}: {err[-500:]}"
    assert "Traceback" not in err and "Traceback" not in out
    if rc == 2:
        assert err.strip(), "an error exit must say why"
        errors = [line for line in err.strip().splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err


def test_the_corpus_covers_every_command():
    commands = {(c.values[0] if hasattr(c, "values") else c[0]) for c in CASES}
    assert commands == {"gen-workload", "compute-profile", "expand-collective", "run-analytical", "run-ns3",
                        "run-flow", "diff-trace", "diff-workload", "sweep", "search"}
    assert len(CASES) >= 50
