"""How a state value is stored and read back: one codec per channel, chosen by its type.

JSON is the one storage format. A channel whose declared type is *plain JSON* (``str``,
``int``, ``float``, ``bool``, ``None``, ``Any``, ``Literal`` of those, ``list``/``dict``
with ``str`` keys of those, TypedDicts of those, unions of those) is stored as it is:
its codec is :data:`PLAIN`, encode and decode are the identity, and a plain state costs
nothing on the hot path. Any other declared type (a dataclass, a pydantic model,
``datetime``/``date``/``time``/``timedelta``, ``Enum``, ``UUID``, ``Decimal``,
``bytes``, ``tuple``, ``set``, ``frozenset``, a dict with non-``str`` keys, LangChain
messages, and containers of those) gets a :class:`TypedCodec`: a pydantic
``TypeAdapter`` that dumps the value in JSON mode (``bytes`` as base64) and validates
the JSON back into the declared type. No pickle.

Invariants an implementer must keep:

* ``decode(encode(v)) == v``, of the same type, for every ``v`` the declared type
  describes, in any process (the adapter is rebuilt from the type, never from the data).
* ``encode`` refuses, at write time, a value its declared type does not describe (a
  ``dict`` written to a dataclass field): :class:`~oncegraph.errors.InvalidUpdateError`
  naming the field, because the value would come back as another type after a restart.
* At plain positions the store refuses what JSON would silently turn into another type
  (``datetime``, dataclasses, pydantic models, sets, bytes, ``Decimal``, non-``str``
  keys; see :func:`oncegraph._json.dumps_state`), also naming the field. Known gap:
  ``UUID``, ``Enum`` and ``tuple`` values at an ``Any`` position are written as their
  JSON form (the encoder handles them natively); declare the type to keep them.
* Building a codec never imports pydantic: the adapter is built on first use, so a
  plain schema needs no pydantic, and an undescribable type is an error when a value of
  it is first written (naming the field), not when the graph is built.
"""

from __future__ import annotations

import sys
import threading
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, get_args, get_origin

import orjson

from oncegraph.errors import ConfigError, InvalidUpdateError, StorageError

__all__ = ["PLAIN", "Codec", "TypedCodec", "codec_for", "element_type", "is_plain"]

_PLAIN_ATOMS: frozenset[Any] = frozenset(
    {str, int, float, bool, type(None), None, Any, object, list, dict}
)
_WRAPPERS = frozenset(
    {typing.Annotated, typing.Required, typing.NotRequired, typing.ClassVar, typing.Final}
)
_REPR_LIMIT = 120


class Codec(Protocol):
    """Encode a value to JSON-native Python, decode it back to the declared type."""

    @property
    def plain(self) -> bool: ...

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


@typing.final
class _Plain:
    """The identity codec of plain-JSON types."""

    __slots__ = ()
    plain = True

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, data: Any) -> Any:
        return data

    def __repr__(self) -> str:
        return "PLAIN"


PLAIN: Codec = _Plain()


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


class TypedCodec:
    """A pydantic ``TypeAdapter`` for one field (or one log entry) of a declared type.

    The adapter wraps the type in a 1-tuple so that one config (bytes as base64)
    applies even when the type is a dataclass, a TypedDict or a model, which cannot take
    a config of their own from outside; pydantic models keep their own config.
    """

    __slots__ = ("_adapter", "_lock", "field", "hint")
    plain = False

    def __init__(self, field: str, hint: Any) -> None:
        self.field = field
        self.hint = hint
        self._adapter: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TypedCodec({self.field!r}, {_type_name(self.hint)})"

    def _get(self) -> Any:
        adapter = self._adapter
        if adapter is not None:
            return adapter
        with self._lock:
            if self._adapter is None:
                self._adapter = self._build()
            return self._adapter

    def _build(self) -> Any:
        try:
            import pydantic
        except ImportError as exc:  # pragma: no cover - pydantic is in the dev extra
            raise ConfigError(
                f"state field {self.field!r} is declared {_type_name(self.hint)}; storing "
                "typed values (dataclasses, datetime, Enum, ...) needs pydantic: "
                "pip install 'oncegraph[typed]'"
            ) from exc
        config = pydantic.ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
        try:
            return pydantic.TypeAdapter(tuple[_storable(self.hint)], config=config)  # type: ignore[misc]
        except Exception as exc:
            raise InvalidUpdateError(
                f"state field {self.field!r} is declared {_type_name(self.hint)}, which "
                f"oncegraph cannot store and read back as JSON ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}). Declare a type pydantic can describe: a "
                "dataclass, a pydantic model, a TypedDict (typing_extensions.TypedDict "
                "before Python 3.12), datetime, Enum, UUID, Decimal, bytes, tuple, set, "
                "or containers of those."
            ) from exc

    def encode(self, value: Any) -> Any:
        if value is None:  # unset optional values stay None (and come back as None)
            return None
        adapter = self._get()
        try:
            return adapter.dump_python((value,), mode="json", warnings="error")[0]
        except (ValueError, TypeError) as exc:  # PydanticSerializationError is a ValueError
            raise InvalidUpdateError(
                f"state field {self.field!r} is declared {_type_name(self.hint)} but was "
                f"given {type(value).__name__} {_short(value)}; it cannot be stored as that "
                "type, so it would come back as something else after a restart. Write a "
                f"{_type_name(self.hint)}, or declare the field's type as what you store. "
                f"({_first_line(exc)})"
            ) from exc

    def coerce(self, value: Any) -> Any:
        """``value`` validated into the declared type (pydantic's lax rules)."""
        try:
            return self._get().validate_python((value,))[0]
        except ValueError as exc:
            raise InvalidUpdateError(
                f"state field {self.field!r} is declared {_type_name(self.hint)}; "
                f"{type(value).__name__} {_short(value)} is not valid for it "
                f"({_first_line(exc)})"
            ) from exc

    def decode(self, data: Any) -> Any:
        if data is None:
            return None
        adapter = self._get()
        try:
            return adapter.validate_json(orjson.dumps([data]))[0]
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise StorageError(
                f"the stored value of state field {self.field!r} is not a valid "
                f"{_type_name(self.hint)} ({_first_line(exc)}). It was written under "
                "another state schema (bump state_schema_version and register a migration) "
                "or the row was changed by hand; nothing was modified."
            ) from exc


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(lines[:3])


def _storable(tp: Any) -> Any:
    """The type the adapter uses: an abstract LangChain ``BaseMessage`` becomes the
    tagged union of every message class, so a stored ``AIMessage`` comes back as one;
    pydantic's ``SecretStr`` / ``SecretBytes`` (alone or inside a list, dict, tuple, set
    or union) are stored as their secret, not the ``"**********"`` pydantic's JSON shows
    (which would read back as a different secret). Encryption at rest keeps them secret
    in the store; masking keeps them out of what is shown."""
    if isinstance(tp, type) and tp.__name__ == "BaseMessage":
        messages = sys.modules.get("langchain_core.messages")
        if messages is not None and tp is getattr(messages, "BaseMessage", None):
            return messages.AnyMessage
    if isinstance(tp, type) and tp.__name__ in ("SecretStr", "SecretBytes"):
        import pydantic

        if issubclass(tp, (pydantic.SecretStr, pydantic.SecretBytes)):
            keep = pydantic.PlainSerializer(_secret_value, when_used="json")
            return typing.Annotated[tp, keep]
    origin = get_origin(tp)
    if origin in _REBUILT and get_args(tp):
        args = get_args(tp)
        stored = tuple(a if a is Ellipsis else _storable(a) for a in args)
        if stored != args:
            if origin in (typing.Union, types.UnionType):
                return typing.Union[stored]  # noqa: UP007 - built from a tuple of types
            return origin[stored]
    return tp


def _secret_value(value: Any) -> Any:
    return value.get_secret_value()


_REBUILT = frozenset(
    {list, dict, tuple, set, frozenset, Sequence, Mapping, typing.Union, types.UnionType}
)


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) in _WRAPPERS:
        tp = get_args(tp)[0]
    supertype = getattr(tp, "__supertype__", None)  # NewType
    while supertype is not None:
        tp = supertype
        supertype = getattr(tp, "__supertype__", None)
    return tp


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def is_plain(tp: Any, _seen: frozenset[int] = frozenset()) -> bool:
    """True when every value of ``tp`` is stored by JSON as itself (the identity codec)."""
    tp = _unwrap(tp)
    if tp in _PLAIN_ATOMS or isinstance(tp, (typing.TypeVar, str, typing.ForwardRef)):
        # A string or ForwardRef left unresolved means nothing is known: like Any.
        return True
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Literal:
        return all(a is None or type(a) in (str, int, bool) for a in args)
    if origin in (typing.Union, types.UnionType):
        return all(is_plain(a, _seen) for a in args)
    if origin in (list, Sequence):
        return all(is_plain(a, _seen) for a in args)
    if origin in (dict, Mapping):
        key = _unwrap(args[0]) if args else str
        return key in (str, Any) and all(is_plain(a, _seen) for a in args[1:])
    if _is_typeddict(tp):
        if id(tp) in _seen:  # recursive TypedDict: decided by its other fields
            return True
        hints = typing.get_type_hints(tp)
        seen = _seen | {id(tp)}
        return all(is_plain(h, seen) for h in hints.values())
    return False


def element_type(tp: Any) -> Any:
    """The item type of a list-like annotation (``list[X]``, ``Sequence[X]``,
    ``tuple[X, ...]``); ``Any`` when unparameterized."""
    tp = _unwrap(tp)
    args = get_args(tp)
    origin = get_origin(tp) or tp
    if origin in (list, Sequence, set, frozenset):
        return args[0] if args else Any
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return Any


def codec_for(field: str, tp: Any) -> Codec:
    """The codec of values declared ``tp`` in ``field``: :data:`PLAIN` or a typed one."""
    if is_plain(tp):
        return PLAIN
    return TypedCodec(field, _unwrap(tp))

