"""``Runtime``: what a running node is given besides its state, in LangGraph's shape.

A node that declares ``runtime: Runtime[Ctx]`` (or calls :func:`get_runtime`) gets the
run's ``context`` (``invoke(..., context=Ctx(...))``, coerced to the graph's
``context_schema``), a ``stream_writer`` for ``stream_mode="custom"`` and
``execution_info`` (thread, run, checkpoint, task and attempt), ``store`` (the app's
``compile(store=...)``, else ``None``), ``server_info``, ``control`` (the caller's
``RunControl``) and ``heartbeat()`` (progress, for an idle timeout).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from oncegraph.errors import ConfigError
from oncegraph.runtime import stepevents
from oncegraph.runtime.context import current_task
from oncegraph.runtime.control import RunControl, ServerInfo, server_info_of

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext

ContextT = TypeVar("ContextT")


def _no_op(*_: Any) -> None:
    """The stream writer and heartbeat of a runtime given none: they do nothing."""


@dataclass(frozen=True, slots=True)
class ExecutionInfo:
    """Where the node runs: checkpoint, namespace, task, thread, run, attempt."""

    checkpoint_id: str
    checkpoint_ns: str
    task_id: str
    thread_id: str | None = None
    run_id: str | None = None
    node_attempt: int = 1
    node_first_attempt_time: float | None = None

    def patch(self, **overrides: Any) -> ExecutionInfo:
        return replace(self, **overrides)


@dataclass(frozen=True, slots=True)
class Runtime(Generic[ContextT]):
    """The run's context, a stream writer and where the node runs (see the module)."""

    context: ContextT = field(default=None)  # type: ignore[assignment]
    store: Any = None
    stream_writer: Callable[[Any], None] = field(default=_no_op)
    heartbeat: Callable[[], None] = field(default=_no_op)
    previous: Any = None
    execution_info: ExecutionInfo | None = None
    server_info: ServerInfo | None = None
    control: RunControl | None = None

    def merge(self, other: Runtime[ContextT]) -> Runtime[ContextT]:
        """``other``'s values where it has them, else this runtime's."""
        return Runtime(
            context=other.context or self.context,
            store=other.store or self.store,
            stream_writer=(
                other.stream_writer if other.stream_writer is not _no_op else self.stream_writer
            ),
            heartbeat=other.heartbeat if other.heartbeat is not _no_op else self.heartbeat,
            previous=self.previous if other.previous is None else other.previous,
            execution_info=other.execution_info or self.execution_info,
            server_info=other.server_info or self.server_info,
            control=other.control or self.control,
        )

    @property
    def drain_requested(self) -> bool:
        return self.control.drain_requested if self.control is not None else False

    @property
    def drain_reason(self) -> str | None:
        return self.control.drain_reason if self.control is not None else None

    def override(self, **overrides: Any) -> Runtime[ContextT]:
        return replace(self, **overrides)

    def patch_execution_info(self, **overrides: Any) -> Runtime[ContextT]:
        if self.execution_info is None:
            raise ConfigError("this runtime has no execution_info to patch yet")
        return replace(self, execution_info=self.execution_info.patch(**overrides))


DEFAULT_RUNTIME: Runtime[Any] = Runtime()


def runtime_of(ctx: TaskContext, attempt: int = 1) -> Runtime[Any]:
    """The runtime of task ``ctx``."""
    emit = ctx.emit

    def writer(chunk: Any) -> None:
        emit("custom", chunk)

    task_id = stepevents.task_id(ctx.checkpoint_id, ctx.task_key)
    info = ExecutionInfo(
        checkpoint_id=ctx.checkpoint_id,
        # LangGraph's task namespace: the subgraph path, then ``<node>:<task id>``
        checkpoint_ns="|".join((*ctx.ns, f"{ctx.node_name}:{task_id}")),
        task_id=task_id,
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        node_attempt=attempt,
        node_first_attempt_time=ctx.first_attempt_at,
    )
    config = ctx.config
    return Runtime(
        context=config.context,
        store=config.store,
        stream_writer=writer,
        heartbeat=_heartbeat_of(ctx),
        execution_info=info,
        server_info=server_info_of(config.configurable),
        control=config.control,
    )


def _heartbeat_of(ctx: TaskContext) -> Callable[[], None]:
    """``runtime.heartbeat``: tells an idle timeout the node is alive (read when called,
    so a runtime made before the attempt's watch started still reaches it)."""

    def heartbeat() -> None:
        beat = ctx.heartbeat
        if beat is not None:
            beat()

    return heartbeat


def get_runtime(context_schema: type[ContextT] | None = None) -> Runtime[ContextT]:
    """The running node's :class:`Runtime` (``context_schema`` only types the result)."""
    ctx = current_task()
    if ctx is None:
        raise ConfigError("get_runtime() can only be called inside a running graph node")
    return runtime_of(ctx, ctx.attempt)


def coerce_context(schema: Any, context: Any) -> Any:
    """``context`` as an instance of the graph's ``context_schema`` when given a dict
    for a dataclass or pydantic schema (as LangGraph coerces it)."""
    if schema is None or context is None or not isinstance(context, dict):
        return context
    if dataclasses.is_dataclass(schema) and isinstance(schema, type):
        return schema(**context)
    validate = getattr(schema, "model_validate", None)
    if callable(validate):
        return validate(context)
    return context


# RunControl and ServerInfo (the types of two fields) are exported by oncegraph.runtime
__all__ = ["DEFAULT_RUNTIME", "ExecutionInfo", "Runtime", "get_runtime"]
