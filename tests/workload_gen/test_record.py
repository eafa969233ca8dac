"""``@record`` behaves as ``@dataclass(frozen=True, slots=True)``: each class is defined both
ways and every observable behaviour is compared (the oracle is the standard library)."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field

import pytest

from workload_gen.core.record import record


def _pair(body: dict, kw_only: bool = False) -> tuple[type, type]:
    """The same class body as a plain frozen slotted dataclass and as a record."""
    ns = {"__annotations__": dict(body["__annotations__"]), **{k: v for k, v in body.items() if k != "__annotations__"}}
    plain = dataclass(frozen=True, slots=True, kw_only=kw_only)(type("Rec", (), dict(ns)))
    ours = record(kw_only=kw_only)(type("Rec", (), dict(ns)))
    return plain, ours


BODIES = {
    "several": {"__annotations__": {"a": int, "b": float, "c": str, "d": tuple}, "c": "x", "d": ()},
    "one": {"__annotations__": {"a": int}},
    "none": {"__annotations__": {}},
    "flags": {"__annotations__": {"a": int, "hidden": int, "loose": int, "unhashed": int},
              "hidden": field(default=1, repr=False), "loose": field(default=2, compare=False),
              "unhashed": field(default=3, hash=False)},
}
VALUES = {
    "several": [(1, 2.0, "x", ()), (1, 2.0, "y", ()), (1, 2.0, "x", (1, 2)), (0, 0.0, "", ())],
    "one": [(1,), (2,), (-1,)],
    "none": [()],
    "flags": [(1, 1, 2, 3), (1, 9, 2, 3), (1, 1, 9, 3), (1, 1, 2, 9), (2, 1, 2, 3)],
}


@pytest.mark.parametrize("name", BODIES)
def test_equality_hash_repr_match_dataclasses(name: str) -> None:
    plain, ours = _pair(BODIES[name])
    vals = VALUES[name]
    for x in vals:
        for y in vals:
            p1, p2, o1, o2 = plain(*x), plain(*y), ours(*x), ours(*y)
            assert (o1 == o2) == (p1 == p2)
            assert (o1 != o2) == (p1 != p2)
            assert hash(o1) == hash(p1)
        assert repr(ours(*x)) == repr(plain(*x))
        assert ours(*x) != plain(*x)  # another class: never equal, as between two dataclasses
        assert ours(*x).__eq__(object()) is NotImplemented


def test_fields_replace_asdict_pickle_and_frozen_match_dataclasses() -> None:
    plain, ours = _pair(BODIES["flags"])
    o, p = ours(1, 2, 3, 4), plain(1, 2, 3, 4)
    assert [(f.name, f.repr, f.compare, f.hash) for f in dataclasses.fields(o)] == \
        [(f.name, f.repr, f.compare, f.hash) for f in dataclasses.fields(p)]
    assert dataclasses.asdict(o) == dataclasses.asdict(p)
    assert dataclasses.replace(o, a=5) == ours(5, 2, 3, 4)
    assert copy.deepcopy(o) == o and copy.copy(o) == o
    assert not hasattr(o, "__dict__")  # slotted
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del o.a
    assert ours.__match_args__ == plain.__match_args__


@record
class Picklable:
    a: int
    b: tuple = ()


def test_pickle_round_trip() -> None:
    r = Picklable(3, (1, "x"))
    assert pickle.loads(pickle.dumps(r)) == r and hash(pickle.loads(pickle.dumps(r))) == hash(r)


def test_kw_only() -> None:
    plain, ours = _pair(BODIES["several"], kw_only=True)
    with pytest.raises(TypeError):
        ours(1, 2.0)
    assert repr(ours(a=1, b=2.0)) == repr(plain(a=1, b=2.0))


def test_methods_the_body_defines_are_kept() -> None:
    @record
    class Custom:
        a: int

        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "mine"

    assert Custom(1) == Custom(2) and repr(Custom(1)) == "mine"
    assert hash(Custom(1)) == hash((1,))  # Python's implicit None is replaced, as dataclasses does


def _both(body: str, kw_only: bool = False) -> tuple[type, type]:
    """The same class source under @dataclass(frozen=True, slots=True) and under @record."""
    plain_src = f"@dataclass(frozen=True, slots=True, kw_only={kw_only})\nclass Rec:\n{body}"
    ours_src = f"@record(kw_only={kw_only})\nclass Rec:\n{body}"
    out = []
    for src in (plain_src, ours_src):
        ns = {"dataclass": dataclass, "field": field, "record": record, "object": object}
        exec(src, ns)
        out.append(ns["Rec"])
    return out[0], out[1]


INIT_BODY = """
    a: int
    b: list = field(default_factory=list)
    c: str = "x"
    d: int = field(default=4, kw_only=True)
    e: tuple = field(default_factory=tuple, kw_only=True)

    def __post_init__(self):
        if self.a < 0:
            raise ValueError("a < 0")
        object.__setattr__(self, "c", self.c.upper())
"""


@pytest.mark.parametrize("args,kw", [((1,), {}), ((1, [2]), {}), ((1, [2], "y"), {"d": 5}), ((), {"a": 3, "e": (1,)}),
                                      ((1, [], "z", 9), {}), ((-1,), {}), ((), {}), ((1,), {"zz": 1})])
def test_init_matches_dataclasses(args: tuple, kw: dict) -> None:
    plain, ours = _both(INIT_BODY)

    def outcome(cls):
        try:
            r = cls(*args, **kw)
        except (TypeError, ValueError) as exc:
            return type(exc)
        return dataclasses.astuple(r)

    assert outcome(ours) == outcome(plain)
    import inspect
    assert str(inspect.signature(ours)) == str(inspect.signature(plain))


def test_factories_give_fresh_objects_and_post_init_runs() -> None:
    _, ours = _both(INIT_BODY)
    x, y = ours(1), ours(1)
    assert x.b == [] and x.b is not y.b and x.c == "X"


def test_frozen_slotted_copy_and_pickle_round_trip() -> None:
    r = Picklable(3, (1, "x"))
    for attempt in (lambda: setattr(r, "a", 1), lambda: delattr(r, "a"), lambda: setattr(r, "zz", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            attempt()
    assert copy.copy(r) == r and copy.deepcopy(r) == r
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(r, proto)) == r


def test_definition_errors_match_dataclasses() -> None:
    for body in ("    a: int = 1\n    b: int\n", "    a: list = []\n"):
        errors = []
        for deco in ("dataclass(frozen=True, slots=True)", "record"):
            try:
                exec(f"@{deco}\nclass Rec:\n{body}", {"dataclass": dataclass, "record": record})
            except (TypeError, ValueError) as exc:
                errors.append(type(exc))
        assert len(errors) == 2 and errors[0] is errors[1]


def test_unsupported_forms_are_refused() -> None:
    with pytest.raises(TypeError, match="InitVar"):
        @record
        class WithInitVar:
            a: InitVar[int]

    with pytest.raises(TypeError, match="init=False"):
        @record
        class WithNoInit:
            a: int = field(default=0, init=False)

    @dataclass(frozen=True)
    class Base:
        a: int

    with pytest.raises(TypeError, match="inherit"):
        @record
        class Child(Base):
            b: int
