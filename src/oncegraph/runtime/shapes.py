"""What a stream yields: LangGraph's chunk shapes made from the events a run emits.

``stream_shape(spec, stream_mode, subgraphs)`` checks the modes asked for and returns
``shape(put)``, the emit a run is given: each event of a mode asked for becomes the item
the stream yields (``chunk``, ``(mode, chunk)``, ``(namespace, chunk)`` or
``(namespace, mode, chunk)``) and goes to ``put``; events of other modes are dropped
before anything is built for them.

Streams follow LangGraph: ``stream_mode`` defaults to ``"updates"`` (one chunk per
task, ``{node: update}``; an interrupt as ``{"__interrupt__": (Interrupt, ...)}``);
``"values"`` (the state after each step, the input step included), ``"messages"``
(``(message chunk, metadata)`` from model adapters), ``"custom"`` (what nodes write
with ``get_stream_writer()``), ``"debug"`` (``{"step", "timestamp", "type",
"payload"}``), ``"checkpoints"`` (each checkpoint as the history shows it: the
``payload`` of debug's ``checkpoint`` events), ``"tasks"`` (each task as it starts,
``{"id", "name", "input", "triggers"}``, and as it ends, ``{"id", "name", "error",
"result", "interrupts"}``: debug's ``task`` and ``task_result`` payloads) and
``"events"`` (oncegraph's node, tool and effect events). A list of
modes yields ``(mode, chunk)``; ``subgraphs=True`` yields ``(namespace, chunk)`` (or
``(namespace, mode, chunk)``), with the subgraphs' chunks too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.graph.io import INTERRUPT_KEY, output_values
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.streaming import Emit, FromSubgraph, keeping
from oncegraph.state.channels import public

STREAM_MODES = frozenset(
    {"values", "updates", "events", "messages", "custom", "debug", "tasks", "checkpoints"}
)
# The modes made of the ``debug`` events' payloads: its ``checkpoint`` events are the
# ``checkpoints`` chunks, its ``task`` and ``task_result`` events the ``tasks`` chunks.
_FROM_DEBUG = {"checkpoint": "checkpoints", "task": "tasks", "task_result": "tasks"}
# Modes whose chunks from subgraphs reach a stream without subgraphs=True (as LangGraph
# streams every model token, and oncegraph every tool and effect event).
_ALWAYS_NESTED = frozenset({"messages", "events"})


def stream_shape(
    spec: GraphSpec, stream_mode: str | Sequence[str], subgraphs: bool, *, saved: bool = True
) -> Callable[[Callable[[Any], None]], Emit]:
    """The emit of a stream of ``spec``'s graph in ``stream_mode``: ``shape(put)`` turns
    each event the run emits into the item the stream yields (LangGraph's shapes) and
    hands it to ``put``; events of modes not asked for are dropped (and not built).
    ``saved=False``: the graph keeps no checkpoints (compiled without a checkpointer),
    so, as in LangGraph, no checkpoint is streamed (``debug``, ``checkpoints``)."""
    single = isinstance(stream_mode, str)
    modes = {stream_mode} if isinstance(stream_mode, str) else set(stream_mode)
    if not modes or not modes <= STREAM_MODES:
        raise ConfigError(f"stream_mode must be among {sorted(STREAM_MODES)}; got {stream_mode!r}")

    derived = modes & set(_FROM_DEBUG.values())
    kept = modes | {"debug"} if derived else modes  # the run emits debug events for them

    def shape(put: Callable[[Any], None]) -> Emit:
        def emit(mode: str, payload: Any) -> None:
            if mode == "debug" and (derived or not saved):
                if not saved and _is_checkpoint(payload):
                    return
                if derived:
                    _from_debug(payload)
            if mode not in modes:
                return
            ns: tuple[str, ...] = ()
            if isinstance(payload, FromSubgraph):
                if not subgraphs and mode not in _ALWAYS_NESTED:
                    return
                ns, payload = payload.ns, payload.payload
                if mode == "values":
                    payload = public(dict(payload))
            elif mode == "values":
                asked = payload.get(INTERRUPT_KEY) if isinstance(payload, Mapping) else None
                if spec.io is None:
                    payload = output_values(spec, payload)
                else:  # a Pregel app shows its stream channels once one has a value
                    payload = spec.io.values(payload, spec.io.stream)
                    if asked is None and (payload is None or payload == {}):
                        return
                if asked is not None and not isinstance(payload, dict):
                    payload = {INTERRUPT_KEY: asked}  # the state is one value: the question
            item = payload if single else (mode, payload)
            if subgraphs:
                item = (ns, item) if single else (ns, mode, payload)
            put(item)

        def _from_debug(payload: Any) -> None:
            event = payload.payload if isinstance(payload, FromSubgraph) else payload
            mode = _FROM_DEBUG.get(str(event.get("type"))) if isinstance(event, dict) else None
            if mode is not None and mode in derived:
                chunk = event["payload"]
                sub = isinstance(payload, FromSubgraph)
                emit(mode, FromSubgraph(payload.ns, chunk) if sub else chunk)

        return keeping(kept, emit)

    return shape


def _is_checkpoint(payload: Any) -> bool:
    event = payload.payload if isinstance(payload, FromSubgraph) else payload
    return isinstance(event, dict) and event.get("type") == "checkpoint"
