"""One page of a newest-first list of checkpoints: what ``list(config, before=...,
filter=..., limit=...)`` and ``get_state_history`` keep of the checkpoints they walk.

``before`` skips every item up to and including the one with that id; ``filter`` keeps
those whose metadata has each of its values; ``limit`` stops after that many. The
caller walks its own sequence and asks :meth:`Page.take` of each item, so what it does
around the walk (reading a masker at the first item, masking what it shows) stays its
own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SHOW, SKIP, STOP = "show", "skip", "stop"


class Page:
    """The walk of one page: feed it each item's id and metadata, in order."""

    __slots__ = ("before", "filter", "given", "limit", "skipping")

    def __init__(
        self,
        *,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> None:
        self.before = before
        self.filter = filter
        self.limit = limit
        self.skipping = before is not None  # up to and including ``before`` itself
        self.given = 0

    def take(self, item_id: Any, metadata: Mapping[str, Any]) -> str:
        """``SHOW`` the item, ``SKIP`` it, or ``STOP`` (the page is full)."""
        if self.skipping:
            self.skipping = item_id != self.before
            return SKIP
        if self.filter and not all(metadata.get(k) == v for k, v in self.filter.items()):
            return SKIP
        if self.limit is not None and self.given >= self.limit:
            return STOP
        self.given += 1
        return SHOW


__all__ = ["SHOW", "SKIP", "STOP", "Page"]
