"""Known escapes (tests/fuzz/known_escapes.py) still reproduce; fixed ones stay fixed.

Each KNOWN entry is one strict xfail: when the owning module is fixed, the seed no longer
escapes, that test XPASSes and fails, and the entry is to be removed from
known_escapes.KNOWN (so that the fuzzers stop tolerating it). With KNOWN empty (today:
every escape found so far is fixed) there is no such test, rather than a vacuous one."""
from __future__ import annotations

import pytest
from fuzz_helpers import REPO
from known_escapes import FIXED_SEEDS, KNOWN, SEEDS

from workload_gen.core.errors import TrainsimError


class StillEscapes(Exception):
    """The seed raised exactly the listed escape (the expected failure)."""


def test_every_known_escape_has_its_seed_and_no_seed_is_stray():
    """KNOWN and SEEDS name the same escapes: a seed left behind after its entry was deleted
    (or an entry without a seed) fails here, whatever the two hold."""
    assert {(k.owner, k.exception) for k in KNOWN} == set(SEEDS)


def test_the_fixed_escapes_corpus_is_not_empty():
    """Without seeds the replay below would be an empty parametrisation, i.e. a skip."""
    assert FIXED_SEEDS


@pytest.mark.parametrize("name", sorted(FIXED_SEEDS))
def test_fixed_escape_stays_fixed(name):
    """A fixed escape's seed ends as the project's one-line error naming what is wrong, or
    is accepted; any other exception (or a multi-line message) is the escape come back."""
    seed, words = FIXED_SEEDS[name]
    if words is None:
        seed()
        return
    with pytest.raises(TrainsimError) as info:
        seed()
    message = str(info.value).strip()
    assert "\n" not in message, message
    assert words in message, message


if KNOWN:
    @pytest.mark.xfail(strict=True, raises=StillEscapes,
                       reason="a known escape, owned elsewhere; XPASS means fixed: delete its entry")
    @pytest.mark.parametrize("known", KNOWN, ids=[f"{k.owner}:{k.exception}" for k in KNOWN])
    def test_known_escape_reproduces(known):
        assert (REPO / known.owner).is_file(), f"no such module: {known.owner}"
        exc_type = AssertionError if known.exception == "MultiLineTrainsimError" else Exception
        try:
            SEEDS[(known.owner, known.exception)]()  # a missing seed: KeyError, a real failure
        except exc_type as exc:
            name = "MultiLineTrainsimError" if isinstance(exc, AssertionError) else type(exc).__name__
            if name == known.exception:
                raise StillEscapes(f"{known.owner}: {known.exception} ({known.what})") from exc
            raise
