"""A graph's run as LangChain's callback handlers see it.

A compiled graph is called like a LangChain runnable: given ``config["callbacks"]``
(a tracer, a handler), ``invoke`` and ``stream`` report its run to them as a tree of
chain runs, as LangGraph's are: the graph's run (``on_chain_start`` with the input,
``on_chain_end`` with the state it returns, a question asked being no error: the state
without its ``__interrupt__``; or ``on_chain_error`` with the error raised), under it
one run per node call (tagged ``graph:step:<n>``, with the task's ``langgraph_*``
metadata), and under a node's run one per ``@task`` call and whatever LangChain
Runnable the node calls (the node's ``config["callbacks"]`` is its run's). A stream's
chunks reach the streaming handlers (LangChain's event stream) as the graph run's
output. ``run_name``, ``run_id``, ``tags`` and ``metadata`` of the config name the
graph's run, as LangChain reads them. Nothing is imported, and nothing is reported,
unless callbacks are given.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from contextvars import ContextVar
from typing import Any, cast

from oncegraph.graph.io import INTERRUPT_KEY

# The callback manager the runs started here are children of: the graph's run while
# its nodes run, a node's run while its code (and its @task calls) run.
_parent: ContextVar[Any] = ContextVar("oncegraph_lc_parent", default=None)


def parent() -> Any:
    """The callback manager of the run a run started here belongs under (None: no
    callbacks were given)."""
    return _parent.get()


@asynccontextmanager
async def chain_run(
    config: Mapping[str, Any] | None,
    name: str,
    input: Any,
    *,
    thread_id: str | None = None,
) -> AsyncIterator[Callable[[Any], Any]]:
    """Report the graph's run inside to ``config``'s callbacks (nothing without any):
    the body hands its output to the function this gives (which returns it); an error
    leaving the body is reported as the run's. While the body runs, node runs started
    in its context are this run's children."""
    run = await _graph_run(config, name, input, thread_id)
    if run is None:
        yield _same
        return
    kept: list[Any] = []

    def ended(output: Any) -> Any:
        kept.append(output)
        return output

    token = _parent.set(run.get_child())
    try:
        yield ended
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    finally:
        _reset(token)
    await run.on_chain_end(_shown(kept[-1] if kept else None))


async def stream_run(
    config: Mapping[str, Any] | None,
    name: str,
    input: Any,
    items: Callable[[], AsyncGenerator[Any, None]],
    *,
    thread_id: str | None = None,
    output: Callable[[], Any] | None = None,
) -> AsyncGenerator[Any, None]:
    """``items()`` (a run's stream) reported as the graph's run: each item is also its
    output to streaming handlers (``on_chain_stream`` of LangChain's event stream);
    ``output()`` (once the items end) the run's output, else its last item."""
    run = await _graph_run(config, name, input, thread_id)
    if run is None:
        async with aclosing(items()) as plain:  # closed with this one: the run stops
            async for item in plain:
                yield item
        return
    last: Any = None
    opened = [items()]
    for handler in run.handlers:
        tap = getattr(handler, "tap_output_aiter", None)
        if tap is not None and _streams(handler):
            opened.append(tap(run.run_id, opened[-1]))
    stream = opened[-1]
    try:
        # the run starts at the first item: its tasks take this run as their parent
        # then (a task keeps the context it was made in), and the caller's context
        # never keeps it between items (a stream left unclosed reports nothing after)
        token = _parent.set(run.get_child())
        try:
            first = await anext(stream, _END)
        finally:
            _reset(token)
        if first is not _END:
            last = first
            yield first
            async for item in stream:
                last = item
                yield item
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    finally:
        for one in reversed(opened):  # closed with this one: the run stops
            close = getattr(one, "aclose", None)
            if close is not None:
                await close()
    await run.on_chain_end(_shown(last if output is None else output()))


_END: Any = object()


async def node_run(name: str, input: Any, tags: list[str], metadata: Mapping[str, Any]) -> Any:
    """A node's (or a task's) run under the current one, or None without callbacks."""
    manager = _parent.get()
    if manager is None:
        return None
    manager = manager.copy()
    manager.add_tags(tags, inherit=False)
    manager.add_metadata(dict(metadata), inherit=True)
    return await manager.on_chain_start(None, input, name=name)


async def ended(run: Any, output: Any) -> None:
    """End a node's (or task's) ``run`` with ``output``, first its one chunk to the
    streaming handlers (``on_chain_stream``), as a LangGraph node streams its result."""
    for handler in run.handlers:
        tap = getattr(handler, "tap_output_aiter", None)
        if tap is not None and _streams(handler):
            async for _ in tap(run.run_id, _one(output)):
                pass
    await run.on_chain_end(output)


def shown(fn: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """How node function ``fn``'s run shows its input and output: the ``SHOWN`` pair its
    maker set on it (an entrypoint's node shows the function's own), else as they are."""
    pair = getattr(fn, SHOWN, None)
    return pair if pair is not None else (_same, _same)


SHOWN = "__oncegraph_shown__"
"""The attribute of a node function that holds its run's (input, output) views."""


async def _one(value: Any) -> AsyncIterator[Any]:
    yield value


def enter(run: Any) -> Any:
    """Make ``run`` the parent of the runs started in this context; a token for
    :func:`leave`."""
    return _parent.set(run.get_child())


def leave(token: Any) -> None:
    _reset(token)


def langchain_loaded() -> bool:
    """Is LangChain's core package there to report runs to?"""
    try:
        import langchain_core.tracers.event_stream  # noqa: F401
    except ImportError:
        return False
    return True


def event_stream(
    runnable: Any, input: Any, config: Mapping[str, Any] | None, **kwargs: Any
) -> AsyncIterator[dict[str, Any]]:
    """LangChain's event stream (``astream_events(version="v2")``) of ``runnable``'s
    ``astream``: the events its callbacks report, made by LangChain's own handler."""
    from langchain_core.tracers.event_stream import _astream_events_implementation_v2

    kwargs.pop("version", None)
    given: Any = dict(config or {})
    events: Any = _astream_events_implementation_v2(runnable, input, given, **kwargs)
    return cast("AsyncIterator[dict[str, Any]]", events)


async def _graph_run(
    config: Mapping[str, Any] | None, name: str, input: Any, thread_id: str | None
) -> Any:
    callbacks = config.get("callbacks") if config else None
    if not callbacks or config is None:
        return None
    from langchain_core.callbacks.manager import AsyncCallbackManager

    metadata = {**(config.get("metadata") or {})}
    if thread_id:
        metadata.setdefault("thread_id", thread_id)
    metadata.setdefault("ls_integration", "langgraph")
    manager = AsyncCallbackManager.configure(
        callbacks, inheritable_tags=config.get("tags"), inheritable_metadata=metadata
    )
    return await manager.on_chain_start(
        None, input, name=config.get("run_name") or name, run_id=config.get("run_id")
    )


def _streams(handler: Any) -> bool:
    from langchain_core.tracers._streaming import _StreamingCallbackHandler

    return isinstance(handler, _StreamingCallbackHandler)


def _shown(output: Any) -> Any:
    if isinstance(output, Mapping) and INTERRUPT_KEY in output:
        return {k: v for k, v in output.items() if k != INTERRUPT_KEY}
    return output


def _reset(token: Any) -> None:
    try:
        _parent.reset(token)
    except ValueError:  # left from another context (a stream closed elsewhere)
        pass


def _same(output: Any) -> Any:
    return output


__all__ = [
    "SHOWN",
    "chain_run",
    "ended",
    "enter",
    "event_stream",
    "langchain_loaded",
    "leave",
    "node_run",
    "parent",
    "shown",
    "stream_run",
]
