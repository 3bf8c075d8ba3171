"""The nodes of a low-level Pregel app: :class:`NodeBuilder` and what it builds.

A node subscribes to channels (it runs in the step after one that wrote any of them),
reads channels (its input: one channel's value, or a dict of several), runs its steps
(``do``: functions, coroutine functions, LangChain Runnables or compiled graphs, each
fed the previous one's output) and writes the last output to channels (``write_to``).
:func:`node_function` turns that into one plain node function of the run loop: it
reads the state, runs the steps and returns the channel writes as the node's update.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from oncegraph.errors import GraphValidationError

_NO_VALUE: Any = object()


@dataclass(frozen=True, slots=True)
class ChannelWriteEntry:
    """One write of a node: its output (or ``mapper(output)``, or a fixed ``value``) to
    ``channel``. ``skip_none``: write nothing when that is None."""

    channel: str
    value: Any = _NO_VALUE
    skip_none: bool = False
    mapper: Callable[[Any], Any] | None = None

    @property
    def fixed(self) -> bool:
        """Whether the write is of a fixed ``value`` (not of the output)."""
        return self.value is not _NO_VALUE

    def of(self, output: Any) -> Any:
        if self.value is not _NO_VALUE:
            return self.value
        return self.mapper(output) if self.mapper is not None else output


@dataclass(frozen=True, slots=True)
class PregelNode:
    """A built node (:meth:`NodeBuilder.build`)."""

    channels: str | tuple[str, ...]
    triggers: tuple[str, ...]
    steps: tuple[Any, ...] = ()
    writes: tuple[ChannelWriteEntry, ...] = ()
    retry_policy: tuple[Any, ...] = ()
    cache_policy: Any = None
    timeout: Any = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


class NodeBuilder:
    """Builds a Pregel node by chaining: ``NodeBuilder().subscribe_only("input")
    .do(fn).write_to("output")``."""

    def __init__(self) -> None:
        self._channels: str | list[str] = []
        self._triggers: list[str] = []
        self._steps: list[Any] = []
        self._writes: list[ChannelWriteEntry] = []
        self._retry: list[Any] = []
        self._cache: Any = None
        self._timeout: Any = None
        self._tags: list[str] = []
        self._metadata: dict[str, Any] = {}

    def subscribe_only(self, channel: str) -> NodeBuilder:
        """Run on writes to ``channel``; the node's input is its value."""
        if self._channels:
            raise ValueError(
                "Cannot subscribe to single channels when other channels are already "
                "subscribed to; use subscribe_to(...) for several"
            )
        self._channels = channel
        self._triggers.append(channel)
        return self

    def subscribe_to(self, *channels: str, read: bool = True) -> NodeBuilder:
        """Run on writes to any of ``channels``; the input is a dict of their values
        (``read=False``: they trigger the node without being read)."""
        if isinstance(self._channels, str):
            raise ValueError(
                "Cannot subscribe to channels when subscribed to a single channel; use "
                "subscribe_to(...) only"
            )
        if read:
            self._channels.extend(channels)
        self._triggers.extend(channels)
        return self

    def read_from(self, *channels: str) -> NodeBuilder:
        """Read ``channels`` into the input dict too, without being triggered by them."""
        if isinstance(self._channels, str):
            raise ValueError(
                "Cannot read additional channels when subscribed to a single channel; use "
                "subscribe_to(...) to get a dict input"
            )
        self._channels.extend(channels)
        return self

    def do(self, step: Any) -> NodeBuilder:
        """Add a step: it gets the previous step's output (the first, the input)."""
        self._steps.append(step)
        return self

    def write_to(self, *channels: str | ChannelWriteEntry, **kwargs: Any) -> NodeBuilder:
        """Write the output to ``channels``; ``name=fn`` writes ``fn(output)``, ``name=v``
        the fixed value ``v``."""
        self._writes.extend(ChannelWriteEntry(c) if isinstance(c, str) else c for c in channels)
        self._writes.extend(
            ChannelWriteEntry(k, mapper=v) if callable(v) else ChannelWriteEntry(k, value=v)
            for k, v in kwargs.items()
        )
        return self

    def meta(self, *tags: str, **metadata: Any) -> NodeBuilder:
        self._tags.extend(tags)
        self._metadata.update(metadata)
        return self

    def add_retry_policies(self, *policies: Any) -> NodeBuilder:
        self._retry.extend(policies)
        return self

    def add_cache_policy(self, policy: Any) -> NodeBuilder:
        self._cache = policy
        return self

    def set_timeout(self, timeout: float | timedelta | Any) -> NodeBuilder:
        """Each attempt's timeout: seconds, or a ``TimeoutPolicy`` (async steps only)."""
        self._timeout = timeout
        return self

    def build(self) -> PregelNode:
        channels = self._channels if isinstance(self._channels, str) else tuple(self._channels)
        return PregelNode(
            channels,
            tuple(self._triggers),
            tuple(self._steps),
            tuple(self._writes),
            tuple(self._retry),
            self._cache,
            self._timeout,
            tuple(self._tags),
            dict(self._metadata),
        )


def built(name: str, node: Any) -> PregelNode:
    """``node`` as a :class:`PregelNode` (a builder is built)."""
    if isinstance(node, NodeBuilder):
        return node.build()
    if isinstance(node, PregelNode):
        return node
    raise GraphValidationError(
        f"node {name!r}: {node!r} is not a Pregel node; build it with NodeBuilder()"
        ".subscribe_only(...).do(...).write_to(...)"
    )


# -- running the steps ---------------------------------------------------------------------


def _is_graph(step: Any) -> bool:
    from oncegraph.app import CompiledGraph

    return isinstance(step, CompiledGraph)


def _runnable(step: Any) -> bool:
    return not callable(step) and callable(getattr(step, "ainvoke", None))


def step_is_async(step: Any) -> bool:
    """Whether ``step`` must be awaited: a coroutine function, a compiled graph, or a
    Runnable whose functions are coroutines (a sync ``RunnableLambda`` is not)."""
    if _is_graph(step):
        return True
    if not _runnable(step):
        target = step if inspect.isroutine(step) else type(step).__call__
        return inspect.iscoroutinefunction(step) or inspect.iscoroutinefunction(target)
    bound = getattr(step, "bound", None)
    if bound is not None and _runnable(bound):  # with_config / bind: what it wraps
        return step_is_async(bound)
    if hasattr(step, "afunc") or hasattr(step, "func"):  # a RunnableLambda
        return getattr(step, "afunc", None) is not None and not hasattr(step, "func")
    parts = getattr(step, "steps__", None) or getattr(step, "steps", None)
    if isinstance(parts, Mapping):
        return all(step_is_async(p) for p in parts.values())
    if isinstance(parts, Sequence):
        return all(step_is_async(p) for p in parts)
    return True


def _call(step: Any, value: Any) -> Any:
    if _runnable(step):
        return step.invoke(value)
    return step(value)


async def _acall(step: Any, value: Any) -> Any:
    if _is_graph(step) or _runnable(step):
        return await step.ainvoke(value)
    out = step(value)
    if inspect.isawaitable(out):
        return await out
    return out


def _reader(node: PregelNode) -> Callable[[Mapping[str, Any]], Any]:
    chans = node.channels
    if isinstance(chans, str):
        one = chans
        return lambda state: state.get(one)
    return lambda state: {c: state[c] for c in chans if c in state}


def _writer(node: PregelNode) -> Callable[[Any], dict[str, Any]]:
    writes = node.writes

    def write(output: Any) -> dict[str, Any]:
        update: dict[str, Any] = {}
        for w in writes:
            value = w.of(output)
            if value is None and w.skip_none:
                continue
            update[w.channel] = value
        return update

    return write


def node_function(name: str, node: PregelNode) -> Callable[[Any], Any]:
    """The run loop's node function: read the input, run the steps, return the writes."""
    read = _reader(node)
    write = _writer(node)
    steps = node.steps
    if any(step_is_async(s) for s in steps):

        async def run_async(state: Any) -> dict[str, Any]:
            value = read(state)
            for step in steps:
                value = await _acall(step, value)
            return write(value)

        run_async.__name__ = run_async.__qualname__ = name
        return run_async

    def run(state: Any) -> dict[str, Any]:
        value = read(state)
        for step in steps:
            value = _call(step, value)
        return write(value)

    run.__name__ = run.__qualname__ = name
    return run


__all__ = ["ChannelWriteEntry", "NodeBuilder", "PregelNode", "built", "node_function"]
