"""Topologies as data (no ns-3): link counts, rates, ECMP tables, the SimAI file reader."""
from __future__ import annotations

import math
from dataclasses import replace

import networkx as nx
import pytest

from network.ns3.topology import build_fabric, read_simai_topology
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.system import load_system

H100 = load_system("h100")


def test_rail_fabric_counts_and_oversubscribed_uplinks():
    fab = build_fabric(H100, 32, "rail", oversubscription=2)
    nodes, nics = 4, 8
    nic_bps = H100.nic_bw * H100.nic_efficiency * 8
    assert fab.num_hosts == nodes * nics
    nic_links = [ln for ln in fab.links if ln.kind == "nic"]
    up = [ln for ln in fab.links if ln.kind == "fabric"]
    # 8 leaves x 4 spines: spines default to one per rail but never exceed a leaf's 4 downlinks
    assert len(nic_links) == 32 and len(up) == 8 * 4
    # each leaf's uplinks together carry its downlink capacity / 2
    assert sum(ln.rate_bps for ln in up if ln.a == fab.num_hosts) == pytest.approx(nodes * nic_bps / 2)
    # rail: NIC i of every node on leaf i
    assert {ln.b for ln in nic_links if ln.a % nics == 3} == {fab.num_hosts + 3}


def test_ecmp_table_lists_every_spine_for_cross_leaf_destinations():
    fab = build_fabric(H100, 64, "rail")  # 8 nodes: 8 leaves, 8 spines
    table = fab.next_hops()
    leaf0 = fab.num_hosts
    assert len(table[leaf0][9]) == 8  # host 9 hangs off leaf 1: any of the 8 spines
    assert len(table[leaf0][8]) == 1  # host 8 is on leaf 0 itself
    spine0 = fab.num_hosts + 8
    assert len(table[spine0][9]) == 1  # down to leaf 1 only
    assert table[0] == [[] for _ in range(64)]  # single-NIC hosts need no table


def test_fat_tree_racks_and_nvswitch_option():
    sysc = replace(H100, gpus_per_node=2, nics_per_node=2)
    fab = build_fabric(sysc, 8, "fat-tree", nodes_per_rack=1, spines=2, nvswitch=True)
    names = fab.switch_names
    assert sum(n.startswith("tor") for n in names) == 4 and sum(n.startswith("spine") for n in names) == 2
    assert sum(n.startswith("nvsw") for n in names) == 4
    assert sum(ln.kind == "nvlink" for ln in fab.links) == 8


def test_simai_topology_file(simai_topology_file):
    p = simai_topology_file
    fab = read_simai_topology(p)
    assert fab.num_hosts == 4 and fab.gpus_per_node == 2
    assert len(fab.links) == 6  # NVSwitch links go to the fluid model
    assert fab.links[0].rate_bps == 400e9 and fab.links[0].delay_s == pytest.approx(0.5e-6)
    assert len(read_simai_topology(p, nvswitch=True).links) == 10
    delay, hops, rate = fab.path_delays_from(0)[1]
    assert hops == 4 and delay == pytest.approx(2e-6) and rate == 400e9


def test_paths_from_one_host_to_every_host():
    """4 nodes, one ToR each, 4:1 to the spines: a NIC reaches its node's 7 other NICs over
    its ToR (2 links), every other NIC over ToR, spine, ToR (4 links), at the uplink's rate of
    368 Gb/s x 8 NICs / 4 / 8 spines = 92 Gb/s; 1 us a link. Every pair's hops are networkx's
    shortest path over the same links (a host has one link, so none is a transit node)."""
    fab = build_fabric(H100, 32, "fat-tree", oversubscription=4.0, nodes_per_rack=1)
    nic = fab.links[0].rate_bps
    up = nic * 8 / 4 / sum(n.startswith("spine") for n in fab.switch_names)
    paths = fab.path_delays_from(9)
    graph = nx.Graph([(ln.a, ln.b) for ln in fab.links])
    assert paths[9] == (0.0, 0, math.inf)
    for dst, (delay, hops, rate) in enumerate(paths):
        if dst == 9:
            continue
        same_node = dst // 8 == 1
        assert hops == (2 if same_node else 4)
        assert delay == pytest.approx(hops * 1e-6)
        assert rate == (nic if same_node else pytest.approx(up))
        assert hops == nx.shortest_path_length(graph, 9, dst)
    for src, dst in ((0, 31), (17, 3), (24, 25), (5, 5)):
        assert fab.path_delays_from(src)[dst][1] == nx.shortest_path_length(graph, src, dst)


def test_simai_topology_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text("5 2 0 1 2 H100\n4\n0 4 400Gbps 0.0005ms 0\n1 4 fast 0.0005ms 0\n")
    with pytest.raises(FormatError, match=r"bad.txt:4: rate 'fast'"):
        read_simai_topology(p)
    with pytest.raises(ConfigError, match="oversubscription"):
        build_fabric(H100, 16, "rail", oversubscription=0.5)


@pytest.mark.parametrize("line,field,value", [
    ("0 4 400Gbps -0.0005ms 0", "delay", "-0.0005ms"),   # ns-3 would assert (exit 133)
    ("0 4 0Gbps 0.0005ms 0", "rate", "0Gbps"),           # ZeroDivisionError 30 s later
    ("0 4 nanGbps 0.0005ms 0", "rate", "nanGbps"),
    ("0 4 infGbps 0.0005ms 0", "rate", "infGbps"),
    ("0 4 1e999Gbps 0.0005ms 0", "rate", "1e999Gbps"),
    ("0 4 400Gbps nanms 0", "delay", "nanms"),
    ("0 4 400Gbps 0.0005ms -0.001", "error_rate", "-0.001"),
    ("0 4 400Gbps 0.0005ms nan", "error_rate", "nan"),
    ("0 4 400Gbps 0.0005ms 1.5", "error_rate", "1.5"),
])
def test_simai_topology_bad_link_values_name_file_line_field_and_value(tmp_path, line, field, value):
    p = tmp_path / "topo.txt"
    p.write_text(f"5 2 0 1 2 H100\n4\n{line}\n1 4 400Gbps 0.0005ms 0\n")
    with pytest.raises(FormatError) as exc:
        read_simai_topology(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:3: field {field} = {value!r}") and "\n" not in msg


def test_simai_topology_error_rates_are_kept(tmp_path):
    """A non-zero error rate is a link property now (the RDMA model retransmits)."""
    p = tmp_path / "topo.txt"
    p.write_text("3 2 0 1 2 H100\n2\n0 2 400Gbps 0.0005ms 0.0001\n1 2 400Gbps 0.0005ms 0\n")
    fab = read_simai_topology(p)
    assert [ln.error_rate for ln in fab.links] == [1e-4, 0.0]


def test_simai_topology_gpu_without_a_nic_link_is_refused(tmp_path):
    p = tmp_path / "topo.txt"
    p.write_text("6 2 1 1 3 H100\n4 5\n0 4 2880Gbps 0.000025ms 0\n1 4 2880Gbps 0.000025ms 0\n"
                 "0 5 400Gbps 0.0005ms 0\n")  # GPU 1 reaches only the NVSwitch
    with pytest.raises(FormatError, match=r"topo.txt: GPU 1 has no link to a switch"):
        read_simai_topology(p)
    with pytest.raises(FormatError, match=r"GPU 1 has no link to a switch"):
        read_simai_topology(p, nvswitch=True)
