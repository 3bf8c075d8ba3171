"""A database served without the app's code: ``oncegraph serve --db runs.db``.

:class:`DatabaseApp` stands where the server keeps its compiled graph, over a read-only
run service (no graph). What needs no code works as with the app: the runs list, a
run's page, its effects, the audit log, **Resolve effect** and **Abandon**. What runs the
graph's code (Continue, Replay, Branch, Redeliver, Check at recipient, starting a run,
reading the state, which only the graph can decode) is refused with
:data:`NEEDS_APP`, a 409 whose words say to start the server with the app.

Which fields the tools mask is known only from their code, so a key below ``admin``
sees no payload here (:class:`~oncegraph.server.encode.Shown` with ``blind``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NoReturn

from oncegraph.app import CompiledGraph
from oncegraph.graph.view import GraphView
from oncegraph.runs.service import RunService
from oncegraph.runs.views import StateSnapshot
from oncegraph.server.problems import ApiError
from oncegraph.storage.protocols import Checkpointer

NAME = "database"  # what /api/health names as the graph served
CODE = "needs_app"
NEEDS_APP = (
    "this server was started with the database only, without the app's code, so it "
    "cannot {what}. Start it with the app to do that: oncegraph serve MODULE:APP "
    "(the module or file.py and the name of the compiled graph), with the same database."
)
UNAVAILABLE = (
    "Continue, Replay, Branch, Redeliver and Check at recipient run the app's code, and "
    "this server was started with the database only. Start it with the app (oncegraph "
    "serve MODULE:APP, with the same database) to use them; Resolve effect and Abandon "
    "work here."
)
WITHHELD = "(not shown: which fields are secret is known from the app's code)"


def needs_app(what: str) -> ApiError:
    """The refusal of something that needs the graph's code (``what``: "continue a run")."""
    return ApiError(409, CODE, NEEDS_APP.format(what=what))


class DatabaseApp(CompiledGraph):
    """The server's app over ``store`` with no graph (see the module docstring)."""

    has_code = False

    def __init__(self, store: Checkpointer) -> None:  # no graph: nothing to compile
        self.checkpointer = store
        self._sync_pool = None
        self._service = RunService(None, store)

    @property
    def name(self) -> str:
        return NAME

    def get_name(self, suffix: str | None = None) -> str:
        return f"{NAME}{suffix}" if suffix else NAME

    @property
    def app_id(self) -> str:
        return NAME

    @property
    def tenant(self) -> str | None:
        return None

    def for_tenant(self, tenant: str) -> CompiledGraph:
        raise ApiError(
            403,
            CODE,
            "this key is bound to a tenant, which sees only its app's runs, and this server "
            "was started with the database only, without the app. Start it with the app "
            "(oncegraph serve MODULE:APP) for tenant keys.",
        )

    def get_graph(self, config: Any = None, *, xray: bool | int = False) -> GraphView:
        raise needs_app("draw the graph")

    async def aget_graph(self, config: Any = None, *, xray: bool | int = False) -> GraphView:
        raise needs_app("draw the graph")

    # Refused whatever they are given: each takes the app's method's arguments.

    def _for_run(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise needs_app("start or continue a run")

    async def aget_state(self, *args: Any, **kwargs: Any) -> StateSnapshot:
        raise needs_app("read a thread's state (only the graph decodes it)")

    async def aget_state_history(self, *args: Any, **kwargs: Any) -> AsyncIterator[StateSnapshot]:
        raise needs_app("read a thread's checkpoints (only the graph decodes them)")
        yield  # an async generator, as the app's


def has_code(app: CompiledGraph) -> bool:
    """Does the server run ``app``'s code (False for a :class:`DatabaseApp`)?"""
    return bool(getattr(app, "has_code", True))


__all__ = ["UNAVAILABLE", "WITHHELD", "DatabaseApp", "has_code", "needs_app"]
