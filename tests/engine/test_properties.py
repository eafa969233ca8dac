"""Random small workloads: memoised passes, op-level events and all ranks agree, and every
stage's parts sum to the iteration time."""
import pytest
from _build import SYSTEM, LinearBackend, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import simulate


@st.composite
def configs(draw):
    pp = draw(st.integers(1, 4))
    vpp = draw(st.integers(1, 3)) if pp > 1 else 1
    m = draw(st.integers(1, 6)) * (pp if vpp > 1 else 1)
    lpc = draw(st.integers(1, 3))
    dist = draw(st.booleans())
    overlap_grad = draw(st.booleans())
    nb = st.integers(0, 3 * 10**9)
    return dict(
        pp=pp, vpp=vpp, m=m, layers_per_chunk=lpc, tp=draw(st.sampled_from([1, 2])), dp=draw(st.sampled_from([1, 2])),
        f=draw(st.floats(0.1, 2.0)), b=draw(st.floats(0.1, 4.0)),
        tp_bytes=draw(nb), tp_overlap=draw(st.booleans()), pp_bytes=draw(nb),
        dp_bytes=tuple(draw(st.lists(nb, max_size=lpc))), overlap_grad=overlap_grad,
        opt_time=draw(st.floats(0.0, 0.5)), emb_bytes=draw(nb),
        gather_bytes=tuple(draw(st.lists(nb, max_size=lpc))) if dist else (),
        distributed_optimizer=dist, overlap_param_gather=dist and overlap_grad and draw(st.booleans()),
    )


def _parts(r):
    return [(b.compute_s, b.bubble_s, b.optimizer_s, b.other_s, tuple(b.exposed_comm_s.values()))
            for b in r.stage_breakdowns]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_pass_op_and_all_ranks_agree_and_parts_sum(cfg):
    w = workload(**cfg)
    fast = simulate(w, SYSTEM, LinearBackend(bw=1e10, latency=1e-5), timeline=False)
    slow = simulate(w, SYSTEM, LinearBackend(bw=1e10, latency=1e-5), timeline=False, level="op")
    every = simulate(w, SYSTEM, LinearBackend(bw=1e10, latency=1e-5, contention_free=False), timeline=False)
    for other in (slow, every):
        assert other.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=1e-9)
        for a, b in zip(_parts(fast), _parts(other)):
            assert a[:4] == pytest.approx(b[:4], rel=1e-9, abs=1e-9)
            assert a[4] == pytest.approx(b[4], rel=1e-9, abs=1e-9)
    for bd in fast.stage_breakdowns:
        total = bd.compute_s + bd.bubble_s + bd.optimizer_s + bd.other_s + sum(bd.exposed_comm_s.values())
        assert total == pytest.approx(fast.iteration_time_s, rel=1e-9)
    # nothing can beat the busiest stage's own work
    assert fast.iteration_time_s >= cfg["m"] * (cfg["f"] + cfg["b"]) - 1e-9
