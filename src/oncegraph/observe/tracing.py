"""OpenTelemetry spans for runs, steps, model calls and effects.

Spans: ``oncegraph.run`` (one per run call: start, continue, resume after a crash),
``oncegraph.step`` (one per superstep, under the run), one span per ledger call (with
events ``intent``, ``attempt``, ``result``, ``reconciled``, ``parked``) and one per try
of a model, under its model effect's span. Names and ``gen_ai.*`` attributes follow
OpenTelemetry's GenAI semantic conventions:

* a tool's (or any non-model) effect is ``execute_tool {name}`` with
  ``gen_ai.operation.name="execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.type``
  and ``gen_ai.tool.call.id`` (the model's call id, where the effect is a tool call);
* a model turn's effect is ``oncegraph.effect`` (the ledger's record of the turn: a
  resumed run reuses it and makes no ``chat`` span), and each try of a model under it is
  ``chat {model}`` (kind CLIENT) with ``gen_ai.operation.name="chat"``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``, and from the response
  ``gen_ai.response.model``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``,
  ``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens``.

Every effect span also carries ``oncegraph.effect.id``, ``.key`` (the idempotency key),
``.type``, ``.class`` and ``.status``. A tool's arguments and result are content: they
are recorded only when opted in (:func:`capture_content`, or the conventions'
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``), as JSON with the tool's
``mask`` fields replaced by ``"***"`` (``gen_ai.tool.call.arguments`` /
``gen_ai.tool.call.result``, and the same as ``oncegraph.effect.request`` / ``.result``).

Masking (what leaves for a collector): each run span keeps a
:class:`~oncegraph.runs.masking.Masker` that learns the masked values of every effect
called under it; every attribute and event of the run's spans (an effect's request,
result, provider reference, an attempt's error, a recorded exception's message and
stack trace) is masked by key and by value with it.

Cost: the tracer is looked up lazily. Without ``opentelemetry-api``, or with no tracer
provider set (the API's proxy), every hook returns a shared no-op context manager or
returns at once; nothing is built. A hook never raises into the run.

Also here (it sees every ledger event): an effect reconciled after a crash is logged at
INFO on ``oncegraph.ledger``, in any process (a worker's log says so).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

log = logging.getLogger("oncegraph.ledger")

MASK = "***"
_NULL: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
_trace: Any = None  # None: not looked up yet; False: OpenTelemetry is not installed
_provider: Any = None
_tracer: Any = None
_chosen: Any = None  # a provider given to use_tracer_provider(), else the global one
_UNKNOWN = object()
# The masker of the run being traced (its effects' masked values), shared by its spans.
_masker: contextvars.ContextVar[Any] = contextvars.ContextVar("oncegraph_trace_masker")
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_capture: bool | None = None  # capture_content()'s choice; None: the environment's


def capture_content(on: bool | None) -> None:
    """Record tools' arguments and results on their spans (masked), or not; ``None``:
    as ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says (off by default)."""
    global _capture
    if on is not None and not isinstance(on, bool):
        raise TypeError(f"capture_content takes True, False or None; got {on!r}")
    _capture = on


def capturing() -> bool:
    """Are tools' arguments and results recorded on spans?"""
    if _capture is not None:
        return _capture
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


_PROCESS_MASKER: list[Callable[[], Any]] = []


def mask_spans_with(process_masker: Callable[[], Any]) -> None:
    """Install what makes a span's masker: the run layer's
    (:func:`oncegraph.runs.masking.process_masker`, installed when it is imported, as
    importing ``oncegraph`` does), which knows what tools declared masked. Tracing does
    not import it: the run layer sits above."""
    _PROCESS_MASKER[:] = [process_masker]


def _process_masker() -> Any:
    """A new masker of what this process knows; none installed is an error, never a span
    that shows a secret unmasked."""
    if not _PROCESS_MASKER:
        raise RuntimeError(
            "spans cannot be masked: nothing installed their masking; import oncegraph "
            "(it installs oncegraph.runs.masking) before running a graph"
        )
    return _PROCESS_MASKER[0]()


def _current_masker() -> Any:
    found = _masker.get(None)
    if found is None:
        found = _process_masker()
        _masker.set(found)
    return found


def _text(value: Any) -> Any:
    """A span's text, with every masked value learned by this run replaced."""
    if not isinstance(value, str):
        return value
    return _current_masker().text(value)


def use_tracer_provider(provider: Any) -> None:
    """Send oncegraph's spans to ``provider`` rather than the global tracer provider
    (``None``: back to the global one). For tests and for apps that keep several."""
    global _chosen, _provider
    _chosen = provider
    _provider = None  # look the tracer up again


def tracer() -> Any:
    """The oncegraph tracer, or None when OpenTelemetry is absent or not configured."""
    global _trace, _provider, _tracer
    if _trace is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _trace = False
        else:
            _trace = trace
            trace.get_tracer_provider()  # loads one named by OTEL_PYTHON_TRACER_PROVIDER
    if _trace is False:
        return None
    if _chosen is not None:
        provider = _chosen
    else:
        # The API's global, read directly: get_tracer_provider() reads the environment on
        # every call until a provider is set, which would cost each step microseconds.
        provider = getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN)
        if provider is None:
            return None  # nothing configured
        if provider is _UNKNOWN:  # pragma: no cover - another version of the API
            provider = _trace.get_tracer_provider()
    if provider is not _provider:
        _provider = provider
        configured = not isinstance(
            provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider
        )
        _tracer = provider.get_tracer("oncegraph") if configured else None
    return _tracer


def _mask(value: Any, fields: Sequence[str]) -> Any:
    if not fields:
        return value
    if isinstance(value, Mapping):
        return {k: (MASK if k in fields else _mask(v, fields)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask(v, fields) for v in value]
    return value


def _json(value: Any, fields: Sequence[str]) -> str:
    try:
        text = json.dumps(_mask(value, fields), default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return "<unserializable>"
    return str(_text(text))[:4096]


@contextlib.contextmanager
def _span(t: Any, name: str, attributes: dict[str, Any], client: bool = False) -> Iterator[Any]:
    """A current span that records ANY exception, a crash signal (BaseException) too;
    ``client``: of kind CLIENT (a call to a model's API), else INTERNAL."""
    kind = _trace.SpanKind.CLIENT if client else _trace.SpanKind.INTERNAL
    with t.start_as_current_span(
        name,
        kind=kind,
        attributes=_clean(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            masker = _current_masker()
            span.record_exception(  # the message and stack trace masked
                exc,
                attributes={
                    "exception.message": masker.text(str(exc)),
                    "exception.stacktrace": masker.traceback(exc),
                },
            )
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}"))
            raise


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


# -- hooks (one call each in the driver, the ledger and the model chain) -------------------


def run_span(run: Any, values: Any = None) -> contextlib.AbstractContextManager[Any]:
    """Around a run call (driver). ``run`` is the RunRecord being driven, ``values`` the
    state it goes on from (its tool calls tell the masker what they were given)."""
    t = tracer()
    if t is None:
        return _NULL
    return _run_span(t, run, values)


@contextlib.contextmanager
def _run_span(t: Any, run: Any, values: Any) -> Iterator[Any]:
    """A run's span, with a masker of its own for the spans under it."""
    masker = _process_masker()
    try:
        masker.learn(values)
    except Exception:  # tracing must never break a run
        log.debug("learning a state's masked values failed", exc_info=True)
    token = _masker.set(masker)
    try:
        with _traced_run(t, run) as span:
            yield span
    finally:
        _masker.reset(token)


def _traced_run(t: Any, run: Any) -> contextlib.AbstractContextManager[Any]:
    return _span(
        t,
        "oncegraph.run",
        {
            "oncegraph.run.id": run.run_id,
            "oncegraph.thread.id": run.thread_id,
            "oncegraph.run.status_before": str(run.status),
            "oncegraph.run.launch_reason": run.launch_reason,
            "oncegraph.run.mode": run.mode,
            "oncegraph.graph.name": run.workflow_name,
            "oncegraph.graph.version": run.workflow_version,
        },
    )


def step_span(run: Any, step: int, nodes: Sequence[str]) -> contextlib.AbstractContextManager[Any]:
    """Around one superstep (driver)."""
    t = tracer()
    if t is None:
        return _NULL
    return _span(
        t,
        "oncegraph.step",
        {
            "oncegraph.run.id": run.run_id,
            "oncegraph.step": step,
            "oncegraph.step.nodes": list(nodes),
        },
    )


def _model_names(model: Any) -> tuple[str, str | None, str]:
    """``(name, provider, requested model)`` of a model adapter (or its name):
    ``"openai/gpt-4o-mini"`` is provider ``openai``, model ``gpt-4o-mini``."""
    name = model if isinstance(model, str) else str(getattr(model, "name", "") or model)
    provider, sep, rest = name.partition("/")
    requested = getattr(model, "model", None)
    if not isinstance(requested, str) or not requested:
        requested = rest.rpartition(":")[2] if sep else name
    return name, (provider if sep else None), requested


def model_span(model: Any, attempt: int) -> contextlib.AbstractContextManager[Any]:
    """Around one try of one model (the model chain), inside the model effect's span:
    ``chat {model}``; :func:`model_response` adds what the response says."""
    t = tracer()
    if t is None:
        return _NULL
    name, provider, requested = _model_names(model)
    return _span(
        t,
        f"chat {requested}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider or name,
            "gen_ai.request.model": requested,
            "oncegraph.model": name,
            "oncegraph.try": attempt,
        },
        client=True,
    )


def model_response(span: Any, response: Any) -> None:
    """The response's model, id, finish reason and token usage on its ``chat`` span."""
    if span is None or not _trace or not getattr(span, "is_recording", lambda: False)():
        return
    try:
        usage = getattr(response, "usage", None) or {}
        finish = getattr(response, "raw_finish_reason", None)
        found = {
            "gen_ai.response.model": getattr(response, "model", None),
            "gen_ai.response.id": getattr(response, "provider_message_id", None),
            "gen_ai.response.finish_reasons": [finish] if finish else None,
            "gen_ai.usage.input_tokens": usage.get("input_tokens"),
            "gen_ai.usage.output_tokens": usage.get("output_tokens"),
        }
        for key, value in _clean(found).items():
            span.set_attribute(key, value)
    except Exception:  # tracing must never break a run
        log.debug("tracing a model response failed", exc_info=True)


def effect_span(call: Any, effect_id: str, ctx: Any) -> contextlib.AbstractContextManager[Any]:
    """Around one ledger call (``perform``): the effect's id, key, class and masked request."""
    t = tracer()
    if t is None:
        return _NULL
    mask = tuple(getattr(call, "mask", ()) or ())
    try:
        _current_masker().learn_call(call.effect_type, call.request, mask)
    except Exception:  # tracing must never break a run
        log.debug("learning an effect's masked values failed", exc_info=True)
    attributes: dict[str, Any] = {
        "oncegraph.effect.id": effect_id,
        "oncegraph.effect.key": effect_id,
        "oncegraph.effect.type": call.effect_type,
        "oncegraph.effect.class": str(call.effect_class),
        "oncegraph.effect.command_id": call.command_id,
        "oncegraph.effect.recipient": _text(call.recipient),
        "oncegraph.run.id": ctx.run_id,
        "oncegraph.thread.id": ctx.thread_id,
        "oncegraph.node": ctx.node_name,
    }
    if str(call.effect_class) == "model":  # a model turn: its tries are the chat spans
        return _span(t, "oncegraph.effect", attributes)
    _, sep, call_id = str(call.command_id).rpartition(":")
    attributes.update(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.effect_type,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": call_id if sep and call_id else None,
        }
    )
    if capturing():
        arguments = _json(call.request, mask)
        attributes["gen_ai.tool.call.arguments"] = arguments
        attributes["oncegraph.effect.request"] = arguments
    return _span(t, f"execute_tool {call.effect_type}", attributes)


def effect_event(kind: str, record: Any, more: Mapping[str, Any], mask: Sequence[str]) -> None:
    """A ledger event (``effect_intent``, ``effect_result``, ``effect_reconciled``,
    ``effect_parked``) on the current effect span; attempts become events with their own
    times. A reconcile is also logged."""
    if kind == "effect_reconciled":
        log.info(
            "effect %s (%s) of run %s reconciled: %s, status %s",
            record.effect_id,
            record.effect_type,
            record.run_id,
            more.get("verdict"),
            record.status,
            extra={
                "effect_id": record.effect_id,
                "run_id": record.run_id,
                "verdict": more.get("verdict"),
                "status": str(record.status),
            },
        )
    t = tracer()
    if t is None:
        return
    try:
        _record(kind, record, more, tuple(mask))
    except Exception:  # tracing must never break a run
        log.debug("tracing an effect event failed", exc_info=True)


def _record(kind: str, record: Any, more: Mapping[str, Any], mask: tuple[str, ...]) -> None:
    assert _trace
    span = _trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute("oncegraph.effect.status", str(record.status))
    if kind != "effect_intent":
        for attempt in record.attempts:
            if attempt.ended_at is None:
                continue
            span.add_event(
                "attempt",
                _clean(
                    {
                        "oncegraph.attempt.number": attempt.number,
                        "oncegraph.attempt.outcome": attempt.outcome,
                        "oncegraph.attempt.error": _text(attempt.error),
                        "oncegraph.attempt.started_at": attempt.started_at,
                    }
                ),
                timestamp=int(attempt.ended_at * 1e9),
            )
    # A model's response is not shown: its tool calls carry other tools' arguments, which
    # this effect's mask does not cover.
    model = str(record.effect_class) == "model"
    if (
        kind in ("effect_result", "effect_reconciled")
        and record.result is not None
        and not model
        and capturing()
    ):
        result = _json(record.result, mask)
        span.set_attribute("gen_ai.tool.call.result", result)
        span.set_attribute("oncegraph.effect.result", result)
    if record.provider_reference:
        span.set_attribute("oncegraph.effect.provider_reference", _text(record.provider_reference))
    attributes = {
        "oncegraph.effect.status": str(record.status),
        **{
            f"oncegraph.{k}": _text(v)
            for k, v in more.items()
            if isinstance(v, str | int | float | bool)
        },
    }
    span.add_event(kind.removeprefix("effect_"), attributes)


__all__ = [
    "CAPTURE_ENV",
    "capture_content",
    "capturing",
    "effect_event",
    "effect_span",
    "model_response",
    "model_span",
    "run_span",
    "step_span",
    "tracer",
    "use_tracer_provider",
]
