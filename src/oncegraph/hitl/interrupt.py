"""The old home of ``interrupt`` and ``Interrupt``, which read the running task's
context and so live in :mod:`oncegraph.runtime.interrupt`; importing them from here
still works (each is looked up there on first use)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("Interrupt", "interrupt"):
        from oncegraph.runtime import interrupt

        return getattr(interrupt, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
