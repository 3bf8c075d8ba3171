"""Which statement lists runs for a set of filters: the arms :func:`statements.run_list`
merges, chosen with what the database holds (one small read at most).

Invariants:

* **A listing reads about the rows it returns.** Every shape but the thread's (whose own
  index finds its few runs) is a merge of index walks, each newest first and cut at the
  limit; the choices below only pick which index each arm walks.
* **The answer does not depend on the choice.** Every shape returns the runs matching
  the filters, newest first (``created_at``, then ``run_id``), cut at the limit.
* **Runs with no app_id** (an older oncegraph's, read as their workflow_name's) are read
  by their own arm while the database holds any; a database found without them is
  remembered as such (none are written since schema migration 5), so its listings skip
  that arm, where a planner could walk a whole index to find nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from oncegraph.storage.sql import statements as S

Read = Callable[[str, Sequence[Any]], Awaitable[list[Any]]]
"""Run one ``?``-placeholder statement on the store and return its rows."""


class Shape(NamedTuple):
    """:func:`statements.run_list`'s keywords: the statement's shape (hashable, so a
    store can keep each shape's text converted once)."""

    by_thread: bool
    n_statuses: int
    by_app: bool
    by_tenant: bool
    n_apps: int = 0
    by_status: bool = False
    legacy: bool = True
    by_parent: bool = False
    by_before: bool = False

    def sql(self) -> str:
        return _sql(self)


@lru_cache(maxsize=64)
def _sql(shape: Shape) -> str:
    return S.run_list(**shape._asdict())


class RunListing:
    """One store's listing planner (see the module docstring).

    ``count_statuses``: the store's planner keeps no statistics of a status's runs
    (SQLite), so for an app's runs of some statuses it counts theirs first (up to
    :data:`statements.RARE_STATUS`) and walks the statuses' index when they are fewer.
    """

    def __init__(self, *, count_statuses: bool) -> None:
        self.count_statuses = count_statuses
        self._no_legacy = False  # found without runs lacking an app_id: stays so

    async def plan(
        self,
        read: Read,
        *,
        thread_id: str | None,
        statuses: Sequence[str],
        app_id: str | None,
        tenant: str | None,
        limit: int,
        parent_run_id: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> tuple[Shape, list[Any]]:
        """The statement's shape and its parameters for these filters (``before``: only
        the runs listed after the run at ``(created_at, run_id)``, the next page's)."""
        statuses = list(dict.fromkeys(statuses))  # one arm a status: each once
        if thread_id is not None or parent_run_id is not None:  # a few runs: filtered
            shape = Shape(
                thread_id is not None,
                len(statuses),
                app_id is not None,
                tenant is not None,
                by_parent=parent_run_id is not None,
                by_before=before is not None,
            )
            return shape, S.run_list_params(
                thread_id=thread_id,
                statuses=statuses,
                app_id=app_id,
                tenant=tenant,
                limit=limit,
                parent_run_id=parent_run_id,
                before=before,
            )
        apps: list[str] = []
        by_status = False
        if app_id is None and not statuses:  # every app's: app by app
            apps = [app for (app,) in await read(S.RUN_APPS, [S.APP_ARMS_MAX + 1])]
            if len(apps) > S.APP_ARMS_MAX:
                apps = []
        elif app_id is not None and statuses and self.count_statuses:
            ((found,),) = await read(S.status_count(len(statuses)), [*statuses, S.RARE_STATUS])
            by_status = found < S.RARE_STATUS
        legacy = (app_id is not None or bool(apps)) and not by_status
        if legacy and not self._no_legacy:
            self._no_legacy = not await read(S.RUN_LEGACY, ())
        legacy = legacy and not self._no_legacy
        shape = Shape(
            False,
            len(statuses),
            app_id is not None,
            tenant is not None,
            len(apps),
            by_status,
            legacy,
            by_before=before is not None,
        )
        params = S.run_list_params(
            thread_id=None,
            statuses=statuses,
            app_id=app_id,
            tenant=tenant,
            limit=limit,
            apps=apps,
            by_status=by_status,
            legacy=legacy,
            before=before,
        )
        return shape, params


__all__ = ["Read", "RunListing", "Shape"]
