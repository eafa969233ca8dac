"""The analytical backend against hand-computed closed forms (docs/analytical.md)."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from network.analytical import AnalyticalBackend
from network.backend import Transfer
from network.busbw_overrides import read_busbw_yaml
from network.busbw import Link
from network.efficiency import EfficiencyTable, load_efficiency
from network.efficiency_fit import fit_nic_half_bytes, fit_nvlink, read_aicb_log, read_ratio_column
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import get_system

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
S = 64 * 2**20  # 64 MiB


def op(kind: CollKind, group: Group, n: int, nbytes: int = S) -> CollectiveOp:
    return CollectiveOp("x", 0, Phase.FWD, kind, group, n, nbytes)


def ideal(system: str, world: int = 64) -> AnalyticalBackend:
    return AnalyticalBackend(get_system(system), world, efficiency=EfficiencyTable.ideal())


def test_ring_allreduce_inside_one_node_is_the_ring_formula():
    sysc = get_system("a100")  # no NVLS: NCCL's ring
    n = 8
    expected = 2 * (n - 1) * sysc.nvlink_latency_s + 2 * (n - 1) / n * S / (230e9)
    got = ideal("a100").collective_time(op(CollKind.ALL_REDUCE, Group.TP, n), tuple(range(8)))
    assert got == pytest.approx(expected, rel=1e-12)


def test_allgather_one_gpu_per_node_uses_one_nic():
    sysc = get_system("h100")
    ranks = (0, 8, 16, 24)  # four nodes, one GPU each (a DP group under TP=8)
    busbw = 400e9 / 8 * 0.92  # one 400 Gb/s NIC at the preset's 92% efficiency
    expected = 3 * sysc.network_latency_s + 3 / 4 * S / busbw
    got = ideal("h100").collective_time(op(CollKind.ALL_GATHER, Group.DP, 4), ranks)
    assert got == pytest.approx(expected, rel=1e-12)


def test_hierarchical_ring_uses_one_rail_per_gpu_and_is_capped_by_nvlink():
    sysc = replace(get_system("h100"), nvls=False)  # no NVLS: NCCL's ring for large messages
    b = AnalyticalBackend(sysc, 64, efficiency=EfficiencyTable.ideal())
    # two GPUs per node on four nodes: two rails, 2 x 46 GB/s, well below NVLink
    ranks = (0, 1, 8, 9, 16, 17, 24, 25)
    n = 8
    expected = 2 * (n - 1) * sysc.network_latency_s + 2 * (n - 1) / n * S / (2 * 50e9 * 0.92)
    assert b.collective_time(op(CollKind.ALL_REDUCE, Group.DP, n), ranks) == pytest.approx(expected, rel=1e-12)
    # eight GPUs per node on two nodes: eight rails (368 GB/s) exceed NVLink's 360 GB/s busbw
    ranks16 = tuple(range(16))
    expected16 = 2 * 15 * sysc.network_latency_s + 2 * 15 / 16 * S / 360e9
    assert b.collective_time(op(CollKind.ALL_REDUCE, Group.DP, 16), ranks16) == pytest.approx(expected16, rel=1e-12)


def test_small_allreduce_across_nodes_uses_the_double_binary_tree():
    sysc = get_system("a100")
    small = 2 * 2**20  # <= 4 MiB per node spanned: NCCL's tree wins on latency
    ranks = (0, 8, 16, 24, 32, 40, 48, 56)  # 8 nodes, one GPU each: node tree of height 3
    expected = 2 * 3 * sysc.network_latency_s + 2 * 7 / 8 * small / (200e9 / 8 * 0.92)
    got = ideal("a100").collective_time(op(CollKind.ALL_REDUCE, Group.DP, 8, small), ranks)
    assert got == pytest.approx(expected, rel=1e-12)


def test_nvls_tree_across_nvswitch_nodes():
    sysc = get_system("h100")
    ranks = tuple(range(16))  # two full nodes: NVLS inside, a 2-node tree on 8 rails between them
    busbw = min(480e9, 8 * 50e9 * 0.92)
    # NCCL's pipeline fill (collectives.closed_form.nvls_tree_fill_s), written out: below 4
    # nodes the NVLS-tree chunk is NCCL_NVLS_CHUNKSIZE = 128 KiB, and 16 NVLS channels x 8
    # heads = 128 lanes on our 16 channels make one flow 128 KiB x 128 / 16 = 1 MiB; a 2-node
    # tree has height 1, so the first flow crosses 2*1 - 1 edges at one NIC's rate, and the
    # 16 channels' first flows leave the GPU over NVLink
    flow = 2**20
    fill = 1 * flow / (50e9 * 0.92) + 16 * flow / 360e9
    expected = 2 * sysc.nvlink_latency_s + 2 * 1 * sysc.network_latency_s + fill + 2 * 15 / 16 * S / busbw
    got = ideal("h100").collective_time(op(CollKind.ALL_REDUCE, Group.DP, 16), ranks)
    assert got == pytest.approx(expected, rel=1e-12)


def test_alltoall_across_nodes_is_bounded_by_the_off_node_share():
    sysc = get_system("h100")
    ranks = tuple(range(16))  # 8 per node, 2 nodes
    off = 8 / 16 * S / (50e9 * 0.92)  # half the buffer leaves the node over this GPU's NIC
    on = 7 / 16 * S / 360e9
    expected = sysc.network_latency_s + max(off, on)
    got = ideal("h100", 16).collective_time(op(CollKind.ALL_TO_ALL, Group.EP, 16), ranks)
    assert got == pytest.approx(expected, rel=1e-12)


def test_sendrecv_factor_one():
    sysc = get_system("b200")
    b = ideal("b200")
    assert b.collective_time(op(CollKind.SEND_RECV, Group.PP, 2), (0, 8)) == pytest.approx(
        sysc.network_latency_s + S / (50e9 * 0.92), rel=1e-12)
    assert b.collective_time(op(CollKind.SEND_RECV, Group.PP, 2), (0, 4)) == pytest.approx(
        sysc.nvlink_latency_s + S / 720e9, rel=1e-12)


def test_trivial_groups_cost_nothing():
    b = ideal("h100")
    assert b.collective_time(op(CollKind.ALL_REDUCE, Group.TP, 1), (3,)) == 0.0
    assert b.collective_time(op(CollKind.ALL_REDUCE, Group.TP, 8, 0), tuple(range(8))) == 0.0


def test_default_efficiency_is_the_shipped_curve():
    sysc = get_system("a100")
    b = AnalyticalBackend(sysc, 8)
    table = load_efficiency("a100")
    nv = table.curves["nvlink"]
    assert nv.peak_fraction == pytest.approx(0.859)
    moved = 2 * 7 / 8 * S
    expected = 14 * sysc.nvlink_latency_s + moved / (230e9 * nv.peak_fraction) + nv.half_time_s
    assert b.collective_time(op(CollKind.ALL_REDUCE, Group.TP, 8), tuple(range(8))) == pytest.approx(expected, rel=1e-12)
    # other systems keep the full large-message busbw
    assert load_efficiency("h100").curves["nvlink"].peak_fraction == 1.0


def test_busbw_yaml_override_replaces_busbw_and_efficiency():
    path = DATA / "simai" / "busbw.yaml"
    ov = read_busbw_yaml(path)
    assert ov[(Group.TP, CollKind.ALL_REDUCE)] == 300 * 2**30
    assert (Group.DP, CollKind.ALL_REDUCE) not in ov  # "null" means no override
    assert ov[(Group.PP, CollKind.SEND_RECV)] == 47.5 * 2**30
    sysc = get_system("h100")
    b = AnalyticalBackend(sysc, 64, busbw_overrides=path)
    got = b.collective_time(op(CollKind.ALL_REDUCE, Group.TP, 8), tuple(range(8)))
    assert got == pytest.approx(2 * sysc.nvlink_latency_s + 2 * 7 / 8 * S / (300 * 2**30), rel=1e-12)
    # a DP all-reduce has no override: computed busbw with the efficiency curve
    plain = AnalyticalBackend(sysc, 64)
    dp = op(CollKind.ALL_REDUCE, Group.DP, 8)
    assert b.collective_time(dp, tuple(range(0, 64, 8))) == plain.collective_time(dp, tuple(range(0, 64, 8)))


def test_busbw_yaml_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("test\nTP:\n  allreduce,: fast\n")
    with pytest.raises(FormatError, match=r"bad.yaml:3: .*not a number"):
        read_busbw_yaml(p)
    p.write_text("XX:\n  allreduce,: 3\n")
    with pytest.raises(FormatError, match="unknown group 'XX'"):
        read_busbw_yaml(p)


def test_efficiency_is_monotone_in_size():
    for system in ("a100", "h100", "b200"):
        table = load_efficiency(system)
        for link, curve in table.curves.items():
            sizes = [2**k for k in range(0, 37)]
            effs = [curve.efficiency(s, 100e9) for s in sizes]
            assert all(a < b for a, b in zip(effs, effs[1:])), (system, link)
            assert effs[-1] <= curve.peak_fraction


def test_efficiency_fit_reproduces_the_shipped_table_and_the_aicb_log():
    points = read_aicb_log(DATA / "real" / "aicb_a100_comm_log.csv")
    assert len(points) == 11
    fit = fit_nvlink(points, get_system("a100"))
    shipped = load_efficiency("a100").curves["nvlink"]
    assert fit.peak_fraction == pytest.approx(shipped.peak_fraction, rel=1e-3)
    assert fit.half_time_s == pytest.approx(shipped.half_time_s, rel=1e-3)
    assert shipped.half_bytes(230e9) == pytest.approx(fit.half_bytes, rel=1e-3)  # 15.4 MB at 197.6 GB/s
    # stated in efficiency.yaml and docs/analytical.md: median 6.8%, max 11.9%
    assert fit.median_abs_error < 0.07 and fit.max_abs_error < 0.12
    # And the backend itself, with the shipped table, predicts the log's large collectives
    b = AnalyticalBackend(get_system("a100"), 8)
    for p in points:
        if p.size >= 2**20:
            t = b.collective_time(op(p.kind, Group.TP, p.n, p.size), tuple(range(p.n)))
            assert t == pytest.approx(p.time_s, rel=0.12), p
    nic = fit_nic_half_bytes(read_ratio_column(DATA / "simai" / "ratio" / "nic_ratio.csv"))
    assert nic.half_time_s == pytest.approx(load_efficiency("h100").curves["nic"].half_time_s, rel=1e-3)


def test_backend_protocol_orders_completions():
    b = ideal("h100")
    assert b.next_completion_time() == math.inf
    big = op(CollKind.ALL_REDUCE, Group.DP, 8, 8 * S)
    small = op(CollKind.ALL_REDUCE, Group.TP, 8, S // 8)
    b.submit(Transfer(0, big, tuple(range(0, 64, 8))), 0.0)
    b.submit(Transfer(1, small, tuple(range(8))), 0.001)
    t_small = 0.001 + b.collective_time(small, tuple(range(8)))
    t_big = b.collective_time(big, tuple(range(0, 64, 8)))
    assert t_small < t_big
    assert b.next_completion_time() == pytest.approx(t_small)
    assert b.advance_to(t_small - 1e-9) == []
    done = b.advance_to(10.0)
    assert [c.id for c in done] == [1, 0]
    assert done[1].time == pytest.approx(t_big)
    assert b.next_completion_time() == math.inf


def test_system_yaml_with_fewer_nics_and_oversubscription(tmp_path):
    """4 NICs for 8 GPUs on a 2:1 oversubscribed fabric: a GPU owns half a NIC, halved again."""
    from workload_gen.core.system import load_system

    y = tmp_path / "sys.yaml"
    y.write_text("base: h100\nnics_per_node: 4\noversubscription: 2\n")
    sysc = load_system(str(y))
    b = AnalyticalBackend(sysc, 64, efficiency=EfficiencyTable.ideal())
    ranks = (0, 8, 16, 24)
    busbw = 4 / 8 * 50e9 * 0.92 / 2
    expected = 3 * sysc.network_latency_s + 3 / 4 * S / busbw
    assert b.collective_time(op(CollKind.ALL_GATHER, Group.DP, 4), ranks) == pytest.approx(expected, rel=1e-12)


def test_nvls_tree_fill_runs_on_the_groups_own_rails_at_the_thinned_rate():
    """4 GPUs of each of 2 nodes (a DGX node: 8 GPUs, 8 NICs) own 4 rails, so NCCL's NVLS tree
    has 4 heads per node: 16 channels x 4 heads = 64 lanes, chunk 128 KiB (NCCL_NVLS_CHUNKSIZE,
    128 MiB is not below 4 x 64 lanes x 128 KiB = 32 MiB), one flow = 128 KiB x 64 / 16 =
    512 KiB. A 2-node tree has height 1: the first flow crosses one edge at one NIC's rate,
    halved by 2:1 oversubscription (as the bandwidth term is), and 16 channels' first flows
    leave over NVLink. The fill used all 8 NICs and the unthinned rate before."""
    from network.busbw import collective_path
    from workload_gen.core.placement import GroupShape

    sysc = replace(get_system("h100"), oversubscription=2.0)
    path = collective_path(CollKind.ALL_REDUCE, GroupShape(8, 2, 4), sysc, 128 * 2**20)
    assert path.algorithm == "nvls_tree"
    flow = 512 * 1024
    fill = flow / (50e9 * 0.92 / 2) + 16 * flow / 360e9
    assert path.latency_s == pytest.approx(2 * 2e-6 + 2 * 1 * 5e-6 + fill, rel=1e-12)


def test_b200_curves_are_simumax_kernel_fits_per_collective_kind():
    """B200's NVLink peaks are the NCCL fits SimuMax measured on the node of the B200 training
    rows (efficient_factor x 900 GiB/s, configs/system/b200_bf16_ceperm.json @ 4dcaae5):
    all-gather 0.6735, all-to-all 0.5968, all-reduce (NVLS) 0.7424; the all-to-all has a curve
    of its own, other kinds fall back to the link's."""
    sysc = get_system("b200")
    table = load_efficiency("b200")
    gib900 = 900 * 2**30
    assert table.curve(Link.NVLINK, "allgather").peak_fraction * sysc.nvlink_busbw == pytest.approx(
        0.6735 * gib900, rel=2e-3)
    assert table.curve(Link.NVLINK, "alltoall").peak_fraction * sysc.nvlink_busbw == pytest.approx(
        0.5968 * gib900, rel=2e-3)
    assert table.curve(Link.NVLS, "allreduce").peak_fraction * sysc.nvls_busbw == pytest.approx(
        0.7424 * gib900, rel=2e-3)
    assert table.curve(Link.NVLINK, "reducescatter") is table.curve(Link.NVLINK)
    b = AnalyticalBackend(sysc, 8)
    a2a = b.collective_time(op(CollKind.ALL_TO_ALL, Group.EP, 8), tuple(range(8)))
    ag = b.collective_time(op(CollKind.ALL_GATHER, Group.TP, 8), tuple(range(8)))
    nv = table.curve(Link.NVLINK, "alltoall")
    assert a2a == pytest.approx(sysc.nvlink_latency_s + 7 / 8 * S / (sysc.nvlink_busbw * nv.peak_fraction)
                                + nv.half_time_s, rel=1e-12)
    assert a2a > ag * 0.99  # same bytes moved ((n-1)/n of S), lower peak


def test_b300_inside_its_node_times_collectives_as_b200_does():
    """DGX B300 carries DGX B200's NVLink 5 switch board, so NCCL reaches the same share of it:
    the shipped table gives B300 the B200 kernel fits. Every collective kind inside the
    8-GPU node then takes exactly as long on both presets; before, B300's table was the
    default one and its all-to-all ran at 720 GB/s against B200's measured 577 GB/s."""
    b200, b300 = (AnalyticalBackend(get_system(s), 8) for s in ("b200", "b300"))
    ranks = tuple(range(8))
    for kind, group in ((CollKind.ALL_TO_ALL, Group.EP), (CollKind.ALL_GATHER, Group.TP),
                        (CollKind.REDUCE_SCATTER, Group.TP), (CollKind.ALL_REDUCE, Group.TP)):
        assert b300.collective_time(op(kind, group, 8), ranks) == pytest.approx(
            b200.collective_time(op(kind, group, 8), ranks), rel=1e-12)
    a2a = b300.collective_time(op(CollKind.ALL_TO_ALL, Group.EP, 8), ranks)
    assert 7 / 8 * S / a2a < 0.5968 * 900 * 2**30  # under SimuMax's measured all-to-all peak


def test_a_per_kind_curve_must_name_a_known_link_and_kind(tmp_path):
    bad = tmp_path / "eff.yaml"
    bad.write_text("default:\n  nvlink.alltoal: {peak_fraction: 0.8}\n")
    with pytest.raises(ConfigError, match="unknown link; valid: nvlink, nvls, nic, or LINK.KIND"):
        load_efficiency("h100", bad)
