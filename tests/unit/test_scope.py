"""Guarantee 15's pure parts: who a scope admits, and fingerprints that tell apps apart."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from oncegraph import StateGraph, ToolNode, tool
from oncegraph.errors import ConfigError, ForeignRunError, RunNotFoundError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runs.scope import Scope
from oncegraph.storage.records import RunRecord, RunStatus


def run(app: str = "hr", tenant: str | None = None, **changes: Any) -> RunRecord:
    return RunRecord("r1", "t1", RunStatus.RUNNING, workflow_name=app, tenant=tenant, **changes)


def test_a_run_belongs_to_its_workflow_name_unless_told_otherwise() -> None:
    assert run("hr").app_id == "hr" == run("hr").app
    assert run("hr", app_id="payroll").app == "payroll"


def test_scope_admits_its_app_and_tenant_only() -> None:
    hr, acme = Scope("hr"), Scope("hr", "acme")
    assert hr.admits(run("hr")) and hr.admits(run("hr", "acme"))
    assert not hr.admits(run("support"))
    assert acme.admits(run("hr", "acme"))
    assert not acme.admits(run("hr")) and not acme.admits(run("hr", "globex"))
    assert not acme.admits(run("support", "acme"))
    with pytest.raises(ForeignRunError) as caught:
        hr.check(run("support"), "thread 't1'")
    text = str(caught.value)
    assert text.startswith("thread 't1' belongs to app 'support', not to this app 'hr'")
    assert isinstance(caught.value, RunNotFoundError)
    with pytest.raises(ForeignRunError) as other_tenant:
        acme.check(run("hr", "globex"))
    assert "globex" not in str(other_tenant.value) and "'acme'" in str(other_tenant.value)
    for bad in ("", "  ", None):
        with pytest.raises(ConfigError):
            Scope(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Scope("hr", "")


@tool(effect="write", dedup="never called")
def charge(order_id: str, amount: float) -> str:
    """Charge an order."""
    return "ok"


@tool(effect="irreversible")
def refund(order_id: str) -> str:
    """Refund an order."""
    return "ok"


@tool(effect="irreversible", name="charge")
def charge_irreversibly(order_id: str, amount: float) -> str:
    """Charge an order."""
    return "ok"


@tool(effect="write", name="charge", dedup="never called")
def charge_in_cents(order_id: str, cents: int) -> str:
    """Charge an order."""
    return "ok"


def fingerprint(*tools: Any, prompt: str | None = None, model: Any = None) -> str:
    agent = ReactAgent(model or ScriptedModel.turns("x"), system_prompt=prompt, tools=tools)
    return agent.compile().fingerprint


def test_default_named_agents_differ_by_tools_model_and_prompt() -> None:
    base = fingerprint(charge)
    # built again, with another script of the same model: the same agent
    assert fingerprint(charge, model=ScriptedModel.turns("y", "z")) == base
    others = [
        fingerprint(refund),
        fingerprint(charge, refund),
        fingerprint(charge_irreversibly),  # same name, another effect class
        fingerprint(charge_in_cents),  # same name, another schema
        fingerprint(charge, prompt="You charge orders."),
        fingerprint(charge, model=ScriptedModel.turns("x", name="other")),
    ]
    assert len({base, *others}) == len(others) + 1


class S(TypedDict, total=False):
    messages: list[Any]


def test_a_tool_node_adds_its_tools_and_plain_functions_add_nothing() -> None:
    def graph(node: Any) -> str:
        g = StateGraph(S)
        g.add_node("tools", node)
        g.set_entry_point("tools")
        return g.compile().fingerprint

    def plain(state: S) -> S:
        return {}

    def other_plain(state: S) -> S:
        return {"messages": []}

    assert graph(plain) == graph(other_plain)
    assert graph(ToolNode([charge])) == graph(ToolNode([charge]))
    assert graph(ToolNode([charge])) != graph(ToolNode([refund]))
    assert graph(ToolNode([charge])) != graph(plain)
