"""overlap_grad_reduce and overlap_param_gather act independently, as in Megatron-Core's DDP.

Megatron-LM's CLI refuses --overlap-param-gather without --overlap-grad-reduce, but Megatron-Core
runs it (Megatron-Bridge's H100 DeepSeek-V3 recipe does), so the simulator accepts every
combination. By hand, with two gradient buckets and two parameter buckets of 1 GB each on a
10 GB/s DP link (0.1 s per transfer), 12 s of compute and a 0.1 s optimizer step:

- gradient reduce-scatters: overlapped, only the last bucket's (issued after the last
  backward) is exposed; not overlapped, both run after the backward;
- parameter all-gathers: overlapped, only the first bucket's (the first forward needs it) is
  exposed; not overlapped, both run before the first forward.

So the iteration is 12 + 0.1 + 0.1 x (exposed transfers), each switch saving one transfer."""
from __future__ import annotations

import pytest
from _build import SYSTEM, LinearBackend, workload

from engine import simulate
from workload_gen.core.parallel_config import ParallelConfig

TRANSFER_S = 10**9 / 1e10


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("gather", [True, False])
def test_each_switch_hides_all_but_one_bucket(grad, gather):
    w = workload(pp=1, m=4, dp=2, layers_per_chunk=2, dp_bytes=(10**9, 10**9), gather_bytes=(10**9, 10**9),
                 opt_time=0.1, overlap_grad=grad, distributed_optimizer=True, overlap_param_gather=gather)
    result = simulate(w, SYSTEM, LinearBackend(bw=1e10))
    exposed = (1 if grad else 2) + (1 if gather else 2)
    assert result.breakdown.exposed_comm_s["dp"] == pytest.approx(exposed * TRANSFER_S, rel=1e-9)
    assert result.iteration_time_s == pytest.approx(12.0 + 0.1 + exposed * TRANSFER_S, rel=1e-9)


def test_param_gather_without_grad_overlap_is_accepted():
    par = ParallelConfig(world_size=8, global_batch=8, distributed_optimizer=True, overlap_param_gather=True,
                         overlap_grad_reduce=False)
    assert par.overlap_param_gather and not par.overlap_grad_reduce
