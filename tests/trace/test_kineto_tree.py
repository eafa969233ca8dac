"""The Kineto reader's call trees: the label context worked out once per node while nesting is
the one a walk carrying it down from the roots finds (as the reader did before), the flat
pass over a thread's nodes (``visit_all``) meets them in the walk's order, and the time
shift of an op keeps its other fields."""
from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from formats.kineto_events import (
    _BWD_NODE,
    _OPT_RE,
    STEP_RE,
    Ctx,
    Node,
    _label_layer,
    build_forest,
    visit_all,
    walk_forests,
)
from formats.kineto_records import TraceOp

_EVENTS = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15), st.sampled_from(
    ["aten::mm", "ProfilerStep#2", "layers.1", "autograd::engine::evaluate_function: MmBackward0",
     "Optimizer.step#Adam.step", "embedding"]), st.sampled_from(["cpu_op", "user_annotation"])), max_size=40)


def _forest(events: list[tuple[int, int, str, str]]):
    nodes = [Node({"name": n, "cat": c, "ts": t, "dur": d, "args": {"Sequence number": i}},
                  n, c, float(t), float(t + d)) for i, (t, d, n, c) in enumerate(events)]
    return [build_forest(nodes)]


def _carried(roots: list[Node]) -> list[tuple[Node, Ctx]]:
    """Each node with its context, carried down a depth-first walk from the roots."""
    out = []
    todo = [(n, Ctx()) for n in reversed(roots)]
    while todo:
        node, c = todo.pop()
        name, cat = node.name, node.cat
        m = STEP_RE.match(name)
        if m:
            c = c._replace(step=int(m.group(1)))
        elif _OPT_RE.search(name) and "zero_grad" not in name and cat in ("user_annotation", "cpu_op"):
            c = c._replace(optimizer=True, phase="iter", layer=None)
        elif name.startswith(_BWD_NODE):
            seq = node.ev["args"].get("Sequence number")
            c = c._replace(phase="bwd", seq=seq if isinstance(seq, int) else None)
        elif cat == "user_annotation" and not c.optimizer and c.phase == "fwd":
            lay = _label_layer(name)
            if lay is not None:
                c = c._replace(layer=lay)
        out.append((node, c))
        todo.extend((ch, c) for ch in reversed(node.children))
    return out


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS)
def test_flat_pass_meets_nodes_in_walk_order(events):
    forests = _forest(events)
    walked: list[tuple[Node, object]] = []
    walk_forests(forests, lambda n, c: walked.append((n, c)) and False)
    flat: list[tuple[Node, object]] = []
    visit_all(forests, lambda n, c: flat.append((n, c)))
    assert [id(n) for n, _ in flat] == [id(n) for n, _ in walked]
    assert [c for _, c in flat] == [c for _, c in walked] == [c for _, c in _carried(forests[0].roots)]
    assert len(flat) == len(events)


def test_moved_keeps_every_other_field():
    values = {f.name: (f"v{i}" if f.type == "str" else i + 0.5) for i, f in enumerate(fields(TraceOp))}
    op = TraceOp(**values)
    moved = op.moved(0.25)
    for f in fields(TraceOp):
        want = values[f.name] - 0.25 if f.name in ("start", "end") else values[f.name]
        assert getattr(moved, f.name) == want, f.name


def test_a_read_leaves_no_call_tree_for_the_cyclic_collector():
    """Once read_kineto returns, the call trees and the parsed JSON they point at are gone by
    reference counting alone (no parent/child cycles left, kineto_events.release_forests): with
    the collector off, no Node and no event dict outlives the read."""
    import gc
    from pathlib import Path

    from formats.kineto import read_kineto

    trace = Path(__file__).resolve().parents[1] / "data" / "cpu_gpt2l_h256_trace.json.gz"
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        before = sum(1 for o in gc.get_objects() if type(o) is Node)
        kt = read_kineto(trace)
        assert kt.ranks and kt.ranks[0].ops
        assert sum(1 for o in gc.get_objects() if type(o) is Node) == before == 0
    finally:
        if was:
            gc.enable()
