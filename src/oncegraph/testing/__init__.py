"""Test helpers shipped with oncegraph.

:mod:`oncegraph.testing.conformance` holds the pytest-native contract suite every
storage backend runs (``class TestMine(CheckpointerConformance)`` with a
``checkpointer`` fixture).

Also: :mod:`~oncegraph.testing.crash` (run a program in a fresh process, SIGKILL it at a
crash point), :mod:`~oncegraph.testing.provider` (a fake payment provider over HTTP),
:mod:`~oncegraph.testing.recipient` (probe a recipient's idempotency contract: dedup,
changed payload, key retention) and :mod:`~oncegraph.testing.mcp_server` (an MCP server
that counts its effects per idempotency key; needs the ``mcp`` extra).
"""

from oncegraph.testing.recipient import ProbeReport, http_sender, probe_recipient

__all__ = ["ProbeReport", "http_sender", "probe_recipient"]
