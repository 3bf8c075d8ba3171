"""The compiled graph's LangGraph methods: ``with_config``, ``copy``,
``get_input_jsonschema`` / ``get_output_jsonschema``, ``bulk_update_state``,
``astream_events``."""

from __future__ import annotations

import dataclasses
import operator
from pathlib import Path
from typing import Annotated, Any, NotRequired, Required, TypedDict

import pytest
from typing_extensions import TypedDict as ExtTypedDict

from oncegraph import START, StateGraph
from oncegraph.channels import BinaryOperatorAggregate, LastValue
from oncegraph.errors import InvalidUpdateError, RecursionLimitError
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.types import StateUpdate


class S(TypedDict):
    n: int
    note: NotRequired[str]


def _graph(checkpointer: Any = None) -> Any:
    g = StateGraph(S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_node("again", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", "again")
    return g.compile(checkpointer=checkpointer)


def test_with_config_is_a_copy_whose_calls_start_from_that_config() -> None:
    app = _graph()
    limited = app.with_config(recursion_limit=2)
    assert limited is not app and limited.spec is app.spec
    with pytest.raises(RecursionLimitError):
        limited.invoke({"n": 0})
    assert app.invoke({"n": 0}) == {"n": 2}  # the original is unchanged
    assert limited.invoke({"n": 0}, {"recursion_limit": 10}) == {"n": 2}  # the call wins


def test_copy_keeps_the_spec_and_sets_what_it_is_given() -> None:
    app = _graph()
    twin = app.copy()
    assert twin is not app and twin.spec is app.spec
    assert twin.invoke({"n": 1}) == {"n": 3}


def test_json_schemas_of_input_and_output() -> None:
    class In(TypedDict):
        n: int

    class Out(TypedDict):
        total: Annotated[int, "the result"]

    g = StateGraph(S, input_schema=In, output_schema=Out)
    g.add_node("n", lambda s: {"total": s["n"]})
    g.add_edge(START, "n")
    app = g.compile()
    assert app.get_input_jsonschema()["required"] == ["n"]
    assert set(app.get_output_jsonschema()["properties"]) == {"total"}
    plain = _graph()
    schema = plain.get_input_jsonschema()
    assert set(schema["properties"]) == {"n", "note"} and schema["required"] == ["n"]


def test_the_context_schema_as_json() -> None:
    @dataclasses.dataclass
    class Ctx:
        user: str
        lang: str = "en"

    g = StateGraph(S, context_schema=Ctx)
    g.add_node("n", lambda s: None)
    g.add_edge(START, "n")
    schema = g.compile().get_context_jsonschema()
    assert schema is not None and schema["required"] == ["user"]
    assert _graph().get_context_jsonschema() is None


def test_a_dataclass_schema_is_optional_where_it_has_defaults() -> None:
    @dataclasses.dataclass
    class D:
        a: str
        b: int | None
        c: list[int] = dataclasses.field(default_factory=list)
        d: str = dataclasses.field(default=...)  # type: ignore[assignment]

    g = StateGraph(D)
    g.add_node("n", lambda s: None)
    g.add_edge(START, "n")
    schema = g.compile().get_input_jsonschema()
    assert set(schema["required"]) == {"a", "d"}
    assert set(schema["properties"]) == {"a", "b", "c", "d"}


def test_bulk_update_state_applies_each_update_and_checks_them(tmp_path: Path) -> None:
    app = _graph(SqliteCheckpointer(str(tmp_path / "runs.db")))
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"n": 0}, cfg)
    last = app.bulk_update_state(
        cfg, [[StateUpdate({"n": 10}, "inc")], [StateUpdate({"note": "x"}, "again")]]
    )
    assert app.get_state(last).values == {"n": 10, "note": "x"}
    with pytest.raises(ValueError, match="No supersteps provided"):
        app.bulk_update_state(cfg, [])
    with pytest.raises(ValueError, match="No updates provided"):
        app.bulk_update_state(cfg, [[], []])
    with pytest.raises(InvalidUpdateError, match="as_node"):
        app.bulk_update_state(cfg, [[StateUpdate({"n": 1}), StateUpdate({"n": 2})]])


async def test_astream_events_is_the_run_its_nodes_and_what_they_call() -> None:
    app = _graph()
    events = [e async for e in app.astream_events({"n": 0}, version="v2")]
    root = app.get_name()
    assert [(e["event"], e["name"]) for e in events] == [
        ("on_chain_start", root),
        ("on_chain_start", "inc"),
        ("on_chain_stream", "inc"),
        ("on_chain_end", "inc"),
        ("on_chain_stream", root),
        ("on_chain_start", "again"),
        ("on_chain_stream", "again"),
        ("on_chain_end", "again"),
        ("on_chain_stream", root),
        ("on_chain_end", root),
    ]
    chunks = [e["data"]["chunk"] for e in events if e["event"] == "on_chain_stream"]
    assert chunks == [{"n": 1}, {"inc": {"n": 1}}, {"n": 2}, {"again": {"n": 2}}]  # node, graph
    assert events[-1]["data"]["output"] == {"n": 2}
    assert [len(e["parent_ids"]) for e in events if e["name"] == "inc"] == [1, 1, 1]
    assert events[1]["tags"] == ["graph:step:1"]


async def test_astream_events_streams_a_chat_models_tokens() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class Q(TypedDict, total=False):
        q: str
        a: str

    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello there")]))

    async def ask(state: Q, config: Any) -> dict[str, Any]:
        return {"a": (await model.ainvoke(state["q"], config)).content}

    app = StateGraph(Q).add_node("ask", ask).add_edge(START, "ask").compile()
    events = [e async for e in app.astream_events({"q": "hi"}, version="v2")]
    tokens = [e["data"]["chunk"].content for e in events if e["event"] == "on_chat_model_stream"]
    assert tokens == ["hello", " ", "there"]
    streamed = next(e for e in events if e["event"] == "on_chat_model_stream")
    assert streamed["metadata"]["langgraph_node"] == "ask"
    assert len(streamed["parent_ids"]) == 2  # the graph's run, then the node's
    assert events[-1]["data"]["output"] == {"q": "hi", "a": "hello there"}


def test_channels_show_each_field_as_langgraph_names_its_channel() -> None:
    class Wide(ExtTypedDict, total=False):
        tags: Required[Annotated[dict[str, int], operator.or_]]
        label: str

    g = StateGraph(Wide)
    g.add_node("n", lambda s: {"tags": {"b": 2}})
    g.add_edge(START, "n")
    app = g.compile()
    chans = app.channels
    assert isinstance(chans["tags"], BinaryOperatorAggregate)
    assert isinstance(chans["label"], LastValue) and chans["label"].typ is str
    # the reducer inside Required[...] is the field's reducer when the graph runs, too
    assert app.invoke({"tags": {"a": 1}}) == {"tags": {"a": 1, "b": 2}}


def test_json_schema_of_a_typing_extensions_typeddict_keeps_required_optionals() -> None:
    class In(ExtTypedDict):
        name: str | None  # a total TypedDict's key: required, though it may be None
        extra: NotRequired[int]

    g = StateGraph(In)
    g.add_node("n", lambda s: {})
    g.add_edge(START, "n")
    described = g.compile().get_input_jsonschema()
    assert set(described["required"]) == {"name"}
    assert set(described["properties"]) == {"name", "extra"}
