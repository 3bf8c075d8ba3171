"""The compiled graph's state methods, mixed into :class:`~oncegraph.app.CompiledGraph`:
reading a thread's state (``get_state``, ``get_state_history``) and updating it
(``update_state``), each with its async twin.

Each is one call of the app's :class:`~oncegraph.runs.service.RunService` (the reading
of :mod:`oncegraph.runs.reading`, the time travel of :mod:`oncegraph.runs.timetravel`);
the sync method is the async one run through the portal, never a twin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError
from oncegraph.runs import reading
from oncegraph.runs.timetravel import allowed_irreversible
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.portal import iterate_sync, run_sync
from oncegraph.state.channels import ROOT

if TYPE_CHECKING:
    from oncegraph.graph.spec import GraphSpec
    from oncegraph.runs.service import RunService


class StateMethods:
    """A thread's state on a compiled graph: read it, update it."""

    spec: GraphSpec

    if TYPE_CHECKING:

        @property
        def service(self) -> RunService: ...

        def _thread(self, config: Mapping[str, Any] | None) -> str: ...

    async def aget_state(
        self, config: Mapping[str, Any], *, subgraphs: bool = False, masked: bool = True
    ) -> StateSnapshot:
        """The thread's state now, or at ``checkpoint_id`` (top level or in
        ``configurable``), in LangGraph's shape (:mod:`oncegraph.runs.snapshots`); with
        ``subgraphs=True`` a subgraph task's ``state`` is the subgraph's own snapshot.
        Masked fields are masked (:mod:`oncegraph.runs.masking`); ``masked=False`` is
        for a caller allowed to see the state as stored (e.g. the server's admins)."""
        thread_id = self._thread(config)
        return await reading.state(
            self.service.context,
            thread_id,
            _checkpoint_id(config),
            subgraphs=subgraphs,
            masked=masked,
            ns=str(_configured(config, "checkpoint_ns") or ""),
        )

    def get_state(
        self, config: Mapping[str, Any], *, subgraphs: bool = False, masked: bool = True
    ) -> StateSnapshot:
        return run_sync(self.aget_state(config, subgraphs=subgraphs, masked=masked), "get_state")

    async def aget_state_history(
        self,
        config: Mapping[str, Any],
        *,
        limit: int | None = None,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[StateSnapshot]:
        """The thread's checkpoints, newest first, each run's input shown as LangGraph
        shows it (see :mod:`oncegraph.runs.snapshots`). ``run_id`` in ``config`` keeps one
        run's; ``filter`` keeps those whose metadata has those values; ``before`` keeps
        those older than that checkpoint; ``limit`` the first that many.

        An async iterator, as LangGraph's: snapshots are read a page at a time as you
        iterate, so walking a long thread holds one page in memory, not the thread."""
        thread_id = self._thread(config)
        async for snap in reading.history(
            self.service.context,
            thread_id,
            run_id=(config or {}).get("run_id"),
            limit=limit,
            filter=filter,
            before=_checkpoint_id(before),
            ns=str(_configured(config, "checkpoint_ns") or ""),
        ):
            yield snap

    def get_state_history(
        self,
        config: Mapping[str, Any],
        *,
        limit: int | None = None,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
    ) -> Iterator[StateSnapshot]:
        """:meth:`aget_state_history` as an iterator (``list(...)`` for all of it)."""
        return iterate_sync(
            self.aget_state_history(config, limit=limit, filter=filter, before=before),
            "get_state_history",
        )

    async def aupdate_state(
        self,
        config: Mapping[str, Any],
        values: Mapping[str, Any] | None,
        as_node: str | None = None,
    ) -> dict[str, Any]:
        """LangGraph's ``update_state`` on the thread's head or a past checkpoint: the edit
        becomes the thread's head under a NEW paused run with lineage (nothing of the
        original run is rewritten, guarantee 9; :mod:`oncegraph.runs.timetravel`); go on
        with ``invoke(None, returned_config)``. ``as_node='__copy__'``: an unchanged copy."""
        return await self._aupdate_step(config, [(values, as_node)])

    async def _aupdate_step(
        self, config: Mapping[str, Any], updates: Sequence[tuple[Any, str | None]]
    ) -> dict[str, Any]:
        """``updates`` (``(values, as_node)``, several for a superstep of
        ``bulk_update_state``) written as one step on the thread's head or ``config``'s
        checkpoint."""
        thread_id = self._thread(config)
        checkpoint_id = _checkpoint_id(config)
        root = self.spec.schema.is_root  # the state is one value

        def wrapped(values: Any) -> Any:
            return {ROOT: values} if values is not None and root else values

        (values, as_node), *rest = updates
        ns = (config.get("configurable") or {}).get("checkpoint_ns")
        if ns:  # a stateful subgraph's checkpoint (runs/subtravel.py)
            if rest:
                raise ConfigError(
                    "a superstep of several updates is for the graph's own checkpoints; "
                    "update a subgraph's state one update at a time"
                )
            return await self.service.update_subgraph_state(
                thread_id, str(ns), values, checkpoint_id=checkpoint_id, as_node=as_node
            )
        fork = await self.service.update_state(
            thread_id,
            wrapped(values),
            checkpoint_id=checkpoint_id,
            as_node=as_node,
            allow_irreversible=allowed_irreversible(RunConfig.parse(config)),
            also=[(wrapped(v), str(n)) for v, n in rest],
        )
        return fork.config

    def update_state(
        self,
        config: Mapping[str, Any],
        values: Mapping[str, Any] | None,
        as_node: str | None = None,
    ) -> dict[str, Any]:
        return run_sync(self.aupdate_state(config, values, as_node), "update_state")


def _checkpoint_id(config: Mapping[str, Any] | None) -> str | None:
    """``checkpoint_id`` from the top level of ``config`` or its ``configurable``."""
    found = _configured(config, "checkpoint_id")
    return str(found) if found else None


def _configured(config: Mapping[str, Any] | None, key: str) -> Any:
    """``config[key]`` or ``config["configurable"][key]`` (LangGraph writes either)."""
    if not config:
        return None
    if key in config:
        return config[key]
    inner = config.get("configurable")
    return inner.get(key) if isinstance(inner, Mapping) else None


__all__ = ["StateMethods"]
