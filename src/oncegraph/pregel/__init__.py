"""LangGraph's low-level Pregel API on oncegraph's run loop.

``Pregel(nodes=..., channels=..., input_channels=..., output_channels=...)`` is an app of
nodes that talk through channels (:mod:`oncegraph.channels`)::

    app = Pregel(
        nodes={"one": NodeBuilder().subscribe_only("input").do(add_one).write_to("output")},
        channels={"input": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
    )
    app.invoke(2)  # 3

It compiles to the same graph spec a ``StateGraph`` compiles to: the channels are the
state's channels (each keeps its own rule for a step's writes), and the run loop's
routing is the channels' triggers (a node runs in the step after one that wrote a
channel it subscribes to; the input writes the input channels). So a Pregel app runs
on the one engine and keeps everything a graph has: checkpoints on any checkpointer,
the effect ledger for its tools, interrupts, breakpoints, streaming, retries.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from oncegraph.app import CompiledGraph
from oncegraph.channels import BaseChannel, Topic
from oncegraph.errors import GraphValidationError
from oncegraph.graph.caching import checked_cache, checked_policy
from oncegraph.graph.io import ChannelIO
from oncegraph.graph.retry import node_retry
from oncegraph.graph.spec import GraphSpec, NodeSpec, breakpoint_names
from oncegraph.graph.timeouts import check_async, split
from oncegraph.pregel.nodes import ChannelWriteEntry, NodeBuilder, PregelNode, built, node_function
from oncegraph.state.channels import StateSchema


def _names(what: str, value: str | Sequence[str]) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return value
    if not isinstance(value, Sequence):
        raise GraphValidationError(f"{what} must be a channel name or a list of them")
    return tuple(value)


class Pregel(CompiledGraph):
    """A Pregel app: ``nodes`` (``NodeBuilder`` chains) over ``channels``; the input is
    written to ``input_channels`` and the run returns ``output_channels`` (one name: its
    value; a list: a dict of them)."""

    def __init__(
        self,
        *,
        nodes: Mapping[str, NodeBuilder | PregelNode],
        channels: Mapping[str, BaseChannel] | None,
        input_channels: str | Sequence[str],
        output_channels: str | Sequence[str],
        stream_channels: str | Sequence[str] | None = None,
        stream_mode: str = "values",
        interrupt_before_nodes: str | Sequence[str] = (),
        interrupt_after_nodes: str | Sequence[str] = (),
        checkpointer: Any = None,
        store: Any = None,
        cache: Any = None,
        retry_policy: Any = (),
        cache_policy: Any = None,
        context_schema: Any = None,
        name: str = "LangGraph",
        debug: bool | None = None,
        auto_validate: bool = True,
        stream_eager: bool = False,
        trigger_to_nodes: Mapping[str, Sequence[str]] | None = None,
        step_timeout: float | None = None,
    ) -> None:
        """``debug``, ``auto_validate``, ``stream_eager`` and ``trigger_to_nodes`` are
        LangGraph's and change nothing here (the triggers are read off the nodes, and
        the app is always checked)."""
        if step_timeout is not None:
            raise GraphValidationError(
                "Pregel(step_timeout=...) is not supported: give the nodes a timeout "
                "(NodeBuilder().set_timeout(seconds)) instead"
            )
        chans = dict(channels or {})
        self.channels = chans
        # the built nodes (``.nodes`` is the run loop's node specs, as on every app)
        self.pregel_nodes = {n: built(n, node) for n, node in nodes.items()}
        self.input_channels = _names("input_channels", input_channels)
        self.output_channels = _names("output_channels", output_channels)
        self.stream_channels = (
            None if stream_channels is None else _names("stream_channels", stream_channels)
        )
        self.stream_mode = stream_mode
        self._check(chans)
        schema = StateSchema(
            typing.TypedDict(  # type: ignore[operator]
                f"{name}State", {k: c.typ for k, c in chans.items()}, total=False
            ),
            {k: c.as_channel(k) for k, c in chans.items()},
            "typeddict",
        )
        specs: dict[str, NodeSpec] = {}
        triggers: dict[str, list[str]] = {}
        for node_name, node in self.pregel_nodes.items():
            specs[node_name] = self._node_spec(node_name, node, retry_policy, cache_policy)
            for chan in node.triggers:
                triggers.setdefault(chan, []).append(node_name)
        check_async(specs)
        io = ChannelIO(
            self.input_channels,
            self.output_channels,
            frozenset(k for k, c in chans.items() if isinstance(c, Topic)),
            self.stream_channels,
        )
        spec = GraphSpec(
            schema=schema,
            nodes=specs,
            edges={},
            branches={},
            name=name,
            version="1",
            state_schema_version=1,
            context_schema=context_schema,
            interrupt_before=breakpoint_names(
                "interrupt_before_nodes", interrupt_before_nodes or None, specs
            ),
            interrupt_after=breakpoint_names(
                "interrupt_after_nodes", interrupt_after_nodes or None, specs
            ),
            cache=checked_cache(cache),
            triggers={k: tuple(v) for k, v in triggers.items()},
            io=io,
            writes={n: _drawn_writes(node) for n, node in self.pregel_nodes.items()},
        )
        super().__init__(spec, checkpointer=checkpointer)
        self.node_store = store

    def _check(self, chans: Mapping[str, BaseChannel]) -> None:
        for name, chan in chans.items():
            if not isinstance(chan, BaseChannel):
                raise GraphValidationError(
                    f"channel {name!r}: {chan!r} is not a channel; use LastValue(int), "
                    "Topic(str), BinaryOperatorAggregate(int, operator.add), ..."
                )
            chan.key = name
        for what, names in (
            ("input_channels", self.input_channels),
            ("output_channels", self.output_channels),
            ("stream_channels", self.stream_channels or ()),
        ):
            for chan_name in [names] if isinstance(names, str) else names:
                if chan_name not in chans:
                    raise GraphValidationError(
                        f"{what}: {chan_name!r} is not a channel of the app (its channels: "
                        f"{sorted(chans)}); add it to channels="
                    )
        for node_name, node in self.pregel_nodes.items():
            reads = [node.channels] if isinstance(node.channels, str) else list(node.channels)
            for chan_name in (*reads, *node.triggers, *(w.channel for w in node.writes)):
                if chan_name not in chans:
                    raise GraphValidationError(
                        f"node {node_name!r} uses channel {chan_name!r}, which is not a channel "
                        f"of the app (its channels: {sorted(chans)}); add it to channels="
                    )
            if not node.triggers:
                raise GraphValidationError(
                    f"node {node_name!r} subscribes to no channel, so it never runs; "
                    "subscribe_only(...) or subscribe_to(...)"
                )

    @staticmethod
    def _node_spec(name: str, node: PregelNode, retry_policy: Any, cache_policy: Any) -> NodeSpec:
        cap, timing = split(name, node.timeout)
        spec = NodeSpec.of(name, node_function(name, node), cap)
        policy = node.retry_policy or retry_policy
        retry = node_retry(name, policy) if policy else None
        return NodeSpec(
            spec.name,
            spec.fn,
            spec.is_async,
            False,
            cap,
            retry=retry,
            timeout_policy=timing,
            cache_policy=checked_policy(name, node.cache_policy or cache_policy),
        )

    # -- what a run takes and returns --------------------------------------------------------

    def _model(self, suffix: str, names: str | tuple[str, ...]) -> type[pydantic.BaseModel]:
        title = f"{self.spec.name}{suffix}"
        if isinstance(names, str):
            root: Any = pydantic.RootModel[self.channels[names].typ]  # type: ignore[misc]
            made: type[pydantic.BaseModel] = pydantic.create_model(title, __base__=root)
            return made
        fields: dict[str, Any] = {n: (self.channels[n].typ, None) for n in names}
        return pydantic.create_model(title, **fields)

    @property
    def input_schema(self) -> type[pydantic.BaseModel]:
        return self._model("Input", self.input_channels)

    @property
    def output_schema(self) -> type[pydantic.BaseModel]:
        return self._model("Output", self.output_channels)

    def get_input_jsonschema(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.input_schema.model_json_schema()

    def get_output_jsonschema(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.output_schema.model_json_schema()

    def get_context_jsonschema(self) -> dict[str, Any] | None:
        context = self.spec.context_schema
        if context is None:
            return None
        described: dict[str, Any] = pydantic.TypeAdapter(context).json_schema()
        return described

    async def _aupdate_step(
        self, config: Mapping[str, Any], updates: Sequence[tuple[Any, str | None]]
    ) -> dict[str, Any]:
        """``update_state(config, value, as_node=n)``: the value is what node ``n``
        returned, so it goes to the channels ``n`` writes."""
        written = [(self._as_written(v, n), n) for v, n in updates]
        return await super()._aupdate_step(config, written)

    def _as_written(self, value: Any, as_node: str | None) -> Any:
        node = self.pregel_nodes.get(as_node) if as_node is not None else None
        if node is None or value is None:
            return value
        return node_function_writes(node, value)

    def map(self) -> EachItem:
        """This app as a step that runs it on each item of a list (LangChain's
        ``Runnable.map``): ``NodeBuilder().subscribe_only("xs").do(inner.map())``."""
        return EachItem(self)

    def __repr__(self) -> str:
        return (
            f"Pregel(nodes={list(self.pregel_nodes)}, channels={list(self.channels)}, "
            f"input_channels={self.input_channels!r}, output_channels={self.output_channels!r})"
        )


class EachItem:
    """``app.map()``: ``app`` run on each item of a list input, one after the other (so a
    node that calls it is replayed call by call, in the same order)."""

    def __init__(self, app: CompiledGraph) -> None:
        self.app = app

    def invoke(self, inputs: Sequence[Any], config: Mapping[str, Any] | None = None) -> list[Any]:
        return [self.app.invoke(x, config) for x in inputs]

    async def ainvoke(
        self, inputs: Sequence[Any], config: Mapping[str, Any] | None = None
    ) -> list[Any]:
        return [await self.app.ainvoke(x, config) for x in inputs]


def _drawn_writes(node: PregelNode) -> tuple[str, ...]:
    """The channels ``node`` is drawn writing: all it writes but a ``skip_none`` write of
    its output as is (LangGraph's drawing writes ``None`` through each node)."""
    return tuple(
        w.channel for w in node.writes if not (w.skip_none and w.mapper is None and not w.fixed)
    )


def node_function_writes(node: PregelNode, output: Any) -> dict[str, Any]:
    """The channel writes ``node`` makes of ``output``."""
    return {w.channel: w.of(output) for w in node.writes}


__all__ = ["ChannelWriteEntry", "NodeBuilder", "Pregel", "PregelNode"]
