"""The one serialization format: JSON through orjson. No pickle anywhere.

``dumps``/``loads`` store values; ``canonical`` gives the normalized form (sorted keys,
no insignificant whitespace) that :func:`oncegraph.ledger.keys.request_hash` hashes.

``dumps_state`` stores state (checkpoint values, log entries, a step's task writes, a
run's input). State arrives already encoded by its channels' codecs
(:mod:`oncegraph.state.codec`), so whatever is not a JSON native here sits at a position
whose declared type is plain JSON, and would come back as another type after a restart
(a ``datetime`` as ``str``, a dataclass as ``dict``): it is refused, naming the field,
instead of being converted the way ``dumps`` converts tool arguments and results.
A few known types (oncegraph's ``Command`` and ``Send``, LangChain messages) have a
tagged JSON form there instead (:func:`register_tagged`), which :func:`untag` builds
back into the value when state is read.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from oncegraph.errors import ConfigError, InvalidUpdateError, PayloadTooLargeError

#: The largest single stored value (state channel, log entry, tool argument or result).
MAX_VALUE_BYTES = int(os.environ.get("ONCEGRAPH_MAX_VALUE_BYTES", 16 * 1024 * 1024))

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_CANON = _OPTS | orjson.OPT_SORT_KEYS
# No OPT_NON_STR_KEYS and no numpy: both would come back as something else.
_STATE_OPTS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic v2 models
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: The key of a tagged JSON form: ``{TAG: "<tag>", "value": <JSON>}``.
TAG = "__oncegraph_type__"

_TAGGED: list[tuple[str, Callable[[Any], bool], Callable[[Any], Any]]] = []
_UNTAGGED: dict[str, Callable[[Any], Any]] = {}


def register_tagged(
    tag: str,
    matches: Callable[[Any], bool],
    to_json: Callable[[Any], Any],
    from_json: Callable[[Any], Any],
) -> None:
    """Give the values ``matches`` accepts a tagged JSON form at plain state positions.

    ``to_json`` turns a value into JSON-able data (it may hold other tagged values);
    ``from_json`` builds the value again from that data, already untagged. Only known
    types register (``Command``, ``Send``, LangChain messages): reading a tag never runs
    anything but its registered constructor.
    """
    if tag in _UNTAGGED:
        return
    _TAGGED.append((tag, matches, to_json))
    _UNTAGGED[tag] = from_json


def _refuse(value: Any) -> Any:
    for tag, matches, to_json in _TAGGED:
        if matches(value):
            return {TAG: tag, "value": to_json(value)}
    raise TypeError(type(value).__name__)


def untag(value: Any) -> Any:
    """``value`` with each tagged JSON form (see :func:`register_tagged`) built again as
    its value; untouched (the same object) when it holds none. An unknown tag stays as
    stored."""
    kind = type(value)
    if kind is dict and TAG in value and len(value) == 2 and "value" in value:
        build = _UNTAGGED.get(value[TAG])
        if build is not None:
            return build(untag(value["value"]))
    if kind is dict or kind is list:  # a copy made only where a nested value changes
        pairs = value.items() if kind is dict else enumerate(value)
        out: Any = None
        for key, item in pairs:
            if type(item) in (dict, list):
                new = untag(item)
                if new is not item:
                    if out is None:
                        out = kind(value)
                    out[key] = new
        return value if out is None else out
    return value


def dumps(value: Any) -> bytes:
    """JSON bytes of ``value``; over :data:`MAX_VALUE_BYTES` is a ``PayloadTooLargeError``
    raised before anything is written."""
    try:
        data = orjson.dumps(value, default=_default, option=_OPTS)
    except TypeError as exc:
        raise ConfigError(
            f"cannot store value: {exc}. oncegraph stores state, tool arguments and results "
            "as JSON; convert the value to dicts, lists, str, int, float, bool or None "
            "(pydantic models and dataclasses are converted for you)."
        ) from exc
    return _checked(data)


def dumps_state(value: Any, *, field: str | None = None) -> bytes:
    """JSON bytes of encoded state. A value JSON would not give back as itself is an
    :class:`InvalidUpdateError` naming ``field`` (or, for a mapping of fields, the
    first field that holds one); over :data:`MAX_VALUE_BYTES` a ``PayloadTooLargeError``."""
    try:
        data = orjson.dumps(value, default=_refuse, option=_STATE_OPTS)
    except TypeError as exc:
        raise _state_error(value, field, exc) from exc
    return _checked(data)


def dumps_state_str(value: Any, *, field: str | None = None) -> str:
    return dumps_state(value, field=field).decode()


def _state_error(value: Any, field: str | None, exc: TypeError) -> InvalidUpdateError:
    path = _culprit(value)
    if field is None and path:
        field, path = path[0].lstrip("."), path[1:]
    where = f"state field {field!r}" if field is not None else "a state value"
    at = f" at {''.join(path)}" if path else ""
    return InvalidUpdateError(
        f"{where} cannot be stored as declared{at}: {exc}. Its declared type is plain JSON "
        "(str, int, float, bool, None, list, dict, Any) there, so the value would come back "
        "as another type after a restart (a datetime as str, a dataclass as dict, a set as "
        "list, dict keys as str). Declare the type you store (for example `when: datetime`, "
        "`item: Item`, `tags: set[str]`), or store a JSON value."
    )


def _culprit(value: Any) -> list[str]:
    """The path (``[".key", "[3]", ...]``) to the first value orjson refuses."""
    if isinstance(value, Mapping):
        items: Any = ((f".{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return []
    for step, item in items:
        try:
            orjson.dumps(item, default=_refuse, option=_STATE_OPTS)
        except TypeError:
            return [step, *_culprit(item)]
    return []


def _checked(data: bytes) -> bytes:
    if len(data) > MAX_VALUE_BYTES:
        raise PayloadTooLargeError(
            f"a value of {len(data):,} bytes is over the storage limit of {MAX_VALUE_BYTES:,} "
            "bytes; nothing was written. Keep large blobs outside the state (a file or object "
            "store) and store a reference, or raise ONCEGRAPH_MAX_VALUE_BYTES."
        )
    return data


def dumps_str(value: Any) -> str:
    return dumps(value).decode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    if isinstance(data, memoryview):
        data = bytes(data)
    return orjson.loads(data)


def canonical(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=_default, option=_CANON)
    except TypeError as exc:
        raise ConfigError(f"cannot hash request: {exc}; pass JSON-compatible arguments") from exc
