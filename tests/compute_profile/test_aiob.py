"""AIOB import: AICB's sample profile (µs per section) into imported rows with our shapes."""
from __future__ import annotations

import pytest
from cp_fixtures import SHARED_DATA

from compute_profile.aiob import AIOB_SECTIONS, parse_aiob, rows_from_aiob
from workload_gen.builder import build
from workload_gen.core.errors import FormatError
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig

EXAMPLE = SHARED_DATA / "aicb" / "aiob_inputs_Example.txt"


@pytest.fixture(scope="module")
def gpt13b_tp8():
    # The config AICB ran with this profile (shared/data/aicb/README.md): GPT-13B, TP 8, SP,
    # sequence 2048, micro-batch 1, world 128, global batch 256.
    par = ParallelConfig(world_size=128, tp=8, sp=True, seq_length=2048, micro_batch=1, global_batch=256)
    return build(PRESETS["gpt3-13b"], par)


def test_parse_example_sections_in_order():
    secs = parse_aiob(EXAMPLE)
    assert [s.name for s in secs] == list(AIOB_SECTIONS)
    qkv = secs[2]
    assert (qkv.name, qkv.avg_us, qkv.min_us, qkv.max_us) == ("atten_qkv", 889, 862, 1255)


def test_rows_carry_our_shapes_and_microseconds(gpt13b_tp8):
    rows, skipped = rows_from_aiob(EXAMPLE, "a100", gpt13b_tp8)
    by_note = {r.note.split()[2]: r for r in rows}
    qkv = by_note["atten_qkv"]
    # tokens 2048 (micro-batch 1 x seq 2048, full sequence before the column-parallel GEMM),
    # n = 3 * 5120 / 8 = 1920, k = 5120
    assert (qkv.kind, qkv.shape_key, qkv.phase, qkv.source) == ("gemm", "2048x1920x5120", "fwd", "imported")
    assert qkv.time_s == pytest.approx(889e-6)
    assert (qkv.min_s, qkv.max_s) == (pytest.approx(862e-6), pytest.approx(1255e-6))
    assert qkv.flops == 2 * 2048 * 1920 * 5120
    attn = by_note["atten_flash"]
    assert attn.shape_key == "1x5x2048x2048x128x1"  # 40 heads / tp 8, head_dim 128, causal
    assert by_note["mlp_gelu"].shape_key == "gelu:2048x2560"
    assert by_note["param_time"].phase == "iter" and by_note["param_time"].time_s == pytest.approx(17374e-6)
    assert all(r.gpu == "a100-sxm-80gb" for r in rows)
    # the three norms run on the same SP-local shape (2048/8 x 5120): one key, first kept
    assert len(rows) == 10 and len(skipped) == 2
    assert by_note["layernorm"].shape_key == "256x5120"


def test_unknown_section_is_reported_not_guessed(tmp_path, gpt13b_tp8):
    f = tmp_path / "p.txt"
    f.write_text("train_iter:3\nmoe_dispatch:\n    time_gpu_avg: 10\natten_qkv:\n    time_gpu_avg: 100\n")
    rows, skipped = rows_from_aiob(f, "a100", gpt13b_tp8)
    assert len(rows) == 1 and rows[0].time_s == pytest.approx(1e-4)
    assert "moe_dispatch" in skipped[0] and "not a known AICB section" in skipped[0]


@pytest.mark.parametrize("text, line, msg", [
    ("Emb:\n    time_gpu_avg: abc\n", 2, "expected"),
    ("Emb:\n    time_gpu_max: 3\n", 1, "no time_gpu_avg"),
    ("Emb:\n    time_gpu_avg: -3\n", 2, "must be > 0"),
])
def test_bad_file_names_the_line(tmp_path, text, line, msg):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(FormatError, match=rf"bad.txt:{line}: .*{msg}"):
        parse_aiob(f)
