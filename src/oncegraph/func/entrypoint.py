"""``@entrypoint``: a function that runs as a one-node graph on the one engine.

The function becomes the single node of a :class:`~oncegraph.graph.StateGraph` whose
state holds three fields: the run's ``input``, the function's return value
(``output``) and what it saves for the next call on the thread (``previous``:
the return value, or ``entrypoint.final(value=..., save=...)``'s ``save``). Every run
path, checkpointer, interrupt, crash recovery and operator command is the graph's; the
object this decorator returns only translates between LangGraph's functional shapes
(a bare input and return value, ``{task name: result}`` updates) and the graph's.

Inside the function, each ``@task`` call is a recorded step (:mod:`oncegraph.func.tasks`),
so a resume re-runs the function from the top and every task that finished is served
from its record.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypedDict, TypeVar

from oncegraph._blocking import _dressed
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.func.futures import asettle, open_calls, settle
from oncegraph.func.tasks import GeneratorNotSupportedError
from oncegraph.graph import END, START, StateGraph
from oncegraph.graph.timeouts import entry_timeout, split
from oncegraph.hitl.command import Command
from oncegraph.runtime import lcrun
from oncegraph.runtime.context import current_task
from oncegraph.runtime.portal import iterate_sync, run_sync

if TYPE_CHECKING:
    from oncegraph.cache.base import BaseCache, CachePolicy
    from oncegraph.graph.retry import RetryPolicy
    from oncegraph.graph.timeouts import TimeoutPolicy
    from oncegraph.storage.protocols import Checkpointer

R = TypeVar("R")
S = TypeVar("S")
P = ParamSpec("P")
_E = TypeVar("_E", bound="Entrypoint")

INTERRUPT = "__interrupt__"

_INJECTED = ("previous", "config", "writer", "store", "runtime")


class _State(TypedDict, total=False):
    input: Any
    output: Any
    previous: Any


def _input(value: Any) -> Any:
    """What the graph is invoked with for the caller's ``value``."""
    if value is None or isinstance(value, Command):
        return value
    return {"input": _plain(value)}


def _output(result: Mapping[str, Any], cls: Any) -> Any:
    """The caller's answer from the graph's final values (typed back to ``cls``)."""
    if INTERRUPT in result:
        return {INTERRUPT: result[INTERRUPT]}
    return _back(result.get("output"), cls)


def _with_values(snap: Any, values: Any) -> Any:
    replace = getattr(snap, "_replace", None)
    if callable(replace):
        return replace(values=values)
    return dataclasses.replace(snap, values=values)


def _sync_stream(
    method: Callable[Concatenate[_E, P], AsyncIterator[Any]],
) -> Callable[Concatenate[_E, P], Iterator[Any]]:
    """``stream`` from ``astream``: the same signature and docstring, walked through the
    portal, or on the running node's loop when called inside a node."""

    def stream(self: _E, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[Any]:
        events = getattr(self, method.__name__)(*args, **kwargs)
        task = current_task()
        if task is not None:  # inside a running node: streamed on that node's loop
            from oncegraph.runtime.subgraph import stream_inside

            return stream_inside(task, events)
        return iterate_sync(events, "stream")

    return _dressed(stream, method)


class Entrypoint:
    """The runnable an ``@entrypoint`` function becomes: ``invoke`` / ``ainvoke`` /
    ``stream`` / ``astream`` / ``get_state`` / ``get_state_history`` in LangGraph's
    functional shapes; everything else (``runs``, ``effects``, ``resume``,
    ``resolve_effect``, ``replay``, ...) is the compiled graph's."""

    def __init__(self, graph: CompiledGraph, name: str, fn: Callable[..., Any]) -> None:
        self.graph = graph
        self.name = name
        self.context_schema: Any = None
        self._types = _io_types(fn)
        self._out = _typed(self._types[1])

    def __getattr__(self, name: str) -> Any:
        if name == "graph":
            raise AttributeError(name)
        return getattr(self.graph, name)

    def __repr__(self) -> str:
        return f"<entrypoint {self.name}>"

    def get_name(self) -> str:
        return self.name

    def astream_events(
        self, input: Any, config: Mapping[str, Any] | None = None, **kw: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """LangChain's event stream of the entrypoint's run (over this entrypoint's own
        ``astream``, so the input is the function's, not a state dict): the run's, its
        node's and each ``@task`` call's start, stream and end events, as LangChain's
        callbacks see them (:mod:`oncegraph.runtime.lcrun`). Without LangChain
        installed, the run's own events only, as the compiled graph's."""
        if lcrun.langchain_loaded():
            return lcrun.event_stream(self, input, config, **kw)
        from oncegraph.app_methods import LangGraphMethods

        events: AsyncIterator[dict[str, Any]] = LangGraphMethods.astream_events(
            self,  # type: ignore[arg-type]
            input,
            config,
            **kw,
        )
        return events

    # -- run paths ---------------------------------------------------------------------

    async def ainvoke(self, input: Any, config: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        kw.pop("stream_mode", None)
        answer = _Answer()
        token = _answer.set(answer)
        try:
            result = await self.graph.ainvoke(_input(input), config, **kw)
        finally:
            _answer.reset(token)
        if answer.set and INTERRUPT not in result:
            return answer.value
        return _output(result, self._out)

    def invoke(self, input: Any, config: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        if current_task() is not None:  # inside a running node: the graph's nested path
            kw.pop("stream_mode", None)
            return _output(self.graph.invoke(_input(input), config, **kw), self._out)
        return run_sync(self.ainvoke(input, config, **kw), "invoke")

    async def astream(
        self,
        /,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "updates",
        subgraphs: bool = False,
        **kw: Any,
    ) -> AsyncIterator[Any]:
        single = isinstance(stream_mode, str)
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        asked = list(dict.fromkeys([*modes, "updates"]))
        answer = _Answer()
        token = _answer.set(answer)  # seen by the run, started at the first item
        items = self.graph.astream(
            _input(input), config, stream_mode=asked, subgraphs=subgraphs, **kw
        )
        try:
            async for item in self._shaped(items, answer, modes, single, subgraphs):
                yield item
        finally:
            try:
                _answer.reset(token)
            except ValueError:  # iterated from another context: nothing of ours to undo
                pass

    async def _shaped(
        self,
        items: AsyncIterator[Any],
        answer: _Answer,
        modes: list[str],
        single: bool,
        subgraphs: bool,
    ) -> AsyncIterator[Any]:
        ran = False  # values chunks before the function's node ran are the input's
        async for item in items:
            ns: tuple[str, ...] = ()
            if subgraphs:
                ns, mode, payload = item
            else:
                mode, payload = item
            if mode == "updates" and not ns and isinstance(payload, Mapping):
                if self.name in payload:
                    ran = True
                    node = payload[self.name]
                    out = node.get("output") if isinstance(node, Mapping) else node
                    payload = {self.name: answer.value if answer.set else _back(out, self._out)}
            elif mode == "values" and not ns:
                # a question's values chunk is made from its updates chunk below
                if not ran or not isinstance(payload, Mapping) or INTERRUPT in payload:
                    continue
                out = payload.get("output")
                payload = answer.value if answer.set else _back(out, self._out)
            if mode == "updates" and not ns and "values" in modes and INTERRUPT in payload:
                # the answer is one value, so a question is a values chunk of its own
                yield _chunk(single, subgraphs, ns, "values", {INTERRUPT: payload[INTERRUPT]})
            if mode in modes:
                yield _chunk(single, subgraphs, ns, mode, payload)

    stream = _sync_stream(astream)

    async def areplay(self, run_id: str, **kw: Any) -> Any:
        """The graph's ``replay`` (a NEW run with lineage, in ``evidence``, ``simulation``
        or ``live`` mode), answered in the workflow's shape."""
        return _output((await self.graph.areplay(run_id, **kw)).result, self._out)

    def replay(self, run_id: str, **kw: Any) -> Any:
        return run_sync(self.areplay(run_id, **kw), "replay")

    # -- schemas and edits ---------------------------------------------------------------

    def get_input_jsonschema(self, config: Any = None) -> dict[str, Any]:
        """The JSON schema of the input (the function's first parameter's annotation)."""
        return _jsonschema(self._types[0], "LangGraphInput")

    def get_context_jsonschema(self) -> dict[str, Any] | None:
        """The JSON schema of ``context_schema``, or None without one."""
        if self.context_schema is None:
            return None
        return _jsonschema(self.context_schema, "Context")

    def get_output_jsonschema(self, config: Any = None) -> dict[str, Any]:
        """The JSON schema of the answer (the return annotation, ``final``'s value type)."""
        return _jsonschema(self._types[1], "LangGraphOutput")

    async def aupdate_state(
        self, config: Mapping[str, Any], values: Any, as_node: str | None = None
    ) -> dict[str, Any]:
        """Set what the next run on the thread gets as ``previous`` (the graph's
        ``update_state``, with its rules)."""
        return await self.graph.aupdate_state(config, {"previous": values}, as_node or self.name)

    def update_state(
        self, config: Mapping[str, Any], values: Any, as_node: str | None = None
    ) -> dict[str, Any]:
        return run_sync(self.aupdate_state(config, values, as_node), "update_state")

    # -- reading -----------------------------------------------------------------------

    async def aget_state(self, config: Mapping[str, Any], **kw: Any) -> Any:
        snap = await self.graph.aget_state(config, **kw)
        return _with_values(snap, _back(_snapshot_values(snap.values), self._out))

    def get_state(self, config: Mapping[str, Any], **kw: Any) -> Any:
        return run_sync(self.aget_state(config, **kw), "get_state")

    async def aget_state_history(self, config: Mapping[str, Any], **kw: Any) -> AsyncIterator[Any]:
        async for snap in self.graph.aget_state_history(config, **kw):
            yield _with_values(snap, _back(_snapshot_values(snap.values), self._out))

    def get_state_history(self, config: Mapping[str, Any], **kw: Any) -> Iterator[Any]:
        return iterate_sync(self.aget_state_history(config, **kw), "get_state_history")


def _chunk(single: bool, subgraphs: bool, ns: tuple[str, ...], mode: str, payload: Any) -> Any:
    """A stream item in LangGraph's shape for the modes and ``subgraphs`` asked."""
    if subgraphs:
        return (ns, payload) if single else (ns, mode, payload)
    return payload if single else (mode, payload)


def _io_types(fn: Callable[..., Any]) -> tuple[Any, Any]:
    """The input and output annotations of an entrypoint function (``Any`` if none)."""
    from typing import get_args, get_origin, get_type_hints

    try:
        hints = get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: schemas say nothing
        hints = {}
    params = list(inspect.signature(fn).parameters)
    given = hints.get(params[0], Any) if params else Any
    out = hints.get("return", Any)
    if out is entrypoint.final:
        out = Any
    elif get_origin(out) is entrypoint.final:
        args = get_args(out)
        out = args[0] if args else Any
    return given, out


def _jsonschema(annotation: Any, title: str) -> dict[str, Any]:
    from pydantic import TypeAdapter

    schema: dict[str, Any] = dict(TypeAdapter(annotation).json_schema())
    schema.setdefault("title", title)
    return schema


def _snapshot_values(values: Any) -> Any:
    if isinstance(values, Mapping) and "output" in values:
        return values["output"]
    return {}


class entrypoint:  # LangGraph's name
    """``@entrypoint(checkpointer=..., store=...)``: make a function a runnable workflow.

    The function takes ONE input (use a dict for several values) and may ask, by
    keyword, for ``previous`` (what the last run on this thread saved), ``config``,
    ``writer`` (streams ``custom`` chunks), ``store`` and ``runtime``. It may be sync or
    async; it calls ``@task`` functions, ``interrupt()``, and returns the run's answer,
    or ``entrypoint.final(value=answer, save=for_next_time)``.
    """

    @dataclass(frozen=True)
    class final(Generic[R, S]):  # LangGraph's name
        """Return ``value`` to the caller and save ``save`` as the next run's ``previous``."""

        value: R
        save: S

    def __init__(
        self,
        checkpointer: Checkpointer | None = None,
        store: Any = None,
        cache: BaseCache | None = None,
        context_schema: type[Any] | None = None,
        cache_policy: CachePolicy | None = None,
        retry_policy: RetryPolicy | Sequence[RetryPolicy] | None = None,
        timeout: float | TimeoutPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        self.checkpointer = checkpointer
        self.store = store
        self.cache = cache
        self.context_schema = context_schema
        self.retry_policy = retry_policy if retry_policy is not None else kwargs.get("retry")
        split("entrypoint", timeout)  # a bad timeout is refused here, not at the first run
        self.timeout = timeout

    def __call__(self, fn: Callable[..., Any]) -> Entrypoint:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise GeneratorNotSupportedError(
                f"@entrypoint {getattr(fn, '__name__', fn)!r} is a generator; an entrypoint "
                "returns one value: stream chunks with the `writer` parameter instead"
            )
        params = inspect.signature(fn).parameters
        if not params:
            raise ConfigError(
                f"@entrypoint {fn.__name__!r} takes no parameter; it must take its input as "
                "its first parameter (use a dict for several values)"
            )
        name = fn.__name__
        entry_timeout(name, self.timeout, inspect.iscoroutinefunction(fn))
        node = _node(fn, tuple(p for p in _INJECTED if p in params), self.store)
        builder: StateGraph = StateGraph(_State)
        builder.add_node(name, node, retry_policy=self.retry_policy, timeout=self.timeout)
        builder.add_edge(START, name)
        builder.add_edge(name, END)
        graph = builder.compile(
            checkpointer=self.checkpointer, store=self.store, cache=self.cache, name=name
        )
        graph.run_label = "LangGraph"  # LangGraph's unnamed graph, as callbacks see it
        graph.run_shown = _shown_output  # and the function's return value, its output
        flow = Entrypoint(graph, name, fn)
        flow.context_schema = self.context_schema
        return flow


def _typed(annotation: Any) -> Any:
    """The class a stored value is typed back to: a dataclass or pydantic model class
    annotation, else None (the value comes back as stored)."""
    if isinstance(annotation, type) and (
        dataclasses.is_dataclass(annotation) or hasattr(annotation, "model_fields")
    ):
        return annotation
    return None


def _plain(value: Any) -> Any:
    """``value`` as the state stores it: a dataclass or pydantic model as its JSON form
    (typed back by the annotation when read), anything else as given."""
    if hasattr(type(value), "model_fields") or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        from pydantic_core import to_jsonable_python

        return to_jsonable_python(value)
    return value


def _back(value: Any, cls: Any) -> Any:
    """A stored value typed back to ``cls`` (see :func:`_typed`) when it fits."""
    if cls is None or isinstance(value, cls) or not isinstance(value, Mapping):
        return value
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(cls).validate_python(value)
    except Exception:  # it is not one (a function may return other than it declares)
        return value


@dataclass(slots=True)
class _Answer:
    """What the function returned in this process (the caller gets it as it was)."""

    value: Any = None
    set: bool = False


_answer: ContextVar[_Answer | None] = ContextVar("oncegraph_entrypoint_answer", default=None)


def _save_type(fn: Callable[..., Any]) -> Any:
    from typing import get_args, get_origin, get_type_hints

    try:
        out = get_type_hints(fn).get("return", Any)
    except Exception:
        return Any
    if get_origin(out) is entrypoint.final:
        args = get_args(out)
        return args[1] if len(args) == 2 else Any
    return Any if out is entrypoint.final else out


def _split(value: Any) -> dict[str, Any]:
    out, save = (value.value, value.save) if isinstance(value, entrypoint.final) else (value, value)
    answer = _answer.get()
    if answer is not None:
        answer.value, answer.set = out, True
    return {"output": _plain(out), "previous": _plain(save)}


def _node(fn: Callable[..., Any], wanted: tuple[str, ...], store: Any) -> Callable[..., Any]:
    """The graph node that calls ``fn`` with its input and the parameters it asks for."""
    given, _ = _io_types(fn)
    given, saved = _typed(given), _typed(_save_type(fn))

    def extras(state: Mapping[str, Any], config: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in wanted:
            if name == "previous":
                out[name] = _back(state.get("previous"), saved)
            elif name == "config":
                out[name] = config
            elif name == "writer":
                from oncegraph.config import get_stream_writer

                out[name] = get_stream_writer()
            elif name == "store":
                out[name] = store
            elif name == "runtime":
                out[name] = _runtime(config, store)
        return out

    if inspect.iscoroutinefunction(fn):

        async def run_async(state: Mapping[str, Any], config: Any) -> dict[str, Any]:
            token = open_calls()
            try:
                given_value = _back(state.get("input"), given)
                return _split(await fn(given_value, **extras(state, config)))
            finally:
                await asettle(token)

        setattr(run_async, lcrun.SHOWN, _SHOWN)
        return run_async

    def run(state: Mapping[str, Any], config: Any) -> dict[str, Any]:
        token = open_calls()
        try:
            return _split(fn(_back(state.get("input"), given), **extras(state, config)))
        finally:
            settle(token)

    setattr(run, lcrun.SHOWN, _SHOWN)
    return run


def _shown_output(update: Any) -> Any:
    return update.get("output") if isinstance(update, Mapping) else update


def _shown_input(state: Any) -> Any:
    return state.get("input") if isinstance(state, Mapping) else state


# what callbacks see of the node's run: the function's own input and return value
_SHOWN = (_shown_input, _shown_output)


def _runtime(config: Any, store: Any) -> Any:
    """LangGraph's ``Runtime`` where oncegraph has one; else a small stand-in."""
    from types import SimpleNamespace

    from oncegraph.config import get_stream_writer

    context = None
    if isinstance(config, Mapping):
        context = config.get("configurable", {}).get("__context__")
    return SimpleNamespace(context=context, store=store, stream_writer=get_stream_writer())


__all__ = ["Entrypoint", "entrypoint"]
