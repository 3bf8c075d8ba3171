"""``@task``: a function whose every call is a recorded step of the running node.

Calling a task inside an entrypoint (or any graph node) returns a future at once; the
call runs through the effect ledger (:func:`oncegraph.ledger.perform.perform`), so:

* a task that finished is never run again when its node re-runs (a resume after an
  interrupt, a crash or a failure): its result is served from the record;
* a plain task is recorded like a read: it runs with no intent commit first, its
  result is committed as soon as it returns, and a task that did not finish runs again;
* a task that declares a side effect (``@task(effect="write" | "irreversible")``, or a
  task made from an oncegraph ``@tool``) gets every guarantee of a tool call: its intent
  is committed before the call, ``current_effect().idempotency_key`` is the same on
  every attempt, a request that changed on a re-run is a ``RequestMismatchError`` and an
  ``irreversible`` one whose outcome is unknown is reconciled (or parks the run), never
  sent again blindly.

Calls are numbered by position in their node (``<node>:<step>:<n>``; a task called by a
task is numbered inside its caller, ``<caller's command id>/<n>``), so keep the order in
which a node calls its tasks stable, as with ``effect()``.

An ``interrupt()`` inside a task pauses the run; on resume the node re-runs, the tasks
that finished are served from the record and the asking task runs again and gets the
answer. A task that finished after consuming answers keeps their count in its record,
so the next questions of its node line up with their answers.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Literal, ParamSpec, TypeVar, overload

from oncegraph.errors import ConfigError, GraphInterrupt
from oncegraph.func import taskcache
from oncegraph.func.futures import TaskFuture, from_thread, on_loop, track
from oncegraph.graph.caching import checked_policy
from oncegraph.graph.constants import PUSH
from oncegraph.graph.retry import NodeRetry, node_retry
from oncegraph.graph.timeouts import capped, task_timeout
from oncegraph.ledger.keys import next_command_id
from oncegraph.ledger.perform import EffectCall, ToolFailed, perform
from oncegraph.ledger.retry import EffectRetry
from oncegraph.runtime import lcrun
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.runtime.nodecall import running_as
from oncegraph.storage.records import EffectClass

P = ParamSpec("P")
T = TypeVar("T")

#: The key a plain task's record uses when the task consumed interrupt answers.
_ANSWERED = "__oncegraph_task__"

_ONCE = EffectRetry(max_attempts=1)  # a plain task runs once; its own policy retries it


class GeneratorNotSupportedError(ConfigError, NotImplementedError):
    """A generator given to ``@task`` or ``@entrypoint``: each returns one value."""


@dataclass(slots=True)
class _Scope:
    """The task call running in this context: nested calls are numbered inside it."""

    command_id: str
    calls: int = 0


_scope: ContextVar[_Scope | None] = ContextVar("oncegraph_task_scope", default=None)


def current_call() -> str:
    """The command id of the ``@task`` call running here ("" in the node's own code): the
    scope recorded facts are numbered in (:mod:`oncegraph.facts`)."""
    scope = _scope.get()
    return "" if scope is None else scope.command_id


def _nested() -> int:
    """How many tasks the running task call has called so far."""
    scope = _scope.get()
    return scope.calls if scope is not None else 0


class TaskFunction(Generic[P, T]):
    """A function decorated with :func:`task`; calling it returns a future."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[T]] | Callable[P, T],
        *,
        name: str | None,
        retry_policy: Any,
        effect: EffectClass | None,
        timeout: Any,
        recipient: str | None = None,
        reconcile: Callable[..., Any] | None = None,
        probe: Callable[..., Any] | None = None,
        mask: Sequence[str] = (),
        tool: Any = None,
        cache_policy: Any = None,
    ) -> None:
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise GeneratorNotSupportedError(
                f"@task {getattr(fn, '__name__', fn)!r} is a generator; a task returns one "
                "value: collect the items in a list and return it"
            )
        self.func = fn
        self.name = name or _name_of(fn)
        self.retry: NodeRetry | None = node_retry(self.name, retry_policy)
        self.effect = effect
        self.recipient = recipient
        self.reconcile = reconcile
        self.probe = probe
        self.mask = tuple(mask)
        self.tool = tool
        self.cache_policy = checked_policy(f"@task {self.name!r}", cache_policy)
        self._returns: Any = None  # the return annotation's TypeAdapter, False for none
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(type(fn), "__call__", None)  # noqa: B004 - a callable object's method
        )
        self.timeout, self.policy = task_timeout(
            self.name, timeout, self.is_async, plain=effect is None and tool is None
        )
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def _decode(self, value: Any) -> Any:
        """A result served from its record, typed again by the function's return
        annotation (a dataclass or pydantic model comes back as one after a restart)."""
        if self._returns is None:
            self._returns = _return_adapter(self.func)
        if self._returns is False:
            return value
        try:
            return self._returns.validate_python(value)
        except Exception:  # the annotation does not describe the stored value: as stored
            return value

    def clear_cache(self, cache: Any) -> None:
        """Drop this task's results from ``cache`` (the entrypoint's ``cache=``)."""
        cache.clear([taskcache.namespace(self.name)])

    async def aclear_cache(self, cache: Any) -> None:
        await cache.aclear([taskcache.namespace(self.name)])

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> TaskFuture[T]:
        ctx = current_task()
        if ctx is None:
            raise ConfigError(
                f"task {self.name!r} was called outside a running graph: call tasks inside "
                "an @entrypoint function (or a graph node), or call the function itself "
                f"({self.name}.func(...))"
            )
        ran: list[int] = []
        call = self._effect_call(ctx, args, kwargs, ran)
        # the caller's callbacks: the call is a run under its node's
        shown = self._inputs(args, kwargs) if lcrun.parent() is not None else _UNSHOWN
        work = _run_call(ctx, call, self.name, ran, self._decode, shown)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        future: Any
        inner: Any
        if running is ctx.loop:  # an async node: a task of the run's loop
            future, inner = on_loop(ctx.loop, work)
        else:
            future, inner = from_thread(ctx.loop, work)
        track(inner)  # the call itself: it may outlive a cancelled future
        return future  # type: ignore[no-any-return]

    def _inputs(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The call's arguments by parameter name, as its callback run's input."""
        try:
            return dict(inspect.signature(self.func).bind(*args, **kwargs).arguments)
        except (TypeError, ValueError):
            return {"args": list(args), "kwargs": dict(kwargs)}

    # -- the ledger's view of one call -----------------------------------------------------

    def _effect_call(
        self, ctx: TaskContext, args: tuple[Any, ...], kwargs: Mapping[str, Any], ran: list[int]
    ) -> EffectCall:
        scope = _scope.get()
        if scope is None:
            command_id: str = next_command_id(ctx)
        else:
            command_id = f"{scope.command_id}/{scope.calls}"
            scope.calls += 1
        request: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
        call = _Call(ctx, command_id, args, kwargs, ran)
        if self.tool is not None:
            return self._tool_call(call)
        cls = self.effect or EffectClass.READ
        timeout = self.timeout
        if timeout is None and self.effect is not None:
            timeout = ctx.config.tool_timeout
        if self.mask:
            from oncegraph.ledger.helpers import _positions
            from oncegraph.ledger.masks import declare

            request = declare(request, self.mask, _positions(self.func, len(args), self.mask))
        return EffectCall(
            effect_type=self.name,
            effect_class=cls,
            command_id=command_id,
            request=request,
            fn=self._body(call),
            runs="loop" if self.is_async else "thread",
            recipient=self.recipient,
            reconcile=self.reconcile,
            probe=self.probe,
            retry=_ONCE if self.effect is None else None,
            timeout=timeout,
            positional=True,
            args=args,
            kwargs=kwargs,
            mask=self.mask,
        )

    def _tool_call(self, call: _Call) -> EffectCall:
        """A task made from an oncegraph tool: the tool's class, hooks, policy and mask."""
        tool = self.tool
        ctx, args, kwargs = call.ctx, call.args, call.kwargs
        bound = _bind(tool.fn, args, kwargs)
        request: dict[str, Any] = {"tool": tool.name, "args": bound}
        if tool.mask:
            from oncegraph.ledger.masks import declare

            request = declare(request, tool.mask, [])
        recipient = tool.recipient_for(bound)
        return EffectCall(
            effect_type=tool.name,
            effect_class=tool.effect,
            command_id=call.command_id,
            request=request,
            fn=self._body(call),
            runs=tool.runs,
            recipient=recipient,
            reconcile=tool.reconcile,
            probe=tool.probe,
            retry=tool.retry,
            timeout=tool.timeout if tool.timeout is not None else ctx.config.tool_timeout,
            positional=True,
            simulate=tool.simulate,
            args=args,
            kwargs=kwargs,
            mask=tool.mask,
            replay=tool.replay,
        )

    def _body(self, call: _Call) -> Callable[[], Any]:
        """The call the ledger makes: the function under this call's scope (so tasks it
        calls are numbered inside it), retried by the task's own policy, its consumed
        interrupt answers counted into a plain task's record."""
        ctx, args, kwargs = call.ctx, call.args, call.kwargs
        fn = self.func
        retry = self.retry
        plain = self.effect is None and self.tool is None
        name = self.name
        policy = self.policy
        entry = taskcache.entry(ctx, self, args, kwargs) if plain else None

        def counted(value: Any, before: int) -> Any:
            used = ctx.interrupt_count - before
            call.ran.append(used)
            if plain and used > 0:
                return {_ANSWERED: value, "interrupts": used}
            return value

        def attempts() -> Generator[_Step, Any, Any]:
            """The call, once as each of its attempts: it yields what to do (read the
            cache, call the function, store, sleep) and is sent what came of it; the
            async and the sync call below each do those steps in their own way."""
            token = _scope.set(_Scope(call.command_id))
            before = ctx.interrupt_count
            try:
                attempt = 0
                while True:
                    attempt += 1
                    try:
                        if entry is not None:
                            hit = yield _Step("get", entry)
                            if hit is not taskcache.MISS:
                                return counted(self._decode(hit), before)
                        value = yield _Step("call")
                        if entry is not None and taskcache.storable(ctx, before, _nested()):
                            yield _Step("put", (entry, value))
                        return counted(value, before)
                    except Exception as exc:
                        chosen = _again(retry, exc, attempt)
                        if chosen is None:
                            raise
                        yield _Step("sleep", chosen.delay(attempt))
            except GraphInterrupt:
                if plain:
                    raise
                raise _asked_in_effect(name) from None
            finally:
                _scope.reset(token)

        if self.is_async:

            async def step_async(step: _Step) -> Any:
                if step.kind == "get":
                    return await taskcache.aget(ctx, step.arg)
                if step.kind == "call":
                    if policy is not None:
                        call = fn(*args, **kwargs)
                        return await capped(policy, name, call)  # type: ignore[arg-type]
                    return await fn(*args, **kwargs)  # type: ignore[misc]
                if step.kind == "put":
                    return await taskcache.aput(ctx, self, *step.arg)
                return await ctx.config.sleep(step.arg)

            async def run_async() -> Any:
                return await _drive(attempts(), step_async, awaits=True)

            return run_async

        def step_sync(step: _Step) -> Any:
            if step.kind == "get":
                return taskcache.get(ctx, step.arg)
            if step.kind == "call":
                return fn(*args, **kwargs)
            if step.kind == "put":
                return taskcache.put(ctx, self, *step.arg)
            return asyncio.run_coroutine_threadsafe(_pause(ctx, step.arg), ctx.loop).result()

        def run_sync() -> Any:
            return _at_once(_drive(attempts(), step_sync, awaits=False))

        return run_sync


async def _drive(
    flow: Generator[_Step, Any, Any], do: Callable[[_Step], Any], *, awaits: bool
) -> Any:
    """Run a call's attempts: each step ``flow`` yields is done by ``do`` (awaited when
    ``awaits``) and what came of it, a value or the exception, is sent back; the call's
    value is what ``flow`` returns."""
    try:
        step = next(flow)
        while True:
            try:
                done = (await do(step)) if awaits else do(step)
            except BaseException as exc:  # the attempts decide, and reset
                step = flow.throw(exc)
            else:
                step = flow.send(done)
    except StopIteration as stop:
        return stop.value


def _at_once(driving: Coroutine[Any, Any, Any]) -> Any:
    """The value of a coroutine that never suspends (:func:`_drive` with a blocking
    ``do``), run to its end in the calling thread."""
    try:
        driving.send(None)
    except StopIteration as stop:
        return stop.value
    driving.close()
    raise RuntimeError("a blocking task call suspended")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class _Call:
    """One call of a task, as its ledger command is built: the node's context, the
    call's command id and arguments, and ``ran``, which its body fills when it runs in
    this process (with the count of interrupt answers it used)."""

    ctx: TaskContext
    command_id: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    ran: list[int]


@dataclass(frozen=True, slots=True)
class _Step:
    """One thing a task call's attempts ask its runner to do: read the task cache
    (``arg``: the entry), call the function, store a result (``arg``: entry and value)
    or sleep before the next attempt (``arg``: seconds)."""

    kind: Literal["get", "call", "put", "sleep"]
    arg: Any = None


def _asked_in_effect(name: str) -> ConfigError:
    return ConfigError(
        f"task {name!r} declares a side effect and called interrupt(): its intent is already "
        "recorded, so a pause inside it would leave the effect's outcome open. Ask before "
        "the call (in the entrypoint, or in a plain @task) and pass the answer in"
    )


async def _pause(ctx: TaskContext, delay: float) -> None:
    await ctx.config.sleep(delay)


def _name_of(fn: Any) -> str:
    """A task's default name: the function's (a partial's function's, a callable
    object's class)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__name__


def _again(retry: NodeRetry | None, exc: Exception, attempt: int) -> NodeRetry | None:
    """The policy that retries ``exc`` after try ``attempt``; None when none does."""
    chosen = retry.chosen(exc) if retry is not None else None
    return chosen if chosen is not None and attempt < chosen.max_attempts else None


def _bind(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A tool's arguments by name (its request is keyed by parameter, as a model's is)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"tool {getattr(fn, '__name__', fn)!r} called as a task: {exc}") from exc
    return dict(bound.arguments)


def _return_adapter(fn: Any) -> Any:
    """A TypeAdapter of ``fn``'s return annotation, or False when it has none worth it."""
    import typing

    try:
        hint = typing.get_type_hints(fn).get("return", Any)
    except Exception:
        return False
    if hint is Any or hint is None or hint is type(None):
        return False
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(hint)
    except Exception:
        return False


async def _reporting(ctx: TaskContext, name: str, inputs: Any) -> Any:
    """The chain run a task call is reported as, under its node's run (None without
    callbacks): the task's own ``langgraph_*`` metadata, pushed by its node."""
    from oncegraph.runtime.tasks import stream_metadata  # the runtime's, at call time

    meta = stream_metadata(ctx, written=True)
    meta.update(
        langgraph_node=name,
        langgraph_triggers=(PUSH,),
        langgraph_path=(PUSH, meta.get("langgraph_path"), ctx.effect_count, True),
    )
    return await lcrun.node_run(name, inputs, ["seq:step:1"], meta)


_UNSHOWN: Any = object()


async def _run_call(
    ctx: TaskContext,
    call: EffectCall,
    name: str,
    ran: list[int],
    decode: Callable[[Any], Any],
    shown: Any = _UNSHOWN,
) -> Any:
    """Perform ``call`` through the ledger; the task's value (recorded or fresh).
    ``ran`` is filled by the call's body when it ran in this process; ``shown``: the
    call's input as its callback run shows it (none unless callbacks were given)."""
    run = None if shown is _UNSHOWN else await _reporting(ctx, name, shown)
    async with running_as(run):
        try:
            value = (await perform(ctx, call)).result
        except ToolFailed as failed:
            raise failed.error from None
    if isinstance(value, Mapping) and _ANSWERED in value:
        if not ran:  # served from its record: the answers it consumed are used up
            ctx.interrupt_count += int(value["interrupts"])
        value = value[_ANSWERED]
    if not ran:
        value = decode(value)
    if run is not None:
        await lcrun.ended(run, value)
    ctx.emit("updates", {name: value})
    return value


_EFFECTS = {"read": None, "write": EffectClass.WRITE, "irreversible": EffectClass.IRREVERSIBLE}


@overload
def task(fn: Callable[P, Awaitable[T]], /) -> TaskFunction[P, T]: ...
@overload
def task(fn: Callable[P, T], /) -> TaskFunction[P, T]: ...
@overload
def task(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    retry_policy: Any = None,
    cache_policy: Any = None,
    timeout: Any = None,
    effect: str | None = None,
    recipient: str | None = None,
    reconcile: Callable[..., Any] | None = None,
    probe: Callable[..., Any] | None = None,
    mask: Sequence[str] = (),
) -> Callable[[Callable[P, Any]], TaskFunction[P, Any]]: ...


def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    retry_policy: Any = None,
    cache_policy: Any = None,
    timeout: Any = None,
    effect: str | None = None,
    recipient: str | None = None,
    reconcile: Callable[..., Any] | None = None,
    probe: Callable[..., Any] | None = None,
    mask: Sequence[str] = (),
) -> Any:
    """Make ``fn`` a task: ``@task`` or ``@task(name=..., retry_policy=..., effect=...)``.

    ``effect``: ``None`` (a plain task, recorded like a read: it runs again only if it did
    not finish), ``"write"`` (idempotent with its key: an unknown outcome runs again with
    the SAME ``current_effect().idempotency_key``) or ``"irreversible"`` (money,
    messages: an unknown outcome is reconciled with ``reconcile(record)``, or the run is
    parked for review). ``recipient``, ``probe`` and ``mask`` as for ``@tool``.
    ``retry_policy`` retries the function inside one recorded call (LangGraph's
    ``RetryPolicy``). A ``@tool`` passed to ``task`` keeps its own class and hooks.
    ``cache_policy``: a plain task's result is cached by its arguments in the
    entrypoint's ``cache=`` (a call served from the cache is still recorded as the
    task's result; a task with an effect class is never cached, see
    :mod:`oncegraph.func.taskcache`).
    """
    if effect is not None and effect not in _EFFECTS:
        raise ConfigError(f"@task(effect={effect!r}); use None, 'read', 'write' or 'irreversible'")
    cls = _EFFECTS.get(effect) if effect is not None else None

    def make(f: Callable[..., Any]) -> TaskFunction[Any, Any]:
        from oncegraph.tools.tool import Tool

        if isinstance(f, Tool):
            return TaskFunction(
                f.fn,
                name=name or f.name,
                retry_policy=retry_policy,
                effect=f.effect,
                timeout=timeout,
                tool=f,
            )
        if cls is None and (reconcile is not None or probe is not None):
            raise ConfigError(
                f"@task {getattr(f, '__name__', f)!r} has reconcile=/probe= but no effect class; "
                "declare it: @task(effect='irreversible', reconcile=...)"
            )
        return TaskFunction(
            f,
            name=name,
            retry_policy=retry_policy,
            effect=cls,
            recipient=recipient,
            reconcile=reconcile,
            probe=probe,
            timeout=timeout,
            mask=mask,
            cache_policy=cache_policy,
        )

    return make(fn) if fn is not None else make


__all__ = ["GeneratorNotSupportedError", "TaskFunction", "TaskFuture", "task"]
