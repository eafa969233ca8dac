"""Issue 16, expand-collective: sizes, rank lists and flow counts are bounded up front."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rel_helpers import run_main

from engine.commands.expand_collective import estimate_flows, main, parse_ranks, parse_size
from collectives.expander import expand
from collectives.registry import ALGORITHMS
from workload_gen.core.errors import ConfigError
from workload_gen.core.placement import Placement
from workload_gen.core.system import load_system


@pytest.mark.parametrize("args, message", [
    (["--size", "1e26TiB", "--ranks", "8"], "size='1e26TiB' is invalid"),
    (["--size", "99999999999999999999999999TiB", "--ranks", "8"], "exceeds the limit of 1,125,899,906,842,624 bytes"),
    (["--size", "9" * 400, "--ranks", "8"], "size="),
    (["--size", "1GiB", "--ranks", "7-0"], "range '7-0' runs backwards"),
    (["--size", "1GiB", "--ranks", "65536"], "flows, over the limit of 10,000,000 (workload_gen/core/limits.py MAX_FLOWS)"),
    (["--size", "1GiB", "--ranks", "65537"], "ranks=65537 is invalid; exceeds the limit of 65,536 ranks"),
    (["--size", "1GiB", "--ranks", "10000000"], "exceeds the limit of 65,536 ranks"),
    (["--size", "1GiB", "--ranks", "0-99999999"], "exceeds the limit of 65,536"),
    (["--size", "64GiB", "--ranks", "256"], "over the limit of 10,000,000"),
    (["--size", "1MiB", "--ranks", "8", "--gpus-per-node", "100000000"], "gpus-per-node=100000000 is invalid"),
    (["--size", "1MiB", "--ranks", ","], "ranks=',' is invalid"),
])
def test_bad_arguments_are_refused_up_front_in_one_line(args, message, monkeypatch):
    """Refused before any work: the collective is never expanded nor timed (the bound is
    checked on the arguments and on the flow estimate, not on a graph once built)."""
    def never(*_a, **_k):
        raise AssertionError("expanded or timed before the refusal")

    monkeypatch.setattr("engine.commands.expand_collective.expand", never)
    monkeypatch.setattr("engine.commands.expand_collective.evaluate", never)
    rc, _, err = run_main(main, ["--op", "allreduce", *args])
    assert rc == 2 and message in err and err.count("\n") == 1, err


def test_parsers_accept_what_they_did():
    assert parse_size("1GiB") == 2**30 and parse_size("1.5KiB") == 1536 and parse_size("512MB") == 512 * 10**6
    assert parse_ranks("4") == [0, 1, 2, 3] and parse_ranks("0,8,2-3") == [0, 8, 2, 3]
    with pytest.raises(ConfigError):
        parse_ranks("-1")


_SYSTEM = load_system("h100")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce"]),
       st.integers(2, 40), st.sampled_from([0, 1, 1000, 65536, 10**6, 3 * 10**7]),
       st.sampled_from(["auto", *ALGORITHMS.names()]), st.sampled_from(["auto", 1, 3, 32]),
       st.sampled_from(["auto", "ll", "ll128", "simple"]), st.booleans())
def test_flow_estimate_is_an_upper_bound(op, n, nbytes, algo, channels, protocol, pxn):
    placement = Placement(-(-n // 8) * 8, 8)
    try:
        graph = expand(op, nbytes, list(range(n)), placement, algorithm=algo, channels=channels, protocol=protocol,
                       system=_SYSTEM, pxn=pxn)
    except ConfigError:
        return  # e.g. an algorithm that does not implement the op
    bound = estimate_flows(op, nbytes, list(range(n)), placement, _SYSTEM, algorithm=algo, channels=channels,
                           protocol=protocol, pxn=pxn)
    assert graph.num_flows <= bound
