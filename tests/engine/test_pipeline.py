"""The pipeline bubble emerges from the event simulation and matches the closed forms."""
import pytest
from _build import SYSTEM, LinearBackend, workload

from engine import simulate


def _sum(bd):
    return bd.compute_s + bd.bubble_s + bd.optimizer_s + bd.other_s + sum(bd.exposed_comm_s.values())


@pytest.mark.parametrize("pp,m", [(1, 1), (1, 4), (2, 2), (4, 8), (4, 3), (8, 16)])
@pytest.mark.parametrize("level", ["pass", "op"])
def test_1f1b_time_is_m_plus_p_minus_1_times_f_plus_b(pp, m, level):
    f, b = 1.0, 2.0
    r = simulate(workload(pp=pp, m=m, f=f, b=b), SYSTEM, LinearBackend(), level=level)
    assert r.iteration_time_s == pytest.approx((m + pp - 1) * (f + b))
    # stage 0 is critical; its idle time is all bubble, (p-1)(f+b)
    assert r.breakdown.bubble_s == pytest.approx((pp - 1) * (f + b))
    assert r.breakdown.compute_s == pytest.approx(m * (f + b))
    assert r.breakdown.bubble_s / r.iteration_time_s == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (2, 2, 4), (4, 4, 16), (4, 2, 12), (2, 3, 6)])
def test_interleaved_bubble_shrinks_by_vpp(pp, vpp, m):
    f, b = 1.0, 2.0  # per stage; each chunk takes f/vpp and b/vpp
    r = simulate(workload(pp=pp, vpp=vpp, m=m, f=f, b=b), SYSTEM, LinearBackend())
    assert r.iteration_time_s == pytest.approx(m * (f + b) + (pp - 1) * (f + b) / vpp)
    assert r.breakdown.bubble_s == pytest.approx((pp - 1) * (f + b) / vpp)


def test_pipeline_transfer_is_a_real_communication_event():
    # pp=2, m=1: F0 (f), send (c), F1 + B1 (f + b), send back (c), B0 (b).
    f, b, c = 1.0, 2.0, 0.25
    bw = 4e9
    w = workload(pp=2, m=1, f=f, b=b, pp_bytes=int(c * bw))
    r = simulate(w, SYSTEM, LinearBackend(bw=bw))
    assert r.iteration_time_s == pytest.approx(2 * f + 2 * b + 2 * c)
    s0, s1 = r.stage_breakdowns
    # 1F1B sends block (Megatron): stage 0 waits c for its send of F0 and c for the
    # gradients; the rest of its wait, stage 1's F and B, is bubble
    assert s0.exposed_comm_s["pp"] == pytest.approx(2 * c)
    assert s0.bubble_s == pytest.approx(f + b)
    # stage 1 waits for F0 (f bubble + c on the wire), then c for its gradient send; the
    # tail while stage 0 runs B0 is bubble
    assert s1.exposed_comm_s["pp"] == pytest.approx(2 * c)
    assert s1.bubble_s == pytest.approx(f + b)
    for bd in r.stage_breakdowns:
        assert _sum(bd) == pytest.approx(r.iteration_time_s)
    pp_intervals = [iv for iv in r.intervals if iv.stream == "pp"]
    assert len(pp_intervals) == 2
    assert all(iv.end - iv.start == pytest.approx(c) for iv in pp_intervals)


def test_stages_finish_in_cooldown_order():
    r = simulate(workload(pp=4, m=8, f=1.0, b=2.0), SYSTEM, LinearBackend())
    ends = r.extras["stage_end_s"]
    # the last stage ends its last backward (p-1)*b before stage 0
    assert [ends[0] - e for e in ends] == pytest.approx([0.0, 2.0, 4.0, 6.0])


def test_pipeline_transfer_waits_for_the_receive_to_be_posted():
    """pp=2, m=2 (f=1, b=2, transfer c), blocking 1F1B sends. F0 crosses at [1, 1+c]
    (stage 1 posted at 0); stage 0's F1 is ready at 2+c but stage 1 posts that receive
    only with its send of B0's gradients, at 4+c, so both cross during [4+c, 4+2c]; B1's
    gradients leave at 7+2c and stage 0 ends B1 at 9+3c."""
    f, b, c, bw = 1.0, 2.0, 0.125, 8e9
    r = simulate(workload(pp=2, m=2, f=f, b=b, pp_bytes=int(c * bw)), SYSTEM, LinearBackend(bw=bw))
    assert r.iteration_time_s == pytest.approx(9 + 3 * c)
    s0, s1 = r.stage_breakdowns
    # stage 1: c waiting for F0, then c for each of its two gradient sends
    assert s1.exposed_comm_s["pp"] == pytest.approx(3 * c)
    # stage 0: c for its send of F0, c on the wire for F1's send, c for B1's gradients
    assert s0.exposed_comm_s["pp"] == pytest.approx(3 * c)
    starts = sorted(iv.start for iv in r.intervals if iv.stream == "pp")
    assert starts == pytest.approx([1.0, 4 + c, 4 + c, 7 + 2 * c])


@pytest.mark.parametrize("pp,vpp,m", [(2, 1, 7), (4, 1, 3), (8, 1, 24), (4, 2, 8), (4, 4, 8), (8, 2, 16), (2, 4, 6)])
def test_no_deadlock_and_sums_with_transfers(pp, vpp, m):
    r = simulate(workload(pp=pp, vpp=vpp, m=m, pp_bytes=10**8, tp=2, tp_bytes=10**7), SYSTEM, LinearBackend(bw=1e10))
    for bd in r.stage_breakdowns:
        assert _sum(bd) == pytest.approx(r.iteration_time_s)
    assert r.iteration_time_s > m * 3.0 + (pp - 1) * 3.0 / vpp


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (2, 2, 4), (4, 4, 16), (2, 3, 6), (8, 2, 16)])
def test_interleaved_prefetch_hides_steady_state_transfers(pp, vpp, m):
    """Megatron's interleaved schedule with overlap_p2p_comm posts the next same-direction
    receive as soon as a pass ends, so a transfer shorter than a chunk's pass (c < f/vpp)
    runs under the pass in between. Only the fill's forward chain and the drain's backward
    chain through all pp*vpp virtual stages pay it: T = m(f+b) + (pp-1)(f+b)/vpp
    + 2(pp*vpp - 1)c. Without the overlap every receive waits for its rank to ask, and the
    same run is slower."""
    f, b, c, bw = 1.0, 2.0, 0.05, 1e10
    w = workload(pp=pp, vpp=vpp, m=m, f=f, b=b, pp_bytes=int(c * bw), overlap_p2p_comm=True)
    r = simulate(w, SYSTEM, LinearBackend(bw=bw))
    assert r.iteration_time_s == pytest.approx(m * (f + b) + (pp - 1) * (f + b) / vpp + 2 * (pp * vpp - 1) * c)
    late = simulate(workload(pp=pp, vpp=vpp, m=m, f=f, b=b, pp_bytes=int(c * bw), overlap_p2p_comm=False),
                    SYSTEM, LinearBackend(bw=bw))
    assert late.iteration_time_s > r.iteration_time_s + c
    for bd in r.stage_breakdowns:
        assert _sum(bd) == pytest.approx(r.iteration_time_s)
