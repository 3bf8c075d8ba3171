"""Types survive storage: each channel's codec, chosen by its declared type.

Plain JSON types cost nothing (the identity codec); every other declared type comes back
from JSON as the type that was written; a value the declared type cannot describe is an
error when it is written, naming the field.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import operator
import uuid
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict, Union

import pydantic
import pytest
import typing_extensions

from oncegraph import END, START, FaultPlan, StateGraph, add_messages
from oncegraph._json import dumps_state, loads
from oncegraph.app import CompiledGraph
from oncegraph.errors import InvalidUpdateError, StorageError, _CrashSignal
from oncegraph.messages import Message
from oncegraph.state.channels import StateSchema, apply_writes
from oncegraph.state.codec import PLAIN, TypedCodec, codec_for, is_plain
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer


@dataclasses.dataclass
class Item:
    sku: str
    qty: int
    raw: bytes = b""


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Profile(pydantic.BaseModel):
    name: str
    born: datetime.date
    color: Color


class Shipment(typing_extensions.TypedDict):
    when: datetime.datetime
    items: list[Item]


class PlainTD(TypedDict):
    a: str
    b: NotRequired[list[dict[str, int]]]


NOW = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC)

# -- which types are plain --------------------------------------------------------------


@pytest.mark.parametrize(
    "tp",
    [
        str,
        int,
        float,
        bool,
        None,
        Any,
        list,
        dict,
        list[str],
        dict[str, list[int]],
        Optional[str],  # noqa: UP045 - the spelling users write
        Union[int, str],  # noqa: UP007
        int | None,
        Literal["a", 1, None],
        PlainTD,
        Message,
        Annotated[list[str], "meta"],
    ],
)
def test_plain_types_use_the_identity_codec(tp: Any) -> None:
    assert is_plain(tp)
    assert codec_for("f", tp) is PLAIN


@pytest.mark.parametrize(
    "tp",
    [
        Item,
        Profile,
        Shipment,
        datetime.datetime,
        datetime.date,
        Color,
        uuid.UUID,
        decimal.Decimal,
        bytes,
        tuple[int, str],
        set[str],
        frozenset[int],
        dict[int, str],
        list[Item],
        Optional[datetime.date],  # noqa: UP045
        Literal[Color.RED],
    ],
)
def test_other_types_get_a_typed_codec(tp: Any) -> None:
    assert not is_plain(tp)
    assert isinstance(codec_for("f", tp), TypedCodec)


# -- round trips through JSON ------------------------------------------------------------

ROUND_TRIPS: list[tuple[Any, Any]] = [
    (Item, Item("a", 2, b"\xff\x00\x01")),
    (Profile, Profile(name="x", born=datetime.date(2000, 1, 2), color=Color.BLUE)),
    (Shipment, {"when": NOW, "items": [Item("b", 1)]}),
    (datetime.datetime, NOW),
    (datetime.datetime, datetime.datetime(2024, 1, 1, 12)),  # naive stays naive
    (datetime.date, datetime.date(1999, 12, 31)),
    (datetime.timedelta, datetime.timedelta(hours=3, microseconds=5)),
    (Color, Color.RED),
    (uuid.UUID, uuid.UUID(int=12345)),
    (decimal.Decimal, decimal.Decimal("10.10")),
    (bytes, bytes(range(256))),
    (tuple[int, str], (1, "a")),
    (set[str], {"x", "y"}),
    (frozenset[int], frozenset({3, 1})),
    (dict[int, str], {1: "a", 2: "b"}),
    (list[Item], [Item("a", 1), Item("b", 2)]),
    (dict[str, datetime.date], {"start": datetime.date(2024, 1, 1)}),
    (Optional[datetime.date], None),  # noqa: UP045
]


@pytest.mark.parametrize(("tp", "value"), ROUND_TRIPS)
def test_typed_values_come_back_from_json_as_written(tp: Any, value: Any) -> None:
    codec = codec_for("f", tp)
    stored = loads(dumps_state(codec.encode(value)))  # through JSON text, as a store does
    back = codec.decode(stored)
    assert back == value
    assert type(back) is type(value)


def test_nested_types_come_back_as_their_own_types() -> None:
    codec = codec_for("f", Shipment)
    back = codec.decode(loads(dumps_state(codec.encode({"when": NOW, "items": [Item("b", 1)]}))))
    assert type(back["when"]) is datetime.datetime
    assert type(back["items"][0]) is Item


# -- refused at write time, naming the field ---------------------------------------------


def test_a_value_of_another_type_is_refused_naming_the_field() -> None:
    codec = codec_for("item", Item)
    with pytest.raises(InvalidUpdateError, match=r"state field 'item' is declared Item.*dict"):
        codec.encode({"sku": "a", "qty": 1})
    with pytest.raises(InvalidUpdateError, match="'when'"):
        codec_for("when", datetime.datetime).encode("2024-01-01")


def test_an_undescribable_type_is_refused_when_written_not_when_built() -> None:
    class Opaque:
        pass

    codec = codec_for("client", Opaque)  # building the graph does not fail
    with pytest.raises(InvalidUpdateError, match=r"state field 'client' is declared .*Opaque"):
        codec.encode(Opaque())


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({"when": NOW}, "datetime"),
        ({"item": Item("a", 1)}, "Item"),
        ({"tags": {"a"}}, "set"),
        ({"blob": b"x"}, "bytes"),
        ({"price": decimal.Decimal(1)}, "Decimal"),
        ({"counts": {1: 2}}, "Dict key must be str"),
        ({"profile": Profile(name="x", born=datetime.date(2000, 1, 1), color=Color.RED)}, ""),
    ],
)
def test_plain_positions_refuse_what_json_would_change(value: dict[str, Any], what: str) -> None:
    (field,) = value
    with pytest.raises(InvalidUpdateError, match=rf"state field {field!r}.*{what}"):
        dumps_state(value)


def test_the_refusal_names_the_path_inside_the_field() -> None:
    with pytest.raises(InvalidUpdateError, match=r"'meta' .* at \.history\[1\]"):
        dumps_state({"ok": 1, "meta": {"history": ["a", NOW]}})


# -- the schema: values, log entries, updates --------------------------------------------


class State(TypedDict, total=False):
    item: Item
    profile: Profile
    when: datetime.datetime
    color: Color
    uid: uuid.UUID
    price: decimal.Decimal
    blob: bytes
    pair: tuple[int, str]
    tags: set[str]
    shipment: Shipment
    events: Annotated[list[Item], operator.add]
    stamps: Annotated[list[datetime.date], operator.add]
    total: Annotated[decimal.Decimal, operator.add]
    messages: Annotated[list[Message], add_messages]
    note: str
    anything: Any


def _typed_update() -> dict[str, Any]:
    return {
        "item": Item("a", 2, b"\xfe"),
        "profile": Profile(name="p", born=datetime.date(1990, 5, 1), color=Color.RED),
        "when": NOW,
        "color": Color.BLUE,
        "uid": uuid.UUID(int=7),
        "price": decimal.Decimal("9.99"),
        "blob": b"\x00\xff",
        "pair": (3, "c"),
        "tags": {"t1", "t2"},
        "shipment": {"when": NOW, "items": [Item("s", 1)]},
        "events": [Item("e1", 1), Item("e2", 2)],
        "stamps": [datetime.date(2024, 2, 29)],
        "total": decimal.Decimal("0.10"),
        "note": "plain",
        "anything": {"k": [1, "two"]},
    }


def test_schema_marks_typed_value_and_log_channels() -> None:
    schema = StateSchema.of(State)
    assert set(schema.typed_values) == {
        "item", "profile", "when", "color", "uid", "price", "blob", "pair", "tags",
        "shipment", "total",
    }  # fmt: skip
    assert schema.typed_logs == {"events", "stamps"}
    assert schema.channels["messages"].codec is PLAIN  # message dicts are plain JSON


def test_apply_writes_hands_back_what_is_stored_and_it_decodes_to_the_values() -> None:
    schema = StateSchema.of(State)
    writes = apply_writes(schema, schema.initial(), [("n", _typed_update())])
    stored = loads(dumps_state(writes.stored))
    assert stored["when"] == "2024-05-06T07:08:09.123456Z"  # JSON, not a datetime
    decoded = schema.decode_values(stored)
    expected = {k: v for k, v in writes.values.items() if k not in schema.log_names}
    assert decoded == expected
    assert {k: type(v) for k, v in decoded.items()} == {k: type(v) for k, v in expected.items()}
    for channel in ("events", "stamps"):
        entries = [loads(dumps_state(e)) for c, e in writes.stored_log if c == channel]
        assert schema.decode_entries(channel, entries) == writes.values[channel]


def test_a_plain_schema_stores_its_values_untouched() -> None:
    class P(TypedDict, total=False):
        q: str
        docs: list[str]
        messages: Annotated[list[Message], add_messages]

    schema = StateSchema.of(P)
    assert schema.typed_values == () and not schema.typed_logs
    docs = ["a", "b"]
    writes = apply_writes(schema, schema.initial(), [("n", {"q": "x", "docs": docs})])
    assert writes.stored["docs"] is docs  # no copy, no conversion
    assert writes.stored_log is writes.log


def test_updates_round_trip_for_task_writes_and_run_input() -> None:
    schema = StateSchema.of(State)
    update = {**_typed_update(), "messages": ["hi"]}
    stored = loads(dumps_state(schema.encode_update(update)))
    back = schema.decode_update(stored)
    assert back["messages"][0]["role"] == "user" and back["messages"][0]["id"]
    del back["messages"], update["messages"]
    assert back == update
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in update.items()}


def test_writing_the_wrong_type_fails_the_step_naming_the_field() -> None:
    schema = StateSchema.of(State)
    with pytest.raises(InvalidUpdateError, match="'item'"):
        apply_writes(schema, {}, [("n", {"item": {"sku": "a", "qty": 1}})])
    with pytest.raises(InvalidUpdateError, match="'events'"):
        apply_writes(schema, {}, [("n", {"events": [{"sku": "a"}]})])


def test_a_stored_value_that_no_longer_validates_is_a_storage_error() -> None:
    schema = StateSchema.of(State)
    with pytest.raises(StorageError, match=r"'when'.*state_schema_version"):
        schema.decode_values({"when": "not a date"})


# -- whole graphs on the in-memory store (JSON text inside) -------------------------------


def _typed_app(store: Checkpointer) -> CompiledGraph:
    g = StateGraph(State)
    g.add_node("write", lambda s: _typed_update())
    g.add_node("more", lambda s: {"events": Item("e3", 3), "total": decimal.Decimal("1.01")})
    g.add_edge(START, "write")
    g.add_edge("write", "more")
    g.add_edge("more", END)
    return g.compile(checkpointer=store)


def _assert_typed(values: dict[str, Any]) -> None:
    expected = _typed_update()
    expected["events"] = [*expected["events"], Item("e3", 3)]
    expected["total"] = decimal.Decimal("1.11")
    expected["messages"] = [{"role": "user", "content": "hi", "id": values["messages"][0]["id"]}]
    assert values == expected
    for key, value in expected.items():
        assert isinstance(values[key], type(value)), key
        if not isinstance(value, list):
            assert type(values[key]) is type(value), key
    assert type(values["events"][0]) is Item
    assert type(values["shipment"]["items"][0]) is Item
    assert type(values["profile"].color) is Color


def test_typed_state_is_read_back_as_written_by_another_app_on_the_same_store() -> None:
    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}
    out = _typed_app(store).invoke({"messages": ["hi"]}, cfg)
    _assert_typed(out)
    fresh = _typed_app(store)  # no in-process head: everything decoded from stored JSON
    _assert_typed(dict(fresh.get_state(cfg).values))
    history = list(fresh.get_state_history(cfg))
    assert type(history[0].values["when"]) is datetime.datetime


def test_typed_input_and_sibling_task_writes_survive_a_crash() -> None:
    class Par(TypedDict, total=False):
        start: datetime.date
        a: Item
        b: set[int]

    def build(store: Checkpointer) -> CompiledGraph:
        g = StateGraph(Par)
        g.add_node("a", lambda s: {"a": Item("from-a", s["start"].day)})
        g.add_node("b", lambda s: {"b": {s["start"].month}})
        g.add_edge(START, "a")
        g.add_edge(START, "b")
        return g.compile(checkpointer=store)

    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}
    with pytest.raises(_CrashSignal):  # both siblings saved their writes, no checkpoint
        crash = {**cfg, "fault_plan": FaultPlan("before_checkpoint")}
        build(store).invoke({"start": datetime.date(2024, 3, 9)}, crash)
    out = build(store).invoke(None, cfg)  # a fresh app: the task writes are decoded
    assert out == {"start": datetime.date(2024, 3, 9), "a": Item("from-a", 9), "b": {3}}
    assert type(out["a"]) is Item and type(out["b"]) is set


def test_a_value_its_type_cannot_describe_fails_the_run_naming_the_field() -> None:
    g = StateGraph(State)
    g.add_node("bad", lambda s: {"anything": {"at": NOW}})
    g.add_edge(START, "bad")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    with pytest.raises(InvalidUpdateError, match=r"state field 'anything'.*at \.at.*datetime"):
        app.invoke({"note": "x"}, {"thread_id": "t"})
    assert app.runs(thread_id="t")[0].status == "failed"

    with pytest.raises(InvalidUpdateError, match=r"state field 'when' is declared datetime"):
        app.invoke({"when": "yesterday"}, {"thread_id": "t2"})


def test_pydantic_state_keeps_nested_models_as_objects() -> None:
    class Line(pydantic.BaseModel):
        sku: str
        at: datetime.datetime

    class Order(pydantic.BaseModel):
        line: Line | None = None
        lines: Annotated[list[Line], operator.add] = []
        note: str = ""

    g = StateGraph(Order)
    g.add_node("n", lambda s: {"lines": [Line(sku="b", at=NOW)], "note": type(s.line).__name__})
    g.add_edge(START, "n")
    store = InMemoryCheckpointer()
    app = g.compile(checkpointer=store)
    out = app.invoke(Order(line=Line(sku="a", at=NOW)), {"thread_id": "t"})
    assert out["note"] == "Line"
    g2 = StateGraph(Order)
    g2.add_node("n", lambda s: None)
    g2.add_edge(START, "n")
    back = g2.compile(checkpointer=store).get_state({"thread_id": "t"}).values
    assert back["line"] == Line(sku="a", at=NOW)
    assert back["lines"] == [Line(sku="b", at=NOW)]


def test_async_paths_decode_too() -> None:
    store = InMemoryCheckpointer()
    cfg = {"thread_id": "t"}

    async def main() -> None:
        await _typed_app(store).ainvoke({"messages": ["hi"]}, cfg)
        _assert_typed(dict((await _typed_app(store).aget_state(cfg)).values))

    asyncio.run(main())


def test_a_pydantic_state_validates_other_types_into_its_fields_like_pydantic() -> None:
    class Nested(pydantic.BaseModel):
        value: str

    class Complex(pydantic.BaseModel):
        text: str
        nested: Nested
        extra: Annotated[list[Nested], operator.add] = []

    def node(state: Complex) -> dict[str, Any]:
        assert type(state.nested) is Nested
        return {"text": state.text + "!", "extra": [{"value": "x"}]}

    g = StateGraph(Complex)
    g.add_node("n", node)
    g.add_edge(START, "n")
    store = InMemoryCheckpointer()
    out = g.compile(checkpointer=store).invoke(
        {"text": "hi", "nested": {"value": "v"}}, {"thread_id": "t"}
    )
    assert out == {"text": "hi!", "nested": Nested(value="v"), "extra": [Nested(value="x")]}
    assert type(out["nested"]) is Nested and type(out["extra"][0]) is Nested
    back = g.compile(checkpointer=store).get_state({"thread_id": "t"}).values
    assert back == out
    with pytest.raises(InvalidUpdateError, match=r"'nested' is declared Nested"):
        g.compile().invoke({"text": "x", "nested": {"wrong": 1}})


def test_a_list_given_for_a_tuple_field_becomes_the_tuple_before_and_after_a_restart(
    tmp_path: Any,
) -> None:
    from oncegraph.storage.checkpointer import SqliteCheckpointer

    class Steps(TypedDict):
        steps: Annotated[list[tuple[int, str]], operator.add]
        pair: tuple[str, int]

    def build(store: Any) -> Any:
        g = StateGraph(Steps)
        g.add_node("n", lambda s: {"steps": [[1, "a"]], "pair": ["x", 2]})
        g.add_edge(START, "n")
        return g.compile(checkpointer=store)

    config = {"configurable": {"thread_id": "t"}}
    first = build(SqliteCheckpointer(tmp_path / "s.db"))
    out = first.invoke({"steps": [], "pair": ("y", 1)}, config)
    assert out == {"steps": [(1, "a")], "pair": ("x", 2)}
    again = build(SqliteCheckpointer(tmp_path / "s.db")).get_state(config).values
    assert again == out and isinstance(again["pair"], tuple)
