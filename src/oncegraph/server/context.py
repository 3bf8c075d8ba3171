"""What every route needs: the app being served, who is asking, and what they may see.

:class:`Served` is kept on ``app.state.served``. The helpers here are the only place a
route learns its caller (:func:`caller`, :func:`need`) and the only place it loads a run
or a thread for that caller (:func:`visible_run`, :func:`visible_thread`): an unknown id
and another tenant's id get the same 404, so a key learns nothing about other tenants.

What a response shows goes through :func:`shown` (the output boundary,
:class:`~oncegraph.server.encode.Shown`): one masker per request, which learns the masked
values of every thread the request loaded a run of (:func:`visible_run`,
:func:`visible_runs`, :func:`children_of`) or names (``shown(request, p, thread_id)``);
an error response's message is masked by the same masker (:func:`masked_message`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.runs.holders import Holder
from oncegraph.runs.holders import holders as find_holders
from oncegraph.runs.masking import Masker
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.config import RunConfig
from oncegraph.server import tenancy
from oncegraph.server.auth import KeyRing, Principal, Role, credential
from oncegraph.server.database_app import has_code, needs_app
from oncegraph.server.encode import Shown
from oncegraph.server.hub import RunHub
from oncegraph.server.problems import ApiError, bad_request, forbidden, not_found
from oncegraph.server.reading import Readers
from oncegraph.storage.records import RunRecord

T = TypeVar("T")

# How many running runs of one listing have their liveness lock tried (together).
HOLDER_LOOKS = 50
# How many runs one read of a listing takes at most (a page, a run's children).
SCAN = 1000


@dataclass(slots=True)
class Served:
    graph: CompiledGraph
    keys: KeyRing
    hub: RunHub
    readers: Readers

    @property
    def masks(self) -> dict[str, tuple[str, ...]]:
        return dict(self.graph.service.masks)

    @property
    def has_code(self) -> bool:
        """Does this server run the app's code (not a database served alone)?"""
        return has_code(self.graph)


def served(request: Request) -> Served:
    found: Served = request.app.state.served
    return found


def code_needed(request: Request, what: str) -> None:
    """Refuse (409, naming the fix) what runs the app's code on a server started with
    the database only; ``what`` says what was asked ("continue a run")."""
    if not served(request).has_code:
        raise needs_app(what)


def graph(request: Request) -> CompiledGraph:
    """The app as the request's caller may use it: bound to the key's tenant when the key
    has one (the runs it starts carry the tenant; another tenant's are refused as unknown),
    else the whole app."""
    whole = served(request).graph
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is not None and principal.tenant is not None:
        return whole.for_tenant(principal.tenant)
    return whole


async def read(request: Request, reading: Callable[[CompiledGraph], Awaitable[T]]) -> T:
    """``await reading(app)`` with the app as :func:`graph` binds it, on the readers'
    own connection and thread (:mod:`oncegraph.server.reading`): for listings and the
    masked values a response learns, which must not wait behind the runs' writes."""
    principal: Principal | None = getattr(request.state, "principal", None)
    tenant = principal.tenant if principal is not None else None
    return await served(request).readers.read(tenant, reading)


def key_of(request: Request, *, cookie: bool) -> str | None:
    """The key the request presents (:func:`oncegraph.server.auth.credential`: the same
    one the rate limit counted it under)."""
    return credential(request.headers, cookie=cookie)


def caller(request: Request, *, cookie: bool = False) -> Principal:
    """The request's principal, or 401."""
    principal = served(request).keys.find(key_of(request, cookie=cookie))
    if principal is None:
        raise ApiError(
            401,
            "unauthorized",
            "a valid API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
        )
    request.state.principal = principal
    return principal


def need(request: Request, role: Role, *, cookie: bool = False) -> Principal:
    """The principal, if its role is at least ``role``; else 401 or 403."""
    principal = caller(request, cookie=cookie)
    if not principal.can(role):
        raise forbidden(f"this needs the {role.label} role; the key used is {principal.role.label}")
    return principal


def _masking(request: Request) -> tuple[Masker, set[str], set[str]]:
    """The request's masker, the threads it learned, and those it is still to learn."""
    state = request.state
    found: tuple[Masker, set[str], set[str]] | None = getattr(state, "oncegraph_masking", None)
    if found is None:
        found = (Masker(served(request).masks), set(), set())
        state.oncegraph_masking = found
    return found


def seen(request: Request, thread_ids: Iterable[str]) -> None:
    """Threads whose masked values this request's responses must know (learned by the
    next :func:`shown` or :func:`masked_message`)."""
    _, learned, pending = _masking(request)
    pending.update(t for t in thread_ids if t not in learned)


def request_masker(request: Request) -> Masker:
    """The request's masker, with what it learned so far (no store read)."""
    return _masking(request)[0]


async def _learn(request: Request) -> Masker:
    masker, learned, pending = _masking(request)
    if pending:
        todo = sorted(pending)
        pending.clear()
        learned.update(todo)
        masker.absorb(await read(request, lambda g: g.service.masker(thread_ids=todo)))
    return masker


async def shown(request: Request, principal: Principal, *thread_ids: str) -> Shown:
    """What ``principal`` may see of this request's answer: masked (below ``admin``)
    with what the threads of the runs it loaded, and ``thread_ids``, hold secret."""
    blind = not served(request).has_code  # the masks are in the app's code
    if principal.can(Role.ADMIN):
        return Shown(principal, served(request).masks)
    seen(request, thread_ids)
    masker = await _learn(request)
    view = Shown(principal, served(request).masks, masker, blind=blind)
    learned = _masking(request)[1]

    async def refresh() -> None:
        if learned:
            ids = sorted(learned)
            masker.absorb(await read(request, lambda g: g.service.masker(thread_ids=ids)))

    view.refresh = refresh
    return view


async def masked_message(request: Request, message: str) -> str:
    """An error response's message as its caller may read it (the request's masker)."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is not None and principal.can(Role.ADMIN):
        return message
    try:
        if not hasattr(request.app.state, "served"):
            return message
        return (await _learn(request)).text(message)
    except Exception:  # the store is down: the message stays, with what is known masked
        return _masking(request)[0].text(message)


def thread_id_of(raw: str) -> str:
    """A thread id from a path, checked as the run config checks it."""
    try:
        parsed = RunConfig.parse({"thread_id": raw}).thread_id
    except ConfigError as exc:
        raise bad_request(str(exc)) from None
    assert parsed is not None
    return parsed


def visible_thread(principal: Principal, thread_id: str, *, acting: bool = False) -> str:
    """``thread_id`` if the principal may see it (404 otherwise; 403 with a hint when it
    is about to start something there)."""
    thread_id = thread_id_of(thread_id)
    if not tenancy.allows(principal, thread_id):
        if acting:
            raise forbidden(
                f"this key cannot use thread {thread_id!r}: " + tenancy.thread_hint(principal)
            )
        raise not_found(f"no thread {thread_id!r}")
    return thread_id


async def visible_run(request: Request, principal: Principal, run_id: str) -> RunRecord:
    """The run, if it exists and the principal may see it; else 404."""
    try:
        run = await graph(request).aget_run(run_id)
    except RunNotFoundError:
        raise not_found(f"no run {run_id!r}; list runs with GET /api/runs") from None
    if not tenancy.allows(principal, run.thread_id, run):
        raise not_found(f"no run {run_id!r}; list runs with GET /api/runs")
    seen(request, (run.thread_id,))
    return run


async def holders(request: Request, runs: Iterable[RunRecord]) -> dict[str, Holder]:
    """The holders of the ``running`` runs among ``runs`` (locks tried for the first
    :data:`HOLDER_LOOKS` of them), by run id: whether the process running each is still
    there (:func:`oncegraph.runs.holders.holders`, one pass)."""
    return await find_holders(served(request).graph.store, runs, looks=HOLDER_LOOKS)


async def visible_runs(
    request: Request,
    principal: Principal,
    *,
    thread_id: str | None = None,
    status: list[str] | None = None,
    limit: int = 100,
    before: RunRecord | None = None,
) -> list[RunRecord]:
    """Runs newest first, ``before`` a page's last run. A tenant-bound key's app is
    bound to its tenant, so the store lists that tenant's runs only (guarantee 15) and reads
    ``limit`` of them; :func:`tenancy.allows` stays as the routes' one check."""
    runs = await read(
        request,
        lambda g: g.aruns(thread_id=thread_id, status=status, limit=limit, before=before),
    )
    kept = [r for r in runs if tenancy.allows(principal, r.thread_id, r)]
    seen(request, {r.thread_id for r in kept})
    return kept


async def children_of(request: Request, principal: Principal, run_id: str) -> list[RunRecord]:
    """Runs made from ``run_id`` (replays and branches), the newest :data:`SCAN` of them."""
    runs = await graph(request).aruns(parent_run_id=run_id, limit=SCAN)
    kept = [r for r in runs if tenancy.allows(principal, r.thread_id, r)]
    seen(request, {r.thread_id for r in kept})
    return kept


async def history(
    request: Request, config: dict[str, Any], *, limit: int | None = None
) -> list[StateSnapshot]:
    """Checkpoints as the app pages them (newest first), gathered into a list."""
    return [s async for s in graph(request).aget_state_history(config, limit=limit)]


def ensure(condition: bool, error: ApiError) -> None:
    if not condition:
        raise error


__all__ = [
    "SCAN",
    "Served",
    "caller",
    "children_of",
    "code_needed",
    "ensure",
    "graph",
    "history",
    "holders",
    "masked_message",
    "need",
    "read",
    "request_masker",
    "seen",
    "served",
    "shown",
    "visible_run",
    "visible_runs",
    "visible_thread",
]
