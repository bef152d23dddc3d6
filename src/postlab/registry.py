"""Named extension points: a dict plus a decorator, so variants are added, never branched in."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object table that refuses duplicates and explains unknown names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        #: entries named now and imported on first use: name -> "module:attribute"
        self._lazy: dict[str, str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries or name in self._lazy:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add

    def register_lazy(self, name: str, where: str) -> None:
        """Name an entry defined at ``where`` ("package.module:attribute"), imported when it
        is first looked up, so listing the names (a parser's choices) imports nothing."""
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._lazy[name] = where

    def unregister(self, name: str) -> T:
        """Remove an entry; for code (tests, notebooks) that registers only for a while."""
        obj = self[name]
        self._entries.pop(name)
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
        if name in self._lazy:
            module, _, attribute = self._lazy.pop(name).partition(":")
            self._entries[name] = getattr(importlib.import_module(module), attribute)
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self.names()))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        return [*self._entries, *self._lazy]

    def values(self) -> list[T]:
        return [self[name] for name in self.names()]
