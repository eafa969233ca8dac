"""The Kineto reader on a trace torch itself produced (scripts/make_cpu_trace.py, shipped in
tests/data): a 2-layer GPT, hidden 256, 4 heads, seq 128, vocab 1024, batch 2, 3 profiled
Adam steps on the CPU with record_shapes=True.

Expected counts are derived from the model's structure, not read off the trace."""
from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from formats.kineto import read_kineto
from workload_gen.core.errors import FormatError

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "cpu_gpt2l_h256_trace.json.gz"
L, H, HEADS, S, V, B = 2, 256, 4, 128, 1024, 2
T = B * S


@pytest.fixture(scope="module")
def rank():
    tr = read_kineto(TRACE)
    assert len(tr.ranks) == 1
    return tr.ranks[0]


def test_steps_and_layers(rank):
    assert rank.device == "cpu"
    assert [s.number for s in rank.steps] == [1, 2, 3]
    assert rank.num_layers == L
    # Steps follow each other and each holds its own work.
    for a, b in zip(rank.steps, rank.steps[1:]):
        assert a.end <= b.start + 1e-6
    for s in rank.steps:
        ops = rank.step_ops(s.number)
        assert all(s.start - 1e-6 <= o.start and o.end <= s.end + 1e-6 for o in ops)
        # Classified work never exceeds the wall time of the (single-threaded) step.
        assert sum(o.dur for o in ops) <= s.dur


def test_forward_gemms_per_layer_have_the_model_shapes(rank):
    ops = [o for o in rank.step_ops(2) if o.category == "gemm" and o.phase == "fwd"]
    per_layer = Counter(o.layer for o in ops)
    # qkv, proj, fc1, fc2 per layer; the tied output projection in the head (layer L).
    assert per_layer == {0: 4, 1: 4, L: 1}
    weights = sorted(o.input_dims[1] for o in ops if o.layer == 0)
    assert weights == sorted([(3 * H, H), (H, H), (4 * H, H), (H, 4 * H)])
    head = [o for o in ops if o.layer == L][0]
    assert head.input_dims[1] == (V, H)


def test_backward_gemms_split_into_input_and_weight_grads(rank):
    ops = [o for o in rank.step_ops(2) if o.category == "gemm" and o.layer == 0]
    phases = Counter(o.phase for o in ops)
    assert phases == {"fwd": 4, "bwd-input": 4, "bwd-weight": 4}
    # Weight gradients contract over the tokens: (out, T) @ (T, in).
    for o in ops:
        if o.phase == "bwd-weight":
            a, b = o.input_dims[0], o.input_dims[1]
            assert a[1] == T and b[0] == T
        if o.phase == "bwd-input":
            assert o.input_dims[0][0] == T


def test_every_kind_of_the_model_is_found_on_its_layer(rank):
    ops = rank.step_ops(3)
    kinds = {(o.layer, o.category) for o in ops if o.category != "other"}
    for layer in range(L):
        for kind in ("gemm", "attention", "norm", "elementwise"):
            assert (layer, kind) in kinds, (layer, kind)
    assert (-1, "embedding") in kinds
    assert (L, "loss") in kinds and (L, "norm") in kinds
    opt = [o for o in ops if o.category == "optimizer"]
    assert len(opt) == 1 and opt[0].phase == "iter" and opt[0].layer is None
    # Adam updates every parameter once: the lerp_ inputs add up to the parameter count.
    per_layer = 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + 2 * H + (H * 4 * H + 4 * H) + (4 * H * H + H)
    params = V * H + S * H + L * per_layer + 2 * H
    assert sum(d[0] * d[1] if len(d) == 2 else d[0] for d in opt[0].input_dims) == params


def test_attention_backward_is_attributed_through_sequence_numbers(rank):
    att = [o for o in rank.step_ops(2) if o.category == "attention"]
    assert Counter((o.layer, o.phase) for o in att) == {(0, "fwd"): 1, (1, "fwd"): 1, (0, "bwd"): 1, (1, "bwd"): 1}
    bwd = [o for o in att if o.phase == "bwd"][0]
    assert bwd.fwd_input_dims[0] == (B, HEADS, S, H // HEADS)


def test_gz_and_plain_and_multi_rank_directory(tmp_path):
    data = json.loads(gzip.open(TRACE, "rt").read())
    (tmp_path / "plain.json").write_text(json.dumps(data))
    plain = read_kineto(tmp_path / "plain.json").ranks[0]
    gz = read_kineto(TRACE).ranks[0]
    assert plain.ops == gz.ops and plain.steps == gz.steps
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(TRACE, d / "worker_rank1.json.gz")
    data["distributedInfo"] = {"rank": 0, "world_size": 2}
    (d / "trace_a.json").write_text(json.dumps(data))
    both = read_kineto(d)
    assert [r.rank for r in both.ranks] == [0, 1]
    assert both.step_time_s == max(r.step_time_s for r in both.ranks)
    assert [replace(o, rank=0) for o in both.rank(1).ops] == list(gz.ops)
    with pytest.raises(FormatError, match="rank 7"):
        both.rank(7)


def test_bad_inputs_are_format_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FormatError, match="bad.json"):
        read_kineto(bad)
    (tmp_path / "x.json").write_text('{"foo": 1}')
    with pytest.raises(FormatError, match="traceEvents"):
        read_kineto(tmp_path / "x.json")
    (tmp_path / "nostep.json").write_text('{"traceEvents": []}')
    with pytest.raises(FormatError, match="ProfilerStep"):
        _ = read_kineto(tmp_path / "nostep.json").ranks[0].step_time_s
