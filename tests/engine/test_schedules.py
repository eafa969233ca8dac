"""Pipeline schedules: Megatron's warm-up counts and well-formed step lists."""
import pytest

from engine.schedules import SCHEDULES, Step, interleaved, one_f_one_b
from workload_gen.core.errors import ConfigError


def _warmup(steps):
    n = 0
    for st in steps:
        if not st.forward:
            break
        n += 1
    return n


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 2), (1, 5), (8, 96)])
def test_1f1b_warmup_and_completeness(pp, m):
    for stage in range(pp):
        steps = one_f_one_b(pp, 1, m, stage)
        # pp - stage - 1 warm-up forwards, then the first steady forward before a backward
        assert _warmup(steps) == min(pp - stage - 1, m) + (1 if m > pp - stage - 1 else 0)
        assert sorted((s.microbatch, s.forward) for s in steps) == sorted(
            [(i, True) for i in range(m)] + [(i, False) for i in range(m)])
        seen = set()
        for st in steps:
            if st.forward:
                seen.add(st.microbatch)
            else:
                assert st.microbatch in seen  # backward only after its forward


def test_1f1b_exact_order_for_a_small_case():
    f, b = (lambda i: Step(0, True, i)), (lambda i: Step(0, False, i))
    assert one_f_one_b(3, 1, 4, 0) == (f(0), f(1), f(2), b(0), f(3), b(1), b(2), b(3))
    assert one_f_one_b(3, 1, 4, 2) == (f(0), b(0), f(1), b(1), f(2), b(2), f(3), b(3))


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (2, 3, 4), (4, 2, 12)])
def test_interleaved_warmup_is_megatrons(pp, vpp, m):
    for stage in range(pp):
        steps = interleaved(pp, vpp, m, stage)
        expected = min((pp - stage - 1) * 2 + (vpp - 1) * pp, m * vpp)
        # the warm-up forwards, then the first steady-state forward, then a backward
        leading = expected + 1 if expected < m * vpp else m * vpp
        assert _warmup(steps) == leading
        pairs = sorted((s.chunk, s.forward, s.microbatch) for s in steps)
        assert pairs == sorted((c, d, i) for c in range(vpp) for d in (True, False) for i in range(m))


def test_interleaved_visits_chunks_in_groups_of_pp():
    steps = interleaved(2, 2, 4, 0)
    fwd = [(s.chunk, s.microbatch) for s in steps if s.forward]
    assert fwd == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    bwd = [(s.chunk, s.microbatch) for s in steps if not s.forward]
    assert bwd == [(1, 0), (1, 1), (0, 0), (0, 1), (1, 2), (1, 3), (0, 2), (0, 3)]


def test_interleaved_all_warmup_when_m_equals_pp():
    steps = interleaved(4, 2, 4, 3)
    assert _warmup(steps) == 8  # Megatron: every forward first when m == pp


def test_registry_rejects_unknown_and_duplicate_names():
    with pytest.raises(ConfigError, match="1f1b"):
        SCHEDULES.get("gpipe")
    with pytest.raises(ValueError, match="twice"):
        SCHEDULES.register("1f1b")(one_f_one_b)
    with pytest.raises(ConfigError, match="vpp"):
        one_f_one_b(4, 2, 8, 0)
