"""State schema -> channels, and the pure application of writes to state.

A schema (TypedDict, dataclass or pydantic model) declares one channel per field. A
field annotated ``Annotated[T, reducer]`` merges updates with ``reducer``; any other
field keeps the last value written (two writes to it in one step are an error). How one
field's annotation makes its channel is :mod:`oncegraph.state.fields`.

Message lists (:func:`add_messages`) and plain list concatenations (``operator.add`` or
:func:`append` on a list field) are *log channels*: they are stored append-only, one log
entry per item, so a checkpoint records a count and never copies the history.

Each channel has a codec (:mod:`oncegraph.state.codec`) chosen by its declared type: the
value's for a value channel, the item's for a log channel. The state schema encodes what
is stored (:meth:`StateSchema.encode_update`, and :func:`apply_writes` hands back the
encoded values and log entries of a step) and decodes what is read back
(:meth:`StateSchema.decode_values`, :meth:`StateSchema.decode_entries`), so a value comes
back in a fresh process as the type that was written.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from oncegraph._json import untag
from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.state.fields import (  # Channel, required_unwrapped: also imported from here
    Channel,
    channel_of,
    declares_tuple,
    is_reset,
    is_value_type,
    managed_fields,
    required_unwrapped,
)
from oncegraph.state.overwrite import OVERWRITE, Overwrite, overwritten

log = logging.getLogger(__name__)

ROOT = "__root__"
"""The one channel of a root-value state (``StateGraph(Annotated[list, add])``)."""


def public(update: Mapping[str, Any]) -> Any:
    """A root-value state's update or values as LangGraph shows them: the value itself;
    any other state's as given."""
    if len(update) == 1 and ROOT in update:
        return update[ROOT]
    return update


@dataclass(frozen=True, slots=True)
class StateSchema:
    """The channels of a state schema and how to hand state to nodes."""

    source: Any
    channels: Mapping[str, Channel]
    kind: str  # typeddict | dataclass | pydantic | dict | root
    source_fields: frozenset[str] | None = None  # the source's own fields, when merged
    # managed fields (``RemainingSteps``): filled in for each step, not channels
    # (oncegraph.state.managed), by name: the manager
    managed: Mapping[str, Any] = field(default_factory=dict)
    log_names: frozenset[str] = field(init=False)
    typed_values: tuple[str, ...] = field(init=False)  # value channels with a typed codec
    typed_logs: frozenset[str] = field(init=False)  # log channels with a typed codec
    # Pregel channels cleared between steps, and those never stored (oncegraph.channels)
    clearing: tuple[Channel, ...] = field(init=False)
    untracked: frozenset[str] = field(init=False)
    # (node, key) pairs already warned of as outside the schema: one warning each
    _warned: set[tuple[str, str]] = field(
        init=False, default_factory=set, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        chans = self.channels.values()
        set_ = object.__setattr__
        set_(self, "clearing", tuple(c for c in chans if c.clears))
        set_(self, "untracked", frozenset(c.name for c in chans if c.untracked))
        set_(self, "log_names", frozenset(c.name for c in chans if c.log))
        set_(self, "typed_values", tuple(c.name for c in chans if not c.log and not c.codec.plain))
        set_(self, "typed_logs", frozenset(c.name for c in chans if c.log and not c.codec.plain))

    @classmethod
    def of(cls, schema: Any) -> StateSchema:
        made = cls._of(schema)
        managed = managed_fields(made.source) if made.kind != "root" else {}
        if not managed:
            return made
        return StateSchema(
            made.source,
            {k: c for k, c in made.channels.items() if k not in managed},
            made.kind,
            source_fields=made.source_fields,
            managed=managed,
        )

    @classmethod
    def _of(cls, schema: Any) -> StateSchema:
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
                channels[f.name] = channel_of(f.name, hints[f.name], default)
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
                channels[name] = channel_of(name, hint, default)
            return cls(schema, channels, "pydantic")
        if isinstance(schema, type) and (
            issubclass(schema, dict) or "__annotations__" in vars(schema)
        ):  # a TypedDict, or a plain annotated class: its annotations are the fields
            hints = get_type_hints(schema, include_extras=True)
            if list(hints) == [ROOT]:  # LangGraph's spelling of a root-value state
                return cls(hints[ROOT], {ROOT: channel_of(ROOT, hints[ROOT], None)}, "root")
            return cls(schema, {n: channel_of(n, h, None) for n, h in hints.items()}, "typeddict")
        if is_value_type(schema):
            # LangGraph's root-value state: the whole state is one value of this type
            # (``Annotated[list, add]``: a list the nodes' returns are appended to)
            return cls(schema, {ROOT: channel_of(ROOT, schema, None)}, "root")
        raise ConfigError(
            f"cannot use {schema!r} as a state schema; pass a TypedDict, a dataclass or a "
            "pydantic model class, or a value type (list[str], Annotated[list, operator.add]) "
            "for a state that is one value"
        )

    def with_fields_of(self, *others: StateSchema | None) -> StateSchema:
        """This schema plus the fields of ``others`` it lacks (LangGraph's input and
        output schemas add their fields to the state). Nodes of a dataclass or pydantic
        state still get an instance of the state class, made of its own fields."""
        known = self.channels.keys() | self.managed.keys()
        given = [other for other in others if other is not None]
        extra = {n: c for o in given for n, c in o.channels.items() if n not in known}
        managed = {n: m for o in given for n, m in o.managed.items() if n not in known}
        if (not extra and not managed) or self.kind == "dict":
            return self
        return StateSchema(
            self.source,
            {**self.channels, **extra},
            self.kind,
            source_fields=self.source_fields or frozenset(self.channels),
            managed={**self.managed, **managed},
        )

    @property
    def is_root(self) -> bool:
        """Whether the state is one value (a root-value schema), not a set of fields."""
        return self.kind == "root"

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

    # -- storage: encode what is written, decode what is read back -----------------------

    def encode_values(self, values: dict[str, Any]) -> dict[str, Any]:
        """The value channels of ``values`` as stored (log channels left out).

        A pydantic state validates a value of another type into the field's type, as
        pydantic does (a dict into a nested model), and ``values`` gets the validated
        value too, so the state in this process is what a fresh one reads back. Other
        states refuse it (:class:`InvalidUpdateError` naming the field), but for a list
        where a tuple is declared: it becomes that tuple, as JSON would give it back.
        """
        logs = self.log_names | self.untracked if self.untracked else self.log_names
        stored = {k: v for k, v in values.items() if k not in logs}
        for name in self.typed_values:
            if name in stored:
                value, stored[name] = self._encode(name, stored[name])
                if value is not stored[name]:
                    values[name] = value
        return stored

    def _encode(self, name: str, value: Any) -> tuple[Any, Any]:
        """``(value, stored)``; the value is validated first when a pydantic state needs,
        or when a list is written where a tuple is declared (any state)."""
        codec = self.channels[name].codec
        try:
            return value, codec.encode(value)
        except InvalidUpdateError:
            coerce = getattr(codec, "coerce", None)
            listed = isinstance(value, list) and declares_tuple(codec)
            if (self.kind != "pydantic" and not listed) or coerce is None:
                raise
            value = coerce(value)
            return value, codec.encode(value)

    def decode_values(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """Stored value channels back as their declared types."""
        values = dict(stored)
        typed = self.typed_values
        for name in typed:
            if values.get(name) is not None:
                values[name] = self.channels[name].codec.decode(values[name])
        for name, value in stored.items():  # tagged forms at plain positions (a Command)
            if type(value) in (dict, list) and name not in typed:
                values[name] = untag(value)
        return values

    def encode_entries(self, channel: str, entries: list[Any]) -> list[Any]:
        if channel not in self.typed_logs:
            return entries
        encode = self.channels[channel].codec.encode
        return [encode(e) for e in entries]

    def decode_entries(self, channel: str, entries: list[Any]) -> list[Any]:
        """Stored log entries of ``channel`` back as their declared type (at a plain
        position, a tagged form as its value; a message dict holds none, so a long chat's
        dict messages are not walked)."""
        if channel not in self.typed_logs:
            if self.channels[channel].flavor is not None:
                return entries
            return untag(entries)  # type: ignore[no-any-return]
        decode = self.channels[channel].codec.decode
        return [
            {OVERWRITE: [decode(x) for x in e[OVERWRITE]]} if is_reset(e) else decode(e)
            for e in entries
        ]

    def encode_update(self, update: Mapping[str, Any]) -> dict[str, Any]:
        """A node's (or the caller's) update as stored in a task write or a run's input.

        A log channel's update is stored as its normalized entries (messages with their
        ids), a value channel's as its declared type; a reducer whose update is not of
        the field's type cannot be stored (the error names the field). An untracked field
        (``UntrackedValue``) is left out: its values are never stored.
        """
        out: dict[str, Any] = {}
        untracked = self.untracked
        for key, value in update.items():
            if untracked and key in untracked:
                continue
            channel = self.channel(key)
            if channel.reducer is not None and channel.flavor is None:
                is_overwrite, inner = overwritten(value)
                if is_overwrite:  # stored in its JSON form, the value as declared
                    out[key] = {OVERWRITE: self.encode_update({key: inner})[key]}
                    continue
            if channel.log:
                out[key] = (
                    self.encode_entries(key, channel.delta(value))
                    if channel.flavor is not None or key in self.typed_logs
                    else value
                )
            elif value is None or channel.codec.plain:
                out[key] = value
            else:
                out[key] = self._encode(key, value)[1]
        return out

    def decode_update(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """An update stored by :meth:`encode_update`, as the node wrote it."""
        out: dict[str, Any] = {}
        for key, value in stored.items():
            channel = self.channel(key)
            if channel.reducer is not None and channel.flavor is None:
                is_overwrite, inner = overwritten(value)
                if is_overwrite:
                    out[key] = Overwrite(self.decode_update({key: inner})[key])
                    continue
            if channel.log:
                out[key] = (
                    self.decode_entries(key, value) if key in self.typed_logs else untag(value)
                )
            elif value is None or channel.codec.plain:
                out[key] = untag(value)
            else:
                out[key] = channel.codec.decode(value)
        return out

    def initial(self) -> dict[str, Any]:
        return {n: c.default() for n, c in self.channels.items() if c.default is not None}

    def log_channels(self) -> list[str]:
        return [n for n, c in self.channels.items() if c.log]

    def to_node_input(self, values: Mapping[str, Any]) -> Any:
        """What a node (or router) of this schema reads: the state schema's own fields
        (not those other schemas added), as the schema's class for a dataclass or
        pydantic state; the value itself for a root-value state."""
        if self.kind == "root":
            return values.get(ROOT)
        own = self.source_fields
        if own is not None and self.managed:
            own = own | frozenset(self.managed)
        if self.kind in ("dataclass", "pydantic"):
            if own is not None:
                return self.source(**{k: v for k, v in values.items() if k in own})
            return self.source(**values)
        if own is not None:
            return {k: v for k, v in values.items() if k in own}
        return dict(values)

    def known(self, node: str, update: Mapping[str, Any]) -> Mapping[str, Any]:
        """``update`` without the keys this schema has no field for, as LangGraph drops
        them (an input key outside the input schema, a node's key outside the state).

        A dropped key is logged once per node and key (a typo would otherwise go
        unnoticed); a managed field (``RemainingSteps``) is dropped without a word.
        """
        channels = self.channels
        if self.kind == "dict" or all(k in channels for k in update):
            return update
        kept: dict[str, Any] = {}
        for key, value in update.items():
            if key in channels:
                kept[key] = value
            elif key not in self.managed and (node, key) not in self._warned:
                self._warned.add((node, key))
                log.warning("%s", self._dropped(node, key))
        return kept

    def _dropped(self, node: str, key: str) -> str:
        known = sorted(self.channels)
        if node == "__start__":
            return (
                f"input key {key!r} is not a field of the graph's input schema, so it is "
                f"dropped (as LangGraph drops it); known fields: {known}. Add {key!r} to "
                "the input schema (or the state schema) or fix the input."
            )
        return (
            f"node {node!r} wrote {key!r}, which is not a field of the state schema, so it "
            "is not stored (as LangGraph drops it; only the node's conditional edges read "
            f"it); known fields: {known}. Add {key!r} to the state schema to keep it, or fix "
            "the node's return value."
        )

    def to_update(self, node: str, value: Any) -> Mapping[str, Any]:
        """A node's return value as a mapping of channel -> update; keys the schema has
        no field for are dropped (:meth:`known`)."""
        if value is None:
            return {}
        if self.kind == "root":  # the node's return is the new value (or the reducer's update)
            if isinstance(value, Mapping) and len(value) == 1 and ROOT in value:
                return value  # already the update of the one channel
            return {ROOT: value}
        if isinstance(value, Mapping):
            return self.known(node, value)
        if self.kind != "typeddict" and isinstance(value, self.source):
            if self.kind == "pydantic":  # the set fields, as objects (not dumped to dicts)
                return {name: getattr(value, name) for name in value.model_fields_set}
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        fields = getattr(type(value), "model_fields", None)
        if isinstance(fields, dict):  # another pydantic model: its fields of the state
            kept = value.model_fields_set
            return {
                k: v
                for k in self.channels
                if k in fields
                and (
                    (v := getattr(value, k)) is not None
                    or fields[k].default is not None
                    or k in kept
                )
            }
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: getattr(value, f.name)
                for f in dataclasses.fields(value)
                if f.name in self.channels
            }
        raise InvalidUpdateError(
            f"node {node!r} returned {type(value).__name__}; a node must return a dict of "
            "state updates, a Command, a list of Commands, or None"
        )


@dataclass(slots=True)
class StepWrites:
    """The result of applying one step's writes: new values and new log entries, as
    objects (``values``, ``log``) and as stored (``stored``: the value channels encoded;
    ``stored_log``: the entries encoded, same order as ``log``)."""

    values: dict[str, Any]
    log: list[tuple[str, Any]]  # (channel, entry) in order
    changed: set[str]
    stored: dict[str, Any]
    stored_log: list[tuple[str, Any]]


def apply_writes(
    schema: StateSchema,
    values: Mapping[str, Any],
    writes: list[tuple[str, Mapping[str, Any]]],
) -> StepWrites:
    """Apply ``writes`` (``(node, update)`` in deterministic node order) to ``values``.

    Pure: ``values`` is not mutated. Log channels produce log entries; the new list is a
    new list object (the old one may be shared by earlier snapshots). Every value channel
    is encoded for storage (not only the written ones: a node may have changed a value in
    place), so a value its declared type cannot describe fails here, naming the field.
    """
    new = dict(values)
    if schema.clearing:  # a Pregel app's channels that last only one step
        _clear(schema.clearing, new)
    log: list[tuple[str, Any]] = []
    written_by: dict[str, str] = {}
    replaced: dict[str, str] = {}  # field -> the node that overwrote it (Overwrite)
    for node, update in writes:
        for key, value in update.items():
            channel = schema.channel(key)
            if channel.log:
                if key in replaced or (channel.flavor is None and overwritten(value)[0]):
                    _overwrite_log(channel, node, value, new, log, replaced)
                    continue
                entries = channel.delta(value)
                if key in schema.typed_logs:
                    coerce = getattr(channel.codec, "coerce", None)
                    if coerce is not None and schema.kind == "pydantic":
                        entries = [coerce(e) for e in entries]  # as pydantic validates
                    elif coerce is not None and declares_tuple(channel.codec):
                        entries = [coerce(e) if isinstance(e, list) else e for e in entries]
                log.extend((key, e) for e in entries)
                new[key] = channel.extend(new.get(key), entries)
            elif channel.reducer is not None:
                is_overwrite, replacement = overwritten(value)
                if is_overwrite or key in replaced:
                    if is_overwrite and key in replaced:
                        raise InvalidUpdateError(
                            f"Can receive only one Overwrite value per super-step: nodes "
                            f"{replaced[key]!r} and {node!r} both overwrote {key!r}; let one "
                            "node overwrite it"
                        )
                    if is_overwrite:
                        replaced[key] = node
                        new[key] = replacement
                    continue  # after an overwrite, the step's other writes are dropped
                if key in new:
                    new[key] = channel.reducer(new[key], value)
                elif channel.default is not None:
                    new[key] = channel.reducer(channel.default(), value)
                else:  # no value and no zero to start from: the first write is the value
                    new[key] = value
            else:
                if key in written_by:
                    raise InvalidUpdateError(
                        f"At key {key!r}: nodes {written_by[key]!r} and {node!r} both wrote "
                        f"{key!r} in one "
                        f"step; give {key!r} a reducer with Annotated[..., reducer] or write "
                        "it from one node"
                    )
                written_by[key] = node
                new[key] = value
    changed = {k for _, u in writes for k in u}
    stored_log = log
    if schema.typed_logs:
        typed = schema.typed_logs
        chans = schema.channels
        stored_log = [
            (k, chans[k].codec.encode(e) if k in typed and not isinstance(e, Overwrite) else e)
            for k, e in log
        ]
    if replaced:  # an overwrite of a log is a reset entry in it
        stored_log = [_stored_reset(schema, k, e) for k, e in stored_log]
    return StepWrites(new, log, changed, schema.encode_values(new), stored_log)


def _clear(channels: tuple[Channel, ...], values: dict[str, Any]) -> None:
    """What the step before left in ``channels`` cleared: an ``EphemeralValue`` dropped,
    a ``Topic`` that does not accumulate emptied."""
    for channel in channels:
        if channel.name not in values:
            continue
        if channel.clears == "drop":
            del values[channel.name]
        else:
            values[channel.name] = []


def _overwrite_log(
    channel: Channel,
    node: str,
    value: Any,
    new: dict[str, Any],
    log: list[tuple[str, Any]],
    replaced: dict[str, str],
) -> None:
    """An ``Overwrite`` of a log field (a list with ``operator.add``): the log gets a reset
    entry holding the new entries; the step's later plain writes of the field are dropped."""
    key = channel.name
    is_overwrite, inner = overwritten(value)
    if not is_overwrite:
        return  # a plain write after the step's overwrite: dropped, as LangGraph does
    if key in replaced:
        raise InvalidUpdateError(
            f"Can receive only one Overwrite value per super-step: nodes {replaced[key]!r} "
            f"and {node!r} both overwrote {key!r}; let one node overwrite it"
        )
    replaced[key] = node
    entries = channel.delta(inner)
    log.append((key, Overwrite(entries)))
    new[key] = list(entries)


def _stored_reset(schema: StateSchema, key: str, entry: Any) -> tuple[str, Any]:
    if not isinstance(entry, Overwrite):
        return key, entry
    return key, {OVERWRITE: schema.encode_entries(key, list(entry.value))}


__all__ = [
    "ROOT",
    "Channel",
    "StateSchema",
    "StepWrites",
    "apply_writes",
    "public",
    "required_unwrapped",
]
