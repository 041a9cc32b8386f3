"""Name -> callable registries, one per pipeline axis.

Every variant (advantage, loss, aggregation, KL estimator, reward, task, …) is a small
function registered by name. Configs select variants by these names; the trainer never
branches on a name. Duplicate registration is an error, never a silent overwrite.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry:
    """A named collection of callables for one axis of the pipeline (e.g. ``advantage``)."""

    def __init__(self, axis: str) -> None:
        self.axis = axis
        self._items: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: register ``fn`` under ``name``; raises if the name is taken."""

        def deco(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.axis} '{name}' is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> Callable[..., Any]:
        """Return the callable registered as ``name``; the error lists the valid names."""
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items))
            raise KeyError(f"unknown {self.axis} '{name}'; choose one of: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def summary(self, name: str) -> str:
        """First line of the docstring of ``name`` (for ``grpokit list``)."""
        doc = (self._items[name].__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
