"""The Kineto reader's per-event check has a fast path (exact type tests on a valid event) and
the field-by-field check behind it; they must accept and refuse exactly the same events."""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from formats.kineto_events import _check_event, _check_event_fields
from workload_gen.core.errors import FormatError

_ANY = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                 st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_NAMES = st.one_of(st.text(max_size=30), st.sampled_from([
    "ProfilerStep#3", "ProfilerStep#12345678901234567890", "layers.3.mlp", "layer_1234567", "embedding",
    "aten::mm", "Optimizer.step#Adam.step"]), _ANY)


def _outcome(fn, e: dict) -> str:
    try:
        fn(e, 7, "t.json")
    except FormatError as exc:
        return str(exc)
    return "ok"


@settings(max_examples=600, deadline=None)
@given(ts=st.one_of(st.integers(0, 10**9), st.floats(allow_nan=True, allow_infinity=True), _ANY),
       dur=st.one_of(st.none(), st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True), _ANY),
       name=_NAMES, cat=st.one_of(st.none(), st.sampled_from(["cpu_op", "user_annotation", "kernel", ""]), _ANY),
       pid=_ANY, tid=_ANY,
       args=st.one_of(st.none(), _ANY, st.fixed_dictionaries({}, optional={
           "correlation": _ANY, "Input Dims": _ANY, "Concrete Inputs": _ANY, "Input type": _ANY})))
def test_fast_and_full_checks_agree(ts, dur, name, cat, pid, tid, args):
    e = {"ph": "X", "ts": ts, "name": name, "pid": pid, "tid": tid}
    if dur is not None:
        e["dur"] = dur
    if cat is not None:
        e["cat"] = cat
    if args is not None:
        e["args"] = args
    assert _outcome(_check_event, e) == _outcome(_check_event_fields, e)


def test_a_valid_event_passes_both():
    e = {"ph": "X", "ts": 12.5, "dur": 3, "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": "7",
         "args": {"correlation": 42, "Input Dims": [[2, 3]], "Input type": ["float"]}}
    assert _outcome(_check_event, e) == _outcome(_check_event_fields, e) == "ok"
    assert math.isfinite(e["ts"])
