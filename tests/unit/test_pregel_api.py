"""The low-level Pregel API (``oncegraph.pregel``, ``oncegraph.channels``): the channels'
rules, nodes triggered by the channels they subscribe to, and a Pregel app on the one
run loop (checkpoints on every backend, breakpoints, ``interrupt()``, streaming)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.channels import (
    AnyValue,
    BinaryOperatorAggregate,
    DeltaChannel,
    EphemeralValue,
    LastValue,
    Topic,
    UntrackedValue,
)
from oncegraph.errors import (
    EmptyChannelError,
    GraphValidationError,
    InvalidUpdateError,
    RecursionLimitError,
)
from oncegraph.pregel import NodeBuilder, Pregel
from oncegraph.storage.protocols import Checkpointer


def cfg(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def add_one(x: int) -> int:
    return x + 1


def chain(**kwargs: Any) -> Pregel:
    """input -> one -> inbox -> two -> output, each adding one."""
    return Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("input").do(add_one).write_to("inbox"),
            "two": NodeBuilder().subscribe_only("inbox").do(add_one).write_to("output"),
        },
        channels={"input": LastValue(int), "inbox": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
        **kwargs,
    )


# -- the channels, driven by hand ----------------------------------------------------------


def test_last_value_takes_one_write_per_step_and_is_empty_before() -> None:
    chan = LastValue(int)
    with pytest.raises(EmptyChannelError):
        chan.get()
    assert chan.update([1]) is True
    assert chan.get() == 1
    assert chan.update([]) is False
    with pytest.raises(InvalidUpdateError):
        chan.update([2, 3])
    restored = LastValue(int).from_checkpoint(chan.checkpoint())
    assert restored.get() == 1


def test_topic_keeps_one_step_or_accumulates() -> None:
    per_step = Topic(int)
    per_step.update([1, [2, 3]])
    assert per_step.get() == [1, 2, 3]
    per_step.update([4])
    assert per_step.get() == [4]
    kept = Topic(int, accumulate=True)
    kept.update([1])
    kept.update([2])
    assert kept.get() == [1, 2]


def test_ephemeral_aggregate_and_any_value() -> None:
    eph = EphemeralValue(int)
    eph.update([5])
    assert eph.get() == 5
    eph.update([])  # a step that did not write it clears it
    assert not eph.is_available()
    with pytest.raises(InvalidUpdateError):
        EphemeralValue(int).update([1, 2])
    total = BinaryOperatorAggregate(int, operator.add)
    assert total.get() == 0
    total.update([2, 3])
    assert total.get() == 5
    anyv = AnyValue(int)
    anyv.update([1, 1])
    assert anyv.get() == 1


# -- a Pregel app ----------------------------------------------------------------------------


def test_two_node_chain_with_one_or_several_channels() -> None:
    app = chain()
    assert app.invoke(2) == 4
    assert app.invoke(2, output_keys=["output", "inbox"]) == {"output": 4, "inbox": 3}
    assert app.input_schema.model_json_schema() == {"title": "LangGraphInput", "type": "integer"}
    listed = Pregel(
        nodes={"one": NodeBuilder().subscribe_only("input").do(add_one).write_to("output")},
        channels={"input": LastValue(int), "output": LastValue(int)},
        input_channels=["input"],
        output_channels=["output"],
    )
    assert listed.invoke({"input": 2}) == {"output": 3}


def test_write_to_fixed_values_and_mappers_and_read_from() -> None:
    app = Pregel(
        nodes={
            "one": NodeBuilder()
            .subscribe_to("input")
            .read_from("base")
            .do(lambda d: d["input"] + d.get("base", 0))
            .write_to("output", fixed=5, plus_one=lambda x: x + 1)
        },
        channels={
            "input": LastValue(int),
            "base": LastValue(int),
            "output": LastValue(int),
            "fixed": LastValue(int),
            "plus_one": LastValue(int),
        },
        input_channels=["input", "base"],
        output_channels=["output", "fixed", "plus_one"],
    )
    assert app.invoke({"input": 2, "base": 10}) == {"output": 12, "fixed": 5, "plus_one": 13}


def test_two_writes_to_a_last_value_in_one_step_fail() -> None:
    def both_write(out: Any) -> Pregel:
        return Pregel(
            nodes={
                "a": NodeBuilder().subscribe_only("input").do(add_one).write_to("output"),
                "b": NodeBuilder().subscribe_only("input").do(add_one).write_to("output"),
            },
            channels={"input": LastValue(int), "output": out},
            input_channels="input",
            output_channels="output",
        )

    with pytest.raises(InvalidUpdateError, match="'output'"):
        both_write(LastValue(int)).invoke(2)
    assert both_write(Topic(int)).invoke(2) == [3, 3]  # a topic collects both


def test_fan_in_through_a_topic_runs_the_reader_once() -> None:
    seen: list[list[int]] = []

    def total(xs: list[int]) -> int:
        seen.append(sorted(xs))
        return sum(xs)

    app = Pregel(
        nodes={
            "a": NodeBuilder().subscribe_only("input").do(add_one).write_to("inbox"),
            "b": NodeBuilder().subscribe_only("input").do(lambda x: x * 10).write_to("inbox"),
            "sum": NodeBuilder().subscribe_only("inbox").do(total).write_to("output"),
        },
        channels={"input": LastValue(int), "inbox": Topic(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
    )
    assert app.invoke(2) == 23
    assert seen == [[3, 20]]


def test_no_output_written_returns_none_and_values_stream_skips_empty_steps() -> None:
    app = Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("input").do(add_one).write_to("between"),
            "two": NodeBuilder().subscribe_only("between").do(add_one),
        },
        channels={"input": LastValue(int), "between": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
    )
    assert app.invoke(2) is None
    streamed = chain(stream_channels=["inbox", "output"])
    assert list(streamed.stream(2)) == [{"inbox": 3}, {"inbox": 3, "output": 4}]
    assert list(streamed.stream(2, stream_mode="updates")) == [
        {"one": {"inbox": 3}},
        {"two": {"output": 4}},
    ]


def test_recursion_limit_counts_the_node_steps() -> None:
    assert chain().invoke(2, {"recursion_limit": 2}) == 4
    with pytest.raises(RecursionLimitError):
        chain().invoke(2, {"recursion_limit": 1})


def test_async_steps_and_batch() -> None:
    async def double(x: int) -> int:
        return 2 * x

    app = Pregel(
        nodes={"one": NodeBuilder().subscribe_only("input").do(double).do(add_one).write_to("o")},
        channels={"input": LastValue(int), "o": LastValue(int)},
        input_channels="input",
        output_channels="o",
    )
    assert app.batch([1, 2, 3]) == [3, 5, 7]


def test_a_channel_the_app_lacks_is_refused_when_built() -> None:
    with pytest.raises(GraphValidationError, match="'nowhere'"):
        Pregel(
            nodes={"one": NodeBuilder().subscribe_only("input").write_to("nowhere")},
            channels={"input": LastValue(int)},
            input_channels="input",
            output_channels="input",
        )
    with pytest.raises(TypeError):
        Pregel(nodes={})  # type: ignore[call-arg]


# -- on a store ------------------------------------------------------------------------------


def test_aggregate_lives_on_in_the_thread_and_ephemeral_is_not_kept(
    checkpointer: Checkpointer,
) -> None:
    app = Pregel(
        nodes={
            "one": NodeBuilder()
            .subscribe_to("input")
            .read_from("total")
            .do(lambda d: d["total"] + d["input"])
            .write_to("output", "total")
        },
        channels={
            "total": BinaryOperatorAggregate(int, operator.add),
            "input": LastValue(int),
            "output": LastValue(int),
            "flag": EphemeralValue(str),
        },
        input_channels=["input", "flag"],
        output_channels="output",
        checkpointer=checkpointer,
    )
    assert app.invoke({"input": 2, "flag": "x"}, cfg()) == 2
    assert app.get_state(cfg()).values == {"total": 2, "input": 2, "output": 2}
    assert app.invoke({"input": 3}, cfg()) == 5  # total was 2: 2 + 3
    assert app.get_state(cfg()).values["total"] == 7
    assert app.invoke({"input": 5}, cfg("other")) == 5  # a new thread starts from zero


def test_breakpoint_after_a_node_then_resume(
    checkpointer: Checkpointer,
) -> None:
    app = chain(checkpointer=checkpointer, interrupt_after_nodes=["one"])
    assert app.invoke(2, cfg()) is None
    snap = app.get_state(cfg())
    assert snap.values["inbox"] == 3
    assert snap.next == ("two",)
    assert app.invoke(None, cfg()) == 4
    assert app.get_state(cfg()).next == ()
    app.invoke(20, cfg())  # a new input on the finished thread: paused after "one" again
    assert app.get_state(cfg()).values["inbox"] == 21
    assert app.invoke(None, cfg()) == 22


def test_update_state_as_a_node_writes_what_the_node_writes(checkpointer: Checkpointer) -> None:
    app = chain(checkpointer=checkpointer)
    assert app.invoke(2, cfg()) == 4
    app.update_state(cfg(), 25, as_node="one")  # as if "one" wrote 25 to inbox
    snap = app.get_state(cfg())
    assert snap.values["inbox"] == 25
    assert snap.next == ("two",)  # the node subscribed to inbox runs next
    assert app.invoke(None, cfg()) == 26


def test_interrupt_inside_a_node_resumes_with_the_answer(checkpointer: Checkpointer) -> None:
    calls: list[int] = []

    def ask(x: int) -> int:
        calls.append(x)
        answer = interrupt(f"add what to {x}?")
        return int(x + answer)

    app = Pregel(
        nodes={
            "ask": NodeBuilder().subscribe_only("input").do(ask).write_to("output"),
        },
        channels={"input": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels=["output"],
        checkpointer=checkpointer,
    )
    first = app.invoke(2, cfg())
    assert [i.value for i in first["__interrupt__"]] == ["add what to 2?"]
    assert app.invoke(Command(resume=40), cfg()) == {"output": 42}


# -- a channel named in a StateGraph's state ----------------------------------------------------


def test_untracked_value_field_is_seen_by_nodes_but_never_stored(
    checkpointer: Checkpointer,
) -> None:
    class State(TypedDict):
        log: Annotated[list[str], operator.add]
        session: Annotated[str, UntrackedValue]

    def opens(state: State) -> dict[str, Any]:
        return {"log": ["opened"], "session": "secret"}

    def uses(state: State) -> dict[str, Any]:
        return {"log": [f"used {state['session']}"]}

    builder = StateGraph(State)
    builder.add_node("opens", opens)
    builder.add_node("uses", uses)
    builder.add_edge(START, "opens")
    builder.add_edge("opens", "uses")
    builder.add_edge("uses", END)
    app = builder.compile(checkpointer=checkpointer)
    out = app.invoke({"log": []}, cfg())
    assert out["log"] == ["opened", "used secret"]
    assert out["session"] == "secret"
    assert "session" not in app.get_state(cfg()).values


def merge(current: dict[str, str], writes: list[dict[str, str | None]]) -> dict[str, str]:
    """A DeltaChannel's reducer: each write's files set, a None removes one."""
    out = dict(current)
    for w in writes:
        for k, v in w.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
    return out


def test_delta_channel_folds_each_step_writes_in_a_state_graph(checkpointer: Checkpointer) -> None:
    chan = DeltaChannel(merge, dict).from_checkpoint(None)
    assert chan.get() is None  # None is a value to start from, not "nothing"

    class State(TypedDict):
        files: Annotated[dict[str, str], DeltaChannel(merge)]

    turn = [0]

    def write(state: State) -> dict[str, Any]:
        turn[0] += 1
        return {"files": {f"/doc_{turn[0]}": "text", "/doc_1": None if turn[0] == 3 else "text"}}

    builder = StateGraph(State)
    builder.add_node("write", write)
    builder.add_edge(START, "write")
    app = builder.compile(checkpointer=checkpointer)
    for _ in range(3):
        app.invoke({"files": {}}, cfg())
    assert app.get_state(cfg()).values["files"] == {"/doc_2": "text", "/doc_3": "text"}


def test_map_runs_an_inner_app_on_each_item() -> None:
    inner = Pregel(
        nodes={"one": NodeBuilder().subscribe_only("input").do(add_one).write_to("output")},
        channels={"input": LastValue(int), "output": LastValue(int)},
        input_channels="input",
        output_channels="output",
    )
    outer = Pregel(
        nodes={
            "each": NodeBuilder().subscribe_only("xs").do(inner.map()).write_to("ys"),
            "sum": NodeBuilder().subscribe_only("ys").do(sum).write_to("total"),
        },
        channels={"xs": LastValue(list), "ys": LastValue(list), "total": LastValue(int)},
        input_channels="xs",
        output_channels="total",
    )
    assert outer.invoke([1, 2, 3]) == 9


def test_a_tool_call_in_a_pregel_node_is_sent_once_across_a_resume(
    checkpointer: Checkpointer,
) -> None:
    from oncegraph import tool
    from oncegraph.func import task

    sent: list[str] = []

    @tool(effect="write", dedup="test double: counts its sends")
    def send_mail(to: str) -> str:
        """Send a mail."""
        sent.append(to)
        return f"sent to {to}"

    send = task(send_mail)  # a tool call recorded in the effect ledger

    def mail_then_ask(x: int) -> str:
        done = send(to=f"user{x}").result()
        return f"{done}, {interrupt('and then?')}"

    app = Pregel(
        nodes={"mail": NodeBuilder().subscribe_only("input").do(mail_then_ask).write_to("out")},
        channels={"input": LastValue(int), "out": LastValue(str)},
        input_channels="input",
        output_channels=["out"],
        checkpointer=checkpointer,
    )
    assert "__interrupt__" in app.invoke(2, cfg())
    assert app.invoke(Command(resume="done"), cfg()) == {"out": "sent to user2, done"}
    assert sent == ["user2"]  # the node ran twice; the ledger served the second call
    (record,) = app.effects(thread_id="t1")
    assert record.effect_type == "send_mail"
