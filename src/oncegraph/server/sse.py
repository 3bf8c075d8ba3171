"""Server-Sent Events: a run's events, resumable with ``Last-Event-ID``.

Two sources, one wire format (``id``, ``event``, ``data`` as JSON):

* a run this server started has a buffer (:mod:`oncegraph.server.hub`): events are
  numbered ``1, 2, 3 ...``; ``Last-Event-ID: n`` resumes after ``n``;
* any other run (started by a worker, or before a restart) is streamed from its
  checkpoints, re-derived from the run service: one ``checkpoint`` event per checkpoint,
  id ``cp.<n>`` (its position in the run, oldest first), then ``end`` once the run stopped
  (an unfinished run is polled for new checkpoints). ``Last-Event-ID: cp.<n>`` resumes
  after checkpoint ``n``.

Either stream sends a comment line (``: keep-alive``) after ``keepalive`` seconds
without an event (``create_app(keepalive=...)``, 15 s by default) and ends when its run
stops: completed, failed, interrupted, parked, paused or abandoned. A client never
waits on a silent connection.

Every event's data is masked for the caller (:class:`~oncegraph.server.encode.Shown`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import StreamingResponse

from oncegraph.app import CompiledGraph
from oncegraph.server.encode import Shown
from oncegraph.server.hub import KEEPALIVE, RunStream
from oncegraph.server.problems import bad_request
from oncegraph.storage.records import RunRecord, RunStatus

MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_MOVING = (RunStatus.RUNNING, RunStatus.QUEUED)
KEEPALIVE_LINE = b": keep-alive\n\n"
# Events after which a live stream's masker reads the thread's effects again: a step's
# update may show what a tool it ran was given (learned by value before it is shown).
LEARNING = frozenset({"updates", "custom", "error"})


def frame(event: str, data: Any, id: str | None = None) -> bytes:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    lines.append(f"event: {event}")
    lines.append("data: " + orjson.dumps(data).decode())
    return ("\n".join(lines) + "\n\n").encode()


def buffered_after(last_event_id: str | None) -> int:
    """The event number a buffered stream resumes after (0: from the start)."""
    if not last_event_id:
        return 0
    text = last_event_id.strip()
    if text.startswith("cp."):
        return 0  # a checkpoint id from a re-derived stream: start over from the buffer
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise bad_request(
            f"Last-Event-ID {last_event_id!r} is not an event id this server gave; send "
            "the id of the last event you received, or none to start over"
        )
    return int(text)


def checkpoint_after(last_event_id: str | None) -> int:
    """The checkpoint position a re-derived stream resumes after (-1: from the start)."""
    if not last_event_id:
        return -1
    text = last_event_id.strip()
    if text.startswith("cp.") and text[3:].isascii() and text[3:].isdigit() and len(text) < 20:
        return int(text[3:])
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return -1  # a buffered id, and the buffer is gone: from the checkpoints, in full
    raise bad_request(
        f"Last-Event-ID {last_event_id!r} is not an event id this server gave; send the "
        "id of the last event you received, or none to start over"
    )


async def from_buffer(
    stream: RunStream, after: int, shown: Shown, *, keepalive: float = KEEPALIVE
) -> AsyncIterator[bytes]:
    """The buffered run's events after ``after``, live until it ends (``end``; a run
    taken over by another process, or abandoned, ends here with ``error`` then
    ``end``), a comment line after ``keepalive`` seconds without one."""
    yield frame("metadata", {"run_id": stream.run_id, "thread_id": stream.thread_id})
    known = stream.last_id  # events made since: their effects may be new to the masker
    async for item in stream.follow(after, keepalive):
        if isinstance(item, int):
            if item < 0:
                yield KEEPALIVE_LINE
            else:
                yield frame("gap", {"first_kept": item, "hint": "re-read the run's state"})
            continue
        if item.id > known and item.event in LEARNING:
            await shown.relearn()
        yield frame(item.event, shown.value(item.data), str(item.id))


async def from_checkpoints(
    graph: CompiledGraph,
    run_id: str,
    thread_id: str,
    after: int,
    shown: Shown,
    *,
    poll: float = 0.5,
    keepalive: float = KEEPALIVE,
) -> AsyncIterator[bytes]:
    """The run's checkpoints as events, oldest first, then ``end`` once it stopped.

    While the run goes on it is polled every ``poll`` seconds: its status and its
    newest checkpoint, and the history only when that changed; a comment line goes
    out after ``keepalive`` seconds without an event (a proxy's idle timeout must not
    cut a stream whose run is in a long step)."""
    yield frame("metadata", {"run_id": run_id, "thread_id": thread_id, "derived": True})
    config = {"thread_id": thread_id, "run_id": run_id}
    seen: str | None = None
    quiet = 0.0
    while True:
        run = await graph.aget_run(run_id)
        newest = [s async for s in graph.aget_state_history(config, limit=1)]
        head = newest[0].config.get("checkpoint_id") if newest else None
        if head != seen:
            history = [s async for s in graph.aget_state_history(config)]
            snaps = [s for s in reversed(history) if s.config.get("checkpoint_id")]
            for n, snap in enumerate(snaps):
                if n > after:
                    after = n
                    quiet = 0.0
                    yield frame("checkpoint", shown.snapshot(snap), f"cp.{n}")
            seen = head
        if run.status not in _MOVING:
            yield frame("end", {"run_id": run_id, "status": str(run.status)})
            return
        await asyncio.sleep(poll)
        quiet += poll
        if quiet >= keepalive:
            quiet = 0.0
            yield KEEPALIVE_LINE


__all__ = ["HEADERS", "MEDIA_TYPE", "buffered_after", "checkpoint_after", "frame"]


def run_events(
    stream: RunStream | None,
    graph: Callable[[], CompiledGraph],
    run: RunRecord,
    last_event_id: str | None,
    shown: Shown,
    *,
    keepalive: float = KEEPALIVE,
) -> StreamingResponse:
    """The response that streams ``run``'s events after ``last_event_id``: from its
    buffer when this server runs it (``stream``), else from its checkpoints, read through
    ``graph()`` (called only then: the caller has checked the graph's code is here)."""
    if stream is not None:
        body = from_buffer(stream, buffered_after(last_event_id), shown, keepalive=keepalive)
    else:
        body = from_checkpoints(
            graph(),
            run.run_id,
            run.thread_id,
            checkpoint_after(last_event_id),
            shown,
            keepalive=keepalive,
        )
    return StreamingResponse(body, media_type=MEDIA_TYPE, headers=HEADERS)
