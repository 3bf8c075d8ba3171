"""The run config at the edge: ids a caller gives, the keys it may use, and which
timeouts a continue of a stored run goes on with.

* An id taken from a caller (thread, run, checkpoint, effect) holding a control, format
  or line-separator character (U+0085 NEXT LINE, U+2028, U+2029, bidi overrides,
  zero-width characters, NUL) is a ``ConfigError`` naming the character and where it is;
  nothing is written.
* A top-level key that is not a run option (``tool_timout``) is a ``ConfigError`` naming
  the closest valid key, instead of a silent default; LangGraph's config shape keeps
  working and ``configurable`` stays free-form.
* Continuing a stored run (``invoke(None, config)``, an interrupt's answer,
  ``app.resume``): the timeouts the call names win, the others are the run's stored ones.

Every store, every run path.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, NodeError, NodeTimeoutError
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture

SHORT = 0.05  # seconds: a stored node_timeout the slow node overruns
SLOW = 0.5  # how long the slow node takes once it gets that far
LONG = 30.0  # a timeout the slow node never reaches


class S(TypedDict, total=False):
    x: int
    done: str
    seen: str


def _echo(checkpointer: Checkpointer | None) -> CompiledGraph:
    def node(state: S, config: dict[str, Any]) -> dict[str, Any]:
        return {"x": state.get("x", 0) + 1, "seen": str(config["configurable"].get("user_id"))}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g.compile(checkpointer=checkpointer)


# -- ids a caller gives -----------------------------------------------------------------

FORGING = [
    ("t\u2028FORGED INFO worker finished", "U+2028 LINE SEPARATOR at position 1"),
    ("t\u2029x", "U+2029 PARAGRAPH SEPARATOR at position 1"),
    ("ab\x85FORGED", "U+0085 NEXT LINE at position 2"),
    ("t\u202eevil", "U+202E RIGHT-TO-LEFT OVERRIDE at position 1"),
    ("t\u2066x", "U+2066 LEFT-TO-RIGHT ISOLATE at position 1"),
    ("t\u200bx", "U+200B ZERO WIDTH SPACE at position 1"),
    ("t\ufeff", "U+FEFF ZERO WIDTH NO-BREAK SPACE at position 1"),
    ("t\x00", "U+0000 NUL at position 1"),
    ("t\r\nINFO forged", "U+000D CARRIAGE RETURN at position 1"),
    ("t\x1b[2J", "U+001B ESCAPE at position 1"),
    ("t\udc80", "U+DC80 (a lone surrogate) at position 1"),
]


def test_a_thread_id_with_an_invisible_or_control_character_is_refused_naming_it(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _echo(checkpointer)
    for forged, named in FORGING:
        said = re.escape(f"holds {named}")
        with pytest.raises(ConfigError, match=f"thread_id must not contain .*{said}"):
            run_path(app, {"x": 1}, {"thread_id": forged})
        with pytest.raises(ConfigError, match=said):  # LangGraph's spelling too
            run_path(app, {"x": 1}, {"configurable": {"thread_id": forged}})
        with pytest.raises(ConfigError, match=said):
            app.get_state({"thread_id": forged})
    assert app.runs() == []  # nothing was written


def test_visible_unicode_ids_are_kept_as_they_are(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _echo(checkpointer)
    thread = "café ☕ 東京 order-1042 😀"
    assert run_path(app, {"x": 1}, {"thread_id": thread})["x"] == 2
    (run,) = app.runs(thread_id=thread)
    assert run.thread_id == thread and run.status is RunStatus.COMPLETED


def test_run_checkpoint_and_effect_ids_from_a_caller_are_checked_too(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _echo(checkpointer)
    run_path(app, {"x": 1}, {"thread_id": "t"})
    (run,) = app.runs(thread_id="t")
    bad_run = run.run_id + "\u2028forged"
    with pytest.raises(ConfigError, match=r"run_id must not contain .*U\+2028"):
        run_path(app, None, {"thread_id": "t", "run_id": bad_run})
    with pytest.raises(ConfigError, match=r"run_id must not contain .*U\+2028"):
        run_path(app, None, {"configurable": {"thread_id": "t", "run_id": bad_run}})
    with pytest.raises(ConfigError, match=r"checkpoint_id must not contain .*U\+202E"):
        run_path(app, None, {"thread_id": "t", "checkpoint_id": "cp\u202e"})
    with pytest.raises(ConfigError, match=r"run_id must not contain .*U\+0085"):
        app.get_run("run\x85x")
    with pytest.raises(ConfigError, match=r"run_id must not contain .*U\+2029"):
        app.resume("run\u2029x", actor="ana")
    with pytest.raises(ConfigError, match=r"effect_id must not contain .*U\+2028"):
        app.resolve_effect("e\u2028", "done", actor="ana", reason="checked")
    after = app.runs(thread_id="t")
    assert [(r.run_id, r.status) for r in after] == [(run.run_id, RunStatus.COMPLETED)]


# -- the keys a config may hold ---------------------------------------------------------


def test_a_misspelt_control_key_is_refused_naming_the_right_one(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _echo(checkpointer)
    for wrong, right in [
        ("tool_timout", "tool_timeout"),
        ("node_timeot", "node_timeout"),
        ("recursion_limt", "recursion_limit"),
        ("tool_grce", "tool_grace"),
        ("threadid", "thread_id"),
        ("configurables", "configurable"),
    ]:
        config = {"thread_id": "t", wrong: 1}
        with pytest.raises(ConfigError, match=rf"{wrong}.*did you mean '{right}'"):
            run_path(app, {"x": 1}, config)
    with pytest.raises(ConfigError, match=r"'customer'.*config\['configurable'\]"):
        run_path(app, {"x": 1}, {"thread_id": "t", "customer": "ada"})
    with pytest.raises(ConfigError, match="config keys must be strings"):
        keyed: dict[Any, Any] = {"thread_id": "t", 1: "x"}
        run_path(app, {"x": 1}, keyed)
    with pytest.raises(ConfigError, match="did you mean 'tool_timeout'"):
        app.get_state({"thread_id": "t", "tool_timout": 1})
    assert app.runs() == []  # nothing ran with a default the caller did not want


def test_langgraph_config_keys_work_and_configurable_is_free_form(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _echo(checkpointer)
    config = {
        "configurable": {"thread_id": "t", "user_id": "ada", "tool_timout": "a plain value"},
        "tags": ["support"],
        "metadata": {"source": "test"},
        "callbacks": [],
        "run_name": "refund",
        "max_concurrency": 4,
        "recursion_limit": 10,
    }
    out = run_path(app, {"x": 1}, config)
    assert out["x"] == 2 and out["seen"] == "ada"
    (run,) = app.runs(thread_id="t")
    assert run.config["recursion_limit"] == 10
    assert run.config["tool_timeout"] == 300.0  # inside configurable: a value, not a control


# -- a continue goes on with the run's stored timeouts unless the call names others ------


def _flaky(checkpointer: Checkpointer) -> tuple[CompiledGraph, list[int]]:
    """``slow`` fails its first attempt (the run stops ``failed`` with the timeouts it was
    started with stored), then takes SLOW seconds."""
    attempts: list[int] = []

    async def slow(state: S) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("the first attempt fails")
        await asyncio.sleep(SLOW)
        return {"done": "yes"}

    g = StateGraph(S)
    g.add_node("slow", slow)
    g.add_edge(START, "slow")
    g.add_edge("slow", END)
    return g.compile(checkpointer=checkpointer), attempts


def test_invoke_none_continues_with_the_runs_stored_timeouts_unless_named(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app, attempts = _flaky(checkpointer)
    with pytest.raises((NodeError, RuntimeError)):
        run_path(app, {"x": 1}, {"thread_id": "t", "node_timeout": SHORT})
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.FAILED and run.config["node_timeout"] == SHORT
    # named nothing: the stored node_timeout (SHORT), not the default (900 s)
    with pytest.raises(NodeTimeoutError, match=f"node_timeout={SHORT}"):
        run_path(app, None, {"thread_id": "t"})
    assert len(attempts) == 2
    # named: this call's timeout wins
    assert run_path(app, None, {"thread_id": "t", "node_timeout": LONG})["done"] == "yes"
    (after,) = app.runs(thread_id="t")
    assert after.run_id == run.run_id and after.status is RunStatus.COMPLETED
    assert after.config["node_timeout"] == SHORT  # what is stored is left as it was


def test_an_interrupt_answer_goes_on_with_the_runs_stored_timeouts_unless_named(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    def ask(state: S) -> dict[str, Any]:
        return {"done": str(interrupt("go on?"))}

    async def slow(state: S) -> dict[str, Any]:
        await asyncio.sleep(SLOW)
        return {"x": 1}

    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_node("slow", slow)
    g.add_edge(START, "ask")
    g.add_edge("ask", "slow")
    g.add_edge("slow", END)
    app = g.compile(checkpointer=checkpointer)
    for thread, named in (("stored", {}), ("named", {"node_timeout": LONG})):
        out = run_path(app, {"x": 0}, {"thread_id": thread, "node_timeout": SHORT})
        assert out["__interrupt__"]
        answer = Command(resume="yes")
        if named:
            assert run_path(app, answer, {"thread_id": thread, **named})["done"] == "yes"
        else:
            with pytest.raises(NodeTimeoutError, match=f"node_timeout={SHORT}"):
                run_path(app, answer, {"thread_id": thread})


@pytest.mark.parametrize("how", ["resume", "aresume"])
def test_app_resume_follows_the_same_rule(checkpointer: Checkpointer, how: str) -> None:
    app, attempts = _flaky(checkpointer)
    with pytest.raises((NodeError, RuntimeError)):
        app.invoke({"x": 1}, {"thread_id": "t", "node_timeout": SHORT})
    (run,) = app.runs(thread_id="t")

    def resume(**options: Any) -> dict[str, Any]:
        if how == "resume":
            return app.resume(run.run_id, actor="ana", **options)
        return run_sync(app.aresume(run.run_id, actor="ana", **options), "aresume")

    with pytest.raises(NodeTimeoutError, match=f"node_timeout={SHORT}"):
        resume()
    with pytest.raises(NodeTimeoutError, match=f"node_timeout={SHORT}"):
        resume(config={"tool_timeout": LONG})  # named another setting: this one is stored
    assert resume(config={"node_timeout": LONG})["done"] == "yes"
    assert len(attempts) == 4
