"""The pipelined template's CSR emission builds the graph the padded-matrix one built.

:func:`collectives.algorithms.pipeline.emit` hands the builder each block's parents as CSR
(``FlowBuilder.add_csr``) instead of a (flows, widest + 1) matrix padded with -1, for
speed. Every graph, flow by flow and parent by parent, must be the same: the padded form
is kept here (the code it replaced, verbatim) and both are run on every pipelined
algorithm over several sizes, groups and channel counts.
"""
from __future__ import annotations

import numpy as np
import pytest

import collectives.algorithms.alltoall as alltoall
import collectives.algorithms.nvls as nvls
import collectives.algorithms.ring as ring
import collectives.algorithms.tree as tree
from collectives import expand
from collectives.algorithms.pipeline import Template
from collectives.flowgraph import FlowBuilder
from workload_gen.core.placement import Placement
from workload_gen.core.system import get_system
from workload_gen.core.units import KiB, MiB

H100 = get_system("h100")
USERS = (alltoall, nvls, ring, tree)
"""The modules that import ``emit`` by name (patched together)."""


def padded_emit(builder: FlowBuilder, t: Template, pieces: np.ndarray) -> None:
    """The former emit: parents as a padded matrix, -1 for none."""
    E = len(t)
    if E == 0:
        return
    K = pieces.shape[1]
    base = builder.next_id
    width = max((len(p) for p in t.parents), default=0)
    tpar = np.full((E, width), -1, dtype=np.int64)
    for e, ps in enumerate(t.parents):
        tpar[e, :len(ps)] = ps
    chan = np.asarray(t.channel, dtype=np.int64)
    k = np.repeat(np.arange(K, dtype=np.int64), E)
    e = np.tile(np.arange(E, dtype=np.int64), K)
    same = np.where(tpar[e] >= 0, base + k[:, None] * E + tpar[e], -1)
    link = np.where(k > 0, base + (k - 1) * E + e, -1)[:, None]
    builder.add(np.asarray(t.src, dtype=np.int64)[e], np.asarray(t.dst, dtype=np.int64)[e],
                pieces[chan[e], k], chan[e], np.asarray(t.step, dtype=np.int64)[e], k,
                np.concatenate([same, link], axis=1))


FIELDS = ("src", "dst", "bytes", "channel", "step", "chunk", "hop", "parent_ptr", "parent_idx", "is_intra_node")

CASES = [
    ("allreduce", 128 * MiB, 64, 8, "nvls_tree", "auto"),
    ("allreduce", 3 * MiB + 5, 32, 8, "nvls_tree", 4),
    ("allreduce", 1 * MiB, 8, 8, "nvls", "auto"),
    ("allreduce", 64 * MiB, 32, 8, "tree", "auto"),
    ("allreduce", 777 * KiB, 24, 4, "tree", 3),
    ("allreduce", 64 * MiB, 16, 8, "ring", "auto"),
    ("allgather", 5 * MiB + 3, 12, 4, "ring", 2),
    ("reducescatter", 32 * MiB, 16, 8, "ring", "auto"),
    ("broadcast", 9 * MiB, 16, 8, "ring", 2),
    ("reduce", 2 * MiB, 6, 2, "ring", 1),
    ("alltoall", 8 * MiB, 16, 8, "alltoall", "auto"),
    ("alltoall", 1000, 8, 4, "alltoall", 2),
    ("allreduce", 0, 16, 8, "tree", 2),
]


def _both(monkeypatch, op, nbytes, n, gpn, algorithm, channels):
    def run():
        return expand(op, nbytes, range(n), Placement(n, gpn), algorithm=algorithm, channels=channels,
                      system=H100 if gpn == 8 else None)  # H100 has 8 GPUs per NVLink domain
    new = run()
    with monkeypatch.context() as m:
        for mod in USERS:
            m.setattr(mod, "emit", padded_emit)
        old = run()
    return new, old


@pytest.mark.parametrize("op, nbytes, n, gpn, algorithm, channels", CASES)
def test_csr_emit_builds_the_same_graph(monkeypatch, op, nbytes, n, gpn, algorithm, channels):
    new, old = _both(monkeypatch, op, nbytes, n, gpn, algorithm, channels)
    assert new.algorithm == old.algorithm == algorithm
    assert new.src.size == old.src.size
    for name in FIELDS:
        a, b = getattr(new, name), getattr(old, name)
        assert a.dtype == b.dtype, name
        assert np.array_equal(a, b), name


def test_csr_rows_list_template_parents_then_the_previous_chunk():
    # by hand: edges 0 -> 1 (no parents) and 1 -> 2 (after edge 0), 3 chunks
    from collectives.algorithms.pipeline import emit
    t = Template()
    a = t.edge(0, 1, 0, 0)
    t.edge(1, 2, 0, 1, [a])
    b = FlowBuilder()
    b.add(np.array([5]), 6, 1, 0, 0, 0, np.full((1, 1), -1))  # one flow before: ids start at 1
    emit(b, t, np.ones((1, 3), dtype=np.int64))
    g = b.build(lambda x: np.asarray(x) // 100)
    parents = [g.parent_idx[g.parent_ptr[i]:g.parent_ptr[i + 1]].tolist() for i in range(g.src.size)]
    assert parents == [[], [], [1], [1], [3, 2], [3], [5, 4]]


def test_template_refuses_a_later_parent():
    t = Template()
    t.edge(0, 1, 0, 0)
    with pytest.raises(ValueError):
        t.edge(1, 2, 0, 0, [1])
    with pytest.raises(ValueError):
        t.edge(1, 2, 0, 0, [-1])
