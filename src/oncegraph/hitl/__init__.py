"""Human in the loop and control flow: ``interrupt``, ``Command``, ``Send``, ``Interrupt``."""

from oncegraph.hitl.command import Command
from oncegraph.hitl.interrupt import Interrupt, interrupt
from oncegraph.hitl.send import Send

__all__ = ["Command", "Interrupt", "Send", "interrupt"]
