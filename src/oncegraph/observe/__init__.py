"""Observability: OpenTelemetry spans and structured JSON logs.

Spans (:mod:`oncegraph.observe.tracing`) cost nothing unless ``opentelemetry-api`` is
installed AND a tracer provider is configured (``pip install "oncegraph[otel]"``, then
``trace.set_tracer_provider(...)``): until then every hook returns at once. Logs
(:mod:`oncegraph.observe.logs`): ``--log-format json`` on ``serve``, ``worker`` and
``demo`` writes one JSON object per line.
"""

from __future__ import annotations

from oncegraph.observe.logs import JsonFormatter, configure_logging
from oncegraph.observe.tracing import (
    capture_content,
    effect_event,
    effect_span,
    model_response,
    model_span,
    run_span,
    step_span,
    tracer,
    use_tracer_provider,
)

__all__ = [
    "JsonFormatter",
    "capture_content",
    "configure_logging",
    "effect_event",
    "effect_span",
    "model_response",
    "model_span",
    "run_span",
    "step_span",
    "tracer",
    "use_tracer_provider",
]
