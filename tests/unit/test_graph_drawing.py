"""``get_graph()``: edges as LangGraph draws them, subgraphs with ``xray``, Mermaid text."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

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
        "data": {"id": ["oncegraph", "node"], "name": START},
    }
