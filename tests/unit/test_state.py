"""State schemas -> channels, reducers and the pure application of writes."""

from __future__ import annotations

import dataclasses
import operator
from typing import Annotated, Any, TypedDict

import pydantic
import pytest

from oncegraph import add_messages, append
from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.state.channels import StateSchema, apply_writes
from oncegraph.state.reducers import normalize_messages


def _longest(current: str | None, update: str) -> str:
    return max(current or "", update, key=len)


class TD(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    items: Annotated[list[int], operator.add]
    tags: Annotated[list[str], append]
    total: Annotated[int, operator.add]
    longest: Annotated[str, _longest]
    last: str


@dataclasses.dataclass
class DC:
    messages: Annotated[list[dict[str, Any]], add_messages] = dataclasses.field(
        default_factory=list
    )
    count: int = 0
    name: str = "anon"


class PM(pydantic.BaseModel):
    messages: Annotated[list[dict[str, Any]], add_messages] = []
    total: Annotated[int, operator.add] = 0
    name: str = "anon"
    required: int


# -- schema -> channels ---------------------------------------------------------------


def test_typeddict_channels_and_log_detection() -> None:
    schema = StateSchema.of(TD)
    assert schema.kind == "typeddict"
    assert set(schema.channels) == {"messages", "items", "tags", "total", "longest", "last"}
    assert sorted(schema.log_channels()) == ["items", "messages", "tags"]
    assert schema.channels["total"].reducer is operator.add
    assert not schema.channels["total"].log  # operator.add on an int is not a log
    assert schema.channels["longest"].reducer is _longest
    assert schema.channels["last"].reducer is None
    # reducer fields start from their type's zero, as in LangGraph
    assert schema.initial() == {"messages": [], "items": [], "tags": [], "total": 0, "longest": ""}


def test_dataclass_channels_defaults_and_node_input() -> None:
    schema = StateSchema.of(DC)
    assert schema.kind == "dataclass"
    assert schema.log_channels() == ["messages"]
    assert schema.initial() == {"messages": [], "count": 0, "name": "anon"}
    state = schema.to_node_input({"messages": [], "count": 2, "name": "n"})
    assert isinstance(state, DC) and state.count == 2
    # a node may return the dataclass itself: every field becomes an update
    assert schema.to_update("n", DC(count=3)) == {"messages": [], "count": 3, "name": "anon"}


def test_pydantic_channels_defaults_and_node_input() -> None:
    schema = StateSchema.of(PM)
    assert schema.kind == "pydantic"
    assert schema.log_channels() == ["messages"]
    assert schema.channels["total"].reducer is operator.add
    assert schema.initial() == {"messages": [], "total": 0, "name": "anon"}  # not `required`
    state = schema.to_node_input({"messages": [], "total": 1, "name": "x", "required": 5})
    assert isinstance(state, PM) and state.required == 5
    # a returned model contributes only the fields that were set
    assert schema.to_update("n", PM(required=9)) == {"required": 9}


def test_bad_schema_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cannot use .* as a state schema"):
        StateSchema.of(42)


def test_dict_schema_accepts_any_key() -> None:
    schema = StateSchema.of(dict)
    out = apply_writes(schema, {}, [("a", {"anything": 1})])
    assert out.values == {"anything": 1}


def test_unknown_field_names_the_field_and_known_fields() -> None:
    schema = StateSchema.of(TD)
    with pytest.raises(InvalidUpdateError, match=r"no field 'nope'; known fields: \["):
        apply_writes(schema, {}, [("a", {"nope": 1})])


@pytest.mark.parametrize("bad", [1, "text", [("x", 1)]])
def test_node_return_that_is_not_an_update_is_named(bad: Any) -> None:
    with pytest.raises(InvalidUpdateError, match="node 'n' returned"):
        StateSchema.of(TD).to_update("n", bad)


def test_none_is_an_empty_update() -> None:
    assert StateSchema.of(TD).to_update("n", None) == {}


# -- reducers -------------------------------------------------------------------------


def test_operator_add_and_custom_reducers_merge_writes_of_one_step() -> None:
    schema = StateSchema.of(TD)
    values = {**schema.initial(), "total": 1, "longest": "ab"}
    out = apply_writes(
        schema,
        values,
        [
            ("a", {"items": [1], "total": 2, "longest": "abcd", "tags": "x"}),
            ("b", {"items": [2, 3], "total": 3, "longest": "abc", "tags": ["y", "z"]}),
        ],
    )
    assert out.values["items"] == [1, 2, 3]
    assert out.values["total"] == 6
    assert out.values["longest"] == "abcd"
    assert out.values["tags"] == ["x", "y", "z"]
    assert out.log == [
        ("items", 1),
        ("tags", "x"),
        ("items", 2),
        ("items", 3),
        ("tags", "y"),
        ("tags", "z"),
    ]
    assert out.changed == {"items", "total", "longest", "tags"}
    assert values["items"] == []  # pure: the input is not mutated


def test_two_nodes_writing_a_last_value_field_in_one_step_is_an_error() -> None:
    schema = StateSchema.of(TD)
    with pytest.raises(InvalidUpdateError, match="nodes 'a' and 'b' both wrote 'last'"):
        apply_writes(schema, {}, [("a", {"last": "1"}), ("b", {"last": "2"})])


def test_one_writer_of_a_last_value_field_wins() -> None:
    schema = StateSchema.of(TD)
    out = apply_writes(
        schema, {"last": "old", "total": 1}, [("a", {"last": "new"}), ("b", {"total": 1})]
    )
    assert out.values["last"] == "new"
    assert out.values["total"] == 2


def test_first_write_to_a_reducer_field_without_default() -> None:
    schema = StateSchema.of(TD)
    out = apply_writes(schema, {}, [("a", {"total": 2}), ("b", {"total": 3})])
    assert out.values["total"] == 5


def test_add_messages_gives_ids_once_and_keeps_them() -> None:
    first = add_messages([], [{"role": "user", "content": "hi"}, "plain", ("assistant", "yo")])
    ids = [m["id"] for m in first]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == 3
    assert [m["role"] for m in first] == ["user", "user", "assistant"]
    again = add_messages(first, [])
    assert [m["id"] for m in again] == ids  # no new ids for messages that have one


def test_add_messages_replaces_by_id_in_place() -> None:
    msgs = add_messages([], [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    edited = {**msgs[0], "content": "A"}
    out = add_messages(msgs, [edited, {"role": "assistant", "content": "c"}])
    assert [m["content"] for m in out] == ["A", "b", "c"]
    assert out[0]["id"] == msgs[0]["id"]
    assert [m["content"] for m in msgs] == ["a", "b"]  # the old list is not mutated


def test_add_messages_refuses_what_is_not_a_message() -> None:
    with pytest.raises(InvalidUpdateError, match="cannot use int as a message"):
        add_messages([], [42])
    with pytest.raises(InvalidUpdateError, match="has no 'role'"):
        add_messages([], [{"content": "x"}])


def test_normalize_messages_keeps_given_ids() -> None:
    out = normalize_messages({"role": "user", "content": "x", "id": "m1"})
    assert out == [{"role": "user", "content": "x", "id": "m1"}]
    assert normalize_messages(None) == []


def test_message_log_entries_carry_ids_and_the_fold_replaces_by_id() -> None:
    schema = StateSchema.of(TD)
    out = apply_writes(schema, schema.initial(), [("a", {"messages": "hello"})])
    ((channel, entry),) = out.log
    assert channel == "messages" and entry["id"] == out.values["messages"][0]["id"]
    replaced = {**entry, "content": "HELLO"}
    folded = schema.channels["messages"].fold([entry, replaced])
    assert folded == [replaced]


def test_append_accepts_single_items_and_lists() -> None:
    assert append(None, 1) == [1]
    assert append([1], [2, 3]) == [1, 2, 3]
