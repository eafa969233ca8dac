"""SimAI's report in our units (engine.simai_report), built once for both ways in.

The figures a SimAI-accounting run reports must be SimAI's own (its printed microseconds
for the official example, stated here as SimAI printed them), must add up (compute +
exposed communication + bubble = iteration time; the per-record lines sum to the totals),
and must be the same whether the run starts from a SimAI file (the run command) or from
one of our workloads (engine.pipeline, which sweeps and search use).
"""
from __future__ import annotations

import json

import pytest
from simai_testdata import DATA, toy_workload

from engine.pipeline import run_workload
from engine.simai_accounting import SimaiCluster
from engine.simai_report import simai_cluster, simai_report, simai_workload_result
from formats.run_outputs import simai_summary_dict
from formats.simai_convert import workload_to_simai
from formats.simai_reader import read_simai
from workload_gen.core.system import SYSTEMS

SIMAI_PRINTED_US = {"total": 7_545_619, "compute": 4_542_795, "dp": 40_332, "edp": 1_067_010, "tp": 326_686,
                    "ep": 1_222_811, "bubble": 345_984, "pp": 0}
"""SimAI_analytical's report of workload_analytical.txt with -g 9216 -nv 360 -nic 48.5 -n_p_s 8 -g_p_s 8."""


@pytest.fixture(scope="module")
def official():
    sw = read_simai(DATA / "simai" / "workload_analytical.txt")
    cluster = SimaiCluster(gpus=9216, gpus_per_server=8, nvlink_busbw=360.0, nic_busbw=48.5, nics_per_server=8)
    return sw, cluster, simai_report(sw, cluster)


def test_the_report_in_seconds_is_simais_printed_figures(official):
    _, _, rep = official
    b = rep.breakdown()
    got = {"total": rep.iteration_time_s, "compute": b.compute_s, "bubble": b.bubble_s, **b.exposed_comm_s}
    assert set(got) == set(SIMAI_PRINTED_US)
    for key, us in SIMAI_PRINTED_US.items():
        assert round(got[key] * 1e6) == us, key
    assert b.optimizer_s == 0.0 and b.other_s == 0.0


def test_the_parts_add_up_to_the_iteration(official):
    _, _, rep = official
    b = rep.breakdown()
    assert b.compute_s + sum(b.exposed_comm_s.values()) + b.bubble_s == pytest.approx(rep.iteration_time_s, rel=1e-12)


def test_the_record_lines_add_up_to_the_totals(official):
    sw, _, rep = official
    lines = rep.layer_lines()
    assert [ln.record for ln in lines] == list(range(len(sw.records)))
    assert [ln.name for ln in lines] == [r.name for r in sw.records]
    compute = sum(ln.fwd_compute_s + ln.wg_compute_s + ln.ig_compute_s for ln in lines)
    assert compute == pytest.approx(rep.compute_s, rel=1e-9)
    # each record's exposed time is its share of SimAI's DP, DP_EP, TP and EP (PP and the bubble are not per record)
    e = rep.exposed_comm_s
    assert sum(ln.exposed_comm_s for ln in lines) == pytest.approx(e["dp"] + e["edp"] + e["tp"] + e["ep"], rel=1e-9)
    for ln in lines:  # SimAI scales a Tick by (1 - overlap) in single precision: 2^-24 relative, rounded up or down
        assert ln.exposed_comm_s <= (ln.fwd_comm_s + ln.wg_comm_s + ln.ig_comm_s) * (1 + 2**-23) + 1e-12


def test_summary_lists_simais_categories_in_its_order(official):
    sw, cluster, rep = official
    d = simai_summary_dict(iteration_time_s=rep.iteration_time_s, compute_s=rep.compute_s,
                           exposed_comm_s=rep.exposed_comm_s, bubble_s=rep.bubble_s, totals_us=rep.totals_us(),
                           workload="w.txt", header=sw.header, cluster=cluster, system=SYSTEMS["h100"])
    assert list(d["breakdown_s"]) == ["compute", "exposed_dp", "exposed_edp", "exposed_tp", "exposed_ep",
                                      "exposed_pp", "bubble", "optimizer"]
    assert d["breakdown_s"]["exposed_edp"] == rep.exposed_comm_s["edp"]
    # every figure is SimAI's printed one under our name (not only the report's own value passed through)
    for key, us in SIMAI_PRINTED_US.items():
        name = {"total": "iteration_time_s"}.get(key)
        got = d[name] if name else d["breakdown_s"][key if key in ("compute", "bubble") else f"exposed_{key}"]
        assert round(got * 1e6) == us, key
    assert d["simai_totals_us"]["dp_ep"] == pytest.approx(SIMAI_PRINTED_US["edp"], abs=0.5)
    assert d["config"]["cluster"]["nic_busbw"] == 48.5 and d["config"]["simai_header"]["tp"] == sw.header.tp
    json.dumps(d)


def test_our_workload_gets_the_same_report_as_its_exported_file():
    """engine.pipeline's SimAI accounting of a workload = the report of the file it exports to."""
    w = toy_workload()
    system = SYSTEMS["h100"]
    via_pipeline = run_workload(w, system, accounting="simai")
    direct = simai_workload_result(w, system)
    from_file = simai_report(workload_to_simai(w, 0), simai_cluster(system, w.parallel.world_size))
    assert via_pipeline.breakdown == direct.breakdown == from_file.breakdown()
    assert via_pipeline.iteration_time_s == from_file.iteration_time_s
    assert via_pipeline.backend == "simai-accounting" and via_pipeline.stage_breakdowns == (from_file.breakdown(),)
    assert via_pipeline.extras["simai_totals_us"] == from_file.totals_us()
    assert via_pipeline.extras["simai_layers"] == from_file.endtoend_rows()


def test_the_cluster_takes_the_systems_figures_unless_simais_are_given():
    system = SYSTEMS["h100"]
    c = simai_cluster(system, 16)
    assert (c.gpus, c.gpus_per_server, c.nics_per_server) == (16, system.gpus_per_node, system.nics_per_node)
    assert c.nvlink_busbw == system.nvlink_busbw / 2**30 and c.nic_busbw == system.nic_busbw / 2**30
    assert (c.dp_o, c.tp_o, c.ep_o, c.pp_o) == (0.0, 0.0, 0.0, 1.0)  # SimAI_analytical's defaults
    given = simai_cluster(system, 16, nvlink_busbw=360.0, nic_busbw=48.5, tp_o=0.5)
    assert (given.nvlink_busbw, given.nic_busbw, given.tp_o) == (360.0, 48.5, 0.5)
