"""A GPU that shares its sibling's fit (``sustains_like``) runs at the sibling's fitted tensor
rate carried by the power law to its own board power, and run-analytical says so: the rate is
an extrapolation, and a comparison across parts should be read with it."""
from __future__ import annotations

import pytest

from compute_profile.estimator import throughput_carry
from engine.commands.run import analytical_main


@pytest.mark.parametrize("gpu, sibling, watts", [("gb200", "b200", (1000, 1200)), ("gb300", "b200", (1000, 1400)),
                                                 ("b300", "b200", (1000, 1100))])
def test_the_carried_rate_is_the_board_power_ratio(gpu, sibling, watts):
    """Boards from the datasheets (B200 HGX 1,000 W; GB200 NVL72 1,200 W; GB300 NVL72 1,400 W;
    B300 1,100 W): at power_exponent 1 the absolute tensor rate scales as their ratio, while
    none of them reaches the cap at its own peak."""
    carry = throughput_carry(gpu)
    assert carry is not None and carry.sibling == sibling
    assert (carry.sibling_power_w, carry.power_w) == watts
    assert carry.rate_ratio == pytest.approx(watts[1] / watts[0], rel=1e-9)


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "h200", "h800", "a100"])
def test_a_gpu_with_its_own_fit_or_its_siblings_power_carries_nothing(gpu):
    """H100/B200/A100 have their own fits; H200 and H800 sustain like H100 at its 700 W."""
    assert throughput_carry(gpu) is None


def test_run_analytical_names_the_carry_on_a_rack_and_not_on_hgx(capsys):
    flags = ["--model", "gpt3-125m", "--num-layers", "1", "--world-size", "8", "-q"]
    assert analytical_main([*flags, "--system", "gb200-nvl72"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("tensor rate:"))
    assert "b200's fit x1.20" in line and "1,000 W" in line and "1,200 W" in line and "power law" in line
    assert analytical_main([*flags, "--system", "b200"]) == 0
    assert "tensor rate:" not in capsys.readouterr().out
