"""A table of named implementations (collective algorithms, pipeline schedules).

One explicit table per family (STYLE.md section 4): ``--help``, error messages and the
``auto`` rules read it. It is filled once, by decorators as its module is imported, and
only read after that; registering a name twice is a bug and raises at import.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from workload_gen.core.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> item, for one family of things users pick by name."""

    def __init__(self, family: str, field: str, *, extra_valid: tuple[str, ...] = ()) -> None:
        self.family = family
        """What the items are, for messages ("pipeline schedule")."""
        self.field = field
        """The config field or flag a bad name came from ("schedule")."""
        self._extra_valid = extra_valid
        """Names valid where this registry is consulted but not in it (e.g. ``auto``)."""
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.family} {name!r} registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name``."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join((*self._extra_valid, *self.names()))
            raise ConfigError(self.field, name, f"unknown {self.family}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(sorted(self._items.items()))
