"""Human in the loop and control flow, as data: ``Command`` and ``Send``.

``interrupt`` and ``Interrupt`` read the running task's context and live in
:mod:`oncegraph.runtime.interrupt` (and at the top level, ``oncegraph.interrupt``);
importing them from here still works.
"""

from typing import Any

from oncegraph.hitl import interrupt as _old_home
from oncegraph.hitl.command import Command
from oncegraph.hitl.send import Send

# Loading the old module above bound the name ``interrupt`` here to it; unbind it so that
# ``oncegraph.hitl.interrupt`` is the function, as it always was (looked up below).
del globals()["interrupt"], _old_home


def __getattr__(name: str) -> Any:
    if name in ("Interrupt", "interrupt"):
        from oncegraph.runtime import interrupt

        return getattr(interrupt, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Command", "Interrupt", "Send", "interrupt"]
