"""The run service's operations are written once, in the helper that owns them, and
opened on the service with the helper's own signature and docstring (``runs.doors``)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from oncegraph.runs import listing, retention, stopping
from oncegraph.runs.commands import Commands
from oncegraph.runs.context import RunContext
from oncegraph.runs.doors import door
from oncegraph.runs.replay import Replays
from oncegraph.runs.service import RunService
from oncegraph.storage.memory import InMemoryCheckpointer

DOORS = [
    ("resolve_effect", Commands.resolve_effect),
    ("check_effect", Commands.check_effect),
    ("redeliver", Commands.redeliver),
    ("audit", Commands.audit),
    ("replay", Replays.replay),
    ("branch", Replays.branch),
    ("runs", listing.runs),
    ("run_view", listing.run_view),
    ("effects", listing.effects),
    ("abandon", stopping.abandon),
    ("cancel", stopping.cancel),
    ("prune", retention.prune),
]


@pytest.mark.parametrize(("name", "owner"), DOORS)
def test_a_door_has_its_operations_signature_and_docstring(name: str, owner: Any) -> None:
    opened = getattr(RunService, name)
    shown = list(inspect.signature(opened).parameters.values())[1:]
    own = list(inspect.signature(owner).parameters.values())[1:]
    assert [str(p) for p in shown] == [str(p) for p in own]
    assert opened.__doc__ == owner.__doc__ and opened.__doc__


async def test_a_door_runs_on_the_services_context_at_the_time_of_the_call() -> None:
    seen: list[RunContext] = []

    class Helper:
        def __init__(self, ctx: RunContext) -> None:
            self.ctx = ctx

        async def where(self, *, what: str) -> str:
            seen.append(self.ctx)
            return what

    async def bump(ctx: RunContext, n: int) -> int:
        seen.append(ctx)
        return n + 1

    class Service(RunService):
        where = door(Helper, Helper.where)
        plain = door(None, bump)

    service = Service(None, InMemoryCheckpointer())
    assert await service.where(what="here") == "here"
    assert await service.plain(1) == 2
    assert seen == [service.context, service.context]
    service.context = RunContext(None, service.store, owner="other", scope=None)
    await service.plain(0)
    assert seen[-1] is service.context
