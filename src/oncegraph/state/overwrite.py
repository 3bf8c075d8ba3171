"""``Overwrite``: a write that replaces a reduced field's value instead of reducing.

``return {"items": Overwrite(["b"])}`` on a field ``Annotated[list, operator.add]`` sets
the field to ``["b"]``: the reducer is not called. In one step, writes of the field that
come before the overwrite (in node order) are replaced by it, those after it are dropped,
and two overwrites of one field are an error. The JSON forms ``{"__overwrite__": v}`` and
``{"type": "__overwrite__", "value": v}`` (an ``Overwrite`` after a JSON round trip) mean
the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OVERWRITE = "__overwrite__"


@dataclass(frozen=True, slots=True)
class Overwrite:
    """Write ``value`` to a field with a reducer as it is, bypassing the reducer."""

    value: Any


def overwritten(value: Any) -> tuple[bool, Any]:
    """``(True, v)`` when ``value`` is an overwrite of ``v`` (any of its forms)."""
    if isinstance(value, Overwrite):
        return True, value.value
    if isinstance(value, dict) and 0 < len(value) <= 2:
        if len(value) == 1 and OVERWRITE in value:
            return True, value[OVERWRITE]
        if value.get("type") == OVERWRITE and "value" in value:
            return True, value["value"]
    return False, None


__all__ = ["OVERWRITE", "Overwrite", "overwritten"]
