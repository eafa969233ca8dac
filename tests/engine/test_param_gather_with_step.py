"""--overlap-param-gather-with-optimizer-step: the first bucket's parameter all-gather runs
beside the optimizer step instead of in front of the first forward.

By hand: the first forward no longer waits for that gather (g seconds on an idle DP stream),
and the iteration's tail now ends at max(optimizer, g) instead of the optimizer's end, so one
iteration is shorter by min(g, optimizer); memoised and op-level runs agree."""
from __future__ import annotations

import pytest
from _build import SYSTEM, LinearBackend, workload

from engine import simulate
from workload_gen.core.errors import ConfigError
from workload_gen.core.parallel_config import ParallelConfig

G = 10**9 / 1e10  # the first bucket's gather: 1 GB at 10 GB/s


def _time(opt: float, flag: bool, level: str = "auto") -> float:
    w = workload(pp=2, vpp=2, m=4, dp=2, layers_per_chunk=2, dp_bytes=(10**8,), gather_bytes=(10**9, 10**8),
                 opt_time=opt, overlap_grad=True, distributed_optimizer=True, overlap_param_gather=True,
                 overlap_param_gather_with_optimizer_step=flag)
    return simulate(w, SYSTEM, LinearBackend(bw=1e10), level=level).iteration_time_s


@pytest.mark.parametrize("opt", [0.3, 0.05])
def test_first_gather_hides_behind_the_optimizer_step(opt):
    saved = _time(opt, False) - _time(opt, True)
    assert saved == pytest.approx(min(G, opt), rel=1e-9)
    assert _time(opt, True, "op") == pytest.approx(_time(opt, True), rel=1e-12)


@pytest.mark.parametrize("kw, words", [
    (dict(vpp=1), "interleaved"),
    (dict(overlap_param_gather=False), "overlap_param_gather"),
    (dict(distributed_optimizer=False, overlap_param_gather=False), "distributed optimizer"),
])
def test_megatrons_rules(kw, words):
    base = dict(world_size=8, pp=2, vpp=2, global_batch=8, distributed_optimizer=True, overlap_grad_reduce=True,
                overlap_param_gather=True, overlap_param_gather_with_optimizer_step=True)
    with pytest.raises(ConfigError, match=words):
        ParallelConfig(**{**base, **kw})
