"""run-ns3 end to end on a 16-GPU iteration, against run-analytical."""
from __future__ import annotations

import csv
import json

import pytest

from engine.commands.run import analytical_main, ns3_main

ARGS = ["--model", "gpt3-1.3b", "--num-layers", "2", "--tp", "8", "--world-size", "16", "--global-batch", "4",
        "--micro-batch", "1", "--seq-length", "1024", "--system", "h100", "--no-plot"]


def test_small_iteration_agrees_with_run_analytical(ns3_runtime, tmp_path, capsys):
    """GPT (2 layers of 1.3B) on 2 H100 nodes: TP 8 inside each node, DP 2 across. On a
    non-blocking rail fabric nothing contends, so the packet-level run must land within
    10% of the closed forms."""
    a, n = tmp_path / "an", tmp_path / "ns3"
    assert analytical_main([*ARGS, "--out", str(a)]) == 0
    assert ns3_main([*ARGS, "--out", str(n), "--topology", "rail", "--oversubscription", "1"]) == 0
    ta = json.loads((a / "summary.json").read_text())["iteration_time_s"]
    summary = json.loads((n / "summary.json").read_text())
    assert summary["iteration_time_s"] == pytest.approx(ta, rel=0.10)
    assert summary["backend"] == "ns3"
    with (n / "fct.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == summary["extras"]["flows"]
    # every flow finished no earlier than it could have alone on an idle path
    assert all(float(r["finish_s"]) >= float(r["ideal_finish_s"]) * 0.999 for r in rows)
    dp_bytes = sum(int(r["bytes"]) for r in rows if r["fabric"] == "network")
    assert dp_bytes == summary["extras"]["fabric_bytes"]
    with (n / "links.csv").open() as fh:
        links = list(csv.DictReader(fh))
    assert sum(int(r["drops"]) for r in links) == 0
    assert max(float(r["utilisation"]) for r in links) <= 1.0
    err = capsys.readouterr().err
    assert "[run-ns3] simulated" in err and "flows done" in err
    # the final progress line once, not again after the summary (issue 29)
    final = [ln for ln in err.splitlines() if ln.startswith("[run-ns3] simulated ") and "0 collectives in flight" in ln]
    assert len(final) == 1, final


def test_bad_topology_file_is_one_line_and_exit_2(tmp_path, capsys):
    rc = ns3_main([*ARGS, "--topology", str(tmp_path / "missing.txt")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "topology" in err[0] and "Traceback" not in err[0]


def test_simai_file_with_simai_cluster_flags(ns3_runtime, tmp_path):
    """SimAI's micro benchmark (two TP-8 all-reduces, 16 and 64 MiB) on -g 16 GPUs of 8 per
    node: every TP group stays inside a node, so no byte crosses the fabric, and the
    exposed TP time is the two all-reduces."""
    from pathlib import Path

    micro = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "simai" / "microAllReduce.txt"
    out = tmp_path / "micro"
    assert ns3_main([str(micro), "--gpus", "16", "--gpus-per-node", "8", "--no-plot", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["extras"]["fabric_bytes"] == 0
    assert summary["breakdown_s"]["exposed_tp"] > 0
    # SimAI's ns columns: two records of 556000 (fwd) + 1 (input grad) + 1 (weight grad)
    assert summary["breakdown_s"]["compute"] == pytest.approx(2 * (556_000 + 1 + 1) * 1e-9, rel=1e-9)


def test_simai_flags_on_a_generated_workload_are_refused(capsys):
    assert ns3_main([*ARGS, "--gpus", "7"]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_dcqcn_set_is_chosen_by_flag_and_refused_where_it_would_be_ignored(capsys):
    from engine.commands.run import backend_options, build_parser
    from network.ns3.kind import NS3, transport_params
    from network.ns3.params import TransportParams

    def parse(argv):  # the command's flags -> the plain mapping the kind receives
        return backend_options(NS3, build_parser("ns3").parse_args(argv))

    assert transport_params(parse([*ARGS, "--dcqcn", "deep-incast"])) == TransportParams.deep_incast()
    assert transport_params(parse([*ARGS, "--dcqcn", "connectx", "--mtu", "4200"])) == TransportParams.connectx(mtu=4200)
    assert transport_params(parse(ARGS)) == TransportParams()
    # a DCQCN set under HPCC or DCTCP would be ignored: one line, exit 2, before ns-3 loads
    assert ns3_main([*ARGS, "--dcqcn", "deep-incast", "--cc", "hpcc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dcqcn" in err[0] and "--cc hpcc" in err[0]


def test_bad_link_in_a_topology_file_stops_before_ns3_loads(tmp_path, capsys):
    """A negative delay made ns-3 assert (exit 133); now one line, exit 2, no ns-3."""
    from network.ns3 import runtime

    topo = tmp_path / "topo.txt"
    topo.write_text("17 8 0 1 16 H100\n16\n" + "".join(f"{g} 16 400Gbps {'-' if g == 5 else ''}0.0005ms 0\n"
                                                       for g in range(16)))
    loaded = runtime.how_loaded()
    assert ns3_main([*ARGS, "--topology", str(topo), "--out", str(tmp_path / "o")]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("[run-ns3]")]
    assert len(err) == 1 and f"{topo}:8: field delay = '-0.0005ms'" in err[0]
    assert runtime.how_loaded() == loaded  # refused before loading ns-3


def test_a_second_ns3_install_on_ld_library_path_is_not_used(tmp_path):
    """The wheel's loader refused to run when it found two builds of a module (here a
    second virtualenv's libns3 on LD_LIBRARY_PATH, an empty file that cannot load). ns-3 now
    loads from the wheel's own directory by path (the cached core's RPATH precedes
    LD_LIBRARY_PATH): the run works and maps only the wheel's libraries."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from network.ns3 import runtime

    lib = tmp_path / "venv2" / "lib" / "python3.11" / "site-packages" / "ns3" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libns3.44-core.so").write_bytes(b"")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib), PYTHONPATH=str(root))
    code = (f"from engine.commands.run import ns3_main; rc = ns3_main({[*ARGS, '-q', '--out', str(tmp_path / 'o')]!r}); "
            "print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libns3' in l}), sep='\\n'); "
            "raise SystemExit(rc)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    mapped = [ln for ln in r.stdout.splitlines() if "libns3" in ln and ln.startswith("/")]
    wheel = str(runtime.ns3_install().library_dir.resolve())
    assert any(m.endswith("libns3.44-core.so") for m in mapped)
    assert all(str(Path(m).resolve().parent) == wheel for m in mapped), mapped
