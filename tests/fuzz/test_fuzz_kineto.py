"""Fuzz the PyTorch profiler (Kineto) trace reader."""
from __future__ import annotations

import copy
import gzip
import json

from fuzz_helpers import fuzz_settings, json_values, mutated_bytes, only_trainsim_errors, scratch_file
from fuzz_seeds import cpu_trace, gpu_trace
from hypothesis import example, given
from hypothesis import strategies as st

from formats.kineto import read_kineto

FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")
ARGS = ("Input Dims", "Concrete Inputs", "Input type", "Sequence number", "correlation", "stream", "device",
        "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Description")


def _read(data: dict | list, gz: bool) -> None:
    text = json.dumps(data, allow_nan=True)
    path = scratch_file("trace.json.gz" if gz else "trace.json", gzip.compress(text.encode()) if gz else text)
    trace = read_kineto(path)
    for rt in trace.ranks:
        _ = rt.step_time_s, rt.median_step, rt.num_layers
        for s in rt.steps:
            rt.step_ops(s.number)
    _ = trace.step_time_s


def _mutate(data: dict, edits) -> dict:
    data = copy.deepcopy(data)
    events = data["traceEvents"]
    for idx, field, arg, value, delete in edits:
        if not events:
            break
        ev = events[idx % len(events)]
        if arg is not None:
            args = ev.get("args")
            if isinstance(args, dict):
                if delete:
                    args.pop(arg, None)
                else:
                    args[arg] = value
        elif delete:
            ev.pop(field, None)
        else:
            ev[field] = value
    return data


_EDITS = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(FIELDS), st.one_of(st.none(), st.sampled_from(ARGS)),
                            json_values, st.booleans()), min_size=1, max_size=5)


@fuzz_settings(150)
@given(st.sampled_from(["gpu", "cpu"]), _EDITS, st.booleans())
# Regression seeds (issue 16): each was a traceback before.
@example("gpu", [(0, "ts", None, "1000", False)], False)         # string timestamp
@example("gpu", [(3, "args", None, [1, 2], False)], False)       # non-dict args
@example("gpu", [(3, "pid", None, [1], False)], False)           # list pid
@example("gpu", [(0, "name", None, "x", False)], False)          # no ProfilerStep left... (one of two)
@example("cpu", [(5, "dur", None, None, False)], True)
@example("gpu", [(2, "name", "Input Dims", 5, False)], False)
@example("gpu", [(1, "name", None, "layer." + "9" * 40, False)], False)
def test_kineto_trace_only_raises_trainsim_errors(which, edits, gz):
    seed = gpu_trace() if which == "gpu" else cpu_trace()
    only_trainsim_errors(_read, _mutate(seed, edits), gz)


@fuzz_settings(50)
@given(st.one_of(json_values, st.fixed_dictionaries({"traceEvents": st.lists(json_values, max_size=6)})),
       st.booleans())
@example({"traceEvents": []}, False)
@example({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1}]}, False)
def test_kineto_from_scratch_only_raises_trainsim_errors(data, gz):
    only_trainsim_errors(_read, data, gz)


def _read_bytes(data: bytes) -> None:
    trace = read_kineto(scratch_file("bytes.json.gz", data))
    for rt in trace.ranks:
        _ = rt.step_time_s, rt.median_step


@fuzz_settings(50)
@given(mutated_bytes([gzip.compress(json.dumps(gpu_trace()).encode()), json.dumps(gpu_trace()).encode()]))
@example(gzip.compress(json.dumps(gpu_trace()).encode())[:200])   # corrupt (truncated) gzip
@example(b"[" * 100_000)                                          # nested too deeply
def test_kineto_bytes_only_raise_trainsim_errors(data):
    only_trainsim_errors(_read_bytes, data)
