"""``@record``: an immutable dataclass (``frozen=True, slots=True``) that is cheaper to define.

Why this exists: on Python 3.11, ``dataclass`` writes each generated method as source text
and compiles it (``exec``), six times per frozen class. The 35 record classes a
``run-analytical`` process defines cost about 18 ms that way, a fifth of the whole process
on SimAI's example (docs/simai.md, "Performance"). Here ``dataclass`` only collects the
fields and builds the slots (no ``exec``); ``__init__`` (hot: records are made by the
thousand) is still generated and compiled, once, with the frozen classes' direct slot
writes; ``__eq__``, ``__hash__``, ``__repr__``, the frozen ``__setattr__``/``__delattr__``
and the pickling pair are shared functions that read the fields through one
``operator.attrgetter``. Defining a class costs about a fifth of what it did.

The behaviour is dataclasses' for ``frozen=True, slots=True``: the same ``__init__``
signature (defaults, ``default_factory``, ``kw_only``, ``__post_init__``), equality only
between instances of the same class, field by field in order; the hash of the same tuple
of fields (``compare=False`` / ``hash=False`` fields left out as dataclasses leaves them
out); ``ClassName(a=1, b=2)`` as the repr (``repr=False`` fields left out);
``FrozenInstanceError`` on assignment and deletion; ``dataclasses.fields``, ``replace``,
``asdict``, copying and pickling. tests/workload_gen/test_record.py checks each against a
plain dataclass. Not supported (refused when the class is defined): ``InitVar``,
``field(init=False)`` and inheritance from another dataclass; no record needs them.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import _FIELD_INITVAR  # dataclasses' marker of an InitVar pseudo-field
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields, is_dataclass
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


class _Factory:
    """Marks a parameter whose default comes from a ``default_factory``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _init(cls: type, fs: tuple) -> Callable[..., None]:
    """``__init__`` as dataclasses writes it for a frozen class: positional fields, then the
    keyword-only ones; each value stored straight into its slot; ``__post_init__`` last."""
    ns: dict[str, Any] = {"__setslot": object.__setattr__, "__factory": _FACTORY}
    params: list[str] = []
    kw_params: list[str] = []
    body: list[str] = []
    seen_default = False
    for f in fs:
        name = f.name
        if f.default is not MISSING:
            ns[f"__dflt_{name}"] = f.default
            param = f"{name}=__dflt_{name}"
            value = name
        elif f.default_factory is not MISSING:
            ns[f"__fact_{name}"] = f.default_factory
            param = f"{name}=__factory"
            value = f"__fact_{name}() if {name} is __factory else {name}"
        else:
            param, value = name, name
            if seen_default and not f.kw_only:
                raise TypeError(f"non-default argument {name!r} follows default argument")
        if not f.kw_only:
            seen_default = seen_default or param != name
        (kw_params if f.kw_only else params).append(param)
        body.append(f"  __setslot(self, {name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *kw_params] if kw_params else [])])
    src = f"def __init__({signature}):\n" + ("\n".join(body) or "  pass") + "\n"
    exec(compile(src, f"<record {cls.__qualname__}>", "exec"), ns)  # one compile per class
    return ns["__init__"]


def _add_methods(cls: T) -> T:
    fs = fields(cls)
    names = frozenset(f.name for f in fs)
    compared = _getter(tuple(f.name for f in fs if f.compare))
    hashed = _getter(tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash)))
    every = _getter(tuple(f.name for f in fs))
    shown = tuple(f.name for f in fs if f.repr)
    setslot = object.__setattr__

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{self.__class__.__qualname__}({inner})"

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    def __getstate__(self: Any) -> list:
        return list(every(self))

    def __setstate__(self: Any, state: list) -> None:
        for f, value in zip(fs, state):
            setslot(self, f.name, value)

    own = cls.__dict__
    for fn in (__eq__, __hash__, __repr__, __setattr__, __delattr__, __getstate__, __setstate__):
        name = fn.__name__
        # as dataclasses: a method the class body defines is kept; a __hash__ that Python set
        # to None because the body defines __eq__ is not one
        if name in own and not (name == "__hash__" and own[name] is None and "__eq__" in own):
            if name in ("__setattr__", "__delattr__"):
                raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
            continue
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    init = _init(cls, fs)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fs}, "return": None}
    cls.__init__ = init  # type: ignore[misc]
    return cls


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, kw_only: bool = False) -> Callable[[T], T]: ...
def record(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    """``@record`` or ``@record(kw_only=True)`` in place of
    ``@dataclass(frozen=True, slots=True[, kw_only=True])``."""
    def wrap(c: T) -> T:
        if any(is_dataclass(base) for base in c.__mro__[1:]):
            raise TypeError(f"@record class {c.__name__} may not inherit from a dataclass")
        made = dataclass(c, init=False, repr=False, eq=False, slots=True, kw_only=kw_only)
        pseudo = made.__dataclass_fields__.values()
        if any(f._field_type is _FIELD_INITVAR for f in pseudo) or any(not f.init for f in fields(made)):
            raise TypeError(f"@record class {c.__name__}: InitVar and field(init=False) are not supported")
        return _add_methods(made)
    return wrap if cls is None else wrap(cls)
