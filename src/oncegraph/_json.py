"""The one serialization format: JSON through orjson. No pickle anywhere.

``dumps``/``loads`` store values; ``canonical`` gives the normalized form whose
sha256 is an effect's ``request_hash`` (sorted keys, no insignificant whitespace).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import orjson

from oncegraph.errors import ConfigError

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
    try:
        return orjson.dumps(value, default=_default, option=_OPTS)
    except TypeError as exc:
        raise ConfigError(
            f"cannot store value: {exc}. oncegraph stores state, tool arguments and results "
            "as JSON; convert the value to dicts, lists, str, int, float, bool or None "
            "(pydantic models and dataclasses are converted for you)."
        ) from exc


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


def request_hash(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
