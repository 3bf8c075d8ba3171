"""Runs belong to their app and tenant (guarantee 15), on memory, SQLite and PostgreSQL.

Two apps share one store: ``hr`` (an agent with a ``pay`` tool) and ``support``. Every
read and every command of ``support`` on an ``hr`` run, thread or effect is refused with
:class:`ForeignRunError` naming both apps, and leaves the run, its effects and the audit
log exactly as they were; listings show only the app's own runs. A tenant-bound app
(``app.for_tenant(...)``) sees only its tenant's runs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, TypedDict

import pytest

from oncegraph import Command, StateGraph, interrupt, tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, ForeignRunError, RunNotFoundError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

T = "t-hr"
USER = {"messages": [{"role": "user", "content": "pay Ann"}]}


def hr_app(checkpointer: Checkpointer, paid: list[str]) -> CompiledGraph:
    @tool(effect="irreversible", recipient="payroll", mask=["iban"])
    def pay(name: str, iban: str) -> str:
        """Pay an employee."""
        paid.append(name)
        return f"paid {name}"

    call = {"id": "c1", "name": "pay", "args": {"name": "Ann", "iban": "DE00123"}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Paid.")
    return ReactAgent(model=model, tools=[pay], name="hr").compile(checkpointer=checkpointer)


def support_app(checkpointer: Checkpointer) -> CompiledGraph:
    return ReactAgent(model=ScriptedModel.turns("Hello."), name="support").compile(
        checkpointer=checkpointer
    )


def refused(call: Any) -> ForeignRunError:
    with pytest.raises(ForeignRunError) as caught:
        call()
    return caught.value


def test_another_apps_run_is_refused_by_every_read_and_command(
    checkpointer: Checkpointer,
) -> None:
    paid: list[str] = []
    hr, support = hr_app(checkpointer, paid), support_app(checkpointer)
    assert hr.invoke(USER, {"thread_id": T})["messages"][-1]["content"] == "Paid."
    [run] = hr.runs(thread_id=T)
    assert (run.app_id, run.tenant, run.status) == ("hr", None, RunStatus.COMPLETED)
    [payment] = hr.effects(run_id=run.run_id, status="completed")[-1:]
    before = (hr.get_run(run.run_id), hr.effects(thread_id=T), hr.audit(run_id=run.run_id))
    cfg = {"thread_id": T}

    error = refused(lambda: support.get_run(run.run_id))
    text = str(error)
    assert "'hr'" in text and "'support'" in text and "compile(name=" in text
    assert isinstance(error, RunNotFoundError)  # a surface answering 404 hides the id
    assert (error.owner_app, error.app_id) == ("hr", "support")

    for name, call in {
        "get_state": lambda: support.get_state(cfg),
        "get_state at a checkpoint": lambda: support.get_state(
            {**cfg, "checkpoint_id": hr.get_state(cfg).config["configurable"]["checkpoint_id"]}
        ),
        "get_state_history": lambda: list(support.get_state_history(cfg)),
        "invoke new input": lambda: support.invoke(USER, cfg),
        "invoke None": lambda: support.invoke(None, cfg),
        "stream": lambda: list(support.stream(USER, cfg)),
        "submit": lambda: support.submit(USER, cfg),
        "resume": lambda: support.resume(run.run_id, actor="eve"),
        "resolve_effect": lambda: support.resolve_effect(
            payment.effect_id, "done", actor="eve", reason="x"
        ),
        "redeliver": lambda: support.redeliver(payment.effect_id, actor="eve", reason="x"),
        "replay": lambda: support.replay(run.run_id, reason="x", actor="eve"),
        "branch": lambda: support.branch(run.run_id, patch={}, reason="x", actor="eve"),
        "update_state": lambda: support.update_state(cfg, {"messages": []}),
        "abandon": lambda: support.abandon(cfg, actor="eve"),
        "effects by run": lambda: support.effects(run_id=run.run_id),
        "effects by thread": lambda: support.effects(thread_id=T),
        "audit by run": lambda: support.audit(run_id=run.run_id),
        "audit by thread": lambda: support.audit(thread_id=T),
    }.items():
        with pytest.raises(ForeignRunError, match="'hr'"):
            call()
            pytest.fail(f"{name} was not refused")

    # listings show only the app's own runs; nothing of hr's changed; no tool ran again
    assert support.runs() == [] and support.audit() == []
    assert [r.run_id for r in hr.runs()] == [run.run_id]
    assert (hr.get_run(run.run_id), hr.effects(thread_id=T), hr.audit(run_id=run.run_id)) == before
    assert paid == ["Ann"]


class Ask(TypedDict, total=False):
    answer: str


def asking(name: str, checkpointer: Checkpointer) -> CompiledGraph:
    def ask(state: Ask) -> Ask:
        return {"answer": str(interrupt("approve?"))}

    g = StateGraph(Ask, name=name)
    g.add_node("ask", ask)
    g.set_entry_point("ask")
    return g.compile(checkpointer=checkpointer)


def test_another_apps_interrupted_run_is_not_answered_continued_or_abandoned(
    checkpointer: Checkpointer,
) -> None:
    hr, support = asking("hr", checkpointer), asking("support", checkpointer)
    cfg = {"thread_id": "t-ask"}
    assert "__interrupt__" in hr.invoke({}, cfg)
    for call in (
        lambda: support.invoke(Command(resume="yes"), cfg),
        lambda: support.invoke(None, cfg),
        lambda: support.abandon(cfg),
    ):
        with pytest.raises(ForeignRunError, match="'support'"):
            call()
    [run] = hr.runs(thread_id="t-ask")
    assert run.status is RunStatus.INTERRUPTED
    assert hr.invoke(Command(resume="yes"), cfg) == {"answer": "yes"}


def test_a_tenant_bound_app_sees_only_its_tenants_runs(checkpointer: Checkpointer) -> None:
    app = asking("hr", checkpointer)
    acme, globex = app.for_tenant("acme"), app.for_tenant("globex")
    assert (app.tenant, acme.tenant, acme.app_id) == (None, "acme", "hr")
    acme.invoke({}, {"thread_id": "t-acme"})
    app.invoke({}, {"thread_id": "t-none"})  # an operator's run: no tenant
    [mine] = acme.runs()
    assert (mine.thread_id, mine.tenant, mine.app_id) == ("t-acme", "acme", "hr")

    error = refused(lambda: globex.get_run(mine.run_id))
    assert "'globex'" in str(error) and "acme" not in str(error)  # the other tenant unnamed
    for call in (
        lambda: globex.get_state({"thread_id": "t-acme"}),
        lambda: globex.invoke(Command(resume="no"), {"thread_id": "t-acme"}),
        lambda: globex.invoke({}, {"thread_id": "t-acme"}),
        lambda: globex.abandon({"thread_id": "t-acme"}),
        lambda: acme.get_state({"thread_id": "t-none"}),  # untenanted is not acme's
    ):
        refused(call)
    assert globex.runs() == []
    with pytest.raises(ConfigError, match="bound to tenant 'acme'"):
        acme.runs(tenant="globex")
    with pytest.raises(ConfigError, match="bound to tenant 'acme'"):
        acme.for_tenant("globex")

    # the unbound app (an operator's) sees every tenant, and filters by one
    assert {r.thread_id for r in app.runs()} == {"t-acme", "t-none"}
    assert [r.run_id for r in app.runs(tenant="acme")] == [mine.run_id]
    assert app.get_run(mine.run_id).tenant == "acme"
    # the tenant answers its own interrupt; the run keeps its tenant
    assert acme.invoke(Command(resume="ok"), {"thread_id": "t-acme"}) == {"answer": "ok"}
    assert acme.get_run(mine.run_id).tenant == "acme"
    assert acme.get_run(mine.run_id).status is RunStatus.COMPLETED


def test_an_apps_runs_page_after_page(checkpointer: Checkpointer) -> None:
    """``runs(before=...)`` (a page's last run, or its id) goes on after it: page after
    page, an app's and a tenant's listing is the whole one, in order; an unknown run id
    or another tenant's run is refused as a position, with what to do instead."""
    app = asking("hr", checkpointer)
    acme, globex = app.for_tenant("acme"), app.for_tenant("globex")
    for i in range(7):
        (acme if i % 2 else app).invoke({}, {"thread_id": f"t{i}"})
    globex.invoke({}, {"thread_id": "t-globex"})
    for listing in (app, acme):
        whole = listing.runs(limit=100)
        pages = [listing.runs(limit=3)]
        while len(pages[-1]) == 3:
            after = pages[-1][-1]
            pages.append(listing.runs(limit=3, before=after if len(pages) % 2 else after.run_id))
        assert [r.run_id for page in pages for r in page] == [r.run_id for r in whole]
    assert len(app.runs()) == 8 and len(acme.runs()) == 3
    newest = app.runs(limit=2)
    assert app.runs(limit=2, before=newest[0]) == app.runs(limit=3)[1:]
    with pytest.raises(RunNotFoundError, match="no run 'run-gone' to list runs after"):
        app.runs(before="run-gone")
    with pytest.raises(ConfigError, match="a run or a run id"):
        app.runs(before="")
    [theirs] = globex.runs()
    refused(lambda: acme.runs(before=theirs.run_id))
    # the operator's unbound app may go on after any tenant's run (globex's ran last)
    assert app.runs(before=theirs.run_id, tenant="acme") == acme.runs()


def test_an_apps_audit_log_is_its_own_page_after_page(checkpointer: Checkpointer) -> None:
    """An app's (and a tenant's) audit log is read from the store as its own: a page of
    ``limit`` holds the app's newest records however many newer ones other apps wrote,
    and ``before=`` goes on with the app's older ones; nothing of another app shows."""
    hr, support = asking("hr", checkpointer), asking("support", checkpointer)
    acme = hr.for_tenant("acme")
    for app, thread, reason in [
        (acme, "t-acme", "acme's"),
        (hr, "t-hr", "hr's"),
        *((support, f"t-s{i}", f"support's {i}") for i in range(5)),
    ]:
        app.invoke({}, {"thread_id": thread})  # waits for its answer
        app.abandon({"thread_id": thread}, reason=reason)
    # support's five are the newest records: hr's first page is still hr's newest
    assert [a.reason for a in hr.audit(limit=1)] == ["hr's"]
    first = hr.audit(limit=1)[0]
    assert [a.reason for a in hr.audit(limit=1, before=first.at)] == ["acme's"]
    assert hr.audit(limit=1, before=first) == hr.audit(limit=1, before=first.at)
    assert [a.reason for a in hr.audit()] == ["hr's", "acme's"]
    assert [a.reason for a in acme.audit(limit=1)] == ["acme's"]
    assert [a.reason for a in hr.for_tenant("globex").audit()] == []
    assert [a.reason for a in support.audit(limit=2)] == ["support's 4", "support's 3"]
    assert len(support.audit()) == 5


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_migration_keeps_existing_runs_with_their_app(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A database at schema version 4 with a run an older oncegraph wrote: the migration
    gives the run the app that named it (its workflow_name), and that app reads it."""
    from oncegraph.storage.sql import statements as S
    from oncegraph.storage.sql.migrate import CREATE_VERSION_TABLE, INSERT_VERSION
    from oncegraph.storage.sql.schema import MIGRATIONS

    old_columns = S.RUN_COLUMNS[: S.RUN_COLUMNS.index("updated_at") + 1]
    row = ("run-old", "t-old", "completed", "hr", "1", 1, "sha256:old", None, None, "invoke")
    row += (None, None, "{}", None, None, None, 0, 1.0, 1.0)
    insert = f"INSERT INTO oncegraph_runs ({', '.join(old_columns)}) VALUES "
    insert += f"({', '.join('?' for _ in old_columns)})"
    if kind == "sqlite":
        path = tmp_path / "old.db"
        conn = sqlite3.connect(path)
        execute = conn.execute
        mark = "?"
    else:
        import psycopg

        dsn = str(request.getfixturevalue("fresh_dsn"))
        conn = psycopg.connect(dsn, autocommit=True)  # type: ignore[assignment]
        execute = conn.execute
        mark = "%s"
    try:
        execute(CREATE_VERSION_TABLE)
        for version, statements in enumerate(MIGRATIONS[:4], start=1):
            for statement in statements:
                execute(statement)
            execute(INSERT_VERSION.replace("?", mark), (version, 1.0))
        execute(insert.replace("?", mark), row)
        conn.commit()
    finally:
        conn.close()

    store: Checkpointer
    if kind == "sqlite":
        store = SqliteCheckpointer(path)
    else:
        from oncegraph.storage.checkpointer import PgCheckpointer

        store = PgCheckpointer(dsn)
    hr, support = asking("hr", store), asking("support", store)
    try:
        old = hr.get_run("run-old")  # setup() migrated the database
        assert (old.app_id, old.tenant, old.workflow_name) == ("hr", None, "hr")
        assert [r.run_id for r in hr.runs()] == ["run-old"]
        assert support.runs() == []
        refused(lambda: support.get_run("run-old"))
    finally:
        hr.close()


def test_effects_of_a_tenants_runs(checkpointer: Checkpointer) -> None:
    paid: list[str] = []
    hr = hr_app(checkpointer, paid)
    acme = hr.for_tenant("acme")
    acme.invoke(USER, {"thread_id": "t-acme"})
    hr.invoke(USER, {"thread_id": "t-ops"})
    theirs = acme.effects(thread_id="t-acme")
    assert theirs and {e.thread_id for e in theirs} == {"t-acme"}
    assert hr.effects(thread_id="t-acme", tenant="acme") == theirs
    assert hr.effects(thread_id="t-acme", tenant="globex") == []
    assert hr.effects(thread_id="t-ops", tenant="acme") == []
    assert hr.effects(thread_id="t-ops")
    refused(lambda: acme.effects(thread_id="t-ops"))
    assert paid == ["Ann", "Ann"]
