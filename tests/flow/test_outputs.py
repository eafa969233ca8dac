"""run-flow's fct.csv and links.csv: the contention each flow met, and the bytes each link
carried, against values written out from the fabric's numbers."""
from __future__ import annotations

import io
import math
import subprocess

import numpy as np
import pandas as pd
import pytest

from network.flow.outputs import FLOW_OUTPUT_FILES, fct_csv, links_csv, render_flow_outputs
from network.flow.kind import FLOW
from workload_gen.core.records import CollKind
from tests.flow.test_physics import DELAY, GBPS, HEADER, PAYLOAD, _net, _run


class _Held:
    """What the writers read from a backend: its network, fabric and per-collective records."""

    def __init__(self, net, records):
        self.net, self.fabric, self.records = net, net.router.fabric, records


def _two_flows(src, dst, nbytes, fluid=False):
    from network.flow_clock import CollectiveFlows

    net = _net()
    n = len(src)
    first = net.add_transfer(0, np.array(src), np.array(dst), np.full(n, nbytes), np.zeros(n + 1, dtype=np.int64),
                             np.zeros(0, dtype=np.int64), np.full(n, fluid))
    net.run_until(math.inf)
    rec = CollectiveFlows(first, 0, "probe", "dp", np.array(src, dtype=np.int32), np.array(dst, dtype=np.int32))
    return _Held(net, [rec])


def test_a_lone_flow_has_slowdown_one_and_two_colliding_flows_two():
    b = 10_000_000
    wire = b + math.ceil(b / PAYLOAD) * HEADER
    cap = GBPS / 8
    tail = 4 * DELAY + 3 * (PAYLOAD + HEADER) / cap  # propagation, store-and-forward at 3 hops
    alone = pd.read_csv(io.StringIO(fct_csv(_two_flows([0], [2], b))))
    assert alone.ideal_finish_s[0] == pytest.approx(wire / cap + tail, rel=1e-9)
    assert alone.finish_s[0] == pytest.approx(alone.ideal_finish_s[0], rel=1e-9)
    assert alone.slowdown[0] == pytest.approx(1.0, abs=1e-4)
    both = pd.read_csv(io.StringIO(fct_csv(_two_flows([0, 1], [2, 3], b))))
    # both cross leaf0 -> spine -> leaf1 at half the rate: 2 x wire / cap + the same tail
    for k in range(2):
        assert both.finish_s[k] == pytest.approx(2 * wire / cap + tail, rel=1e-9)
        assert both.slowdown[k] == pytest.approx((2 * wire / cap + tail) / (wire / cap + tail), abs=1e-4)
    assert list(both.fabric) == ["network", "network"] and list(both.bytes) == [b, b]


def test_nvlink_rows_share_the_sending_gpus_port_and_leave_the_fabric_idle():
    """GPU 0 sends to GPUs 1 and 2 over NVLink (the hand-built network: 1e12 B/s per GPU
    port, no NVLink latency, no headers): alone a flow would take b / 1e12; the two share
    GPU 0's egress port, so each takes twice that, slowdown 2, and no fabric link moves a byte."""
    b = 10_000_000
    held = _two_flows([0, 0], [1, 2], b, fluid=True)
    fct = pd.read_csv(io.StringIO(fct_csv(held)))
    assert list(fct.fabric) == ["nvlink", "nvlink"] and list(fct.src_rank) == [0, 0]
    for k in range(2):
        assert fct.ideal_finish_s[k] == pytest.approx(b / 1e12, rel=1e-9)
        assert fct.finish_s[k] == pytest.approx(2 * b / 1e12, rel=1e-9)
        assert fct.slowdown[k] == pytest.approx(2.0, abs=1e-4)
    links = pd.read_csv(io.StringIO(links_csv(held, duration_s=1.0)))
    assert (links.tx_bytes == 0).all() and (links.utilisation == 0).all()


def test_links_csv_conserves_wire_bytes_and_names_directions():
    b = 10_000_000
    wire = b + math.ceil(b / PAYLOAD) * HEADER
    links = pd.read_csv(io.StringIO(links_csv(_two_flows([0, 1], [2, 3], b), duration_s=1.0)))
    tx = {(r.src, r.dst): r.tx_bytes for r in links.itertuples()}
    assert tx[("nic0", "leaf0")] == wire and tx[("nic1", "leaf0")] == wire
    assert tx[("leaf0", "spine0")] == 2 * wire and tx[("spine0", "leaf1")] == 2 * wire
    assert tx[("leaf0", "nic0")] == 0 and tx[("spine0", "leaf0")] == 0
    row = links[(links.src == "leaf0") & (links.dst == "spine0")].iloc[0]
    assert row.utilisation == pytest.approx(2 * wire * 8 / GBPS, abs=1e-6)  # written to 6 decimals
    assert len(links) == 2 * 6  # each of the six links, both directions


def test_a_collective_rows_match_its_flows_and_every_flow_finishes():
    from workload_gen.core.system import load_system

    t, backend, _ = _run(load_system("h100"), 16, CollKind.ALL_REDUCE, 64 << 20)
    out = render_flow_outputs(backend, t)
    assert set(out) == set(FLOW.output_files) == set(FLOW_OUTPUT_FILES)
    fct = pd.read_csv(io.StringIO(out["fct.csv"]))
    assert len(fct) == backend.net.flows_done == backend.stats()["flows"]
    assert list(fct.flow) == list(range(len(fct)))
    assert (fct.finish_s >= fct.start_s).all() and (fct.slowdown >= 1 - 1e-3).all()
    assert fct.finish_s.max() <= t + 1e-12
    links = pd.read_csv(io.StringIO(out["links.csv"]))
    net = fct[fct.fabric == "network"]
    wire = net.bytes + np.ceil(net.bytes / PAYLOAD) * HEADER
    nic_up = links[links.src.str.startswith("nic") & ~links.dst.str.startswith("nic")]
    assert nic_up.tx_bytes.sum() == pytest.approx(wire.sum(), rel=1e-9)  # every fabric byte leaves a NIC once


def test_run_flow_writes_both_files(tmp_path):
    out = tmp_path / "run"
    subprocess.run(["run-flow", "--model", "gpt3-1.3b", "--num-layers", "1", "--tp", "8", "--world-size", "16",
                    "--global-batch", "2", "--seq-length", "256", "--system", "h100", "--out", str(out), "-q"],
                   check=True, capture_output=True)
    fct = pd.read_csv(out / "fct.csv")
    assert len(fct) > 0 and set(fct.fabric) == {"network", "nvlink"}
    assert (pd.read_csv(out / "links.csv").tx_bytes > 0).any()


def test_slowdown_cells_are_never_nan():
    """A flow with no duration of its own took its ideal (1.0000); one that never finished
    has an empty slowdown cell (the same rule in run-ns3's file: network/flow_files.fct_row)."""
    from network.flow_files import fct_row

    done_at_once = fct_row(0, 0, "x", "dp", 0, 0, 0, False, 1e-3, 1e-3, 0.0).rstrip("\n").split(",")
    assert done_at_once[-1] == "1.0000"
    unfinished = fct_row(1, 0, "x", "dp", 0, 1, 1024, False, 1e-3, -1.0, 2e-6).rstrip("\n").split(",")
    assert unfinished[-1] == "" and "nan" not in ",".join(unfinished).lower()
    twice = fct_row(2, 0, "x", "dp", 0, 1, 1024, False, 1e-3, 1e-3 + 4e-6, 2e-6).rstrip("\n").split(",")
    assert float(twice[-1]) == pytest.approx(2.0) and float(twice[-2]) == pytest.approx(1e-3 + 2e-6)
