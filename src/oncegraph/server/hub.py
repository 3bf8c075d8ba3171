"""Runs started over HTTP, and a bounded buffer of each one's events.

A run started by ``POST /api/threads/{id}/runs`` runs as a task of the server's event
loop (it outlives the request). Its stream chunks (``updates``, ``events``, ``custom``)
are kept in a per-run ring of at most ``max_events`` events, numbered 1, 2, 3 ...; a
client reconnects with ``Last-Event-ID: n`` and gets the events after ``n`` (a ``gap``
event first when some of them have fallen out of the ring). At most ``max_runs`` runs'
buffers are kept, the oldest finished ones dropped first; a run with no buffer is
streamed from its checkpoints instead (:mod:`oncegraph.server.sse`).

The run's id is learnt from the run service (the thread's newest run once the run
emitted its first event); a start that fails before that is the request's error.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from oncegraph._cancel import cancel_and_wait
from oncegraph.app import CompiledGraph
from oncegraph.server.encode import jsonable
from oncegraph.server.problems import ApiError, from_exception

STREAM_MODES = ("updates", "events", "custom")


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

    async def follow(self, after: int, keepalive: float = 15.0) -> AsyncIterator[Event | int]:
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


class RunHub:
    """The runs this server started, and their event buffers."""

    def __init__(self, graph: CompiledGraph, *, max_runs: int = 256, max_events: int = 2000):
        self.graph = graph
        self.max_runs = max_runs
        self.max_events = max_events
        self._streams: OrderedDict[str, RunStream] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, run_id: str) -> RunStream | None:
        return self._streams.get(run_id)

    async def start(
        self,
        thread_id: str,
        input: Any,
        config: dict[str, Any],
        graph: CompiledGraph | None = None,
    ) -> RunStream:
        """Start a run on ``thread_id`` with ``graph`` (the app as the caller may use it:
        bound to its tenant; the whole app by default); return once its run id is known.
        A start that fails before the run emits anything raises that error (nothing
        started)."""
        stream = RunStream(thread_id, self.max_events)
        app = graph if graph is not None else self.graph
        task = asyncio.get_running_loop().create_task(self._pump(app, stream, input, config))
        stream.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await stream.identified.wait()
        if stream.run_id is None:
            raise stream.error or ApiError(503, "server_stopped", "the server is stopping")
        return stream

    async def _pump(
        self, app: CompiledGraph, stream: RunStream, input: Any, config: dict[str, Any]
    ) -> None:
        cfg = {**config, "thread_id": stream.thread_id}
        try:
            async for mode, chunk in app.astream(input, cfg, stream_mode=STREAM_MODES):
                if stream.run_id is None:
                    await self._identify(stream)
                stream.add(mode, chunk)
        except asyncio.CancelledError:  # the server stops: the run stays resumable
            stream.add(
                "error",
                {
                    "code": "server_stopped",
                    "message": "the server stopped; the run is resumable with Continue",
                },
            )
            stream.done = True
            stream.identified.set()
            stream.wake()
            raise
        except Exception as exc:
            stream.error = exc
            if stream.run_id is None:
                stream.done = True
                stream.identified.set()  # the start failed: the request reports it
                return
            api = from_exception(exc)
            stream.add(
                "error",
                {
                    "code": api.code if api else "internal_error",
                    "message": api.message if api else f"{type(exc).__name__}: {exc}",
                },
            )
        if stream.run_id is None:  # ended without a single event
            await self._identify(stream)
        run = await self.graph.aget_run(stream.run_id) if stream.run_id else None
        stream.add(
            "end",
            {"run_id": stream.run_id, "status": str(run.status) if run else None},
        )
        stream.done = True
        stream.wake()

    async def _identify(self, stream: RunStream) -> None:
        runs = await self.graph.aruns(thread_id=stream.thread_id, limit=1)
        if runs:
            stream.run_id = runs[0].run_id
            self._keep(stream)
        stream.identified.set()

    def _keep(self, stream: RunStream) -> None:
        assert stream.run_id is not None
        self._streams[stream.run_id] = stream
        self._streams.move_to_end(stream.run_id)
        while len(self._streams) > self.max_runs:
            oldest = next((k for k, s in self._streams.items() if s.done), None)
            if oldest is None:
                break
            del self._streams[oldest]

    async def aclose(self) -> None:
        """Cancel runs still going (their runs stay resumable, law 1)."""
        await asyncio.gather(*(cancel_and_wait(task) for task in list(self._tasks)))


__all__ = ["Event", "RunHub", "RunStream"]
