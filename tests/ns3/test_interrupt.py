"""Real ns-3: a long packet simulation stays interruptible.

ns-3 runs in C++ while Python's Ctrl-C handler waits for the interpreter, so RunUntil hands
control back every ~0.2 s of wall time and Python calls it again. Handing control back must
not change the simulation: an incast run with a zero budget (it yields at every check)
gives exactly the flow finish times and link counters of a run that never yields. And
run-ns3 interrupted mid-simulation ends with the one line ``interrupted`` and exit 130,
leaving no output directory behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import bench_interrupt
from incast_fabric import run_incast

from network.ns3.params import TransportParams

ROOT = Path(__file__).resolve().parents[2]


def test_handing_control_back_changes_nothing(ns3_runtime):
    p = TransportParams()
    n_yields: list[int] = []
    ref = run_incast(4, p, 2_000_000, 400e9, 1e-6, yield_budget_s=1e9, yields=n_yields)
    often = run_incast(4, p, 2_000_000, 400e9, 1e-6, yield_budget_s=0.0, yields=n_yields)
    assert n_yields[0] == 0 and n_yields[1] > 100  # the second run went back to Python often
    np.testing.assert_array_equal(ref[0], often[0])  # identical finish times, to the ns
    key = lambda r: (r.src, r.dst, r.tx_bytes, r.peak_queue_bytes, r.ecn_marks, r.pauses_sent, r.drops)  # noqa: E731
    assert sorted(map(key, ref[1])) == sorted(map(key, often[1]))


@pytest.mark.slow
def test_ctrl_c_during_the_simulation_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "run"
    code = "from engine.commands.run import ns3_entry; ns3_entry()"
    args = ["--model", "gpt3-1.3b", "--num-layers", "4", "--tp", "8", "--world-size", "64", "--out", str(out)]
    # Ctrl-C's default disposition in the child, as a terminal gives it (bench_interrupt.sigint_default)
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True,
                            preexec_fn=bench_interrupt().sigint_default)
    lines = []
    for line in proc.stderr:  # wait until the packet simulation runs (~45 s of it follow)
        lines.append(line)
        if "simulating on" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.communicate(timeout=120)[1]  # a hang guard only
    err = "".join(lines) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    assert not out.exists()
