"""StateGraph building and validation: every error names the bad node or edge.

Routing errors found while running (a router or a ``Command(goto=...)`` naming an
unknown node) are ``GraphValidationError`` too, and also name the culprit.
"""

from __future__ import annotations

import itertools
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph
from oncegraph.errors import ConfigError, GraphValidationError


class S(TypedDict, total=False):
    x: int


def inc(state: S) -> dict[str, Any]:
    return {"x": state.get("x", 0) + 1}


def noop(state: S) -> None:
    return None


def _line(*names: str) -> StateGraph:
    g = StateGraph(S)
    for n in names:
        g.add_node(n, inc)
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g


def test_a_valid_graph_compiles_and_runs_without_checkpointer() -> None:
    app = _line("a", "b").compile()
    assert app.invoke({"x": 1}) == {"x": 3}


def test_unknown_edge_target_is_named() -> None:
    g = _line("a")
    g.add_edge("a", "missing")
    with pytest.raises(GraphValidationError, match=r"'a' -> 'missing'.*unknown node 'missing'"):
        g.compile()


def test_unknown_edge_source_is_named() -> None:
    g = _line("a")
    g.add_edge("ghost", "a")
    with pytest.raises(GraphValidationError, match="unknown node 'ghost'"):
        g.compile()


def test_no_entry_point_names_the_fix() -> None:
    g = StateGraph(S)
    g.add_node("a", inc)
    g.add_edge("a", END)
    with pytest.raises(GraphValidationError, match=r"no entry point.*add_edge\(START"):
        g.compile()


def test_set_entry_point_and_finish_point_are_edges() -> None:
    g = StateGraph(S)
    g.add_node("a", inc)
    g.set_entry_point("a")
    g.set_finish_point("a")
    assert g.compile().invoke({"x": 0}) == {"x": 1}


def test_duplicate_node_is_named() -> None:
    g = StateGraph(S)
    g.add_node("a", inc)
    with pytest.raises(GraphValidationError, match="node 'a' is already in the graph"):
        g.add_node("a", noop)


@pytest.mark.parametrize("reserved", [START, END])
def test_reserved_names_are_refused(reserved: str) -> None:
    g = StateGraph(S)
    with pytest.raises(GraphValidationError, match=f"'{reserved}' is reserved"):
        g.add_node(reserved, inc)


@pytest.mark.parametrize("bad", ["", "a:b", "a|b"])
def test_bad_node_names_are_refused(bad: str) -> None:
    with pytest.raises(GraphValidationError, match=r"must be non-empty, without ':' or '\|'"):
        StateGraph(S).add_node(bad, inc)


def test_add_node_by_function_takes_its_name() -> None:
    g = StateGraph(S)
    g.add_node(inc)
    g.add_edge(START, "inc")
    assert g.compile().invoke({"x": 4}) == {"x": 5}


def test_add_node_needs_a_callable() -> None:
    g = StateGraph(S)
    with pytest.raises(GraphValidationError, match="needs a function"):
        g.add_node("a")
    with pytest.raises(GraphValidationError, match=r"'a'.*not callable"):
        g.add_node("a", 42)  # type: ignore[arg-type]
    with pytest.raises(GraphValidationError, match="name must be a string"):
        g.add_node(inc, inc)


def test_end_has_no_outgoing_and_start_no_incoming_edges() -> None:
    g = StateGraph(S)
    with pytest.raises(GraphValidationError, match="END has no outgoing"):
        g.add_edge(END, "a")
    with pytest.raises(GraphValidationError, match="START has no incoming"):
        g.add_edge("a", START)
    with pytest.raises(GraphValidationError, match="END has no outgoing"):
        g.add_conditional_edges(END, lambda s: "a")


def test_conditional_edge_path_map_to_unknown_node_is_named() -> None:
    g = _line("a")
    g.add_conditional_edges("a", lambda s: "go", {"go": "nowhere"})
    with pytest.raises(GraphValidationError, match="from 'a' maps to unknown node 'nowhere'"):
        g.compile()


def test_conditional_edge_from_unknown_node_is_named() -> None:
    g = _line("a")
    g.add_conditional_edges("ghost", lambda s: END)
    with pytest.raises(GraphValidationError, match="conditional edge from unknown node 'ghost'"):
        g.compile()


def test_router_returning_unknown_node_is_named() -> None:
    g = StateGraph(S)
    g.add_node("a", inc)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "elsewhere")
    with pytest.raises(GraphValidationError, match=r"router of 'a' returned 'elsewhere'"):
        g.compile().invoke({"x": 0})


def test_router_result_outside_path_map_is_named() -> None:
    g = StateGraph(S)
    g.add_node("a", inc)
    g.add_node("b", inc)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "c", {"b": "b"})
    with pytest.raises(GraphValidationError, match=r"router of 'a' returned 'c'.*path_map"):
        g.compile().invoke({"x": 0})


def test_command_goto_unknown_node_is_named() -> None:
    def jump(state: S) -> Command:
        return Command(update={"x": 1}, goto="nowhere")

    g = StateGraph(S)
    g.add_node("jump", jump)
    g.add_edge(START, "jump")
    with pytest.raises(
        GraphValidationError, match=r"'jump' returned Command\(goto='nowhere'\); no such node"
    ):
        g.compile().invoke({"x": 0})


def test_an_async_router_is_awaited() -> None:
    async def route(state: S) -> str:
        return END if state["x"] >= 3 else "a"

    g = StateGraph(S)
    g.add_node("a", inc)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", route)
    assert g.compile().invoke({"x": 0}) == {"x": 3}


def test_bad_state_schema_names_the_fix() -> None:
    # a value, not a type: neither a schema of fields nor a root-value type
    with pytest.raises(ConfigError, match="TypedDict, a dataclass or a pydantic model"):
        StateGraph(42)


def test_graph_validation_error_is_a_config_error() -> None:
    assert issubclass(GraphValidationError, ConfigError)
    assert issubclass(GraphValidationError, ValueError)


def test_fingerprint_tracks_shape_not_functions() -> None:
    a = _line("a", "b").compile()
    same = _line("a", "b").compile()
    other = _line("a", "c").compile()
    g = _line("a", "b")
    g.add_conditional_edges("a", lambda s: "b", ["b", END])
    routed = g.compile()
    assert a.fingerprint == same.fingerprint
    assert len({a.fingerprint, other.fingerprint, routed.fingerprint}) == 3


def test_compile_overrides_name_and_version() -> None:
    app = _line("a").compile(name="flow", version=7)
    assert (app.spec.name, app.spec.version) == ("flow", "7")
