"""``interrupt(value)`` and ``Interrupt``, as the runtime's modules import them.

They live in :mod:`oncegraph.hitl.interrupt` (below the runtime), which finds the
running task through what :mod:`oncegraph.runtime.context` installs; this module
re-exports them.
"""

from __future__ import annotations

from oncegraph.hitl.interrupt import Interrupt, interrupt

__all__ = ["Interrupt", "interrupt"]
