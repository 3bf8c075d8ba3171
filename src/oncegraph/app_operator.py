"""The compiled graph's operator methods, mixed into :class:`~oncegraph.app.CompiledGraph`:
the listings (``runs``, ``get_run``, ``effects``, ``audit``) and the commands an operator
gives a run or an effect (``resume``, ``resolve_effect``, ``check_effect``, ``redeliver``,
``compensate``,
``replay``, ``branch``, ``abandon``, ``prune``).

Each is one call of the app's :class:`~oncegraph.runs.service.RunService`, the one door
every surface (app, CLI, server, worker) goes through; the sync method is the async one
run through the portal, never a twin (:func:`~oncegraph._blocking.sync_twin`). A command
the app passes on as it is, with the service's own signature, is opened here as a door
(:func:`_service_door`); the others say what they add (the app's config, its output).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from enum import StrEnum
from typing import Any, Concatenate, ParamSpec, TypeVar

from oncegraph._blocking import sync_twin
from oncegraph.app_parts import AppParts
from oncegraph.graph.io import output_values
from oncegraph.runs.commands import NO_ANSWER
from oncegraph.runs.compensating import Compensated
from oncegraph.runs.replay import Branch
from oncegraph.runs.replayed import ReplayRun
from oncegraph.runs.service import EFFECTS_PAGE, RunService
from oncegraph.storage.records import (
    EffectRecord,
    EffectStatus,
    RunRecord,
    RunStatus,
)

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E", bound=StrEnum)


def _service_door(
    method: Callable[Concatenate[RunService, P], Awaitable[R]], doc: str
) -> Callable[Concatenate[OperatorMethods, P], Coroutine[Any, Any, R]]:
    """The app's ``a<name>``: the service's ``<name>`` (``method``) on the app's service,
    with its signature, and the app's docstring ``doc``."""

    async def call(app: OperatorMethods, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(app.service, *args, **kwargs)

    functools.update_wrapper(call, method)
    call.__name__ = call.__qualname__ = f"a{method.__name__}"
    call.__doc__ = doc
    return call


def _statuses(kind: type[E], status: str | Sequence[str] | None) -> list[E] | None:
    """``status=`` (one status or several) as ``kind``'s members; None for all."""
    if status is None:
        return None
    return [kind(s) for s in ([status] if isinstance(status, str) else status)]


class OperatorMethods(AppParts):
    """The operator's listings and commands on a compiled graph."""

    async def aruns(
        self,
        *,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parent_run_id: str | None = None,
        before: str | RunRecord | None = None,
    ) -> list[RunRecord]:
        """This app's runs, newest first (a tenant-bound app: its tenant's only);
        ``tenant`` filters by tenant; ``parent_run_id`` keeps the runs made from that run
        (its replays and branches); ``before`` (a run or its id, a page's last) lists
        the runs after it: ``app.runs(limit=50, before=page[-1])`` is the next page,
        read from where the last ended."""
        return await self.service.runs(
            thread_id=thread_id,
            statuses=_statuses(RunStatus, status),
            limit=limit,
            tenant=tenant,
            parent_run_id=parent_run_id,
            before=before,
        )

    runs = sync_twin(aruns)

    async def aget_run(self, run_id: str) -> RunRecord:
        return await self.service.run_view(run_id)

    get_run = sync_twin(aget_run)

    async def aeffects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        status: str | Sequence[str] | None = None,
        tenant: str | None = None,
        limit: int | None = EFFECTS_PAGE,
        offset: int = 0,
        masked: bool = True,
    ) -> list[EffectRecord]:
        """Effect records of this app's runs (masked), oldest first; ``tenant`` keeps
        those of that tenant's runs (a tenant-bound app: its own only); ``limit`` of them
        (default 500, ``None`` for all) from ``offset`` on. ``masked=False`` shows the
        payloads as recorded (for an admin's view: the caller decides who sees them)."""
        return await self.service.effects(
            run_id=run_id,
            thread_id=thread_id,
            statuses=_statuses(EffectStatus, status),
            tenant=tenant,
            limit=limit,
            offset=offset,
            masked=masked,
        )

    effects = sync_twin(aeffects)

    # -- operator --------------------------------------------------------------------------

    async def aresume(
        self,
        run_id: str,
        *,
        answer: Any = NO_ANSWER,
        actor: str,
        reason: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Any:
        """Continue run ``run_id`` (interrupted with ``answer``, failed, crashed, parked).

        Timeouts and ``recursion_limit`` named in ``config`` apply to this continue; the
        others are the run's stored ones, as for ``invoke(None, config)``."""
        cfg = None
        if config is not None:
            run = await self.service.get_run(run_id)
            cfg = self._config({**config, "thread_id": run.thread_id})
        result = await self.service.resume(
            run_id, answer=answer, actor=actor, reason=reason, config=cfg
        )
        return output_values(self.spec, result.output())

    resume = sync_twin(aresume)

    aresolve_effect = _service_door(
        RunService.resolve_effect,
        "Record what an operator found at the recipient of an uncertain effect.",
    )
    resolve_effect = sync_twin(aresolve_effect)

    acheck_effect = _service_door(
        RunService.check_effect,
        """Ask the recipient again about an uncertain effect (an ``accepted`` one through
        its tool's ``probe``, a ``pending`` one through ``reconcile``); the answer is
        recorded on the effect and in the audit log. See :class:`EffectCheck`.""",
    )
    check_effect = sync_twin(acheck_effect)

    aredeliver = _service_door(
        RunService.redeliver,
        """Preview a redelivery (nothing sent; the recipient is asked first where the tool
        can ask it), then send exactly once with ``confirm``. A same-key send after the
        recipient's dedup window, or with none known, needs ``past_dedup_window=True``.""",
    )
    redeliver = sync_twin(aredeliver)

    async def acompensate(
        self,
        effect_id: str,
        *,
        actor: str,
        reason: str,
        allow_again: bool = False,
        args: Mapping[str, Any] | None = None,
    ) -> Compensated:
        """Undo the completed effect ``effect_id`` with its tool's compensating tool
        (``@tool(compensate=...)``), run as a new effect of its own class and policy,
        linked both ways and audited; at most once unless ``allow_again``. ``args``: the
        compensating tool's own arguments. See :mod:`oncegraph.runs.compensating`."""
        return await self.service.compensate(
            effect_id, actor=actor, reason=reason, allow_again=allow_again, args=args
        )

    compensate = sync_twin(acompensate)

    acompensations = _service_door(
        RunService.compensations,
        """The compensations of effect ``effect_id`` (what compensated it), first one
        first, masked; each names it as ``compensates`` (:mod:`oncegraph.runs.compensating`).""",
    )
    compensations = sync_twin(acompensations)

    async def areplay(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        mode: str = "evidence",
        reason: str,
        actor: str,
        allow_irreversible: Sequence[str] = (),
        doubles: Mapping[str, Callable[..., Any]] | None = None,
    ) -> ReplayRun:
        """A NEW run (own thread, lineage) from a checkpoint of ``run_id``, in ``mode``:
        ``evidence`` (recorded results only), ``simulation`` (tools' ``simulate`` or
        ``doubles``) or ``live`` (real calls; irreversible tools only if allowed).

        Returns the new run's handle (:class:`~oncegraph.runs.replayed.ReplayRun`:
        ``run_id``, ``status``, ``result``); its ``launch_reason`` is ``reason``."""
        result = await self.service.replay(
            run_id,
            checkpoint_id=checkpoint_id,
            mode=mode,
            reason=reason,
            actor=actor,
            allow_irreversible=allow_irreversible,
            doubles=doubles,
        )
        ended = await self.service.run_view(result.run.run_id)  # as get_run shows it
        return ReplayRun(ended, output_values(self.spec, result.output()))

    replay = sync_twin(areplay)

    async def abranch(
        self,
        run_id: str,
        checkpoint_id: str | None = None,
        *,
        patch: Mapping[str, Any],
        reason: str,
        actor: str,
        as_node: str | None = None,
    ) -> Branch:
        """A paused run on its own thread from the patched state; the diff; nothing runs
        until ``resume(branch.run.run_id)``."""
        return await self.service.branch(
            run_id, checkpoint_id, patch=patch, reason=reason, actor=actor, as_node=as_node
        )

    branch = sync_twin(abranch)

    aaudit = _service_door(
        RunService.audit,
        """The append-only audit log, newest first; ``before``: the last record seen
        (``audit(before=page[-1])`` is the next page), or a time (the records older).""",
    )
    audit = sync_twin(aaudit)

    async def aabandon(
        self, config: Mapping[str, Any], *, reason: str = "abandoned", actor: str = "operator"
    ) -> RunRecord:
        """Give up on the thread's unfinished run; new input may follow. Nothing is deleted."""
        run_id = config.get("run_id") or (config.get("configurable") or {}).get("run_id")
        return await self.service.abandon(
            self._thread(config), reason=reason, actor=actor, run_id=run_id
        )

    abandon = sync_twin(aabandon)

    aprune = _service_door(
        RunService.prune,
        """Retention: delete checkpoints and finished effect records no open run needs.

        See :meth:`oncegraph.runs.service.RunService.prune`: the head, the newest
        ``keep_checkpoints`` and unfinished runs' checkpoints stay; log entries are never
        deleted; ``effects_older_than`` is in seconds.
        """,
    )
    prune = sync_twin(aprune)
