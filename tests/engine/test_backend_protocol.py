"""The engine drives any NetworkBackend through the pull protocol, and packet-style
backends through the optional advance_until."""
import math

import pytest

from _build import SYSTEM, LinearBackend, workload
from engine import simulate
from engine.backend import Completion

CASE = dict(pp=2, vpp=2, m=4, tp=2, dp=2, layers_per_chunk=2, tp_bytes=10**8, pp_bytes=10**8,
            dp_bytes=(10**9,), overlap_grad=True, opt_time=0.05, emb_bytes=10**8)


class SteppingBackend(LinearBackend):
    """Like a packet simulator: runs forward only as far as it is allowed to, and does
    not say when its next completion is."""

    def __init__(self, **kw):
        super().__init__(contention_free=False, **kw)
        self.clock = 0.0
        self.max_seen = 0.0

    def next_completion_time(self):  # pragma: no cover - the engine must not need it
        raise AssertionError("engine asked a stepping backend for its next completion")

    def submit(self, transfer, now):
        assert now >= self.clock, "submitted in the network's past"
        super().submit(transfer, now)

    def advance_until(self, t):
        first = self._heap[0][0] if self._heap else math.inf
        if first > t:
            self.clock = max(self.clock, t) if t != math.inf else self.clock
            return []
        self.clock = first
        out = []
        while self._heap and self._heap[0][0] == first:
            ft, i = __import__("heapq").heappop(self._heap)
            out.append(Completion(i, ft))
        return out


def test_advance_until_gives_the_same_iteration():
    w = workload(**CASE)
    ref = simulate(w, SYSTEM, LinearBackend(bw=1e10), all_ranks=True)
    step = simulate(w, SYSTEM, SteppingBackend(bw=1e10), all_ranks=True)
    assert step.iteration_time_s == pytest.approx(ref.iteration_time_s, rel=1e-12)
    assert step.stage_breakdowns == ref.stage_breakdowns


def test_each_collective_instance_is_submitted_once_with_its_groups_ranks():
    w = workload(**CASE)
    be = LinearBackend(bw=1e10, contention_free=False)
    simulate(w, SYSTEM, be)
    ids = [t.id for t, _ in be.submitted]
    assert len(ids) == len(set(ids)) == sorted(ids)[-1] + 1
    par = w.parallel
    tp = [t for t, _ in be.submitted if t.op.group.value == "tp"]
    # every TP instance: one per TP group (world / tp groups) per op instance
    n_tp_ops = sum(1 for st in w.stages for ch in st.chunks for op in ch.forward + ch.backward
                   if getattr(op, "group", None) is not None and op.group.value == "tp")
    assert len(tp) == n_tp_ops * par.num_microbatches * (par.world_size // par.tp // par.pp)
    assert all(len(t.ranks) == par.tp for t in tp)
    pp = [t for t, _ in be.submitted if t.op.group.value == "pp"]
    assert all(len(t.ranks) == 2 for t in pp)


class PastBackend(LinearBackend):
    def advance_to(self, t):
        return [Completion(c.id, c.time - 1.0) for c in super().advance_to(t)]


def test_a_completion_in_the_past_is_caught():
    with pytest.raises(AssertionError, match="backwards"):
        simulate(workload(m=2, tp=2, tp_bytes=10**8), SYSTEM, PastBackend(bw=1e10, contention_free=False))
