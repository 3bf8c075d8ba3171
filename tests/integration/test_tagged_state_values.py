"""Values that are not JSON but are known: stored as tagged JSON, read back as themselves.

oncegraph's ``Command`` and ``Send`` (in a ``Send``'s payload or in state) and LangChain
messages, chunks included (at a field declared ``str`` or ``Any``), are stored as a
tagged JSON form and come back as the same class in a fresh app on every store. An
``UntrackedValue`` field holds any object within the run and is never written. Any other
object is still refused, naming the field. Pydantic secrets are stored as their secret,
not as the mask pydantic's JSON shows.
"""

from __future__ import annotations

import operator
import threading
from typing import Annotated, Any, TypedDict

import pydantic
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage

from oncegraph import START, Command, Send, StateGraph, interrupt
from oncegraph.app import CompiledGraph
from oncegraph.channels import UntrackedValue
from oncegraph.errors import InvalidUpdateError
from oncegraph.storage.protocols import Checkpointer


def _sends_commands(store: Checkpointer, seen: list[Any]) -> CompiledGraph:
    asked: list[int] = []

    def two(state: Any) -> Any:
        seen.append(state)
        if not asked:
            asked.append(1)
            interrupt("go on?")
        if isinstance(state, Command):
            return [state, Command(update=[f"two|{state!r}"])]
        return [f"two|{state}"]

    g = StateGraph(Annotated[list, operator.add])
    g.add_node("one", lambda s: ["one"])
    g.add_node("two", two)
    g.add_edge(START, "one")
    g.add_conditional_edges("one", lambda s: [Send("two", Command(goto=Send("two", 3)))])
    return g.compile(checkpointer=store)


def test_a_command_in_a_send_payload_is_stored_and_comes_back_after_a_resume(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    seen: list[Any] = []
    first = _sends_commands(checkpointer, seen).invoke(["zero"], cfg)
    assert [i.value for i in first["__interrupt__"]] == ["go on?"]
    assert seen == [Command(goto=Send("two", 3))]
    again: list[Any] = []
    out = _sends_commands(reopen(), again).invoke(Command(resume="yes"), cfg)  # a fresh app
    assert type(again[0]) is Command and type(again[0].goto) is Send
    assert again == [Command(goto=Send("two", 3)), 3]
    assert out == ["zero", "one", "two|Command(goto=Send(node='two', arg=3))", "two|3"]


class Chat(TypedDict, total=False):
    last_chunk: str  # LangGraph's test declares str and writes a chunk
    anything: Any
    note: str


def _chunks(store: Checkpointer) -> CompiledGraph:
    def node(state: Chat) -> dict[str, Any]:
        return {
            "last_chunk": AIMessageChunk(content="today.", id="c1"),
            "anything": {
                "turns": [HumanMessage(content="hi", id="h1"), AIMessage(content="yo", id="a1")],
                "next": Command(goto="x", update={"note": "n"}),
            },
        }

    g = StateGraph(Chat)
    g.add_node("n", node)
    g.add_edge(START, "n")
    return g.compile(checkpointer=store)


def test_messages_chunks_and_commands_at_plain_positions_read_back_as_themselves(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    out = _chunks(checkpointer).invoke({"note": "x"}, cfg)
    assert type(out["last_chunk"]) is AIMessageChunk
    back = dict(_chunks(reopen()).get_state(cfg).values)
    assert back == out
    assert type(back["last_chunk"]) is AIMessageChunk
    assert back["last_chunk"].content == "today."
    turns = back["anything"]["turns"]
    assert [type(m) for m in turns] == [HumanMessage, AIMessage]
    assert back["anything"]["next"] == Command(goto="x", update={"note": "n"})


class Resource:
    """A value JSON cannot hold (a lock inside)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()


class WithResource(TypedDict):
    log: Annotated[list[str], operator.add]
    resource: Annotated[Resource, UntrackedValue]


def _untracked(store: Checkpointer) -> CompiledGraph:
    def setup(state: WithResource) -> dict[str, Any]:
        return {"log": ["setup"], "resource": Resource("first")}

    def use(state: WithResource) -> dict[str, Any]:
        resource = state["resource"]
        assert isinstance(resource, Resource)
        return {"log": [f"used {resource.name}"], "resource": Resource("second")}

    g = StateGraph(WithResource)
    g.add_node("setup", setup)
    g.add_node("use", use)
    g.add_edge(START, "setup")
    g.add_conditional_edges("setup", lambda s: [Send("use", s)])
    return g.compile(checkpointer=store)


def test_an_untracked_field_holds_any_object_in_the_run_and_is_never_stored(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    out = _untracked(checkpointer).invoke({"log": []}, cfg)
    assert out["log"] == ["setup", "used first"]
    assert out["resource"].name == "second"
    stored = _untracked(reopen()).get_state(cfg)
    assert dict(stored.values) == {"log": ["setup", "used first"]}
    history = list(_untracked(reopen()).get_state_history(cfg))
    assert all("resource" not in s.values for s in history)


def test_an_object_json_cannot_hold_is_still_refused_naming_the_field(
    checkpointer: Checkpointer,
) -> None:
    g = StateGraph(Chat)
    g.add_node("n", lambda s: {"anything": Resource("r")})
    g.add_edge(START, "n")
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(InvalidUpdateError, match=r"state field 'anything'.*Resource"):
        app.invoke({"note": "x"}, {"configurable": {"thread_id": "t"}})


class Login(pydantic.BaseModel):
    user: str
    password: pydantic.SecretStr
    keys: list[pydantic.SecretBytes] = []
    backup: pydantic.SecretStr | None = None


def _login(store: Checkpointer) -> CompiledGraph:
    def check(state: Login) -> dict[str, Any]:
        assert state.password.get_secret_value() == "hunter2"
        return {"keys": [pydantic.SecretBytes(b"\x00key")], "backup": pydantic.SecretStr("b")}

    g = StateGraph(Login)
    g.add_node("check", check)
    g.add_edge(START, "check")
    return g.compile(checkpointer=store)


def test_pydantic_secrets_read_back_as_the_secret_not_its_mask(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    cfg = {"configurable": {"thread_id": "t"}}
    _login(checkpointer).invoke({"user": "u", "password": "hunter2"}, cfg)
    back = _login(reopen()).get_state(cfg).values
    assert back["password"].get_secret_value() == "hunter2"
    assert [k.get_secret_value() for k in back["keys"]] == [b"\x00key"]
    assert back["backup"].get_secret_value() == "b"
    assert "hunter2" not in repr(back)  # still shown masked


def test_a_root_value_state_shows_a_finished_sibling_of_an_interrupted_task(
    checkpointer: Checkpointer, reopen: Any
) -> None:
    asked: list[int] = []

    def build(store: Checkpointer) -> CompiledGraph:
        def ask(arg: Any) -> list[str]:
            if not asked:
                asked.append(1)
                interrupt("which?")
            return [f"ask|{arg}"]

        g = StateGraph(Annotated[list, operator.add])
        g.add_node("fan", lambda s: ["fan"])
        g.add_node("ask", ask)
        g.add_node("ok", lambda arg: [f"ok|{arg}"])
        g.add_edge(START, "fan")
        g.add_conditional_edges("fan", lambda s: [Send("ask", 1), Send("ok", Command(goto="x"))])
        return g.compile(checkpointer=store)

    cfg = {"configurable": {"thread_id": "t"}}
    first = build(checkpointer).invoke(["zero"], cfg)
    assert [i.value for i in first["__interrupt__"]] == ["which?"]
    snap = build(reopen()).get_state(cfg)
    assert snap.values == ["zero", "fan", "ok|Command(goto='x')"]
    assert snap.next == ("ask",)
    # the step's writes apply in the order sent, the finished sibling's kept, not re-run
    assert build(reopen()).invoke(Command(resume="a"), cfg) == [
        "zero",
        "fan",
        "ask|1",
        "ok|Command(goto='x')",
    ]


def test_the_updates_stream_shows_a_langchain_message_with_the_id_it_was_given(
    checkpointer: Checkpointer,
) -> None:
    from oncegraph import MessagesState

    g = StateGraph(MessagesState)
    g.add_node("lc", lambda s: {"messages": AIMessage(content="hi")})
    g.add_node("plain", lambda s: {"messages": [{"role": "assistant", "content": "yo"}]})
    g.add_edge(START, "lc")
    g.add_edge("lc", "plain")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    chunks = list(app.stream({"messages": []}, cfg, stream_mode="updates"))
    stored = app.get_state(cfg).values["messages"]
    shown = chunks[0]["lc"]["messages"]
    assert type(shown) is AIMessage and shown.id and shown.id == stored[0].id
    assert chunks[1]["plain"]["messages"] == [{"role": "assistant", "content": "yo"}]  # as given
