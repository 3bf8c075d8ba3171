"""The compiled graph's LangGraph-compatible extras, mixed into
:class:`~oncegraph.app.CompiledGraph`: ``with_config`` / ``copy``,
``nodes``, ``get_input_jsonschema`` / ``get_output_jsonschema``, ``get_name``,
``bulk_update_state`` / ``abulk_update_state``, ``astream_events`` and
``clear_cache`` / ``aclear_cache`` (the node cache).

Each is built on the app's own run paths and state updates, so the guarantees of those
hold here too (a bulk update is a sequence of ``update_state`` calls; an event stream
is ``astream`` underneath).
"""

from __future__ import annotations

import copy as _copy
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Self

from oncegraph.channels import state_channels
from oncegraph.errors import InvalidUpdateError
from oncegraph.runtime.portal import run_sync
from oncegraph.types import StateUpdate

if TYPE_CHECKING:
    from oncegraph.graph.spec import GraphSpec, NodeSpec


def merge_configs(*configs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Configs merged left to right; ``configurable``, ``metadata`` merge key by key,
    ``tags`` add up."""
    out: dict[str, Any] = {}
    for config in configs:
        for key, value in (config or {}).items():
            if key in ("configurable", "metadata") and isinstance(value, Mapping):
                out[key] = {**out.get(key, {}), **value}
            elif key == "tags" and value:
                out[key] = [*out.get(key, []), *value]
            else:
                out[key] = value
    return out


class LangGraphMethods:
    """LangGraph's ``CompiledStateGraph`` methods that oncegraph's app offers too."""

    spec: GraphSpec
    _default_config: Mapping[str, Any] = {}

    # -- copies ----------------------------------------------------------------------------

    @property
    def channels(self) -> Mapping[str, Any]:
        """The state's fields as LangGraph's channel objects, by name (a view:
        :func:`oncegraph.channels.state_channels`); a Pregel app's are the ones it was
        given."""
        given = self.__dict__.get("_given_channels")
        if given is not None:
            return given  # type: ignore[no-any-return]
        return state_channels(self.spec.schema)

    @channels.setter
    def channels(self, value: Mapping[str, Any]) -> None:
        self.__dict__["_given_channels"] = value

    @property
    def nodes(self) -> Mapping[str, NodeSpec]:
        """The graph's nodes by name (each ``.copy(update)`` gives a changed copy)."""
        return self.spec.nodes

    def copy(self, update: Mapping[str, Any] | None = None) -> Self:
        """A shallow copy (the same store and spec), with ``update``'s attributes set."""
        new = _copy.copy(self)
        for key, value in (update or {}).items():
            setattr(new, key, value)
        return new

    def with_config(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        """A copy whose calls start from ``config`` (and ``kwargs``, e.g.
        ``recursion_limit=10``); each call's own config wins over it."""
        merged = merge_configs(self._default_config, config, kwargs)
        return self.copy({"_default_config": merged})

    def _with_default_config(self, config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if not self._default_config:
            return config
        return merge_configs(self._default_config, config)

    # -- the node cache ------------------------------------------------------------------

    async def aclear_cache(self, nodes: Sequence[str] | None = None) -> None:
        """Drop the cached results (``compile(cache=...)``) of ``nodes`` (None: all of
        this graph's cached nodes)."""
        cache = self.spec.cache
        if cache is None:
            return
        names = [n for n, s in self.spec.nodes.items() if s.cache_policy is not None]
        if nodes is not None:
            names = [n for n in names if n in set(nodes)]
        await cache.aclear([(self.spec.name, n) for n in names])

    def clear_cache(self, nodes: Sequence[str] | None = None) -> None:
        """The sync twin of :meth:`aclear_cache`."""
        run_sync(self.aclear_cache(nodes))

    # -- schemas ---------------------------------------------------------------------------

    def get_name(self, suffix: str | None = None) -> str:
        """The graph's name (``compile(name=...)``), with ``suffix`` appended."""
        return f"{self.spec.name}{suffix}" if suffix else self.spec.name

    def get_input_jsonschema(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON schema of what ``invoke`` takes (the input schema, else the state's)."""
        from oncegraph.graph.jsonschema import json_schema  # pydantic, on first use

        spec = self.spec
        source = spec.input_schema or spec.schema
        if spec.input_schema is None and spec.schema.source_fields is not None:
            source = spec.output_schema or spec.schema  # the state schema's own fields
        return json_schema(source, self.get_name("Input"))

    def get_output_jsonschema(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON schema of what ``invoke`` returns (the output schema, else the state's)."""
        from oncegraph.graph.jsonschema import json_schema

        spec = self.spec
        return json_schema(spec.output_schema or spec.schema, self.get_name("Output"))

    def get_context_jsonschema(self) -> dict[str, Any] | None:
        """The JSON schema of the run's context (``StateGraph(..., context_schema=...)``),
        or None without one."""
        from oncegraph.graph.jsonschema import json_schema
        from oncegraph.state.channels import StateSchema

        context = self.spec.context_schema
        if context is None:
            return None
        return json_schema(StateSchema.of(context), self.get_name("Context"))

    # -- bulk updates ----------------------------------------------------------------------

    async def abulk_update_state(
        self, config: Mapping[str, Any], supersteps: Sequence[Sequence[StateUpdate]]
    ) -> dict[str, Any]:
        """Apply ``supersteps`` (each a list of ``StateUpdate(values, as_node)``) in order,
        each update as ``update_state`` does; returns the config of the last."""
        if not supersteps:
            raise InvalidUpdateError("No supersteps provided: pass a list of lists of updates")
        if not any(supersteps):
            raise InvalidUpdateError("No updates provided: each superstep needs an update")
        for step in supersteps:
            if len(step) > 1 and any(u.as_node is None for u in step):
                raise InvalidUpdateError(
                    "several updates in one superstep each need as_node= (the node each "
                    "update stands for)"
                )
            if any(u.as_node in ("__end__", "__copy__") for u in step) and len(step) > 1:
                raise InvalidUpdateError(
                    f"an update as {step[0].as_node!r} cannot be combined with others in one "
                    "superstep; give it a superstep of its own"
                )
        current: Mapping[str, Any] = config
        for step in supersteps:  # each superstep one step: its updates written together
            current = await self._aupdate_step(  # type: ignore[attr-defined]
                current, [(u.values, u.as_node) for u in step]
            )
        return dict(current)

    def bulk_update_state(
        self, config: Mapping[str, Any], supersteps: Sequence[Sequence[StateUpdate]]
    ) -> dict[str, Any]:
        return run_sync(self.abulk_update_state(config, supersteps), "bulk_update_state")

    # -- events ----------------------------------------------------------------------------

    async def astream_events(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        version: str = "v2",
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """LangChain's event stream of the graph's run: with LangChain installed, its
        own event stream of the run's callbacks (the graph's run, each node's and what
        a node calls: a chat model's ``on_chat_model_stream`` tokens, ...; see
        :mod:`oncegraph.runtime.lcrun`); without it, the graph's level only:
        ``on_chain_start``, one ``on_chain_stream`` per ``updates`` chunk (its
        ``data["chunk"]``), ``on_chain_end`` with the output. Node-level events are
        also in ``stream_mode="events"``."""
        from oncegraph.runtime import lcrun

        if lcrun.langchain_loaded():
            events: Any = lcrun.event_stream(self, input, config, **kwargs)
            async with aclosing(events):  # closed with this one: the run stops
                async for event in events:
                    yield event
            return
        name = self.get_name()
        run_id = str(uuid.uuid4())
        base = {"name": name, "run_id": run_id, "parent_ids": [], "tags": [], "metadata": {}}
        yield {**base, "event": "on_chain_start", "data": {"input": input}}
        last: Any = None
        modes = ["updates", "values"]
        stream = self.astream(input, config, stream_mode=modes, **kwargs)  # type: ignore[attr-defined]
        # closed with this one: a caller that stops reading stops the run at once (its
        # running nodes are cancelled), as when it stops reading astream()
        async with aclosing(stream):
            async for mode, chunk in stream:
                if mode == "values":
                    last = chunk
                else:
                    yield {**base, "event": "on_chain_stream", "data": {"chunk": chunk}}
        yield {**base, "event": "on_chain_end", "data": {"output": last}}


__all__ = ["LangGraphMethods", "merge_configs"]
