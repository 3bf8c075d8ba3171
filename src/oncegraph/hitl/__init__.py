"""Human in the loop and control flow, as data: ``Command`` and ``Send``.

``interrupt`` pauses the run and ``Interrupt`` is the question a paused run shows
(also at the top level, ``oncegraph.interrupt``).
"""

# importing the submodule ``interrupt`` binds its name here to the module; the import
# then rebinds it to the function, so ``oncegraph.hitl.interrupt`` is the function
from oncegraph.hitl.command import Command
from oncegraph.hitl.interrupt import Interrupt, interrupt
from oncegraph.hitl.send import Send

__all__ = ["Command", "Interrupt", "Send", "interrupt"]
