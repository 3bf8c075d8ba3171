"""Runs started (or taken over) over HTTP, and a bounded buffer of each one's events.

A run started by ``POST /api/threads/{id}/runs`` runs as a task of the server's event
loop (it outlives the request). Its stream chunks (``updates``, ``events``, ``custom``)
are kept in a per-run ring of at most ``max_events`` events, numbered 1, 2, 3 ...; a
client reconnects with ``Last-Event-ID: n`` and gets the events after ``n`` (a ``gap``
event first when some of them have fallen out of the ring). At most ``max_runs`` runs'
buffers are kept, the oldest finished ones dropped first; a run with no buffer is
streamed from its checkpoints instead (:mod:`oncegraph.server.sse`).

Every run is started for its caller (:class:`~oncegraph.runs.launch.Launch`: the run
carries the actor, its start is audited, a continue is the audited Continue). The run
service's ``start`` returns the run's id once the run is held and goes on, before its
first step (a new run's id may be chosen before, bound to the request's idempotency
key). A start refused before that is the request's error; an error after it is the
stream's ``error`` event.

:meth:`RunHub.resume` goes on with a run a dead process left ``running`` (the recovery
pass, :mod:`oncegraph.server.recovery`, or a retried request): through the audited
Continue, which takes the run's liveness lock first, so a run a live process holds is
refused at once (``RunBusyError``) and nothing is done. Such a stream numbers its
events from a base above any id an earlier process gave (its milliseconds since the
epoch, times 1000), so a client that reconnects with an id from before the crash gets
a ``gap`` and every event since, never a skipped one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from oncegraph import errors
from oncegraph._cancel import cancel_and_wait
from oncegraph.app import CompiledGraph
from oncegraph.runs.launch import Launch
from oncegraph.runs.service import RunHandle
from oncegraph.server.encode import jsonable
from oncegraph.server.problems import ApiError, from_exception
from oncegraph.storage.records import RunRecord, RunStatus

STREAM_MODES = ("updates", "events", "custom")
# A run that ran and stopped on one of these is an outcome to show, not a refused command.
RUN_OUTCOMES = (
    errors.NeedsReviewError,
    errors.NodeError,
    errors.EffectError,
    errors.ToolTimeoutError,
    errors.AgentError,
)
KEEPALIVE = 15.0  # seconds of silence before a stream sends a comment line


@dataclass(slots=True)
class Event:
    id: int
    event: str
    data: Any  # JSON, not yet masked


@dataclass(slots=True)
class RunStream:
    thread_id: str
    max_events: int
    run_id: str | None = None
    events: deque[Event] = field(default_factory=deque)
    last_id: int = 0
    done: bool = False
    error: BaseException | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    identified: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def add(self, event: str, data: Any) -> None:
        self.last_id += 1
        self.events.append(Event(self.last_id, event, jsonable(data)))
        while len(self.events) > self.max_events:
            self.events.popleft()
        self.wake()

    def wake(self) -> None:
        """Wake every follower: set this generation's event and start a new one (a
        follower waits on the event it saw before reading, so it never misses one)."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def first_id(self) -> int:
        return self.events[0].id if self.events else self.last_id + 1

    async def follow(
        self, after: int, keepalive: float = KEEPALIVE
    ) -> AsyncIterator[Event | int]:
        """Events after id ``after``, live until the run ends. An ``int`` is no event:
        a positive one first if events after ``after`` were dropped (it is the first id
        still kept), ``-1`` when nothing happened for ``keepalive`` seconds."""
        if self.events and after + 1 < self.first_id():
            yield self.first_id()
        while True:
            changed = self.changed
            for e in list(self.events):
                if e.id > after:
                    after = e.id
                    yield e
            if self.done and after >= self.last_id:
                return
            try:
                await asyncio.wait_for(changed.wait(), timeout=keepalive)
            except TimeoutError:
                yield -1


def stopped(run: RunRecord) -> RunStream:
    """A stream of a run that is not going on here: its ``end`` only."""
    stream = RunStream(run.thread_id, 1, run_id=run.run_id)
    stream.add("end", {"run_id": run.run_id, "status": str(run.status)})
    stream.done = True
    stream.identified.set()
    return stream


def _resumed_base() -> int:
    return time.time_ns() // 1_000_000 * 1000


class RunHub:
    """The runs this server started or took over, and their event buffers."""

    def __init__(
        self,
        graph: CompiledGraph,
        *,
        max_runs: int = 256,
        max_events: int = 2000,
        keepalive: float = KEEPALIVE,
    ):
        self.graph = graph
        self.max_runs = max_runs
        self.max_events = max_events
        self.keepalive = keepalive
        self._streams: OrderedDict[str, RunStream] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, run_id: str) -> RunStream | None:
        return self._streams.get(run_id)

    def going(self, run_id: str) -> RunStream | None:
        """The stream of ``run_id`` if this server is executing it now."""
        found = self._streams.get(run_id)
        return found if found is not None and not found.done else None

    async def start(
        self,
        thread_id: str,
        input: Any,
        config: dict[str, Any],
        graph: CompiledGraph | None = None,
        *,
        launch: Launch,
    ) -> RunStream:
        """Start a run on ``thread_id`` (``input`` None: continue its latest) for
        ``launch``'s actor with ``graph`` (the app as the caller may use it: bound to its
        tenant; the whole app by default); return once its run id is known. A start
        that fails before the run emits anything raises that error (nothing started)."""
        stream = RunStream(thread_id, self.max_events, run_id=launch.run_id)
        if launch.run_id is not None:
            self._keep(stream)
        return await self._launch(stream, graph, input, config, launch)

    async def resume(
        self, run: RunRecord, graph: CompiledGraph | None = None, *, launch: Launch
    ) -> RunStream:
        """Go on with ``run`` (left ``running``: its process died) through the audited
        Continue for ``launch``'s actor; the stream of it if this server runs it already.
        ``RunBusyError`` if a live process holds it (nothing done)."""
        going = self.going(run.run_id)
        if going is not None:
            return going
        stream = RunStream(run.thread_id, self.max_events, run_id=run.run_id)
        stream.last_id = _resumed_base()
        self._keep(stream)
        return await self._launch(stream, graph, None, {"run_id": run.run_id}, launch)

    async def _launch(
        self,
        stream: RunStream,
        graph: CompiledGraph | None,
        input: Any,
        config: dict[str, Any],
        launch: Launch,
    ) -> RunStream:
        app = graph if graph is not None else self.graph
        cfg = {**config, "thread_id": stream.thread_id}
        try:
            handle = await app.astart(
                input,
                cfg,
                stream_mode=STREAM_MODES,
                launch=launch,
                put=lambda item: stream.add(*item),
            )
        except BaseException as exc:  # refused before it went on: nothing started
            self._drop(stream)
            if isinstance(exc, asyncio.CancelledError):
                raise ApiError(503, "server_stopped", "the server is stopping") from None
            raise
        stream.run_id = handle.run_id  # known before the run's first step
        self._keep(stream)
        task = asyncio.get_running_loop().create_task(self._pump(stream, handle))
        stream.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        stream.identified.set()
        return stream

    async def _pump(self, stream: RunStream, handle: RunHandle) -> None:
        """Wait for the run's end; its error (if any) and its ``end`` go to the stream."""
        try:
            await asyncio.shield(handle.task)
        except asyncio.CancelledError:  # the server stops: the run stays resumable
            await cancel_and_wait(handle.task)
            stream.add(
                "error",
                {
                    "code": "server_stopped",
                    "message": "the server stopped; the run is resumable with Continue",
                },
            )
            stream.done = True
            stream.wake()
            raise
        except Exception as exc:
            stream.error = exc
            api = from_exception(exc)
            stream.add(
                "error",
                {
                    "code": api.code if api else "internal_error",
                    "message": api.message if api else f"{type(exc).__name__}: {exc}",
                },
            )
        run = await self.graph.aget_run(handle.run_id)
        stream.add("end", {"run_id": handle.run_id, "status": str(run.status)})
        stream.done = True
        stream.wake()

    def _keep(self, stream: RunStream) -> None:
        assert stream.run_id is not None
        self._streams[stream.run_id] = stream
        self._streams.move_to_end(stream.run_id)
        while len(self._streams) > self.max_runs:
            oldest = next((k for k, s in self._streams.items() if s.done), None)
            if oldest is None:
                break
            del self._streams[oldest]

    def _drop(self, stream: RunStream) -> None:
        if stream.run_id is not None and self._streams.get(stream.run_id) is stream:
            del self._streams[stream.run_id]

    def running(self) -> set[str]:
        """The run ids this server is executing now."""
        return {run_id for run_id, s in self._streams.items() if not s.done}

    async def aclose(self) -> None:
        """Cancel runs still going (their runs stay resumable, guarantee 1)."""
        await asyncio.gather(*(cancel_and_wait(task) for task in list(self._tasks)))


def finished(run: RunRecord) -> bool:
    """Has ``run`` stopped (nothing runs it until someone acts)?"""
    return run.status not in (RunStatus.RUNNING, RunStatus.QUEUED)


__all__ = ["KEEPALIVE", "RUN_OUTCOMES", "Event", "RunHub", "RunStream", "finished", "stopped"]
