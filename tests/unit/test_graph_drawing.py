"""``get_graph()``: edges as LangGraph draws them, subgraphs with ``xray``, Mermaid text."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

import pytest

from oncegraph import END, START, StateGraph


class S(TypedDict, total=False):
    x: int


def _n(state: S) -> dict[str, Any]:
    return {}


def test_edges_are_sorted_then_termini_end_and_joins_are_drawn() -> None:
    g = StateGraph(S)
    for name in ("up", "side", "other", "down"):
        g.add_node(name, _n)
    g.add_edge(START, "up")
    g.add_edge("up", "side")
    g.add_edge("up", "other")
    g.add_edge(["up", "side"], "down")
    g.add_edge("down", END)
    view = g.compile().get_graph()
    assert view.draw_mermaid(with_styles=False) == (
        "graph TD;\n\t__start__ --> up;\n\tside --> down;\n\tup --> down;\n\tup --> other;\n"
        "\tup --> side;\n\tdown --> __end__;\n\tother --> __end__;\n"
    )


def test_a_loop_ends_where_its_last_step_would_be() -> None:
    g = StateGraph(S)
    g.add_node("human", _n)
    g.add_node("agent", _n)
    g.add_edge(START, "human")
    g.add_edge("human", "agent")
    g.add_edge("agent", "human")
    edges = [(e.source, e.target, e.conditional) for e in g.compile().get_graph().edges]
    assert edges == [
        (START, "human", False),
        ("agent", "human", False),
        ("human", "agent", False),
        ("agent", END, True),
    ]


def test_xray_draws_a_subgraph_inside_a_block_with_prefixed_ids() -> None:
    def fast_or_slow(state: S) -> Literal["fast", "slow"]:
        return "fast"

    inner = StateGraph(S)
    inner.add_node("slow", _n)
    inner.add_node("fast", _n)
    inner.add_conditional_edges(START, fast_or_slow)
    inner.add_edge("slow", END)
    inner.add_edge("fast", END)
    outer = StateGraph(S)
    outer.add_node("one", _n)
    outer.add_node("tool", inner.compile())
    outer.add_edge(START, "one")
    outer.add_edge("one", "tool")
    app = outer.compile()
    assert "tool:fast" not in app.get_graph().nodes
    view = app.get_graph(xray=True)
    assert list(view.nodes) == [
        START,
        "one",
        END,
        "tool:__start__",
        "tool:slow",
        "tool:fast",
        "tool:__end__",
    ]
    text = view.draw_mermaid()
    assert text.startswith("---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n")
    assert "\tone --> tool\\3a__start__;\n" in text
    assert "\ttool\\3a__end__ --> __end__;\n" in text
    block = text[text.index("\tsubgraph tool\n") : text.index("\tend\n")]
    assert "\ttool\\3a__start__(<p>__start__</p>)\n" in block
    assert "\ttool\\3a__start__ -.-> tool\\3afast;\n" in block
    assert "\ttool\\3aslow --> tool\\3a__end__;\n" in block
    data = view.to_json()
    assert {"source": "tool:__start__", "target": "tool:fast", "conditional": True} in data["edges"]
    assert data["nodes"][0] == {
        "id": START,
        "type": "runnable",
        "data": {"id": ["langgraph", "_internal", "_runnable", "RunnableCallable"], "name": START},
    }


_CALLABLE = ["langgraph", "_internal", "_runnable", "RunnableCallable"]


def _runnable(node_id: str, data_id: list[str] = _CALLABLE) -> dict[str, Any]:
    return {"id": node_id, "type": "runnable", "data": {"id": data_id, "name": node_id}}


def test_a_waiting_edge_to_end_is_drawn_as_each_source_ending() -> None:
    g = StateGraph(S)
    g.add_node("A", _n)
    g.add_node("B", _n)
    g.add_edge(START, "A")
    g.add_edge(START, "B")
    g.add_edge(["A", "B"], END)
    view = g.compile().get_graph()
    assert view.to_json() == {
        "nodes": [_runnable(START), _runnable("A"), _runnable("B"), {"id": END}],
        "edges": [
            {"source": START, "target": "A"},
            {"source": START, "target": "B"},
            {"source": "A", "target": END},
            {"source": "B", "target": END},
        ],
    }
    assert view.draw_mermaid(with_styles=False) == (
        "graph TD;\n\t__start__ --> A;\n\t__start__ --> B;\n\tA --> __end__;\n\tB --> __end__;\n"
    )


def test_xray_keeps_a_subgraphs_start_and_end_that_have_more_than_one_edge() -> None:
    inner = StateGraph(S)
    inner.add_node("slow", _n)
    inner.add_node("fast", _n)
    inner.set_conditional_entry_point(lambda s: "fast", ["slow", "fast"])
    outer = StateGraph(S)
    outer.add_node("one", _n)
    outer.add_node("two", inner.compile())
    outer.set_conditional_entry_point(lambda s: "one", ["one", "two"])
    view = outer.compile().get_graph(xray=True)
    assert view.to_json() == {
        "nodes": [
            _runnable(START),
            _runnable("one"),
            {"id": END},
            _runnable("two:__start__"),
            _runnable("two:slow"),
            _runnable("two:fast"),
            {"id": "two:__end__"},
        ],
        "edges": [
            {"source": START, "target": "one", "conditional": True},
            {"source": START, "target": "two:__start__", "conditional": True},
            {"source": "one", "target": END},
            {"source": "two:__end__", "target": END},
            {"source": "two:__start__", "target": "two:fast", "conditional": True},
            {"source": "two:__start__", "target": "two:slow", "conditional": True},
            {"source": "two:fast", "target": "two:__end__"},
            {"source": "two:slow", "target": "two:__end__"},
        ],
    }
    assert view.draw_mermaid() == (
        "---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n"
        "\t__start__([<p>__start__</p>]):::first\n"
        "\tone(one)\n"
        "\t__end__([<p>__end__</p>]):::last\n"
        "\t__start__ -.-> one;\n"
        "\t__start__ -.-> two\\3a__start__;\n"
        "\tone --> __end__;\n"
        "\ttwo\\3a__end__ --> __end__;\n"
        "\tsubgraph two\n"
        "\ttwo\\3a__start__(<p>__start__</p>)\n"
        "\ttwo\\3aslow(slow)\n"
        "\ttwo\\3afast(fast)\n"
        "\ttwo\\3a__end__(<p>__end__</p>)\n"
        "\ttwo\\3a__start__ -.-> two\\3afast;\n"
        "\ttwo\\3a__start__ -.-> two\\3aslow;\n"
        "\ttwo\\3afast --> two\\3a__end__;\n"
        "\ttwo\\3aslow --> two\\3a__end__;\n"
        "\tend\n"
        "\tclassDef default fill:#f2f0ff,line-height:1.2\n"
        "\tclassDef first fill-opacity:0\n"
        "\tclassDef last fill:#bfb6fc\n"
    )


def test_the_json_names_what_runs_each_node_as_langgraph_does() -> None:
    from oncegraph.tools import ToolNode, tool

    @tool(effect="read")
    def lookup(query: str) -> str:
        """Look the query up."""
        return query

    sub = StateGraph(S)
    sub.add_node("inner", _n)
    sub.add_edge(START, "inner")
    g = StateGraph(S)
    g.add_node("fn", _n)
    g.add_node("sub", sub.compile())
    g.add_node("tools", ToolNode([lookup]))
    g.add_edge(START, "fn")
    g.add_edge("fn", "sub")
    g.add_edge("sub", "tools")
    nodes = g.compile().get_graph().to_json()["nodes"]
    assert nodes == [
        _runnable(START),
        _runnable("fn"),
        _runnable("sub", ["langgraph", "graph", "state", "CompiledStateGraph"]),
        _runnable("tools", ["langgraph", "prebuilt", "tool_node", "ToolNode"]),
        {"id": END},
    ]


def test_a_langchain_runnable_node_is_named_by_its_own_id() -> None:
    runnables = pytest.importorskip("langchain_core.runnables")
    g = StateGraph(S)
    g.add_node("lam", runnables.RunnableLambda(_n))
    g.add_node("par", {"x": runnables.RunnableLambda(lambda s: 1)})
    g.add_edge(START, "lam")
    g.add_edge("lam", "par")
    ids = [n.get("data", {}).get("id") for n in g.compile().get_graph().to_json()["nodes"]]
    assert ids == [
        _CALLABLE,
        ["langchain_core", "runnables", "base", "RunnableLambda"],
        ["langchain", "schema", "runnable", "RunnableParallel"],
        None,
    ]


def test_the_builder_lists_its_state_channels_by_key() -> None:
    class Base(TypedDict):
        question: str
        answer: str | None

    class Full(Base, total=False):
        steps: Annotated[list[str], operator.add]

    assert StateGraph(Full).channels.keys() == {"question", "answer", "steps"}


def test_node_metadata_defer_and_breakpoints_are_drawn_with_the_node() -> None:
    g = StateGraph(S)
    g.add_node("ask", _n, metadata={"owner": "ops", "tags": ["a", "b"], "skip": {"x": 1}})
    g.add_node("wait", _n, defer=True)
    g.add_node("pay", _n)
    g.add_edge(START, "ask")
    g.add_edge("ask", "wait")
    g.add_edge("wait", "pay")
    view = g.compile(interrupt_before=["pay"], interrupt_after=["pay", "ask"]).get_graph()
    metadata = {n["id"]: n.get("metadata") for n in view.to_json()["nodes"]}
    assert metadata == {
        START: None,
        "ask": {"owner": "ops", "tags": ["a", "b"], "skip": {"x": 1}, "__interrupt": "after"},
        "wait": {"defer": True},
        "pay": {"__interrupt": "before,after"},
        END: None,
    }
    text = view.draw_mermaid()
    ask = "owner = ops\ntags = a, b\n__interrupt = after"
    assert f"\task(ask<hr/><small><em>{ask}</em></small>)\n" in text
    assert "\twait(wait<hr/><small><em>defer = True</em></small>)\n" in text
    assert "\tpay(pay<hr/><small><em>__interrupt = before,after</em></small>)\n" in text


def test_metadata_text_mermaid_reads_as_syntax_is_escaped() -> None:
    g = StateGraph(S)
    g.add_node("a", _n, metadata={"why": 'a [b] (c) {d} <e> | "f" #1'})
    g.add_edge(START, "a")
    text = g.compile().get_graph().draw_mermaid()
    assert "why = a #91;b#93; #40;c#41; #123;d#125; #60;e#62; #124; #quot;f#quot; #35;1" in text


_weather = StateGraph(S)
_weather.add_node("model", _n)
_weather.add_node("lookup", _n)
_weather.add_edge(START, "model")
_weather.add_edge("model", "lookup")
_weather_app = _weather.compile(interrupt_before=["lookup"])


def _calls_weather(state: S) -> Any:
    return _weather_app.invoke(state)


def test_xray_draws_a_graph_a_function_node_calls_as_a_subgraph() -> None:
    def router(state: S) -> Literal["weather", "other"]:
        return "weather"

    g = StateGraph(S)
    g.add_node("route", _n)
    g.add_node("other", _n)
    g.add_node("weather", _calls_weather)
    g.add_edge(START, "route")
    g.add_conditional_edges("route", router)
    g.add_edge("other", END)
    g.add_edge("weather", END)
    app = g.compile()
    assert "weather:model" not in app.get_graph().nodes
    assert app.get_graph(xray=1).draw_mermaid() == (
        "---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n"
        "\t__start__([<p>__start__</p>]):::first\n"
        "\troute(route)\n"
        "\tother(other)\n"
        "\t__end__([<p>__end__</p>]):::last\n"
        "\t__start__ --> route;\n"
        "\troute -.-> other;\n"
        "\troute -.-> weather\\3amodel;\n"
        "\tother --> __end__;\n"
        "\tweather\\3alookup --> __end__;\n"
        "\tsubgraph weather\n"
        "\tweather\\3amodel(model)\n"
        "\tweather\\3alookup(lookup<hr/><small><em>__interrupt = before</em></small>)\n"
        "\tweather\\3amodel --> weather\\3alookup;\n"
        "\tend\n"
        "\tclassDef default fill:#f2f0ff,line-height:1.2\n"
        "\tclassDef first fill-opacity:0\n"
        "\tclassDef last fill:#bfb6fc\n"
    )


def test_the_react_agent_is_drawn_as_langgraphs_prebuilt_agent() -> None:
    from oncegraph.prebuilt import create_react_agent
    from oncegraph.prebuilt.models import ScriptedModel
    from oncegraph.tools import tool

    @tool(effect="read")
    def search(query: str) -> str:
        """Search for the query."""
        return query

    view = create_react_agent(ScriptedModel(lambda messages, tools: "done"), [search]).get_graph()
    assert view.to_json() == {
        "nodes": [
            _runnable(START),
            _runnable("agent"),
            _runnable("tools", ["langgraph", "prebuilt", "tool_node", "ToolNode"]),
            {"id": END},
        ],
        "edges": [
            {"source": START, "target": "agent"},
            {"source": "agent", "target": END, "conditional": True},
            {"source": "agent", "target": "tools", "conditional": True},
            {"source": "tools", "target": "agent"},
        ],
    }
    assert view.draw_mermaid(with_styles=False) == (
        "graph TD;\n\t__start__ --> agent;\n\tagent -.-> __end__;\n\tagent -.-> tools;\n"
        "\ttools --> agent;\n"
    )


def test_node_colors_and_frontmatter_config_are_written_as_langgraph_writes_them() -> None:
    pytest.importorskip("yaml")
    g = StateGraph(S)
    g.add_node("a", _n)
    g.add_edge(START, "a")
    view = g.compile().get_graph()
    text = view.draw_mermaid(
        frontmatter_config={"config": {"theme": "neutral", "themeVariables": {"c": "#e2e2e2"}}},
        node_colors={"default": "fill:#fff", "first": "fill:#000", "last": "fill:#111"},
        curve_style="basis",
    )
    assert text == (
        "---\nconfig:\n  flowchart:\n    curve: basis\n  theme: neutral\n  themeVariables:\n"
        "    c: '#e2e2e2'\n---\ngraph TD;\n"
        "\t__start__([<p>__start__</p>]):::first\n\ta(a)\n\t__end__([<p>__end__</p>]):::last\n"
        "\t__start__ --> a;\n\ta --> __end__;\n"
        "\tclassDef default fill:#fff\n\tclassDef first fill:#000\n\tclassDef last fill:#111\n"
    )


def test_a_pregel_app_is_drawn_from_its_channels_start_last_of_its_nodes() -> None:
    from oncegraph.channels import EphemeralValue, LastValue, Topic
    from oncegraph.pregel import NodeBuilder, Pregel

    one = NodeBuilder().subscribe_only("a").do(lambda x: x).write_to("b", "c")
    two = NodeBuilder().subscribe_only("b").do(lambda x: x).write_to("d")
    three = NodeBuilder().subscribe_only("c").do(lambda x: x).write_to("d")
    app = Pregel(
        nodes={"one": one, "two": two, "three": three},
        channels={
            "a": EphemeralValue(str),
            "b": LastValue(str),
            "c": LastValue(str),
            "d": Topic(str),
        },
        input_channels="a",
        output_channels="d",
    )
    view = app.get_graph()
    assert view.to_json() == {
        "nodes": [
            _runnable("one"),
            _runnable("two"),
            _runnable("three"),
            {"id": START},
            {"id": END},
        ],
        "edges": [
            {"source": START, "target": "one"},
            {"source": "one", "target": "three"},
            {"source": "one", "target": "two"},
            {"source": "three", "target": END},
            {"source": "two", "target": END},
        ],
    }
    assert view.draw_mermaid().split("graph TD;\n")[1] == (
        "\tone(one)\n\ttwo(two)\n\tthree(three)\n\t__start__([<p>__start__</p>]):::first\n"
        "\t__end__([<p>__end__</p>]):::last\n\t__start__ --> one;\n\tone --> three;\n"
        "\tone --> two;\n\tthree --> __end__;\n\ttwo --> __end__;\n"
        "\tclassDef default fill:#f2f0ff,line-height:1.2\n\tclassDef first fill-opacity:0\n"
        "\tclassDef last fill:#bfb6fc\n"
    )


def test_a_pregel_loop_ends_dotted_from_its_last_step() -> None:
    from oncegraph.channels import LastValue
    from oncegraph.pregel import NodeBuilder, Pregel

    app = Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("a").do(lambda x: x).write_to("b"),
            "two": NodeBuilder().subscribe_only("b").do(lambda x: x).write_to("a"),
        },
        channels={"a": LastValue(str), "b": LastValue(str)},
        input_channels="a",
        output_channels="b",
    )
    assert app.get_graph().to_json()["edges"] == [
        {"source": START, "target": "one"},
        {"source": "one", "target": "two"},
        {"source": "two", "target": "one"},
        {"source": "one", "target": END, "conditional": True},
    ]


async def test_get_graph_takes_a_config_and_has_an_async_twin() -> None:
    g = StateGraph(S)
    g.add_node("a", _n)
    g.add_edge(START, "a")
    app = g.compile()
    drawn = app.get_graph({"configurable": {"thread_id": "t"}}, xray=True).to_json()
    assert (await app.aget_graph(xray=1)).to_json() == drawn == app.get_graph().to_json()
