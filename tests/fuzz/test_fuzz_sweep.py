"""Fuzz sweep specs: the YAML, the grid, and the filter expression language."""
from __future__ import annotations

from alloc_peak import peak_allocation
from fuzz_helpers import fuzz_settings, json_values, mutated_text, only_trainsim_errors, scratch_file
from fuzz_seeds import SWEEP_YAML
from hypothesis import example, given
from hypothesis import strategies as st

from engine.sweep.grid import expand, load_spec, spec_from_dict

BASE = {"model": "gpt3-125m", "parallel": {"world_size": 8}, "training": {"global_batch": 64}}
GRID = [{"product": {"parallel.tp": [1, 2, 4], "parallel.pp": [1, 2]}}]


def _expand_file(text: str) -> None:
    for point in expand(load_spec(scratch_file("spec.yaml", text))):
        _ = point.key  # what a run journals by


@fuzz_settings(150)
@given(mutated_text([SWEEP_YAML]))
@example(SWEEP_YAML.replace("grid:\n", "grid: 5\nx:\n"))           # grid: 5
@example(SWEEP_YAML.replace("<= 8", "<= 0"))                        # every point filtered out
@example(SWEEP_YAML.replace("output: out.csv", "output: [1]"))
def test_sweep_spec_file_only_raises_trainsim_errors(text):
    only_trainsim_errors(_expand_file, text)


_NAMES = st.sampled_from(["parallel.tp", "parallel.pp", "parallel.world_size", "training.global_batch", "model",
                          "nosuch.field", "True", "None", "x"])
_LEAVES = st.one_of(_NAMES, st.integers(-10, 10**6).map(str), st.sampled_from(["0", "0.0", "9", "1e308", "'a'",
                                                                               "\"b\"", "[]", "[1, 2]", "()"]))


def _combine(inner):
    binop = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", " in ",
                                              " and ", " or "]), inner)
    return st.one_of(binop.map(lambda t: f"({t[0]}{t[1]}{t[2]})"), inner.map(lambda x: f"not {x}"),
                     inner.map(lambda x: f"-{x}"), st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"))


_EXPR = st.recursive(_LEAVES, _combine, max_leaves=25)


def _expand_filters(filters) -> None:
    """Bounded work, not a wall-clock bound: an expression that got past the language's
    limits (a 256-bit integer, 10,000-item repetition) would build its value; the seeds
    below that exhausted memory build 100 MB and more (9 ** 9 ** 9: 145 MB), while six
    points' filters need well under 1 MB, so 64 MiB of Python allocations at peak is the line."""
    peak, error = peak_allocation(
        lambda: expand(spec_from_dict({"base": BASE, "grid": GRID, "filters": filters}, source="fuzz.yaml")))
    assert peak < 64 << 20, f"filters {filters!r} allocated {peak / 2**20:.0f} MiB"
    if error is not None:  # also when it ends in an error: the value may have been built first
        raise error


@fuzz_settings(200)
@given(st.lists(st.one_of(_EXPR, st.text(max_size=30)), min_size=1, max_size=3))
# Regression seeds (issue 16): each hung, exhausted memory or was a traceback before.
@example(["9 ** 9 ** 9"])
@example(['"a" * 4000000000'])
@example(["1 / 0"])
@example(["parallel.tp / (parallel.tp - 1) > 0"])
@example(["(" * 300 + "1" + ")" * 300])
@example(["-" * 100_000 + "1"])
@example(["not " * 5000 + "True"])
@example(["'%999999999d' % 1"])
@example(["10.0 ** 400"])
@example(["parallel.tp > 100"])
@example(["[1] * 10 ** 9"])
def test_sweep_filters_only_raise_trainsim_errors(filters):
    only_trainsim_errors(_expand_filters, filters)


@fuzz_settings(100)
@given(st.fixed_dictionaries({}, optional={"base": json_values, "grid": json_values, "filters": json_values,
                                           "output": json_values, "extra": json_values}))
@example({"grid": 5})
@example({"grid": [{"product": {"parallel.tp": list(range(1000)), "parallel.pp": list(range(1001))}}]})
@example({"base": {"model": "gpt3-125m", 5: "x"}})                  # keys of mixed types
def test_sweep_spec_mapping_only_raises_trainsim_errors(data):
    def run() -> None:
        for point in expand(spec_from_dict(data, source="fuzz.yaml")):
            _ = point.key

    only_trainsim_errors(run)
