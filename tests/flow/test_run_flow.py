"""run-flow end to end: the shared run command with the flow kind, its registration and
its refusals of bad input (one line, exit 2)."""
from __future__ import annotations

import json

import pytest

from engine.commands.run import analytical_main, flow_main
from network.registry import backend_kind, backend_names

ARGS = ["--model", "gpt3-1.3b", "--num-layers", "2", "--tp", "8", "--world-size", "16", "--global-batch", "4",
        "--micro-batch", "1", "--seq-length", "1024", "--system", "h100", "--no-plot"]


def test_flow_is_a_registered_backend():
    assert "flow" in backend_names()
    assert backend_kind("flow").name == "flow"


def test_small_iteration_agrees_with_run_analytical_and_oversubscription_slows_dp(tmp_path, capsys):
    """TP 8 inside each node, DP 2 across: on a non-blocking rail fabric nothing contends,
    so the flow run lands within 10% of the closed forms (as run-ns3 does, tests/ns3);
    one node per ToR at 8:1 makes the DP all-reduce slower, never faster."""
    a, f, o = tmp_path / "an", tmp_path / "flow", tmp_path / "over"
    assert analytical_main([*ARGS, "--out", str(a)]) == 0
    assert flow_main([*ARGS, "--out", str(f), "--topology", "rail", "--oversubscription", "1"]) == 0
    assert flow_main([*ARGS, "--out", str(o), "--topology", "fat-tree", "--nodes-per-rack", "1",
                      "--oversubscription", "8"]) == 0
    ta = json.loads((a / "summary.json").read_text())["iteration_time_s"]
    s = json.loads((f / "summary.json").read_text())
    so = json.loads((o / "summary.json").read_text())
    assert s["backend"] == "flow"
    assert s["iteration_time_s"] == pytest.approx(ta, rel=0.10)
    assert so["iteration_time_s"] >= s["iteration_time_s"]
    assert s["extras"]["fabric_bytes"] == so["extras"]["fabric_bytes"] > 0
    err = capsys.readouterr().err
    assert "[run-flow] fabric:" in err and "rate solves" in err


@pytest.mark.parametrize("flags, field", [
    (["--oversubscription", "0.5"], "oversubscription"),
    (["--oversubscription", "nan"], "oversubscription"),
    (["--topology", "missing_topology.txt"], "topology"),
    (["--spines", "0"], "spines"),
    (["--mtu", "100"], "mtu"),
])
def test_bad_fabric_options_are_one_line_and_exit_2(flags, field, capsys):
    assert flow_main([*ARGS, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "Traceback" not in err[0]


def test_topology_file_with_two_nics_on_a_gpu_is_refused(tmp_path, capsys):
    """The flow router needs one NIC link per GPU; a file that gives GPU 0 two is refused
    in one line naming the topology, not routed wrongly."""
    p = tmp_path / "topo.txt"
    p.write_text("\n".join(["19 8 0 3 19 H100", "16 17 18",
                            *[f"{g} {16 + g // 8} 400Gbps 0.0005ms 0" for g in range(16)],
                            "0 17 400Gbps 0.0005ms 0", "16 18 800Gbps 0.0005ms 0", "17 18 800Gbps 0.0005ms 0"]) + "\n")
    assert flow_main([*ARGS, "--topology", str(p)]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("[run-flow]")]
    assert len(err) == 1 and "topology" in err[0] and "one NIC link" in err[0]
