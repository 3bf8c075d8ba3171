"""``async with store:`` for every bundled store: set up on entry, closed on exit."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """A mixin for stores with ``setup()`` and ``aclose()``.

    Closing is optional: a program that never closes its store still exits promptly and
    without warnings (pools do not keep the loop alive; see ``oncegraph._loopbound``).
    """

    async def setup(self) -> None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def aclose(self) -> None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


__all__ = ["Closing"]
