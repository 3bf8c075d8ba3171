"""The LangGraph-suite runner's own parts, without a LangGraph checkout: the import
redirection (names land on oncegraph's documented objects; a name with no equivalent
imports and raises when used), the cause rules, and the deselect list's shape."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "langgraph_suite"


def _load(name: str) -> ModuleType:
    """The runner's module ``name``, under a name of its own (no clash on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"_lgsuite_{name}", SUITE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lg_shim = _load("lg_shim")
causes = _load("causes")
selection = _load("selection")


@pytest.fixture
def redirected(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The finder installed for one test; every ``langgraph`` module dropped after."""
    monkeypatch.setattr(sys, "meta_path", [lg_shim.LangGraphFinder(), *sys.meta_path])
    yield
    for name in [n for n in sys.modules if n == "langgraph" or n.startswith("langgraph.")]:
        del sys.modules[name]


def test_langgraph_names_land_on_oncegraphs_documented_objects(redirected: None) -> None:
    from langgraph.checkpoint.memory import InMemorySaver, MemorySaver  # type: ignore
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # type: ignore
    from langgraph.graph import END, START, StateGraph  # type: ignore
    from langgraph.graph.message import add_messages  # type: ignore
    from langgraph.graph.state import StateGraph as DeepStateGraph  # type: ignore
    from langgraph.types import Command, Send, interrupt  # type: ignore

    import oncegraph
    from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer

    assert (StateGraph, START, END) == (oncegraph.StateGraph, oncegraph.START, oncegraph.END)
    assert DeepStateGraph is oncegraph.StateGraph  # a parent package's export
    assert (Command, Send, interrupt) == (oncegraph.Command, oncegraph.Send, oncegraph.interrupt)
    assert add_messages is oncegraph.add_messages
    assert InMemorySaver is MemorySaver is InMemoryCheckpointer  # a documented rename
    assert AsyncSqliteSaver is SqliteCheckpointer
    import langgraph.checkpoint  # type: ignore

    assert langgraph.checkpoint.memory is sys.modules["langgraph.checkpoint.memory"]


def test_a_name_without_equivalent_imports_and_fails_when_used(redirected: None) -> None:
    from langgraph.channels import NamedBarrierValue  # type: ignore
    from langgraph.pregel.remote import RemoteGraph  # type: ignore
    from langgraph.types import _private_helper  # type: ignore

    assert lg_shim.is_placeholder(NamedBarrierValue) and lg_shim.is_placeholder(_private_helper)
    with pytest.raises(lg_shim.NoOncegraphEquivalentError) as called:
        NamedBarrierValue(int)
    assert str(called.value) == (
        "no oncegraph equivalent: langgraph.channels.NamedBarrierValue (used: call)"
    )
    with pytest.raises(lg_shim.NoOncegraphEquivalentError, match="used: subscript"):
        RemoteGraph[int]
    with pytest.raises(lg_shim.NoOncegraphEquivalentError, match="used: isinstance"):
        isinstance(1, RemoteGraph)
    with pytest.raises(lg_shim.NoOncegraphEquivalentError, match="used: attribute nodes"):
        RemoteGraph.nodes  # noqa: B018

    class Mine(RemoteGraph):  # LangGraph's helpers subclass such names at import time
        pass

    with pytest.raises(lg_shim.NoOncegraphEquivalentError, match="call of subclass Mine"):
        Mine()


def test_only_names_in_a_modules_all_count_as_documented(
    redirected: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import oncegraph.types

    monkeypatch.setattr(oncegraph.types, "Hidden", object(), raising=False)
    from langgraph.types import Hidden  # type: ignore

    assert lg_shim.is_placeholder(Hidden)  # an internal that shares a name is never used
    monkeypatch.setattr(oncegraph.types, "__all__", [*oncegraph.types.__all__, "Shown"])
    monkeypatch.setattr(oncegraph.types, "Shown", object(), raising=False)
    from langgraph.types import Shown  # type: ignore

    assert Shown is oncegraph.types.Shown  # a sed twin wins as soon as it is exported


def _failure(message: str, text: str = "", source: str = "", nodeid: str = "t.py::t") -> object:
    return causes.Failure(nodeid=nodeid, phase="call", message=message, text=text, source=source)


def test_cause_rules_load_and_name_known_failures() -> None:
    rules = causes.load_rules()
    assert len(rules) >= 20
    absent = _failure(
        "lg_shim.NoOncegraphEquivalentError: no oncegraph equivalent: "
        "langgraph.func.task (used: call)"
    )
    assert "functional API" in causes.classify(absent, rules)
    timeout = _failure("Failed: Timeout (>30.0s) from pytest-timeout.")
    assert "timeout" in causes.classify(timeout, rules)
    nothing = _failure("AssertionError: assert 1 == 2")
    assert causes.classify(nothing, rules) == causes.OTHER


def test_a_bad_rule_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "causes.toml"
    bad.write_text('[[cause]]\nname = "x"\nmesage = "typo"\n')
    with pytest.raises(ValueError, match=r"rule 'x' has unknown fields \['mesage'\]"):
        causes.load_rules(bad)
    bad.write_text('[[cause]]\nname = "x"\n')
    with pytest.raises(ValueError, match="matches nothing"):
        causes.load_rules(bad)


def test_the_deselect_list_names_only_selected_files() -> None:
    listed = selection.deselected_for(selection.DEFAULT_TAG)
    assert set(listed) <= set(selection.FILES)
    assert len(selection.FILES) == 19
    for names in listed.values():
        assert len(names) == len(set(names)), "a deselected test is listed twice"


def test_the_functional_api_resolves_to_its_twin(redirected: None) -> None:
    from langgraph.func import entrypoint, task  # type: ignore

    import oncegraph.func

    assert entrypoint is oncegraph.func.entrypoint and task is oncegraph.func.task
