"""The auto rules: algorithm, channel count, protocol; and refusals."""
from __future__ import annotations

import pytest

from collectives import ALGORITHMS, expand
from collectives.common import nested_split
from workload_gen.core.errors import ConfigError
from workload_gen.core.placement import Placement
from workload_gen.core.records import CollKind
from workload_gen.core.system import SYSTEMS

MiB = 1 << 20
P64 = Placement(64, 8)


@pytest.mark.parametrize("system,ranks,size,algo", [
    ("h100", range(8), 256 * MiB, "nvls"),          # one node, NVLS hardware
    ("a100", range(8), 256 * MiB, "ring"),          # one node, no NVLS
    ("h100", range(32), 256 * MiB, "nvls_tree"),    # several nodes, NVLS hardware
    ("a100", range(32), 8 * MiB, "tree"),           # 4 nodes, <= 4 MiB per node
    ("a100", range(32), 256 * MiB, "ring"),         # large across nodes
    ("h100", range(0, 64, 8), 256 * MiB, "ring"),   # one GPU per node: no NVLS, large
    ("h100", range(8), 64 * 1024, "ring"),          # tiny: latency-bound, no NVLS
])
def test_auto_allreduce(system, ranks, size, algo):
    assert expand("allreduce", size, ranks, P64, system=SYSTEMS[system]).algorithm == algo


@pytest.mark.parametrize("op,algo", [(CollKind.ALL_GATHER, "ring"), (CollKind.REDUCE_SCATTER, "ring"),
                                     (CollKind.ALL_TO_ALL, "alltoall"), (CollKind.BROADCAST, "ring"),
                                     ("reduce", "ring")])
def test_auto_other_ops(op, algo):
    assert expand(op, 64 * MiB, range(16), P64, system=SYSTEMS["h100"]).algorithm == algo


def test_channels_follow_the_nics_across_nodes_and_shrink_for_small_messages():
    h100 = SYSTEMS["h100"]
    assert expand("allreduce", 1 << 30, range(16), P64, algorithm="ring", system=h100).channels == 8
    # DP-like group using local ranks 0 and 4 of each node: two rails -> two channels
    assert expand("allreduce", 1 << 30, [0, 4, 8, 12], P64, algorithm="ring", system=h100).channels == 2
    # across nodes a channel needs 32 KiB of the whole buffer (NCCL's Simple-protocol rule):
    # 96 KiB -> 3 channels, and a 3 MiB message already uses all 8 NICs
    assert expand("allreduce", 3 * 32 * 1024, range(16), P64, algorithm="ring", system=h100).channels == 3
    assert expand("allreduce", 3 << 20, range(16), P64, algorithm="ring", system=h100).channels == 8


def test_protocol_auto_and_chunking():
    g = expand("allreduce", 1 << 30, range(8), P64, algorithm="ring", channels=1)
    assert g.protocol == "simple"
    piece = (1 << 30) // 8
    assert int(g.chunk.max()) + 1 == piece // (2 * MiB)  # Simple: 2 MiB chunks
    assert expand("allreduce", 8 * 1024, range(8), P64, algorithm="ring").protocol == "ll"
    ll = expand("allreduce", 1 << 20, range(2), P64, algorithm="ring", channels=1, protocol="ll")
    assert ll.bytes.max() <= 32 * 1024


def test_nested_split_is_exact():
    s = nested_split(1_000_003, (7, 3, 5))
    assert s.sum() == 1_000_003 and s.max() - s.min() <= 1


@pytest.mark.parametrize("kwargs,field", [
    (dict(op="allreduce", algorithm="nvls", ranks=range(16)), "algorithm"),
    (dict(op="allgather", algorithm="hd", ranks=range(6)), "algorithm"),
    (dict(op="allreduce", algorithm="ring", ranks=[0, 0, 1]), "ranks"),
    (dict(op="allreduce", algorithm="ring", ranks=[0, 99]), "ranks"),
    (dict(op="gather", algorithm="ring", ranks=range(4)), "op"),
    (dict(op="sendrecv", algorithm="auto", ranks=range(3)), "ranks"),
])
def test_refusals_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        expand(kwargs["op"], 1 << 20, kwargs["ranks"], P64, algorithm=kwargs["algorithm"])


def test_registry_lists_every_algorithm_once():
    assert ALGORITHMS.names() == sorted(["ring", "tree", "nvls", "nvls_tree", "hd", "alltoall", "pairwise", "p2p"])
    with pytest.raises(ValueError):
        ALGORITHMS.register_algorithm("ring", ("allreduce",), "again")(lambda ctx, b: "step")
