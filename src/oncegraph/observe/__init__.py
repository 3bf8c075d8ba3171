"""Observability: OpenTelemetry spans and structured JSON logs.

Spans (:mod:`oncegraph.observe.tracing`) cost nothing unless ``opentelemetry-api`` is
installed AND a tracer provider is configured (``pip install "oncegraph[otel]"``, then
``trace.set_tracer_provider(...)``): until then every hook returns at once. Logs
(:mod:`oncegraph.observe.logs`): ``--log-format json`` on ``serve``, ``worker`` and
``demo`` writes one JSON object per line.
"""

from __future__ import annotations

from oncegraph.observe import tracing
from oncegraph.observe.logs import JsonFormatter, configure_logging
from oncegraph.observe.tracing import *  # noqa: F403 - its __all__ is the hooks this package offers

__all__ = ["JsonFormatter", "configure_logging"]
__all__ += tracing.__all__
