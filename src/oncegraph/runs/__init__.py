"""The run service: the run lifecycle and operator commands over the engine and a store.

The compiled app, the worker and the CLI call :class:`RunService`; none of them touches
a store directly.
"""

from oncegraph.runs.launch import Launch
from oncegraph.runs.service import RunResult, RunService
from oncegraph.runs.submitted import Submitted
from oncegraph.runs.views import StateSnapshot

__all__ = ["Launch", "RunResult", "RunService", "StateSnapshot", "Submitted"]
