"""Named extension points: a dict plus a decorator, so variants are added, never branched in."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object table that refuses duplicates and explains unknown names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        #: name -> the entry, or a ``_Lazy`` naming where it is defined (imported on first use)
        self._entries: dict[str, T | _Lazy] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add

    def register_lazy(self, name: str, where: str) -> None:
        """Name an entry defined at ``where`` ("package.module:attribute"), imported when it
        is first looked up, so listing the names (a parser's choices) imports nothing."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = _Lazy(where)

    def unregister(self, name: str) -> T:
        """Remove an entry; for code (tests, notebooks) that registers only for a while."""
        obj = self[name]
        del self._entries[name]
        return obj

    @contextmanager
    def registered(self, name: str, obj: T) -> Iterator[T]:
        """Register ``obj`` for the duration of a ``with`` block, so it cannot leak out."""
        self.register(name)(obj)
        try:
            yield obj
        finally:
            self.unregister(name)

    def __getitem__(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None
        if isinstance(entry, _Lazy):
            module, _, attribute = entry.where.partition(":")
            # replaced only once the import worked: a failed one is tried again next time
            entry = self._entries[name] = getattr(importlib.import_module(module), attribute)
        return entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Every name, in the order registered."""
        return list(self._entries)

    def values(self) -> list[T]:
        return [self[name] for name in self.names()]


@dataclass(frozen=True)
class _Lazy:
    """A registered entry not imported yet: "package.module:attribute"."""

    where: str
