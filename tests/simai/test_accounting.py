"""SimAI_analytical's accounting: the official example, and each formula checked by hand."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
from simai_testdata import DATA

from engine.simai_accounting import SimaiCluster, load_ratio_table, simai_accounting
from formats.endtoend_csv import SUMMARY_HEADER, write_endtoend_csv
from formats.simai_reader import parse_simai, read_simai
from workload_gen.core.errors import ConfigError

GIB = 2**30
OFFICIAL_US = {"total": 7_545_619, "compute": 4_542_795, "dp": 40_332, "dp_ep": 1_067_010, "tp": 326_686,
               "ep": 1_222_811, "bubble": 345_984, "pp": 0}
"""What SimAI_analytical reports for workload_analytical.txt with -g 9216 -nv 360 -nic 48.5 -n_p_s 8 -g_p_s 8."""


def _cluster(**kw) -> SimaiCluster:
    base = dict(gpus=9216, gpus_per_server=8, nvlink_busbw=360.0, nic_busbw=48.5, nics_per_server=8)
    base.update(kw)
    return SimaiCluster(**base)


def _one(rec: str, *, tp: int = 8, ep: int = 1, pp: int = 1, vpp: int = 1, ga: int = 1, pp_comm: int = 0, n: int = 1):
    header = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} vpp: {vpp} "
              f"ga: {ga} all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_comm}")
    return parse_simai(header + f"\n{n}\n" + "\n".join([rec] * n) + "\n")


def test_official_example_matches_simai_to_the_microsecond() -> None:
    w = read_simai(DATA / "simai" / "workload_analytical.txt")
    r = simai_accounting(w, _cluster())
    got = {"total": r.total_us, "compute": r.compute_us, "dp": r.dp_us, "dp_ep": r.dp_ep_us, "tp": r.tp_us,
           "ep": r.ep_us, "bubble": r.bubble_us, "pp": r.pp_us}
    for key, want in OFFICIAL_US.items():
        assert got[key] == pytest.approx(want, rel=0.01, abs=1e-9), key  # the acceptance criterion
        assert round(got[key]) == want, key  # and in fact SimAI's printed integer
    assert len(r.layers) == 1789


def test_tp_all_reduce_is_the_ring_formula_on_nvlink() -> None:
    # 1 GiB all-reduce over 8 GPUs of one node: 2*(n-1)/n * S / busbw; all-reduce ratio is 1.
    r = simai_accounting(_one("x\t-1\t0\tALLREDUCE\t1073741824\t0\tNONE\t0\t0\tNONE\t0\t0"), _cluster(gpus=8))
    assert r.tp_us == pytest.approx(2 * 7 / 8 * 1.0 / 360 * 1e6, rel=2e-5)  # ns truncation, float32 Tick scaling
    assert r.layers[0].fwd_busbw == pytest.approx(360, rel=2e-5)


def test_dp_all_gather_uses_the_nics_of_the_dp_ranks_of_a_node() -> None:
    # tp=2 on 8-GPU servers: 4 DP ranks per node share 8/2 = 4 NICs of 48.5 -> 194 GB/s < NVLink 360.
    w = _one("x\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tALLGATHER\t2147483648\t0", tp=2)
    r = simai_accounting(w, _cluster(gpus=64))  # dp = 32
    assert r.dp_us == pytest.approx(2.0 / 194 * 31 / 32 * 1e6, rel=2e-5)  # ns truncation, float32 Tick scaling
    assert r.tp_us == 0 and r.dp_ep_us == 0


def test_dp_ep_across_nodes_gets_one_nic() -> None:
    # tp*ep = 16 > 8 GPUs per server: DP_EP runs on one GPU per node with 8/8 = 1 NIC.
    w = _one("x\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tREDUCESCATTER_DP_EP\t1073741824\t0", tp=2, ep=8)
    r = simai_accounting(w, _cluster(gpus=128))  # dp = 64, dp/ep = 8
    assert r.dp_ep_us == pytest.approx(1.0 / 48.5 * 7 / 8 * 1e6, rel=2e-5)  # ns truncation, float32 Tick scaling


def test_tp_all_gather_ratio_is_interpolated_and_normalised() -> None:
    # 24 MiB sits halfway between the 16 MiB and 32 MiB rows. Inside one node SimAI's is_nvlink
    # stays false, so the NIC table's 1-node column is used: (0.45 + 0.55)/2 / 0.81.
    size = 24 * 2**20
    w = _one(f"x\t-1\t0\tALLGATHER\t{size}\t0\tNONE\t0\t0\tNONE\t0\t0")
    r = simai_accounting(w, _cluster(gpus=8))
    ratio = (0.45 + 0.55) / 2 / 0.81
    assert r.tp_us == pytest.approx(size / GIB / (ratio * 360) * 7 / 8 * 1e6, rel=2e-5)


def test_ep_all_to_all_across_nodes_formula_and_table() -> None:
    # tp=2, ep=16: 32 GPUs over 4 nodes, 4 GPUs of each node in the group, NICs 8/2 = 4.
    # busbw = nic*nics/gpn * (nranks-1)/((nodes-1)*gpn) = 48.5*4/4 * 15/(3*4); ata table, 4-node column.
    size = 64 * 2**20
    w = _one(f"x\t-1\t0\tALLTOALL_EP\t{size}\t0\tNONE\t0\t0\tNONE\t0\t0", tp=2, ep=16)
    r = simai_accounting(w, _cluster(gpus=64))
    busbw = 48.5 * 4 / 4 * 15 / (3 * 4)
    ratio = 0.83 / 0.95
    assert r.ep_us == pytest.approx(size / GIB / (ratio * busbw) * 15 / 16 * 1e6, rel=2e-5)
    assert r.tp_us == 0


def test_short_messages_use_the_latency_table_and_its_gaps() -> None:
    w = _one("x\t-1\t0\tALLREDUCE\t65536\t0\tNONE\t0\t0\tNONE\t0\t0", tp=4)
    assert simai_accounting(w, _cluster(gpus=8)).tp_us == pytest.approx(12.0)
    w3 = _one("x\t-1\t0\tALLREDUCE\t65536\t0\tNONE\t0\t0\tNONE\t0\t0", tp=3)
    assert simai_accounting(w3, _cluster(gpus=3)).tp_us == 0.0  # SimAI's table has no 3: costs 0 (its bug)
    tiny = _one("x\t-1\t0\tALLREDUCE\t4\t0\tNONE\t0\t0\tNONE\t0\t0", tp=2)
    assert simai_accounting(tiny, _cluster(gpus=8)).tp_us == pytest.approx(10.0)  # 4 B -> 4096 B, still short


def test_overlap_ratios_scale_exposure_not_the_bubble() -> None:
    w = read_simai(DATA / "simai" / "workload_analytical.txt")
    base = simai_accounting(w, _cluster())
    half = simai_accounting(w, _cluster(tp_o=0.5, ep_o=0.25, dp_o=1.0))
    assert half.tp_us == pytest.approx(base.tp_us * 0.5, rel=1e-5)
    assert half.ep_us == pytest.approx(base.ep_us * 0.75, rel=1e-5)
    assert half.dp_us == 0 and half.dp_ep_us == 0
    assert half.bubble_us == base.bubble_us and half.compute_us == base.compute_us


def test_bubble_formula_skips_embedding_layer() -> None:
    rec = "{name}\t-1\t1000\tALLREDUCE\t65536\t2000\tNONE\t0\t3000\tNONE\t0\t0"
    text = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 4 vpp: 2 ga: 3 all_gpus: 8 "
            "pp_comm: 1048576\n2\n" + rec.format(name="embedding_layer") + "\n" + rec.format(name="layer") + "\n")
    r = simai_accounting(parse_simai(text), _cluster(gpus=8))
    per_record_us = (1000 + 2000 + 3000) / 1000 + 10  # compute + the 10 us short all-reduce (tp 2)
    assert r.bubble_us == pytest.approx(per_record_us * (4 - 1) / (3 * 2))
    assert r.compute_us == pytest.approx(12.0) and r.pp_us == 0


def test_exposed_pp_divides_by_pp_o_as_simai_does() -> None:
    w = _one("x\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tNONE\t0\t0", tp=2, pp=2, vpp=3, ga=5, pp_comm=2**30)
    r = simai_accounting(w, _cluster(gpus=8, pp_o=0.5))
    assert r.pp_us == pytest.approx(2 * 3 * 5 * (1 / 0.5 * 1e9) / 1000 * 0.5, abs=1)
    assert r.total_us == pytest.approx(r.pp_us)


@pytest.mark.parametrize("kw, field", [
    (dict(gpus=9215), "gpus"),
    (dict(pp_o=0.0), "pp_o"),
    (dict(tp_o=1.5), "tp_o"),
    (dict(nic_busbw=0.0), "nic_busbw"),
])
def test_bad_cluster_flags_raise_config_errors(kw, field) -> None:
    w = read_simai(DATA / "simai" / "workload_analytical.txt")
    with pytest.raises(ConfigError) as info:
        simai_accounting(w, _cluster(**kw))
    assert info.value.field == field and "\n" not in str(info.value)


def test_zero_nic_mapping_is_refused_not_garbage() -> None:
    # 2 NICs per server but tp*ep = 4 ranks inside the node: SimAI's NICs/(tp*ep) is 0.
    w = _one("x\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tALLGATHER_DP_EP\t1073741824\t0", tp=2, ep=2)
    with pytest.raises(ConfigError, match="NIC"):
        simai_accounting(w, _cluster(gpus=16, nics_per_server=2))


def test_ratio_tables_ship_with_the_package_and_equal_simai_data() -> None:
    for name in ("nic", "nvlink", "ata"):
        shipped = load_ratio_table(name)
        ref = [line.split(",") for line in (DATA / "simai" / "ratio" / f"{name}_ratio.csv").read_text().splitlines()[1:]]
        assert [row[0] for row in shipped] == [float(r[0]) for r in ref]
        assert shipped[0][0] == 16 * 2**20 and shipped[-1][0] == 16 * GIB


def test_endtoend_csv_from_the_official_example(tmp_path: Path) -> None:
    w = read_simai(DATA / "simai" / "workload_analytical.txt")
    r = simai_accounting(w, _cluster())
    out = tmp_path / "EndToEnd.csv"
    write_endtoend_csv(out, r.totals_us(), [row.as_dict() for row in r.layers], name="workload_analytical.txt")
    lines = out.read_text().splitlines()
    assert lines[0] == SUMMARY_HEADER
    cells = [c.strip() for c in lines[1].split(",")]
    assert cells[0] == "workload_analytical.txt"
    numbers = [int(c.split(" ")[0]) for c in cells[1:]]
    assert numbers == [40332, 1067010, 326686, 1222811, 0, 345984, 4542795, 2656839, 7545619]
    shares = [float(c.split("(")[1].rstrip("%)")) for c in cells[1:-1]]
    assert shares[6] == pytest.approx(4542795 / 7545619 * 100, abs=0.01)
    table = list(csv.reader(lines[2:-1]))
    assert table[0][:3] == ["layer_name", "trainsim", "fwd compute"] and len(table[0]) == 17
    assert len(table) == 1 + 1789 and table[1][0] == "grad_gather"
    assert lines[-1].startswith("# units: times in microseconds")
    # per-layer exposed comm adds up to the categories
    tp_sum = sum(float(row[5]) + float(row[7]) for row in table[1:])
    assert tp_sum == pytest.approx(r.tp_us + r.ep_us, rel=1e-3)


def test_endtoend_csv_from_a_generic_breakdown_and_atomicity(tmp_path: Path) -> None:
    from formats.endtoend_csv import totals_from_breakdown
    totals = totals_from_breakdown(1.0, {"tp": 0.1, "cp": 0.05, "dp": 0.2, "edp": 0.3, "ep": 0.4, "pp": 0.01},
                                   bubble_s=0.5, optimizer_s=0.25, iteration_time_s=3.0)
    out = tmp_path / "EndToEnd.csv"
    write_endtoend_csv(out, totals)
    cells = [c.strip() for c in out.read_text().splitlines()[1].split(",")]
    assert [int(c.split(" ")[0]) for c in cells[1:]] == [200000, 300000, 150000, 400000, 10000, 500000, 1250000,
                                                        1050000, 3000000]
    with pytest.raises(ValueError):
        write_endtoend_csv(tmp_path / "bad.csv", {"compute": 1.0, "xp": 2.0})
    assert not (tmp_path / "bad.csv").exists()
