"""``@record``: an immutable dataclass (``frozen=True, slots=True``) that is cheaper to define.

Why this exists: on Python 3.11, ``dataclass`` writes each generated method as source text
and compiles it (``exec``), six times per frozen class. The 35 record classes a
``run-analytical`` process defines cost about 18 ms that way, a fifth of the whole process
on SimAI's example (docs/engine.md, "Fixed cost"). ``__eq__``, ``__hash__`` and
``__repr__`` do not need generated code: here they are shared functions that read the
fields through one ``operator.attrgetter``, which halves the cost of defining a class.
``__init__`` (hot: records are made by the thousand) and the frozen ``__setattr__`` stay
dataclasses' own.

The behaviour is dataclasses' for ``frozen=True, eq=True``: equality only between
instances of the same class, field by field in order; the hash of the same tuple of
fields (fields with ``compare=False`` or ``hash=False`` left out as dataclasses leaves them
out); ``ClassName(a=1, b=2)`` as the repr (fields with ``repr=False`` left out).
``dataclasses.fields``, ``replace``, ``asdict`` and pickling work unchanged.
tests/workload_gen/test_record.py checks each against a plain dataclass.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar, overload

T = TypeVar("T", bound=type)


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """A function returning the named attributes as a tuple (attrgetter returns a bare value
    for one name and refuses none)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _add_methods(cls: T) -> T:
    fs = fields(cls)
    compared = _getter(tuple(f.name for f in fs if f.compare))
    hashed = _getter(tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash)))
    shown = tuple(f.name for f in fs if f.repr)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{self.__class__.__qualname__}({inner})"

    own = cls.__dict__
    # as dataclasses: a method the class body defines is kept; a __hash__ that Python set
    # to None because the body defines __eq__ is not one
    for fn in (__eq__, __hash__, __repr__):
        name = fn.__name__
        if name in own and not (name == "__hash__" and own[name] is None and "__eq__" in own):
            continue
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    return cls


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, kw_only: bool = False) -> Callable[[T], T]: ...
def record(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    """``@record`` or ``@record(kw_only=True)`` in place of
    ``@dataclass(frozen=True, slots=True[, kw_only=True])``."""
    def wrap(c: T) -> T:
        return _add_methods(dataclass(c, frozen=True, slots=True, eq=False, repr=False, kw_only=kw_only))
    return wrap if cls is None else wrap(cls)
