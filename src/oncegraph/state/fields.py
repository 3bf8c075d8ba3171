"""One state field's channel, read from its annotation.

A field annotated ``Annotated[T, reducer]`` merges updates with ``reducer``; any other
field keeps the last value written. Message lists (:func:`add_messages`) and plain list
concatenations (``operator.add`` or :func:`append` on a list field) are *log channels*,
stored append-only; a Pregel channel named in the annotation (:mod:`oncegraph.channels`)
makes its own. Each channel has the codec its declared type chooses
(:mod:`oncegraph.state.codec`). The schema made of these channels is
:class:`oncegraph.state.channels.StateSchema`.
"""

from __future__ import annotations

import inspect
import operator
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from oncegraph.errors import ConfigError
from oncegraph.messages import AsGiven, MessageDict
from oncegraph.state import lcmessages
from oncegraph.state.codec import PLAIN, Codec, codec_for, element_type
from oncegraph.state.overwrite import OVERWRITE
from oncegraph.state.reducers import (
    Flavor,
    add_messages,
    append,
    merge_messages,
    messages_format,
    normalize_messages,
    uniform,
)

Reducer = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Channel:
    """One state field. ``codec`` stores its value (a log channel: each entry);
    ``flavor`` is set on message channels (``add_messages``): ``dict``, ``langchain`` or
    ``as_given``."""

    name: str
    reducer: Reducer | None
    log: bool
    default: Callable[[], Any] | None
    codec: Codec = PLAIN
    flavor: Flavor | None = None
    format: str | None = None  # add_messages(format=...): the shape messages are kept in
    # a Pregel channel's life between steps (oncegraph.channels): "" kept, "drop" cleared
    # after the step that follows its write (EphemeralValue), "empty" back to [] (Topic)
    clears: str = ""
    untracked: bool = False  # never stored in a checkpoint (UntrackedValue)

    def delta(self, update: Any, new_id: Callable[[], str] | None = None) -> list[Any]:
        """The log entries an update appends (log channels only); ``new_id`` makes the
        ids of messages that have none (:func:`normalize_messages`)."""
        if self.flavor is not None:
            entries = normalize_messages(update, self.flavor, new_id)
            if self.format is not None:
                from oncegraph.state.msgformat import formatted

                entries = formatted(self.format, entries)
            return entries
        return list(update) if isinstance(update, list) else [update]

    def extend(self, current: Any, entries: list[Any]) -> Any:
        """The value after appending ``entries`` (from :meth:`delta`) to ``current``."""
        if self.flavor is not None:
            merged = merge_messages(current or [], entries)
            return uniform(merged, entries) if self.flavor == "as_given" else merged
        assert self.reducer is not None
        return self.reducer(current or [], entries)

    def fold(self, entries: list[Any], onto: Any = None) -> Any:
        """The channel value made of its whole log (entries as :meth:`decode_entries`
        of the schema returns them), or, given ``onto`` (the value of the log's first
        entries), of the entries after those: a log folds from the left, so folding a
        prefix and then the rest gives the value of folding the whole. ``onto`` is not
        changed."""
        if self.flavor == "dict":
            return merge_messages(onto or [], [MessageDict(e) for e in entries])
        if self.flavor is not None:  # decoded by the message codec already
            merged = merge_messages(onto or [], entries)
            return uniform(merged, entries) if self.flavor == "as_given" else merged
        if any(is_reset(e) for e in entries):
            value = [] if onto is None else list(onto)
            for e in entries:
                if is_reset(e):
                    value = list(e[OVERWRITE])
                else:
                    value.append(e)
            return value
        return entries if onto is None else [*onto, *entries]


def is_reset(entry: Any) -> bool:
    """A log's reset entry (an ``Overwrite`` of the field), as stored."""
    return type(entry) is dict and len(entry) == 1 and OVERWRITE in entry


def _is_list_type(tp: Any) -> bool:
    return tp is list or get_origin(tp) is list


def _checked_reducer(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` if it can take the current value and an update (two positional values)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: trusted
        return fn
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params):
        return fn
    raise ConfigError(
        f"Invalid reducer for state field {name!r}: {getattr(fn, '__name__', fn)!r} takes "
        f"{len(positional)} positional value(s); a reducer takes two, (current, update)"
    )


def required_unwrapped(hint: Any) -> Any:
    """``hint`` without its ``Required`` / ``NotRequired`` wrapper (a TypedDict field's
    ``Required[Annotated[dict, operator.or_]]`` names its reducer inside it)."""
    while get_origin(hint) in (typing.Required, typing.NotRequired):
        hint = get_args(hint)[0]
    return hint


def channel_of(name: str, hint: Any, default: Callable[[], Any] | None) -> Channel:
    reducer: Reducer | None = None
    hint = required_unwrapped(hint)
    base = hint
    if get_origin(hint) is typing.Annotated:
        base, *meta = get_args(hint)
        for item in meta:
            if getattr(item, "is_managed_value", False):
                continue  # a managed field (StateSchema.of keeps it apart)
            made = _pregel_channel(name, base, item)
            if made is not None:
                return made
            if callable(item):
                reducer = _checked_reducer(name, item)
    log = reducer is add_messages or (reducer in (operator.add, append) and _is_list_type(base))
    if log and default is None:
        default = list
    elif reducer is not None and default is None:
        default = _zero_of(base)
    fmt = messages_format(reducer)
    if fmt is not None:  # add_messages(format=...): LangChain messages in that shape
        if default is None:
            default = list
        kept = lcmessages.MessageCodec(name)
        return Channel(name, reducer, True, default, kept, "langchain", fmt)
    if reducer is add_messages:
        item = element_type(base)
        if item is AsGiven:
            return Channel(name, reducer, log, default, lcmessages.MessageCodec(name), "as_given")
        if lcmessages.is_message_type(item):
            return Channel(name, reducer, log, default, lcmessages.MessageCodec(name), "langchain")
        return Channel(name, reducer, log, default, PLAIN, "dict")
    codec = codec_for(name, element_type(base) if log else base)
    return Channel(name, reducer, log, default, codec)


def _pregel_channel(name: str, base: Any, item: Any) -> Channel | None:
    """The field's channel when its annotation names a Pregel channel
    (``Annotated[str, UntrackedValue]`` or an instance, ``Annotated[list, Topic(str)]``):
    an :class:`oncegraph.channels.BaseChannel`, known by its ``names_a_channel`` mark."""
    if not getattr(item, "names_a_channel", False):
        return None
    chan: Any = item(base) if isinstance(item, type) else item
    if chan.typ is Any:  # Annotated[dict, DeltaChannel(fn)]: the field's type
        chan = chan.copy()
        chan.typ = base
    channel: Channel = chan.as_channel(name)
    return channel


def declares_tuple(codec: Codec) -> bool:
    """Whether a typed codec's declared type is a tuple: a list written there becomes the
    tuple (its items validated), as JSON, which has no tuples, would give it back."""
    return get_origin(getattr(codec, "hint", None)) is tuple


def managed_fields(source: Any) -> dict[str, Any]:
    """The managed fields of a state class (``remaining_steps: RemainingSteps``), by
    name: the manager its annotation names (:mod:`oncegraph.state.managed`)."""
    try:
        hints = get_type_hints(source, include_extras=True)
    except Exception:  # a class whose annotations do not resolve has none we could see
        return {}
    found: dict[str, Any] = {}
    for name, hint in hints.items():
        hint = required_unwrapped(hint)
        if get_origin(hint) is not typing.Annotated:
            continue
        for item in get_args(hint)[1:]:
            if getattr(item, "is_managed_value", False):
                found[name] = item
    return found


def is_value_type(tp: Any) -> bool:
    """Whether ``tp`` names a type of value: a class (``list``, ``str``), a generic alias
    (``list[str]``) or an ``Annotated`` one."""
    if get_origin(tp) is typing.Annotated:
        return is_value_type(get_args(tp)[0])
    return isinstance(tp, type) or get_origin(tp) is not None


def _zero_of(tp: Any) -> Callable[[], Any] | None:
    """A reducer field's start value: the type's zero (``int() == 0``) when it has one."""
    origin = get_origin(tp) or tp
    if isinstance(origin, type) and origin in (int, float, str, list, dict, set, tuple):
        return origin
    return None


__all__ = [
    "Channel",
    "Reducer",
    "channel_of",
    "declares_tuple",
    "is_reset",
    "is_value_type",
    "managed_fields",
    "required_unwrapped",
]
