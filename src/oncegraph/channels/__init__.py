"""The channels of a low-level :class:`~oncegraph.pregel.Pregel` app (LangGraph's names).

A channel holds one value of a Pregel app's state and says how a step's writes change it:

* :class:`LastValue`: the last value written; two writes in one step are an error.
* :class:`AnyValue`: the last value written; several writes in one step are fine
  (they are assumed equal, the last one is kept).
* :class:`EphemeralValue`: the value written in the previous step, cleared after the
  step that read it (``guard=True``: two writes in one step are an error).
* :class:`Topic`: the values written, as a list (a written list adds its items);
  ``accumulate=False`` (the default) keeps only the last step's values.
* :class:`BinaryOperatorAggregate`: ``operator(current, write)`` over every write, from
  the type's zero value (``BinaryOperatorAggregate(int, operator.add)`` sums).
* :class:`UntrackedValue`: the last value written, never stored in a checkpoint (a
  resumed or later run does not see it).

Each channel is also a small value object with LangGraph's methods (``update(values)``,
``get()``, ``checkpoint()``, ``from_checkpoint(saved)``, ``is_available()``), so code that
drives a channel by hand works; :meth:`BaseChannel.as_channel` is what the run loop uses:
the state channel (:class:`oncegraph.state.channels.Channel`) with the same rule, so a
Pregel app runs on the one engine, with its checkpoints and effect ledger.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from typing import Any

from oncegraph.errors import EmptyChannelError, InvalidUpdateError
from oncegraph.state.channels import Channel, StateSchema, required_unwrapped
from oncegraph.state.codec import PLAIN, codec_for

_MISSING: Any = object()


class BaseChannel:
    """A channel of a Pregel app: ``typ`` is the type of its value."""

    #: how the run loop treats the channel between steps: "" (kept), "drop" (cleared
    #: after the step that follows its write) or "empty" (back to an empty list)
    clears: str = ""
    untracked: bool = False
    #: what marks a field's annotation as naming a channel (state/channels reads it, so
    #: the state layer needs no import of this module)
    names_a_channel: bool = True

    def __init__(self, typ: Any = Any, key: str = "") -> None:
        self.typ = typ
        self.key = key
        self.value: Any = _MISSING

    # -- the run loop's view ---------------------------------------------------------------

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        """How a second write of a step combines with the value (None: it may not)."""
        return None

    def zero(self) -> Callable[[], Any] | None:
        """The value the channel starts with (None: it starts empty)."""
        return None

    def as_channel(self, name: str) -> Channel:
        """The state channel of the run loop with this channel's rule."""
        return Channel(
            name,
            self.reducer(),
            False,
            self.zero(),
            # an untracked value is never stored: it may be any object, so no codec
            PLAIN if self.untracked else codec_for(name, self.typ),
            clears=self.clears,
            untracked=self.untracked,
        )

    # -- LangGraph's value API ---------------------------------------------------------------

    @property
    def ValueType(self) -> Any:
        return self.typ

    UpdateType = ValueType  # the type of an update: a value, unless a channel says otherwise

    def copy(self) -> BaseChannel:
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(self.__dict__)
        if isinstance(self.value, list):
            new.value = list(self.value)
        return new

    def is_available(self) -> bool:
        return self.value is not _MISSING

    def get(self) -> Any:
        if self.value is _MISSING:
            raise EmptyChannelError(
                f"channel {self.key or type(self).__name__!r} has no value yet; write it first"
            )
        return self.value

    def checkpoint(self) -> Any:
        """The value as a checkpoint keeps it (``MISSING`` when there is none)."""
        return self.value

    def from_checkpoint(self, checkpoint: Any) -> BaseChannel:
        """A fresh channel of this kind holding ``checkpoint``."""
        new = self.copy()
        new.value = _MISSING if checkpoint is _MISSING else checkpoint
        if new.value is _MISSING and self.zero() is not None:
            new.value = self.zero()()  # type: ignore[misc]
        return new

    def update(self, values: Sequence[Any]) -> bool:
        """Apply one step's writes; True when the value changed."""
        if not values:
            return False
        reducer = self.reducer()
        if reducer is None and len(values) > 1:
            raise InvalidUpdateError(
                f"At key {self.key!r}: Can receive only one value per step; give the channel "
                "a reducer (Topic, BinaryOperatorAggregate) or write it from one node"
            )
        for v in values:
            if reducer is None or self.value is _MISSING:
                self.value = v if reducer is None else reducer(self._start(), v)
            else:
                self.value = reducer(self.value, v)
        return True

    def _start(self) -> Any:
        zero = self.zero()
        return zero() if zero is not None else None

    def consume(self) -> bool:
        return False

    def finish(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.key))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self.typ, '__name__', self.typ)!s})"


class LastValue(BaseChannel):
    """The last value written; two writes in one step are an :class:`InvalidUpdateError`."""


class AnyValue(BaseChannel):
    """The last value written; several writes in one step keep the last."""

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        return _last

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            had = self.value is not _MISSING
            self.value = _MISSING
            return had
        self.value = values[-1]
        return True


class EphemeralValue(BaseChannel):
    """The value written in the previous step, cleared after the step that read it."""

    clears = "drop"

    def __init__(self, typ: Any = Any, guard: bool = True) -> None:
        super().__init__(typ)
        self.guard = guard

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        return None if self.guard else _last

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            had = self.value is not _MISSING
            self.value = _MISSING
            return had
        if self.guard and len(values) > 1:
            raise InvalidUpdateError(
                "EphemeralValue(guard=True) can receive only one value per step; write it "
                "from one node or use EphemeralValue(guard=False)"
            )
        self.value = values[-1]
        return True


class UntrackedValue(BaseChannel):
    """The last value written, never stored in a checkpoint."""

    untracked = True

    def __init__(self, typ: Any = Any, guard: bool = True) -> None:
        super().__init__(typ)
        self.guard = guard

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        return None if self.guard else _last

    def checkpoint(self) -> Any:
        return _MISSING


class Topic(BaseChannel):
    """The values written, as a list; a written list adds its items. Without
    ``accumulate`` only the values of the last step are kept."""

    def __init__(self, typ: Any = Any, accumulate: bool = False) -> None:
        super().__init__(typ)
        self.accumulate = accumulate
        self.value = []

    @property
    def clears(self) -> str:  # type: ignore[override]
        return "" if self.accumulate else "empty"

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        return topic_add

    def zero(self) -> Callable[[], Any] | None:
        return list

    def as_channel(self, name: str) -> Channel:
        return Channel(name, topic_add, False, list, codec_for(name, list), clears=self.clears)

    def is_available(self) -> bool:
        return bool(self.value)

    def get(self) -> Any:
        if not self.value:
            raise EmptyChannelError(f"topic {self.key or 'Topic'!r} has no values yet")
        return list(self.value)

    def update(self, values: Sequence[Any]) -> bool:
        before = list(self.value)
        if not self.accumulate:
            self.value = []
        for v in values:
            self.value = topic_add(self.value, v)
        return bool(self.value != before)


class BinaryOperatorAggregate(BaseChannel):
    """``operator(current, write)`` over every write, from ``typ()`` (its zero)."""

    def __init__(self, typ: Any, operator: Callable[[Any, Any], Any]) -> None:
        super().__init__(typ)
        self.operator = operator
        zero = self.zero()
        self.value = zero() if zero is not None else _MISSING

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        return self.operator

    def zero(self) -> Callable[[], Any] | None:
        base = getattr(self.typ, "__origin__", self.typ)
        if isinstance(base, type):
            try:
                base()
            except Exception:
                return None
            return base
        return None


class DeltaChannel(BaseChannel):
    """A value folded from its writes by ``reducer(value, writes)`` (a list of one step's
    writes), from ``typ()``: ``Annotated[dict, DeltaChannel(merge_files)]``. LangGraph
    stores only the writes; oncegraph stores the value (a checkpoint reads back alone)."""

    def __init__(self, reducer: Callable[[Any, list[Any]], Any], typ: Any = Any) -> None:
        super().__init__(typ)
        self.fold = reducer

    def reducer(self) -> Callable[[Any, Any], Any] | None:
        fold = self.fold
        return lambda current, update: fold(current, [update])

    def zero(self) -> Callable[[], Any] | None:
        base = getattr(self.typ, "__origin__", self.typ)
        return base if isinstance(base, type) and base in (list, dict, set, str, int) else None

    def from_checkpoint(self, checkpoint: Any) -> BaseChannel:
        """A fresh channel starting from ``checkpoint`` (None is a value here, not
        "nothing"; ``MISSING`` starts from the type's zero)."""
        new = self.copy()
        if checkpoint is _MISSING:
            zero = self.zero()
            new.value = zero() if zero is not None else _MISSING
        else:
            new.value = checkpoint
        return new

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            return False
        start = self._start() if self.value is _MISSING else self.value
        self.value = self.fold(start, list(values))
        return True

    def replay_writes(self, writes: Sequence[tuple[str, str, Any]]) -> None:
        """Fold ``(task, channel, value)`` writes onto the value, as stored in order."""
        self.update([w[2] for w in writes])


def state_channels(schema: StateSchema) -> dict[str, BaseChannel]:
    """A ``StateGraph``'s fields as LangGraph's channels (``app.channels``): the channel
    a field's annotation names, else a field with a reducer is a
    :class:`BinaryOperatorAggregate` over it and any other a :class:`LastValue`, each of
    the field's declared type. A view for code that inspects a graph; the run loop uses
    the state's own channels."""
    try:
        hints = typing.get_type_hints(schema.source, include_extras=True)
    except Exception:  # unresolvable annotations: the fields untyped
        hints = {}
    out: dict[str, BaseChannel] = {}
    meta: tuple[Any, ...]
    for name, channel in schema.channels.items():
        hint: Any = required_unwrapped(hints.get(name, Any))
        base, meta = hint, ()
        if typing.get_origin(hint) is typing.Annotated:
            base, *rest = typing.get_args(hint)
            meta = tuple(rest)
        base = required_unwrapped(base)
        named = next((m for m in meta if getattr(m, "names_a_channel", False)), None)
        made: BaseChannel
        if named is not None:
            made = named(base) if isinstance(named, type) else named
        elif channel.reducer is not None:
            made = BinaryOperatorAggregate(base, channel.reducer)
        else:
            made = LastValue(base)
        made.key = name
        out[name] = made
    return out


def topic_add(current: Any, update: Any) -> list[Any]:
    """A topic's reducer: ``update``'s items (a list) or ``update`` added to ``current``."""
    items = update if isinstance(update, list) else [update]
    return [*(current or ()), *items]


def _last(current: Any, update: Any) -> Any:
    return update


__all__ = [
    "AnyValue",
    "BaseChannel",
    "BinaryOperatorAggregate",
    "DeltaChannel",
    "EmptyChannelError",
    "EphemeralValue",
    "LastValue",
    "Topic",
    "UntrackedValue",
    "state_channels",
    "topic_add",
]
