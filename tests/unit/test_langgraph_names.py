"""LangGraph names that need no run-loop change: MessagesState, add_sequence,
get_graph().draw_mermaid(), input/output/context schemas, Command[Literal[...]],
thread ids that are not strings."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated, Any, Literal, TypedDict

import pydantic
import pytest

import oncegraph.graph
from oncegraph import END, START, Command, MessagesState, StateGraph, add_messages
from oncegraph.errors import ConfigError, GraphValidationError, InvalidUpdateError
from oncegraph.graph.io import input_update, output_values
from oncegraph.storage.checkpointer import InMemoryCheckpointer


class S(TypedDict, total=False):
    trail: Annotated[list[str], lambda a, b: [*a, *b]]
    x: int


def _step(name: str) -> Any:
    def node(state: S) -> dict[str, Any]:
        return {"trail": [name]}

    node.__name__ = name
    return node


# -- MessagesState ---------------------------------------------------------------------


def test_messages_state_is_where_langgraph_users_look_for_it() -> None:
    assert oncegraph.graph.MessagesState is MessagesState
    assert oncegraph.graph.add_messages is add_messages

    class State(MessagesState):
        summary: str

    g = StateGraph(State)
    g.add_node("bot", lambda s: {"messages": [("ai", "hi " + s["messages"][-1].content)]})
    g.add_edge(START, "bot")
    out = g.compile().invoke({"messages": [("user", "Ada")], "summary": "s"})
    assert [m.content for m in out["messages"]] == ["Ada", "hi Ada"]
    assert [m.type for m in out["messages"]] == ["human", "ai"]
    assert out["summary"] == "s"


# -- add_sequence ------------------------------------------------------------------------


def test_add_sequence_chains_nodes_in_order() -> None:
    g = StateGraph(S)
    g.add_sequence([_step("a"), ("b", _step("b")), _step("c")])
    g.add_edge(START, "a")
    app = g.compile()
    assert app.invoke({"x": 1})["trail"] == ["a", "b", "c"]
    assert dict(app.spec.edges) == {START: ("a",), "a": ("b",), "b": ("c",)}


def test_add_sequence_refuses_empty_bad_pairs_and_duplicates() -> None:
    with pytest.raises(GraphValidationError, match="at least one node"):
        StateGraph(S).add_sequence([])
    with pytest.raises(GraphValidationError, match=r"\(name, function\) pairs"):
        StateGraph(S).add_sequence([(1, _step("a"))])  # type: ignore[list-item]
    g = StateGraph(S)
    g.add_node("a", _step("a"))
    with pytest.raises(GraphValidationError, match="already in the graph"):
        g.add_sequence([_step("a")])


# -- get_graph().draw_mermaid() ----------------------------------------------------------


def test_get_graph_lists_nodes_and_edges_and_draws_mermaid() -> None:
    def pick(state: S) -> Literal["b", "__end__"]:
        return "b"

    def a(state: S) -> Command[Literal["b", "c"]]:
        return Command(goto="b")

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", _step("b"))
    g.add_node("c", _step("c"))
    g.add_node("d", _step("d"))
    g.add_edge(START, "a")
    g.add_conditional_edges("b", pick)
    g.add_conditional_edges("c", lambda s: "yes", {"yes": "d", "no": END})
    g.add_edge("d", END)
    view = g.compile().get_graph()
    assert list(view.nodes) == [START, "a", "b", "c", "d", END]
    edges = {(e.source, e.target, e.data, e.conditional) for e in view.edges}
    assert edges == {
        (START, "a", None, False),
        ("a", "b", None, True),  # from Command[Literal["b", "c"]]
        ("a", "c", None, True),
        ("b", "b", None, True),  # from the router's Literal return type
        ("b", END, None, True),
        ("c", "d", "yes", True),  # from the path map
        ("c", END, "no", True),
        ("d", END, None, False),
    }
    text = view.draw_mermaid()
    assert text.startswith("---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n")
    assert view.draw_mermaid(with_styles=False).startswith("graph TD;\n\t__start__ --> a;\n")
    for line in (
        "__start__([<p>__start__</p>]):::first",
        "a(a)",
        "__end__([<p>__end__</p>]):::last",
        "__start__ --> a;",
        "a -.-> b;",
        "c -. &nbsp;yes&nbsp; .-> d;",
        "d --> __end__;",
    ):
        assert f"\t{line}\n" in text
    with pytest.raises(ConfigError, match="draw_mermaid"):
        view.draw_mermaid_png()


def test_a_router_without_hints_draws_no_edge_and_its_node_ends_the_drawing() -> None:
    g = StateGraph(S)
    g.add_node("a", _step("a"))
    g.add_node("weird name", _step("b"))
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END)
    view = g.compile().get_graph()
    # as LangGraph draws it: nothing is known of the router, so "a" is a terminus
    assert [(e.source, e.target, e.conditional) for e in view.edges] == [
        (START, "a", False),
        ("a", END, False),
    ]
    assert "\tweird\\20name(weird name)\n" in view.draw_mermaid()


# -- input, output and context schemas ---------------------------------------------------


class InputState(TypedDict):
    user_input: str


class OutputState(TypedDict):
    graph_output: str


class OverallState(TypedDict):
    foo: str
    user_input: str
    graph_output: str


class PrivateState(TypedDict):
    bar: str


@dataclasses.dataclass
class Context:
    llm_provider: str = "openai"


def _docs_graph(**schemas: Any) -> StateGraph:
    """The "multiple schemas" program from LangGraph's docs."""

    def node_1(state: InputState) -> OverallState:
        return {"foo": state["user_input"] + " name"}  # type: ignore[typeddict-item]

    def node_2(state: OverallState) -> PrivateState:
        return {"bar": state["foo"] + " is"}

    def node_3(state: PrivateState) -> OutputState:
        return {"graph_output": state["bar"] + " Lance"}

    builder = StateGraph(OverallState, **schemas)
    builder.add_node("node_1", node_1)
    builder.add_node("node_2", node_2)
    builder.add_node("node_3", node_3)
    builder.add_edge(START, "node_1")
    builder.add_edge("node_1", "node_2")
    builder.add_edge("node_2", "node_3")
    builder.add_edge("node_3", END)
    return builder


def test_input_and_output_schemas_shape_what_invoke_takes_and_returns() -> None:
    builder = _docs_graph(input_schema=InputState, output_schema=OutputState)
    assert "bar" in builder.schema.channels  # node_3 reads a PrivateState
    graph = builder.compile(checkpointer=InMemoryCheckpointer())
    cfg = {"thread_id": "t"}
    assert graph.invoke({"user_input": "My"}, cfg) == {"graph_output": "My name is Lance"}
    assert graph.get_state(cfg).values["foo"] == "My name"  # the whole state is kept
    # as in LangGraph, a state field the input schema does not name is not taken in: a
    # caller cannot set what the nodes keep for themselves
    out = graph.invoke({"user_input": "x", "foo": "sneaky"}, {"thread_id": "t2"})
    assert out == {"graph_output": "x name is Lance"}
    assert graph.get_state({"thread_id": "t2"}).values["foo"] == "x name"


def test_fields_of_input_and_output_schemas_become_state_fields() -> None:
    class In(TypedDict):
        question: str

    class Out(TypedDict):
        answer: str

    class Inner(TypedDict):
        scratch: str

    def answer(state: Any) -> dict[str, Any]:
        return {"answer": state["question"].upper(), "scratch": "x"}

    g = StateGraph(Inner, input_schema=In, output_schema=Out)
    g.add_node("answer", answer, input_schema=In)  # as in LangGraph: it reads what it names
    g.add_edge(START, "answer")
    assert set(g.schema.channels) == {"scratch", "question", "answer"}
    assert g.compile().invoke({"question": "why"}) == {"answer": "WHY"}


def test_pydantic_state_with_an_input_schema_gets_its_own_fields() -> None:
    class State(pydantic.BaseModel):
        text: str = ""
        out: str = ""

    class In(pydantic.BaseModel):
        text: str
        lang: str = "en"

    seen: list[Any] = []

    def node(state: State) -> dict[str, Any]:
        seen.append(type(state))
        return {"out": state.text + "!"}

    g = StateGraph(State, input_schema=In)
    g.add_node("n", node)
    g.add_edge(START, "n")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    out = app.invoke(In(text="hi"), {"thread_id": "t"})
    assert out == {"text": "hi", "out": "hi!"} and seen == [State]  # the state's own fields
    assert app.get_state({"thread_id": "t"}).values["lang"] == "en"


def test_context_schema_is_accepted_and_kept() -> None:
    g = _docs_graph(context_schema=Context)
    assert g.compile().spec.context_schema is Context
    g2 = StateGraph(OverallState, Context)
    assert g2.context_schema is Context


def test_pure_io_helpers_without_schemas_change_nothing() -> None:
    spec = _docs_graph().validate()
    assert input_update(spec, {"foo": "a"}) == {"foo": "a"}
    values = {"foo": "a", "__interrupt__": []}
    assert output_values(spec, values) == values
    with pytest.raises(InvalidUpdateError, match="input must be a dict"):
        input_update(spec, "text")
    spec_out = _docs_graph(output_schema=OutputState).validate()
    assert output_values(spec_out, {"foo": "a", "graph_output": "b", "__interrupt__": [1]}) == {
        "graph_output": "b",
        "__interrupt__": [1],
    }


def test_a_state_schema_is_required() -> None:
    with pytest.raises(GraphValidationError, match="needs a state schema"):
        StateGraph()


# -- Command[Literal[...]] and thread ids ------------------------------------------------


def test_command_is_generic_so_langgraph_annotations_work() -> None:
    def router(state: S) -> Command[Literal["left", "right"]]:
        return Command(update={"x": 1}, goto="right")

    alias = Command[Literal["a"]]
    assert alias(goto="a").goto == "a"
    g = StateGraph(S)
    g.add_node("router", router)
    g.add_node("left", _step("left"))
    g.add_node("right", _step("right"))
    g.add_edge(START, "router")
    assert g.compile().invoke({"x": 0}) == {"trail": ["right"], "x": 1}


def test_a_uuid_thread_id_is_accepted_and_names_the_same_thread() -> None:
    g = StateGraph(S)
    g.add_node("a", _step("a"))
    g.add_edge(START, "a")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    tid = uuid.uuid4()
    app.invoke({"x": 1}, {"configurable": {"thread_id": tid}})
    app.invoke({"x": 2}, {"configurable": {"thread_id": str(tid)}})
    assert app.get_state({"configurable": {"thread_id": tid}}).values["trail"] == ["a", "a"]
    assert app.runs(thread_id=str(tid))[0].thread_id == str(tid)
    with pytest.raises(ConfigError, match="thread_id must be a string"):
        app.invoke({"x": 1}, {"thread_id": 1.5})
