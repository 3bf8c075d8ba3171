"""Human in the loop: ``interrupt`` and ``Command``."""

from oncegraph.hitl.command import Command
from oncegraph.hitl.interrupt import interrupt

__all__ = ["Command", "interrupt"]
