"""State schema -> channels, and the pure application of writes to state.

A schema (TypedDict, dataclass or pydantic model) declares one channel per field. A
field annotated ``Annotated[T, reducer]`` merges updates with ``reducer``; any other
field keeps the last value written (two writes to it in one step are an error).

Message lists (:func:`add_messages`) and plain list concatenations (``operator.add`` or
:func:`append` on a list field) are *log channels*: they are stored append-only, one log
entry per item, so a checkpoint records a count and never copies the history.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.state.reducers import add_messages, append, normalize_messages

Reducer = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    reducer: Reducer | None
    log: bool
    default: Callable[[], Any] | None

    def delta(self, update: Any) -> list[Any]:
        """The log entries an update appends (log channels only)."""
        if self.reducer is add_messages:
            return normalize_messages(update)
        return list(update) if isinstance(update, list) else [update]

    def fold(self, entries: list[Any]) -> Any:
        """The channel value made of its whole log."""
        if self.reducer is add_messages:
            return add_messages([], entries)
        return entries


def _is_list_type(tp: Any) -> bool:
    return tp is list or get_origin(tp) is list


def _channel(name: str, hint: Any, default: Callable[[], Any] | None) -> Channel:
    reducer: Reducer | None = None
    base = hint
    if get_origin(hint) is typing.Annotated:
        base, *meta = get_args(hint)
        for item in meta:
            if callable(item):
                reducer = item
    log = reducer is add_messages or (reducer in (operator.add, append) and _is_list_type(base))
    if log and default is None:
        default = list
    elif reducer is not None and default is None:
        default = _zero_of(base)
    return Channel(name, reducer, log, default)


def _zero_of(tp: Any) -> Callable[[], Any] | None:
    """A reducer field's start value: the type's zero (``int() == 0``) when it has one."""
    origin = get_origin(tp) or tp
    if isinstance(origin, type) and origin in (int, float, str, list, dict, set, tuple):
        return origin
    return None


@dataclass(frozen=True, slots=True)
class StateSchema:
    """The channels of a state schema and how to hand state to nodes."""

    source: Any
    channels: Mapping[str, Channel]
    kind: str  # typeddict | dataclass | pydantic | dict

    @classmethod
    def of(cls, schema: Any) -> StateSchema:
        if schema is dict:
            return cls(schema, {}, "dict")
        if dataclasses.is_dataclass(schema) and isinstance(schema, type):
            hints = get_type_hints(schema, include_extras=True)
            channels = {}
            for f in dataclasses.fields(schema):
                default: Callable[[], Any] | None = None
                if f.default is not dataclasses.MISSING:
                    default = (lambda v: lambda: v)(f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    default = f.default_factory
                channels[f.name] = _channel(f.name, hints[f.name], default)
            return cls(schema, channels, "dataclass")
        model_fields = getattr(schema, "model_fields", None)
        if isinstance(model_fields, dict):  # pydantic v2
            channels = {}
            for name, info in model_fields.items():
                hint = info.annotation
                if info.metadata:
                    hint = typing.Annotated[(hint, *info.metadata)]
                default = None
                if not info.is_required():
                    default = (lambda i: lambda: i.get_default(call_default_factory=True))(info)
                channels[name] = _channel(name, hint, default)
            return cls(schema, channels, "pydantic")
        if isinstance(schema, type) and issubclass(schema, dict):  # TypedDict
            hints = get_type_hints(schema, include_extras=True)
            return cls(schema, {n: _channel(n, h, None) for n, h in hints.items()}, "typeddict")
        raise ConfigError(
            f"cannot use {schema!r} as a state schema; pass a TypedDict, a dataclass or a "
            "pydantic model class"
        )

    def channel(self, name: str) -> Channel:
        found = self.channels.get(name)
        if found is not None:
            return found
        if self.kind == "dict":
            return Channel(name, None, False, None)
        raise InvalidUpdateError(
            f"state has no field {name!r}; known fields: {sorted(self.channels)}. Add the "
            "field to the state schema or fix the node's return value."
        )

    def initial(self) -> dict[str, Any]:
        return {n: c.default() for n, c in self.channels.items() if c.default is not None}

    def log_channels(self) -> list[str]:
        return [n for n, c in self.channels.items() if c.log]

    def to_node_input(self, values: Mapping[str, Any]) -> Any:
        if self.kind in ("dataclass", "pydantic"):
            return self.source(**values)
        return dict(values)

    def to_update(self, node: str, value: Any) -> Mapping[str, Any]:
        """A node's return value as a mapping of channel -> update."""
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return value
        if self.kind != "typeddict" and isinstance(value, self.source):
            if self.kind == "pydantic":
                return dict(value.model_dump(exclude_unset=True))
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        raise InvalidUpdateError(
            f"node {node!r} returned {type(value).__name__}; a node must return a dict of "
            "state updates, a Command, or None"
        )


@dataclass(slots=True)
class StepWrites:
    """The result of applying one step's writes: new values and new log entries."""

    values: dict[str, Any]
    log: list[tuple[str, Any]]  # (channel, entry) in order
    changed: set[str]


def apply_writes(
    schema: StateSchema,
    values: Mapping[str, Any],
    writes: list[tuple[str, Mapping[str, Any]]],
) -> StepWrites:
    """Apply ``writes`` (``(node, update)`` in deterministic node order) to ``values``.

    Pure: ``values`` is not mutated. Log channels produce log entries; the new list is a
    new list object (the old one may be shared by earlier snapshots).
    """
    new = dict(values)
    log: list[tuple[str, Any]] = []
    written_by: dict[str, str] = {}
    for node, update in writes:
        for key, value in update.items():
            channel = schema.channel(key)
            if channel.log:
                entries = channel.delta(value)
                log.extend((key, e) for e in entries)
                assert channel.reducer is not None
                new[key] = channel.reducer(new.get(key) or [], entries)
            elif channel.reducer is not None:
                if key in new:
                    new[key] = channel.reducer(new[key], value)
                elif channel.default is not None:
                    new[key] = channel.reducer(channel.default(), value)
                else:  # no value and no zero to start from: the first write is the value
                    new[key] = value
            else:
                if key in written_by:
                    raise InvalidUpdateError(
                        f"nodes {written_by[key]!r} and {node!r} both wrote {key!r} in one "
                        f"step; give {key!r} a reducer with Annotated[..., reducer] or write "
                        "it from one node"
                    )
                written_by[key] = node
                new[key] = value
    changed = {k for _, u in writes for k in u}
    return StepWrites(new, log, changed)
