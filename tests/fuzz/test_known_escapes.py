"""Each known escape (tests/fuzz/known_escapes.py) still reproduces.

A strict xfail: when the owning module is fixed, the seed no longer escapes, this test
XPASSes and fails, and the entry is to be removed from known_escapes.KNOWN (so that the
fuzzers stop tolerating it)."""
from __future__ import annotations

import pytest
from known_escapes import FIXED_SEEDS, KNOWN, SEEDS

from workload_gen.errors import TrainsimError


def test_every_known_escape_has_a_seed():
    assert {(k.owner, k.exception) for k in KNOWN} == set(SEEDS)


@pytest.mark.parametrize("name", FIXED_SEEDS)
def test_fixed_escape_stays_fixed(name):
    """A fixed escape's seed ends as the project's one-line error (or is accepted)."""
    try:
        FIXED_SEEDS[name]()
    except TrainsimError as exc:
        assert "\n" not in str(exc).strip()


def test_known_escapes_reproduce():
    """Each listed escape still reproduces (none are listed today: every escape found so
    far is fixed); a fixed one fails here, and its entry is to be removed."""
    for known in KNOWN:
        _still_reproduces(known)


def _still_reproduces(known) -> None:
    exc_type = AssertionError if known.exception == "MultiLineTrainsimError" else Exception
    try:
        SEEDS[(known.owner, known.exception)]()
    except exc_type as exc:
        name = "MultiLineTrainsimError" if isinstance(exc, AssertionError) else type(exc).__name__
        if name == known.exception:
            return
        raise
    pytest.fail(f"{known.owner}: {known.exception} no longer escapes ({known.what}); it was fixed: "
                "delete its entry from tests/fuzz/known_escapes.py")
