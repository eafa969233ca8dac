"""The run's title line names the expert layout of an MoE run: with folding, the experts are
laid out over the same ranks by their own decomposition (etp x ep x edp x pp), which the dense
tp/cp/dp figures do not show."""
from __future__ import annotations

from engine.commands.run import analytical_main

FOLDED = ["--model", "mixtral-8x7b", "--system", "h100", "--world-size", "16", "--tp", "2", "--sp", "--pp", "2",
          "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1", "--global-batch-size", "32",
          "--seq-length", "4096", "-q"]


def test_a_folded_layout_shows_its_expert_sizes(capsys):
    # 16 GPUs = tp 2 x pp 2 x dp 4 for attention; = etp 1 x ep 8 x edp 1 x pp 2 for the experts
    assert analytical_main(FOLDED) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert "tp 2 pp 2 vpp 1 cp 1 ep 8 (etp 1 edp 1) dp 4," in title


def test_a_dense_title_is_unchanged(capsys):
    assert analytical_main(["-q"]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert "ep 1 dp 4," in title and "etp" not in title
