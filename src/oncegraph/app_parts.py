"""What the compiled graph's mixins (:mod:`oncegraph.app_operator`,
:mod:`oncegraph.app_state`) read of :class:`~oncegraph.app.CompiledGraph`, declared once:
its spec, its run service and how it reads a call's config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncegraph.graph.spec import GraphSpec
    from oncegraph.runs.service import RunService
    from oncegraph.runtime.config import RunConfig


class AppParts:
    """The base of a mixin of the compiled graph (which defines each of these)."""

    spec: GraphSpec

    if TYPE_CHECKING:

        @property
        def service(self) -> RunService: ...

        def _config(self, config: Mapping[str, Any] | None) -> RunConfig: ...

        def _thread(self, config: Mapping[str, Any] | None) -> str: ...


__all__ = ["AppParts"]
