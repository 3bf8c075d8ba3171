"""The one serialization format: JSON through orjson. No pickle anywhere.

``dumps``/``loads`` store values; ``canonical`` gives the normalized form (sorted keys,
no insignificant whitespace) that :func:`oncegraph.ledger.keys.request_hash` hashes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import orjson

from oncegraph.errors import ConfigError, PayloadTooLargeError

#: The largest single stored value (state channel, log entry, tool argument or result).
MAX_VALUE_BYTES = int(os.environ.get("ONCEGRAPH_MAX_VALUE_BYTES", 16 * 1024 * 1024))

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_CANON = _OPTS | orjson.OPT_SORT_KEYS


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic v2 models
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


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
