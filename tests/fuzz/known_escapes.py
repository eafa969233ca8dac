"""Escapes the fuzz suite found in modules its authors do not own (issue 16).

Each entry is tolerated by the fuzzers (counted, and listed at the end of the run) and
reproduced by tests/fuzz/test_known_escapes.py with a strict xfail (one test per entry):
once the owner fixes it, that test fails with XPASS, and the entry is to be deleted here
(its seed then moves to FIXED_SEEDS).
"""
from __future__ import annotations

from collections.abc import Callable

from fuzz_helpers import KnownEscape, scratch_file

from workload_gen.core.errors import TrainsimError


def _one_line(fn: Callable[[], object]) -> None:
    """Reproduce a multi-line TrainsimError as an AssertionError."""
    try:
        fn()
    except TrainsimError as exc:
        assert "\n" not in str(exc).strip(), f"multi-line error: {exc!s}"


def _yaml(text: str | bytes):
    from workload_gen.core.yaml_file import read_yaml_mapping

    return read_yaml_mapping(scratch_file("known.yaml", text), "anything")


def _config(text: str | bytes):
    from workload_gen.config_loading import configs_from_dict

    return configs_from_dict(_yaml(text), source="known.yaml")


KNOWN: tuple[KnownEscape, ...] = ()
"""Fixed by their owners and removed: an unknown key holding a line break echoed raw into
the message (errors.py now one-lines field names too), and earlier (commit 68563ef): PyYAML's two-line syntax errors and
its 4300-digit integers (yaml_file.py), ConfigError's repr of a 10k-deep value (errors.py),
sorting keys of mixed types (config_loading.py, system.py), ``gpu: null`` (gpu_specs.py),
non-numeric, list and list-of-systems curves (efficiency.py) and a non-UTF-8 topology file
(ns3/topology.py); their seeds stay in the fuzzers' @example lists."""

SEEDS: dict[tuple[str, str], Callable[[], object]] = {}

FIXED_SEEDS: dict[str, tuple[Callable[[], object], str | None]] = {
    "unknown key with a line break": (lambda: _config('model: gpt3-125m\nparallel: {"a\\nb": 1}\n'), "unknown key"),
}
"""Escapes fixed since the suite found them, replayed by tests/fuzz/test_known_escapes.py:
each seed with the words its one-line TrainsimError must contain, or None where the fixed
code accepts the input."""
