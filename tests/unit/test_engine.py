"""The pure engine: routing and step application, with no event loop and no store.

A run is driven here by hand: ``empty_head`` -> ``advance`` (input) -> ``advance``
(each step), checking what the driver would commit (guarantee 1: the next nodes are in the
checkpoint before they run) and that log channels are never copied into checkpoints.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, add_messages
from oncegraph.errors import GraphValidationError, InvalidUpdateError
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.engine import Head, TaskResult, advance, empty_head, next_nodes


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    hits: Annotated[list[str], operator.add]
    route: str
    x: int


def _node(state: S) -> None:  # never called: the engine does not run nodes
    raise AssertionError("the engine must not call nodes")


def _spec(build: Any = None) -> GraphSpec:
    g = StateGraph(S)
    for name in ("a", "b", "c", "d"):
        g.add_node(name, _node)
    g.add_edge(START, "a")
    if build is None:
        g.add_edge("a", "b")
        g.add_edge("b", END)
    else:
        build(g)
    return g.validate()


def _start(spec: GraphSpec, update: dict[str, Any]) -> Head:
    head, _, _ = advance(
        spec,
        empty_head(spec, "t1"),
        "run_1",
        [TaskResult(START, update)],
        step=-1,
        source="input",
    )
    return head


def test_empty_head_has_initial_values_and_zero_logs() -> None:
    spec = _spec()
    head = empty_head(spec, "t1")
    assert head.version == 0
    assert head.checkpoint.next == ()
    assert dict(head.checkpoint.logs) == {"messages": 0, "hits": 0}
    assert head.values == {"messages": [], "hits": []}


def test_input_checkpoint_records_the_first_node_before_it_runs() -> None:
    spec = _spec()
    head, entries, _ = advance(
        spec,
        empty_head(spec, "t1"),
        "run_1",
        [TaskResult(START, {"messages": "hi", "x": 1})],
        step=-1,
        source="input",
    )
    cp = head.checkpoint
    assert cp.next == ("a",)
    assert (cp.step, cp.version, cp.run_id, cp.thread_id) == (-1, 1, "run_1", "t1")
    assert cp.parent_checkpoint_id is None
    assert cp.metadata == {"source": "input", "writes": [START]}
    assert dict(cp.values) == {"x": 1}  # log channels are not stored in the checkpoint
    assert dict(cp.logs) == {"messages": 1, "hits": 0}
    assert [(e.channel, e.seq) for e in entries] == [("messages", 0)]
    assert head.values["messages"][0]["content"] == "hi"


def test_steps_chain_parents_versions_and_log_sequence_numbers() -> None:
    spec = _spec()
    h0 = _start(spec, {"messages": "one"})
    h1, e1, _ = advance(
        spec, h0, "run_1", [TaskResult("a", {"messages": ["two", "three"]})], step=0, source="loop"
    )
    h2, e2, _ = advance(
        spec, h1, "run_1", [TaskResult("b", {"messages": "four"})], step=1, source="loop"
    )
    assert h1.checkpoint.parent_checkpoint_id == h0.checkpoint.checkpoint_id
    assert h2.checkpoint.parent_checkpoint_id == h1.checkpoint.checkpoint_id
    assert [h.version for h in (h0, h1, h2)] == [1, 2, 3]
    assert [e.seq for e in e1] == [1, 2] and [e.seq for e in e2] == [3]
    assert h1.checkpoint.next == ("b",) and h2.checkpoint.next == ()
    assert dict(h2.checkpoint.logs)["messages"] == 4
    assert [m["content"] for m in h2.values["messages"]] == ["one", "two", "three", "four"]
    # the earlier heads are unchanged (no shared mutable lists)
    assert len(h0.values["messages"]) == 1 and len(h1.values["messages"]) == 3


def test_checkpoint_size_does_not_grow_with_the_log() -> None:
    spec = _spec(lambda g: g.add_edge("a", "a"))
    head = _start(spec, {"messages": "start"})
    sizes = set()
    for step in range(50):
        head, entries, _ = advance(
            spec,
            head,
            "run_1",
            [TaskResult("a", {"messages": f"m{step}" * 10})],
            step=step,
            source="loop",
        )
        assert len(entries) == 1
        sizes.add(repr(dict(head.checkpoint.values)))
    assert sizes == {"{}"}
    assert dict(head.checkpoint.logs)["messages"] == 51


def test_fan_out_merges_writes_with_reducers_in_declaration_order() -> None:
    def build(g: StateGraph) -> None:
        g.add_edge("a", "c")
        g.add_edge("a", "b")  # declared b before c: results ordered by node declaration
        g.add_edge(["b", "c"], "d")

    spec = _spec(build)
    h0 = _start(spec, {})
    h1, _, _ = advance(spec, h0, "r", [TaskResult("a", {})], step=0, source="loop")
    assert h1.checkpoint.next == ("b", "c")
    h2, entries, writes = advance(
        spec,
        h1,
        "r",
        [TaskResult("b", {"hits": ["b"]}), TaskResult("c", {"hits": ["c"]})],
        step=1,
        source="loop",
    )
    assert h2.values["hits"] == ["b", "c"]
    assert [e.value for e in entries] == ["b", "c"]
    assert h2.checkpoint.next == ("d",)  # both reach d: it runs once
    assert writes.changed == {"hits"}


def test_fan_out_writing_a_last_value_field_twice_is_an_error() -> None:
    spec = _spec(lambda g: (g.add_edge("a", "b"), g.add_edge("a", "c")))
    h1, _, _ = advance(spec, _start(spec, {}), "r", [TaskResult("a", {})], step=0, source="loop")
    with pytest.raises(InvalidUpdateError, match="'b' and 'c' both wrote 'x'"):
        advance(
            spec,
            h1,
            "r",
            [TaskResult("b", {"x": 1}), TaskResult("c", {"x": 2})],
            step=1,
            source="loop",
        )


def test_conditional_edges_with_path_map_and_list_returns() -> None:
    def build(g: StateGraph) -> None:
        g.add_conditional_edges("a", lambda s: s["route"], {"left": "b", "right": "c", "stop": END})
        g.add_conditional_edges("b", lambda s: ["c", "d"])

    spec = _spec(build)
    head = _start(spec, {})
    assert next_nodes(spec, {"route": "left"}, [TaskResult("a", {})]) == ("b",)
    assert next_nodes(spec, {"route": "right"}, [TaskResult("a", {})]) == ("c",)
    assert next_nodes(spec, {"route": "stop"}, [TaskResult("a", {})]) == ()
    assert next_nodes(spec, {}, [TaskResult("b", {})]) == ("c", "d")
    # the router sees the state AFTER the step's writes
    h1, _, _ = advance(
        spec, head, "r", [TaskResult("a", {"route": "right"})], step=0, source="loop"
    )
    assert h1.checkpoint.next == ("c",)


def test_router_list_may_mix_path_map_keys() -> None:
    spec = _spec(lambda g: g.add_conditional_edges("a", lambda s: ["x", "y"], {"x": "b", "y": "d"}))
    assert next_nodes(spec, {}, [TaskResult("a", {})]) == ("b", "d")


def test_router_returning_unknown_node_names_it() -> None:
    spec = _spec(lambda g: g.add_conditional_edges("a", lambda s: "zzz"))
    with pytest.raises(GraphValidationError, match="router of 'a' returned 'zzz'"):
        next_nodes(spec, {}, [TaskResult("a", {})])


def test_command_goto_routes_and_unknown_goto_is_named() -> None:
    spec = _spec()
    assert next_nodes(spec, {}, [TaskResult("a", {}, goto=("d",))]) == ("b", "d")
    assert next_nodes(spec, {}, [TaskResult("b", {}, goto=(END,))]) == ()
    with pytest.raises(GraphValidationError, match=r"'a' returned Command\(goto='q'\)"):
        next_nodes(spec, {}, [TaskResult("a", {}, goto=("q",))])


def test_advance_is_pure_and_deterministic_in_its_values() -> None:
    spec = _spec()
    h0 = _start(spec, {"x": 1})
    before = (dict(h0.values), h0.checkpoint)
    one, _, _ = advance(spec, h0, "r", [TaskResult("a", {"x": 2})], step=0, source="loop")
    two, _, _ = advance(spec, h0, "r", [TaskResult("a", {"x": 2})], step=0, source="loop")
    assert (dict(h0.values), h0.checkpoint) == before
    assert one.values == two.values and one.checkpoint.next == two.checkpoint.next
    assert one.checkpoint.checkpoint_id != two.checkpoint.checkpoint_id


# -- the step's decision: plan_step + decide, with no event loop and no store --------------

from oncegraph.errors import CorruptRecordError, _CrashSignal  # noqa: E402
from oncegraph.runtime.decisions import (  # noqa: E402
    Commit,
    Crash,
    Fail,
    Interrupt,
    Park,
    decide,
)
from oncegraph.runtime.engine import TaskOutcome, plan_step  # noqa: E402
from oncegraph.storage.records import RunStatus, TaskWrite  # noqa: E402


def _fan_out() -> tuple[GraphSpec, Head]:
    spec = _spec(lambda g: (g.add_edge("a", "b"), g.add_edge("a", "c"), g.add_edge("c", END)))
    h1, _, _ = advance(spec, _start(spec, {}), "r", [TaskResult("a", {})], step=0, source="loop")
    return spec, h1  # next: b, c


def test_plan_of_a_fresh_step_runs_every_task() -> None:
    spec, head = _fan_out()
    plan = plan_step(spec, head, [])
    assert [t.key for t in plan.todo] == ["b", "c"]
    assert plan.done == {} and not plan.alone and plan.clear


def test_plan_skips_finished_siblings_and_hands_out_answers() -> None:
    spec, head = _fan_out()
    cp = head.checkpoint.checkpoint_id
    writes = [
        TaskWrite("t1", cp, "b", "writes", 0, {"update": {"hits": ["b"]}, "goto": []}),
        TaskWrite("t1", cp, "c", "interrupt", 0, "ok?"),
        TaskWrite("t1", cp, "c", "resume", 0, "yes"),
    ]
    plan = plan_step(spec, head, writes)
    assert [t.key for t in plan.todo] == ["c"]
    assert plan.done["b"].update == {"hits": ["b"]}
    assert plan.resumes == {"c": ("yes",)}


def test_plan_refuses_a_head_naming_an_unknown_node() -> None:
    spec, head = _fan_out()
    bad = Head(dataclasses.replace(head.checkpoint, next=("zz",)), head.values)
    with pytest.raises(CorruptRecordError, match=r"'zz'.*left untouched"):
        plan_step(spec, bad, [])


def test_decide_commits_when_every_task_finished_in_checkpoint_order() -> None:
    spec, head = _fan_out()
    plan = plan_step(spec, head, [])
    outcomes = [
        TaskOutcome("c", result=TaskResult("c", {"hits": ["c"]})),
        TaskOutcome("b", result=TaskResult("b", {"hits": ["b"]})),
    ]
    decision = decide(spec, head, plan, outcomes, run_id="r")
    assert isinstance(decision, Commit)
    assert [r.node for r in decision.results] == ["b", "c"]
    assert decision.head.values["hits"] == ["b", "c"]
    assert decision.clear_task_writes
    assert decision.head.checkpoint.next == ()  # c -> END, b has no edge
    assert decision.run_status is RunStatus.COMPLETED


def test_decide_completes_the_run_when_nothing_is_left() -> None:
    spec = _spec()
    head, _, _ = advance(spec, _start(spec, {}), "r", [TaskResult("a", {})], step=0, source="loop")
    plan = plan_step(spec, head, [])
    decision = decide(spec, head, plan, [TaskOutcome("b", result=TaskResult("b", {}))], run_id="r")
    assert isinstance(decision, Commit) and decision.run_status is RunStatus.COMPLETED


def test_decide_precedence_crash_park_fail_interrupt() -> None:
    spec, head = _fan_out()
    plan = plan_step(spec, head, [])
    crash = TaskOutcome("b", crash=_CrashSignal("after_intent"))
    park = TaskOutcome("b", park=("eff_1", "unknown outcome"))
    fail = TaskOutcome("c", error=ValueError("boom"))
    ask = TaskOutcome("c", interrupt=("approve?", 0))
    done = TaskOutcome("b", result=TaskResult("b", {}))
    assert isinstance(decide(spec, head, plan, [fail, park, crash], run_id="r"), Crash)
    parked = decide(spec, head, plan, [fail, park], run_id="r")
    assert isinstance(parked, Park) and parked.effect_id == "eff_1"
    failed = decide(spec, head, plan, [ask, fail], run_id="r")
    assert isinstance(failed, Fail) and failed.node == "c" and not failed.applying
    asked = decide(spec, head, plan, [done, ask], run_id="r")
    assert isinstance(asked, Interrupt) and asked.waits == (("c", "approve?", 0),)


def test_decide_fails_when_applying_the_writes_fails() -> None:
    spec, head = _fan_out()
    plan = plan_step(spec, head, [])
    outcomes = [
        TaskOutcome("b", result=TaskResult("b", {"x": 1})),
        TaskOutcome("c", result=TaskResult("c", {"x": 2})),  # two writers of a last-value field
    ]
    decision = decide(spec, head, plan, outcomes, run_id="r")
    assert isinstance(decision, Fail) and decision.applying and decision.nodes == ("b", "c")
    assert "both wrote 'x'" in decision.description


# -- Send, waiting edges, breakpoints (pure) ----------------------------------------------


def test_sends_are_tasks_recorded_in_the_checkpoint_before_they_run() -> None:
    from oncegraph import Send
    from oncegraph.runtime.engine import plan_step, tasks_of

    def fan(g: StateGraph) -> None:
        g.add_conditional_edges("a", lambda s: [Send("b", {"x": 1}), Send("b", {"x": 2}), "c"])

    spec = _spec(fan)
    h1, _, _ = advance(spec, _start(spec, {}), "r", [TaskResult("a", {})], step=0, source="loop")
    cp = h1.checkpoint
    assert cp.next == ("c", "b", "b")  # pulled nodes first, then one entry per send
    assert cp.metadata["sends"] == [
        {"node": "b", "as": "state", "arg": {"x": 1}},
        {"node": "b", "as": "state", "arg": {"x": 2}},
    ]
    tasks = tasks_of(spec, cp)
    assert [(t.key, t.node, t.arg if t.is_send else None) for t in tasks] == [
        ("c", "c", None),
        ("b:0", "b", {"x": 1}),
        ("b:1", "b", {"x": 2}),
    ]
    plan = plan_step(spec, h1, [])
    assert [t.key for t in plan.todo] == ["c", "b:0", "b:1"] and not plan.alone


def test_a_checkpoint_without_sends_is_read_as_before() -> None:
    from oncegraph.runtime.engine import tasks_of

    spec = _spec()
    cp = _start(spec, {}).checkpoint
    assert "sends" not in cp.metadata
    assert [(t.key, t.is_send) for t in tasks_of(spec, cp)] == [("a", False)]


class Item(TypedDict):
    when: dt.date
    n: int


def test_send_payloads_keep_their_types_and_bad_ones_are_named() -> None:
    from oncegraph import Send
    from oncegraph.runtime.engine import decode_send, encode_send

    def node(state: Item) -> None:
        raise AssertionError

    g = StateGraph(S)
    g.add_node("a", _node)
    g.add_node("typed", node, input_schema=Item)
    g.add_edge(START, "a")
    spec = g.validate()
    stored = encode_send(spec, Send("typed", {"when": dt.date(2024, 1, 2), "n": 3}))
    assert stored["arg"] == {"when": "2024-01-02", "n": 3}
    again = decode_send(spec, orjson_roundtrip(stored))
    assert again.arg == {"when": dt.date(2024, 1, 2), "n": 3}
    assert decode_send(spec, encode_send(spec, Send("a", ("t", 1)))).arg == ["t", 1]
    with pytest.raises(InvalidUpdateError, match=r"payload of Send\('a', ...\)"):
        encode_send(spec, Send("a", {"x": 1, "other": dt.datetime.now()}))
    with pytest.raises(GraphValidationError, match="names no node"):
        encode_send(spec, Send("zzz", {}))


def orjson_roundtrip(value: Any) -> Any:
    from oncegraph import _json

    return _json.loads(_json.dumps(value))


def test_waiting_edge_fires_once_after_all_sources_whatever_the_branch_lengths() -> None:
    from oncegraph.runtime.engine import route

    def build(g: StateGraph) -> None:
        g.add_edge("a", "b")
        g.add_edge("a", "c")
        g.add_edge("b", "b2")
        g.add_edge(["b2", "c"], "d")

    g = StateGraph(S)
    for name in ("a", "b", "b2", "c", "d"):
        g.add_node(name, _node)
    g.add_edge(START, "a")
    build(g)
    spec = g.validate()
    r1 = route(spec, {}, [TaskResult("b", {}), TaskResult("c", {})])
    assert r1.pulled == ("b2",) and dict(r1.joins) == {"b2+c:d": ["c"]}
    r2 = route(spec, {}, [TaskResult("b2", {})], joins=r1.joins)
    assert r2.pulled == ("d",) and dict(r2.joins) == {}  # fired once, then reset
    h = _start(spec, {})
    for step, done in enumerate((["a"], ["b", "c"], ["b2"])):
        h, _, _ = advance(spec, h, "r", [TaskResult(n, {}) for n in done], step=step, source="loop")
    assert h.checkpoint.next == ("d",)
    assert "joins" not in h.checkpoint.metadata


def test_breakpoints_before_and_after() -> None:
    from oncegraph.runtime.engine import tasks_of
    from oncegraph.runtime.moves import breakpoint_at

    spec = _spec()
    h0 = _start(spec, {})
    h1, _, _ = advance(spec, h0, "r", [TaskResult("a", {})], step=0, source="loop")
    tasks0, tasks1 = tasks_of(spec, h0.checkpoint), tasks_of(spec, h1.checkpoint)
    assert breakpoint_at(spec, h0.checkpoint, tasks0, before=("a",)) == {"before": ["a"]}
    assert breakpoint_at(spec, h0.checkpoint, tasks0, before=("b",)) is None
    assert breakpoint_at(spec, h0.checkpoint, tasks0, after=("*",)) is None  # input step
    assert breakpoint_at(spec, h1.checkpoint, tasks1, after=("a",)) == {"after": ["a"]}
    assert breakpoint_at(spec, h1.checkpoint, tasks1, before=("*",)) == {"before": ["b"]}
