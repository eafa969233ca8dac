"""DeepSeek-V3 as its report describes it (2048 H800, PP 16, EP 64, FP8, MTP) against the step
time its published GPU-hours imply (scripts/check_deepseek_v3.py states every setting and
where it departs from the report). The reference is computed here from the report's own
figures, not from the code: 2,664K GPU-hours for 14.8T tokens (arXiv 2412.19437, Table 1),
batches of 15,360 x 4096 tokens on 2048 GPUs."""
from __future__ import annotations

import pytest

from bench_scripts import script


@pytest.fixture(scope="module")
def check():
    return script("check_deepseek_v3")


def test_the_reference_step_from_the_reports_gpu_hours(check):
    assert check.implied_step_s() == pytest.approx(2.664e6 * 3600 / 14.8e12 * 15360 * 4096 / 2048)
    assert check.implied_step_s() == pytest.approx(19.9, abs=0.05)


def test_the_overlap_hides_the_all_to_all_and_the_step_lands_within_15_percent(check):
    """Issue 27's check: within 15% of the implied step, the exposed all-to-all reported; and
    the overlap DeepSeek and Megatron use must hide most of the all-to-all it exposes without."""
    ref = check.implied_step_s()
    scale = check.SEQUENCES / check.SIMULATED_SEQUENCES
    over = check.simulate(check.FLAGS + check.OVERLAP)
    plain = check.simulate(check.FLAGS)
    assert abs(over.iteration_time_s * scale / ref - 1) <= 0.15
    ep_over = over.breakdown.exposed_comm_s["ep"]
    ep_plain = plain.breakdown.exposed_comm_s["ep"]
    assert ep_over < 0.5 * ep_plain
    assert over.iteration_time_s < plain.iteration_time_s
