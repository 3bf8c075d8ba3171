"""An attribute an object reads off another object it holds, declared in one line.

``store = Forwarded[Checkpointer]("context")`` in a class body makes ``obj.store`` read
``obj.context.store``: read-only, typed (``Forwarded[T]`` gives ``T`` on an instance, the
descriptor itself on the class), and the same attribute name on both sides, so a facade
that hands on what it holds states it once instead of a property each.
"""

from __future__ import annotations

from typing import Any, Generic, Never, TypeVar, overload

T = TypeVar("T")


class Forwarded(Generic[T]):
    """``obj.<name>`` is ``obj.<via>.<name>`` (``<name>``: the attribute it is set as)."""

    def __init__(self, via: str, doc: str | None = None) -> None:
        self._via = via
        self._name = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Forwarded[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self._via), self._name)

    def __set__(self, obj: object, value: Never) -> None:
        raise AttributeError(f"{self._name} is read-only: it is {self._via}.{self._name}")


__all__ = ["Forwarded"]
